//! `certus.v1.Sessions`: CA issuance sessions for clients, workers and operators.
//!
//! Requests are checked here before anything is proposed: a CSR that does not parse or whose
//! signature fails, a name that is not a DNS name, names that differ from the CSR's, get a clear
//! `INVALID_ARGUMENT` and change nothing. So do numbers and sizes past the state machine's bounds
//! (names, challenges and test results per session, certificate bytes, claim batch, visibility,
//! release delay): they are checked here too, so they are never proposed (nor echoed back in a
//! long message), and the refusal reads as the state machine's would. Every rule of the session
//! table itself is the state machine's (`certus_core::sessions`).

use std::sync::Arc;
use std::time::Duration;

use certus_ca::csr::CheckedCsr;
use certus_core::limits::{
    SESSION_CERT_BYTES_MAX, SESSION_CLAIM_BATCH_MAX, SESSION_DELAY_MS_MAX, SESSION_NAMES_MAX,
    SESSION_VISIBILITY_MS_MAX, SESSION_VISIBILITY_MS_MIN,
};
use certus_core::{
    ClientRequest, Command, DnsName, KillReason, NewChallenge, Reason, RequestKey,
    Response as CommandResponse, Session, SessionCommand, SessionConfig, SessionError, SessionId,
    SessionReply, Stage, StepOutcome, TestResult, WorkerId,
};
use certus_proto::v1;
use certus_proto::v1::sessions_server::Sessions;
use tonic::{Code, Request, Response, Status};

use crate::errors::status;
use crate::raft::replica::Replica;
use crate::services::clients::client_request;

/// The longest a `Wait` holds a request.
pub const SESSION_WAIT_MAX: Duration = Duration::from_secs(60);
/// How often a `Wait` looks at this node's applied state.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// `certus.v1.Sessions` for one node.
#[derive(Debug, Clone)]
pub struct SessionsService {
    replica: Arc<Replica>,
}

impl SessionsService {
    /// The sessions service of `replica`.
    pub fn new(replica: Arc<Replica>) -> SessionsService {
        SessionsService { replica }
    }

    async fn command(
        &self,
        client: Option<ClientRequest>,
        command: SessionCommand,
    ) -> Result<SessionReply, Status> {
        match self
            .replica
            .write_for(client, Command::Session(command))
            .await?
        {
            CommandResponse::Session(result) => result.map_err(|error| session_status(&error)),
            other => Err(status(
                Code::Internal,
                "internal",
                format!("the state machine answered another command family: {other:?}"),
            )),
        }
    }

    /// The session as this node sees it after a linearizable read (so it includes every write
    /// acknowledged before the read began, wherever it was made).
    async fn session(&self, id: SessionId) -> Result<v1::Session, Status> {
        let found = self
            .replica
            .read(|state, _| state.session(id).map(session_to_proto))
            .await?;
        found.ok_or_else(|| session_status(&SessionError::UnknownSession { session: id }))
    }

