//! The deterministic simulation of Certus.
//!
//! The harness ([`cluster`], [`run`], [`workload`], [`faults`]) builds only under `--cfg madsim`
//! (in its own target directory; `cargo xtask sim` and `cargo xtask test` run it): a cluster of
//! real [`certus_node::Node`]s on madsim's simulated network and time, each on its own
//! [`certus_store::SimDisk`] that outlives crashes. What it records ([`history`], [`observe`]) and
//! what judges it ([`linearizability`], [`lease_model`], [`checkers`], [`ct_checkers`], [`session_checkers`], [`pipeline_checkers`], [`schedule`],
//! [`timeline`]) and the seeded signing [`keys`] are plain code, tested by a normal `cargo test`.

#![deny(missing_docs, unreachable_pub)]

pub mod checkers;
pub mod ct_checkers;
pub mod history;
pub mod judge;
pub mod keys;
pub mod lease_model;
pub mod linearizability;
pub mod observe;
pub mod pipeline_checkers;
pub mod pipeline_webhook_checkers;
pub mod schedule;
pub mod session_checkers;
pub mod timeline;

#[cfg(madsim)]
pub mod cli;
#[cfg(madsim)]
pub mod cluster;
#[cfg(madsim)]
pub mod ct_run;
#[cfg(madsim)]
pub mod ct_workload;
#[cfg(madsim)]
pub mod duplicates;
#[cfg(madsim)]
pub mod faults;
#[cfg(madsim)]
pub mod pipeline_run;
#[cfg(madsim)]
pub mod pipeline_webhooks;
#[cfg(madsim)]
pub mod pipeline_workload;
#[cfg(madsim)]
pub mod report;
#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod scenarios;
#[cfg(madsim)]
pub mod session_run;
#[cfg(madsim)]
pub mod session_workload;
#[cfg(madsim)]
pub mod settle;
#[cfg(madsim)]
pub mod workload;
