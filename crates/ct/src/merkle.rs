//! The RFC 6962 Merkle tree: hashes, an append-only tree with proofs at any size, and the
//! client-side proof checks.
//!
//! RFC 6962 §2.1: a leaf hashes as SHA-256(0x00 ‖ input), an interior node as
//! SHA-256(0x01 ‖ left ‖ right), the empty tree as SHA-256 of nothing, and a tree of n > 1 leaves
//! splits at the largest power of two smaller than n. That is the same tree as pairing nodes level
//! by level from the left and carrying a lone last node up unchanged, which is how
//! [`MerkleTree`] stores it: level k, index i holds the hash of the complete subtree over leaves
//! [i·2^k, (i+1)·2^k). Every hash of a tree of any smaller size is either one of those stored
//! nodes or a fold of the O(log n) stored nodes given by the binary decomposition of the size, so
//! roots and proofs at an older size (the serving STH lags the local tree) cost O(log n).
//!
//! Nodes are write-once: [`MerkleTree::push`] reports the nodes it completed so that a store can
//! append them, and [`MerkleTree::from_levels`] rebuilds the tree from them without rehashing.

use ring::digest;

use crate::{Hash, sha256};

/// The RFC 6962 leaf hash, SHA-256(0x00 ‖ `leaf_input`).
///
/// For a log entry, `leaf_input` is the encoded MerkleTreeLeaf.
pub fn leaf_hash(leaf_input: &[u8]) -> Hash {
    let mut context = digest::Context::new(&digest::SHA256);
    context.update(&[0x00]);
    context.update(leaf_input);
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// The RFC 6962 interior node hash, SHA-256(0x01 ‖ `left` ‖ `right`).
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut input = [0u8; 65];
    input[0] = 0x01;
    input[1..33].copy_from_slice(left);
    input[33..].copy_from_slice(right);
    sha256(&input)
}

/// The root of the empty tree, SHA-256 of nothing.
pub fn empty_root() -> Hash {
    sha256(&[])
}

/// Why the local tree cannot answer, or why stored levels cannot be a tree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MerkleError {
    /// Asked about a tree size the local tree has not reached.
    #[error("tree size {tree_size} is larger than the local tree ({local_size} leaves)")]
    SizeBeyondTree {
        /// The size asked for.
        tree_size: u64,
        /// How many leaves the local tree holds.
        local_size: u64,
    },
    /// A leaf index at or past the tree size.
    #[error("leaf index {index} is not in a tree of {tree_size} leaves")]
    IndexOutOfRange {
        /// The leaf index asked for.
        index: u64,
        /// The size of the tree it was asked in.
        tree_size: u64,
    },
    /// A consistency proof from a larger tree to a smaller one.
    #[error("old tree size {old_size} is larger than new tree size {new_size}")]
    SizesReversed {
        /// The old (first) tree size.
        old_size: u64,
        /// The new (second) tree size.
        new_size: u64,
    },
    /// A consistency proof from the empty tree, which RFC 6962 §2.1.2 does not define.
    #[error("RFC 6962 defines no consistency proof from the empty tree (old size 0)")]
    EmptyOldTree,
    /// Stored levels whose lengths do not fit together.
    #[error("level {level} holds {len} hashes but the level below implies {expected}")]
    InconsistentLevels {
        /// The level whose length is wrong.
        level: usize,
        /// How many hashes it holds.
        len: usize,
        /// How many the level below implies (half of its length, rounded down).
        expected: usize,
    },
    /// A level that cannot be recomputed because it is the leaf level or does not exist.
    #[error(
        "level {level} cannot be recomputed from the level below: level 0 holds the leaf \
         hashes and the top level is {top_level}"
    )]
    NoSuchLevel {
        /// The level asked for.
        level: usize,
        /// The highest level the tree holds.
        top_level: usize,
    },
    /// A stored node that is not the hash of its two children.
    #[error("node {index} at level {level} is not the hash of its two children")]
    CorruptNode {
        /// The node's level.
        level: usize,
        /// The node's index within its level.
        index: u64,
    },
}

/// Why a proof does not check out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// A leaf index at or past the tree size (including any index in the empty tree).
    #[error("leaf index {index} is not in a tree of {tree_size} leaves")]
    IndexOutOfRange {
        /// The claimed leaf index.
        index: u64,
        /// The claimed tree size.
        tree_size: u64,
    },
    /// A consistency proof from a larger tree to a smaller one.
    #[error("old tree size {old_size} is larger than new tree size {new_size}")]
    SizesReversed {
        /// The old (first) tree size.
        old_size: u64,
        /// The new (second) tree size.
        new_size: u64,
    },
    /// A consistency proof from the empty tree, which RFC 6962 §2.1.2 does not define.
    #[error("RFC 6962 defines no consistency proof from the empty tree (old size 0)")]
    EmptyOldTree,
    /// A proof with more or fewer hashes than the sizes determine.
    #[error("the proof holds {actual} hashes but these sizes need exactly {expected}")]
    WrongLength {
        /// How many hashes the sizes need.
        expected: usize,
        /// How many the proof holds.
        actual: usize,
    },
    /// An inclusion proof that leads to a different root.
    #[error("the inclusion proof leads to a different root")]
    RootMismatch,
    /// A consistency proof that does not lead to the old root.
    #[error("the consistency proof does not lead to the old root")]
    OldRootMismatch,
    /// A consistency proof that does not lead to the new root.
    #[error("the consistency proof does not lead to the new root")]
    NewRootMismatch,
    /// Two trees of the same size with different roots: not the same log.
    #[error("two trees of {tree_size} leaves have different roots")]
    EqualSizeRootsDiffer {
        /// The size both trees claim.
        tree_size: u64,
    },
}

