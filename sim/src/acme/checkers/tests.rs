//! Each ACME checker on a history that must pass, and on one history per way its invariant can
//! break; a failure's detail must name the culprit (order, nonce, node).

use certus_core::acme::{
    Account, AccountId, AccountKey, AccountStatus, Authorization, OrderId, Revocation,
};
use certus_core::sessions::SessionId;
use certus_core::{ChallengeToken, DnsName, Reason};

use super::*;
use crate::judge::{assert_fails, assert_passes};

const HEAL_MS: u64 = 10_000;
const BOUND_MS: u64 = 5_000;
const END_MS: u64 = 60_000;
const THUMBPRINT: &str = "tttttttttttttttttttttttttttttttttttttttttt1";
const ACCOUNT: u64 = 7;

fn token(order: u64, position: usize) -> String {
    format!("token-{order}-{position}")
}

fn name(order: u64, position: usize) -> String {
    format!("o{order}x{position}.c0.acme.sim")
}

/// Order `id` for two names, each challenge `challenge`.
fn order(id: u64, challenge: ChallengeStatus) -> Order {
    Order {
        id: OrderId(id),
        account: AccountId(ACCOUNT),
        created_ms: 1_000,
        expires_ms: u64::MAX,
        authorizations: (0..2)
            .map(|position| Authorization {
                identifier: DnsName::new(name(id, position)).unwrap(),
                token: ChallengeToken::new(token(id, position)).unwrap(),
                challenge,
                validated_ms: (challenge == ChallengeStatus::Valid).then_some(2_000),
                error: (challenge == ChallengeStatus::Invalid)
                    .then(|| Reason::new("not served").unwrap()),
                deactivated: false,
            })
            .collect(),
        csr: None,
        session: None,
        certificate: None,
        error: None,
    }
}

/// Order `id`, validated and finalized into session `id + 100`, with `cert` once issued.
fn issued(id: u64, cert: Option<&[u8]>) -> Order {
    Order {
        csr: Some(b"csr".to_vec()),
        session: Some(SessionId(id + 100)),
        certificate: cert.map(<[u8]>::to_vec),
        ..order(id, ChallengeStatus::Valid)
    }
}

fn seen(at_ms: u64, order: Order) -> Sighting {
    let status = order.status(at_ms);
    Sighting {
        at_ms,
        seen_by: "observer n1".to_owned(),
        order,
        status,
    }
}

fn finalize(order: u64, answered_ms: Option<u64>, outcome: Outcome) -> FinalizeRecord {
    FinalizeRecord {
        client: 0,
        order,
        kind: Finalize::First,
        sent_ms: answered_ms.unwrap_or(3_000).saturating_sub(100),
        answered_ms,
        outcome,
    }
}

fn upstream(session: u64, issued: &[&[u8]]) -> UpstreamOrder {
    UpstreamOrder {
        id: format!("o-{session}"),
        key: order_key(session),
        csr: b"csr".to_vec(),
        created_ms: 4_000,
        issued: issued.iter().map(|cert| cert.to_vec()).collect(),
    }
}

fn account() -> Account {
    Account {
        id: AccountId(ACCOUNT),
        key: AccountKey {
            jwk: "{}".to_owned(),
            thumbprint: THUMBPRINT.to_owned(),
        },
        contact: Vec::new(),
        status: AccountStatus::Valid,
        created_ms: 500,
        orders_window_start_ms: 500,
        orders_in_window: 1,
    }
}

/// Every node in `nodes` holding `orders`.
fn finals(nodes: &[u64], orders: &[Order]) -> BTreeMap<u64, FinalAcme> {
    nodes
        .iter()
        .map(|node| {
            (
                *node,
                FinalAcme {
                    accounts: BTreeMap::from([(ACCOUNT, account())]),
                    orders: orders
                        .iter()
                        .map(|order| (order.id.0, (order.clone(), order.status(END_MS))))
                        .collect(),
                    revocations: Vec::new(),
                    account_count: 1,
                    order_count: orders.len(),
                },
            )
        })
        .collect()
}

fn registered() -> Vec<RegisteredAccount> {
    vec![RegisteredAccount {
        client: 0,
        id: ACCOUNT,
        thumbprint: THUMBPRINT.to_owned(),
        registered_ms: 600,
    }]
}

/// The client served order `id`'s key authorizations at `at_ms`.
fn served(id: u64, at_ms: u64, thumbprint: &str) -> Vec<ServedFetch> {
    (0..2)
        .map(|position| ServedFetch {
            client: 0,
            name: name(id, position),
            token: token(id, position),
            served: Some(format!("{}.{thumbprint}", token(id, position))),
            at_ms,
        })
        .collect()
}

#[test]
fn a_finalized_order_issued_once_passes() {
    let sightings = vec![
        seen(2_500, order(1, ChallengeStatus::Valid)),
        seen(3_500, issued(1, None)),
        seen(6_000, issued(1, Some(b"cert-1"))),
    ];
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::Accepted)],
        &sightings,
        &finals(&[1, 2, 3], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-1"])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_passes(
        &verdict,
        "1 finalizes acknowledged, 1 of them valid in time",
    );
}

