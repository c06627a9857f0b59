//! Claimed work: the one idea issuance sessions and transaction pipelines share.
//!
//! Both keep items of work (a session, a transaction) that stateless workers *claim*. A claim
//! hands one queued item to one worker with a *token* — the log index of the claiming command,
//! so tokens are unique and only grow — and a *deadline*, from which the next tick may take the
//! item back (until then a claim past its deadline still holds). Only the current claim's token
//! ends the claim: the worker completes the item, hands it on, puts it to sleep or gives it back.
//! The step that ended the last claim is remembered with its reply, so a worker that lost the
//! answer and sends the same token again gets the same reply and changes nothing; any other token
//! is stale, and its work is to be dropped. Tries are counted against a bound, and an item that
//! used up its attempts gives up instead of going back (a transaction handed out too often, a
//! challenge tested unsuccessfully too often).
//!
//! What is shared lives here:
//! - [`Place`]: where an item is — queued, claimed, asleep or ended — each variant holding exactly
//!   what that place needs. An item cannot be queued and claimed at once, keep a claim it no
//!   longer holds, or wait and be finished: there is no status next to optional fields for the
//!   two to disagree, and nothing has to work out from loose fields where an item is.
//! - [`Completion`]: the step that ended the last claim, replayed to a retry; `held`, the token
//!   rules in their order (a retry first, then the current claim); `end`, which ends a claim.
//! - `issue`: tokens (and ids) from the log index; `deadline`; `Sweep`, the tick's bounded walk
//!   of time-ordered indexes (lapsed claims first).
//! - Attempts: `count_attempt` and `exhausted`.
//! - The range checks commands and configurations share: `within`, `config_within`.
//! - `check`, the claim invariants below.
//!
//! What differs stays with each module: what a queued item waits with (a session's stage, a
//! transaction's queue entry), what a claim carries besides its token and deadline, what an ended
//! item keeps, and every rule about those.
//!
//! Invariants (the transitions here assert them; `check` checks a stored item):
//! - an item is in exactly one place, and has a claim exactly when it is claimed;
//! - only a queued item is claimed: an ended (or sleeping) item is never handed out;
//! - a claim's token is in 1..=the last issued, above its item's last completion's token, and its
//!   deadline is at most the longest hold after the machine clock;
//! - only the current claim's token ends the claim, and the claim's end leaves the item unclaimed
//!   with that token remembered as its last completion;
//! - an item whose attempts are bounded, and used up, gives up when its claim lapses instead of
//!   going back to its queue.

use std::collections::BTreeSet;
use std::convert::Infallible;

use serde::{Deserialize, Serialize};

/// The payload of a place that cannot be reached: issuance sessions never sleep.
pub type Never = Infallible;

/// Where an item of claimed work is: exactly one place, holding what that place needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place<Q, C, A, E> {
    /// Waiting in a queue for a worker to claim it.
    Queued(Q),
    /// Held by a worker until the claim ends, or a tick takes the item back after its deadline.
    Claimed(C),
    /// Out of every queue until a time or an event wakes it into one.
    Asleep(A),
    /// Finished: never claimed again.
    Ended(E),
}

impl<Q, C, A, E> Place<Q, C, A, E> {
    /// What a queued item waits with.
    pub fn queued(&self) -> Option<&Q> {
        match self {
            Place::Queued(queued) => Some(queued),
            _ => None,
        }
    }

    /// The claim holding a claimed item.
    pub fn claimed(&self) -> Option<&C> {
        match self {
            Place::Claimed(claimed) => Some(claimed),
            _ => None,
        }
    }

    /// What a sleeping item waits for.
    pub fn asleep(&self) -> Option<&A> {
        match self {
            Place::Asleep(asleep) => Some(asleep),
            _ => None,
        }
    }

    /// What an ended item keeps.
    pub fn ended(&self) -> Option<&E> {
        match self {
            Place::Ended(ended) => Some(ended),
            _ => None,
        }
    }

    /// Whether the item may still be worked: queued, claimed or asleep.
    pub fn in_play(&self) -> bool {
        !matches!(self, Place::Ended(_))
    }

