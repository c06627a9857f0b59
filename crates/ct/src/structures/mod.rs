//! RFC 6962 structures and their exact encodings.
//!
//! Everything a CT client, monitor or mirror parses or verifies goes through here: the
//! `MerkleTreeLeaf` whose encoding is the `leaf_input` hashed into the tree (§3.4), the SCT and
//! its signature input (§3.2), the STH signature input (§3.5), `digitally-signed` (RFC 5246
//! §4.7), the `extra_data` of get-entries (§4.6) and, in [`json`], the HTTP bodies of §4. The
//! byte encodings follow the TLS presentation language ([`tls`]) and decode strictly.

mod leaf;
mod sct;
mod sth;

pub mod json;
pub mod tls;

use serde::{Deserialize, Serialize};

use crate::LogEntry;
use tls::{DecodeError, EncodeError, TlsReader, TlsWriter, VectorBounds};

pub use leaf::{
    ExtraData, MerkleTreeLeaf, PrecertChainEntry, TimestampedEntry, entry_key_of_leaf_input,
    leaf_input,
};
pub use sct::{SignedCertificateTimestamp, decode_sct_list, encode_sct_list, sct_signature_input};
pub use sth::{SignedTreeHead, sth_signature_input};

/// `ASN.1Cert`: `opaque ASN.1Cert<1..2^24-1>` (§3.1).
pub const ASN1_CERT_BOUNDS: VectorBounds = VectorBounds::new(1, 0xFF_FFFF);
/// A list of `ASN.1Cert`, `<0..2^24-1>` (§3.1 `certificate_chain`, `precertificate_chain`).
pub const CERTIFICATE_CHAIN_BOUNDS: VectorBounds = VectorBounds::new(0, 0xFF_FFFF);
/// `TBSCertificate` in `PreCert`: `opaque TBSCertificate<1..2^24-1>` (§3.2).
pub const TBS_CERTIFICATE_BOUNDS: VectorBounds = VectorBounds::new(1, 0xFF_FFFF);
/// `CtExtensions`: `opaque CtExtensions<0..2^16-1>` (§3.2).
pub const CT_EXTENSIONS_BOUNDS: VectorBounds = VectorBounds::new(0, 0xFFFF);
/// The signature inside `digitally-signed`: `opaque signature<0..2^16-1>` (RFC 5246 §4.7).
pub const SIGNATURE_BOUNDS: VectorBounds = VectorBounds::new(0, 0xFFFF);
/// One `SerializedSCT` in a `SignedCertificateTimestampList`, `<1..2^16-1>` (§3.3).
pub const SERIALIZED_SCT_BOUNDS: VectorBounds = VectorBounds::new(1, 0xFFFF);
/// The `sct_list` of a `SignedCertificateTimestampList`, `<1..2^16-1>` (§3.3).
pub const SCT_LIST_BOUNDS: VectorBounds = VectorBounds::new(1, 0xFFFF);

/// `Version` (§3.2): RFC 6962 defines only v1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Version {
    /// `v1(0)`.
    #[default]
    V1,
}

impl Version {
    /// The wire value.
    pub const fn code(self) -> u8 {
        match self {
            Version::V1 => 0,
        }
    }

    /// The version with wire value `code`, if RFC 6962 defines one.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Version::V1),
            _ => None,
        }
    }

    fn decode(reader: &mut TlsReader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let offset = reader.offset();
        let code = reader.read_u8(field)?;
        Self::from_code(code).ok_or(DecodeError::UnknownValue {
            field,
            offset,
            value: u64::from(code),
        })
    }
}

/// `LogEntryType` (§3.1), a `uint16` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LogEntryType {
    /// `x509_entry(0)`.
    X509Entry,
    /// `precert_entry(1)`.
    PrecertEntry,
}

impl LogEntryType {
    /// The wire value.
    pub const fn code(self) -> u16 {
        match self {
            LogEntryType::X509Entry => 0,
            LogEntryType::PrecertEntry => 1,
        }
    }

