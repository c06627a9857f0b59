//! Client sessions (exactly-once writes, the Raft dissertation §6.3), through `apply` only: a
//! numbered request applies at most once, a duplicate is answered from the session's record
//! without applying again, and a request the client moved past never applies.

use std::collections::BTreeMap;

use certus_core::limits::{
    CLIENT_OUTSTANDING_MAX, CLIENT_SESSION_EVICTABLE_IDLE_MS, CLIENT_SESSION_IDLE_MS,
    CLIENT_SESSIONS_MAX, TICK_EXPIRED_CLIENTS_MAX,
};
use certus_core::{
    Acquisition, ClientCommand, ClientError, ClientId, ClientReply, ClientRequest, Command,
    FencingToken, HolderId, Lease, LeaseCommand, LeaseError, LeaseName, LeaseReply, Response,
    Stamp, State, TickReply, Ttl, apply,
};
use proptest::prelude::*;
use proptest::sample::Index;

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

fn acquire(n: &str, h: &str, ttl_ms: u64) -> Command {
    Command::Lease(LeaseCommand::Acquire {
        name: name(n),
        holder: holder(h),
        ttl: ttl(ttl_ms),
    })
}

fn request(client: u64, sequence: u64, first_outstanding: u64) -> ClientRequest {
    ClientRequest {
        client: ClientId(client),
        sequence,
        first_outstanding,
    }
}

fn once(request: ClientRequest, command: Command) -> Command {
    Command::Once {
        request,
        command: Box::new(command),
    }
}

/// A command that changes nothing but the clock and the applied index: releasing a lease that
/// was never granted. Applied to a clone at the same stamp, it gives the state a command that
/// "changed nothing" must leave.
fn no_op() -> Command {
    Command::Lease(LeaseCommand::Release {
        name: name("never-granted"),
        holder: holder("nobody"),
    })
}

/// Drives one state through `apply` with increasing indexes.
struct Machine {
    state: State,
    index: u64,
    /// Check every invariant after each command (O(n); off for bulk registrations).
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

    fn run(&mut self, command: Command, now_ms: u64) -> Response {
        self.index += 1;
        let response = apply(&mut self.state, command, Stamp::new(self.index, now_ms));
        if self.checking {
            self.state.check_invariants().unwrap();
        }
        response
    }

    /// Runs `command`, and the no-op on a clone at the same stamp; asserts both leave the same
    /// snapshot bytes, i.e. `command` changed nothing but the clock and the applied index.
    fn run_changing_nothing(&mut self, command: Command, now_ms: u64) -> Response {
        self.index += 1;
        let stamp = Stamp::new(self.index, now_ms);
        let mut twin = self.state.clone();
        let described = format!("{command:?}");
        let response = apply(&mut self.state, command, stamp);
        assert_eq!(
            apply(&mut twin, no_op(), stamp),
            Response::Lease(Err(LeaseError::Unknown))
        );
        assert!(
            self.state.to_snapshot() == twin.to_snapshot(),
            "{described} answered {response:?} and changed the state"
        );
        self.state.check_invariants().unwrap();
        response
    }

    fn client(&mut self, command: ClientCommand, now_ms: u64) -> Result<ClientReply, ClientError> {
        match self.run(Command::Client(command), now_ms) {
            Response::Client(result) => result,
            other => panic!("a client command answered {other:?}"),
        }
    }

    fn register(&mut self, client: u64, now_ms: u64) -> Result<ClientReply, ClientError> {
        self.client(
            ClientCommand::Register {
                client: ClientId(client),
            },
            now_ms,
        )
    }

    fn close(&mut self, client: u64, now_ms: u64) -> Result<ClientReply, ClientError> {
        self.client(
            ClientCommand::Close {
                client: ClientId(client),
            },
            now_ms,
        )
    }

    fn tick(&mut self, now_ms: u64) -> TickReply {
        match self.run(Command::Tick, now_ms) {
            Response::Tick(reply) => *reply,
            other => panic!("a tick answered {other:?}"),
        }
    }

    /// The live lease `n` at the machine clock.
    fn lease(&self, n: &str) -> Option<Lease> {
        self.state.lease(&name(n), self.state.clock_ms()).cloned()
    }

    /// The sequence numbers whose answers the live session `client` remembers.
    fn answered(&self, client: u64) -> Vec<u64> {
        let session = self
            .state
            .client_session(ClientId(client), self.state.clock_ms())
            .expect("a live session");
        session.answered.keys().copied().collect()
    }

    fn first_outstanding(&self, client: u64) -> u64 {
        self.state
            .client_session(ClientId(client), self.state.clock_ms())
            .expect("a live session")
            .first_outstanding
    }
}

