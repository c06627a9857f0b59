//! `certus.v1.Pipelines`: transaction pipelines for producers, workers and operators.
//!
//! Each call is wiring: its conversions (and the checks before anything is proposed) are
//! [`crate::convert::pipelines`]; writes go through the replica (forwarded to the leader), reads
//! pass the read barrier. Waiting does not poll: the `GetState` and `Dequeue` long-polls are
//! `long_poll.rs`, the `WatchCompletions` and `ExportArchive` streams are `streams.rs`, the
//! worker stream `Work` is `work.rs`.

mod long_poll;
mod streams;
#[cfg(test)]
mod tests;
mod work;

use std::sync::Arc;

use crate::ordered_watch as watch;
use certus_proto::v1;
use certus_proto::v1::pipelines_server::Pipelines;
use tonic::{Request, Response, Status};

use crate::convert::clients::client_request;
use crate::convert::pipelines as convert;
use crate::convert::pipelines::batches;
use crate::raft::replica::Replica;

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
}

#[tonic::async_trait]
impl Pipelines for PipelinesService {
    async fn define_pipeline(
        &self,
        request: Request<v1::DefinePipelineRequest>,
    ) -> Result<Response<v1::DefinePipelineReply>, Status> {
        let client = client_request(request.metadata())?;
        let command = convert::define_pipeline(request.into_inner())?;
        let reply = self.replica.propose(client, command.clone()).await?;
        let definition = convert::defined(&command, reply)?;
        Ok(Response::new(self.replica.query(definition).await?))
    }

    async fn delete_pipeline(
        &self,
        request: Request<v1::DeletePipelineRequest>,
    ) -> Result<Response<v1::DeletePipelineReply>, Status> {
        self.replica
            .serve_write(request, convert::delete_pipeline, convert::pipeline_deleted)
            .await
    }

    async fn list_pipelines(
        &self,
        request: Request<v1::ListPipelinesRequest>,
    ) -> Result<Response<v1::ListPipelinesReply>, Status> {
        self.replica
            .serve_read(request, convert::list_pipelines)
            .await
    }

    async fn enqueue(
        &self,
        request: Request<v1::EnqueueRequest>,
    ) -> Result<Response<v1::EnqueueReply>, Status> {
        self.replica
            .serve_write(request, convert::enqueue, convert::enqueued)
            .await
    }

    async fn get_state(
        &self,
        request: Request<v1::GetStateRequest>,
    ) -> Result<Response<v1::GetStateReply>, Status> {
        let request = convert::get_state(request.into_inner())?;
        let (id, reply) = long_poll::get_state(&self.replica, self.stop.clone(), &request).await?;
        if !request.mark_replied {
            return Ok(Response::new(reply));
        }
        let marked = self
            .replica
            .propose(None, convert::mark_replied(id))
            .await?;
        Ok(Response::new(convert::replied(marked, reply)?))
    }

