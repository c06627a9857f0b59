//! The CT log scenarios: submitters and auditors over `certus.v1.Log` with a test PKI from the
//! seed ([`workload`]), the log's setup and the observer of every serving STH ([`run`]), a
//! master whose proposals land late ([`stale_master`]), and the STH-selection checkers
//! ([`checkers`]).

pub mod checkers;

#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod stale_master;
#[cfg(madsim)]
pub mod workload;
