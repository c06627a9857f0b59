//! openraft's runtime under the simulation: spawning, timers and randomness from madsim.
//!
//! openraft 0.9 reaches the runtime only through [`AsyncRuntime`], so the real node and the
//! simulated node differ in this module alone. madsim's own `timeout` future is not `Send`, hence
//! [`SendTimeout`].
//!
//! madsim has one global clock; clock drift per node is added here. [`skew::set_drift_ppm`] gives
//! a simulated machine a rate, and every [`SkewedInstant`], sleep and timeout openraft takes on
//! that machine runs at it: a node whose clock is 2 % fast times out of elections 2 % early. The
//! node's wall clock ([`crate::Clock`]) is skewed by the same rate (and an offset) by the harness.

use std::future::Future;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};

/// Per-machine clock rates of the current simulation run.
pub mod skew {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    /// The rates of one run: madsim runs a simulation on one thread, so a thread-local is the
    /// run's own (and [`reset`] clears what an earlier run on the thread left).
    #[derive(Default)]
    struct Rates {
        /// The global instant from which drift accumulates.
        anchor: Option<Instant>,
        /// Drift per madsim machine, in parts per million (+ runs fast).
        ppm: BTreeMap<u64, i64>,
    }

    thread_local! {
        static RATES: RefCell<Rates> = RefCell::new(Rates::default());
    }

    /// Forgets every rate and anchors drift at the current simulated instant. The harness calls
    /// it at the start of every run.
    pub fn reset() {
        RATES.with(|rates| {
            *rates.borrow_mut() = Rates {
                anchor: Some(Instant::now()),
                ppm: BTreeMap::new(),
            };
        });
    }

    /// Makes the clock of madsim machine `machine` run `ppm` parts per million fast (or slow).
    pub fn set_drift_ppm(machine: madsim::task::NodeId, ppm: i64) {
        let key = super::machine_key(machine);
        RATES.with(|rates| {
            let mut rates = rates.borrow_mut();
            rates.anchor.get_or_insert_with(Instant::now);
            rates.ppm.insert(key, ppm);
        });
    }

    /// The drift of the machine the calling task runs on, with the run's anchor.
    pub(super) fn current() -> Option<(Instant, i64)> {
        let machine = super::machine_key(madsim::plugin::node());
        RATES.with(|rates| {
            let rates = rates.borrow();
            let ppm = *rates.ppm.get(&machine)?;
            Some((rates.anchor?, ppm))
        })
    }

    /// `elapsed` of global time as a machine running `ppm` fast measures it.
    pub(super) fn to_local(elapsed: Duration, ppm: i64) -> Duration {
        scale(elapsed, 1_000_000 + i128::from(ppm), 1_000_000)
    }

    /// `elapsed` of a machine running `ppm` fast, in global time.
    pub(super) fn to_global(elapsed: Duration, ppm: i64) -> Duration {
        scale(elapsed, 1_000_000, 1_000_000 + i128::from(ppm))
    }

    fn scale(elapsed: Duration, numerator: i128, denominator: i128) -> Duration {
        let nanos = i128::try_from(elapsed.as_nanos()).unwrap_or(i128::MAX / 2_000_000);
        let scaled = nanos.saturating_mul(numerator.max(1)) / denominator.max(1);
        Duration::from_nanos(u64::try_from(scaled.max(0)).unwrap_or(u64::MAX))
    }
}

/// A module holding one extra delay per simulated machine for the current run (what a fault
/// adds), with `reset`, `set` and the calling machine's `current`.
macro_rules! per_machine_delay {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub mod $name {
            use std::cell::RefCell;
            use std::collections::BTreeMap;
            use std::time::Duration;

            thread_local! {
                // One simulation runs on one thread; [`reset`] clears what an earlier run left.
                static EXTRA: RefCell<BTreeMap<u64, Duration>> =
                    const { RefCell::new(BTreeMap::new()) };
            }

            /// No machine delayed. The harness calls it at the start of every run.
            pub fn reset() {
                EXTRA.with(|extra| extra.borrow_mut().clear());
            }

            /// Adds `extra` from now on madsim machine `machine` (zero: nothing).
            pub fn set(machine: madsim::task::NodeId, extra: Duration) {
                let key = super::machine_key(machine);
                EXTRA.with(|table| {
                    let mut table = table.borrow_mut();
                    if extra.is_zero() {
                        table.remove(&key);
                    } else {
                        table.insert(key, extra);
                    }
                });
            }

            /// What the calling task's machine adds.
            pub(super) fn current() -> Duration {
                let machine = super::machine_key(madsim::plugin::node());
                EXTRA.with(|table| table.borrow().get(&machine).copied().unwrap_or_default())
            }
        }
    };
}

