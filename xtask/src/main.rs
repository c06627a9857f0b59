//! Project automation, run as `cargo xtask <command>`.
//!
//! Plain std on purpose: xtask builds in seconds on a cold machine and never needs updating for a
//! dependency. Each command prints the steps it runs and stops at the first failure.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

#[cfg(test)]
mod tidy;

/// The commands this xtask knows; the README may only mention these.
pub(crate) const COMMANDS: &[(&str, &str)] = &[
    (
        "test",
        "format check, clippy with warnings as errors, and every test of the workspace",
    ),
    ("help", "this list"),
];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
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
    run(
        &root,
        "clippy (warnings are errors)",
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    run(
        &root,
        "tests",
        "cargo",
        &["test", "--workspace", "--locked"],
    )?;
    println!("xtask test: all steps passed");
    Ok(())
}

fn run(dir: &Path, label: &str, program: &str, args: &[&str]) -> Result<(), String> {
    println!("==> {label}: {program} {}", args.join(" "));
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
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
