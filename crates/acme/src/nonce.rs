//! A node's anti-replay nonces (RFC 8555 §6.5): the ones it issued that are not used yet, in
//! bounded memory.
//!
//! A nonce is the base64url of 19 bytes: the node's 3-byte [`NoncePrefix`], then 16 random bytes
//! the caller draws (this crate has no randomness of its own). As text that is the prefix's 4
//! characters, then 22. Nonces of different nodes therefore never collide, and a node tells its
//! own from another's by the first 4 characters. The whole is valid base64url, as RFC 8555
//! §6.5.1 requires of a nonce.
//!
//! **Invariants:** [`NonceStore::consume`] accepts a nonce at most once, and only one this store
//! issued; at most `capacity` nonces are outstanding, and past that the oldest is forgotten
//! (first in, first out), so a nonce among the last `capacity` issued and not yet used is always
//! accepted. The store is not replicated: a node restart forgets its nonces, and their clients
//! get `badNonce` and retry with the fresh nonce that answer carries.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroUsize;

use crate::b64;
use crate::limits::NONCES_OUTSTANDING_MAX;

/// Random bytes per nonce: 128 bits, so that guessing an outstanding nonce is hopeless.
pub const NONCE_RANDOM_BYTES: usize = 16;
/// Bytes of the node prefix: 3, which base64url writes as exactly 4 characters.
pub const NONCE_PREFIX_BYTES: usize = 3;
/// Characters of the node prefix as text.
pub const NONCE_PREFIX_CHARS: usize = 4;
/// Characters of a nonce: the prefix's 4, then the random bytes' 22.
pub const NONCE_CHARS: usize = 26;

/// Which node issued a nonce: 3 bytes, written as 4 base64url characters at the nonce's start.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NoncePrefix([u8; NONCE_PREFIX_BYTES]);

/// Why a text or a node id cannot be a nonce prefix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoncePrefixError {
    /// The text is not exactly 4 base64url characters.
    #[error("a nonce prefix is exactly 4 base64url characters (A-Z a-z 0-9 - _), not {0:?}")]
    Text(String),
    /// The node id does not fit in 3 bytes.
    #[error("node id {0} does not fit a nonce prefix, which holds ids below 2^24")]
    NodeId(u64),
}

impl NoncePrefix {
    /// The prefix written as `text`: exactly 4 base64url characters (every such text is one).
    pub fn new(text: &str) -> Result<NoncePrefix, NoncePrefixError> {
        let invalid = || NoncePrefixError::Text(text.to_owned());
        if text.len() != NONCE_PREFIX_CHARS {
            return Err(invalid());
        }
        let bytes = b64::decode(text).map_err(|_| invalid())?;
        <[u8; NONCE_PREFIX_BYTES]>::try_from(bytes.as_slice())
            .map(NoncePrefix)
            .map_err(|_| invalid())
    }

    /// The prefix of a node id below 2^24 (big-endian), so that every node of a cluster gets
    /// its own.
    pub fn from_node_id(node_id: u64) -> Result<NoncePrefix, NoncePrefixError> {
        let bytes = node_id.to_be_bytes();
        if bytes[..8 - NONCE_PREFIX_BYTES]
            .iter()
            .any(|byte| *byte != 0)
        {
            return Err(NoncePrefixError::NodeId(node_id));
        }
        let mut prefix = [0; NONCE_PREFIX_BYTES];
        prefix.copy_from_slice(&bytes[8 - NONCE_PREFIX_BYTES..]);
        Ok(NoncePrefix(prefix))
    }

    /// The prefix of the node that issued `nonce`, if it has a nonce's form: to tell a nonce of
    /// another node from a forgotten one of this node.
    pub fn of_nonce(nonce: &str) -> Option<NoncePrefix> {
        split(nonce).map(|(prefix, _)| prefix)
    }

    /// The prefix as its 4 characters.
    pub fn as_text(&self) -> String {
        b64::encode(&self.0)
    }
}

