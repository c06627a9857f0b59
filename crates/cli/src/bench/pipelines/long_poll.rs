//! `bench pipelines --long-poll`: what waiting for work costs, in two measurements.
//!
//! - **Pickup latency.** One worker waits on an empty node group — in a `Dequeue` with the
//!   longest `wait_ms`, then on a `Work` stream with credit 1 — and a producer enqueues one
//!   transaction at a time, [`PICKUP_PAUSE`] after the worker finished the previous one. The
//!   latency is from the enqueue's answer to the worker having the transaction; a worker that has
//!   it before the producer has the answer (the node answers both after the same apply) counts 0
//!   and is counted apart.
//! - **Idle cost.** The CPU time this process uses over a few seconds with nothing waiting, then
//!   with W workers each waiting in a `Dequeue` on an empty node group of its own, then with W
//!   `Work` streams open on empty groups. The nodes run in this process (as every `certus
//!   bench` does), so the figure is this process's CPU (`/proc/self/stat`): the three nodes and
//!   the waiting workers together; what the waiting adds is the difference to nothing waiting.

use std::net::SocketAddr;
use std::time::Duration;

use certus_node::limits::PIPELINE_DEQUEUE_WAIT_MS_MAX;
use certus_proto::v1::DequeueRequest;
use certus_proto::v1::pipelines_client::PipelinesClient;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::transport::Channel;

use super::super::ct::process::cpu_time;
use super::super::{ErrorKinds, micros};
use super::{connect, enqueue_request, ms, stream::worker_client, success};

/// How long the producer waits after a pickup before it enqueues the next transaction: time for
/// the worker to be waiting again.
const PICKUP_PAUSE: Duration = Duration::from_millis(20);
/// How long the producer waits for the worker to have a transaction before giving up.
const PICKUP_PATIENCE: Duration = Duration::from_secs(10);
/// Before an idle measurement starts: the waiters are connected and waiting, the cluster quiet.
const IDLE_SETTLE: Duration = Duration::from_secs(1);

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub(super) struct Options {
    /// Transactions enqueued for each pickup measurement.
    pub(super) samples: u32,
    /// Workers waiting during the idle measurements.
    pub(super) idle_workers: u32,
    /// How long each idle measurement lasts.
    pub(super) idle: Duration,
}

/// What a waiting worker waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiter {
    Dequeue,
    Stream,
}

impl Waiter {
    /// Its part of node group names.
    fn name(self) -> &'static str {
        match self {
            Waiter::Dequeue => "dequeue",
            Waiter::Stream => "stream",
        }
    }

    fn describe(self) -> String {
        match self {
            Waiter::Dequeue => format!("Dequeue (wait_ms {PIPELINE_DEQUEUE_WAIT_MS_MAX})"),
            Waiter::Stream => "Work stream (credit 1)".to_owned(),
        }
    }
}

/// The pickup latencies of one kind of waiter.
#[derive(Debug)]
struct Pickup {
    waiter: Waiter,
    /// Enqueue answered → worker has it, µs, sorted.
    latency_us: Vec<u64>,
    /// Pickups that came before the enqueue's answer (counted as 0).
    before_answer: usize,
    errors: ErrorKinds,
}

/// The CPU this process used per second while `waiting` workers waited on `waiter`.
#[derive(Debug)]
struct Idle {
    waiter: Option<Waiter>,
    waiting: u32,
    /// `None` where `/proc/self/stat` cannot be read.
    cpu_ms_per_second: Option<f64>,
}

/// Everything `--long-poll` measured.
#[derive(Debug)]
pub(super) struct Report {
    samples: u32,
    idle_seconds: u64,
    pickups: Vec<Pickup>,
    idle: Vec<Idle>,
}

