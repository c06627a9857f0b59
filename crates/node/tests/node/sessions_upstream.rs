//! The issue daemon with an asynchronous upstream CA: a scripted adapter (the order protocol of
//! `certus_ca::upstream`) answers "pending" for a while, then issues. The session reaches DONE
//! with the upstream's certificate, and an order still pending at the poll deadline is resumed
//! by the next claim, never ordered twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse as _;
use base64::Engine as _;
use certus_ca::csr::CheckedCsr;
use certus_ca::issuer::{CaIdentity, LEAF_VALIDITY_DEFAULT, SerialNumber};
use certus_ca::poller::PollPolicyConfig;
use certus_node::{CertusNode, Node, NodeConfig, SessionsSetup};
use certus_proto::v1;
use certus_proto::v1::sessions_client::SessionsClient;

use crate::support::free_addr;

/// What the scripted adapter has seen and how it answers.
struct Script {
    ca: CaIdentity,
    /// GETs answered "pending" before the order is issued.
    pending_gets: u32,
    /// A `Retry-After` (seconds) sent with each "pending".
    retry_after_s: Option<u32>,
    posts: u32,
    gets: u32,
    csr: Option<Vec<u8>>,
}

type Shared = Arc<Mutex<Script>>;

async fn post_order(State(script): State<Shared>, body: String) -> axum::response::Response {
    let json: serde_json::Value = serde_json::from_str(&body).expect("order JSON");
    let csr = base64::engine::general_purpose::STANDARD
        .decode(json["csr"].as_str().expect("csr"))
        .expect("base64 CSR");
    let mut script = script.lock().expect("script");
    script.posts += 1;
    script.csr = Some(csr);
    (
        StatusCode::CREATED,
        axum::Json(serde_json::json!({"id": "o-1"})),
    )
        .into_response()
}

async fn get_order(
    State(script): State<Shared>,
    UrlPath(id): UrlPath<String>,
) -> axum::response::Response {
    assert_eq!(id, "o-1", "the daemon polls the order the adapter gave");
    let mut script = script.lock().expect("script");
    script.gets += 1;
    if script.gets <= script.pending_gets {
        let mut headers = HeaderMap::new();
        if let Some(seconds) = script.retry_after_s {
            headers.insert("retry-after", HeaderValue::from(seconds));
        }
        return (
            headers,
            axum::Json(serde_json::json!({"status": "pending"})),
        )
            .into_response();
    }
    let csr = CheckedCsr::from_der(script.csr.as_ref().expect("an order was posted"))
        .expect("the CSR checks");
    let now_ms = unix_ms();
    let issued = script
        .ca
        .issue(
            &csr,
            SerialNumber::from_random_bytes([7; 16]),
            now_ms,
            LEAF_VALIDITY_DEFAULT,
        )
        .expect("the upstream issues");
    axum::Json(serde_json::json!({"status": "issued", "certificate": issued.chain_pem}))
        .into_response()
}

fn unix_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

