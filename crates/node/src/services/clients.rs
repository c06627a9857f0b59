//! `certus.v1.Clients`: client sessions (register, close), and the numbered-request metadata every
//! write RPC may carry (`proto/certus/v1/clients.proto`).

use std::sync::Arc;

use certus_core::{
    ClientCommand, ClientError, ClientId, ClientReply, ClientRequest, Command,
    Response as CommandResponse,
};
use certus_proto::v1;
use certus_proto::v1::clients_server::Clients;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

use crate::errors::{client_status, status};
use crate::limits::CLIENT_REGISTER_DRAWS_MAX;
use crate::raft::replica::Replica;

use certus_proto::{
    CLIENT_FIRST_OUTSTANDING_METADATA as CLIENT_FIRST_OUTSTANDING_KEY,
    CLIENT_ID_METADATA as CLIENT_ID_KEY, CLIENT_SEQUENCE_METADATA as CLIENT_SEQUENCE_KEY,
};

/// The numbered request a call's metadata names: `None` when it carries none of the three
/// entries; `INVALID_ARGUMENT` when it carries some but not all, or a value that is not a number
/// in range. Checked before anything is proposed.
pub fn client_request(metadata: &MetadataMap) -> Result<Option<ClientRequest>, Status> {
    let keys = [
        CLIENT_ID_KEY,
        CLIENT_SEQUENCE_KEY,
        CLIENT_FIRST_OUTSTANDING_KEY,
    ];
    let values = keys.map(|key| metadata.get(key));
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    let mut numbers = [0_u64; 3];
    for ((key, value), number) in keys.iter().zip(values).zip(&mut numbers) {
        let Some(value) = value else {
            return Err(invalid(format!(
                "metadata {key} is missing: a numbered request carries {}",
                keys.join(", ")
            )));
        };
        *number = value
            .to_str()
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .ok_or_else(|| invalid(format!("metadata {key} must be a decimal number")))?;
    }
    let request = ClientRequest {
        client: ClientId(numbers[0]),
        sequence: numbers[1],
        first_outstanding: numbers[2],
    };
    request.validate().map_err(|error| client_status(&error))?;
    Ok(Some(request))
}

fn invalid(message: String) -> Status {
    status(Code::InvalidArgument, "invalid-argument", message)
}

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

    async fn command(&self, command: ClientCommand) -> Result<ClientReply, ClientErrorOr> {
        let mut responses = self
            .replica
            .write(vec![Command::Client(command)])
            .await
            .map_err(|error| ClientErrorOr::Status(error.into()))?;
        match responses.pop() {
            Some(CommandResponse::Client(result)) => result.map_err(ClientErrorOr::Client),
            other => Err(ClientErrorOr::Status(status(
                Code::Internal,
                "internal",
                format!("the state machine answered another command family: {other:?}"),
            ))),
        }
    }
}

/// A refusal by the state machine, kept typed so that a taken id can be drawn again.
enum ClientErrorOr {
    Client(ClientError),
    Status(Status),
}

impl From<ClientErrorOr> for Status {
    fn from(error: ClientErrorOr) -> Status {
        match error {
            ClientErrorOr::Client(error) => client_status(&error),
            ClientErrorOr::Status(status) => status,
        }
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
            match self.command(ClientCommand::Register { client }).await {
                Ok(ClientReply::Registered {
                    client,
                    idle_ms,
                    outstanding_max,
                }) => {
                    return Ok(Response::new(v1::RegisterClientReply {
                        client_id: client.0,
                        idle_ms,
                        outstanding_max,
                    }));
                }
                Err(ClientErrorOr::Client(ClientError::ClientIdTaken { .. }))
                    if draws < CLIENT_REGISTER_DRAWS_MAX => {}
                Err(error) => return Err(error.into()),
                Ok(other) => {
                    return Err(status(
                        Code::Internal,
                        "internal",
                        format!("register answered {other:?}"),
                    ));
                }
            }
        }
    }

    async fn close(
        &self,
        request: Request<v1::CloseClientRequest>,
    ) -> Result<Response<v1::CloseClientReply>, Status> {
        let client = ClientId(request.into_inner().client_id);
        match self.command(ClientCommand::Close { client }).await? {
            ClientReply::Closed { existed } => Ok(Response::new(v1::CloseClientReply { existed })),
            other => Err(status(
                Code::Internal,
                "internal",
                format!("close answered {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(entries: &[(&'static str, &str)]) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        for (key, value) in entries {
            metadata.insert(*key, value.parse().unwrap());
        }
        metadata
    }

    fn reason(status: &Status) -> &str {
        status
            .metadata()
            .get(crate::errors::ERROR_REASON_KEY)
            .unwrap()
            .to_str()
            .unwrap()
    }

    #[test]
    fn a_call_without_the_entries_is_not_numbered() {
        assert_eq!(client_request(&MetadataMap::new()).unwrap(), None);
    }

    #[test]
    fn all_three_entries_make_a_numbered_request() {
        let request = client_request(&metadata(&[
            (CLIENT_ID_KEY, "77"),
            (CLIENT_SEQUENCE_KEY, "5"),
            (CLIENT_FIRST_OUTSTANDING_KEY, "3"),
        ]))
        .unwrap();
        assert_eq!(
            request,
            Some(ClientRequest {
                client: ClientId(77),
                sequence: 5,
                first_outstanding: 3,
            })
        );
    }

    #[test]
    fn partial_or_malformed_entries_are_refused_before_anything_is_proposed() {
        let partial = client_request(&metadata(&[(CLIENT_ID_KEY, "77")])).unwrap_err();
        assert_eq!(partial.code(), Code::InvalidArgument);
        assert!(
            partial.message().contains(CLIENT_SEQUENCE_KEY),
            "{partial:?}"
        );
        let not_a_number = client_request(&metadata(&[
            (CLIENT_ID_KEY, "77"),
            (CLIENT_SEQUENCE_KEY, "five"),
            (CLIENT_FIRST_OUTSTANDING_KEY, "1"),
        ]))
        .unwrap_err();
        assert_eq!(not_a_number.code(), Code::InvalidArgument);
        let ahead = client_request(&metadata(&[
            (CLIENT_ID_KEY, "77"),
            (CLIENT_SEQUENCE_KEY, "2"),
            (CLIENT_FIRST_OUTSTANDING_KEY, "3"),
        ]))
        .unwrap_err();
        assert_eq!(ahead.code(), Code::InvalidArgument);
        assert_eq!(reason(&ahead), "invalid-argument");
    }
}
