//! The CT workload: submitters that log certificates through any node, and auditors that fetch
//! signed tree heads and check what they are shown, as a CT monitor would.
//!
//! Certificates come from a test PKI derived from the seed (Ed25519 keys, fixed serials and
//! dates), so a replayed run submits byte-identical chains. Clients speak `certus.v1.Log` over
//! gRPC, one attempt per call, to a node they pick at random.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::ct::LogConfig;
use certus_ct::merkle::{leaf_hash, verify_consistency, verify_inclusion};
use certus_ct::signer::LogVerifier;
use certus_ct::structures::{
    DigitallySigned, SignedCertificateTimestamp, SignedTreeHead, leaf_input,
};
use certus_ct::{Hash, LogEntry};
use certus_node::ordered_watch as watch;
use certus_proto::v1;
use certus_proto::v1::log_client::LogClient;
use madsim::runtime::Handle;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ED25519, SerialNumber,
};
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use crate::cluster::{elapsed_ms, endpoint};
use crate::schedule::SeedRng;

/// The shape of the CT workload.
#[derive(Clone, Debug)]
pub struct CtWorkload {
    /// Clients submitting chains.
    pub submitters: u32,
    /// Clients auditing tree heads.
    pub auditors: u32,
    /// How long a client waits for one answer.
    pub attempt_timeout: Duration,
    /// The log's configuration, set through Raft as the run starts.
    pub log_config: LogConfig,
    /// The log's dedupe window, set through Raft as the run starts: small, so that the state
    /// forgets cleaned-up entries within a run and resubmissions are caught by the nodes'
    /// local entry-key indexes.
    pub dedupe_window_entries: Option<u64>,
}

impl Default for CtWorkload {
    fn default() -> Self {
        CtWorkload {
            submitters: 3,
            auditors: 2,
            attempt_timeout: Duration::from_millis(2_000),
            log_config: LogConfig::default(),
            dedupe_window_entries: Some(16),
        }
    }
}

/// The simulated address of CT client machine `index`.
fn ct_client_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated CT clients");
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, last))
}

/// A test PKI: one root, leaves on demand. Keys come from the seed.
#[derive(Debug)]
pub struct TestPki {
    root_params: CertificateParams,
    root_key: KeyPair,
    /// The root, DER: what the log accepts.
    pub root_der: Vec<u8>,
    seed: u64,
}

/// The Ed25519 key pair of `purpose` in the run of `seed`, for rcgen (RFC 8410 PKCS#8 v1 around
/// [`crate::keys::ed25519_seed`]).
pub(crate) fn ed25519_key(seed: u64, purpose: &str) -> KeyPair {
    let private = crate::keys::ed25519_seed(seed, purpose);
    let mut pkcs8 = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    pkcs8.extend_from_slice(&private);
    KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8.as_slice().into(), &PKCS_ED25519)
        .expect("a valid Ed25519 PKCS#8 key")
}

impl TestPki {
    /// The PKI of the run of `seed`.
    pub fn new(seed: u64) -> TestPki {
        let mut root_params = CertificateParams::default();
        root_params
            .distinguished_name
            .push(DnType::CommonName, "Certus Simulation Root");
        root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        root_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        root_params.serial_number = Some(SerialNumber::from(1u64));
        let root_key = ed25519_key(seed, "ct-root");
        let root_der = root_params
            .self_signed(&root_key)
            .expect("the root signs")
            .der()
            .to_vec();
        TestPki {
            root_params,
            root_key,
            root_der,
            seed,
        }
    }

    /// Leaf number `n`: the same bytes for the same seed and `n`.
    pub fn leaf(&self, n: u64) -> Vec<u8> {
        let mut params =
            CertificateParams::new(vec![format!("host-{n}.sim.example")]).expect("a DNS name");
        params.serial_number = Some(SerialNumber::from(1_000 + n));
        let key = ed25519_key(self.seed, &format!("ct-leaf-{n}"));
        let issuer = Issuer::from_params(&self.root_params, &self.root_key);
        params
            .signed_by(&key, &issuer)
            .expect("the leaf signs")
            .der()
            .to_vec()
    }
}

/// One submission as its client saw it.
#[derive(Clone, Debug, Serialize)]
pub struct CtSubmission {
    /// Which client.
    pub client: u32,
    /// Which node it asked.
    pub node: u64,
    /// Which test leaf.
    pub leaf: u64,
    /// Simulated ms when it asked.
    pub invoked_ms: u64,
    /// Simulated ms when the answer came (or the call gave up).
    pub returned_ms: u64,
    /// The SCT's timestamp, when it got one.
    pub sct_timestamp_ms: Option<u64>,
    /// The leaf hash the entry has in the tree, when it got an SCT.
    #[serde(skip)]
    pub leaf_hash: Option<Hash>,
    /// Why it got no SCT.
    pub error: Option<String>,
}

