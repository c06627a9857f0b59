//! Properties of transaction pipelines over random runs, against a small reference model.
//!
//! Producers enqueue (with and without external ids, through pipelines and straight to node
//! groups, with and without webhooks); workers dequeue, complete (rightly, with non-terminal
//! statuses and with stale tokens), retry steps whose answers they "lost", requeue, report
//! progress and sleep; clients cancel and long-poll; an operator defines, moves and deletes
//! pipelines, sets switches and reconfigures; a webhook processor takes deliveries and reports
//! results (some stale); the leader ticks; replicas restart from snapshots; and time moves,
//! sometimes backwards on the proposer's clock.
//!
//! The model predicts every queue's contents in order, so after every command it checks: dequeue
//! serves admin, then out, then in, first in first out within each; no transaction is in two
//! queues, and every counter (per node group, per status) equals what the queues and the
//! transactions hold; a transaction is in exactly one place; an external id is never accepted
//! twice within its window; a retried step gets the identical answer; the reaper and the wake-ups
//! take exactly what is due; every finished transaction with a webhook keeps one event id across
//! all attempts and is delivered, cancelled by a long-poll or reported to the administrator; a
//! refused (or retried, or otherwise no-op) command leaves exactly the bytes a tick at the same
//! stamp would have; and a snapshot restores an equal state. Producers also enqueue in batches
//! and workers complete in batches: each item is answered as its own command would have been,
//! in order, so the model checks a batch item by item.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use certus_core::limits::LIST_PAGE_MAX;
use certus_core::pipelines::{
    CancelOutcome, ExternalId, JsonDocument, NewTransaction, NodeGroup, NoticeId, NoticeKind,
    Owner, PipelineName, QueueType, Route, SwitchName, Transaction, TransactionId, TxCompletion,
    TxMetadata, TxStatus, Webhook, WebhookEventId, WebhookKind, WebhookOutcome, WebhookSettlement,
    WebhookUrl,
};
use certus_core::{
    Command, PipelineCommand, PipelineConfig, PipelineError, PipelineReply, Reason, Response,
    Stamp, State, WorkerId, apply,
};
use proptest::prelude::*;
use proptest::sample::Index;

const T0: u64 = 1_700_000_000_000;
const WORKERS: usize = 3;
const PIPELINES: [&str; 3] = ["p1", "p2", "undefined"];
const GROUPS: [&str; 3] = ["g1", "g2", "g3"];
const SWITCHES: [&str; 2] = ["s1", "s2"];
const URLS: [&str; 2] = ["https://a.example/hook", "https://b.example/hook"];
/// The dequeue order, written out here rather than taken from the code under test.
const DEQUEUE_ORDER: [QueueType; 3] = [QueueType::Admin, QueueType::Out, QueueType::In];
const TERMINAL: [TxStatus; 5] = [
    TxStatus::Success,
    TxStatus::Failed,
    TxStatus::Aborted,
    TxStatus::Timeout,
    TxStatus::InternalError,
];

fn pipeline(i: usize) -> PipelineName {
    PipelineName::new(PIPELINES[i]).unwrap()
}
fn group(i: usize) -> NodeGroup {
    NodeGroup::new(GROUPS[i]).unwrap()
}
fn switch(i: usize) -> SwitchName {
    SwitchName::new(SWITCHES[i]).unwrap()
}
fn worker(i: usize) -> WorkerId {
    WorkerId::new(format!("w-{i}")).unwrap()
}
fn json(s: &str) -> JsonDocument {
    JsonDocument::new(s).unwrap()
}

#[derive(Clone, Debug)]
enum Target {
    Pipeline(usize),
    Group(usize),
}

#[derive(Clone, Debug)]
enum Action {
    Enqueue {
        external_id: Option<u8>,
        target: Target,
        queue: QueueType,
        webhook: Option<usize>,
        progress_reports: bool,
        cancel_on_longpoll: bool,
    },
    Dequeue {
        worker: usize,
        group: usize,
        max: u32,
    },
    Complete {
        worker: usize,
        pick: Index,
        status: TxStatus,
        stale: bool,
    },
    /// Several `Enqueue`s (each an [`Action::Enqueue`]) in one command.
    EnqueueBatch {
        items: Vec<Action>,
    },
    /// Several completions by one worker in one command: which claim, with what status, and
    /// whether with a stale token.
    CompleteBatch {
        worker: usize,
        items: Vec<(Index, TxStatus, bool)>,
    },
    /// Send the worker's last accepted step again (its answer was lost).
    Retry {
        worker: usize,
    },
    Requeue {
        worker: usize,
        pick: Index,
        target: Option<Target>,
        queue: QueueType,
    },
    Progress {
        worker: usize,
        pick: Index,
    },
    Sleep {
        worker: usize,
        pick: Index,
        for_ms: u64,
        switch: Option<usize>,
        queue: QueueType,
    },
    SetSwitch {
        switch: usize,
        value: u64,
    },
    Cancel {
        pick: Index,
    },
    MarkReplied {
        pick: Index,
    },
    Define {
        pipeline: usize,
        group: usize,
    },
    Delete {
        pipeline: usize,
    },
    TakeWebhooks {
        max: u32,
    },
    WebhookResult {
        pick: Index,
        delivered: bool,
        stale: bool,
    },
    AcknowledgeNotices,
    Tick,
    Configure(PipelineConfig),
    RoundTrip,
}

fn queue_type() -> impl Strategy<Value = QueueType> {
    prop::sample::select(QueueType::PRIORITY.to_vec())
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        6 => (0usize..2).prop_map(Target::Pipeline),
        1 => Just(Target::Pipeline(2)),
        2 => (0usize..3).prop_map(Target::Group),
    ]
}

fn config() -> impl Strategy<Value = PipelineConfig> {
    (
        (
            1_000u64..40_000,
            1_000u64..20_000,
            1u32..4,
            prop_oneof![Just(0u64), 1_000u64..20_000],
            prop_oneof![Just(0u64), 1_000u64..60_000],
            prop_oneof![4 => Just(100_000u64), 1 => 3u64..15],
        ),
        (
            100u64..2_000,
            1u32..4,
            1u32..4,
            1_000u64..20_000,
            1_000u64..20_000,
        ),
    )
        .prop_map(
            |(
                (window_ms, running_ms, max_attempts, archive_delay_ms, retention_ms, tx_max),
                (backoff_ms, attempts, url_limit, url_window_ms, pause_ms),
            )| PipelineConfig {
                external_id_window_ms: window_ms,
                running_timeout_ms: running_ms,
                max_attempts,
                archive_delay_ms,
                archive_retention_ms: retention_ms,
                transactions_max: tx_max,
                webhook_backoff_base_ms: backoff_ms,
                webhook_backoff_cap_ms: backoff_ms * 4,
                webhook_attempts_max: attempts,
                url_failure_limit: url_limit,
                url_failure_window_ms: url_window_ms,
                url_pause_ms: pause_ms,
            },
        )
}

