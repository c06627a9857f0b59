//! Properties of issuance sessions over random runs: several clients create sessions, several
//! workers claim, extend, complete (rightly and wrongly, with current and stale tokens), retry
//! completions whose answers they "lost", release and fail them, an operator kills, clients
//! acknowledge, the leader ticks and reconfigures, and replicas restart from snapshots, all while
//! time moves (and the proposer's clock sometimes jumps back). Workers also complete in batches
//! (mixing current, stale and wrong completions, and naming a session twice).
//!
//! Checked after every command: the state's invariants; every session in exactly one place, as
//! the reads report it; stages only ever advance makechallenge → testchallenge → issue → done,
//! or from a queued stage to failed, and a killed session never moves again; a session is never
//! held by two claims at once, and only the latest claim's token is ever accepted; claims hand out
//! the oldest visible sessions; a retried completion returns the identical reply; and a refused
//! (or retried, or otherwise no-op) command leaves exactly the bytes a tick at the same stamp
//! would have; a batch of completions answers and changes exactly what its items would, sent one
//! after another at the same stamp.

use std::collections::BTreeMap;

use certus_core::limits::LIST_PAGE_MAX;
use certus_core::{
    ChallengeToken, Command, CompleteItem, DnsName, KeyAuthorization, NewChallenge, Reason,
    RequestKey, Response, Session, SessionCommand, SessionConfig, SessionError, SessionId,
    SessionReply, Stage, Stamp, State, StepOutcome, TestResult, WorkerId, apply,
};
use proptest::prelude::*;
use proptest::sample::Index;

const T0: u64 = 1_700_000_000_000;
const WORKERS: usize = 3;
const NAME_POOL: [&str; 4] = ["a.example", "b.example", "c.example", "d.example"];

#[derive(Clone, Debug)]
enum CompleteKind {
    /// The outcome the stage asks for; test results satisfied per bit of the mask.
    Right { satisfied_mask: u8 },
    /// An outcome for another stage.
    WrongKind(u8),
    /// The right kind for the wrong names (one missing).
    WrongNames,
    /// The right outcome with an older token.
    StaleToken,
}

#[derive(Clone, Debug)]
enum Action {
    Create {
        key: Option<u8>,
        names_mask: u8,
        unsorted: bool,
        csr: u8,
    },
    Claim {
        worker: usize,
        /// None: the latest stage with a visible session, as a busy worker pool would.
        stage: Option<Stage>,
        visibility_ms: u64,
        max: u32,
    },
    Extend {
        worker: usize,
        pick: Index,
        visibility_ms: u64,
    },
    Complete {
        worker: usize,
        pick: Index,
        kind: CompleteKind,
    },
    /// Several completions in one command.
    CompleteBatch {
        worker: usize,
        items: Vec<(Index, CompleteKind)>,
    },
    /// Send the worker's last accepted completion again (its answer was lost).
    Retry {
        worker: usize,
    },
    Release {
        worker: usize,
        pick: Index,
        delay_ms: u64,
        note: bool,
    },
    Fail {
        worker: usize,
        pick: Index,
    },
    Kill {
        pick: Index,
    },
    Acknowledge {
        pick: Index,
        done_only: bool,
    },
    Tick,
    Configure(SessionConfig),
    RoundTrip,
}

fn config() -> impl Strategy<Value = SessionConfig> {
    (
        1u32..5,
        prop_oneof![Just(0u64), 500u64..5_000],
        prop_oneof![1 => 20_000u64..300_000, 3 => 300_000u64..3_600_000],
        1_000u64..60_000,
        prop_oneof![1 => 0u64..60_000, 3 => 60_000u64..1_200_000],
        prop_oneof![3 => Just(100_000u64), 1 => 2u64..12],
    )
        .prop_map(
            |(max_tests, test_retry_ms, stage_timeout_ms, done_ms, archive_ms, sessions_max)| {
                SessionConfig {
                    stage_timeout_ms,
                    max_tests,
                    test_retry_ms,
                    done_retention_ms: done_ms,
                    archive_retention_ms: archive_ms,
                    sessions_max,
                }
            },
        )
}

fn visibility() -> impl Strategy<Value = u64> {
    prop_oneof![8 => prop::sample::select(vec![1_000u64, 10_000, 30_000, 30_000]), 1 => Just(500u64)]
}

