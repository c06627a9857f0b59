//! The node's wall clock: every application read of "now" goes through [`Clock`].
//!
//! The leader stamps proposals with it, and readers use it to judge lease expiry. The simulation
//! gives each node its own offset (and, later, drift) to model skew; in production the offset is 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A wall clock in milliseconds since the Unix epoch, with an adjustable offset.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    /// The system clock, unskewed.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// Milliseconds since the Unix epoch, as this node sees them.
    pub fn now_ms(&self) -> u64 {
        // Before 1970 is not a time a certificate system runs at; clamp rather than fail.
        let system_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| {
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
            });
        system_ms.saturating_add_signed(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Shifts this clock by `offset_ms` from the system clock (used by the simulation).
    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::Relaxed);
    }
}
