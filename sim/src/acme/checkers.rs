//! The **ACME** checkers (RFC 8555 issue 25), over what an ACME run recorded: the accounts the
//! clients registered, the orders they placed and how they served each one's HTTP-01
//! challenges, every key authorization a client served to a fetch, every finalize and its
//! answer, every version of every order seen (by the observer on the most advanced node every
//! 50 ms, and by the clients' polls), each node's final ACME tables, the orders the upstream CA
//! took, and every nonce the nodes issued and every use of one.
//!
//! Times named `*_ms` are simulated milliseconds since the run began (the global clock).

use std::collections::{BTreeMap, BTreeSet};

use certus_core::acme::{Account, ChallengeStatus, Order, OrderStatus, Revocation};
use serde::Serialize;

use crate::judge::Verdict;
use crate::sessions::checkers::{UpstreamOrder, order_key};

/// How many nonces a node keeps outstanding (`certus_acme::limits::NONCES_OUTSTANDING_MAX`):
/// a nonce is forgotten only after this many newer ones were issued at its node.
pub const NONCES_KEPT: usize = 100_000;

/// An account a client registered, as the cluster answered.
#[derive(Clone, Debug, Serialize)]
pub struct RegisteredAccount {
    /// The client.
    pub client: u32,
    /// The account id.
    pub id: u64,
    /// Its key's thumbprint, which every key authorization of its orders ends in.
    pub thumbprint: String,
    /// When the client had the answer.
    pub registered_ms: u64,
}

/// How a client serves an order's HTTP-01 challenges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Serving {
    /// Serves every key authorization before it says it is ready.
    Before,
    /// Says it is ready first and serves a moment later (a validation may fail).
    After,
    /// Never serves (every validation fails).
    Never,
    /// Serves a key authorization with another thumbprint (every validation fails).
    WrongKey,
}

/// An order a client placed, as the cluster answered.
#[derive(Clone, Debug, Serialize)]
pub struct PlacedOrder {
    /// The client.
    pub client: u32,
    /// The order id.
    pub id: u64,
    /// The account.
    pub account: u64,
    /// Its names, sorted.
    pub names: Vec<String>,
    /// How the client serves its challenges.
    pub serving: Serving,
    /// When the client had the answer.
    pub placed_ms: u64,
}

/// What became of a client's finalize (all its tries, one request).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// A try was answered with the finalized order.
    Accepted,
    /// A try whose outcome was unknown came before a try refused only because the order was
    /// finalized already (processing or valid): the earlier try was applied.
    AppliedBefore,
    /// Refused by the state machine, and no earlier try can have been applied.
    Refused(String),
    /// No try was answered, or the only answer leaves open whether an earlier try applied.
    Unknown,
}

impl Outcome {
    /// Whether the finalize may have been applied.
    pub fn may_have_applied(&self) -> bool {
        !matches!(self, Outcome::Refused(_))
    }

    /// Whether the client knows the finalize was applied.
    pub fn acknowledged(&self) -> bool {
        matches!(self, Outcome::Accepted | Outcome::AppliedBefore)
    }
}

/// Which finalize of an order a client sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Finalize {
    /// Right after saying the challenges are ready, before the order can be ready (refused,
    /// unless the validations were that quick).
    Early,
    /// Once the client saw the order ready.
    First,
    /// A second one on purpose, after the first was acknowledged (it must be refused).
    Again,
}

/// A client's finalize of an order.
#[derive(Clone, Debug, Serialize)]
pub struct FinalizeRecord {
    /// The client.
    pub client: u32,
    /// The order.
    pub order: u64,
    /// Which finalize it was.
    pub kind: Finalize,
    /// When the first try was sent.
    pub sent_ms: u64,
    /// When the deciding answer came (none for an unknown outcome).
    pub answered_ms: Option<u64>,
    /// What became of it.
    pub outcome: Outcome,
}

/// One HTTP-01 fetch a client answered.
#[derive(Clone, Debug, Serialize)]
pub struct ServedFetch {
    /// The client.
    pub client: u32,
    /// The name fetched.
    pub name: String,
    /// The token fetched.
    pub token: String,
    /// The body served (the key authorization); none when the client answered "not found".
    pub served: Option<String>,
    /// When the client answered.
    pub at_ms: u64,
}

