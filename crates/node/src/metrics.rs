//! The node's metrics, served on `/metrics` in the Prometheus text format.
//!
//! Two kinds. Events are counted as they happen, in [`Metrics`] (one per node): HTTP requests by
//! route and status, and the CT merge delay. Levels are read from the node when scraped, into a
//! [`NodeSample`]: Raft's term and indexes, the work queues (the pipelines' per node group and
//! queue, the sessions' per stage: depth and the oldest waiter's age), and — on a node that runs
//! the CT log — the local tree, the serving STH and the sequencing backlog. Nothing has to
//! remember to update a gauge, and a scrape never shows a level older than the scrape.
//!
//! Label values are bounded: an HTTP request is labelled with the route *template* that matched
//! (`/.well-known/acme-challenge/{token}`, never the token), or [`OTHER_PATH`] when no route
//! matched, and with its status code. Node groups are client-chosen names, so at most
//! [`NODE_GROUPS_SAMPLED`] of them (the first in name order) get their own series, and
//! `certus_pipeline_node_groups_omitted` says how many more there were.

use certus_core::State;
use certus_core::pipelines::{QueueType, TxStatus};
use certus_core::sessions::Stage;
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder as _, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::ct_log::CtNode;
use crate::replica::Replica;

/// The `path` label of a request no route matched (unknown paths must not grow the label set).
pub const OTHER_PATH: &str = "other";

/// Most node groups with series of their own in one scrape.
pub const NODE_GROUPS_SAMPLED: usize = 100;

/// The storage histograms' buckets, in seconds: from a page-cache write to a stalled disk.
const STORAGE_BUCKETS_SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The gRPC duration histogram's buckets, in seconds: from a local read to a long-poll's limit.
const GRPC_DURATION_BUCKETS_SECONDS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// The gRPC status code's name as the gRPC specification spells it; `UNKNOWN` for a number
/// outside it (the label set stays bounded).
fn grpc_code_name(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|code| NAMES.get(code))
        .copied()
        .unwrap_or("UNKNOWN")
}

/// The merge-delay histogram's buckets, in seconds: from well under the signing interval to the
/// 24 h maximum merge delay logs usually promise.
const MERGE_DELAY_BUCKETS_SECONDS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3_600.0, 86_400.0,
];

/// The counted metrics of one node. Create one per node and share it (`Arc<Metrics>`).
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    merge_delay: Histogram,
    mirror_errors: IntCounter,
    pipeline_webhooks: IntCounterVec,
    grpc_requests: IntCounterVec,
    grpc_duration: HistogramVec,
    leader_changes: IntCounter,
    log_append: Histogram,
    log_flush: Histogram,
    log_appended: IntCounter,
}

/// What became of one webhook delivery attempt, for `certus_pipeline_webhooks_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookAttempt {
    /// The receiver accepted it.
    Delivered,
    /// It failed (an answer other than 2xx, a network error, no answer in time).
    Failed,
    /// It was taken but not sent, or cut off, because this node's hold on the role ran out.
    Unsent,
}

