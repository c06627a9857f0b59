//! The ACME tables through `apply`, one path at a time.

use crate::acme::{
    AccountId, AccountKey, AcmeCommand, AcmeError, AcmeReply, AuthorizationStatus, ChallengeStatus,
    OrderId, OrderStatus,
};
use crate::limits::{ACME_ORDER_LIFETIME_MS, ACME_ORDER_RETENTION_MS, ACME_ORDERS_PER_WINDOW_MAX};
use crate::sessions::{CompleteItem, SessionCommand, SessionReply, Stage, StepOutcome};
use crate::{ChallengeToken, Command, DnsName, Reason, Response, Stamp, State, WorkerId, apply};

struct Run {
    state: State,
    index: u64,
    now_ms: u64,
}

impl Run {
    fn new() -> Run {
        Run {
            state: State::new(),
            index: 0,
            now_ms: 1_000_000,
        }
    }

    fn apply(&mut self, command: Command) -> Response {
        self.index += 1;
        self.now_ms += 10;
        let before = self.state.clone();
        let response = apply(
            &mut self.state,
            command,
            Stamp::new(self.index, self.now_ms),
        );
        self.state.check_invariants().expect("invariants hold");
        if response.is_refusal() {
            // Nothing but the clock and the index moved.
            let mut expected = before;
            expected.applied_index = self.state.applied_index;
            expected.clock_ms = self.state.clock_ms;
            assert_eq!(self.state, expected, "a refused command changed the state");
        }
        response
    }

    fn acme(&mut self, command: AcmeCommand) -> Result<AcmeReply, AcmeError> {
        match self.apply(Command::Acme(command)) {
            Response::Acme(result) => result,
            other => panic!("not an ACME answer: {other:?}"),
        }
    }

    fn session(&mut self, command: SessionCommand) -> SessionReply {
        match self.apply(Command::Session(command)) {
            Response::Session(result) => result.expect("the session command is accepted"),
            other => panic!("not a session answer: {other:?}"),
        }
    }

    fn register(&mut self, thumbprint_seed: char) -> AccountId {
        match self.acme(AcmeCommand::NewAccount {
            key: key(thumbprint_seed),
            contact: vec!["mailto:ops@example.com".to_owned()],
            only_existing: false,
        }) {
            Ok(AcmeReply::Account { account, existing }) => {
                assert!(!existing);
                account.id
            }
            other => panic!("registration failed: {other:?}"),
        }
    }

    fn order(&mut self, account: AccountId, names: &[&str]) -> OrderId {
        let tokens = names
            .iter()
            .enumerate()
            .map(|(i, _)| ChallengeToken::new(format!("tok{}-{i}", self.index)).unwrap())
            .collect();
        match self.acme(AcmeCommand::NewOrder {
            account,
            identifiers: names.iter().map(|n| DnsName::new(*n).unwrap()).collect(),
            tokens,
        }) {
            Ok(AcmeReply::Order(order)) => {
                assert_eq!(order.status(self.now_ms), OrderStatus::Pending);
                order.id
            }
            other => panic!("order refused: {other:?}"),
        }
    }

    fn validate(&mut self, account: AccountId, order: OrderId, position: u32, ok: bool) {
        self.acme(AcmeCommand::RespondChallenge {
            account,
            order,
            authorization: position,
        })
        .expect("the challenge is ready");
        let token = self.state.acme().order(order).unwrap().authorizations[position as usize]
            .token
            .clone();
        self.acme(AcmeCommand::RecordValidation {
            order,
            authorization: position,
            token,
            error: (!ok).then(|| Reason::new("connection refused").unwrap()),
        })
        .expect("the validation is recorded");
    }

    fn status(&self, order: OrderId) -> OrderStatus {
        self.state.acme().order(order).unwrap().status(self.now_ms)
    }
}

fn key(seed: char) -> AccountKey {
    AccountKey {
        jwk: format!("{{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"{seed}\",\"y\":\"{seed}\"}}"),
        thumbprint: std::iter::repeat_n(seed, 43).collect(),
    }
}