fn registered(client: u64) -> Result<ClientReply, ClientError> {
    Ok(ClientReply::Registered {
        client: ClientId(client),
        idle_ms: CLIENT_SESSION_IDLE_MS,
        outstanding_max: CLIENT_OUTSTANDING_MAX,
    })
}

fn refusal(response: Response) -> ClientError {
    match response {
        Response::Client(Err(error)) => error,
        other => panic!("expected a client-session refusal, got {other:?}"),
    }
}

fn granted(response: &Response) -> (Lease, Acquisition) {
    match response {
        Response::Lease(Ok(LeaseReply::Acquired { lease, how })) => (lease.clone(), how.clone()),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn registration_opens_an_empty_session_and_reports_the_limits() {
    let mut m = Machine::new();
    assert_eq!(m.register(7, T0), registered(7));
    let session = m.state.client_session(ClientId(7), T0).unwrap();
    assert_eq!(
        (
            session.client,
            session.registered_at_ms,
            session.last_active_ms,
            session.first_outstanding,
        ),
        (ClientId(7), T0, T0, 1)
    );
    assert!(session.answered.is_empty());
    assert_eq!(m.state.client_session_count(), 1);
}

#[test]
fn a_wrapped_acquire_applies_once_and_a_duplicate_gets_the_same_answer() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    let first = m.run(once(request(7, 1, 1), acquire("l", "a", 10_000)), T0 + 10);
    let (lease, how) = granted(&first);
    assert_eq!(how, Acquisition::Created);
    assert_eq!(lease.token, FencingToken(2));
    assert_eq!(lease.expires_at_ms, T0 + 10 + 10_000);
    assert_eq!(m.answered(7), vec![1]);

    // A retry at the same machine time: the same answer, and the state is as if nothing came.
    let again = m.run_changing_nothing(once(request(7, 1, 1), acquire("l", "a", 10_000)), T0 + 10);
    assert_eq!(again, first);

    // A duplicate delivered later: applied again it would renew the lease to `T0 + 15_000`.
    let late = m.run(
        once(request(7, 1, 1), acquire("l", "a", 10_000)),
        T0 + 5_000,
    );
    assert_eq!(late, first);
    assert_eq!(m.lease("l"), Some(lease.clone()));
    assert_eq!(m.state.last_fencing_token(), lease.token);
    // The duplicate counts as activity, and the answer is still remembered.
    let session = m.state.client_session(ClientId(7), T0 + 5_000).unwrap();
    assert_eq!(session.last_active_ms, T0 + 5_000);
    assert_eq!(session.answered.get(&1), Some(&first));

    // The client's next request is fresh, and is applied.
    let next = m.run(
        once(request(7, 2, 2), acquire("l", "a", 20_000)),
        T0 + 6_000,
    );
    let (renewed, how) = granted(&next);
    assert_eq!(how, Acquisition::Renewed);
    assert_eq!(renewed.expires_at_ms, T0 + 26_000);
    assert_eq!(m.answered(7), vec![2]);
}

#[test]
fn a_duplicate_in_the_same_log_entry_is_answered_not_applied() {
    // Group commit: both deliveries share one entry (same stamp index).
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    m.index = 9;
    let stamp = Stamp::new(10, T0 + 1);
    let command = once(request(7, 1, 1), acquire("l", "a", 1_000));
    let first = apply(&mut m.state, command.clone(), stamp);
    let token = m.state.last_fencing_token();
    assert_eq!(granted(&first).0.token, FencingToken(10));
    let second = apply(&mut m.state, command, stamp);
    assert_eq!(second, first);
    assert_eq!(m.state.last_fencing_token(), token);
    m.state.check_invariants().unwrap();
}

#[test]
fn a_refusal_by_the_wrapped_command_is_remembered_like_any_answer() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    m.run(acquire("l", "b", 1_000), T0);
    let first = m.run(once(request(7, 1, 1), acquire("l", "a", 5_000)), T0 + 1);
    assert!(matches!(
        first,
        Response::Lease(Err(LeaseError::NotHolder { .. }))
    ));
    // b's lease has run out: re-executing the acquire would now grant it to a. A retry must
    // get the recorded refusal instead.
    let retry = m.run(once(request(7, 1, 1), acquire("l", "a", 5_000)), T0 + 2_000);
    assert_eq!(retry, first);
    assert_eq!(m.lease("l"), None);
    // A new request (a new sequence number) is how the client tries again.
    let (lease, how) =
        granted(&m.run(once(request(7, 2, 2), acquire("l", "a", 5_000)), T0 + 2_000));
    assert_eq!(
        how,
        Acquisition::TookOverExpired {
            previous_holder: holder("b")
        }
    );
    assert_eq!(lease.holder, holder("a"));
}