    /// The session after a write of this request was applied: a linearizable read, or — if
    /// that fails (the leader changed just after the write) — this node's applied state, so a
    /// write that happened is never reported as one that may not have.
    async fn session_after_write(&self, id: SessionId) -> Result<v1::Session, Status> {
        match self.session(id).await {
            Ok(session) => Ok(session),
            Err(read_error) => self
                .replica
                .reader
                .read(|applied| applied.state.session(id).map(session_to_proto))
                .ok_or_else(|| {
                    status(
                        Code::Unavailable,
                        "written-not-read",
                        format!(
                            "the change to session {id} was applied, but this node cannot read                              it back yet ({}); Get it again",
                            read_error.message()
                        ),
                    )
                }),
        }
    }
}

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn create(
        &self,
        request: Request<v1::CreateSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let csr = checked_csr(&request.csr)?;
        in_range(
            "number of names",
            request.names.len() as u64,
            0,
            SESSION_NAMES_MAX as u64,
        )?;
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
        let request_key = optional(request.request_key, "request_key", RequestKey::new)?;
        let command = SessionCommand::Create {
            request_key,
            csr: csr.der().to_vec(),
            names,
        };
        match self.command(client, command).await? {
            SessionReply::Created { session, .. } => {
                Ok(Response::new(self.session(session).await?))
            }
            other => Err(unexpected("create", &other)),
        }
    }

    async fn get(
        &self,
        request: Request<v1::GetSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let id = SessionId(request.into_inner().id);
        Ok(Response::new(self.session(id).await?))
    }

    async fn wait(
        &self,
        request: Request<v1::WaitSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let request = request.into_inner();
        let id = SessionId(request.id);
        let wait = Duration::from_millis(request.wait_ms).min(SESSION_WAIT_MAX);
        let deadline = tokio::time::Instant::now() + wait;
        let known = request.known.as_ref().map(progress);
        loop {
            // This node's applied state is enough to notice a change; the answer itself is a
            // linearizable read.
            let local = self
                .replica
                .reader
                .read(|applied| applied.state.session(id).map(session_to_proto));
            let changed = match (&local, &known) {
                (Some(session), Some(known)) => progress(session) != *known,
                (None, _) | (_, None) => true,
            };
            let timed_out = tokio::time::Instant::now() >= deadline;
            if changed || timed_out {
                let session = self.session(id).await?;
                // A node behind the client's view differs from `known` without progress; wait
                // on unless the linearizable read shows a change too.
                if timed_out || known.as_ref() != Some(&progress(&session)) {
                    return Ok(Response::new(session));
                }
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    async fn acknowledge(
        &self,
        request: Request<v1::AcknowledgeSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let id = SessionId(request.into_inner().id);
        match self
            .command(client, SessionCommand::Acknowledge { session: id })
            .await?
        {
            SessionReply::Acknowledged { .. } => {
                Ok(Response::new(self.session_after_write(id).await?))
            }
            other => Err(unexpected("acknowledge", &other)),
        }
    }

    async fn kill(
        &self,
        request: Request<v1::KillSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let id = SessionId(request.id);
        let reason = Reason::new(request.reason).map_err(|error| invalid("reason", error))?;
        match self
            .command(
                client,
                SessionCommand::Kill {
                    session: id,
                    reason,
                },
            )
            .await?
        {
            SessionReply::Killed { .. } => Ok(Response::new(self.session_after_write(id).await?)),
            other => Err(unexpected("kill", &other)),
        }
    }

    async fn list(
        &self,
        request: Request<v1::ListSessionsRequest>,
    ) -> Result<Response<v1::ListSessionsReply>, Status> {
        let request = request.into_inner();
        let stage = stage_from_proto(request.stage)?;
        let limit = crate::services::convert::page_limit(request.limit);
        let after = (request.after != 0).then_some(SessionId(request.after));
        let page = self
            .replica
            .read(|state, _| {
                state
                    .sessions_in(stage, after, limit + 1)
                    .into_iter()
                    .map(session_to_proto)
                    .collect::<Vec<_>>()
            })
            .await?;
        let more = page.len() > limit;
        let sessions: Vec<v1::Session> = page.into_iter().take(limit).collect();
        let next_after = if more {
            sessions.last().map_or(0, |session| session.id)
        } else {
            0
        };
        Ok(Response::new(v1::ListSessionsReply {
            sessions,
            next_after,
        }))
    }

    async fn claim(
        &self,
        request: Request<v1::ClaimRequest>,
    ) -> Result<Response<v1::ClaimReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        visibility(request.visibility_ms)?;
        in_range("max", request.max.into(), 1, SESSION_CLAIM_BATCH_MAX.into())?;
        let command = SessionCommand::Claim {
            stage: stage_from_proto(request.stage)?,
            worker: WorkerId::new(request.worker).map_err(|error| invalid("worker", error))?,
            visibility_ms: request.visibility_ms,
            max: request.max,
        };
        match self.command(client, command).await? {
            SessionReply::Claimed(sessions) => Ok(Response::new(v1::ClaimReply {
                sessions: sessions.iter().map(session_to_proto).collect(),
            })),
            other => Err(unexpected("claim", &other)),
        }
    }

    async fn extend(
        &self,
        request: Request<v1::ExtendRequest>,
    ) -> Result<Response<v1::ExtendReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        visibility(request.visibility_ms)?;
        let command = SessionCommand::Extend {
            session: SessionId(request.id),
            token: request.claim_token,
            visibility_ms: request.visibility_ms,
        };
        match self.command(client, command).await? {
            SessionReply::Extended { deadline_ms, .. } => Ok(Response::new(v1::ExtendReply {
                claim_deadline_ms: deadline_ms,
            })),
            other => Err(unexpected("extend", &other)),
        }
    }

    async fn complete(
        &self,
        request: Request<v1::CompleteRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let id = SessionId(request.id);
        let outcome = outcome_from_proto(request.outcome)?;
        let command = SessionCommand::Complete {
            session: id,
            token: request.claim_token,
            outcome,
        };
        self.command(client, command).await?;
        Ok(Response::new(self.session_after_write(id).await?))
    }

    async fn release(
        &self,
        request: Request<v1::ReleaseClaimRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let id = SessionId(request.id);
        in_range("delay_ms", request.delay_ms, 0, SESSION_DELAY_MS_MAX)?;
        let command = SessionCommand::Release {
            session: id,
            token: request.claim_token,
            delay_ms: request.delay_ms,
            note: optional(request.note, "note", Reason::new)?,
        };
        self.command(client, command).await?;
        Ok(Response::new(self.session_after_write(id).await?))
    }

    async fn fail(
        &self,
        request: Request<v1::FailRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let id = SessionId(request.id);
        let command = SessionCommand::Fail {
            session: id,
            token: request.claim_token,
            reason: Reason::new(request.reason).map_err(|error| invalid("reason", error))?,
        };
        self.command(client, command).await?;
        Ok(Response::new(self.session_after_write(id).await?))
    }

    async fn status(
        &self,
        _request: Request<v1::SessionsStatusRequest>,
    ) -> Result<Response<v1::SessionsStatus>, Status> {
        let reply = self
            .replica
            .read(|state, now_ms| {
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
                v1::SessionsStatus {
                    config: Some(config_to_proto(state.session_config())),
                    queues,
                    done,
                    archived: state.sessions_archived_count() as u64,
                    total: state.session_count() as u64,
                }
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn set_config(
        &self,
        request: Request<v1::SetSessionConfigRequest>,
    ) -> Result<Response<v1::SessionConfig>, Status> {
        let client = client_request(request.metadata())?;
        let config = request
            .into_inner()
            .config
            .ok_or_else(|| invalid("config", "missing"))?;
        let config = config_from_proto(&config);
        config.validate().map_err(|error| session_status(&error))?;
        self.command(client, SessionCommand::Configure(config))
            .await?;
        let now = self
            .replica
            .read(|state, _| config_to_proto(state.session_config()))
            .await?;
        Ok(Response::new(now))
    }
}

/// The status for a refused session command.
pub fn session_status(error: &SessionError) -> Status {
    let (code, reason) = match error {
        SessionError::UnknownSession { .. } => (Code::NotFound, "unknown-session"),
        SessionError::WrongStage { .. } => (Code::FailedPrecondition, "wrong-stage"),
        SessionError::StaleClaim { .. } => (Code::FailedPrecondition, "stale-claim"),
        SessionError::NotLive { .. } => (Code::FailedPrecondition, "not-live"),
        SessionError::NotDone { .. } => (Code::FailedPrecondition, "not-done"),
        SessionError::TooMany { .. } => (Code::ResourceExhausted, "too-many-sessions"),
        SessionError::RequestKeyReused { .. } => (Code::AlreadyExists, "request-key-reused"),
        SessionError::InvalidConfig { .. } => (Code::InvalidArgument, "invalid-config"),
        SessionError::NotQueued { .. } => (Code::InvalidArgument, "not-queued"),
        SessionError::InvalidText(_)
        | SessionError::BadOutcome(_)
        | SessionError::TooLarge { .. }
        | SessionError::OutOfRange { .. }
        | SessionError::BadNames(_) => (Code::InvalidArgument, "invalid-argument"),
    };
    status(code, reason, error.to_string())
}

/// A number the state machine bounds, checked here so a bad one is never proposed; the refusal
/// reads as the state machine's would.
fn in_range(field: &str, got: u64, min: u64, max: u64) -> Result<(), Status> {
    if (min..=max).contains(&got) {
        return Ok(());
    }
    Err(session_status(&SessionError::OutOfRange {
        field: field.to_owned(),
        got,
        min,
        max,
    }))
}

/// A claim's visibility, within the state machine's bounds.
fn visibility(visibility_ms: u64) -> Result<(), Status> {
    in_range(
        "visibility_ms",
        visibility_ms,
        SESSION_VISIBILITY_MS_MIN,
        SESSION_VISIBILITY_MS_MAX,
    )
}

fn invalid(field: &str, error: impl std::fmt::Display) -> Status {
    status(
        Code::InvalidArgument,
        "invalid-argument",
        format!("{field}: {error}"),
    )
}

fn unexpected(what: &str, reply: &SessionReply) -> Status {
    status(
        Code::Internal,
        "internal",
        format!("{what} answered {reply:?}"),
    )
}

/// An optional text field: empty means absent.
fn optional<T, E: std::fmt::Display>(
    value: String,
    field: &str,
    parse: impl FnOnce(String) -> Result<T, E>,
) -> Result<Option<T>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    parse(value)
        .map(Some)
        .map_err(|error| invalid(field, error))
}

/// A CSR in DER or PEM, parsed and its signature checked.
fn checked_csr(bytes: &[u8]) -> Result<CheckedCsr, Status> {
    let checked = match std::str::from_utf8(bytes) {
        Ok(text) if text.contains("-----BEGIN") => CheckedCsr::from_pem(text),
        _ => CheckedCsr::from_der(bytes),
    };
    checked.map_err(|error| invalid("csr", error))
}

/// What a `Wait` compares: everything that means progress to a client, not the claims workers
/// take and give back.
fn progress(session: &v1::Session) -> v1::Session {
    v1::Session {
        claimant: String::new(),
        claim_token: 0,
        claim_deadline_ms: 0,
        ..session.clone()
    }
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
            // One per name, so no more than a session has names.
            in_range(
                "number of challenges",
                challenges.challenges.len() as u64,
                0,
                SESSION_NAMES_MAX as u64,
            )?;
            Ok(StepOutcome::Challenges(
                challenges
                    .challenges
                    .into_iter()
                    .map(|challenge| {
                        Ok(NewChallenge {
                            name: name(challenge.name)?,
                            token: crate::services::convert::challenge_token(challenge.token)?,
                            key_authorization: crate::services::convert::key_authorization(
                                challenge.key_authorization,
                            )?,
                        })
                    })
                    .collect::<Result<_, Status>>()?,
            ))
        }
        Some(Outcome::Tested(tested)) => {
            in_range(
                "number of test results",
                tested.results.len() as u64,
                0,
                SESSION_NAMES_MAX as u64,
            )?;
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
        kill_reason: session
            .kill_reason()
            .map(KillReason::to_string)
            .unwrap_or_default(),
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
                last_error: challenge
                    .last_error
                    .as_ref()
                    .map(|error| error.as_str().to_owned())
                    .unwrap_or_default(),
            })
            .collect(),
        certificate: session
            .cert()
            .map(|cert| String::from_utf8_lossy(cert).into_owned())
            .unwrap_or_default(),
        failure: session
            .failure()
            .map(|failure| failure.as_str().to_owned())
            .unwrap_or_default(),
        claimant: session
            .claim()
            .map(|claim| claim.claimant.as_str().to_owned())
            .unwrap_or_default(),
        claim_token: session.claim().map_or(0, |claim| claim.token),
        claim_deadline_ms: session.claim().map_or(0, |claim| claim.deadline_ms),
        acknowledged: session.acknowledged(),
        archived_at_ms: session.archived_at_ms().unwrap_or(0),
        request_key: session
            .request_key
            .as_ref()
            .map(|key| key.as_str().to_owned())
            .unwrap_or_default(),
        note: session
            .note
            .as_ref()
            .map(|note| note.as_str().to_owned())
            .unwrap_or_default(),
    }
}

fn config_to_proto(config: &SessionConfig) -> v1::SessionConfig {
    v1::SessionConfig {
        stage_timeout_ms: config.stage_timeout_ms,
        max_tests: config.max_tests,
        test_retry_ms: config.test_retry_ms,
        done_retention_ms: config.done_retention_ms,
        archive_retention_ms: config.archive_retention_ms,
        sessions_max: config.sessions_max,
    }
}

fn config_from_proto(config: &v1::SessionConfig) -> SessionConfig {
    SessionConfig {
        stage_timeout_ms: config.stage_timeout_ms,
        max_tests: config.max_tests,
        test_retry_ms: config.test_retry_ms,
        done_retention_ms: config.done_retention_ms,
        archive_retention_ms: config.archive_retention_ms,
        sessions_max: config.sessions_max,
    }
}
