//! CA issuance sessions over gRPC (`certus.v1.Sessions`) against a real three-node cluster in
//! one process. No worker daemon runs: each test is the external worker itself, claiming and
//! completing steps through the worker calls, while clients and operators talk to other nodes.

use std::fmt::Debug;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use certus_ca::csr::CheckedCsr;
use certus_ca::issuer::{CaIdentity, LEAF_VALIDITY_DEFAULT, SerialNumber};
use certus_node::{Node, NodeConfig};
use certus_proto::v1;
use certus_proto::v1::complete_request::{Challenges, Issued, Outcome, Tested};
use certus_proto::v1::sessions_client::SessionsClient;
use rcgen::{CertificateParams, KeyPair};
use tonic::transport::Channel;
use tonic::{Code, Response, Status};

use crate::support::{roles, shutdown, start_plain_cluster};

/// How long anything that should happen at once may take on a slow machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// How often a test looks again.
const POLL: Duration = Duration::from_millis(50);
/// The metadata entry carrying a refusal's stable reason.
const REASON_KEY: &str = "certus-error";

/// A three-node cluster without a CT log, data under `dir`, once every node knows the leader.
async fn start_cluster(dir: &Path) -> (Vec<NodeConfig>, Vec<Node>) {
    start_plain_cluster(dir, PATIENCE, |config| {
        // The test is the worker: the nodes' own daemons would race it for every claim.
        config.sessions.daemons = false;
    })
    .await
}

async fn client(node: &NodeConfig) -> SessionsClient<Channel> {
    SessionsClient::connect(format!("http://{}", node.grpc_addr))
        .await
        .expect("gRPC connection")
}

/// A fresh key's CSR (DER) for `names`, in the order given.
fn csr(names: &[&str]) -> Vec<u8> {
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(
        names
            .iter()
            .map(|&name| name.to_owned())
            .collect::<Vec<_>>(),
    )
    .expect("CSR params");
    params.serialize_request(&key).expect("CSR").der().to_vec()
}

fn create_request(csr: Vec<u8>, names: &[&str], request_key: &str) -> v1::CreateSessionRequest {
    v1::CreateSessionRequest {
        csr,
        names: names.iter().map(|&name| name.to_owned()).collect(),
        request_key: request_key.to_owned(),
    }
}

fn claim_request(stage: v1::Stage, worker: &str, visibility_ms: u64) -> v1::ClaimRequest {
    v1::ClaimRequest {
        stage: stage.into(),
        worker: worker.to_owned(),
        visibility_ms,
        max: 10,
        wait_ms: 0,
    }
}

fn complete(session: &v1::Session, token: u64, outcome: Outcome) -> v1::CompleteRequest {
    v1::CompleteRequest {
        id: session.id,
        claim_token: token,
        outcome: Some(outcome),
    }
}

/// One challenge per name, listed in the order given; tokens are base64url.
fn challenges(names: &[&str]) -> Outcome {
    Outcome::Challenges(Challenges {
        challenges: names
            .iter()
            .map(|&name| {
                let token = format!("tok_{}-Ab09", name.replace('.', "_"));
                v1::NewChallenge {
                    name: name.to_owned(),
                    key_authorization: format!("{token}.thumbprint-Zq"),
                    token,
                }
            })
            .collect(),
    })
}

/// Test results: `(name, satisfied)`; an unsatisfied one carries an error.
fn tested(results: &[(&str, bool)]) -> Outcome {
    Outcome::Tested(Tested {
        results: results
            .iter()
            .map(|&(name, satisfied)| v1::TestResult {
                name: name.to_owned(),
                satisfied,
                error: if satisfied {
                    String::new()
                } else {
                    "connection refused".to_owned()
                },
            })
            .collect(),
    })
}

fn stage(session: &v1::Session) -> v1::Stage {
    v1::Stage::try_from(session.stage).expect("a known stage")
}

/// The refusal of `result`, checked for its code and its `certus-error` reason.
fn refused<T: Debug>(result: Result<Response<T>, Status>, code: Code, reason: &str) -> Status {
    let status = match result {
        Ok(response) => panic!(
            "expected {code:?} {reason}, got {:?}",
            response.into_inner()
        ),
        Err(status) => status,
    };
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(
        status
            .metadata()
            .get(REASON_KEY)
            .and_then(|value| value.to_str().ok()),
        Some(reason),
        "{status:?}"
    );
    status
}

async fn get(client: &mut SessionsClient<Channel>, id: u64) -> v1::Session {
    client
        .get(v1::GetSessionRequest { id })
        .await
        .expect("Sessions/Get")
        .into_inner()
}

async fn status(client: &mut SessionsClient<Channel>) -> v1::SessionsStatus {
    client
        .status(v1::SessionsStatusRequest {})
        .await
        .expect("Sessions/Status")
        .into_inner()
}

async fn claim(
    client: &mut SessionsClient<Channel>,
    request: v1::ClaimRequest,
) -> Vec<v1::Session> {
    client
        .claim(request)
        .await
        .expect("Sessions/Claim")
        .into_inner()
        .sessions
}

/// Claims until the claim returns a session (the queue makes it visible later); returns the
/// sessions and how long that took.
async fn claim_when_visible(
    client: &mut SessionsClient<Channel>,
    request: v1::ClaimRequest,
) -> (Vec<v1::Session>, Duration) {
    let started = Instant::now();
    loop {
        let sessions = claim(client, request.clone()).await;
        if !sessions.is_empty() {
            return (sessions, started.elapsed());
        }
        assert!(
            started.elapsed() < PATIENCE,
            "nothing became claimable in {:?} within {PATIENCE:?}",
            request.stage
        );
        tokio::time::sleep(POLL).await;
    }
}

