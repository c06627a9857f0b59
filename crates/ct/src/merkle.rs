//! The RFC 6962 Merkle tree.
