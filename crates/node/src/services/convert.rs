//! Between protobuf messages and the state machine's types. Requests are validated here, before
//! anything is proposed: a malformed request changes nothing, not even the applied index.

use certus_core::{
    Acquisition, Challenge, ChallengeToken, HolderId, KeyAuthorization, Lease, LeaseName, Ttl,
};
use certus_proto::v1;
use tonic::{Code, Status};

use crate::errors::{lease_status, status};

fn invalid(field: &str, error: impl std::fmt::Display) -> Status {
    status(
        Code::InvalidArgument,
        "invalid-argument",
        format!("{field}: {error}"),
    )
}

/// A lease name from a request field.
pub fn lease_name(name: String) -> Result<LeaseName, Status> {
    LeaseName::new(name).map_err(|error| invalid("name", error))
}

/// A holder id from a request field.
pub fn holder(holder: String) -> Result<HolderId, Status> {
    HolderId::new(holder).map_err(|error| invalid("holder", error))
}

/// A TTL from a request field.
pub fn ttl(ttl_ms: u64) -> Result<Ttl, Status> {
    Ttl::from_ms(ttl_ms).map_err(|error| lease_status(&error))
}

/// A challenge token from a request field.
pub fn challenge_token(token: String) -> Result<ChallengeToken, Status> {
    ChallengeToken::new(token).map_err(|error| invalid("token", error))
}

/// A key authorization from a request field.
pub fn key_authorization(value: String) -> Result<KeyAuthorization, Status> {
    KeyAuthorization::new(value).map_err(|error| invalid("key_authorization", error))
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

/// A lease for the wire.
pub fn lease(lease: &Lease) -> v1::Lease {
    v1::Lease {
        name: lease.name.as_str().to_owned(),
        holder: lease.holder.as_str().to_owned(),
        fencing_token: lease.token.0,
        granted_at_ms: lease.granted_at_ms,
        renewed_at_ms: lease.renewed_at_ms,
        ttl_ms: lease.ttl_ms,
        expires_at_ms: lease.expires_at_ms,
    }
}

/// An acquire's path for the wire.
pub fn acquisition(how: &Acquisition) -> (v1::acquire_reply::How, String) {
    match how {
        Acquisition::Created => (v1::acquire_reply::How::Created, String::new()),
        Acquisition::TookOverExpired { previous_holder } => (
            v1::acquire_reply::How::TookOverExpired,
            previous_holder.as_str().to_owned(),
        ),
        Acquisition::Renewed => (v1::acquire_reply::How::Renewed, String::new()),
    }
}

/// A challenge for the wire.
pub fn challenge(challenge: &Challenge) -> v1::Challenge {
    v1::Challenge {
        token: challenge.token.as_str().to_owned(),
        key_authorization: challenge.key_authorization.as_str().to_owned(),
        stored_at_ms: challenge.stored_at_ms,
    }
}
