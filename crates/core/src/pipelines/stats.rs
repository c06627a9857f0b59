//! Pipeline statistics at three resolutions (the seed's `stats1H`, `stats2H`, `stats3H`).
//!
//! Each resolution keeps counters per (bucket, pipeline): how many transactions were enqueued,
//! requeued, dequeued, retried by the reaper, woken and finished in each terminal status. A bucket
//! starts at a multiple of its width in machine time, so every replica files an event in the
//! same bucket. Old buckets are pruned when the clock leaves the retention (on every update and
//! tick), and each resolution holds at most [`PIPELINE_STATS_ROWS_MAX`] rows, oldest dropped
//! first, so pipelines that come and go cannot grow the state without bound.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{PipelineName, TxStatus};
use crate::limits::{
    LIST_PAGE_MAX, PIPELINE_STATS_DAYS_KEPT, PIPELINE_STATS_HOURS_KEPT,
    PIPELINE_STATS_MINUTES_KEPT, PIPELINE_STATS_ROWS_MAX,
};

/// How wide a statistics bucket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Resolution {
    /// One-minute buckets, kept for two hours.
    Minute,
    /// One-hour buckets, kept for two days.
    Hour,
    /// One-day buckets (UTC days), kept for five weeks.
    Day,
}

impl Resolution {
    /// Every resolution, finest first.
    pub const ALL: [Resolution; 3] = [Resolution::Minute, Resolution::Hour, Resolution::Day];

    /// The width of one bucket.
    pub fn bucket_ms(self) -> u64 {
        match self {
            Resolution::Minute => 60_000,
            Resolution::Hour => 3_600_000,
            Resolution::Day => 86_400_000,
        }
    }

    /// How many buckets are kept, the current one included.
    pub fn buckets_kept(self) -> u64 {
        match self {
            Resolution::Minute => PIPELINE_STATS_MINUTES_KEPT,
            Resolution::Hour => PIPELINE_STATS_HOURS_KEPT,
            Resolution::Day => PIPELINE_STATS_DAYS_KEPT,
        }
    }

    /// The start of the bucket holding machine time `at_ms`.
    pub fn bucket_of(self, at_ms: u64) -> u64 {
        at_ms - at_ms % self.bucket_ms()
    }

    /// The start of the oldest bucket still kept at `now_ms`.
    fn oldest_kept(self, now_ms: u64) -> u64 {
        self.bucket_of(now_ms)
            .saturating_sub((self.buckets_kept() - 1) * self.bucket_ms())
    }

    fn slot(self) -> usize {
        match self {
            Resolution::Minute => 0,
            Resolution::Hour => 1,
            Resolution::Day => 2,
        }
    }
}

/// What happened to a pipeline's transactions within one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsCounts {
    /// New transactions enqueued.
    pub enqueued: u64,
    /// Running transactions a worker handed on to a queue.
    pub requeued: u64,
    /// Transactions handed to workers.
    pub dequeued: u64,
    /// Running transactions the reaper put back on their queue.
    pub retried: u64,
    /// Sleeping transactions woken (by time or by their switch).
    pub woken: u64,
    /// Transactions finished with status success.
    pub success: u64,
    /// Transactions finished with status failed.
    pub failed: u64,
    /// Transactions finished with status aborted.
    pub aborted: u64,
    /// Transactions finished with status timeout.
    pub timeout: u64,
    /// Transactions finished with status internal-error.
    pub internal_error: u64,
}

impl StatsCounts {
    /// Transactions finished, in any terminal status.
    pub fn finished(&self) -> u64 {
        self.success + self.failed + self.aborted + self.timeout + self.internal_error
    }

    fn add(&mut self, event: Counted) {
        let counter = match event {
            Counted::Enqueued => &mut self.enqueued,
            Counted::Requeued => &mut self.requeued,
            Counted::Dequeued => &mut self.dequeued,
            Counted::Retried => &mut self.retried,
            Counted::Woken => &mut self.woken,
            Counted::Finished(TxStatus::Success) => &mut self.success,
            Counted::Finished(TxStatus::Failed) => &mut self.failed,
            Counted::Finished(TxStatus::Aborted) => &mut self.aborted,
            Counted::Finished(TxStatus::Timeout) => &mut self.timeout,
            Counted::Finished(TxStatus::InternalError) => &mut self.internal_error,
            Counted::Finished(status) => panic!("{status} is not a terminal status"),
        };
        *counter = counter.saturating_add(1);
    }
}

/// One row of statistics: a bucket of one pipeline (or of transactions routed to a node group
/// without a pipeline, `pipeline: None`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsRow {
    /// The bucket's width.
    pub resolution: Resolution,
    /// Machine time the bucket starts.
    pub bucket_start_ms: u64,
    /// The pipeline counted.
    pub pipeline: Option<PipelineName>,
    /// The counts.
    pub counts: StatsCounts,
}

