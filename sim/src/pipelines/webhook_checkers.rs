//! The **webhook** checkers of the pipelines scenario, over what the simulated receivers read
//! (every request: its event id, attempt and transaction headers, its body, and whether the
//! receiver accepted it), the administrator notices the cluster listed at the end (after the
//! faults healed and the pending deliveries drained), and the final state of every acknowledged
//! transaction that was enqueued with a webhook.
//!
//! `*_ms` times are simulated milliseconds since the run began; `machine` times are the state
//! machine's clock.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::judge::Verdict;

/// One request a receiver read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WebhookReceived {
    /// The receiver.
    pub receiver: u32,
    /// The event id header.
    pub event: u64,
    /// The attempt header.
    pub attempt: u32,
    /// The transaction header.
    pub transaction: u64,
    /// The body's `event`.
    pub body_event: Option<u64>,
    /// The body's `transaction`.
    pub body_transaction: Option<u64>,
    /// The body's `kind` (`completed`, `progress`).
    pub kind: String,
    /// The body's `status`, if any.
    pub status: Option<String>,
    /// When it arrived.
    pub at_ms: u64,
    /// Whether the receiver answered 200 (the answer may still be lost on the way back).
    pub accepted: bool,
}

/// What an administrator notice says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum NoticeKind {
    /// A delivery was given up after its last attempt.
    RetriesExhausted {
        /// The event.
        event: u64,
        /// Its transaction.
        transaction: u64,
        /// Where it went.
        url: String,
    },
    /// A URL failed too often and is paused.
    UrlPaused {
        /// The URL.
        url: String,
    },
    /// A delivery could not be scheduled (too many pending).
    WebhookDropped {
        /// The transaction.
        transaction: u64,
        /// Where it would have gone.
        url: String,
    },
}

/// An administrator notice as `ListNotices` answered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoticeRecord {
    /// The notice's id.
    pub id: u64,
    /// When it was raised (machine time).
    pub at_machine_ms: u64,
    /// What it says.
    pub kind: NoticeKind,
}

/// A transaction enqueued with a webhook, as the end of the run found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HookedTx {
    /// The webhook URL it was enqueued with.
    pub url: String,
    /// Its final status, if it finished.
    pub final_status: Option<String>,
    /// When it finished (machine time), if it did.
    pub completed_at_machine_ms: Option<u64>,
    /// The event id of a delivery still pending at the end, if any.
    pub pending_event: Option<u64>,
}

/// **Every finished transaction's webhook is delivered or reported**: for every acknowledged
/// transaction enqueued with a webhook that finished, a receiver accepted a `completed` event
/// for it carrying its final status; or the administrator was told — a `retries exhausted`
/// notice for it raised at or after its completion, or a `webhook dropped` notice for it; or its
/// delivery is still pending at the end behind a `URL paused` notice for its URL.
pub fn webhooks_delivered(
    hooked: &BTreeMap<u64, HookedTx>,
    received: &[WebhookReceived],
    notices: &[NoticeRecord],
) -> Verdict {
    const NAME: &str = "webhooks-delivered";
    let mut problems = Vec::new();
    let (mut delivered, mut exhausted, mut dropped, mut paused, mut unfinished) = (0, 0, 0, 0, 0);
    for (id, tx) in hooked {
        let Some(status) = &tx.final_status else {
            unfinished += 1;
            continue;
        };
        let accepted: Vec<&WebhookReceived> = received
            .iter()
            .filter(|got| got.transaction == *id && got.kind == "completed" && got.accepted)
            .collect();
        if !accepted.is_empty() {
            delivered += 1;
            for got in accepted
                .iter()
                .filter(|got| got.status.as_ref() != Some(status))
            {
                problems.push(format!(
                    "transaction {id} finished {status}, but receiver {} accepted event {} \
                     (attempt {}) saying {:?}",
                    got.receiver, got.event, got.attempt, got.status
                ));
            }
            continue;
        }
        let completed_at = tx.completed_at_machine_ms.unwrap_or(0);
        let reported = notices.iter().find_map(|notice| match &notice.kind {
            NoticeKind::RetriesExhausted { transaction, .. }
                if transaction == id && notice.at_machine_ms >= completed_at =>
            {
                Some("exhausted")
            }
            NoticeKind::WebhookDropped { transaction, .. } if transaction == id => Some("dropped"),
            NoticeKind::UrlPaused { url } if *url == tx.url && tx.pending_event.is_some() => {
                Some("paused")
            }
            _ => None,
        });
        match reported {
            Some("exhausted") => exhausted += 1,
            Some("dropped") => dropped += 1,
            Some(_) => paused += 1,
            None => {
                let tried = received
                    .iter()
                    .filter(|got| got.transaction == *id && got.kind == "completed")
                    .count();
                problems.push(format!(
                    "transaction {id} finished {status} (machine {completed_at} ms) with webhook \
                     {}: no receiver accepted its completion ({tried} attempts read, {}) and no \
                     notice reports it",
                    tx.url,
                    tx.pending_event.map_or_else(
                        || "none pending".to_owned(),
                        |event| format!("event {event} still pending")
                    )
                ));
            }
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} transactions with a webhook: {delivered} delivered, {exhausted} reported \
             exhausted, {dropped} reported dropped, {paused} pending behind a reported pause, \
             {unfinished} unfinished; {} requests read, {} notices",
            hooked.len(),
            received.len(),
            notices.len()
        ),
    )
}

