use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

/// A claim as the tests hold it: a worker's index, a token and a deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TestClaim {
    worker: usize,
    token: u64,
    deadline_ms: u64,
}

impl Hold for TestClaim {
    fn token(&self) -> u64 {
        self.token
    }

    fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }
}

/// How a test item ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Its worker completed it.
    Completed,
    /// Its claim lapsed once it had used up its attempts.
    GaveUp,
}

/// An item of claimed work in its simplest form: queued with nothing, asleep until a time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Item {
    place: Place<(), TestClaim, u64, Outcome>,
    last: Option<Completion<String>>,
    attempts: u32,
}

impl Item {
    fn new() -> Item {
        Item {
            place: Place::Queued(()),
            last: None,
            attempts: 0,
        }
    }
}

impl Work for Item {
    type Claim = TestClaim;
    type Reply = String;

    fn current_claim(&self) -> Option<&TestClaim> {
        self.place.claimed()
    }

    fn completion(&self) -> Option<&Completion<String>> {
        self.last.as_ref()
    }

    fn set_completion(&mut self, completion: Completion<String>) {
        self.last = Some(completion);
    }
}

fn claimed(worker: usize, token: u64, deadline_ms: u64) -> Item {
    Item {
        place: Place::Claimed(TestClaim {
            worker,
            token,
            deadline_ms,
        }),
        last: None,
        attempts: 1,
    }
}

#[test]
fn a_retry_of_the_last_completion_is_answered_before_the_claim_is_looked_at() {
    let mut item = claimed(0, 7, 100);
    assert!(matches!(held(&item, 7), Some(Held::Current(_))));
    assert!(held(&item, 6).is_none(), "an older token is stale");
    assert!(held(&item, 8).is_none(), "a token never issued is stale");
    let previous = item.clone();
    item.place = Place::Queued(());
    let reply = end(&previous, &mut item, 7, "released".to_owned());
    assert_eq!(reply, "released");
    assert_eq!(
        item.last,
        Some(Completion {
            token: 7,
            reply: "released".to_owned()
        })
    );
    // The same token again: the same answer, whatever the item's place now.
    assert!(matches!(held(&item, 7), Some(Held::Retry(reply)) if reply == "released"));
    item.place = Place::Queued(()).claim(|()| TestClaim {
        worker: 1,
        token: 9,
        deadline_ms: 200,
    });
    assert!(matches!(held(&item, 7), Some(Held::Retry(_))));
    assert!(matches!(held(&item, 9), Some(Held::Current(_))));
}

#[test]
fn places_say_what_they_hold() {
    type P = Place<u8, TestClaim, u64, Outcome>;
    let queued: P = Place::Queued(3);
    let asleep: P = Place::Asleep(50);
    let ended: P = Place::Ended(Outcome::GaveUp);
    assert_eq!(queued.queued(), Some(&3));
    assert_eq!(asleep.asleep(), Some(&50));
    assert_eq!(ended.ended(), Some(&Outcome::GaveUp));
    assert!(queued.in_play() && asleep.in_play() && !ended.in_play());
    assert!(queued.claimed().is_none() && ended.queued().is_none());
    let claimed = queued.claim(|waited| TestClaim {
        worker: usize::from(waited),
        token: 1,
        deadline_ms: 10,
    });
    assert_eq!(claimed.claimed().map(|claim| claim.worker), Some(3));
    assert_eq!(claimed.into_claimed().token, 1);
}

#[test]
fn tokens_are_log_indexes_and_grow_within_one_entry() {
    assert_eq!(issue(0, 5), 5);
    assert_eq!(issue(5, 5), 6, "a second claim in the same log entry");
    assert_eq!(issue(6, 9), 9);
    assert_eq!(deadline(u64::MAX - 1, 10), u64::MAX);
}

#[test]
fn attempts_give_up_at_the_bound() {
    let mut attempts = 0;
    for _ in 0..3 {
        assert!(!exhausted(attempts, 3));
        attempts = count_attempt(attempts);
    }
    assert!(exhausted(attempts, 3));
    assert_eq!(count_attempt(u32::MAX), u32::MAX);
}

