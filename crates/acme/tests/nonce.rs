//! The nonce store against a model, over random sequences of issues and uses: a nonce is
//! accepted at most once, and every nonce among the last `capacity` issued and not yet used is
//! accepted.

use std::collections::{BTreeSet, VecDeque};
use std::num::NonZeroUsize;

use certus_acme::{NoncePrefix, NonceStore};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Issue a nonce.
    Issue,
    /// Use the nonce issued `n` issues ago (modulo how many were issued).
    Use(usize),
    /// Use another node's nonce made of the same random bytes as an issued one.
    UseForeign(usize),
    /// Use a string that is no nonce of ours.
    UseGarbage(String),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Issue),
        4 => any::<usize>().prop_map(Op::Use),
        1 => any::<usize>().prop_map(Op::UseForeign),
        1 => "[A-Za-z0-9_=+/-]{0,30}".prop_map(Op::UseGarbage),
    ]
}

/// Runs `ops` against a store of `capacity` and a model of it; checks that every use is
/// answered as the model says, and returns the store, the model's outstanding nonces (oldest
/// first) and every nonce accepted.
fn run(capacity: usize, seed: u128, ops: &[Op]) -> (NonceStore, VecDeque<String>, Vec<String>) {
    let prefix = NoncePrefix::new("nd01").unwrap();
    let capacity = NonZeroUsize::new(capacity).unwrap();
    let mut store = NonceStore::new(prefix, capacity);
    let mut foreign = NonceStore::new(NoncePrefix::new("nd02").unwrap(), capacity);
    let mut issued: Vec<(String, [u8; 16])> = Vec::new();
    let mut model: VecDeque<String> = VecDeque::new();
    let mut accepted = Vec::new();
    for op in ops {
        match op {
            Op::Issue => {
                // Distinct random bytes for every issue, as a real source gives.
                let random = seed.wrapping_add(issued.len() as u128).to_be_bytes();
                let nonce = store.issue(random);
                issued.push((nonce.clone(), random));
                model.push_back(nonce);
                if model.len() > capacity.get() {
                    model.pop_front();
                }
            }
            Op::Use(back) if !issued.is_empty() => {
                let (nonce, _) = &issued[issued.len() - 1 - back % issued.len()];
                let expected = model.iter().position(|outstanding| outstanding == nonce);
                let got = store.consume(nonce);
                assert_eq!(got, expected.is_some(), "use of {nonce}");
                if let Some(at) = expected {
                    model.remove(at);
                    accepted.push(nonce.clone());
                }
            }
            Op::UseForeign(back) if !issued.is_empty() => {
                let (_, random) = issued[issued.len() - 1 - back % issued.len()];
                let theirs = foreign.issue(random);
                assert!(!store.consume(&theirs), "another node's nonce {theirs}");
                assert!(foreign.consume(&theirs));
            }
            Op::UseGarbage(text) => {
                if !issued.iter().any(|(nonce, _)| nonce == text) {
                    assert!(!store.consume(text), "garbage {text:?}");
                }
            }
            Op::Use(_) | Op::UseForeign(_) => {}
        }
        assert_eq!(store.outstanding(), model.len());
        assert!(store.outstanding() <= capacity.get());
    }
    (store, model, accepted)
}

proptest! {
    #[test]
    fn a_nonce_is_accepted_at_most_once(
        capacity in 1usize..8,
        seed in any::<u128>(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let (mut store, model, mut accepted) = run(capacity, seed, &ops);
        // Use every outstanding nonce, then all of them again.
        for nonce in &model {
            prop_assert!(store.consume(nonce));
            accepted.push(nonce.clone());
        }
        for nonce in &accepted {
            prop_assert!(!store.consume(nonce));
        }
        let distinct: BTreeSet<&String> = accepted.iter().collect();
        prop_assert_eq!(distinct.len(), accepted.len());
        prop_assert_eq!(store.outstanding(), 0);
    }

    #[test]
    fn every_recent_unused_nonce_is_accepted(
        capacity in 1usize..8,
        seed in any::<u128>(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let (mut store, _, accepted) = run(capacity, seed, &ops);
        // Issue `capacity` more: all of them are among the last `capacity` issued and unused.
        let fresh: Vec<String> = (0..capacity)
            .map(|i| store.issue((seed ^ (1 << 127)).wrapping_add(i as u128).to_be_bytes()))
            .collect();
        prop_assert_eq!(store.outstanding(), capacity);
        for nonce in &fresh {
            prop_assert!(!accepted.contains(nonce));
            prop_assert!(store.consume(nonce));
        }
    }
}
