//! Three nodes in one process over loopback gRPC: forwarding, linearizable reads on followers,
//! group commit, and a restart that recovers from sled.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use certus_core::{
    ChallengeCommand, ChallengeToken, Command, HolderId, KeyAuthorization, LeaseCommand, LeaseName,
    LeaseReply, Response, Ttl,
};
use certus_node::{CertusNode, Leader, Node, NodeConfig, ServiceError};

// The shared one: it never hands out a port twice in this process, where every module's tests
// run.
use crate::support::free_addr;

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

/// Every read's answer names the log index of the state it was read from: reads one after
/// another, through any node, never go back, and a read after a write is at a later index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_answers_carry_the_index_they_were_read_at() {
    use certus_proto::READ_INDEX_METADATA;
    use certus_proto::v1::leases_client::LeasesClient;
    use certus_proto::v1::{AcquireRequest, CheckFenceRequest};

    let dir = tempfile::tempdir().expect("temp dir");
    let configs = configs(dir.path());
    let nodes = start(&configs).await;
    leader_index(&nodes).await;
    let mut clients = Vec::new();
    for config in &configs {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://{}", config.grpc_addr))
                .expect("endpoint")
                .connect()
                .await
                .expect("gRPC connection");
        clients.push(LeasesClient::new(channel));
    }
    let check = CheckFenceRequest {
        name: "jobs/index".to_owned(),
        fencing_token: 1,
    };
    let index_of = |metadata: &tonic::metadata::MetadataMap| -> u64 {
        metadata
            .get(READ_INDEX_METADATA)
            .expect("the read index entry")
            .to_str()
            .expect("ASCII")
            .parse()
            .expect("a decimal number")
    };
    let mut last = 0;
    for client in &mut clients {
        let answer = client.check_fence(check.clone()).await.expect("a read");
        let index = index_of(answer.metadata());
        assert!(index > 0, "the cluster's first entries are applied");
        assert!(index >= last, "read at {index} after a read at {last}");
        last = index;
    }
    let grant = clients[0]
        .acquire(AcquireRequest {
            name: "jobs/index".to_owned(),
            holder: "worker-1".to_owned(),
            ttl_ms: 30_000,
        })
        .await
        .expect("a grant")
        .into_inner()
        .lease
        .expect("the lease");
    // The fencing token is the grant's log index: every later read is at it or after it.
    assert!(grant.fencing_token > last, "the grant came after the reads");
    let check = CheckFenceRequest {
        fencing_token: grant.fencing_token,
        ..check
    };
    for client in &mut clients {
        let answer = client.check_fence(check.clone()).await.expect("a read");
        let index = index_of(answer.metadata());
        assert!(
            index >= grant.fencing_token,
            "read at {index} after the grant at {}",
            grant.fencing_token
        );
        assert!(answer.into_inner().valid, "the grant's token");
    }
    shutdown(nodes).await;
}

