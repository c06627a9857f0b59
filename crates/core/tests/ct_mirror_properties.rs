//! Properties of the CT log's mirror mode over random command sequences, checked against a model
//! of the source log: a plain list of its entries and the STHs it signed.
//!
//! Checked after every command: the invariants hold; a refused command changes nothing (same
//! state, same snapshot bytes as a no-op at the same stamp); every held number holds exactly the
//! source's entry of that number; appends are a check-and-set on the next number and record only
//! well-formed, newer source STHs; the serving STH only ever becomes a recorded source STH, never
//! shrinks and gets strictly newer; submissions and sequencing are refused with `IsMirror`; and a
//! snapshot round trip gives an equal state.

use std::collections::BTreeMap;

use certus_core::ct::{
    CtCommand, CtError, CtReply, EntryKey, LogConfig, MirrorEntry, MirrorSource, SignedTreeHead,
    Submission, holders_needed,
};
use certus_core::limits::CT_MIRROR_TARGETS_MAX;
use certus_core::{Command, Response, Stamp, State, apply};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;

const T0: u64 = 1_700_000_000_000;
const MEMBERS: [u64; 3] = [1, 2, 3];
const SOURCE_KEY: [u8; 5] = [0x30, 0x59, 1, 2, 3];
const URLS: [&str; 3] = [
    "https://source.example/log",
    "https://moved.example/log",
    "https://again.example/ct",
];
const FORGED_SIGNATURE: &[u8] = b"forged";

/// A source leaf: a MerkleTreeLeaf-shaped byte string (version and leaf type, the timestamp, a
/// payload). Small payloads make the source log the same leaf twice now and then.
fn source_entry(timestamp_offset_ms: u64, payload: u8) -> MirrorEntry {
    let mut leaf_input = vec![0, 0];
    leaf_input.extend_from_slice(&(T0 + timestamp_offset_ms).to_be_bytes());
    leaf_input.extend(std::iter::repeat_n(payload, 1 + usize::from(payload % 3)));
    MirrorEntry {
        leaf_input,
        extra_data: vec![payload; 2],
    }
}

