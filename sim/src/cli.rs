//! The `certus-sim` command line behind `cargo xtask sim`: replay one seed, or sweep many (each
//! seed in a child process of its own, several at once), with a table per scenario at the end and
//! an optional determinism check (every seed run twice, fingerprints compared).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::report::{failure_text, verdicts_text, write_report};
use crate::run::run_seed;
use crate::scenarios::{self, Scenario};
use crate::schedule::Schedule;

/// `certus-sim`: replay one seed, or sweep many.
#[derive(Debug, Parser)]
#[command(
    name = "certus-sim",
    about = "Run the Certus simulation: replay a seed or sweep many"
)]
struct Args {
    /// Replay this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Sweep this many seeds (from --first), spread over the scenarios.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed of a sweep.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Run only this scenario (default: `leases` for one seed; all for a sweep). `all` spreads a
    /// sweep's seeds over the scenarios; `each` runs every seed in every scenario.
    #[arg(long)]
    scenario: Option<String>,
    /// Run each seed twice and require identical traces and histories.
    #[arg(long)]
    check_determinism: bool,
    /// Let a run pass whose linearizability search ran out of budget (not proven either way).
    /// Without it, such a run fails the sweep: a history left unchecked is no evidence.
    #[arg(long)]
    allow_unproven: bool,
    /// How many seeds run at once (each in its own process). Default: the number of cores.
    #[arg(long)]
    jobs: Option<usize>,
    /// Where reports go.
    #[arg(long, default_value = "target/sim-reports")]
    reports: PathBuf,
    /// Write the report folder (with the timeline) even when the run passes.
    #[arg(long)]
    report: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Print the fault schedule of the seed(s) without running.
    #[arg(long)]
    schedule_only: bool,
    /// Internal: run one seed in this process and print its summary as JSON.
    #[arg(long, hide = true)]
    child: bool,
    /// Internal: where a child writes its trace.
    #[arg(long, hide = true)]
    trace_out: Option<PathBuf>,
}

/// What a child process reports of its run.
#[derive(Debug, Serialize, Deserialize)]
struct Summary {
    seed: u64,
    scenario: String,
    passed: bool,
    fingerprint: u64,
    simulated_ms: u64,
    wall_ms: u64,
    operations: u64,
    /// Whether the linearizability search ran out of budget on some lease (not proven).
    unproven: bool,
    /// Unsynced file writes the run's crashes tore.
    #[serde(default)]
    torn_writes: u64,
    /// For a failed run: what to print (seed, schedule, failed verdicts, trace tail, report).
    failure: Option<String>,
    /// For a passed single run: the verdicts as printed.
    verdicts: String,
}

/// The entry point of `certus-sim`.
pub fn main() -> ExitCode {
    let args = Args::parse();
    let all = scenarios::scenarios();
    if args.list {
        for scenario in &all {
            println!("{:<10} {}", scenario.name, scenario.about);
        }
        return ExitCode::SUCCESS;
    }
    // `each`: every scenario runs every seed of the sweep (N seeds each), where `all` spreads
    // the seeds over the scenarios (N in all).
    let each = args.scenario.as_deref() == Some("each");
    let chosen: Vec<Scenario> = match &args.scenario {
        Some(name) if name != "all" && name != "each" => {
            match all.iter().find(|s| s.name == name) {
                Some(scenario) => vec![scenario.clone()],
                None => {
                    let names: Vec<&str> = all.iter().map(|s| s.name).collect();
                    eprintln!("no scenario {name}; there are: {}", names.join(", "));
                    return ExitCode::from(2);
                }
            }
        }
        Some(_) => all.clone(),
        None if args.seeds.is_some() => all.clone(),
        None => vec![all[0].clone()],
    };
    let plan: Vec<(Scenario, u64)> = match (args.seed, args.seeds) {
        (Some(seed), _) => chosen.iter().map(|s| (s.clone(), seed)).collect(),
        (None, Some(count)) if each => (0..count)
            .flat_map(|i| chosen.iter().map(move |s| (s.clone(), args.first + i)))
            .collect(),
        (None, Some(count)) => (0..count)
            .map(|i| {
                let index = usize::try_from(i).unwrap_or(0) % chosen.len();
                (chosen[index].clone(), args.first + i)
            })
            .collect(),
        (None, None) => {
            eprintln!("give --seed S to replay one seed or --seeds N to sweep");
            return ExitCode::from(2);
        }
    };
    if args.schedule_only {
        for (scenario, seed) in &plan {
            println!(
                "[{}] {}",
                scenario.name,
                Schedule::draw(*seed, &scenario.faults).describe()
            );
        }
        return ExitCode::SUCCESS;
    }
    if args.child {
        return child(&plan[0].0, plan[0].1, &args);
    }
    sweep(&plan, &args)
}

