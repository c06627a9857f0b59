//! What survives a crash: the durability contracts, checked on the simulated disk and files —
//! the vote, appends, truncation and purges; the segmented Raft log's rollover, whole-segment
//! purges and recovery after torn writes and damage; and moving the old layout's entries out of
//! the disk.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::ops::Bound;
use std::sync::Arc;

use certus_core::{Command, HolderId, LeaseCommand, LeaseName, Ttl};
use certus_store::{
    CORRUPT, Disk, Files, LogStore, OsFiles, Proposal, SegmentLog, SimDisk, SimFiles, SledDisk,
    StateMachineStore, WriteBatch,
};
use common::{TEST_SEGMENT_BYTES, TestConfig, after_release, crash, ready, seeded, sim_log};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};
use proptest::prelude::*;

type Log = LogStore<TestConfig, SimDisk>;
type Machine = StateMachineStore<TestConfig, SimDisk>;

fn entry(index: u64, payload: EntryPayload<TestConfig>) -> Entry<TestConfig> {
    Entry {
        log_id: log_id(1, 1, index),
        payload,
    }
}

fn acquire(name: &str, holder: &str, at_ms: u64) -> EntryPayload<TestConfig> {
    EntryPayload::Normal(Proposal {
        proposed_at_ms: at_ms,
        commands: vec![Command::Lease(LeaseCommand::Acquire {
            name: LeaseName::new(name).unwrap(),
            holder: HolderId::new(holder).unwrap(),
            ttl: Ttl::from_ms(60_000).unwrap(),
        })],
    })
}

fn log_indexes(log: &mut Log) -> Vec<u64> {
    ready(log.try_get_log_entries(0..))
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[test]
fn a_saved_vote_survives_a_crash() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let mut log = sim_log(&disk, &files);
    let vote = Vote::new_committed(3, 2);
    ready(log.save_vote(&vote)).unwrap();
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    assert_eq!(ready(reopened.read_vote()).unwrap(), Some(vote));
}

/// The committed pointer has no flush of its own: the next append writes it to the disk, and
/// the disk's next flush (sled's own timer, a vote's, a snapshot's, a purge's) makes it
/// durable. A crash before that rolls it back, never forward; the node's `BootLog` keeps a
/// leader that resumes after such a crash from reading below its log's end.
#[test]
fn a_committed_pointer_is_durable_with_the_next_flush() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let mut log = sim_log(&disk, &files);
    let committed = Some(log_id(1, 1, 7));
    ready(log.save_committed(committed)).unwrap();
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    assert_eq!(ready(reopened.read_committed()).unwrap(), None);

    ready(reopened.save_committed(committed)).unwrap();
    reopened
        .append_durably([entry(8, EntryPayload::Blank)])
        .unwrap();
    assert_eq!(
        disk.pending_batches(),
        1,
        "written by the append, not flushed"
    );
    crash(&disk, &files);
    let mut again = sim_log(&disk, &files);
    assert_eq!(ready(again.read_committed()).unwrap(), None);
    assert_eq!(log_indexes(&mut again), [8], "the entry itself was synced");

    ready(again.save_committed(committed)).unwrap();
    again
        .append_durably([entry(9, EntryPayload::Blank)])
        .unwrap();
    ready(again.save_vote(&Vote::new(2, 1))).unwrap();
    crash(&disk, &files);
    let mut flushed = sim_log(&disk, &files);
    assert_eq!(ready(flushed.read_committed()).unwrap(), committed);
}

#[test]
fn appended_entries_survive_a_crash_and_unsynced_writes_do_not() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let log = sim_log(&disk, &files);
    log.append_durably((1..=3).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    // An append nobody synced is lost in the crash.
    let unsynced = postcard::to_allocvec(&entry(4, EntryPayload::Blank)).unwrap();
    log.segment_log().append(&[(4, unsynced)]).unwrap();
    assert_eq!(log.segment_log().last_index(), Some(4));
    drop(log);
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    assert_eq!(log_indexes(&mut reopened), [1, 2, 3]);
}

