//! Properties of the CT log's replicated part over random command sequences: what seed 004's
//! clustered log relies on etcd for, checked against a model of what clients were told.
//!
//! Submissions go through a model of a node's front door: the node looks the entry up in its
//! local entry-key index (the entries numbered below its local tree size, which lags the log by
//! a random amount) and proposes only what it did not find, saying how far it looked. With a
//! small dedupe window the state forgets cleaned-up entries often, so the property that no
//! entry is ever logged twice rests on that check.

use std::collections::{BTreeMap, BTreeSet};

use certus_core::ct::{
    AddOutcome, CtCommand, CtError, CtReply, EntryKey, LogConfig, SignedTreeHead, Submission,
    holders_needed,
};
use certus_core::{Command, Response, Stamp, State, apply};
use proptest::prelude::*;

const T0: u64 = 1_700_000_000_000;
const NODES: [u64; 4] = [1, 2, 3, 4];

fn submission(n: u8, sct_timestamp_ms: u64) -> Submission {
    let mut leaf_input = vec![0, 0];
    leaf_input.extend_from_slice(&sct_timestamp_ms.to_be_bytes());
    leaf_input.push(n);
    Submission {
        key: EntryKey([n; 32]),
        sct_timestamp_ms,
        leaf_input,
        extra_data: vec![n],
        sct: sct_timestamp_ms.to_be_bytes().to_vec(),
    }
}

/// The honest root of a tree of `size` entries; a corrupt node reports another.
fn root(size: u64, corrupt: bool) -> [u8; 32] {
    let mut root = [0u8; 32];
    root[..8].copy_from_slice(&size.to_be_bytes());
    root[31] = u8::from(corrupt);
    root
}

/// What a step does; resolved against the state when it runs, the way a node would.
#[derive(Clone, Debug)]
enum Action {
    /// Submissions (key, age) through a node whose local tree lags the log by `lag` entries.
    Add {
        items: Vec<(u8, u64)>,
        lag: u64,
    },
    SetDedupeWindow(u64),
    /// Sequence what is ready, from the right number or from a stale one.
    Sequence {
        stale_by: u64,
        limit: usize,
    },
    /// A node reports a tree of `share`‰ of what was sequenced.
    Report {
        node: u64,
        share_permille: u64,
        corrupt: bool,
        timestamp_delta_ms: u64,
    },
    /// The master publishes what selection offers (or a node's report regardless).
    Publish {
        pick_node: Option<u64>,
    },
    CleanUp(u32),
    Configure {
        min_serving_nodes: u32,
        min_serving_permille: u32,
        watermark: u64,
    },
    Freeze(bool),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        5 => (prop::collection::vec((0u8..40, 0u64..3_000), 1..6), prop_oneof![3 => Just(0u64), 1 => 0u64..12])
            .prop_map(|(items, lag)| Action::Add { items, lag }),
        1 => prop_oneof![2 => 0u64..4, 1 => 4u64..50].prop_map(Action::SetDedupeWindow),
        3 => (prop_oneof![4 => Just(0u64), 1 => 1u64..3], 1usize..8)
            .prop_map(|(stale_by, limit)| Action::Sequence { stale_by, limit }),
        4 => (prop::sample::select(&NODES[..]), 0u64..=1000, prop::bool::weighted(0.05), 0u64..2_000)
            .prop_map(|(node, share_permille, corrupt, timestamp_delta_ms)| Action::Report {
                node, share_permille, corrupt, timestamp_delta_ms,
            }),
        3 => prop::option::weighted(0.2, prop::sample::select(&NODES[..]))
            .prop_map(|pick_node| Action::Publish { pick_node }),
        1 => (1u32..6).prop_map(Action::CleanUp),
        1 => (1u32..4, 0u32..1000, 1u64..30)
            .prop_map(|(min_serving_nodes, min_serving_permille, watermark)| Action::Configure {
                min_serving_nodes, min_serving_permille, watermark,
            }),
        1 => prop::bool::weighted(0.3).prop_map(Action::Freeze),
    ]
}

fn actions() -> impl Strategy<Value = Vec<(Action, u64)>> {
    prop::collection::vec((action(), 0u64..700), 1..150)
}

