//! The poll schedule, pure: exact waits, jitter bounds, the deadline, `Retry-After`, policy
//! validation; then properties over random policies, draws and attempt durations.

use std::time::Duration;

use certus_ca::limits::POLL_ATTEMPTS_MAX;
use certus_ca::poller::{PollPolicy, PollPolicyConfig, RetryAfter};
use proptest::prelude::*;

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// The draw that gives every wait its nominal length.
fn no_jitter() -> f64 {
    0.5
}

/// Runs the schedule with zero-length attempts and no `Retry-After`, drawing from `draws`
/// (cycled): the start time of every attempt.
fn attempt_times(policy: &PollPolicy, draws: &[f64]) -> Vec<Duration> {
    let mut draws = draws.iter().copied().cycle();
    let mut jitter = move || draws.next().expect("a cycle never ends");
    let mut times = vec![Duration::ZERO];
    while let Some(wait) = policy.next_wait(
        u32::try_from(times.len()).expect("few attempts"),
        *times.last().expect("one attempt"),
        None,
        &mut jitter,
    ) {
        times.push(*times.last().expect("one attempt") + wait);
    }
    times
}

#[test]
fn the_default_schedule_is_the_seeds_multiplied_by_three_and_capped() {
    let policy = PollPolicy::default();
    assert_eq!(policy.config(), PollPolicyConfig::default());
    let nominal: Vec<Duration> = (1..=8)
        .map(|attempts| policy.nominal_wait(attempts))
        .collect();
    assert_eq!(
        nominal,
        [5, 15, 45, 135, 300, 300, 300, 300].map(secs).to_vec()
    );
    assert_eq!(policy.max_wait(), secs(600));
}

#[test]
fn without_jitter_the_attempts_land_on_the_schedule_and_the_last_at_the_deadline() {
    let policy = PollPolicy::default();
    // 0, +5, +15, +45, +2 m 15 s, +5 m, then the 5 m wait is clamped to the 100 s left.
    assert_eq!(
        attempt_times(&policy, &[0.5]),
        [0, 5, 20, 65, 200, 500, 600].map(secs).to_vec()
    );
    assert_eq!(policy.attempts_max(), 7);
}

#[test]
fn jitter_spreads_each_wait_by_twenty_percent_either_way() {
    let policy = PollPolicy::default();
    let wait = |draw: f64, attempts: u32| {
        let mut jitter = move || draw;
        policy
            .next_wait(attempts, Duration::ZERO, None, &mut jitter)
            .expect("before the deadline")
    };
    assert_eq!(wait(0.0, 1), secs(4));
    assert_eq!(wait(0.5, 1), secs(5));
    assert_eq!(wait(0.25, 1), Duration::from_millis(4_500));
    let highest = wait(0.999_999_9, 1);
    assert!(
        highest < secs(6) && highest > Duration::from_millis(5_999),
        "{highest:?}"
    );
    assert_eq!(wait(0.0, 5), secs(240));
    let highest = wait(0.999_999_9, 5);
    assert!(
        highest < secs(360) && highest > Duration::from_millis(359_999),
        "{highest:?}"
    );
}

#[test]
fn a_policy_without_jitter_ignores_the_draw() {
    let policy = PollPolicy::new(PollPolicyConfig {
        jitter_percent: 0,
        ..PollPolicyConfig::default()
    })
    .expect("valid");
    assert_eq!(
        attempt_times(&policy, &[0.0, 0.99, 0.3]),
        [0, 5, 20, 65, 200, 500, 600].map(secs).to_vec()
    );
}