fn status() -> impl Strategy<Value = TxStatus> {
    prop_oneof![
        8 => prop::sample::select(TERMINAL.to_vec()),
        1 => prop::sample::select(vec![TxStatus::Queued, TxStatus::Running, TxStatus::Sleeping]),
    ]
}

fn enqueue() -> impl Strategy<Value = Action> {
    (
        prop::option::weighted(0.5, 0u8..4),
        target(),
        queue_type(),
        prop::option::weighted(0.4, 0usize..2),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(external_id, target, queue, webhook, progress_reports, cancel_on_longpoll)| {
                Action::Enqueue {
                    external_id,
                    target,
                    queue,
                    webhook,
                    progress_reports,
                    cancel_on_longpoll,
                }
            },
        )
}

fn action() -> impl Strategy<Value = Action> {
    let worker = 0..WORKERS;
    let status = status();
    prop_oneof![
        8 => enqueue(),
        2 => prop::collection::vec(enqueue(), 1..6).prop_map(|items| Action::EnqueueBatch { items }),
        2 => (
            worker.clone(),
            prop::collection::vec((any::<Index>(), self::status(), prop::bool::weighted(0.15)), 1..6),
        )
            .prop_map(|(worker, items)| Action::CompleteBatch { worker, items }),
        6 => (worker.clone(), prop_oneof![4 => 0usize..2, 1 => Just(2usize)], 1u32..4)
            .prop_map(|(worker, group, max)| Action::Dequeue { worker, group, max }),
        8 => (worker.clone(), any::<Index>(), status, prop::bool::weighted(0.1))
            .prop_map(|(worker, pick, status, stale)| Action::Complete { worker, pick, status, stale }),
        2 => worker.clone().prop_map(|worker| Action::Retry { worker }),
        3 => (worker.clone(), any::<Index>(), prop::option::weighted(0.5, target()), queue_type())
            .prop_map(|(worker, pick, target, queue)| Action::Requeue { worker, pick, target, queue }),
        2 => (worker.clone(), any::<Index>()).prop_map(|(worker, pick)| Action::Progress { worker, pick }),
        2 => (worker, any::<Index>(), 0u64..20_000, prop::option::weighted(0.5, 0usize..2), queue_type())
            .prop_map(|(worker, pick, for_ms, switch, queue)| Action::Sleep { worker, pick, for_ms, switch, queue }),
        1 => (0usize..2, 0u64..3).prop_map(|(switch, value)| Action::SetSwitch { switch, value }),
        2 => any::<Index>().prop_map(|pick| Action::Cancel { pick }),
        2 => any::<Index>().prop_map(|pick| Action::MarkReplied { pick }),
        1 => (0usize..3, 0usize..3).prop_map(|(pipeline, group)| Action::Define { pipeline, group }),
        1 => (0usize..3).prop_map(|pipeline| Action::Delete { pipeline }),
        3 => (1u32..4).prop_map(|max| Action::TakeWebhooks { max }),
        4 => (any::<Index>(), prop::bool::weighted(0.4), prop::bool::weighted(0.15))
            .prop_map(|(pick, delivered, stale)| Action::WebhookResult { pick, delivered, stale }),
        1 => Just(Action::AcknowledgeNotices),
        4 => Just(Action::Tick),
        1 => config().prop_map(Action::Configure),
        1 => Just(Action::RoundTrip),
    ]
}

/// One step: what happens, how far the proposer's clock moves, and how the log index moves.
fn steps() -> impl Strategy<Value = (PipelineConfig, Vec<(Action, i64, u64)>)> {
    let clock = prop_oneof![
        16 => 0i64..2_000,
        3 => 2_000i64..15_000,
        1 => 15_000i64..120_000,
        1 => -5_000i64..0,
    ];
    let index = prop_oneof![6 => Just(1u64), 1 => Just(0), 1 => 2u64..4];
    (
        config(),
        prop::collection::vec((action(), clock, index), 1..150),
    )
}

/// Where the model says a transaction is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    Queued(NodeGroup, QueueType),
    Running {
        token: u64,
        deadline_ms: u64,
        queue: QueueType,
        cancel: bool,
    },
    Sleeping {
        until_ms: u64,
        switch: Option<SwitchName>,
        queue: QueueType,
    },
    Finished {
        status: TxStatus,
        at_ms: u64,
    },
    Archived {
        status: TxStatus,
        at_ms: u64,
    },
}

impl Place {
    fn status(&self) -> TxStatus {
        match self {
            Place::Queued(..) => TxStatus::Queued,
            Place::Running { .. } => TxStatus::Running,
            Place::Sleeping { .. } => TxStatus::Sleeping,
            Place::Finished { status, .. } | Place::Archived { status, .. } => *status,
        }
    }

    fn in_play(&self) -> bool {
        !self.status().is_terminal()
    }
}

#[derive(Clone, Debug)]
struct ModelTx {
    place: Place,
    node_group: NodeGroup,
    pipeline: Option<PipelineName>,
    attempts: u32,
    last_step: Option<(u64, PipelineReply)>,
    webhook: bool,
    cancel_on_longpoll: bool,
}

/// What the model expects of a command holding a claim token.
enum Expect {
    Retry(PipelineReply),
    Current,
    Stale,
}

#[derive(Default)]
struct Model {
    config: PipelineConfig,
    clock_ms: u64,
    definitions: BTreeMap<PipelineName, NodeGroup>,
    txs: BTreeMap<TransactionId, ModelTx>,
    deleted: BTreeSet<TransactionId>,
    queues: BTreeMap<(NodeGroup, QueueType), VecDeque<TransactionId>>,
    external_ids: BTreeMap<ExternalId, (TransactionId, u64)>,
    switches: BTreeMap<SwitchName, u64>,
    last_id: u64,
    last_token: u64,
    /// Every claim each worker was given: (transaction, token).
    held: Vec<Vec<(TransactionId, u64)>>,
    /// Each worker's last accepted step and its answer.
    last_step: Vec<Option<(PipelineCommand, PipelineReply)>>,
    /// The completion event of each finished transaction with a webhook.
    completion_events: BTreeMap<TransactionId, WebhookEventId>,
    /// Events delivered, cancelled by a long-poll, or reported to the administrator.
    settled: BTreeSet<WebhookEventId>,
    /// Deliveries as the processor was handed them.
    taken: Vec<Webhook>,
    last_notice_seen: u64,
}

