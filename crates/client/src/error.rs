//! What a call can fail with, and which failures are worth another attempt.

use tonic::{Code, Status};

/// The metadata entry in which a node puts the stable, machine-readable reason of a refusal
/// (for example `not-holder`, `invalid-ttl`, `no-leader`, `outcome-unknown`).
pub const ERROR_REASON_KEY: &str = certus_proto::ERROR_REASON_METADATA;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// A node answered with an error that another attempt would not change (for example
    /// `INVALID_ARGUMENT`, `FAILED_PRECONDITION`, `NOT_FOUND`, `RESOURCE_EXHAUSTED`); or, for
    /// a call to one node, any error that node answered.
    #[error("refused ({}): {message}", if reason.is_empty() { code_name(*code) } else { reason })]
    Refused {
        /// The gRPC status code.
        code: Code,
        /// The stable reason from the `certus-error` metadata entry (an oversized message is
        /// `message-too-large`), or `""` if there was none (a refusal by the gRPC layer itself).
        reason: String,
        /// What the node said was wrong.
        message: String,
    },
    /// No node served the call before the deadline or the attempts ran out.
    #[error("unavailable after {attempts} attempt(s): {last_error}")]
    Unavailable {
        /// How many attempts were made.
        attempts: u32,
        /// What the last attempt failed with.
        last_error: String,
        /// The stable reason the last attempt was refused with, when a node answered with one
        /// worth retrying (`no-leader`: nothing was proposed; `outcome-unknown`: a write may or
        /// may not have taken effect); `""` for a timeout or a lost connection.
        last_reason: String,
        /// Whether the call may have taken effect. `false` only when no attempt can have: each
        /// one either could not open its connection (the request was never sent) or was
        /// answered `no-leader` (nothing was proposed). A write that failed with `false` was
        /// certainly not applied; with `true` it may have been, now or later.
        may_have_taken_effect: bool,
    },
    /// An endpoint is not of the form `host:port`, or no endpoint was given.
    #[error("invalid endpoint {0}")]
    InvalidEndpoint(String),
    /// The client's own configuration is unusable (for example a token that cannot be sent).
    #[error("invalid client configuration: {0}")]
    InvalidConfig(String),
}

impl ClientError {
    /// The stable reason of a refusal (`""` if the node gave none, and for the other variants).
    pub fn reason(&self) -> &str {
        match self {
            ClientError::Refused { reason, .. } => reason,
            ClientError::Unavailable { .. }
            | ClientError::InvalidEndpoint(_)
            | ClientError::InvalidConfig(_) => "",
        }
    }

    /// The gRPC code of a refusal; `UNAVAILABLE` when no node served the call, and
    /// `INVALID_ARGUMENT` for an invalid endpoint.
    pub fn code(&self) -> Code {
        match self {
            ClientError::Refused { code, .. } => *code,
            ClientError::Unavailable { .. } => Code::Unavailable,
            ClientError::InvalidEndpoint(_) | ClientError::InvalidConfig(_) => {
                Code::InvalidArgument
            }
        }
    }

    /// The refusal a status stands for, with its reason taken from the metadata.
    pub fn from_status(status: &Status) -> ClientError {
        ClientError::Refused {
            code: status.code(),
            reason: reason_of(status).to_owned(),
            message: status.message().to_owned(),
        }
    }
}

/// The `certus-error` reason of a status, `""` if it has none (or one that is not ASCII).
pub(crate) fn reason_of(status: &Status) -> &str {
    status
        .metadata()
        .get(ERROR_REASON_KEY)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// A code's name as the gRPC specification writes it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// What to do after an attempt failed with a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// The connection failed (or the status was made on this side from a transport error):
    /// drop the channel and try another node.
    Transport,
    /// The node answered that it cannot serve now (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, for
    /// example `no-leader` or `outcome-unknown`): find the leader again and retry.
    Retry,
    /// Anything else: return it to the caller.
    Refuse,
}

/// Sorts a failed attempt's status.
///
/// A status built by this side from a transport error carries the error as its source (a
/// status decoded from a node's answer never does), and has no `certus-error` reason; those
/// are transport failures whatever their code (hyper and h2 failures surface as `UNKNOWN`,
/// `INTERNAL` or `CANCELLED` as well as `UNAVAILABLE`).
pub(crate) fn disposition(status: &Status) -> Disposition {
    let answered_by_node = !reason_of(status).is_empty();
    let made_here = std::error::Error::source(status).is_some()
        || status.message().starts_with("Service was not ready");
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded if answered_by_node => Disposition::Retry,
        Code::Unavailable | Code::DeadlineExceeded => Disposition::Transport,
        Code::Unknown | Code::Internal | Code::Cancelled if made_here && !answered_by_node => {
            Disposition::Transport
        }
        _ => Disposition::Refuse,
    }
}

/// The reason a node gives when a write was refused before anything was proposed.
pub(crate) const NOTHING_PROPOSED: &str = "no-leader";

/// Whether a failed attempt may have taken effect: not if its connection could not be opened
/// (the request never left this side) or the node answered that nothing was proposed.
pub(crate) fn may_have_taken_effect(status: &Status) -> bool {
    !(certus_proto::connection_never_opened(status) || reason_of(status) == NOTHING_PROPOSED)
}

