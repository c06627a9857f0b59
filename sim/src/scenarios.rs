//! The scenarios: every named way to run the simulation, with its cluster, fault bounds, node
//! settings and workloads. `--scenario` picks one by name; a sweep spreads its seeds over all.

use certus_core::ct::LogConfig;
use certus_node::NodeConfig;

use crate::acme::workload::AcmeWorkload;
use crate::ct::workload::CtWorkload;
use crate::leases::workload::LeaseWorkload;
use crate::pipelines::workload::PipelineWorkload;
use crate::schedule::FaultConfig;
use crate::sessions::workload::SessionWorkload;
use crate::{pipelines, sessions};

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
    /// daemons on: [`sessions::run::tune`]).
    pub sessions: Option<SessionWorkload>,
    /// The transaction pipelines workload, if the scenario runs one (its `tune` must keep the
    /// webhook processor off: [`pipelines::run::tune`]).
    pub pipelines: Option<PipelineWorkload>,
    /// The ACME workload, if the scenario runs one (its `tune` must turn the session daemons
    /// on, [`sessions::run::tune`]: the validator and the issuance run beside them).
    pub acme: Option<AcmeWorkload>,
}

/// Snapshots every couple of hundred entries, so that every service's state goes through its
/// snapshot encoding several times a run and lagging or restarted nodes install it.
pub fn snapshot_often(config: &mut NodeConfig) {
    config.raft.snapshot_after_entries = SNAPSHOT_OFTEN_ENTRIES;
    config.raft.entries_kept_after_snapshot = 20;
}

/// How many entries [`snapshot_often`] lets pass between snapshots (a run makes about 800).
const SNAPSHOT_OFTEN_ENTRIES: u64 = 200;

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
            acme: None,
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
            acme: None,
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
            acme: None,
        },
        Scenario {
            name: "sled",
            about: "3 nodes on sled (the production store, with OS threads: a crash cannot lose \
                    what sled buffered)",
            // The Raft log is on real files here, which the simulation cannot make fail.
            faults: FaultConfig {
                disk_faults: false,
                ..FaultConfig::for_nodes(3)
            },
            sled: true,
            deterministic: false,
            tune: |_| {},
            workload: LeaseWorkload::default(),
            ct: None,
            sessions: None,
            pipelines: None,
            acme: None,
        },
        Scenario {
            name: "ct",
            about: "3 nodes running the CT log: submitters and auditors beside lease clients; \
                    the STH-selection checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: snapshot_often,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: Some(CtWorkload::default()),
            sessions: None,
            pipelines: None,
            acme: None,
        },
        Scenario {
            name: "ct-5",
            about: "5 nodes running the CT log (three must hold a tree before it serves), \
                    more submitters, no guard window, no dedupe window, reports that age out \
                    within seconds",
            faults: FaultConfig::for_nodes(5),
            sled: false,
            deterministic: true,
            tune: snapshot_often,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: Some(CtWorkload {
                submitters: 5,
                // No guard window: entries are numbered as soon as the machine clock passes
                // their SCT, so a node whose clock is behind signs trees holding SCTs from its
                // future, and its STH timestamps must still cover them.
                // Reports age out 2 s after they are made (nodes report again every second), so
                // a node cut off or down stops counting as a holder within the run.
                log_config: LogConfig {
                    min_serving_permille: 600,
                    guard_window_ms: 0,
                    report_ttl_ms: 2_000,
                    ..LogConfig::default()
                },
                // Nothing cleaned up is remembered: every resubmission of an entry cleaned up
                // is answered from a node's local index, and a node behind the clean-up point
                // must refuse new entries until it catches up.
                dedupe_window_entries: Some(0),
                ..CtWorkload::default()
            }),
            sessions: None,
            pipelines: None,
            acme: None,
        },
        Scenario {
            name: "sessions",
            about: "3 nodes working CA issuance sessions: clients serving HTTP-01 over the \
                    simulated network, an external worker that dies mid-step, an upstream CA \
                    polled on a compressed schedule; the queue-recovery checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: sessions::run::tune,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: None,
            sessions: Some(SessionWorkload::default()),
            pipelines: None,
            acme: None,
        },
        Scenario {
            name: "pipelines",
            about: "3 nodes running transaction pipelines: producers enqueuing with external \
                    ids and long-polling, workers that crash mid-transaction or stall past \
                    the reaper; the pipeline checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: pipelines::run::tune,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: None,
            sessions: None,
            pipelines: Some(PipelineWorkload::default()),
            acme: None,
        },
        Scenario {
            name: "acme",
            about: "3 nodes serving ACME: clients registering, ordering, serving HTTP-01 (or \
                    not), finalizing and revoking through random nodes with the nodes' own \
                    nonces; the leader's validator and the session daemons' issuance; the ACME \
                    checkers",
            faults: FaultConfig::for_nodes(3),
            sled: false,
            deterministic: true,
            tune: sessions::run::tune,
            workload: LeaseWorkload {
                clients: 2,
                ..LeaseWorkload::default()
            },
            ct: None,
            sessions: None,
            pipelines: None,
            acme: Some(AcmeWorkload::default()),
        },
    ]
}

/// The scenario named `name`.
pub fn scenario(name: &str) -> Option<Scenario> {
    scenarios()
        .into_iter()
        .find(|scenario| scenario.name == name)
}