/// `Admin/AddLearner` under a current voter's id is refused, through a follower and through the
/// leader, and the voter stays as it was: openraft would take it and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_a_voter_as_a_learner_is_refused() {
    use certus_proto::v1;
    use certus_proto::v1::admin_client::AdminClient;

    let dir = tempfile::tempdir().expect("temp dir");
    let configs = configs(dir.path());
    let nodes = start(&configs).await;
    let leader = leader_index(&nodes).await;
    let follower = (leader + 1) % nodes.len();
    let voter = &configs[(leader + 2) % nodes.len()];
    let deadline = Instant::now() + Duration::from_secs(15);
    while nodes.iter().any(|node| {
        node.replica()
            .membership()
            .members
            .iter()
            .filter(|member| member.voter)
            .count()
            < 3
    }) {
        assert!(Instant::now() < deadline, "not every node knows the voters");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = nodes[leader].replica().membership().members;

    for through in [follower, leader] {
        let mut admin = AdminClient::connect(format!("http://{}", configs[through].grpc_addr))
            .await
            .expect("gRPC connection");
        let refused = admin
            .add_learner(v1::AddLearnerRequest {
                id: voter.id,
                grpc_addr: free_addr().to_string(),
                http_addr: free_addr().to_string(),
            })
            .await
            .expect_err("a voter's id is refused");
        assert_eq!(
            refused.code(),
            tonic::Code::FailedPrecondition,
            "{refused:?}"
        );
        assert_eq!(
            refused
                .metadata()
                .get("certus-error")
                .and_then(|value| value.to_str().ok()),
            Some("already-a-voter"),
            "{refused:?}"
        );
        assert!(
            refused.message().contains("already a voter"),
            "{}",
            refused.message()
        );
    }
    assert_eq!(
        nodes[leader].replica().membership().members,
        before,
        "the membership is unchanged"
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

/// Asserts a refusal at the edge: INVALID_ARGUMENT, the `certus-error` reason, a message that
/// mentions `mentions` and is short (the oversized input is not echoed back).
fn assert_refused<T: std::fmt::Debug>(
    what: &str,
    answer: Result<T, tonic::Status>,
    mentions: &str,
) {
    let status = answer.expect_err(what);
    assert_eq!(
        status.code(),
        tonic::Code::InvalidArgument,
        "{what}: {status:?}"
    );
    assert_eq!(
        status
            .metadata()
            .get("certus-error")
            .and_then(|value| value.to_str().ok()),
        Some("invalid-argument"),
        "{what}: {status:?}"
    );
    assert!(
        status.message().contains(mentions) && status.message().len() < 300,
        "{what}: {}",
        status.message()
    );
}

/// Input past a named limit is refused where it arrives, before any Raft work: this node is
/// never initialized, so a request that got as far as proposing would wait for a leader and be
/// refused with `no-leader` instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_past_a_limit_is_refused_before_anything_is_proposed() {
    use certus_core::limits::{
        CT_MIRROR_URL_BYTES_MAX, CT_PUBLIC_KEY_BYTES_MAX, SESSION_CERT_BYTES_MAX,
        SESSION_CLAIM_BATCH_MAX, SESSION_DELAY_MS_MAX, SESSION_NAMES_MAX,
        SESSION_VISIBILITY_MS_MAX,
    };
    use certus_node::limits::{HEALTH_SERVICE_NAME_BYTES_MAX, MEMBER_ADDR_BYTES_MAX};
    use certus_proto::health::HealthCheckRequest;
    use certus_proto::health::health_client::HealthClient;
    use certus_proto::v1;
    use certus_proto::v1::admin_client::AdminClient;
    use certus_proto::v1::complete_request::{Challenges, Issued, Outcome, Tested};
    use certus_proto::v1::log_client::LogClient;
    use certus_proto::v1::sessions_client::SessionsClient;

    let dir = tempfile::tempdir().expect("temp dir");
    let key_file = dir.path().join("ct-log-key.pem");
    std::fs::write(
        &key_file,
        certus_ct::signer::EcdsaP256Signer::generate_pkcs8_pem().expect("log key"),
    )
    .expect("write the log key");
    let mut config = NodeConfig::new(1, free_addr(), free_addr(), dir.path().join("node-1"));
    config.ct = certus_node::CtFiles {
        key_file: Some(key_file),
        roots_file: None,
        ..certus_node::CtFiles::default()
    };
    config.sessions.daemons = false;
    let node = Node::start(config.clone()).await.expect("node starts");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", config.grpc_addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("gRPC connection");

    let long_name = "a".repeat(HEALTH_SERVICE_NAME_BYTES_MAX + 1);
    let mut health = HealthClient::new(channel.clone());
    let check = health
        .check(HealthCheckRequest {
            service: long_name.clone(),
        })
        .await;
    assert_refused("Health/Check", check, "service");
    let watch = health
        .watch(HealthCheckRequest { service: long_name })
        .await;
    assert_refused("Health/Watch", watch, "service");

    let add_learner = AdminClient::new(channel.clone())
        .add_learner(v1::AddLearnerRequest {
            id: 2,
            grpc_addr: "1".repeat(MEMBER_ADDR_BYTES_MAX + 1),
            http_addr: "127.0.0.1:7182".to_owned(),
        })
        .await;
    assert_refused("Admin/AddLearner", add_learner, "grpc_addr");

    let mut log = LogClient::new(channel.clone());
    let long_url = format!("http://{}", "a".repeat(CT_MIRROR_URL_BYTES_MAX));
    let mirror = log
        .start_mirror(v1::StartMirrorRequest {
            source_url: long_url,
            source_public_key: vec![0x30; 91],
        })
        .await;
    assert_refused("Log/StartMirror url", mirror, "source_url");
    let mirror = log
        .start_mirror(v1::StartMirrorRequest {
            source_url: "http://127.0.0.1:1".to_owned(),
            source_public_key: vec![0x30; CT_PUBLIC_KEY_BYTES_MAX + 1],
        })
        .await;
    assert_refused(
        "Log/StartMirror key",
        mirror,
        &format!("at most {CT_PUBLIC_KEY_BYTES_MAX}"),
    );

    let mut sessions = SessionsClient::new(channel);
    let key = rcgen::KeyPair::generate().expect("key");
    let csr = rcgen::CertificateParams::new(vec!["a.example.com".to_owned()])
        .expect("CSR params")
        .serialize_request(&key)
        .expect("CSR")
        .der()
        .to_vec();
    let too_many_names: Vec<String> = (0..=SESSION_NAMES_MAX)
        .map(|n| format!("host-{n}.example.com"))
        .collect();
    let create = sessions
        .create(v1::CreateSessionRequest {
            csr,
            names: too_many_names.clone(),
            request_key: String::new(),
        })
        .await;
    assert_refused("Sessions/Create", create, "number of names");
    let claim = |max: u32, visibility_ms: u64| v1::ClaimRequest {
        stage: v1::Stage::MakeChallenge.into(),
        worker: "worker-1".to_owned(),
        visibility_ms,
        max,
        wait_ms: 0,
    };
    let answer = sessions
        .claim(claim(SESSION_CLAIM_BATCH_MAX + 1, 30_000))
        .await;
    assert_refused("Sessions/Claim max", answer, "max");
    let answer = sessions
        .claim(claim(1, SESSION_VISIBILITY_MS_MAX + 1))
        .await;
    assert_refused("Sessions/Claim visibility", answer, "visibility_ms");
    let answer = sessions
        .extend(v1::ExtendRequest {
            id: 1,
            claim_token: 1,
            visibility_ms: 0,
        })
        .await;
    assert_refused("Sessions/Extend", answer, "visibility_ms");
    let answer = sessions
        .release(v1::ReleaseClaimRequest {
            id: 1,
            claim_token: 1,
            delay_ms: SESSION_DELAY_MS_MAX + 1,
            note: String::new(),
        })
        .await;
    assert_refused("Sessions/Release", answer, "delay_ms");
    let complete = |outcome: Outcome| v1::CompleteRequest {
        id: 1,
        claim_token: 1,
        outcome: Some(outcome),
    };
    let challenges = Outcome::Challenges(Challenges {
        challenges: too_many_names
            .iter()
            .enumerate()
            .map(|(n, name)| v1::NewChallenge {
                name: name.clone(),
                token: format!("token-{n}"),
                key_authorization: format!("token-{n}.thumbprint"),
            })
            .collect(),
    });
    let answer = sessions.complete(complete(challenges)).await;
    assert_refused(
        "Sessions/Complete challenges",
        answer,
        "number of challenges",
    );
    let tested = Outcome::Tested(Tested {
        results: too_many_names
            .iter()
            .map(|name| v1::TestResult {
                name: name.clone(),
                satisfied: true,
                error: String::new(),
            })
            .collect(),
    });
    let answer = sessions.complete(complete(tested)).await;
    assert_refused(
        "Sessions/Complete results",
        answer,
        "number of test results",
    );
    let issued = Outcome::Issued(Issued {
        certificate: "x".repeat(SESSION_CERT_BYTES_MAX + 1),
    });
    let answer = sessions.complete(complete(issued)).await;
    assert_refused("Sessions/Complete certificate", answer, "certificate");

    node.shutdown().await;
}

/// A leader whose followers are gone goes on leading (openraft does not step down for want of a
/// quorum), and writes it proposes meanwhile (its own ticks) wait for a commit that cannot come.
/// It must say it is not ready, and stopping it must not wait for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_lost_its_quorum_is_not_ready_and_still_stops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let configs = configs(dir.path());
    let mut nodes = start(&configs).await;
    let leader = leader_index(&nodes).await;
    let leader = nodes.remove(leader);
    shutdown(nodes).await;
    // A few ticks, each a write that can no longer commit.
    tokio::time::sleep(configs[0].tick_interval() * 3).await;
    assert_eq!(
        leader.replica().leader(),
        Some(Leader::Me),
        "the leader leads on without a quorum"
    );
    // ... but says it is not ready, so that probes and load balancers send no one to it.
    let deadline = Instant::now() + Duration::from_secs(15);
    let readiness = loop {
        let readiness = certus_node::services::health::readiness(leader.replica());
        if !readiness.ready || Instant::now() >= deadline {
            break readiness;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !readiness.ready
            && readiness
                .reason
                .as_deref()
                .is_some_and(|why| why.contains("no quorum has acknowledged")),
        "{readiness:?}"
    );
    // A write there is refused at once, before it is proposed, rather than held until the
    // caller's deadline for a commit that cannot come.
    let started = Instant::now();
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        leader
            .replica()
            .write(vec![put("cut-off", "never-proposed")]),
    )
    .await
    .expect("a write to a leader without a quorum is answered at once");
    assert!(
        matches!(&refused, Err(ServiceError::NoLeader(why)) if why.contains("nothing was proposed")),
        "{refused:?} after {:?}",
        started.elapsed()
    );
    let stopped = tokio::time::timeout(Duration::from_secs(60), leader.shutdown()).await;
    assert!(
        stopped.is_ok(),
        "a leader without a quorum did not stop within 60 s"
    );
}
