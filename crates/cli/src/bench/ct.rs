//! `certus bench ct`: the clustered CT log on a 3-node cluster on loopback in this process,
//! every node with the same generated log key and one test root.
//!
//! In order, on one cluster:
//! 1. **Memory**: RSS before and after logging `--entries` entries (each numbered, integrated,
//!    served and cleaned up from the replicated state), per entry, scaled to a million.
//! 2. **add-chain**: for each C in `--clients`, C submitters over `certus.v1.Log/AddChain`,
//!    client i on node i mod 3 (followers forward), for `--seconds`: add-chain/s, submit
//!    latency, and each acknowledged entry's merge delay — from its SCT timestamp to the first
//!    time any node served a tree that contains it ([`sth_watch`]). After the load the bench
//!    waits (bounded) until the serving tree covers every entry; any it does not cover are
//!    reported, not hidden.
//! 3. **Reads**: for each C, C readers spread over the nodes asking get-sth and
//!    get-proof-by-hash (of logged leaves, in the serving tree) over RFC 6962 HTTP and gRPC.
//!
//! Every certificate is issued before anything is measured ([`pki`]). The log runs with the
//! cluster's default configuration unless a `--*-ms`/`--unsequenced-watermark` flag sets one
//! through `Log/SetConfig`; the output shows the configuration in force.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use certus_ct::Hash;
use certus_ct::signer::EcdsaP256Signer;
use certus_node::{CtFiles, Node, NodeConfig};
use certus_proto::v1::log_client::LogClient;
use certus_proto::v1::{GetSthRequest, LogConfig, LogStatusRequest, SetLogConfigRequest};
use comfy_table::Table;
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint};

use super::{WARM_UP, free_addr, percentile};
use crate::cluster::{await_leader, start_local};
use crate::limits::BENCH_CT_PROOF_TARGETS_MAX;

mod pki;
pub(super) mod process;
mod reads;
mod sth_watch;
mod submit;

use pki::TestPki;
use reads::{ProofTargets, ReadOp, ReadRun, Transport};
use sth_watch::SthWatch;
use submit::{Acknowledged, MergeDelays, Submitted, Until, merge_delays, per_second};

/// Options of `certus bench ct`.
#[derive(Debug, clap::Args)]
pub(crate) struct CtArgs {
    /// Concurrent clients: one add-chain run and one run of each read for each.
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    clients: Vec<usize>,
    /// How long each run measures, in seconds (after a one-second warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Entries logged between the two memory measurements (the figure is scaled from these to
    /// a million).
    #[arg(long, default_value_t = 100_000)]
    entries: u64,
    /// Leaves are issued before measuring, enough for this many add-chains per second of
    /// every run; a run that uses them all stops early and says so.
    #[arg(long, default_value_t = 20_000)]
    leaf_rate_max: u64,
    /// Set the log's signing interval (ms) through Log/SetConfig before measuring.
    #[arg(long)]
    signing_interval_ms: Option<u64>,
    /// Set the log's sequencing interval (ms) through Log/SetConfig before measuring.
    #[arg(long)]
    sequencing_interval_ms: Option<u64>,
    /// Set the log's guard window (ms) through Log/SetConfig before measuring.
    #[arg(long)]
    guard_window_ms: Option<u64>,
    /// Set the log's unsequenced watermark through Log/SetConfig before measuring.
    #[arg(long)]
    unsequenced_watermark: Option<u64>,
    /// Each node's store page cache (`[store] cache_mib`), in MiB: set it low to see the
    /// memory that grows with the log apart from this bounded cache.
    #[arg(long, default_value_t = certus_store::SLED_CACHE_MIB_DEFAULT)]
    store_cache_mib: u64,
    /// Each node's cache of full Merkle tiles (`[ct] tile_cache_tiles`, 16 KiB each expanded):
    /// set it low, with `--store-cache-mib`, to see the memory that grows with the log apart
    /// from both bounded caches.
    #[arg(long, default_value_t = certus_store::CT_TILE_CACHE_TILES_DEFAULT)]
    tile_cache_tiles: usize,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

impl CtArgs {
    fn check(&self) -> Result<(), String> {
        super::check_client_counts(&self.clients)?;
        if self.seconds == 0 || self.entries == 0 || self.leaf_rate_max == 0 {
            return Err("--seconds, --entries and --leaf-rate-max must be at least 1".into());
        }
        Ok(())
    }

