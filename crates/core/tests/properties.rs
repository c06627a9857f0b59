//! Properties of the state machine over random command sequences with random stamps.
//!
//! Stamps move the way a real log moves them: indexes never decrease (and repeat when commands
//! share an entry), while `now_ms` jumps forwards and backwards as leadership moves between nodes
//! with skewed clocks. Case counts follow proptest's defaults; `PROPTEST_CASES=20000 cargo xtask
//! test` (or `cargo test -p certus-core --test properties`) makes a deep run.

use std::collections::BTreeMap;

use certus_core::ct::{CtCommand, EntryKey, SignedTreeHead, Submission};
use certus_core::pipelines::{
    JsonDocument, NewTransaction, NodeGroup, NoticeId, Owner, PipelineName, QueueType, Route,
    SwitchName, TransactionId, TxMetadata, TxStatus, WebhookEventId, WebhookOutcome, WebhookUrl,
};
use certus_core::{
    Acquisition, ChallengeCommand, ChallengeReply, ChallengeToken, Command, DnsName, FencingToken,
    HolderId, KeyAuthorization, LeaseCommand, LeaseName, LeaseReply, NewChallenge, PipelineCommand,
    Reason, RequestKey, Response, SessionCommand, SessionId, Stage, Stamp, State, StepOutcome,
    TestResult, Ttl, WorkerId, apply,
};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000;
const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];
const HOLDERS: [&str; 3] = ["pod-1", "pod-2", "pod-3"];
const TOKENS: [&str; 4] = ["t1", "t2", "t3", "t4"];

/// One step of a run: a command and how the stamp moves before it.
#[derive(Clone, Debug)]
struct Step {
    command: Command,
    /// Added to the log index: 0 means the command shares the previous entry.
    index_advance: u64,
    /// Added to the proposer's clock; negative when leadership moved to a slower clock.
    clock_delta_ms: i64,
}

fn lease_name() -> impl Strategy<Value = LeaseName> {
    prop::sample::select(&NAMES[..]).prop_map(|n| LeaseName::new(n).unwrap())
}

fn holder() -> impl Strategy<Value = HolderId> {
    prop::sample::select(&HOLDERS[..]).prop_map(|h| HolderId::new(h).unwrap())
}

fn ttl() -> impl Strategy<Value = Ttl> {
    prop_oneof![Just(500u64), Just(1_000), 500u64..5_000, Just(10_000)]
        .prop_map(|ms| Ttl::from_ms(ms).unwrap())
}

fn challenge_token() -> impl Strategy<Value = ChallengeToken> {
    prop::sample::select(&TOKENS[..]).prop_map(|t| ChallengeToken::new(t).unwrap())
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        4 => (lease_name(), holder(), ttl())
            .prop_map(|(name, holder, ttl)| Command::Lease(LeaseCommand::Acquire { name, holder, ttl })),
        2 => (lease_name(), holder(), ttl())
            .prop_map(|(name, holder, ttl)| Command::Lease(LeaseCommand::Renew { name, holder, ttl })),
        2 => (lease_name(), holder())
            .prop_map(|(name, holder)| Command::Lease(LeaseCommand::Release { name, holder })),
        1 => Just(Command::Tick),
        2 => (challenge_token(), "[a-z0-9.]{1,12}").prop_map(|(token, value)| {
            Command::Challenge(ChallengeCommand::Put {
                token,
                key_authorization: KeyAuthorization::new(value).unwrap(),
            })
        }),
        1 => challenge_token().prop_map(|token| Command::Challenge(ChallengeCommand::Delete { token })),
        1 => (0u64..4_000).prop_map(|age_ms| Command::Challenge(ChallengeCommand::DeleteOlderThan { age_ms })),
        2 => ct_command(),
        3 => session_command(),
        4 => pipeline_command(),
    ]
}

