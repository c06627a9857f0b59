//! `certus.v1.Leases`: leases with fencing tokens, and HTTP-01 challenge tokens.

use std::sync::Arc;

use certus_core::{
    ChallengeCommand, ChallengeReply, ClientRequest, Command, FencingToken, LeaseCommand,
    LeaseError, LeaseReply, Response as CommandResponse,
};
use certus_proto::v1;
use certus_proto::v1::leases_server::Leases;
use tonic::{Code, Request, Response, Status};

use crate::errors::{challenge_status, lease_status, status};
use crate::raft::replica::Replica;
use crate::services::clients::client_request;
use crate::services::convert;

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

    async fn lease(
        &self,
        client: Option<ClientRequest>,
        command: LeaseCommand,
    ) -> Result<LeaseReply, Status> {
        match self
            .replica
            .write_for(client, Command::Lease(command))
            .await?
        {
            CommandResponse::Lease(result) => result.map_err(|error| lease_status(&error)),
            other => Err(mismatch(&other)),
        }
    }

    async fn challenge(
        &self,
        client: Option<ClientRequest>,
        command: ChallengeCommand,
    ) -> Result<ChallengeReply, Status> {
        match self
            .replica
            .write_for(client, Command::Challenge(command))
            .await?
        {
            CommandResponse::Challenge(result) => result.map_err(|error| challenge_status(&error)),
            other => Err(mismatch(&other)),
        }
    }
}

fn mismatch(response: &CommandResponse) -> Status {
    status(
        Code::Internal,
        "internal",
        format!("the state machine answered another command family: {response:?}"),
    )
}

