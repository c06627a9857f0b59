//! The JSON bodies of the RFC 6962 §4 HTTP API, field for field.
//!
//! Binary fields are base64 (standard alphabet, padded) in JSON and decoded bytes here, so a
//! body with bad base64, or a hash that is not 32 bytes, fails to deserialize with a message
//! that says so. Fields holding TLS structures (`signature`, `tree_head_signature`,
//! `leaf_input`, `extra_data`) stay bytes; the `TryFrom` conversions parse them into the typed
//! structures and back.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::tls::{DecodeError, EncodeError};
use super::{
    DigitallySigned, ExtraData, LogEntryType, MerkleTreeLeaf, SignedCertificateTimestamp,
    SignedTreeHead, Version,
};
use crate::Hash;

/// Why a JSON body, well-formed as JSON, does not hold a valid RFC 6962 structure.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FromJsonError {
    /// `sct_version` is not a version RFC 6962 defines.
    #[error("unknown sct_version {0}: RFC 6962 defines only v1 (0)")]
    UnknownSctVersion(u8),
    /// A base64 field does not decode as the TLS structure it should hold.
    #[error("{field} does not hold a valid TLS encoding: {source}")]
    Tls {
        /// The JSON field.
        field: &'static str,
        /// What was wrong with its bytes.
        #[source]
        source: DecodeError,
    },
}

/// The body of `add-chain` and `add-pre-chain` (§4.1, §4.2): the chain, leaf first, DER each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddChainRequest {
    /// Leaf (or precertificate) first, then each issuer.
    #[serde(with = "base64_list")]
    pub chain: Vec<Vec<u8>>,
}

/// The response to `add-chain` and `add-pre-chain` (§4.1): an SCT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddChainResponse {
    /// The SCT version, 0 for v1.
    pub sct_version: u8,
    /// The log id, SHA-256 of the log's public key.
    #[serde(with = "base64_hash")]
    pub id: Hash,
    /// The SCT timestamp, milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// `CtExtensions`.
    #[serde(with = "base64_bytes")]
    pub extensions: Vec<u8>,
    /// The TLS encoding of the SCT's `digitally-signed`.
    #[serde(with = "base64_bytes")]
    pub signature: Vec<u8>,
}

/// The response to `get-sth` (§4.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetSthResponse {
    /// Number of entries in the tree.
    pub tree_size: u64,
    /// When the head was signed, milliseconds since the Unix epoch.
    pub timestamp: u64,
    /// The Merkle tree hash.
    #[serde(with = "base64_hash")]
    pub sha256_root_hash: Hash,
    /// The TLS encoding of the `digitally-signed` tree head signature.
    #[serde(with = "base64_bytes")]
    pub tree_head_signature: Vec<u8>,
}

/// The response to `get-sth-consistency` (§4.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetSthConsistencyResponse {
    /// The consistency proof, node hashes in RFC 6962 §2.1.2 order.
    #[serde(with = "base64_hash_list")]
    pub consistency: Vec<Hash>,
}

/// The response to `get-proof-by-hash` (§4.5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetProofByHashResponse {
    /// Zero-based index of the leaf.
    pub leaf_index: u64,
    /// The audit path, leaf side first.
    #[serde(with = "base64_hash_list")]
    pub audit_path: Vec<Hash>,
}

/// The response to `get-entries` (§4.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetEntriesResponse {
    /// The entries, in index order.
    pub entries: Vec<LeafEntry>,
}

/// One entry of `get-entries` (§4.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafEntry {
    /// The encoded `MerkleTreeLeaf`.
    #[serde(with = "base64_bytes")]
    pub leaf_input: Vec<u8>,
    /// The encoded [`ExtraData`] for the leaf's entry type.
    #[serde(with = "base64_bytes")]
    pub extra_data: Vec<u8>,
}

impl LeafEntry {
    /// Encodes a leaf and its chain.
    pub fn new(leaf: &MerkleTreeLeaf, extra_data: &ExtraData) -> Result<Self, EncodeError> {
        Ok(Self {
            leaf_input: leaf.encode()?,
            extra_data: extra_data.encode()?,
        })
    }

    /// Parses the leaf, then the `extra_data` in the form its entry type calls for.
    pub fn decode(&self) -> Result<(MerkleTreeLeaf, ExtraData), FromJsonError> {
        decode_leaf_and_extra(&self.leaf_input, &self.extra_data)
    }
}

/// The response to `get-roots` (§4.7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetRootsResponse {
    /// The accepted root certificates, DER each.
    #[serde(with = "base64_list")]
    pub certificates: Vec<Vec<u8>>,
}

/// The response to `get-entry-and-proof` (§4.8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetEntryAndProofResponse {
    /// The encoded `MerkleTreeLeaf`.
    #[serde(with = "base64_bytes")]
    pub leaf_input: Vec<u8>,
    /// The encoded [`ExtraData`].
    #[serde(with = "base64_bytes")]
    pub extra_data: Vec<u8>,
    /// The audit path, leaf side first.
    #[serde(with = "base64_hash_list")]
    pub audit_path: Vec<Hash>,
}

impl GetEntryAndProofResponse {
    /// Parses the leaf and its `extra_data`, as [`LeafEntry::decode`] does.
    pub fn decode_entry(&self) -> Result<(MerkleTreeLeaf, ExtraData), FromJsonError> {
        decode_leaf_and_extra(&self.leaf_input, &self.extra_data)
    }
}

