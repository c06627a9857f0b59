//! `cargo xtask mutants`: the planted-bug suite. Each `sim/mutants/<name>.patch` plants one bug;
//! the command applies it to a scratch copy of the committed tree, builds the simulation there and
//! runs seeds of the mutant's scenario until one fails, reporting how many seeds that took and
//! which checkers fired. A mutant no seed catches is a blind spot of the simulation.
//!
//! A patch is a `git diff` preceded by its header, lines that `git apply` skips:
//!
//! ```text
//! what: CheckFence accepts any token of a held lease
//! scenario: leases
//! seeds: 200
//! ```
//!
//! `seeds` (how many to try, from seed 1) is optional and defaults to [`SEEDS_DEFAULT`].
//!
//! The scratch copy is one git worktree (`target/mutants/tree`) reset to `HEAD` before each
//! mutant, with one target directory for all of them, so a mutant rebuilds only the crates its
//! patch touches and those above them.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::workspace_root;

/// Seeds a mutant gets unless its header says otherwise.
pub(crate) const SEEDS_DEFAULT: u64 = 200;

/// Where the patches live, relative to the workspace root.
pub(crate) const MUTANTS_DIR: &str = "sim/mutants";

/// Where `--write-docs` puts the table: between these two lines of docs/simulation.md.
const DOCS_BEGIN: &str = "<!-- mutants table: begin (cargo xtask mutants --write-docs) -->";
const DOCS_END: &str = "<!-- mutants table: end -->";

/// One planted bug.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mutant {
    /// The patch's file name without `.patch`.
    pub(crate) name: String,
    /// What the bug is, in a phrase.
    pub(crate) what: String,
    /// The scenario that must catch it.
    pub(crate) scenario: String,
    /// How many seeds to try, from seed 1.
    pub(crate) seeds: u64,
    /// The patch file.
    pub(crate) patch: PathBuf,
}

/// Reads the header of the patch at `path`: the lines before the first `diff --git`.
pub(crate) fn parse(path: &Path) -> Result<Mutant, String> {
    let name = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .ok_or_else(|| format!("{}: not a patch name", path.display()))?
        .to_owned();
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut what, mut scenario, mut seeds) = (None, None, SEEDS_DEFAULT);
    let mut has_diff = false;
    for line in text.lines() {
        if line.starts_with("diff --git ") {
            has_diff = true;
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "what" => what = Some(value.to_owned()),
            "scenario" => scenario = Some(value.to_owned()),
            "seeds" => {
                seeds = value
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("{name}: seeds {value:?} is not a count"))?;
            }
            _ => {}
        }
    }
    if !has_diff {
        return Err(format!("{name}: no `diff --git` in the patch"));
    }
    Ok(Mutant {
        what: what.ok_or_else(|| format!("{name}: the header has no `what:` line"))?,
        scenario: scenario.ok_or_else(|| format!("{name}: the header has no `scenario:` line"))?,
        seeds,
        name,
        patch: path.to_path_buf(),
    })
}

/// Every mutant in `dir`, by name.
pub(crate) fn all(dir: &Path) -> Result<Vec<Mutant>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "patch"))
        .collect();
    paths.sort();
    paths.iter().map(|path| parse(path)).collect()
}

/// What running a mutant found.
#[derive(Debug)]
enum Outcome {
    /// Seed `seed` failed (seeds run from 1, so it is also how many seeds it took), with the
    /// checkers that fired.
    Caught { seed: u64, checkers: Vec<String> },
    /// Every seed passed.
    Missed { seeds: u64 },
    /// The patch no longer applies, or the mutant does not build.
    Broken(String),
}

/// `cargo xtask mutants [NAME...] [--jobs N] [--write-docs]`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let mut names = Vec::new();
    let mut jobs = 2usize;
    let mut write_docs = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--jobs" => {
                jobs = rest
                    .next()
                    .and_then(|value| value.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--jobs takes a count of at least 1")?;
            }
            "--write-docs" => write_docs = true,
            option if option.starts_with("--") => {
                return Err(format!("mutants: unknown option {option:?}"));
            }
            name => names.push(name.to_owned()),
        }
    }
    let mut mutants = all(&root.join(MUTANTS_DIR))?;
    if !names.is_empty() {
        if let Some(unknown) = names
            .iter()
            .find(|name| !mutants.iter().any(|m| &m.name == *name))
        {
            return Err(format!("no mutant {unknown:?} in {MUTANTS_DIR}"));
        }
        mutants.retain(|mutant| names.contains(&mutant.name));
    }
    if write_docs && !names.is_empty() {
        return Err("--write-docs writes the whole table: run every mutant".into());
    }
    let head = git_output(&root, &["rev-parse", "HEAD"])?;
    let tree = root.join("target/mutants/tree");
    let target_dir = root.join("target/mutants/target");
    prepare_tree(&root, &tree)?;
    let mut results = Vec::new();
    for mutant in &mutants {
        let started = Instant::now();
        println!(
            "==> mutant {}: {} ({}, up to {} seeds)",
            mutant.name, mutant.what, mutant.scenario, mutant.seeds
        );
        let outcome = run_one(mutant, &tree, &target_dir, head.trim(), jobs);
        println!(
            "==> mutant {}: {} in {:.0} s",
            mutant.name,
            describe(&outcome),
            started.elapsed().as_secs_f64()
        );
        results.push((mutant, outcome));
    }
    let table = table(&results, head.trim());
    println!("\n{table}");
    if write_docs {
        write_table(&root.join("docs/simulation.md"), &table)?;
        println!("docs/simulation.md: the mutants table is written");
    }
    let missed: Vec<&str> = results
        .iter()
        .filter(|(_, outcome)| !matches!(outcome, Outcome::Caught { .. }))
        .map(|(mutant, _)| mutant.name.as_str())
        .collect();
    if missed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "not caught or not run: {} (a blind spot, or a patch to refresh)",
            missed.join(", ")
        ))
    }
}

