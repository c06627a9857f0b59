//! A simulated cluster: nodes on 10.0.0.N, each with a disk and Raft log files that survive its
//! crashes and a clock of its own, watched by the harness.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::{Command, Response};
use certus_node::acme::AcmeServer;
use certus_node::raft::forward::{ForwardRefusal, ForwardReply, ForwardRequest};
use certus_node::{
    CertusNode, Clock, CtNode, CtSetup, Leader, Node, NodeConfig, NodeParts, ServiceError,
    SessionParts, StartError,
};
use certus_store::{ApplyObserver, CrashReport, DiskFault, SimDisk, SimFiles};
use madsim::runtime::{Handle, NodeHandle};
use openraft_metrics::watch_roles;

use crate::limits::SLED_LOCK_WAIT_MAX;
use crate::observe::{Role, Sample};
use crate::schedule::Skew;

/// The gRPC port of every simulated node.
pub const GRPC_PORT: u16 = 7101;
/// The HTTP port of every simulated node (configured, not served: HTTP is real-socket only).
pub const HTTP_PORT: u16 = 7181;

/// The simulated address of node `id`.
pub fn node_ip(id: u64) -> IpAddr {
    let last = u8::try_from(id).expect("at most 254 simulated nodes");
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// A node of `1..=nodes` other than `node`, drawn from `rng` (`node` itself when it is the
/// only one): where a client goes when its node does not answer.
pub fn another_node(rng: &mut crate::schedule::SeedRng, node: u64, nodes: u64) -> u64 {
    if nodes < 2 {
        return node;
    }
    let step = rng.between(1, nodes - 1);
    (node - 1 + step) % nodes + 1
}

/// The gRPC endpoint of node `id`, as clients name it.
pub fn endpoint(id: u64) -> String {
    format!("{}:{GRPC_PORT}", node_ip(id))
}

/// The Raft log segment size of simulated nodes.
pub const SIM_LOG_SEGMENT_BYTES: u64 = 16 * 1024;

/// The default configuration of simulated node `id`.
pub fn config(id: u64) -> NodeConfig {
    let mut config = NodeConfig::new(
        id,
        SocketAddr::new(node_ip(id), GRPC_PORT),
        SocketAddr::new(node_ip(id), HTTP_PORT),
        PathBuf::from(format!("/sim/node-{id}")),
    );
    // Only the sessions scenarios run the daemons; elsewhere they would only add idle wake-ups.
    config.sessions.daemons = false;
    // Small Raft log segments: a run rolls over and purges whole segments many times.
    config.raft.log_segment_bytes = SIM_LOG_SEGMENT_BYTES;
    config
}

/// What the nodes store on.
#[derive(Clone, Debug)]
pub enum Storage {
    /// The simulated disk: a crash loses what was not flushed.
    Simulated,
    /// sled in a directory on the real filesystem (needs madsim's system-thread flag). A crash
    /// cannot lose what sled buffered: dropping a sled database writes it out.
    Sled(PathBuf),
}

/// How to build a cluster.
#[derive(Clone)]
pub struct ClusterSpec {
    /// How many nodes (ids 1..=nodes).
    pub nodes: u64,
    /// Each node's clock (nodes without one run on the global clock).
    pub clocks: Vec<Skew>,
    /// What the nodes store on.
    pub storage: Storage,
    /// Changes to each node's default configuration.
    pub tune: fn(&mut NodeConfig),
    /// The CT log every node runs, if any.
    pub ct: Option<CtSetup>,
    /// What each node's session daemons work with (called on every start of node `id`).
    pub sessions: Option<SessionPartsFor>,
}

/// Makes the session daemons' parts for node `id`.
pub type SessionPartsFor = Arc<dyn Fn(u64) -> SessionParts + Send + Sync>;

impl std::fmt::Debug for ClusterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSpec")
            .field("nodes", &self.nodes)
            .field("clocks", &self.clocks)
            .field("storage", &self.storage)
            .field("ct", &self.ct.is_some())
            .field("sessions", &self.sessions.is_some())
            .finish_non_exhaustive()
    }
}

impl ClusterSpec {
    /// `nodes` nodes on simulated disks with true clocks and default settings.
    pub fn plain(nodes: u64) -> ClusterSpec {
        ClusterSpec {
            nodes,
            clocks: Vec::new(),
            storage: Storage::Simulated,
            tune: |_| {},
            ct: None,
            sessions: None,
        }
    }
}