fn decode_leaf_and_extra(
    leaf_input: &[u8],
    extra_data: &[u8],
) -> Result<(MerkleTreeLeaf, ExtraData), FromJsonError> {
    let leaf = MerkleTreeLeaf::decode(leaf_input).map_err(|source| FromJsonError::Tls {
        field: "leaf_input",
        source,
    })?;
    let entry_type = LogEntryType::of(&leaf.timestamped_entry.entry);
    let extra = ExtraData::decode(entry_type, extra_data).map_err(|source| FromJsonError::Tls {
        field: "extra_data",
        source,
    })?;
    Ok((leaf, extra))
}

impl TryFrom<&SignedCertificateTimestamp> for AddChainResponse {
    type Error = EncodeError;

    fn try_from(sct: &SignedCertificateTimestamp) -> Result<Self, EncodeError> {
        // Checked here because the JSON field is free-form base64 while the TLS form is
        // bounded: an SCT that could not be embedded must not be served either.
        if sct.extensions.len() > super::CT_EXTENSIONS_BOUNDS.max {
            return Err(EncodeError::LengthOutOfBounds {
                field: "extensions",
                length: sct.extensions.len(),
                min: super::CT_EXTENSIONS_BOUNDS.min,
                max: super::CT_EXTENSIONS_BOUNDS.max,
            });
        }
        Ok(Self {
            sct_version: sct.version.code(),
            id: sct.log_id,
            timestamp: sct.timestamp_ms,
            extensions: sct.extensions.clone(),
            signature: sct.signature.encode()?,
        })
    }
}

impl TryFrom<&AddChainResponse> for SignedCertificateTimestamp {
    type Error = FromJsonError;

    fn try_from(response: &AddChainResponse) -> Result<Self, FromJsonError> {
        let version = Version::from_code(response.sct_version)
            .ok_or(FromJsonError::UnknownSctVersion(response.sct_version))?;
        if response.extensions.len() > super::CT_EXTENSIONS_BOUNDS.max {
            return Err(FromJsonError::Tls {
                field: "extensions",
                source: DecodeError::LengthOutOfBounds {
                    field: "extensions",
                    offset: 0,
                    length: response.extensions.len(),
                    min: super::CT_EXTENSIONS_BOUNDS.min,
                    max: super::CT_EXTENSIONS_BOUNDS.max,
                },
            });
        }
        let signature =
            DigitallySigned::decode(&response.signature).map_err(|source| FromJsonError::Tls {
                field: "signature",
                source,
            })?;
        Ok(Self {
            version,
            log_id: response.id,
            timestamp_ms: response.timestamp,
            extensions: response.extensions.clone(),
            signature,
        })
    }
}

impl TryFrom<&SignedTreeHead> for GetSthResponse {
    type Error = EncodeError;

    fn try_from(sth: &SignedTreeHead) -> Result<Self, EncodeError> {
        Ok(Self {
            tree_size: sth.tree_size,
            timestamp: sth.timestamp_ms,
            sha256_root_hash: sth.sha256_root_hash,
            tree_head_signature: sth.tree_head_signature.encode()?,
        })
    }
}

impl TryFrom<&GetSthResponse> for SignedTreeHead {
    type Error = FromJsonError;

    fn try_from(response: &GetSthResponse) -> Result<Self, FromJsonError> {
        let tree_head_signature =
            DigitallySigned::decode(&response.tree_head_signature).map_err(|source| {
                FromJsonError::Tls {
                    field: "tree_head_signature",
                    source,
                }
            })?;
        Ok(Self {
            tree_size: response.tree_size,
            timestamp_ms: response.timestamp,
            sha256_root_hash: response.sha256_root_hash,
            tree_head_signature,
        })
    }
}

fn decode_base64<E: serde::de::Error>(text: &str, what: &str) -> Result<Vec<u8>, E> {
    STANDARD.decode(text).map_err(|error| {
        E::custom(format!(
            "{what} is not valid base64 (standard alphabet, padded): {error}"
        ))
    })
}

fn to_hash<E: serde::de::Error>(bytes: &[u8], what: &str) -> Result<Hash, E> {
    Hash::try_from(bytes).map_err(|_| {
        E::custom(format!(
            "{what} must be a 32-byte SHA-256 hash, got {} bytes",
            bytes.len()
        ))
    })
}

/// Serde for a base64 byte string.
mod base64_bytes {
    use super::{STANDARD, decode_base64};
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        decode_base64(&text, "field")
    }
}

/// Serde for a base64 SHA-256 hash.
mod base64_hash {
    use super::{Hash, STANDARD, decode_base64, to_hash};
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(hash: &Hash, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(hash))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Hash, D::Error> {
        let text = String::deserialize(deserializer)?;
        to_hash(&decode_base64::<D::Error>(&text, "hash")?, "hash")
    }
}

/// Serde for a list of base64 byte strings.
mod base64_list {
    use super::{STANDARD, decode_base64};
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        items: &[Vec<u8>],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(items.iter().map(|item| STANDARD.encode(item)))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Vec<u8>>, D::Error> {
        let texts = Vec::<String>::deserialize(deserializer)?;
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| decode_base64(text, &format!("element {index}")))
            .collect()
    }
}

/// Serde for a list of base64 SHA-256 hashes.
mod base64_hash_list {
    use super::{Hash, STANDARD, decode_base64, to_hash};
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        hashes: &[Hash],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(hashes.iter().map(|hash| STANDARD.encode(hash)))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Hash>, D::Error> {
        let texts = Vec::<String>::deserialize(deserializer)?;
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| {
                let what = format!("element {index}");
                to_hash(&decode_base64::<D::Error>(text, &what)?, &what)
            })
            .collect()
    }
}
