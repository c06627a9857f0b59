//! Project automation, run as `cargo xtask <command>`.
//!
//! Plain std on purpose: xtask builds in seconds on a cold machine and never needs updating for a
//! dependency. Each command prints the steps it runs and stops at the first failure.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

mod coverage;
mod mutants;
#[cfg(test)]
mod tidy;

/// The commands this xtask knows; the README may only mention these.
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    (
        "test",
        "format check, clippy with warnings as errors, and every test of the workspace",
    ),
    (
        "sim",
        "`sim --seed S [--scenario NAME]` replays one run; `sim --seeds N|A..B [--scenario all|each|NAME] \
         [--check-determinism] [--allow-unproven] [--shard I/N] [--summary FILE]` sweeps (`all` spreads the seeds \
         over the scenarios, `each` runs every seed in every scenario); `sim --deep` sweeps 10,000 seeds; \
         `sim --merge FILE...` adds up the shards' summaries",
    ),
    (
        "bench",
        "`bench raft|ct|ct-store|sessions|pipelines|grpc|acme [--clients ...] [--seconds N] [--json]`: a 3-node loopback cluster, release build",
    ),
    (
        "fuzz",
        "`fuzz <target|all> [--runs N | --seconds N] [-- libFuzzer args]`: cargo-fuzz on stable (RUSTC_BOOTSTRAP=1), in fuzz/",
    ),
    (
        "chaos",
        "`chaos [--seconds N] [--seed S]`: real `certus serve` processes killed and restarted under leases, pipelines, CT and sessions (5 min by default), history checked",
    ),
    (
        "mutants",
        "`mutants [NAME...] [--jobs N] [--write-docs]`: each planted bug of sim/mutants/ in a scratch \
         copy, seeds of its scenario until one fails; seeds-to-catch and the checkers that fired",
    ),
    (
        "coverage",
        "`coverage [sweep options]`: a sweep (default `--seeds 1..21 --scenario each`) of the simulation \
         built with the workspace's crates instrumented; per-file coverage and the functions no run entered, \
         in target-cov/ (needs LLVM tools of rustc's version)",
    ),
    ("help", "this list"),
];

