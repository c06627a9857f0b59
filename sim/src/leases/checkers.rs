//! The invariants of the lease workload, over the client history: exclusive holding, no stale
//! token, durability of acknowledged grants, liveness after healing, and linearizability of the
//! whole history against the lease model. Each checker returns a [`Verdict`]; a failed one says
//! exactly which records broke it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::judge::Verdict;
use crate::leases::history::{Call, History, Hold, IndexedRead, Operation, Outcome};
use crate::leases::model::{LeaseModel, check_history};
use crate::linearizability::Verdict as Linearity;

/// **Exclusive holding**: no two clients hold one lease (under different grants) at the same
/// global time for longer than `skew_bound_ms`. The cluster's clock is its leaders' wall clocks,
/// which may differ by the skew bound, so a new grant may begin up to that much before the old
/// holder's own reckoning of its end.
pub fn exclusive_holding(history: &History, skew_bound_ms: u64) -> Verdict {
    // The clients number their writes in one client session each, so an unanswered call can
    // take effect only before the cluster applies the same client's next request: never after a
    // later grant of that client was answered. What can still cut a hold short is an unanswered
    // call the holder made during it — a release, or a renewal (an acquire by the holder renews)
    // to a time before the hold's end, unless an answered renewal came after it. The workload
    // already ends its holds at such calls, so none should need excusing; a hold that does is
    // left out rather than judged.
    let mut cutting: BTreeMap<(u32, &str), Vec<(u64, u64)>> = BTreeMap::new();
    for operation in &history.operations {
        if !matches!(operation.outcome, Outcome::Unknown { .. }) {
            continue;
        }
        let ends_by_ms = match &operation.call {
            Call::Release { .. } => operation.invoked_ms,
            Call::Acquire { ttl_ms, .. } | Call::Renew { ttl_ms, .. } => {
                operation.invoked_ms + ttl_ms
            }
            Call::CheckFence { .. } => continue,
        };
        cutting
            .entry((operation.client, operation.lease.as_str()))
            .or_default()
            .push((operation.invoked_ms, ends_by_ms));
    }
    // An answered renewal (or acquire) by the holder after such a call takes effect after it
    // (the call can apply only before the client's next request), so its new expiry stands.
    let mut renewed: BTreeMap<(u32, &str), Vec<u64>> = BTreeMap::new();
    for operation in &history.operations {
        if matches!(
            operation.outcome,
            Outcome::Renewed { .. } | Outcome::Acquired { .. }
        ) {
            renewed
                .entry((operation.client, operation.lease.as_str()))
                .or_default()
                .push(operation.invoked_ms);
        }
    }
    let excused = |hold: &Hold| {
        let key = (hold.client, hold.lease.as_str());
        let renewed_after = |invoked_ms: u64| {
            renewed.get(&key).is_some_and(|renewals| {
                renewals
                    .iter()
                    .any(|at_ms| invoked_ms < *at_ms && *at_ms < hold.until_ms)
            })
        };
        cutting.get(&key).is_some_and(|calls| {
            calls.iter().any(|(invoked_ms, ends_by_ms)| {
                hold.from_ms <= *invoked_ms
                    && *invoked_ms < hold.until_ms
                    && *ends_by_ms < hold.until_ms
                    && !renewed_after(*invoked_ms)
            })
        })
    };
    let mut skipped = 0;
    let mut by_lease: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in &history.holds {
        if excused(hold) {
            skipped += 1;
            continue;
        }
        by_lease.entry(hold.lease.as_str()).or_default().push(hold);
    }
    let mut worst: Option<String> = None;
    let mut worst_overlap = 0;
    let mut pairs = 0;
    for (lease, holds) in &by_lease {
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                if a.token == b.token {
                    continue;
                }
                pairs += 1;
                let overlap = a
                    .until_ms
                    .min(b.until_ms)
                    .saturating_sub(a.from_ms.max(b.from_ms));
                if overlap > skew_bound_ms && overlap > worst_overlap {
                    worst_overlap = overlap;
                    worst = Some(format!(
                        "{lease}: client {} (token {}, {}..{} ms) and client {} (token {}, {}..{} ms) \
                         overlap {overlap} ms > bound {skew_bound_ms} ms",
                        a.client,
                        a.token,
                        a.from_ms,
                        a.until_ms,
                        b.client,
                        b.token,
                        b.from_ms,
                        b.until_ms
                    ));
                }
            }
        }
    }
    match worst {
        None => Verdict::pass(
            "exclusive-holding",
            format!(
                "{} holds ({skipped} left out: an unanswered call the holder made during them may \
                 have ended them), {pairs} pairs of one lease, none overlapping beyond \
                 {skew_bound_ms} ms",
                history.holds.len()
            ),
        ),
        Some(detail) => Verdict::fail("exclusive-holding", detail),
    }
}

