//! Integration tests on real `certus serve` processes over loopback: leader failure (SIGKILL),
//! catch-up from the log and from a snapshot, membership changes, bad input, and reloading
//! tokens and certificate files on SIGHUP and `certus ctl reload`.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use certus_client::{Client, ClientConfig, ClientError};
use certus_node::raft::forward::{ForwardRefusal, ForwardReply, ForwardRequest};
use certus_proto::v1::RaftMessage;
use certus_proto::v1::raft_client::RaftClient;
use support::{Cluster, Tuning, assert_grants_survive, eventually, http_get};
use tonic::Code;

const ELECTION: Duration = Duration::from_secs(15);

/// The id of the leader, once every running node agrees on one.
async fn leader(cluster: &Cluster) -> u64 {
    leader_other_than(cluster, 0).await
}

async fn leader_other_than(cluster: &Cluster, old: u64) -> u64 {
    support::leader_other_than(cluster, old, ELECTION).await
}

async fn acquire_many(client: &Client, prefix: &str, count: usize) -> BTreeMap<String, u64> {
    support::acquire_many(client, prefix, count, 60_000).await
}

/// A client that talks to `endpoint` only (reads are served by that node).
fn pinned(endpoint: &str) -> Client {
    let config = ClientConfig {
        pin_to_endpoints: true,
        ..ClientConfig::default()
    };
    Client::with_config([endpoint], config).expect("client")
}

