//! `certus.v1.Clients`: client sessions (register with a random id, close). Its conversions, and
//! the numbered-request metadata every write RPC may carry, are [`crate::convert::clients`].

use std::sync::Arc;

use certus_core::{ClientCommand, ClientError, ClientId};
use certus_proto::v1;
use certus_proto::v1::clients_server::Clients;
use tonic::{Request, Response, Status};

use crate::convert::clients as convert;
use crate::errors::client_status;
use crate::limits::CLIENT_REGISTER_DRAWS_MAX;
use crate::raft::replica::Replica;

/// `certus.v1.Clients` for one node.
#[derive(Debug, Clone)]
pub struct ClientsService {
    replica: Arc<Replica>,
}

impl ClientsService {
    /// The clients service of `replica`.
    pub fn new(replica: Arc<Replica>) -> ClientsService {
        ClientsService { replica }
    }
}

#[tonic::async_trait]
impl Clients for ClientsService {
    async fn register(
        &self,
        _request: Request<v1::RegisterClientRequest>,
    ) -> Result<Response<v1::RegisterClientReply>, Status> {
        let mut draws = 0;
        loop {
            draws += 1;
            // Random, so that one client cannot guess (and so disturb) another's session.
            let client = ClientId(crate::random::random_below(u64::MAX - 1) + 1);
            // The refusal is kept typed, so that a taken id can be drawn again.
            match self
                .replica
                .propose_typed::<ClientCommand>(None, convert::register(client))
                .await?
            {
                Ok(reply) => return convert::registered(reply).map(Response::new),
                Err(ClientError::ClientIdTaken { .. }) if draws < CLIENT_REGISTER_DRAWS_MAX => {}
                Err(error) => return Err(client_status(&error)),
            }
        }
    }

    async fn close(
        &self,
        request: Request<v1::CloseClientRequest>,
    ) -> Result<Response<v1::CloseClientReply>, Status> {
        let command = convert::close(request.into_inner())?;
        let reply = self.replica.propose(None, command).await?;
        convert::closed(reply).map(Response::new)
    }
}
