//! The transaction pipelines scenario: producers, workers and a switcher ([`workload`]), the
//! webhook receivers and each node's webhook processor ([`webhooks`]), the configuration and the
//! observer of finished transactions ([`run`]), and the pipeline and webhook checkers
//! ([`checkers`], [`webhook_checkers`]).

pub mod checkers;
pub mod webhook_checkers;

#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod webhooks;
#[cfg(madsim)]
pub mod workload;
