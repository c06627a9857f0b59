#![allow(dead_code)] // Shared by several test crates; each uses a part.

//! A concrete type configuration for testing the generic store, and a tiny executor.

use std::future::Future;
use std::io::Cursor;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use std::sync::Arc;

use certus_store::{LogStore, Proposal, Responses, SimDisk, SimFiles};

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

/// Segments small enough that a few entries fill one, so tests roll over often.
pub const TEST_SEGMENT_BYTES: u64 = 256;

/// The log store on a simulated disk and simulated files (handles cloned: the test keeps its own
/// to crash them).
pub fn sim_log(disk: &SimDisk, files: &SimFiles) -> LogStore<TestConfig, SimDisk> {
    LogStore::open(
        Arc::new(disk.clone()),
        Arc::new(files.clone()),
        TEST_SEGMENT_BYTES,
    )
    .expect("the log store opens")
}

/// A crash of the simulated machine that loses everything not synced and tears nothing.
pub fn crash(disk: &SimDisk, files: &SimFiles) {
    disk.crash();
    files.crash(&mut |_| 0);
}

/// A deterministic source of randomness for simulated crashes (SplitMix64).
pub fn seeded(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |bound| {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound.max(1)
    }
}

/// Runs `open` again while it fails on the lock a just-dropped sled database still holds: sled's
/// IO threads let go of the file a moment after the last handle is dropped (longer on a loaded
/// machine). Other outcomes, good or bad, are returned as they are.
pub fn after_release<T, E: std::fmt::Display>(
    mut open: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Err(error)
                if error.to_string().contains("lock") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            outcome => return outcome,
        }
    }
}
