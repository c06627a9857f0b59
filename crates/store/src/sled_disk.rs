//! [`Disk`] on sled: the production store.

use std::ops::Bound;
use std::path::Path;

use crate::disk::{Disk, DiskError, Pairs, WriteBatch, WriteOp};

/// A sled database used as a [`Disk`]. One tree, so every batch is atomic.
#[derive(Clone, Debug)]
pub struct SledDisk {
    db: sled::Db,
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
        Ok(SledDisk { db })
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
}
