//! `certus bench ct-store`: one node's CT store at scale, without Raft or the network.
//!
//! Integrates N synthetic entries of about 100 bytes (so that 10^8 fit a machine's disk) straight
//! into a [`CtDatabase`] (sled for its edge and metadata, files for its tiles, bundles and the
//! runs of its leaf-hash and entry-key indexes), in batches as a node's integration rounds make
//! them, then reports leaves/s, this process's resident memory (the store's whole footprint: the
//! right edge, the tile cache, the indexes and sled's page cache), each index's own memory, disk
//! bytes per entry, and the latency of get-proof-by-hash (leaf index lookup and audit path),
//! get-entries (one entry) and the entry-key lookup a duplicate submission older than the
//! replicated state's window makes (of a logged certificate, and of one the log does not hold,
//! as most add-chains are) at random leaves of the full tree, read from disk through the caches
//! as a node serves them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use certus_ct::merkle::{leaf_hash, verify_inclusion};
use certus_ct::{Hash, LogEntry, entry_key};
use certus_store::{CtDatabase, CtStoreConfig, Disk, LocalEntry, OsFiles, SledDisk};
use comfy_table::Table;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::ct::process;
use super::{micros, percentile};

/// Options of `certus bench ct-store`.
#[derive(Debug, clap::Args)]
pub(crate) struct CtStoreArgs {
    /// Entries to integrate.
    #[arg(long, default_value_t = 1_000_000)]
    entries: u64,
    /// Entries stored and integrated per round (a node integrates 4,096 per round).
    #[arg(long, default_value_t = 4096)]
    batch: usize,
    /// Full tiles the store keeps in memory (16 KiB each).
    #[arg(long, default_value_t = certus_store::CT_TILE_CACHE_TILES_DEFAULT)]
    cache_tiles: usize,
    /// sled's page cache, in MiB.
    #[arg(long, default_value_t = 128)]
    sled_cache_mib: u64,
    /// Random proofs and entry reads measured at the end.
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
    /// Where the store lives (a fresh temporary directory beside the system's by default;
    /// 10^8 entries take about 20 GB).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// The pseudo-certificate of synthetic entry `sequence`: 64 bytes, different for every number
/// (not DER: the store does not parse certificates).
fn certificate(sequence: u64) -> LogEntry {
    let mut certificate = Vec::with_capacity(64);
    for word in 0..8u64 {
        certificate.extend_from_slice(
            &(sequence ^ word.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_be_bytes(),
        );
    }
    LogEntry::X509 { certificate }
}

/// A synthetic entry of about 120 bytes, different for every sequence number: its `leaf_input`
/// a `MerkleTreeLeaf` (81 bytes) of [`certificate`]`(sequence)`, so the entry-key index holds it.
fn synthetic(sequence: u64) -> LocalEntry {
    let sct_timestamp_ms = 1_700_000_000_000 + sequence / 1000;
    LocalEntry {
        leaf_input: certus_ct::structures::leaf_input(
            sct_timestamp_ms,
            &certificate(sequence),
            &[],
        )
        .expect("a 64-byte certificate encodes"),
        extra_data: sequence.to_le_bytes().repeat(2),
        sct: sequence.to_be_bytes().to_vec(),
        sct_timestamp_ms,
    }
}

/// The entry key of synthetic entry `sequence` (`sequence` at or past the entry count: a
/// certificate the log does not hold).
fn key_of(sequence: u64) -> Hash {
    entry_key(&certificate(sequence))
}

fn disk_bytes(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// A small deterministic generator for the read sample (no dependency for a benchmark's dice).
struct Dice(u64);

impl Dice {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub(super) async fn run(args: CtStoreArgs) -> Result<(), String> {
    if args.entries == 0 || args.batch == 0 {
        return Err("--entries and --batch: at least 1".into());
    }
    let temporary = match &args.dir {
        Some(_) => None,
        None => {
            Some(tempfile::tempdir().map_err(|error| format!("a temporary directory: {error}"))?)
        }
    };
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| temporary.as_ref().expect("made above").path().to_owned());
    let disk = SledDisk::open_with_cache(&dir.join("store"), Some(args.sled_cache_mib << 20))
        .map_err(|error| error.to_string())?;
    let files = OsFiles::open(&dir.join("ct-log")).map_err(|error| error.to_string())?;
    let db = CtDatabase::open_with(
        Arc::new(disk) as Arc<dyn Disk>,
        Arc::new(files),
        CtStoreConfig {
            tile_cache_tiles: args.cache_tiles,
        },
    )
    .map_err(|error| error.to_string())?;
    if db.contiguous_size() != 0 {
        return Err(format!(
            "{} holds a CT store already; give an empty --dir",
            dir.display()
        ));
    }
    let rss_start = process::resident_bytes().unwrap_or(0);
    let progress = ProgressBar::new(args.entries);
    progress.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {human_pos}/{human_len} leaves, {per_sec}, eta {eta} {msg}",
        )
        .map_err(|error| error.to_string())?
        .progress_chars("=> "),
    );
    let started = Instant::now();
    let mut rss_peak = rss_start;
    let mut next = 0u64;
    while next < args.entries {
        let end = (next + args.batch as u64).min(args.entries);
        let entries: Vec<LocalEntry> = (next..end).map(synthetic).collect();
        db.store_entries(next, &entries)
            .map_err(|error| error.to_string())?;
        let size = db
            .integrate(entries.len())
            .map_err(|error| error.to_string())?;
        if size != end {
            return Err(format!("integrated up to {size}, expected {end}"));
        }
        next = end;
        progress.set_position(next);
        if next % (64 * args.batch as u64) < args.batch as u64 {
            let rss = process::resident_bytes().unwrap_or(0);
            rss_peak = rss_peak.max(rss);
            progress.set_message(format!("RSS {:.0} MiB", mib(rss)));
        }
    }
    let integrate_elapsed = started.elapsed();
    progress.finish_and_clear();
    let (size, root) = db.size_and_root().map_err(|error| error.to_string())?;

    let mut dice = Dice(0x2545_f491_4f6c_dd1d);
    let mut proof_us = Vec::with_capacity(args.reads);
    let mut entry_us = Vec::with_capacity(args.reads);
    let mut key_us = Vec::with_capacity(args.reads);
    let mut absent_key_us = Vec::with_capacity(args.reads);
    for _ in 0..args.reads {
        let index = dice.below(size);
        let hash = leaf_hash(&synthetic(index).leaf_input);
        let asked = Instant::now();
        let found = db.index_of_leaf(&hash).map_err(|error| error.to_string())?;
        let path = db
            .inclusion_proof(index, size)
            .map_err(|error| error.to_string())?;
        proof_us.push(micros(asked.elapsed()));
        if found != Some(index) {
            return Err(format!("leaf {index} is indexed at {found:?}"));
        }
        verify_inclusion(&hash, index, size, &path, &root)
            .map_err(|error| format!("the proof of leaf {index} does not verify: {error}"))?;
        let asked = Instant::now();
        let entry = db.entry(index).map_err(|error| error.to_string())?;
        entry_us.push(micros(asked.elapsed()));
        if entry.as_ref() != Some(&synthetic(index)) {
            return Err(format!("entry {index} reads back different"));
        }
        let key = key_of(index);
        let asked = Instant::now();
        let found = db
            .index_of_entry_key(&key)
            .map_err(|error| error.to_string())?;
        key_us.push(micros(asked.elapsed()));
        if found != Some(index) {
            return Err(format!("entry {index} is indexed by its key at {found:?}"));
        }
        let absent = key_of(size + index);
        let asked = Instant::now();
        let found = db
            .index_of_entry_key(&absent)
            .map_err(|error| error.to_string())?;
        absent_key_us.push(micros(asked.elapsed()));
        if found.is_some() {
            return Err(format!(
                "a certificate never logged is indexed at {found:?}"
            ));
        }
    }
    proof_us.sort_unstable();
    entry_us.sort_unstable();
    key_us.sort_unstable();
    absent_key_us.sort_unstable();
    let leaf_index_bytes = db.leaf_index_memory_bytes();
    let entry_index_bytes = db.entry_index_memory_bytes();
    let rss_end = process::resident_bytes().unwrap_or(0);
    rss_peak = rss_peak.max(rss_end);
    let disk = disk_bytes(&dir);
    let leaves_per_second = args.entries as f64 / integrate_elapsed.as_secs_f64();
    let ms = |sorted: &[u64], fraction: f64| {
        percentile(sorted, fraction).map_or(0.0, |us| us as f64 / 1000.0)
    };
    if args.json {
        println!(
            "{}",
            json!({
                "bench": "ct-store",
                "entries": args.entries,
                "batch": args.batch,
                "cache_tiles": args.cache_tiles,
                "sled_cache_mib": args.sled_cache_mib,
                "leaves_per_second": leaves_per_second,
                "integrate_seconds": integrate_elapsed.as_secs_f64(),
                "rss_start_bytes": rss_start,
                "rss_end_bytes": rss_end,
                "rss_peak_bytes": rss_peak,
                "disk_bytes": disk,
                "disk_bytes_per_entry": disk as f64 / args.entries as f64,
                "proof_by_hash_ms": { "p50": ms(&proof_us, 0.5), "p99": ms(&proof_us, 0.99), "max": ms(&proof_us, 1.0) },
                "entry_ms": { "p50": ms(&entry_us, 0.5), "p99": ms(&entry_us, 0.99) },
                "entry_key_ms": { "p50": ms(&key_us, 0.5), "p99": ms(&key_us, 0.99), "max": ms(&key_us, 1.0) },
                "absent_entry_key_ms": { "p50": ms(&absent_key_us, 0.5), "p99": ms(&absent_key_us, 0.99), "max": ms(&absent_key_us, 1.0) },
                "leaf_index_memory_bytes": leaf_index_bytes,
                "entry_index_memory_bytes": entry_index_bytes,
            })
        );
    } else {
        let mut table = Table::new();
        table.set_header(vec!["measure", "value"]);
        table.add_row(vec!["entries".into(), format!("{}", args.entries)]);
        table.add_row(vec![
            "leaves/s (store + integrate)".into(),
            format!("{leaves_per_second:.0}"),
        ]);
        table.add_row(vec![
            "RSS start / peak / end".into(),
            format!(
                "{:.1} / {:.1} / {:.1} MiB",
                mib(rss_start),
                mib(rss_peak),
                mib(rss_end)
            ),
        ]);
        table.add_row(vec![
            "disk".into(),
            format!(
                "{:.1} MiB, {:.1} bytes/entry",
                mib(disk),
                disk as f64 / args.entries as f64
            ),
        ]);
        table.add_row(vec![
            "get-proof-by-hash p50 / p99 / max".into(),
            format!(
                "{:.3} / {:.3} / {:.3} ms",
                ms(&proof_us, 0.5),
                ms(&proof_us, 0.99),
                ms(&proof_us, 1.0)
            ),
        ]);
        table.add_row(vec![
            "get-entry p50 / p99".into(),
            format!("{:.3} / {:.3} ms", ms(&entry_us, 0.5), ms(&entry_us, 0.99)),
        ]);
        for (what, sorted) in [
            ("entry-key lookup p50 / p99 / max", &key_us),
            ("entry-key lookup, absent, p50 / p99 / max", &absent_key_us),
        ] {
            table.add_row(vec![
                what.into(),
                format!(
                    "{:.3} / {:.3} / {:.3} ms",
                    ms(sorted, 0.5),
                    ms(sorted, 0.99),
                    ms(sorted, 1.0)
                ),
            ]);
        }
        table.add_row(vec![
            "leaf index / entry index memory".into(),
            format!(
                "{:.1} / {:.1} MiB",
                mib(leaf_index_bytes),
                mib(entry_index_bytes)
            ),
        ]);
        println!("{table}");
    }
    drop(db);
    drop(temporary);
    Ok(())
}
