//! The timeline of a run, drawn as one self-contained HTML page (inline SVG, inline CSS, no
//! scripts, no external resources) that opens offline in any browser.
//!
//! The picture, top to bottom, on one time axis in simulated seconds:
//!
//! * a legend (roles, fault kinds, "permanent" hatching);
//! * the safety phase (`0..heal_ms`, faults on) shaded rose and the liveness phase
//!   (`heal_ms..end_ms`, healed) shaded green, split by a dashed line at the heal;
//! * one lane per node with its role over time as coloured bars (consecutive samples of equal
//!   role merged; a leader bar also splits on a term change and is labelled `T<term>` where
//!   there is room), a thin strip under the lane for every fault touching that node, and a
//!   tooltip on every bar;
//! * the faults, one bar per [`FaultSpan`] packed into as few rows as overlap allows, coloured by
//!   kind, labelled, hatched with an arrow when never healed;
//! * each node's commit index as a line chart (broken while the node is down).
//!
//! Under the picture: the checkers' verdicts, the clocks, and the fault schedule as tables.
//! Every string from the record is escaped before it reaches the markup.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

use crate::limits::TIMELINE_DECLARED_NODES_MAX;
use crate::observe::{FaultSpan, Role, RunRecord, Sample};

/// Width of the SVG in px.
const WIDTH: f64 = 1200.0;
/// Left margin (lane labels) in px.
const LEFT: f64 = 110.0;
/// Right margin in px (room for a "permanent" arrow).
const RIGHT: f64 = 24.0;
/// Width of the plotted time range in px.
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
/// Height of a node's role bar.
const LANE_H: f64 = 24.0;
/// Height of the fault strip under a node's lane.
const STRIP_H: f64 = 5.0;
/// Vertical distance between node lanes.
const LANE_STEP: f64 = 38.0;
/// Height of a fault bar.
const FAULT_H: f64 = 18.0;
/// Vertical distance between fault rows.
const FAULT_STEP: f64 = 22.0;
/// Height of the commit chart.
const CHART_H: f64 = 180.0;
/// Font size of labels, in px.
const FONT: f64 = 11.0;
/// Prefix of element ids, so the page can be embedded in another without clashes.
const ID: &str = "certus-tl";

/// The colour of a role's bar.
fn role_colour(role: Role) -> &'static str {
    match role {
        Role::Leader => "#2e7d32",
        Role::Candidate => "#f9a825",
        Role::Follower => "#90caf9",
        Role::Down => "#37474f",
    }
}

/// A role's name as shown.
fn role_name(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Candidate => "candidate",
        Role::Follower => "follower",
        Role::Down => "down",
    }
}

/// The colour of a fault family.
fn kind_colour(kind: &str) -> &'static str {
    match kind {
        "crash" => "#c62828",
        "isolate" => "#6a1b9a",
        "link" => "#ad1457",
        "split" => "#283593",
        "flap" => "#00838f",
        "network" => "#5d4037",
        "skew" => "#827717",
        "pause" => "#ef6c00",
        "clock-step" => "#9e9d24",
        "slow-disk" => "#4e342e",
        "slow-apply" => "#37474f",
        "disk-error" => "#b71c1c",
        "membership" => "#1565c0",
        _ => "#616161",
    }
}

/// Line colours of the commit chart, by lane position.
const NODE_COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
];

/// The commit-chart colour of the lane at `index`.
fn node_colour(index: usize) -> &'static str {
    NODE_COLOURS
        .get(index % NODE_COLOURS.len())
        .copied()
        .unwrap_or("#000")
}

/// Escapes `s` for HTML text and attribute values (also inside inline SVG). Control characters
/// other than tab and newline, which XML does not allow, become U+FFFD.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `ms` as a float, for scaling.
#[allow(
    clippy::cast_precision_loss,
    reason = "pixel positions; precision beyond 2^53 ms is irrelevant"
)]
fn ms_f(ms: u64) -> f64 {
    ms as f64
}

/// Simulated milliseconds as seconds with one decimal, e.g. `12.3`.
fn secs(ms: u64) -> String {
    format!("{}.{}", ms / 1000, (ms % 1000) / 100)
}

/// Estimated width of `s` at `px` font size (sans-serif averages ~0.6 em per glyph).
fn text_w(s: &str, px: f64) -> f64 {
    s.chars().map(|c| glyph_w(c, px)).sum()
}

/// Estimated width of one glyph.
fn glyph_w(c: char, px: f64) -> f64 {
    if c.is_ascii() { px * 0.6 } else { px }
}

/// `s` cut (with an ellipsis) to fit `width` px at `px` font size, or `None` if not even two
/// glyphs fit.
fn fit(s: &str, width: f64, px: f64) -> Option<String> {
    let avail = width - 6.0;
    if text_w(s, px) <= avail {
        return Some(s.to_owned());
    }
    let ellipsis = glyph_w('…', px);
    let mut used = ellipsis;
    let mut out = String::new();
    for c in s.chars() {
        used += glyph_w(c, px);
        if used > avail {
            break;
        }
        out.push(c);
    }
    if out.chars().count() < 2 {
        return None;
    }
    out.push('…');
    Some(out)
}

