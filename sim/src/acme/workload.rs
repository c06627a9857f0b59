//! The ACME workload: clients on their own machines (10.0.9.C) that register an account, place
//! orders for fresh names, serve the orders' HTTP-01 key authorizations over the simulated
//! network (the leader's validator fetches them with the sessions' `SimTester`, which resolves
//! `*.cC.acme.sim` to client C), say their challenges are ready, poll, finalize with a CSR, poll
//! until the certificate is there, and now and then revoke it.
//!
//! The simulation has no HTTP, so a client does what the node's ACME resources would do for it:
//! it takes a nonce from the node it talks to (through `Node::acme`, the node's own nonce
//! store), has the node use it up, and then writes the ACME command through that node
//! (`SimCluster::write`; a follower forwards to the leader) or reads the order
//! (`SimCluster::read`, linearizable). Every answer carries a fresh nonce (`Replay-Nonce`),
//! which the client keeps for its next request to that node — and which a restart of the node
//! makes stale. Now and then a client replays a nonce it used, uses another node's, or uses one
//! it set aside a while ago, and records what the node said.
//!
//! Each order's client serves its challenges one way, drawn from the seed: before it says it is
//! ready; a moment after (the validator fetches up to three times a second apart, so a late
//! one may fail); never; or with another key's thumbprint. A write whose outcome is unknown may
//! have been applied: the client tries again, and a refusal that only says the first try landed
//! (a finalize refused because the order is processing) counts as the success it was.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::acme::{
    AccountKey, AcmeCommand, AcmeError, AcmeReply, Order, OrderId, OrderStatus,
};
use certus_core::{ChallengeToken, Command, DnsName, Response};
use certus_node::ServiceError;
use certus_node::acme::AcmeServer;
use certus_node::ordered_watch as watch;
use madsim::net::Endpoint as NetEndpoint;
use madsim::runtime::Handle;
use rcgen::CertificateParams;
use serde::Serialize;

use super::checkers::{
    Finalize, FinalizeRecord, IssuedNonce, NonceUse, Outcome, PlacedOrder, RegisteredAccount,
    ServedFetch, Serving, Sighting, UsedNonce,
};
use crate::cluster::{SimCluster, elapsed_ms};
use crate::ct::workload::ed25519_key;
use crate::http01::{
    ACME_DOMAIN as DOMAIN, HTTP01_ANSWER, HTTP01_PORT, HTTP01_REQUEST, acme_client_ip,
};
use crate::limits::ACME_NONCES_REMEMBERED_MAX;
use crate::schedule::SeedRng;

/// How long a client waits for one answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(3_000);

/// The shape of the ACME workload.
#[derive(Clone, Debug)]
pub struct AcmeWorkload {
    /// ACME clients, each with its own account and machine.
    pub clients: u32,
    /// Orders a client has in flight at most.
    pub in_flight: usize,
    /// Per mille of orders whose client says it is ready before it serves.
    pub serve_after_per_mille: u64,
    /// Per mille of orders whose client never serves.
    pub never_serve_per_mille: u64,
    /// Per mille of orders whose client serves another key's thumbprint.
    pub wrong_key_per_mille: u64,
    /// Per mille of orders whose client finalizes at once, before the order can be ready (it
    /// must be refused, unless the validations were that quick).
    pub finalize_early_per_mille: u64,
    /// Per mille of finalized orders whose client sends a second finalize on purpose.
    pub finalize_again_per_mille: u64,
    /// Per mille of issued certificates the client revokes.
    pub revoke_per_mille: u64,
    /// Per mille of requests before which the client first tries a nonce the node must refuse
    /// (or one it set aside).
    pub nonce_trick_per_mille: u64,
    /// Per mille of fresh nonces a client sets aside instead of using next.
    pub set_aside_per_mille: u64,
}

impl Default for AcmeWorkload {
    fn default() -> Self {
        AcmeWorkload {
            clients: 3,
            in_flight: 2,
            serve_after_per_mille: 150,
            never_serve_per_mille: 50,
            wrong_key_per_mille: 50,
            finalize_early_per_mille: 100,
            finalize_again_per_mille: 200,
            revoke_per_mille: 300,
            nonce_trick_per_mille: 150,
            set_aside_per_mille: 100,
        }
    }
}