/// What the CT clients saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CtHistory {
    /// Every submission.
    pub submissions: Vec<CtSubmission>,
    /// What clients found wrong (an SCT or STH that does not verify, a proof that fails).
    pub violations: Vec<String>,
    /// STHs the auditors fetched.
    pub sths_fetched: u64,
    /// Consistency proofs the auditors verified.
    pub consistency_checked: u64,
    /// Inclusion proofs the auditors verified.
    pub inclusion_checked: u64,
}

#[derive(Clone, Debug, Default)]
struct Shared(Arc<Mutex<CtHistory>>);

impl Shared {
    fn with<T>(&self, change: impl FnOnce(&mut CtHistory) -> T) -> T {
        change(&mut self.0.lock().expect("CT history"))
    }
}

/// A running CT workload.
#[derive(Debug)]
pub struct RunningCt {
    stop: watch::Sender<bool>,
    tasks: Vec<madsim::task::JoinHandle<()>>,
    shared: Shared,
}

impl RunningCt {
    /// Stops the clients and returns what they saw.
    pub async fn stop(self) -> CtHistory {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.shared.with(|history| history.clone())
    }
}

struct Context {
    nodes: u64,
    pki: Arc<TestPki>,
    verifier: LogVerifier,
    timeout: Duration,
    started: tokio::time::Instant,
    stopped: watch::Receiver<bool>,
    shared: Shared,
    channels: BTreeMap<u64, LogClient<Channel>>,
}

impl Context {
    async fn client(&mut self, node: u64) -> Option<LogClient<Channel>> {
        if let Some(client) = self.channels.get(&node) {
            return Some(client.clone());
        }
        let channel = Endpoint::from_shared(format!("http://{}", endpoint(node)))
            .expect("a valid endpoint")
            .connect_timeout(Duration::from_millis(500))
            .timeout(self.timeout)
            .connect()
            .await
            .ok()?;
        let client = LogClient::new(channel);
        self.channels.insert(node, client.clone());
        Some(client)
    }

    fn forget(&mut self, node: u64) {
        self.channels.remove(&node);
    }

    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    fn violation(&self, what: String) {
        tracing::error!(violation = %what, "CT client saw a violation");
        self.shared.with(|history| history.violations.push(what));
    }
}

/// Starts submitters and auditors on their own machines.
pub fn start(
    workload: &CtWorkload,
    nodes: u64,
    seed: u64,
    pki: Arc<TestPki>,
    verifier: &LogVerifier,
    started: tokio::time::Instant,
) -> RunningCt {
    let handle = Handle::current();
    let shared = Shared::default();
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    for index in 0..workload.submitters + workload.auditors {
        let machine = handle
            .create_node()
            .name(format!("ct-client-{index}"))
            .ip(ct_client_ip(index))
            .build();
        let context = Context {
            nodes,
            pki: Arc::clone(&pki),
            verifier: verifier.clone(),
            timeout: workload.attempt_timeout,
            started,
            stopped: stopped.clone(),
            shared: shared.clone(),
            channels: BTreeMap::new(),
        };
        let rng = SeedRng::new(seed, 300 + u64::from(index));
        if index < workload.submitters {
            tasks.push(machine.spawn(submit(index, context, rng)));
        } else {
            tasks.push(machine.spawn(audit(context, rng)));
        }
    }
    RunningCt {
        stop,
        tasks,
        shared,
    }
}

async fn submit(index: u32, mut context: Context, mut rng: SeedRng) {
    let mut next_leaf = u64::from(index) * 1_000_000;
    let mut logged: Vec<u64> = Vec::new();
    while !context.stopping() {
        // Mostly new certificates; sometimes one already logged (it must get its SCT back).
        let leaf = match logged.len() {
            0 => None,
            count if rng.between(0, 9) == 0 => {
                let last = u64::try_from(count - 1).unwrap_or(0);
                Some(logged[usize::try_from(rng.between(0, last)).unwrap_or(0)])
            }
            _ => None,
        }
        .unwrap_or_else(|| {
            next_leaf += 1;
            next_leaf
        });
        let der = context.pki.leaf(leaf);
        let node = rng.between(1, context.nodes);
        let invoked_ms = elapsed_ms(context.started);
        let mut submission = CtSubmission {
            client: index,
            node,
            leaf,
            invoked_ms,
            returned_ms: invoked_ms,
            sct_timestamp_ms: None,
            leaf_hash: None,
            error: None,
        };
        let reply = match context.client(node).await {
            Some(mut client) => client
                .add_chain(v1::AddChainRequest {
                    chain: vec![der.clone()],
                    precertificate: false,
                })
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| status.message().to_owned()),
            None => Err("cannot connect".to_owned()),
        };
        submission.returned_ms = elapsed_ms(context.started);
        match reply {
            Ok(reply) => {
                let entry = LogEntry::X509 { certificate: der };
                match SignedCertificateTimestamp::decode(&reply.sct) {
                    Ok(sct) => {
                        if let Err(error) = context.verifier.verify_sct(&sct, &entry) {
                            context.violation(format!(
                                "node {node} returned an SCT for leaf {leaf} that does not verify: {error}"
                            ));
                        }
                        submission.sct_timestamp_ms = Some(sct.timestamp_ms);
                        submission.leaf_hash = leaf_input(sct.timestamp_ms, &entry, &[])
                            .ok()
                            .map(|input| leaf_hash(&input));
                        logged.push(leaf);
                    }
                    Err(error) => context.violation(format!(
                        "node {node} returned an SCT that does not decode: {error}"
                    )),
                }
            }
            Err(message) => {
                context.forget(node);
                submission.error = Some(message);
            }
        }
        context
            .shared
            .with(|history| history.submissions.push(submission));
        let pause = rng.between(20, 120);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

fn proto_sth(sth: &v1::SignedTreeHead) -> Option<SignedTreeHead> {
    Some(SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        sha256_root_hash: Hash::try_from(sth.sha256_root_hash.as_slice()).ok()?,
        tree_head_signature: DigitallySigned::decode(&sth.tree_head_signature).ok()?,
    })
}

