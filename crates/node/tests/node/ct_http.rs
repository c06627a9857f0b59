//! The CT log end to end, as a CT client sees it: three nodes in one process, RFC 6962 HTTP on
//! loopback, an HTTP client that is not ours. Submit to a follower, verify the SCT under the
//! log's key, watch the entry reach a serving STH, verify inclusion and consistency.

use certus_core::ct::CtCommand;
use certus_core::{Command, Response};
use certus_ct::chain::{AcceptedRoots, ChainLimits, check_pre_chain};
use certus_ct::merkle::{leaf_hash, verify_consistency, verify_inclusion};
use certus_ct::structures::json::{
    GetEntriesResponse, GetProofByHashResponse, GetRootsResponse, GetSthConsistencyResponse,
};
use certus_ct::structures::{SignedTreeHead, leaf_input};
use certus_ct::{Hash, LogEntry};
use certus_node::NodeConfig;

use crate::support::{
    Pki, add, agent, b64, get, leader_index, parse_sct, shutdown, start, sth_of_at_least, url,
    url_escape,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_client_submits_verifies_and_audits_over_http() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let (configs, nodes, verifier) = start(dir.path(), "log", &pki).await;
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

    shutdown(nodes).await;
}

/// With no dedupe window the replicated state forgets an entry as soon as it is cleaned up: a
/// resubmission is then answered from the node's local entry-key index, with the first SCT, and
/// the log does not grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmission_the_state_forgot_gets_its_first_sct_from_the_local_index() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let (configs, nodes, verifier) = start(dir.path(), "forget", &pki).await;
    let responses = nodes[0]
        .replica()
        .write(vec![Command::Ct(CtCommand::SetDedupeWindow { entries: 0 })])
        .await
        .expect("the window is set");
    assert!(matches!(responses[0], Response::Ct(Ok(_))), "{responses:?}");
    let leaves: Vec<Vec<u8>> = (0..3)
        .map(|i| pki.leaf(&format!("forget{i}.example"), false))
        .collect();
    let (configs_, leaves_) = (configs.clone(), leaves.clone());
    let first = tokio::task::spawn_blocking(move || {
        let agent = agent();
        leaves_
            .iter()
            .map(|leaf| {
                let (status, body) = add(&agent, &configs_[0], "add-chain", &[leaf]);
                assert_eq!(status, 200, "{body}");
                parse_sct(&body)
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("client thread");

    // Wait until every node serves all three and the state forgot them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let forgotten = nodes
            .iter()
            .map(|node| {
                node.replica()
                    .reader
                    .read(|applied| applied.state.ct_dedupe().forgotten_below)
            })
            .min()
            .unwrap_or(0);
        if forgotten >= 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the state never forgot the entries (forgotten below {forgotten})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for node in &nodes {
        let remembered = node.replica().reader.read(|applied| {
            (
                applied.state.ct_held_count(),
                applied.state.ct_first_held_sequence(),
            )
        });
        assert_eq!(
            remembered,
            (0, 3),
            "node {} still holds entries",
            node.replica().id
        );
    }

    tokio::task::spawn_blocking(move || {
        let agent = agent();
        for (node, config) in configs.iter().enumerate() {
            for (leaf, sct) in leaves.iter().zip(&first) {
                let (status, body) = add(&agent, config, "add-chain", &[leaf]);
                assert_eq!(status, 200, "node {node}: {body}");
                let again = parse_sct(&body);
                assert_eq!(&again, sct, "node {node} answered a different SCT");
                let entry = LogEntry::X509 {
                    certificate: leaf.clone(),
                };
                verifier
                    .verify_sct(&again, &entry)
                    .expect("the SCT verifies");
            }
        }
        // Nothing was logged twice.
        let sth = sth_of_at_least(&agent, &configs[1], 3, &verifier);
        assert_eq!(sth.tree_size, 3);
    })
    .await
    .expect("client thread");
    let next = nodes[0]
        .replica()
        .reader
        .read(|applied| applied.state.ct_next_sequence());
    assert_eq!(next, 3, "a resubmission was logged again");
    shutdown(nodes).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precertificates_and_bad_input_are_handled_as_rfc_6962_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let (configs, nodes, verifier) = start(dir.path(), "log", &pki).await;
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
        // A body past the limit is a 413 and a query string that does not parse a 400, each
        // with a JSON body, like every other refusal.
        let oversized = vec![b' '; certus_node::limits::ADD_CHAIN_BODY_BYTES_MAX + 1];
        let mut response = agent
            .post(url(node, "add-chain"))
            .header("content-type", "application/json")
            .send(&oversized[..])
            .expect("request");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("body");
        assert_eq!(
            status, 413,
            "an oversized add-chain answered {status}: {text}"
        );
        let json: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
        assert_eq!(json["error"], "too-large", "{text}");
        for query in [
            "get-entries?start=0&start=1&end=0",
            "get-sth-consistency?first=%FF&second=1",
        ] {
            let (status, text) = get(&agent, node, query);
            assert_eq!(status, 400, "{query} answered {status}: {text}");
            let json: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
            assert_eq!(json["error"], "bad-request", "{query}: {text}");
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

    shutdown(nodes).await;
}
