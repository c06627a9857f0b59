//! Webhook bookkeeping and administrator notices (the seed's `webhooksZ`, `webhookCounter:` and
//! its two TODOs).
//!
//! A transaction started with a webhook URL gets one pending delivery when it finishes (and, if
//! it asked for progress reports, when its worker reports progress; a newer event of the same
//! transaction replaces an undelivered older one, so each transaction has at most one). Every
//! delivery has a [`WebhookEventId`] fixed when it is scheduled and kept across all its attempts,
//! so a receiver that sees an id twice knows it is a retry.
//!
//! The node's webhook processor *takes* due deliveries: as in the seed, taking one re-schedules it
//! at once with an exponential backoff (`base × 2^(attempt−1)`, capped), so a processor that
//! crashes mid-delivery only delays it. The processor then reports each attempt's result: a
//! delivery ends it; a failure counts against the URL, and a delivery that failed its last allowed
//! attempt (or was taken that often without any report) is given up and the administrator is told.
//! A report for an earlier attempt than the latest taken is stale and changes nothing.
//!
//! A URL that fails `url_failure_limit` times within `url_failure_window_ms` is paused for
//! `url_pause_ms` (and the administrator is told): a take defers a paused URL's due deliveries to
//! the end of the pause instead of handing them out. A successful delivery forgets the URL's
//! failures. The failure records are bounded and forgotten by the tick when their window and
//! pause are over.
//!
//! Notices (retries exhausted, URL paused, a delivery dropped because the pending table was full)
//! wait in a bounded queue until an administrator acknowledges them; past the bound the oldest is
//! dropped and counted, so a flood of notices cannot grow the state.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{PipelineConfig, PipelineError, TransactionId, TxStatus, WebhookUrl};
use crate::claims::issue;
use crate::limits::{
    LIST_PAGE_MAX, PIPELINE_NOTICES_MAX, PIPELINE_URL_FAILURE_LIMIT_MAX,
    PIPELINE_URL_FAILURE_WINDOW_MS_MAX, PIPELINE_URL_PAUSE_MS_MAX, PIPELINE_URLS_MAX,
    PIPELINE_WEBHOOK_ATTEMPTS_MAX, PIPELINE_WEBHOOK_BACKOFF_MS_MAX, PIPELINE_WEBHOOK_SCAN_MAX,
    PIPELINE_WEBHOOKS_MAX,
};
use crate::sessions::Reason;

/// A webhook event's id: fixed when the delivery is scheduled, the same on every attempt.
///
/// It is the log index of the command that scheduled it (the next number when one log entry
/// schedules several), so ids are unique and increase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WebhookEventId(pub u64);

impl fmt::Display for WebhookEventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a webhook event tells its receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookKind {
    /// The worker reported progress (the transaction asked for progress reports).
    Progress,
    /// The transaction finished.
    Completed {
        /// Its terminal status.
        status: TxStatus,
    },
}

/// A pending webhook delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// The event's id, kept across attempts (sent as a header so receivers can dedupe).
    pub event: WebhookEventId,
    /// The transaction it is about.
    pub transaction: TransactionId,
    /// Where it goes.
    pub url: WebhookUrl,
    /// What it announces.
    pub kind: WebhookKind,
    /// Machine time it was scheduled.
    pub created_at_ms: u64,
    /// Machine time from which it may be taken (again).
    pub next_attempt_at_ms: u64,
    /// How often it was taken.
    pub attempts: u32,
    /// The error of the latest failed attempt.
    pub last_error: Option<Reason>,
}

/// The result of one delivery attempt, as the webhook processor reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookOutcome {
    /// The receiver accepted it (a 2xx answer).
    Delivered,
    /// The attempt failed.
    Failed {
        /// What went wrong (a status code, a timeout).
        reason: Reason,
    },
}

/// What recording an attempt's result did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookSettlement {
    /// The delivery is done and forgotten.
    Delivered,
    /// It stays pending and may be taken again from this time.
    RetryAt {
        /// Machine time of the next attempt.
        next_attempt_at_ms: u64,
    },
    /// That was its last allowed attempt: it was given up and the administrator told.
    Exhausted,
    /// The report is for an earlier attempt than the latest taken; nothing changed.
    Stale,
    /// No such delivery is pending (delivered, given up, cancelled by a long-poll or replaced by
    /// a newer event of its transaction); nothing changed.
    Unknown,
}