/// Makes `tree` a detached worktree of the repository (once; later runs reuse it).
fn prepare_tree(root: &Path, tree: &Path) -> Result<(), String> {
    if tree.join(".git").exists() {
        return Ok(());
    }
    fs::create_dir_all(tree.parent().expect("tree has a parent"))
        .map_err(|e| format!("{}: {e}", tree.display()))?;
    let tree_arg = tree.to_str().ok_or("the scratch path is not UTF-8")?;
    git_output(root, &["worktree", "add", "--detach", tree_arg, "HEAD"]).map(drop)
}

fn run_one(mutant: &Mutant, tree: &Path, target_dir: &Path, head: &str, jobs: usize) -> Outcome {
    // Only the files that differ are rewritten, so the build after it is incremental.
    if let Err(error) = git_output(tree, &["checkout", "--detach", "--force", head])
        .and_then(|_| git_output(tree, &["clean", "-fdq"]))
    {
        return Outcome::Broken(error);
    }
    let patch = mutant.patch.to_string_lossy();
    if let Err(error) = git_output(tree, &["apply", &patch]) {
        return Outcome::Broken(format!("the patch does not apply to HEAD: {error}"));
    }
    let target = target_dir.to_string_lossy();
    let build = || {
        Command::new("cargo")
            .args([
                "build",
                "--locked",
                "--quiet",
                "--package",
                "certus-sim",
                "--target-dir",
                &target,
            ])
            .envs(crate::MADSIM_BUILD)
            .current_dir(tree)
            .status()
    };
    let mut built = build();
    if built.as_ref().is_ok_and(|status| !status.success()) {
        // Switching the scratch tree between commits has left rustc's incremental state
        // unlinkable ("undefined hidden symbol" from the linker): build once more without it.
        println!("==> the build failed: once more without the incremental cache");
        let _ = fs::remove_dir_all(target_dir.join("debug/incremental"));
        built = build();
    }
    match built {
        Ok(status) if status.success() => {}
        Ok(status) => return Outcome::Broken(format!("the mutant does not build ({status})")),
        Err(error) => return Outcome::Broken(format!("cargo: {error}")),
    }
    let binary = target_dir.join("debug/certus-sim");
    let reports = target_dir.join("reports");
    let mut seed = 1;
    while seed <= mutant.seeds {
        let last = (seed + jobs as u64 - 1).min(mutant.seeds);
        let children: Vec<_> = (seed..=last)
            .map(|s| {
                Command::new(&binary)
                    .args(["--seed", &s.to_string(), "--scenario", &mutant.scenario])
                    .arg("--reports")
                    .arg(&reports)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map(|child| (s, child))
            })
            .collect();
        let mut caught = None;
        for child in children {
            let (s, child) = match child {
                Ok(child) => child,
                Err(error) => return Outcome::Broken(format!("{}: {error}", binary.display())),
            };
            let output = match child.wait_with_output() {
                Ok(output) => output,
                Err(error) => return Outcome::Broken(format!("seed {s}: {error}")),
            };
            if !output.status.success() && caught.is_none() {
                let text = String::from_utf8_lossy(&output.stdout).into_owned()
                    + &String::from_utf8_lossy(&output.stderr);
                caught = Some((s, fired(&text)));
            }
        }
        if let Some((seed, checkers)) = caught {
            return Outcome::Caught { seed, checkers };
        }
        seed = last + 1;
    }
    Outcome::Missed {
        seeds: mutant.seeds,
    }
}

/// How much of a panic's message the table keeps.
const PANIC_TEXT_CHARS: usize = 90;

