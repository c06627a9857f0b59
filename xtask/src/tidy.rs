//! Style checks that are cheaper as tests than as review comments.

use std::fs;
use std::path::{Path, PathBuf};

use crate::{COMMANDS, workspace_root};

mod bounds;
mod code_map;
mod import_loops;

/// Every `.rs` file under `dir`, at any depth, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Workspace member directories, relative to the root (`crates/core`, `xtask`, ...).
fn members() -> Vec<String> {
    let root = workspace_root();
    let mut members = vec!["xtask".to_owned()];
    for entry in fs::read_dir(root.join("crates")).unwrap() {
        let path = entry.unwrap().path();
        if path.join("Cargo.toml").exists() {
            members.push(format!(
                "crates/{}",
                path.file_name().unwrap().to_str().unwrap()
            ));
        }
    }
    for dir in ["sim", "tests"] {
        if root.join(dir).join("Cargo.toml").exists() {
            members.push(dir.to_owned());
        }
    }
    members.sort();
    members
}

/// The core is pure: the same log must give the same state on every replica, so it may not read
/// a clock, draw randomness, touch the disk or network, spawn, or iterate a hash map.
#[test]
fn the_core_crate_is_pure_and_deterministic() {
    const FORBIDDEN: &[&str] = &[
        "HashMap",
        "HashSet",
        "SystemTime",
        "Instant",
        "thread_rng",
        "rand::",
        "tokio",
        "async ",
        ".await",
        "std::fs",
        "std::net",
        "std::thread",
        "std::time",
        "std::env",
        "std::process",
        "unsafe ",
    ];
    let core = workspace_root().join("crates/core/src");
    let mut found = Vec::new();
    for file in rust_files(&core) {
        for (number, line) in fs::read_to_string(&file).unwrap().lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for word in FORBIDDEN {
                if code.contains(word) {
                    found.push(format!("{}:{}: {word}", file.display(), number + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the core crate must stay pure:\n{}",
        found.join("\n")
    );
}

/// The code map names every crate that exists.
/// The simulation replays a seed exactly only if node and simulation code make no choice from a
/// generator it does not seed: an unbiased `select!` polls its branches from a random start that
/// tokio draws per thread, seeded from a process-wide counter (watch channels, the other such
/// choice, are kept out by clippy.toml).
#[test]
fn every_select_in_simulated_code_is_biased() {
    let root = workspace_root();
    let mut unbiased = Vec::new();
    for dir in ["crates/node/src", "crates/store/src", "sim/src"] {
        for file in rust_files(&root.join(dir)) {
            let text = fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            for (at, line) in lines.iter().enumerate() {
                if !line.contains("select! {") || line.trim_start().starts_with("//") {
                    continue;
                }
                let first = lines[at + 1..]
                    .iter()
                    .map(|line| line.trim())
                    .find(|line| !line.starts_with("//"));
                if first != Some("biased;") {
                    unbiased.push(format!("{}:{}", file.display(), at + 1));
                }
            }
        }
    }
    assert!(
        unbiased.is_empty(),
        "select! without `biased;` first (the simulation could not replay it): {unbiased:?}"
    );
}

#[test]
fn the_architecture_doc_maps_every_crate() {
    let doc = fs::read_to_string(workspace_root().join("docs/architecture.md")).unwrap();
    let missing: Vec<_> = members()
        .into_iter()
        .filter(|m| !doc.contains(&format!("`{m}/`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md has no code-map entry for {missing:?}"
    );
}

/// Every crate takes the workspace lints, so warnings mean the same everywhere.
#[test]
fn every_crate_uses_the_workspace_lints() {
    let root = workspace_root();
    for member in members() {
        let manifest = fs::read_to_string(root.join(&member).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "{member}/Cargo.toml does not take the workspace lints"
        );
    }
}

/// The README shows only commands that exist.
#[test]
fn the_readme_mentions_only_real_xtask_commands() {
    let readme = fs::read_to_string(workspace_root().join("README.md")).unwrap();
    assert!(
        readme.contains("cargo xtask test"),
        "the README must show the test command"
    );
    for (at, _) in readme.match_indices("cargo xtask ") {
        let command: String = readme[at + "cargo xtask ".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        assert!(
            COMMANDS.iter().any(|(name, _)| *name == command),
            "README shows `cargo xtask {command}`, which does not exist"
        );
    }
}
