//! Transaction pipelines over gRPC (`certus.v1.Pipelines`) against a real three-node cluster in
//! one process. Each test plays producer, worker and operator itself, on different nodes, so
//! every write is forwarded and every read passes the read barrier somewhere else than where
//! the data was written.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::Path;
use std::time::{Duration, Instant};

use certus_node::{Node, NodeConfig};
use certus_proto::v1;
use certus_proto::v1::enqueue_request::Route;
use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::sleep_request::Wake;
use certus_proto::v1::{NotificationKind, QueueType, TxStatus, WaitOutcome};
use tonic::codec::Streaming;
use tonic::transport::Channel;
use tonic::{Code, Response, Status};

use crate::support::{roles, shutdown, start_plain_cluster};

/// How long anything that should happen at once may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// How often a test looks again.
const POLL: Duration = Duration::from_millis(50);
/// The metadata entry carrying a refusal's stable reason.
const REASON_KEY: &str = "certus-error";
/// The node's largest Pipelines reply; the client must accept it.
const REPLY_BYTES_MAX: usize = 32 * 1024 * 1024;

/// A three-node cluster without a CT log, data under `dir`, once every node knows the leader.
/// The leader ticks every 200 ms, so sleepers wake soon after their time.
async fn start_cluster(dir: &Path) -> (Vec<NodeConfig>, Vec<Node>) {
    start_plain_cluster(dir, PATIENCE, |config| {
        config.sessions.daemons = false;
        config.tick_interval_ms = 200;
    })
    .await
}

async fn client(node: &NodeConfig) -> PipelinesClient<Channel> {
    PipelinesClient::connect(format!("http://{}", node.grpc_addr))
        .await
        .expect("gRPC connection")
        .max_decoding_message_size(REPLY_BYTES_MAX)
}

/// The refusal of `result`, checked for its code and its `certus-error` reason.
fn refused<T: Debug>(result: Result<Response<T>, Status>, code: Code, reason: &str) -> Status {
    let status = match result {
        Ok(response) => panic!(
            "expected {code:?} {reason}, got {:?}",
            response.into_inner()
        ),
        Err(status) => status,
    };
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(
        status
            .metadata()
            .get(REASON_KEY)
            .and_then(|value| value.to_str().ok()),
        Some(reason),
        "{status:?}"
    );
    status
}

/// [`refused`] with `INVALID_ARGUMENT` whose message starts with the field's name.
fn invalid<T: Debug>(result: Result<Response<T>, Status>, reason: &str, field: &str) {
    let status = refused(result, Code::InvalidArgument, reason);
    assert!(
        status.message().starts_with(field) || status.message().contains(field),
        "names {field}: {}",
        status.message()
    );
}

fn enqueue_request(route: Route, queue: QueueType, state: &str) -> v1::EnqueueRequest {
    v1::EnqueueRequest {
        owner: "tenant-1".to_owned(),
        external_id: String::new(),
        route: Some(route),
        queue: queue.into(),
        state: state.to_owned(),
        event: String::new(),
        metadata: None,
    }
}

fn group(name: &str) -> Route {
    Route::NodeGroup(name.to_owned())
}

async fn enqueue(client: &mut PipelinesClient<Channel>, request: v1::EnqueueRequest) -> u64 {
    let reply = client
        .enqueue(request)
        .await
        .expect("Pipelines/Enqueue")
        .into_inner();
    assert!(!reply.duplicate);
    reply.transaction_id
}

async fn dequeue(
    client: &mut PipelinesClient<Channel>,
    node_group: &str,
    worker: &str,
    max: u32,
) -> Vec<v1::Transaction> {
    client
        .dequeue(v1::DequeueRequest {
            node_group: node_group.to_owned(),
            worker: worker.to_owned(),
            max,
            wait_ms: 0,
        })
        .await
        .expect("Pipelines/Dequeue")
        .into_inner()
        .transactions
}

/// The transaction now (no wait, no mark).
async fn get(client: &mut PipelinesClient<Channel>, id: u64) -> v1::GetStateReply {
    client
        .get_state(v1::GetStateRequest {
            transaction_id: id,
            ..v1::GetStateRequest::default()
        })
        .await
        .expect("Pipelines/GetState")
        .into_inner()
}

async fn transaction(client: &mut PipelinesClient<Channel>, id: u64) -> v1::Transaction {
    get(client, id).await.transaction.expect("a transaction")
}

async fn complete(
    client: &mut PipelinesClient<Channel>,
    tx: &v1::Transaction,
    status: TxStatus,
    state: &str,
) -> Result<Response<v1::CompleteTransactionReply>, Status> {
    client
        .complete(v1::CompleteTransactionRequest {
            transaction_id: tx.id,
            claim_token: tx.claim_token,
            status: status.into(),
            state: state.to_owned(),
        })
        .await
}

async fn status(client: &mut PipelinesClient<Channel>) -> v1::PipelinesStatus {
    client
        .status(v1::PipelinesStatusRequest::default())
        .await
        .expect("Pipelines/Status")
        .into_inner()
}

/// `(admin, out, in, running, sleeping)` of one node group.
async fn depths(client: &mut PipelinesClient<Channel>, node_group: &str) -> [u64; 5] {
    let status = client
        .status(v1::PipelinesStatusRequest {
            node_group: node_group.to_owned(),
        })
        .await
        .expect("Pipelines/Status")
        .into_inner();
    let [counts] = &status.node_groups[..] else {
        panic!("one node group: {status:?}");
    };
    assert_eq!(counts.node_group, node_group);
    [
        counts.queued_admin,
        counts.queued_out,
        counts.queued_in,
        counts.running,
        counts.sleeping,
    ]
}

/// The next item of `stream`, within [`PATIENCE`].
async fn next(stream: &mut Streaming<v1::PipelineNotification>) -> v1::PipelineNotification {
    tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the stream sends within its patience")
        .expect("the stream is healthy")
        .expect("the stream goes on")
}

