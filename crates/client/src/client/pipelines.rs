//! `certus.v1.Pipelines`: transaction pipelines — the producers' calls, the workers' and the
//! operators'.

use std::time::Duration;

use tokio::time::Instant;

use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::{
    AcknowledgeNoticesReply, AcknowledgeNoticesRequest, ArchiveCursor, ArchivedTransaction,
    CancelReply, CancelRequest, CompleteBatchReply, CompleteBatchRequest, CompleteTransactionReply,
    CompleteTransactionRequest, DefinePipelineReply, DefinePipelineRequest, DeletePipelineReply,
    DeletePipelineRequest, DequeueReply, DequeueRequest, EnqueueBatchReply, EnqueueBatchRequest,
    EnqueueReply, EnqueueRequest, ExportArchiveRequest, GetPipelineConfigRequest, GetStateReply,
    GetStateRequest, GetSwitchReply, GetSwitchRequest, ListInPlayRequest, ListNoticesReply,
    ListNoticesRequest, ListPipelinesReply, ListPipelinesRequest, ListStuckRequest,
    ListTransactionsReply, PipelineConfig, PipelineNotification, PipelinesStatus,
    PipelinesStatusRequest, ProgressReply, ProgressRequest, RequeueReply, RequeueRequest,
    SetPipelineConfigRequest, SetSwitchReply, SetSwitchRequest, SleepReply, SleepRequest, TxStatus,
    WatchCompletionsRequest,
};
use tonic::codec::Streaming;

use super::call::rpcs;
use crate::auth::NodeChannel;
use crate::limits::{DEQUEUE_WAIT_MAX, PIPELINE_REPLY_BYTES_MAX};
use crate::{Client, ClientError};

/// A Pipelines stub on `channel` that accepts the largest replies the node sends.
pub(super) fn pipelines(channel: NodeChannel) -> PipelinesClient<NodeChannel> {
    PipelinesClient::new(channel).max_decoding_message_size(PIPELINE_REPLY_BYTES_MAX)
}

rpcs! { pipelines =>
    "Pipelines/DefinePipeline": define_pipeline(DefinePipelineRequest) -> DefinePipelineReply;
    "Pipelines/DeletePipeline": delete_pipeline(DeletePipelineRequest) -> DeletePipelineReply;
    "Pipelines/ListPipelines": list_pipelines(ListPipelinesRequest) -> ListPipelinesReply;
    "Pipelines/Enqueue": enqueue(EnqueueRequest) -> EnqueueReply;
    "Pipelines/GetState": get_state(GetStateRequest) -> GetStateReply;
    "Pipelines/Cancel": cancel(CancelRequest) -> CancelReply;
    "Pipelines/WatchCompletions":
        watch_completions(WatchCompletionsRequest) -> Streaming<PipelineNotification>;
    "Pipelines/Dequeue": dequeue(DequeueRequest) -> DequeueReply;
    "Pipelines/Complete": complete(CompleteTransactionRequest) -> CompleteTransactionReply;
    "Pipelines/EnqueueBatch": enqueue_batch(EnqueueBatchRequest) -> EnqueueBatchReply;
    "Pipelines/CompleteBatch": complete_batch(CompleteBatchRequest) -> CompleteBatchReply;
    "Pipelines/Requeue": requeue(RequeueRequest) -> RequeueReply;
    "Pipelines/Progress": progress(ProgressRequest) -> ProgressReply;
    "Pipelines/Sleep": sleep(SleepRequest) -> SleepReply;
    "Pipelines/SetSwitch": set_switch(SetSwitchRequest) -> SetSwitchReply;
    "Pipelines/GetSwitch": get_switch(GetSwitchRequest) -> GetSwitchReply;
    "Pipelines/ListInPlay": list_in_play(ListInPlayRequest) -> ListTransactionsReply;
    "Pipelines/ListStuck": list_stuck(ListStuckRequest) -> ListTransactionsReply;
    "Pipelines/Status": status(PipelinesStatusRequest) -> PipelinesStatus;
    "Pipelines/ListNotices": list_notices(ListNoticesRequest) -> ListNoticesReply;
    "Pipelines/AcknowledgeNotices":
        acknowledge_notices(AcknowledgeNoticesRequest) -> AcknowledgeNoticesReply;
    "Pipelines/ExportArchive":
        export_archive(ExportArchiveRequest) -> Streaming<ArchivedTransaction>;
    "Pipelines/GetConfig": get_config(GetPipelineConfigRequest) -> PipelineConfig;
    "Pipelines/SetConfig": set_config(SetPipelineConfigRequest) -> PipelineConfig;
}

