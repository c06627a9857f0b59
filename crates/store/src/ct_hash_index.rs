//! The CT log's hash indexes: a 32-byte hash → the first sequence number indexed under it, on
//! disk; in memory only the fences (the first hash of every block), a Bloom filter per run (within
//! a bound) and the records not yet in a run.
//!
//! The database keeps two, each in its own [`Keyspace`] of keys and files, with the same
//! machinery: the leaf-hash index ([`LEAF_HASHES`], get-proof-by-hash: leaf hash → sequence) and
//! the entry-key index ([`ENTRY_KEYS`], duplicate submissions older than the replicated state's
//! dedupe window: [`certus_ct::entry_key`] → sequence). Both keys are SHA-256 outputs, which the
//! Bloom filters rely on (below); nothing else may be indexed here.
//!
//! A log-structured merge index, because a B-tree insert per leaf at a random place is what a
//! log of hundreds of millions of entries cannot afford (in sled it copies the leaf node each
//! time, and its pages stay cached): new records collect in memory, are written as a sorted
//! *run* of 256-record blocks when [`FRESH_RECORDS_MAX`] of them have collected, and
//! [`MERGE_FAN_IN`] runs of one size class are merged into one of the next, a bounded step at a
//! time ([`MERGE_WORK_PER_RECORD`] records merged per record indexed), so no integration round
//! pauses for a large merge. A lookup probes the runs oldest first until one holds the hash: a
//! run whose Bloom filter rules the hash out is skipped, any other costs at most two block reads.
//! There are at most [`MERGE_FAN_IN`] runs per size class, and six classes hold a billion
//! entries; a hash the log does not hold (every new add-chain) reads a block in about one run
//! of a hundred instead of in every run.
//!
//! An index covers the leaves `0..covered`: each round names the leaf it covers up to, with the
//! records of the leaves it added (a leaf may have none: an entry whose `leaf_input` does not
//! decode has no entry key). The index is derived data: the records not yet in a run are not
//! written at all; at open the caller reads them back (leaf hashes from the tree's level-0
//! tiles, entry keys from the stored entries). A run is a file, `<prefix><run>` (`index-…` for
//! leaf hashes, `entry-index-…` for entry keys):
//!
//! ```text
//! [blocks: records × 40 bytes][filter: segments × words × 8 bytes][trailer: 20 bytes]
//! ```
//!
//! The blocks hold records of a 32-byte hash and an 8-byte sequence number, sorted. The filter
//! follows them (see below); its trailer is `lbf1`, the segment count, the words per segment and
//! the bits probed per hash (u32 each, big-endian), then a CRC-32 of the filter and those three
//! numbers. The file is written and synced before the metadata naming it goes into the caller's
//! batch, with the tree size, so a crash never separates them: `<keys>meta` names the runs
//! (oldest first, covering leaves `0..indexed_upto`), `<keys>fence/<run><chunk>` holds the first
//! hash of each block, 1,024 blocks per chunk, where `<keys>` is `ct/index/` for leaf hashes and
//! `ct/entry-index/` for entry keys. A run file its metadata does not name (a merge's output
//! when the node stopped, runs merged away) is removed: the round after, or at open. No
//! keyspace's run-file prefix starts with another's, so one index never removes the other's.
//!
//! **Bloom filters.** An indexed hash is a SHA-256 output, uniformly random, so its own bytes
//! serve as the filter's hash functions: bytes 0..8 (big-endian) pick one of the filter's
//! segments, scaled to their count, so that segments follow hash order; bytes 8..16 and 16..24
//! (little-endian) are the two halves of double hashing, [`FILTER_HASHES`] bits within that
//! segment. Because segments follow hash order and a run's records are written sorted, a filter
//! is written one segment (at most 64 KiB) at a time as its records go by: a merge holds one
//! segment of its output's filter in memory, not the whole filter, and the filter is written by
//! the time the last block is. At [`FILTER_BITS_PER_RECORD`] bits per record (1.25 bytes, 3 %
//! of the record on disk) about 0.8 % of absent hashes pass a run's filter.
//!
//! Every run file has its filter; memory holds at most [`Shape::filter_bytes_max`] bytes of an
//! index's filters (by default [`LEAF_INDEX_FILTER_BYTES_MAX`] for leaf hashes: 1.25 bytes per
//! entry, 119 MiB for every run of a log of 10^8 entries; [`ENTRY_INDEX_FILTER_BYTES_MAX`] for
//! entry keys), besides the one segment a merge is writing. When the filters do not all fit, the
//! largest runs keep theirs, each one if it still fits within what larger runs left (ties: the
//! older run first): their blocks are the coldest on disk, while a small run's few blocks stay
//! in the page cache. Which runs keep their filters is a function of the list of runs alone,
//! recomputed whenever it changes (a new run, a merge swapped in, open), and a filter that comes
//! back into the bound is read from its run's file; a run without its filter in memory is probed
//! as it was before filters, so lookups stay correct whatever fits. While a merge's output
//! replaces its sources, lookups still running on the view before hold the sources' filters a
//! little longer: memory briefly holds both.
//!
//! A filter is checked when it is read: at open every run's trailer (magic, geometry, and the
//! file's length against the blocks it follows), and when a filter is loaded into memory its
//! CRC. A run whose filter is missing or damaged is [`CtDbError::Corrupt`], as a block that
//! cannot be read is. Leaf-index runs written before filters existed (the database layout
//! `tiles-2`, whose run files end with their blocks) get theirs from [`add_filters`] when the
//! database opens, which reads each run's blocks once; the database marks its layout only after,
//! so a crash part way through starts that again. A database from before the entry-key index
//! (`tiles-3`) builds it at open in bounded rounds ([`HashIndex::open`] with nothing read back,
//! then [`HashIndex::add_round`] per chunk of entries), each round's metadata committed, so a
//! crash resumes from the last run written.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::sync::Arc;

use certus_ct::Hash;
use serde::{Deserialize, Serialize};

use crate::ct_error::CtDbError;
use crate::ct_files::DataFiles;
use crate::disk::{Disk, WriteBatch};
use crate::files::LogFile;
use crate::limits::{
    ENTRY_INDEX_FILTER_BYTES_MAX, FILTER_SEGMENT_WORDS_MAX, FRESH_RECORDS_MAX,
    INTERPOLATION_STEPS_MAX, LEAF_INDEX_FILTER_BYTES_MAX,
};

/// Where one index lives: its keys on the disk, its run files, and what errors call it. Indexes
/// of different keyspaces share nothing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Keyspace {
    /// What errors call the index ("leaf index").
    name: &'static str,
    /// Every key of the index starts with this: the meta, then the fences.
    pub(crate) disk_prefix: &'static [u8],
    /// Run files are named this and the run's number. No keyspace's starts with another's: the
    /// index removes the files under its prefix that its meta does not name.
    run_file_prefix: &'static str,
    /// The bytes of Bloom filters kept in memory by default.
    filter_bytes_max: usize,
}

/// The leaf-hash index (get-proof-by-hash): leaf hash → first sequence number. Its names are
/// those of the stores written before there was another index, and stay so.
pub(crate) const LEAF_HASHES: Keyspace = Keyspace {
    name: "leaf index",
    disk_prefix: b"ct/index/",
    run_file_prefix: "index-",
    filter_bytes_max: LEAF_INDEX_FILTER_BYTES_MAX,
};

/// The entry-key index (duplicate submissions): [`certus_ct::entry_key`] → first sequence number.
pub(crate) const ENTRY_KEYS: Keyspace = Keyspace {
    name: "entry index",
    disk_prefix: b"ct/entry-index/",
    run_file_prefix: "entry-index-",
    filter_bytes_max: ENTRY_INDEX_FILTER_BYTES_MAX,
};

impl Keyspace {
    fn meta_key(&self) -> Vec<u8> {
        [self.disk_prefix, b"meta"].concat()
    }

    fn fence_key(&self, run: u64, chunk: u64) -> Vec<u8> {
        let mut key = [self.disk_prefix, b"fence/"].concat();
        key.extend_from_slice(&run.to_be_bytes());
        key.extend_from_slice(&chunk.to_be_bytes());
        key
    }

