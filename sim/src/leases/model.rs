//! The sequential model of one lease, for the [`linearizability`] check of the clients' history,
//! and the per-lease check itself.
//!
//! Leases are independent, so each lease's operations are checked on their own (Porcupine's
//! partitioning), which keeps every search small.
//!
//! Time makes a lease model subtle: whether a lease is live depends on the cluster's machine time
//! at the moment the operation took effect, which a refusal or a fence check does not reveal. The
//! model bounds it: an operation took effect at a machine time within its call–return interval on
//! the global clock, widened by the skew bound on each side (every node's clock stays within it),
//! and never below the largest machine time a reply has already shown (machine time only moves
//! forward). The model rejects an answer only when it is impossible for every machine time in that
//! window, so a correct cluster never fails the check, while a lost grant, a second holder of a
//! live lease, a stale fence check, a changed token or a backwards clock do.

use std::collections::BTreeMap;

use super::history::{Call, History, How, LeaseSeen, Operation, Outcome};
use crate::linearizability::{self, Entry, Model, Verdict};

/// The lease model, with the clock facts it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseModel {
    /// The cluster clock (ms since the Unix epoch) at global time 0 of the run.
    pub epoch_ms: u64,
    /// How far any node's clock may be from the global clock.
    pub skew_ms: u64,
}

/// The lease as the model knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Held {
    /// Its holder.
    pub holder: String,
    /// Its token, unless it was granted by a call whose answer was lost.
    pub token: Option<u64>,
    /// Its expiry (cluster clock), unless set by a call whose answer was lost.
    pub expires_at_ms: Option<u64>,
}

/// The model's state of one lease.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaseState {
    /// The largest machine time any reply has shown.
    pub now_ms: u64,
    /// The largest token any reply has shown.
    pub max_token: u64,
    /// The grant in force, if any (it may have expired: expiry alone does not remove it).
    pub lease: Option<Held>,
}

/// One call, with its interval on the global clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInput {
    /// What was asked.
    pub call: Call,
    /// When it was sent (global ms since the run began).
    pub call_ms: u64,
    /// When the answer came, if it did.
    pub return_ms: Option<u64>,
}

impl LeaseModel {
    /// The machine times at which `input` may have taken effect in `state`.
    fn window(&self, state: &LeaseState, input: &LeaseInput) -> (u64, u64) {
        let low = (self.epoch_ms + input.call_ms)
            .saturating_sub(self.skew_ms)
            .max(state.now_ms);
        let high = input
            .return_ms
            .map_or(u64::MAX, |at| self.epoch_ms + at + self.skew_ms);
        (low, high)
    }

    /// Whether the revealed machine time `at` fits the window (and so the clock moved forward).
    fn fits(&self, state: &LeaseState, input: &LeaseInput, at: u64) -> bool {
        let (low, high) = self.window(state, input);
        at >= low && at <= high
    }
}

/// Whether the lease may be live at some time in `low..=high`.
fn maybe_live(held: &Held, low: u64) -> bool {
    held.expires_at_ms.is_none_or(|expires| expires > low)
}

/// Whether the lease may have expired at some time in `low..=high`.
fn maybe_expired(held: &Held, high: u64) -> bool {
    held.expires_at_ms.is_none_or(|expires| expires <= high)
}

/// Whether `token` can be the token of `held` (an unknown one can be any new token).
fn token_matches(held: &Held, token: u64, max_token: u64) -> bool {
    match held.token {
        Some(known) => known == token,
        None => token > max_token,
    }
}