fn main() -> ExitCode {
    if coverage::is_wrapper() {
        return coverage::wrap_rustc();
    }
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("sim") => sim(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("chaos") => chaos(&args[1..]),
        Some("mutants") => mutants::run(&args[1..]),
        Some("coverage") => coverage::run(&args[1..]),
        None | Some("help" | "-h" | "--help") => {
            print_help();
            Ok(())
        }
        Some(other) => {
            print_help();
            Err(format!("unknown command {other:?}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn print_help() {
    println!("usage: cargo xtask <command>\n\ncommands:");
    for (name, what) in COMMANDS {
        println!("  {name:<8} {what}");
    }
}

/// `cargo xtask test`: what CI runs, in order of cost.
fn test(args: &[String]) -> Result<(), String> {
    if let Some(unknown) = args.first() {
        return Err(format!("`test` takes no arguments, got {unknown:?}"));
    }
    let root = workspace_root();
    run(
        &root,
        "format check",
        "cargo",
        &["fmt", "--all", "--", "--check"],
    )?;
    // Clippy runs inside the builds the tests need (see LINTED_BUILD), not as builds of its own.
    run_with_env(
        &root,
        "build of every test, linted by clippy (warnings are errors)",
        &LINTED_BUILD,
        "cargo",
        &HOST_TESTS_NO_RUN,
    )?;
    // The simulation builds the real node under --cfg madsim, in its own target directory so
    // that switching between the two builds rebuilds nothing.
    let sim_test = [
        "test",
        "--package",
        "certus-sim",
        "--locked",
        "--target-dir",
        "target-sim",
    ];
    run_with_env(
        &root,
        "simulation tests (the node under madsim, 32 seeds each; linted by clippy)",
        &with(&SIM_BUILD, ("MADSIM_TEST_NUM", "32")),
        "cargo",
        &sim_test,
    )?;
    run_with_env(
        &root,
        "simulation determinism (madsim's RNG log compared across two runs)",
        &with(&SIM_BUILD, ("MADSIM_TEST_CHECK_DETERMINISM", "1")),
        "cargo",
        &sim_test,
    )?;
    // The fixed sweep, each seed run twice to check it replays exactly; a linearizability
    // verdict not proven fails it like any other.
    sim(&[
        "--seeds".to_owned(),
        SIM_SWEEP_SEEDS.to_owned(),
        "--scenario".to_owned(),
        "all".to_owned(),
        "--check-determinism".to_owned(),
    ])?;
    run_with_env(
        &root,
        "tests (unit, property, storage suite, and real processes over loopback)",
        &LINTED_BUILD,
        "cargo",
        &HOST_TESTS_NO_RUN[..HOST_TESTS_NO_RUN.len() - 1],
    )?;
    println!("xtask test: all steps passed");
    Ok(())
}

/// How every build in `target-sim` is made: the node under `--cfg madsim`, and the workspace's
/// own crates at opt-level 1 (dependencies and the harness are at 2 in every dev build). A run
/// takes about half the time it takes unoptimised (`ct-5` seeds 3–5: 2.6–3.0 s against
/// 5.1–5.2 s; `leases` seeds 3–4: 0.5–0.6 s against 1.0–1.5 s; the same fingerprints), for
/// about a minute and a half more of build. Every build there must use the same settings, or
/// each switch rebuilds the workspace's crates.
pub(crate) const MADSIM_BUILD: [(&str, &str); 2] = [
    ("RUSTFLAGS", "--cfg madsim"),
    ("CARGO_PROFILE_DEV_OPT_LEVEL", "1"),
];

/// The workspace's tests in the normal build, with `--no-run` last (the run drops it). The
/// simulation's crate is left out: its pure parts (checkers, the linearizability search, their
/// unit tests) are built, linted and tested in the simulation build, and building them once more
/// here took about 90 s of a cold run.
const HOST_TESTS_NO_RUN: [&str; 6] = [
    "test",
    "--workspace",
    "--exclude",
    "certus-sim",
    "--locked",
    "--no-run",
];

/// Clippy inside a build: its driver compiles the workspace's own crates in rustc's place (what
/// `cargo clippy` does for a check), so one build gives both the lints and the binaries.
/// Separate `cargo clippy` runs checked every dependency once more for the host and once for the
/// simulation: 369 s and 330 s of a cold `cargo xtask test` on two cores. (Measured cold after:
/// the host build with lints 819 s against 369 + 727; the simulation's 880 s against 330 + 515,
/// as its own crates' lints lengthen the end of the chain.) Dependencies are built by plain rustc
/// either way, so only the workspace's crates depend on these settings.
const LINTED_BUILD: [(&str, &str); 2] = [
    ("RUSTC_WORKSPACE_WRAPPER", "clippy-driver"),
    // `cargo clippy -- -D warnings` passes its arguments so, each followed by this separator.
    (
        "CLIPPY_ARGS",
        "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
    ),
];

/// Every build of `cargo xtask` in `target-sim` (the simulation tests and every sweep): the
/// simulation build, linted. All of them must use the same settings, or each switch rebuilds
/// the workspace's crates. (The mutants build in their own target directory with
/// [`MADSIM_BUILD`] alone: a planted bug need not be lint-clean.)
pub(crate) const SIM_BUILD: [(&str, &str); 4] = [
    MADSIM_BUILD[0],
    MADSIM_BUILD[1],
    LINTED_BUILD[0],
    LINTED_BUILD[1],
];

/// `settings` and one more.
fn with<'a>(settings: &[(&'a str, &'a str)], more: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    let mut all = settings.to_vec();
    all.push(more);
    all
}

/// The fixed sweep `cargo xtask test` runs: seeds 1..=N spread over the scenarios.
const SIM_SWEEP_SEEDS: &str = "100";

/// `cargo xtask sim [options]`: builds the simulation (under `--cfg madsim`, in `target-sim`)
/// and runs `certus-sim` with the options.
fn sim(args: &[String]) -> Result<(), String> {
    let mut cargo_args = vec![
        "run",
        "--locked",
        "--quiet",
        "--package",
        "certus-sim",
        "--target-dir",
        "target-sim",
        "--",
    ];
    cargo_args.extend(args.iter().map(String::as_str));
    run_with_env(
        &workspace_root(),
        "simulation",
        &SIM_BUILD,
        "cargo",
        &cargo_args,
    )
}

/// The benchmarks `cargo xtask bench` runs (`certus bench <name>`), with what each measures.
const BENCHMARKS: &[(&str, &str)] = &[
    (
        "raft",
        "durable writes and linearizable reads through Raft [--clients 1,16,64,256] [--seconds 5] \
         [--tls] [--numbered] [--peer: then etcd, 3 members on loopback]",
    ),
    (
        "ct",
        "the CT log: add-chain/s and merge delay, get-sth and proof reads/s over HTTP and gRPC, \
         memory per million entries [--clients 64,256] [--seconds 10] [--entries 100000]",
    ),
    (
        "ct-store",
        "one node's CT store at scale, no Raft: leaves/s, RSS, disk bytes per entry, \
         get-proof-by-hash p99 [--entries 1000000] [--cache-tiles 4096] [--sled-cache-mib 128]",
    ),
    (
        "sessions",
        "CA issuance sessions end to end (create, HTTP-01, issue, check, acknowledge): sessions/s, \
         create->done p50/p99, failures [--clients 1,16,64] [--seconds 10] [--challenges-at clients|nodes]",
    ),
    (
        "pipelines",
        "transaction pipelines: enqueue->dequeue->complete cycles/s, cycle and step p50/p99, \
         errors by kind [--clients 1,50] [--seconds 5] [--batch N] [--stream] \
         [--peer: then Redis, alone and with 2 replicas] [--long-poll: pickup latency, idle CPU]",
    ),
    (
        "grpc",
        "the transport's ceiling: unary health checks/s to the leader, which bound every \
         one-call-per-operation benchmark [--clients 1,50] [--seconds 5]",
    ),
    (
        "acme",
        "ACME orders/s end to end, one real `lego run` per order (HTTP-01, finalize, download), \
         p50/p99 order latency, failures, against Certus then Pebble (Debian's pebble) and their \
         ratio [--clients 1,16] [--seconds 20]",
    ),
];

/// `cargo xtask bench <what> [options]`: benchmarks run on a release build; without a name it
/// lists them.
fn bench(args: &[String]) -> Result<(), String> {
    let names = || {
        BENCHMARKS
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match args.first().map(String::as_str) {
        Some(name) if BENCHMARKS.iter().any(|(known, _)| *known == name) => {}
        Some(other) => return Err(format!("unknown benchmark {other:?}; known: {}", names())),
        None => {
            println!("usage: cargo xtask bench <benchmark> [options] [--json]\n\nbenchmarks:");
            for (name, what) in BENCHMARKS {
                println!("  {name:<8} {what}");
            }
            return Ok(());
        }
    }
    let mut cargo_args = vec![
        "run",
        "--release",
        "--locked",
        "--quiet",
        "--package",
        "certus-cli",
        "--",
        "bench",
    ];
    cargo_args.extend(args.iter().map(String::as_str));
    // The figures are the output; the nodes' routine warnings (elections at start-up) are noise.
    let log = env::var("RUST_LOG").unwrap_or_else(|_| "error".to_owned());
    run_with_env(
        &workspace_root(),
        "bench",
        &[("RUST_LOG", log.as_str())],
        "cargo",
        &cargo_args,
    )
}

/// `cargo xtask chaos [--seconds N] [--seed S]`: the chaos test on real processes
/// (`tests/chaos.rs`) for five minutes unless told otherwise; `cargo xtask test` runs it for 20 s.
fn chaos(args: &[String]) -> Result<(), String> {
    let mut seconds = "300".to_owned();
    let mut seed = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = |name: &str| {
            rest.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--seconds" => seconds = value("--seconds")?,
            "--seed" => seed = Some(value("--seed")?),
            other => return Err(format!("chaos: unknown option {other:?}")),
        }
    }
    if seconds.parse::<u64>().map_or(true, |n| n == 0) {
        return Err(format!(
            "--seconds {seconds:?}: a whole number of seconds, at least 1"
        ));
    }
    let mut env = vec![("CERTUS_CHAOS_SECONDS", seconds.as_str())];
    if let Some(seed) = &seed {
        env.push(("CERTUS_CHAOS_SEED", seed.as_str()));
    }
    run_with_env(
        &workspace_root(),
        "chaos",
        &env,
        "cargo",
        &[
            "test",
            "--locked",
            "--package",
            "certus-cli",
            "--test",
            "chaos",
            "--",
            "--nocapture",
        ],
    )
}

/// The fuzz targets: the wrappers in `fuzz/fuzz_targets/`, by name.
fn fuzz_targets(fuzz_dir: &Path) -> Result<Vec<String>, String> {
    let dir = fuzz_dir.join("fuzz_targets");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "rs").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    Ok(names)
}

/// `cargo xtask fuzz <target|all> [--runs N | --seconds N] [-- libFuzzer args]`: runs cargo-fuzz
/// in `fuzz/` (its own workspace and target directory) on the stable toolchain, with debug
/// assertions so that overflows are found. New inputs go to `fuzz/target/corpus/<target>`; the
/// committed corpus is only read. Crashes land in `fuzz/artifacts/<target>/`.
fn fuzz(args: &[String]) -> Result<(), String> {
    let fuzz_dir = workspace_root().join("fuzz");
    let targets = fuzz_targets(&fuzz_dir)?;
    let usage = || {
        format!(
            "usage: cargo xtask fuzz <target|all> [--runs N | --seconds N] [-- libFuzzer args]\n\
             targets: {} (docs/fuzzing.md says what each covers)",
            targets.join(", ")
        )
    };
    let Some(which) = args.first() else {
        println!("{}", usage());
        return Ok(());
    };
    let chosen: Vec<String> = if which == "all" {
        targets.clone()
    } else if targets.contains(which) {
        vec![which.clone()]
    } else {
        return Err(format!("unknown fuzz target {which:?}\n{}", usage()));
    };
    let mut limit = "-max_total_time=60".to_owned();
    let mut extra: Vec<String> = Vec::new();
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--runs" | "--seconds" => {
                let value = rest
                    .next()
                    .filter(|value| value.parse::<u64>().is_ok())
                    .ok_or_else(|| format!("{arg} takes a number\n{}", usage()))?;
                limit = if arg == "--runs" {
                    format!("-runs={value}")
                } else {
                    format!("-max_total_time={value}")
                };
            }
            "--" => extra.extend(rest.by_ref().cloned()),
            other => return Err(format!("unknown option {other:?}\n{}", usage())),
        }
    }
    let installed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        return Err(
            "cargo-fuzz is not installed: run `cargo install cargo-fuzz --locked` \
                    (it runs on the stable toolchain; xtask sets RUSTC_BOOTSTRAP=1)"
                .to_owned(),
        );
    }
    for target in &chosen {
        let scratch = format!("target/corpus/{target}");
        std::fs::create_dir_all(fuzz_dir.join(&scratch)).map_err(|e| format!("{scratch}: {e}"))?;
        let committed = format!("corpus/{target}");
        let mut cargo_args = vec![
            "fuzz",
            "run",
            "--sanitizer",
            "none",
            "--debug-assertions",
            target,
            &scratch,
            &committed,
            "--",
            &limit,
            "-print_final_stats=1",
        ];
        cargo_args.extend(extra.iter().map(String::as_str));
        run_with_env(
            &fuzz_dir,
            &format!("fuzz {target}"),
            &[("RUSTC_BOOTSTRAP", "1")],
            "cargo",
            &cargo_args,
        )?;
    }
    Ok(())
}

fn run(dir: &Path, label: &str, program: &str, args: &[&str]) -> Result<(), String> {
    run_with_env(dir, label, &[], program, args)
}

fn run_with_env(
    dir: &Path,
    label: &str,
    env: &[(&str, &str)],
    program: &str,
    args: &[&str],
) -> Result<(), String> {
    println!("==> {label}: {program} {}", args.join(" "));
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .status()
        .map_err(|e| format!("could not start {program}: {e}"))?;
    let seconds = started.elapsed().as_secs_f64();
    if status.success() {
        println!("==> {label}: ok in {seconds:.1} s");
        Ok(())
    } else {
        Err(format!("{label} failed after {seconds:.1} s ({status})"))
    }
}

/// The workspace root: xtask lives one level below it.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits inside the workspace")
        .to_path_buf()
}
