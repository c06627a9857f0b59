//! The node's HTTP edge on real sockets: the plain-HTTP ACME listener of a TLS cluster (tokens
//! fetched from every node, the session daemons validating through it, nothing else served),
//! the HTTP port with an operator's certificate or in plain HTTP, the listeners' bounds (a
//! request stalled mid-headers or mid-body, an idle kept-alive connection, too many connections
//! from one address) and the JSON body of every error answer.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use certus_ca::issuer::CaIdentity;
use certus_ct::signer::EcdsaP256Signer;
use certus_node::edge::security::{Role, TokenEntry, token_hash};
use certus_node::{CtFiles, HttpSetup, Node, NodeConfig, SessionsSetup, TlsSetup};
use certus_proto::v1;
use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::sessions_client::SessionsClient;
use rcgen::{CertificateParams, KeyPair};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::support::{self, TransportCa, free_addr, start_plain_cluster};

const READER_TOKEN: &str = "c2VjcmV0LXJlYWRlci10b2tlbi1mb3ItdGVzdHM";
/// How long anything that should happen at once may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(30);
/// The listeners' timeouts in the tests that stall: short, so the tests are quick.
const SHORT_TIMEOUT_MS: u64 = 1_000;
/// How long a stalled connection may stay open in those tests: the limit and room for a slow
/// machine, far below what it would stay open without the limit.
const CLOSED_WITHIN: Duration = Duration::from_secs(6);

/// Writes the cluster CA and a certificate per node under `dir/pki`; returns a `tune` for
/// [`start_plain_cluster`] that gives each node its `[tls]` and a reader token.
fn cluster_pki(dir: &Path, ca: &TransportCa, nodes: u64) -> impl Fn(&mut NodeConfig) + use<> {
    let pki = dir.join("pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    std::fs::write(pki.join("ca.pem"), &ca.pem).expect("ca file");
    for id in 1..=nodes {
        let (cert, key) = ca.issue(&format!("node-{id}"), &["node"]);
        std::fs::write(pki.join(format!("node-{id}.pem")), cert).expect("cert file");
        std::fs::write(pki.join(format!("node-{id}-key.pem")), key).expect("key file");
    }
    move |config: &mut NodeConfig| {
        config.tls = Some(TlsSetup {
            ca_cert_file: pki.join("ca.pem"),
            cert_file: pki.join(format!("node-{}.pem", config.id)),
            key_file: pki.join(format!("node-{}-key.pem", config.id)),
            https: true,
        });
        config.tokens = vec![TokenEntry {
            name: "prometheus".into(),
            roles: vec![Role::Reader],
            sha256: token_hash(READER_TOKEN),
        }];
    }
}

async fn channel(addr: SocketAddr, ca: &TransportCa, identity: &(String, String)) -> Channel {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .identity(Identity::from_pem(&identity.0, &identity.1));
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("a gRPC connection")
}

/// Sends `request` as it is over plain TCP and reads until the server closes (or
/// [`PATIENCE`] passes): what came back, and how long the connection stayed open.
async fn exchange(addr: SocketAddr, request: &[u8]) -> (String, Duration) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    // A server that refused the connection may have closed it already; what comes back says.
    let _ = stream.write_all(request).await;
    let mut response = Vec::new();
    let read = tokio::time::timeout(PATIENCE, stream.read_to_end(&mut response)).await;
    assert!(
        read.is_ok(),
        "the server kept the connection open for {PATIENCE:?}; got {:?}",
        String::from_utf8_lossy(&response)
    );
    (
        String::from_utf8_lossy(&response).into_owned(),
        started.elapsed(),
    )
}

/// One GET over plain HTTP: `(status, body)`.
async fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let authorization = token
        .map(|token| format!("authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{authorization}connection: close\r\n\r\n");
    let (text, _) = exchange(addr, request.as_bytes()).await;
    split_response(&text)
}

