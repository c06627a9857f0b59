//! The whole replicated state and the one function that changes it.

use crate::acme::{Account, AccountId, Acme, Order, OrderId, Revocation};
use crate::challenges::{Challenge, ChallengeToken, Challenges};
use crate::clients::{Admission, ClientId, ClientRequest, ClientSession, Clients};
use crate::command::{Command, Response, TickReply};
use crate::ct::{CtLog, EntryKey, HeldEntry, LogConfig, NodeReport, ServingSth, select_serving};
use crate::leases::{FencingToken, Lease, LeaseError, LeaseName, Leases};
use crate::pipelines::{PipelineReads, Pipelines};
use crate::sessions::{QueueStats, RequestKey, Session, SessionConfig, SessionId, Sessions, Stage};
use crate::time::Stamp;

/// The replicated state. Only [`apply`] changes it; everything else reads.
///
/// Same commands with the same stamps give the same state on every replica, and the same
/// snapshot bytes ([`State::to_snapshot`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub(crate) applied_index: u64,
    pub(crate) clock_ms: u64,
    pub(crate) last_token: FencingToken,
    pub(crate) leases: Leases,
    pub(crate) challenges: Challenges,
    pub(crate) ct: CtLog,
    pub(crate) sessions: Sessions,
    pub(crate) pipelines: Pipelines,
    pub(crate) clients: Clients,
    pub(crate) acme: Acme,
}

/// Applies one command at one log position. The only way the state changes.
///
/// The machine clock becomes `max(previous clock, stamp.now_ms)`, so it never runs backwards when
/// leadership moves to a node whose clock is behind.
///
/// # Panics
/// If `stamp.index` is below the last applied index: the log is applied in order, so this is a
/// bug in the caller, and limping on would fork the replicas.
pub fn apply(state: &mut State, command: Command, stamp: Stamp) -> Response {
    assert!(
        stamp.index >= state.applied_index,
        "log index went backwards: {} after {}",
        stamp.index,
        state.applied_index
    );
    let clock_before = state.clock_ms;
    let token_before = state.last_token;
    state.applied_index = stamp.index;
    state.clock_ms = state.clock_ms.max(stamp.now_ms);
    let now_ms = state.clock_ms;

    let response = dispatch(state, command, stamp.index, now_ms);

    assert!(
        state.clock_ms >= clock_before,
        "the machine clock never runs backwards"
    );
    assert!(
        state.last_token >= token_before,
        "fencing tokens never decrease"
    );
    response
}

/// Applies one command at machine time `now_ms`, from log entry `index`.
fn dispatch(state: &mut State, command: Command, index: u64, now_ms: u64) -> Response {
    match command {
        Command::Lease(command) => {
            let last_token = &mut state.last_token;
            let issue_token = || {
                // The grant's log index, or the next number if this entry already granted one.
                *last_token = FencingToken(index.max(last_token.0 + 1));
                *last_token
            };
            Response::Lease(state.leases.apply(command, now_ms, issue_token))
        }
        Command::Challenge(command) => Response::Challenge(state.challenges.apply(command, now_ms)),
        Command::Ct(command) => Response::Ct(state.ct.apply(command, now_ms)),
        Command::Session(command) => {
            // Session ids and claim tokens come from the log index.
            let response = Response::Session(state.sessions.apply(command, now_ms, index));
            state.acme.follow_sessions(&mut state.sessions, now_ms);
            response
        }
        Command::Acme(command) => {
            // Account and order ids come from the log index.
            Response::Acme(
                state
                    .acme
                    .apply(command, &mut state.sessions, now_ms, index),
            )
        }
        Command::Pipeline(command) => {
            // Transaction ids, claim tokens and webhook event ids come from the log index.
            Response::Pipeline(state.pipelines.apply(command, now_ms, index))
        }
        Command::Client(command) => Response::Client(state.clients.apply(command, now_ms)),
        Command::Once { request, command } => {
            match state.clients.admit(&request, &command, now_ms) {
                Admission::Refused(error) => Response::Client(Err(error)),
                Admission::Answered(response) => {
                    state.clients.settle(&request, now_ms, None);
                    *response
                }
                Admission::Fresh => {
                    // A refusal is remembered too: a request has one outcome, so a copy arriving
                    // after the client was told "refused" must not succeed.
                    let response = dispatch(state, *command, index, now_ms);
                    state
                        .clients
                        .settle(&request, now_ms, Some(response.clone()));
                    response
                }
            }
        }
        Command::Tick => {
            let (expired_clients, more_clients) = state.clients.expire(now_ms);
            let reply = TickReply {
                expired_leases: state.leases.reclaim_expired(now_ms),
                sessions: state.sessions.tick(now_ms),
                pipelines: state.pipelines.tick(now_ms, index),
                expired_clients,
                more_clients,
            };
            // A tick can end an issuing session (its stage timed out); the order follows.
            state.acme.follow_sessions(&mut state.sessions, now_ms);
            state.acme.tick(now_ms);
            Response::Tick(Box::new(reply))
        }
    }
}

