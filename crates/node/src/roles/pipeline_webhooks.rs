//! The webhook processor (issue 7 item 3): the node role that sends the pipelines' webhook events.
//!
//! The bookkeeping lives in the state machine (`certus_core::pipelines`, its `webhooks`
//! submodule): which deliveries are due, their backoff, the per-URL failure counter and pause,
//! and the administrator notices. This role only moves bytes. Each round it
//! 1. takes up to [`ProcessorTimings::deliveries_max`] due deliveries with
//!    `PipelineCommand::TakeWebhooks` (the state machine re-schedules each after its backoff in
//!    the same command, so a processor that dies mid-round only delays them);
//! 2. reads the transactions they are about, behind a linearizable read barrier, and builds each
//!    event's JSON body ([`event_body`]);
//! 3. POSTs them all at once through a [`WebhookSender`], each bounded by
//!    [`ProcessorTimings::request_timeout_ms`]: a 2xx answer is a delivery, anything else (another
//!    status, a network error, no answer in time) a failure with a short reason;
//! 4. records every result in one write of `PipelineCommand::WebhookResult`s, each carrying the
//!    attempt number it was taken with, so a late report of an older attempt changes nothing.
//!
//! A batch is finished before the next is taken, so one processor never has two attempts of one
//! event in flight (the next attempt may fall due while a slow one is still out). The price is
//! head-of-line blocking: one slow receiver holds its batch up to the request timeout.
//!
//! Every request carries `Content-Type: application/json`, [`EVENT_ID_HEADER`] (the event id,
//! the same on every attempt: receivers dedupe on it), [`ATTEMPT_HEADER`] (1, 2, …) and
//! [`TRANSACTION_HEADER`]. Redirects are not followed (a 3xx is a failure). Only `http://` and
//! `https://` URLs exist (`WebhookUrl` checks that when the transaction is enqueued); HTTPS trusts
//! the Mozilla roots compiled in, as the CT mirror's client does.
//!
//! # The role lock (the seed's two-stage lock)
//!
//! One node at a time sends, holding the lease [`ROLE_LEASE`] (holder `node-<id>`) with TTL
//! [`ProcessorTimings::lease_ttl_ms`], renewed every third of it. The seed granted its archive
//! and webhook roles with two Redis keys set together: `lock 1` (work is handed out until it
//! expires) and `lock 2` (longer; nobody else gets the role until it expires), the gap being a
//! grace period in which the holder finishes what it has. Here:
//! - **lock 2 is the lease itself**: its `expires_at_ms` (machine time, stamped by the leader)
//!   is when another node's acquire may first succeed;
//! - **lock 1 is `expires_at_ms − grace`**, with `grace = request_timeout + skew`
//!   ([`ProcessorTimings::grace_ms`]): the holder takes new deliveries only while its own clock
//!   reads before it;
//! - **the grace period** is the rest: the holder takes nothing, and every request it still has
//!   out is cut off by `expires_at_ms − skew` on its clock (a cut-off attempt is not reported;
//!   the state machine retries it after its backoff).
//!
//! So, as long as no node's clock is more than `skew` behind the leader's, the old holder has
//! stopped sending before the leader's clock lets anyone else acquire the lease, and two
//! processors never send at once. Renewal every `ttl / 3` keeps `expires_at_ms − now` at least
//! `2·ttl / 3`, which [`ProcessorTimings::validate`] requires to exceed the grace, so a healthy
//! holder is always before lock 1. A renewal whose answer is lost keeps the previous expiry (an
//! under-estimate, hence safe). On a clean stop the holder releases the lease at once if it had
//! nothing in flight; if it cut requests off, it lets the lease run out, so a receiver still
//! working on a cut-off request is not sent the next attempt before then.
//!
//! Unlike the seed's lock, the state machine does not enforce this: `TakeWebhooks` carries no
//! fencing token, so a processor whose clock is beyond the skew bound could send while another
//! does. Receivers dedupe on the event id, so the worst case is a duplicate, never a loss.
//! Run one processor per node: two on one node share a holder name and would both think they
//! hold the role.
//!
//! # Body
//!
//! A JSON object (see [`event_body`]): `event`, `transaction`, `kind` (`completed` or
//! `progress`), `status`, and, while the transaction is stored, `owner`, `external_id`,
//! `pipeline`, `node_group`, `state`, `progress`, `created_at_ms` and `completed_at_ms`. The
//! documents are embedded as JSON, not as strings. A transaction deleted before its event was
//! delivered (archive retention shorter than the retries) is sent with the first four only.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::ordered_watch as watch;
use certus_core::leases::{FencingToken, HolderId, LeaseCommand, LeaseName, LeaseReply, Ttl};
use certus_core::pipelines::{
    PipelineCommand, PipelineReply, Transaction, TransactionId, Webhook, WebhookEventId,
    WebhookKind, WebhookOutcome, WebhookSettlement, WebhookUrl,
};
use certus_core::{Command, LeaseError, Reason, Response};
use serde_json::{Map, Value};
use tracing::{debug, info, warn};

