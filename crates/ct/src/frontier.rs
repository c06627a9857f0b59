//! The right edge of an RFC 6962 tree: the roots of the complete subtrees that make up its first
//! `size` leaves (one per set bit of `size`, largest first). It is all that is needed to append
//! leaves and compute the new root, in O(log n) memory.
//!
//! A mirror uses it to check leaves fetched from another log before it stores them: it extends
//! the frontier of its own tree with the fetched leaf hashes and compares the root with the other
//! log's signed tree head (or proves consistency with it), without touching its own tree.

use crate::Hash;
use crate::merkle::{MerkleError, MerkleTree, StoredNodes, empty_root, node_hash};

/// The complete-subtree roots covering leaves `[0, size)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// Subtree roots, largest (leftmost) first; subtree `i` has 2^k leaves for the i-th set bit
    /// of `size` counted from the top.
    subtrees: Vec<Hash>,
}

impl Default for Frontier {
    fn default() -> Self {
        Self::new()
    }
}

impl Frontier {
    /// The frontier of the empty tree.
    pub fn new() -> Self {
        Frontier {
            size: 0,
            subtrees: Vec::new(),
        }
    }

    /// The frontier of `tree`'s first `size` leaves, read from its stored nodes.
    pub fn of_tree(tree: &MerkleTree, size: u64) -> Result<Self, MerkleError> {
        Frontier::of_nodes(tree, size)
    }

    /// The frontier of the first `size` leaves of any stored tree (in memory or in tiles).
    pub fn of_nodes<S: StoredNodes + ?Sized>(nodes: &S, size: u64) -> Result<Self, S::Error> {
        if size > nodes.size() {
            return Err(MerkleError::SizeBeyondTree {
                tree_size: size,
                local_size: nodes.size(),
            }
            .into());
        }
        let mut subtrees = Vec::new();
        let mut start: u64 = 0;
        for level in (0..u64::BITS).rev() {
            if (size >> level) & 1 == 1 {
                subtrees.push(nodes.node(level, start >> level)?);
                start += 1 << level;
            }
        }
        Ok(Frontier { size, subtrees })
    }

    /// The number of leaves covered.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends one leaf hash: like a binary counter, equal-sized subtrees at the end merge.
    pub fn push(&mut self, leaf_hash: Hash) {
        let mut node = leaf_hash;
        // Each trailing one bit of the old size is a subtree the new node completes.
        let mut carries = self.size.trailing_ones();
        while carries > 0 {
            let left = self.subtrees.pop().expect("one subtree per set bit");
            node = node_hash(&left, &node);
            carries -= 1;
        }
        self.subtrees.push(node);
        self.size += 1;
    }

    /// The RFC 6962 root of the leaves covered: the subtrees folded from the right.
    pub fn root(&self) -> Hash {
        let mut subtrees = self.subtrees.iter().rev();
        let Some(last) = subtrees.next() else {
            return empty_root();
        };
        subtrees.fold(*last, |right, left| node_hash(left, &right))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::merkle::leaf_hash;

    fn leaves(count: u64) -> Vec<Hash> {
        (0..count).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    #[test]
    fn the_empty_frontier_has_the_empty_root() {
        assert_eq!(Frontier::new().root(), empty_root());
        assert_eq!(
            Frontier::of_tree(&MerkleTree::new(), 0).unwrap(),
            Frontier::new()
        );
    }

    #[test]
    fn a_size_beyond_the_tree_is_an_error() {
        let tree = MerkleTree::from_leaf_hashes(leaves(3));
        assert_eq!(
            Frontier::of_tree(&tree, 4),
            Err(MerkleError::SizeBeyondTree {
                tree_size: 4,
                local_size: 3
            })
        );
    }

    #[test]
    fn one_subtree_per_set_bit() {
        let tree = MerkleTree::from_leaf_hashes(leaves(13));
        let frontier = Frontier::of_tree(&tree, 13).unwrap();
        assert_eq!(frontier.subtrees.len(), 3);
        assert_eq!(frontier.size(), 13);
    }

    proptest! {
        /// Extending the frontier of a prefix gives the root the whole tree has at every size,
        /// and the same frontier as reading it from the tree.
        #[test]
        fn extending_a_prefix_matches_the_tree(total in 0u64..300, cut in 0u64..300) {
            let cut = cut.min(total);
            let all = leaves(total);
            let tree = MerkleTree::from_leaf_hashes(all.iter().copied());
            let mut frontier = Frontier::of_tree(&tree, cut).unwrap();
            prop_assert_eq!(frontier.root(), tree.root_at(cut).unwrap());
            for (index, leaf) in all.iter().enumerate().skip(usize::try_from(cut).unwrap()) {
                frontier.push(*leaf);
                let size = index as u64 + 1;
                prop_assert_eq!(frontier.root(), tree.root_at(size).unwrap());
                prop_assert_eq!(&frontier, &Frontier::of_tree(&tree, size).unwrap());
            }
        }

        /// A changed leaf after the cut changes the root.
        #[test]
        fn a_different_leaf_gives_a_different_root(total in 1u64..100, changed in 0u64..100) {
            let changed = changed % total;
            let all = leaves(total);
            let tree = MerkleTree::from_leaf_hashes(all.iter().copied());
            let mut frontier = Frontier::new();
            for (index, leaf) in all.iter().enumerate() {
                let mut leaf = *leaf;
                if index as u64 == changed {
                    leaf[0] ^= 1;
                }
                frontier.push(leaf);
            }
            prop_assert_ne!(frontier.root(), tree.root());
        }
    }
}