/// A one-line description of a failed attempt, for [`ClientError::Unavailable`] and logs.
pub(crate) fn describe(endpoint: &str, status: &Status) -> String {
    let reason = reason_of(status);
    let reason = if reason.is_empty() {
        code_name(status.code())
    } else {
        reason
    };
    format!("{endpoint}: {reason}: {}", status.message())
}

#[cfg(test)]
mod tests {
    use tonic::metadata::MetadataValue;

    use super::*;

    fn refusal(code: Code, reason: &'static str, message: &str) -> Status {
        let mut status = Status::new(code, message);
        status
            .metadata_mut()
            .insert(ERROR_REASON_KEY, MetadataValue::from_static(reason));
        status
    }

    #[test]
    fn the_reason_comes_from_the_certus_error_metadata() {
        let status = refusal(Code::FailedPrecondition, "not-holder", "held by x until 5");
        assert_eq!(reason_of(&status), "not-holder");
        let error = ClientError::from_status(&status);
        assert_eq!(
            error,
            ClientError::Refused {
                code: Code::FailedPrecondition,
                reason: "not-holder".to_owned(),
                message: "held by x until 5".to_owned(),
            }
        );
        assert_eq!(error.reason(), "not-holder");
        assert_eq!(error.code(), Code::FailedPrecondition);
        assert_eq!(error.to_string(), "refused (not-holder): held by x until 5");
    }

    #[test]
    fn a_status_without_a_reason_has_an_empty_one_and_shows_its_code() {
        let status = Status::resource_exhausted("message too large");
        assert_eq!(reason_of(&status), "");
        let error = ClientError::from_status(&status);
        assert_eq!(error.reason(), "");
        assert_eq!(
            error.to_string(),
            "refused (RESOURCE_EXHAUSTED): message too large"
        );

        // Other metadata is not a reason.
        let mut status = Status::not_found("nothing");
        status
            .metadata_mut()
            .insert("other-key", MetadataValue::from_static("not-holder"));
        assert_eq!(reason_of(&status), "");
    }

    #[test]
    fn only_unavailable_and_deadline_answers_are_retried() {
        for (code, reason) in [
            (Code::Unavailable, "no-leader"),
            (Code::Unavailable, "outcome-unknown"),
            (Code::Unavailable, "unavailable"),
            (Code::DeadlineExceeded, "timeout"),
        ] {
            assert_eq!(
                disposition(&refusal(code, reason, "m")),
                Disposition::Retry,
                "{reason}"
            );
        }
        for (code, reason) in [
            (Code::InvalidArgument, "invalid-ttl"),
            (Code::FailedPrecondition, "not-holder"),
            (Code::NotFound, "unknown-lease"),
            (Code::ResourceExhausted, "too-many-leases"),
        ] {
            assert_eq!(
                disposition(&refusal(code, reason, "m")),
                Disposition::Refuse,
                "{reason}"
            );
        }
        assert_eq!(
            disposition(&Status::resource_exhausted("too big")),
            Disposition::Refuse
        );
        // An UNKNOWN decoded from a node's answer (no source) is not retried.
        assert_eq!(disposition(&Status::unknown("boom")), Disposition::Refuse);
        assert_eq!(disposition(&Status::internal("boom")), Disposition::Refuse);
    }

    #[test]
    fn failures_made_on_this_side_are_transport_failures() {
        assert_eq!(
            disposition(&Status::unavailable("connection refused")),
            Disposition::Transport
        );
        assert_eq!(
            disposition(&Status::deadline_exceeded("late")),
            Disposition::Transport
        );
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let status = Status::from_error(Box::new(io));
        assert_eq!(status.code(), Code::Unknown);
        assert_eq!(disposition(&status), Disposition::Transport);
        let not_ready = Status::unknown("Service was not ready: transport error");
        assert_eq!(disposition(&not_ready), Disposition::Transport);
    }

    #[test]
    fn only_a_connection_never_opened_or_nothing_proposed_has_no_effect() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let never_opened = Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        assert_eq!(never_opened.code(), Code::Unavailable);
        assert!(!may_have_taken_effect(&never_opened));
        assert!(!may_have_taken_effect(&refusal(
            Code::Unavailable,
            "no-leader",
            "election"
        )));
        // A connection that broke after it opened may have carried the request.
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert!(may_have_taken_effect(&Status::from_error(Box::new(reset))));
        assert!(may_have_taken_effect(&refusal(
            Code::Unavailable,
            "outcome-unknown",
            "m"
        )));
        // The message alone is not a connect failure: tonic says so with the source.
        assert!(may_have_taken_effect(&Status::unavailable(
            "transport error"
        )));
        assert!(may_have_taken_effect(&Status::deadline_exceeded("late")));
    }

    #[test]
    fn descriptions_name_the_endpoint_and_the_reason() {
        let status = refusal(
            Code::Unavailable,
            "no-leader",
            "no leader is available: election",
        );
        assert_eq!(
            describe("127.0.0.1:7101", &status),
            "127.0.0.1:7101: no-leader: no leader is available: election"
        );
        assert_eq!(
            describe("n:1", &Status::unavailable("connection refused")),
            "n:1: UNAVAILABLE: connection refused"
        );
    }
}
