//! `certus bench raft`: a 3-node cluster on loopback in this process, C concurrent clients
//! making durable 256-byte writes (challenge-token puts) and then linearizable reads; prints
//! ops/s and p50/p99/max latency for each C.
//!
//! The clients run in the same process as the nodes (as a benchmark tool on the same machine
//! would), each over its own HTTP/2 connection, all to the leader.
//!
//! With `--peer`, the same workload then runs against etcd ([`etcd`]), and the table gets its
//! rows and a ratio line per client count.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use certus_node::NodeConfig;
use certus_proto::v1::clients_client::ClientsClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{GetChallengeRequest, PutChallengeRequest, RegisterClientRequest};
use comfy_table::Table;
use serde_json::json;
use tonic::transport::{Channel, Endpoint};

use super::{WARM_UP, free_addr, micros, percentile};
use crate::cluster::{await_leader, start_local};

mod etcd;

/// Options of `certus bench raft`.
#[derive(Debug, clap::Args)]
pub(crate) struct RaftArgs {
    /// Concurrent clients, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    clients: Vec<usize>,
    /// How long each run measures, in seconds (after a one-second warm-up).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Run the nodes and clients over mutual TLS (a fresh CA and certificates), to measure what
    /// transport security costs.
    #[arg(long)]
    tls: bool,
    /// Number every write in a client session of its client (`certus.v1.Clients`, as
    /// certus-client does by default), to measure what exactly-once writes cost.
    #[arg(long)]
    numbered: bool,
    /// Then run the same workload against etcd: three members on loopback, started from the
    /// installed `etcd` (Debian's etcd-server); without it, say how to install it and measure
    /// Certus alone.
    #[arg(long)]
    peer: bool,
}

/// Bytes of each written value (the key authorization).
const VALUE_BYTES: usize = 256;

#[derive(Debug, Clone, Copy)]
enum Op {
    Write,
    Read,
}

/// What the rows of Certus are called.
const CERTUS: &str = "Certus";

#[derive(Debug)]
struct Run {
    /// The system measured: [`CERTUS`] or [`etcd::SYSTEM`].
    system: &'static str,
    op: Op,
    clients: usize,
    ops: usize,
    errors: super::ErrorKinds,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Run {
    fn ops_per_second(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile_ms(&self, fraction: f64) -> f64 {
        percentile(&self.latencies_us, fraction).map_or(0.0, |us| us as f64 / 1000.0)
    }
}

pub(super) async fn run(args: RaftArgs) -> Result<(), String> {
    super::check_client_counts(&args.clients)?;
    if args.seconds == 0 {
        return Err("--seconds: at least 1".into());
    }
    // Looked up first, so that a missing peer is said before minutes of measuring.
    let etcd = if args.peer {
        super::peer::find(super::peer::ETCD)
    } else {
        None
    };
    let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
    let mut configs = Vec::new();
    for id in 1..=3 {
        configs.push(NodeConfig::new(
            id,
            free_addr()?,
            free_addr()?,
            dir.path().join(format!("node-{id}")),
        ));
    }
    let mut configs = super::unlimited(configs);
    let client_tls = if args.tls {
        let pki = dir.path().join("pki");
        crate::pki::ensure_local(&pki, 3)?;
        for config in &mut configs {
            let (cert_file, key_file) =
                crate::pki::identity_files(&pki, &format!("node-{}", config.id));
            config.tls = Some(certus_node::TlsSetup {
                ca_cert_file: pki.join(crate::pki::CA_CERT_FILE),
                cert_file,
                key_file,
                https: true,
            });
        }
        let read = |path: std::path::PathBuf| {
            std::fs::read_to_string(&path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))
        };
        let (cert, key) = crate::pki::identity_files(&pki, "admin");
        Some(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(read(
                    pki.join(crate::pki::CA_CERT_FILE),
                )?))
                .identity(tonic::transport::Identity::from_pem(
                    read(cert)?,
                    read(key)?,
                )),
        )
    } else {
        None
    };
    let nodes = start_local(&configs).await?;
    let leader = await_leader(&nodes, Duration::from_secs(10))
        .await
        .ok_or("no leader elected within 10 s")?;
    let leader_addr = configs
        .iter()
        .find(|config| config.id == leader)
        .map(|config| config.grpc_addr)
        .ok_or("the leader is not a configured node")?;
    eprintln!(
        "bench: 3 nodes on loopback (sled, fsync per batch, {}{}), leader node {leader}",
        if args.tls { "mutual TLS" } else { "plain text" },
        if args.numbered {
            ", writes numbered in client sessions"
        } else {
            ""
        }
    );