#[test]
fn a_finalized_order_never_valid_fails() {
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::AppliedBefore)],
        &[seen(3_500, issued(1, None))],
        &finals(&[1, 2, 3], &[issued(1, None)]),
        &[upstream(101, &[])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(
        &verdict,
        "order 1 (finalize acknowledged at 3000 ms) was never seen valid",
    );
    assert_fails(
        &verdict,
        "n2 holds order 1 Processing at the end, without a certificate",
    );
}

#[test]
fn a_finalized_order_valid_late_fails() {
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::Accepted)],
        &[seen(HEAL_MS + BOUND_MS + 1, issued(1, Some(b"cert-1")))],
        &finals(&[1], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-1"])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(&verdict, "was first seen valid at 15001 ms, after 15000 ms");
}

#[test]
fn two_certificates_or_two_sessions_for_one_order_fail() {
    let mut other_session = issued(1, Some(b"cert-2"));
    other_session.session = Some(SessionId(555));
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::Accepted)],
        &[
            seen(6_000, issued(1, Some(b"cert-1"))),
            seen(7_000, other_session),
        ],
        &finals(&[1], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-1"]), upstream(555, &[b"cert-2"])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(&verdict, "order 1 was seen with 2 different certificates");
    assert_fails(&verdict, "order 1 was seen issuing through 2 sessions");
}

#[test]
fn a_certificate_without_a_finalize_fails() {
    let verdict = one_certificate(
        &[finalize(
            1,
            Some(3_000),
            Outcome::Refused("order 1 is Pending".to_owned()),
        )],
        &[seen(6_000, issued(1, Some(b"cert-1")))],
        &finals(&[1], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-1"])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(
        &verdict,
        "order 1: observer n1 saw it at 6000 ms with a certificate, but its client never sent a \
         finalize that could have been applied",
    );
}

#[test]
fn a_second_finalize_accepted_fails() {
    let mut again = finalize(1, Some(3_500), Outcome::Accepted);
    again.kind = Finalize::Again;
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::Accepted), again],
        &[seen(6_000, issued(1, Some(b"cert-1")))],
        &finals(&[1], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-1"])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(&verdict, "order 1: 2 finalizes were accepted");
}

#[test]
fn the_upstream_issuing_twice_or_for_no_order_fails() {
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::Accepted)],
        &[seen(6_000, issued(1, Some(b"cert-1")))],
        &finals(&[1], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-1", b"cert-x"]), upstream(999, &[])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(
        &verdict,
        "the upstream CA issued 2 certificates for its order o-101",
    );
    assert_fails(
        &verdict,
        "the upstream CA took order o-999 (certus-session-999) for a session no ACME order",
    );
}

#[test]
fn an_order_holding_another_certificate_than_the_upstream_issued_fails() {
    let verdict = one_certificate(
        &[finalize(1, Some(3_000), Outcome::Accepted)],
        &[seen(6_000, issued(1, Some(b"cert-1")))],
        &finals(&[1], &[issued(1, Some(b"cert-1"))]),
        &[upstream(101, &[b"cert-other"])],
        HEAL_MS,
        BOUND_MS,
        END_MS,
    );
    assert_fails(
        &verdict,
        "order 1 holds a certificate that is not the one the upstream CA issued for session 101",
    );
}

#[test]
fn orders_served_and_validated_pass() {
    let verdict = valid_needs_authorizations(
        &[
            seen(1_500, order(1, ChallengeStatus::Processing)),
            seen(2_500, order(1, ChallengeStatus::Valid)),
            seen(3_000, order(2, ChallengeStatus::Invalid)),
        ],
        &finals(&[1, 2], &[order(1, ChallengeStatus::Valid)]),
        &registered(),
        &served(1, 2_000, THUMBPRINT),
        END_MS,
    );
    assert_passes(
        &verdict,
        "2 valid authorizations, each served by its client before",
    );
}

#[test]
fn a_finalized_order_with_a_pending_authorization_fails() {
    let mut early = issued(1, None);
    early.authorizations[1].challenge = ChallengeStatus::Processing;
    early.authorizations[1].validated_ms = None;
    let verdict = valid_needs_authorizations(
        &[seen(2_500, early)],
        &BTreeMap::new(),
        &registered(),
        &served(1, 2_000, THUMBPRINT),
        END_MS,
    );
    assert_fails(
        &verdict,
        "order 1 was Processing to observer n1 at 2500 ms with authorizations [o1x0.c0.acme.sim: \
         Valid, o1x1.c0.acme.sim: Processing]",
    );
}