pub(super) async fn measure(leader: SocketAddr, options: Options) -> Result<Report, String> {
    let mut pickups = Vec::new();
    for waiter in [Waiter::Dequeue, Waiter::Stream] {
        eprintln!(
            "bench pipelines: pickup latency, {}: {} samples",
            waiter.describe(),
            options.samples
        );
        pickups.push(pickup(leader, waiter, options.samples).await?);
    }
    let mut idle = Vec::new();
    for waiter in [None, Some(Waiter::Dequeue), Some(Waiter::Stream)] {
        let waiting = if waiter.is_some() {
            options.idle_workers
        } else {
            0
        };
        eprintln!(
            "bench pipelines: idle cost, {waiting} waiting{}: {:?}",
            waiter.map_or_else(String::new, |waiter| format!(" in {}", waiter.describe())),
            options.idle
        );
        idle.push(idle_cost(leader, waiter, waiting, options.idle).await?);
    }
    Ok(Report {
        samples: options.samples,
        idle_seconds: options.idle.as_secs(),
        pickups,
        idle,
    })
}

/// Pickup latency of `samples` transactions enqueued one at a time for one worker waiting on
/// `waiter`.
async fn pickup(leader: SocketAddr, waiter: Waiter, samples: u32) -> Result<Pickup, String> {
    let node_group = format!("pickup-{}", waiter.name());
    let (picked_up, mut pickups) = mpsc::channel(1);
    let worker = match waiter {
        Waiter::Dequeue => {
            let grpc = connect(leader).await?;
            tokio::spawn(wait_in_dequeue(grpc, node_group.clone(), picked_up))
        }
        Waiter::Stream => {
            let client = worker_client(leader)?;
            tokio::spawn(wait_on_stream(client, node_group.clone(), picked_up))
        }
    };
    let mut producer = connect(leader).await?;
    let mut measured = Pickup {
        waiter,
        latency_us: Vec::new(),
        before_answer: 0,
        errors: ErrorKinds::default(),
    };
    let mut result = Ok(());
    for n in 1..=u64::from(samples) {
        tokio::time::sleep(PICKUP_PAUSE).await;
        let enqueued = producer.enqueue(enqueue_request(&node_group, n)).await;
        let answered = Instant::now();
        let id = match enqueued {
            Ok(reply) => reply.into_inner().transaction_id,
            Err(status) => {
                measured.errors.record(&status);
                continue;
            }
        };
        let (taken, at) = match tokio::time::timeout(PICKUP_PATIENCE, pickups.recv()).await {
            Ok(Some(Ok(pickup))) => pickup,
            Ok(Some(Err(error))) => {
                result = Err(format!("{}: {error}", waiter.describe()));
                break;
            }
            Ok(None) => {
                result = Err(format!("{}: the worker stopped", waiter.describe()));
                break;
            }
            Err(_elapsed) => {
                result = Err(format!(
                    "{}: transaction {id} not picked up within {PICKUP_PATIENCE:?}",
                    waiter.describe()
                ));
                break;
            }
        };
        if taken != id {
            result = Err(format!(
                "{}: the worker took transaction {taken}, not {id} just enqueued",
                waiter.describe()
            ));
            break;
        }
        if at < answered {
            measured.before_answer += 1;
        }
        measured
            .latency_us
            .push(micros(at.saturating_duration_since(answered)));
    }
    worker.abort();
    result?;
    measured.latency_us.sort_unstable();
    Ok(measured)
}

/// What a pickup worker tells the producer: the transaction it took and when, once it has
/// completed it and is about to wait again.
type PickedUp = mpsc::Sender<Result<(u64, Instant), String>>;

/// A worker waiting in `Dequeue` with the longest wait, completing what it takes.
async fn wait_in_dequeue(mut grpc: PipelinesClient<Channel>, node_group: String, tell: PickedUp) {
    loop {
        let request = DequeueRequest {
            node_group: node_group.clone(),
            worker: "pickup".to_owned(),
            max: 1,
            wait_ms: PIPELINE_DEQUEUE_WAIT_MS_MAX,
        };
        let reply = grpc.dequeue(request).await;
        let at = Instant::now();
        let transactions = match reply {
            Ok(reply) => reply.into_inner().transactions,
            Err(status) => {
                let _ = tell
                    .send(Err(format!("dequeue: {}", status.message())))
                    .await;
                return;
            }
        };
        for tx in transactions {
            if let Err(status) = grpc.complete(success(tx.id, tx.claim_token)).await {
                let _ = tell
                    .send(Err(format!("complete: {}", status.message())))
                    .await;
                return;
            }
            if tell.send(Ok((tx.id, at))).await.is_err() {
                return;
            }
        }
    }
}

