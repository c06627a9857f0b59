//! What an operator's tools see of a running cluster: HTTP requests and gRPC calls counted on
//! `/metrics` (by route template or method, and status code), levels read from the node when
//! scraped, and gRPC server reflection answering a generic client (tonic-reflection's own
//! client, as grpcurl would ask).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use certus_core::Command;
use certus_core::ct::CtCommand;
use certus_ct::chain::{AcceptedRoots, ChainLimits};
use certus_ct::signer::EcdsaP256Signer;
use certus_node::edge::http::node_router;
use certus_node::metrics::Metrics;
use certus_node::{CtNode, CtSetup, Leader, Node, NodeConfig};
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{GetChallengeRequest, PutChallengeRequest};
use certus_store::{CtDatabase, SimDisk, SimFiles};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

use crate::support::{agent, base_url, free_addr, shutdown, start_plain_cluster};

fn grpc_url(config: &NodeConfig) -> String {
    format!("http://{}", config.grpc_addr)
}

/// The value of the sample `name{labels}` in a Prometheus text exposition.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| {
            let Some(rest) = line.strip_prefix(name) else {
                return false;
            };
            let Some(rest) = rest.strip_prefix('{') else {
                return labels.is_empty() && rest.starts_with(' ');
            };
            labels
                .iter()
                .all(|(key, value)| rest.contains(&format!("{key}=\"{value}\"")))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// `/metrics` of `node`.
