//! The tree in tiles, as C2SP tlog-tiles lays it out: what a store persists so that a log of a
//! billion entries needs no more memory than its right edge.
//!
//! Tile level `L` holds the hashes of tree level `8L`; tile `N` at that level holds hashes
//! `[256·N, 256·N + 256)` of it. A full tile never changes again; the right edge has at most one
//! partial tile per level. Every complete-subtree hash of the tree is inside one tile: the node at
//! tree level `8L + r`, index `i`, is the hash of the `2^r` consecutive tile-level hashes starting
//! at `i·2^r`, computed from the tile (at most 255 hashes, [`ExpandedTile`] keeps them).
//!
//! [`TileEdge`] is the right edge (the partial tiles, at most 255 hashes per level) and appends
//! leaves, handing back the tiles that became full; [`TiledNodes`] answers
//! [`StoredNodes::node`] from the edge and a [`TileReader`] of full tiles, so roots and proofs
//! ([`crate::merkle::root_at`] and the rest) work on it unchanged.

use std::sync::Arc;

use crate::Hash;
use crate::merkle::{MerkleError, StoredNodes, node_hash};

/// Tree levels per tile.
pub const TILE_HEIGHT: u32 = 8;
/// Hashes in a full tile (2^[`TILE_HEIGHT`]).
pub const TILE_WIDTH: usize = 1 << TILE_HEIGHT;

/// A tile's place: `level` is the tile level (tree level `8·level`), `index` the tile's
/// position in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TileId {
    /// The tile level.
    pub level: u8,
    /// The tile's index within its level.
    pub index: u64,
}

/// A full tile with every level inside it hashed: level `r` (0..=8) holds `256 >> r` hashes,
/// level 0 the tile's own and level 8 its root (a hash of the next tile level).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpandedTile {
    /// All 511 hashes, level by level from level 0.
    hashes: Vec<Hash>,
}

/// Where level `r` starts in an expanded tile.
fn level_offset(r: u32) -> usize {
    // Levels 0..r hold 256 + 128 + ... = 512 - 2^(9 - r) hashes.
    2 * TILE_WIDTH - ((2 * TILE_WIDTH) >> r)
}

impl ExpandedTile {
    /// Expands a full tile's 256 hashes (255 node hashes).
    pub fn new(hashes: &[Hash]) -> Result<ExpandedTile, TileError> {
        if hashes.len() != TILE_WIDTH {
            return Err(TileError::NotFull { len: hashes.len() });
        }
        let mut all = Vec::with_capacity(2 * TILE_WIDTH - 1);
        all.extend_from_slice(hashes);
        let mut start = 0;
        let mut width = TILE_WIDTH;
        while width > 1 {
            for pair in start..start + width / 2 {
                let left = all[start + 2 * (pair - start)];
                let right = all[start + 2 * (pair - start) + 1];
                all.push(node_hash(&left, &right));
            }
            start += width;
            width /= 2;
        }
        Ok(ExpandedTile { hashes: all })
    }

    /// The tile's own 256 hashes.
    pub fn hashes(&self) -> &[Hash] {
        &self.hashes[..TILE_WIDTH]
    }

    /// The hash of the whole tile: one hash of the next tile level.
    pub fn root(&self) -> Hash {
        self.hashes[2 * TILE_WIDTH - 2]
    }

    /// The node at level `r` (0..=8) within the tile, index `index` (below `256 >> r`).
    pub fn node(&self, r: u32, index: usize) -> Option<Hash> {
        if r > TILE_HEIGHT || index >= TILE_WIDTH >> r {
            return None;
        }
        Some(self.hashes[level_offset(r) + index])
    }
}

/// Why tiles do not fit together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TileError {
    /// A full tile that does not hold 256 hashes.
    #[error("a full tile holds {len} hashes, not 256")]
    NotFull {
        /// How many it holds.
        len: usize,
    },
    /// A partial tile of the wrong length for the tree size.
    #[error(
        "tile level {level}'s partial tile holds {len} hashes; tree size {size} needs {expected}"
    )]
    WrongEdge {
        /// The tile level.
        level: u8,
        /// How many hashes it holds.
        len: usize,
        /// How many the tree size implies.
        expected: usize,
        /// The tree size.
        size: u64,
    },
}

/// The right edge of a tiled tree: its size and, per tile level, the hashes of the tile that is
/// not yet full (possibly none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TileEdge {
    size: u64,
    /// `partial[L]` holds `(size >> 8L) mod 256` hashes, for every level with `size >> 8L > 0`.
    partial: Vec<Vec<Hash>>,
    /// `inner[L][r - 1]` holds the complete nodes at level `r` (1..=7) inside `partial[L]`:
    /// derived from it as hashes arrive (one hash per arrival, amortized), so proofs and roots at
    /// the right edge read the edge's subtrees instead of hashing up to 255 hashes each time.
    inner: Vec<InnerLevels>,
}

