//! Transaction pipelines (seed 002): per-node-group queues, long-poll bookkeeping, webhooks,
//! archiving and statistics, with the seed's Redis keys and Lua functions replaced by commands.
//! `docs/pipelines.md` maps every key and step of the seed to what is here.
//!
//! A *pipeline* is a name for a node group (the workers that run it). A *transaction* is one
//! request travelling through pipelines: its state (a JSON document), the event that says what to
//! do next (JSON too), its status and its metadata (webhook URL, whether progress reports are
//! wanted, whether a long-poll reply cancels the webhook). Each node group has three queues,
//! dequeued in priority order admin, out, in, first in first out within each:
//!
//! ```text
//!            Enqueue            Dequeue             Complete
//!   (new) ──────────▶ QUEUED ──────────▶ RUNNING ──────────▶ success | failed | aborted |
//!                    admin/out/in          │  │               timeout | internal-error
//!                      ▲    ▲   Requeue,   │  │ Sleep                  │
//!                      │    └──────────────┘  ▼                        │ after archive_delay_ms
//!                      │    reaper retry    SLEEPING                   ▼
//!                      └── time or switch ────┘                    ARCHIVED ──▶ deleted after
//!                                                                               archive_retention_ms
//!   Cancel: queued or sleeping → aborted at once; running → flagged, its worker completes it.
//!   Reaper: running past its deadline → back to the queue it came from; timeout once it was
//!           handed out max_attempts times; aborted if a cancel is pending.
//! ```
//!
//! A worker *dequeues* a batch from its node group: each transaction gets status running and a
//! [`TxClaim`] — the worker, a token (the log index of the dequeue) and a deadline — in one
//! command. The worker *completes* it (a terminal status), *requeues* it (hands it to a queue,
//! possibly of another node group: the seed's enqueue of a running transaction) or puts it to
//! *sleep*, each with its token: the last such step is remembered, so a retry with the same token
//! gets the same answer and changes nothing, and any other token is refused as stale. A running
//! transaction that passes its deadline is taken back by the next tick's reaper — the origin
//! only listed such transactions — and a progress report moves the deadline, so a worker that
//! reports progress is never reaped.
//!
//! Finishing a transaction (by complete, cancel or reaper) schedules its webhook (the
//! `webhooks` submodule: backoff, URL pauses, administrator notices), numbers a completion
//! notification for the streams (`notifications`) and counts it in the statistics (`stats`).
//! After `archive_delay_ms` the tick moves it to the archive, a cold store inside the state where
//! it stays readable by id for `archive_retention_ms`. The hand-off is one command, so nothing can
//! change a transaction between being read for the archive and being archived; every change bumps
//! the transaction's `version` so that a later export to an outside store can be fenced the same
//! way (an export that wrote version `v` is current exactly while the version is still `v`).
//!
//! An enqueue with an external id that was enqueued within `external_id_window_ms` creates
//! nothing and answers the existing transaction's id with `duplicate: true`, as an idempotent
//! queue API does; the first enqueue's content wins.
//!
//! Claims follow the rules of [`crate::claims`], which issuance sessions share. A transaction's
//! [`TxPlace`] says where it is and holds what that place needs — a queue entry, a claim (with a
//! pending cancel), what it sleeps until, or how and when it finished — so its status follows
//! from it and cannot disagree with it; snapshots and answers still carry the flat record the
//! format was defined with (`pipelines/record.rs`).
//!
//! Invariants (checked by `Pipelines::check`):
//! - every transaction is in exactly one place — a queue of its node group (queued), the
//!   processing set (running, with a claim), the sleepers (sleeping), the finished set (terminal,
//!   awaiting archive) or the archive (terminal, archived) — by construction: the place is one
//!   value, and its status follows from it. Every index and every counter holds exactly what the
//!   places and fields say; no transaction is in two queues, and queue positions are unique;
//! - only a running transaction has a claim or a pending cancel (by construction); its claim's
//!   token is above its last step's; ids, tokens and positions are at most the last issued;
//! - every in-play transaction's pipeline, if it has one, is defined;
//! - times are not after the machine clock, deadlines and wake times are within their bounds;
//! - the switches hold no zeros, and no switch has more sleepers than allowed;
//! - external ids map to transactions that were created, each index agrees with the map;
//! - the webhook, notification and statistics records keep their own invariants and bounds.
//!
//! Every refused command changes nothing. Time comes only from the `now_ms` passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::claims::{self, DAY_MS, Held, Hold, InvalidConfig, OutOfRange, Place, Sweep, Work};
use crate::limits::{
    LIST_PAGE_MAX, PIPELINE_COMPLETE_BATCH_MAX, PIPELINE_DEQUEUE_BATCH_MAX,
    PIPELINE_ENQUEUE_BATCH_MAX, PIPELINE_EXTERNAL_ID_BYTES_MAX, PIPELINE_EXTERNAL_ID_WINDOW_MS_MAX,
    PIPELINE_EXTERNAL_IDS_MAX, PIPELINE_JSON_BYTES_MAX, PIPELINE_NAME_BYTES_MAX,
    PIPELINE_OWNER_BYTES_MAX, PIPELINE_RUNNING_TIMEOUT_MS_MAX, PIPELINE_SLEEP_MS_MAX,
    PIPELINE_SWITCH_SLEEPERS_MAX, PIPELINE_SWITCHES_MAX, PIPELINE_TICK_BATCH_MAX,
    PIPELINE_TRANSACTIONS_MAX, PIPELINE_URL_FAILURE_LIMIT_MAX, PIPELINE_URL_FAILURE_WINDOW_MS_MAX,
    PIPELINE_URL_PAUSE_MS_MAX, PIPELINE_WEBHOOK_ATTEMPTS_MAX, PIPELINE_WEBHOOK_BACKOFF_MS_MAX,
    PIPELINE_WEBHOOK_BATCH_MAX, PIPELINE_WEBHOOK_URL_BYTES_MAX, PIPELINES_MAX,
};
use crate::sessions::WorkerId;
use crate::text::{TextError, TextKind, check, is_name_byte, is_visible_byte, validated_text};

mod notifications;
mod record;
mod stats;
mod webhooks;

pub use notifications::{Notification, NotificationKind, NotificationPage};
pub(crate) use notifications::{NotificationRecords, NotificationRecordsRef, Notifications};
pub(crate) use record::TransactionRecord;
use stats::{Counted, Stats, StatsRecords, StatsRecordsRef};
pub use stats::{Resolution, StatsCounts, StatsRow};
pub use webhooks::{
    Notice, NoticeId, NoticeKind, UrlHealth, Webhook, WebhookEventId, WebhookKind, WebhookOutcome,
    WebhookSettlement,
};
use webhooks::{WebhookRecords, WebhookRecordsRef, Webhooks};

validated_text! {
    /// A pipeline's name: 1 to 128 bytes of letters, digits and `. _ - : / @`.
    PipelineName, kind = TextKind::PipelineName, max_bytes = PIPELINE_NAME_BYTES_MAX,
    allowed = is_name_byte, allowed_words = "ASCII letters, digits and . _ - : / @"
}

validated_text! {
    /// A node group (the workers that serve a set of queues): 1 to 128 bytes of letters, digits
    /// and `. _ - : / @`.
    NodeGroup, kind = TextKind::NodeGroup, max_bytes = PIPELINE_NAME_BYTES_MAX,
    allowed = is_name_byte, allowed_words = "ASCII letters, digits and . _ - : / @"
}

validated_text! {
    /// A switch sleeping transactions wait on: 1 to 128 bytes of letters, digits and
    /// `. _ - : / @`.
    SwitchName, kind = TextKind::SwitchName, max_bytes = PIPELINE_NAME_BYTES_MAX,
    allowed = is_name_byte, allowed_words = "ASCII letters, digits and . _ - : / @"
}

validated_text! {
    /// Who a transaction belongs to (a tenant, an account): 1 to 128 bytes of visible ASCII.
    Owner, kind = TextKind::Owner, max_bytes = PIPELINE_OWNER_BYTES_MAX,
    allowed = is_visible_byte, allowed_words = "visible ASCII (no spaces or control characters)"
}

validated_text! {
    /// A client's id for a transaction, unique within the external-id window: 1 to 256 bytes of
    /// visible ASCII.
    ExternalId, kind = TextKind::ExternalId, max_bytes = PIPELINE_EXTERNAL_ID_BYTES_MAX,
    allowed = is_visible_byte, allowed_words = "visible ASCII (no spaces or control characters)"
}

validated_text! {
    /// Where a transaction's webhook events go: an `http://` or `https://` URL of up to 2048
    /// bytes of visible ASCII.
    WebhookUrl, validate = check_webhook_url
}

validated_text! {
    /// A JSON document (a transaction's state or event, a progress report): 1 to 64 KiB of
    /// text that parses as one JSON value. It is stored and returned as sent, never interpreted.
    JsonDocument, validate = check_json
}

fn check_webhook_url(value: &str) -> Result<(), TextError> {
    let kind = TextKind::WebhookUrl;
    check(
        kind,
        value,
        PIPELINE_WEBHOOK_URL_BYTES_MAX,
        is_visible_byte,
        "visible ASCII (percent-encode anything else)",
    )?;
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match rest {
        None => Err(TextError::Malformed {
            kind,
            reason: "it must start with http:// or https://".to_owned(),
        }),
        Some(rest) if rest.is_empty() || rest.starts_with('/') => Err(TextError::Malformed {
            kind,
            reason: "it names no host after the scheme".to_owned(),
        }),
        Some(_) => Ok(()),
    }
}

fn check_json(value: &str) -> Result<(), TextError> {
    let kind = TextKind::Json;
    if value.is_empty() {
        return Err(TextError::Empty { kind });
    }
    if value.len() > PIPELINE_JSON_BYTES_MAX {
        return Err(TextError::TooLong {
            kind,
            len_bytes: value.len(),
            max_bytes: PIPELINE_JSON_BYTES_MAX,
        });
    }
    // Parsing into IgnoredAny checks the syntax without building a value.
    serde_json::from_str::<serde::de::IgnoredAny>(value)
        .map(|_| ())
        .map_err(|error| TextError::Malformed {
            kind,
            reason: format!("it is not one JSON value: {error}"),
        })
}

/// A transaction's id: the log index of the `Enqueue` that created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TransactionId(pub u64);

impl fmt::Display for TransactionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A position in the archive, which is read in `(archived_at_ms, id)` order: just after the
/// archived transaction `transaction`, archived at `archived_at_ms`. An export resumes from the
/// cursor of the last transaction it received.
///
/// A cursor names a position, not an entry, so it stays valid when retention deletes the
/// transaction it came from (or every older one). Reads of the archive stop before the machine
/// clock (see [`PipelineReads::archived`]), so no transaction can later be archived before a
/// cursor handed out: paging never skips one. `transaction: 0` (no id is 0) starts at
/// `archived_at_ms` itself. Displayed `ARCHIVED_AT_MS:ID`, as `certus ctl pipeline export`
/// takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArchiveCursor {
    /// When the transaction moved to the archive (machine time).
    pub archived_at_ms: u64,
    /// Its id.
    pub transaction: TransactionId,
}

impl ArchiveCursor {
    /// The cursor just after `tx`, if it is archived.
    pub fn after(tx: &Transaction) -> Option<ArchiveCursor> {
        tx.archived_at_ms().map(|archived_at_ms| ArchiveCursor {
            archived_at_ms,
            transaction: tx.id,
        })
    }

    fn key(self) -> (u64, TransactionId) {
        (self.archived_at_ms, self.transaction)
    }
}

impl fmt::Display for ArchiveCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.archived_at_ms, self.transaction)
    }
}

