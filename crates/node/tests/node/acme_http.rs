//! The ACME resources (`/acme/`, RFC 8555) against bad and hostile input, as a client no one on
//! the team wrote would send it: JWS bodies that fail each check, nonces replayed, made up or
//! another node's, URLs and keys that name someone else, identifiers and CSRs the server must
//! refuse, one account's resources asked for by another, key rollover, revocation. Every
//! refusal is checked for its status, problem type, content type and fresh `Replay-Nonce`, and
//! a refused write for having changed nothing (the counts in `/status`, or the resource read
//! back). The last test runs an order through to a certificate with the session daemons and a
//! cluster CA, revokes it, and reads the CRL.
//!
//! The client is the test's own (ES256 with ring, HTTP with hyper): it signs whatever it is
//! told to, so it can send what certbot and lego never would. What is asserted is what RFC 8555
//! and docs/acme.md say.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use base64::Engine as _;
use certus_acme::b64;
use certus_ca::issuer::CaIdentity;
use certus_node::acme::AcmeServer;
use certus_node::edge::http::node_router;
use certus_node::metrics::Metrics;
use certus_node::{Leader, Node, NodeConfig, SessionsSetup};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::HeaderMap;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};
use x509_cert::der::Decode as _;

use crate::support::free_addr;

/// How long anything that should happen at once may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long an order may take from "challenges answered" to "certificate issued".
const ISSUANCE_PATIENCE: Duration = Duration::from_secs(60);
/// How often a test polls an order.
const POLL: Duration = Duration::from_millis(100);
/// The node id of the test's node: its nonces start with this id's prefix.
const NODE_ID: u64 = 1;

// ---------------------------------------------------------------------------------------------
// The test's ACME client.

/// An ES256 account key (or a certificate's key).
struct Key {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
}

impl Key {
    fn generate() -> Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key")
            .as_ref()
            .to_vec();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng)
            .expect("the key loads");
        Key { pair, pkcs8 }
    }

    /// The public key's coordinates, base64url.
    fn coordinates(&self) -> (String, String) {
        let point = self.pair.public_key().as_ref();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        (b64::encode(&point[1..33]), b64::encode(&point[33..]))
    }

    fn jwk(&self) -> Value {
        let (x, y) = self.coordinates();
        json!({ "kty": "EC", "crv": "P-256", "x": x, "y": y })
    }

    /// The RFC 7638 thumbprint: SHA-256 of the members in lexicographic order, no spaces.
    fn thumbprint(&self) -> String {
        let (x, y) = self.coordinates();
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        b64::encode(ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes()).as_ref())
    }

    /// An ES256 signature: r‖s, 64 bytes.
    fn sign(&self, input: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), input)
            .expect("signing")
            .as_ref()
            .to_vec()
    }

    /// The same key for rcgen (CSRs and certificates).
    fn rcgen(&self) -> rcgen::KeyPair {
        rcgen::KeyPair::try_from(self.pkcs8.as_slice()).expect("rcgen reads the PKCS#8 key")
    }
}

/// How a request names its key (RFC 8555 §6.2).
#[derive(Clone, Copy)]
enum Signer<'a> {
    /// The key itself, as `jwk`.
    Jwk(&'a Key),
    /// An account URL as `kid`, signed with `key`.
    Kid(&'a Key, &'a str),
}

impl Signer<'_> {
    fn key(&self) -> &Key {
        match self {
            Signer::Jwk(key) | Signer::Kid(key, _) => key,
        }
    }
}

/// The protected header ES256 requests carry.
fn protected(signer: Signer<'_>, nonce: &str, url: &str) -> Value {
    let mut header = json!({ "alg": "ES256", "nonce": nonce, "url": url });
    match signer {
        Signer::Jwk(key) => header["jwk"] = key.jwk(),
        Signer::Kid(_, kid) => header["kid"] = json!(kid),
    }
    header
}

/// The payload member: the JSON, base64url, or empty for POST-as-GET.
fn payload_b64(payload: Option<&Value>) -> String {
    payload.map_or_else(String::new, |payload| {
        b64::encode(payload.to_string().as_bytes())
    })
}

/// A flattened JWS of `header` and `payload` (already base64url), signed with `key`.
fn flattened(key: &Key, header: &Value, payload: &str) -> Value {
    let protected = b64::encode(header.to_string().as_bytes());
    let signature = key.sign(format!("{protected}.{payload}").as_bytes());
    json!({ "protected": protected, "payload": payload, "signature": b64::encode(&signature) })
}

/// What came back.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("an ASCII header"))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.text()))
    }

    fn location(&self) -> String {
        self.header("location")
            .unwrap_or_else(|| panic!("no Location: {self:?}"))
            .to_owned()
    }

    /// Checks that this is a problem document of `kind` with `status` and a fresh nonce;
    /// returns the document.
    fn problem(&self, status: u16, kind: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "expected {status} {kind}, got: {}",
            self.text()
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.text()
        );
        let document = self.json();
        assert_eq!(
            document["type"],
            json!(format!("urn:ietf:params:acme:error:{kind}")),
            "{document}"
        );
        assert_eq!(document["status"], json!(status), "{document}");
        assert!(
            document["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "a problem says what was wrong: {document}"
        );
        self.nonce();
        document
    }

    /// Checks a success with `status`, a JSON body and a fresh nonce; returns the body.
    fn ok(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{}",
            self.text()
        );
        self.nonce();
        self.json()
    }

    /// The answer's `Replay-Nonce`, which every ACME answer carries.
    fn nonce(&self) -> String {
        let nonce = self
            .header("replay-nonce")
            .unwrap_or_else(|| panic!("no Replay-Nonce on {} {}", self.status, self.text()));
        assert!(b64::decode(nonce).is_ok(), "a nonce is base64url: {nonce}");
        nonce.to_owned()
    }
}

/// The test's ACME client, talking to one HTTP address.
struct Acme {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
    /// The last `Replay-Nonce` seen and not used yet.
    nonce: Mutex<Option<String>>,
}

impl Acme {
    fn new(addr: SocketAddr) -> Acme {
        Acme {
            base: format!("http://{addr}"),
            http: Client::builder(TokioExecutor::new()).build_http(),
            nonce: Mutex::new(None),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The path of `url_or_path` on this server.
    fn path<'a>(&self, url_or_path: &'a str) -> &'a str {
        url_or_path
            .strip_prefix(self.base.as_str())
            .unwrap_or(url_or_path)
    }

