//! What the store needs of the node's openraft type configuration.

use std::io::Cursor;

use certus_core::{Command, Response};
use openraft::{Entry, RaftTypeConfig};
use serde::{Deserialize, Serialize};

/// The payload of one Raft entry: commands proposed together (group commit) and the leader's
/// clock when it proposed them. Each command is applied with `Stamp { index: the entry's index,
/// now_ms: proposed_at_ms }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The leader's clock at proposal, in milliseconds since the Unix epoch.
    pub proposed_at_ms: u64,
    /// The commands, applied in order.
    pub commands: Vec<Command>,
}

/// Answers to a [`Proposal`], one per command, in order; empty for Raft's own entries.
pub type Responses = Vec<Response>;

/// The openraft type configurations the store works with: the node picks its node and runtime
/// types; node ids, the payload, the responses, the entry and the snapshot type are fixed here.
pub trait CertusConfig:
    RaftTypeConfig<
        NodeId = u64,
        D = Proposal,
        R = Responses,
        Entry = Entry<Self>,
        SnapshotData = Cursor<Vec<u8>>,
    >
{
}

impl<C> CertusConfig for C where
    C: RaftTypeConfig<
            NodeId = u64,
            D = Proposal,
            R = Responses,
            Entry = Entry<C>,
            SnapshotData = Cursor<Vec<u8>>,
        >
{
}
