//! Each checker on a history that must pass, and on one history per way its invariant can break;
//! a failure's detail must name the culprit (session, token, node).

use super::*;
use crate::judge::{assert_fails, assert_passes};

/// When the faults heal, how long a session then has to end, and when the run ends.
const HEAL_MS: u64 = 10_000;
const BOUND_MS: u64 = 5_000;
const END_MS: u64 = 60_000;

/// How far the machine clock runs ahead of the global one in the claim histories, so that a
/// checker comparing the wrong clocks gets a different answer.
const SKEW_MS: u64 = 50_000;
/// The visibility a claim is granted with.
const VISIBILITY_MS: u64 = 30_000;

fn created(client: u32, id: u64, served: bool, acknowledged_ms: u64) -> CreatedSession {
    CreatedSession {
        client,
        id,
        names: vec![format!("s{id}.example.com")],
        served,
        acknowledged_ms,
    }
}

fn state(stage: &str, live: bool, cert: Option<&[u8]>) -> FinalSession {
    FinalSession {
        stage: stage.to_owned(),
        live,
        cert: cert.map(<[u8]>::to_vec),
    }
}

fn done(cert: &[u8]) -> FinalSession {
    state("done", true, Some(cert))
}

/// Every node in `nodes` holding the same `sessions`.
fn finals(
    nodes: &[u64],
    sessions: &[(u64, FinalSession)],
) -> BTreeMap<u64, BTreeMap<u64, FinalSession>> {
    nodes
        .iter()
        .map(|node| (*node, sessions.iter().cloned().collect()))
        .collect()
}

/// One node holding one session.
fn finals_with(session: u64, held: FinalSession) -> BTreeMap<u64, BTreeMap<u64, FinalSession>> {
    finals(&[1], &[(session, held)])
}

fn seen(session: u64, cert: &[u8], acknowledged_ms: Option<u64>) -> SeenCertificate {
    SeenCertificate {
        session,
        cert: cert.to_vec(),
        seen_ms: 7_000,
        acknowledged_ms,
    }
}

/// A claim granted at `granted_ms` (machine time `SKEW_MS` later) for `VISIBILITY_MS`.
fn claim(
    worker: &str,
    session: u64,
    token: u64,
    granted_ms: u64,
    finished_ms: Option<u64>,
) -> ClaimRecord {
    ClaimRecord {
        worker: worker.to_owned(),
        session,
        token,
        granted_ms,
        granted_machine_ms: granted_ms + SKEW_MS,
        deadline_machine_ms: granted_ms + SKEW_MS + VISIBILITY_MS,
        first_deadline_machine_ms: granted_ms + SKEW_MS + VISIBILITY_MS,
        finished_ms,
        visible_at_machine_ms: None,
    }
}

fn order(id: &str, session: u64, csr: &[u8], created_ms: u64, issued: &[&[u8]]) -> UpstreamOrder {
    UpstreamOrder {
        id: id.to_owned(),
        key: order_key(session),
        csr: csr.to_vec(),
        created_ms,
        issued: issued.iter().map(|cert| cert.to_vec()).collect(),
    }
}

// sessions_durable

#[test]
fn durable_passes_when_every_node_holds_every_session_and_the_seen_certificate() {
    let created = [created(1, 41, true, 2_000), created(2, 42, false, 3_000)];
    let finals = finals(
        &[1, 2, 3],
        &[
            (41, done(b"cert-41")),
            (42, state("testchallenge", false, None)),
        ],
    );
    let verdict = sessions_durable(&created, &finals, &[seen(41, b"cert-41", Some(8_000))]);
    assert_eq!(verdict.checker, "sessions-durable");
    assert_passes(
        &verdict,
        "2 acknowledged sessions and 1 fetched certificates on each of 3 nodes",
    );
}

#[test]
fn durable_fails_when_a_node_lost_an_acknowledged_session() {
    let created = [created(1, 41, true, 2_000), created(2, 42, true, 3_000)];
    let mut finals = finals(
        &[1, 2, 3],
        &[(41, done(b"cert-41")), (42, done(b"cert-42"))],
    );
    finals.get_mut(&2).unwrap().remove(&42);
    let verdict = sessions_durable(&created, &finals, &[]);
    assert_fails(
        &verdict,
        "n2 lost session 42 (client 2, created at 3000 ms)",
    );
    assert!(!verdict.detail.contains("n1"), "{}", verdict.detail);
    assert!(!verdict.detail.contains("n3"), "{}", verdict.detail);
    assert!(!verdict.detail.contains("session 41"), "{}", verdict.detail);
}

