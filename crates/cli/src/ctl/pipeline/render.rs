//! How `certus ctl pipeline` shows what the cluster answers: statuses and queues by name,
//! transactions, notifications, notices and the queues' counts as tables for people, and as JSON
//! with every field (absent values null, documents as the strings stored).

use certus_client::{
    CancelOutcome, CancelReply, GetStateReply, NodeGroupCounts, Notice, NotificationKind,
    PendingWebhook, Pipeline, PipelineConfig, PipelineNotification, PipelinesStatus, QueueType,
    Transaction, TxStatus, WaitOutcome, notice,
};
use comfy_table::Table;
use serde_json::{Value, json};

use crate::ctl::Output;
use crate::ctl::settings::{Setting, Settings, config_json, config_table};
use crate::ctl::show::{
    human_ms, ms_or_null, now_ms, or_none, relative, table, table_of, text_or_null,
};

/// A status as the origin system spells it (`queued`, `internal-error`, …).
pub(super) fn status_text(status: i32) -> String {
    match TxStatus::try_from(status) {
        Ok(TxStatus::Queued) => "queued",
        Ok(TxStatus::Running) => "running",
        Ok(TxStatus::Success) => "success",
        Ok(TxStatus::Failed) => "failed",
        Ok(TxStatus::Aborted) => "aborted",
        Ok(TxStatus::Sleeping) => "sleeping",
        Ok(TxStatus::Timeout) => "timeout",
        Ok(TxStatus::InternalError) => "internal-error",
        Ok(TxStatus::Unspecified) | Err(_) => return format!("status-{status}"),
    }
    .to_owned()
}

/// A queue's name, `None` for none.
pub(super) fn queue_name(queue: i32) -> Option<&'static str> {
    match QueueType::try_from(queue) {
        Ok(QueueType::Admin) => Some("admin"),
        Ok(QueueType::Out) => Some("out"),
        Ok(QueueType::In) => Some("in"),
        Ok(QueueType::Unspecified) | Err(_) => None,
    }
}

fn wait_outcome(outcome: i32) -> String {
    match WaitOutcome::try_from(outcome) {
        Ok(WaitOutcome::Finished) => "finished".to_owned(),
        Ok(WaitOutcome::Progress) => "progress".to_owned(),
        Ok(WaitOutcome::Missed) => "missed".to_owned(),
        Ok(WaitOutcome::WaitEnded) => "wait-ended".to_owned(),
        Ok(WaitOutcome::Unspecified) | Err(_) => format!("outcome-{outcome}"),
    }
}

/// ` (ids 3, 4)`, or nothing for none.
pub(super) fn id_list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    format!(" (ids {})", ids.join(", "))
}

pub(super) fn pipeline_json(pipeline: &Pipeline) -> Value {
    json!({
        "name": pipeline.name,
        "node_group": pipeline.node_group,
        "defined_at_ms": pipeline.defined_at_ms,
    })
}

pub(super) fn pipelines_table(pipelines: &[Pipeline], now: Option<u64>) -> Table {
    table_of(
        &["pipeline", "node group", "defined"],
        pipelines,
        |pipeline| {
            vec![
                pipeline.name.clone(),
                pipeline.node_group.clone(),
                relative(pipeline.defined_at_ms, now),
            ]
        },
    )
}