#[test]
fn a_truncated_suffix_does_not_come_back_after_a_crash() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let mut log = sim_log(&disk, &files);
    // Enough entries for several segments, so the truncation removes whole segments too.
    log.append_durably((1..=40).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    let segments = log.segment_log().segments().len();
    assert!(segments > 2, "{segments} segments");
    ready(log.truncate(log_id(1, 1, 3))).unwrap();
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    assert_eq!(log_indexes(&mut reopened), [1, 2]);
    assert_eq!(reopened.segment_log().segments(), [1]);
}

/// Applies blank entries `1..=upto` on a state machine over `disk` and saves a snapshot there.
fn snapshot_at(disk: &SimDisk, upto: u64) -> openraft::storage::Snapshot<TestConfig> {
    let mut machine = Machine::open(Arc::new(disk.clone())).unwrap();
    ready(machine.apply((1..=upto).map(|i| entry(i, EntryPayload::Blank)))).unwrap();
    ready(ready(machine.get_snapshot_builder()).build_snapshot()).unwrap()
}

#[test]
fn a_purge_is_durable_when_it_returns() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let mut log = sim_log(&disk, &files);
    log.append_durably((1..=40).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    snapshot_at(&disk, 30);
    let before = log.segment_log().segments();
    ready(log.purge(log_id(1, 1, 30))).unwrap();
    let after = log.segment_log().segments();
    assert!(after.len() < before.len(), "{before:?} -> {after:?}");
    assert!(after[0] <= 31, "the segment holding 31 is kept: {after:?}");
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    let state = ready(reopened.get_log_state()).unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 30)));
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 40)));
    assert_eq!(log_indexes(&mut reopened), (31..=40).collect::<Vec<_>>());
    assert_eq!(reopened.segment_log().segments(), after);
}

/// A crash after the purge point is flushed but before any segment below it is removed: the
/// segments are ignored and removed at the next open, and nothing above the point is lost.
#[test]
fn segments_a_crash_left_below_the_purge_point_are_removed_at_open() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let log = sim_log(&disk, &files);
    log.append_durably((1..=40).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    let before = log.segment_log().segments();
    drop(log);
    let mut batch = WriteBatch::new();
    batch.put(
        b"meta/last-purged".to_vec(),
        postcard::to_allocvec(&log_id(1, 1, 30)).unwrap(),
    );
    disk.write(batch).unwrap();
    disk.flush().unwrap();
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    let after = reopened.segment_log().segments();
    assert!(after.len() < before.len(), "{before:?} -> {after:?}");
    assert!(after.iter().all(|first| before.contains(first)));
    assert_eq!(log_indexes(&mut reopened), (31..=40).collect::<Vec<_>>());
    let state = ready(reopened.get_log_state()).unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 30)));
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 40)));
}

#[test]
fn the_state_machine_restarts_from_its_last_snapshot() {
    let disk = SimDisk::new();
    let mut machine = Machine::open(Arc::new(disk.clone())).unwrap();
    let replies = ready(machine.apply([
        entry(1, EntryPayload::Blank),
        entry(2, acquire("renewal", "pod-a", 1_000)),
        entry(3, acquire("renewal", "pod-b", 1_001)),
    ]))
    .unwrap();
    assert_eq!(replies.iter().map(Vec::len).collect::<Vec<_>>(), [0, 1, 1]);
    let snapshot = ready(ready(machine.get_snapshot_builder()).build_snapshot()).unwrap();
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 1, 3)));
    // Applied after the snapshot, so a restart rolls back to the snapshot (the log replays it).
    ready(machine.apply([entry(4, acquire("other", "pod-a", 1_002))])).unwrap();
    let before = machine.reader().read(|a| a.state.to_snapshot());
    disk.crash();

    let mut restarted = Machine::open(Arc::new(disk)).unwrap();
    let (last_applied, _) = ready(restarted.applied_state()).unwrap();
    assert_eq!(last_applied, Some(log_id(1, 1, 3)));
    let name = LeaseName::new("renewal").unwrap();
    let holder = restarted
        .reader()
        .read(|a| a.state.lease(&name, 1_002).map(|l| l.holder.clone()));
    assert_eq!(holder, Some(HolderId::new("pod-a").unwrap()));
    ready(restarted.apply([entry(4, acquire("other", "pod-a", 1_002))])).unwrap();
    assert_eq!(restarted.reader().read(|a| a.state.to_snapshot()), before);
}