impl LeaseModel {
    fn acquire(
        &self,
        state: &LeaseState,
        input: &LeaseInput,
        holder: &str,
        outcome: &Outcome,
    ) -> Vec<LeaseState> {
        let (low, high) = self.window(state, input);
        match outcome {
            Outcome::Acquired { lease, how } => {
                if lease.holder != holder || !self.fits(state, input, lease.renewed_at_ms) {
                    return Vec::new();
                }
                let at = lease.renewed_at_ms;
                let allowed = match (how, &state.lease) {
                    (How::Created, None) => lease.token > state.max_token,
                    (How::Created, Some(held)) => {
                        // Expired and reclaimed by a tick in between.
                        lease.token > state.max_token
                            && held.expires_at_ms.is_none_or(|expires| expires <= at)
                    }
                    (How::TookOverExpired { previous_holder }, Some(held)) => {
                        held.holder == *previous_holder
                            && held.expires_at_ms.is_none_or(|expires| expires <= at)
                            && lease.token > state.max_token
                    }
                    (How::TookOverExpired { .. }, None) => false,
                    (How::Renewed, Some(held)) => {
                        held.holder == holder
                            && held.expires_at_ms.is_none_or(|expires| expires > at)
                            && token_matches(held, lease.token, state.max_token)
                    }
                    (How::Renewed, None) => false,
                };
                if allowed {
                    vec![granted(state, lease)]
                } else {
                    Vec::new()
                }
            }
            Outcome::Refused { reason } => match reason.as_str() {
                "not-holder" => match &state.lease {
                    Some(held) if held.holder != holder && maybe_live(held, low) => {
                        vec![state.clone()]
                    }
                    _ => Vec::new(),
                },
                "expired" | "unknown-lease" | "fence-rejected" => Vec::new(),
                _ => vec![state.clone()],
            },
            Outcome::Unknown { .. } => {
                let mut next = vec![state.clone()];
                match &state.lease {
                    Some(held) if held.holder == holder && maybe_live(held, low) => {
                        // Renewed: same token, unknown expiry.
                        next.push(LeaseState {
                            lease: Some(Held {
                                expires_at_ms: None,
                                ..held.clone()
                            }),
                            ..state.clone()
                        });
                        if maybe_expired(held, high) {
                            next.push(fresh_grant(state, holder));
                        }
                    }
                    Some(held) if !maybe_expired(held, high) => {}
                    _ => next.push(fresh_grant(state, holder)),
                }
                next
            }
            _ => Vec::new(),
        }
    }

    fn renew(
        &self,
        state: &LeaseState,
        input: &LeaseInput,
        holder: &str,
        outcome: &Outcome,
    ) -> Vec<LeaseState> {
        let (low, high) = self.window(state, input);
        match outcome {
            Outcome::Renewed { lease } => match &state.lease {
                Some(held)
                    if held.holder == holder
                        && lease.holder == holder
                        && self.fits(state, input, lease.renewed_at_ms)
                        && held
                            .expires_at_ms
                            .is_none_or(|expires| expires > lease.renewed_at_ms)
                        && token_matches(held, lease.token, state.max_token) =>
                {
                    vec![granted(state, lease)]
                }
                _ => Vec::new(),
            },
            Outcome::Refused { reason } => {
                self.refused_for_holder(state, holder, reason, low, high)
            }
            Outcome::Unknown { .. } => {
                let mut next = vec![state.clone()];
                if let Some(held) = &state.lease
                    && held.holder == holder
                    && maybe_live(held, low)
                {
                    next.push(LeaseState {
                        lease: Some(Held {
                            expires_at_ms: None,
                            ..held.clone()
                        }),
                        ..state.clone()
                    });
                }
                next
            }
            _ => Vec::new(),
        }
    }