#[test]
fn a_sweep_takes_what_is_due_up_to_its_bound() {
    let index: BTreeSet<(u64, u32)> = [(10, 1), (10, 2), (20, 3), (30, 4)].into();
    let mut sweep = Sweep::new(20, 2);
    let mut taken = Vec::new();
    let mut left = index.clone();
    while let Some(id) = sweep.next(&left, 0, taken.len()) {
        left.retain(|&(_, other)| other != id);
        taken.push(id);
    }
    assert_eq!(taken, [1, 2]);
    assert!(sweep.more(), "item 3 was due but past the bound");
    // With a wait, only entries old enough are due; an empty step leaves no work.
    let mut sweep = Sweep::new(20, 2);
    assert_eq!(sweep.next(&index, 10, 0), Some(1));
    assert_eq!(sweep.next(&index, 11, 0), None);
    assert!(!sweep.more());
}

#[test]
fn range_checks_name_the_field_and_its_range() {
    assert!(within("max", 3, 1, 3).is_ok());
    let error = within("max", 4, 1, 3).unwrap_err();
    assert_eq!(
        (error.field.as_str(), error.got, error.min, error.max),
        ("max", 4, 1, 3)
    );
    assert!(config_within("max_tests", 1, 1_000, 1_000).is_ok());
    let error = config_within("max_tests", 1, 1_000, 0).unwrap_err();
    assert_eq!(error.field, "max_tests");
    assert_eq!(error.reason, "0 is outside 1..=1000");
}

#[test]
fn check_finds_claims_out_of_their_bounds() {
    assert!(check(&claimed(0, 5, 100), 5, 0, 100).is_ok());
    let message = check(&claimed(0, 6, 100), 5, 0, 100).unwrap_err();
    assert!(
        message.contains("claim token 6 is not in 1..=5"),
        "{message}"
    );
    assert!(check(&claimed(0, 0, 100), 5, 0, 100).is_err());
    assert!(check(&claimed(0, 5, 101), 5, 0, 100).is_err());
    let mut item = claimed(0, 5, 100);
    item.last = Some(Completion {
        token: 5,
        reply: String::new(),
    });
    let message = check(&item, 5, 0, 100).unwrap_err();
    assert!(message.contains("not newer"), "{message}");
    item.place = Place::Ended(Outcome::Completed);
    assert!(check(&item, 5, 0, 100).is_ok());
    item.last = Some(Completion {
        token: 9,
        reply: String::new(),
    });
    assert!(check(&item, 5, 0, 100).is_err());
}

// Random runs of claims, completions, releases, sleeps, extensions, expiries and retries,
// driven through the shared rules as a queue of items would use them.

const ITEMS: usize = 5;
const WORKERS: usize = 3;
const HOLD_MS_MAX: u64 = 1_000;
const SWEEP_BATCH: usize = 2;

#[derive(Clone, Debug)]
enum Action {
    /// A worker claims the first queued item.
    Claim {
        worker: usize,
        hold_ms: u64,
    },
    /// A worker completes, releases or puts to sleep an item with one of its tokens.
    End {
        item: usize,
        token: TokenPick,
        how: End,
    },
    /// A worker moves its claim's deadline.
    Extend {
        item: usize,
        token: TokenPick,
        hold_ms: u64,
    },
    /// The last completion of an item, sent again.
    Retry {
        item: usize,
    },
    /// The tick: lapsed claims are taken back (or given up), sleepers whose time came wake.
    Tick,
    Advance {
        ms: u64,
    },
}

#[derive(Clone, Copy, Debug)]
enum End {
    Complete,
    Release,
    Sleep { ms: u64 },
}

/// Which token a worker sends: the item's newest, an older one, or one never issued to it.
#[derive(Clone, Copy, Debug)]
enum TokenPick {
    Newest,
    Older(usize),
    Foreign(u64),
}