impl State {
    /// An empty state, before any command.
    pub fn new() -> State {
        State::default()
    }

    /// Index of the last applied command (0 before any).
    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// The machine clock: the largest `now_ms` of any applied stamp.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// The most recently issued fencing token (0 before any grant).
    pub fn last_fencing_token(&self) -> FencingToken {
        self.last_token
    }

    /// The live lease named `name` at `max(clock, now_ms)`.
    ///
    /// A reader passes its own clock reading so that a lease whose time ran out since the last
    /// applied command is reported as gone; the machine clock bounds it from below.
    pub fn lease(&self, name: &LeaseName, now_ms: u64) -> Option<&Lease> {
        self.leases.get(name, self.read_time(now_ms))
    }

    /// Up to `limit` live leases (at most [`crate::limits::LIST_PAGE_MAX`]) in name order,
    /// starting after `start_after`.
    pub fn leases(
        &self,
        start_after: Option<&LeaseName>,
        limit: usize,
        now_ms: u64,
    ) -> Vec<&Lease> {
        self.leases.list(start_after, limit, self.read_time(now_ms))
    }

    /// Whether `token` is the live grant of `name` at `max(clock, now_ms)`: what a protected
    /// resource asks before accepting a write.
    pub fn check_fence(
        &self,
        name: &LeaseName,
        token: FencingToken,
        now_ms: u64,
    ) -> Result<(), LeaseError> {
        self.leases.check_fence(name, token, self.read_time(now_ms))
    }

    /// Number of leases stored, including expired ones not yet reclaimed.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// The challenge stored for `token`.
    pub fn challenge(&self, token: &ChallengeToken) -> Option<&Challenge> {
        self.challenges.get(token)
    }

    /// Up to `limit` challenges (at most [`crate::limits::LIST_PAGE_MAX`]) in token order,
    /// starting after `start_after`.
    pub fn challenges(
        &self,
        start_after: Option<&ChallengeToken>,
        limit: usize,
    ) -> Vec<&Challenge> {
        self.challenges.list(start_after, limit)
    }

    /// Number of challenges stored.
    pub fn challenge_count(&self) -> usize {
        self.challenges.len()
    }

