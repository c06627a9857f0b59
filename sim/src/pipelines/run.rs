//! Transaction pipelines in a simulated run: the configuration (short reaper timeout, archive
//! delay and webhook backoff, so reaping, archiving and webhook retries happen within the run),
//! the workload, the webhook receivers and processors ([`webhooks`]), an observer of
//! when each transaction finishes, and the verdicts at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::pipelines::{NodeGroup, PipelineName, TransactionId, WebhookKind};
use certus_core::{Command, PipelineCommand, PipelineConfig, Response};
use certus_node::NodeConfig;
use certus_node::ordered_watch as watch;
use certus_proto::v1;
use certus_proto::v1::pipelines_client::PipelinesClient;
use madsim::runtime::Handle;
use serde::Serialize;

use super::checkers::{self, FinalTx, TxResult};
use super::webhook_checkers::{self, HookedTx, NoticeKind, NoticeRecord, WebhookReceived};
use super::webhooks::RunningWebhooks;
use super::workload::{
    FIRST_GROUP, PIPELINE, PipelineHistory, PipelineWorkload, RunningPipelines, Shared, Timing,
};
use crate::cluster::{SimCluster, elapsed_ms, endpoint};
use crate::judge::Verdict;
use crate::settle::settle;

/// How soon after the faults heal (or after its enqueue, if later) every transaction must end:
/// room for a sleep, a hand-on, and a few claims lost to workers that crashed or stalled before
/// the healing, or to answers lost on a link kept cut (each costs the reaper's timeout and
/// more).
pub const TERMINAL_BOUND_MS: u64 = 25_000;
/// Producers stop enqueuing this long after the faults heal, so the last transactions can end
/// within the bound before the run does.
const ENQUEUE_AFTER_HEAL_MS: u64 = 3_000;
/// How often the observer looks at the most advanced node.
const OBSERVE_EVERY: Duration = Duration::from_millis(100);
/// The slack on external-id windows for the machine clocks (skew and the stamp's delay).
const WINDOW_SLACK_MS: u64 = 1_000;
/// How long, after the workload stops, the pending webhook deliveries have to drain (every one
/// delivered or given up): enough for a whole retry schedule behind a URL pause.
const WEBHOOK_SETTLE_MS: u64 = 15_000;

/// The pipelines' configuration for the run: a short reaper timeout and archive delay, so both
/// happen within the run; a window that ends within the run too; a retention past its end, so
/// every archived transaction can still be read at the end.
pub fn pipeline_config() -> PipelineConfig {
    PipelineConfig {
        external_id_window_ms: 10_000,
        running_timeout_ms: 3_000,
        max_attempts: 5,
        archive_delay_ms: 2_000,
        archive_retention_ms: 600_000,
        webhook_backoff_base_ms: 250,
        webhook_backoff_cap_ms: 1_000,
        webhook_attempts_max: 5,
        url_failure_limit: 8,
        url_failure_window_ms: 2_000,
        url_pause_ms: 1_000,
        ..PipelineConfig::default()
    }
}

/// Node settings for a pipelines scenario: the node does not start a webhook processor of its
/// own (it would send over HTTP); the harness runs one on every node's machine with the
/// simulated sender ([`webhooks`]). Snapshots come often, so the pipelines' snapshot encoding
/// is exercised.
pub fn tune(config: &mut NodeConfig) {
    config.pipelines.webhooks = false;
    crate::scenarios::snapshot_often(config);
}

/// The pipelines part of a running simulation.
#[derive(Debug)]
pub struct PipelineRun {
    shared: Shared,
    started: tokio::time::Instant,
    workload: RunningPipelines,
    enqueue_until_ms: Arc<AtomicU64>,
    stop_observer: watch::Sender<bool>,
    observer: tokio::task::JoinHandle<()>,
    terminal_at: Arc<Mutex<BTreeMap<u64, (u64, TxResult)>>>,
    /// How far apart the nodes' clocks may be (skew and clock steps), for the time checks.
    clock_spread_ms: u64,
    webhooks: RunningWebhooks,
}

/// What the pipelines part of a run reports.
#[derive(Debug, Serialize)]
pub struct PipelineReport {
    /// What the producers and workers saw.
    pub history: PipelineHistory,
    /// When the observer first saw each transaction finished, and how.
    pub terminal_at: BTreeMap<u64, (u64, TxResult)>,
    /// Every request the webhook receivers read.
    pub webhooks_received: Vec<WebhookReceived>,
    /// The administrator notices listed at the end.
    pub notices: Vec<NoticeRecord>,
    /// The transactions enqueued with a webhook, as the end found them.
    pub hooked: BTreeMap<u64, HookedTx>,
    /// The receiver that failed through the whole run, if any.
    pub receiver_failing_for_good: Option<u32>,
}

