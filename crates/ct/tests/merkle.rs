//! The Merkle tree against a naive transcription of RFC 6962 §2.1 and against rs_merkle, and its
//! proofs against the verifiers, with tampering.

use certus_ct::Hash;
use certus_ct::merkle::{
    MerkleTree, ProofError, empty_root, leaf_hash, node_hash, verify_consistency, verify_inclusion,
};
use proptest::prelude::*;

/// The RFC 6962 §2.1 definitions, recursively and without any stored state.
mod rfc {
    use super::*;

    /// The largest power of two smaller than `n` (n > 1).
    fn split(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    /// MTH(D[n]), over leaf hashes.
    pub(super) fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split(n);
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    /// PATH(m, D[n]).
    pub(super) fn path(m: usize, leaves: &[Hash]) -> Vec<Hash> {
        let n = leaves.len();
        if n <= 1 {
            return Vec::new();
        }
        let k = split(n);
        if m < k {
            let mut proof = path(m, &leaves[..k]);
            proof.push(mth(&leaves[k..]));
            proof
        } else {
            let mut proof = path(m - k, &leaves[k..]);
            proof.push(mth(&leaves[..k]));
            proof
        }
    }

    /// PROOF(m, D[n]) = SUBPROOF(m, D[n], true).
    pub(super) fn proof(m: usize, leaves: &[Hash]) -> Vec<Hash> {
        subproof(m, leaves, true)
    }

    fn subproof(m: usize, leaves: &[Hash], whole_old_tree: bool) -> Vec<Hash> {
        let n = leaves.len();
        if m == n {
            return if whole_old_tree {
                Vec::new()
            } else {
                vec![mth(leaves)]
            };
        }
        let k = split(n);
        if m <= k {
            let mut proof = subproof(m, &leaves[..k], whole_old_tree);
            proof.push(mth(&leaves[k..]));
            proof
        } else {
            let mut proof = subproof(m - k, &leaves[k..], false);
            proof.push(mth(&leaves[..k]));
            proof
        }
    }
}

/// An rs_merkle hasher for RFC 6962 nodes: leaves are hashed by us before they go in, pairs get
/// the 0x01 prefix, and a lone node is carried up unchanged (rs_merkle's default).
#[derive(Clone)]
struct Rfc6962Nodes;

impl rs_merkle::Hasher for Rfc6962Nodes {
    type Hash = Hash;

    fn hash(data: &[u8]) -> Hash {
        certus_ct::sha256(data)
    }