    /// One request, as it is; the `Host` header is hyper's, `127.0.0.1:PORT`.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(self.url(self.path(path)));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .expect("a request");
        let response = tokio::time::timeout(PATIENCE, self.http.request(request))
            .await
            .expect("an answer in time")
            .expect("an answer");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the body")
            .to_bytes()
            .to_vec();
        let reply = Reply {
            status,
            headers,
            body,
        };
        if let Some(nonce) = reply.header("replay-nonce") {
            *self.nonce.lock().expect("nonce") = Some(nonce.to_owned());
        }
        reply
    }

    async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], Vec::new()).await
    }

    /// A fresh nonce: the last answer's, or one from `HEAD new-nonce`.
    async fn nonce(&self) -> String {
        if let Some(nonce) = self.nonce.lock().expect("nonce").take() {
            return nonce;
        }
        let reply = self.send("HEAD", "/acme/new-nonce", &[], Vec::new()).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        self.nonce.lock().expect("nonce").take().expect("a nonce")
    }

    /// POSTs `body` as `application/jose+json`.
    async fn post_body(&self, path: &str, body: &Value) -> Reply {
        self.send(
            "POST",
            path,
            &[("content-type", "application/jose+json")],
            body.to_string().into_bytes(),
        )
        .await
    }

    /// A well-formed request to `path` (or an absolute URL of this server): `payload`, or
    /// POST-as-GET when none, signed by `signer` with a fresh nonce.
    async fn post(&self, path: &str, signer: Signer<'_>, payload: Option<Value>) -> Reply {
        let path = self.path(path);
        let nonce = self.nonce().await;
        let header = protected(signer, &nonce, &self.url(path));
        let body = flattened(signer.key(), &header, &payload_b64(payload.as_ref()));
        self.post_body(path, &body).await
    }

    /// Creates an account for `key`; its URL (the `kid`).
    async fn account(&self, key: &Key) -> String {
        let reply = self
            .post(
                "/acme/new-account",
                Signer::Jwk(key),
                Some(json!({ "termsOfServiceAgreed": true })),
            )
            .await;
        let account = reply.ok(201);
        assert_eq!(account["status"], "valid", "{account}");
        reply.location()
    }

    /// Places an order for `names`; its URL and the order object.
    async fn order(&self, key: &Key, kid: &str, names: &[&str]) -> (String, Value) {
        let identifiers: Vec<Value> = names
            .iter()
            .map(|name| json!({ "type": "dns", "value": name }))
            .collect();
        let reply = self
            .post(
                "/acme/new-order",
                Signer::Kid(key, kid),
                Some(json!({ "identifiers": identifiers })),
            )
            .await;
        let order = reply.ok(201);
        (reply.location(), order)
    }

    /// A key-change request (RFC 8555 §7.3.5) moving account `kid` from `old` to `new`.
    async fn key_change(&self, kid: &str, old: &Key, new: &Key) -> Reply {
        let url = self.url("/acme/key-change");
        let inner = flattened(
            new,
            &json!({ "alg": "ES256", "jwk": new.jwk(), "url": url }),
            &payload_b64(Some(&json!({ "account": kid, "oldKey": old.jwk() }))),
        );
        self.post("/acme/key-change", Signer::Kid(old, kid), Some(inner))
            .await
    }

    /// A revocation of `der` signed by `signer`.
    async fn revoke(&self, signer: Signer<'_>, der: &[u8], reason: Option<u64>) -> Reply {
        let mut payload = json!({ "certificate": b64::encode(der) });
        if let Some(reason) = reason {
            payload["reason"] = json!(reason);
        }
        self.post("/acme/revoke-cert", signer, Some(payload)).await
    }

    /// `(accounts, orders)` in `/status`'s `acme` block.
    async fn counts(&self) -> (u64, u64) {
        let reply = self.get("/status").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let status = reply.json();
        (
            status["acme"]["accounts"].as_u64().expect("accounts"),
            status["acme"]["orders"].as_u64().expect("orders"),
        )
    }

    /// Polls the order at `url` until its status is one of `wanted`; returns it.
    async fn order_until(&self, key: &Key, kid: &str, url: &str, wanted: &[&str]) -> Value {
        let deadline = Instant::now() + ISSUANCE_PATIENCE;
        loop {
            let order = self.post(url, Signer::Kid(key, kid), None).await.ok(200);
            let status = order["status"].as_str().expect("a status").to_owned();
            if wanted.contains(&status.as_str()) {
                return order;
            }
            assert!(
                matches!(status.as_str(), "pending" | "ready" | "processing"),
                "the order failed: {order}"
            );
            assert!(
                Instant::now() < deadline,
                "the order is still {status} after {ISSUANCE_PATIENCE:?}: {order}"
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// A nonce of node `node_id`'s form that no node issued: its prefix and 16 random bytes.
fn made_up_nonce(node_id: u64) -> String {
    let mut bytes = node_id.to_be_bytes()[5..].to_vec();
    let mut random = [0u8; 16];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut random).expect("random");
    bytes.extend_from_slice(&random);
    b64::encode(&bytes)
}

/// A self-signed certificate for `name` with `serial`, certifying `key` (DER).
fn self_signed(key: &Key, name: &str, serial: &[u8]) -> Vec<u8> {
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
    params.serial_number = Some(rcgen::SerialNumber::from_slice(serial));
    params
        .self_signed(&key.rcgen())
        .expect("a certificate")
        .der()
        .to_vec()
}

/// A CSR for `names` with `key`'s public key (DER).
fn csr(key: &Key, names: &[&str]) -> Vec<u8> {
    let params = rcgen::CertificateParams::new(
        names
            .iter()
            .map(|&name| name.to_owned())
            .collect::<Vec<_>>(),
    )
    .expect("CSR params");
    params
        .serialize_request(&key.rcgen())
        .expect("a CSR")
        .der()
        .to_vec()
}

// ---------------------------------------------------------------------------------------------
// The node.

/// One node that leads its own cluster, with the ACME routes served by a router of the test's
/// on a loopback port (the session daemons off: nothing validates or issues).
struct Edge {
    node: Node,
    server: tokio::task::JoinHandle<()>,
    acme: Acme,
    _dir: tempfile::TempDir,
}

impl Edge {
    async fn start() -> Edge {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config =
            NodeConfig::new(NODE_ID, free_addr(), free_addr(), dir.path().join("node-1"));
        config.sessions.daemons = false;
        let node = start_single(config).await;
        let app = node_router(
            Arc::clone(node.replica()),
            Arc::new(Metrics::new()),
            None,
            Some(Arc::new(AcmeServer::new(NODE_ID, false, None))),
            None,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Edge {
            node,
            server,
            acme: Acme::new(addr),
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.server.abort();
        self.node.shutdown().await;
    }
}

/// Starts `config`'s node as the one member of a new cluster; returned once it leads.
async fn start_single(config: NodeConfig) -> Node {
    let node = Node::start(config.clone()).await.expect("node starts");
    node.initialize(BTreeMap::from([(config.id, config.member())]))
        .await
        .expect("initialize");
    let deadline = Instant::now() + PATIENCE;
    while node.replica().leader() != Some(Leader::Me) {
        assert!(Instant::now() < deadline, "no leader within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node
}

// ---------------------------------------------------------------------------------------------
// The directory and nonces.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_names_absolute_urls_of_the_requests_host_and_nonces_are_fresh() {
    let edge = Edge::start().await;
    let acme = &edge.acme;

    let reply = acme.get("/acme/directory").await;
    let directory = reply.ok(200);
    for (member, path) in [
        ("newNonce", "/acme/new-nonce"),
        ("newAccount", "/acme/new-account"),
        ("newOrder", "/acme/new-order"),
        ("revokeCert", "/acme/revoke-cert"),
        ("keyChange", "/acme/key-change"),
    ] {
        assert_eq!(directory[member], json!(acme.url(path)), "{directory}");
    }
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    // Behind a proxy, the URLs follow the Host the client used.
    let proxied = acme
        .send(
            "GET",
            "/acme/directory",
            &[("host", "acme.example.test:8443")],
            Vec::new(),
        )
        .await
        .ok(200);
    assert_eq!(
        proxied["newOrder"],
        json!("http://acme.example.test:8443/acme/new-order"),
        "{proxied}"
    );

    let head = acme.send("HEAD", "/acme/new-nonce", &[], Vec::new()).await;
    assert_eq!(head.status, 200, "RFC 8555 §7.2: 200 to HEAD");
    assert_eq!(head.header("cache-control"), Some("no-store"));
    let get = acme.get("/acme/new-nonce").await;
    assert_eq!(get.status, 204, "RFC 8555 §7.2: 204 to GET");
    assert_eq!(get.header("cache-control"), Some("no-store"));
    assert!(get.body.is_empty());
    let mut nonces = vec![head.nonce(), get.nonce(), reply.nonce()];
    for _ in 0..20 {
        nonces.push(
            acme.send("HEAD", "/acme/new-nonce", &[], Vec::new())
                .await
                .nonce(),
        );
    }
    let distinct: std::collections::BTreeSet<&String> = nonces.iter().collect();
    assert_eq!(distinct.len(), nonces.len(), "{nonces:?}");
    for nonce in &nonces {
        assert!(nonce.starts_with("AAAB"), "node 1's prefix: {nonce}");
    }

    edge.stop().await;
}

// ---------------------------------------------------------------------------------------------
// The JWS checks every POST goes through.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_fail_the_jws_checks_are_refused_and_create_nothing() {
    let edge = Edge::start().await;
    let acme = &edge.acme;
    let key = Key::generate();
    let new_account = acme.url("/acme/new-account");
    let payload = payload_b64(Some(&json!({ "termsOfServiceAgreed": true })));
    assert_eq!(acme.counts().await, (0, 0));

    // Another content type: 415 (RFC 8555 §6.2).
    let nonce = acme.nonce().await;
    let body = flattened(
        &key,
        &protected(Signer::Jwk(&key), &nonce, &new_account),
        &payload,
    );
    let reply = acme
        .send(
            "POST",
            "/acme/new-account",
            &[("content-type", "application/json")],
            body.to_string().into_bytes(),
        )
        .await;
    reply.problem(415, "malformed");
    let reply = acme
        .send(
            "POST",
            "/acme/new-account",
            &[],
            body.to_string().into_bytes(),
        )
        .await;
    reply.problem(415, "malformed");

    // Not JSON, not an object, the general serialization, an unprotected header, a stray member.
    for junk in [
        b"this is not JSON".to_vec(),
        b"[1, 2, 3]".to_vec(),
        Vec::new(),
        json!({
            "payload": payload,
            "signatures": [{ "protected": body["protected"], "signature": body["signature"] }],
        })
        .to_string()
        .into_bytes(),
        json!({
            "protected": body["protected"], "payload": payload, "signature": body["signature"],
            "header": { "kid": "x" },
        })
        .to_string()
        .into_bytes(),
        json!({
            "protected": body["protected"], "payload": payload, "signature": body["signature"],
            "extra": 1,
        })
        .to_string()
        .into_bytes(),
        json!({ "protected": "not base64url!", "payload": payload, "signature": "" })
            .to_string()
            .into_bytes(),
    ] {
        let reply = acme
            .send(
                "POST",
                "/acme/new-account",
                &[("content-type", "application/jose+json")],
                junk.clone(),
            )
            .await;
        reply.problem(400, "malformed");
    }

    // Algorithms ACME forbids or this server does not take: badSignatureAlgorithm, with the
    // accepted ones listed (RFC 8555 §6.2).
    for alg in ["none", "HS256", "PS256", "ES384"] {
        let nonce = acme.nonce().await;
        let mut header = protected(Signer::Jwk(&key), &nonce, &new_account);
        header["alg"] = json!(alg);
        let body = if alg == "none" {
            let protected = b64::encode(header.to_string().as_bytes());
            json!({ "protected": protected, "payload": payload, "signature": "" })
        } else {
            flattened(&key, &header, &payload)
        };
        let problem = acme
            .post_body("/acme/new-account", &body)
            .await
            .problem(400, "badSignatureAlgorithm");
        assert!(
            problem["algorithms"]
                .as_array()
                .is_some_and(|algs| algs.contains(&json!("ES256"))),
            "{alg}: {problem}"
        );
    }

    // A private key in the header, both jwk and kid, neither, a crit extension.
    let nonce = acme.nonce().await;
    let mut header = protected(Signer::Jwk(&key), &nonce, &new_account);
    header["jwk"]["d"] = json!(b64::encode(&[7; 32]));
    acme.post_body("/acme/new-account", &flattened(&key, &header, &payload))
        .await
        .problem(400, "malformed");
    for change in ["both", "neither", "crit"] {
        let nonce = acme.nonce().await;
        let mut header = protected(Signer::Jwk(&key), &nonce, &new_account);
        match change {
            "both" => header["kid"] = json!(acme.url("/acme/account/1")),
            "neither" => {
                header.as_object_mut().expect("an object").remove("jwk");
            }
            _ => header["crit"] = json!(["b64"]),
        }
        acme.post_body("/acme/new-account", &flattened(&key, &header, &payload))
            .await
            .problem(400, "malformed");
    }

    // A body past the 64 KiB bound: 413.
    let nonce = acme.nonce().await;
    let huge = payload_b64(Some(
        &json!({ "contact": ["mailto:a@example.test"], "pad": "x".repeat(70_000) }),
    ));
    acme.post_body(
        "/acme/new-account",
        &flattened(
            &key,
            &protected(Signer::Jwk(&key), &nonce, &new_account),
            &huge,
        ),
    )
    .await
    .problem(413, "malformed");

    // Nonces: none, one never issued, another node's, one used already. Each answer's nonce
    // then works (RFC 8555 §6.5).
    let mut header = protected(Signer::Jwk(&key), "unused", &new_account);
    header.as_object_mut().expect("an object").remove("nonce");
    acme.post_body("/acme/new-account", &flattened(&key, &header, &payload))
        .await
        .problem(400, "badNonce");
    for nonce in [
        made_up_nonce(NODE_ID),
        made_up_nonce(NODE_ID + 1),
        "AAAB".to_owned(),
    ] {
        let header = protected(Signer::Jwk(&key), &nonce, &new_account);
        let reply = acme
            .post_body("/acme/new-account", &flattened(&key, &header, &payload))
            .await;
        reply.problem(400, "badNonce");
        assert_ne!(reply.nonce(), nonce);
    }
    let nonce = acme.nonce().await;
    let header = protected(Signer::Jwk(&key), &nonce, &new_account);
    let body = flattened(
        &key,
        &header,
        &b64::encode(b"{\"onlyReturnExisting\":true}"),
    );
    acme.post_body("/acme/new-account", &body)
        .await
        .problem(400, "accountDoesNotExist");
    // The same request again, byte for byte: a replay.
    let replayed = acme.post_body("/acme/new-account", &body).await;
    replayed.problem(400, "badNonce");
    assert_eq!(acme.counts().await, (0, 0));

    // The url of another resource, and of another host: unauthorized (RFC 8555 §6.4).
    for url in [
        acme.url("/acme/new-order"),
        new_account.replace("127.0.0.1", "localhost"),
        format!("{new_account}/"),
        new_account.replace("http:", "https:"),
    ] {
        let nonce = acme.nonce().await;
        let header = protected(Signer::Jwk(&key), &nonce, &url);
        acme.post_body("/acme/new-account", &flattened(&key, &header, &payload))
            .await
            .problem(403, "unauthorized");
    }

    // A signature that does not verify: another key's, one bit changed, cut short.
    let other = Key::generate();
    let nonce = acme.nonce().await;
    let header = protected(Signer::Jwk(&key), &nonce, &new_account);
    acme.post_body("/acme/new-account", &flattened(&other, &header, &payload))
        .await
        .problem(400, "malformed");
    for damage in [0usize, 1] {
        let nonce = acme.nonce().await;
        let header = protected(Signer::Jwk(&key), &nonce, &new_account);
        let mut body = flattened(&key, &header, &payload);
        let mut signature =
            b64::decode(body["signature"].as_str().expect("a signature")).expect("base64url");
        if damage == 0 {
            signature[10] ^= 1;
        } else {
            signature.truncate(63);
        }
        body["signature"] = json!(b64::encode(&signature));
        acme.post_body("/acme/new-account", &body)
            .await
            .problem(400, "malformed");
    }
    // The payload swapped under a valid signature.
    let nonce = acme.nonce().await;
    let header = protected(Signer::Jwk(&key), &nonce, &new_account);
    let mut body = flattened(&key, &header, &payload);
    body["payload"] = json!(payload_b64(Some(
        &json!({ "contact": ["mailto:evil@example.test"] })
    )));
    acme.post_body("/acme/new-account", &body)
        .await
        .problem(400, "malformed");
    assert_eq!(acme.counts().await, (0, 0), "nothing was created");

    // kid on new-account; jwk where a kid is required; a kid naming no account.
    let kid = acme.account(&key).await;
    assert_eq!(acme.counts().await, (1, 0));
    let other_kid = acme.url("/acme/account/999999");
    let stranger = Key::generate();
    acme.post(
        "/acme/new-account",
        Signer::Kid(&stranger, &kid),
        Some(json!({})),
    )
    .await
    .problem(400, "malformed");
    let order = json!({ "identifiers": [{ "type": "dns", "value": "www.example.test" }] });
    acme.post("/acme/new-order", Signer::Jwk(&key), Some(order.clone()))
        .await
        .problem(400, "malformed");
    for kid in [
        other_kid.as_str(),
        "http://127.0.0.1:1/acme/account/1",
        "1",
        "http://127.0.0.1/acme/account/not-a-number",
    ] {
        acme.post(
            "/acme/new-order",
            Signer::Kid(&key, kid),
            Some(order.clone()),
        )
        .await
        .problem(400, "accountDoesNotExist");
    }
    // The account's kid with a stranger's key: the signature does not verify.
    acme.post(
        "/acme/new-order",
        Signer::Kid(&stranger, &kid),
        Some(order.clone()),
    )
    .await
    .problem(400, "malformed");
    assert_eq!(acme.counts().await, (1, 0), "no order was placed");

    // The fresh nonce of a refusal works.
    let refused = acme
        .post_body(
            "/acme/new-account",
            &flattened(
                &key,
                &protected(Signer::Jwk(&key), &made_up_nonce(NODE_ID), &new_account),
                &payload,
            ),
        )
        .await;
    refused.problem(400, "badNonce");
    let header = protected(Signer::Kid(&key, &kid), &refused.nonce(), &kid);
    acme.post_body(acme.path(&kid), &flattened(&key, &header, ""))
        .await
        .ok(200);

    // One nonce raced by two requests: exactly one is accepted.
    let (_, orders) = acme.counts().await;
    let nonce = acme.nonce().await;
    let header = protected(
        Signer::Kid(&key, &kid),
        &nonce,
        &acme.url("/acme/new-order"),
    );
    let body = flattened(&key, &header, &payload_b64(Some(&order)));
    let (first, second) = tokio::join!(
        acme.post_body("/acme/new-order", &body),
        acme.post_body("/acme/new-order", &body)
    );
    let (won, lost) = if first.status == 201 {
        (first, second)
    } else {
        (second, first)
    };
    won.ok(201);
    lost.problem(400, "badNonce");
    assert_eq!(acme.counts().await.1, orders + 1);

    // One key raced to new-account twice: one account, created once.
    let racer = Key::generate();
    let (accounts, _) = acme.counts().await;
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let nonce = acme.nonce().await;
        let header = protected(Signer::Jwk(&racer), &nonce, &new_account);
        bodies.push(flattened(&racer, &header, &payload));
    }
    let (first, second) = tokio::join!(
        acme.post_body("/acme/new-account", &bodies[0]),
        acme.post_body("/acme/new-account", &bodies[1])
    );
    let mut statuses = [first.status, second.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 201], "{first:?} {second:?}");
    assert_eq!(first.location(), second.location());
    assert_eq!(acme.counts().await.0, accounts + 1);

    // RFC 8555 §6.2: kid "MUST contain the account URL"; another spelling of its number (a
    // leading zero or plus sign) names no account.
    let number = kid.rsplit_once('/').expect("an account URL").1;
    for lenient in [format!("0{number}"), format!("+{number}")] {
        let alias = kid.replace(&format!("/{number}"), &format!("/{lenient}"));
        assert_ne!(alias, kid);
        acme.post(&kid, Signer::Kid(&key, &alias), None)
            .await
            .problem(400, "accountDoesNotExist");
    }

    // Every answer links the directory (RFC 8555 §7.1), refusals included.
    let refused = acme.post(&kid, Signer::Kid(&stranger, &kid), None).await;
    refused.problem(400, "malformed");
    assert_eq!(
        refused.header("link"),
        Some(format!("<{}>;rel=\"index\"", acme.url("/acme/directory")).as_str())
    );

    // A method a resource does not answer is a problem document (RFC 8555 §6.7) with a nonce.
    for (method, path) in [("GET", "/acme/new-account"), ("POST", "/acme/new-nonce")] {
        let reply = acme.send(method, path, &[], Vec::new()).await;
        reply.problem(405, "malformed");
        assert!(reply.header("replay-nonce").is_some(), "{method} {path}");
    }

    edge.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Accounts.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_are_found_by_key_contacts_are_mailto_and_a_deactivated_account_is_done() {
    let edge = Edge::start().await;
    let acme = &edge.acme;
    let key = Key::generate();

    // onlyReturnExisting with an unknown key, and a contact that is not mailto: refused.
    acme.post(
        "/acme/new-account",
        Signer::Jwk(&key),
        Some(json!({ "onlyReturnExisting": true })),
    )
    .await
    .problem(400, "accountDoesNotExist");
    for contact in [
        "tel:+15555550100",
        "https://example.test/me",
        "MAILTO-ish:a@b",
    ] {
        acme.post(
            "/acme/new-account",
            Signer::Jwk(&key),
            Some(json!({ "contact": [contact] })),
        )
        .await
        .problem(400, "unsupportedContact");
    }
    // A POST-as-GET to new-account, a payload that is not an object.
    acme.post("/acme/new-account", Signer::Jwk(&key), None)
        .await
        .problem(400, "malformed");
    acme.post("/acme/new-account", Signer::Jwk(&key), Some(json!([1])))
        .await
        .problem(400, "malformed");
    assert_eq!(acme.counts().await, (0, 0));

    // Created: 201 and the account URL; the same key again: 200 and the same URL.
    let created = acme
        .post(
            "/acme/new-account",
            Signer::Jwk(&key),
            Some(json!({ "contact": ["mailto:ops@example.test"], "termsOfServiceAgreed": true })),
        )
        .await;
    let account = created.ok(201);
    let kid = created.location();
    assert!(kid.starts_with(&acme.url("/acme/account/")), "{kid}");
    assert_eq!(account["status"], "valid");
    assert_eq!(account["contact"], json!(["mailto:ops@example.test"]));
    assert_eq!(account["orders"], json!(format!("{kid}/orders")));
    let again = acme
        .post("/acme/new-account", Signer::Jwk(&key), Some(json!({})))
        .await;
    again.ok(200);
    assert_eq!(again.location(), kid);
    let found = acme
        .post(
            "/acme/new-account",
            Signer::Jwk(&key),
            Some(json!({ "onlyReturnExisting": true })),
        )
        .await;
    found.ok(200);
    assert_eq!(found.location(), kid);
    assert_eq!(acme.counts().await, (1, 0));

    // The account read back, and updated.
    let read = acme.post(&kid, Signer::Kid(&key, &kid), None).await.ok(200);
    assert_eq!(read["contact"], json!(["mailto:ops@example.test"]));
    let updated = acme
        .post(
            &kid,
            Signer::Kid(&key, &kid),
            Some(json!({ "contact": ["mailto:new@example.test"] })),
        )
        .await
        .ok(200);
    assert_eq!(updated["contact"], json!(["mailto:new@example.test"]));
    acme.post(
        &kid,
        Signer::Kid(&key, &kid),
        Some(json!({ "status": "valid" })),
    )
    .await
    .problem(400, "malformed");
    // An update checks contacts as new-account does, and a refused one changes nothing.
    acme.post(
        &kid,
        Signer::Kid(&key, &kid),
        Some(json!({ "contact": ["tel:+15555550100"] })),
    )
    .await
    .problem(400, "unsupportedContact");
    let unchanged = acme.post(&kid, Signer::Kid(&key, &kid), None).await.ok(200);
    assert_ne!(unchanged["contact"], json!(["tel:+15555550100"]));
    // RFC 8555 §7.3: a mailto with header fields or several addresses is invalidContact.
    acme.post(
        "/acme/new-account",
        Signer::Jwk(&Key::generate()),
        Some(json!({ "contact": ["mailto:a@example.test,b@example.test?subject=hi"] })),
    )
    .await
    .problem(400, "invalidContact");
    assert_eq!(acme.counts().await, (1, 0));

    // Another account's URL, signed by this one: unauthorized, for reads and writes.
    let other = Key::generate();
    let other_kid = acme.account(&other).await;
    acme.post(&other_kid, Signer::Kid(&key, &kid), None)
        .await
        .problem(403, "unauthorized");
    acme.post(
        &other_kid,
        Signer::Kid(&key, &kid),
        Some(json!({ "status": "deactivated" })),
    )
    .await
    .problem(403, "unauthorized");
    acme.post(
        &format!("{other_kid}/orders"),
        Signer::Kid(&key, &kid),
        None,
    )
    .await
    .problem(403, "unauthorized");
    let intact = acme
        .post(&other_kid, Signer::Kid(&other, &other_kid), None)
        .await
        .ok(200);
    assert_eq!(intact["status"], "valid");

    // Deactivated: then every request with its kid is refused.
    let deactivated = acme
        .post(
            &kid,
            Signer::Kid(&key, &kid),
            Some(json!({ "status": "deactivated" })),
        )
        .await
        .ok(200);
    assert_eq!(deactivated["status"], "deactivated");
    let order = json!({ "identifiers": [{ "type": "dns", "value": "www.example.test" }] });
    // RFC 8555 §7.3.6: "If a server receives a POST or POST-as-GET from a deactivated
    // account, it MUST return an error response with status code 401 (Unauthorized)".
    for (path, payload) in [
        (kid.clone(), None),
        (kid.clone(), Some(json!({ "status": "deactivated" }))),
        (kid.clone(), Some(json!({ "contact": [] }))),
        (format!("{kid}/orders"), None),
        ("/acme/new-order".to_owned(), Some(order.clone())),
    ] {
        acme.post(&path, Signer::Kid(&key, &kid), payload)
            .await
            .problem(401, "unauthorized");
    }
    let new_key = Key::generate();
    acme.key_change(&kid, &key, &new_key)
        .await
        .problem(401, "unauthorized");
    // "the server MUST NOT accept further requests authorized by that account's key": not
    // even new-account finding it.
    acme.post("/acme/new-account", Signer::Jwk(&key), Some(json!({})))
        .await
        .problem(401, "unauthorized");
    assert_eq!(acme.counts().await, (2, 0), "no order was placed");

    edge.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Orders, authorizations, challenges, finalization, certificates.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_refuse_what_http01_cannot_validate_and_belong_to_their_account() {
    let edge = Edge::start().await;
    let acme = &edge.acme;
    let key = Key::generate();
    let kid = acme.account(&key).await;
    let alice = Signer::Kid(&key, &kid);
    let dns = |name: &str| json!({ "type": "dns", "value": name });

    for (identifiers, status, kind) in [
        (vec![dns("*.example.test")], 400, "rejectedIdentifier"),
        (vec![dns("192.0.2.1")], 400, "rejectedIdentifier"),
        (
            vec![dns("www.example.test"), dns("localhost")],
            400,
            "rejectedIdentifier",
        ),
        (vec![dns("www.example.test.")], 400, "rejectedIdentifier"),
        (
            vec![dns("bad_name.example.test")],
            400,
            "rejectedIdentifier",
        ),
        (
            vec![json!({ "type": "ip", "value": "192.0.2.1" })],
            400,
            "unsupportedIdentifier",
        ),
        (
            vec![json!({ "type": "DNS", "value": "www.example.test" })],
            400,
            "unsupportedIdentifier",
        ),
        (vec![], 400, "malformed"),
        (
            (0..101)
                .map(|n| dns(&format!("n{n}.example.test")))
                .collect(),
            400,
            "malformed",
        ),
    ] {
        acme.post(
            "/acme/new-order",
            alice,
            Some(json!({ "identifiers": identifiers })),
        )
        .await
        .problem(status, kind);
    }
    for payload in [
        json!({
            "identifiers": [dns("www.example.test")],
            "notBefore": "2030-01-01T00:00:00Z",
        }),
        json!({
            "identifiers": [dns("www.example.test")],
            "notAfter": "2030-01-01T00:00:00Z",
        }),
        json!({ "identifiers": "www.example.test" }),
        json!({ "identifiers": [{ "value": "www.example.test" }] }),
        json!({}),
    ] {
        acme.post("/acme/new-order", alice, Some(payload))
            .await
            .problem(400, "malformed");
    }
    acme.post("/acme/new-order", alice, None)
        .await
        .problem(400, "malformed");
    assert_eq!(acme.counts().await, (1, 0), "no order was placed");

    // A good order: names lowercased, deduplicated and sorted, one authorization each.
    let reply = acme
        .post(
            "/acme/new-order",
            alice,
            Some(json!({ "identifiers": [
                dns("WWW.example.test"), dns("api.example.test"), dns("www.example.test"),
            ] })),
        )
        .await;
    let order = reply.ok(201);
    let order_url = reply.location();
    assert!(
        order_url.starts_with(&acme.url("/acme/order/")),
        "{order_url}"
    );
    assert_eq!(order["status"], "pending", "{order}");
    assert_eq!(
        order["identifiers"],
        json!([dns("api.example.test"), dns("www.example.test")])
    );
    let authorizations: Vec<String> = order["authorizations"]
        .as_array()
        .expect("authorizations")
        .iter()
        .map(|url| url.as_str().expect("a URL").to_owned())
        .collect();
    assert_eq!(authorizations.len(), 2, "{order}");
    assert_eq!(order["finalize"], json!(format!("{order_url}/finalize")));
    assert!(order["expires"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(order.get("certificate").is_none());
    assert_eq!(acme.counts().await, (1, 1));

    let read = acme.post(&order_url, alice, None).await.ok(200);
    assert_eq!(read["status"], "pending");
    let authz = acme.post(&authorizations[1], alice, None).await.ok(200);
    assert_eq!(authz["identifier"], dns("www.example.test"), "{authz}");
    assert_eq!(authz["status"], "pending");
    let challenge = &authz["challenges"][0];
    assert_eq!(challenge["type"], "http-01", "{authz}");
    assert_eq!(challenge["status"], "pending");
    let token = challenge["token"].as_str().expect("a token");
    assert!(
        b64::decode(token).is_ok_and(|bytes| bytes.len() >= 16),
        "RFC 8555 §8.3: 128 bits of entropy, base64url: {token}"
    );
    let challenge_url = challenge["url"].as_str().expect("a URL").to_owned();
    let read = acme.post(&challenge_url, alice, None).await;
    assert_eq!(read.ok(200)["status"], "pending");
    assert!(
        read.headers
            .get_all("link")
            .iter()
            .any(|link| link.to_str().is_ok_and(|l| l.contains("rel=\"up\""))),
        "{:?}",
        read.headers
    );
    // An authorization can only be deactivated; positions past the order's are not found.
    acme.post(
        &authorizations[0],
        alice,
        Some(json!({ "status": "valid" })),
    )
    .await
    .problem(400, "malformed");
    let beyond = format!(
        "{}/2",
        authorizations[0].rsplit_once('/').expect("a position").0
    );
    acme.post(&beyond, alice, None)
        .await
        .problem(404, "malformed");
    acme.post(&beyond.replace("authz", "challenge"), alice, None)
        .await
        .problem(404, "malformed");

    // A pending order cannot be finalized, nor has a certificate.
    let finalize = format!("{order_url}/finalize");
    let good_csr = b64::encode(&csr(
        &Key::generate(),
        &["api.example.test", "www.example.test"],
    ));
    acme.post(&finalize, alice, Some(json!({ "csr": good_csr })))
        .await
        .problem(403, "orderNotReady");
    for bad in ["not base64url!", "AAAA+/==", "AAAA="] {
        acme.post(&finalize, alice, Some(json!({ "csr": bad })))
            .await
            .problem(400, "badCSR");
    }
    // A CSR that is base64url but no CSR: the order's state is checked before the CSR's bytes,
    // so a pending order answers orderNotReady (a ready one answers badCSR; see the last test).
    acme.post(
        &finalize,
        alice,
        Some(json!({ "csr": b64::encode(b"garbage") })),
    )
    .await
    .problem(403, "orderNotReady");
    acme.post(&finalize, alice, Some(json!({ "certificate": good_csr })))
        .await
        .problem(400, "malformed");
    acme.post(&finalize, alice, None)
        .await
        .problem(400, "malformed");
    let certificate_url = order_url.replace("/order/", "/certificate/");
    acme.post(&certificate_url, alice, None)
        .await
        .problem(404, "malformed");
    let read = acme.post(&order_url, alice, None).await.ok(200);
    assert_eq!(read["status"], "pending", "the refusals changed nothing");

    // Another account sees none of it: every URL of the order is not found, and its own list
    // is empty. Its own order is not in the first account's list.
    let mallory_key = Key::generate();
    let mallory_kid = acme.account(&mallory_key).await;
    let mallory = Signer::Kid(&mallory_key, &mallory_kid);
    for url in [
        order_url.clone(),
        authorizations[0].clone(),
        challenge_url.clone(),
        certificate_url.clone(),
    ] {
        acme.post(&url, mallory, None)
            .await
            .problem(404, "malformed");
    }
    acme.post(&challenge_url, mallory, Some(json!({})))
        .await
        .problem(404, "malformed");
    acme.post(
        &authorizations[0],
        mallory,
        Some(json!({ "status": "deactivated" })),
    )
    .await
    .problem(404, "malformed");
    acme.post(&finalize, mallory, Some(json!({ "csr": good_csr })))
        .await
        .problem(404, "malformed");
    let read = acme.post(&authorizations[0], alice, None).await.ok(200);
    assert_eq!(read["status"], "pending", "mallory changed nothing: {read}");
    let (mallory_order, _) = acme
        .order(&mallory_key, &mallory_kid, &["mallory.example.test"])
        .await;
    let listed = acme
        .post(&format!("{mallory_kid}/orders"), mallory, None)
        .await
        .ok(200);
    assert_eq!(listed["orders"], json!([mallory_order]));
    let listed = acme
        .post(&format!("{kid}/orders"), alice, None)
        .await
        .ok(200);
    assert_eq!(listed["orders"], json!([order_url]), "{listed}");
    let (second_order, _) = acme.order(&key, &kid, &["second.example.test"]).await;
    let listed = acme
        .post(&format!("{kid}/orders"), alice, None)
        .await
        .ok(200);
    assert_eq!(listed["orders"], json!([order_url, second_order]));

    // The orders list's own `Link: rel="next"` URL (`…/orders?after=N`, RFC 8555 §7.1.2.1) is
    // signed as it is requested, query included (RFC 8555 §6.4); the URL without its query
    // is another URL.
    let paged = format!("{kid}/orders?after=0");
    let nonce = acme.nonce().await;
    let header = protected(alice, &nonce, &paged);
    acme.post_body(acme.path(&paged), &flattened(&key, &header, ""))
        .await
        .ok(200);
    let nonce = acme.nonce().await;
    let header = protected(alice, &nonce, &format!("{kid}/orders"));
    acme.post_body(acme.path(&paged), &flattened(&key, &header, ""))
        .await
        .problem(403, "unauthorized");

    // Deactivating an authorization makes the order invalid; its challenge can no longer be
    // answered.
    let (order_url, order) = acme.order(&key, &kid, &["third.example.test"]).await;
    let authz_url = order["authorizations"][0]
        .as_str()
        .expect("a URL")
        .to_owned();
    let deactivated = acme
        .post(&authz_url, alice, Some(json!({ "status": "deactivated" })))
        .await
        .ok(200);
    assert_eq!(deactivated["status"], "deactivated", "{deactivated}");
    let challenge_url = deactivated["challenges"][0]["url"]
        .as_str()
        .expect("a URL")
        .to_owned();
    acme.post(&challenge_url, alice, Some(json!({})))
        .await
        .problem(400, "malformed");
    acme.post(&authz_url, alice, Some(json!({ "status": "deactivated" })))
        .await
        .problem(400, "malformed");
    let read = acme.post(&order_url, alice, None).await.ok(200);
    assert_eq!(read["status"], "invalid", "{read}");

    // RFC 8555 §7.5.1: the client responds with the payload `{}`; a payload that is not a JSON
    // object is malformed and changes nothing.
    let (_, order) = acme.order(&key, &kid, &["fourth.example.test"]).await;
    let authz = acme
        .post(
            order["authorizations"][0].as_str().expect("a URL"),
            alice,
            None,
        )
        .await
        .ok(200);
    let challenge_url = authz["challenges"][0]["url"].as_str().expect("a URL");
    let nonce = acme.nonce().await;
    let header = protected(alice, &nonce, challenge_url);
    acme.post_body(
        challenge_url,
        &flattened(&key, &header, &b64::encode(b"not JSON at all")),
    )
    .await
    .problem(400, "malformed");
    let unchanged = acme.post(challenge_url, alice, None).await.ok(200);
    assert_eq!(unchanged["status"], "pending", "{unchanged}");

    // An id that is not a number in a resource URL names no resource: a problem document
    // (RFC 8555 §6.7) with a nonce.
    for path in [
        "/acme/order/not-a-number",
        "/acme/authz/1/4294967296",
        "/acme/account/-1",
    ] {
        let nonce = acme.nonce().await;
        let header = protected(alice, &nonce, &acme.url(path));
        let reply = acme.post_body(path, &flattened(&key, &header, "")).await;
        reply.problem(404, "malformed");
        assert!(reply.header("replay-nonce").is_some(), "{path}");
    }

    edge.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Key rollover.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rollover_moves_the_account_and_refuses_another_accounts_key() {
    let edge = Edge::start().await;
    let acme = &edge.acme;
    let old = Key::generate();
    let kid = acme.account(&old).await;
    let new = Key::generate();

    // Each check of RFC 8555 §7.3.5 that a client can fail, with the account left as it is.
    let url = acme.url("/acme/key-change");
    let inner_payload = json!({ "account": kid, "oldKey": old.jwk() });
    let inner = |signer: &Key, header: Value, payload: &Value| {
        flattened(signer, &header, &payload_b64(Some(payload)))
    };
    let good_header = json!({ "alg": "ES256", "jwk": new.jwk(), "url": url });
    let with_nonce =
        json!({ "alg": "ES256", "jwk": new.jwk(), "url": url, "nonce": made_up_nonce(NODE_ID) });
    let other_url = json!({ "alg": "ES256", "jwk": new.jwk(), "url": acme.url("/acme/new-order") });
    let kid_header = json!({ "alg": "ES256", "kid": kid, "url": url });
    for (what, body) in [
        ("an inner nonce", inner(&new, with_nonce, &inner_payload)),
        ("another url", inner(&new, other_url, &inner_payload)),
        ("a kid inside", inner(&new, kid_header, &inner_payload)),
        (
            "signed by the old key",
            inner(&old, good_header.clone(), &inner_payload),
        ),
        (
            "another account",
            inner(
                &new,
                good_header.clone(),
                &json!({ "account": acme.url("/acme/account/999999"), "oldKey": old.jwk() }),
            ),
        ),
        (
            "another old key",
            inner(
                &new,
                good_header.clone(),
                &json!({ "account": kid, "oldKey": new.jwk() }),
            ),
        ),
        (
            "the same key",
            inner(
                &old,
                json!({ "alg": "ES256", "jwk": old.jwk(), "url": url }),
                &inner_payload,
            ),
        ),
        ("not a JWS", json!({ "account": kid })),
    ] {
        let problem = acme
            .post("/acme/key-change", Signer::Kid(&old, &kid), Some(body))
            .await
            .problem(400, "malformed");
        assert!(problem["detail"].as_str().is_some(), "{what}: {problem}");
    }
    // Signed outside by the new key: the outer signature does not verify.
    let body = inner(&new, good_header.clone(), &inner_payload);
    acme.post("/acme/key-change", Signer::Kid(&new, &kid), Some(body))
        .await
        .problem(400, "malformed");
    acme.post(&kid, Signer::Kid(&old, &kid), None).await.ok(200);

    // The rollover: the old key is done, the new one signs, and finds the account.
    let rolled = acme.key_change(&kid, &old, &new).await.ok(200);
    assert_eq!(rolled["status"], "valid", "{rolled}");
    acme.post(&kid, Signer::Kid(&old, &kid), None)
        .await
        .problem(400, "malformed");
    acme.post(&kid, Signer::Kid(&new, &kid), None).await.ok(200);
    let found = acme
        .post(
            "/acme/new-account",
            Signer::Jwk(&new),
            Some(json!({ "onlyReturnExisting": true })),
        )
        .await;
    found.ok(200);
    assert_eq!(found.location(), kid);
    acme.post(
        "/acme/new-account",
        Signer::Jwk(&old),
        Some(json!({ "onlyReturnExisting": true })),
    )
    .await
    .problem(400, "accountDoesNotExist");
    // The same rollover again, now signed by the key it moved to: the new key is current.
    acme.key_change(&kid, &new, &new)
        .await
        .problem(400, "malformed");

    // To another account's key: 409 with that account's URL, and neither account changed.
    let theirs = Key::generate();
    let their_kid = acme.account(&theirs).await;
    let (accounts, _) = acme.counts().await;
    let conflict = acme.key_change(&kid, &new, &theirs).await;
    conflict.problem(409, "malformed");
    assert_eq!(conflict.location(), their_kid);
    acme.post(&kid, Signer::Kid(&new, &kid), None).await.ok(200);
    acme.post(&their_kid, Signer::Kid(&theirs, &their_kid), None)
        .await
        .ok(200);
    acme.post(&kid, Signer::Kid(&theirs, &kid), None)
        .await
        .problem(400, "malformed");
    assert_eq!(acme.counts().await.0, accounts);

    // The old key is free: it opens a new account.
    let fresh = acme.account(&old).await;
    assert_ne!(fresh, kid);

    edge.stop().await;
}

// ---------------------------------------------------------------------------------------------
// Revocation without a certificate of ours.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_refuses_garbage_and_certificates_the_account_did_not_order() {
    let edge = Edge::start().await;
    let acme = &edge.acme;
    let key = Key::generate();
    let kid = acme.account(&key).await;
    let alice = Signer::Kid(&key, &kid);

    acme.revoke(alice, b"garbage, not DER", None)
        .await
        .problem(400, "malformed");
    acme.revoke(alice, &[], None)
        .await
        .problem(400, "malformed");
    for payload in [
        json!({ "certificate": "not base64url!" }),
        json!({ "certificate": b64::encode(b"x"), "reason": "keyCompromise" }),
        json!({ "reason": 1 }),
    ] {
        acme.post("/acme/revoke-cert", alice, Some(payload))
            .await
            .problem(400, "malformed");
    }
    acme.revoke(Signer::Jwk(&key), b"garbage", None)
        .await
        .problem(400, "malformed");

    // A certificate this cluster did not issue is not found, whoever signs: an account by its
    // kid, a key that is not the certificate's, or even the certificate's own key (its serial
    // may be a copy of one that was issued: the last test shows that case). A certificate it
    // issued to another account is unauthorized (the last test too).
    let holder = Key::generate();
    let foreign = self_signed(&holder, "foreign.example.test", &[0x11, 0x22, 0x33]);
    for signer in [alice, Signer::Jwk(&key), Signer::Jwk(&holder)] {
        acme.revoke(signer, &foreign, Some(1))
            .await
            .problem(404, "malformed");
    }
    // An RFC 5280 reason that does not exist (7 is unused) is badRevocationReason.
    let other = self_signed(&holder, "foreign.example.test", &[0x44]);
    acme.revoke(Signer::Jwk(&holder), &other, Some(7))
        .await
        .problem(400, "badRevocationReason");

    // The signer is checked before the payload is read: a kid naming no account is
    // accountDoesNotExist whatever the payload holds.
    let nobody = acme.url("/acme/account/999999");
    acme.revoke(Signer::Kid(&key, &nobody), b"garbage", None)
        .await
        .problem(400, "accountDoesNotExist");

    edge.stop().await;
}

// ---------------------------------------------------------------------------------------------
// A whole order, with the session daemons and a cluster CA.

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

/// Key authorizations by token, served where the validator fetches HTTP-01 challenges.
type Answers = Arc<Mutex<BTreeMap<String, String>>>;

/// An HTTP server answering `/.well-known/acme-challenge/{token}` from `answers`.
async fn challenge_server(answers: Answers) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    async fn serve(
        State(answers): State<Answers>,
        axum::extract::Path(token): axum::extract::Path<String>,
    ) -> (http::StatusCode, String) {
        match answers.lock().expect("answers").get(&token) {
            Some(answer) => (http::StatusCode::OK, answer.clone()),
            None => (http::StatusCode::NOT_FOUND, String::new()),
        }
    }
    let app = axum::Router::new()
        .route(
            "/.well-known/acme-challenge/{token}",
            axum::routing::get(serve),
        )
        .with_state(answers);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    (addr, server)
}

/// The first certificate of a PEM chain, DER.
fn first_certificate(chain: &str) -> Vec<u8> {
    let body: String = chain
        .split("-----BEGIN CERTIFICATE-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END CERTIFICATE-----").next())
        .expect("a PEM certificate")
        .lines()
        .map(str::trim)
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM base64")
}

fn serial_of(der: &[u8]) -> Vec<u8> {
    x509_cert::Certificate::from_der(der)
        .expect("a certificate")
        .tbs_certificate
        .serial_number
        .as_bytes()
        .to_vec()
}

/// The serials the CRL at `/acme/crl` lists, its signature checked against the CA's key.
async fn crl_serials(acme: &Acme, ca: &CaIdentity) -> Vec<Vec<u8>> {
    let reply = acme.get("/acme/crl").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/pkix-crl"));
    let crl = x509_cert::crl::CertificateList::from_der(&reply.body).expect("a DER CRL");
    let issuer = x509_cert::Certificate::from_der(ca.certificate_der()).expect("the CA");
    assert_eq!(
        crl.tbs_cert_list.issuer, issuer.tbs_certificate.subject,
        "the cluster CA signs the CRL"
    );
    crl.tbs_cert_list
        .revoked_certificates
        .unwrap_or_default()
        .iter()
        .map(|entry| entry.serial_number.as_bytes().to_vec())
        .collect()
}

/// Answers every challenge of the order at `order_url` (putting the key authorizations where
/// the validator looks), then waits until the order is ready.
async fn validate(acme: &Acme, key: &Key, kid: &str, order: &Value, answers: &Answers) {
    let signer = Signer::Kid(key, kid);
    for authz_url in order["authorizations"].as_array().expect("authorizations") {
        let authz = acme
            .post(authz_url.as_str().expect("a URL"), signer, None)
            .await
            .ok(200);
        let challenge = &authz["challenges"][0];
        let token = challenge["token"].as_str().expect("a token");
        answers
            .lock()
            .expect("answers")
            .insert(token.to_owned(), format!("{token}.{}", key.thumbprint()));
        let responded = acme
            .post(
                challenge["url"].as_str().expect("a URL"),
                signer,
                Some(json!({})),
            )
            .await
            .ok(200);
        assert!(
            matches!(responded["status"].as_str(), Some("processing" | "valid")),
            "{responded}"
        );
    }
}

/// Runs an order for `names` to its certificate; the order URL and the leaf (DER).
async fn issue(
    acme: &Acme,
    key: &Key,
    kid: &str,
    names: &[&str],
    answers: &Answers,
) -> (String, Vec<u8>) {
    let (order_url, order) = acme.order(key, kid, names).await;
    validate(acme, key, kid, &order, answers).await;
    acme.order_until(key, kid, &order_url, &["ready"]).await;
    let certificate_key = Key::generate();
    let finalized = acme
        .post(
            &format!("{order_url}/finalize"),
            Signer::Kid(key, kid),
            Some(json!({ "csr": b64::encode(&csr(&certificate_key, names)) })),
        )
        .await
        .ok(200);
    assert!(
        matches!(finalized["status"].as_str(), Some("processing" | "valid")),
        "{finalized}"
    );
    let order = acme.order_until(key, kid, &order_url, &["valid"]).await;
    let certificate_url = order["certificate"].as_str().expect("a certificate URL");
    let reply = acme
        .post(certificate_url, Signer::Kid(key, kid), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/pem-certificate-chain")
    );
    reply.nonce();
    let leaf = first_certificate(&reply.text());
    let info = certus_ca::certificate::leaf_info(&leaf).expect("the leaf reads");
    let mut certified = info.dns_names.clone();
    certified.sort();
    let mut wanted: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
    wanted.sort();
    assert_eq!(certified, wanted);
    (order_url, leaf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_is_issued_revoked_by_its_account_and_listed_on_the_crl() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = CaIdentity::generate("Certus ACME Test CA", now_ms() - 60_000).expect("a test CA");
    let (key_file, cert_file) = (dir.path().join("ca-key.pem"), dir.path().join("ca.pem"));
    std::fs::write(&key_file, ca.key_pem()).expect("write the CA key");
    std::fs::write(&cert_file, ca.certificate_pem()).expect("write the CA certificate");
    let answers = Answers::default();
    let (http01, http01_server) = challenge_server(Arc::clone(&answers)).await;
    let names = [
        "api.example.test",
        "www.example.test",
        "victim.example.test",
    ];
    let mut config = NodeConfig::new(NODE_ID, free_addr(), free_addr(), dir.path().join("node-1"));
    config.sessions = SessionsSetup {
        daemons: true,
        ca_key_file: Some(key_file),
        ca_cert_file: Some(cert_file),
        http01_resolve: names
            .iter()
            .map(|&name| (name.to_owned(), http01))
            .collect(),
        http01_timeout_ms: 5_000,
        ..SessionsSetup::default()
    };
    let node = start_single(config.clone()).await;
    let acme = Acme::new(config.http_addr);
    assert!(crl_serials(&acme, &ca).await.is_empty());

    let key = Key::generate();
    let kid = acme.account(&key).await;
    let alice = Signer::Kid(&key, &kid);

    // Ready, then refused CSRs: not a CSR, other names, and the order stays ready.
    let (order_url, order) = acme
        .order(&key, &kid, &["api.example.test", "www.example.test"])
        .await;
    validate(&acme, &key, &kid, &order, &answers).await;
    acme.order_until(&key, &kid, &order_url, &["ready"]).await;
    let finalize = format!("{order_url}/finalize");
    let certificate_key = Key::generate();
    for csr_der in [
        b"garbage, not a CSR".to_vec(),
        csr(&certificate_key, &["www.example.test"]),
        csr(
            &certificate_key,
            &["api.example.test", "www.example.test", "evil.example.test"],
        ),
    ] {
        acme.post(
            &finalize,
            alice,
            Some(json!({ "csr": b64::encode(&csr_der) })),
        )
        .await
        .problem(400, "badCSR");
    }
    assert_eq!(
        acme.post(&order_url, alice, None).await.ok(200)["status"],
        "ready"
    );
    let finalized = acme
        .post(
            &finalize,
            alice,
            Some(json!({ "csr": b64::encode(&csr(&certificate_key, &["www.example.test", "api.example.test"])) })),
        )
        .await
        .ok(200);
    assert!(
        matches!(finalized["status"].as_str(), Some("processing" | "valid")),
        "{finalized}"
    );
    let order = acme.order_until(&key, &kid, &order_url, &["valid"]).await;
    // Finalizing again: the order is not ready any more.
    acme.post(
        &finalize,
        alice,
        Some(json!({ "csr": b64::encode(&csr(&certificate_key, &["www.example.test", "api.example.test"])) })),
    )
    .await
    .problem(403, "orderNotReady");
    let reply = acme
        .post(order["certificate"].as_str().expect("a URL"), alice, None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let leaf = first_certificate(&reply.text());
    let serial = serial_of(&leaf);

    // Another account may not revoke it; unknown reasons are refused; nothing is listed.
    let mallory_key = Key::generate();
    let mallory_kid = acme.account(&mallory_key).await;
    acme.revoke(Signer::Kid(&mallory_key, &mallory_kid), &leaf, None)
        .await
        .problem(403, "unauthorized");
    acme.revoke(alice, &leaf, Some(7))
        .await
        .problem(400, "badRevocationReason");
    // A reason outside RFC 5280's codes, however large, is badRevocationReason (RFC 8555 §7.6).
    acme.revoke(alice, &leaf, Some(256))
        .await
        .problem(400, "badRevocationReason");
    assert!(crl_serials(&acme, &ca).await.is_empty());

    // Revoked by the account, then again with the certificate's own key: alreadyRevoked.
    let revoked = acme.revoke(alice, &leaf, Some(4)).await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());
    revoked.nonce();
    acme.revoke(Signer::Jwk(&certificate_key), &leaf, None)
        .await
        .problem(400, "alreadyRevoked");
    acme.revoke(alice, &leaf, None)
        .await
        .problem(400, "alreadyRevoked");
    assert_eq!(crl_serials(&acme, &ca).await, vec![serial.clone()]);

    // A stranger with no account makes a self-signed certificate with the serial of another
    // account's certificate (serials are public in CT logs) and signs the revocation with its
    // own key: refused, since this cluster did not issue that certificate; the real one is
    // not on the CRL, and its account can still revoke it.
    let (_, victim) = issue(&acme, &key, &kid, &["victim.example.test"], &answers).await;
    let victim_serial = serial_of(&victim);
    let stranger = Key::generate();
    let forged = self_signed(&stranger, "victim.example.test", &victim_serial);
    assert_eq!(serial_of(&forged), victim_serial);
    acme.revoke(Signer::Jwk(&stranger), &forged, Some(1))
        .await
        .problem(404, "malformed");
    let listed = crl_serials(&acme, &ca).await;
    assert!(!listed.contains(&victim_serial), "{listed:?}");
    let revoked = acme.revoke(alice, &victim, None).await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());

    http01_server.abort();
    node.shutdown().await;
}