/// The failure record of one webhook URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlHealth {
    /// Failures counted in the current window (reset when the URL is paused).
    pub failures: u32,
    /// Machine time the current counting window began.
    pub window_started_at_ms: u64,
    /// Machine time until which deliveries to the URL are held back, if it was paused.
    pub paused_until_ms: Option<u64>,
    /// Machine time from which the tick forgets this record (the window and the pause are over).
    pub forget_at_ms: u64,
}

/// An administrator notice's number: one more than the previous notice's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NoticeId(pub u64);

impl fmt::Display for NoticeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Something an administrator should know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoticeKind {
    /// A delivery was given up after its last allowed attempt.
    RetriesExhausted {
        /// The event.
        event: WebhookEventId,
        /// Its transaction.
        transaction: TransactionId,
        /// Where it was going.
        url: WebhookUrl,
        /// How often it was attempted.
        attempts: u32,
        /// The error of its latest failed attempt, if one was reported.
        last_error: Option<Reason>,
    },
    /// A URL failed too often and is paused.
    UrlPaused {
        /// The URL.
        url: WebhookUrl,
        /// How often it failed within the window.
        failures: u32,
        /// Machine time the pause ends.
        until_ms: u64,
    },
    /// A delivery could not be scheduled because too many are pending.
    WebhookDropped {
        /// Its transaction.
        transaction: TransactionId,
        /// Where it would have gone.
        url: WebhookUrl,
    },
}

/// A numbered notice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Its number.
    pub id: NoticeId,
    /// Machine time it was raised.
    pub at_ms: u64,
    /// What happened.
    pub kind: NoticeKind,
}

/// Pending deliveries, URL failure records and notices, with derived indexes kept by
/// `Webhooks::insert` and `Webhooks::remove` (deliveries) and `Webhooks::set_url` (URLs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Webhooks {
    last_event_id: u64,
    last_notice_id: u64,
    notices_dropped: u64,
    pending: BTreeMap<WebhookEventId, Webhook>,
    urls: BTreeMap<WebhookUrl, UrlHealth>,
    notices: BTreeMap<NoticeId, Notice>,
    /// Derived: `(next_attempt_at_ms, event)` of every pending delivery.
    due: BTreeSet<(u64, WebhookEventId)>,
    /// Derived: the pending delivery of each transaction (at most one).
    by_transaction: BTreeMap<TransactionId, WebhookEventId>,
    /// Derived: `(forget_at_ms, url)` of every URL record.
    url_forget: BTreeSet<(u64, WebhookUrl)>,
}

/// What a snapshot stores of [`Webhooks`], written from references.
#[derive(Serialize)]
pub(crate) struct WebhookRecordsRef<'a> {
    last_event_id: u64,
    last_notice_id: u64,
    notices_dropped: u64,
    pending: Vec<&'a Webhook>,
    urls: &'a BTreeMap<WebhookUrl, UrlHealth>,
    notices: Vec<&'a Notice>,
}

/// What a snapshot stores of [`Webhooks`], as read back (a map encodes as its pairs).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct WebhookRecords {
    last_event_id: u64,
    last_notice_id: u64,
    notices_dropped: u64,
    pending: Vec<Webhook>,
    urls: Vec<(WebhookUrl, UrlHealth)>,
    notices: Vec<Notice>,
}

/// The delay after attempt `attempt` (1-based): `base × 2^(attempt−1)`, at most the cap.
pub(super) fn backoff_ms(config: &PipelineConfig, attempt: u32) -> u64 {
    let factor = 2u64
        .checked_pow(attempt.saturating_sub(1))
        .unwrap_or(u64::MAX);
    config
        .webhook_backoff_base_ms
        .saturating_mul(factor)
        .min(config.webhook_backoff_cap_ms)
}

impl Webhooks {
    /// Schedules a delivery of `kind` for `transaction`, due now, replacing the transaction's
    /// undelivered earlier event. When the pending table is full the event is dropped and the
    /// administrator told; returns the new event's id otherwise.
    pub(crate) fn schedule(
        &mut self,
        transaction: TransactionId,
        url: &WebhookUrl,
        kind: WebhookKind,
        now_ms: u64,
        log_index: u64,
    ) -> Option<WebhookEventId> {
        self.cancel_for(transaction);
        if self.pending.len() >= PIPELINE_WEBHOOKS_MAX {
            self.notify(
                NoticeKind::WebhookDropped {
                    transaction,
                    url: url.clone(),
                },
                now_ms,
            );
            return None;
        }
        self.last_event_id = issue(self.last_event_id, log_index);
        let event = WebhookEventId(self.last_event_id);
        self.insert(Webhook {
            event,
            transaction,
            url: url.clone(),
            kind,
            created_at_ms: now_ms,
            next_attempt_at_ms: now_ms,
            attempts: 0,
            last_error: None,
        });
        Some(event)
    }

