//! A node's local CT database: the sequenced entries it holds and its Merkle tree, in tiles.
//!
//! Seed 004 keeps entries in the replicated store only until the serving STH covers them; from
//! then on they live in every node's local database, which serves get-entries and proofs. Here
//! that database shares the node's [`Disk`] under the `ct/` prefix, laid out so that a log of a
//! billion entries needs memory only for its right edge and a bounded cache:
//!
//! - `ct/tile/<level><index>` → a tile of the tree as C2SP tlog-tiles lays it out (see
//!   [`certus_ct::tiles`]): 256 hashes of tree level 8·level once full, fewer on the right edge
//!   (rewritten as it grows, one per tile level);
//! - `ct/bundle/<index>` → entries `256·index ..` as one value once 256 of them are stored; the
//!   entries of the bundle not yet full are `ct/edge-entry/<seq>`, one value each, so a batch
//!   of one entry writes one entry (the bundle is written once, when it fills);
//! - `ct/index/…` → the leaf-hash index (get-proof-by-hash): leaf hash → first sequence number,
//!   a log-structured merge index on disk whose records not yet written are read back from the
//!   tiles at open ([`crate::ct_hash_index`]);
//! - `ct/entry-index/…` → the entry-key index (duplicates older than the replicated state's
//!   dedupe window): [`certus_ct::entry_key`] → first sequence number, the same kind of index,
//!   whose records not yet written are read back from the stored entries at open;
//! - `ct/meta/tree-size`, `ct/meta/sth` (the node's last signed tree head), `ct/meta/layout`.
//!
//! Numbers are big-endian so keys sort by them.
//!
//! Invariants: entries `0..contiguous_size` are all stored, nothing above is; the tree covers
//! `0..tree_size` with `tree_size <= contiguous_size`, and its leaf hashes are recomputed from
//! the stored entries when they are integrated — never taken from a peer or the replicated state
//! (a single corrupted leaf hash has ended production logs). The tree's size, its new tiles and
//! its right edge are written in one batch. Every change is flushed before the call returns, so
//! what the node reports holding survives a crash. At open the right edge is rechecked: each
//! partial tile's hashes against the tiles below it, the leaf tile's against the entries.
//!
//! Both indexes cover exactly the leaves `0..tree_size`: each integration round adds the records
//! of the leaves it integrates to both, in the batch that writes the tree size. An entry whose
//! `leaf_input` does not decode as a `MerkleTreeLeaf` has no entry key and is not in the
//! entry-key index (no submission can match it); it is integrated all the same.
//!
//! A database of the layout before tiles (one key per entry and per tree node) is converted when
//! it is opened; see [`CtDatabase::open`]. One of the tiled layout before the leaf index's runs
//! carried Bloom filters (`tiles-2`) gets them at open; one before the entry-key index
//! (`tiles-3`) builds it at open from its entries; the layout is now `tiles-4`.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use certus_core::ct::SignedTreeHead;
use certus_ct::Hash;
use certus_ct::frontier::Frontier;
use certus_ct::merkle::{self, leaf_hash};
use certus_ct::structures::entry_key_of_leaf_input;
use certus_ct::tiles::{ExpandedTile, TILE_WIDTH, TileEdge, TileId, TileReader, TiledNodes};
use serde::{Deserialize, Serialize};

pub use crate::ct_error::CtDbError;
use crate::ct_files::DataFiles;
use crate::ct_hash_index::{ENTRY_KEYS, HashIndex, IndexView, LEAF_HASHES, Shape, add_filters};
use crate::disk::{Disk, DiskError, WriteBatch};
use crate::files::Files;

const TILE_PREFIX: &[u8] = b"ct/tile/";
/// How many bundles of entries are full, in the bundle files.
const BUNDLES_KEY: &[u8] = b"ct/meta/bundles";
const EDGE_ENTRY_PREFIX: &[u8] = b"ct/edge-entry/";
const TREE_SIZE_KEY: &[u8] = b"ct/meta/tree-size";
const STH_KEY: &[u8] = b"ct/meta/sth";
/// Marks a database in the tiled layout, written once a conversion from the old one is complete.
const LAYOUT_KEY: &[u8] = b"ct/meta/layout";
const LAYOUT: &[u8] = b"tiles-4";
/// The tiled layout without the entry-key index: it is built at open.
const LAYOUT_BEFORE_ENTRY_INDEX: &[u8] = b"tiles-3";
/// The tiled layout whose leaf-index runs have no Bloom filters: they are added at open (and
/// then the entry-key index built).
const LAYOUT_BEFORE_FILTERS: &[u8] = b"tiles-2";
/// The layout before tiles: one key per entry, per leaf hash and per tree node.
const OLD_PREFIXES: [&[u8]; 3] = [b"ct/entry/", b"ct/leaf/", b"ct/node/"];

/// Entries per bundle: one tile's worth, as C2SP's data tiles.
const BUNDLE_ENTRIES: u64 = TILE_WIDTH as u64;
/// Entries read per disk scan when integrating or converting.
const SCAN_BATCH: usize = 4096;
/// Full tiles: `tiles-<level>`, tile N at N·[`TILE_BYTES`].
const TILE_FILE_PREFIX: &str = "tiles-";
const TILE_BYTES: u64 = 32 * TILE_WIDTH as u64;
/// Full bundles, one after another, and where each ends: 8 bytes of end offset and 4 of CRC-32
/// per bundle.
const BUNDLE_FILE: &str = "bundles";
const BUNDLE_ENDS_FILE: &str = "bundle-ends";
const BUNDLE_END_BYTES: u64 = BUNDLE_END_LEN as u64;
const BUNDLE_END_LEN: usize = 12;
/// Keys removed per batch when clearing a layout.
const DELETE_BATCH: usize = 16_384;

/// Full tiles a database keeps in memory by default: 4,096 expanded tiles of 16 KiB, 64 MiB.
/// A proof reads at most two tiles per tile level (four levels hold 2^32 leaves), so a cache of
/// this size holds the upper levels of any tree and the recently proved leaf tiles.
pub const CT_TILE_CACHE_TILES_DEFAULT: usize = 4096;

/// One sequenced entry as a node stores and serves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalEntry {
    /// The MerkleTreeLeaf encoding (`leaf_input` of get-entries).
    #[serde(with = "serde_bytes")]
    pub leaf_input: Vec<u8>,
    /// The `extra_data` of get-entries.
    #[serde(with = "serde_bytes")]
    pub extra_data: Vec<u8>,
    /// The TLS-encoded SCT the submitter got (returned again to duplicates).
    #[serde(with = "serde_bytes")]
    pub sct: Vec<u8>,
    /// The SCT's timestamp.
    pub sct_timestamp_ms: u64,
}

/// How a database uses memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtStoreConfig {
    /// Full tiles kept in memory, expanded (16 KiB each).
    pub tile_cache_tiles: usize,
}

impl Default for CtStoreConfig {
    fn default() -> Self {
        CtStoreConfig {
            tile_cache_tiles: CT_TILE_CACHE_TILES_DEFAULT,
        }
    }
}

/// The sizes of the database's two indexes: production uses the default; tests make them small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexShapes {
    pub(crate) leaf: Shape,
    pub(crate) entry: Shape,
}

impl Default for IndexShapes {
    fn default() -> Self {
        IndexShapes {
            leaf: Shape::default_for(&LEAF_HASHES),
            entry: Shape::default_for(&ENTRY_KEYS),
        }
    }
}

impl IndexShapes {
    /// The same sizes for both.
    #[cfg(test)]
    pub(crate) fn both(shape: Shape) -> IndexShapes {
        IndexShapes {
            leaf: shape,
            entry: shape,
        }
    }
}

/// Whether the entry-key index is to cover the tree when the database loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EntryIndex {
    /// It does (the layout `tiles-4`): its records not in a run are read back from the entries.
    Complete,
    /// It covers what its runs do, and is being built (from `tiles-3`).
    Building,
}

/// What the writer alone changes: the working edge and the entries of the bundle not yet full.
#[derive(Debug)]
struct Writer {
    edge: TileEdge,
    leaf_index: HashIndex,
    entry_index: HashIndex,
    bundle: Vec<LocalEntry>,
    contiguous_size: u64,
    /// Full bundles in the bundle file, and the byte where the last one ends.
    bundles: u64,
    bundles_end: u64,
}

/// What readers see, swapped whole by the writer once a change is durable.
#[derive(Debug)]
struct Published {
    edge: Arc<TileEdge>,
    leaf_index: IndexView,
    entry_index: IndexView,
    /// Full bundles: entries below 256 times this are read from the bundle file.
    bundles: u64,
    contiguous_size: u64,
    newest_sct_ms: u64,
    last_sth: Option<SignedTreeHead>,
}

/// Full tiles in memory, least recently used evicted first.
#[derive(Debug)]
struct TileCache {
    capacity: usize,
    tiles: BTreeMap<TileId, (Arc<ExpandedTile>, u64)>,
    by_use: BTreeMap<u64, TileId>,
    uses: u64,
}

impl TileCache {
    fn get(&mut self, id: TileId) -> Option<Arc<ExpandedTile>> {
        self.uses += 1;
        let uses = self.uses;
        let (tile, used) = self.tiles.get_mut(&id)?;
        self.by_use.remove(used);
        *used = uses;
        self.by_use.insert(uses, id);
        Some(Arc::clone(tile))
    }

    fn insert(&mut self, id: TileId, tile: Arc<ExpandedTile>) {
        if self.capacity == 0 || self.tiles.contains_key(&id) {
            return;
        }
        while self.tiles.len() >= self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.tiles.remove(&oldest);
        }
        self.uses += 1;
        self.by_use.insert(self.uses, id);
        self.tiles.insert(id, (tile, self.uses));
    }
}

/// Reads full tiles from their files through the cache, each checked against its hash one tile
/// level up (in the edge, or in a full tile checked the same way).
struct Tiles<'a> {
    files: &'a DataFiles,
    cache: &'a Mutex<TileCache>,
    edge: &'a TileEdge,
}

