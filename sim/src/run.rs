//! One simulated run of a scenario from a seed.
//!
//! A run: draw the fault schedule from the seed; start the cluster with each node's clock; start
//! the workloads (the lease clients of every scenario, and the scenario's CT, session, pipeline
//! or ACME workload); the **safety phase** applies the faults; then every fault is healed (or one is
//! left on for good) and the **liveness phase** must see a grant within a bound; then the
//! workloads stop, the nodes settle, and every checker judges what was recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing::info;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::acme::run::AcmeReport;
use crate::checkers;
use crate::cluster::{ClusterSpec, SimCluster, Storage, elapsed_ms};
use crate::ct::run::CtReport;
use crate::faults::FaultDriver;
use crate::judge::Verdict;
use crate::leases::duplicates::Duplicator;
use crate::leases::history::{History, Operation};
use crate::leases::model::LeaseModel;
use crate::observe::{RunRecord, UnsyncedWrites};
use crate::pipelines::run::PipelineReport;
use crate::scenarios::Scenario;
use crate::schedule::{Fault, Schedule};
use crate::sessions::run::{SessionReport, SessionSetup};
use crate::settle::settle;
use crate::{acme, ct, leases, pipelines, sessions};

/// How long after the faults heal a grant must succeed.
pub const LIVENESS_BOUND_MS: u64 = 15_000;

/// The most states the linearizability search may visit per lease before it gives up.
const LINEARIZABILITY_BUDGET: usize = 2_000_000;

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
    /// The ACME clients' history and the upstream orders, as JSON, when the scenario runs ACME.
    pub acme_report: Option<String>,
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
        self.acme_report.hash(&mut hasher);
        hasher.finish()
    }
}

/// What the simulated part of a run hands back.
struct Collected {
    history: History,
    ct_report: Option<CtReport>,
    sessions_report: Option<SessionReport>,
    pipelines_report: Option<PipelineReport>,
    acme_report: Option<AcmeReport>,
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
    let mut acme_report = None;
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
            acme_report = collected
                .acme_report
                .as_ref()
                .map(|report| serde_json::to_string_pretty(report).unwrap_or_default());
            let mut verdicts = collected.verdicts;
            let model = LeaseModel {
                epoch_ms: collected.epoch_ms,
                skew_ms: schedule.clock_spread_ms(),
            };
            let (linearizable, windows) = leases::checkers::linearizability(
                &collected.history,
                &model,
                LINEARIZABILITY_BUDGET,
            );
            verdicts.push(linearizable);
            nonlinearizable = windows;
            let simulated = Duration::from_millis(collected.record.end_ms);
            (collected.history, collected.record, verdicts, simulated)
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned());
            let verdict = Verdict::fail("run", format!("the simulation panicked: {message}"));
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
        acme_report,
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

