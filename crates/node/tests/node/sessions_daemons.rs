//! The nodes' own session daemons against a real three-node cluster in one process: a client
//! only creates sessions and waits; the cluster makes the HTTP-01 challenges, serves them from
//! every node, tests them, and issues with the cluster CA. Every name a session certifies is
//! pointed (through `sessions.http01_resolve`) at a node's HTTP address, at an address where
//! nothing listens, or at a tarpit that holds the tests until the test lets them through. Each
//! node runs on a Tokio runtime of its own, so that a test can kill one mid-step.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use certus_ca::csr::CheckedCsr;
use certus_ca::issuer::CaIdentity;
use certus_ct::chain::{AcceptedRoots, ChainLimits, check_chain};
use certus_node::ordered_watch as watch;
use certus_node::{CertusNode, Leader, Node, NodeConfig, SessionsSetup};
use certus_proto::v1;
use certus_proto::v1::sessions_client::SessionsClient;
use rcgen::{CertificateParams, KeyPair, PublicKeyData as _};
use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use tonic::transport::Channel;

use crate::support::{self, free_addr};

/// How long anything that should happen at once may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// How often a test looks again.
const POLL: Duration = Duration::from_millis(50);
/// ecdsa-with-SHA256 (1.2.840.10045.4.3.2), DER.
const ECDSA_WITH_SHA256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
/// subjectAltName (2.5.29.17), DER.
const SUBJECT_ALT_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x11];

/// The cluster CA, saved where every node's configuration names it.
struct TestCa {
    identity: CaIdentity,
    key_file: PathBuf,
    cert_file: PathBuf,
}

impl TestCa {
    fn new(dir: &Path) -> TestCa {
        let identity =
            CaIdentity::generate("Certus Test CA", now_ms() - 60_000).expect("a test CA");
        let key_file = dir.join("ca-key.pem");
        let cert_file = dir.join("ca-cert.pem");
        std::fs::write(&key_file, identity.key_pem()).expect("write the CA key");
        std::fs::write(&cert_file, identity.certificate_pem()).expect("write the CA certificate");
        TestCa {
            identity,
            key_file,
            cert_file,
        }
    }
}

/// One node on a Tokio runtime of its own, so that the test can crash it: shutting the runtime
/// down drops every task of the node where it stands (a daemon mid-step included), as a killed
/// process would, with nothing finished or handed back.
struct ClusterNode {
    config: NodeConfig,
    runtime: Option<tokio::runtime::Runtime>,
    node: Option<Node>,
}

impl ClusterNode {
    async fn start(config: NodeConfig) -> ClusterNode {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("node-{}", config.id))
            .enable_all()
            .build()
            .expect("a runtime for the node");
        let node = runtime
            .spawn(Node::start(config.clone()))
            .await
            .expect("the start task")
            .expect("node starts");
        ClusterNode {
            config,
            runtime: Some(runtime),
            node: Some(node),
        }
    }

    fn node(&self) -> &Node {
        self.node.as_ref().expect("a running node")
    }

    fn is_leader(&self) -> bool {
        self.node
            .as_ref()
            .is_some_and(|node| node.replica().leader() == Some(Leader::Me))
    }

    fn worker(&self) -> String {
        format!("node-{}", self.config.id)
    }

    /// Kills the node: every task stops where it is.
    fn crash(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        self.node = None;
    }

    /// Stops the node the orderly way, [`Node::shutdown`].
    async fn stop(&mut self) {
        if let (Some(runtime), Some(node)) = (&self.runtime, self.node.take()) {
            runtime
                .spawn(node.shutdown())
                .await
                .expect("the shutdown task");
        }
        self.crash();
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        // A runtime may not be dropped where blocking is not allowed (in the test's runtime).
        self.crash();
    }
}

/// The index of the node that leads, once one does.
async fn leader_of(nodes: &[ClusterNode]) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(index) = nodes.iter().position(ClusterNode::is_leader) {
            return index;
        }
        assert!(Instant::now() < deadline, "no leader within {PATIENCE:?}");
        tokio::time::sleep(POLL).await;
    }
}

async fn stop_all(nodes: Vec<ClusterNode>) {
    for mut node in nodes {
        node.stop().await;
    }
}

