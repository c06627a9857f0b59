//! The bodies of Certus's fuzz targets: every decoder a client or a peer reaches, each followed
//! by what the node does next with what decoded (validate, convert, apply to a `State`), with the
//! invariants checked on the way.
//!
//! Each target is a plain `fn(&[u8])` that panics on a bug and returns on any input the project
//! handles, refusals included. `fuzz/` (a cargo-fuzz project with its own workspace) wraps each
//! one in `libfuzzer_sys::fuzz_target!`; the smoke test in `tests/smoke.rs` replays the committed
//! corpora under `fuzz/corpus/` and a fixed batch of mutations of them through the same functions
//! with plain `cargo test`, so `cargo xtask test` runs every target without nightly or libFuzzer.
//!
//! See `docs/fuzzing.md` for what each target covers and how to run it.

#![deny(missing_docs, unreachable_pub)]

pub mod commands;
pub mod ct;
pub mod grpc;
pub mod limits;
pub mod mutate;
pub mod raft;
pub mod snapshot;

/// One fuzz target: its name (the directory under `fuzz/corpus/` and the binary in
/// `fuzz/fuzz_targets/`) and its body.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// The body: panics on a bug.
    pub run: fn(&[u8]),
}

/// Every target, in the order `docs/fuzzing.md` lists them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "raft_rpc",
        run: raft::raft_rpc,
    },
    Target {
        name: "log_entries",
        run: commands::log_entries,
    },
    Target {
        name: "snapshot",
        run: snapshot::snapshot,
    },
    Target {
        name: "ct_tls",
        run: ct::ct_tls,
    },
    Target {
        name: "ct_json",
        run: ct::ct_json,
    },
    Target {
        name: "ct_chain",
        run: ct::ct_chain,
    },
    Target {
        name: "grpc_requests",
        run: grpc::grpc_requests,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|target| target.name == name)
}

/// Splits the first byte off as a selector among `count` choices (0 for an empty input).
pub(crate) fn select(data: &[u8], count: u8) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&first, rest)) => (first % count, rest),
        None => (0, data),
    }
}
