use super::*;

const T0: u64 = 1_700_000_000_000;
const MINUTE_MS: u64 = 60_000;

fn dns(s: &str) -> DnsName {
    DnsName::new(s).unwrap()
}
fn dns_names(list: &[&str]) -> Vec<DnsName> {
    list.iter().map(|s| dns(s)).collect()
}
fn worker(s: &str) -> WorkerId {
    WorkerId::new(s).unwrap()
}
fn reason(s: &str) -> Reason {
    Reason::new(s).unwrap()
}
fn request_key(s: &str) -> RequestKey {
    RequestKey::new(s).unwrap()
}
fn token(s: &str) -> ChallengeToken {
    ChallengeToken::new(s).unwrap()
}

/// Drives one table with increasing log indexes and a clock the test moves, checking every
/// invariant after each command and that a refused command changed nothing.
#[derive(Clone)]
struct Machine {
    table: Sessions,
    index: u64,
    now_ms: u64,
}

impl Machine {
    fn new() -> Machine {
        Machine {
            table: Sessions::default(),
            index: 0,
            now_ms: T0,
        }
    }

    fn run(&mut self, command: SessionCommand) -> Result<SessionReply, SessionError> {
        self.index += 1;
        let before = self.table.clone();
        let reply = self.table.apply(command, self.now_ms, self.index);
        self.table.check(self.now_ms).unwrap();
        if reply.is_err() {
            assert_eq!(self.table, before, "a refused command changed the table");
        }
        reply
    }

    fn ok(&mut self, command: SessionCommand) -> SessionReply {
        self.run(command).unwrap()
    }

    fn refused(&mut self, command: SessionCommand) -> SessionError {
        self.run(command).unwrap_err()
    }

    fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
    }

    fn tick(&mut self) -> SessionTickReport {
        self.index += 1;
        let report = self.table.tick(self.now_ms);
        self.table.check(self.now_ms).unwrap();
        report
    }

    fn create(&mut self, list: &[&str]) -> SessionId {
        self.create_keyed(None, list)
    }

    fn create_keyed(&mut self, key: Option<&str>, list: &[&str]) -> SessionId {
        match self.ok(SessionCommand::Create {
            request_key: key.map(request_key),
            csr: vec![0x30, 1, 2],
            names: dns_names(list),
        }) {
            SessionReply::Created {
                session,
                existing: false,
            } => session,
            other => panic!("create answered {other:?}"),
        }
    }

    fn claim(&mut self, stage: Stage, max: u32) -> Vec<Session> {
        match self.ok(SessionCommand::Claim {
            stage,
            worker: worker("w-1"),
            visibility_ms: MINUTE_MS,
            max,
        }) {
            SessionReply::Claimed(sessions) => sessions,
            other => panic!("claim answered {other:?}"),
        }
    }

    /// Claims `id` (which must be the oldest visible in its stage) and returns the token.
    fn claim_one(&mut self, id: SessionId) -> u64 {
        let stage = self.session(id).stage();
        let claimed = self.claim(stage, 1);
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].id, id);
        claimed[0].claim().unwrap().token
    }

    fn complete(
        &mut self,
        id: SessionId,
        token: u64,
        outcome: StepOutcome,
    ) -> Result<SessionReply, SessionError> {
        self.run(SessionCommand::Complete {
            session: id,
            token,
            outcome,
        })
    }

    fn session(&self, id: SessionId) -> &Session {
        self.table.get(id).unwrap()
    }

    /// Claims and completes the makechallenge step of `id` with one challenge per name.
    fn make_challenges(&mut self, id: SessionId) -> u64 {
        let token = self.claim_one(id);
        let outcome = challenges_for(&self.session(id).names);
        self.complete(id, token, outcome).unwrap();
        token
    }

    /// Claims `id` in testchallenge and reports every challenge as `satisfied`.
    fn test_all(&mut self, id: SessionId, satisfied: bool) -> SessionReply {
        let token = self.claim_one(id);
        let outcome = results_for(&self.session(id).names, |_| satisfied);
        self.complete(id, token, outcome).unwrap()
    }

    /// Takes a fresh session of `list` all the way to done.
    fn done_session(&mut self, list: &[&str]) -> SessionId {
        let id = self.create(list);
        self.make_challenges(id);
        self.test_all(id, true);
        let token = self.claim_one(id);
        let reply = self.complete(id, token, issued()).unwrap();
        assert_eq!(
            reply,
            SessionReply::Completed {
                session: id,
                stage: Stage::Done,
                live: true
            }
        );
        id
    }
}

fn challenges_for(names: &[DnsName]) -> StepOutcome {
    StepOutcome::Challenges(
        names
            .iter()
            .enumerate()
            .map(|(i, name)| NewChallenge {
                name: name.clone(),
                token: token(&format!("tok{i}")),
                key_authorization: KeyAuthorization::new(format!("tok{i}.thumb")).unwrap(),
            })
            .collect(),
    )
}

fn results_for(names: &[DnsName], satisfied: impl Fn(&DnsName) -> bool) -> StepOutcome {
    StepOutcome::Tested(
        names
            .iter()
            .map(|name| {
                let satisfied = satisfied(name);
                TestResult {
                    name: name.clone(),
                    satisfied,
                    error: (!satisfied).then(|| reason("connection refused")),
                }
            })
            .collect(),
    )
}

fn issued() -> StepOutcome {
    StepOutcome::Issued {
        cert: b"-----BEGIN CERTIFICATE-----".to_vec(),
    }
}

fn ids(sessions: &[Session]) -> Vec<SessionId> {
    sessions.iter().map(|s| s.id).collect()
}

#[test]
fn dns_names_are_lowercase_ldh_labels_with_a_reason_for_each_refusal() {
    for good in [
        "example.com",
        "a.b",
        "xn--bcher-kva.example",
        "a-1.b-2.c3",
        "1.example.com",
    ] {
        assert!(DnsName::new(good).is_ok(), "{good}");
    }
    let long_label = format!("{}.com", "a".repeat(64));
    let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
    assert!(long_name.len() > 253);
    let cases: [(&str, &str); 11] = [
        ("*.example.com", "HTTP-01 cannot validate wildcard"),
        ("Example.com", "lowercase"),
        ("example.com.", "trailing dot"),
        ("localhost", "single label"),
        (".example.com", "empty label"),
        ("a..com", "empty label"),
        (&long_label, "at most 63"),
        ("-a.com", "hyphen"),
        ("a.com-", "hyphen"),
        ("10.0.0.1", "IP address"),
        ("exa mple.com", "lowercase ASCII letters"),
    ];
    for (bad, words) in cases {
        let message = DnsName::new(bad).unwrap_err().to_string();
        assert!(message.contains(words), "{bad}: {message}");
    }
    assert!(matches!(
        DnsName::new(long_name),
        Err(TextError::TooLong {
            kind: TextKind::DnsName,
            ..
        })
    ));
    assert_eq!(
        DnsName::new(""),
        Err(TextError::Empty {
            kind: TextKind::DnsName
        })
    );
    // Decoding runs the same checks.
    let encoded = postcard::to_stdvec("*.example.com").unwrap();
    assert!(postcard::from_bytes::<DnsName>(&encoded).is_err());
    let encoded = postcard::to_stdvec("example.com").unwrap();
    assert_eq!(
        postcard::from_bytes::<DnsName>(&encoded),
        Ok(dns("example.com"))
    );
}