/// A three-node cluster without a CT log, data under `dir`, every node with the daemons on, the
/// same CA, and the resolver `resolve` builds from the nodes' configurations; returned once
/// every node knows the leader.
async fn start_cluster(
    dir: &Path,
    ca: &TestCa,
    http01_timeout_ms: u64,
    resolve: impl Fn(&[NodeConfig]) -> BTreeMap<String, SocketAddr>,
) -> Vec<ClusterNode> {
    let mut configs: Vec<NodeConfig> = (1..=3)
        .map(|id| NodeConfig::new(id, free_addr(), free_addr(), dir.join(format!("node-{id}"))))
        .collect();
    let http01_resolve = resolve(&configs);
    for config in &mut configs {
        config.sessions = SessionsSetup {
            daemons: true,
            ca_key_file: Some(ca.key_file.clone()),
            ca_cert_file: Some(ca.cert_file.clone()),
            http01_resolve: http01_resolve.clone(),
            http01_timeout_ms,
            ..SessionsSetup::default()
        };
    }
    let mut nodes = Vec::new();
    for config in configs {
        nodes.push(ClusterNode::start(config).await);
    }
    let members: BTreeMap<u64, CertusNode> = nodes
        .iter()
        .map(|node| (node.config.id, node.config.member()))
        .collect();
    nodes[0]
        .node()
        .initialize(members)
        .await
        .expect("initialize");
    leader_of(&nodes).await;
    let deadline = Instant::now() + PATIENCE;
    while nodes
        .iter()
        .any(|node| node.node().replica().leader().is_none())
    {
        assert!(Instant::now() < deadline, "not every node knows the leader");
        tokio::time::sleep(POLL).await;
    }
    nodes
}

/// A stand-in web server for names: it holds every connection, unanswered, until it is
/// released, then passes each through to the node it was released to.
struct Tarpit {
    addr: SocketAddr,
    release: watch::Sender<Option<SocketAddr>>,
    held: Arc<AtomicUsize>,
}

