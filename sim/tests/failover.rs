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
