//! `certus bench pipelines`: a 3-node cluster on loopback in this process, C concurrent
//! clients each running enqueue → dequeue → complete cycles of the transaction pipelines; prints
//! cycles/s, p50/p99/max cycle latency and errors by kind for each C.
//!
//! A cycle is three durable Raft writes: `Enqueue` into the client's own node group (`bench-c`,
//! queue `in`, a small JSON state), `Dequeue` of one transaction from it, and `Complete` with
//! status success and a new state — the pipelines' LPUSH → LMOVE → LREM. Each client owns its
//! node group, so every dequeue finds exactly the transactions its client just enqueued (a
//! dequeue that finds another, or none, is an error). After each run the per-status counts
//! are read back through a linearizable read: every acknowledged completion must be there.
//!
//! How a client runs its cycles ([`Mode`]):
//!
//! - unary (the default): one transaction at a time, one call per step;
//! - `--batch N` ([`batch`]): N transactions at a time, one `EnqueueBatch`, one `Dequeue` of up
//!   to N and one `CompleteBatch` — one Raft entry per step for N cycles;
//! - `--stream` ([`stream`]): a producer enqueues (in batches of N with `--batch N`) while a
//!   worker takes the transactions on a `Work` stream with credit N (16 without `--batch`) and
//!   completes them with steps on the same stream, several in flight.
//!
//! `--long-poll` ([`long_poll`]) measures waiting instead: how soon a worker waiting on an empty
//! queue picks up a transaction, and what idle waiting workers cost in CPU.
//!
//! The clients run in the same process as the nodes (as a benchmark tool on the same machine
//! would), each over its own HTTP/2 connection, all to the leader. The pipelines are configured
//! to archive a second after completion (so the archive runs beside the cycles) and to keep
//! archived transactions for an hour, so that every completion of a run can be counted.
//!
//! With `--peer`, the same cycle then runs against Redis ([`redis`]), alone and replicated, one
//! step per command without pipelining whatever the mode, and the table gets their rows and
//! ratio lines per client count.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use certus_core::limits::PIPELINE_DEQUEUE_BATCH_MAX;
use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::{
    CompleteTransactionRequest, DequeueRequest, EnqueueRequest, GetPipelineConfigRequest,
    ItemError, PipelinesStatusRequest, QueueType, SetPipelineConfigRequest, TxStatus,
    enqueue_request,
};
use comfy_table::Table;
use serde_json::json;
use tonic::transport::Channel;

use super::{ErrorKinds, WARM_UP, micros, percentile};
use crate::limits::{BENCH_IDLE_SECONDS_MAX, BENCH_IDLE_WORKERS_MAX, BENCH_PICKUP_SAMPLES_MAX};

mod batch;
mod long_poll;
mod redis;
mod stream;

/// Options of `certus bench pipelines`.
#[derive(Debug, clap::Args)]
pub(crate) struct PipelinesArgs {
    /// Concurrent clients, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,50")]
    clients: Vec<usize>,
    /// How long each run measures, in seconds (after a one-second warm-up).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Then run the same cycle against Redis (LPUSH → LMOVE → LREM, one command per step, no
    /// pipelining): one process with its AOF fsynced on every write, then a primary and 2
    /// replicas with `WAIT 2` after every step, started from the installed `redis-server`
    /// (Debian's redis-server); without it, say how to install it and measure Certus alone.
    #[arg(long)]
    peer: bool,
    /// Transactions per call: producers enqueue N with one EnqueueBatch, workers dequeue up to
    /// N with one Dequeue and finish them with one CompleteBatch (1 to 100; 1 is one unary
    /// call per step). With --stream: the producers' batch, and the workers' credit.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(PIPELINE_DEQUEUE_BATCH_MAX)))]
    batch: u32,
    /// Workers take transactions on a Work stream (credit: --batch, or 16) and complete them
    /// with steps on it, several in flight, while each client's producer enqueues.
    #[arg(long)]
    stream: bool,
    /// Measure waiting instead of cycles: pickup latency of a worker waiting on an empty queue
    /// (Dequeue with wait_ms, and the Work stream), then the CPU that idle waiting workers cost.
    #[arg(long, conflicts_with_all = ["peer", "batch", "stream", "clients"])]
    long_poll: bool,
    /// --long-poll: transactions enqueued one at a time for each pickup measurement.
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(BENCH_PICKUP_SAMPLES_MAX)))]
    pickup_samples: u32,
    /// --long-poll: workers waiting on empty queues while the CPU is measured.
    #[arg(long, value_name = "W", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(BENCH_IDLE_WORKERS_MAX)))]
    idle_workers: u32,
    /// --long-poll: how long each idle measurement lasts, in seconds.
    #[arg(long, value_name = "S", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=BENCH_IDLE_SECONDS_MAX))]
    idle_seconds: u64,
}

