//! What the harness observed of the cluster during a run, sampled on the global simulated clock:
//! each node's role and term, commit progress, and the faults in force. The timeline and the
//! single-master checker read it.

use serde::{Deserialize, Serialize};

/// A node's role at a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// It leads.
    Leader,
    /// It is a candidate.
    Candidate,
    /// It follows (or is a learner).
    Follower,
    /// It is crashed (or not yet started again).
    Down,
}

/// One observation of one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Simulated milliseconds since the run began.
    pub at_ms: u64,
    /// The node.
    pub node: u64,
    /// Its role.
    pub role: Role,
    /// Its current term (0 when down).
    pub term: u64,
    /// Its commit index (0 when down).
    pub committed: u64,
    /// Its applied index (0 when down).
    pub applied: u64,
}

/// A fault as it was applied, with the period it was in force.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultSpan {
    /// When it began (simulated ms since the run began).
    pub from_ms: u64,
    /// When it was healed; `None` if it was still in force when the run ended.
    pub until_ms: Option<u64>,
    /// A short label, as printed in the schedule (for example `crash n2`, `clog n1->n3`).
    pub label: String,
    /// The nodes it touches (a partition lists the minority side).
    pub nodes: Vec<u64>,
    /// Its family: `crash`, `isolate`, `link`, `split`, `flap`, `network`, `skew`.
    pub kind: String,
}

/// A node's clock for the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockSkew {
    /// The node.
    pub node: u64,
    /// Its wall-clock offset from the global clock at the start, in ms.
    pub offset_ms: i64,
    /// How fast it runs relative to the global clock, in parts per million (+ is fast).
    pub drift_ppm: i64,
}

/// What the timeline of a run shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// How many nodes (ids 1..=nodes).
    pub nodes: u64,
    /// When the safety phase ended and faults were healed (simulated ms since the run began).
    pub heal_ms: u64,
    /// When the run ended.
    pub end_ms: u64,
    /// Role samples of every node, in time order.
    pub samples: Vec<Sample>,
    /// The faults.
    pub faults: Vec<FaultSpan>,
    /// Each node's clock.
    pub clocks: Vec<ClockSkew>,
    /// The checkers' verdicts: (checker, passed, detail).
    pub verdicts: Vec<(String, bool, String)>,
    /// What the crashes did to file writes not yet synced (the Raft and CT logs' files).
    #[serde(default)]
    pub unsynced_writes: UnsyncedWrites,
}

/// Unsynced file writes a run's crashes found: lost, reached the disk whole, or torn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsyncedWrites {
    /// Never reached the disk.
    pub lost: u64,
    /// Reached it whole.
    pub whole: u64,
    /// Reached it in part.
    pub torn: u64,
}
