//! A Certus log mirroring another RFC 6962 log, end to end: two three-node clusters in one
//! process, each with its own key, RFC 6962 HTTP on loopback and a client that is not ours.
//! The mirror serves the source's STHs (signed by the source's key) over entries and proofs from
//! its own tree, refuses submissions, and never serves anything a source that rewrites entries
//! cannot prove.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use certus_ct::merkle::{MerkleTree, leaf_hash, verify_consistency, verify_inclusion};
use certus_ct::signer::LogVerifier;
use certus_ct::structures::json::{
    GetEntriesResponse, GetProofByHashResponse, GetSthConsistencyResponse, LeafEntry,
};
use certus_ct::structures::{DigitallySigned, SignedTreeHead};
use certus_node::NodeConfig;
use certus_proto::v1;
use certus_proto::v1::log_client::LogClient;
use tonic::Code;
use tonic::transport::Channel;

use crate::support::{
    Pki, add, agent, b64, base_url, get, leader_index, shutdown, start, sth_of_at_least,
    sth_of_at_least_within, url_escape,
};

/// How long a mirror may take to serve what its source serves.
const CATCH_UP: Duration = Duration::from_secs(30);

/// Runs blocking client code (ureq, `std::thread::sleep`) off the runtime's workers.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .expect("client thread")
}

async fn log_client(node: &NodeConfig) -> LogClient<Channel> {
    LogClient::connect(format!("http://{}", node.grpc_addr))
        .await
        .expect("gRPC connection")
}

async fn log_status(node: &NodeConfig) -> v1::LogStatus {
    log_client(node)
        .await
        .status(v1::LogStatusRequest {})
        .await
        .expect("Log/Status")
        .into_inner()
}

fn start_mirror_request(source_url: &str, key: &LogVerifier) -> v1::StartMirrorRequest {
    v1::StartMirrorRequest {
        source_url: source_url.to_owned(),
        source_public_key: key.public_key_der().to_vec(),
    }
}

/// `count` distinct leaves under `pki`'s root.
fn leaves(pki: &Pki, prefix: &str, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| pki.leaf(&format!("{prefix}-{i}.example"), false))
        .collect()
}

/// Submits every leaf over HTTP, round-robin over the nodes; each must be logged.
fn submit_all(nodes: &[NodeConfig], leaves: &[Vec<u8>]) {
    let agent = agent();
    for (i, leaf) in leaves.iter().enumerate() {
        let (status, body) = add(&agent, &nodes[i % nodes.len()], "add-chain", &[leaf]);
        assert_eq!(status, 200, "add-chain #{i}: {body}");
    }
}

/// Entries `start..end` of `node`, paging through short answers (RFC 6962 §4.6 allows them).
fn entries(agent: &ureq::Agent, node: &NodeConfig, start: u64, end: u64) -> Vec<LeafEntry> {
    let mut entries = Vec::new();
    let mut next = start;
    while next < end {
        let (status, body) = get(
            agent,
            node,
            &format!("get-entries?start={next}&end={}", end - 1),
        );
        assert_eq!(
            status, 200,
            "get-entries from {next} on node {}: {body}",
            node.id
        );
        let page: GetEntriesResponse = serde_json::from_str(&body).expect("get-entries JSON");
        assert!(
            !page.entries.is_empty() && next + page.entries.len() as u64 <= end,
            "get-entries {next}..{end} answered {} entries",
            page.entries.len()
        );
        next += page.entries.len() as u64;
        entries.extend(page.entries);
    }
    entries
}

/// The serving STH of every node, each covering at least `size` entries and verifying under
/// `key`.
fn sths_of_at_least(
    nodes: &[NodeConfig],
    size: u64,
    key: &LogVerifier,
    timeout: Duration,
) -> Vec<SignedTreeHead> {
    let agent = agent();
    nodes
        .iter()
        .map(|node| sth_of_at_least_within(&agent, node, size, key, timeout))
        .collect()
}

