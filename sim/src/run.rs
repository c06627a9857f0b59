//! One simulated run from a seed, sweeps over many, and the `certus-sim` command line.
//!
//! A run: draw the fault schedule from the seed; start the cluster with each node's clock; start
//! the workload; the **safety phase** applies the faults; then every fault is healed (or one is
//! left on for good) and the **liveness phase** must see a grant within a bound; then the
//! workload stops, the nodes settle, and every checker judges what was recorded.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use certus_core::ct::LogConfig;
use certus_node::NodeConfig;
use clap::Parser;
use serde::{Deserialize, Serialize};
use tracing::info;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::checkers::{self, FinalGrant, Verdict};
use crate::cluster::{ClusterSpec, SimCluster, Storage, elapsed_ms};
use crate::faults::FaultDriver;
use crate::history::{Call, History, Operation, Outcome};
use crate::lease_model::{self, LeaseModel};
use crate::linearizability::Verdict as Linearity;

use crate::ct_run::{self, CtReport};
use crate::ct_workload::CtWorkload;
use crate::observe::{RunRecord, UnsyncedWrites};
use crate::pipeline_run::{self, PipelineReport};
use crate::pipeline_workload::PipelineWorkload;
use crate::schedule::{FaultConfig, Schedule};
use crate::session_run::{self, SessionReport, SessionSetup};
use crate::session_workload::SessionWorkload;
use crate::workload::{self, LeaseWorkload};

/// How long after the faults heal a grant must succeed.
pub const LIVENESS_BOUND_MS: u64 = 15_000;

/// The most states the linearizability search may visit per lease before it gives up.
const LINEARIZABILITY_BUDGET: usize = 200_000;

/// A named way to run the simulation.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Its name, as `--scenario` takes it.
    pub name: &'static str,
    /// What it exercises.
    pub about: &'static str,
    /// The fault bounds.
    pub faults: FaultConfig,
    /// What the nodes store on.
    pub sled: bool,
    /// Whether a seed replays exactly (sled's own OS threads make the `sled` scenario's timing
    /// depend on the host, so `--check-determinism` skips it).
    pub deterministic: bool,
    /// Node settings.
    pub tune: fn(&mut NodeConfig),
    /// The client workload.
    pub workload: LeaseWorkload,
    /// The CT log and its workload, if the scenario runs one.
    pub ct: Option<CtWorkload>,
    /// The CA issuance sessions workload, if the scenario runs one (its `tune` must turn the
    /// daemons on: [`session_run::tune`]).
    pub sessions: Option<SessionWorkload>,
    /// The transaction pipelines workload, if the scenario runs one (its `tune` must keep the
    /// webhook processor off: [`pipeline_run::tune`]).
    pub pipelines: Option<PipelineWorkload>,
}

/// Every scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "leases",
            about: "3 nodes on simulated disks, lease contention, every fault family",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: |_| {},
            workload: LeaseWorkload::default(),
            ct: None,
            sessions: None,
            pipelines: None,
        },
        Scenario {
            name: "leases-5",
            about: "5 nodes, more clients: splits with two-node minorities",
            faults: FaultConfig::for_nodes(5),
            sled: false,
            deterministic: true,
            tune: |_| {},
            workload: LeaseWorkload {
                clients: 7,
                leases: 3,
                ..LeaseWorkload::default()
            },
            ct: None,
            sessions: None,
            pipelines: None,
        },
        Scenario {
            name: "snapshots",
            about: "3 nodes that snapshot and purge their logs every few hundred entries, so \
                    lagging and restarted nodes catch up by snapshot",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: |config| {
                config.raft.snapshot_after_entries = 150;
                config.raft.entries_kept_after_snapshot = 20;
            },
            workload: LeaseWorkload::default(),
            ct: None,
            sessions: None,
            pipelines: None,
        },
        Scenario {
            name: "sled",
            about: "3 nodes on sled (the production store, with OS threads: a crash cannot lose \
                    what sled buffered)",
            faults: FaultConfig::for_nodes(3),
            sled: true,
            deterministic: false,
            tune: |_| {},
            workload: LeaseWorkload::default(),
            ct: None,
            sessions: None,
            pipelines: None,
        },
        Scenario {
            name: "ct",
            about: "3 nodes running the CT log: submitters and auditors beside lease clients; \
                    the STH-selection checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: |_| {},
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: Some(CtWorkload::default()),
            sessions: None,
            pipelines: None,
        },
        Scenario {
            name: "ct-5",
            about: "5 nodes running the CT log (three must hold a tree before it serves), \
                    more submitters, no guard window",
            faults: FaultConfig::for_nodes(5),
            sled: false,
            deterministic: true,
            tune: |_| {},
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: Some(CtWorkload {
                submitters: 5,
                // No guard window: entries are numbered as soon as the machine clock passes
                // their SCT, so a node whose clock is behind signs trees holding SCTs from its
                // future, and its STH timestamps must still cover them.
                log_config: LogConfig {
                    min_serving_permille: 600,
                    guard_window_ms: 0,
                    ..LogConfig::default()
                },
                ..CtWorkload::default()
            }),
            sessions: None,
            pipelines: None,
        },
        Scenario {
            name: "sessions",
            about: "3 nodes working CA issuance sessions: clients serving HTTP-01 over the \
                    simulated network, an external worker that dies mid-step, an upstream CA \
                    polled on a compressed schedule; the queue-recovery checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: session_run::tune,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: None,
            sessions: Some(SessionWorkload::default()),
            pipelines: None,
        },
        Scenario {
            name: "pipelines",
            about: "3 nodes running transaction pipelines: producers enqueuing with external \
                    ids and long-polling, workers that crash mid-transaction or stall past \
                    the reaper; the pipeline checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: pipeline_run::tune,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: None,
            sessions: None,
            pipelines: Some(PipelineWorkload::default()),
        },
    ]
}