#[test]
fn durable_fails_when_a_node_holds_another_certificate_than_a_client_saw() {
    let created = [created(1, 41, true, 2_000)];
    let mut finals = finals(&[1, 2, 3], &[(41, done(b"cert-41"))]);
    finals.get_mut(&3).unwrap().insert(41, done(b"cert-other"));
    let verdict = sessions_durable(&created, &finals, &[seen(41, b"cert-41", None)]);
    assert_fails(
        &verdict,
        "n3 holds another certificate for session 41, not the certificate a client saw at 7000 ms",
    );
    assert!(!verdict.detail.contains("n1"), "{}", verdict.detail);
}

#[test]
fn durable_fails_when_a_node_holds_no_certificate_a_client_saw() {
    let created = [created(1, 41, true, 2_000)];
    let mut finals = finals(&[1, 2], &[(41, done(b"cert-41"))]);
    finals
        .get_mut(&1)
        .unwrap()
        .insert(41, state("issue", true, None));
    let verdict = sessions_durable(&created, &finals, &[seen(41, b"cert-41", None)]);
    assert_fails(&verdict, "n1 holds no certificate for session 41");
}

#[test]
fn durable_fails_when_a_node_lost_a_session_whose_certificate_was_seen() {
    // The client saw the certificate though its creation was never acknowledged (the answer
    // was lost): the session must still be there.
    let mut finals = finals(&[1, 2], &[(41, done(b"cert-41"))]);
    finals.get_mut(&2).unwrap().remove(&41);
    let verdict = sessions_durable(&[], &finals, &[seen(41, b"cert-41", None)]);
    assert_fails(
        &verdict,
        "n2 lost session 41 whose certificate a client saw at 7000 ms",
    );
}

#[test]
fn durable_fails_when_no_node_caught_up() {
    let verdict = sessions_durable(&[created(1, 41, true, 2_000)], &BTreeMap::new(), &[]);
    assert_fails(&verdict, "no node caught up to be read");
}

// sessions_terminal

fn terminal_at(ends: &[(u64, u64, FinalSession)]) -> BTreeMap<u64, (u64, FinalSession)> {
    ends.iter()
        .map(|(session, at_ms, state)| (*session, (*at_ms, state.clone())))
        .collect()
}

#[test]
fn terminal_passes_when_served_sessions_end_done_and_the_others_end_in_time() {
    let created = [
        created(1, 41, true, 2_000),
        created(2, 42, false, 3_000),
        created(3, 43, false, 4_000),
        // Due at 63 000 ms, after the run's end: not judged.
        created(4, 44, true, 58_000),
    ];
    let ends = terminal_at(&[
        // Exactly at the bound.
        (41, HEAL_MS + BOUND_MS, done(b"cert-41")),
        (42, 12_000, state("testchallenge", false, None)),
        (43, 1_000, state("failed", true, None)),
    ]);
    let verdict = sessions_terminal(&created, &ends, HEAL_MS, BOUND_MS, END_MS);
    assert_eq!(verdict.checker, "sessions-terminal");
    assert_passes(
        &verdict,
        "4 sessions: 1 done, 2 failed or killed (unserved challenges), 1 created too late to judge",
    );
}

#[test]
fn terminal_fails_when_a_session_ends_after_its_bound() {
    let created = [created(1, 41, true, 2_000), created(2, 42, true, 2_000)];
    let ends = terminal_at(&[
        (41, HEAL_MS + BOUND_MS + 1, done(b"cert-41")),
        (42, 11_000, done(b"cert-42")),
    ]);
    let verdict = sessions_terminal(&created, &ends, HEAL_MS, BOUND_MS, END_MS);
    assert_fails(
        &verdict,
        "session 41 (client 1) ended at 15001 ms, after its bound 15000 ms",
    );
    assert!(!verdict.detail.contains("session 42"), "{}", verdict.detail);
}

