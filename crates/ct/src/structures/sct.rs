//! The signed certificate timestamp (§3.2) and the SCT list embedded in certificates (§3.3).

use serde::{Deserialize, Serialize};

use super::tls::{DecodeError, EncodeError, TlsReader, TlsWriter};
use super::{
    CT_EXTENSIONS_BOUNDS, DigitallySigned, SCT_LIST_BOUNDS, SERIALIZED_SCT_BOUNDS, SignatureType,
    Version, encode_timestamped_entry,
};
use crate::{Hash, LogEntry};

/// `SignedCertificateTimestamp` (§3.2): the log's promise to include an entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SignedCertificateTimestamp {
    /// `sct_version`; v1.
    pub version: Version,
    /// `LogID`: SHA-256 of the log's DER SubjectPublicKeyInfo.
    pub log_id: Hash,
    /// Milliseconds since the Unix epoch; also the timestamp in the leaf.
    pub timestamp_ms: u64,
    /// `CtExtensions`; empty for every log today.
    pub extensions: Vec<u8>,
    /// The log's signature over [`SignedCertificateTimestamp::signature_input`].
    pub signature: DigitallySigned,
}

impl SignedCertificateTimestamp {
    /// The TLS encoding of the SCT itself, as in the certificate extension, the OCSP extension
    /// and the TLS extension: version, log id, timestamp, extensions, `digitally-signed`.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut writer = TlsWriter::new();
        self.encode_into(&mut writer)?;
        Ok(writer.into_bytes())
    }

    /// Parses exactly one SCT from `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = TlsReader::new(bytes, "SignedCertificateTimestamp");
        let sct = Self::decode_from(&mut reader)?;
        reader.finish()?;
        Ok(sct)
    }

    /// The bytes the signature covers, for `entry`, using this SCT's version, timestamp and
    /// extensions.
    pub fn signature_input(&self, entry: &LogEntry) -> Result<Vec<u8>, EncodeError> {
        encode_signature_input(self.version, self.timestamp_ms, entry, &self.extensions)
    }

    fn encode_into(&self, writer: &mut TlsWriter) -> Result<(), EncodeError> {
        writer.put_u8(self.version.code());
        writer.put_fixed(&self.log_id);
        writer.put_u64(self.timestamp_ms);
        writer.put_opaque("extensions", CT_EXTENSIONS_BOUNDS, &self.extensions)?;
        self.signature.encode_into(writer)
    }

    fn decode_from(reader: &mut TlsReader<'_>) -> Result<Self, DecodeError> {
        let version = Version::decode(reader, "sct_version")?;
        let log_id = reader.read_fixed::<32>("id")?;
        let timestamp_ms = reader.read_u64("timestamp")?;
        let extensions = reader
            .read_opaque("extensions", CT_EXTENSIONS_BOUNDS)?
            .to_vec();
        let signature = DigitallySigned::decode_from(reader)?;
        Ok(Self {
            version,
            log_id,
            timestamp_ms,
            extensions,
            signature,
        })
    }
}

/// The bytes a v1 SCT signature covers (§3.2): version, `certificate_timestamp`, timestamp,
/// entry type, signed entry, extensions.
pub fn sct_signature_input(
    timestamp_ms: u64,
    entry: &LogEntry,
    extensions: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    encode_signature_input(Version::V1, timestamp_ms, entry, extensions)
}

fn encode_signature_input(
    version: Version,
    timestamp_ms: u64,
    entry: &LogEntry,
    extensions: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    let mut writer = TlsWriter::new();
    writer.put_u8(version.code());
    writer.put_u8(SignatureType::CertificateTimestamp.code());
    encode_timestamped_entry(&mut writer, timestamp_ms, entry, extensions)?;
    Ok(writer.into_bytes())
}

