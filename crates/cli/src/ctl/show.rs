//! How `certus ctl` shows values, whatever the command: tables, durations and times for people,
//! and absent values (`""`, `0`) as `-` in tables and null in JSON.

use std::time::Duration;

use comfy_table::Table;
use serde_json::{Value, json};

/// An empty table with this header, in the style of every `ctl` table.
pub(super) fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(header.to_vec());
    table
}

/// A table with this header and a row per item.
pub(super) fn table_of<T>(
    header: &[&str],
    items: impl IntoIterator<Item = T>,
    row: impl FnMut(T) -> Vec<String>,
) -> Table {
    let mut rows = table(header);
    rows.add_rows(items.into_iter().map(row));
    rows
}

/// This machine's clock in milliseconds since the Unix epoch (the cluster's clock is the
/// leader's; relative times shown are approximate).
pub(super) fn now_ms() -> Option<u64> {
    Some(certus_node::Clock::system().now_ms())
}

/// A duration in milliseconds for people: `850 ms`, `12.5 s`, `3 min 20 s`, `2 h 5 min`.
pub(super) fn human_ms(ms: u64) -> String {
    let duration = Duration::from_millis(ms);
    let seconds = duration.as_secs();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if seconds < 60 {
        format!("{:.1} s", duration.as_secs_f64())
    } else if seconds < 3_600 {
        format!("{} min {} s", seconds / 60, seconds % 60)
    } else if seconds < 86_400 {
        format!("{} h {} min", seconds / 3_600, seconds % 3_600 / 60)
    } else {
        format!("{} d {} h", seconds / 86_400, seconds % 86_400 / 3_600)
    }
}

/// A time relative to `now` (this machine's clock): `12.5 s ago`, `in 3.0 s`.
pub(super) fn relative(ms: u64, now: Option<u64>) -> String {
    match now {
        None => format!("at {ms} ms"),
        Some(now) if now >= ms => format!("{} ago", human_ms(now - ms)),
        Some(now) => format!("in {}", human_ms(ms - now)),
    }
}

pub(super) fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// `""` (none) as `-`.
pub(super) fn or_none(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}

/// `0` (none) as `-`.
pub(super) fn or_dash(value: u64) -> String {
    if value == 0 {
        "-".to_owned()
    } else {
        value.to_string()
    }
}

/// `""` as JSON null.
pub(super) fn text_or_null(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_owned())
    }
}

/// `0` (never) as JSON null.
pub(super) fn ms_or_null(ms: u64) -> Value {
    if ms == 0 { Value::Null } else { json!(ms) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_ms(850), "850 ms");
        assert_eq!(human_ms(12_500), "12.5 s");
        assert_eq!(human_ms(200_000), "3 min 20 s");
        assert_eq!(human_ms(7_500_000), "2 h 5 min");
        assert_eq!(human_ms(90_000_000), "1 d 1 h");
    }

    #[test]
    fn times_are_shown_relative_to_now() {
        assert_eq!(relative(7_500, Some(10_000)), "2.5 s ago");
        assert_eq!(relative(12_000, Some(10_000)), "in 2.0 s");
        assert_eq!(relative(12_000, None), "at 12000 ms");
    }
}