/// The running node of each simulated machine, as its init task published it.
type Running = Arc<Mutex<BTreeMap<u64, Arc<certus_node::Replica>>>>;

/// The CT part of each running node.
type RunningCt = Arc<Mutex<BTreeMap<u64, Arc<CtNode>>>>;

/// The ACME part of each running node (its nonces), with the node's incarnation.
type RunningAcme = Arc<Mutex<BTreeMap<u64, (u64, Arc<AcmeServer>)>>>;

/// How many times each node has started.
type Starts = Arc<Mutex<BTreeMap<u64, u64>>>;

/// Role changes and commit progress of every node, as watchers on the nodes saw them.
pub type Samples = Arc<Mutex<Vec<Sample>>>;

/// Every client request each node's state machine applied for the first time, in order.
pub type AppliedLog = Arc<Mutex<Vec<crate::checkers::AppliedRequest>>>;

/// A cluster of simulated machines.
pub struct SimCluster {
    handle: Handle,
    machines: BTreeMap<u64, NodeHandle>,
    disks: BTreeMap<u64, SimDisk>,
    log_files: BTreeMap<u64, SimFiles>,
    /// Each node's CT log files (full tiles, bundles, leaf-index runs).
    ct_files: BTreeMap<u64, SimFiles>,
    running: Running,
    running_ct: RunningCt,
    running_acme: RunningAcme,
    samples: Samples,
    applied: AppliedLog,
    /// What crashes did to unsynced file writes, over the run.
    unsynced_writes: Arc<Mutex<CrashReport>>,
    /// Each node's wall clock (one across its restarts) and its drawn skew.
    clocks: BTreeMap<u64, (Clock, Skew)>,
    /// The clock steps in force on each node, added to its skew (a restart keeps them).
    clock_steps: ClockSteps,
    /// Every node as the cluster was founded with it (its id and addresses).
    members: BTreeMap<u64, CertusNode>,
    started: tokio::time::Instant,
}