    pub(crate) fn claimed_mut(&mut self) -> Option<&mut C> {
        match self {
            Place::Claimed(claimed) => Some(claimed),
            _ => None,
        }
    }

    /// Hands a queued item to a worker: `hold` makes the claim from what the item waited with.
    ///
    /// # Panics
    /// Unless the item is queued: only queued items are claimed, so an ended item never is.
    pub(crate) fn claim(self, hold: impl FnOnce(Q) -> C) -> Self {
        match self {
            Place::Queued(queued) => Place::Claimed(hold(queued)),
            _ => panic!("only a queued item is claimed"),
        }
    }

    /// The claim of a claimed item whose claim is taken back; the caller says where it goes.
    ///
    /// # Panics
    /// Unless the item is claimed.
    pub(crate) fn into_claimed(self) -> C {
        match self {
            Place::Claimed(claimed) => claimed,
            _ => panic!("only a claimed item's claim is taken back"),
        }
    }
}

/// What the shared rules read of a claim: its token and its deadline.
pub(crate) trait Hold {
    /// The log index of the claiming command (unique per command, and increasing).
    fn token(&self) -> u64;
    /// Machine time from which the next tick may take the item back.
    fn deadline_ms(&self) -> u64;
}

/// An item of claimed work: a session or a transaction.
pub(crate) trait Work {
    /// The claim a worker holds on it.
    type Claim: Hold;
    /// What its steps answer.
    type Reply: Clone;
    /// Its current claim, when it is claimed.
    fn current_claim(&self) -> Option<&Self::Claim>;
    /// The step that ended its last claim.
    fn completion(&self) -> Option<&Completion<Self::Reply>>;
    /// Remembers the step that ended its claim.
    fn set_completion(&mut self, completion: Completion<Self::Reply>);
}

/// The step that ended an item's last claim (a session's `Complete`, `Release` or `Fail`; a
/// transaction's `Complete`, `Requeue` or `Sleep`), replayed to a retry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion<R> {
    /// The claim token it carried.
    pub token: u64,
    /// What it was answered.
    pub reply: R,
}

/// What a claim token is to an item: a retry of its last completion, or its current claim.
pub(crate) enum Held<'a, W: Work> {
    /// The token of the last completion: answer its reply again and change nothing.
    Retry(W::Reply),
    /// The current claim's token: the step may go ahead on this item.
    Current(&'a W),
}

/// The token rules every step of a claim holder shares, in their order: the last completion's
/// token gets its reply, before anything else is looked at (a retry may differ from the original
/// only in what no longer matters); otherwise the token must be the current claim's. `None`: the
/// token is stale.
pub(crate) fn held<W: Work>(item: &W, token: u64) -> Option<Held<'_, W>> {
    if let Some(completion) = item.completion()
        && completion.token == token
    {
        return Some(Held::Retry(completion.reply.clone()));
    }
    item.current_claim()
        .filter(|claim| claim.token() == token)
        .map(|_| Held::Current(item))
}

/// Ends the claim `token` of `previous` (the item as stored) on `next` (the item after the step,
/// in its new place), remembering `reply` for retries.
///
/// # Panics
/// Unless `token` is `previous`'s current claim and `next` is no longer claimed.
pub(crate) fn end<W: Work>(previous: &W, next: &mut W, token: u64, reply: W::Reply) -> W::Reply {
    assert!(
        previous
            .current_claim()
            .is_some_and(|claim| claim.token() == token),
        "only the current claim ends"
    );
    assert!(
        next.current_claim().is_none(),
        "a claim's end leaves its item unclaimed"
    );
    next.set_completion(Completion {
        token,
        reply: reply.clone(),
    });
    reply
}

/// The next token (or id): the log index, or the next number when this log entry already issued
/// one (several commands may share an entry). So tokens are unique and increase.
pub(crate) fn issue(last: u64, log_index: u64) -> u64 {
    log_index.max(last.checked_add(1).expect("fewer than 2^64 ids are issued"))
}

/// A claim's deadline: `hold_ms` after `now_ms`.
pub(crate) fn deadline(now_ms: u64, hold_ms: u64) -> u64 {
    now_ms.saturating_add(hold_ms)
}

