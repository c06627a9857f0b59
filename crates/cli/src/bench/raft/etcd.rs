//! The peer of `certus bench raft --peer`: etcd, three members on loopback started from the
//! installed `etcd` binary (each with its own temp data dir and ports, etcd's default fsync of
//! its write-ahead log), under the same workload as Certus: 256-byte puts, then linearizable
//! ranges (etcd's default), one request at a time per client, each client over its own HTTP/2
//! connection to the leader.
//!
//! The client speaks etcd's gRPC API from `proto/etcd/rpc.proto` (a subset of etcd's own).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use super::super::peer::{self, Installed, Processes};
use super::super::{ErrorKinds, WARM_UP, free_addr, micros};
use super::{Op, Run, VALUE_BYTES};

#[allow(
    missing_docs,
    unreachable_pub,
    unused_qualifications,
    rust_2018_idioms,
    missing_debug_implementations,
    clippy::all
)]
mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

use etcdserverpb::kv_client::KvClient;
use etcdserverpb::maintenance_client::MaintenanceClient;
use etcdserverpb::{PutRequest, RangeRequest, StatusRequest};

/// What the rows of etcd are called.
pub(super) const SYSTEM: &str = "etcd";

const MEMBERS: usize = 3;
/// From start to an elected leader that answers: etcd elects within a few of its 1 s election
/// timeouts, longer on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// One call while waiting for the cluster; etcd answers at once or not at all.
const STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// A running 3-member etcd cluster; its processes die with it.
#[derive(Debug)]
pub(super) struct EtcdCluster {
    _processes: Processes,
    /// The leader's name and client address.
    pub(super) leader: (String, SocketAddr),
}

impl EtcdCluster {
    pub(super) async fn start(etcd: &Installed) -> Result<EtcdCluster, String> {
        let mut processes = Processes::new(peer::ETCD)?;
        let mut members = Vec::new();
        for index in 1..=MEMBERS {
            members.push((format!("m{index}"), free_addr()?, free_addr()?));
        }
        let initial_cluster = members
            .iter()
            .map(|(name, _, peer_addr)| format!("{name}=http://{peer_addr}"))
            .collect::<Vec<_>>()
            .join(",");
        for (name, client_addr, peer_addr) in &members {
            let data_dir = processes.data_dir(name)?;
            let args = member_args(name, &data_dir, *client_addr, *peer_addr, &initial_cluster);
            processes.spawn(name, &etcd.path, &args)?;
        }
        let leader = processes
            .await_ready("serving with a leader", START_TIMEOUT, || {
                find_leader(&members)
            })
            .await?;
        Ok(EtcdCluster {
            _processes: processes,
            leader,
        })
    }
}

/// etcd's command line for one member of a new cluster on loopback. The log level is `warn`:
/// the log goes to a file, read when the member fails.
pub(super) fn member_args(
    name: &str,
    data_dir: &Path,
    client_addr: SocketAddr,
    peer_addr: SocketAddr,
    initial_cluster: &str,
) -> Vec<String> {
    [
        ("--name", name.to_owned()),
        ("--data-dir", data_dir.display().to_string()),
        ("--listen-client-urls", format!("http://{client_addr}")),
        ("--advertise-client-urls", format!("http://{client_addr}")),
        ("--listen-peer-urls", format!("http://{peer_addr}")),
        (
            "--initial-advertise-peer-urls",
            format!("http://{peer_addr}"),
        ),
        ("--initial-cluster", initial_cluster.to_owned()),
        ("--initial-cluster-token", "certus-bench".to_owned()),
        ("--initial-cluster-state", "new".to_owned()),
        ("--logger", "zap".to_owned()),
        ("--log-level", "warn".to_owned()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect()
}

/// The member that is the leader by its own account (its `Status` names itself), with its
/// client address; an error says what is missing yet.
async fn find_leader(
    members: &[(String, SocketAddr, SocketAddr)],
) -> Result<(String, SocketAddr), String> {
    let mut last = String::from("no member answered");
    for (name, client_addr, _) in members {
        let status = async {
            let channel = super::super::channel(*client_addr).await?;
            MaintenanceClient::new(channel)
                .status(StatusRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| format!("status: {status}"))
        };
        match tokio::time::timeout(STATUS_TIMEOUT, status).await {
            Ok(Ok(status)) => {
                let member_id = status.header.map_or(0, |header| header.member_id);
                if status.leader != 0 && status.leader == member_id {
                    return Ok((name.clone(), *client_addr));
                }
                last = format!("{name} answers, leader {:x}", status.leader);
            }
            Ok(Err(error)) => last = format!("{name}: {error}"),
            Err(_) => last = format!("{name}: no answer within {STATUS_TIMEOUT:?}"),
        }
    }
    Err(last)
}

/// One run of `clients` clients against etcd's leader: puts of 256 bytes, or linearizable
/// ranges of the keys the puts wrote — the workload of [`super::measure`].
pub(super) async fn measure(
    leader: SocketAddr,
    op: Op,
    clients: usize,
    duration: Duration,
) -> Result<Run, String> {
    let value = vec![b'v'; VALUE_BYTES];
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let mut grpc: KvClient<Channel> = KvClient::new(super::super::channel(leader).await?);
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = ErrorKinds::default();
            let mut n = 0u64;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                let key = format!("c{client}-{}", n % super::keys_per_client(clients)).into_bytes();
                n += 1;
                let result = match op {
                    Op::Write => grpc
                        .put(PutRequest {
                            key,
                            value: value.clone(),
                            lease: 0,
                        })
                        .await
                        .map(|_| ()),
                    // Linearizable: `serializable` false, etcd's default.
                    Op::Read => grpc
                        .range(RangeRequest {
                            key,
                            serializable: false,
                            ..RangeRequest::default()
                        })
                        .await
                        .map(|_| ()),
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
    super::gather(SYSTEM, op, clients, duration, tasks).await
}
