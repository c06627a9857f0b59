//! What the CT log's end-to-end tests share: a test PKI, a three-node CT cluster on loopback
//! (each cluster with its own log key, so two can run in one process), and a small RFC 6962 HTTP
//! client on `ureq` (a client that is not ours).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use certus_ct::signer::{EcdsaP256Signer, LogVerifier};
use certus_ct::structures::json::{AddChainResponse, GetSthResponse};
use certus_ct::structures::{SignedCertificateTimestamp, SignedTreeHead};
use certus_node::{CertusNode, CtFiles, Leader, Node, NodeConfig};
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// The precertificate poison extension (RFC 6962 §3.1).
const POISON: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 3];

#[path = "../../../../../tests/support/ports.rs"]
mod ports;
pub use ports::free_addr;

/// A root CA that issues test leaves and precertificates.
pub struct Pki {
    root_params: CertificateParams,
    root_key: KeyPair,
    pub root_der: Vec<u8>,
    pub root_pem: String,
}

impl Pki {
    pub fn new() -> Pki {
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

    /// A leaf for `name` signed by the root, DER; a precertificate (poisoned) if `precert`.
    pub fn leaf(&self, name: &str, precert: bool) -> Vec<u8> {
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

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Percent-escapes standard base64 for a query string.
pub fn url_escape(text: &str) -> String {
    text.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

/// The node's RFC 6962 base URL: the API is under `<base>/ct/v1/`.
pub fn base_url(node: &NodeConfig) -> String {
    format!("http://{}", node.http_addr)
}

pub fn url(node: &NodeConfig, path: &str) -> String {
    format!("{}/ct/v1/{path}", base_url(node))
}

/// A blocking HTTP client that reports every status instead of failing on 4xx/5xx.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// POSTs a chain; returns the status and the body.
pub fn add(agent: &ureq::Agent, node: &NodeConfig, path: &str, chain: &[&[u8]]) -> (u16, String) {
    let body = serde_json::json!({ "chain": chain.iter().map(|der| b64(der)).collect::<Vec<_>>() });
    let mut response = agent
        .post(url(node, path))
        .send_json(body)
        .expect("request");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

pub fn get(agent: &ureq::Agent, node: &NodeConfig, path: &str) -> (u16, String) {
    let mut response = agent.get(url(node, path)).call().expect("request");
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().expect("body"))
}

/// Polls `node` until its serving STH covers `size` entries; returns it, verified.
pub fn sth_of_at_least(
    agent: &ureq::Agent,
    node: &NodeConfig,
    size: u64,
    verifier: &LogVerifier,
) -> SignedTreeHead {
    sth_of_at_least_within(agent, node, size, verifier, Duration::from_secs(20))
}

/// [`sth_of_at_least`] with another deadline. Every STH seen must verify under `verifier`;
/// meanwhile the node may only answer 503 (nothing to serve yet).
pub fn sth_of_at_least_within(
    agent: &ureq::Agent,
    node: &NodeConfig,
    size: u64,
    verifier: &LogVerifier,
    timeout: Duration,
) -> SignedTreeHead {
    let deadline = Instant::now() + timeout;
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
            "node {} serves no STH of size {size} within {timeout:?} (last: {status} {body})",
            node.id
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a three-node CT cluster with a fresh log key, its files and data under
/// `dir/<name>/`; returns the configurations, the nodes and the verifier of the log's key.
pub async fn start(dir: &Path, name: &str, pki: &Pki) -> (Vec<NodeConfig>, Vec<Node>, LogVerifier) {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).expect("cluster dir");
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
                ..CtFiles::default()
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

pub async fn shutdown(nodes: Vec<Node>) {
    for node in nodes {
        node.shutdown().await;
    }
}

/// The index of the node that leads, once one does.
pub async fn leader_index(nodes: &[Node]) -> usize {
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

pub fn parse_sct(body: &str) -> SignedCertificateTimestamp {
    let json: AddChainResponse = serde_json::from_str(body).expect("add-chain JSON");
    SignedCertificateTimestamp::try_from(&json).expect("an SCT")
}

/// Three nodes without a CT log, data under `dir`, each configured by `tune`, founding one
/// cluster; returned once every node knows the leader (within `patience`).
pub async fn start_plain_cluster(
    dir: &Path,
    patience: Duration,
    tune: impl Fn(&mut NodeConfig),
) -> (Vec<NodeConfig>, Vec<Node>) {
    let configs: Vec<NodeConfig> = (1..=3)
        .map(|id| {
            let mut config =
                NodeConfig::new(id, free_addr(), free_addr(), dir.join(format!("node-{id}")));
            tune(&mut config);
            config
        })
        .collect();
    let mut nodes = Vec::new();
    for config in &configs {
        nodes.push(Node::start(config.clone()).await.expect("node starts"));
    }
    let members: BTreeMap<u64, CertusNode> = configs.iter().map(|c| (c.id, c.member())).collect();
    nodes[0].initialize(members).await.expect("initialize");
    leader_index(&nodes).await;
    let deadline = Instant::now() + patience;
    while nodes.iter().any(|node| node.replica().leader().is_none()) {
        assert!(Instant::now() < deadline, "not every node knows the leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (configs, nodes)
}

/// The indexes of the leader and of the two followers of a three-node cluster.
pub async fn roles(nodes: &[Node]) -> (usize, usize, usize) {
    let leader = leader_index(nodes).await;
    (
        leader,
        (leader + 1) % nodes.len(),
        (leader + 2) % nodes.len(),
    )
}

/// A transport CA for the TLS tests (what `certus pki` makes for a cluster) and the
/// certificates it signs: roles in O, the name in CN.
pub struct TransportCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate (PEM).
    pub pem: String,
}

impl TransportCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TransportCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).expect("CA").pem();
        TransportCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// `(certificate PEM, key PEM)` for `name` with `roles`, for client authentication; a
    /// `node`'s is a server's too, valid for 127.0.0.1.
    pub fn issue(&self, name: &str, roles: &[&str]) -> (String, String) {
        let server = roles.contains(&"node");
        let sans = if server { loopback() } else { Vec::new() };
        self.issue_with(name, roles, server, sans)
    }

    /// `(certificate PEM, key PEM)` for `name` with `roles`, for client authentication and,
    /// with `server`, server authentication, valid for exactly `sans`.
    pub fn issue_with(
        &self,
        name: &str,
        roles: &[&str],
        server: bool,
        sans: Vec<SanType>,
    ) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        for role in roles {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *role);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        params.subject_alt_names = sans;
        let certificate = params.signed_by(&key, &self.issuer).expect("signed");
        (certificate.pem(), key.serialize_pem())
    }
}

/// The subject alternative names of a server on 127.0.0.1.
pub fn loopback() -> Vec<SanType> {
    vec![SanType::IpAddress([127, 0, 0, 1].into())]
}
