//! The node under the simulation: a 3-node cluster elects a leader, serves writes, survives the
//! leader's crash with every acknowledged write, and a restarted node catches up.

#![cfg(madsim)]

use std::time::Duration;

use certus_core::{ChallengeCommand, ChallengeToken, Command, KeyAuthorization};
use certus_sim::cluster::SimCluster;

fn put(token: &str) -> Command {
    Command::Challenge(ChallengeCommand::Put {
        token: ChallengeToken::new(token).expect("token"),
        key_authorization: KeyAuthorization::new(format!("{token}.key")).expect("value"),
    })
}

/// The acknowledged tokens node `id` does not hold.
fn missing_on(cluster: &SimCluster, id: u64, acknowledged: &[String]) -> Vec<String> {
    let replica = cluster.replica(id).expect("the node runs");
    acknowledged
        .iter()
        .filter(|token| {
            let token = ChallengeToken::new(token.as_str()).expect("token");
            replica
                .reader
                .read(|applied| applied.state.challenge(&token).is_none())
        })
        .cloned()
        .collect()
}

#[madsim::test]
async fn acknowledged_writes_survive_the_leaders_crash() {
    let cluster = SimCluster::start(3);
    let first = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader within 10 s");
    let mut acknowledged = Vec::new();
    for n in 0..20 {
        let token = format!("before-{n}");
        cluster
            .write(first, vec![put(&token)])
            .await
            .expect("a write on a healthy cluster");
        acknowledged.push(token);
    }

    cluster.crash(first);
    let second = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a new leader within 10 s");
    assert_ne!(second, first, "a crashed node cannot lead");
    for n in 0..5 {
        let token = format!("after-{n}");
        cluster
            .write(second, vec![put(&token)])
            .await
            .expect("a write after failover");
        acknowledged.push(token);
    }

    cluster.restart(first);
    tokio::time::sleep(Duration::from_secs(5)).await;
    for id in 1..=3 {
        let missing = missing_on(&cluster, id, &acknowledged);
        assert!(
            missing.is_empty(),
            "node {id} lacks acknowledged writes {missing:?}"
        );
    }
}

#[madsim::test]
async fn acknowledged_writes_survive_a_whole_cluster_crash() {
    let cluster = SimCluster::start(3);
    let leader = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader within 10 s");
    let mut acknowledged = Vec::new();
    for n in 0..20 {
        let token = format!("t-{n}");
        cluster
            .write(leader, vec![put(&token)])
            .await
            .expect("a write on a healthy cluster");
        acknowledged.push(token);
    }
    // Power loss everywhere: only what was flushed is left.
    for id in 1..=3 {
        cluster.crash(id);
    }
    for id in 1..=3 {
        cluster.restart(id);
    }
    let leader = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader after the restart");
    // A write through the new leader commits everything before it in the log.
    cluster
        .write(leader, vec![put("after-restart")])
        .await
        .expect("a write after the restart");
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in 1..=3 {
        let missing = missing_on(&cluster, id, &acknowledged);
        assert!(
            missing.is_empty(),
            "node {id} lost acknowledged writes {missing:?}"
        );
    }
}

/// Commit pointers are not flushed on their own, so after a power loss everywhere the one on
/// disk may lag the last acknowledged write. A linearizable read right after the restart, before
/// any new write, must still see every acknowledged write on every node: the old leader, which
/// openraft lets lead again in its old term, reads no lower than its log's end at start.
#[madsim::test]
async fn a_read_right_after_a_whole_cluster_crash_sees_acknowledged_writes() {
    let cluster = SimCluster::start(3);
    let leader = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader within 10 s");
    let mut acknowledged = Vec::new();
    for n in 0..20 {
        let token = format!("t-{n}");
        cluster
            .write(leader, vec![put(&token)])
            .await
            .expect("a write on a healthy cluster");
        acknowledged.push(token);
    }
    for id in 1..=3 {
        cluster.crash(id);
    }
    for id in 1..=3 {
        cluster.restart(id);
    }
    // The old leader leads again at once: read through it first, as soon as it runs, before its
    // replication has moved the commit index on; then through the others.
    while cluster.replica(leader).is_none() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let others = (1..=3).filter(|id| *id != leader);
    for id in std::iter::once(leader).chain(others) {
        let wanted = acknowledged.clone();
        let missing = cluster
            .read(id, move |state, _now| {
                wanted
                    .into_iter()
                    .filter(|token| {
                        let token = ChallengeToken::new(token.as_str()).expect("token");
                        state.challenge(&token).is_none()
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .expect("a linearizable read after the restart");
        assert!(
            missing.is_empty(),
            "a read through node {id} misses acknowledged writes {missing:?}"
        );
    }
}
