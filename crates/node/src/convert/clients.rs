//! `certus.v1.Clients`: client sessions (register, close), and the numbered-request metadata every
//! write RPC may carry (`proto/certus/v1/clients.proto`).

use certus_core::{ClientCommand, ClientId, ClientReply, ClientRequest};
use certus_proto::v1;
use certus_proto::{
    CLIENT_FIRST_OUTSTANDING_METADATA as CLIENT_FIRST_OUTSTANDING_KEY,
    CLIENT_ID_METADATA as CLIENT_ID_KEY, CLIENT_SEQUENCE_METADATA as CLIENT_SEQUENCE_KEY,
};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

use crate::convert::unexpected;
use crate::errors::{client_status, status};

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
            return Err(invalid_metadata(format!(
                "metadata {key} is missing: a numbered request carries {}",
                keys.join(", ")
            )));
        };
        *number = value
            .to_str()
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
            .ok_or_else(|| invalid_metadata(format!("metadata {key} must be a decimal number")))?;
    }
    let request = ClientRequest {
        client: ClientId(numbers[0]),
        sequence: numbers[1],
        first_outstanding: numbers[2],
    };
    request.validate().map_err(|error| client_status(&error))?;
    Ok(Some(request))
}

fn invalid_metadata(message: String) -> Status {
    status(Code::InvalidArgument, "invalid-argument", message)
}

/// `Register`, with the id drawn for it.
pub fn register(client: ClientId) -> ClientCommand {
    ClientCommand::Register { client }
}

/// `Register`'s reply.
pub fn registered(reply: ClientReply) -> Result<v1::RegisterClientReply, Status> {
    match reply {
        ClientReply::Registered {
            client,
            idle_ms,
            outstanding_max,
        } => Ok(v1::RegisterClientReply {
            client_id: client.0,
            idle_ms,
            outstanding_max,
        }),
        other => Err(unexpected("register", &other)),
    }
}

/// `Close`.
pub fn close(request: v1::CloseClientRequest) -> Result<ClientCommand, Status> {
    Ok(ClientCommand::Close {
        client: ClientId(request.client_id),
    })
}

/// `Close`'s reply.
pub fn closed(reply: ClientReply) -> Result<v1::CloseClientReply, Status> {
    match reply {
        ClientReply::Closed { existed } => Ok(v1::CloseClientReply { existed }),
        other => Err(unexpected("close", &other)),
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
