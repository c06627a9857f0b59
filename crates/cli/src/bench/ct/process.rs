//! This process as the kernel counts it: resident memory, CPU time, and the machine's load.
//! Linux only (`/proc`); elsewhere the readings are `None`.

use std::time::Duration;

/// The resident set size of this process in bytes (`VmRSS` in `/proc/self/status`); `None`
/// where there is no such file (not Linux).
pub(in crate::bench) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_rss_bytes(&status)
}

fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = fields.next()?.parse().ok()?;
    // The kernel always reports it in kB (KiB).
    (fields.next() == Some("kB")).then_some(kib * 1024)
}

/// CPU time this process has used, user and system, all threads (`utime` + `stime` in
/// `/proc/self/stat`).
pub(in crate::bench) fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_time_of(&stat)
}

/// Linux reports times in `/proc` in clock ticks of `USER_HZ`, which the kernel's ABI fixes at
/// 100 per second.
const TICKS_PER_SECOND: u64 = 100;

fn cpu_time_of(stat: &str) -> Option<Duration> {
    // The command name (field 2) is in parentheses and may hold spaces; fields after it are
    // plain. utime and stime are fields 14 and 15, the 12th and 13th after the name.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis(
        (user + system) * 1000 / TICKS_PER_SECOND,
    ))
}

/// The 1-minute load average of the machine (`/proc/loadavg`).
pub(super) fn load_average() -> Option<f64> {
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    loadavg.split_whitespace().next()?.parse().ok()
}

/// MiB per million entries, from `bytes` measured over `entries` entries.
pub(super) fn mib_per_million(bytes: i64, entries: u64) -> f64 {
    bytes as f64 / entries as f64 * 1_000_000.0 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tcertus\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n";
        assert_eq!(vm_rss_bytes(status), Some(12_345 * 1024));
        assert_eq!(vm_rss_bytes("Name:\tx\n"), None);
        assert_eq!(vm_rss_bytes("VmRSS:\t12 MB\n"), None, "an unknown unit");
    }

    #[test]
    fn this_process_has_a_resident_set_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes().is_some_and(|bytes| bytes > 0));
        }
    }

    #[test]
    fn cpu_time_is_utime_plus_stime() {
        // pid (comm with spaces) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime ...
        let stat = "42 (tokio (worker) 1) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0";
        assert_eq!(cpu_time_of(stat), Some(Duration::from_secs(3)));
        assert_eq!(cpu_time_of("42 (x) S 1"), None);
        if cfg!(target_os = "linux") {
            assert!(cpu_time().is_some());
            assert!(load_average().is_some_and(|load| load >= 0.0));
        }
    }

    #[test]
    fn per_million_scales_the_measurement() {
        assert!((mib_per_million(1024 * 1024, 1_000_000) - 1.0).abs() < 1e-9);
        assert!((mib_per_million(1024 * 1024, 100_000) - 10.0).abs() < 1e-9);
    }
}
