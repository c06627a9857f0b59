//! The webhook processor against real nodes and a real HTTP receiver (axum on loopback): the
//! test writes the pipeline commands itself (define, enqueue, dequeue, complete with a webhook
//! URL), runs `pipeline_webhooks::run_with` on the nodes' replicas, and checks what the receiver
//! saw against what the replicated state recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode};
use certus_core::leases::LeaseName;
use certus_core::pipelines::{
    JsonDocument, NewTransaction, NodeGroup, NoticeKind, Owner, PipelineCommand, PipelineConfig,
    PipelineName, PipelineReply, QueueType, Route, TransactionId, TxMetadata, TxStatus,
    WebhookEventId, WebhookUrl,
};
use certus_core::{Command, Response, State, WorkerId};
use certus_node::metrics::{Metrics, NodeSample};
use certus_node::ordered_watch as watch;
use certus_node::roles::pipeline_webhooks::{
    ATTEMPT_HEADER, EVENT_ID_HEADER, ProcessorTimings, ROLE_LEASE, TRANSACTION_HEADER,
    WebhookProcessor, run_with,
};
use certus_node::{CertusNode, Node, NodeConfig, Replica};
use serde_json::Value;

use crate::support::{free_addr, leader_index};

/// How long anything that should happen soon may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(15);
/// How often a test looks again.
const POLL: Duration = Duration::from_millis(25);
const PIPELINE: &str = "orders";
const GROUP: &str = "order-workers";

/// Short role timings, so a hand-off takes about a second: grace 400 ms, well under two thirds
/// of the TTL.
fn timings() -> ProcessorTimings {
    ProcessorTimings {
        lease_ttl_ms: 1_500,
        request_timeout_ms: 300,
        skew_ms: 100,
        deliveries_max: 8,
    }
}

/// Short backoff; the attempt and pause settings are each test's own.
fn config(attempts_max: u32, url_failure_limit: u32) -> PipelineConfig {
    PipelineConfig {
        webhook_backoff_base_ms: 100,
        webhook_backoff_cap_ms: 200,
        webhook_attempts_max: attempts_max,
        url_failure_limit,
        url_failure_window_ms: 60_000,
        url_pause_ms: 60_000,
        ..PipelineConfig::default()
    }
}

// The receiver.

/// How the receiver answers.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// 200 to everything.
    Accept,
    /// 500 to the first `n` requests, then 200.
    FailFirst(usize),
    /// 500 to everything.
    Refuse,
    /// 503 to every event's first attempt, 200 to later ones; the very first request is answered
    /// only after `hold_first` (longer than the backoff, so it is due again while still held).
    FailFirstAttempts { hold_first: Duration },
}

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
struct Hit {
    event: u64,
    attempt: u32,
    transaction: u64,
    content_type: String,
    body: Value,
    /// The answer, if the handler finished (a sender that gives up drops the request).
    status: Option<u16>,
    started: Instant,
    /// When the handler finished or was dropped; `None` while it runs.
    ended: Option<Instant>,
}

#[derive(Debug)]
struct Receiver {
    plan: Plan,
    hits: Mutex<Vec<Hit>>,
}

impl Receiver {
    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

/// Closes a hit's interval when its handler ends, even when the sender's hang-up drops it.
struct Closing {
    receiver: Arc<Receiver>,
    index: usize,
}

impl Drop for Closing {
    fn drop(&mut self) {
        let mut hits = self.receiver.hits.lock().unwrap();
        hits[self.index].ended.get_or_insert_with(Instant::now);
    }
}

fn header<T: std::str::FromStr>(headers: &HeaderMap, name: &str) -> T {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("header {name} missing or malformed in {headers:?}"))
}

