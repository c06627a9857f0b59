//! `certus.v1.Pipelines`: transaction pipelines for producers, workers and operators.
//!
//! Requests are checked here before anything is proposed — names, JSON documents, enum values,
//! missing ids and tokens, and the ranges the state machine would refuse anyway (batch size,
//! sleep length, configuration) — so a malformed request gets `INVALID_ARGUMENT` naming the field
//! and changes nothing, not even the applied index. Writes go through the replica (forwarded to
//! the leader); reads pass the read barrier. Every rule of the transaction table itself is the
//! state machine's (`certus_core::pipelines`), and its refusals map to statuses in
//! [`pipeline_status`].
//!
//! Waiting — the `GetState` long-poll and the `WatchCompletions` stream — does not poll: it
//! sleeps on openraft's data metrics, which change whenever this node applies an entry (the
//! applied state is updated before the metrics are sent), looks at the local applied state then,
//! and wakes when the node stops, so a shutdown never waits for a client.

use std::collections::VecDeque;
use std::fmt::Display;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use certus_core::limits::{
    LIST_PAGE_MAX, PIPELINE_DEQUEUE_BATCH_MAX, PIPELINE_SLEEP_MS_MAX, PIPELINE_TRANSACTIONS_MAX,
};
use certus_core::pipelines::{
    ArchiveCursor, CancelOutcome, ExternalId, GroupCounts, JsonDocument, NewTransaction, NodeGroup,
    Notice, NoticeId, NoticeKind, Notification, NotificationKind, Owner, Pipeline, PipelineName,
    QueueType, Route, SwitchName, Transaction, TransactionId, TxMetadata, TxStatus, Webhook,
    WebhookKind, WebhookUrl,
};
use certus_core::{
    ClientRequest, Command, PipelineCommand, PipelineConfig, PipelineError, PipelineReads,
    PipelineReply, Response as CommandResponse, WorkerId,
};
use certus_proto::v1;
use certus_proto::v1::pipelines_server::Pipelines;
use futures_util::Stream;
use prost::Message as _;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};

use crate::errors::{pipeline_status, status};
use crate::limits::{
    PIPELINE_LIST_REPLY_BYTES_MAX, PIPELINE_STATUS_GROUPS_MAX, PIPELINE_STREAM_PAGE_MAX,
    PIPELINE_WAIT_MAX,
};
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;
use crate::services::clients::client_request;
use crate::services::convert::page_limit;

/// `certus.v1.Pipelines` for one node.
#[derive(Debug, Clone)]
pub struct PipelinesService {
    replica: Arc<Replica>,
    /// Turns true when the node stops: long-polls and streams end then.
    stop: watch::Receiver<bool>,
}

impl PipelinesService {
    /// The pipelines service of `replica`; its waits end when `stop` turns true.
    pub fn new(replica: Arc<Replica>, stop: watch::Receiver<bool>) -> PipelinesService {
        PipelinesService { replica, stop }
    }

    async fn command(
        &self,
        client: Option<ClientRequest>,
        command: PipelineCommand,
    ) -> Result<PipelineReply, Status> {
        match self
            .replica
            .write_for(client, Command::Pipeline(command))
            .await?
        {
            CommandResponse::Pipeline(result) => result.map_err(|error| pipeline_status(&error)),
            other => Err(status(
                Code::Internal,
                "internal",
                format!("the state machine answered another command family: {other:?}"),
            )),
        }
    }

    /// A linearizable read of the pipelines: `read` gets them and this node's clock.
    async fn read<T>(&self, read: impl FnOnce(PipelineReads<'_>, u64) -> T) -> Result<T, Status> {
        Ok(self
            .replica
            .read(|state, now_ms| read(state.pipelines(), now_ms))
            .await?)
    }

    /// A read of this node's applied pipelines, without a barrier: for noticing changes.
    fn read_local<T>(&self, read: impl FnOnce(PipelineReads<'_>) -> T) -> T {
        self.replica
            .reader
            .read(|applied| read(applied.state.pipelines()))
    }
}

type NotificationStream =
    Pin<Box<dyn Stream<Item = Result<v1::PipelineNotification, Status>> + Send>>;

type ArchiveStream = Pin<Box<dyn Stream<Item = Result<v1::ArchivedTransaction, Status>> + Send>>;

#[tonic::async_trait]
impl Pipelines for PipelinesService {
    async fn define_pipeline(
        &self,
        request: Request<v1::DefinePipelineRequest>,
    ) -> Result<Response<v1::DefinePipelineReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let name = required(request.name, "name", PipelineName::new)?;
        let node_group = required(request.node_group, "node_group", NodeGroup::new)?;
        let reply = self
            .command(
                client,
                PipelineCommand::Define {
                    name: name.clone(),
                    node_group,
                },
            )
            .await?;
        let PipelineReply::Defined { previous } = reply else {
            return Err(unexpected("define", &reply));
        };
        let pipeline = self
            .read(|reads, _| reads.definition(&name).map(pipeline_to_proto))
            .await?;
        Ok(Response::new(v1::DefinePipelineReply {
            pipeline,
            previous_node_group: previous.map(|group| group.to_string()).unwrap_or_default(),
        }))
    }

    async fn delete_pipeline(
        &self,
        request: Request<v1::DeletePipelineRequest>,
    ) -> Result<Response<v1::DeletePipelineReply>, Status> {
        let client = client_request(request.metadata())?;
        let name = required(request.into_inner().name, "name", PipelineName::new)?;
        match self
            .command(client, PipelineCommand::Delete { name })
            .await?
        {
            PipelineReply::Deleted { existed } => {
                Ok(Response::new(v1::DeletePipelineReply { existed }))
            }
            other => Err(unexpected("delete", &other)),
        }
    }

    async fn list_pipelines(
        &self,
        request: Request<v1::ListPipelinesRequest>,
    ) -> Result<Response<v1::ListPipelinesReply>, Status> {
        let request = request.into_inner();
        let after = optional(request.after, "after", PipelineName::new)?;
        let limit = page_limit(request.limit);
        let mut pipelines = self
            .read(|reads, _| {
                reads
                    .definitions(after.as_ref(), limit.saturating_add(1))
                    .into_iter()
                    .map(pipeline_to_proto)
                    .collect::<Vec<_>>()
            })
            .await?;
        let more = pipelines.len() > limit;
        pipelines.truncate(limit);
        let next_after = match pipelines.last() {
            Some(last) if more => last.name.clone(),
            _ => String::new(),
        };
        Ok(Response::new(v1::ListPipelinesReply {
            pipelines,
            next_after,
        }))
    }

    async fn enqueue(
        &self,
        request: Request<v1::EnqueueRequest>,
    ) -> Result<Response<v1::EnqueueReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
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
        let new = NewTransaction {
            owner: required(request.owner, "owner", Owner::new)?,
            external_id: optional(request.external_id, "external_id", ExternalId::new)?,
            route,
            queue: queue_from_proto(request.queue, "queue")?,
            state: required(request.state, "state", JsonDocument::new)?,
            event: optional(request.event, "event", JsonDocument::new)?,
            metadata: metadata_from_proto(request.metadata)?,
        };
        match self.command(client, PipelineCommand::Enqueue(new)).await? {
            PipelineReply::Enqueued {
                transaction,
                duplicate,
            } => Ok(Response::new(v1::EnqueueReply {
                transaction_id: transaction.0,
                duplicate,
            })),
            other => Err(unexpected("enqueue", &other)),
        }
    }

