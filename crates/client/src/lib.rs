//! The Rust client of Certus: leader discovery, retries with backoff, deadlines.
//!
//! A [`Client`] is built from the gRPC endpoints (`host:port`) of some nodes of one cluster. It
//! speaks only the public services of [`certus_proto`] (`certus.v1.Leases`, `certus.v1.Admin`,
//! `certus.v1.Log`, `certus.v1.Sessions`, `certus.v1.Pipelines` and `grpc.health.v1.Health`), so
//! anything it does, a client in another language can do with the same `.proto` files.
//!
//! ```no_run
//! # async fn example() -> Result<(), certus_client::ClientError> {
//! use certus_client::Client;
//!
//! let client = Client::new(["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"])?;
//! let reply = client.acquire("db-primary", "worker-7", 10_000).await?;
//! let token = reply.lease.map_or(0, |lease| lease.fencing_token);
//! println!("fencing token {token}");
//! # Ok(())
//! # }
//! ```
//!
//! # Where requests go
//!
//! Any node serves every request (a follower forwards writes to the leader, and reads are
//! linearizable everywhere), so the leader is only a preference: it saves a hop. On first use,
//! and after a failure, the client asks the nodes for `Admin/Status` and sends its requests to
//! the leader they name, when that is one of its endpoints or answers itself; otherwise to a
//! node that answered.
//!
//! # Retries
//!
//! Each attempt has its own timeout ([`ClientConfig::attempt_timeout`]) and every call an
//! overall deadline ([`ClientConfig::deadline`]) and a number of attempts
//! ([`ClientConfig::max_attempts`]). A call is retried, on another endpoint, after a backoff
//! ([`ClientConfig::backoff`]: 50 ms doubling to 1 s by default, with deterministic jitter) when
//! the attempt failed in transport, timed out, or was answered `UNAVAILABLE` or
//! `DEADLINE_EXCEEDED` (for example `no-leader` during an election). Every other answer
//! (`INVALID_ARGUMENT`, `FAILED_PRECONDITION`, `NOT_FOUND`, `RESOURCE_EXHAUSTED`, …) is returned
//! at once as [`ClientError::Refused`], with the stable reason the node gave in its
//! `certus-error` metadata entry. When the deadline or the attempts run out the call fails with
//! [`ClientError::Unavailable`].
//!
//! # Ambiguous writes
//!
//! A write whose attempt failed after it may have reached the leader (a transport error or a
//! timeout mid-request, or a node answering with the reason `outcome-unknown`) may have been
//! applied already; the retry then applies it a second time. Every write of the `Leases` and
//! `Log` services is safe to repeat in that sense:
//!
//! - `acquire` by the same holder renews its own grant (same fencing token, `how = RENEWED`);
//! - `renew` extends the same grant again;
//! - `put_challenge` stores the same key authorization again (`replaced = true`);
//! - `delete_challenge` of a token already removed succeeds with `existed = false`;
//! - `purge_challenges` removes what is old enough, again;
//! - `add_chain` of a chain the log already has answers with the original SCT;
//! - `set_log_config` and `set_frozen` set the same value again;
//! - a repeated `release` is the one write whose answer changes: the lease is already gone, so
//!   it answers `unknown-lease` (or `not-holder` if someone else acquired it in between). Treat
//!   those answers to a retried release as success.
//!
//! A refusal before anything was proposed (`no-leader`, validation errors) guarantees that
//! nothing changed.
//!
//! The `Sessions` writes (see [CA issuance sessions](#ca-issuance-sessions)) are safe to repeat
//! too, with one exception:
//!
//! - `create_session` **with** a request key answers the session the first attempt created;
//!   **without** one it is not safe to repeat, so the client makes a single attempt (see
//!   [`Client::create_session`]);
//! - `complete_session`, `release_session` and `fail_session` repeated with the same claim token
//!   are accepted and change nothing;
//! - `acknowledge_session`, `kill_session` (of a session already killed) and
//!   `set_session_config` succeed again without a further change, and `extend_claim` sets the
//!   deadline again;
//! - a repeated `claim_sessions` may have claimed sessions whose answer was lost: they come
//!   back to their queue when the visibility passes (delayed, never lost).
//!
//! Careful with a `Sessions` refusal of `no-leader` on a write: the node reads the session back
//! after the write, and that read can fail with `no-leader` although the write was applied.
//!
//! The `Pipelines` writes (see [Transaction pipelines](#transaction-pipelines)) answer from the
//! write itself, without a read back, so `no-leader` there always means nothing was proposed.
//! Three of them are not safe to repeat, and are retried **only** after `no-leader`; any other
//! failure is returned as [`ClientError::Unavailable`] at once:
//!
//! - `enqueue` **without** an external id (a repeat could create a second transaction; with an
//!   external id, a repeat within the external-id window answers the first one with
//!   `duplicate: true`, so it is retried like every call);
//! - `dequeue` (a lost answer leaves its transactions running until the reaper takes them
//!   back at their deadline, counting an attempt);
//! - `report_progress` (a repeat announces the report twice).
//!
//! The rest are safe: `complete_transaction`, `requeue_transaction` and `sleep_transaction`
//! repeated with the same claim token answer the same and change nothing; `define_pipeline`,
//! `delete_pipeline`, `set_switch`, `cancel_transaction`, `acknowledge_notices`,
//! `set_pipeline_config` and a `get_state` that marks its reply succeed again without a further
//! change that matters.
//!
//! # The CT log
//!
//! The `certus.v1.Log` methods ([`Client::add_chain`], [`Client::get_sth`], …) are RFC 6962's
//! operations over gRPC, plus the operator's controls. Reads are answered from the local tree of
//! the node asked; a node that has not integrated the serving tree yet answers `UNAVAILABLE`
//! with the reason `behind`, and the call is retried on another node like any `UNAVAILABLE`
//! answer. A node that does not run the log (no `ct.key_file`) answers `UNIMPLEMENTED`, which is
//! returned at once as a refusal: give the client only nodes that run it.
//!
//! # CA issuance sessions
//!
//! The `certus.v1.Sessions` methods serve clients ([`Client::create_session`],
//! [`Client::get_session`], [`Client::wait_session`] to long-poll for progress,
//! [`Client::acknowledge_session`] once the certificate is stored), operators
//! ([`Client::kill_session`], [`Client::list_sessions`], [`Client::sessions_status`],
//! [`Client::set_session_config`]) and workers, which claim a step from a stage's queue and
//! finish it ([`Client::claim_sessions`], [`Client::extend_claim`],
//! [`Client::complete_session`], [`Client::release_session`], [`Client::fail_session`]).
//!
//! # Transaction pipelines
//!
//! The `certus.v1.Pipelines` methods serve producers ([`Client::enqueue`],
//! [`Client::get_state`] to long-poll for the result or progress, [`Client::cancel_transaction`],
//! [`Client::watch_completions`] for a stream of a node group's completions), workers
//! ([`Client::dequeue`], [`Client::complete_transaction`], [`Client::requeue_transaction`],
//! [`Client::report_progress`], [`Client::sleep_transaction`]) and operators (pipeline
//! definitions, switches, [`Client::list_in_play`], [`Client::list_stuck`],
//! [`Client::pipelines_status`], notices and the configuration). Replies with transactions can
//! be large; the client accepts up to [`PIPELINE_REPLY_BYTES_MAX`].
//!
//! # Calls to one node
//!
//! [`Client::status_of`], [`Client::log_status_of`], [`Client::trigger_snapshot`] and
//! [`Client::health_check`] address one node and make a single attempt: a node that does not
//! answer is reported at once, never replaced by another.

