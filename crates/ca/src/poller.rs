//! Bounded polling of an asynchronous upstream CA (seed 001).
//!
//! An asynchronous CA answers an order with an id and issues the certificate later; the caller
//! asks for the order's status until it is issued or refused. Asking too often burns the CA's
//! rate-limit budget, asking forever blocks a worker, so polling here is bounded three ways:
//!
//! - **Backoff.** The first attempt is immediate. The waits then grow by a factor up to a cap;
//!   the default schedule multiplies by 3 from 5 s and is capped at 5 minutes:
//!
//!   ```text
//!   attempt 1 → 5 s → attempt 2 → 15 s → attempt 3 → 45 s → attempt 4 → 2 m 15 s → attempt 5
//!             → 5 m → attempt 6 → (clamped) → attempt 7 at the deadline
//!   ```
//!
//!   Every wait is spread by ±`jitter_percent` (default 20 %) so that many workers never
//!   synchronise on the CA's rate-limit window. The randomness comes from the caller (a
//!   [`JitterSource`]) so tests and the simulation control it.
//! - **Deadline.** `max_wait` (default 10 minutes), measured from the first attempt, bounds when
//!   an attempt may *start*: the last sleep is clamped so that one final attempt lands exactly at
//!   the deadline, and nothing is attempted after it. (An attempt in flight at the deadline runs
//!   to its own timeout, so a call returns at most `max_wait` plus one request timeout after it
//!   began.) Still pending then, the outcome is [`PollOutcome::StillPending`] and the caller
//!   re-enqueues the work for later.
//! - **`Retry-After`.** When the CA names a time to come back ([`RetryAfter`], seconds or an
//!   HTTP-date), the next wait is at least that long — spread upwards by the jitter, never
//!   below — and still never past the deadline. If the CA asks for more time than the deadline
//!   leaves, polling stops at once with `StillPending` carrying the CA's delay, rather than
//!   calling back early.
//!
//! The module is split sans-IO: [`PollPolicy::next_wait`] is pure — elapsed time, the CA's
//! delay and the random draw are its arguments — and holds the whole schedule; [`poll`] is the
//! thin driver that makes the attempts, reads `tokio::time`'s clock and sleeps. `tokio` here is
//! madsim's, so under the simulation the same driver runs on virtual time.
//!
//! Triage (what an answer means for polling) is the connector's: it reports each attempt as a
//! [`Step`]. The seed's table, which [`crate::upstream`] implements for its HTTP protocol:
//!
//! | Answer | Step |
//! |---|---|
//! | 2xx, status issued / completed | [`Step::Ready`] |
//! | 2xx, status pending / processing | [`Step::Pending`] |
//! | 2xx, status rejected / denied / failed | [`Step::Failed`] |
//! | 2xx, a body that does not parse | [`Step::Failed`] (permanent: the CA is broken) |
//! | 429, 5xx, network / TLS / timeout errors | [`Step::Transient`] (keep polling) |
//! | any other status (4xx) | [`Step::Failed`] |

use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::limits::{
    POLL_ATTEMPTS_MAX, POLL_FACTOR_MAX, POLL_JITTER_PERCENT_MAX, POLL_MAX_WAIT_MS_MAX,
    POLL_WAIT_MS_MAX,
};

/// A poll policy as configured (per connector), before validation; see [`PollPolicy`].
///
/// Fields left out of a configuration file take the defaults (the seed's schedule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollPolicyConfig {
    /// The wait after the first attempt (default 5 s).
    pub first_wait_ms: u64,
    /// Each wait is the previous one times this (default 3).
    pub factor: u32,
    /// No nominal wait is longer than this (default 5 minutes).
    pub cap_ms: u64,
    /// Every wait is spread by up to this percentage either way (default 20).
    pub jitter_percent: u32,
    /// No attempt starts later than this after the first one (default 10 minutes).
    pub max_wait_ms: u64,
}