fn action() -> impl Strategy<Value = Action> {
    let worker = 0..WORKERS;
    let stage = prop_oneof![
        6 => Just(None),
        1 => Just(Some(Stage::MakeChallenge)),
        1 => Just(Some(Stage::TestChallenge)),
        1 => Just(Some(Stage::Issue)),
        1 => prop::sample::select(vec![Stage::Done, Stage::Failed]).prop_map(Some),
    ];
    let kind = prop_oneof![
        8 => prop_oneof![2 => Just(0xffu8), 1 => any::<u8>()]
            .prop_map(|satisfied_mask| CompleteKind::Right { satisfied_mask }),
        1 => any::<u8>().prop_map(CompleteKind::WrongKind),
        1 => Just(CompleteKind::WrongNames),
        1 => Just(CompleteKind::StaleToken),
    ];
    prop_oneof![
        4 => (prop::option::weighted(0.5, 0u8..6), 1u8..16, prop::bool::weighted(0.05), 0u8..2)
            .prop_map(|(key, names_mask, unsorted, csr)| Action::Create { key, names_mask, unsorted, csr }),
        5 => (worker.clone(), stage, visibility(), 1u32..4)
            .prop_map(|(worker, stage, visibility_ms, max)| Action::Claim { worker, stage, visibility_ms, max }),
        1 => (worker.clone(), any::<Index>(), visibility())
            .prop_map(|(worker, pick, visibility_ms)| Action::Extend { worker, pick, visibility_ms }),
        10 => (worker.clone(), any::<Index>(), kind.clone())
            .prop_map(|(worker, pick, kind)| Action::Complete { worker, pick, kind }),
        3 => (worker.clone(), prop::collection::vec((any::<Index>(), kind), 1..6))
            .prop_map(|(worker, items)| Action::CompleteBatch { worker, items }),
        2 => worker.clone().prop_map(|worker| Action::Retry { worker }),
        1 => (worker.clone(), any::<Index>(), prop_oneof![Just(0u64), 1u64..10_000], any::<bool>())
            .prop_map(|(worker, pick, delay_ms, note)| Action::Release { worker, pick, delay_ms, note }),
        1 => (worker, any::<Index>()).prop_map(|(worker, pick)| Action::Fail { worker, pick }),
        1 => any::<Index>().prop_map(|pick| Action::Kill { pick }),
        2 => (any::<Index>(), prop::bool::weighted(0.8))
            .prop_map(|(pick, done_only)| Action::Acknowledge { pick, done_only }),
        3 => Just(Action::Tick),
        1 => config().prop_map(Action::Configure),
        1 => Just(Action::RoundTrip),
    ]
}

/// One step: what happens, how far the proposer's clock moves, and how the log index moves.
fn steps() -> impl Strategy<Value = (SessionConfig, Vec<(Action, i64, u64)>)> {
    let clock = prop_oneof![
        16 => 0i64..3_000,
        3 => 3_000i64..40_000,
        1 => 40_000i64..400_000,
        1 => -5_000i64..0,
    ];
    let index = prop_oneof![6 => Just(1u64), 1 => Just(0), 1 => 2u64..4];
    (
        config(),
        prop::collection::vec((action(), clock, index), 1..120),
    )
}

fn dns(s: &str) -> DnsName {
    DnsName::new(s).unwrap()
}

/// A claim as a worker remembers it: the session as it was handed out.
#[derive(Clone, Debug)]
struct Held {
    session: SessionId,
    token: u64,
    stage: Stage,
    names: Vec<DnsName>,
}

/// One claim's life as the workers saw it.
#[derive(Clone, Debug)]
struct ClaimSpan {
    token: u64,
    /// The deadline, moved by extensions; the end time once the claim ended.
    end_ms: u64,
    ended: bool,
}

#[derive(Default)]
struct Model {
    /// Every claim each worker was given, oldest first.
    held: Vec<Vec<Held>>,
    /// Each worker's last accepted completion and its answer.
    last_completion: Vec<Option<(SessionCommand, SessionReply)>>,
    /// Every session id ever created.
    created: Vec<SessionId>,
    /// Each session's stages as observed, in order.
    stages: BTreeMap<SessionId, Vec<Stage>>,
    /// Sessions seen killed, with the stage they were killed in.
    killed: BTreeMap<SessionId, Stage>,
    /// Sessions seen deleted.
    deleted: Vec<SessionId>,
    /// The latest claim of each session.
    claims: BTreeMap<SessionId, ClaimSpan>,
}

