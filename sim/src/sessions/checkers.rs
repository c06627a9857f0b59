//! The **queue-recovery** checkers of the CA issuance sessions, over what a sessions run
//! recorded: the sessions clients created, every claim a worker (a node's daemon or an external
//! worker) took and when it stopped working it, what the observer saw of the sessions, each
//! node's final state, and the orders the upstream CA took.
//!
//! Times named `*_ms` without `machine` are simulated milliseconds since the run began (the
//! global clock); `machine` times are the replicated state machine's clock, which is the
//! leaders' skewed wall clocks.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::judge::Verdict;

/// A session whose creation a client saw acknowledged.
#[derive(Clone, Debug, Serialize)]
pub struct CreatedSession {
    /// The client.
    pub client: u32,
    /// The session id the cluster answered.
    pub id: u64,
    /// The names it certifies.
    pub names: Vec<String>,
    /// Whether the client serves every one of its HTTP-01 challenges (otherwise it must end
    /// killed or failed, never done).
    pub served: bool,
    /// When the client had the acknowledgement.
    pub acknowledged_ms: u64,
}

/// One claim as its worker saw it, from the grant until it stopped working the session.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimRecord {
    /// The worker (`node-N` for a node's daemons).
    pub worker: String,
    /// The session.
    pub session: u64,
    /// The claim's token.
    pub token: u64,
    /// When the worker had the grant.
    pub granted_ms: u64,
    /// Machine time of the grant (the deadline it was granted with, less the visibility).
    pub granted_machine_ms: u64,
    /// The latest deadline the worker was granted (machine time), extensions included.
    pub deadline_machine_ms: u64,
    /// The deadline it was granted with (machine time).
    pub first_deadline_machine_ms: u64,
    /// When the worker stopped working the session and sent its result; `None` if it never did
    /// (its node crashed, or the worker abandoned the claim).
    pub finished_ms: Option<u64>,
    /// When the session had become claimable (machine time), where the worker was told (a
    /// node's daemons are; the external workers' gRPC answer does not say).
    pub visible_at_machine_ms: Option<u64>,
}

/// A session as one node's final state holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FinalSession {
    /// Its stage (`done`, `failed`, `makechallenge`, ...).
    pub stage: String,
    /// False once killed.
    pub live: bool,
    /// The issued chain (PEM), once done.
    pub cert: Option<Vec<u8>>,
}

impl FinalSession {
    /// Whether the session can no longer change stage: done, failed or killed.
    pub fn terminal(&self) -> bool {
        !self.live || self.stage == "done" || self.stage == "failed"
    }
}

/// A certificate a client fetched from a done session.
#[derive(Clone, Debug, Serialize)]
pub struct SeenCertificate {
    /// The session.
    pub session: u64,
    /// The chain (PEM) as served.
    pub cert: Vec<u8>,
    /// When the client first saw it.
    pub seen_ms: u64,
    /// When the client's acknowledgement of it was answered, if it was.
    pub acknowledged_ms: Option<u64>,
}

/// An order the upstream CA took.
#[derive(Clone, Debug, Serialize)]
pub struct UpstreamOrder {
    /// The CA's order id.
    pub id: String,
    /// The idempotency key it was submitted under.
    pub key: String,
    /// The CSR it certifies.
    #[serde(skip)]
    pub csr: Vec<u8>,
    /// When the CA took it.
    pub created_ms: u64,
    /// Every distinct chain (PEM) the CA issued for it, in order.
    pub issued: Vec<Vec<u8>>,
}

/// One submission of an order to the upstream CA, whatever it answered.
#[derive(Clone, Debug, Serialize)]
pub struct UpstreamSubmission {
    /// The node whose daemon submitted it.
    pub node: u64,
    /// The idempotency key it was submitted under (which names the session).
    pub key: String,
    /// When the daemon called.
    pub at_ms: u64,
}

/// A completion sent late on purpose: a worker that lost its claim sends its result after it
/// saw a newer claim on the session (or the session past the claimed stage).
#[derive(Clone, Debug, Serialize)]
pub struct LateCompletion {
    /// The worker.
    pub worker: String,
    /// The session.
    pub session: u64,
    /// The token it completed with.
    pub token: u64,
    /// What a read showed before it sent: the newer claim's token (0 if the session had moved
    /// on to another stage instead).
    pub newer_token: u64,
    /// When it sent.
    pub sent_ms: u64,
    /// Whether the cluster accepted it (`None`: no answer).
    pub accepted: Option<bool>,
}