per_machine_delay!(
    /// Per-machine fsync slowness of the current simulation run: a slow disk adds to every sync
    /// of the machine's Raft log.
    slow_disk
);

per_machine_delay!(
    /// Per-machine apply slowness of the current simulation run: a starved machine adds to every
    /// batch of entries its state machine applies, so its applied index trails its commit index.
    slow_apply
);

fn machine_key(machine: madsim::task::NodeId) -> u64 {
    // NodeId shows only through Display ("1", "2", ...).
    machine.to_string().parse().unwrap_or(u64::MAX)
}

/// openraft's `Instant` on a simulated machine: the global simulated instant, stretched by the
/// machine's drift since the run's anchor. Instants are compared only on the machine that took
/// them, as openraft does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SkewedInstant(std::time::Instant);

impl SkewedInstant {
    /// The global instant at which this machine's clock reads `self`.
    fn to_global(self) -> std::time::Instant {
        match skew::current() {
            Some((anchor, ppm)) if self.0 > anchor => {
                anchor + skew::to_global(self.0 - anchor, ppm)
            }
            _ => self.0,
        }
    }
}

impl openraft::Instant for SkewedInstant {
    fn now() -> Self {
        let now = std::time::Instant::now();
        match skew::current() {
            Some((anchor, ppm)) if now > anchor => {
                SkewedInstant(anchor + skew::to_local(now - anchor, ppm))
            }
            _ => SkewedInstant(now),
        }
    }
}

impl Add<Duration> for SkewedInstant {
    type Output = SkewedInstant;
    fn add(self, duration: Duration) -> SkewedInstant {
        SkewedInstant(self.0 + duration)
    }
}

impl AddAssign<Duration> for SkewedInstant {
    fn add_assign(&mut self, duration: Duration) {
        self.0 += duration;
    }
}

impl Sub<Duration> for SkewedInstant {
    type Output = SkewedInstant;
    fn sub(self, duration: Duration) -> SkewedInstant {
        SkewedInstant(self.0 - duration)
    }
}

impl SubAssign<Duration> for SkewedInstant {
    fn sub_assign(&mut self, duration: Duration) {
        self.0 -= duration;
    }
}

impl Sub<SkewedInstant> for SkewedInstant {
    type Output = Duration;
    fn sub(self, earlier: SkewedInstant) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }
}

/// A local duration on the calling machine, in global simulated time.
fn global_duration(duration: Duration) -> Duration {
    match skew::current() {
        Some((_, ppm)) => skew::to_global(duration, ppm),
        None => duration,
    }
}

/// The madsim runtime, for `TypeConfig::AsyncRuntime` under `cfg(madsim)`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MadsimRuntime;

/// A timeout that is `Send` whenever the wrapped future is.
#[derive(Debug)]
pub struct SendTimeout<T> {
    future: Pin<Box<T>>,
    sleep: Pin<Box<madsim::time::Sleep>>,
}

/// The error of a [`SendTimeout`] that ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed;