    fn run_file(&self, id: u64) -> String {
        format!("{}{id:020}", self.run_file_prefix)
    }
}

/// Records per block (10 KiB): one block read answers a lookup within a run.
const BLOCK_RECORDS: usize = 256;
const RECORD_BYTES: usize = 40;
/// Fences (first hashes of blocks) per stored chunk.
const FENCES_PER_CHUNK: usize = 1024;
/// Runs of one size class merged into one of the next.
pub(crate) const MERGE_FAN_IN: usize = 8;
/// Records a merge advances per record indexed: with fan-in 8, merges keep up (each record is
/// rewritten once per class it climbs, at most 8 classes below 2^40 records) with room to spare.
pub(crate) const MERGE_WORK_PER_RECORD: usize = 4;

/// Bloom filter bits per record written: with [`FILTER_HASHES`] bits probed per hash, a run's
/// filter lets about 0.8 % of absent hashes through ((1 − e^(−7/10))^7).
const FILTER_BITS_PER_RECORD: u64 = 10;
/// Bits probed per hash: ln 2 × [`FILTER_BITS_PER_RECORD`], rounded, the count with the fewest
/// false positives.
const FILTER_HASHES: u32 = 7;
const FILTER_WORD_BYTES: usize = size_of::<u64>();
const FILTER_MAGIC: [u8; 4] = *b"lbf1";
/// The magic, three u32 of geometry and the CRC-32.
const FILTER_TRAILER_BYTES: usize = 20;

/// An index's sizes: production uses [`Shape::default_for`] its keyspace; tests make them small so
/// that runs and merges happen within a few hundred leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) fresh_records_max: usize,
    pub(crate) merge_fan_in: usize,
    pub(crate) merge_work_per_record: usize,
    pub(crate) block_records: usize,
    /// Bytes of Bloom filters kept in memory, at most (the files hold them all).
    pub(crate) filter_bytes_max: usize,
}

