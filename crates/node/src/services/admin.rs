//! `certus.v1.Admin`: status, membership, snapshots and snapshot exports. Its conversions are
//! [`crate::convert::admin`].

use std::pin::Pin;
use std::sync::Arc;

use certus_proto::v1;
use certus_proto::v1::admin_server::Admin;
use futures_util::{Stream, StreamExt as _};
use tonic::{Code, Request, Response, Status};

use crate::convert::admin as convert;
use crate::ct::node::CtNode;
use crate::errors::status;
use crate::limits::{LEADER_WAIT, SNAPSHOT_EXPORT_CHUNK_BYTES_MAX, SNAPSHOT_EXPORT_CT_ENTRIES_MAX};
use crate::raft::replica::Replica;
use crate::raft::types::CertusNode;

/// The stream `ExportSnapshot` answers with.
type SnapshotStream = Pin<Box<dyn Stream<Item = Result<v1::ExportSnapshotChunk, Status>> + Send>>;

/// `certus.v1.Admin` for one node.
#[derive(Debug, Clone)]
pub struct AdminService {
    replica: Arc<Replica>,
    /// The node's part in the CT log, whose local database an export reads.
    ct: Option<Arc<CtNode>>,
    reloader: Option<Arc<crate::edge::reload::Reloader>>,
}

impl AdminService {
    /// The admin service of `replica` (and `ct`, when the node runs the CT log).
    pub fn new(replica: Arc<Replica>, ct: Option<Arc<CtNode>>) -> AdminService {
        AdminService {
            replica,
            ct,
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

/// The CT entries of an export after the snapshot's bytes: from `first` to `end`, read from
/// `ct`'s database a bounded batch at a time as the stream is drained.
fn ct_entry_chunks(ct: Option<Arc<CtNode>>, end: u64) -> SnapshotStream {
    let Some(ct) = ct.filter(|_| end > 0) else {
        return Box::pin(futures_util::stream::empty());
    };
    Box::pin(futures_util::stream::unfold(0u64, move |first| {
        let ct = Arc::clone(&ct);
        async move {
            if first >= end {
                return None;
            }
            let wanted = usize::try_from(end - first)
                .unwrap_or(usize::MAX)
                .min(SNAPSHOT_EXPORT_CT_ENTRIES_MAX);
            let read = ct.db().entries(first, wanted);
            let chunk = match read {
                Ok(entries) if !entries.is_empty() => {
                    let (chunk, taken) =
                        convert::ct_entries_chunk(first, entries, SNAPSHOT_EXPORT_CHUNK_BYTES_MAX);
                    Ok((chunk, first + taken))
                }
                Ok(_) => Err(status(
                    Code::Internal,
                    "ct-entries-missing",
                    format!("this node's CT database has no entry {first} any more"),
                )),
                Err(error) => Err(status(
                    Code::Internal,
                    "ct-database",
                    format!("reading CT entry {first}: {error}"),
                )),
            };
            Some(match chunk {
                Ok((chunk, next)) => (Ok(chunk), next),
                // The stream ends after an error.
                Err(error) => (Err(error), end),
            })
        }
    }))
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

/// Checks that a node about to be added (or given a new address) answers at `grpc_addr` and is
/// who the request says: a typo in an address or id would otherwise sit in the membership as a
/// learner that never catches up, or send one member's traffic to another.
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
        // openraft adds a voter's id as a learner by doing nothing, so the caller would believe
        // a node was added (or its address changed) when nothing was.
        if let Some(voter) = self
            .replica
            .membership()
            .members
            .into_iter()
            .find(|member| member.id == id && member.voter)
        {
            return Err(status(
                Code::FailedPrecondition,
                "already-a-voter",
                format!(
                    "node {id} is already a voter (at {}); a node that lost its data joins under a \
                     new id. To replace the voter, remove it first (`certus serve --replace` \
                     does); to change its addresses, use SetMemberAddress",
                    voter.node.grpc_addr
                ),
            ));
        }
        probe_new_member(id, &node.grpc_addr, self.replica.peer_tls()).await?;
        let view = self.replica.add_learner(id, node).await?;
        Ok(Response::new(convert::membership(&view)))
    }

    async fn set_member_address(
        &self,
        request: Request<v1::SetMemberAddressRequest>,
    ) -> Result<Response<v1::MembershipReply>, Status> {
        let (id, grpc_addr, http_addr) = convert::set_member_address(request.into_inner())?;
        let Some(current) = self
            .replica
            .membership()
            .members
            .into_iter()
            .find(|member| member.id == id)
        else {
            return Err(status(
                Code::FailedPrecondition,
                "not-a-member",
                format!("node {id} is not a member; add it as a learner instead"),
            ));
        };
        let node = CertusNode {
            grpc_addr: grpc_addr.unwrap_or(current.node.grpc_addr),
            http_addr: http_addr.unwrap_or(current.node.http_addr),
        };
        // Whatever changes, the recorded gRPC address must reach node `id` itself.
        probe_new_member(id, &node.grpc_addr, self.replica.peer_tls()).await?;
        let view = self.replica.set_member_address(id, node).await?;
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

    type ExportSnapshotStream = SnapshotStream;

    /// After a read barrier, so the copy holds every write acknowledged before the call; encoded
    /// under one read of the applied state, so it is the state at exactly one log index; then
    /// the CT entries that state numbered, from this node's database (entries never change once
    /// numbered, so reading them later reads the same).
    async fn export_snapshot(
        &self,
        _request: Request<v1::ExportSnapshotRequest>,
    ) -> Result<Response<SnapshotStream>, Status> {
        self.replica.read_barrier().await?;
        let exported_at_ms = self.replica.clock.now_ms();
        let (last_log_id, members, data, ct_entries) = self.replica.reader.read(|applied| {
            // Read while the state cannot move: the database holds only entries the state
            // numbered, and none it cleaned up is missing from it.
            let local = self.ct.as_ref().map_or(0, |ct| ct.db().contiguous_size());
            let ct_entries = convert::ct_export_size(&applied.state, local)?;
            let last_log_id = applied.last_applied.ok_or_else(|| {
                status(
                    Code::FailedPrecondition,
                    "not-initialized",
                    "this node has applied nothing yet: the cluster is not initialized",
                )
            })?;
            Ok::<_, Status>((
                last_log_id,
                convert::stored_members(&applied.membership),
                applied.state.to_snapshot(),
                ct_entries,
            ))
        })?;
        let chunks = convert::snapshot_export(
            self.replica.id,
            exported_at_ms,
            last_log_id,
            members,
            &data,
            ct_entries,
            SNAPSHOT_EXPORT_CHUNK_BYTES_MAX,
        );
        let snapshot = futures_util::stream::iter(chunks.into_iter().map(Ok));
        Ok(Response::new(Box::pin(
            snapshot.chain(ct_entry_chunks(self.ct.clone(), ct_entries)),
        )))
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
