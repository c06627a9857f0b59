//! Applies a [`Schedule`] to a running cluster: the network and machine state always equals
//! what the faults in force call for, however they overlap.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_store::DiskFault;
use madsim::net::NetSim;
use tracing::info;

use crate::checkers::CutOffReadiness;
use crate::cluster::{SimCluster, elapsed_ms};
use crate::limits::{CRASH_AIM_MS_MAX, MEMBERSHIP_CALL_MS_MAX, VOTERS_RESTORE_MS_MAX};
use crate::observe::FaultSpan;
use crate::schedule::{DiskErrorKind, Fault, Schedule, THE_LEADER};

/// How often an aimed crash looks for one.
const CRASH_AIM_POLL: Duration = Duration::from_micros(200);

/// The faults in force and what they did, shared by the tasks that start and end them.
#[derive(Default)]
struct Board {
    /// Active faults by key, with whether a flapping link is currently down.
    active: BTreeMap<u64, (Fault, bool)>,
    /// Nodes currently crashed.
    crashed: BTreeMap<u64, ()>,
    /// Nodes currently paused.
    paused: BTreeMap<u64, ()>,
    /// The clock step set on each node, where not 0.
    clock_steps: BTreeMap<u64, i64>,
    /// The fsync latency added on each node, where any.
    slow_syncs: BTreeMap<u64, u64>,
    slow_applies: BTreeMap<u64, u64>,
    /// How each node's disk fails, where it does.
    disk_errors: BTreeMap<u64, DiskErrorKind>,
    /// Every fault as applied, for the timeline.
    spans: Vec<FaultSpan>,
    /// Each removed voter the harness could not make a voter again in time, and why.
    unrestored_voters: Vec<String>,
    /// When each node last started again or resumed (simulated ms since the run began).
    disturbed_at_ms: BTreeMap<u64, u64>,
    /// What each node cut off from all the others said of its readiness as its cut ended.
    cut_off_readiness: Vec<CutOffReadiness>,
}

/// Slack over `Replica::cut_off_after_ms` for a node cut off to notice: its last metrics may
/// be a heartbeat old, and a restart or resume starts its silence afresh.
const CUT_OFF_NOTICE_SLACK_MS: u64 = 1_000;

/// Drives the faults of one run.
#[derive(Clone)]
pub struct FaultDriver {
    cluster: Arc<SimCluster>,
    board: Arc<Mutex<Board>>,
    started: tokio::time::Instant,
    nodes: u64,
    /// Held while the voters are changed: one membership change at a time, in the order the
    /// faults begin and end.
    membership: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for FaultDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultDriver").finish_non_exhaustive()
    }
}

impl FaultDriver {
    /// A driver for `cluster`, whose run began at `started`.
    pub fn new(cluster: Arc<SimCluster>, started: tokio::time::Instant) -> FaultDriver {
        let nodes = u64::try_from(cluster.ids().len()).unwrap_or(0);
        FaultDriver {
            cluster,
            board: Arc::default(),
            started,
            nodes,
            membership: Arc::default(),
        }
    }