#[test]
fn the_last_wait_is_clamped_to_the_deadline_and_nothing_follows_it() {
    let policy = PollPolicy::default();
    let mut jitter = no_jitter;
    // 100 s left, a 5 m wait due: the attempt lands at the deadline.
    assert_eq!(
        policy.next_wait(6, secs(500), None, &mut jitter),
        Some(secs(100))
    );
    // 1 ms left: still one more attempt, at the deadline.
    assert_eq!(
        policy.next_wait(2, secs(600) - Duration::from_millis(1), None, &mut jitter),
        Some(Duration::from_millis(1))
    );
    // At or past the deadline: give up.
    assert_eq!(policy.next_wait(7, secs(600), None, &mut jitter), None);
    assert_eq!(policy.next_wait(3, secs(900), None, &mut jitter), None);
}

#[test]
fn a_slow_attempt_eats_into_the_schedule_not_past_the_deadline() {
    // Attempts that take 30 s each: the waits stay nominal until the deadline clamps one.
    let policy = PollPolicy::default();
    let mut jitter = no_jitter;
    let attempt = secs(30);
    let mut starts = vec![Duration::ZERO];
    let mut now = attempt;
    while let Some(wait) = policy.next_wait(
        u32::try_from(starts.len()).expect("few"),
        now,
        None,
        &mut jitter,
    ) {
        starts.push(now + wait);
        now += wait + attempt;
    }
    assert_eq!(starts, [0, 35, 80, 155, 320, 600].map(secs).to_vec());
}

#[test]
fn retry_after_longer_than_the_schedule_is_the_wait_spread_upwards_only() {
    let policy = PollPolicy::default();
    let wait = |draw: f64, retry_after: u64| {
        let mut jitter = move || draw;
        policy
            .next_wait(1, Duration::ZERO, Some(secs(retry_after)), &mut jitter)
            .expect("before the deadline")
    };
    assert_eq!(wait(0.0, 60), secs(60));
    assert_eq!(wait(0.5, 60), secs(66));
    let highest = wait(0.999_999_9, 60);
    assert!(highest >= secs(60) && highest < secs(72), "{highest:?}");
    // Just above the jittered schedule (4 s at draw 0): Retry-After still wins.
    assert_eq!(wait(0.0, 5), secs(5));
}

#[test]
fn retry_after_shorter_than_the_schedule_changes_nothing() {
    let policy = PollPolicy::default();
    let mut jitter = no_jitter;
    assert_eq!(
        policy.next_wait(2, secs(5), Some(secs(1)), &mut jitter),
        Some(secs(15))
    );
    assert_eq!(
        policy.next_wait(2, secs(5), Some(Duration::ZERO), &mut jitter),
        Some(secs(15))
    );
}

#[test]
fn retry_after_up_to_the_deadline_is_clamped_past_it_gives_up() {
    let policy = PollPolicy::default();
    let mut draws = 0_u32;
    let mut jitter = || {
        draws += 1;
        0.5
    };
    // 10 s left, the CA asks for exactly 10 s: the 5 m wait is clamped to the deadline, which is
    // not before the CA's time.
    assert_eq!(
        policy.next_wait(6, secs(590), Some(secs(10)), &mut jitter),
        Some(secs(10))
    );
    // It asks for 11 s: calling back at the deadline would be early, so stop now.
    assert_eq!(
        policy.next_wait(6, secs(590), Some(secs(11)), &mut jitter),
        None
    );
    // A CA asking for a year at the first attempt.
    assert_eq!(
        policy.next_wait(1, Duration::ZERO, Some(secs(365 * 86_400)), &mut jitter),
        None
    );
    assert_eq!(draws, 1, "only a wait draws");
}