/// One version of an order as someone read it.
#[derive(Clone, Debug)]
pub struct Sighting {
    /// When it was read.
    pub at_ms: u64,
    /// Who read it (`observer n2`, `client 1 via n3`).
    pub seen_by: String,
    /// The order.
    pub order: Order,
    /// Its status at the reader's time.
    pub status: OrderStatus,
}

/// One node's ACME tables at the end: every account the clients' keys name, every order of
/// those accounts, every revocation, and how many accounts and orders the node holds in all.
#[derive(Clone, Debug)]
pub struct FinalAcme {
    /// The accounts, by id.
    pub accounts: BTreeMap<u64, Account>,
    /// Their orders, by id, with the status at the node's machine clock.
    pub orders: BTreeMap<u64, (Order, OrderStatus)>,
    /// Every revocation, in serial order.
    pub revocations: Vec<Revocation>,
    /// Accounts the node holds (the clients' and any other).
    pub account_count: usize,
    /// Orders the node holds.
    pub order_count: usize,
}

/// A nonce a node issued.
#[derive(Clone, Debug, Serialize)]
pub struct IssuedNonce {
    /// The node.
    pub node: u64,
    /// The node's incarnation (1 for its first start, one more per restart).
    pub incarnation: u64,
    /// The nonce.
    pub nonce: String,
    /// When it was issued.
    pub at_ms: u64,
}

/// Why a client used a nonce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NonceUse {
    /// The nonce it held for the node (the last answer's `Replay-Nonce`, or a new one).
    Fresh,
    /// One it had used already (must be refused).
    Replayed,
    /// One another node issued (must be refused).
    Foreign,
    /// One it set aside unused a while ago: accepted if the node that issued it has not
    /// restarted since, refused if it has.
    SetAside,
}

/// One use of a nonce at a node.
#[derive(Clone, Debug, Serialize)]
pub struct UsedNonce {
    /// The client.
    pub client: u32,
    /// The node it was used at.
    pub node: u64,
    /// The node's incarnation then.
    pub incarnation: u64,
    /// The nonce.
    pub nonce: String,
    /// Why the client used it.
    pub why: NonceUse,
    /// Whether the node accepted it.
    pub accepted: bool,
    /// When.
    pub at_ms: u64,
}

/// Whether every authorization of `order` is valid (validated and not deactivated).
fn authorizations_valid(order: &Order) -> bool {
    order
        .authorizations
        .iter()
        .all(|authz| authz.challenge == ChallengeStatus::Valid && !authz.deactivated)
}

/// Every sighting, the final states' as sightings at `end_ms` too.
fn every_sighting<'a>(
    sightings: &'a [Sighting],
    finals: &'a BTreeMap<u64, FinalAcme>,
    end_ms: u64,
) -> Vec<(u64, String, &'a Order, OrderStatus)> {
    let mut all: Vec<(u64, String, &Order, OrderStatus)> = sightings
        .iter()
        .map(|seen| (seen.at_ms, seen.seen_by.clone(), &seen.order, seen.status))
        .collect();
    for (node, state) in finals {
        for (order, status) in state.orders.values() {
            all.push((end_ms, format!("n{node} at the end"), order, *status));
        }
    }
    all
}