/// How the clients of a Certus run take their transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One call per step, one transaction at a time.
    Unary,
    /// `EnqueueBatch`, `Dequeue` and `CompleteBatch` of this many transactions at a time.
    Batch(u32),
    /// A producer enqueuing `batch` at a time (unary for 1), and a worker on a `Work` stream
    /// with `credit`.
    Stream { batch: u32, credit: u32 },
}

/// The credit of a `--stream` worker without `--batch`: enough steps in flight to fill a few
/// Raft entries, few enough that a worker's claims are still a small share of its group.
const STREAM_CREDIT_DEFAULT: u32 = 16;

impl Mode {
    fn of(args: &PipelinesArgs) -> Mode {
        match (args.stream, args.batch) {
            (false, 1) => Mode::Unary,
            (false, batch) => Mode::Batch(batch),
            (true, 1) => Mode::Stream {
                batch: 1,
                credit: STREAM_CREDIT_DEFAULT,
            },
            (true, batch) => Mode::Stream {
                batch,
                credit: batch,
            },
        }
    }

    /// How its rows are labelled.
    fn label(self) -> String {
        match self {
            Mode::Unary => "unary".to_owned(),
            Mode::Batch(batch) => format!("batch {batch}"),
            Mode::Stream { batch: 1, credit } => format!("stream, credit {credit}"),
            Mode::Stream { batch, credit } => {
                format!("stream, credit {credit}, enqueue batch {batch}")
            }
        }
    }
}

/// Finished transactions are archived after this long…
const ARCHIVE_DELAY_MS: u64 = 1_000;
/// …and deleted this long after that: past the end of any run, so the count of successes
/// checks every acknowledged completion.
const ARCHIVE_RETENTION_MS: u64 = 3_600_000;

/// What the rows of Certus are called.
const CERTUS: &str = "Certus";

#[derive(Debug)]
struct Run {
    /// The system measured: [`CERTUS`] or a [`redis::Setup`]'s.
    system: &'static str,
    /// How its clients ran their cycles ([`Mode::label`], or the peer's).
    mode: String,
    clients: usize,
    cycles: usize,
    errors: ErrorKinds,
    elapsed: Duration,
    /// Raft entries the leader appended during the measured part: how well steps batch (none
    /// for a peer).
    entries: Option<u64>,
    /// Whole cycles, then each step, in microseconds, sorted.
    cycle_us: Vec<u64>,
    step_us: [Vec<u64>; 3],
}

const STEPS: [&str; 3] = ["enqueue", "dequeue", "complete"];

impl Run {
    fn cycles_per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    /// Cycle steps (three per cycle: a batch call or a stream carries several) per Raft entry,
    /// for Certus.
    fn writes_per_entry(&self) -> Option<f64> {
        self.entries
            .map(|entries| (self.cycles * 3) as f64 / entries.max(1) as f64)
    }
}

fn ms(sorted_us: &[u64], fraction: f64) -> f64 {
    percentile(sorted_us, fraction).map_or(0.0, |us| us as f64 / 1000.0)
}