/// The simulated part of a run, on madsim's main machine.
async fn simulate(scenario: Scenario, schedule: Schedule) -> Collected {
    certus_node::raft::runtime::skew::reset();
    certus_node::raft::runtime::slow_disk::reset();
    certus_node::raft::runtime::slow_apply::reset();
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
    let ct_setup = scenario.ct.as_ref().map(|_| ct::run::setup(schedule.seed));
    // ACME validates with the sessions' HTTP-01 probe and issues through their upstream CA.
    let session_setup = (scenario.sessions.is_some() || scenario.acme.is_some())
        .then(|| SessionSetup::new(schedule.seed, started));
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
    let running = leases::workload::start_leases(&scenario.workload, nodes, schedule.seed, started);
    let duplicator = Duplicator::start(nodes, schedule.seed, started);
    let ct = scenario
        .ct
        .as_ref()
        .zip(ct_setup)
        .map(|(workload, (_, pki, verifier))| {
            ct::run::start(&cluster, workload, schedule.seed, pki, verifier, started)
        });
    let acme = scenario
        .acme
        .as_ref()
        .zip(session_setup.clone())
        .map(|(workload, setup)| {
            acme::run::start(&cluster, workload, setup, schedule.seed, started)
        });
    let sessions = scenario
        .sessions
        .as_ref()
        .zip(session_setup)
        .map(|(workload, setup)| sessions::run::start(&cluster, workload, setup, schedule.seed));
    let pipelines = scenario.pipelines.as_ref().map(|workload| {
        pipelines::run::start(
            &cluster,
            workload,
            schedule.seed,
            config.max_skew_ms,
            schedule.clock_spread_ms(),
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
    if let Some(acme) = &acme {
        acme.healed(heal_ms);
    }

    // Liveness: a grant within the bound.
    let granted = leases::workload::acquire_until_granted(
        nodes,
        "liveness",
        started,
        heal_ms + LIVENESS_BOUND_MS,
        running.recorder(),
    )
    .await;
    let mut verdicts = vec![leases::checkers::liveness(
        granted,
        heal_ms,
        LIVENESS_BOUND_MS,
    )];
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
            let faulty_after_heal = schedule
                .permanent
                .as_ref()
                .map(|fault| fault.nodes(config.nodes))
                .unwrap_or_default();
            // The nodes a network fault kept on cuts off (not those merely slowed or skewed).
            let cut_off_after_heal = schedule
                .permanent
                .as_ref()
                .filter(|fault| {
                    matches!(
                        fault,
                        Fault::Isolate { .. }
                            | Fault::Split { .. }
                            | Fault::OneWay { .. }
                            | Fault::Flap { .. }
                            | Fault::Demote { .. }
                    )
                })
                .map(|fault| fault.nodes(config.nodes))
                .unwrap_or_default();
            let (session_verdicts, report) = sessions
                .finish(
                    &cluster,
                    heal_ms,
                    &faulty_after_heal,
                    &cut_off_after_heal,
                    schedule.clock_spread_ms(),
                )
                .await;
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
    let acme_report = match acme {
        Some(acme) => {
            let (acme_verdicts, report) = acme.finish(&cluster, heal_ms).await;
            verdicts.extend(acme_verdicts);
            Some(report)
        }
        None => None,
    };

    // Let every running node catch up, then read the final state.
    let settled = settle(&cluster, final_leases).await;
    verdicts.push(leases::checkers::durability(
        &leases::checkers::final_grants(&history),
        &settled.finals,
        settled.latest_clock_ms,
        nodes,
    ));
    let final_voters: Vec<(u64, BTreeSet<u64>)> = settled
        .finals
        .keys()
        .filter_map(|id| {
            cluster
                .replica(*id)
                .map(|replica| (*id, replica.membership()))
        })
        .map(|(id, view)| {
            let voters = view
                .members
                .iter()
                .filter(|member| member.voter)
                .map(|member| member.id)
                .collect();
            (id, voters)
        })
        .collect();
    verdicts.push(checkers::voters_restored(
        nodes,
        &driver.unrestored_voters(),
        &final_voters,
    ));
    // Readiness at the end, of the members that caught up and have no fault left on them.
    let still_faulty: BTreeSet<u64> = driver
        .spans()
        .iter()
        .filter(|span| span.until_ms.is_none())
        .flat_map(|span| span.nodes.iter().copied())
        .collect();
    let unready_at_end: Vec<(u64, String)> = settled
        .finals
        .keys()
        .filter(|id| !still_faulty.contains(id))
        .filter_map(|id| cluster.replica(*id).map(|replica| (*id, replica)))
        .filter(|(_, replica)| replica.is_member())
        .filter_map(|(id, replica)| {
            let readiness = certus_node::services::health::readiness(&replica);
            (!readiness.ready).then(|| (id, readiness.reason.unwrap_or_default()))
        })
        .collect();
    verdicts.push(checkers::readiness(
        &driver.cut_off_readiness(),
        &unready_at_end,
    ));
    let samples = cluster.samples();
    verdicts.push(checkers::single_master(&samples));
    verdicts.push(leases::checkers::exclusive_holding(
        &history,
        schedule.clock_spread_ms(),
    ));
    verdicts.push(leases::checkers::no_stale_token(&history));
    verdicts.push(leases::checkers::reads_never_go_back(&history));
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
        acme_report,
        record,
        verdicts,
        epoch_ms,
    }
}

/// Every lease `state` holds, as (lease → (holder, token)).
fn final_leases(state: &certus_core::State) -> BTreeMap<String, (String, u64)> {
    state
        .leases(None, usize::MAX, 0)
        .into_iter()
        .map(|lease| {
            (
                lease.name.to_string(),
                (lease.holder.to_string(), lease.token.0),
            )
        })
        .collect()
}
