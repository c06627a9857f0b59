//! Completion and progress notifications: the seed's `CHANNEL_NOTIFY`, replaced by a numbered
//! record that a server stream reads and resumes from.
//!
//! Redis pub/sub forgets a message nobody was subscribed to at the moment it was published; a
//! node that restarts misses completions. Here every completion and progress report gets the
//! next sequence number and is kept among the [`PIPELINE_NOTIFICATIONS_MAX`] most recent. A stream
//! remembers the last number it sent and asks for what follows; if the record no longer reaches
//! back that far, the answer says so (`missed`), and the reader re-reads the transactions it
//! cares about instead of waiting forever.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{NodeGroup, TransactionId, TxStatus};
use crate::limits::{LIST_PAGE_MAX, PIPELINE_NOTIFICATIONS_MAX};

/// What a notification announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotificationKind {
    /// The running transaction's worker reported progress.
    Progress,
    /// The transaction finished in a terminal status.
    Completed {
        /// The status.
        status: TxStatus,
    },
}

/// One numbered notification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Its number: one more than the previous notification's.
    pub seq: u64,
    /// The transaction.
    pub transaction: TransactionId,
    /// The node group the transaction was in.
    pub node_group: NodeGroup,
    /// Machine time it happened.
    pub at_ms: u64,
    /// What happened.
    pub kind: NotificationKind,
}

/// The notifications after a sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotificationPage<'a> {
    /// The notifications, oldest first.
    pub notifications: Vec<&'a Notification>,
    /// The number of the latest notification (0 before any): resume from here when the page is
    /// empty.
    pub last_seq: u64,
    /// Some notifications after the asked-for number are no longer kept: re-read the state of
    /// the transactions being watched.
    pub missed: bool,
}

/// The kept notifications.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Notifications {
    last_seq: u64,
    kept: BTreeMap<u64, Notification>,
}

/// What a snapshot stores of [`Notifications`], written from references.
#[derive(Serialize)]
pub(crate) struct NotificationRecordsRef<'a> {
    last_seq: u64,
    kept: Vec<&'a Notification>,
}

/// What a snapshot stores of [`Notifications`], as read back.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct NotificationRecords {
    last_seq: u64,
    kept: Vec<Notification>,
}

impl Notifications {
    /// Records a notification, dropping the oldest past the bound.
    pub(crate) fn push(
        &mut self,
        transaction: TransactionId,
        node_group: NodeGroup,
        kind: NotificationKind,
        now_ms: u64,
    ) {
        self.last_seq = self
            .last_seq
            .checked_add(1)
            .expect("fewer than 2^64 notifications are numbered");
        if self.kept.len() >= PIPELINE_NOTIFICATIONS_MAX {
            self.kept.pop_first();
        }
        let seq = self.last_seq;
        self.kept.insert(
            seq,
            Notification {
                seq,
                transaction,
                node_group,
                at_ms: now_ms,
                kind,
            },
        );
    }

    /// Up to `limit` (at most [`LIST_PAGE_MAX`]) notifications numbered above `after`, of
    /// `node_group` or of every group.
    pub(crate) fn after(
        &self,
        after: u64,
        node_group: Option<&NodeGroup>,
        limit: usize,
    ) -> NotificationPage<'_> {
        let oldest_kept = self
            .kept
            .first_key_value()
            .map_or(self.last_seq.saturating_add(1), |(k, _)| *k);
        NotificationPage {
            notifications: self
                .kept
                .range(after.saturating_add(1)..)
                .map(|(_, notification)| notification)
                .filter(|n| node_group.is_none_or(|group| n.node_group == *group))
                .take(limit.min(LIST_PAGE_MAX))
                .collect(),
            last_seq: self.last_seq,
            missed: after < self.last_seq && after.saturating_add(1) < oldest_kept,
        }
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub(crate) fn records(&self) -> NotificationRecordsRef<'_> {
        NotificationRecordsRef {
            last_seq: self.last_seq,
            kept: self.kept.values().collect(),
        }
    }

    pub(crate) fn from_records(records: NotificationRecords) -> Result<Notifications, String> {
        let mut notifications = Notifications {
            last_seq: records.last_seq,
            kept: BTreeMap::new(),
        };
        for notification in records.kept {
            if notifications
                .kept
                .last_key_value()
                .is_some_and(|(last, _)| *last >= notification.seq)
            {
                return Err(format!(
                    "notification {} is out of order or repeated",
                    notification.seq
                ));
            }
            notifications.kept.insert(notification.seq, notification);
        }
        Ok(notifications)
    }

    /// Kept notifications are the most recent, numbered without gaps up to the last, at most
    /// the bound, and not after the clock.
    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        if self.kept.len() > PIPELINE_NOTIFICATIONS_MAX {
            return Err(format!(
                "{} notifications exceed {PIPELINE_NOTIFICATIONS_MAX}",
                self.kept.len()
            ));
        }
        let kept = self.kept.len() as u64;
        if kept > self.last_seq {
            return Err(format!(
                "{kept} notifications are kept but only {} were numbered",
                self.last_seq
            ));
        }
        // The kept ones are the last `kept` numbers, in order.
        let first = (self.last_seq - kept).saturating_add(1);
        for ((seq, notification), expected) in self.kept.iter().zip(first..=self.last_seq) {
            if *seq != notification.seq || *seq != expected || notification.at_ms > clock_ms {
                return Err(format!(
                    "notification {seq} is misnumbered (expected {expected}) or after the clock"
                ));
            }
        }
        Ok(())
    }
}