impl Tiles<'_> {
    /// Hash `index` of tile level `level`, from the edge or a full tile.
    fn hash_at(&self, level: u8, index: u64) -> Result<Hash, CtDbError> {
        let tile = index / TILE_WIDTH as u64;
        let offset = usize::try_from(index % TILE_WIDTH as u64).expect("below 256");
        if let Some((id, hashes)) = self.edge.partial_tiles().nth(usize::from(level))
            && id.index == tile
        {
            return hashes.get(offset).copied().ok_or_else(|| {
                CtDbError::Corrupt(format!(
                    "hash {index} of tile level {level} is not in the tree"
                ))
            });
        }
        Ok(self.full_tile(TileId { level, index: tile })?.hashes()[offset])
    }
}

impl TileReader for Tiles<'_> {
    type Error = CtDbError;

    fn full_tile(&self, id: TileId) -> Result<Arc<ExpandedTile>, CtDbError> {
        if let Some(tile) = lock(self.cache).get(id) {
            return Ok(tile);
        }
        let corrupt =
            |what: String| CtDbError::Corrupt(format!("tile {}/{}: {what}", id.level, id.index));
        let mut bytes = vec![0u8; 32 * TILE_WIDTH];
        self.files
            .get(&tile_file(id.level))?
            .read_at(id.index * TILE_BYTES, &mut bytes)
            .map_err(|error| corrupt(error.to_string()))?;
        let tile =
            ExpandedTile::new(&hashes_of(&bytes)?).map_err(|error| corrupt(error.to_string()))?;
        if tile.root() != self.hash_at(id.level + 1, id.index)? {
            return Err(corrupt(
                "its hashes do not make the hash one level up".into(),
            ));
        }
        let tile = Arc::new(tile);
        lock(self.cache).insert(id, Arc::clone(&tile));
        Ok(tile)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock already failed the caller that caused it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The local CT database of one node.
pub struct CtDatabase {
    disk: Arc<dyn Disk>,
    files: DataFiles,
    shapes: IndexShapes,
    writer: Mutex<Writer>,
    published: Mutex<Published>,
    cache: Mutex<TileCache>,
}

impl std::fmt::Debug for CtDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let published = lock(&self.published);
        f.debug_struct("CtDatabase")
            .field("contiguous_size", &published.contiguous_size)
            .field("tree_size", &published.edge.size())
            .finish_non_exhaustive()
    }
}

impl CtDatabase {
    /// Opens the database on `disk` and `files` with the default cache.
    pub fn open(disk: Arc<dyn Disk>, files: Arc<dyn Files>) -> Result<CtDatabase, CtDbError> {
        CtDatabase::open_with(disk, files, CtStoreConfig::default())
    }

    /// Opens the database on `disk`: loads the right edge and rechecks it.
    ///
    /// A database in the layout before tiles is converted first: its entries are copied into
    /// bundles and integrated again (leaf hashes recomputed), the root is checked against the
    /// node's last STH, the layout is marked, and only then are the old keys removed. A crash
    /// during the conversion redoes it at the next open; after the mark, it finishes removing.
    /// A database of the tiled layout whose leaf-index runs lack Bloom filters (`tiles-2`) has
    /// them written from the runs' blocks, and only then its layout marked `tiles-3`. One
    /// without the entry-key index (`tiles-3`) has it built from its entries, in rounds of
    /// 65,536 entries each committed with the index's metadata (a crash resumes from the last
    /// run written), and only then is marked `tiles-4`.
    pub fn open_with(
        disk: Arc<dyn Disk>,
        files: Arc<dyn Files>,
        config: CtStoreConfig,
    ) -> Result<CtDatabase, CtDbError> {
        CtDatabase::open_shaped(disk, files, config, IndexShapes::default())
    }

    /// [`CtDatabase::open_with`] with the indexes' sizes given (tests make them small).
    pub(crate) fn open_shaped(
        disk: Arc<dyn Disk>,
        files: Arc<dyn Files>,
        config: CtStoreConfig,
        shapes: IndexShapes,
    ) -> Result<CtDatabase, CtDbError> {
        let mut files = DataFiles::new(files);
        if disk
            .get(LAYOUT_KEY)?
            .is_some_and(|layout| layout == LAYOUT_BEFORE_FILTERS)
        {
            // Runs written before they carried filters: written now, then the layout moves on
            // (until it does, every open writes them again from the runs' blocks).
            add_filters(&*disk, &files, &LEAF_HASHES, shapes.leaf)?;
            mark_layout(&*disk, LAYOUT_BEFORE_ENTRY_INDEX)?;
        }
        if disk
            .get(LAYOUT_KEY)?
            .is_some_and(|layout| layout == LAYOUT_BEFORE_ENTRY_INDEX)
        {
            // No entry-key index yet: built now, round by round, each round committed (a crash
            // resumes from the index's own metadata), then the layout moves on.
            let db = CtDatabase::load(
                Arc::clone(&disk),
                files,
                config,
                shapes,
                EntryIndex::Building,
            )?;
            db.build_entry_index()?;
            mark_layout(&*disk, LAYOUT)?;
            CtDatabase { files, .. } = db;
        }
        let marked = disk.get(LAYOUT_KEY)?.is_some_and(|layout| layout == LAYOUT);
        if !marked {
            // New-layout data without the mark is a conversion that did not finish (or the
            // first tiled layout, which kept full tiles and bundles in sled: converted again).
            files.clear()?;
            for prefix in [
                TILE_PREFIX,
                b"ct/bundle/",
                EDGE_ENTRY_PREFIX,
                LEAF_HASHES.disk_prefix,
                ENTRY_KEYS.disk_prefix,
            ] {
                delete_prefix(&*disk, prefix)?;
            }
            delete_keys(&*disk, &[TREE_SIZE_KEY, BUNDLES_KEY])?;
            let db = CtDatabase::load(
                Arc::clone(&disk),
                files,
                config,
                shapes,
                EntryIndex::Complete,
            )?;
            db.convert_old_layout()?;
            mark_layout(&*disk, LAYOUT)?;
            for prefix in OLD_PREFIXES {
                delete_prefix(&*disk, prefix)?;
            }
            let CtDatabase { files, .. } = db;
            return CtDatabase::load(disk, files, config, shapes, EntryIndex::Complete);
        }
        for prefix in OLD_PREFIXES {
            delete_prefix(&*disk, prefix)?;
        }
        CtDatabase::load(disk, files, config, shapes, EntryIndex::Complete)
    }

    fn load(
        disk: Arc<dyn Disk>,
        files: DataFiles,
        config: CtStoreConfig,
        shapes: IndexShapes,
        built: EntryIndex,
    ) -> Result<CtDatabase, CtDbError> {
        let bundles = read_count(&*disk, BUNDLES_KEY, "the bundle count")?;
        let bundles_end = match bundles {
            0 => 0,
            _ => read_bundle_end(&files, bundles - 1)?.0,
        };
        let (contiguous_size, bundle) = load_contiguous(&*disk, bundles)?;
        let tree_size = read_count(&*disk, TREE_SIZE_KEY, "the tree size")?;
        if tree_size > contiguous_size {
            return Err(CtDbError::Corrupt(format!(
                "the tree has {tree_size} leaves but only {contiguous_size} entries are stored"
            )));
        }
        let mut partial = Vec::new();
        for (id, count) in TileEdge::partial_tiles_for(tree_size) {
            let hashes = match count {
                0 => Vec::new(),
                _ => match disk.get(&tile_key(id))? {
                    Some(bytes) => hashes_of(&bytes)?,
                    None => Vec::new(),
                },
            };
            partial.push(hashes);
        }
        let edge = TileEdge::from_partial(tree_size, partial)
            .map_err(|error| CtDbError::Corrupt(error.to_string()))?;
        // Integrated entries' SCT timestamps were folded into the last STH; a lower bound is
        // enough here, so start from its timestamp.
        let last_sth: Option<SignedTreeHead> = match disk.get(STH_KEY)? {
            Some(bytes) => Some(decode(&bytes, "the last STH")?),
            None => None,
        };
        let newest_sct_ms = last_sth.as_ref().map_or(0, |sth| sth.timestamp_ms);
        let cache = Mutex::new(TileCache {
            capacity: config.tile_cache_tiles,
            tiles: BTreeMap::new(),
            by_use: BTreeMap::new(),
            uses: 0,
        });
        // The runs first; the records not in one are read back below, through the database.
        let leaf_index = HashIndex::open(&*disk, &files, &LEAF_HASHES, shapes.leaf, tree_size)?;
        let entry_index = HashIndex::open(&*disk, &files, &ENTRY_KEYS, shapes.entry, tree_size)?;
        let db = CtDatabase {
            published: Mutex::new(Published {
                edge: Arc::new(edge.clone()),
                leaf_index: leaf_index.view(),
                entry_index: entry_index.view(),
                bundles,
                contiguous_size,
                newest_sct_ms,
                last_sth,
            }),
            writer: Mutex::new(Writer {
                edge,
                leaf_index,
                entry_index,
                bundle,
                contiguous_size,
                bundles,
                bundles_end,
            }),
            cache,
            disk,
            files,
            shapes,
        };
        {
            let mut writer = lock(&db.writer);
            db.read_back_indexes(&mut writer, built)?;
            let mut published = lock(&db.published);
            published.leaf_index = writer.leaf_index.view();
            published.entry_index = writer.entry_index.view();
        }
        db.check_edge()?;
        Ok(db)
    }

    /// Puts in memory the indexes' records of the integrated leaves that are not in a run: the
    /// leaf hashes from the tiles, the entry keys from the entries (unless the entry-key index
    /// is being built).
    fn read_back_indexes(&self, writer: &mut Writer, built: EntryIndex) -> Result<(), CtDbError> {
        let edge = &writer.edge;
        let tree_size = edge.size();
        let tiles = self.tiles(edge);
        writer.leaf_index.read_back(tree_size, |from, to| {
            let hashes = leaf_hashes(edge, &tiles, from, to)?;
            if hashes.len() as u64 != to - from {
                return Err(CtDbError::Corrupt(format!(
                    "leaf hashes {from}..{to} are missing"
                )));
            }
            Ok(hashes.into_iter().zip(from..).collect())
        })?;
        if built == EntryIndex::Complete {
            writer
                .entry_index
                .read_back(tree_size, |from, to| self.entry_key_records(from, to))?;
        }
        Ok(())
    }