    let mut runs = Vec::new();
    for &clients in &args.clients {
        for op in [Op::Write, Op::Read] {
            let run = measure(
                leader_addr,
                client_tls.as_ref(),
                op,
                clients,
                Duration::from_secs(args.seconds),
                args.numbered,
            )
            .await?;
            eprintln!(
                "bench: {:?} x{clients}: {:.0} ops/s",
                run.op,
                run.ops_per_second()
            );
            runs.push(run);
        }
    }
    // The nodes stop before the peer starts: the two do not share the machine.
    for node in nodes {
        node.shutdown().await;
    }
    if let Some(etcd) = etcd {
        runs.extend(
            super::peer::interruptible(super::peer::ETCD, measure_etcd(&etcd, &args)).await?,
        );
    }
    report(&runs, args.json);
    Ok(())
}

/// The runs of `args` against a 3-member etcd cluster started for them and stopped after.
async fn measure_etcd(
    installed: &super::peer::Installed,
    args: &RaftArgs,
) -> Result<Vec<Run>, String> {
    let cluster = etcd::EtcdCluster::start(installed).await?;
    let (leader_name, leader_addr) = &cluster.leader;
    eprintln!(
        "bench: etcd {}: 3 members on loopback (WAL fsync per write, etcd's default), plain \
         text, leader {leader_name}",
        installed.version
    );
    if args.tls || args.numbered {
        eprintln!("bench: etcd runs without --tls and --numbered: it has neither here");
    }
    let mut runs = Vec::new();
    for &clients in &args.clients {
        for op in [Op::Write, Op::Read] {
            let run =
                etcd::measure(*leader_addr, op, clients, Duration::from_secs(args.seconds)).await?;
            eprintln!(
                "bench: etcd {:?} x{clients}: {:.0} ops/s",
                run.op,
                run.ops_per_second()
            );
            runs.push(run);
        }
    }
    Ok(runs)
}

async fn measure(
    leader: SocketAddr,
    tls: Option<&tonic::transport::ClientTlsConfig>,
    op: Op,
    clients: usize,
    duration: Duration,
    numbered: bool,
) -> Result<Run, String> {
    let value: String = "v".repeat(VALUE_BYTES);
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{leader}"))
            .map_err(|error| error.to_string())?;
        if let Some(tls) = tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|error| error.to_string())?;
        }
        let channel: Channel = endpoint
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|error| error.to_string())?;
        let value = value.clone();
        let session = if numbered && matches!(op, Op::Write) {
            let reply = ClientsClient::new(channel.clone())
                .register(RegisterClientRequest {})
                .await
                .map_err(|status| format!("registering a client session: {status}"))?;
            Some(reply.into_inner().client_id)
        } else {
            None
        };
        tasks.push(tokio::spawn(async move {
            let mut grpc = LeasesClient::new(channel);
            let mut latencies = Vec::new();
            let mut errors = super::ErrorKinds::default();
            let mut n = 0u64;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                // Reads look up tokens the write runs stored (each client wrote `c{client}-…`).
                let token = format!("c{client}-{}", n % keys_per_client(clients));
                n += 1;
                let result = match op {
                    Op::Write => grpc
                        .put_challenge(numbered_request(
                            session,
                            n,
                            PutChallengeRequest {
                                token,
                                key_authorization: value.clone(),
                            },
                        ))
                        .await
                        .map(|_| ()),
                    Op::Read => match grpc.get_challenge(GetChallengeRequest { token }).await {
                        Ok(_) => Ok(()),
                        Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
                        Err(status) => Err(status),
                    },
                };
                if began < start {
                    continue;
                }
                match result {
                    Ok(()) => latencies.push(micros(began.elapsed())),
                    Err(status) => errors.record(&status),
                }
            }
            (latencies, errors)
        }));
    }
    gather(CERTUS, op, clients, duration, tasks).await
}

/// One client's measurements: its latencies (µs) and its errors by kind.
type ClientTask = tokio::task::JoinHandle<(Vec<u64>, super::ErrorKinds)>;

/// Waits for every client of a run, Certus's or a peer's, and puts their measurements together.
async fn gather(
    system: &'static str,
    op: Op,
    clients: usize,
    duration: Duration,
    tasks: Vec<ClientTask>,
) -> Result<Run, String> {
    let mut latencies_us = Vec::new();
    let mut errors = super::ErrorKinds::default();
    for task in tasks {
        let (latencies, failed) = task.await.map_err(|error| error.to_string())?;
        latencies_us.extend(latencies);
        errors.merge(failed);
    }
    latencies_us.sort_unstable();
    Ok(Run {
        system,
        op,
        clients,
        ops: latencies_us.len(),
        errors,
        elapsed: duration,
        latencies_us,
    })
}

/// Distinct keys each client writes and reads at `clients` clients: at most 1,000, and few
/// enough that every run together stays well within the state machine's bound on challenge
/// tokens (beyond it a write is refused, `too-many-challenges`: a capacity, not a failure).
pub(super) fn keys_per_client(clients: usize) -> u64 {
    let share = certus_core::limits::CHALLENGES_MAX / 4 / clients.max(1);
    u64::try_from(share.clamp(1, 1000)).unwrap_or(1000)
}

/// `message` as request number `sequence` of `session` (one call at a time: every earlier one
/// is answered), or plain without a session.
fn numbered_request<M>(session: Option<u64>, sequence: u64, message: M) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    if let Some(client) = session {
        certus_proto::number_request(&mut request, client, sequence, sequence);
    }
    request
}