fn outcome_for(held: &Held, kind: &CompleteKind) -> StepOutcome {
    let challenges = |names: &[DnsName]| {
        StepOutcome::Challenges(
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let token = format!("t{}-{i}", held.session);
                    NewChallenge {
                        name: name.clone(),
                        token: ChallengeToken::new(token.clone()).unwrap(),
                        key_authorization: KeyAuthorization::new(format!("{token}.key")).unwrap(),
                    }
                })
                .collect(),
        )
    };
    let tested = |names: &[DnsName], mask: u8| {
        StepOutcome::Tested(
            names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let satisfied = mask & (1 << i) != 0;
                    TestResult {
                        name: name.clone(),
                        satisfied,
                        error: (!satisfied).then(|| Reason::new("404 Not Found").unwrap()),
                    }
                })
                .collect(),
        )
    };
    let issued = StepOutcome::Issued {
        cert: format!("-----BEGIN CERTIFICATE----- {}", held.session).into_bytes(),
    };
    match kind {
        CompleteKind::Right { satisfied_mask } | CompleteKind::WrongKind(satisfied_mask) => {
            let stage = match kind {
                CompleteKind::WrongKind(_) => match held.stage {
                    Stage::MakeChallenge => Stage::Issue,
                    Stage::TestChallenge => Stage::MakeChallenge,
                    _ => Stage::TestChallenge,
                },
                _ => held.stage,
            };
            match stage {
                Stage::MakeChallenge => challenges(&held.names),
                Stage::TestChallenge => tested(&held.names, *satisfied_mask),
                _ => issued,
            }
        }
        CompleteKind::WrongNames => {
            let fewer = &held.names[1..];
            match held.stage {
                Stage::MakeChallenge => challenges(fewer),
                Stage::TestChallenge => tested(fewer, 0xff),
                _ => StepOutcome::Issued { cert: Vec::new() },
            }
        }
        CompleteKind::StaleToken => match held.stage {
            Stage::MakeChallenge => challenges(&held.names),
            Stage::TestChallenge => tested(&held.names, 0xff),
            _ => issued,
        },
    }
}

impl Model {
    fn new() -> Model {
        Model {
            held: vec![Vec::new(); WORKERS],
            last_completion: vec![None; WORKERS],
            ..Model::default()
        }
    }

    /// One of the worker's claims: mostly one it still holds, sometimes any it ever had.
    fn pick_held(&self, worker: usize, pick: &Index, state: &State) -> Option<&Held> {
        let held = &self.held[worker];
        let current: Vec<&Held> = held
            .iter()
            .filter(|h| {
                state
                    .session(h.session)
                    .and_then(|s| s.claim())
                    .is_some_and(|claim| claim.token == h.token)
            })
            .collect();
        if !current.is_empty() && pick.index(10) < 8 {
            Some(current[pick.index(current.len())])
        } else if held.is_empty() {
            None
        } else {
            Some(&held[pick.index(held.len())])
        }
    }

