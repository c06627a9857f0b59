//! The segmented Raft log: rollover, whole-segment purges, recovery after torn writes and
//! damage, and moving the old layout's entries out of the disk.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use certus_store::{
    CORRUPT, Disk, Files, LogStore, OsFiles, SegmentLog, SimDisk, SimFiles, SledDisk, WriteBatch,
};
use common::{TEST_SEGMENT_BYTES, TestConfig, crash, ready, seeded, sim_log};
use openraft::storage::RaftLogStorage;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload, RaftLogReader};
use proptest::prelude::*;

fn open(files: &SimFiles, segment_bytes: u64, purged: Option<u64>) -> SegmentLog {
    SegmentLog::open(Arc::new(files.clone()), segment_bytes, purged).expect("the log opens")
}

fn payload(index: u64, len: usize) -> Vec<u8> {
    // Bytes that vary with the index and the position (never all zero, like unwritten space).
    (0..len)
        .map(|i| (index.to_le_bytes()[0]).wrapping_add(i.to_le_bytes()[0]) | 1)
        .collect()
}

fn all(log: &SegmentLog) -> Vec<(u64, Vec<u8>)> {
    log.read(Bound::Unbounded, Bound::Unbounded, usize::MAX, usize::MAX)
        .expect("reads")
}

fn indexes(log: &SegmentLog) -> Vec<u64> {
    all(log).into_iter().map(|(index, _)| index).collect()
}

fn segment_files(files: &SimFiles) -> Vec<String> {
    files.list().expect("lists")
}

#[test]
fn a_full_segment_rolls_over_to_one_named_by_its_first_index() {
    let files = SimFiles::new();
    let log = open(&files, 200, None);
    // 16 bytes of header and 40 of payload: three records fit after the segment's header.
    for index in 1..=7 {
        log.append(&[(index, payload(index, 40))]).unwrap();
    }
    log.sync().unwrap();
    assert_eq!(log.segments(), [1, 4, 7]);
    assert_eq!(
        segment_files(&files),
        [
            "00000000000000000001.seg",
            "00000000000000000004.seg",
            "00000000000000000007.seg"
        ]
    );
    // A record larger than a segment gets one of its own.
    log.append(&[(8, payload(8, 500))]).unwrap();
    log.append(&[(9, payload(9, 10))]).unwrap();
    log.sync().unwrap();
    assert_eq!(log.segments(), [1, 4, 7, 8, 9]);
    drop(log);
    files.crash(&mut |_| 0);
    let reopened = open(&files, 200, None);
    assert_eq!(indexes(&reopened), (1..=9).collect::<Vec<_>>());
    assert_eq!(all(&reopened)[7].1, payload(8, 500));
}

#[test]
fn purging_removes_whole_segments_only() {
    let files = SimFiles::new();
    let log = open(&files, 200, None);
    for index in 1..=9 {
        log.append(&[(index, payload(index, 40))]).unwrap();
    }
    log.sync().unwrap();
    assert_eq!(log.segments(), [1, 4, 7]);
    log.purge(5).unwrap();
    assert_eq!(log.segments(), [4, 7], "segment 4 still holds entry 6");
    assert_eq!(indexes(&log), [6, 7, 8, 9]);
    assert_eq!(segment_files(&files).len(), 2);
    log.purge(6).unwrap();
    assert_eq!(log.segments(), [7], "every entry of segment 4 is purged");
    // Purging past the end keeps the last segment (the next append's), and the next entry
    // after a purge beyond the log starts a segment of its own.
    log.purge(20).unwrap();
    assert_eq!(log.segments(), [7]);
    assert_eq!(log.last_index(), None);
    log.append(&[(21, payload(21, 10))]).unwrap();
    log.sync().unwrap();
    assert_eq!(log.segments(), [7, 21]);
    drop(log);
    files.crash(&mut |_| 0);
    let reopened = open(&files, 200, Some(20));
    assert_eq!(indexes(&reopened), [21]);
    assert_eq!(
        reopened.segments(),
        [21],
        "segment 7 holds only purged entries"
    );
}

