//! [`Disk`] in memory with a crash model, for the simulation and tests.
//!
//! Two layers: what reads see (every write so far) and what is durable (every write up to the
//! last flush). A crash throws away the writes since the last flush — or, to model a disk that
//! got part of the way, keeps a prefix of them. The handle is shared: the simulation keeps it
//! across a node's crash and hands it to the restarted node.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::disk::{Disk, DiskError, Pairs, WriteBatch, WriteOp};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Default)]
struct Layers {
    visible: Map,
    durable: Map,
    /// Batches written since the last flush, oldest first.
    pending: Vec<WriteBatch>,
}

/// A simulated disk; clones share the same contents.
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    layers: Arc<Mutex<Layers>>,
}

fn apply_batch(map: &mut Map, batch: &WriteBatch) {
    for op in &batch.ops {
        match op {
            WriteOp::Put(k, v) => {
                map.insert(k.clone(), v.clone());
            }
            WriteOp::Delete(k) => {
                map.remove(k);
            }
        }
    }
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    fn layers(&self) -> MutexGuard<'_, Layers> {
        // A panic while holding the lock already failed the test or simulation that caused it.
        self.layers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Number of batches written since the last flush.
    pub fn pending_batches(&self) -> usize {
        self.layers().pending.len()
    }

    /// A crash: every write since the last flush is lost.
    pub fn crash(&self) {
        self.crash_keeping(0);
    }

    /// A crash in which the first `kept` unflushed batches reached the platter and the rest did
    /// not (`kept` is clamped to the number pending).
    pub fn crash_keeping(&self, kept: usize) {
        let mut layers = self.layers();
        let kept = kept.min(layers.pending.len());
        let pending = std::mem::take(&mut layers.pending);
        for batch in &pending[..kept] {
            apply_batch(&mut layers.durable, batch);
        }
        layers.visible = layers.durable.clone();
    }
}

impl Disk for SimDisk {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError> {
        Ok(self.layers().visible.get(key).cloned())
    }

    fn scan(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Pairs, DiskError> {
        let layers = self.layers();
        let range = layers.visible.range::<[u8], _>((from, to));
        let pairs: Box<dyn Iterator<Item = (&Vec<u8>, &Vec<u8>)>> = if reverse {
            Box::new(range.rev())
        } else {
            Box::new(range)
        };
        Ok(pairs
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn write(&self, batch: WriteBatch) -> Result<(), DiskError> {
        let mut layers = self.layers();
        apply_batch(&mut layers.visible, &batch);
        layers.pending.push(batch);
        Ok(())
    }

    fn flush(&self) -> Result<(), DiskError> {
        let mut layers = self.layers();
        let pending = std::mem::take(&mut layers.pending);
        for batch in &pending {
            apply_batch(&mut layers.durable, batch);
        }
        Ok(())
    }
}
