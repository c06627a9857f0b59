//! Talking to the other nodes of the CT log: forwarding reads this node cannot serve (a
//! transparent proxy, as seed 004's lagging nodes do) and fetching entries the replicated state
//! no longer holds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use certus_ct::Hash;
use certus_ct::structures::{DigitallySigned, SignedTreeHead};
use certus_proto::v1;
use certus_proto::v1::log_client::LogClient;
use certus_store::LocalEntry;
use tonic::transport::Channel;

use crate::edge::tls::PeerTls;

use crate::ct::reads::{Read, ReadError, ReadReply};
use crate::raft::replica::Replica;

/// The metadata entry that marks a forwarded read; a node never forwards such a read again.
pub const PROXIED_KEY: &str = "certus-proxied";
/// The longest a forwarded read or a fetch may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// Entries asked for per fetch.
pub const FETCH_BATCH: u32 = 1000;

/// Log clients to the other members, made on first use.
#[derive(Debug, Default)]
pub struct LogPeers {
    clients: Mutex<BTreeMap<u64, (String, LogClient<Channel>)>>,
    tls: PeerTls,
}

impl LogPeers {
    /// Log peers dialled as `tls` says.
    pub fn new(tls: PeerTls) -> LogPeers {
        LogPeers {
            clients: Mutex::default(),
            tls,
        }
    }

    /// A client to node `id` at `grpc_addr` (a new one if its address changed).
    fn client(&self, id: u64, grpc_addr: &str) -> Result<LogClient<Channel>, String> {
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((addr, client)) = clients.get(&id)
            && addr == grpc_addr
        {
            return Ok(client.clone());
        }
        let channel = self
            .tls
            .endpoint(grpc_addr)
            .map_err(|error| format!("node {id} at {grpc_addr}: {error}"))?
            .connect_timeout(PEER_TIMEOUT)
            .timeout(PEER_TIMEOUT)
            .connect_lazy();
        let client = LogClient::new(channel);
        clients.insert(id, (grpc_addr.to_owned(), client.clone()));
        Ok(client)
    }

    fn forget(&self, id: u64) {
        self.clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&id);
    }

    /// Other members whose last report says they hold at least `size` entries (in their tree
    /// if `integrated`, else in their database), in id order starting after `rotate`.
    fn holders(replica: &Replica, size: u64, integrated: bool, rotate: u64) -> Vec<(u64, String)> {
        let addresses: BTreeMap<u64, String> = replica
            .membership()
            .members
            .into_iter()
            .map(|member| (member.id, member.node.grpc_addr))
            .collect();
        let mut holders: Vec<(u64, String)> = replica.reader.read(|applied| {
            applied
                .state
                .ct_reports()
                .iter()
                .filter(|(node, report)| {
                    **node != replica.id
                        && if integrated {
                            report.sth.tree_size >= size
                        } else {
                            report.contiguous_size >= size
                        }
                })
                .filter_map(|(node, _)| Some((*node, addresses.get(node)?.clone())))
                .collect()
        });
        if !holders.is_empty() {
            let shift = usize::try_from(rotate).unwrap_or(0) % holders.len();
            holders.rotate_left(shift);
        }
        holders
    }

    /// Answers `read` from another node that holds the serving tree.
    pub async fn read(
        &self,
        replica: &Replica,
        read: &Read,
        serving_size: u64,
    ) -> Result<ReadReply, ReadError> {
        let holders = Self::holders(replica, serving_size, true, replica.clock.now_ms());
        if holders.is_empty() {
            return Err(ReadError::Unavailable(
                "this node is behind the serving STH and no other node reports holding it"
                    .to_owned(),
            ));
        }
        let mut last = String::new();
        for (id, addr) in holders {
            let client = match self.client(id, &addr) {
                Ok(client) => client,
                Err(error) => {
                    last = error;
                    continue;
                }
            };
            match forward(client, read).await {
                Ok(reply) => {
                    tracing::debug!(id = replica.id, to = id, ?read, "read forwarded");
                    return Ok(reply);
                }
                // The peer judged the request: its answer is the answer.
                Err(Forwarded::Answer(error)) => return Err(error),
                Err(Forwarded::Unreachable(error)) => {
                    self.forget(id);
                    last = format!("node {id}: {error}");
                }
            }
        }
        Err(ReadError::Unavailable(format!(
            "this node is behind the serving STH and no node that holds it answered ({last})"
        )))
    }

    /// Fetches stored entries `start..` (at most `limit`) from a member that reports holding
    /// them.
    pub async fn fetch(
        &self,
        replica: &Replica,
        start: u64,
        limit: u32,
    ) -> Result<Vec<LocalEntry>, String> {
        let holders = Self::holders(replica, start + 1, false, start);
        let mut last = format!("no other member reports holding entry {start}");
        for (id, addr) in holders {
            let mut client = self.client(id, &addr)?;
            let request = v1::FetchEntriesRequest { start, limit };
            match client.fetch_entries(request).await {
                Ok(reply) => {
                    let entries: Vec<LocalEntry> = reply
                        .into_inner()
                        .entries
                        .into_iter()
                        .map(|entry| LocalEntry {
                            leaf_input: entry.leaf_input,
                            extra_data: entry.extra_data,
                            sct: entry.sct,
                            sct_timestamp_ms: entry.sct_timestamp_ms,
                        })
                        .collect();
                    if !entries.is_empty() {
                        return Ok(entries);
                    }
                    last = format!("node {id} sent no entries from {start}");
                }
                Err(status) => {
                    self.forget(id);
                    last = format!("node {id}: {}", status.message());
                }
            }
        }
        Err(last)
    }
}

