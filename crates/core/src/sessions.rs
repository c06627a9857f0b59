//! CA issuance sessions (seed 000) and their stage queues.
//!
//! A client asks for a certificate by creating a session: a CSR and the DNS names it certifies.
//! The session then advances through stages, each with its queue, worked by stateless workers:
//!
//! ```text
//! makechallenge ──▶ testchallenge ──▶ issue ──▶ done
//!       │             │    ▲  │          │
//!       │             └────┘  │          │     (an unsatisfied test goes back to the
//!       ▼                     ▼          ▼      testchallenge queue after a delay)
//!     failed ◀────────────────┴──────────┘
//! ```
//!
//! A worker *claims* sessions from a queued stage (makechallenge, testchallenge, issue): the
//! session leaves the queue and gets a [`Claim`] — the worker, a token and a visibility deadline —
//! in one command. The worker does the step outside the state machine and *completes* it with a
//! [`StepOutcome`], which records the result, advances the stage and queues the session for the
//! next step in the same command; or *releases* it (a transient error: back to its queue after a
//! delay), or *fails* it (a permanent error: stage failed). A claim whose deadline passed is taken
//! back by the next [`Command::Tick`](crate::Command::Tick) and the session is visible in its
//! queue again: this replaces the seed's "walk active-requests after a crash", and recovery is
//! automatic. Until a tick takes it back, a claim past its deadline is still the session's claim
//! and may complete, extend or release it; the deadline says when it *may* be taken away.
//!
//! Claims follow the rules of [`crate::claims`], which transaction pipelines share. Claim tokens
//! are the log index of the `Claim` command (the next number above the previous token when one
//! log entry carries several claims), so they are unique and increase; session ids are the log
//! index of the `Create` in the same way. Every session remembers its last completion
//! (`Complete`, `Release` or `Fail`): the same token again returns the same reply and changes
//! nothing, so a worker that lost the answer simply retries. Any other token that is not the
//! current claim's is refused as stale (or, for a killed session, as not live): the work is to be
//! dropped, someone else may hold the session now.
//!
//! A session's [`SessionPlace`] says where it is, and holds what that place needs: live in a
//! queued stage and waiting in its queue, live in a queued stage and claimed, done and waiting
//! for its client, or archived (with how it ended: done, failed or killed). Its stage, liveness,
//! certificate, failure and archive time follow from it, so they cannot disagree; snapshots and
//! answers still carry the flat record the format was defined with (`sessions/record.rs`).
//!
//! A session is *live* until it is killed — by an operator, by sitting in one queued stage longer
//! than the configured stage timeout, or because one of its challenges was tested unsuccessfully
//! too often. A killed session keeps its stage but never advances. The stage timeout counts from
//! entering the stage: releases and retests do not reset it, so no session cycles forever.
//!
//! A tick does its four steps in order — take back expired claims, kill sessions past the stage
//! timeout, archive forgotten certificates, delete old archives — each from an index ordered by
//! time, touching at most [`SESSION_TICK_BATCH_MAX`] sessions per step (the report says when work
//! was left for the next tick).
//!
//! The seed's open question — when does a session leave `pending-done`? — is answered so: a done
//! session stays in the done set, and its certificate is returned by every read, until the client
//! acknowledges it (`Acknowledge`) or, unacknowledged, for the configured done retention. Then it
//! is *archived*: still readable, certificate included, for the archive retention, then deleted
//! (which frees its request key). Failed and killed sessions are archived at once. A client that
//! crashed after the CA answered therefore still finds its certificate for the whole retention, and
//! the CA never forgets a certificate a client did not pick up before the retention says so.
//!
//! Invariants (checked by `Sessions::check`):
//! - every session is in exactly one place — a queue entry (live, queued stage, unclaimed), a
//!   claim (live, queued stage, claimed), the done set (live, done, unacknowledged, not archived),
//!   or the archive (failed, killed, or done and archived) — by construction: the place is one
//!   value. Every index holds exactly the entries the places say, and nothing else;
//! - a certificate and a done time exactly when done, a failure reason exactly when failed, a
//!   kill reason exactly when not live, acknowledged only when done: by construction too;
//! - the stage and the challenges agree: challenges (one per name, sorted by name) from
//!   testchallenge on, all satisfied from issue on; a kill reason names the stage or the
//!   challenge that caused it;
//! - times: created, stage entered, challenge, done and archive times are not after the machine
//!   clock; claim deadlines and visibility times are at most an hour after it;
//! - ids and claim tokens are at most the last issued ones, and a session's last completion token
//!   is below the token of any later claim on it;
//! - request keys map to the sessions that carry them; at most [`SESSIONS_MAX`] sessions exist.
//!
//! Every refused command changes nothing. Time comes only from the `now_ms` passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::challenges::{ChallengeToken, KeyAuthorization};
use crate::claims::{
    self, DAY_MS, Held, Hold, InvalidConfig, Never, OutOfRange, Place, Sweep, Work,
};
use crate::limits::{
    DNS_LABEL_BYTES_MAX, DNS_NAME_BYTES_MAX, LIST_PAGE_MAX, REASON_BYTES_MAX,
    REQUEST_KEY_BYTES_MAX, SESSION_CERT_BYTES_MAX, SESSION_CLAIM_BATCH_MAX,
    SESSION_COMPLETE_BATCH_MAX, SESSION_CSR_BYTES_MAX, SESSION_DELAY_MS_MAX, SESSION_NAMES_MAX,
    SESSION_TICK_BATCH_MAX, SESSION_VISIBILITY_MS_MAX, SESSION_VISIBILITY_MS_MIN, SESSIONS_MAX,
    WORKER_ID_BYTES_MAX,
};
use crate::text::{
    TextError, TextKind, check, check_printable, is_visible_byte, is_worker_byte, validated_text,
};

validated_text! {
    /// A DNS name a session certifies: lowercase ASCII letters, digits and hyphens in labels of
    /// 1 to 63 bytes separated by dots, at least two labels, 1 to 253 bytes, no trailing dot, no
    /// label starting or ending with a hyphen, no wildcard (HTTP-01 cannot validate one) and no
    /// numeric last label (an IP address is not a DNS name).
    DnsName, validate = check_dns_name
}

validated_text! {
    /// Who claims sessions (a worker instance): 1 to 128 bytes of letters, digits and `. _ : -`.
    WorkerId, kind = TextKind::WorkerId, max_bytes = WORKER_ID_BYTES_MAX,
    allowed = is_worker_byte, allowed_words = "ASCII letters, digits and . _ : -"
}

validated_text! {
    /// A client's idempotency key for `Create`: 1 to 128 bytes of visible ASCII.
    RequestKey, kind = TextKind::RequestKey, max_bytes = REQUEST_KEY_BYTES_MAX,
    allowed = is_visible_byte, allowed_words = "visible ASCII (no spaces or control characters)"
}

validated_text! {
    /// Free text for people (a failure, a kill, a test error, a release note): 1 to 1024 bytes of
    /// printable UTF-8, without control characters, so it prints on one line.
    Reason, validate = |value: &str| check_printable(TextKind::Reason, value, REASON_BYTES_MAX)
}

