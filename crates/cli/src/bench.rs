//! `certus bench`: measure this machine with a 3-node cluster on loopback, started in this
//! process, under concurrent clients that also run in this process (as a benchmark tool on the
//! same machine would).
//!
//! - `raft` ([`raft`]): durable writes and linearizable reads through Raft.
//! - `ct` ([`ct`]): the CT log — add-chain throughput and merge delay, proof and STH reads over
//!   RFC 6962 HTTP and gRPC, and memory per logged entry.
//! - `ct-store` ([`ct_store`]): one node's CT store at scale, without Raft — leaves/s, memory,
//!   disk bytes per entry and proof latency at N entries.
//! - `sessions` ([`sessions`]): CA issuance sessions driven end to end (create, HTTP-01, issue,
//!   check the certificate, acknowledge) per second, with create→done latency.
//! - `pipelines` ([`pipelines`]): transaction pipelines' enqueue → dequeue → complete cycles per
//!   second, with each step's latency.
//! - `grpc` ([`grpc`]): the transport's ceiling — unary health checks per second, which bound
//!   every benchmark above that makes one call per operation.
//! - `acme` ([`acme`]): ACME orders completed per second by the real `lego` client, one process
//!   per order, against the cluster and, in the same run, against Pebble.
//!
//! `raft --peer` and `pipelines --peer` then run the same workload against another system
//! ([`peer`]): etcd and Redis, started by the benchmark on loopback from their installed
//! binaries.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

mod acme;
mod ct;
mod ct_store;
mod grpc;
mod peer;
mod pipelines;
mod raft;
mod sessions;

/// Options of `certus bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    what: Benchmark,
}

/// What to measure.
#[derive(Debug, clap::Subcommand)]
enum Benchmark {
    /// Durable writes and linearizable reads through Raft.
    Raft(raft::RaftArgs),
    /// The CT log: add-chain/s with merge delay, proof and STH reads/s, memory per entry.
    Ct(ct::CtArgs),
    /// One node's CT store at scale, no Raft: leaves/s, memory, disk per entry, proof latency.
    #[command(name = "ct-store")]
    CtStore(ct_store::CtStoreArgs),
    /// CA issuance sessions end to end: sessions/s, create→done latency, failures.
    Sessions(sessions::SessionsArgs),
    /// Transaction pipelines: enqueue → dequeue → complete cycles/s and their latency.
    Pipelines(pipelines::PipelinesArgs),
    /// The transport's ceiling: unary health checks/s against the leader.
    Grpc(grpc::GrpcArgs),
    /// ACME orders/s end to end with lego, one process per order, against Certus and Pebble.
    Acme(acme::AcmeArgs),
}

pub(crate) async fn run(args: BenchArgs) -> Result<(), String> {
    match args.what {
        Benchmark::Raft(args) => raft::run(args).await,
        Benchmark::Ct(args) => ct::run(args).await,
        Benchmark::CtStore(args) => ct_store::run(args).await,
        Benchmark::Sessions(args) => sessions::run(args).await,
        Benchmark::Pipelines(args) => pipelines::run(args).await,
        Benchmark::Grpc(args) => grpc::run(args).await,
        Benchmark::Acme(args) => acme::run(args).await,
    }
}

/// Requests made during this first part of a run are not counted: connections open, caches and
/// the leader's pipeline fill.
const WARM_UP: Duration = Duration::from_secs(1);

/// `configs` without per-client limits: every benchmark client shares the loopback address, and
/// the figures measure the cluster, not the limiter.
fn unlimited(mut configs: Vec<certus_node::NodeConfig>) -> Vec<certus_node::NodeConfig> {
    for config in &mut configs {
        config.client_limits.enabled = false;
    }
    configs
}

