//! The sessions workload's external workers: programs on the gRPC worker API that claim
//! testchallenge sessions, test them with the same probe as the nodes' daemons, and complete
//! them — or, now and then, die mid-step (a new incarnation, under a new name, comes back after
//! a pause), or complete on purpose after their claim expired and a newer one was granted (the
//! completion must be refused).
//!
//! Each incarnation takes one of the three ways a worker can talk to the cluster, drawn from the
//! seed (a run has a few incarnations, so most runs take more than one):
//! - [`Path::Unary`]: `Claim` with no wait, one session at a time, `Complete` per session;
//! - [`Path::LongPoll`]: `Claim` waiting for work (up to [`LONG_POLL_WAIT`]), up to
//!   [`SESSION_LONG_POLL_CLAIM_MAX`] sessions at once, their completions sent together in a
//!   `CompleteBatch`;
//! - [`Path::Stream`]: the `Work` stream with credit 1: the node pushes a claim, the worker
//!   answers with a complete step and grants the next credit. A stream that breaks, or stays
//!   silent while a step waits, is opened again on another node under the same worker name and
//!   the step sent again there: claims belong to the worker, not to the stream.

use std::time::Duration;

use certus_ca::http01::TestOutcome;
use certus_proto::v1;
use certus_proto::v1::sessions_client::SessionsClient;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::checkers::{ClaimRecord, LateCompletion};
use certus_node::roles::session_daemons::ChallengeTester;

use super::workload::{Context, SessionWorkload, SimTester};
use crate::cluster::another_node;
use crate::limits::SESSION_LONG_POLL_CLAIM_MAX;
use crate::schedule::SeedRng;

/// How long a long-polling claim waits for a session: below the client's attempt timeout, so
/// an empty answer is not mistaken for a lost one.
const LONG_POLL_WAIT: Duration = Duration::from_millis(1_000);
/// How long a stream worker waits for a claim before it tries another node. The node pushes
/// only when work exists, so silence is usually an empty queue; a cut-off node is left after
/// this long.
const STREAM_IDLE: Duration = Duration::from_millis(3_000);
/// Streams a stream worker opens for one step before it gives the step up.
const STREAM_STEP_ATTEMPTS: u32 = 3;

/// How one incarnation of an external worker takes its claims and answers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Unary,
    LongPoll,
    Stream,
}

/// What the worker does with a session it has tested.
enum Fate {
    /// Completes it now.
    Complete,
    /// Waits until its claim has expired and another was granted, then completes it.
    Late,
    /// Dies mid-step: the claim is left to expire.
    Abandon,
}

/// How a completion was answered: applied, refused as stale, or not known (no answer).
type Accepted = Option<bool>;

/// One external worker, incarnation after incarnation, until the run stops.
pub(super) async fn work_challenges(index: u32, workload: SessionWorkload, context: Context) {
    let mut rng = SeedRng::new(context.seed, 600 + u64::from(index));
    let mut incarnation = 0u64;
    while !context.stopping() {
        let path = match rng.between(0, 2) {
            0 => Path::Unary,
            1 => Path::LongPoll,
            _ => Path::Stream,
        };
        let worker = Worker {
            name: format!("external-{index}-{incarnation}"),
            path,
            workload: &workload,
            context: &context,
        };
        tracing::info!(worker = %worker.name, ?path, "external worker starts");
        let died = match path {
            Path::Unary | Path::LongPoll => worker.run_calls(&mut rng).await,
            Path::Stream => worker.run_stream(&mut rng).await,
        };
        if died {
            incarnation += 1;
            tokio::time::sleep(Duration::from_millis(rng.between(500, 3_000))).await;
        }
    }
}

struct Worker<'a> {
    name: String,
    path: Path,
    workload: &'a SessionWorkload,
    context: &'a Context,
}