/// A node that became complete when a leaf was pushed, for an append-only store.
///
/// Within each level nodes complete in index order, so `index` is always the level's length
/// before the node was added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewNode {
    /// 0 for the leaf hash itself, k for a subtree of 2^k leaves.
    pub level: usize,
    /// Position within the level: the subtree covers leaves [index·2^level, (index+1)·2^level).
    pub index: u64,
    /// The leaf hash or subtree hash.
    pub hash: Hash,
}

/// The nodes one [`MerkleTree::push`] completed, from the leaf (level 0) upwards.
#[derive(Clone, Debug)]
pub struct NewNodes<'a> {
    levels: &'a [Vec<Hash>],
    next_level: usize,
    end_level: usize,
}

impl Iterator for NewNodes<'_> {
    type Item = NewNode;

    fn next(&mut self) -> Option<NewNode> {
        if self.next_level >= self.end_level {
            return None;
        }
        let level = self.next_level;
        self.next_level += 1;
        let nodes = &self.levels[level];
        let hash = *nodes.last()?;
        Some(NewNode {
            level,
            index: (nodes.len() - 1) as u64,
            hash,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = self.end_level - self.next_level;
        (remaining, Some(remaining))
    }
}

impl ExactSizeIterator for NewNodes<'_> {}

/// An append-only RFC 6962 tree holding every leaf hash and every complete-subtree hash.
///
/// Invariants: there is always a level 0 (the leaf hashes); level k+1 holds exactly
/// ⌊len(level k) / 2⌋ hashes; the top level holds fewer than two. Memory is under two hashes per
/// leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MerkleTree {
    levels: Vec<Vec<Hash>>,
}

impl Default for MerkleTree {
    fn default() -> Self {
        Self::new()
    }
}

impl MerkleTree {
    /// The empty tree.
    pub fn new() -> Self {
        Self {
            levels: vec![Vec::new()],
        }
    }

    /// A tree over the given leaf hashes, in order, hashing every interior node.
    pub fn from_leaf_hashes(leaf_hashes: impl IntoIterator<Item = Hash>) -> Self {
        let mut tree = Self::new();
        for leaf in leaf_hashes {
            tree.push(leaf);
        }
        tree
    }

    /// Rebuilds a tree from stored levels (as [`MerkleTree::levels`] returns them) without
    /// hashing; only the lengths are checked. Trailing empty levels are ignored.
    ///
    /// Use [`MerkleTree::verify_level`] to recompute stored hashes when the store is not trusted.
    pub fn from_levels(mut levels: Vec<Vec<Hash>>) -> Result<Self, MerkleError> {
        while levels.len() > 1 && levels.last().is_some_and(Vec::is_empty) {
            levels.pop();
        }
        if levels.is_empty() {
            return Ok(Self::new());
        }
        for level in 1..levels.len() {
            let expected = levels[level - 1].len() / 2;
            let len = levels[level].len();
            if len != expected {
                return Err(MerkleError::InconsistentLevels {
                    level,
                    len,
                    expected,
                });
            }
        }
        let top_len = levels.last().map_or(0, Vec::len);
        if top_len >= 2 {
            return Err(MerkleError::InconsistentLevels {
                level: levels.len(),
                len: 0,
                expected: top_len / 2,
            });
        }
        Ok(Self { levels })
    }

    /// The stored levels, level 0 (leaf hashes) first: what a store persists and
    /// [`MerkleTree::from_levels`] takes back.
    pub fn levels(&self) -> &[Vec<Hash>] {
        &self.levels
    }

    /// The stored levels, by value.
    pub fn into_levels(self) -> Vec<Vec<Hash>> {
        self.levels
    }