    fn resolve(&self, action: &Action, state: &State) -> Option<SessionCommand> {
        let reason = |s: &str| Reason::new(s).unwrap();
        Some(match action {
            Action::Create {
                key,
                names_mask,
                unsorted,
                csr,
            } => {
                let mut names: Vec<DnsName> = NAME_POOL
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| names_mask & (1 << i) != 0)
                    .map(|(_, name)| dns(name))
                    .collect();
                if *unsorted {
                    names.reverse();
                }
                SessionCommand::Create {
                    request_key: key.map(|k| RequestKey::new(format!("client-{k}")).unwrap()),
                    csr: vec![0x30, *csr],
                    names,
                }
            }
            Action::Claim {
                worker,
                stage,
                visibility_ms,
                max,
            } => SessionCommand::Claim {
                stage: stage.unwrap_or_else(|| {
                    let clock_ms = state.clock_ms();
                    Stage::QUEUED
                        .into_iter()
                        .rev()
                        .find(|&stage| {
                            state
                                .sessions_queue_stats(stage, clock_ms)
                                .is_some_and(|stats| stats.oldest_age_ms.is_some())
                        })
                        .unwrap_or(Stage::MakeChallenge)
                }),
                worker: WorkerId::new(format!("w-{worker}")).unwrap(),
                visibility_ms: *visibility_ms,
                max: *max,
            },
            Action::Extend {
                worker,
                pick,
                visibility_ms,
            } => {
                let held = self.pick_held(*worker, pick, state)?;
                SessionCommand::Extend {
                    session: held.session,
                    token: held.token,
                    visibility_ms: *visibility_ms,
                }
            }
            Action::Complete { worker, pick, kind } => {
                let held = self.pick_held(*worker, pick, state)?;
                let token = match kind {
                    CompleteKind::StaleToken => held.token - 1,
                    _ => held.token,
                };
                SessionCommand::Complete {
                    session: held.session,
                    token,
                    outcome: outcome_for(held, kind),
                }
            }
            Action::CompleteBatch { worker, items } => {
                let items = items
                    .iter()
                    .filter_map(|(pick, kind)| {
                        let SessionCommand::Complete {
                            session,
                            token,
                            outcome,
                        } = self.resolve(
                            &Action::Complete {
                                worker: *worker,
                                pick: *pick,
                                kind: kind.clone(),
                            },
                            state,
                        )?
                        else {
                            unreachable!("a complete resolves to a complete")
                        };
                        Some(CompleteItem {
                            session,
                            token,
                            outcome,
                        })
                    })
                    .collect::<Vec<_>>();
                if items.is_empty() {
                    return None;
                }
                SessionCommand::CompleteBatch { items }
            }
            Action::Retry { worker } => self.last_completion[*worker].as_ref()?.0.clone(),
            Action::Release {
                worker,
                pick,
                delay_ms,
                note,
            } => {
                let held = self.pick_held(*worker, pick, state)?;
                SessionCommand::Release {
                    session: held.session,
                    token: held.token,
                    delay_ms: *delay_ms,
                    note: note.then(|| reason("upstream CA: pending")),
                }
            }
            Action::Fail { worker, pick } => {
                let held = self.pick_held(*worker, pick, state)?;
                SessionCommand::Fail {
                    session: held.session,
                    token: held.token,
                    reason: reason("CAA record forbids issuance"),
                }
            }
            Action::Kill { pick } => SessionCommand::Kill {
                session: self.pick_session(pick)?,
                reason: reason("operator: abuse report"),
            },
            Action::Acknowledge { pick, done_only } => {
                let done = state.sessions_in(Stage::Done, None, LIST_PAGE_MAX);
                let session = if *done_only && !done.is_empty() {
                    done[pick.index(done.len())].id
                } else {
                    self.pick_session(pick)?
                };
                SessionCommand::Acknowledge { session }
            }
            Action::Configure(config) => SessionCommand::Configure(*config),
            Action::Tick | Action::RoundTrip => return None,
        })
    }

    fn pick_session(&self, pick: &Index) -> Option<SessionId> {
        if self.created.is_empty() {
            return None;
        }
        // One pick in eleven is an id that never existed.
        let at = pick.index(self.created.len() * 11 / 10 + 1);
        Some(self.created.get(at).copied().unwrap_or(SessionId(u64::MAX)))
    }
}

/// Every session in the state, through the paging reads.
fn all_sessions(state: &State) -> Vec<Session> {
    let mut all = Vec::new();
    for stage in [
        Stage::MakeChallenge,
        Stage::TestChallenge,
        Stage::Issue,
        Stage::Done,
        Stage::Failed,
    ] {
        let mut after = None;
        loop {
            let page = state.sessions_in(stage, after, 2);
            let Some(last) = page.last() else { break };
            after = Some(last.id);
            all.extend(page.into_iter().cloned());
        }
    }
    all
}