    /// The entry-key index's records of entries `from..to`, all stored: (entry key, sequence)
    /// of each whose `leaf_input` decodes. One that does not is left out: no submission can be
    /// a duplicate of an entry that has no key.
    fn entry_key_records(&self, from: u64, to: u64) -> Result<Vec<(Hash, u64)>, CtDbError> {
        let mut records = Vec::new();
        let mut next = from;
        while next < to {
            let limit = usize::try_from(to - next)
                .unwrap_or(usize::MAX)
                .min(SCAN_BATCH);
            let entries = self.entries(next, limit)?;
            if entries.is_empty() {
                return Err(CtDbError::Corrupt(format!("entry {next} is missing")));
            }
            for entry in entries {
                if let Ok(key) = entry_key_of_leaf_input(&entry.leaf_input) {
                    records.push((key, next));
                }
                next += 1;
            }
        }
        Ok(records)
    }

    /// Builds the entry-key index of a store from before it (`tiles-3`), from where its runs
    /// end to the tree's size: rounds of at most `fresh_records_max` entries, each added and
    /// its batch (a run when the records fill one, a merge step, the index's metadata) committed
    /// before the next, so memory holds one round's records and a crash loses at most the
    /// records not yet in a run.
    fn build_entry_index(&self) -> Result<(), CtDbError> {
        let mut writer = lock(&self.writer);
        let tree_size = writer.edge.size();
        let round = self.shapes.entry.fresh_records_max.max(1) as u64;
        while writer.entry_index.covered() < tree_size {
            let from = writer.entry_index.covered();
            let to = tree_size.min(from + round);
            let records = self.entry_key_records(from, to)?;
            let mut batch = WriteBatch::new();
            writer
                .entry_index
                .add_round(&self.files, &mut batch, to, records)?;
            self.disk.write(batch)?;
            self.disk.flush()?;
        }
        lock(&self.published).entry_index = writer.entry_index.view();
        Ok(())
    }

    /// Rechecks the right edge: the leaf tile's hashes against the stored entries, and each
    /// higher partial tile's hashes against the roots of the full tiles below it. A torn or
    /// damaged store is caught at start, not when a proof comes out wrong.
    fn check_edge(&self) -> Result<(), CtDbError> {
        let edge = Arc::clone(&lock(&self.published).edge);
        let tiles = self.tiles(&edge);
        for (id, hashes) in edge.partial_tiles() {
            for (offset, hash) in hashes.iter().enumerate() {
                let position = id.index * TILE_WIDTH as u64 + offset as u64;
                let expected = if id.level == 0 {
                    let entry = self.entry(position)?.ok_or_else(|| {
                        CtDbError::Corrupt(format!("integrated entry {position} is missing"))
                    })?;
                    leaf_hash(&entry.leaf_input)
                } else {
                    tiles
                        .full_tile(TileId {
                            level: id.level - 1,
                            index: position,
                        })?
                        .root()
                };
                if *hash != expected {
                    return Err(CtDbError::Corrupt(format!(
                        "hash {offset} of tile {}/{} does not match what it covers",
                        id.level, id.index
                    )));
                }
            }
        }
        Ok(())
    }

    fn tiles<'a>(&'a self, edge: &'a TileEdge) -> Tiles<'a> {
        Tiles {
            files: &self.files,
            cache: &self.cache,
            edge,
        }
    }

