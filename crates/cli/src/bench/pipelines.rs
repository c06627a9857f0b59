//! `certus bench pipelines`: a 3-node cluster on loopback in this process, C concurrent
//! clients each running enqueue → dequeue → complete cycles of the transaction pipelines, one
//! transaction at a time; prints cycles/s and p50/p99/max cycle latency for each C.
//!
//! A cycle is three durable Raft writes: `Enqueue` into the client's own node group (`bench-c`,
//! queue `in`, a small JSON state), `Dequeue` of one transaction from it, and `Complete` with
//! status success and a new state — the pipelines' LPUSH → LMOVE → LREM. Each client owns its
//! node group, so every dequeue finds exactly the transaction its client just enqueued (a
//! dequeue that finds another, or none, fails the bench). After each run the per-status counts
//! are read back through a linearizable read: every acknowledged completion must be there.
//!
//! The clients run in the same process as the nodes (as a benchmark tool on the same machine
//! would), each over its own HTTP/2 connection, all to the leader. The pipelines are configured
//! to archive a second after completion (so the archive runs beside the cycles) and to keep
//! archived transactions for an hour, so that every completion of a run can be counted.
//!
//! With `--peer`, the same cycle then runs against Redis ([`redis`]), alone and replicated, and
//! the table gets their rows and ratio lines per client count.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::{
    CompleteTransactionRequest, DequeueRequest, EnqueueRequest, GetPipelineConfigRequest,
    PipelinesStatusRequest, QueueType, SetPipelineConfigRequest, TxStatus, enqueue_request,
};
use comfy_table::Table;
use serde_json::json;
use tonic::transport::Channel;

use super::{WARM_UP, micros, percentile};

mod redis;

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
    /// Then run the same cycle against Redis (LPUSH → LMOVE → LREM): one process with its AOF
    /// fsynced on every write, then a primary and 2 replicas with `WAIT 2` after every step,
    /// started from the installed `redis-server` (Debian's redis-server); without it, say how
    /// to install it and measure Certus alone.
    #[arg(long)]
    peer: bool,
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
    clients: usize,
    cycles: usize,
    errors: usize,
    elapsed: Duration,
    /// Raft entries the leader appended during the measured part: how well writes batch (none
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

    /// Client writes (three per cycle) per Raft entry, for Certus.
    fn writes_per_entry(&self) -> Option<f64> {
        self.entries
            .map(|entries| (self.cycles * 3) as f64 / entries.max(1) as f64)
    }
}

fn ms(sorted_us: &[u64], fraction: f64) -> f64 {
    percentile(sorted_us, fraction).map_or(0.0, |us| us as f64 / 1000.0)
}

pub(super) async fn run(args: PipelinesArgs) -> Result<(), String> {
    if args.clients.is_empty() || args.clients.contains(&0) {
        return Err("--clients: one or more counts, each at least 1".into());
    }
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
            "bench pipelines: x{clients}: {:.0} cycles/s",
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
    round: usize,
    clients: usize,
    duration: Duration,
) -> Result<(Run, u64), String> {
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let mut grpc = connect(leader).await?;
        let node_group = format!("bench-{round}-{client}");
        let worker = format!("worker-{round}-{client}");
        tasks.push(tokio::spawn(async move {
            let mut cycles_us = Vec::new();
            let mut steps_us: [Vec<u64>; 3] = Default::default();
            let mut errors = 0usize;
            let mut completed = 0u64;
            let mut n = 0u64;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                n += 1;
                let counted = began >= start;
                match cycle(&mut grpc, &node_group, &worker, n).await {
                    Ok(steps) => {
                        completed += 1;
                        if counted {
                            cycles_us.push(micros(began.elapsed()));
                            for (sorted, step) in steps_us.iter_mut().zip(steps) {
                                sorted.push(micros(step));
                            }
                        }
                    }
                    Err(error) => {
                        if counted {
                            errors += 1;
                        }
                        // A cycle that went wrong is a bug or an overloaded cluster: say which.
                        if errors <= 3 {
                            eprintln!("bench pipelines: {node_group}: {error}");
                        }
                    }
                }
            }
            (cycles_us, steps_us, errors, completed)
        }));
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
    tokio::time::sleep_until(start.into()).await;
    let entries_before = last_log_index();
    tokio::time::sleep_until(end.into()).await;
    let entries = last_log_index() - entries_before;
    gather(CERTUS, clients, duration, Some(entries), tasks).await
}

/// One client's measurements: cycle latencies, each step's latencies (µs), errors, cycles
/// completed (counted or not).
type ClientTask = tokio::task::JoinHandle<(Vec<u64>, [Vec<u64>; 3], usize, u64)>;

