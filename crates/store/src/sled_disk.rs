//! [`Disk`] on sled: the production store.
//!
//! Every value carries a CRC-32 of its key and bytes, checked on every read and, for the whole
//! database, when it is opened: a node whose files were damaged (a bad sector, a stray write)
//! refuses to start rather than serve or vote from data it never wrote, and `certus rebuild`
//! replaces its data with a copy caught up from its peers ([`rebuild_keeping_vote`]). sled's own
//! checksums guard its log records; these guard what the store meant to write, end to end.

use std::ops::Bound;
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::disk::{Disk, DiskError, FlushDone, Pairs, WriteBatch, WriteOp};

/// A sled database used as a [`Disk`]. One tree, so every batch is atomic.
///
/// `flush_then` hands flushes to a flusher thread: the caller (openraft's core task) does not
/// wait for the fsync, and appends that arrive while one fsync runs share the next.
#[derive(Clone, Debug)]
pub struct SledDisk {
    db: sled::Db,
    flusher: Arc<Flusher>,
}

/// The flusher thread; dropping the last handle stops and joins it, so the database's file lock
/// is released when the disk is dropped (a reopen right after would fail otherwise).
#[derive(Debug)]
struct Flusher {
    requests: Mutex<Option<Sender<FlushDone>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(
            self.requests
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(),
        );
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            let _ = thread.join();
        }
    }
}

/// Flushes for every request waiting, once per round, and answers them in order.
fn run_flusher(db: sled::Db, requests: Receiver<FlushDone>) {
    while let Ok(first) = requests.recv() {
        let mut waiting = vec![first];
        waiting.extend(requests.try_iter());
        let outcome = db
            .flush()
            .map(drop)
            .map_err(|e| DiskError(format!("flush: {e}")));
        for done in waiting {
            done(outcome.clone());
        }
    }
}

fn sled_error(context: &str) -> impl Fn(sled::Error) -> DiskError + '_ {
    move |e| DiskError(format!("{context}: {e}"))
}

/// The key recording the data format; a database without it predates checksums.
const FORMAT_KEY: &[u8] = b"meta/format";
/// The current data format: every value followed by its checksum.
const FORMAT: &[u8] = b"certus-checksummed-1";
/// What a damaged database's error says first, so callers and operators can tell it apart.
pub const CORRUPT: &str = "data fails its checksums";

fn checksum(key: &[u8], value: &[u8]) -> [u8; 4] {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
    hasher.update(key);
    hasher.update(value);
    hasher.finalize().to_le_bytes()
}

fn sealed(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(value.len() + 4);
    stored.extend_from_slice(value);
    stored.extend_from_slice(&checksum(key, value));
    stored
}

/// The value stored at `key`, its checksum checked and removed.
fn unsealed(key: &[u8], stored: &[u8]) -> Result<Vec<u8>, DiskError> {
    let corrupt = || {
        DiskError(format!(
            "{CORRUPT}: the value at key {:?} ({} bytes) does not match its checksum",
            String::from_utf8_lossy(key),
            stored.len()
        ))
    };
    if stored.len() < 4 {
        return Err(corrupt());
    }
    let (value, sum) = stored.split_at(stored.len() - 4);
    if sum != checksum(key, value) {
        return Err(corrupt());
    }
    Ok(value.to_vec())
}

/// Checks every value of `db`; a database with data but no format key predates checksums.
fn verify(db: &sled::Db) -> Result<(), DiskError> {
    match db
        .get(FORMAT_KEY)
        .map_err(sled_error("reading the format"))?
    {
        Some(stored) if unsealed(FORMAT_KEY, &stored)? == FORMAT => {}
        Some(_) => {
            return Err(DiskError(format!(
                "{CORRUPT}: the data format is not {:?}",
                String::from_utf8_lossy(FORMAT)
            )));
        }
        None if db.is_empty() => {
            db.insert(FORMAT_KEY, sealed(FORMAT_KEY, FORMAT))
                .map_err(sled_error("writing the format"))?;
            db.flush().map_err(sled_error("flushing the format"))?;
            return Ok(());
        }
        None => {
            return Err(DiskError(
                "the data was written by an older Certus without checksums; rebuild it from \
                 the peers (`certus rebuild`)"
                    .to_owned(),
            ));
        }
    }
    for pair in db.iter() {
        let (key, stored) = pair.map_err(|e| DiskError(format!("{CORRUPT}: reading: {e}")))?;
        unsealed(&key, &stored)?;
    }
    Ok(())
}

/// What [`rebuild_keeping_vote`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// Where the old database was moved (kept for inspection; delete it when done).
    pub moved_to: std::path::PathBuf,
    /// Where the old Raft log segments were moved, if there were any.
    pub log_moved_to: Option<std::path::PathBuf>,
    /// Whether a vote was carried over (a node that never voted has none).
    pub kept_vote: bool,
}