/// Maps simulated time to x.
#[derive(Clone, Copy, Debug)]
struct Scale {
    /// The last instant shown (at least 1).
    t_end: u64,
}

impl Scale {
    /// The x of `ms` (clamped to the plotted range).
    fn x(self, ms: u64) -> f64 {
        LEFT + PLOT_W * (ms_f(ms.min(self.t_end)) / ms_f(self.t_end))
    }

    /// The tick step in ms: a round step giving at most 12 intervals.
    fn tick_step(self) -> u64 {
        const STEPS: [u64; 17] = [
            100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000,
            300_000, 600_000, 1_800_000, 3_600_000, 7_200_000,
        ];
        STEPS
            .iter()
            .copied()
            .find(|step| self.t_end / step <= 12)
            .unwrap_or_else(|| self.t_end.div_ceil(12))
    }

    /// The ticks: (ms, label).
    fn ticks(self) -> Vec<(u64, String)> {
        let step = self.tick_step().max(1);
        let mut out = Vec::new();
        for i in 0..=12_u64 {
            let t = step.saturating_mul(i);
            if t > self.t_end {
                break;
            }
            let label = if step.is_multiple_of(1000) {
                format!("{}s", t / 1000)
            } else {
                format!("{}s", secs(t))
            };
            out.push((t, label));
        }
        out
    }
}

/// One node's samples, in time order.
#[derive(Debug)]
struct Lane<'a> {
    /// The node.
    node: u64,
    /// Its samples.
    samples: Vec<&'a Sample>,
}

/// The lanes: nodes `1..=nodes` plus any other node that was sampled, by id.
fn lanes(r: &RunRecord) -> Vec<Lane<'_>> {
    let mut by_node: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for n in 1..=r.nodes.min(TIMELINE_DECLARED_NODES_MAX) {
        by_node.entry(n).or_default();
    }
    for s in &r.samples {
        by_node.entry(s.node).or_default().push(s);
    }
    by_node
        .into_iter()
        .map(|(node, mut samples)| {
            samples.sort_by_key(|s| s.at_ms);
            Lane { node, samples }
        })
        .collect()
}

/// The last instant the picture shows: the run's end, or anything recorded later.
fn time_end(r: &RunRecord) -> u64 {
    let mut t = r.end_ms.max(r.heal_ms);
    for s in &r.samples {
        t = t.max(s.at_ms);
    }
    for f in &r.faults {
        t = t.max(f.from_ms).max(f.until_ms.unwrap_or(0));
    }
    t.max(1)
}

/// Consecutive samples of one node in one role (and, for a leader, one term).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    /// The role.
    role: Role,
    /// The lowest term seen.
    term_lo: u64,
    /// The highest term seen.
    term_hi: u64,
    /// The first sample's time.
    from: u64,
    /// Where the next run begins (or the estimated end of the last sample).
    until: u64,
    /// The commit index at the first sample.
    commit_lo: u64,
    /// The commit index at the last sample.
    commit_hi: u64,
    /// Whether the run before it was a leader run too (a term change while leading).
    after_leader: bool,
}

/// Merges a node's samples (in time order) into runs; the last run lasts to `end_ms`.
fn runs(samples: &[&Sample], end_ms: u64) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for s in samples {
        let continues = out.last().is_some_and(|run| {
            run.role == s.role && (s.role != Role::Leader || run.term_lo == s.term)
        });
        if continues {
            if let Some(run) = out.last_mut() {
                run.term_lo = run.term_lo.min(s.term);
                run.term_hi = run.term_hi.max(s.term);
                run.until = s.at_ms;
                run.commit_hi = s.committed;
            }
        } else {
            let after_leader =
                s.role == Role::Leader && out.last().is_some_and(|run| run.role == Role::Leader);
            if let Some(prev) = out.last_mut() {
                prev.until = s.at_ms;
            }
            out.push(Run {
                role: s.role,
                term_lo: s.term,
                term_hi: s.term,
                from: s.at_ms,
                until: s.at_ms,
                commit_lo: s.committed,
                commit_hi: s.committed,
                after_leader,
            });
        }
    }
    // Samples are taken on every change (and on commit progress), so a role lasts until the
    // next sample, and the last one until the run ended.
    if let (Some(run), Some(last)) = (out.last_mut(), samples.last()) {
        run.until = end_ms.max(last.at_ms);
    }
    out
}

/// The interval a fault is drawn over: `until_ms` clamped to at least `from_ms`, or `end` when
/// it was never healed.
fn fault_span(f: &FaultSpan, end: u64) -> (u64, u64) {
    let until = f.until_ms.unwrap_or(end.max(f.from_ms));
    (f.from_ms, until.max(f.from_ms))
}

/// A fault's tooltip text (unescaped).
fn fault_tip(f: &FaultSpan) -> String {
    let nodes: Vec<String> = f.nodes.iter().map(|n| format!("n{n}")).collect();
    let until = match f.until_ms {
        Some(u) if u < f.from_ms => format!("{} s (recorded before its start; clamped)", secs(u)),
        Some(u) => format!("{} s", secs(u)),
        None => "end of run (permanent: never healed)".to_owned(),
    };
    format!(
        "{} [{}] nodes: {}\n{} s – {until}",
        f.label,
        f.kind,
        if nodes.is_empty() {
            "—".to_owned()
        } else {
            nodes.join(", ")
        },
        secs(f.from_ms),
    )
}

