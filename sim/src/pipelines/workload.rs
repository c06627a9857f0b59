//! The pipelines workload: producers that enqueue transactions with external ids (re-sending
//! some, as a retrying producer would), many with a webhook to a simulated receiver, cancel
//! some, and long-poll for their results; workers that dequeue, work, report progress, ask
//! whether a cancel came before each step, hand transactions on to another node group, put some
//! to sleep (until a time, or until a switch changes), complete them with a result derived from
//! their state — and, while the faults are on, now and then crash mid-transaction, or stall
//! past the reaper's timeout and complete late; and a switcher that changes the switches
//! sleepers wait on (and cancels a sleeper now and then). Every call is one gRPC attempt
//! (`certus_proto::v1::PipelinesClient`), so the record says exactly what each call did:
//! producers ask a random node each time; a worker stays with a node while it answers.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_proto::v1;
use certus_proto::v1::pipelines_client::PipelinesClient;
use madsim::runtime::Handle;
use serde::Serialize;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use super::checkers::{
    CancelRecord, CancelSeen, ClaimRecord, Enqueued, Polled, ProgressRecord, SleepRecord, StepKind,
    StepRecord, SwitchRecord, TxResult, is_terminal,
};
use super::webhooks::receiver_url;
use crate::cluster::{elapsed_ms, endpoint};
use crate::schedule::SeedRng;

/// The pipeline producers enqueue through (defined at the start, to [`FIRST_GROUP`]).
pub const PIPELINE: &str = "sim";
/// The node group transactions start in.
pub const FIRST_GROUP: &str = "alpha";
/// The node group some are handed on to.
pub const SECOND_GROUP: &str = "beta";

/// The shape of the pipelines workload.
#[derive(Clone, Debug)]
pub struct PipelineWorkload {
    /// Producers enqueuing transactions.
    pub producers: u32,
    /// Workers dequeuing them.
    pub workers: u32,
    /// Transactions a producer has in flight at most.
    pub in_flight: usize,
    /// Per mille of acknowledged enqueues a producer sends again with the same external id.
    pub resend_per_mille: u64,
    /// Per mille of claims a worker crashes on (stops without a step; the reaper retries),
    /// while the faults are on.
    pub crash_per_mille: u64,
    /// Per mille of claims a worker stalls on past the reaper's timeout, then completes, while
    /// the faults are on.
    pub stall_per_mille: u64,
    /// Per mille of first-group claims handed on to the second group.
    pub requeue_per_mille: u64,
    /// Per mille of claims a worker reports progress on.
    pub progress_per_mille: u64,
    /// How long a call waits for its answer (a long-poll: on top of its wait).
    pub attempt_timeout: Duration,
    /// How long a long-poll waits for news.
    pub poll_wait_ms: u64,
    /// Webhook receivers (each on its own machine).
    pub receivers: u32,
    /// Per mille of transactions enqueued with a webhook (to a random receiver).
    pub webhook_per_mille: u64,
    /// Per mille of those that ask for progress reports by webhook too.
    pub progress_hooks_per_mille: u64,
    /// Per mille of transactions a producer cancels (0–1.5 s after the enqueue).
    pub cancel_per_mille: u64,
    /// Per mille of claims (of transactions that never slept) a worker puts to sleep.
    pub sleep_per_mille: u64,
    /// Per mille of sleeps on a switch (the rest sleep until a time).
    pub switch_sleep_per_mille: u64,
    /// How long a sleeper on a switch sleeps at most (the switcher changes it sooner).
    pub switch_sleep_ms: u64,
    /// The switches sleepers wait on.
    pub switches: u32,
}

