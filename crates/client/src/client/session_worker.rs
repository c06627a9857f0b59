//! `Sessions/Work`: a session worker's stream. The node pushes the sessions it claims for the
//! worker, within the credit the worker grants, and answers the worker's steps on the same
//! stream; a [`SessionWorker`] holds both directions.

use std::pin::Pin;
use std::task::{Context, Poll};

use certus_proto::v1::sessions_client::SessionsClient;
use certus_proto::v1::{
    CompleteRequest, ExtendRequest, FailRequest, ReleaseClaimRequest, SessionWorkEvent,
    SessionWorkRequest, SessionWorkStart, SessionWorkStep, Stage, session_work_event,
    session_work_request, session_work_step,
};
use tokio::sync::mpsc;
use tonic::Streaming;
use tonic::codegen::tokio_stream::Stream;

use super::call::Rpc;
use crate::auth::NodeChannel;
use crate::limits::SESSION_WORKER_REQUESTS_BUFFERED_MAX;
use crate::{Client, ClientError};

/// What the node sends a worker: a session claimed for it (its claim token and deadline set;
/// it used one credit), or the answer to one of its steps.
pub use session_work_event::Kind as SessionWorkEventKind;

/// One worker's open `Work` stream ([`Client::session_worker`]).
///
/// The node pushes sessions claimed for the worker, at most as many as the credit outstanding;
/// grant more with [`SessionWorker::grant`] as work finishes. Each step is answered by a
/// [`SessionWorkEventKind::Answer`] carrying its `step_id`, possibly out of order. The stream is not
/// retried: when [`SessionWorker::next`] fails (the node stopped, the connection broke) open
/// a new one, on any node; the claims the old stream held expire at their deadlines.
#[derive(Debug)]
pub struct SessionWorker {
    requests: mpsc::Sender<SessionWorkRequest>,
    events: Streaming<SessionWorkEvent>,
}

impl Client {
    /// Opens a worker stream taking sessions from the queued `stage` for `worker`, each claim
    /// holding `visibility_ms`, with `credit` (up to 1000) to start: the node pushes up to that
    /// many sessions as they become claimable, without polling. Opening is retried like any
    /// call; a bad stage, worker, visibility or credit is refused (`invalid-argument`,
    /// `not-queued`).
    pub async fn session_worker(
        &self,
        stage: Stage,
        worker: impl Into<String>,
        visibility_ms: u64,
        credit: u32,
    ) -> Result<SessionWorker, ClientError> {
        self.call(OpenWork {
            start: SessionWorkStart {
                stage: stage.into(),
                worker: worker.into(),
                visibility_ms,
                credit,
            },
        })
        .await
    }
}

impl SessionWorker {
    /// Lets the node push `credit` more sessions (at most 1000 outstanding: more ends the
    /// stream with `invalid-argument`).
    pub async fn grant(&self, credit: u32) -> Result<(), ClientError> {
        self.send(session_work_request::Kind::Credit(credit)).await
    }

    /// Completes a claimed session (see [`Client::complete_session`]); answered under
    /// `step_id`.
    pub async fn complete(
        &self,
        step_id: u64,
        request: CompleteRequest,
    ) -> Result<(), ClientError> {
        self.step(step_id, session_work_step::Step::Complete(request))
            .await
    }

    /// Extends a claim (see [`Client::extend_claim`]); answered under `step_id` with the new
    /// deadline.
    pub async fn extend(&self, step_id: u64, request: ExtendRequest) -> Result<(), ClientError> {
        self.step(step_id, session_work_step::Step::Extend(request))
            .await
    }

    /// Gives a claimed session back (see [`Client::release_session`]); answered under
    /// `step_id`.
    pub async fn release(
        &self,
        step_id: u64,
        request: ReleaseClaimRequest,
    ) -> Result<(), ClientError> {
        self.step(step_id, session_work_step::Step::Release(request))
            .await
    }

    /// Fails a claimed session (see [`Client::fail_session`]); answered under `step_id`.
    pub async fn fail(&self, step_id: u64, request: FailRequest) -> Result<(), ClientError> {
        self.step(step_id, session_work_step::Step::Fail(request))
            .await
    }

