//! `certus.v1.Leases`: leases with fencing tokens, and HTTP-01 challenge tokens.

use certus_core::{
    Acquisition, Challenge, ChallengeCommand, ChallengeReply, ChallengeToken, FencingToken,
    HolderId, KeyAuthorization, Lease, LeaseCommand, LeaseError, LeaseName, LeaseReply, State, Ttl,
};
use certus_proto::v1;
use tonic::{Code, Status};

use crate::convert::{Query, invalid, page_limit, unexpected};
use crate::errors::{lease_status, status};

// ---- fields -------------------------------------------------------------------------------

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

/// A page's start: empty means from the first.
fn start_after<T>(
    value: String,
    parse: impl FnOnce(String) -> Result<T, Status>,
) -> Result<Option<T>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    parse(value).map(Some)
}

// ---- leases -------------------------------------------------------------------------------

/// `Acquire`.
pub fn acquire(request: v1::AcquireRequest) -> Result<LeaseCommand, Status> {
    Ok(LeaseCommand::Acquire {
        name: lease_name(request.name)?,
        holder: holder(request.holder)?,
        ttl: ttl(request.ttl_ms)?,
    })
}

/// `Acquire`'s reply.
pub fn acquired(reply: LeaseReply) -> Result<v1::AcquireReply, Status> {
    match reply {
        LeaseReply::Acquired { lease: held, how } => {
            let (how, previous_holder) = acquisition(&how);
            Ok(v1::AcquireReply {
                lease: Some(lease(&held)),
                how: how.into(),
                previous_holder,
            })
        }
        other => Err(unexpected("acquire", &other)),
    }
}

/// `Renew`.
pub fn renew(request: v1::RenewRequest) -> Result<LeaseCommand, Status> {
    Ok(LeaseCommand::Renew {
        name: lease_name(request.name)?,
        holder: holder(request.holder)?,
        ttl: ttl(request.ttl_ms)?,
    })
}

/// `Renew`'s reply.
pub fn renewed(reply: LeaseReply) -> Result<v1::RenewReply, Status> {
    match reply {
        LeaseReply::Renewed { lease: held } => Ok(v1::RenewReply {
            lease: Some(lease(&held)),
        }),
        other => Err(unexpected("renew", &other)),
    }
}

/// `Release`.
pub fn release(request: v1::ReleaseRequest) -> Result<LeaseCommand, Status> {
    Ok(LeaseCommand::Release {
        name: lease_name(request.name)?,
        holder: holder(request.holder)?,
    })
}

/// `Release`'s reply.
pub fn released(reply: LeaseReply) -> Result<v1::ReleaseReply, Status> {
    match reply {
        LeaseReply::Released { lease: held } => Ok(v1::ReleaseReply {
            lease: Some(lease(&held)),
        }),
        other => Err(unexpected("release", &other)),
    }
}

/// `Get`: the lease, or `NOT_FOUND`.
pub fn get(request: v1::GetLeaseRequest) -> Result<impl Query<v1::Lease>, Status> {
    let name = lease_name(request.name)?;
    Ok(move |state: &State, now_ms: u64| {
        state
            .lease(&name, now_ms)
            .map(lease)
            .ok_or_else(|| lease_status(&LeaseError::Unknown))
    })
}

/// `List`: a page of leases by name.
pub fn list(request: v1::ListLeasesRequest) -> Result<impl Query<v1::ListLeasesReply>, Status> {
    let start_after = start_after(request.start_after, lease_name)?;
    let limit = page_limit(request.limit);
    Ok(move |state: &State, now_ms: u64| {
        let leases = state
            .leases(start_after.as_ref(), limit, now_ms)
            .into_iter()
            .map(lease)
            .collect();
        Ok(v1::ListLeasesReply { leases })
    })
}

/// `CheckFence`: whether a fencing token is still the lease's.
pub fn check_fence(
    request: v1::CheckFenceRequest,
) -> Result<impl Query<v1::CheckFenceReply>, Status> {
    let name = lease_name(request.name)?;
    let token = FencingToken(request.fencing_token);
    Ok(move |state: &State, now_ms: u64| {
        let current = state.lease(&name, now_ms).map_or(0, |lease| lease.token.0);
        Ok(match state.check_fence(&name, token, now_ms) {
            Ok(()) => v1::CheckFenceReply {
                valid: true,
                reason: String::new(),
                current_token: current,
            },
            Err(error) => v1::CheckFenceReply {
                valid: false,
                reason: error.to_string(),
                current_token: current,
            },
        })
    })
}

// ---- challenge tokens ---------------------------------------------------------------------

/// `PutChallenge`.
pub fn put_challenge(request: v1::PutChallengeRequest) -> Result<ChallengeCommand, Status> {
    Ok(ChallengeCommand::Put {
        token: challenge_token(request.token)?,
        key_authorization: key_authorization(request.key_authorization)?,
    })
}

/// `PutChallenge`'s reply.
pub fn challenge_stored(reply: ChallengeReply) -> Result<v1::PutChallengeReply, Status> {
    match reply {
        ChallengeReply::Stored { replaced } => Ok(v1::PutChallengeReply { replaced }),
        other => Err(unexpected("put", &other)),
    }
}

/// `GetChallenge`: the challenge, or `NOT_FOUND`.
pub fn get_challenge(
    request: v1::GetChallengeRequest,
) -> Result<impl Query<v1::Challenge>, Status> {
    let token = challenge_token(request.token)?;
    Ok(move |state: &State, _now_ms: u64| {
        state.challenge(&token).map(challenge).ok_or_else(|| {
            status(
                Code::NotFound,
                "unknown-challenge",
                format!("no challenge token {:?}", token.as_str()),
            )
        })
    })
}

/// `DeleteChallenge`.
pub fn delete_challenge(request: v1::DeleteChallengeRequest) -> Result<ChallengeCommand, Status> {
    Ok(ChallengeCommand::Delete {
        token: challenge_token(request.token)?,
    })
}

/// `DeleteChallenge`'s reply.
pub fn challenge_deleted(reply: ChallengeReply) -> Result<v1::DeleteChallengeReply, Status> {
    match reply {
        ChallengeReply::Deleted { existed } => Ok(v1::DeleteChallengeReply { existed }),
        other => Err(unexpected("delete", &other)),
    }
}

/// `ListChallenges`: a page of challenges by token.
pub fn list_challenges(
    request: v1::ListChallengesRequest,
) -> Result<impl Query<v1::ListChallengesReply>, Status> {
    let start_after = start_after(request.start_after, challenge_token)?;
    let limit = page_limit(request.limit);
    Ok(move |state: &State, _now_ms: u64| {
        let challenges = state
            .challenges(start_after.as_ref(), limit)
            .into_iter()
            .map(challenge)
            .collect();
        Ok(v1::ListChallengesReply { challenges })
    })
}

/// `PurgeChallenges`.
pub fn purge_challenges(request: v1::PurgeChallengesRequest) -> Result<ChallengeCommand, Status> {
    Ok(ChallengeCommand::DeleteOlderThan {
        age_ms: request.older_than_ms,
    })
}

/// `PurgeChallenges`' reply.
pub fn challenges_purged(reply: ChallengeReply) -> Result<v1::PurgeChallengesReply, Status> {
    match reply {
        ChallengeReply::Purged { removed } => Ok(v1::PurgeChallengesReply { removed }),
        other => Err(unexpected("purge", &other)),
    }
}