/// The complete nodes above level 0 inside a partial tile, levels 1..=7 (level 8 is the tile's
/// root, which exists only once the tile is full and leaves the edge).
type InnerLevels = [Vec<Hash>; TILE_HEIGHT as usize - 1];

/// Adds to `inner` the nodes that the last hash of `hashes` (a partial tile's level 0) completes.
fn complete_inner(inner: &mut InnerLevels, hashes: &[Hash]) {
    for r in 0..inner.len() {
        let lower = if r == 0 { hashes } else { &inner[r - 1] };
        if lower.is_empty() || lower.len() % 2 != 0 {
            return;
        }
        let node = node_hash(&lower[lower.len() - 2], &lower[lower.len() - 1]);
        inner[r].push(node);
    }
}

/// The inner levels of a partial tile holding `hashes`.
fn inner_of(hashes: &[Hash]) -> InnerLevels {
    let mut inner = InnerLevels::default();
    for end in 1..=hashes.len() {
        complete_inner(&mut inner, &hashes[..end]);
    }
    inner
}

/// How many hashes tree size `size` puts at tile level `level`, in all.
fn hashes_at(size: u64, level: usize) -> u64 {
    // A shift past 63 bits leaves nothing: no hashes at that level.
    u32::try_from(level)
        .ok()
        .and_then(|level| TILE_HEIGHT.checked_mul(level))
        .and_then(|shift| size.checked_shr(shift))
        .unwrap_or(0)
}

impl TileEdge {
    /// The edge of the empty tree.
    pub fn new() -> TileEdge {
        TileEdge::default()
    }

    /// The number of tile levels a tree of `size` leaves has.
    pub fn levels_for(size: u64) -> usize {
        (0..)
            .take_while(|&level| hashes_at(size, level) > 0)
            .count()
    }

    /// The tile each level's partial hashes belong to, for a tree of `size` leaves, with how
    /// many hashes it holds (0: none yet, the previous tile just filled).
    pub fn partial_tiles_for(size: u64) -> Vec<(TileId, usize)> {
        (0..TileEdge::levels_for(size))
            .map(|level| {
                let count = hashes_at(size, level);
                let id = TileId {
                    level: u8::try_from(level).expect("fewer than 256 tile levels"),
                    index: count / TILE_WIDTH as u64,
                };
                let partial = usize::try_from(count % TILE_WIDTH as u64)
                    .expect("a remainder below TILE_WIDTH fits a usize");
                (id, partial)
            })
            .collect()
    }

    /// Rebuilds the edge of a tree of `size` leaves from its partial tiles, level 0 first (as
    /// [`TileEdge::partial_tiles_for`] names them); only the lengths are checked.
    pub fn from_partial(size: u64, partial: Vec<Vec<Hash>>) -> Result<TileEdge, TileError> {
        let expected = TileEdge::partial_tiles_for(size);
        if partial.len() != expected.len() {
            return Err(TileError::WrongEdge {
                level: u8::try_from(partial.len().min(expected.len())).unwrap_or(u8::MAX),
                len: partial.len(),
                expected: expected.len(),
                size,
            });
        }
        for ((id, want), hashes) in expected.iter().zip(&partial) {
            if hashes.len() != *want {
                return Err(TileError::WrongEdge {
                    level: id.level,
                    len: hashes.len(),
                    expected: *want,
                    size,
                });
            }
        }
        let inner = partial.iter().map(|hashes| inner_of(hashes)).collect();
        Ok(TileEdge {
            size,
            partial,
            inner,
        })
    }

    /// How many leaves the tree holds.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The partial tiles, level 0 first, with their hashes (empty where the last tile filled).
    pub fn partial_tiles(&self) -> impl Iterator<Item = (TileId, &[Hash])> {
        TileEdge::partial_tiles_for(self.size)
            .into_iter()
            .zip(&self.partial)
            .map(|((id, _), hashes)| (id, hashes.as_slice()))
    }

