//! `log_entries`: Raft log entries as the log store and append-entries carry them (postcard
//! `openraft::Entry` records, back to back), applied to a `State` in order, as every replica
//! applies its log.
//!
//! After every command: the state's own invariants hold (`State::check_invariants`), and a
//! refused command changed nothing but the applied index and the machine clock. At the end:
//! the snapshot loads back to the same state, and a second replica fed the same entries ends
//! with the same snapshot bytes.

use certus_core::{Command, Response, Stamp, State, apply};
use certus_node::TypeConfig;
use certus_store::Proposal;
use openraft::{Entry, EntryPayload};

pub use crate::limits::{COMMANDS_PER_INPUT_MAX, LEADER_CLOCK_MS_MAX};

/// The target body.
pub fn log_entries(data: &[u8]) {
    let mut applied = Vec::new();
    let mut state = State::new();
    let mut rest = data;
    while !rest.is_empty() && applied.len() < COMMANDS_PER_INPUT_MAX {
        let Ok((entry, tail)) = postcard::take_from_bytes::<Entry<TypeConfig>>(rest) else {
            break;
        };
        rest = tail;
        let EntryPayload::Normal(proposal) = entry.payload else {
            continue;
        };
        let index = entry.log_id.index;
        // openraft applies entries in log order; an entry behind the applied index is not one
        // it would hand to the state machine.
        if index < state.applied_index() {
            continue;
        }
        for (command, stamp) in stamped(proposal, index) {
            if applied.len() == COMMANDS_PER_INPUT_MAX {
                break;
            }
            apply_checked(&mut state, command.clone(), stamp);
            applied.push((command, stamp));
        }
    }
    check_replay(&state, &applied);
}

/// The commands of one proposal with the stamps the state machine gives them: the entry's index
/// and the leader's clock (bounded by [`LEADER_CLOCK_MS_MAX`]).
pub fn stamped(proposal: Proposal, index: u64) -> impl Iterator<Item = (Command, Stamp)> {
    let now_ms = proposal.proposed_at_ms.min(LEADER_CLOCK_MS_MAX);
    proposal
        .commands
        .into_iter()
        .map(move |command| (command, Stamp::new(index, now_ms)))
}

/// Applies one command and checks what `apply` promises: the state's invariants hold after it,
/// and a refused command changes nothing but the applied index and the machine clock.
pub fn apply_checked(state: &mut State, command: Command, stamp: Stamp) -> Response {
    let before = state.to_snapshot();
    let description = format!("{command:?} at {stamp:?}");
    // A client's numbered request that its command refused is still remembered in the client's
    // session (so a copy gets the same refusal); only the session layer's own refusals change
    // nothing at all.
    let numbered = matches!(command, Command::Once { .. });
    let response = apply(state, command, stamp);
    if let Err(violation) = state.check_invariants() {
        panic!("{violation} after {description}");
    }
    if refused(&response) && (!numbered || matches!(response, Response::Client(Err(_)))) {
        let after = state.to_snapshot();
        assert_eq!(
            after_index_and_clock(&before),
            after_index_and_clock(&after),
            "refused command changed the state: {description} answered {response:?}"
        );
    }
    response
}

/// Checks the end of a run: the snapshot loads back to the same state, and another replica fed
/// the same commands with the same stamps ends with the same bytes.
pub fn check_replay(state: &State, applied: &[(Command, Stamp)]) {
    let bytes = state.to_snapshot();
    match State::from_snapshot(&bytes) {
        Ok(restored) => assert!(
            restored == *state,
            "a snapshot loads back to a different state"
        ),
        Err(error) => panic!("a state apply made does not load from its own snapshot: {error}"),
    }
    let mut replica = State::new();
    for (command, stamp) in applied {
        apply(&mut replica, command.clone(), *stamp);
    }
    assert!(
        replica.to_snapshot() == bytes,
        "two replicas fed the same log disagree"
    );
}

/// Whether a response is a refusal (which promises an unchanged state).
pub fn refused(response: &Response) -> bool {
    response.is_refusal()
}

/// A snapshot without its applied index and machine clock: the magic, then two postcard
/// varints, then the rest of the state.
fn after_index_and_clock(snapshot: &[u8]) -> &[u8] {
    let mut rest = &snapshot[8..];
    for _ in 0..2 {
        let length = rest
            .iter()
            .position(|byte| byte & 0x80 == 0)
            .map_or(0, |at| at + 1);
        rest = &rest[length..];
    }
    rest
}