    /// Copies a database of the old layout into this (empty) one and integrates it as far as
    /// the old tree went; checks the result against the last STH the node signed.
    fn convert_old_layout(&self) -> Result<(), CtDbError> {
        let [old_entries, _, old_nodes] = OLD_PREFIXES;
        let leaf_level = [old_nodes, &[0u8]].concat();
        let old_tree_size = match last_under(&*self.disk, &leaf_level)? {
            Some(key) => number_of(&key, &leaf_level)? + 1,
            None => 0,
        };
        let mut next = 0u64;
        loop {
            let from = numbered_key(old_entries, next);
            let to = prefix_end(old_entries);
            let pairs = self.disk.scan(
                Bound::Included(from.as_slice()),
                Bound::Excluded(to.as_slice()),
                false,
                SCAN_BATCH,
            )?;
            if pairs.is_empty() {
                break;
            }
            let mut entries = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                if number_of(&key, old_entries)? != next + entries.len() as u64 {
                    // Old entries above a gap were never part of the contiguous run.
                    break;
                }
                entries.push(decode::<LocalEntry>(&value, "an entry")?);
            }
            if entries.is_empty() {
                break;
            }
            self.store_entries(next, &entries)?;
            next += entries.len() as u64;
        }
        if old_tree_size > next {
            return Err(CtDbError::Corrupt(format!(
                "the old tree has {old_tree_size} leaves but only {next} entries are stored"
            )));
        }
        while self.tree_size() < old_tree_size {
            let left = usize::try_from(old_tree_size - self.tree_size()).unwrap_or(usize::MAX);
            self.integrate(left.min(SCAN_BATCH * 16))?;
        }
        if let Some(sth) = self.last_sth()
            && sth.tree_size <= self.tree_size()
            && self.root_at(sth.tree_size)? != sth.root_hash
        {
            return Err(CtDbError::Corrupt(format!(
                "the converted tree's root at {} is not the last STH's",
                sth.tree_size
            )));
        }
        Ok(())
    }

    /// How many leading entries are stored.
    pub fn contiguous_size(&self) -> u64 {
        lock(&self.published).contiguous_size
    }

    /// How many entries the Merkle tree covers.
    pub fn tree_size(&self) -> u64 {
        lock(&self.published).edge.size()
    }

    /// The newest SCT timestamp among integrated entries (at least the last STH's timestamp
    /// after a restart).
    pub fn newest_sct_ms(&self) -> u64 {
        lock(&self.published).newest_sct_ms
    }

    /// The last STH this node signed over its tree.
    pub fn last_sth(&self) -> Option<SignedTreeHead> {
        lock(&self.published).last_sth.clone()
    }

    /// Stores entries `first..first + entries.len()`; `first` must be the contiguous size (a
    /// batch that only repeats stored entries is accepted and changes nothing). Flushed on
    /// return.
    pub fn store_entries(&self, first: u64, entries: &[LocalEntry]) -> Result<(), CtDbError> {
        let mut writer = lock(&self.writer);
        let contiguous_size = writer.contiguous_size;
        let end = first + entries.len() as u64;
        if first > contiguous_size {
            return Err(CtDbError::NotContiguous {
                expected: contiguous_size,
                got: first,
            });
        }
        if end <= contiguous_size {
            return Ok(());
        }
        let skip = usize::try_from(contiguous_size - first).expect("within the batch");
        let mut batch = WriteBatch::new();
        let mut bundle = writer.bundle.clone();
        let (mut bundles, mut bundles_end) = (writer.bundles, writer.bundles_end);
        let mut filled = Vec::new();
        let mut ends = Vec::new();
        for (sequence, entry) in (contiguous_size..).zip(&entries[skip..]) {
            bundle.push(entry.clone());
            if bundle.len() as u64 == BUNDLE_ENTRIES {
                let index = sequence / BUNDLE_ENTRIES;
                debug_assert_eq!(index, bundles);
                let bytes = encode_bundle(&bundle);
                bundles_end += bytes.len() as u64;
                ends.extend_from_slice(&bundles_end.to_be_bytes());
                ends.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
                filled.extend_from_slice(&bytes);
                bundles += 1;
                // Entries of this bundle written singly by earlier calls are in it now.
                for earlier in index * BUNDLE_ENTRIES..sequence {
                    batch.delete(numbered_key(EDGE_ENTRY_PREFIX, earlier));
                }
                bundle.clear();
            }
        }
        if bundles > writer.bundles {
            // The bundles are on disk before the count that names them.
            let data = self.files.get(BUNDLE_FILE)?;
            data.write_at(writer.bundles_end, &filled)?;
            data.sync_data()?;
            let index = self.files.get(BUNDLE_ENDS_FILE)?;
            index.write_at(writer.bundles * BUNDLE_END_BYTES, &ends)?;
            index.sync_data()?;
            batch.put(BUNDLES_KEY, bundles.to_be_bytes().to_vec());
        }
        let bundle_start = end - bundle.len() as u64;
        for (offset, entry) in bundle.iter().enumerate() {
            let sequence = bundle_start + offset as u64;
            if sequence >= contiguous_size {
                batch.put(numbered_key(EDGE_ENTRY_PREFIX, sequence), encode(entry));
            }
        }
        self.disk.write(batch)?;
        self.disk.flush()?;
        writer.bundle = bundle;
        writer.bundles = bundles;
        writer.bundles_end = bundles_end;
        writer.contiguous_size = end;
        let mut published = lock(&self.published);
        published.bundles = bundles;
        published.contiguous_size = end;
        Ok(())
    }

    /// Integrates up to `max_entries` stored entries into the tree, hashing each leaf from its
    /// stored `leaf_input`, and persists the new tiles, the right edge, both indexes' round and
    /// the size in one flushed batch. Returns the new tree size.
    pub fn integrate(&self, max_entries: usize) -> Result<u64, CtDbError> {
        let mut writer = lock(&self.writer);
        let start = writer.edge.size();
        let end = writer
            .contiguous_size
            .min(start.saturating_add(max_entries as u64));
        if end == start {
            return Ok(start);
        }
        let mut edge = writer.edge.clone();
        let mut newest_sct_ms = self.newest_sct_ms();
        let mut batch = WriteBatch::new();
        let mut records = Vec::with_capacity(usize::try_from(end - start).unwrap_or(0));
        let mut key_records = Vec::with_capacity(records.capacity());
        // Tiles filled this round, per level: the first one's index and their hashes, in order.
        let mut filled: BTreeMap<u8, (u64, Vec<u8>)> = BTreeMap::new();
        while edge.size() < end {
            let next = edge.size();
            let limit = usize::try_from(end - next)
                .unwrap_or(usize::MAX)
                .min(SCAN_BATCH);
            let entries = self.entries(next, limit)?;
            if entries.is_empty() {
                return Err(CtDbError::Corrupt(format!("entry {next} is missing")));
            }
            for entry in entries {
                let hash = leaf_hash(&entry.leaf_input);
                newest_sct_ms = newest_sct_ms.max(entry.sct_timestamp_ms);
                records.push((hash, edge.size()));
                // An entry whose leaf_input does not decode has no entry key: no submission
                // can be its duplicate, so it is not indexed (and is integrated all the same).
                if let Ok(key) = entry_key_of_leaf_input(&entry.leaf_input) {
                    key_records.push((key, edge.size()));
                }
                for (id, hashes) in edge.push(hash) {
                    // Full now: in its file, no longer on the edge.
                    batch.delete(tile_key(id));
                    let (_, bytes) = filled.entry(id.level).or_insert((id.index, Vec::new()));
                    bytes.extend_from_slice(&hashes.concat());
                }
            }
        }
        for (id, hashes) in edge.partial_tiles() {
            if !hashes.is_empty() {
                batch.put(tile_key(id), hashes.concat());
            }
        }
        batch.put(TREE_SIZE_KEY, edge.size().to_be_bytes().to_vec());
        let size = edge.size();
        let written = self
            .write_tiles(&filled)
            .and_then(|()| {
                writer
                    .leaf_index
                    .add_round(&self.files, &mut batch, size, records)
            })
            .and_then(|()| {
                writer
                    .entry_index
                    .add_round(&self.files, &mut batch, size, key_records)
            })
            .and_then(|()| {
                self.disk.write(batch)?;
                self.disk.flush()?;
                Ok(())
            });
        if let Err(error) = written {
            // The indexes changed in memory for a round that is not on disk: read them again.
            let old_size = writer.edge.size();
            writer.leaf_index = HashIndex::open(
                &*self.disk,
                &self.files,
                &LEAF_HASHES,
                self.shapes.leaf,
                old_size,
            )?;
            writer.entry_index = HashIndex::open(
                &*self.disk,
                &self.files,
                &ENTRY_KEYS,
                self.shapes.entry,
                old_size,
            )?;
            self.read_back_indexes(&mut writer, EntryIndex::Complete)?;
            return Err(error);
        }
        writer.edge = edge.clone();
        let mut published = lock(&self.published);
        published.edge = Arc::new(edge);
        published.leaf_index = writer.leaf_index.view();
        published.entry_index = writer.entry_index.view();
        published.newest_sct_ms = newest_sct_ms;
        Ok(size)
    }

    /// Writes and syncs full tiles, before the tree size that covers them is committed.
    fn write_tiles(&self, filled: &BTreeMap<u8, (u64, Vec<u8>)>) -> Result<(), CtDbError> {
        for (level, (first, bytes)) in filled {
            let file = self.files.get(&tile_file(*level))?;
            file.write_at(first * TILE_BYTES, bytes)?;
            file.sync_data()?;
        }
        Ok(())
    }

    /// Records the STH this node just signed (flushed), so its next one follows it even after
    /// a restart.
    pub fn save_sth(&self, sth: &SignedTreeHead) -> Result<(), CtDbError> {
        let _writer = lock(&self.writer);
        let mut batch = WriteBatch::new();
        batch.put(STH_KEY.to_vec(), encode(sth));
        self.disk.write(batch)?;
        self.disk.flush()?;
        lock(&self.published).last_sth = Some(sth.clone());
        Ok(())
    }

    /// The stored entry `sequence`.
    pub fn entry(&self, sequence: u64) -> Result<Option<LocalEntry>, CtDbError> {
        Ok(self.entries(sequence, 1)?.pop())
    }

    /// Stored entries from `start`, at most `limit`, in order (stops at the first gap).
    pub fn entries(&self, start: u64, limit: usize) -> Result<Vec<LocalEntry>, CtDbError> {
        let mut entries = Vec::new();
        let mut next = start;
        while entries.len() < limit {
            let index = next / BUNDLE_ENTRIES;
            let wanted = limit - entries.len();
            if index < lock(&self.published).bundles {
                let bytes = self.read_bundle(index)?;
                let from = usize::try_from(next % BUNDLE_ENTRIES).expect("below 256");
                let taken = decode_bundle(&bytes, from, wanted)?;
                next += taken.len() as u64;
                entries.extend(taken);
                continue;
            }
            let singles = self.edge_entries(next, wanted)?;
            if singles.is_empty() {
                // The bundle may have filled (and its single entries gone) since it was looked
                // for: look once more before calling this the end.
                if index < lock(&self.published).bundles {
                    continue;
                }
                break;
            }
            next += singles.len() as u64;
            entries.extend(singles);
        }
        Ok(entries)
    }

    /// Full bundle `index`, its checksum checked.
    fn read_bundle(&self, index: u64) -> Result<Vec<u8>, CtDbError> {
        let start = match index {
            0 => 0,
            _ => read_bundle_end(&self.files, index - 1)?.0,
        };
        let (end, crc) = read_bundle_end(&self.files, index)?;
        let corrupt = |what: String| CtDbError::Corrupt(format!("bundle {index}: {what}"));
        let length = end
            .checked_sub(start)
            .and_then(|length| usize::try_from(length).ok())
            .ok_or_else(|| corrupt(format!("ends at {end}, before its start {start}")))?;
        let mut bytes = vec![0u8; length];
        self.files
            .get(BUNDLE_FILE)?
            .read_at(start, &mut bytes)
            .map_err(|error| corrupt(error.to_string()))?;
        if crc32fast::hash(&bytes) != crc {
            return Err(corrupt("it does not match its checksum".into()));
        }
        Ok(bytes)
    }

    /// The singly stored entries from `start` on, as far as they are contiguous.
    fn edge_entries(&self, start: u64, limit: usize) -> Result<Vec<LocalEntry>, CtDbError> {
        let from = numbered_key(EDGE_ENTRY_PREFIX, start);
        let to = prefix_end(EDGE_ENTRY_PREFIX);
        let pairs = self.disk.scan(
            Bound::Included(from.as_slice()),
            Bound::Excluded(to.as_slice()),
            false,
            limit,
        )?;
        let mut entries = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            if number_of(&key, EDGE_ENTRY_PREFIX)? != start + entries.len() as u64 {
                break;
            }
            entries.push(decode(&value, "an entry")?);
        }
        Ok(entries)
    }

    /// The first sequence number whose leaf hash is `hash`, if integrated.
    pub fn index_of_leaf(&self, hash: &Hash) -> Result<Option<u64>, CtDbError> {
        self.look_up(hash, |published| &published.leaf_index)
    }

    /// The first sequence number whose entry has the entry key `key` ([`certus_ct::entry_key`]:
    /// the same certificate or precertificate, whatever its timestamp), among the integrated
    /// entries: the index covers exactly `0..tree_size()`. The hit is checked by reading the
    /// entry there and computing its key again (one that differs is [`CtDbError::Corrupt`]).
    pub fn index_of_entry_key(&self, key: &Hash) -> Result<Option<u64>, CtDbError> {
        let Some(sequence) = self.look_up(key, |published| &published.entry_index)? else {
            return Ok(None);
        };
        let entry = self.entry(sequence)?.ok_or_else(|| {
            CtDbError::Corrupt(format!(
                "the entry index names entry {sequence}, which is not stored"
            ))
        })?;
        match entry_key_of_leaf_input(&entry.leaf_input) {
            Ok(stored) if stored == *key => Ok(Some(sequence)),
            _ => Err(CtDbError::Corrupt(format!(
                "the entry index names entry {sequence} for a key that is not its own"
            ))),
        }
    }

    /// `hash` looked up in the index `view` picks from what is published.
    fn look_up(
        &self,
        hash: &Hash,
        view: impl Fn(&Published) -> &IndexView,
    ) -> Result<Option<u64>, CtDbError> {
        let taken = view(&lock(&self.published)).clone();
        match taken.lookup(hash) {
            Ok(found) => Ok(found),
            // A merge retired a run this view still named, between taking it and reading: the
            // view published since names the merged run.
            Err(CtDbError::Corrupt(_)) => {
                let taken = view(&lock(&self.published)).clone();
                taken.lookup(hash)
            }
            Err(error) => Err(error),
        }
    }

    /// Runs `read` on the tree as it is now (roots and proofs at any size up to its size).
    fn with_nodes<T>(
        &self,
        read: impl FnOnce(&TiledNodes<'_, Tiles<'_>>) -> Result<T, CtDbError>,
    ) -> Result<T, CtDbError> {
        let edge = Arc::clone(&lock(&self.published).edge);
        let tiles = self.tiles(&edge);
        read(&TiledNodes::new(&edge, &tiles))
    }

    /// The root of the tree's first `tree_size` leaves.
    pub fn root_at(&self, tree_size: u64) -> Result<Hash, CtDbError> {
        self.with_nodes(|nodes| merkle::root_at(nodes, tree_size))
    }

    /// The size and root of the whole tree, read together.
    pub fn size_and_root(&self) -> Result<(u64, Hash), CtDbError> {
        self.with_nodes(|nodes| {
            use certus_ct::merkle::StoredNodes;
            let size = nodes.size();
            Ok((size, merkle::root_at(nodes, size)?))
        })
    }

    /// The RFC 6962 audit path of leaf `index` in the tree of the first `tree_size` leaves.
    pub fn inclusion_proof(&self, index: u64, tree_size: u64) -> Result<Vec<Hash>, CtDbError> {
        self.with_nodes(|nodes| merkle::inclusion_proof(nodes, index, tree_size))
    }

    /// The RFC 6962 consistency proof between the trees of `old_size` and `new_size` leaves.
    pub fn consistency_proof(&self, old_size: u64, new_size: u64) -> Result<Vec<Hash>, CtDbError> {
        self.with_nodes(|nodes| merkle::consistency_proof(nodes, old_size, new_size))
    }

    /// The right edge of the tree's first `size` leaves (a mirror extends it to check fetched
    /// leaves).
    pub fn frontier(&self, size: u64) -> Result<Frontier, CtDbError> {
        self.with_nodes(|nodes| Frontier::of_nodes(nodes, size))
    }

    /// Full tiles in the cache now.
    pub fn cached_tiles(&self) -> usize {
        lock(&self.cache).tiles.len()
    }

    /// Bytes the leaf index keeps in memory: its fences, the Bloom filters the bound keeps and
    /// the records not yet in a run.
    pub fn leaf_index_memory_bytes(&self) -> u64 {
        lock(&self.published).leaf_index.memory_bytes()
    }

    /// Bytes the entry-key index keeps in memory: its fences, the Bloom filters the bound keeps
    /// and the records not yet in a run.
    pub fn entry_index_memory_bytes(&self) -> u64 {
        lock(&self.published).entry_index.memory_bytes()
    }
}

