//! The encodings of issuance sessions and transactions are persisted: in snapshots, in the Raft
//! log's answers (a client session keeps the answers it has not acknowledged) and on the internal
//! transport. Their in-memory shape may change; their bytes may not.
//!
//! A fixed pseudo-random run of session, pipeline and client commands — claims, completions,
//! retries, releases, extensions, sleeps, switches, cancels, reaps, kills, acknowledgements,
//! archiving and deletion — is replayed, and its bytes are compared with those the format was
//! defined by:
//! - `fixtures/claimed_work.snapshot` is the run's final snapshot as the code before the shared
//!   claimed-work core wrote it: it must load into the state the replay reaches, and that state
//!   must write it back byte for byte;
//! - every answer and every intermediate snapshot of the run feed one digest, recorded from the
//!   same code: the run's answers and snapshots encode exactly as they did.
//!
//! Both were recorded in snapshot format 6; format 7 appends the CT log's dedupe window (the
//! run logs no certificates, so it is the default one) and format 8 the ACME tables (the run
//! has none, so they are empty); [`as_version_6`] takes both off again.

use certus_core::pipelines::{
    JsonDocument, NewTransaction, NodeGroup, Owner, PipelineName, QueueType, Route, SwitchName,
    TransactionId, TxMetadata, TxStatus, WebhookEventId, WebhookOutcome, WebhookUrl,
};
use certus_core::{
    ChallengeToken, ClientCommand, ClientId, ClientRequest, Command, DnsName, KeyAuthorization,
    NewChallenge, PipelineCommand, PipelineConfig, PipelineReply, Reason, RequestKey, Response,
    SessionCommand, SessionConfig, SessionId, SessionReply, Stage, Stamp, State, StepOutcome,
    TestResult, WorkerId, apply,
};

const T0: u64 = 1_700_000_000_000;
const STEPS: usize = 3_000;
const NAMES: [&str; 3] = ["a.example", "b.example", "c.example"];
const GROUPS: [&str; 2] = ["g1", "g2"];

/// The snapshot the code before the claimed-work core wrote at the end of [`run`].
const SNAPSHOT: &[u8] = include_bytes!("fixtures/claimed_work.snapshot");
/// FNV-1a over every answer and every snapshot of [`run`], as that code encoded them.
const DIGEST: u64 = 0xb885_2024_c8fa_98d6;

/// The default dedupe window as format 7 appends it: 100000 and 0, as varints.
const DEFAULT_DEDUPE_SUFFIX: &[u8] = &[0xa0, 0x8d, 0x06, 0x00];

/// Empty ACME tables as format 8 appends them: last id 0, no accounts, orders or revocations.
const NO_ACME_SUFFIX: &[u8] = &[0, 0, 0, 0];

/// The state's snapshot in format 6: the magic's version byte back to 6, the empty ACME tables
/// and the default dedupe window taken off the end.
fn as_version_6(state: &State) -> Vec<u8> {
    let bytes = state.to_snapshot();
    assert!(bytes.starts_with(b"CERTUS\x00\x08"));
    let bytes = bytes
        .strip_suffix(NO_ACME_SUFFIX)
        .expect("no ACME tables in the run");
    let bytes = bytes
        .strip_suffix(DEFAULT_DEDUPE_SUFFIX)
        .expect("the default dedupe window");
    let mut v6 = b"CERTUS\x00\x06".to_vec();
    v6.extend_from_slice(&bytes[8..]);
    v6
}

/// xorshift64*: a fixed sequence, the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).unwrap()).unwrap()
    }
    /// 1 to `n`.
    fn up_to(&mut self, n: u32) -> u32 {
        1 + u32::try_from(self.next() % u64::from(n)).unwrap()
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len())].clone())
    }
    /// One of the last few items, most often.
    fn recent<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        let back = if self.chance(80) {
            self.below(3)
        } else {
            self.below(items.len().max(1))
        };
        items
            .len()
            .checked_sub(back + 1)
            .map(|at| items[at].clone())
    }
}

