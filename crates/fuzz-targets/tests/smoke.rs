//! The fuzzing smoke run, part of `cargo test --workspace` and so of `cargo xtask test`: every
//! committed corpus file through every target, then a fixed batch of mutations of the corpus
//! (the same inputs on every run). No nightly, no libFuzzer: the bodies are plain functions.
//!
//! A failing input is written to the system's temporary directory and named in the panic, so it
//! can be replayed with `cargo xtask fuzz <target> -- <file>` or added to the corpus.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use certus_fuzz_targets::mutate::Mutator;
use certus_fuzz_targets::{TARGETS, Target};

/// Mutated inputs per target: a few seconds in all in a debug build.
const MUTANTS_PER_TARGET: usize = 4_000;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The committed corpus of `target`, in file name order.
fn corpus(target: &Target) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(target.name);
    let mut files: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no corpus", target.name);
    files
}

/// Runs one input; on a panic, saves it and fails naming the file.
fn run(target: &Target, what: &str, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| (target.run)(input))).is_err() {
        let path = std::env::temp_dir().join(format!(
            "certus-fuzz-{}-{}",
            target.name,
            what.replace(['/', ' '], "_")
        ));
        fs::write(&path, input).unwrap();
        panic!(
            "target {} panicked on {what}; the input is saved at {}",
            target.name,
            path.display()
        );
    }
}

#[test]
fn every_target_has_a_libfuzzer_wrapper_and_a_corpus() {
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    for target in TARGETS {
        assert!(
            fuzz_dir()
                .join("fuzz_targets")
                .join(format!("{}.rs", target.name))
                .is_file(),
            "fuzz/fuzz_targets/{}.rs is missing",
            target.name
        );
        assert!(
            manifest.contains(&format!("name = \"{}\"", target.name)),
            "fuzz/Cargo.toml has no [[bin]] for {}",
            target.name
        );
        corpus(target);
    }
}

#[test]
fn the_committed_corpora_replay_cleanly() {
    for target in TARGETS {
        for (name, input) in corpus(target) {
            run(target, &name, &input);
        }
    }
}

#[test]
fn mutations_of_the_corpora_replay_cleanly() {
    for (seed, target) in (1u64..).zip(TARGETS) {
        let files = corpus(target);
        let mut mutator = Mutator::new(0x5eed_0000 + seed);
        for n in 0..MUTANTS_PER_TARGET {
            let (_, input) = &files[mutator.below(files.len())];
            let (_, other) = &files[mutator.below(files.len())];
            let mutant = mutator.mutate(input, other);
            run(target, &format!("mutant-{n}"), &mutant);
        }
    }
}

#[test]
fn the_valid_chain_seeds_are_accepted() {
    // The chain seeds must reach the far side of the checks, or the fuzzer starts from refusals.
    let target = certus_fuzz_targets::target("ct_chain").unwrap();
    let valid: Vec<_> = corpus(&target)
        .into_iter()
        .filter(|(name, _)| name.starts_with("seed-valid-"))
        .collect();
    assert!(valid.len() >= 4, "the chain corpus lost its valid seeds");
    for (name, input) in valid {
        let (precert, rest) = input.split_first().unwrap();
        let chain = match certus_ct::structures::ExtraData::decode(
            certus_ct::structures::LogEntryType::X509Entry,
            rest,
        ) {
            Ok(certus_ct::structures::ExtraData::X509 { certificate_chain }) => certificate_chain,
            other => panic!("{name}: {other:?}"),
        };
        let limits = certus_ct::chain::ChainLimits::default();
        let roots = certus_fuzz_targets::ct::roots();
        let checked = if precert & 1 == 1 {
            certus_ct::chain::check_pre_chain(&chain, roots, &limits)
        } else {
            certus_ct::chain::check_chain(&chain, roots, &limits)
        };
        assert!(checked.is_ok(), "{name}: {checked:?}");
    }
}
