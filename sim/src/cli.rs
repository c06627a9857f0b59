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
    #[arg(long, conflicts_with_all = ["seeds", "deep"])]
    seed: Option<u64>,
    /// Sweep seeds: `N` (N seeds from --first), or a range `A..B` (B excluded) or `A..=B`.
    #[arg(long)]
    seeds: Option<String>,
    /// The first seed of a sweep given as a count.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// A deep sweep: 10,000 seeds (from --first) spread over every scenario, unless --seeds
    /// and --scenario say otherwise; the progress bar shows the time left.
    #[arg(long)]
    deep: bool,
    /// Run only this part of the sweep, `I/N` (I from 0 to N-1): the seeds whose offset from
    /// the sweep's first seed is I modulo N, every scenario of a seed in the same shard. N
    /// machines running shards 0/N to N-1/N cover the sweep once (`--merge` adds them up).
    #[arg(long, value_parser = parse_shard)]
    shard: Option<Shard>,
    /// Append one JSON line per run to this file, and a last line for the shard (its sweep,
    /// shard and run count), so that shards' files concatenate and `--merge` adds them up.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// Go on with a sweep that stopped partway (killed, the machine lost): run only what its
    /// `--summary` file does not hold yet, and append to it. Give the options of the first try.
    #[arg(long, requires = "summary")]
    resume: bool,
    /// Add up the JSON lines files of a sweep's shards (`--summary`), print the table, and fail
    /// if a run failed, or a shard is missing or incomplete.
    #[arg(long, num_args = 1.., conflicts_with_all = ["seed", "seeds", "deep"])]
    merge: Vec<PathBuf>,
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
    let sweeping = args.seeds.is_some() || args.deep;
    let chosen = match chosen_scenarios(args.scenario.as_deref(), sweeping, &all) {
        Ok(chosen) => chosen,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    if !args.merge.is_empty() {
        return merge(&args.merge, args.allow_unproven);
    }
    let seeds = match (&args.seeds, args.deep) {
        (Some(text), _) => match SeedRange::parse(text, args.first) {
            Ok(range) => Some(range),
            Err(error) => {
                eprintln!("--seeds {text}: {error}");
                return ExitCode::from(2);
            }
        },
        (None, true) => Some(SeedRange {
            first: args.first,
            count: DEEP_SWEEP_SEEDS,
        }),
        (None, false) => None,
    };
    let sweep_label = seeds.map_or_else(String::new, |range| {
        format!("{}..{}", range.first, range.first + range.count)
    });
    let plan: Vec<(Scenario, u64)> = match (args.seed, seeds) {
        (Some(seed), _) => chosen.iter().map(|s| (s.clone(), seed)).collect(),
        (None, Some(range)) if each => (0..range.count)
            .filter(|i| args.shard.is_none_or(|shard| shard.holds(*i)))
            .flat_map(|i| chosen.iter().map(move |s| (s.clone(), range.first + i)))
            .collect(),
        (None, Some(range)) => (0..range.count)
            .filter(|i| args.shard.is_none_or(|shard| shard.holds(*i)))
            .map(|i| {
                let index = usize::try_from(i).unwrap_or(0) % chosen.len();
                (chosen[index].clone(), range.first + i)
            })
            .collect(),
        (None, None) => {
            eprintln!(
                "give --seed S to replay one seed, or --seeds N, --seeds A..B or --deep to sweep"
            );
            return ExitCode::from(2);
        }
    };
    if plan.is_empty() {
        eprintln!("this shard of the sweep holds no seed");
        return ExitCode::from(2);
    }
    let mut plan = plan;
    let mut resumed = 0;
    if args.resume
        && let Some(path) = &args.summary
    {
        let recorded = match recorded_runs(path) {
            Ok(recorded) => recorded,
            Err(error) => {
                eprintln!("--resume: {error}");
                return ExitCode::from(2);
            }
        };
        if recorded.ended {
            eprintln!(
                "--resume: {} already holds the end of a sweep; `certus-sim --merge {}` gives its table",
                path.display(),
                path.display()
            );
            return ExitCode::from(2);
        }
        let before = plan.len();
        plan.retain(|(scenario, seed)| !recorded.runs.contains(&(scenario.name.to_owned(), *seed)));
        resumed = before - plan.len();
        eprintln!(
            "--resume: {resumed} of {before} runs are in {} already; {} to go",
            path.display(),
            plan.len()
        );
    }
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
    sweep(&plan, resumed, &args, &sweep_label)
}

