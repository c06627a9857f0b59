//! The CA issuance sessions scenario: clients that serve HTTP-01 challenges, an external worker,
//! the upstream CA ([`workload`]), the daemons' parts and the observer of the replicated
//! sessions ([`run`]), and the queue-recovery checkers ([`checkers`]).

pub mod checkers;
#[cfg(madsim)]
mod external_worker;

#[cfg(madsim)]
pub mod run;
#[cfg(madsim)]
pub mod workload;
