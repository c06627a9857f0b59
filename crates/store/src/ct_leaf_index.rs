//! The CT log's leaf-hash index (get-proof-by-hash): leaf hash → first sequence number, on disk;
//! in memory only the fences (the first hash of every block) and the records not yet in a run.
//!
//! A log-structured merge index, because a B-tree insert per leaf at a random place is what a
//! log of hundreds of millions of entries cannot afford (in sled it copies the leaf node each
//! time, and its pages stay cached): new records collect in memory, are written as a sorted
//! *run* of 256-record blocks when [`FRESH_RECORDS_MAX`] of them have collected, and
//! [`MERGE_FAN_IN`] runs of one size class are merged into one of the next, a bounded step at a
//! time ([`MERGE_WORK_PER_RECORD`] records merged per record indexed), so no integration round
//! pauses for a large merge. A lookup reads at most two blocks per run, oldest run first, until
//! it finds the hash; there are at most [`MERGE_FAN_IN`] runs per size class, and six classes
//! hold a billion entries.
//!
//! The index is derived data: every record is a leaf hash of the tree's level-0 tiles. The
//! records not yet in a run are not written at all; at open they are read back from the tiles.
//! A run is a file of blocks (`index-<run>`: records of a 32-byte hash and an 8-byte sequence
//! number, sorted), written and synced before the metadata naming it goes into the caller's
//! batch, with the tree size, so a crash never separates them: `ct/index/meta` names the runs
//! (oldest first, covering leaves `0..indexed_upto`), `ct/index/fence/<run><chunk>` holds the
//! first hash of each block, 1,024 blocks per chunk. A run file no metadata names (a merge's
//! output when the node stopped, runs merged away) is removed: the round after, or at open.

use std::collections::VecDeque;
use std::sync::Arc;

use certus_ct::Hash;
use serde::{Deserialize, Serialize};

use crate::ct_db::CtDbError;
use crate::ct_files::DataFiles;
use crate::disk::{Disk, WriteBatch};
use crate::files::LogFile;

const META_KEY: &[u8] = b"ct/index/meta";
const FENCE_PREFIX: &[u8] = b"ct/index/fence/";
const RUN_FILE_PREFIX: &str = "index-";

/// Records per block (10 KiB): one block read answers a lookup within a run.
const BLOCK_RECORDS: usize = 256;
const RECORD_BYTES: usize = 40;
/// Fences (first hashes of blocks) per stored chunk.
const FENCES_PER_CHUNK: usize = 1024;
/// Records kept in memory before they are written as a run: 65,536 (a few MiB). Also what a
/// restart reads back from the tiles, at most.
pub(crate) const FRESH_RECORDS_MAX: usize = 1 << 16;
/// Runs of one size class merged into one of the next.
pub(crate) const MERGE_FAN_IN: usize = 8;
/// Records a merge advances per record indexed: with fan-in 8, merges keep up (each record is
/// rewritten once per class it climbs, at most 8 classes below 2^40 records) with room to spare.
pub(crate) const MERGE_WORK_PER_RECORD: usize = 4;

/// The index's sizes: production uses [`Shape::default`]; tests make them small so that runs
/// and merges happen within a few hundred leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) fresh_records_max: usize,
    pub(crate) merge_fan_in: usize,
    pub(crate) merge_work_per_record: usize,
    pub(crate) block_records: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            fresh_records_max: FRESH_RECORDS_MAX,
            merge_fan_in: MERGE_FAN_IN,
            merge_work_per_record: MERGE_WORK_PER_RECORD,
            block_records: BLOCK_RECORDS,
        }
    }
}

/// A run as the meta records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct RunMeta {
    id: u64,
    records: u64,
    /// Blocks written (each of at most the shape's `block_records` records).
    blocks: u64,
    /// 0 for a run written from memory, k + 1 for one merged from runs of class k.
    class: u8,
}

