use super::*;

const T0: u64 = 1_700_000_000_000;

fn key(n: u8) -> EntryKey {
    EntryKey([n; 32])
}

fn submission(n: u8, sct_timestamp_ms: u64) -> Submission {
    let mut leaf_input = vec![0, 0];
    leaf_input.extend_from_slice(&sct_timestamp_ms.to_be_bytes());
    leaf_input.extend_from_slice(&[0, 0, n]);
    Submission {
        key: key(n),
        sct_timestamp_ms,
        leaf_input,
        extra_data: vec![n; 3],
        sct: vec![0xAA, n],
    }
}

fn sth(tree_size: u64, timestamp_ms: u64, root: u8) -> SignedTreeHead {
    SignedTreeHead {
        tree_size,
        timestamp_ms,
        root_hash: [root; 32],
        signature: vec![4, 3, 0, 1, root],
    }
}

fn add(log: &mut CtLog, submissions: Vec<Submission>) -> Vec<AddOutcome> {
    match log.apply(CtCommand::Add { submissions }, T0) {
        Ok(CtReply::Added(outcomes)) => outcomes,
        other => panic!("add answered {other:?}"),
    }
}

/// A log with entries 1..=n added at T0 and sequenced at T0 + 1 s, checked after each step.
fn sequenced_log(n: u8) -> CtLog {
    let mut log = CtLog::default();
    let outcomes = add(&mut log, (1..=n).map(|i| submission(i, T0)).collect());
    assert!(outcomes.iter().all(|o| *o == AddOutcome::Added));
    let keys = log.ready_to_sequence(T0 + 1_000, usize::MAX);
    assert_eq!(keys.len(), usize::from(n));
    let reply = log.apply(CtCommand::Sequence { first: 0, keys }, T0 + 1_000);
    assert_eq!(
        reply,
        Ok(CtReply::Sequenced {
            first: 0,
            count: n.into()
        })
    );
    log.check(T0 + 1_000).unwrap();
    log
}

fn report(
    log: &mut CtLog,
    node: u64,
    sth: SignedTreeHead,
    now_ms: u64,
) -> Result<CtReply, CtError> {
    let contiguous_size = sth.tree_size;
    log.apply(
        CtCommand::Report {
            node,
            sth,
            contiguous_size,
        },
        now_ms,
    )
}

#[test]
fn the_seed_table_selects_the_largest_size_enough_nodes_hold() {
    // Seed 004: five nodes at 1000, 2000, 2000, 3000, 4000 entries.
    let sizes = [1000, 2000, 2000, 3000, 4000];
    let reports: BTreeMap<u64, NodeReport> = sizes
        .iter()
        .enumerate()
        .map(|(node, &size)| {
            let report = NodeReport {
                sth: sth(size, T0 + size, 1),
                contiguous_size: size,
                reported_at_ms: T0,
            };
            (node as u64, report)
        })
        .collect();
    let members: BTreeSet<u64> = (0..5).collect();
    for (min_serving_nodes, expected) in [(2, 3000), (3, 2000), (4, 2000), (5, 1000)] {
        let config = LogConfig {
            min_serving_nodes,
            min_serving_permille: 0,
            ..LogConfig::default()
        };
        let selected = select_serving(&reports, &members, &config, None, T0).unwrap();
        assert_eq!(
            selected.tree_size, expected,
            "min serving {min_serving_nodes}"
        );
    }
    // Six required of five members: nothing can be published.
    let config = LogConfig {
        min_serving_nodes: 6,
        min_serving_permille: 0,
        ..LogConfig::default()
    };
    assert_eq!(select_serving(&reports, &members, &config, None, T0), None);
    // The share counts too: 75 % of 5 rounds up to 4 holders.
    let config = LogConfig {
        min_serving_nodes: 1,
        min_serving_permille: 750,
        ..LogConfig::default()
    };
    assert_eq!(holders_needed(&config, 5), 4);
    let selected = select_serving(&reports, &members, &config, None, T0).unwrap();
    assert_eq!(selected.tree_size, 2000);
}

