//! A store seeded from an exported snapshot opens as openraft needs it: the state and the new
//! membership at the snapshot's log id, the log purged up to it and empty, a vote in its term;
//! a store that is not empty, bytes that are not a state and a node outside the voters are
//! refused and change nothing.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use certus_core::State;
use certus_store::{SimDisk, SimFiles, StateMachineStore, seed_from_snapshot};
use common::{TestConfig, ready, sim_log};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::testing::log_id;
use openraft::{BasicNode, Membership};

fn three_nodes() -> Membership<u64, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> = (11..=13)
        .map(|id| (id, BasicNode::new(format!("127.0.0.1:{id}"))))
        .collect();
    Membership::new(vec![nodes.keys().copied().collect::<BTreeSet<_>>()], nodes)
}

#[test]
fn a_seeded_store_opens_at_the_snapshot_with_the_new_membership_and_an_empty_log() {
    let disk = SimDisk::new();
    let files = SimFiles::new();
    let snapshot = State::new().to_snapshot();
    let at = log_id(7, 1, 120);
    seed_from_snapshot::<TestConfig, _>(&disk, 12, three_nodes(), at, snapshot)
        .expect("an empty store is seeded");
    // What a crash keeps: the seed is flushed before it returns.
    disk.crash();

    let mut log = sim_log(&disk, &files);
    let state = ready(log.get_log_state()).expect("log state");
    assert_eq!(state.last_purged_log_id, Some(at));
    assert_eq!(state.last_log_id, Some(at), "no entries after the snapshot");
    let vote = ready(log.read_vote())
        .expect("vote")
        .expect("a vote is written");
    assert_eq!(
        vote.leader_id().term,
        7,
        "the vote is in the snapshot's term"
    );
    assert!(!vote.is_committed());

    let mut machine =
        StateMachineStore::<TestConfig, _>::open(Arc::new(disk.clone())).expect("opens");
    let (applied, membership) = ready(machine.applied_state()).expect("applied state");
    assert_eq!(applied, Some(at));
    assert_eq!(membership.log_id(), &Some(at));
    assert_eq!(
        membership.membership().voter_ids().collect::<Vec<_>>(),
        vec![11, 12, 13]
    );
    let snapshot = ready(machine.get_current_snapshot())
        .expect("reads")
        .expect("the snapshot is there");
    assert_eq!(snapshot.meta.last_log_id, Some(at));
}

#[test]
fn a_store_that_is_not_empty_is_not_seeded() {
    let disk = SimDisk::new();
    let at = log_id(2, 1, 10);
    let snapshot = State::new().to_snapshot();
    seed_from_snapshot::<TestConfig, _>(&disk, 11, three_nodes(), at, snapshot.clone())
        .expect("seeded once");
    let error =
        seed_from_snapshot::<TestConfig, _>(&disk, 11, three_nodes(), log_id(3, 1, 20), snapshot)
            .expect_err("a second seed is refused");
    assert!(error.0.contains("empty data directory"), "{error}");
    let machine = StateMachineStore::<TestConfig, _>::open(Arc::new(disk)).expect("opens");
    let applied = machine.reader().read(|applied| applied.last_applied);
    assert_eq!(applied, Some(at), "the first seed is untouched");
}

#[test]
fn bad_bytes_and_a_node_outside_the_voters_are_refused_and_write_nothing() {
    let disk = SimDisk::new();
    let at = log_id(2, 1, 10);
    let error = seed_from_snapshot::<TestConfig, _>(&disk, 11, three_nodes(), at, vec![0xff; 9])
        .expect_err("not a snapshot");
    assert!(error.0.contains("snapshot is invalid"), "{error}");
    let error = seed_from_snapshot::<TestConfig, _>(
        &disk,
        4,
        three_nodes(),
        at,
        State::new().to_snapshot(),
    )
    .expect_err("not a voter");
    assert!(
        error.0.contains("not one of the new cluster's voters"),
        "{error}"
    );
    let machine = StateMachineStore::<TestConfig, _>::open(Arc::new(disk)).expect("opens");
    assert_eq!(machine.reader().read(|applied| applied.last_applied), None);
}
