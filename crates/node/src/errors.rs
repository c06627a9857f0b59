//! Errors a client sees: each becomes a gRPC status with a message that says what was wrong and
//! an ASCII metadata entry `certus-error` with a stable, machine-readable reason.

use certus_core::ct::CtError;
use certus_core::{ChallengeError, ClientError, LeaseError, PipelineError, SessionError};
use tonic::{Code, Status};

/// The metadata key that carries the stable reason of a refusal.
pub const ERROR_REASON_KEY: &str = certus_proto::ERROR_REASON_METADATA;

/// Why a request to this node was not served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The request is malformed; nothing was changed.
    #[error("{0}")]
    InvalidArgument(String),
    /// No leader is reachable now; for a write, nothing was proposed. Safe to retry.
    #[error("no leader is available: {0}")]
    NoLeader(String),
    /// The write reached Raft but its outcome is unknown (leadership changed or a peer failed
    /// mid-flight). The client may retry; lease and token commands are safe to repeat.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The node is shutting down or its storage failed.
    #[error("node unavailable: {0}")]
    Unavailable(String),
    /// The request waited longer than the node allows.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The request is valid but refused by the state (for example, a membership change the
    /// cluster cannot take now).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The client-session layer refused a numbered request; it was not applied.
    #[error("{0}")]
    Client(ClientError),
}

impl ServiceError {
    fn reason(&self) -> &'static str {
        match self {
            ServiceError::InvalidArgument(_) => "invalid-argument",
            ServiceError::NoLeader(_) => "no-leader",
            ServiceError::OutcomeUnknown(_) => "outcome-unknown",
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::Timeout(_) => "timeout",
            ServiceError::FailedPrecondition(_) => "failed-precondition",
            ServiceError::Client(_) => "client-session",
        }
    }

    fn code(&self) -> Code {
        match self {
            ServiceError::InvalidArgument(_) => Code::InvalidArgument,
            ServiceError::NoLeader(_)
            | ServiceError::OutcomeUnknown(_)
            | ServiceError::Unavailable(_) => Code::Unavailable,
            ServiceError::Timeout(_) => Code::DeadlineExceeded,
            ServiceError::FailedPrecondition(_) | ServiceError::Client(_) => {
                Code::FailedPrecondition
            }
        }
    }
}

/// A status with a stable reason in metadata.
pub fn status(code: Code, reason: &'static str, message: impl Into<String>) -> Status {
    let mut status = Status::new(code, message);
    status.metadata_mut().insert(
        ERROR_REASON_KEY,
        tonic::metadata::MetadataValue::from_static(reason),
    );
    status
}

impl From<ServiceError> for Status {
    fn from(error: ServiceError) -> Status {
        if let ServiceError::Client(error) = &error {
            return client_status(error);
        }
        status(error.code(), error.reason(), error.to_string())
    }
}

/// The status for a refused lease command.
pub fn lease_status(error: &LeaseError) -> Status {
    let (code, reason) = match error {
        LeaseError::NotHolder { .. } => (Code::FailedPrecondition, "not-holder"),
        LeaseError::Expired { .. } => (Code::FailedPrecondition, "expired"),
        LeaseError::Unknown => (Code::NotFound, "unknown-lease"),
        LeaseError::FenceRejected { .. } => (Code::FailedPrecondition, "fence-rejected"),
        LeaseError::InvalidTtl { .. } => (Code::InvalidArgument, "invalid-ttl"),
        LeaseError::InvalidText(_) => (Code::InvalidArgument, "invalid-argument"),
        LeaseError::TooManyLeases { .. } => (Code::ResourceExhausted, "too-many-leases"),
    };
    status(code, reason, error.to_string())
}

/// The status for a refusal by the client-session layer (`certus.v1.Clients` and the numbered
/// requests of every write RPC): the request was not applied.
pub fn client_status(error: &ClientError) -> Status {
    let (code, reason) = match error {
        ClientError::UnknownClient { .. } => (Code::NotFound, "unknown-client"),
        ClientError::Superseded { .. } => (Code::FailedPrecondition, "superseded"),
        ClientError::TooManyOutstanding { .. } => (Code::ResourceExhausted, "too-many-outstanding"),
        ClientError::ClientIdTaken { .. } => (Code::AlreadyExists, "client-id-taken"),
        ClientError::InvalidRequest(_) => (Code::InvalidArgument, "invalid-argument"),
        ClientError::TooManyClients { .. } => (Code::ResourceExhausted, "too-many-clients"),
        ClientError::AnswerNotKept { .. } => (Code::FailedPrecondition, "answer-not-kept"),
    };
    status(code, reason, error.to_string())
}

/// The status for a refused challenge-token command.
pub fn challenge_status(error: &ChallengeError) -> Status {
    let (code, reason) = match error {
        ChallengeError::InvalidText(_) => (Code::InvalidArgument, "invalid-argument"),
        ChallengeError::TooManyChallenges { .. } => {
            (Code::ResourceExhausted, "too-many-challenges")
        }
    };
    status(code, reason, error.to_string())
}