#[test]
fn an_installed_snapshot_replaces_the_state_and_a_bad_one_changes_nothing() {
    let mut source = Machine::open(Arc::new(SimDisk::new())).unwrap();
    ready(source.apply([entry(1, acquire("l", "pod-a", 5_000))])).unwrap();
    let snapshot = ready(ready(source.get_snapshot_builder()).build_snapshot()).unwrap();

    let disk = SimDisk::new();
    let mut target = Machine::open(Arc::new(disk.clone())).unwrap();
    let garbage = Box::new(Cursor::new(b"not a snapshot".to_vec()));
    assert!(ready(target.install_snapshot(&snapshot.meta, garbage)).is_err());
    assert_eq!(ready(target.applied_state()).unwrap().0, None);
    assert!(ready(target.get_current_snapshot()).unwrap().is_none());

    ready(target.install_snapshot(&snapshot.meta, snapshot.snapshot.clone())).unwrap();
    let state_of = |m: &Machine| m.reader().read(|a| a.state.to_snapshot());
    assert_eq!(state_of(&target), state_of(&source));
    // Installed means durable: it is still there after a crash.
    disk.crash();
    let reopened = Machine::open(Arc::new(disk)).unwrap();
    assert_eq!(state_of(&reopened), state_of(&source));
}

#[test]
fn a_corrupt_stored_snapshot_stops_the_node_from_opening() {
    let disk = SimDisk::new();
    let mut batch = WriteBatch::new();
    batch.put(b"sm/snapshot".to_vec(), b"\x01\x02garbage".to_vec());
    disk.write(batch).unwrap();
    assert!(Machine::open(Arc::new(disk)).is_err());
}

#[test]
fn a_crash_keeps_a_prefix_of_unflushed_batches() {
    let disk = SimDisk::new();
    for i in 0u8..3 {
        let mut batch = WriteBatch::new();
        batch.put(vec![i], vec![i]);
        disk.write(batch).unwrap();
    }
    disk.crash_keeping(2);
    assert_eq!(disk.get(&[0]).unwrap(), Some(vec![0]));
    assert_eq!(disk.get(&[1]).unwrap(), Some(vec![1]));
    assert_eq!(disk.get(&[2]).unwrap(), None);
}

#[test]
fn sled_and_files_keep_the_log_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let disk = after_release(|| SledDisk::open(&dir.path().join("raft"))).unwrap();
        let files = OsFiles::open(&dir.path().join("raft-log")).unwrap();
        LogStore::<TestConfig, _>::open(Arc::new(disk), Arc::new(files), TEST_SEGMENT_BYTES)
            .unwrap()
    };
    {
        let mut log = open();
        log.append_durably((1..=3).map(|i| entry(i, EntryPayload::Blank)))
            .unwrap();
        ready(log.save_vote(&Vote::new(2, 1))).unwrap();
    }
    let mut log = open();
    let last = ready(log.get_log_state()).unwrap().last_log_id;
    assert_eq!(last, Some(LogId::new(CommittedLeaderId::new(1, 1), 3)));
    assert_eq!(ready(log.read_vote()).unwrap(), Some(Vote::new(2, 1)));
}

#[test]
fn a_purge_never_passes_the_snapshot_on_disk() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let mut log = sim_log(&disk, &files);
    log.append_durably((1..=5).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    // A snapshot at 2 is on disk; a newer one (at 4, say) is still on its way.
    snapshot_at(&disk, 2);
    ready(log.purge(log_id(1, 1, 4))).unwrap();
    assert_eq!(log_indexes(&mut log), [3, 4, 5]);
    assert_eq!(
        ready(log.get_log_state()).unwrap().last_purged_log_id,
        Some(log_id(1, 1, 2))
    );
}

