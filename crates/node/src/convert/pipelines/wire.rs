//! The pipelines' records for the wire: transactions, pipelines, node-group counts,
//! notifications, pending webhooks, notices, the configuration and the enums they carry.

use certus_core::PipelineConfig;
use certus_core::pipelines::{
    GroupCounts, NodeGroup, Notice, NoticeKind, Notification, NotificationKind, Pipeline,
    QueueType, Transaction, TxStatus, Webhook, WebhookKind,
};
use certus_proto::v1;
use prost::Message as _;
use tonic::Status;

use crate::convert::{invalid, text};
use crate::limits::PIPELINE_LIST_REPLY_BYTES_MAX;

/// A page of transactions: at most `limit`, cut earlier (after at least one) once the reply
/// would pass [`PIPELINE_LIST_REPLY_BYTES_MAX`]. `found` holds up to `limit + 1`, so a page that
/// was not cut knows whether more follow. Converts only what is sent: this runs under the
/// state's read lock.
pub fn transaction_page(found: Vec<&Transaction>, limit: usize) -> v1::ListTransactionsReply {
    let mut transactions = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    for tx in found {
        if transactions.len() == limit {
            more = true;
            break;
        }
        let proto = transaction_to_proto(tx);
        let len = proto.encoded_len();
        if !transactions.is_empty() && bytes + len > PIPELINE_LIST_REPLY_BYTES_MAX {
            more = true;
            break;
        }
        bytes += len;
        transactions.push(proto);
    }
    let next_after = match transactions.last() {
        Some(last) if more => last.id,
        _ => 0,
    };
    v1::ListTransactionsReply {
        transactions,
        next_after,
    }
}

/// A transaction status for the wire.
pub fn status_to_proto(status: TxStatus) -> v1::TxStatus {
    match status {
        TxStatus::Queued => v1::TxStatus::Queued,
        TxStatus::Running => v1::TxStatus::Running,
        TxStatus::Success => v1::TxStatus::Success,
        TxStatus::Failed => v1::TxStatus::Failed,
        TxStatus::Aborted => v1::TxStatus::Aborted,
        TxStatus::Sleeping => v1::TxStatus::Sleeping,
        TxStatus::Timeout => v1::TxStatus::Timeout,
        TxStatus::InternalError => v1::TxStatus::InternalError,
    }
}

/// A queue for the wire.
pub fn queue_to_proto(queue: QueueType) -> v1::QueueType {
    match queue {
        QueueType::Admin => v1::QueueType::Admin,
        QueueType::Out => v1::QueueType::Out,
        QueueType::In => v1::QueueType::In,
    }
}

/// A transaction for the wire.
pub fn transaction_to_proto(tx: &Transaction) -> v1::Transaction {
    let claim = tx.claim();
    let sleep = tx.sleep();
    v1::Transaction {
        id: tx.id.0,
        owner: tx.owner.to_string(),
        external_id: text(tx.external_id.as_ref()),
        pipeline: text(tx.pipeline.as_ref()),
        node_group: tx.node_group.to_string(),
        status: status_to_proto(tx.status()).into(),
        status_text: tx.status().to_string(),
        state: tx.state.as_str().to_owned(),
        event: tx
            .event
            .as_ref()
            .map(|event| event.as_str().to_owned())
            .unwrap_or_default(),
        metadata: Some(v1::TxMetadata {
            webhook_url: text(tx.metadata.webhook_url.as_ref()),
            progress_reports: tx.metadata.progress_reports,
            cancel_webhook_on_longpoll: tx.metadata.cancel_webhook_on_longpoll,
        }),
        progress: tx
            .progress
            .as_ref()
            .map(|report| report.as_str().to_owned())
            .unwrap_or_default(),
        cancel_requested: tx.cancel_requested(),
        created_at_ms: tx.created_at_ms,
        queue: tx
            .queued()
            .map_or(v1::QueueType::Unspecified, |entry| {
                queue_to_proto(entry.queue)
            })
            .into(),
        queued_at_ms: tx.queued().map_or(0, |entry| entry.at_ms),
        worker: text(claim.map(|claim| &claim.worker)),
        claim_token: claim.map_or(0, |claim| claim.token),
        claim_started_at_ms: claim.map_or(0, |claim| claim.started_at_ms),
        claim_deadline_ms: claim.map_or(0, |claim| claim.deadline_ms),
        sleep_until_ms: sleep.map_or(0, |sleep| sleep.until_ms),
        sleep_switch: text(sleep.and_then(|sleep| sleep.switch.as_ref())),
        wake_queue: sleep
            .map_or(v1::QueueType::Unspecified, |sleep| {
                queue_to_proto(sleep.queue)
            })
            .into(),
        attempts: tx.attempts,
        last_started_at_ms: tx.last_started_at_ms.unwrap_or(0),
        completed_at_ms: tx.completed_at_ms().unwrap_or(0),
        notified_at_ms: tx.notified_at_ms.unwrap_or(0),
        archived_at_ms: tx.archived_at_ms().unwrap_or(0),
        version: tx.version,
    }
}

/// A pipeline definition for the wire.
pub fn pipeline_to_proto(pipeline: &Pipeline) -> v1::Pipeline {
    v1::Pipeline {
        name: pipeline.name.to_string(),
        node_group: pipeline.node_group.to_string(),
        defined_at_ms: pipeline.defined_at_ms,
    }
}