fn check_dns_name(value: &str) -> Result<(), TextError> {
    let kind = TextKind::DnsName;
    let malformed = |reason: String| Err(TextError::Malformed { kind, reason });
    if value.contains('*') {
        return malformed(
            "it is a wildcard; HTTP-01 cannot validate wildcard names, so list each name instead"
                .to_owned(),
        );
    }
    check(
        kind,
        value,
        DNS_NAME_BYTES_MAX,
        |b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'),
        "lowercase ASCII letters, digits, - and . (lowercase the name first)",
    )?;
    if value.ends_with('.') {
        return malformed(
            "it ends with a dot; write it without the root's trailing dot".to_owned(),
        );
    }
    let mut labels = 0;
    let mut last = "";
    for label in value.split('.') {
        if label.is_empty() {
            return malformed("it has an empty label (a leading dot or two dots in a row)".into());
        }
        if label.len() > DNS_LABEL_BYTES_MAX {
            return malformed(format!(
                "label {label:?} is {} bytes; at most {DNS_LABEL_BYTES_MAX} are allowed",
                label.len()
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return malformed(format!("label {label:?} starts or ends with a hyphen"));
        }
        labels += 1;
        last = label;
    }
    if labels < 2 {
        return malformed(
            "it has a single label; name a fully qualified domain such as example.com".to_owned(),
        );
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return malformed(
            "its last label is numeric; an IP address is not a DNS name and cannot be validated \
             here"
                .to_owned(),
        );
    }
    Ok(())
}

/// A session's id: the log index of the `Create` that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a session is in its life. The first three are *queued* stages: each has a queue workers
/// claim from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Stage {
    /// Waiting for a worker to create one HTTP-01 challenge per name.
    MakeChallenge,
    /// Waiting for a worker to fetch the challenges.
    TestChallenge,
    /// Every challenge is satisfied; waiting for a worker to issue the certificate.
    Issue,
    /// Issued: the certificate waits for the client (terminal).
    Done,
    /// Given up with a reason (terminal).
    Failed,
}

impl Stage {
    /// The stages with a queue, in the order a session passes them.
    pub const QUEUED: [Stage; 3] = [Stage::MakeChallenge, Stage::TestChallenge, Stage::Issue];

    /// Whether the stage has a queue (a worker can claim sessions in it).
    pub fn is_queued(self) -> bool {
        QueuedStage::of(self).is_some()
    }
}

/// A stage with a queue workers claim sessions from: where a live session works.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QueuedStage {
    /// [`Stage::MakeChallenge`].
    MakeChallenge,
    /// [`Stage::TestChallenge`].
    TestChallenge,
    /// [`Stage::Issue`].
    Issue,
}

impl QueuedStage {
    /// The queued stage `stage` is, if it has a queue.
    pub fn of(stage: Stage) -> Option<QueuedStage> {
        match stage {
            Stage::MakeChallenge => Some(QueuedStage::MakeChallenge),
            Stage::TestChallenge => Some(QueuedStage::TestChallenge),
            Stage::Issue => Some(QueuedStage::Issue),
            Stage::Done | Stage::Failed => None,
        }
    }

    /// Its queue's position among the queues, in the order a session passes them.
    fn slot(self) -> usize {
        self as usize
    }
}

impl From<QueuedStage> for Stage {
    fn from(stage: QueuedStage) -> Stage {
        match stage {
            QueuedStage::MakeChallenge => Stage::MakeChallenge,
            QueuedStage::TestChallenge => Stage::TestChallenge,
            QueuedStage::Issue => Stage::Issue,
        }
    }
}

impl fmt::Display for QueuedStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Stage::from(*self).fmt(f)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::MakeChallenge => "makechallenge",
            Stage::TestChallenge => "testchallenge",
            Stage::Issue => "issue",
            Stage::Done => "done",
            Stage::Failed => "failed",
        })
    }
}

/// Why a session was killed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KillReason {
    /// It sat in a queued stage longer than the configured stage timeout.
    StageTimeout {
        /// The stage it sat in (and keeps).
        stage: Stage,
    },
    /// One of its challenges was tested unsuccessfully as often as the configuration allows.
    TestedTooOften {
        /// The challenge's name.
        name: DnsName,
        /// How often it was tested.
        times: u32,
    },
    /// An operator or the server killed it.
    Operator(Reason),
}

impl fmt::Display for KillReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KillReason::StageTimeout { stage } => write!(f, "it sat in stage {stage} too long"),
            KillReason::TestedTooOften { name, times } => {
                write!(f, "the challenge for {name} failed {times} tests")
            }
            KillReason::Operator(reason) => write!(f, "killed by an operator: {reason}"),
        }
    }
}

/// One HTTP-01 challenge of a session: one per name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionChallenge {
    /// The name it validates.
    pub name: DnsName,
    /// The token served at `http://NAME/.well-known/acme-challenge/TOKEN`.
    pub token: ChallengeToken,
    /// What is served for the token.
    pub key_authorization: KeyAuthorization,
    /// Machine time the challenge was made.
    pub challtime_ms: u64,
    /// A test fetched the expected key authorization (never unset once set).
    pub satisfied: bool,
    /// It was tested unsuccessfully too often; the session was killed for it.
    pub failed: bool,
    /// How many test results were recorded while it was unsatisfied.
    pub times_tested: u32,
    /// The error of the latest unsuccessful test.
    pub last_error: Option<Reason>,
}

/// A worker's hold on a session: the session is out of its queue until the claim ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Who claimed it.
    pub claimant: WorkerId,
    /// The log index of the `Claim` command: unique per command, and increasing.
    pub token: u64,
    /// Machine time from which the next tick takes the session back to its queue.
    pub deadline_ms: u64,
}

/// The last `Complete`, `Release` or `Fail` a session accepted, replayed to a retry.
pub type Completion = claims::Completion<SessionReply>;

/// An issuance session.
///
/// Snapshots, answers and the transport carry it as the flat record the format was defined with
/// (`record.rs`); that record is only read into a session whose fields fit together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Its id (the log index of its `Create`).
    pub id: SessionId,
    /// Machine time of the `Create`.
    pub created_ms: u64,
    /// The client's idempotency key, if it sent one.
    pub request_key: Option<RequestKey>,
    /// The CSR (DER), opaque to the state machine: the node parses it.
    pub csr: Vec<u8>,
    /// The names to certify: sorted, distinct.
    pub names: Vec<DnsName>,
    /// Where it is: live in a queued stage, waiting in that stage's queue or claimed by a
    /// worker; or ended — done, failed or killed, archived or not. Its stage follows from it.
    pub place: SessionPlace,
    /// Machine time it entered its stage; the stage timeout counts from here, and a done session
    /// became done then.
    pub stage_entered_ms: u64,
    /// Its challenges, sorted by name (empty before the makechallenge step completes).
    pub challenges: Vec<SessionChallenge>,
    /// Machine time from which it can be claimed (when in its queue).
    pub visible_at_ms: u64,
    /// The last accepted `Complete`, `Release` or `Fail`.
    pub last_completion: Option<Completion>,
    /// The note of the latest `Release`, until the next `Complete`.
    pub note: Option<Reason>,
}

/// Where a session is. Sessions never sleep: a released session waits in its queue, invisible
/// until its `visible_at_ms`.
pub type SessionPlace = Place<QueuedStage, StageClaim, Never, Ended>;

/// A worker's claim on a live session in a queued stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageClaim {
    /// The stage it was claimed in.
    pub stage: QueuedStage,
    /// The claim.
    pub claim: Claim,
}

impl Hold for StageClaim {
    fn token(&self) -> u64 {
        self.claim.token
    }

    fn deadline_ms(&self) -> u64 {
        self.claim.deadline_ms
    }
}

/// Where a session whose work ended is: it is never claimed again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Done and live: the certificate waits in the done set until the client acknowledges it or
    /// the done retention passes.
    Done {
        /// The issued certificate chain (PEM).
        cert: Vec<u8>,
    },
    /// In the archive, readable until the archive retention passes.
    Archived {
        /// Machine time it was archived.
        archived_at_ms: u64,
        /// How it ended.
        end: Ending,
    },
}

/// How an archived session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Done, and acknowledged or kept past the done retention; perhaps killed since.
    Done {
        /// The issued certificate chain (PEM).
        cert: Vec<u8>,
        /// The client acknowledged the certificate.
        acknowledged: bool,
        /// Why it was killed, if it was.
        kill_reason: Option<KillReason>,
    },
    /// Failed by its worker; perhaps killed since.
    Failed {
        /// Why it failed.
        failure: Reason,
        /// Why it was killed, if it was.
        kill_reason: Option<KillReason>,
    },
    /// Killed in a queued stage, which it keeps.
    Killed {
        /// The stage.
        stage: QueuedStage,
        /// Why.
        reason: KillReason,
    },
}

impl Session {
    /// Its stage.
    pub fn stage(&self) -> Stage {
        match &self.place {
            Place::Queued(stage) | Place::Claimed(StageClaim { stage, .. }) => (*stage).into(),
            Place::Asleep(never) => match *never {},
            Place::Ended(Ended::Done { .. }) => Stage::Done,
            Place::Ended(Ended::Archived { end, .. }) => match end {
                Ending::Done { .. } => Stage::Done,
                Ending::Failed { .. } => Stage::Failed,
                Ending::Killed { stage, .. } => (*stage).into(),
            },
        }
    }