#[test]
fn a_request_lost_in_flight_is_superseded_when_it_arrives_after_the_client_moved_past_it() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    // Sequence 1 (a short grant) is lost in flight; the client gives up on it and sends
    // sequence 2 (a longer grant), acknowledging everything below 2.
    let lost = once(request(7, 1, 1), acquire("l", "a", 558));
    let second = m.run(once(request(7, 2, 2), acquire("l", "a", 1_985)), T0 + 100);
    let (lease, how) = granted(&second);
    assert_eq!(how, Acquisition::Created);
    assert_eq!(lease.expires_at_ms, T0 + 100 + 1_985);

    // Sequence 1 arrives late. Applied, it would renew the lease to `T0 + 200 + 558`, cutting
    // short what sequence 2 achieved.
    let late = m.run_changing_nothing(lost.clone(), T0 + 200);
    assert_eq!(
        refusal(late),
        ClientError::Superseded {
            sequence: 1,
            first_outstanding: 2,
        }
    );
    assert_eq!(m.lease("l"), Some(lease.clone()));
    assert_eq!(m.state.last_fencing_token(), lease.token);

    // Again later: still refused; sequence 2's answer is still there for a retry of it.
    assert_eq!(
        refusal(m.run_changing_nothing(lost, T0 + 300)),
        ClientError::Superseded {
            sequence: 1,
            first_outstanding: 2,
        }
    );
    assert_eq!(
        m.run(once(request(7, 2, 2), acquire("l", "a", 1_985)), T0 + 300),
        second
    );
    assert_eq!(m.lease("l").unwrap().expires_at_ms, T0 + 2_085);
}

#[test]
fn a_late_request_the_client_still_waits_for_is_applied_once() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    // Sequence 2 goes first but does not acknowledge 1: the client still waits for it.
    m.run(once(request(7, 2, 1), acquire("l", "a", 1_985)), T0 + 100);
    let first = m.run(once(request(7, 1, 1), acquire("l", "a", 558)), T0 + 200);
    let (lease, how) = granted(&first);
    assert_eq!(how, Acquisition::Renewed);
    assert_eq!(lease.expires_at_ms, T0 + 200 + 558);
    assert_eq!(m.answered(7), vec![1, 2]);
    // Its duplicate is answered, not applied (it would move the expiry to T0 + 300 + 558).
    assert_eq!(
        m.run(once(request(7, 1, 1), acquire("l", "a", 558)), T0 + 300),
        first
    );
    assert_eq!(m.lease("l"), Some(lease));
}

#[test]
fn acknowledged_answers_are_forgotten_and_their_duplicates_superseded() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    let answers: Vec<Response> = (1..=3)
        .map(|sequence| {
            m.run(
                once(
                    request(7, sequence, 1),
                    acquire(&format!("l{sequence}"), "a", 10_000),
                ),
                T0 + sequence,
            )
        })
        .collect();
    assert_eq!(m.answered(7), vec![1, 2, 3]);
    m.run(once(request(7, 4, 3), acquire("l4", "a", 10_000)), T0 + 4);
    assert_eq!(m.answered(7), vec![3, 4]);
    assert_eq!(m.first_outstanding(7), 3);
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(7, 2, 1), acquire("l2", "a", 10_000)), T0 + 4)),
        ClientError::Superseded {
            sequence: 2,
            first_outstanding: 3,
        }
    );
    // A duplicate carrying an older acknowledgement does not take the session's back.
    assert_eq!(
        m.run(once(request(7, 3, 1), acquire("l3", "a", 10_000)), T0 + 5),
        answers[2]
    );
    assert_eq!(m.first_outstanding(7), 3);
    assert_eq!(m.answered(7), vec![3, 4]);
}

#[test]
fn a_request_from_an_unknown_client_is_refused_and_applies_nothing() {
    let mut m = Machine::new();
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(99, 1, 1), acquire("l", "a", 1_000)), T0)),
        ClientError::UnknownClient {
            client: ClientId(99)
        }
    );
    m.register(7, T0).unwrap();
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(8, 1, 1), acquire("l", "a", 1_000)), T0)),
        ClientError::UnknownClient {
            client: ClientId(8)
        }
    );
    assert_eq!(m.lease("l"), None);
    assert_eq!(m.state.last_fencing_token(), FencingToken(0));
}

