//! A store seeded from an exported snapshot (`certus restore`): the first state of a node of a
//! new cluster, written into an empty disk.
//!
//! What openraft needs to start on it: the snapshot (the state and its last log id, with the
//! new cluster's membership at that log id), the log purged up to that same log id (no entries:
//! the old cluster's log is not carried over, and the next entry is the one after it), and a
//! vote in that log id's term, so the first election is for a later term and every entry the
//! new cluster writes sorts after the snapshot's.

use certus_core::State;
use openraft::{LogId, Membership, SnapshotMeta, StoredMembership, Vote};

use crate::config::CertusConfig;
use crate::disk::{Disk, DiskError, WriteBatch};
use crate::keys::{COMMITTED, LAST_PURGED, SNAPSHOT, VOTE};
use crate::state_machine::StoredSnapshot;

/// Writes into `disk`, which must be empty, the store of node `node_id` of a new cluster whose
/// members are `membership`, holding the snapshot `data` (`State::to_snapshot` bytes) taken at
/// `last_log_id`; flushed before it returns. The bytes are loaded and validated first: nothing
/// is written unless they are a valid state at or below `last_log_id`, and `node_id` is one of
/// the voters.
pub fn seed_from_snapshot<C: CertusConfig, D: Disk>(
    disk: &D,
    node_id: C::NodeId,
    membership: Membership<C::NodeId, C::Node>,
    last_log_id: LogId<C::NodeId>,
    data: Vec<u8>,
) -> Result<(), DiskError> {
    for key in [VOTE, COMMITTED, LAST_PURGED, SNAPSHOT] {
        if disk.get(key)?.is_some() {
            return Err(DiskError(format!(
                "the store already holds {}: restore only into an empty data directory",
                String::from_utf8_lossy(key)
            )));
        }
    }
    let state = State::from_snapshot(&data)
        .map_err(|error| DiskError(format!("the snapshot is invalid: {error}")))?;
    if state.applied_index() > last_log_id.index {
        return Err(DiskError(format!(
            "the snapshot's state has applied index {} beyond the log id it names ({})",
            state.applied_index(),
            last_log_id.index
        )));
    }
    if !membership.voter_ids().any(|id| id == node_id) {
        return Err(DiskError(format!(
            "node {node_id} is not one of the new cluster's voters"
        )));
    }
    let stored = StoredSnapshot::<C> {
        meta: SnapshotMeta {
            last_log_id: Some(last_log_id),
            last_membership: StoredMembership::new(Some(last_log_id), membership),
            snapshot_id: format!("restored-{}-{}", last_log_id.leader_id, last_log_id.index),
        },
        data,
    };
    let vote = Vote::new(last_log_id.leader_id.term, node_id);
    let mut batch = WriteBatch::new();
    batch.put(
        SNAPSHOT,
        postcard::to_allocvec(&stored).expect("snapshots always encode"),
    );
    batch.put(
        LAST_PURGED,
        postcard::to_allocvec(&last_log_id).expect("log ids always encode"),
    );
    batch.put(
        VOTE,
        postcard::to_allocvec(&vote).expect("votes always encode"),
    );
    disk.write(batch)?;
    disk.flush()
}