#[test]
fn retry_after_reads_seconds_and_all_three_http_date_formats() {
    assert_eq!(RetryAfter::parse("120"), Some(RetryAfter::Delay(secs(120))));
    assert_eq!(
        RetryAfter::parse(" 0 "),
        Some(RetryAfter::Delay(Duration::ZERO))
    );
    assert_eq!(
        RetryAfter::parse("99999999999999999999999"),
        Some(RetryAfter::Delay(secs(u64::MAX)))
    );
    let at = Some(RetryAfter::At {
        unix_ms: 784_111_777_000,
    });
    assert_eq!(RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT"), at);
    assert_eq!(RetryAfter::parse("Sunday, 06-Nov-94 08:49:37 GMT"), at);
    assert_eq!(RetryAfter::parse("Sun Nov  6 08:49:37 1994"), at);
    for bad in ["", "-5", "1.5", "soon", "Sun, 06 Nov 1994"] {
        assert_eq!(RetryAfter::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn an_http_date_is_a_delay_from_the_callers_clock() {
    let at = RetryAfter::At {
        unix_ms: 784_111_777_000,
    };
    assert_eq!(at.delay(784_111_747_000), secs(30));
    assert_eq!(at.delay(784_111_777_000), Duration::ZERO);
    assert_eq!(at.delay(784_111_999_000), Duration::ZERO, "a date past");
    assert_eq!(RetryAfter::Delay(secs(7)).delay(0), secs(7));
}

#[test]
fn a_bad_policy_names_the_field() {
    let default = PollPolicyConfig::default();
    let field_of = |config: PollPolicyConfig| PollPolicy::new(config).expect_err("invalid").field;
    assert_eq!(
        field_of(PollPolicyConfig {
            first_wait_ms: 0,
            ..default
        }),
        "first_wait_ms"
    );
    for factor in [0, 11] {
        assert_eq!(field_of(PollPolicyConfig { factor, ..default }), "factor");
    }
    assert_eq!(
        field_of(PollPolicyConfig {
            cap_ms: 4_999,
            ..default
        }),
        "cap_ms"
    );
    assert_eq!(
        field_of(PollPolicyConfig {
            jitter_percent: 51,
            ..default
        }),
        "jitter_percent"
    );
    for max_wait_ms in [0, 8 * 24 * 3_600_000] {
        assert_eq!(
            field_of(PollPolicyConfig {
                max_wait_ms,
                ..default
            }),
            "max_wait_ms"
        );
    }
    // Every field in range, but 1 ms waits for an hour would allow millions of attempts.
    let error = PollPolicy::new(PollPolicyConfig {
        first_wait_ms: 1,
        factor: 1,
        cap_ms: 1,
        jitter_percent: 0,
        max_wait_ms: 3_600_000,
    })
    .expect_err("too many attempts");
    assert_eq!(error.field, "max_wait_ms");
    assert!(
        error.to_string().contains("3600001"),
        "the message says how many attempts: {error}"
    );
}

#[test]
fn a_long_approval_window_is_a_valid_policy() {
    // The seed's example: a day for orders that wait on a human approval.
    let policy = PollPolicy::new(PollPolicyConfig {
        max_wait_ms: 24 * 3_600_000,
        ..PollPolicyConfig::default()
    })
    .expect("valid");
    assert!(policy.attempts_max() <= POLL_ATTEMPTS_MAX);
    // 0, 4, 16, 52, 160 s, then every 240 s below a day: 364 starts, and one at the deadline.
    assert_eq!(policy.attempts_max(), 365);
}

#[test]
fn a_configuration_file_may_set_only_some_fields_and_no_unknown_ones() {
    let config: PollPolicyConfig =
        serde_json::from_str(r#"{"max_wait_ms": 60000}"#).expect("parses");
    assert_eq!(
        config,
        PollPolicyConfig {
            max_wait_ms: 60_000,
            ..PollPolicyConfig::default()
        }
    );
    let error =
        serde_json::from_str::<PollPolicyConfig>(r#"{"max_wait": 60}"#).expect_err("unknown field");
    assert!(error.to_string().contains("max_wait"), "{error}");
}

/// Policies the validation accepts, over a wide range.
fn policies() -> impl Strategy<Value = PollPolicy> {
    (
        1_u64..20_000,
        1_u32..=10,
        0_u64..400_000,
        0_u32..=50,
        1_u64..4 * 3_600_000,
    )
        .prop_filter_map(
            "too many attempts",
            |(first_wait_ms, factor, extra_cap_ms, jitter_percent, max_wait_ms)| {
                PollPolicy::new(PollPolicyConfig {
                    first_wait_ms,
                    factor,
                    cap_ms: first_wait_ms + extra_cap_ms,
                    jitter_percent,
                    max_wait_ms,
                })
                .ok()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_wait_is_within_the_jitter_of_the_nominal_but_the_clamped_last(
        policy in policies(),
        draws in prop::collection::vec(0.0_f64..1.0, 1..64),
        attempt_ms in prop::collection::vec(0_u64..5_000, 1..64),
    ) {
        let mut draws_cycle = draws.iter().copied().cycle();
        let mut jitter = move || draws_cycle.next().expect("endless");
        let mut attempt_ms = attempt_ms.iter().copied().cycle();
        let mut starts = vec![Duration::ZERO];
        let mut now = Duration::from_millis(attempt_ms.next().expect("endless"));
        loop {
            let attempts = u32::try_from(starts.len()).expect("bounded below");
            prop_assert!(attempts <= policy.attempts_max());
            let Some(wait) = policy.next_wait(attempts, now, None, &mut jitter) else {
                break;
            };
            let nominal = policy.nominal_wait(attempts).as_nanos();
            let spread = nominal * u128::from(policy.jitter_percent()) / 100;
            let remaining = policy.max_wait() - now;
            if wait != remaining {
                prop_assert!(wait.as_nanos() >= nominal - spread, "{wait:?} below {nominal}");
                prop_assert!(wait.as_nanos() <= nominal + spread, "{wait:?} above {nominal}");
            } else {
                prop_assert!(wait.as_nanos() <= nominal + spread, "clamping only shortens");
            }
            prop_assert!(!wait.is_zero());
            let start = now + wait;
            prop_assert!(start <= policy.max_wait(), "attempt at {start:?}");
            starts.push(start);
            now = start + Duration::from_millis(attempt_ms.next().expect("endless"));
        }
        // Giving up happens only once the deadline is reached.
        prop_assert!(now >= policy.max_wait());
    }

    #[test]
    fn with_retry_after_no_wait_is_shorter_and_no_attempt_is_late(
        policy in policies(),
        draws in prop::collection::vec(0.0_f64..1.0, 1..64),
        retry_after_ms in prop::collection::vec(prop::option::of(0_u64..600_000), 1..64),
    ) {
        let mut draws_cycle = draws.iter().copied().cycle();
        let mut jitter = move || draws_cycle.next().expect("endless");
        let mut retry_afters = retry_after_ms.iter().copied().cycle();
        let mut now = Duration::ZERO;
        let mut attempts = 1_u32;
        loop {
            prop_assert!(attempts <= policy.attempts_max());
            let retry_after = retry_afters.next().expect("endless").map(Duration::from_millis);
            let Some(wait) = policy.next_wait(attempts, now, retry_after, &mut jitter) else {
                // Only the deadline, or a CA asking past it, stops the polling.
                prop_assert!(
                    now >= policy.max_wait()
                        || retry_after.is_some_and(|retry_after| now + retry_after > policy.max_wait())
                );
                break;
            };
            if let Some(retry_after) = retry_after {
                prop_assert!(wait >= retry_after, "{wait:?} before the CA's {retry_after:?}");
            }
            now += wait;
            prop_assert!(now <= policy.max_wait());
            attempts += 1;
        }
    }

    #[test]
    fn the_attempts_bound_is_reached_with_the_shortest_waits(policy in policies()) {
        let times = attempt_times(&policy, &[0.0]);
        prop_assert_eq!(times.len(), usize::try_from(policy.attempts_max()).expect("small"));
        prop_assert_eq!(*times.last().expect("one"), policy.max_wait());
    }
}
