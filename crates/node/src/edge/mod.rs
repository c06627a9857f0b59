//! Where the node meets the outside: transport security and who may call what, per-client
//! bounds, request message sizes and request metrics in front of the gRPC services, the HTTP
//! endpoints and the listeners that serve them, and reloading the certificates, tokens and
//! client limits of a running node.

pub mod client_limits;
#[cfg(not(madsim))]
pub mod grpc_metrics;
#[cfg(not(madsim))]
pub mod grpc_tls;
#[cfg(not(madsim))]
pub mod http;
#[cfg(not(madsim))]
pub mod http_server;
#[cfg(not(madsim))]
pub mod message_size;
pub mod reload;
pub mod security;
pub mod tls;
