//! The pipelines' server streams: `WatchCompletions` (notifications as they are applied, read
//! from the local applied state after the applied-index watch wakes, never by polling; with
//! positions, where it stands when it skipped notifications of other groups, and a heartbeat
//! when idle, on timers rather than polls) and `ExportArchive` (the archive in pages, each a
//! linearizable read). Each holds at most one page it has read but not sent; gRPC flow control
//! holds the rest back in the state. Both end when the node stops.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;

use crate::ordered_watch as watch;
use certus_core::PipelineReads;
use certus_core::pipelines::{ArchiveCursor, NodeGroup, NotificationKind};
use certus_proto::v1;
use futures_util::Stream;
use prost::Message as _;
use tokio::time::Instant;
use tonic::Status;

use crate::convert::pipelines::wire::{notification_to_proto, transaction_to_proto};
use crate::convert::pipelines::{Export, Watch, archive_cursor, check_cursor, resume_point};
use crate::errors::stopping;
use crate::limits::{
    PIPELINE_LIST_REPLY_BYTES_MAX, PIPELINE_STREAM_HEARTBEAT, PIPELINE_STREAM_PAGE_MAX,
    PIPELINE_STREAM_POSITION_INTERVAL_MIN,
};
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;

/// The stream `WatchCompletions` answers with.
pub(super) type NotificationStream =
    Pin<Box<dyn Stream<Item = Result<v1::PipelineNotification, Status>> + Send>>;

/// The stream `ExportArchive` answers with.
pub(super) type ArchiveStream =
    Pin<Box<dyn Stream<Item = Result<v1::ArchivedTransaction, Status>> + Send>>;

/// The completion stream `request` asks for.
pub(super) async fn completions(
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    request: Watch,
) -> Result<NotificationStream, Status> {
    let applied = AppliedWatch::new(&replica, stop);
    // Linearizable, so "from now" includes every notification of a write acknowledged
    // before the stream started; after it, this node's applied state is at least as new.
    let last_seq = replica
        .query(|state, _| Ok(state.pipelines().last_notification_seq()))
        .await?;
    let cursor = resume_point(request.after_seq, last_seq)?;
    let feed = Feed {
        replica,
        applied,
        node_group: request.node_group,
        include_progress: request.include_progress,
        cursor,
        buffer: VecDeque::new(),
        ended: false,
        positions: request.positions.then(|| Positions {
            told: None,
            last_sent_at: Instant::now(),
            last_position_at: None,
        }),
    };
    Ok(Box::pin(futures_util::stream::unfold(feed, Feed::next)))
}

/// A completion stream's state between two items: what it has read but not sent (at most one
/// page), and where it goes on reading.
struct Feed {
    replica: Arc<Replica>,
    applied: AppliedWatch,
    node_group: Option<NodeGroup>,
    include_progress: bool,
    /// The number of the last notification read (sent, or skipped as not asked for).
    cursor: u64,
    buffer: VecDeque<v1::PipelineNotification>,
    /// The stream has sent its last item.
    ended: bool,
    /// When the client asked for positions: what it was told and when.
    positions: Option<Positions>,
}

/// What a stream with positions has told its client, and when: enough to send a position when
/// the client cannot work it out from the items, and a heartbeat when idle.
struct Positions {
    /// The `seq` of the last item sent (a notification, a marker or a position).
    told: Option<u64>,
    /// When the last item was sent (or the stream started).
    last_sent_at: Instant,
    /// When the last position was sent.
    last_position_at: Option<Instant>,
}

impl Positions {
    /// Notes an item sent.
    fn sent(&mut self, seq: u64, now: Instant) {
        self.told = Some(seq);
        self.last_sent_at = now;
    }

    /// Whether to send a position at `cursor` now; if not, until when to wait for one (no
    /// deadline is ever in the past).
    fn due(&self, cursor: u64, now: Instant) -> Result<(), Instant> {
        let heartbeat_at = self.last_sent_at + PIPELINE_STREAM_HEARTBEAT;
        if now >= heartbeat_at {
            return Ok(());
        }
        if self.told == Some(cursor) {
            return Err(heartbeat_at);
        }
        // The stream read past notifications it did not send: say so, but not on every entry.
        match self.last_position_at {
            Some(at) if now < at + PIPELINE_STREAM_POSITION_INTERVAL_MIN => {
                Err((at + PIPELINE_STREAM_POSITION_INTERVAL_MIN).min(heartbeat_at))
            }
            _ => Ok(()),
        }
    }
}

impl Feed {
    async fn next(mut self) -> Option<(Result<v1::PipelineNotification, Status>, Feed)> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(item) = self.buffer.pop_front() {
                if let Some(positions) = &mut self.positions {
                    positions.sent(item.seq, Instant::now());
                }
                return Some((Ok(item), self));
            }
            self.applied.mark();
            let (cursor, items) = self.replica.reader.read(|applied| {
                stream_page(
                    applied.state.pipelines(),
                    self.cursor,
                    self.node_group.as_ref(),
                    self.include_progress,
                )
            });
            self.cursor = cursor;
            self.buffer.extend(items);
            if !self.buffer.is_empty() {
                continue;
            }
            let mut deadline = None;
            if let Some(positions) = &mut self.positions {
                let now = Instant::now();
                match positions.due(self.cursor, now) {
                    Ok(()) => {
                        positions.last_position_at = Some(now);
                        self.buffer.push_back(position(self.cursor));
                        continue;
                    }
                    Err(at) => deadline = Some(at),
                }
            }
            match self.applied.wait(deadline).await {
                Wake::Applied | Wake::Deadline => {}
                Wake::Stopping => {
                    self.ended = true;
                    return Some((Err(stopping()), self));
                }
            }
        }
    }
}

