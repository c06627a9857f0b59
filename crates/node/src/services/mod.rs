//! The client gRPC services: one file (or folder) per service of `proto/certus/v1` (and the
//! standard health service). A handler is wiring: it converts the request with
//! [`crate::convert`] (where it is validated before anything reaches Raft), calls the replica
//! through the one path every service shares ([`call`]), and converts the answer back.

pub mod admin;
pub mod call;
pub mod clients;
pub mod health;
pub mod leases;
pub mod log;
pub mod pipelines;
pub mod sessions;
