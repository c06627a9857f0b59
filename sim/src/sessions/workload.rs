//! The sessions workload: clients that create CA issuance sessions and serve their HTTP-01
//! challenges, an external worker that tests challenges through the gRPC worker API and
//! sometimes dies mid-step, and what stands outside the cluster — the HTTP-01 probe the nodes'
//! daemons test with and the asynchronous upstream CA they order from.
//!
//! The simulation has no HTTP, so an HTTP-01 fetch is one request and one answer over madsim's
//! simulated network ([`madsim::net::Endpoint`]), which partitions and loss cut like any other
//! traffic: the client machine named by the challenge's name answers with the key
//! authorization if it serves that token, and the answer is judged by
//! [`certus_ca::http01::judge`], the production tester's rule. The upstream CA is an in-process
//! object shared by the nodes (so network faults do not reach it); it answers pending, rate
//! limited and unavailable at random, dedupes orders by idempotency key as a real CA does, and
//! records every order, so the checkers can see a session ordered or issued twice.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_ca::csr::CheckedCsr;
use certus_ca::http01::{TestOutcome, challenge_url, judge};
use certus_ca::issuer::{CaIdentity, LEAF_VALIDITY_DEFAULT, SerialNumber};
use certus_ca::poller::{Answer, RetryAfter, Step};
use certus_ca::upstream::{IssuedChain, OrderId, OrderRequest, Submitted};
use certus_node::ordered_watch as watch;
use certus_node::roles::session_daemons::{BoxFuture, ChallengeTester, UpstreamConnector};
use certus_proto::v1;
use certus_proto::v1::sessions_client::SessionsClient;
use madsim::net::Endpoint as NetEndpoint;
use madsim::runtime::Handle;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use super::checkers::{
    ClaimRecord, CreatedSession, LateCompletion, SeenCertificate, UpstreamOrder, UpstreamSubmission,
};
use crate::cluster::{elapsed_ms, endpoint};
use crate::ct::workload::ed25519_key;
use crate::http01::{
    HTTP01_ANSWER, HTTP01_PORT, HTTP01_REQUEST, SESSIONS_DOMAIN, resolve, sessions_client_ip,
};
use crate::schedule::SeedRng;

/// How long the probe waits for an answer: long enough for a slow answer, so that testing a
/// session's names can take longer than a daemon's claim lasts unless it extends it.
const HTTP01_TIMEOUT: Duration = Duration::from_millis(3_000);
/// How late a slow HTTP-01 answer comes, in ms (a busy web server).
const SLOW_ANSWER_MS: std::ops::RangeInclusive<u64> = 1_200..=2_400;

/// The shape of the sessions workload.
#[derive(Clone, Debug)]
pub struct SessionWorkload {
    /// Clients creating sessions.
    pub clients: u32,
    /// External workers testing challenges beside the nodes' daemons.
    pub workers: u32,
    /// Sessions a client has in flight at most.
    pub in_flight: usize,
    /// Per mille of sessions whose client serves none of its challenges (they must end killed).
    pub unserved_per_mille: u64,
    /// Per mille of an external worker's claims it abandons mid-step, as if it crashed.
    pub abandon_per_mille: u64,
    /// Per mille of an external worker's claims it completes late on purpose: after its claim
    /// expired and a read showed a newer one (the completion must be refused). Counted among
    /// claims whose test failed, which stay in testchallenge to be claimed again; a tenth of
    /// this rate for the others.
    pub late_per_mille: u64,
    /// How long a client waits for one answer.
    pub attempt_timeout: Duration,
    /// The visibility external workers claim with.
    pub worker_visibility_ms: u64,
    /// Per mille of HTTP-01 answers a client sends late ([`SLOW_ANSWER_MS`]).
    pub slow_answer_per_mille: u64,
}

impl Default for SessionWorkload {
    fn default() -> Self {
        SessionWorkload {
            clients: 3,
            workers: 1,
            in_flight: 4,
            unserved_per_mille: 100,
            abandon_per_mille: 150,
            late_per_mille: 800,
            attempt_timeout: Duration::from_millis(1_500),
            worker_visibility_ms: 2_000,
            slow_answer_per_mille: 200,
        }
    }
}