pub(super) async fn run(args: PipelinesArgs) -> Result<(), String> {
    super::check_client_counts(&args.clients)?;
    if args.seconds == 0 {
        return Err("--seconds: at least 1".into());
    }
    // Looked up first, so that a missing peer is said before minutes of measuring.
    let redis = if args.peer {
        super::peer::find(super::peer::REDIS)
    } else {
        None
    };
    // Nothing here sends webhooks: the processor would only poll for its role.
    let cluster = super::LocalCluster::start(|config| config.pipelines.webhooks = false).await?;
    let (leader, leader_addr) = (cluster.leader, cluster.leader_addr);
    eprintln!("bench pipelines: 3 nodes on loopback (sled, fsync per batch), leader node {leader}");
    configure(leader_addr).await?;

    if args.long_poll {
        let options = long_poll::Options {
            samples: args.pickup_samples,
            idle_workers: args.idle_workers,
            idle: Duration::from_secs(args.idle_seconds),
        };
        let measured = long_poll::measure(leader_addr, options).await;
        cluster.shutdown().await;
        let report = measured?;
        if args.json {
            println!(
                "{}",
                json!({ "bench": "pipelines", "long_poll": report.to_json() })
            );
        } else {
            for line in report.lines() {
                println!("{line}");
            }
        }
        return Ok(());
    }

    let mode = Mode::of(&args);
    let mut runs = Vec::new();
    let mut succeeded_before = 0u64;
    for (round, &clients) in args.clients.iter().enumerate() {
        let leader_node = cluster
            .nodes
            .iter()
            .find(|node| node.replica().id == leader)
            .ok_or("the leader is not a started node")?;
        let (run, attempted) = measure(
            leader_node,
            leader_addr,
            mode,
            round,
            clients,
            Duration::from_secs(args.seconds),
        )
        .await?;
        let succeeded = succeeded_total(leader_addr).await?;
        // Every completion acknowledged (warm-up included) is counted once.
        if succeeded - succeeded_before != attempted {
            return Err(format!(
                "{clients} clients: {attempted} completions acknowledged, but the success count \
                 grew by {}",
                succeeded - succeeded_before
            ));
        }
        succeeded_before = succeeded;
        eprintln!(
            "bench pipelines: {} x{clients}: {:.0} cycles/s",
            run.mode,
            run.cycles_per_second()
        );
        runs.push(run);
    }
    // The nodes stop before the peer starts: the two do not share the machine.
    cluster.shutdown().await;
    if let Some(redis) = redis {
        for setup in [redis::Setup::Single, redis::Setup::Replicated] {
            let work = measure_redis(&redis, setup, &args);
            runs.extend(super::peer::interruptible(super::peer::REDIS, work).await?);
        }
    }
    report(&runs, args.json);
    Ok(())
}

/// The runs of `args` against Redis in `setup`, started for them and stopped after.
async fn measure_redis(
    installed: &super::peer::Installed,
    setup: redis::Setup,
    args: &PipelinesArgs,
) -> Result<Vec<Run>, String> {
    let redis = redis::RedisSetup::start(installed, setup).await?;
    eprintln!(
        "bench pipelines: {} (redis-server {}): {}",
        setup.system(),
        installed.version,
        redis.describe()
    );
    let mut runs = Vec::new();
    for (round, &clients) in args.clients.iter().enumerate() {
        let (run, _) =
            redis::measure(&redis, round, clients, Duration::from_secs(args.seconds)).await?;
        eprintln!(
            "bench pipelines: {} x{clients}: {:.0} cycles/s",
            setup.system(),
            run.cycles_per_second()
        );
        runs.push(run);
    }
    Ok(runs)
}

async fn connect(leader: SocketAddr) -> Result<PipelinesClient<Channel>, String> {
    Ok(PipelinesClient::new(super::channel(leader).await?))
}

/// Short archive delay and retention, and room for every transaction of a run.
async fn configure(leader: SocketAddr) -> Result<(), String> {
    let mut grpc = connect(leader).await?;
    let mut config = grpc
        .get_config(GetPipelineConfigRequest {})
        .await
        .map_err(|status| format!("get config: {}", status.message()))?
        .into_inner();
    config.archive_delay_ms = ARCHIVE_DELAY_MS;
    config.archive_retention_ms = ARCHIVE_RETENTION_MS;
    config.transactions_max = 1_000_000;
    grpc.set_config(SetPipelineConfigRequest {
        config: Some(config),
    })
    .await
    .map_err(|status| format!("set config: {}", status.message()))?;
    Ok(())
}