/// Pipeline commands with small ids, tokens and event ids (all log indexes, which stay small
/// here) so that some dequeues, steps, cancels and webhook results hit; `pipelines_properties.rs`
/// checks the pipelines' own rules against a model, these keep them in the replica and snapshot
/// properties.
fn pipeline_command() -> impl Strategy<Value = Command> {
    let name = prop::sample::select(vec!["p1", "p2"]).prop_map(|n| PipelineName::new(n).unwrap());
    let group = prop::sample::select(vec!["g1", "g2"]).prop_map(|g| NodeGroup::new(g).unwrap());
    let queue = prop::sample::select(QueueType::PRIORITY.to_vec());
    let transaction = (1u64..60).prop_map(TransactionId);
    let token = 1u64..60;
    let status = prop::sample::select(TxStatus::ALL.to_vec());
    let json = |s: &str| JsonDocument::new(s).unwrap();
    let route = prop_oneof![
        name.clone().prop_map(Route::Pipeline),
        group.clone().prop_map(Route::NodeGroup),
    ];
    let switch = prop::sample::select(vec!["s1", "s2"]).prop_map(|s| SwitchName::new(s).unwrap());
    let command = prop_oneof![
        1 => (name.clone(), group.clone())
            .prop_map(|(name, node_group)| PipelineCommand::Define { name, node_group }),
        4 => (route.clone(), queue.clone(), prop::option::of(0u8..3), any::<bool>())
            .prop_map(move |(route, queue, key, webhook)| PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("o").unwrap(),
                external_id: key.map(|k| certus_core::pipelines::ExternalId::new(format!("e{k}")).unwrap()),
                route,
                queue,
                state: json("{}"),
                event: None,
                metadata: TxMetadata {
                    webhook_url: webhook.then(|| WebhookUrl::new("https://h.example/x").unwrap()),
                    progress_reports: webhook,
                    cancel_webhook_on_longpoll: false,
                },
            })),
        3 => (group, 1u32..3).prop_map(|(node_group, max)| PipelineCommand::Dequeue {
            node_group,
            worker: WorkerId::new("w").unwrap(),
            max,
        }),
        3 => (transaction.clone(), token.clone(), status).prop_map(move |(transaction, token, status)| {
            PipelineCommand::Complete { transaction, token, status, state: Some(json("[]")) }
        }),
        1 => (transaction.clone(), token.clone(), prop::option::of(route), queue.clone())
            .prop_map(|(transaction, token, route, queue)| PipelineCommand::Requeue {
                transaction, token, route, queue, state: None, event: None,
            }),
        1 => (transaction.clone(), token.clone()).prop_map(move |(transaction, token)| {
            PipelineCommand::Progress { transaction, token, report: json("1") }
        }),
        1 => (transaction.clone(), token, 0u64..3_000, prop::option::of(switch.clone()), queue)
            .prop_map(|(transaction, token, sleep_ms, switch, queue)| PipelineCommand::Sleep {
                transaction, token, until_ms: T0 + sleep_ms, switch, queue, state: None,
            }),
        1 => (switch, 0u64..3).prop_map(|(name, value)| PipelineCommand::SetSwitch { name, value }),
        1 => transaction.clone().prop_map(|transaction| PipelineCommand::Cancel { transaction }),
        1 => transaction.prop_map(|transaction| PipelineCommand::MarkReplied { transaction }),
        1 => (1u32..3).prop_map(|max| PipelineCommand::TakeWebhooks { max }),
        1 => (1u64..60, 1u32..3, any::<bool>()).prop_map(|(event, attempt, delivered)| {
            PipelineCommand::WebhookResult {
                event: WebhookEventId(event),
                attempt,
                outcome: if delivered {
                    WebhookOutcome::Delivered
                } else {
                    WebhookOutcome::Failed { reason: Reason::new("503").unwrap() }
                },
            }
        }),
        1 => (0u64..4).prop_map(|up_to| PipelineCommand::AcknowledgeNotices { up_to: NoticeId(up_to) }),
    ];
    command.prop_map(Command::Pipeline)
}