impl Client {
    /// Defines the pipeline `name` as a name for `node_group`, or moves it there (queued
    /// transactions stay where they are). Safe to repeat. Refusals: `invalid-argument`,
    /// `too-many` (`RESOURCE_EXHAUSTED`: 1024 pipelines).
    pub async fn define_pipeline(
        &self,
        name: impl Into<String>,
        node_group: impl Into<String>,
    ) -> Result<DefinePipelineReply, ClientError> {
        self.write(DefinePipelineRequest {
            name: name.into(),
            node_group: node_group.into(),
        })
        .await
    }

    /// Deletes the pipeline `name`; refused with `pipeline-in-use` while transactions routed
    /// by it are in play. Safe to repeat (`existed` is false the second time).
    pub async fn delete_pipeline(
        &self,
        name: impl Into<String>,
    ) -> Result<DeletePipelineReply, ClientError> {
        self.write(DeletePipelineRequest { name: name.into() })
            .await
    }

    /// Pipelines in name order: at most `limit` (0 for the node's page size) after `after`
    /// (`None` for the first page).
    pub async fn list_pipelines(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<ListPipelinesReply, ClientError> {
        self.call(ListPipelinesRequest {
            after: after.unwrap_or_default().to_owned(),
            limit,
        })
        .await
    }

    /// Producer call: creates a transaction and queues it.
    ///
    /// # Retries
    ///
    /// Numbered in the client session (the default), the call is retried like every other: a
    /// retry answers the transaction the first attempt created. With an `external_id` it is also
    /// safe to repeat within the external-id window (a day by default), from any client: a
    /// repeat answers the first transaction with `duplicate: true`. Unnumbered and without an
    /// external id, a retry after an
    /// ambiguous failure could create a second transaction, so it is retried only when the node
    /// answered `no-leader` (nothing was proposed); any other failure is returned as
    /// [`ClientError::Unavailable`] and the transaction may or may not exist.
    ///
    /// Refusals include `invalid-argument` (naming the field), `unknown-pipeline`
    /// (`NOT_FOUND`) and `too-many` (`RESOURCE_EXHAUSTED`: the transaction table is full).
    pub async fn enqueue(&self, request: EnqueueRequest) -> Result<EnqueueReply, ClientError> {
        let budget = if request.external_id.is_empty() {
            self.budget().unproposed_only()
        } else {
            self.budget()
        };
        self.write_with(budget, request).await
    }

    /// Producer call: creates and queues up to 256 transactions in one Raft entry, each as
    /// [`Client::enqueue`] would, answered item by item in order (`enqueued`, or an `error`
    /// with the code and reason `enqueue` would have been refused with). Atomic per item: a
    /// refused item changes nothing and the others are enqueued. A malformed item, no item or
    /// more than 256 refuse the whole call (`invalid-argument`, `out-of-range`).
    ///
    /// # Retries
    ///
    /// Numbered in the client session (the default), retried like any call. Unnumbered, it is
    /// retried like any call only when every item has an external id (a repeat answers the
    /// first transactions as duplicates); otherwise only after `no-leader`.
    pub async fn enqueue_batch(
        &self,
        items: Vec<EnqueueRequest>,
    ) -> Result<EnqueueBatchReply, ClientError> {
        let budget = if items.iter().all(|item| !item.external_id.is_empty()) {
            self.budget()
        } else {
            self.budget().unproposed_only()
        };
        self.write_with(budget, EnqueueBatchRequest { items }).await
    }

    /// Producer call: the transaction the request names, after waiting up to its `wait_ms`
    /// (the node cuts it to 60 s) for the transaction to finish or report progress; see
    /// `GetStateRequest` for `after_seq` and `mark_replied`. Refused with `unknown-transaction`
    /// (`NOT_FOUND`) for an id never enqueued, or deleted after its archive retention.
    ///
    /// Each attempt may take `wait_ms` plus
    /// [`ClientConfig::attempt_timeout`](crate::ClientConfig::attempt_timeout), and a retry
    /// waits only for what is left. Safe to repeat (marking a reply again only sets its time
    /// again); pass `after_seq` so a retry cannot miss progress reported in between.
    pub async fn get_state(&self, request: GetStateRequest) -> Result<GetStateReply, ClientError> {
        let wait = Duration::from_millis(request.wait_ms);
        self.long_poll(wait, |wait_ms| GetStateRequest {
            wait_ms,
            ..request.clone()
        })
        .await
    }

    /// Producer or operator call: cancels transaction `id` (queued or sleeping: aborted at
    /// once; running: its worker is asked to complete it as aborted). Safe to repeat: a retry
    /// answers `ALREADY_REQUESTED`, or `FINISHED` with status `ABORTED`.
    pub async fn cancel_transaction(&self, id: u64) -> Result<CancelReply, ClientError> {
        self.write(CancelRequest { transaction_id: id }).await
    }

    /// The completions of `node_group` (`None`: of every group), and progress reports too if
    /// `include_progress`, as a stream of notifications in order: after `after_seq` (`None`:
    /// only those after the latest one when the stream starts; `Some(0)`: from the oldest
    /// kept). A `MISSED` item says notifications were dropped before they could be sent.
    ///
    /// Opening the stream is retried like any read; the stream itself is not: when it ends
    /// with an error (the node stops, the connection breaks), open it again with the `seq` of
    /// the last item received.
    pub async fn watch_completions(
        &self,
        node_group: Option<&str>,
        after_seq: Option<u64>,
        include_progress: bool,
    ) -> Result<Streaming<PipelineNotification>, ClientError> {
        self.call(WatchCompletionsRequest {
            node_group: node_group.unwrap_or_default().to_owned(),
            after_seq,
            include_progress,
            positions: false,
        })
        .await
    }

    /// [`Client::watch_completions`] with `POSITION` items: where the stream stands (the
    /// latest notification number it has read, of any node group) when it skipped
    /// notifications it does not send, at most every 100 ms, and every 5 s while idle. A
    /// watcher of one node group has caught up with a number once an item's `seq` reaches it.
    pub async fn watch_completions_with_positions(
        &self,
        node_group: Option<&str>,
        after_seq: Option<u64>,
        include_progress: bool,
    ) -> Result<Streaming<PipelineNotification>, ClientError> {
        self.call(WatchCompletionsRequest {
            node_group: node_group.unwrap_or_default().to_owned(),
            after_seq,
            include_progress,
            positions: true,
        })
        .await
    }

    /// Worker call: takes up to `max` (1 to 100) queued transactions of `node_group` for
    /// `worker` — admin queue first, then out, then in — each running under one claim token
    /// until its deadline (`running_timeout_ms` from now). An empty reply when none waits.
    ///
    /// Not safe to repeat: a dequeue whose answer was lost leaves its transactions running
    /// until the reaper takes them back at their deadline (counting an attempt). It is retried
    /// only when the node answered `no-leader` (nothing was proposed).
    pub async fn dequeue(
        &self,
        node_group: impl Into<String>,
        worker: impl Into<String>,
        max: u32,
    ) -> Result<DequeueReply, ClientError> {
        let request = DequeueRequest {
            node_group: node_group.into(),
            worker: worker.into(),
            max,
            wait_ms: 0,
        };
        self.write_with(self.budget().unproposed_only(), request)
            .await
    }

    /// Worker call: [`Client::dequeue`] that waits up to `wait` (at most 60 s) for work when
    /// none is queued: it answers as soon as transactions are queued in `node_group` (up to
    /// `max`), or empty when the wait is over. The node does not poll while it waits, and
    /// neither does this call: when another worker took the work first, it asks again for the
    /// time left.
    ///
    /// Retried as [`Client::dequeue`] is; each attempt may take `wait` longer.
    pub async fn dequeue_wait(
        &self,
        node_group: impl Into<String>,
        worker: impl Into<String>,
        max: u32,
        wait: Duration,
    ) -> Result<DequeueReply, ClientError> {
        let (node_group, worker) = (node_group.into(), worker.into());
        let until = Instant::now() + wait.min(DEQUEUE_WAIT_MAX);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let request = DequeueRequest {
                node_group: node_group.clone(),
                worker: worker.clone(),
                max,
                wait_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
            };
            let budget = self.budget().unproposed_only().waiting(left);
            let reply = self.write_with(budget, request).await?;
            // A numbered dequeue is proposed once, so it comes back empty early when another
            // worker took the work first.
            if !reply.transactions.is_empty() || Instant::now() >= until {
                return Ok(reply);
            }
        }
    }

