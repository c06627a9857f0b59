//! The key layout on the [`crate::Disk`]. Log keys (the layout before the segmented log, moved
//! out at open) sort by index (big-endian).

pub(crate) const LOG_PREFIX: &[u8] = b"log/";
pub(crate) const VOTE: &[u8] = b"meta/vote";
pub(crate) const COMMITTED: &[u8] = b"meta/committed";
pub(crate) const LAST_PURGED: &[u8] = b"meta/last-purged";
pub(crate) const SNAPSHOT: &[u8] = b"sm/snapshot";

/// The first key after every log key.
pub(crate) fn log_end() -> Vec<u8> {
    let mut key = LOG_PREFIX.to_vec();
    key.extend_from_slice(&[0xff; 9]);
    key
}