    /// Appends a leaf hash. Returns the tiles that became full, lowest level first: each must be
    /// stored before the edge is, since the edge no longer holds their hashes.
    pub fn push(&mut self, leaf_hash: Hash) -> Vec<(TileId, Vec<Hash>)> {
        let mut full = Vec::new();
        let mut hash = leaf_hash;
        let mut level = 0;
        loop {
            if self.partial.len() == level {
                self.partial.push(Vec::with_capacity(TILE_WIDTH));
                self.inner.push(InnerLevels::default());
            }
            self.partial[level].push(hash);
            complete_inner(&mut self.inner[level], &self.partial[level]);
            if self.partial[level].len() < TILE_WIDTH {
                break;
            }
            let hashes =
                std::mem::replace(&mut self.partial[level], Vec::with_capacity(TILE_WIDTH));
            let inner = std::mem::take(&mut self.inner[level]);
            // The tile's index: the hashes the level held before this one filled it, over 256.
            let index = hashes_at(self.size, level) / TILE_WIDTH as u64;
            // The tile's root: the hash of its two level-7 nodes.
            let top = &inner[inner.len() - 1];
            hash = node_hash(&top[0], &top[1]);
            full.push((
                TileId {
                    level: u8::try_from(level).expect("fewer than 256 tile levels"),
                    index,
                },
                hashes,
            ));
            level += 1;
        }
        self.size += 1;
        full
    }
}

/// Reads full tiles (from disk, through a cache).
pub trait TileReader {
    /// What a failed read is.
    type Error: From<MerkleError>;

    /// The full tile `id`, expanded.
    fn full_tile(&self, id: TileId) -> Result<Arc<ExpandedTile>, Self::Error>;
}

/// A tiled tree as [`StoredNodes`]: the edge's partial tiles and the reader's full ones.
pub struct TiledNodes<'a, R> {
    edge: &'a TileEdge,
    reader: &'a R,
}

impl<R> std::fmt::Debug for TiledNodes<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiledNodes")
            .field("size", &self.edge.size)
            .finish_non_exhaustive()
    }
}

impl<'a, R> TiledNodes<'a, R> {
    /// The tree with right edge `edge` whose full tiles `reader` reads.
    pub fn new(edge: &'a TileEdge, reader: &'a R) -> TiledNodes<'a, R> {
        TiledNodes { edge, reader }
    }
}