/// A worker on a `Work` stream with credit 1, completing each claim on the stream.
async fn wait_on_stream(client: certus_client::Client, node_group: String, tell: PickedUp) {
    let mut stream = match client.work(node_group.as_str(), "pickup", 1).await {
        Ok(stream) => stream,
        Err(error) => {
            let _ = tell.send(Err(format!("work: {error}"))).await;
            return;
        }
    };
    loop {
        let tx = match stream.next_claim().await {
            Ok(Some(tx)) => tx,
            Ok(None) => {
                let _ = tell.send(Err("the node ended the stream".to_owned())).await;
                return;
            }
            Err(error) => {
                let _ = tell.send(Err(format!("work: {error}"))).await;
                return;
            }
        };
        let at = Instant::now();
        let request = success(tx.id, tx.claim_token);
        let status = certus_client::TxStatus::Success;
        let state = Some(request.state);
        if let Err(error) = stream.complete(tx.id, tx.claim_token, status, state).await {
            let _ = tell.send(Err(format!("complete: {error}"))).await;
            return;
        }
        if let Err(error) = stream.grant(1).await {
            let _ = tell.send(Err(format!("credit: {error}"))).await;
            return;
        }
        if tell.send(Ok((tx.id, at))).await.is_err() {
            return;
        }
    }
}

/// The CPU this process uses per second over `duration` while `waiting` workers wait on
/// `waiter` (none: nothing waits), each on an empty node group of its own.
async fn idle_cost(
    leader: SocketAddr,
    waiter: Option<Waiter>,
    waiting: u32,
    duration: Duration,
) -> Result<Idle, String> {
    let mut waiters = JoinSet::new();
    for index in 0..waiting {
        let node_group = format!("idle-{}-{index}", waiter.map_or("none", Waiter::name));
        match waiter {
            Some(Waiter::Dequeue) => {
                let mut grpc = connect(leader).await?;
                waiters.spawn(async move {
                    loop {
                        let request = DequeueRequest {
                            node_group: node_group.clone(),
                            worker: "idle".to_owned(),
                            max: 1,
                            wait_ms: PIPELINE_DEQUEUE_WAIT_MS_MAX,
                        };
                        match grpc.dequeue(request).await {
                            Ok(reply) if reply.get_ref().transactions.is_empty() => {}
                            Ok(_) => return "dequeue: took work from an empty node group".into(),
                            Err(status) => return format!("dequeue: {}", status.message()),
                        }
                    }
                });
            }
            Some(Waiter::Stream) => {
                let client = worker_client(leader)?;
                let mut stream = client
                    .work(node_group.as_str(), "idle", 1)
                    .await
                    .map_err(|error| format!("work: {error}"))?;
                waiters.spawn(async move {
                    match stream.next_claim().await {
                        Ok(Some(_)) => "work: a claim from an empty node group".to_owned(),
                        Ok(None) => "work: the node ended the stream".to_owned(),
                        Err(error) => format!("work: {error}"),
                    }
                });
            }
            None => {}
        }
    }
    tokio::time::sleep(IDLE_SETTLE).await;
    let before = cpu_time();
    let began = Instant::now();
    tokio::time::sleep(duration).await;
    let after = cpu_time();
    let elapsed = began.elapsed();
    // A waiter that stopped did not wait the whole time: the figure would flatter.
    if let Some(Ok(stopped)) = waiters.try_join_next() {
        return Err(format!("a waiting worker stopped: {stopped}"));
    }
    waiters.abort_all();
    let cpu_ms_per_second = before.zip(after).map(|(before, after)| {
        (after.saturating_sub(before)).as_secs_f64() * 1000.0 / elapsed.as_secs_f64()
    });
    Ok(Idle {
        waiter,
        waiting,
        cpu_ms_per_second,
    })
}

impl Report {
    /// CPU ms per second with nothing waiting, the baseline of the others.
    fn baseline(&self) -> Option<f64> {
        self.idle
            .iter()
            .find(|idle| idle.waiter.is_none())
            .and_then(|idle| idle.cpu_ms_per_second)
    }

