//! The client's bounds, named.

use std::time::Duration;

/// The largest `certus.v1.Pipelines` reply accepted, in bytes: the node's own bound
/// (`PIPELINE_REPLY_BYTES_MAX`), which a full dequeue batch can approach. A dequeue cannot be
/// undone, so its answer must never be refused here for its size.
pub const PIPELINE_REPLY_BYTES_MAX: usize = 32 * 1024 * 1024;

/// The longest wait a long-poll asks for (the node cuts one to 60 s); it keeps the arithmetic
/// on deadlines from overflowing.
pub(crate) const LONG_POLL_WAIT_MAX: Duration = Duration::from_secs(3_600);

/// The longest wait a `Dequeue` may ask the node for (the node's own bound; a longer wait is
/// refused there, so the client cuts it here and asks again if it wants to wait on).
pub(crate) const DEQUEUE_WAIT_MAX: Duration = Duration::from_secs(60);

/// Messages (credit, steps) a `Work` stream holds for the node before it reads them; past it,
/// sending waits.
pub(crate) const WORK_REQUESTS_QUEUED_MAX: usize = 64;

/// The longest wait one long-poll `Sessions/Claim` asks the node for (the node refuses longer
/// ones); a longer wait is made of several calls.
pub(crate) const SESSION_CLAIM_WAIT_MAX: Duration = Duration::from_secs(60);

/// Messages (credit, steps) a worker stream buffers before sending waits for the transport.
pub(crate) const SESSION_WORKER_REQUESTS_BUFFERED_MAX: usize = 64;
