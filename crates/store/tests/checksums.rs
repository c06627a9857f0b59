//! The store's own checksums: a value damaged on disk stops the database from opening, an old
//! unchecksummed database is refused, and a rebuild keeps only the vote (the Raft log's
//! segments are moved aside with the database).

mod common;

use std::path::Path;
use std::sync::Arc;

use certus_store::{CORRUPT, LogStore, OsFiles, SledDisk, rebuild_keeping_vote};
use common::{TEST_SEGMENT_BYTES, TestConfig, after_release, ready};
use openraft::storage::RaftLogStorage;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload, Vote};

fn open_log(path: &Path) -> LogStore<TestConfig, SledDisk> {
    let disk = after_release(|| SledDisk::open(path)).expect("opens");
    let files = OsFiles::open(&log_dir(path)).expect("the log directory opens");
    LogStore::open(Arc::new(disk), Arc::new(files), TEST_SEGMENT_BYTES).expect("the log opens")
}

/// The segments' directory beside the database at `path`, as the node keeps it.
fn log_dir(path: &Path) -> std::path::PathBuf {
    path.with_file_name("raft-log")
}

/// A log of five entries, a committed pointer and a vote (the vote's flush makes the pointer
/// durable).
fn write_log(path: &Path) {
    let mut log = open_log(path);
    ready(log.save_committed(Some(log_id(1, 1, 3)))).expect("committed");
    log.append_durably((1..=5).map(|index| Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::<TestConfig>::Blank,
    }))
    .expect("appends");
    ready(log.save_vote(&Vote::new(3, 2))).expect("vote");
}

/// Flips one bit of the value at `key`, as a bad sector would, behind the store's back.
fn damage(path: &Path, key: &[u8]) {
    let db = after_release(|| sled::open(path)).expect("raw sled");
    let mut value = db.get(key).expect("read").expect("the key exists").to_vec();
    value[0] ^= 0x01;
    db.insert(key, value).expect("write");
    db.flush().expect("flush");
}

const COMMITTED: &[u8] = b"meta/committed";

#[test]
fn a_damaged_value_stops_the_database_from_opening() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("raft");
    write_log(&path);
    after_release(|| SledDisk::open(&path)).expect("intact data opens");
    damage(&path, COMMITTED);
    let error = after_release(|| SledDisk::open(&path)).expect_err("damaged data is refused");
    assert!(error.0.starts_with(CORRUPT), "{error}");
    assert!(error.0.contains("meta/committed"), "names the key: {error}");
}

#[test]
fn a_database_without_checksums_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("raft");
    {
        let db = sled::open(&path).expect("raw sled");
        db.insert(b"log/x", b"no checksum".to_vec()).expect("write");
        db.flush().expect("flush");
    }
    let error = after_release(|| SledDisk::open(&path)).expect_err("an old format is refused");
    assert!(error.0.contains("older Certus"), "{error}");
}

#[test]
fn a_rebuild_keeps_the_vote_and_nothing_else() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("raft");
    let aside = dir.path().join("raft.damaged");
    let log_aside = dir.path().join("raft-log.damaged");
    write_log(&path);
    assert!(log_dir(&path).exists());
    damage(&path, COMMITTED);
    let rebuilt =
        after_release(|| rebuild_keeping_vote(&path, &aside, &log_dir(&path), &log_aside))
            .expect("rebuilt");
    assert!(rebuilt.kept_vote);
    assert!(aside.exists(), "the damaged data is kept aside");
    assert_eq!(rebuilt.log_moved_to.as_deref(), Some(log_aside.as_path()));
    assert!(
        std::fs::read_dir(&log_aside).expect("moved").count() > 0,
        "the old segments are kept aside"
    );
    let mut log = open_log(&path);
    assert_eq!(ready(log.read_vote()).expect("vote"), Some(Vote::new(3, 2)));
    assert_eq!(ready(log.read_committed()).expect("committed"), None);
    let state = ready(log.get_log_state()).expect("state");
    assert_eq!(
        state.last_log_id, None,
        "the log is empty: it comes back from the leader"
    );
    drop(log);
    // A second rebuild would overwrite the kept data: refused.
    let error = after_release(|| rebuild_keeping_vote(&path, &aside, &log_dir(&path), &log_aside))
        .expect_err("aside exists");
    assert!(error.0.contains("exists"), "{error}");
}

#[test]
fn a_damaged_vote_is_not_carried_over() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("raft");
    write_log(&path);
    damage(&path, b"meta/vote");
    let error = after_release(|| {
        rebuild_keeping_vote(
            &path,
            &dir.path().join("aside"),
            &log_dir(&path),
            &dir.path().join("log-aside"),
        )
    })
    .expect_err("refused");
    assert!(error.0.contains("new id"), "{error}");
    assert!(path.exists(), "nothing was moved");
    assert!(log_dir(&path).exists(), "nothing was moved");
}