/// Transactions finished with status success so far, archived ones included.
async fn succeeded_total(leader: SocketAddr) -> Result<u64, String> {
    let mut grpc = connect(leader).await?;
    let status = grpc
        .status(PipelinesStatusRequest {
            node_group: String::new(),
        })
        .await
        .map_err(|status| format!("status: {}", status.message()))?
        .into_inner();
    Ok(status
        .statuses
        .iter()
        .filter(|count| count.status == i32::from(TxStatus::Success))
        .map(|count| count.count)
        .sum())
}

/// One run of `clients` clients; answers it and the completions acknowledged in all (warm-up
/// included).
async fn measure(
    leader_node: &certus_node::Node,
    leader: SocketAddr,
    mode: Mode,
    round: usize,
    clients: usize,
    duration: Duration,
) -> Result<(Run, u64), String> {
    let start = Instant::now() + WARM_UP;
    let window = Window {
        start,
        end: start + duration,
    };
    let mut tasks = Vec::new();
    for client in 0..clients {
        let node_group = format!("bench-{round}-{client}");
        let worker = format!("worker-{round}-{client}");
        let task = match mode {
            Mode::Stream { batch, credit } => {
                let producer = connect(leader).await?;
                let worker_client = stream::worker_client(leader)?;
                tokio::spawn(stream::client(
                    producer,
                    worker_client,
                    node_group,
                    worker,
                    batch,
                    credit,
                    window,
                ))
            }
            Mode::Unary | Mode::Batch(_) => {
                let grpc = connect(leader).await?;
                let batch = match mode {
                    Mode::Batch(batch) => batch,
                    _ => 1,
                };
                tokio::spawn(calls_client(grpc, node_group, worker, batch, window))
            }
        };
        tasks.push(task);
    }
    let last_log_index = || {
        leader_node
            .replica()
            .raft
            .metrics()
            .borrow()
            .last_log_index
            .unwrap_or(0)
    };
    tokio::time::sleep_until(window.start.into()).await;
    let entries_before = last_log_index();
    tokio::time::sleep_until(window.end.into()).await;
    let entries = last_log_index() - entries_before;
    gather(
        CERTUS,
        mode.label(),
        clients,
        duration,
        Some(entries),
        tasks,
    )
    .await
}

/// When a run measures: what starts before `start` is warm-up, nothing starts at `end` or after.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// A client that makes one call per step, `batch` transactions per call (one: the unary calls).
async fn calls_client(
    mut grpc: PipelinesClient<Channel>,
    node_group: String,
    worker: String,
    batch: u32,
    window: Window,
) -> ClientOutcome {
    let mut outcome = ClientOutcome::default();
    let mut n = 0u64;
    loop {
        let began = Instant::now();
        if began >= window.end {
            break;
        }
        let counted = began >= window.start;
        let round = if batch == 1 {
            n += 1;
            cycle(&mut grpc, &node_group, &worker, n).await
        } else {
            let first = n + 1;
            n += u64::from(batch);
            batch::round(&mut grpc, &node_group, &worker, first, batch).await
        };
        outcome.absorb(&node_group, round, counted, began.elapsed());
    }
    outcome
}

/// What one client measured over a run.
#[derive(Debug, Default)]
struct ClientOutcome {
    /// Latencies of its counted cycles, and of each counted step (a call, or for a stream the
    /// stream's equivalents), in µs.
    cycle_us: Vec<u64>,
    step_us: [Vec<u64>; 3],
    /// Errors while measuring, by kind.
    errors: ErrorKinds,
    /// Completions acknowledged with status success, warm-up included (the success count must
    /// grow by their sum).
    completed: u64,
    /// Failures printed so far: the first few say what went wrong, the rest are counted.
    printed: usize,
}

/// Failures each client prints on stderr before it only counts them.
const FAILURES_PRINTED: usize = 3;

impl ClientOutcome {
    /// Adds one round of calls that began `elapsed` ago.
    fn absorb(&mut self, who: &str, round: Round, counted: bool, elapsed: Duration) {
        self.completed += round.completed;
        if counted {
            for _ in 0..round.cycles {
                self.cycle_us.push(micros(elapsed));
            }
            if let Some(steps) = round.steps {
                for (sorted, step) in self.step_us.iter_mut().zip(steps) {
                    sorted.push(micros(step));
                }
            }
        }
        for failure in round.failures {
            self.fail(who, failure, counted);
        }
    }

