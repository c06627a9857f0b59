//! `bench pipelines --batch N`: a client's round of N cycles in three calls — one
//! `EnqueueBatch` of N transactions, one `Dequeue` of up to N, one `CompleteBatch` of what it
//! took — so each step of the N cycles is one Raft entry.
//!
//! Items are answered one by one: a refused item is an error of its kind and the others go on.
//! The dequeue must take exactly the transactions just enqueued (the client owns its node
//! group); whatever it took is completed, so a transaction left by a failed round does not
//! block the next ones, and every acknowledged success is counted.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::{
    CompleteBatchRequest, DequeueRequest, EnqueueBatchRequest, TxStatus, complete_item_result,
    enqueue_item_result,
};
use tonic::transport::Channel;

use super::{Failure, Round, enqueue_request, success};

/// Enqueue, dequeue and complete `size` transactions of `node_group`, numbered from `first`.
pub(super) async fn round(
    grpc: &mut PipelinesClient<Channel>,
    node_group: &str,
    worker: &str,
    first: u64,
    size: u32,
) -> Round {
    let items = (first..first + u64::from(size))
        .map(|n| enqueue_request(node_group, n))
        .collect();
    let began = Instant::now();
    let reply = match grpc.enqueue_batch(EnqueueBatchRequest { items }).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => return Round::failed(Failure::status("enqueue", &status)),
    };
    let enqueue = began.elapsed();
    let mut round = Round::default();
    if reply.items.len() != size as usize {
        round.failures.push(Failure::other(
            "enqueue",
            "items answered",
            format!("{} items answered for {size}", reply.items.len()),
        ));
    }
    let mut enqueued = BTreeSet::new();
    for item in reply.items {
        match item.result {
            Some(enqueue_item_result::Result::Enqueued(reply)) => {
                enqueued.insert(reply.transaction_id);
            }
            Some(enqueue_item_result::Result::Error(error)) => {
                round.failures.push(Failure::item("enqueue", &error));
            }
            None => round.failures.push(Failure::other(
                "enqueue",
                "an empty item",
                "an item answered with neither a result nor an error".to_owned(),
            )),
        }
    }
    if enqueued.is_empty() {
        return round;
    }

    let began = Instant::now();
    let request = DequeueRequest {
        node_group: node_group.to_owned(),
        worker: worker.to_owned(),
        // At most `size`, which the caller bounds by the dequeue's maximum.
        max: u32::try_from(enqueued.len()).expect("at most a batch"),
        wait_ms: 0,
    };
    let dequeued = match grpc.dequeue(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => {
            round.failures.push(Failure::status("dequeue", &status));
            return round;
        }
    };
    let dequeue = began.elapsed();
    let taken: BTreeSet<u64> = dequeued.transactions.iter().map(|tx| tx.id).collect();
    if taken != enqueued {
        round.failures.push(Failure::other(
            "dequeue",
            "other transactions",
            format!(
                "took {} transactions, {} of the {} just enqueued",
                taken.len(),
                taken.intersection(&enqueued).count(),
                enqueued.len()
            ),
        ));
    }
    if dequeued.transactions.is_empty() {
        return round;
    }

    let items = dequeued
        .transactions
        .iter()
        .map(|tx| success(tx.id, tx.claim_token))
        .collect();
    let began = Instant::now();
    let reply = match grpc.complete_batch(CompleteBatchRequest { items }).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => {
            round.failures.push(Failure::status("complete", &status));
            return round;
        }
    };
    let complete = began.elapsed();
    if reply.items.len() != dequeued.transactions.len() {
        round.failures.push(Failure::other(
            "complete",
            "items answered",
            format!(
                "{} items answered for {}",
                reply.items.len(),
                dequeued.transactions.len()
            ),
        ));
    }
    for (tx, item) in dequeued.transactions.iter().zip(reply.items) {
        match item.result {
            Some(complete_item_result::Result::Completed(reply))
                if reply.status == i32::from(TxStatus::Success) =>
            {
                round.completed += 1;
                if enqueued.contains(&tx.id) {
                    round.cycles += 1;
                }
            }
            Some(complete_item_result::Result::Completed(reply)) => {
                round.failures.push(Failure::other(
                    "complete",
                    "not success",
                    format!("transaction {}: status {} answered", tx.id, reply.status),
                ));
            }
            Some(complete_item_result::Result::Error(error)) => {
                round.failures.push(Failure::item("complete", &error));
            }
            None => round.failures.push(Failure::other(
                "complete",
                "an empty item",
                "an item answered with neither a result nor an error".to_owned(),
            )),
        }
    }
    round.steps = Some::<[Duration; 3]>([enqueue, dequeue, complete]);
    round
}
