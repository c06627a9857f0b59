//! A watch channel (one value, many readers told when it changes) whose waiters wake in the
//! order they began waiting.
//!
//! `tokio::sync::watch` spreads its waiters over eight queues picked with tokio's thread-local
//! random number generator, which is seeded from a process-wide counter. Two waiters on one
//! channel therefore wake in an order that differs between two runs of the same seed in one
//! process, and the simulation's determinism check (madsim runs each test twice) fails. Every
//! channel that more than one task waits on in node or simulation code is this one; openraft's
//! own metrics channels reach them through one relay each ([`relay`]).
//!
//! The interface is the subset of `tokio::sync::watch` the code uses, with the same meaning.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use tokio::sync::Notify;

/// The sending half: there is one, and dropping it closes the channel.
#[derive(Debug)]
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// A receiving half: it remembers the last version it has seen.
#[derive(Debug)]
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    seen: u64,
}

#[derive(Debug)]
struct Shared<T> {
    value: RwLock<T>,
    /// Raised after every send, while the value's write lock is held.
    version: AtomicU64,
    closed: AtomicBool,
    receivers: AtomicUsize,
    /// Wakes its waiters first come, first woken.
    changed: Notify,
}

/// The value, borrowed for reading; hold it briefly (a send waits for it).
#[derive(Debug)]
pub struct Ref<'a, T>(RwLockReadGuard<'a, T>);

impl<T> Deref for Ref<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The sender is gone and every value it sent has been seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvError;

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the watch channel's sender is gone")
    }
}

impl std::error::Error for RecvError {}

/// No receiver was left to see the value (which is stored regardless).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendError<T>(pub T);

/// A channel holding `initial`; receivers start having seen it.
pub fn channel<T>(initial: T) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        value: RwLock::new(initial),
        version: AtomicU64::new(0),
        closed: AtomicBool::new(false),
        receivers: AtomicUsize::new(1),
        changed: Notify::new(),
    });
    (
        Sender {
            shared: Arc::clone(&shared),
        },
        Receiver { shared, seen: 0 },
    )
}

impl<T> Shared<T> {
    fn read(&self) -> Ref<'_, T> {
        // A panic while the lock was held left a whole value behind (sends replace it whole).
        Ref(self
            .value
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn replace(&self, value: T) -> T {
        let mut guard = self
            .value
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let old = std::mem::replace(&mut *guard, value);
        self.version.fetch_add(1, Ordering::SeqCst);
        drop(guard);
        self.changed.notify_waiters();
        old
    }
}

impl<T> Sender<T> {
    /// Stores `value` and wakes every waiting receiver; fails (the value stored all the same)
    /// when no receiver is left.
    pub fn send(&self, value: T) -> Result<(), SendError<()>> {
        // Counted before the wake: a woken receiver may be gone by the time the send returns.
        let listening = self.shared.receivers.load(Ordering::SeqCst) > 0;
        self.shared.replace(value);
        if listening {
            Ok(())
        } else {
            Err(SendError(()))
        }
    }

    /// Stores `value`, wakes every waiting receiver and returns the value it replaced.
    pub fn send_replace(&self, value: T) -> T {
        self.shared.replace(value)
    }

    /// The value now.
    pub fn borrow(&self) -> Ref<'_, T> {
        self.shared.read()
    }

    /// A new receiver that has seen the value now.
    pub fn subscribe(&self) -> Receiver<T> {
        self.shared.receivers.fetch_add(1, Ordering::SeqCst);
        Receiver {
            shared: Arc::clone(&self.shared),
            seen: self.shared.version.load(Ordering::SeqCst),
        }
    }

    /// How many receivers are left.
    pub fn receiver_count(&self) -> usize {
        self.shared.receivers.load(Ordering::SeqCst)
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.changed.notify_waiters();
    }
}