    /// Worker call: finishes transaction `id`, claimed with `token`, with a terminal `status`
    /// and, if given, its final `state` (JSON). Safe to repeat with the same token: a retry
    /// after a lost answer gets the same answer and changes nothing. Refused with
    /// `stale-claim` (`FAILED_PRECONDITION`) when the claim ended — drop the work — and
    /// `not-terminal` for a status that is not final.
    pub async fn complete_transaction(
        &self,
        id: u64,
        token: u64,
        status: TxStatus,
        state: Option<String>,
    ) -> Result<CompleteTransactionReply, ClientError> {
        self.write(CompleteTransactionRequest {
            transaction_id: id,
            claim_token: token,
            status: status.into(),
            state: state.unwrap_or_default(),
        })
        .await
    }

    /// Worker call: finishes up to 256 transactions in one Raft entry, each as
    /// [`Client::complete_transaction`] would, answered item by item in order (`completed`, or
    /// an `error` such as `stale-claim` for that item alone). Safe to repeat: an item repeated
    /// with its token gets the same answer. A malformed item, no item or more than 256 refuse
    /// the whole call.
    pub async fn complete_batch(
        &self,
        items: Vec<CompleteTransactionRequest>,
    ) -> Result<CompleteBatchReply, ClientError> {
        self.write(CompleteBatchRequest { items }).await
    }