impl Default for PollPolicyConfig {
    fn default() -> PollPolicyConfig {
        PollPolicyConfig {
            first_wait_ms: 5_000,
            factor: 3,
            cap_ms: 5 * 60 * 1000,
            jitter_percent: 20,
            max_wait_ms: 10 * 60 * 1000,
        }
    }
}

/// A policy field out of range: which field, its value, and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("poll policy: {field} is {value}, expected {expected}")]
pub struct PolicyError {
    /// The field of [`PollPolicyConfig`] at fault.
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// What it should have been.
    pub expected: String,
}

/// A validated poll policy: the backoff schedule, its jitter and its deadline.
///
/// Built from a [`PollPolicyConfig`] by [`PollPolicy::new`], which checks every field; the
/// default is the seed's schedule. The policy also knows an upper bound on the attempts one
/// [`poll`] can make ([`PollPolicy::attempts_max`]), and refuses to exist if that bound passes
/// [`POLL_ATTEMPTS_MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollPolicy {
    first_wait: Duration,
    factor: u32,
    cap: Duration,
    jitter_percent: u32,
    max_wait: Duration,
    attempts_max: u32,
}

impl Default for PollPolicy {
    fn default() -> PollPolicy {
        PollPolicy::new(PollPolicyConfig::default()).expect("the default poll policy is valid")
    }
}

impl TryFrom<PollPolicyConfig> for PollPolicy {
    type Error = PolicyError;

    fn try_from(config: PollPolicyConfig) -> Result<PollPolicy, PolicyError> {
        PollPolicy::new(config)
    }
}

fn check(
    field: &'static str,
    value: u64,
    allowed: std::ops::RangeInclusive<u64>,
    expected: impl FnOnce() -> String,
) -> Result<(), PolicyError> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(PolicyError {
            field,
            value,
            expected: expected(),
        })
    }
}

impl PollPolicy {
    /// Checks `config` field by field; the error names the first field out of range.
    pub fn new(config: PollPolicyConfig) -> Result<PollPolicy, PolicyError> {
        check(
            "first_wait_ms",
            config.first_wait_ms,
            1..=POLL_WAIT_MS_MAX,
            || format!("1 to {POLL_WAIT_MS_MAX} ms (one day)"),
        )?;
        check(
            "factor",
            u64::from(config.factor),
            1..=u64::from(POLL_FACTOR_MAX),
            || format!("1 (constant waits) to {POLL_FACTOR_MAX}"),
        )?;
        check(
            "cap_ms",
            config.cap_ms,
            config.first_wait_ms..=POLL_WAIT_MS_MAX,
            || {
                format!(
                    "at least first_wait_ms ({}) and at most {POLL_WAIT_MS_MAX} ms (one day)",
                    config.first_wait_ms
                )
            },
        )?;
        check(
            "jitter_percent",
            u64::from(config.jitter_percent),
            0..=u64::from(POLL_JITTER_PERCENT_MAX),
            || format!("0 to {POLL_JITTER_PERCENT_MAX}"),
        )?;
        check(
            "max_wait_ms",
            config.max_wait_ms,
            1..=POLL_MAX_WAIT_MS_MAX,
            || format!("1 to {POLL_MAX_WAIT_MS_MAX} ms (a week)"),
        )?;
        let mut policy = PollPolicy {
            first_wait: Duration::from_millis(config.first_wait_ms),
            factor: config.factor,
            cap: Duration::from_millis(config.cap_ms),
            jitter_percent: config.jitter_percent,
            max_wait: Duration::from_millis(config.max_wait_ms),
            attempts_max: 0,
        };
        let bound = policy.attempts_bound();
        policy.attempts_max = u32::try_from(bound)
            .ok()
            .filter(|&bound| bound <= POLL_ATTEMPTS_MAX)
            .ok_or_else(|| PolicyError {
                field: "max_wait_ms",
                value: config.max_wait_ms,
                expected: format!(
                    "a deadline these waits fill in at most {POLL_ATTEMPTS_MAX} attempts (they allow \
                     up to {bound}); raise first_wait_ms, factor or cap_ms, or lower max_wait_ms"
                ),
            })?;
        Ok(policy)
    }