/// A 3-node cluster on loopback in this process, without per-client limits, with its leader
/// elected. The nodes' data lives in `_dir` for as long as the cluster does.
struct LocalCluster {
    _dir: tempfile::TempDir,
    nodes: Vec<certus_node::Node>,
    /// The leader's id and gRPC address.
    leader: u64,
    leader_addr: SocketAddr,
}

impl LocalCluster {
    /// Starts it, each node's default configuration changed by `tune`.
    async fn start(tune: impl Fn(&mut certus_node::NodeConfig)) -> Result<LocalCluster, String> {
        let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
        let mut configs = Vec::new();
        for id in 1..=3 {
            let mut config = certus_node::NodeConfig::new(
                id,
                free_addr()?,
                free_addr()?,
                dir.path().join(format!("node-{id}")),
            );
            tune(&mut config);
            configs.push(config);
        }
        let configs = unlimited(configs);
        let nodes = crate::cluster::start_local(&configs).await?;
        let leader = crate::cluster::await_leader(&nodes, Duration::from_secs(10))
            .await
            .ok_or("no leader elected within 10 s")?;
        let leader_addr = configs
            .iter()
            .find(|config| config.id == leader)
            .map(|config| config.grpc_addr)
            .ok_or("the leader is not a configured node")?;
        Ok(LocalCluster {
            _dir: dir,
            nodes,
            leader,
            leader_addr,
        })
    }

    async fn shutdown(self) {
        for node in self.nodes {
            node.shutdown().await;
        }
    }
}

/// A plain-text HTTP/2 channel of its own to `addr`, as one benchmark client.
async fn channel(addr: SocketAddr) -> Result<tonic::transport::Channel, String> {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|error| error.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|error| error.to_string())
}

/// Refuses a `--clients` list that is empty or holds a count of 0: every bench takes one run
/// per count.
fn check_client_counts(clients: &[usize]) -> Result<(), String> {
    if clients.is_empty() || clients.contains(&0) {
        return Err(format!(
            "--clients needs one or more counts of at least 1, got {clients:?}"
        ));
    }
    Ok(())
}

fn free_addr() -> Result<SocketAddr, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|error| error.to_string())?;
    listener.local_addr().map_err(|error| error.to_string())
}

/// The nearest-rank percentile of sorted `values` (`fraction` in 0..=1), or `None` when there
/// are none.
fn percentile<T: Copy>(sorted: &[T], fraction: f64) -> Option<T> {
    assert!(
        (0.0..=1.0).contains(&fraction),
        "a fraction, not {fraction}"
    );
    if sorted.is_empty() {
        return None;
    }
    // The product is within 0..len, so the conversion cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rank = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    Some(sorted[rank])
}

/// What kind of error `status` is: its gRPC code and the node's `certus-error` reason (or,
/// without one, the start of the message).
fn status_kind(status: &tonic::Status) -> String {
    let reason = status
        .metadata()
        .get(certus_node::errors::ERROR_REASON_KEY)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_else(|| status.message().chars().take(60).collect());
    format!("{:?}: {reason}", status.code())
}

/// Errors a run met, by kind: the gRPC code and the node's `certus-error` reason (or, without
/// one, the start of the message), so a figure with errors says what they were.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct ErrorKinds(std::collections::BTreeMap<String, usize>);

impl ErrorKinds {
    fn record(&mut self, status: &tonic::Status) {
        self.add(status_kind(status));
    }

    /// Counts one error of `kind`, as [`status_kind`] names a status or as the caller names
    /// another failure (`dequeue: another transaction`).
    fn add(&mut self, kind: String) {
        *self.0.entry(kind).or_default() += 1;
    }

    fn merge(&mut self, other: ErrorKinds) {
        for (kind, count) in other.0 {
            *self.0.entry(kind).or_default() += count;
        }
    }

    fn total(&self) -> usize {
        self.0.values().sum()
    }