/// An event the statistics count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    Enqueued,
    Requeued,
    Dequeued,
    Retried,
    Woken,
    Finished(TxStatus),
}

type Key = (u64, Option<PipelineName>);

/// The rows of every resolution, finest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    rows: [BTreeMap<Key, StatsCounts>; 3],
}

/// What a snapshot stores of [`Stats`]: each resolution's rows in key order. A map and a
/// sequence of pairs encode alike, so [`StatsRecordsRef`] writes what this reads.
pub(crate) type StatsRecords = [Vec<(Key, StatsCounts)>; 3];
pub(crate) type StatsRecordsRef<'a> = &'a [BTreeMap<Key, StatsCounts>; 3];

impl Stats {
    /// Counts `event` of `pipeline` at `now_ms` in every resolution.
    pub(crate) fn record(&mut self, pipeline: Option<&PipelineName>, event: Counted, now_ms: u64) {
        self.prune(now_ms, usize::MAX);
        for resolution in Resolution::ALL {
            let rows = &mut self.rows[resolution.slot()];
            let key = (resolution.bucket_of(now_ms), pipeline.cloned());
            if !rows.contains_key(&key) && rows.len() >= PIPELINE_STATS_ROWS_MAX {
                rows.pop_first();
            }
            rows.entry(key).or_default().add(event);
        }
    }

    /// Drops up to `max` rows per resolution that left the retention; returns how many went.
    pub(crate) fn prune(&mut self, now_ms: u64, max: usize) -> usize {
        let mut pruned = 0;
        for resolution in Resolution::ALL {
            let oldest_kept = resolution.oldest_kept(now_ms);
            let rows = &mut self.rows[resolution.slot()];
            let mut dropped = 0;
            while dropped < max
                && rows
                    .first_key_value()
                    .is_some_and(|(k, _)| k.0 < oldest_kept)
            {
                rows.pop_first();
                dropped += 1;
            }
            pruned += dropped;
        }
        pruned
    }

    /// Whether some resolution holds a row past its retention at `now_ms`.
    pub(crate) fn has_expired(&self, now_ms: u64) -> bool {
        Resolution::ALL.into_iter().any(|resolution| {
            self.rows[resolution.slot()]
                .first_key_value()
                .is_some_and(|(k, _)| k.0 < resolution.oldest_kept(now_ms))
        })
    }

    /// Up to `limit` rows (at most [`LIST_PAGE_MAX`]) of `resolution` from bucket `from_ms` on,
    /// oldest bucket first, pipelines in name order within a bucket.
    pub(crate) fn rows(&self, resolution: Resolution, from_ms: u64, limit: usize) -> Vec<StatsRow> {
        self.rows[resolution.slot()]
            .range((from_ms, None)..)
            .take(limit.min(LIST_PAGE_MAX))
            .map(|((bucket_start_ms, pipeline), counts)| StatsRow {
                resolution,
                bucket_start_ms: *bucket_start_ms,
                pipeline: pipeline.clone(),
                counts: *counts,
            })
            .collect()
    }

    pub(crate) fn records(&self) -> StatsRecordsRef<'_> {
        &self.rows
    }

    /// Rebuilds the rows; refuses keys out of order (or repeated), which no encoder writes.
    pub(crate) fn from_records(records: StatsRecords) -> Result<Stats, String> {
        let mut stats = Stats::default();
        for (resolution, rows) in Resolution::ALL.into_iter().zip(records) {
            let map = &mut stats.rows[resolution.slot()];
            for (key, counts) in rows {
                if map.last_key_value().is_some_and(|(last, _)| *last >= key) {
                    return Err(format!(
                        "{resolution:?} statistics rows are out of order at bucket {}",
                        key.0
                    ));
                }
                map.insert(key, counts);
            }
        }
        Ok(stats)
    }

    /// Rows are bucket-aligned, not after the clock, and within their bound.
    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        for resolution in Resolution::ALL {
            let rows = &self.rows[resolution.slot()];
            if rows.len() > PIPELINE_STATS_ROWS_MAX {
                return Err(format!(
                    "{} {resolution:?} statistics rows exceed {PIPELINE_STATS_ROWS_MAX}",
                    rows.len()
                ));
            }
            for (bucket_start_ms, _) in rows.keys() {
                if resolution.bucket_of(*bucket_start_ms) != *bucket_start_ms
                    || *bucket_start_ms > clock_ms
                {
                    return Err(format!(
                        "{resolution:?} statistics bucket {bucket_start_ms} is misaligned or \
                         after the clock"
                    ));
                }
            }
        }
        Ok(())
    }
}