impl<R: TileReader> StoredNodes for TiledNodes<'_, R> {
    type Error = R::Error;

    fn size(&self) -> u64 {
        self.edge.size
    }

    fn node(&self, level: u32, index: u64) -> Result<Hash, R::Error> {
        let missing = || MerkleError::SizeBeyondTree {
            tree_size: index
                .saturating_add(1)
                .saturating_mul(1u64 << level.min(63)),
            local_size: self.edge.size,
        };
        let tile_level = (level / TILE_HEIGHT) as usize;
        let r = level % TILE_HEIGHT;
        let Some(first) = index.checked_shl(r).filter(|first| first >> r == index) else {
            return Err(missing().into());
        };
        let tile = first / TILE_WIDTH as u64;
        let offset = usize::try_from(first % TILE_WIDTH as u64)
            .expect("a remainder below TILE_WIDTH fits a usize");
        let width = 1usize << r;
        let held = hashes_at(self.edge.size, tile_level);
        let edge_tile = held / TILE_WIDTH as u64;
        if tile < edge_tile {
            let id = TileId {
                level: u8::try_from(tile_level).map_err(|_| missing())?,
                index: tile,
            };
            let expanded = self.reader.full_tile(id)?;
            return expanded
                .node(r, offset >> r)
                .ok_or_else(|| missing().into());
        }
        match self.edge.partial.get(tile_level) {
            Some(partial) if tile == edge_tile && offset + width <= partial.len() => {
                if r == 0 {
                    return Ok(partial[offset]);
                }
                // A complete subtree inside the partial tile is one of its inner nodes.
                Ok(self.edge.inner[tile_level][r as usize - 1][offset >> r])
            }
            _ => Err(missing().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::merkle::{self, MerkleTree, leaf_hash};

    /// Full tiles in memory, as a store would keep them.
    #[derive(Default)]
    struct Tiles(BTreeMap<TileId, Vec<Hash>>);

    impl TileReader for Tiles {
        type Error = MerkleError;

        fn full_tile(&self, id: TileId) -> Result<Arc<ExpandedTile>, MerkleError> {
            let hashes = self.0.get(&id).expect("every full tile was stored");
            Ok(Arc::new(
                ExpandedTile::new(hashes).expect("stored tiles are full"),
            ))
        }
    }

    fn leaves(count: u64) -> impl Iterator<Item = Hash> {
        (0..count).map(|i| leaf_hash(&i.to_le_bytes()))
    }

    fn tiled(count: u64) -> (TileEdge, Tiles, MerkleTree) {
        let mut edge = TileEdge::new();
        let mut tiles = Tiles::default();
        let mut tree = MerkleTree::new();
        for leaf in leaves(count) {
            for (id, hashes) in edge.push(leaf) {
                assert!(tiles.0.insert(id, hashes).is_none(), "a tile fills once");
            }
            tree.push(leaf);
        }
        (edge, tiles, tree)
    }

    #[test]
    fn an_expanded_tile_holds_every_level_and_its_root() {
        let hashes: Vec<Hash> = leaves(256).collect();
        let expanded = ExpandedTile::new(&hashes).unwrap();
        let tree = MerkleTree::from_leaf_hashes(hashes.iter().copied());
        assert_eq!(expanded.root(), tree.root());
        for r in 0..=TILE_HEIGHT {
            for index in 0..TILE_WIDTH >> r {
                assert_eq!(
                    expanded.node(r, index),
                    Some(tree.node(r, index as u64).unwrap())
                );
            }
            assert_eq!(expanded.node(r, TILE_WIDTH >> r), None);
        }
        assert_eq!(
            ExpandedTile::new(&hashes[..255]),
            Err(TileError::NotFull { len: 255 })
        );
    }

    #[test]
    fn full_tiles_are_reported_once_with_their_place() {
        let (edge, tiles, _) = tiled(256 * 256 + 3);
        assert_eq!(tiles.0.len(), 256 + 1);
        assert!(tiles.0.contains_key(&TileId { level: 1, index: 0 }));
        assert!(tiles.0.contains_key(&TileId {
            level: 0,
            index: 255
        }));
        let partial: Vec<(TileId, usize)> = edge
            .partial_tiles()
            .map(|(id, hashes)| (id, hashes.len()))
            .collect();
        assert_eq!(
            partial,
            vec![
                (
                    TileId {
                        level: 0,
                        index: 256
                    },
                    3
                ),
                (TileId { level: 1, index: 1 }, 0),
                (TileId { level: 2, index: 0 }, 1),
            ]
        );
    }

    #[test]
    fn an_edge_of_the_wrong_shape_is_refused() {
        let (edge, _, _) = tiled(300);
        let partial: Vec<Vec<Hash>> = edge.partial_tiles().map(|(_, h)| h.to_vec()).collect();
        assert_eq!(TileEdge::from_partial(300, partial.clone()).unwrap(), edge);
        assert!(matches!(
            TileEdge::from_partial(301, partial.clone()),
            Err(TileError::WrongEdge { level: 0, .. })
        ));
        assert!(TileEdge::from_partial(30, partial).is_err());
    }

    proptest! {
        /// Roots, inclusion and consistency proofs read from tiles are the in-memory tree's, at
        /// every size up to the tree's.
        #[test]
        fn tiles_answer_as_the_whole_tree_does(
            total in 1u64..1_400,
            picks in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..12),
        ) {
            let (edge, tiles, tree) = tiled(total);
            let nodes = TiledNodes::new(&edge, &tiles);
            prop_assert_eq!(merkle::root_at(&nodes, total).unwrap(), tree.root());
            for (a, b) in picks {
                let size = 1 + b % total;
                let index = a % size;
                prop_assert_eq!(merkle::root_at(&nodes, size), tree.root_at(size));
                prop_assert_eq!(
                    merkle::inclusion_proof(&nodes, index, size),
                    tree.inclusion_proof(index, size)
                );
                let old = 1 + a % size;
                prop_assert_eq!(
                    merkle::consistency_proof(&nodes, old, size),
                    tree.consistency_proof(old, size)
                );
            }
            prop_assert!(merkle::root_at(&nodes, total + 1).is_err());
        }

        /// The edge rebuilt from the partial tiles a store kept carries on as the original.
        #[test]
        fn a_rebuilt_edge_carries_on(first in 0u64..1_000, more in 0u64..600) {
            let (mut edge, mut tiles, mut tree) = tiled(first);
            let partial = edge.partial_tiles().map(|(_, hashes)| hashes.to_vec()).collect();
            let mut rebuilt = TileEdge::from_partial(first, partial).unwrap();
            prop_assert_eq!(&rebuilt, &edge);
            for leaf in leaves(first + more).skip(usize::try_from(first).unwrap()) {
                let filled = rebuilt.push(leaf);
                prop_assert_eq!(&filled, &edge.push(leaf));
                for (id, hashes) in filled {
                    tiles.0.insert(id, hashes);
                }
                tree.push(leaf);
            }
            let nodes = TiledNodes::new(&rebuilt, &tiles);
            prop_assert_eq!(merkle::root_at(&nodes, first + more).unwrap(), tree.root());
        }
    }
}
