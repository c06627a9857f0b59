//! The signed tree head (§3.5).

use serde::{Deserialize, Serialize};

use super::tls::TlsWriter;
use super::{DigitallySigned, SignatureType, Version};
use crate::Hash;

/// A signed tree head (§3.5 / get-sth): the log's commitment to its first `tree_size` entries.
///
/// RFC 6962 gives an STH no binary form of its own, only the JSON of get-sth and the bytes its
/// signature covers; the version in those bytes is always v1.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SignedTreeHead {
    /// Number of entries in the tree.
    pub tree_size: u64,
    /// When the head was signed, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The Merkle tree hash of the first `tree_size` entries.
    pub sha256_root_hash: Hash,
    /// The log's signature over [`SignedTreeHead::signature_input`].
    pub tree_head_signature: DigitallySigned,
}

impl SignedTreeHead {
    /// The bytes the signature covers.
    pub fn signature_input(&self) -> Vec<u8> {
        sth_signature_input(self.tree_size, self.timestamp_ms, &self.sha256_root_hash)
    }
}

/// The bytes a v1 tree head signature covers (§3.5): version, `tree_hash`, timestamp,
/// tree size, root hash — always 50 bytes.
pub fn sth_signature_input(tree_size: u64, timestamp_ms: u64, sha256_root_hash: &Hash) -> Vec<u8> {
    let mut writer = TlsWriter::new();
    writer.put_u8(Version::V1.code());
    writer.put_u8(SignatureType::TreeHash.code());
    writer.put_u64(timestamp_ms);
    writer.put_u64(tree_size);
    writer.put_fixed(sha256_root_hash);
    writer.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structures::{HashAlgorithm, SignatureAlgorithm};

    #[test]
    fn signature_input_matches_the_go_known_answer() {
        // certificate-transparency-go signatures_test.go: sigTestDefaultSTHSerialized for
        // timestamp 1348589667204, tree size 42 and root 18041bd4...4c23.
        let root: Hash = [
            0x18, 0x04, 0x1b, 0xd4, 0x66, 0x50, 0x83, 0x00, 0x1f, 0xba, 0x8c, 0x54, 0x11, 0xd2,
            0xd7, 0x48, 0xe8, 0xab, 0xbf, 0xdc, 0xdf, 0xd9, 0x21, 0x8c, 0xb0, 0x2b, 0x68, 0xa7,
            0x8e, 0x7d, 0x4c, 0x23,
        ];
        let expected: Vec<u8> = [
            &[0x00u8, 0x01][..],
            &[0x00, 0x00, 0x01, 0x39, 0xfe, 0x35, 0x43, 0x84],
            &[0, 0, 0, 0, 0, 0, 0, 0x2a],
            &root,
        ]
        .concat();
        let input = sth_signature_input(42, 1_348_589_667_204, &root);
        assert_eq!(input, expected);
        assert_eq!(input.len(), 50);

        let sth = SignedTreeHead {
            tree_size: 42,
            timestamp_ms: 1_348_589_667_204,
            sha256_root_hash: root,
            tree_head_signature: DigitallySigned {
                hash_algorithm: HashAlgorithm::Sha256,
                signature_algorithm: SignatureAlgorithm::Ecdsa,
                signature: Vec::new(),
            },
        };
        assert_eq!(sth.signature_input(), expected);
    }

    #[test]
    fn tree_size_and_timestamp_are_not_interchangeable() {
        let root = [0u8; 32];
        assert_ne!(
            sth_signature_input(1, 2, &root),
            sth_signature_input(2, 1, &root)
        );
    }
}
