//! The client side of the Raft transport: openraft's network over `certus.v1.Raft` gRPC, and the
//! forwarding client a follower uses to reach the leader.
//!
//! A channel is created lazily (no connection until the first RPC), every RPC has a deadline,
//! and a channel that failed is dropped so the next RPC reconnects. A member's address may be a
//! host name: it is resolved on every connect, so after a failure (a peer whose IP address
//! changed stops answering at the old one) the next RPC dials the name afresh and finds the
//! new address; over TLS the peer's certificate is checked against the name dialled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_proto::v1::RaftMessage;
use certus_proto::v1::raft_client::RaftClient;
#[cfg(not(madsim))]
use openraft::error::Unreachable;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout as RpcTimeout,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::transport::Channel;

use crate::edge::tls::PeerTls;
use crate::limits::{FORWARD_TIMEOUT, FORWARDED_MEMBERSHIP_TIMEOUT, RAFT_MESSAGE_BYTES_MAX};
use crate::raft::codec;
use crate::raft::forward::{ForwardReply, ForwardRequest};
use crate::raft::types::{CertusNode, NodeId, TypeConfig};

/// Channels to peers by gRPC address, shared by every Raft client and the forwarder.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    channels: Arc<Mutex<BTreeMap<String, Channel>>>,
    tls: PeerTls,
    /// What this node last logged of each peer's reachability (one entry per member).
    reach: Arc<Mutex<BTreeMap<NodeId, Reach>>>,
}