/// The node's side of a submission: what its local index (entries numbered below
/// `local_size`, by key) already holds is answered there and never proposed.
fn front_door(
    items: &[(u8, u64)],
    local_size: u64,
    numbers: &BTreeMap<u64, EntryKey>,
    now_ms: u64,
) -> (Vec<Submission>, Vec<EntryKey>) {
    let mut proposed = Vec::new();
    let mut found_locally = Vec::new();
    for (n, age_ms) in items {
        let submission = submission(*n, now_ms.saturating_sub(*age_ms));
        let local = numbers
            .range(..local_size)
            .any(|(_, key)| *key == submission.key);
        if local {
            found_locally.push(submission.key);
        } else {
            proposed.push(submission);
        }
    }
    (proposed, found_locally)
}

fn resolve(
    action: &Action,
    state: &State,
    now_ms: u64,
    numbers: &BTreeMap<u64, EntryKey>,
) -> Command {
    let members: BTreeSet<u64> = NODES.into();
    let command = match action {
        Action::Add { items, lag } => {
            let local_size = state.ct_next_sequence().saturating_sub(*lag);
            let (submissions, _) = front_door(items, local_size, numbers, now_ms);
            CtCommand::AddChecked {
                submissions,
                checked_below: local_size,
            }
        }
        Action::SetDedupeWindow(entries) => CtCommand::SetDedupeWindow { entries: *entries },
        Action::Sequence { stale_by, limit } => CtCommand::Sequence {
            first: state.ct_next_sequence().saturating_sub(*stale_by),
            keys: state.ct_ready_to_sequence(now_ms, *limit),
        },
        Action::Report {
            node,
            share_permille,
            corrupt,
            timestamp_delta_ms,
        } => {
            let size = state.ct_next_sequence() * share_permille / 1000;
            CtCommand::Report {
                node: *node,
                sth: SignedTreeHead {
                    tree_size: size,
                    timestamp_ms: now_ms + timestamp_delta_ms,
                    root_hash: root(size, *corrupt),
                    signature: vec![1, 2, 3],
                },
                contiguous_size: size,
            }
        }
        Action::Publish { pick_node } => {
            let sth = match pick_node {
                Some(node) => state
                    .ct_reports()
                    .get(node)
                    .map(|report| report.sth.clone()),
                None => state.ct_select_serving(&members, now_ms).cloned(),
            };
            match sth {
                Some(sth) => CtCommand::Publish {
                    sth,
                    members: NODES.to_vec(),
                },
                None => CtCommand::CleanUp { max_entries: 0 },
            }
        }
        Action::CleanUp(max_entries) => CtCommand::CleanUp {
            max_entries: *max_entries,
        },
        Action::Configure {
            min_serving_nodes,
            min_serving_permille,
            watermark,
        } => CtCommand::Configure(LogConfig {
            min_serving_nodes: *min_serving_nodes,
            min_serving_permille: *min_serving_permille,
            unsequenced_watermark: *watermark,
            ..LogConfig::default()
        }),
        Action::Freeze(frozen) => CtCommand::SetFrozen { frozen: *frozen },
    };
    Command::Ct(command)
}