#[test]
fn terminal_fails_when_a_session_never_ends_though_its_bound_passed() {
    // Due at 59 000 ms, before the run's end at 60 000 ms.
    let created = [created(1, 41, true, 54_000)];
    let verdict = sessions_terminal(&created, &BTreeMap::new(), HEAL_MS, BOUND_MS, END_MS);
    assert_fails(
        &verdict,
        "session 41 (client 1, created at 54000 ms) had not ended by 59000 ms",
    );
}

#[test]
fn terminal_fails_when_a_served_session_is_killed_or_failed() {
    let created = [created(1, 41, true, 2_000), created(2, 42, true, 2_000)];
    let ends = terminal_at(&[
        (41, 12_000, state("makechallenge", false, None)),
        (42, 13_000, state("failed", true, None)),
    ]);
    let verdict = sessions_terminal(&created, &ends, HEAL_MS, BOUND_MS, END_MS);
    assert_fails(
        &verdict,
        "session 41 (client 1) had every challenge served but ended makechallenge (killed)",
    );
    assert_fails(
        &verdict,
        "session 42 (client 2) had every challenge served but ended failed",
    );
}

#[test]
fn terminal_passes_when_an_unserved_session_is_killed() {
    let created = [created(1, 41, false, 2_000)];
    let ends = terminal_at(&[(41, 12_000, state("testchallenge", false, None))]);
    let verdict = sessions_terminal(&created, &ends, HEAL_MS, BOUND_MS, END_MS);
    assert_passes(&verdict, "1 sessions: 0 done, 1 failed or killed");
}

#[test]
fn terminal_fails_when_an_unserved_session_ends_done() {
    // Its client left a challenge unserved: it must end killed or failed, never done.
    let created = [created(1, 41, false, 2_000)];
    let ends = terminal_at(&[(41, 12_000, done(b"cert-41"))]);
    let verdict = sessions_terminal(&created, &ends, HEAL_MS, BOUND_MS, END_MS);
    assert_fails(
        &verdict,
        "session 41 (client 1) ended done though not every challenge was served",
    );
}

#[test]
fn terminal_passes_when_a_session_is_created_too_late_to_judge() {
    // Due at 60 001 ms, one past the run's end.
    let created = [created(1, 41, true, END_MS - BOUND_MS + 1)];
    let verdict = sessions_terminal(&created, &BTreeMap::new(), HEAL_MS, BOUND_MS, END_MS);
    assert_passes(&verdict, "1 created too late to judge");
}

#[test]
fn terminal_counts_the_bound_from_creation_when_it_is_after_healing() {
    // Created at 20 000 ms, after healing at 10 000 ms: due at 25 000 ms, not 15 000 ms.
    let created = [created(1, 41, true, 20_000)];
    let in_time = terminal_at(&[(41, 25_000, done(b"cert-41"))]);
    let verdict = sessions_terminal(&created, &in_time, HEAL_MS, BOUND_MS, END_MS);
    assert_passes(&verdict, "1 done");
    let late = terminal_at(&[(41, 25_001, done(b"cert-41"))]);
    let verdict = sessions_terminal(&created, &late, HEAL_MS, BOUND_MS, END_MS);
    assert_fails(
        &verdict,
        "session 41 (client 1) ended at 25001 ms, after its bound 25000 ms",
    );
}

// claims_exclusive

#[test]
fn exclusive_passes_when_each_claim_is_granted_after_the_previous_one_finished() {
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(5_000)),
        // Granted the moment the first worker finished.
        claim("node-2", 42, 200, 5_000, Some(9_000)),
        claim("worker-x", 42, 300, 9_500, None),
        // Another session, overlapping in time, is no conflict.
        claim("node-3", 43, 150, 2_000, Some(8_000)),
    ];
    let verdict = claims_exclusive(&claims);
    assert_eq!(verdict.checker, "claims-exclusive");
    assert_passes(&verdict, "4 claims");
}

#[test]
fn exclusive_fails_when_a_claim_is_granted_while_the_earlier_worker_still_works_it() {
    // node-1's deadline is machine 81 000 ms; node-2 is granted at machine 70 000 ms.
    let claims = [
        claim("node-1", 42, 100, 1_000, None),
        claim("node-2", 42, 200, 20_000, Some(25_000)),
    ];
    let verdict = claims_exclusive(&claims);
    assert_fails(
        &verdict,
        "session 42: node-2 was granted token 200 at 20000 ms (machine 70000 ms) while node-1 \
         still worked under token 100 (deadline 81000 ms)",
    );
    // Finishing after the later grant is still working it.
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(20_001)),
        claim("node-2", 42, 200, 20_000, Some(25_000)),
    ];
    assert_fails(
        &claims_exclusive(&claims),
        "node-1 still worked under token 100",
    );
}