impl RunMeta {
    fn blocks(&self) -> u64 {
        self.blocks
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    /// Leaves `0..indexed_upto` are in the runs.
    indexed_upto: u64,
    runs: Vec<RunMeta>,
    next_id: u64,
}

/// A run as lookups use it: its meta and the first hash of each block.
#[derive(Debug)]
struct Run {
    meta: RunMeta,
    fences: Vec<Hash>,
    file: Arc<dyn LogFile>,
    block_records: usize,
}

/// What lookups read: the runs and the records not yet in one (sorted chunks, one per round).
#[derive(Clone, Debug, Default)]
pub(crate) struct IndexView {
    runs: Vec<Arc<Run>>,
    fresh: Vec<Arc<Vec<(Hash, u64)>>>,
}

/// A merge under way: the last `MERGE_FAN_IN` runs into one, a step per round.
#[derive(Debug)]
struct Merge {
    sources: Vec<RunMeta>,
    cursors: Vec<Cursor>,
    output: RunMeta,
    file: Arc<dyn LogFile>,
    block: Vec<(Hash, u64)>,
    blocks_written: u64,
    fences: Vec<Hash>,
}

#[derive(Debug)]
struct Cursor {
    run: Arc<Run>,
    next_block: u64,
    records: VecDeque<(Hash, u64)>,
}

/// The writer's side of the index.
#[derive(Debug)]
pub(crate) struct LeafIndex {
    shape: Shape,
    meta: Meta,
    view: IndexView,
    fresh_records: usize,
    merge: Option<Merge>,
    /// Run files merged away in the last round, removed in the next.
    retired: Vec<u64>,
}

impl LeafIndex {
    /// Loads the index of a tree of `tree_size` leaves; `leaf_hashes(from, to)` reads the
    /// tree's leaf hashes `from..to` (from the tiles) for the records not yet in a run.
    pub(crate) fn open(
        disk: &dyn Disk,
        files: &DataFiles,
        tree_size: u64,
        shape: Shape,
        leaf_hashes: impl Fn(u64, u64) -> Result<Vec<Hash>, CtDbError>,
    ) -> Result<LeafIndex, CtDbError> {
        let meta: Meta = match disk.get(META_KEY)? {
            Some(bytes) => postcard::from_bytes(&bytes)
                .map_err(|error| CtDbError::Corrupt(format!("the leaf index meta: {error}")))?,
            None => Meta::default(),
        };
        if meta.indexed_upto > tree_size {
            return Err(CtDbError::Corrupt(format!(
                "the leaf index covers {} leaves of a tree of {tree_size}",
                meta.indexed_upto
            )));
        }
        let mut runs = Vec::with_capacity(meta.runs.len());
        for run in &meta.runs {
            runs.push(Arc::new(Run {
                fences: read_fences(disk, run)?,
                meta: run.clone(),
                file: files.get(&run_file(run.id))?,
                block_records: shape.block_records,
            }));
        }
        for name in files.named(RUN_FILE_PREFIX)? {
            if !meta.runs.iter().any(|run| run_file(run.id) == name) {
                files.remove(&name)?;
            }
        }
        let mut fresh_records = Vec::new();
        let mut next = meta.indexed_upto;
        while next < tree_size {
            let end = tree_size.min(next + shape.fresh_records_max.max(1) as u64);
            let hashes = leaf_hashes(next, end)?;
            if hashes.len() as u64 != end - next {
                return Err(CtDbError::Corrupt(format!(
                    "leaf hashes {next}..{end} are missing"
                )));
            }
            fresh_records.extend(hashes.into_iter().zip(next..end));
            next = end;
        }
        let fresh_count = fresh_records.len();
        fresh_records.sort_unstable();
        let view = IndexView {
            runs,
            fresh: if fresh_records.is_empty() {
                Vec::new()
            } else {
                vec![Arc::new(fresh_records)]
            },
        };
        Ok(LeafIndex {
            shape,
            meta,
            view,
            fresh_records: fresh_count,
            merge: None,
            retired: Vec::new(),
        })
    }

    /// What lookups read now.
    pub(crate) fn view(&self) -> IndexView {
        self.view.clone()
    }

    /// Adds one round's records (leaf hash, sequence number) and puts into `batch` what the
    /// round writes: a run when enough records collected, a step of a merge, and the meta. The index changes in memory at once: if the batch is not written, reopen.
    pub(crate) fn add_round(
        &mut self,
        files: &DataFiles,
        batch: &mut WriteBatch,
        mut records: Vec<(Hash, u64)>,
    ) -> Result<(), CtDbError> {
        let added = records.len();
        if !records.is_empty() {
            records.sort_unstable();
            self.fresh_records += records.len();
            self.view.fresh.push(Arc::new(records));
        }
        // Runs merged away in the last round, whose swap is committed now; those a merge retires
        // in this round stay until the next one, for lookups that took the view before this
        // round published its own.
        for id in std::mem::take(&mut self.retired) {
            files.remove(&run_file(id))?;
        }
        self.merge_step(
            files,
            batch,
            added.saturating_mul(self.shape.merge_work_per_record),
        )?;
        if self.fresh_records >= self.shape.fresh_records_max {
            self.write_fresh_run(files, batch)?;
        }
        batch.put(
            META_KEY,
            postcard::to_stdvec(&self.meta).expect("plain data encodes"),
        );
        Ok(())
    }

