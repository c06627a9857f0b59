//! A node's local CT database: the sequenced entries it holds and its Merkle tree.
//!
//! Seed 004 keeps entries in the replicated store only until the serving STH covers them; from
//! then on they live in every node's local database, which serves get-entries and proofs. Here
//! that database shares the node's [`Disk`] under the `ct/` prefix.
//!
//! Layout: `ct/entry/<seq>` → the entry; `ct/leaf/<leaf hash>` → its first sequence number (for
//! get-proof-by-hash); `ct/node/<level><index>` → every complete-subtree hash, written once (so
//! a restart loads the tree instead of rehashing it); `ct/meta/sth` → the node's last signed tree
//! head. Numbers are big-endian so keys sort by them.
//!
//! Invariants: entries `0..contiguous_size` are all stored, nothing above is; the tree covers
//! `0..tree_size` with `tree_size <= contiguous_size`, and its leaf hashes are recomputed from
//! the stored entries when they are integrated — never taken from a peer or the replicated state
//! (a single corrupted leaf hash has ended production logs). Every change is flushed before the
//! call returns, so what the node reports holding survives a crash.

use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use certus_core::ct::SignedTreeHead;
use certus_ct::Hash;
use certus_ct::merkle::{MerkleTree, leaf_hash};
use serde::{Deserialize, Serialize};

use crate::disk::{Disk, DiskError, WriteBatch};

const ENTRY_PREFIX: &[u8] = b"ct/entry/";
const LEAF_PREFIX: &[u8] = b"ct/leaf/";
const NODE_PREFIX: &[u8] = b"ct/node/";
const STH_KEY: &[u8] = b"ct/meta/sth";
/// Entries read per disk scan when integrating or loading.
const SCAN_BATCH: usize = 4096;

/// One sequenced entry as a node stores and serves it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalEntry {
    /// The MerkleTreeLeaf encoding (`leaf_input` of get-entries).
    pub leaf_input: Vec<u8>,
    /// The `extra_data` of get-entries.
    pub extra_data: Vec<u8>,
    /// The TLS-encoded SCT the submitter got (returned again to duplicates).
    pub sct: Vec<u8>,
    /// The SCT's timestamp.
    pub sct_timestamp_ms: u64,
}

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
    /// Stored data contradicts itself.
    #[error("local CT database is corrupt: {0}")]
    Corrupt(String),
}

#[derive(Debug)]
struct Inner {
    tree: MerkleTree,
    contiguous_size: u64,
    newest_sct_ms: u64,
    last_sth: Option<SignedTreeHead>,
}

/// The local CT database of one node.
pub struct CtDatabase {
    disk: Arc<dyn Disk>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for CtDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("CtDatabase")
            .field("contiguous_size", &inner.contiguous_size)
            .field("tree_size", &inner.tree.size())
            .finish_non_exhaustive()
    }
}

