//! Durable storage under Raft.
//!
//! A small [`Disk`] trait — an ordered key-value space with atomic batches and an explicit flush —
//! with two implementations: [`SledDisk`] for production and [`SimDisk`] for the simulation (which
//! can crash and lose what was not flushed). It holds the vote, the committed pointer, the purge
//! point and snapshots. The Raft entries live in a [`SegmentLog`]: append-only segment files
//! with checksummed records and group commit, on a [`Files`] directory — [`OsFiles`] in
//! production, [`SimFiles`] in the simulation (a crash keeps what was synced and may tear the last
//! write). At open the last segment's torn tail is cut; damage anywhere else refuses to open.
//! On top, openraft 0.9's storage traits: [`LogStore`] (log and vote) and [`StateMachineStore`]
//! (the replicated state of `certus-core`, persisted by snapshots). Beside them, [`CtDatabase`]:
//! a node's local CT entries and Merkle tree. [`seed_from_snapshot`] writes the first store of a
//! node restored from an exported snapshot.

#![deny(missing_docs, unreachable_pub)]

mod config;
mod ct_db;
mod ct_error;
mod ct_files;
mod ct_hash_index;
mod disk;
mod files;
mod keys;
mod limits;
mod log_store;
mod seed;
mod segment_log;
mod sim_disk;
mod sled_disk;
mod state_machine;

pub use config::{CertusConfig, Proposal, Responses};
pub use ct_db::{CT_TILE_CACHE_TILES_DEFAULT, CtDatabase, CtDbError, CtStoreConfig, LocalEntry};
pub use disk::{Disk, DiskError, FlushDone, Pairs, WriteBatch};
pub use files::{CrashReport, DiskFault, Files, LogFile, OsFiles, SimFiles};
pub use limits::{REPLICATION_READ_BYTES_MAX, SEGMENT_BYTES_MIN};
pub use log_store::{AppendObserver, AppendTiming, LogStore};
pub use seed::seed_from_snapshot;
pub use segment_log::{SEGMENT_BYTES, SegmentLog, SyncJob, SyncRunner};
pub use sim_disk::SimDisk;
pub use sled_disk::{CORRUPT, Rebuilt, SLED_CACHE_MIB_DEFAULT, SledDisk, rebuild_keeping_vote};
pub use state_machine::{
    Applied, ApplyObserver, ApplyPacer, BoxedWait, SnapshotBuilder, StateMachineStore, StateReader,
};