/// The idempotency key the node's issue daemon orders session `id` under.
pub fn order_key(session: u64) -> String {
    format!("{ORDER_KEY_PREFIX}{session}")
}

/// The session an order's idempotency key names, if it names one.
pub fn session_of_order_key(key: &str) -> Option<u64> {
    key.strip_prefix(ORDER_KEY_PREFIX)?.parse().ok()
}

/// What the daemons' idempotency keys start with; the session id follows.
const ORDER_KEY_PREFIX: &str = "certus-session-";

/// **No acknowledged session lost**: every session whose creation was acknowledged is in the
/// final state of every node in `finals` (the nodes that caught up), and a certificate a client
/// was shown is the one every node holds.
pub fn sessions_durable(
    created: &[CreatedSession],
    finals: &BTreeMap<u64, BTreeMap<u64, FinalSession>>,
    seen: &[SeenCertificate],
) -> Verdict {
    const NAME: &str = "sessions-durable";
    if finals.is_empty() {
        return Verdict::fail(NAME, "no node caught up to be read".to_owned());
    }
    let mut problems = Vec::new();
    for (node, sessions) in finals {
        for session in created {
            if !sessions.contains_key(&session.id) {
                problems.push(format!(
                    "n{node} lost session {} (client {}, created at {} ms)",
                    session.id, session.client, session.acknowledged_ms
                ));
            }
        }
        for cert in seen {
            match sessions.get(&cert.session) {
                Some(held) if held.cert.as_deref() == Some(cert.cert.as_slice()) => {}
                Some(held) => problems.push(format!(
                    "n{node} holds {} for session {}, not the certificate a client saw at {} ms",
                    if held.cert.is_some() {
                        "another certificate"
                    } else {
                        "no certificate"
                    },
                    cert.session,
                    cert.seen_ms
                )),
                None => problems.push(format!(
                    "n{node} lost session {} whose certificate a client saw at {} ms",
                    cert.session, cert.seen_ms
                )),
            }
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} acknowledged sessions and {} fetched certificates on each of {} nodes",
            created.len(),
            seen.len(),
            finals.len()
        ),
    )
}

/// **Every session ends**: once the faults heal, every acknowledged session is done, failed or
/// killed within `bound_ms` (of the healing, or of its creation if later), and a session whose
/// client served all its challenges ends done (and one whose client did not never does).
/// `terminal_at` is when the observer first saw each session terminal and in which stage.
pub fn sessions_terminal(
    created: &[CreatedSession],
    terminal_at: &BTreeMap<u64, (u64, FinalSession)>,
    heal_ms: u64,
    bound_ms: u64,
    end_ms: u64,
) -> Verdict {
    const NAME: &str = "sessions-terminal";
    let mut problems = Vec::new();
    let mut done = 0;
    let mut ended_otherwise = 0;
    let mut late_ones = 0;
    for session in created {
        let due_ms = heal_ms.max(session.acknowledged_ms) + bound_ms;
        match terminal_at.get(&session.id) {
            Some((at_ms, state)) if *at_ms <= due_ms => {
                if state.stage == "done" && state.live {
                    done += 1;
                    if !session.served {
                        problems.push(format!(
                            "session {} (client {}) ended done though not every challenge was \
                             served",
                            session.id, session.client
                        ));
                    }
                } else {
                    ended_otherwise += 1;
                    if session.served {
                        problems.push(format!(
                            "session {} (client {}) had every challenge served but ended {}{}",
                            session.id,
                            session.client,
                            state.stage,
                            if state.live { "" } else { " (killed)" }
                        ));
                    }
                }
            }
            Some((at_ms, _)) => problems.push(format!(
                "session {} (client {}) ended at {at_ms} ms, after its bound {due_ms} ms",
                session.id, session.client
            )),
            // Created too close to the end for its bound to have come.
            None if due_ms > end_ms => late_ones += 1,
            None => problems.push(format!(
                "session {} (client {}, created at {} ms) had not ended by {due_ms} ms",
                session.id, session.client, session.acknowledged_ms
            )),
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} sessions: {done} done, {ended_otherwise} failed or killed (unserved challenges), \
             {late_ones} created too late to judge; bound {bound_ms} ms after healing",
            created.len()
        ),
    )
}