/// base64url without padding (RFC 4648 §5), as JWK members and thumbprints are written.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            }
        }
    }
    out
}

/// The account key of `purpose` in the run of `seed`: the Ed25519 public key derived from them
/// as an OKP JWK in RFC 7638's canonical form, and its thumbprint (base64url of SHA-256).
pub fn account_key(seed: u64, purpose: &str) -> AccountKey {
    let public = crate::keys::ed25519_public(seed, purpose);
    let jwk = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        base64url(&public)
    );
    let digest = ring::digest::digest(&ring::digest::SHA256, jwk.as_bytes());
    AccountKey {
        thumbprint: base64url(digest.as_ref()),
        jwk,
    }
}

/// The account key of ACME client `index`.
pub fn client_key(seed: u64, index: u32) -> AccountKey {
    account_key(seed, &format!("acme-account-{index}"))
}

/// Everything the ACME part of a run recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AcmeHistory {
    /// Accounts the clients registered.
    pub accounts: Vec<RegisteredAccount>,
    /// Orders the clients placed (and had answered).
    pub placed: Vec<PlacedOrder>,
    /// Finalizes and what became of them.
    pub finalizes: Vec<FinalizeRecord>,
    /// Every HTTP-01 fetch a client answered.
    pub served: Vec<ServedFetch>,
    /// Every version of an order the observer or a client read (not in the report: the
    /// report lists the statuses).
    #[serde(skip)]
    pub sightings: Vec<Sighting>,
    /// Every nonce the nodes issued to the clients.
    pub issued_nonces: Vec<IssuedNonce>,
    /// Every use of a nonce.
    pub used_nonces: Vec<UsedNonce>,
    /// Certificates revoked: (order, serial).
    pub revoked: Vec<(u64, String)>,
    /// What a client found wrong.
    pub violations: Vec<String>,
    /// Writes sent (each try counts).
    pub writes: u64,
    /// Writes whose outcome stayed unknown.
    pub writes_unknown: u64,
    /// Reads of an order that were answered.
    pub reads: u64,
}

/// The shared record of a run's ACME part.
#[derive(Clone, Debug, Default)]
pub struct Shared(Arc<Mutex<AcmeHistory>>);

impl Shared {
    /// Changes the record.
    pub fn with<T>(&self, change: impl FnOnce(&mut AcmeHistory) -> T) -> T {
        change(&mut self.0.lock().expect("ACME history"))
    }
}

/// A running ACME workload.
#[derive(Debug)]
pub struct RunningAcme {
    stop: watch::Sender<bool>,
    tasks: Vec<madsim::task::JoinHandle<()>>,
}

impl RunningAcme {
    /// Stops the clients.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// What a client serves: token → (name, body).
type Served = Arc<Mutex<BTreeMap<String, (String, String)>>>;

#[derive(Clone)]
struct Context {
    cluster: Arc<SimCluster>,
    nodes: u64,
    started: tokio::time::Instant,
    stopped: watch::Receiver<bool>,
    /// Clients place orders until this simulated ms.
    create_until_ms: Arc<AtomicU64>,
    shared: Shared,
    seed: u64,
    workload: AcmeWorkload,
}

impl Context {
    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    fn now_ms(&self) -> u64 {
        elapsed_ms(self.started)
    }