/// Runs one seed in this process (fresh, so no global state of another run can leak into it:
/// tokio's and futures' `select!` seed their thread RNGs from process-wide counters) and prints
/// its summary.
fn child(scenario: &Scenario, seed: u64, args: &Args) -> ExitCode {
    let outcome = run_seed(scenario, seed);
    if let Some(path) = &args.trace_out {
        let _ = std::fs::write(path, &outcome.trace);
    }
    let mut report_dir = None;
    if args.report || !outcome.passed() {
        report_dir = write_report(&outcome, &args.reports).ok();
    }
    let summary = Summary {
        seed,
        scenario: scenario.name.to_owned(),
        passed: outcome.passed(),
        fingerprint: outcome.fingerprint(),
        simulated_ms: u64::try_from(outcome.simulated.as_millis()).unwrap_or(0),
        wall_ms: u64::try_from(outcome.wall.as_millis()).unwrap_or(0),
        operations: outcome.history.operations.len() as u64,
        unproven: outcome.verdicts.iter().any(|verdict| {
            verdict.checker == "linearizability" && verdict.detail.contains("not proven")
        }),
        torn_writes: outcome.record.unsynced_writes.torn,
        failure: (!outcome.passed()).then(|| failure_text(&outcome, report_dir.as_deref())),
        verdicts: verdicts_text(&outcome, report_dir.as_deref()),
    };
    match serde_json::to_string(&summary) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("could not encode the summary: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one seed in a child process.
fn spawn_child(
    scenario: &str,
    seed: u64,
    args: &Args,
    trace_out: Option<&Path>,
) -> Result<Summary, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating certus-sim: {e}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--child")
        .args(["--seed", &seed.to_string(), "--scenario", scenario])
        .arg("--reports")
        .arg(&args.reports);
    if args.report {
        command.arg("--report");
    }
    if let Some(path) = trace_out {
        command.arg("--trace-out").arg(path);
    }
    let output = command
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("starting a run: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).map_err(|e| {
        format!(
            "scenario {scenario} seed {seed}: the run died ({}) without a summary: {e}",
            output.status
        )
    })
}

/// One seed's result in a sweep.
struct Done {
    scenario: &'static str,
    seed: u64,
    summary: Result<Summary, String>,
    /// For a determinism check: the second run's fingerprint and where both traces are.
    again: Option<(Result<Summary, String>, PathBuf, PathBuf)>,
}

/// Runs one seed of a sweep in a child process, twice for a determinism check.
fn run_one(scenario: &'static str, seed: u64, deterministic: bool, args: &Args) -> Done {
    if !args.check_determinism || !deterministic {
        return Done {
            scenario,
            seed,
            summary: spawn_child(scenario, seed, args, None),
            again: None,
        };
    }
    let dir = args.reports.join(format!("{scenario}-{seed}-determinism"));
    let _ = std::fs::create_dir_all(&dir);
    let (first, second) = (dir.join("trace-1.log"), dir.join("trace-2.log"));
    let summary = spawn_child(scenario, seed, args, Some(&first));
    let again = spawn_child(scenario, seed, args, Some(&second));
    Done {
        scenario,
        seed,
        summary,
        again: Some((again, first, second)),
    }
}

