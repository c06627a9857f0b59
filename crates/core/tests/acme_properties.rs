//! Properties of the ACME tables over random runs: a few accounts (on a handful of keys) register,
//! update, deactivate and change keys, place orders (some malformed), answer challenges (their
//! own and others', in and out of range), validators record what they found (sometimes for the
//! wrong token), clients deactivate authorizations and finalize (some too early, some twice, some
//! with an empty CSR), an issue worker claims the sessions finalizing creates and issues, fails,
//! releases or loses them, an operator kills them, serials are revoked (some malformed, some
//! twice), the leader ticks while time jumps (past the order lifetime and retention too, and to
//! the millisecond either side of an order's expiry and end of retention), and replicas restart
//! from snapshots.
//!
//! Checked after every command:
//! 1. the state's invariants;
//! 2. a refused command changes nothing but the applied index and the clock;
//! 3. a reference model agrees with the state: which command is refused; which account each key
//!    names, with its status and contacts; each order's authorizations and status (pending until
//!    every authorization validated, ready then, processing once finalized, valid once its
//!    session issued, invalid once an authorization failed or was deactivated, the order
//!    expired, or its session failed, was killed or timed out); a finalize succeeds only on a
//!    ready order, so once per order; a valid order has every authorization valid and carries
//!    exactly the certificate its session was issued with; a processing order's session is live
//!    in the issue stage; the validators' queue; which orders retention deleted; the revoked
//!    serials, none twice;
//! 4. at random points, a snapshot restores to an equal state;
//!
//! and after the run: 5. the same commands at the same stamps on a fresh state give the same
//! answers and the same snapshot bytes.
//!

use std::collections::{BTreeMap, BTreeSet};

use certus_core::acme::{
    AccountId, AccountKey, AccountStatus, AcmeCommand, AcmeError, AcmeReply, AuthorizationStatus,
    ChallengeStatus, OrderId, OrderStatus,
};
use certus_core::limits::{ACME_ORDER_LIFETIME_MS, ACME_ORDER_RETENTION_MS};
use certus_core::{
    ChallengeToken, Command, DnsName, Reason, Response, SessionCommand, SessionConfig, SessionId,
    SessionReply, Stage, Stamp, State, StepOutcome, WorkerId, apply,
};
use proptest::prelude::*;
use proptest::sample::Index;

const T0: u64 = 1_700_000_000_000;
/// Registrations use the first three keys; key changes may also move to the last two.
const KEY_SEEDS: [char; 5] = ['a', 'b', 'c', 'd', 'e'];
const REGISTER_KEYS: usize = 3;
const NAME_POOL: [&str; 4] = ["a.example", "b.example", "c.example", "d.example"];
const VALID_SERIALS: [&str; 4] = ["01", "0a1b", "ff", "00ff10"];
const INVALID_SERIALS: [&str; 5] = [
    "",
    "0A1B",
    "abc",
    "zz",
    "0123456789012345678901234567890123456789ab",
];
const KILL_REASON: &str = "operator stop";
const FAIL_REASON: &str = "the CA is unavailable";

/// Which order (and authorization) an action aims at.
#[derive(Clone, Debug)]
struct Target {
    /// Among the orders where the action can succeed (else any order ever created).
    smart: bool,
    pick: Index,
    /// The position when not smart: 0 to 3, so sometimes out of range.
    position: u32,
}

/// Which account acts on an order.
#[derive(Clone, Debug)]
enum Who {
    Owner,
    Any(Index),
    Unknown,
}

/// What the issue worker does with a claimed session.
#[derive(Clone, Debug)]
enum Work {
    Issue { stale: bool, empty_cert: bool },
    Fail,
    Release { delay_ms: u64 },
}

#[derive(Clone, Debug)]
enum Action {
    Register {
        key: usize,
        /// 0: none; 1: one valid; 2: one malformed.
        contact: u8,
        only_existing: bool,
        bad_key: bool,
    },
    Update {
        account: Index,
        contact: Option<u8>,
        deactivate: bool,
    },
    ChangeKey {
        account: Index,
        new_key: usize,
        stale_old: bool,
        bad_key: bool,
    },
    NewOrder {
        account: Index,
        /// Indexes into the name pool, as generated (maybe unsorted, duplicated or empty).
        names: Vec<usize>,
        /// Sort and deduplicate them first, as a well-behaved node does.
        tidy: bool,
        duplicate_token: bool,
    },
    Respond {
        target: Target,
        who: Who,
    },
    Validate {
        target: Target,
        ok: bool,
        wrong_token: bool,
    },
    Deactivate {
        target: Target,
        who: Who,
    },
    Finalize {
        target: Target,
        who: Who,
        csr: Vec<u8>,
    },
    Claim {
        visibility_ms: u64,
        max: u32,
    },
    /// The issue worker steps a session it claimed (claiming first when it holds none).
    Work {
        pick: Index,
        step: Work,
    },
    Kill {
        pick: Index,
    },
    Revoke {
        serial: &'static str,
        reason: u8,
    },
    Tick,
    /// A tick just before, at or just after an order's expiry or the end of its retention.
    TickAt {
        pick: Index,
        retention: bool,
        offset_ms: i64,
    },
    /// Configure the sessions with this stage timeout (first thing in a run).
    Configure {
        stage_timeout_ms: u64,
    },
    RoundTrip,
}

fn target() -> impl Strategy<Value = Target> {
    (prop::bool::weighted(0.85), any::<Index>(), 0u32..4).prop_map(|(smart, pick, position)| {
        Target {
            smart,
            pick,
            position,
        }
    })
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![
        12 => Just(Who::Owner),
        2 => any::<Index>().prop_map(Who::Any),
        1 => Just(Who::Unknown),
    ]
}