    /// `count × kind` pairs, most frequent first; empty without errors.
    fn describe(&self) -> String {
        let mut kinds: Vec<(&String, &usize)> = self.0.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        kinds
            .into_iter()
            .map(|(kind, count)| format!("{count} × {kind}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!(self.0)
    }
}

/// Microseconds, saturating (a run never lasts 500 000 years).
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.0), Some(1));
        assert_eq!(percentile(&values, 0.5), Some(51));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 1.0), Some(100));
        assert_eq!(percentile::<u64>(&[], 0.5), None);
        assert_eq!(percentile(&[7u64], 0.99), Some(7));
    }

    #[test]
    fn client_counts_are_one_or_more_and_never_zero() {
        assert_eq!(check_client_counts(&[1, 16]), Ok(()));
        assert!(check_client_counts(&[]).is_err());
        assert_eq!(
            check_client_counts(&[1, 0]),
            Err("--clients needs one or more counts of at least 1, got [1, 0]".to_owned())
        );
    }

    #[test]
    fn both_benchmarks_parse_with_their_own_defaults() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let raft = Cli::try_parse_from(["bench", "raft"]).expect("raft parses");
        assert!(matches!(raft.bench.what, Benchmark::Raft(_)), "{raft:?}");
        let ct = Cli::try_parse_from(["bench", "ct", "--clients", "8", "--entries", "1000"])
            .expect("ct parses");
        assert!(matches!(ct.bench.what, Benchmark::Ct(_)), "{ct:?}");
        assert!(
            Cli::try_parse_from(["bench"]).is_err(),
            "a benchmark is required"
        );
        assert!(
            Cli::try_parse_from(["bench", "raft", "--entries", "5"]).is_err(),
            "--entries is ct's"
        );
    }

    #[test]
    fn the_sessions_benchmark_parses_with_its_own_defaults() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let defaults = Cli::try_parse_from(["bench", "sessions"]).expect("sessions parses");
        assert!(
            matches!(defaults.bench.what, Benchmark::Sessions(_)),
            "{defaults:?}"
        );
        let chosen = Cli::try_parse_from([
            "bench",
            "sessions",
            "--clients",
            "1,16,64",
            "--seconds",
            "3",
            "--challenges-at",
            "nodes",
            "--json",
        ])
        .expect("sessions parses its options");
        assert!(
            matches!(chosen.bench.what, Benchmark::Sessions(_)),
            "{chosen:?}"
        );
        assert!(
            Cli::try_parse_from(["bench", "sessions", "--challenges-at", "dns"]).is_err(),
            "only clients or nodes"
        );
        assert!(
            Cli::try_parse_from(["bench", "sessions", "--entries", "5"]).is_err(),
            "--entries is ct's"
        );
    }

    #[test]
    fn the_pipelines_benchmark_parses_with_its_own_defaults() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let defaults = Cli::try_parse_from(["bench", "pipelines"]).expect("pipelines parses");
        assert!(
            matches!(defaults.bench.what, Benchmark::Pipelines(_)),
            "{defaults:?}"
        );
        let chosen = Cli::try_parse_from([
            "bench",
            "pipelines",
            "--clients",
            "1,50",
            "--seconds",
            "3",
            "--json",
        ])
        .expect("pipelines parses its options");
        assert!(
            matches!(chosen.bench.what, Benchmark::Pipelines(_)),
            "{chosen:?}"
        );
        assert!(
            Cli::try_parse_from(["bench", "pipelines", "--challenges-at", "nodes"]).is_err(),
            "--challenges-at is sessions'"
        );
    }

    #[test]
    fn the_grpc_benchmark_parses_with_its_own_defaults() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let chosen = Cli::try_parse_from(["bench", "grpc", "--clients", "1,50", "--json"])
            .expect("grpc parses its options");
        assert!(
            matches!(chosen.bench.what, Benchmark::Grpc(_)),
            "{chosen:?}"
        );
        assert!(
            Cli::try_parse_from(["bench", "grpc", "--tls"]).is_err(),
            "--tls is raft's"
        );
    }
}