    /// Appends a leaf hash and returns the nodes that became complete: the leaf itself, then one
    /// node per level for as long as the new leaf closes a pair. Amortised O(1) hashes, at most
    /// O(log n).
    pub fn push(&mut self, leaf_hash: Hash) -> NewNodes<'_> {
        self.levels[0].push(leaf_hash);
        let mut level = 0;
        while self.levels[level].len().is_multiple_of(2) {
            let nodes = &self.levels[level];
            let parent = node_hash(&nodes[nodes.len() - 2], &nodes[nodes.len() - 1]);
            if self.levels.len() == level + 1 {
                self.levels.push(Vec::new());
            }
            self.levels[level + 1].push(parent);
            level += 1;
        }
        NewNodes {
            levels: &self.levels,
            next_level: 0,
            end_level: level + 1,
        }
    }

    /// The number of leaves.
    pub fn size(&self) -> u64 {
        self.leaf_count() as u64
    }

    /// The root of the whole tree.
    pub fn root(&self) -> Hash {
        root_at(self, self.size()).expect("the tree's own size is within it")
    }

    /// The root of the tree's first `tree_size` leaves (the empty root for 0).
    pub fn root_at(&self, tree_size: u64) -> Result<Hash, MerkleError> {
        root_at(self, tree_size)
    }

    /// The stored hash of leaf `index`.
    pub fn leaf_hash_at(&self, index: u64) -> Result<Hash, MerkleError> {
        let out_of_range = MerkleError::IndexOutOfRange {
            index,
            tree_size: self.size(),
        };
        let index = usize::try_from(index).map_err(|_| out_of_range.clone())?;
        self.levels[0].get(index).copied().ok_or(out_of_range)
    }

    /// The RFC 6962 §2.1.1 audit path of leaf `index` in the tree of the first `tree_size`
    /// leaves, from the leaf's sibling up to the root's child.
    pub fn inclusion_proof(&self, index: u64, tree_size: u64) -> Result<Vec<Hash>, MerkleError> {
        inclusion_proof(self, index, tree_size)
    }

    /// The RFC 6962 §2.1.2 consistency proof between the trees of the first `old_size` and
    /// `new_size` leaves; empty when the sizes are equal.
    ///
    /// `old_size` 0 is an error ([`MerkleError::EmptyOldTree`]): RFC 6962 defines no proof from
    /// the empty tree, since every tree extends it.
    pub fn consistency_proof(
        &self,
        old_size: u64,
        new_size: u64,
    ) -> Result<Vec<Hash>, MerkleError> {
        consistency_proof(self, old_size, new_size)
    }

    /// Recomputes level `level` from level `level - 1` and reports the first stored node that
    /// differs. Costs one hash per node of the level: the high levels are cheap to cross-check
    /// after a restart.
    pub fn verify_level(&self, level: usize) -> Result<(), MerkleError> {
        let top_level = self.levels.len() - 1;
        if level == 0 || level > top_level {
            return Err(MerkleError::NoSuchLevel { level, top_level });
        }
        let children = self.levels[level - 1].chunks_exact(2);
        for (index, (node, pair)) in self.levels[level].iter().zip(children).enumerate() {
            if *node != node_hash(&pair[0], &pair[1]) {
                return Err(MerkleError::CorruptNode {
                    level,
                    index: index as u64,
                });
            }
        }
        Ok(())
    }

    /// Recomputes every level above the leaves (one hash per stored interior node).
    pub fn verify_levels(&self) -> Result<(), MerkleError> {
        (1..self.levels.len()).try_for_each(|level| self.verify_level(level))
    }

    fn leaf_count(&self) -> usize {
        self.levels[0].len()
    }
}

impl StoredNodes for MerkleTree {
    type Error = MerkleError;

    fn size(&self) -> u64 {
        self.leaf_count() as u64
    }

    fn node(&self, level: u32, index: u64) -> Result<Hash, MerkleError> {
        let stored = usize::try_from(level)
            .ok()
            .and_then(|level| self.levels.get(level))
            .and_then(|nodes| nodes.get(usize::try_from(index).ok()?));
        stored.copied().ok_or(MerkleError::SizeBeyondTree {
            tree_size: index
                .saturating_add(1)
                .saturating_mul(1u64 << level.min(63)),
            local_size: self.size(),
        })
    }
}

/// Where the complete-subtree hashes of an append-only tree come from: every hash of the tree at
/// any size up to [`StoredNodes::size`] is one of them or a fold of O(log n) of them, so roots
/// and proofs need nothing else. [`MerkleTree`] holds them all in memory; a tiled store reads them
/// from tiles ([`crate::tiles`]).
pub trait StoredNodes {
    /// What a failed read is; lookups past the tree are [`MerkleError`]s.
    type Error: From<MerkleError>;

    /// How many leaves the tree holds.
    fn size(&self) -> u64;

    /// The hash of the complete subtree over leaves [index·2^level, (index+1)·2^level), which
    /// the callers here ask only within [`StoredNodes::size`].
    fn node(&self, level: u32, index: u64) -> Result<Hash, Self::Error>;
}

/// The root of the first `tree_size` leaves of `nodes` (the empty root for 0).
pub fn root_at<S: StoredNodes + ?Sized>(nodes: &S, tree_size: u64) -> Result<Hash, S::Error> {
    within(nodes, tree_size)?;
    subtree_hash(nodes, 0, tree_size)
}

/// The RFC 6962 §2.1.1 audit path of leaf `index` in the tree of the first `tree_size` leaves
/// of `nodes`, from the leaf's sibling up to the root's child.
pub fn inclusion_proof<S: StoredNodes + ?Sized>(
    nodes: &S,
    index: u64,
    tree_size: u64,
) -> Result<Vec<Hash>, S::Error> {
    within(nodes, tree_size)?;
    if index >= tree_size {
        return Err(MerkleError::IndexOutOfRange { index, tree_size }.into());
    }
    let mut proof = Vec::new();
    push_path(nodes, index, tree_size, 0, &mut proof)?;
    Ok(proof)
}