#[test]
fn worker_ids_request_keys_and_reasons_have_their_alphabets() {
    assert!(WorkerId::new("pod-7.zone_a:4242").is_ok());
    assert!(WorkerId::new("pod/7").is_err());
    assert!(WorkerId::new("w".repeat(129)).is_err());
    assert!(RequestKey::new("order#42!").is_ok());
    assert!(RequestKey::new("has space").is_err());
    assert!(RequestKey::new("k".repeat(129)).is_err());
    assert!(Reason::new("upstream CA said: « pending » 🙂").is_ok());
    let message = Reason::new("two\nlines").unwrap_err().to_string();
    assert!(message.contains("no control characters"), "{message}");
    assert!(Reason::new("").is_err());
    assert!(Reason::new("r".repeat(1025)).is_err());
    assert!(Reason::new("r".repeat(1024)).is_ok());
}

#[test]
fn create_starts_a_live_session_in_makechallenge_with_the_log_index_as_id() {
    let mut m = Machine::new();
    m.index = 41;
    let id = m.create(&["a.example", "b.example"]);
    assert_eq!(id, SessionId(42));
    assert_eq!(id.to_string(), "42");
    let session = m.session(id);
    assert_eq!(session.stage(), Stage::MakeChallenge);
    assert!(session.live());
    assert_eq!(
        (
            session.created_ms,
            session.stage_entered_ms,
            session.visible_at_ms
        ),
        (T0, T0, T0)
    );
    assert!(session.challenges.is_empty() && session.claim().is_none());
    assert_eq!(
        m.table.queue_stats(Stage::MakeChallenge, T0 + 5),
        Some(QueueStats {
            waiting: 1,
            claimed: 0,
            oldest_age_ms: Some(5)
        })
    );
}

#[test]
fn create_refuses_unsorted_or_repeated_names_and_bad_sizes() {
    let mut m = Machine::new();
    let create = |names: Vec<DnsName>, csr: Vec<u8>| SessionCommand::Create {
        request_key: None,
        csr,
        names,
    };
    let error = m.refused(create(dns_names(&["b.example", "a.example"]), vec![1]));
    assert!(matches!(error, SessionError::BadNames(_)), "{error}");
    let error = m.refused(create(dns_names(&["a.example", "a.example"]), vec![1]));
    assert!(
        error.to_string().contains("sorted and without repeats"),
        "{error}"
    );
    let error = m.refused(create(Vec::new(), vec![1]));
    assert!(matches!(
        error,
        SessionError::OutOfRange {
            got: 0,
            min: 1,
            max: 100,
            ..
        }
    ));
    let many: Vec<DnsName> = (0..101).map(|i| dns(&format!("n{i:03}.example"))).collect();
    let error = m.refused(create(many, vec![1]));
    assert!(matches!(error, SessionError::OutOfRange { got: 101, .. }));
    let error = m.refused(create(dns_names(&["a.example"]), Vec::new()));
    assert!(
        matches!(error, SessionError::OutOfRange { got: 0, .. }),
        "{error}"
    );
    let error = m.refused(create(
        dns_names(&["a.example"]),
        vec![0; SESSION_CSR_BYTES_MAX + 1],
    ));
    assert_eq!(
        error,
        SessionError::TooLarge {
            field: "csr".to_owned(),
            bytes: SESSION_CSR_BYTES_MAX + 1,
            max: SESSION_CSR_BYTES_MAX
        }
    );
    // The limits themselves are accepted.
    let most: Vec<DnsName> = (0..100).map(|i| dns(&format!("n{i:03}.example"))).collect();
    m.ok(create(most, vec![0; SESSION_CSR_BYTES_MAX]));
}

#[test]
fn a_request_key_returns_its_session_until_deleted_and_refuses_other_requests() {
    let mut m = Machine::new();
    let id = m.create_keyed(Some("order-1"), &["a.example"]);
    let retry = SessionCommand::Create {
        request_key: Some(request_key("order-1")),
        csr: vec![0x30, 1, 2],
        names: dns_names(&["a.example"]),
    };
    let before = m.table.clone();
    assert_eq!(
        m.ok(retry.clone()),
        SessionReply::Created {
            session: id,
            existing: true
        }
    );
    assert_eq!(m.table, before);
    let error = m.refused(SessionCommand::Create {
        request_key: Some(request_key("order-1")),
        csr: vec![0x30, 9],
        names: dns_names(&["a.example"]),
    });
    assert_eq!(
        error,
        SessionError::RequestKeyReused {
            key: request_key("order-1"),
            session: id
        }
    );
    let error = m.refused(SessionCommand::Create {
        request_key: Some(request_key("order-1")),
        csr: vec![0x30, 1, 2],
        names: dns_names(&["b.example"]),
    });
    assert!(matches!(error, SessionError::RequestKeyReused { .. }));
    assert_eq!(
        m.table
            .by_request_key(&request_key("order-1"))
            .map(|s| s.id),
        Some(id)
    );
    // A killed (archived) session still answers its key; once deleted, the key is free.
    m.ok(SessionCommand::Kill {
        session: id,
        reason: reason("test"),
    });
    assert!(matches!(
        m.ok(retry.clone()),
        SessionReply::Created { existing: true, .. }
    ));
    m.advance(SessionConfig::default().archive_retention_ms);
    assert_eq!(m.tick().deleted, vec![id]);
    assert!(m.table.by_request_key(&request_key("order-1")).is_none());
    assert!(matches!(
        m.ok(retry),
        SessionReply::Created {
            existing: false,
            ..
        }
    ));
}

#[test]
fn sessions_max_counts_every_stored_session() {
    let mut m = Machine::new();
    m.ok(SessionCommand::Configure(SessionConfig {
        sessions_max: 2,
        ..SessionConfig::default()
    }));
    let keyed = m.create_keyed(Some("k"), &["a.example"]);
    let other = m.create(&["b.example"]);
    m.ok(SessionCommand::Kill {
        session: other,
        reason: reason("archived ones count too"),
    });
    let error = m.refused(SessionCommand::Create {
        request_key: None,
        csr: vec![1],
        names: dns_names(&["c.example"]),
    });
    assert_eq!(error, SessionError::TooMany { max: 2 });
    assert!(error.to_string().contains("acknowledge done sessions"));
    // A client's retry still finds its session when the table is full.
    assert_eq!(
        m.ok(SessionCommand::Create {
            request_key: Some(request_key("k")),
            csr: vec![0x30, 1, 2],
            names: dns_names(&["a.example"]),
        }),
        SessionReply::Created {
            session: keyed,
            existing: true
        }
    );
}

