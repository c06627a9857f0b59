//! The lease workload, which every scenario runs: contending clients with a protected resource
//! ([`workload`]), a client that sends its requests again on purpose ([`duplicates`]), what the
//! clients saw ([`history`]), and what judges it ([`checkers`], with the sequential lease
//! [`model`] for the linearizability search).

pub mod checkers;
pub mod history;
pub mod model;

#[cfg(madsim)]
pub mod duplicates;
#[cfg(madsim)]
pub mod workload;