impl Shape {
    /// The sizes production gives the index of `keyspace`.
    pub(crate) fn default_for(keyspace: &Keyspace) -> Shape {
        Shape {
            fresh_records_max: FRESH_RECORDS_MAX,
            merge_fan_in: MERGE_FAN_IN,
            merge_work_per_record: MERGE_WORK_PER_RECORD,
            block_records: BLOCK_RECORDS,
            filter_bytes_max: keyspace.filter_bytes_max,
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

    /// Where the blocks end and the filter starts in the run's file.
    fn blocks_end(&self) -> u64 {
        self.records * RECORD_BYTES as u64
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    /// Leaves `0..indexed_upto` are in the runs.
    indexed_upto: u64,
    runs: Vec<RunMeta>,
    next_id: u64,
}

/// A run as lookups use it: its meta, the first hash of each block, and where its filter is.
#[derive(Debug)]
struct Run {
    keyspace: &'static Keyspace,
    meta: RunMeta,
    fences: Vec<Hash>,
    file: Arc<dyn LogFile>,
    block_records: usize,
    filter: StoredFilter,
}

/// A run in a view, with its Bloom filter if the memory bound keeps it.
#[derive(Clone, Debug)]
struct ViewRun {
    run: Arc<Run>,
    filter: Option<Arc<Filter>>,
}

/// What lookups read: the runs and the records not yet in one (sorted chunks, one per round).
#[derive(Clone, Debug, Default)]
pub(crate) struct IndexView {
    runs: Vec<ViewRun>,
    fresh: Vec<Arc<Vec<(Hash, u64)>>>,
}

/// A merge under way: the last `MERGE_FAN_IN` runs into one, a step per round.
#[derive(Debug)]
struct Merge {
    sources: Vec<RunMeta>,
    cursors: Vec<Cursor>,
    output: RunMeta,
    /// The sources' records together: what the output will hold, and where its filter starts.
    records_total: u64,
    file: Arc<dyn LogFile>,
    block: Vec<(Hash, u64)>,
    blocks_written: u64,
    fences: Vec<Hash>,
    filter: FilterWriter,
}

#[derive(Debug)]
struct Cursor {
    run: Arc<Run>,
    next_block: u64,
    records: VecDeque<(Hash, u64)>,
}

/// The writer's side of an index.
#[derive(Debug)]
pub(crate) struct HashIndex {
    keyspace: &'static Keyspace,
    shape: Shape,
    meta: Meta,
    view: IndexView,
    /// Leaves `0..covered` are indexed: `0..meta.indexed_upto` in the runs, the rest in memory.
    covered: u64,
    fresh_records: usize,
    merge: Option<Merge>,
    /// Run files merged away in the last round, removed in the next.
    retired: Vec<u64>,
}

impl HashIndex {
    /// Loads the runs of the index of `keyspace` in a tree of `tree_size` leaves, and removes the
    /// run files its meta does not name. The index covers what its runs cover; the caller reads
    /// back the rest with [`HashIndex::read_back`] (or adds it in rounds).
    pub(crate) fn open(
        disk: &dyn Disk,
        files: &DataFiles,
        keyspace: &'static Keyspace,
        shape: Shape,
        tree_size: u64,
    ) -> Result<HashIndex, CtDbError> {
        let meta = read_meta(disk, keyspace)?;
        if meta.indexed_upto > tree_size {
            return Err(CtDbError::Corrupt(format!(
                "the {} covers {} leaves of a tree of {tree_size}",
                keyspace.name, meta.indexed_upto
            )));
        }
        let mut runs = Vec::with_capacity(meta.runs.len());
        for run in &meta.runs {
            let file = files.get(&keyspace.run_file(run.id))?;
            runs.push(ViewRun {
                run: Arc::new(Run {
                    keyspace,
                    fences: read_fences(disk, keyspace, run)?,
                    filter: StoredFilter::read(keyspace, &*file, run)?,
                    meta: run.clone(),
                    file,
                    block_records: shape.block_records,
                }),
                filter: None,
            });
        }
        for name in files.named(keyspace.run_file_prefix)? {
            if !meta
                .runs
                .iter()
                .any(|run| keyspace.run_file(run.id) == name)
            {
                files.remove(&name)?;
            }
        }
        let mut index = HashIndex {
            keyspace,
            shape,
            covered: meta.indexed_upto,
            meta,
            view: IndexView {
                runs,
                fresh: Vec::new(),
            },
            fresh_records: 0,
            merge: None,
            retired: Vec::new(),
        };
        index.place_filters()?;
        Ok(index)
    }

    /// Leaves `0..covered()` are indexed.
    pub(crate) fn covered(&self) -> u64 {
        self.covered
    }

    /// Puts in memory, without writing anything, the records of leaves `covered()..to`, which
    /// were indexed before but are not in a run: `records(from, to)` reads those of leaves
    /// `from..to` (at most [`Shape::fresh_records_max`] leaves at a time) from what they derive
    /// from.
    pub(crate) fn read_back(
        &mut self,
        to: u64,
        records: impl Fn(u64, u64) -> Result<Vec<(Hash, u64)>, CtDbError>,
    ) -> Result<(), CtDbError> {
        let mut fresh = Vec::new();
        let mut next = self.covered;
        while next < to {
            let end = to.min(next + self.shape.fresh_records_max.max(1) as u64);
            let read = records(next, end)?;
            if let Some((_, sequence)) = read
                .iter()
                .find(|(_, sequence)| !(next..end).contains(sequence))
            {
                return Err(CtDbError::Corrupt(format!(
                    "the {} read back leaf {sequence} for leaves {next}..{end}",
                    self.keyspace.name
                )));
            }
            fresh.extend(read);
            next = end;
        }
        self.covered = self.covered.max(to);
        if !fresh.is_empty() {
            fresh.sort_unstable();
            self.fresh_records += fresh.len();
            push_fresh(&mut self.view.fresh, fresh);
        }
        Ok(())
    }

    /// What lookups read now.
    pub(crate) fn view(&self) -> IndexView {
        self.view.clone()
    }

    /// Adds one round: the index covers leaves `0..upto` after it, and `records` (hash,
    /// sequence number) are those of leaves `covered()..upto`. Puts into `batch` what the round
    /// writes: a run when enough records collected, a step of a merge, and the meta. The index
    /// changes in memory at once: if the batch is not written, reopen.
    pub(crate) fn add_round(
        &mut self,
        files: &DataFiles,
        batch: &mut WriteBatch,
        upto: u64,
        mut records: Vec<(Hash, u64)>,
    ) -> Result<(), CtDbError> {
        assert!(upto >= self.covered, "a round does not go back");
        assert!(
            records
                .iter()
                .all(|(_, sequence)| (self.covered..upto).contains(sequence)),
            "a round's records are of the leaves it adds"
        );
        self.covered = upto;
        let added = records.len();
        if !records.is_empty() {
            records.sort_unstable();
            self.fresh_records += records.len();
            push_fresh(&mut self.view.fresh, records);
        }
        // Runs merged away in the last round, whose swap is committed now; those a merge retires
        // in this round stay until the next one, for lookups that took the view before this
        // round published its own.
        for id in std::mem::take(&mut self.retired) {
            files.remove(&self.keyspace.run_file(id))?;
        }
        self.merge_step(
            files,
            batch,
            added.saturating_mul(self.shape.merge_work_per_record),
        )?;
        if self.fresh_records >= self.shape.fresh_records_max {
            self.write_fresh_run(files, batch)?;
        }
        self.place_filters()?;
        batch.put(
            self.keyspace.meta_key(),
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
        let file = files.get(&self.keyspace.run_file(run.id))?;
        file.set_len(0)?;
        file.write_at(0, &encode_block(&records))?;
        let mut filter = FilterWriter::new(self.keyspace, run.records, run.blocks_end());
        for (hash, _) in &records {
            filter.insert(&*file, hash)?;
        }
        let filter = filter.finish(&*file)?;
        file.sync_data()?;
        put_fences(batch, self.keyspace, run.id, &fences);
        // Every record in memory is in the run now: the runs cover what the index does.
        self.meta.indexed_upto = self.covered;
        self.meta.runs.push(run.clone());
        self.view.runs.push(ViewRun {
            run: Arc::new(Run {
                keyspace: self.keyspace,
                meta: run,
                fences,
                file,
                block_records: per_block,
                filter,
            }),
            filter: None,
        });
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
            let file = files.get(&self.keyspace.run_file(output.id))?;
            file.set_len(0)?;
            let records_total: u64 = tail.iter().map(|run| run.records).sum();
            let first = self.view.runs.len() - fan_in;
            self.merge = Some(Merge {
                sources: tail.to_vec(),
                cursors: self.view.runs[first..]
                    .iter()
                    .map(|source| Cursor {
                        run: Arc::clone(&source.run),
                        next_block: 0,
                        records: VecDeque::new(),
                    })
                    .collect(),
                output,
                records_total,
                file,
                block: Vec::with_capacity(self.shape.block_records),
                blocks_written: 0,
                fences: Vec::new(),
                // The filter goes after the blocks, whose length the sources fix.
                filter: FilterWriter::new(
                    self.keyspace,
                    records_total,
                    records_total * RECORD_BYTES as u64,
                ),
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
            assert_eq!(
                merge.output.records, merge.records_total,
                "a merge writes every record of its sources"
            );
            let filter = merge.filter.finish(&*merge.file)?;
            merge.file.sync_data()?;
            put_fences(batch, self.keyspace, merge.output.id, &merge.fences);
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
                [ViewRun {
                    run: Arc::new(Run {
                        keyspace: self.keyspace,
                        meta: merge.output.clone(),
                        fences: merge.fences,
                        file: merge.file,
                        block_records: self.shape.block_records,
                        filter,
                    }),
                    filter: None,
                }],
            );
            // The sources' fences go with the swap (lookups keep theirs in memory); their files
            // in the next round.
            for source in &merge.sources {
                for chunk in 0..source.blocks().div_ceil(FENCES_PER_CHUNK as u64) {
                    batch.delete(self.keyspace.fence_key(source.id, chunk));
                }
            }
            self.retired.extend(merge.sources.iter().map(|run| run.id));
        }
        Ok(())
    }

    /// Keeps in memory the filters the bound allows (see the module doc for which) and no
    /// others: drops first, then loads, so memory never holds more than the bound for long.
    fn place_filters(&mut self) -> Result<(), CtDbError> {
        let sizes: Vec<(u64, u64)> = self
            .view
            .runs
            .iter()
            .map(|entry| (entry.run.meta.records, entry.run.filter.geometry.bytes()))
            .collect();
        let kept = filters_kept(&sizes, self.shape.filter_bytes_max as u64);
        for (entry, &keep) in self.view.runs.iter_mut().zip(&kept) {
            if !keep {
                entry.filter = None;
            }
        }
        for (entry, &keep) in self.view.runs.iter_mut().zip(&kept) {
            if keep && entry.filter.is_none() {
                entry.filter = Some(Arc::new(entry.run.load_filter()?));
            }
        }
        assert!(self.view.filter_bytes() <= self.shape.filter_bytes_max as u64);
        Ok(())
    }
}

/// Which runs keep their filters in memory, given each run's (records, filter bytes), oldest
/// first, and the bytes allowed: the largest runs first (the older of two equal ones first),
/// each if it fits within what the runs before it left.
fn filters_kept(runs: &[(u64, u64)], bytes_max: u64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&at| (Reverse(runs[at].0), at));
    let mut left = bytes_max;
    let mut kept = vec![false; runs.len()];
    for at in order {
        let bytes = runs[at].1;
        if bytes <= left {
            left -= bytes;
            kept[at] = true;
        }
    }
    kept
}

/// Writes the Bloom filter of every run of an index whose runs were written without one (the
/// database layout `tiles-2`): each run file is cut back to its blocks, and the filter built
/// from them is written after them and synced. The caller marks the new layout only after this
/// returns; if interrupted, this is done again from the start, the same.
pub(crate) fn add_filters(
    disk: &dyn Disk,
    files: &DataFiles,
    keyspace: &'static Keyspace,
    shape: Shape,
) -> Result<(), CtDbError> {
    let meta = read_meta(disk, keyspace)?;
    for run in &meta.runs {
        let file = files.get(&keyspace.run_file(run.id))?;
        let size = file.size()?;
        if size < run.blocks_end() {
            return Err(CtDbError::Corrupt(format!(
                "{} run {} is {size} bytes, short of its {} records",
                keyspace.name, run.id, run.records
            )));
        }
        file.set_len(run.blocks_end())?;
        let mut filter = FilterWriter::new(keyspace, run.records, run.blocks_end());
        for block in 0..run.blocks() {
            for (hash, _) in read_block(keyspace, &*file, run, shape.block_records, block)? {
                filter.insert(&*file, &hash)?;
            }
        }
        filter.finish(&*file)?;
        file.sync_data()?;
    }
    Ok(())
}

/// Adds a sorted chunk of records not yet in a run, merging it with the newest chunks while
/// they are not more than twice its size. Each chunk is then more than twice the next newer one,
/// so a lookup binary-searches at most log2 of the records' count of them (a round a chunk, as
/// before, meant hundreds at the bound), and a record is merged about that many times.
fn push_fresh(fresh: &mut Vec<Arc<Vec<(Hash, u64)>>>, mut chunk: Vec<(Hash, u64)>) {
    while let Some(newest) = fresh.last()
        && newest.len() <= 2 * chunk.len()
    {
        let newest = fresh.pop().expect("a newest chunk was just seen");
        chunk = merge_sorted(&newest, &chunk);
    }
    fresh.push(Arc::new(chunk));
}

/// The first 8 bytes of a hash as a number: where it falls among uniformly spread hashes.
fn hash_prefix(hash: &Hash) -> u64 {
    u64::from_be_bytes(hash[..8].try_into().expect("a hash has 8 bytes"))
}

/// The index of the first record not below `hash` in sorted `records`. The hashes are SHA-256
/// outputs, spread evenly, so interpolating on their prefix narrows a chunk of tens of
/// thousands to a few records in a couple of steps, where bisecting takes sixteen comparisons;
/// the steps are capped so that hashes bunched on purpose cost no more than bisecting.
fn first_not_below(records: &[(Hash, u64)], hash: &Hash) -> usize {
    // The answer stays within lo..=hi.
    let (mut lo, mut hi) = (0, records.len());
    let target = hash_prefix(hash);
    for _ in 0..INTERPOLATION_STEPS_MAX {
        if hi - lo < 16 {
            break;
        }
        let low = hash_prefix(&records[lo].0);
        let high = hash_prefix(&records[hi - 1].0);
        if target <= low || target > high || high == low {
            break;
        }
        let span = (hi - 1 - lo) as u128;
        let guess = lo + ((target - low) as u128 * span / (high - low) as u128) as usize;
        if records[guess].0 < *hash {
            lo = guess + 1;
        } else {
            hi = guess;
        }
    }
    lo + records[lo..hi].partition_point(|(h, _)| h < hash)
}

/// The records of two sorted slices, sorted.
fn merge_sorted(a: &[(Hash, u64)], b: &[(Hash, u64)]) -> Vec<(Hash, u64)> {
    let mut merged = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j] < a[i] {
            merged.push(b[j]);
            j += 1;
        } else {
            merged.push(a[i]);
            i += 1;
        }
    }
    merged.extend_from_slice(&a[i..]);
    merged.extend_from_slice(&b[j..]);
    merged
}

impl IndexView {
    /// The first sequence number indexed under `hash`.
    pub(crate) fn lookup(&self, hash: &Hash) -> Result<Option<u64>, CtDbError> {
        let mut blocks_read = 0;
        self.lookup_reading(hash, &mut blocks_read)
    }