/// Session commands with small ids and tokens (ids and tokens are log indexes, which stay small
/// here) so that some claims, completions and kills hit; `sessions_properties.rs` checks the
/// sessions' own rules, these keep them in the replica and snapshot properties.
fn session_command() -> impl Strategy<Value = Command> {
    let names =
        prop::sample::subsequence(vec!["a.example", "b.example"], 1..=2).prop_map(|names| {
            names
                .into_iter()
                .map(|n| DnsName::new(n).unwrap())
                .collect::<Vec<_>>()
        });
    let session = (1u64..40).prop_map(SessionId);
    let token = 1u64..40;
    let stage = prop::sample::select(Stage::QUEUED.to_vec());
    let outcome = (names.clone(), 0u8..4).prop_map(|(names, kind)| match kind {
        0 => StepOutcome::Challenges(
            names
                .iter()
                .map(|name| NewChallenge {
                    name: name.clone(),
                    token: ChallengeToken::new(name.as_str().replace('.', "-")).unwrap(),
                    key_authorization: KeyAuthorization::new("k").unwrap(),
                })
                .collect(),
        ),
        1 | 2 => StepOutcome::Tested(
            names
                .iter()
                .map(|name| TestResult {
                    name: name.clone(),
                    satisfied: kind == 1,
                    error: (kind == 2).then(|| Reason::new("timeout").unwrap()),
                })
                .collect(),
        ),
        _ => StepOutcome::Issued { cert: vec![b'c'] },
    });
    let command = prop_oneof![
        3 => (prop::option::of(0u8..3), names).prop_map(|(key, names)| SessionCommand::Create {
            request_key: key.map(|k| RequestKey::new(format!("k{k}")).unwrap()),
            csr: vec![1],
            names,
        }),
        3 => (stage, 1u32..3).prop_map(|(stage, max)| SessionCommand::Claim {
            stage,
            worker: WorkerId::new("w").unwrap(),
            visibility_ms: 2_000,
            max,
        }),
        3 => (session.clone(), token.clone(), outcome)
            .prop_map(|(session, token, outcome)| SessionCommand::Complete { session, token, outcome }),
        1 => (session.clone(), token.clone()).prop_map(|(session, token)| SessionCommand::Release {
            session,
            token,
            delay_ms: 500,
            note: None,
        }),
        1 => (session.clone(), token).prop_map(|(session, token)| SessionCommand::Fail {
            session,
            token,
            reason: Reason::new("no").unwrap(),
        }),
        1 => session.clone().prop_map(|session| SessionCommand::Kill {
            session,
            reason: Reason::new("operator").unwrap(),
        }),
        1 => session.prop_map(|session| SessionCommand::Acknowledge { session }),
    ];
    command.prop_map(Command::Session)
}

/// CT commands with small numbers so that some sequence, report and publish steps succeed;
/// `ct_properties.rs` checks the log's own rules, these keep it in the replica and snapshot
/// properties.
fn ct_command() -> impl Strategy<Value = Command> {
    let key = (0u8..6).prop_map(|n| EntryKey([n; 32]));
    let sth =
        (0u64..4, 0u64..3, 0u8..2).prop_map(|(tree_size, timestamp_ms, root)| SignedTreeHead {
            tree_size,
            timestamp_ms: T0 + timestamp_ms,
            root_hash: [root; 32],
            signature: vec![root],
        });
    let command = prop_oneof![
        3 => (key.clone(), 0u64..3).prop_map(|(key, age_ms)| {
            let sct_timestamp_ms = T0 - age_ms * 1_000;
            let mut leaf_input = vec![0, 0];
            leaf_input.extend_from_slice(&sct_timestamp_ms.to_be_bytes());
            CtCommand::Add {
                submissions: vec![Submission {
                    key,
                    sct_timestamp_ms,
                    leaf_input,
                    extra_data: vec![],
                    sct: vec![key.0[0]],
                }],
            }
        }),
        2 => (0u64..3, prop::collection::vec(key, 0..3))
            .prop_map(|(first, keys)| CtCommand::Sequence { first, keys }),
        2 => (1u64..4, sth.clone()).prop_map(|(node, sth)| {
            let contiguous_size = sth.tree_size;
            CtCommand::Report { node, sth, contiguous_size }
        }),
        2 => sth.prop_map(|sth| CtCommand::Publish { sth, members: vec![1, 2, 3] }),
        1 => (0u32..3).prop_map(|max_entries| CtCommand::CleanUp { max_entries }),
        1 => any::<bool>().prop_map(|frozen| CtCommand::SetFrozen { frozen }),
    ];
    command.prop_map(Command::Ct)
}