/// Waits for every client of a run, Certus's or a peer's, and puts their measurements together;
/// also answers how many cycles completed in all.
async fn gather(
    system: &'static str,
    clients: usize,
    duration: Duration,
    entries: Option<u64>,
    tasks: Vec<ClientTask>,
) -> Result<(Run, u64), String> {
    let mut cycle_us = Vec::new();
    let mut step_us: [Vec<u64>; 3] = Default::default();
    let mut errors = 0;
    let mut completed = 0;
    for task in tasks {
        let (cycles, steps, failed, done) = task.await.map_err(|error| error.to_string())?;
        cycle_us.extend(cycles);
        for (all, one) in step_us.iter_mut().zip(steps) {
            all.extend(one);
        }
        errors += failed;
        completed += done;
    }
    cycle_us.sort_unstable();
    for sorted in &mut step_us {
        sorted.sort_unstable();
    }
    let run = Run {
        system,
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

/// Enqueue, dequeue and complete one transaction; answers each step's latency.
async fn cycle(
    grpc: &mut PipelinesClient<Channel>,
    node_group: &str,
    worker: &str,
    n: u64,
) -> Result<[Duration; 3], String> {
    let began = Instant::now();
    let enqueued = grpc
        .enqueue(EnqueueRequest {
            owner: "bench".to_owned(),
            external_id: String::new(),
            route: Some(enqueue_request::Route::NodeGroup(node_group.to_owned())),
            queue: QueueType::In.into(),
            state: format!(r#"{{"n":{n},"step":"new"}}"#),
            event: String::new(),
            metadata: None,
        })
        .await
        .map_err(|status| format!("enqueue: {}", status.message()))?
        .into_inner();
    let enqueue = began.elapsed();

    let began = Instant::now();
    let dequeued = grpc
        .dequeue(DequeueRequest {
            node_group: node_group.to_owned(),
            worker: worker.to_owned(),
            max: 1,
            wait_ms: 0,
        })
        .await
        .map_err(|status| format!("dequeue: {}", status.message()))?
        .into_inner();
    let dequeue = began.elapsed();
    let [transaction] = dequeued.transactions.as_slice() else {
        return Err(format!(
            "dequeue: {} transactions, not the one just enqueued",
            dequeued.transactions.len()
        ));
    };
    if transaction.id != enqueued.transaction_id {
        return Err(format!(
            "dequeue: transaction {}, not {} just enqueued",
            transaction.id, enqueued.transaction_id
        ));
    }

    let began = Instant::now();
    let completed = grpc
        .complete(CompleteTransactionRequest {
            transaction_id: transaction.id,
            claim_token: transaction.claim_token,
            status: TxStatus::Success.into(),
            state: format!(r#"{{"n":{n},"step":"done"}}"#),
        })
        .await
        .map_err(|status| format!("complete: {}", status.message()))?
        .into_inner();
    let complete = began.elapsed();
    if completed.status != i32::from(TxStatus::Success) {
        return Err(format!("complete: status {} answered", completed.status));
    }
    Ok([enqueue, dequeue, complete])
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
                    "clients": run.clients,
                    "cycles": run.cycles,
                    "errors": run.errors,
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
        "clients",
        "cycles/s",
        "cycle p50 ms",
        "p99 ms",
        "max ms",
        "enqueue / dequeue / complete p50 ms",
        "writes per Raft entry",
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
            run.clients.to_string(),
            format!("{:.0}", run.cycles_per_second()),
            format!("{:.2}", ms(&run.cycle_us, 0.50)),
            format!("{:.2}", ms(&run.cycle_us, 0.99)),
            format!("{:.2}", ms(&run.cycle_us, 1.0)),
            steps.join(" / "),
            run.writes_per_entry()
                .map_or_else(|| "–".to_owned(), |writes| format!("{writes:.1}")),
            run.errors.to_string(),
        ]);
    }
    println!("{table}");
    for line in ratio_lines(runs) {
        println!("{line}");
    }
}

/// For each run of a peer, the Certus run at the same client count beside it:
/// `cycles at 50 clients: Certus 6000/s, Redis 28000/s, ratio 0.21×`.
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
            "cycles at {} clients: {CERTUS} {mine:.0}/s, {} {theirs:.0}/s, ratio {ratio}",
            peer.clients, peer.system
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
            clients,
            cycles,
            errors: 0,
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
                "cycles at 1 clients: Certus 400/s, Redis 1600/s, ratio 0.25×",
                "cycles at 1 clients: Certus 400/s, Redis + 2 replicas 0/s, ratio none (Redis + 2 \
                 replicas made no cycles)",
                "cycles at 50 clients: Certus 6000/s, Redis 20000/s, ratio 0.30×",
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
