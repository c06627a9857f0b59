//! The node's wall clock: every application read of "now" goes through [`Clock`].
//!
//! The leader stamps proposals with it, and readers use it to judge lease expiry. The simulation
//! gives each node its own offset and drift to model skew; in production both are 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A wall clock in milliseconds since the Unix epoch, with an adjustable offset and drift.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
    /// Parts per million by which this clock runs fast (+) or slow (-) since `anchor_ms`.
    drift_ppm: Arc<AtomicI64>,
    /// The system time from which drift accumulates.
    anchor_ms: Arc<AtomicU64>,
}

fn system_ms() -> u64 {
    // Before 1970 is not a time a certificate system runs at; clamp rather than fail.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

impl Clock {
    /// The system clock, unskewed.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// Milliseconds since the Unix epoch, as this node sees them.
    pub fn now_ms(&self) -> u64 {
        let system_ms = system_ms();
        let drift_ppm = self.drift_ppm.load(Ordering::Relaxed);
        let drift_ms = if drift_ppm == 0 {
            0
        } else {
            let elapsed =
                i128::from(system_ms.saturating_sub(self.anchor_ms.load(Ordering::Relaxed)));
            i64::try_from(elapsed * i128::from(drift_ppm) / 1_000_000).unwrap_or(0)
        };
        system_ms
            .saturating_add_signed(self.offset_ms.load(Ordering::Relaxed))
            .saturating_add_signed(drift_ms)
    }

    /// Shifts this clock by `offset_ms` from the system clock (used by the simulation).
    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::Relaxed);
    }

    /// From now on, shifts this clock by `offset_ms` and lets it run `drift_ppm` parts per
    /// million fast (+) or slow (-) (used by the simulation).
    pub fn set_skew(&self, offset_ms: i64, drift_ppm: i64) {
        self.anchor_ms.store(system_ms(), Ordering::Relaxed);
        self.drift_ppm.store(drift_ppm, Ordering::Relaxed);
        self.offset_ms.store(offset_ms, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;

    #[test]
    fn offset_and_drift_move_the_reading() {
        let clock = Clock::system();
        let plain = Clock::system();
        clock.set_skew(5_000, 0);
        let skewed = clock.now_ms();
        let reference = plain.now_ms();
        assert!(
            skewed >= reference + 4_000 && skewed <= reference + 6_000,
            "a +5 s offset reads {skewed} against {reference}"
        );
        // Drift accumulates from the anchor: a clock anchored an hour ago at +1000 ppm is 3.6 s
        // ahead.
        clock.set_skew(0, 1_000);
        clock
            .anchor_ms
            .fetch_sub(3_600_000, std::sync::atomic::Ordering::Relaxed);
        let drifted = clock.now_ms();
        let reference = plain.now_ms();
        assert!(
            drifted >= reference + 3_000 && drifted <= reference + 4_200,
            "an hour at +1000 ppm reads {drifted} against {reference}"
        );
    }
}