    fn concat_and_hash(left: &Hash, right: Option<&Hash>) -> Hash {
        match right {
            Some(right) => node_hash(left, right),
            None => *left,
        }
    }
}

/// Distinct leaf hashes, varied by `seed` so different cases hash different data.
fn leaves(seed: u64, count: usize) -> Vec<Hash> {
    (0..count as u64)
        .map(|i| leaf_hash(&[seed.to_be_bytes(), i.to_be_bytes()].concat()))
        .collect()
}

fn as_index(n: u64) -> usize {
    usize::try_from(n).expect("test sizes fit in usize")
}

#[test]
fn exhaustive_small_trees_match_the_rfc_definitions() {
    let leaf_hashes = leaves(0, 40);
    let tree = MerkleTree::from_leaf_hashes(leaf_hashes.iter().copied());
    for n in 0..=40u64 {
        let prefix = &leaf_hashes[..as_index(n)];
        assert_eq!(tree.root_at(n), Ok(rfc::mth(prefix)), "root at {n}");
        for m in 0..n {
            let path = tree.inclusion_proof(m, n).expect("in range");
            assert_eq!(path, rfc::path(as_index(m), prefix), "PATH({m}, D[{n}])");
        }
        for m in 1..=n {
            let proof = tree.consistency_proof(m, n).expect("in range");
            assert_eq!(proof, rfc::proof(as_index(m), prefix), "PROOF({m}, D[{n}])");
        }
    }
}

#[test]
fn exhaustive_small_trees_verify_every_proof() {
    let tree = MerkleTree::from_leaf_hashes(leaves(1, 70));
    for n in 1..=70u64 {
        let root = tree.root_at(n).expect("in range");
        for m in 0..n {
            let leaf = tree.leaf_hash_at(m).expect("in range");
            let path = tree.inclusion_proof(m, n).expect("in range");
            assert_eq!(
                verify_inclusion(&leaf, m, n, &path, &root),
                Ok(()),
                "{m} in {n}"
            );
        }
        for m in 1..=n {
            let old_root = tree.root_at(m).expect("in range");
            let proof = tree.consistency_proof(m, n).expect("in range");
            assert_eq!(
                verify_consistency(m, n, &old_root, &root, &proof),
                Ok(()),
                "{m} -> {n}"
            );
        }
    }
}

/// A tree of `size` leaves, a size m ≤ size and an index below it.
fn tree_size_and_index(max_size: usize) -> impl Strategy<Value = (MerkleTree, u64, u64)> {
    (1..=max_size, any::<u64>())
        .prop_flat_map(|(size, seed)| {
            (Just(size), Just(seed), 1..=size as u64)
                .prop_flat_map(|(size, seed, m)| (Just(size), Just(seed), Just(m), 0..m))
        })
        .prop_map(|(size, seed, m, index)| {
            (MerkleTree::from_leaf_hashes(leaves(seed, size)), m, index)
        })
}

/// A tree and two sizes 1 ≤ old ≤ new ≤ its size.
fn tree_and_two_sizes(max_size: usize) -> impl Strategy<Value = (MerkleTree, u64, u64)> {
    (1..=max_size, any::<u64>())
        .prop_flat_map(|(size, seed)| {
            (Just(size), Just(seed), 1..=size as u64)
                .prop_flat_map(|(size, seed, new)| (Just(size), Just(seed), 1..=new, Just(new)))
        })
        .prop_map(|(size, seed, old, new)| {
            (MerkleTree::from_leaf_hashes(leaves(seed, size)), old, new)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn rs_merkle_agrees_on_roots_and_audit_paths(size in 1usize..400, seed in any::<u64>()) {
        let leaf_hashes = leaves(seed, size);
        let ours = MerkleTree::from_leaf_hashes(leaf_hashes.iter().copied());
        let theirs = rs_merkle::MerkleTree::<Rfc6962Nodes>::from_leaves(&leaf_hashes);
        prop_assert_eq!(Some(ours.root()), theirs.root());
        for index in 0..size {
            let our_path = ours.inclusion_proof(index as u64, size as u64).expect("in range");
            let their_path = theirs.proof(&[index]).proof_hashes().to_vec();
            prop_assert_eq!(our_path, their_path, "leaf {} of {}", index, size);
        }
    }

    #[test]
    fn every_inclusion_proof_at_every_size_verifies(size in 1usize..300, seed in any::<u64>()) {
        let tree = MerkleTree::from_leaf_hashes(leaves(seed, size));
        for m in 1..=size as u64 {
            let root = tree.root_at(m).expect("in range");
            for index in 0..m {
                let leaf = tree.leaf_hash_at(index).expect("in range");
                let path = tree.inclusion_proof(index, m).expect("in range");
                prop_assert_eq!(verify_inclusion(&leaf, index, m, &path, &root), Ok(()));
            }
        }
    }

    #[test]
    fn root_at_every_size_is_the_rfc_mth(size in 0usize..300, seed in any::<u64>()) {
        let leaf_hashes = leaves(seed, size);
        let tree = MerkleTree::from_leaf_hashes(leaf_hashes.iter().copied());
        for m in 0..=size {
            prop_assert_eq!(tree.root_at(m as u64), Ok(rfc::mth(&leaf_hashes[..m])));
        }
    }

    #[test]
    fn from_levels_rebuilds_an_identical_tree(size in 0usize..300, seed in any::<u64>()) {
        let tree = MerkleTree::from_leaf_hashes(leaves(seed, size));
        let rebuilt = MerkleTree::from_levels(tree.levels().to_vec()).expect("consistent");
        prop_assert_eq!(&rebuilt, &tree);
        prop_assert_eq!(rebuilt.verify_levels(), Ok(()));
        // It also grows like the original.
        let (mut grown, mut rebuilt_grown) = (tree, rebuilt);
        for leaf in leaves(seed.wrapping_add(1), 5) {
            grown.push(leaf);
            rebuilt_grown.push(leaf);
        }
        prop_assert_eq!(rebuilt_grown, grown);
    }

    #[test]
    fn pushed_nodes_persisted_in_order_rebuild_the_tree(size in 0usize..300, seed in any::<u64>()) {
        let mut tree = MerkleTree::new();
        let mut store: Vec<Vec<Hash>> = Vec::new();
        for leaf in leaves(seed, size) {
            for node in tree.push(leaf) {
                if store.len() == node.level {
                    store.push(Vec::new());
                }
                prop_assert_eq!(node.index, store[node.level].len() as u64);
                store[node.level].push(node.hash);
            }
        }
        prop_assert_eq!(MerkleTree::from_levels(store), Ok(tree));
    }

    #[test]
    fn proofs_at_random_sizes_are_the_rfc_proofs(
        (tree, m, index) in tree_size_and_index(200),
        old in 1u64..=200,
    ) {
        let prefix = &tree.levels()[0][..as_index(m)];
        prop_assert_eq!(
            tree.inclusion_proof(index, m).expect("in range"),
            rfc::path(as_index(index), prefix)
        );
        let old = old.min(m);
        prop_assert_eq!(
            tree.consistency_proof(old, m).expect("in range"),
            rfc::proof(as_index(old), prefix)
        );
    }

    #[test]
    fn consistency_proofs_between_random_sizes_verify(
        (tree, old, new) in tree_and_two_sizes(1000),
    ) {
        let old_root = tree.root_at(old).expect("in range");
        let new_root = tree.root_at(new).expect("in range");
        let proof = tree.consistency_proof(old, new).expect("in range");
        prop_assert_eq!(verify_consistency(old, new, &old_root, &new_root, &proof), Ok(()));
    }

    #[test]
    fn tampered_inclusion_proofs_fail(
        (tree, m, index) in tree_size_and_index(300),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
        other in any::<prop::sample::Index>(),
    ) {
        let leaf = tree.leaf_hash_at(index).expect("in range");
        let root = tree.root_at(m).expect("in range");
        let proof = tree.inclusion_proof(index, m).expect("in range");
        prop_assert_eq!(verify_inclusion(&leaf, index, m, &proof, &root), Ok(()));

        if !proof.is_empty() {
            // A flipped bit anywhere.
            let mut flipped = proof.clone();
            let at = position.index(proof.len() * 32);
            flipped[at / 32][at % 32] ^= 1 << bit;
            prop_assert!(verify_inclusion(&leaf, index, m, &flipped, &root).is_err());
            // A hash dropped.
            let mut dropped = proof.clone();
            dropped.remove(position.index(proof.len()));
            prop_assert!(verify_inclusion(&leaf, index, m, &dropped, &root).is_err());
        }
        // A hash added, anywhere.
        let mut added = proof.clone();
        added.insert(position.index(proof.len() + 1), root);
        prop_assert!(verify_inclusion(&leaf, index, m, &added, &root).is_err());
        // Another index in the same tree.
        let other_index = other.index(as_index(m)) as u64;
        if other_index != index {
            prop_assert!(verify_inclusion(&leaf, other_index, m, &proof, &root).is_err());
        }
        // Another size, with that size's root (the size alone is bound only through its root).
        let other_size = 1 + other.index(as_index(tree.size())) as u64;
        if other_size != m && index < other_size {
            let other_root = tree.root_at(other_size).expect("in range");
            prop_assert!(verify_inclusion(&leaf, index, other_size, &proof, &other_root).is_err());
        }
        // Another leaf.
        let wrong_leaf = leaf_hash(b"not in the tree");
        prop_assert_eq!(
            verify_inclusion(&wrong_leaf, index, m, &proof, &root),
            Err(ProofError::RootMismatch)
        );
    }

    #[test]
    fn tampered_consistency_proofs_fail(
        (tree, old, new) in tree_and_two_sizes(300),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
        other in any::<prop::sample::Index>(),
    ) {
        let old_root = tree.root_at(old).expect("in range");
        let new_root = tree.root_at(new).expect("in range");
        let proof = tree.consistency_proof(old, new).expect("in range");
        prop_assert_eq!(verify_consistency(old, new, &old_root, &new_root, &proof), Ok(()));

        if !proof.is_empty() {
            let mut flipped = proof.clone();
            let at = position.index(proof.len() * 32);
            flipped[at / 32][at % 32] ^= 1 << bit;
            prop_assert!(verify_consistency(old, new, &old_root, &new_root, &flipped).is_err());
            let mut dropped = proof.clone();
            dropped.remove(position.index(proof.len()));
            prop_assert!(verify_consistency(old, new, &old_root, &new_root, &dropped).is_err());
        }
        let mut added = proof.clone();
        added.insert(position.index(proof.len() + 1), new_root);
        prop_assert!(verify_consistency(old, new, &old_root, &new_root, &added).is_err());
        if old != new {
            prop_assert!(verify_consistency(old, new, &new_root, &old_root, &proof).is_err());
        }
        // Another old size or new size, each with its own root.
        let other_size = 1 + other.index(as_index(tree.size())) as u64;
        let other_root = tree.root_at(other_size).expect("in range");
        if other_size != old && other_size <= new {
            let claimed = verify_consistency(other_size, new, &other_root, &new_root, &proof);
            prop_assert!(claimed.is_err());
        }
        if other_size != new && other_size >= old {
            let claimed = verify_consistency(old, other_size, &old_root, &other_root, &proof);
            prop_assert!(claimed.is_err());
        }
    }
}