/// A transaction as JSON: every field, absent values null, JSON documents as the strings
/// stored.
pub(super) fn transaction_json(tx: &Transaction) -> Value {
    let metadata = tx.metadata.clone().unwrap_or_default();
    let running = tx.status == i32::from(TxStatus::Running);
    let sleeping = tx.status == i32::from(TxStatus::Sleeping);
    json!({
        "id": tx.id,
        "status": status_text(tx.status),
        "owner": tx.owner,
        "external_id": text_or_null(&tx.external_id),
        "pipeline": text_or_null(&tx.pipeline),
        "node_group": tx.node_group,
        "state": text_or_null(&tx.state),
        "event": text_or_null(&tx.event),
        "progress": text_or_null(&tx.progress),
        "metadata": {
            "webhook_url": text_or_null(&metadata.webhook_url),
            "progress_reports": metadata.progress_reports,
            "cancel_webhook_on_longpoll": metadata.cancel_webhook_on_longpoll,
        },
        "cancel_requested": tx.cancel_requested,
        "created_at_ms": tx.created_at_ms,
        "queue": queue_name(tx.queue),
        "queued_at_ms": ms_or_null(tx.queued_at_ms),
        "claim": if running {
            json!({
                "worker": tx.worker,
                "token": tx.claim_token,
                "started_at_ms": tx.claim_started_at_ms,
                "deadline_ms": tx.claim_deadline_ms,
            })
        } else {
            Value::Null
        },
        "sleep": if sleeping {
            json!({
                "until_ms": tx.sleep_until_ms,
                "switch": text_or_null(&tx.sleep_switch),
                "wake_queue": queue_name(tx.wake_queue),
            })
        } else {
            Value::Null
        },
        "attempts": tx.attempts,
        "last_started_at_ms": ms_or_null(tx.last_started_at_ms),
        "completed_at_ms": ms_or_null(tx.completed_at_ms),
        "notified_at_ms": ms_or_null(tx.notified_at_ms),
        "archived_at_ms": ms_or_null(tx.archived_at_ms),
        "version": tx.version,
    })
}

/// Where a transaction is, in a few words.
fn place(tx: &Transaction, now: Option<u64>) -> String {
    let status = status_text(tx.status);
    match TxStatus::try_from(tx.status) {
        Ok(TxStatus::Queued) => format!(
            "queued (queue {}, {})",
            queue_name(tx.queue).unwrap_or("?"),
            match now {
                Some(now) => format!("waiting {}", human_ms(now.saturating_sub(tx.queued_at_ms))),
                None => format!("since {} ms", tx.queued_at_ms),
            }
        ),
        Ok(TxStatus::Running) => {
            let mut line = format!(
                "running: {} (token {}, deadline {})",
                tx.worker,
                tx.claim_token,
                relative(tx.claim_deadline_ms, now)
            );
            if tx.cancel_requested {
                line.push_str(", cancel requested");
            }
            line
        }
        Ok(TxStatus::Sleeping) => {
            let mut line = format!("sleeping until {}", relative(tx.sleep_until_ms, now));
            if !tx.sleep_switch.is_empty() {
                line.push_str(&format!(" or switch {:?} changes", tx.sleep_switch));
            }
            line.push_str(&format!(
                ", then queue {}",
                queue_name(tx.wake_queue).unwrap_or("?")
            ));
            line
        }
        _ if tx.completed_at_ms != 0 => {
            let mut line = format!("{status} (finished {})", relative(tx.completed_at_ms, now));
            if tx.archived_at_ms != 0 {
                line.push_str(", archived");
            }
            line
        }
        _ => status,
    }
}

/// One transaction for people: a field/value table.
fn transaction_table(tx: &Transaction, now: Option<u64>) -> Table {
    let mut rows = table(&["transaction", &tx.id.to_string()]);
    let mut row = |field: &str, value: String| {
        rows.add_row(vec![field.to_owned(), value]);
    };
    row("status", place(tx, now));
    row("node group", tx.node_group.clone());
    if !tx.pipeline.is_empty() {
        row("pipeline", tx.pipeline.clone());
    }
    row("owner", tx.owner.clone());
    if !tx.external_id.is_empty() {
        row("external id", tx.external_id.clone());
    }
    row("created", relative(tx.created_at_ms, now));
    row("attempts", tx.attempts.to_string());
    row("state", or_none(&tx.state).to_owned());
    if !tx.event.is_empty() {
        row("event", tx.event.clone());
    }
    if !tx.progress.is_empty() {
        row("progress", tx.progress.clone());
    }
    if let Some(metadata) = tx.metadata.as_ref().filter(|m| !m.webhook_url.is_empty()) {
        let mut options = Vec::new();
        if metadata.progress_reports {
            options.push("progress reports");
        }
        if metadata.cancel_webhook_on_longpoll {
            options.push("cancelled by a long-poll");
        }
        let options = if options.is_empty() {
            String::new()
        } else {
            format!(" ({})", options.join(", "))
        };
        row("webhook", format!("{}{options}", metadata.webhook_url));
    }
    if tx.notified_at_ms != 0 {
        row("long-poll replied", relative(tx.notified_at_ms, now));
    }
    row("version", tx.version.to_string());
    rows
}

