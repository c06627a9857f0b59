//! The pipeline producers: each enqueues transactions with external ids — one by one
//! (`Enqueue`), or, for a share of the producers drawn from the seed, in batches of 2 to
//! `batch_items_max` (`EnqueueBatch`, each item its own external id, now and then one item twice)
//! — sends some again with the same external ids (one by one, or as a batch of some of the
//! batch's items), cancels some, long-polls for each result and re-reads some once archived. A
//! batch's items are recorded one by one, exactly as unary enqueues are.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use certus_proto::v1;

use super::checkers::{Enqueued, Polled, TxResult, is_terminal};
use super::webhooks::receiver_url;
use super::workload::{Context, FIRST_GROUP, PIPELINE, cancel};
use crate::schedule::SeedRng;

/// Enqueues transactions while the run allows, up to `in_flight` at once (a batch may take a
/// producer past it: it is sent whole when fewer are in flight).
pub(super) async fn produce(index: u32, context: Context) {
    context.wait_configured().await;
    let mut rng = SeedRng::new(context.seed, 800 + u64::from(index));
    let batches = rng.chance(context.workload.batch_producer_per_mille);
    context.shared.with(|history| {
        history.paths.push(format!(
            "producer {index}: {}",
            if batches { "EnqueueBatch" } else { "Enqueue" }
        ));
    });
    // Each task with the number of transactions it carries.
    let mut running: Vec<(madsim::task::JoinHandle<()>, usize)> = Vec::new();
    let mut number = 0u64;
    while !context.stopping() && context.now_ms() < context.enqueue_until_ms.load(Ordering::SeqCst)
    {
        running.retain(|(task, _)| !task.is_finished());
        let in_flight: usize = running.iter().map(|(_, count)| count).sum();
        if in_flight < context.workload.in_flight {
            let tx_rng = SeedRng::new(context.seed, rng.next_u64());
            if batches {
                let items = rng.between(2, context.workload.batch_items_max.max(2));
                let first = number + 1;
                number += items;
                running.push((
                    madsim::task::spawn(one_batch(index, first..=number, context.clone(), tx_rng)),
                    usize::try_from(items).expect("a small batch"),
                ));
            } else {
                number += 1;
                running.push((
                    madsim::task::spawn(one_transaction(index, number, context.clone(), tx_rng)),
                    1,
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
    }
    for (task, _) in running {
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

/// Transaction `number` of `producer`: its enqueue request (external id `x-p{producer}-n{number}`,
/// a random route, queue and value, and a webhook now and then).
fn transaction_request(
    context: &Context,
    rng: &mut SeedRng,
    producer: u32,
    number: u64,
) -> v1::EnqueueRequest {
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
    v1::EnqueueRequest {
        owner: format!("producer-{producer}"),
        external_id: format!("x-p{producer}-n{number}"),
        route: Some(route),
        queue: queue.into(),
        state: format!(r#"{{"p":{producer},"n":{number},"v":{value},"hops":0,"slept":0}}"#),
        event: r#"{"do":"work"}"#.to_owned(),
        metadata,
    }
}

/// Records an acknowledged enqueue of `request` (and its webhook URL, if it has one).
fn acknowledged(
    context: &Context,
    producer: u32,
    request: &v1::EnqueueRequest,
    reply: &v1::EnqueueReply,
    invoked_ms: u64,
) {
    record_enqueue(context, producer, &request.external_id, reply, invoked_ms);
    if let Some(metadata) = &request.metadata {
        context.shared.with(|history| {
            history
                .webhooks
                .insert(reply.transaction_id, metadata.webhook_url.clone());
        });
    }
}

/// One transaction from its enqueue (retried under its external id until answered, and now and
/// then sent again) to its result (long-polled), and sometimes a re-read once it is archived.
async fn one_transaction(producer: u32, number: u64, context: Context, mut rng: SeedRng) {
    let request = transaction_request(&context, &mut rng, producer, number);
    let mut transaction = None;
    while transaction.is_none() && !context.stopping() {
        let invoked_ms = context.now_ms();
        match enqueue_once(&context, &mut rng, &request).await {
            Ok(reply) => {
                transaction = Some(reply.transaction_id);
                acknowledged(&context, producer, &request, &reply, invoked_ms);
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
                    record_enqueue(&context, producer, &request.external_id, &reply, invoked_ms);
                    break;
                }
                Err(true) => return,
                Err(false) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    after_enqueue(producer, transaction, context, rng).await;
}

/// What follows an acknowledged enqueue: now and then a cancel, then a long-poll for the result,
/// and now and then a re-read once it is archived.
async fn after_enqueue(producer: u32, transaction: u64, context: Context, mut rng: SeedRng) {
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

/// One `EnqueueBatch` call; `Err(true)` when the answer says the request was invalid (or does
/// not answer every item).
async fn enqueue_batch_once(
    context: &Context,
    rng: &mut SeedRng,
    items: &[v1::EnqueueRequest],
) -> Result<Vec<v1::enqueue_item_result::Result>, bool> {
    context.shared.with(|history| {
        history.enqueue_calls += 1;
        history.enqueue_batch_calls += 1;
    });
    let node = rng.between(1, context.nodes);
    let Some(mut client) = context
        .connect(node, context.workload.attempt_timeout)
        .await
    else {
        return Err(false);
    };
    let request = v1::EnqueueBatchRequest {
        items: items.to_vec(),
    };
    match client.enqueue_batch(request).await {
        Ok(reply) => {
            let results: Vec<_> = reply
                .into_inner()
                .items
                .into_iter()
                .map(|item| item.result)
                .collect();
            if results.len() != items.len() || results.iter().any(Option::is_none) {
                context.violation(format!(
                    "node {node} answered an enqueue batch of {} items with {} results: {:?}",
                    items.len(),
                    results.len(),
                    results
                ));
                return Err(true);
            }
            Ok(results.into_iter().flatten().collect())
        }
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            context.violation(format!(
                "node {node} refused a valid enqueue batch ({} items, the first {}): {}",
                items.len(),
                items.first().map_or("", |item| item.external_id.as_str()),
                status.message()
            ));
            Err(true)
        }
        Err(_) => Err(false),
    }
}

/// Records the answer to an enqueue batch item by item, as unary enqueues are recorded; the
/// transaction each acknowledged item got, by external id.
fn record_batch(
    context: &Context,
    producer: u32,
    items: &[v1::EnqueueRequest],
    results: &[v1::enqueue_item_result::Result],
    invoked_ms: u64,
) -> BTreeMap<String, u64> {
    let mut transactions = BTreeMap::new();
    for (request, result) in items.iter().zip(results) {
        match result {
            v1::enqueue_item_result::Result::Enqueued(reply) => {
                acknowledged(context, producer, request, reply, invoked_ms);
                context.shared.with(|history| history.batched_enqueues += 1);
                transactions.insert(request.external_id.clone(), reply.transaction_id);
            }
            v1::enqueue_item_result::Result::Error(error) => context.violation(format!(
                "a valid item of an enqueue batch ({}) was refused: {} {}",
                request.external_id, error.reason, error.message
            )),
        }
    }
    transactions
}

/// The transactions `numbers` of `producer`, enqueued in one batch (sent again until answered;
/// now and then with one item twice, and now and then some items sent again in another batch),
/// then each followed to its result as [`one_transaction`] does.
async fn one_batch(
    producer: u32,
    numbers: std::ops::RangeInclusive<u64>,
    context: Context,
    mut rng: SeedRng,
) {
    let requests: Vec<v1::EnqueueRequest> = numbers
        .map(|number| transaction_request(&context, &mut rng, producer, number))
        .collect();
    let mut items = requests.clone();
    if rng.chance(context.workload.batch_repeat_per_mille) {
        // One item twice in the batch, as a producer that merged a retry into the next batch
        // would send it: the copy is answered as a duplicate of the item before it.
        let last = u64::try_from(requests.len() - 1).expect("a short batch");
        let copy = requests[usize::try_from(rng.between(0, last)).expect("an index")].clone();
        let at = rng.between(0, u64::try_from(items.len()).expect("a short batch"));
        items.insert(usize::try_from(at).expect("an index"), copy);
    }
    let mut transactions = None;
    while transactions.is_none() && !context.stopping() {
        let invoked_ms = context.now_ms();
        match enqueue_batch_once(&context, &mut rng, &items).await {
            Ok(results) => {
                transactions = Some(record_batch(
                    &context, producer, &items, &results, invoked_ms,
                ));
            }
            Err(true) => return,
            Err(false) => {
                tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
            }
        }
    }
    let Some(transactions) = transactions else {
        return;
    };
    if rng.chance(context.workload.resend_per_mille) {
        // A producer that did not trust some of the answers sends those items again, as a
        // batch (a few attempts at most).
        tokio::time::sleep(Duration::from_millis(rng.between(0, 3_000))).await;
        let mut again: Vec<v1::EnqueueRequest> = requests
            .iter()
            .filter(|_| rng.chance(500))
            .cloned()
            .collect();
        if again.is_empty() {
            let last = u64::try_from(requests.len() - 1).expect("a short batch");
            again.push(requests[usize::try_from(rng.between(0, last)).expect("an index")].clone());
        }
        for _ in 0..3 {
            if context.stopping() {
                break;
            }
            let invoked_ms = context.now_ms();
            match enqueue_batch_once(&context, &mut rng, &again).await {
                Ok(results) => {
                    record_batch(&context, producer, &again, &results, invoked_ms);
                    break;
                }
                Err(true) => return,
                Err(false) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    let mut followed = Vec::new();
    for request in &requests {
        if let Some(&transaction) = transactions.get(&request.external_id) {
            let tx_rng = SeedRng::new(context.seed, rng.next_u64());
            followed.push(madsim::task::spawn(after_enqueue(
                producer,
                transaction,
                context.clone(),
                tx_rng,
            )));
        }
    }
    for task in followed {
        let _ = task.await;
    }
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