    /// Drops the pending delivery of `transaction`; whether there was one.
    pub(crate) fn cancel_for(&mut self, transaction: TransactionId) -> bool {
        match self.by_transaction.get(&transaction) {
            Some(&event) => {
                self.remove(event);
                true
            }
            None => false,
        }
    }

    /// Hands out up to `max` due deliveries, oldest due first, each re-scheduled after its
    /// backoff; defers those of paused URLs to the pause's end and gives up those taken as often
    /// as allowed. Looks at no more than [`PIPELINE_WEBHOOK_SCAN_MAX`] due deliveries.
    pub(crate) fn take(&mut self, max: u32, now_ms: u64, config: &PipelineConfig) -> Vec<Webhook> {
        let mut taken = Vec::new();
        let mut scanned = 0;
        while taken.len() < max as usize && scanned < PIPELINE_WEBHOOK_SCAN_MAX {
            let Some(&(at_ms, event)) = self.due.first() else {
                break;
            };
            if at_ms > now_ms {
                break;
            }
            scanned += 1;
            let mut hook = self.remove(event);
            if hook.attempts >= config.webhook_attempts_max {
                self.give_up(hook, now_ms);
                continue;
            }
            if let Some(until_ms) = self.paused_until(&hook.url, now_ms) {
                hook.next_attempt_at_ms = until_ms;
                self.insert(hook);
                continue;
            }
            hook.attempts += 1;
            hook.next_attempt_at_ms = now_ms.saturating_add(backoff_ms(config, hook.attempts));
            taken.push(hook.clone());
            self.insert(hook);
        }
        taken
    }

    /// Records the result of attempt `attempt` of `event`.
    pub(crate) fn settle(
        &mut self,
        event: WebhookEventId,
        attempt: u32,
        outcome: WebhookOutcome,
        now_ms: u64,
        config: &PipelineConfig,
    ) -> Result<WebhookSettlement, PipelineError> {
        let Some(hook) = self.pending.get(&event) else {
            return Ok(WebhookSettlement::Unknown);
        };
        if attempt == 0 || attempt > hook.attempts {
            return Err(PipelineError::OutOfRange {
                field: format!("attempt of webhook event {event}"),
                got: attempt.into(),
                min: 1,
                max: hook.attempts.into(),
            });
        }
        let reason = match outcome {
            // Any attempt that got through ends the delivery, and shows the URL works.
            WebhookOutcome::Delivered => {
                let hook = self.remove(event);
                self.set_url(&hook.url, None);
                return Ok(WebhookSettlement::Delivered);
            }
            WebhookOutcome::Failed { .. } if attempt < hook.attempts => {
                return Ok(WebhookSettlement::Stale);
            }
            WebhookOutcome::Failed { reason } => reason,
        };
        let mut hook = self.remove(event);
        hook.last_error = Some(reason);
        let paused_until_ms = self.count_failure(&hook.url, now_ms, config);
        if hook.attempts >= config.webhook_attempts_max {
            self.give_up(hook, now_ms);
            return Ok(WebhookSettlement::Exhausted);
        }
        if let Some(until_ms) = paused_until_ms {
            hook.next_attempt_at_ms = hook.next_attempt_at_ms.max(until_ms);
        }
        let next_attempt_at_ms = hook.next_attempt_at_ms;
        self.insert(hook);
        Ok(WebhookSettlement::RetryAt { next_attempt_at_ms })
    }

    /// Drops notices up to `up_to`; how many went.
    pub(crate) fn acknowledge(&mut self, up_to: NoticeId) -> usize {
        let keep = self.notices.split_off(&NoticeId(up_to.0.saturating_add(1)));
        let removed = self.notices.len();
        self.notices = keep;
        removed
    }