/// The simulated address of external worker `index`.
fn worker_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated workers");
    IpAddr::V4(Ipv4Addr::new(10, 0, 4, last))
}

/// Everything the sessions part of a run recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SessionHistory {
    /// Sessions whose creation a client saw acknowledged.
    pub created: Vec<CreatedSession>,
    /// Certificates clients fetched.
    pub seen: Vec<SeenCertificate>,
    /// Every claim a worker took: the nodes' daemons (through the node's work observer) and
    /// the external workers.
    pub claims: Vec<ClaimRecord>,
    /// Completions the external worker sent late on purpose, and their answers.
    pub late_completions: Vec<LateCompletion>,
    /// What a client or worker found wrong.
    pub violations: Vec<String>,
    /// Create calls made, answered or not.
    pub create_calls: u64,
    /// HTTP-01 fetches answered by clients.
    pub fetches_served: u64,
}

/// The shared record of a run's sessions.
#[derive(Clone, Debug, Default)]
pub struct Shared(Arc<Mutex<SessionHistory>>);

impl Shared {
    /// Changes the record.
    pub fn with<T>(&self, change: impl FnOnce(&mut SessionHistory) -> T) -> T {
        change(&mut self.0.lock().expect("sessions history"))
    }
}

/// The HTTP-01 probe the nodes' daemons and the external workers test with.
#[derive(Debug, Default)]
pub struct SimTester;

impl SimTester {
    async fn fetch(name: &str, token: &str) -> Result<(u16, Vec<u8>), String> {
        let address = resolve(name).ok_or_else(|| format!("{name}: no such host"))?;
        let socket = NetEndpoint::bind("0.0.0.0:0")
            .await
            .map_err(|error| format!("bind: {error}"))?;
        let request = format!("{name}\n{token}");
        socket
            .send_to(address, HTTP01_REQUEST, request.as_bytes())
            .await
            .map_err(|error| format!("{address}: {error}"))?;
        let mut buffer = vec![0u8; 4096];
        let received =
            tokio::time::timeout(HTTP01_TIMEOUT, socket.recv_from(HTTP01_ANSWER, &mut buffer))
                .await
                .map_err(|_| format!("{address}: timed out"))?
                .map_err(|error| format!("{address}: {error}"))?;
        buffer.truncate(received.0);
        let status = if buffer.first() == Some(&b'+') {
            200
        } else {
            404
        };
        Ok((status, buffer.get(1..).unwrap_or_default().to_vec()))
    }
}

impl ChallengeTester for SimTester {
    fn test<'a>(
        &'a self,
        name: &'a str,
        token: &'a str,
        key_authorization: &'a str,
    ) -> BoxFuture<'a, TestOutcome> {
        Box::pin(async move {
            let url = challenge_url(name, token);
            match SimTester::fetch(name, token).await {
                Ok((status, body)) => judge(&url, status, None, &body, key_authorization),
                Err(reason) => TestOutcome::NotSatisfied {
                    reason: format!("{url}: {reason}"),
                },
            }
        })
    }
}

/// The run's CA: an Ed25519 key from the seed (Ed25519 signs deterministically, so a replay
/// issues identical certificates) with a self-signed CA certificate.
pub fn sim_ca(seed: u64) -> CaIdentity {
    let key = ed25519_key(seed, "sessions-ca");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "Certus Simulation CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    let certificate = params.self_signed(&key).expect("the CA signs");
    CaIdentity::from_pem(&key.serialize_pem(), &certificate.pem()).expect("the CA loads")
}

/// An asynchronous upstream CA outside the cluster (see the module documentation).
#[derive(Debug)]
pub struct SimUpstream {
    ca: CaIdentity,
    started: tokio::time::Instant,
    state: Mutex<UpstreamState>,
}

#[derive(Debug)]
struct UpstreamState {
    rng: SeedRng,
    orders: BTreeMap<String, OpenOrder>,
    by_key: BTreeMap<String, String>,
    /// Every submission any node made, answered or not, in the order they came.
    submissions: Vec<UpstreamSubmission>,
}

#[derive(Debug)]
struct OpenOrder {
    record: UpstreamOrder,
    polls_left: u64,
    chain: Option<IssuedChain>,
}

