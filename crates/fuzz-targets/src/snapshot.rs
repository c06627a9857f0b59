//! `snapshot`: `State::from_snapshot`, the loader of snapshots a peer installs and a node opens
//! from disk.
//!
//! The loader promises that a snapshot that loads is a state `apply` could have made: so what
//! loads must pass its invariants, re-encode to bytes that load to the same state, and go on
//! applying commands (a tick, and a tick far in the future that expires everything) with its
//! invariants intact.

use certus_core::{Command, Stamp, State};

use crate::commands::{LEADER_CLOCK_MS_MAX, apply_checked};

/// The target body.
pub fn snapshot(data: &[u8]) {
    let Ok(mut state) = State::from_snapshot(data) else {
        return;
    };
    if let Err(violation) = state.check_invariants() {
        panic!("a loaded snapshot breaks an invariant: {violation}");
    }
    let bytes = state.to_snapshot();
    match State::from_snapshot(&bytes) {
        Ok(again) => assert!(again == state, "a re-encoded snapshot loads differently"),
        Err(error) => panic!("a loaded snapshot does not load after re-encoding: {error}"),
    }
    let index = state.applied_index();
    let clock = state.clock_ms();
    let next = index.saturating_add(1);
    apply_checked(&mut state, Command::Tick, Stamp::new(next, clock));
    let later = clock.max(LEADER_CLOCK_MS_MAX);
    apply_checked(&mut state, Command::Tick, Stamp::new(next, later));
}