#[test]
fn selection_skips_stale_reports_and_heads_that_are_not_newer() {
    let config = LogConfig {
        min_serving_nodes: 2,
        min_serving_permille: 0,
        report_ttl_ms: 1_000,
        ..LogConfig::default()
    };
    let mut reports = BTreeMap::new();
    for (node, size, reported_at_ms) in [(1, 10, T0), (2, 10, T0 - 5_000), (3, 5, T0)] {
        let report = NodeReport {
            sth: sth(size, T0 + size, 1),
            contiguous_size: size,
            reported_at_ms,
        };
        reports.insert(node, report);
    }
    let members: BTreeSet<u64> = [1, 2, 3].into();
    // Node 2's report is stale, so only node 1 holds 10 entries: size 5 is the choice.
    let selected = select_serving(&reports, &members, &config, None, T0).unwrap();
    assert_eq!(selected.tree_size, 5);
    // A current STH at size 5 with a newer timestamp blocks it.
    let current = sth(5, T0 + 100, 1);
    assert_eq!(
        select_serving(&reports, &members, &config, Some(&current), T0),
        None
    );
    // Non-members do not count.
    let members: BTreeSet<u64> = [1, 3].into();
    assert_eq!(
        select_serving(&reports, &members, &config, None, T0).map(|s| s.tree_size),
        Some(5)
    );
}

#[test]
fn duplicates_get_the_original_sct_before_and_after_clean_up() {
    let mut log = CtLog::default();
    let first = submission(1, T0);
    let mut again = submission(1, T0 + 50);
    again.sct = vec![0xBB];
    let outcomes = add(&mut log, vec![first.clone(), again.clone()]);
    assert_eq!(
        outcomes,
        vec![
            AddOutcome::Added,
            AddOutcome::Duplicate {
                sct: first.sct.clone(),
                sequence: None
            }
        ]
    );
    log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(1)],
        },
        T0 + 1_000,
    )
    .unwrap();
    assert_eq!(
        add(&mut log, vec![again.clone()]),
        vec![AddOutcome::Duplicate {
            sct: first.sct.clone(),
            sequence: Some(0)
        }]
    );
    report(&mut log, 7, sth(1, T0 + 1_000, 9), T0 + 1_000).unwrap();
    let publish = CtCommand::Publish {
        sth: sth(1, T0 + 1_000, 9),
        members: vec![7],
    };
    log.config.min_serving_nodes = 1;
    log.apply(publish, T0 + 1_000).unwrap();
    assert_eq!(
        log.apply(CtCommand::CleanUp { max_entries: 10 }, T0 + 1_000),
        Ok(CtReply::CleanedUp {
            removed: 1,
            remaining: 0
        })
    );
    assert_eq!(
        add(&mut log, vec![again]),
        vec![AddOutcome::DuplicateCleanedUp {
            sequence: 0,
            sct_timestamp_ms: T0
        }]
    );
    log.check(T0 + 1_000).unwrap();
}

#[test]
fn back_pressure_freezing_and_malformed_submissions_refuse_entries() {
    let mut log = CtLog {
        config: LogConfig {
            unsequenced_watermark: 2,
            ..LogConfig::default()
        },
        ..CtLog::default()
    };
    let outcomes = add(
        &mut log,
        vec![submission(1, T0), submission(2, T0), submission(3, T0)],
    );
    assert_eq!(outcomes[..2], [AddOutcome::Added, AddOutcome::Added]);
    assert_eq!(
        outcomes[2],
        AddOutcome::Refused(CtError::Backlog {
            unsequenced: 2,
            watermark: 2
        })
    );
    assert_eq!(log.held.len(), 2);

    log.apply(CtCommand::SetFrozen { frozen: true }, T0)
        .unwrap();
    log.config.unsequenced_watermark = 100;
    assert_eq!(
        add(&mut log, vec![submission(4, T0)]),
        vec![AddOutcome::Refused(CtError::Frozen)]
    );
    // A duplicate is still answered while frozen: it adds nothing.
    assert!(matches!(
        add(&mut log, vec![submission(1, T0)])[0],
        AddOutcome::Duplicate { .. }
    ));
    log.apply(CtCommand::SetFrozen { frozen: false }, T0)
        .unwrap();

    let mut lying = submission(5, T0);
    lying.sct_timestamp_ms = T0 + 1;
    assert!(matches!(
        add(&mut log, vec![lying])[0],
        AddOutcome::Refused(CtError::MalformedSubmission(_))
    ));
    let mut huge = submission(6, T0);
    huge.extra_data = vec![0; CT_EXTRA_DATA_BYTES_MAX + 1];
    assert!(matches!(
        add(&mut log, vec![huge])[0],
        AddOutcome::Refused(CtError::TooLarge { ref field, .. }) if field == "extra_data"
    ));
    let too_many = vec![submission(7, T0); CT_ADD_BATCH_MAX + 1];
    assert!(matches!(
        log.apply(
            CtCommand::Add {
                submissions: too_many
            },
            T0
        ),
        Err(CtError::BatchTooLarge { .. })
    ));
    assert_eq!(log.held.len(), 2);
    log.check(T0).unwrap();
}