#[test]
fn exclusive_passes_when_the_earlier_worker_finished_before_the_later_grant() {
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(19_999)),
        claim("node-2", 42, 200, 20_000, Some(25_000)),
    ];
    assert_passes(&claims_exclusive(&claims), "2 claims");
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(20_000)),
        claim("node-2", 42, 200, 20_000, Some(25_000)),
    ];
    assert_passes(&claims_exclusive(&claims), "2 claims");
}

#[test]
fn exclusive_passes_when_the_earlier_claim_had_expired_by_machine_time() {
    // node-1 never finished; node-2 is granted at machine 81 000 ms, node-1's deadline. On the
    // global clock the grant (31 000 ms) is before the deadline: only machine time counts.
    let claims = [
        claim("node-1", 42, 100, 1_000, None),
        claim("node-2", 42, 200, 31_000, Some(35_000)),
    ];
    assert_passes(&claims_exclusive(&claims), "2 claims");
    // One machine millisecond earlier, it had not expired.
    let claims = [
        claim("node-1", 42, 100, 1_000, None),
        claim("node-2", 42, 200, 30_999, Some(35_000)),
    ];
    assert_fails(
        &claims_exclusive(&claims),
        "node-2 was granted token 200 at 30999 ms",
    );
}

#[test]
fn exclusive_fails_when_extensions_push_the_deadline_past_the_later_grant() {
    let mut extended = claim("node-1", 42, 100, 1_000, None);
    extended.deadline_machine_ms = 101_000;
    // Granted at machine 85 000 ms: after the first deadline, before the extended one.
    let claims = [extended, claim("node-2", 42, 200, 35_000, Some(40_000))];
    assert_fails(
        &claims_exclusive(&claims),
        "node-2 was granted token 200 at 35000 ms (machine 85000 ms) while node-1 still worked \
         under token 100 (deadline 101000 ms)",
    );
}

#[test]
fn exclusive_fails_when_one_token_is_granted_to_two_workers() {
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(2_000)),
        claim("worker-x", 42, 100, 3_000, Some(4_000)),
    ];
    assert_fails(
        &claims_exclusive(&claims),
        "session 42: token 100 granted to both node-1 and worker-x",
    );
    // The same token recorded twice for one worker is no conflict.
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(2_000)),
        claim("node-1", 42, 100, 1_000, Some(2_000)),
    ];
    assert_passes(&claims_exclusive(&claims), "2 claims");
}

// claims_redelivered

#[test]
fn redelivered_passes_when_an_abandoned_claim_is_followed_by_a_later_one() {
    let claims = [
        claim("node-1", 42, 100, 1_000, None),
        claim("node-2", 42, 200, 31_000, Some(35_000)),
    ];
    let finals = finals(&[1, 2], &[(42, state("issue", true, None))]);
    let verdict = claims_redelivered(&claims, &finals);
    assert_eq!(verdict.checker, "claims-redelivered");
    assert_passes(&verdict, "1 claims abandoned");
}

#[test]
fn redelivered_passes_when_the_abandoned_session_ended_on_some_node() {
    let claims = [claim("node-1", 42, 100, 1_000, None)];
    let mut finals = finals(&[1, 2], &[(42, state("issue", true, None))]);
    finals.get_mut(&2).unwrap().insert(42, done(b"cert-42"));
    assert_passes(&claims_redelivered(&claims, &finals), "1 claims abandoned");
    // Killed counts as ended too.
    let finals = finals_with(42, state("issue", false, None));
    assert_passes(&claims_redelivered(&claims, &finals), "1 claims abandoned");
}