fn step() -> impl Strategy<Value = Step> {
    (
        command(),
        prop_oneof![3 => Just(1u64), 1 => Just(0), 1 => 2u64..5],
        prop_oneof![6 => 0i64..800, 1 => -3_000i64..0, 1 => 800i64..6_000],
    )
        .prop_map(|(command, index_advance, clock_delta_ms)| Step {
            command,
            index_advance,
            clock_delta_ms,
        })
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..200)
}

/// The stamps a run's steps get.
fn stamps(steps: &[Step]) -> Vec<Stamp> {
    let (mut index, mut now_ms) = (1u64, T0);
    steps
        .iter()
        .map(|step| {
            index += step.index_advance;
            now_ms = now_ms.saturating_add_signed(step.clock_delta_ms);
            Stamp::new(index, now_ms)
        })
        .collect()
}

/// One grant as the clients saw it: who, which token, and the machine-time interval it covers.
#[derive(Clone, Debug)]
struct Grant {
    holder: HolderId,
    token: FencingToken,
    start_ms: u64,
    /// Expiry, moved by renewals; the release time once released.
    end_ms: u64,
    released: bool,
}

/// Everything clients were told about leases, and the checks that follow from it.
#[derive(Default)]
struct LeaseHistory {
    grants: BTreeMap<LeaseName, Vec<Grant>>,
    largest_token: FencingToken,
}

impl LeaseHistory {
    fn observe(&mut self, command: &Command, response: &Response, clock_ms: u64) {
        match (command, response) {
            (Command::Lease(_), Response::Lease(Ok(LeaseReply::Acquired { lease, how }))) => {
                let grants = self.grants.entry(lease.name.clone()).or_default();
                if *how == Acquisition::Renewed {
                    let current = grants.last_mut().expect("a renewal follows a grant");
                    assert_eq!(
                        (&current.holder, current.token),
                        (&lease.holder, lease.token)
                    );
                    assert!(
                        !current.released && clock_ms < current.end_ms,
                        "renewed a dead grant"
                    );
                    current.end_ms = lease.expires_at_ms;
                } else {
                    assert!(
                        lease.token > self.largest_token,
                        "token {} not above every earlier token ({})",
                        lease.token,
                        self.largest_token
                    );
                    self.largest_token = lease.token;
                    grants.push(Grant {
                        holder: lease.holder.clone(),
                        token: lease.token,
                        start_ms: lease.granted_at_ms,
                        end_ms: lease.expires_at_ms,
                        released: false,
                    });
                }
                assert_eq!(lease.renewed_at_ms, clock_ms);
            }
            (Command::Lease(_), Response::Lease(Ok(LeaseReply::Renewed { lease }))) => {
                let current = self
                    .grants
                    .get_mut(&lease.name)
                    .and_then(|g| g.last_mut())
                    .unwrap();
                assert_eq!(
                    (&current.holder, current.token),
                    (&lease.holder, lease.token)
                );
                assert!(
                    !current.released && clock_ms < current.end_ms,
                    "renewed a dead grant"
                );
                current.end_ms = lease.expires_at_ms;
            }
            (Command::Lease(_), Response::Lease(Ok(LeaseReply::Released { lease }))) => {
                let current = self
                    .grants
                    .get_mut(&lease.name)
                    .and_then(|g| g.last_mut())
                    .unwrap();
                assert_eq!(
                    (&current.holder, current.token),
                    (&lease.holder, lease.token)
                );
                assert!(
                    !current.released && clock_ms < current.end_ms,
                    "released a dead grant"
                );
                current.end_ms = clock_ms;
                current.released = true;
            }
            (Command::Tick, Response::Tick(reply)) => {
                for lease in &reply.expired_leases {
                    assert!(
                        lease.expires_at_ms <= clock_ms,
                        "reclaimed a live lease {lease:?}"
                    );
                }
            }
            (Command::Lease(_), Response::Lease(Err(_)))
            | (Command::Challenge(_), Response::Challenge(_))
            | (Command::Ct(_), Response::Ct(_))
            | (Command::Session(_), Response::Session(_))
            | (Command::Pipeline(_), Response::Pipeline(_)) => {}
            (command, response) => panic!("{command:?} answered {response:?}"),
        }
    }

