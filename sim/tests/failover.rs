//! The node under the simulation: a 3-node cluster elects a leader, serves writes, survives the
//! leader's crash with every acknowledged write, and a restarted node catches up.

#![cfg(madsim)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::{ChallengeCommand, ChallengeToken, Command, KeyAuthorization};
use certus_node::{Leader, ServiceError};
use certus_sim::cluster::{ClusterSpec, SimCluster};

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

/// The node that leads now, as the nodes that run see it (a cut-off old leader may still think
/// it leads: only `among` are asked).
async fn leader_among(cluster: &SimCluster, among: &[u64]) -> u64 {
    for _ in 0..200 {
        for &id in among {
            if cluster.replica(id).and_then(|replica| replica.leader()) == Some(Leader::Me) {
                return id;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader among {among:?} within 10 s");
}

/// The leader once every node of `all` holds a write made through the first one. A node that has just
/// won the first election may not yet have replicated the cluster's membership: cut off then,
/// it leaves the others unable to campaign (they are not voters yet) — a setup, not a fault.
async fn formed(cluster: &SimCluster, all: &[u64]) -> u64 {
    let first = leader_among(cluster, all).await;
    cluster
        .write(first, vec![put("formed")])
        .await
        .expect("a write on a fresh cluster");
    let formed = vec!["formed".to_owned()];
    for _ in 0..200 {
        if all
            .iter()
            .all(|&id| missing_on(cluster, id, &formed).is_empty())
        {
            return leader_among(cluster, all).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the first write did not reach every node within 10 s");
}

/// Three nodes that snapshot every ten entries and keep no log behind a snapshot, so a node
/// cut off for a few writes catches up by snapshot.
fn snapshotting_every_ten_entries() -> SimCluster {
    let spec = ClusterSpec {
        tune: |config| {
            config.raft.snapshot_after_entries = 10;
            config.raft.entries_kept_after_snapshot = 0;
        },
        ..ClusterSpec::plain(3)
    };
    SimCluster::start_with(&spec, tokio::time::Instant::now())
}

/// A leader cut off with a write in flight never hears openraft answer it once the others have
/// overtaken its entry with a snapshot (the entry is neither applied nor truncated there). When
/// that node leads again, its proposer must not still be waiting for the answer: a write through
/// it succeeds.
#[madsim::test]
async fn a_leader_whose_write_was_overtaken_by_a_snapshot_serves_writes_when_it_leads_again() {
    let cluster = snapshotting_every_ten_entries();
    let all = [1, 2, 3];
    let old = formed(&cluster, &all).await;
    let net = madsim::net::NetSim::current();
    net.clog_node(cluster.machine(old));
    // Appended on the cut-off leader only; its caller gives up, the proposal stays in flight.
    let lost = tokio::time::timeout(
        Duration::from_millis(500),
        cluster.write(old, vec![put("lost")]),
    )
    .await;
    assert!(lost.is_err(), "a cut-off leader cannot commit: {lost:?}");

    let others: Vec<u64> = all.into_iter().filter(|id| *id != old).collect();
    let new = leader_among(&cluster, &others).await;
    for n in 0..40 {
        cluster
            .write(new, vec![put(&format!("t-{n}"))])
            .await
            .expect("a write on the majority side");
    }
    net.unclog_node(cluster.machine(old));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The old leader, caught up, campaigns until it leads again.
    let mut leads = leader_among(&cluster, &all).await;
    for _ in 0..10 {
        if leads == old {
            break;
        }
        let replica = cluster.replica(old).expect("the old leader runs");
        replica
            .raft
            .trigger()
            .elect()
            .await
            .expect("a campaign starts");
        tokio::time::sleep(Duration::from_secs(2)).await;
        leads = leader_among(&cluster, &all).await;
    }
    assert_eq!(leads, old, "node {old} never led again");
    tokio::time::timeout(
        Duration::from_secs(5),
        cluster.write(old, vec![put("after")]),
    )
    .await
    .expect("a write through the old leader, leading again, is not left waiting")
    .expect("a write through the old leader, leading again");
}

/// The machine clock node `id` has applied (it moves only when an entry proposed with a time is
/// applied: a write or a tick).
fn machine_clock_on(cluster: &SimCluster, id: u64) -> u64 {
    cluster
        .replica(id)
        .expect("the node runs")
        .reader
        .read(|applied| applied.state.clock_ms())
}

/// The last log index node `id` holds.
fn last_log_index(cluster: &SimCluster, id: u64) -> u64 {
    cluster
        .replica(id)
        .expect("the node runs")
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0)
}

/// The last log index node `id` has applied.
fn applied_index(cluster: &SimCluster, id: u64) -> u64 {
    cluster
        .replica(id)
        .expect("the node runs")
        .metrics()
        .borrow()
        .last_applied
        .map_or(0, |log_id| log_id.index)
}

/// A leader cut off with a tick in flight learns it lost its term only when the partition heals,
/// and that tick is answered (outcome unknown) seconds after that. A node that leads again
/// meanwhile must tick in its new term at once: only ticks take lapsed claims and leases back.
#[madsim::test]
async fn a_node_that_leads_again_ticks_without_waiting_for_its_old_tick() {
    let cluster = snapshotting_every_ten_entries();
    let all = [1, 2, 3];
    let old = formed(&cluster, &all).await;
    let net = madsim::net::NetSim::current();
    net.clog_node(cluster.machine(old));
    // The cut-off leader's next tick is appended there only and never commits.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let others: Vec<u64> = all.into_iter().filter(|id| *id != old).collect();
    let new = leader_among(&cluster, &others).await;
    let behind = others
        .into_iter()
        .find(|id| *id != new)
        .expect("a third node");
    // The majority's snapshot overtakes the tick: openraft never answers it (neither applied
    // nor truncated), and the old leader's proposer gives up on it only 10 s after stepping down.
    for n in 0..40 {
        cluster
            .write(new, vec![put(&format!("t-{n}"))])
            .await
            .expect("a write on the majority side");
    }

    // `behind` misses the ticks the new leader commits with the old one, so that only the old
    // leader's log is up to date enough to win once the new leader crashes.
    net.clog_node(cluster.machine(behind));
    net.unclog_node(cluster.machine(old));
    for _ in 0..100 {
        if last_log_index(&cluster, old) > last_log_index(&cluster, behind)
            && cluster.replica(old).and_then(|replica| replica.leader()) != Some(Leader::Me)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        last_log_index(&cluster, old) > last_log_index(&cluster, behind),
        "node {old} did not catch up with node {new} within 5 s of the heal"
    );
    cluster.crash(new);
    net.unclog_node(cluster.machine(behind));
    let leads = leader_among(&cluster, &[old, behind]).await;
    assert_eq!(leads, old, "only node {old}'s log is up to date");

    // Read once what the new term's first entry commits is applied, so that entries of the
    // earlier term applied late cannot pass for a tick.
    let elected_at = last_log_index(&cluster, old);
    for _ in 0..100 {
        if applied_index(&cluster, old) >= elected_at {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        applied_index(&cluster, old) >= elected_at,
        "node {old} applied nothing of its term"
    );
    let clock_when_elected = machine_clock_on(&cluster, old);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        machine_clock_on(&cluster, old) > clock_when_elected,
        "node {old} led again and applied no tick of its own in 3 s (tick interval 1 s)"
    );
}

/// openraft leaves a leader cut off from the majority leading. Once no quorum has acknowledged
/// it for twice the election timeout, a write through it is refused `no-leader` at once, before
/// it is proposed (not held for a commit that cannot come): no node ever applies it.
#[madsim::test]
async fn a_leader_cut_off_from_the_majority_refuses_writes_without_proposing_them() {
    let cluster = SimCluster::start_with(&ClusterSpec::plain(3), tokio::time::Instant::now());
    let all = [1, 2, 3];
    let old = formed(&cluster, &all).await;
    let limit_ms = 2 * cluster
        .replica(old)
        .expect("the leader runs")
        .raft
        .config()
        .election_timeout_max;
    let net = madsim::net::NetSim::current();
    net.clog_node(cluster.machine(old));
    tokio::time::sleep(Duration::from_millis(limit_ms + 1_000)).await;
    assert_eq!(
        cluster.replica(old).and_then(|replica| replica.leader()),
        Some(Leader::Me),
        "node {old} leads on, cut off"
    );
    let asked_at = tokio::time::Instant::now();
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        cluster.write(old, vec![put("cut-off")]),
    )
    .await
    .expect("a write to a cut-off leader is answered, not held");
    let answered_after = asked_at.elapsed();
    assert!(
        matches!(&refused, Err(ServiceError::NoLeader(_))),
        "{refused:?}"
    );
    assert!(
        answered_after < Duration::from_millis(100),
        "refused only after {answered_after:?}"
    );

    let others: Vec<u64> = all.into_iter().filter(|id| *id != old).collect();
    let new = leader_among(&cluster, &others).await;
    net.unclog_node(cluster.machine(old));
    cluster
        .write(new, vec![put("after-heal")])
        .await
        .expect("a write after the heal");
    let after_heal = vec!["after-heal".to_owned()];
    for _ in 0..200 {
        if all
            .iter()
            .all(|&id| missing_on(&cluster, id, &after_heal).is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused_write = vec!["cut-off".to_owned()];
    for id in all {
        assert!(
            missing_on(&cluster, id, &after_heal).is_empty(),
            "node {id} did not catch up within 10 s of the heal"
        );
        assert_eq!(
            missing_on(&cluster, id, &refused_write),
            refused_write,
            "node {id} applied the refused write"
        );
    }
}

/// openraft purges a follower's log right after queueing a snapshot install, before the
/// snapshot is on disk, so the purge stops at the older snapshot there; a node that crashes
/// before its next purge holds a log with a hole below the new snapshot and entries appended
/// above it. Leaders that keep crashing after a partition healed by snapshots make that happen;
/// every node must start again each time and hold every acknowledged write.
#[madsim::test]
async fn nodes_that_crash_after_catching_up_by_snapshot_start_again() {
    let cluster = snapshotting_every_ten_entries();
    let all = [1, 2, 3];
    let cut = formed(&cluster, &all).await;
    let net = madsim::net::NetSim::current();
    net.clog_node(cluster.machine(cut));
    let others: Vec<u64> = all.into_iter().filter(|id| *id != cut).collect();
    let leader = leader_among(&cluster, &others).await;
    let mut acknowledged = Vec::new();
    for n in 0..40 {
        let token = format!("t-{n}");
        cluster
            .write(leader, vec![put(&token)])
            .await
            .expect("a write on the majority side");
        acknowledged.push(token);
    }
    net.unclog_node(cluster.machine(cut));
    tokio::time::sleep(Duration::from_secs(3)).await;
    for round in 0..6 {
        let leads = leader_among(&cluster, &all).await;
        cluster.crash(leads);
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster.restart(leads);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let token = format!("r-{round}");
        let via = leader_among(&cluster, &all).await;
        cluster
            .write(via, vec![put(&token)])
            .await
            .expect("a write after the restart");
        acknowledged.push(token);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in all {
        let missing = missing_on(&cluster, id, &acknowledged);
        assert!(
            missing.is_empty(),
            "node {id} lacks acknowledged writes {missing:?}"
        );
    }
}

/// A power loss while appends wait for their sync: the simulated files lose, keep or tear the
/// unsynced writes (none of them acknowledged), recovery cuts each log at its first torn record,
/// and every acknowledged write survives on every node.
#[madsim::test]
async fn a_power_loss_mid_sync_tears_unsynced_appends_and_keeps_acknowledged_writes() {
    const ROUNDS_MAX: u64 = 20;
    const WRITERS: u64 = 8;
    const UNSYNCED_WAIT_STEPS_MAX: u64 = 5_000;
    let cluster = Arc::new(SimCluster::start(3));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    for round in 0..ROUNDS_MAX {
        // Writable again after the last restart: one acknowledged write first.
        let leader = write_until_acknowledged(&cluster, &format!("r{round}")).await;
        acknowledged
            .lock()
            .expect("acknowledged")
            .push(format!("r{round}"));
        let mut writers = Vec::new();
        for n in 0..WRITERS {
            let cluster = Arc::clone(&cluster);
            let acknowledged = Arc::clone(&acknowledged);
            writers.push(madsim::task::spawn(async move {
                for k in 0.. {
                    let token = format!("r{round}-{n}-{k}");
                    if cluster.write(leader, vec![put(&token)]).await.is_err() {
                        break;
                    }
                    acknowledged.lock().expect("acknowledged").push(token);
                }
            }));
        }
        // Cut the power while some node's appends wait for their sync (or after a while).
        for _ in 0..UNSYNCED_WAIT_STEPS_MAX {
            if (1..=3).any(|id| cluster.log_files(id).unsynced_writes() > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        for id in 1..=3 {
            cluster.crash(id);
        }
        for writer in writers {
            writer.await.expect("the writer ran");
        }
        for id in 1..=3 {
            cluster.restart(id);
        }
        if cluster.unsynced_writes().writes_torn > 0 {
            break;
        }
    }
    let crashes = cluster.unsynced_writes();
    assert!(
        crashes.writes_torn > 0,
        "no crash in {ROUNDS_MAX} rounds found a write in flight to tear: {crashes:?}"
    );
    write_until_acknowledged(&cluster, "after-the-crashes").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let acknowledged = acknowledged.lock().expect("acknowledged").clone();
    for id in 1..=3 {
        let missing = missing_on(&cluster, id, &acknowledged);
        assert!(
            missing.is_empty(),
            "node {id} lost acknowledged writes {missing:?} (crashes: {crashes:?})"
        );
    }
}

/// Writes `token` through whichever node leads until a write is acknowledged (10 s at most);
/// returns that node.
async fn write_until_acknowledged(cluster: &SimCluster, token: &str) -> u64 {
    for _ in 0..200 {
        if let Some(leader) = cluster.leader(Duration::from_millis(50)).await
            && cluster.write(leader, vec![put(token)]).await.is_ok()
        {
            return leader;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no write acknowledged within 10 s");
}

/// A leader whose disk fails an fsync must stop, not carry on over pages the kernel may have
/// dropped: the others elect a new leader, nothing is acknowledged through the failed node, and
/// once its disk works and it is restarted (as after a crash) it catches up with every
/// acknowledged write.
#[madsim::test]
async fn a_leader_whose_fsync_fails_stops_and_no_acknowledged_write_is_lost() {
    let cluster = SimCluster::start(3);
    let failing = cluster
        .leader(Duration::from_secs(10))
        .await
        .expect("a leader within 10 s");
    let mut acknowledged = Vec::new();
    for n in 0..10 {
        let token = format!("before-{n}");
        cluster
            .write(failing, vec![put(&token)])
            .await
            .expect("a write on a healthy cluster");
        acknowledged.push(token);
    }
    cluster.set_disk_fault(failing, Some(certus_store::DiskFault::SyncError));
    // Writes through the failing node: its next sync fails and its Raft stops.
    for n in 0..5 {
        let token = format!("during-{n}");
        let outcome = tokio::time::timeout(
            Duration::from_secs(3),
            cluster.write(failing, vec![put(&token)]),
        )
        .await;
        if let Ok(Ok(_)) = outcome {
            acknowledged.push(token);
        }
    }
    let others: Vec<u64> = (1..=3).filter(|id| *id != failing).collect();
    let successor = leader_among(&cluster, &others).await;
    for n in 0..5 {
        let token = format!("after-{n}");
        cluster
            .write(successor, vec![put(&token)])
            .await
            .expect("a write through the new leader");
        acknowledged.push(token);
    }
    let through_failed = tokio::time::timeout(
        Duration::from_secs(3),
        cluster.write(failing, vec![put("late")]),
    )
    .await;
    assert!(
        !matches!(through_failed, Ok(Ok(_))),
        "the node whose fsync failed acknowledged a write: {through_failed:?}"
    );
    cluster.set_disk_fault(failing, None);
    cluster.crash(failing);
    cluster.restart(failing);
    tokio::time::sleep(Duration::from_secs(5)).await;
    for id in 1..=3 {
        let missing = missing_on(&cluster, id, &acknowledged);
        assert!(
            missing.is_empty(),
            "node {id} lacks acknowledged writes {missing:?}"
        );
    }
}