fn work() -> impl Strategy<Value = Work> {
    prop_oneof![
        8 => (prop::bool::weighted(0.1), prop::bool::weighted(0.05))
            .prop_map(|(stale, empty_cert)| Work::Issue { stale, empty_cert }),
        1 => Just(Work::Fail),
        1 => prop_oneof![Just(0u64), 1u64..10_000].prop_map(|delay_ms| Work::Release { delay_ms }),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    let names = prop_oneof![
        1 => Just(Vec::new()),
        12 => prop::collection::vec(0usize..NAME_POOL.len(), 1..4),
    ];
    let serial = prop_oneof![
        6 => prop::sample::select(&VALID_SERIALS[..]),
        1 => prop::sample::select(&INVALID_SERIALS[..]),
    ];
    let reason = prop_oneof![8 => 0u8..=10, 1 => Just(7u8), 1 => 11u8..];
    prop_oneof![
        3 => (0..REGISTER_KEYS, prop_oneof![4 => 0u8..2, 1 => Just(2u8)], prop::bool::weighted(0.2), prop::bool::weighted(0.05))
            .prop_map(|(key, contact, only_existing, bad_key)| Action::Register { key, contact, only_existing, bad_key }),
        1 => (any::<Index>(), prop::option::of(0u8..3), prop::bool::weighted(0.15))
            .prop_map(|(account, contact, deactivate)| Action::Update { account, contact, deactivate }),
        1 => (any::<Index>(), 0..KEY_SEEDS.len(), prop::bool::weighted(0.2), prop::bool::weighted(0.1))
            .prop_map(|(account, new_key, stale_old, bad_key)| Action::ChangeKey { account, new_key, stale_old, bad_key }),
        6 => (any::<Index>(), names, prop::bool::weighted(0.85), prop::bool::weighted(0.05))
            .prop_map(|(account, names, tidy, duplicate_token)| Action::NewOrder { account, names, tidy, duplicate_token }),
        8 => (target(), who()).prop_map(|(target, who)| Action::Respond { target, who }),
        8 => (target(), prop::bool::weighted(0.85), prop::bool::weighted(0.1))
            .prop_map(|(target, ok, wrong_token)| Action::Validate { target, ok, wrong_token }),
        1 => (target(), who()).prop_map(|(target, who)| Action::Deactivate { target, who }),
        3 => (target(), who(), prop_oneof![1 => Just(Vec::new()), 8 => prop::collection::vec(any::<u8>(), 1..4)])
            .prop_map(|(target, who, csr)| Action::Finalize { target, who, csr }),
        3 => (prop::sample::select(vec![1_000u64, 30_000, 600_000]), 1u32..3)
            .prop_map(|(visibility_ms, max)| Action::Claim { visibility_ms, max }),
        6 => (any::<Index>(), work()).prop_map(|(pick, step)| Action::Work { pick, step }),
        1 => any::<Index>().prop_map(|pick| Action::Kill { pick }),
        2 => (serial, reason).prop_map(|(serial, reason)| Action::Revoke { serial, reason }),
        3 => Just(Action::Tick),
        1 => (any::<Index>(), any::<bool>(), -1i64..=1)
            .prop_map(|(pick, retention, offset_ms)| Action::TickAt { pick, retention, offset_ms }),
        1 => Just(Action::RoundTrip),
    ]
}

/// One step: what happens, how far the proposer's clock moves (sometimes back: a new leader's
/// clock may be behind; the machine clock never goes back), and how far the log index moves.
fn steps() -> impl Strategy<Value = Vec<(Action, i64, u64)>> {
    const HOUR_MS: i64 = 3_600_000;
    const DAY_MS: i64 = 24 * HOUR_MS;
    let lifetime_ms = ACME_ORDER_LIFETIME_MS as i64;
    let retention_ms = ACME_ORDER_RETENTION_MS as i64;
    let clock = prop_oneof![
        120 => 0i64..5_000,
        // Past a session's stage timeout (an hour by default) now and then.
        8 => 5_000i64..2 * HOUR_MS,
        1 => lifetime_ms - DAY_MS..lifetime_ms + DAY_MS,
        1 => retention_ms - DAY_MS..retention_ms + DAY_MS,
        6 => -5_000i64..0,
    ];
    let index = prop_oneof![6 => Just(1u64), 1 => 2u64..4];
    // Issuing sessions time out after an hour, or live long enough for their orders to pass
    // their retention while they issue.
    let configure = prop::sample::select(vec![3_600_000u64, 30 * DAY_MS as u64])
        .prop_map(|stage_timeout_ms| Action::Configure { stage_timeout_ms });
    // Most runs start with an account or two, so that orders flow from the first steps.
    let opening = prop::collection::vec(
        (0..REGISTER_KEYS).prop_map(|key| Action::Register {
            key,
            contact: 1,
            only_existing: false,
            bad_key: false,
        }),
        0..3,
    );
    (
        configure,
        opening,
        prop::collection::vec((action(), clock, index), 1..200),
    )
        .prop_map(|(configure, opening, steps)| {
            let opening = std::iter::once(configure)
                .chain(opening)
                .map(|action| (action, 1_000, 1));
            opening.chain(steps).collect()
        })
}

fn key(seed: usize) -> AccountKey {
    let seed = KEY_SEEDS[seed];
    AccountKey {
        jwk: format!("{{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"{seed}\",\"y\":\"{seed}\"}}"),
        thumbprint: std::iter::repeat_n(seed, 43).collect(),
    }
}

fn bad_key() -> AccountKey {
    AccountKey {
        jwk: "{}".to_owned(),
        thumbprint: "too-short".to_owned(),
    }
}

fn contact(kind: u8) -> Vec<String> {
    match kind {
        0 => Vec::new(),
        1 => vec!["mailto:ops@example.com".to_owned()],
        _ => vec!["mailto:ops @example.com".to_owned()],
    }
}

/// A challenge as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Challenge {
    Pending,
    Processing,
    Valid,
    Invalid,
}

