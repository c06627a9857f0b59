//! The closed sets of inputs and outputs: [`Command`] in, [`Response`] out.

use serde::{Deserialize, Serialize};

use crate::acme::{AcmeCommand, AcmeError, AcmeReply};
use crate::challenges::{ChallengeCommand, ChallengeError, ChallengeReply};
use crate::client_requests::{ClientCommand, ClientError, ClientReply, ClientRequest};
use crate::ct::{CtCommand, CtError, CtReply};
use crate::leases::{Lease, LeaseCommand, LeaseError, LeaseReply};
use crate::pipelines::{PipelineCommand, PipelineError, PipelineReply, PipelineTickReport};
use crate::sessions::{SessionCommand, SessionError, SessionReply, SessionTickReport};

/// Everything that can change the state; one variant family per module.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A lease command.
    Lease(LeaseCommand),
    /// A challenge-token command.
    Challenge(ChallengeCommand),
    /// A Certificate Transparency log command.
    Ct(CtCommand),
    /// An issuance session command.
    Session(SessionCommand),
    /// A transaction pipeline command.
    Pipeline(PipelineCommand),
    /// Advance the machine clock and reclaim what has expired. Proposed periodically by the
    /// leader; it decides nothing that time alone has not already decided.
    Tick,
    /// A client-session command (register, close).
    Client(ClientCommand),
    /// A client's numbered request: `command` is applied at most once, and never after the
    /// client moved past it (see [`crate::clients`]). The answer is `command`'s own, or
    /// [`Response::Client`] with an error when the request is refused.
    Once {
        /// Which request of which client.
        request: ClientRequest,
        /// The lease, challenge, CT, session or pipeline command.
        command: Box<Command>,
    },
    /// An ACME command (accounts, orders, authorizations, revocations).
    Acme(AcmeCommand),
}

/// What [`crate::apply`] answers, one variant per [`Command`] family.
///
/// An `Err` inside means the command was refused and the state is unchanged (but for the machine
/// clock and applied index, which every command advances).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a lease command.
    Lease(Result<LeaseReply, LeaseError>),
    /// The answer to a challenge-token command.
    Challenge(Result<ChallengeReply, ChallengeError>),
    /// The answer to a CT log command.
    Ct(Result<CtReply, CtError>),
    /// The answer to a session command.
    Session(Result<SessionReply, SessionError>),
    /// The answer to a pipeline command.
    Pipeline(Result<PipelineReply, PipelineError>),
    /// The answer to a tick (boxed: far larger than the other answers).
    Tick(Box<TickReply>),
    /// The answer to a client-session command, or the refusal of a client's numbered request.
    Client(Result<ClientReply, ClientError>),
    /// The answer to an ACME command.
    Acme(Result<AcmeReply, AcmeError>),
}

impl Response {
    /// Whether the command was refused, which promises that it changed nothing but the machine
    /// clock and the applied index.
    pub fn is_refusal(&self) -> bool {
        match self {
            Response::Lease(result) => result.is_err(),
            Response::Challenge(result) => result.is_err(),
            Response::Ct(result) => result.is_err(),
            Response::Session(result) => result.is_err(),
            Response::Pipeline(result) => result.is_err(),
            Response::Client(result) => result.is_err(),
            Response::Acme(result) => result.is_err(),
            Response::Tick(_) => false,
        }
    }
}

/// What a tick did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickReply {
    /// Leases reclaimed because their time ran out, oldest expiry first.
    pub expired_leases: Vec<Lease>,
    /// Claims taken back, sessions timed out, archived and deleted.
    pub sessions: SessionTickReport,
    /// Transactions reaped, woken, archived and deleted; windows and records expired.
    pub pipelines: PipelineTickReport,
    /// Client sessions removed because they sat idle past their time.
    pub expired_clients: usize,
    /// Whether more idle client sessions are due than one tick removes.
    pub more_clients: bool,
}

impl TickReply {
    /// Whether some part of the tick reached its bound and left work: tick again soon.
    pub fn more(&self) -> bool {
        self.sessions.more || self.pipelines.more || self.more_clients
    }
}