#[test]
fn an_idle_session_is_refused_at_once_and_reclaimed_by_a_tick() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    // Still live one millisecond before its time; the request renews its activity.
    let last = T0 + CLIENT_SESSION_IDLE_MS - 1;
    granted(&m.run(once(request(7, 1, 1), acquire("l", "a", 1_000)), last));
    assert_eq!(
        m.state
            .client_session(ClientId(7), last)
            .unwrap()
            .last_active_ms,
        last
    );

    let due = last + CLIENT_SESSION_IDLE_MS;
    let early = m.tick(due - 1);
    assert_eq!((early.expired_clients, early.more_clients), (0, false));
    assert!(m.state.client_session(ClientId(7), due - 1).is_some());
    // A reader whose clock is past the deadline already sees the session gone.
    assert!(m.state.client_session(ClientId(7), due).is_none());

    // At its time the session is gone: a duplicate is not answered, a new request not applied.
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(7, 1, 1), acquire("l", "a", 1_000)), due)),
        ClientError::UnknownClient {
            client: ClientId(7)
        }
    );
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(7, 2, 2), acquire("m", "a", 1_000)), due)),
        ClientError::UnknownClient {
            client: ClientId(7)
        }
    );
    assert_eq!(m.lease("m"), None);
    // Gone, but its memory is held until a tick.
    assert_eq!(m.state.client_session_count(), 1);
    let reply = m.tick(due);
    assert_eq!((reply.expired_clients, reply.more_clients), (1, false));
    assert_eq!(m.state.client_session_count(), 0);
    assert_eq!(m.register(7, due + 1), registered(7));
}

#[test]
fn one_tick_reclaims_at_most_its_bound_of_idle_sessions() {
    let mut m = Machine::new();
    m.checking = false;
    let count = TICK_EXPIRED_CLIENTS_MAX as u64 + 5;
    for client in 1..=count {
        m.register(client, T0 + client).unwrap();
    }
    m.checking = true;
    let now = T0 + count + CLIENT_SESSION_IDLE_MS;
    let first = m.tick(now);
    assert_eq!(
        (first.expired_clients, first.more_clients, first.more()),
        (TICK_EXPIRED_CLIENTS_MAX, true, true)
    );
    assert_eq!(m.state.client_session_count(), 5);
    // The oldest went first: the last one removed is free again, the first one left is still
    // stored (gone, but its id is taken until a tick reclaims it).
    let last_removed = TICK_EXPIRED_CLIENTS_MAX as u64;
    assert_eq!(m.register(last_removed, now), registered(last_removed));
    assert_eq!(
        m.register(last_removed + 1, now),
        Err(ClientError::ClientIdTaken {
            client: ClientId(last_removed + 1)
        })
    );
    let second = m.tick(now);
    assert_eq!((second.expired_clients, second.more_clients), (5, false));
    assert_eq!(m.state.client_session_count(), 1);
    assert!(
        m.state
            .client_session(ClientId(last_removed), now)
            .is_some()
    );
}

#[test]
fn a_request_too_far_ahead_of_the_first_outstanding_one_is_refused() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    let max = CLIENT_OUTSTANDING_MAX;
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(7, max + 1, 1), acquire("l", "a", 1_000)), T0)),
        ClientError::TooManyOutstanding {
            sequence: max + 1,
            first_outstanding: 1,
            max,
        }
    );
    // A refused request's acknowledgement is not taken either.
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(7, 1_100, 900), acquire("l", "a", 1_000)), T0)),
        ClientError::TooManyOutstanding {
            sequence: 1_100,
            first_outstanding: 900,
            max,
        }
    );
    assert_eq!(m.first_outstanding(7), 1);
    assert_eq!(m.lease("l"), None);
    // The last number inside the window applies; one past it does once 1 is acknowledged.
    granted(&m.run(once(request(7, max, 1), acquire("l", "a", 1_000)), T0));
    granted(&m.run(once(request(7, max + 1, 2), acquire("l", "a", 1_000)), T0));
    assert_eq!(m.answered(7), vec![max, max + 1]);
}

#[test]
fn malformed_requests_are_invalid_and_change_nothing() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    granted(&m.run(once(request(7, 1, 1), acquire("l", "a", 1_000)), T0));
    let lease = acquire("m", "a", 1_000);
    let malformed = [
        (request(0, 2, 1), lease.clone()),
        (request(7, 0, 0), lease.clone()),
        (request(7, 2, 0), lease.clone()),
        (request(7, 2, 3), lease.clone()),
        (request(7, 2, 1), Command::Tick),
        (
            request(7, 2, 1),
            Command::Client(ClientCommand::Register {
                client: ClientId(8),
            }),
        ),
        (
            request(7, 2, 1),
            Command::Client(ClientCommand::Close {
                client: ClientId(7),
            }),
        ),
        (request(7, 2, 1), once(request(7, 3, 1), lease.clone())),
        // Not even a duplicate of an answered request gets through wrapped twice.
        (
            request(7, 1, 1),
            once(request(7, 1, 1), acquire("l", "a", 1_000)),
        ),
    ];
    for (bad, command) in malformed {
        let response = m.run_changing_nothing(once(bad, command), T0 + 1);
        assert!(
            matches!(refusal(response), ClientError::InvalidRequest(_)),
            "{bad:?} was not refused as invalid"
        );
    }
    assert_eq!(m.lease("m"), None);
    assert_eq!(m.state.client_session_count(), 1);
    // Sequence 2 was never used up: it still applies.
    granted(&m.run(once(request(7, 2, 1), lease), T0 + 1));
}