fn report(runs: &[Run], as_json: bool) {
    if as_json {
        let rows: Vec<_> = runs
            .iter()
            .map(|run| {
                json!({
                    "system": run.system,
                    "op": format!("{:?}", run.op).to_lowercase(),
                    "clients": run.clients,
                    "ops": run.ops,
                    "errors": run.errors.total(),
                    "errors_by_kind": run.errors.to_json(),
                    "ops_per_second": run.ops_per_second(),
                    "p50_ms": run.percentile_ms(0.50),
                    "p99_ms": run.percentile_ms(0.99),
                    "max_ms": run.percentile_ms(1.0),
                })
            })
            .collect();
        println!("{}", json!({ "bench": "raft", "runs": rows }));
        return;
    }
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "system", "op", "clients", "ops/s", "p50 ms", "p99 ms", "max ms", "errors",
    ]);
    for run in runs {
        table.add_row([
            run.system.to_owned(),
            match run.op {
                Op::Write => "write (256 B, durable)".to_owned(),
                Op::Read => "linearizable read".to_owned(),
            },
            run.clients.to_string(),
            format!("{:.0}", run.ops_per_second()),
            format!("{:.2}", run.percentile_ms(0.50)),
            format!("{:.2}", run.percentile_ms(0.99)),
            format!("{:.2}", run.percentile_ms(1.0)),
            run.errors.total().to_string(),
        ]);
    }
    println!("{table}");
    for line in ratio_lines(runs) {
        println!("{line}");
    }
    for run in runs.iter().filter(|run| run.errors.total() > 0) {
        println!(
            "errors, {} {:?} at {} clients: {}",
            run.system,
            run.op,
            run.clients,
            run.errors.describe()
        );
    }
}

/// For each run of a peer, the Certus run of the same op and client count beside it:
/// `writes at 16 clients: Certus 5000/s, etcd 4000/s, ratio 1.25×`.
fn ratio_lines(runs: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    for peer in runs.iter().filter(|run| run.system != CERTUS) {
        let Some(certus) = runs.iter().find(|run| {
            run.system == CERTUS
                && run.clients == peer.clients
                && matches!(
                    (run.op, peer.op),
                    (Op::Write, Op::Write) | (Op::Read, Op::Read)
                )
        }) else {
            continue;
        };
        let what = match peer.op {
            Op::Write => "writes",
            Op::Read => "linearizable reads",
        };
        let (mine, theirs) = (certus.ops_per_second(), peer.ops_per_second());
        let ratio = if theirs > 0.0 {
            format!("{:.2}×", mine / theirs)
        } else {
            format!("none ({} made no {what})", peer.system)
        };
        lines.push(format!(
            "{what} at {} clients: {CERTUS} {mine:.0}/s, {} {theirs:.0}/s, ratio {ratio}",
            peer.clients, peer.system
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(system: &'static str, op: Op, clients: usize, ops: usize) -> Run {
        Run {
            system,
            op,
            clients,
            ops,
            errors: super::super::ErrorKinds::default(),
            elapsed: Duration::from_secs(2),
            latencies_us: Vec::new(),
        }
    }

    #[test]
    fn a_ratio_line_pairs_each_peer_run_with_certus_at_the_same_op_and_clients() {
        let runs = [
            run(CERTUS, Op::Write, 4, 3000),
            run(CERTUS, Op::Read, 4, 8000),
            run(CERTUS, Op::Write, 16, 10_000),
            run(etcd::SYSTEM, Op::Write, 4, 2000),
            run(etcd::SYSTEM, Op::Read, 4, 0),
        ];
        assert_eq!(
            ratio_lines(&runs),
            [
                "writes at 4 clients: Certus 1500/s, etcd 1000/s, ratio 1.50×",
                "linearizable reads at 4 clients: Certus 4000/s, etcd 0/s, ratio none (etcd made \
                 no linearizable reads)",
            ]
        );
        assert!(ratio_lines(&runs[..3]).is_empty(), "no peer, no ratio");
    }

    #[test]
    fn etcd_members_are_told_the_whole_cluster_and_their_own_addresses() {
        let client: SocketAddr = "127.0.0.1:2379".parse().expect("an address");
        let peer: SocketAddr = "127.0.0.1:2380".parse().expect("an address");
        let args = etcd::member_args(
            "m1",
            std::path::Path::new("/tmp/m1"),
            client,
            peer,
            "m1=http://127.0.0.1:2380",
        );
        let value = |flag: &str| {
            let at = args.iter().position(|arg| arg == flag).expect(flag);
            args[at + 1].clone()
        };
        assert_eq!(value("--listen-client-urls"), "http://127.0.0.1:2379");
        assert_eq!(
            value("--initial-advertise-peer-urls"),
            "http://127.0.0.1:2380"
        );
        assert_eq!(value("--initial-cluster-state"), "new");
        assert_eq!(args.len() % 2, 0, "flags and values: {args:?}");
    }
}
