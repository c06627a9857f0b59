//! The node's background roles: work it does without being asked, through the same
//! [`Replica`](crate::raft::replica::Replica) as the services: the leader's tick, the session
//! daemons and the pipelines' webhook processor.

pub mod pipeline_webhooks;
pub mod session_daemons;
pub mod ticks;