#[derive(Clone, Debug)]
struct ModelAuthz {
    name: DnsName,
    token: ChallengeToken,
    challenge: Challenge,
    deactivated: bool,
}

#[derive(Clone, Debug)]
struct ModelOrder {
    account: AccountId,
    created_ms: u64,
    authorizations: Vec<ModelAuthz>,
    csr: Option<Vec<u8>>,
    session: Option<SessionId>,
    certificate: Option<Vec<u8>>,
    /// What the order's error must contain, once issuance failed.
    failure: Option<&'static str>,
}

impl ModelOrder {
    fn expires_ms(&self) -> u64 {
        self.created_ms + ACME_ORDER_LIFETIME_MS
    }

    fn issuing(&self) -> bool {
        self.session.is_some() && self.certificate.is_none() && self.failure.is_none()
    }

    fn authorization_status(&self, authz: &ModelAuthz, now_ms: u64) -> AuthorizationStatus {
        if authz.deactivated {
            AuthorizationStatus::Deactivated
        } else if authz.challenge == Challenge::Valid {
            AuthorizationStatus::Valid
        } else if authz.challenge == Challenge::Invalid {
            AuthorizationStatus::Invalid
        } else if now_ms >= self.expires_ms() {
            AuthorizationStatus::Expired
        } else {
            AuthorizationStatus::Pending
        }
    }

    fn status(&self, now_ms: u64) -> OrderStatus {
        if self.certificate.is_some() {
            OrderStatus::Valid
        } else if self.failure.is_some() {
            OrderStatus::Invalid
        } else if self.session.is_some() {
            OrderStatus::Processing
        } else if now_ms >= self.expires_ms()
            || self
                .authorizations
                .iter()
                .any(|a| a.deactivated || a.challenge == Challenge::Invalid)
        {
            OrderStatus::Invalid
        } else if self
            .authorizations
            .iter()
            .all(|a| a.challenge == Challenge::Valid)
        {
            OrderStatus::Ready
        } else {
            OrderStatus::Pending
        }
    }
}

#[derive(Clone, Debug)]
struct ModelAccount {
    key: usize,
    contact: Vec<String>,
    valid: bool,
}

/// What the model expects of a command: accepted, refused, or refused with exactly this error.
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Accepted,
    Refused,
    RefusedWith(AcmeError),
}

#[derive(Default)]
struct Model {
    accounts: BTreeMap<AccountId, ModelAccount>,
    /// Key seed → the account it names.
    keys: BTreeMap<usize, AccountId>,
    /// Stored orders.
    orders: BTreeMap<OrderId, ModelOrder>,
    /// Every order id ever created, deleted ones included.
    ever_ordered: Vec<OrderId>,
    /// Every id handed out (accounts and orders share the sequence).
    last_id: u64,
    /// Every issuing session ever created, with its order.
    sessions: BTreeMap<SessionId, OrderId>,
    /// The issue worker's claims: session and token.
    held: Vec<(SessionId, u64)>,
    revoked: BTreeSet<&'static str>,
}

impl Model {
    fn account_at(&self, pick: &Index) -> AccountId {
        if self.accounts.is_empty() {
            return AccountId(0);
        }
        *self
            .accounts
            .keys()
            .nth(pick.index(self.accounts.len()))
            .unwrap()
    }

