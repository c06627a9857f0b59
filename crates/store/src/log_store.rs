//! The Raft log and vote as openraft's `RaftLogStorage`: entries in the [`SegmentLog`], the
//! vote, the committed pointer and the purge point on a [`Disk`].
//!
//! Durability contracts (openraft's, and what the simulation checks): a vote is flushed before
//! `save_vote` returns; appended entries are synced before the `LogFlushed` callback fires;
//! truncation is synced before it returns, so a truncated suffix cannot come back; a purge
//! flushes the new purge point before it removes segments, so a crash in between leaves only
//! segments below the purge point, which are never read and are removed at the next open. The
//! committed pointer is written by the next append and is durable with the disk's next flush.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::CertusConfig;
use crate::disk::{Disk, DiskError, WriteBatch};
use crate::files::Files;
use crate::keys::{COMMITTED, LAST_PURGED, LOG_PREFIX, VOTE, log_end};
use crate::limits::{REPLICATION_READ_BYTES_MAX, REPLICATION_READ_ENTRIES_MAX};
use crate::segment_log::{SegmentLog, SyncRunner};

/// Old-layout log entries moved from the disk into the segmented log per round at open.
const MIGRATION_ENTRIES_PER_ROUND: usize = 1024;

/// How one append went, for the node's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendTiming {
    /// Entries appended.
    pub entries: usize,
    /// Writing them into the store (visible, not yet durable).
    pub write: Duration,
    /// From the write's end until the sync that made them durable completed (shared with
    /// other appends waiting at the same time).
    pub flush: Duration,
}

/// Told of every successful append once it is durable. Runs on the log's flusher: keep it short.
#[derive(Clone)]
pub struct AppendObserver(Arc<dyn Fn(AppendTiming) + Send + Sync>);

impl AppendObserver {
    /// An observer calling `observe`.
    pub fn new(observe: impl Fn(AppendTiming) + Send + Sync + 'static) -> AppendObserver {
        AppendObserver(Arc::new(observe))
    }
}

impl Debug for AppendObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppendObserver")
    }
}

/// The log store; clones share the disk and the log and serve as log readers.
#[derive(Debug)]
pub struct LogStore<C, D> {
    disk: Arc<D>,
    log: SegmentLog,
    observer: Option<AppendObserver>,
    /// The committed pointer openraft saved last, encoded, until the next append writes it
    /// (see `save_committed`).
    committed: Arc<Mutex<Option<Vec<u8>>>>,
    _config: PhantomData<C>,
}

impl<C, D> Clone for LogStore<C, D> {
    fn clone(&self) -> Self {
        LogStore {
            disk: Arc::clone(&self.disk),
            log: self.log.clone(),
            observer: self.observer.clone(),
            committed: Arc::clone(&self.committed),
            _config: PhantomData,
        }
    }
}

impl<C: CertusConfig, D: Disk> LogStore<C, D> {
    /// Opens the log store: the vote and metadata on `disk`, the entries in segments of
    /// `segment_bytes` in `files` (recovered as [`SegmentLog::open`] says). Entries a disk of
    /// the old layout still holds (keys `log/<index>`) are moved into the segments first.
    pub fn open(
        disk: Arc<D>,
        files: Arc<dyn Files>,
        segment_bytes: u64,
    ) -> Result<LogStore<C, D>, DiskError> {
        let purged: Option<LogId<C::NodeId>> = read_meta(disk.as_ref(), LAST_PURGED)?;
        let log = SegmentLog::open(files, segment_bytes, purged.map(|p| p.index))?;
        let store = LogStore {
            disk,
            log,
            observer: None,
            committed: Arc::default(),
            _config: PhantomData,
        };
        store.migrate_from_disk()?;
        Ok(store)
    }

    /// Moves the entries of the old layout (one disk key per entry) into the segmented log:
    /// appended and synced, then deleted from the disk in one batch and flushed. A crash in
    /// between leaves them in both; the next open moves them again (an append at an index the
    /// log holds replaces it and what follows).
    fn migrate_from_disk(&self) -> Result<(), DiskError> {
        let end = log_end();
        let mut from = Bound::Included(LOG_PREFIX.to_vec());
        let mut keys = Vec::new();
        let purged = self.log_purged()?;
        loop {
            let pairs = self.disk.scan(
                from.as_ref().map(Vec::as_slice),
                Bound::Excluded(&end),
                false,
                MIGRATION_ENTRIES_PER_ROUND,
            )?;
            let Some((last_key, _)) = pairs.last() else {
                break;
            };
            from = Bound::Excluded(last_key.clone());
            let mut records = Vec::with_capacity(pairs.len());
            for (key, bytes) in pairs {
                let entry: C::Entry = decode(&bytes)?;
                if purged.is_none_or(|purged| entry.log_id.index > purged) {
                    records.push((entry.log_id.index, bytes));
                }
                keys.push(key);
            }
            self.log.append(&records)?;
        }
        if keys.is_empty() {
            return Ok(());
        }
        self.log.sync()?;
        let mut batch = WriteBatch::new();
        for key in keys {
            batch.delete(key);
        }
        self.disk.write(batch)?;
        self.disk.flush()
    }

