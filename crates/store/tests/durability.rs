//! What survives a crash: the durability contracts, checked on the simulated disk.

mod common;

use std::io::Cursor;
use std::sync::Arc;

use certus_core::{Command, HolderId, LeaseCommand, LeaseName, Ttl};
use certus_store::{Disk, LogStore, Proposal, SimDisk, SledDisk, StateMachineStore, WriteBatch};
use common::{TestConfig, ready};
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
    let disk = SimDisk::new();
    let mut log = Log::new(Arc::new(disk.clone()));
    let vote = Vote::new_committed(3, 2);
    ready(log.save_vote(&vote)).unwrap();
    disk.crash();
    let mut reopened = Log::new(Arc::new(disk));
    assert_eq!(ready(reopened.read_vote()).unwrap(), Some(vote));
}

/// The committed pointer has no flush of its own: it becomes durable with the next flush (an
/// append's, in a running node). A crash before that rolls it back, never forward; the node's
/// `BootLog` keeps a leader that resumes after such a crash from reading below its log's end.
#[test]
fn a_committed_pointer_is_durable_with_the_next_flush() {
    let disk = SimDisk::new();
    let mut log = Log::new(Arc::new(disk.clone()));
    let committed = Some(log_id(1, 1, 7));
    ready(log.save_committed(committed)).unwrap();
    disk.crash();
    let mut reopened = Log::new(Arc::new(disk.clone()));
    assert_eq!(ready(reopened.read_committed()).unwrap(), None);

    ready(reopened.save_committed(committed)).unwrap();
    reopened
        .append_durably([entry(8, EntryPayload::Blank)])
        .unwrap();
    disk.crash();
    let mut again = Log::new(Arc::new(disk));
    assert_eq!(ready(again.read_committed()).unwrap(), committed);
}

#[test]
fn appended_entries_survive_a_crash_and_unflushed_writes_do_not() {
    let disk = SimDisk::new();
    let log = Log::new(Arc::new(disk.clone()));
    log.append_durably((1..=3).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    assert_eq!(
        disk.pending_batches(),
        0,
        "append returns only after a flush"
    );
    // A write nobody flushed is lost in the crash.
    let mut unflushed = WriteBatch::new();
    unflushed.put(b"unflushed".to_vec(), b"lost".to_vec());
    disk.write(unflushed).unwrap();
    assert_eq!(disk.pending_batches(), 1);
    disk.crash();
    assert_eq!(disk.get(b"unflushed").unwrap(), None);
    let mut reopened = Log::new(Arc::new(disk));
    assert_eq!(log_indexes(&mut reopened), [1, 2, 3]);
}

#[test]
fn a_truncated_suffix_does_not_come_back_after_a_crash() {
    let disk = SimDisk::new();
    let mut log = Log::new(Arc::new(disk.clone()));
    log.append_durably((1..=5).map(|i| entry(i, EntryPayload::Blank)))
        .unwrap();
    ready(log.truncate(log_id(1, 1, 3))).unwrap();
    disk.crash();
    assert_eq!(log_indexes(&mut Log::new(Arc::new(disk))), [1, 2]);
}

/// Applies blank entries `1..=upto` on a state machine over `disk` and saves a snapshot there.
fn snapshot_at(disk: &SimDisk, upto: u64) -> openraft::storage::Snapshot<TestConfig> {
    let mut machine = Machine::open(Arc::new(disk.clone())).unwrap();
    ready(machine.apply((1..=upto).map(|i| entry(i, EntryPayload::Blank)))).unwrap();
    ready(ready(machine.get_snapshot_builder()).build_snapshot()).unwrap()
}

#[test]
fn a_purge_is_all_or_nothing_across_a_crash() {
    for kept in [0, 1] {
        let disk = SimDisk::new();
        let mut log = Log::new(Arc::new(disk.clone()));
        log.append_durably((1..=5).map(|i| entry(i, EntryPayload::Blank)))
            .unwrap();
        snapshot_at(&disk, 2);
        ready(log.purge(log_id(1, 1, 2))).unwrap();
        disk.crash_keeping(kept);
        let mut reopened = Log::new(Arc::new(disk));
        let state = ready(reopened.get_log_state()).unwrap();
        let entries = log_indexes(&mut reopened);
        if kept == 0 {
            assert_eq!(
                (state.last_purged_log_id, entries),
                (None, vec![1, 2, 3, 4, 5])
            );
        } else {
            assert_eq!(
                (state.last_purged_log_id, entries),
                (Some(log_id(1, 1, 2)), vec![3, 4, 5])
            );
        }
        assert_eq!(state.last_log_id, Some(log_id(1, 1, 5)));
    }
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
fn sled_keeps_the_log_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let disk = SledDisk::open(dir.path()).unwrap();
        let mut log = LogStore::<TestConfig, _>::new(Arc::new(disk));
        log.append_durably((1..=3).map(|i| entry(i, EntryPayload::Blank)))
            .unwrap();
        ready(log.save_vote(&Vote::new(2, 1))).unwrap();
    }
    let disk = SledDisk::open(dir.path()).unwrap();
    let mut log = LogStore::<TestConfig, _>::new(Arc::new(disk));
    let last = ready(log.get_log_state()).unwrap().last_log_id;
    assert_eq!(last, Some(LogId::new(CommittedLeaderId::new(1, 1), 3)));
    assert_eq!(ready(log.read_vote()).unwrap(), Some(Vote::new(2, 1)));
}

#[test]
fn a_purge_never_passes_the_snapshot_on_disk() {
    let disk = SimDisk::new();
    let mut log = Log::new(Arc::new(disk.clone()));
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