    /// [`IndexView::lookup`], adding to `blocks_read` the blocks it reads.
    fn lookup_reading(&self, hash: &Hash, blocks_read: &mut u64) -> Result<Option<u64>, CtDbError> {
        // Runs are in sequence order, oldest first, and sorted by (hash, sequence) within: the
        // first one that holds the hash holds its first sequence number. A filter only says
        // which runs cannot hold it.
        for ViewRun { run, filter } in &self.runs {
            if filter.as_ref().is_some_and(|filter| !filter.may_hold(hash)) {
                continue;
            }
            let after = run.fences.partition_point(|fence| fence < hash);
            // The block before the first one starting at or past the hash may hold it; so may
            // that one, if it starts with it.
            let candidates = [after.checked_sub(1), Some(after)];
            for block in candidates.into_iter().flatten() {
                if block >= run.fences.len() || (block == after && run.fences[block] != *hash) {
                    continue;
                }
                *blocks_read += 1;
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
                let at = first_not_below(chunk, hash);
                chunk.get(at).filter(|(h, _)| h == hash).map(|(_, s)| *s)
            })
            .min())
    }

    /// Bytes this view keeps in memory: fences, the filters kept, and the records not yet in a
    /// run.
    pub(crate) fn memory_bytes(&self) -> u64 {
        let fences: usize = self.runs.iter().map(|entry| entry.run.fences.len()).sum();
        let fresh: usize = self.fresh.iter().map(|chunk| chunk.len()).sum();
        (fences * size_of::<Hash>()) as u64
            + self.filter_bytes()
            + (fresh * size_of::<(Hash, u64)>()) as u64
    }

    /// Bytes of the filters kept in memory.
    fn filter_bytes(&self) -> u64 {
        self.runs
            .iter()
            .filter_map(|entry| entry.filter.as_ref())
            .map(|filter| filter.geometry.bytes())
            .sum()
    }
}

impl Run {
    /// Block `block` of the run, read from its file.
    fn read_block(&self, block: u64) -> Result<Vec<(Hash, u64)>, CtDbError> {
        read_block(
            self.keyspace,
            &*self.file,
            &self.meta,
            self.block_records,
            block,
        )
    }

    /// The run's filter, read from its file and checked against its CRC.
    fn load_filter(&self) -> Result<Filter, CtDbError> {
        let StoredFilter { geometry, crc } = self.filter;
        let start = self.meta.blocks_end();
        let segment_bytes = geometry.segment_bytes();
        let mut words = Vec::with_capacity(
            usize::try_from(geometry.bytes() / FILTER_WORD_BYTES as u64).unwrap_or(0),
        );
        let mut bytes = vec![0u8; usize::try_from(segment_bytes).expect("a segment")];
        let mut hasher = crc32fast::Hasher::new();
        for segment in 0..u64::from(geometry.segments) {
            self.file
                .read_at(start + segment * segment_bytes, &mut bytes)
                .map_err(|error| filter_damaged(self.keyspace, &self.meta, &error.to_string()))?;
            hasher.update(&bytes);
            words.extend(
                bytes
                    .chunks_exact(FILTER_WORD_BYTES)
                    .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes"))),
            );
        }
        hasher.update(&geometry.encode());
        if hasher.finalize() != crc {
            return Err(filter_damaged(
                self.keyspace,
                &self.meta,
                "it does not match its checksum",
            ));
        }
        Ok(Filter { geometry, words })
    }
}

/// Block `block` of `run`, read from its file.
fn read_block(
    keyspace: &Keyspace,
    file: &dyn LogFile,
    run: &RunMeta,
    block_records: usize,
    block: u64,
) -> Result<Vec<(Hash, u64)>, CtDbError> {
    let per_block = block_records as u64;
    let first = block * per_block;
    if first >= run.records {
        return Err(CtDbError::Corrupt(format!(
            "{} run {} has no block {block}",
            keyspace.name, run.id
        )));
    }
    let records = (run.records - first).min(per_block);
    let mut bytes = vec![0u8; usize::try_from(records).expect("a block") * RECORD_BYTES];
    file.read_at(first * RECORD_BYTES as u64, &mut bytes)
        .map_err(|error| {
            CtDbError::Corrupt(format!(
                "block {block} of {} run {}: {error}",
                keyspace.name, run.id
            ))
        })?;
    decode_block(keyspace, &bytes)
}

/// A filter's shape: segments of `segment_words` words, `hashes` bits set per record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FilterGeometry {
    segments: u32,
    segment_words: u32,
    hashes: u32,
}

impl FilterGeometry {
    /// The geometry this code writes for a run of `records`: [`FILTER_BITS_PER_RECORD`] bits
    /// each (at least one word), in as few segments of at most [`FILTER_SEGMENT_WORDS_MAX`]
    /// words as hold them.
    fn for_records(records: u64) -> FilterGeometry {
        let words = (records * FILTER_BITS_PER_RECORD).div_ceil(64).max(1);
        let segments = words.div_ceil(FILTER_SEGMENT_WORDS_MAX);
        let segment_words = words.div_ceil(segments);
        FilterGeometry {
            segments: u32::try_from(segments).expect("runs hold fewer than 2^40 records"),
            segment_words: u32::try_from(segment_words).expect("at most the segment maximum"),
            hashes: FILTER_HASHES,
        }
    }

    fn segment_bytes(&self) -> u64 {
        u64::from(self.segment_words) * FILTER_WORD_BYTES as u64
    }

    /// The filter's bytes, in memory and in its file.
    fn bytes(&self) -> u64 {
        u64::from(self.segments) * self.segment_bytes()
    }

    /// The segment `hash` falls in: its first eight bytes scaled to the segment count, so that
    /// segments follow hash order.
    fn segment_of(&self, hash: &Hash) -> u64 {
        let high = u64::from_be_bytes(hash[..8].try_into().expect("8 bytes"));
        scale(high, u64::from(self.segments))
    }

    /// The bits `hash` sets within its segment: double hashing on bytes 8..16 and 16..24 (the
    /// step odd, so that no two probes coincide for want of one).
    fn bits_of(&self, hash: &Hash) -> impl Iterator<Item = u64> {
        let start = u64::from_le_bytes(hash[8..16].try_into().expect("8 bytes"));
        let step = u64::from_le_bytes(hash[16..24].try_into().expect("8 bytes")) | 1;
        let segment_bits = u64::from(self.segment_words) * 64;
        (0..u64::from(self.hashes))
            .map(move |probe| scale(start.wrapping_add(probe.wrapping_mul(step)), segment_bits))
    }

    /// The three numbers as the trailer stores them (and its CRC covers).
    fn encode(&self) -> [u8; 12] {
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&self.segments.to_be_bytes());
        bytes[4..8].copy_from_slice(&self.segment_words.to_be_bytes());
        bytes[8..].copy_from_slice(&self.hashes.to_be_bytes());
        bytes
    }
}

