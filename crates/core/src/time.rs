//! Where time and order come from: the [`Stamp`] on every command.

use serde::{Deserialize, Serialize};

/// What the log says about a command: its position and the proposer's clock.
///
/// `index` is the Raft log index of the entry that carried the command. Several commands may share
/// one entry (group commit), so indexes never decrease but may repeat. `now_ms` is the leader's
/// clock (milliseconds since the Unix epoch) when the command was proposed; it may go backwards
/// when leadership moves to a node whose clock is behind, which is why the machine keeps its own
/// monotonic clock (see [`crate::State::clock_ms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Stamp {
    /// Raft log index of the entry.
    pub index: u64,
    /// The proposer's wall clock, in milliseconds since the Unix epoch.
    pub now_ms: u64,
}

impl Stamp {
    /// A stamp for log position `index` proposed at `now_ms`.
    pub fn new(index: u64, now_ms: u64) -> Stamp {
        Stamp { index, now_ms }
    }
}
