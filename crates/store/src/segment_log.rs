//! The Raft log's entries in append-only segment files, beside sled.
//!
//! A segment is a file named by the index of its first entry, preallocated to the segment size
//! and filled front to back by one writer. It starts with a header (a magic, its first index and
//! the index of the entry before it) and holds records `[payload length | CRC-32 | index |
//! payload]`, the CRC over the other three. Records in a segment have consecutive indexes from its
//! first; the header's "entry before" chains the segments, so a missing segment is noticed.
//!
//! Durability: appends are written at once and made durable by `sync`/`sync_then`, which group
//! every append waiting into one `sync_data` on a flusher thread (under madsim, where no thread
//! may run, on the simulation's own task after a simulated sync latency, or inline). A segment is synced before the next one is created, so only the last
//! segment can hold writes a crash tore. Recovery at open therefore cuts the last segment at its
//! first torn, damaged or absent (zero) record — those bytes were never acknowledged — while a bad
//! record in an earlier, sealed segment is damage: the log refuses to open ([`CORRUPT`]).
//!
//! Truncating a suffix removes later segments (newest first, the directory synced after each)
//! and then cuts the segment holding the index, synced before returning: any crash leaves a
//! prefix of the old log. Purging removes whole segments below the purge point, which the
//! caller records durably first (sled's `LAST_PURGED`); segments a crash left behind below it are
//! removed at open.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::disk::{DiskError, FlushDone};
use crate::files::{Files, LogFile};
use crate::limits::SEGMENT_BYTES_MIN;
use crate::sled_disk::CORRUPT;

/// The size a segment is preallocated to; a new segment starts when the next record does not
/// fit (a single larger record gets a segment of its own, grown past this).
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

const SEGMENT_MAGIC: &[u8; 8] = b"CRTSLOG1";
const SEGMENT_HEADER_LEN: usize = 32;
pub(crate) const SEGMENT_HEADER_BYTES: u64 = SEGMENT_HEADER_LEN as u64;
const RECORD_HEADER_LEN: usize = 16;
pub(crate) const RECORD_HEADER_BYTES: u64 = RECORD_HEADER_LEN as u64;
// The bound on segment sizes is written as a number in `limits.rs`: it must hold a header and
// a record header of this format.
const _: () = assert!(
    SEGMENT_BYTES_MIN == SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES,
    "SEGMENT_BYTES_MIN must be a segment header and a record header"
);
const SEGMENT_SUFFIX: &str = ".seg";