    /// Why it was killed; none while it is live.
    pub fn kill_reason(&self) -> Option<&KillReason> {
        match self.place.ended()? {
            Ended::Done { .. } => None,
            Ended::Archived { end, .. } => match end {
                Ending::Done { kill_reason, .. } | Ending::Failed { kill_reason, .. } => {
                    kill_reason.as_ref()
                }
                Ending::Killed { reason, .. } => Some(reason),
            },
        }
    }

    /// False once killed.
    pub fn live(&self) -> bool {
        self.kill_reason().is_none()
    }

    /// The claim holding it, if any.
    pub fn claim(&self) -> Option<&Claim> {
        self.place.claimed().map(|held| &held.claim)
    }

    /// The issued certificate chain (PEM), once done.
    pub fn cert(&self) -> Option<&[u8]> {
        match self.place.ended()? {
            Ended::Done { cert }
            | Ended::Archived {
                end: Ending::Done { cert, .. },
                ..
            } => Some(cert),
            Ended::Archived { .. } => None,
        }
    }

    /// Why it failed, once failed.
    pub fn failure(&self) -> Option<&Reason> {
        match self.place.ended()? {
            Ended::Archived {
                end: Ending::Failed { failure, .. },
                ..
            } => Some(failure),
            _ => None,
        }
    }

    /// Machine time it became done.
    pub fn done_at_ms(&self) -> Option<u64> {
        (self.stage() == Stage::Done).then_some(self.stage_entered_ms)
    }

    /// Whether the client acknowledged the certificate.
    pub fn acknowledged(&self) -> bool {
        matches!(
            self.place,
            Place::Ended(Ended::Archived {
                end: Ending::Done {
                    acknowledged: true,
                    ..
                },
                ..
            })
        )
    }

    /// Machine time it was archived: failed, killed, acknowledged, or done past the retention.
    pub fn archived_at_ms(&self) -> Option<u64> {
        match self.place.ended()? {
            Ended::Archived { archived_at_ms, .. } => Some(*archived_at_ms),
            Ended::Done { .. } => None,
        }
    }
}

impl Work for Session {
    type Claim = StageClaim;
    type Reply = SessionReply;

    fn current_claim(&self) -> Option<&StageClaim> {
        self.place.claimed()
    }

    fn completion(&self) -> Option<&Completion> {
        self.last_completion.as_ref()
    }

    fn set_completion(&mut self, completion: Completion) {
        self.last_completion = Some(completion);
    }
}

/// The sessions' cluster-wide configuration, changed at run time by
/// [`SessionCommand::Configure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// A live session that sits in one queued stage this long is killed.
    pub stage_timeout_ms: u64,
    /// A challenge tested unsuccessfully this often kills its session.
    pub max_tests: u32,
    /// An unsatisfied challenge is tested again after this delay.
    pub test_retry_ms: u64,
    /// An unacknowledged done session is archived after this long.
    pub done_retention_ms: u64,
    /// An archived session is deleted after this long.
    pub archive_retention_ms: u64,
    /// Most sessions stored (all of them); a create beyond it is refused.
    pub sessions_max: u64,
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            stage_timeout_ms: 3_600_000,
            max_tests: 10,
            test_retry_ms: 2_000,
            done_retention_ms: DAY_MS,
            archive_retention_ms: 7 * DAY_MS,
            sessions_max: 100_000,
        }
    }
}

impl SessionConfig {
    /// Checks every field against its bounds, naming the first one out of range.
    pub fn validate(&self) -> Result<(), SessionError> {
        let within = claims::config_within;
        within(
            "stage_timeout_ms",
            1_000,
            30 * DAY_MS,
            self.stage_timeout_ms,
        )?;
        within("max_tests", 1, 1_000, self.max_tests.into())?;
        within("test_retry_ms", 0, SESSION_DELAY_MS_MAX, self.test_retry_ms)?;
        within(
            "done_retention_ms",
            1_000,
            365 * DAY_MS,
            self.done_retention_ms,
        )?;
        within(
            "archive_retention_ms",
            0,
            365 * DAY_MS,
            self.archive_retention_ms,
        )?;
        within("sessions_max", 1, SESSIONS_MAX as u64, self.sessions_max)?;
        Ok(())
    }
}

/// A challenge a worker made for one name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewChallenge {
    /// The name.
    pub name: DnsName,
    /// The HTTP-01 token.
    pub token: ChallengeToken,
    /// What is to be served for it.
    pub key_authorization: KeyAuthorization,
}

/// The result of fetching one challenge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestResult {
    /// The challenge's name.
    pub name: DnsName,
    /// The expected key authorization was served.
    pub satisfied: bool,
    /// What went wrong, when not satisfied.
    pub error: Option<Reason>,
}

/// What a worker's step produced; one kind per queued stage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepOutcome {
    /// Makechallenge: exactly one challenge per name of the session.
    Challenges(Vec<NewChallenge>),
    /// Testchallenge: exactly one result per challenge.
    Tested(Vec<TestResult>),
    /// Issue: the certificate chain (PEM).
    Issued {
        /// The chain.
        #[serde(with = "serde_bytes")]
        cert: Vec<u8>,
    },
}

impl StepOutcome {
    /// The stage whose step produces this outcome.
    pub fn stage(&self) -> Stage {
        match self {
            StepOutcome::Challenges(_) => Stage::MakeChallenge,
            StepOutcome::Tested(_) => Stage::TestChallenge,
            StepOutcome::Issued { .. } => Stage::Issue,
        }
    }
}

/// One completion of a [`SessionCommand::CompleteBatch`]: what a lone
/// [`SessionCommand::Complete`] carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteItem {
    /// The session.
    pub session: SessionId,
    /// The claim's token.
    pub token: u64,
    /// What the step produced.
    pub outcome: StepOutcome,
}

/// The session commands.
///
/// The log and snapshots (client sessions keep answers) hold them encoded by variant position:
/// a new variant goes at the end, so entries written before it still decode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionCommand {
    /// Start a session in makechallenge. With a request key that names a stored session created
    /// with the same CSR and names, answer that session instead (a client's retry).
    Create {
        /// The client's idempotency key.
        request_key: Option<RequestKey>,
        /// The CSR (DER), 1 to [`SESSION_CSR_BYTES_MAX`] bytes.
        #[serde(with = "serde_bytes")]
        csr: Vec<u8>,
        /// The names, sorted and distinct, 1 to [`SESSION_NAMES_MAX`].
        names: Vec<DnsName>,
    },
    /// Take up to `max` visible sessions of a queued stage, oldest visible first.
    Claim {
        /// The stage (makechallenge, testchallenge or issue).
        stage: Stage,
        /// Who claims.
        worker: WorkerId,
        /// How long the claim holds before a tick may take the session back.
        visibility_ms: u64,
        /// The most sessions to take, 1 to [`SESSION_CLAIM_BATCH_MAX`].
        max: u32,
    },
    /// Move the current claim's deadline to now + `visibility_ms`.
    Extend {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
        /// The new visibility.
        visibility_ms: u64,
    },
    /// Finish the claimed step with its outcome and advance the session.
    Complete {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
        /// What the step produced.
        outcome: StepOutcome,
    },
    /// Give the session back unfinished: it is visible in its queue again after `delay_ms`.
    Release {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
        /// How long it stays invisible, at most [`SESSION_DELAY_MS_MAX`].
        delay_ms: u64,
        /// Why, for people.
        note: Option<Reason>,
    },
    /// The step failed for good: the session goes to stage failed.
    Fail {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
        /// Why.
        reason: Reason,
    },
    /// Kill the session: it keeps its stage and never advances.
    Kill {
        /// The session.
        session: SessionId,
        /// Why.
        reason: Reason,
    },
    /// The client has the certificate of a done session.
    Acknowledge {
        /// The session.
        session: SessionId,
    },
    /// Replace the configuration.
    Configure(SessionConfig),
    /// Several completions in one command, each applied as a lone `Complete` would be, in
    /// order: an item that is refused (a stale token, the wrong stage, a bad outcome) changes
    /// nothing and is answered with its refusal, and the others go on. Only a batch of 0 or more
    /// than [`SESSION_COMPLETE_BATCH_MAX`] items is refused as a whole.
    CompleteBatch {
        /// The completions, 1 to [`SESSION_COMPLETE_BATCH_MAX`].
        items: Vec<CompleteItem>,
    },
}

