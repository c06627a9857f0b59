//! `certus bench grpc`: the transport's ceiling. A 3-node cluster on loopback in this process,
//! C concurrent clients each making unary `grpc.health.v1.Health/Check` calls to the leader, one
//! at a time; prints calls/s and p50/p99 latency for each C.
//!
//! A health check touches no Raft, no disk and no lock worth the name, but it crosses everything
//! else a client request crosses: HTTP/2 on both sides, the node's layers (authorization, limits,
//! metrics, tracing) and a task hand-off each way. Its rate bounds every benchmark that makes one
//! unary call per operation: `pipelines` makes three per cycle, so its cycles/s cannot exceed a
//! third of this figure at the same client count.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use certus_proto::health::HealthCheckRequest;
use certus_proto::health::health_client::HealthClient;
use comfy_table::Table;
use serde_json::json;

use super::{WARM_UP, micros, percentile};

/// Options of `certus bench grpc`.
#[derive(Debug, clap::Args)]
pub(crate) struct GrpcArgs {
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

#[derive(Debug)]
struct Run {
    clients: usize,
    errors: usize,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Run {
    fn calls_per_second(&self) -> f64 {
        self.latencies_us.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn ms(&self, fraction: f64) -> f64 {
        percentile(&self.latencies_us, fraction).map_or(0.0, |us| us as f64 / 1000.0)
    }
}

pub(super) async fn run(args: GrpcArgs) -> Result<(), String> {
    super::check_client_counts(&args.clients)?;
    if args.seconds == 0 {
        return Err("--seconds: at least 1".into());
    }
    let cluster = super::LocalCluster::start(|_| {}).await?;
    let (leader, leader_addr) = (cluster.leader, cluster.leader_addr);
    eprintln!("bench grpc: 3 nodes on loopback, health checks to leader node {leader}");
    let mut runs = Vec::new();
    for &clients in &args.clients {
        let run = measure(leader_addr, clients, Duration::from_secs(args.seconds)).await?;
        eprintln!(
            "bench grpc: x{clients}: {:.0} calls/s",
            run.calls_per_second()
        );
        runs.push(run);
    }
    report(&runs, args.json);
    cluster.shutdown().await;
    Ok(())
}

async fn measure(leader: SocketAddr, clients: usize, duration: Duration) -> Result<Run, String> {
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let mut grpc = HealthClient::new(super::channel(leader).await?);
        tasks.push(tokio::spawn(async move {
            let mut latencies_us = Vec::new();
            let mut errors = 0usize;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                // The empty name asks after the node as a whole.
                let answered = grpc
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await;
                if began < start {
                    continue;
                }
                match answered {
                    Ok(_) => latencies_us.push(micros(began.elapsed())),
                    Err(status) => {
                        errors += 1;
                        if errors <= 3 {
                            eprintln!("bench grpc: check: {}", status.message());
                        }
                    }
                }
            }
            (latencies_us, errors)
        }));
    }
    let mut latencies_us = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (latencies, failed) = task.await.map_err(|error| error.to_string())?;
        latencies_us.extend(latencies);
        errors += failed;
    }
    latencies_us.sort_unstable();
    Ok(Run {
        clients,
        errors,
        elapsed: duration,
        latencies_us,
    })
}

fn report(runs: &[Run], as_json: bool) {
    if as_json {
        let rows: Vec<_> = runs
            .iter()
            .map(|run| {
                json!({
                    "clients": run.clients,
                    "calls": run.latencies_us.len(),
                    "errors": run.errors,
                    "calls_per_second": run.calls_per_second(),
                    "p50_ms": run.ms(0.50),
                    "p99_ms": run.ms(0.99),
                })
            })
            .collect();
        println!("{}", json!({ "bench": "grpc", "runs": rows }));
        return;
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(["clients", "calls/s", "p50 ms", "p99 ms", "errors"]);
    for run in runs {
        table.add_row([
            run.clients.to_string(),
            format!("{:.0}", run.calls_per_second()),
            format!("{:.3}", run.ms(0.50)),
            format!("{:.3}", run.ms(0.99)),
            run.errors.to_string(),
        ]);
    }
    println!("{table}");
}