/// The tree's leaf hashes `from..to` (`to` at most the edge's size), from the level-0 tiles.
fn leaf_hashes(
    edge: &TileEdge,
    tiles: &Tiles<'_>,
    from: u64,
    to: u64,
) -> Result<Vec<Hash>, CtDbError> {
    let width = TILE_WIDTH as u64;
    let (partial_id, partial) = edge
        .partial_tiles()
        .next()
        .map(|(id, hashes)| (id.index, hashes.to_vec()))
        .unwrap_or((0, Vec::new()));
    let mut hashes = Vec::with_capacity(usize::try_from(to.saturating_sub(from)).unwrap_or(0));
    let mut next = from;
    while next < to {
        let tile = next / width;
        let offset = usize::try_from(next % width).expect("below 256");
        let take = usize::try_from((to - next).min(width - next % width)).expect("below 256");
        let not_in_tiles =
            || CtDbError::Corrupt(format!("leaf hashes {next}.. are not in the tiles"));
        if tile == partial_id {
            let slice = partial
                .get(offset..offset + take)
                .ok_or_else(not_in_tiles)?;
            hashes.extend_from_slice(slice);
        } else {
            let full = tiles.full_tile(TileId {
                level: 0,
                index: tile,
            })?;
            let slice = full
                .hashes()
                .get(offset..offset + take)
                .ok_or_else(not_in_tiles)?;
            hashes.extend_from_slice(slice);
        }
        next += take as u64;
    }
    Ok(hashes)
}

/// The contiguous size and the entries of the bundle not yet full, from what is stored.
fn load_contiguous(disk: &dyn Disk, bundles: u64) -> Result<(u64, Vec<LocalEntry>), CtDbError> {
    let full = bundles * BUNDLE_ENTRIES;
    let from = numbered_key(EDGE_ENTRY_PREFIX, full);
    let to = prefix_end(EDGE_ENTRY_PREFIX);
    // At most 255 of them, unless the store is damaged: read one more to tell.
    let pairs = disk.scan(
        Bound::Included(EDGE_ENTRY_PREFIX),
        Bound::Excluded(to.as_slice()),
        false,
        usize::try_from(BUNDLE_ENTRIES).expect("a tile's width fits a usize"),
    )?;
    let mut bundle = Vec::new();
    for (key, value) in pairs {
        if key.as_slice() < from.as_slice() {
            return Err(CtDbError::Corrupt(format!(
                "entry {} is stored singly and in a full bundle",
                number_of(&key, EDGE_ENTRY_PREFIX)?
            )));
        }
        let sequence = number_of(&key, EDGE_ENTRY_PREFIX)?;
        if sequence != full + bundle.len() as u64 || bundle.len() as u64 >= BUNDLE_ENTRIES - 1 {
            return Err(CtDbError::Corrupt(format!(
                "singly stored entry {sequence} does not follow entry {}",
                full + bundle.len() as u64
            )));
        }
        bundle.push(decode(&value, "an entry")?);
    }
    Ok((full + bundle.len() as u64, bundle))
}

/// The big-endian number stored at `key` (0 when absent).
fn read_count(disk: &dyn Disk, key: &[u8], what: &str) -> Result<u64, CtDbError> {
    match disk.get(key)? {
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| CtDbError::Corrupt(format!("{what} is not 8 bytes"))),
        None => Ok(0),
    }
}

/// Where full bundle `index` ends in the bundle file, and its CRC-32.
fn read_bundle_end(files: &DataFiles, index: u64) -> Result<(u64, u32), CtDbError> {
    let mut bytes = [0u8; BUNDLE_END_LEN];
    files
        .get(BUNDLE_ENDS_FILE)?
        .read_at(index * BUNDLE_END_BYTES, &mut bytes)
        .map_err(|error| CtDbError::Corrupt(format!("the end of bundle {index}: {error}")))?;
    let (end, crc) = bytes.split_at(8);
    Ok((
        u64::from_be_bytes(end.try_into().expect("8 bytes")),
        u32::from_be_bytes(crc.try_into().expect("4 bytes")),
    ))
}

fn tile_file(level: u8) -> String {
    format!("{TILE_FILE_PREFIX}{level}")
}

/// Entries bundled: a count, the end offset of each entry, then the entries (postcard), so one
/// entry is decoded without the others.
fn encode_bundle(entries: &[LocalEntry]) -> Vec<u8> {
    let encoded: Vec<Vec<u8>> = entries.iter().map(encode).collect();
    let payload: usize = encoded.iter().map(Vec::len).sum();
    let mut bytes = Vec::with_capacity(4 + 4 * entries.len() + payload);
    bytes.extend_from_slice(
        &u32::try_from(entries.len())
            .expect("256 entries")
            .to_be_bytes(),
    );
    let mut end = 0usize;
    for entry in &encoded {
        end += entry.len();
        bytes.extend_from_slice(
            &u32::try_from(end)
                .expect("a bundle under 4 GiB")
                .to_be_bytes(),
        );
    }
    for entry in encoded {
        bytes.extend_from_slice(&entry);
    }
    bytes
}

/// Up to `limit` entries of a bundle, from entry `from` on.
fn decode_bundle(bytes: &[u8], from: usize, limit: usize) -> Result<Vec<LocalEntry>, CtDbError> {
    let corrupt = || CtDbError::Corrupt("a bundle of entries is malformed".into());
    let word = |at: usize| -> Result<usize, CtDbError> {
        let word: [u8; 4] = bytes
            .get(at..at + 4)
            .and_then(|w| w.try_into().ok())
            .ok_or_else(corrupt)?;
        Ok(u32::from_be_bytes(word) as usize)
    };
    let count = word(0)?;
    if count as u64 != BUNDLE_ENTRIES {
        return Err(corrupt());
    }
    let payload = 4 + 4 * count;
    let mut entries = Vec::new();
    for index in from..count.min(from.saturating_add(limit)) {
        let start = if index == 0 {
            0
        } else {
            word(4 + 4 * (index - 1))?
        };
        let end = word(4 + 4 * index)?;
        let slice = bytes
            .get(payload + start..payload + end)
            .ok_or_else(corrupt)?;
        entries.push(decode(slice, "an entry")?);
    }
    Ok(entries)
}