/// One of a node group's three queues, in dequeue priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum QueueType {
    /// Administrative events: served first.
    Admin,
    /// Events that end a pipeline (results on their way back): served second.
    Out,
    /// Events that start a pipeline: served last.
    In,
}

impl QueueType {
    /// The queues in the order a dequeue serves them.
    pub const PRIORITY: [QueueType; 3] = [QueueType::Admin, QueueType::Out, QueueType::In];

    fn slot(self) -> usize {
        match self {
            QueueType::Admin => 0,
            QueueType::Out => 1,
            QueueType::In => 2,
        }
    }
}

impl fmt::Display for QueueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QueueType::Admin => "admin",
            QueueType::Out => "out",
            QueueType::In => "in",
        })
    }
}

/// A transaction's status, as in the origin system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TxStatus {
    /// Waiting in a queue.
    Queued,
    /// Handed to a worker.
    Running,
    /// Finished well (terminal).
    Success,
    /// Finished with a failure the pipeline reported (terminal).
    Failed,
    /// Cancelled (terminal).
    Aborted,
    /// Waiting for a time or a switch.
    Sleeping,
    /// Given up after running past its deadline too often (terminal).
    Timeout,
    /// Finished by a fault in the pipeline itself (terminal).
    InternalError,
}

impl TxStatus {
    /// Every status.
    pub const ALL: [TxStatus; 8] = [
        TxStatus::Queued,
        TxStatus::Running,
        TxStatus::Success,
        TxStatus::Failed,
        TxStatus::Aborted,
        TxStatus::Sleeping,
        TxStatus::Timeout,
        TxStatus::InternalError,
    ];

    /// Whether the status is final: the transaction never runs again.
    pub fn is_terminal(self) -> bool {
        FinalStatus::of(self).is_some()
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// A terminal status: how a finished transaction finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FinalStatus {
    /// [`TxStatus::Success`].
    Success,
    /// [`TxStatus::Failed`].
    Failed,
    /// [`TxStatus::Aborted`].
    Aborted,
    /// [`TxStatus::Timeout`].
    Timeout,
    /// [`TxStatus::InternalError`].
    InternalError,
}

impl FinalStatus {
    /// The terminal status `status` is, if it is terminal.
    pub fn of(status: TxStatus) -> Option<FinalStatus> {
        match status {
            TxStatus::Success => Some(FinalStatus::Success),
            TxStatus::Failed => Some(FinalStatus::Failed),
            TxStatus::Aborted => Some(FinalStatus::Aborted),
            TxStatus::Timeout => Some(FinalStatus::Timeout),
            TxStatus::InternalError => Some(FinalStatus::InternalError),
            TxStatus::Queued | TxStatus::Running | TxStatus::Sleeping => None,
        }
    }
}

impl From<FinalStatus> for TxStatus {
    fn from(status: FinalStatus) -> TxStatus {
        match status {
            FinalStatus::Success => TxStatus::Success,
            FinalStatus::Failed => TxStatus::Failed,
            FinalStatus::Aborted => TxStatus::Aborted,
            FinalStatus::Timeout => TxStatus::Timeout,
            FinalStatus::InternalError => TxStatus::InternalError,
        }
    }
}

impl fmt::Display for FinalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        TxStatus::from(*self).fmt(f)
    }
}

impl fmt::Display for TxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TxStatus::Queued => "queued",
            TxStatus::Running => "running",
            TxStatus::Success => "success",
            TxStatus::Failed => "failed",
            TxStatus::Aborted => "aborted",
            TxStatus::Sleeping => "sleeping",
            TxStatus::Timeout => "timeout",
            TxStatus::InternalError => "internal-error",
        })
    }
}

/// A pipeline definition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pipeline {
    /// Its name.
    pub name: PipelineName,
    /// The node group whose workers run it.
    pub node_group: NodeGroup,
    /// Machine time of the latest definition that changed it.
    pub defined_at_ms: u64,
}

/// What a transaction's client asked for besides the work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxMetadata {
    /// Where webhook events go; none: no webhooks.
    pub webhook_url: Option<WebhookUrl>,
    /// Progress reports are also sent by webhook.
    pub progress_reports: bool,
    /// A long-poll that replies with the finished transaction cancels its pending webhook.
    pub cancel_webhook_on_longpoll: bool,
}

/// Where an enqueue sends a transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Route {
    /// To the node group of this pipeline (which becomes the transaction's pipeline).
    Pipeline(PipelineName),
    /// To this node group directly (the transaction keeps its pipeline, if it has one).
    NodeGroup(NodeGroup),
}

/// A queued transaction's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// Which of its node group's queues.
    pub queue: QueueType,
    /// Its position: queues are served in increasing position, which only grows.
    pub seq: u64,
    /// Machine time it was queued.
    pub at_ms: u64,
}

/// A worker's hold on a running transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxClaim {
    /// Who dequeued it.
    pub worker: WorkerId,
    /// The log index of the `Dequeue`: unique per dequeue, and increasing.
    pub token: u64,
    /// Machine time it was dequeued.
    pub started_at_ms: u64,
    /// Machine time from which the reaper may take it back (moved by progress reports).
    pub deadline_ms: u64,
    /// The queue it came from, where the reaper puts it back.
    pub queue: QueueType,
}

/// What a sleeping transaction waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slumber {
    /// Machine time the tick wakes it, whatever happens to the switch.
    pub until_ms: u64,
    /// A switch whose change wakes it earlier.
    pub switch: Option<SwitchName>,
    /// The queue it goes to when woken.
    pub queue: QueueType,
    /// Machine time it fell asleep.
    pub since_ms: u64,
}

/// The last step (`Complete`, `Requeue` or `Sleep`) a transaction accepted, replayed to a retry.
pub type StepRecord = claims::Completion<PipelineReply>;

/// A transaction.
///
/// Snapshots, answers and the transport carry it as the flat record the format was defined with
/// (`record.rs`); that record is only read into a transaction whose fields fit together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    /// Its id (the log index of its `Enqueue`).
    pub id: TransactionId,
    /// Who it belongs to.
    pub owner: Owner,
    /// The client's id for it.
    pub external_id: Option<ExternalId>,
    /// The pipeline it was last routed by, if any.
    pub pipeline: Option<PipelineName>,
    /// The node group whose queues it is in (or was in, when it finished).
    pub node_group: NodeGroup,
    /// Where it is: queued, running, sleeping or finished. Its status follows from it.
    pub place: TxPlace,
    /// Its state, as the latest step saved it.
    pub state: JsonDocument,
    /// What the next worker is to do; cleared when it finishes.
    pub event: Option<JsonDocument>,
    /// Webhook and long-poll options.
    pub metadata: TxMetadata,
    /// The latest progress report.
    pub progress: Option<JsonDocument>,
    /// Machine time of the `Enqueue`.
    pub created_at_ms: u64,
    /// How often the current event was handed to a worker (reset when a step hands it on).
    pub attempts: u32,
    /// Machine time it was last handed to a worker.
    pub last_started_at_ms: Option<u64>,
    /// Machine time a long-poll last replied with it (the seed's `notifiedTime`).
    pub notified_at_ms: Option<u64>,
    /// The last accepted step.
    pub last_step: Option<StepRecord>,
    /// Grows with every change (the log index of the latest one, or one more than the previous
    /// version): an export that saw version `v` is current exactly while the version is `v`.
    pub version: u64,
}

/// Where a transaction is: queued in a queue of its node group, running, sleeping, or finished.
pub type TxPlace = Place<QueueEntry, Running, Slumber, Finished>;

/// A running transaction: a worker's claim on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    /// Who runs it.
    pub claim: TxClaim,
    /// A cancel arrived while it was running; the worker is to finish it as aborted.
    pub cancel_requested: bool,
}

impl Hold for Running {
    fn token(&self) -> u64 {
        self.claim.token
    }

    fn deadline_ms(&self) -> u64 {
        self.claim.deadline_ms
    }
}

/// A finished transaction: in the hot set until the archive delay passes, then in the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// How it finished.
    pub status: FinalStatus,
    /// Machine time it finished.
    pub completed_at_ms: u64,
    /// Machine time it moved to the archive.
    pub archived_at_ms: Option<u64>,
}

impl Transaction {
    /// Its status.
    pub fn status(&self) -> TxStatus {
        match &self.place {
            Place::Queued(_) => TxStatus::Queued,
            Place::Claimed(_) => TxStatus::Running,
            Place::Asleep(_) => TxStatus::Sleeping,
            Place::Ended(finished) => finished.status.into(),
        }
    }

    /// Where it waits, when queued.
    pub fn queued(&self) -> Option<QueueEntry> {
        self.place.queued().copied()
    }

    /// Who runs it, when running.
    pub fn claim(&self) -> Option<&TxClaim> {
        self.place.claimed().map(|running| &running.claim)
    }

    /// What it waits for, when sleeping.
    pub fn sleep(&self) -> Option<&Slumber> {
        self.place.asleep()
    }

    /// Whether a cancel arrived while it was running: the worker is to finish it as aborted.
    pub fn cancel_requested(&self) -> bool {
        self.place
            .claimed()
            .is_some_and(|running| running.cancel_requested)
    }

    /// Machine time it finished.
    pub fn completed_at_ms(&self) -> Option<u64> {
        self.place.ended().map(|finished| finished.completed_at_ms)
    }

    /// Machine time it moved to the archive.
    pub fn archived_at_ms(&self) -> Option<u64> {
        self.place
            .ended()
            .and_then(|finished| finished.archived_at_ms)
    }
}

impl Work for Transaction {
    type Claim = Running;
    type Reply = PipelineReply;

    fn current_claim(&self) -> Option<&Running> {
        self.place.claimed()
    }

    fn completion(&self) -> Option<&StepRecord> {
        self.last_step.as_ref()
    }

    fn set_completion(&mut self, completion: StepRecord) {
        self.last_step = Some(completion);
    }
}

/// The pipelines' cluster-wide configuration, changed at run time by
/// [`PipelineCommand::Configure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineConfig {
    /// How long an external id stays taken after its enqueue.
    pub external_id_window_ms: u64,
    /// How long a running transaction may go without a sign of life (its dequeue, a progress
    /// report) before the reaper takes it back.
    pub running_timeout_ms: u64,
    /// A transaction handed out this often for one event and reaped again times out.
    pub max_attempts: u32,
    /// How long a finished transaction stays in the hot set before it is archived (the seed's
    /// `DELAY_BEFORE_ARCHIVING`: a client polling right after completion finds it quickly).
    pub archive_delay_ms: u64,
    /// How long an archived transaction stays readable before it is deleted.
    pub archive_retention_ms: u64,
    /// Most transactions stored (all of them); an enqueue beyond it is refused.
    pub transactions_max: u64,
    /// The delay after a webhook's first attempt; it doubles with each further attempt.
    pub webhook_backoff_base_ms: u64,
    /// The longest delay between two attempts of one webhook.
    pub webhook_backoff_cap_ms: u64,
    /// Most attempts of one webhook event before it is given up (the seed's
    /// `MAX_WEBHOOK_RETRIES`).
    pub webhook_attempts_max: u32,
    /// Failures of one URL within the window that pause it (the seed's
    /// `KEYSPACE_WEBHOOK_FAIL_LIMIT`).
    pub url_failure_limit: u32,
    /// The window in which a URL's failures are counted (`KEYSPACE_WEBHOOK_FAIL_PERIOD`).
    pub url_failure_window_ms: u64,
    /// How long a failing URL is paused (`KEYSPACE_WEBHOOK_DISABLE_PERIOD`).
    pub url_pause_ms: u64,
}

