//! A linearizability checker for histories of calls with real-time intervals, generic over a
//! sequential [`Model`].
//!
//! The algorithm is Wing & Gong's search with Lowe's memoization, as in Knossos and Porcupine:
//! the calls and returns of the history form one time-ordered event list; at each step the search
//! tries to linearize one of the calls that come before the first remaining return (the ops that
//! may take effect next), removes it from the list, and goes on from the model state it leads to;
//! when no candidate works it backtracks. A cache of (set of linearized ops, model state) prunes
//! every configuration already explored, so the work is bounded by the number of distinct
//! configurations, not the number of orders.
//!
//! Ties: on equal times, calls sort before returns, so two ops whose intervals merely touch count
//! as concurrent. That is the conservative choice: it can only admit more orders, never reject a
//! history that a stricter reading would accept.
//!
//! Ops whose outcome was never learned (`return_ms: None`) return at +infinity: they may be
//! linearized anywhere after their call, and the search succeeds once every *completed* op is
//! linearized, whether or not the pending ones were (a pending op that took no effect is simply
//! never linearized).
//!
//! A pending op may come with bounds (a client session's numbered write can land only before the
//! client's next write is applied): `effect_by_ms`, a time by which it took effect if it did,
//! where its return then sits in the event list like a real one; and `settled_before`, an op of
//! the history it cannot follow, which is not linearized until the pending op is settled. A
//! bounded op is settled by linearizing it or by dropping it (it never took effect), a move that
//! leaves the state as it is.
//!
//! Pending ops are what makes the search expensive (each may go anywhere after its call), so two
//! prunings specific to them are added, both sound and complete because leaving a pending op out
//! never constrains the rest: a pending op whose step leaves the state unchanged is not
//! linearized there (leaving it out is at least as good), and a configuration is skipped when
//! one with the same completed ops and state but a subset of its pending ops has already failed.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

/// A sequential specification that histories are checked against.
pub trait Model {
    /// What the model remembers between calls. Hashed and compared for the search's cache, so it
    /// should hold only what future answers can depend on.
    type State: Clone + Eq + Hash + Debug;
    /// What a call asked.
    type Input;
    /// What a call answered.
    type Output;

    /// The state before any call.
    fn init(&self) -> Self::State;

    /// Every state the call `input`, answered `output`, may lead to from `state`; empty when that
    /// answer is impossible there. Several states express nondeterminism (an unknown outcome, a
    /// value the answer does not reveal).
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: &Self::Output,
    ) -> Vec<Self::State>;
}

/// One op of a history: what was asked and answered, and when (any one clock, in ms).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry<I, O> {
    /// Names the op in a [`Verdict`]; should be unique within the history.
    pub id: u64,
    /// What was asked.
    pub input: I,
    /// What came back (for a pending op, whatever the model takes for "not known").
    pub output: O,
    /// When the call was made.
    pub call_ms: u64,
    /// When the answer arrived; `None` if it never did, so the op may take effect at any time
    /// after its call, or never. A return before the call is read as equal to it.
    pub return_ms: Option<u64>,
    /// For a pending op: the latest time it can have taken effect, when that is known (it may
    /// still have taken none). Ignored for an answered op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect_by_ms: Option<u64>,
    /// For a pending op: the id of an op of the same history it cannot have taken effect after
    /// (before that one, or never). Ignored for an answered op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_before: Option<u64>,
}

/// What [`check`] concluded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Verdict {
    /// Some order of the ops, consistent with their intervals, is a run of the model.
    Linearizable,
    /// No order is. Reports the configuration where the search got furthest.
    NotLinearizable {
        /// The longest sequence of ops (ids, in linearization order) the search could linearize,
        /// longest in completed ops (it may include pending ops that took effect on the way).
        linearized: Vec<u64>,
        /// The ops that were candidates to go next at that point and none of which could (ids,
        /// in call order): the concurrent ops at the frontier, where the violation lies.
        window: Vec<u64>,
    },
    /// The search explored more than its budget of model steps without deciding: not proven
    /// either way.
    Unknown,
}

impl Verdict {
    /// Whether the history was proven linearizable.
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }
}