async fn scrape(node: &NodeConfig) -> String {
    let node = node.clone();
    tokio::task::spawn_blocking(move || {
        let mut response = agent()
            .get(format!("{}/metrics", base_url(&node)))
            .call()
            .expect("request");
        assert_eq!(response.status().as_u16(), 200);
        response.body_mut().read_to_string().expect("body")
    })
    .await
    .expect("scrape")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_shows_its_raft_log_appends_and_the_leader_it_saw_elected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (configs, nodes) = start_plain_cluster(dir.path(), Duration::from_secs(20), |_| {}).await;
    let mut leases = LeasesClient::connect(grpc_url(&configs[0]))
        .await
        .expect("connect");
    leases
        .put_challenge(PutChallengeRequest {
            token: "token".into(),
            key_authorization: "token.thumbprint".into(),
        })
        .await
        .expect("a write");
    // Followers learn of the commit, and append, within a heartbeat or two.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for config in &configs {
        let text = scrape(config).await;
        let value = |name| sample(&text, name, &[]).unwrap_or_else(|| panic!("{name}:\n{text}"));
        assert!(
            value("certus_raft_log_append_seconds_count") >= 1.0,
            "node {}: {text}",
            config.id
        );
        assert_eq!(
            value("certus_raft_log_append_seconds_count"),
            value("certus_raft_log_flush_seconds_count"),
            "every append is flushed once"
        );
        // The membership entry, the leader's blank entry and the write, at least.
        assert!(
            value("certus_raft_log_appended_entries_total") >= 3.0,
            "{text}"
        );
        assert!(value("certus_raft_leader_changes_total") >= 1.0, "{text}");
        assert_eq!(value("certus_raft_voters"), 3.0);
        assert!(value("certus_raft_last_log_index") >= 2.0, "{text}");
    }
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_are_counted_by_method_and_code_and_the_api_is_reflected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (configs, nodes) = start_plain_cluster(dir.path(), Duration::from_secs(20), |_| {}).await;
    let node = &configs[1];

    let mut leases = LeasesClient::connect(grpc_url(node))
        .await
        .expect("connect");
    for n in 0..3 {
        leases
            .put_challenge(PutChallengeRequest {
                token: format!("token-{n}"),
                key_authorization: "token.thumbprint".into(),
            })
            .await
            .expect("a valid put");
    }
    let missing = leases
        .get_challenge(GetChallengeRequest {
            token: "absent".into(),
        })
        .await
        .expect_err("no such token");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let malformed = leases
        .put_challenge(PutChallengeRequest {
            token: "not a token!".into(),
            key_authorization: "x".into(),
        })
        .await
        .expect_err("a malformed token");
    assert_eq!(malformed.code(), tonic::Code::InvalidArgument);

    let text = scrape(node).await;
    let put = "/certus.v1.Leases/PutChallenge";
    let get_challenge = "/certus.v1.Leases/GetChallenge";
    assert_eq!(
        sample(
            &text,
            "certus_grpc_requests_total",
            &[("method", put), ("code", "OK")]
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "certus_grpc_requests_total",
            &[("method", put), ("code", "INVALID_ARGUMENT")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "certus_grpc_requests_total",
            &[("method", get_challenge), ("code", "NOT_FOUND")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "certus_grpc_request_duration_seconds_count",
            &[("method", put)]
        ),
        Some(4.0),
        "{text}"
    );

    // Reflection: the services, then one service's file with its methods.
    let channel = tonic::transport::Endpoint::from_shared(grpc_url(node))
        .expect("a URL")
        .connect()
        .await
        .expect("connect");
    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let answer = |response: ServerReflectionResponse| {
        response
            .message_response
            .expect("a reflection answer carries a message")
    };
    let mut listed = reflection
        .server_reflection_info(futures_util::stream::iter([ask(
            MessageRequest::ListServices(String::new()),
        )]))
        .await
        .expect("reflection answers")
        .into_inner();
    let MessageResponse::ListServicesResponse(services) =
        answer(listed.message().await.expect("a message").expect("one"))
    else {
        panic!("not a service list");
    };
    let names: Vec<&str> = services
        .service
        .iter()
        .map(|service| service.name.as_str())
        .collect();
    for expected in [
        "certus.v1.Leases",
        "certus.v1.Pipelines",
        "certus.v1.Sessions",
        "certus.v1.Admin",
        "grpc.health.v1.Health",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let mut file = reflection
        .server_reflection_info(futures_util::stream::iter([ask(
            MessageRequest::FileContainingSymbol("certus.v1.Pipelines".into()),
        )]))
        .await
        .expect("reflection answers")
        .into_inner();
    let MessageResponse::FileDescriptorResponse(files) =
        answer(file.message().await.expect("a message").expect("one"))
    else {
        panic!("not a file descriptor");
    };
    let described = files
        .file_descriptor_proto
        .iter()
        .map(|bytes| <prost_types::FileDescriptorProto as prost::Message>::decode(bytes.as_slice()))
        .collect::<Result<Vec<_>, _>>()
        .expect("descriptors decode");
    let pipelines = described
        .iter()
        .flat_map(|file| &file.service)
        .find(|service| service.name() == "Pipelines")
        .expect("the Pipelines service is described");
    assert!(
        pipelines
            .method
            .iter()
            .any(|method| method.name() == "Enqueue"),
        "{pipelines:?}"
    );

    shutdown(nodes).await;
}

/// Checks the text format strictly: every line is a `# HELP`/`# TYPE` comment or
/// `series number`.
fn assert_exposition(text: &str) {
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (_, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        assert!(
            value == "+Inf" || value.parse::<f64>().is_ok(),
            "value {value:?} in {line:?}"
        );
    }
}

fn ct_node() -> Arc<CtNode> {
    let pem = EcdsaP256Signer::generate_pkcs8_pem().expect("a key");
    let setup = CtSetup {
        signer: Arc::new(EcdsaP256Signer::from_pkcs8_pem(&pem).expect("the key loads")),
        roots: AcceptedRoots::new(),
        limits: ChainLimits::default(),
    };
    let db = CtDatabase::open(Arc::new(SimDisk::new()), Arc::new(SimFiles::new()))
        .expect("an empty CT database");
    Arc::new(CtNode::new(setup, db, Arc::new(Metrics::new())).expect("a CT node"))
}

/// (status, body) of a request to `addr`.
fn request(
    agent: &ureq::Agent,
    method: &str,
    addr: std::net::SocketAddr,
    path: &str,
) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    let response = match method {
        "GET" => agent.get(&url).call(),
        "POST" => agent
            .post(&url)
            .send_json(serde_json::json!({ "chain": ["Z2FyYmFnZQ=="] })),
        other => panic!("method {other}"),
    };
    let mut response = response.expect("an answer");
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().expect("a body"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template_and_read_the_node_at_scrape_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = NodeConfig::new(1, free_addr(), free_addr(), dir.path().join("node-1"));
    let node = Node::start(config.clone()).await.expect("node starts");
    node.initialize(BTreeMap::from([(1, config.member())]))
        .await
        .expect("initialize");
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.replica().leader() != Some(Leader::Me) {
        assert!(Instant::now() < deadline, "no leader within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replica = Arc::clone(node.replica());
    let metrics = Arc::new(Metrics::new());
    let app = node_router(
        Arc::clone(&replica),
        Arc::clone(&metrics),
        Some(ct_node()),
        None,
        None,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    let frozen = replica
        .write(vec![Command::Ct(CtCommand::SetFrozen { frozen: true })])
        .await
        .expect("freeze");
    assert_eq!(frozen.len(), 1);

    let (first, second) = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        for (method, path, expected) in [
            ("GET", "/health/live", 200),
            ("GET", "/.well-known/acme-challenge/tok-one", 404),
            ("GET", "/.well-known/acme-challenge/tok-two", 404),
            ("GET", "/ct/v1/get-sth", 503),
            ("POST", "/ct/v1/add-chain", 400),
            ("GET", "/no/such/path?secret=1", 404),
        ] {
            let (status, body) = request(&agent, method, addr, path);
            assert_eq!(status, expected, "{method} {path}: {body}");
        }
        let first = request(&agent, "GET", addr, "/metrics");
        let second = request(&agent, "GET", addr, "/metrics");
        (first, second)
    })
    .await
    .expect("client thread");

    assert_eq!(first.0, 200, "{}", first.1);
    let text = &first.1;
    assert_exposition(text);
    let count = |text: &str, path, status| {
        sample(
            text,
            "certus_http_requests_total",
            &[("path", path), ("status", status)],
        )
    };
    assert_eq!(count(text, "/health/live", "200"), Some(1.0));
    assert_eq!(
        count(text, "/.well-known/acme-challenge/{token}", "404"),
        Some(2.0)
    );
    assert_eq!(count(text, "/ct/v1/get-sth", "503"), Some(1.0));
    assert_eq!(count(text, "/ct/v1/add-chain", "400"), Some(1.0));
    assert_eq!(count(text, "other", "404"), Some(1.0));
    // The scrape counts once it is answered, so only the second shows the first.
    assert_eq!(count(text, "/metrics", "200"), None);
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let (series, _) = line.rsplit_once(' ').expect("a value");
        assert!(
            !series.contains("tok-") && !series.contains("secret") && !series.contains("/no/"),
            "a raw URI became a label: {line:?}"
        );
    }
    // Levels, read from the node when scraped.
    assert_eq!(sample(text, "certus_is_leader", &[]), Some(1.0));
    let applied = sample(text, "certus_raft_applied_index", &[]).expect("applied");
    assert!(
        applied >= 2.0,
        "membership and the freeze are applied: {applied}"
    );
    assert!(sample(text, "certus_raft_term", &[]).is_some_and(|term| term >= 1.0));
    assert!(sample(text, "certus_raft_commit_index", &[]).is_some_and(|c| c >= applied));
    assert_eq!(sample(text, "certus_ct_frozen", &[]), Some(1.0));
    assert_eq!(sample(text, "certus_ct_next_sequence", &[]), Some(0.0));
    assert_eq!(
        sample(text, "certus_ct_unsequenced_entries", &[]),
        Some(0.0)
    );
    assert_eq!(sample(text, "certus_ct_held_entries", &[]), Some(0.0));
    assert_eq!(sample(text, "certus_ct_local_tree_size", &[]), Some(0.0));
    assert_eq!(
        sample(text, "certus_ct_local_contiguous_size", &[]),
        Some(0.0)
    );
    assert_eq!(sample(text, "certus_ct_serving_tree_size", &[]), Some(0.0));
    assert_eq!(
        sample(text, "certus_ct_serving_sth_age_seconds", &[]),
        None,
        "nothing published yet"
    );

    assert_eq!(second.0, 200, "{}", second.1);
    assert_eq!(count(&second.1, "/metrics", "200"), Some(1.0));

    server.abort();
    node.shutdown().await;
}
