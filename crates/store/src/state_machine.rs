//! The replicated state machine as openraft's `RaftStateMachine`, persisted by snapshots.
//!
//! The [`State`] lives in memory; `apply` does not write to disk. Durability comes from the log
//! (openraft re-applies committed entries after a restart) and from snapshots, which are flushed
//! before they are reported built or installed. On open, the last snapshot is loaded and checked
//! (`State::from_snapshot` validates every invariant); a snapshot that does not load stops the
//! node rather than serving a wrong state.

use std::io::Cursor;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use certus_core::{ClientRequest, Stamp, State, apply};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::config::{CertusConfig, Responses};
use crate::disk::{Disk, DiskError, WriteBatch};
use crate::keys::SNAPSHOT;

/// The applied state and the Raft bookkeeping that goes with it.
#[derive(Debug)]
pub struct Applied<C: CertusConfig> {
    /// The replicated state.
    pub state: State,
    /// The last log entry applied.
    pub last_applied: Option<LogId<C::NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<C::NodeId, C::Node>,
}

/// Read access to the applied state for queries (linearizable reads go through Raft first).
#[derive(Debug)]
pub struct StateReader<C: CertusConfig> {
    applied: Arc<RwLock<Applied<C>>>,
}

impl<C: CertusConfig> Clone for StateReader<C> {
    fn clone(&self) -> Self {
        StateReader {
            applied: Arc::clone(&self.applied),
        }
    }
}

impl<C: CertusConfig> StateReader<C> {
    /// Runs `read` on the applied state. Keep it short: `apply` waits meanwhile.
    pub fn read<T>(&self, read: impl FnOnce(&Applied<C>) -> T) -> T {
        read(&read_lock(&self.applied))
    }
}

fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A snapshot as kept on disk.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct StoredSnapshot<C: CertusConfig> {
    pub(crate) meta: SnapshotMeta<C::NodeId, C::Node>,
    /// `State::to_snapshot` bytes: what is sent to other nodes.
    #[serde(with = "serde_bytes")]
    pub(crate) data: Vec<u8>,
}

/// Told of every client request the state machine applies for the first time (a copy answered
/// from the client's session is not): the request and the log index that carried it. An
/// observer for checks — a request applied at two indexes was applied twice.
#[derive(Clone)]
pub struct ApplyObserver(Arc<dyn Fn(ClientRequest, u64) + Send + Sync>);

impl ApplyObserver {
    /// An observer calling `observe`.
    pub fn new(observe: impl Fn(ClientRequest, u64) + Send + Sync + 'static) -> ApplyObserver {
        ApplyObserver(Arc::new(observe))
    }
}

impl std::fmt::Debug for ApplyObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApplyObserver")
    }
}

/// The state machine store.
#[derive(Debug)]
pub struct StateMachineStore<C: CertusConfig, D> {
    disk: Arc<D>,
    applied: Arc<RwLock<Applied<C>>>,
    saved: SavedSnapshot<C>,
    snapshots_built: u64,
    observer: Option<ApplyObserver>,
    pacer: Option<ApplyPacer>,
    _config: PhantomData<C>,
}

/// What each batch of entries waits for before it is applied: where the CPU time an apply takes
/// must be modelled (the simulation), the runtime's sleep, so that a node's applied index can
/// trail its commit index as a busy machine's does.
#[derive(Clone)]
pub struct ApplyPacer(Arc<dyn Fn() -> BoxedWait + Send + Sync>);

/// The wait an [`ApplyPacer`] gives one batch.
pub type BoxedWait = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

impl ApplyPacer {
    /// A pacer whose every batch first awaits what `wait` returns.
    pub fn new(wait: impl Fn() -> BoxedWait + Send + Sync + 'static) -> ApplyPacer {
        ApplyPacer(Arc::new(wait))
    }
}

impl std::fmt::Debug for ApplyPacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApplyPacer")
    }
}