impl Default for PipelineConfig {
    fn default() -> PipelineConfig {
        PipelineConfig {
            external_id_window_ms: DAY_MS,
            running_timeout_ms: 300_000,
            max_attempts: 3,
            archive_delay_ms: 60_000,
            archive_retention_ms: 7 * DAY_MS,
            transactions_max: 100_000,
            webhook_backoff_base_ms: 1_000,
            webhook_backoff_cap_ms: 300_000,
            webhook_attempts_max: 10,
            url_failure_limit: 5,
            url_failure_window_ms: 60_000,
            url_pause_ms: 600_000,
        }
    }
}

impl PipelineConfig {
    /// Checks every field against its bounds, naming the first one out of range.
    pub fn validate(&self) -> Result<(), PipelineError> {
        let within = claims::config_within;
        within(
            "external_id_window_ms",
            1_000,
            PIPELINE_EXTERNAL_ID_WINDOW_MS_MAX,
            self.external_id_window_ms,
        )?;
        within(
            "running_timeout_ms",
            1_000,
            PIPELINE_RUNNING_TIMEOUT_MS_MAX,
            self.running_timeout_ms,
        )?;
        within("max_attempts", 1, 100, self.max_attempts.into())?;
        within("archive_delay_ms", 0, 7 * DAY_MS, self.archive_delay_ms)?;
        within(
            "archive_retention_ms",
            0,
            365 * DAY_MS,
            self.archive_retention_ms,
        )?;
        within(
            "transactions_max",
            1,
            PIPELINE_TRANSACTIONS_MAX as u64,
            self.transactions_max,
        )?;
        within(
            "webhook_backoff_base_ms",
            100,
            PIPELINE_WEBHOOK_BACKOFF_MS_MAX,
            self.webhook_backoff_base_ms,
        )?;
        within(
            "webhook_backoff_cap_ms",
            self.webhook_backoff_base_ms,
            PIPELINE_WEBHOOK_BACKOFF_MS_MAX,
            self.webhook_backoff_cap_ms,
        )?;
        within(
            "webhook_attempts_max",
            1,
            PIPELINE_WEBHOOK_ATTEMPTS_MAX.into(),
            self.webhook_attempts_max.into(),
        )?;
        within(
            "url_failure_limit",
            1,
            PIPELINE_URL_FAILURE_LIMIT_MAX.into(),
            self.url_failure_limit.into(),
        )?;
        within(
            "url_failure_window_ms",
            1_000,
            PIPELINE_URL_FAILURE_WINDOW_MS_MAX,
            self.url_failure_window_ms,
        )?;
        within(
            "url_pause_ms",
            1_000,
            PIPELINE_URL_PAUSE_MS_MAX,
            self.url_pause_ms,
        )?;
        Ok(())
    }
}

/// A new transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTransaction {
    /// Who it belongs to.
    pub owner: Owner,
    /// The client's id for it: an enqueue with an id taken within the window answers the
    /// existing transaction.
    pub external_id: Option<ExternalId>,
    /// Where it goes.
    pub route: Route,
    /// Which queue of the node group.
    pub queue: QueueType,
    /// Its initial state.
    pub state: JsonDocument,
    /// What the first worker is to do.
    pub event: Option<JsonDocument>,
    /// Webhook and long-poll options.
    pub metadata: TxMetadata,
}

/// One completion of a [`PipelineCommand::CompleteBatch`]: what a
/// [`PipelineCommand::Complete`] carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxCompletion {
    /// The transaction.
    pub transaction: TransactionId,
    /// The claim's token.
    pub token: u64,
    /// A terminal status.
    pub status: TxStatus,
    /// Its final state; none: keep the current one.
    pub state: Option<JsonDocument>,
}

/// The pipeline commands.
///
/// Persisted in the Raft log: new variants go at the end, so entries already written decode
/// as before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PipelineCommand {
    /// Define a pipeline, or move it to another node group (transactions already queued stay
    /// where they are).
    Define {
        /// The pipeline.
        name: PipelineName,
        /// Its node group.
        node_group: NodeGroup,
    },
    /// Delete a pipeline; refused while transactions of it are in play.
    Delete {
        /// The pipeline.
        name: PipelineName,
    },
    /// Create a transaction and queue it.
    Enqueue(NewTransaction),
    /// Hand a running transaction on to a queue (the seed's enqueue of an existing
    /// transaction): it leaves processing, with its state and event replaced if given.
    Requeue {
        /// The transaction.
        transaction: TransactionId,
        /// The claim's token.
        token: u64,
        /// Where it goes; none: the same node group.
        route: Option<Route>,
        /// Which queue.
        queue: QueueType,
        /// Its new state.
        state: Option<JsonDocument>,
        /// Its next event.
        event: Option<JsonDocument>,
    },
    /// Take up to `max` queued transactions of a node group: admin first, then out, then in.
    Dequeue {
        /// The node group.
        node_group: NodeGroup,
        /// Who takes them.
        worker: WorkerId,
        /// The most to take, 1 to [`PIPELINE_DEQUEUE_BATCH_MAX`].
        max: u32,
    },
    /// A long-poll is about to reply with the transaction (the seed's getState with
    /// `markAsReplied`): record the time, and cancel a finished transaction's pending webhook if
    /// it asked for that. Plain reads of a transaction are [`crate::State`] reads.
    MarkReplied {
        /// The transaction.
        transaction: TransactionId,
    },
    /// Finish a running transaction.
    Complete {
        /// The transaction.
        transaction: TransactionId,
        /// The claim's token.
        token: u64,
        /// A terminal status.
        status: TxStatus,
        /// Its final state; none: keep the current one.
        state: Option<JsonDocument>,
    },
    /// Record a running transaction's progress; moves its deadline (a sign of life).
    Progress {
        /// The transaction.
        transaction: TransactionId,
        /// The claim's token.
        token: u64,
        /// The report.
        report: JsonDocument,
    },
    /// Put a running transaction to sleep until `until_ms`, or until `switch` changes.
    Sleep {
        /// The transaction.
        transaction: TransactionId,
        /// The claim's token.
        token: u64,
        /// Machine time to wake it, at most [`PIPELINE_SLEEP_MS_MAX`] from now.
        until_ms: u64,
        /// A switch whose change wakes it earlier.
        switch: Option<SwitchName>,
        /// The queue it goes to when woken.
        queue: QueueType,
        /// Its new state.
        state: Option<JsonDocument>,
    },
    /// Set a switch (every switch reads 0 until set); a change wakes its sleepers.
    SetSwitch {
        /// The switch.
        name: SwitchName,
        /// Its new value.
        value: u64,
    },
    /// Cancel a transaction: queued or sleeping ones are aborted at once, a running one is
    /// flagged for its worker.
    Cancel {
        /// The transaction.
        transaction: TransactionId,
    },
    /// Take up to `max` due webhook deliveries for sending (the webhook processor's poll).
    TakeWebhooks {
        /// The most to take, 1 to [`PIPELINE_WEBHOOK_BATCH_MAX`].
        max: u32,
    },
    /// Record the result of one delivery attempt.
    WebhookResult {
        /// The event.
        event: WebhookEventId,
        /// Which attempt (its `attempts` when taken).
        attempt: u32,
        /// What happened.
        outcome: WebhookOutcome,
    },
    /// Drop the administrator notices up to and including `up_to`.
    AcknowledgeNotices {
        /// The last notice read.
        up_to: NoticeId,
    },
    /// Replace the configuration.
    Configure(PipelineConfig),
    /// Create transactions and queue them, each as its own `Enqueue` would, in order, in one
    /// log entry: 1 to [`PIPELINE_ENQUEUE_BATCH_MAX`] of them. Atomic per item, not per batch:
    /// each gets its own answer in [`PipelineReply::Batch`] (an item refused changes nothing;
    /// the others take effect). An external id repeated within the batch answers the first
    /// item's transaction as a duplicate.
    EnqueueBatch(Vec<NewTransaction>),
    /// Finish running transactions, each as its own `Complete` would, in order, in one log
    /// entry: 1 to [`PIPELINE_COMPLETE_BATCH_MAX`] of them. Atomic per item: a stale token fails
    /// its item only.
    CompleteBatch(Vec<TxCompletion>),
}

/// What happened to a cancelled transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelOutcome {
    /// It was queued or sleeping and is now aborted.
    Aborted,
    /// It is running: its worker is asked to finish it as aborted.
    Requested,
    /// It is running and was asked already (nothing changed).
    AlreadyRequested,
    /// It had finished already (nothing changed).
    Finished {
        /// Its status.
        status: TxStatus,
    },
}

/// What a successful pipeline command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PipelineReply {
    /// The pipeline is defined.
    Defined {
        /// Its node group before, if it was defined already.
        previous: Option<NodeGroup>,
    },
    /// The pipeline is not defined (any more).
    Deleted {
        /// It existed.
        existed: bool,
    },
    /// The transaction is queued.
    Enqueued {
        /// Its id.
        transaction: TransactionId,
        /// The external id was enqueued within the window: this is that transaction, and
        /// nothing changed.
        duplicate: bool,
    },
    /// The transaction is queued again.
    Requeued {
        /// The transaction.
        transaction: TransactionId,
        /// Its node group now.
        node_group: NodeGroup,
        /// Its queue.
        queue: QueueType,
    },
    /// The transactions taken, as they are after dequeuing, in dequeue order (possibly none).
    Dequeued(Vec<Transaction>),
    /// The long-poll reply is recorded.
    Replied {
        /// The transaction as it is now.
        transaction: Box<Transaction>,
        /// Its pending webhook was cancelled.
        webhook_cancelled: bool,
    },
    /// The transaction finished.
    Completed {
        /// The transaction.
        transaction: TransactionId,
        /// Its terminal status.
        status: TxStatus,
    },
    /// The progress report is recorded.
    ProgressRecorded {
        /// The transaction.
        transaction: TransactionId,
        /// Its new deadline.
        deadline_ms: u64,
        /// A cancel was asked for: finish it as aborted.
        cancel_requested: bool,
    },
    /// The transaction sleeps.
    Sleeping {
        /// The transaction.
        transaction: TransactionId,
        /// When the tick wakes it.
        until_ms: u64,
    },
    /// The switch is set.
    SwitchSet {
        /// Its value changed (only a change wakes sleepers).
        changed: bool,
        /// The transactions woken, queued again, in id order.
        woken: Vec<TransactionId>,
    },
    /// The cancel is recorded.
    Cancelled {
        /// The transaction.
        transaction: TransactionId,
        /// What it did.
        outcome: CancelOutcome,
    },
    /// The deliveries to attempt now, as they are after taking (possibly none).
    WebhooksTaken(Vec<Webhook>),
    /// The attempt's result is recorded.
    WebhookRecorded {
        /// The event.
        event: WebhookEventId,
        /// What became of the delivery.
        settlement: WebhookSettlement,
    },
    /// Notices were dropped.
    NoticesAcknowledged {
        /// How many.
        removed: usize,
    },
    /// The configuration changed.
    Configured,
    /// A batch's answers, one per item in the batch's order: each the reply its own command
    /// would have had ([`PipelineReply::Enqueued`], [`PipelineReply::Completed`], or the reply
    /// a retried token replays), or why that item was refused (it changed nothing).
    Batch(Vec<Result<PipelineReply, PipelineError>>),
}

/// What a tick did to the pipelines. Each step touches at most [`PIPELINE_TICK_BATCH_MAX`]
/// transactions (or records).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineTickReport {
    /// Running transactions past their deadline put back on their queue.
    pub retried: Vec<TransactionId>,
    /// Running transactions past their deadline for the last allowed time: status timeout.
    pub timed_out: Vec<TransactionId>,
    /// Running transactions past their deadline whose cancel was asked for: status aborted.
    pub aborted: Vec<TransactionId>,
    /// Sleeping transactions whose time came, queued again.
    pub woken: Vec<TransactionId>,
    /// Finished transactions moved to the archive after the archive delay.
    pub archived: Vec<TransactionId>,
    /// Archived transactions deleted after the retention.
    pub deleted: Vec<TransactionId>,
    /// External ids whose window ended.
    pub external_ids_expired: usize,
    /// URL failure records forgotten.
    pub urls_forgotten: usize,
    /// Statistics rows past their retention dropped.
    pub stats_rows_pruned: usize,
    /// A step reached its bound and left work for the next tick: tick again soon.
    pub more: bool,
}