/// `value` scaled from `0..2^64` to `0..range` (Lemire's multiply-shift: no division).
fn scale(value: u64, range: u64) -> u64 {
    u64::try_from((u128::from(value) * u128::from(range)) >> 64).expect("below range")
}

/// Where a run's filter is in its file, as the trailer says, and the CRC it must match.
#[derive(Clone, Copy, Debug)]
struct StoredFilter {
    geometry: FilterGeometry,
    crc: u32,
}

impl StoredFilter {
    /// The trailer of `run`'s filter, checked against the file's length.
    fn read(
        keyspace: &Keyspace,
        file: &dyn LogFile,
        run: &RunMeta,
    ) -> Result<StoredFilter, CtDbError> {
        let size = file.size()?;
        let trailer_start = run.blocks_end() + FILTER_TRAILER_BYTES as u64;
        if size < trailer_start {
            return Err(filter_damaged(
                keyspace,
                run,
                &format!(
                    "it is missing (the file is {size} bytes, its blocks {})",
                    run.blocks_end()
                ),
            ));
        }
        let mut trailer = [0u8; FILTER_TRAILER_BYTES];
        file.read_at(size - FILTER_TRAILER_BYTES as u64, &mut trailer)
            .map_err(|error| filter_damaged(keyspace, run, &error.to_string()))?;
        let number = |at: usize| u32::from_be_bytes(trailer[at..at + 4].try_into().expect("4"));
        if trailer[..4] != FILTER_MAGIC {
            return Err(filter_damaged(
                keyspace,
                run,
                "the file does not end in a filter trailer",
            ));
        }
        let geometry = FilterGeometry {
            segments: number(4),
            segment_words: number(8),
            hashes: number(12),
        };
        if geometry.segments == 0 || geometry.segment_words == 0 || geometry.hashes == 0 {
            return Err(filter_damaged(
                keyspace,
                run,
                &format!("its trailer says {geometry:?}"),
            ));
        }
        if trailer_start + geometry.bytes() != size {
            return Err(filter_damaged(
                keyspace,
                run,
                &format!(
                    "its trailer says {} bytes, the file holds {}",
                    geometry.bytes(),
                    size - trailer_start
                ),
            ));
        }
        Ok(StoredFilter {
            geometry,
            crc: number(16),
        })
    }
}

fn filter_damaged(keyspace: &Keyspace, run: &RunMeta, what: &str) -> CtDbError {
    CtDbError::Corrupt(format!(
        "the filter of {} run {}: {what}",
        keyspace.name, run.id
    ))
}

/// A run's Bloom filter in memory.
#[derive(Debug)]
struct Filter {
    geometry: FilterGeometry,
    words: Vec<u64>,
}

impl Filter {
    /// False if the run cannot hold `hash`.
    fn may_hold(&self, hash: &Hash) -> bool {
        let first_word = self.geometry.segment_of(hash) * u64::from(self.geometry.segment_words);
        self.geometry.bits_of(hash).all(|bit| {
            let word = usize::try_from(first_word + bit / 64).expect("within the filter");
            self.words[word] & (1 << (bit % 64)) != 0
        })
    }
}

/// A run's filter being written as its records go by, in hash order: one segment in memory,
/// written to the file when the records move past it.
#[derive(Debug)]
struct FilterWriter {
    keyspace: &'static Keyspace,
    geometry: FilterGeometry,
    /// Where the filter starts in the file.
    start: u64,
    /// The segment in `words`; those before it are written.
    segment: u64,
    words: Vec<u64>,
    crc: crc32fast::Hasher,
}

impl FilterWriter {
    /// The filter of a run of `records`, written from `start` on.
    fn new(keyspace: &'static Keyspace, records: u64, start: u64) -> FilterWriter {
        let geometry = FilterGeometry::for_records(records);
        FilterWriter {
            keyspace,
            geometry,
            start,
            segment: 0,
            words: vec![0; usize::try_from(geometry.segment_words).expect("a segment")],
            crc: crc32fast::Hasher::new(),
        }
    }

    /// Adds `hash`, at or after every hash added before.
    fn insert(&mut self, file: &dyn LogFile, hash: &Hash) -> Result<(), CtDbError> {
        let segment = self.geometry.segment_of(hash);
        if segment < self.segment {
            // Records come from sorted runs; only damaged ones could be out of order.
            return Err(CtDbError::Corrupt(format!(
                "{} records are out of hash order",
                self.keyspace.name
            )));
        }
        while self.segment < segment {
            self.write_segment(file)?;
        }
        for bit in self.geometry.bits_of(hash) {
            let word = usize::try_from(bit / 64).expect("within the segment");
            self.words[word] |= 1 << (bit % 64);
        }
        Ok(())
    }

    fn write_segment(&mut self, file: &dyn LogFile) -> Result<(), CtDbError> {
        assert!(self.segment < u64::from(self.geometry.segments));
        let bytes: Vec<u8> = self
            .words
            .iter()
            .flat_map(|word| word.to_le_bytes())
            .collect();
        self.crc.update(&bytes);
        file.write_at(
            self.start + self.segment * self.geometry.segment_bytes(),
            &bytes,
        )?;
        self.words.fill(0);
        self.segment += 1;
        Ok(())
    }

    /// Writes the segments left and the trailer (not synced: the caller syncs the run).
    fn finish(mut self, file: &dyn LogFile) -> Result<StoredFilter, CtDbError> {
        while self.segment < u64::from(self.geometry.segments) {
            self.write_segment(file)?;
        }
        let fields = self.geometry.encode();
        self.crc.update(&fields);
        let crc = self.crc.finalize();
        let mut trailer = Vec::with_capacity(FILTER_TRAILER_BYTES);
        trailer.extend_from_slice(&FILTER_MAGIC);
        trailer.extend_from_slice(&fields);
        trailer.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(trailer.len(), FILTER_TRAILER_BYTES);
        file.write_at(self.start + self.geometry.bytes(), &trailer)?;
        Ok(StoredFilter {
            geometry: self.geometry,
            crc,
        })
    }
}

fn flush_block(merge: &mut Merge) -> Result<(), CtDbError> {
    merge.fences.push(merge.block[0].0);
    let offset = merge.output.records * RECORD_BYTES as u64;
    merge.file.write_at(offset, &encode_block(&merge.block))?;
    for (hash, _) in &merge.block {
        merge.filter.insert(&*merge.file, hash)?;
    }
    merge.blocks_written += 1;
    merge.output.blocks += 1;
    merge.output.records += merge.block.len() as u64;
    merge.block.clear();
    Ok(())
}

fn read_meta(disk: &dyn Disk, keyspace: &Keyspace) -> Result<Meta, CtDbError> {
    match disk.get(&keyspace.meta_key())? {
        Some(bytes) => postcard::from_bytes(&bytes)
            .map_err(|error| CtDbError::Corrupt(format!("the {} meta: {error}", keyspace.name))),
        None => Ok(Meta::default()),
    }
}

fn put_fences(batch: &mut WriteBatch, keyspace: &Keyspace, run: u64, fences: &[Hash]) {
    for (chunk, hashes) in fences.chunks(FENCES_PER_CHUNK).enumerate() {
        batch.put(keyspace.fence_key(run, chunk as u64), hashes.concat());
    }
}