/// **One certificate per finalized order**: every order whose finalize a client saw accepted is
/// valid within `bound_ms` of the later of the healing and the acknowledgement, and holds a
/// certificate on every node in `finals` (the nodes that caught up); no order is ever seen with
/// two different certificates, with one and an error, or with one but no finalize its client
/// may have had applied; no finalize is accepted twice for an order; the upstream CA took at most
/// one order per session and issued at most one certificate for it, that certificate is the
/// order's, and it took no order for a session no order was finalized with.
pub fn one_certificate(
    finalizes: &[FinalizeRecord],
    sightings: &[Sighting],
    finals: &BTreeMap<u64, FinalAcme>,
    upstream: &[UpstreamOrder],
    heal_ms: u64,
    bound_ms: u64,
    end_ms: u64,
) -> Verdict {
    const NAME: &str = "acme-one-certificate";
    let mut problems = Vec::new();
    let all = every_sighting(sightings, finals, end_ms);
    let mut acknowledged: BTreeMap<u64, u64> = BTreeMap::new();
    let mut may_have_applied: BTreeSet<u64> = BTreeSet::new();
    let mut accepted: BTreeMap<u64, u32> = BTreeMap::new();
    for finalize in finalizes {
        if finalize.outcome.may_have_applied() {
            may_have_applied.insert(finalize.order);
        }
        if finalize.outcome == Outcome::Accepted {
            *accepted.entry(finalize.order).or_default() += 1;
        }
        if finalize.outcome.acknowledged()
            && let Some(answered_ms) = finalize.answered_ms
        {
            let at = acknowledged.entry(finalize.order).or_insert(answered_ms);
            *at = (*at).min(answered_ms);
        }
    }
    for (order, count) in &accepted {
        if *count > 1 {
            problems.push(format!("order {order}: {count} finalizes were accepted"));
        }
    }
    // What each order was seen holding.
    let mut certificates: BTreeMap<u64, BTreeSet<&[u8]>> = BTreeMap::new();
    let mut sessions: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut first_valid: BTreeMap<u64, u64> = BTreeMap::new();
    for (at_ms, seen_by, order, status) in &all {
        let id = order.id.0;
        if let Some(session) = order.session {
            sessions.entry(id).or_default().insert(session.0);
        }
        if let Some(cert) = &order.certificate {
            certificates.entry(id).or_default().insert(cert.as_slice());
            if order.error.is_some() {
                problems.push(format!(
                    "order {id}: {seen_by} saw it at {at_ms} ms with a certificate and an error"
                ));
            }
            if !may_have_applied.contains(&id) {
                problems.push(format!(
                    "order {id}: {seen_by} saw it at {at_ms} ms with a certificate, but its \
                     client never sent a finalize that could have been applied"
                ));
            }
        }
        if *status == OrderStatus::Valid && !seen_by.ends_with("at the end") {
            let first = first_valid.entry(id).or_insert(*at_ms);
            *first = (*first).min(*at_ms);
        }
    }
    for (id, certs) in &certificates {
        if certs.len() > 1 {
            problems.push(format!(
                "order {id} was seen with {} different certificates",
                certs.len()
            ));
        }
    }
    for (id, held) in &sessions {
        if held.len() > 1 {
            problems.push(format!(
                "order {id} was seen issuing through {} sessions: {held:?}",
                held.len()
            ));
        }
    }
    // Every acknowledged finalize ends valid, in time, on every node.
    let mut valid_in_time = 0;
    let mut too_late_to_tell = 0;
    for (id, answered_ms) in &acknowledged {
        let due_ms = heal_ms.max(*answered_ms) + bound_ms;
        match first_valid.get(id) {
            Some(at_ms) if *at_ms <= due_ms => valid_in_time += 1,
            Some(at_ms) => problems.push(format!(
                "order {id} (finalize acknowledged at {answered_ms} ms) was first seen valid at \
                 {at_ms} ms, after {due_ms} ms"
            )),
            None if due_ms > end_ms => {
                // The run ended before its bound came.
                too_late_to_tell += 1;
                continue;
            }
            None => {
                let last = all
                    .iter()
                    .filter(|(_, _, order, _)| order.id.0 == *id)
                    .max_by_key(|(at_ms, _, _, _)| *at_ms)
                    .map(|(_, _, order, status)| match &order.error {
                        Some(error) => format!("{status:?}: {error}"),
                        None => format!("{status:?}"),
                    });
                problems.push(format!(
                    "order {id} (finalize acknowledged at {answered_ms} ms) was never seen valid \
                     by {due_ms} ms (last seen: {})",
                    last.unwrap_or_else(|| "never".to_owned())
                ));
            }
        }
        for (node, state) in finals {
            match state.orders.get(id) {
                Some((order, _)) if order.certificate.is_some() => {}
                Some((_, status)) => problems.push(format!(
                    "n{node} holds order {id} {status:?} at the end, without a certificate"
                )),
                None => problems.push(format!("n{node} lost order {id}")),
            }
        }
    }
    // The upstream CA's side: one order and one certificate per session, the order's.
    let mut upstream_by_key: BTreeMap<&str, Vec<&UpstreamOrder>> = BTreeMap::new();
    for order in upstream {
        upstream_by_key
            .entry(order.key.as_str())
            .or_default()
            .push(order);
        if order.issued.len() > 1 {
            problems.push(format!(
                "the upstream CA issued {} certificates for its order {} ({})",
                order.issued.len(),
                order.id,
                order.key
            ));
        }
    }
    let mut keys_of_orders: BTreeSet<String> = BTreeSet::new();
    for (id, held) in &sessions {
        for session in held {
            let key = order_key(*session);
            match upstream_by_key.get(key.as_str()).map(Vec::as_slice) {
                Some([single]) => {
                    if let (Some(issued), Some(certs)) =
                        (single.issued.first(), certificates.get(id))
                        && certs.iter().any(|cert| *cert != issued.as_slice())
                    {
                        problems.push(format!(
                            "order {id} holds a certificate that is not the one the upstream CA \
                             issued for session {session}"
                        ));
                    }
                }
                Some(list) if list.len() > 1 => problems.push(format!(
                    "session {session} of order {id} was ordered {} times upstream",
                    list.len()
                )),
                _ => {
                    if certificates.contains_key(id) {
                        problems.push(format!(
                            "order {id} holds a certificate, but the upstream CA took no order \
                             for its session {session}"
                        ));
                    }
                }
            }
            keys_of_orders.insert(key);
        }
    }
    for order in upstream {
        if !keys_of_orders.contains(&order.key) {
            problems.push(format!(
                "the upstream CA took order {} ({}) for a session no ACME order was seen \
                 issuing through",
                order.id, order.key
            ));
        }
    }
    let issued: usize = upstream.iter().map(|order| order.issued.len()).sum();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} finalizes acknowledged, {valid_in_time} of them valid in time \
             ({too_late_to_tell} not yet, with their bound past the end), {} orders seen with a \
             certificate, {} upstream orders, {issued} certificates issued",
            acknowledged.len(),
            certificates.len(),
            upstream.len()
        ),
    )
}