impl PipelineTickReport {
    /// Whether the tick changed nothing.
    pub fn is_empty(&self) -> bool {
        self.retried.is_empty()
            && self.timed_out.is_empty()
            && self.aborted.is_empty()
            && self.woken.is_empty()
            && self.archived.is_empty()
            && self.deleted.is_empty()
            && self.external_ids_expired == 0
            && self.urls_forgotten == 0
            && self.stats_rows_pruned == 0
    }
}

/// How busy a node group is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupCounts {
    /// Transactions waiting in each queue, in [`QueueType::PRIORITY`] order.
    pub queued: [usize; 3],
    /// Transactions running.
    pub running: usize,
    /// Transactions sleeping.
    pub sleeping: usize,
}

impl GroupCounts {
    /// Transactions waiting in `queue`.
    pub fn in_queue(&self, queue: QueueType) -> usize {
        self.queued[queue.slot()]
    }

    fn is_empty(&self) -> bool {
        *self == GroupCounts::default()
    }

    /// The count an in-play transaction at `place` is counted in.
    fn of(&mut self, place: &TxPlace) -> &mut usize {
        match place {
            Place::Queued(entry) => &mut self.queued[entry.queue.slot()],
            Place::Claimed(_) => &mut self.running,
            Place::Asleep(_) => &mut self.sleeping,
            Place::Ended(_) => unreachable!("only transactions in play are counted"),
        }
    }
}

/// Why a pipeline command was refused. A refused command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum PipelineError {
    /// A malformed name, id, URL or JSON document.
    #[error(transparent)]
    InvalidText(#[from] TextError),
    /// No such pipeline is defined.
    #[error("no pipeline {name} is defined; define it first, or route by node group")]
    UnknownPipeline {
        /// The name asked for.
        name: PipelineName,
    },
    /// Transactions of the pipeline are in play.
    #[error(
        "pipeline {name} has {in_play} transactions in play (queued, running or sleeping); \
         wait for them to finish or cancel them first"
    )]
    PipelineInUse {
        /// The pipeline.
        name: PipelineName,
        /// How many of its transactions are in play.
        in_play: usize,
    },
    /// No such transaction is stored.
    #[error(
        "no transaction {transaction} exists (never enqueued, or deleted after its archive \
         retention); check the id"
    )]
    UnknownTransaction {
        /// The id asked for.
        transaction: TransactionId,
    },
    /// The token is not the transaction's current claim (nor its last step's).
    #[error(
        "claim token {token} does not hold transaction {transaction}, which is {status} now: \
         the claim ended (it was completed, handed on or reaped) and someone else may hold it; \
         drop this work"
    )]
    StaleClaim {
        /// The transaction.
        transaction: TransactionId,
        /// The token sent.
        token: u64,
        /// The transaction's status.
        status: TxStatus,
    },
    /// A cancel is pending: the transaction may only be completed now.
    #[error(
        "transaction {transaction} was cancelled while running; complete it with status \
         aborted instead of handing it on"
    )]
    CancelRequested {
        /// The transaction.
        transaction: TransactionId,
    },
    /// A completion must name a terminal status.
    #[error(
        "{status} is not a terminal status; complete with success, failed, aborted, timeout or \
         internal-error"
    )]
    NotTerminal {
        /// The status sent.
        status: TxStatus,
    },
    /// A bound on stored things was reached.
    #[error("at most {max} {what} may be stored; {hint}")]
    TooMany {
        /// What.
        what: String,
        /// The bound.
        max: u64,
        /// What to do about it.
        hint: String,
    },
    /// A number is out of its range.
    #[error("{field} is {got}; it must be within {min}..={max}")]
    OutOfRange {
        /// Which field.
        field: String,
        /// What was sent.
        got: u64,
        /// The smallest allowed.
        min: u64,
        /// The largest allowed.
        max: u64,
    },
    /// A configuration field is out of range.
    #[error("pipeline config {field}: {reason}")]
    InvalidConfig {
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
}

impl From<OutOfRange> for PipelineError {
    fn from(error: OutOfRange) -> PipelineError {
        PipelineError::OutOfRange {
            field: error.field,
            got: error.got,
            min: error.min,
            max: error.max,
        }
    }
}

impl From<InvalidConfig> for PipelineError {
    fn from(error: InvalidConfig) -> PipelineError {
        PipelineError::InvalidConfig {
            field: error.field,
            reason: error.reason,
        }
    }
}

/// An external id's window: the transaction it names, until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalIdEntry {
    /// The transaction enqueued with it.
    pub transaction: TransactionId,
    /// Machine time the window ends.
    pub expires_at_ms: u64,
}

/// The pipelines' state: definitions, the transaction table with its derived indexes, external
/// ids, switches, webhooks, notifications and statistics. The indexes are kept by
/// `Pipelines::put` and `Pipelines::take`, the only ways a stored transaction changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pipelines {
    pub(crate) config: PipelineConfig,
    last_transaction_id: u64,
    last_claim_token: u64,
    last_queue_seq: u64,
    definitions: BTreeMap<PipelineName, Pipeline>,
    table: BTreeMap<TransactionId, Transaction>,
    external_ids: BTreeMap<ExternalId, ExternalIdEntry>,
    switches: BTreeMap<SwitchName, u64>,
    webhooks: Webhooks,
    notifications: Notifications,
    stats: Stats,
    /// Derived: `(expires_at_ms, external id)` of every external id.
    external_id_expiry: BTreeSet<(u64, ExternalId)>,
    /// Derived: per (node group, queue), `(seq, id)` of its queued transactions; no empty sets.
    queues: BTreeMap<(NodeGroup, QueueType), BTreeSet<(u64, TransactionId)>>,
    /// Derived: per node group with anything in play, its counts.
    groups: BTreeMap<NodeGroup, GroupCounts>,
    /// Derived: how many transactions have each status, in [`TxStatus::ALL`] order.
    status_counts: [usize; 8],
    /// Derived: `(started_at_ms, id)` of running transactions (the seed's `processingZ`).
    running_by_start: BTreeSet<(u64, TransactionId)>,
    /// Derived: `(deadline_ms, id)` of running transactions, for the reaper.
    running_by_deadline: BTreeSet<(u64, TransactionId)>,
    /// Derived: `(until_ms, id)` of sleeping transactions (the seed's `sleepingZ`).
    sleeping_by_time: BTreeSet<(u64, TransactionId)>,
    /// Derived: `(switch, id)` of transactions sleeping on a switch.
    sleeping_by_switch: BTreeSet<(SwitchName, TransactionId)>,
    /// Derived: `(completed_at_ms, id)` of finished transactions not archived yet (the seed's
    /// `toArchiveZ`).
    finished: BTreeSet<(u64, TransactionId)>,
    /// Derived: `(archived_at_ms, id)` of archived transactions.
    archived: BTreeSet<(u64, TransactionId)>,
    /// Derived: `(pipeline, id)` of transactions in play with a pipeline.
    in_play_by_pipeline: BTreeSet<(PipelineName, TransactionId)>,
    /// Derived: `(node group, id)` of transactions in play.
    in_play_by_group: BTreeSet<(NodeGroup, TransactionId)>,
}

/// What a snapshot stores of [`Pipelines`] (the indexes are rebuilt); written from references.
#[derive(Serialize)]
pub(crate) struct PipelineRecordsRef<'a> {
    config: &'a PipelineConfig,
    last_transaction_id: u64,
    last_claim_token: u64,
    last_queue_seq: u64,
    definitions: Vec<&'a Pipeline>,
    transactions: Vec<&'a Transaction>,
    external_ids: &'a BTreeMap<ExternalId, ExternalIdEntry>,
    switches: &'a BTreeMap<SwitchName, u64>,
    webhooks: WebhookRecordsRef<'a>,
    notifications: NotificationRecordsRef<'a>,
    stats: StatsRecordsRef<'a>,
}

/// What a snapshot stores of [`Pipelines`], as read back (a map encodes as its pairs; a
/// transaction as its record).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PipelineRecords {
    config: PipelineConfig,
    last_transaction_id: u64,
    last_claim_token: u64,
    last_queue_seq: u64,
    definitions: Vec<Pipeline>,
    transactions: Vec<TransactionRecord>,
    external_ids: Vec<(ExternalId, ExternalIdEntry)>,
    switches: Vec<(SwitchName, u64)>,
    webhooks: WebhookRecords,
    notifications: NotificationRecords,
    stats: StatsRecords,
}

impl Pipelines {
    pub(crate) fn apply(
        &mut self,
        command: PipelineCommand,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        match command {
            PipelineCommand::Define { name, node_group } => self.define(name, node_group, now_ms),
            PipelineCommand::Delete { name } => self.delete(name),
            PipelineCommand::Enqueue(new) => self.enqueue(new, now_ms, log_index),
            PipelineCommand::Requeue {
                transaction,
                token,
                route,
                queue,
                state,
                event,
            } => self.requeue(
                transaction,
                token,
                route,
                queue,
                state,
                event,
                now_ms,
                log_index,
            ),
            PipelineCommand::Dequeue {
                node_group,
                worker,
                max,
            } => self.dequeue(node_group, worker, max, now_ms, log_index),
            PipelineCommand::MarkReplied { transaction } => {
                self.mark_replied(transaction, now_ms, log_index)
            }
            PipelineCommand::Complete {
                transaction,
                token,
                status,
                state,
            } => self.complete(transaction, token, status, state, now_ms, log_index),
            PipelineCommand::Progress {
                transaction,
                token,
                report,
            } => self.progress(transaction, token, report, now_ms, log_index),
            PipelineCommand::Sleep {
                transaction,
                token,
                until_ms,
                switch,
                queue,
                state,
            } => {
                let slumber = Slumber {
                    until_ms,
                    switch,
                    queue,
                    since_ms: now_ms,
                };
                self.sleep(transaction, token, slumber, state, now_ms, log_index)
            }
            PipelineCommand::SetSwitch { name, value } => {
                self.set_switch(name, value, now_ms, log_index)
            }
            PipelineCommand::Cancel { transaction } => self.cancel(transaction, now_ms, log_index),
            PipelineCommand::TakeWebhooks { max } => {
                claims::within("max", max.into(), 1, PIPELINE_WEBHOOK_BATCH_MAX.into())?;
                Ok(PipelineReply::WebhooksTaken(self.webhooks.take(
                    max,
                    now_ms,
                    &self.config,
                )))
            }
            PipelineCommand::WebhookResult {
                event,
                attempt,
                outcome,
            } => {
                let settlement =
                    self.webhooks
                        .settle(event, attempt, outcome, now_ms, &self.config)?;
                Ok(PipelineReply::WebhookRecorded { event, settlement })
            }
            PipelineCommand::AcknowledgeNotices { up_to } => {
                Ok(PipelineReply::NoticesAcknowledged {
                    removed: self.webhooks.acknowledge(up_to),
                })
            }
            PipelineCommand::Configure(config) => {
                config.validate()?;
                self.config = config;
                Ok(PipelineReply::Configured)
            }
            PipelineCommand::EnqueueBatch(items) => {
                claims::within(
                    "items",
                    items.len() as u64,
                    1,
                    PIPELINE_ENQUEUE_BATCH_MAX as u64,
                )?;
                let answers = items
                    .into_iter()
                    .map(|new| self.enqueue(new, now_ms, log_index))
                    .collect();
                Ok(PipelineReply::Batch(answers))
            }
            PipelineCommand::CompleteBatch(items) => {
                claims::within(
                    "items",
                    items.len() as u64,
                    1,
                    PIPELINE_COMPLETE_BATCH_MAX as u64,
                )?;
                let answers = items
                    .into_iter()
                    .map(|item| {
                        self.complete(
                            item.transaction,
                            item.token,
                            item.status,
                            item.state,
                            now_ms,
                            log_index,
                        )
                    })
                    .collect();
                Ok(PipelineReply::Batch(answers))
            }
        }
    }