    async fn get_state(
        &self,
        request: Request<v1::GetStateRequest>,
    ) -> Result<Response<v1::GetStateReply>, Status> {
        let request = request.into_inner();
        let target = Target::from_request(request.transaction_id, request.external_id)?;
        let wait = Duration::from_millis(request.wait_ms).min(PIPELINE_WAIT_MAX);
        let deadline = Instant::now() + wait;
        let mut applied = AppliedWatch::new(&self.replica, self.stop.clone());
        applied.mark();
        // The first read is linearizable: it finds the transaction, fixes where news starts, and
        // is the answer when there is news already or no wait.
        let (id, after, mut answer) = self
            .read(|reads, now_ms| {
                let id = target
                    .resolve(reads, now_ms)
                    .ok_or_else(|| target.not_found())?;
                let after = resume_point(request.after_seq, reads.last_notification_seq())?;
                Ok::<_, Status>((id, after, read_answer(reads, id, after)?))
            })
            .await??;
        // Everything up to the answer's last notification was looked at.
        let mut cursor = answer.last_seq;
        while answer.outcome == v1::WaitOutcome::WaitEnded && Instant::now() < deadline {
            match applied.wait(Some(deadline)).await {
                Wake::Stopping => return Err(stopping()),
                Wake::Deadline => {}
                Wake::Applied => {
                    applied.mark();
                    if self.read_local(|reads| look(reads, id, &mut cursor)) == Look::Nothing {
                        continue;
                    }
                }
            }
            // News in this node's state, or the end of the wait: the answer is a linearizable
            // read, from the original resume point.
            answer = self
                .read(|reads, _| read_answer(reads, id, after))
                .await??;
        }
        let mut reply = v1::GetStateReply {
            transaction: Some(answer.transaction),
            outcome: answer.outcome.into(),
            notification_seq: answer.last_seq,
            webhook_cancelled: false,
            webhook: answer.webhook,
        };
        if request.mark_replied {
            match self
                .command(None, PipelineCommand::MarkReplied { transaction: id })
                .await?
            {
                PipelineReply::Replied {
                    transaction,
                    webhook_cancelled,
                } => {
                    // The transaction may have finished since the read the outcome came from:
                    // the reply describes the transaction it carries.
                    if transaction.status().is_terminal() {
                        reply.outcome = v1::WaitOutcome::Finished.into();
                    }
                    reply.transaction = Some(transaction_to_proto(&transaction));
                    reply.webhook_cancelled = webhook_cancelled;
                    if webhook_cancelled {
                        reply.webhook = None;
                    }
                }
                other => return Err(unexpected("mark replied", &other)),
            }
        }
        Ok(Response::new(reply))
    }

    async fn cancel(
        &self,
        request: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelReply>, Status> {
        let client = client_request(request.metadata())?;
        let id = transaction_id(request.into_inner().transaction_id)?;
        match self
            .command(client, PipelineCommand::Cancel { transaction: id })
            .await?
        {
            PipelineReply::Cancelled {
                transaction,
                outcome,
            } => {
                let (outcome, finished) = match outcome {
                    CancelOutcome::Aborted => (v1::CancelOutcome::Aborted, None),
                    CancelOutcome::Requested => (v1::CancelOutcome::Requested, None),
                    CancelOutcome::AlreadyRequested => (v1::CancelOutcome::AlreadyRequested, None),
                    CancelOutcome::Finished { status } => {
                        (v1::CancelOutcome::Finished, Some(status))
                    }
                };
                Ok(Response::new(v1::CancelReply {
                    transaction_id: transaction.0,
                    outcome: outcome.into(),
                    status: finished
                        .map_or(v1::TxStatus::Unspecified, status_to_proto)
                        .into(),
                }))
            }
            other => Err(unexpected("cancel", &other)),
        }
    }

    type WatchCompletionsStream = NotificationStream;

    async fn watch_completions(
        &self,
        request: Request<v1::WatchCompletionsRequest>,
    ) -> Result<Response<Self::WatchCompletionsStream>, Status> {
        let request = request.into_inner();
        let node_group = optional(request.node_group, "node_group", NodeGroup::new)?;
        let applied = AppliedWatch::new(&self.replica, self.stop.clone());
        // Linearizable, so "from now" includes every notification of a write acknowledged
        // before the stream started; after it, this node's applied state is at least as new.
        let last_seq = self.read(|reads, _| reads.last_notification_seq()).await?;
        let cursor = resume_point(request.after_seq, last_seq)?;
        let feed = Feed {
            service: self.clone(),
            applied,
            node_group,
            include_progress: request.include_progress,
            cursor,
            buffer: VecDeque::new(),
            ended: false,
        };
        let stream = futures_util::stream::unfold(feed, Feed::next);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn dequeue(
        &self,
        request: Request<v1::DequeueRequest>,
    ) -> Result<Response<v1::DequeueReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let node_group = required(request.node_group, "node_group", NodeGroup::new)?;
        let worker = required(request.worker, "worker", WorkerId::new)?;
        in_range(
            "max",
            request.max.into(),
            1,
            PIPELINE_DEQUEUE_BATCH_MAX.into(),
        )?;
        let command = PipelineCommand::Dequeue {
            node_group,
            worker,
            max: request.max,
        };
        match self.command(client, command).await? {
            PipelineReply::Dequeued(transactions) => Ok(Response::new(v1::DequeueReply {
                transactions: transactions.iter().map(transaction_to_proto).collect(),
            })),
            other => Err(unexpected("dequeue", &other)),
        }
    }

    async fn complete(
        &self,
        request: Request<v1::CompleteTransactionRequest>,
    ) -> Result<Response<v1::CompleteTransactionReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let status = status_from_proto(request.status)?;
        if !status.is_terminal() {
            return Err(pipeline_status(&PipelineError::NotTerminal { status }));
        }
        let command = PipelineCommand::Complete {
            transaction: transaction_id(request.transaction_id)?,
            token: claim_token(request.claim_token)?,
            status,
            state: optional(request.state, "state", JsonDocument::new)?,
        };
        match self.command(client, command).await? {
            PipelineReply::Completed {
                transaction,
                status,
            } => Ok(Response::new(v1::CompleteTransactionReply {
                transaction_id: transaction.0,
                status: status_to_proto(status).into(),
            })),
            other => Err(ended_by_other_step("complete", &other)),
        }
    }