/// `(waiting, claimed)` of each queued stage, then done, archived and total.
fn counts(status: &v1::SessionsStatus) -> (Vec<(v1::Stage, u64, u64)>, u64, u64, u64) {
    let queues = status
        .queues
        .iter()
        .map(|queue| {
            let stage = v1::Stage::try_from(queue.stage).expect("a known stage");
            (stage, queue.waiting, queue.claimed)
        })
        .collect();
    (queues, status.done, status.archived, status.total)
}

fn queues(make: (u64, u64), test: (u64, u64), issue: (u64, u64)) -> Vec<(v1::Stage, u64, u64)> {
    vec![
        (v1::Stage::MakeChallenge, make.0, make.1),
        (v1::Stage::TestChallenge, test.0, test.1),
        (v1::Stage::Issue, issue.0, issue.1),
    ]
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("milliseconds fit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_goes_from_create_to_an_acknowledged_certificate_through_the_worker_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;

    // An operator makes retests quick, but slow enough to see the retry delay.
    let mut config = status(&mut on_other).await.config.expect("a config");
    config.test_retry_ms = 1_000;
    let set = on_other
        .set_config(v1::SetSessionConfigRequest {
            config: Some(config),
        })
        .await
        .expect("Sessions/SetConfig")
        .into_inner();
    assert_eq!(
        set, config,
        "SetConfig answers the configuration now in force"
    );
    assert_eq!(status(&mut on_leader).await.config, Some(config));

    // A client creates a session on a follower; names come unsorted and in mixed case.
    let csr_der = csr(&["www.example.com", "api.example.com"]);
    let request = create_request(
        csr_der.clone(),
        &["WWW.Example.com", "api.EXAMPLE.com"],
        "client-request-1",
    );
    let created = on_follower
        .create(request.clone())
        .await
        .expect("Sessions/Create")
        .into_inner();
    assert!(created.id > 0);
    assert_eq!(created.names, ["api.example.com", "www.example.com"]);
    assert_eq!(stage(&created), v1::Stage::MakeChallenge);
    assert!(created.live);
    assert_eq!(created.csr, csr_der);
    assert_eq!(created.request_key, "client-request-1");
    assert!(created.challenges.is_empty() && created.certificate.is_empty());
    assert_eq!(
        counts(&status(&mut on_leader).await),
        (queues((1, 0), (0, 0), (0, 0)), 0, 0, 1),
        "one session waits in makechallenge"
    );

    // A retry with the same key (through another node) answers the same session.
    let again = on_other
        .create(request)
        .await
        .expect("Sessions/Create retry")
        .into_inner();
    assert_eq!(
        again, created,
        "a retry answers the first session, unchanged"
    );
    assert_eq!(status(&mut on_leader).await.total, 1, "and creates nothing");
    assert_eq!(get(&mut on_other, created.id).await, created);

    // Make the challenges.
    let claimed = claim(
        &mut on_other,
        claim_request(v1::Stage::MakeChallenge, "w1", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let held = &claimed[0];
    assert_eq!(held.id, created.id);
    assert_eq!(held.claimant, "w1");
    assert!(held.claim_token > 0);
    assert!(held.claim_deadline_ms > held.created_ms);
    let token = held.claim_token;
    assert_eq!(
        counts(&status(&mut on_follower).await).0,
        queues((0, 1), (0, 0), (0, 0)),
        "the session is claimed, not waiting"
    );
    let outcome = challenges(&["www.example.com", "api.example.com"]);
    let testing = on_leader
        .complete(complete(held, token, outcome.clone()))
        .await
        .expect("Sessions/Complete challenges")
        .into_inner();
    assert_eq!(stage(&testing), v1::Stage::TestChallenge);
    assert!(testing.claimant.is_empty() && testing.claim_token == 0);
    let names: Vec<&str> = testing.challenges.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["api.example.com", "www.example.com"],
        "sorted by name"
    );
    for challenge in &testing.challenges {
        assert_eq!(
            challenge.key_authorization,
            format!("{}.thumbprint-Zq", challenge.token)
        );
        assert!(!challenge.satisfied && challenge.times_tested == 0);
        assert!(challenge.challtime_ms >= testing.created_ms);
    }

    // A worker that lost the answer completes again with the same token: same answer, no change.
    let before = get(&mut on_follower, created.id).await;
    assert_eq!(before, testing);
    let repeated = on_follower
        .complete(complete(held, token, outcome))
        .await
        .expect("a repeated Complete")
        .into_inner();
    assert_eq!(repeated, before, "the repeat answers the session as it is");
    assert_eq!(
        get(&mut on_other, created.id).await,
        before,
        "nothing changed"
    );

    // Test the challenges: one fails, so the session waits for a retest.
    let claimed = claim(
        &mut on_follower,
        claim_request(v1::Stage::TestChallenge, "w1", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let held = &claimed[0];
    let retest = on_follower
        .complete(complete(
            held,
            held.claim_token,
            tested(&[("api.example.com", true), ("www.example.com", false)]),
        ))
        .await
        .expect("Sessions/Complete tested")
        .into_inner();
    assert_eq!(stage(&retest), v1::Stage::TestChallenge);
    assert!(retest.live);
    let [api, www] = &retest.challenges[..] else {
        panic!("two challenges: {:?}", retest.challenges);
    };
    assert!(api.satisfied && api.times_tested == 1 && api.last_error.is_empty());
    assert!(!www.satisfied && www.times_tested == 1);
    assert_eq!(www.last_error, "connection refused");
    assert!(
        claim(
            &mut on_other,
            claim_request(v1::Stage::TestChallenge, "w1", 30_000)
        )
        .await
        .is_empty(),
        "the retest waits for test_retry_ms"
    );
    assert_eq!(
        counts(&status(&mut on_other).await).0,
        queues((0, 0), (1, 0), (0, 0)),
        "it waits, invisible for now, in testchallenge"
    );
    let (claimed, waited) = claim_when_visible(
        &mut on_other,
        claim_request(v1::Stage::TestChallenge, "w1", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    println!("the retest became claimable after {waited:?}");
    let held = &claimed[0];
    let issuing = on_other
        .complete(complete(
            held,
            held.claim_token,
            tested(&[("api.example.com", true), ("www.example.com", true)]),
        ))
        .await
        .expect("Sessions/Complete tested again")
        .into_inner();
    assert_eq!(stage(&issuing), v1::Stage::Issue);
    let times: Vec<(bool, u32)> = issuing
        .challenges
        .iter()
        .map(|c| (c.satisfied, c.times_tested))
        .collect();
    assert_eq!(
        times,
        [(true, 1), (true, 2)],
        "a satisfied challenge is not counted again"
    );

    // Issue with the built-in CA, while a client long-polls on another node.
    let claimed = claim(
        &mut on_leader,
        claim_request(v1::Stage::Issue, "w2", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let held = claimed[0].clone();
    assert_eq!(held.claimant, "w2");
    let ca = CaIdentity::generate("Certus Test CA", now_ms() - 60_000).expect("a CA");
    let checked = CheckedCsr::from_der(&held.csr).expect("the stored CSR checks");
    assert_eq!(checked.names(), held.names);
    let issued = ca
        .issue(
            &checked,
            SerialNumber::from_random_bytes([7; 16]),
            now_ms(),
            LEAF_VALIDITY_DEFAULT,
        )
        .expect("issued");
    let mut waiter = client(&configs[follower]).await;
    let known = held.clone();
    let wait = tokio::spawn(async move {
        let started = Instant::now();
        let session = waiter
            .wait(v1::WaitSessionRequest {
                id: known.id,
                known: Some(known),
                wait_ms: 30_000,
            })
            .await
            .expect("Sessions/Wait")
            .into_inner();
        (session, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!wait.is_finished(), "Wait waits while nothing changes");
    let completed_at = Instant::now();
    let done = on_leader
        .complete(complete(
            &held,
            held.claim_token,
            Outcome::Issued(Issued {
                certificate: issued.chain_pem.clone(),
            }),
        ))
        .await
        .expect("Sessions/Complete issued")
        .into_inner();
    assert_eq!(stage(&done), v1::Stage::Done);
    assert_eq!(done.certificate, issued.chain_pem);
    assert!(done.certificate.ends_with(ca.certificate_pem()));
    assert!(done.live && !done.acknowledged && done.archived_at_ms == 0);
    let (woken, waited) = tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("Wait returns")
        .expect("the waiting task");
    let after_complete = completed_at.elapsed();
    println!("Wait returned {after_complete:?} after the Complete (waited {waited:?} in all)");
    assert!(
        after_complete < Duration::from_secs(5),
        "Wait returns promptly"
    );
    assert_eq!(woken, done, "Wait answers the done session");
    // Nothing changes any more: a Wait on the done session runs out its time.
    let started = Instant::now();
    let unchanged = on_other
        .wait(v1::WaitSessionRequest {
            id: done.id,
            known: Some(done.clone()),
            wait_ms: 500,
        })
        .await
        .expect("Sessions/Wait on done")
        .into_inner();
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(unchanged, done);
    assert_eq!(
        counts(&status(&mut on_other).await),
        (queues((0, 0), (0, 0), (0, 0)), 1, 0, 1),
        "the certificate waits for its client"
    );

    // The client acknowledges: the session is archived, its certificate still readable.
    let acknowledged = on_follower
        .acknowledge(v1::AcknowledgeSessionRequest { id: done.id })
        .await
        .expect("Sessions/Acknowledge")
        .into_inner();
    assert!(acknowledged.acknowledged);
    assert!(acknowledged.archived_at_ms > 0);
    assert_eq!(stage(&acknowledged), v1::Stage::Done);
    assert_eq!(acknowledged.certificate, issued.chain_pem);
    let again = on_other
        .acknowledge(v1::AcknowledgeSessionRequest { id: done.id })
        .await
        .expect("a repeated Acknowledge")
        .into_inner();
    assert_eq!(again, acknowledged, "acknowledging again changes nothing");
    for node in &configs {
        assert_eq!(get(&mut client(node).await, done.id).await, acknowledged);
    }
    // List pages through every session in a stage, archived or not: the acknowledged one is
    // still listed under DONE; the status no longer counts it as done but as archived.
    let listed = on_leader
        .list(v1::ListSessionsRequest {
            stage: v1::Stage::Done.into(),
            after: 0,
            limit: 0,
        })
        .await
        .expect("Sessions/List")
        .into_inner();
    assert_eq!(listed.sessions, std::slice::from_ref(&acknowledged));
    assert_eq!(listed.next_after, 0);
    for empty in [
        v1::Stage::MakeChallenge,
        v1::Stage::Issue,
        v1::Stage::Failed,
    ] {
        let listed = on_leader
            .list(v1::ListSessionsRequest {
                stage: empty.into(),
                after: 0,
                limit: 0,
            })
            .await
            .expect("Sessions/List")
            .into_inner();
        assert!(listed.sessions.is_empty(), "{empty:?}: {listed:?}");
    }
    assert_eq!(
        counts(&status(&mut on_leader).await),
        (queues((0, 0), (0, 0), (0, 0)), 0, 1, 1)
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;
    let names = ["a.example.com", "b.example.com"];

    let garbage = refused(
        on_follower
            .create(create_request(b"not a CSR".to_vec(), &names, ""))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(garbage.message().contains("csr"), "{}", garbage.message());

    let mismatch = refused(
        on_follower
            .create(create_request(
                csr(&names),
                &["a.example.com", "c.example.com"],
                "",
            ))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    let message = mismatch.message();
    assert!(message.starts_with("csr:"), "{message}");
    assert!(
        message.contains("b.example.com") && message.contains("c.example.com"),
        "names the extra and the missing name: {message}"
    );

    let twice = refused(
        on_follower
            .create(create_request(
                csr(&names),
                &["a.example.com", "A.example.com", "b.example.com"],
                "",
            ))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(twice.message().contains("twice"), "{}", twice.message());

    // The CSR is checked before the names: a name no DNS name rule allows is refused there.
    for bad in ["bad_name.example.com", "*.example.com"] {
        let refusal = refused(
            on_other
                .create(create_request(csr(&[bad]), &[bad], ""))
                .await,
            Code::InvalidArgument,
            "invalid-argument",
        );
        let message = refusal.message();
        assert!(message.contains(bad), "names {bad}: {message}");
        println!("{bad} is refused: {message}");
    }
    let single_label = refused(
        on_other
            .create(create_request(csr(&["bad_name"]), &["bad_name"], ""))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(single_label.message().contains("bad_name"));

    let bad_key = refused(
        on_other
            .create(create_request(csr(&names), &names, "has a space"))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(bad_key.message().contains("request_key"));

    let after_refusals = status(&mut on_leader).await;
    assert_eq!(after_refusals.total, 0, "no refused create stored anything");
    assert_eq!(
        counts(&after_refusals),
        (queues((0, 0), (0, 0), (0, 0)), 0, 0, 0)
    );

    // Without names, the CSR's names are the session's.
    let csr_der = csr(&["b.example.com", "a.example.com"]);
    let session = on_follower
        .create(create_request(csr_der.clone(), &[], "key-1"))
        .await
        .expect("Sessions/Create")
        .into_inner();
    assert_eq!(session.names, names);
    // The same key with another CSR is refused.
    refused(
        on_other
            .create(create_request(csr(&names), &names, "key-1"))
            .await,
        Code::AlreadyExists,
        "request-key-reused",
    );
    assert_eq!(status(&mut on_leader).await.total, 1);

    let unknown = refused(
        on_other
            .get(v1::GetSessionRequest {
                id: session.id + 1_000,
            })
            .await,
        Code::NotFound,
        "unknown-session",
    );
    assert!(
        unknown
            .message()
            .contains(&(session.id + 1_000).to_string())
    );

    refused(
        on_other
            .claim(claim_request(v1::Stage::Done, "w1", 30_000))
            .await,
        Code::InvalidArgument,
        "not-queued",
    );
    refused(
        on_other
            .claim(claim_request(v1::Stage::Unspecified, "w1", 30_000))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    refused(
        on_other
            .claim(claim_request(v1::Stage::MakeChallenge, "w1", 10))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    refused(
        on_other
            .claim(claim_request(
                v1::Stage::MakeChallenge,
                "not a worker",
                30_000,
            ))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );

    let claimed = claim(
        &mut on_leader,
        claim_request(v1::Stage::MakeChallenge, "w1", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let held = &claimed[0];
    let token = held.claim_token;
    let stale = refused(
        on_follower
            .complete(complete(held, token + 1_000, challenges(&names)))
            .await,
        Code::FailedPrecondition,
        "stale-claim",
    );
    assert!(stale.message().contains(&(token + 1_000).to_string()));
    let wrong_stage = refused(
        on_follower
            .complete(complete(
                held,
                token,
                Outcome::Issued(Issued {
                    certificate: "-----BEGIN CERTIFICATE-----".to_owned(),
                }),
            ))
            .await,
        Code::FailedPrecondition,
        "wrong-stage",
    );
    println!("wrong outcome: {}", wrong_stage.message());
    refused(
        on_follower
            .complete(complete(held, token, challenges(&["a.example.com"])))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    refused(
        on_follower
            .complete(v1::CompleteRequest {
                id: held.id,
                claim_token: token,
                outcome: None,
            })
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    refused(
        on_follower
            .complete(complete(
                held,
                token,
                Outcome::Challenges(Challenges {
                    challenges: vec![v1::NewChallenge {
                        name: "a.example.com".to_owned(),
                        token: "not base64url!".to_owned(),
                        key_authorization: "x.y".to_owned(),
                    }],
                }),
            ))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    refused(
        on_follower
            .complete(v1::CompleteRequest {
                id: held.id + 1_000,
                claim_token: token,
                outcome: Some(challenges(&names)),
            })
            .await,
        Code::NotFound,
        "unknown-session",
    );
    refused(
        on_follower
            .acknowledge(v1::AcknowledgeSessionRequest { id: held.id })
            .await,
        Code::FailedPrecondition,
        "not-done",
    );
    // None of it changed the session: still claimed by the same token, which still works.
    assert_eq!(get(&mut on_other, held.id).await, *held);
    let testing = on_other
        .complete(complete(held, token, challenges(&names)))
        .await
        .expect("the right outcome with the right token")
        .into_inner();
    assert_eq!(stage(&testing), v1::Stage::TestChallenge);
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_claim_is_claimed_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut w1 = client(&configs[follower]).await;
    let mut w2 = client(&configs[other]).await;
    let names = ["expiry.example.com"];
    let created = on_leader
        .create(create_request(csr(&names), &names, ""))
        .await
        .expect("Sessions/Create")
        .into_inner();

    let claimed = claim(
        &mut w1,
        claim_request(v1::Stage::MakeChallenge, "w1", 1_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let first = claimed[0].clone();
    assert_eq!(first.id, created.id);
    assert!(
        claim(
            &mut w2,
            claim_request(v1::Stage::MakeChallenge, "w2", 30_000)
        )
        .await
        .is_empty(),
        "a held claim keeps the session from others"
    );

    // w1 does nothing; a tick after its deadline puts the session back in its queue.
    let (claimed, waited) = claim_when_visible(
        &mut w2,
        claim_request(v1::Stage::MakeChallenge, "w2", 30_000),
    )
    .await;
    println!("the expired claim was claimed again after {waited:?}");
    assert!(
        waited < Duration::from_secs(10),
        "reclaimed within a tick or two of the deadline, not {waited:?}"
    );
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let second = &claimed[0];
    assert_eq!(second.id, first.id);
    assert_eq!(second.claimant, "w2");
    assert!(
        second.claim_token > first.claim_token,
        "a new, larger token: {} after {}",
        second.claim_token,
        first.claim_token
    );

    refused(
        w1.complete(complete(&first, first.claim_token, challenges(&names)))
            .await,
        Code::FailedPrecondition,
        "stale-claim",
    );
    assert_eq!(
        get(&mut on_leader, first.id).await,
        *second,
        "w1 changed nothing"
    );
    let testing = w2
        .complete(complete(second, second.claim_token, challenges(&names)))
        .await
        .expect("w2 completes")
        .into_inner();
    assert_eq!(stage(&testing), v1::Stage::TestChallenge);
    // w1 finds out late, again: still stale (the last completion was w2's).
    refused(
        w1.complete(complete(&first, first.claim_token, challenges(&names)))
            .await,
        Code::FailedPrecondition,
        "stale-claim",
    );
    shutdown(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_session_stops_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_follower = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;
    let names = ["kill.example.com", "www.kill.example.com"];
    let created = on_follower
        .create(create_request(csr(&names), &names, ""))
        .await
        .expect("Sessions/Create")
        .into_inner();
    let claimed = claim(
        &mut on_other,
        claim_request(v1::Stage::MakeChallenge, "w1", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    let held = claimed[0].clone();

    let reason = "the customer cancelled the order";
    let killed = on_leader
        .kill(v1::KillSessionRequest {
            id: created.id,
            reason: reason.to_owned(),
        })
        .await
        .expect("Sessions/Kill")
        .into_inner();
    assert!(!killed.live);
    assert!(
        killed.kill_reason.contains(reason),
        "{}",
        killed.kill_reason
    );
    assert_eq!(
        stage(&killed),
        v1::Stage::MakeChallenge,
        "it keeps its stage"
    );
    assert!(
        killed.claimant.is_empty() && killed.claim_token == 0,
        "{killed:?}"
    );
    assert!(
        killed.archived_at_ms > 0,
        "a killed session is archived at once"
    );
    assert_eq!(get(&mut on_other, created.id).await, killed);

    assert!(
        claim(
            &mut on_follower,
            claim_request(v1::Stage::MakeChallenge, "w2", 30_000)
        )
        .await
        .is_empty(),
        "a killed session is never claimed"
    );
    let not_live = refused(
        on_other
            .complete(complete(&held, held.claim_token, challenges(&names)))
            .await,
        Code::FailedPrecondition,
        "not-live",
    );
    assert!(
        not_live.message().contains(reason),
        "{}",
        not_live.message()
    );
    refused(
        on_other
            .extend(v1::ExtendRequest {
                id: held.id,
                claim_token: held.claim_token,
                visibility_ms: 30_000,
            })
            .await,
        Code::FailedPrecondition,
        "not-live",
    );
    refused(
        on_other
            .acknowledge(v1::AcknowledgeSessionRequest { id: held.id })
            .await,
        Code::FailedPrecondition,
        "not-done",
    );
    // Killing again keeps the first reason.
    let again = on_follower
        .kill(v1::KillSessionRequest {
            id: created.id,
            reason: "another reason".to_owned(),
        })
        .await
        .expect("a repeated Kill")
        .into_inner();
    assert_eq!(again, killed);
    assert_eq!(
        counts(&status(&mut on_leader).await),
        (queues((0, 0), (0, 0), (0, 0)), 0, 1, 1),
        "the killed session is archived, in no queue"
    );
    shutdown(nodes).await;
}

fn waiting_claim(stage: v1::Stage, worker: &str, max: u32, wait_ms: u64) -> v1::ClaimRequest {
    v1::ClaimRequest {
        max,
        wait_ms,
        ..claim_request(stage, worker, 30_000)
    }
}

/// A three-node cluster whose leader ticks only once a minute: no apply wakes a waiting claim
/// but the test's own writes, so what wakes it is what the test did (or a timer).
async fn start_quiet_cluster(dir: &Path) -> (Vec<NodeConfig>, Vec<Node>) {
    start_plain_cluster(dir, PATIENCE, |config| {
        config.sessions.daemons = false;
        config.tick_interval_ms = 60_000;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_claim_waits_for_work_and_answers_empty_at_its_deadline() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, mut nodes) = start_quiet_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_other = client(&configs[other]).await;

    // Nothing to claim: the wait ends empty at its deadline, and proposes nothing.
    let started = Instant::now();
    let empty = claim(
        &mut on_other,
        waiting_claim(v1::Stage::MakeChallenge, "lp", 5, 700),
    )
    .await;
    let waited = started.elapsed();
    assert!(empty.is_empty(), "{empty:?}");
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(5),
        "answered at the deadline, not after {waited:?}"
    );
    assert_eq!(
        counts(&status(&mut on_leader).await),
        (queues((0, 0), (0, 0), (0, 0)), 0, 0, 0)
    );

    // A wait on a follower answers with a session created on another node after it began.
    let mut worker = client(&configs[follower]).await;
    let long_poll = tokio::spawn(async move {
        let started = Instant::now();
        let claimed = claim(
            &mut worker,
            waiting_claim(v1::Stage::MakeChallenge, "lp", 5, 30_000),
        )
        .await;
        (claimed, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!long_poll.is_finished(), "the claim waits for work");
    let names = ["long-poll.example.com"];
    let created = on_other
        .create(create_request(csr(&names), &names, ""))
        .await
        .expect("Sessions/Create")
        .into_inner();
    let created_at = Instant::now();
    let (claimed, waited) = tokio::time::timeout(PATIENCE, long_poll)
        .await
        .expect("the long-poll answers")
        .expect("the polling task");
    let after_create = created_at.elapsed();
    println!("the long-poll waited {waited:?}, answering {after_create:?} after the create");
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].id, created.id);
    assert_eq!(claimed[0].claimant, "lp");
    assert!(claimed[0].claim_token > 0);
    assert!(
        waited >= Duration::from_millis(500) && after_create < Duration::from_secs(5),
        "woken by the create, not the 30 s deadline: waited {waited:?}"
    );

    // A session released for later is claimed when it becomes visible: no apply wakes the
    // waiting claim then (the leader ticks once a minute), its own timer does.
    let released = on_other
        .release(v1::ReleaseClaimRequest {
            id: created.id,
            claim_token: claimed[0].claim_token,
            delay_ms: 1_500,
            note: String::new(),
        })
        .await
        .expect("Sessions/Release")
        .into_inner();
    assert_eq!(released.claim_token, 0);
    let started = Instant::now();
    let again = claim(
        &mut on_other,
        waiting_claim(v1::Stage::MakeChallenge, "lp-2", 5, 30_000),
    )
    .await;
    let waited = started.elapsed();
    println!("the released session was claimed after {waited:?}");
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].id, created.id);
    assert!(
        waited >= Duration::from_millis(1_000) && waited < Duration::from_secs(8),
        "claimed when visible again, not at once nor at the deadline: {waited:?}"
    );

    // A wait past the bound is refused before anything waits.
    let too_long = refused(
        on_other
            .claim(waiting_claim(v1::Stage::MakeChallenge, "lp", 5, 60_001))
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(too_long.message().contains("wait_ms"), "{too_long:?}");
    refused(
        on_other
            .claim(waiting_claim(v1::Stage::Done, "lp", 5, 1_000))
            .await,
        Code::InvalidArgument,
        "not-queued",
    );

    // A node that stops ends its waiting claims: UNAVAILABLE, node-stopping.
    let mut worker = client(&configs[follower]).await;
    let long_poll = tokio::spawn(async move {
        worker
            .claim(waiting_claim(v1::Stage::Issue, "lp", 5, 60_000))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!long_poll.is_finished());
    let stopping = nodes.remove(follower);
    tokio::time::timeout(PATIENCE, stopping.shutdown())
        .await
        .expect("the node stops without waiting for its workers");
    let cut = tokio::time::timeout(PATIENCE, long_poll)
        .await
        .expect("the long-poll ends")
        .expect("the polling task");
    refused(cut, Code::Unavailable, "node-stopping");
    shutdown(nodes).await;
}

/// Complete requests for `sessions` (claimed in makechallenge), with the right outcome.
fn make_challenges(session: &v1::Session) -> v1::CompleteRequest {
    let names: Vec<&str> = session.names.iter().map(String::as_str).collect();
    complete(session, session.claim_token, challenges(&names))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_completes_is_answered_item_by_item() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut worker = client(&configs[follower]).await;
    let mut on_other = client(&configs[other]).await;
    for name in ["a.batch.example", "b.batch.example", "c.batch.example"] {
        on_other
            .create(create_request(csr(&[name]), &[name], ""))
            .await
            .expect("Sessions/Create");
    }
    let claimed = claim(
        &mut worker,
        claim_request(v1::Stage::MakeChallenge, "batcher", 30_000),
    )
    .await;
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    let (a, b, c) = (&claimed[0], &claimed[1], &claimed[2]);

    // Refused whole, before Raft: no items, too many, an item malformed in itself.
    refused(
        worker
            .complete_batch(v1::CompleteSessionBatchRequest { items: Vec::new() })
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    let too_many = refused(
        worker
            .complete_batch(v1::CompleteSessionBatchRequest {
                items: vec![make_challenges(a); 101],
            })
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(too_many.message().contains("101"), "{too_many:?}");
    let malformed = refused(
        worker
            .complete_batch(v1::CompleteSessionBatchRequest {
                items: vec![
                    make_challenges(a),
                    v1::CompleteRequest {
                        outcome: None,
                        ..make_challenges(b)
                    },
                ],
            })
            .await,
        Code::InvalidArgument,
        "invalid-argument",
    );
    assert!(malformed.message().contains("items[1]"), "{malformed:?}");
    assert_eq!(
        counts(&status(&mut on_leader).await).0,
        queues((0, 3), (0, 0), (0, 0)),
        "the refused batches changed nothing"
    );

    // One write, answered item by item: a stale token and a wrong outcome fail their items only.
    let batch = v1::CompleteSessionBatchRequest {
        items: vec![
            make_challenges(a),
            v1::CompleteRequest {
                claim_token: b.claim_token + 1_000,
                ..make_challenges(b)
            },
            complete(
                c,
                c.claim_token,
                Outcome::Issued(Issued {
                    certificate: "-----BEGIN CERTIFICATE-----".to_owned(),
                }),
            ),
        ],
    };
    let results = worker
        .complete_batch(batch.clone())
        .await
        .expect("Sessions/CompleteBatch")
        .into_inner()
        .results;
    let summary: Vec<(u64, &str, u32, v1::Stage)> = results
        .iter()
        .map(|result| {
            let stage = v1::Stage::try_from(result.stage).expect("a stage");
            (result.id, result.error.as_str(), result.code, stage)
        })
        .collect();
    assert_eq!(
        summary,
        [
            (a.id, "", 0, v1::Stage::TestChallenge),
            (
                b.id,
                "stale-claim",
                Code::FailedPrecondition as u32,
                v1::Stage::Unspecified
            ),
            (
                c.id,
                "wrong-stage",
                Code::FailedPrecondition as u32,
                v1::Stage::Unspecified
            ),
        ]
    );
    assert!(results[0].live && results[0].message.is_empty());
    assert!(results[1].message.contains("claim token"), "{results:?}");
    assert_eq!(
        stage(&get(&mut on_other, a.id).await),
        v1::Stage::TestChallenge
    );
    for held in [b, c] {
        assert_eq!(
            get(&mut on_other, held.id).await,
            *held,
            "a failed item changed nothing"
        );
    }

    // The same batch again: the applied item replays its answer; the others fail alike.
    let again = on_other
        .complete_batch(batch)
        .await
        .expect("Sessions/CompleteBatch again")
        .into_inner()
        .results;
    assert_eq!(again, results);
    // The failed items go through in a batch of their own.
    let rest = worker
        .complete_batch(v1::CompleteSessionBatchRequest {
            items: vec![make_challenges(b), make_challenges(c)],
        })
        .await
        .expect("Sessions/CompleteBatch")
        .into_inner()
        .results;
    assert!(
        rest.iter().all(|result| result.error.is_empty()),
        "{rest:?}"
    );
    assert_eq!(
        counts(&status(&mut on_leader).await).0,
        queues((0, 0), (3, 0), (0, 0))
    );
    shutdown(nodes).await;
}

/// A worker's side of a `Work` stream, spoken through the raw stubs.
struct WorkStream {
    requests: tokio::sync::mpsc::Sender<v1::SessionWorkRequest>,
    events: tonic::Streaming<v1::SessionWorkEvent>,
}

fn start_message(stage: v1::Stage, credit: u32) -> v1::SessionWorkRequest {
    v1::SessionWorkRequest {
        kind: Some(v1::session_work_request::Kind::Start(
            v1::SessionWorkStart {
                stage: stage.into(),
                worker: "streamer".to_owned(),
                visibility_ms: 30_000,
                credit,
            },
        )),
    }
}

/// Opens a `Work` stream whose first message is `first`.
async fn open_work(
    client: &mut SessionsClient<Channel>,
    first: v1::SessionWorkRequest,
) -> Result<WorkStream, Status> {
    let (requests, receiver) = tokio::sync::mpsc::channel(16);
    requests
        .send(first)
        .await
        .expect("room for the first message");
    let outbound = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|message| (message, receiver))
    });
    let events = client.work(outbound).await?.into_inner();
    Ok(WorkStream { requests, events })
}

impl WorkStream {
    async fn send(&self, kind: v1::session_work_request::Kind) {
        self.requests
            .send(v1::SessionWorkRequest { kind: Some(kind) })
            .await
            .expect("the stream is open");
    }

    async fn grant(&self, credit: u32) {
        self.send(v1::session_work_request::Kind::Credit(credit))
            .await;
    }

    async fn step(&self, step_id: u64, step: v1::session_work_step::Step) {
        let step = v1::SessionWorkStep {
            step_id,
            step: Some(step),
        };
        self.send(v1::session_work_request::Kind::Step(step)).await;
    }

    /// The next event, within the test's patience.
    async fn next(&mut self) -> Result<Option<v1::session_work_event::Kind>, Status> {
        let message = tokio::time::timeout(PATIENCE, self.events.message())
            .await
            .expect("an event within the test's patience")?;
        Ok(message.map(|event| event.kind.expect("an event of a known kind")))
    }

    /// The next event, which must be a pushed session.
    async fn claimed(&mut self) -> v1::Session {
        match self.next().await.expect("the stream is open") {
            Some(v1::session_work_event::Kind::Claimed(session)) => session,
            other => panic!("expected a pushed session, got {other:?}"),
        }
    }

    /// That nothing is pushed for a while.
    async fn nothing_for(&mut self, quiet: Duration) {
        if let Ok(event) = tokio::time::timeout(quiet, self.events.message()).await {
            panic!("expected nothing, got {event:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_stream_pushes_claims_within_its_credit_and_answers_steps() {
    use v1::session_work_event::Kind as Event;
    use v1::session_work_step::Step;

    let dir = tempfile::tempdir().expect("temp dir");
    let (configs, mut nodes) = start_cluster(dir.path()).await;
    let (leader, follower, other) = roles(&nodes).await;
    let mut on_leader = client(&configs[leader]).await;
    let mut on_other = client(&configs[other]).await;
    let mut worker = client(&configs[follower]).await;
    let mut created = Vec::new();
    for name in ["a.stream.example", "b.stream.example", "c.stream.example"] {
        let session = on_other
            .create(create_request(csr(&[name]), &[name], ""))
            .await
            .expect("Sessions/Create")
            .into_inner();
        created.push(session.id);
    }

    // Bad starts are the call's refusal.
    refused(
        open_work(&mut worker, start_message(v1::Stage::Done, 1))
            .await
            .map(|stream| Response::new(stream.events)),
        Code::InvalidArgument,
        "not-queued",
    );
    let credit_first = v1::SessionWorkRequest {
        kind: Some(v1::session_work_request::Kind::Credit(1)),
    };
    refused(
        open_work(&mut worker, credit_first)
            .await
            .map(|stream| Response::new(stream.events)),
        Code::InvalidArgument,
        "invalid-argument",
    );
    refused(
        open_work(&mut worker, start_message(v1::Stage::MakeChallenge, 1_001))
            .await
            .map(|stream| Response::new(stream.events)),
        Code::InvalidArgument,
        "invalid-argument",
    );

    // Two credits: two sessions pushed, oldest first, and no third.
    let mut stream = open_work(&mut worker, start_message(v1::Stage::MakeChallenge, 2))
        .await
        .expect("Sessions/Work");
    let first = stream.claimed().await;
    let second = stream.claimed().await;
    assert_eq!([first.id, second.id], created[..2]);
    assert_eq!(first.claimant, "streamer");
    assert!(first.claim_token > 0 && first.claim_deadline_ms > 0);
    stream.nothing_for(Duration::from_millis(500)).await;
    assert_eq!(
        counts(&status(&mut on_leader).await).0,
        queues((1, 2), (0, 0), (0, 0)),
        "the third waits: no credit for it"
    );

    // More credit: the third at once, and a session created later as soon as it is applied.
    stream.grant(5).await;
    let third = stream.claimed().await;
    assert_eq!(third.id, created[2]);
    stream.nothing_for(Duration::from_millis(300)).await;
    let name = "d.stream.example";
    let late = on_other
        .create(create_request(csr(&[name]), &[name], ""))
        .await
        .expect("Sessions/Create")
        .into_inner();
    let created_at = Instant::now();
    let fourth = stream.claimed().await;
    assert_eq!(fourth.id, late.id);
    println!("pushed {:?} after its create", created_at.elapsed());
    assert!(created_at.elapsed() < Duration::from_secs(5));

    // Steps, each answered under its id: a complete, an extend, a release, a fail, a stale
    // complete and a malformed step.
    stream
        .step(7, Step::Complete(make_challenges(&first)))
        .await;
    stream
        .step(
            8,
            Step::Extend(v1::ExtendRequest {
                id: second.id,
                claim_token: second.claim_token,
                visibility_ms: 60_000,
            }),
        )
        .await;
    stream
        .step(
            9,
            Step::Release(v1::ReleaseClaimRequest {
                id: third.id,
                claim_token: third.claim_token,
                delay_ms: 60_000,
                note: "upstream busy".to_owned(),
            }),
        )
        .await;
    stream
        .step(
            10,
            Step::Fail(v1::FailRequest {
                id: fourth.id,
                claim_token: fourth.claim_token,
                reason: "CAA forbids it".to_owned(),
            }),
        )
        .await;
    stream
        .step(
            11,
            Step::Complete(v1::CompleteRequest {
                claim_token: second.claim_token + 1_000,
                ..make_challenges(&second)
            }),
        )
        .await;
    stream
        .step(
            12,
            Step::Release(v1::ReleaseClaimRequest {
                id: second.id,
                claim_token: second.claim_token,
                delay_ms: u64::MAX,
                note: String::new(),
            }),
        )
        .await;
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 6 {
        match stream.next().await.expect("the stream is open") {
            Some(Event::Answer(answer)) => {
                let result = answer.result.expect("a result");
                assert!(answers.insert(answer.step_id, result).is_none());
            }
            other => panic!("expected answers, got {other:?}"),
        }
    }
    let brief = |step_id: u64| {
        let result = &answers[&step_id];
        (result.id, result.error.as_str(), result.code)
    };
    assert_eq!(brief(7), (first.id, "", 0));
    assert_eq!(
        v1::Stage::try_from(answers[&7].stage),
        Ok(v1::Stage::TestChallenge)
    );
    assert_eq!(brief(8), (second.id, "", 0));
    assert!(
        answers[&8].deadline_ms > second.claim_deadline_ms,
        "extended"
    );
    assert_eq!(brief(9), (third.id, "", 0));
    assert!(
        answers[&9].deadline_ms > now_ms() + 50_000,
        "visible after the delay"
    );
    assert_eq!(brief(10), (fourth.id, "", 0));
    assert_eq!(
        v1::Stage::try_from(answers[&10].stage),
        Ok(v1::Stage::Failed)
    );
    assert_eq!(
        brief(11),
        (second.id, "stale-claim", Code::FailedPrecondition as u32)
    );
    assert_eq!(
        brief(12),
        (second.id, "invalid-argument", Code::InvalidArgument as u32)
    );
    assert_eq!(
        stage(&get(&mut on_other, first.id).await),
        v1::Stage::TestChallenge
    );
    assert_eq!(
        stage(&get(&mut on_other, fourth.id).await),
        v1::Stage::Failed
    );
    let held = get(&mut on_other, second.id).await;
    assert_eq!(
        held.claim_token, second.claim_token,
        "still held by the stream"
    );
    assert_eq!(held.claim_deadline_ms, answers[&8].deadline_ms);

    // Credit past the bound ends the stream: 3 outstanding (7 granted, 4 pushed) and 998 more
    // is 1001.
    stream.grant(998).await;
    let ended = stream.next().await.expect_err("the stream ends");
    assert_eq!(ended.code(), Code::InvalidArgument, "{ended:?}");
    assert!(ended.message().contains("1001"), "{ended:?}");

    // A worker that closes its side gets its steps answered, then the end of the stream.
    let closing = open_work(&mut worker, start_message(v1::Stage::Issue, 0))
        .await
        .expect("Sessions/Work");
    closing
        .step(1, Step::Complete(make_challenges(&first)))
        .await;
    let WorkStream {
        requests,
        mut events,
    } = closing;
    drop(requests);
    let answer = events
        .message()
        .await
        .expect("an answer")
        .expect("an event");
    let Some(Event::Answer(answer)) = answer.kind else {
        panic!("expected an answer, got {answer:?}");
    };
    assert_eq!(answer.step_id, 1);
    assert_eq!(
        answer.result.as_ref(),
        Some(&answers[&7]),
        "the same complete again, on another stream, replays its answer"
    );
    assert!(events.message().await.expect("a clean end").is_none());

    // A node that stops ends its streams: UNAVAILABLE, node-stopping.
    let mut waiting = open_work(&mut worker, start_message(v1::Stage::Issue, 3))
        .await
        .expect("Sessions/Work");
    let stopping = nodes.remove(follower);
    tokio::time::timeout(PATIENCE, stopping.shutdown())
        .await
        .expect("the node stops without waiting for its workers");
    let cut = waiting.next().await.expect_err("the stream is cut");
    refused::<()>(Err(cut), Code::Unavailable, "node-stopping");

    // The worker goes on through another node: claims belong to the worker, not to a stream,
    // so a claim taken on the first stream (whose node is gone) is completed by a step on a
    // new stream elsewhere, under the same token.
    let mut resumed = open_work(&mut on_other, start_message(v1::Stage::MakeChallenge, 0))
        .await
        .expect("Sessions/Work on another node");
    resumed
        .step(1, Step::Complete(make_challenges(&second)))
        .await;
    let Some(Event::Answer(answer)) = resumed.next().await.expect("the stream is open") else {
        panic!("expected the step's answer");
    };
    let result = answer.result.expect("a result");
    assert_eq!((answer.step_id, result.id, result.code), (1, second.id, 0));
    assert_eq!(
        v1::Stage::try_from(result.stage),
        Ok(v1::Stage::TestChallenge)
    );
    assert_eq!(
        stage(&get(&mut on_other, second.id).await),
        v1::Stage::TestChallenge
    );
    shutdown(nodes).await;
}