    /// A grant is not lost before its time: every grant the clients were told is live is the
    /// one the state reports, and the state reports no holder the clients were not told of.
    fn check_against(&self, state: &State) {
        let clock_ms = state.clock_ms();
        for name in NAMES {
            let name = LeaseName::new(name).unwrap();
            let live = self
                .grants
                .get(&name)
                .and_then(|g| g.last())
                .filter(|grant| !grant.released && clock_ms < grant.end_ms);
            let reported = state.lease(&name, clock_ms);
            match (live, reported) {
                (Some(grant), Some(lease)) => {
                    assert_eq!((&grant.holder, grant.token), (&lease.holder, lease.token));
                    assert_eq!(grant.end_ms, lease.expires_at_ms);
                    assert_eq!(state.check_fence(&name, grant.token, clock_ms), Ok(()));
                }
                (None, None) => {}
                (live, reported) => {
                    panic!("{name}: clients were told {live:?}, state says {reported:?}")
                }
            }
        }
    }

    /// At most one holder per lease at any machine time: grant intervals never overlap.
    fn check_exclusive(&self) {
        for (name, grants) in &self.grants {
            for pair in grants.windows(2) {
                assert!(pair[0].token < pair[1].token);
                assert!(
                    pair[0].end_ms <= pair[1].start_ms,
                    "{name}: {:?} overlaps {:?}",
                    pair[0],
                    pair[1]
                );
            }
        }
    }
}

fn run(state: &mut State, steps: &[Step], stamps: &[Stamp]) -> Vec<Response> {
    steps
        .iter()
        .zip(stamps)
        .map(|(step, stamp)| apply(state, step.command.clone(), *stamp))
        .collect()
}