#[test]
fn sequencing_is_a_check_and_set_that_numbers_each_entry_once() {
    let mut log = CtLog::default();
    add(
        &mut log,
        vec![submission(3, T0), submission(1, T0 + 10), submission(2, T0)],
    );
    let at = T0 + 1_000;
    // Order is (timestamp, key): 2 and 3 at T0, then 1.
    let keys = log.ready_to_sequence(at, usize::MAX);
    assert_eq!(keys, vec![key(2), key(3), key(1)]);

    let before = log.clone();
    let stale = log.apply(
        CtCommand::Sequence {
            first: 1,
            keys: keys.clone(),
        },
        at,
    );
    assert_eq!(
        stale,
        Err(CtError::StaleSequence {
            expected: 0,
            got: 1
        })
    );
    let unordered = log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(3), key(2)],
        },
        at,
    );
    assert!(matches!(unordered, Err(CtError::NotSequenceable { .. })));
    let repeated = log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(2), key(2)],
        },
        at,
    );
    assert!(matches!(repeated, Err(CtError::NotSequenceable { .. })));
    let unknown = log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(9)],
        },
        at,
    );
    assert!(matches!(unknown, Err(CtError::NotSequenceable { .. })));
    let too_new = log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(2)],
        },
        T0 + 50,
    );
    assert!(matches!(too_new, Err(CtError::NotSequenceable { .. })));
    assert_eq!(log, before, "refused commands change nothing");

    log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(2), key(3)],
        },
        at,
    )
    .unwrap();
    // A stale master replaying its batch is refused; a new master continues from the state.
    let replay = log.apply(
        CtCommand::Sequence {
            first: 0,
            keys: vec![key(1)],
        },
        at,
    );
    assert!(matches!(
        replay,
        Err(CtError::StaleSequence { expected: 2, .. })
    ));
    let again = log.apply(
        CtCommand::Sequence {
            first: 2,
            keys: vec![key(2)],
        },
        at,
    );
    assert!(matches!(again, Err(CtError::NotSequenceable { .. })));
    log.apply(
        CtCommand::Sequence {
            first: 2,
            keys: vec![key(1)],
        },
        at,
    )
    .unwrap();
    let numbered: Vec<(u64, EntryKey)> = log
        .sequenced_from(0, 10)
        .into_iter()
        .map(|(n, held)| (n, held.submission.key))
        .collect();
    assert_eq!(numbered, vec![(0, key(2)), (1, key(3)), (2, key(1))]);
    log.check(at).unwrap();
}