struct Digest(u64);

impl Digest {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn worker(i: usize) -> WorkerId {
    WorkerId::new(format!("w-{i}")).unwrap()
}
fn reason(s: &str) -> Reason {
    Reason::new(s).unwrap()
}
fn json(s: &str) -> JsonDocument {
    JsonDocument::new(s).unwrap()
}
fn group(i: usize) -> NodeGroup {
    NodeGroup::new(GROUPS[i]).unwrap()
}

/// What the driver remembers of the run, to send commands that mostly hold.
#[derive(Default)]
struct Memory {
    /// `(session, token, stage)` of claims handed out.
    session_claims: Vec<(SessionId, u64, Stage)>,
    /// `(transaction, token)` of dequeues.
    tx_claims: Vec<(TransactionId, u64)>,
    /// The last accepted completion of a session or step of a transaction, to retry.
    last_session_step: Option<SessionCommand>,
    last_tx_step: Option<PipelineCommand>,
    sessions: Vec<SessionId>,
    transactions: Vec<TransactionId>,
    webhooks: Vec<(WebhookEventId, u32)>,
    client: Option<ClientId>,
    sequence: u64,
}

fn session_command(rng: &mut Rng, memory: &Memory) -> SessionCommand {
    let claimed = rng.recent(&memory.session_claims);
    match rng.below(14) {
        0..=2 => SessionCommand::Create {
            request_key: rng
                .chance(30)
                .then(|| RequestKey::new(format!("k{}", rng.below(8))).unwrap()),
            csr: vec![u8::try_from(rng.up_to(3)).unwrap(); 4],
            names: NAMES.iter().map(|n| DnsName::new(*n).unwrap()).collect(),
        },
        3..=5 => SessionCommand::Claim {
            stage: [
                Stage::MakeChallenge,
                Stage::TestChallenge,
                Stage::Issue,
                Stage::Done,
            ][rng.below(4).min(rng.below(4))],
            worker: worker(rng.below(3)),
            visibility_ms: [1_000, 5_000, 60_000][rng.below(3)],
            max: rng.up_to(3),
        },
        6..=8 => match claimed {
            Some((session, token, stage)) => {
                let token = if rng.chance(10) { token - 1 } else { token };
                let outcome = match stage {
                    Stage::MakeChallenge => StepOutcome::Challenges(
                        NAMES
                            .iter()
                            .enumerate()
                            .map(|(i, n)| NewChallenge {
                                name: DnsName::new(*n).unwrap(),
                                token: ChallengeToken::new(format!("t{}{i}", session.0)).unwrap(),
                                key_authorization: KeyAuthorization::new("ka").unwrap(),
                            })
                            .collect(),
                    ),
                    Stage::TestChallenge => StepOutcome::Tested(
                        NAMES
                            .iter()
                            .map(|n| {
                                let satisfied = rng.chance(85);
                                TestResult {
                                    name: DnsName::new(*n).unwrap(),
                                    satisfied,
                                    error: (!satisfied).then(|| reason("404")),
                                }
                            })
                            .collect(),
                    ),
                    _ => StepOutcome::Issued {
                        cert: b"-----CERT-----".to_vec(),
                    },
                };
                SessionCommand::Complete {
                    session,
                    token,
                    outcome,
                }
            }
            None => SessionCommand::Extend {
                session: SessionId(1),
                token: 1,
                visibility_ms: 1_000,
            },
        },
        9 => match claimed {
            Some((session, token, _)) if rng.chance(50) => SessionCommand::Release {
                session,
                token,
                delay_ms: [0, 2_000][rng.below(2)],
                note: rng.chance(50).then(|| reason("busy")),
            },
            Some((session, token, _)) => SessionCommand::Extend {
                session,
                token,
                visibility_ms: 30_000,
            },
            None => SessionCommand::Kill {
                session: SessionId(2),
                reason: reason("no"),
            },
        },
        10 => match claimed {
            Some((session, token, _)) => SessionCommand::Fail {
                session,
                token,
                reason: reason("the CA said no"),
            },
            None => SessionCommand::Configure(SessionConfig::default()),
        },
        11 => match rng.pick(&memory.sessions) {
            Some(session) if rng.chance(50) => SessionCommand::Kill {
                session,
                reason: reason("operator"),
            },
            Some(session) => SessionCommand::Acknowledge { session },
            None => SessionCommand::Configure(SessionConfig::default()),
        },
        12 => match &memory.last_session_step {
            Some(step) => step.clone(),
            None => SessionCommand::Configure(SessionConfig::default()),
        },
        _ => SessionCommand::Configure(SessionConfig {
            stage_timeout_ms: [300_000, 3_600_000][rng.below(2)],
            max_tests: rng.up_to(3),
            test_retry_ms: [0, 1_000][rng.below(2)],
            done_retention_ms: [60_000, 1_200_000][rng.below(2)],
            archive_retention_ms: [300_000, 3_600_000][rng.below(2)],
            sessions_max: 60,
        }),
    }
}

fn pipeline_command(rng: &mut Rng, memory: &Memory) -> PipelineCommand {
    let held = rng.recent(&memory.tx_claims);
    let queue = [QueueType::Admin, QueueType::Out, QueueType::In][rng.below(3)];
    match rng.below(18) {
        0 => PipelineCommand::Define {
            name: PipelineName::new(["p1", "p2"][rng.below(2)]).unwrap(),
            node_group: group(rng.below(2)),
        },
        1..=3 => PipelineCommand::Enqueue(NewTransaction {
            owner: Owner::new("o").unwrap(),
            external_id: rng.chance(30).then(|| {
                certus_core::pipelines::ExternalId::new(format!("x{}", rng.below(6))).unwrap()
            }),
            route: if rng.chance(50) {
                Route::Pipeline(PipelineName::new(["p1", "p2", "p3"][rng.below(3)]).unwrap())
            } else {
                Route::NodeGroup(group(rng.below(2)))
            },
            queue,
            state: json("{\"n\":1}"),
            event: rng.chance(70).then(|| json("[1]")),
            metadata: TxMetadata {
                webhook_url: rng
                    .chance(50)
                    .then(|| WebhookUrl::new("https://hooks.example/a").unwrap()),
                progress_reports: rng.chance(30),
                cancel_webhook_on_longpoll: rng.chance(30),
            },
        }),
        4..=5 => PipelineCommand::Dequeue {
            node_group: group(rng.below(2)),
            worker: worker(rng.below(3)),
            max: rng.up_to(3),
        },
        6..=7 => match held {
            Some((transaction, token)) => PipelineCommand::Complete {
                transaction,
                token: if rng.chance(10) { token - 1 } else { token },
                status: [
                    TxStatus::Success,
                    TxStatus::Failed,
                    TxStatus::Aborted,
                    TxStatus::Running,
                ][rng.below(4)],
                state: rng.chance(50).then(|| json("{\"done\":true}")),
            },
            None => PipelineCommand::AcknowledgeNotices {
                up_to: certus_core::pipelines::NoticeId(1),
            },
        },
        8 => match held {
            Some((transaction, token)) => PipelineCommand::Requeue {
                transaction,
                token,
                route: match rng.below(3) {
                    0 => None,
                    1 => Some(Route::NodeGroup(group(rng.below(2)))),
                    _ => Some(Route::Pipeline(PipelineName::new("p1").unwrap())),
                },
                queue,
                state: rng.chance(50).then(|| json("{\"step\":2}")),
                event: rng.chance(50).then(|| json("\"next\"")),
            },
            None => PipelineCommand::Cancel {
                transaction: TransactionId(3),
            },
        },
        9 => match held {
            Some((transaction, token)) => PipelineCommand::Progress {
                transaction,
                token,
                report: json("{\"pct\":50}"),
            },
            None => PipelineCommand::Cancel {
                transaction: TransactionId(4),
            },
        },
        10 => match held {
            Some((transaction, token)) => PipelineCommand::Sleep {
                transaction,
                token,
                until_ms: T0 + rng.below(400_000) as u64,
                switch: rng
                    .chance(50)
                    .then(|| SwitchName::new(["s1", "s2"][rng.below(2)]).unwrap()),
                queue,
                state: None,
            },
            None => PipelineCommand::Cancel {
                transaction: TransactionId(5),
            },
        },
        11 => PipelineCommand::SetSwitch {
            name: SwitchName::new(["s1", "s2"][rng.below(2)]).unwrap(),
            value: rng.below(3) as u64,
        },
        12 => match rng.pick(&memory.transactions) {
            Some(transaction) if rng.chance(50) => PipelineCommand::Cancel { transaction },
            Some(transaction) => PipelineCommand::MarkReplied { transaction },
            None => PipelineCommand::TakeWebhooks { max: 2 },
        },
        13 => PipelineCommand::TakeWebhooks { max: rng.up_to(3) },
        14 => match rng.pick(&memory.webhooks) {
            Some((event, attempt)) => PipelineCommand::WebhookResult {
                event,
                attempt,
                outcome: if rng.chance(50) {
                    WebhookOutcome::Delivered
                } else {
                    WebhookOutcome::Failed {
                        reason: reason("503"),
                    }
                },
            },
            None => PipelineCommand::TakeWebhooks { max: 1 },
        },
        15 => match &memory.last_tx_step {
            Some(step) => step.clone(),
            None => PipelineCommand::TakeWebhooks { max: 1 },
        },
        16 => PipelineCommand::Delete {
            name: PipelineName::new(["p1", "p2"][rng.below(2)]).unwrap(),
        },
        _ => PipelineCommand::Configure(PipelineConfig {
            running_timeout_ms: [1_000, 20_000][rng.below(2)],
            max_attempts: rng.up_to(3),
            archive_delay_ms: [0, 30_000][rng.below(2)],
            archive_retention_ms: [400_000, 3_600_000][rng.below(2)],
            transactions_max: 80,
            ..PipelineConfig::default()
        }),
    }
}

/// Remembers what an answer hands out (claims, tokens, webhooks) for later commands.
fn remember(memory: &mut Memory, command: &Command, response: &Response) {
    let (command, response) = match (command, response) {
        (Command::Once { command, .. }, response) => (&**command, response),
        other => other,
    };
    match (command, response) {
        (Command::Session(command), Response::Session(Ok(reply))) => match reply {
            SessionReply::Created { session, .. } => memory.sessions.push(*session),
            SessionReply::Claimed(sessions) => {
                for session in sessions {
                    let claim = session.claim().unwrap();
                    memory
                        .session_claims
                        .push((session.id, claim.token, session.stage()));
                }
            }
            SessionReply::Completed { .. }
            | SessionReply::Released { .. }
            | SessionReply::Failed { .. } => {
                memory.last_session_step = Some(command.clone());
            }
            _ => {}
        },
        (Command::Pipeline(command), Response::Pipeline(Ok(reply))) => match reply {
            PipelineReply::Enqueued { transaction, .. } => memory.transactions.push(*transaction),
            PipelineReply::Dequeued(transactions) => {
                for tx in transactions {
                    let claim = tx.claim().unwrap();
                    memory.tx_claims.push((tx.id, claim.token));
                }
            }
            PipelineReply::Completed { .. }
            | PipelineReply::Requeued { .. }
            | PipelineReply::Sleeping { .. } => memory.last_tx_step = Some(command.clone()),
            PipelineReply::WebhooksTaken(hooks) => {
                for hook in hooks {
                    memory.webhooks.push((hook.event, hook.attempts));
                }
            }
            _ => {}
        },
        (
            Command::Client(_),
            Response::Client(Ok(certus_core::ClientReply::Registered { client, .. })),
        ) => memory.client = Some(*client),
        _ => {}
    }
    // Keep the memories short.
    if memory.session_claims.len() > 12 {
        memory.session_claims.remove(0);
    }
    if memory.tx_claims.len() > 12 {
        memory.tx_claims.remove(0);
    }
    if memory.webhooks.len() > 8 {
        memory.webhooks.remove(0);
    }
}

/// Replays the fixed run; returns its final state and the digest of its bytes.
fn run() -> (State, u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut state = State::default();
    let mut memory = Memory::default();
    let mut digest = Digest(0xcbf2_9ce4_8422_2325);
    let mut now_ms = T0;
    let mut index = 0;
    for step in 0..STEPS {
        index += 1;
        now_ms += [0, 10, 200, 1_000, 5_000][rng.below(5)];
        let stamp = Stamp {
            index,
            // The proposer's clock is sometimes behind the machine's.
            now_ms: if rng.chance(3) {
                now_ms - 5_000
            } else {
                now_ms
            },
        };
        let inner = match rng.below(20) {
            0..=7 => Command::Session(session_command(&mut rng, &memory)),
            8..=16 => Command::Pipeline(pipeline_command(&mut rng, &memory)),
            17 if memory.client.is_none() || rng.chance(5) => {
                Command::Client(ClientCommand::Register {
                    client: ClientId(1 + rng.below(3) as u64),
                })
            }
            _ => Command::Tick,
        };
        // Some commands go through a client session, whose record keeps their answers.
        let command = match memory.client {
            Some(client)
                if matches!(inner, Command::Session(_) | Command::Pipeline(_))
                    && rng.chance(30) =>
            {
                memory.sequence += 1;
                Command::Once {
                    request: ClientRequest {
                        client,
                        sequence: memory.sequence,
                        first_outstanding: memory.sequence.saturating_sub(3).max(1),
                    },
                    command: Box::new(inner),
                }
            }
            _ => inner,
        };
        let response = apply(&mut state, command.clone(), stamp);
        state.check_invariants().unwrap();
        digest.feed(&postcard::to_stdvec(&response).unwrap());
        remember(&mut memory, &command, &response);
        if step % 50 == 49 {
            digest.feed(&as_version_6(&state));
        }
    }
    digest.feed(&as_version_6(&state));
    finale(&mut state, &mut digest, index, now_ms);
    digest.feed(&as_version_6(&state));
    (state, digest.0)
}

/// Drives the scripted end of the run.
struct Script<'a> {
    state: &'a mut State,
    digest: &'a mut Digest,
    index: u64,
    now_ms: u64,
}