/// The RFC 6962 §2.1.2 consistency proof between the trees of the first `old_size` and
/// `new_size` leaves of `nodes`; empty when the sizes are equal, an error from the empty tree.
pub fn consistency_proof<S: StoredNodes + ?Sized>(
    nodes: &S,
    old_size: u64,
    new_size: u64,
) -> Result<Vec<Hash>, S::Error> {
    within(nodes, new_size)?;
    if old_size > new_size {
        return Err(MerkleError::SizesReversed { old_size, new_size }.into());
    }
    if old_size == 0 {
        return Err(MerkleError::EmptyOldTree.into());
    }
    let mut proof = Vec::new();
    if old_size == new_size {
        return Ok(proof);
    }
    // The old tree's last leaf sits in the largest complete subtree ending at old_size. That
    // subtree's audit path in the new tree is the proof, preceded by the subtree's own hash
    // unless it is the whole old tree, whose root the verifier already has.
    let level = old_size.trailing_zeros();
    let index = (old_size - 1) >> level;
    if index != 0 {
        proof.push(nodes.node(level, index)?);
    }
    push_path(nodes, old_size - 1, new_size, level as usize, &mut proof)?;
    Ok(proof)
}

fn within<S: StoredNodes + ?Sized>(nodes: &S, tree_size: u64) -> Result<(), MerkleError> {
    if tree_size > nodes.size() {
        return Err(MerkleError::SizeBeyondTree {
            tree_size,
            local_size: nodes.size(),
        });
    }
    Ok(())
}

/// The RFC 6962 hash of leaves [start, start + width), folded from the stored complete subtrees
/// of the binary decomposition of `width`, right to left.
///
/// `start` must be a multiple of the largest power of two not above `width`, as every range in
/// the RFC's recursion is; then each of those subtrees is aligned and stored.
fn subtree_hash<S: StoredNodes + ?Sized>(
    nodes: &S,
    start: u64,
    width: u64,
) -> Result<Hash, S::Error> {
    let mut end = start + width;
    let mut folded: Option<Hash> = None;
    let levels = u32::try_from(bit_len64(width)).expect("at most 64 bits");
    for level in 0..levels {
        if (width >> level) & 1 == 1 {
            end -= 1 << level;
            let node = nodes.node(level, end >> level)?;
            folded = Some(match folded {
                None => node,
                Some(right) => node_hash(&node, &right),
            });
        }
    }
    Ok(folded.unwrap_or_else(empty_root))
}

/// Appends to `proof` the audit path of leaf `leaf` in the tree of `size` leaves, leaving out
/// the levels below `from_level`.
///
/// Below level `inner` the path of `leaf` and the path of the last leaf differ, so every sibling
/// there is a complete stored subtree, except the one at `inner - 1`, which holds the last leaf
/// and may be a partial subtree. From `inner` up the two paths coincide on the tree's right
/// edge, where only left siblings exist.
fn push_path<S: StoredNodes + ?Sized>(
    nodes: &S,
    leaf: u64,
    size: u64,
    from_level: usize,
    proof: &mut Vec<Hash>,
) -> Result<(), S::Error> {
    let inner = bit_len64(leaf ^ (size - 1));
    for level in from_level..inner {
        let start = ((leaf >> level) ^ 1) << level;
        let width = (1u64 << level).min(size - start);
        proof.push(subtree_hash(nodes, start, width)?);
    }
    let mut level = u32::try_from(inner).expect("at most 64 bits");
    while level < u64::BITS && leaf >> level != 0 {
        let index = leaf >> level;
        if index & 1 == 1 {
            proof.push(nodes.node(level, index - 1)?);
        }
        level += 1;
    }
    Ok(())
}

