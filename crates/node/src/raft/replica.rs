//! One node's view of the cluster and the paths every service shares: writes reach the leader
//! (proposed here or forwarded), reads pass a linearizable barrier, membership changes run on the
//! leader.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use certus_core::{ClientRequest, Command, Response, State};
use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::metrics::{RaftDataMetrics, RaftMetrics};
use openraft::{ChangeMembers, ServerState};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use crate::clock::Clock;
use crate::errors::ServiceError;
use crate::limits::{
    LEADER_HOPS_MAX, LEADER_WAIT, MEMBERSHIP_CHANGE_TIMEOUT, MEMBERSHIP_IN_PROGRESS_RETRY,
    PROPOSAL_COMMANDS_MAX, READ_APPLY_WAIT, READ_QUEUE_MAX,
};
use crate::ordered_watch;
use crate::raft::forward::{
    ForwardRefusal, ForwardReply, ForwardRequest, MemberView, MembershipView,
};
use crate::raft::network::Peers;
use crate::raft::proposer::{Proposer, WriteOutcome, write_error};
use crate::raft::types::{CertusNode, NodeId, Raft, StateReader};
use crate::tasks::Tasks;

/// Who leads, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leader {
    /// This node.
    Me,
    /// Another node.
    Peer(NodeId, CertusNode),
}

/// What this node's log held when it started. Commit pointers are written but not flushed on
/// every commit, so after a crash the one on disk may lag entries this node applied and
/// acknowledged. A node that resumes leading in the term it had voted in (openraft lets it, with
/// no new entry of its own) would name a read index from that lagging pointer; its reads in
/// that term are therefore answered at no less than the last index it had on disk, which covers
/// every entry it could have acknowledged. A leader of a later term needs no such floor: its
/// first entry of the term lies past every entry committed before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BootLog {
    /// The term of the vote on disk.
    pub term: u64,
    /// The last log index on disk (0 for an empty log).
    pub last_index: u64,
}

/// Shared by every service of a node.
pub struct Replica {
    /// This node's id.
    pub id: NodeId,
    /// The Raft handle.
    pub raft: Raft,
    /// The applied state.
    pub reader: StateReader,
    /// The node's clock.
    pub clock: Clock,
    /// Where this node is reached.
    pub node: CertusNode,
    peers: Peers,
    proposer: Proposer,
    reads: mpsc::Sender<oneshot::Sender<Result<(), ServiceError>>>,
    /// The highest commit index a leader has told this node about.
    leader_commit_seen: AtomicU64,
    /// When this node last took an append from a leader (for readiness).
    leader_heard_at: std::sync::Mutex<Option<tokio::time::Instant>>,
    boot: BootLog,
    /// openraft's metrics, relayed so that their waiters wake in a replayable order.
    metrics: ordered_watch::Receiver<RaftMetrics<NodeId, CertusNode>>,
    /// openraft's data metrics (sent after every apply), relayed the same way.
    data_metrics: ordered_watch::Receiver<RaftDataMetrics<NodeId>>,
    /// The node's long-running tasks (this replica's own and the node's roles), for liveness.
    pub tasks: Arc<Tasks>,
}

/// A wait on this node's metrics that ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitElapsed {
    /// What was waited for.
    pub what: &'static str,
    /// How long.
    pub waited: Duration,
}