/// Configures the pipelines through Raft, then starts the workload (which waits for the
/// configuration) and the observer. The webhook processor is configured for `max_skew_ms`,
/// the clock error an operator would set; the checks allow `clock_spread_ms`, which also
/// covers clocks stepped past that.
pub fn start(
    cluster: &Arc<SimCluster>,
    workload: &PipelineWorkload,
    seed: u64,
    max_skew_ms: u64,
    clock_spread_ms: u64,
    started: tokio::time::Instant,
) -> PipelineRun {
    let nodes = cluster.ids().len() as u64;
    let configured = Arc::new(AtomicBool::new(false));
    tokio::spawn(configure(Arc::clone(cluster), Arc::clone(&configured)));
    let shared = Shared::default();
    let enqueue_until_ms = Arc::new(AtomicU64::new(u64::MAX));
    let config = pipeline_config();
    let running = super::workload::start(
        workload,
        Timing {
            running_timeout_ms: config.running_timeout_ms,
            archive_delay_ms: config.archive_delay_ms,
        },
        nodes,
        seed,
        shared.clone(),
        configured,
        Arc::clone(&enqueue_until_ms),
        started,
    );
    let terminal_at: Arc<Mutex<BTreeMap<u64, (u64, TxResult)>>> = Arc::default();
    let (stop_observer, stopped) = watch::channel(false);
    let webhooks = super::webhooks::start(cluster, workload.receivers, seed, max_skew_ms, started);
    let observer = tokio::spawn(observe(
        Arc::clone(cluster),
        shared.clone(),
        Arc::clone(&terminal_at),
        stopped,
        started,
    ));
    PipelineRun {
        shared,
        started,
        workload: running,
        enqueue_until_ms,
        stop_observer,
        observer,
        terminal_at,
        clock_spread_ms,
        webhooks,
    }
}