fn action() -> impl Strategy<Value = Action> {
    let token = prop_oneof![
        6 => Just(TokenPick::Newest),
        2 => (0usize..4).prop_map(TokenPick::Older),
        1 => (1u64..200).prop_map(TokenPick::Foreign),
    ];
    let how = prop_oneof![
        Just(End::Complete),
        Just(End::Release),
        (0u64..2_000).prop_map(|ms| End::Sleep { ms }),
    ];
    prop_oneof![
        4 => (0..WORKERS, 1..=HOLD_MS_MAX)
            .prop_map(|(worker, hold_ms)| Action::Claim { worker, hold_ms }),
        4 => (0..ITEMS, token.clone(), how)
            .prop_map(|(item, token, how)| Action::End { item, token, how }),
        1 => (0..ITEMS, token, 1..=HOLD_MS_MAX)
            .prop_map(|(item, token, hold_ms)| Action::Extend { item, token, hold_ms }),
        1 => (0..ITEMS).prop_map(|item| Action::Retry { item }),
        2 => Just(Action::Tick),
        3 => (0u64..800).prop_map(|ms| Action::Advance { ms }),
    ]
}

/// A queue of items worked by the shared rules, and what the run has seen of it.
struct Queue {
    items: Vec<Item>,
    max_attempts: u32,
    now_ms: u64,
    log_index: u64,
    last_token: u64,
    /// Every token issued for each item, oldest first.
    issued: Vec<Vec<u64>>,
    /// Items that ended, and how: they must stay so.
    ended: BTreeMap<usize, Outcome>,
}

impl Queue {
    fn new(max_attempts: u32) -> Queue {
        Queue {
            items: vec![Item::new(); ITEMS],
            max_attempts,
            now_ms: 1_000,
            log_index: 0,
            last_token: 0,
            issued: vec![Vec::new(); ITEMS],
            ended: BTreeMap::new(),
        }
    }

    fn token(&self, item: usize, pick: TokenPick) -> u64 {
        let issued = &self.issued[item];
        match pick {
            TokenPick::Newest => issued.last().copied().unwrap_or(1),
            TokenPick::Older(back) => issued
                .len()
                .checked_sub(back + 2)
                .map_or(1, |at| issued[at]),
            TokenPick::Foreign(token) => token,
        }
    }

    fn apply(&mut self, action: &Action) -> Result<(), TestCaseError> {
        self.log_index += 1;
        match *action {
            Action::Claim { worker, hold_ms } => {
                let Some(at) = self
                    .items
                    .iter()
                    .position(|item| item.place.queued().is_some())
                else {
                    return Ok(());
                };
                prop_assert!(!self.ended.contains_key(&at), "an ended item is claimed");
                self.last_token = issue(self.last_token, self.log_index);
                let token = self.last_token;
                let item = &mut self.items[at];
                let place = std::mem::replace(&mut item.place, Place::Queued(()));
                item.place = place.claim(|()| TestClaim {
                    worker,
                    token,
                    deadline_ms: deadline(self.now_ms, hold_ms),
                });
                item.attempts = count_attempt(item.attempts);
                self.issued[at].push(token);
            }
            Action::End {
                item: at,
                token,
                how,
            } => {
                let token = self.token(at, token);
                let before = self.items[at].clone();
                match held(&before, token) {
                    None => {}
                    Some(Held::Retry(reply)) => {
                        prop_assert_eq!(Some(reply), before.last.map(|last| last.reply));
                    }
                    Some(Held::Current(_)) => {
                        let mut next = before.clone();
                        next.place = match how {
                            End::Complete => Place::Ended(Outcome::Completed),
                            End::Release => Place::Queued(()),
                            End::Sleep { ms } => Place::Asleep(self.now_ms + ms),
                        };
                        // A step that hands the item on starts its count again.
                        if !matches!(how, End::Complete) {
                            next.attempts = 0;
                        }
                        if matches!(how, End::Complete) {
                            self.ended.insert(at, Outcome::Completed);
                        }
                        let reply = format!("{how:?} with {token}");
                        prop_assert_eq!(end(&before, &mut next, token, reply.clone()), reply);
                        self.items[at] = next;
                    }
                }
            }
            Action::Extend {
                item: at,
                token,
                hold_ms,
            } => {
                let token = self.token(at, token);
                let now_ms = self.now_ms;
                if let Some(claim) = self.items[at].place.claimed_mut()
                    && claim.token == token
                {
                    claim.deadline_ms = deadline(now_ms, hold_ms);
                }
            }
            Action::Retry { item: at } => {
                let item = &self.items[at];
                if let Some(last) = &item.last {
                    let before = item.clone();
                    match held(item, last.token) {
                        Some(Held::Retry(reply)) => prop_assert_eq!(&reply, &last.reply),
                        _ => prop_assert!(false, "the last completion's token is not a retry"),
                    }
                    prop_assert_eq!(&self.items[at], &before);
                }
            }
            Action::Tick => self.tick()?,
            Action::Advance { ms } => self.now_ms += ms,
        }
        Ok(())
    }

