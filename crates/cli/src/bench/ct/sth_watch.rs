//! When each serving tree size first became visible to clients: every node is asked for its
//! STH (`certus.v1.Log/GetSth`) every [`POLL_INTERVAL`], and the first time any node serves a
//! size is kept. An entry's merge delay ends at the first such time for a size that covers it,
//! so it includes up to one poll interval of sampling delay.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use certus_node::ordered_watch as watch;
use certus_proto::v1::GetSthRequest;
use certus_proto::v1::log_client::LogClient;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// How often each node is asked.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Wall-clock milliseconds since the Unix epoch: the clock SCT timestamps are stamped with (the
/// nodes run in this process, on this machine's clock).
pub(super) fn system_ms() -> u64 {
    certus_node::Clock::system().now_ms()
}

/// The pollers, one per node, while they run.
#[derive(Debug)]
pub(super) struct SthWatch {
    /// Tree size → first time (ms) any node served it.
    first_seen: Arc<Mutex<BTreeMap<u64, u64>>>,
    stop: watch::Sender<bool>,
    pollers: Vec<JoinHandle<()>>,
}

impl SthWatch {
    /// Starts polling each node behind `channels`.
    pub(super) fn start(channels: Vec<Channel>) -> SthWatch {
        let first_seen = Arc::new(Mutex::new(BTreeMap::new()));
        let (stop, stopped) = watch::channel(false);
        let pollers = channels
            .into_iter()
            .map(|channel| tokio::spawn(poll(channel, Arc::clone(&first_seen), stopped.clone())))
            .collect();
        SthWatch {
            first_seen,
            stop,
            pollers,
        }
    }

    /// The largest tree size served so far.
    pub(super) fn largest(&self) -> Option<u64> {
        self.lock().keys().next_back().copied()
    }

    /// What has been seen so far.
    pub(super) fn coverage(&self) -> Coverage {
        Coverage::new(&self.lock())
    }

    /// Stops the pollers and waits for them.
    pub(super) async fn stop(self) {
        let _ = self.stop.send(true);
        for poller in self.pollers {
            let _ = poller.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.first_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

async fn poll(
    channel: Channel,
    first_seen: Arc<Mutex<BTreeMap<u64, u64>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut log = LogClient::new(channel);
    let mut ticks = tokio::time::interval(POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopped.changed() => return,
        }
        // A node that is behind (or has no STH yet) answers UNAVAILABLE; another node serves.
        if let Ok(reply) = log.get_sth(GetSthRequest {}).await {
            let now_ms = system_ms();
            let mut seen = first_seen.lock().unwrap_or_else(PoisonError::into_inner);
            let first = seen.entry(reply.into_inner().tree_size).or_insert(now_ms);
            *first = (*first).min(now_ms);
        }
    }
}

/// For any leaf index, when a served tree first covered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Coverage {
    /// Served tree sizes, increasing.
    sizes: Vec<u64>,
    /// `covered_ms[i]`: the earliest time any size >= `sizes[i]` was seen.
    covered_ms: Vec<u64>,
}

impl Coverage {
    fn new(first_seen: &BTreeMap<u64, u64>) -> Coverage {
        let sizes: Vec<u64> = first_seen.keys().copied().collect();
        let mut covered_ms: Vec<u64> = first_seen.values().copied().collect();
        // A larger tree also covers every smaller index, so a leaf is covered from the earliest
        // time any tree at least as large was seen (suffix minimum).
        for i in (0..covered_ms.len().saturating_sub(1)).rev() {
            covered_ms[i] = covered_ms[i].min(covered_ms[i + 1]);
        }
        Coverage { sizes, covered_ms }
    }

    /// When leaf `index` was first inside a served tree (a size greater than `index`), if yet.
    pub(super) fn covered_at_ms(&self, index: u64) -> Option<u64> {
        let first = self.sizes.partition_point(|&size| size <= index);
        self.covered_ms.get(first).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_is_covered_by_the_first_tree_that_contains_it() {
        // Size 10 first seen at 100, size 20 at 150, size 30 at 200.
        let seen = BTreeMap::from([(0, 50), (10, 100), (20, 150), (30, 200)]);
        let coverage = Coverage::new(&seen);
        assert_eq!(coverage.covered_at_ms(0), Some(100));
        assert_eq!(coverage.covered_at_ms(9), Some(100));
        assert_eq!(coverage.covered_at_ms(10), Some(150));
        assert_eq!(coverage.covered_at_ms(29), Some(200));
        assert_eq!(coverage.covered_at_ms(30), None, "not served yet");
    }

    #[test]
    fn a_larger_tree_seen_earlier_covers_smaller_indexes_from_then() {
        // One node served 20 (at 120) before another node was first polled serving 10 (at 130).
        let seen = BTreeMap::from([(10, 130), (20, 120)]);
        let coverage = Coverage::new(&seen);
        assert_eq!(coverage.covered_at_ms(5), Some(120));
        assert_eq!(coverage.covered_at_ms(15), Some(120));
        assert_eq!(Coverage::new(&BTreeMap::new()).covered_at_ms(0), None);
    }
}
