//! `bench pipelines --stream`: each client is a producer and a worker running side by side.
//!
//! The producer enqueues into the client's node group (unary, or `EnqueueBatch` of `batch`),
//! keeping at most [`IN_FLIGHT_PER_CREDIT`] × credit of its transactions unfinished, so the
//! queue never runs dry nor grows without bound. The worker holds a `Work` stream
//! ([`certus_client::WorkStream`]) with `credit`: the node pushes claims as transactions are
//! queued, and the worker completes each with a `complete` step sent at once
//! ([`WorkStream::send_step`]), several in flight, collecting their results
//! ([`WorkStream::step_result`]) as they come and granting one credit back for each.
//!
//! A cycle runs from the start of its enqueue to the worker having its completion's result.
//! The three step columns are: the enqueue call; from the enqueue's answer to the claim
//! reaching the worker (0 when the claim came first); from sending the complete step to having
//! its result.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_client::{Client, ClientConfig, Transaction, TxStatus, WorkStream, work_step_result};
use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::{EnqueueBatchRequest, WorkStepResult, enqueue_item_result, work_step};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::super::micros;
use super::{ClientOutcome, Failure, Window, enqueue_request, success};

/// A client's unfinished transactions are at most this many times its worker's credit: the
/// credit's worth being worked on, the rest queued behind.
const IN_FLIGHT_PER_CREDIT: u32 = 2;
/// How long the worker waits for a step's result before it counts the stream as broken.
const STEP_RESULT_WAIT: Duration = Duration::from_secs(10);

/// The client library's handle for a worker, to the leader alone and without a client session
/// (the steps of a stream are not numbered).
pub(super) fn worker_client(leader: SocketAddr) -> Result<Client, String> {
    let config = ClientConfig {
        exactly_once: false,
        pin_to_endpoints: true,
        ..ClientConfig::default()
    };
    Client::with_config([leader.to_string()], config).map_err(|error| error.to_string())
}

/// When the producer sent a transaction, and when its enqueue was answered.
#[derive(Debug, Clone, Copy)]
struct Sent {
    began: Instant,
    answered: Option<Instant>,
}

/// The producer's transactions not yet finished, by their number (`n` in their state).
type Book = Arc<Mutex<HashMap<u64, Sent>>>;

/// One client of a `--stream` run: its producer and its worker, until the run ends.
pub(super) async fn client(
    producer: PipelinesClient<Channel>,
    worker_client: Client,
    node_group: String,
    worker: String,
    batch: u32,
    credit: u32,
    window: Window,
) -> ClientOutcome {
    assert!(
        batch >= 1 && batch <= credit,
        "batch {batch}, credit {credit}"
    );
    let book: Book = Arc::default();
    let room = Arc::new(Semaphore::new((credit * IN_FLIGHT_PER_CREDIT) as usize));
    let produced = tokio::spawn(produce(
        producer,
        node_group.clone(),
        batch,
        window,
        Arc::clone(&book),
        Arc::clone(&room),
    ));
    let mut outcome = ClientOutcome::default();
    match worker_client
        .work(node_group.as_str(), worker.as_str(), credit)
        .await
    {
        Ok(stream) => {
            let mut worker = Worker {
                stream,
                book: &book,
                room: &room,
                window,
                outcome: &mut outcome,
                who: &node_group,
                in_flight: VecDeque::new(),
            };
            worker.run(credit).await;
        }
        Err(error) => outcome.fail(&node_group, Failure::client("work", &error), true),
    }
    // The producer stops at the end of the run, or at once if the worker gave up early.
    room.close();
    match produced.await {
        Ok(producer) => {
            outcome.step_us[0] = producer.step_us[0].clone();
            outcome.errors.merge(producer.errors);
        }
        Err(error) => outcome.fail(
            &node_group,
            Failure::other("enqueue", "producer panicked", error.to_string()),
            true,
        ),
    }
    outcome
}

