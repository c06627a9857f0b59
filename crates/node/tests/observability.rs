//! What an operator's tools see of a running cluster: gRPC calls counted on `/metrics` by method
//! and status code, and gRPC server reflection answering a generic client (tonic-reflection's
//! own client, as grpcurl would ask).

#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{GetChallengeRequest, PutChallengeRequest};
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

use support::{agent, base_url, shutdown, start_plain_cluster};

fn grpc_url(config: &certus_node::NodeConfig) -> String {
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
async fn scrape(node: &certus_node::NodeConfig) -> String {
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
