//! Health that tells the truth: a node removed from the cluster stops being ready, a node whose
//! Raft has stopped stops being live, and the gRPC health service answers for every service a
//! node serves (the CT log's on a node that runs it) and for liveness apart from readiness.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use certus_node::{Node, NodeConfig};
use certus_proto::health::HealthCheckRequest;
use certus_proto::health::health_check_response::ServingStatus;
use certus_proto::health::health_client::HealthClient;
use tonic::Code;

use crate::support::{self, start_plain_cluster};

fn http_get(config: &NodeConfig, path: &str) -> (u16, serde_json::Value) {
    let mut response = support::agent()
        .get(format!("http://{}{path}", config.http_addr))
        .call()
        .expect("request");
    let code = response.status().as_u16();
    let body = response.body_mut().read_to_string().expect("body");
    (
        code,
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: not JSON: {body:?}")),
    )
}

async fn health(config: &NodeConfig, service: &str) -> Result<ServingStatus, tonic::Status> {
    let mut client = HealthClient::connect(format!("http://{}", config.grpc_addr))
        .await
        .expect("connect");
    client
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .map(|reply| ServingStatus::try_from(reply.into_inner().status).expect("a known status"))
}

/// Polls `/health/ready` of `config` until `until` holds for its answer.
async fn ready_until(
    config: &NodeConfig,
    until: impl Fn(u16, &serde_json::Value) -> bool,
) -> (u16, serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let config = config.clone();
        let (code, body) = tokio::task::spawn_blocking(move || http_get(&config, "/health/ready"))
            .await
            .expect("probe");
        if until(code, &body) {
            return (code, body);
        }
        assert!(
            Instant::now() < deadline,
            "readiness never changed: {code} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_answers_for_every_service_and_tells_removed_and_stopped_nodes_apart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_plain_cluster(dir.path(), Duration::from_secs(15), |_| {}).await;

    // Every service the node serves is known by name, and so is the node's liveness; the CT
    // log's service is not served here, so it is unknown.
    let (code, body) = ready_until(&configs[0], |code, _| code == 200).await;
    assert_eq!(code, 200, "{body}");
    for service in [
        "",
        "liveness",
        "grpc.health.v1.Health",
        "certus.v1.Raft",
        "certus.v1.Leases",
        "certus.v1.Clients",
        "certus.v1.Admin",
        "certus.v1.Sessions",
        "certus.v1.Pipelines",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert_eq!(
            health(&configs[0], service).await.expect(service),
            ServingStatus::Serving,
            "{service}"
        );
    }
    let unknown = health(&configs[0], "certus.v1.Log")
        .await
        .expect_err("no CT log on this node");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");

    // A node that is no member of any cluster runs (live) but is not ready, and says why.
    let outsider_config = NodeConfig::new(
        4,
        support::free_addr(),
        support::free_addr(),
        dir.path().join("node-4"),
    );
    let outsider = Node::start(outsider_config.clone())
        .await
        .expect("node 4 starts");
    let (code, body) = ready_until(&outsider_config, |code, _| code == 503).await;
    assert_eq!(code, 503);
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("not a member")),
        "{body}"
    );
    outsider.shutdown().await;

    // Node 3 is removed: it still runs (live) but is not ready. The leader stops replicating to
    // it, so it may never learn of its removal; it stops being ready once it finds no leader.
    let voters: BTreeSet<u64> = [1, 2].into();
    nodes[0]
        .replica()
        .change_membership(voters, false)
        .await
        .expect("node 3 removed");
    let (code, body) = ready_until(&configs[2], |code, _| code == 503).await;
    assert_eq!(code, 503);
    assert_eq!(body["ready"], false, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("not a member") || reason.contains("no leader")),
        "{body}"
    );
    let removed = configs[2].clone();
    let (code, body) = tokio::task::spawn_blocking(move || http_get(&removed, "/health/live"))
        .await
        .expect("probe");
    assert_eq!((code, body["live"].as_bool()), (200, Some(true)), "{body}");
    assert_eq!(
        health(&configs[2], "").await.expect("readiness"),
        ServingStatus::NotServing
    );
    assert_eq!(
        health(&configs[2], "liveness").await.expect("liveness"),
        ServingStatus::Serving
    );

    // Node 2's Raft stops: it is neither live nor ready, over HTTP and over gRPC.
    nodes[1]
        .replica()
        .raft
        .shutdown()
        .await
        .expect("raft stops");
    let stopped = configs[1].clone();
    let (code, body) = tokio::task::spawn_blocking(move || http_get(&stopped, "/health/live"))
        .await
        .expect("probe");
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["live"], false, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("Raft has stopped")),
        "{body}"
    );
    let (code, _) = ready_until(&configs[1], |code, _| code == 503).await;
    assert_eq!(code, 503);
    assert_eq!(
        health(&configs[1], "liveness").await.expect("liveness"),
        ServingStatus::NotServing
    );
    // The others are unaffected.
    let live = configs[0].clone();
    let (code, _) = tokio::task::spawn_blocking(move || http_get(&live, "/health/live"))
        .await
        .expect("probe");
    assert_eq!(code, 200);

    for node in nodes {
        node.shutdown().await;
    }
}

/// A node that runs the CT log answers for its service as for every other: SERVING while ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ct_node_answers_serving_for_the_log_service() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = support::Pki::new();
    let (configs, nodes, _) = support::start(dir.path(), "ct-health", &pki).await;
    let (code, body) = ready_until(&configs[0], |code, _| code == 200).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        health(&configs[0], "certus.v1.Log")
            .await
            .expect("the CT log's service is known"),
        ServingStatus::Serving
    );
    assert_eq!(
        health(&configs[0], "certus.v1.Leases")
            .await
            .expect("every node's services stay known"),
        ServingStatus::Serving
    );
    support::shutdown(nodes).await;
}