/// **One event, one id**: every request's event id and transaction headers are the body's;
/// every request with one event id is about the same transaction and kind, and for a completion
/// the same status (all attempts of an event carry its id, and no id is reused for another
/// event); no transaction has two `completed` events; attempt numbers start at 1.
pub fn webhook_event_ids(received: &[WebhookReceived]) -> Verdict {
    const NAME: &str = "webhook-event-ids";
    let mut problems = Vec::new();
    let mut events: BTreeMap<u64, &WebhookReceived> = BTreeMap::new();
    let mut completed: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut retries = 0;
    for got in received {
        if got.body_event != Some(got.event) || got.body_transaction != Some(got.transaction) {
            problems.push(format!(
                "receiver {} read event {} (attempt {}) of transaction {} with a body about \
                 event {:?} of transaction {:?}",
                got.receiver,
                got.event,
                got.attempt,
                got.transaction,
                got.body_event,
                got.body_transaction
            ));
        }
        if got.attempt == 0 {
            problems.push(format!("event {} arrived as attempt 0", got.event));
        }
        if got.attempt > 1 {
            retries += 1;
        }
        if got.kind == "completed" {
            completed
                .entry(got.transaction)
                .or_default()
                .insert(got.event);
        }
        let first = *events.entry(got.event).or_insert(got);
        // A progress event's body carries the transaction's status when it is sent, which moves
        // on between attempts; a completion's carries the status it finished with.
        let status = |request: &WebhookReceived| {
            (request.kind == "completed").then(|| request.status.clone())
        };
        if (first.transaction, &first.kind, status(first))
            != (got.transaction, &got.kind, status(got))
        {
            problems.push(format!(
                "event id {} was used for transaction {}'s {} ({:?}, attempt {}) and for \
                 transaction {}'s {} ({:?}, attempt {})",
                got.event,
                first.transaction,
                first.kind,
                first.status,
                first.attempt,
                got.transaction,
                got.kind,
                got.status,
                got.attempt
            ));
        }
    }
    for (transaction, ids) in &completed {
        if ids.len() > 1 {
            problems.push(format!(
                "transaction {transaction} had its completion sent under event ids {ids:?}"
            ));
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} requests read: {} events, {retries} retries, {} completions",
            received.len(),
            events.len(),
            completed.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::{assert_fails, assert_passes};

    const URL: &str = "http://10.0.7.1:8080/hooks/0";

    fn got(
        event: u64,
        attempt: u32,
        transaction: u64,
        kind: &str,
        accepted: bool,
    ) -> WebhookReceived {
        WebhookReceived {
            receiver: 0,
            event,
            attempt,
            transaction,
            body_event: Some(event),
            body_transaction: Some(transaction),
            kind: kind.to_owned(),
            status: (kind == "completed").then(|| "success".to_owned()),
            at_ms: 1_000 * u64::from(attempt),
            accepted,
        }
    }

    fn hooked(status: Option<&str>, pending_event: Option<u64>) -> HookedTx {
        HookedTx {
            url: URL.to_owned(),
            final_status: status.map(str::to_owned),
            completed_at_machine_ms: status.map(|_| 50_000),
            pending_event,
        }
    }

    fn notice(id: u64, at_machine_ms: u64, kind: NoticeKind) -> NoticeRecord {
        NoticeRecord {
            id,
            at_machine_ms,
            kind,
        }
    }

    fn exhausted(transaction: u64) -> NoticeKind {
        NoticeKind::RetriesExhausted {
            event: 90,
            transaction,
            url: URL.to_owned(),
        }
    }

    #[test]
    fn a_delivery_after_failed_attempts_or_a_notice_passes() {
        let hooked = BTreeMap::from([
            (1, hooked(Some("success"), None)),
            (2, hooked(Some("success"), None)),
            (3, hooked(Some("success"), Some(77))),
            (4, hooked(None, None)),
        ]);
        let received = [
            got(10, 1, 1, "completed", false),
            got(10, 2, 1, "completed", true),
        ];
        let notices = [
            notice(1, 50_100, exhausted(2)),
            notice(
                2,
                50_200,
                NoticeKind::UrlPaused {
                    url: URL.to_owned(),
                },
            ),
        ];
        let verdict = webhooks_delivered(&hooked, &received, &notices);
        assert_passes(&verdict, "1 delivered, 1 reported exhausted");
        assert_passes(&verdict, "1 pending behind a reported pause, 1 unfinished");
    }

    #[test]
    fn a_failed_delivery_without_a_notice_fails() {
        let hooked = BTreeMap::from([(1, hooked(Some("success"), None))]);
        let received = [got(10, 1, 1, "completed", false)];
        let verdict = webhooks_delivered(&hooked, &received, &[]);
        assert_fails(&verdict, "transaction 1 finished success");
        assert!(
            verdict.detail.contains("1 attempts read"),
            "{}",
            verdict.detail
        );
        // A progress event accepted does not deliver the completion.
        let received = [got(9, 1, 1, "progress", true)];
        assert_fails(
            &webhooks_delivered(&hooked, &received, &[]),
            "transaction 1",
        );
    }

    #[test]
    fn a_notice_older_than_the_completion_or_a_pause_with_nothing_pending_does_not_count() {
        let hooked = BTreeMap::from([(1, hooked(Some("success"), None))]);
        let notices = [
            notice(1, 40_000, exhausted(1)),
            notice(
                2,
                50_200,
                NoticeKind::UrlPaused {
                    url: URL.to_owned(),
                },
            ),
        ];
        assert_fails(&webhooks_delivered(&hooked, &[], &notices), "transaction 1");
    }

    #[test]
    fn a_delivered_completion_with_another_status_fails() {
        let hooked = BTreeMap::from([(1, hooked(Some("aborted"), None))]);
        let received = [got(10, 1, 1, "completed", true)];
        assert_fails(
            &webhooks_delivered(&hooked, &received, &[]),
            "transaction 1 finished aborted",
        );
    }

    #[test]
    fn stable_ids_pass() {
        let received = [
            got(9, 1, 1, "progress", true),
            got(10, 1, 1, "completed", false),
            got(10, 2, 1, "completed", true),
            got(10, 2, 1, "completed", true),
            got(11, 1, 2, "completed", true),
        ];
        assert_passes(
            &webhook_event_ids(&received),
            "5 requests read: 3 events, 2 retries",
        );
    }

    #[test]
    fn an_id_changed_on_a_retry_fails() {
        // The header changed, the body kept the first id.
        let mut retry = got(11, 2, 1, "completed", true);
        retry.body_event = Some(10);
        let received = [got(10, 1, 1, "completed", false), retry];
        let verdict = webhook_event_ids(&received);
        assert_fails(&verdict, "read event 11 (attempt 2) of transaction 1");
        assert!(
            verdict.detail.contains("under event ids {10, 11}"),
            "{}",
            verdict.detail
        );
    }

    #[test]
    fn an_id_used_for_two_events_fails() {
        let received = [
            got(10, 1, 1, "completed", true),
            got(10, 1, 2, "completed", true),
        ];
        assert_fails(
            &webhook_event_ids(&received),
            "event id 10 was used for transaction 1's completed",
        );
        let received = [
            got(10, 1, 1, "progress", true),
            got(10, 2, 1, "completed", true),
        ];
        assert_fails(&webhook_event_ids(&received), "event id 10");
    }
}
