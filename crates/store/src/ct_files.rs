//! The CT log's bulk data in files: what never changes once written (full tiles, full bundles
//! of entries, runs of the hash indexes), out of sled, whose memory grows with what it holds.
//!
//! Each file is written at offsets the data determines (tile N of a level at N·8 KiB, bundle b
//! after bundle b − 1), synced, and only then named by the metadata the caller commits in sled.
//! What a crash leaves past the metadata is never read and is written again, the same, when
//! the node gets there again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::disk::DiskError;
use crate::files::{Files, LogFile};

/// The files of one node's CT log, with their handles kept open.
#[derive(Debug)]
pub(crate) struct DataFiles {
    files: Arc<dyn Files>,
    open: Mutex<BTreeMap<String, Arc<dyn LogFile>>>,
}

impl DataFiles {
    pub(crate) fn new(files: Arc<dyn Files>) -> DataFiles {
        DataFiles {
            files,
            open: Mutex::new(BTreeMap::new()),
        }
    }

    /// The file `name`, created (and its directory entry synced) if it does not exist.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(file) = open.get(name) {
            return Ok(Arc::clone(file));
        }
        let file = if self.files.list()?.iter().any(|listed| listed == name) {
            self.files.open(name)?
        } else {
            let file = self.files.create(name)?;
            self.files.sync_dir()?;
            file
        };
        open.insert(name.to_owned(), Arc::clone(&file));
        Ok(file)
    }

    /// Names of the files that start with `prefix`.
    pub(crate) fn named(&self, prefix: &str) -> Result<Vec<String>, DiskError> {
        Ok(self
            .files
            .list()?
            .into_iter()
            .filter(|name| name.starts_with(prefix))
            .collect())
    }

    /// Removes the file `name` (handles already open keep reading it).
    pub(crate) fn remove(&self, name: &str) -> Result<(), DiskError> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
        if self.files.list()?.iter().any(|listed| listed == name) {
            self.files.remove(name)?;
        }
        Ok(())
    }

    /// Removes every file.
    pub(crate) fn clear(&self) -> Result<(), DiskError> {
        for name in self.files.list()? {
            self.remove(&name)?;
        }
        self.files.sync_dir()
    }
}
