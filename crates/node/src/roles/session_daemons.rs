//! The node's own session workers (seed 000's daemons): claim a step, do it, complete it.
//!
//! Every node runs them; claims are atomic in the state machine, so nodes share the work and a
//! node that dies mid-step only delays its sessions until their claims expire. What each stage
//! does:
//! - makechallenge: one HTTP-01 token per name (32 random bytes, base64url), with key
//!   authorization `token "." base64url(SHA-256(CSR SubjectPublicKeyInfo))` — the CSR's key
//!   stands where ACME has the account key. The tokens are stored as challenge tokens in the
//!   same write as the completion, so every node serves them at
//!   `/.well-known/acme-challenge/TOKEN`.
//! - testchallenge: fetches each unsatisfied challenge (`certus_ca::http01`) and reports what it
//!   found; the state machine decides whether to retry, advance or give up.
//! - issue: orders the certificate from an asynchronous upstream CA when one is configured
//!   (`certus_ca::upstream`, polled on seed 001's schedule while the claim is kept alive; an
//!   order still pending at the poll deadline is released with its order id in the session's
//!   note, and the next claim resumes polling that order instead of ordering again), otherwise
//!   signs the CSR with the cluster's CA (`certus_ca::issuer`). With neither, the node leaves
//!   the issue stage to external workers.
//!
//! A step that fails for a reason that may pass (the cluster could not take the write, the CA
//! failed) releases the session with a delay; a session whose own data is wrong fails.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::ordered_watch as watch;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use certus_ca::csr::CheckedCsr;
use certus_ca::http01::TestOutcome;
use certus_ca::issuer::{CaIdentity, LEAF_VALIDITY_DEFAULT, SerialNumber};
use certus_ca::poller::{Answer, PollPolicy, Step as OrderStep};
use certus_ca::upstream::{IssuedChain, OrderId, OrderRequest, Submitted};
use certus_core::{
    ChallengeCommand, ChallengeToken, Command, KeyAuthorization, NewChallenge, Reason,
    Response as CommandResponse, Session, SessionCommand, SessionId, SessionReply, Stage,
    StepOutcome, WorkerId,
};
use tracing::{debug, warn};

use crate::config::SessionsSetup;
use crate::limits::SESSION_CLAIM_RETRY_PAUSE;
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;
use crate::random::fill_random;

/// Sessions claimed at once per stage (worked concurrently).
const CLAIM_BATCH: u32 = 8;
/// The pause after a claim that failed (no leader, say): the next round is not left to wait
/// for an apply that an election may hold back.
const CLAIM_ERROR_PAUSE: Duration = Duration::from_millis(200);
/// How long a session released after a transient failure waits before it is claimed again.
const RETRY_DELAY_MS: u64 = 5_000;

/// A boxed future, so the daemons can hold their testers and connectors as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Tests one HTTP-01 challenge: fetches what `name` serves for `token` and judges it against
/// `key_authorization`. In production an HTTP GET (`certus_ca::http01::Http01Tester`); the
/// simulation brings its own over simulated links.
pub trait ChallengeTester: Send + Sync + fmt::Debug {
    /// The verdict on one challenge.
    fn test<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        key_authorization: &'a str,
    ) -> BoxFuture<'a, TestOutcome>;
}

#[cfg(not(madsim))]
impl ChallengeTester for certus_ca::http01::Http01Tester {
    fn test<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        key_authorization: &'a str,
    ) -> BoxFuture<'a, TestOutcome> {
        Box::pin(certus_ca::http01::Http01Tester::test(
            self,
            name,
            token,
            key_authorization,
        ))
    }
}

/// An asynchronous upstream CA as a trait object ([`certus_ca::upstream::UpstreamCa`]'s futures
/// are not object-safe; every `UpstreamCa` is one of these).
pub trait UpstreamConnector: Send + Sync + fmt::Debug {
    /// Orders a certificate for `request` (one request, triaged).
    fn submit<'a>(&'a self, request: &'a OrderRequest) -> BoxFuture<'a, Answer<Submitted>>;
    /// Reads the status of order `id` (one request, triaged).
    fn status<'a>(&'a self, id: &'a OrderId) -> BoxFuture<'a, Answer<OrderStep<IssuedChain>>>;
}