#[test]
fn a_torn_last_record_is_cut_at_open_and_every_synced_record_survives() {
    let files = SimFiles::new();
    let log = open(&files, 1024, None);
    for index in 1..=5 {
        log.append(&[(index, payload(index, 20))]).unwrap();
    }
    log.sync().unwrap();
    // One unsynced write of two records, torn 30 bytes in: a header and part of a payload.
    log.append(&[(6, payload(6, 20)), (7, payload(7, 20))])
        .unwrap();
    drop(log);
    files.crash(&mut |_| 30);
    let reopened = open(&files, 1024, None);
    assert_eq!(indexes(&reopened), [1, 2, 3, 4, 5]);
    let tail = format!("{:020}.seg", reopened.segments()[0]);
    let bytes = files.contents(&tail).expect("the segment");
    let end = 32 + 5 * (16 + 20);
    assert!(
        bytes[end..].iter().all(|b| *b == 0),
        "the torn bytes are zeroed"
    );
    // The log goes on where the good records end.
    reopened.append(&[(6, payload(6, 21))]).unwrap();
    reopened.sync().unwrap();
    drop(reopened);
    files.crash(&mut |_| 0);
    let again = open(&files, 1024, None);
    assert_eq!(indexes(&again), [1, 2, 3, 4, 5, 6]);
    assert_eq!(all(&again)[5].1, payload(6, 21));
}

/// Flips a byte of the file `name` at `offset`, behind the log's back, durably.
fn damage(files: &SimFiles, name: &str, offset: u64) {
    let file = files.open(name).unwrap();
    let mut byte = [0u8];
    file.read_at(offset, &mut byte).unwrap();
    file.write_at(offset, &[byte[0] ^ 0x10]).unwrap();
    file.sync_data().unwrap();
}

#[test]
fn a_damaged_record_in_a_sealed_segment_refuses_to_open() {
    let files = SimFiles::new();
    let log = open(&files, 200, None);
    for index in 1..=7 {
        log.append(&[(index, payload(index, 40))]).unwrap();
    }
    log.sync().unwrap();
    drop(log);
    // The second record of the first segment: 32 bytes of header, 56 of record, 16 of header.
    damage(&files, "00000000000000000001.seg", 32 + 56 + 16 + 3);
    let error = SegmentLog::open(Arc::new(files.clone()), 200, None).expect_err("refused");
    assert!(error.0.starts_with(CORRUPT), "{error}");
    assert!(error.0.contains("00000000000000000001.seg"), "{error}");
    assert!(error.0.contains("checksum"), "{error}");
}

#[test]
fn a_missing_middle_segment_refuses_to_open() {
    let files = SimFiles::new();
    let log = open(&files, 200, None);
    for index in 1..=7 {
        log.append(&[(index, payload(index, 40))]).unwrap();
    }
    log.sync().unwrap();
    drop(log);
    files.remove("00000000000000000004.seg").unwrap();
    files.sync_dir().unwrap();
    let error = SegmentLog::open(Arc::new(files.clone()), 200, None).expect_err("refused");
    assert!(error.0.starts_with(CORRUPT), "{error}");
    assert!(error.0.contains("missing"), "{error}");
    // Below the purge point a missing segment is no loss.
    let log = open(&files, 200, Some(6));
    assert_eq!(indexes(&log), [7]);
}

#[test]
fn a_damaged_last_record_of_the_last_segment_is_cut_as_torn() {
    let files = SimFiles::new();
    let log = open(&files, 200, None);
    for index in 1..=5 {
        log.append(&[(index, payload(index, 40))]).unwrap();
    }
    log.sync().unwrap();
    drop(log);
    // Segment 4 holds 4 and 5; damage 5.
    damage(&files, "00000000000000000004.seg", 32 + 56 + 16 + 3);
    let log = open(&files, 200, None);
    assert_eq!(indexes(&log), [1, 2, 3, 4]);
}

fn blank(index: u64) -> Entry<TestConfig> {
    Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::Blank,
    }
}

/// Writes entries the way the store before the segmented log kept them: one disk key each.
fn write_old_layout(disk: &impl Disk, indexes: impl IntoIterator<Item = u64>) {
    let mut batch = WriteBatch::new();
    for index in indexes {
        let mut key = b"log/".to_vec();
        key.extend_from_slice(&index.to_be_bytes());
        batch.put(key, postcard::to_allocvec(&blank(index)).unwrap());
    }
    disk.write(batch).unwrap();
    disk.flush().unwrap();
}

fn old_layout_keys(disk: &impl Disk) -> usize {
    let to = b"log0".to_vec();
    disk.scan(
        Bound::Included(b"log/".as_slice()),
        Bound::Excluded(to.as_slice()),
        false,
        usize::MAX,
    )
    .unwrap()
    .len()
}

#[test]
fn entries_of_the_old_layout_move_into_segments_at_open() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    write_old_layout(&disk, 1..=30);
    assert_eq!(old_layout_keys(&disk), 30);
    let mut log = sim_log(&disk, &files);
    assert_eq!(old_layout_keys(&disk), 0, "moved out of the disk");
    assert!(log.segment_log().segments().len() > 1);
    let read: Vec<u64> = ready(log.try_get_log_entries(0..))
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(read, (1..=30).collect::<Vec<_>>());
    drop(log);
    // Durable: the disk's deletions and the segments both survive a crash.
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    assert_eq!(old_layout_keys(&disk), 0);
    let state = ready(reopened.get_log_state()).unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 30)));
}