#[test]
fn publishing_needs_enough_fresh_holders_and_a_proper_successor() {
    let mut log = sequenced_log(10);
    let at = T0 + 2_000;
    log.config.min_serving_nodes = 2;
    log.config.min_serving_permille = 0;
    report(&mut log, 1, sth(8, at, 8), at).unwrap();
    report(&mut log, 2, sth(10, at, 10), at).unwrap();
    let members = vec![1, 2, 3];

    let publish = |log: &mut CtLog, sth: SignedTreeHead, now_ms| {
        log.apply(
            CtCommand::Publish {
                sth,
                members: members.clone(),
            },
            now_ms,
        )
    };
    // Only node 2 holds 10 entries.
    assert!(matches!(
        publish(&mut log, sth(10, at, 10), at),
        Err(CtError::NotPublishable { .. })
    ));
    // An STH nobody reported.
    assert!(matches!(
        publish(&mut log, sth(8, at + 1, 8), at),
        Err(CtError::NotPublishable { .. })
    ));
    assert_eq!(
        publish(&mut log, sth(8, at, 8), at),
        Ok(CtReply::Published {
            previous_tree_size: 0
        })
    );
    // Same STH again: not newer.
    assert!(publish(&mut log, sth(8, at, 8), at).is_err());
    // A smaller tree, even newer, never serves.
    report(&mut log, 3, sth(5, at + 10, 5), at).unwrap();
    assert!(publish(&mut log, sth(5, at + 10, 5), at).is_err());
    // Reports past the TTL stop counting.
    report(&mut log, 1, sth(10, at + 20, 10), at).unwrap();
    let late = at + log.config.report_ttl_ms + 1;
    report(&mut log, 3, sth(10, at + 30, 10), late).unwrap();
    assert_eq!(
        holders(&log.reports, &[1, 2, 3].into(), 10, &log.config, late),
        1
    );
    assert!(publish(&mut log, sth(10, at + 30, 10), late).is_err());
    assert_eq!(
        publish(&mut log, sth(10, at + 30, 10), at + 100),
        Ok(CtReply::Published {
            previous_tree_size: 8
        })
    );
    // A bad member list.
    let duplicate_members = log.apply(
        CtCommand::Publish {
            sth: sth(10, at + 30, 10),
            members: vec![1, 1],
        },
        at,
    );
    assert!(duplicate_members.is_err());
    log.check(late).unwrap();
}

#[test]
fn diverging_roots_block_publishing_and_reports_against_the_serving_sth() {
    let mut log = sequenced_log(4);
    let at = T0 + 2_000;
    log.config.min_serving_nodes = 1;
    log.config.min_serving_permille = 0;
    report(&mut log, 1, sth(4, at, 1), at).unwrap();
    report(&mut log, 2, sth(4, at + 1, 2), at).unwrap();
    let refused = log.apply(
        CtCommand::Publish {
            sth: sth(4, at, 1),
            members: vec![1, 2],
        },
        at,
    );
    assert!(matches!(refused, Err(CtError::NotPublishable { .. })));
    log.apply(CtCommand::ForgetNode { node: 2 }, at).unwrap();
    log.apply(
        CtCommand::Publish {
            sth: sth(4, at, 1),
            members: vec![1, 2],
        },
        at,
    )
    .unwrap();
    assert!(matches!(
        report(&mut log, 2, sth(4, at + 5, 2), at),
        Err(CtError::BadReport { node: 2, .. })
    ));
}

#[test]
fn reports_cannot_claim_more_than_was_sequenced() {
    let mut log = sequenced_log(3);
    assert!(report(&mut log, 1, sth(4, T0, 1), T0).is_err());
    let overclaim = log.apply(
        CtCommand::Report {
            node: 1,
            sth: sth(3, T0, 1),
            contiguous_size: 2,
        },
        T0,
    );
    assert!(matches!(overclaim, Err(CtError::BadReport { .. })));
    assert!(log.reports.is_empty());
}