impl<C> UpstreamConnector for C
where
    C: certus_ca::upstream::UpstreamCa + Send + Sync + fmt::Debug,
{
    fn submit<'a>(&'a self, request: &'a OrderRequest) -> BoxFuture<'a, Answer<Submitted>> {
        Box::pin(certus_ca::upstream::UpstreamCa::submit(self, request))
    }

    fn status<'a>(&'a self, id: &'a OrderId) -> BoxFuture<'a, Answer<OrderStep<IssuedChain>>> {
        Box::pin(certus_ca::upstream::UpstreamCa::status(self, id))
    }
}

/// A [`UpstreamConnector`] seen as an [`certus_ca::upstream::UpstreamCa`] again, for the poller.
struct Connector(Arc<dyn UpstreamConnector>);

impl certus_ca::upstream::UpstreamCa for Connector {
    async fn submit(&self, request: &OrderRequest) -> Answer<Submitted> {
        self.0.submit(request).await
    }

    async fn status(&self, id: &OrderId) -> Answer<OrderStep<IssuedChain>> {
        self.0.status(id).await
    }
}

/// An upstream CA and how it is polled.
#[derive(Debug, Clone)]
pub struct Upstream {
    connector: Arc<dyn UpstreamConnector>,
    policy: PollPolicy,
}

impl Upstream {
    /// The upstream CA `connector`, polled by `policy`.
    pub fn new(connector: Arc<dyn UpstreamConnector>, policy: PollPolicy) -> Upstream {
        Upstream { connector, policy }
    }

    /// The upstream CA speaking `certus_ca::upstream`'s order protocol at `url`.
    #[cfg(not(madsim))]
    pub fn http(
        url: &str,
        policy: certus_ca::poller::PollPolicyConfig,
    ) -> Result<Upstream, String> {
        Ok(Upstream::new(
            Arc::new(certus_ca::upstream::HttpUpstream::new(url)?),
            PollPolicy::new(policy).map_err(|e| e.to_string())?,
        ))
    }
}

/// What a node's daemons did with a claim, for a harness that checks claims are exclusive (the
/// simulation). Reported as it happens, on the daemon's task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkEvent {
    /// A claim was granted: the daemon starts working the session.
    Claimed {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
        /// The claim's deadline, machine time.
        deadline_ms: u64,
        /// When the session became claimable (machine time): the grant is at or after it.
        visible_at_ms: u64,
    },
    /// The claim was extended to `deadline_ms`.
    Extended {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
        /// The new deadline, machine time.
        deadline_ms: u64,
    },
    /// The daemon is done working the session under `token` and sends its result.
    Finished {
        /// The session.
        session: SessionId,
        /// The claim's token.
        token: u64,
    },
}

/// Receives [`WorkEvent`]s with the worker's name.
pub type WorkObserver = Arc<dyn Fn(&WorkerId, WorkEvent) + Send + Sync>;

/// What the daemons work with, beyond the node's configuration: the CA, the tester and the
/// upstream CA. A node builds them from its configuration ([`SessionParts::from_setup`]); the
/// simulation passes its own.
#[derive(Clone, Default)]
pub struct SessionParts {
    /// The cluster CA: with it and no upstream, the node issues.
    pub ca: Option<Arc<CaIdentity>>,
    /// The HTTP-01 tester: without one the node leaves testchallenge to external workers.
    pub tester: Option<Arc<dyn ChallengeTester>>,
    /// The upstream CA: with it the node orders certificates there.
    pub upstream: Option<Upstream>,
    /// Told of every claim the daemons take, extend and finish.
    pub observer: Option<WorkObserver>,
}