impl SimUpstream {
    /// The upstream CA of the run of `seed`.
    pub fn new(seed: u64, started: tokio::time::Instant) -> SimUpstream {
        SimUpstream {
            ca: sim_ca(seed),
            started,
            state: Mutex::new(UpstreamState {
                rng: SeedRng::new(seed, 700),
                orders: BTreeMap::new(),
                by_key: BTreeMap::new(),
                submissions: Vec::new(),
            }),
        }
    }

    /// Every order it took, in order id order.
    pub fn orders(&self) -> Vec<UpstreamOrder> {
        let state = self.state.lock().expect("upstream");
        state
            .orders
            .values()
            .map(|order| order.record.clone())
            .collect()
    }

    /// Every submission any node made, in the order they came.
    pub fn submissions(&self) -> Vec<UpstreamSubmission> {
        self.state.lock().expect("upstream").submissions.clone()
    }

    /// The CA's certificate (PEM), which every issued chain ends in.
    pub fn ca_pem(&self) -> String {
        self.ca.certificate_pem().to_owned()
    }

    fn retry_after(rng: &mut SeedRng) -> Option<RetryAfter> {
        rng.chance(300)
            .then(|| RetryAfter::parse("1").expect("a delay in seconds"))
    }

    fn take_order(&self, request: &OrderRequest) -> Answer<Submitted> {
        let mut state = self.state.lock().expect("upstream");
        if state.rng.chance(100) {
            return Answer {
                step: Submitted::Transient("HTTP 503 from the upstream CA".to_owned()),
                retry_after: SimUpstream::retry_after(&mut state.rng),
            };
        }
        if let Some(id) = state.by_key.get(request.idempotency_key()) {
            return Answer::new(Submitted::Accepted(
                OrderId::new(id).expect("a valid order id"),
            ));
        }
        if let Err(error) = CheckedCsr::from_der(request.csr_der()) {
            return Answer::new(Submitted::Refused(format!("bad CSR: {error}")));
        }
        let id = format!("o-{}", state.orders.len() + 1);
        // A quarter of the orders outlast a claim's polling (about four polls), so the next
        // claim must resume them from the session's note.
        let polls_left = if state.rng.chance(250) {
            state.rng.between(4, 8)
        } else {
            state.rng.between(0, 3)
        };
        state
            .by_key
            .insert(request.idempotency_key().to_owned(), id.clone());
        state.orders.insert(
            id.clone(),
            OpenOrder {
                record: UpstreamOrder {
                    id: id.clone(),
                    key: request.idempotency_key().to_owned(),
                    csr: request.csr_der().to_vec(),
                    created_ms: elapsed_ms(self.started),
                    issued: Vec::new(),
                },
                polls_left,
                chain: None,
            },
        );
        tracing::info!(order = %id, key = request.idempotency_key(), "upstream CA took an order");
        Answer::new(Submitted::Accepted(
            OrderId::new(&id).expect("a valid order id"),
        ))
    }

    fn read_order(&self, id: &OrderId) -> Answer<Step<IssuedChain>> {
        let mut guard = self.state.lock().expect("upstream");
        let state = &mut *guard;
        if state.rng.chance(100) {
            return Answer {
                step: Step::Transient("HTTP 429 from the upstream CA".to_owned()),
                retry_after: SimUpstream::retry_after(&mut state.rng),
            };
        }
        let Some(order) = state.orders.get_mut(id.as_str()) else {
            return Answer::new(Step::Failed(format!("no order {id}")));
        };
        if order.polls_left > 0 {
            order.polls_left -= 1;
            return Answer {
                step: Step::Pending,
                retry_after: SimUpstream::retry_after(&mut state.rng),
            };
        }
        if order.chain.is_none() {
            let issued = CheckedCsr::from_der(&order.record.csr)
                .map_err(|error| error.to_string())
                .and_then(|csr| {
                    let mut serial = [0u8; 16];
                    serial[..8].copy_from_slice(&state.rng.next_u64().to_be_bytes());
                    // Not before the CA's own validity, whatever the simulated date.
                    let not_before_ms = 1_700_000_000_000;
                    self.ca
                        .issue(
                            &csr,
                            SerialNumber::from_random_bytes(serial),
                            not_before_ms,
                            LEAF_VALIDITY_DEFAULT,
                        )
                        .map_err(|error| error.to_string())
                })
                .and_then(|issued| IssuedChain::from_pem(&issued.chain_pem));
            match issued {
                Ok(chain) => {
                    order.record.issued.push(chain.pem().as_bytes().to_vec());
                    order.chain = Some(chain);
                }
                Err(reason) => return Answer::new(Step::Failed(reason)),
            }
        }
        Answer::new(Step::Ready(order.chain.clone().expect("issued above")))
    }
}

