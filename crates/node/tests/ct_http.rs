//! The CT log end to end, as a CT client sees it: three nodes in one process, RFC 6962 HTTP on
//! loopback, an HTTP client that is not ours. Submit to a follower, verify the SCT under the
//! log's key, watch the entry reach a serving STH, verify inclusion and consistency.

#![cfg(not(madsim))]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use certus_ct::chain::{AcceptedRoots, ChainLimits, check_pre_chain};
use certus_ct::merkle::{leaf_hash, verify_consistency, verify_inclusion};
use certus_ct::signer::{EcdsaP256Signer, LogVerifier};
use certus_ct::structures::json::{
    AddChainResponse, GetEntriesResponse, GetProofByHashResponse, GetRootsResponse,
    GetSthConsistencyResponse, GetSthResponse,
};
use certus_ct::structures::{SignedCertificateTimestamp, SignedTreeHead, leaf_input};
use certus_ct::{Hash, LogEntry};
use certus_node::{CertusNode, CtFiles, Leader, Node, NodeConfig};
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

const POISON: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 3];

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("an ephemeral port")
}

struct Pki {
    root_params: CertificateParams,
    root_key: KeyPair,
    root_der: Vec<u8>,
    root_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let mut root_params = CertificateParams::default();
        root_params
            .distinguished_name
            .push(DnType::CommonName, "Certus Test Root");
        root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        root_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let root_key = KeyPair::generate().expect("root key");
        let root = root_params.self_signed(&root_key).expect("root");
        Pki {
            root_der: root.der().to_vec(),
            root_pem: root.pem(),
            root_params,
            root_key,
        }
    }

    fn leaf(&self, name: &str, precert: bool) -> Vec<u8> {
        let mut params = CertificateParams::new(vec![name.to_owned()]).expect("params");
        if precert {
            let mut poison = CustomExtension::from_oid_content(POISON, vec![0x05, 0x00]);
            poison.set_criticality(true);
            params.custom_extensions.push(poison);
        }
        let key = KeyPair::generate().expect("leaf key");
        let issuer = Issuer::from_params(&self.root_params, &self.root_key);
        params
            .signed_by(&key, &issuer)
            .expect("leaf")
            .der()
            .to_vec()
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn url(node: &NodeConfig, path: &str) -> String {
    format!("http://{}/ct/v1/{path}", node.http_addr)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// POSTs a chain; returns the status and the body.
fn add(agent: &ureq::Agent, node: &NodeConfig, path: &str, chain: &[&[u8]]) -> (u16, String) {
    let body = serde_json::json!({ "chain": chain.iter().map(|der| b64(der)).collect::<Vec<_>>() });
    let mut response = agent
        .post(url(node, path))
        .send_json(body)
        .expect("request");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

fn get(agent: &ureq::Agent, node: &NodeConfig, path: &str) -> (u16, String) {
    let mut response = agent.get(url(node, path)).call().expect("request");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

/// Polls `node` until its serving STH covers `size` entries; returns it, verified.
fn sth_of_at_least(
    agent: &ureq::Agent,
    node: &NodeConfig,
    size: u64,
    verifier: &LogVerifier,
) -> SignedTreeHead {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = get(agent, node, "get-sth");
        if status == 200 {
            let json: GetSthResponse = serde_json::from_str(&body).expect("get-sth JSON");
            let sth = SignedTreeHead::try_from(&json).expect("an STH");
            verifier.verify_sth(&sth).expect("the STH verifies");
            if sth.tree_size >= size {
                return sth;
            }
        } else {
            assert_eq!(status, 503, "get-sth answered {status}: {body}");
        }
        assert!(
            Instant::now() < deadline,
            "node {} serves no STH of size {size} within 20 s (last: {status} {body})",
            node.id
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn start(dir: &Path, pki: &Pki) -> (Vec<NodeConfig>, Vec<Node>, LogVerifier) {
    let key_pem = EcdsaP256Signer::generate_pkcs8_pem().expect("log key");
    let signer = EcdsaP256Signer::from_pkcs8_pem(&key_pem).expect("log key loads");
    let verifier = LogVerifier::for_signer(&signer).expect("verifier");
    let key_file = dir.join("log-key.pem");
    let roots_file = dir.join("roots.pem");
    std::fs::write(&key_file, key_pem).expect("write key");
    std::fs::write(&roots_file, &pki.root_pem).expect("write roots");
    let configs: Vec<NodeConfig> = (1..=3)
        .map(|id| {
            let mut config =
                NodeConfig::new(id, free_addr(), free_addr(), dir.join(format!("node-{id}")));
            config.ct = CtFiles {
                key_file: Some(key_file.clone()),
                roots_file: Some(roots_file.clone()),
            };
            config
        })
        .collect();
    let mut nodes = Vec::new();
    for config in &configs {
        nodes.push(Node::start(config.clone()).await.expect("node starts"));
    }
    let members: BTreeMap<u64, CertusNode> = configs.iter().map(|c| (c.id, c.member())).collect();
    nodes[0].initialize(members).await.expect("initialize");
    (configs, nodes, verifier)
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

fn parse_sct(body: &str) -> SignedCertificateTimestamp {
    let json: AddChainResponse = serde_json::from_str(body).expect("add-chain JSON");
    SignedCertificateTimestamp::try_from(&json).expect("an SCT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_client_submits_verifies_and_audits_over_http() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let (configs, nodes, verifier) = start(dir.path(), &pki).await;
    let leader = leader_index(&nodes).await;
    let follower = configs[(leader + 1) % 3].clone();
    let other = configs[(leader + 2) % 3].clone();
    let leaves: Vec<Vec<u8>> = (0..3)
        .map(|i| pki.leaf(&format!("host{i}.example"), false))
        .collect();

    let scts = tokio::task::spawn_blocking({
        let (follower, other, leaves, verifier) = (
            follower.clone(),
            other.clone(),
            leaves.clone(),
            verifier.clone(),
        );
        let root = pki.root_der.clone();
        move || {
            let agent = agent();
            // get-roots lists the configured root.
            let (status, body) = get(&agent, &follower, "get-roots");
            assert_eq!(status, 200, "{body}");
            let roots: GetRootsResponse = serde_json::from_str(&body).expect("roots JSON");
            assert_eq!(roots.certificates, vec![root]);

            // The first entry through a follower: its SCT verifies for the submitted leaf.
            let (status, body) = add(&agent, &follower, "add-chain", &[&leaves[0]]);
            assert_eq!(status, 200, "{body}");
            let first = parse_sct(&body);
            let entry = LogEntry::X509 {
                certificate: leaves[0].clone(),
            };
            verifier
                .verify_sct(&first, &entry)
                .expect("the SCT verifies");

            // A duplicate, through another node, gets the same SCT back.
            let (status, body) = add(&agent, &other, "add-chain", &[&leaves[0]]);
            assert_eq!(status, 200, "{body}");
            assert_eq!(parse_sct(&body), first);

            let mut scts = vec![first];
            for leaf in &leaves[1..] {
                let (status, body) = add(&agent, &follower, "add-chain", &[leaf]);
                assert_eq!(status, 200, "{body}");
                scts.push(parse_sct(&body));
            }
            scts
        }
    })
    .await
    .expect("client thread");

    tokio::task::spawn_blocking({
        let (configs, verifier) = (configs.clone(), verifier.clone());
        move || {
            let agent = agent();
            // Every node comes to serve a tree with all three entries.
            let sths: Vec<SignedTreeHead> = configs
                .iter()
                .map(|node| sth_of_at_least(&agent, node, 3, &verifier))
                .collect();
            let sth = &sths[0];
            assert_eq!(sth.tree_size, 3);

            // Inclusion of each entry, by leaf hash, from a node other than the submitter.
            for (leaf, sct) in leaves.iter().zip(&scts) {
                let entry = LogEntry::X509 {
                    certificate: leaf.clone(),
                };
                let hash = leaf_hash(&leaf_input(sct.timestamp_ms, &entry, &[]).expect("leaf"));
                let query = format!(
                    "get-proof-by-hash?hash={}&tree_size={}",
                    url_escape(&b64(&hash)),
                    sth.tree_size
                );
                let (status, body) = get(&agent, &other, &query);
                assert_eq!(status, 200, "{body}");
                let proof: GetProofByHashResponse = serde_json::from_str(&body).expect("JSON");
                verify_inclusion(
                    &hash,
                    proof.leaf_index,
                    sth.tree_size,
                    &proof.audit_path,
                    &sth.sha256_root_hash,
                )
                .expect("inclusion verifies");
            }

            // Consistency between an older tree and the serving one.
            let old_root = tree_root_of_first(&agent, &configs[0], sth, 1);
            let (status, body) = get(
                &agent,
                &configs[1],
                &format!("get-sth-consistency?first=1&second={}", sth.tree_size),
            );
            assert_eq!(status, 200, "{body}");
            let proof: GetSthConsistencyResponse = serde_json::from_str(&body).expect("JSON");
            verify_consistency(
                1,
                sth.tree_size,
                &old_root,
                &sth.sha256_root_hash,
                &proof.consistency,
            )
            .expect("consistency verifies");

            // get-entries returns what was logged, in order.
            let (status, body) = get(&agent, &configs[2], "get-entries?start=0&end=10");
            assert_eq!(status, 200, "{body}");
            let entries: GetEntriesResponse = serde_json::from_str(&body).expect("JSON");
            assert_eq!(entries.entries.len(), 3);
            let mut logged: Vec<Vec<u8>> = entries
                .entries
                .iter()
                .map(|entry| {
                    match entry
                        .decode()
                        .expect("entry decodes")
                        .0
                        .timestamped_entry
                        .entry
                    {
                        LogEntry::X509 { certificate } => certificate,
                        other => panic!("unexpected entry {other:?}"),
                    }
                })
                .collect();
            logged.sort();
            let mut submitted = leaves.clone();
            submitted.sort();
            assert_eq!(logged, submitted);
        }
    })
    .await
    .expect("auditor thread");

    for node in nodes {
        node.shutdown().await;
    }
}

/// The root of the first `size` entries, computed by the client from get-entries.
fn tree_root_of_first(
    agent: &ureq::Agent,
    node: &NodeConfig,
    sth: &SignedTreeHead,
    size: u64,
) -> Hash {
    let (status, body) = get(
        agent,
        node,
        &format!("get-entries?start=0&end={}", size - 1),
    );
    assert_eq!(status, 200, "{body}");
    let entries: GetEntriesResponse = serde_json::from_str(&body).expect("JSON");
    let hashes: Vec<Hash> = entries
        .entries
        .iter()
        .map(|entry| leaf_hash(&entry.leaf_input))
        .collect();
    assert!(size <= sth.tree_size);
    certus_ct::merkle::MerkleTree::from_leaf_hashes(hashes).root()
}

fn url_escape(text: &str) -> String {
    text.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precertificates_and_bad_input_are_handled_as_rfc_6962_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let (configs, nodes, verifier) = start(dir.path(), &pki).await;
    leader_index(&nodes).await;
    let precert = pki.leaf("pre.example", true);
    let plain = pki.leaf("plain.example", false);
    let roots = AcceptedRoots::from_der([pki.root_der.clone()]).expect("roots");

    tokio::task::spawn_blocking(move || {
        let agent = agent();
        let node = &configs[1];
        // A precertificate: the SCT covers the TBS without the poison and the issuer key hash.
        let (status, body) = add(&agent, node, "add-pre-chain", &[&precert]);
        assert_eq!(status, 200, "{body}");
        let sct = parse_sct(&body);
        let expected = check_pre_chain(
            std::slice::from_ref(&precert),
            &roots,
            &ChainLimits::default(),
        )
        .expect("the precert chain checks");
        verifier
            .verify_sct(&sct, &expected.entry)
            .expect("the precert SCT verifies");
        assert!(matches!(expected.entry, LogEntry::Precert { .. }));

        // Each bad request is a 400 with a JSON reason, and logs nothing.
        let cases: Vec<(&str, serde_json::Value)> = vec![
            ("add-chain", serde_json::json!({ "chain": ["not base64!"] })),
            ("add-chain", serde_json::json!({ "chain": [] })),
            ("add-chain", serde_json::json!({ "nonsense": 1 })),
            ("add-chain", serde_json::json!({ "chain": [b64(&precert)] })),
            (
                "add-pre-chain",
                serde_json::json!({ "chain": [b64(&plain)] }),
            ),
            (
                "add-chain",
                serde_json::json!({ "chain": [b64(b"garbage")] }),
            ),
        ];
        for (path, body) in cases {
            let mut response = agent
                .post(url(node, path))
                .send_json(&body)
                .expect("request");
            let status = response.status().as_u16();
            let text = response.body_mut().read_to_string().expect("body");
            assert_eq!(status, 400, "{path} {body} answered {status}: {text}");
            let json: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
            assert!(
                json["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{text}"
            );
        }
        let unknown_root = Pki::new().leaf("stranger.example", false);
        let (status, body) = add(&agent, node, "add-chain", &[&unknown_root]);
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("accepted root"), "{body}");

        // Reads: wait for the precert to be served, then refuse out-of-range parameters.
        let sth = sth_of_at_least(&agent, node, 1, &verifier);
        assert_eq!(sth.tree_size, 1, "only the precertificate was logged");
        for query in [
            "get-entries?start=1&end=0",
            "get-entries?start=5&end=9",
            "get-entries?start=-1&end=2",
            "get-entries",
            "get-sth-consistency?first=2&second=1",
            "get-sth-consistency?first=1&second=99",
            "get-proof-by-hash?hash=AAAA&tree_size=1",
            "get-proof-by-hash?tree_size=1",
            "get-entry-and-proof?leaf_index=1&tree_size=1",
        ] {
            let (status, body) = get(&agent, node, query);
            assert_eq!(status, 400, "{query} answered {status}: {body}");
        }
        let (status, body) = get(&agent, node, "get-entry-and-proof?leaf_index=0&tree_size=1");
        assert_eq!(status, 200, "{body}");
    })
    .await
    .expect("client thread");

    for node in nodes {
        node.shutdown().await;
    }
}