impl WebhookAttempt {
    fn label(self) -> &'static str {
        match self {
            WebhookAttempt::Delivered => "delivered",
            WebhookAttempt::Failed => "failed",
            WebhookAttempt::Unsent => "unsent",
        }
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty counters.
    pub fn new() -> Metrics {
        let http_requests = IntCounterVec::new(
            Opts::new(
                "certus_http_requests_total",
                "HTTP requests answered, by route template and status code.",
            ),
            &["path", "status"],
        )
        .expect("a valid metric definition");
        let merge_delay = Histogram::with_opts(
            HistogramOpts::new(
                "certus_ct_merge_delay_seconds",
                "Time from an entry's SCT to the first serving STH that includes it, as this node saw it.",
            )
            .buckets(MERGE_DELAY_BUCKETS_SECONDS.to_vec()),
        )
        .expect("a valid metric definition");
        let mirror_errors = IntCounter::new(
            "certus_ct_mirror_errors_total",
            "Master rounds of a mirror that failed to read or check the source log.",
        )
        .expect("a valid metric definition");
        let pipeline_webhooks = IntCounterVec::new(
            Opts::new(
                "certus_pipeline_webhooks_total",
                "Webhook delivery attempts this node made, by outcome (delivered, failed, unsent).",
            ),
            &["outcome"],
        )
        .expect("a valid metric definition");
        let grpc_requests = IntCounterVec::new(
            Opts::new(
                "certus_grpc_requests_total",
                "gRPC calls ended, by method (/package.Service/Method, or other) and status code.",
            ),
            &["method", "code"],
        )
        .expect("a valid metric definition");
        let grpc_duration = HistogramVec::new(
            HistogramOpts::new(
                "certus_grpc_request_duration_seconds",
                "gRPC calls from arrival to the end of the answer (a stream's whole life), by method.",
            )
            .buckets(GRPC_DURATION_BUCKETS_SECONDS.to_vec()),
            &["method"],
        )
        .expect("a valid metric definition");
        let leader_changes = IntCounter::new(
            "certus_raft_leader_changes_total",
            "Times this node saw a different node become leader (etcd's leader_changes_seen).",
        )
        .expect("a valid metric definition");
        let log_append = Histogram::with_opts(
            HistogramOpts::new(
                "certus_raft_log_append_seconds",
                "Writing appended Raft entries into the local store, before the flush.",
            )
            .buckets(STORAGE_BUCKETS_SECONDS.to_vec()),
        )
        .expect("a valid metric definition");
        let log_flush = Histogram::with_opts(
            HistogramOpts::new(
                "certus_raft_log_flush_seconds",
                "From an append's write to the flush that made it durable (fsync, shared by \
                 concurrent appends).",
            )
            .buckets(STORAGE_BUCKETS_SECONDS.to_vec()),
        )
        .expect("a valid metric definition");
        let log_appended = IntCounter::new(
            "certus_raft_log_appended_entries_total",
            "Raft entries appended to this node's log and flushed.",
        )
        .expect("a valid metric definition");
        let registry = Registry::new();
        for counted in [
            Box::new(leader_changes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(log_append.clone()),
            Box::new(log_flush.clone()),
            Box::new(log_appended.clone()),
        ] {
            registry.register(counted).expect("registered once");
        }
        registry
            .register(Box::new(grpc_requests.clone()))
            .expect("registered once");
        registry
            .register(Box::new(grpc_duration.clone()))
            .expect("registered once");
        registry
            .register(Box::new(pipeline_webhooks.clone()))
            .expect("registered once");
        registry
            .register(Box::new(mirror_errors.clone()))
            .expect("registered once");
        registry
            .register(Box::new(http_requests.clone()))
            .expect("registered once");
        registry
            .register(Box::new(merge_delay.clone()))
            .expect("registered once");
        Metrics {
            registry,
            http_requests,
            merge_delay,
            mirror_errors,
            pipeline_webhooks,
            grpc_requests,
            grpc_duration,
            leader_changes,
            log_append,
            log_flush,
            log_appended,
        }
    }

    /// Counts a change of leader this node saw.
    pub fn count_leader_change(&self) {
        self.leader_changes.inc();
    }

    /// Records one durable append to the Raft log.
    pub fn observe_log_append(&self, timing: certus_store::AppendTiming) {
        self.log_append.observe(timing.write.as_secs_f64());
        self.log_flush.observe(timing.flush.as_secs_f64());
        self.log_appended.inc_by(timing.entries as u64);
    }

    /// Records one gRPC call of `method` (a label: see `grpc_metrics::KnownMethods`) that ended
    /// with status `code` after `took`.
    pub fn count_grpc_request(&self, method: &str, code: i32, took: std::time::Duration) {
        self.grpc_requests
            .with_label_values(&[method, grpc_code_name(code)])
            .inc();
        self.grpc_duration
            .with_label_values(&[method])
            .observe(took.as_secs_f64());
    }

    /// Counts one webhook delivery attempt.
    pub fn count_pipeline_webhook(&self, attempt: WebhookAttempt) {
        self.pipeline_webhooks
            .with_label_values(&[attempt.label()])
            .inc();
    }

    /// Counts one answered HTTP request. `path` is the route template that matched, or
    /// [`OTHER_PATH`].
    pub fn count_http_request(&self, path: &str, status: u16) {
        self.http_requests
            .with_label_values(&[path, &status.to_string()])
            .inc();
    }

    /// Records a merge delay: how long after its SCT timestamp an entry was first covered by a
    /// serving STH this node saw.
    pub fn observe_merge_delay_ms(&self, ms: u64) {
        self.merge_delay.observe(seconds(ms));
    }

    /// The count of failed mirror rounds.
    pub fn mirror_errors(&self) -> &IntCounter {
        &self.mirror_errors
    }

    /// The text exposition of the counters and of `sample`.
    pub fn render(&self, sample: &NodeSample) -> Result<String, prometheus::Error> {
        let mut families = self.registry.gather();
        families.extend(sample.families()?);
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut text = Vec::new();
        prometheus::TextEncoder::new().encode(&families, &mut text)?;
        String::from_utf8(text).map_err(|error| prometheus::Error::Msg(error.to_string()))
    }
}

fn seconds(ms: u64) -> f64 {
    // Exact below 2^53 ms (285,000 years).
    ms as f64 / 1_000.0
}

/// A gauge's value: saturates at `i64::MAX` (no replicated counter gets near it).
fn level(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Raft as this node sees it at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftSample {
    /// The current term.
    pub term: u64,
    /// The commit index (see [`Replica::commit_index`]).
    pub commit_index: u64,
    /// The last applied log index.
    pub applied_index: u64,
    /// The last index in this node's log.
    pub last_log_index: u64,
    /// The last index covered by this node's snapshot.
    pub snapshot_index: u64,
    /// Voting members of the cluster, as this node knows it.
    pub voters: u64,
    /// Whether this node is the leader.
    pub is_leader: bool,
}

/// The CT log as this node sees it at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtSample {
    /// Entries in this node's Merkle tree.
    pub local_tree_size: u64,
    /// Entries stored locally without a gap from 0.
    pub local_contiguous_size: u64,
    /// The serving STH's tree size, and its age by this node's clock (`None` before the first
    /// publication).
    pub serving: Option<ServingSample>,
    /// The next sequence number the master will assign.
    pub next_sequence: u64,
    /// Entries accepted but not yet sequenced (the backlog back-pressure watches).
    pub unsequenced: u64,
    /// Entries still held in the replicated state.
    pub held: u64,
    /// Whether the log is frozen.
    pub frozen: bool,
}

/// The serving STH, for the gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServingSample {
    /// Its tree size.
    pub tree_size: u64,
    /// This node's clock minus the STH's timestamp, 0 if the STH is from this node's future.
    pub age_ms: u64,
}