/// A node group's counts for the wire.
pub fn group_counts(node_group: &NodeGroup, counts: &GroupCounts) -> v1::NodeGroupCounts {
    v1::NodeGroupCounts {
        node_group: node_group.to_string(),
        queued_admin: counts.in_queue(QueueType::Admin) as u64,
        queued_out: counts.in_queue(QueueType::Out) as u64,
        queued_in: counts.in_queue(QueueType::In) as u64,
        running: counts.running as u64,
        sleeping: counts.sleeping as u64,
    }
}

/// A notification for the wire.
pub fn notification_to_proto(notification: &Notification) -> v1::PipelineNotification {
    let (kind, status) = match notification.kind {
        NotificationKind::Progress => (v1::NotificationKind::Progress, v1::TxStatus::Unspecified),
        NotificationKind::Completed { status } => {
            (v1::NotificationKind::Completed, status_to_proto(status))
        }
    };
    v1::PipelineNotification {
        seq: notification.seq,
        kind: kind.into(),
        transaction_id: notification.transaction.0,
        node_group: notification.node_group.to_string(),
        at_ms: notification.at_ms,
        status: status.into(),
    }
}

/// A pending webhook for the wire.
pub fn webhook_to_proto(webhook: &Webhook) -> v1::PendingWebhook {
    let (kind, status) = match webhook.kind {
        WebhookKind::Progress => (v1::NotificationKind::Progress, v1::TxStatus::Unspecified),
        WebhookKind::Completed { status } => {
            (v1::NotificationKind::Completed, status_to_proto(status))
        }
    };
    v1::PendingWebhook {
        event_id: webhook.event.0,
        url: webhook.url.to_string(),
        kind: kind.into(),
        status: status.into(),
        attempts: webhook.attempts,
        next_attempt_at_ms: webhook.next_attempt_at_ms,
        last_error: text(webhook.last_error.as_ref()),
    }
}

/// An administrator's notice for the wire.
pub fn notice_to_proto(notice: &Notice) -> v1::Notice {
    use v1::notice::{Kind, RetriesExhausted, UrlPaused, WebhookDropped};
    let kind = match &notice.kind {
        NoticeKind::RetriesExhausted {
            event,
            transaction,
            url,
            attempts,
            last_error,
        } => Kind::RetriesExhausted(RetriesExhausted {
            event_id: event.0,
            transaction_id: transaction.0,
            url: url.to_string(),
            attempts: *attempts,
            last_error: text(last_error.as_ref()),
        }),
        NoticeKind::UrlPaused {
            url,
            failures,
            until_ms,
        } => Kind::UrlPaused(UrlPaused {
            url: url.to_string(),
            failures: *failures,
            until_ms: *until_ms,
        }),
        NoticeKind::WebhookDropped { transaction, url } => Kind::WebhookDropped(WebhookDropped {
            transaction_id: transaction.0,
            url: url.to_string(),
        }),
    };
    v1::Notice {
        id: notice.id.0,
        at_ms: notice.at_ms,
        kind: Some(kind),
    }
}

config_both_ways!(
    PipelineConfig,
    v1::PipelineConfig,
    config_to_proto,
    config_from_proto,
    [
        external_id_window_ms,
        running_timeout_ms,
        max_attempts,
        archive_delay_ms,
        archive_retention_ms,
        transactions_max,
        webhook_backoff_base_ms,
        webhook_backoff_cap_ms,
        webhook_attempts_max,
        url_failure_limit,
        url_failure_window_ms,
        url_pause_ms,
    ]
);

/// A queue from request field `field`.
pub fn queue_from_proto(queue: i32, field: &str) -> Result<QueueType, Status> {
    match v1::QueueType::try_from(queue) {
        Ok(v1::QueueType::Admin) => Ok(QueueType::Admin),
        Ok(v1::QueueType::Out) => Ok(QueueType::Out),
        Ok(v1::QueueType::In) => Ok(QueueType::In),
        Ok(v1::QueueType::Unspecified) | Err(_) => Err(invalid(
            field,
            format!("{queue} is not a queue (QUEUE_TYPE_ADMIN, QUEUE_TYPE_OUT, QUEUE_TYPE_IN)"),
        )),
    }
}

/// A transaction status from a request.
pub fn status_from_proto(value: i32) -> Result<TxStatus, Status> {
    let status = match v1::TxStatus::try_from(value) {
        Ok(v1::TxStatus::Queued) => TxStatus::Queued,
        Ok(v1::TxStatus::Running) => TxStatus::Running,
        Ok(v1::TxStatus::Success) => TxStatus::Success,
        Ok(v1::TxStatus::Failed) => TxStatus::Failed,
        Ok(v1::TxStatus::Aborted) => TxStatus::Aborted,
        Ok(v1::TxStatus::Sleeping) => TxStatus::Sleeping,
        Ok(v1::TxStatus::Timeout) => TxStatus::Timeout,
        Ok(v1::TxStatus::InternalError) => TxStatus::InternalError,
        Ok(v1::TxStatus::Unspecified) | Err(_) => {
            return Err(invalid(
                "status",
                format!(
                    "{value} is not a status; complete with TX_STATUS_SUCCESS, \
                     TX_STATUS_FAILED, TX_STATUS_ABORTED, TX_STATUS_TIMEOUT or \
                     TX_STATUS_INTERNAL_ERROR"
                ),
            ));
        }
    };
    Ok(status)
}