fn split_response(text: &str) -> (u16, String) {
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// One HTTPS GET over rustls, trusting only `trusted` (PEM): `Err` when the handshake fails.
async fn https_get(
    addr: SocketAddr,
    trusted: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(trusted.as_bytes()).expect("trusted"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::IpAddress(addr.ip().into());
    let mut stream = connector
        .connect(name, socket)
        .await
        .map_err(|error| error.to_string())?;
    let authorization = token
        .map(|token| format!("authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{authorization}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut response = Vec::new();
    // A peer that closes without close_notify is fine here: the response is complete.
    let _ = stream.read_to_end(&mut response).await;
    Ok(split_response(&String::from_utf8_lossy(&response)))
}

/// Asserts a JSON error body with `error` as its reason and a message.
fn assert_json_error(body: &str, error: &str) {
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("a JSON body: {body:?}"));
    assert_eq!(json["error"], error, "{body}");
    assert!(
        json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_serves_challenges_in_plain_http_and_its_daemons_validate_through_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TransportCa::new("Test cluster CA");
    let tls = cluster_pki(dir.path(), &ca, 3);
    // The sessions CA, and the session's names pointed at the nodes' ACME listeners: the
    // daemons fetch in plain HTTP, as validators do, while the HTTP port speaks HTTPS only.
    let sessions_ca =
        CaIdentity::generate("Sessions CA", now_ms() - 60_000).expect("a sessions CA");
    let ca_key_file = dir.path().join("sessions-ca-key.pem");
    let ca_cert_file = dir.path().join("sessions-ca.pem");
    std::fs::write(&ca_key_file, sessions_ca.key_pem()).expect("write");
    std::fs::write(&ca_cert_file, sessions_ca.certificate_pem()).expect("write");
    let acme: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let names = ["www.example.com", "api.example.com"];
    let resolve = BTreeMap::from([
        (names[0].to_owned(), acme[0]),
        (names[1].to_owned(), acme[2]),
    ]);
    let (configs, nodes) = start_plain_cluster(dir.path(), PATIENCE, |config| {
        tls(config);
        config.acme_http_addr = Some(acme[usize::try_from(config.id - 1).expect("small")]);
        config.sessions = SessionsSetup {
            daemons: true,
            ca_key_file: Some(ca_key_file.clone()),
            ca_cert_file: Some(ca_cert_file.clone()),
            http01_resolve: resolve.clone(),
            http01_timeout_ms: 2_000,
            ..SessionsSetup::default()
        };
    })
    .await;
    let admin = ca.issue("ops", &["admin"]);

    // A token put through one node is served in plain HTTP by every node's ACME listener.
    LeasesClient::new(channel(configs[1].grpc_addr, &ca, &admin).await)
        .put_challenge(v1::PutChallengeRequest {
            token: "tokA".into(),
            key_authorization: "tokA.thumbprint".into(),
        })
        .await
        .expect("PutChallenge");
    for config in &configs {
        let addr = config.acme_http_addr.expect("an ACME listener");
        let (code, body) = http_get(addr, "/.well-known/acme-challenge/tokA", None).await;
        assert_eq!(
            (code, body.as_str()),
            (200, "tokA.thumbprint"),
            "node {}",
            config.id
        );
        // The HTTP port itself speaks HTTPS only: plain HTTP gets no HTTP answer.
        let (text, _) = exchange(
            config.http_addr,
            b"GET /.well-known/acme-challenge/tokA HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(!text.starts_with("HTTP/1.1 200"), "{text:?}");
    }
    // The ACME listener serves nothing else: not the health, status or metrics routes, not even
    // with a token; every refusal is a JSON error.
    let addr = acme[0];
    for path in ["/health/live", "/status", "/metrics", "/ct/v1/get-sth", "/"] {
        let (code, body) = http_get(addr, path, Some(READER_TOKEN)).await;
        assert_eq!(code, 404, "{path}: {body}");
        assert_json_error(&body, "not-found");
    }
    let (code, body) = http_get(addr, "/.well-known/acme-challenge/absent", None).await;
    assert_eq!(code, 404, "{body}");
    assert_json_error(&body, "unknown-token");
    let (text, _) = exchange(
        addr,
        b"POST /.well-known/acme-challenge/tokA HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
    .await;
    let (code, body) = split_response(&text);
    assert_eq!(code, 405, "{text}");
    assert!(text.to_lowercase().contains("\r\nallow: get"), "{text}");
    assert_json_error(&body, "method-not-allowed");

    // A session's challenges are tested through the ACME listeners and it is issued.
    let key = KeyPair::generate().expect("key");
    let csr = CertificateParams::new(names.iter().map(|&n| n.to_owned()).collect::<Vec<_>>())
        .expect("CSR params")
        .serialize_request(&key)
        .expect("CSR")
        .der()
        .to_vec();
    let mut sessions = SessionsClient::new(channel(configs[2].grpc_addr, &ca, &admin).await);
    let created = sessions
        .create(v1::CreateSessionRequest {
            csr,
            names: names.iter().map(|&n| n.to_owned()).collect(),
            request_key: String::new(),
        })
        .await
        .expect("Sessions/Create")
        .into_inner();
    let deadline = Instant::now() + PATIENCE;
    let done = loop {
        let session = sessions
            .get(v1::GetSessionRequest { id: created.id })
            .await
            .expect("Sessions/Get")
            .into_inner();
        if session.stage == v1::Stage::Done as i32 || !session.live {
            break session;
        }
        assert!(Instant::now() < deadline, "not issued in time: {session:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done.stage, v1::Stage::Done as i32, "{done:?}");
    assert!(!done.certificate.is_empty());
    for challenge in &done.challenges {
        assert!(
            challenge.satisfied && challenge.last_error.is_empty(),
            "{challenge:?}"
        );
    }
    support::shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_port_presents_an_operators_certificate_or_speaks_plain_http() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TransportCa::new("Test cluster CA");
    let tls = cluster_pki(dir.path(), &ca, 2);
    // A "public" CA the cluster knows nothing of, and the HTTP port's certificate from it.
    let public = TransportCa::new("Public CA");
    let (cert, key) = public.issue_with("log.example.com", &[], true, support::loopback());
    let cert_file = dir.path().join("public.pem");
    let key_file = dir.path().join("public-key.pem");
    std::fs::write(&cert_file, cert).expect("write");
    std::fs::write(&key_file, key).expect("write");

    let mut with_public = NodeConfig::new(1, free_addr(), free_addr(), dir.path().join("node-1"));
    tls(&mut with_public);
    with_public.http = HttpSetup {
        cert_file: Some(cert_file.clone()),
        key_file: Some(key_file.clone()),
        ..HttpSetup::default()
    };
    let node = Node::start(with_public.clone()).await.expect("starts");
    let http = with_public.http_addr;
    let (code, body) = https_get(http, &public.pem, "/health/live", None)
        .await
        .expect("a client trusting only the public CA connects");
    assert_eq!(code, 200, "{body}");
    // No cluster certificate to show: a bearer token reads the metrics.
    let (code, body) = https_get(http, &public.pem, "/metrics", None)
        .await
        .expect("handshake");
    assert_eq!(code, 401, "{body}");
    assert_json_error(&body, "unauthenticated");
    let (code, body) = https_get(http, &public.pem, "/metrics", Some(READER_TOKEN))
        .await
        .expect("handshake");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("certus_http_requests_total"), "the metrics");
    // The HTTP port no longer presents the cluster's certificate; gRPC still does.
    assert!(
        https_get(http, &ca.pem, "/health/live", None)
            .await
            .is_err(),
        "a client trusting only the cluster CA does not verify the public certificate"
    );
    let admin = ca.issue("ops", &["admin"]);
    AdminClient::new(channel(with_public.grpc_addr, &ca, &admin).await)
        .status(v1::StatusRequest {})
        .await
        .expect("gRPC over the cluster's TLS");
    node.shutdown().await;

    // Plain HTTP on the HTTP port, gRPC over TLS: tokens still authorize.
    let mut plain = NodeConfig::new(2, free_addr(), free_addr(), dir.path().join("node-2"));
    tls(&mut plain);
    plain.tls.as_mut().expect("tls").https = false;
    let node = Node::start(plain.clone()).await.expect("starts");
    let (code, _) = http_get(plain.http_addr, "/health/live", None).await;
    assert_eq!(code, 200);
    let (code, body) = http_get(plain.http_addr, "/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    assert_json_error(&body, "unauthenticated");
    let (code, body) = http_get(plain.http_addr, "/metrics", Some(READER_TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    node.shutdown().await;

    // A certificate without its key, or on a port that does not speak TLS, is refused at start.
    let mut half = NodeConfig::new(3, free_addr(), free_addr(), dir.path().join("node-3"));
    tls(&mut half);
    half.http.cert_file = Some(cert_file.clone());
    let error = Node::start(half.clone()).await.expect_err("no key");
    assert!(error.to_string().contains("http.key_file"), "{error}");
    half.http.key_file = Some(key_file);
    half.tls.as_mut().expect("tls").https = false;
    let error = Node::start(half).await.expect_err("not HTTPS");
    assert!(error.to_string().contains("https = true"), "{error}");
}

/// A single node (not founding a cluster: the routes used here need none) with the CT log, the
/// ACME listener and `http`.
async fn single_node(dir: &Path, http: HttpSetup) -> (NodeConfig, Node) {
    let key_file = dir.join("log-key.pem");
    let roots_file = dir.join("roots.pem");
    std::fs::write(
        &key_file,
        EcdsaP256Signer::generate_pkcs8_pem().expect("log key"),
    )
    .expect("write key");
    std::fs::write(&roots_file, support::Pki::new().root_pem).expect("write roots");
    let mut config = NodeConfig::new(1, free_addr(), free_addr(), dir.join("node"));
    config.ct = CtFiles {
        key_file: Some(key_file),
        roots_file: Some(roots_file),
        ..CtFiles::default()
    };
    config.acme_http_addr = Some(free_addr());
    config.http = http;
    let node = Node::start(config.clone()).await.expect("node starts");
    (config, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_and_idle_connections_are_closed_within_the_limits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (config, node) = single_node(
        dir.path(),
        HttpSetup {
            header_read_timeout_ms: SHORT_TIMEOUT_MS,
            body_read_timeout_ms: SHORT_TIMEOUT_MS,
            ..HttpSetup::default()
        },
    )
    .await;
    let acme = config.acme_http_addr.expect("an ACME listener");
    for addr in [config.http_addr, acme] {
        // Half a request line, then nothing.
        let (text, open) = exchange(addr, b"GET /health/li").await;
        assert!(open < CLOSED_WITHIN, "{addr}: open for {open:?} ({text:?})");
        assert!(!text.contains(" 200 "), "{text:?}");
        // Headers begun, never ended.
        let (_, open) = exchange(addr, b"GET /health/live HTTP/1.1\r\nhost: x\r\n").await;
        assert!(open < CLOSED_WITHIN, "{addr}: open for {open:?}");
        // Nothing at all.
        let (_, open) = exchange(addr, b"").await;
        assert!(open < CLOSED_WITHIN, "{addr}: open for {open:?}");
    }
    // A kept-alive connection answered, then idle, is closed too.
    let (text, open) = exchange(
        config.http_addr,
        b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
    assert!(open < CLOSED_WITHIN, "idle for {open:?}");
    // A body that never finishes: the route reading it answers 408 with a JSON body, and the
    // connection is closed.
    let (text, open) = exchange(
        config.http_addr,
        b"POST /ct/v1/add-chain HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"chain\": [",
    )
    .await;
    assert!(open < CLOSED_WITHIN, "open for {open:?} ({text:?})");
    let (code, body) = split_response(&text);
    assert_eq!(code, 408, "{text}");
    assert_json_error(&body, "timeout");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_opens_at_most_the_limit_of_connections() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (config, node) = single_node(
        dir.path(),
        HttpSetup {
            connections_per_client_max: 2,
            ..HttpSetup::default()
        },
    )
    .await;
    let addr = config.http_addr;
    let mut first = tokio::net::TcpStream::connect(addr).await.expect("first");
    let second = tokio::net::TcpStream::connect(addr).await.expect("second");
    // Let the server count both before the third arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The third is closed at once, well before the header timeout (10 s) would.
    let (text, open) = exchange(addr, b"GET /health/live HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(text.is_empty(), "the third connection was served: {text:?}");
    assert!(open < Duration::from_secs(5), "open for {open:?}");
    // The first two are served.
    first
        .write_all(b"GET /health/live HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut response = Vec::new();
    first.read_to_end(&mut response).await.expect("response");
    assert!(response.starts_with(b"HTTP/1.1 200"), "{response:?}");
    drop(second);
    // With both closed, a new connection gets in (once the server has seen them go).
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (code, _) = {
            let (text, _) = exchange(
                addr,
                b"GET /health/live HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            )
            .await;
            if text.is_empty() {
                (0, String::new())
            } else {
                split_response(&text)
            }
        };
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no place freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_error_answer_has_a_json_body() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (config, node) = single_node(dir.path(), HttpSetup::default()).await;
    let addr = config.http_addr;
    let ask = move |request: &'static str| async move {
        let (text, _) = exchange(addr, request.as_bytes()).await;
        let (code, body) = split_response(&text);
        (code, body, text)
    };
    // A known path with a method it does not answer: 405 with `Allow` and a JSON body.
    for (request, allowed) in [
        (
            "POST /health/live HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            "get",
        ),
        (
            "DELETE /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            "get",
        ),
        (
            "GET /ct/v1/add-chain HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            "post",
        ),
        (
            "PUT /ct/v1/get-sth HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            "get",
        ),
    ] {
        let (code, body, text) = ask(request).await;
        assert_eq!(code, 405, "{request}: {text}");
        assert!(
            text.to_lowercase()
                .contains(&format!("\r\nallow: {allowed}")),
            "{text}"
        );
        assert_json_error(&body, "method-not-allowed");
    }
    // No such path.
    let (code, body, text) =
        ask("GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
    assert_eq!(code, 404, "{text}");
    assert_json_error(&body, "not-found");
    // A path parameter that does not decode (not UTF-8), on both listeners.
    for addr in [addr, config.acme_http_addr.expect("ACME")] {
        let (text, _) = exchange(
            addr,
            b"GET /.well-known/acme-challenge/%FF%FE HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        let (code, body) = split_response(&text);
        assert_eq!(code, 400, "{text}");
        assert_json_error(&body, "invalid-token");
    }
    // A token that decodes but is not a token.
    let (code, body, text) = ask(
        "GET /.well-known/acme-challenge/not%20a%20token HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert_json_error(&body, "invalid-token");
    // A query string that does not parse on the CT routes (ct_http.rs checks the 413 of a
    // body past the limit).
    let (code, body, text) = ask(
        "GET /ct/v1/get-entries?start=0&start=1&end=0 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(code, 400, "{text}");
    assert_json_error(&body, "bad-request");
    node.shutdown().await;
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("milliseconds fit")
}