impl fmt::Debug for NoncePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NoncePrefix({:?})", self.as_text())
    }
}

/// A node's outstanding nonces (see the module documentation).
#[derive(Clone, Debug)]
pub struct NonceStore {
    prefix: NoncePrefix,
    capacity: NonZeroUsize,
    /// The sequence number the next issued nonce gets.
    next: u64,
    /// Outstanding nonces by sequence number: the first is the oldest, evicted first.
    by_sequence: BTreeMap<u64, [u8; NONCE_RANDOM_BYTES]>,
    /// The same nonces by value, to find one being used.
    by_value: BTreeMap<[u8; NONCE_RANDOM_BYTES], u64>,
}

impl NonceStore {
    /// An empty store for the node with `prefix`, keeping at most `capacity` nonces.
    pub fn new(prefix: NoncePrefix, capacity: NonZeroUsize) -> NonceStore {
        NonceStore {
            prefix,
            capacity,
            next: 0,
            by_sequence: BTreeMap::new(),
            by_value: BTreeMap::new(),
        }
    }

    /// An empty store keeping at most [`NONCES_OUTSTANDING_MAX`] nonces.
    pub fn with_default_capacity(prefix: NoncePrefix) -> NonceStore {
        let capacity = NonZeroUsize::new(NONCES_OUTSTANDING_MAX).expect("the default is not 0");
        NonceStore::new(prefix, capacity)
    }

    /// Issues a nonce made of `random` (16 bytes the caller drew from a secure source), to send
    /// in a `Replay-Nonce` header. If the store is full, the oldest outstanding nonce is
    /// forgotten.
    ///
    /// # Panics
    ///
    /// If `random` equals an outstanding nonce's: 128 random bits do not repeat, so the caller's
    /// source is broken, and nonces drawn from it are guessable.
    pub fn issue(&mut self, random: [u8; NONCE_RANDOM_BYTES]) -> String {
        assert!(
            !self.by_value.contains_key(&random),
            "nonce randomness repeated an outstanding nonce: the random source is broken"
        );
        if self.by_sequence.len() == self.capacity.get() {
            let (_, oldest) = self.by_sequence.pop_first().expect("the store is full");
            self.by_value
                .remove(&oldest)
                .expect("both maps hold every nonce");
        }
        let sequence = self.next;
        self.next += 1;
        self.by_sequence.insert(sequence, random);
        self.by_value.insert(random, sequence);
        self.check_invariants();

        let mut bytes = [0; NONCE_PREFIX_BYTES + NONCE_RANDOM_BYTES];
        bytes[..NONCE_PREFIX_BYTES].copy_from_slice(&self.prefix.0);
        bytes[NONCE_PREFIX_BYTES..].copy_from_slice(&random);
        let nonce = b64::encode(&bytes);
        debug_assert_eq!(nonce.len(), NONCE_CHARS);
        nonce
    }

    /// Uses `nonce`: true if this store issued it and it is outstanding, and from then on it is
    /// not. False for anything else: a nonce already used, forgotten, another node's, or not a
    /// nonce at all (all answered `badNonce`).
    pub fn consume(&mut self, nonce: &str) -> bool {
        let Some((prefix, random)) = split(nonce) else {
            return false;
        };
        if prefix != self.prefix {
            return false;
        }
        let Some(sequence) = self.by_value.remove(&random) else {
            return false;
        };
        self.by_sequence
            .remove(&sequence)
            .expect("both maps hold every nonce");
        self.check_invariants();
        true
    }

    /// How many nonces are outstanding.
    pub fn outstanding(&self) -> usize {
        self.by_sequence.len()
    }

    /// The most nonces this store keeps outstanding.
    pub fn capacity(&self) -> NonZeroUsize {
        self.capacity
    }

    /// The node prefix of the nonces this store issues.
    pub fn prefix(&self) -> NoncePrefix {
        self.prefix
    }