impl Model {
    fn new(config: PipelineConfig) -> Model {
        Model {
            config,
            definitions: BTreeMap::from([(pipeline(0), group(0)), (pipeline(1), group(1))]),
            held: vec![Vec::new(); WORKERS],
            last_step: vec![None; WORKERS],
            ..Model::default()
        }
    }

    fn push(&mut self, id: TransactionId, node_group: &NodeGroup, queue: QueueType) {
        self.queues
            .entry((node_group.clone(), queue))
            .or_default()
            .push_back(id);
        let tx = self.txs.get_mut(&id).unwrap();
        tx.place = Place::Queued(node_group.clone(), queue);
        tx.node_group = node_group.clone();
    }

    fn unqueue(&mut self, id: TransactionId) {
        let Place::Queued(node_group, queue) = self.txs[&id].place.clone() else {
            panic!("{id} is not queued");
        };
        let entries = self.queues.get_mut(&(node_group, queue)).unwrap();
        entries.retain(|&queued| queued != id);
    }

    fn finish(&mut self, id: TransactionId, status: TxStatus) {
        let clock_ms = self.clock_ms;
        if matches!(self.txs[&id].place, Place::Queued(..)) {
            self.unqueue(id);
        }
        self.txs.get_mut(&id).unwrap().place = Place::Finished {
            status,
            at_ms: clock_ms,
        };
    }

    fn expect_held(&self, id: TransactionId, token: u64) -> Expect {
        let Some(tx) = self.txs.get(&id) else {
            return Expect::Stale;
        };
        if let Some((step_token, reply)) = &tx.last_step
            && *step_token == token
        {
            return Expect::Retry(reply.clone());
        }
        match tx.place {
            Place::Running { token: current, .. } if current == token => Expect::Current,
            _ => Expect::Stale,
        }
    }

    /// One of the worker's claims: mostly one it still holds, sometimes any it ever had.
    fn pick_held(&self, worker: usize, pick: &Index) -> Option<(TransactionId, u64)> {
        let held = &self.held[worker];
        let current: Vec<(TransactionId, u64)> = held
            .iter()
            .copied()
            .filter(|(id, token)| {
                matches!(self.txs.get(id).map(|tx| &tx.place),
                    Some(Place::Running { token: t, .. }) if t == token)
            })
            .collect();
        if !current.is_empty() && pick.index(10) < 8 {
            Some(current[pick.index(current.len())])
        } else if held.is_empty() {
            None
        } else {
            Some(held[pick.index(held.len())])
        }
    }

    /// Any transaction ever enqueued, deleted ones included.
    fn pick_any(&self, pick: &Index) -> Option<TransactionId> {
        let all: Vec<TransactionId> = self.txs.keys().chain(&self.deleted).copied().collect();
        (!all.is_empty()).then(|| all[pick.index(all.len())])
    }

    fn in_play_of(&self, name: &PipelineName) -> usize {
        self.txs
            .values()
            .filter(|tx| tx.pipeline.as_ref() == Some(name) && tx.place.in_play())
            .count()
    }