impl Tarpit {
    async fn start() -> Tarpit {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a tarpit port");
        let addr = listener.local_addr().expect("its address");
        let (release, released) = watch::channel(None::<SocketAddr>);
        let held = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&held);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut released = released.clone();
                tokio::spawn(async move {
                    let Ok(target) = released.wait_for(Option::is_some).await.map(|t| *t) else {
                        return;
                    };
                    let target = target.expect("released to a node");
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Tarpit {
            addr,
            release,
            held,
        }
    }

    /// Connections received so far.
    fn connections(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// From now on (and for every connection held so far), pass connections through to `to`.
    fn release_to(&self, to: SocketAddr) {
        self.release.send_replace(Some(to));
    }
}

async fn client(node: &NodeConfig) -> SessionsClient<Channel> {
    SessionsClient::connect(format!("http://{}", node.grpc_addr))
        .await
        .expect("gRPC connection")
}

/// A fresh key and its CSR (DER) for `names`.
fn csr(names: &[&str]) -> (KeyPair, Vec<u8>) {
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(
        names
            .iter()
            .map(|&name| name.to_owned())
            .collect::<Vec<_>>(),
    )
    .expect("CSR params");
    let der = params.serialize_request(&key).expect("CSR").der().to_vec();
    (key, der)
}

fn create_request(csr: Vec<u8>, names: &[&str]) -> v1::CreateSessionRequest {
    v1::CreateSessionRequest {
        csr,
        names: names.iter().map(|&name| name.to_owned()).collect(),
        request_key: String::new(),
    }
}

fn stage(session: &v1::Session) -> v1::Stage {
    v1::Stage::try_from(session.stage).expect("a known stage")
}

async fn get(client: &mut SessionsClient<Channel>, id: u64) -> v1::Session {
    client
        .get(v1::GetSessionRequest { id })
        .await
        .expect("Sessions/Get")
        .into_inner()
}

async fn set_config(
    client: &mut SessionsClient<Channel>,
    change: impl FnOnce(&mut v1::SessionConfig),
) -> v1::SessionConfig {
    let mut config = client
        .status(v1::SessionsStatusRequest {})
        .await
        .expect("Sessions/Status")
        .into_inner()
        .config
        .expect("a config");
    change(&mut config);
    let set = client
        .set_config(v1::SetSessionConfigRequest {
            config: Some(config),
        })
        .await
        .expect("Sessions/SetConfig")
        .into_inner();
    assert_eq!(set, config);
    set
}

/// Long-polls with `Wait` until the session is done, failed or killed; returns it and every
/// stage seen on the way.
async fn wait_until_settled(
    client: &mut SessionsClient<Channel>,
    created: v1::Session,
    patience: Duration,
) -> (v1::Session, Vec<v1::Stage>) {
    let deadline = Instant::now() + patience;
    let mut stages = vec![stage(&created)];
    let mut known = created;
    loop {
        if !known.live || matches!(stage(&known), v1::Stage::Done | v1::Stage::Failed) {
            return (known, stages);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "session {} did not settle within {patience:?}: {known:?}",
            known.id
        );
        let wait_ms = u64::try_from(left.as_millis().min(5_000)).expect("fits");
        let next = client
            .wait(v1::WaitSessionRequest {
                id: known.id,
                known: Some(known.clone()),
                wait_ms,
            })
            .await
            .expect("Sessions/Wait")
            .into_inner();
        if stages.last() != Some(&stage(&next)) {
            stages.push(stage(&next));
        }
        known = next;
    }
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("milliseconds fit")
}

/// GETs `http://<node>/.well-known/acme-challenge/<token>` with a client that is not ours.
async fn fetch_challenge(node: &NodeConfig, token: &str) -> (u16, String) {
    let url = format!(
        "http://{}/.well-known/acme-challenge/{token}",
        node.http_addr
    );
    tokio::task::spawn_blocking(move || {
        let mut response = support::agent().get(&url).call().expect("HTTP GET");
        let status = response.status().as_u16();
        (status, response.body_mut().read_to_string().expect("body"))
    })
    .await
    .expect("the HTTP client thread")
}

// ---- a small DER reader, so the certificate is read by code that is not the issuer's ----

/// The first TLV of `input`: its tag, the whole TLV, its contents, and what follows it.
fn tlv(input: &[u8]) -> (u8, &[u8], &[u8], &[u8]) {
    assert!(input.len() >= 2, "a truncated DER value");
    let tag = input[0];
    let (length, header) = match input[1] {
        short @ 0..=0x7f => (usize::from(short), 2),
        0x81 => (usize::from(input[2]), 3),
        0x82 => (usize::from(input[2]) << 8 | usize::from(input[3]), 4),
        other => panic!("a DER length form this reader does not expect: {other:#x}"),
    };
    let end = header + length;
    assert!(input.len() >= end, "a truncated DER value");
    (tag, &input[..end], &input[header..end], &input[end..])
}

/// Every TLV in `contents`, in order: (tag, whole TLV, contents).
fn tlvs(mut contents: &[u8]) -> Vec<(u8, &[u8], &[u8])> {
    let mut items = Vec::new();
    while !contents.is_empty() {
        let (tag, whole, inner, rest) = tlv(contents);
        items.push((tag, whole, inner));
        contents = rest;
    }
    items
}

/// What the tests look at in a certificate.
#[derive(Debug)]
struct ParsedCertificate {
    tbs: Vec<u8>,
    signature_algorithm: Vec<u8>,
    signature: Vec<u8>,
    serial: Vec<u8>,
    issuer: Vec<u8>,
    subject: Vec<u8>,
    /// SubjectPublicKeyInfo, the whole DER.
    spki: Vec<u8>,
    dns_names: Vec<String>,
}

impl ParsedCertificate {
    fn new(der: &[u8]) -> ParsedCertificate {
        let (tag, _, certificate, rest) = tlv(der);
        assert!(
            tag == 0x30 && rest.is_empty(),
            "a certificate is one SEQUENCE"
        );
        let [
            (0x30, tbs, tbs_contents),
            (0x30, algorithm, _),
            (0x03, _, signature),
        ] = tlvs(certificate)[..]
        else {
            panic!("Certificate ::= SEQUENCE {{ tbs, algorithm, signature }}");
        };
        assert_eq!(signature[0], 0, "no unused bits in the signature");
        let mut fields = tlvs(tbs_contents);
        if fields[0].0 == 0xa0 {
            fields.remove(0); // version
        }
        let (serial_tag, _, serial) = fields[0];
        assert_eq!(serial_tag, 0x02, "serialNumber INTEGER");
        let [
            (0x30, _, _),
            (0x30, issuer, _),
            (0x30, _, _),
            (0x30, subject, _),
            (0x30, spki, _),
        ] = fields[1..6]
        else {
            panic!("signature, issuer, validity, subject, subjectPublicKeyInfo");
        };
        let mut dns_names = Vec::new();
        for &(tag, _, wrapped) in &fields[6..] {
            if tag != 0xa3 {
                continue;
            }
            let (_, _, extensions, _) = tlv(wrapped);
            for (_, _, extension) in tlvs(extensions) {
                let parts = tlvs(extension);
                if parts[0].1 != SUBJECT_ALT_NAME {
                    continue;
                }
                let (_, _, value) = parts[parts.len() - 1];
                let (_, _, names, _) = tlv(value);
                for (tag, _, name) in tlvs(names) {
                    assert_eq!(tag, 0x82, "only dNSName entries");
                    dns_names.push(String::from_utf8(name.to_vec()).expect("ASCII"));
                }
            }
        }
        ParsedCertificate {
            tbs: tbs.to_vec(),
            signature_algorithm: algorithm.to_vec(),
            signature: signature[1..].to_vec(),
            serial: serial.to_vec(),
            issuer: issuer.to_vec(),
            subject: subject.to_vec(),
            spki: spki.to_vec(),
            dns_names,
        }
    }

    /// The public key's bits (the BIT STRING's contents after its unused-bits byte).
    fn public_key(&self) -> Vec<u8> {
        let (_, _, spki, _) = tlv(&self.spki);
        let [(0x30, _, _), (0x03, _, key)] = tlvs(spki)[..] else {
            panic!("SubjectPublicKeyInfo ::= SEQUENCE {{ algorithm, subjectPublicKey }}");
        };
        key[1..].to_vec()
    }

    /// Verifies this certificate's signature with `issuer`'s key (ECDSA P-256, as the cluster
    /// CA's key is).
    fn verify_signed_by(&self, issuer: &ParsedCertificate) {
        let (_, _, algorithm, _) = tlv(&self.signature_algorithm);
        assert_eq!(
            algorithm, ECDSA_WITH_SHA256,
            "signed with ecdsa-with-SHA256"
        );
        assert_eq!(self.issuer, issuer.subject, "issued by the CA's name");
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, issuer.public_key())
            .verify(&self.tbs, &self.signature)
            .expect("the signature verifies with the CA's key");
    }
}

/// The DER certificates of a PEM chain, in order.
fn pem_certificates(chain: &str) -> Vec<Vec<u8>> {
    let mut certificates = Vec::new();
    let mut body: Option<String> = None;
    for line in chain.lines().map(str::trim) {
        match line {
            "-----BEGIN CERTIFICATE-----" => {
                assert!(body.is_none(), "nested BEGIN");
                body = Some(String::new());
            }
            "-----END CERTIFICATE-----" => {
                let text = body.take().expect("END after BEGIN");
                certificates.push(STANDARD.decode(text).expect("PEM base64"));
            }
            "" => {}
            text => body
                .as_mut()
                .expect("only certificates in the chain")
                .push_str(text),
        }
    }
    assert!(body.is_none(), "an unterminated PEM block");
    certificates
}

/// Checks that `chain` (PEM) is a leaf for `key`'s public key and exactly `names`, signed by
/// `ca`, followed by the CA certificate; returns the leaf's serial number.
fn check_certificate(chain: &str, key: &KeyPair, names: &[&str], ca: &CaIdentity) -> Vec<u8> {
    let ders = pem_certificates(chain);
    assert_eq!(ders.len(), 2, "the leaf, then the CA certificate");
    assert_eq!(
        ders[1],
        ca.certificate_der(),
        "the chain ends with the CA certificate"
    );
    let leaf = ParsedCertificate::new(&ders[0]);
    let ca_certificate = ParsedCertificate::new(&ders[1]);
    assert_eq!(
        leaf.spki,
        key.subject_public_key_info(),
        "the leaf certifies the CSR's public key"
    );
    let mut expected: Vec<String> = names.iter().map(|&name| name.to_owned()).collect();
    expected.sort();
    let mut got = leaf.dns_names.clone();
    got.sort();
    assert_eq!(got, expected, "the leaf's SANs are the session's names");
    leaf.verify_signed_by(&ca_certificate);
    // And the CT log's chain checker agrees: names, signatures, and an accepted root at the end.
    let roots = AcceptedRoots::from_pem(ca.certificate_pem()).expect("the CA as a root");
    check_chain(&ders, &roots, &ChainLimits::default()).expect("the chain checks");
    leaf.serial
}

fn thumbprint(key: &KeyPair) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        &key.subject_public_key_info(),
    ))
}

