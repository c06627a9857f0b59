//! The pipeline workers. Each worker takes work one way for the whole run, drawn from the seed:
//! by polling `Dequeue` (an empty answer: a short pause, then again), by long-polling it
//! (`wait_ms`), or on the `Work` stream ([`work_stream`](super::work_stream)); a dequeuing
//! worker sends its steps by the unary calls and now and then completes the transactions it
//! holds in one `CompleteBatch`, a stream worker sends them on its stream. Whatever the way,
//! each claimed transaction is worked alike ([`work_transaction`]): a pause for the work,
//! progress now and then, a progress report before the step (to hear of cancels), then a hand-on
//! to another node group, a sleep (until a time or a switch) or a completion with a result
//! derived from the state — and, while the faults are on, now and then a crash mid-transaction
//! (a new incarnation comes back after a pause) or a stall past the reaper's timeout.

use std::fmt;
use std::time::Duration;

use certus_proto::v1;
use certus_proto::v1::pipelines_client::PipelinesClient;
use tonic::transport::Channel;

use super::checkers::{ClaimRecord, ProgressRecord, SleepRecord, StepKind, StepRecord};
use super::work_stream::{self, Lane};
use super::workload::{
    Context, FIRST_GROUP, PipelineWorkload, SECOND_GROUP, status_text, switch_name,
};
use crate::cluster::another_node;
use crate::schedule::SeedRng;

/// How a worker takes its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Intake {
    /// `Dequeue` without a wait; a short pause after an empty answer.
    Poll,
    /// `Dequeue` with a wait of this many ms.
    LongPoll { wait_ms: u64 },
    /// The `Work` stream, one per node group, with this much credit on each.
    Stream { credit: [u32; 2] },
}

/// How one worker works for a whole run (drawn from its seed).
#[derive(Clone, Copy, Debug)]
pub(super) struct Style {
    pub(super) intake: Intake,
    /// A dequeuing worker that holds several transactions completes them in one
    /// `CompleteBatch` (the other steps stay unary).
    pub(super) complete_in_batches: bool,
}

impl Style {
    fn draw(rng: &mut SeedRng, workload: &PipelineWorkload) -> Style {
        let intake = match rng.between(0, 2) {
            0 => Intake::Poll,
            1 => Intake::LongPoll {
                wait_ms: rng.between(workload.dequeue_wait_ms.0, workload.dequeue_wait_ms.1),
            },
            _ => {
                let credit_max = workload.stream_credit_max.max(1);
                let mut credit = || u32::try_from(rng.between(1, credit_max)).expect("small");
                Intake::Stream {
                    credit: [credit(), credit()],
                }
            }
        };
        let complete_in_batches = !matches!(intake, Intake::Stream { .. }) && rng.chance(500);
        Style {
            intake,
            complete_in_batches,
        }
    }
}

impl fmt::Display for Style {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.intake {
            Intake::Poll => write!(f, "Dequeue polled")?,
            Intake::LongPoll { wait_ms } => write!(f, "Dequeue long-polled ({wait_ms} ms)")?,
            Intake::Stream { credit } => write!(
                f,
                "Work streams (credit {} on {FIRST_GROUP}, {} on {SECOND_GROUP})",
                credit[0], credit[1]
            )?,
        }
        if self.complete_in_batches {
            write!(f, ", CompleteBatch")?;
        }
        Ok(())
    }
}

/// A worker: draws how it works, then works until the run stops.
pub(super) async fn work(index: u32, context: Context) {
    context.wait_configured().await;
    let mut rng = SeedRng::new(context.seed, 900 + u64::from(index));
    let style = Style::draw(&mut rng, &context.workload);
    tracing::info!(worker = index, %style, "pipeline worker starts");
    context
        .shared
        .with(|history| history.paths.push(format!("worker {index}: {style}")));
    match style.intake {
        Intake::Stream { credit } => work_stream::work(index, context, rng, credit).await,
        Intake::Poll | Intake::LongPoll { .. } => {
            dequeue_and_work(index, context, rng, style).await;
        }
    }
}