    /// The next event; none once the node ended the stream after the worker closed its side
    /// ([`SessionWorker::close`]).
    pub async fn next(&mut self) -> Result<Option<SessionWorkEventKind>, ClientError> {
        loop {
            match self.events.message().await {
                Ok(Some(SessionWorkEvent { kind: Some(event) })) => return Ok(Some(event)),
                // An event of a kind this client does not know: skipped.
                Ok(Some(SessionWorkEvent { kind: None })) => {}
                Ok(None) => return Ok(None),
                Err(status) => return Err(ClientError::from_status(&status)),
            }
        }
    }

    /// Closes the worker's side: the node answers the steps sent, then ends the stream (read
    /// the rest with [`SessionWorker::next`]).
    pub fn close(self) -> Closing {
        Closing {
            events: self.events,
        }
    }

    async fn step(&self, step_id: u64, step: session_work_step::Step) -> Result<(), ClientError> {
        let step = SessionWorkStep {
            step_id,
            step: Some(step),
        };
        self.send(session_work_request::Kind::Step(step)).await
    }

    async fn send(&self, kind: session_work_request::Kind) -> Result<(), ClientError> {
        let request = SessionWorkRequest { kind: Some(kind) };
        self.requests
            .send(request)
            .await
            .map_err(|_| ClientError::Unavailable {
                attempts: 1,
                last_error: "the work stream has ended; its status is the next event's error"
                    .to_owned(),
                last_reason: String::new(),
                may_have_taken_effect: true,
            })
    }
}

/// A worker stream whose worker side is closed: what the node still sends.
#[derive(Debug)]
pub struct Closing {
    events: Streaming<SessionWorkEvent>,
}

impl Closing {
    /// The next event; none once the node has answered every step and ended the stream.
    pub async fn next(&mut self) -> Result<Option<SessionWorkEventKind>, ClientError> {
        loop {
            match self.events.message().await {
                Ok(Some(SessionWorkEvent { kind: Some(event) })) => return Ok(Some(event)),
                Ok(Some(SessionWorkEvent { kind: None })) => {}
                Ok(None) => return Ok(None),
                Err(status) => return Err(ClientError::from_status(&status)),
            }
        }
    }
}

/// Opening a worker stream, as a call the retry loop can make: each attempt opens a stream of
/// its own, its first message the start.
#[derive(Debug, Clone)]
struct OpenWork {
    start: SessionWorkStart,
}

impl Rpc for OpenWork {
    type Reply = SessionWorker;
    const NAME: &'static str = "Sessions/Work";

    async fn send(
        channel: NodeChannel,
        request: tonic::Request<Self>,
    ) -> Result<tonic::Response<SessionWorker>, tonic::Status> {
        let (metadata, extensions, open) = request.into_parts();
        let (requests, receiver) = mpsc::channel(SESSION_WORKER_REQUESTS_BUFFERED_MAX);
        let start = SessionWorkRequest {
            kind: Some(session_work_request::Kind::Start(open.start)),
        };
        requests
            .try_send(start)
            .expect("a new channel has room for the first message");
        let request = tonic::Request::from_parts(metadata, extensions, Requests(receiver));
        let response = SessionsClient::new(channel).work(request).await?;
        Ok(response.map(|events| SessionWorker { requests, events }))
    }
}

/// What the worker sends, as the stream the stub takes.
struct Requests(mpsc::Receiver<SessionWorkRequest>);

impl Stream for Requests {
    type Item = SessionWorkRequest;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(context)
    }
}

#[cfg(test)]
mod tests {
    use certus_proto::v1::Stage;

    use crate::client::call::testing::{assert_attempts, unreachable};

    #[tokio::test]
    async fn opening_a_worker_stream_is_retried_like_any_call() {
        let client = unreachable(3, true);
        let opened = client
            .session_worker(Stage::MakeChallenge, "w", 30_000, 1)
            .await;
        assert_attempts(opened, 3, "session_worker");
    }
}