    /// Whether any flag changes the log's configuration.
    fn sets_config(&self) -> bool {
        self.signing_interval_ms.is_some()
            || self.sequencing_interval_ms.is_some()
            || self.guard_window_ms.is_some()
            || self.unsequenced_watermark.is_some()
    }

    /// Leaves for the whole bench: the memory phase and every add-chain run at up to
    /// `--leaf-rate-max` per second (warm-up included).
    fn leaves_needed(&self) -> Result<usize, String> {
        let per_run = (self.seconds + WARM_UP.as_secs()) * self.leaf_rate_max;
        let total = MEMORY_WARM_UP_ENTRIES + self.entries + per_run * self.clients.len() as u64;
        usize::try_from(total).map_err(|_| format!("{total} leaves do not fit in memory"))
    }
}

/// Submitters of the memory phase.
const MEMORY_CLIENTS: usize = 64;
/// Entries logged before the first memory measurement, so connections, buffers and the
/// nodes' pipelines exist in both measurements.
const MEMORY_WARM_UP_ENTRIES: u64 = 2_000;
/// How long, at most, the bench waits after a load for the serving tree to cover everything
/// (and, after the memory phase, for the clean-up).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long, at most, the log may take to publish its first tree head.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A node's addresses.
#[derive(Debug, Clone)]
struct NodeAddrs {
    id: u64,
    grpc: SocketAddr,
    http: SocketAddr,
}

pub(super) async fn run(args: CtArgs) -> Result<(), String> {
    args.check()?;
    let load_average = process::load_average();
    let leaves = args.leaves_needed()?;
    let began = Instant::now();
    let pki = Arc::new(TestPki::generate(leaves)?);
    eprintln!(
        "bench ct: issued {leaves} leaves ({} B each on average) in {:.1} s",
        pki.mean_leaf_bytes(),
        began.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
    let key_file = dir.path().join("log-key.pem");
    let roots_file = dir.path().join("roots.pem");
    let key = EcdsaP256Signer::generate_pkcs8_pem()
        .map_err(|error| format!("cannot generate the log key: {error}"))?;
    std::fs::write(&key_file, key).map_err(|error| error.to_string())?;
    std::fs::write(&roots_file, &pki.root_pem).map_err(|error| error.to_string())?;
    let ct = CtFiles {
        key_file: Some(key_file),
        roots_file: Some(roots_file),
        ..CtFiles::default()
    };
    let mut configs = Vec::new();
    for id in 1..=3 {
        let mut config = NodeConfig::new(
            id,
            free_addr()?,
            free_addr()?,
            dir.path().join(format!("node-{id}")),
        );
        config.ct = ct.clone();
        config.ct.tile_cache_tiles = args.tile_cache_tiles;
        config.store.cache_mib = args.store_cache_mib;
        configs.push(config);
    }
    let addrs: Vec<NodeAddrs> = configs
        .iter()
        .map(|config| NodeAddrs {
            id: config.id,
            grpc: config.grpc_addr,
            http: config.http_addr,
        })
        .collect();
    let configs = super::unlimited(configs);
    let nodes = start_local(&configs).await?;
    let result = measure_all(&args, &nodes, addrs, &pki, load_average).await;
    for node in nodes {
        node.shutdown().await;
    }
    let report = result?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        report.print();
    }
    Ok(())
}

/// Everything `bench ct` measured.
#[derive(Debug)]
struct Report {
    cpus: usize,
    /// The machine's 1-minute load average before the bench started anything.
    load_average: Option<f64>,
    leader: u64,
    config: LogConfig,
    config_set: bool,
    mean_leaf_bytes: usize,
    memory: MemoryRun,
    add_chain: Vec<AddChainRun>,
    reads: Vec<ReadRun>,
}

async fn measure_all(
    args: &CtArgs,
    nodes: &[Node],
    addrs: Vec<NodeAddrs>,
    pki: &Arc<TestPki>,
    load_average: Option<f64>,
) -> Result<Report, String> {
    let leader = await_leader(nodes, Duration::from_secs(10))
        .await
        .ok_or("no leader elected within 10 s")?;
    let mut logs = Vec::new();
    let mut watch_channels = Vec::new();
    for node in &addrs {
        logs.push(LogClient::new(connect(node.grpc).await?));
        watch_channels.push(connect(node.grpc).await?);
    }
    let bench = Bench {
        args,
        nodes,
        addrs,
        logs,
        pki: Arc::clone(pki),
        watch: SthWatch::start(watch_channels),
        load_average,
    };
    let result = bench.measure(leader).await;
    bench.watch.stop().await;
    result
}

/// The cluster under measurement and what every phase shares.
#[derive(Debug)]
struct Bench<'a> {
    args: &'a CtArgs,
    /// The nodes, in this process: their local databases give each entry's index.
    nodes: &'a [Node],
    addrs: Vec<NodeAddrs>,
    /// A `Log` client per node, in the order of `addrs`.
    logs: Vec<LogClient<Channel>>,
    pki: Arc<TestPki>,
    watch: SthWatch,
    load_average: Option<f64>,
}