/// What a successful session command returns. Appended to at the end only, like
/// [`SessionCommand`]: client sessions keep answers in snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionReply {
    /// The session exists.
    Created {
        /// Its id.
        session: SessionId,
        /// It existed already under the request key (nothing changed).
        existing: bool,
    },
    /// The claimed sessions as they are after claiming, oldest visible first (possibly none).
    Claimed(Vec<Session>),
    /// The claim's deadline moved.
    Extended {
        /// The session.
        session: SessionId,
        /// The new deadline.
        deadline_ms: u64,
    },
    /// The step was recorded.
    Completed {
        /// The session.
        session: SessionId,
        /// Its stage now.
        stage: Stage,
        /// False if the step killed it (a challenge tested too often).
        live: bool,
    },
    /// The session is back in its queue.
    Released {
        /// The session.
        session: SessionId,
        /// From when it can be claimed again.
        visible_at_ms: u64,
    },
    /// The session is failed.
    Failed {
        /// The session.
        session: SessionId,
    },
    /// The session is killed.
    Killed {
        /// It was not live already (nothing changed).
        already: bool,
    },
    /// The certificate is acknowledged.
    Acknowledged {
        /// It was acknowledged already (nothing changed).
        already: bool,
    },
    /// The configuration changed.
    Configured,
    /// A batch's answers, one per item in the order sent: what a lone `Complete` of the item
    /// would have answered at that point.
    CompletedBatch(Vec<Result<SessionReply, SessionError>>),
}

/// What a tick did to the sessions. Each list is bounded by [`SESSION_TICK_BATCH_MAX`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTickReport {
    /// Claims past their deadline whose sessions went back to their queues, visible now.
    pub reclaimed: Vec<SessionId>,
    /// Live sessions killed for sitting in a queued stage past the stage timeout.
    pub timed_out: Vec<SessionId>,
    /// Done, unacknowledged sessions archived after the done retention.
    pub archived: Vec<SessionId>,
    /// Archived sessions deleted after the archive retention.
    pub deleted: Vec<SessionId>,
    /// A step reached its bound and left work for the next tick: tick again soon.
    pub more: bool,
}

impl SessionTickReport {
    /// Whether the tick changed no session.
    pub fn is_empty(&self) -> bool {
        self.reclaimed.is_empty()
            && self.timed_out.is_empty()
            && self.archived.is_empty()
            && self.deleted.is_empty()
    }
}

/// How a stage's queue is doing, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Sessions waiting in the queue (visible or not yet); for done, unacknowledged sessions.
    pub waiting: usize,
    /// Sessions claimed by workers (0 for done).
    pub claimed: usize,
    /// How long the oldest visible session has waited for a worker (for done: how long the
    /// oldest unacknowledged certificate has waited for its client); none when nothing waits.
    pub oldest_age_ms: Option<u64>,
}

/// Why a session command was refused. A refused command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SessionError {
    /// A malformed name, key, worker id or reason.
    #[error(transparent)]
    InvalidText(#[from] TextError),
    /// No such session is stored.
    #[error(
        "no session {session} exists (never created, or deleted after its archive retention); \
         check the id"
    )]
    UnknownSession {
        /// The id asked for.
        session: SessionId,
    },
    /// The outcome is for another stage than the session's.
    #[error(
        "session {session} is in stage {actual}, but the outcome is for stage {expected}; send \
         the outcome of the session's stage"
    )]
    WrongStage {
        /// The session.
        session: SessionId,
        /// The stage the outcome is for.
        expected: Stage,
        /// The session's stage.
        actual: Stage,
    },
    /// The token is not the session's current claim (nor its last completion).
    #[error(
        "claim token {token} does not hold session {session}: the claim ended or expired and \
         someone else may hold it; drop this work and claim again"
    )]
    StaleClaim {
        /// The session.
        session: SessionId,
        /// The token sent.
        token: u64,
    },
    /// The session was killed and never advances.
    #[error("session {session} is not live ({reason}); it never advances, create a new session")]
    NotLive {
        /// The session.
        session: SessionId,
        /// Why it was killed.
        reason: KillReason,
    },
    /// Only a done session can be acknowledged.
    #[error(
        "session {session} is in stage {stage}; only a done session's certificate can be \
         acknowledged"
    )]
    NotDone {
        /// The session.
        session: SessionId,
        /// Its stage.
        stage: Stage,
    },
    /// The outcome does not fit the session.
    #[error("bad outcome: {0}")]
    BadOutcome(String),
    /// The configured number of sessions is stored.
    #[error(
        "at most {max} sessions may be stored; acknowledge done sessions, or wait for archived \
         ones to be deleted"
    )]
    TooMany {
        /// The configured limit.
        max: u64,
    },
    /// A field is larger than the state machine accepts.
    #[error("{field} is {bytes} bytes; at most {max} are accepted")]
    TooLarge {
        /// Which field.
        field: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A number (or a size or count below its minimum) is out of its range.
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
    /// The names of a create are not sorted and distinct.
    #[error("bad names: {0}")]
    BadNames(String),
    /// The request key names a session created with another CSR or other names.
    #[error(
        "request key {key} already names session {session}, created with another CSR or other \
         names; use a new key for a new request"
    )]
    RequestKeyReused {
        /// The key.
        key: RequestKey,
        /// The session it names.
        session: SessionId,
    },
    /// A configuration field is out of range.
    #[error("session config {field}: {reason}")]
    InvalidConfig {
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
    /// The stage has no queue.
    #[error(
        "stage {stage} has no queue; only makechallenge, testchallenge and issue can be claimed"
    )]
    NotQueued {
        /// The stage asked for.
        stage: Stage,
    },
}

impl From<OutOfRange> for SessionError {
    fn from(error: OutOfRange) -> SessionError {
        SessionError::OutOfRange {
            field: error.field,
            got: error.got,
            min: error.min,
            max: error.max,
        }
    }
}

impl From<InvalidConfig> for SessionError {
    fn from(error: InvalidConfig) -> SessionError {
        SessionError::InvalidConfig {
            field: error.field,
            reason: error.reason,
        }
    }
}

/// The session table and its indexes. The indexes are derived: each is a function of the
/// sessions' places and fields, kept by `Sessions::put` and `Sessions::take`, the only ways a
/// stored session changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sessions {
    pub(crate) config: SessionConfig,
    last_session_id: u64,
    last_claim_token: u64,
    table: BTreeMap<SessionId, Session>,
    /// Derived: request key → the session carrying it.
    by_request_key: BTreeMap<RequestKey, SessionId>,
    /// Derived: every session by stage, for paging through a stage.
    by_stage: BTreeSet<(Stage, SessionId)>,
    /// Derived: per queued stage, `(visible_at_ms, id)` of its queued sessions.
    queues: [BTreeSet<(u64, SessionId)>; 3],
    /// Derived: per queued stage, its claimed sessions.
    claimed: [BTreeSet<SessionId>; 3],
    /// Derived: `(deadline_ms, id)` of every claim.
    claims: BTreeSet<(u64, SessionId)>,
    /// Derived: `(stage_entered_ms, id)` of every live session in a queued stage.
    in_stage: BTreeSet<(u64, SessionId)>,
    /// Derived: `(done_at_ms, id)` of done sessions not acknowledged nor archived.
    done: BTreeSet<(u64, SessionId)>,
    /// Derived: `(archived_at_ms, id)` of archived sessions.
    archive: BTreeSet<(u64, SessionId)>,
}

/// What a snapshot stores of [`Sessions`] (the indexes are rebuilt); written from references.
#[derive(Serialize)]
pub(crate) struct SessionRecordsRef<'a> {
    config: &'a SessionConfig,
    last_session_id: u64,
    last_claim_token: u64,
    sessions: Vec<&'a Session>,
}