    fn release(
        &self,
        state: &LeaseState,
        input: &LeaseInput,
        holder: &str,
        outcome: &Outcome,
    ) -> Vec<LeaseState> {
        let (low, high) = self.window(state, input);
        match outcome {
            Outcome::Released { lease } => match &state.lease {
                Some(held)
                    if held.holder == holder
                        && lease.holder == holder
                        && maybe_live(held, low)
                        && token_matches(held, lease.token, state.max_token) =>
                {
                    vec![LeaseState {
                        now_ms: state.now_ms,
                        max_token: state.max_token.max(lease.token),
                        lease: None,
                    }]
                }
                _ => Vec::new(),
            },
            Outcome::Refused { reason } => {
                self.refused_for_holder(state, holder, reason, low, high)
            }
            Outcome::Unknown { .. } => {
                let mut next = vec![state.clone()];
                if let Some(held) = &state.lease
                    && held.holder == holder
                    && maybe_live(held, low)
                {
                    next.push(LeaseState {
                        lease: None,
                        ..state.clone()
                    });
                }
                next
            }
            _ => Vec::new(),
        }
    }

    /// A renew or release refused: who holds the lease must explain the reason.
    fn refused_for_holder(
        &self,
        state: &LeaseState,
        holder: &str,
        reason: &str,
        low: u64,
        high: u64,
    ) -> Vec<LeaseState> {
        match reason {
            "not-holder" => match &state.lease {
                Some(held) if held.holder != holder => vec![state.clone()],
                _ => Vec::new(),
            },
            "expired" => match &state.lease {
                Some(held) if held.holder == holder && maybe_expired(held, high) => {
                    vec![state.clone()]
                }
                _ => Vec::new(),
            },
            "unknown-lease" => match &state.lease {
                None => vec![state.clone()],
                // Reclaimed by a tick after it expired.
                Some(held) if maybe_expired(held, high) => vec![LeaseState {
                    lease: None,
                    ..state.clone()
                }],
                Some(_) => Vec::new(),
            },
            "fence-rejected" => Vec::new(),
            // Refusals that say nothing about the lease (invalid TTL, a full table).
            _ => {
                let _ = low;
                vec![state.clone()]
            }
        }
    }

    fn check_fence(
        &self,
        state: &LeaseState,
        input: &LeaseInput,
        token: u64,
        outcome: &Outcome,
    ) -> Vec<LeaseState> {
        let (low, high) = self.window(state, input);
        match outcome {
            Outcome::Fence {
                valid: true,
                current_token,
            } => match &state.lease {
                Some(held)
                    if *current_token == token
                        && maybe_live(held, low)
                        && token_matches(held, token, state.max_token) =>
                {
                    vec![pin_token(state, held, token)]
                }
                _ => Vec::new(),
            },
            Outcome::Fence {
                valid: false,
                current_token: 0,
            } => match &state.lease {
                None => vec![state.clone()],
                Some(held) if maybe_expired(held, high) => vec![state.clone()],
                Some(_) => Vec::new(),
            },
            Outcome::Fence {
                valid: false,
                current_token,
            } => match &state.lease {
                Some(held)
                    if *current_token != token
                        && maybe_live(held, low)
                        && token_matches(held, *current_token, state.max_token) =>
                {
                    vec![pin_token(state, held, *current_token)]
                }
                _ => Vec::new(),
            },
            // A read changes nothing, whatever became of it.
            Outcome::Refused { .. } | Outcome::Unknown { .. } => vec![state.clone()],
            _ => Vec::new(),
        }
    }
}

/// The state after a reply showed `lease` granted or renewed.
fn granted(state: &LeaseState, lease: &LeaseSeen) -> LeaseState {
    LeaseState {
        now_ms: state.now_ms.max(lease.renewed_at_ms),
        max_token: state.max_token.max(lease.token),
        lease: Some(Held {
            holder: lease.holder.clone(),
            token: Some(lease.token),
            expires_at_ms: Some(lease.expires_at_ms),
        }),
    }
}

/// The state after a grant whose answer was lost.
fn fresh_grant(state: &LeaseState, holder: &str) -> LeaseState {
    LeaseState {
        lease: Some(Held {
            holder: holder.to_owned(),
            token: None,
            expires_at_ms: None,
        }),
        ..state.clone()
    }
}

