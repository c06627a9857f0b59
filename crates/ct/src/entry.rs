//! The shared vocabulary: hashes and what a log entry holds.

use serde::{Deserialize, Serialize};

/// A SHA-256 output: leaf and node hashes, tree roots, log ids, issuer key hashes.
pub type Hash = [u8; 32];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Hash {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// What a log entry certifies (RFC 6962 §3.1 `LogEntryType` with its payload).
///
/// For a precertificate it is the TBSCertificate with the poison extension removed (and, when a
/// precertificate signing certificate issued it, the issuer rewritten) together with the SHA-256
/// of the real issuer's DER SubjectPublicKeyInfo.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LogEntry {
    /// `x509_entry`: the leaf certificate, DER.
    X509 {
        /// The DER leaf certificate.
        certificate: Vec<u8>,
    },
    /// `precert_entry`.
    Precert {
        /// SHA-256 of the issuing CA's DER SubjectPublicKeyInfo.
        issuer_key_hash: Hash,
        /// The DER TBSCertificate with the poison extension removed.
        tbs_certificate: Vec<u8>,
    },
}

/// The dedupe identity of an entry: SHA-256 over the entry type and what the entry certifies
/// (not the timestamp), so the same certificate submitted twice is one entry. The replicated
/// state keys entries by it, and each node's local database indexes its entries by it.
pub fn entry_key(entry: &LogEntry) -> Hash {
    let mut bytes = Vec::new();
    match entry {
        LogEntry::X509 { certificate } => {
            bytes.extend_from_slice(&0u16.to_be_bytes());
            bytes.extend_from_slice(certificate);
        }
        LogEntry::Precert {
            issuer_key_hash,
            tbs_certificate,
        } => {
            bytes.extend_from_slice(&1u16.to_be_bytes());
            bytes.extend_from_slice(issuer_key_hash);
            bytes.extend_from_slice(tbs_certificate);
        }
    }
    sha256(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_nothing_is_the_known_digest() {
        // The empty-tree root of RFC 6962 §2.1.
        let expected = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let hex: String = sha256(b"").iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
    }
}