#[test]
fn clean_up_stops_at_the_serving_sth_and_at_its_batch_bound() {
    let mut log = sequenced_log(10);
    let at = T0 + 2_000;
    assert_eq!(
        log.apply(CtCommand::CleanUp { max_entries: 100 }, at),
        Ok(CtReply::CleanedUp {
            removed: 0,
            remaining: 0
        })
    );
    log.config.min_serving_nodes = 1;
    report(&mut log, 1, sth(6, at, 6), at).unwrap();
    log.apply(
        CtCommand::Publish {
            sth: sth(6, at, 6),
            members: vec![1],
        },
        at,
    )
    .unwrap();
    assert_eq!(
        log.apply(CtCommand::CleanUp { max_entries: 4 }, at),
        Ok(CtReply::CleanedUp {
            removed: 4,
            remaining: 2
        })
    );
    assert_eq!(log.first_held_sequence(), 4);
    log.check(at).unwrap();
    assert_eq!(
        log.apply(CtCommand::CleanUp { max_entries: 100 }, at),
        Ok(CtReply::CleanedUp {
            removed: 2,
            remaining: 0
        })
    );
    assert_eq!(log.first_held_sequence(), 6);
    assert_eq!(log.held.len(), 4);
    assert_eq!(log.cleaned.len(), 6);
    log.check(at).unwrap();
    let restored = CtLog::from_records(log.records(), log.mirror().cloned(), log.dedupe()).unwrap();
    assert_eq!(restored, log);
}

#[test]
fn sth_timestamps_move_forward_and_cover_their_entries() {
    assert_eq!(next_sth_timestamp(100, None, 0), 100);
    assert_eq!(next_sth_timestamp(100, Some(100), 0), 101);
    assert_eq!(next_sth_timestamp(100, Some(500), 0), 501);
    assert_eq!(next_sth_timestamp(100, Some(50), 700), 700);
}

#[test]
fn config_fields_are_bounded() {
    LogConfig::default().validate().unwrap();
    let bad = [
        LogConfig {
            min_serving_nodes: 0,
            ..LogConfig::default()
        },
        LogConfig {
            min_serving_permille: 1001,
            ..LogConfig::default()
        },
        LogConfig {
            unsequenced_watermark: 0,
            ..LogConfig::default()
        },
        LogConfig {
            signing_interval_ms: 1,
            ..LogConfig::default()
        },
    ];
    let mut log = CtLog::default();
    for config in bad {
        assert!(matches!(
            log.apply(CtCommand::Configure(config), T0),
            Err(CtError::InvalidConfig { .. })
        ));
    }
    assert_eq!(log.config, LogConfig::default());
}

fn source() -> MirrorSource {
    MirrorSource {
        url: "https://source.example/log".to_owned(),
        public_key_der: vec![0x30, 0x59, 1, 2, 3],
    }
}

fn mirror_entry(n: u8) -> MirrorEntry {
    MirrorEntry {
        leaf_input: submission(n, T0).leaf_input,
        extra_data: vec![n; 2],
    }
}

fn append(
    log: &mut CtLog,
    first: u64,
    entries: Vec<MirrorEntry>,
    sth: Option<SignedTreeHead>,
) -> Result<CtReply, CtError> {
    let reply = log.apply(
        CtCommand::MirrorAppend {
            first,
            entries,
            sth,
        },
        T0,
    );
    log.check(T0).unwrap();
    reply
}

/// A mirror with source entries 1..=n appended, the last batch with an STH of size n.
fn mirror_log(n: u8) -> CtLog {
    let mut log = CtLog::default();
    assert_eq!(
        log.apply(CtCommand::StartMirror(source()), T0),
        Ok(CtReply::Configured)
    );
    let reply = append(
        &mut log,
        0,
        (1..=n).map(mirror_entry).collect(),
        Some(sth(n.into(), T0, 7)),
    );
    assert_eq!(
        reply,
        Ok(CtReply::Mirrored {
            first: 0,
            count: n.into()
        })
    );
    log
}

#[test]
fn only_an_empty_log_becomes_a_mirror_and_for_good() {
    let mut log = sequenced_log(1);
    assert!(matches!(
        log.apply(CtCommand::StartMirror(source()), T0),
        Err(CtError::Mirror(_))
    ));
    assert_eq!(log.mirror, None);

    let mut log = mirror_log(2);
    // The same key may move to another URL; another key is another log.
    let moved = MirrorSource {
        url: "https://moved.example/log".to_owned(),
        ..source()
    };
    assert_eq!(
        log.apply(CtCommand::StartMirror(moved.clone()), T0),
        Ok(CtReply::Configured)
    );
    assert_eq!(log.mirror.as_ref().unwrap().source, moved);
    let other = MirrorSource {
        public_key_der: vec![9],
        ..source()
    };
    assert!(matches!(
        log.apply(CtCommand::StartMirror(other), T0),
        Err(CtError::Mirror(_))
    ));
    for bad in [
        MirrorSource {
            url: String::new(),
            ..source()
        },
        MirrorSource {
            public_key_der: Vec::new(),
            ..source()
        },
    ] {
        assert!(matches!(
            CtLog::default().apply(CtCommand::StartMirror(bad), T0),
            Err(CtError::Mirror(_))
        ));
    }
}

