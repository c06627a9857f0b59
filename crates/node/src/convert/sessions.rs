//! `certus.v1.Sessions`: CA issuance sessions for clients, workers and operators.
//!
//! A CSR that does not parse or whose signature fails, a name that is not a DNS name, names that
//! differ from the CSR's, get a clear `INVALID_ARGUMENT`. So do numbers and sizes past the state
//! machine's bounds (names, challenges and test results per session, certificate bytes, claim
//! batch, visibility, release delay, completes per batch): they are checked here too, so they are
//! never proposed (nor echoed back in a long message), and the refusal reads as the state
//! machine's would. So is a claim's wait, which only the node knows. Every rule of the session
//! table itself is the state machine's (`certus_core::sessions`).

use std::time::Duration;

use certus_ca::csr::CheckedCsr;
use certus_core::limits::{
    SESSION_CERT_BYTES_MAX, SESSION_CLAIM_BATCH_MAX, SESSION_COMPLETE_BATCH_MAX,
    SESSION_DELAY_MS_MAX, SESSION_NAMES_MAX, SESSION_VISIBILITY_MS_MAX, SESSION_VISIBILITY_MS_MIN,
};
use certus_core::{
    CompleteItem, DnsName, NewChallenge, Reason, RequestKey, Session, SessionCommand,
    SessionConfig, SessionError, SessionId, SessionReply, Stage, State, StepOutcome, TestResult,
    WorkerId,
};
use certus_proto::v1;
use tonic::Status;

use crate::convert::leases::{challenge_token, key_authorization};
use crate::convert::{Query, in_range, invalid, optional, page_limit, text, unexpected};
use crate::errors::{ERROR_REASON_KEY, session_refusal, session_status};
use crate::limits::{SESSION_CLAIM_WAIT_MS_MAX, SESSION_WAIT_MAX, SESSION_WORK_CREDIT_MAX};

// ---- the client calls ---------------------------------------------------------------------