/// The status for a refused pipeline command. Each variant is mapped on purpose: a missing
/// thing is `NOT_FOUND`, a state that forbids the step is `FAILED_PRECONDITION`, a malformed
/// value is `INVALID_ARGUMENT`, a full table is `RESOURCE_EXHAUSTED`; the message names the field
/// or the thing.
pub fn pipeline_status(error: &PipelineError) -> Status {
    let (code, reason) = match error {
        PipelineError::InvalidText(_) => (Code::InvalidArgument, "invalid-argument"),
        PipelineError::UnknownPipeline { .. } => (Code::NotFound, "unknown-pipeline"),
        PipelineError::PipelineInUse { .. } => (Code::FailedPrecondition, "pipeline-in-use"),
        PipelineError::UnknownTransaction { .. } => (Code::NotFound, "unknown-transaction"),
        PipelineError::StaleClaim { .. } => (Code::FailedPrecondition, "stale-claim"),
        PipelineError::CancelRequested { .. } => (Code::FailedPrecondition, "cancel-requested"),
        PipelineError::NotTerminal { .. } => (Code::InvalidArgument, "not-terminal"),
        PipelineError::TooMany { .. } => (Code::ResourceExhausted, "too-many"),
        PipelineError::OutOfRange { .. } => (Code::InvalidArgument, "out-of-range"),
        PipelineError::InvalidConfig { .. } => (Code::InvalidArgument, "invalid-config"),
    };
    status(code, reason, error.to_string())
}

/// The status for a refused session command.
pub fn session_status(error: &SessionError) -> Status {
    let (code, reason) = session_refusal(error);
    status(code, reason, error.to_string())
}

/// The code and `certus-error` reason a refused session command is answered with (also per
/// item, where a batch or a stream answers steps one by one).
pub fn session_refusal(error: &SessionError) -> (Code, &'static str) {
    match error {
        SessionError::UnknownSession { .. } => (Code::NotFound, "unknown-session"),
        SessionError::WrongStage { .. } => (Code::FailedPrecondition, "wrong-stage"),
        SessionError::StaleClaim { .. } => (Code::FailedPrecondition, "stale-claim"),
        SessionError::NotLive { .. } => (Code::FailedPrecondition, "not-live"),
        SessionError::NotDone { .. } => (Code::FailedPrecondition, "not-done"),
        SessionError::TooMany { .. } => (Code::ResourceExhausted, "too-many-sessions"),
        SessionError::RequestKeyReused { .. } => (Code::AlreadyExists, "request-key-reused"),
        SessionError::InvalidConfig { .. } => (Code::InvalidArgument, "invalid-config"),
        SessionError::NotQueued { .. } => (Code::InvalidArgument, "not-queued"),
        SessionError::InvalidText(_)
        | SessionError::BadOutcome(_)
        | SessionError::TooLarge { .. }
        | SessionError::OutOfRange { .. }
        | SessionError::BadNames(_) => (Code::InvalidArgument, "invalid-argument"),
    }
}

/// The status for a refused CT command.
pub fn ct_status(error: &CtError) -> Status {
    let (code, reason) = match error {
        CtError::Backlog { .. } => (Code::ResourceExhausted, "backlog"),
        CtError::Frozen => (Code::FailedPrecondition, "frozen"),
        CtError::TooLarge { .. } | CtError::BatchTooLarge { .. } => {
            (Code::InvalidArgument, "too-large")
        }
        CtError::MalformedSubmission(_) => (Code::InvalidArgument, "invalid-argument"),
        CtError::InvalidConfig { .. } => (Code::InvalidArgument, "invalid-config"),
        CtError::IsMirror { .. } => (Code::FailedPrecondition, "mirror"),
        // The node's local tree lags too far to rule out a duplicate: another node, or later.
        CtError::Unchecked { .. } => (Code::Unavailable, "catching-up"),
        CtError::Mirror(_) => (Code::FailedPrecondition, "mirror-refused"),
        CtError::StaleSequence { .. }
        | CtError::NotSequenceable { .. }
        | CtError::BadReport { .. }
        | CtError::NotPublishable { .. } => (Code::FailedPrecondition, "refused"),
    };
    status(code, reason, error.to_string())
}

/// The status a long-poll or stream ends with when this node stops while it waits.
pub fn stopping() -> Status {
    status(
        Code::Unavailable,
        "node-stopping",
        "this node is shutting down; ask another node",
    )
}

/// Why an HTTP request body was cut: it did not arrive within the listener's body deadline
/// (`edge::http_server`). Routes that read a body answer 408 for it.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimeout(pub std::time::Duration);

/// Whether `error` (or an error it wraps) is a [`BodyTimeout`]: routes that read a body answer
/// 408 for it.
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<BodyTimeout>() {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_pressure_is_resource_exhausted() {
        let error = CtError::Backlog {
            unsequenced: 10,
            watermark: 10,
        };
        assert_eq!(ct_status(&error).code(), Code::ResourceExhausted);
        assert_eq!(ct_status(&CtError::Frozen).code(), Code::FailedPrecondition);
    }

    #[test]
    fn a_body_timeout_is_found_through_the_errors_that_wrap_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapper(#[source] BodyTimeout);
        let wrapped = Wrapper(BodyTimeout(std::time::Duration::from_secs(1)));
        assert!(is_body_timeout(&wrapped));
        let other = std::io::Error::other("reset");
        assert!(!is_body_timeout(&other));
    }
}