/// The producer: enqueues while there is room, until the run ends. Its outcome holds the
/// enqueue latencies and errors.
async fn produce(
    mut grpc: PipelinesClient<Channel>,
    node_group: String,
    batch: u32,
    window: Window,
    book: Book,
    room: Arc<Semaphore>,
) -> ClientOutcome {
    let mut outcome = ClientOutcome::default();
    let mut next = 1u64;
    loop {
        let permits = tokio::time::timeout_at(window.end.into(), room.acquire_many(batch)).await;
        let Ok(Ok(permits)) = permits else {
            break;
        };
        // Given back by the worker as each transaction finishes (or below, when refused).
        permits.forget();
        let numbers: Vec<u64> = (next..next + u64::from(batch)).collect();
        next += u64::from(batch);
        let began = Instant::now();
        let counted = began >= window.start.into();
        {
            let mut book = book.lock().expect("not poisoned");
            for &n in &numbers {
                book.insert(
                    n,
                    Sent {
                        began,
                        answered: None,
                    },
                );
            }
        }
        let answered = enqueue(&mut grpc, &node_group, &numbers).await;
        let at = Instant::now();
        if counted {
            outcome.step_us[0].push(micros(at - began));
        }
        let mut book = book.lock().expect("not poisoned");
        for (n, result) in numbers.into_iter().zip(answered) {
            match result {
                Ok(()) => {
                    // The worker may have finished it already.
                    if let Some(sent) = book.get_mut(&n) {
                        sent.answered = Some(at);
                    }
                }
                Err(failure) => {
                    if book.remove(&n).is_some() {
                        room.add_permits(1);
                    }
                    outcome.fail(&node_group, failure, counted);
                }
            }
        }
    }
    outcome
}

/// Enqueues the transactions numbered `numbers` (one: unary); answers each one's outcome.
async fn enqueue(
    grpc: &mut PipelinesClient<Channel>,
    node_group: &str,
    numbers: &[u64],
) -> Vec<Result<(), Failure>> {
    if let [n] = numbers {
        let answer = grpc.enqueue(enqueue_request(node_group, *n)).await;
        return vec![
            answer
                .map(drop)
                .map_err(|status| Failure::status("enqueue", &status)),
        ];
    }
    let items = numbers
        .iter()
        .map(|&n| enqueue_request(node_group, n))
        .collect();
    let reply = match grpc.enqueue_batch(EnqueueBatchRequest { items }).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => {
            return numbers
                .iter()
                .map(|_| Err(Failure::status("enqueue", &status)))
                .collect();
        }
    };
    let mut results: Vec<Result<(), Failure>> = reply
        .items
        .into_iter()
        .map(|item| match item.result {
            Some(enqueue_item_result::Result::Enqueued(_)) => Ok(()),
            Some(enqueue_item_result::Result::Error(error)) => {
                Err(Failure::item("enqueue", &error))
            }
            None => Err(Failure::other(
                "enqueue",
                "an empty item",
                "an item answered with neither a result nor an error".to_owned(),
            )),
        })
        .collect();
    while results.len() < numbers.len() {
        results.push(Err(Failure::other(
            "enqueue",
            "items answered",
            "fewer items answered than sent".to_owned(),
        )));
    }
    results
}

/// A complete step sent and not yet answered.
#[derive(Debug)]
struct InFlight {
    step_id: u64,
    /// The transaction's number in its state (none for a state the bench did not write).
    n: Option<u64>,
    claimed: Instant,
    sent: Instant,
}

/// The worker side of one client.
struct Worker<'a> {
    stream: WorkStream,
    book: &'a Book,
    room: &'a Semaphore,
    window: Window,
    outcome: &'a mut ClientOutcome,
    who: &'a str,
    /// Oldest first.
    in_flight: VecDeque<InFlight>,
}