/// Packs faults into rows so that bars in one row do not overlap; returns each fault's row and
/// the number of rows.
fn fault_rows(faults: &[FaultSpan], scale: Scale, end: u64) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..faults.len()).collect();
    order.sort_by_key(|&i| faults.get(i).map_or(0, |f| f.from_ms));
    let mut row_of = vec![0; faults.len()];
    let mut row_ends: Vec<f64> = Vec::new();
    for i in order {
        let Some(f) = faults.get(i) else { continue };
        let (from, until) = fault_span(f, end);
        let x0 = scale.x(from);
        let x1 = scale.x(until).max(x0 + 3.0) + if f.until_ms.is_none() { 9.0 } else { 0.0 };
        let row = match row_ends.iter().position(|&e| e + 2.0 <= x0) {
            Some(row) => row,
            None => {
                row_ends.push(f64::NEG_INFINITY);
                row_ends.len() - 1
            }
        };
        if let Some(e) = row_ends.get_mut(row) {
            *e = x1;
        }
        if let Some(slot) = row_of.get_mut(i) {
            *slot = row;
        }
    }
    let rows = row_ends.len();
    (row_of, rows)
}

/// A legend entry: fill, label, hatched.
type LegendItem = (String, String, bool);

/// Writes a legend starting at `y`, wrapping at the SVG's width; returns the height used.
fn legend(out: &mut String, items: &[LegendItem], y: f64) -> Result<f64, fmt::Error> {
    let mut x = LEFT;
    let mut line_y = y;
    for (fill, label, hatched) in items {
        let w = 14.0 + 5.0 + text_w(label, FONT) + 18.0;
        if x + w > WIDTH - RIGHT && x > LEFT {
            x = LEFT;
            line_y += 18.0;
        }
        write!(
            out,
            r##"<rect x="{x:.1}" y="{line_y:.1}" width="14" height="12" fill="{}" stroke="#333" stroke-width="0.5"/>"##,
            escape(fill)
        )?;
        if *hatched {
            write!(
                out,
                r##"<rect x="{x:.1}" y="{line_y:.1}" width="14" height="12" fill="url(#{ID}-hatch)"/>"##
            )?;
        }
        write!(
            out,
            r##"<text x="{:.1}" y="{:.1}" class="lbl">{}</text>"##,
            x + 19.0,
            line_y + 10.0,
            escape(label)
        )?;
        x += w;
    }
    Ok(line_y - y + 14.0)
}

