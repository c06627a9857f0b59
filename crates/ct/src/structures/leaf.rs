//! The Merkle tree leaf (§3.4) and the `extra_data` served beside it (§4.6).

use serde::{Deserialize, Serialize};

use super::tls::{DecodeError, EncodeError, TlsReader, TlsWriter};
use super::{
    ASN1_CERT_BOUNDS, CERTIFICATE_CHAIN_BOUNDS, CT_EXTENSIONS_BOUNDS, LogEntryType, Version,
    decode_signed_entry, encode_timestamped_entry,
};
use crate::LogEntry;

/// `MerkleLeafType.timestamped_entry`, the only leaf type RFC 6962 defines.
const TIMESTAMPED_ENTRY_LEAF_TYPE: u8 = 0;

/// `TimestampedEntry` (§3.4): what the log saw and when.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimestampedEntry {
    /// The SCT timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The certificate or precertificate (`entry_type` and `signed_entry`).
    pub entry: LogEntry,
    /// `CtExtensions`; empty for every log today.
    pub extensions: Vec<u8>,
}

/// `MerkleTreeLeaf` (§3.4). Its encoding is the `leaf_input` of get-entries, and the leaf hash
/// in the tree is `SHA-256(0x00 || leaf_input)`.
///
/// The `leaf_type` is always `timestamped_entry`, the only one RFC 6962 defines, so it is not a
/// field; decoding rejects any other.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MerkleTreeLeaf {
    /// The leaf version; v1.
    pub version: Version,
    /// The entry.
    pub timestamped_entry: TimestampedEntry,
}

impl MerkleTreeLeaf {
    /// A v1 leaf for `entry` logged at `timestamp_ms`.
    pub fn new(timestamp_ms: u64, entry: LogEntry, extensions: Vec<u8>) -> Self {
        Self {
            version: Version::V1,
            timestamped_entry: TimestampedEntry {
                timestamp_ms,
                entry,
                extensions,
            },
        }
    }

    /// The TLS encoding: the `leaf_input`.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let entry = &self.timestamped_entry;
        encode_leaf(
            self.version,
            entry.timestamp_ms,
            &entry.entry,
            &entry.extensions,
        )
    }

    /// Parses a `leaf_input`, rejecting unknown versions, leaf types and entry types, and any
    /// trailing bytes.
    pub fn decode(leaf_input: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = TlsReader::new(leaf_input, "MerkleTreeLeaf");
        let version = Version::decode(&mut reader, "version")?;
        let offset = reader.offset();
        let leaf_type = reader.read_u8("leaf_type")?;
        if leaf_type != TIMESTAMPED_ENTRY_LEAF_TYPE {
            return Err(DecodeError::UnknownValue {
                field: "leaf_type",
                offset,
                value: u64::from(leaf_type),
            });
        }
        let timestamp_ms = reader.read_u64("timestamp")?;
        let entry = decode_signed_entry(&mut reader)?;
        let extensions = reader
            .read_opaque("extensions", CT_EXTENSIONS_BOUNDS)?
            .to_vec();
        reader.finish()?;
        Ok(Self {
            version,
            timestamped_entry: TimestampedEntry {
                timestamp_ms,
                entry,
                extensions,
            },
        })
    }
}

/// The dedupe key ([`crate::entry_key`]) of the entry a `leaf_input` logs.
pub fn entry_key_of_leaf_input(leaf_input: &[u8]) -> Result<crate::Hash, DecodeError> {
    let leaf = MerkleTreeLeaf::decode(leaf_input)?;
    Ok(crate::entry_key(&leaf.timestamped_entry.entry))
}

/// The `leaf_input` for `entry` logged at `timestamp_ms`: the encoding of a v1
/// `MerkleTreeLeaf`, without building one (no copy of the certificate).
pub fn leaf_input(
    timestamp_ms: u64,
    entry: &LogEntry,
    extensions: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    encode_leaf(Version::V1, timestamp_ms, entry, extensions)
}

fn encode_leaf(
    version: Version,
    timestamp_ms: u64,
    entry: &LogEntry,
    extensions: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    let mut writer = TlsWriter::new();
    writer.put_u8(version.code());
    writer.put_u8(TIMESTAMPED_ENTRY_LEAF_TYPE);
    encode_timestamped_entry(&mut writer, timestamp_ms, entry, extensions)?;
    Ok(writer.into_bytes())
}

/// `PrecertChainEntry` (§3.1): the submitted precertificate and the chain up to a root.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PrecertChainEntry {
    /// The precertificate as submitted (with the poison extension), DER.
    pub pre_certificate: Vec<u8>,
    /// The rest of the chain, issuer first, DER each.
    pub precertificate_chain: Vec<Vec<u8>>,
}