impl Worker<'_> {
    /// Takes claims and completes them until the run ends, then collects the results still
    /// due. Only a broken stream stops it earlier.
    ///
    /// `next_claim` and `step_result` keep what arrives for the other, and both may be
    /// dropped before they finish (what they read is kept first), so each is polled without
    /// waiting to see what is there; the worker waits on a result when steps are in flight,
    /// or else on a claim.
    async fn run(&mut self, credit: u32) {
        loop {
            if !self.collect_ready().await {
                return;
            }
            if Instant::now() >= self.window.end.into() {
                break;
            }
            let claim = if self.in_flight.is_empty() {
                let claim = self.stream.next_claim();
                match tokio::time::timeout_at(self.window.end.into(), claim).await {
                    Ok(claim) => claim,
                    Err(_run_over) => break,
                }
            } else if self.in_flight.len() < credit as usize {
                match tokio::time::timeout(Duration::ZERO, self.stream.next_claim()).await {
                    Ok(claim) => claim,
                    Err(_none_yet) => {
                        if !self.collect_oldest().await {
                            return;
                        }
                        continue;
                    }
                }
            } else {
                if !self.collect_oldest().await {
                    return;
                }
                continue;
            };
            match claim {
                Ok(Some(tx)) => {
                    if !self.complete(&tx).await {
                        return;
                    }
                }
                Ok(None) => {
                    self.broken(Failure::other(
                        "work",
                        "stream ended",
                        "the node ended the stream".to_owned(),
                    ));
                    return;
                }
                Err(error) => {
                    self.broken(Failure::client("work", &error));
                    return;
                }
            }
        }
        while !self.in_flight.is_empty() {
            if !self.collect_oldest().await {
                return;
            }
        }
    }

    /// Sends the step completing `tx`; `false` if the stream broke.
    async fn complete(&mut self, tx: &Transaction) -> bool {
        let claimed = Instant::now();
        let step = work_step::Kind::Complete(success(tx.id, tx.claim_token));
        match self.stream.send_step(step).await {
            Ok(step_id) => {
                self.in_flight.push_back(InFlight {
                    step_id,
                    n: number_in(&tx.state),
                    claimed,
                    sent: Instant::now(),
                });
                true
            }
            Err(error) => {
                self.broken(Failure::client("complete", &error));
                false
            }
        }
    }

    /// Takes the results already received, oldest step first; `false` if the stream broke.
    async fn collect_ready(&mut self) -> bool {
        while let Some(oldest) = self.in_flight.front() {
            let result = self.stream.step_result(oldest.step_id);
            match tokio::time::timeout(Duration::ZERO, result).await {
                Err(_not_yet) => return true,
                Ok(Ok(result)) => {
                    if !self.finished(result).await {
                        return false;
                    }
                }
                Ok(Err(error)) => {
                    self.broken(Failure::client("complete", &error));
                    return false;
                }
            }
        }
        true
    }

    /// Waits for the oldest step's result (claims arriving meanwhile are kept); `false` if the
    /// stream broke.
    async fn collect_oldest(&mut self) -> bool {
        let Some(oldest) = self.in_flight.front() else {
            return true;
        };
        let result = self.stream.step_result(oldest.step_id);
        match tokio::time::timeout(STEP_RESULT_WAIT, result).await {
            Ok(Ok(result)) => self.finished(result).await,
            Ok(Err(error)) => {
                self.broken(Failure::client("complete", &error));
                false
            }
            Err(_elapsed) => {
                self.broken(Failure::other(
                    "complete",
                    "no result",
                    format!("no result within {STEP_RESULT_WAIT:?}"),
                ));
                false
            }
        }
    }

    /// Counts the result of the oldest step in flight, gives its room back to the producer and
    /// one credit back to the node; `false` if the stream broke.
    async fn finished(&mut self, result: WorkStepResult) -> bool {
        let step = self.in_flight.pop_front().expect("a step in flight");
        assert_eq!(
            step.step_id, result.step_id,
            "results are taken oldest first"
        );
        let done = Instant::now();
        let sent = step
            .n
            .and_then(|n| self.book.lock().expect("not poisoned").remove(&n));
        if sent.is_some() {
            self.room.add_permits(1);
        }
        let counted = sent.is_some_and(|sent| sent.began >= self.window.start.into());
        match result.result {
            Some(work_step_result::Result::Complete(reply))
                if reply.status == i32::from(TxStatus::Success) =>
            {
                self.outcome.completed += 1;
                if let Some(sent) = sent.filter(|_| counted) {
                    let outcome = &mut *self.outcome;
                    outcome.cycle_us.push(micros(done - sent.began));
                    let picked_up = sent.answered.map_or(Duration::ZERO, |answered| {
                        step.claimed.saturating_duration_since(answered)
                    });
                    outcome.step_us[1].push(micros(picked_up));
                    outcome.step_us[2].push(micros(done - step.sent));
                }
            }
            Some(work_step_result::Result::Error(error)) => {
                self.outcome
                    .fail(self.who, Failure::item("complete", &error), counted);
            }
            other => self.outcome.fail(
                self.who,
                Failure::other("complete", "another answer", format!("answered {other:?}")),
                counted,
            ),
        }
        match self.stream.grant(1).await {
            Ok(()) => true,
            Err(error) => {
                self.broken(Failure::client("credit", &error));
                false
            }
        }
    }

    fn broken(&mut self, failure: Failure) {
        self.outcome.fail(self.who, failure, true);
    }
}

/// The number the bench wrote in a transaction's state (`{"n":7,…}`).
fn number_in(state: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct State {
        n: u64,
    }
    serde_json::from_str::<State>(state)
        .ok()
        .map(|state| state.n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_number_is_read_from_the_state_the_bench_wrote() {
        assert_eq!(number_in(&super::super::state(42, "new")), Some(42));
        assert_eq!(number_in(r#"{"id":3,"step":"done"}"#), None);
        assert_eq!(number_in("not json"), None);
    }
}