/// **One claimant at a time**: no session is worked under two claims at once unless the first
/// had expired: a claim granted while another worker still worked the session must have been
/// granted at or after the other claim's latest deadline (machine time).
pub fn claims_exclusive(claims: &[ClaimRecord]) -> Verdict {
    const NAME: &str = "claims-exclusive";
    let mut by_session: BTreeMap<u64, Vec<&ClaimRecord>> = BTreeMap::new();
    for claim in claims {
        by_session.entry(claim.session).or_default().push(claim);
    }
    let mut problems = Vec::new();
    let mut tokens = BTreeMap::new();
    for claim in claims {
        if let Some(other) = tokens.insert((claim.session, claim.token), claim)
            && other.worker != claim.worker
        {
            problems.push(format!(
                "session {}: token {} granted to both {} and {}",
                claim.session, claim.token, other.worker, claim.worker
            ));
        }
    }
    for (session, mut list) in by_session {
        list.sort_by_key(|claim| (claim.token, claim.granted_ms));
        for (index, earlier) in list.iter().enumerate() {
            for later in &list[index + 1..] {
                if later.token == earlier.token {
                    continue;
                }
                let still_working = earlier
                    .finished_ms
                    .is_none_or(|finished| finished > later.granted_ms);
                if still_working && later.granted_machine_ms < earlier.deadline_machine_ms {
                    problems.push(format!(
                        "session {session}: {} was granted token {} at {} ms (machine {} ms) \
                         while {} still worked under token {} (deadline {} ms)",
                        later.worker,
                        later.token,
                        later.granted_ms,
                        later.granted_machine_ms,
                        earlier.worker,
                        earlier.token,
                        earlier.deadline_machine_ms
                    ));
                }
            }
        }
    }
    Verdict::of_problems(NAME, problems, format!("{} claims", claims.len()))
}

/// **No claim early**: a queued session is claimed only once it is visible (machine time): not
/// before the delay its worker released it with, or the retry time of a challenge test, is over.
/// Claimed sessions are kept apart from the queues, so an early claim never overlaps a live
/// claim and [`claims_exclusive`] cannot see it.
pub fn claims_not_early(claims: &[ClaimRecord]) -> Verdict {
    const NAME: &str = "claims-not-early";
    let mut judged = 0;
    let mut problems = Vec::new();
    for claim in claims {
        let Some(visible_at) = claim.visible_at_machine_ms else {
            continue;
        };
        judged += 1;
        if claim.granted_machine_ms < visible_at {
            problems.push(format!(
                "session {}: {} was granted token {} at machine {} ms, {} ms before the session \
                 became visible (machine {visible_at} ms)",
                claim.session,
                claim.worker,
                claim.token,
                claim.granted_machine_ms,
                visible_at - claim.granted_machine_ms
            ));
        }
    }
    Verdict::of_problems(NAME, problems, format!("{judged} claims"))
}

/// **Claims kept**: a node's daemon keeps the claims it works. While it works a session past
/// its claim's visibility it extends the claim, so no other worker takes the session from a
/// live, connected worker and the work is not done twice.
///
/// Judged on the daemons' claims granted from `from_ms` (the faults healed and a leader
/// settled) by daemons on nodes no fault kept on touches (`excluded` names those daemons): a
/// daemon cut off or whose Raft is down cannot extend, by design. The machine time at the finish
/// is the grant's machine time plus the global time worked; `slack_ms` covers the machine clock
/// running ahead of it (the clocks' spread).
pub fn claims_kept(
    claims: &[ClaimRecord],
    from_ms: u64,
    excluded: &[String],
    slack_ms: u64,
) -> Verdict {
    const NAME: &str = "claims-kept";
    let mut judged = 0;
    let mut extended = 0;
    let mut problems = Vec::new();
    let daemons = claims.iter().filter(|claim| {
        claim.worker.starts_with("node-")
            && claim.granted_ms >= from_ms
            && !excluded.contains(&claim.worker)
    });
    for claim in daemons {
        let Some(finished_ms) = claim.finished_ms else {
            continue;
        };
        judged += 1;
        if claim.deadline_machine_ms > claim.first_deadline_machine_ms {
            extended += 1;
        }
        let finished_machine_ms = claim.granted_machine_ms + (finished_ms - claim.granted_ms);
        if finished_machine_ms > claim.deadline_machine_ms + slack_ms {
            problems.push(format!(
                "session {}: {} worked token {} until {finished_ms} ms (machine ≈ \
                 {finished_machine_ms}) past its deadline {} (granted at {} ms, machine {}): it \
                 let the claim lapse while working",
                claim.session,
                claim.worker,
                claim.token,
                claim.deadline_machine_ms,
                claim.granted_ms,
                claim.granted_machine_ms
            ));
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{judged} daemon claims granted after the faults healed finished within their \
             deadlines ({extended} extended)"
        ),
    )
}