/// The log id of the snapshot on disk, shared by the store and its builders.
///
/// openraft may run a build (spawned) and an install at the same time; whichever finishes last
/// must not replace a newer snapshot with an older one, or the disk would hold a snapshot older
/// than the log's purge point. The lock also orders the compare and the write.
type SavedSnapshot<C> = Arc<Mutex<Option<LogId<<C as openraft::RaftTypeConfig>::NodeId>>>>;

/// Builds snapshots off the apply path, from an encoding taken when it was created.
#[derive(Debug)]
pub struct SnapshotBuilder<C: CertusConfig, D> {
    disk: Arc<D>,
    saved: SavedSnapshot<C>,
    meta: SnapshotMeta<C::NodeId, C::Node>,
    data: Vec<u8>,
}

fn sm_read_err<C: CertusConfig>(e: DiskError) -> StorageError<C::NodeId> {
    StorageIOError::read_state_machine(&e).into()
}

impl<C: CertusConfig, D: Disk> StateMachineStore<C, D> {
    /// The same store, telling `observer` of every client request it applies for the first time.
    pub fn with_observer(mut self, observer: ApplyObserver) -> StateMachineStore<C, D> {
        self.observer = Some(observer);
        self
    }

    /// The same store, waiting on `pacer` before it applies each batch of entries.
    pub fn with_pacer(mut self, pacer: ApplyPacer) -> StateMachineStore<C, D> {
        self.pacer = Some(pacer);
        self
    }

    /// Opens the state machine on `disk`, restoring the last snapshot if there is one. A stored
    /// snapshot that does not decode or validate is an error: the node must not serve.
    pub fn open(disk: Arc<D>) -> Result<StateMachineStore<C, D>, DiskError> {
        let stored = load_snapshot::<C, D>(&disk)?;
        let saved = Arc::new(Mutex::new(
            stored.as_ref().and_then(|stored| stored.meta.last_log_id),
        ));
        let applied = match stored {
            Some(stored) => Applied {
                state: State::from_snapshot(&stored.data)
                    .map_err(|e| DiskError(format!("the stored snapshot is invalid: {e}")))?,
                last_applied: stored.meta.last_log_id,
                membership: stored.meta.last_membership,
            },
            None => Applied {
                state: State::new(),
                last_applied: None,
                membership: StoredMembership::default(),
            },
        };
        Ok(StateMachineStore {
            disk,
            applied: Arc::new(RwLock::new(applied)),
            saved,
            snapshots_built: 0,
            observer: None,
            pacer: None,
            _config: PhantomData,
        })
    }

    /// A handle for reading the applied state.
    pub fn reader(&self) -> StateReader<C> {
        StateReader {
            applied: Arc::clone(&self.applied),
        }
    }
}

fn load_snapshot<C: CertusConfig, D: Disk>(
    disk: &D,
) -> Result<Option<StoredSnapshot<C>>, DiskError> {
    let Some(bytes) = disk.get(SNAPSHOT)? else {
        return Ok(None);
    };
    let stored = postcard::from_bytes(&bytes)
        .map_err(|e| DiskError(format!("the stored snapshot does not decode: {e}")))?;
    Ok(Some(stored))
}

/// Writes the snapshot and flushes: a snapshot is reported only once it is durable, because the
/// log before it may be purged next. A snapshot no newer than the one on disk is not written.
fn save_snapshot<C: CertusConfig, D: Disk>(
    disk: &D,
    saved: &SavedSnapshot<C>,
    stored: &StoredSnapshot<C>,
) -> Result<(), DiskError> {
    let mut saved = saved
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if saved.is_some() && *saved >= stored.meta.last_log_id {
        return Ok(());
    }
    let mut batch = WriteBatch::new();
    batch.put(
        SNAPSHOT,
        postcard::to_allocvec(stored).expect("snapshots always encode"),
    );
    disk.write(batch)?;
    disk.flush()?;
    *saved = stored.meta.last_log_id;
    Ok(())
}