/// `SignedCertificateTimestampList` (§3.3): the contents of the certificate / OCSP / TLS
/// extension, a list of length-prefixed serialized SCTs.
pub fn encode_sct_list(scts: &[SignedCertificateTimestamp]) -> Result<Vec<u8>, EncodeError> {
    let mut writer = TlsWriter::new();
    writer.put_vector("sct_list", SCT_LIST_BOUNDS, |list| {
        scts.iter().try_for_each(|sct| {
            list.put_opaque("SerializedSCT", SERIALIZED_SCT_BOUNDS, &sct.encode()?)
        })
    })?;
    Ok(writer.into_bytes())
}

/// Parses a `SignedCertificateTimestampList`. Every element must be a well-formed v1 SCT.
pub fn decode_sct_list(bytes: &[u8]) -> Result<Vec<SignedCertificateTimestamp>, DecodeError> {
    let mut reader = TlsReader::new(bytes, "SignedCertificateTimestampList");
    let mut list = reader.read_vector("sct_list", SCT_LIST_BOUNDS)?;
    let mut scts = Vec::new();
    while !list.is_empty() {
        let mut serialized = list.read_vector("SerializedSCT", SERIALIZED_SCT_BOUNDS)?;
        scts.push(SignedCertificateTimestamp::decode_from(&mut serialized)?);
        serialized.finish()?;
    }
    list.finish()?;
    reader.finish()?;
    Ok(scts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structures::{HashAlgorithm, SignatureAlgorithm};

    fn sct() -> SignedCertificateTimestamp {
        SignedCertificateTimestamp {
            version: Version::V1,
            log_id: [0x11; 32],
            timestamp_ms: 1_348_589_665_525,
            extensions: Vec::new(),
            signature: DigitallySigned {
                hash_algorithm: HashAlgorithm::Sha256,
                signature_algorithm: SignatureAlgorithm::Ecdsa,
                signature: vec![0x30, 0x02, 0x01, 0x00],
            },
        }
    }

    #[test]
    fn sct_has_the_rfc_layout_and_round_trips() {
        let sct = sct();
        let bytes = sct.encode().unwrap();
        let expected: Vec<u8> = [
            &[0u8][..],
            &[0x11; 32],
            &1_348_589_665_525u64.to_be_bytes(),
            &[0, 0],
            &[4, 3, 0, 4, 0x30, 0x02, 0x01, 0x00],
        ]
        .concat();
        assert_eq!(bytes, expected);
        assert_eq!(SignedCertificateTimestamp::decode(&bytes).unwrap(), sct);

        let with_extensions = SignedCertificateTimestamp {
            extensions: vec![1, 2, 3],
            ..sct
        };
        let bytes = with_extensions.encode().unwrap();
        assert_eq!(
            SignedCertificateTimestamp::decode(&bytes).unwrap(),
            with_extensions
        );
    }

    #[test]
    fn sct_decode_rejects_truncation_trailing_bytes_and_other_versions() {
        let bytes = sct().encode().unwrap();
        for cut in 0..bytes.len() {
            assert!(
                matches!(
                    SignedCertificateTimestamp::decode(&bytes[..cut]),
                    Err(DecodeError::Truncated { .. })
                ),
                "prefix of {cut} bytes"
            );
        }
        let mut trailing = bytes.clone();
        trailing.extend_from_slice(&[0, 0]);
        assert!(matches!(
            SignedCertificateTimestamp::decode(&trailing),
            Err(DecodeError::TrailingBytes { count: 2, .. })
        ));
        let mut v2 = bytes;
        v2[0] = 1;
        assert!(matches!(
            SignedCertificateTimestamp::decode(&v2),
            Err(DecodeError::UnknownValue {
                field: "sct_version",
                value: 1,
                ..
            })
        ));
    }

    #[test]
    fn signature_input_matches_the_go_known_answers() {
        // certificate-transparency-go serialization_test.go: the v1 SCT signature input for the
        // certificate "certificate" and for the precert (issuer hash
        // "iamapublickeyshatwofivesixdigest", TBS "tbs") at timestamp 1234, no extensions.
        let x509 = LogEntry::X509 {
            certificate: b"certificate".to_vec(),
        };
        let expected_x509: Vec<u8> = [
            &[0u8, 0][..],
            &[0, 0, 0, 0, 0, 0, 0x04, 0xd2],
            &[0, 0],
            &[0, 0, 0x0b],
            b"certificate",
            &[0, 0],
        ]
        .concat();
        assert_eq!(
            sct_signature_input(1234, &x509, &[]).unwrap(),
            expected_x509
        );

        let mut issuer_key_hash = [0u8; 32];
        issuer_key_hash.copy_from_slice(b"iamapublickeyshatwofivesixdigest");
        let precert = LogEntry::Precert {
            issuer_key_hash,
            tbs_certificate: b"tbs".to_vec(),
        };
        let expected_precert: Vec<u8> = [
            &[0u8, 0][..],
            &[0, 0, 0, 0, 0, 0, 0x04, 0xd2],
            &[0, 1],
            b"iamapublickeyshatwofivesixdigest",
            &[0, 0, 3],
            b"tbs",
            &[0, 0],
        ]
        .concat();
        assert_eq!(
            sct_signature_input(1234, &precert, &[]).unwrap(),
            expected_precert
        );

        let sct = SignedCertificateTimestamp {
            timestamp_ms: 1234,
            ..sct()
        };
        assert_eq!(sct.signature_input(&x509).unwrap(), expected_x509);
    }

    #[test]
    fn signature_input_covers_the_leaf_fields_after_version_and_type() {
        // The SCT input is the leaf with leaf_type swapped for signature_type: both are
        // version, a zero byte, then the same TimestampedEntry bytes.
        let entry = LogEntry::X509 {
            certificate: b"c".to_vec(),
        };
        let input = sct_signature_input(99, &entry, &[7]).unwrap();
        let leaf = crate::structures::leaf_input(99, &entry, &[7]).unwrap();
        assert_eq!(input, leaf);
    }

    #[test]
    fn sct_list_round_trips_and_is_strict() {
        let first = sct();
        let second = SignedCertificateTimestamp {
            log_id: [0x22; 32],
            ..sct()
        };
        let bytes = encode_sct_list(&[first.clone(), second.clone()]).unwrap();
        let one = first.encode().unwrap().len();
        assert_eq!(bytes.len(), 2 + 2 * (2 + one));
        assert_eq!(
            &bytes[..2],
            &u16::try_from(2 * (2 + one)).unwrap().to_be_bytes()
        );
        assert_eq!(decode_sct_list(&bytes).unwrap(), vec![first, second]);

        // An empty list is not allowed (<1..2^16-1>).
        assert!(matches!(
            encode_sct_list(&[]),
            Err(EncodeError::LengthOutOfBounds {
                field: "sct_list",
                ..
            })
        ));
        assert!(matches!(
            decode_sct_list(&[0, 0]),
            Err(DecodeError::LengthOutOfBounds {
                field: "sct_list",
                ..
            })
        ));
        let mut trailing = bytes;
        trailing.push(0);
        assert!(matches!(
            decode_sct_list(&trailing),
            Err(DecodeError::TrailingBytes {
                structure: "SignedCertificateTimestampList",
                ..
            })
        ));
    }

    #[test]
    fn sct_list_rejects_an_element_with_bytes_after_the_sct() {
        let mut element = sct().encode().unwrap();
        element.push(0xaa);
        let mut writer = TlsWriter::new();
        writer
            .put_vector("sct_list", SCT_LIST_BOUNDS, |list| {
                list.put_opaque("SerializedSCT", SERIALIZED_SCT_BOUNDS, &element)
            })
            .unwrap();
        assert!(matches!(
            decode_sct_list(&writer.into_bytes()),
            Err(DecodeError::TrailingBytes {
                structure: "SerializedSCT",
                count: 1,
                ..
            })
        ));
    }
}