    fn violation(&self, what: String) {
        tracing::error!(violation = %what, "ACME client saw a violation");
        self.shared.with(|history| history.violations.push(what));
    }
}

/// Starts the clients on their own machines. They place orders until simulated ms
/// `create_until_ms`; everything stops when `stop` is called.
pub fn start(
    cluster: Arc<SimCluster>,
    workload: &AcmeWorkload,
    seed: u64,
    shared: Shared,
    create_until_ms: Arc<AtomicU64>,
    started: tokio::time::Instant,
) -> RunningAcme {
    let handle = Handle::current();
    let (stop, stopped) = watch::channel(false);
    let context = Context {
        nodes: cluster.ids().len() as u64,
        cluster,
        started,
        stopped,
        create_until_ms,
        shared,
        seed,
        workload: workload.clone(),
    };
    let mut tasks = Vec::new();
    for index in 0..workload.clients {
        let machine = handle
            .create_node()
            .name(format!("acme-client-{index}"))
            .ip(acme_client_ip(index))
            .build();
        let served: Served = Arc::default();
        tasks.push(machine.spawn(serve_challenges(
            index,
            context.clone(),
            Arc::clone(&served),
        )));
        let client = Arc::new(Client {
            index,
            key: client_key(seed, index),
            wrong_key: account_key(seed, &format!("acme-wrong-{index}")),
            context: context.clone(),
            served,
            nonces: Mutex::default(),
        });
        tasks.push(machine.spawn(run_client(client)));
    }
    RunningAcme { stop, tasks }
}

/// Answers HTTP-01 fetches for the tokens client `index` serves, recording every answer.
async fn serve_challenges(index: u32, context: Context, served: Served) {
    let Ok(socket) = NetEndpoint::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        HTTP01_PORT,
    ))
    .await
    else {
        context.violation(format!(
            "ACME client {index} could not listen for HTTP-01 fetches"
        ));
        return;
    };
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
        let body = match served.lock().expect("served").get(token) {
            Some((for_name, body)) if for_name == name => Some(body.clone()),
            _ => None,
        };
        context.shared.with(|history| {
            history.served.push(ServedFetch {
                client: index,
                name: name.to_owned(),
                token: token.to_owned(),
                served: body.clone(),
                at_ms: context.now_ms(),
            });
        });
        let answer = body.map_or_else(|| "-not found".to_owned(), |body| format!("+{body}"));
        let _ = socket.send_to(from, HTTP01_ANSWER, answer.as_bytes()).await;
    }
}

/// A client's nonces: the one it holds for each node (the last answer's `Replay-Nonce`), the
/// last ones it used (to replay one), and the ones it set aside unused.
#[derive(Debug, Default)]
struct Nonces {
    held: BTreeMap<u64, String>,
    used: Vec<(u64, String)>,
    set_aside: Vec<(u64, String)>,
}

fn remember(list: &mut Vec<(u64, String)>, node: u64, nonce: String) {
    if list.len() >= ACME_NONCES_REMEMBERED_MAX {
        list.remove(0);
    }
    list.push((node, nonce));
}

/// One ACME client: its account key, its HTTP-01 answers and its nonces.
struct Client {
    index: u32,
    key: AccountKey,
    /// Another key, whose thumbprint a client serving the wrong key authorization uses.
    wrong_key: AccountKey,
    context: Context,
    served: Served,
    nonces: Mutex<Nonces>,
}

/// What one try of a write did.
enum Tried {
    /// The state machine answered.
    Answered(Result<AcmeReply, AcmeError>),
    /// It was certainly not applied (no node, no leader).
    NotApplied,
    /// It may have been applied.
    Unknown,
}

/// What an order task needs besides the client: its randomness and the node it should avoid
/// (the last that failed it, as a real client fails over).
struct Lane {
    rng: SeedRng,
    avoid: Option<u64>,
}

impl Lane {
    fn pick(&mut self, nodes: u64) -> u64 {
        let mut node = self.rng.between(1, nodes);
        if self.avoid == Some(node) {
            node = node % nodes + 1;
        }
        node
    }

    /// A position in a list of `len` (> 0) items.
    fn index(&mut self, len: usize) -> usize {
        let last = u64::try_from(len.saturating_sub(1)).unwrap_or(u64::MAX);
        usize::try_from(self.rng.between(0, last)).unwrap_or(0)
    }

    async fn pause(&mut self, low_ms: u64, high_ms: u64) {
        tokio::time::sleep(Duration::from_millis(self.rng.between(low_ms, high_ms))).await;
    }
}

impl Client {
    /// A fresh nonce from `server` (node `node`, its incarnation `incarnation`), recorded.
    fn issue(&self, node: u64, incarnation: u64, server: &AcmeServer) -> String {
        let nonce = server.new_nonce();
        self.context.shared.with(|history| {
            history.issued_nonces.push(IssuedNonce {
                node,
                incarnation,
                nonce: nonce.clone(),
                at_ms: self.context.now_ms(),
            });
        });
        nonce
    }