    fn resolve(&self, action: &Action, state: &State) -> Option<PipelineCommand> {
        let route = |target: &Target| match target {
            Target::Pipeline(i) => Route::Pipeline(pipeline(*i)),
            Target::Group(i) => Route::NodeGroup(group(*i)),
        };
        Some(match action {
            Action::Enqueue {
                external_id,
                target,
                queue,
                webhook,
                progress_reports,
                cancel_on_longpoll,
            } => PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("tenant").unwrap(),
                external_id: external_id.map(|k| ExternalId::new(format!("ext-{k}")).unwrap()),
                route: route(target),
                queue: *queue,
                state: json(r#"{"n":0}"#),
                event: Some(json(r#"{"step":"start"}"#)),
                metadata: TxMetadata {
                    webhook_url: webhook.map(|i| WebhookUrl::new(URLS[i]).unwrap()),
                    progress_reports: *progress_reports,
                    cancel_webhook_on_longpoll: *cancel_on_longpoll,
                },
            }),
            Action::Dequeue {
                worker: w,
                group: g,
                max,
            } => PipelineCommand::Dequeue {
                node_group: group(*g),
                worker: worker(*w),
                max: *max,
            },
            Action::Complete {
                worker,
                pick,
                status,
                stale,
            } => {
                let (transaction, token) = self.pick_held(*worker, pick)?;
                PipelineCommand::Complete {
                    transaction,
                    token: if *stale { token - 1 } else { token },
                    status: *status,
                    state: Some(json(r#"{"done":true}"#)),
                }
            }
            Action::EnqueueBatch { items } => PipelineCommand::EnqueueBatch(
                items
                    .iter()
                    .map(|item| match self.resolve(item, state) {
                        Some(PipelineCommand::Enqueue(new)) => new,
                        other => unreachable!("an enqueue resolves to one: {other:?}"),
                    })
                    .collect(),
            ),
            Action::CompleteBatch { worker, items } => {
                let completions: Vec<TxCompletion> = items
                    .iter()
                    .filter_map(|(pick, status, stale)| {
                        let (transaction, token) = self.pick_held(*worker, pick)?;
                        Some(TxCompletion {
                            transaction,
                            token: if *stale { token - 1 } else { token },
                            status: *status,
                            state: Some(json(r#"{"done":true}"#)),
                        })
                    })
                    .collect();
                if completions.is_empty() {
                    return None;
                }
                PipelineCommand::CompleteBatch(completions)
            }
            Action::Retry { worker } => self.last_step[*worker].as_ref()?.0.clone(),
            Action::Requeue {
                worker,
                pick,
                target,
                queue,
            } => {
                let (transaction, token) = self.pick_held(*worker, pick)?;
                PipelineCommand::Requeue {
                    transaction,
                    token,
                    route: target.as_ref().map(route),
                    queue: *queue,
                    state: Some(json(r#"{"n":1}"#)),
                    event: Some(json(r#"{"step":"next"}"#)),
                }
            }
            Action::Progress { worker, pick } => {
                let (transaction, token) = self.pick_held(*worker, pick)?;
                PipelineCommand::Progress {
                    transaction,
                    token,
                    report: json(r#"{"percent":50}"#),
                }
            }
            Action::Sleep {
                worker,
                pick,
                for_ms,
                switch: on,
                queue,
            } => {
                let (transaction, token) = self.pick_held(*worker, pick)?;
                PipelineCommand::Sleep {
                    transaction,
                    token,
                    until_ms: state.clock_ms() + for_ms,
                    switch: on.map(switch),
                    queue: *queue,
                    state: None,
                }
            }
            Action::SetSwitch { switch: s, value } => PipelineCommand::SetSwitch {
                name: switch(*s),
                value: *value,
            },
            Action::Cancel { pick } => PipelineCommand::Cancel {
                transaction: self.pick_any(pick)?,
            },
            Action::MarkReplied { pick } => PipelineCommand::MarkReplied {
                transaction: self.pick_any(pick)?,
            },
            Action::Define {
                pipeline: p,
                group: g,
            } => PipelineCommand::Define {
                name: pipeline(*p),
                node_group: group(*g),
            },
            Action::Delete { pipeline: p } => PipelineCommand::Delete { name: pipeline(*p) },
            Action::TakeWebhooks { max } => PipelineCommand::TakeWebhooks { max: *max },
            Action::WebhookResult {
                pick,
                delivered,
                stale,
            } => {
                if self.taken.is_empty() {
                    return None;
                }
                let hook = &self.taken[pick.index(self.taken.len())];
                PipelineCommand::WebhookResult {
                    event: hook.event,
                    attempt: if *stale && hook.attempts > 1 {
                        hook.attempts - 1
                    } else {
                        hook.attempts
                    },
                    outcome: if *delivered {
                        WebhookOutcome::Delivered
                    } else {
                        WebhookOutcome::Failed {
                            reason: Reason::new("503").unwrap(),
                        }
                    },
                }
            }
            Action::AcknowledgeNotices => PipelineCommand::AcknowledgeNotices {
                up_to: NoticeId(self.last_notice_seen),
            },
            Action::Configure(config) => PipelineCommand::Configure(*config),
            Action::Tick | Action::RoundTrip => return None,
        })
    }

    /// Checks `reply` to `command` against the model's prediction and moves the model along.
    /// Returns whether the command should have changed nothing.
    fn observe(
        &mut self,
        command: &PipelineCommand,
        reply: &Result<PipelineReply, PipelineError>,
        worker: Option<usize>,
        before: &State,
        stamp: Stamp,
        after: &State,
    ) -> Result<bool, TestCaseError> {
        let clock_ms = self.clock_ms;
        match command {
            PipelineCommand::EnqueueBatch(items) => {
                let items: Vec<PipelineCommand> = items
                    .iter()
                    .cloned()
                    .map(PipelineCommand::Enqueue)
                    .collect();
                self.observe_batch(&items, reply, worker, before, stamp, after)
            }
            PipelineCommand::CompleteBatch(items) => {
                let items: Vec<PipelineCommand> = items
                    .iter()
                    .map(|item| PipelineCommand::Complete {
                        transaction: item.transaction,
                        token: item.token,
                        status: item.status,
                        state: item.state.clone(),
                    })
                    .collect();
                self.observe_batch(&items, reply, worker, before, stamp, after)
            }
            PipelineCommand::Enqueue(new) => {
                if let Some(external_id) = &new.external_id
                    && let Some(&(id, expires_at_ms)) = self.external_ids.get(external_id)
                    && expires_at_ms > clock_ms
                {
                    prop_assert_eq!(
                        reply,
                        &Ok(PipelineReply::Enqueued {
                            transaction: id,
                            duplicate: true
                        }),
                        "an external id was accepted twice within its window"
                    );
                    return Ok(true);
                }
                let node_group = match &new.route {
                    Route::Pipeline(name) => match self.definitions.get(name) {
                        Some(node_group) => node_group.clone(),
                        None => {
                            prop_assert!(
                                matches!(reply, Err(PipelineError::UnknownPipeline { .. })),
                                "{:?}",
                                reply
                            );
                            return Ok(true);
                        }
                    },
                    Route::NodeGroup(node_group) => node_group.clone(),
                };
                if self.txs.len() as u64 >= self.config.transactions_max {
                    prop_assert!(
                        matches!(reply, Err(PipelineError::TooMany { .. })),
                        "{:?}",
                        reply
                    );
                    return Ok(true);
                }
                let expected = TransactionId(stamp.index.max(self.last_id + 1));
                prop_assert_eq!(
                    reply,
                    &Ok(PipelineReply::Enqueued {
                        transaction: expected,
                        duplicate: false
                    })
                );
                self.last_id = expected.0;
                if let Some(external_id) = &new.external_id {
                    self.external_ids.insert(
                        external_id.clone(),
                        (expected, clock_ms + self.config.external_id_window_ms),
                    );
                }
                self.txs.insert(
                    expected,
                    ModelTx {
                        place: Place::Finished {
                            status: TxStatus::Success,
                            at_ms: 0,
                        },
                        node_group: node_group.clone(),
                        pipeline: match &new.route {
                            Route::Pipeline(name) => Some(name.clone()),
                            Route::NodeGroup(_) => None,
                        },
                        attempts: 0,
                        last_step: None,
                        webhook: new.metadata.webhook_url.is_some(),
                        cancel_on_longpoll: new.metadata.cancel_webhook_on_longpoll,
                    },
                );
                self.push(expected, &node_group, new.queue);
                Ok(false)
            }
            PipelineCommand::Dequeue {
                node_group,
                worker: who,
                max,
            } => {
                // Admin, then out, then in; first in, first out within each.
                let mut expected = Vec::new();
                for queue in DEQUEUE_ORDER {
                    let waiting = self.queues.entry((node_group.clone(), queue)).or_default();
                    while expected.len() < *max as usize
                        && let Some(id) = waiting.pop_front()
                    {
                        expected.push((id, queue));
                    }
                }
                let Ok(PipelineReply::Dequeued(dequeued)) = reply else {
                    prop_assert!(false, "dequeue answered {:?}", reply);
                    unreachable!();
                };
                let got: Vec<TransactionId> = dequeued.iter().map(|tx| tx.id).collect();
                let wanted: Vec<TransactionId> = expected.iter().map(|(id, _)| *id).collect();
                prop_assert_eq!(got, wanted, "dequeue broke the priority or FIFO order");
                if expected.is_empty() {
                    return Ok(true);
                }
                let token = stamp.index.max(self.last_token + 1);
                self.last_token = token;
                for (tx, (id, queue)) in dequeued.iter().zip(expected) {
                    let model = self.txs.get_mut(&id).unwrap();
                    model.attempts += 1;
                    let deadline_ms = clock_ms + self.config.running_timeout_ms;
                    let claim = tx.claim().unwrap();
                    prop_assert_eq!(
                        (
                            &claim.worker,
                            claim.token,
                            claim.deadline_ms,
                            claim.queue,
                            tx.attempts
                        ),
                        (who, token, deadline_ms, queue, model.attempts)
                    );
                    model.place = Place::Running {
                        token,
                        deadline_ms,
                        queue,
                        cancel: false,
                    };
                    self.held[worker.unwrap()].push((id, token));
                }
                Ok(false)
            }
            PipelineCommand::Complete {
                transaction,
                token,
                status,
                ..
            } => match self.expect_held(*transaction, *token) {
                Expect::Retry(recorded) => {
                    prop_assert_eq!(
                        reply,
                        &Ok(recorded),
                        "a retried completion got another answer"
                    );
                    Ok(true)
                }
                Expect::Stale => {
                    prop_assert!(
                        matches!(
                            reply,
                            Err(PipelineError::StaleClaim { .. }
                                | PipelineError::UnknownTransaction { .. })
                        ),
                        "{:?}",
                        reply
                    );
                    Ok(true)
                }
                Expect::Current if !status.is_terminal() => {
                    prop_assert_eq!(reply, &Err(PipelineError::NotTerminal { status: *status }));
                    Ok(true)
                }
                Expect::Current => {
                    let answer = PipelineReply::Completed {
                        transaction: *transaction,
                        status: *status,
                    };
                    prop_assert_eq!(reply, &Ok(answer.clone()));
                    self.finish(*transaction, *status);
                    self.txs.get_mut(transaction).unwrap().last_step =
                        Some((*token, answer.clone()));
                    self.last_step[worker.unwrap()] = Some((command.clone(), answer));
                    self.record_completion_event(*transaction, after)?;
                    Ok(false)
                }
            },
            PipelineCommand::Requeue {
                transaction,
                token,
                route,
                queue,
                ..
            } => match self.expect_held(*transaction, *token) {
                Expect::Retry(recorded) => {
                    prop_assert_eq!(reply, &Ok(recorded), "a retried requeue got another answer");
                    Ok(true)
                }
                Expect::Stale => {
                    prop_assert!(
                        matches!(
                            reply,
                            Err(PipelineError::StaleClaim { .. }
                                | PipelineError::UnknownTransaction { .. })
                        ),
                        "{:?}",
                        reply
                    );
                    Ok(true)
                }
                Expect::Current => {
                    let tx = &self.txs[transaction];
                    if matches!(tx.place, Place::Running { cancel: true, .. }) {
                        prop_assert!(
                            matches!(reply, Err(PipelineError::CancelRequested { .. })),
                            "{:?}",
                            reply
                        );
                        return Ok(true);
                    }
                    let (node_group, pipeline) = match route {
                        None => (tx.node_group.clone(), tx.pipeline.clone()),
                        Some(Route::NodeGroup(g)) => (g.clone(), tx.pipeline.clone()),
                        Some(Route::Pipeline(name)) => match self.definitions.get(name) {
                            Some(g) => (g.clone(), Some(name.clone())),
                            None => {
                                prop_assert!(
                                    matches!(reply, Err(PipelineError::UnknownPipeline { .. })),
                                    "{:?}",
                                    reply
                                );
                                return Ok(true);
                            }
                        },
                    };
                    let answer = PipelineReply::Requeued {
                        transaction: *transaction,
                        node_group: node_group.clone(),
                        queue: *queue,
                    };
                    prop_assert_eq!(reply, &Ok(answer.clone()));
                    let tx = self.txs.get_mut(transaction).unwrap();
                    tx.pipeline = pipeline;
                    tx.attempts = 0;
                    tx.last_step = Some((*token, answer.clone()));
                    self.push(*transaction, &node_group, *queue);
                    self.last_step[worker.unwrap()] = Some((command.clone(), answer));
                    Ok(false)
                }
            },
            PipelineCommand::Progress {
                transaction, token, ..
            } => {
                let running = matches!(
                    self.txs.get(transaction).map(|tx| &tx.place),
                    Some(Place::Running { token: t, .. }) if t == token
                );
                if !running {
                    prop_assert!(
                        matches!(
                            reply,
                            Err(PipelineError::StaleClaim { .. }
                                | PipelineError::UnknownTransaction { .. })
                        ),
                        "{:?}",
                        reply
                    );
                    return Ok(true);
                }
                let timeout_ms = self.config.running_timeout_ms;
                let Some(Place::Running {
                    deadline_ms,
                    cancel,
                    ..
                }) = self.txs.get_mut(transaction).map(|tx| &mut tx.place)
                else {
                    unreachable!()
                };
                *deadline_ms = clock_ms + timeout_ms;
                prop_assert_eq!(
                    reply,
                    &Ok(PipelineReply::ProgressRecorded {
                        transaction: *transaction,
                        deadline_ms: *deadline_ms,
                        cancel_requested: *cancel,
                    })
                );
                Ok(false)
            }
            PipelineCommand::Sleep {
                transaction,
                token,
                until_ms,
                switch: on,
                queue,
                ..
            } => match self.expect_held(*transaction, *token) {
                Expect::Retry(recorded) => {
                    prop_assert_eq!(reply, &Ok(recorded), "a retried sleep got another answer");
                    Ok(true)
                }
                Expect::Stale => {
                    prop_assert!(
                        matches!(
                            reply,
                            Err(PipelineError::StaleClaim { .. }
                                | PipelineError::UnknownTransaction { .. })
                        ),
                        "{:?}",
                        reply
                    );
                    Ok(true)
                }
                Expect::Current => {
                    if matches!(
                        self.txs[transaction].place,
                        Place::Running { cancel: true, .. }
                    ) {
                        prop_assert!(
                            matches!(reply, Err(PipelineError::CancelRequested { .. })),
                            "{:?}",
                            reply
                        );
                        return Ok(true);
                    }
                    let answer = PipelineReply::Sleeping {
                        transaction: *transaction,
                        until_ms: *until_ms,
                    };
                    prop_assert_eq!(reply, &Ok(answer.clone()));
                    let tx = self.txs.get_mut(transaction).unwrap();
                    tx.place = Place::Sleeping {
                        until_ms: *until_ms,
                        switch: on.clone(),
                        queue: *queue,
                    };
                    tx.last_step = Some((*token, answer.clone()));
                    self.last_step[worker.unwrap()] = Some((command.clone(), answer));
                    Ok(false)
                }
            },
            PipelineCommand::SetSwitch { name, value } => {
                let current = self.switches.get(name).copied().unwrap_or(0);
                if current == *value {
                    prop_assert_eq!(
                        reply,
                        &Ok(PipelineReply::SwitchSet {
                            changed: false,
                            woken: vec![]
                        })
                    );
                    return Ok(true);
                }
                if *value == 0 {
                    self.switches.remove(name);
                } else {
                    self.switches.insert(name.clone(), *value);
                }
                let woken: Vec<TransactionId> = self
                    .txs
                    .iter()
                    .filter(|(_, tx)| matches!(&tx.place, Place::Sleeping { switch: Some(s), .. } if s == name))
                    .map(|(id, _)| *id)
                    .collect();
                prop_assert_eq!(
                    reply,
                    &Ok(PipelineReply::SwitchSet {
                        changed: true,
                        woken: woken.clone()
                    })
                );
                for id in woken {
                    self.wake(id);
                }
                Ok(false)
            }
            PipelineCommand::Cancel { transaction } => {
                let Some(tx) = self.txs.get_mut(transaction) else {
                    prop_assert!(
                        matches!(reply, Err(PipelineError::UnknownTransaction { .. })),
                        "{:?}",
                        reply
                    );
                    return Ok(true);
                };
                let outcome = match &mut tx.place {
                    Place::Queued(..) | Place::Sleeping { .. } => CancelOutcome::Aborted,
                    Place::Running { cancel: true, .. } => CancelOutcome::AlreadyRequested,
                    Place::Running { cancel, .. } => {
                        *cancel = true;
                        CancelOutcome::Requested
                    }
                    place => CancelOutcome::Finished {
                        status: place.status(),
                    },
                };
                prop_assert_eq!(
                    reply,
                    &Ok(PipelineReply::Cancelled {
                        transaction: *transaction,
                        outcome
                    })
                );
                match outcome {
                    CancelOutcome::Aborted => {
                        self.finish(*transaction, TxStatus::Aborted);
                        self.record_completion_event(*transaction, after)?;
                        Ok(false)
                    }
                    CancelOutcome::Requested => Ok(false),
                    _ => Ok(true),
                }
            }
            PipelineCommand::MarkReplied { transaction } => {
                let Some(tx) = self.txs.get(transaction) else {
                    prop_assert!(
                        matches!(reply, Err(PipelineError::UnknownTransaction { .. })),
                        "{:?}",
                        reply
                    );
                    return Ok(true);
                };
                let pending = before
                    .pipelines()
                    .webhook_for(*transaction)
                    .map(|hook| hook.event);
                let cancels =
                    tx.place.status().is_terminal() && tx.cancel_on_longpoll && pending.is_some();
                let Ok(PipelineReply::Replied {
                    transaction: replied,
                    webhook_cancelled,
                }) = reply
                else {
                    prop_assert!(false, "mark replied answered {:?}", reply);
                    unreachable!();
                };
                prop_assert_eq!(*webhook_cancelled, cancels);
                prop_assert_eq!(replied.notified_at_ms, Some(clock_ms));
                if cancels {
                    self.settled.insert(pending.unwrap());
                }
                Ok(false)
            }
            PipelineCommand::Define { name, node_group } => {
                let previous = self.definitions.insert(name.clone(), node_group.clone());
                prop_assert_eq!(
                    reply,
                    &Ok(PipelineReply::Defined {
                        previous: previous.clone()
                    })
                );
                Ok(previous.as_ref() == Some(node_group))
            }
            PipelineCommand::Delete { name } => {
                if !self.definitions.contains_key(name) {
                    prop_assert_eq!(reply, &Ok(PipelineReply::Deleted { existed: false }));
                    return Ok(true);
                }
                let in_play = self.in_play_of(name);
                if in_play > 0 {
                    prop_assert_eq!(
                        reply,
                        &Err(PipelineError::PipelineInUse {
                            name: name.clone(),
                            in_play
                        })
                    );
                    return Ok(true);
                }
                prop_assert_eq!(reply, &Ok(PipelineReply::Deleted { existed: true }));
                self.definitions.remove(name);
                Ok(false)
            }
            PipelineCommand::TakeWebhooks { .. } => {
                let Ok(PipelineReply::WebhooksTaken(taken)) = reply else {
                    prop_assert!(false, "take answered {:?}", reply);
                    unreachable!();
                };
                for hook in taken {
                    prop_assert!(hook.attempts >= 1);
                    if let WebhookKind::Completed { .. } = hook.kind {
                        prop_assert_eq!(
                            self.completion_events.get(&hook.transaction),
                            Some(&hook.event),
                            "a completion event changed its id between attempts"
                        );
                    }
                    self.taken.push(hook.clone());
                }
                Ok(false)
            }
            PipelineCommand::WebhookResult {
                event,
                attempt,
                outcome,
            } => {
                let Some(pending) = before.pipelines().webhook(*event) else {
                    prop_assert_eq!(
                        reply,
                        &Ok(PipelineReply::WebhookRecorded {
                            event: *event,
                            settlement: WebhookSettlement::Unknown
                        })
                    );
                    return Ok(true);
                };
                let Ok(PipelineReply::WebhookRecorded { settlement, .. }) = reply else {
                    // An attempt beyond the latest taken: only from a report of another take.
                    prop_assert!(*attempt > pending.attempts, "{:?}", reply);
                    return Ok(true);
                };
                // Any attempt that got through ends the delivery; a failure of an earlier
                // attempt than the latest is stale; the latest attempt's failure retries it
                // (after its backoff or the URL's pause) or, if it was the last allowed, gives up.
                match (outcome, settlement) {
                    (WebhookOutcome::Delivered, WebhookSettlement::Delivered) => {
                        self.settled.insert(*event);
                        Ok(false)
                    }
                    (WebhookOutcome::Failed { .. }, WebhookSettlement::Stale) => {
                        prop_assert!(*attempt < pending.attempts);
                        Ok(true)
                    }
                    (WebhookOutcome::Failed { .. }, WebhookSettlement::Exhausted) => {
                        prop_assert_eq!(*attempt, pending.attempts);
                        prop_assert!(pending.attempts >= self.config.webhook_attempts_max);
                        Ok(false)
                    }
                    (
                        WebhookOutcome::Failed { .. },
                        WebhookSettlement::RetryAt { next_attempt_at_ms },
                    ) => {
                        prop_assert_eq!(*attempt, pending.attempts);
                        prop_assert!(pending.attempts < self.config.webhook_attempts_max);
                        prop_assert!(*next_attempt_at_ms >= pending.next_attempt_at_ms);
                        Ok(false)
                    }
                    (outcome, settlement) => {
                        prop_assert!(false, "{:?} was settled as {:?}", outcome, settlement);
                        unreachable!()
                    }
                }
            }
            PipelineCommand::AcknowledgeNotices { .. } => Ok(matches!(
                reply,
                Ok(PipelineReply::NoticesAcknowledged { removed: 0 })
            )),
            PipelineCommand::Configure(config) => {
                prop_assert_eq!(reply, &Ok(PipelineReply::Configured));
                self.config = *config;
                Ok(false)
            }
        }
    }

    /// A batch is answered item by item, each as its own command would have been in its place:
    /// the model observes the items in order. The batch changed nothing if no item did.
    fn observe_batch(
        &mut self,
        items: &[PipelineCommand],
        reply: &Result<PipelineReply, PipelineError>,
        worker: Option<usize>,
        before: &State,
        stamp: Stamp,
        after: &State,
    ) -> Result<bool, TestCaseError> {
        let Ok(PipelineReply::Batch(answers)) = reply else {
            prop_assert!(false, "a batch answered {:?}", reply);
            unreachable!();
        };
        prop_assert_eq!(answers.len(), items.len(), "one answer per item");
        let mut no_op = true;
        for (item, answer) in items.iter().zip(answers) {
            // Evaluated for every item: the model moves along with each.
            let item_no_op = self.observe(item, answer, worker, before, stamp, after)?;
            no_op &= item_no_op;
        }
        Ok(no_op)
    }

    fn wake(&mut self, id: TransactionId) {
        let tx = &self.txs[&id];
        let Place::Sleeping { queue, .. } = tx.place else {
            panic!("{id} is not sleeping");
        };
        let node_group = tx.node_group.clone();
        self.txs.get_mut(&id).unwrap().attempts = 0;
        self.push(id, &node_group, queue);
    }

    /// A transaction with a webhook that just finished has its completion event pending.
    fn record_completion_event(
        &mut self,
        id: TransactionId,
        after: &State,
    ) -> Result<(), TestCaseError> {
        if !self.txs[&id].webhook {
            prop_assert!(after.pipelines().webhook_for(id).is_none());
            return Ok(());
        }
        let hook = after.pipelines().webhook_for(id);
        prop_assert!(
            matches!(hook, Some(h) if matches!(h.kind, WebhookKind::Completed { .. }) && h.attempts == 0),
            "{} finished without its completion webhook: {:?}",
            id,
            hook
        );
        self.completion_events.insert(id, hook.unwrap().event);
        Ok(())
    }

    /// Checks a tick's report against what the model says was due, and moves the model along.
    fn observe_tick(
        &mut self,
        report: &certus_core::PipelineTickReport,
        after: &State,
    ) -> Result<(), TestCaseError> {
        let clock_ms = self.clock_ms;
        let more = report.more;
        // The reaper takes running transactions past their deadline, earliest first.
        let mut due: Vec<(u64, TransactionId)> = self
            .txs
            .iter()
            .filter_map(|(id, tx)| match tx.place {
                Place::Running { deadline_ms, .. } if deadline_ms <= clock_ms => {
                    Some((deadline_ms, *id))
                }
                _ => None,
            })
            .collect();
        due.sort();
        let reaped: BTreeSet<TransactionId> = report
            .retried
            .iter()
            .chain(&report.timed_out)
            .chain(&report.aborted)
            .copied()
            .collect();
        if !more {
            prop_assert_eq!(
                reaped.len(),
                due.len(),
                "the reaper missed a stuck transaction"
            );
        }
        for (_, id) in due.into_iter().filter(|(_, id)| reaped.contains(id)) {
            let tx = &self.txs[&id];
            let Place::Running { queue, cancel, .. } = tx.place else {
                unreachable!()
            };
            if cancel {
                prop_assert!(report.aborted.contains(&id));
                self.finish(id, TxStatus::Aborted);
                self.record_completion_event(id, after)?;
            } else if tx.attempts >= self.config.max_attempts {
                prop_assert!(report.timed_out.contains(&id));
                self.finish(id, TxStatus::Timeout);
                self.record_completion_event(id, after)?;
            } else {
                prop_assert!(report.retried.contains(&id));
                let node_group = tx.node_group.clone();
                self.push(id, &node_group, queue);
            }
        }
        // Sleepers whose time came wake, earliest first.
        let mut sleepers: Vec<(u64, TransactionId)> = self
            .txs
            .iter()
            .filter_map(|(id, tx)| match tx.place {
                Place::Sleeping { until_ms, .. } if until_ms <= clock_ms => Some((until_ms, *id)),
                _ => None,
            })
            .collect();
        sleepers.sort();
        let expected: Vec<TransactionId> = sleepers.into_iter().map(|(_, id)| id).collect();
        if more {
            prop_assert!(expected.starts_with(&report.woken));
        } else {
            prop_assert_eq!(&report.woken, &expected);
        }
        for id in &report.woken {
            self.wake(*id);
        }
        for id in &report.archived {
            let tx = self.txs.get_mut(id).unwrap();
            let Place::Finished { status, at_ms } = tx.place else {
                prop_assert!(false, "archived {} from {:?}", id, tx.place);
                unreachable!()
            };
            prop_assert!(at_ms + self.config.archive_delay_ms <= clock_ms);
            tx.place = Place::Archived {
                status,
                at_ms: clock_ms,
            };
        }
        for id in &report.deleted {
            let tx = self.txs.remove(id).unwrap();
            let Place::Archived { at_ms, .. } = tx.place else {
                prop_assert!(false, "deleted {} from {:?}", id, tx.place);
                unreachable!()
            };
            prop_assert!(at_ms + self.config.archive_retention_ms <= clock_ms);
            self.deleted.insert(*id);
        }
        let expired = self
            .external_ids
            .values()
            .filter(|(_, at_ms)| *at_ms <= clock_ms)
            .count();
        if !more {
            prop_assert_eq!(report.external_ids_expired, expired);
        }
        self.external_ids.retain(|_, (_, at_ms)| *at_ms > clock_ms);
        Ok(())
    }

    /// Everything the model knows holds in the state.
    fn check_against(&mut self, state: &State) -> Result<(), TestCaseError> {
        let reads = state.pipelines();
        // Every queue holds exactly what the model says, in the model's order, and the counts
        // agree with the contents.
        let mut seen = BTreeSet::new();
        for g in 0..GROUPS.len() {
            let node_group = group(g);
            let counts = reads.group_counts(&node_group);
            for queue in QueueType::PRIORITY {
                let got: Vec<TransactionId> = reads
                    .queue(&node_group, queue, LIST_PAGE_MAX)
                    .into_iter()
                    .map(|tx| {
                        assert_eq!(tx.status(), TxStatus::Queued);
                        assert_eq!(tx.queued().map(|entry| entry.queue), Some(queue));
                        tx.id
                    })
                    .collect();
                for id in &got {
                    prop_assert!(seen.insert(*id), "transaction {} is in two queues", id);
                }
                let wanted: Vec<TransactionId> = self
                    .queues
                    .get(&(node_group.clone(), queue))
                    .map(|q| q.iter().copied().collect())
                    .unwrap_or_default();
                prop_assert_eq!(
                    &got,
                    &wanted,
                    "queue {} of {} differs from the model",
                    queue,
                    node_group
                );
                prop_assert_eq!(counts.in_queue(queue), got.len());
            }
            let in_group = |want: fn(&Place) -> bool| {
                self.txs
                    .values()
                    .filter(|tx| tx.node_group == node_group && want(&tx.place))
                    .count()
            };
            prop_assert_eq!(
                counts.running,
                in_group(|p| matches!(p, Place::Running { .. }))
            );
            prop_assert_eq!(
                counts.sleeping,
                in_group(|p| matches!(p, Place::Sleeping { .. }))
            );
            let in_play = reads.in_play(&node_group, None, LIST_PAGE_MAX).len();
            prop_assert_eq!(in_play, in_group(Place::in_play));
        }
        for status in TxStatus::ALL {
            let expected = self
                .txs
                .values()
                .filter(|tx| tx.place.status() == status)
                .count();
            prop_assert_eq!(reads.status_count(status), expected, "{} count", status);
        }
        prop_assert_eq!(reads.transaction_count(), self.txs.len());
        // Each transaction is where the model says.
        for (id, model) in &self.txs {
            let tx: &Transaction = reads
                .transaction(*id)
                .expect("a stored transaction is readable");
            prop_assert_eq!(tx.status(), model.place.status(), "transaction {}", id);
            prop_assert_eq!(&tx.node_group, &model.node_group);
            prop_assert_eq!(&tx.pipeline, &model.pipeline);
            match &model.place {
                Place::Running {
                    token,
                    deadline_ms,
                    cancel,
                    ..
                } => {
                    let claim = tx.claim().unwrap();
                    prop_assert_eq!(
                        (claim.token, claim.deadline_ms, tx.cancel_requested()),
                        (*token, *deadline_ms, *cancel)
                    );
                }
                Place::Archived { at_ms, .. } => prop_assert_eq!(tx.archived_at_ms(), Some(*at_ms)),
                Place::Finished { at_ms, .. } => {
                    prop_assert_eq!(
                        (tx.completed_at_ms(), tx.archived_at_ms()),
                        (Some(*at_ms), None)
                    );
                }
                _ => {}
            }
        }
        for id in &self.deleted {
            prop_assert!(reads.transaction(*id).is_none(), "deleted {} came back", id);
        }
        for (external_id, (id, expires_at_ms)) in &self.external_ids {
            let found = reads
                .transaction_by_external_id(external_id, self.clock_ms)
                .map(|tx| tx.id);
            let live = *expires_at_ms > self.clock_ms && self.txs.contains_key(id);
            prop_assert_eq!(found, live.then_some(*id));
        }
        // New notices: a given-up delivery is reported; record it.
        let notices: Vec<_> = reads
            .notices(Some(NoticeId(self.last_notice_seen)), LIST_PAGE_MAX)
            .into_iter()
            .cloned()
            .collect();
        for notice in notices {
            self.last_notice_seen = notice.id.0;
            if let NoticeKind::RetriesExhausted { event, .. } = notice.kind {
                prop_assert!(reads.webhook(event).is_none());
                self.settled.insert(event);
            }
        }
        // Every finished transaction's webhook is pending with its one event id, or settled.
        for (id, event) in &self.completion_events {
            match reads.webhook(*event) {
                Some(hook) => prop_assert_eq!(hook.transaction, *id),
                None => prop_assert!(
                    self.settled.contains(event),
                    "the completion webhook {} of {} vanished undelivered and unreported",
                    event,
                    id
                ),
            }
            if let Some(pending) = reads.webhook_for(*id) {
                prop_assert_eq!(pending.event, *event);
            }
        }
        Ok(())
    }
}

fn snapshot_after_tick(state: &State, stamp: Stamp) -> Vec<u8> {
    let mut ticked = state.clone();
    apply(&mut ticked, Command::Tick, stamp);
    ticked.to_snapshot()
}

fn worker_of(action: &Action) -> Option<usize> {
    match action {
        Action::Dequeue { worker, .. }
        | Action::Complete { worker, .. }
        | Action::CompleteBatch { worker, .. }
        | Action::Retry { worker }
        | Action::Requeue { worker, .. }
        | Action::Progress { worker, .. }
        | Action::Sleep { worker, .. } => Some(*worker),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn queues_follow_the_model_and_every_step_keeps_its_promises(
        (initial, steps) in steps(),
    ) {
        let mut state = State::new();
        let mut model = Model::new(initial);
        let (mut index, mut now_ms) = (1u64, T0);
        let setup = [
            PipelineCommand::Configure(initial),
            PipelineCommand::Define { name: pipeline(0), node_group: group(0) },
            PipelineCommand::Define { name: pipeline(1), node_group: group(1) },
        ];
        for command in setup {
            let response = apply(&mut state, Command::Pipeline(command), Stamp::new(index, now_ms));
            prop_assert!(matches!(response, Response::Pipeline(Ok(_))));
        }
        model.clock_ms = now_ms;
        for (action, clock_delta_ms, index_advance) in steps {
            index += index_advance;
            now_ms = now_ms.saturating_add_signed(clock_delta_ms);
            let stamp = Stamp::new(index, now_ms);
            if let Action::RoundTrip = action {
                let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
                prop_assert_eq!(&restored, &state);
                state = restored;
                continue;
            }
            model.clock_ms = model.clock_ms.max(now_ms);
            let before = state.clone();
            let command = model.resolve(&action, &state);
            let response = match &command {
                Some(command) => apply(&mut state, Command::Pipeline(command.clone()), stamp),
                None => apply(&mut state, Command::Tick, stamp),
            };
            state.check_invariants().unwrap();
            prop_assert_eq!(state.clock_ms(), model.clock_ms);
            match (command, response) {
                (None, Response::Tick(reply)) => model.observe_tick(&reply.pipelines, &state)?,
                (Some(command), Response::Pipeline(reply)) => {
                    let no_op = model.observe(&command, &reply, worker_of(&action), &before, stamp, &state)?;
                    if no_op {
                        // Changed nothing but the clock and index: ticking both gives equal bytes.
                        let mut reference = before.clone();
                        apply(&mut reference, Command::Tick, stamp);
                        prop_assert_eq!(
                            snapshot_after_tick(&state, stamp),
                            reference.to_snapshot(),
                            "{:?} answered {:?} yet changed the state", command, reply
                        );
                    }
                }
                (command, response) => prop_assert!(false, "{:?} answered {:?}", command, response),
            }
            model.check_against(&state)?;
        }
        let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
        prop_assert_eq!(restored, state);
    }
}
