//! `certus.v1.Pipelines`: transaction pipelines for producers, workers and operators.
//!
//! Names, JSON documents, enum values, missing ids and tokens, and the ranges the state machine
//! would refuse anyway (batch size, sleep length, configuration) are checked here, so a
//! malformed request gets `INVALID_ARGUMENT` naming the field. Every rule of the transaction
//! table itself is the state machine's (`certus_core::pipelines`), and its refusals map to
//! statuses in [`crate::errors::pipeline_status`]. The records the replies carry are
//! [`wire`]'s; the batches are [`batches`], the worker stream's messages [`work`].

pub mod batches;
pub mod wire;
pub mod work;

use std::time::Duration;

use certus_core::limits::{
    PIPELINE_DEQUEUE_BATCH_MAX, PIPELINE_SLEEP_MS_MAX, PIPELINE_TRANSACTIONS_MAX,
};
use certus_core::pipelines::{
    ArchiveCursor, CancelOutcome, ExternalId, JsonDocument, NewTransaction, NodeGroup, NoticeId,
    Owner, PipelineName, Route, SwitchName, TransactionId, TxCompletion, TxMetadata, TxStatus,
    WebhookUrl,
};
use certus_core::{PipelineCommand, PipelineError, PipelineReads, PipelineReply, State, WorkerId};
use certus_proto::v1;
use tonic::{Code, Status};

use crate::convert::{
    Query, in_range, invalid, optional, out_of_range, page_limit, required, unexpected,
};
use crate::errors::{pipeline_status, status};
use crate::limits::{PIPELINE_DEQUEUE_WAIT_MS_MAX, PIPELINE_STATUS_GROUPS_MAX, PIPELINE_WAIT_MAX};
use wire::{
    config_from_proto, config_to_proto, group_counts, notice_to_proto, pipeline_to_proto,
    queue_from_proto, queue_to_proto, status_from_proto, status_to_proto, transaction_page,
    transaction_to_proto,
};