/// Checks `history` against `model`, giving up with [`Verdict::Unknown`] after `budget` calls of
/// [`Model::step`].
///
/// Deterministic: the same history and budget always give the same verdict. Memory grows with
/// the configurations explored (at most about `budget`).
pub fn check<M: Model>(
    model: &M,
    history: &[Entry<M::Input, M::Output>],
    budget: usize,
) -> Verdict {
    Search::new(model, history, budget).run()
}

/// No link: the end of the event list.
const NIL: usize = usize::MAX;
/// The list's head sentinel; op `k`'s call is node `2k + 1` and its return node `2k + 2`.
const HEAD: usize = 0;

fn call_node(op: usize) -> usize {
    2 * op + 1
}

fn return_node(op: usize) -> usize {
    2 * op + 2
}

/// The time-ordered events still to be linearized, as a doubly linked list over node indices so
/// that taking an op out and putting it back (in stack order) are O(1).
#[derive(Debug)]
struct Events {
    prev: Vec<usize>,
    next: Vec<usize>,
}

impl Events {
    fn new<I, O>(history: &[Entry<I, O>]) -> Events {
        // Pending returns sort after every real one; on equal times calls go first (see the
        // module docs), then by op index for determinism.
        let mut order: Vec<(u64, u8, usize, usize)> = Vec::with_capacity(2 * history.len());
        for (op, entry) in history.iter().enumerate() {
            order.push((entry.call_ms, 0, op, call_node(op)));
            let returned = entry
                .return_ms
                .or(entry.effect_by_ms)
                .map_or(u64::MAX, |at| at.max(entry.call_ms));
            let pending = u8::from(entry.return_ms.is_none());
            order.push((returned, 1 + pending, op, return_node(op)));
        }
        order.sort_unstable();
        let nodes = 2 * history.len() + 1;
        let mut events = Events {
            prev: vec![NIL; nodes],
            next: vec![NIL; nodes],
        };
        let mut last = HEAD;
        for &(_, _, _, node) in &order {
            events.next[last] = node;
            events.prev[node] = last;
            last = node;
        }
        events
    }

    fn unlink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = next;
        if next != NIL {
            self.prev[next] = prev;
        }
    }

    fn relink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = node;
        if next != NIL {
            self.prev[next] = node;
        }
    }

    /// Takes op `op`'s call and return out of the list.
    fn lift(&mut self, op: usize) {
        self.unlink(call_node(op));
        self.unlink(return_node(op));
    }

    /// Undoes the latest [`Events::lift`] (the nodes kept their own links, so reverse order
    /// restores the list exactly).
    fn unlift(&mut self, op: usize) {
        self.relink(return_node(op));
        self.relink(call_node(op));
    }

    /// The ops whose calls precede the first remaining return, in list order.
    fn frontier(&self) -> Vec<usize> {
        let mut ops = Vec::new();
        let mut node = self.next[HEAD];
        while node != NIL && node % 2 == 1 {
            ops.push(node / 2);
            node = self.next[node];
        }
        ops
    }
}

/// One configuration on the search stack and how far its alternatives have been tried.
#[derive(Debug)]
struct Frame<S> {
    /// The model state here.
    state: S,
    /// The ops that may go next, completed ones first: a pending op is tried only when no
    /// completed one leads anywhere, since most pending ops never need linearizing at all.
    candidates: Vec<usize>,
    /// The ops whose calls precede the first return left, waiting or not: what a failure
    /// report shows.
    frontier: Vec<usize>,
    /// Index into `candidates` of the op being tried.
    candidate: usize,
    /// The states that op's step led to and are still to be tried, last first (`None` until
    /// stepped).
    successors: Option<Vec<S>>,
}

/// A set of ops, as bits over their index within their kind (completed or pending).
type Bits = Vec<u64>;

/// Whether every op of `small` is in `large`.
fn is_subset(small: &[u64], large: &[u64]) -> bool {
    small
        .iter()
        .zip(large)
        .all(|(&small, &large)| small & !large == 0)
}

