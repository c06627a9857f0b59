//! The node crate's integration tests, in one test binary: nodes in the test's own process, on
//! loopback. Each module is what was once a test binary of its own; `support` is what most of them
//! share (free ports, a test PKI, a three-node CT cluster and a plain one, a small RFC 6962 HTTP
//! client).
//!
//! One binary rather than one per module: each binary compiled the shared support code again and
//! monomorphized tonic's, axum's and tokio's generic code again, and was linked on its own; one
//! binary builds them once instead of fifteen times. The modules' tests run as threads of one
//! process, so what they share must be shared safely: ports come from `support::free_addr`, which
//! never hands out a port twice in the process.
//!
//! Real sockets and threads: none of it builds under `--cfg madsim`.

#![cfg(not(madsim))]

mod support;

mod acme_http;
mod ct_http;
mod ct_mirror;
mod health;
mod http_edge;
mod in_process;
mod observability;
mod pipeline_webhooks;
mod pipelines_grpc;
mod reload;
mod sessions_daemons;
mod sessions_grpc;
mod sessions_upstream;
mod tls;
mod tls_names;