impl std::fmt::Display for WaitElapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "waited {:?} for {}", self.waited, self.what)
    }
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.id)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// How this node dials its peers (plain text or TLS with its certificate).
    pub fn peer_tls(&self) -> &crate::edge::tls::PeerTls {
        self.peers.tls()
    }

    /// Wires the shared paths of a node whose Raft is running.
    pub fn new(
        id: NodeId,
        node: CertusNode,
        raft: Raft,
        reader: StateReader,
        clock: Clock,
        peers: Peers,
        boot: BootLog,
    ) -> Arc<Replica> {
        let tasks = Tasks::new();
        let proposer = Proposer::start(id, raft.clone(), clock.clone(), &tasks);
        let (reads, read_queue) = mpsc::channel(READ_QUEUE_MAX);
        let (metrics_sender, metrics) = ordered_watch::channel(raft.metrics().borrow().clone());
        tasks.spawn(
            "raft metrics relay",
            ordered_watch::relay(raft.metrics(), metrics_sender),
        );
        #[allow(clippy::disallowed_methods)] // Its one subscriber is the relay.
        let raft_data_metrics = raft.data_metrics();
        let (data_sender, data_metrics) =
            ordered_watch::channel(raft_data_metrics.borrow().clone());
        tasks.spawn(
            "raft data metrics relay",
            ordered_watch::relay(raft_data_metrics, data_sender),
        );
        let replica = Arc::new(Replica {
            id,
            raft,
            reader,
            clock,
            node,
            peers,
            proposer,
            reads,
            leader_commit_seen: AtomicU64::new(0),
            leader_heard_at: std::sync::Mutex::new(None),
            boot,
            metrics,
            data_metrics,
            tasks,
        });
        replica.tasks.spawn(
            "read barriers",
            run_read_barriers(Arc::downgrade(&replica), read_queue),
        );
        replica
    }

    /// openraft's metrics: wait on this, never on `raft.metrics()` (see [`ordered_watch`]).
    pub fn metrics(&self) -> ordered_watch::Receiver<RaftMetrics<NodeId, CertusNode>> {
        self.metrics.clone()
    }

    /// openraft's data metrics, sent after every apply.
    pub fn data_metrics(&self) -> ordered_watch::Receiver<RaftDataMetrics<NodeId>> {
        self.data_metrics.clone()
    }

    /// Waits up to `within` for this node's metrics to satisfy `condition`, and returns them.
    pub async fn wait_metrics(
        &self,
        within: Duration,
        what: &'static str,
        condition: impl FnMut(&RaftMetrics<NodeId, CertusNode>) -> bool,
    ) -> Result<RaftMetrics<NodeId, CertusNode>, WaitElapsed> {
        let mut metrics = self.metrics();
        let elapsed = WaitElapsed {
            what,
            waited: within,
        };
        match tokio::time::timeout(within, metrics.wait_for(condition)).await {
            Ok(Ok(metrics)) => Ok(metrics.clone()),
            // Raft stopped: what was waited for will not come.
            Ok(Err(_)) | Err(_) => Err(elapsed),
        }
    }

    /// Waits up to `within` for this node to apply up to `index`.
    pub async fn wait_applied(
        &self,
        index: u64,
        within: Duration,
        what: &'static str,
    ) -> Result<(), WaitElapsed> {
        self.wait_metrics(within, what, |metrics| {
            index == 0
                || metrics
                    .last_applied
                    .is_some_and(|applied| applied.index >= index)
        })
        .await
        .map(|_| ())
    }

    /// Whether this node's store held a vote or a log when it started: it is part of a cluster
    /// already. Read from the store at start, so it does not wait for openraft's first metrics.
    pub fn founded_at_start(&self) -> bool {
        self.boot.term > 0 || self.boot.last_index > 0
    }

    /// The leader as this node knows it now, if any.
    pub fn leader(&self) -> Option<Leader> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader?;
        if leader == self.id {
            return (metrics.state == ServerState::Leader).then_some(Leader::Me);
        }
        let node = metrics
            .membership_config
            .membership()
            .get_node(&leader)?
            .clone();
        Some(Leader::Peer(leader, node))
    }

    /// Waits (up to [`LEADER_WAIT`]) for a leader other than `not`.
    async fn await_leader(&self, not: Option<NodeId>) -> Result<Leader, ServiceError> {
        let id = self.id;
        let waited = self
            .wait_metrics(LEADER_WAIT, "a leader is known", |metrics| {
                match metrics.current_leader {
                    Some(leader) if Some(leader) == not => false,
                    Some(leader) if leader == id => metrics.state == ServerState::Leader,
                    Some(_) => true,
                    None => false,
                }
            })
            .await;
        if waited.is_err() {
            return Err(ServiceError::NoLeader(format!(
                "no leader elected within {LEADER_WAIT:?}"
            )));
        }
        self.leader()
            .ok_or_else(|| ServiceError::NoLeader("leadership is changing".into()))
    }

    /// Returns once this node knows of a leader other than `leader` (never, while it does not).
    async fn leader_moved_from(&self, leader: NodeId) {
        let mut metrics = self.metrics();
        loop {
            let current = metrics.borrow_and_update().current_leader;
            if current.is_some_and(|current| current != leader) {
                return;
            }
            if metrics.changed().await.is_err() {
                // Raft stopped: the forward's own outcome decides.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Proposes `commands` on the leader (forwarding if need be) and returns their responses.
    pub async fn write(&self, commands: Vec<Command>) -> Result<Vec<Response>, ServiceError> {
        if commands.is_empty() || commands.len() > PROPOSAL_COMMANDS_MAX {
            return Err(ServiceError::InvalidArgument(format!(
                "a write carries 1 to {PROPOSAL_COMMANDS_MAX} commands, not {}",
                commands.len()
            )));
        }
        let mut not = None;
        for _hop in 0..LEADER_HOPS_MAX {
            let leader = match (not, self.leader()) {
                (None, Some(leader)) => leader,
                _ => self.await_leader(not).await?,
            };
            match leader {
                Leader::Me => {
                    if let Some(silent_ms) = self.quorum_silent_ms() {
                        return Err(ServiceError::NoLeader(format!(
                            "this node leads, but no quorum has acknowledged it for {silent_ms} \
                             ms (cut off from the majority), so nothing was proposed"
                        )));
                    }
                    match self.proposer.write(commands.clone()).await {
                        WriteOutcome::Applied(responses) => return Ok(responses),
                        WriteOutcome::NotLeader => not = Some(self.id),
                        WriteOutcome::Failed(error) => return Err(error),
                    }
                }
                Leader::Peer(leader, node) => {
                    let request = ForwardRequest::Write(commands.clone());
                    // A leader cut off from this node holds the write until the forward times
                    // out; once another node leads, the answer is as unknown as it would be
                    // then, so say so now rather than seconds later.
                    let forwarded = tokio::select! {
                        // Polled in order, not at random: the simulation replays a seed exactly.
                        biased;
                        reply = self.peers.forward(&node.grpc_addr, &request) => reply,
                        () = self.leader_moved_from(leader) => {
                            return Err(ServiceError::OutcomeUnknown(format!(
                                "node {leader} stopped leading while it held this write; it may \
                                 or may not be applied"
                            )));
                        }
                    };
                    match forwarded {
                        Ok(ForwardReply::Written(responses)) => return Ok(responses),
                        Ok(ForwardReply::Refused(ForwardRefusal::NotLeader)) => {
                            not = Some(leader);
                        }
                        Ok(reply) => return Err(refusal(reply)),
                        // Nothing left this node, and every earlier hop was refused before
                        // proposing: the write certainly took no effect, which `no-leader` says
                        // (a crashed leader otherwise left every write through a follower
                        // unknown until an election).
                        Err(error) if error.never_sent() => {
                            return Err(ServiceError::NoLeader(format!(
                                "the leader {leader} could not be reached, so nothing was \
                                 proposed: {error}"
                            )));
                        }
                        Err(error) => return Err(ServiceError::OutcomeUnknown(error.to_string())),
                    }
                }
            }
        }
        Err(ServiceError::NoLeader(format!(
            "leadership changed {LEADER_HOPS_MAX} times while forwarding"
        )))
    }

    /// Proposes one command of a client call, as the call's numbered request when it carried one
    /// (read from the call's metadata by `convert::clients::client_request`): applied at most
    /// once, never after the client moved past it. A refusal by the session layer comes back as
    /// [`ServiceError::Client`]; otherwise the command's own response.
    pub async fn write_for(
        &self,
        client: Option<ClientRequest>,
        command: Command,
    ) -> Result<Response, ServiceError> {
        let command = match client {
            Some(request) => Command::Once {
                request,
                command: Box::new(command),
            },
            None => command,
        };
        let mut responses = self.write(vec![command]).await?;
        assert_eq!(responses.len(), 1, "one response per command");
        match responses.remove(0) {
            Response::Client(Err(error)) if client.is_some() => Err(ServiceError::Client(error)),
            response => Ok(response),
        }
    }

    /// Waits until a read of this node's state is linearizable: the leader confirmed it still
    /// leads at a read index, and this node has applied up to it. Concurrent reads share one
    /// confirmation.
    pub async fn read_barrier(&self) -> Result<(), ServiceError> {
        let (reply, answer) = oneshot::channel();
        self.reads
            .send(reply)
            .await
            .map_err(|_| ServiceError::Unavailable("node is stopping".into()))?;
        answer
            .await
            .map_err(|_| ServiceError::Unavailable("node is stopping".into()))?
    }

    /// A linearizable read of the state: `read` gets the state and this node's clock.
    pub async fn read<T>(&self, read: impl FnOnce(&State, u64) -> T) -> Result<T, ServiceError> {
        Ok(self.read_at(read).await?.0)
    }

    /// [`Replica::read`], with the log index of the last entry applied to the state it read
    /// (0 before any): of any two linearizable reads, the later never reads at a lower index.
    pub async fn read_at<T>(
        &self,
        read: impl FnOnce(&State, u64) -> T,
    ) -> Result<(T, u64), ServiceError> {
        self.read_barrier().await?;
        let now_ms = self.clock.now_ms();
        Ok(self.reader.read(|applied| {
            let index = applied.last_applied.map_or(0, |log_id| log_id.index);
            (read(&applied.state, now_ms), index)
        }))
    }

    /// The read index, confirmed by this node as leader, and applied here. Refuses if this node
    /// does not lead.
    pub async fn leader_read_index(&self) -> Result<u64, ForwardRefusal> {
        let term = || self.raft.metrics().borrow().current_term;
        let term_before = term();
        // openraft's `ensure_linearizable` would wait on its metrics channel itself; the apply
        // is waited for below, on the relayed metrics (see `ordered_watch`).
        let (index, applied) = match self.raft.get_read_log_id().await {
            Ok((read_log_id, applied)) => (
                read_log_id.map_or(0, |log_id| log_id.index),
                applied.map_or(0, |log_id| log_id.index),
            ),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_))) => {
                return Err(ForwardRefusal::NotLeader);
            }
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(error))) => {
                return Err(ForwardRefusal::Unavailable(error.to_string()));
            }
            Err(RaftError::Fatal(fatal)) => {
                return Err(ForwardRefusal::Unavailable(fatal.to_string()));
            }
        };
        if index > applied {
            self.wait_applied(index, READ_APPLY_WAIT, "the read index to be applied")
                .await
                .map_err(|error| ForwardRefusal::Unavailable(error.to_string()))?;
        }
        // Which term the confirmation was for is only certain when it did not change meanwhile;
        // otherwise the caller asks again.
        if term() != term_before {
            return Err(ForwardRefusal::NotLeader);
        }
        if term_before != self.boot.term || index >= self.boot.last_index {
            return Ok(index);
        }
        // Leading again in the term it led before a restart: see `BootLog`.
        self.wait_applied(
            self.boot.last_index,
            READ_APPLY_WAIT,
            "the log on disk at start to be applied",
        )
        .await
        .map_err(|error| {
            ForwardRefusal::Unavailable(format!(
                "the entries on disk at start (up to {}) are not applied yet: {error}",
                self.boot.last_index
            ))
        })?;
        Ok(self.boot.last_index)
    }

    async fn barrier_once(&self) -> Result<(), ServiceError> {
        let mut not = None;
        for _hop in 0..LEADER_HOPS_MAX {
            let leader = match (not, self.leader()) {
                (None, Some(leader)) => leader,
                _ => self.await_leader(not).await?,
            };
            let index = match leader {
                Leader::Me => match self.leader_read_index().await {
                    // leader_read_index has waited for the apply as well.
                    Ok(_) => return Ok(()),
                    Err(ForwardRefusal::NotLeader) => {
                        not = Some(self.id);
                        continue;
                    }
                    Err(refused) => return Err(refusal(ForwardReply::Refused(refused))),
                },
                Leader::Peer(leader, node) => {
                    match self
                        .peers
                        .forward(&node.grpc_addr, &ForwardRequest::ReadIndex)
                        .await
                    {
                        Ok(ForwardReply::ReadIndex(index)) => index,
                        Ok(ForwardReply::Refused(ForwardRefusal::NotLeader)) => {
                            not = Some(leader);
                            continue;
                        }
                        Ok(reply) => return Err(refusal(reply)),
                        Err(error) => return Err(ServiceError::NoLeader(error.to_string())),
                    }
                }
            };
            return self
                .wait_applied(index, READ_APPLY_WAIT, "the read index to be applied")
                .await
                .map_err(|error| {
                    ServiceError::Timeout(format!(
                        "this node did not apply up to read index {index}: {error}"
                    ))
                });
        }
        Err(ServiceError::NoLeader(format!(
            "leadership changed {LEADER_HOPS_MAX} times during a read"
        )))
    }

    /// Adds a learner (on the leader, forwarding if need be) and waits until it has caught up.
    pub async fn add_learner(
        &self,
        id: NodeId,
        node: CertusNode,
    ) -> Result<MembershipView, ServiceError> {
        self.membership_op(ForwardRequest::AddLearner { id, node })
            .await
    }

    /// Replaces the voters (on the leader, forwarding if need be).
    pub async fn change_membership(
        &self,
        voters: BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<MembershipView, ServiceError> {
        self.membership_op(ForwardRequest::ChangeMembership { voters, retain })
            .await
    }

    /// Records new addresses for member `id` (on the leader, forwarding if need be).
    pub async fn set_member_address(
        &self,
        id: NodeId,
        node: CertusNode,
    ) -> Result<MembershipView, ServiceError> {
        self.membership_op(ForwardRequest::SetMemberAddress { id, node })
            .await
    }

    async fn membership_op(&self, request: ForwardRequest) -> Result<MembershipView, ServiceError> {
        let mut not = None;
        for _hop in 0..LEADER_HOPS_MAX {
            let leader = match (not, self.leader()) {
                (None, Some(leader)) => leader,
                _ => self.await_leader(not).await?,
            };
            let reply = match leader {
                Leader::Me => self.serve_forwarded(request.clone()).await,
                Leader::Peer(leader, node) => {
                    match self.peers.forward(&node.grpc_addr, &request).await {
                        Ok(ForwardReply::Refused(ForwardRefusal::NotLeader)) => {
                            not = Some(leader);
                            continue;
                        }
                        Ok(reply) => reply,
                        Err(error) => return Err(ServiceError::OutcomeUnknown(error.to_string())),
                    }
                }
            };
            match reply {
                ForwardReply::Membership(view) => return Ok(view),
                ForwardReply::Refused(ForwardRefusal::NotLeader) => not = Some(self.id),
                other => return Err(refusal(other)),
            }
        }
        Err(ServiceError::NoLeader(format!(
            "leadership changed {LEADER_HOPS_MAX} times during a membership change"
        )))
    }

    /// Serves a request forwarded by a follower; this node must be the leader.
    pub async fn serve_forwarded(&self, request: ForwardRequest) -> ForwardReply {
        if self.leader() != Some(Leader::Me) {
            return ForwardReply::Refused(ForwardRefusal::NotLeader);
        }
        // A leader whose membership change removed it from the cluster leads on until its next
        // tick. openraft must not be handed another membership change meanwhile (it requires the
        // leader to be a member, and its debug builds assert it, stopping the node's Raft), so
        // the change waits for the next leader.
        let changes_membership = matches!(
            request,
            ForwardRequest::AddLearner { .. }
                | ForwardRequest::ChangeMembership { .. }
                | ForwardRequest::SetMemberAddress { .. }
        );
        if changes_membership && !self.is_member() {
            return ForwardReply::Refused(ForwardRefusal::NotLeader);
        }
        match request {
            ForwardRequest::Write(commands)
                if commands.is_empty() || commands.len() > PROPOSAL_COMMANDS_MAX =>
            {
                // Peers send what their own services built; anything else is refused, not obeyed.
                ForwardReply::Refused(ForwardRefusal::FailedPrecondition(format!(
                    "a forwarded write carries 1 to {PROPOSAL_COMMANDS_MAX} commands, not {}",
                    commands.len()
                )))
            }
            // Refused as by a node that does not lead: the follower looks for another leader,
            // and says `no-leader` (nothing proposed) if none comes.
            ForwardRequest::Write(_) if self.quorum_silent_ms().is_some() => {
                ForwardReply::Refused(ForwardRefusal::NotLeader)
            }
            ForwardRequest::Write(commands) => match self.proposer.write(commands).await {
                WriteOutcome::Applied(responses) => ForwardReply::Written(responses),
                WriteOutcome::NotLeader => ForwardReply::Refused(ForwardRefusal::NotLeader),
                WriteOutcome::Failed(error) => ForwardReply::Refused(error_refusal(error)),
            },
            ForwardRequest::ReadIndex => match self.leader_read_index().await {
                Ok(index) => ForwardReply::ReadIndex(index),
                Err(refused) => ForwardReply::Refused(refused),
            },
            ForwardRequest::AddLearner { id, node } => {
                self.membership_reply(|| async {
                    let written = self.raft.add_learner(id, node.clone(), false).await?;
                    self.learner_caught_up(id, written.log_id.index).await;
                    Ok(written)
                })
                .await
            }
            ForwardRequest::ChangeMembership { voters, retain } => {
                self.membership_reply(|| async {
                    // A change whose caller went away between its two steps leaves the
                    // cluster in a joint configuration no one finishes. openraft's next change
                    // from there drops every voter of the first half from the members when
                    // not retaining them, the leader among them, and then cannot append its own
                    // second step; so finish the old change first, keeping whom it left out as
                    // learners (a joint change still in progress is refused as in progress and
                    // waited for instead).
                    if let Some(unfinished) = self.unfinished_change_goal() {
                        self.raft
                            .change_membership(ChangeMembers::ReplaceAllVoters(unfinished), true)
                            .await?;
                    }
                    self.raft
                        .change_membership(ChangeMembers::ReplaceAllVoters(voters.clone()), retain)
                        .await
                })
                .await
            }
            ForwardRequest::SetMemberAddress { id, node } => {
                if !self
                    .membership()
                    .members
                    .iter()
                    .any(|member| member.id == id)
                {
                    return ForwardReply::Refused(ForwardRefusal::FailedPrecondition(format!(
                        "node {id} is not a member; add it as a learner instead"
                    )));
                }
                // SetNodes replaces the node's entry; it never adds one (checked above) or
                // changes who votes.
                self.membership_reply(|| {
                    let nodes = BTreeMap::from([(id, node.clone())]);
                    self.raft
                        .change_membership(ChangeMembers::SetNodes(nodes), true)
                })
                .await
            }
        }
    }

    /// Returns once learner `id` has replicated up to `index` (the entry that added it), or
    /// this node no longer leads. openraft's own blocking `add_learner` waits the same way, on
    /// its metrics channel directly (see `ordered_watch`).
    async fn learner_caught_up(&self, id: NodeId, index: u64) {
        let mut metrics = self.metrics();
        let _ = metrics
            .wait_for(|metrics| {
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|replication| replication.get(&id).copied().flatten());
                metrics.state != ServerState::Leader
                    || matched.is_some_and(|matched| matched.index >= index)
            })
            .await;
    }

    /// Runs the membership change `change` makes. While openraft is still committing the
    /// previous change (the final configuration that follows a joint one, which status already
    /// shows), it is refused as in progress: waits for that and tries again, all within
    /// `MEMBERSHIP_CHANGE_TIMEOUT`, so a change made right after another is not refused.
    async fn membership_reply<Change>(&self, change: impl Fn() -> Change) -> ForwardReply
    where
        Change: Future<
            Output = Result<
                openraft::raft::ClientWriteResponse<crate::raft::types::TypeConfig>,
                RaftError<NodeId, openraft::error::ClientWriteError<NodeId, CertusNode>>,
            >,
        >,
    {
        use openraft::error::{ChangeMembershipError, ClientWriteError};
        let deadline = tokio::time::Instant::now() + MEMBERSHIP_CHANGE_TIMEOUT;
        let answered = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let answered = tokio::time::timeout(left, change()).await;
            let in_progress = matches!(
                answered,
                Ok(Err(RaftError::APIError(
                    ClientWriteError::ChangeMembershipError(ChangeMembershipError::InProgress(_))
                )))
            );
            if !in_progress || tokio::time::Instant::now() >= deadline {
                break answered;
            }
            tokio::time::sleep(MEMBERSHIP_IN_PROGRESS_RETRY).await;
        };
        match answered {
            Err(_elapsed) => ForwardReply::Refused(ForwardRefusal::OutcomeUnknown(format!(
                "the membership change did not finish within {MEMBERSHIP_CHANGE_TIMEOUT:?}"
            ))),
            Ok(Ok(written)) => {
                let mut view = self.membership();
                view.log_index = written.log_id.index;
                ForwardReply::Membership(view)
            }
            Ok(Err(error)) => match write_error(error) {
                WriteOutcome::NotLeader => ForwardReply::Refused(ForwardRefusal::NotLeader),
                WriteOutcome::Failed(error) => ForwardReply::Refused(error_refusal(error)),
                WriteOutcome::Applied(_) => unreachable!("an error is not an application"),
            },
        }
    }

    /// The voters a joint configuration this node knows is changing to, if it knows one.
    fn unfinished_change_goal(&self) -> Option<BTreeSet<NodeId>> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let configs = metrics.membership_config.membership().get_joint_config();
        (configs.len() > 1)
            .then(|| configs.last().cloned())
            .flatten()
    }

    /// Whether the membership this node knows (the latest it appended) includes it.
    pub fn is_member(&self) -> bool {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        metrics
            .membership_config
            .membership()
            .get_node(&self.id)
            .is_some()
    }

    /// The membership this node knows.
    pub fn membership(&self) -> MembershipView {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let stored = &metrics.membership_config;
        let membership = stored.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        MembershipView {
            log_index: stored.log_id().map_or(0, |log_id| log_id.index),
            members: membership
                .nodes()
                .map(|(id, node)| MemberView {
                    id: *id,
                    node: node.clone(),
                    voter: voters.contains(id),
                })
                .collect(),
        }
    }

    /// Notes the commit index a leader sent this node (for readiness and status).
    pub fn observe_leader_commit(&self, index: u64) {
        self.leader_commit_seen.fetch_max(index, Ordering::Relaxed);
    }

    /// Notes that this node took an append (or a heartbeat) from the leader of its term.
    pub fn observe_leader_contact(&self) {
        *self.leader_heard_at.lock().expect("leader contact") = Some(tokio::time::Instant::now());
    }

    /// How long ago this node last took an append from a leader (`None`: never since it
    /// started).
    pub fn millis_since_leader_contact(&self) -> Option<u64> {
        let heard_at = *self.leader_heard_at.lock().expect("leader contact");
        heard_at.map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// How long a node may go without word from the rest of the cluster (a leader without a
    /// quorum's acknowledgement, a follower or learner without an append from its leader)
    /// before it counts as cut off: twice the longest election timeout, so a heartbeat or an
    /// election missed on the way is not taken for a cut. Readiness (`services::health`) and
    /// the refusal of writes on a cut-off leader both use it, so a leader that says it is not
    /// ready is the one that refuses.
    pub fn cut_off_after_ms(&self) -> u64 {
        2 * self.raft.config().election_timeout_max
    }

    /// On a leader no quorum has acknowledged for longer than [`Self::cut_off_after_ms`], how
    /// long it has been silent. openraft leaves such a leader leading (it does not step down
    /// for want of a quorum), and a write it proposed would wait for a commit that cannot come
    /// while the majority elects another leader: the caller learns nothing until its deadline,
    /// and then only that the write may or may not be applied. Refused before proposing
    /// instead, the write certainly took no effect and the caller moves on at once. A leader
    /// not acknowledged yet (just elected) is not refused.
    fn quorum_silent_ms(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        quorum_silent_ms(&metrics, self.cut_off_after_ms())
    }

    /// The commit index: the highest a leader told this node, or on the leader the index a
    /// quorum of voters has stored.
    pub fn commit_index(&self) -> u64 {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let applied = metrics.last_applied.map_or(0, |log_id| log_id.index);
        let seen = self.leader_commit_seen.load(Ordering::Relaxed);
        let quorum = match (&metrics.replication, metrics.state) {
            (Some(replication), ServerState::Leader) => {
                let membership = metrics.membership_config.membership();
                let mut matched: Vec<u64> = membership
                    .voter_ids()
                    .map(|voter| {
                        if voter == self.id {
                            metrics.last_log_index.unwrap_or(0)
                        } else {
                            replication
                                .get(&voter)
                                .and_then(|matched| matched.map(|log_id| log_id.index))
                                .unwrap_or(0)
                        }
                    })
                    .collect();
                matched.sort_unstable_by(|a, b| b.cmp(a));
                matched.get(matched.len() / 2).copied().unwrap_or(0)
            }
            _ => 0,
        };
        applied.max(seen).max(quorum)
    }
}

