//! Concurrent add-chain submitters over `certus.v1.Log/AddChain`, and the merge delay of what
//! they got SCTs for.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use certus_ct::merkle::leaf_hash;
use certus_ct::structures::leaf_input;
use certus_ct::{Hash, LogEntry};
use certus_node::Node;
use certus_proto::v1::AddChainRequest;
use certus_proto::v1::log_client::LogClient;
use tonic::transport::Channel;

use super::pki::TestPki;
use super::sth_watch::Coverage;
use crate::bench::micros;

/// When the submitters stop.
#[derive(Debug, Clone, Copy)]
pub(super) enum Until {
    /// After this many submissions (each made once, whatever its outcome); nothing is a warm-up,
    /// and only counts are kept (the memory phase measures the nodes, not a record of them).
    Count(u64),
    /// Submissions begun before `start` are a warm-up and not counted; none begins after `end`.
    Window { start: Instant, end: Instant },
}

/// An entry the log gave an SCT for.
#[derive(Debug, Clone)]
pub(super) struct Acknowledged {
    /// The SCT's timestamp: when the merge delay starts.
    pub(super) sct_timestamp_ms: u64,
    /// Which of the PKI's leaves.
    leaf: usize,
    /// The SCT's extensions (part of the leaf).
    extensions: Vec<u8>,
}

impl Acknowledged {
    /// The leaf hash the entry has in the tree.
    pub(super) fn leaf_hash(&self, pki: &TestPki) -> Result<Hash, String> {
        let entry = LogEntry::X509 {
            certificate: pki.leaf(self.leaf).to_vec(),
        };
        let input = leaf_input(self.sct_timestamp_ms, &entry, &self.extensions)
            .map_err(|error| format!("encoding a MerkleTreeLeaf: {error}"))?;
        Ok(leaf_hash(&input))
    }
}

/// What the submitters saw, outside the warm-up.
#[derive(Debug, Default)]
pub(super) struct Submitted {
    /// Submit latencies of the acknowledged submissions, sorted, in microseconds.
    pub(super) latencies_us: Vec<u64>,
    /// Acknowledgements that came before the window's end (all of them for a count): what a
    /// rate counts.
    pub(super) completed_in_window: usize,
    /// Acknowledgements, in or after the window (not the warm-up).
    pub(super) acknowledged_count: usize,
    /// Per client, in the order they were acknowledged (not for [`Until::Count`]).
    pub(super) acknowledged: Vec<Acknowledged>,
    /// Refusals and failures by gRPC code.
    pub(super) errors: BTreeMap<String, usize>,
    /// One message per error code, to say what went wrong.
    pub(super) error_examples: BTreeMap<String, String>,
    /// Whether a submitter ran out of pre-generated leaves.
    pub(super) leaves_ran_out: bool,
}

impl Submitted {
    pub(super) fn error_count(&self) -> usize {
        self.errors.values().sum()
    }
}

/// Runs one submitter per channel until `until`, each sending a new leaf (with the root) per
/// request and waiting for its SCT before the next.
pub(super) async fn submit(
    channels: &[Channel],
    pki: &Arc<TestPki>,
    until: Until,
) -> Result<Submitted, String> {
    let tickets = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for channel in channels {
        let (channel, pki, tickets) = (channel.clone(), Arc::clone(pki), Arc::clone(&tickets));
        tasks.push(tokio::spawn(async move {
            let mut log = LogClient::new(channel);
            let mut seen = Submitted::default();
            loop {
                let began = Instant::now();
                let counted = match until {
                    Until::Count(count) => {
                        if tickets.fetch_add(1, Ordering::Relaxed) >= count {
                            break;
                        }
                        true
                    }
                    Until::Window { start, end } => {
                        if began >= end {
                            break;
                        }
                        began >= start
                    }
                };
                let Some((leaf_number, leaf)) = pki.take_leaf() else {
                    seen.leaves_ran_out = true;
                    break;
                };
                let request = AddChainRequest {
                    chain: vec![leaf.to_vec(), pki.root_der.clone()],
                    precertificate: false,
                };
                let result = log.add_chain(request).await;
                if !counted {
                    continue;
                }
                match result {
                    Ok(reply) => {
                        seen.acknowledged_count += 1;
                        let Until::Window { end, .. } = until else {
                            seen.completed_in_window += 1;
                            continue;
                        };
                        seen.latencies_us.push(micros(began.elapsed()));
                        seen.completed_in_window += usize::from(Instant::now() <= end);
                        let reply = reply.into_inner();
                        seen.acknowledged.push(Acknowledged {
                            sct_timestamp_ms: reply.timestamp_ms,
                            leaf: leaf_number,
                            extensions: reply.extensions,
                        });
                    }
                    Err(status) => {
                        let code = format!("{:?}", status.code());
                        *seen.errors.entry(code.clone()).or_default() += 1;
                        seen.error_examples
                            .entry(code)
                            .or_insert_with(|| status.message().to_owned());
                    }
                }
            }
            seen
        }));
    }
    let mut all = Submitted::default();
    for task in tasks {
        let seen = task.await.map_err(|error| error.to_string())?;
        all.latencies_us.extend(seen.latencies_us);
        all.completed_in_window += seen.completed_in_window;
        all.acknowledged_count += seen.acknowledged_count;
        all.acknowledged.extend(seen.acknowledged);
        for (code, count) in seen.errors {
            *all.errors.entry(code).or_default() += count;
        }
        for (code, example) in seen.error_examples {
            all.error_examples.entry(code).or_insert(example);
        }
        all.leaves_ran_out |= seen.leaves_ran_out;
    }
    all.latencies_us.sort_unstable();
    Ok(all)
}

/// The merge delays of acknowledged entries.
#[derive(Debug, Default)]
pub(super) struct MergeDelays {
    /// From SCT timestamp to the first served tree that covered the entry, sorted, in ms.
    pub(super) delays_ms: Vec<u64>,
    /// Entries no node's database has (not numbered and integrated anywhere yet).
    pub(super) not_integrated: usize,
    /// Entries numbered, but not inside any served tree seen.
    pub(super) not_served: usize,
}

impl MergeDelays {
    /// Entries without a merge delay.
    pub(super) fn not_covered(&self) -> usize {
        self.not_integrated + self.not_served
    }
}

/// Finds each entry's index in the nodes' local databases and the first served tree past it.
pub(super) fn merge_delays(
    acknowledged: &[Acknowledged],
    pki: &TestPki,
    nodes: &[Node],
    coverage: &Coverage,
) -> Result<MergeDelays, String> {
    let mut delays = MergeDelays::default();
    for entry in acknowledged {
        let hash = entry.leaf_hash(pki)?;
        let mut index = None;
        for node in nodes {
            let ct = node.ct().ok_or("a node runs no CT log")?;
            index = ct
                .db()
                .index_of_leaf(&hash)
                .map_err(|error| format!("node {}: {error}", node.replica().id))?;
            if index.is_some() {
                break;
            }
        }
        match index.map(|index| coverage.covered_at_ms(index)) {
            None => delays.not_integrated += 1,
            Some(None) => delays.not_served += 1,
            // The poller reads the same clock the SCT was stamped with, after the entry was
            // numbered, so the difference is not negative unless the wall clock was set back.
            Some(Some(covered_ms)) => delays
                .delays_ms
                .push(covered_ms.saturating_sub(entry.sct_timestamp_ms)),
        }
    }
    delays.delays_ms.sort_unstable();
    Ok(delays)
}

/// A run's rate: `count` over `elapsed`.
pub(super) fn per_second(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}
