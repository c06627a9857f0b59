//! The openraft type configuration and the aliases the rest of the node uses.

use std::fmt;

use std::io::Cursor;

use certus_store::{Proposal, Responses};
use serde::{Deserialize, Serialize};

/// Where a node is reached: its gRPC address (Raft transport and client services) and its HTTP
/// address (health, ACME challenges). Stored in the membership, so every node knows every peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertusNode {
    /// `host:port` of the gRPC server.
    pub grpc_addr: String,
    /// `host:port` of the HTTP server.
    pub http_addr: String,
}

impl fmt::Display for CertusNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "grpc={} http={}", self.grpc_addr, self.http_addr)
    }
}

#[cfg(not(madsim))]
openraft::declare_raft_types!(
    /// The node's openraft types: one payload of commands per entry, tokio underneath.
    pub TypeConfig:
        D = Proposal,
        R = Responses,
        Node = CertusNode,
);

#[cfg(madsim)]
openraft::declare_raft_types!(
    /// The node's openraft types: one payload of commands per entry, madsim underneath.
    pub TypeConfig:
        D = Proposal,
        R = Responses,
        Node = CertusNode,
        AsyncRuntime = crate::raft::runtime::MadsimRuntime,
);

/// The Raft handle of a node.
pub type Raft = openraft::Raft<TypeConfig>;
/// A node id: chosen by the operator, never reused for another node.
pub type NodeId = u64;
/// A Raft log id.
pub type LogId = openraft::LogId<NodeId>;
/// The store's view of the applied state, for reads.
pub type StateReader = certus_store::StateReader<TypeConfig>;