#[tonic::async_trait]
impl Leases for LeasesService {
    async fn acquire(
        &self,
        request: Request<v1::AcquireRequest>,
    ) -> Result<Response<v1::AcquireReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let command = LeaseCommand::Acquire {
            name: convert::lease_name(request.name)?,
            holder: convert::holder(request.holder)?,
            ttl: convert::ttl(request.ttl_ms)?,
        };
        match self.lease(client, command).await? {
            LeaseReply::Acquired { lease, how } => {
                let (how, previous_holder) = convert::acquisition(&how);
                Ok(Response::new(v1::AcquireReply {
                    lease: Some(convert::lease(&lease)),
                    how: how.into(),
                    previous_holder,
                }))
            }
            other => Err(status(
                Code::Internal,
                "internal",
                format!("acquire answered {other:?}"),
            )),
        }
    }

    async fn renew(
        &self,
        request: Request<v1::RenewRequest>,
    ) -> Result<Response<v1::RenewReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let command = LeaseCommand::Renew {
            name: convert::lease_name(request.name)?,
            holder: convert::holder(request.holder)?,
            ttl: convert::ttl(request.ttl_ms)?,
        };
        match self.lease(client, command).await? {
            LeaseReply::Renewed { lease } => Ok(Response::new(v1::RenewReply {
                lease: Some(convert::lease(&lease)),
            })),
            other => Err(status(
                Code::Internal,
                "internal",
                format!("renew answered {other:?}"),
            )),
        }
    }

    async fn release(
        &self,
        request: Request<v1::ReleaseRequest>,
    ) -> Result<Response<v1::ReleaseReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let command = LeaseCommand::Release {
            name: convert::lease_name(request.name)?,
            holder: convert::holder(request.holder)?,
        };
        match self.lease(client, command).await? {
            LeaseReply::Released { lease } => Ok(Response::new(v1::ReleaseReply {
                lease: Some(convert::lease(&lease)),
            })),
            other => Err(status(
                Code::Internal,
                "internal",
                format!("release answered {other:?}"),
            )),
        }
    }

    async fn get(
        &self,
        request: Request<v1::GetLeaseRequest>,
    ) -> Result<Response<v1::Lease>, Status> {
        let name = convert::lease_name(request.into_inner().name)?;
        let lease = self
            .replica
            .read(|state, now_ms| state.lease(&name, now_ms).map(convert::lease))
            .await?;
        lease
            .map(Response::new)
            .ok_or_else(|| lease_status(&LeaseError::Unknown))
    }

    async fn list(
        &self,
        request: Request<v1::ListLeasesRequest>,
    ) -> Result<Response<v1::ListLeasesReply>, Status> {
        let request = request.into_inner();
        let start_after = if request.start_after.is_empty() {
            None
        } else {
            Some(convert::lease_name(request.start_after)?)
        };
        let limit = convert::page_limit(request.limit);
        let leases = self
            .replica
            .read(|state, now_ms| {
                state
                    .leases(start_after.as_ref(), limit, now_ms)
                    .into_iter()
                    .map(convert::lease)
                    .collect()
            })
            .await?;
        Ok(Response::new(v1::ListLeasesReply { leases }))
    }

    async fn check_fence(
        &self,
        request: Request<v1::CheckFenceRequest>,
    ) -> Result<Response<v1::CheckFenceReply>, Status> {
        let request = request.into_inner();
        let name = convert::lease_name(request.name)?;
        let token = FencingToken(request.fencing_token);
        let reply = self
            .replica
            .read(|state, now_ms| {
                let current = state.lease(&name, now_ms).map_or(0, |lease| lease.token.0);
                match state.check_fence(&name, token, now_ms) {
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
                }
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn put_challenge(
        &self,
        request: Request<v1::PutChallengeRequest>,
    ) -> Result<Response<v1::PutChallengeReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let command = ChallengeCommand::Put {
            token: convert::challenge_token(request.token)?,
            key_authorization: convert::key_authorization(request.key_authorization)?,
        };
        match self.challenge(client, command).await? {
            ChallengeReply::Stored { replaced } => {
                Ok(Response::new(v1::PutChallengeReply { replaced }))
            }
            other => Err(status(
                Code::Internal,
                "internal",
                format!("put answered {other:?}"),
            )),
        }
    }

    async fn get_challenge(
        &self,
        request: Request<v1::GetChallengeRequest>,
    ) -> Result<Response<v1::Challenge>, Status> {
        let token = convert::challenge_token(request.into_inner().token)?;
        let challenge = self
            .replica
            .read(|state, _now_ms| state.challenge(&token).map(convert::challenge))
            .await?;
        challenge.map(Response::new).ok_or_else(|| {
            status(
                Code::NotFound,
                "unknown-challenge",
                format!("no challenge token {:?}", token.as_str()),
            )
        })
    }

    async fn delete_challenge(
        &self,
        request: Request<v1::DeleteChallengeRequest>,
    ) -> Result<Response<v1::DeleteChallengeReply>, Status> {
        let client = client_request(request.metadata())?;
        let token = convert::challenge_token(request.into_inner().token)?;
        match self
            .challenge(client, ChallengeCommand::Delete { token })
            .await?
        {
            ChallengeReply::Deleted { existed } => {
                Ok(Response::new(v1::DeleteChallengeReply { existed }))
            }
            other => Err(status(
                Code::Internal,
                "internal",
                format!("delete answered {other:?}"),
            )),
        }
    }

    async fn list_challenges(
        &self,
        request: Request<v1::ListChallengesRequest>,
    ) -> Result<Response<v1::ListChallengesReply>, Status> {
        let request = request.into_inner();
        let start_after = if request.start_after.is_empty() {
            None
        } else {
            Some(convert::challenge_token(request.start_after)?)
        };
        let limit = convert::page_limit(request.limit);
        let challenges = self
            .replica
            .read(|state, _now_ms| {
                state
                    .challenges(start_after.as_ref(), limit)
                    .into_iter()
                    .map(convert::challenge)
                    .collect()
            })
            .await?;
        Ok(Response::new(v1::ListChallengesReply { challenges }))
    }

    async fn purge_challenges(
        &self,
        request: Request<v1::PurgeChallengesRequest>,
    ) -> Result<Response<v1::PurgeChallengesReply>, Status> {
        let client = client_request(request.metadata())?;
        let age_ms = request.into_inner().older_than_ms;
        match self
            .challenge(client, ChallengeCommand::DeleteOlderThan { age_ms })
            .await?
        {
            ChallengeReply::Purged { removed } => {
                Ok(Response::new(v1::PurgeChallengesReply { removed }))
            }
            other => Err(status(
                Code::Internal,
                "internal",
                format!("purge answered {other:?}"),
            )),
        }
    }
}
