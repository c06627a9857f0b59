//! [`Disk`] on sled: the production store.

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

impl SledDisk {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<SledDisk, DiskError> {
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| DiskError(format!("opening {}: {e}", path.display())))?;
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
        Ok(self
            .db
            .get(key)
            .map_err(sled_error("get"))?
            .map(|v| v.to_vec()))
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
                let (k, v) = pair.map_err(sled_error("scan"))?;
                Ok((k.to_vec(), v.to_vec()))
            })
            .collect()
    }

    fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
        let mut sled_batch = sled::Batch::default();
        for op in batch.ops {
            match op {
                WriteOp::Put(k, v) => sled_batch.insert(k, v),
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