/// The scenarios `--scenario` names: one by name, every one for `all` and `each`, and without
/// the option every one for a sweep (`--seeds`, `--deep`) but only the first to replay a seed.
fn chosen_scenarios(
    name: Option<&str>,
    sweeping: bool,
    all: &[Scenario],
) -> Result<Vec<Scenario>, String> {
    match name {
        Some("all" | "each") => Ok(all.to_vec()),
        Some(name) => match all.iter().find(|s| s.name == name) {
            Some(scenario) => Ok(vec![scenario.clone()]),
            None => {
                let names: Vec<&str> = all.iter().map(|s| s.name).collect();
                Err(format!(
                    "no scenario {name}; there are: {}",
                    names.join(", ")
                ))
            }
        },
        None if sweeping => Ok(all.to_vec()),
        None => Ok(all[..1].to_vec()),
    }
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
fn sweep(plan: &[(Scenario, u64)], resumed: usize, args: &Args, sweep_label: &str) -> ExitCode {
    let single = plan.len() == 1 && !args.check_determinism && !args.resume;
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
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} seeds ({per_sec}, {eta} left) {msg}",
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
    let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
    let mut failures = 0u64;
    let mut lines = match args.summary.as_deref().map(open_summary).transpose() {
        Ok(lines) => lines,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
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
            let total = totals.entry(done.scenario.to_owned()).or_default();
            total.runs += 1;
            let mut line = RunLine::of(&done);
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
                    line.nondeterministic = true;
                    failures += 1;
                    progress.suspend(|| report_nondeterminism(&done, first, second));
                }
            }
            if let Some(lines) = lines.as_mut()
                && let Err(error) = write_line(lines, &line)
            {
                progress.suspend(|| eprintln!("--summary: {error}"));
                failures += 1;
            }
            progress.inc(1);
        }
    });
    progress.finish_and_clear();
    if let Some(lines) = lines.as_mut() {
        let footer = ShardLine {
            sweep: sweep_label.to_owned(),
            scenario: args.scenario.clone().unwrap_or_else(|| "all".to_owned()),
            shard: args
                .shard
                .map_or_else(|| "0/1".to_owned(), |shard| shard.to_string()),
            runs: (plan.len() + resumed) as u64,
        };
        if let Err(error) = write_line(lines, &footer) {
            eprintln!("--summary: {error}");
            failures += 1;
        }
    }
    print_summary(&totals, started.elapsed(), args.check_determinism, jobs);
    report_unproven(&totals, args.allow_unproven);
    if resumed > 0
        && let Some(path) = &args.summary
    {
        println!(
            "the table counts this run's part; with the {resumed} runs before it: certus-sim --merge {}",
            path.display()
        );
    }
    if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Lists the seeds whose linearizability was not proven.
