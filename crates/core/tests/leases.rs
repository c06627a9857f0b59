//! Lease behaviour, one path at a time, through `apply` only.

use certus_core::limits::{LEASE_TTL_MS_MAX, LEASE_TTL_MS_MIN, LEASES_MAX};
use certus_core::{
    Acquisition, Command, FencingToken, HolderId, Lease, LeaseCommand, LeaseError, LeaseName,
    LeaseReply, Response, Stamp, State, TextError, TextKind, Ttl, apply,
};

const T0: u64 = 1_700_000_000_000;

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).unwrap()
}
fn holder(s: &str) -> HolderId {
    HolderId::new(s).unwrap()
}
fn ttl(ms: u64) -> Ttl {
    Ttl::from_ms(ms).unwrap()
}

/// Drives one state through `apply` with increasing indexes.
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

    fn run(&mut self, command: LeaseCommand, now_ms: u64) -> Result<LeaseReply, LeaseError> {
        self.index += 1;
        let response = apply(
            &mut self.state,
            Command::Lease(command),
            Stamp::new(self.index, now_ms),
        );
        if self.checking {
            self.state.check_invariants().unwrap();
        }
        match response {
            Response::Lease(result) => result,
            other => panic!("a lease command answered {other:?}"),
        }
    }

    fn acquire(
        &mut self,
        n: &str,
        h: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<LeaseReply, LeaseError> {
        self.run(
            LeaseCommand::Acquire {
                name: name(n),
                holder: holder(h),
                ttl: ttl(ttl_ms),
            },
            now_ms,
        )
    }

    fn renew(
        &mut self,
        n: &str,
        h: &str,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<LeaseReply, LeaseError> {
        self.run(
            LeaseCommand::Renew {
                name: name(n),
                holder: holder(h),
                ttl: ttl(ttl_ms),
            },
            now_ms,
        )
    }

    fn release(&mut self, n: &str, h: &str, now_ms: u64) -> Result<LeaseReply, LeaseError> {
        self.run(
            LeaseCommand::Release {
                name: name(n),
                holder: holder(h),
            },
            now_ms,
        )
    }

    fn tick(&mut self, now_ms: u64) -> Vec<Lease> {
        self.index += 1;
        match apply(
            &mut self.state,
            Command::Tick,
            Stamp::new(self.index, now_ms),
        ) {
            Response::Tick(reply) => reply.expired_leases,
            other => panic!("a tick answered {other:?}"),
        }
    }
}

fn acquired(reply: Result<LeaseReply, LeaseError>) -> (Lease, Acquisition) {
    match reply {
        Ok(LeaseReply::Acquired { lease, how }) => (lease, how),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn acquire_creates_a_missing_lease_with_the_log_index_as_token() {
    let mut m = Machine::new();
    m.index = 41;
    let (lease, how) = acquired(m.acquire("renewal", "pod-a", 10_000, T0));
    assert_eq!(how, Acquisition::Created);
    assert_eq!(lease.token, FencingToken(42));
    assert_eq!(lease.holder, holder("pod-a"));
    assert_eq!(
        (lease.granted_at_ms, lease.expires_at_ms),
        (T0, T0 + 10_000)
    );
    assert_eq!(m.state.lease(&name("renewal"), T0), Some(&lease));
    assert_eq!(m.state.last_fencing_token(), FencingToken(42));
}

#[test]
fn acquire_by_another_holder_of_a_live_lease_is_refused_and_changes_nothing() {
    let mut m = Machine::new();
    let (lease, _) = acquired(m.acquire("l", "a", 10_000, T0));
    let refused = m.acquire("l", "b", 10_000, T0 + 9_999);
    assert_eq!(
        refused,
        Err(LeaseError::NotHolder {
            holder: holder("a"),
            expires_at_ms: T0 + 10_000
        })
    );
    assert_eq!(m.state.lease(&name("l"), T0 + 9_999), Some(&lease));
    assert_eq!(m.state.last_fencing_token(), lease.token);
}

#[test]
fn acquire_by_the_holder_renews_and_keeps_the_token() {
    let mut m = Machine::new();
    let (first, _) = acquired(m.acquire("l", "a", 10_000, T0));
    let (again, how) = acquired(m.acquire("l", "a", 20_000, T0 + 5_000));
    assert_eq!(how, Acquisition::Renewed);
    assert_eq!(again.token, first.token);
    assert_eq!(again.granted_at_ms, T0);
    assert_eq!(again.expires_at_ms, T0 + 25_000);
}

#[test]
fn an_expired_lease_is_taken_over_with_a_larger_token() {
    let mut m = Machine::new();
    let (first, _) = acquired(m.acquire("l", "a", 10_000, T0));
    // Expiry is exact: at expires_at_ms the lease is no longer held.
    let (second, how) = acquired(m.acquire("l", "b", 1_000, T0 + 10_000));
    assert_eq!(
        how,
        Acquisition::TookOverExpired {
            previous_holder: holder("a")
        }
    );
    assert!(second.token > first.token);
    // The old holder coming back gets a grant of its own, with yet another token.
    let (third, how) = acquired(m.acquire("l", "a", 1_000, T0 + 11_000));
    assert_eq!(
        how,
        Acquisition::TookOverExpired {
            previous_holder: holder("b")
        }
    );
    assert!(third.token > second.token);
}

#[test]
fn renew_extends_only_a_live_lease_of_its_holder() {
    let mut m = Machine::new();
    assert_eq!(m.renew("l", "a", 1_000, T0), Err(LeaseError::Unknown));
    let (lease, _) = acquired(m.acquire("l", "a", 1_000, T0));
    assert_eq!(
        m.renew("l", "b", 1_000, T0 + 10),
        Err(LeaseError::NotHolder {
            holder: holder("a"),
            expires_at_ms: T0 + 1_000
        })
    );
    let renewed = match m.renew("l", "a", 5_000, T0 + 900) {
        Ok(LeaseReply::Renewed { lease }) => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (renewed.token, renewed.expires_at_ms),
        (lease.token, T0 + 5_900)
    );
    assert_eq!(
        m.renew("l", "a", 5_000, T0 + 5_900),
        Err(LeaseError::Expired {
            expired_at_ms: T0 + 5_900
        })
    );
    // Someone else asking about an expired lease learns there is nothing to hold.
    assert_eq!(
        m.renew("l", "b", 5_000, T0 + 6_000),
        Err(LeaseError::Unknown)
    );
}

#[test]
fn release_is_allowed_only_to_the_holder_of_a_live_lease() {
    let mut m = Machine::new();
    let (lease, _) = acquired(m.acquire("l", "a", 1_000, T0));
    assert!(matches!(
        m.release("l", "b", T0 + 1),
        Err(LeaseError::NotHolder { .. })
    ));
    assert_eq!(m.state.lease(&name("l"), T0 + 1), Some(&lease));
    assert_eq!(
        m.release("l", "a", T0 + 2),
        Ok(LeaseReply::Released { lease })
    );
    assert_eq!(m.state.lease(&name("l"), T0 + 2), None);
    assert_eq!(m.release("l", "a", T0 + 3), Err(LeaseError::Unknown));
    // A released lease is free at once for anyone.
    let (_, how) = acquired(m.acquire("l", "b", 1_000, T0 + 4));
    assert_eq!(how, Acquisition::Created);
    let (_, _) = acquired(m.acquire("x", "a", 1_000, T0 + 5));
    assert_eq!(
        m.release("x", "a", T0 + 1_005),
        Err(LeaseError::Expired {
            expired_at_ms: T0 + 1_005
        })
    );
}

#[test]
fn check_fence_accepts_only_the_live_grant() {
    let mut m = Machine::new();
    let (first, _) = acquired(m.acquire("l", "a", 1_000, T0));
    assert_eq!(
        m.state.check_fence(&name("l"), first.token, T0 + 999),
        Ok(())
    );
    let expired = m.state.check_fence(&name("l"), first.token, T0 + 1_000);
    assert_eq!(
        expired,
        Err(LeaseError::FenceRejected {
            presented: first.token,
            current: None
        })
    );
    let (second, _) = acquired(m.acquire("l", "b", 1_000, T0 + 1_500));
    assert_eq!(
        m.state.check_fence(&name("l"), first.token, T0 + 1_500),
        Err(LeaseError::FenceRejected {
            presented: first.token,
            current: Some(second.token)
        })
    );
    // A token from the future is as bad as one from the past.
    let forged = FencingToken(second.token.0 + 1);
    assert!(m.state.check_fence(&name("l"), forged, T0 + 1_500).is_err());
    // A reader whose clock lags the machine's does not see an expired grant as live.
    assert!(m.state.check_fence(&name("l"), second.token, 0).is_ok());
    m.tick(T0 + 2_500);
    assert!(m.state.check_fence(&name("l"), second.token, 0).is_err());
}

#[test]
fn a_clock_that_goes_backwards_neither_shortens_nor_stretches_a_lease() {
    let mut m = Machine::new();
    let (lease, _) = acquired(m.acquire("l", "a", 1_000, T0 + 10_000));
    // The next leader's clock is ten seconds behind: the machine clock holds.
    assert!(matches!(
        m.acquire("l", "b", 1_000, T0),
        Err(LeaseError::NotHolder { .. })
    ));
    assert_eq!(m.state.clock_ms(), T0 + 10_000);
    // Time on the slow clock must pass the machine clock before expiry counts.
    assert!(matches!(
        m.acquire("l", "b", 1_000, T0 + 10_999),
        Err(LeaseError::NotHolder { .. })
    ));
    let (taken, _) = acquired(m.acquire("l", "b", 1_000, T0 + 11_000));
    assert!(taken.token > lease.token);
}

#[test]
fn grants_sharing_one_log_entry_get_distinct_increasing_tokens() {
    let mut state = State::new();
    let mut tokens = Vec::new();
    for (n, h) in [("l", "a"), ("m", "a"), ("n", "b")] {
        let command = LeaseCommand::Acquire {
            name: name(n),
            holder: holder(h),
            ttl: ttl(1_000),
        };
        match apply(&mut state, Command::Lease(command), Stamp::new(7, T0)) {
            Response::Lease(Ok(LeaseReply::Acquired { lease, .. })) => tokens.push(lease.token.0),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(tokens, [7, 8, 9]);
    // The next entry's index is below the last token: tokens keep growing regardless.
    let command = LeaseCommand::Acquire {
        name: name("o"),
        holder: holder("c"),
        ttl: ttl(1_000),
    };
    let response = apply(&mut state, Command::Lease(command), Stamp::new(8, T0));
    assert!(
        matches!(response, Response::Lease(Ok(LeaseReply::Acquired { lease, .. })) if lease.token.0 == 10)
    );
    state.check_invariants().unwrap();
}

#[test]
fn tick_reclaims_exactly_the_expired_leases() {
    let mut m = Machine::new();
    acquired(m.acquire("short", "a", 1_000, T0));
    acquired(m.acquire("long", "a", 5_000, T0));
    assert_eq!(m.tick(T0 + 999), []);
    let expired = m.tick(T0 + 1_000);
    assert_eq!(
        expired.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["short"]
    );
    assert_eq!(m.state.lease_count(), 1);
    assert_eq!(m.state.leases(None, 10, T0 + 1_000).len(), 1);
}

#[test]
fn list_pages_through_live_leases_in_name_order() {
    let mut m = Machine::new();
    for n in ["d", "a", "c", "b"] {
        acquired(m.acquire(n, "h", 1_000, T0));
    }
    acquired(m.acquire("e", "h", 5_000, T0));
    let names = |v: Vec<&Lease>| {
        v.into_iter()
            .map(|l| l.name.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(m.state.leases(None, 2, T0)), ["a", "b"]);
    assert_eq!(
        names(m.state.leases(Some(&name("b")), 10, T0)),
        ["c", "d", "e"]
    );
    assert_eq!(names(m.state.leases(None, 10, T0 + 1_000)), ["e"]);
}

#[test]
fn invalid_input_is_refused_with_a_reason() {
    assert_eq!(
        LeaseName::new(""),
        Err(TextError::Empty {
            kind: TextKind::LeaseName
        })
    );
    let long = "x".repeat(257);
    assert!(matches!(
        LeaseName::new(long),
        Err(TextError::TooLong {
            len_bytes: 257,
            max_bytes: 256,
            ..
        })
    ));
    let err = LeaseName::new("bad name").unwrap_err();
    assert!(matches!(
        err,
        TextError::BadCharacter {
            at: 3,
            found: ' ',
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "lease name has ' ' at byte 3; allowed are ASCII letters, digits and . _ - : / @"
    );
    assert!(HolderId::new("pod\n").is_err());
    assert!(HolderId::new("pod-é").is_err());
    assert!(LeaseName::new("certs/renewal:eu-1@x.y_z").is_ok());
    assert!(Ttl::from_ms(LEASE_TTL_MS_MIN).is_ok() && Ttl::from_ms(LEASE_TTL_MS_MAX).is_ok());
    assert_eq!(
        Ttl::from_ms(LEASE_TTL_MS_MIN - 1),
        Err(LeaseError::InvalidTtl {
            ttl_ms: LEASE_TTL_MS_MIN - 1,
            min_ms: LEASE_TTL_MS_MIN,
            max_ms: LEASE_TTL_MS_MAX
        })
    );
    assert!(Ttl::from_ms(LEASE_TTL_MS_MAX + 1).is_err());
    assert!(
        Ttl::from_ms(0)
            .unwrap_err()
            .to_string()
            .contains("outside the allowed range")
    );
}

#[test]
fn decoding_revalidates_what_the_constructors_check() {
    // A log entry or snapshot cannot smuggle in what a constructor would refuse.
    let bytes = postcard_string("has space");
    assert!(postcard_decode::<LeaseName>(&bytes).is_err());
    assert!(postcard_decode::<LeaseName>(&postcard_string("ok")).is_ok());
}

#[test]
fn the_lease_table_is_bounded() {
    let mut m = Machine::new();
    m.checking = false;
    for i in 0..LEASES_MAX {
        acquired(m.acquire(&format!("l{i}"), "h", 60_000, T0));
    }
    m.checking = true;
    assert_eq!(
        m.acquire("one-more", "h", 60_000, T0),
        Err(LeaseError::TooManyLeases { max: LEASES_MAX })
    );
    // Taking over an expired lease needs no room.
    acquired(m.acquire("l0", "other", 60_000, T0 + 60_000));
    // Once leases have expired, a new name takes the place of the one that expired first,
    // without waiting for a tick.
    acquired(m.acquire("one-more", "h", 60_000, T0 + 60_000));
    assert_eq!(m.state.lease_count(), LEASES_MAX);
    assert!(m.state.lease(&LeaseName::new("l1").unwrap(), T0).is_none());
    // While every lease is live, the table stays closed.
    let later = T0 + 60_000;
    m.checking = false;
    for i in 2..LEASES_MAX {
        acquired(m.acquire(&format!("l{i}"), "h", 60_000, later));
    }
    m.checking = true;
    assert_eq!(
        m.acquire("another", "h", 60_000, later),
        Err(LeaseError::TooManyLeases { max: LEASES_MAX })
    );
}

#[test]
fn a_log_index_that_goes_backwards_stops_the_machine() {
    let mut state = State::new();
    apply(&mut state, Command::Tick, Stamp::new(5, T0));
    let backwards = std::panic::catch_unwind(move || {
        apply(&mut state, Command::Tick, Stamp::new(4, T0));
    });
    assert!(backwards.is_err());
}

fn postcard_string(s: &str) -> Vec<u8> {
    postcard::to_allocvec(s).unwrap()
}

fn postcard_decode<T: for<'de> serde::Deserialize<'de>>(
    bytes: &[u8],
) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

#[test]
fn fence_refusals_read_as_sentences() {
    let held = LeaseError::FenceRejected {
        presented: FencingToken(1),
        current: Some(FencingToken(5)),
    };
    assert_eq!(
        held.to_string(),
        "fencing token 1 rejected; the live grant's token is 5"
    );
    let free = LeaseError::FenceRejected {
        presented: FencingToken(1),
        current: None,
    };
    assert_eq!(
        free.to_string(),
        "fencing token 1 rejected; the lease is not held"
    );
}
