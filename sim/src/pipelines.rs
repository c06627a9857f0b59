//! The transaction pipelines scenario: the workload's shape and a switcher ([`workload`]),
//! producers ([`producers`]), workers ([`workers`], and on the `Work` stream [`work_stream`]), the
//! webhook receivers and each node's webhook processor ([`webhooks`]), the configuration and the
//! observer of finished transactions ([`run`]), and the pipeline and webhook checkers
//! ([`checkers`], [`webhook_checkers`]).

pub mod checkers;
pub mod webhook_checkers;

#[cfg(madsim)]
mod producers;
#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod webhooks;
#[cfg(madsim)]
mod work_stream;
#[cfg(madsim)]
mod workers;
#[cfg(madsim)]
pub mod workload;
