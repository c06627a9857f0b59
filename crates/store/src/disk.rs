//! The small storage trait under the Raft log, the vote and the state-machine snapshot.
//!
//! An ordered key-value space with atomic batches and an explicit flush: what Raft's durability
//! contracts need and nothing more, so that a simulated disk can model exactly what a crash loses.

use std::ops::Bound;

/// A storage failure: the node cannot keep its promises and must stop serving.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("storage: {0}")]
pub struct DiskError(pub String);

/// Key-value pairs in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Writes applied together: after a crash either all of a batch is there or none of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<WriteOp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WriteOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Put(key.into(), value.into()));
    }

    /// Removes `key` if present.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) {
        self.ops.push(WriteOp::Delete(key.into()));
    }

    /// Whether the batch has no writes.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// An ordered key-value store with atomic batches.
///
/// Contract: a write is visible to reads as soon as `write` returns, and durable (survives a crash
/// of the process or machine) once a later `flush` returns. Batches are applied in order, and a
/// crash keeps a prefix of them: never a later batch without an earlier one.
pub trait Disk: Send + Sync + 'static {
    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError>;

    /// Up to `limit` pairs with keys in `(from, to)`, in key order (descending if `reverse`).
    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Pairs, DiskError>;

    /// Applies a batch atomically.
    fn write(&self, batch: WriteBatch) -> Result<(), DiskError>;

    /// Makes every write so far durable.
    fn flush(&self) -> Result<(), DiskError>;

    /// Makes every write so far durable, then calls `done` with the outcome — possibly later and
    /// on another thread, but in call order. Concurrent calls may share one flush. The default
    /// flushes at once on the caller's thread.
    fn flush_then(&self, done: FlushDone) {
        done(self.flush());
    }
}

/// What [`Disk::flush_then`] calls once the flush is done.
pub type FlushDone = Box<dyn FnOnce(Result<(), DiskError>) + Send>;