/// What a snapshot stores of [`Sessions`], as read back. Same fields as [`SessionRecordsRef`]:
/// a session is written as its record.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SessionRecords {
    config: SessionConfig,
    last_session_id: u64,
    last_claim_token: u64,
    sessions: Vec<SessionRecord>,
}

impl Sessions {
    pub(crate) fn apply(
        &mut self,
        command: SessionCommand,
        now_ms: u64,
        log_index: u64,
    ) -> Result<SessionReply, SessionError> {
        match command {
            SessionCommand::Create {
                request_key,
                csr,
                names,
            } => self.create(request_key, csr, names, now_ms, log_index),
            SessionCommand::Claim {
                stage,
                worker,
                visibility_ms,
                max,
            } => self.claim(stage, worker, visibility_ms, max, now_ms, log_index),
            SessionCommand::Extend {
                session,
                token,
                visibility_ms,
            } => self.extend(session, token, visibility_ms, now_ms),
            SessionCommand::Complete {
                session,
                token,
                outcome,
            } => self.complete(session, token, outcome, now_ms),
            SessionCommand::Release {
                session,
                token,
                delay_ms,
                note,
            } => self.release(session, token, delay_ms, note, now_ms),
            SessionCommand::Fail {
                session,
                token,
                reason,
            } => self.fail(session, token, reason, now_ms),
            SessionCommand::Kill { session, reason } => self.kill(session, reason, now_ms),
            SessionCommand::Acknowledge { session } => self.acknowledge(session, now_ms),
            SessionCommand::Configure(config) => {
                config.validate()?;
                self.config = config;
                Ok(SessionReply::Configured)
            }
            SessionCommand::CompleteBatch { items } => self.complete_batch(items, now_ms),
        }
    }

    /// Each item as a lone `Complete`, in order; every item is checked before it changes
    /// anything (as `complete` does), so a refused item leaves the table as it found it.
    fn complete_batch(
        &mut self,
        items: Vec<CompleteItem>,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        claims::within(
            "number of items",
            items.len() as u64,
            1,
            SESSION_COMPLETE_BATCH_MAX as u64,
        )?;
        let replies = items
            .into_iter()
            .map(|item| self.complete(item.session, item.token, item.outcome, now_ms))
            .collect();
        Ok(SessionReply::CompletedBatch(replies))
    }

