//! Membership changes under the simulation: a change whose caller went away between its two
//! steps leaves a joint configuration no one finishes, and the next change must still work; a
//! change forwarded by a follower may take as long as the leader gives it.

#![cfg(madsim)]

use std::collections::BTreeSet;
use std::time::Duration;

use certus_core::{ChallengeCommand, ChallengeToken, Command, KeyAuthorization};
use certus_sim::cluster::SimCluster;
use openraft::ChangeMembers;

fn put(token: &str) -> Command {
    Command::Challenge(ChallengeCommand::Put {
        token: ChallengeToken::new(token).expect("token"),
        key_authorization: KeyAuthorization::new(format!("{token}.key")).expect("value"),
    })
}

/// A cluster of three with a leader, whose founding membership is committed: a write commits
/// everything before it (a change while that is uncommitted would be refused as in progress).
async fn settled_cluster() -> (SimCluster, u64) {
    let cluster = SimCluster::start(3);
    let leader = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader within 10 s");
    cluster
        .write(leader, vec![put("settled")])
        .await
        .expect("a write on a healthy cluster");
    (cluster, leader)
}

/// The voters in each configuration node `id` knows (two while a change is half made).
fn configs_of(cluster: &SimCluster, id: u64) -> Vec<BTreeSet<u64>> {
    let replica = cluster.replica(id).expect("the node runs");
    let metrics = replica.raft.metrics();
    let metrics = metrics.borrow();
    metrics
        .membership_config
        .membership()
        .get_joint_config()
        .clone()
}

/// The leader removes the other two from the voters, keeping them as learners, and its caller
/// goes away once the joint configuration is appended, so the second step is never made. The
/// next change, which leaves a learner of that joint configuration's first half out of the
/// cluster, must work: openraft's change from a joint configuration would drop the leader from
/// the members, and then fail to append its own second step (its debug builds assert).
#[madsim::test]
async fn a_change_after_one_left_half_made_finishes_it_first() {
    let (cluster, leader) = settled_cluster().await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let keep: BTreeSet<u64> = [others[0], others[1]].into();

    // The first change, straight to openraft as an admin call would make it, abandoned as soon
    // as its joint configuration is appended.
    let replica = cluster.replica(leader).expect("the leader runs");
    let machine = madsim::runtime::Handle::current()
        .get_node(cluster.machine(leader))
        .expect("the leader's machine");
    let first = {
        let voters = keep.clone();
        machine.spawn(async move {
            let _ = replica
                .raft
                .change_membership(ChangeMembers::ReplaceAllVoters(voters), true)
                .await;
        })
    };
    let joint = tokio::time::timeout(Duration::from_secs(5), async {
        while configs_of(&cluster, leader).len() < 2 {
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
    })
    .await;
    first.abort();
    assert!(joint.is_ok(), "the joint configuration is appended");
    // Let it commit: a leader commits its log with every append and heartbeat.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let still = configs_of(&cluster, leader);
    assert_eq!(still.len(), 2, "the change is left half made: {still:?}");

    // Leave one voter of the joint configuration's second half, out of the cluster.
    let goal: BTreeSet<u64> = [others[0]].into();
    cluster
        .change_voters(leader, goal.clone(), false, Duration::from_secs(10))
        .await
        .expect("the change after the half-made one");
    let now = configs_of(&cluster, leader);
    assert_eq!(now, vec![goal], "the leader's configuration");
    let members: BTreeSet<u64> = cluster
        .replica(leader)
        .expect("the leader runs")
        .membership()
        .members
        .iter()
        .map(|member| member.id)
        .collect();
    assert!(
        members.contains(&leader),
        "the old leader stays a member (a learner): {members:?}"
    );
}

/// A learner added through a follower, which takes longer to catch up than a forwarded write
/// may take (the node was down): the follower waits as long as the leader works on the change
/// and answers it done, not outcome-unknown while the leader goes on to add it.
#[madsim::test]
async fn a_learner_added_through_a_follower_may_take_longer_than_a_forwarded_write() {
    let (cluster, leader) = settled_cluster().await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (follower, learner) = (others[0], others[1]);
    let node = cluster
        .replica(leader)
        .expect("the leader runs")
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&learner)
        .cloned()
        .expect("the learner-to-be is a member");
    cluster
        .change_voters(
            leader,
            [leader, follower].into(),
            false,
            Duration::from_secs(10),
        )
        .await
        .expect("the node leaves the cluster");
    cluster.crash(learner);

    let replica = cluster.replica(follower).expect("the follower runs");
    let machine = madsim::runtime::Handle::current()
        .get_node(cluster.machine(follower))
        .expect("the follower's machine");
    let started = tokio::time::Instant::now();
    let add = machine.spawn(async move { replica.add_learner(learner, node).await });
    // Down for longer than a forwarded write may take; then it comes back and catches up.
    tokio::time::sleep(Duration::from_secs(15)).await;
    cluster.restart(learner);
    let added = tokio::time::timeout(Duration::from_secs(45), add)
        .await
        .expect("an answer within 45 s")
        .expect("the call's task ran to its end");
    let view = added.expect("the learner is added, not outcome-unknown");
    assert!(
        started.elapsed() >= Duration::from_secs(15),
        "the answer waited for the catch-up"
    );
    assert!(
        view.members.iter().any(|member| member.id == learner),
        "the answer's membership holds the learner: {view:?}"
    );
}
