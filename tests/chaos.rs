//! Chaos on real processes: a three-node cluster of `certus serve` processes under a mixed
//! workload (leases, transaction pipelines, CT submissions) while, every few seconds, a random
//! node is killed with SIGKILL and restarted, or cut off from the network and reconnected. Each
//! node runs on its own network host (a Linux network namespace on a bridge, `support::netns`)
//! where the machine allows it, so partitions are real; elsewhere — or with
//! `CERTUS_CHAOS_PARTITIONS=0` — the nodes share loopback and only kills happen. Afterwards the
//! client history is checked:
//!
//! - leases: no fencing token is granted twice, a grant acknowledged before another was asked
//!   for has the smaller token, and a renewal never names a token granted to someone else;
//! - pipelines: every acknowledged enqueue exists with its external id, one external id never
//!   maps to two transactions nor two ids to one, every acknowledged completion stands, no claim
//!   is handed out twice, and a transaction whose completion was acknowledged is never
//!   dequeued again;
//! - CT: every entry with an SCT is in a serving STH once faults stop, and no certificate holds
//!   two sequence numbers;
//! - sessions: every acknowledged create exists, every session reaches `DONE` (with a
//!   certificate) or `FAILED` once faults stop — work a dead node held comes back — and every
//!   acknowledged session stays done.
//!
//! `cargo xtask test` runs it for 20 s; `cargo xtask chaos` for five minutes
//! (`CERTUS_CHAOS_SECONDS`). The fault schedule comes from `CERTUS_CHAOS_SEED` (printed; set it
//! to replay the same kills, though the processes' own timing still varies). Node logs are in the
//! cluster's temporary directory; `CERTUS_CHAOS_KEEP=1` keeps it after a passing run.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use certus_client::{
    Client, ClientConfig, EnqueueRequest, GetStateRequest, QueueType, Stage, TxStatus,
    enqueue_request::Route,
};
use certus_proto::v1::acquire_reply::How;
use rcgen::{CertificateParams, KeyPair};
use support::netns::Network;
use support::{Cluster, TestRoot, Tuning, eventually};

const DEFAULT_SECONDS: u64 = 20;
const LEASE_NAMES: u64 = 3;
const LEASE_TTL_MS: u64 = 1_500;
const PIPELINE: &str = "chaos";
const NODE_GROUP: &str = "chaos-group";
/// Names whose HTTP-01 challenges the nodes serve; sessions cycle through them.
const SESSION_NAMES: usize = 48;

/// A small deterministic generator for the fault schedule.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }
}

#[derive(Debug, Clone)]
struct Grant {
    name: String,
    holder: String,
    token: u64,
    how: How,
    asked: Instant,
    answered: Instant,
}

#[derive(Debug, Default)]
struct History {
    grants: Vec<Grant>,
    /// external id → transaction id, for every acknowledged enqueue.
    enqueued: Vec<(String, u64)>,
    /// Transaction ids whose completion (success) was acknowledged, with when it was answered.
    completed: Vec<(u64, Instant)>,
    /// Every acknowledged dequeue's claims: transaction, claim token, when it was asked for.
    claims: Vec<(u64, u64, Instant)>,
    /// Leaf certificates that got an SCT.
    logged: Vec<Vec<u8>>,
    /// Sessions whose create was acknowledged.
    sessions_created: Vec<u64>,
    /// Sessions whose acknowledgement (after `DONE`) was acknowledged.
    sessions_acknowledged: Vec<u64>,
    /// Calls that failed, by kind and reason: no answer (outcome unknown) or a refusal.
    unknown: BTreeMap<String, u64>,
}

type Shared = Arc<Mutex<History>>;

fn record(history: &Shared, change: impl FnOnce(&mut History)) {
    change(&mut history.lock().expect("history"));
}

fn failed(history: &Shared, kind: &str, error: &certus_client::ClientError) {
    let reason = match error.reason() {
        "" => "no-answer",
        reason => reason,
    };
    record(history, |h| {
        *h.unknown.entry(format!("{kind}:{reason}")).or_default() += 1;
    });
}