    fn create(
        &mut self,
        request_key: Option<RequestKey>,
        csr: Vec<u8>,
        names: Vec<DnsName>,
        now_ms: u64,
        log_index: u64,
    ) -> Result<SessionReply, SessionError> {
        claims::within(
            "number of names",
            names.len() as u64,
            1,
            SESSION_NAMES_MAX as u64,
        )?;
        if let Some(pair) = names.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(SessionError::BadNames(format!(
                "{} comes after {}; send the names sorted and without repeats",
                pair[1], pair[0]
            )));
        }
        check_bytes("csr", csr.len(), SESSION_CSR_BYTES_MAX)?;
        if let Some(key) = &request_key
            && let Some(&id) = self.by_request_key.get(key)
        {
            let existing = &self.table[&id];
            if existing.csr != csr || existing.names != names {
                return Err(SessionError::RequestKeyReused {
                    key: key.clone(),
                    session: id,
                });
            }
            return Ok(SessionReply::Created {
                session: id,
                existing: true,
            });
        }
        let max = self.config.sessions_max.min(SESSIONS_MAX as u64);
        if self.table.len() as u64 >= max {
            return Err(SessionError::TooMany { max });
        }
        self.last_session_id = claims::issue(self.last_session_id, log_index);
        let id = SessionId(self.last_session_id);
        self.put(Session {
            id,
            created_ms: now_ms,
            request_key,
            csr,
            names,
            place: Place::Queued(QueuedStage::MakeChallenge),
            stage_entered_ms: now_ms,
            challenges: Vec::new(),
            visible_at_ms: now_ms,
            last_completion: None,
            note: None,
        });
        Ok(SessionReply::Created {
            session: id,
            existing: false,
        })
    }

    /// Starts a session whose names were already validated (an ACME order being finalized):
    /// it enters the issue stage with `challenges`, one satisfied challenge per name, and is
    /// issued as any session is.
    pub(crate) fn create_issuing(
        &mut self,
        csr: Vec<u8>,
        names: Vec<DnsName>,
        challenges: Vec<SessionChallenge>,
        now_ms: u64,
        log_index: u64,
    ) -> Result<SessionId, SessionError> {
        claims::within(
            "number of names",
            names.len() as u64,
            1,
            SESSION_NAMES_MAX as u64,
        )?;
        check_bytes("csr", csr.len(), SESSION_CSR_BYTES_MAX)?;
        let fits = challenges.len() == names.len()
            && challenges
                .iter()
                .zip(&names)
                .all(|(challenge, name)| challenge.name == *name && challenge.satisfied);
        if !fits || names.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(SessionError::BadNames(
                "an issuing session needs sorted, distinct names, each with a satisfied challenge"
                    .to_owned(),
            ));
        }
        let max = self.config.sessions_max.min(SESSIONS_MAX as u64);
        if self.table.len() as u64 >= max {
            return Err(SessionError::TooMany { max });
        }
        self.last_session_id = claims::issue(self.last_session_id, log_index);
        let id = SessionId(self.last_session_id);
        self.put(Session {
            id,
            created_ms: now_ms,
            request_key: None,
            csr,
            names,
            place: Place::Queued(QueuedStage::Issue),
            stage_entered_ms: now_ms,
            challenges,
            visible_at_ms: now_ms,
            last_completion: None,
            note: None,
        });
        Ok(id)
    }

    /// Acknowledges a done session on its ACME order's behalf (the order keeps the certificate).
    pub(crate) fn acknowledge_for_acme(
        &mut self,
        id: SessionId,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        self.acknowledge(id, now_ms)
    }

    fn claim(
        &mut self,
        stage: Stage,
        worker: WorkerId,
        visibility_ms: u64,
        max: u32,
        now_ms: u64,
        log_index: u64,
    ) -> Result<SessionReply, SessionError> {
        let queued = QueuedStage::of(stage).ok_or(SessionError::NotQueued { stage })?;
        check_visibility(visibility_ms)?;
        claims::within("max", max.into(), 1, SESSION_CLAIM_BATCH_MAX.into())?;
        let ids: Vec<SessionId> = self.queues[queued.slot()]
            .range(..=(now_ms, SessionId(u64::MAX)))
            .take(max as usize)
            .map(|&(_, id)| id)
            .collect();
        if ids.is_empty() {
            return Ok(SessionReply::Claimed(Vec::new()));
        }
        self.last_claim_token = claims::issue(self.last_claim_token, log_index);
        let claim = Claim {
            claimant: worker,
            token: self.last_claim_token,
            deadline_ms: claims::deadline(now_ms, visibility_ms),
        };
        let claimed = ids
            .into_iter()
            .map(|id| {
                let mut session = self.take(id);
                session.place = session.place.claim(|stage| StageClaim {
                    stage,
                    claim: claim.clone(),
                });
                self.put(session.clone());
                session
            })
            .collect();
        Ok(SessionReply::Claimed(claimed))
    }

    fn extend(
        &mut self,
        id: SessionId,
        token: u64,
        visibility_ms: u64,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        check_visibility(visibility_ms)?;
        let session = self.get_known(id)?;
        if session.claim().is_none_or(|claim| claim.token != token) {
            return Err(stale(session, token));
        }
        let deadline_ms = claims::deadline(now_ms, visibility_ms);
        let mut session = self.take(id);
        let held = session.place.claimed_mut().expect("checked above");
        held.claim.deadline_ms = deadline_ms;
        self.put(session);
        Ok(SessionReply::Extended {
            session: id,
            deadline_ms,
        })
    }

    fn complete(
        &mut self,
        id: SessionId,
        token: u64,
        outcome: StepOutcome,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        let session = match self.held(id, token)? {
            Held::Retry(reply) => return Ok(reply),
            Held::Current(session) => session,
        };
        if let StepOutcome::Issued { cert } = &outcome {
            check_bytes("cert", cert.len(), SESSION_CERT_BYTES_MAX)?;
        }
        let mut next = session.clone();
        match (session.stage(), outcome) {
            (Stage::MakeChallenge, StepOutcome::Challenges(challenges)) => {
                next.challenges = new_challenges(&session.names, challenges, now_ms)?;
                next.place = Place::Queued(QueuedStage::TestChallenge);
                next.stage_entered_ms = now_ms;
                next.visible_at_ms = now_ms;
            }
            (Stage::TestChallenge, StepOutcome::Tested(results)) => {
                next = record_tests(next, results, &self.config, now_ms)?;
            }
            (Stage::Issue, StepOutcome::Issued { cert }) => {
                next.place = Place::Ended(Ended::Done { cert });
                next.stage_entered_ms = now_ms;
            }
            (actual, outcome) => {
                return Err(SessionError::WrongStage {
                    session: id,
                    expected: outcome.stage(),
                    actual,
                });
            }
        }
        next.note = None;
        let reply = SessionReply::Completed {
            session: id,
            stage: next.stage(),
            live: next.live(),
        };
        Ok(self.finish(next, token, reply))
    }

    fn release(
        &mut self,
        id: SessionId,
        token: u64,
        delay_ms: u64,
        note: Option<Reason>,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        let session = match self.held(id, token)? {
            Held::Retry(reply) => return Ok(reply),
            Held::Current(session) => session,
        };
        claims::within("delay_ms", delay_ms, 0, SESSION_DELAY_MS_MAX)?;
        let mut next = session.clone();
        next.place = Place::Queued(next.place.into_claimed().stage);
        next.visible_at_ms = now_ms.saturating_add(delay_ms);
        next.note = note;
        let reply = SessionReply::Released {
            session: id,
            visible_at_ms: next.visible_at_ms,
        };
        Ok(self.finish(next, token, reply))
    }

    fn fail(
        &mut self,
        id: SessionId,
        token: u64,
        reason: Reason,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        let session = match self.held(id, token)? {
            Held::Retry(reply) => return Ok(reply),
            Held::Current(session) => session,
        };
        let mut next = session.clone();
        next.place = Place::Ended(Ended::Archived {
            archived_at_ms: now_ms,
            end: Ending::Failed {
                failure: reason,
                kill_reason: None,
            },
        });
        next.stage_entered_ms = now_ms;
        Ok(self.finish(next, token, SessionReply::Failed { session: id }))
    }

    /// Ends the claim `token` on `next` (the claimed session, moved by the step out of its
    /// claim) with `reply`, remembered for retries, and stores it.
    fn finish(&mut self, mut next: Session, token: u64, reply: SessionReply) -> SessionReply {
        let previous = self.take(next.id);
        let reply = claims::end(&previous, &mut next, token, reply);
        self.put(next);
        reply
    }

    fn kill(
        &mut self,
        id: SessionId,
        reason: Reason,
        now_ms: u64,
    ) -> Result<SessionReply, SessionError> {
        if !self.get_known(id)?.live() {
            return Ok(SessionReply::Killed { already: true });
        }
        let session = self.take(id);
        self.put(kill(session, KillReason::Operator(reason), now_ms));
        Ok(SessionReply::Killed { already: false })
    }

    fn acknowledge(&mut self, id: SessionId, now_ms: u64) -> Result<SessionReply, SessionError> {
        let session = self.get_known(id)?;
        let stage = session.stage();
        if stage != Stage::Done {
            return Err(SessionError::NotDone { session: id, stage });
        }
        if session.acknowledged() {
            return Ok(SessionReply::Acknowledged { already: true });
        }
        let mut session = self.take(id);
        let (archived_at_ms, cert, kill_reason) = match session.place {
            Place::Ended(Ended::Done { cert }) => (now_ms, cert, None),
            Place::Ended(Ended::Archived {
                archived_at_ms,
                end: Ending::Done {
                    cert, kill_reason, ..
                },
            }) => (archived_at_ms, cert, kill_reason),
            _ => unreachable!("a done session is in the done set or the archive"),
        };
        session.place = Place::Ended(Ended::Archived {
            archived_at_ms,
            end: Ending::Done {
                cert,
                acknowledged: true,
                kill_reason,
            },
        });
        self.put(session);
        Ok(SessionReply::Acknowledged { already: false })
    }

    /// Takes back expired claims, kills sessions past the stage timeout, archives done sessions
    /// past the done retention and deletes archived ones past the archive retention, in that
    /// order, each step touching at most [`SESSION_TICK_BATCH_MAX`] sessions.
    pub(crate) fn tick(&mut self, now_ms: u64) -> SessionTickReport {
        let mut report = SessionTickReport::default();
        let config = self.config;
        let mut sweep = Sweep::new(now_ms, SESSION_TICK_BATCH_MAX);
        while let Some(id) = sweep.next(&self.claims, 0, report.reclaimed.len()) {
            let mut session = self.take(id);
            session.place = Place::Queued(session.place.into_claimed().stage);
            session.visible_at_ms = now_ms;
            self.put(session);
            report.reclaimed.push(id);
        }
        while let Some(id) = sweep.next(
            &self.in_stage,
            config.stage_timeout_ms,
            report.timed_out.len(),
        ) {
            let session = self.take(id);
            let stage = session.stage();
            self.put(kill(session, KillReason::StageTimeout { stage }, now_ms));
            report.timed_out.push(id);
        }
        while let Some(id) = sweep.next(&self.done, config.done_retention_ms, report.archived.len())
        {
            let mut session = self.take(id);
            let Place::Ended(Ended::Done { cert }) = session.place else {
                unreachable!("the done set holds done sessions")
            };
            session.place = Place::Ended(Ended::Archived {
                archived_at_ms: now_ms,
                end: Ending::Done {
                    cert,
                    acknowledged: false,
                    kill_reason: None,
                },
            });
            self.put(session);
            report.archived.push(id);
        }
        while let Some(id) = sweep.next(
            &self.archive,
            config.archive_retention_ms,
            report.deleted.len(),
        ) {
            self.take(id);
            report.deleted.push(id);
        }
        report.more = sweep.more();
        report
    }

    // Reads.

    pub(crate) fn get(&self, id: SessionId) -> Option<&Session> {
        self.table.get(&id)
    }

    pub(crate) fn by_request_key(&self, key: &RequestKey) -> Option<&Session> {
        self.by_request_key.get(key).map(|id| &self.table[id])
    }

    /// Up to `limit` sessions (at most [`LIST_PAGE_MAX`]) in `stage`, in id order, after `after`.
    pub(crate) fn in_stage(
        &self,
        stage: Stage,
        after: Option<SessionId>,
        limit: usize,
    ) -> Vec<&Session> {
        let from = match after {
            Some(id) => Bound::Excluded((stage, id)),
            None => Bound::Included((stage, SessionId(0))),
        };
        self.by_stage
            .range((from, Bound::Included((stage, SessionId(u64::MAX)))))
            .take(limit.min(LIST_PAGE_MAX))
            .map(|(_, id)| &self.table[id])
            .collect()
    }

    /// Queue statistics of a queued stage or of the done set; none for failed.
    pub(crate) fn queue_stats(&self, stage: Stage, now_ms: u64) -> Option<QueueStats> {
        if stage == Stage::Done {
            return Some(QueueStats {
                waiting: self.done.len(),
                claimed: 0,
                oldest_age_ms: self.done.first().map(|&(at, _)| now_ms.saturating_sub(at)),
            });
        }
        let slot = QueuedStage::of(stage)?.slot();
        Some(QueueStats {
            waiting: self.queues[slot].len(),
            claimed: self.claimed[slot].len(),
            oldest_age_ms: self.queues[slot]
                .first()
                .filter(|&&(visible_at_ms, _)| visible_at_ms <= now_ms)
                .map(|&(visible_at_ms, _)| now_ms - visible_at_ms),
        })
    }

    /// When the first session of a queued stage's queue is (or was) visible: the earliest
    /// `visible_at_ms` there; none for an empty queue or a stage without one. Lets a waiting
    /// worker tell "claimable now" from "claimable at" without scanning.
    pub(crate) fn next_visible_ms(&self, stage: Stage) -> Option<u64> {
        let slot = QueuedStage::of(stage)?.slot();
        self.queues[slot]
            .first()
            .map(|&(visible_at_ms, _)| visible_at_ms)
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn archived_count(&self) -> usize {
        self.archive.len()
    }

    // Storage.

    fn get_known(&self, id: SessionId) -> Result<&Session, SessionError> {
        self.table
            .get(&id)
            .ok_or(SessionError::UnknownSession { session: id })
    }

    /// The claim token rules ([`claims::held`]) on session `id`; a stale token of a killed
    /// session is refused as such.
    fn held(&self, id: SessionId, token: u64) -> Result<Held<'_, Session>, SessionError> {
        let session = self.get_known(id)?;
        claims::held(session, token).ok_or_else(|| stale(session, token))
    }

    /// Removes a session from the table and every index.
    fn take(&mut self, id: SessionId) -> Session {
        let session = self
            .table
            .remove(&id)
            .expect("take is called on a stored session");
        self.unindex(&session);
        session
    }

    /// Stores a session that is not stored, indexing it.
    fn put(&mut self, session: Session) {
        self.index(&session)
            .expect("a session apply makes has fresh index entries");
        let previous = self.table.insert(session.id, session);
        assert!(previous.is_none(), "put is called on a missing session");
    }

    fn index(&mut self, session: &Session) -> Result<(), String> {
        let id = session.id;
        let fresh = |inserted: bool, index: &str| {
            if inserted {
                Ok(())
            } else {
                Err(format!("session {id} is in the {index} index twice"))
            }
        };
        if let Some(key) = &session.request_key
            && self.by_request_key.insert(key.clone(), id).is_some()
        {
            return Err(format!("request key {key} names two sessions"));
        }
        fresh(self.by_stage.insert((session.stage(), id)), "stage")?;
        match &session.place {
            Place::Queued(stage) => {
                let entry = (session.visible_at_ms, id);
                fresh(self.queues[stage.slot()].insert(entry), "queue")?;
            }
            Place::Claimed(held) => {
                fresh(self.claims.insert((held.claim.deadline_ms, id)), "claim")?;
                fresh(self.claimed[held.stage.slot()].insert(id), "claimed")?;
            }
            Place::Asleep(never) => match *never {},
            Place::Ended(Ended::Done { .. }) => {
                fresh(self.done.insert((session.stage_entered_ms, id)), "done")?;
            }
            Place::Ended(Ended::Archived { archived_at_ms, .. }) => {
                fresh(self.archive.insert((*archived_at_ms, id)), "archive")?;
            }
        }
        if session.place.in_play() {
            fresh(
                self.in_stage.insert((session.stage_entered_ms, id)),
                "in-stage",
            )?;
        }
        Ok(())
    }

    fn unindex(&mut self, session: &Session) {
        let id = session.id;
        let mut removed = self.by_stage.remove(&(session.stage(), id));
        if let Some(key) = &session.request_key {
            removed &= self.by_request_key.remove(key) == Some(id);
        }
        match &session.place {
            Place::Queued(stage) => {
                removed &= self.queues[stage.slot()].remove(&(session.visible_at_ms, id));
            }
            Place::Claimed(held) => {
                removed &= self.claims.remove(&(held.claim.deadline_ms, id));
                removed &= self.claimed[held.stage.slot()].remove(&id);
            }
            Place::Asleep(never) => match *never {},
            Place::Ended(Ended::Done { .. }) => {
                removed &= self.done.remove(&(session.stage_entered_ms, id));
            }
            Place::Ended(Ended::Archived { archived_at_ms, .. }) => {
                removed &= self.archive.remove(&(*archived_at_ms, id));
            }
        }
        if session.place.in_play() {
            removed &= self.in_stage.remove(&(session.stage_entered_ms, id));
        }
        assert!(removed, "session {id} was indexed as its place says");
    }

    pub(crate) fn records(&self) -> SessionRecordsRef<'_> {
        SessionRecordsRef {
            config: &self.config,
            last_session_id: self.last_session_id,
            last_claim_token: self.last_claim_token,
            sessions: self.table.values().collect(),
        }
    }

    /// Rebuilds the table and its indexes from snapshot records (in any order); refuses
    /// duplicates and records whose fields put the session nowhere. `Sessions::check` does the
    /// rest.
    pub(crate) fn from_records(records: SessionRecords) -> Result<Sessions, String> {
        let mut sessions = Sessions {
            config: records.config,
            last_session_id: records.last_session_id,
            last_claim_token: records.last_claim_token,
            ..Sessions::default()
        };
        for record in records.sessions {
            if sessions.table.contains_key(&record.id) {
                return Err(format!("session {} appears twice", record.id));
            }
            let session = Session::try_from(record)?;
            sessions.index(&session)?;
            sessions.table.insert(session.id, session);
        }
        Ok(sessions)
    }

    /// Every invariant of the table and its indexes, against the machine clock.
    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        self.config.validate().map_err(|e| e.to_string())?;
        if self.table.len() > SESSIONS_MAX {
            return Err(format!(
                "{} sessions exceed the limit {SESSIONS_MAX}",
                self.table.len()
            ));
        }
        // Rebuild every index from the places and fields and compare: equal indexes hold
        // exactly the entries the sessions say.
        let mut rebuilt = Sessions::default();
        for (id, session) in &self.table {
            if *id != session.id {
                return Err(format!("session {} is filed under {id}", session.id));
            }
            self.check_session(session, clock_ms)?;
            rebuilt.index(session)?;
        }
        let indexes_agree = rebuilt.by_request_key == self.by_request_key
            && rebuilt.by_stage == self.by_stage
            && rebuilt.queues == self.queues
            && rebuilt.claimed == self.claimed
            && rebuilt.claims == self.claims
            && rebuilt.in_stage == self.in_stage
            && rebuilt.done == self.done
            && rebuilt.archive == self.archive;
        if !indexes_agree {
            return Err("the session indexes differ from what the sessions say".to_owned());
        }
        Ok(())
    }

    fn check_session(&self, session: &Session, clock_ms: u64) -> Result<(), String> {
        let id = session.id;
        let fail = |what: String| Err(format!("session {id}: {what}"));
        if id.0 == 0 || id.0 > self.last_session_id {
            return fail(format!(
                "the id is not in 1..={} (the last issued)",
                self.last_session_id
            ));
        }
        if session.names.is_empty()
            || session.names.len() > SESSION_NAMES_MAX
            || session.names.windows(2).any(|pair| pair[0] >= pair[1])
        {
            return fail("the names are not 1 to 100, sorted and distinct".to_owned());
        }
        if session.csr.is_empty() || session.csr.len() > SESSION_CSR_BYTES_MAX {
            return fail(format!("the CSR is {} bytes", session.csr.len()));
        }
        if let Some(cert) = session.cert()
            && (cert.is_empty() || cert.len() > SESSION_CERT_BYTES_MAX)
        {
            return fail(format!("the certificate is {} bytes", cert.len()));
        }
        // Times.
        let not_future = [
            Some(session.created_ms),
            Some(session.stage_entered_ms),
            session.archived_at_ms(),
        ]
        .into_iter()
        .flatten()
        .chain(session.challenges.iter().map(|c| c.challtime_ms))
        .all(|at_ms| at_ms <= clock_ms);
        if !not_future || session.created_ms > session.stage_entered_ms {
            return fail(format!(
                "a creation, stage, challenge, done or archive time is after the clock \
                 ({clock_ms}) or the stage was entered before creation"
            ));
        }
        if session.visible_at_ms > clock_ms.saturating_add(SESSION_DELAY_MS_MAX) {
            return fail("it is invisible for longer than any delay allows".to_owned());
        }
        // Stage and challenges.
        let stage = session.stage();
        let matches_names = session.challenges.len() == session.names.len()
            && session
                .challenges
                .iter()
                .zip(&session.names)
                .all(|(challenge, name)| challenge.name == *name);
        let all_satisfied = session.challenges.iter().all(|c| c.satisfied);
        let challenges_fit = match stage {
            Stage::MakeChallenge => session.challenges.is_empty(),
            Stage::TestChallenge => matches_names && !all_satisfied,
            Stage::Issue | Stage::Done => matches_names && all_satisfied,
            Stage::Failed => session.challenges.is_empty() || matches_names,
        };
        if !challenges_fit {
            return fail(format!("its challenges do not fit stage {stage}"));
        }
        let kill_reason = session.kill_reason();
        for challenge in &session.challenges {
            let consistent = if challenge.satisfied {
                !challenge.failed && challenge.times_tested > 0 && challenge.last_error.is_none()
            } else {
                !challenge.failed || matches!(kill_reason, Some(KillReason::TestedTooOften { .. }))
            };
            if !consistent || challenge.challtime_ms < session.created_ms {
                return fail(format!(
                    "the challenge for {} is inconsistent",
                    challenge.name
                ));
            }
        }
        let tokens_repeat = session
            .challenges
            .iter()
            .map(|c| &c.token)
            .collect::<BTreeSet<_>>()
            .len()
            != session.challenges.len();
        if tokens_repeat {
            return fail("two challenges share a token".to_owned());
        }
        match kill_reason {
            Some(KillReason::StageTimeout { stage: killed_in }) if *killed_in != stage => {
                return fail(format!("it timed out in {killed_in} but is in {stage}"));
            }
            Some(KillReason::TestedTooOften { name, times }) => {
                let named = session.challenges.iter().find(|c| c.name == *name);
                if stage != Stage::TestChallenge
                    || named.is_none_or(|c| !c.failed || c.times_tested != *times)
                {
                    return fail(format!(
                        "it was killed for the tests of {name}, which do not show it"
                    ));
                }
            }
            _ => {}
        }
        // Claims and completions.
        claims::check(
            session,
            self.last_claim_token,
            clock_ms,
            SESSION_VISIBILITY_MS_MAX,
        )
        .or_else(fail)
    }
}