/// Everything one run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// The fault schedule.
    pub schedule: Schedule,
    /// Every checker's verdict (a panic or hang is a failed `run` verdict).
    pub verdicts: Vec<Verdict>,
    /// What the clients saw.
    pub history: History,
    /// What the timeline shows.
    pub record: RunRecord,
    /// The trace, one event per line, stamped with simulated time.
    pub trace: String,
    /// The windows of history no linearization explains, per lease.
    pub nonlinearizable: BTreeMap<String, Vec<Operation>>,
    /// The CT log's publications and client history, as JSON, when the scenario runs the log.
    pub ct_report: Option<String>,
    /// The sessions' client history and upstream orders, as JSON, when the scenario runs them.
    pub sessions_report: Option<String>,
    /// The pipelines' producer and worker history, as JSON, when the scenario runs them.
    pub pipelines_report: Option<String>,
    /// Simulated time the run covered.
    pub simulated: Duration,
    /// Wall time it took.
    pub wall: Duration,
}

impl RunOutcome {
    /// Whether every checker passed.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|verdict| verdict.passed)
    }

    /// A hash of the trace and the history: equal for equal runs.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.trace.hash(&mut hasher);
        serde_json::to_string(&self.history)
            .unwrap_or_default()
            .hash(&mut hasher);
        self.ct_report.hash(&mut hasher);
        self.sessions_report.hash(&mut hasher);
        self.pipelines_report.hash(&mut hasher);
        hasher.finish()
    }
}

/// What the simulated part of a run hands back.
struct Collected {
    history: History,
    ct_report: Option<CtReport>,
    sessions_report: Option<SessionReport>,
    pipelines_report: Option<PipelineReport>,
    record: RunRecord,
    verdicts: Vec<Verdict>,
    epoch_ms: u64,
}

/// A tracing writer into a shared buffer.
#[derive(Clone, Default)]
struct TraceBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for TraceBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("trace").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for TraceBuffer {
    type Writer = TraceBuffer;

    fn make_writer(&'a self) -> TraceBuffer {
        self.clone()
    }
}

/// Stamps trace lines with simulated time since the run began.
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match madsim::time::TimeHandle::try_current() {
            Some(time) => {
                let elapsed = time.elapsed();
                write!(w, "{:>5}.{:06}", elapsed.as_secs(), elapsed.subsec_micros())
            }
            None => write!(w, "    -.------"),
        }
    }
}

