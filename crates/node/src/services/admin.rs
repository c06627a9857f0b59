//! `certus.v1.Admin`: status, membership and snapshots. Its conversions are
//! [`crate::convert::admin`].

use std::sync::Arc;

use certus_proto::v1;
use certus_proto::v1::admin_server::Admin;
use tonic::{Code, Request, Response, Status};

use crate::convert::admin as convert;
use crate::errors::status;
use crate::limits::LEADER_WAIT;
use crate::raft::replica::Replica;

/// `certus.v1.Admin` for one node.
#[derive(Debug, Clone)]
pub struct AdminService {
    replica: Arc<Replica>,
    reloader: Option<Arc<crate::edge::reload::Reloader>>,
}

impl AdminService {
    /// The admin service of `replica`.
    pub fn new(replica: Arc<Replica>) -> AdminService {
        AdminService {
            replica,
            reloader: None,
        }
    }

    /// The same service, reloading the node's files with `reloader` (`Admin/Reload`).
    pub fn with_reloader(self, reloader: Arc<crate::edge::reload::Reloader>) -> AdminService {
        AdminService {
            reloader: Some(reloader),
            ..self
        }
    }
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
        role: convert::role_name(metrics.state).to_owned(),
        term: metrics.current_term,
        leader_id: leader.unwrap_or(0),
        leader_grpc_addr,
        commit_index,
        applied_index: metrics.last_applied.map_or(0, |log_id| log_id.index),
        last_log_index: metrics.last_log_index.unwrap_or(0),
        snapshot_index: metrics.snapshot.map_or(0, |log_id| log_id.index),
        members: convert::members(&view),
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
        let (id, node) = convert::add_learner(request.into_inner())?;
        probe_new_member(id, &node.grpc_addr, self.replica.peer_tls()).await?;
        let view = self.replica.add_learner(id, node).await?;
        Ok(Response::new(convert::membership(&view)))
    }

    async fn change_membership(
        &self,
        request: Request<v1::ChangeMembershipRequest>,
    ) -> Result<Response<v1::MembershipReply>, Status> {
        let request = request.into_inner();
        let voters = convert::voters(&request, &self.replica.membership())?;
        let view = self
            .replica
            .change_membership(voters, request.retain)
            .await?;
        Ok(Response::new(convert::membership(&view)))
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
        let waited = self
            .replica
            .wait_metrics(LEADER_WAIT * 10, "the snapshot to be built", |metrics| {
                metrics.snapshot.map_or(0, |log_id| log_id.index) >= applied
            })
            .await
            .map_err(|error| status(Code::DeadlineExceeded, "timeout", error.to_string()))?;
        Ok(Response::new(v1::TriggerSnapshotReply {
            snapshot_index: waited.snapshot.map_or(0, |log_id| log_id.index),
        }))
    }

    async fn reload(
        &self,
        _request: Request<v1::ReloadRequest>,
    ) -> Result<Response<v1::ReloadReply>, Status> {
        let Some(reloader) = &self.reloader else {
            return Err(status(
                Code::FailedPrecondition,
                "reload-failed",
                "this node cannot reload its files".to_owned(),
            ));
        };
        let outcome = reloader
            .reload()
            .map_err(|reason| status(Code::FailedPrecondition, "reload-failed", reason))?;
        Ok(Response::new(v1::ReloadReply {
            changed: outcome.changed,
            ignored: outcome.ignored,
        }))
    }
}