/// Writes the SVG picture of `r`.
fn write_svg(out: &mut String, r: &RunRecord) -> fmt::Result {
    let lanes = lanes(r);
    let t_end = time_end(r);
    let scale = Scale { t_end };
    let run_end = if r.end_ms == 0 { t_end } else { r.end_ms };
    let heal = r.heal_ms.min(t_end);
    let ticks = scale.ticks();
    let mut body = String::with_capacity(64 * 1024);
    let b = &mut body;

    // Legend: roles, then the fault kinds present, then the hatching.
    let mut items: Vec<LegendItem> = [Role::Leader, Role::Candidate, Role::Follower, Role::Down]
        .iter()
        .map(|&role| {
            let label = if role == Role::Leader {
                "leader (T = term)"
            } else {
                role_name(role)
            };
            (role_colour(role).to_owned(), label.to_owned(), false)
        })
        .collect();
    let kinds: BTreeSet<&str> = r.faults.iter().map(|f| f.kind.as_str()).collect();
    for kind in &kinds {
        items.push((
            kind_colour(kind).to_owned(),
            format!("fault: {kind}"),
            false,
        ));
    }
    if r.faults.iter().any(|f| f.until_ms.is_none()) {
        items.push((
            "#9e9e9e".to_owned(),
            "never healed (permanent)".to_owned(),
            true,
        ));
    }
    let mut y = 8.0;
    y += legend(b, &items, y)? + 10.0;

    // Layout.
    let band_top = y;
    let phase_label_y = y + 13.0;
    let top_ticks_y = y + 31.0;
    let lanes_top = y + 40.0;
    let lanes_bottom = lanes_top
        + if lanes.is_empty() {
            LANE_STEP
        } else {
            LANE_STEP * count_f(lanes.len())
        };
    let (row_of, rows) = fault_rows(&r.faults, scale, run_end);
    let faults_top = lanes_bottom + 8.0;
    let faults_bottom = faults_top + FAULT_STEP * count_f(rows.max(1));
    let mid_ticks_y = faults_bottom + 12.0;
    let node_legend_y = faults_bottom + 26.0;
    let node_items: Vec<LegendItem> = lanes
        .iter()
        .enumerate()
        .map(|(i, lane)| (node_colour(i).to_owned(), format!("n{}", lane.node), false))
        .collect();
    let mut legend_body = String::new();
    let node_legend_h = legend(&mut legend_body, &node_items, node_legend_y)?;
    let chart_top = node_legend_y + node_legend_h + 12.0;
    let chart_bottom = chart_top + CHART_H;
    let height = chart_bottom + 42.0;

    // Phase shading and labels.
    let x_heal = scale.x(heal);
    let x_end = scale.x(t_end);
    if heal > 0 {
        write!(
            b,
            r##"<rect x="{LEFT:.1}" y="{band_top:.1}" width="{:.1}" height="{:.1}" fill="#fdecea"><title>safety phase: faults on, 0 – {} s</title></rect>"##,
            x_heal - LEFT,
            chart_bottom - band_top,
            secs(r.heal_ms)
        )?;
        if let Some(text) = fit(
            &format!("faults on · safety phase (0 – {} s)", secs(r.heal_ms)),
            x_heal - LEFT,
            FONT,
        ) {
            write!(
                b,
                r##"<text x="{:.1}" y="{phase_label_y:.1}" class="phase" fill="#b71c1c">{}</text>"##,
                LEFT + 4.0,
                escape(&text)
            )?;
        }
    }
    if heal < t_end {
        write!(
            b,
            r##"<rect x="{x_heal:.1}" y="{band_top:.1}" width="{:.1}" height="{:.1}" fill="#e8f5e9"><title>liveness phase: healed, {} – {} s</title></rect>"##,
            x_end - x_heal,
            chart_bottom - band_top,
            secs(r.heal_ms),
            secs(run_end)
        )?;
        if let Some(text) = fit(
            &format!(
                "healed · liveness phase ({} – {} s)",
                secs(r.heal_ms),
                secs(run_end)
            ),
            x_end - x_heal,
            FONT,
        ) {
            write!(
                b,
                r##"<text x="{:.1}" y="{phase_label_y:.1}" class="phase" fill="#1b5e20">{}</text>"##,
                x_heal + 4.0,
                escape(&text)
            )?;
        }
    }

    // Grid and tick labels (top, between faults and chart, under the chart).
    for (t, label) in &ticks {
        let x = scale.x(*t);
        write!(
            b,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{faults_bottom:.1}" class="grid"/><line x1="{x:.1}" y1="{chart_top:.1}" x2="{x:.1}" y2="{chart_bottom:.1}" class="grid"/>"##,
            lanes_top - 4.0
        )?;
        for ty in [top_ticks_y, mid_ticks_y, chart_bottom + 14.0] {
            write!(
                b,
                r##"<text x="{x:.1}" y="{ty:.1}" class="tick">{}</text>"##,
                escape(label)
            )?;
        }
    }
    write!(
        b,
        r##"<text x="{:.1}" y="{:.1}" class="tick">simulated time (s)</text>"##,
        LEFT + PLOT_W / 2.0,
        chart_bottom + 32.0
    )?;

    // Node lanes.
    if lanes.is_empty() {
        write!(
            b,
            r##"<text x="{:.1}" y="{:.1}" class="lbl muted">no nodes / no samples recorded</text>"##,
            LEFT + 6.0,
            lanes_top + 16.0
        )?;
    }
    for (i, lane) in lanes.iter().enumerate() {
        let ly = lanes_top + LANE_STEP * count_f(i);
        write!(
            b,
            r##"<text x="{:.1}" y="{:.1}" class="lane">n{}</text>"##,
            LEFT - 10.0,
            ly + 16.0,
            lane.node
        )?;
        write!(
            b,
            r##"<rect x="{LEFT:.1}" y="{ly:.1}" width="{PLOT_W:.1}" height="{LANE_H:.1}" class="lanebg"/>"##
        )?;
        if lane.samples.is_empty() {
            write!(
                b,
                r##"<text x="{:.1}" y="{:.1}" class="lbl muted">no samples</text>"##,
                LEFT + 6.0,
                ly + 16.0
            )?;
        }
        for run in runs(&lane.samples, run_end) {
            let x0 = scale.x(run.from);
            let w = (scale.x(run.until) - x0).max(0.6);
            let term = if run.term_lo == run.term_hi {
                format!("term {}", run.term_lo)
            } else {
                format!("terms {}–{}", run.term_lo, run.term_hi)
            };
            let commit = if run.commit_lo == run.commit_hi {
                format!("commit {}", run.commit_lo)
            } else {
                format!("commit {} → {}", run.commit_lo, run.commit_hi)
            };
            let tip = format!(
                "n{}: {}, {term}\n{} – {} s, {commit}",
                lane.node,
                role_name(run.role),
                secs(run.from),
                secs(run.until)
            );
            write!(
                b,
                r##"<rect x="{x0:.1}" y="{ly:.1}" width="{w:.1}" height="{LANE_H:.1}" fill="{}"><title>{}</title></rect>"##,
                role_colour(run.role),
                escape(&tip)
            )?;
            if run.role == Role::Leader {
                if run.after_leader {
                    write!(
                        b,
                        r##"<line x1="{x0:.1}" y1="{ly:.1}" x2="{x0:.1}" y2="{:.1}" stroke="#fff" stroke-width="1.5"/>"##,
                        ly + LANE_H
                    )?;
                }
                let label = format!("T{}", run.term_lo);
                if text_w(&label, FONT) + 4.0 <= w {
                    write!(
                        b,
                        r##"<text x="{:.1}" y="{:.1}" class="term">{}<title>{}</title></text>"##,
                        x0 + w / 2.0,
                        ly + 16.0,
                        escape(&label),
                        escape(&tip)
                    )?;
                }
            }
        }
        // Faults touching this node, as a strip under its lane.
        for f in r.faults.iter().filter(|f| f.nodes.contains(&lane.node)) {
            let (from, until) = fault_span(f, run_end);
            let x0 = scale.x(from);
            let w = (scale.x(until) - x0).max(2.0);
            write!(
                b,
                r##"<rect x="{x0:.1}" y="{:.1}" width="{w:.1}" height="{STRIP_H:.1}" fill="{}" opacity="0.85"><title>{}</title></rect>"##,
                ly + LANE_H + 2.0,
                kind_colour(&f.kind),
                escape(&fault_tip(f))
            )?;
        }
    }

    // Fault lanes.
    write!(
        b,
        r##"<text x="{:.1}" y="{:.1}" class="lane">faults</text>"##,
        LEFT - 10.0,
        faults_top + 13.0
    )?;
    if r.faults.is_empty() {
        write!(
            b,
            r##"<text x="{:.1}" y="{:.1}" class="lbl muted">no faults</text>"##,
            LEFT + 6.0,
            faults_top + 13.0
        )?;
    }
    for (f, row) in r.faults.iter().zip(&row_of) {
        let fy = faults_top + FAULT_STEP * count_f(*row);
        let (from, until) = fault_span(f, run_end);
        let x0 = scale.x(from);
        let w = (scale.x(until) - x0).max(3.0);
        let colour = kind_colour(&f.kind);
        let tip = escape(&fault_tip(f));
        write!(b, r##"<g><title>{tip}</title>"##)?;
        write!(
            b,
            r##"<rect x="{x0:.1}" y="{fy:.1}" width="{w:.1}" height="{FAULT_H:.1}" rx="2" fill="{colour}"/>"##
        )?;
        if f.until_ms.is_none() {
            let xe = x0 + w;
            write!(
                b,
                r##"<rect x="{x0:.1}" y="{fy:.1}" width="{w:.1}" height="{FAULT_H:.1}" fill="url(#{ID}-hatch)"/><polygon points="{xe:.1},{fy:.1} {:.1},{:.1} {xe:.1},{:.1}" fill="{colour}"/>"##,
                xe + 9.0,
                fy + FAULT_H / 2.0,
                fy + FAULT_H
            )?;
        }
        if let Some(text) = fit(&f.label, w, FONT) {
            write!(
                b,
                r##"<text x="{:.1}" y="{:.1}" class="flbl">{}</text>"##,
                x0 + 3.0,
                fy + 13.0,
                escape(&text)
            )?;
        }
        b.push_str("</g>");
    }

    // Commit chart.
    let max_commit = r
        .samples
        .iter()
        .map(|s| s.committed)
        .max()
        .unwrap_or(0)
        .max(1);
    let cy = |v: u64| chart_bottom - CHART_H * (ms_f(v) / ms_f(max_commit));
    write!(
        b,
        r##"<text x="{:.1}" y="{:.1}" class="lane">commit index</text>"##,
        LEFT - 10.0,
        node_legend_y + 10.0
    )?;
    write!(
        b,
        r##"<rect x="{LEFT:.1}" y="{chart_top:.1}" width="{PLOT_W:.1}" height="{CHART_H:.1}" fill="none" stroke="#999" stroke-width="0.8"/>"##
    )?;
    for v in [0, max_commit / 2, max_commit] {
        let yv = cy(v);
        write!(
            b,
            r##"<line x1="{LEFT:.1}" y1="{yv:.1}" x2="{:.1}" y2="{yv:.1}" class="grid"/>"##,
            LEFT + PLOT_W
        )?;
        write!(
            b,
            r##"<text x="{:.1}" y="{:.1}" class="ytick">{}<title>{v}</title></text>"##,
            LEFT - 4.0,
            yv + 4.0,
            compact(v)
        )?;
    }
    b.push_str(&legend_body);
    for (i, lane) in lanes.iter().enumerate() {
        let colour = node_colour(i);
        for segment in lane.samples.split(|s| s.role == Role::Down) {
            let points = commit_points(segment);
            match points.as_slice() {
                [] => {}
                [only] => write!(
                    b,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="2" fill="{colour}"><title>n{}: commit {} at {} s</title></circle>"##,
                    scale.x(only.at_ms),
                    cy(only.committed),
                    lane.node,
                    only.committed,
                    secs(only.at_ms)
                )?,
                [first, .., last] => {
                    write!(
                        b,
                        r##"<polyline fill="none" stroke="{colour}" stroke-width="1.6" stroke-linejoin="round" points=""##
                    )?;
                    for p in &points {
                        write!(b, "{:.1},{:.1} ", scale.x(p.at_ms), cy(p.committed))?;
                    }
                    write!(
                        b,
                        r##""><title>n{}: commit {} → {} over {} – {} s</title></polyline>"##,
                        lane.node,
                        first.committed,
                        last.committed,
                        secs(first.at_ms),
                        secs(last.at_ms)
                    )?;
                }
            }
        }
    }

    // The heal line, over everything.
    if heal > 0 && heal < t_end {
        write!(
            b,
            r##"<line x1="{x_heal:.1}" y1="{band_top:.1}" x2="{x_heal:.1}" y2="{chart_bottom:.1}" stroke="#333" stroke-width="1.2" stroke-dasharray="5,3"><title>heal at {} s</title></line>"##,
            secs(r.heal_ms)
        )?;
    }

    write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0}" height="{height:.0}" viewBox="0 0 {WIDTH:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="{FONT:.0}">"##
    )?;
    write!(
        out,
        r##"<style>.lbl{{fill:#222}}.muted{{fill:#888;font-style:italic}}.lane{{fill:#222;font-weight:bold;text-anchor:end}}.tick{{fill:#555;text-anchor:middle}}.ytick{{fill:#555;text-anchor:end}}.grid{{stroke:#000;stroke-opacity:0.12;stroke-width:0.8}}.lanebg{{fill:#fff;fill-opacity:0.6;stroke:#bbb;stroke-width:0.5}}.term{{fill:#fff;font-weight:bold;text-anchor:middle}}.flbl{{fill:#fff}}.phase{{font-weight:bold}}</style>"##
    )?;
    write!(
        out,
        r##"<defs><pattern id="{ID}-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="2.5" height="6" fill="#fff" fill-opacity="0.45"/></pattern></defs>"##
    )?;
    out.push_str(&body);
    out.push_str("</svg>");
    Ok(())
}