impl fmt::Debug for SessionParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionParts")
            .field("ca", &self.ca.is_some())
            .field("tester", &self.tester)
            .field("upstream", &self.upstream)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl SessionParts {
    /// The parts `setup` names: the CA from its files, the HTTP-01 tester (not in the
    /// simulation, which has no HTTP), the upstream CA at its URL.
    pub fn from_setup(setup: &SessionsSetup) -> Result<SessionParts, String> {
        let ca = match (&setup.ca_key_file, &setup.ca_cert_file) {
            (Some(key), Some(cert)) => {
                let read = |path: &std::path::Path| {
                    std::fs::read_to_string(path)
                        .map_err(|error| format!("cannot read {}: {error}", path.display()))
                };
                Some(Arc::new(
                    CaIdentity::from_pem(&read(key)?, &read(cert)?)
                        .map_err(|error| format!("sessions CA {}: {error}", cert.display()))?,
                ))
            }
            _ => None,
        };
        #[cfg(not(madsim))]
        {
            let upstream = setup
                .upstream_url
                .as_deref()
                .map(|url| Upstream::http(url, setup.upstream_poll))
                .transpose()
                .map_err(|error| format!("sessions.upstream_url: {error}"))?;
            let tester = certus_ca::http01::Http01Tester::new(certus_ca::http01::Http01Config {
                resolver: if setup.http01_resolve.is_empty() {
                    certus_ca::http01::Resolver::System
                } else {
                    certus_ca::http01::Resolver::Static(setup.http01_resolve.clone())
                },
                timeout: Duration::from_millis(setup.http01_timeout_ms),
                ..certus_ca::http01::Http01Config::default()
            });
            Ok(SessionParts {
                ca,
                tester: Some(Arc::new(tester)),
                upstream,
                observer: None,
            })
        }
        #[cfg(madsim)]
        Ok(SessionParts {
            ca,
            ..SessionParts::default()
        })
    }
}

/// What the daemons of one node need.
#[derive(Clone)]
pub struct SessionDaemons {
    worker: WorkerId,
    parts: SessionParts,
    /// How long a claim lasts unless extended.
    claim_visibility_ms: u64,
    /// The wait after an upstream order still pending, when the CA named none.
    pending_delay_ms: u64,
}

impl fmt::Debug for SessionDaemons {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionDaemons")
            .field("worker", &self.worker)
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

/// The note prefix that carries an upstream order id from one claim to the next.
pub const ORDER_NOTE_PREFIX: &str = "upstream order ";

impl SessionDaemons {
    /// The daemons of node `id`, working with `parts` on the timings of `setup`.
    pub fn new(id: u64, parts: SessionParts, setup: &SessionsSetup) -> SessionDaemons {
        SessionDaemons {
            worker: WorkerId::new(format!("node-{id}")).expect("a valid worker id"),
            parts,
            claim_visibility_ms: setup.claim_visibility_ms,
            pending_delay_ms: setup.upstream_pending_delay_ms,
        }
    }

    fn observe(&self, event: WorkEvent) {
        if let Some(observer) = &self.parts.observer {
            observer(&self.worker, event);
        }
    }

    /// The stages this node works.
    fn stages(&self) -> Vec<Stage> {
        let mut stages = vec![Stage::MakeChallenge];
        if self.parts.tester.is_some() {
            stages.push(Stage::TestChallenge);
        }
        if self.parts.ca.is_some() || self.parts.upstream.is_some() {
            stages.push(Stage::Issue);
        }
        stages
    }