/// Whether a peer answered the last Raft call or could not be reached. openraft logs every
/// failed attempt (which the binary's default log filter drops); the node logs each change once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Reached,
    Lost,
}

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The address is not a valid endpoint.
    #[error("invalid peer address {addr:?}: {reason}")]
    BadAddress {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The peer could not be reached, or failed the call.
    #[error("peer {addr} failed: {status}")]
    Call {
        /// The address.
        addr: String,
        /// What it answered.
        status: Box<tonic::Status>,
    },
    /// Under the simulation: replication to this peer pauses after finding it unreachable.
    #[cfg(madsim)]
    #[error("peer {addr} was unreachable; replication to it pauses before dialing again")]
    Resting {
        /// The address.
        addr: String,
    },
    /// The peer did not answer in time.
    #[error("peer {addr} did not answer within {timeout:?}")]
    Timeout {
        /// The address.
        addr: String,
        /// The deadline.
        timeout: Duration,
    },
    /// The peer answered with bytes this node cannot read.
    #[error("peer {addr} sent an unreadable reply: {reason}")]
    Decode {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl PeerError {
    /// Whether the request certainly never reached the peer: its connection could not be opened
    /// (or, under the simulation, replication to it was resting and nothing was dialled).
    pub fn never_sent(&self) -> bool {
        match self {
            PeerError::BadAddress { .. } => true,
            PeerError::Call { status, .. } => certus_proto::connection_never_opened(status),
            #[cfg(madsim)]
            PeerError::Resting { .. } => true,
            PeerError::Timeout { .. } | PeerError::Decode { .. } => false,
        }
    }
}

impl Peers {
    /// Peers dialled as `tls` says.
    pub fn new(tls: PeerTls) -> Peers {
        Peers {
            channels: Arc::default(),
            tls,
            reach: Arc::default(),
        }
    }

    /// How peers are dialled.
    pub fn tls(&self) -> &PeerTls {
        &self.tls
    }

    /// Logs a change in whether peer `target` at `addr` can be reached: once when it is lost
    /// (or not reached yet, at start), once when it answers again.
    fn note_reach(&self, target: NodeId, addr: &str, outcome: Result<(), &PeerError>) {
        let now = match outcome {
            Ok(()) => Reach::Reached,
            Err(PeerError::Timeout { .. }) => Reach::Lost,
            Err(PeerError::Call { status, .. }) if status.code() == tonic::Code::Unavailable => {
                Reach::Lost
            }
            Err(_) => return,
        };
        let mut reach = self.reach.lock().expect("peer reach lock");
        let before = reach.insert(target, now);
        match (before, now, outcome) {
            (Some(Reach::Lost), Reach::Reached, _) => {
                tracing::info!(peer = target, addr, "peer reachable again");
            }
            (Some(Reach::Reached), Reach::Lost, Err(error)) => {
                tracing::warn!(peer = target, addr, %error, "peer lost; Raft keeps retrying it");
            }
            (None, Reach::Lost, Err(error)) => {
                tracing::info!(peer = target, addr, %error, "peer not reachable yet");
            }
            _ => {}
        }
    }

    fn client(&self, addr: &str) -> Result<RaftClient<Channel>, PeerError> {
        let mut channels = self.channels.lock().expect("peer table lock");
        let channel = match channels.get(addr) {
            Some(channel) => channel.clone(),
            None => {
                let endpoint = self
                    .tls
                    .endpoint(addr)
                    .map_err(|reason| PeerError::BadAddress {
                        addr: addr.to_owned(),
                        reason,
                    })?
                    .connect_timeout(Duration::from_secs(1))
                    .tcp_nodelay(true);
                let channel = endpoint.connect_lazy();
                channels.insert(addr.to_owned(), channel.clone());
                channel
            }
        };
        Ok(RaftClient::new(channel)
            .max_decoding_message_size(RAFT_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(RAFT_MESSAGE_BYTES_MAX))
    }

    fn forget(&self, addr: &str) {
        self.channels.lock().expect("peer table lock").remove(addr);
    }

    /// One RPC to `addr`: `kind` picks the method; the reply is decoded as `Reply`.
    async fn call<Req: Serialize, Reply: DeserializeOwned>(
        &self,
        addr: &str,
        kind: RpcKind,
        request: &Req,
        timeout: Duration,
    ) -> Result<Reply, PeerError> {
        let mut client = self.client(addr)?;
        let message = RaftMessage {
            payload: codec::encode(request),
        };
        let call = async {
            match kind {
                RpcKind::AppendEntries => client.append_entries(message).await,
                RpcKind::Vote => client.vote(message).await,
                RpcKind::InstallSnapshot => client.install_snapshot(message).await,
                RpcKind::Forward => client.forward(message).await,
            }
        };
        let reply = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => {
                self.forget(addr);
                return Err(PeerError::Call {
                    addr: addr.to_owned(),
                    status: Box::new(status),
                });
            }
            Err(_elapsed) => {
                self.forget(addr);
                return Err(PeerError::Timeout {
                    addr: addr.to_owned(),
                    timeout,
                });
            }
        };
        codec::decode(&reply.payload).map_err(|error| PeerError::Decode {
            addr: addr.to_owned(),
            reason: error.to_string(),
        })
    }

    /// Sends a request to the leader at `addr` and waits for its answer.
    pub async fn forward(
        &self,
        addr: &str,
        request: &ForwardRequest,
    ) -> Result<ForwardReply, PeerError> {
        self.call(addr, RpcKind::Forward, request, forward_timeout(request))
            .await
    }
}

/// How long a forwarded request may take: a membership change as long as the leader lets it.
fn forward_timeout(request: &ForwardRequest) -> Duration {
    match request {
        ForwardRequest::AddLearner { .. }
        | ForwardRequest::ChangeMembership { .. }
        | ForwardRequest::SetMemberAddress { .. } => FORWARDED_MEMBERSHIP_TIMEOUT,
        ForwardRequest::Write(_) | ForwardRequest::ReadIndex => FORWARD_TIMEOUT,
    }
}

#[derive(Debug, Clone, Copy)]
enum RpcKind {
    AppendEntries,
    Vote,
    InstallSnapshot,
    Forward,
}

/// Makes a [`PeerClient`] per replication target.
#[derive(Debug, Clone)]
pub struct Network {
    id: NodeId,
    peers: Peers,
}

impl Network {
    /// The network of node `id` over the shared channel table.
    pub fn new(id: NodeId, peers: Peers) -> Network {
        Network { id, peers }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &CertusNode) -> PeerClient {
        // Creating a client does not connect: an unreachable peer shows up on the first RPC.
        PeerClient {
            id: self.id,
            peers: self.peers.clone(),
            target,
            node: node.clone(),
            resting_until: None,
        }
    }
}

/// How long replication to a peer that could not be reached waits before it dials again
/// (openraft's own default backoff).
#[cfg(madsim)]
const UNREACHABLE_PAUSE: Duration = Duration::from_millis(500);

/// openraft's view of one peer.
#[derive(Debug)]
pub struct PeerClient {
    id: NodeId,
    peers: Peers,
    target: NodeId,
    node: CertusNode,
    /// Under the simulation: replication found the peer unreachable and does not dial it again
    /// before then (see [`PeerClient::rpc`]).
    #[cfg_attr(not(madsim), allow(dead_code))]
    resting_until: Option<tokio::time::Instant>,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, CertusNode, RaftError<NodeId, E>>>;

impl PeerClient {
    /// A peer that could not be reached is openraft's `Unreachable`, which makes replication
    /// back off. Under the simulation it is a network error instead, and the pause is taken
    /// here: openraft's backoff waits in an unbiased `select!`, whose branch order tokio draws
    /// from a per-process seed, so two runs of a seed in one process (madsim's determinism
    /// check) would differ (see `ordered_watch`). Votes are never held back.
    async fn rpc<Req, Reply, E>(
        &mut self,
        kind: RpcKind,
        request: &Req,
        option: &RPCOption,
    ) -> RpcResult<Reply, E>
    where
        Req: Serialize,
        Reply: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let timeout = option.hard_ttl();
        #[cfg(madsim)]
        let replicating = matches!(kind, RpcKind::AppendEntries | RpcKind::InstallSnapshot);
        #[cfg(madsim)]
        if replicating && let Some(until) = self.resting_until {
            // openraft cuts an append off at its timeout (the heartbeat interval): wait within
            // it, and answer without dialing while the pause lasts.
            let now = tokio::time::Instant::now();
            if now < until {
                tokio::time::sleep_until(until.min(now + timeout * 3 / 4)).await;
            }
            if tokio::time::Instant::now() < until {
                return Err(RPCError::Network(NetworkError::new(&PeerError::Resting {
                    addr: self.node.grpc_addr.clone(),
                })));
            }
        }
        let reply = self
            .peers
            .call(&self.node.grpc_addr, kind, request, timeout)
            .await;
        self.peers.note_reach(
            self.target,
            &self.node.grpc_addr,
            reply.as_ref().map(|_| ()),
        );
        #[cfg(madsim)]
        {
            let unreachable = matches!(
                &reply,
                Err(PeerError::Call { status, .. }) if status.code() == tonic::Code::Unavailable
            );
            self.resting_until = (replicating && unreachable)
                .then(|| tokio::time::Instant::now() + UNREACHABLE_PAUSE);
        }
        let reply: Result<Reply, RaftError<NodeId, E>> = reply.map_err(|error| match error {
            PeerError::Timeout { .. } => RPCError::Timeout(RpcTimeout {
                action: match kind {
                    RpcKind::Vote => openraft::network::RPCTypes::Vote,
                    RpcKind::InstallSnapshot => openraft::network::RPCTypes::InstallSnapshot,
                    RpcKind::AppendEntries | RpcKind::Forward => {
                        openraft::network::RPCTypes::AppendEntries
                    }
                },
                id: self.id,
                target: self.target,
                timeout,
            }),
            #[cfg(not(madsim))]
            PeerError::Call { ref status, .. } if status.code() == tonic::Code::Unavailable => {
                RPCError::Unreachable(Unreachable::new(&error))
            }
            other => RPCError::Network(NetworkError::new(&other)),
        })?;
        reply.map_err(|remote| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                remote,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        self.rpc(RpcKind::AppendEntries, &request, &option).await
    }

    async fn install_snapshot(
        &mut self,
        request: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.rpc(RpcKind::InstallSnapshot, &request, &option).await
    }

    async fn vote(
        &mut self,
        request: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.rpc(RpcKind::Vote, &request, &option).await
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use std::time::Duration;

    use super::PeerError;

    fn call(status: tonic::Status) -> PeerError {
        PeerError::Call {
            addr: "10.0.0.1:7101".to_owned(),
            status: Box::new(status),
        }
    }

    #[test]
    fn only_a_connection_never_opened_means_the_request_was_never_sent() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let never_opened =
            tonic::Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        assert!(call(never_opened).never_sent());
        // A connection that broke after it opened may have carried the request.
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert!(!call(tonic::Status::from_error(Box::new(reset))).never_sent());
        // The message alone is not a connect failure, nor is a peer's own refusal.
        assert!(!call(tonic::Status::unavailable("transport error")).never_sent());
        let timeout = PeerError::Timeout {
            addr: "10.0.0.1:7101".to_owned(),
            timeout: Duration::from_secs(1),
        };
        assert!(!timeout.never_sent());
    }
}
