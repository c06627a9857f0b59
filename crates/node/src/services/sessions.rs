//! `certus.v1.Sessions`: CA issuance sessions for clients, workers and operators. Each call is
//! wiring (its conversions are [`crate::convert::sessions`]); `Wait` and a `Claim` with a wait
//! (`long_poll.rs`) are long-polls on the applied-index watch, not timers, and end when the node
//! stops; so does the `Work` stream (`work.rs`), which pushes claims to a worker as sessions
//! become claimable.

mod long_poll;
mod work;

use std::sync::Arc;

use crate::ordered_watch as watch;
use certus_core::{SessionCommand, SessionId, SessionReply};
use certus_proto::v1;
use certus_proto::v1::sessions_server::Sessions;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status};

use crate::convert::clients::client_request;
use crate::convert::sessions as convert;
use crate::errors::{status, stopping};
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;

/// `certus.v1.Sessions` for one node.
#[derive(Debug, Clone)]
pub struct SessionsService {
    replica: Arc<Replica>,
    /// Turns true when the node stops: waits end then.
    stop: watch::Receiver<bool>,
}

impl SessionsService {
    /// The sessions service of `replica`; its waits end when `stop` turns true.
    pub fn new(replica: Arc<Replica>, stop: watch::Receiver<bool>) -> SessionsService {
        SessionsService { replica, stop }
    }

    /// The session as this node sees it after a linearizable read (so it includes every write
    /// acknowledged before the read began, wherever it was made).
    async fn session(&self, id: SessionId) -> Result<v1::Session, Status> {
        self.replica.query(convert::session(id)).await
    }

    /// The session from this node's applied state, without a barrier: for noticing changes.
    fn local_session(&self, id: SessionId) -> Option<v1::Session> {
        self.replica
            .reader
            .read(|applied| applied.state.session(id).map(convert::session_to_proto))
    }

    /// The session after a write of this request was applied: a linearizable read, or — if
    /// that fails (the leader changed just after the write) — this node's applied state, so a
    /// write that happened is never reported as one that may not have.
    async fn session_after_write(&self, id: SessionId) -> Result<v1::Session, Status> {
        match self.session(id).await {
            Ok(session) => Ok(session),
            Err(read_error) => self.local_session(id).ok_or_else(|| {
                status(
                    Code::Unavailable,
                    "written-not-read",
                    format!(
                        "the change to session {id} was applied, but this node cannot read                              it back yet ({}); Get it again",
                        read_error.message()
                    ),
                )
            }),
        }
    }

    /// A write call that changes one session (`id` names it in the request) and answers with
    /// the session after it: the request converted by `command`, proposed, its reply checked by
    /// `reply`.
    async fn change<Body>(
        &self,
        request: Request<Body>,
        id: impl FnOnce(&Body) -> u64,
        command: impl FnOnce(Body) -> Result<SessionCommand, Status>,
        reply: impl FnOnce(SessionReply) -> Result<(), Status>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let request = request.into_inner();
        let id = SessionId(id(&request));
        let command = command(request)?;
        reply(self.replica.propose(client, command).await?)?;
        Ok(Response::new(self.session_after_write(id).await?))
    }
}

/// A write that answers with the session it changed: any reply of the state machine will do.
fn any_reply(_reply: SessionReply) -> Result<(), Status> {
    Ok(())
}

#[tonic::async_trait]
impl Sessions for SessionsService {
    async fn create(
        &self,
        request: Request<v1::CreateSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let client = client_request(request.metadata())?;
        let command = convert::create(request.into_inner())?;
        let id = convert::created(self.replica.propose(client, command).await?)?;
        Ok(Response::new(self.session(id).await?))
    }

    async fn get(
        &self,
        request: Request<v1::GetSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let id = SessionId(request.into_inner().id);
        Ok(Response::new(self.session(id).await?))
    }