#[test]
fn an_account_is_found_again_by_its_key_and_only_existing_finds_nothing_new() {
    let mut run = Run::new();
    let id = run.register('a');
    match run.acme(AcmeCommand::NewAccount {
        key: key('a'),
        contact: Vec::new(),
        only_existing: true,
    }) {
        Ok(AcmeReply::Account { account, existing }) => {
            assert!(existing);
            assert_eq!(account.id, id);
            // Finding it changed nothing, the contact included.
            assert_eq!(account.contact, ["mailto:ops@example.com"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        run.acme(AcmeCommand::NewAccount {
            key: key('b'),
            contact: Vec::new(),
            only_existing: true,
        }),
        Err(AcmeError::NoAccount)
    );
    assert_eq!(run.state.acme().account_count(), 1);
}

#[test]
fn an_order_goes_pending_ready_processing_valid_and_its_session_is_acknowledged() {
    let mut run = Run::new();
    let account = run.register('a');
    let order = run.order(account, &["a.example.com", "b.example.com"]);
    run.validate(account, order, 0, true);
    assert_eq!(run.status(order), OrderStatus::Pending, "one name is left");
    // Finalizing too early is refused.
    assert!(matches!(
        run.acme(AcmeCommand::Finalize {
            account,
            order,
            csr: vec![1, 2, 3],
        }),
        Err(AcmeError::NotReady {
            status: OrderStatus::Pending,
            ..
        })
    ));
    run.validate(account, order, 1, true);
    assert_eq!(run.status(order), OrderStatus::Ready);
    run.acme(AcmeCommand::Finalize {
        account,
        order,
        csr: vec![1, 2, 3],
    })
    .expect("a ready order finalizes");
    assert_eq!(run.status(order), OrderStatus::Processing);
    let session_id = run.state.acme().order(order).unwrap().session.unwrap();
    let session = run.state.session(session_id).unwrap();
    assert_eq!(session.stage(), Stage::Issue);
    assert_eq!(session.names.len(), 2);
    assert!(session.challenges.iter().all(|c| c.satisfied));
    // A second finalize is refused: one order, one issuance.
    assert!(matches!(
        run.acme(AcmeCommand::Finalize {
            account,
            order,
            csr: vec![1, 2, 3],
        }),
        Err(AcmeError::NotReady {
            status: OrderStatus::Processing,
            ..
        })
    ));
    // A worker issues it as any session.
    let SessionReply::Claimed(claimed) = run.session(SessionCommand::Claim {
        stage: Stage::Issue,
        worker: WorkerId::new("w").unwrap(),
        visibility_ms: 30_000,
        max: 10,
    }) else {
        panic!("not a claim")
    };
    assert_eq!(claimed.len(), 1);
    let token = claimed[0].claim().unwrap().token;
    run.session(SessionCommand::CompleteBatch {
        items: vec![CompleteItem {
            session: session_id,
            token,
            outcome: StepOutcome::Issued {
                cert: b"PEM".to_vec(),
            },
        }],
    });
    let stored = run.state.acme().order(order).unwrap();
    assert_eq!(stored.status(run.now_ms), OrderStatus::Valid);
    assert_eq!(stored.certificate.as_deref(), Some(&b"PEM"[..]));
    assert!(run.state.session(session_id).unwrap().acknowledged());
}

#[test]
fn a_failed_validation_makes_the_authorization_and_order_invalid() {
    let mut run = Run::new();
    let account = run.register('a');
    let order = run.order(account, &["a.example.com"]);
    run.validate(account, order, 0, false);
    let stored = run.state.acme().order(order).unwrap();
    assert_eq!(
        stored.authorizations[0].status(stored.expires_ms, run.now_ms),
        AuthorizationStatus::Invalid
    );
    assert_eq!(run.status(order), OrderStatus::Invalid);
    // Responding again does not restart it.
    assert_eq!(
        run.acme(AcmeCommand::RespondChallenge {
            account,
            order,
            authorization: 0,
        }),
        Err(AcmeError::ChallengeState {
            status: ChallengeStatus::Invalid
        })
    );
}

#[test]
fn a_validation_is_recorded_only_for_a_processing_challenge_and_its_own_token() {
    let mut run = Run::new();
    let account = run.register('a');
    let order = run.order(account, &["a.example.com"]);
    let token = run.state.acme().order(order).unwrap().authorizations[0]
        .token
        .clone();
    // The client has not said it is ready: nothing is fetched, nothing recorded.
    assert_eq!(run.state.acme().validating(10), []);
    assert!(
        run.acme(AcmeCommand::RecordValidation {
            order,
            authorization: 0,
            token: token.clone(),
            error: None,
        })
        .is_err()
    );
    run.acme(AcmeCommand::RespondChallenge {
        account,
        order,
        authorization: 0,
    })
    .unwrap();
    assert_eq!(run.state.acme().validating(10), [(order, 0)]);
    assert!(
        run.acme(AcmeCommand::RecordValidation {
            order,
            authorization: 0,
            token: ChallengeToken::new("another").unwrap(),
            error: None,
        })
        .is_err()
    );
    run.acme(AcmeCommand::RecordValidation {
        order,
        authorization: 0,
        token,
        error: None,
    })
    .unwrap();
    assert_eq!(run.state.acme().validating(10), []);
    assert_eq!(run.status(order), OrderStatus::Ready);
}

#[test]
fn another_accounts_order_is_not_found_and_a_deactivated_account_cannot_act() {
    let mut run = Run::new();
    let alice = run.register('a');
    let bob = run.register('b');
    let order = run.order(alice, &["a.example.com"]);
    assert_eq!(
        run.acme(AcmeCommand::RespondChallenge {
            account: bob,
            order,
            authorization: 0,
        }),
        Err(AcmeError::NoOrder(order))
    );
    run.acme(AcmeCommand::UpdateAccount {
        account: alice,
        contact: None,
        deactivate: true,
    })
    .unwrap();
    assert_eq!(
        run.acme(AcmeCommand::RespondChallenge {
            account: alice,
            order,
            authorization: 0,
        }),
        Err(AcmeError::Deactivated(alice))
    );
}

#[test]
fn a_key_change_moves_the_account_to_the_new_key_and_refuses_a_key_in_use() {
    let mut run = Run::new();
    let alice = run.register('a');
    let bob = run.register('b');
    assert_eq!(
        run.acme(AcmeCommand::ChangeKey {
            account: alice,
            old_thumbprint: key('a').thumbprint,
            new_key: key('b'),
        }),
        Err(AcmeError::KeyInUse(bob))
    );
    run.acme(AcmeCommand::ChangeKey {
        account: alice,
        old_thumbprint: key('a').thumbprint,
        new_key: key('c'),
    })
    .unwrap();
    assert_eq!(
        run.state
            .acme()
            .account_by_thumbprint(&key('c').thumbprint)
            .map(|a| a.id),
        Some(alice)
    );
    assert!(
        run.state
            .acme()
            .account_by_thumbprint(&key('a').thumbprint)
            .is_none()
    );
    // A change signed against the old key after it changed is refused.
    assert!(
        run.acme(AcmeCommand::ChangeKey {
            account: alice,
            old_thumbprint: key('a').thumbprint,
            new_key: key('d'),
        })
        .is_err()
    );
}

#[test]
fn new_orders_are_rate_limited_per_account_per_window() {
    let mut run = Run::new();
    let account = run.register('a');
    for _ in 0..ACME_ORDERS_PER_WINDOW_MAX {
        run.order(account, &["a.example.com"]);
    }
    let refused = run.acme(AcmeCommand::NewOrder {
        account,
        identifiers: vec![DnsName::new("a.example.com").unwrap()],
        tokens: vec![ChallengeToken::new("late").unwrap()],
    });
    assert!(
        matches!(
            refused,
            Err(AcmeError::RateLimited {
                retry_at_ms: Some(_),
                ..
            })
        ),
        "{refused:?}"
    );
    // Another account is not limited by it.
    let other = run.register('b');
    run.order(other, &["a.example.com"]);
}

#[test]
fn an_order_expires_and_is_deleted_after_its_retention() {
    let mut run = Run::new();
    let account = run.register('a');
    let order = run.order(account, &["a.example.com"]);
    run.now_ms += ACME_ORDER_LIFETIME_MS;
    assert_eq!(run.status(order), OrderStatus::Invalid);
    assert!(
        run.acme(AcmeCommand::RespondChallenge {
            account,
            order,
            authorization: 0,
        })
        .is_err()
    );
    run.apply(Command::Tick);
    assert!(
        run.state.acme().order(order).is_some(),
        "kept until its retention"
    );
    run.now_ms += ACME_ORDER_RETENTION_MS;
    run.apply(Command::Tick);
    assert!(run.state.acme().order(order).is_none());
}

#[test]
fn a_killed_issuing_session_makes_its_order_invalid_with_the_reason() {
    let mut run = Run::new();
    let account = run.register('a');
    let order = run.order(account, &["a.example.com"]);
    run.validate(account, order, 0, true);
    run.acme(AcmeCommand::Finalize {
        account,
        order,
        csr: vec![1],
    })
    .unwrap();
    let session = run.state.acme().order(order).unwrap().session.unwrap();
    run.session(SessionCommand::Kill {
        session,
        reason: Reason::new("operator stop").unwrap(),
    });
    let stored = run.state.acme().order(order).unwrap();
    assert_eq!(stored.status(run.now_ms), OrderStatus::Invalid);
    assert!(
        stored
            .error
            .as_ref()
            .unwrap()
            .as_str()
            .contains("operator stop")
    );
}

#[test]
fn a_serial_is_revoked_once_with_a_valid_reason() {
    let mut run = Run::new();
    assert!(matches!(
        run.acme(AcmeCommand::Revoke {
            serial: "0a1b".to_owned(),
            reason: 7,
        }),
        Err(AcmeError::Malformed(_))
    ));
    assert!(matches!(
        run.acme(AcmeCommand::Revoke {
            serial: "0A1B".to_owned(),
            reason: 1,
        }),
        Err(AcmeError::Malformed(_))
    ));
    run.acme(AcmeCommand::Revoke {
        serial: "0a1b".to_owned(),
        reason: 1,
    })
    .unwrap();
    assert_eq!(
        run.acme(AcmeCommand::Revoke {
            serial: "0a1b".to_owned(),
            reason: 0,
        }),
        Err(AcmeError::AlreadyRevoked("0a1b".to_owned()))
    );
    assert_eq!(run.state.acme().revocation("0a1b").unwrap().reason, 1);
}

#[test]
fn the_acme_tables_survive_a_snapshot() {
    let mut run = Run::new();
    let account = run.register('a');
    let order = run.order(account, &["a.example.com", "b.example.com"]);
    run.validate(account, order, 0, true);
    run.acme(AcmeCommand::RespondChallenge {
        account,
        order,
        authorization: 1,
    })
    .unwrap();
    run.acme(AcmeCommand::Revoke {
        serial: "01".to_owned(),
        reason: 0,
    })
    .unwrap();
    let loaded = State::from_snapshot(&run.state.to_snapshot()).expect("loads");
    assert_eq!(loaded, run.state);
    assert_eq!(loaded.acme().validating(10), [(order, 1)]);
}