/// Why a token that does not hold session `session` is refused: the session was killed, or the
/// token is stale.
fn stale(session: &Session, token: u64) -> SessionError {
    match session.kill_reason() {
        Some(reason) => SessionError::NotLive {
            session: session.id,
            reason: reason.clone(),
        },
        None => SessionError::StaleClaim {
            session: session.id,
            token,
        },
    }
}

/// Kills a live session: it leaves its queue or claim and is archived (unless it already was),
/// keeping its stage.
fn kill(mut session: Session, reason: KillReason, now_ms: u64) -> Session {
    assert!(session.live(), "only a live session is killed");
    session.place = Place::Ended(match session.place {
        Place::Queued(stage) | Place::Claimed(StageClaim { stage, .. }) => Ended::Archived {
            archived_at_ms: now_ms,
            end: Ending::Killed { stage, reason },
        },
        Place::Asleep(never) => match never {},
        Place::Ended(Ended::Done { cert }) => Ended::Archived {
            archived_at_ms: now_ms,
            end: Ending::Done {
                cert,
                acknowledged: false,
                kill_reason: Some(reason),
            },
        },
        Place::Ended(Ended::Archived {
            archived_at_ms,
            end,
        }) => Ended::Archived {
            archived_at_ms,
            end: match end {
                Ending::Done {
                    cert, acknowledged, ..
                } => Ending::Done {
                    cert,
                    acknowledged,
                    kill_reason: Some(reason),
                },
                Ending::Failed { failure, .. } => Ending::Failed {
                    failure,
                    kill_reason: Some(reason),
                },
                Ending::Killed { .. } => unreachable!("a killed session is not live"),
            },
        },
    });
    session
}