#[derive(Debug)]
struct Search<'h, M: Model> {
    model: &'h M,
    history: &'h [Entry<M::Input, M::Output>],
    budget: usize,
    steps: usize,
    events: Events,
    /// Each op's index among the ops of its kind (completed or pending), for the bitsets.
    dense: Vec<usize>,
    /// Whether each op is pending with a bound (and so may be dropped).
    bounded: Vec<bool>,
    /// For each op, the bounded pending ops that cannot follow it.
    must_follow: Vec<Vec<usize>>,
    /// The completed ops linearized in the current configuration.
    done: Bits,
    /// The pending ops linearized in the current configuration.
    taken: Bits,
    /// The linearized ops in order.
    path: Vec<usize>,
    /// Completed ops not yet linearized; the search succeeds when it reaches 0.
    remaining: usize,
    /// Every configuration fully explored without success, by completed ops and state: the sets
    /// of pending ops it had linearized, kept minimal. Any configuration with the same completed
    /// ops and state and a superset of one of those pending sets fails too (it has fewer
    /// options), so it is skipped; with no pending ops this is Lowe's cache exactly. Every
    /// configuration reached is either on the stack (and can't be reached again, as each move
    /// adds an op) or in here.
    failed: HashMap<Bits, HashMap<M::State, Vec<Bits>>>,
    /// The fewest completed ops left unlinearized so far, where `best_path` got to.
    best_remaining: usize,
    best_path: Vec<usize>,
    best_window: Vec<usize>,
}

impl<'h, M: Model> Search<'h, M> {
    fn new(model: &'h M, history: &'h [Entry<M::Input, M::Output>], budget: usize) -> Self {
        let (mut completed, mut pending) = (0, 0);
        let dense = history
            .iter()
            .map(|entry| {
                let count = if entry.return_ms.is_some() {
                    &mut completed
                } else {
                    &mut pending
                };
                *count += 1;
                *count - 1
            })
            .collect();
        let index_of: HashMap<u64, usize> = history
            .iter()
            .enumerate()
            .map(|(op, entry)| (entry.id, op))
            .collect();
        let mut must_follow = vec![Vec::new(); history.len()];
        let mut bounded = vec![false; history.len()];
        for (op, entry) in history.iter().enumerate() {
            if entry.return_ms.is_some() {
                continue;
            }
            bounded[op] = entry.effect_by_ms.is_some() || entry.settled_before.is_some();
            if let Some(&later) = entry.settled_before.and_then(|id| index_of.get(&id)) {
                must_follow[later].push(op);
            }
        }
        Search {
            model,
            history,
            budget,
            steps: 0,
            events: Events::new(history),
            dense,
            bounded,
            must_follow,
            done: vec![0; completed.div_ceil(64)],
            taken: vec![0; pending.div_ceil(64)],
            path: Vec::new(),
            remaining: completed,
            failed: HashMap::new(),
            best_remaining: completed,
            best_path: Vec::new(),
            best_window: Vec::new(),
        }
    }

    fn is_pending(&self, op: usize) -> bool {
        self.history[op].return_ms.is_none()
    }

    /// Whether pending op `op` is settled (linearized or dropped) in the current configuration.
    fn is_taken(&self, op: usize) -> bool {
        let index = self.dense[op];
        self.taken[index / 64] & (1 << (index % 64)) != 0
    }

    fn flip(&mut self, op: usize) {
        let index = self.dense[op];
        let bits = if self.is_pending(op) {
            &mut self.taken
        } else {
            &mut self.done
        };
        bits[index / 64] ^= 1 << (index % 64);
    }

    /// Whether the current configuration with `state` is known to fail.
    fn has_failed(&self, state: &M::State) -> bool {
        self.failed
            .get(self.done.as_slice())
            .and_then(|states| states.get(state))
            .is_some_and(|sets| sets.iter().any(|set| is_subset(set, &self.taken)))
    }

    /// Records that the current configuration, with `state`, failed.
    fn record_failure(&mut self, state: M::State) {
        let sets = self
            .failed
            .entry(self.done.clone())
            .or_default()
            .entry(state)
            .or_default();
        // No subset is there (the configuration was not skipped, and since it was reached only
        // its own descendants, with supersets, failed); supersets are now redundant.
        sets.retain(|set| !is_subset(&self.taken, set));
        sets.push(self.taken.clone());
    }

    fn frame(&self, state: M::State) -> Frame<M::State> {
        let mut frontier = self.events.frontier();
        // Stable, so each group keeps call order.
        frontier.sort_by_key(|&op| self.is_pending(op));
        // An op waits for the bounded pending ops that cannot follow it to be settled.
        let candidates = frontier
            .iter()
            .copied()
            .filter(|&op| {
                self.must_follow[op]
                    .iter()
                    .all(|&pending| self.is_taken(pending))
            })
            .collect();
        Frame {
            state,
            frontier,
            candidates,
            candidate: 0,
            successors: None,
        }
    }

