//! The reads of the log every API shares (RFC 6962 §4's get-* calls): what is asked, what is
//! answered and why a read was not. The CT node answers them, the peers forward them, the HTTP
//! and gRPC APIs translate them.

use certus_ct::Hash;
use certus_ct::structures::SignedTreeHead;

/// The bound on one get-entries, named here too for the APIs that take it with the reads.
pub use crate::limits::GET_ENTRIES_MAX;

/// A read of the log, as RFC 6962 §4 defines them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// get-sth.
    Sth,
    /// get-sth-consistency.
    Consistency {
        /// The older size.
        first: u64,
        /// The newer size.
        second: u64,
    },
    /// get-proof-by-hash.
    ProofByHash {
        /// The leaf hash.
        leaf_hash: Hash,
        /// The tree size.
        tree_size: u64,
    },
    /// get-entries.
    Entries {
        /// First index.
        start: u64,
        /// Last index (inclusive).
        end: u64,
    },
    /// get-entry-and-proof.
    EntryAndProof {
        /// The index.
        leaf_index: u64,
        /// The tree size.
        tree_size: u64,
    },
}

/// An entry as get-entries serves it: `(leaf_input, extra_data)`.
pub type ServedEntry = (Vec<u8>, Vec<u8>);

/// The answer to a [`Read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadReply {
    /// The serving STH.
    Sth(SignedTreeHead),
    /// A consistency proof.
    Consistency(Vec<Hash>),
    /// An inclusion proof.
    Proof {
        /// The leaf's index.
        leaf_index: u64,
        /// Its audit path.
        audit_path: Vec<Hash>,
    },
    /// Entries, in order.
    Entries(Vec<ServedEntry>),
    /// One entry and its audit path.
    EntryAndProof {
        /// The entry.
        entry: ServedEntry,
        /// Its audit path.
        audit_path: Vec<Hash>,
    },
}

/// Why a read was not answered.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The parameters are out of range (HTTP 400, gRPC INVALID_ARGUMENT).
    #[error("{0}")]
    BadRequest(String),
    /// Nothing matches (HTTP 404, gRPC NOT_FOUND).
    #[error("{0}")]
    NotFound(String),
    /// This node cannot serve now: no STH yet, or behind (HTTP 503, gRPC UNAVAILABLE).
    #[error("{0}")]
    Unavailable(String),
    /// Local data is inconsistent (HTTP 500, gRPC INTERNAL).
    #[error("{0}")]
    Internal(String),
}