    /// Counts `failure` (when `counted`) and prints the first few: a cycle that went wrong is a
    /// bug or an overloaded cluster, and the message says which.
    fn fail(&mut self, who: &str, failure: Failure, counted: bool) {
        if counted {
            self.errors.add(failure.kind);
        }
        if self.printed < FAILURES_PRINTED {
            self.printed += 1;
            eprintln!("bench pipelines: {who}: {}", failure.message);
        }
    }
}

/// Why a step failed: its kind, counted per run, and what happened.
#[derive(Debug)]
struct Failure {
    kind: String,
    message: String,
}

impl Failure {
    /// A call of `step` answered with `status`.
    fn status(step: &str, status: &tonic::Status) -> Failure {
        Failure {
            kind: format!("{step}: {}", super::status_kind(status)),
            message: format!("{step}: {}", status.message()),
        }
    }

    /// An item of a batch (or a stream step) of `step` refused with `error`.
    fn item(step: &str, error: &ItemError) -> Failure {
        Failure {
            kind: format!(
                "{step}: {:?}: {}",
                tonic::Code::from_i32(error.code),
                error.reason
            ),
            message: format!("{step}: {} ({})", error.message, error.reason),
        }
    }

    /// A call of the client library for `step` that failed with `error`.
    fn client(step: &str, error: &certus_client::ClientError) -> Failure {
        Failure {
            kind: format!("{step}: {:?}: {}", error.code(), error.reason()),
            message: format!("{step}: {error}"),
        }
    }

    /// Something the bench checks that did not hold: `what` is its kind, `message` the detail.
    fn other(step: &str, what: &str, message: String) -> Failure {
        Failure {
            kind: format!("{step}: {what}"),
            message: format!("{step}: {message}"),
        }
    }
}

/// What one round of calls did: one cycle unary, up to a batch of them batched.
#[derive(Debug, Default)]
struct Round {
    /// Each step's latency, when all three were made.
    steps: Option<[Duration; 3]>,
    /// Cycles of this round's own transactions that completed with success.
    cycles: usize,
    /// Completions acknowledged with status success (any transaction's).
    completed: u64,
    failures: Vec<Failure>,
}

impl Round {
    fn failed(failure: Failure) -> Round {
        Round {
            failures: vec![failure],
            ..Round::default()
        }
    }
}

/// One client's measurements.
type ClientTask = tokio::task::JoinHandle<ClientOutcome>;

/// Waits for every client of a run, Certus's or a peer's, and puts their measurements together;
/// also answers how many cycles completed in all.
async fn gather(
    system: &'static str,
    mode: String,
    clients: usize,
    duration: Duration,
    entries: Option<u64>,
    tasks: Vec<ClientTask>,
) -> Result<(Run, u64), String> {
    let mut cycle_us = Vec::new();
    let mut step_us: [Vec<u64>; 3] = Default::default();
    let mut errors = ErrorKinds::default();
    let mut completed = 0;
    for task in tasks {
        let outcome = task.await.map_err(|error| error.to_string())?;
        cycle_us.extend(outcome.cycle_us);
        for (all, one) in step_us.iter_mut().zip(outcome.step_us) {
            all.extend(one);
        }
        errors.merge(outcome.errors);
        completed += outcome.completed;
    }
    cycle_us.sort_unstable();
    for sorted in &mut step_us {
        sorted.sort_unstable();
    }
    let run = Run {
        system,
        mode,
        clients,
        cycles: cycle_us.len(),
        errors,
        elapsed: duration,
        entries,
        cycle_us,
        step_us,
    };
    Ok((run, completed))
}

