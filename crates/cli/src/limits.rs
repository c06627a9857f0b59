//! The command line's bounds, named: how often `ctl pipeline` reopens a broken stream, how much
//! it exports, what its worker runs and reads, and what the benchmarks ask for at most.

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

/// CT entries `certus restore` reads, stores and integrates at a time.
pub(crate) const BACKUP_CT_BATCH_ENTRIES: usize = 4096;
/// Largest header of a backup file `certus restore` reads (JSON: the log id and the members).
pub(crate) const BACKUP_HEADER_BYTES_MAX: usize = 1024 * 1024;

/// Most logged leaves the readers of `bench ct` ask proofs for.
pub(crate) const BENCH_CT_PROOF_TARGETS_MAX: usize = 10_000;
/// The longest single `Sessions/Wait` of a `bench sessions` client; the client waits again until
/// its `SESSION_PATIENCE` runs out.
pub(crate) const BENCH_SESSION_WAIT_MAX: Duration = Duration::from_secs(5);
/// Most transactions `bench pipelines --long-poll` enqueues one at a time for each pickup
/// measurement (`--pickup-samples`; 20 ms apart, so 10 000 take minutes).
pub(crate) const BENCH_PICKUP_SAMPLES_MAX: u32 = 10_000;
/// Most workers `bench pipelines --long-poll` keeps waiting while it measures the CPU they cost
/// (`--idle-workers`), each with its own connection.
pub(crate) const BENCH_IDLE_WORKERS_MAX: u32 = 1_000;
/// Longest idle measurement of `bench pipelines --long-poll` (`--idle-seconds`).
pub(crate) const BENCH_IDLE_SECONDS_MAX: u64 = 600;
/// The fastest one `bench acme` client loop can order (a lego process starts, makes an account,
/// orders, waits at least the server's `Retry-After`, finalizes and downloads): names are made
/// for this rate, and a loop that uses them all fails the run.
pub(crate) const BENCH_ACME_ORDERS_PER_CLIENT_SECOND_MAX: u64 = 10;
/// Most entries of the HTTP-01 map (name → the bench's webroot) every node of `bench acme`
/// holds: every name its runs may order.
pub(crate) const BENCH_ACME_HTTP01_NAMES_MAX: usize = 1_000_000;
/// More failed orders than this in one `bench acme` run fail the bench, and stop the run.
pub(crate) const BENCH_ACME_FAILURES_PER_RUN_MAX: usize = 3;

/// Most commands `pipeline worker` runs at once (`--credit`): the node's bound on a Work
/// stream's unused credit.
pub(crate) const PIPELINE_WORKER_CREDIT_MAX: u32 = certus_node::limits::PIPELINE_WORK_CREDIT_MAX;
/// How often in a row `pipeline worker` tries to open its stream again after it broke, each
/// time after a longer pause, before it gives up.
pub(crate) const PIPELINE_WORKER_REOPENS_MAX: u32 = 10;
/// The most of a command's stdout `pipeline worker` reads: the node's bound on a state. A
/// command that writes more is stopped, and its transaction completed as internal-error.
pub(crate) const PIPELINE_WORKER_STDOUT_BYTES_MAX: usize =
    certus_core::limits::PIPELINE_JSON_BYTES_MAX;
/// The end of a failed command's stderr that `pipeline worker` keeps, for the state and its own
/// stderr.
pub(crate) const PIPELINE_WORKER_STDERR_TAIL_BYTES_MAX: usize = 2048;
