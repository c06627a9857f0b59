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

/// **Voters restored**: every node the membership faults removed from the voters was made a
/// voter again once its fault ended (`unrestored` lists those the harness could not), and every
/// node that caught up by the end (`final_voters`: its id and the voters it knows) counts all
/// `nodes` as voters: a membership change that lost a member, or left one a learner, fails.
pub fn voters_restored(
    nodes: u64,
    unrestored: &[String],
    final_voters: &[(u64, BTreeSet<u64>)],
) -> Verdict {
    let everyone: BTreeSet<u64> = (1..=nodes).collect();
    let mut problems: Vec<String> = unrestored.to_vec();
    problems.extend(
        final_voters
            .iter()
            .filter(|(_, voters)| *voters != everyone)
            .map(|(node, voters)| format!("n{node} ends with voters {voters:?}, not {everyone:?}")),
    );
    if problems.is_empty() {
        Verdict::pass(
            "voters-restored",
            format!(
                "all {nodes} nodes vote at the end, as the {} nodes that caught up agree",
                final_voters.len()
            ),
        )
    } else {
        Verdict::fail("voters-restored", problems.join("; "))
    }
}

/// A node's readiness judged as a cut that left it alone ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutOffReadiness {
    /// The node.
    pub node: u64,
    /// When the cut began and ended (simulated ms since the run began).
    pub from_ms: u64,
    /// When it ended.
    pub until_ms: u64,
    /// Whether the node said it was ready then.
    pub ready: bool,
}

/// **Readiness** (what `/health/ready` and gRPC health answer, for probes and load balancers):
/// a node cut off alone long enough to notice says it is not ready (`cut_off`: each judged as
/// its cut ended), and every member that caught up at the end of the run, with no fault left on
/// it, says it is ready (`unready_at_end`: each that did not, and why).
pub fn readiness(cut_off: &[CutOffReadiness], unready_at_end: &[(u64, String)]) -> Verdict {
    let mut problems: Vec<String> = cut_off
        .iter()
        .filter(|judged| judged.ready)
        .map(|judged| {
            format!(
                "n{} said it was ready at {} ms, alone since {} ms",
                judged.node, judged.until_ms, judged.from_ms
            )
        })
        .collect();
    problems.extend(
        unready_at_end
            .iter()
            .map(|(node, why)| format!("n{node} not ready at the end, caught up: {why}")),
    );
    if problems.is_empty() {
        Verdict::pass(
            "readiness",
            format!(
                "{} nodes cut off alone said not ready; every member caught up at the end said \
                 ready",
                cut_off.len()
            ),
        )
    } else {
        Verdict::fail("readiness", problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::CutOffReadiness;
    use super::{AppliedRequest, applied_once, readiness, single_master, voters_restored};
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

    #[test]
    fn a_member_left_a_learner_or_a_removal_not_undone_fails_voters_restored() {
        let all: BTreeSet<u64> = [1, 2, 3].into();
        let fine = [(1, all.clone()), (2, all.clone())];
        assert!(voters_restored(3, &[], &fine).passed);
        let learner = [(1, all.clone()), (3, [1, 3].into())];
        let verdict = voters_restored(3, &[], &learner);
        assert!(!verdict.passed);
        assert!(
            verdict.detail.contains("n3 ends with voters"),
            "{}",
            verdict.detail
        );
        let not_undone = ["n2 was not a voter again 15 s after its removal ended".to_owned()];
        let verdict = voters_restored(3, &not_undone, &fine);
        assert!(!verdict.passed);
        assert!(verdict.detail.contains("n2 was not"), "{}", verdict.detail);
    }

    #[test]
    fn a_node_alone_that_says_ready_or_a_caught_up_member_that_does_not_fails_readiness() {
        let judged = |node, ready| CutOffReadiness {
            node,
            from_ms: 4_000,
            until_ms: 9_000,
            ready,
        };
        assert!(readiness(&[judged(1, false), judged(2, false)], &[]).passed);
        let verdict = readiness(&[judged(1, false), judged(3, true)], &[]);
        assert!(!verdict.passed);
        assert!(
            verdict.detail.contains("n3 said it was ready at 9000 ms"),
            "{}",
            verdict.detail
        );
        let verdict = readiness(&[], &[(2, "no leader is known".to_owned())]);
        assert!(!verdict.passed);
        assert!(
            verdict.detail.contains("n2 not ready at the end"),
            "{}",
            verdict.detail
        );
    }
}
