//! RFC 6962 Certificate Transparency, without IO.
//!
//! What a clustered log needs that does not depend on Raft, disks or the network: the Merkle tree
//! hash with inclusion and consistency proofs at any tree size, the exact byte encodings that are
//! hashed and signed (MerkleTreeLeaf, SCT and STH signature inputs, `digitally-signed`), the
//! signers, and the checks a submitted chain must pass.
//!
//! Everything here is deterministic: no clock (timestamps are arguments), no randomness except
//! the ECDSA nonce inside the production signer.

#![deny(missing_docs, unreachable_pub)]

pub mod chain;
mod entry;
pub mod frontier;
pub mod merkle;
pub mod oids;
pub mod signer;
pub mod structures;
pub mod tiles;

pub use entry::{Hash, LogEntry, entry_key, sha256};