impl<T> Receiver<T> {
    /// The value now, without marking it seen.
    pub fn borrow(&self) -> Ref<'_, T> {
        self.shared.read()
    }

    /// The value now, marked seen.
    pub fn borrow_and_update(&mut self) -> Ref<'_, T> {
        // Read the version under the read lock: a send raises it only while holding the write
        // lock, so the version and the value belong together.
        let value = self.shared.read();
        self.seen = self.shared.version.load(Ordering::SeqCst);
        value
    }

    /// Whether a value was sent since this receiver last marked one seen.
    pub fn has_changed(&self) -> Result<bool, RecvError> {
        let changed = self.shared.version.load(Ordering::SeqCst) != self.seen;
        if !changed && self.shared.closed.load(Ordering::SeqCst) {
            return Err(RecvError);
        }
        Ok(changed)
    }

    /// Waits for a value this receiver has not seen and marks it seen; fails once the sender
    /// is gone and nothing unseen is left.
    pub async fn changed(&mut self) -> Result<(), RecvError> {
        loop {
            let notified = self.shared.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before looking, so a send between the look and the wait still wakes it.
            notified.as_mut().enable();
            let version = self.shared.version.load(Ordering::SeqCst);
            if version != self.seen {
                self.seen = version;
                return Ok(());
            }
            if self.shared.closed.load(Ordering::SeqCst) {
                return Err(RecvError);
            }
            notified.await;
        }
    }

    /// Waits until the value satisfies `condition` (at once if it does now), marking it seen.
    pub async fn wait_for(
        &mut self,
        mut condition: impl FnMut(&T) -> bool,
    ) -> Result<Ref<'_, T>, RecvError> {
        loop {
            if condition(&self.borrow_and_update()) {
                break;
            }
            self.changed().await?;
        }
        Ok(self.borrow())
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.shared.receivers.fetch_add(1, Ordering::SeqCst);
        Receiver {
            shared: Arc::clone(&self.shared),
            seen: self.seen,
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.receivers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Copies every value of a `tokio::sync::watch` channel (openraft's metrics) into an ordered
/// one, as that channel's only waiter; ends when either side is gone.
#[allow(clippy::disallowed_methods)] // The one sanctioned wait on a tokio watch channel.
pub async fn relay<T: Clone>(mut from: tokio::sync::watch::Receiver<T>, to: Sender<T>) {
    loop {
        let value = from.borrow_and_update().clone();
        to.send_replace(value);
        if to.receiver_count() == 0 || from.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_sees_a_send_and_the_end_of_the_channel() {
        let (sender, mut receiver) = channel(0);
        let waiting = tokio::spawn(async move {
            receiver.changed().await.expect("a send");
            let first = *receiver.borrow_and_update();
            let closed = receiver.changed().await;
            (first, closed)
        });
        tokio::task::yield_now().await;
        sender.send(7).expect("a receiver is left");
        tokio::task::yield_now().await;
        drop(sender);
        let (first, closed) = waiting.await.expect("the waiter");
        assert_eq!(first, 7);
        assert_eq!(closed, Err(RecvError));
    }

    #[tokio::test]
    async fn an_unseen_value_is_reported_even_after_the_sender_is_gone() {
        let (sender, mut receiver) = channel("a");
        sender.send("b").expect("a receiver is left");
        drop(sender);
        assert_eq!(receiver.has_changed(), Ok(true));
        assert_eq!(receiver.changed().await, Ok(()));
        assert_eq!(*receiver.borrow(), "b");
        assert_eq!(receiver.changed().await, Err(RecvError));
    }

    #[tokio::test]
    async fn wait_for_returns_at_once_when_the_value_already_holds() {
        let (sender, mut receiver) = channel(3);
        assert_eq!(
            *receiver.wait_for(|value| *value == 3).await.expect("holds"),
            3
        );
        let waiting = tokio::spawn(async move {
            *receiver
                .wait_for(|value| *value >= 5)
                .await
                .expect("reaches 5")
        });
        for value in 4..=5 {
            tokio::task::yield_now().await;
            sender.send(value).expect("a receiver is left");
        }
        assert_eq!(waiting.await.expect("the waiter"), 5);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn waiters_wake_in_the_order_they_began_waiting() {
        let (sender, receiver) = channel(());
        let woken = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for waiter in 0..16 {
            let mut receiver = receiver.clone();
            let woken = Arc::clone(&woken);
            tasks.push(tokio::spawn(async move {
                receiver.changed().await.expect("a send");
                woken.lock().expect("woken").push(waiter);
            }));
            // Each waiter registers before the next is spawned.
            tokio::task::yield_now().await;
        }
        sender.send(()).expect("receivers are left");
        for task in tasks {
            task.await.expect("a waiter");
        }
        assert_eq!(*woken.lock().expect("woken"), (0..16).collect::<Vec<_>>());
    }

    #[test]
    fn send_reports_when_no_receiver_is_left_and_stores_the_value() {
        let (sender, receiver) = channel(1);
        drop(receiver);
        assert_eq!(sender.send(2), Err(SendError(())));
        assert_eq!(*sender.borrow(), 2);
        let late = sender.subscribe();
        assert_eq!(late.has_changed(), Ok(false));
        assert_eq!(sender.receiver_count(), 1);
    }
}