fn report_unproven(totals: &BTreeMap<String, Totals>, allowed: bool) {
    for (name, total) in totals {
        if !total.unproven.is_empty() {
            let seeds: Vec<String> = total.unproven.iter().map(u64::to_string).collect();
            println!(
                "linearizability not proven ({}): {name} seeds {}; replay: cargo xtask sim --seed {} --scenario {name}",
                if allowed {
                    "allowed by --allow-unproven"
                } else {
                    "fails the sweep; --allow-unproven lets it pass"
                },
                seeds.join(" "),
                total.unproven[0]
            );
        }
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

/// Prints the table of a sweep, a row per scenario, and how fast it went (`jobs` 0: merged shards,
/// whose runs' times are added up).
fn print_summary(
    totals: &BTreeMap<String, Totals>,
    wall: Duration,
    determinism: bool,
    jobs: usize,
) {
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
            name.clone(),
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
    if jobs == 0 {
        // Merged shards: the runs' own times added up, not one sweep's wall clock.
        println!(
            "{all_runs} seeds merged, {:.1} s of run time in all{}",
            wall.as_secs_f64(),
            if determinism { ", each run twice" } else { "" }
        );
        return;
    }
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

/// How many seeds `--deep` sweeps.
const DEEP_SWEEP_SEEDS: u64 = 10_000;

/// The seeds of a sweep: `count` seeds from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SeedRange {
    first: u64,
    count: u64,
}

impl SeedRange {
    /// `N` (from `first`), `A..B` (B excluded) or `A..=B`.
    fn parse(text: &str, first: u64) -> Result<SeedRange, String> {
        let number = |part: &str| {
            part.trim()
                .parse::<u64>()
                .map_err(|_| format!("{part:?} is not a seed number"))
        };
        let (start, end) = if let Some((start, end)) = text.split_once("..=") {
            (
                number(start)?,
                number(end)?
                    .checked_add(1)
                    .ok_or("the range ends past the last seed")?,
            )
        } else if let Some((start, end)) = text.split_once("..") {
            (number(start)?, number(end)?)
        } else {
            let count = number(text)?;
            return Ok(SeedRange { first, count });
        };
        if end <= start {
            return Err(format!("the range {text} holds no seed"));
        }
        Ok(SeedRange {
            first: start,
            count: end - start,
        })
    }
}

/// One part of a sweep run on its own: the seeds whose offset is `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shard {
    index: u64,
    count: u64,
}

impl Shard {
    /// Whether the seed at `offset` from the sweep's first seed belongs to this shard.
    fn holds(self, offset: u64) -> bool {
        offset % self.count == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `I/N` with N at least 1 and I below N (Kubernetes' completion index is such an I).
fn parse_shard(text: &str) -> Result<Shard, String> {
    let (index, count) = text
        .split_once('/')
        .ok_or_else(|| format!("{text:?}: a shard is I/N, e.g. 3/10"))?;
    let index: u64 = index
        .trim()
        .parse()
        .map_err(|_| format!("{index:?} is not a shard index"))?;
    let count: u64 = count
        .trim()
        .parse()
        .map_err(|_| format!("{count:?} is not a shard count"))?;
    if count == 0 || index >= count {
        return Err(format!(
            "shard {index}/{count}: I runs from 0 to N-1, N at least 1"
        ));
    }
    Ok(Shard { index, count })
}

/// One run of a sweep, as a line of `--summary`.
#[derive(Debug, Serialize, Deserialize)]
struct RunLine {
    scenario: String,
    seed: u64,
    passed: bool,
    #[serde(default)]
    fingerprint: u64,
    #[serde(default)]
    simulated_ms: u64,
    #[serde(default)]
    wall_ms: u64,
    #[serde(default)]
    operations: u64,
    #[serde(default)]
    unproven: bool,
    #[serde(default)]
    torn_writes: u64,
    #[serde(default)]
    nondeterministic: bool,
    /// The first line of what failed (the whole text is in the run's report folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
}

impl RunLine {
    fn of(done: &Done) -> RunLine {
        match &done.summary {
            Ok(summary) => RunLine {
                scenario: done.scenario.to_owned(),
                seed: done.seed,
                passed: summary.passed,
                fingerprint: summary.fingerprint,
                simulated_ms: summary.simulated_ms,
                wall_ms: summary.wall_ms,
                operations: summary.operations,
                unproven: summary.unproven,
                torn_writes: summary.torn_writes,
                nondeterministic: false,
                failure: summary
                    .failure
                    .as_deref()
                    .map(|text| text.trim().lines().next().unwrap_or_default().to_owned()),
            },
            Err(error) => RunLine {
                scenario: done.scenario.to_owned(),
                seed: done.seed,
                passed: false,
                fingerprint: 0,
                simulated_ms: 0,
                wall_ms: 0,
                operations: 0,
                unproven: false,
                torn_writes: 0,
                nondeterministic: false,
                failure: Some(error.clone()),
            },
        }
    }
}

/// The last line a shard writes to `--summary`: what it was asked to run, and how many runs.
#[derive(Debug, Serialize, Deserialize)]
struct ShardLine {
    sweep: String,
    scenario: String,
    shard: String,
    runs: u64,
}

/// A `--summary` line of either kind.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Line {
    Shard(ShardLine),
    Run(RunLine),
}

/// What a `--summary` file already holds: its runs, and whether a sweep wrote its end.
#[derive(Debug, Default)]
struct Recorded {
    runs: std::collections::BTreeSet<(String, u64)>,
    ended: bool,
}

/// Reads back a `--summary` file for `--resume` (a missing file holds nothing). A last line cut
/// short by the stop is cut off the file, so that run is made again and the lines appended
/// after it stay whole.
fn recorded_runs(path: &Path) -> Result<Recorded, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    let whole = text.rfind('\n').map_or(0, |end| end + 1);
    if whole < text.len() {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|file| file.set_len(whole as u64))
            .map_err(|error| format!("{}: cutting its last line: {error}", path.display()))?;
    }
    Ok(recorded_in(&text[..whole]))
}

fn recorded_in(text: &str) -> Recorded {
    let mut recorded = Recorded::default();
    for line in text.lines() {
        match serde_json::from_str::<Line>(line) {
            Ok(Line::Run(run)) => {
                recorded.runs.insert((run.scenario, run.seed));
            }
            Ok(Line::Shard(_)) => recorded.ended = true,
            Err(_) => {}
        }
    }
    recorded
}

fn open_summary(path: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| format!("--summary {}: {error}", path.display()))
}

