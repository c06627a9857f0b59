//! `cargo xtask coverage [sweep options]`: which code of the workspace a simulation sweep never
//! runs. The simulation is built in `target-cov` with the workspace's crates instrumented
//! (`-C instrument-coverage`, added by this same binary acting as rustc's workspace wrapper, so
//! dependencies stay uninstrumented and build as usual); the sweep writes one raw profile per
//! process; LLVM's tools merge them and report per file, and the functions of `crates/` no run
//! ever entered are listed in `target-cov/never-run.txt`.
//!
//! The LLVM tools must be the major version rustc was built with (a newer profile format is
//! refused by older tools): `rustup component add llvm-tools`, or any other copy named by
//! `LLVM_PROFDATA` and `LLVM_COV`.

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::{MADSIM_BUILD, run_with_env, workspace_root};

/// Set in the environment of the build: this binary is then rustc's workspace wrapper.
const WRAPPER_MODE: &str = "XTASK_COVERAGE_WRAPPER";

/// The sweep when no seeds are given: 20 seeds of every scenario.
const DEFAULT_SWEEP: [&str; 4] = ["--seeds", "1..21", "--scenario", "each"];

/// Is this process rustc's wrapper for the coverage build?
pub(crate) fn is_wrapper() -> bool {
    env::var_os(WRAPPER_MODE).is_some()
}