use crate::limits::{WEBHOOK_DELIVERIES_CONCURRENT_MAX, WEBHOOK_REASON_BYTES_MAX};
use crate::metrics::{Metrics, WebhookAttempt};
use crate::raft::replica::Replica;
use crate::roles::session_daemons::BoxFuture;
use crate::stop::stopped;

/// The role lease: whoever holds it sends the webhooks.
pub const ROLE_LEASE: &str = "certus/pipelines/webhooks";
/// The header carrying the event id, the same on every attempt of one event.
pub const EVENT_ID_HEADER: &str = "certus-event-id";
/// The header carrying the attempt number (1 for the first).
pub const ATTEMPT_HEADER: &str = "certus-event-attempt";
/// The header carrying the transaction id.
pub const TRANSACTION_HEADER: &str = "certus-transaction-id";

/// The longest one delivery may take, connecting included.
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// The role lease's TTL.
pub const LEASE_TTL_MS: u64 = 15_000;
/// How far behind the leader's clock a node's clock may be for the hand-off to stay exclusive.
pub const SKEW_BOUND_MS: u64 = 1_000;
/// The pause between rounds when there was nothing to do (or the role is not this node's).
const IDLE_PAUSE: Duration = Duration::from_millis(200);
/// The longest the role waits for one write (acquire, take, results, release): a write
/// forwarded to a leader that has just been cut off would otherwise stall renewals.
const ROLE_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// One attempt of one event, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Where it goes.
    pub url: WebhookUrl,
    /// The event's id (the same on every attempt).
    pub event: WebhookEventId,
    /// The transaction it is about.
    pub transaction: TransactionId,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    /// The JSON body ([`event_body`]).
    pub body: String,
}

/// Sends one delivery: `Ok` when the receiver accepted it (HTTP: a 2xx answer), otherwise why
/// not, in a few words. The processor bounds each call by its request timeout. In production an
/// HTTP POST ([`HttpSender`]); the simulation brings its own over simulated links.
pub trait WebhookSender: Send + Sync + fmt::Debug {
    /// Sends `delivery` once.
    fn send<'a>(&'a self, delivery: &'a Delivery) -> BoxFuture<'a, Result<(), String>>;
}

/// The processor's timings. The defaults suit production; tests shorten them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessorTimings {
    /// The role lease's TTL; it is renewed every third of it.
    pub lease_ttl_ms: u64,
    /// The longest one delivery may take.
    pub request_timeout_ms: u64,
    /// How far behind the leader's clock a node's clock may be (see the module documentation).
    pub skew_ms: u64,
    /// Deliveries taken per round, all sent at once.
    pub deliveries_max: u32,
}

impl Default for ProcessorTimings {
    fn default() -> ProcessorTimings {
        ProcessorTimings {
            lease_ttl_ms: LEASE_TTL_MS,
            request_timeout_ms: REQUEST_TIMEOUT_MS,
            skew_ms: SKEW_BOUND_MS,
            deliveries_max: WEBHOOK_DELIVERIES_CONCURRENT_MAX,
        }
    }
}

impl ProcessorTimings {
    /// The grace period between lock 1 and lock 2: time for a delivery taken just before lock 1
    /// to run its full timeout, plus the skew bound.
    pub fn grace_ms(&self) -> u64 {
        self.request_timeout_ms.saturating_add(self.skew_ms)
    }