async fn hook(
    AxumState(receiver): AxumState<Arc<Receiver>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let attempt: u32 = header(&headers, ATTEMPT_HEADER);
    let (earlier, closing) = {
        let mut hits = receiver.hits.lock().unwrap();
        hits.push(Hit {
            event: header(&headers, EVENT_ID_HEADER),
            attempt,
            transaction: header(&headers, TRANSACTION_HEADER),
            content_type: header(&headers, "content-type"),
            body: serde_json::from_str(&body).expect("the body is JSON"),
            status: None,
            started: Instant::now(),
            ended: None,
        });
        let closing = Closing {
            receiver: Arc::clone(&receiver),
            index: hits.len() - 1,
        };
        (hits.len() - 1, closing)
    };
    let status = match receiver.plan {
        Plan::Accept => StatusCode::OK,
        Plan::FailFirst(n) if earlier < n => StatusCode::INTERNAL_SERVER_ERROR,
        Plan::FailFirst(_) => StatusCode::OK,
        Plan::Refuse => StatusCode::INTERNAL_SERVER_ERROR,
        Plan::FailFirstAttempts { hold_first } if attempt == 1 => {
            if earlier == 0 {
                tokio::time::sleep(hold_first).await;
            }
            StatusCode::SERVICE_UNAVAILABLE
        }
        Plan::FailFirstAttempts { .. } => StatusCode::OK,
    };
    receiver.hits.lock().unwrap()[closing.index].status = Some(status.as_u16());
    drop(closing);
    status
}

/// Starts a receiver on loopback; its URL.
async fn receiver(plan: Plan) -> (Arc<Receiver>, WebhookUrl) {
    let receiver = Arc::new(Receiver {
        plan,
        hits: Mutex::new(Vec::new()),
    });
    let router = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(Arc::clone(&receiver));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    let url = WebhookUrl::new(format!("http://{addr}/hook")).expect("a valid URL");
    (receiver, url)
}

// The cluster.

async fn start(dir: &std::path::Path, size: u64) -> Vec<Node> {
    // The tests run their own processors, to stop and observe them.
    start_with(dir, size, false).await
}

/// `size` nodes; with `node_processors`, each runs the webhook role as a node does by default.
async fn start_with(dir: &std::path::Path, size: u64, node_processors: bool) -> Vec<Node> {
    let configs: Vec<NodeConfig> = (1..=size)
        .map(|id| {
            let mut config =
                NodeConfig::new(id, free_addr(), free_addr(), dir.join(format!("node-{id}")));
            config.sessions.daemons = false;
            config.pipelines.webhooks = node_processors;
            config
        })
        .collect();
    let mut nodes = Vec::new();
    for config in &configs {
        nodes.push(Node::start(config.clone()).await.expect("node starts"));
    }
    let members: BTreeMap<u64, CertusNode> = configs
        .iter()
        .map(|config| (config.id, config.member()))
        .collect();
    nodes[0].initialize(members).await.expect("initialize");
    leader_index(&nodes).await;
    nodes
}

async fn pipeline(replica: &Replica, command: PipelineCommand) -> PipelineReply {
    let responses = replica
        .write(vec![Command::Pipeline(command)])
        .await
        .expect("the write is applied");
    match responses.into_iter().next() {
        Some(Response::Pipeline(Ok(reply))) => reply,
        other => panic!("pipeline command answered {other:?}"),
    }
}

async fn setup(replica: &Replica, config: PipelineConfig) {
    pipeline(replica, PipelineCommand::Configure(config)).await;
    pipeline(
        replica,
        PipelineCommand::Define {
            name: PipelineName::new(PIPELINE).unwrap(),
            node_group: NodeGroup::new(GROUP).unwrap(),
        },
    )
    .await;
}

