//! The client's session with the cluster (`certus.v1.Clients`): every write is a numbered
//! request, applied at most once, and never after the client moved past it.
//!
//! Each write takes a [`Ticket`]: the next sequence number, held while the call is in flight.
//! Every attempt of the call carries the same number, and the lowest number still in flight as
//! `first_outstanding`. When the call returns — answered, refused, or given up after its
//! attempts or deadline — the ticket is dropped, so the client's next request tells the cluster
//! to refuse the abandoned one forever should it still arrive.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// One registered session and its numbering.
#[derive(Debug)]
pub(crate) struct Numbering {
    id: u64,
    /// How far past the lowest number in flight a number may be (the cluster's bound).
    window: u64,
    state: Mutex<Numbers>,
    /// Woken when a ticket is dropped, for callers waiting for room in the window.
    freed: Notify,
}

#[derive(Debug)]
struct Numbers {
    next: u64,
    in_flight: BTreeSet<u64>,
}

impl Numbering {
    /// The numbering of session `id`, whose requests may run `window` past the first
    /// outstanding one.
    pub(crate) fn new(id: u64, window: u64) -> Arc<Numbering> {
        Arc::new(Numbering {
            id,
            window: window.max(1),
            state: Mutex::new(Numbers {
                next: 1,
                in_flight: BTreeSet::new(),
            }),
            freed: Notify::new(),
        })
    }

    /// The session's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    fn numbers(&self) -> MutexGuard<'_, Numbers> {
        // Plain numbers, each change a single step: a panic elsewhere cannot leave them torn.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next number, once it fits in the window above the lowest number in flight.
    pub(crate) async fn ticket(self: &Arc<Numbering>) -> Ticket {
        loop {
            let freed = self.freed.notified();
            {
                let mut numbers = self.numbers();
                let next = numbers.next;
                let lowest = numbers.in_flight.first().copied().unwrap_or(next);
                if next - lowest < self.window {
                    numbers.next += 1;
                    numbers.in_flight.insert(next);
                    return Ticket {
                        numbering: Arc::clone(self),
                        sequence: next,
                    };
                }
            }
            freed.await;
        }
    }
}

/// One write's sequence number, in flight until dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    numbering: Arc<Numbering>,
    sequence: u64,
}

impl Ticket {
    /// What this attempt carries: the session, the number, and the lowest number in flight.
    pub(crate) fn number(&self) -> Number {
        let numbers = self.numbering.numbers();
        let first_outstanding = numbers
            .in_flight
            .first()
            .copied()
            .unwrap_or(self.sequence)
            .min(self.sequence);
        Number(self.numbering.id, self.sequence, first_outstanding)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let removed = self.numbering.numbers().in_flight.remove(&self.sequence);
        debug_assert!(removed, "a ticket is in flight until dropped");
        self.numbering.freed.notify_waiters();
    }
}

/// The numbering an attempt carries: `(client, sequence, first_outstanding)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Number(u64, u64, u64);

impl Number {
    /// `message` as a request carrying this numbering in its metadata.
    pub(crate) fn wrap<M>(&self, message: M) -> tonic::Request<M> {
        let Number(client, sequence, first_outstanding) = *self;
        let mut request = tonic::Request::new(message);
        certus_proto::number_request(&mut request, client, sequence, first_outstanding);
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use certus_proto::{
        CLIENT_FIRST_OUTSTANDING_METADATA, CLIENT_ID_METADATA, CLIENT_SEQUENCE_METADATA,
    };

    fn parts(number: Number) -> (u64, u64, u64) {
        let Number(client, sequence, first_outstanding) = number;
        (client, sequence, first_outstanding)
    }

    #[tokio::test]
    async fn numbers_count_up_and_first_outstanding_is_the_lowest_in_flight() {
        let numbering = Numbering::new(9, 128);
        let first = numbering.ticket().await;
        let second = numbering.ticket().await;
        assert_eq!(parts(first.number()), (9, 1, 1));
        assert_eq!(parts(second.number()), (9, 2, 1));
        drop(first);
        // The abandoned or answered first request is now behind the client.
        assert_eq!(parts(second.number()), (9, 2, 2));
        let third = numbering.ticket().await;
        assert_eq!(parts(third.number()), (9, 3, 2));
        drop(second);
        drop(third);
        let fourth = numbering.ticket().await;
        assert_eq!(parts(fourth.number()), (9, 4, 4));
    }

    #[tokio::test]
    async fn a_number_waits_for_room_in_the_window() {
        let numbering = Numbering::new(1, 2);
        let first = numbering.ticket().await;
        let _second = numbering.ticket().await;
        // A third would be 2 past the first, outside a window of 2.
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(20), numbering.ticket());
        assert!(waiting.await.is_err(), "the window is full");
        drop(first);
        let third = numbering.ticket().await;
        assert_eq!(parts(third.number()), (1, 3, 2));
    }

    #[test]
    fn a_number_travels_as_three_metadata_entries() {
        let request = Number(7, 12, 10).wrap(());
        let value = |key| {
            request
                .metadata()
                .get(key)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(value(CLIENT_ID_METADATA), "7");
        assert_eq!(value(CLIENT_SEQUENCE_METADATA), "12");
        assert_eq!(value(CLIENT_FIRST_OUTSTANDING_METADATA), "10");
    }
}