    fn define(
        &mut self,
        name: PipelineName,
        node_group: NodeGroup,
        now_ms: u64,
    ) -> Result<PipelineReply, PipelineError> {
        if let Some(existing) = self.definitions.get_mut(&name) {
            let previous = existing.node_group.clone();
            if previous != node_group {
                existing.node_group = node_group;
                existing.defined_at_ms = now_ms;
            }
            return Ok(PipelineReply::Defined {
                previous: Some(previous),
            });
        }
        if self.definitions.len() >= PIPELINES_MAX {
            return Err(PipelineError::TooMany {
                what: "pipelines".to_owned(),
                max: PIPELINES_MAX as u64,
                hint: "delete pipelines no longer used".to_owned(),
            });
        }
        self.definitions.insert(
            name.clone(),
            Pipeline {
                name,
                node_group,
                defined_at_ms: now_ms,
            },
        );
        Ok(PipelineReply::Defined { previous: None })
    }

    fn delete(&mut self, name: PipelineName) -> Result<PipelineReply, PipelineError> {
        if !self.definitions.contains_key(&name) {
            return Ok(PipelineReply::Deleted { existed: false });
        }
        let in_play = self.in_play_of(&name);
        if in_play > 0 {
            return Err(PipelineError::PipelineInUse { name, in_play });
        }
        self.definitions.remove(&name);
        Ok(PipelineReply::Deleted { existed: true })
    }

    fn enqueue(
        &mut self,
        new: NewTransaction,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        // 1. An external id taken within its window answers the transaction that took it.
        if let Some(external_id) = &new.external_id
            && let Some(entry) = self.live_external_id(external_id, now_ms)
        {
            return Ok(PipelineReply::Enqueued {
                transaction: entry.transaction,
                duplicate: true,
            });
        }
        // 3. The node group comes from the pipeline.
        let (pipeline, node_group) = match new.route {
            Route::Pipeline(name) => {
                let node_group = self.node_group_of(&name)?;
                (Some(name), node_group)
            }
            Route::NodeGroup(node_group) => (None, node_group),
        };
        let max = self
            .config
            .transactions_max
            .min(PIPELINE_TRANSACTIONS_MAX as u64);
        if self.table.len() as u64 >= max {
            return Err(PipelineError::TooMany {
                what: "transactions".to_owned(),
                max,
                hint: "wait for finished transactions to be archived and deleted, or raise \
                       transactions_max"
                    .to_owned(),
            });
        }
        if let Some(external_id) = &new.external_id
            && !self.external_ids.contains_key(external_id)
            && self.external_ids.len() >= PIPELINE_EXTERNAL_IDS_MAX
        {
            return Err(PipelineError::TooMany {
                what: "external ids".to_owned(),
                max: PIPELINE_EXTERNAL_IDS_MAX as u64,
                hint: "wait for external-id windows to end, or shorten external_id_window_ms"
                    .to_owned(),
            });
        }
        self.last_transaction_id = claims::issue(self.last_transaction_id, log_index);
        let id = TransactionId(self.last_transaction_id);
        // 2. A new id is queued nowhere yet; (7.) nor is it processing.
        assert!(!self.table.contains_key(&id), "transaction ids are fresh");
        if let Some(external_id) = &new.external_id {
            self.set_external_id(
                external_id.clone(),
                ExternalIdEntry {
                    transaction: id,
                    expires_at_ms: now_ms.saturating_add(self.config.external_id_window_ms),
                },
            );
        }
        // 4.–6. Save the state and queue the event.
        let queued = self.queue_entry(new.queue, now_ms);
        self.put(Transaction {
            id,
            owner: new.owner,
            external_id: new.external_id,
            pipeline,
            node_group,
            place: Place::Queued(queued),
            state: new.state,
            event: new.event,
            metadata: new.metadata,
            progress: None,
            created_at_ms: now_ms,
            attempts: 0,
            last_started_at_ms: None,
            notified_at_ms: None,
            last_step: None,
            version: id.0,
        });
        // 8. Statistics.
        let pipeline = self.table[&id].pipeline.clone();
        self.stats
            .record(pipeline.as_ref(), Counted::Enqueued, now_ms);
        Ok(PipelineReply::Enqueued {
            transaction: id,
            duplicate: false,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn requeue(
        &mut self,
        id: TransactionId,
        token: u64,
        route: Option<Route>,
        queue: QueueType,
        state: Option<JsonDocument>,
        event: Option<JsonDocument>,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        let tx = match self.held(id, token)? {
            Held::Retry(reply) => return Ok(reply),
            Held::Current(tx) => tx,
        };
        if tx.cancel_requested() {
            return Err(PipelineError::CancelRequested { transaction: id });
        }
        let mut next = tx.clone();
        match route {
            Some(Route::Pipeline(name)) => {
                next.node_group = self.node_group_of(&name)?;
                next.pipeline = Some(name);
            }
            Some(Route::NodeGroup(node_group)) => next.node_group = node_group,
            None => {}
        }
        next.place = Place::Queued(self.queue_entry(queue, now_ms));
        next.attempts = 0;
        if let Some(state) = state {
            next.state = state;
        }
        if event.is_some() {
            next.event = event;
        }
        let reply = PipelineReply::Requeued {
            transaction: id,
            node_group: next.node_group.clone(),
            queue,
        };
        self.stats
            .record(next.pipeline.as_ref(), Counted::Requeued, now_ms);
        Ok(self.end_step(next, token, reply, log_index))
    }

    fn dequeue(
        &mut self,
        node_group: NodeGroup,
        worker: WorkerId,
        max: u32,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        claims::within("max", max.into(), 1, PIPELINE_DEQUEUE_BATCH_MAX.into())?;
        let mut picked: Vec<(QueueType, TransactionId)> = Vec::new();
        for queue in QueueType::PRIORITY {
            let room = max as usize - picked.len();
            if let Some(entries) = self.queues.get(&(node_group.clone(), queue)) {
                picked.extend(entries.iter().take(room).map(|&(_, id)| (queue, id)));
            }
        }
        if picked.is_empty() {
            return Ok(PipelineReply::Dequeued(Vec::new()));
        }
        self.last_claim_token = claims::issue(self.last_claim_token, log_index);
        let token = self.last_claim_token;
        let deadline_ms = claims::deadline(now_ms, self.config.running_timeout_ms);
        let mut dequeued = Vec::with_capacity(picked.len());
        for (queue, id) in picked {
            let mut tx = self.take(id);
            // Cancel takes a queued transaction out of its queue in the same command, so every
            // transaction found in a queue is queued (claiming asserts it).
            tx.place = tx.place.claim(|entry| {
                assert_eq!(
                    entry.queue, queue,
                    "transaction {id} is where its queue says"
                );
                Running {
                    claim: TxClaim {
                        worker: worker.clone(),
                        token,
                        started_at_ms: now_ms,
                        deadline_ms,
                        queue,
                    },
                    cancel_requested: false,
                }
            });
            tx.attempts = claims::count_attempt(tx.attempts);
            tx.last_started_at_ms = Some(now_ms);
            tx.version = next_version(tx.version, log_index);
            self.stats
                .record(tx.pipeline.as_ref(), Counted::Dequeued, now_ms);
            dequeued.push(tx.clone());
            self.put(tx);
        }
        Ok(PipelineReply::Dequeued(dequeued))
    }

    fn mark_replied(
        &mut self,
        id: TransactionId,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        self.get_known(id)?;
        let mut tx = self.take(id);
        tx.notified_at_ms = Some(now_ms);
        tx.version = next_version(tx.version, log_index);
        let webhook_cancelled = tx.status().is_terminal()
            && tx.metadata.cancel_webhook_on_longpoll
            && self.webhooks.cancel_for(id);
        self.put(tx.clone());
        Ok(PipelineReply::Replied {
            transaction: Box::new(tx),
            webhook_cancelled,
        })
    }

    fn complete(
        &mut self,
        id: TransactionId,
        token: u64,
        status: TxStatus,
        state: Option<JsonDocument>,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        let tx = match self.held(id, token)? {
            Held::Retry(reply) => return Ok(reply),
            Held::Current(tx) => tx,
        };
        let Some(final_status) = FinalStatus::of(status) else {
            return Err(PipelineError::NotTerminal { status });
        };
        let mut next = tx.clone();
        if let Some(state) = state {
            next.state = state;
        }
        finish(&mut next, final_status, now_ms);
        let reply = PipelineReply::Completed {
            transaction: id,
            status,
        };
        let reply = self.end_step(next, token, reply, log_index);
        self.announce_finish(id, now_ms, log_index);
        Ok(reply)
    }

    fn progress(
        &mut self,
        id: TransactionId,
        token: u64,
        report: JsonDocument,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        let tx = self.get_known(id)?;
        if tx.claim().is_none_or(|claim| claim.token != token) {
            return Err(stale(tx, token));
        }
        let mut tx = self.take(id);
        let deadline_ms = claims::deadline(now_ms, self.config.running_timeout_ms);
        let running = tx.place.claimed_mut().expect("checked above");
        running.claim.deadline_ms = deadline_ms;
        let cancel_requested = running.cancel_requested;
        tx.progress = Some(report);
        tx.version = next_version(tx.version, log_index);
        let reply = PipelineReply::ProgressRecorded {
            transaction: id,
            deadline_ms,
            cancel_requested,
        };
        if let Some(url) = &tx.metadata.webhook_url
            && tx.metadata.progress_reports
        {
            self.webhooks
                .schedule(id, url, WebhookKind::Progress, now_ms, log_index);
        }
        self.notifications.push(
            id,
            tx.node_group.clone(),
            NotificationKind::Progress,
            now_ms,
        );
        self.put(tx);
        Ok(reply)
    }

    fn sleep(
        &mut self,
        id: TransactionId,
        token: u64,
        slumber: Slumber,
        state: Option<JsonDocument>,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        let tx = match self.held(id, token)? {
            Held::Retry(reply) => return Ok(reply),
            Held::Current(tx) => tx,
        };
        if tx.cancel_requested() {
            return Err(PipelineError::CancelRequested { transaction: id });
        }
        claims::within(
            "until_ms",
            slumber.until_ms,
            0,
            now_ms.saturating_add(PIPELINE_SLEEP_MS_MAX),
        )?;
        if let Some(switch) = &slumber.switch {
            let sleepers = self.sleepers_on(switch).count();
            if sleepers >= PIPELINE_SWITCH_SLEEPERS_MAX {
                return Err(PipelineError::TooMany {
                    what: format!("transactions sleeping on switch {switch}"),
                    max: PIPELINE_SWITCH_SLEEPERS_MAX as u64,
                    hint: "set the switch to wake them, or sleep on another switch".to_owned(),
                });
            }
        }
        let mut next = tx.clone();
        let reply = PipelineReply::Sleeping {
            transaction: id,
            until_ms: slumber.until_ms,
        };
        next.place = Place::Asleep(slumber);
        if let Some(state) = state {
            next.state = state;
        }
        Ok(self.end_step(next, token, reply, log_index))
    }

    fn set_switch(
        &mut self,
        name: SwitchName,
        value: u64,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        let current = self.switches.get(&name).copied().unwrap_or(0);
        if value == current {
            return Ok(PipelineReply::SwitchSet {
                changed: false,
                woken: Vec::new(),
            });
        }
        if current == 0 && self.switches.len() >= PIPELINE_SWITCHES_MAX {
            return Err(PipelineError::TooMany {
                what: "switches set".to_owned(),
                max: PIPELINE_SWITCHES_MAX as u64,
                hint: "set unused switches back to 0".to_owned(),
            });
        }
        if value == 0 {
            self.switches.remove(&name);
        } else {
            self.switches.insert(name.clone(), value);
        }
        let woken: Vec<TransactionId> = self.sleepers_on(&name).collect();
        for &id in &woken {
            self.wake(id, now_ms, log_index);
        }
        Ok(PipelineReply::SwitchSet {
            changed: true,
            woken,
        })
    }

    fn cancel(
        &mut self,
        id: TransactionId,
        now_ms: u64,
        log_index: u64,
    ) -> Result<PipelineReply, PipelineError> {
        let tx = self.get_known(id)?;
        let outcome = match &tx.place {
            Place::Queued(_) | Place::Asleep(_) => {
                let mut tx = self.take(id);
                finish(&mut tx, FinalStatus::Aborted, now_ms);
                tx.version = next_version(tx.version, log_index);
                self.put(tx);
                self.announce_finish(id, now_ms, log_index);
                CancelOutcome::Aborted
            }
            Place::Claimed(running) if running.cancel_requested => CancelOutcome::AlreadyRequested,
            Place::Claimed(_) => {
                let mut tx = self.take(id);
                let running = tx.place.claimed_mut().expect("matched above");
                running.cancel_requested = true;
                tx.version = next_version(tx.version, log_index);
                self.put(tx);
                CancelOutcome::Requested
            }
            Place::Ended(finished) => CancelOutcome::Finished {
                status: finished.status.into(),
            },
        };
        Ok(PipelineReply::Cancelled {
            transaction: id,
            outcome,
        })
    }

    /// Reaps running transactions past their deadline, wakes sleepers whose time came,
    /// archives finished transactions past the archive delay, deletes archived ones past the
    /// retention, ends external-id windows, forgets URL failure records and prunes statistics,
    /// in that order, each step touching at most [`PIPELINE_TICK_BATCH_MAX`] entries.
    pub(crate) fn tick(&mut self, now_ms: u64, log_index: u64) -> PipelineTickReport {
        let mut report = PipelineTickReport::default();
        let config = self.config;
        let mut sweep = Sweep::new(now_ms, PIPELINE_TICK_BATCH_MAX);
        let mut more = false;
        let mut reaped = 0;
        while let Some(id) = sweep.next(&self.running_by_deadline, 0, reaped) {
            reaped += 1;
            let mut tx = self.take(id);
            tx.version = next_version(tx.version, log_index);
            let terminal = if tx.cancel_requested() {
                Some(FinalStatus::Aborted)
            } else if claims::exhausted(tx.attempts, config.max_attempts) {
                Some(FinalStatus::Timeout)
            } else {
                None
            };
            match terminal {
                Some(status) => {
                    finish(&mut tx, status, now_ms);
                    self.put(tx);
                    self.announce_finish(id, now_ms, log_index);
                    match status {
                        FinalStatus::Aborted => report.aborted.push(id),
                        _ => report.timed_out.push(id),
                    }
                }
                None => {
                    let running = tx.place.into_claimed();
                    tx.place = Place::Queued(self.queue_entry(running.claim.queue, now_ms));
                    self.stats
                        .record(tx.pipeline.as_ref(), Counted::Retried, now_ms);
                    self.put(tx);
                    report.retried.push(id);
                }
            }
        }
        while let Some(id) = sweep.next(&self.sleeping_by_time, 0, report.woken.len()) {
            self.wake(id, now_ms, log_index);
            report.woken.push(id);
        }
        while let Some(id) = sweep.next(
            &self.finished,
            config.archive_delay_ms,
            report.archived.len(),
        ) {
            let mut tx = self.take(id);
            let Place::Ended(finished) = &mut tx.place else {
                unreachable!("the finished set holds finished transactions")
            };
            finished.archived_at_ms = Some(now_ms);
            tx.version = next_version(tx.version, log_index);
            self.put(tx);
            report.archived.push(id);
        }
        while let Some(id) = sweep.next(
            &self.archived,
            config.archive_retention_ms,
            report.deleted.len(),
        ) {
            self.take(id);
            report.deleted.push(id);
        }
        while let Some((expires_at_ms, external_id)) = self.external_id_expiry.first().cloned()
            && expires_at_ms <= now_ms
        {
            if report.external_ids_expired == PIPELINE_TICK_BATCH_MAX {
                more = true;
                break;
            }
            self.external_id_expiry
                .remove(&(expires_at_ms, external_id.clone()));
            self.external_ids.remove(&external_id);
            report.external_ids_expired += 1;
        }
        let (urls_forgotten, urls_left) =
            self.webhooks.forget_urls(now_ms, PIPELINE_TICK_BATCH_MAX);
        report.urls_forgotten = urls_forgotten;
        report.stats_rows_pruned = self.stats.prune(now_ms, PIPELINE_TICK_BATCH_MAX);
        report.more = sweep.more() || more || urls_left || self.stats.has_expired(now_ms);
        report
    }

    // Steps.

    /// The claim token rules ([`claims::held`]) on transaction `id`.
    fn held(&self, id: TransactionId, token: u64) -> Result<Held<'_, Transaction>, PipelineError> {
        let tx = self.get_known(id)?;
        claims::held(tx, token).ok_or_else(|| stale(tx, token))
    }

    /// Ends the claim `token` on `next` (the running transaction, moved by the step out of its
    /// claim) with `reply`, remembered for retries, and stores it.
    fn end_step(
        &mut self,
        mut next: Transaction,
        token: u64,
        reply: PipelineReply,
        log_index: u64,
    ) -> PipelineReply {
        let previous = self.take(next.id);
        let reply = claims::end(&previous, &mut next, token, reply);
        next.version = next_version(previous.version, log_index);
        self.put(next);
        reply
    }

    /// What finishing a transaction sets in motion: its webhook, a completion notification and
    /// the statistics.
    fn announce_finish(&mut self, id: TransactionId, now_ms: u64, log_index: u64) {
        let tx = &self.table[&id];
        let status = tx.status();
        assert!(
            status.is_terminal(),
            "transaction {id} finished as {status}"
        );
        if let Some(url) = &tx.metadata.webhook_url {
            self.webhooks.schedule(
                id,
                url,
                WebhookKind::Completed { status },
                now_ms,
                log_index,
            );
        }
        self.notifications.push(
            id,
            tx.node_group.clone(),
            NotificationKind::Completed { status },
            now_ms,
        );
        self.stats
            .record(tx.pipeline.as_ref(), Counted::Finished(status), now_ms);
    }

    /// Queues a sleeping transaction again, on the queue it chose when it fell asleep.
    fn wake(&mut self, id: TransactionId, now_ms: u64, log_index: u64) {
        let mut tx = self.take(id);
        let Place::Asleep(slumber) = tx.place else {
            unreachable!("only a sleeping transaction wakes")
        };
        tx.place = Place::Queued(self.queue_entry(slumber.queue, now_ms));
        tx.attempts = 0;
        tx.version = next_version(tx.version, log_index);
        self.stats
            .record(tx.pipeline.as_ref(), Counted::Woken, now_ms);
        self.put(tx);
    }

    /// The next position in `queue`: positions only grow, so each queue is first in, first out.
    fn queue_entry(&mut self, queue: QueueType, now_ms: u64) -> QueueEntry {
        self.last_queue_seq = self
            .last_queue_seq
            .checked_add(1)
            .expect("fewer than 2^64 queue positions are issued");
        QueueEntry {
            queue,
            seq: self.last_queue_seq,
            at_ms: now_ms,
        }
    }

    fn node_group_of(&self, name: &PipelineName) -> Result<NodeGroup, PipelineError> {
        self.definitions
            .get(name)
            .map(|pipeline| pipeline.node_group.clone())
            .ok_or_else(|| PipelineError::UnknownPipeline { name: name.clone() })
    }

    fn live_external_id(&self, external_id: &ExternalId, now_ms: u64) -> Option<ExternalIdEntry> {
        self.external_ids
            .get(external_id)
            .filter(|entry| entry.expires_at_ms > now_ms)
            .copied()
    }

    /// Takes `external_id` for a new window, replacing an ended one the tick has not removed.
    fn set_external_id(&mut self, external_id: ExternalId, entry: ExternalIdEntry) {
        if let Some(old) = self.external_ids.remove(&external_id) {
            let removed = self
                .external_id_expiry
                .remove(&(old.expires_at_ms, external_id.clone()));
            assert!(
                removed,
                "external id {external_id} was indexed by its expiry"
            );
        }
        self.external_id_expiry
            .insert((entry.expires_at_ms, external_id.clone()));
        self.external_ids.insert(external_id, entry);
    }

    fn sleepers_on<'a>(
        &'a self,
        switch: &'a SwitchName,
    ) -> impl Iterator<Item = TransactionId> + 'a {
        self.sleeping_by_switch
            .range((switch.clone(), TransactionId(0))..=(switch.clone(), TransactionId(u64::MAX)))
            .map(|(_, id)| *id)
    }