/// A query over the pipelines alone.
fn pipelines<T>(read: impl FnOnce(PipelineReads<'_>, u64) -> Result<T, Status>) -> impl Query<T> {
    move |state: &State, now_ms: u64| read(state.pipelines(), now_ms)
}

// ---- definitions --------------------------------------------------------------------------

/// `DefinePipeline`.
pub fn define_pipeline(request: v1::DefinePipelineRequest) -> Result<PipelineCommand, Status> {
    Ok(PipelineCommand::Define {
        name: required(request.name, "name", PipelineName::new)?,
        node_group: required(request.node_group, "node_group", NodeGroup::new)?,
    })
}

/// `DefinePipeline`'s reply to `command`: a query for the definition as it stands now.
pub fn defined(
    command: &PipelineCommand,
    reply: PipelineReply,
) -> Result<impl Query<v1::DefinePipelineReply> + use<>, Status> {
    let (PipelineCommand::Define { name, .. }, PipelineReply::Defined { previous }) =
        (command, &reply)
    else {
        return Err(unexpected("define", &reply));
    };
    let name = name.clone();
    let previous_node_group = previous
        .as_ref()
        .map(|group| group.to_string())
        .unwrap_or_default();
    Ok(pipelines(move |reads, _| {
        Ok(v1::DefinePipelineReply {
            pipeline: reads.definition(&name).map(pipeline_to_proto),
            previous_node_group,
        })
    }))
}

/// `DeletePipeline`.
pub fn delete_pipeline(request: v1::DeletePipelineRequest) -> Result<PipelineCommand, Status> {
    Ok(PipelineCommand::Delete {
        name: required(request.name, "name", PipelineName::new)?,
    })
}

/// `DeletePipeline`'s reply.
pub fn pipeline_deleted(reply: PipelineReply) -> Result<v1::DeletePipelineReply, Status> {
    match reply {
        PipelineReply::Deleted { existed } => Ok(v1::DeletePipelineReply { existed }),
        other => Err(unexpected("delete", &other)),
    }
}

/// `ListPipelines`: a page of definitions by name.
pub fn list_pipelines(
    request: v1::ListPipelinesRequest,
) -> Result<impl Query<v1::ListPipelinesReply>, Status> {
    let after = optional(request.after, "after", PipelineName::new)?;
    let limit = page_limit(request.limit);
    Ok(pipelines(move |reads, _| {
        let mut pipelines = reads
            .definitions(after.as_ref(), limit.saturating_add(1))
            .into_iter()
            .map(pipeline_to_proto)
            .collect::<Vec<_>>();
        let more = pipelines.len() > limit;
        pipelines.truncate(limit);
        let next_after = match pipelines.last() {
            Some(last) if more => last.name.clone(),
            _ => String::new(),
        };
        Ok(v1::ListPipelinesReply {
            pipelines,
            next_after,
        })
    }))
}

// ---- the producer calls -------------------------------------------------------------------

/// `Enqueue`.
pub fn enqueue(request: v1::EnqueueRequest) -> Result<PipelineCommand, Status> {
    new_transaction(request).map(PipelineCommand::Enqueue)
}

/// The transaction an `Enqueue` (or an item of an `EnqueueBatch`) makes.
fn new_transaction(request: v1::EnqueueRequest) -> Result<NewTransaction, Status> {
    let route = match request.route {
        Some(v1::enqueue_request::Route::Pipeline(name)) => {
            Route::Pipeline(required(name, "pipeline", PipelineName::new)?)
        }
        Some(v1::enqueue_request::Route::NodeGroup(group)) => {
            Route::NodeGroup(required(group, "node_group", NodeGroup::new)?)
        }
        None => {
            return Err(invalid("route", "missing: name a pipeline or a node_group"));
        }
    };
    Ok(NewTransaction {
        owner: required(request.owner, "owner", Owner::new)?,
        external_id: optional(request.external_id, "external_id", ExternalId::new)?,
        route,
        queue: queue_from_proto(request.queue, "queue")?,
        state: required(request.state, "state", JsonDocument::new)?,
        event: optional(request.event, "event", JsonDocument::new)?,
        metadata: metadata_from_proto(request.metadata)?,
    })
}

/// `Enqueue`'s reply.
pub fn enqueued(reply: PipelineReply) -> Result<v1::EnqueueReply, Status> {
    match reply {
        PipelineReply::Enqueued {
            transaction,
            duplicate,
        } => Ok(v1::EnqueueReply {
            transaction_id: transaction.0,
            duplicate,
        }),
        other => Err(unexpected("enqueue", &other)),
    }
}

/// A `GetState`: which transaction, how long to wait for news (at most [`PIPELINE_WAIT_MAX`]),
/// after which notification, and whether to mark it replied to.
#[derive(Debug)]
pub struct GetState {
    /// The transaction asked for.
    pub target: Target,
    /// How long to wait for news.
    pub wait: Duration,
    /// News counts after this notification; none: after the latest.
    pub after_seq: Option<u64>,
    /// Whether to propose `MarkReplied` once answered.
    pub mark_replied: bool,
}

/// `GetState`.
pub fn get_state(request: v1::GetStateRequest) -> Result<GetState, Status> {
    Ok(GetState {
        target: Target::from_request(request.transaction_id, request.external_id)?,
        wait: Duration::from_millis(request.wait_ms).min(PIPELINE_WAIT_MAX),
        after_seq: request.after_seq,
        mark_replied: request.mark_replied,
    })
}

/// Which transaction a `GetState` asks for.
#[derive(Debug)]
pub enum Target {
    /// By its id.
    Id(TransactionId),
    /// By the external id it was enqueued with (within the external-id window).
    External(ExternalId),
}

impl Target {
    fn from_request(id: u64, external_id: String) -> Result<Target, Status> {
        match (id, external_id.is_empty()) {
            (0, true) => Err(invalid(
                "transaction_id",
                "missing: give transaction_id or external_id",
            )),
            (0, false) => Ok(Target::External(required(
                external_id,
                "external_id",
                ExternalId::new,
            )?)),
            (id, true) => Ok(Target::Id(TransactionId(id))),
            (_, false) => Err(invalid(
                "external_id",
                "give transaction_id or external_id, not both",
            )),
        }
    }

    /// The id of the stored transaction this names, if any.
    pub fn resolve(&self, reads: PipelineReads<'_>, now_ms: u64) -> Option<TransactionId> {
        match self {
            Target::Id(id) => reads.transaction(*id).map(|tx| tx.id),
            Target::External(external_id) => reads
                .transaction_by_external_id(external_id, now_ms)
                .map(|tx| tx.id),
        }
    }

    /// The refusal when it names no stored transaction.
    pub fn not_found(&self) -> Status {
        match self {
            Target::Id(id) => {
                pipeline_status(&PipelineError::UnknownTransaction { transaction: *id })
            }
            Target::External(external_id) => status(
                Code::NotFound,
                "unknown-transaction",
                format!(
                    "no transaction was enqueued with external id {external_id} within the \
                     external-id window; check the id"
                ),
            ),
        }
    }
}

/// The `MarkReplied` a `GetState` proposes once answered.
pub fn mark_replied(transaction: TransactionId) -> PipelineCommand {
    PipelineCommand::MarkReplied { transaction }
}

/// `GetState`'s reply `answer` after `MarkReplied` answered `reply`.
pub fn replied(
    reply: PipelineReply,
    mut answer: v1::GetStateReply,
) -> Result<v1::GetStateReply, Status> {
    match reply {
        PipelineReply::Replied {
            transaction,
            webhook_cancelled,
        } => {
            // The transaction may have finished since the read the outcome came from: the
            // reply describes the transaction it carries.
            if transaction.status().is_terminal() {
                answer.outcome = v1::WaitOutcome::Finished.into();
            }
            answer.transaction = Some(transaction_to_proto(&transaction));
            answer.webhook_cancelled = webhook_cancelled;
            if webhook_cancelled {
                answer.webhook = None;
            }
            Ok(answer)
        }
        other => Err(unexpected("mark replied", &other)),
    }
}

/// Where a wait for notifications starts: after `after_seq`, which cannot be beyond the latest
/// notification `last_seq`; absent, after the latest.
pub fn resume_point(after_seq: Option<u64>, last_seq: u64) -> Result<u64, Status> {
    match after_seq {
        None => Ok(last_seq),
        Some(after) if after > last_seq => Err(out_of_range::<PipelineCommand>(
            "after_seq",
            after,
            0,
            last_seq,
        )),
        Some(after) => Ok(after),
    }
}

/// `Cancel`.
pub fn cancel(request: v1::CancelRequest) -> Result<PipelineCommand, Status> {
    Ok(PipelineCommand::Cancel {
        transaction: transaction_id(request.transaction_id)?,
    })
}

/// `Cancel`'s reply.
pub fn cancelled(reply: PipelineReply) -> Result<v1::CancelReply, Status> {
    match reply {
        PipelineReply::Cancelled {
            transaction,
            outcome,
        } => {
            let (outcome, finished) = match outcome {
                CancelOutcome::Aborted => (v1::CancelOutcome::Aborted, None),
                CancelOutcome::Requested => (v1::CancelOutcome::Requested, None),
                CancelOutcome::AlreadyRequested => (v1::CancelOutcome::AlreadyRequested, None),
                CancelOutcome::Finished { status } => (v1::CancelOutcome::Finished, Some(status)),
            };
            Ok(v1::CancelReply {
                transaction_id: transaction.0,
                outcome: outcome.into(),
                status: finished
                    .map_or(v1::TxStatus::Unspecified, status_to_proto)
                    .into(),
            })
        }
        other => Err(unexpected("cancel", &other)),
    }
}

/// A `WatchCompletions`: of which node group (none: all), with progress reports or not, from
/// where.
#[derive(Debug)]
pub struct Watch {
    /// The node group watched; none: every group.
    pub node_group: Option<NodeGroup>,
    /// Whether progress reports are sent too.
    pub include_progress: bool,
    /// Send what follows this notification; none: from now ([`resume_point`]).
    pub after_seq: Option<u64>,
    /// Whether `POSITION` items are sent.
    pub positions: bool,
}

/// `WatchCompletions`.
pub fn watch_completions(request: v1::WatchCompletionsRequest) -> Result<Watch, Status> {
    Ok(Watch {
        node_group: optional(request.node_group, "node_group", NodeGroup::new)?,
        include_progress: request.include_progress,
        after_seq: request.after_seq,
        positions: request.positions,
    })
}

// ---- the worker calls ---------------------------------------------------------------------

/// `Dequeue`, without its wait (the fuzz target proposes it as is).
pub fn dequeue(request: v1::DequeueRequest) -> Result<PipelineCommand, Status> {
    dequeue_waiting(request).map(|dequeue| dequeue.command)
}

/// A `Dequeue`: the command, the node group whose queues it takes from, and how long to wait
/// for work when none is queued (zero: answer at once).
#[derive(Debug)]
pub struct Dequeue {
    /// The `Dequeue` command.
    pub command: PipelineCommand,
    /// Its node group, whose queues a waiting dequeue watches.
    pub node_group: NodeGroup,
    /// How long to wait for work.
    pub wait: Duration,
}

/// `Dequeue` with its wait, at most [`PIPELINE_DEQUEUE_WAIT_MS_MAX`].
pub fn dequeue_waiting(request: v1::DequeueRequest) -> Result<Dequeue, Status> {
    let node_group = required(request.node_group, "node_group", NodeGroup::new)?;
    let worker = required(request.worker, "worker", WorkerId::new)?;
    in_range::<PipelineCommand>(
        "max",
        request.max.into(),
        1,
        PIPELINE_DEQUEUE_BATCH_MAX.into(),
    )?;
    in_range::<PipelineCommand>("wait_ms", request.wait_ms, 0, PIPELINE_DEQUEUE_WAIT_MS_MAX)?;
    Ok(Dequeue {
        command: dequeue_command(node_group.clone(), worker, request.max),
        node_group,
        wait: Duration::from_millis(request.wait_ms),
    })
}

/// The `Dequeue` command for `worker` of up to `max` (already checked) of `node_group`.
pub fn dequeue_command(node_group: NodeGroup, worker: WorkerId, max: u32) -> PipelineCommand {
    PipelineCommand::Dequeue {
        node_group,
        worker,
        max,
    }
}

/// `Dequeue`'s reply.
pub fn dequeued(reply: PipelineReply) -> Result<v1::DequeueReply, Status> {
    match reply {
        PipelineReply::Dequeued(transactions) => Ok(v1::DequeueReply {
            transactions: transactions.iter().map(transaction_to_proto).collect(),
        }),
        other => Err(unexpected("dequeue", &other)),
    }
}

/// `Complete`.
pub fn complete(request: v1::CompleteTransactionRequest) -> Result<PipelineCommand, Status> {
    let completion = completion(request)?;
    Ok(PipelineCommand::Complete {
        transaction: completion.transaction,
        token: completion.token,
        status: completion.status,
        state: completion.state,
    })
}

/// What a `Complete` (or an item of a `CompleteBatch`) asks for.
fn completion(request: v1::CompleteTransactionRequest) -> Result<TxCompletion, Status> {
    let status = status_from_proto(request.status)?;
    if !status.is_terminal() {
        return Err(pipeline_status(&PipelineError::NotTerminal { status }));
    }
    Ok(TxCompletion {
        transaction: transaction_id(request.transaction_id)?,
        token: claim_token(request.claim_token)?,
        status,
        state: optional(request.state, "state", JsonDocument::new)?,
    })
}

/// `Complete`'s reply.
pub fn completed(reply: PipelineReply) -> Result<v1::CompleteTransactionReply, Status> {
    match reply {
        PipelineReply::Completed {
            transaction,
            status,
        } => Ok(v1::CompleteTransactionReply {
            transaction_id: transaction.0,
            status: status_to_proto(status).into(),
        }),
        other => Err(ended_by_other_step("complete", &other)),
    }
}

/// `Requeue`.
pub fn requeue(request: v1::RequeueRequest) -> Result<PipelineCommand, Status> {
    let route = match request.route {
        Some(v1::requeue_request::Route::Pipeline(name)) => Some(Route::Pipeline(required(
            name,
            "pipeline",
            PipelineName::new,
        )?)),
        Some(v1::requeue_request::Route::NodeGroup(group)) => Some(Route::NodeGroup(required(
            group,
            "node_group",
            NodeGroup::new,
        )?)),
        None => None,
    };
    Ok(PipelineCommand::Requeue {
        transaction: transaction_id(request.transaction_id)?,
        token: claim_token(request.claim_token)?,
        route,
        queue: queue_from_proto(request.queue, "queue")?,
        state: optional(request.state, "state", JsonDocument::new)?,
        event: optional(request.event, "event", JsonDocument::new)?,
    })
}

/// `Requeue`'s reply.
pub fn requeued(reply: PipelineReply) -> Result<v1::RequeueReply, Status> {
    match reply {
        PipelineReply::Requeued {
            transaction,
            node_group,
            queue,
        } => Ok(v1::RequeueReply {
            transaction_id: transaction.0,
            node_group: node_group.to_string(),
            queue: queue_to_proto(queue).into(),
        }),
        other => Err(ended_by_other_step("requeue", &other)),
    }
}

/// `Progress`.
pub fn progress(request: v1::ProgressRequest) -> Result<PipelineCommand, Status> {
    Ok(PipelineCommand::Progress {
        transaction: transaction_id(request.transaction_id)?,
        token: claim_token(request.claim_token)?,
        report: required(request.report, "report", JsonDocument::new)?,
    })
}

/// `Progress`' reply.
pub fn progress_recorded(reply: PipelineReply) -> Result<v1::ProgressReply, Status> {
    match reply {
        PipelineReply::ProgressRecorded {
            transaction,
            deadline_ms,
            cancel_requested,
        } => Ok(v1::ProgressReply {
            transaction_id: transaction.0,
            claim_deadline_ms: deadline_ms,
            cancel_requested,
        }),
        other => Err(unexpected("progress", &other)),
    }
}

/// `Sleep`, with `now_ms` the node's clock (a `for_ms` sleep ends that long after it).
pub fn sleep(request: v1::SleepRequest, now_ms: u64) -> Result<PipelineCommand, Status> {
    let until_ms = match request.wake {
        Some(v1::sleep_request::Wake::UntilMs(until_ms)) => until_ms,
        Some(v1::sleep_request::Wake::ForMs(for_ms)) => {
            in_range::<PipelineCommand>("for_ms", for_ms, 0, PIPELINE_SLEEP_MS_MAX)?;
            now_ms.saturating_add(for_ms)
        }
        None => {
            return Err(invalid(
                "wake",
                "missing: give until_ms or for_ms (a switch alone could sleep forever)",
            ));
        }
    };
    Ok(PipelineCommand::Sleep {
        transaction: transaction_id(request.transaction_id)?,
        token: claim_token(request.claim_token)?,
        until_ms,
        switch: optional(request.switch, "switch", SwitchName::new)?,
        queue: queue_from_proto(request.queue, "queue")?,
        state: optional(request.state, "state", JsonDocument::new)?,
    })
}

/// `Sleep`'s reply.
pub fn sleeping(reply: PipelineReply) -> Result<v1::SleepReply, Status> {
    match reply {
        PipelineReply::Sleeping {
            transaction,
            until_ms,
        } => Ok(v1::SleepReply {
            transaction_id: transaction.0,
            until_ms,
        }),
        other => Err(ended_by_other_step("sleep", &other)),
    }
}

/// A step's token replayed the reply of a different step: the claim already ended with that
/// one (a `Complete` sent with the token of an accepted `Requeue`, say), and nothing changed.
/// For the caller it is a stale claim: the transaction has moved on without this step.
fn ended_by_other_step(asked: &str, reply: &PipelineReply) -> Status {
    let (transaction, ended) = match reply {
        PipelineReply::Completed {
            transaction,
            status,
        } => (transaction, format!("completed it as {status}")),
        PipelineReply::Requeued {
            transaction,
            node_group,
            queue,
        } => (
            transaction,
            format!("handed it on to queue {queue} of {node_group}"),
        ),
        PipelineReply::Sleeping {
            transaction,
            until_ms,
        } => (transaction, format!("put it to sleep until {until_ms}")),
        other => return unexpected(asked, other),
    };
    status(
        Code::FailedPrecondition,
        "stale-claim",
        format!(
            "this claim token already ended transaction {transaction}: an earlier step \
             {ended}; this {asked} changed nothing; drop this work"
        ),
    )
}

// ---- switches and lists -------------------------------------------------------------------

/// `SetSwitch`.
pub fn set_switch(request: v1::SetSwitchRequest) -> Result<PipelineCommand, Status> {
    Ok(PipelineCommand::SetSwitch {
        name: required(request.name, "name", SwitchName::new)?,
        value: request.value,
    })
}

/// `SetSwitch`'s reply.
pub fn switch_set(reply: PipelineReply) -> Result<v1::SetSwitchReply, Status> {
    match reply {
        PipelineReply::SwitchSet { changed, woken } => Ok(v1::SetSwitchReply {
            changed,
            woken: woken.into_iter().map(|id| id.0).collect(),
        }),
        other => Err(unexpected("set switch", &other)),
    }
}

/// `GetSwitch`.
pub fn get_switch(request: v1::GetSwitchRequest) -> Result<impl Query<v1::GetSwitchReply>, Status> {
    let name = required(request.name, "name", SwitchName::new)?;
    Ok(pipelines(move |reads, _| {
        Ok(v1::GetSwitchReply {
            value: reads.switch(&name),
        })
    }))
}

/// `ListInPlay`: a page of a node group's transactions in play.
pub fn list_in_play(
    request: v1::ListInPlayRequest,
) -> Result<impl Query<v1::ListTransactionsReply>, Status> {
    let node_group = required(request.node_group, "node_group", NodeGroup::new)?;
    let after = (request.after != 0).then_some(TransactionId(request.after));
    let limit = page_limit(request.limit);
    Ok(pipelines(move |reads, _| {
        Ok(transaction_page(
            reads.in_play(&node_group, after, limit.saturating_add(1)),
            limit,
        ))
    }))
}

/// `ListStuck`: a page of the transactions running longer than asked.
pub fn list_stuck(
    request: v1::ListStuckRequest,
) -> Result<impl Query<v1::ListTransactionsReply>, Status> {
    let limit = page_limit(request.limit);
    Ok(pipelines(move |reads, now_ms| {
        let stuck = reads.stuck(request.min_running_ms, now_ms, limit.saturating_add(1));
        Ok(transaction_page(stuck, limit))
    }))
}

/// `Status`: the configuration, counts by node group (one, or up to
/// [`PIPELINE_STATUS_GROUPS_MAX`]) and by status.
pub fn status_of(
    request: v1::PipelinesStatusRequest,
) -> Result<impl Query<v1::PipelinesStatus>, Status> {
    let node_group = optional(request.node_group, "node_group", NodeGroup::new)?;
    Ok(pipelines(move |reads, _| {
        let (node_groups, more_node_groups) = match &node_group {
            Some(group) => (vec![group_counts(group, &reads.group_counts(group))], false),
            None => {
                let mut groups: Vec<_> = reads
                    .node_groups()
                    .take(PIPELINE_STATUS_GROUPS_MAX + 1)
                    .map(|(group, counts)| group_counts(group, counts))
                    .collect();
                let more = groups.len() > PIPELINE_STATUS_GROUPS_MAX;
                groups.truncate(PIPELINE_STATUS_GROUPS_MAX);
                (groups, more)
            }
        };
        Ok(v1::PipelinesStatus {
            config: Some(config_to_proto(reads.config())),
            node_groups,
            more_node_groups,
            statuses: TxStatus::ALL
                .iter()
                .map(|&status| v1::StatusCount {
                    status: status_to_proto(status).into(),
                    count: reads.status_count(status) as u64,
                })
                .collect(),
            transactions: reads.transaction_count() as u64,
            webhooks_pending: reads.webhooks_pending() as u64,
            notices_dropped: reads.notices_dropped(),
            last_notification_seq: reads.last_notification_seq(),
        })
    }))
}

// ---- notices, the archive, the configuration ----------------------------------------------

/// `ListNotices`: a page of the administrator's notices.
pub fn list_notices(
    request: v1::ListNoticesRequest,
) -> Result<impl Query<v1::ListNoticesReply>, Status> {
    let after = (request.after != 0).then_some(NoticeId(request.after));
    let limit = page_limit(request.limit);
    Ok(pipelines(move |reads, _| {
        let mut notices: Vec<v1::Notice> = reads
            .notices(after, limit.saturating_add(1))
            .into_iter()
            .map(notice_to_proto)
            .collect();
        let dropped = reads.notices_dropped();
        let more = notices.len() > limit;
        notices.truncate(limit);
        let next_after = match notices.last() {
            Some(last) if more => last.id,
            _ => 0,
        };
        Ok(v1::ListNoticesReply {
            notices,
            dropped,
            next_after,
        })
    }))
}

/// `AcknowledgeNotices`.
pub fn acknowledge_notices(
    request: v1::AcknowledgeNoticesRequest,
) -> Result<PipelineCommand, Status> {
    if request.up_to == 0 {
        return Err(invalid(
            "up_to",
            "missing: pass the id of the last notice read (0 names no notice)",
        ));
    }
    Ok(PipelineCommand::AcknowledgeNotices {
        up_to: NoticeId(request.up_to),
    })
}

/// `AcknowledgeNotices`' reply.
pub fn notices_acknowledged(reply: PipelineReply) -> Result<v1::AcknowledgeNoticesReply, Status> {
    match reply {
        PipelineReply::NoticesAcknowledged { removed } => Ok(v1::AcknowledgeNoticesReply {
            removed: removed as u64,
        }),
        other => Err(unexpected("acknowledge notices", &other)),
    }
}

/// An `ExportArchive`: after which cursor (none: from the oldest), and how many at most.
#[derive(Debug)]
pub struct Export {
    /// Export what was archived after this.
    pub after: Option<ArchiveCursor>,
    /// How many transactions at most.
    pub limit: usize,
}

/// `ExportArchive`.
pub fn export_archive(request: v1::ExportArchiveRequest) -> Result<Export, Status> {
    in_range::<PipelineCommand>(
        "limit",
        request.limit.into(),
        1,
        PIPELINE_TRANSACTIONS_MAX as u64,
    )?;
    Ok(Export {
        after: request.after.map(archive_cursor),
        limit: request.limit as usize,
    })
}

/// An archive cursor from the wire.
pub fn archive_cursor(cursor: v1::ArchiveCursor) -> ArchiveCursor {
    ArchiveCursor {
        archived_at_ms: cursor.archived_at_ms,
        transaction: TransactionId(cursor.transaction_id),
    }
}

/// An export cursor must lie before the cluster clock `clock_ms`: every cursor an export hands
/// out does, and the clock only grows.
pub fn check_cursor(after: Option<ArchiveCursor>, clock_ms: u64) -> Result<(), Status> {
    match after {
        Some(cursor) if cursor.archived_at_ms >= clock_ms => Err(out_of_range::<PipelineCommand>(
            "after.archived_at_ms",
            cursor.archived_at_ms,
            0,
            clock_ms.saturating_sub(1),
        )),
        _ => Ok(()),
    }
}

/// `GetConfig`, and `SetConfig`'s answer: the configuration now.
pub fn config(state: &State, _now_ms: u64) -> Result<v1::PipelineConfig, Status> {
    Ok(config_to_proto(state.pipelines().config()))
}

/// `SetConfig`: the configuration, validated.
pub fn set_config(request: v1::SetPipelineConfigRequest) -> Result<PipelineCommand, Status> {
    let config = request.config.ok_or_else(|| invalid("config", "missing"))?;
    let config = config_from_proto(&config);
    config.validate().map_err(|error| pipeline_status(&error))?;
    Ok(PipelineCommand::Configure(config))
}

/// `SetConfig`'s reply.
pub fn configured(reply: PipelineReply) -> Result<(), Status> {
    match reply {
        PipelineReply::Configured => Ok(()),
        other => Err(unexpected("configure", &other)),
    }
}

// ---- fields -------------------------------------------------------------------------------

fn transaction_id(id: u64) -> Result<TransactionId, Status> {
    if id == 0 {
        return Err(invalid("transaction_id", "missing: 0 names no transaction"));
    }
    Ok(TransactionId(id))
}

fn claim_token(token: u64) -> Result<u64, Status> {
    if token == 0 {
        return Err(invalid(
            "claim_token",
            "missing: pass the claim token the dequeue gave",
        ));
    }
    Ok(token)
}

fn metadata_from_proto(metadata: Option<v1::TxMetadata>) -> Result<TxMetadata, Status> {
    let Some(metadata) = metadata else {
        return Ok(TxMetadata::default());
    };
    Ok(TxMetadata {
        webhook_url: optional(
            metadata.webhook_url,
            "metadata.webhook_url",
            WebhookUrl::new,
        )?,
        progress_reports: metadata.progress_reports,
        cancel_webhook_on_longpoll: metadata.cancel_webhook_on_longpoll,
    })
}
