//! A Certus node: openraft replicating `certus-core`'s state machine over gRPC, stored by
//! `certus-store`, serving the client gRPC services and the HTTP endpoints.
//!
//! The same code runs on tokio and, under `--cfg madsim`, in the deterministic simulation: time,
//! spawning and randomness reach openraft through [`runtime`] there, and every application clock
//! read goes through [`Clock`].

#![deny(missing_docs, unreachable_pub)]

pub mod admin_service;
pub mod client_limits;
pub mod clients_service;
pub mod clock;
pub mod codec;
pub mod config;
pub mod convert;
#[cfg(not(madsim))]
pub mod ct_http;
pub mod ct_log;
#[cfg(not(madsim))]
pub mod ct_mirror;
pub mod ct_peers;
#[cfg(not(madsim))]
pub mod ct_source;
pub mod errors;
pub mod forward;
#[cfg(not(madsim))]
pub mod grpc_metrics;
pub mod health;
#[cfg(not(madsim))]
pub mod http;
pub mod leases_service;
pub mod limits;
pub mod log_service;
pub mod metrics;
pub mod network;
pub mod node;
pub mod pipeline_webhooks;
pub mod pipelines_service;
pub mod proposer;
pub mod raft_service;
pub mod replica;
#[cfg(madsim)]
pub mod runtime;
pub mod security;
pub mod session_daemons;
pub mod sessions_service;
pub mod tls;
pub mod types;

pub use clock::Clock;
pub use config::{CtFiles, NodeConfig, PipelinesSetup, RaftTuning, SessionsSetup, StoreSetup};
pub use ct_log::CtSetup;
pub use errors::ServiceError;
pub use node::{Node, NodeFiles, StartError};
pub use replica::{Leader, Replica};
pub use session_daemons::{SessionParts, WorkEvent, WorkObserver};
pub use tls::{TlsMaterial, TlsSetup};
pub use types::{CertusNode, NodeId, Raft, TypeConfig};