/// The state once a reply has shown the token of `held`.
fn pin_token(state: &LeaseState, held: &Held, token: u64) -> LeaseState {
    LeaseState {
        now_ms: state.now_ms,
        max_token: state.max_token.max(token),
        lease: Some(Held {
            token: Some(token),
            ..held.clone()
        }),
    }
}

impl Model for LeaseModel {
    type State = LeaseState;
    type Input = LeaseInput;
    type Output = Outcome;

    fn init(&self) -> LeaseState {
        LeaseState::default()
    }

    fn step(&self, state: &LeaseState, input: &LeaseInput, output: &Outcome) -> Vec<LeaseState> {
        match &input.call {
            Call::Acquire { holder, .. } => self.acquire(state, input, holder, output),
            Call::Renew { holder, .. } => self.renew(state, input, holder, output),
            Call::Release { holder } => self.release(state, input, holder, output),
            Call::CheckFence { token } => self.check_fence(state, input, *token, output),
        }
    }
}

/// The check of one lease's operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseVerdict {
    /// The lease.
    pub lease: String,
    /// What the search concluded.
    pub verdict: Verdict,
    /// For a failure: the operations at the frontier where the search got stuck, and the last
    /// ones it could linearize before them, in invocation order.
    pub window: Vec<Operation>,
}

/// How many linearized operations before the frontier a failure report shows.
const CONTEXT_OPERATIONS: usize = 12;

/// Whether an operation can tell the search anything: a fence check that got no answer, and a
/// refusal that says nothing about the lease (a timeout the node reported, an invalid argument)
/// and a call that never reached a node or was not proposed ([`Outcome::NotSent`]), fit every
/// state and change none, so they only slow the search down.
fn constrains(operation: &Operation) -> bool {
    match (&operation.call, &operation.outcome) {
        (Call::CheckFence { .. }, Outcome::Unknown { .. }) | (_, Outcome::NotSent { .. }) => false,
        (_, Outcome::Refused { reason }) => matches!(
            reason.as_str(),
            "not-holder" | "expired" | "unknown-lease" | "fence-rejected"
        ),
        _ => true,
    }
}

/// Whether an answer shows the call was applied through the log: a grant, a renewal or a
/// release, or a refusal the state machine decided.
fn applied(operation: &Operation) -> bool {
    let write = matches!(
        operation.call,
        Call::Acquire { .. } | Call::Renew { .. } | Call::Release { .. }
    );
    let decided = match &operation.outcome {
        Outcome::Acquired { .. } | Outcome::Renewed { .. } | Outcome::Released { .. } => true,
        Outcome::Refused { reason } => {
            matches!(reason.as_str(), "not-holder" | "expired" | "unknown-lease")
        }
        Outcome::Fence { .. } | Outcome::Unknown { .. } | Outcome::NotSent { .. } => false,
    };
    write && decided
}

/// For each write whose answer was lost: the latest time it can have taken effect, and the op
/// it cannot follow (which may concern another lease, and then only the time counts). The clients
/// number their writes in one client session each, and a write the client gave up on is refused
/// once a later write of the same client is applied (`certus_core::clients`): so it took effect,
/// if at all, before the answer of the client's next write that was applied. (A session expires
/// only after ten minutes unused, far longer than a run.)
fn effect_bounds(history: &History) -> BTreeMap<u64, (u64, u64)> {
    let mut by_client: BTreeMap<u32, Vec<&Operation>> = BTreeMap::new();
    for operation in &history.operations {
        by_client
            .entry(operation.client)
            .or_default()
            .push(operation);
    }
    let mut bounds = BTreeMap::new();
    for mut operations in by_client.into_values() {
        operations.sort_by_key(|operation| (operation.invoked_ms, operation.id));
        // The client's next applied write: its id, when it was sent and answered.
        let mut next_applied: Option<(u64, u64, u64)> = None;
        for operation in operations.iter().rev() {
            let write = !matches!(operation.call, Call::CheckFence { .. });
            // Only a write sent after the client gave up on this one (calls are sequential per
            // client) carries the acknowledgement that shuts this one out.
            if write
                && operation.outcome.is_unknown()
                && let Some((later, sent_ms, answered_ms)) = next_applied
                && sent_ms >= operation.completed_ms
            {
                bounds.insert(operation.id, (answered_ms, later));
            }
            if applied(operation) {
                next_applied = Some((operation.id, operation.invoked_ms, operation.completed_ms));
            }
        }
    }
    bounds
}