    /// One round over every stage this node works: what it found.
    async fn round(&self, replica: &Replica) -> Round {
        let mut round = Round::default();
        for stage in self.stages() {
            // A claim is a Raft write; look at this node's applied state first (at
            // `max(machine clock, this node's clock)`, as every read).
            let now_ms = replica.clock.now_ms();
            let next_visible_ms = replica.reader.read(|applied| {
                let state = &applied.state;
                let now_ms = now_ms.max(state.clock_ms());
                state
                    .sessions_next_visible_ms(stage)
                    .map(|visible_ms| visible_ms.saturating_sub(now_ms))
            });
            match next_visible_ms {
                None => continue,
                Some(0) => {}
                Some(in_ms) => {
                    let visible_in = Duration::from_millis(in_ms);
                    round.visible_in = Some(
                        round
                            .visible_in
                            .map_or(visible_in, |soonest| soonest.min(visible_in)),
                    );
                    continue;
                }
            }
            let claimed = match self.claim(replica, stage).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    debug!(id = replica.id, %stage, %error, "session claim failed");
                    round.pause = Some(CLAIM_ERROR_PAUSE);
                    continue;
                }
            };
            if claimed.is_empty() {
                // Another node's daemon was first (this node has not applied its claim yet),
                // or the leader's clock is behind this node's.
                round.pause.get_or_insert(SESSION_CLAIM_RETRY_PAUSE);
            }
            round.worked |= !claimed.is_empty();
            // The batch is worked at once, so no session waits on another within its claim.
            futures_util::future::join_all(
                claimed
                    .into_iter()
                    .map(|session| self.work(replica, session)),
            )
            .await;
        }
        round
    }

    async fn claim(&self, replica: &Replica, stage: Stage) -> Result<Vec<Session>, String> {
        let command = SessionCommand::Claim {
            stage,
            worker: self.worker.clone(),
            visibility_ms: self.claim_visibility_ms,
            max: CLAIM_BATCH,
        };
        match write(replica, vec![Command::Session(command)]).await? {
            SessionReply::Claimed(sessions) => {
                for session in &sessions {
                    if let Some(claim) = session.claim() {
                        self.observe(WorkEvent::Claimed {
                            session: session.id,
                            token: claim.token,
                            deadline_ms: claim.deadline_ms,
                            visible_at_ms: session.visible_at_ms,
                        });
                    }
                }
                Ok(sessions)
            }
            other => Err(format!("claim answered {other:?}")),
        }
    }

    async fn work(&self, replica: &Replica, session: Session) {
        let Some(token) = session.claim().map(|claim| claim.token) else {
            return;
        };
        let id = session.id;
        let step = match session.stage() {
            Stage::MakeChallenge => self.make_challenges(&session).map(|(puts, outcome)| {
                let mut commands = puts;
                commands.push(complete(&session, token, outcome));
                commands
            }),
            Stage::TestChallenge => {
                let tested = self
                    .keep_claim(replica, id, token, self.test_challenges(&session))
                    .await;
                Ok(vec![complete(&session, token, tested)])
            }
            Stage::Issue => {
                let issued = match &self.parts.upstream {
                    Some(upstream) => {
                        let ordered = self.order(replica, upstream, &session);
                        self.keep_claim(replica, id, token, ordered).await
                    }
                    None => self.issue(replica, &session),
                };
                issued.map(|outcome| vec![complete(&session, token, outcome)])
            }
            Stage::Done | Stage::Failed => return,
        };
        self.observe(WorkEvent::Finished { session: id, token });
        let result = match step {
            Ok(commands) => write(replica, commands).await.map(|_| ()),
            Err(Step::Fail(reason)) => {
                warn!(id = replica.id, session = %id, %reason, "session failed");
                let command = SessionCommand::Fail {
                    session: id,
                    token,
                    reason: reason_text(&reason),
                };
                write(replica, vec![Command::Session(command)])
                    .await
                    .map(|_| ())
            }
            Err(Step::Retry(note)) => {
                warn!(id = replica.id, session = %id, %note, "session step given back for later");
                let command = SessionCommand::Release {
                    session: id,
                    token,
                    delay_ms: RETRY_DELAY_MS,
                    note: Some(reason_text(&note)),
                };
                write(replica, vec![Command::Session(command)])
                    .await
                    .map(|_| ())
            }
            Err(Step::Later { note, delay_ms }) => {
                debug!(id = replica.id, session = %id, %note, delay_ms, "session waits upstream");
                let command = SessionCommand::Release {
                    session: id,
                    token,
                    delay_ms,
                    note: Some(reason_text(&note)),
                };
                write(replica, vec![Command::Session(command)])
                    .await
                    .map(|_| ())
            }
        };
        if let Err(error) = result {
            // The claim expires and the session is claimed again.
            debug!(id = replica.id, session = %id, %error, "session step not recorded");
        }
    }

    fn make_challenges(&self, session: &Session) -> Result<(Vec<Command>, StepOutcome), Step> {
        let csr = CheckedCsr::from_der(&session.csr)
            .map_err(|error| Step::Fail(format!("the stored CSR does not check: {error}")))?;
        let thumbprint = URL_SAFE_NO_PAD.encode(certus_ct::sha256(csr.public_key_info_der()));
        let mut puts = Vec::new();
        let mut challenges = Vec::new();
        for name in &session.names {
            let token = ChallengeToken::new(URL_SAFE_NO_PAD.encode(random_bytes()))
                .map_err(|error| Step::Retry(format!("token: {error}")))?;
            let key_authorization =
                KeyAuthorization::new(format!("{}.{thumbprint}", token.as_str()))
                    .map_err(|error| Step::Retry(format!("key authorization: {error}")))?;
            puts.push(Command::Challenge(ChallengeCommand::Put {
                token: token.clone(),
                key_authorization: key_authorization.clone(),
            }));
            challenges.push(NewChallenge {
                name: name.clone(),
                token,
                key_authorization,
            });
        }
        Ok((puts, StepOutcome::Challenges(challenges)))
    }

    async fn test_challenges(&self, session: &Session) -> StepOutcome {
        let Some(tester) = &self.parts.tester else {
            // Not reached: without a tester the stage is not claimed (see `stages`).
            return StepOutcome::Tested(Vec::new());
        };
        let mut results = Vec::new();
        // One result per challenge, as the state machine requires; a challenge already
        // satisfied is not fetched again (its result is ignored).
        for challenge in &session.challenges {
            if challenge.satisfied {
                results.push(certus_core::TestResult {
                    name: challenge.name.clone(),
                    satisfied: true,
                    error: None,
                });
                continue;
            }
            let outcome = tester
                .test(
                    challenge.name.as_str(),
                    challenge.token.as_str(),
                    challenge.key_authorization.as_str(),
                )
                .await;
            let error = match outcome {
                TestOutcome::Satisfied => None,
                TestOutcome::NotSatisfied { reason } => Some(reason_text(&reason)),
            };
            results.push(certus_core::TestResult {
                name: challenge.name.clone(),
                satisfied: error.is_none(),
                error,
            });
        }
        StepOutcome::Tested(results)
    }

    /// Runs `step` while extending the claim on session `id` every third of the visibility, so
    /// a slow step (an HTTP-01 test runs up to its timeout per name) keeps its claim. If an
    /// extension is refused the claim is gone; the step's completion will be refused as stale,
    /// which is safe.
    async fn keep_claim<T>(
        &self,
        replica: &Replica,
        id: SessionId,
        token: u64,
        step: impl Future<Output = T>,
    ) -> T {
        let every = Duration::from_millis(self.claim_visibility_ms / 3);
        tokio::pin!(step);
        loop {
            tokio::select! {
                // Polled in order, not at random: the simulation replays a seed exactly.
                biased;
                output = &mut step => return output,
                () = tokio::time::sleep(every) => {
                    let command = SessionCommand::Extend {
                        session: id,
                        token,
                        visibility_ms: self.claim_visibility_ms,
                    };
                    match write(replica, vec![Command::Session(command)]).await {
                        Ok(SessionReply::Extended { deadline_ms, .. }) => {
                            self.observe(WorkEvent::Extended { session: id, token, deadline_ms });
                        }
                        Ok(other) => debug!(id = replica.id, session = %id, ?other, "claim extension answered"),
                        Err(error) => debug!(id = replica.id, session = %id, %error, "claim not extended"),
                    }
                }
            }
        }
    }

    /// Orders the session's certificate from the upstream CA, resuming the order named in the
    /// session's note if there is one.
    async fn order(
        &self,
        replica: &Replica,
        upstream: &Upstream,
        session: &Session,
    ) -> Result<StepOutcome, Step> {
        use certus_ca::upstream::{Issuance, issue_via_upstream};
        let resume = session
            .note
            .as_ref()
            .and_then(|note| note.as_str().strip_prefix(ORDER_NOTE_PREFIX))
            .and_then(|id| OrderId::new(id).ok());
        let names = session
            .names
            .iter()
            .map(|name| name.as_str().to_owned())
            .collect();
        // One session, one order: the CA dedupes a resubmission by this key.
        let key = format!("certus-session-{}", session.id);
        let request = OrderRequest::new(session.csr.clone(), names, &key).map_err(Step::Fail)?;
        let mut jitter = random_unit;
        let now_ms = || replica.clock.now_ms();
        match issue_via_upstream(
            &Connector(Arc::clone(&upstream.connector)),
            &upstream.policy,
            &request,
            resume,
            &mut jitter,
            now_ms,
        )
        .await
        {
            Issuance::Issued { chain, .. } => Ok(StepOutcome::Issued {
                cert: chain.pem().as_bytes().to_vec(),
            }),
            Issuance::Failed { reason, .. } => {
                Err(Step::Fail(format!("the upstream CA: {reason}")))
            }
            Issuance::StillPending {
                order_id,
                last_error,
                retry_after,
                ..
            } => Err(Step::Later {
                note: match order_id {
                    Some(order_id) => format!("{ORDER_NOTE_PREFIX}{order_id}"),
                    None => format!(
                        "the upstream CA took no order yet: {}",
                        last_error.unwrap_or_else(|| "no answer".to_owned())
                    ),
                },
                delay_ms: retry_after.map_or(self.pending_delay_ms, |delay| {
                    u64::try_from(delay.as_millis())
                        .unwrap_or(u64::MAX)
                        .min(certus_core::limits::SESSION_DELAY_MS_MAX)
                }),
            }),
        }
    }

    fn issue(&self, replica: &Replica, session: &Session) -> Result<StepOutcome, Step> {
        let Some(ca) = &self.parts.ca else {
            return Err(Step::Retry("this node has no CA".to_owned()));
        };
        let csr = CheckedCsr::from_der(&session.csr)
            .map_err(|error| Step::Fail(format!("the stored CSR does not check: {error}")))?;
        let serial = SerialNumber::from_random_bytes(random_bytes_16());
        let issued = ca
            .issue(&csr, serial, replica.clock.now_ms(), LEAF_VALIDITY_DEFAULT)
            .map_err(|error| Step::Retry(format!("the CA could not issue: {error}")))?;
        Ok(StepOutcome::Issued {
            cert: issued.chain_pem.into_bytes(),
        })
    }
}