fn seconds() -> u64 {
    std::env::var("CERTUS_CHAOS_SECONDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(DEFAULT_SECONDS)
}

fn seed() -> u64 {
    std::env::var("CERTUS_CHAOS_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |elapsed| elapsed.as_nanos());
            u64::try_from(nanos % u128::from(u64::MAX)).unwrap_or(1) | 1
        })
}

async fn leases(client: Client, worker: u64, stop: Arc<AtomicBool>, history: Shared) {
    let holder = format!("holder-{worker}");
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("chaos/lock-{}", (worker + round) % LEASE_NAMES);
        round += 1;
        let asked = Instant::now();
        match client.acquire(&name, &holder, LEASE_TTL_MS).await {
            Ok(reply) => {
                let answered = Instant::now();
                let how = reply.how();
                let lease = reply.lease.expect("an acquire answers its lease");
                record(&history, |h| {
                    h.grants.push(Grant {
                        name,
                        holder: holder.clone(),
                        token: lease.fencing_token,
                        how,
                        asked,
                        answered,
                    });
                });
            }
            Err(error) if error.reason() == "not-holder" => {}
            Err(error) => failed(&history, "acquire", &error),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn producer(client: Client, producer: u64, stop: Arc<AtomicBool>, history: Shared) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let external_id = format!("p{producer}-{n}");
        n += 1;
        let request = EnqueueRequest {
            owner: "chaos".into(),
            external_id: external_id.clone(),
            route: Some(Route::Pipeline(PIPELINE.into())),
            queue: QueueType::In.into(),
            state: "{}".into(),
            ..EnqueueRequest::default()
        };
        match client.enqueue(request).await {
            Ok(reply) => record(&history, |h| {
                h.enqueued.push((external_id, reply.transaction_id));
            }),
            Err(error) => failed(&history, "enqueue", &error),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn worker(client: Client, worker: u64, stop: Arc<AtomicBool>, history: Shared) {
    let name = format!("worker-{worker}");
    while !stop.load(Ordering::Relaxed) {
        let asked = Instant::now();
        let transactions = match client.dequeue(NODE_GROUP, &name, 4).await {
            Ok(reply) => {
                record(&history, |h| {
                    for transaction in &reply.transactions {
                        h.claims
                            .push((transaction.id, transaction.claim_token, asked));
                    }
                });
                reply.transactions
            }
            Err(error) => {
                failed(&history, "dequeue", &error);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if transactions.is_empty() {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        for transaction in transactions {
            let done = client
                .complete_transaction(
                    transaction.id,
                    transaction.claim_token,
                    TxStatus::Success,
                    Some(format!("{{\"by\":\"{name}\"}}")),
                )
                .await;
            match done {
                Ok(_) => {
                    let answered = Instant::now();
                    record(&history, |h| h.completed.push((transaction.id, answered)));
                }
                Err(error) => failed(&history, "complete", &error),
            }
        }
    }
}

async fn submitter(client: Client, root: Arc<TestRoot>, stop: Arc<AtomicBool>, history: Shared) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let leaf = root.leaf(&format!("n{n}.chaos.test"));
        n += 1;
        match client
            .add_chain(vec![leaf.clone(), root.der.clone()], false)
            .await
        {
            Ok(_) => record(&history, |h| h.logged.push(leaf)),
            Err(error) => failed(&history, "add-chain", &error),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn session_name(n: usize) -> String {
    format!("s{}.chaos.test", n % SESSION_NAMES)
}

/// Creates sessions one after another, each followed to its end and acknowledged when done.
async fn applicant(client: Client, applicant: u64, stop: Arc<AtomicBool>, history: Shared) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let name = session_name(n + usize::try_from(applicant).expect("small"));
        n += 2;
        let key = KeyPair::generate().expect("applicant key");
        let csr = CertificateParams::new(vec![name.clone()])
            .expect("params")
            .serialize_request(&key)
            .expect("CSR")
            .der()
            .to_vec();
        let request_key = format!("a{applicant}-{n}");
        let created = match client
            .create_session(csr, vec![name], Some(request_key))
            .await
        {
            Ok(session) => session,
            Err(error) => {
                failed(&history, "create-session", &error);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        record(&history, |h| h.sessions_created.push(created.id));
        let mut known = Some(created);
        let give_up = Instant::now() + Duration::from_secs(30);
        while !stop.load(Ordering::Relaxed) && Instant::now() < give_up {
            let Some(session) = known.clone() else { break };
            if session.stage() == Stage::Done {
                match client.acknowledge_session(session.id).await {
                    Ok(_) => record(&history, |h| h.sessions_acknowledged.push(session.id)),
                    Err(error) => failed(&history, "acknowledge-session", &error),
                }
                break;
            }
            if session.stage() == Stage::Failed {
                break;
            }
            match client
                .wait_session(session.id, Some(session), Duration::from_secs(2))
                .await
            {
                Ok(newer) => known = Some(newer),
                Err(error) => failed(&history, "wait-session", &error),
            }
        }
    }
}

async fn check_sessions(client: &Client, created: &[u64], acknowledged: &[u64]) {
    let acknowledged: BTreeSet<u64> = acknowledged.iter().copied().collect();
    for id in created {
        // Work a dead or cut-off node held comes back to the others: every session ends.
        let session = eventually(
            Duration::from_secs(90),
            "every session done or failed once faults stop",
            || async {
                let session = client.get_session(*id).await.ok()?;
                matches!(session.stage(), Stage::Done | Stage::Failed).then_some(session)
            },
        )
        .await;
        if session.stage() == Stage::Done {
            assert!(
                session
                    .certificate
                    .starts_with("-----BEGIN CERTIFICATE-----"),
                "done session {id} carries a certificate"
            );
        }
        if acknowledged.contains(id) {
            assert_eq!(
                session.stage(),
                Stage::Done,
                "acknowledged session {id} stays done"
            );
        }
    }
}

fn check_leases(grants: &[Grant]) {
    let mut by_name: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for grant in grants {
        by_name.entry(&grant.name).or_default().push(grant);
    }
    for (name, grants) in by_name {
        let new: Vec<&&Grant> = grants
            .iter()
            .filter(|grant| grant.how != How::Renewed)
            .collect();
        let mut holders_of: BTreeMap<u64, &str> = BTreeMap::new();
        for grant in &new {
            if let Some(other) = holders_of.insert(grant.token, &grant.holder) {
                panic!(
                    "{name}: fencing token {} granted twice (to {other} and {})",
                    grant.token, grant.holder
                );
            }
        }
        for earlier in &new {
            for later in &new {
                if earlier.answered < later.asked {
                    assert!(
                        earlier.token < later.token,
                        "{name}: a grant acknowledged before another was asked for has token {} \
                         >= {} (not linearizable)",
                        earlier.token,
                        later.token
                    );
                }
            }
        }
        for renewal in grants.iter().filter(|grant| grant.how == How::Renewed) {
            if let Some(owner) = holders_of.get(&renewal.token) {
                assert_eq!(
                    *owner, renewal.holder,
                    "{name}: {} renewed token {} that was granted to {owner}",
                    renewal.holder, renewal.token
                );
            }
        }
    }
}

/// The queue's history: a claim is handed out once, and a transaction whose completion was
/// acknowledged is never handed out again.
fn check_claims(claims: &[(u64, u64, Instant)], completed: &[(u64, Instant)]) {
    let mut seen = BTreeSet::new();
    for (id, token, _) in claims {
        assert!(
            seen.insert((*id, *token)),
            "transaction {id}'s claim {token} was handed out twice"
        );
    }
    let finished: BTreeMap<u64, Instant> = completed.iter().copied().collect();
    for (id, token, asked) in claims {
        if let Some(done) = finished.get(id) {
            assert!(
                asked <= done,
                "transaction {id} was dequeued again (claim {token}) after its completion was \
                 acknowledged"
            );
        }
    }
}

async fn check_pipelines(
    client: &Client,
    enqueued: &[(String, u64)],
    completed: &[(u64, Instant)],
) {
    let mut by_external: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_id: BTreeMap<u64, &str> = BTreeMap::new();
    for (external, id) in enqueued {
        if let Some(first) = by_external.insert(external, *id) {
            assert_eq!(
                first, *id,
                "external id {external} answered two transactions"
            );
        }
        if let Some(first) = by_id.insert(*id, external) {
            assert_eq!(
                first, external,
                "transaction {id} answered two external ids"
            );
        }
    }
    let completed: BTreeSet<u64> = completed.iter().map(|(id, _)| *id).collect();
    for (id, external) in &by_id {
        let reply = client
            .get_state(GetStateRequest {
                transaction_id: *id,
                ..GetStateRequest::default()
            })
            .await
            .unwrap_or_else(|error| panic!("acknowledged transaction {id} is lost: {error}"));
        let transaction = reply.transaction.expect("a transaction");
        assert_eq!(transaction.external_id, *external, "transaction {id}");
        if completed.contains(id) {
            assert_eq!(
                transaction.status(),
                TxStatus::Success,
                "transaction {id}'s acknowledged completion did not stand"
            );
        }
    }
}

async fn check_ct(client: &Client, logged: &[Vec<u8>]) {
    // Every SCT'd entry reaches a serving STH once the faults stop.
    let needed = u64::try_from(logged.len()).expect("count");
    let size = eventually(
        Duration::from_secs(60),
        "a serving STH covering every acknowledged submission",
        || async {
            let sth = client.get_sth().await.ok()?;
            (sth.tree_size >= needed).then_some(sth.tree_size)
        },
    )
    .await;
    let mut entries = Vec::new();
    while (entries.len() as u64) < size {
        let start = entries.len() as u64;
        let page = client
            .get_entries(start, size - 1)
            .await
            .expect("get-entries")
            .entries;
        assert!(
            !page.is_empty(),
            "get-entries from {start} answered nothing"
        );
        entries.extend(page.into_iter().map(|entry| entry.leaf_input));
    }
    let contains = |haystack: &[u8], needle: &[u8]| {
        haystack
            .windows(needle.len())
            .any(|window| window == needle)
    };
    for (number, leaf) in logged.iter().enumerate() {
        let places: Vec<usize> = entries
            .iter()
            .enumerate()
            .filter(|(_, input)| contains(input, leaf))
            .map(|(index, _)| index)
            .collect();
        assert!(
            !places.is_empty(),
            "submission {number} got an SCT but is not in the tree of size {size}"
        );
        assert_eq!(
            places.len(),
            1,
            "submission {number} holds sequence numbers {places:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_restarted_and_partitioned_nodes_lose_nothing_acknowledged() {
    let seconds = seconds();
    let seed = seed();
    println!("chaos: seed {seed} (CERTUS_CHAOS_SEED), {seconds} s of faults");
    let files = tempfile::tempdir().expect("files");
    let root = Arc::new(TestRoot::new("Certus Chaos Root"));
    let key_file = files.path().join("log-key.pem");
    let roots_file = files.path().join("roots.pem");
    std::fs::write(
        &key_file,
        certus_ct::signer::EcdsaP256Signer::generate_pkcs8_pem().expect("log key"),
    )
    .expect("key file");
    std::fs::write(&roots_file, &root.pem).expect("roots file");
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("ms fit");
    let ca = certus_ca::issuer::CaIdentity::generate("Certus Chaos CA", now_ms).expect("a CA");
    let ca_key_file = files.path().join("ca-key.pem");
    let ca_cert_file = files.path().join("ca-cert.pem");
    std::fs::write(&ca_key_file, ca.key_pem()).expect("CA key file");
    std::fs::write(&ca_cert_file, ca.certificate_pem()).expect("CA certificate file");
    let tuning = Tuning {
        tick_interval_ms: 500,
        snapshot_after_entries: 2_000,
        entries_kept_after_snapshot: 200,
        ct: Some((key_file, roots_file)),
        sessions: Some((
            ca_key_file,
            ca_cert_file,
            (0..SESSION_NAMES).map(session_name).collect(),
        )),
        ..Tuning::default()
    };
    let network = if std::env::var("CERTUS_CHAOS_PARTITIONS").as_deref() == Ok("0") {
        println!("chaos: partitions off (CERTUS_CHAOS_PARTITIONS=0)");
        None
    } else {
        match Network::create(3) {
            Ok(network) => Some(network),
            Err(why) => {
                println!("chaos: partitions off: no network namespaces here ({why})");
                None
            }
        }
    };
    let mut cluster = match &network {
        Some(network) => Cluster::start_on(network, 3, tuning),
        None => Cluster::start(3, tuning),
    };
    let client = Client::with_config(
        cluster.endpoints(),
        ClientConfig {
            deadline: Duration::from_secs(8),
            ..ClientConfig::default()
        },
    )
    .expect("client");
    eventually(Duration::from_secs(30), "the pipeline defined", || async {
        client.define_pipeline(PIPELINE, NODE_GROUP).await.ok()
    })
    .await;
    // HTTP-01 tests fail while the node serving a name is down: retry them for longer than an
    // outage lasts, so sessions fail only if something is wrong.
    eventually(
        Duration::from_secs(30),
        "the sessions configured",
        || async {
            let config = client.sessions_status().await.ok()?.config?;
            client
                .set_session_config(certus_client::SessionConfig {
                    max_tests: 30,
                    test_retry_ms: 500,
                    ..config
                })
                .await
                .ok()
        },
    )
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let history: Shared = Arc::default();
    let mut tasks = Vec::new();
    for n in 0..4 {
        tasks.push(tokio::spawn(leases(
            client.clone(),
            n,
            Arc::clone(&stop),
            Arc::clone(&history),
        )));
    }
    for n in 0..2 {
        tasks.push(tokio::spawn(producer(
            client.clone(),
            n,
            Arc::clone(&stop),
            Arc::clone(&history),
        )));
        tasks.push(tokio::spawn(worker(
            client.clone(),
            n,
            Arc::clone(&stop),
            Arc::clone(&history),
        )));
    }
    for n in 0..2 {
        tasks.push(tokio::spawn(applicant(
            client.clone(),
            n,
            Arc::clone(&stop),
            Arc::clone(&history),
        )));
    }
    tasks.push(tokio::spawn(submitter(
        client.clone(),
        Arc::clone(&root),
        Arc::clone(&stop),
        Arc::clone(&history),
    )));

    let mut rng = Rng(seed);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut kills, mut partitions) = (0, 0);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1_500 + rng.below(2_500))).await;
        let index = usize::try_from(rng.below(3)).expect("small");
        let id = cluster.nodes[index].spec.id;
        let outage = Duration::from_millis(300 + rng.below(2_000));
        match &network {
            Some(network) if rng.below(2) == 0 => {
                let host = u8::try_from(id).expect("small ids");
                network.isolate(host);
                partitions += 1;
                println!("chaos: cut node {id} off");
                tokio::time::sleep(outage).await;
                network.heal(host);
                println!("chaos: reconnected node {id}");
            }
            _ => {
                cluster.nodes[index].kill();
                kills += 1;
                println!("chaos: killed node {id}");
                tokio::time::sleep(outage).await;
                cluster.restart(index);
                println!("chaos: restarted node {id}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a workload task");
    }

    let history = std::mem::take(&mut *history.lock().expect("history"));
    println!(
        "chaos: {kills} kills, {partitions} partitions; acknowledged: {} lease grants, {} enqueues, {} completions, {} SCTs, {} sessions created, {} done and acknowledged; \
         failed calls: {:?}",
        history.grants.len(),
        history.enqueued.len(),
        history.completed.len(),
        history.logged.len(),
        history.sessions_created.len(),
        history.sessions_acknowledged.len(),
        history.unknown
    );
    assert!(kills + partitions >= 1, "at least one fault happened");
    for (what, count) in [
        ("lease grants", history.grants.len()),
        ("enqueues", history.enqueued.len()),
        ("completions", history.completed.len()),
        ("SCTs", history.logged.len()),
        ("session creates", history.sessions_created.len()),
        (
            "session acknowledgements",
            history.sessions_acknowledged.len(),
        ),
    ] {
        assert!(
            count > 0,
            "the workload made progress: no acknowledged {what}"
        );
    }
    check_leases(&history.grants);
    check_claims(&history.claims, &history.completed);
    check_pipelines(&client, &history.enqueued, &history.completed).await;
    check_ct(&client, &history.logged).await;
    check_sessions(
        &client,
        &history.sessions_created,
        &history.sessions_acknowledged,
    )
    .await;
    if std::env::var_os("CERTUS_CHAOS_KEEP").is_some() {
        println!("chaos: node logs kept in {}", cluster.dir.keep().display());
    }
}