/// The checkers a failed run names (`  FAIL name: why`), or what ended it otherwise. A run that
/// panicked (`FAIL run: …`: an assertion of the node, openraft or the harness) is named by its
/// message, since which assertion fired is what says how the bug was caught.
fn fired(output: &str) -> Vec<String> {
    let mut checkers: Vec<String> = output
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("FAIL "))
        .filter_map(|rest| rest.split_once(':'))
        .map(|(name, why)| match name.trim() {
            "run" => {
                let why: String = why.trim().chars().take(PANIC_TEXT_CHARS).collect();
                format!("the run: {}", why.replace('|', "/").replace('`', "'"))
            }
            name => name.to_owned(),
        })
        .collect();
    checkers.dedup();
    if checkers.is_empty() {
        checkers.push(if output.contains("panicked") {
            "a panic".to_owned()
        } else {
            "the run failed without a checker (see its report)".to_owned()
        });
    }
    checkers
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Caught { seed, checkers } => {
            format!("caught at seed {seed} by {}", checkers.join(", "))
        }
        Outcome::Missed { seeds } => format!("NOT caught in {seeds} seeds"),
        Outcome::Broken(why) => format!("not run: {why}"),
    }
}

/// The markdown table of the results.
fn table(results: &[(&Mutant, Outcome)], head: &str) -> String {
    let mut out = format!(
        "Generated by `cargo xtask mutants` at commit {}.\n\n\
         | mutant | planted bug | scenario | seeds to catch | checkers that fired |\n\
         |---|---|---|---|---|\n",
        &head[..head.len().min(12)]
    );
    for (mutant, outcome) in results {
        let (seeds, checkers) = match outcome {
            Outcome::Caught { seed, checkers } => (seed.to_string(), checkers.join(", ")),
            Outcome::Missed { seeds } => (format!("not caught ({seeds} seeds)"), "none".into()),
            Outcome::Broken(why) => ("not run".into(), why.replace('\n', " ")),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | `{}` | {seeds} | {checkers} |",
            mutant.name, mutant.what, mutant.scenario
        );
    }
    out
}

/// Replaces what lies between the table's markers in `doc` with `table`.
fn write_table(doc: &Path, table: &str) -> Result<(), String> {
    let text = fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let (Some(begin), Some(end)) = (text.find(DOCS_BEGIN), text.find(DOCS_END)) else {
        return Err(format!(
            "{}: the markers {DOCS_BEGIN:?} and {DOCS_END:?} are missing",
            doc.display()
        ));
    };
    let updated = format!("{}{DOCS_BEGIN}\n{table}{}", &text[..begin], &text[end..]);
    fs::write(doc, updated).map_err(|e| format!("{}: {e}", doc.display()))
}

fn git_output(dir: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every committed mutant has a full header and still applies to the tree, so the suite
    /// cannot rot unnoticed when the code it plants bugs in moves.
    #[test]
    fn every_mutant_has_a_header_and_applies_to_the_tree() {
        let root = workspace_root();
        let mutants = all(&root.join(MUTANTS_DIR)).unwrap();
        assert!(!mutants.is_empty(), "no mutants in {MUTANTS_DIR}");
        for mutant in &mutants {
            let patch = mutant.patch.to_string_lossy();
            if let Err(error) = git_output(&root, &["apply", "--check", &patch]) {
                panic!("mutant {} no longer applies: {error}", mutant.name);
            }
        }
    }

    #[test]
    fn a_header_names_the_bug_the_scenario_and_the_seeds() {
        let dir = std::env::temp_dir().join(format!("xtask-mutants-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("some-bug.patch");
        fs::write(
            &path,
            "what: a bug\nscenario: leases\nseeds: 40\n\ndiff --git a/x b/x\n",
        )
        .unwrap();
        assert_eq!(
            parse(&path).unwrap(),
            Mutant {
                name: "some-bug".into(),
                what: "a bug".into(),
                scenario: "leases".into(),
                seeds: 40,
                patch: path.clone(),
            }
        );
        fs::write(&path, "what: a bug\n\ndiff --git a/x b/x\n").unwrap();
        assert!(parse(&path).unwrap_err().contains("no `scenario:`"));
        fs::write(&path, "what: a bug\nscenario: leases\n").unwrap();
        assert!(parse(&path).unwrap_err().contains("no `diff --git`"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_run_names_its_checkers_or_its_panic() {
        assert_eq!(
            fired("x\n  FAIL no-stale-token: token 3\n  FAIL linearizability: no order\n"),
            vec!["no-stale-token".to_owned(), "linearizability".to_owned()]
        );
        assert_eq!(
            fired("thread 'main' panicked at x"),
            vec!["a panic".to_owned()]
        );
        assert_eq!(
            fired("  FAIL run: the simulation panicked: vote T1 must GE 2-212\n"),
            vec!["the run: the simulation panicked: vote T1 must GE 2-212".to_owned()]
        );
    }

    #[test]
    fn the_table_replaces_what_lies_between_the_markers() {
        let dir = std::env::temp_dir().join(format!("xtask-docs-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let doc = dir.join("simulation.md");
        fs::write(
            &doc,
            format!("intro\n{DOCS_BEGIN}\nold\n{DOCS_END}\nafter\n"),
        )
        .unwrap();
        write_table(&doc, "new\n").unwrap();
        assert_eq!(
            fs::read_to_string(&doc).unwrap(),
            format!("intro\n{DOCS_BEGIN}\nnew\n{DOCS_END}\nafter\n")
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
