//! The deterministic simulation of Certus.
//!
//! The harness builds only under `--cfg madsim` (in its own target directory; `cargo xtask sim`
//! and `cargo xtask test` run it): a cluster of real [`certus_node::Node`]s ([`cluster`]) on
//! madsim's simulated network and time, each on its own [`certus_store::SimDisk`] that outlives
//! crashes; the faults ([`faults`]); one run of a scenario ([`run`], [`settle`]); the scenario
//! table ([`scenarios`]); and the `certus-sim` command line ([`cli`], [`report`]).
//!
//! Each workload is a folder with its clients, its part of a run and its checkers: [`leases`]
//! (every scenario), [`ct`], [`sessions`], [`pipelines`], [`acme`]. What is recorded
//! ([`observe`], the workloads' histories) and what judges it ([`judge`], [`checkers`], each
//! workload's checkers, [`linearizability`], [`schedule`], [`timeline`]) and the seeded signing
//! [`keys`] are plain code, tested by a normal `cargo test`. The harness's bounds are named in
//! [`limits`].

#![deny(missing_docs, unreachable_pub)]

pub mod acme;
pub mod checkers;
pub mod ct;
pub mod judge;
pub mod keys;
pub mod leases;
pub mod limits;
pub mod linearizability;
pub mod observe;
pub mod pipelines;
pub mod schedule;
pub mod sessions;
pub mod timeline;

#[cfg(madsim)]
pub mod cli;
#[cfg(madsim)]
pub mod cluster;
#[cfg(madsim)]
pub mod faults;
#[cfg(madsim)]
pub mod http01;
#[cfg(madsim)]
pub mod report;
#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod scenarios;
#[cfg(madsim)]
pub mod settle;
