//! The STH-selection checkers of the CT log, run on every seed of a CT scenario.
//!
//! They judge what the harness observed, independently of the code they check: the serving
//! STHs as nodes applied them (with which nodes actually held each tree at that moment, read
//! from their local databases, not from their reports), the logs the nodes stored, and what
//! clients were told. The tree the serving STHs must describe is rebuilt here from the stored
//! entries with a fresh Merkle tree.
//!
//! What they cannot see: a serving STH published and replaced between two observations (the
//! harness samples every few milliseconds of simulated time); holders are counted at
//! observation, so a node that caught up in the meantime counts.

use std::collections::{BTreeMap, BTreeSet};

use certus_core::ct::SignedTreeHead;
use certus_ct::merkle::{MerkleTree, leaf_hash};
use certus_ct::signer::LogVerifier;
use certus_ct::structures::MerkleTreeLeaf;
use certus_ct::{Hash, LogEntry};
use serde::Serialize;

use crate::judge::Verdict;

/// A serving STH as the harness first saw it applied.
#[derive(Clone, Debug, Serialize)]
pub struct Publication {
    /// Simulated ms of the observation.
    pub observed_ms: u64,
    /// The machine time the state recorded for the publication.
    pub published_at_ms: u64,
    /// The STH.
    pub sth: SignedTreeHead,
    /// Each node's local tree size at the observation (a node that is down counts with what its
    /// disk holds).
    pub holders: BTreeMap<u64, u64>,
    /// How many holders the configuration asked for among the members.
    pub needed: usize,
}

/// A submission that got an SCT.
#[derive(Clone, Debug)]
pub struct Acknowledged {
    /// The leaf hash the entry has in the tree.
    pub leaf_hash: Hash,
    /// Simulated ms when the client got the SCT.
    pub acknowledged_ms: u64,
    /// A name for messages.
    pub label: String,
}

/// The serving STH never shrinks and never goes back in time: in publication order, sizes do
/// not decrease and timestamps strictly increase; equal sizes have equal roots.
pub fn serving_sth_monotonic(publications: &[Publication]) -> Verdict {
    const NAME: &str = "sth-monotonic";
    for pair in publications.windows(2) {
        let (before, after) = (&pair[0].sth, &pair[1].sth);
        if after.tree_size < before.tree_size {
            return Verdict::fail(
                NAME,
                format!(
                    "the serving STH shrank from {} to {} entries (observed at {} ms)",
                    before.tree_size, after.tree_size, pair[1].observed_ms
                ),
            );
        }
        if after.timestamp_ms <= before.timestamp_ms {
            return Verdict::fail(
                NAME,
                format!(
                    "the serving STH went back in time: {} after {} (observed at {} ms)",
                    after.timestamp_ms, before.timestamp_ms, pair[1].observed_ms
                ),
            );
        }
        if after.tree_size == before.tree_size && after.root_hash != before.root_hash {
            return Verdict::fail(
                NAME,
                format!(
                    "two serving STHs of {} entries differ in root",
                    after.tree_size
                ),
            );
        }
    }
    Verdict::pass(
        NAME,
        format!(
            "{} serving STHs, each at least as large and newer",
            publications.len()
        ),
    )
}

/// Each serving STH was held by enough nodes when it was published: at its first observation,
/// at least `needed` nodes' local trees covered it.
pub fn held_when_published(publications: &[Publication]) -> Verdict {
    const NAME: &str = "sth-held-when-published";
    for publication in publications {
        let holders = publication
            .holders
            .values()
            .filter(|size| **size >= publication.sth.tree_size)
            .count();
        if holders < publication.needed {
            return Verdict::fail(
                NAME,
                format!(
                    "the STH of {} entries served at {} ms was held by {holders} nodes ({:?}); {} needed",
                    publication.sth.tree_size,
                    publication.observed_ms,
                    publication.holders,
                    publication.needed
                ),
            );
        }
    }
    Verdict::pass(
        NAME,
        format!(
            "{} serving STHs, each held by enough nodes",
            publications.len()
        ),
    )
}