/// The source's "Merkle root" of a prefix: its size and a digest of its leaves.
fn root_of(prefix: &[MirrorEntry]) -> [u8; 32] {
    let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
    for entry in prefix {
        for byte in entry.leaf_input.iter().chain(&[0xff]) {
            digest ^= u64::from(*byte);
            digest = digest.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let mut root = [0u8; 32];
    root[..8].copy_from_slice(&(prefix.len() as u64).to_be_bytes());
    root[8..16].copy_from_slice(&digest.to_be_bytes());
    root
}

/// The source log: its entries, and the STHs it signed (strictly increasing timestamps).
struct Source {
    entries: Vec<MirrorEntry>,
    clock_ms: u64,
}

impl Source {
    fn prefix(&self, size: u64) -> &[MirrorEntry] {
        &self.entries[..usize::try_from(size).unwrap().min(self.entries.len())]
    }

    /// The source signs a new STH over its first `size` entries.
    fn sign(&mut self, size: u64, delta_ms: u64) -> SignedTreeHead {
        self.clock_ms += delta_ms;
        let mut signature = b"source".to_vec();
        signature.extend_from_slice(&size.to_be_bytes());
        signature.extend_from_slice(&self.clock_ms.to_be_bytes());
        SignedTreeHead {
            tree_size: size,
            timestamp_ms: self.clock_ms,
            root_hash: root_of(self.prefix(size)),
            signature,
        }
    }
}

#[derive(Clone, Debug)]
enum First {
    Next,
    Stale(u64),
    Ahead(u64),
}

#[derive(Clone, Debug)]
enum SthChoice {
    None,
    /// A new source STH of the size the entries end at.
    Fresh,
    /// A new source STH of another size.
    WrongSize(i64),
    /// The right size, but not newer than the latest recorded (`back` ms older, 0 = same time).
    NotNewer {
        back: u64,
    },
}

#[derive(Clone, Debug)]
enum ReportChoice {
    /// The newest recorded source STH.
    Latest,
    /// Some recorded source STH, perhaps an old one.
    Recorded(Index),
    /// An STH the source never signed, newer than anything it did.
    Forged {
        size: Index,
        delta_ms: u64,
        wrong_root: bool,
    },
}

#[derive(Clone, Debug)]
enum Action {
    Append {
        len: usize,
        first: First,
        sth: SthChoice,
        /// Replace one entry with a leaf too short to hold a timestamp.
        malformed: Option<Index>,
        source_delta_ms: u64,
    },
    Report {
        node: u64,
        choice: ReportChoice,
        holds_all: bool,
    },
    /// Publish what a node reported, or what selection offers.
    Publish {
        from_node: Option<u64>,
    },
    CleanUp(u32),
    Add(u8),
    Sequence {
        stale_by: u64,
        held_keys: bool,
    },
    StartMirror {
        url: usize,
        other_key: bool,
    },
    Configure {
        watermark: u64,
    },
    Forget(u64),
    SnapshotRoundTrip,
}

fn action() -> impl Strategy<Value = Action> {
    let first = prop_oneof![
        8 => Just(First::Next),
        1 => (1u64..4).prop_map(First::Stale),
        1 => (1u64..4).prop_map(First::Ahead),
    ];
    let sth = prop_oneof![
        3 => Just(SthChoice::None),
        5 => Just(SthChoice::Fresh),
        1 => prop_oneof![-3i64..0, 1i64..4].prop_map(SthChoice::WrongSize),
        1 => (0u64..3).prop_map(|back| SthChoice::NotNewer { back }),
    ];
    let report = prop_oneof![
        5 => Just(ReportChoice::Latest),
        2 => any::<Index>().prop_map(ReportChoice::Recorded),
        2 => (any::<Index>(), 1u64..2_000, prop::bool::weighted(0.3)).prop_map(
            |(size, delta_ms, wrong_root)| ReportChoice::Forged { size, delta_ms, wrong_root }
        ),
    ];
    let node = || prop::sample::select(&MEMBERS[..]);
    prop_oneof![
        6 => (0usize..8, first, sth, prop::option::weighted(0.05, any::<Index>()), 1u64..1_000)
            .prop_map(|(len, first, sth, malformed, source_delta_ms)| Action::Append {
                len, first, sth, malformed, source_delta_ms,
            }),
        6 => (node(), report, prop::bool::weighted(0.8))
            .prop_map(|(node, choice, holds_all)| Action::Report { node, choice, holds_all }),
        4 => prop::option::weighted(0.6, node())
            .prop_map(|from_node| Action::Publish { from_node }),
        2 => (1u32..6).prop_map(Action::CleanUp),
        1 => any::<u8>().prop_map(Action::Add),
        1 => (prop_oneof![3 => Just(0u64), 1 => 1u64..3], any::<bool>())
            .prop_map(|(stale_by, held_keys)| Action::Sequence { stale_by, held_keys }),
        1 => (0..URLS.len(), prop::bool::weighted(0.3))
            .prop_map(|(url, other_key)| Action::StartMirror { url, other_key }),
        1 => prop_oneof![Just(LogConfig::default().unsequenced_watermark), 1u64..40]
            .prop_map(|watermark| Action::Configure { watermark }),
        1 => node().prop_map(Action::Forget),
        1 => Just(Action::SnapshotRoundTrip),
    ]
}

/// What the test knows independently of the state.
struct Model {
    source: Source,
    url: String,
    /// Every source STH a successful append recorded.
    recorded: Vec<SignedTreeHead>,
    latest: Option<SignedTreeHead>,
    targets: BTreeMap<u64, SignedTreeHead>,
    serving: Option<SignedTreeHead>,
    /// The key each number was first seen under.
    keys: BTreeMap<u64, EntryKey>,
}

/// Why an append may be refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    Stale,
    Backlog,
    Malformed,
    BadSth,
}

fn refusal_of(error: &CtError) -> Option<Refusal> {
    match error {
        CtError::StaleSequence { .. } => Some(Refusal::Stale),
        CtError::Backlog { .. } => Some(Refusal::Backlog),
        CtError::MalformedSubmission(_) => Some(Refusal::Malformed),
        CtError::Mirror(_) => Some(Refusal::BadSth),
        _ => None,
    }
}

fn source_of(url: &str, other_key: bool) -> MirrorSource {
    MirrorSource {
        url: url.to_owned(),
        public_key_der: if other_key {
            vec![9, 9]
        } else {
            SOURCE_KEY.to_vec()
        },
    }
}

fn ct(state: &mut State, command: CtCommand, stamp: Stamp) -> Result<CtReply, CtError> {
    match apply(state, Command::Ct(command), stamp) {
        Response::Ct(reply) => reply,
        other => panic!("a CT command got {other:?}"),
    }
}

/// Runs one action: applies its command, checks what the reply says against the model, and
/// updates the model.
fn step(
    model: &mut Model,
    state: &mut State,
    action: &Action,
    stamp: Stamp,
) -> Result<(), TestCaseError> {
    let next = state.ct_next_sequence();
    let mut noop = state.clone();
    apply(&mut noop, Command::Tick, stamp);
    let reply = match action {
        Action::SnapshotRoundTrip => {
            let bytes = state.to_snapshot();
            let restored = State::from_snapshot(&bytes).expect("a snapshot loads");
            prop_assert_eq!(&restored, &*state);
            prop_assert_eq!(restored.to_snapshot(), bytes);
            *state = restored;
            return Ok(());
        }
        Action::Append {
            len,
            first,
            sth,
            malformed,
            source_delta_ms,
        } => {
            let first = match first {
                First::Next => next,
                First::Stale(by) => next.saturating_sub(*by),
                First::Ahead(by) => next + by,
            };
            let source_len = model.source.entries.len();
            let start = usize::try_from(first).unwrap().min(source_len);
            let mut entries = model.source.entries[start..(start + len).min(source_len)].to_vec();
            let end = first + entries.len() as u64;
            let sth = match sth {
                SthChoice::None => None,
                SthChoice::Fresh => Some(model.source.sign(end, *source_delta_ms)),
                SthChoice::WrongSize(delta) => {
                    let size = end.saturating_add_signed(*delta);
                    let size = if size == end { end + 1 } else { size };
                    Some(model.source.sign(size, *source_delta_ms))
                }
                SthChoice::NotNewer { back } => model.latest.as_ref().map(|latest| {
                    let mut sth = model.source.sign(end, *source_delta_ms);
                    sth.timestamp_ms = latest.timestamp_ms.saturating_sub(*back);
                    sth
                }),
            };
            let mut expected = Vec::new();
            if first != next {
                expected.push(Refusal::Stale);
            }
            if !entries.is_empty()
                && state.ct_held_count() as u64 >= state.ct_config().unsequenced_watermark
            {
                expected.push(Refusal::Backlog);
            }
            if let Some(index) = malformed
                && !entries.is_empty()
            {
                let at = index.index(entries.len());
                entries[at].leaf_input.truncate(5);
                expected.push(Refusal::Malformed);
            }
            if let Some(sth) = &sth {
                let newer = model.latest.as_ref().is_none_or(|latest| {
                    sth.timestamp_ms > latest.timestamp_ms && sth.tree_size >= latest.tree_size
                });
                if sth.tree_size != end || !newer {
                    expected.push(Refusal::BadSth);
                }
            }
            let count = entries.len() as u64;
            let reply = ct(
                state,
                CtCommand::MirrorAppend {
                    first,
                    entries,
                    sth: sth.clone(),
                },
                stamp,
            );
            match &reply {
                Ok(reply) => {
                    prop_assert!(
                        expected.is_empty(),
                        "append accepted despite {:?}",
                        expected
                    );
                    // Property 1: exactly at the previous next number.
                    prop_assert_eq!(reply, &CtReply::Mirrored { first: next, count });
                    prop_assert_eq!(state.ct_next_sequence(), next + count);
                    if let Some(sth) = sth {
                        model.recorded.push(sth.clone());
                        model.latest = Some(sth.clone());
                        model.targets.insert(sth.tree_size, sth);
                        while model.targets.len() > CT_MIRROR_TARGETS_MAX {
                            model.targets.pop_first();
                        }
                    }
                }
                Err(error) => {
                    prop_assert!(
                        refusal_of(error).is_some_and(|r| expected.contains(&r)),
                        "append refused with {:?}, expected {:?}",
                        error,
                        expected
                    );
                    if let CtError::StaleSequence { expected, got } = error {
                        prop_assert_eq!((*expected, *got), (next, first));
                    }
                }
            }
            reply
        }
        Action::Report {
            node,
            choice,
            holds_all,
        } => {
            let sth = match choice {
                ReportChoice::Latest => model.latest.clone(),
                ReportChoice::Recorded(index) => (!model.recorded.is_empty())
                    .then(|| model.recorded[index.index(model.recorded.len())].clone()),
                ReportChoice::Forged {
                    size,
                    delta_ms,
                    wrong_root,
                } => {
                    let size = size.index(usize::try_from(next).unwrap() + 1) as u64;
                    let mut root_hash = root_of(model.source.prefix(size));
                    root_hash[31] ^= u8::from(*wrong_root);
                    let newest = model
                        .recorded
                        .iter()
                        .map(|sth| sth.timestamp_ms)
                        .max()
                        .unwrap_or(T0)
                        .max(model.source.clock_ms);
                    Some(SignedTreeHead {
                        tree_size: size,
                        timestamp_ms: newest + delta_ms,
                        root_hash,
                        signature: FORGED_SIGNATURE.to_vec(),
                    })
                }
            };
            let sth = sth.unwrap_or_else(|| model.source.sign(0, 1));
            let contiguous_size = if *holds_all { next } else { sth.tree_size };
            let conflicts = state.ct_serving().is_some_and(|serving| {
                serving.sth.tree_size == sth.tree_size && serving.sth.root_hash != sth.root_hash
            });
            let reply = ct(
                state,
                CtCommand::Report {
                    node: *node,
                    sth: sth.clone(),
                    contiguous_size,
                },
                stamp,
            );
            match &reply {
                Ok(reply) => {
                    prop_assert_eq!(reply, &CtReply::Reported);
                    prop_assert!(!conflicts && sth.tree_size <= next);
                    prop_assert_eq!(&state.ct_reports()[node].sth, &sth);
                }
                Err(error) => {
                    prop_assert!(
                        matches!(error, CtError::BadReport { .. }),
                        "report refused with {:?}",
                        error
                    );
                    prop_assert!(conflicts || sth.tree_size > next);
                }
            }
            reply
        }
        Action::Publish { from_node } => {
            let members = MEMBERS.into();
            let reported = from_node
                .and_then(|node| state.ct_reports().get(&node))
                .map(|report| report.sth.clone());
            let sth = match from_node {
                Some(_) => reported,
                None => state.ct_select_serving(&members, stamp.now_ms).cloned(),
            };
            let sth = sth
                .or_else(|| model.latest.clone())
                .unwrap_or_else(|| model.source.sign(0, 1));
            let reports_before = state.ct_reports().clone();
            let config_before = *state.ct_config();
            let now_ms = state.clock_ms().max(stamp.now_ms);
            let reply = ct(
                state,
                CtCommand::Publish {
                    sth: sth.clone(),
                    members: MEMBERS.to_vec(),
                },
                stamp,
            );
            match &reply {
                Ok(reply) => {
                    // Property 3: only a recorded source STH, never smaller, strictly newer.
                    prop_assert!(
                        model.recorded.contains(&sth),
                        "published {:?}, which no append recorded",
                        sth
                    );
                    prop_assert_eq!(model.targets.get(&sth.tree_size), Some(&sth));
                    prop_assert_ne!(&sth.signature[..], FORGED_SIGNATURE);
                    let previous_tree_size = model.serving.as_ref().map_or(0, |s| s.tree_size);
                    prop_assert_eq!(reply, &CtReply::Published { previous_tree_size });
                    if let Some(previous) = &model.serving {
                        prop_assert!(sth.tree_size >= previous.tree_size);
                        prop_assert!(sth.timestamp_ms > previous.timestamp_ms);
                    }
                    let reported = MEMBERS
                        .iter()
                        .any(|node| reports_before.get(node).is_some_and(|r| r.sth == sth));
                    prop_assert!(reported, "published {:?}, which no member reported", sth);
                    let holders = MEMBERS
                        .iter()
                        .filter_map(|node| reports_before.get(node))
                        .filter(|r| r.reported_at_ms + config_before.report_ttl_ms >= now_ms)
                        .filter(|r| r.sth.tree_size >= sth.tree_size)
                        .count();
                    prop_assert!(holders >= holders_needed(&config_before, MEMBERS.len()));
                    model
                        .targets
                        .retain(|_, target| target.timestamp_ms > sth.timestamp_ms);
                    model.serving = Some(sth);
                }
                Err(error) => prop_assert!(
                    matches!(error, CtError::NotPublishable { .. }),
                    "publish refused with {:?}",
                    error
                ),
            }
            reply
        }
        Action::CleanUp(max_entries) => {
            let covered = model.serving.as_ref().map_or(0, |s| s.tree_size);
            let coverable = covered - state.ct_first_held_sequence().min(covered);
            let removed = coverable.min(u64::from(*max_entries));
            let reply = ct(
                state,
                CtCommand::CleanUp {
                    max_entries: *max_entries,
                },
                stamp,
            );
            prop_assert_eq!(
                &reply,
                &Ok(CtReply::CleanedUp {
                    removed,
                    remaining: coverable - removed,
                })
            );
            reply
        }
        Action::Add(n) => {
            // A submission built from a source leaf: a mirror takes none.
            let leaf_input = model
                .source
                .entries
                .first()
                .map_or_else(|| source_entry(0, *n).leaf_input, |e| e.leaf_input.clone());
            let sct_timestamp_ms = u64::from_be_bytes(leaf_input[2..10].try_into().unwrap());
            let reply = ct(
                state,
                CtCommand::Add {
                    submissions: vec![Submission {
                        key: EntryKey([*n; 32]),
                        sct_timestamp_ms,
                        leaf_input,
                        extra_data: vec![*n],
                        sct: vec![*n],
                    }],
                },
                stamp,
            );
            // Property 4.
            prop_assert_eq!(
                &reply,
                &Err(CtError::IsMirror {
                    source_url: model.url.clone()
                })
            );
            reply
        }
        Action::Sequence {
            stale_by,
            held_keys,
        } => {
            let keys = if *held_keys {
                state
                    .ct_sequenced_from(0, 4)
                    .into_iter()
                    .map(|(_, held)| held.submission.key)
                    .collect()
            } else {
                state.ct_ready_to_sequence(stamp.now_ms, 8)
            };
            let reply = ct(
                state,
                CtCommand::Sequence {
                    first: next.saturating_sub(*stale_by),
                    keys,
                },
                stamp,
            );
            // Property 4.
            prop_assert_eq!(
                &reply,
                &Err(CtError::IsMirror {
                    source_url: model.url.clone()
                })
            );
            reply
        }
        Action::StartMirror { url, other_key } => {
            let reply = ct(
                state,
                CtCommand::StartMirror(source_of(URLS[*url], *other_key)),
                stamp,
            );
            if *other_key {
                prop_assert!(matches!(reply, Err(CtError::Mirror(_))));
            } else {
                prop_assert_eq!(&reply, &Ok(CtReply::Configured));
                model.url = URLS[*url].to_owned();
            }
            reply
        }
        Action::Configure { watermark } => {
            let reply = ct(
                state,
                CtCommand::Configure(LogConfig {
                    unsequenced_watermark: *watermark,
                    ..LogConfig::default()
                }),
                stamp,
            );
            prop_assert_eq!(&reply, &Ok(CtReply::Configured));
            reply
        }
        Action::Forget(node) => {
            let existed = state.ct_reports().contains_key(node);
            let reply = ct(state, CtCommand::ForgetNode { node: *node }, stamp);
            prop_assert_eq!(&reply, &Ok(CtReply::Forgotten { existed }));
            reply
        }
    };
    // Property 2: a refused command changes nothing (beyond the index and clock any command
    // moves, which the no-op moved alike).
    if reply.is_err() {
        prop_assert_eq!(state.to_snapshot(), noop.to_snapshot());
        prop_assert_eq!(&*state, &noop);
    }
    Ok(())
}

/// What must hold after every step, whatever it was.
fn check(model: &mut Model, state: &State) -> Result<(), TestCaseError> {
    // Property 5.
    if let Err(violation) = state.check_invariants() {
        return Err(TestCaseError::fail(violation.to_string()));
    }
    let mirror = state.ct_mirror().expect("the log stays a mirror");
    prop_assert_eq!(&mirror.source, &source_of(&model.url, false));
    prop_assert_eq!(&mirror.targets, &model.targets);
    prop_assert_eq!(&mirror.latest, &model.latest);
    // Property 3: the serving STH changes only by a publish the model saw succeed.
    prop_assert_eq!(state.ct_serving().map(|s| &s.sth), model.serving.as_ref());

    // Property 1: numbers first_held..next are held, each with exactly the source's entry.
    let next = state.ct_next_sequence();
    let first_held = state.ct_first_held_sequence();
    prop_assert!(next <= model.source.entries.len() as u64);
    prop_assert!(first_held <= model.serving.as_ref().map_or(0, |s| s.tree_size));
    prop_assert_eq!(state.ct_held_count() as u64, next - first_held);
    prop_assert_eq!(state.ct_unsequenced_count(), 0);
    let held = state.ct_sequenced_from(0, usize::MAX);
    prop_assert_eq!(held.len() as u64, next - first_held);
    for (offset, (number, entry)) in held.into_iter().enumerate() {
        prop_assert_eq!(number, first_held + offset as u64);
        let source = &model.source.entries[usize::try_from(number).unwrap()];
        prop_assert_eq!(&entry.submission.leaf_input, &source.leaf_input);
        prop_assert_eq!(&entry.submission.extra_data, &source.extra_data);
        prop_assert_eq!(entry.sequence, Some(number));
        let key = *model.keys.entry(number).or_insert(entry.submission.key);
        prop_assert_eq!(entry.submission.key, key, "number {} changed keys", number);
    }
    for (number, key) in &model.keys {
        let is_held = (first_held..next).contains(number);
        prop_assert_eq!(state.ct_entry(key).is_some(), is_held);
        // A mirror keeps no dedupe records of what it cleaned up.
        prop_assert_eq!(state.ct_cleaned_entry(key), None);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_mirror_holds_the_source_in_order_and_serves_only_recorded_source_sths(
        source in prop::collection::vec((0u64..5_000, 0u8..6), 0..120),
        steps in prop::collection::vec((action(), 0u64..700), 1..150),
    ) {
        let mut model = Model {
            source: Source {
                entries: source
                    .iter()
                    .map(|(offset, payload)| source_entry(*offset, *payload))
                    .collect(),
                clock_ms: T0,
            },
            url: URLS[0].to_owned(),
            recorded: Vec::new(),
            latest: None,
            targets: BTreeMap::new(),
            serving: None,
            keys: BTreeMap::new(),
        };
        let mut state = State::new();
        let mut now_ms = T0;
        // An origin log takes no mirror appends; then the empty log becomes a mirror.
        let before = state.clone();
        let reply = ct(
            &mut state,
            CtCommand::MirrorAppend { first: 0, entries: model.source.entries.clone(), sth: None },
            Stamp::new(1, now_ms),
        );
        prop_assert!(matches!(reply, Err(CtError::Mirror(_))));
        prop_assert_eq!(state.ct_next_sequence(), 0);
        prop_assert_eq!(state.ct_mirror(), before.ct_mirror());
        let reply = ct(
            &mut state,
            CtCommand::StartMirror(source_of(URLS[0], false)),
            Stamp::new(2, now_ms),
        );
        prop_assert_eq!(reply, Ok(CtReply::Configured));
        check(&mut model, &state)?;

        for (index, (action, advance_ms)) in steps.iter().enumerate() {
            now_ms += advance_ms;
            step(&mut model, &mut state, action, Stamp::new(index as u64 + 3, now_ms))?;
            check(&mut model, &state)?;
        }
        let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
        prop_assert_eq!(restored, state);
    }
}