/// The state of the `n`th transaction of a client at `step` (`new`, `done`).
fn state(n: u64, step: &str) -> String {
    format!(r#"{{"n":{n},"step":"{step}"}}"#)
}

/// An enqueue of the `n`th transaction into `node_group`'s in queue.
fn enqueue_request(node_group: &str, n: u64) -> EnqueueRequest {
    EnqueueRequest {
        owner: "bench".to_owned(),
        external_id: String::new(),
        route: Some(enqueue_request::Route::NodeGroup(node_group.to_owned())),
        queue: QueueType::In.into(),
        state: state(n, "new"),
        event: String::new(),
        metadata: None,
    }
}

/// A completion with success of transaction `id` claimed with `token`.
fn success(id: u64, token: u64) -> CompleteTransactionRequest {
    CompleteTransactionRequest {
        transaction_id: id,
        claim_token: token,
        status: TxStatus::Success.into(),
        state: format!(r#"{{"id":{id},"step":"done"}}"#),
    }
}

/// Enqueue, dequeue and complete one transaction, the `n`th of its client.
async fn cycle(
    grpc: &mut PipelinesClient<Channel>,
    node_group: &str,
    worker: &str,
    n: u64,
) -> Round {
    let began = Instant::now();
    let enqueued = match grpc.enqueue(enqueue_request(node_group, n)).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => return Round::failed(Failure::status("enqueue", &status)),
    };
    let enqueue = began.elapsed();

    let began = Instant::now();
    let request = DequeueRequest {
        node_group: node_group.to_owned(),
        worker: worker.to_owned(),
        max: 1,
        wait_ms: 0,
    };
    let dequeued = match grpc.dequeue(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => return Round::failed(Failure::status("dequeue", &status)),
    };
    let dequeue = began.elapsed();
    let [transaction] = dequeued.transactions.as_slice() else {
        return Round::failed(Failure::other(
            "dequeue",
            "not one transaction",
            format!(
                "{} transactions, not the one just enqueued",
                dequeued.transactions.len()
            ),
        ));
    };
    let ours = transaction.id == enqueued.transaction_id;

    let began = Instant::now();
    let request = success(transaction.id, transaction.claim_token);
    let completed = match grpc.complete(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => return Round::failed(Failure::status("complete", &status)),
    };
    let complete = began.elapsed();
    let mut round = Round::default();
    if completed.status == i32::from(TxStatus::Success) {
        // Another transaction (left by a failed cycle) completed all the same.
        round.completed = 1;
    } else {
        round.failures.push(Failure::other(
            "complete",
            "not success",
            format!("status {} answered", completed.status),
        ));
    }
    if !ours {
        round.failures.push(Failure::other(
            "dequeue",
            "another transaction",
            format!(
                "transaction {}, not {} just enqueued",
                transaction.id, enqueued.transaction_id
            ),
        ));
    } else if round.completed == 1 {
        round.cycles = 1;
        round.steps = Some([enqueue, dequeue, complete]);
    }
    round
}

fn report(runs: &[Run], as_json: bool) {
    if as_json {
        let rows: Vec<_> = runs
            .iter()
            .map(|run| {
                let steps: serde_json::Map<_, _> = STEPS
                    .iter()
                    .zip(&run.step_us)
                    .map(|(name, sorted)| {
                        (
                            (*name).to_owned(),
                            json!({ "p50_ms": ms(sorted, 0.50), "p99_ms": ms(sorted, 0.99) }),
                        )
                    })
                    .collect();
                json!({
                    "system": run.system,
                    "mode": run.mode,
                    "clients": run.clients,
                    "cycles": run.cycles,
                    "errors": run.errors.total(),
                    "errors_by_kind": run.errors.to_json(),
                    "cycles_per_second": run.cycles_per_second(),
                    "raft_entries": run.entries,
                    "writes_per_entry": run.writes_per_entry(),
                    "p50_ms": ms(&run.cycle_us, 0.50),
                    "p99_ms": ms(&run.cycle_us, 0.99),
                    "max_ms": ms(&run.cycle_us, 1.0),
                    "steps": steps,
                })
            })
            .collect();
        println!("{}", json!({ "bench": "pipelines", "runs": rows }));
        return;
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "system",
        "mode",
        "clients",
        "cycles/s",
        "cycle p50 ms",
        "p99 ms",
        "max ms",
        "enqueue / dequeue / complete p50 ms",
        "steps per Raft entry",
        "errors",
    ]);
    for run in runs {
        let steps: Vec<String> = run
            .step_us
            .iter()
            .map(|sorted| format!("{:.2}", ms(sorted, 0.50)))
            .collect();
        table.add_row([
            run.system.to_owned(),
            run.mode.clone(),
            run.clients.to_string(),
            format!("{:.0}", run.cycles_per_second()),
            format!("{:.2}", ms(&run.cycle_us, 0.50)),
            format!("{:.2}", ms(&run.cycle_us, 0.99)),
            format!("{:.2}", ms(&run.cycle_us, 1.0)),
            steps.join(" / "),
            run.writes_per_entry()
                .map_or_else(|| "–".to_owned(), |writes| format!("{writes:.1}")),
            run.errors.total().to_string(),
        ]);
    }
    println!("{table}");
    for line in ratio_lines(runs) {
        println!("{line}");
    }
    for run in runs.iter().filter(|run| run.errors.total() > 0) {
        println!(
            "errors, {} ({}) at {} clients: {}",
            run.system,
            run.mode,
            run.clients,
            run.errors.describe()
        );
    }
}

