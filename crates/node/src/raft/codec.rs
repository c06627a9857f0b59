//! The wire form of the internal Raft transport: a version byte, then postcard.
//!
//! Peers of another version are refused with a clear error rather than misread.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The version of the payloads inside `certus.v1.RaftMessage`.
const WIRE_VERSION: u8 = 1;

/// Why a payload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Nothing was sent.
    #[error("empty Raft message payload")]
    Empty,
    /// A peer speaks another version of the transport.
    #[error("Raft message version {found}, this node speaks version {expected}")]
    Version {
        /// What the peer sent.
        found: u8,
        /// What this node speaks.
        expected: u8,
    },
    /// The bytes are not a message of the expected type.
    #[error("malformed Raft message: {0}")]
    Malformed(#[from] postcard::Error),
}

/// Serialises a transport message.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let mut bytes = vec![WIRE_VERSION];
    // Serialising our own types into a Vec cannot fail: no maps with non-string keys and no
    // size limit. A failure here is a bug in a type definition.
    postcard::to_io(message, &mut bytes).expect("transport messages serialise");
    bytes
}

/// Reads a transport message, refusing other versions and malformed bytes.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let (&version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if version != WIRE_VERSION {
        return Err(DecodeError::Version {
            found: version,
            expected: WIRE_VERSION,
        });
    }
    Ok(postcard::from_bytes(body)?)
}