/// One more hand-out of an item to a worker (the count only ever grows).
pub(crate) fn count_attempt(attempts: u32) -> u32 {
    attempts.saturating_add(1)
}

/// Whether an item tried `attempts` times has used up the `max` it is allowed: it gives up
/// rather than going back.
pub(crate) fn exhausted(attempts: u32, max: u32) -> bool {
    attempts >= max
}

/// A tick's walk of time-ordered `(at_ms, id)` indexes: each step pops the first entry while it
/// is due, and takes at most `batch_max` entries, noting when it left work for the next tick.
pub(crate) struct Sweep {
    now_ms: u64,
    batch_max: usize,
    more: bool,
}

impl Sweep {
    pub(crate) fn new(now_ms: u64, batch_max: usize) -> Sweep {
        Sweep {
            now_ms,
            batch_max,
            more: false,
        }
    }

    /// The first id of `index` if it is due — its time plus `wait_ms` has come — and the step
    /// has taken fewer than the batch (`done` so far).
    pub(crate) fn next<Id: Copy + Ord>(
        &mut self,
        index: &BTreeSet<(u64, Id)>,
        wait_ms: u64,
        done: usize,
    ) -> Option<Id> {
        let &(at_ms, id) = index.first()?;
        if at_ms.saturating_add(wait_ms) > self.now_ms {
            return None;
        }
        if done == self.batch_max {
            self.more = true;
            return None;
        }
        Some(id)
    }

    /// Whether a step reached its bound with due entries left.
    pub(crate) fn more(&self) -> bool {
        self.more
    }
}

/// A number out of its field's range; each module's error has a variant for it.
#[derive(Debug)]
pub(crate) struct OutOfRange {
    pub(crate) field: String,
    pub(crate) got: u64,
    pub(crate) min: u64,
    pub(crate) max: u64,
}

/// Checks that `got` is within `min..=max`.
pub(crate) fn within(field: &str, got: u64, min: u64, max: u64) -> Result<(), OutOfRange> {
    if (min..=max).contains(&got) {
        return Ok(());
    }
    Err(OutOfRange {
        field: field.to_owned(),
        got,
        min,
        max,
    })
}

/// A configuration field out of its range; each module's error has a variant for it.
#[derive(Debug)]
pub(crate) struct InvalidConfig {
    pub(crate) field: String,
    pub(crate) reason: String,
}

/// Checks a configuration field against its bounds, naming the range in the reason.
pub(crate) fn config_within(
    field: &str,
    min: u64,
    max: u64,
    got: u64,
) -> Result<(), InvalidConfig> {
    if (min..=max).contains(&got) {
        return Ok(());
    }
    Err(InvalidConfig {
        field: field.to_owned(),
        reason: format!("{got} is outside {min}..={max}"),
    })
}

/// A day, the unit of retentions.
pub(crate) const DAY_MS: u64 = 86_400_000;

/// The claim invariants of a stored item, against the last issued token and the machine clock:
/// a claim's token is in `1..=last_token` and its deadline at most `hold_ms_max` after the clock;
/// the last completion's token is in `1..=last_token` and below the current claim's.
pub(crate) fn check<W: Work>(
    item: &W,
    last_token: u64,
    clock_ms: u64,
    hold_ms_max: u64,
) -> Result<(), String> {
    let issued = |token: u64| (1..=last_token).contains(&token);
    if let Some(claim) = item.current_claim() {
        if !issued(claim.token()) {
            return Err(format!(
                "claim token {} is not in 1..={last_token}",
                claim.token()
            ));
        }
        if claim.deadline_ms() > clock_ms.saturating_add(hold_ms_max) {
            return Err("its claim runs longer than any hold allows".to_owned());
        }
    }
    if let Some(completion) = item.completion() {
        if !issued(completion.token) {
            return Err(format!(
                "completion token {} is not in 1..={last_token}",
                completion.token
            ));
        }
        if item
            .current_claim()
            .is_some_and(|claim| claim.token() <= completion.token)
        {
            return Err("its claim is not newer than its last completion".to_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