    /// The entry type with wire value `code`, if RFC 6962 defines one.
    pub const fn from_code(code: u16) -> Option<Self> {
        match code {
            0 => Some(LogEntryType::X509Entry),
            1 => Some(LogEntryType::PrecertEntry),
            _ => None,
        }
    }

    /// The type of `entry`.
    pub const fn of(entry: &LogEntry) -> Self {
        match entry {
            LogEntry::X509 { .. } => LogEntryType::X509Entry,
            LogEntry::Precert { .. } => LogEntryType::PrecertEntry,
        }
    }

    fn decode(reader: &mut TlsReader<'_>) -> Result<Self, DecodeError> {
        let offset = reader.offset();
        let code = reader.read_u16("entry_type")?;
        Self::from_code(code).ok_or(DecodeError::UnknownValue {
            field: "entry_type",
            offset,
            value: u64::from(code),
        })
    }
}

/// `SignatureType` (§3.2): what a signature covers, so an SCT signature can never be replayed
/// as an STH signature or the other way round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignatureType {
    /// `certificate_timestamp(0)`: an SCT.
    CertificateTimestamp,
    /// `tree_hash(1)`: an STH.
    TreeHash,
}

impl SignatureType {
    /// The wire value.
    pub const fn code(self) -> u8 {
        match self {
            SignatureType::CertificateTimestamp => 0,
            SignatureType::TreeHash => 1,
        }
    }
}

/// `HashAlgorithm` (RFC 5246 §7.4.1.4.1, plus `Intrinsic` from RFC 8422 / RFC 8447).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HashAlgorithm {
    /// `none(0)`.
    None,
    /// `md5(1)`.
    Md5,
    /// `sha1(2)`.
    Sha1,
    /// `sha224(3)`.
    Sha224,
    /// `sha256(4)`: what RFC 6962 logs use.
    Sha256,
    /// `sha384(5)`.
    Sha384,
    /// `sha512(6)`.
    Sha512,
    /// `Intrinsic(8)`: the signature scheme hashes internally, as Ed25519 does.
    Intrinsic,
}

impl HashAlgorithm {
    /// The wire value.
    pub const fn code(self) -> u8 {
        match self {
            HashAlgorithm::None => 0,
            HashAlgorithm::Md5 => 1,
            HashAlgorithm::Sha1 => 2,
            HashAlgorithm::Sha224 => 3,
            HashAlgorithm::Sha256 => 4,
            HashAlgorithm::Sha384 => 5,
            HashAlgorithm::Sha512 => 6,
            HashAlgorithm::Intrinsic => 8,
        }
    }

    /// The algorithm with wire value `code`, if registered.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(HashAlgorithm::None),
            1 => Some(HashAlgorithm::Md5),
            2 => Some(HashAlgorithm::Sha1),
            3 => Some(HashAlgorithm::Sha224),
            4 => Some(HashAlgorithm::Sha256),
            5 => Some(HashAlgorithm::Sha384),
            6 => Some(HashAlgorithm::Sha512),
            8 => Some(HashAlgorithm::Intrinsic),
            _ => None,
        }
    }
}

/// `SignatureAlgorithm` (RFC 5246 §7.4.1.4.1, plus `ed25519`/`ed448` from RFC 8422).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SignatureAlgorithm {
    /// `anonymous(0)`.
    Anonymous,
    /// `rsa(1)`.
    Rsa,
    /// `dsa(2)`.
    Dsa,
    /// `ecdsa(3)`: what our production signer uses (P-256).
    Ecdsa,
    /// `ed25519(7)`: used only by the deterministic simulation signer.
    Ed25519,
    /// `ed448(8)`.
    Ed448,
}