/// Why a step did not complete.
enum Step {
    /// The session's own data is wrong: end it.
    Fail(String),
    /// Something that may pass: give it back for later.
    Retry(String),
    /// Not done yet (an upstream order still pending): give it back after `delay_ms`.
    Later {
        /// What the next claim needs (the order id) or why it waits.
        note: String,
        /// When to look again.
        delay_ms: u64,
    },
}

/// A number in [0, 1) from the runtime's randomness, for the poller's jitter.
fn random_unit() -> f64 {
    let mut bytes = [0u8; 8];
    fill_random(&mut bytes);
    // 53 random bits: every value is exactly representable and below 1.
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

fn complete(session: &Session, token: u64, outcome: StepOutcome) -> Command {
    Command::Session(SessionCommand::Complete {
        session: session.id,
        token,
        outcome,
    })
}

/// A reason for the state machine: one line, bounded (also the ACME validator's).
pub(crate) fn reason_text(text: &str) -> Reason {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let max = certus_core::limits::REASON_BYTES_MAX;
    if line.len() > max {
        let mut cut = max;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    Reason::new(if line.trim().is_empty() {
        "unknown".to_owned()
    } else {
        line
    })
    .unwrap_or_else(|_| Reason::new("unprintable reason").expect("a valid reason"))
}

/// Writes `commands` in one Raft entry; the answer to the last, which is the session command.
async fn write(replica: &Replica, commands: Vec<Command>) -> Result<SessionReply, String> {
    let responses = replica
        .write(commands)
        .await
        .map_err(|error| error.to_string())?;
    match responses.into_iter().last() {
        Some(CommandResponse::Session(Ok(reply))) => Ok(reply),
        Some(CommandResponse::Session(Err(error))) => Err(error.to_string()),
        other => Err(format!("unexpected answer: {other:?}")),
    }
}

/// 32 random bytes from the runtime (madsim's seeded generator in the simulation).
fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    fill_random(&mut bytes);
    bytes
}

fn random_bytes_16() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes);
    bytes
}