/// **Abandoned claims come back**: a claim whose worker never finished (it crashed or gave up)
/// is followed by a later claim on the same session, or the session ended.
pub fn claims_redelivered(
    claims: &[ClaimRecord],
    finals: &BTreeMap<u64, BTreeMap<u64, FinalSession>>,
) -> Verdict {
    const NAME: &str = "claims-redelivered";
    let mut latest: BTreeMap<u64, u64> = BTreeMap::new();
    for claim in claims {
        let token = latest.entry(claim.session).or_default();
        *token = (*token).max(claim.token);
    }
    let ended = |session: u64| {
        finals
            .values()
            .any(|sessions| sessions.get(&session).is_some_and(FinalSession::terminal))
    };
    let mut problems = Vec::new();
    let mut abandoned = 0;
    for claim in claims.iter().filter(|claim| claim.finished_ms.is_none()) {
        abandoned += 1;
        if latest[&claim.session] == claim.token && !ended(claim.session) {
            problems.push(format!(
                "session {}: {} abandoned token {} (deadline {} ms) and nobody claimed it again",
                claim.session, claim.worker, claim.token, claim.deadline_machine_ms
            ));
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{abandoned} claims abandoned by crashed or departing workers, each taken up again"
        ),
    )
}

/// **Orders resumed**: a daemon whose claim found the session's note naming its upstream order
/// polls that order and never submits a new one (the CA dedupes by key, so a resubmission
/// costs an order only at a CA that does not, and shows a daemon that lost its place).
/// `resumed_claims` are the claims (session, token) seen held while the note named an order: the
/// note changes only when a claim ends, so such a claim was granted with it. A submission
/// belongs to the latest claim its node was granted on its session before it.
pub fn orders_resumed(
    submissions: &[UpstreamSubmission],
    claims: &[ClaimRecord],
    resumed_claims: &BTreeMap<(u64, u64), String>,
) -> Verdict {
    const NAME: &str = "orders-resumed";
    let mut problems = Vec::new();
    for submission in submissions {
        let Some(session) = session_of_order_key(&submission.key) else {
            problems.push(format!(
                "node-{} submitted under a key that names no session: {}",
                submission.node, submission.key
            ));
            continue;
        };
        let worker = format!("node-{}", submission.node);
        let claim = claims
            .iter()
            .filter(|claim| {
                claim.session == session
                    && claim.worker == worker
                    && claim.granted_ms <= submission.at_ms
            })
            .max_by_key(|claim| (claim.granted_ms, claim.token));
        let Some(claim) = claim else {
            problems.push(format!(
                "session {session}: {worker} submitted an order at {} ms without a claim",
                submission.at_ms
            ));
            continue;
        };
        if let Some(order) = resumed_claims.get(&(session, claim.token)) {
            problems.push(format!(
                "session {session}: {worker} submitted a new order at {} ms under claim {}, \
                 granted while the session's note named order {order}",
                submission.at_ms, claim.token
            ));
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} submissions to the upstream CA; {} claims seen resuming an order, none of them \
             submitting again",
            submissions.len(),
            resumed_claims.len(),
        ),
    )
}