/// Runs `scenario` from `seed` on a fresh thread (so nothing of an earlier run is left in
/// thread-locals) and judges it.
pub fn run_seed(scenario: &Scenario, seed: u64) -> RunOutcome {
    let schedule = Schedule::draw(seed, &scenario.faults);
    let trace = TraceBuffer::default();
    let wall = Instant::now();
    let scenario_for_thread = scenario.clone();
    let schedule_for_thread = schedule.clone();
    let trace_for_thread = trace.clone();
    let joined = std::thread::Builder::new()
        .name(format!("sim-{seed}"))
        .spawn(move || {
            // The log goes in first, so that it sees the spans madsim opens as it starts; it
            // must not build a HashMap before the runtime has seeded std's hash keys for this
            // thread (or HashMap order would differ between runs), hence a `Targets` filter.
            let filter: Targets = std::env::var("CERTUS_SIM_LOG")
                .ok()
                .and_then(|directives| directives.parse().ok())
                .unwrap_or_else(|| {
                    Targets::new()
                        .with_default(tracing::Level::INFO)
                        .with_target("openraft", tracing::Level::WARN)
                        .with_target("h2", tracing::Level::WARN)
                        .with_target("tower", tracing::Level::WARN)
                });
            let subscriber = tracing_subscriber::registry().with(
                tracing_subscriber::fmt::layer()
                    .with_writer(trace_for_thread)
                    .with_ansi(false)
                    .with_timer(SimulatedTime)
                    .with_filter(filter),
            );
            let _log = tracing::subscriber::set_default(subscriber);
            let mut runtime =
                madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
            if scenario_for_thread.sled {
                runtime.set_allow_system_thread(true);
            }
            let config = &schedule_for_thread.config;
            runtime.set_time_limit(Duration::from_millis(
                config.safety_ms + config.liveness_ms + 120_000,
            ));
            runtime.block_on(simulate(scenario_for_thread, schedule_for_thread))
        })
        .expect("a simulation thread");
    let result = joined.join();
    let wall = wall.elapsed();
    let trace_text = without_task_ids(&String::from_utf8_lossy(&trace.0.lock().expect("trace")));
    let mut nonlinearizable = BTreeMap::new();
    let mut ct_report = None;
    let mut sessions_report = None;
    let mut pipelines_report = None;
    let (history, mut record, mut verdicts, simulated) = match result {
        Ok(collected) => {
            ct_report = collected
                .ct_report
                .as_ref()
                .map(|report| serde_json::to_string_pretty(report).unwrap_or_default());
            sessions_report = collected
                .sessions_report
                .as_ref()
                .map(|report| serde_json::to_string_pretty(report).unwrap_or_default());
            pipelines_report = collected
                .pipelines_report
                .as_ref()
                .map(|report| serde_json::to_string_pretty(report).unwrap_or_default());
            let mut verdicts = collected.verdicts;
            let model = LeaseModel {
                epoch_ms: collected.epoch_ms,
                skew_ms: schedule.config.max_skew_ms,
            };
            verdicts.push(linearizability_verdict(
                &collected.history,
                &model,
                &mut nonlinearizable,
            ));
            let simulated = Duration::from_millis(collected.record.end_ms);
            (collected.history, collected.record, verdicts, simulated)
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned());
            let verdict = Verdict {
                checker: "run".to_owned(),
                passed: false,
                detail: format!("the simulation panicked: {message}"),
            };
            (
                History::default(),
                RunRecord::default(),
                vec![verdict],
                Duration::ZERO,
            )
        }
    };
    record.seed = seed;
    record.scenario = scenario.name.to_owned();
    record.nodes = schedule.config.nodes;
    record.verdicts = verdicts
        .iter()
        .map(|verdict| {
            (
                verdict.checker.clone(),
                verdict.passed,
                verdict.detail.clone(),
            )
        })
        .collect();
    verdicts.sort_by_key(|verdict| verdict.passed);
    RunOutcome {
        seed,
        scenario: scenario.name.to_owned(),
        schedule,
        verdicts,
        history,
        record,
        trace: trace_text,
        nonlinearizable,
        ct_report,
        sessions_report,
        pipelines_report,
        simulated,
        wall,
    }
}

