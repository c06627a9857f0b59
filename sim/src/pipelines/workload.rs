//! The pipelines workload: its shape, what it records, and the machines it runs on —
//! producers ([`producers`](super::producers)) that enqueue transactions with external ids, one
//! by one or in batches, and long-poll for their results; workers
//! ([`workers`](super::workers), [`work_stream`](super::work_stream)) that take them by polling
//! `Dequeue`, by long-polling it or on the `Work` stream, and complete them one by one or in
//! batches; and a switcher that changes the switches sleepers wait on (and cancels a sleeper now
//! and then). Every call is one gRPC attempt (`certus_proto::v1::PipelinesClient`), so the
//! record says exactly what each call did.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_node::ordered_watch as watch;
use certus_proto::v1;
use certus_proto::v1::pipelines_client::PipelinesClient;
use madsim::runtime::Handle;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use super::checkers::{
    CancelRecord, CancelSeen, ClaimRecord, Enqueued, Polled, ProgressRecord, SleepRecord,
    StepRecord, SwitchRecord,
};
use super::producers::produce;
use super::workers::work;
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
    /// Per mille of producers that enqueue in batches (`EnqueueBatch`); the rest one by one.
    pub batch_producer_per_mille: u64,
    /// The most items in one enqueue batch (each batch has 2 to this many).
    pub batch_items_max: u64,
    /// Per mille of enqueue batches that carry one of their items twice (the copy is answered
    /// as a duplicate of the first).
    pub batch_repeat_per_mille: u64,
    /// How long a long-polling worker's `Dequeue` waits for work, at least and at most.
    pub dequeue_wait_ms: (u64, u64),
    /// The most credit a stream worker grants per node group (it grants 1 to this many).
    pub stream_credit_max: u64,
    /// A stream worker that has credit and hears nothing on its stream this long (drawn
    /// between the two) takes it for cut off and opens a new one on another node.
    pub stream_idle_ms: (u64, u64),
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
            batch_producer_per_mille: 333,
            batch_items_max: 8,
            batch_repeat_per_mille: 100,
            dequeue_wait_ms: (200, 1_000),
            stream_credit_max: 4,
            stream_idle_ms: (2_000, 5_000),
        }
    }
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
    /// How each producer and worker talks to the cluster in this run (drawn from the seed).
    pub paths: Vec<String>,
    /// `EnqueueBatch` calls made, answered or not (also counted in `enqueue_calls`).
    pub enqueue_batch_calls: u64,
    /// Acknowledged enqueues answered as an item of a batch.
    pub batched_enqueues: u64,
    /// `Dequeue` calls with a wait (long-polls) made.
    pub dequeue_waits: u64,
    /// `CompleteBatch` calls made, answered or not.
    pub complete_batch_calls: u64,
    /// `Work` streams a worker tried to open.
    pub streams_opened: u64,
    /// Claims pushed on a `Work` stream (also in `claims`).
    pub stream_claims: u64,
    /// Steps sent on a `Work` stream (also in `steps`, with their answers).
    pub stream_steps: u64,
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

/// What every producer, worker and the switcher share: the run's shape and record.
#[derive(Clone)]
pub(super) struct Context {
    pub(super) nodes: u64,
    pub(super) workload: PipelineWorkload,
    pub(super) timing: Timing,
    started: tokio::time::Instant,
    pub(super) stopped: watch::Receiver<bool>,
    /// Nothing starts before the configuration is applied (the default timeouts are minutes).
    configured: Arc<AtomicBool>,
    /// Producers enqueue until this simulated ms.
    pub(super) enqueue_until_ms: Arc<AtomicU64>,
    pub(super) shared: Shared,
    pub(super) seed: u64,
}

impl Context {
    pub(super) fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    pub(super) fn now_ms(&self) -> u64 {
        elapsed_ms(self.started)
    }

    /// Whether the run's faults are still on: workers crash and stall only then, like the
    /// network and the nodes. The harness learns of the healing when it sets the end of
    /// enqueuing (until then `u64::MAX`).
    pub(super) fn faults_on(&self) -> bool {
        self.enqueue_until_ms.load(Ordering::SeqCst) == u64::MAX
    }

    pub(super) async fn connect(
        &self,
        node: u64,
        timeout: Duration,
    ) -> Option<PipelinesClient<Channel>> {
        let channel = Endpoint::from_shared(format!("http://{}", endpoint(node)))
            .expect("a valid endpoint")
            .connect_timeout(Duration::from_millis(500))
            .timeout(timeout)
            .connect()
            .await
            .ok()?;
        Some(PipelinesClient::new(channel))
    }

    pub(super) fn violation(&self, what: String) {
        tracing::error!(violation = %what, "pipelines client saw a violation");
        self.shared.with(|history| history.violations.push(what));
    }

    pub(super) async fn wait_configured(&self) {
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

/// One cancel of `transaction` (sent again through another node while unanswered, three times
/// at most); records every call.
pub(super) async fn cancel(context: &Context, rng: &mut SeedRng, by: &str, transaction: u64) {
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
pub(super) fn status_text(status: i32) -> String {
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
pub(super) fn switch_name(index: u64) -> String {
    format!("sim-switch-{index}")
}