/// Polls every session through `client` until each is done; tolerates failed reads (while the
/// cluster elects a leader). Returns, per session, when it was seen done (after `since`), and
/// every claim seen on it as (claimant, deadline).
async fn until_all_done(
    client: &mut SessionsClient<Channel>,
    ids: &[u64],
    since: Instant,
    patience: Duration,
) -> BTreeMap<u64, (Duration, u64, Vec<(String, u64)>)> {
    let deadline = Instant::now() + patience;
    let mut claims: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    let mut done = BTreeMap::new();
    let mut failed_reads = 0;
    while done.len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "not every session was done within {patience:?}: done {done:?}, claims {claims:?}"
        );
        for &id in ids {
            if done.contains_key(&id) {
                continue;
            }
            let Ok(session) = client.get(v1::GetSessionRequest { id }).await else {
                failed_reads += 1;
                continue;
            };
            let session = session.into_inner();
            assert!(session.live, "session {id} was killed: {session:?}");
            assert_ne!(stage(&session), v1::Stage::Failed, "{session:?}");
            let seen = claims.entry(id).or_default();
            if !session.claimant.is_empty()
                && seen.last().map(|(_, deadline)| *deadline) != Some(session.claim_deadline_ms)
            {
                seen.push((session.claimant.clone(), session.claim_deadline_ms));
            }
            if stage(&session) == v1::Stage::Done {
                let claims = claims.remove(&id).unwrap_or_default();
                done.insert(id, (since.elapsed(), now_ms(), claims));
            }
        }
        tokio::time::sleep(POLL).await;
    }
    println!("{failed_reads} reads failed on the way");
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_gets_a_certificate_that_chains_to_the_cluster_ca() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new(dir.path());
    let names = ["www.example.com", "api.example.com"];
    // Each name at another node: the cluster serves every token from every node.
    let nodes = start_cluster(dir.path(), &ca, 2_000, |configs| {
        BTreeMap::from([
            (names[0].to_owned(), configs[0].http_addr),
            (names[1].to_owned(), configs[1].http_addr),
        ])
    })
    .await;
    let leader = leader_of(&nodes).await;
    let follower = &nodes[(leader + 1) % nodes.len()];
    let mut on_follower = client(&follower.config).await;
    let mut on_other = client(&nodes[(leader + 2) % nodes.len()].config).await;

    let (key, csr_der) = csr(&names);
    let created = on_follower
        .create(create_request(csr_der.clone(), &names))
        .await
        .expect("Sessions/Create")
        .into_inner();
    assert!(created.live);
    let created_at = Instant::now();
    let (done, stages) = wait_until_settled(&mut on_follower, created.clone(), PATIENCE).await;
    println!(
        "session {} reached {:?} in {:?} through {stages:?}",
        done.id,
        stage(&done),
        created_at.elapsed()
    );
    assert_eq!(stage(&done), v1::Stage::Done, "{done:?}");
    assert!(done.live && done.kill_reason.is_empty() && done.failure.is_empty());
    assert!(done.claimant.is_empty() && done.claim_token == 0);
    assert_eq!(done.csr, csr_der);
    assert_eq!(done.names, ["api.example.com", "www.example.com"]);

    // The challenges: one per name, made from the CSR's key, each satisfied by a test.
    let thumbprint = thumbprint(&key);
    let checked = CheckedCsr::from_der(&csr_der).expect("the CSR checks");
    assert_eq!(
        checked.public_key_info_der(),
        key.subject_public_key_info(),
        "rcgen and certus read the same key from the CSR"
    );
    let challenge_names: Vec<&str> = done.challenges.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(challenge_names, done.names);
    for challenge in &done.challenges {
        assert!(challenge.satisfied && !challenge.failed, "{challenge:?}");
        assert!(challenge.times_tested >= 1, "{challenge:?}");
        assert!(challenge.last_error.is_empty(), "{challenge:?}");
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(&challenge.token)
                .expect("a base64url token")
                .len(),
            32,
            "32 random bytes"
        );
        assert_eq!(
            challenge.key_authorization,
            format!("{}.{thumbprint}", challenge.token),
            "token.base64url(SHA-256(the CSR's SubjectPublicKeyInfo))"
        );
        for node in &nodes {
            let (status, body) = fetch_challenge(&node.config, &challenge.token).await;
            assert_eq!(
                (status, body.as_str()),
                (200, challenge.key_authorization.as_str()),
                "node {} serves the token of {}",
                node.config.id,
                challenge.name
            );
        }
    }
    assert_ne!(done.challenges[0].token, done.challenges[1].token);
    println!(
        "times tested: {:?}",
        done.challenges
            .iter()
            .map(|c| (c.name.as_str(), c.times_tested))
            .collect::<Vec<_>>()
    );

    // The certificate, the same from every node.
    let serial = check_certificate(&done.certificate, &key, &names, &ca.identity);
    println!("leaf serial {serial:02x?}");
    for node in &nodes {
        assert_eq!(
            get(&mut client(&node.config).await, done.id).await,
            done,
            "node {} answers the same done session",
            node.config.id
        );
    }

    let acknowledged = on_other
        .acknowledge(v1::AcknowledgeSessionRequest { id: done.id })
        .await
        .expect("Sessions/Acknowledge")
        .into_inner();
    assert!(acknowledged.acknowledged && acknowledged.archived_at_ms > 0);
    assert_eq!(acknowledged.certificate, done.certificate);
    assert_eq!(get(&mut on_follower, done.id).await, acknowledged);

    // Nothing to do: the daemons look at their own state before claiming, so the log grows by
    // the leader's ticks (one a second) only.
    let leader_node = nodes[leader].node();
    let before = leader_node.replica().commit_index();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = leader_node.replica().commit_index() - before;
    println!("idle for 3 s: the log grew by {grown} entries");
    assert!(
        grown <= 6,
        "idle daemons write to the log: {grown} entries in 3 s"
    );

    stop_all(nodes).await;
    println!("test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_a_node_mid_session_delays_but_never_loses_it() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new(dir.path());
    // Every name is at the tarpit, which holds each test until the test releases it: whoever
    // claims a testchallenge step holds it until then.
    let tarpit = Tarpit::start().await;
    let session_names: Vec<[String; 2]> = (0..5)
        .map(|i| [format!("s{i}.example.com"), format!("www.s{i}.example.com")])
        .collect();
    let mut nodes = start_cluster(dir.path(), &ca, 30_000, |_| {
        session_names
            .iter()
            .flatten()
            .map(|name| (name.clone(), tarpit.addr))
            .collect()
    })
    .await;
    let mut on_first = client(&nodes[0].config).await;
    set_config(&mut on_first, |config| {
        config.test_retry_ms = 200;
        config.stage_timeout_ms = 3_600_000;
    })
    .await;
    let mut created = Vec::new();
    for names in &session_names {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (key, csr_der) = csr(&names);
        let session = on_first
            .create(create_request(csr_der, &names))
            .await
            .expect("Sessions/Create")
            .into_inner();
        created.push((session, key));
    }
    let ids: Vec<u64> = created.iter().map(|(session, _)| session.id).collect();

    // Kill the first node seen holding a test, mid-step.
    let deadline = Instant::now() + PATIENCE;
    let (victim, held) = 'found: loop {
        assert!(Instant::now() < deadline, "no test was claimed");
        for &id in &ids {
            let session = get(&mut on_first, id).await;
            if stage(&session) == v1::Stage::TestChallenge && !session.claimant.is_empty() {
                let victim = nodes
                    .iter()
                    .position(|node| node.worker() == session.claimant)
                    .expect("a node's worker");
                break 'found (victim, session);
            }
        }
        tokio::time::sleep(POLL).await;
    };
    let leader = leader_of(&nodes).await;
    nodes[victim].crash();
    let crashed_at = Instant::now();
    let victim_worker = nodes[victim].worker();
    println!(
        "killed node {} ({}) holding the test of session {} (claim deadline in {} ms); the \
         tarpit had {} connections",
        nodes[victim].config.id,
        if victim == leader {
            "the leader"
        } else {
            "a follower"
        },
        held.id,
        held.claim_deadline_ms.saturating_sub(now_ms()),
        tarpit.connections()
    );
    let survivors: Vec<usize> = (0..nodes.len()).filter(|&i| i != victim).collect();
    tarpit.release_to(nodes[survivors[0]].config.http_addr);

    // Every session gets its certificate; what the dead node held waits for its claim's
    // deadline and the next tick.
    let mut on_survivor = client(&nodes[survivors[0]].config).await;
    let done = until_all_done(&mut on_survivor, &ids, crashed_at, Duration::from_secs(75)).await;
    for (id, (after, _, claims)) in &done {
        println!("session {id}: done {after:?} after the kill; claims seen {claims:?}");
    }
    let orphaned: Vec<u64> = done
        .iter()
        .filter(|(_, (_, _, claims))| claims.iter().any(|(who, _)| *who == victim_worker))
        .map(|(&id, _)| id)
        .collect();
    assert!(
        orphaned.contains(&held.id),
        "the dead node's claim on session {} was seen after the kill",
        held.id
    );
    for id in &orphaned {
        let (_, done_ms, claims) = &done[id];
        let dead_deadline = claims
            .iter()
            .filter(|(who, _)| *who == victim_worker)
            .map(|&(_, deadline)| deadline)
            .max()
            .expect("a claim of the dead node");
        assert!(
            *done_ms >= dead_deadline,
            "session {id} was taken from the dead node only after its claim's deadline"
        );
    }

    // Each session has one certificate, the same on both nodes that are left, for its key.
    let mut on_other = client(&nodes[survivors[1]].config).await;
    let mut serials = BTreeSet::new();
    for (session, key) in &created {
        let first = get(&mut on_survivor, session.id).await;
        let second = get(&mut on_other, session.id).await;
        assert_eq!(first, second, "both nodes answer the same session");
        assert_eq!(stage(&first), v1::Stage::Done);
        assert!(first.challenges.iter().all(|c| c.satisfied));
        let names: Vec<&str> = first.names.iter().map(String::as_str).collect();
        let serial = check_certificate(&first.certificate, key, &names, &ca.identity);
        let again = check_certificate(&second.certificate, key, &names, &ca.identity);
        assert_eq!(serial, again, "the leaf serial is stable");
        assert!(serials.insert(serial), "every session has its own leaf");
    }
    stop_all(nodes).await;
    println!("test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_the_leader_mid_session_loses_nothing() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new(dir.path());
    let session_names: Vec<[String; 2]> = (0..5)
        .map(|i| [format!("s{i}.example.com"), format!("www.s{i}.example.com")])
        .collect();
    // The names are at node 2 or 3, whichever the client uses; only the leader (node 1, which
    // initialized the cluster) is stopped.
    let mut nodes = start_cluster(dir.path(), &ca, 2_000, |configs| {
        session_names
            .iter()
            .enumerate()
            .flat_map(|(i, names)| names.iter().map(move |name| (i, name)))
            .map(|(i, name)| (name.clone(), configs[1 + i % 2].http_addr))
            .collect()
    })
    .await;
    let mut leader = leader_of(&nodes).await;
    if leader != 0 {
        // Not the usual case; the names must stay on nodes that keep running.
        println!("node {} leads, not node 1", nodes[leader].config.id);
        leader = 0;
    }
    let mut on_follower = client(&nodes[1].config).await;
    set_config(&mut on_follower, |config| config.test_retry_ms = 200).await;
    let mut created = Vec::new();
    for names in &session_names {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let (key, csr_der) = csr(&names);
        let session = on_follower
            .create(create_request(csr_der, &names))
            .await
            .expect("Sessions/Create")
            .into_inner();
        created.push((session, key));
    }
    let ids: Vec<u64> = created.iter().map(|(session, _)| session.id).collect();
    let stopping = Instant::now();
    nodes[leader].stop().await;
    println!(
        "stopped node {} right after the creates; Node::shutdown took {:?}",
        nodes[leader].config.id,
        stopping.elapsed()
    );

    let done = until_all_done(&mut on_follower, &ids, stopping, Duration::from_secs(75)).await;
    for (id, (after, _, claims)) in &done {
        println!("session {id}: done {after:?} after the stop; claims seen {claims:?}");
    }
    let mut on_other = client(&nodes[2].config).await;
    let mut serials = BTreeSet::new();
    for (session, key) in &created {
        let first = get(&mut on_follower, session.id).await;
        let second = get(&mut on_other, session.id).await;
        assert_eq!(first, second, "both nodes answer the same session");
        let names: Vec<&str> = first.names.iter().map(String::as_str).collect();
        let serial = check_certificate(&first.certificate, key, &names, &ca.identity);
        assert_eq!(
            serial,
            check_certificate(&second.certificate, key, &names, &ca.identity)
        );
        assert!(serials.insert(serial), "every session has its own leaf");
    }
    stop_all(nodes).await;
    println!("test took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_name_that_never_serves_its_challenge_is_killed_after_max_tests() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new(dir.path());
    let names = ["nowhere.example.com", "www.nowhere.example.com"];
    let nowhere = free_addr();
    let nodes = start_cluster(dir.path(), &ca, 2_000, |_| {
        names
            .iter()
            .map(|&name| (name.to_owned(), nowhere))
            .collect()
    })
    .await;
    let leader = leader_of(&nodes).await;
    let mut on_follower = client(&nodes[(leader + 1) % nodes.len()].config).await;
    let mut on_other = client(&nodes[(leader + 2) % nodes.len()].config).await;
    set_config(&mut on_other, |config| {
        config.max_tests = 2;
        config.test_retry_ms = 200;
    })
    .await;

    let (_key, csr_der) = csr(&names);
    let created = on_follower
        .create(create_request(csr_der, &names))
        .await
        .expect("Sessions/Create")
        .into_inner();
    let created_at = Instant::now();
    let (killed, stages) = wait_until_settled(&mut on_follower, created, PATIENCE).await;
    println!(
        "session {} settled in {:?} through {stages:?}: {}",
        killed.id,
        created_at.elapsed(),
        killed.kill_reason
    );
    assert!(!killed.live, "{killed:?}");
    assert!(
        !stages.contains(&v1::Stage::Issue),
        "it never reached issue: {stages:?}"
    );
    assert_eq!(
        stage(&killed),
        v1::Stage::TestChallenge,
        "it keeps its stage"
    );
    assert!(
        killed.kill_reason.contains("failed 2 tests")
            && names.iter().any(|name| killed.kill_reason.contains(name)),
        "the kill reason names the rule: {}",
        killed.kill_reason
    );
    assert!(killed.certificate.is_empty() && killed.failure.is_empty());
    assert!(killed.claimant.is_empty() && killed.archived_at_ms > 0);
    for challenge in &killed.challenges {
        assert!(!challenge.satisfied, "{challenge:?}");
        assert_eq!(challenge.times_tested, 2, "{challenge:?}");
        assert!(challenge.failed, "{challenge:?}");
        let error = &challenge.last_error;
        assert!(
            error.contains(&challenge.name)
                && error.contains(&nowhere.to_string())
                && error.to_ascii_lowercase().contains("connection refused"),
            "the last error says why: {error}"
        );
        println!("{}: {error}", challenge.name);
    }
    // Nothing more happens to it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get(&mut on_other, killed.id).await, killed);
    stop_all(nodes).await;
    println!("test took {:?}", started.elapsed());
}

/// One name serves its challenge, the other never does: the first test satisfies one challenge
/// only, and the session is killed once the other was tested `max_tests` times. (A regression
/// test: the daemon once reported results for the unsatisfied challenges only, which the state
/// machine refuses, and the session sat until its stage timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_with_one_unreachable_name_is_killed_after_max_tests() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TestCa::new(dir.path());
    let names = ["here.example.com", "nowhere.example.com"];
    let nowhere = free_addr();
    let nodes = start_cluster(dir.path(), &ca, 2_000, |configs| {
        BTreeMap::from([
            (names[0].to_owned(), configs[0].http_addr),
            (names[1].to_owned(), nowhere),
        ])
    })
    .await;
    let mut on_first = client(&nodes[0].config).await;
    set_config(&mut on_first, |config| {
        config.max_tests = 3;
        config.test_retry_ms = 200;
    })
    .await;
    let (_key, csr_der) = csr(&names);
    let created = on_first
        .create(create_request(csr_der, &names))
        .await
        .expect("Sessions/Create")
        .into_inner();
    // Three tests 200 ms apart take about a second; give it the claim visibility (30 s) too.
    let deadline = Instant::now() + Duration::from_secs(40);
    let settled = loop {
        let session = get(&mut on_first, created.id).await;
        if !session.live || Instant::now() >= deadline {
            break session;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "after {:?}: live {}, stage {:?}, kill reason {:?}, challenges {:?}",
        started.elapsed(),
        settled.live,
        stage(&settled),
        settled.kill_reason,
        settled
            .challenges
            .iter()
            .map(|c| (c.name.as_str(), c.satisfied, c.times_tested))
            .collect::<Vec<_>>()
    );
    assert!(!settled.live, "still live: {settled:?}");
    assert!(
        settled
            .kill_reason
            .contains("the challenge for nowhere.example.com failed 3 tests"),
        "{}",
        settled.kill_reason
    );
    stop_all(nodes).await;
}

/// A node whose CA cannot cover a certificate issued now (here: one that expired at the end of 1979) does
/// not start: it says why, rather than failing every issuance later.
#[tokio::test]
async fn a_node_with_an_expired_ca_refuses_to_start() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let expired = CaIdentity::generate("Certus Expired CA", 0).expect("a CA from 1970");
    let key_file = dir.path().join("ca-key.pem");
    let cert_file = dir.path().join("ca-cert.pem");
    std::fs::write(&key_file, expired.key_pem()).expect("write the CA key");
    std::fs::write(&cert_file, expired.certificate_pem()).expect("write the CA certificate");
    let mut config = NodeConfig::new(1, free_addr(), free_addr(), dir.path().join("node-1"));
    config.sessions = SessionsSetup {
        ca_key_file: Some(key_file),
        ca_cert_file: Some(cert_file),
        ..SessionsSetup::default()
    };
    let error = Node::start(config.clone())
        .await
        .expect_err("an expired CA is refused");
    let text = error.to_string();
    assert!(text.contains("sessions CA"), "{text}");
    assert!(text.contains("renew the CA"), "{text}");
    assert!(text.contains("1979"), "the CA's end is named: {text}");

    // Without the daemons the CA is not used, and the node starts.
    config.sessions.daemons = false;
    let node = Node::start(config)
        .await
        .expect("a node without daemons starts");
    node.shutdown().await;
}