impl Bench<'_> {
    async fn measure(&self, leader: u64) -> Result<Report, String> {
        let ready = Instant::now();
        while self.watch.largest().is_none() {
            if ready.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "the log published no tree head within {} s",
                    READY_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let config = self.configure().await?;
        eprintln!(
            "bench ct: 3 nodes on loopback (sled, fsync per batch), leader node {leader}; log \
             config: {}",
            describe(&config)
        );

        let memory = self.measure_memory().await?;
        eprintln!(
            "bench ct: memory: {} entries, RSS {:+.1} MiB",
            memory.entries,
            memory.growth_bytes() as f64 / MIB
        );

        let mut add_chain = Vec::new();
        for &clients in &self.args.clients {
            let run = self.measure_add_chain(clients).await?;
            eprintln!(
                "bench ct: add-chain x{clients}: {:.0}/s, merge delay p99 {} ms",
                run.per_second(),
                optional(percentile(&run.merge.delays_ms, 0.99))
            );
            add_chain.push(run);
        }

        let targets = Arc::new(self.proof_targets(&add_chain).await?);
        reads::check_answers(&self.addrs, &targets).await?;
        let mut read_runs = Vec::new();
        for &clients in &self.args.clients {
            for op in [ReadOp::Sth, ReadOp::Proof] {
                for transport in [Transport::Http, Transport::Grpc] {
                    let run = reads::measure(
                        &self.addrs,
                        &targets,
                        op,
                        transport,
                        clients,
                        Duration::from_secs(self.args.seconds),
                    )
                    .await?;
                    eprintln!(
                        "bench ct: {} over {} x{clients}: {:.0}/s",
                        op_name(op),
                        transport_name(transport),
                        run.per_second()
                    );
                    read_runs.push(run);
                }
            }
        }
        Ok(Report {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            load_average: self.load_average,
            leader,
            config_set: self.args.sets_config(),
            config,
            mean_leaf_bytes: self.pki.mean_leaf_bytes(),
            memory,
            add_chain,
            reads: read_runs,
        })
    }

    /// One channel per client, client i to node i mod 3.
    async fn connect_clients(&self, clients: usize) -> Result<Vec<Channel>, String> {
        let mut channels = Vec::with_capacity(clients);
        for client in 0..clients {
            channels.push(connect(self.addrs[client % self.addrs.len()].grpc).await?);
        }
        Ok(channels)
    }

    /// The current leader's `Log` client: it has applied every acknowledged submission.
    async fn leader_log(&self) -> Result<LogClient<Channel>, String> {
        let leader = await_leader(self.nodes, Duration::from_secs(10))
            .await
            .ok_or("no leader within 10 s")?;
        self.addrs
            .iter()
            .position(|node| node.id == leader)
            .map(|at| self.logs[at].clone())
            .ok_or_else(|| format!("the leader, node {leader}, is not a configured node"))
    }

    /// Applies the configuration flags, if any; returns the configuration in force.
    async fn configure(&self) -> Result<LogConfig, String> {
        let args = self.args;
        let mut log = self.leader_log().await?;
        let status = log
            .status(LogStatusRequest {})
            .await
            .map_err(|status| format!("Log/Status: {status}"))?
            .into_inner();
        let mut config = status.config.ok_or("Log/Status carries no configuration")?;
        if !args.sets_config() {
            return Ok(config);
        }
        config.signing_interval_ms = args
            .signing_interval_ms
            .unwrap_or(config.signing_interval_ms);
        config.sequencing_interval_ms = args
            .sequencing_interval_ms
            .unwrap_or(config.sequencing_interval_ms);
        config.guard_window_ms = args.guard_window_ms.unwrap_or(config.guard_window_ms);
        config.unsequenced_watermark = args
            .unsequenced_watermark
            .unwrap_or(config.unsequenced_watermark);
        let set = log
            .set_config(SetLogConfigRequest {
                config: Some(config),
            })
            .await
            .map_err(|status| format!("Log/SetConfig refused the configuration: {status}"))?;
        Ok(set.into_inner())
    }

    /// Waits until the serving tree covers every numbered entry and nothing is left to number
    /// (and, with `cleaned_up`, until the replicated state holds no entry); returns how long
    /// that took, or `None` when it did not happen within [`SETTLE_TIMEOUT`].
    async fn settle(&self, cleaned_up: bool) -> Result<Option<Duration>, String> {
        let began = Instant::now();
        loop {
            let status = self
                .leader_log()
                .await?
                .status(LogStatusRequest {})
                .await
                .map_err(|status| format!("Log/Status: {status}"))?
                .into_inner();
            let serving = status.serving.map_or(0, |sth| sth.tree_size);
            let seen = self.watch.largest().unwrap_or(0);
            if status.unsequenced == 0
                && serving >= status.next_sequence
                && seen >= status.next_sequence
                && (!cleaned_up || status.held == 0)
            {
                return Ok(Some(began.elapsed()));
            }
            if began.elapsed() > SETTLE_TIMEOUT {
                eprintln!(
                    "bench ct: not settled after {} s: {} unsequenced, {} numbered, serving \
                     {serving}, seen {seen}, {} held",
                    SETTLE_TIMEOUT.as_secs(),
                    status.unsequenced,
                    status.next_sequence,
                    status.held
                );
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn measure_memory(&self) -> Result<MemoryRun, String> {
        let channels = self.connect_clients(MEMORY_CLIENTS).await?;
        let warm_up = Until::Count(MEMORY_WARM_UP_ENTRIES);
        let warmed = submit::submit(&channels, &self.pki, warm_up).await?;
        fail_if_nothing_logged(&warmed, "the memory phase's warm-up")?;
        self.settle(true).await?;
        let rss_before_bytes = process::resident_bytes()
            .ok_or("cannot read this process's resident memory (/proc/self/status VmRSS)")?;
        let began = Instant::now();
        let logged = submit::submit(&channels, &self.pki, Until::Count(self.args.entries)).await?;
        let logging = began.elapsed();
        fail_if_nothing_logged(&logged, "the memory phase")?;
        if logged.leaves_ran_out {
            return Err("the memory phase ran out of pre-issued leaves".into());
        }
        let settled = self.settle(true).await?.is_some();
        let rss_after_bytes = process::resident_bytes()
            .ok_or("cannot read this process's resident memory (/proc/self/status VmRSS)")?;
        Ok(MemoryRun {
            entries: logged.acknowledged_count as u64,
            errors: logged.error_count(),
            logging,
            settled,
            rss_before_bytes,
            rss_after_bytes,
        })
    }

    async fn measure_add_chain(&self, clients: usize) -> Result<AddChainRun, String> {
        let channels = self.connect_clients(clients).await?;
        let duration = Duration::from_secs(self.args.seconds);
        let start = Instant::now() + WARM_UP;
        let end = start + duration;
        let cpu = cpu_cores_between(start, end);
        let submitted = submit::submit(&channels, &self.pki, Until::Window { start, end }).await?;
        let cpu_cores = cpu.await.map_err(|error| error.to_string())?;
        if submitted.leaves_ran_out {
            return Err(format!(
                "add-chain x{clients} used all pre-issued leaves before its {} s were over; run \
                 again with a --leaf-rate-max above {}",
                self.args.seconds, self.args.leaf_rate_max
            ));
        }
        fail_if_nothing_logged(&submitted, &format!("add-chain x{clients}"))?;
        let settled_after = self.settle(false).await?;
        let coverage = self.watch.coverage();
        let merge = merge_delays(&submitted.acknowledged, &self.pki, self.nodes, &coverage)?;
        Ok(AddChainRun {
            clients,
            cpu_cores,
            elapsed: duration,
            submitted,
            merge,
            settled_after,
        })
    }

    /// Leaves logged by the add-chain runs, inside the serving tree, to ask proofs for.
    async fn proof_targets(&self, runs: &[AddChainRun]) -> Result<ProofTargets, String> {
        let tree_size = self
            .leader_log()
            .await?
            .get_sth(GetSthRequest {})
            .await
            .map_err(|status| format!("Log/GetSth: {status}"))?
            .into_inner()
            .tree_size;
        let acknowledged: Vec<&Acknowledged> = runs
            .iter()
            .flat_map(|run| &run.submitted.acknowledged)
            .collect();
        let step = acknowledged
            .len()
            .div_ceil(BENCH_CT_PROOF_TARGETS_MAX)
            .max(1);
        let ct = self
            .nodes
            .first()
            .and_then(Node::ct)
            .ok_or("a node runs no CT log")?;
        let mut leaves: Vec<Hash> = Vec::new();
        for entry in acknowledged.into_iter().step_by(step) {
            let hash = entry.leaf_hash(&self.pki)?;
            match ct.db().index_of_leaf(&hash) {
                Ok(Some(index)) if index < tree_size => leaves.push(hash),
                Ok(_) => {}
                Err(error) => return Err(error.to_string()),
            }
        }
        if leaves.is_empty() {
            return Err(format!(
                "no logged leaf is inside the serving tree of size {tree_size}"
            ));
        }
        Ok(ProofTargets::new(leaves, tree_size))
    }
}

async fn connect(addr: SocketAddr) -> Result<Channel, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|error| error.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|error| format!("connecting to {addr}: {error}"))
}

/// The CPU the whole process (nodes and clients) used from `start` to `end`, in cores: a task
/// reads the process's CPU time at both instants. `None` where the kernel does not say.
fn cpu_cores_between(start: Instant, end: Instant) -> tokio::task::JoinHandle<Option<f64>> {
    tokio::spawn(async move {
        tokio::time::sleep_until(start.into()).await;
        let (began, cpu_before) = (Instant::now(), process::cpu_time()?);
        tokio::time::sleep_until(end.into()).await;
        let (ended, cpu_after) = (Instant::now(), process::cpu_time()?);
        Some((cpu_after - cpu_before).as_secs_f64() / (ended - began).as_secs_f64())
    })
}

fn describe(config: &LogConfig) -> String {
    format!(
        "signing {} ms, sequencing {} ms, guard window {} ms, unsequenced watermark {}, \
         serving at {} nodes / {}‰",
        config.signing_interval_ms,
        config.sequencing_interval_ms,
        config.guard_window_ms,
        config.unsequenced_watermark,
        config.min_serving_nodes,
        config.min_serving_permille
    )
}

const MIB: f64 = 1024.0 * 1024.0;

/// The memory phase.
#[derive(Debug)]
struct MemoryRun {
    /// Entries logged between the measurements (acknowledged submissions).
    entries: u64,
    errors: usize,
    logging: Duration,
    /// Whether everything was served and cleaned up before the second measurement.
    settled: bool,
    rss_before_bytes: u64,
    rss_after_bytes: u64,
}

impl MemoryRun {
    fn growth_bytes(&self) -> i64 {
        i64::try_from(self.rss_after_bytes).unwrap_or(i64::MAX)
            - i64::try_from(self.rss_before_bytes).unwrap_or(i64::MAX)
    }

    fn mib_per_million(&self) -> f64 {
        process::mib_per_million(self.growth_bytes(), self.entries)
    }
}

fn fail_if_nothing_logged(submitted: &Submitted, what: &str) -> Result<(), String> {
    if submitted.acknowledged_count == 0 {
        return Err(format!(
            "{what} logged nothing; errors: {:?}",
            submitted.error_examples
        ));
    }
    for (code, example) in &submitted.error_examples {
        eprintln!("bench ct: {what}: {code}, e.g. {example}");
    }
    Ok(())
}

/// One add-chain run.
#[derive(Debug)]
struct AddChainRun {
    clients: usize,
    /// CPU the process used in the window, in cores.
    cpu_cores: Option<f64>,
    elapsed: Duration,
    submitted: Submitted,
    merge: MergeDelays,
    /// How long the serving tree took, after the load, to cover everything; `None` if it did
    /// not within [`SETTLE_TIMEOUT`].
    settled_after: Option<Duration>,
}

impl AddChainRun {
    /// Acknowledgements received within the measured window, per second.
    fn per_second(&self) -> f64 {
        per_second(self.submitted.completed_in_window, self.elapsed)
    }
}

fn op_name(op: ReadOp) -> &'static str {
    match op {
        ReadOp::Sth => "get-sth",
        ReadOp::Proof => "get-proof-by-hash",
    }
}

