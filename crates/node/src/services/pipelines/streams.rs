//! The pipelines' server streams: `WatchCompletions` (notifications as they are applied, read
//! from the local applied state after the applied-index watch wakes, never by polling) and
//! `ExportArchive` (the archive in pages, each a linearizable read). Each holds at most one page
//! it has read but not sent; gRPC flow control holds the rest back in the state. Both end when
//! the node stops.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;

use certus_core::PipelineReads;
use certus_core::pipelines::{ArchiveCursor, NodeGroup, NotificationKind};
use certus_proto::v1;
use futures_util::Stream;
use prost::Message as _;
use tokio::sync::watch;
use tonic::Status;

use crate::convert::pipelines::wire::{notification_to_proto, transaction_to_proto};
use crate::convert::pipelines::{Export, Watch, archive_cursor, check_cursor, resume_point};
use crate::errors::stopping;
use crate::limits::{PIPELINE_LIST_REPLY_BYTES_MAX, PIPELINE_STREAM_PAGE_MAX};
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
}

impl Feed {
    async fn next(mut self) -> Option<(Result<v1::PipelineNotification, Status>, Feed)> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(item) = self.buffer.pop_front() {
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
            match self.applied.wait(None).await {
                Wake::Applied | Wake::Deadline => {}
                Wake::Stopping => {
                    self.ended = true;
                    return Some((Err(stopping()), self));
                }
            }
        }
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