/// What answering takes: the CA is across a network, but not one the faults cut.
const UPSTREAM_LATENCY: Duration = Duration::from_millis(20);

/// The upstream CA as one node's daemons reach it: it records who submitted what, and when
/// (before the network's latency, so the submission falls within the claim that made it).
#[derive(Debug)]
pub struct NodeUpstream {
    /// The node whose daemons call.
    pub node: u64,
    /// The CA.
    pub upstream: Arc<SimUpstream>,
}

impl UpstreamConnector for NodeUpstream {
    fn submit<'a>(&'a self, request: &'a OrderRequest) -> BoxFuture<'a, Answer<Submitted>> {
        Box::pin(async move {
            let upstream = &self.upstream;
            upstream
                .state
                .lock()
                .expect("upstream")
                .submissions
                .push(UpstreamSubmission {
                    node: self.node,
                    key: request.idempotency_key().to_owned(),
                    at_ms: elapsed_ms(upstream.started),
                });
            tokio::time::sleep(UPSTREAM_LATENCY).await;
            upstream.take_order(request)
        })
    }

    fn status<'a>(&'a self, id: &'a OrderId) -> BoxFuture<'a, Answer<Step<IssuedChain>>> {
        Box::pin(async move {
            tokio::time::sleep(UPSTREAM_LATENCY).await;
            self.upstream.read_order(id)
        })
    }
}

/// A running sessions workload.
#[derive(Debug)]
pub struct RunningSessions {
    stop: watch::Sender<bool>,
    tasks: Vec<madsim::task::JoinHandle<()>>,
}

impl RunningSessions {
    /// Stops the clients and workers.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// What a client serves: token → (name, key authorization).
type Served = Arc<Mutex<BTreeMap<String, (String, String)>>>;

#[derive(Clone)]
pub(super) struct Context {
    pub(super) nodes: u64,
    /// How long a client waits for one answer.
    pub(super) timeout: Duration,
    started: tokio::time::Instant,
    pub(super) stopped: watch::Receiver<bool>,
    /// Clients create sessions until this simulated ms.
    create_until_ms: Arc<AtomicU64>,
    pub(super) shared: Shared,
    pub(super) seed: u64,
}

impl Context {
    pub(super) fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    pub(super) fn now_ms(&self) -> u64 {
        elapsed_ms(self.started)
    }

    pub(super) async fn connect(&self, node: u64) -> Option<SessionsClient<Channel>> {
        let channel = Endpoint::from_shared(format!("http://{}", endpoint(node)))
            .expect("a valid endpoint")
            .connect_timeout(Duration::from_millis(500))
            .timeout(self.timeout)
            .connect()
            .await
            .ok()?;
        Some(SessionsClient::new(channel))
    }