fn hashes_of(bytes: &[u8]) -> Result<Vec<Hash>, CtDbError> {
    if !bytes.len().is_multiple_of(32) || bytes.len() > 32 * TILE_WIDTH {
        return Err(CtDbError::Corrupt(format!(
            "a tile of {} bytes",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(32)
        .map(|hash| hash.try_into().expect("32 bytes"))
        .collect())
}

/// The last key under `prefix`, if any.
fn last_under(disk: &dyn Disk, prefix: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
    let to = prefix_end(prefix);
    let last = disk.scan(
        Bound::Included(prefix),
        Bound::Excluded(to.as_slice()),
        true,
        1,
    )?;
    Ok(last.into_iter().next().map(|(key, _)| key))
}

/// Removes every key under `prefix`, in flushed batches.
fn delete_prefix(disk: &dyn Disk, prefix: &[u8]) -> Result<(), DiskError> {
    let to = prefix_end(prefix);
    loop {
        let pairs = disk.scan(
            Bound::Included(prefix),
            Bound::Excluded(to.as_slice()),
            false,
            DELETE_BATCH,
        )?;
        if pairs.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for (key, _) in pairs {
            batch.delete(key);
        }
        disk.write(batch)?;
        disk.flush()?;
    }
}

/// Marks the database's layout `layout` (flushed).
fn mark_layout(disk: &dyn Disk, layout: &[u8]) -> Result<(), DiskError> {
    let mut batch = WriteBatch::new();
    batch.put(LAYOUT_KEY, layout);
    disk.write(batch)?;
    disk.flush()
}

fn delete_keys(disk: &dyn Disk, keys: &[&[u8]]) -> Result<(), DiskError> {
    let mut batch = WriteBatch::new();
    for key in keys {
        batch.delete(key.to_vec());
    }
    disk.write(batch)?;
    disk.flush()
}

fn numbered_key(prefix: &[u8], number: u64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(&number.to_be_bytes());
    key
}

fn tile_key(id: TileId) -> Vec<u8> {
    let mut key = TILE_PREFIX.to_vec();
    key.push(id.level);
    key.extend_from_slice(&id.index.to_be_bytes());
    key
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    *end.last_mut().expect("prefixes are not empty") += 1;
    end
}

fn number_of(key: &[u8], prefix: &[u8]) -> Result<u64, CtDbError> {
    key.strip_prefix(prefix)
        .and_then(|rest| <[u8; 8]>::try_from(rest).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| CtDbError::Corrupt("a numbered key is malformed".into()))
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(value).expect("plain data always encodes")
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], what: &str) -> Result<T, CtDbError> {
    postcard::from_bytes(bytes).map_err(|error| CtDbError::Corrupt(format!("{what}: {error}")))
}

#[cfg(test)]
mod tests {
    use certus_ct::LogEntry;
    use certus_ct::merkle::{MerkleError, MerkleTree};
    use certus_ct::structures::leaf_input;
    use proptest::prelude::*;

    use super::*;
    use crate::ct_hash_index::{indexed_upto, remove_index};
    use crate::{SimDisk, SimFiles};

    fn at(n: u64) -> usize {
        usize::try_from(n).expect("test sizes fit")
    }

    fn entry(n: u64) -> LocalEntry {
        LocalEntry {
            leaf_input: n.to_be_bytes().to_vec(),
            extra_data: vec![1, 2],
            sct: vec![3],
            sct_timestamp_ms: 1_000 + n,
        }
    }

    /// A 64-byte certificate, different for every `n`.
    fn certificate(n: u64) -> Vec<u8> {
        n.to_be_bytes().repeat(8)
    }

    /// Certificate `n` logged at `timestamp_ms`: a `leaf_input` that decodes, whose entry key is
    /// [`key_of`]`(n)` (unlike [`entry`]'s).
    fn logged(n: u64, timestamp_ms: u64) -> LocalEntry {
        let certificate = LogEntry::X509 {
            certificate: certificate(n),
        };
        LocalEntry {
            leaf_input: leaf_input(timestamp_ms, &certificate, &[]).unwrap(),
            extra_data: vec![1, 2],
            sct: vec![3],
            sct_timestamp_ms: timestamp_ms,
        }
    }

    fn key_of(n: u64) -> Hash {
        certus_ct::entry_key(&LogEntry::X509 {
            certificate: certificate(n),
        })
    }

    /// Small indexes, so that runs and merges happen within a few hundred leaves.
    fn small(filter_bytes_max: usize) -> Shape {
        Shape {
            fresh_records_max: 37,
            merge_fan_in: 3,
            merge_work_per_record: 2,
            block_records: 4,
            filter_bytes_max,
        }
    }

    fn open_small(
        disk: &Arc<SimDisk>,
        files: &Arc<SimFiles>,
        shape: Shape,
    ) -> Result<CtDatabase, CtDbError> {
        CtDatabase::open_shaped(
            Arc::clone(disk) as Arc<dyn Disk>,
            Arc::clone(files) as Arc<dyn Files>,
            CtStoreConfig::default(),
            IndexShapes::both(shape),
        )
    }

    fn open(disk: &Arc<SimDisk>, files: &Arc<SimFiles>) -> Result<CtDatabase, CtDbError> {
        CtDatabase::open(
            Arc::clone(disk) as Arc<dyn Disk>,
            Arc::clone(files) as Arc<dyn Files>,
        )
    }

    /// A crash of the machine: the disk and the files lose what was not flushed or synced,
    /// tearing unsynced writes at varied places.
    fn crash(disk: &SimDisk, files: &SimFiles) {
        disk.crash();
        let mut draws = 0x9e37_79b9_7f4a_7c15_u64;
        files.crash(&mut |bound| {
            draws = draws.rotate_left(17).wrapping_mul(0xff51_afd7_ed55_8ccd);
            draws % bound.max(1)
        });
    }

    fn tree_of(entries: &[LocalEntry]) -> MerkleTree {
        MerkleTree::from_leaf_hashes(entries.iter().map(|e| leaf_hash(&e.leaf_input)))
    }

    #[test]
    fn entries_integrate_into_the_tree_and_survive_a_crash() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        let entries: Vec<LocalEntry> = (0..10).map(entry).collect();
        db.store_entries(0, &entries[..6]).unwrap();
        // Overlapping batches extend the run; gaps are refused.
        db.store_entries(4, &entries[4..10]).unwrap();
        assert_eq!(
            db.store_entries(12, &entries[..1]),
            Err(CtDbError::NotContiguous {
                expected: 10,
                got: 12
            })
        );
        assert_eq!(db.integrate(7).unwrap(), 7);
        assert_eq!(db.integrate(100).unwrap(), 10);
        assert_eq!(db.newest_sct_ms(), 1_009);
        let expected = tree_of(&entries);
        assert_eq!(db.size_and_root().unwrap(), (10, expected.root()));
        assert_eq!(
            db.index_of_leaf(&leaf_hash(&entries[3].leaf_input))
                .unwrap(),
            Some(3)
        );
        assert_eq!(db.index_of_leaf(&[9; 32]).unwrap(), None);
        assert_eq!(db.entries(8, 5).unwrap(), entries[8..10].to_vec());

        // Everything was flushed: a crash loses nothing.
        crash(&disk, &files);
        let reopened = open(&disk, &files).unwrap();
        assert_eq!(reopened.contiguous_size(), 10);
        assert_eq!(reopened.tree_size(), 10);
        assert_eq!(reopened.root_at(10).unwrap(), expected.root());
        assert_eq!(reopened.entry(9).unwrap(), Some(entries[9].clone()));
        assert_eq!(reopened.entry(10).unwrap(), None);
    }

    #[test]
    fn entries_fill_bundles_and_tiles_across_their_edges() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        let entries: Vec<LocalEntry> = (0..1_000).map(entry).collect();
        // Batches of every shape: one at a time, then across several bundles at once.
        for sequence in 0..300 {
            db.store_entries(sequence, &entries[at(sequence)..=at(sequence)])
                .unwrap();
        }
        db.store_entries(300, &entries[300..]).unwrap();
        assert_eq!(db.entries(0, 1_000).unwrap(), entries);
        assert_eq!(db.entries(250, 20).unwrap(), entries[250..270].to_vec());
        for step in [1, 255, 2, 500, 1_000] {
            db.integrate(step).unwrap();
        }
        assert_eq!(db.tree_size(), 1_000);
        let expected = tree_of(&entries);
        for (index, size) in [(0, 1), (255, 256), (256, 257), (511, 700), (999, 1_000)] {
            assert_eq!(
                db.inclusion_proof(index, size).unwrap(),
                expected.inclusion_proof(index, size).unwrap()
            );
            assert_eq!(
                db.consistency_proof(index + 1, size).unwrap(),
                expected.consistency_proof(index + 1, size).unwrap()
            );
        }
        assert_eq!(
            db.frontier(513).unwrap(),
            Frontier::of_tree(&expected, 513).unwrap()
        );
        assert!(matches!(
            db.root_at(1_001),
            Err(CtDbError::Tree(MerkleError::SizeBeyondTree { .. }))
        ));
        // A full bundle's entries are not kept singly as well.
        assert!(
            disk.get(&numbered_key(EDGE_ENTRY_PREFIX, 5))
                .unwrap()
                .is_none()
        );
        drop(db);
        let reopened = open(&disk, &files).unwrap();
        assert_eq!(reopened.root_at(1_000).unwrap(), expected.root());
        assert_eq!(reopened.entries(990, 20).unwrap(), entries[990..].to_vec());
    }

    #[test]
    fn a_duplicate_leaf_is_found_at_its_first_sequence_number() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        let entries = vec![entry(1), entry(2), entry(1)];
        db.store_entries(0, &entries).unwrap();
        db.integrate(2).unwrap();
        let hash = leaf_hash(&entries[0].leaf_input);
        assert_eq!(db.index_of_leaf(&hash).unwrap(), Some(0));
        db.integrate(1).unwrap();
        assert_eq!(db.index_of_leaf(&hash).unwrap(), Some(0));
    }

    #[test]
    fn entries_are_found_by_key_across_runs_merges_and_reopens() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let mut db = open_small(&disk, &files, small(usize::MAX)).unwrap();
        let entries: Vec<LocalEntry> = (0..600).map(|n| logged(n, 1_000 + n)).collect();
        db.store_entries(0, &entries).unwrap();
        // Exactly the integrated entries are found, each at its number.
        let check = |db: &CtDatabase| {
            let size = db.tree_size();
            for n in 0..600 {
                assert_eq!(
                    db.index_of_entry_key(&key_of(n)).unwrap(),
                    (n < size).then_some(n),
                    "entry {n} in a tree of {size}"
                );
            }
            assert_eq!(db.index_of_entry_key(&key_of(10_000)).unwrap(), None);
        };
        // Before any run is written (fewer than 37 records), then across runs and merges;
        // reopened after a crash at several points.
        for (step, reopen) in [
            (20, true),
            (17, false),
            (1, true),
            (100, false),
            (150, true),
            (312, true),
        ] {
            db.integrate(step).unwrap();
            check(&db);
            if reopen {
                drop(db);
                crash(&disk, &files);
                db = open_small(&disk, &files, small(usize::MAX)).unwrap();
                check(&db);
            }
        }
        assert_eq!(db.tree_size(), 600);
        // Fences and filters of 600 records at least; none of the filters kept, still found.
        assert!(db.entry_index_memory_bytes() > 600 * 10 / 8);
        drop(db);
        let db = open_small(&disk, &files, small(0)).unwrap();
        check(&db);
    }

    #[test]
    fn a_duplicate_entry_is_found_at_its_first_sequence_number() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let mut db = open_small(&disk, &files, small(usize::MAX)).unwrap();
        // Every certificate three times, 120 apart, each at another timestamp: three leaves
        // (three leaf hashes), one entry key.
        let entries: Vec<LocalEntry> = (0..300).map(|n| logged(n % 120, 1_000 + n)).collect();
        assert_ne!(
            leaf_hash(&entries[0].leaf_input),
            leaf_hash(&entries[120].leaf_input)
        );
        db.store_entries(0, &entries).unwrap();
        for step in [1, 118, 2, 60, 119] {
            db.integrate(step).unwrap();
            for reopened in [false, true] {
                if reopened {
                    drop(db);
                    db = open_small(&disk, &files, small(usize::MAX)).unwrap();
                }
                let size = db.tree_size();
                for n in 0..120 {
                    assert_eq!(
                        db.index_of_entry_key(&key_of(n)).unwrap(),
                        (n < size).then_some(n)
                    );
                }
                for (sequence, entry) in entries.iter().enumerate().take(at(size)) {
                    assert_eq!(
                        db.index_of_leaf(&leaf_hash(&entry.leaf_input)).unwrap(),
                        Some(sequence as u64)
                    );
                }
            }
        }
    }

    #[test]
    fn entries_that_do_not_decode_integrate_and_are_not_indexed() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        // Entries 0, 3, 6 and 9 are leaves; the others are bytes that do not decode as one.
        let entries: Vec<LocalEntry> = (0..10)
            .map(|n| match n % 3 {
                0 => logged(n, 1_000 + n),
                _ => entry(n),
            })
            .collect();
        assert!(entry_key_of_leaf_input(&entries[1].leaf_input).is_err());
        db.store_entries(0, &entries).unwrap();
        assert_eq!(db.integrate(10).unwrap(), 10);
        assert_eq!(db.root_at(10).unwrap(), tree_of(&entries).root());
        for reopened in [false, true] {
            let db = match reopened {
                false => &db,
                true => {
                    crash(&disk, &files);
                    &open(&disk, &files).unwrap()
                }
            };
            // Four records in memory (no run yet), 40 bytes each.
            assert_eq!(db.entry_index_memory_bytes(), 4 * 40);
            assert_eq!(db.leaf_index_memory_bytes(), 10 * 40);
            for n in (0..10).step_by(3) {
                assert_eq!(db.index_of_entry_key(&key_of(n)).unwrap(), Some(n));
            }
            assert_eq!(db.index_of_entry_key(&key_of(1)).unwrap(), None);
        }
    }

    #[test]
    fn an_entry_index_hit_on_an_entry_of_another_key_is_corrupt() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        db.store_entries(0, &(0..3).map(|n| logged(n, n)).collect::<Vec<_>>())
            .unwrap();
        db.integrate(3).unwrap();
        assert_eq!(db.index_of_entry_key(&key_of(1)).unwrap(), Some(1));
        // Entry 1 replaced on disk behind the database's back.
        let mut batch = WriteBatch::new();
        batch.put(numbered_key(EDGE_ENTRY_PREFIX, 1), encode(&logged(99, 1)));
        disk.write(batch).unwrap();
        assert!(matches!(
            db.index_of_entry_key(&key_of(1)),
            Err(CtDbError::Corrupt(message)) if message.contains("entry 1")
        ));
        assert_eq!(db.index_of_entry_key(&key_of(99)).unwrap(), None);
    }

    /// A store as the code before the entry-key index left it: 700 integrated entries (leaves
    /// that decode; entries 600.. repeat the certificates of 0..100), no entry-key index, and
    /// the layout `tiles-3`.
    fn store_before_the_entry_index(
        shape: Shape,
    ) -> (Arc<SimDisk>, Arc<SimFiles>, Vec<LocalEntry>) {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let entries: Vec<LocalEntry> = (0..700).map(|n| logged(n % 600, 1_000 + n)).collect();
        let db = open_small(&disk, &files, shape).unwrap();
        db.store_entries(0, &entries).unwrap();
        for _ in 0..14 {
            db.integrate(50).unwrap();
        }
        drop(db);
        remove_index(
            &*disk,
            &DataFiles::new(Arc::clone(&files) as Arc<dyn Files>),
            &ENTRY_KEYS,
        )
        .unwrap();
        assert!(
            files
                .list()
                .unwrap()
                .iter()
                .all(|name| !name.starts_with("entry-index-"))
        );
        mark_layout(&*disk, LAYOUT_BEFORE_ENTRY_INDEX).unwrap();
        (disk, files, entries)
    }

    /// Every entry of `entries` (all integrated) is found by its key and its leaf hash.
    fn check_both_indexes(db: &CtDatabase, entries: &[LocalEntry]) {
        assert_eq!(db.tree_size(), entries.len() as u64);
        for n in 0..600 {
            assert_eq!(db.index_of_entry_key(&key_of(n)).unwrap(), Some(n));
        }
        assert_eq!(db.index_of_entry_key(&key_of(600)).unwrap(), None);
        for (sequence, entry) in entries.iter().enumerate() {
            assert_eq!(
                db.index_of_leaf(&leaf_hash(&entry.leaf_input)).unwrap(),
                Some(sequence as u64)
            );
        }
    }

    #[test]
    fn a_store_without_the_entry_index_builds_it_at_open_resuming_after_a_crash() {
        let shape = small(usize::MAX);
        // Rounds of 37 entries: 18 runs, a 19th round of 34 records left in memory, the mark.
        let mut completed = false;
        for budget in 0..=20usize {
            let (disk, files, entries) = store_before_the_entry_index(shape);
            let stopping = Stopping {
                disk: Arc::clone(&disk),
                budget: Mutex::new(budget),
            };
            completed = CtDatabase::open_shaped(
                Arc::new(stopping),
                Arc::clone(&files) as Arc<dyn Files>,
                CtStoreConfig::default(),
                IndexShapes::both(shape),
            )
            .is_ok();
            crash(&disk, &files);
            // What the stopped open committed stays: each round's run, and the mark last.
            let rounds = budget.min(18) as u64;
            let layout = disk.get(LAYOUT_KEY).unwrap();
            if completed {
                assert_eq!(layout.as_deref(), Some(LAYOUT));
            } else {
                assert_eq!(layout.as_deref(), Some(LAYOUT_BEFORE_ENTRY_INDEX));
                assert_eq!(indexed_upto(&*disk, &ENTRY_KEYS).unwrap(), 37 * rounds);
            }
            // The next open goes on from there: the rounds left and the mark.
            let stopping = Arc::new(Stopping {
                disk: Arc::clone(&disk),
                budget: Mutex::new(1_000),
            });
            let db = CtDatabase::open_shaped(
                Arc::clone(&stopping) as Arc<dyn Disk>,
                Arc::clone(&files) as Arc<dyn Files>,
                CtStoreConfig::default(),
                IndexShapes::both(shape),
            )
            .unwrap();
            let writes = 1_000 - *lock(&stopping.budget);
            assert_eq!(
                writes,
                if completed { 0 } else { 20 - rounds as usize },
                "stopped after {budget} writes"
            );
            assert_eq!(disk.get(LAYOUT_KEY).unwrap().as_deref(), Some(LAYOUT));
            check_both_indexes(&db, &entries);
            if completed {
                assert_eq!(budget, 20);
                break;
            }
        }
        assert!(completed);
    }

    #[test]
    fn an_entry_index_build_cut_short_in_its_files_is_finished() {
        let shape = small(usize::MAX);
        let mut completed = false;
        // The build stopped after every few file changes, until one completes.
        for budget in (0..1_000).step_by(7) {
            let (disk, files, entries) = store_before_the_entry_index(shape);
            files.fail_after(budget);
            completed = open_small(&disk, &files, shape).is_ok();
            crash(&disk, &files);
            let db = open_small(&disk, &files, shape).unwrap();
            assert_eq!(disk.get(LAYOUT_KEY).unwrap().as_deref(), Some(LAYOUT));
            check_both_indexes(&db, &entries);
            if completed {
                break;
            }
        }
        assert!(completed, "the build takes fewer than 1,000 file changes");
    }

    #[test]
    fn a_tampered_tile_on_the_edge_is_caught_on_open() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        db.store_entries(0, &(0..600).map(entry).collect::<Vec<_>>())
            .unwrap();
        db.integrate(600).unwrap();
        drop(db);
        for (id, offset) in [
            (TileId { level: 0, index: 2 }, 3),
            (TileId { level: 1, index: 0 }, 1),
        ] {
            let original = disk.get(&tile_key(id)).unwrap().unwrap();
            let mut tampered = original.clone();
            tampered[offset * 32] ^= 1;
            let mut batch = WriteBatch::new();
            batch.put(tile_key(id), tampered);
            disk.write(batch).unwrap();
            assert!(
                matches!(open(&disk, &files), Err(CtDbError::Corrupt(_))),
                "{id:?}"
            );
            let mut batch = WriteBatch::new();
            batch.put(tile_key(id), original);
            disk.write(batch).unwrap();
        }
        open(&disk, &files).unwrap();
    }

    #[test]
    fn the_last_sth_is_kept() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = open(&disk, &files).unwrap();
        let sth = SignedTreeHead {
            tree_size: 0,
            timestamp_ms: 5_000,
            root_hash: merkle::empty_root(),
            signature: vec![1],
        };
        db.save_sth(&sth).unwrap();
        crash(&disk, &files);
        let reopened = open(&disk, &files).unwrap();
        assert_eq!(reopened.last_sth(), Some(sth));
        assert_eq!(reopened.newest_sct_ms(), 5_000);
    }

    #[test]
    fn the_tile_cache_stays_within_its_bound() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let db = CtDatabase::open_with(
            Arc::clone(&disk) as Arc<dyn Disk>,
            Arc::clone(&files) as Arc<dyn Files>,
            CtStoreConfig {
                tile_cache_tiles: 3,
            },
        )
        .unwrap();
        let entries: Vec<LocalEntry> = (0..2_600).map(entry).collect();
        db.store_entries(0, &entries).unwrap();
        db.integrate(2_600).unwrap();
        let expected = tree_of(&entries);
        for index in (0..2_600).step_by(97) {
            assert_eq!(
                db.inclusion_proof(index, 2_600).unwrap(),
                expected.inclusion_proof(index, 2_600).unwrap()
            );
            assert!(db.cached_tiles() <= 3);
        }
    }

    /// Writes a database in the layout before tiles, as that code did.
    fn write_old_layout(disk: &SimDisk, entries: &[LocalEntry], integrated: usize) {
        let [old_entries, old_leaves, old_nodes] = OLD_PREFIXES;
        let mut batch = WriteBatch::new();
        for (sequence, entry) in entries.iter().enumerate() {
            batch.put(numbered_key(old_entries, sequence as u64), encode(entry));
        }
        let mut tree = MerkleTree::new();
        for (sequence, entry) in entries[..integrated].iter().enumerate() {
            let hash = leaf_hash(&entry.leaf_input);
            batch.put(
                [old_leaves, &hash[..]].concat(),
                (sequence as u64).to_be_bytes().to_vec(),
            );
            for node in tree.push(hash) {
                let mut key = old_nodes.to_vec();
                key.push(u8::try_from(node.level).unwrap());
                key.extend_from_slice(&node.index.to_be_bytes());
                batch.put(key, node.hash.to_vec());
            }
        }
        batch.put(
            STH_KEY,
            encode(&SignedTreeHead {
                tree_size: integrated as u64,
                timestamp_ms: 9_000,
                root_hash: tree.root(),
                signature: vec![1],
            }),
        );
        disk.write(batch).unwrap();
        disk.flush().unwrap();
    }

    #[test]
    fn the_old_layout_is_converted_at_open() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let entries: Vec<LocalEntry> = (0..700).map(entry).collect();
        write_old_layout(&disk, &entries, 650);
        let db = open(&disk, &files).unwrap();
        assert_eq!(db.contiguous_size(), 700);
        assert_eq!(db.tree_size(), 650);
        assert_eq!(db.root_at(650).unwrap(), tree_of(&entries[..650]).root());
        assert_eq!(db.entries(0, 700).unwrap(), entries);
        assert_eq!(db.last_sth().unwrap().tree_size, 650);
        assert_eq!(
            db.index_of_leaf(&leaf_hash(&entries[600].leaf_input))
                .unwrap(),
            Some(600)
        );
        for prefix in OLD_PREFIXES {
            assert_eq!(last_under(&*disk, prefix).unwrap(), None);
        }
        drop(db);
        assert_eq!(open(&disk, &files).unwrap().tree_size(), 650);
    }

    #[test]
    fn a_store_whose_index_runs_have_no_filters_gets_them_at_open() {
        let shape = Shape {
            fresh_records_max: 37,
            merge_fan_in: 3,
            merge_work_per_record: 2,
            block_records: 4,
            filter_bytes_max: usize::MAX,
        };
        let open = |disk: &Arc<SimDisk>, files: &Arc<SimFiles>| {
            CtDatabase::open_shaped(
                Arc::clone(disk) as Arc<dyn Disk>,
                Arc::clone(files) as Arc<dyn Files>,
                CtStoreConfig::default(),
                IndexShapes::both(shape),
            )
        };
        let entries: Vec<LocalEntry> = (0..700).map(|n| logged(n % 600, 1_000 + n)).collect();
        let absent = leaf_hash(&entry(5_000).leaf_input);
        let mut completed = false;
        // The upgrade (filters, then the entry-key index) stopped after every number of file
        // changes, until one completes.
        for budget in 0..1_000 {
            let disk = Arc::new(SimDisk::new());
            let files = Arc::new(SimFiles::new());
            let db = open(&disk, &files).unwrap();
            db.store_entries(0, &entries).unwrap();
            for _ in 0..14 {
                db.integrate(50).unwrap();
            }
            drop(db);
            // The store as the code before filters left it: runs that end with their blocks, no
            // entry-key index, and the layout that says so.
            let data = DataFiles::new(Arc::clone(&files) as Arc<dyn Files>);
            crate::ct_hash_index::remove_filters(&*disk, &data, &LEAF_HASHES).unwrap();
            remove_index(&*disk, &data, &ENTRY_KEYS).unwrap();
            let mut batch = WriteBatch::new();
            batch.put(LAYOUT_KEY, LAYOUT_BEFORE_FILTERS);
            disk.write(batch).unwrap();
            disk.flush().unwrap();

            files.fail_after(budget);
            completed = open(&disk, &files).is_ok();
            crash(&disk, &files);
            let db = open(&disk, &files).unwrap();
            assert_eq!(disk.get(LAYOUT_KEY).unwrap().as_deref(), Some(LAYOUT));
            assert_eq!(db.tree_size(), 700);
            for (sequence, entry) in entries.iter().enumerate() {
                assert_eq!(
                    db.index_of_leaf(&leaf_hash(&entry.leaf_input)).unwrap(),
                    Some(sequence as u64),
                    "stopped after {budget} changes"
                );
            }
            assert_eq!(db.index_of_leaf(&absent).unwrap(), None);
            // Its runs' filters are in memory now: more than the fences alone.
            let fence_bytes = 700 / 4 * 32;
            assert!(db.leaf_index_memory_bytes() > fence_bytes);
            for n in 0..600 {
                assert_eq!(db.index_of_entry_key(&key_of(n)).unwrap(), Some(n));
            }
            if completed {
                break;
            }
        }
        assert!(completed, "the upgrade takes fewer than 1,000 file changes");
    }

    /// A disk that stops taking writes after `budget` of them, as a process that crashed there.
    struct Stopping {
        disk: Arc<SimDisk>,
        budget: Mutex<usize>,
    }

    impl Disk for Stopping {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
            self.disk.get(key)
        }

        fn scan(
            &self,
            from: Bound<&[u8]>,
            to: Bound<&[u8]>,
            reverse: bool,
            limit: usize,
        ) -> Result<crate::Pairs, DiskError> {
            self.disk.scan(from, to, reverse, limit)
        }

        fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
            let mut budget = lock(&self.budget);
            if *budget == 0 {
                return Err(DiskError("stopped".into()));
            }
            *budget -= 1;
            self.disk.write(batch)
        }

        fn flush(&self) -> Result<(), DiskError> {
            self.disk.flush()
        }
    }

    #[test]
    fn a_conversion_cut_short_by_a_crash_is_done_again() {
        let entries: Vec<LocalEntry> = (0..600).map(entry).collect();
        let expected = tree_of(&entries).root();
        let mut completed = false;
        for budget in 0..40 {
            let disk = Arc::new(SimDisk::new());
            let files = Arc::new(SimFiles::new());
            write_old_layout(&disk, &entries, 600);
            let stopping = Stopping {
                disk: Arc::clone(&disk),
                budget: Mutex::new(budget),
            };
            completed =
                CtDatabase::open(Arc::new(stopping), Arc::clone(&files) as Arc<dyn Files>).is_ok();
            crash(&disk, &files);
            let db = open(&disk, &files).unwrap();
            assert_eq!(
                db.root_at(600).unwrap(),
                expected,
                "stopped after {budget} writes"
            );
            assert_eq!(db.entries(0, 600).unwrap(), entries);
            for prefix in OLD_PREFIXES {
                assert_eq!(last_under(&*disk, prefix).unwrap(), None);
            }
            if completed {
                break;
            }
        }
        assert!(completed, "the conversion takes fewer than 40 writes");
    }

    #[test]
    fn a_converted_tree_that_misses_the_last_sth_is_refused() {
        let disk = Arc::new(SimDisk::new());
        let files = Arc::new(SimFiles::new());
        let entries: Vec<LocalEntry> = (0..40).map(entry).collect();
        write_old_layout(&disk, &entries, 40);
        let mut batch = WriteBatch::new();
        batch.put(numbered_key(OLD_PREFIXES[0], 7), encode(&entry(1_000)));
        disk.write(batch).unwrap();
        assert!(matches!(open(&disk, &files), Err(CtDbError::Corrupt(_))));
    }

    proptest! {
        /// Whatever the batches, crashes and restarts, what was acknowledged is there and the
        /// tree answers as the whole tree in memory does.
        #[test]
        fn acknowledged_entries_and_tree_survive_crashes(
            steps in proptest::collection::vec((0u8..5, 1usize..400), 1..25),
            block_records in 1usize..6,
            fan_in in 2usize..4,
            filter_bytes_max in prop_oneof![Just(0usize), 0usize..400, Just(usize::MAX)],
        ) {
            let disk = Arc::new(SimDisk::new());
            let files = Arc::new(SimFiles::new());
            // A small leaf index, so that its runs, merges and garbage happen here.
            let shape = Shape {
                fresh_records_max: 37,
                merge_fan_in: fan_in,
                merge_work_per_record: 2,
                block_records,
                // None, some or all of the runs' filters in memory.
                filter_bytes_max,
            };
            let open = |disk: &Arc<SimDisk>, files: &Arc<SimFiles>| {
                CtDatabase::open_shaped(
                    Arc::clone(disk) as Arc<dyn Disk>,
                    Arc::clone(files) as Arc<dyn Files>,
                    CtStoreConfig::default(),
                    IndexShapes::both(shape),
                )
            };
            let mut db = open(&disk, &files).unwrap();
            // Entries repeat every 1,000; one in seven does not decode (no entry key).
            let all: Vec<LocalEntry> = (0..6_000)
                .map(|n| match n % 1_000 {
                    n if n % 7 == 3 => entry(n),
                    n => logged(n, n),
                })
                .collect();
            for (kind, amount) in steps {
                match kind {
                    0 | 1 => {
                        let first = at(db.contiguous_size());
                        let end = (first + amount).min(all.len());
                        db.store_entries(first as u64, &all[first..end]).unwrap();
                    }
                    2 => {
                        db.integrate(amount).unwrap();
                    }
                    3 => {
                        let (stored, integrated) = (db.contiguous_size(), db.tree_size());
                        drop(db);
                        crash(&disk, &files);
                        db = open(&disk, &files).unwrap();
                        prop_assert_eq!(db.contiguous_size(), stored);
                        prop_assert_eq!(db.tree_size(), integrated);
                    }
                    _ => {
                        // The machine stops part way through a round's file writes: what was
                        // acknowledged stays, the round that failed may or may not be there.
                        files.fail_after(amount as u64 % 9);
                        let first = at(db.contiguous_size());
                        let end = (first + amount).min(all.len());
                        let stored = db
                            .store_entries(first as u64, &all[first..end])
                            .map_or(first as u64, |()| end as u64);
                        let integrated = db.integrate(amount).unwrap_or(db.tree_size());
                        drop(db);
                        crash(&disk, &files);
                        db = open(&disk, &files).unwrap();
                        prop_assert!(db.contiguous_size() >= stored);
                        prop_assert!(db.tree_size() >= integrated);
                    }
                }
                let size = db.tree_size();
                let expected = tree_of(&all[..at(size)]);
                prop_assert_eq!(db.root_at(size).unwrap(), expected.root());
                if size > 0 {
                    let index = amount as u64 % size;
                    prop_assert_eq!(
                        db.inclusion_proof(index, size).unwrap(),
                        expected.inclusion_proof(index, size).unwrap()
                    );
                }
                // Every integrated leaf is found at its first number (entries repeat every
                // 1,000), and nothing past the tree is.
                for sequence in 0..size.min(1_300) {
                    prop_assert_eq!(
                        db.index_of_leaf(&leaf_hash(&all[at(sequence)].leaf_input)).unwrap(),
                        Some(sequence % 1_000)
                    );
                }
                if size < 1_000 {
                    prop_assert_eq!(
                        db.index_of_leaf(&leaf_hash(&all[at(size)].leaf_input)).unwrap(),
                        None
                    );
                }
                // So is every entry key of an integrated leaf that decodes, and no other.
                for n in (0..1_000).step_by(5) {
                    let expected = (n < size && n % 7 != 3).then_some(n);
                    prop_assert_eq!(db.index_of_entry_key(&key_of(n)).unwrap(), expected);
                }
                let stored = at(db.contiguous_size());
                prop_assert_eq!(db.entries(0, stored + 5).unwrap(), all[..stored].to_vec());
            }
        }
    }
}
