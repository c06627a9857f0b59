//! The invariants of the cluster itself, whatever the workload: one leader per term, and every
//! numbered client request applied at one log index. Each checker returns a [`Verdict`]; a failed
//! one says exactly which records broke it. Each workload's own checkers live in its folder
//! ([`crate::leases::checkers`], [`crate::ct::checkers`], [`crate::sessions::checkers`],
//! [`crate::pipelines::checkers`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::judge::Verdict;
use crate::observe::{Role, Sample};

/// **Single master**: no term has two leaders.
pub fn single_master(samples: &[Sample]) -> Verdict {
    let mut leaders: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for sample in samples.iter().filter(|sample| sample.role == Role::Leader) {
        let nodes = leaders.entry(sample.term).or_default();
        if !nodes.iter().any(|(node, _)| *node == sample.node) {
            nodes.push((sample.node, sample.at_ms));
        }
    }
    let doubled: Vec<String> = leaders
        .iter()
        .filter(|(_, nodes)| nodes.len() > 1)
        .map(|(term, nodes)| {
            let who: Vec<String> = nodes
                .iter()
                .map(|(node, at)| format!("n{node} at {at} ms"))
                .collect();
            format!("term {term}: {}", who.join(", "))
        })
        .collect();
    if doubled.is_empty() {
        Verdict::pass(
            "single-master",
            format!("{} terms had a leader, each exactly one", leaders.len()),
        )
    } else {
        Verdict::fail(
            "single-master",
            format!("two leaders in one term: {}", doubled.join("; ")),
        )
    }
}

/// A client request a node's state machine applied for the first time (a copy answered from the
/// client's session is not counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AppliedRequest {
    /// The node.
    pub node: u64,
    /// The client session.
    pub client: u64,
    /// The request's number in it.
    pub sequence: u64,
    /// The log index of the entry that carried it.
    pub index: u64,
}

/// **Applied once** (the Raft dissertation, §6.3): every numbered client request takes effect
/// at one log index. A node replays the entries after its snapshot when it restarts, so it may
/// apply the same entry again — at the same index; a request applied at two indexes (on one node
/// or between nodes) was applied twice.
pub fn applied_once(applied: &[AppliedRequest]) -> Verdict {
    let mut indexes: BTreeMap<(u64, u64), BTreeSet<u64>> = BTreeMap::new();
    for request in applied {
        indexes
            .entry((request.client, request.sequence))
            .or_default()
            .insert(request.index);
    }
    let twice: Vec<String> = indexes
        .iter()
        .filter(|(_, at)| at.len() > 1)
        .take(5)
        .map(|((client, sequence), at)| {
            format!("client {client} request {sequence} applied at indexes {at:?}")
        })
        .collect();
    if twice.is_empty() {
        Verdict::pass(
            "applied-once",
            format!(
                "{} numbered requests, each applied at one log index ({} applications counted \
                 on all nodes)",
                indexes.len(),
                applied.len()
            ),
        )
    } else {
        Verdict::fail("applied-once", twice.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::{AppliedRequest, applied_once, single_master};
    use crate::observe::{Role, Sample};

    fn sample(at_ms: u64, node: u64, role: Role, term: u64) -> Sample {
        Sample {
            at_ms,
            node,
            role,
            term,
            committed: 0,
            applied: 0,
        }
    }

    #[test]
    fn two_leaders_in_one_term_fail_and_successive_terms_pass() {
        let fine = [
            sample(0, 1, Role::Leader, 1),
            sample(10, 2, Role::Leader, 2),
            sample(20, 1, Role::Follower, 2),
        ];
        assert!(single_master(&fine).passed);
        let doubled = [sample(0, 1, Role::Leader, 3), sample(5, 2, Role::Leader, 3)];
        let verdict = single_master(&doubled);
        assert!(!verdict.passed);
        assert!(verdict.detail.contains("term 3"), "{}", verdict.detail);
    }

    #[test]
    fn a_request_applied_at_two_log_indexes_fails_and_replays_of_one_index_pass() {
        let applied = |node, sequence, index| AppliedRequest {
            node,
            client: 7,
            sequence,
            index,
        };
        // Node 1 applied request 1 at index 10, crashed and replayed the same entry; node 2
        // applied it at the same index.
        let fine = [
            applied(1, 1, 10),
            applied(1, 1, 10),
            applied(2, 1, 10),
            applied(1, 2, 12),
        ];
        assert!(applied_once(&fine).passed);
        let twice = [applied(1, 1, 10), applied(1, 1, 14)];
        let verdict = applied_once(&twice);
        assert!(!verdict.passed);
        assert!(
            verdict.detail.contains("client 7 request 1"),
            "{}",
            verdict.detail
        );
        // Two nodes that disagree on where a request was applied.
        let split = [applied(1, 1, 10), applied(2, 1, 11)];
        assert!(!applied_once(&split).passed);
    }
}
