#![allow(dead_code)] // Shared by several test crates; each uses a part.

//! A concrete type configuration for testing the generic store, and a tiny executor.

use std::future::Future;
use std::io::Cursor;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use certus_store::{Proposal, Responses};

openraft::declare_raft_types!(
    pub TestConfig:
        D = Proposal,
        R = Responses,
);

/// Runs a future that never waits on anything (the store's futures do their IO synchronously).
pub fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a store future waited"),
    }
}
