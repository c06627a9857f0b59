//! The generated gRPC code of Certus, from the `.proto` files in `proto/`.
//!
//! **API boundary:** `certus.v1.Leases`, `certus.v1.Log`, `certus.v1.Admin` and `grpc.health.v1.Health` are the
//! public client API and change only compatibly. `certus.v1.Raft` is internal to the cluster.

#![allow(
    missing_docs,
    unreachable_pub,
    unused_qualifications,
    rust_2018_idioms,
    missing_debug_implementations,
    clippy::all
)]

/// `certus.v1`: the client services and the internal Raft transport.
pub mod v1 {
    tonic::include_proto!("certus.v1");
}

/// Every service and message above as a serialized `google.protobuf.FileDescriptorSet`: what gRPC
/// server reflection serves, so generic tools (grpcurl, Postman, grpcui) can explore the API.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/certus_descriptor.bin"));

/// `grpc.health.v1`: the standard gRPC health checking protocol.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}