/// **Issued once**: the upstream CA took at most one order per session and per CSR, issued at
/// most one certificate per order, took no order for a session after its client acknowledged
/// the certificate, and every certificate a client saw is the one issued for its session.
pub fn issued_once(orders: &[UpstreamOrder], seen: &[SeenCertificate]) -> Verdict {
    const NAME: &str = "issued-once";
    let mut problems = Vec::new();
    let mut by_key: BTreeMap<&str, Vec<&UpstreamOrder>> = BTreeMap::new();
    let mut by_csr: BTreeMap<&[u8], Vec<&UpstreamOrder>> = BTreeMap::new();
    for order in orders {
        by_key.entry(order.key.as_str()).or_default().push(order);
        by_csr.entry(order.csr.as_slice()).or_default().push(order);
        if order.issued.len() > 1 {
            problems.push(format!(
                "order {} ({}) was issued {} different certificates",
                order.id,
                order.key,
                order.issued.len()
            ));
        }
    }
    for (key, list) in &by_key {
        if list.len() > 1 {
            let ids: Vec<&str> = list.iter().map(|order| order.id.as_str()).collect();
            problems.push(format!("{key} was ordered {} times: {ids:?}", list.len()));
        }
    }
    for list in by_csr.values() {
        let keys: BTreeSet<&str> = list.iter().map(|order| order.key.as_str()).collect();
        if keys.len() > 1 {
            problems.push(format!("one CSR was ordered under several keys: {keys:?}"));
        }
    }
    for cert in seen {
        let key = order_key(cert.session);
        let issued = by_key.get(key.as_str()).and_then(|list| list.first());
        match issued {
            Some(order) if order.issued.first() == Some(&cert.cert) => {}
            Some(order) => problems.push(format!(
                "session {}: a client saw a certificate that is not what order {} issued",
                cert.session, order.id
            )),
            None => problems.push(format!(
                "session {}: a client saw a certificate the upstream CA never issued",
                cert.session
            )),
        }
        if let (Some(acknowledged_ms), Some(list)) =
            (cert.acknowledged_ms, by_key.get(key.as_str()))
        {
            for order in list
                .iter()
                .filter(|order| order.created_ms > acknowledged_ms)
            {
                problems.push(format!(
                    "session {}: order {} was taken at {} ms, after the client acknowledged at \
                     {acknowledged_ms} ms",
                    cert.session, order.id, order.created_ms
                ));
            }
        }
    }
    let issued: usize = orders.iter().map(|order| order.issued.len()).sum();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} orders, {issued} certificates issued, {} seen by clients",
            orders.len(),
            seen.len()
        ),
    )
}

/// **Stale completions refused**: a completion sent with a token after a read had shown a newer
/// claim on the session (or the session past that stage) is never accepted.
pub fn stale_completions_refused(late: &[LateCompletion]) -> Verdict {
    const NAME: &str = "stale-completions-refused";
    let problems: Vec<String> = late
        .iter()
        .filter(|completion| completion.accepted == Some(true))
        .map(|completion| {
            format!(
                "session {}: {} completed with token {} at {} ms and was accepted, after a read \
                 had shown {}",
                completion.session,
                completion.worker,
                completion.token,
                completion.sent_ms,
                if completion.newer_token == 0 {
                    "the session past that stage".to_owned()
                } else {
                    format!("token {}", completion.newer_token)
                }
            )
        })
        .collect();
    let refused = late
        .iter()
        .filter(|completion| completion.accepted == Some(false))
        .count();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} late completions sent, {refused} answered and refused",
            late.len()
        ),
    )
}

/// The state-machine side of redelivery: from `heal_ms` (when the faults healed and a leader had
/// time to settle) on, the most advanced replicated
/// state never held a claim more than the observer's slack (a tick and its application) past its
/// deadline by that state's own clock. `overdue` lists what the observer found: (when, node,
/// session, token, how far past).
pub fn expired_claims_returned(overdue: &[(u64, u64, u64, u64, u64)], heal_ms: u64) -> Verdict {
    const NAME: &str = "expired-claims-returned";
    let problems: Vec<String> = overdue
        .iter()
        .filter(|(at_ms, ..)| *at_ms >= heal_ms)
        .map(|(at_ms, node, session, token, past_ms)| {
            format!(
                "at {at_ms} ms n{node}'s state still held session {session} under token \
                 {token}, {past_ms} ms past its deadline"
            )
        })
        .collect();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "after healing (judged from {heal_ms} ms), every expired claim went back to its \
             queue within a tick"
        ),
    )
}

#[cfg(test)]
mod tests;
