//! Concurrent readers of the serving STH and of inclusion proofs, spread over the nodes, over
//! RFC 6962 HTTP (`/ct/v1/get-sth`, `/ct/v1/get-proof-by-hash`) and over `certus.v1.Log`.
//!
//! HTTP goes through hyper-util's client (keep-alive HTTP/1.1, one client and so one
//! connection per reader); gRPC through one tonic channel (one HTTP/2 connection) per reader.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certus_ct::Hash;
use certus_ct::merkle::verify_inclusion;
use certus_ct::structures::json::{GetProofByHashResponse, GetSthResponse};
use certus_proto::v1::log_client::LogClient;
use certus_proto::v1::{GetProofByHashRequest, GetSthRequest};
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper::{StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tonic::transport::{Channel, Endpoint};

use super::NodeAddrs;
use crate::bench::{WARM_UP, micros};

/// What a reader asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadOp {
    /// get-sth.
    Sth,
    /// get-proof-by-hash of a logged leaf in the serving tree.
    Proof,
}

/// How a reader asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// RFC 6962 JSON over HTTP/1.1.
    Http,
    /// `certus.v1.Log` over HTTP/2.
    Grpc,
}

/// The leaves readers ask proofs for, and the tree they ask in.
#[derive(Debug)]
pub(super) struct ProofTargets {
    /// Leaf hashes inside the serving tree.
    pub(super) leaves: Vec<Hash>,
    /// Their base64, percent-encoded for a query string.
    encoded: Vec<String>,
    /// The serving tree size.
    pub(super) tree_size: u64,
}

impl ProofTargets {
    pub(super) fn new(leaves: Vec<Hash>, tree_size: u64) -> ProofTargets {
        assert!(!leaves.is_empty(), "proofs need leaves to ask for");
        let encoded = leaves
            .iter()
            .map(|hash| query_encode(&STANDARD.encode(hash)))
            .collect();
        ProofTargets {
            leaves,
            encoded,
            tree_size,
        }
    }

    /// The `n`th leaf a reader asks for: readers stride through the leaves differently.
    fn pick(&self, reader: usize, n: usize) -> usize {
        (reader * 7919 + n * 104_729) % self.leaves.len()
    }
}

/// Percent-encodes the base64 characters that mean something in a query string.
fn query_encode(base64: &str) -> String {
    base64
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// One measured run.
#[derive(Debug)]
pub(super) struct ReadRun {
    pub(super) op: ReadOp,
    pub(super) transport: Transport,
    pub(super) clients: usize,
    pub(super) elapsed: Duration,
    /// Latencies of the successful reads begun in the window, sorted, in microseconds.
    pub(super) latencies_us: Vec<u64>,
    /// Successful reads that also ended in the window: what the rate counts.
    pub(super) completed_in_window: usize,
    /// Failed reads by cause.
    pub(super) errors: BTreeMap<String, usize>,
    /// CPU the process used in the window, in cores.
    pub(super) cpu_cores: Option<f64>,
}

impl ReadRun {
    pub(super) fn per_second(&self) -> f64 {
        super::submit::per_second(self.completed_in_window, self.elapsed)
    }
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

async fn grpc_channel(addr: SocketAddr) -> Result<Channel, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|error| error.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|error| format!("connecting to {addr}: {error}"))
}

