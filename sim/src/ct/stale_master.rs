//! A stale CT master: what a master proposes, delivered late. A master that was paused, or whose
//! forwarded proposal crossed a leader change, proposes from a view of the state that is no
//! longer true. The node's own master never does this in a run (it reads and proposes at once,
//! on the leader), so without this task the state's last defences are never tried: the
//! sequencer's check-and-set, the rule that the serving STH never shrinks, and the holders a
//! published STH needs.
//!
//! Every 0.3–1.5 s it reads the state through a random node and proposes one of: the next
//! `Sequence` numbered from the view's next number, or a `Publish` of the STH the view would
//! have selected, each 50 ms–3 s later; or at once a `Publish` of the largest STH any node
//! reported, or of the newest one (a lagging node's fresher STH of a smaller tree), counting
//! every member, held by enough of them or not; or, as a master whose clock runs ahead, a
//! `Sequence` of entries the guard window still holds back, a moment later. The state must refuse
//! what is not right; the STH checkers judge what it let through.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use certus_core::ct::{CtCommand, EntryKey, SignedTreeHead};
use certus_core::limits::CT_SEQUENCE_BATCH_MAX;
use certus_core::{Command, Response};
use certus_node::ordered_watch as watch;
use serde::Serialize;

use crate::cluster::SimCluster;
use crate::schedule::SeedRng;

/// How far ahead of the cluster's clock a master that runs ahead reads the entries due.
const AHEAD_MS: u64 = 400;

/// How long a read or a proposal may take before the stale master gives up on it.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the stale master proposed and what became of it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StaleProposals {
    /// Proposals the state applied (still right when they landed).
    pub applied: u64,
    /// Proposals the state refused.
    pub refused: u64,
    /// Proposals with no answer (the node was down or cut off).
    pub unanswered: u64,
}

/// The running stale master.
#[derive(Debug)]
pub struct StaleMaster {
    task: tokio::task::JoinHandle<()>,
    counts: Arc<[AtomicU64; 3]>,
}

impl StaleMaster {
    /// Starts proposing until `stopped` turns true or [`finish`](Self::finish) stops it.
    pub fn start(cluster: &Arc<SimCluster>, seed: u64, stopped: watch::Receiver<bool>) -> Self {
        let counts: Arc<[AtomicU64; 3]> = Arc::default();
        let task = tokio::spawn(run(
            Arc::clone(cluster),
            SeedRng::new(seed, 1_100),
            stopped,
            Arc::clone(&counts),
        ));
        StaleMaster { task, counts }
    }

    /// Stops it (a proposal in flight may wait on a node that never answers) and says what it
    /// did.
    pub async fn finish(self) -> StaleProposals {
        self.task.abort();
        let _ = self.task.await;
        StaleProposals {
            applied: self.counts[0].load(Ordering::SeqCst),
            refused: self.counts[1].load(Ordering::SeqCst),
            unanswered: self.counts[2].load(Ordering::SeqCst),
        }
    }
}

async fn run(
    cluster: Arc<SimCluster>,
    mut rng: SeedRng,
    mut stopped: watch::Receiver<bool>,
    counts: Arc<[AtomicU64; 3]>,
) {
    let ids = cluster.ids();
    let members: BTreeSet<u64> = ids.iter().copied().collect();
    loop {
        let pause = Duration::from_millis(rng.between(300, 1_500));
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            _ = stopped.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        if *stopped.borrow() {
            return;
        }
        let via = ids[usize::try_from(rng.between(0, ids.len() as u64 - 1)).unwrap_or(0)];
        let kind = rng.between(0, 4);
        let view_members = members.clone();
        let view = cluster.read(via, move |state, now_ms| {
            let sequence = |keys: Vec<EntryKey>| {
                (!keys.is_empty()).then(|| CtCommand::Sequence {
                    first: state.ct_next_sequence(),
                    keys,
                })
            };
            let publish = |sth: SignedTreeHead| CtCommand::Publish {
                sth,
                members: view_members.iter().copied().collect(),
            };
            let reported = || state.ct_reports().values().map(|report| report.sth.clone());
            let due = |at_ms: u64| state.ct_ready_to_sequence(at_ms, CT_SEQUENCE_BATCH_MAX);
            match kind {
                0 => sequence(due(now_ms)),
                1 => state
                    .ct_select_serving(&view_members, now_ms)
                    .cloned()
                    .map(publish),
                2 => reported()
                    .max_by_key(|sth| (sth.tree_size, sth.timestamp_ms))
                    .map(publish),
                3 => reported()
                    .max_by_key(|sth| (sth.timestamp_ms, sth.tree_size))
                    .map(publish),
                // A master whose clock runs ahead: it sequences entries the guard window still
                // holds back on the cluster's clock, numbered from the next number of now.
                _ => {
                    let now_due = due(now_ms);
                    let ahead = due(now_ms + AHEAD_MS);
                    sequence(
                        ahead
                            .into_iter()
                            .filter(|key| !now_due.contains(key))
                            .collect(),
                    )
                }
            }
        });
        // A node cut off for good may never answer: a master gives up on it.
        let Ok(Ok(Some(command))) = tokio::time::timeout(CALL_TIMEOUT, view).await else {
            continue;
        };
        // A view's Sequence and selected STH are proposed late; the picks from the reports at
        // once, while the node that reported them may still be alone in holding them.
        let late = match kind {
            0 | 1 => rng.between(50, 3_000),
            // Once the guard window let the entries through, before the master numbers them.
            4 => rng.between(AHEAD_MS / 4, AHEAD_MS),
            _ => 0,
        };
        tokio::time::sleep(Duration::from_millis(late)).await;
        let via = ids[usize::try_from(rng.between(0, ids.len() as u64 - 1)).unwrap_or(0)];
        let outcome =
            tokio::time::timeout(CALL_TIMEOUT, cluster.write(via, vec![Command::Ct(command)]))
                .await;
        let slot = match outcome {
            Ok(Ok(responses)) if matches!(responses.as_slice(), [Response::Ct(Ok(_))]) => 0,
            Ok(Ok(_)) => 1,
            Ok(Err(_)) | Err(_) => 2,
        };
        counts[slot].fetch_add(1, Ordering::SeqCst);
    }
}