    pub(super) fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "pickup latency, enqueue answered → worker has the transaction ({} one at a time, \
             {} ms apart):",
            self.samples,
            PICKUP_PAUSE.as_millis()
        )];
        for pickup in &self.pickups {
            let mut line = format!(
                "  {}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} pickups",
                pickup.waiter.describe(),
                ms(&pickup.latency_us, 0.50),
                ms(&pickup.latency_us, 0.99),
                ms(&pickup.latency_us, 1.0),
                pickup.latency_us.len()
            );
            if pickup.before_answer > 0 {
                line.push_str(&format!(
                    "; {} before the enqueue's answer (counted as 0)",
                    pickup.before_answer
                ));
            }
            if pickup.errors.total() > 0 {
                line.push_str(&format!("; errors: {}", pickup.errors.describe()));
            }
            lines.push(line);
        }
        lines.push(format!(
            "idle cost, CPU time of this process (the 3 nodes and the waiting workers all run in \
             it), {} s each:",
            self.idle_seconds
        ));
        let baseline = self.baseline();
        for idle in &self.idle {
            let what = match idle.waiter {
                None => "nothing waiting".to_owned(),
                Some(waiter) => format!("{} workers in {}", idle.waiting, waiter.describe()),
            };
            let cost = match (idle.cpu_ms_per_second, baseline, idle.waiter) {
                (None, _, _) => "not measured (no /proc/self/stat)".to_owned(),
                (Some(cpu), Some(baseline), Some(_)) => {
                    format!(
                        "{cpu:.1} CPU ms/s ({:+.1} over nothing waiting)",
                        cpu - baseline
                    )
                }
                (Some(cpu), _, _) => format!("{cpu:.1} CPU ms/s"),
            };
            lines.push(format!("  {what}: {cost}"));
        }
        lines
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        let pickups: Vec<_> = self
            .pickups
            .iter()
            .map(|pickup| {
                json!({
                    "waiter": pickup.waiter.describe(),
                    "samples": pickup.latency_us.len(),
                    "p50_ms": ms(&pickup.latency_us, 0.50),
                    "p99_ms": ms(&pickup.latency_us, 0.99),
                    "max_ms": ms(&pickup.latency_us, 1.0),
                    "before_answer": pickup.before_answer,
                    "errors_by_kind": pickup.errors.to_json(),
                })
            })
            .collect();
        let idle: Vec<_> = self
            .idle
            .iter()
            .map(|idle| {
                json!({
                    "waiter": idle.waiter.map(Waiter::describe),
                    "waiting": idle.waiting,
                    "cpu_ms_per_second": idle.cpu_ms_per_second,
                })
            })
            .collect();
        json!({
            "pickup_pause_ms": PICKUP_PAUSE.as_millis(),
            "idle_seconds": self.idle_seconds,
            "cpu": "this process: the 3 nodes and the waiting workers",
            "pickups": pickups,
            "idle": idle,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_lines_give_the_cost_over_nothing_waiting() {
        let report = Report {
            samples: 3,
            idle_seconds: 5,
            pickups: vec![Pickup {
                waiter: Waiter::Dequeue,
                latency_us: vec![1_000, 2_000, 9_000],
                before_answer: 1,
                errors: ErrorKinds::default(),
            }],
            idle: vec![
                Idle {
                    waiter: None,
                    waiting: 0,
                    cpu_ms_per_second: Some(10.0),
                },
                Idle {
                    waiter: Some(Waiter::Stream),
                    waiting: 50,
                    cpu_ms_per_second: Some(12.5),
                },
            ],
        };
        let lines = report.lines();
        assert_eq!(
            lines[1],
            "  Dequeue (wait_ms 60000): p50 2.00 ms, p99 9.00 ms, max 9.00 ms over 3 pickups; 1 \
             before the enqueue's answer (counted as 0)"
        );
        assert_eq!(lines[3], "  nothing waiting: 10.0 CPU ms/s");
        assert_eq!(
            lines[4],
            "  50 workers in Work stream (credit 1): 12.5 CPU ms/s (+2.5 over nothing waiting)"
        );
        assert_eq!(report.to_json()["idle"][1]["cpu_ms_per_second"], 12.5);
    }
}
