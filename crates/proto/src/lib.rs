//! The generated gRPC code of Certus, from the `.proto` files in `proto/`.
//!
//! **API boundary:** `certus.v1.Leases`, `certus.v1.Log`, `certus.v1.Admin`, `certus.v1.Sessions`,
//! `certus.v1.Pipelines`, `certus.v1.Clients` and `grpc.health.v1.Health` are the public client API
//! and change only compatibly, as do the numbered-request metadata entries below.
//! `certus.v1.Raft` is internal to the cluster.

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

/// The metadata entry that carries a numbered request's client session id (decimal), as
/// `proto/certus/v1/clients.proto` describes.
pub const CLIENT_ID_METADATA: &str = "certus-client-id";
/// The metadata entry that carries a numbered request's sequence number (decimal, from 1).
pub const CLIENT_SEQUENCE_METADATA: &str = "certus-client-sequence";
/// The metadata entry that carries the lowest sequence number the client still waits for.
pub const CLIENT_FIRST_OUTSTANDING_METADATA: &str = "certus-client-first-outstanding";

/// The metadata entry on the answer of a linearizable unary read: the Raft log index of the
/// state the read was served from (decimal). Linearizable reads never go back: a read that
/// starts after another ended is served at the same index or a later one, whichever node
/// serves either. Sent by `Leases` (`Get`, `List`, `CheckFence`, `GetChallenge`,
/// `ListChallenges`), `Pipelines` (`ListPipelines`, `GetSwitch`, `ListInPlay`, `ListStuck`,
/// `Status`, `ListNotices`) and `Sessions` (`List`, `Status`); not yet by the other reads.
pub const READ_INDEX_METADATA: &str = "certus-read-index";

/// The metadata entry of an error status a node sent, naming why (`no-leader`,
/// `outcome-unknown`, ...). A status made on the calling side carries none.
pub const ERROR_REASON_METADATA: &str = "certus-error";

/// Whether a failed call's status says its connection could not be opened, so the request never
/// left the caller and took no effect. tonic marks a failed connect with a
/// [`tonic::ConnectError`] in the status's source chain, whatever the message says.
#[cfg(not(madsim))]
pub fn connection_never_opened(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        source = error.source();
    }
    false
}

/// Under the simulation the transport opens a connection for every call and reports a failed
/// open as an I/O error of kind `ConnectionRefused`, which tonic turns into a bare
/// `UNAVAILABLE` status whose message is the error's text: `transport error` (the endpoint
/// could not be reached) or `connection refused` (the network refused the connection). A
/// connection lost after it opened says `connection reset` and may have carried the request.
#[cfg(madsim)]
pub fn connection_never_opened(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unavailable
        && status.metadata().get(ERROR_REASON_METADATA).is_none()
        && matches!(status.message(), "transport error" | "connection refused")
}

/// Puts the three entries of a numbered request on `request`: request `sequence` of client
/// session `client`, whose lowest unanswered request is `first_outstanding`.
pub fn number_request<M>(
    request: &mut tonic::Request<M>,
    client: u64,
    sequence: u64,
    first_outstanding: u64,
) {
    let metadata = request.metadata_mut();
    metadata.insert(CLIENT_ID_METADATA, client.into());
    metadata.insert(CLIENT_SEQUENCE_METADATA, sequence.into());
    metadata.insert(CLIENT_FIRST_OUTSTANDING_METADATA, first_outstanding.into());
}

/// Every service and message above as a serialized `google.protobuf.FileDescriptorSet`: what gRPC
/// server reflection serves, so generic tools (grpcurl, Postman, grpcui) can explore the API.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/certus_descriptor.bin"));

/// `grpc.health.v1`: the standard gRPC health checking protocol.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}