    fn in_play_of(&self, pipeline: &PipelineName) -> usize {
        self.in_play_by_pipeline
            .range(
                (pipeline.clone(), TransactionId(0))..=(pipeline.clone(), TransactionId(u64::MAX)),
            )
            .count()
    }

    // Reads.

    pub(crate) fn definition(&self, name: &PipelineName) -> Option<&Pipeline> {
        self.definitions.get(name)
    }

    pub(crate) fn definitions(&self, after: Option<&PipelineName>, limit: usize) -> Vec<&Pipeline> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.definitions
            .range::<PipelineName, _>((from, Bound::Unbounded))
            .map(|(_, pipeline)| pipeline)
            .take(limit.min(LIST_PAGE_MAX))
            .collect()
    }

    pub(crate) fn get(&self, id: TransactionId) -> Option<&Transaction> {
        self.table.get(&id)
    }

    pub(crate) fn by_external_id(
        &self,
        external_id: &ExternalId,
        now_ms: u64,
    ) -> Option<&Transaction> {
        self.live_external_id(external_id, now_ms)
            .and_then(|entry| self.table.get(&entry.transaction))
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) transactions of `queue` in dequeue order.
    pub(crate) fn queue(
        &self,
        node_group: &NodeGroup,
        queue: QueueType,
        limit: usize,
    ) -> Vec<&Transaction> {
        self.queues
            .get(&(node_group.clone(), queue))
            .into_iter()
            .flatten()
            .take(limit.min(LIST_PAGE_MAX))
            .map(|(_, id)| &self.table[id])
            .collect()
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) in-play transactions of `node_group`, in id
    /// order, after `after`.
    pub(crate) fn in_play(
        &self,
        node_group: &NodeGroup,
        after: Option<TransactionId>,
        limit: usize,
    ) -> Vec<&Transaction> {
        let from = match after {
            Some(id) => Bound::Excluded((node_group.clone(), id)),
            None => Bound::Included((node_group.clone(), TransactionId(0))),
        };
        self.in_play_by_group
            .range((
                from,
                Bound::Included((node_group.clone(), TransactionId(u64::MAX))),
            ))
            .take(limit.min(LIST_PAGE_MAX))
            .map(|(_, id)| &self.table[id])
            .collect()
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) transactions running since at least
    /// `min_running_ms` before `now_ms`, longest running first.
    pub(crate) fn stuck(
        &self,
        min_running_ms: u64,
        now_ms: u64,
        limit: usize,
    ) -> Vec<&Transaction> {
        let started_by_ms = now_ms.saturating_sub(min_running_ms);
        self.running_by_start
            .range(..=(started_by_ms, TransactionId(u64::MAX)))
            .take(limit.min(LIST_PAGE_MAX))
            .map(|(_, id)| &self.table[id])
            .collect()
    }

    pub(crate) fn group_counts(&self, node_group: &NodeGroup) -> GroupCounts {
        self.groups.get(node_group).copied().unwrap_or_default()
    }

    pub(crate) fn node_groups(&self) -> impl Iterator<Item = (&NodeGroup, &GroupCounts)> {
        self.groups.iter()
    }

    pub(crate) fn status_count(&self, status: TxStatus) -> usize {
        self.status_counts[status.slot()]
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) archived transactions after `after` (`None`:
    /// from the oldest kept) in `(archived_at_ms, id)` order, only those archived before
    /// `settled_before_ms`.
    pub(crate) fn archived(
        &self,
        after: Option<ArchiveCursor>,
        settled_before_ms: u64,
        limit: usize,
    ) -> Vec<&Transaction> {
        let end = (settled_before_ms, TransactionId(0));
        let from = match after {
            // `range` panics on an empty range whose ends cross or are both excluded.
            Some(cursor) if cursor.key() >= end => return Vec::new(),
            Some(cursor) => Bound::Excluded(cursor.key()),
            None => Bound::Unbounded,
        };
        let page: Vec<&Transaction> = self
            .archived
            .range((from, Bound::Excluded(end)))
            .take(limit.min(LIST_PAGE_MAX))
            .map(|(_, id)| &self.table[id])
            .collect();
        assert!(page.iter().all(|tx| {
            let cursor = ArchiveCursor::after(tx).expect("the archive holds archived transactions");
            after.is_none_or(|after| cursor > after) && cursor.archived_at_ms < settled_before_ms
        }));
        page
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn switch(&self, name: &SwitchName) -> u64 {
        self.switches.get(name).copied().unwrap_or(0)
    }

    pub(crate) fn webhooks(&self) -> &Webhooks {
        &self.webhooks
    }

    pub(crate) fn notifications(&self) -> &Notifications {
        &self.notifications
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    // Storage.

    fn get_known(&self, id: TransactionId) -> Result<&Transaction, PipelineError> {
        self.table
            .get(&id)
            .ok_or(PipelineError::UnknownTransaction { transaction: id })
    }

    /// Removes a transaction from the table and every index.
    fn take(&mut self, id: TransactionId) -> Transaction {
        let tx = self
            .table
            .remove(&id)
            .expect("take is called on a stored transaction");
        self.unindex(&tx);
        tx
    }

    /// Stores a transaction that is not stored, indexing it.
    fn put(&mut self, tx: Transaction) {
        self.index(&tx)
            .expect("a transaction apply makes has one place and fresh index entries");
        let previous = self.table.insert(tx.id, tx);
        assert!(previous.is_none(), "put is called on a missing transaction");
    }

    fn index(&mut self, tx: &Transaction) -> Result<(), String> {
        let id = tx.id;
        let fresh = |inserted: bool, index: &str| {
            if inserted {
                Ok(())
            } else {
                Err(format!("transaction {id} is in the {index} index twice"))
            }
        };
        self.status_counts[tx.status().slot()] += 1;
        match &tx.place {
            Place::Queued(entry) => {
                let entries = self
                    .queues
                    .entry((tx.node_group.clone(), entry.queue))
                    .or_default();
                fresh(entries.insert((entry.seq, id)), "queue")?;
            }
            Place::Claimed(Running { claim, .. }) => {
                fresh(
                    self.running_by_start.insert((claim.started_at_ms, id)),
                    "processing",
                )?;
                fresh(
                    self.running_by_deadline.insert((claim.deadline_ms, id)),
                    "deadline",
                )?;
            }
            Place::Asleep(slumber) => {
                fresh(
                    self.sleeping_by_time.insert((slumber.until_ms, id)),
                    "sleeping",
                )?;
                if let Some(switch) = &slumber.switch {
                    fresh(
                        self.sleeping_by_switch.insert((switch.clone(), id)),
                        "switch",
                    )?;
                }
            }
            Place::Ended(Finished {
                completed_at_ms,
                archived_at_ms: None,
                ..
            }) => {
                fresh(self.finished.insert((*completed_at_ms, id)), "finished")?;
            }
            Place::Ended(Finished {
                archived_at_ms: Some(archived_at_ms),
                ..
            }) => {
                fresh(self.archived.insert((*archived_at_ms, id)), "archive")?;
            }
        }
        if tx.place.in_play() {
            fresh(
                self.in_play_by_group.insert((tx.node_group.clone(), id)),
                "in-play",
            )?;
            if let Some(pipeline) = &tx.pipeline {
                fresh(
                    self.in_play_by_pipeline.insert((pipeline.clone(), id)),
                    "pipeline",
                )?;
            }
            let counts = self.groups.entry(tx.node_group.clone()).or_default();
            *counts.of(&tx.place) += 1;
        }
        Ok(())
    }

    fn unindex(&mut self, tx: &Transaction) {
        let id = tx.id;
        self.status_counts[tx.status().slot()] -= 1;
        let mut removed = match &tx.place {
            Place::Queued(entry) => {
                let key = (tx.node_group.clone(), entry.queue);
                let entries = self
                    .queues
                    .get_mut(&key)
                    .expect("a queued transaction's queue exists");
                let removed = entries.remove(&(entry.seq, id));
                if entries.is_empty() {
                    self.queues.remove(&key);
                }
                removed
            }
            Place::Claimed(Running { claim, .. }) => {
                self.running_by_start.remove(&(claim.started_at_ms, id))
                    & self.running_by_deadline.remove(&(claim.deadline_ms, id))
            }
            Place::Asleep(slumber) => {
                let on_switch = match &slumber.switch {
                    Some(switch) => self.sleeping_by_switch.remove(&(switch.clone(), id)),
                    None => true,
                };
                self.sleeping_by_time.remove(&(slumber.until_ms, id)) & on_switch
            }
            Place::Ended(Finished {
                completed_at_ms,
                archived_at_ms: None,
                ..
            }) => self.finished.remove(&(*completed_at_ms, id)),
            Place::Ended(Finished {
                archived_at_ms: Some(archived_at_ms),
                ..
            }) => self.archived.remove(&(*archived_at_ms, id)),
        };
        if tx.place.in_play() {
            removed &= self.in_play_by_group.remove(&(tx.node_group.clone(), id));
            if let Some(pipeline) = &tx.pipeline {
                removed &= self.in_play_by_pipeline.remove(&(pipeline.clone(), id));
            }
            let counts = self
                .groups
                .get_mut(&tx.node_group)
                .expect("an in-play transaction's group is counted");
            *counts.of(&tx.place) -= 1;
            if counts.is_empty() {
                self.groups.remove(&tx.node_group);
            }
        }
        assert!(removed, "transaction {id} was indexed as its place says");
    }

    // Snapshots and invariants.

    pub(crate) fn records(&self) -> PipelineRecordsRef<'_> {
        PipelineRecordsRef {
            config: &self.config,
            last_transaction_id: self.last_transaction_id,
            last_claim_token: self.last_claim_token,
            last_queue_seq: self.last_queue_seq,
            definitions: self.definitions.values().collect(),
            transactions: self.table.values().collect(),
            external_ids: &self.external_ids,
            switches: &self.switches,
            webhooks: self.webhooks.records(),
            notifications: self.notifications.records(),
            stats: self.stats.records(),
        }
    }

    /// Rebuilds the state and its indexes from snapshot records; refuses duplicates, records
    /// out of order and transactions whose fields put them nowhere. `Pipelines::check` does the
    /// rest.
    pub(crate) fn from_records(records: PipelineRecords) -> Result<Pipelines, String> {
        let mut pipelines = Pipelines {
            config: records.config,
            last_transaction_id: records.last_transaction_id,
            last_claim_token: records.last_claim_token,
            last_queue_seq: records.last_queue_seq,
            webhooks: Webhooks::from_records(records.webhooks)?,
            notifications: Notifications::from_records(records.notifications)?,
            stats: Stats::from_records(records.stats)?,
            ..Pipelines::default()
        };
        for pipeline in records.definitions {
            if pipelines.definitions.contains_key(&pipeline.name) {
                return Err(format!("pipeline {} appears twice", pipeline.name));
            }
            pipelines
                .definitions
                .insert(pipeline.name.clone(), pipeline);
        }
        for record in records.transactions {
            if pipelines.table.contains_key(&record.id) {
                return Err(format!("transaction {} appears twice", record.id));
            }
            let tx = Transaction::try_from(record)?;
            pipelines.index(&tx)?;
            pipelines.table.insert(tx.id, tx);
        }
        for (external_id, entry) in records.external_ids {
            if pipelines.external_ids.contains_key(&external_id) {
                return Err(format!("external id {external_id} appears twice"));
            }
            pipelines.set_external_id(external_id, entry);
        }
        for (name, value) in records.switches {
            if pipelines.switches.insert(name.clone(), value).is_some() {
                return Err(format!("switch {name} appears twice"));
            }
        }
        Ok(pipelines)
    }

    /// Every invariant of the pipelines, against the machine clock.
    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        self.config.validate().map_err(|e| e.to_string())?;
        if self.table.len() > PIPELINE_TRANSACTIONS_MAX
            || self.definitions.len() > PIPELINES_MAX
            || self.external_ids.len() > PIPELINE_EXTERNAL_IDS_MAX
            || self.switches.len() > PIPELINE_SWITCHES_MAX
        {
            return Err(
                "more transactions, pipelines, external ids or switches than their \
                        bounds"
                    .to_owned(),
            );
        }
        for (name, pipeline) in &self.definitions {
            if *name != pipeline.name || pipeline.defined_at_ms > clock_ms {
                return Err(format!(
                    "pipeline {name} is misfiled or defined after the clock"
                ));
            }
        }
        // Rebuild every index and counter from the fields and compare: equal indexes hold
        // exactly what the transactions say, so each is in exactly one place.
        let mut rebuilt = Pipelines::default();
        let mut seqs = BTreeSet::new();
        for (id, tx) in &self.table {
            if *id != tx.id {
                return Err(format!("transaction {} is filed under {id}", tx.id));
            }
            self.check_transaction(tx, clock_ms)?;
            if let Some(entry) = tx.queued()
                && !seqs.insert(entry.seq)
            {
                return Err(format!("queue position {} is taken twice", entry.seq));
            }
            rebuilt.index(tx)?;
        }
        let indexes_agree = rebuilt.queues == self.queues
            && rebuilt.groups == self.groups
            && rebuilt.status_counts == self.status_counts
            && rebuilt.running_by_start == self.running_by_start
            && rebuilt.running_by_deadline == self.running_by_deadline
            && rebuilt.sleeping_by_time == self.sleeping_by_time
            && rebuilt.sleeping_by_switch == self.sleeping_by_switch
            && rebuilt.finished == self.finished
            && rebuilt.archived == self.archived
            && rebuilt.in_play_by_pipeline == self.in_play_by_pipeline
            && rebuilt.in_play_by_group == self.in_play_by_group;
        if !indexes_agree {
            return Err(
                "the transaction indexes or counters differ from what the transactions \
                        say"
                .to_owned(),
            );
        }
        for (pipeline, id) in &self.in_play_by_pipeline {
            if !self.definitions.contains_key(pipeline) {
                return Err(format!(
                    "transaction {id} is in play in pipeline {pipeline}, which is not defined"
                ));
            }
        }
        for (name, value) in &self.switches {
            if *value == 0 {
                return Err(format!("switch {name} is stored at 0"));
            }
        }
        let mut sleepers: BTreeMap<&SwitchName, usize> = BTreeMap::new();
        for (name, _) in &self.sleeping_by_switch {
            let count = sleepers.entry(name).or_default();
            *count += 1;
            if *count > PIPELINE_SWITCH_SLEEPERS_MAX {
                return Err(format!("switch {name} has too many sleepers"));
            }
        }
        let mut expiry = BTreeSet::new();
        for (external_id, entry) in &self.external_ids {
            let sound = entry.transaction.0 > 0
                && entry.transaction.0 <= self.last_transaction_id
                && entry.expires_at_ms
                    <= clock_ms.saturating_add(PIPELINE_EXTERNAL_ID_WINDOW_MS_MAX);
            let carried = self
                .table
                .get(&entry.transaction)
                .is_none_or(|tx| tx.external_id.as_ref() == Some(external_id));
            if !sound || !carried {
                return Err(format!(
                    "external id {external_id} names transaction {} wrongly",
                    entry.transaction
                ));
            }
            expiry.insert((entry.expires_at_ms, external_id.clone()));
        }
        if expiry != self.external_id_expiry {
            return Err("the external-id expiry index differs from the external ids".to_owned());
        }
        self.webhooks.check(clock_ms)?;
        self.notifications.check(clock_ms)?;
        self.stats.check(clock_ms)?;
        Ok(())
    }

    fn check_transaction(&self, tx: &Transaction, clock_ms: u64) -> Result<(), String> {
        let id = tx.id;
        let fail = |what: String| Err(format!("transaction {id}: {what}"));
        if id.0 == 0 || id.0 > self.last_transaction_id || tx.version < id.0 {
            return fail(format!(
                "the id is not in 1..={} (the last issued) or the version is below it",
                self.last_transaction_id
            ));
        }
        let claim = tx.claim();
        let not_future = [
            Some(tx.created_at_ms),
            tx.last_started_at_ms,
            tx.completed_at_ms(),
            tx.notified_at_ms,
            tx.archived_at_ms(),
            tx.queued().map(|entry| entry.at_ms),
            claim.map(|claim| claim.started_at_ms),
            tx.sleep().map(|slumber| slumber.since_ms),
        ]
        .into_iter()
        .flatten()
        .all(|at_ms| tx.created_at_ms <= at_ms && at_ms <= clock_ms);
        if !not_future {
            return fail(format!(
                "a time is before its creation or after the clock ({clock_ms})"
            ));
        }
        if let Some(entry) = tx.queued()
            && (entry.seq == 0 || entry.seq > self.last_queue_seq)
        {
            return fail(format!(
                "queue position {} is not in 1..={}",
                entry.seq, self.last_queue_seq
            ));
        }
        claims::check(
            tx,
            self.last_claim_token,
            clock_ms,
            PIPELINE_RUNNING_TIMEOUT_MS_MAX,
        )
        .or_else(fail)?;
        if let Some(claim) = claim
            && (claim.deadline_ms < claim.started_at_ms
                || tx.attempts == 0
                || tx.last_started_at_ms != Some(claim.started_at_ms))
        {
            return fail("its claim's deadline, start or attempt count is off".to_owned());
        }
        if let Some(slumber) = tx.sleep()
            && slumber.until_ms > clock_ms.saturating_add(PIPELINE_SLEEP_MS_MAX)
        {
            return fail("it sleeps longer than any sleep allows".to_owned());
        }
        if let Some(step) = &tx.last_step {
            let is_step_reply = matches!(
                step.reply,
                PipelineReply::Completed { transaction, .. }
                | PipelineReply::Requeued { transaction, .. }
                | PipelineReply::Sleeping { transaction, .. } if transaction == id
            );
            if !is_step_reply {
                return fail(format!(
                    "its last step (token {}) is not a step of it",
                    step.token
                ));
            }
        }
        if tx.progress.is_some() && tx.last_started_at_ms.is_none() {
            return fail("it has a progress report but never ran".to_owned());
        }
        if tx.completed_at_ms().is_some() && tx.event.is_some() {
            return fail("it finished but still has an event".to_owned());
        }
        Ok(())
    }
}