    /// Checks every invariant of the state; a corrupt state is reported, never repaired.
    ///
    /// O(n): run after every command in the tests and on every snapshot load.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.leases
            .check(self.clock_ms, self.last_token)
            .map_err(InvariantViolation)?;
        self.challenges
            .check(self.clock_ms)
            .map_err(InvariantViolation)?;
        self.ct.check(self.clock_ms).map_err(InvariantViolation)?;
        self.sessions
            .check(self.clock_ms)
            .map_err(InvariantViolation)?;
        self.pipelines
            .check(self.clock_ms)
            .map_err(InvariantViolation)?;
        self.clients
            .check(self.clock_ms)
            .map_err(InvariantViolation)?;
        self.acme
            .check(&self.sessions, self.clock_ms)
            .map_err(InvariantViolation)?;
        Ok(())
    }

    /// The live client session `client` at `max(clock, now_ms)`.
    pub fn client_session(&self, client: ClientId, now_ms: u64) -> Option<&ClientSession> {
        self.clients.get(client, self.read_time(now_ms))
    }

    /// The client request `command` would apply for the first time if applied now at `stamp`:
    /// `None` for an unnumbered command, a copy of a request already applied, and a refusal by
    /// the session layer. For observers counting how often each request is applied.
    pub fn fresh_request(&self, command: &Command, stamp: Stamp) -> Option<ClientRequest> {
        let Command::Once { request, command } = command else {
            return None;
        };
        let now_ms = self.clock_ms.max(stamp.now_ms);
        matches!(
            self.clients.admit(request, command, now_ms),
            Admission::Fresh
        )
        .then_some(*request)
    }

    /// Number of client sessions stored, including idle ones not yet reclaimed.
    pub fn client_session_count(&self) -> usize {
        self.clients.len()
    }

    /// The CT log's configuration.
    pub fn ct_config(&self) -> &LogConfig {
        &self.ct.config
    }

    /// Whether the CT log is frozen (read-only).
    pub fn ct_frozen(&self) -> bool {
        self.ct.frozen
    }

    /// The next sequence number the CT master will assign.
    pub fn ct_next_sequence(&self) -> u64 {
        self.ct.next_sequence
    }

    /// The first sequence number whose entry is still held; entries below it were cleaned up
    /// and live only in the nodes' local databases.
    pub fn ct_first_held_sequence(&self) -> u64 {
        self.ct.first_held_sequence()
    }

    /// Number of CT entries awaiting a sequence number.
    pub fn ct_unsequenced_count(&self) -> usize {
        self.ct.unsequenced_count()
    }

    /// Number of CT entries held in the replicated state.
    pub fn ct_held_count(&self) -> usize {
        self.ct.held.len()
    }

    /// The held entry for `key`, if any.
    pub fn ct_entry(&self, key: &EntryKey) -> Option<&HeldEntry> {
        self.ct.held.get(key)
    }

    /// The CT log's dedupe window: how much of the cleaned-up entries the state remembers.
    pub fn ct_dedupe(&self) -> crate::ct::DedupeWindow {
        self.ct.dedupe()
    }

    /// A cleaned-up entry the log still remembers (within its dedupe window).
    pub fn ct_cleaned_entry(&self, key: &EntryKey) -> Option<crate::ct::CleanedEntry> {
        self.ct.cleaned.get(key).copied()
    }

    /// Up to `limit` unsequenced entries in sequencing order — (SCT timestamp, key) — whose
    /// timestamps are at least the guard window behind `max(clock, now_ms)`.
    pub fn ct_ready_to_sequence(&self, now_ms: u64, limit: usize) -> Vec<EntryKey> {
        self.ct.ready_to_sequence(self.read_time(now_ms), limit)
    }

    /// Up to `limit` held entries numbered `from` onwards, in order.
    pub fn ct_sequenced_from(&self, from: u64, limit: usize) -> Vec<(u64, &HeldEntry)> {
        self.ct.sequenced_from(from, limit)
    }

    /// Every node's latest report.
    pub fn ct_reports(&self) -> &std::collections::BTreeMap<u64, NodeReport> {
        &self.ct.reports
    }

    /// The mirror's source and recorded source STHs, if the log is a mirror.
    pub fn ct_mirror(&self) -> Option<&crate::ct::MirrorState> {
        self.ct.mirror()
    }

    /// The serving STH, once one was published.
    pub fn ct_serving(&self) -> Option<&ServingSth> {
        self.ct.serving.as_ref()
    }

    /// The STH the master should publish among `members` at `max(clock, now_ms)`, if any.
    pub fn ct_select_serving(
        &self,
        members: &std::collections::BTreeSet<u64>,
        now_ms: u64,
    ) -> Option<&crate::ct::SignedTreeHead> {
        select_serving(
            &self.ct.reports,
            members,
            &self.ct.config,
            self.ct.serving.as_ref().map(|serving| &serving.sth),
            self.read_time(now_ms),
        )
    }

    /// The session `id`, in any stage, until it is deleted after its archive retention.
    pub fn session(&self, id: SessionId) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// The stored session created with request key `key`.
    pub fn session_by_request_key(&self, key: &RequestKey) -> Option<&Session> {
        self.sessions.by_request_key(key)
    }

    /// Up to `limit` sessions (at most [`crate::limits::LIST_PAGE_MAX`]) in `stage`, live or
    /// killed, archived or not, in id order, starting after `after`.
    pub fn sessions_in(
        &self,
        stage: Stage,
        after: Option<SessionId>,
        limit: usize,
    ) -> Vec<&Session> {
        self.sessions.in_stage(stage, after, limit)
    }

    /// The sessions' configuration.
    pub fn session_config(&self) -> &SessionConfig {
        &self.sessions.config
    }

    /// Number of sessions stored, in every stage (what `sessions_max` bounds).
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Number of archived sessions (failed, killed, acknowledged or retained past the done
    /// retention), awaiting deletion.
    pub fn sessions_archived_count(&self) -> usize {
        self.sessions.archived_count()
    }

    /// Depth, claims and oldest waiting age of a queued stage's queue, or of the done set
    /// (certificates waiting for their clients), at `max(clock, now_ms)`; none for failed.
    pub fn sessions_queue_stats(&self, stage: Stage, now_ms: u64) -> Option<QueueStats> {
        self.sessions.queue_stats(stage, self.read_time(now_ms))
    }

    /// When a session of the queued `stage` is claimable: the earliest `visible_at_ms` in its
    /// queue (at or before `max(clock, now)`: claimable now), none when the queue is empty (or
    /// `stage` has none). What a worker waiting for work looks at before it proposes a claim.
    pub fn sessions_next_visible_ms(&self, stage: Stage) -> Option<u64> {
        self.sessions.next_visible_ms(stage)
    }

    /// Reads of the transaction pipelines: definitions, transactions, queues, statistics,
    /// webhooks, notices and notifications.
    pub fn pipelines(&self) -> PipelineReads<'_> {
        PipelineReads::new(&self.pipelines, self.clock_ms)
    }

    /// Reads of the ACME tables: accounts, orders, validations waiting, revocations.
    pub fn acme(&self) -> AcmeReads<'_> {
        AcmeReads {
            acme: &self.acme,
            clock_ms: self.clock_ms,
        }
    }

    fn read_time(&self, now_ms: u64) -> u64 {
        self.clock_ms.max(now_ms)
    }
}