/// Runs the planned seeds (one right here; more in child processes, `--jobs` at once), then
/// prints the table of the sweep.
fn sweep(plan: &[(Scenario, u64)], args: &Args) -> ExitCode {
    let single = plan.len() == 1 && !args.check_determinism;
    if single {
        // One seed: run it right here, so a debugger or a log sees it.
        let (scenario, seed) = &plan[0];
        let outcome = run_seed(scenario, *seed);
        let report = write_report(&outcome, &args.reports).ok();
        if outcome.passed() {
            print!("{}", verdicts_text(&outcome, report.as_deref()));
            return ExitCode::SUCCESS;
        }
        eprint!("{}", failure_text(&outcome, report.as_deref()));
        return ExitCode::FAILURE;
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let progress = indicatif::ProgressBar::new(plan.len() as u64);
    progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} seeds ({per_sec}) {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if std::env::var_os("CI").is_some() {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = Instant::now();
    let queue: Mutex<std::collections::VecDeque<(&'static str, u64, bool)>> = Mutex::new(
        plan.iter()
            .map(|(scenario, seed)| (scenario.name, *seed, scenario.deterministic))
            .collect(),
    );
    let (sender, receiver) = std::sync::mpsc::channel::<Done>();
    let mut totals: BTreeMap<&str, Totals> = BTreeMap::new();
    let mut failures = 0u64;
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(plan.len()) {
            let sender = sender.clone();
            let queue = &queue;
            scope.spawn(move || {
                loop {
                    let next = queue.lock().expect("queue").pop_front();
                    let Some((scenario, seed, deterministic)) = next else {
                        break;
                    };
                    if sender
                        .send(run_one(scenario, seed, deterministic, args))
                        .is_err()
                    {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for done in receiver {
            let total = totals.entry(done.scenario).or_default();
            total.runs += 1;
            progress.set_message(format!("{} seed {}", done.scenario, done.seed));
            match &done.summary {
                Ok(summary) => {
                    total.simulated += Duration::from_millis(summary.simulated_ms);
                    total.wall += Duration::from_millis(summary.wall_ms);
                    total.operations += summary.operations;
                    if summary.unproven {
                        total.unproven.push(done.seed);
                        if !args.allow_unproven && summary.failure.is_none() {
                            failures += 1;
                        }
                    }
                    total.torn_writes += summary.torn_writes;
                    if let Some(failure) = &summary.failure {
                        total.failed.push(done.seed);
                        failures += 1;
                        progress.suspend(|| eprint!("{failure}"));
                    }
                }
                Err(error) => {
                    total.failed.push(done.seed);
                    failures += 1;
                    progress.suspend(|| eprintln!("\n=== FAILED: {error}"));
                }
            }
            if let (Some((again, first, second)), Ok(summary)) = (&done.again, &done.summary) {
                let same = again
                    .as_ref()
                    .is_ok_and(|again| again.fingerprint == summary.fingerprint);
                if same {
                    let _ = std::fs::remove_dir_all(first.parent().unwrap_or(first));
                } else {
                    total.nondeterministic.push(done.seed);
                    failures += 1;
                    progress.suspend(|| report_nondeterminism(&done, first, second));
                }
            }
            progress.inc(1);
        }
    });
    progress.finish_and_clear();
    print_summary(&totals, started.elapsed(), args.check_determinism, jobs);
    for (name, total) in &totals {
        if !total.unproven.is_empty() {
            let seeds: Vec<String> = total.unproven.iter().map(u64::to_string).collect();
            println!(
                "linearizability not proven ({}): {name} seeds {}; replay: cargo xtask sim --seed {} --scenario {name}",
                if args.allow_unproven {
                    "allowed by --allow-unproven"
                } else {
                    "fails the sweep; --allow-unproven lets it pass"
                },
                seeds.join(" "),
                total.unproven[0]
            );
        }
    }
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Per-scenario totals of a sweep.
#[derive(Default)]
struct Totals {
    runs: u64,
    failed: Vec<u64>,
    simulated: Duration,
    wall: Duration,
    operations: u64,
    /// Seeds whose linearizability search ran out of budget.
    unproven: Vec<u64>,
    torn_writes: u64,
    nondeterministic: Vec<u64>,
}

/// Prints where the two traces of a seed first differ.
fn report_nondeterminism(done: &Done, first: &Path, second: &Path) {
    let first_trace = std::fs::read_to_string(first).unwrap_or_default();
    let second_trace = std::fs::read_to_string(second).unwrap_or_default();
    let first_lines: Vec<&str> = first_trace.lines().collect();
    let second_lines: Vec<&str> = second_trace.lines().collect();
    let diverged = first_lines
        .iter()
        .zip(&second_lines)
        .position(|(a, b)| a != b)
        .unwrap_or(first_lines.len().min(second_lines.len()));
    eprintln!(
        "\n=== NONDETERMINISTIC: scenario {} seed {}: traces diverge at line {} ===",
        done.scenario,
        done.seed,
        diverged + 1
    );
    eprintln!("first:  {}", first_lines.get(diverged).unwrap_or(&"<end>"));
    eprintln!("second: {}", second_lines.get(diverged).unwrap_or(&"<end>"));
    eprintln!("traces: {} and {}", first.display(), second.display());
}

/// Prints the table of a sweep, a row per scenario, and how fast it went.
fn print_summary(totals: &BTreeMap<&str, Totals>, wall: Duration, determinism: bool, jobs: usize) {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec![
        "scenario",
        "seeds",
        "passed",
        "failed seeds",
        "operations",
        "linearizability not proven",
        "torn writes at crashes",
        "simulated s",
        "run s",
        "simulated s per run s",
    ];
    if determinism {
        header.push("nondeterministic");
    }
    table.set_header(header);
    let mut all_runs = 0;
    for (name, total) in totals {
        all_runs += total.runs;
        let failed: Vec<String> = total.failed.iter().map(u64::to_string).collect();
        let ratio = if total.wall.is_zero() {
            0.0
        } else {
            total.simulated.as_secs_f64() / total.wall.as_secs_f64()
        };
        let mut row = vec![
            (*name).to_owned(),
            total.runs.to_string(),
            (total.runs - total.failed.len() as u64).to_string(),
            if failed.is_empty() {
                "-".to_owned()
            } else {
                failed.join(" ")
            },
            total.operations.to_string(),
            total.unproven.len().to_string(),
            total.torn_writes.to_string(),
            format!("{:.0}", total.simulated.as_secs_f64()),
            format!("{:.1}", total.wall.as_secs_f64()),
            format!("{ratio:.1}"),
        ];
        if determinism {
            let odd: Vec<String> = total.nondeterministic.iter().map(u64::to_string).collect();
            let checked = scenarios::scenario(name).is_some_and(|scenario| scenario.deterministic);
            row.push(if !checked {
                "not checked (OS threads)".to_owned()
            } else if odd.is_empty() {
                "-".to_owned()
            } else {
                odd.join(" ")
            });
        }
        table.add_row(row);
    }
    println!("{table}");
    let minutes = wall.as_secs_f64() / 60.0;
    println!(
        "{all_runs} seeds in {:.1} s with {jobs} at a time ({:.1} seeds per minute{})",
        wall.as_secs_f64(),
        if minutes > 0.0 {
            all_runs as f64 / minutes
        } else {
            0.0
        },
        if determinism { ", each run twice" } else { "" }
    );
}