#[test]
fn an_older_snapshot_build_does_not_replace_a_newer_install() {
    let disk = SimDisk::new();
    let mut machine = Machine::open(Arc::new(disk.clone())).unwrap();
    ready(machine.apply((1..=2).map(|i| entry(i, EntryPayload::Blank)))).unwrap();
    // A build of the state at 2 is under way when a peer's snapshot at 4 is installed.
    let mut stale_build = ready(machine.get_snapshot_builder());
    let newer = snapshot_at(&SimDisk::new(), 4);
    ready(machine.install_snapshot(&newer.meta, newer.snapshot.clone())).unwrap();
    let stale = ready(stale_build.build_snapshot()).unwrap();
    assert_eq!(stale.meta.last_log_id, Some(log_id(1, 1, 2)));

    let current = ready(machine.get_current_snapshot()).unwrap().unwrap();
    assert_eq!(current.meta.last_log_id, Some(log_id(1, 1, 4)));
    disk.crash();
    let mut reopened = Machine::open(Arc::new(disk)).unwrap();
    let (applied, _) = ready(reopened.applied_state()).unwrap();
    assert_eq!(applied, Some(log_id(1, 1, 4)));
}

// The segmented log itself.

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
    write_old_layout(&after_release(|| SledDisk::open(&raft)).unwrap(), 1..=12);
    let open = || {
        LogStore::<TestConfig, _>::open(
            Arc::new(after_release(|| SledDisk::open(&raft)).unwrap()),
            Arc::new(OsFiles::open(&dir.path().join("raft-log")).unwrap()),
            TEST_SEGMENT_BYTES,
        )
        .unwrap()
    };
    let mut log = open();
    let state = ready(log.get_log_state()).unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 12)));
    drop(log);
    assert_eq!(
        old_layout_keys(&after_release(|| SledDisk::open(&raft)).unwrap()),
        0
    );
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

#[test]
fn a_failed_sync_stops_the_log_until_it_is_reopened() {
    let (disk, files) = (SimDisk::new(), SimFiles::new());
    let log = sim_log(&disk, &files);
    log.append_durably((1..=3).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    let fourth = postcard::to_allocvec(&entry(4, EntryPayload::Blank)).unwrap();
    log.segment_log().append(&[(4, fourth)]).unwrap();
    // The disk fails the sync and drops the page it could not write; once it works again, a
    // retried sync would succeed without entry 4, so the log must refuse to go on.
    files.set_fault(Some(certus_store::DiskFault::SyncError));
    assert!(log.segment_log().sync().is_err());
    files.set_fault(None);
    let retried = log.segment_log().sync();
    assert!(
        retried.is_err(),
        "a sync after a failed one must fail: {retried:?}"
    );
    let (sender, receiver) = std::sync::mpsc::channel();
    log.segment_log()
        .sync_then(Box::new(move |outcome| sender.send(outcome).unwrap()));
    assert!(receiver.recv().unwrap().is_err());
    let fifth = postcard::to_allocvec(&entry(5, EntryPayload::Blank)).unwrap();
    assert!(log.segment_log().append(&[(5, fifth)]).is_err());
    // Entry 4 never became durable: the crash loses it, and the reopened log works.
    drop(log);
    crash(&disk, &files);
    let mut reopened = sim_log(&disk, &files);
    assert_eq!(log_indexes(&mut reopened), [1, 2, 3]);
    reopened.segment_log().sync().unwrap();
}

#[test]
fn a_full_or_failing_disk_refuses_appends_and_changes_nothing() {
    for fault in [
        certus_store::DiskFault::Full,
        certus_store::DiskFault::WriteError,
    ] {
        let (disk, files) = (SimDisk::new(), SimFiles::new());
        let log = sim_log(&disk, &files);
        log.append_durably((1..=3).map(|i| entry(i, EntryPayload::Blank)))
            .unwrap();
        files.set_fault(Some(fault));
        // Enough entries to need a new segment, which a full disk cannot make.
        let refused = (4..=60).try_for_each(|i| {
            let bytes = postcard::to_allocvec(&entry(i, EntryPayload::Blank)).unwrap();
            log.segment_log().append(&[(i, bytes)])
        });
        let error = refused.expect_err("the failing disk refuses some append");
        let expected = match fault {
            certus_store::DiskFault::Full => "No space left on device",
            _ => "Input/output error",
        };
        assert!(error.0.contains(expected), "{fault:?}: {error}");
        files.set_fault(None);
        drop(log);
        crash(&disk, &files);
        let mut reopened = sim_log(&disk, &files);
        let kept = log_indexes(&mut reopened);
        assert_eq!(kept[..3], [1, 2, 3], "{fault:?}: synced entries survive");
    }
}