fn read_fences(
    disk: &dyn Disk,
    keyspace: &Keyspace,
    run: &RunMeta,
) -> Result<Vec<Hash>, CtDbError> {
    let blocks = usize::try_from(run.blocks()).unwrap_or(usize::MAX);
    let mut fences = Vec::with_capacity(blocks);
    for chunk in 0..blocks.div_ceil(FENCES_PER_CHUNK) {
        let bytes = disk
            .get(&keyspace.fence_key(run.id, chunk as u64))?
            .ok_or_else(|| {
                CtDbError::Corrupt(format!(
                    "fences {chunk} of {} run {} are missing",
                    keyspace.name, run.id
                ))
            })?;
        if !bytes.len().is_multiple_of(32) {
            return Err(CtDbError::Corrupt(format!(
                "{} fences are malformed",
                keyspace.name
            )));
        }
        fences.extend(
            bytes
                .chunks_exact(32)
                .map(|h| Hash::try_from(h).expect("32 bytes")),
        );
    }
    if fences.len() != blocks {
        return Err(CtDbError::Corrupt(format!(
            "{} run {} has {} fences for {blocks} blocks",
            keyspace.name,
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

fn decode_block(keyspace: &Keyspace, bytes: &[u8]) -> Result<Vec<(Hash, u64)>, CtDbError> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD_BYTES) {
        return Err(CtDbError::Corrupt(format!(
            "a block of the {} is malformed",
            keyspace.name
        )));
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

/// Cuts every run file back to its blocks, as runs were before they carried filters (for tests
/// of the layout before them).
#[cfg(test)]
pub(crate) fn remove_filters(
    disk: &dyn Disk,
    files: &DataFiles,
    keyspace: &Keyspace,
) -> Result<(), CtDbError> {
    for run in read_meta(disk, keyspace)?.runs {
        let file = files.get(&keyspace.run_file(run.id))?;
        file.set_len(run.blocks_end())?;
        file.sync_data()?;
    }
    Ok(())
}

/// Removes the index of `keyspace`, its keys and its run files, as a store from before it was
/// (for tests of the layout before the entry-key index).
#[cfg(test)]
pub(crate) fn remove_index(
    disk: &dyn Disk,
    files: &DataFiles,
    keyspace: &Keyspace,
) -> Result<(), CtDbError> {
    let mut batch = WriteBatch::new();
    batch.delete(keyspace.meta_key());
    for run in read_meta(disk, keyspace)?.runs {
        for chunk in 0..run.blocks().div_ceil(FENCES_PER_CHUNK as u64) {
            batch.delete(keyspace.fence_key(run.id, chunk));
        }
    }
    disk.write(batch)?;
    disk.flush()?;
    for name in files.named(keyspace.run_file_prefix)? {
        files.remove(&name)?;
    }
    Ok(())
}

/// The leaves the runs of `keyspace`'s index cover, as its stored meta says.
#[cfg(test)]
pub(crate) fn indexed_upto(disk: &dyn Disk, keyspace: &Keyspace) -> Result<u64, CtDbError> {
    Ok(read_meta(disk, keyspace)?.indexed_upto)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use certus_ct::merkle::leaf_hash;
    use proptest::prelude::*;

    use super::*;
    use crate::files::Files;
    use crate::{SimDisk, SimFiles};

    fn hash_of(n: u64) -> Hash {
        leaf_hash(&n.to_be_bytes())
    }

    /// Runs of `fresh` records, never merged, in blocks of 4.
    fn unmerged(fresh: usize, filter_bytes_max: usize) -> Shape {
        Shape {
            fresh_records_max: fresh,
            merge_fan_in: 1_000,
            merge_work_per_record: 1,
            block_records: 4,
            filter_bytes_max,
        }
    }

    /// An index on simulated storage, and the model it must answer as: every leaf's hash by
    /// sequence number (`None`: a leaf without a record).
    struct Harness {
        keyspace: &'static Keyspace,
        disk: Arc<SimDisk>,
        sim: Arc<SimFiles>,
        files: DataFiles,
        index: HashIndex,
        hashes: Vec<Option<Hash>>,
    }

    impl Harness {
        fn new(shape: Shape) -> Harness {
            Harness::on(
                Arc::new(SimDisk::new()),
                Arc::new(SimFiles::new()),
                &LEAF_HASHES,
                shape,
            )
        }

        /// An empty index of `keyspace` on `disk` and `sim`, which other indexes may share.
        fn on(
            disk: Arc<SimDisk>,
            sim: Arc<SimFiles>,
            keyspace: &'static Keyspace,
            shape: Shape,
        ) -> Harness {
            let files = DataFiles::new(Arc::clone(&sim) as Arc<dyn Files>);
            let index = HashIndex::open(&*disk, &files, keyspace, shape, 0).unwrap();
            Harness {
                keyspace,
                disk,
                sim,
                files,
                index,
                hashes: Vec::new(),
            }
        }

        /// One round of `hashes`, its batch written as the database writes it.
        fn add_round(&mut self, hashes: &[Hash]) {
            let hashes: Vec<Option<Hash>> = hashes.iter().copied().map(Some).collect();
            self.add_leaves(&hashes);
        }

        /// One round of leaves, some of them without a record.
        fn add_leaves(&mut self, hashes: &[Option<Hash>]) {
            let first = self.hashes.len() as u64;
            let records = (first..)
                .zip(hashes)
                .filter_map(|(sequence, hash)| Some(((*hash)?, sequence)))
                .collect();
            let mut batch = WriteBatch::new();
            self.index
                .add_round(
                    &self.files,
                    &mut batch,
                    first + hashes.len() as u64,
                    records,
                )
                .unwrap();
            self.disk.write(batch).unwrap();
            self.disk.flush().unwrap();
            self.hashes.extend_from_slice(hashes);
        }

        /// Opens the index again, as a restarted node does (its files opened anew).
        fn reopen(&mut self, shape: Shape) -> Result<(), CtDbError> {
            self.files = DataFiles::new(Arc::clone(&self.sim) as Arc<dyn Files>);
            let hashes = &self.hashes;
            let size = hashes.len() as u64;
            self.index = HashIndex::open(&*self.disk, &self.files, self.keyspace, shape, size)?;
            self.index.read_back(size, |from, to| {
                let (from, to) = (usize::try_from(from).unwrap(), usize::try_from(to).unwrap());
                Ok((from as u64..)
                    .zip(&hashes[from..to])
                    .filter_map(|(sequence, hash)| Some(((*hash)?, sequence)))
                    .collect())
            })?;
            assert_eq!(self.index.covered(), size);
            Ok(())
        }

        fn run(&self, at: usize) -> RunMeta {
            self.index.meta.runs[at].clone()
        }

        /// The file of run `run`, opened past the index's own handles.
        fn run_file(&self, run: &RunMeta) -> Arc<dyn LogFile> {
            self.sim.open(&self.keyspace.run_file(run.id)).unwrap()
        }

        /// Every leaf with a record is found at its first number.
        fn check_present(&self) {
            let view = self.index.view();
            let mut first = BTreeMap::new();
            for (sequence, hash) in self.hashes.iter().enumerate() {
                if let Some(hash) = hash {
                    first.entry(*hash).or_insert(sequence as u64);
                }
            }
            for (hash, sequence) in first {
                assert_eq!(view.lookup(&hash).unwrap(), Some(sequence));
            }
        }
    }

    /// The blocks read by looking up each of `hashes`, none of which is indexed.
    fn blocks_read_for_absent(view: &IndexView, hashes: &[Hash]) -> u64 {
        let mut blocks_read = 0;
        for hash in hashes {
            assert_eq!(view.lookup_reading(hash, &mut blocks_read).unwrap(), None);
        }
        blocks_read
    }

    #[test]
    fn filters_skip_the_runs_that_cannot_hold_the_hash() {
        let runs = 30u64;
        let mut harness = Harness::new(unmerged(64, usize::MAX));
        for round in 0..runs {
            let hashes: Vec<Hash> = (round * 64..(round + 1) * 64).map(hash_of).collect();
            harness.add_round(&hashes);
        }
        assert_eq!(harness.index.meta.runs.len() as u64, runs);
        let absent: Vec<Hash> = (1_000_000..1_001_000).map(hash_of).collect();
        let lookups = absent.len() as u64;

        // Each run lets about 0.8 % of absent hashes through its filter.
        let view = harness.index.view();
        let filtered = blocks_read_for_absent(&view, &absent);
        assert!(
            filtered * 20 < runs * lookups,
            "{filtered} blocks read for {lookups} absent hashes in {runs} runs"
        );
        // Present hashes are all found, at their numbers.
        harness.check_present();
        // The filters are what memory holds beside the fences: 10 bits a record, in words.
        let filter_bytes = view.filter_bytes();
        assert_eq!(filter_bytes, runs * 80);
        assert_eq!(view.memory_bytes(), runs * 16 * 32 + filter_bytes);

        // Without filters in memory, a lookup reads a block in nearly every run.
        harness.reopen(unmerged(64, 0)).unwrap();
        let view = harness.index.view();
        assert_eq!(view.filter_bytes(), 0);
        let unfiltered = blocks_read_for_absent(&view, &absent);
        assert!(
            unfiltered * 10 > runs * lookups * 9,
            "{unfiltered} blocks read without filters"
        );

        // With room for a third of them, the older runs keep theirs (all runs are the same size).
        harness.reopen(unmerged(64, 10 * 80)).unwrap();
        let view = harness.index.view();
        let kept: Vec<bool> = view.runs.iter().map(|run| run.filter.is_some()).collect();
        assert_eq!(kept, (0..runs).map(|at| at < 10).collect::<Vec<_>>());
        let partly = blocks_read_for_absent(&view, &absent);
        assert!(partly < unfiltered && partly > filtered);
    }

    #[test]
    fn a_filter_of_several_segments_lets_about_one_absent_hash_in_a_hundred_through() {
        let records = 200_000u64;
        let mut harness = Harness::new(unmerged(usize::try_from(records).unwrap(), usize::MAX));
        let hashes: Vec<Hash> = (0..records).map(hash_of).collect();
        harness.add_round(&hashes);
        let view = harness.index.view();
        let filter = view.runs[0].filter.as_ref().expect("kept");
        assert_eq!(filter.geometry.segments, 4);
        assert!(hashes.iter().all(|hash| filter.may_hold(hash)));
        let absent = 100_000u64;
        let passed = (records..records + absent)
            .filter(|&n| filter.may_hold(&hash_of(n)))
            .count() as u64;
        // (1 − e^(−0.7))^7 ≈ 0.82 %.
        assert!(passed * 1_000 < absent * 11, "{passed} of {absent} passed");
        assert!(passed * 1_000 > absent * 5, "{passed} of {absent} passed");
    }

    #[test]
    fn no_keyspace_reaches_into_another() {
        // Files are matched by prefix, keys scanned by prefix: neither may start with another's.
        let keyspaces = [&LEAF_HASHES, &ENTRY_KEYS];
        for a in keyspaces {
            for b in keyspaces.into_iter().filter(|&b| b != a) {
                assert!(
                    !a.run_file_prefix.starts_with(b.run_file_prefix),
                    "{a:?} {b:?}"
                );
                assert!(!a.disk_prefix.starts_with(b.disk_prefix), "{a:?} {b:?}");
            }
        }
        // The leaf index's names are those stores have always had.
        assert_eq!(LEAF_HASHES.meta_key(), b"ct/index/meta");
        assert_eq!(
            LEAF_HASHES.fence_key(1, 2),
            [
                &b"ct/index/fence/"[..],
                &1u64.to_be_bytes(),
                &2u64.to_be_bytes()
            ]
            .concat()
        );
        assert_eq!(LEAF_HASHES.run_file(7), "index-00000000000000000007");

        // Two indexes on one disk and one directory, given the same hashes at other numbers,
        // through runs, merges (and their garbage) and reopening: each answers its own.
        let shape = Shape {
            fresh_records_max: 10,
            merge_fan_in: 2,
            merge_work_per_record: 1,
            block_records: 3,
            filter_bytes_max: usize::MAX,
        };
        let mut leaves = Harness::new(shape);
        let mut keys = Harness::on(
            Arc::clone(&leaves.disk),
            Arc::clone(&leaves.sim),
            &ENTRY_KEYS,
            shape,
        );
        for round in 0..12u64 {
            let hashes: Vec<Hash> = (round * 10..(round + 1) * 10).map(hash_of).collect();
            leaves.add_round(&hashes);
            // The entry keys' index gets them in reverse and a round later.
            let mut reversed = hashes.clone();
            reversed.reverse();
            keys.add_leaves(&[None]);
            keys.add_round(&reversed);
            for harness in [&mut leaves, &mut keys] {
                harness.check_present();
                if round % 4 == 3 {
                    harness.reopen(shape).unwrap();
                    harness.check_present();
                }
            }
        }
        let named = |harness: &Harness| -> Vec<String> {
            let mut names: Vec<String> = harness
                .index
                .meta
                .runs
                .iter()
                .map(|run| harness.keyspace.run_file(run.id))
                .collect();
            names.sort();
            names
        };
        let mut all = named(&leaves);
        all.extend(named(&keys));
        all.sort();
        let mut listed = leaves.sim.list().unwrap();
        listed.sort();
        assert_eq!(listed, all, "every file is a run of one index's metadata");
        assert_eq!(leaves.index.view().lookup(&hash_of(3)).unwrap(), Some(3));
        assert_eq!(keys.index.view().lookup(&hash_of(3)).unwrap(), Some(7));
    }

    #[test]
    fn an_index_covers_leaves_without_records() {
        // Runs of 8 records; every other leaf has none.
        let shape = unmerged(8, usize::MAX);
        let mut harness = Harness::new(shape);
        let leaves: Vec<Option<Hash>> = (0..100u64)
            .map(|n| (n % 2 == 1).then(|| hash_of(n)))
            .collect();
        for round in leaves.chunks(7) {
            harness.add_leaves(round);
            let covered = harness.hashes.len() as u64;
            assert_eq!(harness.index.covered(), covered);
            // A run is written once 8 records collect, and covers every leaf added so far: at
            // most 7 records (14 leaves) are past the runs.
            let upto = harness.index.meta.indexed_upto;
            assert!(covered - upto <= 14, "{upto} of {covered}");
            assert_eq!(upto == covered, harness.index.fresh_records == 0);
        }
        let in_runs: u64 = harness.index.meta.runs.iter().map(|run| run.records).sum();
        assert!(harness.index.meta.runs.len() >= 4);
        harness.check_present();
        for n in (0..100).step_by(2) {
            assert_eq!(harness.index.view().lookup(&hash_of(n)).unwrap(), None);
        }
        // What is read back at open starts where the runs end, a leaf and not a record count.
        harness.reopen(shape).unwrap();
        harness.check_present();
        assert_eq!(harness.index.fresh_records as u64, 50 - in_runs);
    }

    #[test]
    fn the_largest_runs_keep_their_filters_within_the_bound() {
        // (records, filter bytes), oldest first.
        let runs = [(10, 100), (80, 800), (10, 100), (640, 6_400), (80, 800)];
        assert_eq!(filters_kept(&runs, 0), [false; 5]);
        assert_eq!(filters_kept(&runs, 8_200), [true; 5]);
        // The largest first, then the older of the two of 80 records; the rest fits the
        // smaller ones.
        assert_eq!(filters_kept(&runs, 7_400), [true, true, true, true, false]);
        // The largest does not fit: the others take what there is.
        assert_eq!(filters_kept(&runs, 1_000), [true, true, true, false, false]);
    }

    #[test]
    fn a_damaged_or_missing_filter_is_refused() {
        let mut harness = Harness::new(unmerged(40, usize::MAX));
        for round in 0..3 {
            let hashes: Vec<Hash> = (round * 40..(round + 1) * 40).map(hash_of).collect();
            harness.add_round(&hashes);
        }
        let run = harness.run(1);
        let file = harness.run_file(&run);
        let size = file.size().unwrap();
        let filter_bytes = FilterGeometry::for_records(run.records).bytes();
        assert_eq!(
            size,
            run.blocks_end() + filter_bytes + FILTER_TRAILER_BYTES as u64
        );
        let original = harness.sim.contents(&LEAF_HASHES.run_file(run.id)).unwrap();
        let restore = |harness: &mut Harness| {
            let file = harness.run_file(&run);
            file.set_len(0).unwrap();
            file.write_at(0, &original).unwrap();
            harness.reopen(unmerged(40, usize::MAX)).unwrap();
            harness.check_present();
        };
        let refused = |harness: &mut Harness, filter_bytes_max: usize, what: &str| match harness
            .reopen(unmerged(40, filter_bytes_max))
        {
            Err(CtDbError::Corrupt(message)) => {
                assert!(message.contains(what), "{message}");
                assert!(message.contains(&format!("run {}", run.id)), "{message}");
            }
            other => panic!("{what}: {other:?}"),
        };

        // A flipped bit in the filter: its CRC catches it when it is loaded. Not kept in memory,
        // it is not read, and lookups probe the run as they did before filters.
        file.write_at(
            run.blocks_end() + 3,
            &[original[usize::try_from(run.blocks_end()).unwrap() + 3] ^ 0x10],
        )
        .unwrap();
        refused(&mut harness, usize::MAX, "checksum");
        harness.reopen(unmerged(40, 0)).unwrap();
        assert_eq!(harness.index.view().lookup(&hash_of(50)).unwrap(), Some(50));
        restore(&mut harness);

        // A damaged trailer is caught at open whatever the bound.
        file.write_at(size - 20, b"xbf1").unwrap();
        refused(&mut harness, 0, "filter trailer");
        restore(&mut harness);
        file.write_at(size - 16, &[0, 0, 0, 9]).unwrap();
        refused(&mut harness, 0, "the file holds");
        restore(&mut harness);
        file.write_at(size - 8, &[0, 0, 0, 0]).unwrap();
        refused(&mut harness, 0, "its trailer says");
        restore(&mut harness);

        // A missing filter (the run as it was before filters), and a file longer than its
        // filter.
        file.set_len(run.blocks_end()).unwrap();
        refused(&mut harness, 0, "missing");
        restore(&mut harness);
        file.write_at(size, &[0; 8]).unwrap();
        refused(&mut harness, 0, "filter trailer");
        restore(&mut harness);
    }

    #[test]
    fn runs_without_filters_get_them_from_their_blocks() {
        let shape = Shape {
            fresh_records_max: 10,
            merge_fan_in: 2,
            merge_work_per_record: 1,
            block_records: 3,
            filter_bytes_max: usize::MAX,
        };
        let mut harness = Harness::new(shape);
        for round in 0..9 {
            let hashes: Vec<Hash> = (round * 10..(round + 1) * 10).map(hash_of).collect();
            harness.add_round(&hashes);
        }
        let written: Vec<Vec<u8>> = harness
            .index
            .meta
            .runs
            .iter()
            .map(|run| harness.sim.contents(&LEAF_HASHES.run_file(run.id)).unwrap())
            .collect();
        remove_filters(&*harness.disk, &harness.files, &LEAF_HASHES).unwrap();
        assert!(matches!(harness.reopen(shape), Err(CtDbError::Corrupt(_))));
        add_filters(&*harness.disk, &harness.files, &LEAF_HASHES, shape).unwrap();
        // The same files as written with their runs; and again, the same.
        for _ in 0..2 {
            for (run, bytes) in harness.index.meta.runs.iter().zip(&written) {
                assert_eq!(
                    harness.sim.contents(&LEAF_HASHES.run_file(run.id)).as_ref(),
                    Some(bytes)
                );
            }
            add_filters(&*harness.disk, &harness.files, &LEAF_HASHES, shape).unwrap();
        }
        harness.reopen(shape).unwrap();
        let view = harness.index.view();
        assert!(view.runs.iter().all(|run| run.filter.is_some()));
        harness.check_present();
    }

    proptest! {
        /// Interpolating finds what bisecting finds, for hashes spread evenly or bunched.
        #[test]
        fn interpolation_finds_the_first_record_not_below(
            numbers in proptest::collection::vec(0u64..5_000, 0..400),
            bunched in any::<bool>(),
            probe in 0u64..5_200,
        ) {
            let hash = |n: u64| -> Hash {
                if bunched {
                    // Equal prefixes, order decided by the last bytes.
                    let mut hash = [7u8; 32];
                    hash[24..].copy_from_slice(&n.to_be_bytes());
                    hash
                } else {
                    hash_of(n)
                }
            };
            let mut records: Vec<(Hash, u64)> = numbers.iter().map(|&n| (hash(n), n)).collect();
            records.sort_unstable();
            let target = hash(probe);
            prop_assert_eq!(
                first_not_below(&records, &target),
                records.partition_point(|(h, _)| *h < target)
            );
        }

        /// Fresh chunks stay sorted, hold every record pushed, and shrink geometrically from the
        /// oldest to the newest, so a lookup searches few of them.
        #[test]
        fn fresh_chunks_stay_few_and_hold_every_record(
            sizes in proptest::collection::vec(1usize..300, 1..200),
        ) {
            let mut fresh = Vec::new();
            let mut all = Vec::new();
            let mut sequence = 0u64;
            for size in sizes {
                let mut chunk: Vec<(Hash, u64)> = (sequence..sequence + size as u64)
                    .map(|n| (hash_of(n % 97), n))
                    .collect();
                sequence += size as u64;
                chunk.sort_unstable();
                all.extend_from_slice(&chunk);
                push_fresh(&mut fresh, chunk);
                for pair in fresh.windows(2) {
                    prop_assert!(pair[0].len() > 2 * pair[1].len());
                }
                for chunk in &fresh {
                    prop_assert!(chunk.windows(2).all(|pair| pair[0] <= pair[1]));
                }
            }
            let mut held: Vec<(Hash, u64)> =
                fresh.iter().flat_map(|chunk| chunk.iter().copied()).collect();
            held.sort_unstable();
            all.sort_unstable();
            prop_assert_eq!(held, all);
        }
    }

    proptest! {
        /// Across rounds, merges, reopenings and changes of the memory bound, the index answers
        /// as a map of each hash to its first number, and keeps within the bound.
        #[test]
        fn lookups_answer_as_a_map_of_first_numbers(
            steps in proptest::collection::vec((0u8..6, 0u64..30), 1..40),
            fresh_records_max in 1usize..20,
            merge_fan_in in 2usize..4,
            merge_work_per_record in 1usize..4,
            block_records in 1usize..6,
            filter_bytes_max in prop_oneof![Just(0usize), 0usize..300, Just(usize::MAX)],
        ) {
            let mut shape = Shape {
                fresh_records_max,
                merge_fan_in,
                merge_work_per_record,
                block_records,
                filter_bytes_max,
            };
            let mut harness = Harness::new(shape);
            let mut model: BTreeMap<Hash, u64> = BTreeMap::new();
            for (kind, amount) in steps {
                match kind {
                    0..=3 => {
                        let first = harness.hashes.len() as u64;
                        // Kind 0 repeats hashes from a small pool; kind 3 leaves every third
                        // leaf without a record; the others are new.
                        let hashes: Vec<Option<Hash>> = (first..first + amount)
                            .map(|sequence| match kind {
                                0 => Some(hash_of(sequence % 23)),
                                3 if sequence % 3 == 0 => None,
                                _ => Some(hash_of(1_000_000 + sequence)),
                            })
                            .collect();
                        for (hash, sequence) in hashes.iter().zip(first..) {
                            if let Some(hash) = hash {
                                model.entry(*hash).or_insert(sequence);
                            }
                        }
                        harness.add_leaves(&hashes);
                    }
                    4 => harness.reopen(shape).unwrap(),
                    _ => {
                        shape.filter_bytes_max = usize::try_from(amount * 40).unwrap();
                        harness.reopen(shape).unwrap();
                    }
                }
                prop_assert_eq!(harness.index.covered(), harness.hashes.len() as u64);
                prop_assert!(harness.index.meta.indexed_upto <= harness.index.covered());
                let view = harness.index.view();
                prop_assert!(view.filter_bytes() <= shape.filter_bytes_max as u64);
                for (hash, first) in &model {
                    prop_assert_eq!(view.lookup(hash).unwrap(), Some(*first));
                }
                for absent in 2_000_000..2_000_020 {
                    prop_assert_eq!(view.lookup(&hash_of(absent)).unwrap(), None);
                }
            }
        }

        /// Whatever the runs, the filters kept fit the bound, and each one left out would not
        /// have fitted in what is left.
        #[test]
        fn the_filters_kept_fit_and_leave_no_room_for_another(
            runs in proptest::collection::vec((1u64..10_000, 1u64..2_000), 0..30),
            bytes_max in 0u64..20_000,
        ) {
            let kept = filters_kept(&runs, bytes_max);
            let used: u64 = runs.iter().zip(&kept).filter(|(_, kept)| **kept).map(|((_, bytes), _)| bytes).sum();
            prop_assert!(used <= bytes_max);
            for ((_, bytes), kept) in runs.iter().zip(&kept) {
                prop_assert!(*kept || *bytes > bytes_max - used);
            }
        }
    }
}