/// Transactions, one row each.
pub(super) fn transactions_table(transactions: &[Transaction], now: Option<u64>) -> Table {
    table_of(
        &[
            "id",
            "node group",
            "pipeline",
            "status",
            "attempts",
            "owner",
            "created",
        ],
        transactions,
        |tx| {
            vec![
                tx.id.to_string(),
                tx.node_group.clone(),
                or_none(&tx.pipeline).to_owned(),
                place(tx, now),
                tx.attempts.to_string(),
                tx.owner.clone(),
                relative(tx.created_at_ms, now),
            ]
        },
    )
}

fn webhook_json(webhook: &PendingWebhook) -> Value {
    let completed = webhook.kind == i32::from(NotificationKind::Completed);
    json!({
        "event_id": webhook.event_id,
        "url": webhook.url,
        "kind": notification_kind(webhook.kind),
        "status": completed.then(|| status_text(webhook.status)),
        "attempts": webhook.attempts,
        "next_attempt_at_ms": webhook.next_attempt_at_ms,
        "last_error": text_or_null(&webhook.last_error),
    })
}

fn state_json(reply: &GetStateReply) -> Value {
    json!({
        "transaction": reply.transaction.as_ref().map(transaction_json),
        "outcome": wait_outcome(reply.outcome),
        "notification_seq": reply.notification_seq,
        "webhook_cancelled": reply.webhook_cancelled,
        "webhook": reply.webhook.as_ref().map(webhook_json),
    })
}

pub(super) fn print_state(out: &Output, reply: &GetStateReply) {
    out.emit(&state_json(reply), || {
        let now = now_ms();
        match WaitOutcome::try_from(reply.outcome) {
            Ok(WaitOutcome::Progress) => say!("Its worker reported progress."),
            Ok(WaitOutcome::Missed) => say!(
                "Notifications were dropped before this wait could see them; progress may have \
                 been missed."
            ),
            _ => {}
        }
        if let Some(tx) = &reply.transaction {
            say!("{}", transaction_table(tx, now));
        }
        if let Some(webhook) = &reply.webhook {
            let mut line = format!(
                "Webhook event {} to {} pending: {} attempt(s), next {}",
                webhook.event_id,
                webhook.url,
                webhook.attempts,
                relative(webhook.next_attempt_at_ms, now)
            );
            if !webhook.last_error.is_empty() {
                line.push_str(&format!(", last error: {}", webhook.last_error));
            }
            say!("{line}.");
        }
        if reply.webhook_cancelled {
            say!("Its pending webhook was cancelled (the long-poll replied).");
        }
        // Only a transaction in play has news to wait for.
        if reply
            .transaction
            .as_ref()
            .is_some_and(|tx| tx.completed_at_ms == 0)
        {
            say!(
                "Wait for what comes next with --wait SECONDS --after-seq {}.",
                reply.notification_seq
            );
        }
    });
}

fn cancel_outcome(reply: &CancelReply) -> String {
    match CancelOutcome::try_from(reply.outcome) {
        Ok(CancelOutcome::Aborted) => "aborted".to_owned(),
        Ok(CancelOutcome::Requested) => "requested".to_owned(),
        Ok(CancelOutcome::AlreadyRequested) => "already-requested".to_owned(),
        Ok(CancelOutcome::Finished) => "finished".to_owned(),
        Ok(CancelOutcome::Unspecified) | Err(_) => format!("outcome-{}", reply.outcome),
    }
}

pub(super) fn cancel_json(reply: &CancelReply) -> Value {
    let finished = reply.outcome == i32::from(CancelOutcome::Finished);
    json!({
        "transaction_id": reply.transaction_id,
        "outcome": cancel_outcome(reply),
        "status": finished.then(|| status_text(reply.status)),
    })
}

pub(super) fn cancel_line(reply: &CancelReply) -> String {
    let id = reply.transaction_id;
    match CancelOutcome::try_from(reply.outcome) {
        Ok(CancelOutcome::Aborted) => format!("Transaction {id} is aborted."),
        Ok(CancelOutcome::Requested) => {
            format!("Transaction {id} is running: its worker is asked to abort it.")
        }
        Ok(CancelOutcome::AlreadyRequested) => {
            format!("Transaction {id} is running and its worker was asked to abort it already.")
        }
        Ok(CancelOutcome::Finished) => format!(
            "Transaction {id} had finished already ({}); nothing changed.",
            status_text(reply.status)
        ),
        Ok(CancelOutcome::Unspecified) | Err(_) => {
            format!("Transaction {id}: {}.", cancel_outcome(reply))
        }
    }
}

