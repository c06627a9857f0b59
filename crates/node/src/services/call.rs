//! The one path every service's calls take through the [`Replica`]: a converted command proposed
//! and its answer taken back out (a refusal answered with its status), a converted query run on
//! a linearizable read; and, on top, a whole unary write or read call (request in, reply out).
//!
//! These are methods of the replica, written here rather than in `raft/`: they speak the client
//! API (statuses, the conversion layer's families), which `raft/` knows nothing of.

use certus_core::ClientRequest;
use certus_proto::READ_INDEX_METADATA;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};

use crate::convert::clients::client_request;
use crate::convert::{Family, Query, answer, reply};
use crate::raft::replica::Replica;

impl Replica {
    /// Proposes `command` (as the call's numbered request when `client` is one) and returns the
    /// state machine's reply; a refusal comes back as its status.
    pub async fn propose<F: Family>(
        &self,
        client: Option<ClientRequest>,
        command: F,
    ) -> Result<F::Reply, Status> {
        reply::<F>(self.write_for(client, command.into_command()).await?)
    }

    /// Like [`Replica::propose`], with a refusal kept typed (for a caller that acts on it).
    pub async fn propose_typed<F: Family>(
        &self,
        client: Option<ClientRequest>,
        command: F,
    ) -> Result<Result<F::Reply, F::Error>, Status> {
        answer::<F>(self.write_for(client, command.into_command()).await?)
    }

    /// Runs `query` on a linearizable read of the state, with this node's clock.
    pub async fn query<T>(&self, query: impl Query<T>) -> Result<T, Status> {
        self.read(query).await?
    }

    /// [`Replica::query`], with the log index of the state it read ([`Replica::read_at`]).
    pub async fn query_at<T>(&self, query: impl Query<T>) -> Result<(T, u64), Status> {
        let (answer, index) = self.read_at(query).await?;
        Ok((answer?, index))
    }

    /// A unary write call: the request's numbered-request metadata read, its body converted
    /// into a command by `command` (refused here if invalid), the command proposed, and its reply
    /// converted by `reply`.
    pub async fn serve_write<Body, F: Family, Reply>(
        &self,
        request: Request<Body>,
        command: impl FnOnce(Body) -> Result<F, Status>,
        reply: impl FnOnce(F::Reply) -> Result<Reply, Status>,
    ) -> Result<Response<Reply>, Status> {
        let client = client_request(request.metadata())?;
        let command = command(request.into_inner())?;
        let answer = self.propose(client, command).await?;
        reply(answer).map(Response::new)
    }

    /// A unary read call: the request's body converted into a query by `query` (refused here if
    /// invalid), and the query run on a linearizable read. The answer carries the log index of
    /// the state it read in [`READ_INDEX_METADATA`].
    pub async fn serve_read<Body, Q: Query<Reply>, Reply>(
        &self,
        request: Request<Body>,
        query: impl FnOnce(Body) -> Result<Q, Status>,
    ) -> Result<Response<Reply>, Status> {
        let query = query(request.into_inner())?;
        let (reply, index) = self.query_at(query).await?;
        let mut response = Response::new(reply);
        response
            .metadata_mut()
            .insert(READ_INDEX_METADATA, MetadataValue::from(index));
        Ok(response)
    }
}