    /// The order and position an action aims at, and the account acting.
    fn aim(
        &self,
        target: &Target,
        who: &Who,
        smart: impl Fn(&ModelOrder, &ModelAuthz) -> bool,
    ) -> (AccountId, OrderId, u32) {
        let candidates: Vec<(OrderId, u32)> = self
            .orders
            .iter()
            .flat_map(|(id, order)| {
                order
                    .authorizations
                    .iter()
                    .enumerate()
                    .filter(|(_, authz)| smart(order, authz))
                    .map(|(position, _)| (*id, position_of(position)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let (order, position) = if target.smart && !candidates.is_empty() {
            candidates[target.pick.index(candidates.len())]
        } else if self.ever_ordered.is_empty() {
            (OrderId(0), target.position)
        } else {
            let ids = &self.ever_ordered;
            (ids[target.pick.index(ids.len())], target.position)
        };
        let account = match who {
            Who::Owner => self
                .orders
                .get(&order)
                .map_or(AccountId(0), |order| order.account),
            Who::Any(pick) => self.account_at(pick),
            Who::Unknown => AccountId(0),
        };
        (account, order, position)
    }

    /// One of the worker's claims: mostly one it still holds, sometimes one it lost; none when
    /// it holds none.
    fn held_at(&self, pick: &Index, state: &State) -> Option<(SessionId, u64)> {
        let current: Vec<(SessionId, u64)> = self
            .held
            .iter()
            .copied()
            .filter(|(session, token)| {
                state
                    .session(*session)
                    .and_then(|s| s.claim())
                    .is_some_and(|claim| claim.token == *token)
            })
            .collect();
        if pick.index(10) == 0 && !self.held.is_empty() {
            Some(self.held[pick.index(self.held.len())])
        } else if current.is_empty() {
            None
        } else {
            Some(current[pick.index(current.len())])
        }
    }

    /// The command an action stands for in this state; none for a round trip (or a session
    /// action with no session to act on, which ticks instead).
    fn resolve(&self, action: &Action, state: &State, index: u64) -> Option<Command> {
        let acme = |command| Some(Command::Acme(command));
        let session = |command| Some(Command::Session(command));
        let reason = |text: &str| Reason::new(text).unwrap();
        match action {
            Action::Register {
                key: seed,
                contact: kind,
                only_existing,
                bad_key: bad,
            } => acme(AcmeCommand::NewAccount {
                key: if *bad { bad_key() } else { key(*seed) },
                contact: contact(*kind),
                only_existing: *only_existing,
            }),
            Action::Update {
                account,
                contact: kind,
                deactivate,
            } => acme(AcmeCommand::UpdateAccount {
                account: self.account_at(account),
                contact: kind.map(contact),
                deactivate: *deactivate,
            }),
            Action::ChangeKey {
                account,
                new_key,
                stale_old,
                bad_key: bad,
            } => {
                let account = self.account_at(account);
                let current = self.accounts.get(&account).map_or(0, |a| a.key);
                let old = if *stale_old {
                    (current + 1) % KEY_SEEDS.len()
                } else {
                    current
                };
                acme(AcmeCommand::ChangeKey {
                    account,
                    old_thumbprint: key(old).thumbprint,
                    new_key: if *bad { bad_key() } else { key(*new_key) },
                })
            }
            Action::NewOrder {
                account,
                names,
                tidy,
                duplicate_token,
            } => {
                let mut names = names.clone();
                if *tidy {
                    names.sort_unstable();
                    names.dedup();
                }
                let tokens = (0..names.len())
                    .map(|i| {
                        let i = if *duplicate_token { 0 } else { i };
                        ChallengeToken::new(format!("tok-{index}-{i}")).unwrap()
                    })
                    .collect();
                acme(AcmeCommand::NewOrder {
                    account: self.account_at(account),
                    identifiers: names
                        .iter()
                        .map(|&n| DnsName::new(NAME_POOL[n]).unwrap())
                        .collect(),
                    tokens,
                })
            }
            Action::Respond { target, who } => {
                let now_ms = state.clock_ms();
                let (account, order, authorization) = self.aim(target, who, |order, authz| {
                    authz.challenge == Challenge::Pending
                        && !authz.deactivated
                        && now_ms < order.expires_ms()
                });
                acme(AcmeCommand::RespondChallenge {
                    account,
                    order,
                    authorization,
                })
            }
            Action::Validate {
                target,
                ok,
                wrong_token,
            } => {
                let (_, order, authorization) = self.aim(target, &Who::Owner, |_, authz| {
                    authz.challenge == Challenge::Processing
                });
                let token = self
                    .orders
                    .get(&order)
                    .and_then(|o| o.authorizations.get(authorization as usize))
                    .filter(|_| !wrong_token)
                    .map_or_else(
                        || ChallengeToken::new("wrong").unwrap(),
                        |a| a.token.clone(),
                    );
                acme(AcmeCommand::RecordValidation {
                    order,
                    authorization,
                    token,
                    error: (!ok).then(|| reason("connection refused")),
                })
            }
            Action::Deactivate { target, who } => {
                let (account, order, authorization) =
                    self.aim(target, who, |order, _| order.session.is_none());
                acme(AcmeCommand::DeactivateAuthorization {
                    account,
                    order,
                    authorization,
                })
            }
            Action::Finalize { target, who, csr } => {
                let now_ms = state.clock_ms();
                let (account, order, _) = self.aim(target, who, |order, _| {
                    order.status(now_ms) == OrderStatus::Ready
                });
                acme(AcmeCommand::Finalize {
                    account,
                    order,
                    csr: csr.clone(),
                })
            }
            Action::Claim { visibility_ms, max } => session(SessionCommand::Claim {
                stage: Stage::Issue,
                worker: WorkerId::new("issuer").unwrap(),
                visibility_ms: *visibility_ms,
                max: *max,
            }),
            Action::Work { pick, step } => {
                let Some((id, token)) = self.held_at(pick, state) else {
                    return session(SessionCommand::Claim {
                        stage: Stage::Issue,
                        worker: WorkerId::new("issuer").unwrap(),
                        visibility_ms: 30_000,
                        max: 3,
                    });
                };
                session(match step {
                    Work::Issue { stale, empty_cert } => SessionCommand::Complete {
                        session: id,
                        token: if *stale { token - 1 } else { token },
                        outcome: StepOutcome::Issued {
                            cert: if *empty_cert {
                                Vec::new()
                            } else {
                                format!("-----BEGIN CERTIFICATE----- {id} {index}").into_bytes()
                            },
                        },
                    },
                    Work::Fail => SessionCommand::Fail {
                        session: id,
                        token,
                        reason: reason(FAIL_REASON),
                    },
                    Work::Release { delay_ms } => SessionCommand::Release {
                        session: id,
                        token,
                        delay_ms: *delay_ms,
                        note: None,
                    },
                })
            }
            Action::Kill { pick } => {
                if self.sessions.is_empty() {
                    return Some(Command::Tick);
                }
                let id = *self
                    .sessions
                    .keys()
                    .nth(pick.index(self.sessions.len()))
                    .unwrap();
                session(SessionCommand::Kill {
                    session: id,
                    reason: reason(KILL_REASON),
                })
            }
            Action::Revoke { serial, reason } => acme(AcmeCommand::Revoke {
                serial: (*serial).to_owned(),
                reason: *reason,
            }),
            Action::Tick | Action::TickAt { .. } => Some(Command::Tick),
            Action::Configure { stage_timeout_ms } => {
                session(SessionCommand::Configure(SessionConfig {
                    stage_timeout_ms: *stage_timeout_ms,
                    ..SessionConfig::default()
                }))
            }
            Action::RoundTrip => None,
        }
    }

    fn active(&self, id: AccountId) -> Result<(), Expect> {
        match self.accounts.get(&id) {
            None => Err(Expect::RefusedWith(AcmeError::NoAccount)),
            Some(account) if !account.valid => Err(Expect::RefusedWith(AcmeError::Deactivated(id))),
            Some(_) => Ok(()),
        }
    }

    fn owned(&self, account: AccountId, id: OrderId) -> Result<&ModelOrder, Expect> {
        self.active(account)?;
        match self.orders.get(&id) {
            Some(order) if order.account == account => Ok(order),
            _ => Err(Expect::RefusedWith(AcmeError::NoOrder(id))),
        }
    }

    fn authz(order: &ModelOrder, position: u32) -> Result<&ModelAuthz, Expect> {
        order
            .authorizations
            .get(position as usize)
            .ok_or(Expect::Refused)
    }

    /// What the model expects of an ACME command at machine time `now_ms`.
    fn expect(&self, command: &AcmeCommand, now_ms: u64) -> Expect {
        let decided = (|| -> Result<(), Expect> {
            match command {
                AcmeCommand::NewAccount {
                    key: account_key,
                    contact,
                    only_existing,
                } => {
                    if account_key.thumbprint.len() != 43 || contact.iter().any(|c| c.contains(' '))
                    {
                        return Err(Expect::Refused);
                    }
                    if !self.keys.contains_key(&seed_of(account_key)) && *only_existing {
                        return Err(Expect::RefusedWith(AcmeError::NoAccount));
                    }
                    Ok(())
                }
                AcmeCommand::UpdateAccount {
                    account, contact, ..
                } => {
                    if contact.iter().flatten().any(|c| c.contains(' ')) {
                        return Err(Expect::Refused);
                    }
                    self.active(*account)
                }
                AcmeCommand::ChangeKey {
                    account,
                    old_thumbprint,
                    new_key,
                } => {
                    if new_key.thumbprint.len() != 43 {
                        return Err(Expect::Refused);
                    }
                    if let Some(&holder) = self.keys.get(&seed_of(new_key)) {
                        return Err(Expect::RefusedWith(AcmeError::KeyInUse(holder)));
                    }
                    self.active(*account)?;
                    if key(self.accounts[account].key).thumbprint != *old_thumbprint {
                        return Err(Expect::Refused);
                    }
                    Ok(())
                }
                AcmeCommand::NewOrder {
                    account,
                    identifiers,
                    tokens,
                } => {
                    // The rate limits (300 orders an account in three hours, 1000 stored) are
                    // beyond a run's reach.
                    let tidy = !identifiers.is_empty()
                        && identifiers.windows(2).all(|pair| pair[0] < pair[1])
                        && tokens.iter().collect::<BTreeSet<_>>().len() == tokens.len();
                    if !tidy {
                        return Err(Expect::Refused);
                    }
                    self.active(*account)
                }
                AcmeCommand::RespondChallenge {
                    account,
                    order,
                    authorization,
                } => {
                    let order = self.owned(*account, *order)?;
                    let authz = Self::authz(order, *authorization)?;
                    if authz.deactivated
                        || now_ms >= order.expires_ms()
                        || authz.challenge == Challenge::Invalid
                    {
                        return Err(Expect::Refused);
                    }
                    Ok(())
                }
                AcmeCommand::RecordValidation {
                    order,
                    authorization,
                    token,
                    ..
                } => {
                    let order = self
                        .orders
                        .get(order)
                        .ok_or(Expect::RefusedWith(AcmeError::NoOrder(*order)))?;
                    let authz = Self::authz(order, *authorization)?;
                    if authz.token != *token || authz.challenge != Challenge::Processing {
                        return Err(Expect::Refused);
                    }
                    Ok(())
                }
                AcmeCommand::DeactivateAuthorization {
                    account,
                    order,
                    authorization,
                } => {
                    let order = self.owned(*account, *order)?;
                    let authz = Self::authz(order, *authorization)?;
                    if order.session.is_some() {
                        // A finalized order keeps what it was issued on.
                        return Err(Expect::Refused);
                    }
                    match order.authorization_status(authz, now_ms) {
                        AuthorizationStatus::Pending | AuthorizationStatus::Valid => Ok(()),
                        _ => Err(Expect::Refused),
                    }
                }
                AcmeCommand::Finalize {
                    account,
                    order: id,
                    csr,
                } => {
                    if csr.is_empty() {
                        return Err(Expect::Refused);
                    }
                    let order = self.owned(*account, *id)?;
                    match order.status(now_ms) {
                        OrderStatus::Ready => Ok(()),
                        status => Err(Expect::RefusedWith(AcmeError::NotReady {
                            order: *id,
                            status,
                        })),
                    }
                }
                AcmeCommand::Revoke { serial, reason } => {
                    if !VALID_SERIALS.contains(&serial.as_str()) || *reason > 10 || *reason == 7 {
                        return Err(Expect::Refused);
                    }
                    if self.revoked.contains(serial.as_str()) {
                        return Err(Expect::RefusedWith(AcmeError::AlreadyRevoked(
                            serial.clone(),
                        )));
                    }
                    Ok(())
                }
            }
        })();
        match decided {
            Ok(()) => Expect::Accepted,
            Err(expect) => expect,
        }
    }

    fn new_id(&mut self, id: u64) -> Result<(), TestCaseError> {
        prop_assert!(
            id > self.last_id,
            "id {} handed out after {}",
            id,
            self.last_id
        );
        self.last_id = id;
        Ok(())
    }

    /// Checks an ACME answer against the expectation and follows it.
    fn observe_acme(
        &mut self,
        command: AcmeCommand,
        result: Result<AcmeReply, AcmeError>,
        expect: Expect,
        now_ms: u64,
    ) -> Result<(), TestCaseError> {
        match (&expect, &result) {
            (Expect::Accepted, Ok(_)) | (Expect::Refused, Err(_)) => {}
            (Expect::RefusedWith(expected), Err(got)) => prop_assert_eq!(expected, got),
            _ => prop_assert!(
                false,
                "{:?}: expected {:?}, got {:?}",
                command,
                expect,
                result
            ),
        }
        let Ok(reply) = result else { return Ok(()) };
        match (command, reply) {
            (
                AcmeCommand::NewAccount { key, contact, .. },
                AcmeReply::Account { account, existing },
            ) => {
                let seed = seed_of(&key);
                match self.keys.get(&seed) {
                    Some(&id) => {
                        prop_assert!(existing);
                        prop_assert_eq!(account.id, id);
                    }
                    None => {
                        prop_assert!(!existing);
                        self.new_id(account.id.0)?;
                        self.keys.insert(seed, account.id);
                        self.accounts.insert(
                            account.id,
                            ModelAccount {
                                key: seed,
                                contact,
                                valid: true,
                            },
                        );
                    }
                }
            }
            (
                AcmeCommand::UpdateAccount {
                    account,
                    contact,
                    deactivate,
                },
                AcmeReply::Account { .. },
            ) => {
                let stored = self.accounts.get_mut(&account).unwrap();
                if let Some(contact) = contact {
                    stored.contact = contact;
                }
                stored.valid &= !deactivate;
            }
            (
                AcmeCommand::ChangeKey {
                    account, new_key, ..
                },
                AcmeReply::Account { .. },
            ) => {
                let stored = self.accounts.get_mut(&account).unwrap();
                self.keys.remove(&stored.key);
                stored.key = seed_of(&new_key);
                self.keys.insert(stored.key, account);
            }
            (
                AcmeCommand::NewOrder {
                    account,
                    identifiers,
                    tokens,
                },
                AcmeReply::Order(order),
            ) => {
                self.new_id(order.id.0)?;
                prop_assert_eq!(order.status(now_ms), OrderStatus::Pending);
                self.ever_ordered.push(order.id);
                self.orders.insert(
                    order.id,
                    ModelOrder {
                        account,
                        created_ms: now_ms,
                        authorizations: identifiers
                            .into_iter()
                            .zip(tokens)
                            .map(|(name, token)| ModelAuthz {
                                name,
                                token,
                                challenge: Challenge::Pending,
                                deactivated: false,
                            })
                            .collect(),
                        csr: None,
                        session: None,
                        certificate: None,
                        failure: None,
                    },
                );
            }
            (
                AcmeCommand::RespondChallenge {
                    order,
                    authorization,
                    ..
                },
                AcmeReply::Order(_),
            ) => {
                let authz = &mut self.orders.get_mut(&order).unwrap().authorizations
                    [authorization as usize];
                if authz.challenge == Challenge::Pending {
                    authz.challenge = Challenge::Processing;
                }
            }
            (
                AcmeCommand::RecordValidation {
                    order,
                    authorization,
                    error,
                    ..
                },
                AcmeReply::Order(_),
            ) => {
                self.orders.get_mut(&order).unwrap().authorizations[authorization as usize]
                    .challenge = if error.is_none() {
                    Challenge::Valid
                } else {
                    Challenge::Invalid
                };
            }
            (
                AcmeCommand::DeactivateAuthorization {
                    order,
                    authorization,
                    ..
                },
                AcmeReply::Order(_),
            ) => {
                self.orders.get_mut(&order).unwrap().authorizations[authorization as usize]
                    .deactivated = true;
            }
            (AcmeCommand::Finalize { order: id, csr, .. }, AcmeReply::Order(order)) => {
                let session = order.session.expect("a finalized order has a session");
                prop_assert!(
                    !self.sessions.contains_key(&session),
                    "session {} issues two orders",
                    session
                );
                self.sessions.insert(session, id);
                let stored = self.orders.get_mut(&id).unwrap();
                prop_assert!(stored.session.is_none(), "order {} finalized twice", id);
                stored.session = Some(session);
                stored.csr = Some(csr);
            }
            (AcmeCommand::Revoke { serial, .. }, AcmeReply::Revoked) => {
                let serial = VALID_SERIALS.iter().find(|s| **s == serial).unwrap();
                prop_assert!(self.revoked.insert(serial));
            }
            (command, reply) => prop_assert!(false, "{:?} answered {:?}", command, reply),
        }
        Ok(())
    }

    /// The issuing order of a session that just ended, if it still waited for it.
    fn end_issuing(&mut self, session: SessionId, ending: Result<Vec<u8>, &'static str>) {
        let Some(order) = self
            .sessions
            .get(&session)
            .and_then(|id| self.orders.get_mut(id))
            .filter(|order| order.issuing())
        else {
            return;
        };
        match ending {
            Ok(cert) => order.certificate = Some(cert),
            Err(failure) => order.failure = Some(failure),
        }
    }

    fn observe_session(
        &mut self,
        command: SessionCommand,
        result: Result<SessionReply, certus_core::SessionError>,
    ) {
        if let SessionCommand::Configure(_) = command {
            assert_eq!(result, Ok(SessionReply::Configured));
        }
        let Ok(reply) = result else { return };
        match (command, reply) {
            (SessionCommand::Claim { .. }, SessionReply::Claimed(sessions)) => {
                for session in sessions {
                    self.held.push((session.id, session.claim().unwrap().token));
                }
            }
            (
                SessionCommand::Complete {
                    session,
                    outcome: StepOutcome::Issued { cert },
                    ..
                },
                SessionReply::Completed { .. },
            ) => self.end_issuing(session, Ok(cert)),
            (SessionCommand::Fail { session, .. }, SessionReply::Failed { .. }) => {
                self.end_issuing(session, Err(FAIL_REASON));
            }
            (SessionCommand::Kill { session, .. }, SessionReply::Killed { already: false }) => {
                self.end_issuing(session, Err(KILL_REASON));
            }
            _ => {}
        }
    }

    /// A tick: issuing sessions that timed out (or vanished) fail their orders, then orders past
    /// their retention that wait for no session are deleted.
    fn observe_tick(&mut self, report: &certus_core::SessionTickReport, now_ms: u64) {
        for session in report.timed_out.iter().chain(&report.deleted) {
            self.end_issuing(*session, Err(""));
        }
        self.orders.retain(|_, order| {
            order.created_ms + ACME_ORDER_RETENTION_MS >= now_ms || order.issuing()
        });
    }

    /// The machine time of a [`Action::TickAt`]: an edge of a stored order's life.
    fn edge_ms(&self, pick: &Index, retention: bool, offset_ms: i64) -> Option<u64> {
        if self.orders.is_empty() {
            return None;
        }
        let order = self
            .orders
            .values()
            .nth(pick.index(self.orders.len()))
            .unwrap();
        let edge_ms = if retention {
            order.created_ms + ACME_ORDER_RETENTION_MS
        } else {
            order.expires_ms()
        };
        Some(edge_ms.saturating_add_signed(offset_ms))
    }

    /// The state agrees with the model.
    fn check(&self, state: &State) -> Result<(), TestCaseError> {
        let acme = state.acme();
        let now_ms = state.clock_ms();
        // Which account each key names.
        for (seed, name) in KEY_SEEDS.iter().enumerate() {
            prop_assert_eq!(
                acme.account_by_thumbprint(&key(seed).thumbprint)
                    .map(|a| a.id),
                self.keys.get(&seed).copied(),
                "key {}",
                name
            );
        }
        prop_assert_eq!(acme.account_count(), self.accounts.len());
        for (id, model) in &self.accounts {
            let account = acme.account(*id).expect("accounts are never deleted");
            prop_assert_eq!(&account.key, &key(model.key));
            prop_assert_eq!(&account.contact, &model.contact);
            prop_assert_eq!(account.status == AccountStatus::Valid, model.valid);
        }

        prop_assert_eq!(acme.order_count(), self.orders.len());
        let mut validating = Vec::new();
        let mut certificates = BTreeSet::new();
        for id in &self.ever_ordered {
            let Some(model) = self.orders.get(id) else {
                prop_assert!(
                    acme.order(*id).is_none(),
                    "order {} outlived its retention",
                    id
                );
                continue;
            };
            let order = acme.order(*id).expect("the model's order is stored");
            prop_assert_eq!(order.account, model.account);
            prop_assert_eq!(order.created_ms, model.created_ms);
            prop_assert_eq!(order.expires_ms, model.expires_ms());
            let status = order.status(now_ms);
            prop_assert_eq!(status, model.status(now_ms), "order {}", id);
            prop_assert_eq!(order.authorizations.len(), model.authorizations.len());
            for (position, (authz, expected)) in order
                .authorizations
                .iter()
                .zip(&model.authorizations)
                .enumerate()
            {
                prop_assert_eq!(&authz.identifier, &expected.name);
                prop_assert_eq!(&authz.token, &expected.token);
                let challenge = match authz.challenge {
                    ChallengeStatus::Pending => Challenge::Pending,
                    ChallengeStatus::Processing => Challenge::Processing,
                    ChallengeStatus::Valid => Challenge::Valid,
                    ChallengeStatus::Invalid => Challenge::Invalid,
                };
                prop_assert_eq!(
                    challenge,
                    expected.challenge,
                    "order {} authorization {}",
                    id,
                    position
                );
                prop_assert_eq!(authz.deactivated, expected.deactivated);
                prop_assert_eq!(
                    authz.status(order.expires_ms, now_ms),
                    model.authorization_status(expected, now_ms)
                );
                if expected.challenge == Challenge::Processing && !expected.deactivated {
                    validating.push((*id, position_of(position)));
                }
            }
            prop_assert_eq!(&order.csr, &model.csr);
            prop_assert_eq!(order.session, model.session);
            // Exactly the certificate its session was issued with, and no other order's.
            prop_assert_eq!(&order.certificate, &model.certificate);
            if let Some(certificate) = &order.certificate {
                prop_assert!(
                    certificates.insert(certificate.clone()),
                    "a certificate issued twice"
                );
            }
            match (&order.error, model.failure) {
                (None, None) => {}
                (Some(error), Some(failure)) => prop_assert!(
                    error.as_str().contains(failure),
                    "order {} failed with {:?}, expected {:?}",
                    id,
                    error,
                    failure
                ),
                (error, failure) => prop_assert!(
                    false,
                    "order {}: error {:?}, expected {:?}",
                    id,
                    error,
                    failure
                ),
            }
            if status == OrderStatus::Valid {
                prop_assert!(
                    order
                        .authorizations
                        .iter()
                        .all(|authz| authz.challenge == ChallengeStatus::Valid),
                    "order {} is valid with an authorization not validated",
                    id
                );
            }
            if status == OrderStatus::Processing {
                let session = state
                    .session(order.session.unwrap())
                    .expect("its session is stored");
                prop_assert!(session.live() && session.stage() == Stage::Issue);
                prop_assert_eq!(Some(&session.csr), order.csr.as_ref());
                prop_assert_eq!(session.names.clone(), order.names());
            }
        }
        prop_assert_eq!(acme.validating(usize::MAX), validating);
        let revoked: Vec<&str> = acme.revocations().map(|r| r.serial.as_str()).collect();
        prop_assert_eq!(revoked, self.revoked.iter().copied().collect::<Vec<_>>());
        Ok(())
    }
}

/// An authorization's position as commands name it (an order has at most 3 here).
fn position_of(index: usize) -> u32 {
    u32::try_from(index).expect("a few authorizations")
}

/// The key seed an (unmalformed) key was made from.
fn seed_of(account_key: &AccountKey) -> usize {
    (0..KEY_SEEDS.len())
        .find(|&seed| key(seed) == *account_key)
        .unwrap_or(usize::MAX)
}

/// The simplest refusal there is: it moves the applied index and the clock, and nothing else.
fn refuse_trivially(state: &mut State, stamp: Stamp) {
    let response = apply(
        state,
        Command::Acme(AcmeCommand::Revoke {
            serial: String::new(),
            reason: 0,
        }),
        stamp,
    );
    assert!(response.is_refusal());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn orders_follow_their_authorizations_and_sessions_as_the_model_says(steps in steps()) {
        let mut state = State::new();
        let mut model = Model::default();
        let mut log: Vec<(Command, Stamp, Response)> = Vec::new();
        let (mut index, mut now_ms) = (0u64, T0);
        for (action, clock_delta_ms, index_advance) in steps {
            index += index_advance;
            now_ms = match &action {
                Action::TickAt { pick, retention, offset_ms } => model
                    .edge_ms(pick, *retention, *offset_ms)
                    .map_or(now_ms, |edge_ms| edge_ms.max(now_ms)),
                _ => now_ms.saturating_add_signed(clock_delta_ms),
            };
            let stamp = Stamp::new(index, now_ms);
            let clock_ms = state.clock_ms().max(now_ms);
            let Some(command) = model.resolve(&action, &state, index) else {
                // Property 4: a replica restarted from a snapshot has the same state.
                let bytes = state.to_snapshot();
                let restored = State::from_snapshot(&bytes).unwrap();
                prop_assert_eq!(&restored, &state);
                prop_assert_eq!(restored.to_snapshot(), bytes);
                state = restored;
                continue;
            };
            let expect = match &command {
                Command::Acme(acme) => Some(model.expect(acme, clock_ms)),
                _ => None,
            };
            let before = state.clone();
            let response = apply(&mut state, command.clone(), stamp);
            log.push((command.clone(), stamp, response.clone()));
            prop_assert_eq!(state.clock_ms(), clock_ms);

            // Property 1.
            if let Err(violation) = state.check_invariants() {
                return Err(TestCaseError::fail(format!("after {command:?}: {violation}")));
            }
            // Property 2.
            if response.is_refusal() {
                let mut expected = before;
                refuse_trivially(&mut expected, stamp);
                prop_assert_eq!(&state, &expected, "the refused {:?} changed the state", command);
            }
            // Property 3.
            match (command, response) {
                (Command::Acme(command), Response::Acme(result)) => {
                    model.observe_acme(command, result, expect.unwrap(), clock_ms)?;
                }
                (Command::Session(command), Response::Session(result)) => {
                    model.observe_session(command, result);
                }
                (Command::Tick, Response::Tick(report)) => {
                    model.observe_tick(&report.sessions, clock_ms);
                }
                (command, response) => prop_assert!(false, "{:?} answered {:?}", command, response),
            }
            model.check(&state)?;
        }

        // Property 5: the same log on a fresh replica: the same answers, the same bytes.
        let mut replica = State::new();
        for (command, stamp, response) in log {
            prop_assert_eq!(apply(&mut replica, command, stamp), response);
        }
        prop_assert_eq!(replica.to_snapshot(), state.to_snapshot());
    }
}

/// RFC 8555 §7.5.2 lets a client deactivate a valid authorization; once its order is finalized
/// (processing or valid) the issuance started on the strength of it, so the command is refused
/// and the order keeps every authorization valid (an invariant).
#[test]
fn an_authorization_of_a_finalized_order_cannot_be_deactivated() {
    let mut state = State::new();
    let mut index = 0;
    let mut run = |state: &mut State, command: AcmeCommand| {
        index += 1;
        let response = apply(state, Command::Acme(command), Stamp::new(index, T0 + index));
        match response {
            Response::Acme(Ok(reply)) => reply,
            other => panic!("refused: {other:?}"),
        }
    };
    let AcmeReply::Account { account, .. } = run(
        &mut state,
        AcmeCommand::NewAccount {
            key: key(0),
            contact: Vec::new(),
            only_existing: false,
        },
    ) else {
        panic!("not an account")
    };
    let token = ChallengeToken::new("tok").unwrap();
    let AcmeReply::Order(order) = run(
        &mut state,
        AcmeCommand::NewOrder {
            account: account.id,
            identifiers: vec![DnsName::new(NAME_POOL[0]).unwrap()],
            tokens: vec![token.clone()],
        },
    ) else {
        panic!("not an order")
    };
    let (account, order) = (account.id, order.id);
    run(
        &mut state,
        AcmeCommand::RespondChallenge {
            account,
            order,
            authorization: 0,
        },
    );
    run(
        &mut state,
        AcmeCommand::RecordValidation {
            order,
            authorization: 0,
            token,
            error: None,
        },
    );
    run(
        &mut state,
        AcmeCommand::Finalize {
            account,
            order,
            csr: vec![1],
        },
    );
    state.check_invariants().unwrap();
    index += 1;
    let before = state.clone();
    let response = apply(
        &mut state,
        Command::Acme(AcmeCommand::DeactivateAuthorization {
            account,
            order,
            authorization: 0,
        }),
        Stamp::new(index, T0 + index),
    );
    assert!(
        matches!(response, Response::Acme(Err(AcmeError::Malformed(_)))),
        "{response:?}"
    );
    state.check_invariants().unwrap();
    assert_eq!(
        state.acme().order(order).unwrap().authorizations,
        before.acme().order(order).unwrap().authorizations
    );
}