    /// Worker call: hands a running transaction on to a queue (see `RequeueRequest`). Safe to
    /// repeat with the same token, like [`Client::complete_transaction`]; refused with
    /// `cancel-requested` once a cancel is pending (complete it as aborted instead).
    pub async fn requeue_transaction(
        &self,
        request: RequeueRequest,
    ) -> Result<RequeueReply, ClientError> {
        self.write(request).await
    }

    /// Worker call: records a progress `report` (JSON) for transaction `id` claimed with
    /// `token`, which moves its deadline; the reply says whether a cancel is pending.
    ///
    /// A repeat would announce the report twice (to streams, long-polls and webhooks), so it
    /// is retried only when the node answered `no-leader`. Refused with `stale-claim` when the
    /// claim ended.
    pub async fn report_progress(
        &self,
        id: u64,
        token: u64,
        report: impl Into<String>,
    ) -> Result<ProgressReply, ClientError> {
        let request = ProgressRequest {
            transaction_id: id,
            claim_token: token,
            report: report.into(),
        };
        self.write_with(self.budget().unproposed_only(), request)
            .await
    }

    /// Worker call: puts a running transaction to sleep until a time or until a switch
    /// changes (see `SleepRequest`). Safe to repeat with the same token, like
    /// [`Client::complete_transaction`] (with `for_ms`, the first accepted wake time stays).
    pub async fn sleep_transaction(
        &self,
        request: SleepRequest,
    ) -> Result<SleepReply, ClientError> {
        self.write(request).await
    }

    /// Sets the switch `name` to `value`; a change wakes every transaction sleeping on it.
    /// Safe to repeat (the same value changes nothing).
    pub async fn set_switch(
        &self,
        name: impl Into<String>,
        value: u64,
    ) -> Result<SetSwitchReply, ClientError> {
        self.write(SetSwitchRequest {
            name: name.into(),
            value,
        })
        .await
    }

    /// The value of switch `name` (0 until set).
    pub async fn get_switch(&self, name: impl Into<String>) -> Result<u64, ClientError> {
        let reply = self.call(GetSwitchRequest { name: name.into() }).await?;
        Ok(reply.value)
    }

    /// The transactions in play (queued, running, sleeping) in `node_group`, in id order: at
    /// most `limit` (0 for the node's page size) with ids above `after` (0 for the first page).
    pub async fn list_in_play(
        &self,
        node_group: impl Into<String>,
        after: u64,
        limit: u32,
    ) -> Result<ListTransactionsReply, ClientError> {
        self.call(ListInPlayRequest {
            node_group: node_group.into(),
            after,
            limit,
        })
        .await
    }

    /// Transactions running for at least `min_running_ms`, longest running first, at most
    /// `limit` (0 for the node's page size).
    pub async fn list_stuck(
        &self,
        min_running_ms: u64,
        limit: u32,
    ) -> Result<ListTransactionsReply, ClientError> {
        self.call(ListStuckRequest {
            min_running_ms,
            limit,
        })
        .await
    }