/// The nodes' logs agree: where two nodes both hold entry `i`, it is the same entry; and no
/// certificate appears under two numbers. Returns the longest log on success.
pub fn numbered_once(logs: &BTreeMap<u64, Vec<Vec<u8>>>) -> (Verdict, Vec<Vec<u8>>) {
    const NAME: &str = "sequence-numbered-once";
    let longest = logs
        .values()
        .max_by_key(|log| log.len())
        .cloned()
        .unwrap_or_default();
    for (node, log) in logs {
        if let Some(index) = log
            .iter()
            .zip(&longest)
            .position(|(mine, reference)| mine != reference)
        {
            return (
                Verdict::fail(
                    NAME,
                    format!("node {node}'s entry {index} differs from another node's"),
                ),
                longest,
            );
        }
    }
    let mut seen: BTreeMap<LogEntry, usize> = BTreeMap::new();
    for (index, leaf_input) in longest.iter().enumerate() {
        let entry = match MerkleTreeLeaf::decode(leaf_input) {
            Ok(leaf) => leaf.timestamped_entry.entry,
            Err(error) => {
                return (
                    Verdict::fail(NAME, format!("entry {index} does not decode: {error}")),
                    longest,
                );
            }
        };
        if let Some(first) = seen.insert(entry, index) {
            return (
                Verdict::fail(
                    NAME,
                    format!("one certificate is logged twice: entries {first} and {index}"),
                ),
                longest,
            );
        }
    }
    let detail = format!(
        "{} entries, each numbered once, identical on {} nodes",
        longest.len(),
        logs.len()
    );
    (Verdict::pass(NAME, detail), longest)
}

/// Every serving STH describes a prefix of the one log: its root is the root of the first
/// `tree_size` stored entries (so each is consistent with every other), its signature verifies
/// under the log's key, and its timestamp is not before any SCT it includes.
pub fn consistent_with_log(
    publications: &[Publication],
    log: &[Vec<u8>],
    verifier: &LogVerifier,
) -> Verdict {
    const NAME: &str = "sth-consistent";
    let tree = MerkleTree::from_leaf_hashes(log.iter().map(|input| leaf_hash(input)));
    let mut newest_sct_ms = Vec::with_capacity(log.len());
    let mut newest = 0u64;
    for input in log {
        if let Ok(leaf) = MerkleTreeLeaf::decode(input) {
            newest = newest.max(leaf.timestamped_entry.timestamp_ms);
        }
        newest_sct_ms.push(newest);
    }
    for publication in publications {
        let sth = &publication.sth;
        let Ok(root) = tree.root_at(sth.tree_size) else {
            return Verdict::fail(
                NAME,
                format!(
                    "an STH serves {} entries but the longest stored log has {}",
                    sth.tree_size,
                    log.len()
                ),
            );
        };
        if root != sth.root_hash {
            return Verdict::fail(
                NAME,
                format!(
                    "the STH of {} entries has a root that is not the log's",
                    sth.tree_size
                ),
            );
        }
        let signed = certus_ct::structures::DigitallySigned::decode(&sth.signature)
            .map_err(|error| error.to_string())
            .and_then(|signature| {
                verifier
                    .verify_sth(&certus_ct::structures::SignedTreeHead {
                        tree_size: sth.tree_size,
                        timestamp_ms: sth.timestamp_ms,
                        sha256_root_hash: sth.root_hash,
                        tree_head_signature: signature,
                    })
                    .map_err(|error| error.to_string())
            });
        if let Err(error) = signed {
            return Verdict::fail(
                NAME,
                format!(
                    "the STH of {} entries does not verify: {error}",
                    sth.tree_size
                ),
            );
        }
        let last = usize::try_from(sth.tree_size).unwrap_or(usize::MAX);
        if let Some(newest) = last.checked_sub(1).and_then(|i| newest_sct_ms.get(i))
            && sth.timestamp_ms < *newest
        {
            return Verdict::fail(
                NAME,
                format!(
                    "the STH of {} entries is stamped {} but includes an SCT stamped {newest}",
                    sth.tree_size, sth.timestamp_ms
                ),
            );
        }
    }
    Verdict::pass(
        NAME,
        format!(
            "{} serving STHs are prefixes of one {}-entry log and verify",
            publications.len(),
            log.len()
        ),
    )
}

