//! The command line's bounds, named: how often `ctl pipeline` reopens a broken stream and how
//! much it exports, and what the benchmarks ask for at most.

use std::time::Duration;

/// How often in a row `pipeline export` opens its stream again after it broke; each reopening
/// resumes after the last transaction written.
pub(crate) const PIPELINE_EXPORT_REOPENS_MAX: u32 = 5;
/// The most transactions one `pipeline export` writes (and the node's bound on `limit`: the
/// most that can be stored).
pub(crate) const PIPELINE_EXPORT_LIMIT_MAX: u32 = 1_000_000;
/// How often in a row `pipeline watch` opens its stream again after it broke (a node stopped,
/// a connection dropped) before it gives up; each reopening resumes after the last number seen.
pub(crate) const PIPELINE_WATCH_REOPENS_MAX: u32 = 5;

/// Most logged leaves the readers of `bench ct` ask proofs for.
pub(crate) const BENCH_CT_PROOF_TARGETS_MAX: usize = 10_000;
/// The longest single `Sessions/Wait` of a `bench sessions` client; the client waits again until
/// its `SESSION_PATIENCE` runs out.
pub(crate) const BENCH_SESSION_WAIT_MAX: Duration = Duration::from_secs(5);