    /// Queue depths of `node_group` (`None`: of every group with transactions in play),
    /// counts per status, pending webhooks and the configuration.
    pub async fn pipelines_status(
        &self,
        node_group: Option<&str>,
    ) -> Result<PipelinesStatus, ClientError> {
        self.call(PipelinesStatusRequest {
            node_group: node_group.unwrap_or_default().to_owned(),
        })
        .await
    }

    /// Administrator notices with ids above `after` (0: from the oldest), at most `limit`
    /// (0 for the node's page size).
    pub async fn list_notices(
        &self,
        after: u64,
        limit: u32,
    ) -> Result<ListNoticesReply, ClientError> {
        self.call(ListNoticesRequest { after, limit }).await
    }

    /// Drops the notices up to and including `up_to`. Safe to repeat.
    pub async fn acknowledge_notices(
        &self,
        up_to: u64,
    ) -> Result<AcknowledgeNoticesReply, ClientError> {
        self.write(AcknowledgeNoticesRequest { up_to }).await
    }

    /// The archive, for external systems: archived transactions in archive order
    /// (`archived_at_ms`, then id) after `after` (`None`: from the oldest kept), at most
    /// `limit` (1 to 1 000 000), as a stream that ends after `limit` items or at the end of
    /// the archive. Resume with the `cursor` of the last item received: paging from cursor to
    /// cursor never skips or repeats a transaction, unless retention deleted it first.
    ///
    /// Opening the stream is retried like any read; the stream itself is not: when it ends
    /// with an error, open it again after the cursor of the last item received.
    pub async fn export_archive(
        &self,
        after: Option<ArchiveCursor>,
        limit: u32,
    ) -> Result<Streaming<ArchivedTransaction>, ClientError> {
        self.call(ExportArchiveRequest { after, limit }).await
    }

    /// The pipelines' configuration in force.
    pub async fn pipeline_config(&self) -> Result<PipelineConfig, ClientError> {
        self.call(GetPipelineConfigRequest {}).await
    }

    /// Replaces the pipelines' configuration (every field; read it with
    /// [`Client::pipeline_config`] first to change only some). Answers with the configuration
    /// in force; refused with `invalid-config` naming the first field out of range. Safe to
    /// repeat.
    pub async fn set_pipeline_config(
        &self,
        config: PipelineConfig,
    ) -> Result<PipelineConfig, ClientError> {
        self.write(SetPipelineConfigRequest {
            config: Some(config),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::call::testing::{assert_attempts, unreachable};

    #[tokio::test]
    async fn pipeline_writes_not_safe_to_repeat_are_not_retried_after_a_failure() {
        // Unnumbered: the budgets of writes that must not be applied twice.
        let client = unreachable(3, false);
        let request = EnqueueRequest {
            owner: "o".to_owned(),
            state: "{}".to_owned(),
            ..EnqueueRequest::default()
        };
        let enqueue = client.enqueue(request.clone()).await;
        assert_attempts(
            enqueue,
            1,
            "an enqueue without an external id is not repeated",
        );
        let keyed = EnqueueRequest {
            external_id: "order-1".to_owned(),
            ..request.clone()
        };
        let enqueue = client.enqueue(keyed).await;
        assert_attempts(enqueue, 3, "an enqueue with an external id is retried");
        assert_attempts(client.dequeue("g", "w", 1).await, 1, "dequeue");
        assert_attempts(client.report_progress(1, 2, "{}").await, 1, "progress");
        let complete = client
            .complete_transaction(1, 2, TxStatus::Success, None)
            .await;
        assert_attempts(complete, 3, "a complete is retried");
        let batch = client.enqueue_batch(vec![request.clone()]).await;
        assert_attempts(
            batch,
            1,
            "a batch with an item without external id is not repeated",
        );
        let keyed = EnqueueRequest {
            external_id: "order-2".to_owned(),
            ..request
        };
        let batch = client.enqueue_batch(vec![keyed]).await;
        assert_attempts(
            batch,
            3,
            "a batch whose items all have external ids is retried",
        );
        let waiting = client
            .dequeue_wait("g", "w", 1, Duration::from_millis(10))
            .await;
        assert_attempts(waiting, 1, "a waiting dequeue");
        let completions = client
            .complete_batch(vec![CompleteTransactionRequest::default()])
            .await;
        assert_attempts(completions, 3, "a complete batch is retried");
    }
}