/// As rustc's workspace wrapper: `argv[1]` is rustc, the rest its arguments. Build scripts are
/// left uninstrumented: they run during the build and would leave profiles in the source tree.
pub(crate) fn wrap_rustc() -> ExitCode {
    let mut args = env::args_os().skip(1);
    let Some(rustc) = args.next() else {
        eprintln!("xtask: {WRAPPER_MODE} is set but no rustc was given");
        return ExitCode::FAILURE;
    };
    let args: Vec<_> = args.collect();
    let build_script = args
        .windows(2)
        .any(|pair| pair[0] == "--crate-name" && pair[1] == "build_script_build");
    let mut command = Command::new(rustc);
    command.args(&args);
    if !build_script {
        // Uncompressed names: the tools can then be any build of the right LLVM, with zlib or
        // without (the copy on PyPI has none). Cargo does not see what a wrapper adds: after
        // changing these flags, `cargo clean --target-dir target-cov -p <each workspace crate>`.
        command.args([
            "-C",
            "instrument-coverage",
            "-C",
            "llvm-args=-enable-name-compression=false",
        ]);
    }
    match command.status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)),
        Err(error) => {
            eprintln!("xtask: could not start rustc: {error}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let profdata = llvm_tool("llvm-profdata", "LLVM_PROFDATA")?;
    let cov = llvm_tool("llvm-cov", "LLVM_COV")?;
    let target = root.join("target-cov");
    let report_only = args.first().is_some_and(|arg| arg == "--report-only");
    if report_only && args.len() > 1 {
        return Err("--report-only takes nothing else: it reports the last sweep again".into());
    }
    let binary = target.join("debug/certus-sim");
    let binary = binary.to_str().ok_or("target-cov is not UTF-8")?;
    let profiles = target.join("profiles");
    if !report_only {
        build_and_sweep(&root, args, &profiles, binary)?;
    }
    report(&root, &profdata, &cov, &profiles, binary)
}

/// Builds the instrumented simulation and runs the sweep `args` (or [`DEFAULT_SWEEP`]), each
/// process writing its raw profile into `profiles`.
fn build_and_sweep(
    root: &Path,
    args: &[String],
    profiles: &Path,
    binary: &str,
) -> Result<(), String> {
    let me = env::current_exe().map_err(|e| format!("the xtask binary: {e}"))?;
    let me = me.to_str().ok_or("the xtask binary's path is not UTF-8")?;
    let mut build_env = MADSIM_BUILD.to_vec();
    build_env.extend([(WRAPPER_MODE, "1"), ("RUSTC_WORKSPACE_WRAPPER", me)]);
    run_with_env(
        root,
        "simulation build, the workspace's crates instrumented",
        &build_env,
        "cargo",
        &[
            "build",
            "--locked",
            "--package",
            "certus-sim",
            "--target-dir",
            "target-cov",
        ],
    )?;
    if profiles.exists() {
        fs::remove_dir_all(profiles).map_err(|e| format!("{}: {e}", profiles.display()))?;
    }
    fs::create_dir_all(profiles).map_err(|e| format!("{}: {e}", profiles.display()))?;
    let pattern = profiles.join("%p-%m.profraw");
    let pattern = pattern.to_str().ok_or("target-cov is not UTF-8")?;
    let mut sweep: Vec<&str> = if args.is_empty() {
        DEFAULT_SWEEP.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    sweep.extend(["--reports", "target-cov/sim-reports"]);
    run_with_env(
        root,
        "sweep, each process writing its profile",
        &[("LLVM_PROFILE_FILE", pattern)],
        binary,
        &sweep,
    )
}

/// Merges the profiles, writes the per-file report and the list of functions never entered,
/// and prints the totals per crate.
fn report(
    root: &Path,
    profdata: &str,
    cov: &str,
    profiles: &Path,
    binary: &str,
) -> Result<(), String> {
    let target = root.join("target-cov");

    let list = target.join("profiles.txt");
    let mut names = String::new();
    for entry in fs::read_dir(profiles).map_err(|e| format!("{}: {e}", profiles.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let _ = writeln!(names, "{}", path.display());
    }
    fs::write(&list, names).map_err(|e| format!("{}: {e}", list.display()))?;
    let merged = target.join("sim.profdata");
    let merged_arg = merged.to_str().ok_or("target-cov is not UTF-8")?;
    let list_arg = format!("--input-files={}", list.display());
    run_with_env(
        root,
        "merge of the profiles",
        &[],
        profdata,
        &["merge", "--sparse", &list_arg, "-o", merged_arg],
    )?;

    // Only the workspace's crates: the rest are dependencies and the standard library.
    // (LLVM's regular expressions are POSIX extended ones: no `(?:`.)
    let outside_crates = format!(
        "^({root}/(sim|xtask)/|{root}/crates/(fuzz-targets|cli)/|/rustc/|.*/\\.cargo/|\
         .*/\\.rustup/|.*/target-cov/)",
        root = root.display()
    );
    let instr = format!("--instr-profile={merged_arg}");
    let ignore = format!("--ignore-filename-regex={outside_crates}");
    let report = output(cov, &["report", binary, &instr, &ignore])?;
    let report_path = target.join("report.txt");
    fs::write(&report_path, &report).map_err(|e| format!("{}: {e}", report_path.display()))?;
    let lcov = output(cov, &["export", "--format=lcov", binary, &instr, &ignore])?;
    let files = never_run(&lcov, root);
    let listing = render(&files, root);
    let listing_path = target.join("never-run.txt");
    fs::write(&listing_path, &listing).map_err(|e| format!("{}: {e}", listing_path.display()))?;
    println!("{}", summary(&files));
    println!(
        "per file: {}\nfunctions never entered: {}",
        report_path.display(),
        listing_path.display()
    );
    Ok(())
}

/// `LLVM_PROFDATA`/`LLVM_COV`, else rustup's `llvm-tools`, else `PATH` — checked against the
/// LLVM major version rustc reports.
fn llvm_tool(name: &str, variable: &str) -> Result<String, String> {
    let rustc = output("rustc", &["-vV"])?;
    let wanted = llvm_major(&rustc, "LLVM version: ")
        .ok_or("rustc -vV names no LLVM version")?
        .to_owned();
    let tool = if let Some(path) = env::var_os(variable) {
        path.to_string_lossy().into_owned()
    } else {
        let sysroot = output("rustc", &["--print", "sysroot"])?;
        let host = rustc
            .lines()
            .find_map(|line| line.strip_prefix("host: "))
            .ok_or("rustc -vV names no host")?;
        let rustup_copy: PathBuf = [sysroot.trim(), "lib/rustlib", host, "bin", name]
            .iter()
            .collect();
        if rustup_copy.exists() {
            rustup_copy.to_string_lossy().into_owned()
        } else {
            name.to_owned()
        }
    };
    let version = output(&tool, &["--version"]).map_err(|error| {
        format!(
            "{error}\ncoverage needs {name} of LLVM {wanted} (rustc's): `rustup component add \
             llvm-tools`, or set {variable} to another copy"
        )
    })?;
    match llvm_major(&version, "LLVM version ") {
        Some(major) if major == wanted => Ok(tool),
        found => Err(format!(
            "{tool} is LLVM {}, rustc is LLVM {wanted}: an older {name} cannot read rustc's \
             profiles; set {variable} to an LLVM {wanted} copy",
            found.unwrap_or("of no known version")
        )),
    }
}

/// The major version after `prefix` in `text` (`LLVM version: 22.1.2` gives `22`).
fn llvm_major<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let at = text.find(prefix)? + prefix.len();
    text[at..].split('.').next().map(str::trim)
}

fn output(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("could not start {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One source file's coverage from the lcov export.
#[derive(Debug, Default, PartialEq, Eq)]
struct FileCoverage {
    /// Lines holding a function's start, and whether any instance of it ran.
    functions: BTreeMap<u64, bool>,
    lines_found: u64,
    lines_hit: u64,
}

/// Per file under `root`, from llvm-cov's lcov export. A generic function has one record per
/// instance at the same line; it ran if any of them did.
fn never_run(lcov: &str, root: &Path) -> BTreeMap<PathBuf, FileCoverage> {
    let mut files: BTreeMap<PathBuf, FileCoverage> = BTreeMap::new();
    let mut file: Option<PathBuf> = None;
    let mut starts: BTreeMap<String, u64> = BTreeMap::new();
    for line in lcov.lines() {
        if let Some(path) = line.strip_prefix("SF:") {
            let path = Path::new(path);
            file = Some(path.strip_prefix(root).unwrap_or(path).to_path_buf());
            starts.clear();
            continue;
        }
        let Some(current) = file.as_ref() else {
            continue;
        };
        let entry = files.entry(current.clone()).or_default();
        if let Some(rest) = line.strip_prefix("FN:") {
            if let Some((number, name)) = rest.split_once(',')
                && let Ok(number) = number.parse()
            {
                starts.insert(name.to_owned(), number);
                entry.functions.entry(number).or_insert(false);
            }
        } else if let Some(rest) = line.strip_prefix("FNDA:") {
            if let Some((count, name)) = rest.split_once(',')
                && let Some(&number) = starts.get(name)
                && count != "0"
            {
                entry.functions.insert(number, true);
            }
        } else if let Some(count) = line.strip_prefix("LF:") {
            entry.lines_found = count.parse().unwrap_or(0);
        } else if let Some(count) = line.strip_prefix("LH:") {
            entry.lines_hit = count.parse().unwrap_or(0);
        } else if line == "end_of_record" {
            file = None;
        }
    }
    files
}

/// Totals per crate: functions entered and lines run.
fn summary(files: &BTreeMap<PathBuf, FileCoverage>) -> String {
    let mut crates: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    for (path, coverage) in files {
        let name = path
            .iter()
            .take(2)
            .map(|part| part.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let totals = crates.entry(name).or_default();
        totals[0] += coverage.functions.values().filter(|&&ran| ran).count() as u64;
        totals[1] += coverage.functions.len() as u64;
        totals[2] += coverage.lines_hit;
        totals[3] += coverage.lines_found;
    }
    let mut text = String::from("crate                functions entered      lines run\n");
    for (name, [entered, functions, hit, found]) in crates {
        let _ = writeln!(
            text,
            "{name:<20} {entered:>6} of {functions:<6} {:>5.1}%   {hit:>6} of {found:<6} {:>5.1}%",
            percent(entered, functions),
            percent(hit, found)
        );
    }
    text
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        100.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// `path:line  <the source line>` for every function never entered, by file.
fn render(files: &BTreeMap<PathBuf, FileCoverage>, root: &Path) -> String {
    let mut text = String::new();
    for (path, coverage) in files {
        let source = fs::read_to_string(root.join(path)).unwrap_or_default();
        let lines: Vec<&str> = source.lines().collect();
        for (&number, _) in coverage.functions.iter().filter(|(_, ran)| !**ran) {
            let code = usize::try_from(number)
                .ok()
                .and_then(|n| lines.get(n.saturating_sub(1)))
                .map_or("", |line| line.trim());
            let _ = writeln!(text, "{}:{number}  {code}", path.display());
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const LCOV: &str = "SF:/repo/crates/core/src/a.rs\n\
        FN:10,_RNvCs1_4core1a\nFN:20,_RNvCs1_4core1b\nFN:20,_RNvCs1_4core1b_other_instance\n\
        FN:30,_RNvCs1_4core1c\n\
        FNDA:5,_RNvCs1_4core1a\nFNDA:0,_RNvCs1_4core1b\nFNDA:2,_RNvCs1_4core1b_other_instance\n\
        FNDA:0,_RNvCs1_4core1c\nLF:40\nLH:25\nend_of_record\n";

    #[test]
    fn a_function_ran_if_any_of_its_instances_did() {
        let files = never_run(LCOV, Path::new("/repo"));
        let file = &files[Path::new("crates/core/src/a.rs")];
        assert_eq!(
            file.functions,
            BTreeMap::from([(10, true), (20, true), (30, false)])
        );
        assert_eq!((file.lines_hit, file.lines_found), (25, 40));
        let text = summary(&files);
        assert!(text.contains("crates/core"), "{text}");
        assert!(text.contains("2 of 3"), "{text}");
        assert!(text.contains("25 of 40"), "{text}");
    }

    #[test]
    fn the_llvm_major_version_is_read_from_rustc_and_the_tools() {
        assert_eq!(
            llvm_major("rustc 1.95.0\nLLVM version: 22.1.2\n", "LLVM version: "),
            Some("22")
        );
        assert_eq!(
            llvm_major(
                "LLVM (http://llvm.org/):\n  LLVM version 22.1.8\n",
                "LLVM version "
            ),
            Some("22")
        );
        assert_eq!(llvm_major("no version here", "LLVM version "), None);
    }
}
