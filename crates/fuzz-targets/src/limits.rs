//! The fuzz targets' bounds: what keeps one input fast and inside the ranges the node itself
//! guarantees.

/// The largest leader clock a fuzzed entry carries, in milliseconds since the Unix epoch (about
/// the year 37,000). The leader's clock is a wall clock the cluster trusts, not input a client
/// or a peer controls freely; every duration and deadline inside a command is fuzzed over its
/// whole range.
pub const LEADER_CLOCK_MS_MAX: u64 = 1 << 50;

/// At most this many commands are applied per input, so one input stays fast.
pub const COMMANDS_PER_INPUT_MAX: usize = 256;

/// The largest input the mutator makes.
pub const MUTANT_BYTES_MAX: usize = 64 * 1024;