    async fn wait(
        &self,
        request: Request<v1::WaitSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        let convert::Wait { id, wait, known } = convert::wait(request.into_inner());
        let deadline = Instant::now() + wait;
        let mut applied = AppliedWatch::new(&self.replica, self.stop.clone());
        loop {
            // Anything applied after this look wakes the wait below.
            applied.mark();
            // This node's applied state is enough to notice a change; the answer itself is a
            // linearizable read.
            let changed = match (self.local_session(id), &known) {
                (Some(session), Some(known)) => convert::progress(&session) != *known,
                (None, _) | (_, None) => true,
            };
            let timed_out = Instant::now() >= deadline;
            if changed || timed_out {
                let session = self.session(id).await?;
                // A node behind the client's view differs from `known` without progress; wait
                // on unless the linearizable read shows a change too.
                if timed_out || known.as_ref() != Some(&convert::progress(&session)) {
                    return Ok(Response::new(session));
                }
            }
            match applied.wait(Some(deadline)).await {
                Wake::Applied | Wake::Deadline => {}
                Wake::Stopping => return Err(stopping()),
            }
        }
    }

    async fn acknowledge(
        &self,
        request: Request<v1::AcknowledgeSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        self.change(
            request,
            |request| request.id,
            convert::acknowledge,
            convert::acknowledged,
        )
        .await
    }

    async fn kill(
        &self,
        request: Request<v1::KillSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        self.change(
            request,
            |request| request.id,
            convert::kill,
            convert::killed,
        )
        .await
    }

    async fn list(
        &self,
        request: Request<v1::ListSessionsRequest>,
    ) -> Result<Response<v1::ListSessionsReply>, Status> {
        self.replica.serve_read(request, convert::list).await
    }

    async fn claim(
        &self,
        request: Request<v1::ClaimRequest>,
    ) -> Result<Response<v1::ClaimReply>, Status> {
        let client = client_request(request.metadata())?;
        let claim = convert::claim_waiting(request.into_inner())?;
        if claim.wait.is_zero() {
            // No wait: proposed at once, answered empty when nothing is visible (as before
            // waits existed).
            let reply = self.replica.propose(client, claim.command).await?;
            return convert::claimed(reply).map(Response::new);
        }
        let deadline = Instant::now() + claim.wait;
        let claimed = long_poll::claim(
            &self.replica,
            self.stop.clone(),
            client,
            claim.stage,
            &claim.command,
            Some(deadline),
        )
        .await?;
        convert::claimed(SessionReply::Claimed(claimed)).map(Response::new)
    }

    async fn extend(
        &self,
        request: Request<v1::ExtendRequest>,
    ) -> Result<Response<v1::ExtendReply>, Status> {
        self.replica
            .serve_write(request, convert::extend, convert::extended)
            .await
    }

    async fn complete(
        &self,
        request: Request<v1::CompleteRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        self.change(request, |request| request.id, convert::complete, any_reply)
            .await
    }

    async fn complete_batch(
        &self,
        request: Request<v1::CompleteSessionBatchRequest>,
    ) -> Result<Response<v1::CompleteSessionBatchReply>, Status> {
        let client = client_request(request.metadata())?;
        let command = convert::complete_batch(request.into_inner())?;
        let reply = self.replica.propose(client, command.clone()).await?;
        convert::completed_batch(&command, reply).map(Response::new)
    }

    type WorkStream = work::EventStream;

    async fn work(
        &self,
        request: Request<tonic::Streaming<v1::SessionWorkRequest>>,
    ) -> Result<Response<Self::WorkStream>, Status> {
        let inbound = request.into_inner();
        let events = work::open(Arc::clone(&self.replica), self.stop.clone(), inbound).await?;
        Ok(Response::new(events))
    }

    async fn release(
        &self,
        request: Request<v1::ReleaseClaimRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        self.change(request, |request| request.id, convert::release, any_reply)
            .await
    }

    async fn fail(
        &self,
        request: Request<v1::FailRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        self.change(request, |request| request.id, convert::fail, any_reply)
            .await
    }

    async fn status(
        &self,
        request: Request<v1::SessionsStatusRequest>,
    ) -> Result<Response<v1::SessionsStatus>, Status> {
        self.replica.serve_read(request, convert::status).await
    }

    async fn set_config(
        &self,
        request: Request<v1::SetSessionConfigRequest>,
    ) -> Result<Response<v1::SessionConfig>, Status> {
        let client = client_request(request.metadata())?;
        let command = convert::set_config(request.into_inner())?;
        self.replica.propose(client, command).await?;
        Ok(Response::new(self.replica.query(convert::config).await?))
    }
}