async fn run_read_barriers(
    replica: std::sync::Weak<Replica>,
    mut queue: mpsc::Receiver<oneshot::Sender<Result<(), ServiceError>>>,
) {
    while let Some(first) = queue.recv().await {
        // Every read queued before this confirmation starts is served by it.
        let mut waiters = vec![first];
        while let Ok(next) = queue.try_recv() {
            waiters.push(next);
        }
        let Some(replica) = replica.upgrade() else {
            break;
        };
        let result = replica.barrier_once().await;
        drop(replica);
        for waiter in waiters {
            let _ = waiter.send(result.clone());
        }
    }
    debug!("read barrier task stopped");
}

/// How long a leader has gone without a quorum's acknowledgement, if longer than `limit_ms`
/// (`None` for a node that does not lead, or a leader not acknowledged yet).
fn quorum_silent_ms(metrics: &RaftMetrics<NodeId, CertusNode>, limit_ms: u64) -> Option<u64> {
    if metrics.state != ServerState::Leader {
        return None;
    }
    metrics
        .millis_since_quorum_ack
        .filter(|silent_ms| *silent_ms > limit_ms)
}

fn error_refusal(error: ServiceError) -> ForwardRefusal {
    match error {
        ServiceError::OutcomeUnknown(message) => ForwardRefusal::OutcomeUnknown(message),
        ServiceError::FailedPrecondition(message) | ServiceError::InvalidArgument(message) => {
            ForwardRefusal::FailedPrecondition(message)
        }
        ServiceError::NoLeader(_) => ForwardRefusal::NotLeader,
        ServiceError::Unavailable(message) | ServiceError::Timeout(message) => {
            ForwardRefusal::Unavailable(message)
        }
        ServiceError::Client(error) => ForwardRefusal::FailedPrecondition(error.to_string()),
    }
}