/// Enqueues a transaction with a webhook to `url`, dequeues it and completes it with state
/// `{"result": n}`; its id and the webhook event its completion scheduled.
async fn complete_one(
    replica: &Replica,
    url: &WebhookUrl,
    n: usize,
) -> (TransactionId, WebhookEventId) {
    let reply = pipeline(
        replica,
        PipelineCommand::Enqueue(NewTransaction {
            owner: Owner::new("tester").unwrap(),
            external_id: None,
            route: Route::Pipeline(PipelineName::new(PIPELINE).unwrap()),
            queue: QueueType::In,
            state: JsonDocument::new(r#"{"result": null}"#).unwrap(),
            event: Some(JsonDocument::new(r#"{"do": "work"}"#).unwrap()),
            metadata: TxMetadata {
                webhook_url: Some(url.clone()),
                ..TxMetadata::default()
            },
        }),
    )
    .await;
    let PipelineReply::Enqueued { transaction, .. } = reply else {
        panic!("enqueue answered {reply:?}");
    };
    let reply = pipeline(
        replica,
        PipelineCommand::Dequeue {
            node_group: NodeGroup::new(GROUP).unwrap(),
            worker: WorkerId::new("worker-1").unwrap(),
            max: 1,
        },
    )
    .await;
    let PipelineReply::Dequeued(taken) = reply else {
        panic!("dequeue answered {reply:?}");
    };
    assert_eq!(taken.len(), 1, "the one transaction queued is dequeued");
    assert_eq!(taken[0].id, transaction);
    let token = taken[0].claim().expect("a running claim").token;
    pipeline(
        replica,
        PipelineCommand::Complete {
            transaction,
            token,
            status: TxStatus::Success,
            state: Some(JsonDocument::new(format!(r#"{{"result": {n}}}"#)).unwrap()),
        },
    )
    .await;
    let event = read(replica, |state| {
        state
            .pipelines()
            .webhook_for(transaction)
            .map(|hook| hook.event)
    })
    .await
    .expect("the completion scheduled a webhook");
    (transaction, event)
}

async fn read<T>(replica: &Replica, read: impl FnOnce(&State) -> T) -> T {
    replica
        .read(|state, _| read(state))
        .await
        .expect("a linearizable read")
}

async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done().await {
        assert!(Instant::now() < deadline, "not within {PATIENCE:?}: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// A processor for `node` on `timings`, running until its stop is sent.
fn spawn_processor(
    node: &Node,
    timings: ProcessorTimings,
    metrics: Option<Arc<Metrics>>,
) -> watch::Sender<bool> {
    let replica = Arc::clone(node.replica());
    let mut processor = WebhookProcessor::http(replica.id)
        .expect("an HTTP client")
        .with_timings(timings)
        .expect("valid timings");
    if let Some(metrics) = metrics {
        processor = processor.with_metrics(metrics);
    }
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(run_with(replica, processor, stopped));
    stop
}

async fn shutdown(nodes: Vec<Node>) {
    for node in nodes {
        node.shutdown().await;
    }
}

// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_transaction_is_posted_once_with_its_event_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start(dir.path(), 1).await;
    let replica = nodes[0].replica();
    setup(replica, config(3, 5)).await;
    let (receiver, url) = receiver(Plan::Accept).await;
    let (transaction, event) = complete_one(replica, &url, 42).await;
    let stop = spawn_processor(&nodes[0], timings(), None);

    wait_until("the receiver gets the event", async || {
        !receiver.hits().is_empty()
    })
    .await;
    wait_until("the delivery is recorded", async || {
        read(replica, |state| {
            state.pipelines().webhook_for(transaction).is_none()
        })
        .await
    })
    .await;
    // A few more rounds: a delivered event is not sent again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let hits = receiver.hits();
    assert_eq!(hits.len(), 1, "one delivery: {hits:?}");
    let hit = &hits[0];
    assert_eq!(hit.event, event.0);
    assert_eq!(hit.attempt, 1);
    assert_eq!(hit.transaction, transaction.0);
    assert_eq!(hit.content_type, "application/json");
    assert_eq!(hit.body["event"], event.0);
    assert_eq!(hit.body["transaction"], transaction.0);
    assert_eq!(hit.body["kind"], "completed");
    assert_eq!(hit.body["status"], "success");
    assert_eq!(hit.body["pipeline"], PIPELINE);
    assert_eq!(
        hit.body["state"]["result"], 42,
        "the state, as JSON: {}",
        hit.body
    );
    let (notices, lease) = read(replica, |state| {
        let lease = state
            .lease(&LeaseName::new(ROLE_LEASE).unwrap(), 0)
            .map(|lease| lease.holder.as_str().to_owned());
        (state.pipelines().notices(None, 10).len(), lease)
    })
    .await;
    assert_eq!(notices, 0, "nothing for the administrator");
    assert_eq!(
        lease.as_deref(),
        Some("node-1"),
        "the processor holds the role"
    );

    stop.send(true).expect("the processor listens");
    // A clean stop with nothing in flight gives the role back at once.
    wait_until("the role is released", async || {
        read(replica, |state| {
            state
                .lease(&LeaseName::new(ROLE_LEASE).unwrap(), 0)
                .is_none()
        })
        .await
    })
    .await;
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_fails_twice_sees_one_event_id_three_times() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start(dir.path(), 1).await;
    let replica = nodes[0].replica();
    setup(replica, config(5, 10)).await;
    let (receiver, url) = receiver(Plan::FailFirst(2)).await;
    let (transaction, event) = complete_one(replica, &url, 7).await;
    let stop = spawn_processor(&nodes[0], timings(), None);

    wait_until("the third attempt is delivered and recorded", async || {
        receiver.hits().len() >= 3
            && read(replica, |state| {
                state.pipelines().webhook_for(transaction).is_none()
            })
            .await
    })
    .await;
    let hits = receiver.hits();
    let seen: Vec<(u64, u32, Option<u16>)> = hits
        .iter()
        .map(|hit| (hit.event, hit.attempt, hit.status))
        .collect();
    assert_eq!(
        seen,
        [
            (event.0, 1, Some(500)),
            (event.0, 2, Some(500)),
            (event.0, 3, Some(200))
        ],
        "one event id on every attempt, attempts counted up"
    );
    assert!(
        hits.iter().all(|hit| hit.body == hits[0].body),
        "every attempt carries the same body"
    );
    let (notices, health) = read(replica, |state| {
        let pipelines = state.pipelines();
        (
            pipelines.notices(None, 10).len(),
            pipelines.url_health(&url).copied(),
        )
    })
    .await;
    assert_eq!(notices, 0, "a delivery that got through raises nothing");
    assert_eq!(health, None, "a success forgets the URL's failures");
    stop.send(true).expect("the processor listens");
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_always_fails_is_paused_and_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start(dir.path(), 1).await;
    let replica = nodes[0].replica();
    // Two attempts per event; two failures pause the URL for a minute.
    setup(replica, config(2, 2)).await;
    let (receiver, url) = receiver(Plan::Refuse).await;
    let (transaction, event) = complete_one(replica, &url, 1).await;
    let metrics = Arc::new(Metrics::new());
    let stop = spawn_processor(&nodes[0], timings(), Some(Arc::clone(&metrics)));

    wait_until("the delivery is given up", async || {
        read(replica, |state| {
            state.pipelines().webhook_for(transaction).is_none()
        })
        .await
    })
    .await;
    let hits = receiver.hits();
    let seen: Vec<(u64, u32)> = hits.iter().map(|hit| (hit.event, hit.attempt)).collect();
    assert_eq!(seen, [(event.0, 1), (event.0, 2)], "two attempts, one id");
    let (notices, health) = read(replica, |state| {
        let pipelines = state.pipelines();
        let notices: Vec<NoticeKind> = pipelines
            .notices(None, 10)
            .into_iter()
            .map(|notice| notice.kind.clone())
            .collect();
        (notices, pipelines.url_health(&url).copied())
    })
    .await;
    assert!(
        notices.iter().any(|notice| matches!(
            notice,
            NoticeKind::UrlPaused { url: paused, failures: 2, .. } if *paused == url
        )),
        "the pause is reported: {notices:?}"
    );
    assert!(
        notices.iter().any(|notice| matches!(
            notice,
            NoticeKind::RetriesExhausted { event: given_up, attempts: 2, last_error: Some(reason), .. }
                if *given_up == event && reason.as_str().starts_with("HTTP 500")
        )),
        "the given-up event is reported with the receiver's answer: {notices:?}"
    );
    let paused_until_ms = health
        .and_then(|health| health.paused_until_ms)
        .expect("the URL is paused");
    assert!(paused_until_ms > replica.clock.now_ms() + 30_000);

    // Another event for the paused URL waits: nothing is sent to it.
    let (later, _) = complete_one(replica, &url, 2).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.hits().len(), 2, "nothing sent to a paused URL");
    let waiting = read(replica, |state| {
        state
            .pipelines()
            .webhook_for(later)
            .map(|hook| hook.attempts)
    })
    .await;
    assert_eq!(waiting, Some(0), "the later event is pending, never taken");

    let text = metrics
        .render(&NodeSample::of(replica, None))
        .expect("renders");
    assert!(
        text.contains("certus_pipeline_webhooks_total{outcome=\"failed\"} 2"),
        "{text}"
    );
    assert!(!text.contains("outcome=\"delivered\""), "{text}");
    stop.send(true).expect("the processor listens");
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processors_never_send_one_event_at_once_across_a_hand_off() {
    const EVENTS: usize = 8;
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start(dir.path(), 3).await;
    let replica = nodes[0].replica();
    setup(replica, config(6, 1_000)).await;
    let (receiver, url) = receiver(Plan::FailFirstAttempts {
        hold_first: Duration::from_millis(400),
    })
    .await;
    let mut events = Vec::new();
    for n in 0..EVENTS {
        events.push(complete_one(replica, &url, n).await);
    }
    // One delivery per round, and room for the held first request: while one processor holds
    // it, the other goes through the quick ones and would find the held event due again (the
    // backoff, 100 ms, is shorter than the hold) — only the role lock keeps it from sending
    // that event a second time at once. (Verified: with the lock bypassed this test fails.)
    let small_batches = ProcessorTimings {
        request_timeout_ms: 450,
        deliveries_max: 1,
        ..timings()
    };
    let stops = [
        spawn_processor(&nodes[1], small_batches, None),
        spawn_processor(&nodes[2], small_batches, None),
    ];
    let lease_holder = async || {
        read(replica, |state| {
            state
                .lease(&LeaseName::new(ROLE_LEASE).unwrap(), 0)
                .map(|lease| lease.holder.as_str().to_owned())
        })
        .await
    };

    // Stop whichever holds the role once every first attempt and two retries were sent, so the
    // other retries are handed off.
    wait_until("the first holder sends", async || {
        receiver.hits().len() >= EVENTS + 2
    })
    .await;
    let first = lease_holder().await.expect("a processor holds the role");
    let (first_stop, other) = match first.as_str() {
        "node-2" => (&stops[0], "node-3"),
        "node-3" => (&stops[1], "node-2"),
        holder => panic!("unexpected holder {holder}"),
    };
    first_stop.send(true).expect("the processor listens");
    let handed_off_at = Instant::now();

    wait_until("every event is delivered and recorded", async || {
        let hits = receiver.hits();
        let delivered = events.iter().all(|(_, event)| {
            hits.iter()
                .any(|hit| hit.event == event.0 && hit.status == Some(200))
        });
        delivered && read(replica, |state| state.pipelines().webhooks_pending() == 0).await
    })
    .await;
    let hits = receiver.hits();
    assert!(
        hits.iter().any(|hit| hit.started > handed_off_at),
        "the second processor sent after the hand-off"
    );
    assert!(
        hits.iter().all(|hit| hit.ended.is_some()),
        "every request the receiver saw has ended: {hits:?}"
    );
    for (_, event) in &events {
        let mut of_event: Vec<&Hit> = hits.iter().filter(|hit| hit.event == event.0).collect();
        of_event.sort_by_key(|hit| hit.started);
        // Each event's first attempt is refused, or cut off by the stop before the receiver
        // answered, so a later attempt delivered it.
        assert!(
            of_event.last().is_some_and(|hit| hit.attempt >= 2),
            "event {event}: delivered by a retry: {of_event:?}"
        );
        for pair in of_event.windows(2) {
            assert!(
                pair[0].attempt < pair[1].attempt,
                "event {event}: attempts in increasing order: {of_event:?}"
            );
            assert!(
                pair[0].ended.is_some_and(|ended| ended <= pair[1].started),
                "event {event}: two attempts overlapped at the receiver: {of_event:?}"
            );
        }
    }
    assert_eq!(
        lease_holder().await.as_deref(),
        Some(other),
        "the role moved"
    );
    for stop in &stops {
        let _ = stop.send(true);
    }
    shutdown(nodes).await;
}

/// As a node starts by default, it competes for the webhook role: a completion is delivered by
/// the cluster itself, by exactly one node, and an idle cluster holds no role lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_deliver_webhooks_themselves_and_take_the_role_only_when_there_is_work() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nodes = start_with(dir.path(), 3, true).await;
    let leader = &nodes[leader_index(&nodes).await];
    let replica = leader.replica();
    // Idle: nothing pending, so no node takes the role.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let idle_lease = read(replica, |state| {
        state
            .lease(&LeaseName::new(ROLE_LEASE).unwrap(), 0)
            .is_some()
    })
    .await;
    assert!(!idle_lease, "an idle cluster holds no webhook role");

    setup(replica, config(3, 5)).await;
    let (receiver, url) = receiver(Plan::Accept).await;
    let (transaction, event) = complete_one(replica, &url, 7).await;
    wait_until("a node delivers the event", async || {
        read(replica, |state| {
            state.pipelines().webhook_for(transaction).is_none()
        })
        .await
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let hits = receiver.hits();
    assert_eq!(hits.len(), 1, "delivered once: {hits:?}");
    assert_eq!(hits[0].event, event.0);
    let holder = read(replica, |state| {
        state
            .lease(&LeaseName::new(ROLE_LEASE).unwrap(), 0)
            .map(|lease| lease.holder.as_str().to_owned())
    })
    .await;
    assert!(
        holder
            .as_deref()
            .is_some_and(|holder| holder.starts_with("node-")),
        "a node took the role: {holder:?}"
    );
    shutdown(nodes).await;
}