    /// Forgets up to `max` URL records whose window and pause are over; how many went, and
    /// whether more are due.
    pub(crate) fn forget_urls(&mut self, now_ms: u64, max: usize) -> (usize, bool) {
        let mut forgotten = 0;
        while let Some((at_ms, url)) = self.url_forget.first().cloned()
            && at_ms <= now_ms
        {
            if forgotten == max {
                return (forgotten, true);
            }
            self.set_url(&url, None);
            forgotten += 1;
        }
        (forgotten, false)
    }

    /// Counts a failure of `url`; pauses it (and tells the administrator) when the failures in
    /// the window reach the limit. Returns the end of the URL's pause, if it is paused.
    fn count_failure(
        &mut self,
        url: &WebhookUrl,
        now_ms: u64,
        config: &PipelineConfig,
    ) -> Option<u64> {
        let mut health = self.urls.get(url).copied().unwrap_or(UrlHealth {
            failures: 0,
            window_started_at_ms: now_ms,
            paused_until_ms: None,
            forget_at_ms: now_ms,
        });
        if let Some(until_ms) = health.paused_until_ms.filter(|&until_ms| until_ms > now_ms) {
            // Failures of attempts started before the pause say nothing new.
            return Some(until_ms);
        }
        health.paused_until_ms = None;
        if health.failures == 0
            || now_ms
                >= health
                    .window_started_at_ms
                    .saturating_add(config.url_failure_window_ms)
        {
            health.failures = 0;
            health.window_started_at_ms = now_ms;
        }
        health.failures += 1;
        let window_end_ms = health
            .window_started_at_ms
            .saturating_add(config.url_failure_window_ms);
        health.forget_at_ms = window_end_ms;
        if health.failures >= config.url_failure_limit {
            let until_ms = now_ms.saturating_add(config.url_pause_ms);
            self.notify(
                NoticeKind::UrlPaused {
                    url: url.clone(),
                    failures: health.failures,
                    until_ms,
                },
                now_ms,
            );
            health.failures = 0;
            health.paused_until_ms = Some(until_ms);
            health.forget_at_ms = window_end_ms.max(until_ms);
        }
        self.set_url(url, Some(health));
        health.paused_until_ms
    }

    /// Replaces (or, with `None`, forgets) the record of `url`, keeping the forget index; a new
    /// record past the bound evicts the one due to be forgotten soonest.
    fn set_url(&mut self, url: &WebhookUrl, health: Option<UrlHealth>) {
        if let Some(old) = self.urls.remove(url) {
            let removed = self.url_forget.remove(&(old.forget_at_ms, url.clone()));
            assert!(removed, "URL {url} was indexed by its forget time");
        }
        let Some(health) = health else { return };
        if self.urls.len() >= PIPELINE_URLS_MAX
            && let Some((_, evicted)) = self.url_forget.pop_first()
        {
            self.urls.remove(&evicted);
        }
        self.url_forget.insert((health.forget_at_ms, url.clone()));
        self.urls.insert(url.clone(), health);
    }

    fn paused_until(&self, url: &WebhookUrl, now_ms: u64) -> Option<u64> {
        self.urls
            .get(url)
            .and_then(|health| health.paused_until_ms)
            .filter(|&until_ms| until_ms > now_ms)
    }

    fn give_up(&mut self, hook: Webhook, now_ms: u64) {
        self.notify(
            NoticeKind::RetriesExhausted {
                event: hook.event,
                transaction: hook.transaction,
                url: hook.url,
                attempts: hook.attempts,
                last_error: hook.last_error,
            },
            now_ms,
        );
    }

    pub(super) fn notify(&mut self, kind: NoticeKind, now_ms: u64) {
        self.last_notice_id = self
            .last_notice_id
            .checked_add(1)
            .expect("fewer than 2^64 notices are raised");
        if self.notices.len() >= PIPELINE_NOTICES_MAX {
            self.notices.pop_first();
            self.notices_dropped += 1;
        }
        let id = NoticeId(self.last_notice_id);
        self.notices.insert(
            id,
            Notice {
                id,
                at_ms: now_ms,
                kind,
            },
        );
    }

    fn insert(&mut self, hook: Webhook) {
        self.index(&hook)
            .expect("a delivery apply makes has fresh index entries");
        let previous = self.pending.insert(hook.event, hook);
        assert!(previous.is_none(), "insert is called on a missing delivery");
    }

    fn remove(&mut self, event: WebhookEventId) -> Webhook {
        let hook = self
            .pending
            .remove(&event)
            .expect("remove is called on a pending delivery");
        let removed = self.due.remove(&(hook.next_attempt_at_ms, event))
            && self.by_transaction.remove(&hook.transaction) == Some(event);
        assert!(removed, "delivery {event} was indexed as its fields say");
        hook
    }