impl SignatureAlgorithm {
    /// The wire value.
    pub const fn code(self) -> u8 {
        match self {
            SignatureAlgorithm::Anonymous => 0,
            SignatureAlgorithm::Rsa => 1,
            SignatureAlgorithm::Dsa => 2,
            SignatureAlgorithm::Ecdsa => 3,
            SignatureAlgorithm::Ed25519 => 7,
            SignatureAlgorithm::Ed448 => 8,
        }
    }

    /// The algorithm with wire value `code`, if registered.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(SignatureAlgorithm::Anonymous),
            1 => Some(SignatureAlgorithm::Rsa),
            2 => Some(SignatureAlgorithm::Dsa),
            3 => Some(SignatureAlgorithm::Ecdsa),
            7 => Some(SignatureAlgorithm::Ed25519),
            8 => Some(SignatureAlgorithm::Ed448),
            _ => None,
        }
    }
}

/// `digitally-signed` (RFC 5246 §4.7): which algorithms, and the signature bytes (for ECDSA, a
/// DER `Ecdsa-Sig-Value`; for Ed25519, the 64 raw bytes).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DigitallySigned {
    /// The hash the signature is over.
    pub hash_algorithm: HashAlgorithm,
    /// The signature scheme.
    pub signature_algorithm: SignatureAlgorithm,
    /// The signature.
    pub signature: Vec<u8>,
}

impl DigitallySigned {
    /// The TLS encoding: hash algorithm, signature algorithm, `opaque signature<0..2^16-1>`.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut writer = TlsWriter::new();
        self.encode_into(&mut writer)?;
        Ok(writer.into_bytes())
    }

    /// Parses exactly one `digitally-signed` from `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = TlsReader::new(bytes, "digitally-signed");
        let signed = Self::decode_from(&mut reader)?;
        reader.finish()?;
        Ok(signed)
    }

    pub(crate) fn encode_into(&self, writer: &mut TlsWriter) -> Result<(), EncodeError> {
        writer.put_u8(self.hash_algorithm.code());
        writer.put_u8(self.signature_algorithm.code());
        writer.put_opaque("signature", SIGNATURE_BOUNDS, &self.signature)
    }

    pub(crate) fn decode_from(reader: &mut TlsReader<'_>) -> Result<Self, DecodeError> {
        let offset = reader.offset();
        let hash_code = reader.read_u8("hash_algorithm")?;
        let hash_algorithm =
            HashAlgorithm::from_code(hash_code).ok_or(DecodeError::UnknownValue {
                field: "hash_algorithm",
                offset,
                value: u64::from(hash_code),
            })?;
        let offset = reader.offset();
        let signature_code = reader.read_u8("signature_algorithm")?;
        let signature_algorithm =
            SignatureAlgorithm::from_code(signature_code).ok_or(DecodeError::UnknownValue {
                field: "signature_algorithm",
                offset,
                value: u64::from(signature_code),
            })?;
        let signature = reader.read_opaque("signature", SIGNATURE_BOUNDS)?.to_vec();
        Ok(Self {
            hash_algorithm,
            signature_algorithm,
            signature,
        })
    }
}

/// Writes `entry_type` and `signed_entry` (the `select (entry_type)` part shared by
/// `TimestampedEntry` and the SCT signature input).
fn encode_signed_entry(writer: &mut TlsWriter, entry: &LogEntry) -> Result<(), EncodeError> {
    writer.put_u16(LogEntryType::of(entry).code());
    match entry {
        LogEntry::X509 { certificate } => {
            writer.put_opaque("ASN.1Cert", ASN1_CERT_BOUNDS, certificate)
        }
        LogEntry::Precert {
            issuer_key_hash,
            tbs_certificate,
        } => {
            writer.put_fixed(issuer_key_hash);
            writer.put_opaque("tbs_certificate", TBS_CERTIFICATE_BOUNDS, tbs_certificate)
        }
    }
}