    async fn cancel(
        &self,
        request: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelReply>, Status> {
        self.replica
            .serve_write(request, convert::cancel, convert::cancelled)
            .await
    }

    async fn enqueue_batch(
        &self,
        request: Request<v1::EnqueueBatchRequest>,
    ) -> Result<Response<v1::EnqueueBatchReply>, Status> {
        self.replica
            .serve_write(request, batches::enqueue_batch, batches::enqueued_batch)
            .await
    }

    type WatchCompletionsStream = streams::NotificationStream;

    async fn watch_completions(
        &self,
        request: Request<v1::WatchCompletionsRequest>,
    ) -> Result<Response<Self::WatchCompletionsStream>, Status> {
        let request = convert::watch_completions(request.into_inner())?;
        let stream =
            streams::completions(Arc::clone(&self.replica), self.stop.clone(), request).await?;
        Ok(Response::new(stream))
    }

    async fn dequeue(
        &self,
        request: Request<v1::DequeueRequest>,
    ) -> Result<Response<v1::DequeueReply>, Status> {
        let client = client_request(request.metadata())?;
        let request = convert::dequeue_waiting(request.into_inner())?;
        if request.wait.is_zero() {
            let reply = self.replica.propose(client, request.command).await?;
            return Ok(Response::new(convert::dequeued(reply)?));
        }
        let reply = long_poll::dequeue(&self.replica, self.stop.clone(), client, request).await?;
        Ok(Response::new(reply))
    }

    async fn complete_batch(
        &self,
        request: Request<v1::CompleteBatchRequest>,
    ) -> Result<Response<v1::CompleteBatchReply>, Status> {
        self.replica
            .serve_write(request, batches::complete_batch, batches::completed_batch)
            .await
    }

    type WorkStream = work::WorkStream;

    async fn work(
        &self,
        request: Request<tonic::Streaming<v1::WorkRequest>>,
    ) -> Result<Response<Self::WorkStream>, Status> {
        let stream = work::work(
            Arc::clone(&self.replica),
            self.stop.clone(),
            request.into_inner(),
        )
        .await?;
        Ok(Response::new(stream))
    }

    async fn complete(
        &self,
        request: Request<v1::CompleteTransactionRequest>,
    ) -> Result<Response<v1::CompleteTransactionReply>, Status> {
        self.replica
            .serve_write(request, convert::complete, convert::completed)
            .await
    }

    async fn requeue(
        &self,
        request: Request<v1::RequeueRequest>,
    ) -> Result<Response<v1::RequeueReply>, Status> {
        self.replica
            .serve_write(request, convert::requeue, convert::requeued)
            .await
    }

    async fn progress(
        &self,
        request: Request<v1::ProgressRequest>,
    ) -> Result<Response<v1::ProgressReply>, Status> {
        self.replica
            .serve_write(request, convert::progress, convert::progress_recorded)
            .await
    }

    async fn sleep(
        &self,
        request: Request<v1::SleepRequest>,
    ) -> Result<Response<v1::SleepReply>, Status> {
        let now_ms = self.replica.clock.now_ms();
        self.replica
            .serve_write(
                request,
                |request| convert::sleep(request, now_ms),
                convert::sleeping,
            )
            .await
    }

    async fn set_switch(
        &self,
        request: Request<v1::SetSwitchRequest>,
    ) -> Result<Response<v1::SetSwitchReply>, Status> {
        self.replica
            .serve_write(request, convert::set_switch, convert::switch_set)
            .await
    }

    async fn get_switch(
        &self,
        request: Request<v1::GetSwitchRequest>,
    ) -> Result<Response<v1::GetSwitchReply>, Status> {
        self.replica.serve_read(request, convert::get_switch).await
    }

    async fn list_in_play(
        &self,
        request: Request<v1::ListInPlayRequest>,
    ) -> Result<Response<v1::ListTransactionsReply>, Status> {
        self.replica
            .serve_read(request, convert::list_in_play)
            .await
    }

    async fn list_stuck(
        &self,
        request: Request<v1::ListStuckRequest>,
    ) -> Result<Response<v1::ListTransactionsReply>, Status> {
        self.replica.serve_read(request, convert::list_stuck).await
    }

    async fn status(
        &self,
        request: Request<v1::PipelinesStatusRequest>,
    ) -> Result<Response<v1::PipelinesStatus>, Status> {
        self.replica.serve_read(request, convert::status_of).await
    }

    async fn list_notices(
        &self,
        request: Request<v1::ListNoticesRequest>,
    ) -> Result<Response<v1::ListNoticesReply>, Status> {
        self.replica
            .serve_read(request, convert::list_notices)
            .await
    }

    async fn acknowledge_notices(
        &self,
        request: Request<v1::AcknowledgeNoticesRequest>,
    ) -> Result<Response<v1::AcknowledgeNoticesReply>, Status> {
        self.replica
            .serve_write(
                request,
                convert::acknowledge_notices,
                convert::notices_acknowledged,
            )
            .await
    }

    type ExportArchiveStream = streams::ArchiveStream;

    async fn export_archive(
        &self,
        request: Request<v1::ExportArchiveRequest>,
    ) -> Result<Response<Self::ExportArchiveStream>, Status> {
        let request = convert::export_archive(request.into_inner())?;
        let stream = streams::export(Arc::clone(&self.replica), self.stop.clone(), request).await?;
        Ok(Response::new(stream))
    }

    async fn get_config(
        &self,
        _request: Request<v1::GetPipelineConfigRequest>,
    ) -> Result<Response<v1::PipelineConfig>, Status> {
        Ok(Response::new(self.replica.query(convert::config).await?))
    }

    async fn set_config(
        &self,
        request: Request<v1::SetPipelineConfigRequest>,
    ) -> Result<Response<v1::PipelineConfig>, Status> {
        self.replica
            .serve_write(request, convert::set_config, convert::configured)
            .await?;
        Ok(Response::new(self.replica.query(convert::config).await?))
    }
}