    fn run(mut self) -> Verdict {
        if self.remaining == 0 {
            return Verdict::Linearizable;
        }
        let root = self.frame(self.model.init());
        self.best_window.clone_from(&root.frontier);
        let mut stack = vec![root];
        loop {
            let Some(frame) = stack.last_mut() else {
                return self.failure();
            };
            match self.next_move(frame) {
                Move::Descend(op, state) => {
                    self.flip(op);
                    self.events.lift(op);
                    self.path.push(op);
                    if !self.is_pending(op) {
                        self.remaining -= 1;
                        if self.remaining == 0 {
                            return Verdict::Linearizable;
                        }
                    }
                    let frame = self.frame(state);
                    // Furthest is counted in completed ops: linearizing a pending op is no
                    // progress, and would let padding decide which frontier gets reported. At
                    // a tie, a frontier with completed ops beats one without (a bounded pending
                    // op can stand alone before the ops that wait on it).
                    let completed_in = |window: &[usize]| {
                        window
                            .iter()
                            .any(|&op| self.history[op].return_ms.is_some())
                    };
                    if self.remaining < self.best_remaining
                        || (self.remaining == self.best_remaining
                            && !completed_in(&self.best_window)
                            && completed_in(&frame.frontier))
                    {
                        self.best_remaining = self.remaining;
                        self.best_path.clone_from(&self.path);
                        self.best_window.clone_from(&frame.frontier);
                    }
                    stack.push(frame);
                }
                Move::Backtrack => {
                    let Some(frame) = stack.pop() else { continue };
                    let Some(op) = self.path.pop() else { continue };
                    self.record_failure(frame.state);
                    self.events.unlift(op);
                    self.flip(op);
                    if !self.is_pending(op) {
                        self.remaining += 1;
                    }
                }
                Move::GiveUp => return Verdict::Unknown,
            }
        }
    }

    /// The next untried (op, successor state) from `frame` that leads to a configuration not
    /// known to fail; or why there is none.
    fn next_move(&mut self, frame: &mut Frame<M::State>) -> Move<M::State> {
        while let Some(&op) = frame.candidates.get(frame.candidate) {
            let successors = match &mut frame.successors {
                Some(successors) => successors,
                None => {
                    if self.steps >= self.budget {
                        return Move::GiveUp;
                    }
                    self.steps += 1;
                    let entry = &self.history[op];
                    let mut successors = self.model.step(&frame.state, &entry.input, &entry.output);
                    if self.bounded[op] && !successors.contains(&frame.state) {
                        // Dropped: it never took effect.
                        successors.push(frame.state.clone());
                    }
                    successors.reverse();
                    frame.successors.insert(successors)
                }
            };
            let Some(state) = successors.pop() else {
                frame.successors = None;
                frame.candidate += 1;
                continue;
            };
            // Leaving the state as it is, an unbounded pending op is better left out (it stays
            // free to go later); a bounded one is dropped that way.
            if self.is_pending(op) && !self.bounded[op] && state == frame.state {
                continue;
            }
            self.flip(op);
            let failed = self.has_failed(&state);
            self.flip(op);
            if !failed {
                return Move::Descend(op, state);
            }
        }
        Move::Backtrack
    }

    fn failure(self) -> Verdict {
        let ids = |ops: &[usize]| ops.iter().map(|&op| self.history[op].id).collect();
        let by_call = |&op: &usize| (self.history[op].call_ms, op);
        // The completed ops at the frontier, and the pending ones called since the earliest of
        // them: a pending op called long before is concurrent with everything, not a suspect.
        let earliest = self
            .best_window
            .iter()
            .filter(|&&op| !self.is_pending(op))
            .map(|&op| self.history[op].call_ms)
            .min()
            .unwrap_or(0);
        let mut window: Vec<usize> = self
            .best_window
            .iter()
            .copied()
            .filter(|&op| !self.is_pending(op) || self.history[op].call_ms >= earliest)
            .collect();
        window.sort_by_key(by_call);
        Verdict::NotLinearizable {
            linearized: ids(&self.best_path),
            window: ids(&window),
        }
    }
}