/// **No stale token**: the resource never accepts a token after a newer grant of its lease was
/// acknowledged, or after it accepted a newer token, before its check began.
pub fn no_stale_token(history: &History) -> Verdict {
    // Per lease: (acknowledged at, token) of every grant, by acknowledgement time.
    let mut grants: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for operation in &history.operations {
        if let Outcome::Acquired { lease, .. } = &operation.outcome {
            grants
                .entry(operation.lease.as_str())
                .or_default()
                .push((operation.completed_ms, lease.token));
        }
    }
    let mut accepted: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for write in &history.resource_writes {
        accepted
            .entry(write.lease.as_str())
            .or_default()
            .push((write.accepted_ms, write.token));
    }
    for write in &history.resource_writes {
        let newer_grant = grants.get(write.lease.as_str()).and_then(|grants| {
            grants
                .iter()
                .find(|(acked_ms, token)| *acked_ms < write.checked_from_ms && *token > write.token)
        });
        if let Some((acked_ms, token)) = newer_grant {
            return Verdict::fail(
                "no-stale-token",
                format!(
                    "{}: the resource accepted token {} from client {} (checked from {} ms) \
                     although token {token} had been granted at {acked_ms} ms",
                    write.lease, write.token, write.client, write.checked_from_ms
                ),
            );
        }
        let newer_write = accepted.get(write.lease.as_str()).and_then(|writes| {
            writes
                .iter()
                .find(|(at_ms, token)| *at_ms < write.checked_from_ms && *token > write.token)
        });
        if let Some((at_ms, token)) = newer_write {
            return Verdict::fail(
                "no-stale-token",
                format!(
                    "{}: the resource accepted token {} from client {} (checked from {} ms) \
                     after it had accepted token {token} at {at_ms} ms",
                    write.lease, write.token, write.client, write.checked_from_ms
                ),
            );
        }
    }
    Verdict::pass(
        "no-stale-token",
        format!(
            "{} resource writes, none with a superseded token",
            history.resource_writes.len()
        ),
    )
}

/// **Reads never go back**: a fence check that began after another was answered was read at
/// the same log index or a later one, whichever nodes served them and whatever their leases.
/// This sees a stale read that the lease model cannot, one that misses an entry touching
/// another lease, or a lease no later read looks at.
pub fn reads_never_go_back(history: &History) -> Verdict {
    let mut by_completion: Vec<&IndexedRead> = history.reads.iter().collect();
    by_completion.sort_by_key(|read| (read.completed_ms, read.index));
    let mut by_invocation: Vec<&IndexedRead> = history.reads.iter().collect();
    by_invocation.sort_by_key(|read| read.invoked_ms);
    // The highest index among the reads answered so far, and that read.
    let mut highest: Option<&IndexedRead> = None;
    let mut answered = by_completion.iter().peekable();
    for later in by_invocation {
        // Only reads answered strictly before this one began: the history's clock is in whole
        // milliseconds, so two calls within one may overlap.
        while let Some(earlier) = answered.next_if(|read| read.completed_ms < later.invoked_ms) {
            if highest.is_none_or(|highest| earlier.index > highest.index) {
                highest = Some(earlier);
            }
        }
        if let Some(earlier) = highest.filter(|earlier| earlier.index > later.index) {
            return Verdict::fail(
                "reads-never-go-back",
                format!(
                    "client {} read at index {} (sent at {} ms) after client {} had read at \
                     index {} (answered at {} ms)",
                    later.client,
                    later.index,
                    later.invoked_ms,
                    earlier.client,
                    earlier.index,
                    earlier.completed_ms
                ),
            );
        }
    }
    Verdict::pass(
        "reads-never-go-back",
        format!(
            "{} reads with their log index, none behind one answered before it began",
            history.reads.len()
        ),
    )
}

/// A grant acknowledged to a client that must still be in force at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalGrant {
    /// The lease.
    pub lease: String,
    /// Its holder.
    pub holder: String,
    /// Its token.
    pub token: u64,
    /// Its expiry on the cluster clock.
    pub expires_at_ms: u64,
}