/// Moves the database at `path` aside to `aside`, and the Raft log's segments in `log_dir` to
/// `log_aside`, and starts an empty database holding only the old vote, so that the node rejoins
/// as the same member and never votes twice in a term, and catches up from the leader (by
/// snapshot when the log was compacted). The vote must pass its checksum: without a trustworthy
/// vote the node cannot safely come back under its id. The segments move first: a crash between
/// the two moves leaves the old database with no log (rebuild again), never the new database
/// with the old entries.
pub fn rebuild_keeping_vote(
    path: &Path,
    aside: &Path,
    log_dir: &Path,
    log_aside: &Path,
) -> Result<Rebuilt, DiskError> {
    let vote = {
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| DiskError(format!("opening {}: {e}", path.display())))?;
        match db.get(crate::keys::VOTE) {
            Ok(Some(stored)) => Some(unsealed(crate::keys::VOTE, &stored).map_err(|error| {
                DiskError(format!(
                    "the vote cannot be trusted ({error}); remove this node from the cluster and \
                     add it back under a new id instead"
                ))
            })?),
            Ok(None) => None,
            Err(error) => {
                return Err(DiskError(format!(
                    "the vote cannot be read ({error}); remove this node from the cluster and add \
                     it back under a new id instead"
                )));
            }
        }
    };
    for target in [aside, log_aside] {
        if target.exists() {
            return Err(DiskError(format!("{} exists already", target.display())));
        }
    }
    let log_moved_to = if log_dir.exists() {
        std::fs::rename(log_dir, log_aside).map_err(|e| {
            DiskError(format!(
                "moving {} to {}: {e}",
                log_dir.display(),
                log_aside.display()
            ))
        })?;
        Some(log_aside.to_owned())
    } else {
        None
    };
    std::fs::rename(path, aside).map_err(|e| {
        DiskError(format!(
            "moving {} to {}: {e}",
            path.display(),
            aside.display()
        ))
    })?;
    let disk = SledDisk::open(path)?;
    if let Some(vote) = &vote {
        let mut batch = WriteBatch::new();
        batch.put(crate::keys::VOTE, vote.clone());
        disk.write(batch)?;
    }
    disk.flush()?;
    Ok(Rebuilt {
        moved_to: aside.to_owned(),
        log_moved_to,
        kept_vote: vote.is_some(),
    })
}

/// sled's own page cache bound when none is given, in MiB.
pub const SLED_CACHE_MIB_DEFAULT: u64 = 1024;

impl SledDisk {
    /// Opens (or creates) the database at `path`, with sled's default page cache (1 GiB).
    pub fn open(path: &Path) -> Result<SledDisk, DiskError> {
        SledDisk::open_with_cache(path, None)
    }

    /// Opens (or creates) the database at `path` with a page cache of `cache_bytes` (sled's
    /// default of 1 GiB if `None`): the bound on what sled keeps in memory.
    pub fn open_with_cache(path: &Path, cache_bytes: Option<u64>) -> Result<SledDisk, DiskError> {
        let mut config = sled::Config::new().path(path);
        if let Some(bytes) = cache_bytes {
            config = config.cache_capacity(bytes);
        }
        let db = config
            .open()
            .map_err(|e| DiskError(format!("opening {}: {e}", path.display())))?;
        verify(&db)?;
        // In the simulation a thread must not wake simulated tasks (madsim aborts), so flushes
        // there run inline, on the caller.
        if cfg!(madsim) {
            return Ok(SledDisk {
                db,
                flusher: Arc::new(Flusher {
                    requests: Mutex::new(None),
                    thread: Mutex::new(None),
                }),
            });
        }
        let (sender, receiver) = channel();
        let flusher_db = db.clone();
        let thread = std::thread::Builder::new()
            .name("certus-flush".into())
            .spawn(move || run_flusher(flusher_db, receiver))
            .map_err(|e| DiskError(format!("starting the flusher thread: {e}")))?;
        Ok(SledDisk {
            db,
            flusher: Arc::new(Flusher {
                requests: Mutex::new(Some(sender)),
                thread: Mutex::new(Some(thread)),
            }),
        })
    }
}

impl Disk for SledDisk {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
        self.db
            .get(key)
            .map_err(sled_error("get"))?
            .map(|stored| unsealed(key, &stored))
            .transpose()
    }

    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Pairs, DiskError> {
        let range = self.db.range::<&[u8], _>((from, to));
        let pairs: Box<dyn Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> = if reverse {
            Box::new(range.rev())
        } else {
            Box::new(range)
        };
        pairs
            .take(limit)
            .map(|pair| {
                let (k, stored) = pair.map_err(sled_error("scan"))?;
                let value = unsealed(&k, &stored)?;
                Ok((k.to_vec(), value))
            })
            .collect()
    }

    fn write(&self, mut batch: WriteBatch) -> Result<(), DiskError> {
        // One operation is atomic by itself. sled runs a `Batch` as a transaction that seals its
        // IO buffer before and after, and each sealed buffer is handed to sled's IO pool, which
        // wakes all of its idle threads: a lone put (a Raft round's entry, the committed pointer)
        // skips that.
        if batch.ops.len() == 1 {
            let write = match batch.ops.pop() {
                Some(WriteOp::Put(k, v)) => {
                    let stored = sealed(&k, &v);
                    self.db.insert(k, stored).map(drop)
                }
                Some(WriteOp::Delete(k)) => self.db.remove(k).map(drop),
                None => Ok(()),
            };
            return write.map_err(sled_error("write"));
        }
        let mut sled_batch = sled::Batch::default();
        for op in batch.ops {
            match op {
                WriteOp::Put(k, v) => {
                    let stored = sealed(&k, &v);
                    sled_batch.insert(k, stored);
                }
                WriteOp::Delete(k) => sled_batch.remove(k),
            }
        }
        self.db.apply_batch(sled_batch).map_err(sled_error("write"))
    }

    fn flush(&self) -> Result<(), DiskError> {
        self.db.flush().map(drop).map_err(sled_error("flush"))
    }

    fn flush_then(&self, done: FlushDone) {
        let requests = self
            .flusher
            .requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match requests.as_ref() {
            Some(sender) => {
                if let Err(unsent) = sender.send(done) {
                    (unsent.0)(self.flush());
                }
            }
            None => done(self.flush()),
        }
    }
}