/// What the search does next.
#[derive(Debug)]
enum Move<S> {
    /// Linearize this op, reaching this state.
    Descend(usize, S),
    /// Nothing more to try here.
    Backtrack,
    /// The budget is spent.
    GiveUp,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A register of small integers, initially 0.
    #[derive(Debug)]
    struct Register;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Op {
        Write(u32),
        Read,
        /// Compare-and-set: if the value is `.0`, set it to `.1`.
        Cas(u32, u32),
    }

    /// A read's value or a CAS's success; `None` when the answer was never learned.
    type Answer = Option<u32>;

    impl Model for Register {
        type State = u32;
        type Input = Op;
        type Output = Answer;

        fn init(&self) -> u32 {
            0
        }

        fn step(&self, state: &u32, input: &Op, output: &Answer) -> Vec<u32> {
            match (*input, *output) {
                (Op::Write(value), _) => vec![value],
                (Op::Read, None) => vec![*state],
                (Op::Read, Some(value)) => {
                    if value == *state {
                        vec![*state]
                    } else {
                        vec![]
                    }
                }
                // Unknown success: either way (the nondeterministic branch).
                (Op::Cas(from, to), None) => {
                    if *state == from && from != to {
                        vec![*state, to]
                    } else {
                        vec![*state]
                    }
                }
                (Op::Cas(from, to), Some(ok)) => match (ok == 1, *state == from) {
                    (true, true) => vec![to],
                    (false, false) => vec![*state],
                    _ => vec![],
                },
            }
        }
    }

    fn op(id: u64, input: Op, output: Answer, call_ms: u64, return_ms: u64) -> Entry<Op, Answer> {
        Entry {
            id,
            input,
            output,
            call_ms,
            return_ms: Some(return_ms),
            effect_by_ms: None,
            settled_before: None,
        }
    }

    fn pending(id: u64, input: Op, call_ms: u64) -> Entry<Op, Answer> {
        Entry {
            id,
            input,
            output: None,
            call_ms,
            return_ms: None,
            effect_by_ms: None,
            settled_before: None,
        }
    }

    const BUDGET: usize = 100_000;