fn write_line(file: &mut std::fs::File, line: &impl Serialize) -> Result<(), String> {
    use std::io::Write as _;
    let mut text = serde_json::to_string(line).map_err(|error| error.to_string())?;
    text.push('\n');
    file.write_all(text.as_bytes())
        .map_err(|error| error.to_string())
}

/// `--merge`: the shards' lines added up into one table. Fails on a failed or nondeterministic
/// run, a verdict not proven (unless allowed), a run counted twice, or a sweep whose shards are
/// not all there with every run.
fn merge(paths: &[PathBuf], allow_unproven: bool) -> ExitCode {
    let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
    let mut seen: std::collections::BTreeSet<(String, u64)> = std::collections::BTreeSet::new();
    let mut shards: BTreeMap<String, ShardLine> = BTreeMap::new();
    let mut problems: Vec<String> = Vec::new();
    let mut wall = Duration::ZERO;
    let mut determinism = false;
    for path in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                eprintln!("{}: {error}", path.display());
                return ExitCode::from(2);
            }
        };
        for (number, line) in text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
        {
            match serde_json::from_str::<Line>(line) {
                Ok(Line::Shard(shard)) => {
                    let key = format!("{} {} {}", shard.sweep, shard.scenario, shard.shard);
                    if shards.insert(key.clone(), shard).is_some() {
                        problems.push(format!("shard {key} appears twice"));
                    }
                }
                Ok(Line::Run(run)) => {
                    if !seen.insert((run.scenario.clone(), run.seed)) {
                        problems.push(format!("{} seed {} appears twice", run.scenario, run.seed));
                        continue;
                    }
                    let total = totals.entry(run.scenario.clone()).or_default();
                    total.runs += 1;
                    total.simulated += Duration::from_millis(run.simulated_ms);
                    total.wall += Duration::from_millis(run.wall_ms);
                    wall += Duration::from_millis(run.wall_ms);
                    total.operations += run.operations;
                    total.torn_writes += run.torn_writes;
                    if run.unproven {
                        total.unproven.push(run.seed);
                    }
                    if !run.passed {
                        total.failed.push(run.seed);
                        problems.push(format!(
                            "{} seed {} failed: {}",
                            run.scenario,
                            run.seed,
                            run.failure.as_deref().unwrap_or("?")
                        ));
                    }
                    if run.nondeterministic {
                        determinism = true;
                        total.nondeterministic.push(run.seed);
                        problems.push(format!(
                            "{} seed {} is nondeterministic",
                            run.scenario, run.seed
                        ));
                    }
                }
                Err(error) => {
                    eprintln!(
                        "{}:{}: not a summary line: {error}",
                        path.display(),
                        number + 1
                    );
                    return ExitCode::from(2);
                }
            }
        }
    }
    problems.extend(shard_gaps(&shards, seen.len() as u64));
    print_summary(&totals, wall, determinism, 0);
    report_unproven(&totals, allow_unproven);
    let unproven = totals.values().any(|total| !total.unproven.is_empty());
    for problem in &problems {
        println!("{problem}");
    }
    if problems.is_empty() && (allow_unproven || !unproven) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What is missing from a sweep's shards: every shard of each sweep must have reported, and the