    /// Has `server` use `nonce`, recorded.
    fn spend(
        &self,
        node: u64,
        incarnation: u64,
        server: &AcmeServer,
        nonce: &str,
        why: NonceUse,
    ) -> bool {
        let accepted = server.use_nonce(nonce);
        self.context.shared.with(|history| {
            history.used_nonces.push(UsedNonce {
                client: self.index,
                node,
                incarnation,
                nonce: nonce.to_owned(),
                why,
                accepted,
                at_ms: self.context.now_ms(),
            });
        });
        accepted
    }

    /// Gets a request's nonce past node `node`, as the node's ACME resources check one before
    /// anything else: false if the node is down (nothing was sent). Now and then a nonce the
    /// node must refuse goes first.
    fn pass_nonce(&self, node: u64, lane: &mut Lane) -> bool {
        let Some((incarnation, server)) = self.context.cluster.acme(node) else {
            return false;
        };
        let mut nonces = self.nonces.lock().expect("nonces");
        if lane.rng.chance(self.context.workload.nonce_trick_per_mille) {
            let trick = match lane.rng.between(0, 2) {
                0 if !nonces.used.is_empty() => {
                    let at = lane.index(nonces.used.len());
                    Some((NonceUse::Replayed, nonces.used[at].1.clone()))
                }
                1 => {
                    let foreign: Vec<&String> = nonces
                        .set_aside
                        .iter()
                        .map(|(other, nonce)| (*other, nonce))
                        .chain(nonces.held.iter().map(|(other, nonce)| (*other, nonce)))
                        .filter(|(other, _)| *other != node)
                        .map(|(_, nonce)| nonce)
                        .collect();
                    (!foreign.is_empty()).then(|| {
                        let at = lane.index(foreign.len());
                        (NonceUse::Foreign, foreign[at].clone())
                    })
                }
                _ => nonces
                    .set_aside
                    .iter()
                    .position(|(other, _)| *other == node)
                    .map(|at| (NonceUse::SetAside, nonces.set_aside.remove(at).1)),
            };
            if let Some((why, nonce)) = trick {
                if self.spend(node, incarnation, &server, &nonce, why) {
                    remember(&mut nonces.used, node, nonce);
                    return true;
                }
                // badNonce carries a fresh nonce.
                let fresh = self.issue(node, incarnation, &server);
                nonces.held.insert(node, fresh);
            }
        }
        for _try in 0..2 {
            let nonce = match nonces.held.remove(&node) {
                Some(nonce) => nonce,
                None => self.issue(node, incarnation, &server),
            };
            let accepted = self.spend(node, incarnation, &server, &nonce, NonceUse::Fresh);
            remember(&mut nonces.used, node, nonce);
            if accepted {
                return true;
            }
            // badNonce (the node restarted since it issued the one held): the refusal carries a
            // fresh nonce, which the next try uses.
            let fresh = self.issue(node, incarnation, &server);
            nonces.held.insert(node, fresh);
        }
        false
    }

    /// The fresh nonce an answer from node `node` carries, kept for the next request there (or,
    /// now and then, set aside).
    fn take_replay_nonce(&self, node: u64, lane: &mut Lane) {
        let Some((incarnation, server)) = self.context.cluster.acme(node) else {
            return;
        };
        let fresh = self.issue(node, incarnation, &server);
        let mut nonces = self.nonces.lock().expect("nonces");
        if lane.rng.chance(self.context.workload.set_aside_per_mille) {
            remember(&mut nonces.set_aside, node, fresh);
        } else {
            nonces.held.insert(node, fresh);
        }
    }

