//! Timeouts, deadlines and the backoff schedule.

use std::time::Duration;

/// How long the client waits, and how often it tries again.
///
/// Build it from [`ClientConfig::default`] and change the fields you care about:
///
/// ```
/// use std::time::Duration;
/// use certus_client::ClientConfig;
///
/// let config = ClientConfig {
///     deadline: Duration::from_secs(30),
///     ..ClientConfig::default()
/// };
/// assert_eq!(config.attempt_timeout, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long one attempt (one RPC to one node) may take. Default 5 s.
    pub attempt_timeout: Duration,
    /// How long a call may take in all, retries and backoff included. Default 15 s.
    pub deadline: Duration,
    /// The most attempts a call makes. Default 20 (the deadline usually ends a call first).
    pub max_attempts: u32,
    /// The backoff ceiling after the first failed attempt; it doubles after each further one.
    /// Default 50 ms.
    pub backoff_initial: Duration,
    /// The largest backoff ceiling. Default 1 s.
    pub backoff_max: Duration,
    /// Mixed into the backoff jitter, so that clients with different seeds spread their retries
    /// apart. Default: this process's id.
    pub jitter_seed: u64,
    /// How long opening a connection may take. Default 1 s.
    pub connect_timeout: Duration,
    /// How long each `Admin/Status` asked during leader discovery may take. Default 1 s.
    pub discovery_timeout: Duration,
    /// The per-attempt timeout, and the least overall deadline, of the Admin calls that wait on
    /// the cluster: `AddLearner` (which waits for the learner to catch up), `ChangeMembership`
    /// (the node allows these 60 s) and `TriggerSnapshot`. Default 65 s.
    pub admin_timeout: Duration,
    /// Send only to the configured endpoints. By default (`false`) the client also sends to a
    /// leader that the nodes name but that is not one of its endpoints, once it has answered;
    /// set this to make every request go through the given nodes (for example to test that a
    /// particular follower serves reads).
    pub pin_to_endpoints: bool,
    /// TLS to the cluster (its CA, and this client's certificate). Default `None`: plain text,
    /// for nodes run without TLS.
    pub tls: Option<crate::ClientTls>,
    /// A bearer token sent with every call, for clients without a certificate. Default `None`.
    pub token: Option<crate::BearerToken>,
    /// Number every write in a client session (`certus.v1.Clients`), so that it is applied at
    /// most once however often it is retried, and never after the client gave up on it and moved
    /// on. Every write is then retried like a read. Default `true`; `false` sends writes
    /// unnumbered (one registration fewer, for one-shot tools), and retries writes that must not
    /// be applied twice only when nothing was proposed.
    pub exactly_once: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            attempt_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(15),
            max_attempts: 20,
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(1),
            jitter_seed: u64::from(std::process::id()),
            connect_timeout: Duration::from_secs(1),
            discovery_timeout: Duration::from_secs(1),
            admin_timeout: Duration::from_secs(65),
            pin_to_endpoints: false,
            tls: None,
            token: None,
            exactly_once: true,
        }
    }
}

impl ClientConfig {
    /// The backoff ceiling after failed attempt number `attempt` (0 for the first):
    /// `backoff_initial * 2^attempt`, capped at `backoff_max`.
    pub fn backoff_ceiling(&self, attempt: u32) -> Duration {
        let factor = 1_u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }

    /// How long to wait after failed attempt number `attempt` (0 for the first): a duration
    /// between half the [ceiling](Self::backoff_ceiling) and the ceiling, chosen by a hash of
    /// the attempt number and [`jitter_seed`](Self::jitter_seed) ("equal jitter"). The same
    /// config and attempt always give the same wait; no random number generator is involved.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self.backoff_ceiling(attempt);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_nanos()).unwrap_or(u64::MAX);
        let jitter = match spread.checked_add(1) {
            Some(range) => mix(self.jitter_seed, attempt) % range,
            None => mix(self.jitter_seed, attempt),
        };
        half + Duration::from_nanos(jitter)
    }
}

/// A well-spread 64-bit hash of the seed and the attempt (SplitMix64's finalizer).
fn mix(seed: u64, attempt: u32) -> u64 {
    let mut z = seed
        .wrapping_add(u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let config = ClientConfig::default();
        assert_eq!(config.attempt_timeout, Duration::from_secs(5));
        assert_eq!(config.deadline, Duration::from_secs(15));
        assert_eq!(config.backoff_initial, Duration::from_millis(50));
        assert_eq!(config.backoff_max, Duration::from_secs(1));
    }

    #[test]
    fn the_ceiling_doubles_from_the_initial_backoff_up_to_the_maximum() {
        let config = ClientConfig::default();
        let ceilings: Vec<u64> = (0..8)
            .map(|attempt| {
                u64::try_from(config.backoff_ceiling(attempt).as_millis()).expect("small")
            })
            .collect();
        assert_eq!(ceilings, vec![50, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(config.backoff_ceiling(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn every_backoff_lies_between_half_the_ceiling_and_the_ceiling() {
        for seed in [0, 1, 42, u64::MAX] {
            let config = ClientConfig {
                jitter_seed: seed,
                ..ClientConfig::default()
            };
            for attempt in 0..200 {
                let ceiling = config.backoff_ceiling(attempt);
                let wait = config.backoff(attempt);
                assert!(wait <= ceiling, "attempt {attempt}: {wait:?} > {ceiling:?}");
                assert!(
                    wait >= ceiling / 2,
                    "attempt {attempt}: {wait:?} < half {ceiling:?}"
                );
                assert!(wait <= config.backoff_max);
            }
        }
    }

    #[test]
    fn the_backoff_is_deterministic_and_jittered() {
        let config = ClientConfig {
            jitter_seed: 7,
            ..ClientConfig::default()
        };
        let first: Vec<Duration> = (0..20).map(|attempt| config.backoff(attempt)).collect();
        let again: Vec<Duration> = (0..20).map(|attempt| config.backoff(attempt)).collect();
        assert_eq!(first, again, "same seed, same schedule");
        // Once the ceiling is flat, the jitter still varies the waits.
        let flat: std::collections::BTreeSet<Duration> = first[6..].iter().copied().collect();
        assert!(flat.len() > 1, "jitter varies the waits: {flat:?}");
        let other = ClientConfig {
            jitter_seed: 8,
            ..ClientConfig::default()
        };
        let moved: Vec<Duration> = (0..20).map(|attempt| other.backoff(attempt)).collect();
        assert_ne!(first, moved, "another seed, another schedule");
    }

    #[test]
    fn degenerate_configs_do_not_panic() {
        let zero = ClientConfig {
            backoff_initial: Duration::ZERO,
            backoff_max: Duration::ZERO,
            ..ClientConfig::default()
        };
        assert_eq!(zero.backoff(0), Duration::ZERO);
        assert_eq!(zero.backoff(u32::MAX), Duration::ZERO);
        let huge = ClientConfig {
            backoff_initial: Duration::MAX,
            backoff_max: Duration::MAX,
            ..ClientConfig::default()
        };
        assert!(huge.backoff(3) >= Duration::MAX / 2);
        let inverted = ClientConfig {
            backoff_initial: Duration::from_secs(5),
            backoff_max: Duration::from_secs(1),
            ..ClientConfig::default()
        };
        assert!(inverted.backoff(0) <= Duration::from_secs(1));
    }
}