/// Checks every lease's operations in `history` against the model, each within `budget` steps.
pub fn check_history(history: &History, model: &LeaseModel, budget: usize) -> Vec<LeaseVerdict> {
    let bounds = effect_bounds(history);
    let mut by_lease: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in history.operations.iter().filter(|op| constrains(op)) {
        by_lease
            .entry(operation.lease.as_str())
            .or_default()
            .push(operation);
    }
    by_lease
        .into_iter()
        .map(|(lease, operations)| {
            let entries: Vec<Entry<LeaseInput, Outcome>> = operations
                .iter()
                .map(|operation| {
                    let return_ms =
                        (!operation.outcome.is_unknown()).then_some(operation.completed_ms);
                    Entry {
                        id: operation.id,
                        input: LeaseInput {
                            call: operation.call.clone(),
                            call_ms: operation.invoked_ms,
                            return_ms,
                        },
                        output: operation.outcome.clone(),
                        call_ms: operation.invoked_ms,
                        return_ms,
                        effect_by_ms: bounds.get(&operation.id).map(|&(by_ms, _)| by_ms),
                        settled_before: bounds.get(&operation.id).map(|&(_, later)| later),
                    }
                })
                .collect();
            let verdict = linearizability::check(model, &entries, budget);
            let window = match &verdict {
                Verdict::NotLinearizable { linearized, window } => {
                    let context =
                        &linearized[linearized.len().saturating_sub(CONTEXT_OPERATIONS)..];
                    let mut shown: Vec<Operation> = operations
                        .iter()
                        .filter(|operation| {
                            window.contains(&operation.id) || context.contains(&operation.id)
                        })
                        .map(|operation| (*operation).clone())
                        .collect();
                    shown.sort_by_key(|operation| (operation.invoked_ms, operation.id));
                    shown
                }
                _ => Vec::new(),
            };
            LeaseVerdict {
                lease: lease.to_owned(),
                verdict,
                window,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{LeaseModel, check_history};
    use crate::leases::history::{Call, History, How, LeaseSeen, Operation, Outcome};
    use crate::linearizability::Verdict;

    const MODEL: LeaseModel = LeaseModel {
        epoch_ms: 1_000_000,
        skew_ms: 50,
    };

    struct Builder {
        operations: Vec<Operation>,
    }

    impl Builder {
        fn new() -> Builder {
            Builder {
                operations: Vec::new(),
            }
        }

        fn op(mut self, client: u32, call: Call, at: (u64, u64), outcome: Outcome) -> Builder {
            let id = self.operations.len() as u64;
            self.operations.push(Operation {
                id,
                client,
                lease: "l".to_owned(),
                call,
                invoked_ms: at.0,
                completed_ms: at.1,
                outcome,
            });
            self
        }

        fn check(self) -> Verdict {
            let history = History {
                operations: self.operations,
                ..History::default()
            };
            let mut verdicts = check_history(&history, &MODEL, 1_000_000);
            assert_eq!(verdicts.len(), 1);
            verdicts.remove(0).verdict
        }
    }

    fn holder(client: u32) -> String {
        format!("c{client}")
    }

    fn acquire(client: u32, ttl_ms: u64) -> Call {
        Call::Acquire {
            holder: holder(client),
            ttl_ms,
        }
    }

    fn lease(client: u32, token: u64, at_global: u64, ttl_ms: u64) -> LeaseSeen {
        let at = MODEL.epoch_ms + at_global;
        LeaseSeen {
            holder: holder(client),
            token,
            granted_at_ms: at,
            renewed_at_ms: at,
            expires_at_ms: at + ttl_ms,
        }
    }

    fn acquired(client: u32, token: u64, at: u64, ttl_ms: u64, how: How) -> Outcome {
        Outcome::Acquired {
            lease: lease(client, token, at, ttl_ms),
            how,
        }
    }

    fn refused(reason: &str) -> Outcome {
        Outcome::Refused {
            reason: reason.to_owned(),
        }
    }

    fn fence(valid: bool, current_token: u64) -> Outcome {
        Outcome::Fence {
            valid,
            current_token,
        }
    }

    fn unknown() -> Outcome {
        Outcome::Unknown {
            error: "timeout".to_owned(),
        }
    }

    #[test]
    fn acquire_renew_release_and_a_new_holder_is_linearizable() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 1_000),
                (0, 10),
                acquired(0, 5, 5, 1_000, How::Created),
            )
            .op(1, acquire(1, 1_000), (20, 30), refused("not-holder"))
            .op(
                0,
                Call::Renew {
                    holder: holder(0),
                    ttl_ms: 1_000,
                },
                (40, 50),
                Outcome::Renewed {
                    lease: lease(0, 5, 45, 1_000),
                },
            )
            .op(0, Call::CheckFence { token: 5 }, (60, 70), fence(true, 5))
            .op(
                0,
                Call::Release { holder: holder(0) },
                (80, 90),
                Outcome::Released {
                    lease: lease(0, 5, 45, 1_000),
                },
            )
            .op(
                1,
                acquire(1, 1_000),
                (100, 110),
                acquired(1, 9, 105, 1_000, How::Created),
            )
            .op(
                0,
                Call::CheckFence { token: 5 },
                (120, 130),
                fence(false, 9),
            )
            .check();
        assert_eq!(verdict, Verdict::Linearizable);
    }

    /// Client 0 holds the lease, gives up on a release, then renews it (applied); client 1 is
    /// granted the lease while it is still live unless that release landed after the renewal,
    /// which client sessions rule out once the renewal was sent after the release was given up.
    fn release_lost_then_renewed(renew_sent_ms: u64) -> Builder {
        Builder::new()
            .op(
                0,
                acquire(0, 10_000),
                (0, 10),
                acquired(0, 5, 5, 10_000, How::Created),
            )
            .op(0, Call::Release { holder: holder(0) }, (20, 100), unknown())
            .op(
                0,
                Call::Renew {
                    holder: holder(0),
                    ttl_ms: 10_000,
                },
                (renew_sent_ms, 150),
                Outcome::Renewed {
                    lease: lease(0, 5, 140, 10_000),
                },
            )
            .op(
                1,
                acquire(1, 1_000),
                (300, 310),
                acquired(1, 9, 305, 1_000, How::Created),
            )
    }

    #[test]
    fn a_write_given_up_lands_only_before_the_clients_next_applied_write() {
        assert!(matches!(
            release_lost_then_renewed(120).check(),
            Verdict::NotLinearizable { .. }
        ));
        // Sent while the release was still in flight, the renewal does not shut it out.
        assert_eq!(release_lost_then_renewed(90).check(), Verdict::Linearizable);
    }

    #[test]
    fn a_take_over_after_expiry_is_linearizable() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 500),
                (0, 10),
                acquired(0, 5, 5, 500, How::Created),
            )
            .op(
                1,
                acquire(1, 500),
                (600, 610),
                acquired(
                    1,
                    7,
                    605,
                    500,
                    How::TookOverExpired {
                        previous_holder: holder(0),
                    },
                ),
            )
            .check();
        assert_eq!(verdict, Verdict::Linearizable);
    }

    #[test]
    fn a_second_holder_of_a_live_lease_is_caught() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 5_000),
                (0, 10),
                acquired(0, 5, 5, 5_000, How::Created),
            )
            .op(
                1,
                acquire(1, 500),
                (600, 610),
                acquired(1, 7, 605, 500, How::Created),
            )
            .check();
        assert!(
            matches!(verdict, Verdict::NotLinearizable { .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_stale_fence_check_is_caught() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 500),
                (0, 10),
                acquired(0, 5, 5, 500, How::Created),
            )
            .op(
                1,
                acquire(1, 5_000),
                (600, 610),
                acquired(
                    1,
                    7,
                    605,
                    5_000,
                    How::TookOverExpired {
                        previous_holder: holder(0),
                    },
                ),
            )
            .op(0, Call::CheckFence { token: 5 }, (700, 710), fence(true, 5))
            .check();
        assert!(
            matches!(verdict, Verdict::NotLinearizable { .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_lost_grant_is_caught() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 5_000),
                (0, 10),
                acquired(0, 5, 5, 5_000, How::Created),
            )
            .op(
                0,
                Call::Renew {
                    holder: holder(0),
                    ttl_ms: 5_000,
                },
                (100, 110),
                refused("unknown-lease"),
            )
            .check();
        assert!(
            matches!(verdict, Verdict::NotLinearizable { .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_renewal_that_changes_the_token_is_caught() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 5_000),
                (0, 10),
                acquired(0, 5, 5, 5_000, How::Created),
            )
            .op(
                0,
                Call::Renew {
                    holder: holder(0),
                    ttl_ms: 5_000,
                },
                (100, 110),
                Outcome::Renewed {
                    lease: lease(0, 6, 105, 5_000),
                },
            )
            .check();
        assert!(
            matches!(verdict, Verdict::NotLinearizable { .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn a_clock_that_runs_backwards_is_caught() {
        let verdict = Builder::new()
            .op(
                0,
                acquire(0, 5_000),
                (0, 500),
                acquired(0, 5, 400, 5_000, How::Created),
            )
            .op(
                0,
                Call::Renew {
                    holder: holder(0),
                    ttl_ms: 5_000,
                },
                (600, 610),
                Outcome::Renewed {
                    lease: lease(0, 5, 300, 5_000),
                },
            )
            .check();
        assert!(
            matches!(verdict, Verdict::NotLinearizable { .. }),
            "{verdict:?}"
        );
    }

    #[test]
    fn an_unanswered_acquire_may_or_may_not_have_taken_effect() {
        // It took effect: its holder's later renewal succeeds with a token never seen before.
        let took_effect = Builder::new()
            .op(0, acquire(0, 5_000), (0, 10), unknown())
            .op(
                0,
                Call::Renew {
                    holder: holder(0),
                    ttl_ms: 5_000,
                },
                (100, 110),
                Outcome::Renewed {
                    lease: lease(0, 8, 105, 5_000),
                },
            )
            .check();
        assert_eq!(took_effect, Verdict::Linearizable);
        // It did not: another client creates the lease.
        let no_effect = Builder::new()
            .op(0, acquire(0, 5_000), (0, 10), unknown())
            .op(
                1,
                acquire(1, 500),
                (100, 110),
                acquired(1, 3, 105, 500, How::Created),
            )
            .check();
        assert_eq!(no_effect, Verdict::Linearizable);
    }

    #[test]
    fn leases_are_checked_apart() {
        let mut history = History::default();
        for (index, name) in ["a", "b"].into_iter().enumerate() {
            history.operations.push(Operation {
                id: index as u64,
                client: 0,
                lease: name.to_owned(),
                call: acquire(0, 1_000),
                invoked_ms: 0,
                completed_ms: 10,
                outcome: acquired(0, 5 + index as u64, 5, 1_000, How::Created),
            });
        }
        let verdicts = check_history(&history, &MODEL, 1_000);
        assert_eq!(verdicts.len(), 2);
        assert!(verdicts.iter().all(|v| v.verdict == Verdict::Linearizable));
    }
}
