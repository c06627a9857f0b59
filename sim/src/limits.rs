//! The harness's bounds, named: how long a run waits for the nodes, how long an aimed crash
//! waits, and how much a verdict or a timeline shows.

use std::time::Duration;

/// How long the nodes have to catch up when a run settles.
pub const SETTLE_MAX: Duration = Duration::from_secs(10);
/// The longest an aimed crash waits for a write in flight.
pub const CRASH_AIM_MS_MAX: u64 = 100;
/// How many problems a failed verdict names before it only counts the rest.
pub const PROBLEMS_NAMED_MAX: usize = 10;
/// Node ids `1..=nodes` get a lane of the timeline even without samples, up to this many (a
/// corrupt record must not make us loop forever).
pub const TIMELINE_DECLARED_NODES_MAX: u64 = 64;

/// How long (real time) a sled node restarted right after a crash waits for the crashed
/// incarnation's sled, still in this process, to release the database's file lock.
pub const SLED_LOCK_WAIT_MAX: Duration = Duration::from_secs(5);

/// How many sessions the sessions scenario's long-polling external worker claims at once.
pub const SESSION_LONG_POLL_CLAIM_MAX: u32 = 3;

/// How many nonces an ACME client remembers having used (to replay one) or set aside.
pub const ACME_NONCES_REMEMBERED_MAX: usize = 32;

/// The most machine faults (pauses, clock steps, slow disks, disk errors) a seed draws.
pub const MACHINE_FAULTS_MAX: u64 = 3;
/// The most membership changes (voter removals) a seed draws.
pub const MEMBERSHIP_FAULTS_MAX: u64 = 2;
/// How long after a removal's end (or the safety phase's, if later) the harness keeps trying to
/// make the removed node a voter again before the run fails `voters-restored`.
pub const VOTERS_RESTORE_MS_MAX: u64 = 15_000;
/// How long one membership change call may take before the harness tries again.
pub const MEMBERSHIP_CALL_MS_MAX: u64 = 3_000;
/// The shortest and longest process pause (a GC pause, a VM stolen).
pub const PAUSE_MS_MIN: u64 = 500;
/// See [`PAUSE_MS_MIN`].
pub const PAUSE_MS_MAX: u64 = 10_000;
/// The smallest and largest wall-clock step (NTP), either way: more than an election takes.
pub const CLOCK_STEP_MS_MIN: u64 = 1_000;
/// See [`CLOCK_STEP_MS_MIN`].
pub const CLOCK_STEP_MS_MAX: u64 = 5_000;
/// The least and most a slow disk adds to each fsync.
pub const SLOW_SYNC_MS_MIN: u64 = 10;
/// See [`SLOW_SYNC_MS_MIN`].
pub const SLOW_SYNC_MS_MAX: u64 = 200;
/// The least and most a starved machine adds to each batch its state machine applies.
pub const SLOW_APPLY_MS_MIN: u64 = 20;
/// See [`SLOW_APPLY_MS_MIN`].
pub const SLOW_APPLY_MS_MAX: u64 = 300;