/// Checks an inclusion proof (RFC 9162 §2.1.3.2, which RFC 6962 proofs satisfy unchanged) for
/// the leaf with hash `leaf_hash` at `index` in the tree of `tree_size` leaves with root `root`.
///
/// The proof binds the index and root, not the size on its own: `tree_size` and `root` must come
/// from the same signed tree head.
pub fn verify_inclusion(
    leaf_hash: &Hash,
    index: u64,
    tree_size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= tree_size {
        return Err(ProofError::IndexOutOfRange { index, tree_size });
    }
    let inner = bit_len64(index ^ (tree_size - 1));
    let expected = inner + (index >> inner).count_ones() as usize;
    if proof.len() != expected {
        return Err(ProofError::WrongLength {
            expected,
            actual: proof.len(),
        });
    }
    let mut node = index;
    let mut last = tree_size - 1;
    let mut hash = *leaf_hash;
    for sibling in proof {
        if last == 0 {
            return Err(ProofError::WrongLength {
                expected,
                actual: proof.len(),
            });
        }
        if node & 1 == 1 || node == last {
            hash = node_hash(sibling, &hash);
            while node & 1 == 0 && node != 0 {
                node >>= 1;
                last >>= 1;
            }
        } else {
            hash = node_hash(&hash, sibling);
        }
        node >>= 1;
        last >>= 1;
    }
    if last != 0 {
        return Err(ProofError::WrongLength {
            expected,
            actual: proof.len(),
        });
    }
    if hash != *root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// Checks a consistency proof (RFC 9162 §2.1.4.2, which RFC 6962 proofs satisfy unchanged):
/// that the tree of `new_size` leaves with root `new_root` extends the tree of `old_size` leaves
/// with root `old_root`.
///
/// Equal sizes need an empty proof and equal roots. `old_size` 0 is an error
/// ([`ProofError::EmptyOldTree`]): RFC 6962 defines no proof from the empty tree, so there is
/// nothing to check.
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old_size > new_size {
        return Err(ProofError::SizesReversed { old_size, new_size });
    }
    if old_size == 0 {
        return Err(ProofError::EmptyOldTree);
    }
    let wrong_length = |expected: usize| ProofError::WrongLength {
        expected,
        actual: proof.len(),
    };
    if old_size == new_size {
        if !proof.is_empty() {
            return Err(wrong_length(0));
        }
        if old_root != new_root {
            return Err(ProofError::EqualSizeRootsDiffer {
                tree_size: old_size,
            });
        }
        return Ok(());
    }
    // The proof is the largest complete subtree ending at old_size (left out when it is the whole
    // old tree, a power of two) followed by that subtree's audit path in the new tree.
    let level = old_size.trailing_zeros();
    let old_is_power_of_two = (old_size - 1) >> level == 0;
    let inner = bit_len64((old_size - 1) ^ (new_size - 1));
    let expected = usize::from(!old_is_power_of_two)
        + (inner - level as usize)
        + ((old_size - 1) >> inner).count_ones() as usize;
    if proof.len() != expected {
        return Err(wrong_length(expected));
    }
    let (first, path) = if old_is_power_of_two {
        (old_root, proof)
    } else {
        match proof.split_first() {
            Some(split) => split,
            None => return Err(wrong_length(expected)),
        }
    };
    let mut node = old_size - 1;
    let mut last = new_size - 1;
    while node & 1 == 1 {
        node >>= 1;
        last >>= 1;
    }
    let mut old_hash = *first;
    let mut new_hash = *first;
    for sibling in path {
        if last == 0 {
            return Err(wrong_length(expected));
        }
        if node & 1 == 1 || node == last {
            old_hash = node_hash(sibling, &old_hash);
            new_hash = node_hash(sibling, &new_hash);
            while node & 1 == 0 && node != 0 {
                node >>= 1;
                last >>= 1;
            }
        } else {
            new_hash = node_hash(&new_hash, sibling);
        }
        node >>= 1;
        last >>= 1;
    }
    if last != 0 {
        return Err(wrong_length(expected));
    }
    if old_hash != *old_root {
        return Err(ProofError::OldRootMismatch);
    }
    if new_hash != *new_root {
        return Err(ProofError::NewRootMismatch);
    }
    Ok(())
}

