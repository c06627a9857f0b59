//! Between the client API's protobuf messages and the state machine: one module per service, of
//! pure functions. A write request is validated into its command (`request → Result<command,
//! Status>`), a read request into a [`Query`] over the applied state, and the state machine's
//! answer turned into the reply (`reply → Result<wire reply, Status>`). No IO, no clock, no
//! replica: a handler in [`crate::services`] converts, calls the replica, converts back; the
//! fuzz target `grpc_requests` calls the same functions.
//!
//! A request refused here is never proposed, so it changes nothing, not even the applied index.
//! Each refusal is a gRPC status with the stable reason in `certus-error` ([`crate::errors`]);
//! bounds the state machine enforces anyway are checked here with [`in_range`] and refused in
//! the state machine's own words.

/// A configuration both ways between the state machine's type and the wire's, whose fields are
/// the same: `$to_wire` and `$from_wire` copy `$field`s (every field, or it does not compile).
macro_rules! config_both_ways {
    ($core:path, $wire:path, $to_wire:ident, $from_wire:ident, [$($field:ident),+ $(,)?]) => {
        config_both_ways!($core, $wire, $to_wire, $from_wire, [$($field),+], wire_only: []);
    };
    // `wire_only`: fields the wire message has beside the configuration's (left empty here,
    // filled by the caller from elsewhere in the state).
    ($core:path, $wire:path, $to_wire:ident, $from_wire:ident, [$($field:ident),+ $(,)?],
     wire_only: [$($extra:ident),* $(,)?]) => {
        /// The configuration for the wire.
        pub fn $to_wire(config: &$core) -> $wire {
            $wire { $($field: config.$field,)+ $($extra: Default::default()),* }
        }

        /// The configuration from the wire (unchecked: the caller validates it).
        pub fn $from_wire(config: &$wire) -> $core {
            $core { $($field: config.$field),+ }
        }
    };
}

pub mod admin;
pub mod clients;
pub mod leases;
pub mod log;
pub mod pipelines;
pub mod sessions;

use std::fmt::{Debug, Display};

use certus_core::ct::{CtCommand, CtError, CtReply};
use certus_core::{
    ChallengeCommand, ChallengeError, ChallengeReply, ClientCommand, ClientError, ClientReply,
    Command, LeaseCommand, LeaseError, LeaseReply, PipelineCommand, PipelineError, PipelineReply,
    Response, SessionCommand, SessionError, SessionReply, State,
};
use tonic::{Code, Status};

use crate::errors::{
    challenge_status, client_status, ct_status, lease_status, pipeline_status, session_status,
    status,
};

/// A command family of the state machine, as the services propose it: wrapped into a
/// [`Command`], its answer taken back out of the [`Response`], a refusal answered with its status.
pub trait Family: Sized {
    /// What the state machine answers a command of the family with.
    type Reply;
    /// Why it refuses one.
    type Error;
    /// The command, as proposed.
    fn into_command(self) -> Command;
    /// The family's answer in `response`, or `response` back when it is another family's.
    fn answer(response: Response) -> Result<Result<Self::Reply, Self::Error>, Response>;
    /// The status a refusal is answered with.
    fn refusal(error: &Self::Error) -> Status;
}

/// A family whose state machine refuses numbers out of their range; the services check those
/// bounds before proposing, with [`in_range`].
pub trait Bounded: Family {
    /// The state machine's refusal of `got` for `field`, which must be within `min..=max`.
    fn out_of_range(field: String, got: u64, min: u64, max: u64) -> Self::Error;
}

macro_rules! families {
    ($($command:ty => $variant:ident($reply:ty, $error:ty), $status:path;)*) => {$(
        impl Family for $command {
            type Reply = $reply;
            type Error = $error;

            fn into_command(self) -> Command {
                Command::$variant(self)
            }

            fn answer(response: Response) -> Result<Result<$reply, $error>, Response> {
                match response {
                    Response::$variant(result) => Ok(result),
                    other => Err(other),
                }
            }

            fn refusal(error: &$error) -> Status {
                $status(error)
            }
        }
    )*};
}