#[test]
fn a_valid_authorization_its_client_never_served_fails() {
    let verdict = valid_needs_authorizations(
        &[seen(2_500, order(1, ChallengeStatus::Valid))],
        &BTreeMap::new(),
        &registered(),
        &served(1, 2_000, "the-wrong-thumbprint"),
        END_MS,
    );
    assert_fails(
        &verdict,
        "order 1: authorization 0 (o1x0.c0.acme.sim) was seen valid at 2500 ms, but its client \
         had not served its key authorization by then (fetches answered: [another key \
         authorization at 2000 ms])",
    );
    // Served only after the validation was seen.
    let verdict = valid_needs_authorizations(
        &[seen(2_500, order(1, ChallengeStatus::Valid))],
        &BTreeMap::new(),
        &registered(),
        &served(1, 2_600, THUMBPRINT),
        END_MS,
    );
    assert_fails(
        &verdict,
        "(fetches answered: [the key authorization at 2600 ms])",
    );
}

#[test]
fn replicas_that_agree_pass_and_ones_that_differ_fail() {
    let same = finals(&[1, 2, 3], &[issued(1, Some(b"cert-1"))]);
    assert_passes(
        &replicas_agree(&same),
        "3 nodes hold the same 1 accounts, 1 orders and 0 revocations",
    );
    let mut differ = same.clone();
    let node_3 = differ.get_mut(&3).unwrap();
    node_3
        .orders
        .insert(1, (issued(1, None), OrderStatus::Processing));
    node_3.revocations.push(Revocation {
        serial: "01".to_owned(),
        reason: 0,
        revoked_ms: 9_000,
    });
    let verdict = replicas_agree(&differ);
    assert_fails(
        &verdict,
        "n3 and n1 differ in order 1, revocations (1 against 0: 01 only on n3)",
    );
    assert!(!verdict.detail.contains("n2"), "{}", verdict.detail);
    assert_fails(&replicas_agree(&BTreeMap::new()), "no node caught up");
}

fn issue(node: u64, incarnation: u64, nonce: &str, at_ms: u64) -> IssuedNonce {
    IssuedNonce {
        node,
        incarnation,
        nonce: nonce.to_owned(),
        at_ms,
    }
}

fn spend(
    node: u64,
    incarnation: u64,
    nonce: &str,
    why: NonceUse,
    accepted: bool,
    at_ms: u64,
) -> UsedNonce {
    UsedNonce {
        client: 0,
        node,
        incarnation,
        nonce: nonce.to_owned(),
        why,
        accepted,
        at_ms,
    }
}

#[test]
fn nonces_used_once_at_their_node_pass() {
    let issued = vec![
        issue(1, 1, "a", 100),
        issue(2, 1, "b", 150),
        issue(1, 2, "c", 900),
    ];
    let used = vec![
        spend(1, 1, "a", NonceUse::Fresh, true, 200),
        spend(1, 1, "a", NonceUse::Replayed, false, 300),
        spend(1, 1, "b", NonceUse::Foreign, false, 400),
        spend(2, 1, "b", NonceUse::Fresh, true, 500),
        spend(1, 2, "a", NonceUse::Replayed, false, 1_000),
        spend(1, 2, "c", NonceUse::Fresh, true, 1_100),
    ];
    assert_passes(
        &nonces_once(&issued, &used),
        "3 nonces issued, 3 accepted once each; refused: [1 Foreign, 2 Replayed]; 1 uses at a \
         node that had restarted since issuing them",
    );
}

#[test]
fn a_nonce_accepted_twice_or_across_a_restart_fails() {
    let issued = vec![issue(1, 1, "a", 100), issue(1, 1, "s", 150)];
    let used = vec![
        spend(1, 1, "a", NonceUse::Fresh, true, 200),
        spend(1, 1, "a", NonceUse::Replayed, true, 300),
        spend(1, 2, "s", NonceUse::SetAside, true, 1_000),
    ];
    let verdict = nonces_once(&issued, &used);
    assert_fails(
        &verdict,
        "nonce a was accepted twice: by n1 (incarnation 1) at 200 ms and by n1 (incarnation 1) \
         at 300 ms",
    );
    assert_fails(
        &verdict,
        "n1 (incarnation 2) accepted at 1000 ms nonce s, which n1 (incarnation 1) issued at 150 \
         ms",
    );
}

#[test]
fn another_nodes_or_an_unknown_nonce_accepted_fails() {
    let issued = vec![issue(2, 1, "b", 100)];
    let used = vec![
        spend(1, 1, "b", NonceUse::Foreign, true, 200),
        spend(1, 1, "zz", NonceUse::Fresh, true, 300),
    ];
    let verdict = nonces_once(&issued, &used);
    assert_fails(
        &verdict,
        "n1 (incarnation 1) accepted at 200 ms nonce b, which n2",
    );
    assert_fails(
        &verdict,
        "n1 accepted nonce zz at 300 ms, which no node issued",
    );
}

#[test]
fn a_fresh_nonce_refused_by_its_own_node_fails() {
    let issued = vec![issue(1, 1, "a", 100)];
    let used = vec![spend(1, 1, "a", NonceUse::Fresh, false, 200)];
    assert_fails(
        &nonces_once(&issued, &used),
        "n1 refused at 200 ms its own nonce a, issued at 100 ms and not used before",
    );
}
