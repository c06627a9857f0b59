//! The node's randomness: every draw the application makes goes through here (openraft draws
//! its own through the runtime). The system's source in production; madsim's seeded generator
//! in the simulation, so a seed replays a run.

/// A number in [0, bound) from the runtime's randomness (`bound` > 0).
pub(crate) fn random_below(bound: u64) -> u64 {
    let mut bytes = [0u8; 8];
    fill_random(&mut bytes);
    u64::from_le_bytes(bytes) % bound
}

/// Fills `bytes` from the runtime's randomness.
#[cfg(not(madsim))]
pub(crate) fn fill_random(bytes: &mut [u8]) {
    use ring::rand::SecureRandom as _;
    ring::rand::SystemRandom::new()
        .fill(bytes)
        .expect("the system's random source works");
}

/// Fills `bytes` from the runtime's randomness.
#[cfg(madsim)]
pub(crate) fn fill_random(bytes: &mut [u8]) {
    use madsim::rand::RngCore as _;
    madsim::rand::thread_rng().fill_bytes(bytes);
}