/// A `POSITION` item: the stream has read every notification up to `cursor`.
fn position(cursor: u64) -> v1::PipelineNotification {
    v1::PipelineNotification {
        seq: cursor,
        kind: v1::NotificationKind::Position.into(),
        ..v1::PipelineNotification::default()
    }
}

/// What a stream sends after `cursor`: up to [`PIPELINE_STREAM_PAGE_MAX`] notifications of
/// `node_group` (progress reports only if asked for), preceded by a `MISSED` marker when the
/// record no longer reaches back to `cursor`; and the cursor after them.
pub(super) fn stream_page(
    reads: PipelineReads<'_>,
    cursor: u64,
    node_group: Option<&NodeGroup>,
    include_progress: bool,
) -> (u64, Vec<v1::PipelineNotification>) {
    let mut items = Vec::new();
    let mut cursor = cursor;
    let mut page = reads.notifications_after(cursor, node_group, PIPELINE_STREAM_PAGE_MAX);
    if page.missed {
        // Resume just before the oldest notification kept (of any group), and say so first.
        let oldest = reads.notifications_after(cursor, None, 1);
        cursor = oldest
            .notifications
            .first()
            .map_or(oldest.last_seq, |first| first.seq - 1);
        items.push(v1::PipelineNotification {
            seq: cursor,
            kind: v1::NotificationKind::Missed.into(),
            ..v1::PipelineNotification::default()
        });
        page = reads.notifications_after(cursor, node_group, PIPELINE_STREAM_PAGE_MAX);
    }
    // A full page may have more after it; a short one read everything up to the last number.
    cursor = match page.notifications.last() {
        Some(last) if page.notifications.len() == PIPELINE_STREAM_PAGE_MAX => last.seq,
        _ => cursor.max(page.last_seq),
    };
    items.extend(
        page.notifications
            .into_iter()
            .filter(|n| include_progress || n.kind != NotificationKind::Progress)
            .map(notification_to_proto),
    );
    (cursor, items)
}

/// The archive export `request` asks for. The first page is read before the stream starts, so
/// a cursor from nowhere or a cluster that cannot answer is the call's error, not the stream's.
pub(super) async fn export(
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    request: Export,
) -> Result<ArchiveStream, Status> {
    let mut export = Exporter {
        replica,
        stop,
        after: request.after,
        left: request.limit,
        buffer: VecDeque::new(),
        ended: false,
    };
    export.fill(true).await?;
    Ok(Box::pin(futures_util::stream::unfold(
        export,
        Exporter::next,
    )))
}

/// An archive export's state between two items: what it has read but not sent (at most one
/// page), where it goes on reading, and how many it may still send.
struct Exporter {
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    /// The cursor of the last transaction read (`None`: none read yet, from the oldest).
    after: Option<ArchiveCursor>,
    /// How many more it may read.
    left: usize,
    buffer: VecDeque<v1::ArchivedTransaction>,
    /// The end of the archive was read, or an error sent: nothing more is read.
    ended: bool,
}

impl Exporter {
    async fn next(mut self) -> Option<(Result<v1::ArchivedTransaction, Status>, Exporter)> {
        if self.buffer.is_empty()
            && !self.ended
            && self.left > 0
            && let Err(status) = self.fill(false).await
        {
            self.ended = true;
            return Some((Err(status), self));
        }
        let item = self.buffer.pop_front()?;
        Some((Ok(item), self))
    }

    /// Reads the next page with a linearizable read. The `first` read also checks the cursor
    /// against the cluster clock.
    async fn fill(&mut self, first: bool) -> Result<(), Status> {
        if *self.stop.borrow() {
            return Err(stopping());
        }
        let after = self.after;
        let want = self.left.min(PIPELINE_STREAM_PAGE_MAX);
        let (items, end) = self
            .replica
            .query(|state, _| {
                let reads = state.pipelines();
                if first {
                    check_cursor(after, reads.clock_ms())?;
                }
                Ok(export_page(reads, after, want))
            })
            .await?;
        assert!(
            items.len() <= want && (end || !items.is_empty()),
            "an export page is bounded and only an empty one ends the export"
        );
        self.left -= items.len();
        self.ended = end;
        if let Some(last) = items.last() {
            self.after = last.cursor.map(archive_cursor);
        }
        self.buffer.extend(items);
        Ok(())
    }
}

/// Up to `want` archived transactions after `after`, in archive order, cut earlier (after at
/// least one) once they would pass [`PIPELINE_LIST_REPLY_BYTES_MAX`]; and whether the end of
/// the archive was read (fewer than `want` found, all taken). Converts only what is sent: this
/// runs under the state's read lock.
pub(super) fn export_page(
    reads: PipelineReads<'_>,
    after: Option<ArchiveCursor>,
    want: usize,
) -> (Vec<v1::ArchivedTransaction>, bool) {
    let found = reads.archived(after, want);
    let mut items = Vec::new();
    let mut bytes = 0usize;
    for tx in &found {
        let cursor = ArchiveCursor::after(tx).expect("the archive holds archived transactions");
        let item = v1::ArchivedTransaction {
            transaction: Some(transaction_to_proto(tx)),
            cursor: Some(v1::ArchiveCursor {
                archived_at_ms: cursor.archived_at_ms,
                transaction_id: cursor.transaction.0,
            }),
        };
        let len = item.encoded_len();
        if !items.is_empty() && bytes + len > PIPELINE_LIST_REPLY_BYTES_MAX {
            return (items, false);
        }
        bytes += len;
        items.push(item);
    }
    let end = found.len() < want;
    (items, end)
}
