//! Why the local CT database failed or refused: shared by the database (`ct_db.rs`) and its
//! hash indexes (`ct_hash_index.rs`), which the database drives, so neither imports the other
//! for it.

use certus_ct::merkle::MerkleError;

use crate::disk::DiskError;

/// Why the local CT database failed or refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CtDbError {
    /// The disk failed.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// Entries must extend the contiguous run.
    #[error("entries must start at {expected}, the first missing number, not at {got}")]
    NotContiguous {
        /// The first missing number.
        expected: u64,
        /// Where the batch started.
        got: u64,
    },
    /// A root or proof the tree cannot give (a size past it, an index outside it).
    #[error(transparent)]
    Tree(#[from] MerkleError),
    /// Stored data contradicts itself.
    #[error("local CT database is corrupt: {0}")]
    Corrupt(String),
}