fn group_json(counts: &NodeGroupCounts) -> Value {
    json!({
        "node_group": counts.node_group,
        "queued_admin": counts.queued_admin,
        "queued_out": counts.queued_out,
        "queued_in": counts.queued_in,
        "running": counts.running,
        "sleeping": counts.sleeping,
    })
}

pub(super) fn status_json(status: &PipelinesStatus) -> Value {
    let statuses: serde_json::Map<String, Value> = status
        .statuses
        .iter()
        .map(|count| (status_text(count.status), json!(count.count)))
        .collect();
    json!({
        "node_groups": status.node_groups.iter().map(group_json).collect::<Vec<_>>(),
        "more_node_groups": status.more_node_groups,
        "statuses": statuses,
        "transactions": status.transactions,
        "webhooks_pending": status.webhooks_pending,
        "notices_dropped": status.notices_dropped,
        "last_notification_seq": status.last_notification_seq,
        "config": status.config.as_ref().map(config_json),
    })
}

fn groups_table(groups: &[NodeGroupCounts]) -> Table {
    table_of(
        &["node group", "admin", "out", "in", "running", "sleeping"],
        groups,
        |group| {
            vec![
                group.node_group.clone(),
                group.queued_admin.to_string(),
                group.queued_out.to_string(),
                group.queued_in.to_string(),
                group.running.to_string(),
                group.sleeping.to_string(),
            ]
        },
    )
}

fn counts_table(status: &PipelinesStatus) -> Table {
    let mut rows = table_of(&["transactions", "count"], &status.statuses, |count| {
        vec![status_text(count.status), count.count.to_string()]
    });
    rows.add_row(vec![
        "stored".to_owned(),
        match &status.config {
            Some(config) => format!(
                "{} (at most {})",
                status.transactions, config.transactions_max
            ),
            None => status.transactions.to_string(),
        },
    ]);
    rows.add_row(vec![
        "webhooks pending".to_owned(),
        status.webhooks_pending.to_string(),
    ]);
    rows.add_row(vec![
        "notices dropped".to_owned(),
        status.notices_dropped.to_string(),
    ]);
    rows.add_row(vec![
        "last notification".to_owned(),
        status.last_notification_seq.to_string(),
    ]);
    rows
}

pub(super) fn print_status(status: &PipelinesStatus) {
    if status.node_groups.is_empty() {
        say!("No node group has transactions in play.");
    } else {
        say!("{}", groups_table(&status.node_groups));
        if status.more_node_groups {
            say!("(More node groups are busy than were listed.)");
        }
    }
    say!("{}", counts_table(status));
    if let Some(config) = &status.config {
        say!("{}", config_table(config, None));
    }
}

pub(super) fn notice_json(notice: &Notice) -> Value {
    let mut document = json!({ "id": notice.id, "at_ms": notice.at_ms });
    let kind = match &notice.kind {
        Some(notice::Kind::RetriesExhausted(given_up)) => json!({
            "kind": "retries-exhausted",
            "event_id": given_up.event_id,
            "transaction_id": given_up.transaction_id,
            "url": given_up.url,
            "attempts": given_up.attempts,
            "last_error": text_or_null(&given_up.last_error),
        }),
        Some(notice::Kind::UrlPaused(paused)) => json!({
            "kind": "url-paused",
            "url": paused.url,
            "failures": paused.failures,
            "until_ms": paused.until_ms,
        }),
        Some(notice::Kind::WebhookDropped(dropped)) => json!({
            "kind": "webhook-dropped",
            "transaction_id": dropped.transaction_id,
            "url": dropped.url,
        }),
        None => json!({ "kind": Value::Null }),
    };
    if let (Value::Object(document), Value::Object(kind)) = (&mut document, kind) {
        document.extend(kind);
    }
    document
}