    fn write_fresh_run(
        &mut self,
        files: &DataFiles,
        batch: &mut WriteBatch,
    ) -> Result<(), CtDbError> {
        let mut records: Vec<(Hash, u64)> = Vec::with_capacity(self.fresh_records);
        for chunk in self.view.fresh.drain(..) {
            records.extend_from_slice(&chunk);
        }
        records.sort_unstable();
        let per_block = self.shape.block_records;
        let run = RunMeta {
            id: self.meta.next_id,
            records: records.len() as u64,
            blocks: records.len().div_ceil(per_block) as u64,
            class: 0,
        };
        self.meta.next_id += 1;
        let fences: Vec<Hash> = records.chunks(per_block).map(|block| block[0].0).collect();
        let file = files.get(&run_file(run.id))?;
        file.set_len(0)?;
        file.write_at(0, &encode_block(&records))?;
        file.sync_data()?;
        put_fences(batch, run.id, &fences);
        self.meta.indexed_upto += records.len() as u64;
        self.meta.runs.push(run.clone());
        self.view.runs.push(Arc::new(Run {
            meta: run,
            fences,
            file,
            block_records: per_block,
        }));
        self.fresh_records = 0;
        Ok(())
    }

    /// Starts a merge if the last `MERGE_FAN_IN` runs share a class, and advances the one
    /// under way by up to `work` records.
    fn merge_step(
        &mut self,
        files: &DataFiles,
        batch: &mut WriteBatch,
        work: usize,
    ) -> Result<(), CtDbError> {
        let fan_in = self.shape.merge_fan_in;
        if self.merge.is_none() {
            let runs = &self.meta.runs;
            if runs.len() < fan_in {
                return Ok(());
            }
            let tail = &runs[runs.len() - fan_in..];
            if tail.iter().any(|run| run.class != tail[0].class) {
                return Ok(());
            }
            let output = RunMeta {
                id: self.meta.next_id,
                records: 0,
                blocks: 0,
                class: tail[0].class + 1,
            };
            self.meta.next_id += 1;
            // Until it is swapped in, the output is named by no metadata: if the node stops, it
            // is removed at open.
            let file = files.get(&run_file(output.id))?;
            file.set_len(0)?;
            let first = self.view.runs.len() - fan_in;
            self.merge = Some(Merge {
                sources: tail.to_vec(),
                cursors: self.view.runs[first..]
                    .iter()
                    .map(|run| Cursor {
                        run: Arc::clone(run),
                        next_block: 0,
                        records: VecDeque::new(),
                    })
                    .collect(),
                output,
                file,
                block: Vec::with_capacity(self.shape.block_records),
                blocks_written: 0,
                fences: Vec::new(),
            });
        }
        let merge = self.merge.as_mut().expect("started above");
        for _ in 0..work {
            let mut smallest: Option<(usize, (Hash, u64))> = None;
            for (at, cursor) in merge.cursors.iter_mut().enumerate() {
                if cursor.records.is_empty() && cursor.next_block < cursor.run.meta.blocks() {
                    cursor.records = cursor.run.read_block(cursor.next_block)?.into();
                    cursor.next_block += 1;
                }
                if let Some(&head) = cursor.records.front()
                    && smallest.is_none_or(|(_, best)| head < best)
                {
                    smallest = Some((at, head));
                }
            }
            let Some((at, record)) = smallest else {
                break;
            };
            merge.cursors[at].records.pop_front();
            merge.block.push(record);
            if merge.block.len() == self.shape.block_records {
                flush_block(merge)?;
            }
        }
        let done = merge.cursors.iter().all(|cursor| {
            cursor.records.is_empty() && cursor.next_block >= cursor.run.meta.blocks()
        });
        if done {
            let mut merge = self.merge.take().expect("under way");
            if !merge.block.is_empty() {
                flush_block(&mut merge)?;
            }
            merge.file.sync_data()?;
            put_fences(batch, merge.output.id, &merge.fences);
            // Runs written from memory since the merge began follow its sources: the output
            // takes the sources' place, in sequence order.
            let first = self
                .meta
                .runs
                .iter()
                .position(|run| run.id == merge.sources[0].id)
                .expect("a merge's sources stay until it swaps them");
            let end = first + merge.sources.len();
            assert_eq!(
                self.meta.runs[first..end],
                merge.sources[..],
                "sources in place"
            );
            self.meta.runs.splice(first..end, [merge.output.clone()]);
            self.view.runs.splice(
                first..end,
                [Arc::new(Run {
                    meta: merge.output.clone(),
                    fences: merge.fences,
                    file: merge.file,
                    block_records: self.shape.block_records,
                })],
            );
            // The sources' fences go with the swap (lookups keep theirs in memory); their files
            // in the next round.
            for source in &merge.sources {
                for chunk in 0..source.blocks().div_ceil(FENCES_PER_CHUNK as u64) {
                    batch.delete(numbered(FENCE_PREFIX, source.id, chunk));
                }
            }
            self.retired.extend(merge.sources.iter().map(|run| run.id));
        }
        Ok(())
    }
}

impl IndexView {
    /// The first sequence number indexed under `hash`.
    pub(crate) fn lookup(&self, hash: &Hash) -> Result<Option<u64>, CtDbError> {
        // Runs are in sequence order, oldest first, and sorted by (hash, sequence) within: the
        // first one that holds the hash holds its first sequence number.
        for run in &self.runs {
            let after = run.fences.partition_point(|fence| fence < hash);
            // The block before the first one starting at or past the hash may hold it; so may
            // that one, if it starts with it.
            let candidates = [after.checked_sub(1), Some(after)];
            for block in candidates.into_iter().flatten() {
                if block >= run.fences.len() || (block == after && run.fences[block] != *hash) {
                    continue;
                }
                let records = run.read_block(block as u64)?;
                let at = records.partition_point(|(h, _)| h < hash);
                if let Some((found, sequence)) = records.get(at)
                    && found == hash
                {
                    return Ok(Some(*sequence));
                }
            }
        }
        Ok(self
            .fresh
            .iter()
            .filter_map(|chunk| {
                let at = chunk.partition_point(|(h, _)| h < hash);
                chunk.get(at).filter(|(h, _)| h == hash).map(|(_, s)| *s)
            })
            .min())
    }
}

impl Run {
    /// Block `block` of the run, read from its file.
    fn read_block(&self, block: u64) -> Result<Vec<(Hash, u64)>, CtDbError> {
        let per_block = self.block_records as u64;
        let first = block * per_block;
        if first >= self.meta.records {
            return Err(CtDbError::Corrupt(format!(
                "leaf index run {} has no block {block}",
                self.meta.id
            )));
        }
        let records = (self.meta.records - first).min(per_block);
        let mut bytes = vec![0u8; usize::try_from(records).expect("a block") * RECORD_BYTES];
        self.file
            .read_at(first * RECORD_BYTES as u64, &mut bytes)
            .map_err(|error| {
                CtDbError::Corrupt(format!(
                    "block {block} of leaf index run {}: {error}",
                    self.meta.id
                ))
            })?;
        decode_block(&bytes)
    }
}

fn flush_block(merge: &mut Merge) -> Result<(), CtDbError> {
    merge.fences.push(merge.block[0].0);
    let offset = merge.output.records * RECORD_BYTES as u64;
    merge.file.write_at(offset, &encode_block(&merge.block))?;
    merge.blocks_written += 1;
    merge.output.blocks += 1;
    merge.output.records += merge.block.len() as u64;
    merge.block.clear();
    Ok(())
}

fn run_file(id: u64) -> String {
    format!("{RUN_FILE_PREFIX}{id:020}")
}

fn numbered(prefix: &[u8], id: u64, number: u64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(&number.to_be_bytes());
    key
}

fn put_fences(batch: &mut WriteBatch, run: u64, fences: &[Hash]) {
    for (chunk, hashes) in fences.chunks(FENCES_PER_CHUNK).enumerate() {
        batch.put(numbered(FENCE_PREFIX, run, chunk as u64), hashes.concat());
    }
}

fn read_fences(disk: &dyn Disk, run: &RunMeta) -> Result<Vec<Hash>, CtDbError> {
    let blocks = usize::try_from(run.blocks()).unwrap_or(usize::MAX);
    let mut fences = Vec::with_capacity(blocks);
    for chunk in 0..blocks.div_ceil(FENCES_PER_CHUNK) {
        let bytes = disk
            .get(&numbered(FENCE_PREFIX, run.id, chunk as u64))?
            .ok_or_else(|| {
                CtDbError::Corrupt(format!(
                    "fences {chunk} of leaf index run {} are missing",
                    run.id
                ))
            })?;
        if !bytes.len().is_multiple_of(32) {
            return Err(CtDbError::Corrupt("leaf index fences are malformed".into()));
        }
        fences.extend(
            bytes
                .chunks_exact(32)
                .map(|h| Hash::try_from(h).expect("32 bytes")),
        );
    }
    if fences.len() != blocks {
        return Err(CtDbError::Corrupt(format!(
            "leaf index run {} has {} fences for {blocks} blocks",
            run.id,
            fences.len()
        )));
    }
    Ok(fences)
}

fn encode_block(records: &[(Hash, u64)]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(records.len() * RECORD_BYTES);
    for (hash, sequence) in records {
        bytes.extend_from_slice(hash);
        bytes.extend_from_slice(&sequence.to_be_bytes());
    }
    bytes
}

fn decode_block(bytes: &[u8]) -> Result<Vec<(Hash, u64)>, CtDbError> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD_BYTES) {
        return Err(CtDbError::Corrupt("a leaf index block is malformed".into()));
    }
    Ok(bytes
        .chunks_exact(RECORD_BYTES)
        .map(|record| {
            let hash = Hash::try_from(&record[..32]).expect("32 bytes");
            let sequence = u64::from_be_bytes(record[32..].try_into().expect("8 bytes"));
            (hash, sequence)
        })
        .collect())
}
