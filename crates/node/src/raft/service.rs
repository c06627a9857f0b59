//! The server side of the Raft transport (`certus.v1.Raft`): peers' Raft RPCs and requests that
//! followers forward to the leader. Malformed bytes are refused with INVALID_ARGUMENT and change
//! nothing.

use std::sync::Arc;

use certus_proto::v1::RaftMessage;
use certus_proto::v1::raft_server::Raft as RaftRpc;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest,
};
use tonic::{Request, Response, Status};

use crate::errors::status;
use crate::raft::codec;
use crate::raft::forward::ForwardRequest;
use crate::raft::replica::Replica;
use crate::raft::types::{NodeId, TypeConfig};

/// `certus.v1.Raft` for one node.
#[derive(Debug, Clone)]
pub struct RaftService {
    replica: Arc<Replica>,
}

impl RaftService {
    /// The transport service of `replica`.
    pub fn new(replica: Arc<Replica>) -> RaftService {
        RaftService { replica }
    }
}

fn decode<T: serde::de::DeserializeOwned>(request: Request<RaftMessage>) -> Result<T, Status> {
    codec::decode(&request.into_inner().payload).map_err(|error| {
        status(
            tonic::Code::InvalidArgument,
            "malformed-raft-message",
            error.to_string(),
        )
    })
}

fn reply<T: serde::Serialize>(message: &T) -> Result<Response<RaftMessage>, Status> {
    Ok(Response::new(RaftMessage {
        payload: codec::encode(message),
    }))
}

#[tonic::async_trait]
impl RaftRpc for RaftService {
    async fn append_entries(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let request: AppendEntriesRequest<TypeConfig> = decode(request)?;
        if let Some(committed) = request.leader_commit {
            self.replica.observe_leader_commit(committed.index);
        }
        let answered = self.replica.raft.append_entries(request).await;
        // A leader that lost its term (refused with a higher vote) is no word from the leader.
        if matches!(&answered, Ok(response) if !matches!(response, AppendEntriesResponse::HigherVote(_)))
        {
            self.replica.observe_leader_contact();
        }
        reply(&answered)
    }

    async fn vote(&self, request: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let request: VoteRequest<NodeId> = decode(request)?;
        reply(&self.replica.raft.vote(request).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let request: InstallSnapshotRequest<TypeConfig> = decode(request)?;
        reply(&self.replica.raft.install_snapshot(request).await)
    }

    async fn forward(
        &self,
        request: Request<RaftMessage>,
    ) -> Result<Response<RaftMessage>, Status> {
        let request: ForwardRequest = decode(request)?;
        reply(&self.replica.serve_forwarded(request).await)
    }
}
