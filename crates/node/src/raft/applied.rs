//! Waiting for this node to apply something: long-polls and streams wait on openraft's data
//! metrics (sent after every apply), not by polling the state.

use openraft::metrics::RaftDataMetrics;
use tokio::time::Instant;

use crate::ordered_watch as watch;

use crate::raft::replica::Replica;
use crate::raft::types::{LogId, NodeId};

/// Why a wait on the applied state ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// This node applied something since the last look.
    Applied,
    /// The deadline passed.
    Deadline,
    /// The node is stopping (or its Raft has stopped).
    Stopping,
}

/// Wakes a waiter when this node applies an entry, without polling: openraft sends its data
/// metrics after every apply, and the store updates the applied state before that.
pub(crate) struct AppliedWatch {
    metrics: watch::Receiver<RaftDataMetrics<NodeId>>,
    stop: watch::Receiver<bool>,
    /// The applied log id at the last look.
    seen: Option<LogId>,
}

impl AppliedWatch {
    pub(crate) fn new(replica: &Replica, stop: watch::Receiver<bool>) -> AppliedWatch {
        AppliedWatch {
            metrics: replica.data_metrics(),
            stop,
            seen: None,
        }
    }

    /// Notes what is applied now. Call it before looking at the state: anything applied after
    /// the look then wakes the next [`AppliedWatch::wait`].
    pub(crate) fn mark(&mut self) {
        self.seen = self.metrics.borrow_and_update().last_applied;
    }

    /// Waits until something is applied after the last [`AppliedWatch::mark`], the deadline
    /// passes (none: never) or the node stops.
    pub(crate) async fn wait(&mut self, deadline: Option<Instant>) -> Wake {
        let sleep = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        let mut sleep = std::pin::pin!(sleep);
        loop {
            if *self.stop.borrow_and_update() {
                return Wake::Stopping;
            }
            tokio::select! {
                // Polled in order, not at random: the simulation replays a seed exactly.
                biased;
                changed = self.metrics.changed() => {
                    if changed.is_err() {
                        return Wake::Stopping;
                    }
                    // The metrics also change for appends and leader heartbeats; only an apply
                    // can change what a waiter looks for.
                    if self.metrics.borrow_and_update().last_applied != self.seen {
                        return Wake::Applied;
                    }
                }
                stopped = self.stop.changed() => {
                    if stopped.is_err() {
                        return Wake::Stopping;
                    }
                }
                () = &mut sleep => return Wake::Deadline,
            }
        }
    }
}