impl CtDatabase {
    /// Opens the database on `disk`: loads the stored tree and finds the contiguous run.
    pub fn open(disk: Arc<dyn Disk>) -> Result<CtDatabase, CtDbError> {
        let tree = load_tree(&*disk)?;
        let contiguous_size = find_contiguous_size(&*disk)?;
        if tree.size() > contiguous_size {
            return Err(CtDbError::Corrupt(format!(
                "the tree has {} leaves but only {contiguous_size} entries are stored",
                tree.size()
            )));
        }
        // Integrated entries' SCT timestamps were folded into the last STH; a lower bound is
        // enough here, so start from its timestamp.
        let last_sth: Option<SignedTreeHead> = match disk.get(STH_KEY)? {
            Some(bytes) => Some(decode(&bytes, "the last STH")?),
            None => None,
        };
        let newest_sct_ms = last_sth.as_ref().map_or(0, |sth| sth.timestamp_ms);
        Ok(CtDatabase {
            disk,
            inner: Mutex::new(Inner {
                tree,
                contiguous_size,
                newest_sct_ms,
                last_sth,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many leading entries are stored.
    pub fn contiguous_size(&self) -> u64 {
        self.lock().contiguous_size
    }

    /// How many entries the Merkle tree covers.
    pub fn tree_size(&self) -> u64 {
        self.lock().tree.size()
    }

    /// The newest SCT timestamp among integrated entries (at least the last STH's timestamp
    /// after a restart).
    pub fn newest_sct_ms(&self) -> u64 {
        self.lock().newest_sct_ms
    }

    /// The last STH this node signed over its tree.
    pub fn last_sth(&self) -> Option<SignedTreeHead> {
        self.lock().last_sth.clone()
    }

    /// Stores entries `first..first + entries.len()`; `first` must be the contiguous size (a
    /// batch that only repeats stored entries is accepted and changes nothing). Flushed on
    /// return.
    pub fn store_entries(&self, first: u64, entries: &[LocalEntry]) -> Result<(), CtDbError> {
        let mut inner = self.lock();
        let contiguous_size = inner.contiguous_size;
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
        for (offset, entry) in entries.iter().enumerate().skip(skip) {
            let sequence = first + offset as u64;
            batch.put(numbered_key(ENTRY_PREFIX, sequence), encode(entry));
        }
        self.disk.write(batch)?;
        self.disk.flush()?;
        inner.contiguous_size = end;
        Ok(())
    }

    /// Integrates up to `max_entries` stored entries into the tree, hashing each leaf from its
    /// stored `leaf_input`, and persists the new nodes. Returns the new tree size.
    pub fn integrate(&self, max_entries: usize) -> Result<u64, CtDbError> {
        let mut inner = self.lock();
        let start = inner.tree.size();
        let end = inner
            .contiguous_size
            .min(start.saturating_add(max_entries as u64));
        let mut batch = WriteBatch::new();
        let mut next = start;
        while next < end {
            let limit = usize::try_from(end - next)
                .unwrap_or(usize::MAX)
                .min(SCAN_BATCH);
            let entries = self.scan_entries(next, limit)?;
            if entries.is_empty() {
                return Err(CtDbError::Corrupt(format!("entry {next} is missing")));
            }
            for (sequence, entry) in entries {
                if sequence != next {
                    return Err(CtDbError::Corrupt(format!(
                        "entry {next} is missing (found {sequence})"
                    )));
                }
                let hash = leaf_hash(&entry.leaf_input);
                inner.newest_sct_ms = inner.newest_sct_ms.max(entry.sct_timestamp_ms);
                if self.disk.get(&leaf_key(&hash))?.is_none() {
                    batch.put(leaf_key(&hash), sequence.to_be_bytes().to_vec());
                }
                for node in inner.tree.push(hash) {
                    batch.put(node_key(node.level, node.index), node.hash.to_vec());
                }
                next += 1;
            }
        }
        if !batch.is_empty() {
            self.disk.write(batch)?;
            self.disk.flush()?;
        }
        Ok(inner.tree.size())
    }

    /// Records the STH this node just signed (flushed), so its next one follows it even after
    /// a restart.
    pub fn save_sth(&self, sth: &SignedTreeHead) -> Result<(), CtDbError> {
        let mut inner = self.lock();
        let mut batch = WriteBatch::new();
        batch.put(STH_KEY.to_vec(), encode(sth));
        self.disk.write(batch)?;
        self.disk.flush()?;
        inner.last_sth = Some(sth.clone());
        Ok(())
    }

    /// The stored entry `sequence`.
    pub fn entry(&self, sequence: u64) -> Result<Option<LocalEntry>, CtDbError> {
        match self.disk.get(&numbered_key(ENTRY_PREFIX, sequence))? {
            Some(bytes) => Ok(Some(decode(&bytes, "an entry")?)),
            None => Ok(None),
        }
    }

    /// Stored entries from `start`, at most `limit`, in order (stops at the first gap).
    pub fn entries(&self, start: u64, limit: usize) -> Result<Vec<LocalEntry>, CtDbError> {
        Ok(self
            .scan_entries(start, limit)?
            .into_iter()
            .enumerate()
            .take_while(|(offset, (sequence, _))| *sequence == start + *offset as u64)
            .map(|(_, (_, entry))| entry)
            .collect())
    }

    /// The first sequence number whose leaf hash is `hash`, if integrated.
    pub fn index_of_leaf(&self, hash: &Hash) -> Result<Option<u64>, CtDbError> {
        match self.disk.get(&leaf_key(hash))? {
            Some(bytes) => {
                let bytes: [u8; 8] = bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| CtDbError::Corrupt("a leaf index value is not 8 bytes".into()))?;
                Ok(Some(u64::from_be_bytes(bytes)))
            }
            None => Ok(None),
        }
    }

    /// Runs `read` on the tree (roots and proofs at any size up to [`Self::tree_size`]).
    pub fn with_tree<T>(&self, read: impl FnOnce(&MerkleTree) -> T) -> T {
        read(&self.lock().tree)
    }

    fn scan_entries(&self, start: u64, limit: usize) -> Result<Vec<(u64, LocalEntry)>, CtDbError> {
        let from = numbered_key(ENTRY_PREFIX, start);
        let to = prefix_end(ENTRY_PREFIX);
        self.disk
            .scan(
                Bound::Included(from.as_slice()),
                Bound::Excluded(to.as_slice()),
                false,
                limit,
            )?
            .into_iter()
            .map(|(key, value)| Ok((number_of(&key, ENTRY_PREFIX)?, decode(&value, "an entry")?)))
            .collect()
    }
}

fn load_tree(disk: &dyn Disk) -> Result<MerkleTree, CtDbError> {
    let mut levels: Vec<Vec<Hash>> = Vec::new();
    let end = prefix_end(NODE_PREFIX);
    let mut from = NODE_PREFIX.to_vec();
    let mut bound = Bound::Included(from.as_slice());
    loop {
        let pairs = disk.scan(bound, Bound::Excluded(end.as_slice()), false, SCAN_BATCH)?;
        let Some((last, _)) = pairs.last() else { break };
        let last = last.clone();
        for (key, value) in pairs {
            let rest = &key[NODE_PREFIX.len()..];
            let (level, index) = match rest {
                [level, index @ ..] if index.len() == 8 => (
                    usize::from(*level),
                    u64::from_be_bytes(index.try_into().expect("8 bytes")),
                ),
                _ => return Err(CtDbError::Corrupt("a tree node key is malformed".into())),
            };
            let hash: Hash = value
                .as_slice()
                .try_into()
                .map_err(|_| CtDbError::Corrupt("a tree node is not 32 bytes".into()))?;
            if levels.len() <= level {
                levels.resize_with(level + 1, Vec::new);
            }
            if levels[level].len() as u64 != index {
                return Err(CtDbError::Corrupt(format!(
                    "tree level {level} misses node {}",
                    levels[level].len()
                )));
            }
            levels[level].push(hash);
        }
        from = last;
        bound = Bound::Excluded(from.as_slice());
    }
    let tree =
        MerkleTree::from_levels(levels).map_err(|error| CtDbError::Corrupt(error.to_string()))?;
    // The top levels are few hashes: recheck them against the level below so a torn or
    // corrupted store is caught at start, not when a proof comes out wrong.
    for level in (1..tree.levels().len()).rev().take(8) {
        tree.verify_level(level)
            .map_err(|error| CtDbError::Corrupt(error.to_string()))?;
    }
    Ok(tree)
}

fn find_contiguous_size(disk: &dyn Disk) -> Result<u64, CtDbError> {
    let from = ENTRY_PREFIX.to_vec();
    let to = prefix_end(ENTRY_PREFIX);
    let last = disk.scan(
        Bound::Included(from.as_slice()),
        Bound::Excluded(to.as_slice()),
        true,
        1,
    )?;
    // Entries are only ever written as extensions of the contiguous run, in flushed batches,
    // so the highest number stored is the run's end.
    match last.first() {
        Some((key, _)) => Ok(number_of(key, ENTRY_PREFIX)? + 1),
        None => Ok(0),
    }
}

fn numbered_key(prefix: &[u8], number: u64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(&number.to_be_bytes());
    key
}

fn node_key(level: usize, index: u64) -> Vec<u8> {
    let mut key = NODE_PREFIX.to_vec();
    key.push(u8::try_from(level).expect("a tree has fewer than 256 levels"));
    key.extend_from_slice(&index.to_be_bytes());
    key
}

fn leaf_key(hash: &Hash) -> Vec<u8> {
    let mut key = LEAF_PREFIX.to_vec();
    key.extend_from_slice(hash);
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
    use super::*;
    use crate::SimDisk;

    fn entry(n: u64) -> LocalEntry {
        LocalEntry {
            leaf_input: n.to_be_bytes().to_vec(),
            extra_data: vec![1, 2],
            sct: vec![3],
            sct_timestamp_ms: 1_000 + n,
        }
    }

    #[test]
    fn entries_integrate_into_the_tree_and_survive_a_crash() {
        let disk = Arc::new(SimDisk::new());
        let db = CtDatabase::open(Arc::clone(&disk) as Arc<dyn Disk>).unwrap();
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
        let expected =
            MerkleTree::from_leaf_hashes(entries.iter().map(|e| leaf_hash(&e.leaf_input)));
        assert_eq!(db.with_tree(MerkleTree::root), expected.root());
        assert_eq!(
            db.index_of_leaf(&leaf_hash(&entries[3].leaf_input))
                .unwrap(),
            Some(3)
        );
        assert_eq!(db.entries(8, 5).unwrap(), entries[8..10].to_vec());

        // Everything was flushed: a crash loses nothing, and the tree loads without rehashing.
        disk.crash();
        let reopened = CtDatabase::open(Arc::clone(&disk) as Arc<dyn Disk>).unwrap();
        assert_eq!(reopened.contiguous_size(), 10);
        assert_eq!(reopened.tree_size(), 10);
        assert_eq!(reopened.with_tree(MerkleTree::root), expected.root());
        assert_eq!(reopened.entry(9).unwrap(), Some(entries[9].clone()));
    }

    #[test]
    fn a_tampered_tree_node_is_caught_on_open() {
        let disk = Arc::new(SimDisk::new());
        let db = CtDatabase::open(Arc::clone(&disk) as Arc<dyn Disk>).unwrap();
        db.store_entries(0, &(0..8).map(entry).collect::<Vec<_>>())
            .unwrap();
        db.integrate(8).unwrap();
        let mut batch = WriteBatch::new();
        batch.put(node_key(1, 2), vec![7u8; 32]);
        disk.write(batch).unwrap();
        assert!(matches!(
            CtDatabase::open(Arc::clone(&disk) as Arc<dyn Disk>),
            Err(CtDbError::Corrupt(_))
        ));
    }

    #[test]
    fn the_last_sth_is_kept() {
        let disk = Arc::new(SimDisk::new());
        let db = CtDatabase::open(Arc::clone(&disk) as Arc<dyn Disk>).unwrap();
        let sth = SignedTreeHead {
            tree_size: 0,
            timestamp_ms: 5_000,
            root_hash: certus_ct::merkle::empty_root(),
            signature: vec![1],
        };
        db.save_sth(&sth).unwrap();
        disk.crash();
        let reopened = CtDatabase::open(disk as Arc<dyn Disk>).unwrap();
        assert_eq!(reopened.last_sth(), Some(sth));
        assert_eq!(reopened.newest_sct_ms(), 5_000);
    }
}