/// **Durability**: every grant acknowledged and neither released nor expired is in the final
/// state of every node that caught up. `finals` maps each caught-up node to the leases it holds
/// as (lease → (holder, token)); `cluster_now_ms` is the cluster clock at the end.
pub fn durability(
    acknowledged: &[FinalGrant],
    finals: &BTreeMap<u64, BTreeMap<String, (String, u64)>>,
    cluster_now_ms: u64,
    nodes: u64,
) -> Verdict {
    let quorum = nodes / 2 + 1;
    if (finals.len() as u64) < quorum {
        return Verdict::fail(
            "durability",
            format!(
                "only {} of {nodes} nodes caught up at the end; a majority must",
                finals.len()
            ),
        );
    }
    let live: Vec<&FinalGrant> = acknowledged
        .iter()
        .filter(|grant| grant.expires_at_ms > cluster_now_ms)
        .collect();
    for (node, leases) in finals {
        for grant in &live {
            match leases.get(&grant.lease) {
                Some((holder, token)) if *holder == grant.holder && *token == grant.token => {}
                other => {
                    return Verdict::fail(
                        "durability",
                        format!(
                            "node {node} lost the acknowledged grant of {} to {} (token {}, until \
                             {} ms): it has {other:?}",
                            grant.lease, grant.holder, grant.token, grant.expires_at_ms
                        ),
                    );
                }
            }
        }
    }
    Verdict::pass(
        "durability",
        format!(
            "{} acknowledged live grants present on {} caught-up nodes",
            live.len(),
            finals.len()
        ),
    )
}

/// **Liveness**: within `bound_ms` after the faults healed at `heal_ms`, an acquire through the
/// client library succeeded (`granted_at_ms`: when the probe got its grant, if it did).
pub fn liveness(granted_at_ms: Option<u64>, heal_ms: u64, bound_ms: u64) -> Verdict {
    const NAME: &str = "liveness";
    match granted_at_ms {
        Some(at_ms) => Verdict::pass(
            NAME,
            format!(
                "a grant {} ms after the faults healed (bound {bound_ms} ms)",
                at_ms - heal_ms
            ),
        ),
        None => Verdict::fail(
            NAME,
            format!("no grant within {bound_ms} ms after the faults healed"),
        ),
    }
}