/// A GET that must answer 200; returns the body.
async fn http_get(client: &HttpClient, uri: Uri) -> Result<Bytes, String> {
    let response = client
        .get(uri)
        .await
        .map_err(|error| format!("HTTP: {error}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|error| format!("HTTP body: {error}"))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    Ok(body)
}

fn sth_uri(node: &NodeAddrs) -> Result<Uri, String> {
    format!("http://{}/ct/v1/get-sth", node.http)
        .parse()
        .map_err(|error| format!("get-sth URI: {error}"))
}

fn proof_uri(node: &NodeAddrs, targets: &ProofTargets, leaf: usize) -> Result<Uri, String> {
    format!(
        "http://{}/ct/v1/get-proof-by-hash?hash={}&tree_size={}",
        node.http, targets.encoded[leaf], targets.tree_size
    )
    .parse()
    .map_err(|error| format!("get-proof-by-hash URI: {error}"))
}

/// Before anything is measured: every node answers both reads over both transports, and the
/// answers are right (the proof verifies against the STH's root).
pub(super) async fn check_answers(
    nodes: &[NodeAddrs],
    targets: &ProofTargets,
) -> Result<(), String> {
    let http = http_client();
    for (which, node) in nodes.iter().enumerate() {
        let leaf = which % targets.leaves.len();
        let hash = &targets.leaves[leaf];
        let context = |what: &str| format!("node {} ({what})", node.id);

        let body = http_get(&http, sth_uri(node)?)
            .await
            .map_err(|error| format!("{}: {error}", context("HTTP get-sth")))?;
        let sth: GetSthResponse = serde_json::from_slice(&body)
            .map_err(|error| format!("{}: {error}", context("HTTP get-sth JSON")))?;
        let body = http_get(&http, proof_uri(node, targets, leaf)?)
            .await
            .map_err(|error| format!("{}: {error}", context("HTTP get-proof-by-hash")))?;
        let proof: GetProofByHashResponse = serde_json::from_slice(&body)
            .map_err(|error| format!("{}: {error}", context("HTTP get-proof-by-hash JSON")))?;
        if sth.tree_size != targets.tree_size {
            return Err(format!(
                "{}: tree size {} while the serving size was {}",
                context("HTTP get-sth"),
                sth.tree_size,
                targets.tree_size
            ));
        }
        verify_inclusion(
            hash,
            proof.leaf_index,
            targets.tree_size,
            &proof.audit_path,
            &sth.sha256_root_hash,
        )
        .map_err(|error| format!("{}: {error}", context("HTTP proof")))?;

        let mut grpc = LogClient::new(grpc_channel(node.grpc).await?);
        let sth = grpc
            .get_sth(GetSthRequest {})
            .await
            .map_err(|status| format!("{}: {status}", context("gRPC GetSth")))?
            .into_inner();
        let proof = grpc
            .get_proof_by_hash(GetProofByHashRequest {
                leaf_hash: hash.to_vec(),
                tree_size: targets.tree_size,
            })
            .await
            .map_err(|status| format!("{}: {status}", context("gRPC GetProofByHash")))?
            .into_inner();
        let root = Hash::try_from(sth.sha256_root_hash.as_slice())
            .map_err(|_| format!("{}: the root is not 32 bytes", context("gRPC GetSth")))?;
        let path = proof
            .audit_path
            .iter()
            .map(|node| Hash::try_from(node.as_slice()))
            .collect::<Result<Vec<Hash>, _>>()
            .map_err(|_| format!("{}: a path node is not 32 bytes", context("gRPC proof")))?;
        verify_inclusion(hash, proof.leaf_index, sth.tree_size, &path, &root)
            .map_err(|error| format!("{}: {error}", context("gRPC proof")))?;
    }
    Ok(())
}

/// `clients` readers, reader `r` on node `r % nodes`, each asking in turn for `duration` after
/// a warm-up.
pub(super) async fn measure(
    nodes: &[NodeAddrs],
    targets: &Arc<ProofTargets>,
    op: ReadOp,
    transport: Transport,
    clients: usize,
    duration: Duration,
) -> Result<ReadRun, String> {
    // Connections first, so that every reader is ready when the warm-up starts.
    let mut channels = Vec::new();
    if transport == Transport::Grpc {
        for reader in 0..clients {
            channels.push(grpc_channel(nodes[reader % nodes.len()].grpc).await?);
        }
    }
    let mut channels = channels.into_iter();
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let cpu = super::cpu_cores_between(start, end);
    let mut tasks = Vec::new();
    for reader in 0..clients {
        let reader_loop = Reader {
            reader,
            op,
            targets: Arc::clone(targets),
            start,
            end,
        };
        tasks.push(match transport {
            Transport::Grpc => {
                let channel = channels.next().expect("one channel per gRPC reader");
                tokio::spawn(reader_loop.grpc(channel))
            }
            Transport::Http => tokio::spawn(reader_loop.http(nodes[reader % nodes.len()].clone())),
        });
    }
    let mut latencies_us = Vec::new();
    let mut completed_in_window = 0;
    let mut errors = BTreeMap::new();
    for task in tasks {
        let seen = task.await.map_err(|error| error.to_string())??;
        latencies_us.extend(seen.latencies_us);
        completed_in_window += seen.completed_in_window;
        for (cause, count) in seen.errors {
            *errors.entry(cause).or_default() += count;
        }
    }
    latencies_us.sort_unstable();
    let cpu_cores = cpu.await.map_err(|error| error.to_string())?;
    Ok(ReadRun {
        op,
        transport,
        clients,
        elapsed: duration,
        latencies_us,
        completed_in_window,
        errors,
        cpu_cores,
    })
}

/// What one reader saw in the window.
#[derive(Debug, Default)]
struct Seen {
    latencies_us: Vec<u64>,
    completed_in_window: usize,
    errors: BTreeMap<String, usize>,
}

type ReaderResult = Result<Seen, String>;

/// One reader's loop.
#[derive(Debug)]
struct Reader {
    reader: usize,
    op: ReadOp,
    targets: Arc<ProofTargets>,
    start: Instant,
    end: Instant,
}

impl Reader {
    async fn http(self, node: NodeAddrs) -> ReaderResult {
        let client = http_client();
        let sth = sth_uri(&node)?;
        let mut seen = Seen::default();
        for n in 0.. {
            let uri = match self.op {
                ReadOp::Sth => sth.clone(),
                ReadOp::Proof => {
                    proof_uri(&node, &self.targets, self.targets.pick(self.reader, n))?
                }
            };
            let began = Instant::now();
            if began >= self.end {
                break;
            }
            let result = http_get(&client, uri).await;
            self.record(began, result.map(drop), &mut seen);
        }
        Ok(seen)
    }

    async fn grpc(self, channel: Channel) -> ReaderResult {
        let mut log = LogClient::new(channel);
        let mut seen = Seen::default();
        for n in 0.. {
            let began = Instant::now();
            if began >= self.end {
                break;
            }
            let result = match self.op {
                ReadOp::Sth => log.get_sth(GetSthRequest {}).await.map(drop),
                ReadOp::Proof => {
                    let leaf = self.targets.pick(self.reader, n);
                    log.get_proof_by_hash(GetProofByHashRequest {
                        leaf_hash: self.targets.leaves[leaf].to_vec(),
                        tree_size: self.targets.tree_size,
                    })
                    .await
                    .map(drop)
                }
            };
            let result = result.map_err(|status| format!("gRPC {:?}", status.code()));
            self.record(began, result, &mut seen);
        }
        Ok(seen)
    }

    fn record(&self, began: Instant, result: Result<(), String>, seen: &mut Seen) {
        if began < self.start {
            return;
        }
        match result {
            Ok(()) => {
                let ended = Instant::now();
                seen.latencies_us.push(micros(ended - began));
                seen.completed_in_window += usize::from(ended <= self.end);
            }
            Err(cause) => *seen.errors.entry(cause).or_default() += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_percent_encoded_for_a_query_string() {
        assert_eq!(query_encode("ab+c/d=="), "ab%2Bc%2Fd%3D%3D");
        let targets = ProofTargets::new(vec![[0xfb; 32]], 7);
        assert!(
            !targets.encoded[0].contains(['+', '/', '=']),
            "{:?}",
            targets.encoded
        );
    }

    #[test]
    fn readers_spread_over_all_leaves() {
        let targets = ProofTargets::new((0..10u8).map(|i| [i; 32]).collect(), 10);
        let picked: std::collections::BTreeSet<usize> =
            (0..100).map(|n| targets.pick(3, n)).collect();
        assert_eq!(picked.len(), 10);
    }
}