/// One node group's queues at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGroupSample {
    /// Its name.
    pub name: String,
    /// Transactions waiting in each queue, in [`QueueType::PRIORITY`] order.
    pub queued: [u64; 3],
    /// How long the transaction at the head of each queue has waited (none when it is empty).
    pub oldest_age_ms: [Option<u64>; 3],
    /// Transactions running.
    pub running: u64,
    /// Transactions sleeping.
    pub sleeping: u64,
}

/// One session stage's queue at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageSample {
    /// The stage (`makechallenge`, `testchallenge`, `issue`, `done`).
    pub stage: Stage,
    /// Sessions waiting (for `done`: certificates not acknowledged by their clients).
    pub waiting: u64,
    /// Sessions claimed by workers.
    pub claimed: u64,
    /// How long the oldest visible waiter has waited (none when nothing waits).
    pub oldest_age_ms: Option<u64>,
}

/// The work queues at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueuesSample {
    /// The first [`NODE_GROUPS_SAMPLED`] node groups with transactions in play, by name.
    pub node_groups: Vec<NodeGroupSample>,
    /// Node groups in play beyond those.
    pub node_groups_omitted: u64,
    /// Stored transactions per status, in [`TxStatus::ALL`] order.
    pub transactions: [u64; 8],
    /// Webhook deliveries waiting to be made or retried.
    pub webhooks_pending: u64,
    /// Administrator notices not acknowledged yet.
    pub notices: u64,
    /// The sessions' queued stages and the done set.
    pub session_stages: Vec<StageSample>,
    /// Leases held.
    pub leases: u64,
}

/// Everything the gauges show, read from one node at scrape time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSample {
    /// Raft.
    pub raft: RaftSample,
    /// The work queues, as this node's applied state has them.
    pub queues: QueuesSample,
    /// The CT log, on a node that runs it.
    pub ct: Option<CtSample>,
}

impl QueuesSample {
    /// Reads `state`'s queues at `now_ms`. Bounded work (it runs while `apply` waits): at most
    /// [`NODE_GROUPS_SAMPLED`] node groups, one head lookup per queue.
    pub fn of(state: &State, now_ms: u64) -> QueuesSample {
        let pipelines = state.pipelines();
        let mut node_groups = Vec::new();
        let mut node_groups_omitted = 0u64;
        for (group, counts) in pipelines.node_groups() {
            if node_groups.len() == NODE_GROUPS_SAMPLED {
                node_groups_omitted += 1;
                continue;
            }
            let mut sample = NodeGroupSample {
                name: group.as_str().to_owned(),
                running: counts.running as u64,
                sleeping: counts.sleeping as u64,
                ..NodeGroupSample::default()
            };
            for (slot, queue) in QueueType::PRIORITY.into_iter().enumerate() {
                sample.queued[slot] = counts.in_queue(queue) as u64;
                sample.oldest_age_ms[slot] = pipelines
                    .queue(group, queue, 1)
                    .first()
                    .and_then(|head| head.queued())
                    .map(|entry| now_ms.saturating_sub(entry.at_ms));
            }
            node_groups.push(sample);
        }
        let mut transactions = [0u64; 8];
        for (count, status) in transactions.iter_mut().zip(TxStatus::ALL) {
            *count = pipelines.status_count(status) as u64;
        }
        let session_stages = [
            Stage::MakeChallenge,
            Stage::TestChallenge,
            Stage::Issue,
            Stage::Done,
        ]
        .into_iter()
        .filter_map(|stage| {
            state
                .sessions_queue_stats(stage, now_ms)
                .map(|stats| StageSample {
                    stage,
                    waiting: stats.waiting as u64,
                    claimed: stats.claimed as u64,
                    oldest_age_ms: stats.oldest_age_ms,
                })
        })
        .collect();
        QueuesSample {
            node_groups,
            node_groups_omitted,
            transactions,
            webhooks_pending: pipelines.webhooks_pending() as u64,
            notices: pipelines.notices(None, usize::MAX).len() as u64,
            session_stages,
            leases: state.lease_count() as u64,
        }
    }

    fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        let vec =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntGaugeVec, prometheus::Error> {
                let gauge = IntGaugeVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(gauge.clone()))?;
                Ok(gauge)
            };
        let ages =
            |name: &str, help: &str, labels: &[&str]| -> Result<GaugeVec, prometheus::Error> {
                let gauge = GaugeVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(gauge.clone()))?;
                Ok(gauge)
            };
        let depth = vec(
            "certus_pipeline_queue_depth",
            "Transactions waiting in a node group's queue.",
            &["node_group", "queue"],
        )?;
        let oldest = ages(
            "certus_pipeline_queue_oldest_age_seconds",
            "How long the transaction at the head of a node group's queue has waited (only \
             for queues with one).",
            &["node_group", "queue"],
        )?;
        let running = vec(
            "certus_pipeline_running",
            "Transactions of a node group held by workers.",
            &["node_group"],
        )?;
        let sleeping = vec(
            "certus_pipeline_sleeping",
            "Transactions of a node group sleeping until a time or a switch.",
            &["node_group"],
        )?;
        for group in &self.node_groups {
            for (slot, queue) in QueueType::PRIORITY.into_iter().enumerate() {
                let labels = [group.name.as_str(), &queue.to_string()];
                depth
                    .with_label_values(&labels)
                    .set(level(group.queued[slot]));
                if let Some(age_ms) = group.oldest_age_ms[slot] {
                    oldest.with_label_values(&labels).set(seconds(age_ms));
                }
            }
            running
                .with_label_values(&[group.name.as_str()])
                .set(level(group.running));
            sleeping
                .with_label_values(&[group.name.as_str()])
                .set(level(group.sleeping));
        }
        let plain = |name: &str, help: &str, value: u64| -> Result<(), prometheus::Error> {
            let gauge = IntGauge::new(name, help)?;
            gauge.set(level(value));
            registry.register(Box::new(gauge))
        };
        plain(
            "certus_pipeline_node_groups_omitted",
            "Node groups in play without series of their own (beyond the first 100 by name).",
            self.node_groups_omitted,
        )?;
        let transactions = vec(
            "certus_pipeline_transactions",
            "Stored transactions by status (archived ones included).",
            &["status"],
        )?;
        for (count, status) in self.transactions.iter().zip(TxStatus::ALL) {
            transactions
                .with_label_values(&[&status.to_string()])
                .set(level(*count));
        }
        plain(
            "certus_pipeline_webhooks_pending",
            "Webhook deliveries waiting to be made or retried.",
            self.webhooks_pending,
        )?;
        plain(
            "certus_pipeline_notices",
            "Administrator notices (retries exhausted, URL paused, delivery dropped) not \
             acknowledged yet.",
            self.notices,
        )?;
        let waiting = vec(
            "certus_session_queue_depth",
            "Sessions waiting in a stage's queue (for done: certificates not acknowledged).",
            &["stage"],
        )?;
        let claimed = vec(
            "certus_session_queue_claimed",
            "Sessions of a stage claimed by workers.",
            &["stage"],
        )?;
        let session_oldest = ages(
            "certus_session_queue_oldest_age_seconds",
            "How long the oldest visible session of a stage has waited (only when one waits).",
            &["stage"],
        )?;
        for stage in &self.session_stages {
            let label = [stage.stage.to_string()];
            let label = [label[0].as_str()];
            waiting.with_label_values(&label).set(level(stage.waiting));
            claimed.with_label_values(&label).set(level(stage.claimed));
            if let Some(age_ms) = stage.oldest_age_ms {
                session_oldest
                    .with_label_values(&label)
                    .set(seconds(age_ms));
            }
        }
        plain("certus_leases_held", "Leases held.", self.leases)
    }
}