proptest! {
    #[test]
    fn leases_are_exclusive_fenced_and_kept_for_their_ttl(steps in steps()) {
        let stamps = stamps(&steps);
        let mut state = State::new();
        let mut history = LeaseHistory::default();
        let mut clock_ms = 0;
        for (step, stamp) in steps.iter().zip(&stamps) {
            let last_token = state.last_fencing_token();
            let response = apply(&mut state, step.command.clone(), *stamp);
            clock_ms = clock_ms.max(stamp.now_ms);
            prop_assert_eq!(state.clock_ms(), clock_ms);
            prop_assert_eq!(state.applied_index(), stamp.index);
            prop_assert!(state.last_fencing_token() >= last_token);
            state.check_invariants().unwrap();
            history.observe(&step.command, &response, clock_ms);
            history.check_against(&state);
        }
        history.check_exclusive();
    }

    #[test]
    fn replicas_fed_the_same_log_agree_byte_for_byte(steps in steps()) {
        let stamps = stamps(&steps);
        let (mut a, mut b) = (State::new(), State::new());
        for (step, stamp) in steps.iter().zip(&stamps) {
            let answer_a = apply(&mut a, step.command.clone(), *stamp);
            let answer_b = apply(&mut b, step.command.clone(), *stamp);
            prop_assert_eq!(answer_a, answer_b);
        }
        prop_assert_eq!(a.to_snapshot(), b.to_snapshot());
    }

    #[test]
    fn a_restored_snapshot_answers_the_future_as_the_original_does(
        steps in steps(),
        split in any::<prop::sample::Index>(),
    ) {
        let stamps = stamps(&steps);
        let split = split.index(steps.len() + 1);
        let mut original = State::new();
        run(&mut original, &steps[..split], &stamps[..split]);

        let bytes = original.to_snapshot();
        let mut restored = State::from_snapshot(&bytes).unwrap();
        prop_assert_eq!(&restored, &original);
        prop_assert_eq!(restored.to_snapshot(), bytes);

        let expected = run(&mut original, &steps[split..], &stamps[split..]);
        let answered = run(&mut restored, &steps[split..], &stamps[split..]);
        prop_assert_eq!(answered, expected);
        prop_assert_eq!(restored.to_snapshot(), original.to_snapshot());
    }

    #[test]
    fn challenges_behave_as_a_map_with_ages(steps in steps()) {
        // The model: token → (value, stored at), with the clock kept the obvious way.
        let stamps = stamps(&steps);
        let mut state = State::new();
        let mut model: BTreeMap<String, (String, u64)> = BTreeMap::new();
        let mut clock_ms = 0u64;
        for (step, stamp) in steps.iter().zip(&stamps) {
            clock_ms = clock_ms.max(stamp.now_ms);
            let response = apply(&mut state, step.command.clone(), *stamp);
            let Command::Challenge(command) = &step.command else { continue };
            let expected = match command {
                ChallengeCommand::Put { token, key_authorization } => {
                    let old = model.insert(token.to_string(), (key_authorization.to_string(), clock_ms));
                    ChallengeReply::Stored { replaced: old.is_some() }
                }
                ChallengeCommand::Delete { token } => {
                    ChallengeReply::Deleted { existed: model.remove(token.as_str()).is_some() }
                }
                ChallengeCommand::DeleteOlderThan { age_ms } => {
                    let before = model.len();
                    model.retain(|_, (_, stored_at_ms)| clock_ms - *stored_at_ms <= *age_ms);
                    ChallengeReply::Purged { removed: (before - model.len()) as u64 }
                }
            };
            prop_assert_eq!(response, Response::Challenge(Ok(expected)));
            let stored: BTreeMap<String, (String, u64)> = state
                .challenges(None, usize::MAX)
                .into_iter()
                .map(|c| (c.token.to_string(), (c.key_authorization.to_string(), c.stored_at_ms)))
                .collect();
            prop_assert_eq!(&stored, &model);
        }
    }

    #[test]
    fn snapshot_loading_never_panics_and_admits_only_valid_states(
        steps in steps(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut state = State::new();
        run(&mut state, &steps, &stamps(&steps));
        let mut bytes = state.to_snapshot();
        for (at, value) in flips {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        bytes.truncate(cut.index(bytes.len() + 1).max(bytes.len() / 2));
        if let Ok(loaded) = State::from_snapshot(&bytes) {
            prop_assert!(loaded.check_invariants().is_ok());
            let reloaded = State::from_snapshot(&loaded.to_snapshot());
            prop_assert_eq!(reloaded.as_ref(), Ok(&loaded));
        }
    }

    #[test]
    fn arbitrary_bytes_are_refused_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut with_magic = b"CERTUS\x00\x02".to_vec();
        with_magic.extend_from_slice(&bytes);
        for candidate in [&bytes, &with_magic] {
            if let Ok(loaded) = State::from_snapshot(candidate) {
                prop_assert!(loaded.check_invariants().is_ok());
            }
        }
    }
}