    /// One try of an ACME write through a node of the lane's choice.
    async fn write(&self, lane: &mut Lane, command: AcmeCommand) -> Tried {
        let node = lane.pick(self.context.nodes);
        if !self.pass_nonce(node, lane) {
            lane.avoid = Some(node);
            return Tried::NotApplied;
        }
        self.context.shared.with(|history| history.writes += 1);
        let written = tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            self.context
                .cluster
                .write(node, vec![Command::Acme(command)]),
        )
        .await;
        self.take_replay_nonce(node, lane);
        let tried = match written {
            Ok(Ok(mut responses)) => match responses.pop() {
                Some(Response::Acme(result)) => Tried::Answered(result),
                other => {
                    self.context.violation(format!(
                        "client {}: an ACME write was answered {other:?}",
                        self.index
                    ));
                    Tried::NotApplied
                }
            },
            Ok(Err(ServiceError::NoLeader(_) | ServiceError::InvalidArgument(_))) => {
                Tried::NotApplied
            }
            Ok(Err(_)) | Err(_) => Tried::Unknown,
        };
        match tried {
            Tried::Answered(_) => lane.avoid = None,
            Tried::NotApplied => lane.avoid = Some(node),
            Tried::Unknown => {
                lane.avoid = Some(node);
                self.context
                    .shared
                    .with(|history| history.writes_unknown += 1);
            }
        }
        tried
    }

    /// A linearizable read of order `id` through a node of the lane's choice, recorded as a
    /// sighting when it differs from `last`; none if no node answered.
    async fn read_order(
        &self,
        lane: &mut Lane,
        id: u64,
        last: &mut Option<(Order, OrderStatus)>,
    ) -> Option<Option<(Order, OrderStatus)>> {
        let node = lane.pick(self.context.nodes);
        if !self.pass_nonce(node, lane) {
            lane.avoid = Some(node);
            return None;
        }
        let read = tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            self.context.cluster.read(node, move |state, now_ms| {
                let acme = state.acme();
                acme.order(OrderId(id)).cloned().map(|order| {
                    let status = order.status(acme.clock_ms().max(now_ms));
                    (order, status)
                })
            }),
        )
        .await;
        self.take_replay_nonce(node, lane);
        let Ok(Ok(found)) = read else {
            lane.avoid = Some(node);
            return None;
        };
        lane.avoid = None;
        self.context.shared.with(|history| {
            history.reads += 1;
            if let Some((order, status)) = &found
                && last.as_ref() != Some(&(order.clone(), *status))
            {
                history.sightings.push(Sighting {
                    at_ms: self.context.now_ms(),
                    seen_by: format!("client {} via n{node}", self.index),
                    order: order.clone(),
                    status: *status,
                });
            }
        });
        if let Some(found) = &found {
            *last = Some(found.clone());
        }
        Some(found)
    }

    /// Registers (or finds) the client's account, trying until answered.
    async fn register(&self, lane: &mut Lane) -> Option<u64> {
        while !self.context.stopping() {
            let command = AcmeCommand::NewAccount {
                key: self.key.clone(),
                contact: vec![format!("mailto:client{}@{DOMAIN}", self.index)],
                only_existing: false,
            };
            match self.write(lane, command).await {
                Tried::Answered(Ok(AcmeReply::Account { account, .. })) => {
                    if account.key != self.key {
                        self.context.violation(format!(
                            "client {}: account {} was answered with another key",
                            self.index, account.id
                        ));
                    }
                    return Some(account.id.0);
                }
                Tried::Answered(other) => {
                    self.context.violation(format!(
                        "client {}: registering was answered {other:?}",
                        self.index
                    ));
                    return None;
                }
                Tried::NotApplied | Tried::Unknown => lane.pause(100, 400).await,
            }
        }
        None
    }
}

/// A client: registers, then places orders while the run allows, up to `in_flight` at once, and
/// now and then registers again (as certbot does on every run: the same key finds the same
/// account).
async fn run_client(client: Arc<Client>) {
    let context = client.context.clone();
    let mut rng = SeedRng::new(context.seed, 1_100 + u64::from(client.index));
    let mut lane = Lane {
        rng: SeedRng::new(context.seed, rng.next_u64()),
        avoid: None,
    };
    let Some(account) = client.register(&mut lane).await else {
        return;
    };
    context.shared.with(|history| {
        history.accounts.push(RegisteredAccount {
            client: client.index,
            id: account,
            thumbprint: client.key.thumbprint.clone(),
            registered_ms: context.now_ms(),
        });
    });
    let mut running: Vec<madsim::task::JoinHandle<()>> = Vec::new();
    let mut number = 0u64;
    while !context.stopping() && context.now_ms() < context.create_until_ms.load(Ordering::SeqCst) {
        running.retain(|task| !task.is_finished());
        if running.len() < context.workload.in_flight {
            number += 1;
            let order_lane = Lane {
                rng: SeedRng::new(context.seed, rng.next_u64()),
                avoid: None,
            };
            running.push(madsim::task::spawn(one_order(
                Arc::clone(&client),
                account,
                number,
                order_lane,
            )));
        }
        if rng.chance(50)
            && let Some(again) = client.register(&mut lane).await
            && again != account
        {
            context.violation(format!(
                "client {}: its key registered account {account}, then found account {again}",
                client.index
            ));
        }
        tokio::time::sleep(Duration::from_millis(rng.between(200, 700))).await;
    }
    for task in running {
        let _ = task.await;
    }
}

