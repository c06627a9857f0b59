//! `certus.v1.Leases`: leases with fencing tokens, and HTTP-01 challenge tokens. Each call is
//! wiring: its conversions are [`crate::convert::leases`].

use std::sync::Arc;

use certus_proto::v1;
use certus_proto::v1::leases_server::Leases;
use tonic::{Request, Response, Status};

use crate::convert::leases as convert;
use crate::raft::replica::Replica;

/// `certus.v1.Leases` for one node.
#[derive(Debug, Clone)]
pub struct LeasesService {
    replica: Arc<Replica>,
}

impl LeasesService {
    /// The leases service of `replica`.
    pub fn new(replica: Arc<Replica>) -> LeasesService {
        LeasesService { replica }
    }
}

#[tonic::async_trait]
impl Leases for LeasesService {
    async fn acquire(
        &self,
        request: Request<v1::AcquireRequest>,
    ) -> Result<Response<v1::AcquireReply>, Status> {
        self.replica
            .serve_write(request, convert::acquire, convert::acquired)
            .await
    }

    async fn renew(
        &self,
        request: Request<v1::RenewRequest>,
    ) -> Result<Response<v1::RenewReply>, Status> {
        self.replica
            .serve_write(request, convert::renew, convert::renewed)
            .await
    }

    async fn release(
        &self,
        request: Request<v1::ReleaseRequest>,
    ) -> Result<Response<v1::ReleaseReply>, Status> {
        self.replica
            .serve_write(request, convert::release, convert::released)
            .await
    }

    async fn get(
        &self,
        request: Request<v1::GetLeaseRequest>,
    ) -> Result<Response<v1::Lease>, Status> {
        self.replica.serve_read(request, convert::get).await
    }

    async fn list(
        &self,
        request: Request<v1::ListLeasesRequest>,
    ) -> Result<Response<v1::ListLeasesReply>, Status> {
        self.replica.serve_read(request, convert::list).await
    }

    async fn check_fence(
        &self,
        request: Request<v1::CheckFenceRequest>,
    ) -> Result<Response<v1::CheckFenceReply>, Status> {
        self.replica.serve_read(request, convert::check_fence).await
    }

    async fn put_challenge(
        &self,
        request: Request<v1::PutChallengeRequest>,
    ) -> Result<Response<v1::PutChallengeReply>, Status> {
        self.replica
            .serve_write(request, convert::put_challenge, convert::challenge_stored)
            .await
    }

    async fn get_challenge(
        &self,
        request: Request<v1::GetChallengeRequest>,
    ) -> Result<Response<v1::Challenge>, Status> {
        self.replica
            .serve_read(request, convert::get_challenge)
            .await
    }

    async fn delete_challenge(
        &self,
        request: Request<v1::DeleteChallengeRequest>,
    ) -> Result<Response<v1::DeleteChallengeReply>, Status> {
        self.replica
            .serve_write(
                request,
                convert::delete_challenge,
                convert::challenge_deleted,
            )
            .await
    }

    async fn list_challenges(
        &self,
        request: Request<v1::ListChallengesRequest>,
    ) -> Result<Response<v1::ListChallengesReply>, Status> {
        self.replica
            .serve_read(request, convert::list_challenges)
            .await
    }

    async fn purge_challenges(
        &self,
        request: Request<v1::PurgeChallengesRequest>,
    ) -> Result<Response<v1::PurgeChallengesReply>, Status> {
        self.replica
            .serve_write(
                request,
                convert::purge_challenges,
                convert::challenges_purged,
            )
            .await
    }
}
