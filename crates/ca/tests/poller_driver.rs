//! The async poll driver on tokio's paused clock: the attempts happen at the schedule's virtual
//! times, to the millisecond, and the outcome follows the answers.

#![cfg(not(madsim))]

use std::time::Duration;

use certus_ca::poller::{Answer, Attempt, PollOutcome, PollPolicy, RetryAfter, Step, poll};
use tokio::time::Instant;

fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// A scripted CA: answers in order (the last one repeats), and the virtual time of each call.
struct Script {
    answers: Vec<Answer<Step<&'static str>>>,
    started: Instant,
    calls: Vec<Duration>,
    /// How long each call takes.
    call_time: Duration,
}

impl Script {
    fn new(answers: Vec<Answer<Step<&'static str>>>) -> Script {
        assert!(!answers.is_empty());
        Script {
            answers,
            started: Instant::now(),
            calls: Vec::new(),
            call_time: Duration::ZERO,
        }
    }

    async fn run(&mut self, policy: &PollPolicy, now_unix_ms: u64) -> PollOutcome<&'static str> {
        let mut jitter = || 0.5;
        poll(policy, &mut jitter, || now_unix_ms, self).await
    }
}

impl Attempt for Script {
    type Output = &'static str;

    async fn attempt(&mut self) -> Answer<Step<&'static str>> {
        self.calls.push(self.started.elapsed());
        tokio::time::sleep(self.call_time).await;
        let index = self.calls.len().min(self.answers.len()) - 1;
        self.answers[index].clone()
    }
}

fn answer(step: Step<&'static str>) -> Answer<Step<&'static str>> {
    Answer::new(step)
}

#[tokio::test(start_paused = true)]
async fn a_pending_order_is_polled_on_the_schedule_until_issued() {
    let mut script = Script::new(vec![
        answer(Step::Pending),
        answer(Step::Transient("HTTP 503".to_owned())),
        answer(Step::Pending),
        answer(Step::Ready("certificate")),
    ]);
    let outcome = script.run(&PollPolicy::default(), 0).await;
    assert_eq!(
        outcome,
        PollOutcome::Ready {
            value: "certificate",
            attempts: 4
        }
    );
    assert_eq!(script.calls, [0, 5, 20, 65].map(secs).to_vec());
}

#[tokio::test(start_paused = true)]
async fn still_pending_at_the_deadline_after_one_attempt_at_the_deadline() {
    let mut script = Script::new(vec![
        answer(Step::Transient("HTTP 429".to_owned())),
        answer(Step::Pending),
    ]);
    let started = Instant::now();
    let outcome = script.run(&PollPolicy::default(), 0).await;
    assert_eq!(
        outcome,
        PollOutcome::StillPending {
            attempts: 7,
            last_error: Some("HTTP 429".to_owned()),
            retry_after: None,
        }
    );
    assert_eq!(
        script.calls,
        [0, 5, 20, 65, 200, 500, 600].map(secs).to_vec()
    );
    assert_eq!(started.elapsed(), secs(600), "returns at the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_stops_polling() {
    let mut script = Script::new(vec![
        answer(Step::Pending),
        answer(Step::Failed("HTTP 403".to_owned())),
        answer(Step::Ready("never")),
    ]);
    let outcome = script.run(&PollPolicy::default(), 0).await;
    assert_eq!(
        outcome,
        PollOutcome::Failed {
            reason: "HTTP 403".to_owned(),
            attempts: 2
        }
    );
    assert_eq!(script.calls, [0, 5].map(secs).to_vec());
}

#[tokio::test(start_paused = true)]
async fn retry_after_in_seconds_delays_the_next_attempt() {
    let mut script = Script::new(vec![
        Answer {
            step: Step::Transient("HTTP 429".to_owned()),
            retry_after: Some(RetryAfter::Delay(secs(60))),
        },
        answer(Step::Ready("certificate")),
    ]);
    script.run(&PollPolicy::default(), 0).await;
    // 60 s spread upwards by the draw 0.5: 66 s, not the schedule's 5 s.
    assert_eq!(script.calls, [0, 66].map(secs).to_vec());
}

#[tokio::test(start_paused = true)]
async fn retry_after_as_a_date_is_read_against_the_callers_clock() {
    let now_unix_ms = 1_800_000_000_000;
    let mut script = Script::new(vec![
        Answer {
            step: Step::Pending,
            retry_after: Some(RetryAfter::At {
                unix_ms: now_unix_ms + 100_000,
            }),
        },
        answer(Step::Ready("certificate")),
    ]);
    script.run(&PollPolicy::default(), now_unix_ms).await;
    assert_eq!(script.calls, [0, 110].map(secs).to_vec());
}

#[tokio::test(start_paused = true)]
async fn retry_after_past_the_deadline_stops_at_once() {
    let mut script = Script::new(vec![
        answer(Step::Pending),
        Answer {
            step: Step::Pending,
            retry_after: Some(RetryAfter::Delay(secs(3_600))),
        },
        answer(Step::Ready("never")),
    ]);
    let started = Instant::now();
    let outcome = script.run(&PollPolicy::default(), 0).await;
    assert_eq!(
        outcome,
        PollOutcome::StillPending {
            attempts: 2,
            last_error: None,
            retry_after: Some(secs(3_600)),
        }
    );
    assert_eq!(started.elapsed(), secs(5), "gave up without waiting");
}

#[tokio::test(start_paused = true)]
async fn slow_attempts_never_start_after_the_deadline() {
    let mut script = Script::new(vec![answer(Step::Transient("timeout".to_owned()))]);
    script.call_time = secs(30);
    let started = Instant::now();
    let outcome = script.run(&PollPolicy::default(), 0).await;
    assert_eq!(
        outcome,
        PollOutcome::StillPending {
            attempts: 6,
            last_error: Some("timeout".to_owned()),
            retry_after: None,
        }
    );
    assert_eq!(script.calls, [0, 35, 80, 155, 320, 600].map(secs).to_vec());
    // The attempt that started at the deadline runs to its end.
    assert_eq!(started.elapsed(), secs(630));
}

#[tokio::test(start_paused = true)]
async fn an_immediate_answer_makes_one_attempt_and_no_wait() {
    let mut script = Script::new(vec![answer(Step::Ready("certificate"))]);
    let started = Instant::now();
    let outcome = script.run(&PollPolicy::default(), 0).await;
    assert_eq!(
        outcome,
        PollOutcome::Ready {
            value: "certificate",
            attempts: 1
        }
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_jitter_source_is_drawn_once_per_wait() {
    let mut draws = Vec::new();
    let mut calls = 0_u32;
    let outcome = poll(
        &PollPolicy::default(),
        &mut || {
            draws.push(());
            0.0
        },
        || 0,
        &mut || {
            calls += 1;
            async { Answer::new(Step::<()>::Pending) }
        },
    )
    .await;
    // With the shortest waits the schedule reaches its bound: 4, 12, 36, 108, 240 s, then the
    // clamped 200 s.
    assert_eq!(
        outcome,
        PollOutcome::StillPending {
            attempts: PollPolicy::default().attempts_max(),
            last_error: None,
            retry_after: None,
        }
    );
    assert_eq!(calls, 7);
    assert_eq!(draws.len(), 6);
}
