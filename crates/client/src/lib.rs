//! The Rust client of Certus: leader discovery, retries with backoff, deadlines.
//!
//! A [`Client`] is built from the gRPC endpoints (`host:port`) of some nodes of one cluster. It
//! speaks only the public services of [`certus_proto`] (`certus.v1.Leases`, `certus.v1.Admin`,
//! `certus.v1.Log`, `certus.v1.Sessions`, `certus.v1.Pipelines`, `certus.v1.Clients` and
//! `grpc.health.v1.Health`), so
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
//! [`ClientError::Unavailable`]. Its `may_have_taken_effect` is `false` when no attempt can have
//! taken effect — each one's connection could not be opened (the request never left the client)
//! or a node answered `no-leader` (nothing was proposed) — so a write that failed so was
//! certainly not applied; otherwise its outcome is unknown.
//!
//! # Exactly-once writes
//!
//! A write whose attempt failed after it may have reached the leader (a transport error or a
//! timeout mid-request, or a node answering `outcome-unknown`) may have been applied already. By
//! default ([`ClientConfig::exactly_once`]) the client therefore numbers every write in a client
//! session (`certus.v1.Clients`, registered on the first write and shared by clones): a retry
//! carries the same number, and the cluster answers it with the first attempt's answer instead
//! of applying it again. Every write is then retried like a read, and its answer is the answer
//! of its one application. When a call gives up (its deadline or attempts ran out), its number is
//! released and the client's next request tells the cluster to refuse the abandoned one forever,
//! so it can take effect only before that next request: a lost `release` or a short renewal can
//! never land later and end a lease the client acquired since. The session expires after ten
//! minutes without a write and is registered again transparently;
//! [`Client::close_client_session`] ends it at once. Writes of the `Log` service are not
//! numbered: `add_chain` is deduplicated by the leaf, and the log's controls set values.
//!
//! Without the session (`exactly_once: false`, or another client speaking the protocol without
//! the metadata), a retry may apply a write twice. Most writes are harmless to repeat — an
//! acquire by the holder renews, a complete with the same claim token changes nothing, a
//! challenge token is stored again — but a repeated `release` answers `unknown-lease`, and
//! `enqueue` without an external id, `dequeue`, `report_progress` and `create_session` without a
//! request key are not safe to repeat: the client then retries them only after answers that say
//! nothing was proposed (`no-leader`), and `create_session` without a key makes a single attempt.
//!
//! A refusal before anything was proposed (`no-leader`, validation errors) guarantees that
//! nothing changed.
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
//! finish it ([`Client::claim_sessions`], [`Client::claim_sessions_waiting`] to long-poll for
//! work, [`Client::extend_claim`], [`Client::complete_session`],
//! [`Client::complete_session_batch`], [`Client::release_session`], [`Client::fail_session`]),
//! or open a stream that pushes them claimed sessions within the credit they grant
//! ([`Client::session_worker`]).
//!
//! # Transaction pipelines
//!
//! The `certus.v1.Pipelines` methods serve producers ([`Client::enqueue`],
//! [`Client::enqueue_batch`], [`Client::get_state`] to long-poll for the result or progress,
//! [`Client::cancel_transaction`], [`Client::watch_completions`] for a stream of a node group's
//! completions), workers ([`Client::dequeue`], [`Client::dequeue_wait`] to long-poll for work,
//! [`Client::complete_transaction`], [`Client::complete_batch`],
//! [`Client::requeue_transaction`], [`Client::report_progress`], [`Client::sleep_transaction`],
//! and [`Client::work`], a stream that pushes claims as work is queued) and operators (pipeline
//! definitions, switches, [`Client::list_in_play`], [`Client::list_stuck`],
//! [`Client::pipelines_status`], notices and the configuration). Replies with transactions can
//! be large; the client accepts up to [`PIPELINE_REPLY_BYTES_MAX`].
//!
//! # Calls to one node
//!
//! [`Client::status_of`], [`Client::log_status_of`], [`Client::trigger_snapshot`],
//! [`Client::reload`] and [`Client::health_check`] address one node and make a single attempt: a node that does not
//! answer is reported at once, never replaced by another.

#![deny(missing_docs, unreachable_pub)]

mod auth;
mod client;
mod config;
mod endpoint;
mod error;
mod limits;
mod numbering;

pub use auth::{BearerToken, ClientTls};
pub use client::{Client, Closing, ReadAt, SessionWorkEventKind, SessionWorker, WorkStream};
pub use config::ClientConfig;
pub use endpoint::parse_endpoint;
pub use error::{ClientError, ERROR_REASON_KEY};
pub use limits::PIPELINE_REPLY_BYTES_MAX;

/// The generated reply and message types the client returns, re-exported for convenience.
pub use certus_proto::health::health_check_response::ServingStatus;
/// The outcome of a worker's step for [`Client::complete_session`]: `Outcome::Challenges`,
/// `Outcome::Tested` or `Outcome::Issued`, with their message types.
pub use certus_proto::v1::complete_request;
/// The `Pipelines` messages.
pub use certus_proto::v1::{
    AcknowledgeNoticesReply, CancelOutcome, CancelReply, CompleteBatchReply, CompleteItemResult,
    CompleteTransactionReply, CompleteTransactionRequest, DefinePipelineReply, DeletePipelineReply,
    DequeueReply, EnqueueBatchReply, EnqueueItemResult, EnqueueReply, EnqueueRequest,
    GetStateReply, GetStateRequest, ItemError, ListNoticesReply, ListPipelinesReply,
    ListTransactionsReply, NodeGroupCounts, Notice, NotificationKind, PendingWebhook, Pipeline,
    PipelineConfig, PipelineNotification, PipelinesStatus, ProgressReply, QueueType, RequeueReply,
    RequeueRequest, SetSwitchReply, SleepReply, SleepRequest, StatusCount, Transaction, TxMetadata,
    TxStatus, WaitOutcome, WorkEvent, WorkStepResult,
};
pub use certus_proto::v1::{
    AcquireReply, AddChainReply, Challenge, CheckFenceReply, ClaimReply, DeleteChallengeReply,
    ExtendReply, GetConsistencyReply, GetEntriesReply, GetProofByHashReply, GetRootsReply, Lease,
    ListChallengesReply, ListLeasesReply, ListSessionsReply, LogConfig, LogEntry, LogStatus,
    Member, MembershipReply, MirrorStatus, NewChallenge, NodeReport, PurgeChallengesReply,
    PutChallengeReply, ReleaseReply, ReloadReply, RenewReply, Session, SessionChallenge,
    SessionConfig, SessionsStatus, SignedTreeHead, Stage, StageQueue, StatusReply, TestResult,
    TriggerSnapshotReply,
};
/// The session workers' batches and streams: [`Client::complete_session_batch`]'s items and
/// answers, and the steps a [`SessionWorker`] sends and the answers it gets.
pub use certus_proto::v1::{
    CompleteRequest, CompleteSessionBatchReply, ExtendRequest, FailRequest, ReleaseClaimRequest,
    SessionStepAnswer, SessionStepResult,
};
/// Routes, wake times and notice kinds of the `Pipelines` messages.
pub use certus_proto::v1::{
    complete_item_result, enqueue_item_result, enqueue_request, notice, requeue_request,
    sleep_request, work_event, work_step_result,
};