impl Worker<'_> {
    /// Claims by unary calls (at once, or long-polling) until the run stops (false) or the
    /// worker dies mid-step (true).
    async fn run_calls(&self, rng: &mut SeedRng) -> bool {
        let (wait_ms, max) = match self.path {
            Path::LongPoll => (duration_ms(LONG_POLL_WAIT), SESSION_LONG_POLL_CLAIM_MAX),
            _ => (0, 1),
        };
        while !self.context.stopping() {
            let node = rng.between(1, self.context.nodes);
            let Some(mut sessions) = self.context.connect(node).await else {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            };
            let claimed = sessions
                .claim(v1::ClaimRequest {
                    stage: v1::Stage::TestChallenge.into(),
                    worker: self.name.clone(),
                    visibility_ms: self.workload.worker_visibility_ms,
                    max,
                    wait_ms,
                })
                .await
                .map(|reply| reply.into_inner().sessions);
            let Ok(claimed) = claimed else {
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            };
            if claimed.is_empty() {
                if self.path == Path::Unary {
                    tokio::time::sleep(Duration::from_millis(rng.between(200, 500))).await;
                }
                continue;
            }
            if usize::try_from(max).is_ok_and(|max| claimed.len() > max) {
                self.context.violation(format!(
                    "node {node} gave {} {} sessions for a claim of at most {max}",
                    self.name,
                    claimed.len()
                ));
            }
            // Long-polled sessions' completions go out together, after the lot is tested.
            let mut batch = Vec::new();
            let mut died = false;
            for session in claimed {
                let (position, complete) = self.test(&session).await;
                match self.fate(rng, &complete) {
                    Fate::Abandon => {
                        died = true;
                        break;
                    }
                    Fate::Late => {
                        let Some(mut late) = self.wait_until_stale(rng, &session).await else {
                            continue;
                        };
                        late.sent_ms = self.finished(position);
                        late.accepted = self.complete_by_call(&mut sessions, complete).await;
                        self.context
                            .shared
                            .with(|history| history.late_completions.push(late));
                    }
                    Fate::Complete if self.path == Path::LongPoll => {
                        batch.push((position, complete));
                    }
                    Fate::Complete => {
                        self.finished(position);
                        let _ = sessions.complete(complete).await;
                    }
                }
            }
            if !batch.is_empty() {
                let items = batch
                    .into_iter()
                    .map(|(position, complete)| {
                        self.finished(position);
                        complete
                    })
                    .collect();
                let _ = sessions
                    .complete_batch(v1::CompleteSessionBatchRequest { items })
                    .await;
            }
            if died {
                tracing::info!(worker = %self.name, "external worker dies mid-step");
                return true;
            }
        }
        false
    }

    /// Takes sessions on the `Work` stream until the run stops (false) or the worker dies
    /// mid-step (true).
    async fn run_stream(&self, rng: &mut SeedRng) -> bool {
        let mut node = rng.between(1, self.context.nodes);
        'streams: while !self.context.stopping() {
            let Some(mut link) = self.open(node, 1).await else {
                node = another_node(rng, node, self.context.nodes);
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            };
            loop {
                let session = match link.next_claim(self.context).await {
                    LinkEvent::Claimed(session) => session,
                    LinkEvent::Stopping => return false,
                    LinkEvent::Broken | LinkEvent::Silent => {
                        node = another_node(rng, node, self.context.nodes);
                        continue 'streams;
                    }
                    LinkEvent::Violation(what) => {
                        self.context
                            .violation(format!("node {node}, {}: {what}", self.name));
                        node = another_node(rng, node, self.context.nodes);
                        continue 'streams;
                    }
                };
                let (position, complete) = self.test(&session).await;
                let late = match self.fate(rng, &complete) {
                    // Dropping the stream leaves the claim to the reaper.
                    Fate::Abandon => {
                        tracing::info!(worker = %self.name, "external worker dies mid-step");
                        return true;
                    }
                    Fate::Late => match self.wait_until_stale(rng, &session).await {
                        Some(late) => Some(late),
                        // Never completed: the claim expires on its own.
                        None => {
                            if link.grant(1).is_err() {
                                continue 'streams;
                            }
                            continue;
                        }
                    },
                    Fate::Complete => None,
                };
                let sent_ms = self.finished(position);
                let (accepted, moved) = self.step(rng, link, node, complete).await;
                if let Some(mut late) = late {
                    late.sent_ms = sent_ms;
                    late.accepted = accepted;
                    self.context
                        .shared
                        .with(|history| history.late_completions.push(late));
                }
                match moved {
                    Some((next, to)) => {
                        link = next;
                        node = to;
                    }
                    None => continue 'streams,
                }
                if link.grant(1).is_err() {
                    continue 'streams;
                }
            }
        }
        false
    }

    /// Sends `complete` as a step on `link`, and on a new stream (another node) while it goes
    /// unanswered; returns the answer and the stream to go on with (none: every try failed).
    async fn step(
        &self,
        rng: &mut SeedRng,
        mut link: WorkLink,
        mut node: u64,
        complete: v1::CompleteRequest,
    ) -> (Accepted, Option<(WorkLink, u64)>) {
        for attempt in 0..STREAM_STEP_ATTEMPTS {
            if attempt > 0 {
                node = another_node(rng, node, self.context.nodes);
                match self.open(node, 0).await {
                    Some(opened) => link = opened,
                    None => continue,
                }
            }
            match link.step(self.context, complete.clone()).await {
                StepAnswer::Answered(result) => {
                    let accepted = stale_or_applied(result.code);
                    return (accepted, Some((link, node)));
                }
                StepAnswer::Stopping => return (None, None),
                StepAnswer::Lost => {}
            }
        }
        (None, None)
    }

    /// Opens a `Work` stream on `node` with `credit`.
    async fn open(&self, node: u64, credit: u32) -> Option<WorkLink> {
        let mut client: SessionsClient<Channel> = self.context.connect(node).await?;
        let (requests, outbound) = mpsc::unbounded_channel();
        let start = v1::SessionWorkStart {
            stage: v1::Stage::TestChallenge.into(),
            worker: self.name.clone(),
            visibility_ms: self.workload.worker_visibility_ms,
            credit,
        };
        requests
            .send(v1::SessionWorkRequest {
                kind: Some(v1::session_work_request::Kind::Start(start)),
            })
            .ok()?;
        match client.work(requests_stream(outbound)).await {
            Ok(response) => {
                tracing::info!(worker = %self.name, node, credit, "session work stream open");
                Some(WorkLink {
                    requests,
                    events: response.into_inner(),
                    next_step_id: 0,
                })
            }
            Err(status) => {
                if status.code() == tonic::Code::InvalidArgument {
                    self.context.violation(format!(
                        "node {node} refused {}'s valid Work stream: {}",
                        self.name,
                        status.message()
                    ));
                }
                None
            }
        }
    }

    /// Records the claim and tests the session's challenges; the claim's place in the history
    /// and the completion that reports the tests.
    async fn test(&self, session: &v1::Session) -> (usize, v1::CompleteRequest) {
        let record = ClaimRecord {
            worker: self.name.clone(),
            session: session.id,
            token: session.claim_token,
            granted_ms: self.context.now_ms(),
            granted_machine_ms: session
                .claim_deadline_ms
                .saturating_sub(self.workload.worker_visibility_ms),
            deadline_machine_ms: session.claim_deadline_ms,
            first_deadline_machine_ms: session.claim_deadline_ms,
            finished_ms: None,
            visible_at_machine_ms: None,
        };
        let position = self.context.shared.with(|history| {
            history.claims.push(record);
            history.claims.len() - 1
        });
        let tester = SimTester;
        let mut results = Vec::new();
        for challenge in &session.challenges {
            let outcome = if challenge.satisfied {
                TestOutcome::Satisfied
            } else {
                tester
                    .test(
                        &challenge.name,
                        &challenge.token,
                        &challenge.key_authorization,
                    )
                    .await
            };
            results.push(v1::TestResult {
                name: challenge.name.clone(),
                satisfied: outcome.is_satisfied(),
                error: match outcome {
                    TestOutcome::Satisfied => String::new(),
                    TestOutcome::NotSatisfied { reason } => reason,
                },
            });
        }
        let complete = v1::CompleteRequest {
            id: session.id,
            claim_token: session.claim_token,
            outcome: Some(v1::complete_request::Outcome::Tested(
                v1::complete_request::Tested { results },
            )),
        };
        (position, complete)
    }

    fn fate(&self, rng: &mut SeedRng, complete: &v1::CompleteRequest) -> Fate {
        let unsatisfied = match &complete.outcome {
            Some(v1::complete_request::Outcome::Tested(tested)) => {
                tested.results.iter().any(|result| !result.satisfied)
            }
            _ => false,
        };
        let late_per_mille = if unsatisfied {
            self.workload.late_per_mille
        } else {
            self.workload.late_per_mille / 10
        };
        if rng.chance(late_per_mille) {
            Fate::Late
        } else if rng.chance(self.workload.abandon_per_mille) {
            Fate::Abandon
        } else {
            Fate::Complete
        }
    }

    /// Waits until the session's claim has expired and a newer one was granted (or the
    /// session left the stage); the late completion to record, or none if that did not happen.
    async fn wait_until_stale(
        &self,
        rng: &mut SeedRng,
        session: &v1::Session,
    ) -> Option<LateCompletion> {
        let mut late = LateCompletion {
            worker: self.name.clone(),
            session: session.id,
            token: session.claim_token,
            newer_token: 0,
            sent_ms: 0,
            accepted: None,
        };
        let context = self.context;
        tokio::time::sleep(Duration::from_millis(
            self.workload.worker_visibility_ms + 500,
        ))
        .await;
        for _ in 0..10 {
            if context.stopping() {
                return None;
            }
            let node = rng.between(1, context.nodes);
            if let Some(mut sessions) = context.connect(node).await
                && let Ok(reply) = sessions
                    .get(v1::GetSessionRequest { id: late.session })
                    .await
            {
                let seen = reply.into_inner();
                let stage = v1::Stage::try_from(seen.stage).unwrap_or(v1::Stage::Unspecified);
                if stage != v1::Stage::TestChallenge {
                    late.newer_token = 0;
                    return Some(late);
                }
                if seen.claim_token > late.token {
                    late.newer_token = seen.claim_token;
                    return Some(late);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        None
    }

    /// Notes in the history that the worker finished its claim now (the completion goes out
    /// next); when that was.
    fn finished(&self, position: usize) -> u64 {
        let now = self.context.now_ms();
        self.context
            .shared
            .with(|history| history.claims[position].finished_ms = Some(now));
        now
    }

    /// Completes by a unary call: `Complete`, or a one-item `CompleteBatch` on the long-poll
    /// path.
    async fn complete_by_call(
        &self,
        sessions: &mut SessionsClient<Channel>,
        complete: v1::CompleteRequest,
    ) -> Accepted {
        if self.path == Path::LongPoll {
            let answer = sessions
                .complete_batch(v1::CompleteSessionBatchRequest {
                    items: vec![complete],
                })
                .await;
            return match answer {
                Ok(reply) => match reply.into_inner().results.as_slice() {
                    [result] => stale_or_applied(result.code),
                    results => {
                        self.context.violation(format!(
                            "a one-item CompleteBatch from {} answered {} results",
                            self.name,
                            results.len()
                        ));
                        None
                    }
                },
                Err(_) => None,
            };
        }
        match sessions.complete(complete).await {
            Ok(_) => Some(true),
            Err(status) if status.code() == tonic::Code::FailedPrecondition => Some(false),
            Err(_) => None,
        }
    }
}

/// What the worker sends on a stream, as the stream the call takes. A free function: built in
/// a method, the stream's future would borrow the worker's lifetime, and the task could not be
/// spawned.
fn requests_stream(
    requests: mpsc::UnboundedReceiver<v1::SessionWorkRequest>,
) -> impl futures_util::Stream<Item = v1::SessionWorkRequest> + Send + 'static {
    futures_util::stream::unfold(requests, |mut requests| async move {
        requests.recv().await.map(|request| (request, requests))
    })
}

/// An item's status code: applied (OK), refused as stale (FAILED_PRECONDITION), or neither.
fn stale_or_applied(code: u32) -> Accepted {
    match i32::try_from(code).map(tonic::Code::from) {
        Ok(tonic::Code::Ok) => Some(true),
        Ok(tonic::Code::FailedPrecondition) => Some(false),
        _ => None,
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// One open `Work` stream, as the worker sees it.
struct WorkLink {
    requests: mpsc::UnboundedSender<v1::SessionWorkRequest>,
    events: tonic::Streaming<v1::SessionWorkEvent>,
    next_step_id: u64,
}

enum LinkEvent {
    Claimed(Box<v1::Session>),
    Stopping,
    /// The stream ended or failed.
    Broken,
    /// Nothing came for [`STREAM_IDLE`].
    Silent,
    Violation(String),
}

enum StepAnswer {
    Answered(v1::SessionStepResult),
    Stopping,
    /// The stream broke, went silent or answered something else.
    Lost,
}

impl WorkLink {
    fn grant(&self, credit: u32) -> Result<(), ()> {
        self.requests
            .send(v1::SessionWorkRequest {
                kind: Some(v1::session_work_request::Kind::Credit(credit)),
            })
            .map_err(|_| ())
    }

    async fn next_event(
        &mut self,
        context: &Context,
        within: Duration,
    ) -> Result<v1::session_work_event::Kind, LinkEvent> {
        let mut stopped = context.stopped.clone();
        let event = tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            _ = stopped.wait_for(|stopped| *stopped) => return Err(LinkEvent::Stopping),
            event = tokio::time::timeout(within, self.events.message()) => event,
        };
        match event {
            Err(_elapsed) => Err(LinkEvent::Silent),
            Ok(Ok(Some(v1::SessionWorkEvent { kind: Some(kind) }))) => Ok(kind),
            Ok(Ok(Some(v1::SessionWorkEvent { kind: None }))) => Err(LinkEvent::Violation(
                "an empty session work event".to_owned(),
            )),
            Ok(Ok(None) | Err(_)) => Err(LinkEvent::Broken),
        }
    }

    /// Waits for the next pushed claim.
    async fn next_claim(&mut self, context: &Context) -> LinkEvent {
        match self.next_event(context, STREAM_IDLE).await {
            Ok(v1::session_work_event::Kind::Claimed(session)) => {
                LinkEvent::Claimed(Box::new(session))
            }
            Ok(v1::session_work_event::Kind::Answer(answer)) => LinkEvent::Violation(format!(
                "an answer to step {} that was never sent",
                answer.step_id
            )),
            Err(event) => event,
        }
    }

    /// Sends `complete` as a step and waits for its answer.
    async fn step(&mut self, context: &Context, complete: v1::CompleteRequest) -> StepAnswer {
        self.next_step_id += 1;
        let step_id = self.next_step_id;
        let step = v1::SessionWorkStep {
            step_id,
            step: Some(v1::session_work_step::Step::Complete(complete)),
        };
        let sent = self.requests.send(v1::SessionWorkRequest {
            kind: Some(v1::session_work_request::Kind::Step(step)),
        });
        if sent.is_err() {
            return StepAnswer::Lost;
        }
        match self.next_event(context, context.timeout).await {
            Ok(v1::session_work_event::Kind::Answer(answer)) if answer.step_id == step_id => {
                match answer.result {
                    Some(result) => StepAnswer::Answered(result),
                    None => {
                        context.violation(format!("step {step_id}'s answer carried no result"));
                        StepAnswer::Lost
                    }
                }
            }
            Ok(other) => {
                context.violation(format!(
                    "a stream with no credit and step {step_id} in flight sent {other:?}"
                ));
                StepAnswer::Lost
            }
            Err(LinkEvent::Stopping) => StepAnswer::Stopping,
            Err(_) => StepAnswer::Lost,
        }
    }
}
