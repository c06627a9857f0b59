//! Challenge-token behaviour through `apply` only.

use certus_core::limits::CHALLENGES_MAX;
use certus_core::{
    ChallengeCommand, ChallengeError, ChallengeReply, ChallengeToken, Command, KeyAuthorization,
    Response, Stamp, State, TextError, TextKind, apply,
};

const T0: u64 = 1_700_000_000_000;

struct Machine {
    state: State,
    index: u64,
    /// Check every invariant after each command (O(n); off for bulk loads).
    checking: bool,
}

impl Machine {
    fn new() -> Machine {
        Machine {
            state: State::new(),
            index: 0,
            checking: true,
        }
    }

    fn run(
        &mut self,
        command: ChallengeCommand,
        now_ms: u64,
    ) -> Result<ChallengeReply, ChallengeError> {
        self.index += 1;
        let response = apply(
            &mut self.state,
            Command::Challenge(command),
            Stamp::new(self.index, now_ms),
        );
        if self.checking {
            self.state.check_invariants().unwrap();
        }
        match response {
            Response::Challenge(result) => result,
            other => panic!("a challenge command answered {other:?}"),
        }
    }

    fn put(
        &mut self,
        token: &str,
        value: &str,
        now_ms: u64,
    ) -> Result<ChallengeReply, ChallengeError> {
        self.run(
            ChallengeCommand::Put {
                token: tok(token),
                key_authorization: KeyAuthorization::new(value).unwrap(),
            },
            now_ms,
        )
    }

    fn value(&self, token: &str) -> Option<&str> {
        self.state
            .challenge(&tok(token))
            .map(|c| c.key_authorization.as_str())
    }
}

fn tok(s: &str) -> ChallengeToken {
    ChallengeToken::new(s).unwrap()
}

#[test]
fn put_stores_and_replaces() {
    let mut m = Machine::new();
    assert_eq!(
        m.put(
            "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA",
            "evaGx.thumb1",
            T0
        ),
        Ok(ChallengeReply::Stored { replaced: false })
    );
    assert_eq!(
        m.value("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"),
        Some("evaGx.thumb1")
    );
    assert_eq!(
        m.put(
            "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA",
            "evaGx.thumb2",
            T0 + 5
        ),
        Ok(ChallengeReply::Stored { replaced: true })
    );
    let stored = m
        .state
        .challenge(&tok("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"))
        .unwrap();
    assert_eq!(
        (stored.key_authorization.as_str(), stored.stored_at_ms),
        ("evaGx.thumb2", T0 + 5)
    );
    assert_eq!(m.state.challenge_count(), 1);
}

#[test]
fn delete_is_idempotent_and_says_whether_the_token_existed() {
    let mut m = Machine::new();
    m.put("a", "a.k", T0).unwrap();
    assert_eq!(
        m.run(ChallengeCommand::Delete { token: tok("a") }, T0),
        Ok(ChallengeReply::Deleted { existed: true })
    );
    assert_eq!(m.value("a"), None);
    assert_eq!(
        m.run(ChallengeCommand::Delete { token: tok("a") }, T0),
        Ok(ChallengeReply::Deleted { existed: false })
    );
}

#[test]
fn delete_older_than_removes_strictly_older_tokens_by_the_machine_clock() {
    let mut m = Machine::new();
    m.put("old", "o.k", T0).unwrap();
    m.put("edge", "e.k", T0 + 1_000).unwrap();
    m.put("new", "n.k", T0 + 2_000).unwrap();
    // A renewed put makes a token young again.
    m.put("old", "o.k", T0 + 1_500).unwrap();
    let purge =
        |m: &mut Machine, now| m.run(ChallengeCommand::DeleteOlderThan { age_ms: 1_000 }, now);
    assert_eq!(
        purge(&mut m, T0 + 2_000),
        Ok(ChallengeReply::Purged { removed: 0 })
    );
    assert_eq!(
        purge(&mut m, T0 + 2_001),
        Ok(ChallengeReply::Purged { removed: 1 })
    );
    assert_eq!(m.value("edge"), None);
    assert!(m.value("old").is_some() && m.value("new").is_some());
    // An age beyond the clock removes nothing.
    assert_eq!(
        m.run(ChallengeCommand::DeleteOlderThan { age_ms: u64::MAX }, T0),
        Ok(ChallengeReply::Purged { removed: 0 })
    );
    assert_eq!(
        m.run(ChallengeCommand::DeleteOlderThan { age_ms: 0 }, T0 + 3_000),
        Ok(ChallengeReply::Purged { removed: 2 })
    );
    assert_eq!(m.state.challenge_count(), 0);
}

#[test]
fn list_pages_in_token_order() {
    let mut m = Machine::new();
    for t in ["c", "a", "b"] {
        m.put(t, "v", T0).unwrap();
    }
    let page: Vec<_> = m
        .state
        .challenges(Some(&tok("a")), 1)
        .iter()
        .map(|c| c.token.to_string())
        .collect();
    assert_eq!(page, ["b"]);
}

#[test]
fn tokens_and_values_are_validated() {
    assert_eq!(
        ChallengeToken::new(""),
        Err(TextError::Empty {
            kind: TextKind::ChallengeToken
        })
    );
    assert!(matches!(
        ChallengeToken::new("a/b"),
        Err(TextError::BadCharacter {
            found: '/',
            at: 1,
            ..
        })
    ));
    assert!(
        ChallengeToken::new("a=").is_err(),
        "no padding in base64url tokens"
    );
    assert!(ChallengeToken::new("x".repeat(257)).is_err());
    assert!(KeyAuthorization::new("tok.thumb print").is_err());
    assert!(KeyAuthorization::new("x".repeat(1025)).is_err());
    assert!(KeyAuthorization::new("x".repeat(1024)).is_ok());
}

#[test]
fn the_challenge_table_is_bounded() {
    let mut m = Machine::new();
    m.checking = false;
    for i in 0..CHALLENGES_MAX {
        m.put(&format!("t{i}"), "v", T0).unwrap();
    }
    m.checking = true;
    assert_eq!(
        m.put("one-more", "v", T0),
        Err(ChallengeError::TooManyChallenges {
            max: CHALLENGES_MAX
        })
    );
    assert_eq!(m.value("one-more"), None);
    // Replacing needs no room.
    assert_eq!(
        m.put("t0", "w", T0),
        Ok(ChallengeReply::Stored { replaced: true })
    );
}