    fn renew_every(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms / 3)
    }

    /// Checks the timings fit together, naming what does not.
    pub fn validate(&self) -> Result<(), String> {
        Ttl::from_ms(self.lease_ttl_ms).map_err(|error| format!("lease_ttl_ms: {error}"))?;
        if self.request_timeout_ms == 0 {
            return Err("request_timeout_ms must be at least 1".to_owned());
        }
        let batch_max = certus_core::limits::PIPELINE_WEBHOOK_BATCH_MAX;
        if !(1..=batch_max).contains(&self.deliveries_max) {
            return Err(format!(
                "deliveries_max must be within 1..={batch_max}, not {}",
                self.deliveries_max
            ));
        }
        // Renewed every third of the TTL, a healthy holder has at least two thirds left: that
        // must be before lock 1, or it would stop working between renewals.
        if self.grace_ms().saturating_mul(3) >= self.lease_ttl_ms.saturating_mul(2) {
            return Err(format!(
                "the grace period (request_timeout_ms + skew_ms = {} ms) must be under two \
                 thirds of lease_ttl_ms ({} ms)",
                self.grace_ms(),
                self.lease_ttl_ms
            ));
        }
        Ok(())
    }
}

/// This node's hold on the role, as its latest acquire answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Grant {
    token: FencingToken,
    /// Lock 2: machine time from which another node may take the role.
    expires_at_ms: u64,
}

impl Grant {
    /// Whether new work may be taken at `now_ms`: before lock 1.
    fn may_take(&self, now_ms: u64, timings: &ProcessorTimings) -> bool {
        now_ms.saturating_add(timings.grace_ms()) < self.expires_at_ms
    }

    /// This node's clock time by which every request it sends under this grant is over.
    fn send_by_ms(&self, timings: &ProcessorTimings) -> u64 {
        self.expires_at_ms.saturating_sub(timings.skew_ms)
    }
}

/// How long a delivery started at `now_ms` may take under a grant that stops sending at
/// `send_by_ms`; zero when it may not start at all. The second value says whether the lease,
/// rather than the request timeout, set the bound.
fn send_budget_ms(now_ms: u64, send_by_ms: u64, timings: &ProcessorTimings) -> (u64, bool) {
    let left_ms = send_by_ms.saturating_sub(now_ms);
    if left_ms < timings.request_timeout_ms {
        (left_ms, true)
    } else {
        (timings.request_timeout_ms, false)
    }
}

/// A webhook processor: who it is, how it sends, its timings.
#[derive(Clone)]
pub struct WebhookProcessor {
    holder: HolderId,
    sender: Arc<dyn WebhookSender>,
    timings: ProcessorTimings,
    metrics: Option<Arc<Metrics>>,
}