#[test]
fn a_mirror_takes_no_submissions_and_sequences_nothing() {
    let mut log = mirror_log(1);
    let before = log.clone();
    assert_eq!(
        log.apply(
            CtCommand::Add {
                submissions: vec![submission(9, T0)]
            },
            T0
        ),
        Err(CtError::IsMirror {
            source_url: source().url
        })
    );
    assert!(matches!(
        log.apply(
            CtCommand::Sequence {
                first: 1,
                keys: Vec::new()
            },
            T0
        ),
        Err(CtError::IsMirror { .. })
    ));
    assert_eq!(log, before);
    // And an origin log refuses mirror appends.
    let mut origin = sequenced_log(1);
    assert!(matches!(
        append(&mut origin, 1, vec![mirror_entry(2)], None),
        Err(CtError::Mirror(_))
    ));
}

#[test]
fn mirror_appends_are_a_check_and_set_with_newer_source_sths() {
    let mut log = mirror_log(3);
    let before = log.clone();
    // Stale first number: a deposed master's append is refused.
    assert_eq!(
        append(&mut log, 2, vec![mirror_entry(4)], None),
        Err(CtError::StaleSequence {
            expected: 3,
            got: 2
        })
    );
    // An STH whose size is not where the entries end.
    assert!(matches!(
        append(&mut log, 3, vec![mirror_entry(4)], Some(sth(5, T0 + 1, 8))),
        Err(CtError::Mirror(_))
    ));
    // An STH not newer than the last recorded one.
    assert!(matches!(
        append(&mut log, 3, vec![mirror_entry(4)], Some(sth(4, T0, 8))),
        Err(CtError::Mirror(_))
    ));
    // A leaf too short to carry its timestamp.
    let short = MirrorEntry {
        leaf_input: vec![0, 0, 1],
        extra_data: Vec::new(),
    };
    assert!(matches!(
        append(&mut log, 3, vec![short], None),
        Err(CtError::MalformedSubmission(_))
    ));
    assert_eq!(log, before, "refused appends change nothing");

    // Entries without an STH, then a newer STH of the same size with no entries.
    assert_eq!(
        append(&mut log, 3, vec![mirror_entry(4), mirror_entry(5)], None),
        Ok(CtReply::Mirrored { first: 3, count: 2 })
    );
    assert_eq!(
        append(&mut log, 5, Vec::new(), Some(sth(5, T0 + 10, 9))),
        Ok(CtReply::Mirrored { first: 5, count: 0 })
    );
    let mirror = log.mirror.as_ref().unwrap();
    assert_eq!(mirror.targets.keys().copied().collect::<Vec<_>>(), [3, 5]);
    assert_eq!(mirror.latest, Some(sth(5, T0 + 10, 9)));
    // Every number maps to exactly the source entry appended under it.
    let sequenced = log.sequenced_from(0, 10);
    assert_eq!(sequenced.len(), 5);
    for (sequence, held) in sequenced {
        let n = u8::try_from(sequence + 1).unwrap();
        assert_eq!(held.submission.leaf_input, mirror_entry(n).leaf_input);
        assert_eq!(held.sequence, Some(sequence));
    }
}

