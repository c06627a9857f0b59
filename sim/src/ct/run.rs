//! The CT log in a simulated run: its setup from the seed, the observer that records every
//! serving STH with who held it, the workload, a stale master, and the STH-selection verdicts
//! at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::ct::{CtCommand, LogConfig, holders_needed};
use certus_core::{Command, Response};
use certus_ct::chain::{AcceptedRoots, ChainLimits};
use certus_ct::signer::{Ed25519Signer, LogVerifier};
use certus_node::CtSetup;
use certus_node::ordered_watch as watch;
use certus_store::{CtDatabase, Disk};
use serde::Serialize;

use super::checkers::{self, Acknowledged, Publication};
use super::stale_master::{StaleMaster, StaleProposals};
use super::workload::{CtHistory, CtWorkload, RunningCt, TestPki};
use crate::cluster::{SimCluster, elapsed_ms};
use crate::judge::Verdict;

/// How soon after the faults heal (or after its SCT, if later) an entry must be served.
pub const MERGE_DELAY_BOUND_MS: u64 = 10_000;
/// How often the observer looks at the nodes.
const OBSERVE_EVERY: Duration = Duration::from_millis(10);

/// The log's key and accepted root for the run of `seed`.
pub fn setup(seed: u64) -> (CtSetup, Arc<TestPki>, LogVerifier) {
    let pki = Arc::new(TestPki::new(seed));
    let signer = Ed25519Signer::from_seed(crate::keys::ed25519_seed(seed, "ct-log"));
    let verifier = LogVerifier::for_signer(&signer).expect("an Ed25519 verifier");
    let roots = AcceptedRoots::from_der([pki.root_der.clone()]).expect("the test root parses");
    let setup = CtSetup {
        signer: Arc::new(signer),
        roots,
        limits: ChainLimits::default(),
    };
    (setup, pki, verifier)
}

/// Keys of what the observer has already recorded.
type Seen = BTreeSet<(u64, u64, u64)>;

#[derive(Debug, Default)]
struct Observed {
    publications: Vec<Publication>,
    /// Every node STH reported through Raft (each could have become the serving STH).
    reported: Vec<Publication>,
    sizes: BTreeMap<u64, Vec<u64>>,
}

/// The CT part of a running simulation.
#[derive(Debug)]
pub struct CtRun {
    verifier: LogVerifier,
    workload: RunningCt,
    stop_observer: watch::Sender<bool>,
    observer: tokio::task::JoinHandle<()>,
    observed: Arc<Mutex<Observed>>,
    stale_master: StaleMaster,
}

/// What the CT part of a run reports.
#[derive(Debug, Serialize)]
pub struct CtReport {
    /// Every serving STH, in publication order.
    pub publications: Vec<Publication>,
    /// What the CT clients saw.
    pub history: CtHistory,
    /// What the stale master proposed, and what the state made of it.
    pub stale_proposals: StaleProposals,
}

/// Starts the observer and the CT workload.
pub fn start(
    cluster: &Arc<SimCluster>,
    workload: &CtWorkload,
    seed: u64,
    pki: Arc<TestPki>,
    verifier: LogVerifier,
    started: tokio::time::Instant,
) -> CtRun {
    let nodes = cluster.ids().len() as u64;
    if workload.log_config != LogConfig::default() {
        let command = CtCommand::Configure(workload.log_config);
        tokio::spawn(configure(Arc::clone(cluster), command));
    }
    if let Some(entries) = workload.dedupe_window_entries {
        let command = CtCommand::SetDedupeWindow { entries };
        tokio::spawn(configure(Arc::clone(cluster), command));
    }
    let running = super::workload::start(workload, nodes, seed, pki, &verifier, started);
    let observed: Arc<Mutex<Observed>> = Arc::default();
    let (stop_observer, stopped) = watch::channel(false);
    let stale_master = StaleMaster::start(cluster, seed, stopped.clone());
    let observer = tokio::spawn(observe(
        Arc::clone(cluster),
        Arc::clone(&observed),
        stopped,
        started,
    ));
    CtRun {
        verifier,
        workload: running,
        stop_observer,
        observer,
        observed,
        stale_master,
    }
}