async fn watch(
    client: &mut PipelinesClient<Channel>,
    node_group: &str,
    after_seq: Option<u64>,
) -> Streaming<v1::PipelineNotification> {
    client
        .watch_completions(v1::WatchCompletionsRequest {
            node_group: node_group.to_owned(),
            after_seq,
            include_progress: false,
            positions: false,
        })
        .await
        .expect("Pipelines/WatchCompletions")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_long_polls_the_result_a_worker_produced_through_other_nodes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut operator = client(&configs[leader]).await;
    let mut producer = client(&configs[follower]).await;
    let mut worker = client(&configs[other]).await;

    let defined = operator
        .define_pipeline(v1::DefinePipelineRequest {
            name: "billing".to_owned(),
            node_group: "payments".to_owned(),
        })
        .await
        .expect("Pipelines/DefinePipeline")
        .into_inner();
    let pipeline = defined.pipeline.expect("the pipeline");
    assert_eq!(
        (pipeline.name.as_str(), pipeline.node_group.as_str()),
        ("billing", "payments")
    );
    assert_eq!(defined.previous_node_group, "");

    // The producer enqueues through a follower, with an external id and a webhook it would
    // rather skip when its long-poll gets the result.
    let mut request = enqueue_request(
        Route::Pipeline("billing".to_owned()),
        QueueType::In,
        r#"{"order":1}"#,
    );
    request.external_id = "order-1".to_owned();
    request.event = r#"{"do":"charge"}"#.to_owned();
    request.metadata = Some(v1::TxMetadata {
        webhook_url: "http://127.0.0.1:9/hooks".to_owned(),
        progress_reports: false,
        cancel_webhook_on_longpoll: true,
    });
    let first = producer
        .enqueue(request.clone())
        .await
        .expect("Pipelines/Enqueue")
        .into_inner();
    assert!(first.transaction_id > 0 && !first.duplicate);
    let id = first.transaction_id;

    // The same external id through another node, with other content: the first transaction,
    // unchanged, and nothing new stored.
    let mut again = request.clone();
    again.state = r#"{"order":"other"}"#.to_owned();
    let duplicate = worker
        .enqueue(again)
        .await
        .expect("a duplicate Enqueue")
        .into_inner();
    assert_eq!((duplicate.transaction_id, duplicate.duplicate), (id, true));
    assert_eq!(status(&mut operator).await.transactions, 1);
    assert_eq!(depths(&mut operator, "payments").await, [0, 0, 1, 0, 0]);

    let by_external = operator
        .get_state(v1::GetStateRequest {
            external_id: "order-1".to_owned(),
            ..v1::GetStateRequest::default()
        })
        .await
        .expect("GetState by external id")
        .into_inner();
    assert_eq!(by_external.outcome(), WaitOutcome::WaitEnded);
    let queued = by_external.transaction.expect("a transaction");
    assert_eq!(queued.id, id);
    assert_eq!(queued.status(), TxStatus::Queued);
    assert_eq!(queued.status_text, "queued");
    assert_eq!(
        queued.state, r#"{"order":1}"#,
        "the first enqueue's content"
    );
    assert_eq!(queued.event, r#"{"do":"charge"}"#);
    assert_eq!(
        (queued.pipeline.as_str(), queued.node_group.as_str()),
        ("billing", "payments")
    );
    assert_eq!(queued.queue(), QueueType::In);
    assert_eq!(queued.owner, "tenant-1");
    let seen_seq = by_external.notification_seq;

    // Nothing happens to a queued transaction: a short long-poll runs out its time.
    let started = Instant::now();
    let quiet = operator
        .get_state(v1::GetStateRequest {
            transaction_id: id,
            wait_ms: 300,
            ..v1::GetStateRequest::default()
        })
        .await
        .expect("a short long-poll")
        .into_inner();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(quiet.outcome(), WaitOutcome::WaitEnded);
    assert_eq!(quiet.transaction, Some(queued.clone()));
    assert_eq!(quiet.notification_seq, seen_seq);

    // The producer long-polls on the follower while nothing happens.
    let poller = client(&configs[follower]).await;
    let long_poll = move |after_seq: u64, mark_replied: bool| {
        let mut poller = poller.clone();
        tokio::spawn(async move {
            let reply = poller
                .get_state(v1::GetStateRequest {
                    transaction_id: id,
                    wait_ms: 15_000,
                    after_seq: Some(after_seq),
                    mark_replied,
                    ..v1::GetStateRequest::default()
                })
                .await
                .expect("a long-poll")
                .into_inner();
            (reply, Instant::now())
        })
    };
    let waiting = long_poll(seen_seq, false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the long-poll waits while queued");

    // A worker dequeues through the third node and reports progress.
    let taken = dequeue(&mut worker, "payments", "worker-1", 10).await;
    let [running] = &taken[..] else {
        panic!("one transaction: {taken:?}");
    };
    assert_eq!(running.id, id);
    assert_eq!(running.status(), TxStatus::Running);
    assert_eq!(running.worker, "worker-1");
    assert_eq!(running.attempts, 1);
    assert!(running.claim_token > 0 && running.claim_deadline_ms > running.claim_started_at_ms);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a dequeue is not progress");
    let reported_at = Instant::now();
    let progress = worker
        .progress(v1::ProgressRequest {
            transaction_id: id,
            claim_token: running.claim_token,
            report: r#"{"percent":50}"#.to_owned(),
        })
        .await
        .expect("Pipelines/Progress")
        .into_inner();
    assert!(!progress.cancel_requested);
    assert!(progress.claim_deadline_ms >= running.claim_deadline_ms);
    let (woken, returned_at) = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the long-poll returns")
        .expect("the polling task");
    println!(
        "the long-poll returned {:?} after the progress report",
        returned_at.duration_since(reported_at)
    );
    assert!(returned_at.duration_since(reported_at) < Duration::from_secs(5));
    assert_eq!(woken.outcome(), WaitOutcome::Progress);
    let seen = woken.transaction.expect("a transaction");
    assert_eq!(seen.progress, r#"{"percent":50}"#);
    assert_eq!(seen.status(), TxStatus::Running);
    assert!(woken.notification_seq > seen_seq);

    // The next poll waits from there and marks its reply: the result cancels the webhook.
    let waiting = long_poll(woken.notification_seq, true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "nothing new since the last poll");

    // A late worker's token (or any other) is refused and changes nothing.
    let before = transaction(&mut operator, id).await;
    let mut stale = running.clone();
    stale.claim_token += 1;
    refused(
        complete(&mut producer, &stale, TxStatus::Success, "{}").await,
        Code::FailedPrecondition,
        "stale-claim",
    );
    assert_eq!(transaction(&mut producer, id).await, before);

    let completed_at = Instant::now();
    let done = complete(&mut worker, running, TxStatus::Success, r#"{"paid":true}"#)
        .await
        .expect("Pipelines/Complete")
        .into_inner();
    assert_eq!(
        (done.transaction_id, done.status()),
        (id, TxStatus::Success)
    );
    let (result, returned_at) = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the long-poll returns")
        .expect("the polling task");
    println!(
        "the long-poll returned {:?} after the completion",
        returned_at.duration_since(completed_at)
    );
    assert_eq!(result.outcome(), WaitOutcome::Finished);
    let finished = result.transaction.clone().expect("a transaction");
    assert_eq!(finished.status(), TxStatus::Success);
    assert_eq!(finished.status_text, "success");
    assert_eq!(finished.state, r#"{"paid":true}"#);
    assert!(
        finished.event.is_empty(),
        "a finished transaction has no event"
    );
    assert!(finished.completed_at_ms > 0 && finished.notified_at_ms > 0);
    assert!(
        result.webhook_cancelled && result.webhook.is_none(),
        "the long-poll reply cancels the webhook: {result:?}"
    );

    // The worker lost the answer and completes again: the same answer, nothing changes.
    let before = get(&mut producer, id).await;
    let repeated = complete(
        &mut operator,
        running,
        TxStatus::Success,
        r#"{"paid":true}"#,
    )
    .await
    .expect("a repeated Complete")
    .into_inner();
    assert_eq!(repeated, done);
    assert_eq!(get(&mut worker, id).await.transaction, before.transaction);
    // Within the window, the external id still answers the first transaction.
    let late = producer
        .enqueue(request)
        .await
        .expect("a late duplicate")
        .into_inner();
    assert_eq!((late.transaction_id, late.duplicate), (id, true));
    let counts = status(&mut operator).await;
    assert_eq!(counts.transactions, 1);
    assert!(counts.node_groups.is_empty(), "nothing in play: {counts:?}");
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_get_admin_then_out_then_in_and_hand_transactions_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut producer = client(&configs[follower]).await;
    let mut worker = client(&configs[other]).await;
    let mut operator = client(&configs[leader]).await;

    let mut ids = BTreeMap::new();
    for (name, queue) in [
        ("in-1", QueueType::In),
        ("out-1", QueueType::Out),
        ("in-2", QueueType::In),
        ("admin-1", QueueType::Admin),
        ("out-2", QueueType::Out),
        ("admin-2", QueueType::Admin),
    ] {
        let state = format!(r#"{{"name":"{name}"}}"#);
        let id = enqueue(
            &mut producer,
            enqueue_request(group("mixed"), queue, &state),
        )
        .await;
        ids.insert(id, name);
    }
    assert_eq!(depths(&mut operator, "mixed").await, [2, 2, 2, 0, 0]);
    let names =
        |taken: &[v1::Transaction]| -> Vec<&str> { taken.iter().map(|tx| ids[&tx.id]).collect() };

    let first = dequeue(&mut worker, "mixed", "w1", 3).await;
    assert_eq!(names(&first), ["admin-1", "admin-2", "out-1"]);
    let token = first[0].claim_token;
    assert!(
        first.iter().all(|tx| tx.claim_token == token),
        "one batch, one token"
    );
    let rest = dequeue(&mut operator, "mixed", "w2", 100).await;
    assert_eq!(names(&rest), ["out-2", "in-1", "in-2"]);
    assert!(rest.iter().all(|tx| tx.claim_token == rest[0].claim_token));
    assert!(rest[0].claim_token > token, "tokens grow");
    assert!(dequeue(&mut worker, "mixed", "w1", 100).await.is_empty());
    assert_eq!(depths(&mut operator, "mixed").await, [0, 0, 0, 6, 0]);

    // Every running transaction is stuck for at least 0 ms, the longest running first.
    let stuck = operator
        .list_stuck(v1::ListStuckRequest {
            min_running_ms: 0,
            limit: 0,
        })
        .await
        .expect("Pipelines/ListStuck")
        .into_inner();
    let mut stuck_ids: Vec<u64> = stuck.transactions.iter().map(|tx| tx.id).collect();
    assert!(
        stuck
            .transactions
            .windows(2)
            .all(|pair| pair[0].claim_started_at_ms <= pair[1].claim_started_at_ms),
        "longest running first"
    );
    stuck_ids.sort_unstable();
    assert_eq!(stuck_ids, ids.keys().copied().collect::<Vec<_>>());
    let none_yet = operator
        .list_stuck(v1::ListStuckRequest {
            min_running_ms: 3_600_000,
            limit: 0,
        })
        .await
        .expect("Pipelines/ListStuck")
        .into_inner();
    assert!(none_yet.transactions.is_empty());

    // A worker hands "in-1" on to another node group's admin queue with its next event.
    let in_1 = rest[1].clone();
    let handed = worker
        .requeue(v1::RequeueRequest {
            transaction_id: in_1.id,
            claim_token: in_1.claim_token,
            route: Some(v1::requeue_request::Route::NodeGroup("review".to_owned())),
            queue: QueueType::Admin.into(),
            state: r#"{"name":"in-1","checked":true}"#.to_owned(),
            event: r#"{"do":"review"}"#.to_owned(),
        })
        .await
        .expect("Pipelines/Requeue")
        .into_inner();
    assert_eq!(
        (handed.node_group.as_str(), handed.queue()),
        ("review", QueueType::Admin)
    );
    let in_play = producer
        .list_in_play(v1::ListInPlayRequest {
            node_group: "review".to_owned(),
            after: 0,
            limit: 0,
        })
        .await
        .expect("Pipelines/ListInPlay")
        .into_inner();
    assert_eq!(in_play.next_after, 0);
    let [waiting] = &in_play.transactions[..] else {
        panic!("one in play: {in_play:?}");
    };
    assert_eq!(waiting.id, in_1.id);
    assert_eq!(waiting.status(), TxStatus::Queued);
    assert_eq!(waiting.queue(), QueueType::Admin);
    let reviewed = dequeue(&mut worker, "review", "reviewer", 1).await;
    assert_eq!(reviewed.len(), 1);
    assert_eq!(reviewed[0].event, r#"{"do":"review"}"#);
    assert_eq!(reviewed[0].state, r#"{"name":"in-1","checked":true}"#);
    assert_eq!(reviewed[0].attempts, 1, "a hand-on starts the count again");

    // The old claim is over: its token is refused for any other step, which is told how the
    // claim ended.
    let ended = refused(
        complete(&mut operator, &in_1, TxStatus::Success, "").await,
        Code::FailedPrecondition,
        "stale-claim",
    );
    assert!(
        ended
            .message()
            .contains("handed it on to queue admin of review"),
        "{}",
        ended.message()
    );
    // ...but the requeue itself, repeated with it, answers the same.
    let repeated = producer
        .requeue(v1::RequeueRequest {
            transaction_id: in_1.id,
            claim_token: in_1.claim_token,
            route: Some(v1::requeue_request::Route::NodeGroup("review".to_owned())),
            queue: QueueType::Admin.into(),
            state: String::new(),
            event: String::new(),
        })
        .await
        .expect("a repeated Requeue")
        .into_inner();
    assert_eq!(repeated, handed);
    assert_eq!(depths(&mut operator, "mixed").await, [0, 0, 0, 5, 0]);
    assert_eq!(depths(&mut operator, "review").await, [0, 0, 0, 1, 0]);
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_right_code_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;

    // A pipeline with one running transaction, and a baseline to compare with at the end.
    on_leader
        .define_pipeline(v1::DefinePipelineRequest {
            name: "p".to_owned(),
            node_group: "g".to_owned(),
        })
        .await
        .expect("Pipelines/DefinePipeline");
    let id = enqueue(
        &mut on_follower,
        enqueue_request(Route::Pipeline("p".to_owned()), QueueType::In, "{}"),
    )
    .await;
    let taken = dequeue(&mut on_other, "g", "w", 1).await;
    let running = taken[0].clone();
    let token = running.claim_token;
    let baseline_status = status(&mut on_leader).await;
    let baseline_tx = transaction(&mut on_leader, id).await;
    let list_pipelines = |client: &mut PipelinesClient<Channel>| {
        let mut client = client.clone();
        async move {
            client
                .list_pipelines(v1::ListPipelinesRequest::default())
                .await
                .expect("Pipelines/ListPipelines")
                .into_inner()
        }
    };
    let baseline_pipelines = list_pipelines(&mut on_leader).await;
    assert_eq!(baseline_pipelines.pipelines.len(), 1);

    // Pipelines.
    let define = |name: &str, node_group: &str| v1::DefinePipelineRequest {
        name: name.to_owned(),
        node_group: node_group.to_owned(),
    };
    invalid(
        on_follower.define_pipeline(define("", "g")).await,
        "invalid-argument",
        "name",
    );
    invalid(
        on_follower.define_pipeline(define("q", "has space")).await,
        "invalid-argument",
        "node_group",
    );
    invalid(
        on_follower
            .define_pipeline(define(&"n".repeat(129), "g"))
            .await,
        "invalid-argument",
        "name",
    );
    refused(
        on_other
            .delete_pipeline(v1::DeletePipelineRequest {
                name: "p".to_owned(),
            })
            .await,
        Code::FailedPrecondition,
        "pipeline-in-use",
    );

    // Enqueue.
    let good = enqueue_request(group("g"), QueueType::In, "{}");
    let bad_enqueues: Vec<(&str, &str, v1::EnqueueRequest)> = vec![
        (
            "route",
            "invalid-argument",
            v1::EnqueueRequest {
                route: None,
                ..good.clone()
            },
        ),
        (
            "owner",
            "invalid-argument",
            v1::EnqueueRequest {
                owner: String::new(),
                ..good.clone()
            },
        ),
        (
            "state",
            "invalid-argument",
            v1::EnqueueRequest {
                state: "not json".to_owned(),
                ..good.clone()
            },
        ),
        (
            "state",
            "invalid-argument",
            v1::EnqueueRequest {
                state: format!("\"{}\"", "x".repeat(64 * 1024)),
                ..good.clone()
            },
        ),
        (
            "event",
            "invalid-argument",
            v1::EnqueueRequest {
                event: "{".to_owned(),
                ..good.clone()
            },
        ),
        (
            "queue",
            "invalid-argument",
            v1::EnqueueRequest {
                queue: QueueType::Unspecified.into(),
                ..good.clone()
            },
        ),
        (
            "queue",
            "invalid-argument",
            v1::EnqueueRequest {
                queue: 7,
                ..good.clone()
            },
        ),
        (
            "external_id",
            "invalid-argument",
            v1::EnqueueRequest {
                external_id: "two words".to_owned(),
                ..good.clone()
            },
        ),
        (
            "metadata.webhook_url",
            "invalid-argument",
            v1::EnqueueRequest {
                metadata: Some(v1::TxMetadata {
                    webhook_url: "ftp://example.com/hook".to_owned(),
                    ..v1::TxMetadata::default()
                }),
                ..good.clone()
            },
        ),
        (
            "pipeline",
            "invalid-argument",
            v1::EnqueueRequest {
                route: Some(Route::Pipeline(String::new())),
                ..good.clone()
            },
        ),
    ];
    for (field, reason, request) in bad_enqueues {
        invalid(on_follower.enqueue(request).await, reason, field);
    }
    let unknown = refused(
        on_follower
            .enqueue(v1::EnqueueRequest {
                route: Some(Route::Pipeline("nope".to_owned())),
                ..good.clone()
            })
            .await,
        Code::NotFound,
        "unknown-pipeline",
    );
    assert!(unknown.message().contains("nope"), "{}", unknown.message());

    // Dequeue.
    for (max, field) in [(0, "max"), (101, "max")] {
        invalid(
            on_other
                .dequeue(v1::DequeueRequest {
                    node_group: "g".to_owned(),
                    worker: "w".to_owned(),
                    max,
                    wait_ms: 0,
                })
                .await,
            "out-of-range",
            field,
        );
    }
    invalid(
        on_other
            .dequeue(v1::DequeueRequest {
                node_group: "g".to_owned(),
                worker: String::new(),
                max: 1,
                wait_ms: 0,
            })
            .await,
        "invalid-argument",
        "worker",
    );

    // GetState.
    let get_state = |transaction_id: u64, external_id: &str| v1::GetStateRequest {
        transaction_id,
        external_id: external_id.to_owned(),
        ..v1::GetStateRequest::default()
    };
    invalid(
        on_leader.get_state(get_state(0, "")).await,
        "invalid-argument",
        "transaction_id",
    );
    invalid(
        on_leader.get_state(get_state(id, "x")).await,
        "invalid-argument",
        "external_id",
    );
    refused(
        on_leader.get_state(get_state(id + 1_000, "")).await,
        Code::NotFound,
        "unknown-transaction",
    );
    refused(
        on_leader.get_state(get_state(0, "never-used")).await,
        Code::NotFound,
        "unknown-transaction",
    );
    invalid(
        on_leader
            .get_state(v1::GetStateRequest {
                after_seq: Some(1_000_000),
                ..get_state(id, "")
            })
            .await,
        "out-of-range",
        "after_seq",
    );

    // Worker steps on the running transaction.
    let complete_request = |token: u64, status: TxStatus| v1::CompleteTransactionRequest {
        transaction_id: id,
        claim_token: token,
        status: status.into(),
        state: String::new(),
    };
    invalid(
        on_other
            .complete(complete_request(0, TxStatus::Success))
            .await,
        "invalid-argument",
        "claim_token",
    );
    let not_terminal = refused(
        on_other
            .complete(complete_request(token, TxStatus::Running))
            .await,
        Code::InvalidArgument,
        "not-terminal",
    );
    assert!(not_terminal.message().contains("running"));
    invalid(
        on_other
            .complete(complete_request(token, TxStatus::Unspecified))
            .await,
        "invalid-argument",
        "status",
    );
    invalid(
        on_other
            .complete(v1::CompleteTransactionRequest {
                transaction_id: 0,
                ..complete_request(token, TxStatus::Success)
            })
            .await,
        "invalid-argument",
        "transaction_id",
    );
    invalid(
        on_other
            .complete(v1::CompleteTransactionRequest {
                state: "[1,".to_owned(),
                ..complete_request(token, TxStatus::Success)
            })
            .await,
        "invalid-argument",
        "state",
    );
    refused(
        on_other
            .complete(v1::CompleteTransactionRequest {
                transaction_id: id + 1_000,
                ..complete_request(token, TxStatus::Success)
            })
            .await,
        Code::NotFound,
        "unknown-transaction",
    );
    refused(
        on_other
            .complete(complete_request(token + 7, TxStatus::Success))
            .await,
        Code::FailedPrecondition,
        "stale-claim",
    );
    invalid(
        on_follower
            .progress(v1::ProgressRequest {
                transaction_id: id,
                claim_token: token,
                report: String::new(),
            })
            .await,
        "invalid-argument",
        "report",
    );
    let requeue = v1::RequeueRequest {
        transaction_id: id,
        claim_token: token,
        route: None,
        queue: QueueType::Out.into(),
        state: String::new(),
        event: String::new(),
    };
    invalid(
        on_follower
            .requeue(v1::RequeueRequest {
                queue: QueueType::Unspecified.into(),
                ..requeue.clone()
            })
            .await,
        "invalid-argument",
        "queue",
    );
    refused(
        on_follower
            .requeue(v1::RequeueRequest {
                route: Some(v1::requeue_request::Route::Pipeline("nope".to_owned())),
                ..requeue.clone()
            })
            .await,
        Code::NotFound,
        "unknown-pipeline",
    );
    let sleep = v1::SleepRequest {
        transaction_id: id,
        claim_token: token,
        wake: Some(Wake::ForMs(1_000)),
        switch: String::new(),
        queue: QueueType::In.into(),
        state: String::new(),
    };
    invalid(
        on_leader
            .sleep(v1::SleepRequest {
                wake: None,
                ..sleep.clone()
            })
            .await,
        "invalid-argument",
        "wake",
    );
    invalid(
        on_leader
            .sleep(v1::SleepRequest {
                wake: Some(Wake::ForMs(2 * 86_400_000)),
                ..sleep.clone()
            })
            .await,
        "out-of-range",
        "for_ms",
    );
    invalid(
        on_leader
            .sleep(v1::SleepRequest {
                wake: Some(Wake::UntilMs(baseline_tx.created_at_ms + 3 * 86_400_000)),
                ..sleep.clone()
            })
            .await,
        "out-of-range",
        "until_ms",
    );
    invalid(
        on_leader
            .sleep(v1::SleepRequest {
                switch: "no spaces".to_owned(),
                ..sleep.clone()
            })
            .await,
        "invalid-argument",
        "switch",
    );

    // Switches, cancel, notices, config, lists, streams.
    invalid(
        on_other
            .set_switch(v1::SetSwitchRequest {
                name: String::new(),
                value: 1,
            })
            .await,
        "invalid-argument",
        "name",
    );
    invalid(
        on_other
            .cancel(v1::CancelRequest { transaction_id: 0 })
            .await,
        "invalid-argument",
        "transaction_id",
    );
    refused(
        on_other
            .cancel(v1::CancelRequest {
                transaction_id: id + 1_000,
            })
            .await,
        Code::NotFound,
        "unknown-transaction",
    );
    invalid(
        on_other
            .acknowledge_notices(v1::AcknowledgeNoticesRequest { up_to: 0 })
            .await,
        "invalid-argument",
        "up_to",
    );
    invalid(
        on_other
            .set_config(v1::SetPipelineConfigRequest { config: None })
            .await,
        "invalid-argument",
        "config",
    );
    let config = baseline_status.config.expect("a config");
    invalid(
        on_other
            .set_config(v1::SetPipelineConfigRequest {
                config: Some(v1::PipelineConfig {
                    max_attempts: 0,
                    ..config
                }),
            })
            .await,
        "invalid-config",
        "max_attempts",
    );
    invalid(
        on_other
            .list_in_play(v1::ListInPlayRequest {
                node_group: String::new(),
                after: 0,
                limit: 0,
            })
            .await,
        "invalid-argument",
        "node_group",
    );
    invalid(
        on_other
            .watch_completions(v1::WatchCompletionsRequest {
                node_group: "g".to_owned(),
                after_seq: Some(1_000_000),
                include_progress: false,
                positions: false,
            })
            .await,
        "out-of-range",
        "after_seq",
    );
    invalid(
        on_other
            .watch_completions(v1::WatchCompletionsRequest {
                node_group: "bad group".to_owned(),
                after_seq: None,
                include_progress: false,
                positions: false,
            })
            .await,
        "invalid-argument",
        "node_group",
    );

    // Nothing changed: the same counts, configuration, definitions and transaction, on
    // every node.
    for config in &configs {
        let mut client = client(config).await;
        assert_eq!(status(&mut client).await, baseline_status);
        assert_eq!(transaction(&mut client, id).await, baseline_tx);
        assert_eq!(list_pipelines(&mut client).await, baseline_pipelines);
    }
    // And the claim still works.
    let done = on_other
        .complete(complete_request(token, TxStatus::Failed))
        .await
        .expect("Pipelines/Complete")
        .into_inner();
    assert_eq!(done.status(), TxStatus::Failed);
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_stream_in_order_and_resume_sleepers_wake_and_stopping_ends_waits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, mut nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;

    // A stream of group "s" from now, on the follower; completions of "t" are not in it.
    let mut stream = watch(&mut on_follower, "s", None).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(
            enqueue(
                &mut on_leader,
                enqueue_request(group("s"), QueueType::In, &format!("{n}")),
            )
            .await,
        );
    }
    enqueue(
        &mut on_leader,
        enqueue_request(group("t"), QueueType::In, "{}"),
    )
    .await;
    let taken = dequeue(&mut on_other, "s", "w", 5).await;
    let elsewhere = dequeue(&mut on_other, "t", "w", 5).await;
    assert_eq!(taken.len(), 5);
    let order = [3, 1, 4, 0, 2];
    let statuses = [
        TxStatus::Success,
        TxStatus::Failed,
        TxStatus::InternalError,
        TxStatus::Success,
        TxStatus::Aborted,
    ];
    for (step, (&index, &status)) in order.iter().zip(&statuses).enumerate() {
        let client = if step % 2 == 0 {
            &mut on_other
        } else {
            &mut on_leader
        };
        complete(client, &taken[index], status, "")
            .await
            .expect("Pipelines/Complete");
        if step == 2 {
            complete(&mut on_other, &elsewhere[0], TxStatus::Success, "")
                .await
                .expect("Pipelines/Complete in t");
        }
    }
    let mut received = Vec::new();
    for _ in 0..5 {
        received.push(next(&mut stream).await);
    }
    let got: Vec<(u64, TxStatus, NotificationKind, &str)> = received
        .iter()
        .map(|item| {
            (
                item.transaction_id,
                item.status(),
                item.kind(),
                item.node_group.as_str(),
            )
        })
        .collect();
    let expected: Vec<(u64, TxStatus, NotificationKind, &str)> = order
        .iter()
        .zip(&statuses)
        .map(|(&index, &status)| (ids[index], status, NotificationKind::Completed, "s"))
        .collect();
    assert_eq!(got, expected, "in completion order, only group s");
    assert!(
        received.windows(2).all(|pair| pair[0].seq < pair[1].seq),
        "numbered in order"
    );

    // Resuming after the second item gives exactly the three after it.
    let mut resumed = watch(&mut on_other, "s", Some(received[1].seq)).await;
    for item in &received[2..] {
        assert_eq!(&next(&mut resumed).await, item);
    }
    // From the oldest kept: everything of s again, in the same order.
    let mut from_start = watch(&mut on_leader, "s", Some(0)).await;
    for item in &received {
        assert_eq!(&next(&mut from_start).await, item);
    }

    // Sleep on a switch: a change of the switch wakes the sleeper at once.
    let id = enqueue(
        &mut on_leader,
        enqueue_request(group("s"), QueueType::In, "{}"),
    )
    .await;
    let held = dequeue(&mut on_other, "s", "w", 1).await.remove(0);
    assert_eq!(held.id, id);
    let asleep = on_follower
        .sleep(v1::SleepRequest {
            transaction_id: id,
            claim_token: held.claim_token,
            wake: Some(Wake::ForMs(3_600_000)),
            switch: "gate".to_owned(),
            queue: QueueType::Out.into(),
            state: r#"{"slept":true}"#.to_owned(),
        })
        .await
        .expect("Pipelines/Sleep")
        .into_inner();
    assert!(asleep.until_ms > held.claim_started_at_ms + 3_000_000);
    let sleeping = transaction(&mut on_leader, id).await;
    assert_eq!(sleeping.status(), TxStatus::Sleeping);
    assert_eq!(sleeping.status_text, "sleeping");
    assert_eq!(sleeping.sleep_switch, "gate");
    assert_eq!(sleeping.wake_queue(), QueueType::Out);
    assert_eq!(depths(&mut on_leader, "s").await, [0, 0, 0, 0, 1]);
    let switch = |name: &str| v1::GetSwitchRequest {
        name: name.to_owned(),
    };
    assert_eq!(
        on_other
            .get_switch(switch("gate"))
            .await
            .expect("GetSwitch")
            .into_inner()
            .value,
        0
    );
    let set = on_other
        .set_switch(v1::SetSwitchRequest {
            name: "gate".to_owned(),
            value: 1,
        })
        .await
        .expect("Pipelines/SetSwitch")
        .into_inner();
    assert_eq!((set.changed, set.woken), (true, vec![id]));
    let woken = transaction(&mut on_follower, id).await;
    assert_eq!(woken.status(), TxStatus::Queued);
    assert_eq!(woken.queue(), QueueType::Out);
    assert_eq!(woken.state, r#"{"slept":true}"#);
    assert_eq!(
        on_leader
            .get_switch(switch("gate"))
            .await
            .expect("GetSwitch")
            .into_inner()
            .value,
        1
    );
    let same = on_leader
        .set_switch(v1::SetSwitchRequest {
            name: "gate".to_owned(),
            value: 1,
        })
        .await
        .expect("Pipelines/SetSwitch again")
        .into_inner();
    assert_eq!((same.changed, same.woken.len()), (false, 0));

    // Sleep until a time: the leader's tick wakes it.
    let held = dequeue(&mut on_other, "s", "w", 1).await.remove(0);
    assert_eq!(held.id, id);
    on_other
        .sleep(v1::SleepRequest {
            transaction_id: id,
            claim_token: held.claim_token,
            wake: Some(Wake::ForMs(300)),
            switch: String::new(),
            queue: QueueType::Admin.into(),
            state: String::new(),
        })
        .await
        .expect("Pipelines/Sleep for a while");
    let slept_at = Instant::now();
    loop {
        let tx = transaction(&mut on_follower, id).await;
        if tx.status() == TxStatus::Queued {
            assert_eq!(tx.queue(), QueueType::Admin);
            break;
        }
        assert_eq!(tx.status(), TxStatus::Sleeping);
        assert!(slept_at.elapsed() < PATIENCE, "the sleeper wakes");
        tokio::time::sleep(POLL).await;
    }
    println!("a 300 ms sleep woke after {:?}", slept_at.elapsed());

    // Cancel: queued → aborted at once; running → flagged until its worker completes it.
    let queued = enqueue(
        &mut on_leader,
        enqueue_request(group("c"), QueueType::In, "{}"),
    )
    .await;
    let cancelled = on_follower
        .cancel(v1::CancelRequest {
            transaction_id: queued,
        })
        .await
        .expect("Pipelines/Cancel")
        .into_inner();
    assert_eq!(cancelled.outcome(), v1::CancelOutcome::Aborted);
    assert_eq!(
        transaction(&mut on_leader, queued).await.status(),
        TxStatus::Aborted
    );
    let running = dequeue(&mut on_other, "s", "w", 1).await.remove(0);
    let cancel = v1::CancelRequest {
        transaction_id: running.id,
    };
    let first = on_follower
        .cancel(cancel)
        .await
        .expect("Cancel")
        .into_inner();
    assert_eq!(first.outcome(), v1::CancelOutcome::Requested);
    let second = on_leader.cancel(cancel).await.expect("Cancel").into_inner();
    assert_eq!(second.outcome(), v1::CancelOutcome::AlreadyRequested);
    let told = on_other
        .progress(v1::ProgressRequest {
            transaction_id: running.id,
            claim_token: running.claim_token,
            report: "true".to_owned(),
        })
        .await
        .expect("Pipelines/Progress")
        .into_inner();
    assert!(told.cancel_requested, "the worker learns of the cancel");
    refused(
        on_other
            .requeue(v1::RequeueRequest {
                transaction_id: running.id,
                claim_token: running.claim_token,
                route: None,
                queue: QueueType::In.into(),
                state: String::new(),
                event: String::new(),
            })
            .await,
        Code::FailedPrecondition,
        "cancel-requested",
    );
    complete(&mut on_other, &running, TxStatus::Aborted, "")
        .await
        .expect("complete as aborted");
    let finished = on_leader.cancel(cancel).await.expect("Cancel").into_inner();
    assert_eq!(
        (finished.outcome(), finished.status()),
        (v1::CancelOutcome::Finished, TxStatus::Aborted)
    );
    // The stream saw the aborted completion (the queued cancel was in group c).
    let item = next(&mut stream).await;
    assert_eq!(
        (item.transaction_id, item.status()),
        (running.id, TxStatus::Aborted)
    );

    // Stopping the follower ends its stream and its long-polls at once, and the stop does not
    // wait for them.
    let waiting_id = enqueue(
        &mut on_leader,
        enqueue_request(group("s"), QueueType::In, "{}"),
    )
    .await;
    let mut poller = on_follower.clone();
    let long_poll = tokio::spawn(async move {
        poller
            .get_state(v1::GetStateRequest {
                transaction_id: waiting_id,
                wait_ms: 60_000,
                ..v1::GetStateRequest::default()
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!long_poll.is_finished());
    let stopping = nodes.remove(follower);
    let stopped_at = Instant::now();
    tokio::time::timeout(Duration::from_secs(15), stopping.shutdown())
        .await
        .expect("the node stops without waiting for its clients");
    println!("the follower stopped in {:?}", stopped_at.elapsed());
    let ended = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the stream ends");
    let reason = |status: &Status| {
        status
            .metadata()
            .get(REASON_KEY)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let ended = ended.expect_err("the stream ends with a status");
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert_eq!(reason(&ended).as_deref(), Some("node-stopping"));
    let polled = tokio::time::timeout(PATIENCE, long_poll)
        .await
        .expect("the long-poll ends")
        .expect("the polling task");
    let cut = polled.expect_err("the long-poll is cut short");
    assert_eq!(cut.code(), Code::Unavailable, "{cut:?}");
    assert_eq!(reason(&cut).as_deref(), Some("node-stopping"));
    shutdown(nodes).await;
}

/// Every item of an archive export, or its refusal.
async fn export(
    client: &mut PipelinesClient<Channel>,
    after: Option<v1::ArchiveCursor>,
    limit: u32,
) -> Vec<v1::ArchivedTransaction> {
    let mut stream = client
        .export_archive(v1::ExportArchiveRequest { after, limit })
        .await
        .expect("Pipelines/ExportArchive")
        .into_inner();
    let mut items = Vec::new();
    while let Some(item) = tokio::time::timeout(PATIENCE, stream.message())
        .await
        .expect("the export sends within its patience")
        .expect("the export is healthy")
    {
        items.push(item);
    }
    items
}

fn ids_of(items: &[v1::ArchivedTransaction]) -> Vec<u64> {
    items
        .iter()
        .map(|item| item.transaction.as_ref().expect("a transaction").id)
        .collect()
}

/// Exports from the oldest until `count` transactions come back.
async fn exported(
    client: &mut PipelinesClient<Channel>,
    count: usize,
) -> Vec<v1::ArchivedTransaction> {
    let started = Instant::now();
    loop {
        let items = export(client, None, 1_000).await;
        if items.len() >= count {
            return items;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{count} archived in time; got {}",
            items.len()
        );
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_transactions_are_archived_and_exported_in_order_from_a_cursor() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;
    let config = on_leader
        .get_config(v1::GetPipelineConfigRequest {})
        .await
        .expect("Pipelines/GetConfig")
        .into_inner();
    on_leader
        .set_config(v1::SetPipelineConfigRequest {
            config: Some(v1::PipelineConfig {
                archive_delay_ms: 0,
                ..config
            }),
        })
        .await
        .expect("Pipelines/SetConfig");

    // Three finish with a status and state each; one is cancelled while queued.
    let mut ids = Vec::new();
    for n in 0..3 {
        let mut request = enqueue_request(group("a"), QueueType::In, &format!("{{\"n\":{n}}}"));
        request.external_id = format!("order-{n}");
        ids.push(enqueue(&mut on_follower, request).await);
    }
    let cancelled = enqueue(
        &mut on_follower,
        enqueue_request(group("b"), QueueType::In, "[]"),
    )
    .await;
    on_other
        .cancel(v1::CancelRequest {
            transaction_id: cancelled,
        })
        .await
        .expect("Pipelines/Cancel");
    let taken = dequeue(&mut on_other, "a", "w", 3).await;
    for (tx, status) in
        taken
            .iter()
            .zip([TxStatus::Success, TxStatus::Failed, TxStatus::InternalError])
    {
        complete(
            &mut on_other,
            tx,
            status,
            &format!("{{\"done\":{}}}", tx.id),
        )
        .await
        .expect("Pipelines/Complete");
    }

    // Archived by the tick, exported from any node once the clock has moved past it.
    let all = exported(&mut on_follower, 4).await;
    assert_eq!(all.len(), 4, "{all:?}");
    let mut expected: Vec<u64> = ids.iter().copied().chain([cancelled]).collect();
    expected.sort_unstable();
    let mut got = ids_of(&all);
    got.sort_unstable();
    assert_eq!(got, expected, "each archived transaction once");
    let key = |item: &v1::ArchivedTransaction| {
        let cursor = item.cursor.expect("a cursor");
        (cursor.archived_at_ms, cursor.transaction_id)
    };
    for pair in all.windows(2) {
        assert!(key(&pair[0]) < key(&pair[1]), "archive order: {pair:?}");
    }
    for item in &all {
        let tx = item.transaction.as_ref().expect("a transaction");
        assert_eq!(key(item), (tx.archived_at_ms, tx.id));
        assert!(tx.archived_at_ms >= tx.completed_at_ms && tx.completed_at_ms > 0);
        if tx.id == cancelled {
            assert_eq!((tx.status(), tx.state.as_str()), (TxStatus::Aborted, "[]"));
        } else {
            let n = ids.iter().position(|id| *id == tx.id).expect("one of ours");
            assert_eq!(tx.external_id, format!("order-{n}"));
            assert_eq!(tx.state, format!("{{\"done\":{}}}", tx.id));
            assert_eq!(tx.attempts, 1);
            assert!(tx.status_text != "running" && !tx.status_text.is_empty());
        }
    }
    assert_eq!(
        ids_of(&export(&mut on_leader, None, 1_000).await),
        ids_of(&all),
        "every node exports the same"
    );

    // Paging with a cursor: each page resumes after the last item of the one before.
    let first = export(&mut on_other, None, 3).await;
    assert_eq!(ids_of(&first), ids_of(&all[..3]));
    let rest = export(&mut on_leader, first[2].cursor, 3).await;
    assert_eq!(ids_of(&rest), ids_of(&all[3..]), "the rest, nothing twice");
    let last = all[3].cursor;
    assert!(
        export(&mut on_follower, last, 3).await.is_empty(),
        "caught up"
    );
    // A cursor at a time with id 0 starts at that time.
    let from_time = v1::ArchiveCursor {
        archived_at_ms: all[1].cursor.expect("a cursor").archived_at_ms,
        transaction_id: 0,
    };
    let from_second = export(&mut on_follower, Some(from_time), 1_000).await;
    assert!(ids_of(&from_second).ends_with(&ids_of(&all[1..])));

    // What is archived later comes after the cursor handed out.
    let late = enqueue(
        &mut on_follower,
        enqueue_request(group("a"), QueueType::Out, "{}"),
    )
    .await;
    let taken = dequeue(&mut on_other, "a", "w", 1).await;
    complete(&mut on_other, &taken[0], TxStatus::Success, "")
        .await
        .expect("Pipelines/Complete");
    let started = Instant::now();
    let news = loop {
        let news = export(&mut on_other, last, 1_000).await;
        if !news.is_empty() || started.elapsed() > PATIENCE {
            break news;
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(ids_of(&news), [late]);

    // Bad input: the limit and a cursor no export handed out.
    for limit in [0, 1_000_001] {
        invalid(
            on_follower
                .export_archive(v1::ExportArchiveRequest { after: None, limit })
                .await,
            "out-of-range",
            "limit",
        );
    }
    invalid(
        on_other
            .export_archive(v1::ExportArchiveRequest {
                after: Some(v1::ArchiveCursor {
                    archived_at_ms: u64::MAX,
                    transaction_id: 1,
                }),
                limit: 10,
            })
            .await,
        "out-of-range",
        "after.archived_at_ms",
    );
    shutdown(nodes).await;
}

/// The item error of a batch item or a Work step, checked for its code and reason.
fn item_refused(error: Option<&v1::ItemError>, code: Code, reason: &str) {
    let error = error.unwrap_or_else(|| panic!("expected {code:?} {reason}, got a result"));
    assert_eq!(
        (Code::from_i32(error.code), error.reason.as_str()),
        (code, reason),
        "{error:?}"
    );
}

/// The transaction each item of an `EnqueueBatch` answered with (`None`: the item's error).
fn enqueue_items(reply: &v1::EnqueueBatchReply) -> Vec<Result<&v1::EnqueueReply, &v1::ItemError>> {
    use v1::enqueue_item_result::Result as Item;
    reply
        .items
        .iter()
        .map(
            |item| match item.result.as_ref().expect("every item is answered") {
                Item::Enqueued(reply) => Ok(reply),
                Item::Error(error) => Err(error),
            },
        )
        .collect()
}

fn complete_items(
    reply: &v1::CompleteBatchReply,
) -> Vec<Result<&v1::CompleteTransactionReply, &v1::ItemError>> {
    use v1::complete_item_result::Result as Item;
    reply
        .items
        .iter()
        .map(
            |item| match item.result.as_ref().expect("every item is answered") {
                Item::Completed(reply) => Ok(reply),
                Item::Error(error) => Err(error),
            },
        )
        .collect()
}

fn completion(
    tx: &v1::Transaction,
    token: u64,
    status: TxStatus,
) -> v1::CompleteTransactionRequest {
    v1::CompleteTransactionRequest {
        transaction_id: tx.id,
        claim_token: token,
        status: status.into(),
        state: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_item_by_item_and_refused_whole_only_when_malformed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut operator = client(&configs[leader]).await;
    let mut producer = client(&configs[follower]).await;
    let mut worker = client(&configs[other]).await;
    operator
        .define_pipeline(v1::DefinePipelineRequest {
            name: "billing".to_owned(),
            node_group: "b".to_owned(),
        })
        .await
        .expect("Pipelines/DefinePipeline");

    // Each item is its own enqueue: an unknown pipeline fails its item only, and an external id
    // repeated within the batch answers the first item's transaction.
    let keyed = v1::EnqueueRequest {
        external_id: "order-7".to_owned(),
        ..enqueue_request(Route::Pipeline("billing".to_owned()), QueueType::In, "1")
    };
    let reply = producer
        .enqueue_batch(v1::EnqueueBatchRequest {
            items: vec![
                keyed.clone(),
                enqueue_request(Route::Pipeline("nowhere".to_owned()), QueueType::In, "2"),
                keyed,
                enqueue_request(group("b"), QueueType::Admin, "3"),
            ],
        })
        .await
        .expect("Pipelines/EnqueueBatch")
        .into_inner();
    let items = enqueue_items(&reply);
    assert_eq!(items.len(), 4, "{reply:?}");
    let first = items[0].expect("the first item is enqueued");
    assert!(!first.duplicate);
    item_refused(items[1].err(), Code::NotFound, "unknown-pipeline");
    let repeat = items[2].expect("the repeat answers the first");
    assert_eq!(
        (repeat.transaction_id, repeat.duplicate),
        (first.transaction_id, true)
    );
    let direct = items[3].expect("the last item is enqueued");
    assert_ne!(direct.transaction_id, first.transaction_id);
    assert_eq!(depths(&mut operator, "b").await, [1, 0, 1, 0, 0]);

    // Refused whole, before Raft, with nothing enqueued: no item, too many, one malformed.
    let before = status(&mut operator).await.transactions;
    for (items, reason, field) in [
        (Vec::new(), "out-of-range", "items"),
        (
            vec![enqueue_request(group("b"), QueueType::In, "{}"); 257],
            "out-of-range",
            "items",
        ),
        (
            vec![
                enqueue_request(group("b"), QueueType::In, "{}"),
                enqueue_request(group("b"), QueueType::In, "{not json"),
            ],
            "invalid-argument",
            "items[1].state",
        ),
    ] {
        invalid(
            producer
                .enqueue_batch(v1::EnqueueBatchRequest { items })
                .await,
            reason,
            field,
        );
    }
    assert_eq!(status(&mut operator).await.transactions, before);

    // A stale token fails its item, not the batch; a repeat answers the same.
    let running = dequeue(&mut worker, "b", "w-1", 2).await;
    assert_eq!(running.len(), 2);
    let token = running[0].claim_token;
    let batch = v1::CompleteBatchRequest {
        items: vec![
            completion(&running[0], token, TxStatus::Success),
            completion(&running[1], token + 1, TxStatus::Success),
            v1::CompleteTransactionRequest {
                transaction_id: 999_999,
                ..completion(&running[0], token, TxStatus::Failed)
            },
        ],
    };
    let reply = worker
        .complete_batch(batch.clone())
        .await
        .expect("Pipelines/CompleteBatch")
        .into_inner();
    let items = complete_items(&reply);
    let done = items[0].expect("the current token completes");
    assert_eq!(
        (done.transaction_id, done.status()),
        (running[0].id, TxStatus::Success)
    );
    item_refused(items[1].err(), Code::FailedPrecondition, "stale-claim");
    item_refused(items[2].err(), Code::NotFound, "unknown-transaction");
    assert_eq!(
        transaction(&mut producer, running[0].id).await.status(),
        TxStatus::Success
    );
    assert_eq!(
        transaction(&mut producer, running[1].id).await.status(),
        TxStatus::Running
    );
    let again = worker
        .complete_batch(batch)
        .await
        .expect("Pipelines/CompleteBatch again")
        .into_inner();
    assert_eq!(again, reply, "a repeated batch is answered the same");
    invalid(
        worker
            .complete_batch(v1::CompleteBatchRequest {
                items: vec![completion(&running[1], token, TxStatus::Running)],
            })
            .await,
        "not-terminal",
        "",
    );
    assert_eq!(
        transaction(&mut producer, running[1].id).await.status(),
        TxStatus::Running
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_dequeue_takes_work_enqueued_after_it_started_or_ends_empty() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, mut nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut producer = client(&configs[leader]).await;
    let waiter = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;
    let waiting = |wait_ms: u64, node_group: &str| v1::DequeueRequest {
        node_group: node_group.to_owned(),
        worker: "w-1".to_owned(),
        max: 10,
        wait_ms,
    };

    // Nothing queued: empty at the deadline, not before.
    let started = Instant::now();
    let reply = waiter
        .clone()
        .dequeue(waiting(400, "idle"))
        .await
        .expect("Pipelines/Dequeue")
        .into_inner();
    let waited = started.elapsed();
    assert!(reply.transactions.is_empty(), "{reply:?}");
    assert!(
        waited >= Duration::from_millis(400),
        "answered after {waited:?}"
    );

    // A wait past the bound is refused before anything happens.
    invalid(
        on_other.dequeue(waiting(60_001, "idle")).await,
        "out-of-range",
        "wait_ms",
    );

    // A waiting dequeue returns the transaction enqueued after it started, long before its
    // deadline.
    let mut polling = waiter.clone();
    let started = Instant::now();
    let poll = tokio::spawn(async move { polling.dequeue(waiting(30_000, "lp")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poll.is_finished(),
        "the dequeue waits while nothing is queued"
    );
    let id = enqueue(
        &mut producer,
        enqueue_request(group("lp"), QueueType::In, "{}"),
    )
    .await;
    let taken = tokio::time::timeout(PATIENCE, poll)
        .await
        .expect("the dequeue answers")
        .expect("the polling task")
        .expect("Pipelines/Dequeue")
        .into_inner();
    assert_eq!(ids(&taken.transactions), [id]);
    assert_eq!(taken.transactions[0].worker, "w-1");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    assert_eq!(depths(&mut on_other, "lp").await, [0, 0, 0, 1, 0]);

    // Stopping the node ends a waiting dequeue with node-stopping.
    let mut polling = waiter.clone();
    let poll = tokio::spawn(async move { polling.dequeue(waiting(60_000, "lp")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished());
    nodes.remove(follower).shutdown().await;
    let cut = tokio::time::timeout(PATIENCE, poll)
        .await
        .expect("the dequeue ends")
        .expect("the polling task");
    refused(cut, Code::Unavailable, "node-stopping");
    shutdown(nodes).await;
}

fn ids(transactions: &[v1::Transaction]) -> Vec<u64> {
    transactions.iter().map(|tx| tx.id).collect()
}

/// A worker's side of a raw `Work` stream: what it sends, and what the node pushed.
struct RawWorker {
    send: tokio::sync::mpsc::Sender<v1::WorkRequest>,
    events: Streaming<v1::WorkEvent>,
}

impl RawWorker {
    /// Opens a Work stream on `client` whose first message is `first`.
    async fn open(
        client: &mut PipelinesClient<Channel>,
        first: v1::WorkRequest,
    ) -> Result<RawWorker, Status> {
        let (send, receive) = tokio::sync::mpsc::channel(16);
        send.send(first).await.expect("queued");
        let outbound = futures_util::stream::unfold(receive, |mut receive| async move {
            receive.recv().await.map(|request| (request, receive))
        });
        let events = client.work(outbound).await?.into_inner();
        Ok(RawWorker { send, events })
    }

    async fn send(&self, kind: v1::work_request::Kind) {
        self.send
            .send(v1::WorkRequest { kind: Some(kind) })
            .await
            .expect("the stream takes messages");
    }

    async fn grant(&self, credit: u32) {
        self.send(v1::work_request::Kind::Credit(credit)).await;
    }

    async fn step(&self, step_id: u64, kind: v1::work_step::Kind) {
        self.send(v1::work_request::Kind::Step(v1::WorkStep {
            step_id,
            kind: Some(kind),
        }))
        .await;
    }

    /// The next event within `within`, `None` if there is none by then.
    async fn event_within(&mut self, within: Duration) -> Option<v1::work_event::Kind> {
        let event = tokio::time::timeout(within, self.events.message())
            .await
            .ok()?;
        Some(
            event
                .expect("the stream is healthy")
                .expect("the stream goes on")
                .kind
                .expect("an event names its kind"),
        )
    }

    async fn claim(&mut self) -> v1::Transaction {
        match self.event_within(PATIENCE).await {
            Some(v1::work_event::Kind::Claim(tx)) => tx,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    async fn result(&mut self) -> v1::WorkStepResult {
        match self.event_within(PATIENCE).await {
            Some(v1::work_event::Kind::Step(result)) => result,
            other => panic!("expected a step result, got {other:?}"),
        }
    }
}

fn start(node_group: &str, credit: u32) -> v1::WorkRequest {
    v1::WorkRequest {
        kind: Some(v1::work_request::Kind::Start(v1::WorkStart {
            node_group: node_group.to_owned(),
            worker: "stream-1".to_owned(),
            credit,
        })),
    }
}

fn complete_step(tx: &v1::Transaction) -> v1::work_step::Kind {
    v1::work_step::Kind::Complete(completion(tx, tx.claim_token, TxStatus::Success))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_stream_pushes_claims_within_its_credit_and_answers_steps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut producer = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;
    let quiet = Duration::from_millis(500);

    // A stream must start with `start`.
    refused(
        RawWorker::open(
            &mut on_follower,
            v1::WorkRequest {
                kind: Some(v1::work_request::Kind::Credit(1)),
            },
        )
        .await
        .map(|worker| Response::new(worker.events)),
        Code::InvalidArgument,
        "invalid-argument",
    );

    // Credit 1: the stream waits for work, then pushes one claim and no more.
    let mut worker = RawWorker::open(&mut on_follower, start("ws", 1))
        .await
        .expect("Pipelines/Work");
    assert!(
        worker.event_within(quiet).await.is_none(),
        "nothing is queued yet"
    );
    let mut queued = Vec::new();
    for n in 0..3 {
        let request = enqueue_request(group("ws"), QueueType::In, &n.to_string());
        queued.push(enqueue(&mut producer, request).await);
    }
    let first = worker.claim().await;
    assert_eq!((first.id, first.worker.as_str()), (queued[0], "stream-1"));
    assert_eq!(first.status(), TxStatus::Running);
    assert!(
        worker.event_within(quiet).await.is_none(),
        "one credit, one claim"
    );
    assert_eq!(depths(&mut on_other, "ws").await, [0, 0, 2, 1, 0]);

    // A step is answered with its id; completing gives no credit back by itself.
    worker.step(7, complete_step(&first)).await;
    let result = worker.result().await;
    assert_eq!(result.step_id, 7);
    let Some(v1::work_step_result::Result::Complete(done)) = result.result else {
        panic!("a completion: {result:?}");
    };
    assert_eq!(
        (done.transaction_id, done.status()),
        (first.id, TxStatus::Success)
    );
    assert!(worker.event_within(quiet).await.is_none(), "no credit left");

    // One more credit, one more claim.
    worker.grant(1).await;
    let second = worker.claim().await;
    assert_eq!(second.id, queued[1]);
    // A stale token and a malformed step fail their steps only; the stream goes on.
    let mut stale = second.clone();
    stale.claim_token += 1;
    worker.step(8, complete_step(&stale)).await;
    let result = worker.result().await;
    assert_eq!(result.step_id, 8);
    let Some(v1::work_step_result::Result::Error(error)) = &result.result else {
        panic!("a refusal: {result:?}");
    };
    item_refused(Some(error), Code::FailedPrecondition, "stale-claim");
    let mut nameless = second.clone();
    nameless.id = 0;
    worker.step(9, complete_step(&nameless)).await;
    let result = worker.result().await;
    let Some(v1::work_step_result::Result::Error(error)) = &result.result else {
        panic!("a refusal: {result:?}");
    };
    assert_eq!(result.step_id, 9);
    item_refused(Some(error), Code::InvalidArgument, "invalid-argument");
    worker
        .step(
            10,
            v1::work_step::Kind::Progress(v1::ProgressRequest {
                transaction_id: second.id,
                claim_token: second.claim_token,
                report: r#"{"half":true}"#.to_owned(),
            }),
        )
        .await;
    let result = worker.result().await;
    assert!(
        matches!(
            result.result,
            Some(v1::work_step_result::Result::Progress(_))
        ),
        "{result:?}"
    );
    assert_eq!(
        transaction(&mut producer, second.id).await.status(),
        TxStatus::Running
    );

    // Credit past the bound ends the stream with out-of-range.
    worker.grant(2000).await;
    let ended = tokio::time::timeout(PATIENCE, async {
        loop {
            match worker.events.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream ends");
    refused(
        ended.map(Response::new),
        Code::InvalidArgument,
        "out-of-range",
    );

    // A new stream (on another node) goes on with what is queued; the broken stream's claim
    // stays running until its steps arrive or the reaper takes it back.
    let mut again = RawWorker::open(&mut on_other, start("ws", 5))
        .await
        .expect("Pipelines/Work");
    let third = again.claim().await;
    assert_eq!(third.id, queued[2]);
    assert_eq!(
        transaction(&mut producer, second.id).await.status(),
        TxStatus::Running
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_completion_stream_reports_its_position_past_other_groups() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, _) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let start_seq = status(&mut on_leader).await.last_notification_seq;
    let mut stream = on_follower
        .watch_completions(v1::WatchCompletionsRequest {
            node_group: "mine".to_owned(),
            after_seq: None,
            include_progress: false,
            positions: true,
        })
        .await
        .expect("Pipelines/WatchCompletions")
        .into_inner();
    // The stream says where it starts.
    let opening = next(&mut stream).await;
    assert_eq!(opening.kind(), NotificationKind::Position);
    assert_eq!(opening.seq, start_seq);

    // Completions of another group are not sent, but the position moves past them.
    for _ in 0..3 {
        let id = enqueue(
            &mut on_leader,
            enqueue_request(group("theirs"), QueueType::In, "{}"),
        )
        .await;
        let tx = dequeue(&mut on_leader, "theirs", "w", 1).await.remove(0);
        assert_eq!(tx.id, id);
        complete(&mut on_leader, &tx, TxStatus::Success, "")
            .await
            .expect("complete");
    }
    let theirs_seq = status(&mut on_leader).await.last_notification_seq;
    assert!(theirs_seq >= start_seq + 3, "{start_seq} → {theirs_seq}");
    let mut position = opening.seq;
    while position < theirs_seq {
        let item = next(&mut stream).await;
        assert_eq!(
            item.kind(),
            NotificationKind::Position,
            "only positions: {item:?}"
        );
        assert!(
            item.seq > position,
            "positions grow: {} after {position}",
            item.seq
        );
        position = item.seq;
    }
    assert_eq!(position, theirs_seq);

    // A completion of its own group comes as before, numbered after the position.
    let id = enqueue(
        &mut on_leader,
        enqueue_request(group("mine"), QueueType::In, "{}"),
    )
    .await;
    let tx = dequeue(&mut on_leader, "mine", "w", 1).await.remove(0);
    complete(&mut on_leader, &tx, TxStatus::Failed, "")
        .await
        .expect("complete");
    let item = next(&mut stream).await;
    assert_eq!(
        (item.kind(), item.transaction_id, item.status()),
        (NotificationKind::Completed, id, TxStatus::Failed)
    );
    assert_eq!(item.seq, theirs_seq + 1);
    shutdown(nodes).await;
}