/// The `extra_data` of a get-entries entry (§4.6): the chain that is stored beside the leaf but
/// not hashed into it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExtraData {
    /// For an `x509_entry`: the `certificate_chain` (the leaf itself is in the `leaf_input`),
    /// issuer first, DER each.
    X509 {
        /// The chain.
        certificate_chain: Vec<Vec<u8>>,
    },
    /// For a `precert_entry`: the whole `PrecertChainEntry`.
    Precert(PrecertChainEntry),
}

impl ExtraData {
    /// The entry type this `extra_data` belongs to.
    pub fn entry_type(&self) -> LogEntryType {
        match self {
            ExtraData::X509 { .. } => LogEntryType::X509Entry,
            ExtraData::Precert(_) => LogEntryType::PrecertEntry,
        }
    }

    /// The TLS encoding, as get-entries serves it (base64'd).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut writer = TlsWriter::new();
        match self {
            ExtraData::X509 { certificate_chain } => {
                encode_chain(&mut writer, "certificate_chain", certificate_chain)?;
            }
            ExtraData::Precert(entry) => {
                writer.put_opaque("pre_certificate", ASN1_CERT_BOUNDS, &entry.pre_certificate)?;
                encode_chain(
                    &mut writer,
                    "precertificate_chain",
                    &entry.precertificate_chain,
                )?;
            }
        }
        Ok(writer.into_bytes())
    }

    /// Parses `extra_data` for an entry of `entry_type` (taken from the `leaf_input` it came
    /// with: the bytes alone do not say which form they are).
    pub fn decode(entry_type: LogEntryType, bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = TlsReader::new(bytes, "extra_data");
        let extra = match entry_type {
            LogEntryType::X509Entry => ExtraData::X509 {
                certificate_chain: decode_chain(&mut reader, "certificate_chain")?,
            },
            LogEntryType::PrecertEntry => {
                let pre_certificate = reader
                    .read_opaque("pre_certificate", ASN1_CERT_BOUNDS)?
                    .to_vec();
                let precertificate_chain = decode_chain(&mut reader, "precertificate_chain")?;
                ExtraData::Precert(PrecertChainEntry {
                    pre_certificate,
                    precertificate_chain,
                })
            }
        };
        reader.finish()?;
        Ok(extra)
    }
}

fn encode_chain(
    writer: &mut TlsWriter,
    field: &'static str,
    chain: &[Vec<u8>],
) -> Result<(), EncodeError> {
    writer.put_vector(field, CERTIFICATE_CHAIN_BOUNDS, |inner| {
        chain.iter().try_for_each(|certificate| {
            inner.put_opaque("ASN.1Cert", ASN1_CERT_BOUNDS, certificate)
        })
    })
}

