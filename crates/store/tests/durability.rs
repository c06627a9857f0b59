//! What survives a crash: the durability contracts, checked on the simulated disk and files.

mod common;

use std::io::Cursor;
use std::sync::Arc;

use certus_core::{Command, HolderId, LeaseCommand, LeaseName, Ttl};
use certus_store::{
    Disk, LogStore, OsFiles, Proposal, SimDisk, SimFiles, SledDisk, StateMachineStore, WriteBatch,
};
use common::{TEST_SEGMENT_BYTES, TestConfig, crash, ready, sim_log};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote,
};

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
        let disk = SledDisk::open(&dir.path().join("raft")).unwrap();
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
