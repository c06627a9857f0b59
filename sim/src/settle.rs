//! The end of a run: every running node catches up with what the cluster committed, and each
//! one's final state is read, so that the checkers can compare the nodes with what the clients
//! were told.

use std::collections::BTreeMap;
use std::time::Duration;

use certus_core::State;

use crate::cluster::SimCluster;
use crate::limits::SETTLE_MAX;

/// How often the nodes are looked at meanwhile.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// What the running nodes held once they had caught up.
#[derive(Debug)]
pub struct Settled<T> {
    /// Per node that had applied everything the most advanced node had committed, what was read
    /// from its state: from the look at which the most nodes had caught up.
    pub finals: BTreeMap<u64, T>,
    /// The latest wall clock of any running node at the last look.
    pub latest_clock_ms: u64,
}

/// Waits (`SETTLE_MAX`, 10 s, at most) until every running node has applied what the most
/// advanced one committed, then reads each caught-up node's state with `read`.
///
/// With a node cut off for good the wait runs to its end, and the last look alone may land just
/// after a tick committed, so the look at which the most nodes had caught up is kept.
pub async fn settle<T>(cluster: &SimCluster, read: impl Fn(&State) -> T) -> Settled<T> {
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    let mut best = BTreeMap::new();
    let mut latest_clock_ms = 0;
    while tokio::time::Instant::now() < deadline {
        let replicas = cluster.replicas();
        let target = replicas
            .iter()
            .map(|(_, replica)| replica.commit_index())
            .max()
            .unwrap_or(0);
        let mut finals = BTreeMap::new();
        latest_clock_ms = 0;
        for (id, replica) in &replicas {
            latest_clock_ms = latest_clock_ms.max(replica.clock.now_ms());
            let applied = replica
                .raft
                .metrics()
                .borrow()
                .last_applied
                .map_or(0, |log_id| log_id.index);
            if applied >= target {
                finals.insert(*id, replica.reader.read(|applied| read(&applied.state)));
            }
        }
        let complete = finals.len() == replicas.len() && !replicas.is_empty();
        if finals.len() > best.len() {
            best = finals;
        }
        if complete {
            break;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    Settled {
        finals: best,
        latest_clock_ms,
    }
}