/// Sets the configuration and defines the pipeline through any node, retrying until applied.
async fn configure(cluster: Arc<SimCluster>, configured: Arc<AtomicBool>) {
    let commands = vec![
        Command::Pipeline(PipelineCommand::Configure(pipeline_config())),
        Command::Pipeline(PipelineCommand::Define {
            name: PipelineName::new(PIPELINE).expect("a valid pipeline name"),
            node_group: NodeGroup::new(FIRST_GROUP).expect("a valid node group"),
        }),
    ];
    for attempt in 0u64.. {
        let via = attempt % cluster.ids().len() as u64 + 1;
        if let Ok(responses) = cluster.write(via, commands.clone()).await
            && responses.len() == 2
            && responses
                .iter()
                .all(|response| matches!(response, Response::Pipeline(Ok(_))))
        {
            tracing::info!("pipelines configured");
            configured.store(true, Ordering::SeqCst);
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The acknowledged transactions as `state` holds them.
fn read_transactions(state: &certus_core::State, ids: &BTreeSet<u64>) -> BTreeMap<u64, FinalTx> {
    let reads = state.pipelines();
    ids.iter()
        .filter_map(|id| {
            reads.transaction(TransactionId(*id)).map(|tx| {
                (
                    *id,
                    FinalTx {
                        result: TxResult {
                            status: tx.status().to_string(),
                            state: tx.state.as_str().to_owned(),
                        },
                        terminal: tx.status().is_terminal(),
                        archived: tx.archived_at_ms().is_some(),
                    },
                )
            })
        })
        .collect()
}

fn acknowledged(shared: &Shared) -> BTreeSet<u64> {
    shared.with(|history| {
        history
            .enqueued
            .iter()
            .map(|enqueue| enqueue.transaction)
            .collect()
    })
}

/// Every [`OBSERVE_EVERY`], on the node that has applied the most, records when each
/// acknowledged transaction is first seen finished, and how.
async fn observe(
    cluster: Arc<SimCluster>,
    shared: Shared,
    terminal_at: Arc<Mutex<BTreeMap<u64, (u64, TxResult)>>>,
    stopped: watch::Receiver<bool>,
    started: tokio::time::Instant,
) {
    while !*stopped.borrow() {
        let now_ms = elapsed_ms(started);
        if let Some(replica) = freshest(&cluster) {
            let pending: BTreeSet<u64> = {
                let seen = terminal_at.lock().expect("terminal transactions");
                acknowledged(&shared)
                    .into_iter()
                    .filter(|id| !seen.contains_key(id))
                    .collect()
            };
            let finished = replica
                .reader
                .read(|applied| read_transactions(&applied.state, &pending));
            let mut seen = terminal_at.lock().expect("terminal transactions");
            for (id, tx) in finished.into_iter().filter(|(_, tx)| tx.terminal) {
                seen.entry(id).or_insert((now_ms, tx.result));
            }
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}

impl PipelineRun {
    /// The faults healed at `heal_ms`: producers stop enqueuing a little later, so the last
    /// transactions can end within the bound.
    pub fn healed(&self, heal_ms: u64) {
        self.enqueue_until_ms
            .store(heal_ms + ENQUEUE_AFTER_HEAL_MS, Ordering::SeqCst);
        self.webhooks.healed();
    }

    /// Waits (up to the bound) for every acknowledged transaction to finish, stops the
    /// workload and judges the run.
    pub async fn finish(
        self,
        cluster: &SimCluster,
        heal_ms: u64,
    ) -> (Vec<Verdict>, PipelineReport) {
        self.enqueue_until_ms.store(0, Ordering::SeqCst);
        let due_ms = heal_ms + ENQUEUE_AFTER_HEAL_MS + TERMINAL_BOUND_MS;
        loop {
            let ids = acknowledged(&self.shared);
            let all_ended = {
                let seen = self.terminal_at.lock().expect("terminal transactions");
                ids.iter().all(|id| seen.contains_key(id))
            };
            if all_ended || elapsed_ms(self.started) >= due_ms {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.workload.stop().await;
        tokio::time::sleep(OBSERVE_EVERY * 3).await;
        let _ = self.stop_observer.send(true);
        let _ = self.observer.await;
        let end_ms = elapsed_ms(self.started);
        let terminal_at = std::mem::take(&mut *self.terminal_at.lock().expect("terminal"));
        let history = self.shared.with(|history| history.clone());
        let drained = drain_webhooks(cluster).await;
        let receiver_failing_for_good = self.webhooks.failing_for_good();
        let webhooks_received = self.webhooks.stop().await;
        let notices = list_notices(cluster.ids().len() as u64).await;
        let hooked = read_hooked(cluster, &history.webhooks);
        let ids = acknowledged(&self.shared);
        let finals = settle(cluster, |state| read_transactions(state, &ids))
            .await
            .finals;
        let window_ms = pipeline_config().external_id_window_ms;
        let verdicts = vec![
            checkers::enqueues_durable(&history.enqueued, &finals),
            checkers::external_ids_once(
                &history.enqueued,
                window_ms,
                self.clock_spread_ms + WINDOW_SLACK_MS,
            ),
            checkers::transactions_terminal(
                &history.enqueued,
                &terminal_at,
                heal_ms,
                TERMINAL_BOUND_MS,
                end_ms,
            ),
            checkers::steps_from_current_claim(&history.claims, &history.steps),
            checkers::archive_faithful(&history.polled, &terminal_at, &finals),
            checkers::long_poll_final(&history.polled, &finals),
            checkers::cancels_honoured(
                &history.cancels,
                &history.steps,
                &history.progress,
                &terminal_at,
            ),
            checkers::sleepers_woken(
                &history.sleeps,
                &history.switches,
                &history.cancels,
                &history.claims,
                &terminal_at,
                self.clock_spread_ms + WINDOW_SLACK_MS,
            ),
            match &notices {
                Some(notices) => {
                    let mut verdict =
                        webhook_checkers::webhooks_delivered(&hooked, &webhooks_received, notices);
                    if !drained {
                        verdict.detail.push_str(&format!(
                            " (deliveries still pending {WEBHOOK_SETTLE_MS} ms after the \
                             workload stopped)"
                        ));
                    }
                    verdict
                }
                None => Verdict::fail(
                    "webhooks-delivered",
                    "no node answered ListNotices at the end".to_owned(),
                ),
            },
            webhook_checkers::webhook_event_ids(&webhooks_received),
            clients_saw_no_violation(&history),
        ];
        (
            verdicts,
            PipelineReport {
                history,
                terminal_at,
                webhooks_received,
                notices: notices.unwrap_or_default(),
                hooked,
                receiver_failing_for_good,
            },
        )
    }
}

fn clients_saw_no_violation(history: &PipelineHistory) -> Verdict {
    let mut paths = history.paths.clone();
    paths.sort();
    let detail = format!(
        "{} enqueue calls ({} batches), {} acknowledged ({} as batch items, {} with a webhook), \
         {} long-polls, {} results seen; {} claims ({} pushed on {} Work streams opened, {} \
         crashed on, {} stalled), {} dequeue waits, {} steps ({} CompleteBatch calls; {} calls on \
         streams, progress reports included), {} sleeps; {} cancel calls, {} switch sets; {} results re-read archived; {}",
        history.enqueue_calls,
        history.enqueue_batch_calls,
        history.enqueued.len(),
        history.batched_enqueues,
        history.webhooks.len(),
        history.poll_calls,
        history.polled.len(),
        history.claims.len(),
        history.stream_claims,
        history.streams_opened,
        history.crashed,
        history.stalled,
        history.dequeue_waits,
        history.steps.len(),
        history.complete_batch_calls,
        history.stream_steps,
        history.sleeps.len(),
        history.cancels.len(),
        history.switches.len(),
        history.archived_reads,
        paths.join("; ")
    );
    Verdict::of_violations("pipeline-clients", &history.violations, detail)
}

/// The running node that has applied the most.
fn freshest(cluster: &SimCluster) -> Option<Arc<certus_node::Replica>> {
    cluster
        .replicas()
        .into_iter()
        .max_by_key(|(_, replica)| {
            replica
                .raft
                .metrics()
                .borrow()
                .last_applied
                .map_or(0, |log_id| log_id.index)
        })
        .map(|(_, replica)| replica)
}

/// Waits (up to [`WEBHOOK_SETTLE_MS`]) until the most advanced node holds no pending webhook
/// delivery; whether it came to that.
async fn drain_webhooks(cluster: &SimCluster) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WEBHOOK_SETTLE_MS);
    while tokio::time::Instant::now() < deadline {
        let pending = freshest(cluster).map(|replica| {
            replica
                .reader
                .read(|applied| applied.state.pipelines().webhooks_pending())
        });
        if pending == Some(0) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Every administrator notice, through `ListNotices` from a machine of its own (10.0.8.2),
/// asking each node in turn until one answers every page; `None` if none did.
async fn list_notices(nodes: u64) -> Option<Vec<NoticeRecord>> {
    let machine = Handle::current()
        .create_node()
        .name("pipeline-admin")
        .ip(std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 8, 2)))
        .build();
    machine
        .spawn(async move {
            for round in 0..3 {
                for node in 1..=nodes {
                    if let Some(notices) = list_notices_from(node).await {
                        return Some(notices);
                    }
                }
                tracing::info!(round, "no node listed the notices");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            None
        })
        .await
        .ok()
        .flatten()
}

async fn list_notices_from(node: u64) -> Option<Vec<NoticeRecord>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", endpoint(node)))
        .expect("a valid endpoint")
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .ok()?;
    let mut client = PipelinesClient::new(channel);
    let mut notices = Vec::new();
    let mut after = 0;
    loop {
        let page = client
            .list_notices(v1::ListNoticesRequest { after, limit: 0 })
            .await
            .ok()?
            .into_inner();
        notices.extend(page.notices.into_iter().filter_map(notice_record));
        if page.next_after == 0 {
            return Some(notices);
        }
        after = page.next_after;
    }
}

fn notice_record(notice: v1::Notice) -> Option<NoticeRecord> {
    use v1::notice::Kind;
    let kind = match notice.kind? {
        Kind::RetriesExhausted(exhausted) => NoticeKind::RetriesExhausted {
            event: exhausted.event_id,
            transaction: exhausted.transaction_id,
            url: exhausted.url,
        },
        Kind::UrlPaused(paused) => NoticeKind::UrlPaused { url: paused.url },
        Kind::WebhookDropped(dropped) => NoticeKind::WebhookDropped {
            transaction: dropped.transaction_id,
            url: dropped.url,
        },
    };
    Some(NoticeRecord {
        id: notice.id,
        at_machine_ms: notice.at_ms,
        kind,
    })
}

/// The transactions enqueued with a webhook as the most advanced node holds them: finished or
/// not, when, and the completion delivery still pending.
fn read_hooked(cluster: &SimCluster, urls: &BTreeMap<u64, String>) -> BTreeMap<u64, HookedTx> {
    let Some(replica) = freshest(cluster) else {
        return BTreeMap::new();
    };
    replica.reader.read(|applied| {
        let reads = applied.state.pipelines();
        urls.iter()
            .map(|(id, url)| {
                let tx = reads
                    .transaction(TransactionId(*id))
                    .filter(|tx| tx.status().is_terminal());
                let pending_event = reads
                    .webhook_for(TransactionId(*id))
                    .filter(|hook| matches!(hook.kind, WebhookKind::Completed { .. }))
                    .map(|hook| hook.event.0);
                (
                    *id,
                    HookedTx {
                        url: url.clone(),
                        final_status: tx.map(|tx| tx.status().to_string()),
                        completed_at_machine_ms: tx.and_then(|tx| tx.completed_at_ms()),
                        pending_event,
                    },
                )
            })
            .collect()
    })
}