#[test]
fn commands_sharing_a_log_entry_get_distinct_increasing_ids_and_tokens() {
    let mut table = Sessions::default();
    let create = |name: &str| SessionCommand::Create {
        request_key: None,
        csr: vec![1],
        names: dns_names(&[name]),
    };
    let mut created = Vec::new();
    for (index, name) in [(5, "a.example"), (5, "b.example"), (6, "c.example")] {
        match table.apply(create(name), T0, index) {
            Ok(SessionReply::Created { session, .. }) => created.push(session.0),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(created, [5, 6, 7]);
    let claim = SessionCommand::Claim {
        stage: Stage::MakeChallenge,
        worker: worker("w"),
        visibility_ms: MINUTE_MS,
        max: 1,
    };
    let mut tokens = Vec::new();
    for index in [9, 9, 9] {
        match table.apply(claim.clone(), T0, index) {
            Ok(SessionReply::Claimed(sessions)) => {
                tokens.push(sessions[0].claim().unwrap().token);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(tokens, [9, 10, 11]);
    // A claim that finds nothing issues no token.
    assert_eq!(
        table.apply(claim.clone(), T0, 12),
        Ok(SessionReply::Claimed(Vec::new()))
    );
    assert_eq!(table.last_claim_token, 11);
    table.check(T0).unwrap();
}

#[test]
fn claim_takes_visible_sessions_oldest_visible_first() {
    let mut m = Machine::new();
    let first = m.create(&["a.example"]);
    m.advance(10);
    let second = m.create(&["b.example"]);
    let third = m.create(&["c.example"]);
    // The first goes back with a delay; it becomes visible after the others.
    let token = m.claim_one(first);
    m.ok(SessionCommand::Release {
        session: first,
        token,
        delay_ms: 1_000,
        note: None,
    });
    let claimed = m.claim(Stage::MakeChallenge, 1);
    assert_eq!(ids(&claimed), [second]);
    let claim = claimed[0].claim().unwrap();
    assert_eq!(claim.claimant, worker("w-1"));
    assert_eq!(claim.deadline_ms, m.now_ms + MINUTE_MS);
    assert_eq!(m.session(second), &claimed[0]);
    // Not yet visible: only the third is handed out.
    assert_eq!(ids(&m.claim(Stage::MakeChallenge, 100)), [third]);
    assert_eq!(m.claim(Stage::MakeChallenge, 100), Vec::new());
    assert_eq!(
        m.table.queue_stats(Stage::MakeChallenge, m.now_ms),
        Some(QueueStats {
            waiting: 1,
            claimed: 2,
            oldest_age_ms: None
        })
    );
    m.advance(1_000);
    assert_eq!(ids(&m.claim(Stage::MakeChallenge, 100)), [first]);
    // Other stages' queues are separate.
    assert_eq!(m.claim(Stage::TestChallenge, 100), Vec::new());
}

#[test]
fn claim_refuses_stages_without_a_queue_and_out_of_range_arguments() {
    let mut m = Machine::new();
    m.create(&["a.example"]);
    for stage in [Stage::Done, Stage::Failed] {
        let error = m.refused(SessionCommand::Claim {
            stage,
            worker: worker("w"),
            visibility_ms: MINUTE_MS,
            max: 1,
        });
        assert_eq!(error, SessionError::NotQueued { stage });
    }
    for (visibility_ms, max) in [(999, 1), (3_600_001, 1), (MINUTE_MS, 0), (MINUTE_MS, 101)] {
        let error = m.refused(SessionCommand::Claim {
            stage: Stage::MakeChallenge,
            worker: worker("w"),
            visibility_ms,
            max,
        });
        assert!(matches!(error, SessionError::OutOfRange { .. }), "{error}");
    }
}

#[test]
fn extend_moves_only_the_current_claims_deadline() {
    let mut m = Machine::new();
    let id = m.create(&["a.example"]);
    let token = m.claim_one(id);
    m.advance(30_000);
    assert_eq!(
        m.ok(SessionCommand::Extend {
            session: id,
            token,
            visibility_ms: 5_000
        }),
        SessionReply::Extended {
            session: id,
            deadline_ms: m.now_ms + 5_000
        }
    );
    assert_eq!(m.session(id).claim().unwrap().deadline_ms, m.now_ms + 5_000);
    let extend = |token, visibility_ms| SessionCommand::Extend {
        session: id,
        token,
        visibility_ms,
    };
    assert_eq!(
        m.refused(extend(token + 1, 5_000)),
        SessionError::StaleClaim {
            session: id,
            token: token + 1
        }
    );
    assert!(matches!(
        m.refused(extend(token, 500)),
        SessionError::OutOfRange { .. }
    ));
    assert_eq!(
        m.refused(SessionCommand::Extend {
            session: SessionId(999),
            token,
            visibility_ms: 5_000
        }),
        SessionError::UnknownSession {
            session: SessionId(999)
        }
    );
    // A completed claim cannot be extended.
    let outcome = challenges_for(&m.session(id).names);
    m.complete(id, token, outcome).unwrap();
    assert!(matches!(
        m.refused(extend(token, 5_000)),
        SessionError::StaleClaim { .. }
    ));
    let token = m.claim_one(id);
    m.ok(SessionCommand::Kill {
        session: id,
        reason: reason("operator"),
    });
    assert!(matches!(
        m.refused(extend(token, 5_000)),
        SessionError::NotLive { .. }
    ));
}

#[test]
fn a_session_passes_every_stage_in_order_to_done() {
    let mut m = Machine::new();
    let id = m.create(&["a.example", "b.example"]);
    m.advance(100);
    let token = m.claim_one(id);
    m.advance(100);
    let reply = m.complete(
        id,
        token,
        challenges_for(&dns_names(&["a.example", "b.example"])),
    );
    assert_eq!(
        reply,
        Ok(SessionReply::Completed {
            session: id,
            stage: Stage::TestChallenge,
            live: true
        })
    );
    let session = m.session(id);
    assert_eq!(session.stage_entered_ms, T0 + 200);
    assert_eq!(session.visible_at_ms, T0 + 200);
    assert!(session.claim().is_none());
    assert_eq!(session.challenges.len(), 2);
    for challenge in &session.challenges {
        assert_eq!(challenge.challtime_ms, T0 + 200);
        assert!(!challenge.satisfied && !challenge.failed && challenge.times_tested == 0);
    }
    assert_eq!(
        session.last_completion,
        Some(Completion {
            token,
            reply: reply.clone().unwrap()
        })
    );
    m.advance(100);
    assert_eq!(
        m.test_all(id, true),
        SessionReply::Completed {
            session: id,
            stage: Stage::Issue,
            live: true
        }
    );
    assert_eq!(m.session(id).stage_entered_ms, T0 + 300);
    assert!(m.session(id).challenges.iter().all(|c| c.times_tested == 1));
    m.advance(100);
    let token = m.claim_one(id);
    m.complete(id, token, issued()).unwrap();
    let session = m.session(id);
    assert_eq!(session.stage(), Stage::Done);
    assert_eq!(session.done_at_ms(), Some(T0 + 400));
    assert_eq!(session.cert(), Some(&b"-----BEGIN CERTIFICATE-----"[..]));
    assert!(session.archived_at_ms().is_none() && !session.acknowledged());
    assert_eq!(
        m.table
            .queue_stats(Stage::Done, T0 + 450)
            .unwrap()
            .oldest_age_ms,
        Some(50)
    );
    assert_eq!(
        ids(&m
            .table
            .in_stage(Stage::Done, None, 10)
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()),
        [id]
    );
}

#[test]
fn a_makechallenge_outcome_needs_exactly_one_challenge_per_name() {
    let mut m = Machine::new();
    let id = m.create(&["a.example", "b.example"]);
    let token = m.claim_one(id);
    let names = dns_names(&["a.example", "b.example"]);
    let StepOutcome::Challenges(good) = challenges_for(&names) else {
        unreachable!()
    };
    let mut wrong: Vec<Vec<NewChallenge>> = vec![
        good[..1].to_vec(),
        vec![good[0].clone(), good[0].clone()],
        [good.clone(), good[..1].to_vec()].concat(),
    ];
    let mut other_name = good.clone();
    other_name[1].name = dns("c.example");
    wrong.push(other_name);
    let mut shared_token = good.clone();
    shared_token[1].token = good[0].token.clone();
    wrong.push(shared_token);
    for challenges in wrong {
        let error = m
            .complete(id, token, StepOutcome::Challenges(challenges))
            .unwrap_err();
        assert!(matches!(error, SessionError::BadOutcome(_)), "{error}");
    }
    for outcome in [results_for(&names, |_| true), issued()] {
        let stage = outcome.stage();
        assert_eq!(
            m.complete(id, token, outcome),
            Err(SessionError::WrongStage {
                session: id,
                expected: stage,
                actual: Stage::MakeChallenge
            })
        );
    }
    // In any order, one per name is right; they are stored sorted by name.
    let mut reversed = good;
    reversed.reverse();
    m.complete(id, token, StepOutcome::Challenges(reversed))
        .unwrap();
    let stored: Vec<&DnsName> = m.session(id).challenges.iter().map(|c| &c.name).collect();
    assert_eq!(stored, [&names[0], &names[1]]);
}

#[test]
fn unsatisfied_challenges_are_tested_again_after_the_retry_delay() {
    let mut m = Machine::new();
    let id = m.create(&["a.example", "b.example"]);
    m.make_challenges(id);
    let token = m.claim_one(id);
    let outcome = results_for(m.session(id).names.as_slice(), |n| {
        n.as_str() == "a.example"
    });
    assert_eq!(
        m.complete(id, token, outcome),
        Ok(SessionReply::Completed {
            session: id,
            stage: Stage::TestChallenge,
            live: true
        })
    );
    let session = m.session(id);
    assert_eq!(session.visible_at_ms, m.now_ms + 2_000);
    let [a, b] = &session.challenges[..] else {
        unreachable!()
    };
    assert!(a.satisfied && a.last_error.is_none() && a.times_tested == 1);
    assert!(!b.satisfied && b.times_tested == 1);
    assert_eq!(b.last_error, Some(reason("connection refused")));
    // Not visible before the delay.
    assert_eq!(m.claim(Stage::TestChallenge, 10), Vec::new());
    m.advance(2_000);
    // A satisfied challenge stays satisfied, and is not counted again.
    let token = m.claim_one(id);
    let outcome = results_for(m.session(id).names.as_slice(), |n| {
        n.as_str() == "b.example"
    });
    m.complete(id, token, outcome).unwrap();
    let session = m.session(id);
    assert_eq!(session.stage(), Stage::Issue);
    assert_eq!(
        session
            .challenges
            .iter()
            .map(|c| c.times_tested)
            .collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(session.challenges.iter().all(|c| c.last_error.is_none()));
    // The stage timeout of testchallenge counted from the first entry, not from each retest.
}

#[test]
fn a_challenge_tested_too_often_kills_its_session_in_testchallenge() {
    let mut m = Machine::new();
    m.ok(SessionCommand::Configure(SessionConfig {
        max_tests: 2,
        test_retry_ms: 0,
        ..SessionConfig::default()
    }));
    let id = m.create(&["a.example", "b.example"]);
    m.make_challenges(id);
    m.test_all(id, false);
    let reply = m.test_all(id, false);
    assert_eq!(
        reply,
        SessionReply::Completed {
            session: id,
            stage: Stage::TestChallenge,
            live: false
        }
    );
    let session = m.session(id);
    assert_eq!(session.stage(), Stage::TestChallenge);
    assert!(!session.live() && session.claim().is_none());
    assert_eq!(
        session.kill_reason().cloned(),
        Some(KillReason::TestedTooOften {
            name: dns("a.example"),
            times: 2
        })
    );
    assert!(
        session
            .challenges
            .iter()
            .all(|c| c.failed && c.times_tested == 2)
    );
    assert_eq!(session.archived_at_ms(), Some(m.now_ms));
    assert_eq!(m.claim(Stage::TestChallenge, 10), Vec::new());
    assert_eq!(m.table.archived_count(), 1);
}

#[test]
fn a_testchallenge_outcome_needs_one_sound_result_per_challenge() {
    let mut m = Machine::new();
    let id = m.create(&["a.example", "b.example"]);
    m.make_challenges(id);
    let token = m.claim_one(id);
    let result = |name: &str, satisfied: bool, error: Option<&str>| TestResult {
        name: dns(name),
        satisfied,
        error: error.map(reason),
    };
    let wrong = [
        vec![result("a.example", true, None)],
        vec![
            result("a.example", true, None),
            result("a.example", true, None),
        ],
        vec![
            result("a.example", true, None),
            result("c.example", true, None),
        ],
        vec![
            result("a.example", true, Some("but also an error")),
            result("b.example", true, None),
        ],
    ];
    for results in wrong {
        let error = m
            .complete(id, token, StepOutcome::Tested(results))
            .unwrap_err();
        assert!(matches!(error, SessionError::BadOutcome(_)), "{error}");
    }
    let error = m.complete(id, token, issued()).unwrap_err();
    assert!(
        error.to_string().contains("outcome is for stage issue"),
        "{error}"
    );
}

#[test]
fn a_certificate_must_fit() {
    let mut m = Machine::new();
    let id = m.create(&["a.example"]);
    m.make_challenges(id);
    m.test_all(id, true);
    let token = m.claim_one(id);
    for (cert, error_kind) in [
        (Vec::new(), "range"),
        (vec![b'x'; SESSION_CERT_BYTES_MAX + 1], "large"),
    ] {
        let error = m
            .complete(id, token, StepOutcome::Issued { cert })
            .unwrap_err();
        match error_kind {
            "range" => assert!(matches!(error, SessionError::OutOfRange { .. }), "{error}"),
            _ => assert!(matches!(error, SessionError::TooLarge { .. }), "{error}"),
        }
    }
    let cert = vec![b'x'; SESSION_CERT_BYTES_MAX];
    m.complete(id, token, StepOutcome::Issued { cert }).unwrap();
}

#[test]
fn a_retried_completion_gets_the_same_reply_and_changes_nothing() {
    let mut m = Machine::new();
    let id = m.create(&["a.example"]);
    let token = m.claim_one(id);
    let outcome = challenges_for(&m.session(id).names);
    let first = m.complete(id, token, outcome.clone()).unwrap();
    let settled = m.table.clone();
    m.advance(5);
    assert_eq!(m.complete(id, token, outcome.clone()), Ok(first.clone()));
    // The retry rule looks at the token only: a confused retry with another command kind gets
    // the recorded answer too.
    let release = SessionCommand::Release {
        session: id,
        token,
        delay_ms: 0,
        note: None,
    };
    assert_eq!(m.run(release), Ok(first.clone()));
    // The token decides before anything else: a retry whose outcome would now be refused still
    // gets the recorded answer.
    let malformed = StepOutcome::Issued { cert: Vec::new() };
    assert_eq!(m.complete(id, token, malformed), Ok(first.clone()));
    let bad_delay = SessionCommand::Release {
        session: id,
        token,
        delay_ms: u64::MAX,
        note: None,
    };
    assert_eq!(m.run(bad_delay), Ok(first.clone()));
    assert_eq!(m.table, settled);
    // Still so when someone else holds the session now; their claim is untouched.
    let newer = m.claim_one(id);
    let held = m.table.clone();
    assert_eq!(m.complete(id, token, outcome.clone()), Ok(first.clone()));
    assert_eq!(m.table, held);
    // Any other old token is stale.
    assert_eq!(
        m.complete(id, token - 1, outcome.clone()),
        Err(SessionError::StaleClaim {
            session: id,
            token: token - 1
        })
    );
    // Release and fail replay in the same way, also after the session was killed.
    let release = SessionCommand::Release {
        session: id,
        token: newer,
        delay_ms: 10,
        note: Some(reason("upstream CA pending")),
    };
    let released = m.ok(release.clone());
    assert_eq!(
        released,
        SessionReply::Released {
            session: id,
            visible_at_ms: m.now_ms + 10
        }
    );
    assert_eq!(m.session(id).note, Some(reason("upstream CA pending")));
    m.advance(10);
    let last = m.claim_one(id);
    let fail = SessionCommand::Fail {
        session: id,
        token: last,
        reason: reason("CAA forbids us"),
    };
    assert_eq!(m.ok(fail.clone()), SessionReply::Failed { session: id });
    let failed = m.table.clone();
    assert_eq!(m.ok(fail.clone()), SessionReply::Failed { session: id });
    assert_eq!(m.table, failed);
    // Only the latest completion is remembered.
    assert!(matches!(
        m.run(release),
        Err(SessionError::StaleClaim { .. })
    ));
}

#[test]
fn release_puts_the_session_back_after_its_delay() {
    let mut m = Machine::new();
    let id = m.create(&["a.example"]);
    m.advance(1_000);
    let token = m.claim_one(id);
    let error = m.refused(SessionCommand::Release {
        session: id,
        token,
        delay_ms: SESSION_DELAY_MS_MAX + 1,
        note: None,
    });
    assert!(matches!(error, SessionError::OutOfRange { .. }));
    m.ok(SessionCommand::Release {
        session: id,
        token,
        delay_ms: 0,
        note: None,
    });
    let session = m.session(id);
    assert_eq!(session.stage(), Stage::MakeChallenge);
    // The stage timeout still counts from entering the stage.
    assert_eq!(session.stage_entered_ms, T0);
    assert_eq!(session.visible_at_ms, T0 + 1_000);
    assert_eq!(ids(&m.claim(Stage::MakeChallenge, 1)), [id]);
}

#[test]
fn fail_is_terminal_and_archives_the_session() {
    let mut m = Machine::new();
    let id = m.create(&["a.example"]);
    m.make_challenges(id);
    let token = m.claim_one(id);
    m.ok(SessionCommand::Fail {
        session: id,
        token,
        reason: reason("the name does not resolve"),
    });
    let session = m.session(id);
    assert_eq!(session.stage(), Stage::Failed);
    assert!(session.live());
    assert_eq!(
        session.failure().cloned(),
        Some(reason("the name does not resolve"))
    );
    assert_eq!(session.archived_at_ms(), Some(m.now_ms));
    assert_eq!(m.table.queue_stats(Stage::Failed, m.now_ms), None);
    assert_eq!(
        m.refused(SessionCommand::Acknowledge { session: id }),
        SessionError::NotDone {
            session: id,
            stage: Stage::Failed
        }
    );
    // A new claim on a failed session is impossible, so nothing can advance it.
    assert_eq!(m.claim(Stage::TestChallenge, 10), Vec::new());
}

#[test]
fn kill_stops_a_session_where_it_is() {
    let mut m = Machine::new();
    let claimed = m.create(&["b.example"]);
    let queued = m.create(&["a.example"]);
    let token = m.claim_one(claimed);
    assert!(m.session(queued).claim().is_none());
    for id in [queued, claimed] {
        assert_eq!(
            m.ok(SessionCommand::Kill {
                session: id,
                reason: reason("abuse report"),
            }),
            SessionReply::Killed { already: false }
        );
        let session = m.session(id);
        assert_eq!(session.stage(), Stage::MakeChallenge);
        assert!(!session.live() && session.claim().is_none());
        assert_eq!(
            session.kill_reason().cloned(),
            Some(KillReason::Operator(reason("abuse report")))
        );
        assert_eq!(session.archived_at_ms(), Some(m.now_ms));
    }
    let before = m.table.clone();
    assert_eq!(
        m.ok(SessionCommand::Kill {
            session: queued,
            reason: reason("again"),
        }),
        SessionReply::Killed { already: true }
    );
    assert_eq!(m.table, before);
    let error = m
        .complete(claimed, token, challenges_for(&dns_names(&["b.example"])))
        .unwrap_err();
    assert!(matches!(error, SessionError::NotLive { .. }));
    assert!(error.to_string().contains("abuse report"), "{error}");
    for command in [
        SessionCommand::Release {
            session: claimed,
            token,
            delay_ms: 0,
            note: None,
        },
        SessionCommand::Fail {
            session: claimed,
            token,
            reason: reason("late"),
        },
    ] {
        assert!(matches!(m.refused(command), SessionError::NotLive { .. }));
    }
    assert_eq!(m.claim(Stage::MakeChallenge, 10), Vec::new());
    assert_eq!(
        m.refused(SessionCommand::Kill {
            session: SessionId(77),
            reason: reason("x"),
        }),
        SessionError::UnknownSession {
            session: SessionId(77)
        }
    );
    // Killing a done session takes it out of the done set; it stays readable.
    let done = m.done_session(&["c.example"]);
    m.ok(SessionCommand::Kill {
        session: done,
        reason: reason("revoked"),
    });
    assert_eq!(
        m.table.queue_stats(Stage::Done, m.now_ms).unwrap().waiting,
        0
    );
    assert!(m.session(done).cert().is_some());
}

#[test]
fn acknowledging_a_certificate_archives_its_session_once() {
    let mut m = Machine::new();
    let id = m.done_session(&["a.example"]);
    let waiting = m.create(&["b.example"]);
    assert_eq!(
        m.refused(SessionCommand::Acknowledge { session: waiting }),
        SessionError::NotDone {
            session: waiting,
            stage: Stage::MakeChallenge
        }
    );
    assert!(matches!(
        m.refused(SessionCommand::Acknowledge {
            session: SessionId(999)
        }),
        SessionError::UnknownSession { .. }
    ));
    m.ok(SessionCommand::Kill {
        session: waiting,
        reason: reason("out of the way"),
    });
    m.advance(7);
    assert_eq!(
        m.ok(SessionCommand::Acknowledge { session: id }),
        SessionReply::Acknowledged { already: false }
    );
    let session = m.session(id);
    assert!(session.acknowledged());
    assert_eq!(session.archived_at_ms(), Some(m.now_ms));
    assert!(session.cert().is_some());
    let before = m.table.clone();
    assert_eq!(
        m.ok(SessionCommand::Acknowledge { session: id }),
        SessionReply::Acknowledged { already: true }
    );
    assert_eq!(m.table, before);
    // A session archived by the retention can still be acknowledged, without a new archive time.
    let late = m.done_session(&["c.example"]);
    m.advance(SessionConfig::default().done_retention_ms);
    let report = m.tick();
    assert!(report.archived.contains(&late));
    let archived_at_ms = m.session(late).archived_at_ms();
    assert!(!m.session(late).acknowledged());
    m.advance(1);
    assert_eq!(
        m.ok(SessionCommand::Acknowledge { session: late }),
        SessionReply::Acknowledged { already: false }
    );
    assert_eq!(m.session(late).archived_at_ms(), archived_at_ms);
}

#[test]
fn a_tick_takes_back_expired_claims_visible_at_once() {
    let mut m = Machine::new();
    let early = m.create(&["a.example"]);
    let late = m.create(&["b.example"]);
    let early_token = m.claim_one(early);
    m.advance(1_000);
    m.claim_one(late);
    m.advance(MINUTE_MS - 1_000);
    let report = m.tick();
    assert_eq!(report.reclaimed, [early]);
    assert!(!report.more);
    let session = m.session(early);
    assert!(session.claim().is_none());
    assert_eq!(session.visible_at_ms, m.now_ms);
    assert!(m.session(late).claim().is_some());
    // The old claim is gone: its completion is stale.
    let outcome = challenges_for(&dns_names(&["a.example"]));
    assert!(matches!(
        m.complete(early, early_token, outcome),
        Err(SessionError::StaleClaim { .. })
    ));
    // Until a tick takes it back, a claim past its deadline still completes.
    m.advance(5_000);
    let late_token = m.session(late).claim().unwrap().token;
    let outcome = challenges_for(&dns_names(&["b.example"]));
    m.complete(late, late_token, outcome).unwrap();
    assert!(m.tick().is_empty());
}

#[test]
fn a_tick_kills_sessions_that_sit_in_a_stage_too_long() {
    let mut m = Machine::new();
    let config = SessionConfig {
        stage_timeout_ms: 30_000,
        ..SessionConfig::default()
    };
    m.ok(SessionCommand::Configure(config));
    let claimed = m.create(&["b.example"]);
    let queued = m.create(&["a.example"]);
    m.advance(1);
    let fresh = m.create(&["c.example"]);
    let token = m.claim_one(claimed);
    m.advance(config.stage_timeout_ms - 1);
    let report = m.tick();
    assert_eq!(report.timed_out, [claimed, queued]);
    assert!(report.reclaimed.is_empty());
    for id in [queued, claimed] {
        let session = m.session(id);
        assert_eq!(
            session.kill_reason().cloned(),
            Some(KillReason::StageTimeout {
                stage: Stage::MakeChallenge
            })
        );
        assert!(!session.live() && session.claim().is_none());
        assert_eq!(session.archived_at_ms(), Some(m.now_ms));
    }
    assert!(m.session(fresh).live());
    assert!(matches!(
        m.complete(claimed, token, challenges_for(&dns_names(&["b.example"]))),
        Err(SessionError::NotLive { .. })
    ));
    m.advance(1);
    assert_eq!(m.tick().timed_out, [fresh]);
}

#[test]
fn a_tick_archives_forgotten_certificates_and_deletes_old_archives() {
    let mut m = Machine::new();
    m.ok(SessionCommand::Configure(SessionConfig {
        done_retention_ms: 10_000,
        archive_retention_ms: 20_000,
        ..SessionConfig::default()
    }));
    let done = m.done_session(&["a.example"]);
    let failed = m.create_keyed(Some("k"), &["b.example"]);
    let token = m.claim_one(failed);
    m.ok(SessionCommand::Fail {
        session: failed,
        token,
        reason: reason("no"),
    });
    m.advance(9_999);
    assert!(m.tick().is_empty());
    m.advance(1);
    let report = m.tick();
    assert_eq!(report.archived, [done]);
    let session = m.session(done);
    assert_eq!(session.archived_at_ms(), Some(m.now_ms));
    assert!(!session.acknowledged() && session.cert().is_some());
    m.advance(10_000);
    assert_eq!(m.tick().deleted, [failed]);
    assert!(m.table.by_request_key(&request_key("k")).is_none());
    m.advance(10_000);
    assert_eq!(m.tick().deleted, [done]);
    assert_eq!(m.table.len(), 0);
}

#[test]
fn each_tick_step_touches_a_bounded_number_of_sessions() {
    let mut m = Machine::new();
    let total = SESSION_TICK_BATCH_MAX + 6;
    for i in 0..total {
        m.table
            .apply(
                SessionCommand::Create {
                    request_key: None,
                    csr: vec![1],
                    names: dns_names(&[&format!("n{i}.example")]),
                },
                T0,
                i as u64 + 1,
            )
            .unwrap();
    }
    m.index = total as u64;
    m.advance(SessionConfig::default().stage_timeout_ms);
    let report = m.tick();
    assert_eq!(report.timed_out.len(), SESSION_TICK_BATCH_MAX);
    assert!(report.more);
    let report = m.tick();
    assert_eq!(report.timed_out.len(), 6);
    assert!(!report.more);
}

#[test]
fn configure_names_the_field_out_of_range() {
    let mut m = Machine::new();
    let base = SessionConfig::default();
    let bad = [
        (
            "stage_timeout_ms",
            SessionConfig {
                stage_timeout_ms: 999,
                ..base
            },
        ),
        (
            "max_tests",
            SessionConfig {
                max_tests: 0,
                ..base
            },
        ),
        (
            "test_retry_ms",
            SessionConfig {
                test_retry_ms: SESSION_DELAY_MS_MAX + 1,
                ..base
            },
        ),
        (
            "done_retention_ms",
            SessionConfig {
                done_retention_ms: 0,
                ..base
            },
        ),
        (
            "archive_retention_ms",
            SessionConfig {
                archive_retention_ms: 366 * DAY_MS,
                ..base
            },
        ),
        (
            "sessions_max",
            SessionConfig {
                sessions_max: SESSIONS_MAX as u64 + 1,
                ..base
            },
        ),
    ];
    for (field, config) in bad {
        let error = m.refused(SessionCommand::Configure(config));
        assert!(
            matches!(&error, SessionError::InvalidConfig { field: f, .. } if f == field),
            "{error}"
        );
        assert!(error.to_string().contains("is outside"), "{error}");
    }
    let config = SessionConfig {
        max_tests: 3,
        ..base
    };
    assert_eq!(
        m.ok(SessionCommand::Configure(config)),
        SessionReply::Configured
    );
    assert_eq!(m.table.config, config);
}

#[test]
fn paging_through_a_stage_follows_session_ids() {
    let mut m = Machine::new();
    let created: Vec<SessionId> = (0..5)
        .map(|i| m.create(&[&format!("n{i}.example")]))
        .collect();
    let first = m.table.in_stage(Stage::MakeChallenge, None, 2);
    assert_eq!(first.iter().map(|s| s.id).collect::<Vec<_>>(), created[..2]);
    let rest = m
        .table
        .in_stage(Stage::MakeChallenge, Some(created[1]), 100);
    assert_eq!(rest.iter().map(|s| s.id).collect::<Vec<_>>(), created[2..]);
    assert!(m.table.in_stage(Stage::Issue, None, 100).is_empty());
}

/// A table with one session in each place: queued, claimed, done, archived.
fn table_in_every_place() -> Machine {
    let mut m = Machine::new();
    m.done_session(&["done.example"]);
    let failed = m.create_keyed(Some("f"), &["failed.example"]);
    let token = m.claim_one(failed);
    m.ok(SessionCommand::Fail {
        session: failed,
        token,
        reason: reason("no"),
    });
    let claimed = m.create(&["claimed.example"]);
    m.claim_one(claimed);
    m.create(&["queued.example"]);
    m
}

#[test]
fn snapshot_records_rebuild_the_same_table() {
    let m = table_in_every_place();
    let bytes = postcard::to_stdvec(&m.table.records()).unwrap();
    let records: SessionRecords = postcard::from_bytes(&bytes).unwrap();
    let rebuilt = Sessions::from_records(records).unwrap();
    assert_eq!(rebuilt, m.table);
    // The same session twice is refused.
    let mut records: SessionRecords = postcard::from_bytes(&bytes).unwrap();
    let copy = records.sessions[0].clone();
    records.sessions.push(copy);
    assert!(
        Sessions::from_records(records)
            .unwrap_err()
            .contains("twice")
    );
}

#[test]
fn check_finds_sessions_out_of_place_and_broken_indexes() {
    let m = table_in_every_place();
    m.table.check(m.now_ms).unwrap();
    /// What is wrong, and how to make it so.
    type Corruption = (&'static str, fn(&mut SessionRecord));
    let corruptions: [Corruption; 6] = [
        ("a claim token above the last issued", |s| {
            if let Some(claim) = &mut s.claim {
                claim.token += 100;
            }
        }),
        ("a live queued session that is archived", |s| {
            if s.stage.is_queued() {
                s.archived_at_ms = Some(T0);
            }
        }),
        ("a done session without certificate", |s| {
            if s.stage == Stage::Done {
                s.cert = None;
            }
        }),
        ("a time after the clock", |s| s.created_ms = u64::MAX),
        ("a kill reason on a live session", |s| {
            s.kill_reason = Some(KillReason::Operator(Reason::new("x").unwrap()));
        }),
        ("a completion not older than the claim", |s| {
            if let Some(claim) = &s.claim {
                s.last_completion = Some(Completion {
                    token: claim.token,
                    reply: SessionReply::Configured,
                });
            }
        }),
    ];
    for (what, corrupt) in corruptions {
        let mut records: SessionRecords =
            postcard::from_bytes(&postcard::to_stdvec(&m.table.records()).unwrap()).unwrap();
        for session in &mut records.sessions {
            corrupt(session);
        }
        let broken = Sessions::from_records(records).and_then(|table| table.check(m.now_ms));
        assert!(broken.is_err(), "{what} went unnoticed");
    }
    // An index that disagrees with the table.
    let mut broken = m.table.clone();
    let (visible_at_ms, id) = broken.queues[0].pop_first().unwrap();
    broken.queues[0].insert((visible_at_ms + 1, id));
    assert!(broken.check(m.now_ms).is_err());
    let mut broken = m.table.clone();
    broken.archive.insert((T0, SessionId(12345)));
    assert!(broken.check(m.now_ms).is_err());
}

#[test]
fn refusals_read_as_sentences_that_say_what_to_do() {
    let id = SessionId(7);
    let messages = [
        SessionError::UnknownSession { session: id }.to_string(),
        SessionError::StaleClaim {
            session: id,
            token: 3,
        }
        .to_string(),
        SessionError::NotQueued { stage: Stage::Done }.to_string(),
        SessionError::OutOfRange {
            field: "visibility_ms".to_owned(),
            got: 5,
            min: 1_000,
            max: 3_600_000,
        }
        .to_string(),
    ];
    assert_eq!(
        messages,
        [
            "no session 7 exists (never created, or deleted after its archive retention); \
             check the id",
            "claim token 3 does not hold session 7: the claim ended or expired and someone else \
             may hold it; drop this work and claim again",
            "stage done has no queue; only makechallenge, testchallenge and issue can be claimed",
            "visibility_ms is 5; it must be within 1000..=3600000",
        ]
    );
}

fn item(session: SessionId, token: u64, outcome: StepOutcome) -> CompleteItem {
    CompleteItem {
        session,
        token,
        outcome,
    }
}

fn batch_replies(reply: SessionReply) -> Vec<Result<SessionReply, SessionError>> {
    match reply {
        SessionReply::CompletedBatch(replies) => replies,
        other => panic!("a batch answered {other:?}"),
    }
}

#[test]
fn a_batch_answers_item_by_item_and_a_stale_token_fails_only_its_item() {
    let mut m = Machine::new();
    let a = m.create(&["a.example"]);
    let b = m.create(&["b.example"]);
    let c = m.create(&["c.example"]);
    let claimed = m.claim(Stage::MakeChallenge, 3);
    assert_eq!(ids(&claimed), [a, b, c]);
    let token = claimed[0].claim().unwrap().token;
    let names = |m: &Machine, id| m.session(id).names.clone();
    let replies = batch_replies(m.ok(SessionCommand::CompleteBatch {
        items: vec![
            item(a, token, challenges_for(&names(&m, a))),
            // A stale token: refused, and only this item.
            item(b, token - 1, challenges_for(&names(&m, b))),
            // The wrong stage's outcome: refused, nothing of it applied.
            item(c, token, issued()),
            // No such session.
            item(SessionId(999), token, issued()),
        ],
    }));
    assert_eq!(
        replies,
        [
            Ok(SessionReply::Completed {
                session: a,
                stage: Stage::TestChallenge,
                live: true
            }),
            Err(SessionError::StaleClaim {
                session: b,
                token: token - 1
            }),
            Err(SessionError::WrongStage {
                session: c,
                expected: Stage::Issue,
                actual: Stage::MakeChallenge
            }),
            Err(SessionError::UnknownSession {
                session: SessionId(999)
            }),
        ]
    );
    assert_eq!(m.session(a).stage(), Stage::TestChallenge);
    assert_eq!(m.session(a).challenges.len(), 1);
    // The refused items left their sessions claimed as they were.
    for id in [b, c] {
        let session = m.session(id);
        assert_eq!(session.stage(), Stage::MakeChallenge);
        assert_eq!(session.claim().map(|claim| claim.token), Some(token));
        assert_eq!(session.last_completion, None);
    }
    // The refused items go through in a batch of their own, and a retry of the first item
    // in it gets the first answer again.
    let settled_a = m.session(a).clone();
    let replies = batch_replies(m.ok(SessionCommand::CompleteBatch {
        items: vec![
            item(b, token, challenges_for(&names(&m, b))),
            item(a, token, challenges_for(&names(&m, a))),
            item(c, token, challenges_for(&names(&m, c))),
        ],
    }));
    let completed = |session| {
        Ok(SessionReply::Completed {
            session,
            stage: Stage::TestChallenge,
            live: true,
        })
    };
    assert_eq!(replies, [completed(b), completed(a), completed(c)]);
    assert_eq!(m.session(a), &settled_a, "a retried item changes nothing");
}

#[test]
fn a_batch_is_what_its_items_would_do_one_after_another() {
    // The same claims, completed once as a batch and once item by item, end in the same table
    // with the same answers; a session named twice gets the retry answer the second time.
    let mut batched = Machine::new();
    let ids_made: Vec<SessionId> = ["a.example", "b.example"]
        .iter()
        .map(|name| batched.create(&[name]))
        .collect();
    let token = batched.claim(Stage::MakeChallenge, 2)[0]
        .claim()
        .unwrap()
        .token;
    let mut single = batched.clone();
    let items: Vec<CompleteItem> = ids_made
        .iter()
        .chain(&ids_made[..1])
        .map(|&id| item(id, token, challenges_for(&batched.session(id).names)))
        .collect();
    let replies = batch_replies(batched.ok(SessionCommand::CompleteBatch {
        items: items.clone(),
    }));
    let one_by_one: Vec<_> = items
        .into_iter()
        .map(|item| single.complete(item.session, item.token, item.outcome))
        .collect();
    assert_eq!(replies, one_by_one);
    assert_eq!(replies[0], replies[2], "the repeated item is a retry");
    assert_eq!(batched.table, single.table);
}

#[test]
fn a_batch_is_bounded_and_refused_whole_when_empty_or_too_long() {
    let mut m = Machine::new();
    let id = m.create(&["a.example"]);
    let token = m.claim_one(id);
    let before = m.table.clone();
    assert_eq!(
        m.refused(SessionCommand::CompleteBatch { items: Vec::new() }),
        SessionError::OutOfRange {
            field: "number of items".to_owned(),
            got: 0,
            min: 1,
            max: SESSION_COMPLETE_BATCH_MAX as u64,
        }
    );
    let outcome = challenges_for(&m.session(id).names);
    let too_many = vec![item(id, token, outcome.clone()); SESSION_COMPLETE_BATCH_MAX + 1];
    assert!(matches!(
        m.refused(SessionCommand::CompleteBatch { items: too_many }),
        SessionError::OutOfRange { got, .. } if got == SESSION_COMPLETE_BATCH_MAX as u64 + 1
    ));
    assert_eq!(m.table, before, "a refused batch applies none of its items");
    // A full batch is taken: the first item completes, the others are its retries.
    let full = vec![item(id, token, outcome); SESSION_COMPLETE_BATCH_MAX];
    let replies = batch_replies(m.ok(SessionCommand::CompleteBatch { items: full }));
    assert_eq!(replies.len(), SESSION_COMPLETE_BATCH_MAX);
    assert!(replies.iter().all(|reply| reply == &replies[0]));
    assert_eq!(m.session(id).stage(), Stage::TestChallenge);
}

#[test]
fn the_next_visible_time_of_a_queue_is_its_earliest_session() {
    let mut m = Machine::new();
    assert_eq!(m.table.next_visible_ms(Stage::MakeChallenge), None);
    assert_eq!(m.table.next_visible_ms(Stage::Done), None);
    let a = m.create(&["a.example"]);
    let created_ms = m.now_ms;
    assert_eq!(
        m.table.next_visible_ms(Stage::MakeChallenge),
        Some(created_ms)
    );
    let token = m.claim_one(a);
    assert_eq!(
        m.table.next_visible_ms(Stage::MakeChallenge),
        None,
        "claimed"
    );
    m.ok(SessionCommand::Release {
        session: a,
        token,
        delay_ms: 5_000,
        note: None,
    });
    assert_eq!(
        m.table.next_visible_ms(Stage::MakeChallenge),
        Some(m.now_ms + 5_000),
        "released for later"
    );
    m.advance(10);
    m.create(&["b.example"]);
    assert_eq!(
        m.table.next_visible_ms(Stage::MakeChallenge),
        Some(m.now_ms),
        "a session visible now comes first"
    );
    assert_eq!(m.table.next_visible_ms(Stage::TestChallenge), None);
}