fn hashes(list: &[Vec<u8>]) -> Option<Vec<Hash>> {
    list.iter()
        .map(|hash| Hash::try_from(hash.as_slice()).ok())
        .collect()
}

/// An auditor: fetches STHs from random nodes, checks each signature, checks consistency with
/// the largest tree it saw before, and checks the inclusion of a random entry.
async fn audit(mut context: Context, mut rng: SeedRng) {
    let mut largest: Option<SignedTreeHead> = None;
    while !context.stopping() {
        let pause = rng.between(50, 250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let node = rng.between(1, context.nodes);
        let Some(mut client) = context.client(node).await else {
            continue;
        };
        let Ok(reply) = client.get_sth(v1::GetSthRequest {}).await else {
            context.forget(node);
            continue;
        };
        let Some(sth) = proto_sth(reply.get_ref()) else {
            context.violation(format!("node {node} served an STH that does not decode"));
            continue;
        };
        context.shared.with(|history| history.sths_fetched += 1);
        if let Err(error) = context.verifier.verify_sth(&sth) {
            context.violation(format!(
                "node {node} served an STH of size {} that does not verify: {error}",
                sth.tree_size
            ));
            continue;
        }
        if let Some(old) = &largest {
            if sth.tree_size == old.tree_size && sth.sha256_root_hash != old.sha256_root_hash {
                context.violation(format!(
                    "two STHs of size {} with different roots",
                    sth.tree_size
                ));
            } else if sth.tree_size > old.tree_size && old.tree_size > 0 {
                let request = v1::GetConsistencyRequest {
                    first: old.tree_size,
                    second: sth.tree_size,
                };
                if let Ok(reply) = client.get_consistency(request).await {
                    match hashes(&reply.get_ref().consistency) {
                        Some(proof) => match verify_consistency(
                            old.tree_size,
                            sth.tree_size,
                            &old.sha256_root_hash,
                            &sth.sha256_root_hash,
                            &proof,
                        ) {
                            Ok(()) => context
                                .shared
                                .with(|history| history.consistency_checked += 1),
                            Err(error) => context.violation(format!(
                                "node {node}: the STH of size {} is not consistent with the one of size {}: {error}",
                                sth.tree_size, old.tree_size
                            )),
                        },
                        None => context.violation(format!(
                            "node {node} sent a consistency proof with malformed hashes"
                        )),
                    }
                }
            }
        }
        if sth.tree_size > 0 {
            check_inclusion(&mut context, &mut client, node, &sth, &mut rng).await;
        }
        if largest
            .as_ref()
            .is_none_or(|old| sth.tree_size > old.tree_size)
        {
            largest = Some(sth);
        }
    }
}

/// Fetches a random entry of `sth`'s tree and checks its inclusion proof.
async fn check_inclusion(
    context: &mut Context,
    client: &mut LogClient<Channel>,
    node: u64,
    sth: &SignedTreeHead,
    rng: &mut SeedRng,
) {
    let index = rng.between(0, sth.tree_size - 1);
    let request = v1::GetEntriesRequest {
        start: index,
        end: index,
    };
    let Ok(reply) = client.get_entries(request).await else {
        return;
    };
    let Some(entry) = reply.into_inner().entries.into_iter().next() else {
        context.violation(format!(
            "node {node} returned no entry {index} of a tree of {}",
            sth.tree_size
        ));
        return;
    };
    let hash = leaf_hash(&entry.leaf_input);
    let request = v1::GetProofByHashRequest {
        leaf_hash: hash.to_vec(),
        tree_size: sth.tree_size,
    };
    let Ok(reply) = client.get_proof_by_hash(request).await else {
        return;
    };
    let reply = reply.into_inner();
    let Some(path) = hashes(&reply.audit_path) else {
        context.violation(format!(
            "node {node} sent an audit path with malformed hashes"
        ));
        return;
    };
    match verify_inclusion(
        &hash,
        reply.leaf_index,
        sth.tree_size,
        &path,
        &sth.sha256_root_hash,
    ) {
        Ok(()) => context
            .shared
            .with(|history| history.inclusion_checked += 1),
        Err(error) => context.violation(format!(
            "node {node}: entry {index} is not included in the tree of {}: {error}",
            sth.tree_size
        )),
    }
}