#[test]
fn registering_a_taken_or_reserved_id_is_refused_and_keeps_the_session() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    let first = m.run(once(request(7, 1, 1), acquire("l", "a", 1_000)), T0 + 1);
    let register = |client| {
        Command::Client(ClientCommand::Register {
            client: ClientId(client),
        })
    };
    assert_eq!(
        refusal(m.run_changing_nothing(register(7), T0 + 1)),
        ClientError::ClientIdTaken {
            client: ClientId(7)
        }
    );
    assert!(matches!(
        refusal(m.run_changing_nothing(register(0), T0 + 1)),
        ClientError::InvalidRequest(_)
    ));
    assert_eq!(m.state.client_session_count(), 1);
    // The session and its answers survive the attempt.
    assert_eq!(
        m.run(once(request(7, 1, 1), acquire("l", "a", 1_000)), T0 + 1),
        first
    );
}

#[test]
fn registering_past_the_limit_evicts_the_session_idle_longest() {
    let register_command = |client: u64| {
        Command::Client(ClientCommand::Register {
            client: ClientId(client),
        })
    };
    let mut m = Machine::new();
    m.checking = false;
    let max = CLIENT_SESSIONS_MAX as u64;
    for client in 1..=max {
        assert_eq!(m.register(client, T0 + client), registered(client));
    }
    m.checking = true;
    // Client 1 registered first but is active now: client 2 is the one idle longest.
    granted(&m.run(
        once(request(1, 1, 1), acquire("l", "a", 1_000)),
        T0 + max + 1,
    ));
    // Until client 2 has been idle long enough that no call can still be retrying on it, the
    // table is full and registration is refused.
    let evictable_at = T0 + 2 + CLIENT_SESSION_EVICTABLE_IDLE_MS;
    assert_eq!(
        refusal(m.run_changing_nothing(register_command(max + 1), evictable_at - 1)),
        ClientError::TooManyClients {
            max: CLIENT_SESSIONS_MAX
        }
    );
    // Client 1 stays active meanwhile.
    m.run(
        once(request(1, 2, 2), acquire("l", "a", 1_000)),
        evictable_at - 1,
    );
    assert_eq!(m.register(max + 1, evictable_at), registered(max + 1));
    assert_eq!(m.state.client_session_count(), CLIENT_SESSIONS_MAX);
    let now = m.state.clock_ms();
    assert!(m.state.client_session(ClientId(2), now).is_none());
    for client in [1, 3, max, max + 1] {
        assert!(m.state.client_session(ClientId(client), now).is_some());
    }
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(2, 1, 1), acquire("m", "b", 1_000)), now)),
        ClientError::UnknownClient {
            client: ClientId(2)
        }
    );
}

#[test]
fn close_ends_a_session_and_forgets_its_answers() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    let (lease, _) = granted(&m.run(once(request(7, 1, 1), acquire("l", "a", 10_000)), T0));
    assert_eq!(
        m.close(7, T0 + 1),
        Ok(ClientReply::Closed { existed: true })
    );
    assert_eq!(m.state.client_session_count(), 0);
    // What the session did stays done.
    assert_eq!(m.lease("l"), Some(lease));
    assert_eq!(
        refusal(m.run_changing_nothing(once(request(7, 1, 1), acquire("l", "a", 10_000)), T0 + 2)),
        ClientError::UnknownClient {
            client: ClientId(7)
        }
    );
    assert_eq!(
        m.close(7, T0 + 3),
        Ok(ClientReply::Closed { existed: false })
    );
    assert_eq!(
        m.close(99, T0 + 3),
        Ok(ClientReply::Closed { existed: false })
    );
}