/// The number of significant bits of `x`: 0 for 0, k + 1 for 2^k ≤ x < 2^(k+1).
fn bit_len64(x: u64) -> usize {
    (u64::BITS - x.leading_zeros()) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("test hex"))
            .collect()
    }

    fn h(text: &str) -> Hash {
        hex(text).try_into().expect("32-byte test hash")
    }

    // The RFC 6962 test data of Google's certificate-transparency and transparency-dev/merkle
    // (testonly/constants.go, proof/verify_test.go): eight leaf inputs, given in hex.
    const LEAF_INPUTS: [&str; 8] = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ];

    /// Roots of the trees of sizes 1 to 8.
    const ROOTS: [&str; 8] = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];

    /// Every complete-subtree hash of the 8-leaf tree, level by level.
    fn node_vectors() -> Vec<Vec<Hash>> {
        let levels: [&[&str]; 4] = [
            &[
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
                "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
                "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
                "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
            ],
            &[
                "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            ],
            &[
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
            &["5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"],
        ];
        levels
            .iter()
            .map(|level| level.iter().map(|node| h(node)).collect())
            .collect()
    }

    /// (leaf index, tree size, audit path).
    fn inclusion_vectors() -> Vec<(u64, u64, Vec<Hash>)> {
        vec![
            (0, 1, vec![]),
            (
                0,
                8,
                vec![
                    h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
                    h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
                    h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
                ],
            ),
            (
                5,
                8,
                vec![
                    h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
                    h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
                    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
                ],
            ),
            (
                2,
                3,
                vec![h(
                    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
                )],
            ),
            (
                1,
                5,
                vec![
                    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
                    h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
                    h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
                ],
            ),
        ]
    }

    /// (old size, new size, consistency proof).
    fn consistency_vectors() -> Vec<(u64, u64, Vec<Hash>)> {
        vec![
            (1, 1, vec![]),
            (
                1,
                8,
                vec![
                    h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
                    h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
                    h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
                ],
            ),
            (
                6,
                8,
                vec![
                    h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
                    h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
                    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
                ],
            ),
            (
                2,
                5,
                vec![
                    h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
                    h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
                ],
            ),
            (
                6,
                7,
                vec![
                    h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
                    h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
                    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
                ],
            ),
        ]
    }

    fn vector_tree() -> MerkleTree {
        MerkleTree::from_leaf_hashes(LEAF_INPUTS.iter().map(|input| leaf_hash(&hex(input))))
    }

    fn tree_of(size: u64) -> MerkleTree {
        MerkleTree::from_leaf_hashes((0..size).map(|i| leaf_hash(&i.to_be_bytes())))
    }

    #[test]
    fn empty_tree_root_is_sha256_of_nothing() {
        let expected = h("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(empty_root(), expected);
        let tree = MerkleTree::new();
        assert_eq!(tree.size(), 0);
        assert_eq!(tree.root(), expected);
        assert_eq!(tree.root_at(0), Ok(expected));
    }

    #[test]
    fn roots_at_every_size_match_the_vectors() {
        let tree = vector_tree();
        for (size, root) in (1u64..).zip(ROOTS) {
            assert_eq!(tree.root_at(size), Ok(h(root)), "size {size}");
            let grown = MerkleTree::from_leaf_hashes(
                tree.levels()[0]
                    .iter()
                    .copied()
                    .take(usize::try_from(size).expect("small")),
            );
            assert_eq!(grown.root(), h(root), "tree grown to size {size}");
        }
        assert_eq!(tree.root(), h(ROOTS[7]));
    }

    #[test]
    fn stored_levels_match_the_vector_node_hashes() {
        assert_eq!(vector_tree().levels(), node_vectors().as_slice());
        assert_eq!(MerkleTree::from_levels(node_vectors()), Ok(vector_tree()));
    }

    #[test]
    fn inclusion_proofs_match_and_verify_against_the_vectors() {
        let tree = vector_tree();
        for (index, size, expected) in inclusion_vectors() {
            let proof = tree.inclusion_proof(index, size).expect("in range");
            assert_eq!(proof, expected, "leaf {index} in size {size}");
            let leaf = leaf_hash(&hex(LEAF_INPUTS[usize::try_from(index).expect("small")]));
            let root = h(ROOTS[usize::try_from(size - 1).expect("small")]);
            assert_eq!(
                verify_inclusion(&leaf, index, size, &expected, &root),
                Ok(())
            );
        }
    }

    #[test]
    fn consistency_proofs_match_and_verify_against_the_vectors() {
        let tree = vector_tree();
        for (old_size, new_size, expected) in consistency_vectors() {
            let proof = tree
                .consistency_proof(old_size, new_size)
                .expect("in range");
            assert_eq!(proof, expected, "{old_size} -> {new_size}");
            let old_root = h(ROOTS[usize::try_from(old_size - 1).expect("small")]);
            let new_root = h(ROOTS[usize::try_from(new_size - 1).expect("small")]);
            assert_eq!(
                verify_consistency(old_size, new_size, &old_root, &new_root, &expected),
                Ok(())
            );
        }
    }

    #[test]
    fn push_reports_exactly_the_nodes_it_completed() {
        let mut tree = MerkleTree::new();
        let mut persisted: Vec<Vec<Hash>> = Vec::new();
        let mut reported_levels = Vec::new();
        for i in 0u64..8 {
            let new_nodes: Vec<NewNode> = tree.push(leaf_hash(&i.to_be_bytes())).collect();
            reported_levels.push(new_nodes.iter().map(|node| node.level).collect::<Vec<_>>());
            for node in new_nodes {
                if persisted.len() == node.level {
                    persisted.push(Vec::new());
                }
                assert_eq!(
                    node.index,
                    persisted[node.level].len() as u64,
                    "append-only"
                );
                persisted[node.level].push(node.hash);
            }
        }
        let expected_levels: [&[usize]; 8] = [
            &[0],
            &[0, 1],
            &[0],
            &[0, 1, 2],
            &[0],
            &[0, 1],
            &[0],
            &[0, 1, 2, 3],
        ];
        assert_eq!(reported_levels, expected_levels);
        assert_eq!(persisted.as_slice(), tree.levels());
    }

    #[test]
    fn push_iterator_knows_its_length() {
        let mut tree = tree_of(7);
        let new_nodes = tree.push(leaf_hash(b"eighth"));
        assert_eq!(new_nodes.len(), 4);
    }

    #[test]
    fn from_levels_accepts_the_empty_tree_in_any_spelling() {
        assert_eq!(MerkleTree::from_levels(vec![]), Ok(MerkleTree::new()));
        assert_eq!(
            MerkleTree::from_levels(vec![vec![], vec![]]),
            Ok(MerkleTree::new())
        );
    }

    #[test]
    fn from_levels_ignores_trailing_empty_levels() {
        let mut levels = tree_of(5).into_levels();
        levels.push(Vec::new());
        assert_eq!(MerkleTree::from_levels(levels), Ok(tree_of(5)));
    }

    #[test]
    fn from_levels_rejects_a_level_of_the_wrong_length() {
        let mut levels = tree_of(6).into_levels();
        levels[1].pop();
        assert_eq!(
            MerkleTree::from_levels(levels),
            Err(MerkleError::InconsistentLevels {
                level: 1,
                len: 2,
                expected: 3
            })
        );
        let mut levels = tree_of(6).into_levels();
        levels[0].push([7; 32]);
        levels[0].push([8; 32]);
        let err = MerkleTree::from_levels(levels).expect_err("level 1 is now short");
        assert_eq!(
            err.to_string(),
            "level 1 holds 3 hashes but the level below implies 4"
        );
    }

    #[test]
    fn from_levels_rejects_a_missing_top_level() {
        let mut levels = tree_of(4).into_levels();
        levels.pop();
        assert_eq!(
            MerkleTree::from_levels(levels),
            Err(MerkleError::InconsistentLevels {
                level: 2,
                len: 0,
                expected: 1
            })
        );
    }

    #[test]
    fn verify_level_finds_a_corrupt_node() {
        let tree = tree_of(13);
        assert_eq!(tree.verify_levels(), Ok(()));
        let mut levels = tree.into_levels();
        levels[2][1][0] ^= 1;
        let corrupt = MerkleTree::from_levels(levels).expect("lengths still fit");
        assert_eq!(corrupt.verify_level(1), Ok(()));
        assert_eq!(
            corrupt.verify_level(2),
            Err(MerkleError::CorruptNode { level: 2, index: 1 })
        );
        assert_eq!(
            corrupt.verify_levels(),
            Err(MerkleError::CorruptNode { level: 2, index: 1 })
        );
    }

    #[test]
    fn verify_level_finds_a_corrupt_leaf_from_the_level_above() {
        let mut levels = tree_of(4).into_levels();
        levels[0][3][31] ^= 0x80;
        let corrupt = MerkleTree::from_levels(levels).expect("lengths still fit");
        assert_eq!(
            corrupt.verify_level(1),
            Err(MerkleError::CorruptNode { level: 1, index: 1 })
        );
    }

    #[test]
    fn verify_level_rejects_the_leaf_level_and_missing_levels() {
        let tree = tree_of(5);
        assert_eq!(
            tree.verify_level(0),
            Err(MerkleError::NoSuchLevel {
                level: 0,
                top_level: 2
            })
        );
        assert_eq!(
            tree.verify_level(3),
            Err(MerkleError::NoSuchLevel {
                level: 3,
                top_level: 2
            })
        );
        assert_eq!(tree.verify_level(2), Ok(()));
    }

    #[test]
    fn sizes_beyond_the_local_tree_are_errors() {
        let tree = tree_of(10);
        let beyond = MerkleError::SizeBeyondTree {
            tree_size: 12,
            local_size: 10,
        };
        assert_eq!(
            beyond.to_string(),
            "tree size 12 is larger than the local tree (10 leaves)"
        );
        assert_eq!(tree.root_at(12), Err(beyond.clone()));
        assert_eq!(tree.inclusion_proof(0, 12), Err(beyond.clone()));
        assert_eq!(tree.consistency_proof(3, 12), Err(beyond.clone()));
        assert_eq!(tree.consistency_proof(11, 12), Err(beyond));
        assert!(tree.root_at(10).is_ok());
        assert_eq!(
            tree.root_at(u64::MAX),
            Err(MerkleError::SizeBeyondTree {
                tree_size: u64::MAX,
                local_size: 10
            })
        );
    }

    #[test]
    fn leaf_indices_outside_the_tree_are_errors() {
        let tree = tree_of(10);
        let err = tree.inclusion_proof(7, 7).expect_err("index == size");
        assert_eq!(
            err,
            MerkleError::IndexOutOfRange {
                index: 7,
                tree_size: 7
            }
        );
        assert_eq!(err.to_string(), "leaf index 7 is not in a tree of 7 leaves");
        assert_eq!(
            tree.inclusion_proof(0, 0),
            Err(MerkleError::IndexOutOfRange {
                index: 0,
                tree_size: 0
            })
        );
        assert_eq!(
            tree.leaf_hash_at(10),
            Err(MerkleError::IndexOutOfRange {
                index: 10,
                tree_size: 10
            })
        );
        assert_eq!(tree.leaf_hash_at(9), Ok(leaf_hash(&9u64.to_be_bytes())));
        assert_eq!(
            tree.leaf_hash_at(u64::MAX),
            Err(MerkleError::IndexOutOfRange {
                index: u64::MAX,
                tree_size: 10
            })
        );
    }

    #[test]
    fn consistency_from_the_empty_tree_or_backwards_is_an_error() {
        let tree = tree_of(10);
        assert_eq!(tree.consistency_proof(0, 5), Err(MerkleError::EmptyOldTree));
        assert_eq!(tree.consistency_proof(0, 0), Err(MerkleError::EmptyOldTree));
        assert_eq!(
            tree.consistency_proof(6, 5),
            Err(MerkleError::SizesReversed {
                old_size: 6,
                new_size: 5
            })
        );
        assert_eq!(tree.consistency_proof(5, 5), Ok(vec![]));
    }

    #[test]
    fn verify_inclusion_rejects_indices_outside_the_tree() {
        let leaf = leaf_hash(b"x");
        assert_eq!(
            verify_inclusion(&leaf, 0, 0, &[], &empty_root()),
            Err(ProofError::IndexOutOfRange {
                index: 0,
                tree_size: 0
            })
        );
        assert_eq!(
            verify_inclusion(&leaf, 1, 1, &[], &leaf),
            Err(ProofError::IndexOutOfRange {
                index: 1,
                tree_size: 1
            })
        );
        assert_eq!(verify_inclusion(&leaf, 0, 1, &[], &leaf), Ok(()));
    }

    #[test]
    fn verify_inclusion_rejects_proofs_of_the_wrong_length() {
        let tree = tree_of(8);
        let leaf = tree.leaf_hash_at(3).expect("in range");
        let mut proof = tree.inclusion_proof(3, 8).expect("in range");
        proof.push(tree.root());
        assert_eq!(
            verify_inclusion(&leaf, 3, 8, &proof, &tree.root()),
            Err(ProofError::WrongLength {
                expected: 3,
                actual: 4
            })
        );
        let long = vec![[0u8; 32]; 1000];
        assert_eq!(
            verify_inclusion(&leaf, 3, 8, &long, &tree.root()),
            Err(ProofError::WrongLength {
                expected: 3,
                actual: 1000
            })
        );
        assert_eq!(
            verify_inclusion(&leaf, 3, 8, &proof[..2], &tree.root()),
            Err(ProofError::WrongLength {
                expected: 3,
                actual: 2
            })
        );
    }

    #[test]
    fn verify_inclusion_rejects_a_wrong_root() {
        let tree = tree_of(8);
        let leaf = tree.leaf_hash_at(3).expect("in range");
        let proof = tree.inclusion_proof(3, 8).expect("in range");
        assert_eq!(
            verify_inclusion(&leaf, 3, 8, &proof, &tree.root_at(7).expect("in range")),
            Err(ProofError::RootMismatch)
        );
    }

    #[test]
    fn verify_consistency_edge_cases() {
        let tree = tree_of(8);
        let root = |size| tree.root_at(size).expect("in range");
        assert_eq!(
            verify_consistency(0, 5, &empty_root(), &root(5), &[]),
            Err(ProofError::EmptyOldTree)
        );
        assert_eq!(
            verify_consistency(0, 0, &empty_root(), &empty_root(), &[]),
            Err(ProofError::EmptyOldTree)
        );
        assert_eq!(
            verify_consistency(6, 5, &root(6), &root(5), &[]),
            Err(ProofError::SizesReversed {
                old_size: 6,
                new_size: 5
            })
        );
        assert_eq!(verify_consistency(5, 5, &root(5), &root(5), &[]), Ok(()));
        assert_eq!(
            verify_consistency(5, 5, &root(5), &root(4), &[]),
            Err(ProofError::EqualSizeRootsDiffer { tree_size: 5 })
        );
        assert_eq!(
            verify_consistency(5, 5, &root(5), &root(5), &[root(5)]),
            Err(ProofError::WrongLength {
                expected: 0,
                actual: 1
            })
        );
        assert_eq!(
            verify_consistency(3, 7, &root(3), &root(7), &[]),
            Err(ProofError::WrongLength {
                expected: 4,
                actual: 0
            })
        );
        let proof = tree.consistency_proof(3, 7).expect("in range");
        assert_eq!(verify_consistency(3, 7, &root(3), &root(7), &proof), Ok(()));
        assert_eq!(
            verify_consistency(3, 7, &root(3), &root(6), &proof),
            Err(ProofError::NewRootMismatch)
        );
        assert_eq!(
            verify_consistency(3, 7, &root(4), &root(7), &proof),
            Err(ProofError::OldRootMismatch)
        );
        let mut long = proof.clone();
        long.extend(std::iter::repeat_n([0u8; 32], 100));
        assert_eq!(
            verify_consistency(3, 7, &root(3), &root(7), &long),
            Err(ProofError::WrongLength {
                expected: 4,
                actual: 104
            })
        );
    }

    #[test]
    fn error_messages_name_the_numbers() {
        assert_eq!(
            MerkleError::SizesReversed {
                old_size: 9,
                new_size: 4
            }
            .to_string(),
            "old tree size 9 is larger than new tree size 4"
        );
        assert_eq!(
            ProofError::WrongLength {
                expected: 3,
                actual: 5
            }
            .to_string(),
            "the proof holds 5 hashes but these sizes need exactly 3"
        );
        assert_eq!(
            MerkleError::CorruptNode { level: 2, index: 1 }.to_string(),
            "node 1 at level 2 is not the hash of its two children"
        );
    }
}