fn decode_chain(
    reader: &mut TlsReader<'_>,
    field: &'static str,
) -> Result<Vec<Vec<u8>>, DecodeError> {
    let mut chain_reader = reader.read_vector(field, CERTIFICATE_CHAIN_BOUNDS)?;
    let mut chain = Vec::new();
    while !chain_reader.is_empty() {
        chain.push(
            chain_reader
                .read_opaque("ASN.1Cert", ASN1_CERT_BOUNDS)?
                .to_vec(),
        );
    }
    chain_reader.finish()?;
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x509_leaf() -> MerkleTreeLeaf {
        MerkleTreeLeaf::new(
            0x0102_0304_0506_0708,
            LogEntry::X509 {
                certificate: b"cert".to_vec(),
            },
            Vec::new(),
        )
    }

    fn precert_leaf() -> MerkleTreeLeaf {
        MerkleTreeLeaf::new(
            1234,
            LogEntry::Precert {
                issuer_key_hash: [0xab; 32],
                tbs_certificate: b"tbs".to_vec(),
            },
            vec![0xee, 0xff],
        )
    }

    #[test]
    fn x509_leaf_has_the_rfc_layout() {
        let bytes = x509_leaf().encode().unwrap();
        let expected: Vec<u8> = [
            &[0u8, 0][..],             // version v1, leaf_type timestamped_entry
            &[1, 2, 3, 4, 5, 6, 7, 8], // timestamp
            &[0, 0],                   // entry_type x509_entry
            &[0, 0, 4],                // ASN.1Cert length (uint24)
            b"cert",                   //
            &[0, 0],                   // extensions length (uint16)
        ]
        .concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn precert_leaf_has_the_rfc_layout() {
        let bytes = precert_leaf().encode().unwrap();
        let expected: Vec<u8> = [
            &[0u8, 0][..],
            &1234u64.to_be_bytes(),
            &[0, 1], // precert_entry
            &[0xab; 32],
            &[0, 0, 3],
            b"tbs",
            &[0, 2, 0xee, 0xff],
        ]
        .concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn leaf_input_matches_the_struct_encoding() {
        for leaf in [x509_leaf(), precert_leaf()] {
            let entry = &leaf.timestamped_entry;
            assert_eq!(
                leaf_input(entry.timestamp_ms, &entry.entry, &entry.extensions).unwrap(),
                leaf.encode().unwrap()
            );
        }
    }

    #[test]
    fn leaves_round_trip() {
        for leaf in [x509_leaf(), precert_leaf()] {
            let bytes = leaf.encode().unwrap();
            assert_eq!(MerkleTreeLeaf::decode(&bytes).unwrap(), leaf);
        }
    }

    #[test]
    fn every_proper_prefix_of_a_leaf_is_rejected_as_truncated() {
        for leaf in [x509_leaf(), precert_leaf()] {
            let bytes = leaf.encode().unwrap();
            for cut in 0..bytes.len() {
                assert!(
                    matches!(
                        MerkleTreeLeaf::decode(&bytes[..cut]),
                        Err(DecodeError::Truncated { .. })
                    ),
                    "prefix of {cut} bytes"
                );
            }
        }
    }

    #[test]
    fn leaf_decode_rejects_trailing_bytes_and_unknown_values() {
        let mut bytes = x509_leaf().encode().unwrap();
        bytes.push(0);
        assert_eq!(
            MerkleTreeLeaf::decode(&bytes),
            Err(DecodeError::TrailingBytes {
                structure: "MerkleTreeLeaf",
                offset: bytes.len() - 1,
                count: 1
            })
        );

        let good = x509_leaf().encode().unwrap();
        let mut bad_version = good.clone();
        bad_version[0] = 1;
        assert!(matches!(
            MerkleTreeLeaf::decode(&bad_version),
            Err(DecodeError::UnknownValue {
                field: "version",
                offset: 0,
                value: 1
            })
        ));
        let mut bad_leaf_type = good.clone();
        bad_leaf_type[1] = 1;
        assert!(matches!(
            MerkleTreeLeaf::decode(&bad_leaf_type),
            Err(DecodeError::UnknownValue {
                field: "leaf_type",
                offset: 1,
                value: 1
            })
        ));
        let mut bad_entry_type = good;
        bad_entry_type[11] = 2;
        assert!(matches!(
            MerkleTreeLeaf::decode(&bad_entry_type),
            Err(DecodeError::UnknownValue {
                field: "entry_type",
                offset: 10,
                value: 2
            })
        ));
    }

    #[test]
    fn leaf_decode_rejects_an_empty_certificate_and_an_overlong_length() {
        // An ASN.1Cert is <1..2^24-1>: zero length is out of bounds.
        let empty_cert: Vec<u8> = [&[0u8, 0][..], &[0; 8], &[0, 0], &[0, 0, 0], &[0, 0]].concat();
        assert!(matches!(
            MerkleTreeLeaf::decode(&empty_cert),
            Err(DecodeError::LengthOutOfBounds {
                field: "ASN.1Cert",
                offset: 12,
                length: 0,
                ..
            })
        ));
        // A certificate length running past the end of the input.
        let overlong: Vec<u8> =
            [&[0u8, 0][..], &[0; 8], &[0, 0], &[0xff, 0xff, 0xff], b"x"].concat();
        assert!(matches!(
            MerkleTreeLeaf::decode(&overlong),
            Err(DecodeError::Truncated {
                field: "ASN.1Cert",
                needed: 0xFF_FFFF,
                available: 1,
                ..
            })
        ));
    }

    #[test]
    fn leaf_encode_rejects_what_the_rfc_cannot_express() {
        let empty = MerkleTreeLeaf::new(
            1,
            LogEntry::X509 {
                certificate: Vec::new(),
            },
            Vec::new(),
        );
        assert!(matches!(
            empty.encode(),
            Err(EncodeError::LengthOutOfBounds {
                field: "ASN.1Cert",
                length: 0,
                ..
            })
        ));
        let huge_extensions = MerkleTreeLeaf::new(
            1,
            LogEntry::X509 {
                certificate: vec![1],
            },
            vec![0; 0x1_0000],
        );
        assert!(matches!(
            huge_extensions.encode(),
            Err(EncodeError::LengthOutOfBounds {
                field: "extensions",
                ..
            })
        ));
        let huge_tbs = LogEntry::Precert {
            issuer_key_hash: [0; 32],
            tbs_certificate: vec![0; 0x100_0000],
        };
        assert!(matches!(
            leaf_input(1, &huge_tbs, &[]),
            Err(EncodeError::LengthOutOfBounds {
                field: "tbs_certificate",
                length: 0x100_0000,
                ..
            })
        ));
    }

    #[test]
    fn x509_extra_data_is_a_length_prefixed_list_of_certificates() {
        let extra = ExtraData::X509 {
            certificate_chain: vec![b"issuer".to_vec(), b"root".to_vec()],
        };
        let bytes = extra.encode().unwrap();
        let expected: Vec<u8> = [
            &[0u8, 0, 16][..],
            &[0, 0, 6],
            b"issuer",
            &[0, 0, 4],
            b"root",
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(
            ExtraData::decode(LogEntryType::X509Entry, &bytes).unwrap(),
            extra
        );
        assert_eq!(extra.entry_type(), LogEntryType::X509Entry);

        let empty = ExtraData::X509 {
            certificate_chain: Vec::new(),
        };
        assert_eq!(empty.encode().unwrap(), [0, 0, 0]);
        assert_eq!(
            ExtraData::decode(LogEntryType::X509Entry, &[0, 0, 0]).unwrap(),
            empty
        );
    }

    #[test]
    fn precert_extra_data_round_trips() {
        let extra = ExtraData::Precert(PrecertChainEntry {
            pre_certificate: b"precert".to_vec(),
            precertificate_chain: vec![b"issuer".to_vec()],
        });
        let bytes = extra.encode().unwrap();
        let expected: Vec<u8> = [
            &[0u8, 0, 7][..],
            b"precert",
            &[0, 0, 9],
            &[0, 0, 6],
            b"issuer",
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(
            ExtraData::decode(LogEntryType::PrecertEntry, &bytes).unwrap(),
            extra
        );
        assert_eq!(extra.entry_type(), LogEntryType::PrecertEntry);
    }

    #[test]
    fn extra_data_decode_is_strict() {
        let extra = ExtraData::Precert(PrecertChainEntry {
            pre_certificate: b"p".to_vec(),
            precertificate_chain: vec![b"a".to_vec(), b"b".to_vec()],
        });
        let bytes = extra.encode().unwrap();
        for cut in 0..bytes.len() {
            assert!(
                ExtraData::decode(LogEntryType::PrecertEntry, &bytes[..cut]).is_err(),
                "prefix of {cut} bytes"
            );
        }
        let mut trailing = bytes.clone();
        trailing.push(9);
        assert!(matches!(
            ExtraData::decode(LogEntryType::PrecertEntry, &trailing),
            Err(DecodeError::TrailingBytes {
                structure: "extra_data",
                ..
            })
        ));
        // A chain whose declared length splits a certificate: the element runs past the vector.
        let split: Vec<u8> = [&[0u8, 0, 4][..], &[0, 0, 2], b"a"].concat();
        assert!(matches!(
            ExtraData::decode(LogEntryType::X509Entry, &split),
            Err(DecodeError::Truncated {
                field: "ASN.1Cert",
                offset: 6,
                ..
            })
        ));
        // An empty certificate inside the chain.
        let empty_cert: Vec<u8> = [&[0u8, 0, 3][..], &[0, 0, 0]].concat();
        assert!(matches!(
            ExtraData::decode(LogEntryType::X509Entry, &empty_cert),
            Err(DecodeError::LengthOutOfBounds {
                field: "ASN.1Cert",
                offset: 3,
                ..
            })
        ));
        // The x509 form parsed as a precert form is caught (the chain is not a certificate).
        let x509 = ExtraData::X509 {
            certificate_chain: vec![b"issuer".to_vec()],
        }
        .encode()
        .unwrap();
        assert!(ExtraData::decode(LogEntryType::PrecertEntry, &x509).is_err());
    }

    #[test]
    fn extra_data_encode_rejects_an_empty_certificate() {
        let extra = ExtraData::X509 {
            certificate_chain: vec![Vec::new()],
        };
        assert!(matches!(
            extra.encode(),
            Err(EncodeError::LengthOutOfBounds {
                field: "ASN.1Cert",
                ..
            })
        ));
    }

    #[test]
    fn the_entry_key_of_a_leaf_input_ignores_the_timestamp_and_tells_entries_apart() {
        let certificate = LogEntry::X509 {
            certificate: b"certificate".to_vec(),
        };
        let precert = LogEntry::Precert {
            issuer_key_hash: [7; 32],
            tbs_certificate: b"certificate".to_vec(),
        };
        let early = leaf_input(1, &certificate, &[]).unwrap();
        let late = leaf_input(2, &certificate, &[]).unwrap();
        assert_ne!(early, late);
        assert_eq!(
            entry_key_of_leaf_input(&early).unwrap(),
            crate::entry_key(&certificate)
        );
        assert_eq!(
            entry_key_of_leaf_input(&late).unwrap(),
            entry_key_of_leaf_input(&early).unwrap()
        );
        assert_ne!(
            entry_key_of_leaf_input(&leaf_input(1, &precert, &[]).unwrap()).unwrap(),
            crate::entry_key(&certificate)
        );
        assert!(entry_key_of_leaf_input(&early[..early.len() - 1]).is_err());
    }
}