/// Every entry that got an SCT is sequenced and served within `bound_ms` of the later of its
/// acknowledgement and the healing of the faults (entries acknowledged too close to the end of
/// the run are only required to be sequenced).
pub fn merge_delay(
    acknowledged: &[Acknowledged],
    log: &[Vec<u8>],
    publications: &[Publication],
    heal_ms: u64,
    end_ms: u64,
    bound_ms: u64,
) -> Verdict {
    const NAME: &str = "merge-delay";
    let index_of: BTreeMap<Hash, u64> = log
        .iter()
        .enumerate()
        .map(|(index, input)| (leaf_hash(input), index as u64))
        .collect();
    let mut worst_ms = 0;
    for entry in acknowledged {
        let Some(index) = index_of.get(&entry.leaf_hash) else {
            return Verdict::fail(
                NAME,
                format!(
                    "{} got an SCT at {} ms but is not in the log",
                    entry.label, entry.acknowledged_ms
                ),
            );
        };
        let due_ms = entry.acknowledged_ms.max(heal_ms) + bound_ms;
        let served_ms = publications
            .iter()
            .find(|publication| publication.sth.tree_size > *index)
            .map(|publication| publication.observed_ms);
        match served_ms {
            Some(served_ms) if served_ms <= due_ms && entry.acknowledged_ms >= heal_ms => {
                worst_ms = worst_ms.max(served_ms.saturating_sub(entry.acknowledged_ms));
            }
            Some(served_ms) if served_ms <= due_ms => {}
            Some(served_ms) => {
                return Verdict::fail(
                    NAME,
                    format!(
                        "{} (entry {index}) acknowledged at {} ms was first served at {served_ms} ms, after {due_ms} ms",
                        entry.label, entry.acknowledged_ms
                    ),
                );
            }
            None if due_ms <= end_ms => {
                return Verdict::fail(
                    NAME,
                    format!(
                        "{} (entry {index}) acknowledged at {} ms was never served (due by {due_ms} ms)",
                        entry.label, entry.acknowledged_ms
                    ),
                );
            }
            None => {}
        }
    }
    Verdict::pass(
        NAME,
        format!(
            "{} acknowledged entries served in time; worst merge delay after healing {worst_ms} ms",
            acknowledged.len()
        ),
    )
}

/// What clients saw was sound: every SCT and STH verified, every proof checked out.
pub fn clients_saw_no_violation(violations: &[String], checked: &str) -> Verdict {
    const NAME: &str = "ct-clients";
    match violations.first() {
        Some(first) => Verdict::fail(
            NAME,
            format!("{} violations; first: {first}", violations.len()),
        ),
        None => Verdict::pass(NAME, checked.to_owned()),
    }
}

