//! Between `certus-core`'s CT types (what the replicated state holds) and `certus-ct`'s
//! (RFC 6962's structures): the signed tree head both ways, and an entry's dedupe key.

use certus_core::ct::EntryKey;
use certus_ct::LogEntry;
use certus_ct::structures::SignedTreeHead;

/// The dedupe identity ([`certus_ct::entry_key`]) as the replicated state holds it.
pub fn entry_key(entry: &LogEntry) -> EntryKey {
    EntryKey(certus_ct::entry_key(entry))
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