/// `Create`: the CSR checked, the names checked against it (the CSR's own when none are given).
pub fn create(request: v1::CreateSessionRequest) -> Result<SessionCommand, Status> {
    let csr = checked_csr(&request.csr)?;
    per_name("number of names", request.names.len())?;
    let names = if request.names.is_empty() {
        csr.names().to_vec()
    } else {
        let mut names: Vec<String> = request
            .names
            .iter()
            .map(|name| name.to_ascii_lowercase())
            .collect();
        // Each name is checked before they are compared with the CSR's, whose refusal lists
        // the names that differ.
        for name in &names {
            DnsName::new(name.clone()).map_err(|error| invalid("names", error))?;
        }
        names.sort();
        let before = names.len();
        names.dedup();
        if names.len() != before {
            return Err(invalid("names", "a name is listed twice"));
        }
        csr.matches(&names).map_err(|error| invalid("csr", error))?;
        names
    };
    let names = names
        .into_iter()
        .map(|name| DnsName::new(name).map_err(|error| invalid("names", error)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SessionCommand::Create {
        request_key: optional(request.request_key, "request_key", RequestKey::new)?,
        csr: csr.der().to_vec(),
        names,
    })
}

/// `Create`'s reply: the session created (or found by its request key).
pub fn created(reply: SessionReply) -> Result<SessionId, Status> {
    match reply {
        SessionReply::Created { session, .. } => Ok(session),
        other => Err(unexpected("create", &other)),
    }
}

/// The session `id` for the wire, or `NOT_FOUND`: `Get`, and the answer of every call that
/// returns a session.
pub fn session(id: SessionId) -> impl Query<v1::Session> {
    move |state: &State, _now_ms: u64| {
        state
            .session(id)
            .map(session_to_proto)
            .ok_or_else(|| session_status(&SessionError::UnknownSession { session: id }))
    }
}

/// A `Wait`: for which session, how long (at most [`SESSION_WAIT_MAX`]), and what the client
/// knows of it.
#[derive(Debug)]
pub struct Wait {
    /// The session.
    pub id: SessionId,
    /// How long to wait for a change.
    pub wait: Duration,
    /// The progress the client knows ([`progress`]); none: any state is news.
    pub known: Option<v1::Session>,
}

/// `Wait`.
pub fn wait(request: v1::WaitSessionRequest) -> Wait {
    Wait {
        id: SessionId(request.id),
        wait: Duration::from_millis(request.wait_ms).min(SESSION_WAIT_MAX),
        known: request.known.as_ref().map(progress),
    }
}

/// What a `Wait` compares: everything that means progress to a client, not the claims workers
/// take and give back.
pub fn progress(session: &v1::Session) -> v1::Session {
    v1::Session {
        claimant: String::new(),
        claim_token: 0,
        claim_deadline_ms: 0,
        ..session.clone()
    }
}

/// `Acknowledge`.
pub fn acknowledge(request: v1::AcknowledgeSessionRequest) -> Result<SessionCommand, Status> {
    Ok(SessionCommand::Acknowledge {
        session: SessionId(request.id),
    })
}

/// `Acknowledge`'s reply.
pub fn acknowledged(reply: SessionReply) -> Result<(), Status> {
    match reply {
        SessionReply::Acknowledged { .. } => Ok(()),
        other => Err(unexpected("acknowledge", &other)),
    }
}

/// `Kill`.
pub fn kill(request: v1::KillSessionRequest) -> Result<SessionCommand, Status> {
    Ok(SessionCommand::Kill {
        session: SessionId(request.id),
        reason: Reason::new(request.reason).map_err(|error| invalid("reason", error))?,
    })
}

/// `Kill`'s reply.
pub fn killed(reply: SessionReply) -> Result<(), Status> {
    match reply {
        SessionReply::Killed { .. } => Ok(()),
        other => Err(unexpected("kill", &other)),
    }
}

/// `List`: a page of the sessions at a stage.
pub fn list(request: v1::ListSessionsRequest) -> Result<impl Query<v1::ListSessionsReply>, Status> {
    let stage = stage_from_proto(request.stage)?;
    let limit = page_limit(request.limit);
    let after = (request.after != 0).then_some(SessionId(request.after));
    Ok(move |state: &State, _now_ms: u64| {
        let page = state
            .sessions_in(stage, after, limit + 1)
            .into_iter()
            .map(session_to_proto)
            .collect::<Vec<_>>();
        let more = page.len() > limit;
        let sessions: Vec<v1::Session> = page.into_iter().take(limit).collect();
        let next_after = if more {
            sessions.last().map_or(0, |session| session.id)
        } else {
            0
        };
        Ok(v1::ListSessionsReply {
            sessions,
            next_after,
        })
    })
}

// ---- the worker calls ---------------------------------------------------------------------

/// `Claim`, as proposed (its wait, if any, checked and left out).
pub fn claim(request: v1::ClaimRequest) -> Result<SessionCommand, Status> {
    claim_waiting(request).map(|claim| claim.command)
}

/// A `Claim` with how long it may wait for a claimable session.
#[derive(Debug)]
pub struct ClaimWait {
    /// The stage whose queue it claims from (a queued one).
    pub stage: Stage,
    /// The claim, proposed once the stage's queue shows a visible session.
    pub command: SessionCommand,
    /// How long to wait (at most [`SESSION_CLAIM_WAIT_MS_MAX`]); zero: claim at once.
    pub wait: Duration,
}

/// `Claim`, long-poll included.
pub fn claim_waiting(request: v1::ClaimRequest) -> Result<ClaimWait, Status> {
    visibility(request.visibility_ms)?;
    in_range::<SessionCommand>("max", request.max.into(), 1, SESSION_CLAIM_BATCH_MAX.into())?;
    in_range::<SessionCommand>("wait_ms", request.wait_ms, 0, SESSION_CLAIM_WAIT_MS_MAX)?;
    let stage = stage_from_proto(request.stage)?;
    if !stage.is_queued() {
        // The state machine refuses it too; a long-poll must not wait on a queue that is none.
        return Err(session_status(&SessionError::NotQueued { stage }));
    }
    Ok(ClaimWait {
        stage,
        command: SessionCommand::Claim {
            stage,
            worker: WorkerId::new(request.worker).map_err(|error| invalid("worker", error))?,
            visibility_ms: request.visibility_ms,
            max: request.max,
        },
        wait: Duration::from_millis(request.wait_ms),
    })
}

/// `Claim`'s reply.
pub fn claimed(reply: SessionReply) -> Result<v1::ClaimReply, Status> {
    match reply {
        SessionReply::Claimed(sessions) => Ok(v1::ClaimReply {
            sessions: sessions.iter().map(session_to_proto).collect(),
        }),
        other => Err(unexpected("claim", &other)),
    }
}

/// `Extend`.
pub fn extend(request: v1::ExtendRequest) -> Result<SessionCommand, Status> {
    visibility(request.visibility_ms)?;
    Ok(SessionCommand::Extend {
        session: SessionId(request.id),
        token: request.claim_token,
        visibility_ms: request.visibility_ms,
    })
}

/// `Extend`'s reply.
pub fn extended(reply: SessionReply) -> Result<v1::ExtendReply, Status> {
    match reply {
        SessionReply::Extended { deadline_ms, .. } => Ok(v1::ExtendReply {
            claim_deadline_ms: deadline_ms,
        }),
        other => Err(unexpected("extend", &other)),
    }
}

/// `Complete`.
pub fn complete(request: v1::CompleteRequest) -> Result<SessionCommand, Status> {
    let outcome = outcome_from_proto(request.outcome)?;
    Ok(SessionCommand::Complete {
        session: SessionId(request.id),
        token: request.claim_token,
        outcome,
    })
}

/// `CompleteBatch`: every item as for `Complete`. A malformed item refuses the whole request
/// (naming the item), as a malformed lone `Complete` would be refused before Raft; what depends
/// on the state (tokens, stages, names) is answered item by item by the state machine.
pub fn complete_batch(request: v1::CompleteSessionBatchRequest) -> Result<SessionCommand, Status> {
    in_range::<SessionCommand>(
        "number of items",
        request.items.len() as u64,
        1,
        SESSION_COMPLETE_BATCH_MAX as u64,
    )?;
    let items = request
        .items
        .into_iter()
        .enumerate()
        .map(|(at, item)| {
            let session = SessionId(item.id);
            let token = item.claim_token;
            let outcome = outcome_from_proto(item.outcome).map_err(|error| in_item(at, &error))?;
            Ok(CompleteItem {
                session,
                token,
                outcome,
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(SessionCommand::CompleteBatch { items })
}

/// `CompleteBatch`'s reply: one result per item of `command`, in order.
pub fn completed_batch(
    command: &SessionCommand,
    reply: SessionReply,
) -> Result<v1::CompleteSessionBatchReply, Status> {
    let (SessionCommand::CompleteBatch { items }, SessionReply::CompletedBatch(replies)) =
        (command, &reply)
    else {
        return Err(unexpected("complete batch", &reply));
    };
    if items.len() != replies.len() {
        return Err(unexpected(
            "complete batch (another number of items)",
            &reply,
        ));
    }
    let SessionReply::CompletedBatch(replies) = reply else {
        unreachable!("matched above")
    };
    Ok(v1::CompleteSessionBatchReply {
        results: items
            .iter()
            .zip(replies)
            .map(|(item, reply)| step_result(item.session, reply))
            .collect(),
    })
}

/// What one worker step did, for the wire: a batch's item, or a step on the `Work` stream.
pub fn step_result(
    session: SessionId,
    reply: Result<SessionReply, SessionError>,
) -> v1::SessionStepResult {
    let mut result = v1::SessionStepResult {
        id: session.0,
        ..v1::SessionStepResult::default()
    };
    match reply {
        Err(error) => {
            let (code, reason) = session_refusal(&error);
            result.error = reason.to_owned();
            result.message = error.to_string();
            result.code = code as u32;
        }
        Ok(SessionReply::Completed { stage, live, .. }) => {
            result.stage = stage_to_proto(stage).into();
            result.live = live;
        }
        Ok(SessionReply::Failed { .. }) => {
            result.stage = v1::Stage::Failed.into();
            result.live = true;
        }
        Ok(SessionReply::Released { visible_at_ms, .. }) => {
            result.deadline_ms = visible_at_ms;
            result.live = true;
        }
        Ok(SessionReply::Extended { deadline_ms, .. }) => {
            result.deadline_ms = deadline_ms;
            result.live = true;
        }
        // Steps answer with the replies above only; anything else is a bug, said in the item.
        Ok(other) => {
            let status = unexpected("a worker step", &other);
            result.error = "internal".to_owned();
            result.message = status.message().to_owned();
            result.code = status.code() as u32;
        }
    }
    result
}

/// A refusal of item `at` of a batch: the item's refusal, its message naming the item.
fn in_item(at: usize, error: &Status) -> Status {
    Status::with_metadata(
        error.code(),
        format!("items[{at}]: {}", error.message()),
        error.metadata().clone(),
    )
}

/// `Release` (of a claim).
pub fn release(request: v1::ReleaseClaimRequest) -> Result<SessionCommand, Status> {
    in_range::<SessionCommand>("delay_ms", request.delay_ms, 0, SESSION_DELAY_MS_MAX)?;
    Ok(SessionCommand::Release {
        session: SessionId(request.id),
        token: request.claim_token,
        delay_ms: request.delay_ms,
        note: optional(request.note, "note", Reason::new)?,
    })
}

/// `Fail`.
pub fn fail(request: v1::FailRequest) -> Result<SessionCommand, Status> {
    Ok(SessionCommand::Fail {
        session: SessionId(request.id),
        token: request.claim_token,
        reason: Reason::new(request.reason).map_err(|error| invalid("reason", error))?,
    })
}

// ---- the worker stream --------------------------------------------------------------------

/// A `Work` stream's first message, checked: what the stream claims, and for whom.
#[derive(Debug, Clone)]
pub struct WorkStart {
    /// The queued stage it claims from.
    pub stage: Stage,
    /// Who claims.
    pub worker: WorkerId,
    /// How long each claim holds.
    pub visibility_ms: u64,
    /// The credit it starts with.
    pub credit: u32,
}

impl WorkStart {
    /// The claim that takes up to `max` sessions for the stream (`max` within the claim batch).
    pub fn claim(&self, max: u32) -> SessionCommand {
        SessionCommand::Claim {
            stage: self.stage,
            worker: self.worker.clone(),
            visibility_ms: self.visibility_ms,
            max: max.min(SESSION_CLAIM_BATCH_MAX),
        }
    }
}

/// `Work`'s first message, which must be `start`.
pub fn work_start(request: v1::SessionWorkRequest) -> Result<WorkStart, Status> {
    let Some(v1::session_work_request::Kind::Start(start)) = request.kind else {
        return Err(invalid(
            "start",
            "the first message of a Work stream must be `start` (the stage, the worker, the \
             visibility and the first credit)",
        ));
    };
    visibility(start.visibility_ms)?;
    let stage = stage_from_proto(start.stage)?;
    if !stage.is_queued() {
        return Err(session_status(&SessionError::NotQueued { stage }));
    }
    Ok(WorkStart {
        stage,
        worker: WorkerId::new(start.worker).map_err(|error| invalid("worker", error))?,
        visibility_ms: start.visibility_ms,
        credit: grant(0, start.credit)?,
    })
}

/// The credit outstanding after a grant of `more` on top of `outstanding`, within
/// [`SESSION_WORK_CREDIT_MAX`].
pub fn grant(outstanding: u32, more: u32) -> Result<u32, Status> {
    let total = u64::from(outstanding) + u64::from(more);
    u32::try_from(total)
        .ok()
        .filter(|&total| total <= SESSION_WORK_CREDIT_MAX)
        .ok_or_else(|| {
            invalid(
                "credit",
                format!(
                    "{more} more on top of {outstanding} outstanding is {total}; at most \
                     {SESSION_WORK_CREDIT_MAX} may be outstanding (grant credit as work finishes)"
                ),
            )
        })
}

/// What a worker sends after `start`.
#[derive(Debug)]
pub enum WorkMessage {
    /// More credit.
    Credit(u32),
    /// A step, answered on the stream under its `step_id`.
    Step {
        /// The worker's number for the step.
        step_id: u64,
        /// The session it names.
        session: SessionId,
        /// The step's command, or why it is refused without being proposed.
        command: Result<SessionCommand, Status>,
    },
}

/// A message after `start`; a message that is neither credit nor a step ends the stream.
pub fn work_message(request: v1::SessionWorkRequest) -> Result<WorkMessage, Status> {
    use v1::session_work_request::Kind;
    use v1::session_work_step::Step;
    let step = match request.kind {
        Some(Kind::Credit(credit)) => return Ok(WorkMessage::Credit(credit)),
        Some(Kind::Step(step)) => step,
        Some(Kind::Start(_)) => return Err(invalid("start", "a Work stream starts only once")),
        None => return Err(invalid("kind", "missing: send credit or a step")),
    };
    let step_id = step.step_id;
    let (session, command) = match step.step {
        Some(Step::Complete(request)) => (request.id, complete(request)),
        Some(Step::Extend(request)) => (request.id, extend(request)),
        Some(Step::Release(request)) => (request.id, release(request)),
        Some(Step::Fail(request)) => (request.id, fail(request)),
        None => (
            0,
            Err(invalid(
                "step",
                "missing: send complete, extend, release or fail",
            )),
        ),
    };
    Ok(WorkMessage::Step {
        step_id,
        session: SessionId(session),
        command,
    })
}

/// A session pushed to a worker.
pub fn claimed_event(session: &Session) -> v1::SessionWorkEvent {
    v1::SessionWorkEvent {
        kind: Some(v1::session_work_event::Kind::Claimed(session_to_proto(
            session,
        ))),
    }
}

/// The answer to step `step_id`.
pub fn answer_event(step_id: u64, result: v1::SessionStepResult) -> v1::SessionWorkEvent {
    v1::SessionWorkEvent {
        kind: Some(v1::session_work_event::Kind::Answer(
            v1::SessionStepAnswer {
                step_id,
                result: Some(result),
            },
        )),
    }
}

/// A step on `session` refused with `status` (malformed, or not proposed: no leader, say), as
/// a step's result.
pub fn refused_step(session: SessionId, status: &Status) -> v1::SessionStepResult {
    v1::SessionStepResult {
        id: session.0,
        error: status
            .metadata()
            .get(ERROR_REASON_KEY)
            .and_then(|reason| reason.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        message: status.message().to_owned(),
        code: status.code() as u32,
        ..v1::SessionStepResult::default()
    }
}

// ---- status and configuration -------------------------------------------------------------

/// `Status`: the configuration and the queues.
pub fn status(
    _request: v1::SessionsStatusRequest,
) -> Result<impl Query<v1::SessionsStatus>, Status> {
    Ok(|state: &State, now_ms: u64| {
        let queues = Stage::QUEUED
            .iter()
            .filter_map(|stage| {
                let stats = state.sessions_queue_stats(*stage, now_ms)?;
                Some(v1::StageQueue {
                    stage: stage_to_proto(*stage).into(),
                    waiting: stats.waiting as u64,
                    claimed: stats.claimed as u64,
                    oldest_visible_age_ms: stats.oldest_age_ms.unwrap_or(0),
                })
            })
            .collect();
        let done = state
            .sessions_queue_stats(Stage::Done, now_ms)
            .map_or(0, |stats| stats.waiting as u64);
        Ok(v1::SessionsStatus {
            config: Some(config_to_proto(state.session_config())),
            queues,
            done,
            archived: state.sessions_archived_count() as u64,
            total: state.session_count() as u64,
        })
    })
}

/// `SetConfig`: the configuration, validated.
pub fn set_config(request: v1::SetSessionConfigRequest) -> Result<SessionCommand, Status> {
    let config = request.config.ok_or_else(|| invalid("config", "missing"))?;
    let config = config_from_proto(&config);
    config.validate().map_err(|error| session_status(&error))?;
    Ok(SessionCommand::Configure(config))
}

/// The configuration now: `SetConfig`'s answer.
pub fn config(state: &State, _now_ms: u64) -> Result<v1::SessionConfig, Status> {
    Ok(config_to_proto(state.session_config()))
}

// ---- fields -------------------------------------------------------------------------------

/// A claim's visibility, within the state machine's bounds.
fn visibility(visibility_ms: u64) -> Result<(), Status> {
    in_range::<SessionCommand>(
        "visibility_ms",
        visibility_ms,
        SESSION_VISIBILITY_MS_MIN,
        SESSION_VISIBILITY_MS_MAX,
    )
}

/// A count of what a session has one of per name (names, challenges, test results): no more
/// than a session may have names.
fn per_name(field: &str, count: usize) -> Result<(), Status> {
    in_range::<SessionCommand>(field, count as u64, 0, SESSION_NAMES_MAX as u64)
}

/// A CSR in DER or PEM, parsed and its signature checked.
fn checked_csr(bytes: &[u8]) -> Result<CheckedCsr, Status> {
    let checked = match std::str::from_utf8(bytes) {
        Ok(text) if text.contains("-----BEGIN") => CheckedCsr::from_pem(text),
        _ => CheckedCsr::from_der(bytes),
    };
    checked.map_err(|error| invalid("csr", error))
}

fn stage_to_proto(stage: Stage) -> v1::Stage {
    match stage {
        Stage::MakeChallenge => v1::Stage::MakeChallenge,
        Stage::TestChallenge => v1::Stage::TestChallenge,
        Stage::Issue => v1::Stage::Issue,
        Stage::Done => v1::Stage::Done,
        Stage::Failed => v1::Stage::Failed,
    }
}

fn stage_from_proto(stage: i32) -> Result<Stage, Status> {
    match v1::Stage::try_from(stage) {
        Ok(v1::Stage::MakeChallenge) => Ok(Stage::MakeChallenge),
        Ok(v1::Stage::TestChallenge) => Ok(Stage::TestChallenge),
        Ok(v1::Stage::Issue) => Ok(Stage::Issue),
        Ok(v1::Stage::Done) => Ok(Stage::Done),
        Ok(v1::Stage::Failed) => Ok(Stage::Failed),
        Ok(v1::Stage::Unspecified) | Err(_) => Err(invalid(
            "stage",
            format!("{stage} is not a stage (MAKE_CHALLENGE, TEST_CHALLENGE, ISSUE, DONE, FAILED)"),
        )),
    }
}

fn outcome_from_proto(
    outcome: Option<v1::complete_request::Outcome>,
) -> Result<StepOutcome, Status> {
    use v1::complete_request::Outcome;
    let name = |name: String| DnsName::new(name).map_err(|error| invalid("name", error));
    match outcome {
        None => Err(invalid(
            "outcome",
            "missing: send challenges, tested or issued for the claimed stage",
        )),
        Some(Outcome::Challenges(challenges)) => {
            per_name("number of challenges", challenges.challenges.len())?;
            Ok(StepOutcome::Challenges(
                challenges
                    .challenges
                    .into_iter()
                    .map(|challenge| {
                        Ok(NewChallenge {
                            name: name(challenge.name)?,
                            token: challenge_token(challenge.token)?,
                            key_authorization: key_authorization(challenge.key_authorization)?,
                        })
                    })
                    .collect::<Result<_, Status>>()?,
            ))
        }
        Some(Outcome::Tested(tested)) => {
            per_name("number of test results", tested.results.len())?;
            Ok(StepOutcome::Tested(
                tested
                    .results
                    .into_iter()
                    .map(|result| {
                        Ok(TestResult {
                            name: name(result.name)?,
                            satisfied: result.satisfied,
                            error: optional(result.error, "error", Reason::new)?,
                        })
                    })
                    .collect::<Result<_, Status>>()?,
            ))
        }
        Some(Outcome::Issued(issued)) => {
            let bytes = issued.certificate.len();
            if bytes > SESSION_CERT_BYTES_MAX {
                return Err(session_status(&SessionError::TooLarge {
                    field: "certificate".to_owned(),
                    bytes,
                    max: SESSION_CERT_BYTES_MAX,
                }));
            }
            Ok(StepOutcome::Issued {
                cert: issued.certificate.into_bytes(),
            })
        }
    }
}

/// A session for the wire.
pub fn session_to_proto(session: &Session) -> v1::Session {
    v1::Session {
        id: session.id.0,
        created_ms: session.created_ms,
        live: session.live(),
        kill_reason: text(session.kill_reason()),
        csr: session.csr.clone(),
        names: session
            .names
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect(),
        stage: stage_to_proto(session.stage()).into(),
        stage_entered_ms: session.stage_entered_ms,
        challenges: session
            .challenges
            .iter()
            .map(|challenge| v1::SessionChallenge {
                name: challenge.name.as_str().to_owned(),
                token: challenge.token.as_str().to_owned(),
                key_authorization: challenge.key_authorization.as_str().to_owned(),
                challtime_ms: challenge.challtime_ms,
                satisfied: challenge.satisfied,
                failed: challenge.failed,
                times_tested: challenge.times_tested,
                last_error: text(challenge.last_error.as_ref()),
            })
            .collect(),
        certificate: session
            .cert()
            .map(|cert| String::from_utf8_lossy(cert).into_owned())
            .unwrap_or_default(),
        failure: text(session.failure()),
        claimant: text(session.claim().map(|claim| &claim.claimant)),
        claim_token: session.claim().map_or(0, |claim| claim.token),
        claim_deadline_ms: session.claim().map_or(0, |claim| claim.deadline_ms),
        acknowledged: session.acknowledged(),
        archived_at_ms: session.archived_at_ms().unwrap_or(0),
        request_key: text(session.request_key.as_ref()),
        note: text(session.note.as_ref()),
    }
}

config_both_ways!(
    SessionConfig,
    v1::SessionConfig,
    config_to_proto,
    config_from_proto,
    [
        stage_timeout_ms,
        max_tests,
        test_retry_ms,
        done_retention_ms,
        archive_retention_ms,
        sessions_max,
    ]
);