impl Default for PipelineWorkload {
    fn default() -> Self {
        PipelineWorkload {
            producers: 3,
            workers: 2,
            in_flight: 3,
            resend_per_mille: 200,
            crash_per_mille: 100,
            stall_per_mille: 40,
            requeue_per_mille: 300,
            progress_per_mille: 300,
            attempt_timeout: Duration::from_millis(1_500),
            poll_wait_ms: 2_000,
            receivers: 3,
            webhook_per_mille: 600,
            progress_hooks_per_mille: 300,
            cancel_per_mille: 120,
            sleep_per_mille: 150,
            switch_sleep_per_mille: 500,
            switch_sleep_ms: 10_000,
            switches: 2,
        }
    }
}

/// A node other than `node`, at random.
fn another_node(rng: &mut SeedRng, node: u64, nodes: u64) -> u64 {
    if nodes < 2 {
        return node;
    }
    let step = rng.between(1, nodes - 1);
    (node - 1 + step) % nodes + 1
}

/// The simulated address of producer `index`.
fn producer_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated producers");
    IpAddr::V4(Ipv4Addr::new(10, 0, 5, last))
}

/// The simulated address of worker `index`.
fn worker_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated workers");
    IpAddr::V4(Ipv4Addr::new(10, 0, 6, last))
}

/// The simulated address of the switcher.
fn switcher_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 8, 1))
}

/// Everything the pipelines part of a run recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PipelineHistory {
    /// Every enqueue a producer saw acknowledged (first sends and re-sends).
    pub enqueued: Vec<Enqueued>,
    /// The finished results producers' long-polls returned.
    pub polled: Vec<Polled>,
    /// Every claim a worker got.
    pub claims: Vec<ClaimRecord>,
    /// Every step a worker sent, with its answer.
    pub steps: Vec<StepRecord>,
    /// Every progress report (and cancel check) a worker saw accepted.
    pub progress: Vec<ProgressRecord>,
    /// Every sleep a worker saw accepted.
    pub sleeps: Vec<SleepRecord>,
    /// Every switch the switcher set.
    pub switches: Vec<SwitchRecord>,
    /// Every cancel sent.
    pub cancels: Vec<CancelRecord>,
    /// The webhook URL of every acknowledged transaction enqueued with one.
    pub webhooks: BTreeMap<u64, String>,
    /// What a producer or worker found wrong.
    pub violations: Vec<String>,
    /// Enqueue calls made, answered or not.
    pub enqueue_calls: u64,
    /// Long-poll calls made.
    pub poll_calls: u64,
    /// Claims a worker crashed on.
    pub crashed: u64,
    /// Claims a worker stalled on past the reaper's timeout.
    pub stalled: u64,
    /// Results re-read after they were archived.
    pub archived_reads: u64,
}

/// The shared record of a run's pipelines.
#[derive(Clone, Debug, Default)]
pub struct Shared(Arc<Mutex<PipelineHistory>>);

impl Shared {
    /// Changes the record.
    pub fn with<T>(&self, change: impl FnOnce(&mut PipelineHistory) -> T) -> T {
        change(&mut self.0.lock().expect("pipelines history"))
    }
}

/// What the workload needs to know of the cluster's pipeline configuration.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The reaper's timeout.
    pub running_timeout_ms: u64,
    /// Finished to archived.
    pub archive_delay_ms: u64,
}

/// A running pipelines workload.
#[derive(Debug)]
pub struct RunningPipelines {
    stop: watch::Sender<bool>,
    tasks: Vec<madsim::task::JoinHandle<()>>,
}

impl RunningPipelines {
    /// Stops the producers and workers.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

#[derive(Clone)]
struct Context {
    nodes: u64,
    workload: PipelineWorkload,
    timing: Timing,
    started: tokio::time::Instant,
    stopped: watch::Receiver<bool>,
    /// Nothing starts before the configuration is applied (the default timeouts are minutes).
    configured: Arc<AtomicBool>,
    /// Producers enqueue until this simulated ms.
    enqueue_until_ms: Arc<AtomicU64>,
    shared: Shared,
    seed: u64,
}

impl Context {
    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    fn now_ms(&self) -> u64 {
        elapsed_ms(self.started)
    }