/// Every session is in exactly one place, and the counts the node reports as metrics agree.
fn check_places(state: &State, sessions: &[Session]) {
    let clock_ms = state.clock_ms();
    assert_eq!(sessions.len(), state.session_count());
    let mut waiting = BTreeMap::<Stage, usize>::new();
    let mut claimed = BTreeMap::<Stage, usize>::new();
    let mut done = 0;
    let mut archived = 0;
    for session in sessions {
        assert_eq!(state.session(session.id), Some(session));
        let places = [
            session.live()
                && session.stage().is_queued()
                && session.claim().is_none()
                && session.archived_at_ms().is_none(),
            session.live() && session.stage().is_queued() && session.claim().is_some(),
            session.live()
                && session.stage() == Stage::Done
                && !session.acknowledged()
                && session.archived_at_ms().is_none(),
            session.archived_at_ms().is_some(),
        ];
        assert_eq!(
            places.iter().filter(|&&p| p).count(),
            1,
            "session {} is in {places:?}",
            session.id
        );
        if places[0] {
            *waiting.entry(session.stage()).or_default() += 1;
        }
        if places[1] {
            *claimed.entry(session.stage()).or_default() += 1;
        }
        done += usize::from(places[2]);
        archived += usize::from(places[3]);
        if !session.live() || session.stage() == Stage::Failed {
            assert!(
                places[3],
                "session {} is killed or failed but not archived",
                session.id
            );
        }
        if let Some(key) = &session.request_key {
            assert_eq!(
                state.session_by_request_key(key).map(|s| s.id),
                Some(session.id)
            );
        }
    }
    for stage in Stage::QUEUED {
        let stats = state.sessions_queue_stats(stage, clock_ms).unwrap();
        assert_eq!(stats.waiting, waiting.get(&stage).copied().unwrap_or(0));
        assert_eq!(stats.claimed, claimed.get(&stage).copied().unwrap_or(0));
    }
    assert_eq!(
        state
            .sessions_queue_stats(Stage::Done, clock_ms)
            .unwrap()
            .waiting,
        done
    );
    assert_eq!(state.sessions_archived_count(), archived);
}

/// The stage moves a session may make.
fn allowed(from: Stage, to: Stage) -> bool {
    matches!(
        (from, to),
        (Stage::MakeChallenge, Stage::TestChallenge)
            | (Stage::TestChallenge, Stage::Issue)
            | (Stage::Issue, Stage::Done)
    ) || (from.is_queued() && to == Stage::Failed)
}

/// Whether `reply` to `command` may have changed nothing but the clock and index.
fn is_no_op(reply: &Result<SessionReply, SessionError>, retry: bool) -> bool {
    retry
        || match reply {
            Err(_) => true,
            Ok(SessionReply::Created { existing, .. }) => *existing,
            Ok(SessionReply::Killed { already } | SessionReply::Acknowledged { already }) => {
                *already
            }
            Ok(SessionReply::Claimed(sessions)) => sessions.is_empty(),
            Ok(_) => false,
        }
}