impl fmt::Debug for WebhookProcessor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookProcessor")
            .field("holder", &self.holder)
            .field("sender", &self.sender)
            .field("timings", &self.timings)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl WebhookProcessor {
    /// The processor of node `id`, sending through `sender`, on the default timings.
    pub fn new(id: u64, sender: Arc<dyn WebhookSender>) -> WebhookProcessor {
        WebhookProcessor {
            holder: HolderId::new(format!("node-{id}")).expect("node-<id> is a valid holder"),
            sender,
            timings: ProcessorTimings::default(),
            metrics: None,
        }
    }

    /// The processor of node `id`, sending over HTTP(S).
    #[cfg(not(madsim))]
    pub fn http(id: u64) -> Result<WebhookProcessor, String> {
        Ok(WebhookProcessor::new(id, Arc::new(HttpSender::new()?)))
    }

    /// The same processor on other timings, if they fit together.
    pub fn with_timings(self, timings: ProcessorTimings) -> Result<WebhookProcessor, String> {
        timings.validate()?;
        Ok(WebhookProcessor { timings, ..self })
    }

    /// The same processor, counting its attempts in `metrics`.
    pub fn with_metrics(self, metrics: Arc<Metrics>) -> WebhookProcessor {
        WebhookProcessor {
            metrics: Some(metrics),
            ..self
        }
    }

    /// Who it holds the role lease as.
    pub fn holder(&self) -> &HolderId {
        &self.holder
    }

    fn lease_name() -> LeaseName {
        LeaseName::new(ROLE_LEASE).expect("the role lease's name is valid")
    }

    /// Acquires (or renews) the role lease every third of its TTL while deliveries are pending
    /// and publishes the grant, until `stop`. With nothing pending it writes nothing (an idle
    /// cluster proposes no entries for webhooks), and a held lease simply runs out. A write that
    /// fails keeps the previous grant: its expiry still bounds the work.
    async fn keep_role(
        &self,
        replica: &Replica,
        grant: &watch::Sender<Option<Grant>>,
        stop: watch::Receiver<bool>,
    ) {
        let ttl = Ttl::from_ms(self.timings.lease_ttl_ms).expect("validated with the timings");
        let mut next_attempt = tokio::time::Instant::now();
        loop {
            if tokio::time::Instant::now() < next_attempt || !pending_here(replica) {
                tokio::select! {
                    // Polled in order, not at random: the simulation replays a seed exactly.
                    biased;
                    () = stopped(stop.clone()) => return,
                    () = tokio::time::sleep(IDLE_PAUSE) => {}
                }
                continue;
            }
            next_attempt = tokio::time::Instant::now() + self.timings.renew_every();
            let acquire = Command::Lease(LeaseCommand::Acquire {
                name: Self::lease_name(),
                holder: self.holder.clone(),
                ttl,
            });
            match write(replica, vec![acquire]).await {
                Ok(Response::Lease(Ok(LeaseReply::Acquired { lease, .. }))) => {
                    let new = Grant {
                        token: lease.token,
                        expires_at_ms: lease.expires_at_ms,
                    };
                    let old = grant.send_replace(Some(new));
                    if old.is_none_or(|old| old.token != new.token) {
                        info!(id = replica.id, token = %new.token, "took the webhook role");
                    }
                }
                Ok(Response::Lease(Err(LeaseError::NotHolder { holder, .. }))) => {
                    if grant.send_replace(None).is_some() {
                        info!(id = replica.id, %holder, "the webhook role moved to another node");
                    }
                }
                Ok(other) => debug!(id = replica.id, ?other, "role lease acquire answered"),
                Err(error) => debug!(id = replica.id, %error, "role lease not renewed"),
            }
        }
    }

    /// Rounds while the role allows, until `stop`. Returns whether a batch was cut off mid-send
    /// by the stop.
    async fn work(
        &self,
        replica: &Replica,
        grant: watch::Receiver<Option<Grant>>,
        stop: watch::Receiver<bool>,
    ) -> bool {
        let sending = AtomicBool::new(false);
        loop {
            let now_ms = replica.clock.now_ms();
            let current = *grant.borrow();
            let taking = current.filter(|grant| grant.may_take(now_ms, &self.timings));
            let mut worked = false;
            if let Some(held) = taking
                && due_here(replica, now_ms)
            {
                tokio::select! {
                    // Polled in order, not at random: the simulation replays a seed exactly.
                    biased;
                    () = stopped(stop.clone()) => return sending.load(Ordering::SeqCst),
                    result = self.round(replica, held, &sending) => match result {
                        Ok(sent) => worked = sent > 0,
                        Err(error) => debug!(id = replica.id, %error, "webhook round failed"),
                    },
                }
            }
            let pause = if worked { Duration::ZERO } else { IDLE_PAUSE };
            tokio::select! {
                // Polled in order, not at random: the simulation replays a seed exactly.
                biased;
                () = stopped(stop.clone()) => return false,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Takes a batch, sends it, records the results; how many were sent.
    async fn round(
        &self,
        replica: &Replica,
        grant: Grant,
        sending: &AtomicBool,
    ) -> Result<usize, String> {
        let take = Command::Pipeline(PipelineCommand::TakeWebhooks {
            max: self.timings.deliveries_max,
        });
        let taken = match write(replica, vec![take]).await? {
            Response::Pipeline(Ok(PipelineReply::WebhooksTaken(taken))) => taken,
            other => return Err(format!("take answered {other:?}")),
        };
        if taken.is_empty() {
            return Ok(0);
        }
        // The take is applied on the leader; the barrier makes this node's state include it, and
        // so the transactions as they were when their events were scheduled (or later).
        let deliveries = replica
            .read(|state, _| {
                let reads = state.pipelines();
                taken
                    .iter()
                    .map(|hook| Delivery::of(hook, reads.transaction(hook.transaction)))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(|error| format!("reading the transactions: {error}"))?;
        let send_by_ms = grant.send_by_ms(&self.timings);
        sending.store(true, Ordering::SeqCst);
        let outcomes = futures_util::future::join_all(
            deliveries
                .iter()
                .map(|delivery| self.deliver(replica, delivery, send_by_ms)),
        )
        .await;
        sending.store(false, Ordering::SeqCst);
        let mut results = Vec::new();
        for (delivery, outcome) in deliveries.iter().zip(outcomes) {
            self.count(outcome.as_ref());
            if let Some(outcome) = outcome {
                results.push(Command::Pipeline(PipelineCommand::WebhookResult {
                    event: delivery.event,
                    attempt: delivery.attempt,
                    outcome,
                }));
            }
        }
        if !results.is_empty() {
            self.record(replica, &deliveries, results).await;
        }
        Ok(deliveries.len())
    }

    /// Sends one delivery within its budget. `None`: it was not sent, or was cut off, because the
    /// role ran out first — not the receiver's fault, so not reported (the state machine retries
    /// it after its backoff).
    async fn deliver(
        &self,
        replica: &Replica,
        delivery: &Delivery,
        send_by_ms: u64,
    ) -> Option<WebhookOutcome> {
        let (budget_ms, lease_bound) =
            send_budget_ms(replica.clock.now_ms(), send_by_ms, &self.timings);
        if budget_ms == 0 {
            return None;
        }
        let sent =
            tokio::time::timeout(Duration::from_millis(budget_ms), self.sender.send(delivery))
                .await;
        let reason = match sent {
            Ok(Ok(())) => return Some(WebhookOutcome::Delivered),
            Ok(Err(reason)) => reason,
            Err(_) if lease_bound => return None,
            Err(_) => format!("no answer within {budget_ms} ms"),
        };
        debug!(
            id = replica.id,
            event = %delivery.event,
            attempt = delivery.attempt,
            url = %delivery.url,
            %reason,
            "webhook attempt failed"
        );
        Some(WebhookOutcome::Failed {
            reason: reason_text(&reason),
        })
    }

    /// Records the attempts' results in one write. A lost write only means the deliveries are
    /// attempted again after their backoff (receivers dedupe).
    async fn record(&self, replica: &Replica, deliveries: &[Delivery], results: Vec<Command>) {
        let responses = match tokio::time::timeout(ROLE_WRITE_TIMEOUT, replica.write(results)).await
        {
            Ok(Ok(responses)) => responses,
            Ok(Err(error)) => {
                debug!(id = replica.id, %error, "webhook results not recorded");
                return;
            }
            Err(_) => {
                debug!(id = replica.id, "webhook results not recorded in time");
                return;
            }
        };
        for response in responses {
            match response {
                Response::Pipeline(Ok(PipelineReply::WebhookRecorded {
                    event,
                    settlement: WebhookSettlement::Exhausted,
                })) => {
                    let url = deliveries
                        .iter()
                        .find(|delivery| delivery.event == event)
                        .map(|delivery| delivery.url.as_str());
                    warn!(id = replica.id, %event, ?url, "webhook given up after its last attempt");
                }
                Response::Pipeline(Ok(PipelineReply::WebhookRecorded { .. })) => {}
                other => debug!(id = replica.id, ?other, "webhook result answered"),
            }
        }
    }

    fn count(&self, outcome: Option<&WebhookOutcome>) {
        if let Some(metrics) = &self.metrics {
            metrics.count_pipeline_webhook(match outcome {
                Some(WebhookOutcome::Delivered) => WebhookAttempt::Delivered,
                Some(WebhookOutcome::Failed { .. }) => WebhookAttempt::Failed,
                None => WebhookAttempt::Unsent,
            });
        }
    }

    /// Gives the role back, so another node can take it without waiting for the TTL.
    async fn release(&self, replica: &Replica) {
        let release = Command::Lease(LeaseCommand::Release {
            name: Self::lease_name(),
            holder: self.holder.clone(),
        });
        match write(replica, vec![release]).await {
            Ok(Response::Lease(Ok(_))) => debug!(id = replica.id, "webhook role released"),
            Ok(other) => debug!(id = replica.id, ?other, "webhook role release answered"),
            Err(error) => debug!(id = replica.id, %error, "webhook role not released"),
        }
    }
}

impl Delivery {
    /// The current attempt of `hook`, about `transaction` (if it is still stored).
    fn of(hook: &Webhook, transaction: Option<&Transaction>) -> Delivery {
        Delivery {
            url: hook.url.clone(),
            event: hook.event,
            transaction: hook.transaction,
            attempt: hook.attempts,
            body: event_body(hook, transaction),
        }
    }
}

/// The JSON body of `hook`'s event (see the module documentation).
pub fn event_body(hook: &Webhook, transaction: Option<&Transaction>) -> String {
    let (kind, status) = match hook.kind {
        WebhookKind::Completed { status } => ("completed", Some(status)),
        WebhookKind::Progress => ("progress", transaction.map(Transaction::status)),
    };
    let mut body = Map::new();
    body.insert("event".to_owned(), hook.event.0.into());
    body.insert("transaction".to_owned(), hook.transaction.0.into());
    body.insert("kind".to_owned(), kind.into());
    body.insert(
        "status".to_owned(),
        status.map_or(Value::Null, |status| status.to_string().into()),
    );
    if let Some(tx) = transaction {
        let document = |text: &str| -> Value {
            serde_json::from_str(text).expect("a stored JSON document is one JSON value")
        };
        let text = |value: Option<&str>| value.map_or(Value::Null, Value::from);
        body.insert("owner".to_owned(), tx.owner.as_str().into());
        body.insert(
            "external_id".to_owned(),
            text(tx.external_id.as_ref().map(|id| id.as_str())),
        );
        body.insert(
            "pipeline".to_owned(),
            text(tx.pipeline.as_ref().map(|name| name.as_str())),
        );
        body.insert("node_group".to_owned(), tx.node_group.as_str().into());
        body.insert("state".to_owned(), document(tx.state.as_str()));
        body.insert(
            "progress".to_owned(),
            tx.progress
                .as_ref()
                .map_or(Value::Null, |report| document(report.as_str())),
        );
        body.insert("created_at_ms".to_owned(), tx.created_at_ms.into());
        body.insert(
            "completed_at_ms".to_owned(),
            tx.completed_at_ms().map_or(Value::Null, Value::from),
        );
    }
    Value::Object(body).to_string()
}

/// Whether this node's applied state shows a delivery due: a take is a Raft write, so an idle
/// processor looks here first.
fn due_here(replica: &Replica, now_ms: u64) -> bool {
    replica
        .reader
        .read(|applied| !applied.state.pipelines().webhooks_due(now_ms, 1).is_empty())
}

/// Whether this node's applied state holds any pending delivery, due or not: the role is only
/// worth holding then.
fn pending_here(replica: &Replica) -> bool {
    replica
        .reader
        .read(|applied| applied.state.pipelines().webhooks_pending() > 0)
}

/// Writes `commands` in one Raft entry, within [`ROLE_WRITE_TIMEOUT`]; the answer to the last.
async fn write(replica: &Replica, commands: Vec<Command>) -> Result<Response, String> {
    let responses = tokio::time::timeout(ROLE_WRITE_TIMEOUT, replica.write(commands))
        .await
        .map_err(|_| format!("no answer within {ROLE_WRITE_TIMEOUT:?}"))?
        .map_err(|error| error.to_string())?;
    responses
        .into_iter()
        .last()
        .ok_or_else(|| "no answer".to_owned())
}

/// A failure reason for the state machine: one line of at most [`WEBHOOK_REASON_BYTES_MAX`]
/// bytes.
fn reason_text(text: &str) -> Reason {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() > WEBHOOK_REASON_BYTES_MAX {
        let mut cut = WEBHOOK_REASON_BYTES_MAX;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    let line = line.trim();
    Reason::new(if line.is_empty() { "unknown" } else { line })
        .expect("a trimmed line without control characters is a valid reason")
}

/// The webhook processor of this node over HTTP(S), until `stop`.
#[cfg(not(madsim))]
pub async fn run(replica: Arc<Replica>, stop: watch::Receiver<bool>) {
    match WebhookProcessor::http(replica.id) {
        Ok(processor) => run_with(replica, processor, stop).await,
        Err(error) => tracing::error!(id = replica.id, %error, "webhook processor not started"),
    }
}

/// Runs `processor` on this node until `stop`: keeps the role lease and, while it holds it,
/// sends. On stop it gives the role back at once unless it cut requests off (then the lease runs
/// out, see the module documentation).
pub async fn run_with(
    replica: Arc<Replica>,
    processor: WebhookProcessor,
    stop: watch::Receiver<bool>,
) {
    let (grant, granted) = watch::channel(None);
    let ((), cut_off) = tokio::join!(
        processor.keep_role(&replica, &grant, stop.clone()),
        processor.work(&replica, granted, stop),
    );
    let held = *grant.borrow();
    if held.is_some() && !cut_off {
        processor.release(&replica).await;
    }
    debug!(id = replica.id, cut_off, "webhook processor stopped");
}

/// Webhook delivery over HTTP(S) with hyper-util, TLS by rustls on ring with the Mozilla roots
/// (the client the CT mirror's source uses).
#[cfg(not(madsim))]
#[derive(Debug, Clone)]
pub struct HttpSender {
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Full<hyper::body::Bytes>,
    >,
}

#[cfg(not(madsim))]
impl HttpSender {
    /// A client; does not connect.
    pub fn new() -> Result<HttpSender, String> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|error| format!("TLS setup: {error}"))?
            .https_or_http()
            .enable_http1()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Ok(HttpSender { client })
    }

    async fn post(&self, delivery: &Delivery) -> Result<(), String> {
        use http_body_util::{BodyExt as _, Full, Limited};
        use hyper::header::{CONTENT_TYPE, USER_AGENT};
        use hyper::{Method, Request, Uri};

        let uri: Uri = delivery
            .url
            .as_str()
            .parse()
            .map_err(|error| format!("the URL does not parse: {error}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err("only http:// and https:// URLs are called".to_owned());
        }
        let request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("certus/", env!("CARGO_PKG_VERSION")))
            .header(EVENT_ID_HEADER, delivery.event.to_string())
            .header(ATTEMPT_HEADER, delivery.attempt.to_string())
            .header(TRANSACTION_HEADER, delivery.transaction.to_string())
            .body(Full::new(hyper::body::Bytes::from(delivery.body.clone())))
            .map_err(|error| format!("the request does not build: {error}"))?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|error| error_chain(&error))?;
        let status = response.status();
        if status.is_success() {
            // The status is the receiver's answer; its body does not matter.
            return Ok(());
        }
        let body = Limited::new(
            response.into_body(),
            crate::limits::WEBHOOK_RESPONSE_BYTES_MAX,
        )
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        Err(if text.trim().is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {}", text.trim())
        })
    }
}

#[cfg(not(madsim))]
impl WebhookSender for HttpSender {
    fn send<'a>(&'a self, delivery: &'a Delivery) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.post(delivery))
    }
}

/// An error with its causes: hyper-util's own message ("client error (Connect)") says little.
#[cfg(not(madsim))]
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use certus_core::claims::Place;
    use certus_core::pipelines::{
        FinalStatus, Finished, JsonDocument, NodeGroup, Owner, TxMetadata, TxStatus,
    };

    use super::*;

    fn timings() -> ProcessorTimings {
        ProcessorTimings {
            lease_ttl_ms: 3_000,
            request_timeout_ms: 1_000,
            skew_ms: 200,
            deliveries_max: 4,
        }
    }

    #[test]
    fn the_holder_takes_until_lock_1_and_sends_until_lock_2_less_the_skew() {
        let timings = timings();
        timings.validate().expect("valid timings");
        let grant = Grant {
            token: FencingToken(9),
            expires_at_ms: 10_000,
        };
        // Lock 1 is expiry − (timeout + skew) = 8_800.
        assert!(grant.may_take(8_799, &timings));
        assert!(!grant.may_take(8_800, &timings));
        assert!(!grant.may_take(12_000, &timings));
        // A delivery taken just before lock 1 gets its full timeout, and still ends by 9_800.
        assert_eq!(grant.send_by_ms(&timings), 9_800);
        assert_eq!(send_budget_ms(8_799, 9_800, &timings), (1_000, false));
        assert_eq!(send_budget_ms(9_300, 9_800, &timings), (500, true));
        assert_eq!(send_budget_ms(9_800, 9_800, &timings), (0, true));
        assert_eq!(send_budget_ms(11_000, 9_800, &timings), (0, true));
    }

    #[test]
    fn timings_whose_grace_outlasts_two_thirds_of_the_ttl_are_refused() {
        let too_long = ProcessorTimings {
            request_timeout_ms: 1_800,
            ..timings()
        };
        let error = too_long.validate().expect_err("grace 2_000 ≥ 2/3 of 3_000");
        assert!(error.contains("two thirds"), "{error}");
        assert!(
            ProcessorTimings {
                deliveries_max: 0,
                ..timings()
            }
            .validate()
            .is_err()
        );
        ProcessorTimings::default()
            .validate()
            .expect("the defaults are valid");
    }

    fn hook(kind: WebhookKind) -> Webhook {
        Webhook {
            event: WebhookEventId(41),
            transaction: TransactionId(7),
            url: WebhookUrl::new("https://hooks.example/a").unwrap(),
            kind,
            created_at_ms: 1_000,
            next_attempt_at_ms: 2_000,
            attempts: 2,
            last_error: None,
        }
    }

    fn transaction() -> Transaction {
        Transaction {
            id: TransactionId(7),
            owner: Owner::new("acme").unwrap(),
            external_id: None,
            pipeline: None,
            node_group: NodeGroup::new("workers").unwrap(),
            place: Place::Ended(Finished {
                status: FinalStatus::Success,
                completed_at_ms: 900,
                archived_at_ms: None,
            }),
            state: JsonDocument::new(r#"{"answer": [42]}"#).unwrap(),
            event: None,
            metadata: TxMetadata::default(),
            progress: None,
            created_at_ms: 500,
            attempts: 1,
            last_started_at_ms: Some(600),
            notified_at_ms: None,
            last_step: None,
            version: 12,
        }
    }

    #[test]
    fn the_body_embeds_the_documents_and_survives_a_deleted_transaction() {
        let completed = hook(WebhookKind::Completed {
            status: TxStatus::Success,
        });
        let tx = transaction();
        let body: Value = serde_json::from_str(&event_body(&completed, Some(&tx))).unwrap();
        assert_eq!(body["event"], 41);
        assert_eq!(body["transaction"], 7);
        assert_eq!(body["kind"], "completed");
        assert_eq!(body["status"], "success");
        assert_eq!(body["owner"], "acme");
        assert_eq!(body["state"]["answer"][0], 42, "embedded as JSON: {body}");
        assert_eq!(body["external_id"], Value::Null);
        assert_eq!(body["completed_at_ms"], 900);

        let delivery = Delivery::of(&completed, None);
        assert_eq!(delivery.attempt, 2);
        let body: Value = serde_json::from_str(&delivery.body).unwrap();
        assert_eq!(body["status"], "success");
        assert!(body.get("state").is_none(), "{body}");

        let progress = hook(WebhookKind::Progress);
        let body: Value = serde_json::from_str(&event_body(&progress, None)).unwrap();
        assert_eq!(body["kind"], "progress");
        assert_eq!(body["status"], Value::Null);
    }

    #[test]
    fn reasons_are_one_bounded_line() {
        let reason = reason_text(&format!("HTTP 500:\n{}", "é".repeat(400)));
        assert!(reason.as_str().len() <= WEBHOOK_REASON_BYTES_MAX);
        assert!(reason.as_str().starts_with("HTTP 500: é"), "{reason}");
        assert_eq!(reason_text(" \n ").as_str(), "unknown");
    }
}