impl NodeSample {
    /// Reads the node now.
    pub fn of(replica: &Replica, ct: Option<&CtNode>) -> NodeSample {
        let commit_index = replica.commit_index();
        let raft = {
            let metrics = replica.raft.metrics();
            let metrics = metrics.borrow();
            RaftSample {
                term: metrics.current_term,
                commit_index,
                applied_index: metrics.last_applied.map_or(0, |log_id| log_id.index),
                last_log_index: metrics.last_log_index.unwrap_or(0),
                snapshot_index: metrics.snapshot.map_or(0, |log_id| log_id.index),
                voters: metrics.membership_config.membership().voter_ids().count() as u64,
                is_leader: metrics.state == openraft::ServerState::Leader,
            }
        };
        let now_ms = replica.clock.now_ms();
        let queues = replica
            .reader
            .read(|applied| QueuesSample::of(&applied.state, now_ms));
        let ct = ct.map(|ct| {
            let mut sample = replica.reader.read(|applied| {
                let state = &applied.state;
                CtSample {
                    local_tree_size: 0,
                    local_contiguous_size: 0,
                    serving: state.ct_serving().map(|serving| ServingSample {
                        tree_size: serving.sth.tree_size,
                        age_ms: now_ms.saturating_sub(serving.sth.timestamp_ms),
                    }),
                    next_sequence: state.ct_next_sequence(),
                    unsequenced: state.ct_unsequenced_count() as u64,
                    held: state.ct_held_count() as u64,
                    frozen: state.ct_frozen(),
                }
            });
            sample.local_tree_size = ct.db().tree_size();
            sample.local_contiguous_size = ct.db().contiguous_size();
            sample
        });
        NodeSample { raft, queues, ct }
    }

    /// The gauges, as metric families.
    fn families(&self) -> Result<Vec<MetricFamily>, prometheus::Error> {
        let mirror_errors = IntCounter::new(
            "certus_ct_mirror_errors_total",
            "Master rounds of a mirror that failed to read or check the source log.",
        )
        .expect("a valid metric definition");
        let registry = Registry::new();
        registry
            .register(Box::new(mirror_errors.clone()))
            .expect("registered once");
        let gauge = |name: &str, help: &str, value: i64| -> Result<(), prometheus::Error> {
            let gauge = IntGauge::new(name, help)?;
            gauge.set(value);
            registry.register(Box::new(gauge))
        };
        let raft = &self.raft;
        gauge(
            "certus_raft_term",
            "The current Raft term.",
            level(raft.term),
        )?;
        gauge(
            "certus_raft_commit_index",
            "The highest log index this node knows to be committed.",
            level(raft.commit_index),
        )?;
        gauge(
            "certus_raft_applied_index",
            "The last log index this node applied to its state.",
            level(raft.applied_index),
        )?;
        gauge(
            "certus_raft_last_log_index",
            "The last index in this node's Raft log.",
            level(raft.last_log_index),
        )?;
        gauge(
            "certus_raft_snapshot_index",
            "The last log index this node's snapshot covers.",
            level(raft.snapshot_index),
        )?;
        gauge(
            "certus_raft_voters",
            "Voting members of the cluster, as this node knows it.",
            level(raft.voters),
        )?;
        gauge(
            "certus_is_leader",
            "1 on the Raft leader, 0 elsewhere.",
            i64::from(raft.is_leader),
        )?;
        self.queues.register(&registry)?;
        if let Some(ct) = &self.ct {
            gauge(
                "certus_ct_local_tree_size",
                "Entries in this node's CT Merkle tree.",
                level(ct.local_tree_size),
            )?;
            gauge(
                "certus_ct_local_contiguous_size",
                "CT entries stored on this node without a gap from index 0.",
                level(ct.local_contiguous_size),
            )?;
            gauge(
                "certus_ct_serving_tree_size",
                "The serving STH's tree size (0 before the first publication).",
                level(ct.serving.map_or(0, |serving| serving.tree_size)),
            )?;
            if let Some(serving) = ct.serving {
                let age = prometheus::Gauge::new(
                    "certus_ct_serving_sth_age_seconds",
                    "This node's clock minus the serving STH's timestamp.",
                )?;
                age.set(seconds(serving.age_ms));
                registry.register(Box::new(age))?;
            }
            gauge(
                "certus_ct_next_sequence",
                "The sequence number the next sequenced CT entry gets.",
                level(ct.next_sequence),
            )?;
            gauge(
                "certus_ct_unsequenced_entries",
                "CT entries accepted but not yet sequenced (the back-pressure backlog).",
                level(ct.unsequenced),
            )?;
            gauge(
                "certus_ct_held_entries",
                "CT entries still held in the replicated state (not yet cleaned up).",
                level(ct.held),
            )?;
            gauge(
                "certus_ct_frozen",
                "1 while the CT log is frozen (read-only).",
                i64::from(ct.frozen),
            )?;
        }
        Ok(registry.gather())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// One sample line: name, labels, value.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct Line {
        pub(crate) name: String,
        pub(crate) labels: BTreeMap<String, String>,
        pub(crate) value: f64,
    }