#[test]
fn redelivered_fails_when_an_abandoned_claim_is_never_taken_up_again() {
    let claims = [
        claim("node-1", 42, 100, 1_000, Some(2_000)),
        claim("node-2", 42, 200, 3_000, None),
        // A later token on another session does not take up session 42.
        claim("node-3", 43, 300, 4_000, Some(5_000)),
    ];
    let finals = finals(
        &[1, 2],
        &[(42, state("issue", true, None)), (43, done(b"c"))],
    );
    assert_fails(
        &claims_redelivered(&claims, &finals),
        "session 42: node-2 abandoned token 200 (deadline 83000 ms) and nobody claimed it again",
    );
    // Nor does a session no node holds count as ended.
    assert_fails(
        &claims_redelivered(&claims, &BTreeMap::new()),
        "node-2 abandoned token 200",
    );
}

// issued_once

#[test]
fn issued_once_passes_for_one_order_and_one_certificate_per_session() {
    let orders = [
        order("o1", 41, b"csr-41", 5_000, &[b"cert-41"]),
        order("o2", 42, b"csr-42", 6_000, &[b"cert-42"]),
        // Not issued yet, nobody saw it.
        order("o3", 43, b"csr-43", 7_000, &[]),
    ];
    let seen = [
        seen(41, b"cert-41", Some(9_000)),
        // Taken at the moment of the acknowledgement is not after it.
        seen(42, b"cert-42", Some(6_000)),
    ];
    let verdict = issued_once(&orders, &seen);
    assert_eq!(verdict.checker, "issued-once");
    assert_passes(
        &verdict,
        "3 orders, 2 certificates issued, 2 seen by clients",
    );
}

#[test]
fn issued_once_fails_when_a_session_is_ordered_twice() {
    let orders = [
        order("o1", 41, b"csr-41", 5_000, &[b"cert-41"]),
        order("o2", 41, b"csr-41", 6_000, &[]),
    ];
    assert_fails(
        &issued_once(&orders, &[]),
        r#"certus-session-41 was ordered 2 times: ["o1", "o2"]"#,
    );
}

#[test]
fn issued_once_fails_when_one_csr_is_ordered_under_two_keys() {
    let orders = [
        order("o1", 41, b"csr-41", 5_000, &[b"cert-41"]),
        order("o2", 42, b"csr-41", 6_000, &[b"cert-42"]),
    ];
    assert_fails(
        &issued_once(&orders, &[]),
        r#"one CSR was ordered under several keys: {"certus-session-41", "certus-session-42"}"#,
    );
}

#[test]
fn issued_once_fails_when_an_order_issues_two_certificates() {
    let orders = [order(
        "o1",
        41,
        b"csr-41",
        5_000,
        &[b"cert-41", b"cert-41b"],
    )];
    assert_fails(
        &issued_once(&orders, &[]),
        "order o1 (certus-session-41) was issued 2 different certificates",
    );
}

#[test]
fn issued_once_fails_when_a_client_saw_another_certificate_than_the_order_issued() {
    let orders = [order("o1", 41, b"csr-41", 5_000, &[b"cert-41"])];
    let expected = "session 41: a client saw a certificate that is not what order o1 issued";
    assert_fails(
        &issued_once(&orders, &[seen(41, b"forged", None)]),
        expected,
    );
    // Nor one from an order that has issued nothing yet.
    let pending = [order("o1", 41, b"csr-41", 5_000, &[])];
    assert_fails(
        &issued_once(&pending, &[seen(41, b"cert-41", None)]),
        expected,
    );
}

#[test]
fn issued_once_fails_when_a_client_saw_a_certificate_with_no_order() {
    let orders = [order("o1", 41, b"csr-41", 5_000, &[b"cert-41"])];
    assert_fails(
        &issued_once(&orders, &[seen(43, b"cert-41", None)]),
        "session 43: a client saw a certificate the upstream CA never issued",
    );
}

#[test]
fn issued_once_fails_when_an_order_is_taken_after_the_client_acknowledged() {
    let orders = [order("o1", 41, b"csr-41", 9_000, &[b"cert-41"])];
    assert_fails(
        &issued_once(&orders, &[seen(41, b"cert-41", Some(8_000))]),
        "session 41: order o1 was taken at 9000 ms, after the client acknowledged at 8000 ms",
    );
    // Without an acknowledgement there is nothing to be after.
    assert_passes(
        &issued_once(&orders, &[seen(41, b"cert-41", None)]),
        "1 orders, 1 certificates issued, 1 seen by clients",
    );
}

// expired_claims_returned