/// `v` in at most about six characters: exact below 100 000, else with an SI suffix
/// (`1.2M`, `18.4E`).
fn compact(v: u64) -> String {
    if v < 100_000 {
        return v.to_string();
    }
    let mut unit = 1_000_u64;
    for suffix in ["k", "M", "G", "T", "P", "E"] {
        if v / unit < 1_000 || suffix == "E" {
            let whole = v / unit;
            let tenth = (v % unit) / (unit / 10);
            return format!("{whole}.{tenth}{suffix}");
        }
        unit = unit.saturating_mul(1_000);
    }
    v.to_string()
}

/// `n` as a float, for layout.
fn count_f(n: usize) -> f64 {
    u32::try_from(n).map_or(f64::from(u32::MAX), f64::from)
}

/// The points of a commit line: the first and last sample of every run of equal commit index
/// (enough to draw the same line with far fewer points).
fn commit_points<'a>(samples: &[&'a Sample]) -> Vec<&'a Sample> {
    let mut out = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|j| samples.get(j));
        let next = samples.get(i + 1);
        let same_as_prev = prev.is_some_and(|p| p.committed == s.committed);
        let same_as_next = next.is_some_and(|n| n.committed == s.committed);
        if !(same_as_prev && same_as_next) {
            out.push(*s);
        }
    }
    out
}