/// Nodes that held a tree at some size never report holding less after (their trees are
/// durable): sizes per node, in observation order, never decrease.
pub fn trees_never_shrink(sizes: &BTreeMap<u64, Vec<u64>>) -> Verdict {
    const NAME: &str = "local-trees-durable";
    for (node, sizes) in sizes {
        if let Some(pair) = sizes.windows(2).find(|pair| pair[1] < pair[0]) {
            return Verdict::fail(
                NAME,
                format!(
                    "node {node}'s local tree shrank from {} to {} entries",
                    pair[0], pair[1]
                ),
            );
        }
    }
    let nodes: BTreeSet<&u64> = sizes.keys().collect();
    Verdict::pass(NAME, format!("{} nodes' trees only grew", nodes.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use certus_ct::signer::{Ed25519Signer, Signer};
    use certus_ct::structures::leaf_input;

    fn signer() -> Ed25519Signer {
        Ed25519Signer::from_seed([7; 32])
    }

    fn log(count: u64) -> Vec<Vec<u8>> {
        (0..count)
            .map(|n| {
                let entry = LogEntry::X509 {
                    certificate: n.to_be_bytes().to_vec(),
                };
                leaf_input(1_000 + n, &entry, &[]).unwrap()
            })
            .collect()
    }

    fn publication(log: &[Vec<u8>], size: u64, timestamp_ms: u64, holders: &[u64]) -> Publication {
        let tree = MerkleTree::from_leaf_hashes(log.iter().map(|input| leaf_hash(input)));
        let root = tree.root_at(size).unwrap();
        let signed = signer().sign_sth(size, timestamp_ms, &root).unwrap();
        Publication {
            observed_ms: timestamp_ms,
            published_at_ms: timestamp_ms,
            sth: SignedTreeHead {
                tree_size: size,
                timestamp_ms,
                root_hash: root,
                signature: signed.tree_head_signature.encode().unwrap(),
            },
            holders: holders
                .iter()
                .enumerate()
                .map(|(i, s)| (i as u64 + 1, *s))
                .collect(),
            needed: 2,
        }
    }

    #[test]
    fn a_growing_log_of_verified_prefixes_passes_every_checker() {
        let log = log(10);
        let verifier = LogVerifier::for_signer(&signer()).unwrap();
        let publications = vec![
            publication(&log, 3, 2_000, &[3, 5, 0]),
            publication(&log, 3, 2_500, &[3, 5, 3]),
            publication(&log, 10, 3_000, &[10, 10, 4]),
        ];
        assert!(serving_sth_monotonic(&publications).passed);
        assert!(held_when_published(&publications).passed);
        assert!(consistent_with_log(&publications, &log, &verifier).passed);
        let logs = BTreeMap::from([(1, log.clone()), (2, log[..4].to_vec())]);
        let (verdict, longest) = numbered_once(&logs);
        assert!(verdict.passed, "{}", verdict.detail);
        assert_eq!(longest, log);
        let acknowledged = vec![Acknowledged {
            leaf_hash: leaf_hash(&log[7]),
            acknowledged_ms: 2_600,
            label: "leaf 7".into(),
        }];
        assert!(merge_delay(&acknowledged, &log, &publications, 1_000, 9_000, 1_000).passed);
        assert!(!merge_delay(&acknowledged, &log, &publications, 1_000, 9_000, 100).passed);
    }

    #[test]
    fn each_broken_property_is_caught() {
        let log = log(10);
        let verifier = LogVerifier::for_signer(&signer()).unwrap();
        // Shrinking, and going back in time.
        let shrink = vec![
            publication(&log, 5, 2_000, &[5, 5]),
            publication(&log, 4, 2_100, &[5, 5]),
        ];
        assert!(!serving_sth_monotonic(&shrink).passed);
        let back = vec![
            publication(&log, 5, 2_000, &[5, 5]),
            publication(&log, 6, 2_000, &[6, 6]),
        ];
        assert!(!serving_sth_monotonic(&back).passed);
        // Held by one node only.
        assert!(!held_when_published(&[publication(&log, 5, 2_000, &[5, 4, 0])]).passed);
        // A root that is not the log's, and a signature that does not verify.
        let mut wrong_root = publication(&log, 5, 2_000, &[5, 5]);
        wrong_root.sth.root_hash[0] ^= 1;
        assert!(!consistent_with_log(&[wrong_root], &log, &verifier).passed);
        let mut wrong_signature = publication(&log, 5, 2_000, &[5, 5]);
        wrong_signature.sth.timestamp_ms += 1;
        assert!(!consistent_with_log(&[wrong_signature], &log, &verifier).passed);
        // An STH older than an SCT it includes (entry 4 is stamped 1 004).
        let early = publication(&log, 5, 1_003, &[5, 5]);
        assert!(!consistent_with_log(&[early], &log, &verifier).passed);
        // Two nodes disagree on an entry; one certificate twice.
        let mut other = log.clone();
        other[2] = log[3].clone();
        let (verdict, _) = numbered_once(&BTreeMap::from([(1, log.clone()), (2, other.clone())]));
        assert!(!verdict.passed);
        let (verdict, _) = numbered_once(&BTreeMap::from([(1, other)]));
        assert!(!verdict.passed);
        // An acknowledged entry missing from the log.
        let missing = Acknowledged {
            leaf_hash: [9; 32],
            acknowledged_ms: 100,
            label: "ghost".into(),
        };
        assert!(!merge_delay(&[missing], &log, &[], 0, 10_000, 1_000).passed);
        // Trees that shrink.
        assert!(!trees_never_shrink(&BTreeMap::from([(1, vec![1, 3, 2])])).passed);
        assert!(trees_never_shrink(&BTreeMap::from([(1, vec![1, 3, 3])])).passed);
        assert!(!clients_saw_no_violation(&["bad".into()], "").passed);
    }
}