#[test]
fn expired_claims_returned_passes_when_overdue_claims_are_seen_only_before_healing() {
    let overdue = [(5_000, 1, 42, 100, 2_000), (HEAL_MS - 1, 2, 43, 200, 900)];
    let verdict = expired_claims_returned(&overdue, HEAL_MS);
    assert_eq!(verdict.checker, "expired-claims-returned");
    assert_passes(&verdict, "every expired claim went back");
    assert_passes(&expired_claims_returned(&[], HEAL_MS), "after healing");
}

#[test]
fn expired_claims_returned_fails_when_a_claim_is_overdue_after_healing() {
    let overdue = [(5_000, 1, 42, 100, 2_000), (HEAL_MS, 2, 43, 200, 1_500)];
    let verdict = expired_claims_returned(&overdue, HEAL_MS);
    assert_fails(
        &verdict,
        "at 10000 ms n2's state still held session 43 under token 200, 1500 ms past its deadline",
    );
    assert!(!verdict.detail.contains("session 42"), "{}", verdict.detail);
}

#[test]
fn a_long_list_of_problems_is_cut_to_ten_and_counted() {
    let overdue: Vec<(u64, u64, u64, u64, u64)> = (0..12)
        .map(|session| (HEAL_MS + session, 1, 100 + session, 7, 500))
        .collect();
    let verdict = expired_claims_returned(&overdue, HEAL_MS);
    assert_fails(&verdict, "session 109 under token 7");
    assert!(
        verdict.detail.ends_with("; ... 2 more"),
        "{}",
        verdict.detail
    );
    assert!(
        !verdict.detail.contains("session 110"),
        "{}",
        verdict.detail
    );
    assert_eq!(verdict.detail.matches("still held").count(), 10);
}

// stale_completions_refused

fn late(session: u64, token: u64, newer_token: u64, accepted: Option<bool>) -> LateCompletion {
    LateCompletion {
        worker: "external-0-0".to_owned(),
        session,
        token,
        newer_token,
        sent_ms: 9_000,
        accepted,
    }
}

#[test]
fn stale_completions_refused_passes_when_every_late_completion_is_refused_or_unanswered() {
    let verdict = stale_completions_refused(&[
        late(7, 100, 120, Some(false)),
        late(8, 101, 0, Some(false)),
        late(9, 102, 130, None),
    ]);
    assert_eq!(verdict.checker, "stale-completions-refused");
    assert_passes(&verdict, "3 late completions sent, 2 answered and refused");
    assert_passes(&stale_completions_refused(&[]), "0 late completions");
}

#[test]
fn stale_completions_refused_fails_when_a_late_completion_is_accepted() {
    let verdict = stale_completions_refused(&[
        late(7, 100, 120, Some(false)),
        late(8, 101, 125, Some(true)),
    ]);
    assert_fails(&verdict, "session 8");
    assert_fails(&verdict, "token 101");
    assert_fails(&verdict, "token 125");
    let moved_on = stale_completions_refused(&[late(9, 102, 0, Some(true))]);
    assert_fails(&moved_on, "past that stage");
}

// claims_kept

#[test]
fn claims_kept_passes_a_daemon_that_extends_what_it_works_past_the_visibility() {
    let mut long = claim("node-1", 1, 1, 30_000, Some(30_000 + VISIBILITY_MS * 2));
    long.deadline_machine_ms += VISIBILITY_MS * 2;
    let short = claim("node-2", 2, 1, 31_000, Some(32_000));
    assert_passes(
        &claims_kept(&[long, short], 25_000, &[], 100),
        "2 daemon claims granted after the faults healed finished within their deadlines (1 extended)",
    );
}

#[test]
fn claims_kept_fails_a_daemon_that_works_past_its_deadline() {
    let lapsed = claim("node-1", 1, 1, 30_000, Some(30_000 + VISIBILITY_MS + 1_000));
    assert_fails(
        &claims_kept(std::slice::from_ref(&lapsed), 25_000, &[], 100),
        "let the claim lapse",
    );
    // Not judged: granted before the faults healed, on an excluded node, by the external
    // worker (whose lapses are deliberate), or never finished.
    assert_passes(
        &claims_kept(std::slice::from_ref(&lapsed), 31_000, &[], 100),
        "0 daemon claims",
    );
    assert_passes(
        &claims_kept(
            std::slice::from_ref(&lapsed),
            25_000,
            &["node-1".to_owned()],
            100,
        ),
        "0 daemon claims",
    );
    let external = ClaimRecord {
        worker: "external".to_owned(),
        ..lapsed.clone()
    };
    assert_passes(
        &claims_kept(&[external], 25_000, &[], 100),
        "0 daemon claims",
    );
    let crashed = ClaimRecord {
        finished_ms: None,
        ..lapsed
    };
    assert_passes(
        &claims_kept(&[crashed], 25_000, &[], 100),
        "0 daemon claims",
    );
}