    /// Takes back every lapsed claim, in bounded sweeps, then wakes the sleepers whose time came.
    fn tick(&mut self) -> Result<(), TestCaseError> {
        loop {
            let deadlines: BTreeSet<(u64, usize)> = self
                .items
                .iter()
                .enumerate()
                .filter_map(|(at, item)| item.place.claimed().map(|c| (c.deadline_ms, at)))
                .collect();
            let mut sweep = Sweep::new(self.now_ms, SWEEP_BATCH);
            let mut taken = BTreeSet::new();
            let mut left = deadlines.clone();
            while let Some(at) = sweep.next(&left, 0, taken.len()) {
                left.retain(|&(_, other)| other != at);
                taken.insert(at);
                let item = &mut self.items[at];
                let place = std::mem::replace(&mut item.place, Place::Queued(()));
                let claim = place.into_claimed();
                prop_assert!(claim.deadline_ms <= self.now_ms);
                item.place = if exhausted(item.attempts, self.max_attempts) {
                    self.ended.insert(at, Outcome::GaveUp);
                    Place::Ended(Outcome::GaveUp)
                } else {
                    Place::Queued(())
                };
            }
            prop_assert!(taken.len() <= SWEEP_BATCH);
            if !sweep.more() {
                break;
            }
        }
        for item in &mut self.items {
            if let Place::Asleep(until_ms) = item.place
                && until_ms <= self.now_ms
            {
                item.place = Place::Queued(());
                item.attempts = 0;
            }
        }
        Ok(())
    }

    fn check(&self, after_tick: bool) -> Result<(), TestCaseError> {
        for (at, item) in self.items.iter().enumerate() {
            if let Err(problem) = check(item, self.last_token, self.now_ms, HOLD_MS_MAX) {
                return Err(TestCaseError::fail(format!("item {at}: {problem}")));
            }
            // Attempts never exceed the bound.
            prop_assert!(item.attempts <= self.max_attempts, "item {at}: {item:?}");
            // An ended item stays as it ended, and is never claimed again.
            if let Some(outcome) = self.ended.get(&at) {
                prop_assert_eq!(item.place.ended(), Some(outcome), "item {}", at);
            }
            // A token holds only while its claim is the item's current one: once a later claim
            // was made, or the claim ended or lapsed and was taken back, it never holds again.
            let current = item.place.claimed().map(|claim| claim.token);
            let last = item.last.as_ref().map(|last| last.token);
            for &token in &self.issued[at] {
                match held(item, token) {
                    Some(Held::Current(_)) => prop_assert_eq!(Some(token), current),
                    Some(Held::Retry(_)) => prop_assert_eq!(Some(token), last),
                    None => prop_assert!(Some(token) != current && Some(token) != last),
                }
            }
            if let Some(&newest) = self.issued[at].last() {
                prop_assert!(current.is_none_or(|token| token == newest));
            }
            // After a tick, no claim is past its deadline.
            if after_tick && let Some(claim) = item.place.claimed() {
                prop_assert!(claim.deadline_ms > self.now_ms, "item {at}: {claim:?}");
            }
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn claimed_work_holds_its_promises(
        max_attempts in 1u32..4,
        actions in prop::collection::vec(action(), 1..120),
    ) {
        let mut queue = Queue::new(max_attempts);
        for action in &actions {
            queue.apply(action)?;
            queue.check(matches!(action, Action::Tick))?;
        }
    }
}