async fn applied_index(client: &Client, endpoint: &str) -> Option<u64> {
    client
        .status_of(endpoint)
        .await
        .ok()
        .map(|status| status.applied_index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_new_leader_serves_and_grants_survive_then_restart_catches_up_from_log() {
    let mut cluster = Cluster::start(3, Tuning::default());
    let first_leader = leader(&cluster).await;
    let client = cluster.client();
    let granted = acquire_many(&client, "before-kill", 20).await;

    let killed = cluster.index_of(first_leader);
    cluster.nodes[killed].kill();
    let started = std::time::Instant::now();
    let second_leader = leader_other_than(&cluster, first_leader).await;
    println!("node {second_leader} leads after node {first_leader} was killed");
    let survivors = cluster.client();
    let after = acquire_many(&survivors, "after-kill", 5).await;
    println!("new leader serving {:?} after SIGKILL", started.elapsed());
    assert_grants_survive(&survivors, &granted).await;
    let newest_before = granted.values().max().copied().unwrap_or(0);
    assert!(
        after.values().all(|token| *token > newest_before),
        "fencing tokens keep growing across leaders"
    );

    // The restarted node catches up from the log (nothing was compacted).
    cluster.restart(killed);
    let endpoint = cluster.nodes[killed].spec.grpc.to_string();
    let target = survivors
        .status()
        .await
        .expect("cluster status")
        .commit_index;
    let everyone = cluster.client();
    eventually(
        ELECTION,
        "the restarted node applies the whole log",
        || async {
            applied_index(&everyone, &endpoint)
                .await
                .filter(|applied| *applied >= target)
        },
    )
    .await;
    let status = everyone
        .status_of(&endpoint)
        .await
        .expect("restarted status");
    assert_eq!(
        status.snapshot_index, 0,
        "caught up from the log, not a snapshot"
    );
    assert_grants_survive(&everyone, &granted).await;
    assert_grants_survive(&everyone, &after).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_compacted_entries_catches_up_from_a_snapshot() {
    let tuning = Tuning {
        snapshot_after_entries: 100_000,
        entries_kept_after_snapshot: 0,
        tick_interval_ms: 60_000,
        ..Tuning::default()
    };
    let mut cluster = Cluster::start(3, tuning);
    let first_leader = leader(&cluster).await;
    let follower = cluster
        .nodes
        .iter()
        .position(|node| node.spec.id != first_leader)
        .expect("a follower");
    cluster.nodes[follower].kill();

    let client = cluster.client();
    let granted = acquire_many(&client, "while-down", 30).await;
    // Compact every running node's log past what the stopped node has.
    for endpoint in cluster.endpoints() {
        let reply = client
            .trigger_snapshot(&endpoint)
            .await
            .unwrap_or_else(|error| panic!("snapshot on {endpoint}: {error}"));
        assert!(
            reply.snapshot_index > 0,
            "a snapshot was built on {endpoint}"
        );
    }
    let target = client.status().await.expect("status").commit_index;

    cluster.restart(follower);
    let endpoint = cluster.nodes[follower].spec.grpc.to_string();
    let everyone = cluster.client();
    let status = eventually(
        ELECTION,
        "the restarted node installs a snapshot",
        || async {
            let status = everyone.status_of(&endpoint).await.ok()?;
            (status.applied_index >= target && status.snapshot_index > 0).then_some(status)
        },
    )
    .await;
    assert!(status.snapshot_index >= granted.len() as u64);
    // Reads through the restarted node see every grant.
    let direct = pinned(&endpoint);
    assert_grants_survive(&direct, &granted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_node_refuses_to_start_and_is_rebuilt_from_its_peers() {
    let tuning = Tuning {
        // Compact early, so the rebuilt node comes back by the leader's snapshot.
        snapshot_after_entries: 20,
        entries_kept_after_snapshot: 0,
        ..Tuning::default()
    };
    let mut cluster = Cluster::start(3, tuning);
    let leader_id = leader(&cluster).await;
    let client = cluster.client();
    let granted = acquire_many(&client, "before-damage", 40).await;
    let victim = (0..3)
        .find(|index| cluster.nodes[*index].spec.id != leader_id)
        .expect("a follower");
    let endpoint = cluster.nodes[victim].spec.grpc.to_string();
    let target = client.status().await.expect("status").commit_index;
    eventually(ELECTION, "the follower applies everything", || async {
        applied_index(&client, &endpoint)
            .await
            .filter(|applied| *applied >= target)
    })
    .await;
    cluster.nodes[victim].kill();

    // One bit of one stored value flips behind the node's back.
    let store = cluster.nodes[victim].spec.data_dir.join("raft");
    {
        let db = sled::open(&store).expect("the node's sled database");
        let (key, value) = db
            .iter()
            .filter_map(Result::ok)
            .find(|(key, _)| key.starts_with(b"sm/") || key.starts_with(b"log/"))
            .expect("a stored value");
        let mut damaged = value.to_vec();
        damaged[0] ^= 0x04;
        db.insert(key, damaged).expect("damage");
        db.flush().expect("flush");
    }
    cluster.restart(victim);
    let status = cluster.nodes[victim]
        .exited_within(Duration::from_secs(20))
        .expect("a damaged node refuses to start");
    assert!(!status.success(), "it exits with an error");
    let log = std::fs::read_to_string(cluster.nodes[victim].spec.data_dir.with_extension("log"))
        .expect("node log");
    assert!(
        log.contains("checksums") && log.contains("certus rebuild"),
        "the node says what is wrong and what to do: {log}"
    );

    // More writes while it is down: it must get them too.
    let survivors = cluster.client();
    let later = acquire_many(&survivors, "while-down", 10).await;
    let rebuild = std::process::Command::new(support::binary())
        .arg("rebuild")
        .arg("--config")
        .arg(&cluster.nodes[victim].spec.config_file)
        .output()
        .expect("certus rebuild runs");
    assert!(
        rebuild.status.success(),
        "rebuild: {}{}",
        String::from_utf8_lossy(&rebuild.stdout),
        String::from_utf8_lossy(&rebuild.stderr)
    );
    cluster.restart(victim);
    let target = survivors.status().await.expect("status").commit_index;
    eventually(ELECTION, "the rebuilt node catches up", || async {
        applied_index(&survivors, &endpoint)
            .await
            .filter(|applied| *applied >= target)
    })
    .await;
    let status = survivors.status_of(&endpoint).await.expect("status");
    assert!(status.snapshot_index > 0, "it came back by snapshot");
    // Reads served by the rebuilt node itself see every acknowledged grant.
    let own = pinned(&endpoint);
    assert_grants_survive(&own, &granted).await;
    assert_grants_survive(&own, &later).await;
    let voters = status.members.iter().filter(|member| member.voter).count();
    assert_eq!(voters, 3, "still a voter under its id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_node_joins_as_voter_and_one_leaves() {
    let mut cluster = Cluster::start(3, Tuning::default());
    leader(&cluster).await;
    let client = cluster.client();
    let granted = acquire_many(&client, "before-join", 5).await;

    let joined = cluster.join(4);
    let joined_endpoint = cluster.nodes[joined].spec.grpc.to_string();
    let everyone = cluster.client();
    let members = eventually(ELECTION, "node 4 is a voter", || async {
        let status = everyone.status().await.ok()?;
        status
            .members
            .iter()
            .any(|member| member.id == 4 && member.voter)
            .then_some(status.members)
    })
    .await;
    assert_eq!(members.len(), 4, "four members: {members:?}");

    // Node 1 leaves: the voters become 2, 3, 4.
    let reply = everyone
        .change_membership(vec![2, 3, 4], false)
        .await
        .expect("remove node 1");
    let ids: Vec<u64> = reply.members.iter().map(|member| member.id).collect();
    assert_eq!(ids, vec![2, 3, 4], "node 1 left");
    let index = cluster.index_of(1);
    cluster.nodes[index].kill();

    let remaining = cluster.client();
    leader_other_than(&cluster, 1).await;
    let after = acquire_many(&remaining, "after-leave", 3).await;
    let direct = pinned(&joined_endpoint);
    assert_grants_survive(&direct, &granted).await;
    assert_grants_survive(&direct, &after).await;
}

/// A leader that removes itself from the cluster leads on until its next tick: a membership
/// change it is sent meanwhile must go to the next leader, not to its own Raft (which requires
/// the leader to be a member), and the node stays healthy, so it can be added back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_removed_itself_takes_no_membership_change_and_can_rejoin() {
    let cluster = Cluster::start(3, Tuning::default());
    let old = leader(&cluster).await;
    let spec = cluster.nodes[cluster.index_of(old)].spec.clone();
    let others: Vec<u64> = (1..=3).filter(|id| *id != old).collect();
    let through_old = pinned(&spec.grpc.to_string());
    let reply = through_old
        .change_membership(others.clone(), false)
        .await
        .expect("the leader removes itself");
    let ids: Vec<u64> = reply.members.iter().map(|member| member.id).collect();
    assert_eq!(ids, others, "the leader left");
    // At once, while it may still lead: refused or forwarded, never taken by its own Raft. Out
    // of the cluster it hears of no new leader, so the call is cut short rather than retried.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        through_old.change_membership(others.clone(), false),
    )
    .await;

    // The removed node hears from no leader now: ask the remaining voters.
    let remaining: Vec<String> = others
        .iter()
        .map(|id| cluster.nodes[cluster.index_of(*id)].spec.grpc.to_string())
        .collect();
    let everyone = Client::with_config(remaining.clone(), ClientConfig::default()).expect("client");
    let new = eventually(ELECTION, "a leader among the remaining voters", || async {
        let status = everyone.status_of(&remaining[0]).await.ok()?;
        others
            .contains(&status.leader_id)
            .then_some(status.leader_id)
    })
    .await;
    everyone
        .add_learner(old, spec.grpc.to_string(), spec.http.to_string())
        .await
        .expect("the removed node is added back as a learner (it caught up)");
    let reply = everyone
        .change_membership(vec![1, 2, 3], false)
        .await
        .expect("it votes again");
    assert!(
        reply.members.iter().all(|member| member.voter) && reply.members.len() == 3,
        "three voters: {:?}",
        reply.members
    );
    // Its Raft still runs: it applies what the new leader commits after it rejoined.
    let granted = acquire_many(&everyone, "after-rejoin", 3).await;
    let leader_endpoint = cluster.nodes[cluster.index_of(new)].spec.grpc.to_string();
    let leader_index = applied_index(&everyone, &leader_endpoint)
        .await
        .expect("the leader's status");
    eventually(ELECTION, "the rejoined node catches up", || async {
        let index = applied_index(&through_old, &spec.grpc.to_string()).await?;
        (index >= leader_index).then_some(())
    })
    .await;
    assert_grants_survive(&through_old, &granted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joining_under_a_voters_id_is_refused_unless_it_replaces_it() {
    let mut cluster = Cluster::start(3, Tuning::default());
    leader(&cluster).await;
    let client = cluster.client();
    let granted = acquire_many(&client, "before-replace", 5).await;
    let original = cluster.nodes[cluster.index_of(3)].spec.grpc.to_string();

    // A fresh node under id 3 while node 3 is a voter: refused, and the membership is unchanged.
    let impostor = cluster.join_anew(3, "impostor", &[]);
    let exit = cluster.nodes[impostor]
        .exited_within(Duration::from_secs(30))
        .expect("the impostor gives up");
    assert!(!exit.success(), "refused: {exit:?}");
    let log = std::fs::read_to_string(cluster.nodes[impostor].spec.data_dir.with_extension("log"))
        .expect("its log");
    assert!(log.contains("already a voter"), "says why: {log}");
    let status = client.status().await.expect("status");
    let member = |id: u64| {
        status
            .members
            .iter()
            .find(|member| member.id == id)
            .cloned()
    };
    assert_eq!(status.members.len(), 3, "{:?}", status.members);
    assert_eq!(member(3).expect("node 3").grpc_addr, original);

    // Node 3 is gone for good; a fresh node takes its place with --replace.
    let gone = cluster.index_of(3);
    cluster.nodes[gone].kill();
    let replacement = cluster.join_anew(3, "replacement", &["--replace"]);
    let new_addr = cluster.nodes[replacement].spec.grpc.to_string();
    let survivors = Client::with_config(
        [
            cluster.nodes[cluster.index_of(1)].spec.grpc.to_string(),
            cluster.nodes[cluster.index_of(2)].spec.grpc.to_string(),
        ],
        ClientConfig::default(),
    )
    .expect("client");
    let members = eventually(
        ELECTION * 2,
        "node 3 is a voter at its new address",
        || async {
            let status = survivors.status().await.ok()?;
            status
                .members
                .iter()
                .any(|member| member.id == 3 && member.voter && member.grpc_addr == new_addr)
                .then_some(status.members)
        },
    )
    .await;
    assert_eq!(members.len(), 3, "{members:?}");
    let direct = pinned(&new_addr);
    assert_grants_survive(&direct, &granted).await;
    let after = acquire_many(&survivors, "after-replace", 3).await;
    assert_grants_survive(&direct, &after).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_tells_systemd_when_it_is_ready_and_the_probe_agrees() {
    use std::os::unix::net::UnixDatagram;
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().expect("temporary directory");
    let (grpc, http) = (support::free_addr(), support::free_addr());
    let config_file = dir.path().join("node.toml");
    std::fs::write(
        &config_file,
        format!(
            "plaintext = true\nid = 1\ngrpc_addr = \"{grpc}\"\nhttp_addr = \"{http}\"\n\
             acme_http_addr = \"off\"\n\
             data_dir = \"{}\"\n[[initial_members]]\nid = 1\ngrpc_addr = \"{grpc}\"\n\
             http_addr = \"{http}\"\n",
            dir.path().join("data").display()
        ),
    )
    .expect("config file");
    let probe = |extra: &[&str]| {
        Command::new(support::binary())
            .args(["probe", "--timeout-ms", "2000", "--config"])
            .arg(&config_file)
            .args(extra)
            .output()
            .expect("certus probe runs")
    };
    let before = probe(&[]);
    assert!(!before.status.success(), "no node yet: {before:?}");

    let notify_path = dir.path().join("notify");
    let notifications = UnixDatagram::bind(&notify_path).expect("the notify socket");
    notifications
        .set_read_timeout(Some(ELECTION))
        .expect("timeout");
    let log = std::fs::File::create(dir.path().join("node.log")).expect("log file");
    let mut node = support::KillOnDrop(
        Command::new(support::binary())
            .arg("serve")
            .arg("--config")
            .arg(&config_file)
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("certus serve"),
    );
    let mut received = Vec::new();
    let next = || {
        let mut buffer = [0u8; 512];
        let read = notifications
            .recv(&mut buffer)
            .expect("a notification in time");
        String::from_utf8_lossy(&buffer[..read]).into_owned()
    };
    while !received
        .iter()
        .any(|state: &String| state.contains("READY=1"))
    {
        received.push(next());
    }
    let ready = probe(&[]);
    assert!(ready.status.success(), "ready once it said so: {ready:?}");
    assert!(String::from_utf8_lossy(&ready.stdout).contains("ready"));
    let live = probe(&["--live"]);
    assert!(live.status.success(), "alive: {live:?}");

    // SIGTERM: the node says it is stopping, stops cleanly, and the probe then fails.
    let terminated = Command::new("kill")
        .args(["-TERM", &node.0.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(terminated.success());
    while !received.iter().any(|state| state.contains("STOPPING=1")) {
        received.push(next());
    }
    let exit = node.0.wait().expect("the node exits");
    assert!(exit.success(), "a clean stop: {exit:?}");
    let after = probe(&["--live"]);
    assert!(!after.status.success(), "stopped: {after:?}");
    assert!(
        String::from_utf8_lossy(&after.stderr).contains("no answer"),
        "{after:?}"
    );
}

/// The lines of a node's log at ERROR or WARN. The log is a file, not a terminal: it must hold
/// no colour escape codes (journald and log collectors would show them raw).
fn alarming_lines(log: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).expect("a node log");
    assert!(
        !text.contains('\u{1b}'),
        "{} holds terminal escape codes: {text}",
        log.display()
    );
    text.lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(1)
                .is_some_and(|level| level == "ERROR" || level == "WARN")
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_and_restarting_a_cluster_logs_no_routine_error_or_warning() {
    let tuning = Tuning {
        default_logs: true,
        ..Tuning::default()
    };
    let mut cluster = Cluster::start(3, tuning);
    let first_leader = leader(&cluster).await;
    acquire_many(&cluster.client(), "first-start", 3).await;
    for node in &cluster.nodes {
        let lines = alarming_lines(&node.spec.data_dir.with_extension("log"));
        assert!(
            lines.is_empty(),
            "node {} at start: {lines:#?}",
            node.spec.id
        );
    }
    // The whole cluster stops and starts again, one node after another; every incarnation
    // writes a fresh log.
    for node in &mut cluster.nodes {
        node.kill();
    }
    // A follower comes back first and waits alone past its election timeout (at most 1 s), so
    // it asks unreachable peers for votes: routine whenever nodes start at different times, and
    // said once as "peer not reachable yet". (The old leader, back first, would lead again
    // without an election.)
    let follower = (0..cluster.nodes.len())
        .find(|index| cluster.nodes[*index].spec.id != first_leader)
        .expect("a follower");
    cluster.restart(follower);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for index in (0..cluster.nodes.len()).filter(|index| *index != follower) {
        cluster.restart(index);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    leader(&cluster).await;
    acquire_many(&cluster.client(), "restarted", 3).await;
    for node in &cluster.nodes {
        let log = node.spec.data_dir.with_extension("log");
        let lines = alarming_lines(&log);
        assert!(
            lines.is_empty(),
            "node {} after a restart: {lines:#?}",
            node.spec.id
        );
        let text = std::fs::read_to_string(&log).expect("a node log");
        assert!(text.contains("leads"), "each node says who leads: {text}");
    }
}

fn refusal(error: ClientError) -> (Code, String) {
    match error {
        ClientError::Refused { code, reason, .. } => (code, reason),
        other => panic!("expected a refusal, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let tuning = Tuning {
        tick_interval_ms: 3_600_000,
        ..Tuning::default()
    };
    let cluster = Cluster::start(3, tuning);
    let leader_id = leader(&cluster).await;
    let client = cluster.client();
    client
        .put_challenge("settled-token", "settled.key")
        .await
        .expect("a first write");
    let before = client.status().await.expect("status");

    let (code, reason) = refusal(client.acquire("lease", "holder", 1).await.unwrap_err());
    assert_eq!(
        (code, reason.as_str()),
        (Code::InvalidArgument, "invalid-ttl")
    );
    let (code, reason) = refusal(client.acquire("", "holder", 10_000).await.unwrap_err());
    assert_eq!(
        (code, reason.as_str()),
        (Code::InvalidArgument, "invalid-argument")
    );
    let (code, reason) = refusal(
        client
            .put_challenge("token", &"k".repeat(512 * 1024))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, reason.as_str()),
        (Code::ResourceExhausted, "message-too-large"),
        "an oversized message is refused by its size"
    );

    // A member that is not running, or is another node, is not added.
    let nobody = support::free_addr().to_string();
    let (code, reason) = refusal(
        client
            .add_learner(9, nobody.clone(), nobody)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, reason.as_str()),
        (Code::FailedPrecondition, "member-unreachable")
    );
    let node_two = cluster.nodes[1].spec.clone();
    let (code, reason) = refusal(
        client
            .add_learner(9, node_two.grpc.to_string(), node_two.http.to_string())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (code, reason.as_str()),
        (Code::FailedPrecondition, "member-id-mismatch")
    );

    // Garbage on the Raft port: raw bytes, then a well-formed RPC with a garbage payload.
    let raft_addr = cluster.nodes[0].spec.grpc;
    {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(raft_addr).expect("connect");
        let _ = stream.write_all(b"\x00\xffnot http/2 at all\r\n\r\n garbage garbage");
    }
    let mut raft = RaftClient::connect(format!("http://{raft_addr}"))
        .await
        .expect("connect to the Raft service");
    for payload in [vec![], vec![1, 0xff, 0xff, 0xff, 0xff], vec![99, 1, 2, 3]] {
        let status = raft
            .append_entries(RaftMessage { payload })
            .await
            .expect_err("garbage is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    }
    let status = raft
        .vote(RaftMessage {
            payload: b"\x01garbage".to_vec(),
        })
        .await
        .expect_err("garbage vote is refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    // A forwarded write a peer's services could not have built is refused, not obeyed.
    let leader_addr = cluster.nodes[cluster.index_of(leader_id)].spec.grpc;
    let mut leader_raft = RaftClient::connect(format!("http://{leader_addr}"))
        .await
        .expect("connect to the leader's Raft service");
    let empty = certus_node::raft::codec::encode(&ForwardRequest::Write(Vec::new()));
    let reply = leader_raft
        .forward(RaftMessage { payload: empty })
        .await
        .expect("the leader answers")
        .into_inner();
    let reply: ForwardReply = certus_node::raft::codec::decode(&reply.payload).expect("a reply");
    assert!(
        matches!(
            reply,
            ForwardReply::Refused(ForwardRefusal::FailedPrecondition(_))
        ),
        "{reply:?}"
    );

    let after = client.status().await.expect("status after bad input");
    assert_eq!(
        after.last_log_index, before.last_log_index,
        "no entry was proposed"
    );
    assert_eq!(after.term, before.term, "no election was caused");
    assert_eq!(
        after.members.len(),
        3,
        "no member was added: {:?}",
        after.members
    );
    assert!(
        client
            .list_leases(None, 0)
            .await
            .expect("list")
            .leases
            .is_empty()
    );
    let (code, _) = refusal(client.get_challenge("token").await.unwrap_err());
    assert_eq!(code, Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_serves_health_and_acme_challenges_over_http() {
    let cluster = Cluster::start(3, Tuning::default());
    leader(&cluster).await;
    let client = cluster.client();
    client
        .put_challenge("tok_123-ABC", "tok_123-ABC.thumbprint")
        .await
        .expect("put a token");
    for node in &cluster.nodes {
        let http = node.spec.http;
        assert_eq!(http_get(http, "/health/live").0, 200);
        let ready = eventually(ELECTION, "node ready", || async {
            let (code, body) = http_get(http, "/health/ready");
            (code == 200).then_some(body)
        })
        .await;
        assert!(ready.contains("\"ready\":true"), "{ready}");
        let (code, body) = http_get(http, "/.well-known/acme-challenge/tok_123-ABC");
        assert_eq!((code, body.as_str()), (200, "tok_123-ABC.thumbprint"));
        let (code, body) = http_get(http, "/.well-known/acme-challenge/missing");
        assert_eq!(code, 404);
        assert!(body.contains("\"error\":\"unknown-token\""), "{body}");
        let (code, body) = http_get(http, "/.well-known/acme-challenge/bad%20token!");
        assert_eq!(code, 400);
        assert!(body.contains("\"error\""), "{body}");
        let health = client
            .health_check(&node.spec.grpc.to_string())
            .await
            .expect("gRPC health");
        assert_eq!(
            health,
            certus_proto::health::health_check_response::ServingStatus::Serving
        );
    }
}

/// `certus pki token` for an admin: `(token, its [[tokens]] entry)`.
fn admin_token(name: &str) -> (String, String) {
    let made = std::process::Command::new(support::binary())
        .args(["pki", "token", "--name", name, "--role", "admin"])
        .output()
        .expect("certus pki token");
    assert!(made.status.success(), "{made:?}");
    let text = String::from_utf8(made.stdout).expect("UTF-8");
    let token = text
        .lines()
        .find_map(|line| line.split_once("give it to its holder): "))
        .map(|(_, token)| token.trim().to_owned())
        .expect("the token is printed");
    let entry = text
        .split_once("[[tokens]]")
        .map(|(_, entry)| format!("[[tokens]]{entry}"))
        .expect("the entry is printed");
    (token, entry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_and_ctl_reload_make_a_node_reread_its_tokens_and_files() {
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().expect("temporary directory");
    let pki = dir.path().join("pki");
    for args in [
        &["pki", "init", "--dir"][..],
        &[
            "pki",
            "issue",
            "--name",
            "node-1",
            "--role",
            "node",
            "--ip",
            "127.0.0.1",
            "--dir",
        ],
    ] {
        let made = Command::new(support::binary())
            .args(args)
            .arg(&pki)
            .output()
            .expect("certus pki");
        assert!(made.status.success(), "{made:?}");
    }
    let (old_token, old_entry) = admin_token("old");
    let (new_token, new_entry) = admin_token("new");
    let (grpc, http) = (support::free_addr(), support::free_addr());
    let config = |tokens: &str| {
        format!(
            "id = 1\ngrpc_addr = \"{grpc}\"\nhttp_addr = \"{http}\"\nacme_http_addr = \"off\"\n\
             data_dir = \"{data}\"\n\
             [tls]\nca_cert_file = \"{pki}/ca.pem\"\ncert_file = \"{pki}/node-1.pem\"\n\
             key_file = \"{pki}/node-1-key.pem\"\n\
             [[initial_members]]\nid = 1\ngrpc_addr = \"{grpc}\"\nhttp_addr = \"{http}\"\n\
             {tokens}",
            data = dir.path().join("data").display(),
            pki = pki.display(),
        )
    };
    let config_file = dir.path().join("node.toml");
    std::fs::write(&config_file, config(&old_entry)).expect("config file");
    let log_file = dir.path().join("node.log");
    let mut node = support::KillOnDrop(
        Command::new(support::binary())
            .arg("serve")
            .arg("--config")
            .arg(&config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_file).expect("log file"))
            .spawn()
            .expect("certus serve"),
    );
    let ctl = |token: &str, args: &[&str]| {
        Command::new(support::binary())
            .args(["ctl", "--endpoints", &grpc.to_string(), "--pki-dir"])
            .arg(&pki)
            .args(["--bearer-token", token])
            .args(args)
            .output()
            .expect("certus ctl")
    };
    eventually(ELECTION, "the node answers the old token", || async {
        ctl(&old_token, &["status"]).status.success().then_some(())
    })
    .await;
    let refused = ctl(&new_token, &["status"]);
    assert!(!refused.status.success(), "not configured yet: {refused:?}");

    // The config file now has the new token instead of the old one; SIGHUP reloads it.
    std::fs::write(&config_file, config(&new_entry)).expect("config file");
    let hangup = Command::new("kill")
        .args(["-HUP", &node.0.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(hangup.success());
    eventually(ELECTION, "the node accepts the new token", || async {
        ctl(&new_token, &["status"]).status.success().then_some(())
    })
    .await;
    let refused = ctl(&old_token, &["status"]);
    assert!(
        !refused.status.success(),
        "the old token is gone: {refused:?}"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not known"),
        "{refused:?}"
    );

    // `certus ctl reload`: nothing changed since; a bad certificate file is refused with its
    // name, and the node keeps serving with what it had.
    let reloaded = ctl(&new_token, &["--json", "reload"]);
    assert!(reloaded.status.success(), "{reloaded:?}");
    let reply: serde_json::Value = serde_json::from_slice(&reloaded.stdout).expect("JSON");
    assert_eq!(reply[0]["changed"], serde_json::json!([]), "{reply}");
    let good_cert = std::fs::read(pki.join("node-1.pem")).expect("cert");
    std::fs::write(pki.join("node-1.pem"), "not a certificate").expect("cert");
    let refused = ctl(&new_token, &["reload"]);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("tls.cert_file"),
        "{refused:?}"
    );
    std::fs::write(pki.join("node-1.pem"), good_cert).expect("cert");
    assert!(ctl(&new_token, &["status"]).status.success());

    let log = std::fs::read_to_string(&log_file).expect("log");
    assert!(log.contains("reloaded") && log.contains("tokens"), "{log}");
    assert!(log.contains("reload failed"), "{log}");
    let terminated = Command::new("kill")
        .args(["-TERM", &node.0.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(terminated.success());
    let exit = node.0.wait().expect("the node exits");
    assert!(exit.success(), "a clean stop: {exit:?}");
}
