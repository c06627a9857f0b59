//! Three nodes in one process over loopback gRPC: forwarding, linearizable reads on followers,
//! group commit, and a restart that recovers from sled.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use certus_core::{
    ChallengeCommand, ChallengeToken, Command, HolderId, KeyAuthorization, LeaseCommand, LeaseName,
    LeaseReply, Response, Ttl,
};
use certus_node::{CertusNode, Leader, Node, NodeConfig};

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("an ephemeral port")
}

fn configs(dir: &Path) -> Vec<NodeConfig> {
    (1..=3)
        .map(|id| NodeConfig::new(id, free_addr(), free_addr(), dir.join(format!("node-{id}"))))
        .collect()
}

async fn start(configs: &[NodeConfig]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for config in configs {
        nodes.push(Node::start(config.clone()).await.expect("node starts"));
    }
    let members: BTreeMap<u64, CertusNode> = configs
        .iter()
        .map(|config| (config.id, config.member()))
        .collect();
    nodes[0].initialize(members).await.expect("initialize");
    nodes
}

async fn leader_index(nodes: &[Node]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(index) = nodes
            .iter()
            .position(|node| node.replica().leader() == Some(Leader::Me))
        {
            return index;
        }
        assert!(Instant::now() < deadline, "no leader within 15 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn put(token: &str, value: &str) -> Command {
    Command::Challenge(ChallengeCommand::Put {
        token: ChallengeToken::new(token).expect("token"),
        key_authorization: KeyAuthorization::new(value).expect("value"),
    })
}

async fn shutdown(nodes: Vec<Node>) {
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_writes_and_serves_linearizable_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let configs = configs(dir.path());
    let nodes = start(&configs).await;
    let leader = leader_index(&nodes).await;
    let follower = (leader + 1) % nodes.len();
    let other = (leader + 2) % nodes.len();

    let acquire = Command::Lease(LeaseCommand::Acquire {
        name: LeaseName::new("jobs/renewal").expect("name"),
        holder: HolderId::new("worker-1").expect("holder"),
        ttl: Ttl::from_ms(30_000).expect("ttl"),
    });
    let responses = nodes[follower]
        .replica()
        .write(vec![acquire])
        .await
        .expect("a write through a follower");
    let Response::Lease(Ok(LeaseReply::Acquired { lease, .. })) = &responses[0] else {
        panic!("unexpected response {responses:?}");
    };
    // The other follower may not have applied it yet; a linearizable read must still see it.
    let name = LeaseName::new("jobs/renewal").expect("name");
    let seen = nodes[other]
        .replica()
        .read(|state, now_ms| state.lease(&name, now_ms).cloned())
        .await
        .expect("a read through a follower");
    assert_eq!(
        seen.as_ref(),
        Some(lease),
        "the read sees the acknowledged grant"
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_raft_entries() {
    let dir = tempfile::tempdir().expect("temp dir");
    let configs = configs(dir.path());
    let nodes = start(&configs).await;
    let leader = leader_index(&nodes).await;
    let replica = nodes[leader].replica().clone();
    // Settle: the leader's first entries (blank, membership) are applied.
    replica
        .write(vec![put("warm-up", "v")])
        .await
        .expect("warm-up");
    let log_before = replica.raft.metrics().borrow().last_log_index.unwrap_or(0);

    let writes: usize = 256;
    let mut tasks = Vec::new();
    for n in 0..writes {
        let replica = replica.clone();
        tasks.push(tokio::spawn(async move {
            replica.write(vec![put(&format!("t{n}"), "value")]).await
        }));
    }
    for task in tasks {
        let responses = task.await.expect("task").expect("write");
        assert!(
            matches!(responses[..], [Response::Challenge(Ok(_))]),
            "{responses:?}"
        );
    }
    let log_after = replica.raft.metrics().borrow().last_log_index.unwrap_or(0);
    let entries = usize::try_from(log_after - log_before).expect("entry count");
    assert!(
        entries < writes,
        "{writes} concurrent writes took {entries} entries: no group commit"
    );
    let stored = replica
        .read(|state, _| state.challenge_count())
        .await
        .expect("read");
    assert_eq!(stored, writes + 1);
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_cluster_recovers_its_state_from_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let configs = configs(dir.path());
    let nodes = start(&configs).await;
    let leader = leader_index(&nodes).await;
    nodes[leader]
        .replica()
        .write(vec![put("kept", "across-restart")])
        .await
        .expect("write");
    shutdown(nodes).await;

    let nodes = start(&configs).await;
    leader_index(&nodes).await;
    let token = ChallengeToken::new("kept").expect("token");
    for node in &nodes {
        let value = node
            .replica()
            .read(|state, _| {
                state
                    .challenge(&token)
                    .map(|challenge| challenge.key_authorization.as_str().to_owned())
            })
            .await
            .expect("read");
        assert_eq!(value.as_deref(), Some("across-restart"));
    }
    shutdown(nodes).await;
}