fn decode_signed_entry(reader: &mut TlsReader<'_>) -> Result<LogEntry, DecodeError> {
    match LogEntryType::decode(reader)? {
        LogEntryType::X509Entry => Ok(LogEntry::X509 {
            certificate: reader.read_opaque("ASN.1Cert", ASN1_CERT_BOUNDS)?.to_vec(),
        }),
        LogEntryType::PrecertEntry => {
            let issuer_key_hash = reader.read_fixed::<32>("issuer_key_hash")?;
            let tbs_certificate = reader
                .read_opaque("tbs_certificate", TBS_CERTIFICATE_BOUNDS)?
                .to_vec();
            Ok(LogEntry::Precert {
                issuer_key_hash,
                tbs_certificate,
            })
        }
    }
}

/// Writes a `TimestampedEntry` body: timestamp, entry type, signed entry, extensions. The
/// same bytes follow `version, signature_type` in the SCT signature input.
fn encode_timestamped_entry(
    writer: &mut TlsWriter,
    timestamp_ms: u64,
    entry: &LogEntry,
    extensions: &[u8],
) -> Result<(), EncodeError> {
    writer.put_u64(timestamp_ms);
    encode_signed_entry(writer, entry)?;
    writer.put_opaque("extensions", CT_EXTENSIONS_BOUNDS, extensions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digitally_signed_round_trips_and_has_the_rfc_layout() {
        let signed = DigitallySigned {
            hash_algorithm: HashAlgorithm::Sha256,
            signature_algorithm: SignatureAlgorithm::Ecdsa,
            signature: vec![0x30, 0x01, 0xff],
        };
        let bytes = signed.encode().unwrap();
        assert_eq!(bytes, [4, 3, 0, 3, 0x30, 0x01, 0xff]);
        assert_eq!(DigitallySigned::decode(&bytes).unwrap(), signed);
    }

    #[test]
    fn digitally_signed_decode_is_strict() {
        // Truncated signature.
        assert!(matches!(
            DigitallySigned::decode(&[4, 3, 0, 3, 0x30]),
            Err(DecodeError::Truncated {
                field: "signature",
                ..
            })
        ));
        // Trailing byte.
        assert!(matches!(
            DigitallySigned::decode(&[4, 3, 0, 1, 0x30, 0x00]),
            Err(DecodeError::TrailingBytes {
                offset: 5,
                count: 1,
                ..
            })
        ));
        // Unknown hash algorithm 7 (unassigned) and signature algorithm 9.
        assert_eq!(
            DigitallySigned::decode(&[7, 3, 0, 0]),
            Err(DecodeError::UnknownValue {
                field: "hash_algorithm",
                offset: 0,
                value: 7
            })
        );
        assert_eq!(
            DigitallySigned::decode(&[4, 9, 0, 0]),
            Err(DecodeError::UnknownValue {
                field: "signature_algorithm",
                offset: 1,
                value: 9
            })
        );
    }

    #[test]
    fn a_signature_over_64_kib_cannot_be_encoded() {
        let signed = DigitallySigned {
            hash_algorithm: HashAlgorithm::Sha256,
            signature_algorithm: SignatureAlgorithm::Ecdsa,
            signature: vec![0; 0x1_0000],
        };
        assert!(matches!(
            signed.encode(),
            Err(EncodeError::LengthOutOfBounds {
                field: "signature",
                length: 0x1_0000,
                ..
            })
        ));
    }

    #[test]
    fn algorithm_codes_round_trip() {
        for code in 0..=u8::MAX {
            if let Some(hash) = HashAlgorithm::from_code(code) {
                assert_eq!(hash.code(), code);
            }
            if let Some(signature) = SignatureAlgorithm::from_code(code) {
                assert_eq!(signature.code(), code);
            }
        }
        assert_eq!(HashAlgorithm::Sha256.code(), 4);
        assert_eq!(SignatureAlgorithm::Ecdsa.code(), 3);
        assert_eq!(SignatureAlgorithm::Ed25519.code(), 7);
        assert_eq!(HashAlgorithm::from_code(7), None);
        assert_eq!(Version::from_code(1), None);
        assert_eq!(LogEntryType::from_code(2), None);
    }
}