    fn index(&mut self, hook: &Webhook) -> Result<(), String> {
        if self
            .by_transaction
            .insert(hook.transaction, hook.event)
            .is_some()
        {
            return Err(format!(
                "transaction {} has two pending webhook deliveries",
                hook.transaction
            ));
        }
        if !self.due.insert((hook.next_attempt_at_ms, hook.event)) {
            return Err(format!("delivery {} is due twice", hook.event));
        }
        Ok(())
    }

    // Reads.

    pub(crate) fn get(&self, event: WebhookEventId) -> Option<&Webhook> {
        self.pending.get(&event)
    }

    pub(crate) fn for_transaction(&self, transaction: TransactionId) -> Option<&Webhook> {
        self.by_transaction
            .get(&transaction)
            .map(|event| &self.pending[event])
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) deliveries due at `now_ms` whose URL is not
    /// paused, oldest due first.
    pub(crate) fn due(&self, now_ms: u64, limit: usize) -> Vec<&Webhook> {
        self.due
            .range(..=(now_ms, WebhookEventId(u64::MAX)))
            .map(|(_, event)| &self.pending[event])
            .filter(|hook| self.paused_until(&hook.url, now_ms).is_none())
            .take(limit.min(LIST_PAGE_MAX))
            .collect()
    }

    pub(crate) fn pending_count(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn url(&self, url: &WebhookUrl) -> Option<&UrlHealth> {
        self.urls.get(url)
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) notices after `after`, oldest first.
    pub(crate) fn notices(&self, after: Option<NoticeId>, limit: usize) -> Vec<&Notice> {
        let from = after.map_or(0, |id| id.0.saturating_add(1));
        self.notices
            .range(NoticeId(from)..)
            .map(|(_, notice)| notice)
            .take(limit.min(LIST_PAGE_MAX))
            .collect()
    }

    pub(crate) fn notices_dropped(&self) -> u64 {
        self.notices_dropped
    }

    // Snapshots and invariants.

    pub(crate) fn records(&self) -> WebhookRecordsRef<'_> {
        WebhookRecordsRef {
            last_event_id: self.last_event_id,
            last_notice_id: self.last_notice_id,
            notices_dropped: self.notices_dropped,
            pending: self.pending.values().collect(),
            urls: &self.urls,
            notices: self.notices.values().collect(),
        }
    }