/// What a notice says, in a sentence.
fn notice_text(notice: &Notice, now: Option<u64>) -> String {
    match &notice.kind {
        Some(notice::Kind::RetriesExhausted(given_up)) => format!(
            "webhook event {} of transaction {} to {} given up after {} attempt(s): {}",
            given_up.event_id,
            given_up.transaction_id,
            given_up.url,
            given_up.attempts,
            or_none(&given_up.last_error)
        ),
        Some(notice::Kind::UrlPaused(paused)) => format!(
            "{} paused until {} after {} failure(s)",
            paused.url,
            relative(paused.until_ms, now),
            paused.failures
        ),
        Some(notice::Kind::WebhookDropped(dropped)) => format!(
            "webhook of transaction {} to {} dropped: too many pending",
            dropped.transaction_id, dropped.url
        ),
        None => "(a kind of notice this version does not know)".to_owned(),
    }
}

pub(super) fn notices_table(notices: &[Notice], now: Option<u64>) -> Table {
    table_of(&["id", "when", "notice"], notices, |notice| {
        vec![
            notice.id.to_string(),
            relative(notice.at_ms, now),
            notice_text(notice, now),
        ]
    })
}

fn notification_kind(kind: i32) -> String {
    match NotificationKind::try_from(kind) {
        Ok(NotificationKind::Progress) => "progress".to_owned(),
        Ok(NotificationKind::Completed) => "completed".to_owned(),
        Ok(NotificationKind::Missed) => "missed".to_owned(),
        Ok(NotificationKind::Position) => "position".to_owned(),
        Ok(NotificationKind::Unspecified) | Err(_) => format!("kind-{kind}"),
    }
}

/// One notification as one compact JSON line.
pub(super) fn notification_json(notification: &PipelineNotification) -> Value {
    let completed = notification.kind == i32::from(NotificationKind::Completed);
    json!({
        "seq": notification.seq,
        "kind": notification_kind(notification.kind),
        "transaction_id": notification.transaction_id,
        "node_group": text_or_null(&notification.node_group),
        "at_ms": notification.at_ms,
        "status": completed.then(|| status_text(notification.status)),
    })
}

/// One notification as one line for people.
pub(super) fn notification_line(notification: &PipelineNotification) -> String {
    let seq = notification.seq;
    let id = notification.transaction_id;
    let group = &notification.node_group;
    match NotificationKind::try_from(notification.kind) {
        Ok(NotificationKind::Completed) => format!(
            "[{seq}] transaction {id} ({group}) finished: {}",
            status_text(notification.status)
        ),
        Ok(NotificationKind::Progress) => {
            format!("[{seq}] transaction {id} ({group}) reported progress")
        }
        Ok(NotificationKind::Missed) => format!(
            "[{seq}] missed: notifications up to here were dropped before they could be sent; \
             re-read the transactions you watch"
        ),
        Ok(NotificationKind::Position) => format!("[{seq}] position: read up to here"),
        Ok(NotificationKind::Unspecified) | Err(_) => format!(
            "[{seq}] transaction {id} ({group}): {}",
            notification_kind(notification.kind)
        ),
    }
}

impl Settings for PipelineConfig {
    const COMMAND: &'static str = "pipeline";
    const WHOSE: &'static str = "The pipelines'";
    const DURATIONS_SHOWN: bool = true;