/// What one round over the stages found.
#[derive(Debug, Default)]
struct Round {
    /// Some session was claimed and worked: look again at once.
    worked: bool,
    /// A claim came back empty or failed: wait this long before looking again, whatever is
    /// applied meanwhile (an empty claim's own apply would otherwise start the next).
    pause: Option<Duration>,
    /// The soonest a released session becomes visible in a stage with none visible now.
    visible_in: Option<Duration>,
}

/// The daemons' loop until `stop`: a round at once when the last found work; otherwise the
/// next round when this node applies something (a new session, a completed step, a claim
/// taken back by a tick) or a released session becomes visible — no polling while idle — or
/// after the round's pause.
pub async fn run(replica: Arc<Replica>, daemons: SessionDaemons, mut stop: watch::Receiver<bool>) {
    let mut applied = AppliedWatch::new(&replica, stop.clone());
    loop {
        if *stop.borrow() {
            break;
        }
        // Anything applied after the round's looks wakes the wait below.
        applied.mark();
        let round = daemons.round(&replica).await;
        if round.worked {
            continue;
        }
        if let Some(pause) = round.pause {
            tokio::select! {
                // Polled in order, not at random: the simulation replays a seed exactly.
                biased;
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
                () = tokio::time::sleep(pause) => {}
            }
            continue;
        }
        let until = round
            .visible_in
            .map(|visible_in| tokio::time::Instant::now() + visible_in);
        if applied.wait(until).await == Wake::Stopping {
            break;
        }
    }
    debug!(id = replica.id, "session daemons stopped");
}