#[test]
fn a_mirror_serves_only_recorded_source_sths_and_keeps_no_dedupe_records() {
    let mut log = mirror_log(3);
    let members = [1, 2];
    // Nodes report a source STH they hold, and a forged one of the same size.
    let source_sth = sth(3, T0, 7);
    let forged = sth(3, T0 + 5, 7);
    for node in members {
        report(&mut log, node, source_sth.clone(), T0).unwrap();
    }
    report(&mut log, 3, forged.clone(), T0).unwrap();
    assert!(matches!(
        log.apply(
            CtCommand::Publish {
                sth: forged,
                members: vec![1, 2, 3]
            },
            T0
        ),
        Err(CtError::NotPublishable { .. })
    ));
    assert_eq!(
        log.apply(
            CtCommand::Publish {
                sth: source_sth,
                members: vec![1, 2, 3]
            },
            T0
        ),
        Ok(CtReply::Published {
            previous_tree_size: 0
        })
    );
    log.check(T0).unwrap();
    assert!(
        log.mirror.as_ref().unwrap().targets.is_empty(),
        "what the serving STH succeeds is dropped"
    );
    assert_eq!(
        log.apply(CtCommand::CleanUp { max_entries: 10 }, T0),
        Ok(CtReply::CleanedUp {
            removed: 3,
            remaining: 0
        })
    );
    assert!(log.held.is_empty() && log.cleaned.is_empty());
    log.check(T0).unwrap();
    // Appending continues from the number after the cleaned-up entries.
    assert_eq!(
        append(&mut log, 3, vec![mirror_entry(4)], Some(sth(4, T0 + 1, 8))),
        Ok(CtReply::Mirrored { first: 3, count: 1 })
    );
}

#[test]
fn mirror_appends_stop_at_the_watermark_and_keep_a_bounded_set_of_sths() {
    let mut log = mirror_log(2);
    log.config.unsequenced_watermark = 2;
    assert!(matches!(
        append(&mut log, 2, vec![mirror_entry(3)], None),
        Err(CtError::Backlog { .. })
    ));
    // A newer STH without entries is still taken (nothing more to hold).
    log.config.unsequenced_watermark = 100_000;
    for i in 0..(CT_MIRROR_TARGETS_MAX as u64 + 5) {
        let first = log.next_sequence;
        append(
            &mut log,
            first,
            vec![mirror_entry(3)],
            Some(sth(first + 1, T0 + 1 + i, 3)),
        )
        .unwrap();
    }
    let mirror = log.mirror.as_ref().unwrap();
    assert_eq!(mirror.targets.len(), CT_MIRROR_TARGETS_MAX);
    assert_eq!(
        mirror.targets.last_key_value().map(|(size, _)| *size),
        Some(log.next_sequence),
        "the newest are kept"
    );
}

#[test]
fn a_frozen_mirror_stops_following() {
    let mut log = mirror_log(1);
    log.apply(CtCommand::SetFrozen { frozen: true }, T0)
        .unwrap();
    assert_eq!(
        append(&mut log, 1, vec![mirror_entry(2)], None),
        Err(CtError::Frozen)
    );
    log.apply(CtCommand::SetFrozen { frozen: false }, T0)
        .unwrap();
    assert_eq!(
        append(&mut log, 1, vec![mirror_entry(2)], None),
        Ok(CtReply::Mirrored { first: 1, count: 1 })
    );
}

/// `sequenced_log(10)` with entries 0..6 published and cleaned up.
fn cleaned_up_log() -> CtLog {
    let mut log = sequenced_log(10);
    let at = T0 + 2_000;
    log.config.min_serving_nodes = 1;
    report(&mut log, 1, sth(6, at, 6), at).unwrap();
    log.apply(
        CtCommand::Publish {
            sth: sth(6, at, 6),
            members: vec![1],
        },
        at,
    )
    .unwrap();
    log.apply(CtCommand::CleanUp { max_entries: 100 }, at)
        .unwrap();
    log
}

fn add_checked(log: &mut CtLog, n: u8, checked_below: u64) -> AddOutcome {
    let reply = log.apply(
        CtCommand::AddChecked {
            submissions: vec![submission(n, T0 + 5_000)],
            checked_below,
        },
        T0 + 5_000,
    );
    match reply {
        Ok(CtReply::Added(mut outcomes)) => outcomes.remove(0),
        other => panic!("add answered {other:?}"),
    }
}