/// Applies a configuration command through any node, retrying until it is applied.
async fn configure(cluster: Arc<SimCluster>, command: CtCommand) {
    let command = Command::Ct(command);
    for attempt in 0u64.. {
        let via = attempt % cluster.ids().len() as u64 + 1;
        if let Ok(responses) = cluster.write(via, vec![command.clone()]).await
            && matches!(responses.first(), Some(Response::Ct(Ok(_))))
        {
            tracing::info!(?command, "CT log configured");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Records each new serving STH the first time any node has applied it, with every node's
/// local tree size at that moment, and each node's tree size whenever it changes.
async fn observe(
    cluster: Arc<SimCluster>,
    observed: Arc<Mutex<Observed>>,
    stopped: watch::Receiver<bool>,
    started: tokio::time::Instant,
) {
    let mut seen = Seen::new();
    let mut seen_reports = Seen::new();
    let mut last_size: BTreeMap<u64, u64> = BTreeMap::new();
    while !*stopped.borrow() {
        look(
            &cluster,
            &observed,
            (&mut seen, &mut seen_reports),
            &mut last_size,
            elapsed_ms(started),
        );
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}

/// One look at every node (see [`observe`]).
fn look(
    cluster: &SimCluster,
    observed: &Mutex<Observed>,
    (seen, seen_reports): (&mut Seen, &mut Seen),
    last_size: &mut BTreeMap<u64, u64>,
    now_ms: u64,
) {
    {
        let mut observed = observed.lock().expect("observed");
        for (id, ct) in cluster.ct_nodes() {
            let size = ct.db().tree_size();
            if last_size.insert(id, size) != Some(size) {
                observed.sizes.entry(id).or_default().push(size);
            }
        }
        for (_, replica) in cluster.replicas() {
            let reports = replica
                .reader
                .read(|applied| applied.state.ct_reports().clone());
            for (node, report) in reports {
                let key = (node, report.sth.tree_size, report.sth.timestamp_ms);
                if seen_reports.insert(key) {
                    observed.reported.push(Publication {
                        observed_ms: now_ms,
                        published_at_ms: report.reported_at_ms,
                        sth: report.sth,
                        holders: BTreeMap::new(),
                        needed: 0,
                    });
                }
            }
            let found = replica.reader.read(|applied| {
                let state = &applied.state;
                state
                    .ct_serving()
                    .cloned()
                    .map(|serving| (serving, *state.ct_config()))
            });
            let Some((serving, config)) = found else {
                continue;
            };
            let key = (
                serving.published_at_ms,
                serving.sth.timestamp_ms,
                serving.sth.tree_size,
            );
            if seen.insert(key) {
                let members = replica.membership().members.len();
                observed.publications.push(Publication {
                    observed_ms: now_ms,
                    published_at_ms: serving.published_at_ms,
                    sth: serving.sth,
                    holders: last_size.clone(),
                    needed: holders_needed(&config, members),
                });
            }
        }
    }
}

impl CtRun {
    /// Stops the clients, waits for the acknowledged entries to be served (up to the bound),
    /// and judges the run.
    pub async fn finish(
        self,
        cluster: &SimCluster,
        heal_ms: u64,
        started: tokio::time::Instant,
    ) -> (Vec<Verdict>, CtReport) {
        let history = self.workload.stop().await;
        let acknowledged: Vec<Acknowledged> = history
            .submissions
            .iter()
            .filter_map(|submission| {
                Some(Acknowledged {
                    leaf_hash: submission.leaf_hash?,
                    acknowledged_ms: submission.returned_ms,
                    label: format!(
                        "leaf {} (client {}, via node {})",
                        submission.leaf, submission.client, submission.node
                    ),
                })
            })
            .collect();
        let stop_at = elapsed_ms(started) + MERGE_DELAY_BOUND_MS;
        while elapsed_ms(started) < stop_at && !all_served(cluster, &acknowledged) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // One more look, so the last publication and tree sizes are recorded.
        tokio::time::sleep(OBSERVE_EVERY * 3).await;
        let _ = self.stop_observer.send(true);
        let _ = self.observer.await;
        let stale_proposals = self.stale_master.finish().await;
        let end_ms = elapsed_ms(started);
        let observed = std::mem::take(&mut *self.observed.lock().expect("observed"));
        let mut publications = observed.publications;
        publications.sort_by_key(|p| (p.published_at_ms, p.sth.timestamp_ms, p.sth.tree_size));

        let logs = stored_logs(cluster);
        let (numbered, log) = checkers::numbered_once(&logs);
        let checked = format!(
            "{} submissions ({} acknowledged), {} STHs fetched, {} consistency and {} inclusion \
             proofs verified; stale master proposals: {} applied, {} refused, {} unanswered",
            history.submissions.len(),
            acknowledged.len(),
            history.sths_fetched,
            history.consistency_checked,
            history.inclusion_checked,
            stale_proposals.applied,
            stale_proposals.refused,
            stale_proposals.unanswered
        );
        let verdicts = vec![
            checkers::serving_sth_monotonic(&publications),
            checkers::held_when_published(&publications),
            numbered,
            checkers::consistent_with_log(&publications, &log, &self.verifier),
            {
                let mut verdict =
                    checkers::consistent_with_log(&observed.reported, &log, &self.verifier);
                verdict.checker = "node-sths-consistent".to_owned();
                verdict
            },
            checkers::merge_delay(
                &acknowledged,
                &log,
                &publications,
                heal_ms,
                end_ms,
                MERGE_DELAY_BOUND_MS,
            ),
            checkers::trees_never_shrink(&observed.sizes),
            checkers::clients_saw_no_violation(&history.violations, &checked),
        ];
        (
            verdicts,
            CtReport {
                publications,
                history,
                stale_proposals,
            },
        )
    }
}

/// Whether a running node serves an STH covering every acknowledged entry.
fn all_served(cluster: &SimCluster, acknowledged: &[Acknowledged]) -> bool {
    let replicas = cluster.replicas();
    cluster.ct_nodes().iter().any(|(id, ct)| {
        let Some((_, replica)) = replicas.iter().find(|(other, _)| other == id) else {
            return false;
        };
        let served = replica.reader.read(|applied| {
            applied
                .state
                .ct_serving()
                .map_or(0, |serving| serving.sth.tree_size)
        });
        acknowledged.iter().all(|entry| {
            matches!(ct.db().index_of_leaf(&entry.leaf_hash), Ok(Some(index)) if index < served)
        })
    })
}

/// Every node's stored log (leaf inputs in sequence order), read from the running node or, for
/// a node that is down, from what its disk holds.
fn stored_logs(cluster: &SimCluster) -> BTreeMap<u64, Vec<Vec<u8>>> {
    let running: BTreeMap<u64, _> = cluster.ct_nodes().into_iter().collect();
    let mut logs = BTreeMap::new();
    for id in cluster.ids() {
        let opened;
        let db = match running.get(&id) {
            Some(ct) => ct.db(),
            None => {
                let disk: Arc<dyn Disk> = Arc::new(cluster.disk(id).clone());
                let files: Arc<dyn certus_store::Files> = Arc::new(cluster.ct_files(id).clone());
                match CtDatabase::open(disk, files) {
                    Ok(db) => {
                        opened = db;
                        &opened
                    }
                    Err(error) => {
                        tracing::error!(id, %error, "a stopped node's CT database does not open");
                        continue;
                    }
                }
            }
        };
        let mut log = Vec::new();
        loop {
            match db.entries(log.len() as u64, 4096) {
                Ok(batch) if !batch.is_empty() => {
                    log.extend(batch.into_iter().map(|entry| entry.leaf_input));
                }
                _ => break,
            }
        }
        logs.insert(id, log);
    }
    logs
}