#[test]
fn a_state_with_sessions_round_trips_through_a_snapshot_and_answers_the_same_after() {
    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    m.register(8, T0 + 1).unwrap();
    let a1 = m.run(once(request(7, 1, 1), acquire("l", "a", 3_000)), T0 + 2);
    let a2 = m.run(once(request(7, 2, 1), acquire("m", "a", 3_000)), T0 + 3);
    let a3 = m.run(once(request(7, 3, 2), acquire("n", "a", 3_000)), T0 + 4);
    let b1 = m.run(once(request(8, 1, 1), acquire("l", "b", 3_000)), T0 + 5);
    assert!(matches!(
        b1,
        Response::Lease(Err(LeaseError::NotHolder { .. }))
    ));
    granted(&a1);
    assert_eq!(m.answered(7), vec![2, 3]);

    let bytes = m.state.to_snapshot();
    let restored = State::from_snapshot(&bytes).unwrap();
    assert_eq!(restored, m.state);
    assert_eq!(restored.to_snapshot(), bytes);

    let mut back = Machine {
        state: restored,
        index: m.index,
        checking: true,
    };
    let later = [
        (once(request(7, 2, 1), acquire("m", "a", 3_000)), Some(a2)),
        (once(request(7, 3, 1), acquire("n", "a", 3_000)), Some(a3)),
        (once(request(8, 1, 1), acquire("l", "b", 3_000)), Some(b1)),
        (
            once(request(7, 1, 1), acquire("l", "a", 3_000)),
            Some(Response::Client(Err(ClientError::Superseded {
                sequence: 1,
                first_outstanding: 2,
            }))),
        ),
        (once(request(7, 4, 4), acquire("o", "a", 3_000)), None),
    ];
    for (command, expected) in later {
        let original = m.run(command.clone(), T0 + 1_000);
        let from_snapshot = back.run(command, T0 + 1_000);
        assert_eq!(original, from_snapshot);
        if let Some(expected) = expected {
            assert_eq!(from_snapshot, expected);
        }
        assert_eq!(m.state.to_snapshot(), back.state.to_snapshot());
    }
    assert_eq!(back.lease("o").unwrap().holder, holder("a"));
    assert_eq!(back.answered(7), vec![4]);
}

// ---------------------------------------------------------------------------------------------
// The property: a run with redeliveries leaves the leases as a run without them.

const CLIENTS: [u64; 3] = [11, 22, 33];
const LEASE_NAMES: [&str; 2] = ["alpha", "beta"];
const HOLDERS: [&str; 2] = ["pod-1", "pod-2"];

#[derive(Clone, Debug)]
enum Action {
    /// The client makes its next numbered request. `ack` (when some) moves its first
    /// outstanding number to somewhere between the previous one and the new request's own.
    /// `in_flight` holds the request back instead of delivering it.
    Request {
        client: usize,
        command: Command,
        ack: Option<u64>,
        in_flight: bool,
    },
    /// A request held in flight arrives: its first delivery.
    Arrive(Index),
    /// A delivered request is delivered again (a retry, or a duplicate the network made).
    Redeliver(Index),
    /// The leader's clock moves on.
    Advance(u64),
    /// A tick.
    Tick,
    /// Every client falls silent past the idle limit.
    Idle,
}

fn lease_command() -> impl Strategy<Value = Command> {
    let names = prop::sample::select(&LEASE_NAMES[..]).prop_map(name);
    let holders = prop::sample::select(&HOLDERS[..]).prop_map(holder);
    let ttls = (500u64..3_000).prop_map(ttl);
    prop_oneof![
        3 => (names.clone(), holders.clone(), ttls.clone())
            .prop_map(|(name, holder, ttl)| Command::Lease(LeaseCommand::Acquire { name, holder, ttl })),
        2 => (names.clone(), holders.clone(), ttls)
            .prop_map(|(name, holder, ttl)| Command::Lease(LeaseCommand::Renew { name, holder, ttl })),
        2 => (names, holders)
            .prop_map(|(name, holder)| Command::Lease(LeaseCommand::Release { name, holder })),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        80 => (0..CLIENTS.len(), lease_command(), prop::option::of(any::<u64>()), prop::bool::weighted(0.3))
            .prop_map(|(client, command, ack, in_flight)| Action::Request { client, command, ack, in_flight }),
        24 => any::<Index>().prop_map(Action::Arrive),
        50 => any::<Index>().prop_map(Action::Redeliver),
        30 => (0u64..2_500).prop_map(Action::Advance),
        12 => Just(Action::Tick),
        1 => Just(Action::Idle),
    ]
}

/// A request the clients made, and the answer to its first delivery once it arrived.
struct Sent {
    request: ClientRequest,
    command: Command,
    first: Option<Response>,
}

#[derive(Clone, Copy)]
struct ClientModel {
    next_sequence: u64,
    /// What the client sends as its first outstanding number.
    first_outstanding: u64,
    /// The highest first outstanding number the machine took (from a delivered, admitted request).
    acknowledged: u64,
}

/// Two replicas of one log, but for the redeliveries: `real` gets them, `reference` does not.
struct Run {
    real: State,
    reference: State,
    /// The last index both states applied; a redelivery goes to `index + 1` (an entry only the
    /// real state's log has), the next fresh command to `index + 2`.
    index: u64,
    now_ms: u64,
    clients: Vec<ClientModel>,
    sent: Vec<Sent>,
    in_flight: Vec<usize>,
    delivered: Vec<usize>,
    /// False once the clients sat idle past the limit (no one registers again).
    live: bool,
}

