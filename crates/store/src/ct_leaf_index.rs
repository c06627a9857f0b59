//! The CT log's leaf-hash index (get-proof-by-hash): leaf hash → first sequence number, on disk,
//! in memory only as fences.
//!
//! A log-structured merge index, because a B-tree insert per leaf at a random place is what a
//! log of hundreds of millions of entries cannot afford (in sled it copies the leaf node each
//! time, and its pages stay cached): new records collect in memory, are written as a sorted
//! *run* of 256-record blocks when [`FRESH_RECORDS_MAX`] of them have collected, and
//! [`MERGE_FAN_IN`] runs of one size class are merged into one of the next, a bounded step at a
//! time ([`MERGE_WORK_PER_RECORD`] records merged per record indexed), so no integration round
//! pauses for a large merge. A lookup reads at most two blocks per run; runs number at most
//! (`MERGE_FAN_IN` − 1 + 1) per size class, a handful of classes for a billion entries.
//!
//! The index is derived data: every record is a leaf hash of the tree's level-0 tiles. The
//! records not yet in a run are not written at all; at open they are read back from the tiles.
//! What is written goes in the caller's batch, with the tree size, so a crash never separates
//! them: `ct/index/meta` names the runs (oldest first, covering leaves `0..indexed_upto`) and the
//! run ids whose blocks are garbage (a merge's output not yet swapped in, runs merged away),
//! removed a bounded number per round.
//!
//! Keys: `ct/index/block/<run><block>` → records (32-byte hash, 8-byte sequence number), sorted;
//! `ct/index/fence/<run><chunk>` → the first hash of each block, 1,024 blocks per chunk.

use std::collections::VecDeque;
use std::sync::Arc;

use certus_ct::Hash;
use serde::{Deserialize, Serialize};

use crate::ct_db::CtDbError;
use crate::disk::{Disk, WriteBatch};

const META_KEY: &[u8] = b"ct/index/meta";
const BLOCK_PREFIX: &[u8] = b"ct/index/block/";
const FENCE_PREFIX: &[u8] = b"ct/index/fence/";

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
/// Garbage blocks removed per round at most.
const GARBAGE_BLOCKS_PER_ROUND: u64 = 4096;

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
    /// Runs whose blocks and fences may exist and are not referenced, with how many blocks
    /// each may have.
    garbage: Vec<(u64, u64)>,
}

/// A run as lookups use it: its meta and the first hash of each block.
#[derive(Debug)]
struct Run {
    meta: RunMeta,
    fences: Vec<Hash>,
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
    block: Vec<(Hash, u64)>,
    blocks_written: u64,
    fences: Vec<Hash>,
}

#[derive(Debug)]
struct Cursor {
    run: RunMeta,
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
}