/// **No order valid without every authorization valid**: no version of an order anyone saw (the
/// observer, a client, a node at the end) is ready, processing or valid — or holds a session
/// or a certificate — unless every authorization of it is valid; and every authorization seen
/// valid had its key authorization (`TOKEN.THUMBPRINT` of the order's account) served by its
/// client, for its name and token, at or before the first time it was seen valid.
pub fn valid_needs_authorizations(
    sightings: &[Sighting],
    finals: &BTreeMap<u64, FinalAcme>,
    accounts: &[RegisteredAccount],
    served: &[ServedFetch],
    end_ms: u64,
) -> Verdict {
    const NAME: &str = "acme-valid-needs-authorizations";
    let mut problems = Vec::new();
    let all = every_sighting(sightings, finals, end_ms);
    let thumbprints: BTreeMap<u64, &str> = accounts
        .iter()
        .map(|account| (account.id, account.thumbprint.as_str()))
        .collect();
    let mut flagged: BTreeSet<u64> = BTreeSet::new();
    // (order, position) → (name, token, account, first seen valid).
    let mut valid: BTreeMap<(u64, usize), (String, String, u64, u64)> = BTreeMap::new();
    let mut past_pending = 0;
    for (at_ms, seen_by, order, status) in &all {
        let id = order.id.0;
        let beyond = matches!(
            status,
            OrderStatus::Ready | OrderStatus::Processing | OrderStatus::Valid
        ) || order.session.is_some()
            || order.certificate.is_some();
        if beyond {
            past_pending += 1;
            if !authorizations_valid(order) && flagged.insert(id) {
                let statuses: Vec<String> = order
                    .authorizations
                    .iter()
                    .map(|authz| format!("{}: {:?}", authz.identifier.as_str(), authz.challenge))
                    .collect();
                problems.push(format!(
                    "order {id} was {status:?} to {seen_by} at {at_ms} ms with authorizations \
                     [{}]",
                    statuses.join(", ")
                ));
            }
        }
        for (position, authz) in order.authorizations.iter().enumerate() {
            if authz.challenge == ChallengeStatus::Valid {
                let entry = valid.entry((id, position)).or_insert((
                    authz.identifier.as_str().to_owned(),
                    authz.token.as_str().to_owned(),
                    order.account.0,
                    *at_ms,
                ));
                entry.3 = entry.3.min(*at_ms);
            }
        }
    }
    let mut fetches: BTreeMap<(&str, &str), Vec<&ServedFetch>> = BTreeMap::new();
    for fetch in served {
        fetches
            .entry((fetch.name.as_str(), fetch.token.as_str()))
            .or_default()
            .push(fetch);
    }
    for ((order, position), (name, token, account, first_ms)) in &valid {
        let Some(thumbprint) = thumbprints.get(account) else {
            problems.push(format!(
                "order {order}: authorization {position} ({name}) is valid, but its account \
                 {account} is no client's"
            ));
            continue;
        };
        let expected = format!("{token}.{thumbprint}");
        let served_in_time = fetches
            .get(&(name.as_str(), token.as_str()))
            .is_some_and(|list| {
                list.iter().any(|fetch| {
                    fetch.at_ms <= *first_ms && fetch.served.as_deref() == Some(expected.as_str())
                })
            });
        if !served_in_time {
            let answers: Vec<String> = fetches
                .get(&(name.as_str(), token.as_str()))
                .map(|list| {
                    list.iter()
                        .map(|fetch| {
                            format!(
                                "{} at {} ms",
                                if fetch.served.as_deref() == Some(expected.as_str()) {
                                    "the key authorization"
                                } else if fetch.served.is_some() {
                                    "another key authorization"
                                } else {
                                    "not found"
                                },
                                fetch.at_ms
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            problems.push(format!(
                "order {order}: authorization {position} ({name}) was seen valid at {first_ms} \
                 ms, but its client had not served its key authorization by then (fetches \
                 answered: [{}])",
                answers.join(", ")
            ));
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} order versions seen past pending, all with every authorization valid; {} valid \
             authorizations, each served by its client before; {} fetches answered",
            past_pending,
            valid.len(),
            served.len()
        ),
    )
}

/// **The replicas agree**: every node in `finals` holds the same ACME tables (the clients'
/// accounts, their orders, every revocation, and as many accounts and orders in all).
pub fn replicas_agree(finals: &BTreeMap<u64, FinalAcme>) -> Verdict {
    const NAME: &str = "acme-replicas-agree";
    let Some((first_node, first)) = finals.iter().next() else {
        return Verdict::fail(NAME, "no node caught up to be read".to_owned());
    };
    let mut problems = Vec::new();
    for (node, state) in finals.iter().skip(1) {
        let mut differences = Vec::new();
        if state.account_count != first.account_count || state.accounts != first.accounts {
            differences.push(format!(
                "accounts ({} against {})",
                state.account_count, first.account_count
            ));
        }
        if state.order_count != first.order_count {
            differences.push(format!(
                "order counts ({} against {})",
                state.order_count, first.order_count
            ));
        }
        let ids: BTreeSet<&u64> = state.orders.keys().chain(first.orders.keys()).collect();
        for id in ids {
            if state.orders.get(id).map(|(order, _)| order) != first.orders.get(id).map(|(o, _)| o)
            {
                differences.push(format!("order {id}"));
            }
        }
        if state.revocations != first.revocations {
            let by_serial = |revocations: &[Revocation]| -> BTreeMap<String, Revocation> {
                revocations
                    .iter()
                    .map(|revocation| (revocation.serial.clone(), revocation.clone()))
                    .collect()
            };
            let (theirs, ours) = (by_serial(&state.revocations), by_serial(&first.revocations));
            let serials: BTreeSet<&String> = theirs.keys().chain(ours.keys()).collect();
            let differing: Vec<String> = serials
                .into_iter()
                .filter(|serial| theirs.get(*serial) != ours.get(*serial))
                .take(3)
                .map(|serial| match (theirs.get(serial), ours.get(serial)) {
                    (Some(a), Some(b)) => format!(
                        "{serial}: reason {} at {} ms against reason {} at {} ms",
                        a.reason, a.revoked_ms, b.reason, b.revoked_ms
                    ),
                    (Some(_), None) => format!("{serial} only on n{node}"),
                    _ => format!("{serial} only on n{first_node}"),
                })
                .collect();
            differences.push(format!(
                "revocations ({} against {}: {})",
                state.revocations.len(),
                first.revocations.len(),
                differing.join("; ")
            ));
        }
        if !differences.is_empty() {
            problems.push(format!(
                "n{node} and n{first_node} differ in {}",
                differences.join(", ")
            ));
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} nodes hold the same {} accounts, {} orders and {} revocations",
            finals.len(),
            first.account_count,
            first.order_count,
            first.revocations.len()
        ),
    )
}

/// **Nonces never accepted twice**: no nonce is accepted twice, at one node or two, across a
/// node's restarts; a nonce is accepted only by the node and incarnation that issued it, after
/// it issued it (a restarted node refuses every nonce of its earlier incarnations); and a nonce
/// used for the first time at the incarnation that issued it is accepted, while the node has not
/// issued [`NONCES_KEPT`] newer ones (clients retry `badNonce` with a fresh nonce, which must
/// then work).
pub fn nonces_once(issued: &[IssuedNonce], used: &[UsedNonce]) -> Verdict {
    const NAME: &str = "acme-nonces-once";
    let mut problems = Vec::new();
    let mut issued_at: BTreeMap<&str, &IssuedNonce> = BTreeMap::new();
    // Per node and incarnation, the issue times in order: how many were issued in a window.
    let mut issue_times: BTreeMap<(u64, u64), Vec<u64>> = BTreeMap::new();
    for nonce in issued {
        if issued_at.insert(nonce.nonce.as_str(), nonce).is_some() {
            problems.push(format!(
                "nonce {} was issued twice (the second time by n{})",
                nonce.nonce, nonce.node
            ));
        }
        issue_times
            .entry((nonce.node, nonce.incarnation))
            .or_default()
            .push(nonce.at_ms);
    }
    let mut accepted_by: BTreeMap<&str, &UsedNonce> = BTreeMap::new();
    let mut used_at_issuer: BTreeSet<&str> = BTreeSet::new();
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    let mut across_restarts = 0u64;
    for use_ in used {
        let origin = issued_at.get(use_.nonce.as_str());
        if let Some(origin) = origin
            && origin.node == use_.node
            && origin.incarnation != use_.incarnation
        {
            across_restarts += 1;
        }
        if use_.accepted {
            if let Some(earlier) = accepted_by.insert(use_.nonce.as_str(), use_) {
                problems.push(format!(
                    "nonce {} was accepted twice: by n{} (incarnation {}) at {} ms and by n{} \
                     (incarnation {}) at {} ms",
                    use_.nonce,
                    earlier.node,
                    earlier.incarnation,
                    earlier.at_ms,
                    use_.node,
                    use_.incarnation,
                    use_.at_ms
                ));
            }
            match origin {
                None => problems.push(format!(
                    "n{} accepted nonce {} at {} ms, which no node issued",
                    use_.node, use_.nonce, use_.at_ms
                )),
                Some(origin)
                    if origin.node != use_.node
                        || origin.incarnation != use_.incarnation
                        || origin.at_ms > use_.at_ms =>
                {
                    problems.push(format!(
                        "n{} (incarnation {}) accepted at {} ms nonce {}, which n{} (incarnation \
                         {}) issued at {} ms",
                        use_.node,
                        use_.incarnation,
                        use_.at_ms,
                        use_.nonce,
                        origin.node,
                        origin.incarnation,
                        origin.at_ms
                    ));
                }
                Some(_) => {}
            }
        } else {
            *refused.entry(format!("{:?}", use_.why)).or_default() += 1;
        }
        // The first use at the incarnation that issued it must succeed.
        if let Some(origin) = origin
            && origin.node == use_.node
            && origin.incarnation == use_.incarnation
            && used_at_issuer.insert(use_.nonce.as_str())
            && !use_.accepted
        {
            let newer = issue_times
                .get(&(origin.node, origin.incarnation))
                .map_or(0, |times| {
                    times
                        .iter()
                        .filter(|at| **at > origin.at_ms && **at <= use_.at_ms)
                        .count()
                });
            if newer < NONCES_KEPT {
                problems.push(format!(
                    "n{} refused at {} ms its own nonce {}, issued at {} ms and not used before",
                    use_.node, use_.at_ms, use_.nonce, origin.at_ms
                ));
            }
        }
    }
    let refusals: Vec<String> = refused
        .iter()
        .map(|(why, count)| format!("{count} {why}"))
        .collect();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} nonces issued, {} accepted once each; refused: [{}]; {} uses at a node that \
             had restarted since issuing them",
            issued.len(),
            accepted_by.len(),
            refusals.join(", "),
            across_restarts
        ),
    )
}

#[cfg(test)]
mod tests;
