//! `certus.v1.Admin`: status, membership and snapshots.

use std::collections::BTreeSet;
use std::sync::Arc;

use certus_proto::v1;
use certus_proto::v1::admin_server::Admin;
use openraft::ServerState;
use tonic::{Code, Request, Response, Status};

use crate::errors::status;
use crate::limits::{LEADER_WAIT, MEMBER_ADDR_BYTES_MAX};
use crate::raft::forward::MembershipView;
use crate::raft::replica::Replica;
use crate::raft::types::CertusNode;

/// `certus.v1.Admin` for one node.
#[derive(Debug, Clone)]
pub struct AdminService {
    replica: Arc<Replica>,
}

impl AdminService {
    /// The admin service of `replica`.
    pub fn new(replica: Arc<Replica>) -> AdminService {
        AdminService { replica }
    }
}

/// The name a role is shown by.
pub fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

fn members(view: &MembershipView) -> Vec<v1::Member> {
    view.members
        .iter()
        .map(|member| v1::Member {
            id: member.id,
            grpc_addr: member.node.grpc_addr.clone(),
            http_addr: member.node.http_addr.clone(),
            voter: member.voter,
        })
        .collect()
}

/// This node's status, as `Admin/Status` and the HTTP status page report it.
pub fn status_of(replica: &Replica) -> v1::StatusReply {
    let view = replica.membership();
    let commit_index = replica.commit_index();
    let metrics = replica.raft.metrics();
    let metrics = metrics.borrow();
    let leader = metrics.current_leader;
    let leader_grpc_addr = leader
        .and_then(|leader| view.members.iter().find(|member| member.id == leader))
        .map(|member| member.node.grpc_addr.clone())
        .unwrap_or_default();
    v1::StatusReply {
        id: replica.id,
        role: role_name(metrics.state).to_owned(),
        term: metrics.current_term,
        leader_id: leader.unwrap_or(0),
        leader_grpc_addr,
        commit_index,
        applied_index: metrics.last_applied.map_or(0, |log_id| log_id.index),
        last_log_index: metrics.last_log_index.unwrap_or(0),
        snapshot_index: metrics.snapshot.map_or(0, |log_id| log_id.index),
        members: members(&view),
        grpc_addr: replica.node.grpc_addr.clone(),
        http_addr: replica.node.http_addr.clone(),
    }
}

/// How long a would-be member has to answer before it is added.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Checks that a node about to be added answers at `grpc_addr` and is who the request says: a
/// typo in an address or id would otherwise sit in the membership as a learner that never
/// catches up.
async fn probe_new_member(
    id: u64,
    grpc_addr: &str,
    tls: &crate::edge::tls::PeerTls,
) -> Result<(), Status> {
    let unreachable = |reason: String| {
        status(
            Code::FailedPrecondition,
            "member-unreachable",
            format!("no Certus node answers at {grpc_addr}: {reason}; start it before adding it"),
        )
    };
    let endpoint = tls
        .endpoint(grpc_addr)
        .map_err(unreachable)?
        .connect_timeout(PROBE_TIMEOUT);
    let probe = async {
        let channel = endpoint
            .connect()
            .await
            .map_err(|error| error.to_string())?;
        v1::admin_client::AdminClient::new(channel)
            .status(v1::StatusRequest {})
            .await
            .map_err(|error| error.to_string())
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .map_err(|_| unreachable(format!("no answer within {PROBE_TIMEOUT:?}")))?
        .map_err(unreachable)?
        .into_inner();
    if answer.id != id {
        return Err(status(
            Code::FailedPrecondition,
            "member-id-mismatch",
            format!(
                "the node at {grpc_addr} is node {}, not node {id}",
                answer.id
            ),
        ));
    }
    Ok(())
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn status(
        &self,
        _request: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusReply>, Status> {
        Ok(Response::new(status_of(&self.replica)))
    }

    async fn add_learner(
        &self,
        request: Request<v1::AddLearnerRequest>,
    ) -> Result<Response<v1::MembershipReply>, Status> {
        let request = request.into_inner();
        if request.id == 0 {
            return Err(status(
                Code::InvalidArgument,
                "invalid-argument",
                "id: node ids start at 1",
            ));
        }
        for (field, addr) in [
            ("grpc_addr", &request.grpc_addr),
            ("http_addr", &request.http_addr),
        ] {
            if addr.len() > MEMBER_ADDR_BYTES_MAX {
                return Err(status(
                    Code::InvalidArgument,
                    "invalid-argument",
                    format!(
                        "{field}: {} bytes; an ip:port address is at most {MEMBER_ADDR_BYTES_MAX}",
                        addr.len()
                    ),
                ));
            }
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err(status(
                    Code::InvalidArgument,
                    "invalid-argument",
                    format!("{field}: {addr:?} is not an ip:port address"),
                ));
            }
        }
        probe_new_member(request.id, &request.grpc_addr, self.replica.peer_tls()).await?;
        let node = CertusNode {
            grpc_addr: request.grpc_addr,
            http_addr: request.http_addr,
        };
        let view = self.replica.add_learner(request.id, node).await?;
        Ok(Response::new(v1::MembershipReply {
            log_index: view.log_index,
            members: members(&view),
        }))
    }

    async fn change_membership(
        &self,
        request: Request<v1::ChangeMembershipRequest>,
    ) -> Result<Response<v1::MembershipReply>, Status> {
        let request = request.into_inner();
        let voters: BTreeSet<u64> = request.voters.iter().copied().collect();
        if voters.is_empty() {
            return Err(status(
                Code::InvalidArgument,
                "invalid-argument",
                "voters: a cluster needs at least one voter",
            ));
        }
        let known = self.replica.membership();
        if let Some(unknown) = voters
            .iter()
            .find(|id| !known.members.iter().any(|member| member.id == **id))
        {
            return Err(status(
                Code::FailedPrecondition,
                "not-a-member",
                format!("node {unknown} is not a member; add it as a learner first"),
            ));
        }
        let view = self
            .replica
            .change_membership(voters, request.retain)
            .await?;
        Ok(Response::new(v1::MembershipReply {
            log_index: view.log_index,
            members: members(&view),
        }))
    }

    async fn trigger_snapshot(
        &self,
        _request: Request<v1::TriggerSnapshotRequest>,
    ) -> Result<Response<v1::TriggerSnapshotReply>, Status> {
        let raft = &self.replica.raft;
        let applied = raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |log_id| log_id.index);
        raft.trigger()
            .snapshot()
            .await
            .map_err(|fatal| status(Code::Unavailable, "unavailable", fatal.to_string()))?;
        let waited = raft
            .wait(Some(LEADER_WAIT * 10))
            .metrics(
                |metrics| metrics.snapshot.map_or(0, |log_id| log_id.index) >= applied,
                "snapshot built",
            )
            .await
            .map_err(|error| status(Code::DeadlineExceeded, "timeout", error.to_string()))?;
        Ok(Response::new(v1::TriggerSnapshotReply {
            snapshot_index: waited.snapshot.map_or(0, |log_id| log_id.index),
        }))
    }
}
