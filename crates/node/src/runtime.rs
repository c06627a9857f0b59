//! openraft's runtime under the simulation: spawning, timers and randomness from madsim.
//!
//! openraft 0.9 reaches the runtime only through [`AsyncRuntime`], so the real node and the
//! simulated node differ in this module alone. `Instant` stays tokio's: it reads the std clock,
//! which madsim simulates. madsim's own `timeout` future is not `Send`, hence [`SendTimeout`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioInstant, TokioRuntime};

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

fn std_instant(deadline: TokioInstant) -> std::time::Instant {
    deadline.into_std()
}

impl AsyncRuntime for MadsimRuntime {
    type JoinError = madsim::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = madsim::task::JoinHandle<T>;
    type Sleep = madsim::time::Sleep;
    type Instant = TokioInstant;
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
        madsim::time::sleep(duration)
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
            sleep: Box::pin(madsim::time::sleep(duration)),
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