    /// Whether the run's faults are still on: workers crash and stall only then, like the
    /// network and the nodes. The harness learns of the healing when it sets the end of
    /// enqueuing (until then `u64::MAX`).
    fn faults_on(&self) -> bool {
        self.enqueue_until_ms.load(Ordering::SeqCst) == u64::MAX
    }

    async fn connect(&self, node: u64, timeout: Duration) -> Option<PipelinesClient<Channel>> {
        let channel = Endpoint::from_shared(format!("http://{}", endpoint(node)))
            .expect("a valid endpoint")
            .connect_timeout(Duration::from_millis(500))
            .timeout(timeout)
            .connect()
            .await
            .ok()?;
        Some(PipelinesClient::new(channel))
    }

    fn violation(&self, what: String) {
        tracing::error!(violation = %what, "pipelines client saw a violation");
        self.shared.with(|history| history.violations.push(what));
    }

    async fn wait_configured(&self) {
        while !self.configured.load(Ordering::SeqCst) && !self.stopping() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Starts the producers and workers on their own machines. They wait until `configured`;
/// producers enqueue until simulated ms `enqueue_until_ms`; everything stops when `stop` is
/// called.
#[allow(clippy::too_many_arguments)]
pub fn start(
    workload: &PipelineWorkload,
    timing: Timing,
    nodes: u64,
    seed: u64,
    shared: Shared,
    configured: Arc<AtomicBool>,
    enqueue_until_ms: Arc<AtomicU64>,
    started: tokio::time::Instant,
) -> RunningPipelines {
    let handle = Handle::current();
    let (stop, stopped) = watch::channel(false);
    let context = Context {
        nodes,
        workload: workload.clone(),
        timing,
        started,
        stopped,
        configured,
        enqueue_until_ms,
        shared,
        seed,
    };
    let mut tasks = Vec::new();
    for index in 0..workload.producers {
        let machine = handle
            .create_node()
            .name(format!("pipeline-producer-{index}"))
            .ip(producer_ip(index))
            .build();
        tasks.push(machine.spawn(produce(index, context.clone())));
    }
    for index in 0..workload.workers {
        let machine = handle
            .create_node()
            .name(format!("pipeline-worker-{index}"))
            .ip(worker_ip(index))
            .build();
        tasks.push(machine.spawn(work(index, context.clone())));
    }
    let machine = handle
        .create_node()
        .name("pipeline-switcher")
        .ip(switcher_ip())
        .build();
    tasks.push(machine.spawn(switch(context)));
    RunningPipelines { stop, tasks }
}

/// Enqueues transactions while the run allows, up to `in_flight` at once.
async fn produce(index: u32, context: Context) {
    context.wait_configured().await;
    let mut rng = SeedRng::new(context.seed, 800 + u64::from(index));
    let mut running: Vec<madsim::task::JoinHandle<()>> = Vec::new();
    let mut number = 0u64;
    while !context.stopping() && context.now_ms() < context.enqueue_until_ms.load(Ordering::SeqCst)
    {
        running.retain(|task| !task.is_finished());
        if running.len() < context.workload.in_flight {
            number += 1;
            let tx_rng = SeedRng::new(context.seed, rng.next_u64());
            running.push(madsim::task::spawn(one_transaction(
                index,
                number,
                context.clone(),
                tx_rng,
            )));
        }
        tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
    }
    for task in running {
        let _ = task.await;
    }
}

/// One enqueue call; `Err(true)` when the answer says the request was invalid.
async fn enqueue_once(
    context: &Context,
    rng: &mut SeedRng,
    request: &v1::EnqueueRequest,
) -> Result<v1::EnqueueReply, bool> {
    context.shared.with(|history| history.enqueue_calls += 1);
    let node = rng.between(1, context.nodes);
    let Some(mut client) = context
        .connect(node, context.workload.attempt_timeout)
        .await
    else {
        return Err(false);
    };
    match client.enqueue(request.clone()).await {
        Ok(reply) => Ok(reply.into_inner()),
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            context.violation(format!(
                "node {node} refused a valid enqueue of {}: {}",
                request.external_id,
                status.message()
            ));
            Err(true)
        }
        Err(_) => Err(false),
    }
}

/// One transaction from its enqueue (retried under its external id until answered, and now and
/// then sent again) to its result (long-polled), and sometimes a re-read once it is archived.
async fn one_transaction(producer: u32, number: u64, context: Context, mut rng: SeedRng) {
    let external_id = format!("x-p{producer}-n{number}");
    let value = rng.between(1, 1_000);
    let route = if rng.chance(500) {
        v1::enqueue_request::Route::Pipeline(PIPELINE.to_owned())
    } else {
        v1::enqueue_request::Route::NodeGroup(FIRST_GROUP.to_owned())
    };
    let queue = match rng.between(0, 2) {
        0 => v1::QueueType::Admin,
        1 => v1::QueueType::Out,
        _ => v1::QueueType::In,
    };
    let metadata = (context.workload.receivers > 0
        && rng.chance(context.workload.webhook_per_mille))
    .then(|| {
        let receiver = u32::try_from(rng.between(0, u64::from(context.workload.receivers) - 1))
            .expect("a receiver index");
        v1::TxMetadata {
            webhook_url: receiver_url(receiver),
            progress_reports: rng.chance(context.workload.progress_hooks_per_mille),
            cancel_webhook_on_longpoll: false,
        }
    });
    let request = v1::EnqueueRequest {
        owner: format!("producer-{producer}"),
        external_id: external_id.clone(),
        route: Some(route),
        queue: queue.into(),
        state: format!(r#"{{"p":{producer},"n":{number},"v":{value},"hops":0,"slept":0}}"#),
        event: r#"{"do":"work"}"#.to_owned(),
        metadata: metadata.clone(),
    };
    let mut transaction = None;
    while transaction.is_none() && !context.stopping() {
        let invoked_ms = context.now_ms();
        match enqueue_once(&context, &mut rng, &request).await {
            Ok(reply) => {
                transaction = Some(reply.transaction_id);
                record_enqueue(&context, producer, &external_id, &reply, invoked_ms);
                if let Some(metadata) = &metadata {
                    context.shared.with(|history| {
                        history
                            .webhooks
                            .insert(reply.transaction_id, metadata.webhook_url.clone());
                    });
                }
            }
            Err(true) => return,
            Err(false) => {
                tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
            }
        }
    }
    let Some(transaction) = transaction else {
        return;
    };
    if rng.chance(context.workload.resend_per_mille) {
        // A producer that did not trust the answer sends it again (a few attempts at most).
        tokio::time::sleep(Duration::from_millis(rng.between(0, 3_000))).await;
        for _ in 0..3 {
            if context.stopping() {
                break;
            }
            let invoked_ms = context.now_ms();
            match enqueue_once(&context, &mut rng, &request).await {
                Ok(reply) => {
                    record_enqueue(&context, producer, &external_id, &reply, invoked_ms);
                    break;
                }
                Err(true) => return,
                Err(false) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    if rng.chance(context.workload.cancel_per_mille) {
        tokio::time::sleep(Duration::from_millis(rng.between(0, 1_500))).await;
        cancel(
            &context,
            &mut rng,
            &format!("producer-{producer}"),
            transaction,
        )
        .await;
    }
    let Some(result) = long_poll(&context, &mut rng, producer, transaction).await else {
        return;
    };
    if rng.chance(300) {
        reread_archived(&context, &mut rng, transaction, &result).await;
    }
}

/// One cancel of `transaction` (sent again through another node while unanswered, three times
/// at most); records every call.
async fn cancel(context: &Context, rng: &mut SeedRng, by: &str, transaction: u64) {
    for _ in 0..3 {
        if context.stopping() {
            return;
        }
        let invoked_ms = context.now_ms();
        let node = rng.between(1, context.nodes);
        let answer = match context
            .connect(node, context.workload.attempt_timeout)
            .await
        {
            Some(mut client) => client
                .cancel(v1::CancelRequest {
                    transaction_id: transaction,
                })
                .await
                .map(tonic::Response::into_inner)
                .ok(),
            None => None,
        };
        let outcome = answer.map(|reply| {
            match v1::CancelOutcome::try_from(reply.outcome).unwrap_or_default() {
                v1::CancelOutcome::Aborted => CancelSeen::Aborted,
                v1::CancelOutcome::Requested => CancelSeen::Requested,
                v1::CancelOutcome::AlreadyRequested => CancelSeen::AlreadyRequested,
                v1::CancelOutcome::Finished | v1::CancelOutcome::Unspecified => {
                    CancelSeen::Finished(status_text(reply.status))
                }
            }
        });
        let answered = outcome.is_some();
        let acknowledged_ms = answered.then(|| context.now_ms());
        tracing::info!(%by, transaction, ?outcome, "pipeline cancel");
        context.shared.with(|history| {
            history.cancels.push(CancelRecord {
                by: by.to_owned(),
                transaction,
                invoked_ms,
                acknowledged_ms,
                outcome,
            });
        });
        if answered {
            return;
        }
        tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
    }
}

/// A terminal status as the origin spells it.
fn status_text(status: i32) -> String {
    match v1::TxStatus::try_from(status).unwrap_or_default() {
        v1::TxStatus::Success => "success",
        v1::TxStatus::Failed => "failed",
        v1::TxStatus::Aborted => "aborted",
        v1::TxStatus::Timeout => "timeout",
        v1::TxStatus::InternalError => "internal-error",
        _ => "not-terminal",
    }
    .to_owned()
}

/// The switcher: every 0.8–2 s sets one of the switches to a value never set before (so every
/// answered call is a change), and now and then first cancels a recent sleeper.
async fn switch(context: Context) {
    context.wait_configured().await;
    let mut rng = SeedRng::new(context.seed, 990);
    let mut value = 0u64;
    while !context.stopping() {
        tokio::time::sleep(Duration::from_millis(rng.between(800, 2_000))).await;
        if context.stopping() || context.workload.switches == 0 {
            return;
        }
        if rng.chance(250) {
            let now_ms = context.now_ms();
            let recent: Vec<u64> = context.shared.with(|history| {
                history
                    .sleeps
                    .iter()
                    .filter(|sleep| sleep.acknowledged_ms + 1_500 > now_ms)
                    .map(|sleep| sleep.transaction)
                    .collect()
            });
            if !recent.is_empty() {
                let last = u64::try_from(recent.len() - 1).expect("a short list");
                let pick = recent[usize::try_from(rng.between(0, last)).expect("an index")];
                cancel(&context, &mut rng, "switcher", pick).await;
            }
        }
        value += 1;
        let name = switch_name(rng.between(0, u64::from(context.workload.switches) - 1));
        let invoked_ms = context.now_ms();
        let node = rng.between(1, context.nodes);
        let answer = match context
            .connect(node, context.workload.attempt_timeout)
            .await
        {
            Some(mut client) => client
                .set_switch(v1::SetSwitchRequest {
                    name: name.clone(),
                    value,
                })
                .await
                .map(tonic::Response::into_inner)
                .ok(),
            None => None,
        };
        let acknowledged_ms = answer.as_ref().map(|_| context.now_ms());
        tracing::info!(%name, value, woken = ?answer.as_ref().map(|reply| &reply.woken), "switch set");
        context.shared.with(|history| {
            history.switches.push(SwitchRecord {
                name,
                value,
                invoked_ms,
                acknowledged_ms,
                changed: answer.as_ref().map(|reply| reply.changed),
                woken: answer.map(|reply| reply.woken).unwrap_or_default(),
            });
        });
    }
}

/// The name of switch `index`.
fn switch_name(index: u64) -> String {
    format!("sim-switch-{index}")
}

fn record_enqueue(
    context: &Context,
    producer: u32,
    external_id: &str,
    reply: &v1::EnqueueReply,
    invoked_ms: u64,
) {
    let acknowledged_ms = context.now_ms();
    context.shared.with(|history| {
        history.enqueued.push(Enqueued {
            producer,
            external_id: external_id.to_owned(),
            transaction: reply.transaction_id,
            duplicate: reply.duplicate,
            invoked_ms,
            acknowledged_ms,
        });
    });
}

fn result_of(transaction: &v1::Transaction) -> TxResult {
    TxResult {
        status: transaction.status_text.clone(),
        state: transaction.state.clone(),
    }
}

/// Long-polls until the transaction has finished; records and returns its result.
async fn long_poll(
    context: &Context,
    rng: &mut SeedRng,
    producer: u32,
    transaction: u64,
) -> Option<TxResult> {
    let timeout =
        context.workload.attempt_timeout + Duration::from_millis(context.workload.poll_wait_ms);
    while !context.stopping() {
        context.shared.with(|history| history.poll_calls += 1);
        let node = rng.between(1, context.nodes);
        let mark_replied = rng.chance(300);
        let answer = match context.connect(node, timeout).await {
            Some(mut client) => client
                .get_state(v1::GetStateRequest {
                    transaction_id: transaction,
                    external_id: String::new(),
                    wait_ms: context.workload.poll_wait_ms,
                    after_seq: None,
                    mark_replied,
                })
                .await
                .map(tonic::Response::into_inner),
            None => Err(tonic::Status::unavailable("no connection")),
        };
        match answer {
            Ok(reply) => {
                let Some(seen) = reply.transaction else {
                    context.violation(format!(
                        "node {node} answered a long-poll of {transaction} without it"
                    ));
                    return None;
                };
                let finished = reply.outcome == i32::from(v1::WaitOutcome::Finished);
                // The outcome describes the transaction the reply carries (with `mark_replied`,
                // as `MarkReplied` left it).
                if finished != is_terminal(&seen.status_text) {
                    context.violation(format!(
                        "node {node}: transaction {transaction} has status {} but the long-poll \
                         outcome is {}",
                        seen.status_text, reply.outcome
                    ));
                }
                if is_terminal(&seen.status_text) {
                    let result = result_of(&seen);
                    let seen_ms = context.now_ms();
                    context.shared.with(|history| {
                        history.polled.push(Polled {
                            producer,
                            transaction,
                            result: result.clone(),
                            seen_ms,
                        });
                    });
                    return Some(result);
                }
            }
            Err(status) if status.code() == tonic::Code::NotFound => {
                context.violation(format!(
                    "node {node} does not know acknowledged transaction {transaction}: {}",
                    status.message()
                ));
                return None;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await,
        }
    }
    None
}

/// Reads a finished transaction again once it should be archived; its result must not change.
async fn reread_archived(context: &Context, rng: &mut SeedRng, transaction: u64, seen: &TxResult) {
    tokio::time::sleep(Duration::from_millis(
        context.timing.archive_delay_ms + 1_500,
    ))
    .await;
    for _ in 0..5 {
        if context.stopping() {
            return;
        }
        let node = rng.between(1, context.nodes);
        if let Some(mut client) = context
            .connect(node, context.workload.attempt_timeout)
            .await
            && let Ok(reply) = client
                .get_state(v1::GetStateRequest {
                    transaction_id: transaction,
                    ..v1::GetStateRequest::default()
                })
                .await
            && let Some(now) = reply.into_inner().transaction
        {
            if result_of(&now) != *seen {
                context.violation(format!(
                    "transaction {transaction} finished as {} {} but node {node} now answers \
                     {} {}{}",
                    seen.status,
                    seen.state,
                    now.status_text,
                    now.state,
                    if now.archived_at_ms > 0 {
                        " (archived)"
                    } else {
                        ""
                    }
                ));
            }
            if now.archived_at_ms > 0 {
                context.shared.with(|history| history.archived_reads += 1);
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

/// How a step call ended: accepted, refused (stale claim), or unknown.
fn step_answer<T>(answer: &Result<T, tonic::Status>) -> Option<bool> {
    match answer {
        Ok(_) => Some(true),
        Err(status) if status.code() == tonic::Code::FailedPrecondition => Some(false),
        Err(_) => None,
    }
}

/// A worker: dequeues from either node group, works each transaction, reports progress now and
/// then, hands some on, completes the rest — or crashes (a new incarnation comes back after a
/// pause), or stalls past the reaper's timeout before completing.
async fn work(index: u32, context: Context) {
    context.wait_configured().await;
    let mut rng = SeedRng::new(context.seed, 900 + u64::from(index));
    let mut incarnation = 0u64;
    let timeout = context.workload.attempt_timeout;
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
        let Some(mut client) = context.connect(node, timeout).await else {
            node = another_node(&mut rng, node, context.nodes);
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        };
        let taken = client
            .dequeue(v1::DequeueRequest {
                node_group: group.to_owned(),
                worker: worker.clone(),
                max: u32::try_from(rng.between(1, 2)).unwrap_or(1),
                wait_ms: 0,
            })
            .await
            .map(|reply| reply.into_inner().transactions);
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
            tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
            continue;
        }
        let granted_ms = context.now_ms();
        for tx in &taken {
            if tx.status_text != "running" || tx.worker != worker {
                context.violation(format!(
                    "node {node} handed {worker} transaction {} as {} for {}",
                    tx.id, tx.status_text, tx.worker
                ));
            }
        }
        context.shared.with(|history| {
            for tx in &taken {
                history.claims.push(ClaimRecord {
                    worker: worker.clone(),
                    transaction: tx.id,
                    token: tx.claim_token,
                    granted_ms,
                    started_machine_ms: tx.claim_started_at_ms,
                    deadline_machine_ms: tx.claim_deadline_ms,
                });
            }
        });
        for tx in taken {
            tokio::time::sleep(Duration::from_millis(rng.between(50, 300))).await;
            if rng.chance(context.workload.crash_per_mille) && context.faults_on() {
                tracing::info!(%worker, transaction = tx.id, "pipeline worker crashes mid-transaction");
                context.shared.with(|history| history.crashed += 1);
                incarnation += 1;
                tokio::time::sleep(Duration::from_millis(rng.between(500, 2_000))).await;
                break;
            }
            if rng.chance(context.workload.progress_per_mille) {
                let answer = client
                    .progress(v1::ProgressRequest {
                        transaction_id: tx.id,
                        claim_token: tx.claim_token,
                        report: r#"{"done":50}"#.to_owned(),
                    })
                    .await;
                if let Ok(reply) = answer {
                    let deadline = reply.into_inner().claim_deadline_ms;
                    context.shared.with(|history| {
                        if let Some(claim) = history.claims.iter_mut().rev().find(|claim| {
                            claim.transaction == tx.id && claim.token == tx.claim_token
                        }) {
                            claim.deadline_machine_ms = claim.deadline_machine_ms.max(deadline);
                        }
                    });
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
                continue;
            };
            let requeue = tx.node_group == FIRST_GROUP
                && state.hops == 0
                && rng.chance(context.workload.requeue_per_mille);
            let mut cancel_known = check_cancel(&context, &mut client, &worker, &tx).await;
            let mut plan = if cancel_known {
                Plan::Complete
            } else if requeue {
                Plan::Requeue
            } else if state.slept == 0 && rng.chance(context.workload.sleep_per_mille) {
                if rng.chance(context.workload.switch_sleep_per_mille) {
                    let switch =
                        switch_name(rng.between(0, u64::from(context.workload.switches) - 1));
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
            let first_sent_ms = context.now_ms();
            for _ in 0..4 {
                if context.stopping() {
                    break;
                }
                let sent_ms = context.now_ms();
                let (kind, answer, completed_as, slept_until) = match &plan {
                    Plan::Requeue => {
                        let answer = client
                            .requeue(v1::RequeueRequest {
                                transaction_id: tx.id,
                                claim_token: tx.claim_token,
                                route: Some(v1::requeue_request::Route::NodeGroup(
                                    SECOND_GROUP.to_owned(),
                                )),
                                queue: v1::QueueType::In.into(),
                                state: state_text(&state, state.hops + 1, state.slept),
                                event: r#"{"do":"more"}"#.to_owned(),
                            })
                            .await
                            .map(|_| ());
                        (StepKind::Requeue, answer, None, None)
                    }
                    Plan::Sleep { for_ms, switch } => {
                        let answer = client
                            .sleep(v1::SleepRequest {
                                transaction_id: tx.id,
                                claim_token: tx.claim_token,
                                switch: switch.clone().unwrap_or_default(),
                                queue: v1::QueueType::In.into(),
                                state: state_text(&state, state.hops, 1),
                                wake: Some(v1::sleep_request::Wake::ForMs(*for_ms)),
                            })
                            .await
                            .map(|reply| reply.into_inner().until_ms);
                        let until = answer.as_ref().ok().copied();
                        (StepKind::Sleep, answer.map(|_| ()), None, until)
                    }
                    Plan::Complete => {
                        let (status, result) = outcome_for(&state);
                        let status = if cancel_known {
                            v1::TxStatus::Aborted
                        } else {
                            status
                        };
                        let answer = client
                            .complete(v1::CompleteTransactionRequest {
                                transaction_id: tx.id,
                                claim_token: tx.claim_token,
                                status: status.into(),
                                state: result,
                            })
                            .await
                            .map(|_| ());
                        (
                            StepKind::Complete,
                            answer,
                            Some(status_text(status.into())),
                            None,
                        )
                    }
                };
                let accepted = step_answer(&answer);
                let refused_for_cancel = answer.as_ref().is_err_and(|status| {
                    status
                        .metadata()
                        .get("certus-error")
                        .is_some_and(|reason| reason == "cancel-requested")
                });
                context.shared.with(|history| {
                    history.steps.push(StepRecord {
                        worker: worker.clone(),
                        transaction: tx.id,
                        token: tx.claim_token,
                        kind,
                        sent_ms,
                        accepted,
                        status: completed_as,
                        cancel_known,
                    });
                    if let (Plan::Sleep { for_ms, switch }, Some(until_machine_ms)) =
                        (&plan, slept_until)
                    {
                        history.sleeps.push(SleepRecord {
                            worker: worker.clone(),
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
                if refused_for_cancel && kind != StepKind::Complete {
                    // A cancel was asked for: the only step left is to complete it as aborted.
                    cancel_known = true;
                    plan = Plan::Complete;
                    continue;
                }
                if accepted.is_some() {
                    break;
                }
                // No answer: the same step again, under the same token, through another node.
                tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
                node = another_node(&mut rng, node, context.nodes);
                if let Some(other) = context.connect(node, timeout).await {
                    client = other;
                }
            }
        }
    }
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
    client: &mut PipelinesClient<Channel>,
    worker: &str,
    tx: &v1::Transaction,
) -> bool {
    let sent_ms = context.now_ms();
    let Ok(reply) = client
        .progress(v1::ProgressRequest {
            transaction_id: tx.id,
            claim_token: tx.claim_token,
            report: r#"{"check":1}"#.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
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
        if let Some(claim) = history
            .claims
            .iter_mut()
            .rev()
            .find(|claim| claim.transaction == tx.id && claim.token == tx.claim_token)
        {
            claim.deadline_machine_ms = claim.deadline_machine_ms.max(reply.claim_deadline_ms);
        }
    });
    reply.cancel_requested
}