/// A dequeuing worker: dequeues from either node group (polling, or waiting for work), works
/// each transaction, and completes those it planned to complete at once or, holding several
/// with `complete_in_batches`, in one `CompleteBatch` at the end.
async fn dequeue_and_work(index: u32, context: Context, mut rng: SeedRng, style: Style) {
    let mut incarnation = 0u64;
    let timeout = context.workload.attempt_timeout;
    let wait_ms = match style.intake {
        Intake::LongPoll { wait_ms } => wait_ms,
        Intake::Poll | Intake::Stream { .. } => 0,
    };
    // A worker stays with a node that answers and moves on when one does not, as client
    // libraries do: a dequeue whose answer is lost still claims (the reaper frees it), so a
    // worker that kept asking a node cut off from the leader's answers would keep transactions
    // claimed by nobody.
    let mut node = rng.between(1, context.nodes);
    while !context.stopping() {
        let worker = format!("w{index}-{incarnation}");
        let group = if rng.chance(500) {
            FIRST_GROUP
        } else {
            SECOND_GROUP
        };
        let max = if style.complete_in_batches {
            rng.between(2, 4)
        } else {
            rng.between(1, 2)
        };
        let Some(client) = context.connect(node, timeout).await else {
            node = another_node(&mut rng, node, context.nodes);
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        };
        // A long-poll needs its wait on top of the attempt's timeout, on a channel of its own.
        let poller = if wait_ms == 0 {
            Some(client.clone())
        } else {
            context
                .connect(node, timeout + Duration::from_millis(wait_ms))
                .await
        };
        let taken = match poller {
            Some(mut poller) => {
                if wait_ms > 0 {
                    context.shared.with(|history| history.dequeue_waits += 1);
                }
                poller
                    .dequeue(v1::DequeueRequest {
                        node_group: group.to_owned(),
                        worker: worker.clone(),
                        max: u32::try_from(max).unwrap_or(1),
                        wait_ms,
                    })
                    .await
                    .map(|reply| reply.into_inner().transactions)
            }
            None => Err(tonic::Status::unavailable("no connection")),
        };
        let taken = match taken {
            Ok(taken) => taken,
            Err(status) => {
                if status.code() == tonic::Code::InvalidArgument {
                    context.violation(format!(
                        "node {node} refused a valid dequeue: {}",
                        status.message()
                    ));
                }
                node = another_node(&mut rng, node, context.nodes);
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        if taken.is_empty() {
            // A long-poll answers empty only at the end of its wait: ask again at once.
            let pause_ms = if wait_ms == 0 {
                rng.between(100, 300)
            } else {
                rng.between(0, 20)
            };
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            continue;
        }
        for tx in &taken {
            record_claim(&context, &worker, node, tx);
        }
        let mut via = Via::Unary { client, node };
        let batching = style.complete_in_batches && taken.len() > 1;
        let mut deferred = Vec::new();
        let mut crashed = false;
        for tx in &taken {
            let flow = work_transaction(
                &context,
                &mut rng,
                &worker,
                tx,
                &mut via,
                batching.then_some(&mut deferred),
            )
            .await;
            if flow == Flow::Crashed {
                crashed = true;
                break;
            }
        }
        let Via::Unary {
            client: mut last_client,
            node: last_node,
        } = via
        else {
            unreachable!("a dequeuing worker steps by the unary calls");
        };
        node = last_node;
        // A worker that crashed sends nothing more: its kept completions are lost with it.
        if !crashed && !deferred.is_empty() {
            complete_batch(
                &context,
                &mut rng,
                &worker,
                deferred,
                &mut last_client,
                &mut node,
            )
            .await;
        }
        if crashed {
            // What it had claimed and not stepped on is left to the reaper.
            incarnation += 1;
            tokio::time::sleep(Duration::from_millis(rng.between(500, 2_000))).await;
        }
    }
}

/// Records a claim `worker` got (from a dequeue's answer, or pushed on its stream): a claim
/// not running under the worker is a violation.
pub(super) fn record_claim(context: &Context, worker: &str, node: u64, tx: &v1::Transaction) {
    if tx.status_text != "running" || tx.worker != worker {
        context.violation(format!(
            "node {node} handed {worker} transaction {} as {} for {}",
            tx.id, tx.status_text, tx.worker
        ));
    }
    let granted_ms = context.now_ms();
    context.shared.with(|history| {
        history.claims.push(ClaimRecord {
            worker: worker.to_owned(),
            transaction: tx.id,
            token: tx.claim_token,
            granted_ms,
            started_machine_ms: tx.claim_started_at_ms,
            deadline_machine_ms: tx.claim_deadline_ms,
        });
    });
}

/// How a step was answered, whichever way it went.
#[derive(Debug)]
pub(super) enum Answer {
    /// The reply of the step's kind (never an error).
    Done(v1::work_step_result::Result),
    /// Refused, as the unary call's status or the stream's `ItemError` said.
    Refused(v1::ItemError),
    /// Sent, and no answer came (it may have taken effect).
    Lost,
    /// Never sent (no stream to send it on, or the worker is gone).
    Unsent,
}

impl Answer {
    /// A unary call's answer.
    fn of_call<T>(
        answer: Result<tonic::Response<T>, tonic::Status>,
        done: impl FnOnce(T) -> v1::work_step_result::Result,
    ) -> Answer {
        match answer {
            Ok(reply) => Answer::Done(done(reply.into_inner())),
            Err(status) => Answer::Refused(v1::ItemError {
                code: status.code() as i32,
                reason: status
                    .metadata()
                    .get("certus-error")
                    .and_then(|reason| reason.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                message: status.message().to_owned(),
            }),
        }
    }

    /// A stream's step result.
    pub(super) fn of_result(result: Option<v1::work_step_result::Result>) -> Answer {
        match result {
            Some(v1::work_step_result::Result::Error(error)) => Answer::Refused(error),
            Some(done) => Answer::Done(done),
            None => Answer::Lost,
        }
    }

    /// Accepted, refused (stale claim, or a cancel was asked for), or not known.
    fn accepted(&self) -> Option<bool> {
        match self {
            Answer::Done(_) => Some(true),
            Answer::Refused(error) if error.code == tonic::Code::FailedPrecondition as i32 => {
                Some(false)
            }
            Answer::Refused(_) | Answer::Lost | Answer::Unsent => None,
        }
    }

    fn refused_for_cancel(&self) -> bool {
        matches!(self, Answer::Refused(error) if error.reason == "cancel-requested")
    }
}

/// Which way a worker's steps go.
pub(super) enum Via {
    /// The unary calls, to `node` (moving to another when one goes unanswered).
    Unary {
        client: PipelinesClient<Channel>,
        node: u64,
    },
    /// The worker's `Work` stream of the transaction's node group (a new one when it breaks).
    Stream(std::sync::Arc<Lane>),
}

impl Via {
    /// Sends `step`; when it went out (ms), and its answer.
    async fn send(&mut self, context: &Context, step: v1::work_step::Kind) -> (u64, Answer) {
        use v1::work_step::Kind;
        use v1::work_step_result::Result as Done;
        match self {
            Via::Unary { client, .. } => {
                let sent_ms = context.now_ms();
                let answer = match step {
                    Kind::Complete(request) => {
                        Answer::of_call(client.complete(request).await, Done::Complete)
                    }
                    Kind::Progress(request) => {
                        Answer::of_call(client.progress(request).await, Done::Progress)
                    }
                    Kind::Sleep(request) => {
                        Answer::of_call(client.sleep(request).await, Done::Sleep)
                    }
                    Kind::Requeue(request) => {
                        Answer::of_call(client.requeue(request).await, Done::Requeue)
                    }
                };
                (sent_ms, answer)
            }
            Via::Stream(lane) => lane.send(context, step).await,
        }
    }

    /// After a step went unanswered: the same step goes again another way (a unary worker
    /// moves to another node; a stream worker's stream was given up and is opened again).
    async fn move_on(&mut self, context: &Context, rng: &mut SeedRng) {
        if let Via::Unary { client, node } = self {
            move_to_another(context, rng, client, node).await;
        }
    }

    /// The worker that took this way is gone (its stream worker crashed): send nothing more.
    fn abandoned(&self) -> bool {
        match self {
            Via::Unary { .. } => false,
            Via::Stream(lane) => lane.crashed(),
        }
    }
}

/// How working one transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Its step was sent (or deferred to a batch), or given up.
    Next,
    /// The worker crashed on it (on purpose).
    Crashed,
    /// The worker crashed meanwhile (on another transaction of its streams).
    Abandoned,
}

/// A completion kept for the worker's `CompleteBatch`.
#[derive(Debug)]
pub(super) struct Deferred {
    request: v1::CompleteTransactionRequest,
    cancel_known: bool,
}

/// Works one claimed transaction, sending its steps `via` (a completion goes to `deferred`
/// instead when there is one).
pub(super) async fn work_transaction(
    context: &Context,
    rng: &mut SeedRng,
    worker: &str,
    tx: &v1::Transaction,
    via: &mut Via,
    deferred: Option<&mut Vec<Deferred>>,
) -> Flow {
    tokio::time::sleep(Duration::from_millis(rng.between(50, 300))).await;
    if via.abandoned() {
        return Flow::Abandoned;
    }
    if rng.chance(context.workload.crash_per_mille) && context.faults_on() {
        tracing::info!(%worker, transaction = tx.id, "pipeline worker crashes mid-transaction");
        context.shared.with(|history| history.crashed += 1);
        return Flow::Crashed;
    }
    if rng.chance(context.workload.progress_per_mille) {
        let step = v1::work_step::Kind::Progress(v1::ProgressRequest {
            transaction_id: tx.id,
            claim_token: tx.claim_token,
            report: r#"{"done":50}"#.to_owned(),
        });
        if let (_, Answer::Done(v1::work_step_result::Result::Progress(reply))) =
            via.send(context, step).await
        {
            moved_deadline(context, tx, reply.claim_deadline_ms);
        }
    }
    if rng.chance(context.workload.stall_per_mille) && context.faults_on() {
        tracing::info!(%worker, transaction = tx.id, "pipeline worker stalls past its claim");
        context.shared.with(|history| history.stalled += 1);
        tokio::time::sleep(Duration::from_millis(
            context.timing.running_timeout_ms + rng.between(1_000, 3_000),
        ))
        .await;
    }
    let Ok(state) = serde_json::from_str::<TxState>(&tx.state) else {
        context.violation(format!(
            "transaction {} carries a state the producer did not write: {}",
            tx.id, tx.state
        ));
        return Flow::Next;
    };
    let requeue = tx.node_group == FIRST_GROUP
        && state.hops == 0
        && rng.chance(context.workload.requeue_per_mille);
    if via.abandoned() {
        return Flow::Abandoned;
    }
    let mut cancel_known = check_cancel(context, via, worker, tx).await;
    let mut plan = if cancel_known {
        Plan::Complete
    } else if requeue {
        Plan::Requeue
    } else if state.slept == 0 && rng.chance(context.workload.sleep_per_mille) {
        if rng.chance(context.workload.switch_sleep_per_mille) {
            let switch = switch_name(rng.between(0, u64::from(context.workload.switches) - 1));
            Plan::Sleep {
                for_ms: context.workload.switch_sleep_ms,
                switch: Some(switch),
            }
        } else {
            Plan::Sleep {
                for_ms: rng.between(300, 1_500),
                switch: None,
            }
        }
    } else {
        Plan::Complete
    };
    if let (Plan::Complete, Some(deferred)) = (&plan, deferred) {
        deferred.push(Deferred {
            request: completion(tx, &state, cancel_known),
            cancel_known,
        });
        return Flow::Next;
    }
    let first_sent_ms = context.now_ms();
    for _ in 0..4 {
        if context.stopping() {
            break;
        }
        if via.abandoned() {
            return Flow::Abandoned;
        }
        let (kind, step, completed_as) = match &plan {
            Plan::Requeue => (
                StepKind::Requeue,
                v1::work_step::Kind::Requeue(v1::RequeueRequest {
                    transaction_id: tx.id,
                    claim_token: tx.claim_token,
                    route: Some(v1::requeue_request::Route::NodeGroup(
                        SECOND_GROUP.to_owned(),
                    )),
                    queue: v1::QueueType::In.into(),
                    state: state_text(&state, state.hops + 1, state.slept),
                    event: r#"{"do":"more"}"#.to_owned(),
                }),
                None,
            ),
            Plan::Sleep { for_ms, switch } => (
                StepKind::Sleep,
                v1::work_step::Kind::Sleep(v1::SleepRequest {
                    transaction_id: tx.id,
                    claim_token: tx.claim_token,
                    switch: switch.clone().unwrap_or_default(),
                    queue: v1::QueueType::In.into(),
                    state: state_text(&state, state.hops, 1),
                    wake: Some(v1::sleep_request::Wake::ForMs(*for_ms)),
                }),
                None,
            ),
            Plan::Complete => {
                let request = completion(tx, &state, cancel_known);
                let status = status_text(request.status);
                (
                    StepKind::Complete,
                    v1::work_step::Kind::Complete(request),
                    Some(status),
                )
            }
        };
        let (sent_ms, answer) = via.send(context, step).await;
        if matches!(answer, Answer::Unsent) {
            // Nothing went out: try again shortly (the stream may be back by then).
            tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
            continue;
        }
        let accepted = answer.accepted();
        let slept_until = match &answer {
            Answer::Done(v1::work_step_result::Result::Sleep(reply)) => Some(reply.until_ms),
            _ => None,
        };
        context.shared.with(|history| {
            history.steps.push(StepRecord {
                worker: worker.to_owned(),
                transaction: tx.id,
                token: tx.claim_token,
                kind,
                sent_ms,
                accepted,
                status: completed_as,
                cancel_known,
            });
            if let (Plan::Sleep { for_ms, switch }, Some(until_machine_ms)) = (&plan, slept_until) {
                history.sleeps.push(SleepRecord {
                    worker: worker.to_owned(),
                    transaction: tx.id,
                    token: tx.claim_token,
                    sent_ms: first_sent_ms,
                    acknowledged_ms: context.now_ms(),
                    for_ms: *for_ms,
                    until_machine_ms,
                    switch: switch.clone(),
                });
            }
        });
        if answer.refused_for_cancel() && kind != StepKind::Complete {
            // A cancel was asked for: the only step left is to complete it as aborted.
            cancel_known = true;
            plan = Plan::Complete;
            continue;
        }
        if accepted.is_some() {
            break;
        }
        // No answer: the same step again, under the same token, another way.
        tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
        via.move_on(context, rng).await;
    }
    Flow::Next
}

/// The completion of `tx`: the result derived from its state, as *aborted* once a cancel is
/// known.
fn completion(
    tx: &v1::Transaction,
    state: &TxState,
    cancel_known: bool,
) -> v1::CompleteTransactionRequest {
    let (status, result) = outcome_for(state);
    let status = if cancel_known {
        v1::TxStatus::Aborted
    } else {
        status
    };
    v1::CompleteTransactionRequest {
        transaction_id: tx.id,
        claim_token: tx.claim_token,
        status: status.into(),
        state: result,
    }
}

/// Moves a unary worker to another node, at random.
async fn move_to_another(
    context: &Context,
    rng: &mut SeedRng,
    client: &mut PipelinesClient<Channel>,
    node: &mut u64,
) {
    *node = another_node(rng, *node, context.nodes);
    if let Some(other) = context
        .connect(*node, context.workload.attempt_timeout)
        .await
    {
        *client = other;
    }
}

/// Sends the completions a worker kept in one `CompleteBatch` (the items not answered go again
/// through another node, four calls at most); records each item as a step, as a unary
/// completion is recorded.
async fn complete_batch(
    context: &Context,
    rng: &mut SeedRng,
    worker: &str,
    mut deferred: Vec<Deferred>,
    client: &mut PipelinesClient<Channel>,
    node: &mut u64,
) {
    for _ in 0..4 {
        if context.stopping() || deferred.is_empty() {
            return;
        }
        let sent_ms = context.now_ms();
        context
            .shared
            .with(|history| history.complete_batch_calls += 1);
        let request = v1::CompleteBatchRequest {
            items: deferred.iter().map(|kept| kept.request.clone()).collect(),
        };
        let answers: Vec<Answer> = match client.complete_batch(request).await {
            Ok(reply) => {
                let items = reply.into_inner().items;
                if items.len() != deferred.len() {
                    context.violation(format!(
                        "node {} answered a complete batch of {} items with {} results",
                        *node,
                        deferred.len(),
                        items.len()
                    ));
                    return;
                }
                items
                    .into_iter()
                    .map(|item| match item.result {
                        Some(v1::complete_item_result::Result::Completed(reply)) => {
                            Answer::Done(v1::work_step_result::Result::Complete(reply))
                        }
                        Some(v1::complete_item_result::Result::Error(error)) => {
                            Answer::Refused(error)
                        }
                        None => Answer::Lost,
                    })
                    .collect()
            }
            Err(status) => {
                if status.code() == tonic::Code::InvalidArgument {
                    context.violation(format!(
                        "node {} refused a valid complete batch: {}",
                        *node,
                        status.message()
                    ));
                    return;
                }
                deferred.iter().map(|_| Answer::Lost).collect()
            }
        };
        let mut unanswered = Vec::new();
        for (kept, answer) in deferred.into_iter().zip(answers) {
            let accepted = answer.accepted();
            context.shared.with(|history| {
                history.steps.push(StepRecord {
                    worker: worker.to_owned(),
                    transaction: kept.request.transaction_id,
                    token: kept.request.claim_token,
                    kind: StepKind::Complete,
                    sent_ms,
                    accepted,
                    status: Some(status_text(kept.request.status)),
                    cancel_known: kept.cancel_known,
                });
            });
            if accepted.is_none() {
                unanswered.push(kept);
            }
        }
        deferred = unanswered;
        if !deferred.is_empty() {
            tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
            move_to_another(context, rng, client, node).await;
        }
    }
}

/// Moves the deadline recorded for `tx`'s claim to what a progress reply said.
fn moved_deadline(context: &Context, tx: &v1::Transaction, deadline_machine_ms: u64) {
    context.shared.with(|history| {
        if let Some(claim) = history
            .claims
            .iter_mut()
            .rev()
            .find(|claim| claim.transaction == tx.id && claim.token == tx.claim_token)
        {
            claim.deadline_machine_ms = claim.deadline_machine_ms.max(deadline_machine_ms);
        }
    });
}

/// The state fields a worker reads.
#[derive(serde::Deserialize)]
struct TxState {
    p: u64,
    n: u64,
    v: u64,
    hops: u64,
    #[serde(default)]
    slept: u64,
}

/// The result a worker derives from a transaction's state: the same whoever computes it.
fn outcome_for(state: &TxState) -> (v1::TxStatus, String) {
    let status = if state.v.is_multiple_of(7) {
        v1::TxStatus::Failed
    } else {
        v1::TxStatus::Success
    };
    let result = state.v * 3 + state.hops;
    (
        status,
        format!(
            r#"{{"p":{},"n":{},"v":{},"hops":{},"slept":{},"result":{result}}}"#,
            state.p, state.n, state.v, state.hops, state.slept
        ),
    )
}

/// What a worker does with a claimed transaction once its work is done.
enum Plan {
    Complete,
    Requeue,
    Sleep { for_ms: u64, switch: Option<String> },
}

/// A transaction's state as the producer wrote it, with `hops` and `slept` set.
fn state_text(state: &TxState, hops: u64, slept: u64) -> String {
    format!(
        r#"{{"p":{},"n":{},"v":{},"hops":{hops},"slept":{slept}}}"#,
        state.p, state.n, state.v
    )
}

/// Reports progress right before a step, as a worker that wants to know whether a cancel came
/// would; records the reply (and the deadline it moved). Whether it said a cancel was asked for.
async fn check_cancel(
    context: &Context,
    via: &mut Via,
    worker: &str,
    tx: &v1::Transaction,
) -> bool {
    let step = v1::work_step::Kind::Progress(v1::ProgressRequest {
        transaction_id: tx.id,
        claim_token: tx.claim_token,
        report: r#"{"check":1}"#.to_owned(),
    });
    let (sent_ms, Answer::Done(v1::work_step_result::Result::Progress(reply))) =
        via.send(context, step).await
    else {
        return false;
    };
    context.shared.with(|history| {
        history.progress.push(ProgressRecord {
            worker: worker.to_owned(),
            transaction: tx.id,
            token: tx.claim_token,
            sent_ms,
            cancel_requested: reply.cancel_requested,
        });
    });
    moved_deadline(context, tx, reply.claim_deadline_ms);
    reply.cancel_requested
}
