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

/// The API's table of contents names every `.proto` file, so a new service is never shipped
/// without its line there (what it is and who calls it).
#[test]
fn the_proto_readme_names_every_proto_file() {
    let proto = workspace_root().join("proto");
    let readme = fs::read_to_string(proto.join("README.md")).unwrap();
    let mut files = Vec::new();
    let mut pending = vec![proto.clone()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "proto") {
                files.push(path.strip_prefix(&proto).unwrap().display().to_string());
            }
        }
    }
    assert!(
        files.iter().any(|file| file == "certus/v1/leases.proto"),
        "the walk over proto/ found {files:?}"
    );
    let missing: Vec<&String> = files
        .iter()
        .filter(|file| !readme.contains(&format!("`{file}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "proto/README.md does not name {missing:?} (add a row to its table of files)"
    );
}

/// Every bound a client or an operator can meet is in docs/operations.md ("Limits"), by name.
///
/// Which bounds: every `pub const` in the `src/limits.rs` of the crates that judge what reaches a
/// node from outside — `crates/node` (the gRPC and HTTP edge, the services, a node's settings),
/// `crates/core` (the replicated state: every request is judged there, and its tables fill up)
/// and `crates/acme` (the ACME server). Every constant counts, whatever its name (`…_MAX`,
/// `…_MIN`, `…_LIMIT`, `…_TIMEOUT`, `…_WAIT`, `…_KEPT`), because a limits file holds only
/// bounds. The other crates' bounds are left out: `crates/client` and `crates/cli` bound the
/// client's own side, `crates/store` and `crates/fuzz-targets` are internal, and `crates/ca`
/// bounds what remote servers (HTTP-01 targets, the upstream CA) answer.
///
/// Required: the name appears in backticks in docs/operations.md, or it is in
/// [`INTERNAL`] with the reason no client or operator meets it. An exception that is documented
/// after all, or no longer exists, fails too, so the list stays true.
mod documented_limits {
    use std::fs;

    use crate::workspace_root;

    /// The limits files whose constants must be documented.
    const LIMITS_FILES: &[&str] = &[
        "crates/node/src/limits.rs",
        "crates/core/src/limits.rs",
        "crates/acme/src/limits.rs",
    ];

    /// Constants of those files that no client or operator meets, each with why.
    const INTERNAL: &[(&str, &str)] = &[
        // Node: pauses and retries inside the node, invisible but as latency.
        (
            "SESSION_CLAIM_RETRY_PAUSE",
            "a waiting claim's pause between two proposals",
        ),
        (
            "SESSION_WORK_CLAIM_ERROR_PAUSE",
            "a worker stream's pause after a failed claim",
        ),
        (
            "CT_FETCH_ROUNDS_MAX",
            "how much a node fetches from its peers per CT round",
        ),
        (
            "CT_DEDUPE_RECHECKS_MAX",
            "rechecks of a submission against the local index",
        ),
        (
            "CERTIFICATE_IDENTITIES_CACHED_MAX",
            "a cache; past it the node parses again",
        ),
        (
            "CLIENT_REGISTER_DRAWS_MAX",
            "random 64-bit ids colliding three times in a row",
        ),
        // Core: commands only the nodes propose, in batches the nodes size to fit.
        (
            "CT_SCT_BYTES_MAX",
            "the size of an SCT the nodes' own signer made",
        ),
        (
            "CT_SIGNATURE_BYTES_MAX",
            "the size of an STH signature the nodes' own signer made",
        ),
        (
            "CT_ADD_BATCH_MAX",
            "the node batches submissions into `Add` commands",
        ),
        ("CT_SEQUENCE_BATCH_MAX", "the master's `Sequence` command"),
        ("CT_CLEANUP_BATCH_MAX", "the master's `CleanUp` command"),
        (
            "CT_MIRROR_BATCH_MAX",
            "the mirror role's `MirrorAppend` command",
        ),
        (
            "PIPELINE_WEBHOOK_BATCH_MAX",
            "the webhook role's `TakeWebhooks` command",
        ),
        (
            "PIPELINE_WEBHOOK_SCAN_MAX",
            "the work of one `TakeWebhooks` command",
        ),
        // ACME: a format's bound that no clock reaches before the year 10000.
        (
            "RFC3339_MS_MAX",
            "the latest time RFC 3339's four-digit years can write",
        ),
    ];

    /// The names of the `pub const`s of a limits file.
    fn public_constants(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|line| line.trim_start().strip_prefix("pub const "))
            .filter_map(|rest| rest.split(':').next())
            .map(str::trim)
            .collect()
    }

    #[test]
    fn every_limit_a_client_or_operator_meets_is_in_the_operations_doc() {
        let root = workspace_root();
        let doc = fs::read_to_string(root.join("docs/operations.md")).unwrap();
        let documented = |name: &str| doc.contains(&format!("`{name}`"));
        let mut undocumented = Vec::new();
        let mut all = Vec::new();
        for file in LIMITS_FILES {
            let text = fs::read_to_string(root.join(file)).unwrap();
            for name in public_constants(&text) {
                all.push(name.to_owned());
                if !documented(name) && !INTERNAL.iter().any(|(internal, _)| *internal == name) {
                    undocumented.push(format!("  {file}: {name}"));
                }
            }
        }
        assert!(
            undocumented.is_empty(),
            "bounds missing from docs/operations.md's Limits tables (add a row: name, value, what \
             answers past it; or, if no client or operator can meet it, add it to INTERNAL in \
             xtask/src/tidy/documented_limits.rs with why):\n{}",
            undocumented.join("\n")
        );
        let stale: Vec<&str> = INTERNAL
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| documented(name) || !all.iter().any(|constant| constant == name))
            .collect();
        assert!(
            stale.is_empty(),
            "INTERNAL lists bounds that are documented or no longer exist: {stale:?}"
        );
    }

    #[test]
    fn public_constants_are_found_by_name() {
        let text = "\
/// A bound.
pub const LEASES_MAX: usize = 1;
const PRIVATE_MAX: usize = 2;
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
const _: () = assert!(LEASES_MAX > 0);
    pub const INDENTED_MAX: usize = 3;
";
        assert_eq!(
            public_constants(text),
            vec!["LEASES_MAX", "FORWARD_TIMEOUT", "INDENTED_MAX"]
        );
    }
}