/// The scripted adapter on 127.0.0.1; its base URL.
async fn adapter(script: Shared) -> String {
    let app = axum::Router::new()
        .route("/ca/orders", axum::routing::post(post_order))
        .route("/ca/orders/{id}", axum::routing::get(get_order))
        .with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("adapter listener");
    let url = format!("http://{}/ca", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A one-node cluster whose issue daemon orders from `upstream_url` (no CA of its own), and
/// whose HTTP-01 tester finds `names` at the node itself (it serves the tokens).
async fn one_node(
    dir: &std::path::Path,
    upstream_url: String,
    poll: PollPolicyConfig,
    names: &[&str],
) -> (Node, NodeConfig) {
    let mut config = NodeConfig::new(1, free_addr(), free_addr(), dir.join("node-1"));
    config.sessions = SessionsSetup {
        upstream_url: Some(upstream_url),
        upstream_poll: poll,
        http01_resolve: names
            .iter()
            .map(|name| ((*name).to_owned(), config.http_addr))
            .collect(),
        ..SessionsSetup::default()
    };
    let node = Node::start(config.clone()).await.expect("node starts");
    let members: BTreeMap<u64, CertusNode> = BTreeMap::from([(1, config.member())]);
    node.initialize(members).await.expect("initialize");
    (node, config)
}

fn csr_for(names: &[&str]) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    rcgen::CertificateParams::new(names)
        .expect("params")
        .serialize_request(&key)
        .expect("csr")
        .der()
        .to_vec()
}

async fn client(config: &NodeConfig) -> SessionsClient<tonic::transport::Channel> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match SessionsClient::connect(format!("http://{}", config.grpc_addr)).await {
            Ok(client) => return client,
            Err(error) => {
                assert!(Instant::now() < deadline, "no gRPC connection: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Creates a session (retrying while the node elects itself) and polls it until DONE; returns
/// every distinct note seen on the way, and the DONE session.
async fn create_and_finish(
    sessions: &mut SessionsClient<tonic::transport::Channel>,
    csr: Vec<u8>,
    within: Duration,
) -> (v1::Session, Vec<String>) {
    let deadline = Instant::now() + within;
    let created = loop {
        let request = v1::CreateSessionRequest {
            csr: csr.clone(),
            names: Vec::new(),
            request_key: "upstream-test".to_owned(),
        };
        match sessions.create(request).await {
            Ok(reply) => break reply.into_inner(),
            Err(status) => {
                assert!(Instant::now() < deadline, "create refused: {status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut notes = Vec::new();
    loop {
        let session = sessions
            .get(v1::GetSessionRequest { id: created.id })
            .await
            .expect("get")
            .into_inner();
        if !session.note.is_empty() && notes.last() != Some(&session.note) {
            notes.push(session.note.clone());
        }
        if session.stage == i32::from(v1::Stage::Done) {
            return (session, notes);
        }
        assert!(session.live, "the session was killed: {session:?}");
        assert_ne!(session.stage, i32::from(v1::Stage::Failed), "{session:?}");
        assert!(
            Instant::now() < deadline,
            "not DONE within {within:?}: {session:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn quick_poll(max_wait_ms: u64) -> PollPolicyConfig {
    PollPolicyConfig {
        first_wait_ms: 100,
        factor: 1,
        cap_ms: 100,
        jitter_percent: 0,
        max_wait_ms,
    }
}

fn script(pending_gets: u32, retry_after_s: Option<u32>) -> Shared {
    Arc::new(Mutex::new(Script {
        ca: CaIdentity::generate("Upstream Test CA", unix_ms()).expect("upstream CA"),
        pending_gets,
        retry_after_s,
        posts: 0,
        gets: 0,
        csr: None,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_ca_issues_after_pending_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let names = ["up.example.com"];
    let script = script(3, None);
    let url = adapter(Arc::clone(&script)).await;
    let (node, config) = one_node(dir.path(), url, quick_poll(10_000), &names).await;
    let mut sessions = client(&config).await;

    let (done, _) =
        create_and_finish(&mut sessions, csr_for(&names), Duration::from_secs(20)).await;
    let upstream_pem = script
        .lock()
        .expect("script")
        .ca
        .certificate_pem()
        .to_owned();
    assert!(
        done.certificate
            .trim_end()
            .ends_with(upstream_pem.trim_end()),
        "the chain is the upstream's: {}",
        done.certificate
    );
    let (posts, gets) = {
        let script = script.lock().expect("script");
        (script.posts, script.gets)
    };
    assert_eq!(posts, 1, "one order");
    assert_eq!(gets, 4, "three pending answers, then issued");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_still_pending_at_the_deadline_is_resumed_not_ordered_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let names = ["later.example.com"];
    // Pending for longer than one claim's poll (300 ms of waits: 4 attempts), with a 1 s
    // Retry-After: the first claim gives the session back with the order id in its note.
    let script = script(6, Some(1));
    let url = adapter(Arc::clone(&script)).await;
    let (node, config) = one_node(dir.path(), url, quick_poll(300), &names).await;
    let mut sessions = client(&config).await;

    let (done, notes) =
        create_and_finish(&mut sessions, csr_for(&names), Duration::from_secs(30)).await;
    assert!(
        notes.iter().any(|note| note == "upstream order o-1"),
        "the order id was carried to the next claim: {notes:?}"
    );
    assert!(done.note.is_empty(), "a completion clears the note");
    let (posts, gets) = {
        let script = script.lock().expect("script");
        (script.posts, script.gets)
    };
    assert_eq!(posts, 1, "resumed, not ordered again");
    assert_eq!(gets, 7, "six pending answers, then issued");
    node.shutdown().await;
}