/// For each run of a peer, the Certus run at the same client count beside it:
/// `cycles at 50 clients: Certus (batch 16) 20000/s, Redis 18000/s, ratio 1.11×`.
fn ratio_lines(runs: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    for peer in runs.iter().filter(|run| run.system != CERTUS) {
        let Some(certus) = runs
            .iter()
            .find(|run| run.system == CERTUS && run.clients == peer.clients)
        else {
            continue;
        };
        let (mine, theirs) = (certus.cycles_per_second(), peer.cycles_per_second());
        let ratio = if theirs > 0.0 {
            format!("{:.2}×", mine / theirs)
        } else {
            format!("none ({} made no cycles)", peer.system)
        };
        lines.push(format!(
            "cycles at {} clients: {CERTUS} ({}) {mine:.0}/s, {} {theirs:.0}/s, ratio {ratio}",
            peer.clients, certus.mode, peer.system
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: &'static str, clients: usize, cycles: usize) -> Run {
        Run {
            system,
            mode: if system == CERTUS {
                "batch 16".to_owned()
            } else {
                redis::MODE.to_owned()
            },
            clients,
            cycles,
            errors: ErrorKinds::default(),
            elapsed: Duration::from_secs(2),
            entries: (system == CERTUS).then_some(100),
            cycle_us: Vec::new(),
            step_us: Default::default(),
        }
    }

    #[test]
    fn a_ratio_line_pairs_each_redis_run_with_certus_at_the_same_clients() {
        let single = redis::Setup::Single.system();
        let replicated = redis::Setup::Replicated.system();
        let runs = [
            run(CERTUS, 1, 800),
            run(CERTUS, 50, 12_000),
            run(single, 1, 3200),
            run(replicated, 1, 0),
            run(single, 50, 40_000),
        ];
        assert_eq!(
            ratio_lines(&runs),
            [
                "cycles at 1 clients: Certus (batch 16) 400/s, Redis 1600/s, ratio 0.25×",
                "cycles at 1 clients: Certus (batch 16) 400/s, Redis + 2 replicas 0/s, ratio none \
                 (Redis + 2 replicas made no cycles)",
                "cycles at 50 clients: Certus (batch 16) 6000/s, Redis 20000/s, ratio 0.30×",
            ]
        );
        assert_eq!(runs[0].writes_per_entry(), Some(24.0));
        assert_eq!(
            runs[2].writes_per_entry(),
            None,
            "Redis has no Raft entries"
        );
    }

    #[test]
    fn redis_servers_append_and_fsync_every_write() {
        let addr: SocketAddr = "127.0.0.1:6390".parse().expect("an address");
        let args = redis::server_args(addr, "/tmp/primary");
        let value = |flag: &str| {
            let at = args.iter().position(|arg| arg == flag).expect(flag);
            args[at + 1].clone()
        };
        assert_eq!(value("--port"), "6390");
        assert_eq!(value("--bind"), "127.0.0.1");
        assert_eq!(value("--appendonly"), "yes");
        assert_eq!(value("--appendfsync"), "always");
        assert_eq!(value("--save"), "", "no RDB snapshots");
    }
}