    /// Runs the safety phase of `schedule`: every fault starts and ends at its time. Returns when
    /// the last one has ended (the caller then heals and applies the permanent fault).
    pub async fn run_safety_phase(&self, schedule: &Schedule) {
        let safety_ms = schedule.config.safety_ms;
        let mut tasks = Vec::new();
        for (key, planned) in schedule.faults.iter().enumerate() {
            let driver = self.clone();
            let planned = planned.clone();
            let key = u64::try_from(key).unwrap_or(u64::MAX);
            tasks.push(tokio::spawn(async move {
                driver.sleep_until_ms(planned.at_ms).await;
                driver.aim_crash(&planned.fault).await;
                let Some(fault) = driver.aim_at_leader(&planned.fault).await else {
                    return;
                };
                let end_ms = planned.at_ms + planned.duration_ms;
                if let Fault::RemoveVoter { .. } = fault {
                    let restore_by_ms = end_ms.max(safety_ms) + VOTERS_RESTORE_MS_MAX;
                    driver.remove_voter(key, fault, end_ms, restore_by_ms).await;
                    return;
                }
                driver.begin(key, fault);
                if let Fault::Flap { period_ms, .. } = planned.fault {
                    let mut down = true;
                    while elapsed_ms(driver.started) + period_ms < end_ms {
                        tokio::time::sleep(Duration::from_millis(period_ms)).await;
                        down = !down;
                        driver.set_flap(key, down);
                    }
                }
                driver.sleep_until_ms(end_ms).await;
                driver.end(key);
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
        self.sleep_until_ms(schedule.config.safety_ms).await;
    }

    /// Ends every fault still in force (there should be none) and applies `permanent`.
    pub fn heal(&self, permanent: Option<&Fault>) {
        let keys: Vec<u64> = self
            .board
            .lock()
            .expect("board")
            .active
            .keys()
            .copied()
            .collect();
        for key in keys {
            self.end(key);
        }
        info!("faults healed");
        if let Some(fault) = permanent {
            self.begin(u64::MAX, fault.clone());
        }
    }

    /// Each removed voter not made a voter again by its deadline, and why (empty when every
    /// removal was undone).
    pub fn unrestored_voters(&self) -> Vec<String> {
        self.board.lock().expect("board").unrestored_voters.clone()
    }

    /// Makes the voter removal `fault` (unless it would leave fewer than a majority of the nodes
    /// voting, or another fault already removed its node) until `end_ms`, then makes the node a
    /// voter again, trying until `restore_by_ms`.
    async fn remove_voter(&self, key: u64, fault: Fault, end_ms: u64, restore_by_ms: u64) {
        let Fault::RemoveVoter { node, .. } = fault else {
            return;
        };
        {
            let board = self.board.lock().expect("board");
            let removed = removed_voters(&board);
            let voting_after = self
                .nodes
                .saturating_sub(u64::try_from(removed.len()).unwrap_or(u64::MAX))
                .saturating_sub(1);
            if removed.contains_key(&node) || voting_after < self.nodes / 2 + 1 {
                info!(node, "voter removal skipped: it would leave too few voters");
                return;
            }
        }
        self.begin(key, fault);
        self.make_voters(end_ms).await;
        self.sleep_until_ms(end_ms).await;
        self.end(key);
        if !self.make_voters(restore_by_ms).await {
            let problem = format!(
                "n{node} was not a voter again {} s after its removal ended",
                (restore_by_ms - end_ms) / 1000
            );
            self.board
                .lock()
                .expect("board")
                .unrestored_voters
                .push(problem);
        }
    }

    /// Changes the voters to every node no removal in force names (adding back as learners
    /// first those that left), through the leader, trying until that holds or `until_ms`. True
    /// once made.
    async fn make_voters(&self, until_ms: u64) -> bool {
        let _one_at_a_time = self.membership.lock().await;
        loop {
            let (voters, retain) = {
                let board = self.board.lock().expect("board");
                let removed = removed_voters(&board);
                let voters: BTreeSet<u64> = self
                    .cluster
                    .ids()
                    .into_iter()
                    .filter(|id| !removed.contains_key(id))
                    .collect();
                (voters, !removed.values().any(|leaves| *leaves))
            };
            let left_ms = until_ms.saturating_sub(elapsed_ms(self.started));
            if left_ms == 0 {
                return false;
            }
            let timeout = Duration::from_millis(left_ms.min(MEMBERSHIP_CALL_MS_MAX));
            // Through the leader itself, so an abandoned call cannot land after a later one.
            if let Some(leader) = self.cluster.leader(Duration::from_millis(500)).await {
                match self
                    .readd_and_change_voters(leader, &voters, retain, timeout)
                    .await
                {
                    Ok(()) => {
                        info!(?voters, retain, "voters changed");
                        return true;
                    }
                    Err(error) => info!(%error, ?voters, "voter change failed; trying again"),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One attempt at making `voters` the voters through `leader`: a voter to be that is no
    /// longer a member is added back as a learner first.
    async fn readd_and_change_voters(
        &self,
        leader: u64,
        voters: &BTreeSet<u64>,
        retain: bool,
        timeout: Duration,
    ) -> Result<(), certus_node::ServiceError> {
        let members: BTreeSet<u64> = self
            .cluster
            .replica(leader)
            .map(|replica| {
                replica
                    .membership()
                    .members
                    .iter()
                    .map(|member| member.id)
                    .collect()
            })
            .unwrap_or_default();
        for &id in voters.difference(&members) {
            self.cluster.add_learner(leader, id, timeout).await?;
        }
        self.cluster
            .change_voters(leader, voters.clone(), retain, timeout)
            .await
    }

    /// Every fault as it was applied; those still in force end at `None`.
    pub fn spans(&self) -> Vec<FaultSpan> {
        self.board.lock().expect("board").spans.clone()
    }

    /// Half the crashes wait (up to [`CRASH_AIM_MS_MAX`]) for a moment when a node they take
    /// down has Raft log writes not yet synced, so that crashes tear writes in flight often
    /// rather than by luck; the others strike at their planned time.
    async fn aim_crash(&self, fault: &Fault) {
        use madsim::rand::Rng as _;

        let targets = match fault {
            Fault::Crash { node } => vec![*node],
            Fault::CrashAll => self.cluster.ids(),
            _ => return,
        };
        if !madsim::rand::thread_rng().gen_bool(0.5) {
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(CRASH_AIM_MS_MAX);
        while tokio::time::Instant::now() < deadline {
            let in_flight = targets
                .iter()
                .any(|id| self.cluster.log_files(*id).unsynced_writes() > 0);
            if in_flight {
                return;
            }
            tokio::time::sleep(CRASH_AIM_POLL).await;
        }
    }

    /// A demotion, slow apply or voter removal drawn for whoever leads gets the node that leads
    /// now (waiting up to a second for one); `None` if none does. Other faults are as drawn.
    async fn aim_at_leader(&self, fault: &Fault) -> Option<Fault> {
        match fault {
            Fault::Demote { node: THE_LEADER } => {
                let leader = self.cluster.leader(Duration::from_secs(1)).await?;
                Some(Fault::Demote { node: leader })
            }
            Fault::SlowApply {
                node: THE_LEADER,
                apply_ms,
            } => {
                let leader = self.cluster.leader(Duration::from_secs(1)).await?;
                Some(Fault::SlowApply {
                    node: leader,
                    apply_ms: *apply_ms,
                })
            }
            Fault::RemoveVoter {
                node: THE_LEADER,
                leave_cluster,
            } => {
                let leader = self.cluster.leader(Duration::from_secs(1)).await?;
                Some(Fault::RemoveVoter {
                    node: leader,
                    leave_cluster: *leave_cluster,
                })
            }
            _ => Some(fault.clone()),
        }
    }

    async fn sleep_until_ms(&self, at_ms: u64) {
        let target = self.started + Duration::from_millis(at_ms);
        tokio::time::sleep_until(target).await;
    }

    fn begin(&self, key: u64, fault: Fault) {
        let now = elapsed_ms(self.started);
        info!(fault = %fault, "fault begins");
        let mut board = self.board.lock().expect("board");
        board.spans.push(FaultSpan {
            from_ms: now,
            until_ms: None,
            label: fault.to_string(),
            nodes: fault.nodes(self.nodes),
            kind: fault.family().name().to_owned(),
        });
        board.active.insert(key, (fault, true));
        self.apply(&mut board);
    }

    fn set_flap(&self, key: u64, down: bool) {
        let mut board = self.board.lock().expect("board");
        if let Some(entry) = board.active.get_mut(&key) {
            entry.1 = down;
        }
        self.apply(&mut board);
    }

    fn end(&self, key: u64) {
        let now = elapsed_ms(self.started);
        let mut board = self.board.lock().expect("board");
        self.judge_cut_off(&mut board, key, now);
        let Some((fault, _)) = board.active.remove(&key) else {
            return;
        };
        info!(fault = %fault, "fault ends");
        let label = fault.to_string();
        let failed_disk = match fault {
            Fault::DiskError { node, .. } => Some(node),
            _ => None,
        };
        if let Some(span) = board
            .spans
            .iter_mut()
            .rev()
            .find(|span| span.label == label && span.until_ms.is_none())
        {
            span.until_ms = Some(now);
        }
        self.apply(&mut board);
        // A process that met a failing disk must have stopped (or fenced itself): its
        // supervisor starts it again once the disk works. The restart is a crash, since the
        // page cache of a disk that failed cannot be trusted.
        if let Some(node) = failed_disk
            && !board.crashed.contains_key(&node)
            && !board.disk_errors.contains_key(&node)
        {
            info!(node, "restart after the disk failure");
            self.cluster.crash(node);
            board.paused.remove(&node);
            self.cluster.restart(node);
            board.disturbed_at_ms.insert(node, now);
            self.apply(&mut board);
        }
    }

    /// As fault `key` ends: if it left one node alone (an isolation, a split with a minority of
    /// one) long enough to notice, and the node ran untouched meanwhile, records whether it said
    /// it was ready. Alone, it cannot serve: as a leader no quorum acknowledges it, as a
    /// follower or learner no leader reaches it.
    fn judge_cut_off(&self, board: &mut Board, key: u64, now: u64) {
        let Some((fault, _)) = board.active.get(&key) else {
            return;
        };
        let node = match fault {
            Fault::Isolate { node } => *node,
            Fault::Split { minority } if minority.len() == 1 => minority[0],
            _ => return,
        };
        let label = fault.to_string();
        let Some(from_ms) = board
            .spans
            .iter()
            .rev()
            .find(|span| span.label == label && span.until_ms.is_none())
            .map(|span| span.from_ms)
        else {
            return;
        };
        let Some(replica) = self.cluster.replica(node) else {
            return;
        };
        let notice_ms = replica.cut_off_after_ms() + CUT_OFF_NOTICE_SLACK_MS;
        let settled_since = board
            .disturbed_at_ms
            .get(&node)
            .copied()
            .unwrap_or(0)
            .max(from_ms);
        if board.crashed.contains_key(&node)
            || board.paused.contains_key(&node)
            || now.saturating_sub(settled_since) < notice_ms
        {
            return;
        }
        let ready = certus_node::services::health::readiness(&replica).ready;
        board.cut_off_readiness.push(CutOffReadiness {
            node,
            from_ms,
            until_ms: now,
            ready,
        });
    }

    /// What each node cut off alone said of its readiness as its cut ended.
    pub fn cut_off_readiness(&self) -> Vec<CutOffReadiness> {
        self.board.lock().expect("board").cut_off_readiness.clone()
    }

    /// Makes the network and machines match the faults in `board.active`.
    fn apply(&self, board: &mut Board) {
        let net = NetSim::current();
        let ids = self.cluster.ids();
        // The network: clear every cut, then cut what the active faults call for.
        for &a in &ids {
            net.unclog_node(self.cluster.machine(a));
            for &b in &ids {
                if a != b {
                    net.unclog_link(self.cluster.machine(a), self.cluster.machine(b));
                }
            }
        }
        let mut loss_per_mille = 0;
        let mut latency_ms = 10;
        let mut should_crash: BTreeMap<u64, ()> = BTreeMap::new();
        let mut should_pause: BTreeMap<u64, ()> = BTreeMap::new();
        let mut clock_steps: BTreeMap<u64, i64> = BTreeMap::new();
        let mut slow_syncs: BTreeMap<u64, u64> = BTreeMap::new();
        let mut slow_applies: BTreeMap<u64, u64> = BTreeMap::new();
        let mut disk_errors: BTreeMap<u64, DiskErrorKind> = BTreeMap::new();
        for (fault, down) in board.active.values() {
            match fault {
                Fault::Pause { node } => {
                    should_pause.insert(*node, ());
                }
                // Made by `make_voters`, not by the network or the machines.
                Fault::RemoveVoter { .. } => {}
                Fault::Demote { node } => {
                    for &b in ids.iter().filter(|&&b| b != *node && *node != THE_LEADER) {
                        net.clog_link(self.cluster.machine(*node), self.cluster.machine(b));
                    }
                }
                Fault::ClockStep { node, step_ms } => {
                    *clock_steps.entry(*node).or_default() += step_ms;
                }
                Fault::SlowDisk { node, sync_ms } => {
                    let slowest = slow_syncs.entry(*node).or_default();
                    *slowest = (*slowest).max(*sync_ms);
                }
                Fault::SlowApply { node, apply_ms } => {
                    let slowest = slow_applies.entry(*node).or_default();
                    *slowest = (*slowest).max(*apply_ms);
                }
                Fault::DiskError { node, kind } => {
                    // The latest of overlapping disk faults wins.
                    disk_errors.insert(*node, *kind);
                }
                Fault::Crash { node } => {
                    should_crash.insert(*node, ());
                }
                Fault::CrashAll => {
                    for &id in &ids {
                        should_crash.insert(id, ());
                    }
                }
                Fault::Isolate { node } => net.clog_node(self.cluster.machine(*node)),
                Fault::OneWay { from, to } => {
                    net.clog_link(self.cluster.machine(*from), self.cluster.machine(*to));
                }
                Fault::Split { minority } => {
                    for &a in minority {
                        for &b in ids.iter().filter(|id| !minority.contains(id)) {
                            net.clog_link(self.cluster.machine(a), self.cluster.machine(b));
                            net.clog_link(self.cluster.machine(b), self.cluster.machine(a));
                        }
                    }
                }
                Fault::Flap { a, b, .. } => {
                    if *down {
                        net.clog_link(self.cluster.machine(*a), self.cluster.machine(*b));
                        net.clog_link(self.cluster.machine(*b), self.cluster.machine(*a));
                    }
                }
                Fault::Network {
                    loss_per_mille: loss,
                    latency_ms: latency,
                } => {
                    loss_per_mille = loss_per_mille.max(*loss);
                    latency_ms = latency_ms.max(*latency);
                }
            }
        }
        net.update_config(|config| {
            config.packet_loss_rate =
                f64::from(u32::try_from(loss_per_mille).unwrap_or(0)) / 1000.0;
            config.send_latency = Duration::from_millis(1)..Duration::from_millis(latency_ms);
        });
        // Machines: crash what should be down, restart what should be up.
        for &id in &ids {
            let crashed = board.crashed.contains_key(&id);
            let should = should_crash.contains_key(&id);
            if should && !crashed {
                info!(node = id, "crash");
                self.cluster.crash(id);
                board.crashed.insert(id, ());
                // A killed machine's tasks are gone, paused or not.
                board.paused.remove(&id);
            } else if !should && crashed {
                info!(node = id, "restart");
                self.cluster.restart(id);
                board.crashed.remove(&id);
                board.disturbed_at_ms.insert(id, elapsed_ms(self.started));
            }
        }
        // Pauses, of the machines that run.
        for &id in &ids {
            let should = should_pause.contains_key(&id) && !board.crashed.contains_key(&id);
            let paused = board.paused.contains_key(&id);
            if should && !paused {
                info!(node = id, "pause");
                self.cluster.pause(id);
                board.paused.insert(id, ());
            } else if !should && paused {
                info!(node = id, "resume");
                self.cluster.resume(id);
                board.paused.remove(&id);
                board.disturbed_at_ms.insert(id, elapsed_ms(self.started));
            }
        }
        // Clocks and disks.
        for &id in &ids {
            let step = clock_steps.get(&id).copied().unwrap_or(0);
            if board.clock_steps.get(&id).copied().unwrap_or(0) != step {
                info!(node = id, step_ms = step, "clock stepped");
                self.cluster.step_clock(id, step);
            }
            let slow = slow_syncs.get(&id).copied().unwrap_or(0);
            if board.slow_syncs.get(&id).copied().unwrap_or(0) != slow {
                self.cluster.set_slow_disk(id, Duration::from_millis(slow));
            }
            let slow = slow_applies.get(&id).copied().unwrap_or(0);
            if board.slow_applies.get(&id).copied().unwrap_or(0) != slow {
                self.cluster.set_slow_apply(id, Duration::from_millis(slow));
            }
            let disk = disk_errors.get(&id).copied();
            if board.disk_errors.get(&id).copied() != disk {
                self.cluster.set_disk_fault(id, disk.map(disk_fault));
            }
        }
        board.clock_steps = clock_steps;
        board.slow_syncs = slow_syncs;
        board.slow_applies = slow_applies;
        board.disk_errors = disk_errors;
    }
}

/// The nodes the removals in force took from the voters, with whether each left the cluster.
fn removed_voters(board: &Board) -> BTreeMap<u64, bool> {
    board
        .active
        .values()
        .filter_map(|(fault, _)| match fault {
            Fault::RemoveVoter {
                node,
                leave_cluster,
            } => Some((*node, *leave_cluster)),
            _ => None,
        })
        .collect()
}

/// The simulated files' failure for a drawn disk error.
fn disk_fault(kind: DiskErrorKind) -> DiskFault {
    match kind {
        DiskErrorKind::WriteEio => DiskFault::WriteError,
        DiskErrorKind::SyncEio => DiskFault::SyncError,
        DiskErrorKind::Full => DiskFault::Full,
    }
}