    async fn requeue(
        &self,
        request: Request<v1::RequeueRequest>,
    ) -> Result<Response<v1::RequeueReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let route =
            match request.route {
                Some(v1::requeue_request::Route::Pipeline(name)) => Some(Route::Pipeline(
                    required(name, "pipeline", PipelineName::new)?,
                )),
                Some(v1::requeue_request::Route::NodeGroup(group)) => Some(Route::NodeGroup(
                    required(group, "node_group", NodeGroup::new)?,
                )),
                None => None,
            };
        let command = PipelineCommand::Requeue {
            transaction: transaction_id(request.transaction_id)?,
            token: claim_token(request.claim_token)?,
            route,
            queue: queue_from_proto(request.queue, "queue")?,
            state: optional(request.state, "state", JsonDocument::new)?,
            event: optional(request.event, "event", JsonDocument::new)?,
        };
        match self.command(client, command).await? {
            PipelineReply::Requeued {
                transaction,
                node_group,
                queue,
            } => Ok(Response::new(v1::RequeueReply {
                transaction_id: transaction.0,
                node_group: node_group.to_string(),
                queue: queue_to_proto(queue).into(),
            })),
            other => Err(ended_by_other_step("requeue", &other)),
        }
    }

    async fn progress(
        &self,
        request: Request<v1::ProgressRequest>,
    ) -> Result<Response<v1::ProgressReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let command = PipelineCommand::Progress {
            transaction: transaction_id(request.transaction_id)?,
            token: claim_token(request.claim_token)?,
            report: required(request.report, "report", JsonDocument::new)?,
        };
        match self.command(client, command).await? {
            PipelineReply::ProgressRecorded {
                transaction,
                deadline_ms,
                cancel_requested,
            } => Ok(Response::new(v1::ProgressReply {
                transaction_id: transaction.0,
                claim_deadline_ms: deadline_ms,
                cancel_requested,
            })),
            other => Err(unexpected("progress", &other)),
        }
    }

    async fn sleep(
        &self,
        request: Request<v1::SleepRequest>,
    ) -> Result<Response<v1::SleepReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let until_ms = match request.wake {
            Some(v1::sleep_request::Wake::UntilMs(until_ms)) => until_ms,
            Some(v1::sleep_request::Wake::ForMs(for_ms)) => {
                in_range("for_ms", for_ms, 0, PIPELINE_SLEEP_MS_MAX)?;
                self.replica.clock.now_ms().saturating_add(for_ms)
            }
            None => {
                return Err(invalid(
                    "wake",
                    "missing: give until_ms or for_ms (a switch alone could sleep forever)",
                ));
            }
        };
        let command = PipelineCommand::Sleep {
            transaction: transaction_id(request.transaction_id)?,
            token: claim_token(request.claim_token)?,
            until_ms,
            switch: optional(request.switch, "switch", SwitchName::new)?,
            queue: queue_from_proto(request.queue, "queue")?,
            state: optional(request.state, "state", JsonDocument::new)?,
        };
        match self.command(client, command).await? {
            PipelineReply::Sleeping {
                transaction,
                until_ms,
            } => Ok(Response::new(v1::SleepReply {
                transaction_id: transaction.0,
                until_ms,
            })),
            other => Err(ended_by_other_step("sleep", &other)),
        }
    }

    async fn set_switch(
        &self,
        request: Request<v1::SetSwitchRequest>,
    ) -> Result<Response<v1::SetSwitchReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let name = required(request.name, "name", SwitchName::new)?;
        let command = PipelineCommand::SetSwitch {
            name,
            value: request.value,
        };
        match self.command(client, command).await? {
            PipelineReply::SwitchSet { changed, woken } => Ok(Response::new(v1::SetSwitchReply {
                changed,
                woken: woken.into_iter().map(|id| id.0).collect(),
            })),
            other => Err(unexpected("set switch", &other)),
        }
    }

    async fn get_switch(
        &self,
        request: Request<v1::GetSwitchRequest>,
    ) -> Result<Response<v1::GetSwitchReply>, Status> {
        let name = required(request.into_inner().name, "name", SwitchName::new)?;
        let value = self.read(|reads, _| reads.switch(&name)).await?;
        Ok(Response::new(v1::GetSwitchReply { value }))
    }

    async fn list_in_play(
        &self,
        request: Request<v1::ListInPlayRequest>,
    ) -> Result<Response<v1::ListTransactionsReply>, Status> {
        let request = request.into_inner();
        let node_group = required(request.node_group, "node_group", NodeGroup::new)?;
        let after = (request.after != 0).then_some(TransactionId(request.after));
        let limit = page_limit(request.limit);
        let reply = self
            .read(|reads, _| {
                transaction_page(
                    reads.in_play(&node_group, after, limit.saturating_add(1)),
                    limit,
                )
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn list_stuck(
        &self,
        request: Request<v1::ListStuckRequest>,
    ) -> Result<Response<v1::ListTransactionsReply>, Status> {
        let request = request.into_inner();
        let limit = page_limit(request.limit);
        let reply = self
            .read(|reads, now_ms| {
                let stuck = reads.stuck(request.min_running_ms, now_ms, limit.saturating_add(1));
                transaction_page(stuck, limit)
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn status(
        &self,
        request: Request<v1::PipelinesStatusRequest>,
    ) -> Result<Response<v1::PipelinesStatus>, Status> {
        let node_group = optional(
            request.into_inner().node_group,
            "node_group",
            NodeGroup::new,
        )?;
        let reply = self
            .read(|reads, _| {
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
                v1::PipelinesStatus {
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
                }
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn list_notices(
        &self,
        request: Request<v1::ListNoticesRequest>,
    ) -> Result<Response<v1::ListNoticesReply>, Status> {
        let request = request.into_inner();
        let after = (request.after != 0).then_some(NoticeId(request.after));
        let limit = page_limit(request.limit);
        let (mut notices, dropped) = self
            .read(|reads, _| {
                let notices: Vec<v1::Notice> = reads
                    .notices(after, limit.saturating_add(1))
                    .into_iter()
                    .map(notice_to_proto)
                    .collect();
                (notices, reads.notices_dropped())
            })
            .await?;
        let more = notices.len() > limit;
        notices.truncate(limit);
        let next_after = match notices.last() {
            Some(last) if more => last.id,
            _ => 0,
        };
        Ok(Response::new(v1::ListNoticesReply {
            notices,
            dropped,
            next_after,
        }))
    }

    async fn acknowledge_notices(
        &self,
        request: Request<v1::AcknowledgeNoticesRequest>,
    ) -> Result<Response<v1::AcknowledgeNoticesReply>, Status> {
        let client = client_request(request.metadata())?;
        let up_to = request.into_inner().up_to;
        if up_to == 0 {
            return Err(invalid(
                "up_to",
                "missing: pass the id of the last notice read (0 names no notice)",
            ));
        }
        match self
            .command(
                client,
                PipelineCommand::AcknowledgeNotices {
                    up_to: NoticeId(up_to),
                },
            )
            .await?
        {
            PipelineReply::NoticesAcknowledged { removed } => {
                Ok(Response::new(v1::AcknowledgeNoticesReply {
                    removed: removed as u64,
                }))
            }
            other => Err(unexpected("acknowledge notices", &other)),
        }
    }

    type ExportArchiveStream = ArchiveStream;

    async fn export_archive(
        &self,
        request: Request<v1::ExportArchiveRequest>,
    ) -> Result<Response<Self::ExportArchiveStream>, Status> {
        let request = request.into_inner();
        in_range(
            "limit",
            request.limit.into(),
            1,
            PIPELINE_TRANSACTIONS_MAX as u64,
        )?;
        let after = request.after.map(|cursor| ArchiveCursor {
            archived_at_ms: cursor.archived_at_ms,
            transaction: TransactionId(cursor.transaction_id),
        });
        let mut export = Export {
            service: self.clone(),
            after,
            left: request.limit as usize,
            buffer: VecDeque::new(),
            ended: false,
        };
        // The first page is read before the stream starts, so a cursor from nowhere or a
        // cluster that cannot answer is the call's error, not the stream's.
        export.fill(true).await?;
        let stream = futures_util::stream::unfold(export, Export::next);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_config(
        &self,
        _request: Request<v1::GetPipelineConfigRequest>,
    ) -> Result<Response<v1::PipelineConfig>, Status> {
        let config = self
            .read(|reads, _| config_to_proto(reads.config()))
            .await?;
        Ok(Response::new(config))
    }

    async fn set_config(
        &self,
        request: Request<v1::SetPipelineConfigRequest>,
    ) -> Result<Response<v1::PipelineConfig>, Status> {
        let client = client_request(request.metadata())?;
        let config = request
            .into_inner()
            .config
            .ok_or_else(|| invalid("config", "missing"))?;
        let config = config_from_proto(&config);
        config.validate().map_err(|error| pipeline_status(&error))?;
        match self
            .command(client, PipelineCommand::Configure(config))
            .await?
        {
            PipelineReply::Configured => {}
            other => return Err(unexpected("configure", &other)),
        }
        let now = self
            .read(|reads, _| config_to_proto(reads.config()))
            .await?;
        Ok(Response::new(now))
    }
}

// ---- waiting ----------------------------------------------------------------------------

/// Where a wait for notifications starts: after `after_seq`, which cannot be beyond the latest
/// notification `last_seq`; absent, after the latest.
fn resume_point(after_seq: Option<u64>, last_seq: u64) -> Result<u64, Status> {
    match after_seq {
        None => Ok(last_seq),
        Some(after) if after > last_seq => Err(pipeline_status(&PipelineError::OutOfRange {
            field: "after_seq".to_owned(),
            got: after,
            min: 0,
            max: last_seq,
        })),
        Some(after) => Ok(after),
    }
}

fn stopping() -> Status {
    status(
        Code::Unavailable,
        "node-stopping",
        "this node is shutting down; ask another node",
    )
}

/// What a long-poll found in one look at the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// The transaction is no longer stored.
    Gone,
    /// Something to answer with.
    News(v1::WaitOutcome),
    /// Nothing yet.
    Nothing,
}

/// Looks for news of transaction `id` in the notifications after `cursor`, and moves `cursor`
/// past what it read (so the next look reads only what is new).
fn look(reads: PipelineReads<'_>, id: TransactionId, cursor: &mut u64) -> Look {
    let Some(tx) = reads.transaction(id) else {
        return Look::Gone;
    };
    if tx.status().is_terminal() {
        return Look::News(v1::WaitOutcome::Finished);
    }
    loop {
        let page = reads.notifications_after(*cursor, None, LIST_PAGE_MAX);
        if page.missed {
            return Look::News(v1::WaitOutcome::Missed);
        }
        if page.notifications.iter().any(|n| n.transaction == id) {
            return Look::News(v1::WaitOutcome::Progress);
        }
        match page.notifications.last() {
            Some(last) if page.notifications.len() == LIST_PAGE_MAX => *cursor = last.seq,
            _ => {
                *cursor = (*cursor).max(page.last_seq);
                return Look::Nothing;
            }
        }
    }
}

/// A long-poll's answer, read from one state.
struct Answer {
    transaction: v1::Transaction,
    outcome: v1::WaitOutcome,
    last_seq: u64,
    webhook: Option<v1::PendingWebhook>,
}

fn read_answer(reads: PipelineReads<'_>, id: TransactionId, after: u64) -> Result<Answer, Status> {
    let Some(tx) = reads.transaction(id) else {
        return Err(pipeline_status(&PipelineError::UnknownTransaction {
            transaction: id,
        }));
    };
    let mut cursor = after;
    let outcome = match look(reads, id, &mut cursor) {
        Look::News(outcome) => outcome,
        Look::Gone | Look::Nothing => v1::WaitOutcome::WaitEnded,
    };
    Ok(Answer {
        transaction: transaction_to_proto(tx),
        outcome,
        last_seq: reads.last_notification_seq(),
        webhook: reads.webhook_for(id).map(webhook_to_proto),
    })
}

/// Which transaction a `GetState` asks for.
enum Target {
    Id(TransactionId),
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

    fn resolve(&self, reads: PipelineReads<'_>, now_ms: u64) -> Option<TransactionId> {
        match self {
            Target::Id(id) => reads.transaction(*id).map(|tx| tx.id),
            Target::External(external_id) => reads
                .transaction_by_external_id(external_id, now_ms)
                .map(|tx| tx.id),
        }
    }

    fn not_found(&self) -> Status {
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

/// A completion stream's state between two items: what it has read but not sent (at most one
/// page), and where it goes on reading.
struct Feed {
    service: PipelinesService,
    applied: AppliedWatch,
    node_group: Option<NodeGroup>,
    include_progress: bool,
    /// The number of the last notification read (sent, or skipped as not asked for).
    cursor: u64,
    buffer: VecDeque<v1::PipelineNotification>,
    /// The stream has sent its last item.
    ended: bool,
}

impl Feed {
    async fn next(mut self) -> Option<(Result<v1::PipelineNotification, Status>, Feed)> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(item) = self.buffer.pop_front() {
                return Some((Ok(item), self));
            }
            self.applied.mark();
            let (cursor, items) = self.service.read_local(|reads| {
                stream_page(
                    reads,
                    self.cursor,
                    self.node_group.as_ref(),
                    self.include_progress,
                )
            });
            self.cursor = cursor;
            self.buffer.extend(items);
            if !self.buffer.is_empty() {
                continue;
            }
            match self.applied.wait(None).await {
                Wake::Applied | Wake::Deadline => {}
                Wake::Stopping => {
                    self.ended = true;
                    return Some((Err(stopping()), self));
                }
            }
        }
    }
}

/// What a stream sends after `cursor`: up to [`PIPELINE_STREAM_PAGE_MAX`] notifications of
/// `node_group` (progress reports only if asked for), preceded by a `MISSED` marker when the
/// record no longer reaches back to `cursor`; and the cursor after them.
fn stream_page(
    reads: PipelineReads<'_>,
    cursor: u64,
    node_group: Option<&NodeGroup>,
    include_progress: bool,
) -> (u64, Vec<v1::PipelineNotification>) {
    let mut items = Vec::new();
    let mut cursor = cursor;
    let mut page = reads.notifications_after(cursor, node_group, PIPELINE_STREAM_PAGE_MAX);
    if page.missed {
        // Resume just before the oldest notification kept (of any group), and say so first.
        let oldest = reads.notifications_after(cursor, None, 1);
        cursor = oldest
            .notifications
            .first()
            .map_or(oldest.last_seq, |first| first.seq - 1);
        items.push(v1::PipelineNotification {
            seq: cursor,
            kind: v1::NotificationKind::Missed.into(),
            ..v1::PipelineNotification::default()
        });
        page = reads.notifications_after(cursor, node_group, PIPELINE_STREAM_PAGE_MAX);
    }
    // A full page may have more after it; a short one read everything up to the last number.
    cursor = match page.notifications.last() {
        Some(last) if page.notifications.len() == PIPELINE_STREAM_PAGE_MAX => last.seq,
        _ => cursor.max(page.last_seq),
    };
    items.extend(
        page.notifications
            .into_iter()
            .filter(|n| include_progress || n.kind != NotificationKind::Progress)
            .map(notification_to_proto),
    );
    (cursor, items)
}

/// An archive export's state between two items: what it has read but not sent (at most one
/// page), where it goes on reading, and how many it may still send.
struct Export {
    service: PipelinesService,
    /// The cursor of the last transaction read (`None`: none read yet, from the oldest).
    after: Option<ArchiveCursor>,
    /// How many more it may read.
    left: usize,
    buffer: VecDeque<v1::ArchivedTransaction>,
    /// The end of the archive was read, or an error sent: nothing more is read.
    ended: bool,
}

impl Export {
    async fn next(mut self) -> Option<(Result<v1::ArchivedTransaction, Status>, Export)> {
        if self.buffer.is_empty()
            && !self.ended
            && self.left > 0
            && let Err(status) = self.fill(false).await
        {
            self.ended = true;
            return Some((Err(status), self));
        }
        let item = self.buffer.pop_front()?;
        Some((Ok(item), self))
    }

    /// Reads the next page with a linearizable read. The `first` read also checks the cursor
    /// against the cluster clock.
    async fn fill(&mut self, first: bool) -> Result<(), Status> {
        if *self.service.stop.borrow() {
            return Err(stopping());
        }
        let after = self.after;
        let want = self.left.min(PIPELINE_STREAM_PAGE_MAX);
        let (items, end) = self
            .service
            .read(|reads, _| {
                if first {
                    check_cursor(after, reads.clock_ms())?;
                }
                Ok::<_, Status>(export_page(reads, after, want))
            })
            .await??;
        assert!(
            items.len() <= want && (end || !items.is_empty()),
            "an export page is bounded and only an empty one ends the export"
        );
        self.left -= items.len();
        self.ended = end;
        if let Some(last) = items.last() {
            self.after = last.cursor.map(|cursor| ArchiveCursor {
                archived_at_ms: cursor.archived_at_ms,
                transaction: TransactionId(cursor.transaction_id),
            });
        }
        self.buffer.extend(items);
        Ok(())
    }
}

/// An export cursor must lie before the cluster clock `clock_ms`: every cursor an export hands
/// out does, and the clock only grows.
fn check_cursor(after: Option<ArchiveCursor>, clock_ms: u64) -> Result<(), Status> {
    match after {
        Some(cursor) if cursor.archived_at_ms >= clock_ms => {
            Err(pipeline_status(&PipelineError::OutOfRange {
                field: "after.archived_at_ms".to_owned(),
                got: cursor.archived_at_ms,
                min: 0,
                max: clock_ms.saturating_sub(1),
            }))
        }
        _ => Ok(()),
    }
}

/// Up to `want` archived transactions after `after`, in archive order, cut earlier (after at
/// least one) once they would pass [`PIPELINE_LIST_REPLY_BYTES_MAX`]; and whether the end of
/// the archive was read (fewer than `want` found, all taken). Converts only what is sent: this
/// runs under the state's read lock.
fn export_page(
    reads: PipelineReads<'_>,
    after: Option<ArchiveCursor>,
    want: usize,
) -> (Vec<v1::ArchivedTransaction>, bool) {
    let found = reads.archived(after, want);
    let mut items = Vec::new();
    let mut bytes = 0usize;
    for tx in &found {
        let cursor = ArchiveCursor::after(tx).expect("the archive holds archived transactions");
        let item = v1::ArchivedTransaction {
            transaction: Some(transaction_to_proto(tx)),
            cursor: Some(v1::ArchiveCursor {
                archived_at_ms: cursor.archived_at_ms,
                transaction_id: cursor.transaction.0,
            }),
        };
        let len = item.encoded_len();
        if !items.is_empty() && bytes + len > PIPELINE_LIST_REPLY_BYTES_MAX {
            return (items, false);
        }
        bytes += len;
        items.push(item);
    }
    let end = found.len() < want;
    (items, end)
}

// ---- requests -----------------------------------------------------------------------------

fn invalid(field: &str, error: impl Display) -> Status {
    status(
        Code::InvalidArgument,
        "invalid-argument",
        format!("{field}: {error}"),
    )
}

fn unexpected(what: &str, reply: &PipelineReply) -> Status {
    status(
        Code::Internal,
        "internal",
        format!("{what} answered {reply:?}"),
    )
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

/// A required text field (empty gets the type's own "is empty" error).
fn required<T, E: Display>(
    value: String,
    field: &str,
    parse: impl FnOnce(String) -> Result<T, E>,
) -> Result<T, Status> {
    parse(value).map_err(|error| invalid(field, error))
}

/// An optional text field: empty means absent.
fn optional<T, E: Display>(
    value: String,
    field: &str,
    parse: impl FnOnce(String) -> Result<T, E>,
) -> Result<Option<T>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    required(value, field, parse).map(Some)
}

/// A number the state machine bounds, checked here so a bad one is never proposed; the refusal
/// reads as the state machine's would.
fn in_range(field: &str, got: u64, min: u64, max: u64) -> Result<(), Status> {
    if (min..=max).contains(&got) {
        return Ok(());
    }
    Err(pipeline_status(&PipelineError::OutOfRange {
        field: field.to_owned(),
        got,
        min,
        max,
    }))
}

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

fn queue_from_proto(queue: i32, field: &str) -> Result<QueueType, Status> {
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

fn status_from_proto(value: i32) -> Result<TxStatus, Status> {
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

fn config_from_proto(config: &v1::PipelineConfig) -> PipelineConfig {
    PipelineConfig {
        external_id_window_ms: config.external_id_window_ms,
        running_timeout_ms: config.running_timeout_ms,
        max_attempts: config.max_attempts,
        archive_delay_ms: config.archive_delay_ms,
        archive_retention_ms: config.archive_retention_ms,
        transactions_max: config.transactions_max,
        webhook_backoff_base_ms: config.webhook_backoff_base_ms,
        webhook_backoff_cap_ms: config.webhook_backoff_cap_ms,
        webhook_attempts_max: config.webhook_attempts_max,
        url_failure_limit: config.url_failure_limit,
        url_failure_window_ms: config.url_failure_window_ms,
        url_pause_ms: config.url_pause_ms,
    }
}

// ---- replies ------------------------------------------------------------------------------

/// A page of transactions: at most `limit`, cut earlier (after at least one) once the reply
/// would pass [`PIPELINE_LIST_REPLY_BYTES_MAX`]. `found` holds up to `limit + 1`, so a page that
/// was not cut knows whether more follow. Converts only what is sent: this runs under the
/// state's read lock.
fn transaction_page(found: Vec<&Transaction>, limit: usize) -> v1::ListTransactionsReply {
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

fn status_to_proto(status: TxStatus) -> v1::TxStatus {
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

fn queue_to_proto(queue: QueueType) -> v1::QueueType {
    match queue {
        QueueType::Admin => v1::QueueType::Admin,
        QueueType::Out => v1::QueueType::Out,
        QueueType::In => v1::QueueType::In,
    }
}

fn text(value: Option<&impl Display>) -> String {
    value.map(ToString::to_string).unwrap_or_default()
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

fn pipeline_to_proto(pipeline: &Pipeline) -> v1::Pipeline {
    v1::Pipeline {
        name: pipeline.name.to_string(),
        node_group: pipeline.node_group.to_string(),
        defined_at_ms: pipeline.defined_at_ms,
    }
}

fn group_counts(node_group: &NodeGroup, counts: &GroupCounts) -> v1::NodeGroupCounts {
    v1::NodeGroupCounts {
        node_group: node_group.to_string(),
        queued_admin: counts.in_queue(QueueType::Admin) as u64,
        queued_out: counts.in_queue(QueueType::Out) as u64,
        queued_in: counts.in_queue(QueueType::In) as u64,
        running: counts.running as u64,
        sleeping: counts.sleeping as u64,
    }
}

fn notification_to_proto(notification: &Notification) -> v1::PipelineNotification {
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

fn webhook_to_proto(webhook: &Webhook) -> v1::PendingWebhook {
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

fn notice_to_proto(notice: &Notice) -> v1::Notice {
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

fn config_to_proto(config: &PipelineConfig) -> v1::PipelineConfig {
    v1::PipelineConfig {
        external_id_window_ms: config.external_id_window_ms,
        running_timeout_ms: config.running_timeout_ms,
        max_attempts: config.max_attempts,
        archive_delay_ms: config.archive_delay_ms,
        archive_retention_ms: config.archive_retention_ms,
        transactions_max: config.transactions_max,
        webhook_backoff_base_ms: config.webhook_backoff_base_ms,
        webhook_backoff_cap_ms: config.webhook_backoff_cap_ms,
        webhook_attempts_max: config.webhook_attempts_max,
        url_failure_limit: config.url_failure_limit,
        url_failure_window_ms: config.url_failure_window_ms,
        url_pause_ms: config.url_pause_ms,
    }
}

#[cfg(test)]
mod tests {
    use certus_core::limits::PIPELINE_NOTIFICATIONS_MAX;
    use certus_core::{Stamp, State, apply};

    use super::*;

    /// A state machine driven directly, one command per log entry.
    struct Machine {
        state: State,
        index: u64,
    }

    impl Machine {
        fn new() -> Machine {
            Machine {
                state: State::new(),
                index: 0,
            }
        }

        fn run(&mut self, command: PipelineCommand) -> PipelineReply {
            self.index += 1;
            let stamp = Stamp::new(self.index, 1_000_000 + self.index);
            match apply(&mut self.state, Command::Pipeline(command), stamp) {
                CommandResponse::Pipeline(Ok(reply)) => reply,
                other => panic!("refused: {other:?}"),
            }
        }

        fn tick(&mut self) {
            self.index += 1;
            let stamp = Stamp::new(self.index, 1_000_000 + self.index);
            apply(&mut self.state, Command::Tick, stamp);
        }

        /// Enqueues a transaction for `group` and dequeues it; returns its id and token.
        fn running(&mut self, group: &str) -> (TransactionId, u64) {
            let group = NodeGroup::new(group).expect("group");
            let PipelineReply::Enqueued { transaction, .. } =
                self.run(PipelineCommand::Enqueue(NewTransaction {
                    owner: Owner::new("o").expect("owner"),
                    external_id: None,
                    route: Route::NodeGroup(group.clone()),
                    queue: QueueType::In,
                    state: JsonDocument::new("{}").expect("json"),
                    event: None,
                    metadata: TxMetadata::default(),
                }))
            else {
                panic!("not enqueued");
            };
            let PipelineReply::Dequeued(taken) = self.run(PipelineCommand::Dequeue {
                node_group: group,
                worker: WorkerId::new("w").expect("worker"),
                max: 1,
            }) else {
                panic!("not dequeued");
            };
            assert_eq!(taken.len(), 1);
            (transaction, taken[0].claim().expect("claimed").token)
        }

        fn progress(&mut self, id: TransactionId, token: u64) {
            self.run(PipelineCommand::Progress {
                transaction: id,
                token,
                report: JsonDocument::new("1").expect("json"),
            });
        }

        fn complete(&mut self, id: TransactionId, token: u64) {
            self.run(PipelineCommand::Complete {
                transaction: id,
                token,
                status: TxStatus::Success,
                state: None,
            });
        }
    }

    fn kinds(items: &[v1::PipelineNotification]) -> Vec<(v1::NotificationKind, u64, u64)> {
        items
            .iter()
            .map(|item| (item.kind(), item.seq, item.transaction_id))
            .collect()
    }

    #[test]
    fn a_stream_page_filters_by_group_and_kind_and_moves_past_what_it_read() {
        let mut machine = Machine::new();
        let (a, a_token) = machine.running("a");
        let (b, b_token) = machine.running("b");
        machine.progress(a, a_token); // 1
        machine.complete(b, b_token); // 2
        machine.complete(a, a_token); // 3
        let reads = machine.state.pipelines();
        let group_a = NodeGroup::new("a").expect("group");

        let (cursor, items) = stream_page(reads, 0, Some(&group_a), false);
        assert_eq!(kinds(&items), [(v1::NotificationKind::Completed, 3, a.0)]);
        assert_eq!(items[0].status(), v1::TxStatus::Success);
        assert_eq!(items[0].node_group, "a");
        assert_eq!(cursor, 3, "everything up to the last number was read");

        let (cursor, items) = stream_page(reads, 0, Some(&group_a), true);
        assert_eq!(
            kinds(&items),
            [
                (v1::NotificationKind::Progress, 1, a.0),
                (v1::NotificationKind::Completed, 3, a.0)
            ]
        );
        assert_eq!(cursor, 3);

        let (cursor, items) = stream_page(reads, 1, None, false);
        assert_eq!(
            kinds(&items),
            [
                (v1::NotificationKind::Completed, 2, b.0),
                (v1::NotificationKind::Completed, 3, a.0)
            ]
        );
        assert_eq!(cursor, 3);

        let (cursor, items) = stream_page(reads, 3, None, true);
        assert!(items.is_empty());
        assert_eq!(cursor, 3, "caught up: the cursor stays");
    }

    #[test]
    fn a_stream_that_fell_behind_the_record_is_told_first_and_resumes_from_the_oldest_kept() {
        let mut machine = Machine::new();
        let (id, token) = machine.running("g");
        let reports = PIPELINE_NOTIFICATIONS_MAX + PIPELINE_STREAM_PAGE_MAX + 10;
        for _ in 0..reports {
            machine.progress(id, token);
        }
        let last = reports as u64;
        let oldest_kept = last - PIPELINE_NOTIFICATIONS_MAX as u64 + 1;
        let reads = machine.state.pipelines();
        assert_eq!(reads.last_notification_seq(), last);

        let (cursor, items) = stream_page(reads, 5, None, true);
        assert_eq!(
            kinds(&items[..2]),
            [
                (v1::NotificationKind::Missed, oldest_kept - 1, 0),
                (v1::NotificationKind::Progress, oldest_kept, id.0)
            ]
        );
        assert_eq!(
            items.len(),
            1 + PIPELINE_STREAM_PAGE_MAX,
            "one full page after the marker"
        );
        assert_eq!(
            cursor,
            oldest_kept - 1 + PIPELINE_STREAM_PAGE_MAX as u64,
            "a full page resumes after its last item"
        );
        // The next page goes on without another marker, in order.
        let (_, next) = stream_page(reads, cursor, None, true);
        assert_eq!(next[0].kind(), v1::NotificationKind::Progress);
        assert_eq!(next[0].seq, cursor + 1);

        // Filtered out entirely (another group): the marker still comes, and the cursor moves to
        // the end so the stream waits for news.
        let other = NodeGroup::new("other").expect("group");
        let (cursor, items) = stream_page(reads, 5, Some(&other), true);
        assert_eq!(
            kinds(&items),
            [(v1::NotificationKind::Missed, oldest_kept - 1, 0)]
        );
        assert_eq!(cursor, last);

        // A long-poll that far behind is told it may have missed progress.
        assert_eq!(look(reads, id, &mut 5), Look::News(v1::WaitOutcome::Missed));
        assert_eq!(
            look(reads, id, &mut (oldest_kept - 1)),
            Look::News(v1::WaitOutcome::Progress)
        );
    }

    #[test]
    fn a_long_poll_sees_news_of_its_transaction_only() {
        let mut machine = Machine::new();
        let (a, a_token) = machine.running("g");
        let (b, b_token) = machine.running("g");
        machine.progress(b, b_token); // 1
        let mut cursor = 0;
        assert_eq!(
            look(machine.state.pipelines(), a, &mut cursor),
            Look::Nothing
        );
        assert_eq!(cursor, 1, "the look read past b's report");
        machine.progress(a, a_token); // 2
        assert_eq!(
            look(machine.state.pipelines(), a, &mut cursor),
            Look::News(v1::WaitOutcome::Progress)
        );
        let mut after_report = 2;
        assert_eq!(
            look(machine.state.pipelines(), a, &mut after_report),
            Look::Nothing
        );
        machine.complete(a, a_token);
        assert_eq!(
            look(machine.state.pipelines(), a, &mut after_report),
            Look::News(v1::WaitOutcome::Finished)
        );
        assert_eq!(
            look(machine.state.pipelines(), TransactionId(999), &mut 0),
            Look::Gone
        );
    }

    #[test]
    fn transaction_pages_are_cut_by_count_and_by_size() {
        let mut machine = Machine::new();
        let big = format!("\"{}\"", "x".repeat(60 * 1024));
        for _ in 0..100 {
            machine.run(PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("o").expect("owner"),
                external_id: None,
                route: Route::NodeGroup(NodeGroup::new("g").expect("group")),
                queue: QueueType::In,
                state: JsonDocument::new(big.clone()).expect("json"),
                event: Some(JsonDocument::new(big.clone()).expect("json")),
                metadata: TxMetadata::default(),
            }));
        }
        let reads = machine.state.pipelines();
        let group = NodeGroup::new("g").expect("group");
        let page = transaction_page(reads.in_play(&group, None, 11), 10);
        assert_eq!(page.transactions.len(), 10);
        assert_eq!(page.next_after, page.transactions[9].id);
        let page = transaction_page(reads.in_play(&group, None, 1001), 1000);
        let bytes: usize = page.transactions.iter().map(|tx| tx.encoded_len()).sum();
        assert!(bytes <= PIPELINE_LIST_REPLY_BYTES_MAX, "{bytes}");
        assert!(page.transactions.len() < 100 && page.transactions.len() > 10);
        assert_eq!(page.next_after, page.transactions.last().expect("some").id);
        let rest = transaction_page(reads.in_play(&group, None, 1001), 1000);
        assert_eq!(rest, page, "the same page again: nothing changed");
        let short = transaction_page(reads.in_play(&group, None, 5), 5);
        assert_eq!(short.transactions.len(), 5);
        assert_eq!(
            short.next_after, 0,
            "all that was found fits: no next page is claimed"
        );
    }

    #[test]
    fn an_export_page_is_in_archive_order_cut_by_size_and_says_when_it_read_the_end() {
        let mut machine = Machine::new();
        machine.run(PipelineCommand::Configure(PipelineConfig {
            archive_delay_ms: 0,
            ..PipelineConfig::default()
        }));
        let big = format!("\"{}\"", "x".repeat(60 * 1024));
        for _ in 0..100 {
            let (id, token) = machine.running("g");
            machine.run(PipelineCommand::Complete {
                transaction: id,
                token,
                status: TxStatus::Success,
                state: Some(JsonDocument::new(big.clone()).expect("json")),
            });
        }
        machine.tick(); // archives all 100
        machine.tick(); // moves the clock past them
        let reads = machine.state.pipelines();
        let key = |item: &v1::ArchivedTransaction| {
            let cursor = item.cursor.expect("a cursor");
            let tx = item.transaction.as_ref().expect("a transaction");
            assert_eq!(
                (cursor.archived_at_ms, cursor.transaction_id),
                (tx.archived_at_ms, tx.id)
            );
            (cursor.archived_at_ms, cursor.transaction_id)
        };
        let cursor_of = |item: &v1::ArchivedTransaction| {
            let (archived_at_ms, id) = key(item);
            ArchiveCursor {
                archived_at_ms,
                transaction: TransactionId(id),
            }
        };

        let (page, end) = export_page(reads, None, PIPELINE_STREAM_PAGE_MAX);
        let bytes: usize = page.iter().map(|item| item.encoded_len()).sum();
        assert!(bytes <= PIPELINE_LIST_REPLY_BYTES_MAX, "{bytes}");
        assert!(page.len() > 10 && page.len() < 100, "{}", page.len());
        assert!(!end, "cut by size: more follow");
        assert!(page.windows(2).all(|pair| key(&pair[0]) < key(&pair[1])));
        let (rest, end) = export_page(reads, Some(cursor_of(&page[page.len() - 1])), 256);
        assert_eq!(page.len() + rest.len(), 100);
        assert!(end, "fewer than asked for: the end");
        assert!(key(&page[page.len() - 1]) < key(&rest[0]));
        let (short, end) = export_page(reads, None, 5);
        assert_eq!(short, page[..5]);
        assert!(!end, "as many as asked for: maybe more");
        let (none, end) = export_page(reads, Some(cursor_of(&rest[rest.len() - 1])), 5);
        assert!(none.is_empty() && end);
    }

    #[test]
    fn an_export_cursor_must_lie_before_the_cluster_clock() {
        let at = |archived_at_ms| {
            Some(ArchiveCursor {
                archived_at_ms,
                transaction: TransactionId(1),
            })
        };
        assert!(check_cursor(None, 0).is_ok());
        assert!(check_cursor(at(99), 100).is_ok());
        for (cursor, clock_ms) in [(at(100), 100), (at(u64::MAX), 100), (at(0), 0)] {
            let refused = check_cursor(cursor, clock_ms).expect_err("refused");
            assert_eq!(refused.code(), Code::InvalidArgument);
            assert_eq!(
                refused
                    .metadata()
                    .get("certus-error")
                    .and_then(|value| value.to_str().ok()),
                Some("out-of-range")
            );
            assert!(
                refused.message().contains("after.archived_at_ms"),
                "{}",
                refused.message()
            );
        }
    }
}