impl LeafIndex {
    /// Loads the index of a tree of `tree_size` leaves; `leaf_hashes(from, to)` reads the
    /// tree's leaf hashes `from..to` (from the tiles) for the records not yet in a run.
    pub(crate) fn open(
        disk: &dyn Disk,
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
            }));
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
        })
    }

    /// What lookups read now.
    pub(crate) fn view(&self) -> IndexView {
        self.view.clone()
    }

    /// Adds one round's records (leaf hash, sequence number) and puts into `batch` what the
    /// round writes: a run when enough records collected, a step of a merge, garbage removal
    /// and the meta. The index changes in memory at once: if the batch is not written, reopen.
    pub(crate) fn add_round(
        &mut self,
        disk: &dyn Disk,
        batch: &mut WriteBatch,
        mut records: Vec<(Hash, u64)>,
    ) -> Result<(), CtDbError> {
        let added = records.len();
        if !records.is_empty() {
            records.sort_unstable();
            self.fresh_records += records.len();
            self.view.fresh.push(Arc::new(records));
        }
        // Garbage first: runs a merge retires in this round stay readable until the next one,
        // for lookups that took the view before this round published its own. The merge before
        // the new run: a merge reads its sources from the disk, where a run written in this
        // round is not yet.
        self.remove_garbage(batch);
        self.merge_step(
            disk,
            batch,
            added.saturating_mul(self.shape.merge_work_per_record),
        )?;
        if self.fresh_records >= self.shape.fresh_records_max {
            self.write_fresh_run(batch);
        }
        batch.put(
            META_KEY,
            postcard::to_stdvec(&self.meta).expect("plain data encodes"),
        );
        Ok(())
    }

    fn write_fresh_run(&mut self, batch: &mut WriteBatch) {
        let mut records: Vec<(Hash, u64)> = self
            .view
            .fresh
            .drain(..)
            .flat_map(|chunk| chunk.iter().copied().collect::<Vec<_>>())
            .collect();
        records.sort_unstable();
        let per_block = self.shape.block_records;
        let run = RunMeta {
            id: self.meta.next_id,
            records: records.len() as u64,
            blocks: records.len().div_ceil(per_block) as u64,
            class: 0,
        };
        self.meta.next_id += 1;
        let mut fences = Vec::with_capacity(records.len().div_ceil(per_block));
        for (number, block) in records.chunks(per_block).enumerate() {
            fences.push(block[0].0);
            batch.put(block_key(run.id, number as u64), encode_block(block));
        }
        put_fences(batch, run.id, &fences);
        self.meta.indexed_upto += records.len() as u64;
        self.meta.runs.push(run.clone());
        self.view.runs.push(Arc::new(Run { meta: run, fences }));
        self.fresh_records = 0;
    }

    /// Starts a merge if the last `MERGE_FAN_IN` runs share a class, and advances the one
    /// under way by up to `work` records.
    fn merge_step(
        &mut self,
        disk: &dyn Disk,
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
            // Output blocks are as full as the sources' or fuller.
            let bound: u64 = tail.iter().map(RunMeta::blocks).sum();
            // Until it is swapped in, the output is garbage if the node stops.
            self.meta.garbage.push((output.id, bound));
            self.merge = Some(Merge {
                sources: tail.to_vec(),
                cursors: tail
                    .iter()
                    .map(|run| Cursor {
                        run: run.clone(),
                        next_block: 0,
                        records: VecDeque::new(),
                    })
                    .collect(),
                output,
                block: Vec::with_capacity(self.shape.block_records),
                blocks_written: 0,
                fences: Vec::new(),
            });
        }
        let merge = self.merge.as_mut().expect("started above");
        for _ in 0..work {
            let mut smallest: Option<(usize, (Hash, u64))> = None;
            for (at, cursor) in merge.cursors.iter_mut().enumerate() {
                if cursor.records.is_empty() && cursor.next_block < cursor.run.blocks() {
                    let bytes = disk
                        .get(&block_key(cursor.run.id, cursor.next_block))?
                        .ok_or_else(|| missing_block(cursor.run.id, cursor.next_block))?;
                    cursor.records = decode_block(&bytes)?.into();
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
                flush_block(merge, batch);
            }
        }
        let done = merge
            .cursors
            .iter()
            .all(|cursor| cursor.records.is_empty() && cursor.next_block >= cursor.run.blocks());
        if done {
            let mut merge = self.merge.take().expect("under way");
            if !merge.block.is_empty() {
                flush_block(&mut merge, batch);
            }
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
                })],
            );
            self.meta.garbage.retain(|(id, _)| *id != merge.output.id);
            self.meta
                .garbage
                .extend(merge.sources.iter().map(|run| (run.id, run.blocks())));
        }
        Ok(())
    }

    /// Removes up to [`GARBAGE_BLOCKS_PER_ROUND`] blocks of runs no longer referenced. A merge's
    /// output under way is garbage too, but only once no merge is writing it.
    fn remove_garbage(&mut self, batch: &mut WriteBatch) {
        let writing = self.merge.as_ref().map(|merge| merge.output.id);
        let mut budget = GARBAGE_BLOCKS_PER_ROUND;
        let mut kept = Vec::new();
        for (id, blocks) in std::mem::take(&mut self.meta.garbage) {
            if Some(id) == writing || budget == 0 {
                kept.push((id, blocks));
                continue;
            }
            let removed = blocks.min(budget);
            for number in blocks - removed..blocks {
                batch.delete(block_key(id, number));
            }
            budget -= removed;
            if removed == blocks {
                for chunk in 0..blocks.div_ceil(FENCES_PER_CHUNK as u64).max(1) {
                    batch.delete(numbered(FENCE_PREFIX, id, chunk));
                }
            } else {
                kept.push((id, blocks - removed));
            }
        }
        self.meta.garbage = kept;
    }
}

impl IndexView {
    /// The first sequence number indexed under `hash`.
    pub(crate) fn lookup(&self, disk: &dyn Disk, hash: &Hash) -> Result<Option<u64>, CtDbError> {
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
                let bytes = disk
                    .get(&block_key(run.meta.id, block as u64))?
                    .ok_or_else(|| missing_block(run.meta.id, block as u64))?;
                let records = decode_block(&bytes)?;
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

fn flush_block(merge: &mut Merge, batch: &mut WriteBatch) {
    merge.fences.push(merge.block[0].0);
    batch.put(
        block_key(merge.output.id, merge.blocks_written),
        encode_block(&merge.block),
    );
    merge.blocks_written += 1;
    merge.output.blocks += 1;
    merge.output.records += merge.block.len() as u64;
    merge.block.clear();
}

fn missing_block(run: u64, block: u64) -> CtDbError {
    CtDbError::Corrupt(format!("block {block} of leaf index run {run} is missing"))
}

fn numbered(prefix: &[u8], id: u64, number: u64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(&number.to_be_bytes());
    key
}

fn block_key(run: u64, block: u64) -> Vec<u8> {
    numbered(BLOCK_PREFIX, run, block)
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