fn snapshot_after_tick(state: &State, stamp: Stamp) -> Vec<u8> {
    let mut ticked = state.clone();
    apply(&mut ticked, Command::Tick, stamp);
    ticked.to_snapshot()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sessions_advance_in_order_under_exclusive_claims_and_idempotent_completions(
        (initial, steps) in steps(),
    ) {
        let mut state = State::new();
        let mut model = Model::new();
        let (mut index, mut now_ms) = (1u64, T0);
        apply(&mut state, Command::Session(SessionCommand::Configure(initial)), Stamp::new(index, now_ms));
        for (action, clock_delta_ms, index_advance) in steps {
            index += index_advance;
            now_ms = now_ms.saturating_add_signed(clock_delta_ms);
            let stamp = Stamp::new(index, now_ms);
            let clock_ms = state.clock_ms().max(now_ms);
            if let Action::RoundTrip = action {
                let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
                prop_assert_eq!(&restored, &state);
                state = restored;
                continue;
            }
            let before = state.clone();
            let command = model.resolve(&action, &state);
            let response = match &command {
                Some(command) => apply(&mut state, Command::Session(command.clone()), stamp),
                None => apply(&mut state, Command::Tick, stamp),
            };
            state.check_invariants().unwrap();
            prop_assert_eq!(state.clock_ms(), clock_ms);

            match (command, response) {
                (None, Response::Tick(report)) => {
                    let report = report.sessions;
                    for id in &report.reclaimed {
                        let span = model.claims.get_mut(id).expect("a reclaimed session was claimed");
                        prop_assert!(!span.ended && span.end_ms <= clock_ms, "reclaimed a live claim {:?}", span);
                        span.end_ms = clock_ms;
                        span.ended = true;
                    }
                    for id in &report.timed_out {
                        let session = before.session(*id).unwrap();
                        prop_assert!(session.live() && session.stage().is_queued());
                        prop_assert!(session.stage_entered_ms + before.session_config().stage_timeout_ms <= clock_ms);
                        if let Some(span) = model.claims.get_mut(id)
                            && !span.ended
                        {
                            span.end_ms = clock_ms;
                            span.ended = true;
                        }
                    }
                    for id in &report.archived {
                        let session = before.session(*id).unwrap();
                        prop_assert_eq!(session.stage(), Stage::Done);
                        prop_assert!(session.done_at_ms().unwrap() + before.session_config().done_retention_ms <= clock_ms);
                    }
                    for id in &report.deleted {
                        prop_assert!(state.session(*id).is_none());
                        model.deleted.push(*id);
                    }
                }
                (Some(SessionCommand::CompleteBatch { items }), Response::Session(reply)) => {
                    // The same items one after another, at the same stamp, on the state before.
                    let mut one_by_one = before.clone();
                    let mut replies = Vec::new();
                    for item in items {
                        let single = SessionCommand::Complete {
                            session: item.session,
                            token: item.token,
                            outcome: item.outcome,
                        };
                        let item_before = one_by_one.clone();
                        let Response::Session(item_reply) =
                            apply(&mut one_by_one, Command::Session(single.clone()), stamp)
                        else {
                            unreachable!("a session command gets a session answer")
                        };
                        let retry = item_before
                            .session(item.session)
                            .and_then(|s| s.last_completion.as_ref())
                            .is_some_and(|completion| completion.token == item.token);
                        model.observe(&single, &item_reply, retry, &action, &item_before, clock_ms)?;
                        replies.push(item_reply);
                    }
                    prop_assert_eq!(reply, Ok(SessionReply::CompletedBatch(replies)));
                    prop_assert_eq!(state.to_snapshot(), one_by_one.to_snapshot(), "the batch differs from its items");
                }
                (Some(command), Response::Session(reply)) => {
                    // A completion whose token is the session's last completion is a retry.
                    let retry = match &command {
                        SessionCommand::Complete { session, token, .. }
                        | SessionCommand::Release { session, token, .. }
                        | SessionCommand::Fail { session, token, .. } => before
                            .session(*session)
                            .and_then(|s| s.last_completion.as_ref())
                            .filter(|completion| completion.token == *token)
                            .map(|completion| completion.reply.clone()),
                        _ => None,
                    };
                    if let Some(recorded) = &retry {
                        prop_assert_eq!(reply.as_ref(), Ok(recorded));
                    }
                    if let Action::Retry { worker } = action
                        && let Some((_, answered)) = &model.last_completion[worker]
                        && retry.is_some()
                    {
                        prop_assert_eq!(reply.as_ref(), Ok(answered), "a retry got another answer");
                    }
                    if is_no_op(&reply, retry.is_some()) {
                        let mut reference = before.clone();
                        let Response::Tick(tick) = apply(&mut reference, Command::Tick, stamp) else {
                            unreachable!()
                        };
                        if tick.sessions.is_empty() && tick.expired_leases.is_empty() {
                            prop_assert_eq!(state.to_snapshot(), reference.to_snapshot(), "{:?} changed the state", command);
                        } else {
                            prop_assert_eq!(snapshot_after_tick(&state, stamp), reference.to_snapshot(), "{:?} changed the state", command);
                        }
                    }
                    model.observe(&command, &reply, retry.is_some(), &action, &before, clock_ms)?;
                }
                (command, response) => prop_assert!(false, "{:?} answered {:?}", command, response),
            }

            // Stages only advance, killed sessions never move, deleted ones never come back.
            let sessions = all_sessions(&state);
            check_places(&state, &sessions);
            for session in &sessions {
                prop_assert!(!model.deleted.contains(&session.id));
                let history = model.stages.entry(session.id).or_default();
                match history.last() {
                    None => prop_assert_eq!(session.stage(), Stage::MakeChallenge),
                    Some(&last) if last != session.stage() => {
                        prop_assert!(allowed(last, session.stage()), "{} moved {} → {}", session.id, last, session.stage());
                        prop_assert!(!model.killed.contains_key(&session.id), "killed {} moved", session.id);
                        history.push(session.stage());
                    }
                    Some(_) => {}
                }
                if history.is_empty() {
                    history.push(session.stage());
                }
                if !session.live() {
                    let killed_in = *model.killed.entry(session.id).or_insert(session.stage());
                    prop_assert_eq!(killed_in, session.stage());
                }
                // The claim the state holds is the latest one handed out, and it is not over.
                if let Some(claim) = &session.claim() {
                    let span = &model.claims[&session.id];
                    prop_assert_eq!(span.token, claim.token);
                    prop_assert!(!span.ended);
                    prop_assert_eq!(span.end_ms, claim.deadline_ms);
                }
            }
        }
        let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
        prop_assert_eq!(restored, state);
    }
}

