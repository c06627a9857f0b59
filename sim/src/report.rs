//! What one run leaves behind: its report folder (trace, history, schedule, verdicts, timeline)
//! and the text printed for it (the verdicts of a run, or what failed and how to replay it).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::run::RunOutcome;

/// Writes the report folder of a run: the trace, the client history, the schedule, the
/// verdicts, the timeline and any offending linearizability windows. Returns the folder.
pub fn write_report(outcome: &RunOutcome, root: &Path) -> std::io::Result<PathBuf> {
    let dir = root.join(format!("{}-{}", outcome.scenario, outcome.seed));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("trace.log"), &outcome.trace)?;
    std::fs::write(dir.join("schedule.txt"), outcome.schedule.describe())?;
    write_json(&dir.join("schedule.json"), &outcome.schedule)?;
    write_json(&dir.join("history.json"), &outcome.history)?;
    write_json(&dir.join("verdicts.json"), &outcome.verdicts)?;
    write_json(&dir.join("run.json"), &outcome.record)?;
    std::fs::write(
        dir.join("timeline.html"),
        crate::timeline::render_html(&outcome.record),
    )?;
    if let Some(report) = &outcome.ct_report {
        std::fs::write(dir.join("ct.json"), report)?;
    }
    if let Some(report) = &outcome.sessions_report {
        std::fs::write(dir.join("sessions.json"), report)?;
    }
    if let Some(report) = &outcome.pipelines_report {
        std::fs::write(dir.join("pipelines.json"), report)?;
    }
    if let Some(report) = &outcome.acme_report {
        std::fs::write(dir.join("acme.json"), report)?;
    }
    for (lease, window) in &outcome.nonlinearizable {
        write_json(&dir.join(format!("nonlinearizable-{lease}.json")), window)?;
    }
    Ok(dir)
}

fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

/// The verdicts of a run as printed, with its fingerprint, how to replay it and where its report is.
pub(crate) fn verdicts_text(outcome: &RunOutcome, report: Option<&Path>) -> String {
    let mut text = format!(
        "[{}] seed {}: {} ({:.1} simulated s in {:.1} s)\n{}",
        outcome.scenario,
        outcome.seed,
        if outcome.passed() { "PASS" } else { "FAIL" },
        outcome.simulated.as_secs_f64(),
        outcome.wall.as_secs_f64(),
        outcome.schedule.describe()
    );
    for verdict in &outcome.verdicts {
        text.push_str(&format!(
            "  {} {:<18} {}\n",
            if verdict.passed { "ok  " } else { "FAIL" },
            verdict.checker,
            verdict.detail
        ));
    }
    text.push_str(&format!(
        "fingerprint {:016x}; replay: cargo xtask sim --seed {} --scenario {}\n",
        outcome.fingerprint(),
        outcome.seed,
        outcome.scenario
    ));
    if let Some(dir) = report {
        text.push_str(&format!(
            "report: {} (timeline: {})\n",
            dir.display(),
            dir.join("timeline.html").display()
        ));
    }
    text
}

/// What a failed run prints: the seed, the schedule, the failed verdicts, the trace's last 40
/// lines, where its report is and how to replay it.
pub(crate) fn failure_text(outcome: &RunOutcome, report: Option<&Path>) -> String {
    let mut text = format!(
        "\n=== FAILED: scenario {} seed {} ===\n{}",
        outcome.scenario,
        outcome.seed,
        outcome.schedule.describe()
    );
    for verdict in outcome.verdicts.iter().filter(|verdict| !verdict.passed) {
        text.push_str(&format!("  FAIL {}: {}\n", verdict.checker, verdict.detail));
    }
    text.push_str("--- trace tail ---\n");
    let lines: Vec<&str> = outcome.trace.lines().collect();
    for line in &lines[lines.len().saturating_sub(40)..] {
        text.push_str(line);
        text.push('\n');
    }
    if let Some(dir) = report {
        text.push_str(&format!("report: {}\n", dir.display()));
    }
    text.push_str(&format!(
        "replay: cargo xtask sim --seed {} --scenario {}\n\n",
        outcome.seed, outcome.scenario
    ));
    text
}