/// The log id of the snapshot on disk, read from the front of its encoding (the meta comes
/// first), for the log store's purge.
pub(crate) fn saved_snapshot_log_id<C: CertusConfig, D: Disk>(
    disk: &D,
) -> Result<Option<LogId<C::NodeId>>, DiskError> {
    let Some(bytes) = disk.get(SNAPSHOT)? else {
        return Ok(None);
    };
    let (meta, _rest): (SnapshotMeta<C::NodeId, C::Node>, _) = postcard::take_from_bytes(&bytes)
        .map_err(|e| DiskError(format!("the stored snapshot does not decode: {e}")))?;
    Ok(meta.last_log_id)
}

impl<C: CertusConfig, D: Disk> RaftSnapshotBuilder<C> for SnapshotBuilder<C, D> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<C>, StorageError<C::NodeId>> {
        let stored = StoredSnapshot::<C> {
            meta: self.meta.clone(),
            data: self.data.clone(),
        };
        save_snapshot(&*self.disk, &self.saved, &stored)
            .map_err(|e| StorageIOError::write_snapshot(Some(stored.meta.signature()), &e))?;
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl<C: CertusConfig, D: Disk> RaftStateMachine<C> for StateMachineStore<C, D> {
    type SnapshotBuilder = SnapshotBuilder<C, D>;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<C::NodeId>>,
            StoredMembership<C::NodeId, C::Node>,
        ),
        StorageError<C::NodeId>,
    > {
        let applied = read_lock(&self.applied);
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Responses>, StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        if let Some(pacer) = &self.pacer {
            (pacer.0)().await;
        }
        let mut applied = write_lock(&self.applied);
        let mut replies = Vec::new();
        for entry in entries {
            let responses = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(proposal) => {
                    let stamp = Stamp::new(entry.log_id.index, proposal.proposed_at_ms);
                    let state = &mut applied.state;
                    let observer = self.observer.as_ref();
                    proposal
                        .commands
                        .into_iter()
                        .map(|command| {
                            // Only with an observer: the check clones a remembered answer.
                            let fresh = observer.and_then(|_| state.fresh_request(&command, stamp));
                            let response = apply(state, command, stamp);
                            if let (Some(observer), Some(request)) = (observer, fresh) {
                                (observer.0)(request, stamp.index);
                            }
                            response
                        })
                        .collect()
                }
                EntryPayload::Membership(membership) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                    Vec::new()
                }
            };
            applied.last_applied = Some(entry.log_id);
            replies.push(responses);
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_built += 1;
        let applied = read_lock(&self.applied);
        let last = applied.last_applied;
        let snapshot_id = match last {
            Some(log_id) => format!(
                "{}-{}-{}",
                log_id.leader_id, log_id.index, self.snapshots_built
            ),
            None => format!("empty-{}", self.snapshots_built),
        };
        SnapshotBuilder {
            disk: Arc::clone(&self.disk),
            saved: Arc::clone(&self.saved),
            meta: SnapshotMeta {
                last_log_id: last,
                last_membership: applied.membership.clone(),
                snapshot_id,
            },
            data: applied.state.to_snapshot(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<C::NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<C::NodeId, C::Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        let data = snapshot.into_inner();
        let install_err = |e: String| -> StorageError<C::NodeId> {
            StorageIOError::read_snapshot(Some(meta.signature()), &DiskError(e)).into()
        };
        // Validate before anything changes: a bad snapshot from a peer leaves this node as it was.
        let state = State::from_snapshot(&data).map_err(|e| install_err(e.to_string()))?;
        let Some(last_log_id) = meta.last_log_id else {
            return Err(install_err(
                "a snapshot from a peer names no last log id".into(),
            ));
        };
        if state.applied_index() > last_log_id.index {
            return Err(install_err(format!(
                "the snapshot's state has applied index {} beyond its last log id {}",
                state.applied_index(),
                last_log_id.index
            )));
        }
        let stored = StoredSnapshot::<C> {
            meta: meta.clone(),
            data,
        };
        save_snapshot(&*self.disk, &self.saved, &stored).map_err(|e| install_err(e.0))?;
        let mut applied = write_lock(&self.applied);
        *applied = Applied {
            state,
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<C>>, StorageError<C::NodeId>> {
        let stored = load_snapshot::<C, D>(&self.disk).map_err(sm_read_err::<C>)?;
        Ok(stored.map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}
