//! What a follower sends the leader over `certus.v1.Raft/Forward`, and what comes back.
//!
//! Writes and membership changes must run on the leader; a follower forwards them so that a
//! client may talk to any node. A read barrier asks the leader for a read index.

use std::collections::BTreeSet;

use certus_core::{Command, Response};
use serde::{Deserialize, Serialize};

use crate::raft::types::{CertusNode, NodeId};

/// A request a follower forwards to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ForwardRequest {
    /// Commands to propose (the leader batches them with others).
    Write(Vec<Command>),
    /// Confirm leadership and return the index a linearizable read must wait for.
    ReadIndex,
    /// Add a learner and wait until it has caught up.
    AddLearner {
        /// Its id.
        id: NodeId,
        /// Where it is reached.
        node: CertusNode,
    },
    /// Replace the voters.
    ChangeMembership {
        /// The new voters.
        voters: BTreeSet<NodeId>,
        /// Keep removed voters as learners.
        retain: bool,
    },
    /// Record new addresses for a member.
    SetMemberAddress {
        /// The member's id.
        id: NodeId,
        /// Where it is reached from now on.
        node: CertusNode,
    },
}

/// The leader's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ForwardReply {
    /// The commands' responses, in order.
    Written(Vec<Response>),
    /// The read index.
    ReadIndex(u64),
    /// The membership after a change, with the index that committed it.
    Membership(MembershipView),
    /// Refused; see the reason.
    Refused(ForwardRefusal),
}

/// The members of the cluster as a client sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipView {
    /// The log index of the membership entry.
    pub log_index: u64,
    /// Every member, voters and learners, by id.
    pub members: Vec<MemberView>,
}

/// One member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberView {
    /// Its id.
    pub id: NodeId,
    /// Where it is reached.
    pub node: CertusNode,
    /// Whether it votes.
    pub voter: bool,
}

/// Why the leader refused a forwarded request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ForwardRefusal {
    /// The receiver is not the leader (any more); nothing was proposed.
    NotLeader,
    /// Proposed, but the outcome is unknown.
    OutcomeUnknown(String),
    /// The request cannot be taken (e.g. an invalid membership change).
    FailedPrecondition(String),
    /// The leader could not serve it (shutting down, storage error, timeout).
    Unavailable(String),
}