type LeaseView = (Vec<Lease>, FencingToken, usize);

fn lease_view(state: &State, now_ms: u64) -> LeaseView {
    (
        state
            .leases(None, 1_000, now_ms)
            .into_iter()
            .cloned()
            .collect(),
        state.last_fencing_token(),
        state.lease_count(),
    )
}

/// The part of each session a redelivery must not change: acknowledgement and answers.
fn sessions_view(state: &State, now_ms: u64) -> Vec<Option<(u64, BTreeMap<u64, Response>)>> {
    CLIENTS
        .iter()
        .map(|&client| {
            state
                .client_session(ClientId(client), now_ms)
                .map(|session| (session.first_outstanding, session.answered.clone()))
        })
        .collect()
}

impl Run {
    fn new(clients: usize) -> Run {
        let mut run = Run {
            real: State::new(),
            reference: State::new(),
            index: 0,
            now_ms: T0,
            clients: vec![
                ClientModel {
                    next_sequence: 1,
                    first_outstanding: 1,
                    acknowledged: 1,
                };
                clients
            ],
            sent: Vec::new(),
            in_flight: Vec::new(),
            delivered: Vec::new(),
            live: true,
        };
        for &client in &CLIENTS[..clients] {
            let command = Command::Client(ClientCommand::Register {
                client: ClientId(client),
            });
            let (real, reference) = run.both(command);
            assert_eq!(real, Response::Client(registered(client)));
            assert_eq!(reference, real);
        }
        run
    }

    /// Applies a fresh command to both states at the next entry.
    fn both(&mut self, command: Command) -> (Response, Response) {
        self.index += 2;
        let stamp = Stamp::new(self.index, self.now_ms);
        let reference = apply(&mut self.reference, command.clone(), stamp);
        let real = apply(&mut self.real, command, stamp);
        (real, reference)
    }

    fn deliver_first(&mut self, at: usize) {
        let request = self.sent[at].request;
        let command = self.sent[at].command.clone();
        let slot = CLIENTS.iter().position(|&c| c == request.client.0).unwrap();
        let model = self.clients[slot];
        let acknowledged = model.acknowledged.max(request.first_outstanding);
        let before = lease_view(&self.real, self.now_ms);
        let (real, reference) = self.both(once(request, command));
        assert_eq!(real, reference, "a first delivery answered differently");
        let refused = |error| Response::Client(Err(error));
        if !self.live {
            assert_eq!(
                real,
                refused(ClientError::UnknownClient {
                    client: request.client
                })
            );
        } else if request.sequence < acknowledged {
            // The client had moved past it before it first arrived.
            assert_eq!(
                real,
                refused(ClientError::Superseded {
                    sequence: request.sequence,
                    first_outstanding: acknowledged,
                })
            );
        } else {
            assert!(
                matches!(real, Response::Lease(_)),
                "a fresh request of a live client was not applied: {real:?}"
            );
            self.clients[slot].acknowledged = acknowledged;
        }
        if matches!(real, Response::Client(_)) {
            assert_eq!(
                lease_view(&self.real, self.now_ms),
                before,
                "a refused first delivery changed the leases"
            );
        }
        self.sent[at].first = Some(real);
        self.delivered.push(at);
    }

    fn redeliver(&mut self, at: usize) {
        let sent = &self.sent[at];
        let (request, first) = (sent.request, sent.first.clone().expect("delivered"));
        let command = once(request, sent.command.clone());
        let slot = CLIENTS.iter().position(|&c| c == request.client.0).unwrap();
        let acknowledged = self.clients[slot]
            .acknowledged
            .max(request.first_outstanding);
        let sessions = sessions_view(&self.real, self.now_ms);
        let response = apply(
            &mut self.real,
            command,
            Stamp::new(self.index + 1, self.now_ms),
        );
        let expected = if !self.live {
            Response::Client(Err(ClientError::UnknownClient {
                client: request.client,
            }))
        } else if request.sequence < acknowledged {
            Response::Client(Err(ClientError::Superseded {
                sequence: request.sequence,
                first_outstanding: acknowledged,
            }))
        } else {
            first
        };
        assert_eq!(
            response, expected,
            "redelivery of {request:?} (first delivery answered otherwise)"
        );
        assert_eq!(
            sessions_view(&self.real, self.now_ms),
            sessions,
            "a redelivery changed a session's acknowledgement or answers"
        );
    }