    fn check_invariants(&self) {
        assert_eq!(self.by_sequence.len(), self.by_value.len());
        assert!(self.by_sequence.len() <= self.capacity.get());
    }
}

/// A nonce's prefix and random bytes, if it has a nonce's form.
fn split(nonce: &str) -> Option<(NoncePrefix, [u8; NONCE_RANDOM_BYTES])> {
    if nonce.len() != NONCE_CHARS {
        return None;
    }
    let bytes = b64::decode(nonce).ok()?;
    let (prefix, random) = bytes.split_at_checked(NONCE_PREFIX_BYTES)?;
    Some((
        NoncePrefix(prefix.try_into().ok()?),
        random.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(prefix: &str, capacity: usize) -> NonceStore {
        NonceStore::new(
            NoncePrefix::new(prefix).unwrap(),
            NonZeroUsize::new(capacity).unwrap(),
        )
    }

    #[test]
    fn a_nonce_is_the_prefix_then_22_characters_and_valid_base64url() {
        let mut nonces = store("n0-_", 4);
        let nonce = nonces.issue([0xff; 16]);
        assert_eq!(nonce.len(), NONCE_CHARS);
        assert!(nonce.starts_with("n0-_"));
        assert_eq!(b64::decode(&nonce).unwrap().len(), 19);
        assert_eq!(
            NoncePrefix::of_nonce(&nonce),
            Some(NoncePrefix::new("n0-_").unwrap())
        );
    }

    #[test]
    fn prefixes_from_text_and_node_ids() {
        assert!(NoncePrefix::new("abc").is_err());
        assert!(NoncePrefix::new("abcde").is_err());
        assert!(NoncePrefix::new("ab+d").is_err());
        assert!(NoncePrefix::new("ab=d").is_err());
        assert_eq!(NoncePrefix::from_node_id(0).unwrap().as_text(), "AAAA");
        assert_eq!(NoncePrefix::from_node_id(1).unwrap().as_text(), "AAAB");
        assert_eq!(
            NoncePrefix::from_node_id((1 << 24) - 1).unwrap().as_text(),
            "____"
        );
        assert_eq!(
            NoncePrefix::from_node_id(1 << 24),
            Err(NoncePrefixError::NodeId(1 << 24))
        );
    }

    #[test]
    fn accepted_once_then_refused() {
        let mut nonces = store("AAAB", 4);
        let nonce = nonces.issue([7; 16]);
        assert_eq!(nonces.outstanding(), 1);
        assert!(nonces.consume(&nonce));
        assert!(!nonces.consume(&nonce));
        assert_eq!(nonces.outstanding(), 0);
    }

    #[test]
    fn another_nodes_nonce_with_the_same_random_bytes_is_refused() {
        let mut ours = store("AAAB", 4);
        let mut theirs = store("AAAC", 4);
        ours.issue([7; 16]);
        let foreign = theirs.issue([7; 16]);
        assert!(!ours.consume(&foreign));
        assert_eq!(ours.outstanding(), 1);
        assert!(!ours.consume("not a nonce"));
        assert!(!ours.consume(""));
    }

    #[test]
    fn past_capacity_the_oldest_is_forgotten() {
        let mut nonces = store("AAAB", 2);
        let first = nonces.issue([1; 16]);
        let second = nonces.issue([2; 16]);
        let third = nonces.issue([3; 16]);
        assert_eq!(nonces.outstanding(), 2);
        assert!(!nonces.consume(&first));
        assert!(nonces.consume(&second));
        assert!(nonces.consume(&third));
    }

    #[test]
    fn a_used_nonce_frees_its_place() {
        let mut nonces = store("AAAB", 2);
        let first = nonces.issue([1; 16]);
        let second = nonces.issue([2; 16]);
        assert!(nonces.consume(&second));
        let third = nonces.issue([3; 16]);
        // Two outstanding, within capacity: the oldest is kept.
        assert!(nonces.consume(&first));
        assert!(nonces.consume(&third));
    }
}