    fn log_purged(&self) -> Result<Option<u64>, DiskError> {
        let purged: Option<LogId<C::NodeId>> = self.read_meta(LAST_PURGED)?;
        Ok(purged.map(|p| p.index))
    }

    /// The segmented log under this store.
    pub fn segment_log(&self) -> &SegmentLog {
        &self.log
    }

    /// The same store, its appends synced by `runner` where there is no flusher thread (the
    /// simulation: see [`SyncRunner`]).
    pub fn with_sync_runner(self, runner: SyncRunner) -> LogStore<C, D> {
        self.log.set_sync_runner(runner);
        self
    }

    /// The same store, telling `observer` how each append went.
    pub fn with_observer(mut self, observer: AppendObserver) -> LogStore<C, D> {
        self.observer = Some(observer);
        self
    }

    /// Writes the committed pointer saved since the last append, if any. A write of its own:
    /// a lone put costs the store less than a larger batch (see `SledDisk::write`). The entries
    /// it points to were flushed by earlier appends: openraft 0.9 runs a commit only after the
    /// append before it has flushed (0.10 no longer waits; revisit this then).
    fn write_saved_committed(&self) -> Result<(), DiskError> {
        let saved = self
            .committed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(bytes) = saved else {
            return Ok(());
        };
        let mut batch = WriteBatch::new();
        batch.put(COMMITTED, bytes);
        self.disk.write(batch)
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, DiskError> {
        read_meta(self.disk.as_ref(), key)
    }

    fn last_entry(&self) -> Result<Option<C::Entry>, DiskError> {
        let Some(last) = self.log.last_index() else {
            return Ok(None);
        };
        let read = self
            .log
            .read(Bound::Included(last), Bound::Included(last), 1, usize::MAX)?;
        read.first().map(|(_, bytes)| decode(bytes)).transpose()
    }

    /// Appends `entries` and syncs: when this returns `Ok`, they survive a crash.
    pub fn append_durably(
        &self,
        entries: impl IntoIterator<Item = C::Entry>,
    ) -> Result<(), DiskError> {
        let records = encode_entries::<C>(entries);
        self.write_saved_committed()?;
        self.log.append(&records)?;
        self.log.sync()
    }

    /// Records `purged` as the purge point (flushed), then removes the segments below it: a
    /// crash in between leaves segments that are never read and are removed at the next open.
    fn purge_to(&self, purged: LogId<C::NodeId>) -> Result<(), DiskError> {
        let mut batch = WriteBatch::new();
        batch.put(LAST_PURGED, encode(&purged));
        self.disk.write(batch)?;
        self.disk.flush()?;
        self.log.purge(purged.index)
    }

    /// Finishes a purge that a snapshot install deferred, before openraft reads the log at
    /// start. openraft purges a follower's log right after queueing a snapshot install, before
    /// the snapshot is on disk, so `purge` stops at the snapshot already there; a crash before
    /// the next purge leaves a log that says it was purged only up to the older snapshot, with
    /// a hole below the new one and entries of an older term beneath it, and openraft then
    /// refuses to start (it reads the entry at the snapshot's index). Everything up to the
    /// snapshot on disk is covered by it: purged here, in one batch, and flushed.
    pub fn purge_behind_saved_snapshot(&self) -> Result<(), DiskError> {
        let Some(saved) = crate::state_machine::saved_snapshot_log_id::<C, D>(&self.disk)? else {
            return Ok(());
        };
        let purged: Option<LogId<C::NodeId>> = self.read_meta(LAST_PURGED)?;
        if purged.is_some_and(|purged| purged.index >= saved.index) {
            return Ok(());
        }
        self.purge_to(saved)
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_allocvec(value).expect("log values always encode")
}

fn encode_entries<C: CertusConfig>(
    entries: impl IntoIterator<Item = C::Entry>,
) -> Vec<(u64, Vec<u8>)> {
    entries
        .into_iter()
        .map(|entry| (entry.log_id.index, encode(&entry)))
        .collect()
}

fn read_meta<T: DeserializeOwned>(disk: &impl Disk, key: &[u8]) -> Result<Option<T>, DiskError> {
    disk.get(key)?.map(|bytes| decode(&bytes)).transpose()
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DiskError> {
    postcard::from_bytes(bytes).map_err(|e| DiskError(format!("undecodable record: {e}")))
}

fn read_err<C: CertusConfig>(e: DiskError) -> StorageError<C::NodeId> {
    StorageIOError::read_logs(&e).into()
}

fn write_err<C: CertusConfig>(e: DiskError) -> StorageError<C::NodeId> {
    StorageIOError::write_logs(&e).into()
}

impl<C: CertusConfig, D: Disk> RaftLogReader<C> for LogStore<C, D> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let records = self
            .log
            .read(
                range.start_bound().cloned(),
                range.end_bound().cloned(),
                usize::MAX,
                usize::MAX,
            )
            .map_err(read_err::<C>)?;
        let entries: Result<Vec<C::Entry>, DiskError> =
            records.iter().map(|(_, bytes)| decode(bytes)).collect();
        entries.map_err(read_err::<C>)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let records = self
            .log
            .read(
                Bound::Included(start),
                Bound::Excluded(end),
                REPLICATION_READ_ENTRIES_MAX,
                REPLICATION_READ_BYTES_MAX,
            )
            .map_err(read_err::<C>)?;
        let entries: Result<Vec<C::Entry>, DiskError> =
            records.iter().map(|(_, bytes)| decode(bytes)).collect();
        entries.map_err(read_err::<C>)
    }
}

impl<C: CertusConfig, D: Disk> RaftLogStorage<C> for LogStore<C, D> {
    type LogReader = LogStore<C, D>;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let last_purged_log_id: Option<LogId<C::NodeId>> =
            self.read_meta(LAST_PURGED).map_err(read_err::<C>)?;
        let last = self
            .last_entry()
            .map_err(read_err::<C>)?
            .map(|entry| entry.log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last.or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let mut batch = WriteBatch::new();
        batch.put(VOTE, encode(vote));
        let durable = self.disk.write(batch).and_then(|()| self.disk.flush());
        durable.map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.read_meta(VOTE)
            .map_err(|e| StorageIOError::read_vote(&e).into())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        // Not written here: the next append writes it, and the disk's next flush makes it
        // durable (sled's own, every half second, or a vote's, a snapshot's, a purge's), so a
        // restart, clean or not, may find the last rounds' pointer missing. A pointer that
        // rolled back only means re-applying from the snapshot; the one
        // reader it could mislead, a leader that resumes leading in its old term and names a
        // read index from it, reads no lower than its log's end at start instead (the node's
        // `BootLog`). Writing and flushing it on every commit cost a second store write and
        // fsync per Raft round on every node.
        *self
            .committed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(encode(&committed));
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        let saved = self
            .committed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let committed = match saved {
            Some(bytes) => Some(decode::<Option<LogId<C::NodeId>>>(&bytes).map_err(read_err::<C>)?),
            None => self.read_meta(COMMITTED).map_err(read_err::<C>)?,
        };
        Ok(committed.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Acknowledged only once on disk: a vote for this log, or a commit counting this node,
        // must survive a crash. The write is visible at once; the callback fires after the sync,
        // which the log runs on its flusher and shares with other appends waiting.
        // Timed for the metrics only: nothing decides by these clocks.
        let started = Instant::now();
        let records = encode_entries::<C>(entries);
        let count = records.len();
        let written = self
            .write_saved_committed()
            .and_then(|()| self.log.append(&records));
        if let Err(error) = written {
            callback.log_io_completed(Err(std::io::Error::other(error.clone())));
            return Err(write_err::<C>(error));
        }
        let written = Instant::now();
        let observer = self.observer.clone();
        self.log.sync_then(Box::new(move |synced| {
            if let (Ok(()), Some(observer)) = (&synced, observer) {
                (observer.0)(AppendTiming {
                    entries: count,
                    write: written.duration_since(started),
                    flush: written.elapsed(),
                });
            }
            callback.log_io_completed(synced.map_err(std::io::Error::other));
        }));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.log.truncate(log_id.index).map_err(write_err::<C>)
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        // Never purge past the snapshot on disk. openraft orders a follower's purge right after
        // it queues a snapshot install, possibly before the snapshot is written; purging first
        // and crashing before the snapshot lands would leave entries that exist nowhere. What is
        // left is purged after the next snapshot. With no snapshot at all the purge is done as
        // asked (openraft's contract, checked by its Suite); see docs/architecture.md for the
        // window that leaves on a node's very first snapshot install.
        let saved = crate::state_machine::saved_snapshot_log_id::<C, D>(&self.disk)
            .map_err(read_err::<C>)?;
        let log_id = match saved {
            Some(saved) if saved.index < log_id.index => saved,
            _ => log_id,
        };
        self.purge_to(log_id).map_err(write_err::<C>)
    }
}
