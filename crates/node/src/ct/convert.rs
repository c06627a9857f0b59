//! Between `certus-core`'s CT types (what the replicated state holds) and `certus-ct`'s
//! (RFC 6962's structures): the signed tree head both ways, and an entry's dedupe key.

use certus_core::ct::EntryKey;
use certus_ct::structures::SignedTreeHead;
use certus_ct::{LogEntry, sha256};

/// The dedupe identity: SHA-256 over the entry type and what the entry certifies (not the
/// timestamp), so the same certificate submitted twice is one entry.
pub fn entry_key(entry: &LogEntry) -> EntryKey {
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
    EntryKey(sha256(&bytes))
}

/// The replicated form of an RFC 6962 STH (its signature encoded).
pub(crate) fn to_core_sth(sth: &SignedTreeHead) -> Result<certus_core::ct::SignedTreeHead, String> {
    Ok(certus_core::ct::SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        root_hash: sth.sha256_root_hash,
        signature: sth
            .tree_head_signature
            .encode()
            .map_err(|e| e.to_string())?,
    })
}

/// The RFC 6962 form of a replicated STH.
pub fn from_core_sth(sth: &certus_core::ct::SignedTreeHead) -> Result<SignedTreeHead, String> {
    Ok(SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        sha256_root_hash: sth.root_hash,
        tree_head_signature: certus_ct::structures::DigitallySigned::decode(&sth.signature)
            .map_err(|e| e.to_string())?,
    })
}