fn transport_name(transport: Transport) -> &'static str {
    match transport {
        Transport::Http => "HTTP",
        Transport::Grpc => "gRPC",
    }
}

/// Microseconds as milliseconds with two decimals.
fn ms(us: Option<u64>) -> String {
    us.map_or_else(|| "-".to_owned(), |us| format!("{:.2}", us as f64 / 1000.0))
}

fn optional(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

fn cores(cpu: Option<f64>) -> String {
    cpu.map_or_else(|| "-".to_owned(), |cores| format!("{cores:.2}"))
}

fn us_to_ms(us: Option<u64>) -> Value {
    us.map_or(Value::Null, |us| json!(us as f64 / 1000.0))
}

fn errors_text(errors: &BTreeMap<String, usize>) -> String {
    if errors.is_empty() {
        return "0".to_owned();
    }
    errors
        .iter()
        .map(|(cause, count)| format!("{count} {cause}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Add-chain/s the issue asks for, with merge delay p99 at most [`MERGE_DELAY_P99_TARGET_MS`].
const ADD_CHAIN_TARGET_PER_SECOND: f64 = 5_000.0;
const MERGE_DELAY_P99_TARGET_MS: u64 = 1_000;
/// Proof and STH reads/s across the cluster the issue asks for.
const READS_TARGET_PER_SECOND: f64 = 50_000.0;

impl Report {
    fn to_json(&self) -> Value {
        let config = &self.config;
        let add_chain: Vec<Value> = self
            .add_chain
            .iter()
            .map(|run| {
                let latencies = &run.submitted.latencies_us;
                let delays = &run.merge.delays_ms;
                json!({
                    "clients": run.clients,
                    "acknowledged": run.submitted.acknowledged_count,
                    "acknowledged_in_window": run.submitted.completed_in_window,
                    "ops_per_second": run.per_second(),
                    "errors": run.submitted.errors,
                    "submit_p50_ms": us_to_ms(percentile(latencies, 0.50)),
                    "submit_p99_ms": us_to_ms(percentile(latencies, 0.99)),
                    "submit_max_ms": us_to_ms(percentile(latencies, 1.0)),
                    "merge_delay_p50_ms": percentile(delays, 0.50),
                    "merge_delay_p99_ms": percentile(delays, 0.99),
                    "merge_delay_max_ms": percentile(delays, 1.0),
                    "not_integrated": run.merge.not_integrated,
                    "not_served": run.merge.not_served,
                    "settled_after_load_ms": run.settled_after.map(|wait| wait.as_millis()),
                    "cpu_cores": run.cpu_cores,
                })
            })
            .collect();
        let reads: Vec<Value> = self
            .reads
            .iter()
            .map(|run| {
                json!({
                    "op": op_name(run.op),
                    "transport": transport_name(run.transport).to_lowercase(),
                    "clients": run.clients,
                    "ops": run.completed_in_window,
                    "ops_per_second": run.per_second(),
                    "errors": run.errors,
                    "p50_ms": us_to_ms(percentile(&run.latencies_us, 0.50)),
                    "p99_ms": us_to_ms(percentile(&run.latencies_us, 0.99)),
                    "max_ms": us_to_ms(percentile(&run.latencies_us, 1.0)),
                    "cpu_cores": run.cpu_cores,
                })
            })
            .collect();
        let memory = &self.memory;
        json!({
            "bench": "ct",
            "cpus": self.cpus,
            "load_average_before": self.load_average,
            "nodes": 3,
            "leader": self.leader,
            "config_set": self.config_set,
            "config": {
                "signing_interval_ms": config.signing_interval_ms,
                "sequencing_interval_ms": config.sequencing_interval_ms,
                "guard_window_ms": config.guard_window_ms,
                "unsequenced_watermark": config.unsequenced_watermark,
                "min_serving_nodes": config.min_serving_nodes,
                "min_serving_permille": config.min_serving_permille,
                "report_ttl_ms": config.report_ttl_ms,
            },
            "leaf_der_bytes_mean": self.mean_leaf_bytes,
            "merge_delay_sampling_ms": sth_watch::POLL_INTERVAL.as_millis(),
            "memory": {
                "entries": memory.entries,
                "errors": memory.errors,
                "logging_seconds": memory.logging.as_secs_f64(),
                "settled": memory.settled,
                "rss_before_bytes": memory.rss_before_bytes,
                "rss_after_bytes": memory.rss_after_bytes,
                "bytes_per_entry_cluster": memory.growth_bytes() as f64 / memory.entries as f64,
                "mib_per_million_entries_cluster": memory.mib_per_million(),
                "mib_per_million_entries_per_node": memory.mib_per_million() / 3.0,
                "extrapolated_from_entries": memory.entries,
            },
            "add_chain": add_chain,
            "reads": reads,
        })
    }

    fn print(&self) {
        println!(
            "CT log, 3 nodes on loopback in this process (sled, fsync per batch), leader node {}; \
             {} CPUs, load average {} before the bench",
            self.leader,
            self.cpus,
            self.load_average
                .map_or_else(|| "unknown".to_owned(), |load| format!("{load:.2}"))
        );
        println!(
            "log config ({}): {}",
            if self.config_set {
                "set through Log/SetConfig"
            } else {
                "the defaults"
            },
            describe(&self.config)
        );
        println!(
            "chains: an ECDSA P-256 leaf ({} B on average) and its root; clients run in this \
             process; merge delay sampled every {} ms",
            self.mean_leaf_bytes,
            sth_watch::POLL_INTERVAL.as_millis()
        );

        let mut table = Table::new();
        table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        table.set_header([
            "add-chain (gRPC)",
            "clients",
            "ops/s",
            "submit p50 ms",
            "submit p99 ms",
            "merge p50 ms",
            "merge p99 ms",
            "merge max ms",
            "not covered",
            "errors",
            "CPU cores",
        ]);
        for run in &self.add_chain {
            let latencies = &run.submitted.latencies_us;
            let delays = &run.merge.delays_ms;
            table.add_row([
                format!("{} acknowledged", run.submitted.acknowledged_count),
                run.clients.to_string(),
                format!("{:.0}", run.per_second()),
                ms(percentile(latencies, 0.50)),
                ms(percentile(latencies, 0.99)),
                optional(percentile(delays, 0.50)),
                optional(percentile(delays, 0.99)),
                optional(percentile(delays, 1.0)),
                run.merge.not_covered().to_string(),
                errors_text(&run.submitted.errors),
                cores(run.cpu_cores),
            ]);
        }
        println!("{table}");

        let mut table = Table::new();
        table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        table.set_header([
            "read",
            "over",
            "clients",
            "ops/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "CPU cores",
        ]);
        for run in &self.reads {
            table.add_row([
                op_name(run.op).to_owned(),
                transport_name(run.transport).to_owned(),
                run.clients.to_string(),
                format!("{:.0}", run.per_second()),
                ms(percentile(&run.latencies_us, 0.50)),
                ms(percentile(&run.latencies_us, 0.99)),
                ms(percentile(&run.latencies_us, 1.0)),
                errors_text(&run.errors),
                cores(run.cpu_cores),
            ]);
        }
        println!("{table}");

        let memory = &self.memory;
        let mut table = Table::new();
        table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        table.set_header([
            "memory",
            "entries",
            "RSS before MiB",
            "RSS after MiB",
            "MiB per million entries (3 nodes)",
            "per node",
        ]);
        table.add_row([
            if memory.settled {
                "served and cleaned up".to_owned()
            } else {
                "NOT settled".to_owned()
            },
            memory.entries.to_string(),
            format!("{:.1}", memory.rss_before_bytes as f64 / MIB),
            format!("{:.1}", memory.rss_after_bytes as f64 / MIB),
            format!("{:.0}", memory.mib_per_million()),
            format!("{:.0}", memory.mib_per_million() / 3.0),
        ]);
        println!("{table}");
        println!(
            "memory: extrapolated from {} entries (process RSS: all three nodes with their \
             sled caches, and the clients; per node = a third); logging them took {:.1} s",
            memory.entries,
            memory.logging.as_secs_f64()
        );
        self.print_targets();
    }

    fn print_targets(&self) {
        if let Some(best) = self
            .add_chain
            .iter()
            .max_by(|a, b| a.per_second().total_cmp(&b.per_second()))
        {
            let p99 = percentile(&best.merge.delays_ms, 0.99);
            println!(
                "target add-chain >= {ADD_CHAIN_TARGET_PER_SECOND:.0}/s with merge p99 <= \
                 {MERGE_DELAY_P99_TARGET_MS} ms: best {:.0}/s (x{}, {:.0}% of target), merge p99 \
                 {} ms{}",
                best.per_second(),
                best.clients,
                best.per_second() / ADD_CHAIN_TARGET_PER_SECOND * 100.0,
                optional(p99),
                if best.per_second() >= ADD_CHAIN_TARGET_PER_SECOND
                    && p99.is_some_and(|p99| p99 <= MERGE_DELAY_P99_TARGET_MS)
                {
                    ": met"
                } else {
                    ": missed"
                }
            );
        }
        for op in [ReadOp::Sth, ReadOp::Proof] {
            let best = self
                .reads
                .iter()
                .filter(|run| run.op == op)
                .max_by(|a, b| a.per_second().total_cmp(&b.per_second()));
            if let Some(best) = best {
                let rate = best.per_second();
                println!(
                    "target {} >= {READS_TARGET_PER_SECOND:.0}/s across the cluster: best \
                     {rate:.0}/s ({} x{}, {:.0}% of target){}",
                    op_name(op),
                    transport_name(best.transport),
                    best.clients,
                    rate / READS_TARGET_PER_SECOND * 100.0,
                    if rate >= READS_TARGET_PER_SECOND {
                        ": met"
                    } else {
                        ": missed"
                    }
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_cover_the_memory_phase_and_every_run_at_the_highest_rate() {
        let args = CtArgs {
            clients: vec![64, 256],
            seconds: 10,
            entries: 100_000,
            leaf_rate_max: 20_000,
            signing_interval_ms: None,
            sequencing_interval_ms: None,
            guard_window_ms: None,
            unsequenced_watermark: None,
            store_cache_mib: certus_store::SLED_CACHE_MIB_DEFAULT,
            tile_cache_tiles: certus_store::CT_TILE_CACHE_TILES_DEFAULT,
            json: false,
        };
        args.check().expect("valid");
        assert!(!args.sets_config());
        assert_eq!(args.leaves_needed(), Ok(2_000 + 100_000 + 2 * 11 * 20_000));
        let none = CtArgs {
            clients: vec![0],
            ..args
        };
        assert!(none.check().is_err());
    }
}