#![deny(missing_docs, unreachable_pub)]

mod auth;
mod client;
mod config;
mod endpoint;
mod error;

pub use auth::{BearerToken, ClientTls};
pub use client::{Client, PIPELINE_REPLY_BYTES_MAX};
pub use config::ClientConfig;
pub use endpoint::parse_endpoint;
pub use error::{ClientError, ERROR_REASON_KEY};

/// The generated reply and message types the client returns, re-exported for convenience.
pub use certus_proto::health::health_check_response::ServingStatus;
/// The outcome of a worker's step for [`Client::complete_session`]: `Outcome::Challenges`,
/// `Outcome::Tested` or `Outcome::Issued`, with their message types.
pub use certus_proto::v1::complete_request;
/// The `Pipelines` messages.
pub use certus_proto::v1::{
    AcknowledgeNoticesReply, CancelOutcome, CancelReply, CompleteTransactionReply,
    DefinePipelineReply, DeletePipelineReply, DequeueReply, EnqueueReply, EnqueueRequest,
    GetStateReply, GetStateRequest, ListNoticesReply, ListPipelinesReply, ListTransactionsReply,
    NodeGroupCounts, Notice, NotificationKind, PendingWebhook, Pipeline, PipelineConfig,
    PipelineNotification, PipelinesStatus, ProgressReply, QueueType, RequeueReply, RequeueRequest,
    SetSwitchReply, SleepReply, SleepRequest, StatusCount, Transaction, TxMetadata, TxStatus,
    WaitOutcome,
};
pub use certus_proto::v1::{
    AcquireReply, AddChainReply, Challenge, CheckFenceReply, ClaimReply, DeleteChallengeReply,
    ExtendReply, GetConsistencyReply, GetEntriesReply, GetProofByHashReply, GetRootsReply, Lease,
    ListChallengesReply, ListLeasesReply, ListSessionsReply, LogConfig, LogEntry, LogStatus,
    Member, MembershipReply, MirrorStatus, NewChallenge, NodeReport, PurgeChallengesReply,
    PutChallengeReply, ReleaseReply, RenewReply, Session, SessionChallenge, SessionConfig,
    SessionsStatus, SignedTreeHead, Stage, StageQueue, StatusReply, TestResult,
    TriggerSnapshotReply,
};
/// Routes, wake times and notice kinds of the `Pipelines` messages.
pub use certus_proto::v1::{enqueue_request, notice, requeue_request, sleep_request};