#[test]
fn a_crash_during_migration_moves_the_entries_again() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    write_old_layout(&disk, 1..=10);
    // The segments are written and synced, then the process dies before the disk's deletions.
    {
        let log = SegmentLog::open(Arc::new(files.clone()), TEST_SEGMENT_BYTES, None).unwrap();
        let records: Vec<(u64, Vec<u8>)> = (1..=6)
            .map(|i| (i, postcard::to_allocvec(&blank(i)).unwrap()))
            .collect();
        log.append(&records).unwrap();
        log.sync().unwrap();
    }
    crash(&disk, &files);
    let mut log = sim_log(&disk, &files);
    assert_eq!(old_layout_keys(&disk), 0);
    let read: Vec<u64> = ready(log.try_get_log_entries(0..))
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(read, (1..=10).collect::<Vec<_>>());
}

#[test]
fn sled_entries_of_the_old_layout_move_into_files() {
    let dir = tempfile::tempdir().unwrap();
    let raft = dir.path().join("raft");
    write_old_layout(&SledDisk::open(&raft).unwrap(), 1..=12);
    let open = || {
        LogStore::<TestConfig, _>::open(
            Arc::new(SledDisk::open(&raft).unwrap()),
            Arc::new(OsFiles::open(&dir.path().join("raft-log")).unwrap()),
            TEST_SEGMENT_BYTES,
        )
        .unwrap()
    };
    let mut log = open();
    let state = ready(log.get_log_state()).unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 12)));
    drop(log);
    assert_eq!(old_layout_keys(&SledDisk::open(&raft).unwrap()), 0);
    let mut log = open();
    let read = ready(log.try_get_log_entries(0..)).unwrap();
    assert_eq!(read.len(), 12);
}

/// One step of the property test.
#[derive(Clone, Debug)]
enum Step {
    /// Appends `count` entries of `len` bytes after the last (or after the purge point).
    Append {
        count: u64,
        len: usize,
    },
    /// Appends one entry `back` entries before the next index (replacing what follows).
    Overwrite {
        back: u64,
        len: usize,
    },
    Sync,
    /// Truncates `back` entries before the next index.
    Truncate {
        back: u64,
    },
    /// Purges up to `ahead` entries past the purge point (possibly past the end).
    Purge {
        ahead: u64,
    },
    /// Lets `changes` file changes through, then fails the rest: a step dies part way.
    Dies {
        changes: u64,
    },
    /// The machine crashes (with tears drawn from `seed`) and the log is reopened.
    Crash {
        seed: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u64..4, 1usize..90).prop_map(|(count, len)| Step::Append { count, len }),
        1 => (0u64..6, 1usize..300).prop_map(|(back, len)| Step::Overwrite { back, len }),
        3 => Just(Step::Sync),
        1 => (1u64..8).prop_map(|back| Step::Truncate { back }),
        1 => (0u64..12).prop_map(|ahead| Step::Purge { ahead }),
        1 => (0u64..8).prop_map(|changes| Step::Dies { changes }),
        2 => any::<u64>().prop_map(|seed| Step::Crash { seed }),
    ]
}

/// What the log may and must hold.
#[derive(Debug, Default)]
struct Model {
    /// Every payload each index may hold after a crash (what was written and not truncated).
    possible: BTreeMap<u64, BTreeSet<Vec<u8>>>,
    /// What reads see now.
    written: BTreeMap<u64, Vec<u8>>,
    /// What was synced (or truncated) durably: it must survive any crash.
    acked: BTreeMap<u64, Vec<u8>>,
    /// The durable purge point.
    purged: Option<u64>,
    /// The next payload's serial number, so that every write is told apart.
    serial: u64,
    /// Whether a step failed part way: no more checks of reads until the crash.
    dying: bool,
}

impl Model {
    fn next_index(&self) -> u64 {
        let after_written = self.written.keys().next_back().map_or(1, |last| last + 1);
        let after_purged = self.purged.map_or(1, |p| p + 1);
        after_written.max(after_purged)
    }

    fn payload(&mut self, index: u64, len: usize) -> Vec<u8> {
        self.serial += 1;
        let mut bytes = self.serial.to_le_bytes().to_vec();
        bytes.extend(payload(index, len));
        bytes
    }