/// A random challenge token: 32 bytes, base64url (as a node draws one).
fn token(rng: &mut SeedRng) -> ChallengeToken {
    let bytes: Vec<u8> = (0..4).flat_map(|_| rng.next_u64().to_be_bytes()).collect();
    ChallengeToken::new(base64url(&bytes)).expect("43 base64url characters are a token")
}

/// One order from placing it to its certificate (or its failure).
async fn one_order(client: Arc<Client>, account: u64, number: u64, mut lane: Lane) {
    let context = client.context.clone();
    let index = client.index;
    let mut names: Vec<String> = (0..lane.rng.between(1, 2))
        .map(|k| format!("o{number}x{k}.c{index}.{DOMAIN}"))
        .collect();
    names.sort();
    let identifiers: Vec<DnsName> = names
        .iter()
        .map(|name| DnsName::new(name.clone()).expect("a workload name is a DNS name"))
        .collect();
    let workload = &context.workload;
    let serving = {
        let draw = lane.rng.between(0, 999);
        if draw < workload.never_serve_per_mille {
            Serving::Never
        } else if draw < workload.never_serve_per_mille + workload.wrong_key_per_mille {
            Serving::WrongKey
        } else if draw
            < workload.never_serve_per_mille
                + workload.wrong_key_per_mille
                + workload.serve_after_per_mille
        {
            Serving::After
        } else {
            Serving::Before
        }
    };

    // Place it: a try whose outcome is unknown may leave an order behind that the client never
    // learns of (it stays pending); each try draws fresh tokens, as the node would.
    let order = loop {
        if context.stopping() {
            return;
        }
        let tokens: Vec<ChallengeToken> = names.iter().map(|_| token(&mut lane.rng)).collect();
        let command = AcmeCommand::NewOrder {
            account: certus_core::acme::AccountId(account),
            identifiers: identifiers.clone(),
            tokens: tokens.clone(),
        };
        match client.write(&mut lane, command).await {
            Tried::Answered(Ok(AcmeReply::Order(order))) => {
                let tokens_held: Vec<&ChallengeToken> = order
                    .authorizations
                    .iter()
                    .map(|authz| &authz.token)
                    .collect();
                if order.names() != identifiers || tokens_held != tokens.iter().collect::<Vec<_>>()
                {
                    context.violation(format!(
                        "client {index}: order {} does not hold the names and tokens it was \
                         placed with",
                        order.id
                    ));
                }
                break order;
            }
            Tried::Answered(other) => {
                context.violation(format!(
                    "client {index}: a new order for {names:?} was answered {other:?}"
                ));
                return;
            }
            Tried::NotApplied | Tried::Unknown => lane.pause(100, 400).await,
        }
    };
    let id = order.id.0;
    context.shared.with(|history| {
        history.placed.push(PlacedOrder {
            client: index,
            id,
            account,
            names: names.clone(),
            serving,
            placed_ms: context.now_ms(),
        });
    });
    let answers: Vec<(String, String, String)> = order
        .authorizations
        .iter()
        .map(|authz| {
            let thumbprint = match serving {
                Serving::WrongKey => &client.wrong_key.thumbprint,
                _ => &client.key.thumbprint,
            };
            (
                authz.token.as_str().to_owned(),
                authz.identifier.as_str().to_owned(),
                format!("{}.{thumbprint}", authz.token),
            )
        })
        .collect();
    let serve = |served: &Served| {
        let mut served = served.lock().expect("served");
        for (token, name, body) in &answers {
            served.insert(token.clone(), (name.clone(), body.clone()));
        }
    };
    if matches!(serving, Serving::Before | Serving::WrongKey) {
        serve(&client.served);
    }

    // Say each challenge is ready. Saying it again is harmless; a challenge already failed is
    // refused, which only an earlier try can explain.
    for position in 0..order.authorizations.len() {
        let mut unknown = false;
        loop {
            if context.stopping() {
                return;
            }
            let command = AcmeCommand::RespondChallenge {
                account: certus_core::acme::AccountId(account),
                order: OrderId(id),
                authorization: u32::try_from(position).expect("two names at most"),
            };
            match client.write(&mut lane, command).await {
                Tried::Answered(Ok(_)) => break,
                Tried::Answered(Err(AcmeError::ChallengeState { .. })) if unknown => break,
                Tried::Answered(Err(error)) => {
                    context.violation(format!(
                        "client {index}: order {id}: the ready of challenge {position} was \
                         refused: {error}"
                    ));
                    return;
                }
                Tried::NotApplied => lane.pause(100, 400).await,
                Tried::Unknown => {
                    unknown = true;
                    lane.pause(100, 400).await;
                }
            }
        }
    }

    // A CSR for its names. Now and then the client finalizes at once, before its order can be
    // ready: refused, unless the validations were that quick.
    let key = ed25519_key(context.seed, &format!("acme-csr-{index}-{number}"));
    let csr = match CertificateParams::new(names.clone()).and_then(|p| p.serialize_request(&key)) {
        Ok(csr) => csr.der().to_vec(),
        Err(error) => {
            context.violation(format!("client {index}: CSR for {names:?}: {error}"));
            return;
        }
    };
    let (mut finalized, mut may_have_finalized) = (false, false);
    if lane.rng.chance(workload.finalize_early_per_mille) {
        (finalized, may_have_finalized) = finalize(
            &client,
            &mut lane,
            account,
            id,
            &csr,
            Finalize::Early,
            false,
        )
        .await;
    }
    if serving == Serving::After {
        lane.pause(0, 3_000).await;
        serve(&client.served);
    }

    // Poll until it is ready, or invalid; then finalize.
    let mut last = None;
    if !finalized {
        let status = poll_until(&client, &mut lane, id, &mut last, |status| {
            status != OrderStatus::Pending
        })
        .await;
        match status {
            Some(OrderStatus::Ready) => {
                (finalized, _) = finalize(
                    &client,
                    &mut lane,
                    account,
                    id,
                    &csr,
                    Finalize::First,
                    may_have_finalized,
                )
                .await;
            }
            Some(OrderStatus::Invalid) | None => return,
            // An early finalize whose outcome was unknown landed.
            Some(OrderStatus::Processing | OrderStatus::Valid) if may_have_finalized => {}
            Some(other) => {
                context.violation(format!(
                    "client {index}: order {id} went from pending to {other:?} before its \
                     finalize"
                ));
                return;
            }
        }
    }
    if !finalized {
        return;
    }
    if lane.rng.chance(workload.finalize_again_per_mille) {
        finalize(
            &client,
            &mut lane,
            account,
            id,
            &csr,
            Finalize::Again,
            false,
        )
        .await;
    }

    // Poll until it is valid (or invalid), then maybe revoke the certificate.
    let status = poll_until(&client, &mut lane, id, &mut last, |status| {
        matches!(status, OrderStatus::Valid | OrderStatus::Invalid)
    })
    .await;
    if status != Some(OrderStatus::Valid) || !lane.rng.chance(workload.revoke_per_mille) {
        return;
    }
    let Some(cert) = last
        .as_ref()
        .and_then(|(order, _)| order.certificate.clone())
    else {
        context.violation(format!(
            "client {index}: order {id} is valid without a certificate"
        ));
        return;
    };
    let serial = match certus_ca::certificate::first_pem_certificate(&cert)
        .and_then(|der| certus_ca::certificate::leaf_info(&der))
    {
        Ok(leaf) => leaf.serial_hex,
        Err(error) => {
            context.violation(format!(
                "client {index}: order {id}'s certificate does not read: {error}"
            ));
            return;
        }
    };
    let mut unknown = false;
    while !context.stopping() {
        // A reason code of RFC 5280 (0 to 5: none of them the unused 7).
        let reason = u8::try_from(lane.rng.between(0, 5)).expect("a small reason code");
        let command = AcmeCommand::Revoke {
            serial: serial.clone(),
            reason,
        };
        match client.write(&mut lane, command).await {
            Tried::Answered(Ok(_)) => {}
            Tried::Answered(Err(AcmeError::AlreadyRevoked(_))) if unknown => {}
            Tried::Answered(Err(error)) => {
                context.violation(format!(
                    "client {index}: revoking order {id}'s certificate was refused: {error}"
                ));
                return;
            }
            Tried::NotApplied => {
                lane.pause(100, 400).await;
                continue;
            }
            Tried::Unknown => {
                unknown = true;
                lane.pause(100, 400).await;
                continue;
            }
        }
        context
            .shared
            .with(|history| history.revoked.push((id, serial.clone())));
        return;
    }
}