// orders_resumed

fn submission(node: u64, session: u64, at_ms: u64) -> UpstreamSubmission {
    UpstreamSubmission {
        node,
        key: order_key(session),
        at_ms,
    }
}

fn resumed(claims: &[(u64, u64, &str)]) -> BTreeMap<(u64, u64), String> {
    claims
        .iter()
        .map(|&(session, token, order)| ((session, token), order.to_owned()))
        .collect()
}

#[test]
fn orders_resumed_passes_when_only_claims_without_an_order_note_submit() {
    // node-1 submits under claim 10 and writes the note; node-2's claim 20 resumes and polls;
    // after a crash node-1's claim 30 finds a note that named no order (a transient error) and
    // submits again, which the CA dedupes.
    let claims = [
        claim("node-1", 7, 10, 1_000, Some(1_500)),
        claim("node-2", 7, 20, 3_000, Some(3_400)),
        claim("node-1", 7, 30, 6_000, None),
    ];
    let verdict = orders_resumed(
        &[submission(1, 7, 1_100), submission(1, 7, 6_100)],
        &claims,
        &resumed(&[(7, 20, "o-1")]),
    );
    assert_passes(&verdict, "2 submissions");
}

#[test]
fn orders_resumed_fails_when_a_claim_granted_with_an_order_note_submits() {
    let claims = [
        claim("node-1", 7, 10, 1_000, Some(1_500)),
        claim("node-2", 7, 20, 3_000, Some(3_400)),
    ];
    let verdict = orders_resumed(
        &[submission(1, 7, 1_100), submission(2, 7, 3_050)],
        &claims,
        &resumed(&[(7, 20, "o-1")]),
    );
    assert_fails(
        &verdict,
        "session 7: node-2 submitted a new order at 3050 ms under claim 20",
    );
}

#[test]
fn orders_resumed_takes_the_submitting_nodes_latest_claim_before_the_submission() {
    // node-2's earlier claim 5 named no order; its claim 20 did: a submission after claim 20's
    // grant is its, even if claim 5 never finished (node-2 crashed).
    let claims = [
        claim("node-2", 7, 5, 500, None),
        claim("node-1", 7, 10, 1_000, Some(1_500)),
        claim("node-2", 7, 20, 3_000, None),
    ];
    let resumed_claims = resumed(&[(7, 20, "o-1")]);
    let verdict = orders_resumed(&[submission(2, 7, 600)], &claims, &resumed_claims);
    assert_passes(&verdict, "1 submissions");
    let verdict = orders_resumed(&[submission(2, 7, 3_100)], &claims, &resumed_claims);
    assert_fails(&verdict, "under claim 20");
}

#[test]
fn orders_resumed_fails_on_a_submission_without_a_claim() {
    let verdict = orders_resumed(
        &[submission(3, 7, 900)],
        &[claim("node-1", 7, 10, 1_000, None)],
        &BTreeMap::new(),
    );
    assert_fails(
        &verdict,
        "node-3 submitted an order at 900 ms without a claim",
    );
}

#[test]
fn claims_not_early_fails_a_claim_granted_before_the_session_was_visible() {
    let on_time = ClaimRecord {
        visible_at_machine_ms: Some(1_000 + SKEW_MS),
        ..claim("node-1", 7, 3, 1_000, Some(2_000))
    };
    // An external worker's claim says nothing of visibility: not judged.
    let unknown = claim("external", 8, 4, 1_000, None);
    assert_passes(&claims_not_early(&[on_time.clone(), unknown]), "1 claims");
    let early = ClaimRecord {
        visible_at_machine_ms: Some(1_000 + SKEW_MS + 1),
        token: 5,
        ..on_time
    };
    assert_fails(
        &claims_not_early(&[early]),
        "1 ms before the session became visible",
    );
}