    fn cut(&mut self, from: u64, durable: bool) {
        self.written.split_off(&from);
        self.acked.split_off(&from);
        if durable {
            self.possible.split_off(&from);
        }
    }
}

const PROPERTY_SEGMENT_BYTES: u64 = 300;

fn check_after_crash(model: &Model, recovered: &[(u64, Vec<u8>)]) -> Result<(), TestCaseError> {
    let got: BTreeMap<u64, Vec<u8>> = recovered.iter().cloned().collect();
    for (index, bytes) in &model.acked {
        prop_assert_eq!(got.get(index), Some(bytes), "synced entry {} lost", index);
    }
    for (index, bytes) in &got {
        prop_assert!(
            model.purged.is_none_or(|p| *index > p),
            "purged entry {} came back",
            index
        );
        prop_assert!(
            model
                .possible
                .get(index)
                .is_some_and(|set| set.contains(bytes)),
            "entry {} holds bytes never written there, or truncated",
            index
        );
    }
    let keys: Vec<u64> = got.keys().copied().collect();
    for pair in keys.windows(2) {
        prop_assert_eq!(pair[0] + 1, pair[1], "a hole in the log: {:?}", keys);
    }
    if let Some(first) = keys.first() {
        let expected = model
            .possible
            .range((
                model.purged.map_or(Bound::Unbounded, Bound::Excluded),
                Bound::Unbounded,
            ))
            .next()
            .map(|(index, _)| *index);
        prop_assert_eq!(
            Some(*first),
            expected,
            "the log does not start where it should"
        );
    }
    Ok(())
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let files = SimFiles::new();
    let mut log = open(&files, PROPERTY_SEGMENT_BYTES, None);
    let mut model = Model::default();
    for step in steps {
        if model.dying && !matches!(step, Step::Crash { .. }) {
            continue;
        }
        match step {
            Step::Append { count, len } => {
                let first = model.next_index();
                let records: Vec<(u64, Vec<u8>)> = (first..first + count)
                    .map(|index| (index, model.payload(index, len)))
                    .collect();
                let written = log.append(&records);
                for (index, bytes) in &records {
                    model
                        .possible
                        .entry(*index)
                        .or_default()
                        .insert(bytes.clone());
                    model.written.insert(*index, bytes.clone());
                }
                model.dying = written.is_err();
            }
            Step::Overwrite { back, len } => {
                let next = model.next_index();
                let index = next
                    .saturating_sub(back)
                    .max(model.purged.map_or(1, |p| p + 1));
                let bytes = model.payload(index, len);
                let written = log.append(&[(index, bytes.clone())]);
                // An overwrite truncates durably first: what followed cannot come back then.
                model.cut(index, written.is_ok());
                model
                    .possible
                    .entry(index)
                    .or_default()
                    .insert(bytes.clone());
                model.written.insert(index, bytes);
                model.dying = written.is_err();
            }
            Step::Sync => match log.sync() {
                Ok(()) => model.acked = model.written.clone(),
                Err(_) => model.dying = true,
            },
            Step::Truncate { back } => {
                let next = model.next_index();
                let index = next
                    .saturating_sub(back)
                    .max(model.purged.map_or(1, |p| p + 1));
                let truncated = log.truncate(index);
                model.cut(index, truncated.is_ok());
                model.dying = truncated.is_err();
            }
            Step::Purge { ahead } => {
                let purged = model.purged.map_or(0, |p| p) + ahead;
                // The store records the purge point durably before the log removes segments.
                model.purged = Some(purged);
                model.written = model.written.split_off(&(purged + 1));
                model.acked = model.acked.split_off(&(purged + 1));
                model.dying = log.purge(purged).is_err();
            }
            Step::Dies { changes } => files.fail_after(changes),
            Step::Crash { seed } => {
                drop(log);
                files.crash(&mut seeded(seed));
                log = open(&files, PROPERTY_SEGMENT_BYTES, model.purged);
                let recovered = all(&log);
                check_after_crash(&model, &recovered)?;
                model.written = recovered.iter().cloned().collect();
                model.acked = model.written.clone();
                model.possible = recovered
                    .iter()
                    .map(|(index, bytes)| (*index, BTreeSet::from([bytes.clone()])))
                    .collect();
                model.dying = false;
            }
        }
        if !model.dying {
            let visible: BTreeMap<u64, Vec<u8>> = all(&log).into_iter().collect();
            prop_assert_eq!(&visible, &model.written, "reads disagree with the writes");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the steps and wherever a crash tears them: every synced entry survives, nothing
    /// truncated or purged comes back, and the indexes are contiguous.
    #[test]
    fn a_crash_keeps_every_synced_entry_and_nothing_truncated(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        run(steps)?;
    }
}