    pub(super) fn violation(&self, what: String) {
        tracing::error!(violation = %what, "sessions client saw a violation");
        self.shared.with(|history| history.violations.push(what));
    }
}

/// Starts the clients and external workers on their own machines. Clients create sessions
/// until simulated ms `create_until_ms`; everything stops when `stop` is called.
pub fn start(
    workload: &SessionWorkload,
    nodes: u64,
    seed: u64,
    shared: Shared,
    create_until_ms: Arc<AtomicU64>,
    started: tokio::time::Instant,
) -> RunningSessions {
    let handle = Handle::current();
    let (stop, stopped) = watch::channel(false);
    let context = Context {
        nodes,
        timeout: workload.attempt_timeout,
        started,
        stopped,
        create_until_ms,
        shared,
        seed,
    };
    let mut tasks = Vec::new();
    for index in 0..workload.clients {
        let machine = handle
            .create_node()
            .name(format!("session-client-{index}"))
            .ip(sessions_client_ip(index))
            .build();
        let served: Served = Arc::default();
        tasks.push(machine.spawn(serve_challenges(
            context.clone(),
            Arc::clone(&served),
            index,
            workload.slow_answer_per_mille,
        )));
        tasks.push(machine.spawn(create_sessions(
            index,
            workload.clone(),
            context.clone(),
            served,
        )));
    }
    for index in 0..workload.workers {
        let machine = handle
            .create_node()
            .name(format!("session-worker-{index}"))
            .ip(worker_ip(index))
            .build();
        tasks.push(machine.spawn(super::external_worker::work_challenges(
            index,
            workload.clone(),
            context.clone(),
        )));
    }
    RunningSessions { stop, tasks }
}

/// Answers HTTP-01 fetches for the tokens this client serves; `slow_per_mille` of the answers
/// for served tokens come late.
async fn serve_challenges(context: Context, served: Served, index: u32, slow_per_mille: u64) {
    let Ok(socket) = NetEndpoint::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        HTTP01_PORT,
    ))
    .await
    else {
        context.violation("a client could not listen for HTTP-01 fetches".to_owned());
        return;
    };
    let socket = Arc::new(socket);
    let mut rng = SeedRng::new(context.seed, 900 + u64::from(index));
    let mut stopped = context.stopped.clone();
    let mut buffer = vec![0u8; 4096];
    loop {
        let received = tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            received = socket.recv_from(HTTP01_REQUEST, &mut buffer) => received,
            _ = stopped.changed() => return,
        };
        let Ok((length, from)) = received else {
            continue;
        };
        let request = String::from_utf8_lossy(&buffer[..length]).into_owned();
        let (name, token) = request.split_once('\n').unwrap_or(("", ""));
        let answer = match served.lock().expect("served").get(token) {
            Some((for_name, key_authorization)) if for_name == name => {
                format!("+{key_authorization}")
            }
            _ => "-not found".to_owned(),
        };
        if answer.starts_with('+') {
            context.shared.with(|history| history.fetches_served += 1);
            if rng.chance(slow_per_mille) {
                let late = Duration::from_millis(
                    rng.between(*SLOW_ANSWER_MS.start(), *SLOW_ANSWER_MS.end()),
                );
                let socket = Arc::clone(&socket);
                madsim::task::spawn(async move {
                    tokio::time::sleep(late).await;
                    let _ = socket.send_to(from, HTTP01_ANSWER, answer.as_bytes()).await;
                });
                continue;
            }
        }
        let _ = socket.send_to(from, HTTP01_ANSWER, answer.as_bytes()).await;
    }
}

/// Creates sessions while the run allows, up to `in_flight` at once.
async fn create_sessions(index: u32, workload: SessionWorkload, context: Context, served: Served) {
    let mut rng = SeedRng::new(context.seed, 500 + u64::from(index));
    let mut running: Vec<madsim::task::JoinHandle<()>> = Vec::new();
    let mut number = 0u64;
    while !context.stopping() && context.now_ms() < context.create_until_ms.load(Ordering::SeqCst) {
        running.retain(|task| !task.is_finished());
        if running.len() < workload.in_flight {
            number += 1;
            let serves = !rng.chance(workload.unserved_per_mille);
            let names = (0..rng.between(1, 2))
                .map(|name| format!("s{number}x{name}.c{index}.{SESSIONS_DOMAIN}"))
                .collect();
            let session_rng = SeedRng::new(context.seed, rng.next_u64());
            running.push(madsim::task::spawn(one_session(
                index,
                number,
                names,
                serves,
                context.clone(),
                Arc::clone(&served),
                session_rng,
            )));
        }
        tokio::time::sleep(Duration::from_millis(rng.between(150, 600))).await;
    }
    for task in running {
        let _ = task.await;
    }
}