    pub(crate) fn from_records(records: WebhookRecords) -> Result<Webhooks, String> {
        let mut webhooks = Webhooks {
            last_event_id: records.last_event_id,
            last_notice_id: records.last_notice_id,
            notices_dropped: records.notices_dropped,
            ..Webhooks::default()
        };
        for hook in records.pending {
            if webhooks.pending.contains_key(&hook.event) {
                return Err(format!("webhook event {} appears twice", hook.event));
            }
            webhooks.index(&hook)?;
            webhooks.pending.insert(hook.event, hook);
        }
        for (url, health) in records.urls {
            if webhooks
                .urls
                .last_key_value()
                .is_some_and(|(last, _)| *last >= url)
            {
                return Err(format!("URL {url} is out of order or repeated"));
            }
            webhooks
                .url_forget
                .insert((health.forget_at_ms, url.clone()));
            webhooks.urls.insert(url, health);
        }
        for notice in records.notices {
            if webhooks.notices.contains_key(&notice.id) {
                return Err(format!("notice {} appears twice", notice.id));
            }
            webhooks.notices.insert(notice.id, notice);
        }
        Ok(webhooks)
    }

    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        if self.pending.len() > PIPELINE_WEBHOOKS_MAX
            || self.urls.len() > PIPELINE_URLS_MAX
            || self.notices.len() > PIPELINE_NOTICES_MAX
        {
            return Err("more webhook deliveries, URLs or notices than their bounds".to_owned());
        }
        let mut rebuilt = Webhooks::default();
        let latest_attempt_ms =
            clock_ms.saturating_add(PIPELINE_WEBHOOK_BACKOFF_MS_MAX.max(PIPELINE_URL_PAUSE_MS_MAX));
        for (event, hook) in &self.pending {
            let sound = *event == hook.event
                && event.0 > 0
                && event.0 <= self.last_event_id
                && hook.created_at_ms <= clock_ms
                && hook.next_attempt_at_ms <= latest_attempt_ms
                && hook.attempts <= PIPELINE_WEBHOOK_ATTEMPTS_MAX
                && (hook.attempts > 0 || hook.last_error.is_none());
            if !sound {
                return Err(format!(
                    "webhook delivery {event} has an id, time or attempt count out of range"
                ));
            }
            rebuilt.index(hook)?;
        }
        for (url, health) in &self.urls {
            rebuilt
                .url_forget
                .insert((health.forget_at_ms, url.clone()));
            let latest_forget_ms = clock_ms
                .saturating_add(PIPELINE_URL_FAILURE_WINDOW_MS_MAX.max(PIPELINE_URL_PAUSE_MS_MAX));
            let sound = health.window_started_at_ms <= clock_ms
                && health.window_started_at_ms <= health.forget_at_ms
                && health.forget_at_ms <= latest_forget_ms
                && health.failures < PIPELINE_URL_FAILURE_LIMIT_MAX
                && health.paused_until_ms.is_none_or(|until_ms| {
                    until_ms <= clock_ms.saturating_add(PIPELINE_URL_PAUSE_MS_MAX)
                        && until_ms <= health.forget_at_ms
                });
            if !sound {
                return Err(format!(
                    "the failure record of {url} has times out of range"
                ));
            }
        }
        if rebuilt.due != self.due
            || rebuilt.by_transaction != self.by_transaction
            || rebuilt.url_forget != self.url_forget
        {
            return Err("the webhook indexes differ from what the deliveries say".to_owned());
        }
        for (id, notice) in &self.notices {
            if *id != notice.id
                || id.0 == 0
                || id.0 > self.last_notice_id
                || notice.at_ms > clock_ms
            {
                return Err(format!("notice {id} is misnumbered or after the clock"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> WebhookUrl {
        WebhookUrl::new(s).unwrap()
    }

    /// Deliveries for two transactions, one taken and failed, so every index and the URL record
    /// hold something.
    fn busy() -> (Webhooks, u64) {
        let config = PipelineConfig::default();
        let now_ms = 1_700_000_000_000;
        let mut webhooks = Webhooks::default();
        let hook_url = url("https://hooks.example/a");
        let kind = WebhookKind::Completed {
            status: TxStatus::Success,
        };
        webhooks.schedule(TransactionId(1), &hook_url, kind, now_ms, 5);
        webhooks.schedule(TransactionId(2), &hook_url, kind, now_ms, 5);
        let taken = webhooks.take(1, now_ms, &config);
        let reason = Reason::new("503").unwrap();
        let outcome = WebhookOutcome::Failed { reason };
        webhooks
            .settle(taken[0].event, 1, outcome, now_ms, &config)
            .unwrap();
        webhooks.notify(
            NoticeKind::WebhookDropped {
                transaction: TransactionId(3),
                url: hook_url,
            },
            now_ms,
        );
        webhooks.check(now_ms).unwrap();
        (webhooks, now_ms)
    }

    #[test]
    fn events_scheduled_in_one_log_entry_get_distinct_increasing_ids() {
        let (webhooks, _) = busy();
        let events: Vec<u64> = webhooks.pending.keys().map(|event| event.0).collect();
        assert_eq!(events, [5, 6]);
    }

    #[test]
    fn check_finds_indexes_that_disagree_with_the_deliveries() {
        let (webhooks, now_ms) = busy();
        let mut broken = webhooks.clone();
        let (at_ms, event) = broken.due.pop_first().unwrap();
        broken.due.insert((at_ms + 1, event));
        assert!(
            broken.check(now_ms).is_err(),
            "a delivery due at the wrong time"
        );
        let mut broken = webhooks.clone();
        broken.by_transaction.clear();
        assert!(
            broken.check(now_ms).is_err(),
            "a delivery without its transaction"
        );
        let mut broken = webhooks.clone();
        broken.url_forget.clear();
        assert!(
            broken.check(now_ms).is_err(),
            "a URL record without its forget time"
        );
        let mut broken = webhooks.clone();
        broken.pending.values_mut().next().unwrap().event = WebhookEventId(99);
        assert!(
            broken.check(now_ms).is_err(),
            "a delivery filed under another id"
        );
        let mut broken = webhooks;
        broken.notices.values_mut().next().unwrap().at_ms = u64::MAX;
        assert!(broken.check(now_ms).is_err(), "a notice after the clock");
    }
}