/// Why a token that does not hold transaction `tx` is refused.
fn stale(tx: &Transaction, token: u64) -> PipelineError {
    PipelineError::StaleClaim {
        transaction: tx.id,
        token,
        status: tx.status(),
    }
}

/// Sets `tx` to `status` at `now_ms`: it leaves its queue, claim or sleep, and its event is
/// done.
fn finish(tx: &mut Transaction, status: FinalStatus, now_ms: u64) {
    tx.place = Place::Ended(Finished {
        status,
        completed_at_ms: now_ms,
        archived_at_ms: None,
    });
    tx.event = None;
}

/// A transaction's next version: the log index, or one more than the previous version when this
/// log entry changed it already.
fn next_version(previous: u64, log_index: u64) -> u64 {
    claims::issue(previous, log_index)
}

/// Reads of the pipelines for the node and its services, from [`crate::State::pipelines`].
///
/// Reads that depend on time take the reader's clock and use `max(machine clock, now_ms)`, so a
/// reader whose clock is behind the machine's never sees the past.
#[derive(Clone, Copy, Debug)]
pub struct PipelineReads<'a> {
    pipelines: &'a Pipelines,
    clock_ms: u64,
}

impl<'a> PipelineReads<'a> {
    pub(crate) fn new(pipelines: &'a Pipelines, clock_ms: u64) -> PipelineReads<'a> {
        PipelineReads {
            pipelines,
            clock_ms,
        }
    }

    fn at(&self, now_ms: u64) -> u64 {
        self.clock_ms.max(now_ms)
    }

    /// The configuration.
    pub fn config(&self) -> &'a PipelineConfig {
        &self.pipelines.config
    }