    /// Parses the text format strictly: every line is a `# HELP`/`# TYPE` comment or
    /// `name{label="value",...} number`; anything else fails the test.
    pub(crate) fn parse(text: &str) -> Vec<Line> {
        let mut lines = Vec::new();
        for line in text.lines() {
            if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no value in {line:?}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                value => value
                    .parse()
                    .unwrap_or_else(|_| panic!("value {value:?} in {line:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let body = rest
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
                    let labels = body
                        .split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair
                                .split_once('=')
                                .unwrap_or_else(|| panic!("label {pair:?} in {line:?}"));
                            let value = value
                                .strip_prefix('"')
                                .and_then(|value| value.strip_suffix('"'))
                                .unwrap_or_else(|| panic!("unquoted label in {line:?}"));
                            (key.to_owned(), value.to_owned())
                        })
                        .collect();
                    (name, labels)
                }
                None => (series, BTreeMap::new()),
            };
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "metric name {name:?} in {line:?}"
            );
            lines.push(Line {
                name: name.to_owned(),
                labels,
                value,
            });
        }
        lines
    }

    /// The value of the first series named `name` that has (at least) `labels`.
    pub(crate) fn value_of(lines: &[Line], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        lines
            .iter()
            .find(|line| {
                line.name == name
                    && labels.iter().all(|(key, value)| {
                        line.labels.get(*key).map(String::as_str) == Some(value)
                    })
            })
            .map(|line| line.value)
    }

    fn raft() -> RaftSample {
        RaftSample {
            term: 7,
            commit_index: 120,
            applied_index: 118,
            last_log_index: 121,
            snapshot_index: 100,
            voters: 3,
            is_leader: true,
        }
    }

    #[test]
    fn raft_gauges_show_the_sample_and_ct_gauges_only_with_a_log() {
        let metrics = Metrics::new();
        let text = metrics
            .render(&NodeSample {
                raft: raft(),
                queues: QueuesSample::default(),
                ct: None,
            })
            .expect("renders");
        let lines = parse(&text);
        assert_eq!(value_of(&lines, "certus_raft_term", &[]), Some(7.0));
        assert_eq!(
            value_of(&lines, "certus_raft_commit_index", &[]),
            Some(120.0)
        );
        assert_eq!(
            value_of(&lines, "certus_raft_applied_index", &[]),
            Some(118.0)
        );
        assert_eq!(value_of(&lines, "certus_is_leader", &[]), Some(1.0));
        assert_eq!(
            value_of(&lines, "certus_raft_last_log_index", &[]),
            Some(121.0)
        );
        assert_eq!(
            value_of(&lines, "certus_raft_snapshot_index", &[]),
            Some(100.0)
        );
        assert_eq!(value_of(&lines, "certus_raft_voters", &[]), Some(3.0));
        assert!(
            lines.iter().all(|line| !line.name.starts_with("certus_ct_")
                || line.name.starts_with("certus_ct_merge_delay")
                || line.name == "certus_ct_mirror_errors_total"),
            "no CT gauges without a CT log (the counters are registered up front):\n{text}"
        );

        let ct = CtSample {
            local_tree_size: 40,
            local_contiguous_size: 42,
            serving: Some(ServingSample {
                tree_size: 39,
                age_ms: 2_500,
            }),
            next_sequence: 45,
            unsequenced: 3,
            held: 44,
            frozen: true,
        };
        let text = metrics
            .render(&NodeSample {
                raft: RaftSample {
                    is_leader: false,
                    ..raft()
                },
                queues: QueuesSample::default(),
                ct: Some(ct),
            })
            .expect("renders");
        let lines = parse(&text);
        assert_eq!(value_of(&lines, "certus_is_leader", &[]), Some(0.0));
        for (name, expected) in [
            ("certus_ct_local_tree_size", 40.0),
            ("certus_ct_local_contiguous_size", 42.0),
            ("certus_ct_serving_tree_size", 39.0),
            ("certus_ct_serving_sth_age_seconds", 2.5),
            ("certus_ct_next_sequence", 45.0),
            ("certus_ct_unsequenced_entries", 3.0),
            ("certus_ct_held_entries", 44.0),
            ("certus_ct_frozen", 1.0),
        ] {
            assert_eq!(
                value_of(&lines, name, &[]),
                Some(expected),
                "{name}:\n{text}"
            );
        }

        // Before the first publication there is no STH to be old.
        let text = metrics
            .render(&NodeSample {
                raft: raft(),
                queues: QueuesSample::default(),
                ct: Some(CtSample {
                    serving: None,
                    ..ct
                }),
            })
            .expect("renders");
        let lines = parse(&text);
        assert_eq!(
            value_of(&lines, "certus_ct_serving_tree_size", &[]),
            Some(0.0)
        );
        assert_eq!(
            value_of(&lines, "certus_ct_serving_sth_age_seconds", &[]),
            None
        );
    }

    #[test]
    fn requests_are_counted_by_route_and_status() {
        let metrics = Metrics::new();
        metrics.count_http_request("/ct/v1/get-sth", 200);
        metrics.count_http_request("/ct/v1/get-sth", 200);
        metrics.count_http_request("/ct/v1/get-sth", 503);
        metrics.count_http_request(OTHER_PATH, 404);
        let lines = parse(
            &metrics
                .render(&NodeSample {
                    raft: raft(),
                    queues: QueuesSample::default(),
                    ct: None,
                })
                .expect("renders"),
        );
        let count = |path, status| {
            value_of(
                &lines,
                "certus_http_requests_total",
                &[("path", path), ("status", status)],
            )
        };
        assert_eq!(count("/ct/v1/get-sth", "200"), Some(2.0));
        assert_eq!(count("/ct/v1/get-sth", "503"), Some(1.0));
        assert_eq!(count("other", "404"), Some(1.0));
        assert_eq!(count("/status", "200"), None);
    }

    #[test]
    fn merge_delays_fill_the_histogram_in_seconds() {
        let metrics = Metrics::new();
        let sample = NodeSample {
            raft: raft(),
            queues: QueuesSample::default(),
            ct: None,
        };
        let lines = parse(&metrics.render(&sample).expect("renders"));
        assert_eq!(
            value_of(&lines, "certus_ct_merge_delay_seconds_count", &[]),
            Some(0.0)
        );
        metrics.observe_merge_delay_ms(80);
        metrics.observe_merge_delay_ms(1_500);
        metrics.observe_merge_delay_ms(90_000);
        let lines = parse(&metrics.render(&sample).expect("renders"));
        let bucket = |le| {
            value_of(
                &lines,
                "certus_ct_merge_delay_seconds_bucket",
                &[("le", le)],
            )
            .unwrap_or_else(|| panic!("bucket {le}"))
        };
        assert_eq!(bucket("0.05"), 0.0);
        assert_eq!(bucket("0.1"), 1.0);
        assert_eq!(bucket("2.5"), 2.0);
        assert_eq!(bucket("60"), 2.0);
        assert_eq!(bucket("300"), 3.0);
        assert_eq!(bucket("+Inf"), 3.0);
        assert_eq!(
            value_of(&lines, "certus_ct_merge_delay_seconds_count", &[]),
            Some(3.0)
        );
        let sum = value_of(&lines, "certus_ct_merge_delay_seconds_sum", &[]).expect("sum");
        assert!((sum - 91.58).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn queue_gauges_show_depths_and_the_head_of_each_queue_by_node_group() {
        use certus_core::pipelines::{
            JsonDocument, NewTransaction, NodeGroup, Owner, Route, TxMetadata,
        };
        use certus_core::{Command, PipelineCommand, Stamp, WorkerId, apply};

        const T0: u64 = 1_700_000_000_000;
        let mut state = State::default();
        let mut index = 0;
        let mut run = |state: &mut State, command: PipelineCommand, now_ms: u64| {
            index += 1;
            apply(state, Command::Pipeline(command), Stamp::new(index, now_ms))
        };
        let enqueue = |group: &str, queue: QueueType| {
            PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("acme").unwrap(),
                external_id: None,
                route: Route::NodeGroup(NodeGroup::new(group).unwrap()),
                queue,
                state: JsonDocument::new("{}").unwrap(),
                event: None,
                metadata: TxMetadata::default(),
            })
        };
        // Group a: two in `in` (the first queued at T0), one in `admin`, one taken by a worker.
        run(&mut state, enqueue("a", QueueType::In), T0);
        run(&mut state, enqueue("a", QueueType::In), T0 + 1_000);
        run(&mut state, enqueue("a", QueueType::Admin), T0 + 2_000);
        run(&mut state, enqueue("b", QueueType::Out), T0 + 3_000);
        run(
            &mut state,
            PipelineCommand::Dequeue {
                node_group: NodeGroup::new("a").unwrap(),
                worker: WorkerId::new("w").unwrap(),
                max: 1,
            },
            T0 + 4_000,
        );

        let queues = QueuesSample::of(&state, T0 + 10_000);
        let sample = NodeSample {
            raft: raft(),
            queues,
            ct: None,
        };
        let text = Metrics::new().render(&sample).expect("renders");
        let lines = parse(&text);
        let depth = |group, queue| {
            value_of(
                &lines,
                "certus_pipeline_queue_depth",
                &[("node_group", group), ("queue", queue)],
            )
        };
        let age = |group, queue| {
            value_of(
                &lines,
                "certus_pipeline_queue_oldest_age_seconds",
                &[("node_group", group), ("queue", queue)],
            )
        };
        // The dequeue took the admin one (served first).
        assert_eq!(depth("a", "admin"), Some(0.0), "{text}");
        assert_eq!(depth("a", "in"), Some(2.0), "{text}");
        assert_eq!(depth("b", "out"), Some(1.0), "{text}");
        assert_eq!(
            age("a", "in"),
            Some(10.0),
            "the head waited since T0:\n{text}"
        );
        assert_eq!(age("b", "out"), Some(7.0), "{text}");
        assert_eq!(
            age("a", "admin"),
            None,
            "an empty queue has no head:\n{text}"
        );
        assert_eq!(
            value_of(&lines, "certus_pipeline_running", &[("node_group", "a")]),
            Some(1.0)
        );
        assert_eq!(
            value_of(
                &lines,
                "certus_pipeline_transactions",
                &[("status", "queued")]
            ),
            Some(3.0)
        );
        assert_eq!(
            value_of(
                &lines,
                "certus_pipeline_transactions",
                &[("status", "running")]
            ),
            Some(1.0)
        );
        assert_eq!(
            value_of(&lines, "certus_pipeline_node_groups_omitted", &[]),
            Some(0.0)
        );
        assert_eq!(
            value_of(
                &lines,
                "certus_session_queue_depth",
                &[("stage", "makechallenge")]
            ),
            Some(0.0),
            "every session stage is shown, empty or not:\n{text}"
        );
    }

    #[test]
    fn node_groups_beyond_the_sampled_ones_are_counted_not_listed() {
        use certus_core::pipelines::{
            JsonDocument, NewTransaction, NodeGroup, Owner, Route, TxMetadata,
        };
        use certus_core::{Command, PipelineCommand, Stamp, apply};

        let mut state = State::default();
        for n in 0..NODE_GROUPS_SAMPLED + 3 {
            let index = n as u64 + 1;
            let command = PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("acme").unwrap(),
                external_id: None,
                route: Route::NodeGroup(NodeGroup::new(format!("g{n:04}")).unwrap()),
                queue: QueueType::In,
                state: JsonDocument::new("{}").unwrap(),
                event: None,
                metadata: TxMetadata::default(),
            });
            apply(
                &mut state,
                Command::Pipeline(command),
                Stamp::new(index, 1_000),
            );
        }
        let queues = QueuesSample::of(&state, 2_000);
        assert_eq!(queues.node_groups.len(), NODE_GROUPS_SAMPLED);
        assert_eq!(queues.node_groups_omitted, 3);
        assert_eq!(queues.node_groups[0].name, "g0000", "the first by name");
    }

    #[test]
    fn grpc_calls_are_counted_by_method_and_code_name_and_timed() {
        let metrics = Metrics::new();
        let took = std::time::Duration::from_millis(3);
        metrics.count_grpc_request("/certus.v1.Leases/Acquire", 0, took);
        metrics.count_grpc_request("/certus.v1.Leases/Acquire", 0, took);
        metrics.count_grpc_request("/certus.v1.Leases/Acquire", 9, took);
        metrics.count_grpc_request("other", 12, took);
        metrics.count_grpc_request("other", 99, took);
        let sample = NodeSample {
            raft: raft(),
            queues: QueuesSample::default(),
            ct: None,
        };
        let lines = parse(&metrics.render(&sample).expect("renders"));
        let count = |method, code| {
            value_of(
                &lines,
                "certus_grpc_requests_total",
                &[("method", method), ("code", code)],
            )
        };
        assert_eq!(count("/certus.v1.Leases/Acquire", "OK"), Some(2.0));
        assert_eq!(
            count("/certus.v1.Leases/Acquire", "FAILED_PRECONDITION"),
            Some(1.0)
        );
        assert_eq!(count("other", "UNIMPLEMENTED"), Some(1.0));
        assert_eq!(count("other", "UNKNOWN"), Some(1.0), "out of range");
        assert_eq!(
            value_of(
                &lines,
                "certus_grpc_request_duration_seconds_count",
                &[("method", "/certus.v1.Leases/Acquire")]
            ),
            Some(3.0)
        );
        assert_eq!(
            value_of(
                &lines,
                "certus_grpc_request_duration_seconds_bucket",
                &[("method", "/certus.v1.Leases/Acquire"), ("le", "0.0025")]
            ),
            Some(0.0),
            "3 ms is above 2.5 ms"
        );
    }
}