/// Polls order `id` until `done` says its status is final for now; the status, or none if the
/// run stopped first.
async fn poll_until(
    client: &Client,
    lane: &mut Lane,
    id: u64,
    last: &mut Option<(Order, OrderStatus)>,
    done: impl Fn(OrderStatus) -> bool,
) -> Option<OrderStatus> {
    while !client.context.stopping() {
        lane.pause(150, 400).await;
        match client.read_order(lane, id, last).await {
            Some(Some((_, status))) if done(status) => return Some(status),
            Some(Some(_)) | None => {}
            Some(None) => {
                client
                    .context
                    .violation(format!("client {}: its order {id} is gone", client.index));
                return None;
            }
        }
    }
    None
}

/// Finalizes order `id` as `kind` says, trying until answered, and records what became of it:
/// whether the client knows it was applied, and whether a try's outcome was unknown.
/// `earlier_unknown`: an earlier finalize of the order may have been applied.
async fn finalize(
    client: &Client,
    lane: &mut Lane,
    account: u64,
    id: u64,
    csr: &[u8],
    kind: Finalize,
    earlier_unknown: bool,
) -> (bool, bool) {
    let context = &client.context;
    let index = client.index;
    let sent_ms = context.now_ms();
    let mut unknown = false;
    let mut answered_ms = None;
    let mut not_ready = false;
    let outcome = loop {
        if context.stopping() {
            break Outcome::Unknown;
        }
        let command = AcmeCommand::Finalize {
            account: certus_core::acme::AccountId(account),
            order: OrderId(id),
            csr: csr.to_vec(),
        };
        match client.write(lane, command).await {
            Tried::Answered(result) => {
                answered_ms = Some(context.now_ms());
                not_ready = matches!(result, Err(AcmeError::NotReady { .. }));
                let landed_before = (unknown || earlier_unknown) && kind != Finalize::Again;
                break match result {
                    Ok(_) => Outcome::Accepted,
                    Err(AcmeError::NotReady {
                        status: OrderStatus::Processing | OrderStatus::Valid,
                        ..
                    }) if landed_before => Outcome::AppliedBefore,
                    // Finalized before, and its issuance failed since: or never finalized.
                    Err(AcmeError::NotReady {
                        status: OrderStatus::Invalid,
                        ..
                    }) if landed_before => {
                        answered_ms = None;
                        Outcome::Unknown
                    }
                    Err(error) => Outcome::Refused(error.to_string()),
                };
            }
            Tried::NotApplied => lane.pause(100, 400).await,
            Tried::Unknown => {
                unknown = true;
                lane.pause(100, 400).await;
            }
        }
    };
    match (&outcome, kind) {
        (Outcome::Accepted, Finalize::Again) => context.violation(format!(
            "client {index}: a second finalize of order {id} was accepted"
        )),
        (Outcome::Refused(reason), Finalize::First) => context.violation(format!(
            "client {index}: the finalize of ready order {id} was refused: {reason}"
        )),
        (Outcome::Refused(reason), Finalize::Early | Finalize::Again) if !not_ready => {
            context.violation(format!(
                "client {index}: a finalize of order {id} was refused for another reason than \
                 the order not being ready: {reason}"
            ));
        }
        _ => {}
    }
    let acknowledged = outcome.acknowledged();
    if unknown || answered_ms.is_some() {
        context.shared.with(|history| {
            history.finalizes.push(FinalizeRecord {
                client: index,
                order: id,
                kind,
                sent_ms,
                answered_ms,
                outcome,
            });
        });
    }
    (acknowledged, unknown)
}