    /// The pipeline `name`.
    pub fn definition(&self, name: &PipelineName) -> Option<&'a Pipeline> {
        self.pipelines.definition(name)
    }

    /// Up to `limit` pipelines (at most [`LIST_PAGE_MAX`]) in name order, after `after`.
    pub fn definitions(&self, after: Option<&PipelineName>, limit: usize) -> Vec<&'a Pipeline> {
        self.pipelines.definitions(after, limit)
    }

    /// The transaction `id`, in play, finished or archived, until it is deleted.
    pub fn transaction(&self, id: TransactionId) -> Option<&'a Transaction> {
        self.pipelines.get(id)
    }

    /// The transaction enqueued with `external_id`, while its window lasts at `now_ms`.
    pub fn transaction_by_external_id(
        &self,
        external_id: &ExternalId,
        now_ms: u64,
    ) -> Option<&'a Transaction> {
        self.pipelines.by_external_id(external_id, self.at(now_ms))
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) transactions waiting in `queue` of
    /// `node_group`, in the order a dequeue takes them.
    pub fn queue(
        &self,
        node_group: &NodeGroup,
        queue: QueueType,
        limit: usize,
    ) -> Vec<&'a Transaction> {
        self.pipelines.queue(node_group, queue, limit)
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) transactions in play (queued, running or
    /// sleeping) in `node_group`, in id order, after `after`.
    pub fn in_play(
        &self,
        node_group: &NodeGroup,
        after: Option<TransactionId>,
        limit: usize,
    ) -> Vec<&'a Transaction> {
        self.pipelines.in_play(node_group, after, limit)
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) transactions that have been running for at
    /// least `min_running_ms` at `now_ms`, longest running first (the seed's stuck list).
    pub fn stuck(&self, min_running_ms: u64, now_ms: u64, limit: usize) -> Vec<&'a Transaction> {
        self.pipelines.stuck(min_running_ms, self.at(now_ms), limit)
    }

    /// How many transactions of `node_group` wait in each queue, run and sleep.
    pub fn group_counts(&self, node_group: &NodeGroup) -> GroupCounts {
        self.pipelines.group_counts(node_group)
    }

    /// Every node group with transactions in play, in name order, with its counts.
    pub fn node_groups(&self) -> impl Iterator<Item = (&'a NodeGroup, &'a GroupCounts)> + 'a {
        self.pipelines.node_groups()
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) archived transactions after `after` (`None`:
    /// from the oldest kept), in `(archived_at_ms, id)` order: a page of the archive export.
    ///
    /// Only transactions archived before the machine clock are read. The tick archives at the
    /// machine clock, which never runs backwards, so every transaction archived later sorts
    /// after every one read here — even one archived in the same millisecond by a later tick
    /// (one with a smaller id, say) — and paging with [`ArchiveCursor`]s never skips one. What
    /// was archived at the current clock is read once the clock moves on (the next tick).
    pub fn archived(&self, after: Option<ArchiveCursor>, limit: usize) -> Vec<&'a Transaction> {
        self.pipelines.archived(after, self.clock_ms, limit)
    }

    /// The machine clock these reads were made at: the largest time of any applied command.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// How many stored transactions have `status`.
    pub fn status_count(&self, status: TxStatus) -> usize {
        self.pipelines.status_count(status)
    }

    /// How many transactions are stored, archived ones included (what `transactions_max`
    /// bounds).
    pub fn transaction_count(&self) -> usize {
        self.pipelines.len()
    }

    /// The value of switch `name` (0 until set).
    pub fn switch(&self, name: &SwitchName) -> u64 {
        self.pipelines.switch(name)
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) statistics rows of `resolution` from bucket
    /// `from_ms` on.
    pub fn stats(&self, resolution: Resolution, from_ms: u64, limit: usize) -> Vec<StatsRow> {
        self.pipelines.stats().rows(resolution, from_ms, limit)
    }

    /// The pending delivery of webhook event `event`.
    pub fn webhook(&self, event: WebhookEventId) -> Option<&'a Webhook> {
        self.pipelines.webhooks().get(event)
    }

    /// The pending webhook delivery of `transaction`.
    pub fn webhook_for(&self, transaction: TransactionId) -> Option<&'a Webhook> {
        self.pipelines.webhooks().for_transaction(transaction)
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) deliveries due at `now_ms` to URLs not paused,
    /// oldest due first. A processor takes them with [`PipelineCommand::TakeWebhooks`].
    pub fn webhooks_due(&self, now_ms: u64, limit: usize) -> Vec<&'a Webhook> {
        self.pipelines.webhooks().due(self.at(now_ms), limit)
    }

    /// How many webhook deliveries are pending.
    pub fn webhooks_pending(&self) -> usize {
        self.pipelines.webhooks().pending_count()
    }

    /// The failure record of `url`, if it failed recently.
    pub fn url_health(&self, url: &WebhookUrl) -> Option<&'a UrlHealth> {
        self.pipelines.webhooks().url(url)
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) administrator notices after `after`, oldest
    /// first.
    pub fn notices(&self, after: Option<NoticeId>, limit: usize) -> Vec<&'a Notice> {
        self.pipelines.webhooks().notices(after, limit)
    }

    /// How many notices were dropped unacknowledged because the queue was full.
    pub fn notices_dropped(&self) -> u64 {
        self.pipelines.webhooks().notices_dropped()
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) notifications numbered above `after`, of
    /// `node_group` or of all: what a completion stream sends next.
    pub fn notifications_after(
        &self,
        after: u64,
        node_group: Option<&NodeGroup>,
        limit: usize,
    ) -> NotificationPage<'a> {
        self.pipelines
            .notifications()
            .after(after, node_group, limit)
    }

    /// The number of the latest notification (0 before any): where a new stream starts.
    pub fn last_notification_seq(&self) -> u64 {
        self.pipelines.notifications().last_seq()
    }
}

#[cfg(test)]
mod tests;