fn segment_name(first: u64) -> String {
    format!("{first:020}{SEGMENT_SUFFIX}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn segment_header(first: u64, prev: Option<u64>) -> [u8; SEGMENT_HEADER_LEN] {
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    header[..8].copy_from_slice(SEGMENT_MAGIC);
    header[8..16].copy_from_slice(&first.to_le_bytes());
    // 0: no entry before; otherwise the entry's index plus one.
    header[16..24].copy_from_slice(&prev.map_or(0, |p| p + 1).to_le_bytes());
    let crc = crc32fast::hash(&header[..24]);
    header[24..28].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The first index and the entry before, if `header` is intact.
fn parse_segment_header(header: &[u8]) -> Option<(u64, Option<u64>)> {
    if &header[..8] != SEGMENT_MAGIC
        || header[24..28] != crc32fast::hash(&header[..24]).to_le_bytes()
    {
        return None;
    }
    let first = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let prev = u64::from_le_bytes(header[16..24].try_into().ok()?).checked_sub(1);
    Some((first, prev))
}

fn record_crc(len: u32, index: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len.to_le_bytes());
    hasher.update(&index.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

fn push_record(buf: &mut Vec<u8>, index: u64, payload: &[u8]) -> Result<(), DiskError> {
    let len = u32::try_from(payload.len()).map_err(|_| {
        DiskError(format!(
            "entry {index} is {} bytes: too large",
            payload.len()
        ))
    })?;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&record_crc(len, index, payload).to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(payload);
    Ok(())
}

fn record_bytes(payload_len: usize) -> u64 {
    RECORD_HEADER_BYTES + payload_len as u64
}

/// What reading a record found.
enum Record {
    /// A record with a good checksum: its index and payload.
    Good(u64, Vec<u8>),
    /// Zeroes: the preallocated space after the last record.
    End,
    /// Torn or damaged, with what is wrong.
    Bad(String),
}

fn read_record(file: &dyn LogFile, offset: u64, file_len: u64) -> Result<Record, DiskError> {
    if offset + RECORD_HEADER_BYTES > file_len {
        return Ok(Record::End);
    }
    let mut header = [0u8; RECORD_HEADER_LEN];
    file.read_at(offset, &mut header)?;
    if header.iter().all(|b| *b == 0) {
        return Ok(Record::End);
    }
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let index = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    if len == 0 || offset + record_bytes(len as usize) > file_len {
        return Ok(Record::Bad(format!(
            "the record at offset {offset} claims {len} bytes, past the end of the file"
        )));
    }
    let mut payload = vec![0u8; len as usize];
    file.read_at(offset + RECORD_HEADER_BYTES, &mut payload)?;
    if record_crc(len, index, &payload) != crc {
        return Ok(Record::Bad(format!(
            "the record at offset {offset} does not match its checksum"
        )));
    }
    Ok(Record::Good(index, payload))
}

/// Where an entry's record is.
#[derive(Clone, Copy, Debug)]
struct Location {
    /// The first index of its segment.
    segment: u64,
    offset: u64,
    len: u32,
}

#[derive(Debug)]
struct Segment {
    file: Arc<dyn LogFile>,
    /// The entry before this segment's first, when it was created.
    prev: Option<u64>,
    /// Where the next record goes.
    end: u64,
    /// The index of its last record.
    last: Option<u64>,
}

impl Segment {
    /// The last index of the log up to and including this segment.
    fn chain_last(&self) -> Option<u64> {
        self.last.or(self.prev)
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// By first index.
    segments: BTreeMap<u64, Segment>,
    /// Every record in the segments, purged or not (purging removes whole segments, so the
    /// purged part kept here is at most one segment's).
    entries: BTreeMap<u64, Location>,
    /// Entries up to here are purged: never read.
    purged: Option<u64>,
    /// Why a change failed part way: the files may no longer match this state, so nothing more
    /// is done until the log is reopened (which recovers from what is on disk).
    failed: Option<DiskError>,
}

impl Inner {
    fn chain_last(&self) -> Option<u64> {
        self.segments
            .values()
            .next_back()
            .and_then(Segment::chain_last)
    }

    /// Where entries that are not purged start.
    fn first_readable(&self) -> Bound<u64> {
        match self.purged {
            Some(purged) => Bound::Excluded(purged),
            None => Bound::Unbounded,
        }
    }
}

/// A sync the flusher runs: the file to sync, and what to call with the outcome.
type SyncRequest = (Arc<dyn LogFile>, FlushDone);

/// A sync to run later: syncs the tail and answers whoever waits on it.
pub type SyncJob = Box<dyn FnOnce() + Send>;

/// Runs [`SyncJob`]s later, in the order given: where no flusher thread may run (the
/// simulation), the runtime's own task, which takes a disk's sync latency before each round —
/// so a crash can find appended bytes not yet synced, as on a real machine.
#[derive(Clone)]
pub struct SyncRunner(Arc<dyn Fn(SyncJob) + Send + Sync>);

impl SyncRunner {
    /// A runner handing each job to `run`; a job `run` drops is never answered (its node is
    /// gone).
    pub fn new(run: impl Fn(SyncJob) + Send + Sync + 'static) -> SyncRunner {
        SyncRunner(Arc::new(run))
    }
}

impl std::fmt::Debug for SyncRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncRunner")
    }
}

/// The flusher thread, or a runner given in its place; dropping the log stops and joins the
/// thread.
#[derive(Debug)]
struct Flusher {
    requests: Mutex<Option<Sender<SyncRequest>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    runner: Mutex<Option<SyncRunner>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(lock(&self.requests).take());
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

/// Syncs every file waiting, once per round, and answers the requests in order.
fn run_flusher(requests: Receiver<SyncRequest>) {
    while let Ok(first) = requests.recv() {
        let mut waiting = vec![first];
        waiting.extend(requests.try_iter());
        let mut files: Vec<&Arc<dyn LogFile>> = Vec::new();
        for (file, _) in &waiting {
            if !files.iter().any(|f| same_file(f, file)) {
                files.push(file);
            }
        }
        let outcome = files.iter().try_for_each(|file| file.sync_data());
        for (_, done) in waiting {
            done(outcome.clone());
        }
    }
}

fn same_file(a: &Arc<dyn LogFile>, b: &Arc<dyn LogFile>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock already failed whatever caused it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug)]
struct Shared {
    files: Arc<dyn Files>,
    segment_bytes: u64,
    inner: Mutex<Inner>,
    flusher: Flusher,
    /// The first sync that failed. A failed sync is never retried: the kernel may have dropped
    /// the pages it could not write back, and a later sync would succeed without them. So every
    /// later sync and change fails until the log is reopened, which reads what is on disk.
    sync_failed: Arc<Mutex<Option<DiskError>>>,
}

/// Records the first failed sync in `latch`.
fn latch_sync_failure(latch: &Mutex<Option<DiskError>>, outcome: &Result<(), DiskError>) {
    if let Err(error) = outcome {
        lock(latch).get_or_insert_with(|| error.clone());
    }
}

/// The segmented log; clones share it. One writer (openraft's storage task) appends,
/// truncates and purges; readers read concurrently.
#[derive(Clone, Debug)]
pub struct SegmentLog {
    shared: Arc<Shared>,
}

fn corrupt(name: &str, what: &str) -> DiskError {
    DiskError(format!("{CORRUPT}: Raft log segment {name}: {what}"))
}

impl SegmentLog {
    /// Opens the log in `files`, recovering it: entries up to `purged` are purged (segments
    /// holding only those are removed), a torn tail of the last segment is cut, and a damaged
    /// earlier segment is refused. `segment_bytes` is the size segments are preallocated to.
    pub fn open(
        files: Arc<dyn Files>,
        segment_bytes: u64,
        purged: Option<u64>,
    ) -> Result<SegmentLog, DiskError> {
        assert!(
            segment_bytes >= SEGMENT_BYTES_MIN,
            "a segment of {segment_bytes} bytes holds no record"
        );
        let inner = recover(files.as_ref(), segment_bytes, purged)?;
        let flusher = Flusher {
            requests: Mutex::new(None),
            thread: Mutex::new(None),
            runner: Mutex::new(None),
        };
        // In the simulation no thread may run: syncs there are done inline, by the caller.
        if !cfg!(madsim) {
            let (sender, receiver) = channel();
            let thread = std::thread::Builder::new()
                .name("certus-log-sync".into())
                .spawn(move || run_flusher(receiver))
                .map_err(|e| DiskError(format!("starting the log's sync thread: {e}")))?;
            *lock(&flusher.requests) = Some(sender);
            *lock(&flusher.thread) = Some(thread);
        }
        Ok(SegmentLog {
            shared: Arc::new(Shared {
                files,
                segment_bytes,
                inner: Mutex::new(inner),
                flusher,
                sync_failed: Arc::default(),
            }),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        lock(&self.shared.inner)
    }

    /// Runs `change` unless an earlier change failed; a failure stops every later one.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut Inner) -> Result<T, DiskError>,
    ) -> Result<T, DiskError> {
        self.refuse_after_failed_sync()?;
        let mut inner = self.inner();
        if let Some(error) = &inner.failed {
            return Err(DiskError(format!(
                "the Raft log stopped after an earlier failure ({error}); restart the node"
            )));
        }
        let outcome = change(&mut inner);
        if let Err(error) = &outcome {
            inner.failed = Some(error.clone());
        }
        outcome
    }

    /// The index of the last entry not purged.
    pub fn last_index(&self) -> Option<u64> {
        let inner = self.inner();
        inner
            .entries
            .range((inner.first_readable(), Bound::Unbounded))
            .next_back()
            .map(|(index, _)| *index)
    }

    /// The first indexes of the segments, in order (for tests and metrics).
    pub fn segments(&self) -> Vec<u64> {
        self.inner().segments.keys().copied().collect()
    }

    /// Writes `records` (index, payload) — visible at once, durable after the next sync. An
    /// index at or below the last entry first truncates the log there; an index past the next
    /// one starts a new segment (openraft continues after a snapshot that covers more than the
    /// log held).
    pub fn append(&self, records: &[(u64, Vec<u8>)]) -> Result<(), DiskError> {
        self.change(|inner| self.append_locked(inner, records))
    }

    fn append_locked(
        &self,
        inner: &mut Inner,
        records: &[(u64, Vec<u8>)],
    ) -> Result<(), DiskError> {
        let mut pending: Option<(u64, u64, Vec<u8>)> = None;
        for (index, payload) in records {
            let index = *index;
            if inner.chain_last().is_some_and(|last| index <= last) {
                self.write_pending(inner, pending.take())?;
                self.truncate_locked(inner, index)?;
            }
            let size = record_bytes(payload.len());
            let fits = match inner.segments.iter().next_back() {
                None => false,
                Some((first, tail)) => {
                    let next = tail.last.map_or(*first, |last| last + 1);
                    let tail_end = pending
                        .as_ref()
                        .map_or(tail.end, |(_, offset, buf)| offset + buf.len() as u64);
                    next == index
                        && (tail.last.is_none() || tail_end + size <= self.shared.segment_bytes)
                }
            };
            if !fits {
                self.write_pending(inner, pending.take())?;
                self.start_segment(inner, index)?;
            }
            let (first, tail) = inner
                .segments
                .iter_mut()
                .next_back()
                .expect("a tail segment exists");
            let (_, offset, buf) = pending.get_or_insert_with(|| (*first, tail.end, Vec::new()));
            let record_offset = *offset + buf.len() as u64;
            push_record(buf, index, payload)?;
            tail.last = Some(index);
            let segment = *first;
            inner.entries.insert(
                index,
                Location {
                    segment,
                    offset: record_offset,
                    len: u32::try_from(payload.len()).expect("checked by push_record"),
                },
            );
        }
        self.write_pending(inner, pending)
    }

    /// Writes a buffer of records into its segment and moves the segment's end past them.
    fn write_pending(
        &self,
        inner: &mut Inner,
        pending: Option<(u64, u64, Vec<u8>)>,
    ) -> Result<(), DiskError> {
        let Some((segment, offset, buf)) = pending else {
            return Ok(());
        };
        let tail = inner
            .segments
            .get_mut(&segment)
            .expect("records are buffered for an existing segment");
        tail.file.write_at(offset, &buf)?;
        tail.end = offset + buf.len() as u64;
        Ok(())
    }

    /// Seals the tail (synced, so only the last segment can be torn) and starts a segment whose
    /// first record is `first`. An empty tail is removed instead: it would sort after the new one.
    fn start_segment(&self, inner: &mut Inner, first: u64) -> Result<(), DiskError> {
        let files = &self.shared.files;
        let empty_tail = inner
            .segments
            .iter()
            .next_back()
            .filter(|(_, tail)| tail.last.is_none())
            .map(|(first, _)| *first);
        if let Some(empty) = empty_tail {
            inner.segments.remove(&empty);
            files.remove(&segment_name(empty))?;
            files.sync_dir()?;
        }
        let prev = inner.chain_last();
        if let Some((_, tail)) = inner.segments.iter().next_back() {
            tail.file.sync_data()?;
        }
        let name = segment_name(first);
        let file = files.create(&name)?;
        file.set_len(self.shared.segment_bytes)?;
        file.write_at(0, &segment_header(first, prev))?;
        file.sync_data()?;
        files.sync_dir()?;
        inner.segments.insert(
            first,
            Segment {
                file,
                prev,
                end: SEGMENT_HEADER_BYTES,
                last: None,
            },
        );
        Ok(())
    }

    /// An error once a sync has failed.
    fn refuse_after_failed_sync(&self) -> Result<(), DiskError> {
        match lock(&self.shared.sync_failed).as_ref() {
            Some(error) => Err(DiskError(format!(
                "the Raft log stopped after a failed sync ({error}); restart the node"
            ))),
            None => Ok(()),
        }
    }

    /// Makes every append so far durable.
    pub fn sync(&self) -> Result<(), DiskError> {
        self.refuse_after_failed_sync()?;
        let tail = self.tail_file();
        let outcome = tail.map_or(Ok(()), |file| file.sync_data());
        latch_sync_failure(&self.shared.sync_failed, &outcome);
        outcome
    }

    fn tail_file(&self) -> Option<Arc<dyn LogFile>> {
        self.inner()
            .segments
            .values()
            .next_back()
            .map(|tail| Arc::clone(&tail.file))
    }

    /// Makes every append so far durable, then calls `done` — on the flusher thread, in call
    /// order, one sync shared by every call waiting. Under madsim, where no thread runs: by
    /// the [`SyncRunner`] if one was given, else inline.
    pub fn sync_then(&self, done: FlushDone) {
        if let Err(error) = self.refuse_after_failed_sync() {
            done(Err(error));
            return;
        }
        let latch = Arc::clone(&self.shared.sync_failed);
        let done: FlushDone = Box::new(move |outcome| {
            latch_sync_failure(&latch, &outcome);
            done(outcome);
        });
        let Some(tail) = self.tail_file() else {
            done(Ok(()));
            return;
        };
        let requests = lock(&self.shared.flusher.requests);
        match requests.as_ref() {
            Some(sender) => {
                if let Err(unsent) = sender.send((tail, done)) {
                    let (tail, done) = unsent.0;
                    done(tail.sync_data());
                }
            }
            None => match lock(&self.shared.flusher.runner).as_ref() {
                Some(runner) => (runner.0)(Box::new(move || done(tail.sync_data()))),
                None => done(tail.sync_data()),
            },
        }
    }

    /// Runs the syncs of [`sync_then`](Self::sync_then) through `runner` where the log has no
    /// flusher thread (under madsim); with a thread it is not used.
    pub fn set_sync_runner(&self, runner: SyncRunner) {
        *lock(&self.shared.flusher.runner) = Some(runner);
    }

    /// The entries with index in `(from, to)` not purged, at most `entries_max` of them and
    /// (past the first) at most `bytes_max` payload bytes, each checked against its checksum.
    pub fn read(
        &self,
        from: Bound<u64>,
        to: Bound<u64>,
        entries_max: usize,
        bytes_max: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>, DiskError> {
        let inner = self.inner();
        let start = match from {
            Bound::Included(f) => Some(f),
            Bound::Excluded(f) => f.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let readable = inner.purged.map_or(Some(0), |p| p.checked_add(1));
        let (Some(start), Some(readable)) = (start, readable) else {
            return Ok(Vec::new());
        };
        let start = start.max(readable);
        let empty = match to {
            Bound::Included(t) => t < start,
            Bound::Excluded(t) => t <= start,
            Bound::Unbounded => false,
        };
        if empty {
            return Ok(Vec::new());
        }
        let from = Bound::Included(start);
        let mut out = Vec::new();
        let mut bytes_total = 0usize;
        for (index, location) in inner.entries.range((from, to)) {
            if out.len() >= entries_max
                || (!out.is_empty() && bytes_total + location.len as usize > bytes_max)
            {
                break;
            }
            let segment = &inner.segments[&location.segment];
            let mut record = vec![0u8; RECORD_HEADER_LEN + location.len as usize];
            segment.file.read_at(location.offset, &mut record)?;
            let (header, payload) = record.split_at(RECORD_HEADER_LEN);
            let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
            let stored_index = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
            if stored_index != *index || record_crc(location.len, *index, payload) != crc {
                return Err(corrupt(
                    &segment_name(location.segment),
                    &format!(
                        "entry {index} at offset {} changed on disk",
                        location.offset
                    ),
                ));
            }
            bytes_total += payload.len();
            out.push((*index, payload.to_vec()));
        }
        Ok(out)
    }

    /// Removes the entries from `index` on, durably before returning.
    pub fn truncate(&self, index: u64) -> Result<(), DiskError> {
        self.change(|inner| self.truncate_locked(inner, index))
    }

    fn truncate_locked(&self, inner: &mut Inner, index: u64) -> Result<(), DiskError> {
        let files = &self.shared.files;
        // Later segments first, newest first, each removal durable before the next: a crash
        // leaves a prefix of the log, never a hole.
        let doomed: Vec<u64> = inner
            .segments
            .range(index..)
            .map(|(f, _)| *f)
            .rev()
            .collect();
        for first in doomed {
            files.remove(&segment_name(first))?;
            files.sync_dir()?;
            inner.segments.remove(&first);
        }
        // The segment holding `index` keeps the entries before it (a segment starting at
        // `index` went above).
        let cut = inner
            .entries
            .get(&index)
            .copied()
            .filter(|location| location.segment < index);
        inner.entries.split_off(&index);
        if let Some(location) = cut {
            let segment = inner
                .segments
                .get_mut(&location.segment)
                .expect("an entry's segment exists");
            segment.file.set_len(location.offset)?;
            segment
                .file
                .set_len(self.shared.segment_bytes.max(location.offset))?;
            segment.file.sync_data()?;
            segment.end = location.offset;
            segment.last = Some(index - 1);
        }
        Ok(())
    }

    /// Purges the entries up to `index`: they are no longer read, and segments holding only
    /// purged entries are removed. The caller has recorded `index` durably, so that a crash
    /// before the removals is finished at the next open.
    pub fn purge(&self, index: u64) -> Result<(), DiskError> {
        self.change(|inner| self.purge_locked(inner, index))
    }

    fn purge_locked(&self, inner: &mut Inner, index: u64) -> Result<(), DiskError> {
        inner.purged = Some(inner.purged.map_or(index, |p| p.max(index)));
        let purged = inner.purged.unwrap_or(index);
        let firsts: Vec<u64> = inner.segments.keys().copied().collect();
        let mut removed = false;
        for pair in firsts.windows(2) {
            if pair[1] <= purged.saturating_add(1) {
                self.shared.files.remove(&segment_name(pair[0]))?;
                inner.segments.remove(&pair[0]);
                removed = true;
            }
        }
        if removed {
            let kept_from = *inner.segments.keys().next().expect("the tail is kept");
            inner.entries = inner.entries.split_off(&kept_from);
            self.shared.files.sync_dir()?;
        }
        Ok(())
    }
}

/// Reads the segments back: see the module's comment for the rules.
fn recover(files: &dyn Files, segment_bytes: u64, purged: Option<u64>) -> Result<Inner, DiskError> {
    let mut firsts: Vec<u64> = files
        .list()?
        .iter()
        .filter_map(|name| parse_segment_name(name))
        .collect();
    firsts.sort_unstable();
    let mut inner = Inner {
        purged,
        ..Inner::default()
    };
    let is_purged = |index: Option<u64>| match (index, purged) {
        (None, _) => true,
        (Some(index), Some(purged)) => index <= purged,
        (Some(_), None) => false,
    };
    // Segments below the purge point that a crash left behind.
    let mut removed = false;
    while firsts.len() >= 2 && is_purged(firsts[1].checked_sub(1)) {
        files.remove(&segment_name(firsts[0]))?;
        firsts.remove(0);
        removed = true;
    }
    if removed {
        files.sync_dir()?;
    }
    let count = firsts.len();
    for (position, first) in firsts.into_iter().enumerate() {
        let is_last = position + 1 == count;
        let name = segment_name(first);
        let file = files.open(&name)?;
        let file_len = file.size()?;
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        let parsed = if file_len >= SEGMENT_HEADER_BYTES {
            file.read_at(0, &mut header)?;
            parse_segment_header(&header).filter(|(named, _)| *named == first)
        } else {
            None
        };
        let Some((_, prev)) = parsed else {
            if is_last {
                // Created, but the crash came before its header was synced: nothing in it was
                // ever acknowledged.
                files.remove(&name)?;
                files.sync_dir()?;
                break;
            }
            return Err(corrupt(&name, "its header is damaged"));
        };
        let before = inner.chain_last();
        if prev != before && !(is_purged(prev) && is_purged(before)) {
            return Err(corrupt(
                &name,
                &format!(
                    "it follows entry {prev:?} but the segments before it end at {before:?} \
                     (a segment is missing)"
                ),
            ));
        }
        let mut offset = SEGMENT_HEADER_BYTES;
        let mut last = None;
        loop {
            let expected = last.map_or(first, |l: u64| l + 1);
            match read_record(file.as_ref(), offset, file_len)? {
                Record::Good(index, payload) if index == expected => {
                    let len = u32::try_from(payload.len()).expect("read as a u32 length");
                    inner.entries.insert(
                        index,
                        Location {
                            segment: first,
                            offset,
                            len,
                        },
                    );
                    offset += record_bytes(payload.len());
                    last = Some(index);
                }
                Record::Good(index, _) => {
                    return Err(corrupt(
                        &name,
                        &format!(
                            "the record at offset {offset} holds entry {index}, not {expected}"
                        ),
                    ));
                }
                Record::End => break,
                // A torn write: never acknowledged, cut below.
                Record::Bad(_) if is_last => break,
                Record::Bad(what) => return Err(corrupt(&name, &what)),
            }
        }
        if is_last {
            // Zero whatever follows the last good record, so a torn write cannot resurface.
            file.set_len(offset)?;
            file.set_len(segment_bytes.max(offset))?;
            file.sync_data()?;
        }
        inner.segments.insert(
            first,
            Segment {
                file,
                prev,
                end: offset,
                last,
            },
        );
    }
    Ok(inner)
}