/// One session from creation to its end: create (retrying under one request key until
/// answered), serve its challenges, fetch the certificate, acknowledge it (mostly).
async fn one_session(
    client: u32,
    number: u64,
    names: Vec<String>,
    serves: bool,
    context: Context,
    served: Served,
    mut rng: SeedRng,
) {
    let key = client_key(context.seed, client, number);
    let Ok(params) = CertificateParams::new(names.clone()) else {
        context.violation(format!(
            "client {client}: names {names:?} do not make a CSR"
        ));
        return;
    };
    let csr = match params.serialize_request(&key) {
        Ok(csr) => csr.der().to_vec(),
        Err(error) => {
            context.violation(format!("client {client}: CSR: {error}"));
            return;
        }
    };
    let request = v1::CreateSessionRequest {
        csr,
        names: names.clone(),
        request_key: format!("sim-c{client}-n{number}"),
    };
    let mut id = None;
    while id.is_none() && !context.stopping() {
        context.shared.with(|history| history.create_calls += 1);
        let node = rng.between(1, context.nodes);
        if let Some(mut sessions) = context.connect(node).await {
            match sessions.create(request.clone()).await {
                Ok(reply) => id = Some(reply.into_inner().id),
                Err(status) if status.code() == tonic::Code::InvalidArgument => {
                    context.violation(format!(
                        "client {client}: node {node} refused a valid session: {}",
                        status.message()
                    ));
                    return;
                }
                Err(_) => {}
            }
        }
        if id.is_none() {
            tokio::time::sleep(Duration::from_millis(rng.between(100, 400))).await;
        }
    }
    let Some(id) = id else {
        return;
    };
    context.shared.with(|history| {
        history.created.push(CreatedSession {
            client,
            id,
            names: names.clone(),
            served: serves,
            acknowledged_ms: context.now_ms(),
        });
    });
    let mut seen: Option<Vec<u8>> = None;
    // A node that failed a read is not asked next time, as a real client fails over: one that
    // cannot serve reads for long (cut off from the leader) would otherwise keep a client from
    // learning its challenges whenever the draw keeps landing on it (sessions seed 986).
    let mut failed: Option<u64> = None;
    while !context.stopping() {
        tokio::time::sleep(Duration::from_millis(rng.between(150, 400))).await;
        let mut node = rng.between(1, context.nodes);
        if failed == Some(node) {
            node = node % context.nodes + 1;
        }
        failed = Some(node);
        let Some(mut sessions) = context.connect(node).await else {
            continue;
        };
        let Ok(session) = sessions
            .get(v1::GetSessionRequest { id })
            .await
            .map(tonic::Response::into_inner)
        else {
            continue;
        };
        failed = None;
        if serves {
            let mut served = served.lock().expect("served");
            for challenge in &session.challenges {
                served.insert(
                    challenge.token.clone(),
                    (challenge.name.clone(), challenge.key_authorization.clone()),
                );
            }
        }
        let stage = v1::Stage::try_from(session.stage).unwrap_or(v1::Stage::Unspecified);
        if !session.live || stage == v1::Stage::Failed {
            return;
        }
        if stage != v1::Stage::Done {
            continue;
        }
        let cert = session.certificate.into_bytes();
        match &seen {
            Some(earlier) if *earlier != cert => context.violation(format!(
                "session {id}: node {node} served a different certificate than before"
            )),
            Some(_) => {}
            None => {
                context.shared.with(|history| {
                    history.seen.push(SeenCertificate {
                        session: id,
                        cert: cert.clone(),
                        seen_ms: context.now_ms(),
                        acknowledged_ms: None,
                    });
                });
                seen = Some(cert);
            }
        }
        // Most clients acknowledge; the rest leave the certificate for the retention period.
        if !rng.chance(700) {
            return;
        }
        match sessions
            .acknowledge(v1::AcknowledgeSessionRequest { id })
            .await
        {
            Ok(_) => {
                let now_ms = context.now_ms();
                context.shared.with(|history| {
                    if let Some(entry) = history.seen.iter_mut().find(|seen| seen.session == id) {
                        entry.acknowledged_ms = Some(now_ms);
                    }
                });
                return;
            }
            Err(_) => continue,
        }
    }
}

/// The Ed25519 key of client `client`'s session `number`: from the seed, so replays send the
/// same CSRs.
fn client_key(seed: u64, client: u32, number: u64) -> KeyPair {
    ed25519_key(seed, &format!("session-{client}-{number}"))
}
