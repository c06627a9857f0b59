//! Raft, as every other part of the node reaches it: openraft's type configuration, the
//! transport (client and server side, its wire form, what followers forward), group commit on
//! the leader, and the [`Replica`](replica::Replica) every service writes and reads through.
//!
//! Nothing here knows a client API: the services, the CT log and the roles call in; this
//! folder imports none of them.

pub mod applied;
pub mod codec;
pub mod forward;
pub mod network;
pub mod proposer;
pub mod replica;
#[cfg(madsim)]
pub mod runtime;
pub mod service;
pub mod types;