proptest! {
    #[test]
    fn entries_are_numbered_once_kept_and_served_by_a_growing_sth(steps in actions()) {
        let mut state = State::new();
        let mut now_ms = T0;
        // Every key a client was told is logged, with the SCT it was given.
        let mut acknowledged: BTreeMap<EntryKey, Vec<u8>> = BTreeMap::new();
        // Every number ever assigned, and to which key.
        let mut numbers: BTreeMap<u64, EntryKey> = BTreeMap::new();
        let mut serving: Option<SignedTreeHead> = None;
        for (index, (action, advance_ms)) in steps.iter().enumerate() {
            now_ms += advance_ms;
            if let Action::Add { items, lag } = action {
                // What the node answers from its own index was logged, under its number.
                let local_size = state.ct_next_sequence().saturating_sub(*lag);
                for key in front_door(items, local_size, &numbers, now_ms).1 {
                    prop_assert!(acknowledged.contains_key(&key), "entry {} found locally but never logged", key);
                }
            }
            let forgotten_before = state.ct_dedupe().forgotten_below;
            let command = resolve(action, &state, now_ms, &numbers);
            let holders_before = state.ct_reports().clone();
            let config_before = *state.ct_config();
            let response = apply(&mut state, command.clone(), Stamp::new(index as u64 + 1, now_ms));
            state.check_invariants().unwrap();
            let Response::Ct(reply) = response else { panic!("a CT command got {response:?}") };
            match (&command, reply) {
                (Command::Ct(CtCommand::AddChecked { submissions, checked_below }), Ok(CtReply::Added(outcomes))) => {
                    prop_assert_eq!(submissions.len(), outcomes.len());
                    for (submission, outcome) in submissions.iter().zip(outcomes) {
                        match outcome {
                            AddOutcome::Added => {
                                prop_assert!(!acknowledged.contains_key(&submission.key));
                                acknowledged.insert(submission.key, submission.sct.clone());
                            }
                            AddOutcome::Duplicate { sct, .. } => {
                                prop_assert_eq!(Some(&sct), acknowledged.get(&submission.key));
                            }
                            AddOutcome::DuplicateCleanedUp { sequence, .. } => {
                                prop_assert_eq!(numbers.get(&sequence), Some(&submission.key));
                            }
                            AddOutcome::Refused(CtError::Unchecked { .. }) => {
                                // Only when the state forgot entries the node did not look at.
                                prop_assert!(*checked_below < forgotten_before);
                            }
                            AddOutcome::Refused(_) => {
                                prop_assert!(!acknowledged.contains_key(&submission.key));
                            }
                        }
                    }
                }
                (Command::Ct(CtCommand::Sequence { keys, .. }), Ok(CtReply::Sequenced { first, count })) => {
                    prop_assert_eq!(count, keys.len() as u64);
                    for (offset, key) in keys.iter().enumerate() {
                        let number = first + offset as u64;
                        prop_assert!(numbers.insert(number, *key).is_none(), "number {} assigned twice", number);
                    }
                }
                (Command::Ct(CtCommand::Publish { sth, members }), Ok(CtReply::Published { .. })) => {
                    if let Some(previous) = &serving {
                        prop_assert!(sth.tree_size >= previous.tree_size);
                        prop_assert!(sth.timestamp_ms > previous.timestamp_ms);
                    }
                    let holders = members
                        .iter()
                        .filter_map(|node| holders_before.get(node))
                        .filter(|r| r.reported_at_ms + config_before.report_ttl_ms >= now_ms)
                        .filter(|r| r.sth.tree_size >= sth.tree_size)
                        .count();
                    prop_assert!(holders >= holders_needed(&config_before, members.len()));
                    // The state cannot tell a corrupt tree at a size only it reports (the nodes
                    // cross-check against their own trees); it must never publish over a
                    // disagreeing report of the same size.
                    for node in members {
                        if let Some(report) = holders_before.get(node)
                            && report.sth.tree_size == sth.tree_size
                        {
                            prop_assert_eq!(report.sth.root_hash, sth.root_hash);
                        }
                    }
                    serving = Some(sth.clone());
                }
                _ => {}
            }
            prop_assert_eq!(state.ct_serving().map(|s| &s.sth), serving.as_ref());
            let dedupe = state.ct_dedupe();
            prop_assert!(dedupe.forgotten_below >= forgotten_before, "the forgotten point went back");
            // No acknowledged entry is lost: it is held, remembered as cleaned up under its
            // number, or forgotten by the state under a number local indexes cover.
            for key in acknowledged.keys() {
                let forgotten = numbers
                    .range(..dedupe.forgotten_below)
                    .any(|(_, k)| k == key);
                let known = state.ct_entry(key).is_some()
                    || state.ct_cleaned_entry(key).is_some()
                    || forgotten;
                prop_assert!(known, "acknowledged entry {} is gone", key);
            }
            // Each number's key is still that number's key, until the state forgets it.
            for (number, key) in numbers.range(dedupe.forgotten_below..) {
                let recorded = state
                    .ct_entry(key)
                    .and_then(|held| held.sequence)
                    .or_else(|| state.ct_cleaned_entry(key).map(|c| c.sequence));
                prop_assert_eq!(recorded, Some(*number));
            }
            // The window bounds what is remembered (a shrunk window catches up by clean-ups).
            let first_held = state.ct_first_held_sequence();
            prop_assert!(dedupe.forgotten_below <= first_held);
        }
        let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
        prop_assert_eq!(restored, state);
    }
}