/// The clock step in force on each node, in ms.
type ClockSteps = Arc<Mutex<BTreeMap<u64, i64>>>;

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("nodes", &self.machines.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What the harness makes of the leader's answer to a membership change.
fn membership_changed(reply: ForwardReply) -> Result<(), ServiceError> {
    match reply {
        ForwardReply::Membership(_) => Ok(()),
        ForwardReply::Refused(ForwardRefusal::NotLeader) => Err(ServiceError::NoLeader(
            "the node asked does not lead".to_owned(),
        )),
        other => Err(ServiceError::FailedPrecondition(format!(
            "membership change refused: {other:?}"
        ))),
    }
}

/// Simulated milliseconds since `started`.
pub fn elapsed_ms(started: tokio::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl SimCluster {
    /// Starts `count` nodes (ids 1..=count) founding one cluster, on simulated disks with true
    /// clocks. Node 1 initializes it.
    pub fn start(count: u64) -> SimCluster {
        SimCluster::start_with(&ClusterSpec::plain(count), tokio::time::Instant::now())
    }

    /// Starts the cluster `spec` describes; `started` is the run's time zero.
    pub fn start_with(spec: &ClusterSpec, started: tokio::time::Instant) -> SimCluster {
        let handle = Handle::current();
        let running: Running = Arc::default();
        let running_ct: RunningCt = Arc::default();
        let running_acme: RunningAcme = Arc::default();
        let starts: Starts = Arc::default();
        let samples: Samples = Arc::default();
        let applied: AppliedLog = Arc::default();
        let tune = spec.tune;
        let configs: BTreeMap<u64, NodeConfig> = (1..=spec.nodes)
            .map(|id| {
                let mut config = config(id);
                if let Storage::Sled(root) = &spec.storage {
                    config.data_dir = root.join(format!("node-{id}"));
                }
                tune(&mut config);
                (id, config)
            })
            .collect();
        let members: BTreeMap<u64, CertusNode> = configs
            .iter()
            .map(|(id, config)| (*id, config.member()))
            .collect();
        let mut machines = BTreeMap::new();
        let mut disks = BTreeMap::new();
        let mut all_log_files = BTreeMap::new();
        let mut all_ct_files = BTreeMap::new();
        let mut clocks = BTreeMap::new();
        let clock_steps: ClockSteps = Arc::default();
        for id in 1..=spec.nodes {
            let disk = SimDisk::new();
            disks.insert(id, disk.clone());
            let log_files = SimFiles::new();
            all_log_files.insert(id, log_files.clone());
            let ct_files = SimFiles::new();
            all_ct_files.insert(id, ct_files.clone());
            let skew = spec
                .clocks
                .iter()
                .find(|skew| skew.node == id)
                .copied()
                .unwrap_or(Skew {
                    node: id,
                    offset_ms: 0,
                    drift_ppm: 0,
                });
            let node_clock = Clock::system();
            clocks.insert(id, (node_clock.clone(), skew));
            let steps = Arc::clone(&clock_steps);
            let running = Arc::clone(&running);
            let running_ct = Arc::clone(&running_ct);
            let running_acme = Arc::clone(&running_acme);
            let starts = Arc::clone(&starts);
            let samples = Arc::clone(&samples);
            let members = members.clone();
            let config = configs[&id].clone();
            let storage = spec.storage.clone();
            let ct = spec.ct.clone();
            let sessions = spec.sessions.clone();
            let applied = Arc::clone(&applied);
            let machine = handle
                .create_node()
                .name(format!("node-{id}"))
                .ip(node_ip(id))
                .init(move || {
                    let disk = disk.clone();
                    let files = certus_node::NodeFiles {
                        raft_log: Arc::new(log_files.clone()),
                        ct_log: Arc::new(ct_files.clone()),
                    };
                    let running = Arc::clone(&running);
                    let running_ct = Arc::clone(&running_ct);
                    let running_acme = Arc::clone(&running_acme);
                    let incarnation = {
                        let mut starts = starts.lock().expect("starts");
                        let count = starts.entry(id).or_insert(0);
                        *count += 1;
                        *count
                    };
                    let samples = Arc::clone(&samples);
                    let members = members.clone();
                    let config = config.clone();
                    let storage = storage.clone();
                    let ct = ct.clone();
                    let sessions = sessions
                        .as_ref()
                        .map_or_else(SessionParts::default, |parts| parts(id));
                    let applied = Arc::clone(&applied);
                    let clock = node_clock.clone();
                    let log_files_of_node = log_files.clone();
                    let step_ms = steps.lock().expect("clock steps").get(&id).copied();
                    let observer = ApplyObserver::new(move |request, index| {
                        applied.lock().expect("applied log").push(
                            crate::checkers::AppliedRequest {
                                node: id,
                                client: request.client.0,
                                sequence: request.sequence,
                                index,
                            },
                        );
                    });
                    async move {
                        // The wall clock picks up where its drift (and any step in force) has
                        // taken it by now.
                        let offset_ms = skew.offset_at(elapsed_ms(started)) + step_ms.unwrap_or(0);
                        clock.set_skew(offset_ms, skew.drift_ppm);
                        let node = match storage {
                            Storage::Simulated => {
                                let parts = NodeParts {
                                    disk: Arc::new(disk),
                                    files,
                                    clock,
                                    ct,
                                    sessions,
                                    applied: Some(observer),
                                };
                                Node::start_with(config, parts).await
                            }
                            Storage::Sled(_) => match open_sled_parts(&config, &clock) {
                                Ok(parts) => Node::start_with(config, parts).await,
                                Err(error) => Err(error),
                            },
                        };
                        // A node on a disk that fails now may not start, as a real process
                        // would exit; it stays down until the harness restarts it once the
                        // disk works. On a healthy disk a failed start is a bug.
                        let disk_fails = || log_files_of_node.fault().is_some();
                        let node = match node {
                            Ok(node) => node,
                            Err(error) if disk_fails() => {
                                tracing::warn!(node = id, %error, "no start on a failing disk");
                                return std::future::pending::<()>().await;
                            }
                            Err(error) => panic!("a simulated node starts: {error}"),
                        };
                        if id == 1
                            && let Err(error) = node.initialize(members).await
                        {
                            if !disk_fails() {
                                panic!("initialize: {error}");
                            }
                            tracing::warn!(node = id, %error, "no initialize on a failing disk");
                            return std::future::pending::<()>().await;
                        }
                        let replica = Arc::clone(node.replica());
                        running
                            .lock()
                            .expect("running table")
                            .insert(id, Arc::clone(&replica));
                        if let Some(ct) = node.ct() {
                            running_ct
                                .lock()
                                .expect("running CT table")
                                .insert(id, Arc::clone(ct));
                        }
                        running_acme
                            .lock()
                            .expect("running ACME table")
                            .insert(id, (incarnation, Arc::clone(node.acme())));
                        // Watching runs on the node's machine, so it dies with it.
                        watch_roles(replica, samples, started).await;
                        // A node's init task must not return, or madsim stops the node's tasks.
                        std::future::pending::<()>().await;
                        drop(node);
                    }
                })
                .build();
            certus_node::raft::runtime::skew::set_drift_ppm(machine.id(), skew.drift_ppm);
            machines.insert(id, machine);
        }
        SimCluster {
            handle,
            machines,
            disks,
            log_files: all_log_files,
            ct_files: all_ct_files,
            running,
            running_ct,
            running_acme,
            samples,
            applied,
            unsynced_writes: Arc::default(),
            clocks,
            clock_steps,
            members,
            started,
        }
    }

    /// The node ids.
    pub fn ids(&self) -> Vec<u64> {
        self.machines.keys().copied().collect()
    }

    /// The madsim machine of node `id`.
    pub fn machine(&self, id: u64) -> madsim::task::NodeId {
        self.machines[&id].id()
    }

    /// The node `id` as it runs now, if it does.
    pub fn replica(&self, id: u64) -> Option<Arc<certus_node::Replica>> {
        self.running
            .lock()
            .expect("running table")
            .get(&id)
            .cloned()
    }

    /// Every running node.
    pub fn replicas(&self) -> Vec<(u64, Arc<certus_node::Replica>)> {
        self.running
            .lock()
            .expect("running table")
            .iter()
            .map(|(id, replica)| (*id, Arc::clone(replica)))
            .collect()
    }

    /// Every client request the nodes' state machines applied for the first time, so far.
    pub fn applied_requests(&self) -> Vec<crate::checkers::AppliedRequest> {
        self.applied.lock().expect("applied log").clone()
    }

    /// Everything the watchers recorded so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().expect("samples").clone()
    }

    /// What the crashes so far did to file writes not yet synced.
    pub fn unsynced_writes(&self) -> CrashReport {
        *self.unsynced_writes.lock().expect("unsynced writes")
    }

    /// The CT part of every running node.
    pub fn ct_nodes(&self) -> Vec<(u64, Arc<CtNode>)> {
        self.running_ct
            .lock()
            .expect("running CT table")
            .iter()
            .map(|(id, ct)| (*id, Arc::clone(ct)))
            .collect()
    }

    /// The ACME part of node `id` as it runs now, if it does, with the node's incarnation (1
    /// for its first start, one more for each restart).
    pub fn acme(&self, id: u64) -> Option<(u64, Arc<AcmeServer>)> {
        self.running_acme
            .lock()
            .expect("running ACME table")
            .get(&id)
            .map(|(incarnation, acme)| (*incarnation, Arc::clone(acme)))
    }

    /// The simulated disk of node `id` (what survives its crashes).
    pub fn disk(&self, id: u64) -> &SimDisk {
        &self.disks[&id]
    }

    /// The simulated Raft log files of node `id` (what survives its crashes).
    pub fn log_files(&self, id: u64) -> &SimFiles {
        &self.log_files[&id]
    }

    /// The simulated CT log files of node `id` (what survives its crashes).
    pub fn ct_files(&self, id: u64) -> &SimFiles {
        &self.ct_files[&id]
    }

    /// Crashes node `id`: its tasks stop, its disk loses what was not flushed, and its Raft and
    /// CT log files lose what was not synced (each unsynced write is lost, kept or torn part way,
    /// and unsynced creates and removes may revert), drawn from the simulation's RNG.
    pub fn crash(&self, id: u64) {
        self.running.lock().expect("running table").remove(&id);
        self.running_ct
            .lock()
            .expect("running CT table")
            .remove(&id);
        self.running_acme
            .lock()
            .expect("running ACME table")
            .remove(&id);
        self.handle.kill(self.machines[&id].id());
        self.disks[&id].crash();
        let mut rng = madsim::rand::thread_rng();
        for files in [&self.log_files[&id], &self.ct_files[&id]] {
            let report = files.crash(&mut |bound| {
                use madsim::rand::Rng as _;
                rng.gen_range(0..bound.max(1))
            });
            *self.unsynced_writes.lock().expect("unsynced writes") += report;
        }
        self.samples.lock().expect("samples").push(Sample {
            at_ms: elapsed_ms(self.started),
            node: id,
            role: Role::Down,
            term: 0,
            committed: 0,
            applied: 0,
        });
    }

    /// Restarts a crashed node on its disk.
    pub fn restart(&self, id: u64) {
        self.handle.restart(self.machines[&id].id());
    }

    /// Stops running node `id`'s tasks (a process paused: nothing is lost, packets wait).
    pub fn pause(&self, id: u64) {
        self.handle.pause(self.machines[&id].id());
    }

    /// Runs node `id`'s tasks again after [`pause`](Self::pause); its timers and clocks find the
    /// time that passed.
    pub fn resume(&self, id: u64) {
        self.handle.resume(self.machines[&id].id());
    }

    /// Steps node `id`'s wall clock to `step_ms` away from its drawn skew (0: back to it), as
    /// NTP stepping it would; timers are untouched.
    pub fn step_clock(&self, id: u64, step_ms: i64) {
        self.clock_steps
            .lock()
            .expect("clock steps")
            .insert(id, step_ms);
        let (clock, skew) = &self.clocks[&id];
        clock.set_skew(
            skew.offset_at(elapsed_ms(self.started)) + step_ms,
            skew.drift_ppm,
        );
    }

    /// Makes node `id`'s Raft log disk fail as `fault` says, or work again (`None`).
    pub fn set_disk_fault(&self, id: u64, fault: Option<DiskFault>) {
        self.log_files[&id].set_fault(fault);
    }

    /// Adds `extra` to every sync of node `id`'s Raft log (zero: a healthy disk).
    pub fn set_slow_disk(&self, id: u64, extra: Duration) {
        certus_node::raft::runtime::slow_disk::set(self.machines[&id].id(), extra);
    }

    /// Adds `extra` to every batch node `id`'s state machine applies (zero: its usual pace).
    pub fn set_slow_apply(&self, id: u64, extra: Duration) {
        certus_node::raft::runtime::slow_apply::set(self.machines[&id].id(), extra);
    }

    /// Waits until a running node leads, and returns its id.
    pub async fn leader(&self, timeout: Duration) -> Option<u64> {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if let Some((id, _)) = self
                .replicas()
                .iter()
                .find(|(_, replica)| replica.leader() == Some(Leader::Me))
            {
                return Some(*id);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Proposes `commands` through node `via` (forwarded to the leader if need be).
    pub async fn write(
        &self,
        via: u64,
        commands: Vec<Command>,
    ) -> Result<Vec<Response>, ServiceError> {
        self.on_node(via, |replica| async move { replica.write(commands).await })
            .await
    }

    /// A linearizable read through node `via`: `read` gets the state and the node's clock.
    pub async fn read<T: Send + 'static>(
        &self,
        via: u64,
        read: impl FnOnce(&certus_core::State, u64) -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        self.on_node(via, |replica| async move { replica.read(read).await })
            .await
    }

    /// Makes `voters` the cluster's voters on node `leader`, as its admin service would: the
    /// members no longer voting stay learners if `retain`, and leave the cluster if not.
    /// Refused `no-leader` if `leader` does not lead (never forwarded: a forwarded request runs
    /// on in the leader's handler after its caller gave up, as madsim does not cancel it, and
    /// could land after a later change). Abandoned after `timeout`.
    pub async fn change_voters(
        &self,
        leader: u64,
        voters: std::collections::BTreeSet<u64>,
        retain: bool,
        timeout: Duration,
    ) -> Result<(), ServiceError> {
        let change = ForwardRequest::ChangeMembership { voters, retain };
        self.on_node_within(leader, Some(timeout), move |replica| async move {
            membership_changed(replica.serve_forwarded(change).await)
        })
        .await
    }

    /// Adds node `id` back as a learner on node `leader`, answering once it caught up; as
    /// [`SimCluster::change_voters`], never forwarded, and abandoned after `timeout`.
    pub async fn add_learner(
        &self,
        leader: u64,
        id: u64,
        timeout: Duration,
    ) -> Result<(), ServiceError> {
        let node = self.members[&id].clone();
        let add = ForwardRequest::AddLearner { id, node };
        self.on_node_within(leader, Some(timeout), move |replica| async move {
            membership_changed(replica.serve_forwarded(add).await)
        })
        .await
    }

    /// Runs `call` with node `via`'s replica on the node's machine. A call still unanswered
    /// after `timeout`, if one is given, is abandoned: its task on the node is aborted, so it
    /// proposes nothing more.
    async fn on_node_within<T, Call, Answer>(
        &self,
        via: u64,
        timeout: Option<Duration>,
        call: Call,
    ) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        Call: FnOnce(Arc<certus_node::Replica>) -> Answer,
        Answer: Future<Output = Result<T, ServiceError>> + Send + 'static,
    {
        let replica = self
            .replica(via)
            .ok_or_else(|| ServiceError::Unavailable(format!("node {via} is down")))?;
        let machine = self
            .handle
            .get_node(self.machines[&via].id())
            .expect("machine");
        let mut task = machine.spawn(call(replica));
        // A crash of the node mid-call kills the task: to the caller, the node went away.
        let went_down = |_| {
            Err(ServiceError::Unavailable(format!(
                "node {via} went down mid-call"
            )))
        };
        let Some(timeout) = timeout else {
            return task.await.unwrap_or_else(went_down);
        };
        match tokio::time::timeout(timeout, &mut task).await {
            Ok(answered) => answered.unwrap_or_else(went_down),
            Err(_elapsed) => {
                task.abort();
                Err(ServiceError::Timeout(format!(
                    "no answer from node {via} within {timeout:?}"
                )))
            }
        }
    }

    /// Runs `call` with node `via`'s replica on the node's machine, as a client request would.
    async fn on_node<T, Call, Answer>(&self, via: u64, call: Call) -> Result<T, ServiceError>
    where
        T: Send + 'static,
        Call: FnOnce(Arc<certus_node::Replica>) -> Answer,
        Answer: Future<Output = Result<T, ServiceError>> + Send + 'static,
    {
        self.on_node_within(via, None, call).await
    }
}

mod openraft_metrics {
    use std::sync::Arc;
    use std::time::Duration;

    use certus_node::Replica;

    use super::{Samples, elapsed_ms};
    use crate::observe::{Role, Sample};

    /// How often commit progress is sampled when roles do not change.
    const PROGRESS_EVERY: Duration = Duration::from_millis(200);

    /// Records every role or term change of `replica`, and its commit progress, until the
    /// machine dies.
    pub(super) async fn watch_roles(
        replica: Arc<Replica>,
        samples: Samples,
        started: tokio::time::Instant,
    ) {
        let mut metrics = replica.metrics();
        let mut last: Option<(Role, u64, u64)> = None;
        let mut last_at_ms = 0;
        loop {
            let sample = {
                let current = metrics.borrow_and_update();
                let role = match current.state {
                    openraft::ServerState::Leader => Role::Leader,
                    openraft::ServerState::Candidate => Role::Candidate,
                    _ => Role::Follower,
                };
                Sample {
                    at_ms: elapsed_ms(started),
                    node: replica.id,
                    role,
                    term: current.current_term,
                    committed: replica.commit_index(),
                    applied: current.last_applied.map_or(0, |log_id| log_id.index),
                }
            };
            // Every role or term change; commit progress at most every PROGRESS_EVERY.
            let role_changed =
                last.is_none_or(|(role, term, _)| (role, term) != (sample.role, sample.term));
            let progressed = last.is_some_and(|(_, _, committed)| committed != sample.committed)
                && sample.at_ms
                    >= last_at_ms + u64::try_from(PROGRESS_EVERY.as_millis()).unwrap_or(0);
            if role_changed || progressed {
                last = Some((sample.role, sample.term, sample.committed));
                last_at_ms = sample.at_ms;
                samples.lock().expect("samples").push(sample);
            }
            tokio::select! {
                // Polled in order, not at random: the simulation replays a seed exactly.
                biased;
                changed = metrics.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep(PROGRESS_EVERY) => {}
            }
        }
    }
}

/// Opens a sled node's storage. The crashed incarnation's sled lives on in this process until
/// its OS threads let go of the database's file lock (a real crash frees it with the process),
/// so a restart right after a crash waits for the lock, in real time, up to a bound.
fn open_sled_parts(
    config: &NodeConfig,
    clock: &Clock,
) -> Result<NodeParts<certus_store::SledDisk>, StartError> {
    let started = std::time::Instant::now();
    loop {
        match NodeParts::open(config, clock.clone()) {
            Err(error)
                if error.to_string().contains("could not acquire lock")
                    && started.elapsed() < SLED_LOCK_WAIT_MAX =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}