    fn step(&mut self, action: Action) {
        match action {
            Action::Request {
                client,
                command,
                ack,
                in_flight,
            } => {
                let slot = client % self.clients.len();
                let model = &mut self.clients[slot];
                let sequence = model.next_sequence;
                model.next_sequence += 1;
                if let Some(ack) = ack {
                    let span = sequence - model.first_outstanding + 1;
                    model.first_outstanding += ack % span;
                }
                let request = ClientRequest {
                    client: ClientId(CLIENTS[slot]),
                    sequence,
                    first_outstanding: model.first_outstanding,
                };
                self.sent.push(Sent {
                    request,
                    command,
                    first: None,
                });
                let at = self.sent.len() - 1;
                if in_flight {
                    self.in_flight.push(at);
                } else {
                    self.deliver_first(at);
                }
            }
            Action::Arrive(pick) => {
                if !self.in_flight.is_empty() {
                    let at = self.in_flight.remove(pick.index(self.in_flight.len()));
                    self.deliver_first(at);
                }
            }
            Action::Redeliver(pick) => {
                if !self.delivered.is_empty() {
                    let at = self.delivered[pick.index(self.delivered.len())];
                    self.redeliver(at);
                }
            }
            Action::Advance(ms) => self.now_ms += ms,
            Action::Tick => {
                let (real, reference) = self.both(Command::Tick);
                assert_eq!(real, reference, "ticks answered differently");
                if !self.live {
                    assert_eq!(self.real.client_session_count(), 0);
                }
            }
            Action::Idle => {
                self.now_ms += CLIENT_SESSION_IDLE_MS + 1;
                self.live = false;
            }
        }
        self.real.check_invariants().unwrap();
        self.reference.check_invariants().unwrap();
        assert_eq!(
            lease_view(&self.real, self.now_ms),
            lease_view(&self.reference, self.now_ms),
            "the redeliveries changed the leases"
        );
        assert_eq!(
            sessions_view(&self.real, self.now_ms),
            sessions_view(&self.reference, self.now_ms),
            "the redeliveries changed a session's acknowledgement or answers"
        );
    }
}

proptest! {
    #[test]
    fn a_duplicate_or_superseded_request_never_changes_the_state(
        clients in 2usize..=3,
        actions in prop::collection::vec(action(), 1..80),
    ) {
        let mut run = Run::new(clients);
        for action in actions {
            run.step(action);
        }
    }
}

#[test]
fn an_answer_too_large_to_keep_is_noted_and_its_copy_still_not_applied_again() {
    use certus_core::limits::CLIENT_ANSWER_BYTES_MAX;
    use certus_core::pipelines::{
        JsonDocument, NewTransaction, NodeGroup, Owner, PipelineName, QueueType, Route, TxMetadata,
    };
    use certus_core::{PipelineCommand, PipelineReply, WorkerId};

    let mut m = Machine::new();
    m.register(7, T0).unwrap();
    let group = NodeGroup::new("g").unwrap();
    m.run(
        Command::Pipeline(PipelineCommand::Define {
            name: PipelineName::new("p").unwrap(),
            node_group: group.clone(),
        }),
        T0,
    );
    // Two transactions whose states together outweigh the largest answer a session keeps.
    let big_state = format!(
        "{{\"pad\":\"{}\"}}",
        "x".repeat(CLIENT_ANSWER_BYTES_MAX / 2 + 1)
    );
    for _ in 0..2 {
        let enqueued = m.run(
            Command::Pipeline(PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new("o").unwrap(),
                external_id: None,
                route: Route::NodeGroup(group.clone()),
                queue: QueueType::In,
                state: JsonDocument::new(&big_state).unwrap(),
                event: None,
                metadata: TxMetadata::default(),
            })),
            T0,
        );
        assert!(
            matches!(enqueued, Response::Pipeline(Ok(_))),
            "{enqueued:?}"
        );
    }
    let dequeue = Command::Pipeline(PipelineCommand::Dequeue {
        node_group: group,
        worker: WorkerId::new("w").unwrap(),
        max: 2,
    });
    let first = m.run(once(request(7, 1, 1), dequeue.clone()), T0 + 1);
    let Response::Pipeline(Ok(PipelineReply::Dequeued(claimed))) = &first else {
        panic!("the dequeue answered {first:?}");
    };
    assert_eq!(claimed.len(), 2, "both transactions were claimed");
    // The copy gets the note, not the transactions, and claims nothing: each transaction keeps
    // the claim the first application gave it.
    let copy = m.run(once(request(7, 1, 1), dequeue), T0 + 2);
    assert_eq!(
        copy,
        Response::Client(Err(ClientError::AnswerNotKept { sequence: 1 }))
    );
    for transaction in claimed {
        let now = m.state.pipelines().transaction(transaction.id).cloned();
        assert_eq!(
            now.and_then(|t| t.claim().cloned()),
            transaction.claim().cloned()
        );
    }
}