#[test]
fn the_dedupe_window_forgets_old_cleaned_up_entries_and_refuses_unchecked_submissions() {
    let mut log = cleaned_up_log();
    assert_eq!(log.dedupe().forgotten_below, 0);
    assert_eq!(log.cleaned.len(), 6);
    // Keep the last 2 cleaned-up numbers (4 and 5): 0..4 are forgotten.
    assert_eq!(
        log.apply(CtCommand::SetDedupeWindow { entries: 2 }, T0 + 3_000),
        Ok(CtReply::Configured)
    );
    assert_eq!(log.dedupe().forgotten_below, 4);
    assert_eq!(log.cleaned.len(), 2);
    log.check(T0 + 3_000).unwrap();
    // Entry 1 has number 0: the state no longer knows it, so only a node whose index covered
    // number 0 may add it — and such a node would have found it there.
    assert_eq!(
        add_checked(&mut log, 1, 3),
        AddOutcome::Refused(CtError::Unchecked {
            checked_below: 3,
            forgotten_below: 4
        })
    );
    assert!(!log.held.contains_key(&key(1)));
    // Remembered and held entries are answered whatever the node checked.
    assert!(matches!(
        add_checked(&mut log, 6, 0),
        AddOutcome::DuplicateCleanedUp { sequence: 5, .. }
    ));
    assert!(matches!(
        add_checked(&mut log, 9, 0),
        AddOutcome::Duplicate { .. }
    ));
    // A new entry checked far enough is added.
    assert_eq!(add_checked(&mut log, 42, 4), AddOutcome::Added);
    // The unchecked form (written before local indexes) is applied without the check.
    assert_eq!(
        add(&mut log, vec![submission(43, T0)]),
        vec![AddOutcome::Added]
    );
    log.check(T0 + 5_000).unwrap();
    let restored = CtLog::from_records(log.records(), log.mirror().cloned(), log.dedupe()).unwrap();
    assert_eq!(restored, log);
    // A window past its limit is refused and changes nothing.
    let before = log.clone();
    assert!(matches!(
        log.apply(
            CtCommand::SetDedupeWindow {
                entries: CT_DEDUPE_WINDOW_ENTRIES_MAX + 1
            },
            T0 + 5_000
        ),
        Err(CtError::InvalidConfig { .. })
    ));
    assert_eq!(log, before);
}

#[test]
fn clean_up_forgets_what_leaves_the_window_and_the_forgotten_point_never_goes_back() {
    let mut log = sequenced_log(10);
    log.apply(CtCommand::SetDedupeWindow { entries: 3 }, T0 + 1_000)
        .unwrap();
    let at = T0 + 2_000;
    log.config.min_serving_nodes = 1;
    report(&mut log, 1, sth(10, at, 10), at).unwrap();
    log.apply(
        CtCommand::Publish {
            sth: sth(10, at, 10),
            members: vec![1],
        },
        at,
    )
    .unwrap();
    let mut forgotten = 0;
    for _ in 0..5 {
        log.apply(CtCommand::CleanUp { max_entries: 2 }, at)
            .unwrap();
        let first_held = log.first_held_sequence();
        assert_eq!(log.dedupe().forgotten_below, first_held.saturating_sub(3));
        assert!(log.dedupe().forgotten_below >= forgotten);
        forgotten = log.dedupe().forgotten_below;
        assert_eq!(log.cleaned.len() as u64, first_held - forgotten);
        log.check(at).unwrap();
    }
    assert_eq!(forgotten, 7);
    // Widening the window remembers nothing forgotten again.
    log.apply(CtCommand::SetDedupeWindow { entries: 100 }, at)
        .unwrap();
    assert_eq!(log.dedupe().forgotten_below, 7);
    assert_eq!(log.cleaned.len(), 3);
}

#[test]
fn a_mirror_survives_a_snapshot() {
    let log = mirror_log(3);
    let restored = CtLog::from_records(log.records(), log.mirror().cloned(), log.dedupe()).unwrap();
    assert_eq!(restored, log);
}
