//! This process's resident memory, as the kernel counts it.

/// The resident set size of this process in bytes (`VmRSS` in `/proc/self/status`); `None`
/// where there is no such file (not Linux).
pub(super) fn resident_bytes() -> Option<u64> {
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
    fn per_million_scales_the_measurement() {
        assert!((mib_per_million(1024 * 1024, 1_000_000) - 1.0).abs() < 1e-9);
        assert!((mib_per_million(1024 * 1024, 100_000) - 10.0).abs() < 1e-9);
    }
}