/// Renders the picture of a run alone: one `<svg>` element (legend, phases, node lanes, faults,
/// commit chart), self-contained, `1200` px wide.
pub fn render_svg(record: &RunRecord) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = write_svg(&mut out, record);
    out
}

/// Renders the timeline of a run as one self-contained HTML page: title with the verdict and
/// the replay command, the picture of [`render_svg`], and tables of the verdicts, the clocks
/// and the faults. It needs nothing but a browser (no scripts, no external resources).
pub fn render_html(record: &RunRecord) -> String {
    let mut out = String::with_capacity(128 * 1024);
    // Writing into a String cannot fail.
    let _ = write_html(&mut out, record);
    out
}

/// The page's CSS.
const CSS: &str = "body{font-family:Helvetica,Arial,sans-serif;margin:16px 24px;color:#222}\
h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin:22px 0 6px}\
.pass{color:#fff;background:#2e7d32;padding:1px 8px;border-radius:3px}\
.fail{color:#fff;background:#c62828;padding:1px 8px;border-radius:3px}\
.none{color:#fff;background:#757575;padding:1px 8px;border-radius:3px}\
.meta{color:#555;margin:4px 0}code{background:#f3f3f3;padding:2px 6px;border-radius:3px}\
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.num{text-align:right;font-family:monospace}\
td.detail{white-space:pre-wrap;font-family:monospace;max-width:900px}\
.fig{overflow-x:auto;margin-top:10px}";

