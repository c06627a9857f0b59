//! A directory of named files: what the segmented Raft log needs of a file system, and nothing
//! more, so that a simulated one can model exactly what a crash loses.
//!
//! Two implementations: [`OsFiles`] (std::fs; `sync_data` is fdatasync, and the directory is
//! synced after a file is created or removed) and [`SimFiles`] (in memory; a crash loses what
//! was not synced, keeps or tears any of the unsynced writes, and may revert directory changes
//! that were not synced).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::disk::DiskError;

/// One open file. Writes are visible to reads at once and durable once `sync_data` returns.
pub trait LogFile: Send + Sync + Debug + 'static {
    /// The file's length in bytes.
    fn size(&self) -> Result<u64, DiskError>;

    /// Reads `buf.len()` bytes at `offset`; an error if the file ends before.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError>;

    /// Writes `data` at `offset`, growing the file if it ends before.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DiskError>;

    /// Makes every write and length change so far durable (not the directory entry).
    fn sync_data(&self) -> Result<(), DiskError>;

    /// Cuts or extends (with zeroes) the file to `len` bytes; durable with the next `sync_data`.
    fn set_len(&self, len: u64) -> Result<(), DiskError>;
}

/// A directory of named files. Creating or removing a file is durable once `sync_dir` returns.
pub trait Files: Send + Sync + Debug + 'static {
    /// The names of the files, in order.
    fn list(&self) -> Result<Vec<String>, DiskError>;

    /// Opens the file `name`, which must exist.
    fn open(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError>;

    /// Creates the file `name`, empty (an existing one is emptied).
    fn create(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError>;

    /// Removes the file `name`; handles already open keep working on the removed file.
    fn remove(&self, name: &str) -> Result<(), DiskError>;

    /// Makes every create and remove so far durable.
    fn sync_dir(&self) -> Result<(), DiskError>;
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> DiskError {
    move |e| DiskError(format!("{context}: {e}"))
}

fn sync_directory(dir: &Path) -> Result<(), DiskError> {
    let context = || format!("syncing the directory {}", dir.display());
    std::fs::File::open(dir)
        .map_err(io_error(context()))?
        .sync_all()
        .map_err(io_error(context()))
}

/// Files in a directory of the real file system.
#[derive(Debug, Clone)]
pub struct OsFiles {
    dir: PathBuf,
}

impl OsFiles {
    /// The files in `dir`, created (with its parents) if missing. A new directory's own entry
    /// is synced too: losing it in a crash would lose every segment in it.
    pub fn open(dir: &Path) -> Result<OsFiles, DiskError> {
        if !dir.exists() {
            std::fs::create_dir_all(dir)
                .map_err(io_error(format!("creating {}", dir.display())))?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_directory(parent)?;
            }
        }
        Ok(OsFiles {
            dir: dir.to_owned(),
        })
    }
}

#[derive(Debug)]
struct OsFile {
    file: std::fs::File,
    path: PathBuf,
}

impl OsFile {
    fn error(&self, what: &str) -> impl FnOnce(std::io::Error) -> DiskError {
        io_error(format!("{what} {}", self.path.display()))
    }
}

impl LogFile for OsFile {
    fn size(&self) -> Result<u64, DiskError> {
        Ok(self.file.metadata().map_err(self.error("reading"))?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        use std::os::unix::fs::FileExt as _;
        self.file
            .read_exact_at(buf, offset)
            .map_err(self.error("reading"))
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DiskError> {
        use std::os::unix::fs::FileExt as _;
        self.file
            .write_all_at(data, offset)
            .map_err(self.error("writing"))
    }

    fn sync_data(&self) -> Result<(), DiskError> {
        self.file.sync_data().map_err(self.error("syncing"))
    }

    fn set_len(&self, len: u64) -> Result<(), DiskError> {
        self.file.set_len(len).map_err(self.error("resizing"))
    }
}

impl Files for OsFiles {
    fn list(&self) -> Result<Vec<String>, DiskError> {
        let context = || format!("listing {}", self.dir.display());
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(io_error(context()))? {
            let entry = entry.map_err(io_error(context()))?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn open(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError> {
        let path = self.dir.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_error(format!("opening {}", path.display())))?;
        Ok(Arc::new(OsFile { file, path }))
    }

    fn create(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError> {
        let path = self.dir.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(io_error(format!("creating {}", path.display())))?;
        Ok(Arc::new(OsFile { file, path }))
    }

    fn remove(&self, name: &str) -> Result<(), DiskError> {
        let path = self.dir.join(name);
        std::fs::remove_file(&path).map_err(io_error(format!("removing {}", path.display())))
    }

    fn sync_dir(&self) -> Result<(), DiskError> {
        sync_directory(&self.dir)
    }
}

/// A change to a simulated file not yet synced.
#[derive(Clone, Debug)]
enum Change {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

/// A simulated file's bytes. Bytes past `data` up to `len` are zeroes (so a preallocated file
/// costs nothing).
#[derive(Clone, Debug, Default)]
struct Contents {
    data: Vec<u8>,
    len: u64,
}

impl Contents {
    fn apply(&mut self, change: &Change) {
        match change {
            Change::Write { offset, data } => self.write(*offset, data),
            Change::SetLen(len) => self.set_len(*len),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let start = usize::try_from(offset).expect("simulated files fit in memory");
        let end = start + data.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[start..end].copy_from_slice(data);
        self.len = self.len.max(end as u64);
    }

    fn set_len(&mut self, len: u64) {
        let kept = usize::try_from(len).expect("simulated files fit in memory");
        self.data.truncate(kept);
        self.len = len;
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(buf.len() as u64) else {
            return false;
        };
        if end > self.len {
            return false;
        }
        buf.fill(0);
        let start = usize::try_from(offset).expect("simulated files fit in memory");
        if start < self.data.len() {
            let stored = &self.data[start..self.data.len().min(start + buf.len())];
            buf[..stored.len()].copy_from_slice(stored);
        }
        true
    }
}

#[derive(Debug, Default)]
struct SimFile {
    /// Cloned by every handle: a removed file stays readable while a handle to it is open.
    pin: Arc<()>,
    visible: Contents,
    durable: Contents,
    /// Changes since the last sync, oldest first.
    pending: Vec<Change>,
}

/// A way a simulated disk fails, while the simulation keeps it on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    /// Every write, length change, create and remove answers EIO and changes nothing.
    WriteError,
    /// Every sync answers EIO, and the writes it was to make durable are dropped from the
    /// write-back queue while reads still see them, as Linux does after a failed writeback: a
    /// later sync that succeeds does not make them durable, and a crash loses them.
    SyncError,
    /// No space left: a write past a file's end, a length change that grows a file, and a
    /// create answer ENOSPC and change nothing.
    Full,
}

/// Simulated files: an inode table and two directories (what is listed now, what a crash keeps).
#[derive(Debug, Default)]
struct SimDir {
    inodes: BTreeMap<u64, SimFile>,
    visible: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
    next_inode: u64,
    /// Counts crashes: a handle opened before a crash belongs to a process that is gone.
    epoch: u64,
    /// Changes allowed before every change fails (a process dying in the middle of a step).
    changes_left: Option<u64>,
    /// How the disk fails now, if it does (outlives crashes: it is the disk's, not the
    /// process's).
    fault: Option<DiskFault>,
}

impl SimDir {
    /// Counts one change; an error once the budget set by `fail_after` is spent.
    fn change(&mut self, what: &str) -> Result<(), DiskError> {
        match &mut self.changes_left {
            Some(0) => Err(DiskError(format!(
                "{what}: the simulated machine is going down"
            ))),
            Some(left) => {
                *left -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The error a change meets on a failing disk: `grows` says whether it needs new space.
    fn refuse(&self, what: &str, grows: bool) -> Result<(), DiskError> {
        match self.fault {
            Some(DiskFault::WriteError) => Err(DiskError(format!(
                "{what}: Input/output error (os error 5, simulated)"
            ))),
            Some(DiskFault::Full) if grows => Err(DiskError(format!(
                "{what}: No space left on device (os error 28, simulated)"
            ))),
            _ => Ok(()),
        }
    }

    /// Drops the files no directory names and no handle holds.
    fn collect_unreachable(&mut self) {
        let SimDir {
            inodes,
            visible,
            durable,
            ..
        } = self;
        inodes.retain(|inode, file| {
            Arc::strong_count(&file.pin) > 1
                || visible.values().any(|i| i == inode)
                || durable.values().any(|i| i == inode)
        });
    }

    fn handle(&self, dir: &Arc<Mutex<SimDir>>, inode: u64, name: &str) -> Arc<dyn LogFile> {
        Arc::new(SimHandle {
            dir: Arc::clone(dir),
            inode,
            epoch: self.epoch,
            name: name.to_owned(),
            _pin: Arc::clone(&self.inodes[&inode].pin),
        })
    }
}

/// What a crash did to the writes not yet synced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Writes that never reached the disk.
    pub writes_lost: u64,
    /// Writes that reached it whole.
    pub writes_whole: u64,
    /// Writes of which only a prefix reached it (possibly empty).
    pub writes_torn: u64,
}

impl std::ops::AddAssign for CrashReport {
    fn add_assign(&mut self, other: CrashReport) {
        self.writes_lost += other.writes_lost;
        self.writes_whole += other.writes_whole;
        self.writes_torn += other.writes_torn;
    }
}

/// Simulated files in memory; clones share the same contents, which outlive a node's crash.
#[derive(Clone, Debug, Default)]
pub struct SimFiles {
    dir: Arc<Mutex<SimDir>>,
}

#[derive(Debug)]
struct SimHandle {
    dir: Arc<Mutex<SimDir>>,
    inode: u64,
    epoch: u64,
    name: String,
    _pin: Arc<()>,
}

impl SimFiles {
    /// An empty directory.
    pub fn new() -> SimFiles {
        SimFiles::default()
    }

    fn dir(&self) -> MutexGuard<'_, SimDir> {
        lock(&self.dir)
    }

    /// Lets `changes` more changes (writes, syncs, creates, removes) through, then fails every
    /// later one until the next crash: the process went down in the middle of what it was doing.
    pub fn fail_after(&self, changes: u64) {
        self.dir().changes_left = Some(changes);
    }

    /// How the disk fails now, if it does.
    pub fn fault(&self) -> Option<DiskFault> {
        self.dir().fault
    }

    /// Makes the disk fail as `fault` says from now on, or work again (`None`).
    pub fn set_fault(&self, fault: Option<DiskFault>) {
        self.dir().fault = fault;
    }

    /// A crash of the machine. Each change to a file since its last sync reached the disk
    /// whole, not at all, or — for a write — in part (a random prefix of it, a torn write),
    /// each drawn on its own, as a disk writing back dirty pages in any order does. A file
    /// created or removed since the directory was last synced may revert. `random(n)` gives a
    /// number in `0..n` (the caller's deterministic source; a source that always answers 0
    /// loses every unsynced change). Handles opened before fail. Returns what became of the
    /// unsynced writes, so that a simulation can show it tears some.
    pub fn crash(&self, random: &mut dyn FnMut(u64) -> u64) -> CrashReport {
        let mut dir = self.dir();
        dir.epoch += 1;
        dir.changes_left = None;
        let names: Vec<String> = dir
            .visible
            .keys()
            .chain(dir.durable.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut kept = BTreeMap::new();
        for name in names {
            let now = dir.visible.get(&name).copied();
            let synced = dir.durable.get(&name).copied();
            let entry = if now == synced || random(2) == 0 {
                synced
            } else {
                now
            };
            if let Some(inode) = entry {
                kept.insert(name, inode);
            }
        }
        dir.visible = kept.clone();
        dir.durable = kept;
        dir.collect_unreachable();
        let mut report = CrashReport::default();
        for file in dir.inodes.values_mut() {
            let mut contents = file.durable.clone();
            for change in std::mem::take(&mut file.pending) {
                match (random(3), change) {
                    (0, Change::Write { .. }) => report.writes_lost += 1,
                    (0, Change::SetLen(_)) => {}
                    (1, change @ Change::Write { .. }) => {
                        contents.apply(&change);
                        report.writes_whole += 1;
                    }
                    (_, Change::Write { offset, data }) => {
                        let torn = usize::try_from(random(data.len() as u64))
                            .unwrap_or(0)
                            .min(data.len());
                        contents.write(offset, &data[..torn]);
                        report.writes_torn += 1;
                    }
                    (_, change @ Change::SetLen(_)) => contents.apply(&change),
                }
            }
            file.durable = contents.clone();
            file.visible = contents;
        }
        report
    }

    /// Writes not yet synced, over every file: what a crash now would lose or tear.
    pub fn unsynced_writes(&self) -> u64 {
        let dir = self.dir();
        let writes = dir.inodes.values().flat_map(|file| &file.pending);
        writes
            .filter(|change| matches!(change, Change::Write { .. }))
            .count() as u64
    }

    /// The bytes of the file `name` as reads see them (for tests).
    pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
        let dir = self.dir();
        let inode = dir.visible.get(name)?;
        let file = &dir.inodes[inode];
        let mut bytes = vec![0; usize::try_from(file.visible.len).ok()?];
        file.visible.read(0, &mut bytes);
        Some(bytes)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock already failed the test or simulation that caused it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SimHandle {
    fn with<T>(
        &self,
        change: bool,
        f: impl FnOnce(&mut SimFile) -> Result<T, String>,
    ) -> Result<T, DiskError> {
        let mut dir = lock(&self.dir);
        if dir.epoch != self.epoch {
            return Err(DiskError(format!(
                "{}: the simulated machine crashed since this file was opened",
                self.name
            )));
        }
        if change {
            dir.change(&self.name)?;
        }
        let file = dir
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| DiskError(format!("{}: removed", self.name)))?;
        f(file).map_err(|e| DiskError(format!("{}: {e}", self.name)))
    }
}

impl SimHandle {
    /// Runs `check` with the directory (its fault) and this file, changing nothing.
    fn with_disk<T>(
        &self,
        check: impl FnOnce(&SimDir, &SimFile) -> Result<T, DiskError>,
    ) -> Result<T, DiskError> {
        let dir = lock(&self.dir);
        match dir.inodes.get(&self.inode) {
            Some(file) => {
                check(&dir, file).map_err(|e| DiskError(format!("{}: {}", self.name, e.0)))
            }
            None => Err(DiskError(format!("{}: removed", self.name))),
        }
    }
}

impl LogFile for SimHandle {
    fn size(&self) -> Result<u64, DiskError> {
        self.with(false, |file| Ok(file.visible.len))
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        self.with(false, |file| {
            if file.visible.read(offset, buf) {
                Ok(())
            } else {
                Err(format!(
                    "read of {} bytes at {offset} past the end",
                    buf.len()
                ))
            }
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DiskError> {
        self.with_disk(|dir, file| {
            dir.refuse("writing", offset + data.len() as u64 > file.visible.len)
        })?;
        self.with(true, |file| {
            let change = Change::Write {
                offset,
                data: data.to_vec(),
            };
            file.visible.apply(&change);
            file.pending.push(change);
            Ok(())
        })
    }

    fn sync_data(&self) -> Result<(), DiskError> {
        let failing = self.with_disk(|dir, _| Ok(dir.fault == Some(DiskFault::SyncError)))?;
        self.with(true, |file| {
            let pending = std::mem::take(&mut file.pending);
            if failing {
                return Err(format!(
                    "syncing: Input/output error (os error 5, simulated): {} writes will never \
                     reach the disk",
                    pending.len()
                ));
            }
            for change in pending {
                file.durable.apply(&change);
            }
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> Result<(), DiskError> {
        self.with_disk(|dir, file| dir.refuse("resizing", len > file.visible.len))?;
        self.with(true, |file| {
            let change = Change::SetLen(len);
            file.visible.apply(&change);
            file.pending.push(change);
            Ok(())
        })
    }
}

impl Files for SimFiles {
    fn list(&self) -> Result<Vec<String>, DiskError> {
        Ok(self.dir().visible.keys().cloned().collect())
    }

    fn open(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError> {
        let dir = self.dir();
        let inode = *dir
            .visible
            .get(name)
            .ok_or_else(|| DiskError(format!("opening {name}: no such file")))?;
        Ok(dir.handle(&self.dir, inode, name))
    }

    fn create(&self, name: &str) -> Result<Arc<dyn LogFile>, DiskError> {
        let mut dir = self.dir();
        dir.refuse(&format!("creating {name}"), true)?;
        dir.change(name)?;
        // Emptying an existing file is a length change, modelled as one.
        let inode = match dir.visible.get(name).copied() {
            Some(inode) => {
                let file = dir.inodes.get_mut(&inode).expect("a listed file exists");
                file.visible.set_len(0);
                file.pending.push(Change::SetLen(0));
                inode
            }
            None => {
                let inode = dir.next_inode;
                dir.next_inode += 1;
                dir.inodes.insert(inode, SimFile::default());
                dir.visible.insert(name.to_owned(), inode);
                inode
            }
        };
        Ok(dir.handle(&self.dir, inode, name))
    }

    fn remove(&self, name: &str) -> Result<(), DiskError> {
        let mut dir = self.dir();
        dir.refuse(&format!("removing {name}"), false)?;
        dir.change(name)?;
        dir.visible
            .remove(name)
            .map(drop)
            .ok_or_else(|| DiskError(format!("removing {name}: no such file")))
    }

    fn sync_dir(&self) -> Result<(), DiskError> {
        let mut dir = self.dir();
        if dir.fault == Some(DiskFault::SyncError) {
            return Err(DiskError(
                "syncing the directory: Input/output error (os error 5, simulated)".to_owned(),
            ));
        }
        dir.change("the directory")?;
        dir.durable = dir.visible.clone();
        dir.collect_unreachable();
        Ok(())
    }
}