    #[test]
    fn empty_and_sequential_histories_are_linearizable() {
        assert_eq!(check(&Register, &[], BUDGET), Verdict::Linearizable);
        let history = [
            op(1, Op::Write(1), None, 0, 10),
            op(2, Op::Read, Some(1), 20, 30),
            op(3, Op::Write(2), None, 40, 50),
            op(4, Op::Read, Some(2), 60, 70),
        ];
        assert_eq!(check(&Register, &history, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn concurrent_ops_may_take_effect_in_either_order() {
        // The read overlaps both writes and sees the first one written last.
        let history = [
            op(1, Op::Write(1), None, 0, 100),
            op(2, Op::Write(2), None, 10, 90),
            op(3, Op::Read, Some(1), 20, 110),
            op(4, Op::Read, Some(1), 120, 130),
        ];
        assert_eq!(check(&Register, &history, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn touching_intervals_count_as_concurrent() {
        let history = [
            op(1, Op::Write(1), None, 0, 10),
            op(2, Op::Read, Some(0), 10, 20),
        ];
        assert_eq!(check(&Register, &history, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn a_stale_read_is_not_linearizable() {
        let history = [
            op(1, Op::Write(1), None, 0, 10),
            op(2, Op::Write(2), None, 20, 30),
            op(3, Op::Read, Some(2), 35, 45),
            // Concurrent with nothing that wrote 1 after 2.
            op(4, Op::Read, Some(1), 40, 60),
            op(5, Op::Write(3), None, 50, 70),
        ];
        assert_eq!(
            check(&Register, &history, BUDGET),
            Verdict::NotLinearizable {
                linearized: vec![1, 2, 3, 5],
                window: vec![4],
            }
        );
    }

    #[test]
    fn a_pending_op_may_take_effect_late() {
        // The write never answered, but a read long after its call sees it.
        let history = [
            pending(1, Op::Write(7), 0),
            op(2, Op::Read, Some(0), 10, 20),
            op(3, Op::Read, Some(7), 1_000, 1_010),
            op(4, Op::Read, Some(7), 2_000, 2_010),
        ];
        assert_eq!(check(&Register, &history, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn a_pending_op_may_never_take_effect() {
        let history = [
            pending(1, Op::Write(7), 0),
            op(2, Op::Read, Some(0), 10, 20),
            op(3, Op::Read, Some(0), 1_000, 1_010),
        ];
        assert_eq!(check(&Register, &history, BUDGET), Verdict::Linearizable);
    }

    #[test]
    fn a_pending_op_cannot_take_effect_before_its_call() {
        let history = [
            op(1, Op::Read, Some(7), 0, 10),
            pending(2, Op::Write(7), 20),
        ];
        assert!(matches!(
            check(&Register, &history, BUDGET),
            Verdict::NotLinearizable { window, .. } if window == vec![1]
        ));
    }

    #[test]
    fn a_pending_op_takes_effect_once() {
        // 0 -> 1 by the pending write, then 2, then 1 again: the write cannot land twice.
        let history = [
            pending(1, Op::Write(1), 0),
            op(2, Op::Read, Some(1), 10, 20),
            op(3, Op::Write(2), None, 30, 40),
            op(4, Op::Read, Some(1), 50, 60),
        ];
        assert!(matches!(
            check(&Register, &history, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn nondeterministic_steps_are_all_explored() {
        // The unknown CAS may or may not have succeeded; later reads decide which.
        let succeeded = [
            op(1, Op::Cas(0, 5), None, 0, 10),
            op(2, Op::Read, Some(5), 20, 30),
        ];
        let failed = [
            op(1, Op::Cas(0, 5), None, 0, 10),
            op(2, Op::Read, Some(0), 20, 30),
        ];
        let impossible = [
            op(1, Op::Cas(0, 5), None, 0, 10),
            op(2, Op::Read, Some(6), 20, 30),
        ];
        assert_eq!(check(&Register, &succeeded, BUDGET), Verdict::Linearizable);
        assert_eq!(check(&Register, &failed, BUDGET), Verdict::Linearizable);
        assert!(!check(&Register, &impossible, BUDGET).is_linearizable());
    }

    #[test]
    fn a_pending_op_takes_effect_by_its_bound_or_never() {
        let bounded = |effect_by_ms| Entry {
            effect_by_ms,
            ..pending(1, Op::Write(1), 0)
        };
        // The write may have landed before its bound (the first read) or never (the second)...
        for seen in [1, 0] {
            let history = [bounded(Some(10)), op(2, Op::Read, Some(seen), 20, 30)];
            assert_eq!(check(&Register, &history, BUDGET), Verdict::Linearizable);
        }
        // ...but not after a write answered past its bound.
        let late = |effect_by_ms| {
            [
                bounded(effect_by_ms),
                op(2, Op::Write(2), None, 20, 30),
                op(3, Op::Read, Some(1), 40, 50),
            ]
        };
        assert_eq!(check(&Register, &late(None), BUDGET), Verdict::Linearizable);
        assert_eq!(
            check(&Register, &late(Some(60)), BUDGET),
            Verdict::Linearizable
        );
        match check(&Register, &late(Some(10)), BUDGET) {
            Verdict::NotLinearizable { window, .. } => assert_eq!(window, vec![3]),
            other => panic!("expected a violation, got {other:?}"),
        }
        // Nor after an op it cannot follow, whatever the times.
        let mut before_write = late(Some(60));
        before_write[0].settled_before = Some(2);
        assert!(matches!(
            check(&Register, &before_write, BUDGET),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn an_exhausted_budget_is_unknown() {
        // Many concurrent writes and an impossible read force an exhaustive search.
        let mut history: Vec<_> = (1..=12)
            .map(|id| op(id, Op::Write(u32::try_from(id).unwrap_or(0)), None, 0, 100))
            .collect();
        history.push(op(99, Op::Read, Some(1_000), 50, 200));
        assert_eq!(check(&Register, &history, 50), Verdict::Unknown);
        assert!(matches!(
            check(&Register, &history, 10_000_000),
            Verdict::NotLinearizable { .. }
        ));
    }

    #[test]
    fn verdicts_serialize_with_a_tag() {
        let verdict = Verdict::NotLinearizable {
            linearized: vec![1],
            window: vec![2, 3],
        };
        let json = serde_json::to_string(&verdict).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"verdict":"not_linearizable","linearized":[1],"window":[2,3]}"#
        );
    }

    /// One generated op: what it does, how its interval is padded around its true point, and
    /// whether its answer is lost (and if so whether it took effect).
    #[derive(Clone, Debug)]
    struct Planned {
        input: Op,
        before: u64,
        after: u64,
        fate: Fate,
        /// A lost op knows when it took effect at the latest.
        bounded: bool,
    }

    #[derive(Clone, Copy, Debug)]
    enum Fate {
        Answered,
        LostApplied,
        LostNotApplied,
    }

    /// `lost_in` is the odds, one in that many, that an op's answer is lost. Proving a history
    /// *not* linearizable is exponential in its pending ops (each may or may not have taken
    /// effect, anywhere after its call), so the histories that must fail have fewer.
    fn planned(lost_in: u32) -> impl Strategy<Value = Planned> {
        let input = prop_oneof![
            (0u32..4).prop_map(Op::Write),
            Just(Op::Read),
            (0u32..4, 0u32..4).prop_map(|(from, to)| Op::Cas(from, to)),
        ];
        let fate = prop_oneof![
            2 * lost_in.saturating_sub(1) => Just(Fate::Answered),
            1 => Just(Fate::LostApplied),
            1 => Just(Fate::LostNotApplied),
        ];
        (input, 0u64..25, 0u64..25, fate, any::<bool>()).prop_map(
            |(input, before, after, fate, bounded)| Planned {
                input,
                before,
                after,
                fate,
                bounded,
            },
        )
    }

    /// Runs the plan against a real register, each op taking effect at `10 * index` inside its
    /// padded interval.
    fn run(plan: &[Planned]) -> Vec<Entry<Op, Answer>> {
        let mut value = 0;
        let mut history = Vec::new();
        for (index, planned) in (0u64..).zip(plan) {
            let point = 10 * index + 30;
            let output = match planned.fate {
                Fate::LostNotApplied => None,
                Fate::Answered | Fate::LostApplied => match planned.input {
                    Op::Write(v) => {
                        value = v;
                        None
                    }
                    Op::Read => Some(value),
                    Op::Cas(from, to) => {
                        let ok = value == from;
                        if ok {
                            value = to;
                        }
                        Some(u32::from(ok))
                    }
                },
            };
            let answered = matches!(planned.fate, Fate::Answered);
            history.push(Entry {
                id: index,
                input: planned.input,
                output: if answered { output } else { None },
                call_ms: point - planned.before,
                return_ms: answered.then_some(point + planned.after),
                // Half the lost ones know a bound past their true point (padded as a return),
                // and an op they cannot follow: the next one answered after that bound.
                effect_by_ms: (!answered && planned.bounded).then_some(point + planned.after),
                settled_before: None,
            });
        }
        // Each op's true point comes after every earlier one's.
        for index in 0..history.len() {
            if plan[index].bounded && history[index].return_ms.is_none() {
                history[index].settled_before = history[index + 1..]
                    .iter()
                    .find(|later| later.return_ms.is_some())
                    .map(|later| later.id);
            }
        }
        history
    }

    proptest! {
        #[test]
        fn histories_of_a_real_register_are_linearizable(
            plan in prop::collection::vec(planned(4), 0..60),
        ) {
            let history = run(&plan);
            prop_assert_eq!(check(&Register, &history, 1_000_000), Verdict::Linearizable);
        }

        #[test]
        fn a_read_of_a_value_never_written_is_caught(
            plan in prop::collection::vec(planned(16), 1..60),
            pick in any::<prop::sample::Index>(),
        ) {
            let mut history = run(&plan);
            let reads: Vec<usize> = (0..history.len())
                .filter(|&i| history[i].input == Op::Read && history[i].return_ms.is_some())
                .collect();
            prop_assume!(!reads.is_empty());
            let read = reads[pick.index(reads.len())];
            history[read].output = Some(1_000);
            let verdict = check(&Register, &history, 1_000_000);
            match verdict {
                Verdict::NotLinearizable { window, .. } => {
                    prop_assert!(window.contains(&history[read].id), "{window:?}");
                }
                other => prop_assert!(false, "{other:?}"),
            }
        }
    }
}