/// Writes the HTML page of `r`.
fn write_html(out: &mut String, r: &RunRecord) -> fmt::Result {
    let scenario = escape(&r.scenario);
    let (badge_class, badge) = if r.verdicts.is_empty() {
        ("none", "NO VERDICTS")
    } else if r.verdicts.iter().all(|(_, passed, _)| *passed) {
        ("pass", "PASS")
    } else {
        ("fail", "FAIL")
    };
    let seed = r.seed;
    write!(
        out,
        r##"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{scenario} · seed {seed} · {badge}</title><style>{CSS}</style></head><body>"##
    )?;
    write!(
        out,
        r##"<h1>{scenario} · seed {seed} <span class="{badge_class}">{badge}</span></h1>"##
    )?;
    let max_term = r.samples.iter().map(|s| s.term).max().unwrap_or(0);
    let max_commit = r.samples.iter().map(|s| s.committed).max().unwrap_or(0);
    write!(
        out,
        r##"<p class="meta">{} nodes · faults healed at {} s · run ended at {} s · {} samples · {} faults · highest term {max_term} · highest commit index {max_commit}</p>"##,
        r.nodes,
        secs(r.heal_ms),
        secs(r.end_ms),
        r.samples.len(),
        r.faults.len()
    )?;
    write!(
        out,
        r##"<p class="meta">Replay: <code>cargo xtask sim --seed {seed} --scenario {scenario}</code></p>"##
    )?;
    out.push_str(r##"<div class="fig">"##);
    write_svg(out, r)?;
    out.push_str("</div>");

    out.push_str("<h2>Verdicts</h2>");
    if r.verdicts.is_empty() {
        out.push_str(r##"<p class="meta">No checker gave a verdict.</p>"##);
    } else {
        out.push_str("<table><tr><th>checker</th><th>verdict</th><th>detail</th></tr>");
        for (name, passed, detail) in &r.verdicts {
            let (class, word) = if *passed {
                ("pass", "PASS")
            } else {
                ("fail", "FAIL")
            };
            write!(
                out,
                r##"<tr><td>{}</td><td><span class="{class}">{word}</span></td><td class="detail">{}</td></tr>"##,
                escape(name),
                escape(detail)
            )?;
        }
        out.push_str("</table>");
    }

    out.push_str("<h2>Clocks</h2>");
    if r.clocks.is_empty() {
        out.push_str(r##"<p class="meta">No clock skew recorded.</p>"##);
    } else {
        out.push_str("<table><tr><th>node</th><th>offset (ms)</th><th>drift (ppm)</th></tr>");
        for c in &r.clocks {
            write!(
                out,
                r##"<tr><td>n{}</td><td class="num">{:+}</td><td class="num">{:+}</td></tr>"##,
                c.node, c.offset_ms, c.drift_ppm
            )?;
        }
        out.push_str("</table>");
    }

    out.push_str("<h2>Faults</h2>");
    if r.faults.is_empty() {
        out.push_str(r##"<p class="meta">No faults.</p>"##);
    } else {
        out.push_str("<table><tr><th>from (s)</th><th>until (s)</th><th>kind</th><th>label</th><th>nodes</th></tr>");
        let mut faults: Vec<&FaultSpan> = r.faults.iter().collect();
        faults.sort_by_key(|f| f.from_ms);
        for f in faults {
            let until = f
                .until_ms
                .map_or_else(|| "never (permanent)".to_owned(), secs);
            let nodes: Vec<String> = f.nodes.iter().map(|n| format!("n{n}")).collect();
            write!(
                out,
                r##"<tr><td class="num">{}</td><td class="num">{}</td><td><span style="color:{}">■</span> {}</td><td>{}</td><td>{}</td></tr>"##,
                secs(f.from_ms),
                escape(&until),
                kind_colour(&f.kind),
                escape(&f.kind),
                escape(&f.label),
                escape(&nodes.join(", "))
            )?;
        }
        out.push_str("</table>");
    }
    out.push_str("</body></html>\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::ClockSkew;

    /// Three nodes over 10 s: n1 leads in term 2, then is crashed at 4 s and n2 takes over in
    /// term 3; heal at 6 s; a permanent clog on n3.
    fn record() -> RunRecord {
        let mut samples = Vec::new();
        for step in 0..=100_u64 {
            let at_ms = step * 100;
            for node in 1..=3_u64 {
                let (role, term) = match (node, at_ms) {
                    (_, 0..=300) => (Role::Follower, 1),
                    (1, 400..=3_999) => (Role::Leader, 2),
                    (1, 4_000..=5_999) => (Role::Down, 0),
                    (2, 4_000..=4_499) => (Role::Candidate, 3),
                    (2, 4_500..) => (Role::Leader, 3),
                    (_, t) if t >= 4_500 => (Role::Follower, 3),
                    _ => (Role::Follower, 2),
                };
                let committed = if role == Role::Down { 0 } else { at_ms / 50 };
                samples.push(Sample {
                    at_ms,
                    node,
                    role,
                    term,
                    committed,
                    applied: committed,
                });
            }
        }
        RunRecord {
            seed: 42,
            scenario: "crash-leader".to_owned(),
            nodes: 3,
            heal_ms: 6_000,
            end_ms: 10_000,
            samples,
            faults: vec![
                FaultSpan {
                    from_ms: 4_000,
                    until_ms: Some(6_000),
                    label: "crash n1".to_owned(),
                    nodes: vec![1],
                    kind: "crash".to_owned(),
                },
                FaultSpan {
                    from_ms: 2_000,
                    until_ms: None,
                    label: "clog n3->n1".to_owned(),
                    nodes: vec![3],
                    kind: "link".to_owned(),
                },
            ],
            clocks: vec![ClockSkew {
                node: 2,
                offset_ms: -15,
                drift_ppm: 200,
            }],
            verdicts: vec![
                ("single-master".to_owned(), true, "ok".to_owned()),
                (
                    "linearizability".to_owned(),
                    false,
                    "op 3 read x=<1> & \"2\"".to_owned(),
                ),
            ],
            unsynced_writes: Default::default(),
        }
    }

    #[test]
    fn escape_escapes_markup() {
        assert_eq!(
            escape(r##"<a href="x">'&'</a>"##),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain text\n"), "plain text\n");
        assert_eq!(escape("nul\u{0}"), "nul\u{FFFD}");
    }

    #[test]
    fn renders_lanes_legend_leader_terms_faults_and_verdicts() {
        let html = render_html(&record());
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.ends_with("</body></html>\n"));
        for lane in ["n1</text>", "n2</text>", "n3</text>", "faults</text>"] {
            assert!(html.contains(lane), "missing lane {lane}");
        }
        for legend in [
            "leader (T = term)",
            ">candidate<",
            ">follower<",
            ">down<",
            "fault: crash",
            "never healed",
        ] {
            assert!(html.contains(legend), "missing legend {legend}");
        }
        assert!(html.contains(">T2<"), "leader bar of term 2");
        assert!(html.contains(">T3<"), "leader bar of term 3");
        assert!(
            html.contains("n1: leader, term 2"),
            "tooltip on the leader bar"
        );
        assert!(html.contains(">crash n1<"));
        assert!(html.contains("clog n3-&gt;n1"));
        assert!(html.contains("never healed"));
        assert!(html.contains("single-master"));
        assert!(html.contains(">FAIL<"));
        assert!(html.contains("op 3 read x=&lt;1&gt; &amp; &quot;2&quot;"));
        assert!(html.contains("cargo xtask sim --seed 42 --scenario crash-leader"));
        assert!(html.contains("<polyline"));
        assert!(html.contains("+200"));
        assert!(!html.contains("<script"));
    }

    #[test]
    fn scenario_name_is_escaped() {
        let mut r = record();
        r.scenario = "<script>alert(1)</script>".to_owned();
        r.faults[0].label = "<b>".to_owned();
        let html = render_html(&r);
        assert!(!html.contains("<script"));
        assert!(!html.contains("<b>"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn merges_equal_roles_into_runs() {
        let r = record();
        let lanes = lanes(&r);
        let n1 = runs(&lanes[0].samples, r.end_ms);
        let roles: Vec<Role> = n1.iter().map(|run| run.role).collect();
        assert_eq!(
            roles,
            [Role::Follower, Role::Leader, Role::Down, Role::Follower]
        );
        assert_eq!((n1[1].from, n1[1].until, n1[1].term_lo), (400, 4_000, 2));
        assert_eq!(n1[3].until, 10_000);
    }

    #[test]
    fn leader_splits_on_term_change() {
        let s = |at_ms, term| Sample {
            at_ms,
            node: 1,
            role: Role::Leader,
            term,
            committed: 0,
            applied: 0,
        };
        let samples = [s(0, 1), s(100, 1), s(200, 2)];
        let refs: Vec<&Sample> = samples.iter().collect();
        let runs = runs(&refs, 300);
        assert_eq!(runs.len(), 2);
        assert!(runs[1].after_leader);
        assert_eq!((runs[1].from, runs[1].until), (200, 300));
    }

    #[test]
    fn empty_and_degenerate_records_do_not_panic() {
        let empty = render_html(&RunRecord::default());
        assert!(empty.contains("NO VERDICTS"));
        assert!(empty.contains("no faults"));
        assert!(render_svg(&RunRecord::default()).starts_with("<svg"));

        let mut r = record();
        r.nodes = 1;
        r.end_ms = 0;
        r.heal_ms = u64::MAX;
        r.samples.truncate(1);
        r.samples[0].committed = u64::MAX;
        r.samples[0].term = u64::MAX;
        r.faults.push(FaultSpan {
            from_ms: 5_000,
            until_ms: Some(1_000),
            label: "backwards".to_owned(),
            nodes: vec![1, 99],
            kind: "mystery".to_owned(),
        });
        let html = render_html(&r);
        assert!(html.contains("clamped"));
        assert!(!html.contains("NaN"));
        assert!(!html.contains("inf\""));

        let mut huge = RunRecord {
            nodes: u64::MAX,
            end_ms: u64::MAX,
            ..RunRecord::default()
        };
        huge.samples.push(Sample {
            at_ms: u64::MAX,
            node: 7,
            role: Role::Leader,
            term: 1,
            committed: 1,
            applied: 1,
        });
        let html = render_html(&huge);
        assert!(html.contains("n64</text>"));
        assert!(html.contains("n7</text>"));
    }

    #[test]
    fn ticks_are_round_and_few() {
        let ticks = Scale { t_end: 60_000 }.ticks();
        assert_eq!(ticks.first().map(|t| t.1.as_str()), Some("0s"));
        assert!(ticks.len() <= 13);
        assert!(ticks.iter().any(|t| t.1 == "60s"));
        assert!(Scale { t_end: 1 }.ticks().len() == 1);
        assert!(Scale { t_end: u64::MAX }.ticks().len() <= 13);
    }

    #[test]
    fn compact_numbers() {
        assert_eq!(compact(0), "0");
        assert_eq!(compact(99_999), "99999");
        assert_eq!(compact(123_456), "123.4k");
        assert_eq!(compact(2_500_000), "2.5M");
        assert_eq!(compact(u64::MAX), "18.4E");
    }

    #[test]
    fn long_labels_are_cut_to_fit() {
        assert_eq!(fit("crash n1", 200.0, FONT).as_deref(), Some("crash n1"));
        let cut = fit("a very long fault label indeed", 60.0, FONT);
        assert!(cut.as_deref().is_some_and(|s| s.ends_with('…')));
        assert_eq!(fit("anything", 5.0, FONT), None);
    }
}
