//! The node's stop signal: one `watch` channel, set once when the node shuts down, that every
//! server and background task holds.

use crate::ordered_watch as watch;

/// Resolves once the node is stopping (at once if it already is), or its sender is gone.
pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}