    /// The configuration this policy was built from.
    pub fn config(&self) -> PollPolicyConfig {
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        PollPolicyConfig {
            first_wait_ms: millis(self.first_wait),
            factor: self.factor,
            cap_ms: millis(self.cap),
            jitter_percent: self.jitter_percent,
            max_wait_ms: millis(self.max_wait),
        }
    }

    /// The deadline, measured from the first attempt.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The jitter, in percent of a wait either way.
    pub fn jitter_percent(&self) -> u32 {
        self.jitter_percent
    }

    /// An upper bound on the attempts one [`poll`] makes under this policy, whatever the jitter
    /// draws and the CA's `Retry-After` (which only lengthens waits): the attempts that fit
    /// before the deadline if every wait were as short as the jitter allows, plus the one at
    /// the deadline. The default policy's bound is 7.
    pub fn attempts_max(&self) -> u32 {
        self.attempts_max
    }

    /// The wait after attempt number `attempts` (1 for the wait after the first attempt) before
    /// jitter: `first_wait · factor^(attempts − 1)`, capped.
    pub fn nominal_wait(&self, attempts: u32) -> Duration {
        assert!(attempts >= 1, "a wait follows an attempt; attempts is 0");
        let mut wait = self.first_wait;
        // At most log_factor(cap / first_wait) rounds (≤ 27): the loop stops at the cap.
        for _ in 1..attempts {
            if self.factor == 1 || wait >= self.cap {
                break;
            }
            wait = wait.saturating_mul(self.factor);
        }
        wait.min(self.cap)
    }

    /// How far a wait of `wait` may be spread either way.
    fn spread_ns(&self, wait: Duration) -> u128 {
        wait.as_nanos() * u128::from(self.jitter_percent) / 100
    }

    /// The wait to sleep after attempt number `attempts` (counting from 1), which ended
    /// `elapsed` after the first attempt began, when the CA asked for `retry_after` (already
    /// turned into a delay, see [`RetryAfter::delay`]). `None`: make no more attempts.
    ///
    /// Pure: draws one number from `jitter` when it returns a wait, none otherwise.
    /// - No deadline left (`elapsed ≥ max_wait`): `None` — the attempt just made was the last.
    /// - `retry_after` longer than the time left: `None` — the CA asked us not to call before
    ///   the deadline.
    /// - Otherwise the nominal wait spread by ±jitter; if `retry_after` is longer, `retry_after`
    ///   spread upwards only (it is a lower bound); the result clamped to the time left, so that
    ///   the next attempt lands at the deadline at the latest.
    pub fn next_wait(
        &self,
        attempts: u32,
        elapsed: Duration,
        retry_after: Option<Duration>,
        jitter: &mut impl JitterSource,
    ) -> Option<Duration> {
        assert!(attempts >= 1, "a wait follows an attempt; attempts is 0");
        let remaining = self
            .max_wait
            .checked_sub(elapsed)
            .filter(|remaining| !remaining.is_zero())?;
        if retry_after.is_some_and(|retry_after| retry_after > remaining) {
            return None;
        }
        let unit = jitter.next_unit();
        assert!(
            (0.0..1.0).contains(&unit),
            "a jitter source must yield numbers in [0, 1), got {unit}"
        );
        let nominal = self.nominal_wait(attempts);
        let spread_ns = self.spread_ns(nominal);
        // nominal − spread + [0, 2·spread): the draw 0.5 gives the nominal wait exactly.
        let scheduled = from_nanos(nominal.as_nanos() - spread_ns + scale(2 * spread_ns, unit));
        let wait = match retry_after {
            Some(retry_after) if retry_after > scheduled => {
                from_nanos(retry_after.as_nanos() + scale(self.spread_ns(retry_after), unit))
            }
            _ => scheduled,
        };
        let wait = wait.min(remaining);
        debug_assert!(retry_after.is_none_or(|retry_after| wait >= retry_after));
        Some(wait)
    }