/// The challenges of a makechallenge outcome, checked against the session's names and sorted
/// like them.
fn new_challenges(
    names: &[DnsName],
    mut challenges: Vec<NewChallenge>,
    now_ms: u64,
) -> Result<Vec<SessionChallenge>, SessionError> {
    challenges.sort_by(|a, b| a.name.cmp(&b.name));
    let bad = |what: String| Err(SessionError::BadOutcome(what));
    if challenges.len() != names.len()
        || challenges
            .iter()
            .zip(names)
            .any(|(challenge, name)| challenge.name != *name)
    {
        let sent: Vec<&str> = challenges.iter().map(|c| c.name.as_str()).collect();
        let wanted: Vec<&str> = names.iter().map(DnsName::as_str).collect();
        return bad(format!(
            "challenges were made for {sent:?}; exactly one per session name {wanted:?} is needed"
        ));
    }
    let tokens: BTreeSet<&ChallengeToken> = challenges.iter().map(|c| &c.token).collect();
    if tokens.len() != challenges.len() {
        return bad("two challenges share a token; each name needs its own".to_owned());
    }
    Ok(challenges
        .into_iter()
        .map(|challenge| SessionChallenge {
            name: challenge.name,
            token: challenge.token,
            key_authorization: challenge.key_authorization,
            challtime_ms: now_ms,
            satisfied: false,
            failed: false,
            times_tested: 0,
            last_error: None,
        })
        .collect())
}

/// Records a testchallenge outcome on `session` (claimed, in testchallenge) and moves it on: to
/// issue when every challenge is satisfied, killed when an unsatisfied one used up its
/// `max_tests` attempts, otherwise back to the queue after the retry delay. Checks the whole
/// outcome before changing anything.
fn record_tests(
    mut session: Session,
    results: Vec<TestResult>,
    config: &SessionConfig,
    now_ms: u64,
) -> Result<Session, SessionError> {
    let bad = |what: String| Err(SessionError::BadOutcome(what));
    if results.len() != session.challenges.len() {
        return bad(format!(
            "{} test results for {} challenges; send exactly one per challenge",
            results.len(),
            session.challenges.len()
        ));
    }
    let mut positions = Vec::with_capacity(results.len());
    for result in &results {
        let Ok(position) = session
            .challenges
            .binary_search_by(|challenge| challenge.name.cmp(&result.name))
        else {
            return bad(format!("{} is not one of the session's names", result.name));
        };
        if positions.contains(&position) {
            return bad(format!("{} was tested twice in one outcome", result.name));
        }
        if result.satisfied && result.error.is_some() {
            return bad(format!(
                "the result for {} is satisfied yet carries an error",
                result.name
            ));
        }
        positions.push(position);
    }
    for (result, position) in results.into_iter().zip(positions) {
        let challenge = &mut session.challenges[position];
        // A satisfied challenge stays satisfied: a later test of it changes nothing.
        if challenge.satisfied {
            continue;
        }
        challenge.times_tested = claims::count_attempt(challenge.times_tested);
        challenge.satisfied = result.satisfied;
        challenge.last_error = result.error;
    }
    if session.challenges.iter().all(|c| c.satisfied) {
        session.place = Place::Queued(QueuedStage::Issue);
        session.stage_entered_ms = now_ms;
        session.visible_at_ms = now_ms;
        return Ok(session);
    }
    let mut exhausted = None;
    for challenge in &mut session.challenges {
        if !challenge.satisfied && claims::exhausted(challenge.times_tested, config.max_tests) {
            challenge.failed = true;
            exhausted.get_or_insert((challenge.name.clone(), challenge.times_tested));
        }
    }
    Ok(match exhausted {
        Some((name, times)) => kill(session, KillReason::TestedTooOften { name, times }, now_ms),
        None => {
            session.place = Place::Queued(QueuedStage::TestChallenge);
            session.visible_at_ms = now_ms.saturating_add(config.test_retry_ms);
            session
        }
    })
}

fn check_visibility(visibility_ms: u64) -> Result<(), SessionError> {
    claims::within(
        "visibility_ms",
        visibility_ms,
        SESSION_VISIBILITY_MS_MIN,
        SESSION_VISIBILITY_MS_MAX,
    )?;
    Ok(())
}

fn check_bytes(field: &str, bytes: usize, max: usize) -> Result<(), SessionError> {
    if bytes > max {
        return Err(SessionError::TooLarge {
            field: field.to_owned(),
            bytes,
            max,
        });
    }
    claims::within(&format!("{field} bytes"), bytes as u64, 1, max as u64)?;
    Ok(())
}

mod record;

pub(crate) use record::SessionRecord;

#[cfg(test)]
mod tests;