/// runs they reported must all be there.
fn shard_gaps(shards: &BTreeMap<String, ShardLine>, runs_seen: u64) -> Vec<String> {
    let mut gaps = Vec::new();
    if shards.is_empty() {
        gaps.push(
            "no shard reported its end (a shard still running, or its file cut short)".to_owned(),
        );
        return gaps;
    }
    let mut sweeps: BTreeMap<(String, String), Vec<&ShardLine>> = BTreeMap::new();
    for shard in shards.values() {
        sweeps
            .entry((shard.sweep.clone(), shard.scenario.clone()))
            .or_default()
            .push(shard);
    }
    let mut runs_expected = 0;
    for ((sweep, scenario), parts) in &sweeps {
        let Some(count) = parts
            .first()
            .and_then(|part| parse_shard(&part.shard).ok())
            .map(|shard| shard.count)
        else {
            gaps.push(format!("sweep {sweep}: a shard is not I/N"));
            continue;
        };
        let present: std::collections::BTreeSet<u64> = parts
            .iter()
            .filter_map(|part| parse_shard(&part.shard).ok())
            .filter(|shard| shard.count == count)
            .map(|shard| shard.index)
            .collect();
        let missing: Vec<String> = (0..count)
            .filter(|index| !present.contains(index))
            .map(|index| format!("{index}/{count}"))
            .collect();
        if !missing.is_empty() {
            gaps.push(format!(
                "sweep {sweep} (--scenario {scenario}): shards {} did not report",
                missing.join(" ")
            ));
        }
        runs_expected += parts.iter().map(|part| part.runs).sum::<u64>();
    }
    if runs_expected != runs_seen {
        gaps.push(format!(
            "the shards reported {runs_expected} runs, the files hold {runs_seen}"
        ));
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_a_count_or_a_range() {
        assert_eq!(
            SeedRange::parse("100", 7),
            Ok(SeedRange {
                first: 7,
                count: 100
            })
        );
        assert_eq!(
            SeedRange::parse("5..15", 1),
            Ok(SeedRange {
                first: 5,
                count: 10
            })
        );
        assert_eq!(
            SeedRange::parse("5..=15", 1),
            Ok(SeedRange {
                first: 5,
                count: 11
            })
        );
        assert!(SeedRange::parse("15..5", 1).is_err());
        assert!(SeedRange::parse("5..5", 1).is_err());
        assert!(SeedRange::parse("five", 1).is_err());
    }

    #[test]
    fn a_sweep_without_a_scenario_runs_every_scenario_and_a_replay_the_first() {
        let all = scenarios::scenarios();
        let names = |chosen: Vec<Scenario>| chosen.iter().map(|s| s.name).collect::<Vec<_>>();
        let every: Vec<&str> = all.iter().map(|s| s.name).collect();
        assert!(every.len() > 1);
        // `--deep` and `--seeds` alike: the deep sweep once ran `leases` alone.
        assert_eq!(names(chosen_scenarios(None, true, &all).unwrap()), every);
        assert_eq!(
            names(chosen_scenarios(None, false, &all).unwrap()),
            ["leases"]
        );
        assert_eq!(
            names(chosen_scenarios(Some("each"), false, &all).unwrap()),
            every
        );
        assert_eq!(
            names(chosen_scenarios(Some("ct"), true, &all).unwrap()),
            ["ct"]
        );
        let error = chosen_scenarios(Some("nope"), true, &all).unwrap_err();
        assert!(
            error.contains("no scenario nope") && error.contains("leases"),
            "{error}"
        );
    }

    #[test]
    fn shards_cover_a_sweep_once() {
        let shards: Vec<Shard> = (0..4)
            .map(|index| parse_shard(&format!("{index}/4")).expect("a shard"))
            .collect();
        for offset in 0..100 {
            assert_eq!(
                shards.iter().filter(|shard| shard.holds(offset)).count(),
                1,
                "seed offset {offset}"
            );
        }
        assert!(parse_shard("4/4").is_err());
        assert!(parse_shard("0/0").is_err());
        assert!(parse_shard("1").is_err());
        assert_eq!(parse_shard("3/10").expect("a shard").to_string(), "3/10");
    }

    #[test]
    fn a_merge_finds_missing_shards_and_runs() {
        let shard = |index: u64, runs: u64| ShardLine {
            sweep: "1..101".to_owned(),
            scenario: "each".to_owned(),
            shard: format!("{index}/3"),
            runs,
        };
        let mut shards = BTreeMap::new();
        shards.insert("a".to_owned(), shard(0, 10));
        shards.insert("b".to_owned(), shard(2, 10));
        let gaps = shard_gaps(&shards, 20);
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert!(gaps[0].contains("shards 1/3 did not report"), "{gaps:?}");
        shards.insert("c".to_owned(), shard(1, 10));
        assert!(shard_gaps(&shards, 30).is_empty());
        let gaps = shard_gaps(&shards, 29);
        assert!(
            gaps[0].contains("reported 30 runs, the files hold 29"),
            "{gaps:?}"
        );
        assert!(!shard_gaps(&BTreeMap::new(), 0).is_empty());
    }

    #[test]
    fn a_resumed_sweep_skips_what_its_summary_holds_and_redoes_a_line_cut_short() {
        let text = concat!(
            r#"{"scenario":"leases","seed":1,"passed":true}"#,
            "\n",
            r#"{"scenario":"ct","seed":2,"passed":false,"failure":"x"}"#,
            "\n",
            r#"{"scenario":"ct","seed":3,"pas"#,
        );
        let recorded = recorded_in(text);
        assert!(!recorded.ended);
        // What `recorded_runs` reads once it has cut the last line short of its newline.
        let whole = &text[..=text.rfind('\n').expect("lines")];
        let path = std::env::temp_dir().join(format!("certus-resume-{}.jsonl", std::process::id()));
        std::fs::write(&path, text).expect("writes");
        assert_eq!(recorded_runs(&path).expect("reads").runs.len(), 2);
        assert_eq!(std::fs::read_to_string(&path).expect("reads"), whole);
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            recorded.runs.into_iter().collect::<Vec<_>>(),
            [("ct".to_owned(), 2), ("leases".to_owned(), 1)]
        );
        let ended = format!(
            "{text}\n{}",
            r#"{"sweep":"1..4","scenario":"all","shard":"0/1","runs":3}"#
        );
        assert!(recorded_in(&ended).ended);
    }

    #[test]
    fn summary_lines_read_back_as_runs_and_shards() {
        let run = RunLine {
            scenario: "leases".to_owned(),
            seed: 9,
            passed: true,
            fingerprint: 1,
            simulated_ms: 2,
            wall_ms: 3,
            operations: 4,
            unproven: false,
            torn_writes: 0,
            nondeterministic: false,
            failure: None,
        };
        let text = serde_json::to_string(&run).expect("encodes");
        assert!(
            matches!(serde_json::from_str::<Line>(&text), Ok(Line::Run(line)) if line.seed == 9)
        );
        let footer = ShardLine {
            sweep: "1..11".to_owned(),
            scenario: "all".to_owned(),
            shard: "0/1".to_owned(),
            runs: 10,
        };
        let text = serde_json::to_string(&footer).expect("encodes");
        assert!(
            matches!(serde_json::from_str::<Line>(&text), Ok(Line::Shard(line)) if line.runs == 10)
        );
    }
}