/// A proto STH as the RFC 6962 structure, checked under `key`.
fn verified_proto_sth(sth: &v1::SignedTreeHead, key: &LogVerifier) -> SignedTreeHead {
    let sth = SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        sha256_root_hash: sth
            .sha256_root_hash
            .as_slice()
            .try_into()
            .expect("a root hash"),
        tree_head_signature: DigitallySigned::decode(&sth.tree_head_signature)
            .expect("a signature"),
    };
    key.verify_sth(&sth).expect("the STH verifies");
    sth
}

/// POSTs to a mirror; it must answer 403 with `{"error": "mirror", "message": …}`.
fn assert_refused_as_mirror(
    agent: &ureq::Agent,
    node: &NodeConfig,
    path: &str,
    chain: &[u8],
    source_url: &str,
) {
    let (status, body) = add(agent, node, path, &[chain]);
    assert_eq!(
        status, 403,
        "{path} on the mirror answered {status}: {body}"
    );
    let json: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
    assert_eq!(json["error"], "mirror", "{body}");
    let message = json["message"].as_str().expect("a message");
    assert!(message.contains(source_url), "{body}");
    assert_eq!(
        json.as_object().map(serde_json::Map::len),
        Some(2),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_mirrors_another_certus_cluster() {
    let began = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();

    // The source: an origin log with 30 entries, served by all three nodes.
    let (source, source_nodes, source_key) = start(dir.path(), "source", &pki).await;
    leader_index(&source_nodes).await;
    let first = leaves(&pki, "first", 30);
    let source_sth = blocking({
        let (source, first, key) = (source.clone(), first.clone(), source_key.clone());
        move || {
            submit_all(&source, &first);
            sths_of_at_least(&source, 30, &key, Duration::from_secs(20)).remove(0)
        }
    })
    .await;
    assert_eq!(source_sth.tree_size, 30);

    // The mirror: an empty log with a key of its own.
    let (mirror, mirror_nodes, mirror_key) = start(dir.path(), "mirror", &pki).await;
    let mirror_leader = leader_index(&mirror_nodes).await;
    assert_ne!(mirror_key.public_key_der(), source_key.public_key_der());

    // A log with entries cannot become a mirror, and is left as it was.
    let before = log_status(&source[1]).await;
    let refused = log_client(&source[1])
        .await
        .start_mirror(start_mirror_request(&base_url(&mirror[0]), &mirror_key))
        .await
        .expect_err("a log with entries must not become a mirror");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    let after = log_status(&source[1]).await;
    assert!(after.mirror.is_none(), "{after:?}");
    assert_eq!(after.next_sequence, before.next_sequence);
    assert_eq!(after.next_sequence, 30);
    assert_eq!(
        after.serving.as_ref().map(|s| s.tree_size),
        before.serving.as_ref().map(|s| s.tree_size)
    );

    // Start the mirror from one source node's base URL, through a follower: it forwards the
    // write and answers only once it has applied it, so its reply shows the mirror.
    let source_url = base_url(&source[2]);
    let reply = log_client(&mirror[(mirror_leader + 1) % 3])
        .await
        .start_mirror(start_mirror_request(&source_url, &source_key))
        .await
        .expect("StartMirror on an empty log")
        .into_inner();
    let status = reply.mirror.expect("the reply shows the mirror");
    assert_eq!(status.source_url, source_url);
    assert_eq!(status.source_public_key, source_key.public_key_der());
    let mirroring = Instant::now();

    // Every mirror node comes to serve the source's STH of size 30.
    let first_sths = blocking({
        let (mirror, key) = (mirror.clone(), source_key.clone());
        move || sths_of_at_least(&mirror, 30, &key, CATCH_UP)
    })
    .await;
    let caught_up = mirroring.elapsed();
    let mirror_sth = first_sths[0].clone();
    assert_eq!(mirror_sth.tree_size, 30);
    for sth in &first_sths {
        source_key.verify_sth(sth).expect("signed by the source");
        assert!(
            mirror_key.verify_sth(sth).is_err(),
            "a mirror STH verifies under the mirror's own key"
        );
        assert_eq!(sth.sha256_root_hash, source_sth.sha256_root_hash);
    }
    // The source's own STH, or one it signed later over the same tree.
    let same_sth = mirror_sth.timestamp_ms == source_sth.timestamp_ms;
    if same_sth {
        assert_eq!(mirror_sth, source_sth, "the source's STH, byte for byte");
    } else {
        assert!(mirror_sth.timestamp_ms > source_sth.timestamp_ms);
    }

    blocking({
        let (source, mirror, source_url, mirror_sth) = (
            source.clone(),
            mirror.clone(),
            source_url.clone(),
            mirror_sth.clone(),
        );
        let refused = (
            pki.leaf("refused.example", false),
            pki.leaf("refused-pre.example", true),
        );
        move || {
            let agent = agent();
            // The mirror's entries are the source's, byte for byte, on every mirror node.
            let from_source = entries(&agent, &source[0], 0, 30);
            for node in &mirror {
                assert_eq!(
                    entries(&agent, node, 0, 30),
                    from_source,
                    "node {}",
                    node.id
                );
            }
            let hashes: Vec<_> = from_source
                .iter()
                .map(|e| leaf_hash(&e.leaf_input))
                .collect();
            assert_eq!(
                MerkleTree::from_leaf_hashes(hashes.clone()).root(),
                mirror_sth.sha256_root_hash
            );

            // Inclusion proofs from the mirror's own tree verify against the source's STH.
            for index in [0usize, 13, 29] {
                let node = &mirror[index % 3];
                let query = format!(
                    "get-proof-by-hash?hash={}&tree_size={}",
                    url_escape(&b64(&hashes[index])),
                    mirror_sth.tree_size
                );
                let (status, body) = get(&agent, node, &query);
                assert_eq!(status, 200, "{body}");
                let proof: GetProofByHashResponse = serde_json::from_str(&body).expect("JSON");
                assert_eq!(proof.leaf_index, index as u64);
                verify_inclusion(
                    &hashes[index],
                    proof.leaf_index,
                    mirror_sth.tree_size,
                    &proof.audit_path,
                    &mirror_sth.sha256_root_hash,
                )
                .expect("inclusion verifies");
            }

            // A mirror takes no submissions.
            for node in &mirror {
                assert_refused_as_mirror(&agent, node, "add-chain", &refused.0, &source_url);
                assert_refused_as_mirror(&agent, node, "add-pre-chain", &refused.1, &source_url);
            }
        }
    })
    .await;

    // Every mirror node reports the source; the leader followed it without error.
    for node in &mirror {
        let status = log_status(node).await;
        let mirror_status = status.mirror.expect("a mirror");
        assert_eq!(mirror_status.source_url, source_url, "node {}", node.id);
        assert_eq!(mirror_status.source_public_key, source_key.public_key_der());
        let latest = mirror_status.latest.expect("a recorded source STH");
        assert!(latest.tree_size >= 30);
        verified_proto_sth(&latest, &source_key);
        assert_eq!(
            status.public_key,
            mirror_key.public_key_der(),
            "its own key"
        );
        assert_eq!(status.next_sequence, 30);
    }
    let leader_status = log_status(&mirror[mirror_leader]).await;
    let leader_mirror = leader_status.mirror.expect("a mirror");
    assert_eq!(
        leader_mirror.last_error, "",
        "the mirror's leader reports an error after catching up"
    );
    let seen = leader_mirror
        .source_sth
        .expect("the leader read the source");
    assert_eq!(verified_proto_sth(&seen, &source_key).tree_size, 30);

    // The source grows; the mirror follows, and its two STHs are consistent.
    let second = leaves(&pki, "second", 20);
    let source_sth = blocking({
        let (source, key) = (source.clone(), source_key.clone());
        move || {
            submit_all(&source, &second);
            sths_of_at_least(&source, 50, &key, Duration::from_secs(20)).remove(0)
        }
    })
    .await;
    assert_eq!(source_sth.tree_size, 50);
    let growing = Instant::now();
    blocking({
        let (source, mirror, key) = (source.clone(), mirror.clone(), source_key.clone());
        let old = mirror_sth.clone();
        move || {
            let agent = agent();
            let sths = sths_of_at_least(&mirror, 50, &key, CATCH_UP);
            let new = &sths[0];
            assert_eq!(new.tree_size, 50);
            for sth in &sths {
                assert_eq!(sth.sha256_root_hash, source_sth.sha256_root_hash);
            }
            let (status, body) = get(&agent, &mirror[1], "get-sth-consistency?first=30&second=50");
            assert_eq!(status, 200, "{body}");
            let proof: GetSthConsistencyResponse = serde_json::from_str(&body).expect("JSON");
            verify_consistency(
                old.tree_size,
                new.tree_size,
                &old.sha256_root_hash,
                &new.sha256_root_hash,
                &proof.consistency,
            )
            .expect("consistency between the mirror's STHs verifies");
            assert_eq!(
                entries(&agent, &mirror[2], 30, 50),
                entries(&agent, &source[1], 30, 50)
            );
        }
    })
    .await;
    let followed = growing.elapsed();

    eprintln!(
        "mirror: served 30 entries {caught_up:?} after StartMirror (the STH the source served: \
         {same_sth}), 20 more {followed:?} after the source served them; test took {:?}",
        began.elapsed()
    );
    shutdown(mirror_nodes).await;
    shutdown(source_nodes).await;
}

/// The page size the tampering proxy cuts get-entries to.
const PROXY_PAGE: u64 = 8;

/// An RFC 6962 read proxy in front of a real log that answers short get-entries pages and
/// flips one byte of entry `index`'s `leaf_input`; everything else passes through as is.
#[derive(Clone)]
struct Tamperer {
    upstream: String,
    index: u64,
    tampered: Arc<AtomicUsize>,
}

impl Tamperer {
    fn forward(&self, path_and_query: &str) -> (u16, String) {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        let mut start = None;
        let mut target = path_and_query.to_owned();
        if path == "/ct/v1/get-entries" {
            let param = |name: &str| {
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
                    .and_then(|value| value.parse::<u64>().ok())
            };
            if let (Some(first), Some(last)) = (param("start"), param("end")) {
                let last = last.min(first + PROXY_PAGE - 1);
                target = format!("{path}?start={first}&end={last}");
                start = Some(first);
            }
        }
        let mut response = agent()
            .get(format!("{}{target}", self.upstream))
            .call()
            .expect("the source answers");
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().expect("body");
        match start {
            Some(start) if status == 200 => (status, self.tamper(start, &body)),
            _ => (status, body),
        }
    }

    fn tamper(&self, start: u64, body: &str) -> String {
        let mut json: serde_json::Value = serde_json::from_str(body).expect("get-entries JSON");
        let Some(offset) = self.index.checked_sub(start) else {
            return body.to_owned();
        };
        let Some(entry) = json["entries"]
            .as_array_mut()
            .and_then(|entries| entries.get_mut(usize::try_from(offset).expect("an index")))
        else {
            return body.to_owned();
        };
        let engine = base64::engine::general_purpose::STANDARD;
        let mut leaf = engine
            .decode(entry["leaf_input"].as_str().expect("leaf_input"))
            .expect("base64");
        // A byte inside the certificate: the leaf still parses, only its hash changes.
        let middle = leaf.len() / 2;
        leaf[middle] ^= 0x01;
        entry["leaf_input"] = serde_json::Value::String(engine.encode(&leaf));
        self.tampered.fetch_add(1, Ordering::Relaxed);
        json.to_string()
    }
}

async fn proxied(
    axum::extract::State(tamperer): axum::extract::State<Tamperer>,
    uri: http::Uri,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let (status, body) = blocking(move || tamperer.forward(&path_and_query)).await;
    (
        http::StatusCode::from_u16(status).expect("a status"),
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Entry 20 sits on a page checked with a consistency proof (16..24 of 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mirror_never_serves_a_source_that_rewrites_an_entry_before_its_last_page() {
    mirror_through_a_tamperer(20).await;
}

/// Entry 27 sits on the page that completes the tree (24..30), checked against the STH's root.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mirror_never_serves_a_source_that_rewrites_an_entry_on_its_last_page() {
    mirror_through_a_tamperer(27).await;
}

/// Mirrors a 30-entry source through a proxy that rewrites entry `tampered_index`: the mirror
/// appends the proven pages before it and nothing from its page on, and serves nothing.
async fn mirror_through_a_tamperer(tampered_index: u64) {
    let began = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let (source, source_nodes, source_key) = start(dir.path(), "source", &pki).await;
    leader_index(&source_nodes).await;
    blocking({
        let (source, key) = (source.clone(), source_key.clone());
        let leaves = leaves(&pki, "entry", 30);
        move || {
            submit_all(&source, &leaves);
            let sth = sth_of_at_least(&agent(), &source[0], 30, &key);
            assert_eq!(sth.tree_size, 30);
        }
    })
    .await;

    // The tampering proxy, in front of one source node.
    let tampered = Arc::new(AtomicUsize::new(0));
    let tamperer = Tamperer {
        upstream: base_url(&source[0]),
        index: tampered_index,
        tampered: Arc::clone(&tampered),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("proxy listener");
    let proxy_url = format!("http://{}", listener.local_addr().expect("proxy address"));
    let app = axum::Router::new().fallback(proxied).with_state(tamperer);
    let proxy = tokio::spawn(async move { axum::serve(listener, app).await });

    let (mirror, mirror_nodes, _mirror_key) = start(dir.path(), "mirror", &pki).await;
    let leader = leader_index(&mirror_nodes).await;
    log_client(&mirror[leader])
        .await
        .start_mirror(start_mirror_request(&proxy_url, &source_key))
        .await
        .expect("StartMirror on an empty log");

    // Until the leader says why it is stuck, and for 3 s after: no node serves an STH, and no
    // entry at or after the tampered one is appended.
    let deadline = Instant::now() + CATCH_UP;
    let mut stuck_since: Option<Instant> = None;
    let mut last_error = String::new();
    let mut next_sequence = 0;
    let http = agent();
    while stuck_since.is_none_or(|since| since.elapsed() < Duration::from_secs(3)) {
        let statuses: Vec<(u16, String)> = blocking({
            let (mirror, http) = (mirror.clone(), http.clone());
            move || {
                mirror
                    .iter()
                    .map(|node| get(&http, node, "get-sth"))
                    .collect()
            }
        })
        .await;
        for (node, (status, body)) in mirror.iter().zip(&statuses) {
            assert_eq!(status, &503, "mirror node {} served {body}", node.id);
        }
        for (index, node) in mirror.iter().enumerate() {
            let status = log_status(node).await;
            assert!(
                status.next_sequence <= tampered_index && status.local_tree_size <= tampered_index,
                "node {} appended the tampered entry: {status:?}",
                node.id
            );
            assert!(status.serving.is_none(), "node {}: {status:?}", node.id);
            let mirror_status = status.mirror.expect("a mirror");
            assert!(mirror_status.latest.is_none(), "{mirror_status:?}");
            if index == leader {
                if let Some(sth) = &mirror_status.source_sth {
                    // The source's STH itself verifies: what fails is its entries.
                    assert_eq!(verified_proto_sth(sth, &source_key).tree_size, 30);
                }
                next_sequence = status.next_sequence;
                last_error = mirror_status.last_error;
            }
        }
        if !last_error.is_empty() && stuck_since.is_none() {
            stuck_since = Some(Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "the mirror's leader gives no reason within {CATCH_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        leader_index(&mirror_nodes).await,
        leader,
        "the mirror's leader changed"
    );
    assert!(
        tampered.load(Ordering::Relaxed) > 0,
        "the proxy never tampered"
    );
    assert!(
        last_error.contains("source's entries"),
        "the leader's reason: {last_error}"
    );
    // The pages before the tampered one were proven (by consistency proofs) and appended.
    assert_eq!(next_sequence, tampered_index / PROXY_PAGE * PROXY_PAGE);

    eprintln!(
        "tampering source: stuck at {next_sequence} with {last_error:?}; {} tampered pages; \
         test took {:?}",
        tampered.load(Ordering::Relaxed),
        began.elapsed()
    );
    proxy.abort();
    shutdown(mirror_nodes).await;
    shutdown(source_nodes).await;
}