families! {
    LeaseCommand => Lease(LeaseReply, LeaseError), lease_status;
    ChallengeCommand => Challenge(ChallengeReply, ChallengeError), challenge_status;
    SessionCommand => Session(SessionReply, SessionError), session_status;
    PipelineCommand => Pipeline(PipelineReply, PipelineError), pipeline_status;
    CtCommand => Ct(CtReply, CtError), ct_status;
    ClientCommand => Client(ClientReply, ClientError), client_status;
}

impl Bounded for SessionCommand {
    fn out_of_range(field: String, got: u64, min: u64, max: u64) -> SessionError {
        SessionError::OutOfRange {
            field,
            got,
            min,
            max,
        }
    }
}

impl Bounded for PipelineCommand {
    fn out_of_range(field: String, got: u64, min: u64, max: u64) -> PipelineError {
        PipelineError::OutOfRange {
            field,
            got,
            min,
            max,
        }
    }
}

/// The answer of family `F` in `response`, its refusal kept typed; another family's answer is
/// an internal error (the state machine answers every command in its own family).
pub fn answer<F: Family>(response: Response) -> Result<Result<F::Reply, F::Error>, Status> {
    F::answer(response).map_err(|other| {
        status(
            Code::Internal,
            "internal",
            format!("the state machine answered another command family: {other:?}"),
        )
    })
}

/// The reply of family `F` in `response`, a refusal answered with its status.
pub fn reply<F: Family>(response: Response) -> Result<F::Reply, Status> {
    answer::<F>(response)?.map_err(|error| F::refusal(&error))
}

/// A read: a pure function of the applied state and the reader's clock, run after the read
/// barrier (see `Replica::query`).
pub trait Query<T>: FnOnce(&State, u64) -> Result<T, Status> {}

impl<T, F: FnOnce(&State, u64) -> Result<T, Status>> Query<T> for F {}

/// `INVALID_ARGUMENT` for a malformed `field`.
pub fn invalid(field: &str, error: impl Display) -> Status {
    status(
        Code::InvalidArgument,
        "invalid-argument",
        format!("{field}: {error}"),
    )
}

/// The state machine answered `what` with a reply of another step: a bug, answered `INTERNAL`.
pub fn unexpected(what: &str, reply: &impl Debug) -> Status {
    status(
        Code::Internal,
        "internal",
        format!("{what} answered {reply:?}"),
    )
}

/// A required text field (empty gets the type's own "is empty" error).
pub fn required<T, E: Display>(
    value: String,
    field: &str,
    parse: impl FnOnce(String) -> Result<T, E>,
) -> Result<T, Status> {
    parse(value).map_err(|error| invalid(field, error))
}

/// An optional text field: empty means absent.
pub fn optional<T, E: Display>(
    value: String,
    field: &str,
    parse: impl FnOnce(String) -> Result<T, E>,
) -> Result<Option<T>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    required(value, field, parse).map(Some)
}

/// The state machine's refusal of `got` for `field` (family `F`), as its status.
pub fn out_of_range<F: Bounded>(field: &str, got: u64, min: u64, max: u64) -> Status {
    F::refusal(&F::out_of_range(field.to_owned(), got, min, max))
}

/// A number the state machine of family `F` bounds, checked here so a bad one is never
/// proposed; the refusal reads as the state machine's would.
pub fn in_range<F: Bounded>(field: &str, got: u64, min: u64, max: u64) -> Result<(), Status> {
    if (min..=max).contains(&got) {
        return Ok(());
    }
    Err(out_of_range::<F>(field, got, min, max))
}

/// A page size: 0 means the default; larger than the maximum is clamped.
pub fn page_limit(limit: u32) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if limit == 0 {
        certus_core::limits::LIST_PAGE_MAX
    } else {
        limit.min(certus_core::limits::LIST_PAGE_MAX)
    }
}

/// An optional value for the wire: empty when absent.
pub fn text(value: Option<&impl Display>) -> String {
    value.map(ToString::to_string).unwrap_or_default()
}