impl Model {
    fn observe(
        &mut self,
        command: &SessionCommand,
        reply: &Result<SessionReply, SessionError>,
        retry: bool,
        action: &Action,
        before: &State,
        clock_ms: u64,
    ) -> Result<(), TestCaseError> {
        let worker = match action {
            Action::Claim { worker, .. }
            | Action::Extend { worker, .. }
            | Action::Complete { worker, .. }
            | Action::CompleteBatch { worker, .. }
            | Action::Retry { worker }
            | Action::Release { worker, .. }
            | Action::Fail { worker, .. } => Some(*worker),
            _ => None,
        };
        let Ok(reply) = reply else { return Ok(()) };
        match (command, reply) {
            (SessionCommand::Create { .. }, SessionReply::Created { session, existing }) => {
                if *existing {
                    prop_assert!(self.created.contains(session));
                } else {
                    prop_assert!(self.created.last().is_none_or(|last| last < session));
                    self.created.push(*session);
                }
            }
            (
                SessionCommand::Claim {
                    stage,
                    visibility_ms,
                    max,
                    ..
                },
                SessionReply::Claimed(claimed),
            ) => {
                // The oldest visible sessions of the stage, in order.
                let mut expected: Vec<(u64, SessionId)> = before
                    .sessions_in(*stage, None, LIST_PAGE_MAX)
                    .into_iter()
                    .filter(|s| s.live() && s.claim().is_none() && s.archived_at_ms().is_none())
                    .filter(|s| s.visible_at_ms <= clock_ms)
                    .map(|s| (s.visible_at_ms, s.id))
                    .collect();
                expected.sort();
                expected.truncate(*max as usize);
                let got: Vec<SessionId> = claimed.iter().map(|s| s.id).collect();
                let expected: Vec<SessionId> = expected.into_iter().map(|(_, id)| id).collect();
                prop_assert_eq!(got, expected);
                for session in claimed {
                    let claim = session.claim().unwrap();
                    prop_assert_eq!(claim.deadline_ms, clock_ms + visibility_ms);
                    prop_assert_eq!(session.stage(), *stage);
                    // Never two claims at once: the previous one ended, or its time ran out.
                    if let Some(previous) = self.claims.get(&session.id) {
                        prop_assert!(
                            previous.ended && previous.end_ms <= clock_ms,
                            "{:?} still holds {}",
                            previous,
                            session.id
                        );
                        prop_assert!(previous.token < claim.token);
                    }
                    self.claims.insert(
                        session.id,
                        ClaimSpan {
                            token: claim.token,
                            end_ms: claim.deadline_ms,
                            ended: false,
                        },
                    );
                    self.held[worker.unwrap()].push(Held {
                        session: session.id,
                        token: claim.token,
                        stage: session.stage(),
                        names: session.names.clone(),
                    });
                }
            }
            (
                SessionCommand::Extend { session, token, .. },
                SessionReply::Extended { deadline_ms, .. },
            ) => {
                let span = self.claims.get_mut(session).unwrap();
                prop_assert_eq!(span.token, *token, "an old claim was extended");
                prop_assert!(!span.ended);
                span.end_ms = *deadline_ms;
            }
            (
                SessionCommand::Complete { session, token, .. }
                | SessionCommand::Release { session, token, .. }
                | SessionCommand::Fail { session, token, .. },
                _,
            ) if !retry => {
                if let (
                    SessionCommand::Release { delay_ms, .. },
                    SessionReply::Released { visible_at_ms, .. },
                ) = (command, reply)
                {
                    prop_assert_eq!(*visible_at_ms, clock_ms + delay_ms);
                }
                let span = self.claims.get_mut(session).unwrap();
                prop_assert_eq!(span.token, *token, "an old claim's step was accepted");
                prop_assert!(!span.ended);
                span.end_ms = clock_ms;
                span.ended = true;
                self.last_completion[worker.unwrap()] = Some((command.clone(), reply.clone()));
            }
            (SessionCommand::Kill { session, .. }, SessionReply::Killed { already: false }) => {
                if let Some(span) = self.claims.get_mut(session)
                    && !span.ended
                {
                    span.end_ms = clock_ms;
                    span.ended = true;
                }
            }
            _ => {}
        }
        Ok(())
    }
}
