//! What a client session's commands carry: the client's id, a request's numbering, the
//! session commands, their replies and refusals. Apart from `clients.rs` (which applies them)
//! because `Command` wraps them and `clients.rs` applies `Command`s: kept here, the types
//! import neither.

use serde::{Deserialize, Serialize};

/// A registered client. Drawn at random by the node that proposes the registration, so that one
/// client cannot guess another's; never 0.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct ClientId(pub u64);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Which request of which client a wrapped command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRequest {
    /// The registered client.
    pub client: ClientId,
    /// This request's number, from 1, in the order the client made its requests.
    pub sequence: u64,
    /// The lowest number the client still waits for an answer to; at most `sequence`.
    pub first_outstanding: u64,
}

impl ClientRequest {
    /// Checks the shape of the request, before any state is consulted.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.client.0 == 0 {
            return Err(ClientError::InvalidRequest(
                "client id 0 is not a session; register first".to_owned(),
            ));
        }
        if self.sequence == 0 {
            return Err(ClientError::InvalidRequest(
                "sequence numbers start at 1".to_owned(),
            ));
        }
        if self.first_outstanding == 0 || self.first_outstanding > self.sequence {
            return Err(ClientError::InvalidRequest(format!(
                "first outstanding sequence {} must be between 1 and the request's own {}",
                self.first_outstanding, self.sequence
            )));
        }
        Ok(())
    }
}

/// The client-session commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientCommand {
    /// Open a session under `client` (a fresh random id).
    Register {
        /// The new session's id.
        client: ClientId,
    },
    /// End a session: its remembered answers are dropped.
    Close {
        /// The session.
        client: ClientId,
    },
}

/// What a successful client-session command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientReply {
    /// The session is open.
    Registered {
        /// Its id.
        client: ClientId,
        /// It expires after this long without a request.
        idle_ms: u64,
        /// How far past its first outstanding request a request may be numbered.
        outstanding_max: u64,
    },
    /// The session is closed.
    Closed {
        /// Whether it was open.
        existed: bool,
    },
}

/// Why a client request or command was refused. A refused request is not applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ClientError {
    /// No such session: never registered, closed, expired or evicted. The request was not
    /// applied; register again.
    #[error(
        "no client session {client}: it expired, was closed or evicted, or never existed; this \
         copy was not applied (an earlier one may have been)"
    )]
    UnknownClient {
        /// The id asked for.
        client: ClientId,
    },
    /// The client already moved past this request; it was not applied now (it may have been
    /// applied once before, and will never be applied again).
    #[error(
        "request {sequence} is below the client's first outstanding request {first_outstanding}: \
         superseded, not applied"
    )]
    Superseded {
        /// The request's number.
        sequence: u64,
        /// The session's first outstanding number.
        first_outstanding: u64,
    },
    /// Too many requests between the first outstanding one and this one.
    #[error(
        "request {sequence} is {max} or more past the first outstanding request \
         {first_outstanding}; wait for earlier answers"
    )]
    TooManyOutstanding {
        /// The request's number.
        sequence: u64,
        /// The session's first outstanding number.
        first_outstanding: u64,
        /// The limit.
        max: u64,
    },
    /// A registration drew an id that is in use; draw another.
    #[error("client id {client} is taken")]
    ClientIdTaken {
        /// The id.
        client: ClientId,
    },
    /// A malformed request (bad numbers, or a command that cannot be wrapped).
    #[error("invalid client request: {0}")]
    InvalidRequest(String),
    /// Every session has been used too recently to be evicted; try again later.
    #[error(
        "at most {max} client sessions may be open, and none has been idle long enough to close"
    )]
    TooManyClients {
        /// The limit.
        max: usize,
    },
    /// The request was applied (once, and never again), but its answer was too large to keep
    /// for a copy.
    #[error("request {sequence} was applied; its answer was too large to keep")]
    AnswerNotKept {
        /// The request's number.
        sequence: u64,
    },
}