/// A broken invariant, with what was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("state invariant violated: {0}")]
pub struct InvariantViolation(pub String);

/// Read access to the ACME tables (see [`crate::acme`]).
#[derive(Clone, Copy, Debug)]
pub struct AcmeReads<'a> {
    acme: &'a Acme,
    clock_ms: u64,
}

impl<'a> AcmeReads<'a> {
    /// The machine clock: order and authorization statuses are read at `max(it, reader's)`.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// The account `id`.
    pub fn account(&self, id: AccountId) -> Option<&'a Account> {
        self.acme.account(id)
    }

    /// The account whose key has this RFC 7638 thumbprint.
    pub fn account_by_thumbprint(&self, thumbprint: &str) -> Option<&'a Account> {
        self.acme.account_by_thumbprint(thumbprint)
    }

    /// The order `id`.
    pub fn order(&self, id: OrderId) -> Option<&'a Order> {
        self.acme.order(id)
    }

    /// Up to `limit` orders of `account` with ids above `after`, in id order.
    pub fn orders_of(&self, account: AccountId, after: OrderId, limit: usize) -> Vec<&'a Order> {
        self.acme
            .orders_of(account)
            .filter(|order| order.id > after)
            .take(limit)
            .collect()
    }

    /// Up to `limit` orders of every account with ids above `after`, in id order.
    pub fn orders(&self, after: OrderId, limit: usize) -> Vec<&'a Order> {
        self.acme.orders_after(after, limit)
    }

    /// Up to `limit` challenges a validator should fetch: `(order, authorization position)`.
    pub fn validating(&self, limit: usize) -> Vec<(OrderId, u32)> {
        self.acme.validating().take(limit).collect()
    }

    /// The revocation of `serial` (lowercase hex), if it was revoked.
    pub fn revocation(&self, serial: &str) -> Option<&'a Revocation> {
        self.acme.revocation(serial)
    }

    /// Every revocation, in serial order.
    pub fn revocations(&self) -> impl Iterator<Item = &'a Revocation> + 'a {
        self.acme.revocations()
    }

    /// Orders stored.
    pub fn order_count(&self) -> usize {
        self.acme.order_count()
    }

    /// Accounts stored.
    pub fn account_count(&self) -> usize {
        self.acme.account_count()
    }
}
