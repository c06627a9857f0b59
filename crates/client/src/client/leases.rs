//! `certus.v1.Leases`: leases with fencing tokens, and the HTTP-01 challenge tokens.

use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{
    AcquireReply, AcquireRequest, Challenge, CheckFenceReply, CheckFenceRequest,
    DeleteChallengeReply, DeleteChallengeRequest, GetChallengeRequest, GetLeaseRequest, Lease,
    ListChallengesReply, ListChallengesRequest, ListLeasesReply, ListLeasesRequest,
    PurgeChallengesReply, PurgeChallengesRequest, PutChallengeReply, PutChallengeRequest,
    ReleaseReply, ReleaseRequest, RenewReply, RenewRequest,
};

use super::call::rpcs;
use crate::{Client, ClientError, ReadAt};

rpcs! { LeasesClient::new =>
    "Leases/Acquire": acquire(AcquireRequest) -> AcquireReply;
    "Leases/Renew": renew(RenewRequest) -> RenewReply;
    "Leases/Release": release(ReleaseRequest) -> ReleaseReply;
    "Leases/Get": get(GetLeaseRequest) -> Lease;
    "Leases/List": list(ListLeasesRequest) -> ListLeasesReply;
    "Leases/CheckFence": check_fence(CheckFenceRequest) -> CheckFenceReply;
    "Leases/PutChallenge": put_challenge(PutChallengeRequest) -> PutChallengeReply;
    "Leases/GetChallenge": get_challenge(GetChallengeRequest) -> Challenge;
    "Leases/DeleteChallenge": delete_challenge(DeleteChallengeRequest) -> DeleteChallengeReply;
    "Leases/ListChallenges": list_challenges(ListChallengesRequest) -> ListChallengesReply;
    "Leases/PurgeChallenges": purge_challenges(PurgeChallengesRequest) -> PurgeChallengesReply;
}

impl Client {
    /// Grants the lease `name` to `holder` for `ttl_ms` milliseconds if it is free or expired;
    /// renews it (same fencing token) if `holder` already holds it.
    ///
    /// Refusals include `not-holder` (someone else holds it), `invalid-ttl`,
    /// `invalid-argument` and `too-many-leases`.
    pub async fn acquire(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
        ttl_ms: u64,
    ) -> Result<AcquireReply, ClientError> {
        self.write(AcquireRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms,
        })
        .await
    }

    /// Extends the live lease `name` held by `holder` to `ttl_ms` from now; the fencing token
    /// is unchanged. Refusals include `not-holder`, `expired` and `unknown-lease`.
    pub async fn renew(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
        ttl_ms: u64,
    ) -> Result<RenewReply, ClientError> {
        self.write(RenewRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms,
        })
        .await
    }

    /// Gives up the live lease `name` held by `holder`; the reply holds the lease as it was.
    ///
    /// Numbered in the client session (the default), a retry after an ambiguous failure gets
    /// the first attempt's answer. Without it, a retried release may answer `unknown-lease` or
    /// `not-holder` although the first attempt released the lease (see the
    /// [crate documentation](crate#exactly-once-writes)).
    pub async fn release(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
    ) -> Result<ReleaseReply, ClientError> {
        self.write(ReleaseRequest {
            name: name.into(),
            holder: holder.into(),
        })
        .await
    }

    /// The live lease `name`; refused with `NOT_FOUND` if there is none.
    pub async fn get_lease(&self, name: impl Into<String>) -> Result<Lease, ClientError> {
        self.call(GetLeaseRequest { name: name.into() }).await
    }

    /// [`Client::get_lease`], with the log index of the state it was read from.
    pub async fn get_lease_at(
        &self,
        name: impl Into<String>,
    ) -> Result<ReadAt<Lease>, ClientError> {
        self.read_at(GetLeaseRequest { name: name.into() }).await
    }

    /// Live leases in name order: at most `limit` (0 for the node's page size) after
    /// `start_after` (`None` for the first page).
    pub async fn list_leases(
        &self,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<ListLeasesReply, ClientError> {
        self.call(ListLeasesRequest {
            start_after: start_after.unwrap_or_default().to_owned(),
            limit,
        })
        .await
    }

    /// Whether `fencing_token` is the live grant's of the lease `name`.
    pub async fn check_fence(
        &self,
        name: impl Into<String>,
        fencing_token: u64,
    ) -> Result<CheckFenceReply, ClientError> {
        self.call(CheckFenceRequest {
            name: name.into(),
            fencing_token,
        })
        .await
    }

    /// [`Client::check_fence`], with the log index of the state it was read from.
    pub async fn check_fence_at(
        &self,
        name: impl Into<String>,
        fencing_token: u64,
    ) -> Result<ReadAt<CheckFenceReply>, ClientError> {
        self.read_at(CheckFenceRequest {
            name: name.into(),
            fencing_token,
        })
        .await
    }

    /// Stores (or replaces) the key authorization served for the HTTP-01 `token`.
    pub async fn put_challenge(
        &self,
        token: impl Into<String>,
        key_authorization: impl Into<String>,
    ) -> Result<PutChallengeReply, ClientError> {
        self.write(PutChallengeRequest {
            token: token.into(),
            key_authorization: key_authorization.into(),
        })
        .await
    }

    /// The challenge stored for `token`; refused with `NOT_FOUND` if there is none.
    pub async fn get_challenge(&self, token: impl Into<String>) -> Result<Challenge, ClientError> {
        self.call(GetChallengeRequest {
            token: token.into(),
        })
        .await
    }

    /// Removes `token`; removing a missing token is not an error (`existed` is false).
    pub async fn delete_challenge(
        &self,
        token: impl Into<String>,
    ) -> Result<DeleteChallengeReply, ClientError> {
        self.write(DeleteChallengeRequest {
            token: token.into(),
        })
        .await
    }

    /// Stored challenges in token order: at most `limit` (0 for the node's page size) after
    /// `start_after` (`None` for the first page).
    pub async fn list_challenges(
        &self,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<ListChallengesReply, ClientError> {
        self.call(ListChallengesRequest {
            start_after: start_after.unwrap_or_default().to_owned(),
            limit,
        })
        .await
    }

    /// Removes every challenge stored more than `older_than_ms` milliseconds ago.
    pub async fn purge_challenges(
        &self,
        older_than_ms: u64,
    ) -> Result<PurgeChallengesReply, ClientError> {
        self.write(PurgeChallengesRequest { older_than_ms }).await
    }
}