enum Forwarded {
    /// The peer answered with a refusal.
    Answer(ReadError),
    /// The peer could not be asked.
    Unreachable(String),
}

fn proxied<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        PROXIED_KEY,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    request
}

fn status_error(status: &tonic::Status) -> Forwarded {
    let message = status.message().to_owned();
    match status.code() {
        tonic::Code::InvalidArgument => Forwarded::Answer(ReadError::BadRequest(message)),
        tonic::Code::NotFound => Forwarded::Answer(ReadError::NotFound(message)),
        _ => Forwarded::Unreachable(message),
    }
}

fn hashes(list: Vec<Vec<u8>>) -> Result<Vec<Hash>, Forwarded> {
    list.into_iter()
        .map(|hash| {
            Hash::try_from(hash.as_slice())
                .map_err(|_| Forwarded::Unreachable("a peer sent a malformed hash".to_owned()))
        })
        .collect()
}

fn sth_from_proto(sth: &v1::SignedTreeHead) -> Result<SignedTreeHead, Forwarded> {
    let malformed = || Forwarded::Unreachable("a peer sent a malformed STH".to_owned());
    Ok(SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        sha256_root_hash: Hash::try_from(sth.sha256_root_hash.as_slice())
            .map_err(|_| malformed())?,
        tree_head_signature: DigitallySigned::decode(&sth.tree_head_signature)
            .map_err(|_| malformed())?,
    })
}

async fn forward(mut client: LogClient<Channel>, read: &Read) -> Result<ReadReply, Forwarded> {
    match *read {
        Read::Sth => {
            let reply = client
                .get_sth(proxied(v1::GetSthRequest {}))
                .await
                .map_err(|status| status_error(&status))?;
            Ok(ReadReply::Sth(sth_from_proto(reply.get_ref())?))
        }
        Read::Consistency { first, second } => {
            let reply = client
                .get_consistency(proxied(v1::GetConsistencyRequest { first, second }))
                .await
                .map_err(|status| status_error(&status))?;
            Ok(ReadReply::Consistency(hashes(
                reply.into_inner().consistency,
            )?))
        }
        Read::ProofByHash {
            leaf_hash,
            tree_size,
        } => {
            let reply = client
                .get_proof_by_hash(proxied(v1::GetProofByHashRequest {
                    leaf_hash: leaf_hash.to_vec(),
                    tree_size,
                }))
                .await
                .map_err(|status| status_error(&status))?
                .into_inner();
            Ok(ReadReply::Proof {
                leaf_index: reply.leaf_index,
                audit_path: hashes(reply.audit_path)?,
            })
        }
        Read::Entries { start, end } => {
            let reply = client
                .get_entries(proxied(v1::GetEntriesRequest { start, end }))
                .await
                .map_err(|status| status_error(&status))?;
            Ok(ReadReply::Entries(
                reply
                    .into_inner()
                    .entries
                    .into_iter()
                    .map(|entry| (entry.leaf_input, entry.extra_data))
                    .collect(),
            ))
        }
        Read::EntryAndProof {
            leaf_index,
            tree_size,
        } => {
            let reply = client
                .get_entry_and_proof(proxied(v1::GetEntryAndProofRequest {
                    leaf_index,
                    tree_size,
                }))
                .await
                .map_err(|status| status_error(&status))?
                .into_inner();
            let entry = reply
                .entry
                .ok_or_else(|| Forwarded::Unreachable("a peer sent no entry".to_owned()))?;
            Ok(ReadReply::EntryAndProof {
                entry: (entry.leaf_input, entry.extra_data),
                audit_path: hashes(reply.audit_path)?,
            })
        }
    }
}