impl Script<'_> {
    fn run(&mut self, command: Command, advance_ms: u64) -> Response {
        self.index += 1;
        self.now_ms += advance_ms;
        let stamp = Stamp {
            index: self.index,
            now_ms: self.now_ms,
        };
        let response = apply(self.state, command, stamp);
        self.state.check_invariants().unwrap();
        self.digest.feed(&postcard::to_stdvec(&response).unwrap());
        response
    }

    fn session(&mut self, command: SessionCommand) -> SessionReply {
        match self.run(Command::Session(command), 1_000) {
            Response::Session(Ok(reply)) => reply,
            other => panic!("{other:?}"),
        }
    }

    fn pipeline(&mut self, command: PipelineCommand) -> PipelineReply {
        match self.run(Command::Pipeline(command), 1_000) {
            Response::Pipeline(Ok(reply)) => reply,
            other => panic!("{other:?}"),
        }
    }

    fn claim(&mut self, stage: Stage, max: u32) -> Vec<(SessionId, u64)> {
        match self.session(SessionCommand::Claim {
            stage,
            worker: worker(9),
            visibility_ms: 600_000,
            max,
        }) {
            SessionReply::Claimed(sessions) => sessions
                .into_iter()
                .map(|s| (s.id, s.claim().unwrap().token))
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    fn claim_one(&mut self, stage: Stage) -> (SessionId, u64) {
        self.claim(stage, 1).pop().expect("a session to claim")
    }

    fn enqueue(&mut self, queue: QueueType) -> TransactionId {
        match self.pipeline(PipelineCommand::Enqueue(NewTransaction {
            owner: Owner::new("o").unwrap(),
            external_id: None,
            route: Route::Pipeline(PipelineName::new("p9").unwrap()),
            queue,
            state: json("{}"),
            event: Some(json("1")),
            metadata: TxMetadata {
                webhook_url: Some(WebhookUrl::new("https://hooks.example/f").unwrap()),
                progress_reports: true,
                cancel_webhook_on_longpoll: false,
            },
        })) {
            PipelineReply::Enqueued { transaction, .. } => transaction,
            other => panic!("{other:?}"),
        }
    }

    fn dequeue(&mut self, max: u32) -> Vec<(TransactionId, u64)> {
        match self.pipeline(PipelineCommand::Dequeue {
            node_group: NodeGroup::new("g9").unwrap(),
            worker: worker(9),
            max,
        }) {
            PipelineReply::Dequeued(taken) => taken
                .iter()
                .map(|tx| (tx.id, tx.claim().unwrap().token))
                .collect(),
            other => panic!("{other:?}"),
        }
    }
}

fn names() -> Vec<DnsName> {
    NAMES.iter().map(|n| DnsName::new(*n).unwrap()).collect()
}

fn challenges(id: SessionId) -> StepOutcome {
    StepOutcome::Challenges(
        names()
            .into_iter()
            .map(|name| NewChallenge {
                token: ChallengeToken::new(format!("f{}{}", id.0, name.as_str().replace('.', "")))
                    .unwrap(),
                name,
                key_authorization: KeyAuthorization::new("ka").unwrap(),
            })
            .collect(),
    )
}

fn tested(satisfied: bool) -> StepOutcome {
    StepOutcome::Tested(
        names()
            .into_iter()
            .map(|name| TestResult {
                name,
                satisfied,
                error: (!satisfied).then(|| reason("404")),
            })
            .collect(),
    )
}

/// Ends the run with sessions and transactions in every place, for the fixture to hold them all.
fn finale(state: &mut State, digest: &mut Digest, index: u64, now_ms: u64) {
    let mut s = Script {
        state,
        digest,
        index,
        now_ms,
    };
    s.session(SessionCommand::Configure(SessionConfig::default()));
    s.pipeline(PipelineCommand::Configure(PipelineConfig::default()));
    // Sessions: drain every queued stage, then leave one session at each step.
    for stage in [Stage::MakeChallenge, Stage::TestChallenge, Stage::Issue] {
        loop {
            let claimed = s.claim(stage, 32);
            if claimed.is_empty() {
                break;
            }
            for (session, token) in claimed {
                s.session(SessionCommand::Fail {
                    session,
                    token,
                    reason: reason("drained"),
                });
            }
        }
    }
    for _ in 0..10 {
        s.session(SessionCommand::Create {
            request_key: None,
            csr: vec![7; 5],
            names: names(),
        });
    }
    // Makechallenge: eight through, one released for later, one left claimed.
    for _ in 0..8 {
        let (session, token) = s.claim_one(Stage::MakeChallenge);
        s.session(SessionCommand::Complete {
            session,
            token,
            outcome: challenges(session),
        });
    }
    let (session, token) = s.claim_one(Stage::MakeChallenge);
    s.session(SessionCommand::Release {
        session,
        token,
        delay_ms: 60_000,
        note: Some(reason("later")),
    });
    s.claim_one(Stage::MakeChallenge);
    // Testchallenge: one to be tested again, six satisfied, one left claimed.
    let (session, token) = s.claim_one(Stage::TestChallenge);
    s.session(SessionCommand::Complete {
        session,
        token,
        outcome: tested(false),
    });
    for _ in 0..6 {
        let (session, token) = s.claim_one(Stage::TestChallenge);
        s.session(SessionCommand::Complete {
            session,
            token,
            outcome: tested(true),
        });
    }
    // Issue: three done (one acknowledged, one killed, one waiting), one failed, one claimed and
    // extended, one queued.
    let mut done = Vec::new();
    for _ in 0..3 {
        let (session, token) = s.claim_one(Stage::Issue);
        s.session(SessionCommand::Complete {
            session,
            token,
            outcome: StepOutcome::Issued {
                cert: b"-----CERT-----".to_vec(),
            },
        });
        done.push(session);
    }
    s.session(SessionCommand::Acknowledge { session: done[0] });
    s.session(SessionCommand::Kill {
        session: done[1],
        reason: reason("revoked"),
    });
    let (session, token) = s.claim_one(Stage::Issue);
    s.session(SessionCommand::Fail {
        session,
        token,
        reason: reason("the CA said no"),
    });
    let (session, token) = s.claim_one(Stage::Issue);
    s.session(SessionCommand::Extend {
        session,
        token,
        visibility_ms: 900_000,
    });
    // Pipelines: transactions in every place.
    s.pipeline(PipelineCommand::Define {
        name: PipelineName::new("p9").unwrap(),
        node_group: NodeGroup::new("g9").unwrap(),
    });
    for queue in [QueueType::In, QueueType::Out, QueueType::Admin] {
        s.enqueue(queue);
    }
    for _ in 0..5 {
        s.enqueue(QueueType::In);
    }
    let held = s.dequeue(6);
    let until_ms = s.now_ms + 3_600_000;
    for (i, &(transaction, token)) in held.iter().enumerate() {
        let step = match i {
            0 => PipelineCommand::Complete {
                transaction,
                token,
                status: TxStatus::Success,
                state: Some(json("{\"ok\":1}")),
            },
            1 => PipelineCommand::Complete {
                transaction,
                token,
                status: TxStatus::Failed,
                state: None,
            },
            2 => PipelineCommand::Sleep {
                transaction,
                token,
                until_ms,
                switch: Some(SwitchName::new("s9").unwrap()),
                queue: QueueType::Out,
                state: None,
            },
            3 => PipelineCommand::Sleep {
                transaction,
                token,
                until_ms: until_ms - 1_000_000,
                switch: None,
                queue: QueueType::In,
                state: None,
            },
            4 => PipelineCommand::Progress {
                transaction,
                token,
                report: json("{\"pct\":10}"),
            },
            _ => PipelineCommand::Requeue {
                transaction,
                token,
                route: None,
                queue: QueueType::Admin,
                state: None,
                event: Some(json("2")),
            },
        };
        s.pipeline(step);
    }
    s.pipeline(PipelineCommand::Cancel {
        transaction: held[4].0,
    });
    s.pipeline(PipelineCommand::MarkReplied {
        transaction: held[0].0,
    });
    let queued = s.enqueue(QueueType::Out);
    s.pipeline(PipelineCommand::Cancel {
        transaction: queued,
    });
    // Past the archive delay: what finished is archived; the running ones are not reaped.
    s.run(Command::Tick, 90_000);
    s.enqueue(QueueType::Out);
    s.enqueue(QueueType::Admin);
    s.dequeue(1);
    // Finished, not yet archived.
    let (transaction, token) = s.dequeue(1)[0];
    s.pipeline(PipelineCommand::Complete {
        transaction,
        token,
        status: TxStatus::InternalError,
        state: None,
    });
}

#[test]
fn a_fixed_run_encodes_its_answers_and_snapshots_as_before() {
    let (state, digest) = run();
    assert_eq!(
        digest, DIGEST,
        "the run's answers or snapshots encode differently from the persisted format"
    );
    assert_eq!(as_version_6(&state), SNAPSHOT);
}

#[test]
fn a_snapshot_written_before_the_claimed_work_core_loads_into_the_same_state() {
    let (state, _) = run();
    let loaded = State::from_snapshot(SNAPSHOT).unwrap();
    assert_eq!(loaded, state);
    assert_eq!(as_version_6(&loaded), SNAPSHOT);
    loaded.check_invariants().unwrap();
}
