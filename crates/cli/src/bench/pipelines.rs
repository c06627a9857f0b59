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
}

/// Finished transactions are archived after this long…
const ARCHIVE_DELAY_MS: u64 = 1_000;
/// …and deleted this long after that: past the end of any run, so the count of successes
/// checks every acknowledged completion.
const ARCHIVE_RETENTION_MS: u64 = 3_600_000;

#[derive(Debug)]
struct Run {
    clients: usize,
    cycles: usize,
    errors: usize,
    elapsed: Duration,
    /// Raft entries the leader appended during the measured part: how well writes batch.
    entries: u64,
    /// Whole cycles, then each step, in microseconds, sorted.
    cycle_us: Vec<u64>,
    step_us: [Vec<u64>; 3],
}

const STEPS: [&str; 3] = ["enqueue", "dequeue", "complete"];

impl Run {
    fn cycles_per_second(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    /// Client writes (three per cycle) per Raft entry.
    fn writes_per_entry(&self) -> f64 {
        (self.cycles * 3) as f64 / self.entries.max(1) as f64
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
    report(&runs, args.json);
    cluster.shutdown().await;
    Ok(())
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
            run.clients.to_string(),
            format!("{:.0}", run.cycles_per_second()),
            format!("{:.2}", ms(&run.cycle_us, 0.50)),
            format!("{:.2}", ms(&run.cycle_us, 0.99)),
            format!("{:.2}", ms(&run.cycle_us, 1.0)),
            steps.join(" / "),
            format!("{:.1}", run.writes_per_entry()),
            run.errors.to_string(),
        ]);
    }
    println!("{table}");
}
