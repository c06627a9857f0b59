//! Signing keys for the simulation, derived from the run's seed.
//!
//! ring draws keys and ECDSA nonces from the operating system's RNG, which madsim cannot
//! intercept, so a key generated inside a run would differ on replay. Keys here come from the
//! seed instead, and Ed25519 signing is deterministic, so a replayed run signs identically. The
//! production signer (ECDSA P-256) and this one sit behind the same signing interface
//! (`certus_ct::signer::Signer`).

use ring::digest;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

/// The Ed25519 key of `purpose` (for example `"ct-log"` or `"node-3"`) in the run of `seed`:
/// its private seed is SHA-256 of the run's seed and the purpose, so every purpose gets its own
/// key and the same run always gets the same ones.
pub fn ed25519(seed: u64, purpose: &str) -> Ed25519KeyPair {
    Ed25519KeyPair::from_seed_unchecked(&ed25519_seed(seed, purpose))
        .expect("any 32 bytes are an Ed25519 private seed")
}

/// The 32-byte private seed of [`ed25519`]`(seed, purpose)`: SHA-256 of the run's seed and the
/// purpose.
pub fn ed25519_seed(seed: u64, purpose: &str) -> [u8; 32] {
    let mut material = seed.to_be_bytes().to_vec();
    material.extend_from_slice(purpose.as_bytes());
    let private = digest::digest(&digest::SHA256, &material);
    let mut out = [0u8; 32];
    out.copy_from_slice(private.as_ref());
    out
}

/// The public key bytes of [`ed25519`]`(seed, purpose)`.
pub fn ed25519_public(seed: u64, purpose: &str) -> Vec<u8> {
    ed25519(seed, purpose).public_key().as_ref().to_vec()
}

#[cfg(test)]
mod tests {
    use ring::signature::{ED25519, UnparsedPublicKey};

    use super::{ed25519, ed25519_public};

    #[test]
    fn a_seed_gives_the_same_key_and_signature_every_time() {
        let message = b"tree head";
        let first = ed25519(42, "ct-log").sign(message);
        let again = ed25519(42, "ct-log").sign(message);
        assert_eq!(first.as_ref(), again.as_ref());
        assert_eq!(ed25519_public(42, "ct-log"), ed25519_public(42, "ct-log"));
        assert_ne!(ed25519_public(42, "ct-log"), ed25519_public(43, "ct-log"));
        assert_ne!(ed25519_public(42, "ct-log"), ed25519_public(42, "node-1"));
        UnparsedPublicKey::new(&ED25519, ed25519_public(42, "ct-log"))
            .verify(message, first.as_ref())
            .expect("the signature verifies with the derived public key");
    }
}