/// The trace without madsim's task ids, which count across every run in the process (so the
/// same seed would otherwise trace differently the second time).
fn without_task_ids(trace: &str) -> String {
    const MARK: &str = "task{id=";
    let mut out = String::with_capacity(trace.len());
    let mut rest = trace;
    while let Some(start) = rest.find(MARK) {
        out.push_str(&rest[..start]);
        let after = &rest[start + MARK.len()..];
        match after.find('}') {
            Some(end) => {
                rest = after[end + 1..]
                    .strip_prefix(':')
                    .unwrap_or(&after[end + 1..]);
            }
            None => {
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn linearizability_verdict(
    history: &History,
    model: &LeaseModel,
    windows: &mut BTreeMap<String, Vec<Operation>>,
) -> Verdict {
    let verdicts = lease_model::check_history(history, model, LINEARIZABILITY_BUDGET);
    let mut failed = Vec::new();
    let mut undecided = Vec::new();
    for verdict in &verdicts {
        match &verdict.verdict {
            Linearity::Linearizable => {}
            Linearity::NotLinearizable { .. } => {
                failed.push(verdict.lease.clone());
                windows.insert(verdict.lease.clone(), verdict.window.clone());
            }
            Linearity::Unknown => undecided.push(verdict.lease.clone()),
        }
    }
    let operations = history.operations.len();
    if !failed.is_empty() {
        Verdict {
            checker: "linearizability".to_owned(),
            passed: false,
            detail: format!(
                "no linearization of the lease history of {} explains what clients saw",
                failed.join(", ")
            ),
        }
    } else {
        Verdict {
            checker: "linearizability".to_owned(),
            passed: true,
            detail: if undecided.is_empty() {
                format!(
                    "{operations} operations on {} leases linearizable",
                    verdicts.len()
                )
            } else {
                format!(
                    "{operations} operations; search budget exhausted (not proven) on {}",
                    undecided.join(", ")
                )
            },
        }
    }
}

/// The simulated part of a run, on madsim's main machine.
async fn simulate(scenario: Scenario, schedule: Schedule) -> Collected {
    certus_node::raft::runtime::skew::reset();
    let started = Instant::now();
    let epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(0));
    let config = schedule.config.clone();
    let nodes = config.nodes;
    info!(
        scenario = scenario.name,
        seed = schedule.seed,
        "run begins\n{}",
        schedule.describe()
    );
    let data = if scenario.sled {
        let dir = std::env::temp_dir().join(format!(
            "certus-sim-{}-{}-{}",
            scenario.name,
            schedule.seed,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Some(dir)
    } else {
        None
    };
    let ct_setup = scenario.ct.as_ref().map(|_| ct_run::setup(schedule.seed));
    let session_setup = scenario
        .sessions
        .as_ref()
        .map(|_| SessionSetup::new(schedule.seed, started));
    let spec = ClusterSpec {
        nodes,
        clocks: schedule.clocks.clone(),
        storage: data.clone().map_or(Storage::Simulated, Storage::Sled),
        tune: scenario.tune,
        ct: ct_setup.as_ref().map(|(setup, _, _)| setup.clone()),
        sessions: session_setup.as_ref().map(SessionSetup::parts),
    };
    let cluster = Arc::new(SimCluster::start_with(&spec, started));
    let driver = FaultDriver::new(Arc::clone(&cluster), started);
    let running = workload::start_leases(&scenario.workload, nodes, schedule.seed, started);
    let duplicator = crate::duplicates::Duplicator::start(nodes, schedule.seed, started);
    let ct = scenario
        .ct
        .as_ref()
        .zip(ct_setup)
        .map(|(workload, (_, pki, verifier))| {
            ct_run::start(&cluster, workload, schedule.seed, pki, verifier, started)
        });
    let sessions = scenario
        .sessions
        .as_ref()
        .zip(session_setup)
        .map(|(workload, setup)| session_run::start(&cluster, workload, setup, schedule.seed));
    let pipelines = scenario.pipelines.as_ref().map(|workload| {
        pipeline_run::start(
            &cluster,
            workload,
            schedule.seed,
            config.max_skew_ms,
            started,
        )
    });

    // Safety phase.
    driver.run_safety_phase(&schedule).await;
    driver.heal(schedule.permanent.as_ref());
    let heal_ms = elapsed_ms(started);
    info!(at_ms = heal_ms, "liveness phase begins");
    if let Some(sessions) = &sessions {
        sessions.healed(heal_ms);
    }
    if let Some(pipelines) = &pipelines {
        pipelines.healed(heal_ms);
    }

    // Liveness: a grant within the bound.
    let granted = workload::acquire_until_granted(
        nodes,
        "liveness",
        started,
        heal_ms + LIVENESS_BOUND_MS,
        running.recorder(),
    )
    .await;
    let mut verdicts = vec![match granted {
        Some(at_ms) => Verdict {
            checker: "liveness".to_owned(),
            passed: true,
            detail: format!(
                "a grant {} ms after the faults healed (bound {LIVENESS_BOUND_MS} ms)",
                at_ms - heal_ms
            ),
        },
        None => Verdict {
            checker: "liveness".to_owned(),
            passed: false,
            detail: format!("no grant within {LIVENESS_BOUND_MS} ms after the faults healed"),
        },
    }];
    let end_of_phase = started + Duration::from_millis(config.safety_ms + config.liveness_ms);
    tokio::time::sleep_until(end_of_phase).await;
    let history = running.stop().await;
    let (copies_verdict, _copies) = duplicator.finish().await;
    verdicts.push(copies_verdict);
    let ct_report = match ct {
        Some(ct) => {
            let (ct_verdicts, report) = ct.finish(&cluster, heal_ms, started).await;
            verdicts.extend(ct_verdicts);
            Some(report)
        }
        None => None,
    };
    let sessions_report = match sessions {
        Some(sessions) => {
            let (session_verdicts, report) = sessions.finish(&cluster, heal_ms).await;
            verdicts.extend(session_verdicts);
            Some(report)
        }
        None => None,
    };
    let pipelines_report = match pipelines {
        Some(pipelines) => {
            let (pipeline_verdicts, report) = pipelines.finish(&cluster, heal_ms).await;
            verdicts.extend(pipeline_verdicts);
            Some(report)
        }
        None => None,
    };

    // Let every running node catch up, then read the final state.
    let (finals, cluster_now_ms) = settle(&cluster).await;
    let acknowledged = final_grants(&history);
    verdicts.push(checkers::durability(
        &acknowledged,
        &finals,
        cluster_now_ms,
        nodes,
    ));
    let samples = cluster.samples();
    verdicts.push(checkers::single_master(&samples));
    verdicts.push(checkers::exclusive_holding(&history, config.max_skew_ms));
    verdicts.push(checkers::no_stale_token(&history));
    // Sled nodes start without an apply observer (the production path).
    if !scenario.sled {
        verdicts.push(checkers::applied_once(&cluster.applied_requests()));
    }
    let end_ms = elapsed_ms(started);
    info!(at_ms = end_ms, "run ends");
    if let Some(dir) = data {
        let _ = std::fs::remove_dir_all(dir);
    }
    let record = RunRecord {
        seed: schedule.seed,
        scenario: scenario.name.to_owned(),
        nodes,
        heal_ms,
        end_ms,
        samples,
        faults: driver.spans(),
        clocks: schedule.clocks.iter().copied().map(Into::into).collect(),
        verdicts: Vec::new(),
        unsynced_writes: {
            let crashes = cluster.unsynced_writes();
            UnsyncedWrites {
                lost: crashes.writes_lost,
                whole: crashes.writes_whole,
                torn: crashes.writes_torn,
            }
        },
    };
    Collected {
        history,
        ct_report,
        sessions_report,
        pipelines_report,
        record,
        verdicts,
        epoch_ms,
    }
}

/// Waits (up to 10 s) until every running node has applied what the leader committed, then
/// reads each one's leases; also returns the latest wall clock of any node.
async fn settle(cluster: &SimCluster) -> (BTreeMap<u64, BTreeMap<String, (String, u64)>>, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut finals = BTreeMap::new();
    // The look at which the most nodes had caught up: with a node cut off for good the loop
    // runs to its deadline, and the last look alone may land just after a tick committed.
    let mut best: BTreeMap<u64, BTreeMap<String, (String, u64)>> = BTreeMap::new();
    let mut latest_clock_ms = 0;
    while Instant::now() < deadline {
        let replicas = cluster.replicas();
        let target = replicas
            .iter()
            .map(|(_, replica)| replica.commit_index())
            .max()
            .unwrap_or(0);
        finals.clear();
        latest_clock_ms = 0;
        for (id, replica) in &replicas {
            latest_clock_ms = latest_clock_ms.max(replica.clock.now_ms());
            let applied = replica
                .raft
                .metrics()
                .borrow()
                .last_applied
                .map_or(0, |id| id.index);
            if applied >= target {
                let leases = replica.reader.read(|applied| {
                    applied
                        .state
                        .leases(None, usize::MAX, 0)
                        .into_iter()
                        .map(|lease| {
                            (
                                lease.name.to_string(),
                                (lease.holder.to_string(), lease.token.0),
                            )
                        })
                        .collect::<BTreeMap<_, _>>()
                });
                finals.insert(*id, leases);
            }
        }
        if finals.len() > best.len() {
            best = finals.clone();
        }
        if finals.len() == replicas.len() && !replicas.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (best, latest_clock_ms)
}

/// Per lease, the newest acknowledged grant or renewal that no later release could have undone.
fn final_grants(history: &History) -> Vec<FinalGrant> {
    let mut newest: BTreeMap<&str, &Operation> = BTreeMap::new();
    for operation in &history.operations {
        if matches!(
            operation.outcome,
            Outcome::Acquired { .. } | Outcome::Renewed { .. }
        ) {
            let entry = newest.entry(operation.lease.as_str()).or_insert(operation);
            if operation.completed_ms >= entry.completed_ms {
                *entry = operation;
            }
        }
    }
    newest
        .into_values()
        .filter_map(|operation| {
            let (Outcome::Acquired { lease, .. } | Outcome::Renewed { lease }) = &operation.outcome
            else {
                return None;
            };
            let released_later = history.operations.iter().any(|other| {
                other.lease == operation.lease
                    && matches!(&other.call, Call::Release { holder } if *holder == lease.holder)
                    && other.invoked_ms >= operation.invoked_ms
            });
            (!released_later).then(|| FinalGrant {
                lease: operation.lease.clone(),
                holder: lease.holder.clone(),
                token: lease.token,
                expires_at_ms: lease.expires_at_ms,
            })
        })
        .collect()
}

/// Writes the report folder of a run: the trace, the client history, the schedule, the
/// verdicts, the timeline and any offending linearizability windows. Returns the folder.
pub fn write_report(outcome: &RunOutcome, root: &Path) -> std::io::Result<PathBuf> {
    let dir = root.join(format!("{}-{}", outcome.scenario, outcome.seed));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("trace.log"), &outcome.trace)?;
    std::fs::write(dir.join("schedule.txt"), outcome.schedule.describe())?;
    write_json(&dir.join("schedule.json"), &outcome.schedule)?;
    write_json(&dir.join("history.json"), &outcome.history)?;
    write_json(&dir.join("verdicts.json"), &outcome.verdicts)?;
    write_json(&dir.join("run.json"), &outcome.record)?;
    std::fs::write(
        dir.join("timeline.html"),
        crate::timeline::render_html(&outcome.record),
    )?;
    if let Some(report) = &outcome.ct_report {
        std::fs::write(dir.join("ct.json"), report)?;
    }
    if let Some(report) = &outcome.sessions_report {
        std::fs::write(dir.join("sessions.json"), report)?;
    }
    if let Some(report) = &outcome.pipelines_report {
        std::fs::write(dir.join("pipelines.json"), report)?;
    }
    for (lease, window) in &outcome.nonlinearizable {
        write_json(&dir.join(format!("nonlinearizable-{lease}.json")), window)?;
    }
    Ok(dir)
}

fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

/// `certus-sim`: replay one seed, or sweep many.
#[derive(Debug, Parser)]
#[command(
    name = "certus-sim",
    about = "Run the Certus simulation: replay a seed or sweep many"
)]
struct Args {
    /// Replay this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Sweep this many seeds (from --first), spread over the scenarios.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed of a sweep.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Run only this scenario (default: `leases` for one seed; all for a sweep). `all` spreads a
    /// sweep's seeds over the scenarios; `each` runs every seed in every scenario.
    #[arg(long)]
    scenario: Option<String>,
    /// Run each seed twice and require identical traces and histories.
    #[arg(long)]
    check_determinism: bool,
    /// How many seeds run at once (each in its own process). Default: the number of cores.
    #[arg(long)]
    jobs: Option<usize>,
    /// Where reports go.
    #[arg(long, default_value = "target/sim-reports")]
    reports: PathBuf,
    /// Write the report folder (with the timeline) even when the run passes.
    #[arg(long)]
    report: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Print the fault schedule of the seed(s) without running.
    #[arg(long)]
    schedule_only: bool,
    /// Internal: run one seed in this process and print its summary as JSON.
    #[arg(long, hide = true)]
    child: bool,
    /// Internal: where a child writes its trace.
    #[arg(long, hide = true)]
    trace_out: Option<PathBuf>,
}

/// What a child process reports of its run.
#[derive(Debug, Serialize, Deserialize)]
struct Summary {
    seed: u64,
    scenario: String,
    passed: bool,
    fingerprint: u64,
    simulated_ms: u64,
    wall_ms: u64,
    operations: u64,
    /// Whether the linearizability search ran out of budget on some lease (not proven).
    unproven: bool,
    /// Unsynced file writes the run's crashes tore.
    #[serde(default)]
    torn_writes: u64,
    /// For a failed run: what to print (seed, schedule, failed verdicts, trace tail, report).
    failure: Option<String>,
    /// For a passed single run: the verdicts as printed.
    verdicts: String,
}

/// The entry point of `certus-sim`.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let all = scenarios();
    if args.list {
        for scenario in &all {
            println!("{:<10} {}", scenario.name, scenario.about);
        }
        return ExitCode::SUCCESS;
    }
    // `each`: every scenario runs every seed of the sweep (N seeds each), where `all` spreads
    // the seeds over the scenarios (N in all).
    let each = args.scenario.as_deref() == Some("each");
    let chosen: Vec<Scenario> = match &args.scenario {
        Some(name) if name != "all" && name != "each" => {
            match all.iter().find(|s| s.name == name) {
                Some(scenario) => vec![scenario.clone()],
                None => {
                    let names: Vec<&str> = all.iter().map(|s| s.name).collect();
                    eprintln!("no scenario {name}; there are: {}", names.join(", "));
                    return ExitCode::from(2);
                }
            }
        }
        Some(_) => all.clone(),
        None if args.seeds.is_some() => all.clone(),
        None => vec![all[0].clone()],
    };
    let plan: Vec<(Scenario, u64)> = match (args.seed, args.seeds) {
        (Some(seed), _) => chosen.iter().map(|s| (s.clone(), seed)).collect(),
        (None, Some(count)) if each => (0..count)
            .flat_map(|i| chosen.iter().map(move |s| (s.clone(), args.first + i)))
            .collect(),
        (None, Some(count)) => (0..count)
            .map(|i| {
                let index = usize::try_from(i).unwrap_or(0) % chosen.len();
                (chosen[index].clone(), args.first + i)
            })
            .collect(),
        (None, None) => {
            eprintln!("give --seed S to replay one seed or --seeds N to sweep");
            return ExitCode::from(2);
        }
    };
    if args.schedule_only {
        for (scenario, seed) in &plan {
            println!(
                "[{}] {}",
                scenario.name,
                Schedule::draw(*seed, &scenario.faults).describe()
            );
        }
        return ExitCode::SUCCESS;
    }
    if args.child {
        return child(&plan[0].0, plan[0].1, &args);
    }
    sweep(&plan, &args)
}

/// Runs one seed in this process (fresh, so no global state of another run can leak into it:
/// tokio's and futures' `select!` seed their thread RNGs from process-wide counters) and prints
/// its summary.
fn child(scenario: &Scenario, seed: u64, args: &Args) -> ExitCode {
    let outcome = run_seed(scenario, seed);
    if let Some(path) = &args.trace_out {
        let _ = std::fs::write(path, &outcome.trace);
    }
    let mut report_dir = None;
    if args.report || !outcome.passed() {
        report_dir = write_report(&outcome, &args.reports).ok();
    }
    let summary = Summary {
        seed,
        scenario: scenario.name.to_owned(),
        passed: outcome.passed(),
        fingerprint: outcome.fingerprint(),
        simulated_ms: u64::try_from(outcome.simulated.as_millis()).unwrap_or(0),
        wall_ms: u64::try_from(outcome.wall.as_millis()).unwrap_or(0),
        operations: outcome.history.operations.len() as u64,
        unproven: outcome.verdicts.iter().any(|verdict| {
            verdict.checker == "linearizability" && verdict.detail.contains("not proven")
        }),
        torn_writes: outcome.record.unsynced_writes.torn,
        failure: (!outcome.passed()).then(|| failure_text(&outcome, report_dir.as_deref())),
        verdicts: verdicts_text(&outcome, report_dir.as_deref()),
    };
    match serde_json::to_string(&summary) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("could not encode the summary: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one seed in a child process.
fn spawn_child(
    scenario: &str,
    seed: u64,
    args: &Args,
    trace_out: Option<&Path>,
) -> Result<Summary, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating certus-sim: {e}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--child")
        .args(["--seed", &seed.to_string(), "--scenario", scenario])
        .arg("--reports")
        .arg(&args.reports);
    if args.report {
        command.arg("--report");
    }
    if let Some(path) = trace_out {
        command.arg("--trace-out").arg(path);
    }
    let output = command
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("starting a run: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).map_err(|e| {
        format!(
            "scenario {scenario} seed {seed}: the run died ({}) without a summary: {e}",
            output.status
        )
    })
}

/// One seed's result in a sweep.
struct Done {
    scenario: &'static str,
    seed: u64,
    summary: Result<Summary, String>,
    /// For a determinism check: the second run's fingerprint and where both traces are.
    again: Option<(Result<Summary, String>, PathBuf, PathBuf)>,
}

fn run_one(scenario: &'static str, seed: u64, deterministic: bool, args: &Args) -> Done {
    if !args.check_determinism || !deterministic {
        return Done {
            scenario,
            seed,
            summary: spawn_child(scenario, seed, args, None),
            again: None,
        };
    }
    let dir = args.reports.join(format!("{scenario}-{seed}-determinism"));
    let _ = std::fs::create_dir_all(&dir);
    let (first, second) = (dir.join("trace-1.log"), dir.join("trace-2.log"));
    let summary = spawn_child(scenario, seed, args, Some(&first));
    let again = spawn_child(scenario, seed, args, Some(&second));
    Done {
        scenario,
        seed,
        summary,
        again: Some((again, first, second)),
    }
}

fn sweep(plan: &[(Scenario, u64)], args: &Args) -> ExitCode {
    let single = plan.len() == 1 && !args.check_determinism;
    if single {
        // One seed: run it right here, so a debugger or a log sees it.
        let (scenario, seed) = &plan[0];
        let outcome = run_seed(scenario, *seed);
        let report = write_report(&outcome, &args.reports).ok();
        if outcome.passed() {
            print!("{}", verdicts_text(&outcome, report.as_deref()));
            return ExitCode::SUCCESS;
        }
        eprint!("{}", failure_text(&outcome, report.as_deref()));
        return ExitCode::FAILURE;
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let progress = indicatif::ProgressBar::new(plan.len() as u64);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} seeds ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if std::env::var_os("CI").is_some() {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = Instant::now();
    let queue: Mutex<std::collections::VecDeque<(&'static str, u64, bool)>> = Mutex::new(
        plan.iter()
            .map(|(scenario, seed)| (scenario.name, *seed, scenario.deterministic))
            .collect(),
    );
    let (sender, receiver) = std::sync::mpsc::channel::<Done>();
    let mut totals: BTreeMap<&str, Totals> = BTreeMap::new();
    let mut failures = 0u64;
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(plan.len()) {
            let sender = sender.clone();
            let queue = &queue;
            scope.spawn(move || {
                loop {
                    let next = queue.lock().expect("queue").pop_front();
                    let Some((scenario, seed, deterministic)) = next else {
                        break;
                    };
                    if sender
                        .send(run_one(scenario, seed, deterministic, args))
                        .is_err()
                    {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for done in receiver {
            let total = totals.entry(done.scenario).or_default();
            total.runs += 1;
            progress.set_message(format!("{} seed {}", done.scenario, done.seed));
            match &done.summary {
                Ok(summary) => {
                    total.simulated += Duration::from_millis(summary.simulated_ms);
                    total.wall += Duration::from_millis(summary.wall_ms);
                    total.operations += summary.operations;
                    total.unproven += u64::from(summary.unproven);
                    total.torn_writes += summary.torn_writes;
                    if let Some(failure) = &summary.failure {
                        total.failed.push(done.seed);
                        failures += 1;
                        progress.suspend(|| eprint!("{failure}"));
                    }
                }
                Err(error) => {
                    total.failed.push(done.seed);
                    failures += 1;
                    progress.suspend(|| eprintln!("\n=== FAILED: {error}"));
                }
            }
            if let (Some((again, first, second)), Ok(summary)) = (&done.again, &done.summary) {
                let same = again
                    .as_ref()
                    .is_ok_and(|again| again.fingerprint == summary.fingerprint);
                if same {
                    let _ = std::fs::remove_dir_all(first.parent().unwrap_or(first));
                } else {
                    total.nondeterministic.push(done.seed);
                    failures += 1;
                    progress.suspend(|| report_nondeterminism(&done, first, second));
                }
            }
            progress.inc(1);
        }
    });
    progress.finish_and_clear();
    print_summary(&totals, started.elapsed(), args.check_determinism, jobs);
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Per-scenario totals of a sweep.
#[derive(Default)]
struct Totals {
    runs: u64,
    failed: Vec<u64>,
    simulated: Duration,
    wall: Duration,
    operations: u64,
    unproven: u64,
    torn_writes: u64,
    nondeterministic: Vec<u64>,
}

fn verdicts_text(outcome: &RunOutcome, report: Option<&Path>) -> String {
    let mut text = format!(
        "[{}] seed {}: {} ({:.1} simulated s in {:.1} s)\n{}",
        outcome.scenario,
        outcome.seed,
        if outcome.passed() { "PASS" } else { "FAIL" },
        outcome.simulated.as_secs_f64(),
        outcome.wall.as_secs_f64(),
        outcome.schedule.describe()
    );
    for verdict in &outcome.verdicts {
        text.push_str(&format!(
            "  {} {:<18} {}\n",
            if verdict.passed { "ok  " } else { "FAIL" },
            verdict.checker,
            verdict.detail
        ));
    }
    text.push_str(&format!(
        "fingerprint {:016x}; replay: cargo xtask sim --seed {} --scenario {}\n",
        outcome.fingerprint(),
        outcome.seed,
        outcome.scenario
    ));
    if let Some(dir) = report {
        text.push_str(&format!(
            "report: {} (timeline: {})\n",
            dir.display(),
            dir.join("timeline.html").display()
        ));
    }
    text
}

fn failure_text(outcome: &RunOutcome, report: Option<&Path>) -> String {
    let mut text = format!(
        "\n=== FAILED: scenario {} seed {} ===\n{}",
        outcome.scenario,
        outcome.seed,
        outcome.schedule.describe()
    );
    for verdict in outcome.verdicts.iter().filter(|verdict| !verdict.passed) {
        text.push_str(&format!("  FAIL {}: {}\n", verdict.checker, verdict.detail));
    }
    text.push_str("--- trace tail ---\n");
    let lines: Vec<&str> = outcome.trace.lines().collect();
    for line in &lines[lines.len().saturating_sub(40)..] {
        text.push_str(line);
        text.push('\n');
    }
    if let Some(dir) = report {
        text.push_str(&format!("report: {}\n", dir.display()));
    }
    text.push_str(&format!(
        "replay: cargo xtask sim --seed {} --scenario {}\n\n",
        outcome.seed, outcome.scenario
    ));
    text
}

fn report_nondeterminism(done: &Done, first: &Path, second: &Path) {
    let first_trace = std::fs::read_to_string(first).unwrap_or_default();
    let second_trace = std::fs::read_to_string(second).unwrap_or_default();
    let first_lines: Vec<&str> = first_trace.lines().collect();
    let second_lines: Vec<&str> = second_trace.lines().collect();
    let diverged = first_lines
        .iter()
        .zip(&second_lines)
        .position(|(a, b)| a != b)
        .unwrap_or(first_lines.len().min(second_lines.len()));
    eprintln!(
        "\n=== NONDETERMINISTIC: scenario {} seed {}: traces diverge at line {} ===",
        done.scenario,
        done.seed,
        diverged + 1
    );
    eprintln!("first:  {}", first_lines.get(diverged).unwrap_or(&"<end>"));
    eprintln!("second: {}", second_lines.get(diverged).unwrap_or(&"<end>"));
    eprintln!("traces: {} and {}", first.display(), second.display());
}

fn print_summary(totals: &BTreeMap<&str, Totals>, wall: Duration, determinism: bool, jobs: usize) {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec![
        "scenario",
        "seeds",
        "passed",
        "failed seeds",
        "operations",
        "linearizability not proven",
        "torn writes at crashes",
        "simulated s",
        "run s",
        "simulated s per run s",
    ];
    if determinism {
        header.push("nondeterministic");
    }
    table.set_header(header);
    let mut all_runs = 0;
    for (name, total) in totals {
        all_runs += total.runs;
        let failed: Vec<String> = total.failed.iter().map(u64::to_string).collect();
        let ratio = if total.wall.is_zero() {
            0.0
        } else {
            total.simulated.as_secs_f64() / total.wall.as_secs_f64()
        };
        let mut row = vec![
            (*name).to_owned(),
            total.runs.to_string(),
            (total.runs - total.failed.len() as u64).to_string(),
            if failed.is_empty() {
                "-".to_owned()
            } else {
                failed.join(" ")
            },
            total.operations.to_string(),
            total.unproven.to_string(),
            total.torn_writes.to_string(),
            format!("{:.0}", total.simulated.as_secs_f64()),
            format!("{:.1}", total.wall.as_secs_f64()),
            format!("{ratio:.1}"),
        ];
        if determinism {
            let odd: Vec<String> = total.nondeterministic.iter().map(u64::to_string).collect();
            let checked = scenarios()
                .iter()
                .any(|scenario| scenario.name == *name && scenario.deterministic);
            row.push(if !checked {
                "not checked (OS threads)".to_owned()
            } else if odd.is_empty() {
                "-".to_owned()
            } else {
                odd.join(" ")
            });
        }
        table.add_row(row);
    }
    println!("{table}");
    let minutes = wall.as_secs_f64() / 60.0;
    println!(
        "{all_runs} seeds in {:.1} s with {jobs} at a time ({:.1} seeds per minute{})",
        wall.as_secs_f64(),
        if minutes > 0.0 {
            all_runs as f64 / minutes
        } else {
            0.0
        },
        if determinism { ", each run twice" } else { "" }
    );
}