fn refusal(reply: ForwardReply) -> ServiceError {
    match reply {
        ForwardReply::Refused(ForwardRefusal::NotLeader) => {
            ServiceError::NoLeader("the leader stepped down".into())
        }
        ForwardReply::Refused(ForwardRefusal::OutcomeUnknown(message)) => {
            ServiceError::OutcomeUnknown(message)
        }
        ForwardReply::Refused(ForwardRefusal::FailedPrecondition(message)) => {
            ServiceError::FailedPrecondition(message)
        }
        ForwardReply::Refused(ForwardRefusal::Unavailable(message)) => {
            ServiceError::Unavailable(message)
        }
        other => ServiceError::Unavailable(format!("the leader answered out of turn: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_leader_silent_past_the_limit_refuses_writes() {
        let mut metrics = RaftMetrics::new_initial(1);
        metrics.millis_since_quorum_ack = Some(5_000);
        assert_eq!(quorum_silent_ms(&metrics, 2_000), None, "a follower");
        metrics.state = ServerState::Leader;
        assert_eq!(quorum_silent_ms(&metrics, 2_000), Some(5_000), "cut off");
        metrics.millis_since_quorum_ack = Some(2_000);
        assert_eq!(quorum_silent_ms(&metrics, 2_000), None, "at the limit");
        metrics.millis_since_quorum_ack = None;
        assert_eq!(quorum_silent_ms(&metrics, 2_000), None, "just elected");
    }
}
