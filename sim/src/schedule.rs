//! The fault schedule of a run, drawn from its seed before the run starts, so it can be printed,
//! saved and replayed.
//!
//! Swarm testing: each seed first draws which fault families it enables, then draws faults only
//! from those, so some seeds hammer one kind of fault and others mix many. Everything is bounded
//! by a [`FaultConfig`]: how long the safety phase lasts, how many faults, how much skew.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::{
    CLOCK_STEP_MS_MAX, CLOCK_STEP_MS_MIN, MACHINE_FAULTS_MAX, MEMBERSHIP_FAULTS_MAX, PAUSE_MS_MAX,
    PAUSE_MS_MIN, SLOW_APPLY_MS_MAX, SLOW_APPLY_MS_MIN, SLOW_SYNC_MS_MAX, SLOW_SYNC_MS_MIN,
};
use crate::observe::ClockSkew;

/// A small deterministic generator (SplitMix64) for schedules: independent of madsim's RNG, so a
/// schedule is the same whether or not a simulation runs it.
#[derive(Clone, Debug)]
pub struct SeedRng(u64);

impl SeedRng {
    /// A generator for `seed` and `stream` (different streams of one seed are independent).
    pub fn new(seed: u64, stream: u64) -> SeedRng {
        SeedRng(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high` (`low` if the range is empty).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        let span = high - low;
        match span.checked_add(1) {
            Some(size) => low + self.next_u64() % size,
            None => self.next_u64(),
        }
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next_u64() % 1000 < per_mille
    }

    /// A signed number in `-magnitude..=magnitude`.
    pub fn signed(&mut self, magnitude: u64) -> i64 {
        let magnitude = i64::try_from(magnitude).unwrap_or(i64::MAX / 2);
        let span = u64::try_from(magnitude).unwrap_or(0) * 2;
        i64::try_from(self.between(0, span)).unwrap_or(0) - magnitude
    }
}

/// The bounds of a run's faults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultConfig {
    /// Cluster size (node ids 1..=nodes).
    pub nodes: u64,
    /// How long the safety phase (faults on) lasts, in simulated ms.
    pub safety_ms: u64,
    /// How long the liveness phase (faults healed) lasts.
    pub liveness_ms: u64,
    /// The most faults drawn for the safety phase.
    pub max_faults: u64,
    /// The longest a single fault lasts.
    pub max_fault_ms: u64,
    /// The largest difference between any two nodes' wall clocks over the whole run.
    pub max_skew_ms: u64,
    /// The highest packet loss a network fault sets, per mille.
    pub max_loss_per_mille: u64,
    /// The highest one-way latency a network fault sets.
    pub max_latency_ms: u64,
    /// Whether the liveness phase may keep one fault on that leaves a majority able to work.
    pub permanent_fault: bool,
    /// Whether the machine faults (pauses, clock steps, and disk faults if `disk_faults`) may
    /// be drawn.
    #[serde(default)]
    pub machine_faults: bool,
    /// Whether disk faults (slow fsyncs, EIO, a full disk) may be drawn: only where the Raft
    /// log is on simulated files.
    #[serde(default)]
    pub disk_faults: bool,
    /// Whether voters may be removed from the cluster's membership and added back (drawn only
    /// for clusters of three nodes or more).
    #[serde(default)]
    pub membership_faults: bool,
}

impl FaultConfig {
    /// The defaults for a cluster of `nodes`: 20 s of faults, 20 s to recover, clocks at most
    /// 200 ms apart.
    pub fn for_nodes(nodes: u64) -> FaultConfig {
        FaultConfig {
            nodes,
            safety_ms: 20_000,
            liveness_ms: 20_000,
            max_faults: 8,
            max_fault_ms: 6_000,
            max_skew_ms: 200,
            max_loss_per_mille: 100,
            max_latency_ms: 50,
            permanent_fault: true,
            machine_faults: true,
            disk_faults: true,
            membership_faults: true,
        }
    }
}

/// A fault family; a seed enables a subset of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Crash a node (losing what it did not flush) and restart it later.
    Crash,
    /// Cut a node off from everyone, both ways.
    Isolate,
    /// Cut one direction of one link.
    OneWay,
    /// Split the cluster into a minority and a majority.
    Split,
    /// Cut and restore a link, over and over.
    Flap,
    /// Lose and delay packets everywhere.
    Network,
    /// Crash every node at once, then restart them all.
    CrashAll,
    /// Stop a node's process for a while (a GC pause, a VM stolen); its clock jumps on resume.
    Pause,
    /// Step a node's wall clock by seconds (NTP), and back when the fault ends.
    ClockStep,
    /// Make a node's fsyncs slow.
    SlowDisk,
    /// A node's disk answers EIO on writes or on syncs, or is full.
    DiskError,
    /// Cut the leader's links to the other nodes, one way: its followers elect another while
    /// clients still reach it, and it steps down when the new term reaches it.
    Demote,
    /// Make a node's state machine apply late (a machine starved of CPU): its applied index
    /// trails its commit index.
    SlowApply,
    /// Remove a voter (the leader half the time) from the cluster's membership, as an operator
    /// replacing a machine would: from the voters only (it stays a learner) or from the cluster;
    /// it is added back and votes again when the fault ends.
    Membership,
}

impl Family {
    /// The network and crash families, drawn from a seed's first stream (as before the machine
    /// faults existed, so those seeds still draw the same faults of these families).
    pub const ALL: [Family; 7] = [
        Family::Crash,
        Family::Isolate,
        Family::OneWay,
        Family::Split,
        Family::Flap,
        Family::Network,
        Family::CrashAll,
    ];

    /// The machine faults and leader demotion, drawn from a seed's second stream.
    pub const SECOND_STREAM: [Family; 6] = [
        Family::Pause,
        Family::ClockStep,
        Family::SlowDisk,
        Family::DiskError,
        Family::Demote,
        Family::SlowApply,
    ];

    /// Its name, as in a schedule.
    pub fn name(self) -> &'static str {
        match self {
            Family::Crash => "crash",
            Family::Isolate => "isolate",
            Family::OneWay => "one-way",
            Family::Split => "split",
            Family::Flap => "flap",
            Family::Network => "network",
            Family::CrashAll => "crash-all",
            Family::Pause => "pause",
            Family::ClockStep => "clock-step",
            Family::SlowDisk => "slow-disk",
            Family::DiskError => "disk-error",
            Family::Demote => "demote",
            Family::SlowApply => "slow-apply",
            Family::Membership => "membership",
        }
    }
}

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "fault")]
pub enum Fault {
    /// Node `node` crashes; it restarts when the fault ends.
    Crash {
        /// The node.
        node: u64,
    },
    /// Node `node` can neither send nor receive.
    Isolate {
        /// The node.
        node: u64,
    },
    /// Packets from `from` to `to` are dropped (the other direction works).
    OneWay {
        /// The sender cut off.
        from: u64,
        /// The receiver.
        to: u64,
    },
    /// The nodes in `minority` reach only each other.
    Split {
        /// The smaller side.
        minority: Vec<u64>,
    },
    /// The link between `a` and `b` goes down and up every `period_ms`.
    Flap {
        /// One end.
        a: u64,
        /// The other end.
        b: u64,
        /// Half a cycle.
        period_ms: u64,
    },
    /// Every packet is lost with probability `loss_per_mille` / 1000 (connections retransmit)
    /// and takes up to `latency_ms`.
    Network {
        /// Loss, per mille.
        loss_per_mille: u64,
        /// The highest latency.
        latency_ms: u64,
    },
    /// Every node crashes at once; all restart when the fault ends.
    CrashAll,
    /// Node `node`'s process stops running (nothing is lost); it resumes when the fault ends,
    /// its clocks having jumped by the pause.
    Pause {
        /// The node.
        node: u64,
    },
    /// Node `node`'s wall clock steps by `step_ms`, and steps back when the fault ends (NTP
    /// correcting it); its timers are untouched.
    ClockStep {
        /// The node.
        node: u64,
        /// The step (+ forward).
        step_ms: i64,
    },
    /// Every fsync of node `node`'s Raft log takes `sync_ms` more.
    SlowDisk {
        /// The node.
        node: u64,
        /// The added latency.
        sync_ms: u64,
    },
    /// Every batch of entries node `node` applies takes `apply_ms` more. Drawn with
    /// [`THE_LEADER`] half the time, aimed at the node that leads when it begins.
    SlowApply {
        /// The node, or [`THE_LEADER`].
        node: u64,
        /// The added latency.
        apply_ms: u64,
    },
    /// Node `node`'s disk fails as `kind` says; when the fault ends the disk works again and
    /// the node's process is restarted (a process that met a failing disk must have stopped).
    DiskError {
        /// The node.
        node: u64,
        /// How the disk fails.
        kind: DiskErrorKind,
    },
    /// Node `node` can no longer send to the other nodes (it still hears them, and clients
    /// still reach it): drawn with [`THE_LEADER`], the driver aims it at the node that leads
    /// when it begins.
    Demote {
        /// The node, or [`THE_LEADER`].
        node: u64,
    },
    /// Node `node` is removed from the voters by a membership change, and made a voter again
    /// (added back first if it left) when the fault ends. Drawn with [`THE_LEADER`] half the
    /// time. A removed leader that stays a learner keeps leading (openraft lets a non-voter
    /// lead, committing by the voters' quorum); one that leaves the cluster steps down once the
    /// change commits, while clients still reach it.
    RemoveVoter {
        /// The node, or [`THE_LEADER`].
        node: u64,
        /// Whether it leaves the cluster, rather than stay a learner.
        leave_cluster: bool,
    },
}

/// [`Fault::Demote`]'s (and half of [`Fault::SlowApply`]'s and [`Fault::RemoveVoter`]'s) node
/// when drawn: whichever node leads
/// when the fault begins.
pub const THE_LEADER: u64 = 0;

/// How a disk fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskErrorKind {
    /// Writes answer EIO.
    WriteEio,
    /// Syncs answer EIO, and the writes they were to make durable never will be.
    SyncEio,
    /// No space left.
    Full,
}

impl fmt::Display for DiskErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DiskErrorKind::WriteEio => "EIO on write",
            DiskErrorKind::SyncEio => "EIO on fsync",
            DiskErrorKind::Full => "full",
        })
    }
}

impl Fault {
    /// Its family.
    pub fn family(&self) -> Family {
        match self {
            Fault::Crash { .. } => Family::Crash,
            Fault::Isolate { .. } => Family::Isolate,
            Fault::OneWay { .. } => Family::OneWay,
            Fault::Split { .. } => Family::Split,
            Fault::Flap { .. } => Family::Flap,
            Fault::Network { .. } => Family::Network,
            Fault::CrashAll => Family::CrashAll,
            Fault::Pause { .. } => Family::Pause,
            Fault::ClockStep { .. } => Family::ClockStep,
            Fault::SlowDisk { .. } => Family::SlowDisk,
            Fault::DiskError { .. } => Family::DiskError,
            Fault::Demote { .. } => Family::Demote,
            Fault::SlowApply { .. } => Family::SlowApply,
            Fault::RemoveVoter { .. } => Family::Membership,
        }
    }

    /// The nodes it touches.
    pub fn nodes(&self, cluster: u64) -> Vec<u64> {
        match self {
            Fault::Crash { node }
            | Fault::Isolate { node }
            | Fault::Pause { node }
            | Fault::ClockStep { node, .. }
            | Fault::SlowDisk { node, .. }
            | Fault::DiskError { node, .. } => vec![*node],
            Fault::SlowApply { node, .. } if *node == THE_LEADER => Vec::new(),
            Fault::SlowApply { node, .. } => vec![*node],
            Fault::Demote { node } if *node == THE_LEADER => Vec::new(),
            Fault::Demote { node } => vec![*node],
            Fault::RemoveVoter { node, .. } if *node == THE_LEADER => Vec::new(),
            Fault::RemoveVoter { node, .. } => vec![*node],
            Fault::OneWay { from, to } => vec![*from, *to],
            Fault::Split { minority } => minority.clone(),
            Fault::Flap { a, b, .. } => vec![*a, *b],
            Fault::Network { .. } => Vec::new(),
            Fault::CrashAll => (1..=cluster).collect(),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash { node } => write!(f, "crash n{node}"),
            Fault::Isolate { node } => write!(f, "isolate n{node}"),
            Fault::OneWay { from, to } => write!(f, "cut n{from}->n{to}"),
            Fault::Split { minority } => {
                let side: Vec<String> = minority.iter().map(|n| format!("n{n}")).collect();
                write!(f, "split {{{}}} | rest", side.join(","))
            }
            Fault::Flap { a, b, period_ms } => write!(f, "flap n{a}<->n{b} every {period_ms}ms"),
            Fault::Network {
                loss_per_mille,
                latency_ms,
            } => write!(f, "network loss {loss_per_mille}‰ latency ≤{latency_ms}ms"),
            Fault::CrashAll => write!(f, "crash all"),
            Fault::Pause { node } => write!(f, "pause n{node}"),
            Fault::ClockStep { node, step_ms } => write!(f, "clock n{node} stepped {step_ms:+}ms"),
            Fault::SlowDisk { node, sync_ms } => write!(f, "slow disk n{node} fsync +{sync_ms}ms"),
            Fault::SlowApply { node, apply_ms } if *node == THE_LEADER => {
                write!(f, "slow apply on the leader +{apply_ms}ms")
            }
            Fault::SlowApply { node, apply_ms } => write!(f, "slow apply n{node} +{apply_ms}ms"),
            Fault::DiskError { node, kind } => write!(f, "disk n{node} {kind}"),
            Fault::Demote { node } if *node == THE_LEADER => write!(f, "demote the leader"),
            Fault::Demote { node } => write!(f, "demote n{node} (cut its sends to peers)"),
            Fault::RemoveVoter {
                node,
                leave_cluster,
            } => {
                let who = if *node == THE_LEADER {
                    "the leader".to_owned()
                } else {
                    format!("n{node}")
                };
                if *leave_cluster {
                    write!(f, "{who} removed from the cluster")
                } else {
                    write!(f, "{who} removed from the voters (kept as a learner)")
                }
            }
        }
    }
}

/// A fault with its time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    /// When it starts, in simulated ms since the run began.
    pub at_ms: u64,
    /// How long it lasts.
    pub duration_ms: u64,
    /// What it is.
    pub fault: Fault,
}

/// The whole fault schedule of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The bounds it was drawn within.
    pub config: FaultConfig,
    /// The families this seed enabled.
    pub families: Vec<Family>,
    /// Each node's clock.
    pub clocks: Vec<Skew>,
    /// The faults of the safety phase, by start time.
    pub faults: Vec<Planned>,
    /// The fault kept on through the liveness phase, if any.
    pub permanent: Option<Fault>,
}

/// A node's clock over the run: `offset_ms` at the start, running `drift_ppm` fast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skew {
    /// The node.
    pub node: u64,
    /// Offset from the global clock at the start.
    pub offset_ms: i64,
    /// Drift, parts per million.
    pub drift_ppm: i64,
}

impl Skew {
    /// The offset after `elapsed_ms` of the run.
    pub fn offset_at(&self, elapsed_ms: u64) -> i64 {
        let drift = i128::from(elapsed_ms) * i128::from(self.drift_ppm) / 1_000_000;
        self.offset_ms + i64::try_from(drift).unwrap_or(0)
    }
}

impl From<Skew> for ClockSkew {
    fn from(skew: Skew) -> ClockSkew {
        ClockSkew {
            node: skew.node,
            offset_ms: skew.offset_ms,
            drift_ppm: skew.drift_ppm,
        }
    }
}

impl Schedule {
    /// Draws the schedule of `seed` within `config`.
    pub fn draw(seed: u64, config: &FaultConfig) -> Schedule {
        let mut rng = SeedRng::new(seed, 1);
        let nodes = config.nodes.max(1);
        // Swarm: each family is on with probability 1/2, and at least one is.
        let mut families: Vec<Family> = Family::ALL
            .into_iter()
            .filter(|_| rng.chance(500))
            .collect();
        if families.is_empty() {
            let pick = usize::try_from(rng.between(0, 6)).unwrap_or(0);
            families.push(Family::ALL[pick]);
        }

        let clocks = draw_clocks(&mut rng, config);

        let count = if config.max_faults == 0 {
            0
        } else {
            rng.between(1, config.max_faults)
        };
        let mut faults: Vec<Planned> = (0..count)
            .map(|_| draw_planned(&mut rng, &families, nodes, config))
            .collect();
        if config.machine_faults {
            let (machine_families, machine_faults) = draw_machine_faults(seed, config, nodes);
            families.extend(machine_families);
            faults.extend(machine_faults);
        }
        if config.membership_faults && nodes >= 3 {
            let (membership_families, membership_faults) =
                draw_membership_faults(seed, config, nodes);
            families.extend(membership_families);
            faults.extend(membership_faults);
        }
        faults.sort_by_key(|planned| planned.at_ms);

        let permanent = if config.permanent_fault && nodes >= 3 && rng.chance(400) {
            let a = rng.between(1, nodes);
            let b = 1 + (a + rng.between(0, nodes - 2)) % nodes;
            Some(match rng.between(0, 2) {
                0 => Fault::OneWay { from: a, to: b },
                1 => Fault::Isolate { node: a },
                _ => Fault::Crash { node: a },
            })
        } else {
            None
        };

        Schedule {
            seed,
            config: config.clone(),
            families,
            clocks,
            faults,
            permanent,
        }
    }

    /// The most two nodes' wall clocks may differ at any moment of the run: the drawn skew, plus
    /// on each side every clock step one node may have in force at once. Checkers that judge
    /// times against clocks widen their windows by it.
    pub fn clock_spread_ms(&self) -> u64 {
        let mut stepped: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
        for planned in &self.faults {
            if let Fault::ClockStep { node, step_ms } = planned.fault {
                *stepped.entry(node).or_default() += step_ms.unsigned_abs();
            }
        }
        let worst = stepped.values().copied().max().unwrap_or(0);
        self.config.max_skew_ms + 2 * worst
    }

    /// The schedule as people read it, one line per fault.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let families: Vec<&str> = self.families.iter().map(|f| f.name()).collect();
        out.push_str(&format!(
            "seed {}: {} nodes, faults {}s then healed {}s; families [{}]\n",
            self.seed,
            self.config.nodes,
            self.config.safety_ms / 1000,
            self.config.liveness_ms / 1000,
            families.join(", ")
        ));
        for clock in &self.clocks {
            out.push_str(&format!(
                "  clock n{}: offset {:+} ms, drift {:+} ppm\n",
                clock.node, clock.offset_ms, clock.drift_ppm
            ));
        }
        for planned in &self.faults {
            out.push_str(&format!(
                "  {:>7.1}s .. {:>7.1}s  {}\n",
                ms_as_secs(planned.at_ms),
                ms_as_secs(planned.at_ms + planned.duration_ms),
                planned.fault
            ));
        }
        match &self.permanent {
            Some(fault) => out.push_str(&format!(
                "  {:>7.1}s .. end       {} (kept through the liveness phase)\n",
                ms_as_secs(self.config.safety_ms),
                fault
            )),
            None => out.push_str("  liveness phase: every fault healed\n"),
        }
        out
    }
}

fn ms_as_secs(ms: u64) -> f64 {
    // Display only; simulated runs are far below 2^52 ms.
    let ms = u32::try_from(ms).map_or(f64::from(u32::MAX), f64::from);
    ms / 1000.0
}

fn draw_clocks(rng: &mut SeedRng, config: &FaultConfig) -> Vec<Skew> {
    // Every clock stays within max_skew/2 of the global clock over the whole run, so any two
    // differ by at most max_skew.
    let half = config.max_skew_ms / 2;
    let run_ms = (config.safety_ms + config.liveness_ms).max(1);
    (1..=config.nodes)
        .map(|node| {
            let offset_ms = rng.signed(half * 6 / 10);
            let room_ms = half.saturating_sub(offset_ms.unsigned_abs());
            let drift_ms = rng.signed(room_ms);
            let drift_ppm = drift_ms * 1_000_000 / i64::try_from(run_ms).unwrap_or(i64::MAX);
            Skew {
                node,
                offset_ms,
                drift_ppm,
            }
        })
        .collect()
}

/// The machine faults of `seed`, from their own stream so that the network and crash faults a
/// seed draws do not depend on them: each machine family is on with probability 1/2, and a seed
/// with any on draws 1..=[`MACHINE_FAULTS_MAX`] faults from them.
fn draw_machine_faults(seed: u64, config: &FaultConfig, nodes: u64) -> (Vec<Family>, Vec<Planned>) {
    let mut rng = SeedRng::new(seed, 2);
    let families: Vec<Family> = Family::SECOND_STREAM
        .into_iter()
        .map(|family| (family, rng.chance(500)))
        .filter(|(family, on)| {
            *on && (config.disk_faults || !matches!(family, Family::SlowDisk | Family::DiskError))
        })
        .map(|(family, _)| family)
        .collect();
    if families.is_empty() {
        return (families, Vec::new());
    }
    let count = rng.between(1, MACHINE_FAULTS_MAX);
    let faults = (0..count)
        .map(|_| draw_planned(&mut rng, &families, nodes, config))
        .collect();
    (families, faults)
}

/// The membership changes of `seed`, from a third stream so that no other fault a seed draws
/// depends on them: on with probability 1/2, then 1..=[`MEMBERSHIP_FAULTS_MAX`] removals.
fn draw_membership_faults(
    seed: u64,
    config: &FaultConfig,
    nodes: u64,
) -> (Vec<Family>, Vec<Planned>) {
    let mut rng = SeedRng::new(seed, 3);
    if !rng.chance(500) {
        return (Vec::new(), Vec::new());
    }
    let families = vec![Family::Membership];
    let count = rng.between(1, MEMBERSHIP_FAULTS_MAX);
    let faults = (0..count)
        .map(|_| draw_planned(&mut rng, &families, nodes, config))
        .collect();
    (families, faults)
}

/// One fault of a family among `families`, with its start and duration within the safety phase.
fn draw_planned(
    rng: &mut SeedRng,
    families: &[Family],
    nodes: u64,
    config: &FaultConfig,
) -> Planned {
    let pick = usize::try_from(rng.between(0, families.len() as u64 - 1)).unwrap_or(0);
    let family = families[pick];
    let latest_start = config.safety_ms.saturating_sub(500);
    let at_ms = rng.between(500, latest_start.max(500));
    let room_ms = config.safety_ms.saturating_sub(at_ms);
    let fault = draw_fault(rng, family, nodes, config);
    let longest = config.max_fault_ms.min(room_ms);
    let duration_ms = match fault {
        // Half the crashes are quick reboots, down for well under an election timeout: what a
        // node had not flushed (a vote, an append) is gone, but its peers may not have moved
        // on yet.
        Fault::Crash { .. } if rng.chance(500) => rng.between(longest.min(20), longest.min(200)),
        Fault::Pause { .. } => {
            let longest = PAUSE_MS_MAX.min(room_ms);
            rng.between(PAUSE_MS_MIN.min(longest), longest)
        }
        _ => rng.between(longest.min(300), longest),
    };
    Planned {
        at_ms,
        duration_ms,
        fault,
    }
}

fn draw_fault(rng: &mut SeedRng, family: Family, nodes: u64, config: &FaultConfig) -> Fault {
    let node = rng.between(1, nodes);
    let other = if nodes > 1 {
        1 + (node + rng.between(0, nodes - 2)) % nodes
    } else {
        node
    };
    match family {
        Family::Crash => Fault::Crash { node },
        Family::Isolate => Fault::Isolate { node },
        Family::OneWay => Fault::OneWay {
            from: node,
            to: other,
        },
        Family::Split => {
            let minority_size = rng.between(1, ((nodes - 1) / 2).max(1));
            let mut minority = Vec::new();
            let mut next = node;
            while (minority.len() as u64) < minority_size {
                minority.push(next);
                next = next % nodes + 1;
            }
            minority.sort_unstable();
            Fault::Split { minority }
        }
        Family::Flap => Fault::Flap {
            a: node,
            b: other,
            period_ms: rng.between(100, 1_000),
        },
        Family::Network => Fault::Network {
            loss_per_mille: rng.between(0, config.max_loss_per_mille),
            latency_ms: rng.between(10, config.max_latency_ms.max(10)),
        },
        Family::CrashAll => Fault::CrashAll,
        Family::Pause => Fault::Pause { node },
        Family::Demote => Fault::Demote { node: THE_LEADER },
        // Half the leader, whose step-down clients see; half any node.
        Family::Membership => Fault::RemoveVoter {
            node: if rng.chance(500) { THE_LEADER } else { node },
            leave_cluster: rng.chance(500),
        },
        Family::ClockStep => {
            let magnitude = rng.between(CLOCK_STEP_MS_MIN, CLOCK_STEP_MS_MAX);
            let magnitude = i64::try_from(magnitude).unwrap_or(0);
            let step_ms = if rng.chance(500) {
                magnitude
            } else {
                -magnitude
            };
            Fault::ClockStep { node, step_ms }
        }
        Family::SlowDisk => Fault::SlowDisk {
            node,
            sync_ms: rng.between(SLOW_SYNC_MS_MIN, SLOW_SYNC_MS_MAX),
        },
        // Half aimed at the leader, whose reads a lagging apply can fool; half at any node.
        Family::SlowApply => Fault::SlowApply {
            node: if rng.chance(500) { THE_LEADER } else { node },
            apply_ms: rng.between(SLOW_APPLY_MS_MIN, SLOW_APPLY_MS_MAX),
        },
        Family::DiskError => Fault::DiskError {
            node,
            kind: match rng.between(0, 2) {
                0 => DiskErrorKind::WriteEio,
                1 => DiskErrorKind::SyncEio,
                _ => DiskErrorKind::Full,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Family, Fault, FaultConfig, Schedule};
    use crate::limits::{
        CLOCK_STEP_MS_MAX, CLOCK_STEP_MS_MIN, MACHINE_FAULTS_MAX, MEMBERSHIP_FAULTS_MAX,
        PAUSE_MS_MAX, SLOW_APPLY_MS_MAX, SLOW_APPLY_MS_MIN, SLOW_SYNC_MS_MAX, SLOW_SYNC_MS_MIN,
    };

    #[test]
    fn the_same_seed_draws_the_same_schedule() {
        let config = FaultConfig::for_nodes(3);
        assert_eq!(Schedule::draw(7, &config), Schedule::draw(7, &config));
        let differ =
            (0..20).any(|seed| Schedule::draw(seed, &config) != Schedule::draw(7, &config));
        assert!(differ, "different seeds draw different schedules");
    }

    #[test]
    fn machine_faults_leave_the_network_and_crash_faults_of_a_seed_as_they_were() {
        let with = FaultConfig::for_nodes(3);
        let without = FaultConfig {
            machine_faults: false,
            ..with.clone()
        };
        let mut drawn_any = false;
        for seed in 0..50 {
            let a = Schedule::draw(seed, &with);
            let b = Schedule::draw(seed, &without);
            let older: Vec<_> = a
                .faults
                .iter()
                .filter(|planned| !Family::SECOND_STREAM.contains(&planned.fault.family()))
                .cloned()
                .collect();
            assert_eq!(
                older, b.faults,
                "seed {seed}: the older families' faults changed"
            );
            assert_eq!(a.permanent, b.permanent);
            drawn_any |= a.faults.len() > b.faults.len();
        }
        assert!(drawn_any, "some seed draws a machine fault");
    }

    #[test]
    fn membership_faults_leave_every_other_fault_of_a_seed_as_it_was() {
        let with = FaultConfig::for_nodes(3);
        let without = FaultConfig {
            membership_faults: false,
            ..with.clone()
        };
        let mut drawn = 0;
        for seed in 0..100 {
            let a = Schedule::draw(seed, &with);
            let b = Schedule::draw(seed, &without);
            let others: Vec<_> = a
                .faults
                .iter()
                .filter(|planned| planned.fault.family() != Family::Membership)
                .cloned()
                .collect();
            assert_eq!(others, b.faults, "seed {seed}: the other faults changed");
            assert_eq!(a.permanent, b.permanent);
            assert_eq!(a.clocks, b.clocks);
            drawn += usize::from(a.faults.len() > b.faults.len());
        }
        // On with probability 1/2.
        assert!(
            (30..=70).contains(&drawn),
            "{drawn} of 100 seeds remove a voter"
        );
    }

    #[test]
    fn the_clock_spread_covers_steps_in_opposite_directions() {
        let mut schedule = Schedule::draw(1, &FaultConfig::for_nodes(3));
        schedule.faults = vec![
            super::Planned {
                at_ms: 1_000,
                duration_ms: 1_000,
                fault: Fault::ClockStep {
                    node: 1,
                    step_ms: 3_000,
                },
            },
            super::Planned {
                at_ms: 1_500,
                duration_ms: 1_000,
                fault: Fault::ClockStep {
                    node: 1,
                    step_ms: -2_000,
                },
            },
        ];
        assert_eq!(schedule.clock_spread_ms(), 200 + 2 * 5_000);
    }

    proptest! {
        #[test]
        fn schedules_stay_within_their_bounds(seed in any::<u64>(), nodes in 1u64..=5) {
            let config = FaultConfig::for_nodes(nodes);
            let schedule = Schedule::draw(seed, &config);
            prop_assert!(!schedule.families.is_empty());
            prop_assert!(
                schedule.faults.len() as u64
                    <= config.max_faults + MACHINE_FAULTS_MAX + MEMBERSHIP_FAULTS_MAX
            );
            let removals = schedule
                .faults
                .iter()
                .filter(|planned| matches!(planned.fault, Fault::RemoveVoter { .. }))
                .count() as u64;
            prop_assert!(removals <= MEMBERSHIP_FAULTS_MAX);
            prop_assert!(nodes >= 3 || removals == 0, "a voter removed from {nodes} nodes");
            let run_ms = config.safety_ms + config.liveness_ms;
            for clock in &schedule.clocks {
                for at in [0, run_ms / 2, run_ms] {
                    prop_assert!(clock.offset_at(at).unsigned_abs() <= config.max_skew_ms / 2,
                        "clock {clock:?} at {at} ms is beyond half the skew bound");
                }
            }
            for planned in &schedule.faults {
                prop_assert!(planned.at_ms + planned.duration_ms <= config.safety_ms);
                let longest = if matches!(planned.fault, Fault::Pause { .. }) {
                    PAUSE_MS_MAX
                } else {
                    config.max_fault_ms
                };
                prop_assert!(planned.duration_ms <= longest);
                prop_assert!(schedule.families.contains(&planned.fault.family()));
                for node in planned.fault.nodes(nodes) {
                    prop_assert!((1..=nodes).contains(&node));
                }
                match &planned.fault {
                    Fault::OneWay { from, to } if nodes > 1 => prop_assert_ne!(from, to),
                    Fault::ClockStep { step_ms, .. } => prop_assert!(
                        (CLOCK_STEP_MS_MIN..=CLOCK_STEP_MS_MAX).contains(&step_ms.unsigned_abs())
                    ),
                    Fault::SlowDisk { sync_ms, .. } => {
                        prop_assert!((SLOW_SYNC_MS_MIN..=SLOW_SYNC_MS_MAX).contains(sync_ms));
                    }
                    Fault::SlowApply { apply_ms, .. } => {
                        prop_assert!((SLOW_APPLY_MS_MIN..=SLOW_APPLY_MS_MAX).contains(apply_ms));
                    }
                    Fault::Split { minority } if nodes >= 3 => prop_assert!(minority.len() as u64 * 2 < nodes),
                    _ => {}
                }
            }
            if let Some(fault) = &schedule.permanent {
                // What is left on must leave a working majority.
                prop_assert!(fault.nodes(nodes).len() <= 2);
                let keeps_majority = matches!(
                    fault,
                    Fault::Crash { .. } | Fault::Isolate { .. } | Fault::OneWay { .. }
                );
                prop_assert!(keeps_majority, "permanent fault {}", fault);
            }
        }
    }
}