    /// See [`PollPolicy::attempts_max`]. Attempt k + 1 cannot start before S(k), the sum of the
    /// k shortest possible waits; every attempt but the one at the deadline starts before
    /// `max_wait`. So the bound is 1 + #{k ≥ 0 : S(k) < max_wait}.
    fn attempts_bound(&self) -> u64 {
        let deadline_ns = self.max_wait.as_nanos();
        let mut below: u64 = 1; // k = 0: S(0) = 0 < max_wait.
        let mut sum_ns: u128 = 0;
        let mut attempts: u32 = 1;
        loop {
            let nominal = self.nominal_wait(attempts);
            let shortest_ns = nominal.as_nanos() - self.spread_ns(nominal);
            assert!(shortest_ns > 0, "a validated policy has no zero wait");
            if self.nominal_wait(attempts + 1) == nominal {
                // From here on every shortest wait is the same: count how many more fit.
                let left_ns = deadline_ns - sum_ns;
                let more = u64::try_from((left_ns - 1) / shortest_ns).unwrap_or(u64::MAX);
                return below.saturating_add(more).saturating_add(1);
            }
            sum_ns += shortest_ns;
            if sum_ns >= deadline_ns {
                return below + 1;
            }
            below += 1;
            attempts += 1;
        }
    }
}

/// `value · unit`, rounded down; `unit` is in [0, 1).
fn scale(value: u128, unit: f64) -> u128 {
    // Waits are at most a week in nanoseconds (< 2^53), so the conversion is exact.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let scaled = (value as f64 * unit) as u128;
    scaled.min(value)
}

fn from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).expect("below one second");
    Duration::new(secs, subsec)
}

/// Where the jitter's randomness comes from: the caller's generator (a seeded one in tests and
/// the simulation). Any `FnMut() -> f64` is one.
pub trait JitterSource {
    /// A number in [0, 1); 0.5 means no jitter. Anything else is a bug, and panics.
    fn next_unit(&mut self) -> f64;
}

impl<F: FnMut() -> f64> JitterSource for F {
    fn next_unit(&mut self) -> f64 {
        self()
    }
}

/// A CA's `Retry-After` (RFC 9110 §10.2.3): a delay in seconds, or an HTTP-date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Come back after this long.
    Delay(Duration),
    /// Come back at this time, in milliseconds since the Unix epoch.
    At {
        /// The time, in milliseconds since the Unix epoch.
        unix_ms: u64,
    },
}

impl RetryAfter {
    /// Reads a `Retry-After` header value; `None` if it is neither form (the header is then
    /// ignored and the schedule alone applies). A delay too large for a `u64` saturates.
    pub fn parse(value: &str) -> Option<RetryAfter> {
        let value = value.trim();
        if !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()) {
            // Only digits: parsing fails on overflow alone.
            let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
            return Some(RetryAfter::Delay(Duration::from_secs(seconds)));
        }
        let at = httpdate::parse_http_date(value).ok()?;
        let unix_ms = at.duration_since(UNIX_EPOCH).map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
        Some(RetryAfter::At { unix_ms })
    }

    /// The delay this asks for when the wall clock reads `now_unix_ms` (the caller's clock,
    /// which the simulation may skew); a date in the past asks for none.
    pub fn delay(&self, now_unix_ms: u64) -> Duration {
        match *self {
            RetryAfter::Delay(delay) => delay,
            RetryAfter::At { unix_ms } => {
                Duration::from_millis(unix_ms.saturating_sub(now_unix_ms))
            }
        }
    }
}

/// What one attempt found, as the connector triaged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<T> {
    /// Done: the CA issued `T`.
    Ready(T),
    /// The CA is still working on it: keep polling.
    Pending,
    /// A permanent failure (the CA refused, or answered something that makes no sense): stop.
    Failed(String),
    /// A transient failure (rate limited, CA unavailable, network): keep polling.
    Transient(String),
}

/// One answer from the CA: what it means, and when the CA asked to be called again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<S> {
    /// The triaged answer.
    pub step: S,
    /// The CA's `Retry-After`, if it sent one.
    pub retry_after: Option<RetryAfter>,
}