/// Per lease, the newest acknowledged grant or renewal that no later release could have undone:
/// what [`durability`] looks for in the final states.
pub fn final_grants(history: &History) -> Vec<FinalGrant> {
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

/// **Linearizability**: the lease history of every lease has a linearization consistent with
/// the lease model (searched visiting at most `budget` states per lease; a lease whose search
/// runs out passes as "not proven"). Also returns, per lease no linearization explains, the
/// window of operations that none does.
pub fn linearizability(
    history: &History,
    model: &LeaseModel,
    budget: usize,
) -> (Verdict, BTreeMap<String, Vec<Operation>>) {
    const NAME: &str = "linearizability";
    let verdicts = check_history(history, model, budget);
    let mut windows = BTreeMap::new();
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
    let verdict = if !failed.is_empty() {
        Verdict::fail(
            NAME,
            format!(
                "no linearization of the lease history of {} explains what clients saw",
                failed.join(", ")
            ),
        )
    } else if undecided.is_empty() {
        Verdict::pass(
            NAME,
            format!(
                "{operations} operations on {} leases linearizable",
                verdicts.len()
            ),
        )
    } else {
        Verdict::pass(
            NAME,
            format!(
                "{operations} operations; search budget exhausted (not proven) on {}",
                undecided.join(", ")
            ),
        )
    };
    (verdict, windows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{FinalGrant, durability, exclusive_holding, no_stale_token, reads_never_go_back};
    use crate::leases::history::{
        Call, History, Hold, How, IndexedRead, LeaseSeen, Operation, Outcome, ResourceWrite,
    };

    fn hold(client: u32, token: u64, from_ms: u64, until_ms: u64) -> Hold {
        Hold {
            client,
            lease: "l".to_owned(),
            token,
            from_ms,
            until_ms,
        }
    }

    #[test]
    fn holds_may_overlap_by_the_skew_bound_and_no_more() {
        let history = History {
            holds: vec![hold(0, 5, 0, 1_000), hold(1, 9, 900, 2_000)],
            ..History::default()
        };
        assert!(exclusive_holding(&history, 100).passed);
        assert!(!exclusive_holding(&history, 99).passed);
    }

    #[test]
    fn only_an_unanswered_call_the_holder_made_during_its_hold_excuses_it() {
        let release = |client: u32, invoked_ms: u64| Operation {
            id: 0,
            client,
            lease: "l".to_owned(),
            call: Call::Release {
                holder: format!("c{client}"),
            },
            invoked_ms,
            completed_ms: invoked_ms + 1_500,
            outcome: Outcome::Unknown {
                error: "no answer".to_owned(),
            },
        };
        let overlapping = vec![hold(0, 5, 20_000, 23_000), hold(1, 9, 20_500, 24_000)];
        // Client 0's release during its hold may have ended it: the hold is not counted.
        let history = History {
            holds: overlapping.clone(),
            operations: vec![release(0, 20_400)],
            ..History::default()
        };
        assert!(exclusive_holding(&history, 100).passed);
        // A release before the hold cannot land after the grant the client made next (client
        // sessions refuse it), nor can another client's release excuse the overlap.
        for operations in [vec![release(0, 19_500)], vec![release(2, 20_400)]] {
            let history = History {
                holds: overlapping.clone(),
                operations,
                ..History::default()
            };
            assert!(!exclusive_holding(&history, 100).passed);
        }
    }

    fn granted(client: u32, token: u64, invoked_ms: u64, completed_ms: u64) -> Operation {
        Operation {
            id: 0,
            client,
            lease: "l".to_owned(),
            call: Call::Acquire {
                holder: format!("c{client}"),
                ttl_ms: 1_000,
            },
            invoked_ms,
            completed_ms,
            outcome: Outcome::Acquired {
                lease: LeaseSeen {
                    holder: format!("c{client}"),
                    token,
                    granted_at_ms: 0,
                    renewed_at_ms: 0,
                    expires_at_ms: 1_000,
                },
                how: How::Created,
            },
        }
    }

    #[test]
    fn a_read_behind_one_answered_before_it_began_fails() {
        let read = |client: u32, invoked_ms: u64, completed_ms: u64, index: u64| IndexedRead {
            client,
            invoked_ms,
            completed_ms,
            index,
        };
        let history = |reads: Vec<IndexedRead>| History {
            reads,
            ..History::default()
        };
        // In real-time order, and rising.
        let rising = history(vec![
            read(0, 10, 20, 7),
            read(1, 21, 30, 7),
            read(2, 31, 40, 9),
        ]);
        assert!(reads_never_go_back(&rising).passed);
        // Overlapping reads may be served in either order; so may two within one millisecond.
        let overlapping = history(vec![
            read(0, 10, 20, 9),
            read(1, 15, 30, 8),
            read(2, 20, 25, 8),
        ]);
        assert!(reads_never_go_back(&overlapping).passed);
        // One behind a read answered before it began, even an earlier and lower one between.
        let behind = history(vec![
            read(0, 10, 20, 9),
            read(1, 21, 22, 8),
            read(2, 23, 30, 9),
        ]);
        let verdict = reads_never_go_back(&behind);
        assert!(!verdict.passed);
        assert!(
            verdict.detail.contains("client 1 read at index 8"),
            "{}",
            verdict.detail
        );
        let behind_an_older = history(vec![
            read(0, 1, 2, 9),
            read(1, 3, 4, 10),
            read(2, 50, 60, 9),
        ]);
        assert!(!reads_never_go_back(&behind_an_older).passed);
    }

    fn write(client: u32, token: u64, checked_from_ms: u64) -> ResourceWrite {
        ResourceWrite {
            client,
            lease: "l".to_owned(),
            token,
            checked_from_ms,
            accepted_ms: checked_from_ms + 5,
        }
    }

    #[test]
    fn a_token_superseded_before_the_check_is_stale() {
        let mut history = History {
            operations: vec![granted(0, 5, 0, 10), granted(1, 9, 100, 110)],
            resource_writes: vec![write(0, 5, 50)],
            holds: Vec::new(),
            reads: Vec::new(),
        };
        assert!(
            no_stale_token(&history).passed,
            "checked before the new grant"
        );
        history.resource_writes.push(write(0, 5, 120));
        assert!(
            !no_stale_token(&history).passed,
            "checked after the new grant"
        );
        let history = History {
            operations: Vec::new(),
            resource_writes: vec![write(1, 9, 10), write(0, 5, 20)],
            holds: Vec::new(),
            reads: Vec::new(),
        };
        assert!(
            !no_stale_token(&history).passed,
            "after a newer accepted write"
        );
    }

    #[test]
    fn a_live_acknowledged_grant_missing_on_a_node_fails() {
        let grant = FinalGrant {
            lease: "final".to_owned(),
            holder: "c0".to_owned(),
            token: 40,
            expires_at_ms: 10_000,
        };
        let mut finals = BTreeMap::new();
        let mut leases = BTreeMap::new();
        leases.insert("final".to_owned(), ("c0".to_owned(), 40));
        finals.insert(1, leases.clone());
        finals.insert(2, leases);
        assert!(durability(std::slice::from_ref(&grant), &finals, 5_000, 3).passed);
        assert!(
            durability(std::slice::from_ref(&grant), &finals, 10_000, 3).passed,
            "an expired grant need not be there"
        );
        finals.insert(3, BTreeMap::new());
        assert!(!durability(std::slice::from_ref(&grant), &finals, 5_000, 3).passed);
        finals.clear();
        assert!(
            !durability(&[grant], &finals, 5_000, 3).passed,
            "no quorum caught up"
        );
    }
}