    fn settings(&self) -> Vec<Setting> {
        vec![
            Setting::new("external_id_window_ms", self.external_id_window_ms, "ms"),
            Setting::new("running_timeout_ms", self.running_timeout_ms, "ms"),
            Setting::new("max_attempts", self.max_attempts, "attempts"),
            Setting::new("archive_delay_ms", self.archive_delay_ms, "ms"),
            Setting::new("archive_retention_ms", self.archive_retention_ms, "ms"),
            Setting::new("transactions_max", self.transactions_max, "transactions"),
            Setting::new(
                "webhook_backoff_base_ms",
                self.webhook_backoff_base_ms,
                "ms",
            ),
            Setting::new("webhook_backoff_cap_ms", self.webhook_backoff_cap_ms, "ms"),
            Setting::new(
                "webhook_attempts_max",
                self.webhook_attempts_max,
                "attempts",
            ),
            Setting::new("url_failure_limit", self.url_failure_limit, "failures"),
            Setting::new("url_failure_window_ms", self.url_failure_window_ms, "ms"),
            Setting::new("url_pause_ms", self.url_pause_ms, "ms"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use certus_client::{StatusCount, TxMetadata};
    use clap::ValueEnum;

    use super::*;
    use crate::ctl::pipeline::args::Terminal;
    use crate::ctl::pipeline::testing::{DEFAULTS, transaction};

    #[test]
    fn transaction_json_has_stable_fields_and_nulls_for_absent_values() {
        let queued = Transaction {
            queue: QueueType::Out.into(),
            queued_at_ms: 2_000,
            ..transaction(TxStatus::Queued)
        };
        let document = transaction_json(&queued);
        assert_eq!(document["id"], 17);
        assert_eq!(document["status"], "queued");
        assert_eq!(document["queue"], "out");
        assert_eq!(document["queued_at_ms"], 2_000);
        assert_eq!(
            document["state"], r#"{"amount":12345678901234567890}"#,
            "the document as stored, not reparsed"
        );
        for absent in [
            "external_id",
            "pipeline",
            "event",
            "progress",
            "claim",
            "sleep",
            "completed_at_ms",
            "archived_at_ms",
            "notified_at_ms",
            "last_started_at_ms",
        ] {
            assert_eq!(document[absent], Value::Null, "{absent}");
        }
        assert_eq!(document["metadata"]["webhook_url"], Value::Null);
        assert_eq!(document["metadata"]["progress_reports"], false);

        let running = Transaction {
            worker: "w-1".to_owned(),
            claim_token: 20,
            claim_started_at_ms: 3_000,
            claim_deadline_ms: 9_000,
            attempts: 1,
            ..transaction(TxStatus::Running)
        };
        let document = transaction_json(&running);
        assert_eq!(
            document["claim"],
            json!({ "worker": "w-1", "token": 20, "started_at_ms": 3_000, "deadline_ms": 9_000 })
        );
        assert_eq!(document["queue"], Value::Null);

        let sleeping = Transaction {
            sleep_until_ms: 8_000,
            sleep_switch: "bank-open".to_owned(),
            wake_queue: QueueType::Admin.into(),
            ..transaction(TxStatus::Sleeping)
        };
        assert_eq!(
            transaction_json(&sleeping)["sleep"],
            json!({ "until_ms": 8_000, "switch": "bank-open", "wake_queue": "admin" })
        );
    }

    #[test]
    fn places_say_where_a_transaction_is() {
        let now = Some(10_000);
        let queued = Transaction {
            queue: QueueType::In.into(),
            queued_at_ms: 7_500,
            ..transaction(TxStatus::Queued)
        };
        assert_eq!(place(&queued, now), "queued (queue in, waiting 2.5 s)");
        let running = Transaction {
            worker: "w-1".to_owned(),
            claim_token: 20,
            claim_deadline_ms: 15_000,
            cancel_requested: true,
            ..transaction(TxStatus::Running)
        };
        assert_eq!(
            place(&running, now),
            "running: w-1 (token 20, deadline in 5.0 s), cancel requested"
        );
        let sleeping = Transaction {
            sleep_until_ms: 12_000,
            sleep_switch: "bank-open".to_owned(),
            wake_queue: QueueType::Out.into(),
            ..transaction(TxStatus::Sleeping)
        };
        assert_eq!(
            place(&sleeping, now),
            "sleeping until in 2.0 s or switch \"bank-open\" changes, then queue out"
        );
        let done = Transaction {
            completed_at_ms: 9_000,
            archived_at_ms: 9_500,
            ..transaction(TxStatus::InternalError)
        };
        assert_eq!(
            place(&done, now),
            "internal-error (finished 1.0 s ago), archived"
        );

        let text = transaction_table(&running, now).to_string();
        assert!(text.contains("12345678901234567890"), "{text}");
        assert!(
            !text.contains("webhook"),
            "no webhook row without one: {text}"
        );
        let hooked = Transaction {
            metadata: Some(TxMetadata {
                webhook_url: "https://h/x".to_owned(),
                progress_reports: true,
                cancel_webhook_on_longpoll: false,
            }),
            ..running.clone()
        };
        let text = transaction_table(&hooked, now).to_string();
        assert!(text.contains("https://h/x (progress reports)"), "{text}");
        let list = transactions_table(&[queued, running], now).to_string();
        assert!(
            list.contains("queued (queue in") && list.contains("running: w-1"),
            "{list}"
        );
    }

    #[test]
    fn statuses_and_outcomes_have_stable_names() {
        let names: Vec<String> = (1..=8).map(status_text).collect();
        assert_eq!(
            names,
            [
                "queued",
                "running",
                "success",
                "failed",
                "aborted",
                "sleeping",
                "timeout",
                "internal-error"
            ]
        );
        assert_eq!(status_text(0), "status-0");
        assert_eq!(status_text(99), "status-99");
        for terminal in [
            Terminal::Success,
            Terminal::Failed,
            Terminal::Aborted,
            Terminal::Timeout,
            Terminal::InternalError,
        ] {
            let spelled = terminal.to_possible_value().expect("a value");
            assert_eq!(
                status_text(TxStatus::from(terminal).into()),
                spelled.get_name(),
                "the flag is spelled as the status"
            );
        }
        assert_eq!(queue_name(QueueType::Unspecified.into()), None);
        assert_eq!(wait_outcome(WaitOutcome::WaitEnded.into()), "wait-ended");
        assert_eq!(wait_outcome(7), "outcome-7");
    }

    #[test]
    fn notifications_print_one_line_each() {
        let completed = PipelineNotification {
            seq: 12,
            kind: NotificationKind::Completed.into(),
            transaction_id: 17,
            node_group: "payments".to_owned(),
            at_ms: 5_000,
            status: TxStatus::Failed.into(),
        };
        let document = notification_json(&completed);
        assert_eq!(
            document,
            json!({
                "seq": 12,
                "kind": "completed",
                "transaction_id": 17,
                "node_group": "payments",
                "at_ms": 5_000,
                "status": "failed",
            })
        );
        assert!(!document.to_string().contains('\n'), "one JSON line");
        assert_eq!(
            notification_line(&completed),
            "[12] transaction 17 (payments) finished: failed"
        );
        let progress = PipelineNotification {
            kind: NotificationKind::Progress.into(),
            status: 0,
            ..completed.clone()
        };
        assert_eq!(notification_json(&progress)["status"], Value::Null);
        assert_eq!(
            notification_line(&progress),
            "[12] transaction 17 (payments) reported progress"
        );
        let missed = PipelineNotification {
            seq: 9,
            kind: NotificationKind::Missed.into(),
            transaction_id: 0,
            node_group: String::new(),
            ..completed
        };
        assert_eq!(notification_json(&missed)["node_group"], Value::Null);
        assert!(notification_line(&missed).starts_with("[9] missed:"));
    }

    #[test]
    fn cancels_say_what_happened() {
        let finished = CancelReply {
            transaction_id: 17,
            outcome: CancelOutcome::Finished.into(),
            status: TxStatus::Success.into(),
        };
        assert_eq!(
            cancel_json(&finished),
            json!({ "transaction_id": 17, "outcome": "finished", "status": "success" })
        );
        assert_eq!(
            cancel_line(&finished),
            "Transaction 17 had finished already (success); nothing changed."
        );
        let requested = CancelReply {
            outcome: CancelOutcome::Requested.into(),
            status: 0,
            ..finished
        };
        assert_eq!(
            cancel_json(&requested),
            json!({ "transaction_id": 17, "outcome": "requested", "status": null })
        );
        assert!(cancel_line(&requested).contains("asked to abort"));
        let aborted = CancelReply {
            outcome: CancelOutcome::Aborted.into(),
            ..requested
        };
        assert_eq!(cancel_line(&aborted), "Transaction 17 is aborted.");
    }

    #[test]
    fn get_answers_show_the_outcome_and_the_pending_webhook() {
        let reply = GetStateReply {
            transaction: Some(transaction(TxStatus::Success)),
            outcome: WaitOutcome::Finished.into(),
            notification_seq: 30,
            webhook_cancelled: false,
            webhook: Some(PendingWebhook {
                event_id: 25,
                url: "https://h/x".to_owned(),
                kind: NotificationKind::Completed.into(),
                status: TxStatus::Success.into(),
                attempts: 2,
                next_attempt_at_ms: 40_000,
                last_error: "HTTP 503".to_owned(),
            }),
        };
        let document = state_json(&reply);
        assert_eq!(document["outcome"], "finished");
        assert_eq!(document["notification_seq"], 30);
        assert_eq!(document["transaction"]["status"], "success");
        assert_eq!(
            document["webhook"],
            json!({
                "event_id": 25,
                "url": "https://h/x",
                "kind": "completed",
                "status": "success",
                "attempts": 2,
                "next_attempt_at_ms": 40_000,
                "last_error": "HTTP 503",
            })
        );
        let bare = GetStateReply {
            webhook: None,
            ..reply
        };
        assert_eq!(state_json(&bare)["webhook"], Value::Null);
    }

    #[test]
    fn status_shows_groups_counts_and_config() {
        let status = PipelinesStatus {
            config: Some(DEFAULTS),
            node_groups: vec![NodeGroupCounts {
                node_group: "payments".to_owned(),
                queued_admin: 1,
                queued_out: 2,
                queued_in: 3,
                running: 4,
                sleeping: 5,
            }],
            more_node_groups: false,
            statuses: vec![
                StatusCount {
                    status: TxStatus::Queued.into(),
                    count: 6,
                },
                StatusCount {
                    status: TxStatus::InternalError.into(),
                    count: 1,
                },
            ],
            transactions: 7,
            webhooks_pending: 2,
            notices_dropped: 0,
            last_notification_seq: 41,
        };
        let document = status_json(&status);
        assert_eq!(
            document["node_groups"][0],
            json!({
                "node_group": "payments",
                "queued_admin": 1,
                "queued_out": 2,
                "queued_in": 3,
                "running": 4,
                "sleeping": 5,
            })
        );
        assert_eq!(
            document["statuses"],
            json!({ "queued": 6, "internal-error": 1 })
        );
        assert_eq!(document["transactions"], 7);
        assert_eq!(document["last_notification_seq"], 41);
        assert_eq!(document["config"]["max_attempts"], 3);
        let groups = groups_table(&status.node_groups).to_string();
        let row = groups
            .lines()
            .find(|line| line.contains("payments"))
            .expect("a row");
        assert!(row.contains('1') && row.contains('5'), "{row}");
        let counts = counts_table(&status).to_string();
        assert!(counts.contains("7 (at most 100000)"), "{counts}");
        assert!(counts.contains("internal-error"), "{counts}");
    }

    #[test]
    fn notices_name_their_kind() {
        let given_up = Notice {
            id: 3,
            at_ms: 1_000,
            kind: Some(notice::Kind::RetriesExhausted(notice::RetriesExhausted {
                event_id: 25,
                transaction_id: 17,
                url: "https://h/x".to_owned(),
                attempts: 10,
                last_error: String::new(),
            })),
        };
        assert_eq!(
            notice_json(&given_up),
            json!({
                "id": 3,
                "at_ms": 1_000,
                "kind": "retries-exhausted",
                "event_id": 25,
                "transaction_id": 17,
                "url": "https://h/x",
                "attempts": 10,
                "last_error": null,
            })
        );
        assert_eq!(
            notice_text(&given_up, Some(2_000)),
            "webhook event 25 of transaction 17 to https://h/x given up after 10 attempt(s): -"
        );
        let paused = Notice {
            id: 4,
            at_ms: 1_000,
            kind: Some(notice::Kind::UrlPaused(notice::UrlPaused {
                url: "https://h/x".to_owned(),
                failures: 5,
                until_ms: 61_000,
            })),
        };
        assert_eq!(notice_json(&paused)["kind"], "url-paused");
        assert_eq!(
            notice_text(&paused, Some(1_000)),
            "https://h/x paused until in 1 min 0 s after 5 failure(s)"
        );
        let dropped = Notice {
            id: 5,
            at_ms: 1_000,
            kind: Some(notice::Kind::WebhookDropped(notice::WebhookDropped {
                transaction_id: 18,
                url: "https://h/y".to_owned(),
            })),
        };
        assert_eq!(notice_json(&dropped)["transaction_id"], 18);
        let table = notices_table(&[given_up, paused, dropped], Some(2_000)).to_string();
        assert!(table.contains("dropped: too many pending"), "{table}");
        assert!(table.contains("1.0 s ago"), "{table}");
    }
}