impl<S> Answer<S> {
    /// An answer without `Retry-After`.
    pub fn new(step: S) -> Answer<S> {
        Answer {
            step,
            retry_after: None,
        }
    }
}

/// How a [`poll`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PollOutcome<T> {
    /// The CA issued `value` on the last of `attempts`.
    Ready {
        /// What the CA issued.
        value: T,
        /// Attempts made, the successful one included.
        attempts: u32,
    },
    /// A permanent failure on the last of `attempts`.
    Failed {
        /// Why.
        reason: String,
        /// Attempts made, the failed one included.
        attempts: u32,
    },
    /// The deadline came (or the CA asked for more time than was left) while the order was
    /// still pending or the CA unreachable: re-enqueue and poll again later.
    StillPending {
        /// Attempts made.
        attempts: u32,
        /// The most recent transient error, if any attempt had one.
        last_error: Option<String>,
        /// The delay the CA asked for in its last answer, if it asked: a later poll should not
        /// start before it.
        retry_after: Option<Duration>,
    },
}

/// One attempt at what is polled: a request to the CA, triaged. Any `FnMut` returning a `Send`
/// future of an [`Answer`] is one; a type with state that lives across attempts (an order id
/// learnt on the first) implements it itself.
pub trait Attempt {
    /// What the CA issues.
    type Output;

    /// Makes one attempt.
    fn attempt(&mut self) -> impl Future<Output = Answer<Step<Self::Output>>> + Send;
}

impl<F, Fut, T> Attempt for F
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Answer<Step<T>>> + Send,
{
    type Output = T;

    fn attempt(&mut self) -> impl Future<Output = Answer<Step<T>>> + Send {
        self()
    }
}

/// Polls until `attempt` reports a [`Step::Ready`] or [`Step::Failed`], or the policy's deadline
/// passes: the first attempt at once, then after each [`PollPolicy::next_wait`].
///
/// `jitter` draws the jitter; `now_unix_ms` is the wall clock (milliseconds since the Unix
/// epoch), read only to turn a `Retry-After` HTTP-date into a delay. Elapsed time and sleeps
/// use `tokio::time` (virtual time under the simulation, or in tests with paused time).
/// Dropping the future cancels the polling between attempts or during one.
pub async fn poll<A: Attempt>(
    policy: &PollPolicy,
    jitter: &mut impl JitterSource,
    now_unix_ms: impl Fn() -> u64,
    attempt: &mut A,
) -> PollOutcome<A::Output> {
    let started = tokio::time::Instant::now();
    let mut attempts: u32 = 0;
    let mut last_error = None;
    loop {
        attempts += 1;
        assert!(
            attempts <= policy.attempts_max(),
            "attempt {attempts} passes the policy's bound of {}",
            policy.attempts_max()
        );
        let answer = attempt.attempt().await;
        let retry_after = answer
            .retry_after
            .map(|retry_after| retry_after.delay(now_unix_ms()));
        match answer.step {
            Step::Ready(value) => {
                tracing::debug!(attempts, "upstream poll: ready");
                return PollOutcome::Ready { value, attempts };
            }
            Step::Failed(reason) => {
                tracing::debug!(attempts, %reason, "upstream poll: failed");
                return PollOutcome::Failed { reason, attempts };
            }
            Step::Pending => tracing::debug!(attempts, ?retry_after, "upstream poll: pending"),
            Step::Transient(error) => {
                tracing::debug!(attempts, %error, ?retry_after, "upstream poll: transient error");
                last_error = Some(error);
            }
        }
        let elapsed = started.elapsed();
        let Some(wait) = policy.next_wait(attempts, elapsed, retry_after, jitter) else {
            tracing::debug!(attempts, ?elapsed, "upstream poll: deadline, still pending");
            return PollOutcome::StillPending {
                attempts,
                last_error,
                retry_after,
            };
        };
        tokio::time::sleep(wait).await;
    }
}