impl<R, T: Future<Output = R>> Future for SendTimeout<T> {
    type Output = Result<R, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(output) = self.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn std_instant(deadline: SkewedInstant) -> std::time::Instant {
    deadline.to_global()
}

impl AsyncRuntime for MadsimRuntime {
    type JoinError = madsim::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = madsim::task::JoinHandle<T>;
    type Sleep = madsim::time::Sleep;
    type Instant = SkewedInstant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = SendTimeout<T>;
    type ThreadLocalRng = madsim::rand::GlobalRng;
    // Oneshots need no runtime: openraft's tokio ones serve as they are.
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        madsim::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        madsim::time::sleep(global_duration(duration))
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        madsim::time::sleep_until(std_instant(deadline))
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        SendTimeout {
            future: Box::pin(future),
            sleep: Box::pin(madsim::time::sleep(global_duration(duration))),
        }
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        SendTimeout {
            future: Box::pin(future),
            sleep: Box::pin(madsim::time::sleep_until(std_instant(deadline))),
        }
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        madsim::rand::thread_rng()
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}

/// How long a simulated `fdatasync` of the Raft log takes (µs): usually about what an SSD's
/// takes, and one in [`SIMULATED_SLOW_SYNC_ONE_IN`] as long as a busy or cloud disk's, longer
/// than a network round trip — so a crash often finds appends written but not yet synced, and
/// an acknowledgement that ran ahead of its sync would reach clients before the bytes are safe.
const SIMULATED_SYNC_LATENCY_US: std::ops::RangeInclusive<u64> = 100..=2_000;
const SIMULATED_SLOW_SYNC_LATENCY_US: std::ops::RangeInclusive<u64> = 2_000..=30_000;
const SIMULATED_SLOW_SYNC_ONE_IN: u32 = 10;

/// How long applying one batch of entries takes (µs): usually a fraction of a millisecond, and
/// one batch in [`SIMULATED_SLOW_APPLY_ONE_IN`] as long as a machine busy elsewhere takes (a
/// garbage-collecting neighbour, a snapshot being encoded) — so a node's applied index trails
/// its commit index, and a read that waits for less than its read index is caught.
const SIMULATED_APPLY_LATENCY_US: std::ops::RangeInclusive<u64> = 20..=500;
const SIMULATED_SLOW_APPLY_LATENCY_US: std::ops::RangeInclusive<u64> = 2_000..=40_000;
const SIMULATED_SLOW_APPLY_ONE_IN: u32 = 10;

/// The state machine's pace on the calling machine: each batch waits a simulated apply latency,
/// plus what a `slow-apply` fault adds.
pub fn simulated_apply_pacer() -> certus_store::ApplyPacer {
    certus_store::ApplyPacer::new(|| {
        let latency = simulated_latency(
            SIMULATED_APPLY_LATENCY_US,
            SIMULATED_SLOW_APPLY_LATENCY_US,
            SIMULATED_SLOW_APPLY_ONE_IN,
        ) + slow_apply::current();
        Box::pin(madsim::time::sleep(global_duration(latency)))
    })
}

/// A latency drawn from the runtime's randomness: `usual_us`, or one time in `slow_one_in`
/// `slow_us`.
fn simulated_latency(
    usual_us: std::ops::RangeInclusive<u64>,
    slow_us: std::ops::RangeInclusive<u64>,
    slow_one_in: u32,
) -> Duration {
    use madsim::rand::Rng as _;
    let mut rng = madsim::rand::thread_rng();
    let latency_us = if rng.gen_ratio(1, slow_one_in) {
        rng.gen_range(slow_us)
    } else {
        rng.gen_range(usual_us)
    };
    Duration::from_micros(latency_us)
}

/// The Raft log's syncs on the calling machine, in place of the flusher thread the simulation
/// cannot run: one task that waits a simulated sync latency, then runs every sync waiting, in
/// order (a group commit). It dies with its machine, so a crash in that window finds the
/// appended bytes unsynced and the simulated files lose or tear them; their appends were
/// never acknowledged.
pub fn simulated_log_sync() -> certus_store::SyncRunner {
    let (jobs, mut waiting) = tokio::sync::mpsc::unbounded_channel::<certus_store::SyncJob>();
    madsim::task::spawn(async move {
        while let Some(first) = waiting.recv().await {
            let latency = simulated_latency(
                SIMULATED_SYNC_LATENCY_US,
                SIMULATED_SLOW_SYNC_LATENCY_US,
                SIMULATED_SLOW_SYNC_ONE_IN,
            ) + slow_disk::current();
            madsim::time::sleep(global_duration(latency)).await;
            first();
            while let Ok(job) = waiting.try_recv() {
                job();
            }
        }
    });
    certus_store::SyncRunner::new(move |job| {
        // A closed channel means the machine's task is gone: the sync never happens.
        let _ = jobs.send(job);
    })
}
