//! The node's bounds, named. Every queue, batch, message and wait has one.

use std::time::Duration;

/// Largest Raft transport message (append batches, snapshot chunks), in bytes.
pub const RAFT_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest client request or reply on the Leases and Admin services, in bytes.
pub const CLIENT_MESSAGE_BYTES_MAX: usize = 256 * 1024;
/// How long a follower waits for the leader to answer a forwarded request.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request waits for a leader to be elected before it is refused.
pub const LEADER_WAIT: Duration = Duration::from_secs(3);
/// How many times a request follows a leader change before it is refused.
pub const LEADER_HOPS_MAX: usize = 3;
/// How long a read waits for this node to apply up to the read index.
pub const READ_APPLY_WAIT: Duration = Duration::from_secs(5);
/// Commands waiting to be proposed; past this, writers wait (back-pressure).
pub const PROPOSER_QUEUE_MAX: usize = 16 * 1024;
/// Commands in one Raft entry.
pub const PROPOSAL_COMMANDS_MAX: usize = 1024;
/// Proposals appended but not yet applied, per leader: pipelining depth. Small on purpose: a
/// proposal waiting for a slot keeps absorbing writes, and fewer, larger entries cost less CPU
/// per write than many small ones (measured: 2 gives ~10.4k writes/s at 64 clients, 8 gave ~7.7k).
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 2;
/// Readers waiting for the next read barrier; past this, readers wait.
pub const READ_QUEUE_MAX: usize = 64 * 1024;
/// Entries a follower may lag behind the leader's commit index and still report ready.
pub const READY_APPLY_LAG_MAX: u64 = 1000;
/// How long a membership change may take (adding a learner waits for it to catch up).
pub const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request to the Pipelines service, in bytes: an enqueue or requeue carries up to two
/// 64 KiB JSON documents, a webhook URL and names.
pub const PIPELINE_REQUEST_BYTES_MAX: usize = 512 * 1024;
/// Largest reply of the Pipelines service, in bytes. A dequeue cannot be undone once applied, so
/// its reply must always fit: a full batch of 100 transactions, each with a state, an event and
/// a progress report of 64 KiB, is about 19.3 MiB. Clients raise their decoding limit to match.
pub const PIPELINE_REPLY_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Where a list of transactions is cut (after at least one), in encoded bytes; the rest is on
/// the next page.
pub const PIPELINE_LIST_REPLY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The longest a `GetState` long-poll holds a request.
pub const PIPELINE_WAIT_MAX: Duration = Duration::from_secs(60);
/// Notifications a completion stream reads from the state at a time: what it buffers at most
/// while the client takes them (gRPC flow control holds the rest back in the state).
pub const PIPELINE_STREAM_PAGE_MAX: usize = 256;
/// Node groups a pipelines status lists at most.
pub const PIPELINE_STATUS_GROUPS_MAX: usize = 1000;
