//! The client gRPC services: one file per service of `proto/certus/v1` (and the standard health
//! service), each validating its requests before anything reaches Raft, and the conversions
//! between protobuf messages and the state machine's types they share.

pub mod admin;
pub mod clients;
pub mod convert;
pub mod health;
pub mod leases;
pub mod log;
pub mod pipelines;
pub mod sessions;
