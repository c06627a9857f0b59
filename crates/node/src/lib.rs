//! A Certus node: openraft replicating `certus-core`'s state machine over gRPC, stored by
//! `certus-store`, serving the client gRPC services and the HTTP endpoints.
//!
//! The same code runs on tokio and, under `--cfg madsim`, in the deterministic simulation: time,
//! spawning and randomness reach openraft through `raft::runtime` there, and every application
//! clock read goes through [`Clock`].
//!
//! One folder per concern: [`raft`] (openraft wired to the store and the transport; the
//! [`Replica`] everything else goes through), [`convert`] (the client API's requests and replies
//! to and from the state machine's commands, pure), [`services`] (the client gRPC services), [`ct`]
//! (the CT log), [`acme`] (ACME, RFC 8555: its HTTP resources and the challenge validator),
//! [`roles`] (background work: ticks, session daemons, webhooks), [`edge`] (TLS,
//! authorization, client limits, request metrics, HTTP) and [`metrics`]; [`node`] starts and
//! stops them all.

#![deny(missing_docs, unreachable_pub)]

pub mod acme;
pub mod address;
pub mod clock;
pub mod config;
pub mod convert;
pub mod ct;
pub mod edge;
pub mod errors;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod ordered_watch;
pub mod raft;
mod random;
pub mod roles;
pub mod services;
mod stop;
pub mod tasks;

pub use address::MemberAddr;
pub use clock::Clock;
pub use config::{
    CtFiles, HttpSetup, NodeConfig, PipelinesSetup, RaftTuning, SessionsSetup, StoreSetup,
};
pub use ct::node::CtNode;
pub use ct::setup::CtSetup;
pub use edge::tls::{TlsMaterial, TlsSetup};
pub use errors::ServiceError;
pub use node::{Node, NodeFiles, NodeParts, StartError};
pub use raft::replica::{Leader, Replica};
pub use raft::types::{CertusNode, NodeId, Raft, TypeConfig};
pub use roles::session_daemons::{SessionParts, WorkEvent, WorkObserver};
