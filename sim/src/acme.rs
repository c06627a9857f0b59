//! The ACME scenario (RFC 8555): clients that register, order, serve HTTP-01 key
//! authorizations, finalize and revoke through the nodes, with the nodes' own nonces
//! ([`workload`]); the observer of the replicated orders and the run's end ([`run`]); and the
//! ACME checkers ([`checkers`]).

pub mod checkers;

#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod workload;
