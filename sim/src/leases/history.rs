//! What the simulated clients saw: every lease operation with its invocation and completion time,
//! the periods each client believed it held a lease, and the writes the protected resource took.
//!
//! Times are simulated milliseconds since the run began (the one global clock the checkers use;
//! the nodes' skewed clocks never appear here except inside the replies they sent). The history
//! is saved as JSON in a failure report, so its shape is part of the report format.

use serde::{Deserialize, Serialize};

/// One client call as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// Unique within a run, in invocation order.
    pub id: u64,
    /// The client that made the call.
    pub client: u32,
    /// The lease it concerns.
    pub lease: String,
    /// What was asked.
    pub call: Call,
    /// When the client sent it.
    pub invoked_ms: u64,
    /// When the answer arrived, or when the client gave up on an [`Outcome::Unknown`] call
    /// (whose effect, if any, may land at any later time).
    pub completed_ms: u64,
    /// What came back.
    pub outcome: Outcome,
}

/// A lease call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "call")]
pub enum Call {
    /// `Leases/Acquire`.
    Acquire {
        /// Who asks.
        holder: String,
        /// For how long.
        ttl_ms: u64,
    },
    /// `Leases/Renew`.
    Renew {
        /// Who asks.
        holder: String,
        /// For how long.
        ttl_ms: u64,
    },
    /// `Leases/Release`.
    Release {
        /// Who asks.
        holder: String,
    },
    /// `Leases/CheckFence`: is `token` the live grant's?
    CheckFence {
        /// The token presented.
        token: u64,
    },
}

/// How an acquire was satisfied (the reply's `how`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// The lease did not exist.
    Created,
    /// The previous grant, to `previous_holder`, had expired.
    TookOverExpired {
        /// Whose grant had expired.
        previous_holder: String,
    },
    /// The caller already held it.
    Renewed,
}

/// A lease as a reply carried it (cluster-clock milliseconds).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseSeen {
    /// Its holder.
    pub holder: String,
    /// The grant's fencing token.
    pub token: u64,
    /// Machine time of the grant.
    pub granted_at_ms: u64,
    /// Machine time of the command that produced this reply (grant or renewal).
    pub renewed_at_ms: u64,
    /// Machine time from which it is no longer held.
    pub expires_at_ms: u64,
}

/// What a call came back with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// An acquire succeeded.
    Acquired {
        /// The lease after the command.
        lease: LeaseSeen,
        /// Which path it took.
        how: How,
    },
    /// A renew succeeded.
    Renewed {
        /// The lease after the command.
        lease: LeaseSeen,
    },
    /// A release succeeded.
    Released {
        /// The lease as it was before.
        lease: LeaseSeen,
    },
    /// A fence check answered.
    Fence {
        /// Whether the token was the live grant's.
        valid: bool,
        /// The live grant's token, 0 if the lease was not held.
        current_token: u64,
    },
    /// The cluster refused the call: it changed nothing. `reason` is the `certus-error` reason
    /// (`not-holder`, `expired`, `unknown-lease`, ...).
    Refused {
        /// The stable reason.
        reason: String,
    },
    /// The call certainly changed nothing and says nothing of the lease: no attempt reached a
    /// node (its connection could not be opened), or the node answered `no-leader` (nothing was
    /// proposed). `ClientError::Unavailable` with `may_have_taken_effect: false`.
    NotSent {
        /// What the client saw.
        error: String,
    },
    /// No answer, or an answer that does not say whether the call took effect (a timeout, a
    /// lost connection, `outcome-unknown`): it may have taken effect, at any time after
    /// `invoked_ms`.
    Unknown {
        /// What the client saw.
        error: String,
    },
}

impl Outcome {
    /// Whether the outcome leaves open whether the call took effect.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Outcome::Unknown { .. })
    }
}

/// A period in which a client believed it held a lease and could use its token: from the
/// acknowledgement of the grant until the end its client computed (invocation of the last
/// acknowledged grant or renewal plus its TTL, shortened by a release or a failed renewal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// The client.
    pub client: u32,
    /// The lease.
    pub lease: String,
    /// The grant's token.
    pub token: u64,
    /// When the grant was acknowledged.
    pub from_ms: u64,
    /// When the client stopped believing it held the lease.
    pub until_ms: u64,
}

/// A write the protected resource accepted after the cluster confirmed the writer's token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceWrite {
    /// The writer.
    pub client: u32,
    /// The lease that fences the resource.
    pub lease: String,
    /// The token the writer presented.
    pub token: u64,
    /// When the resource began checking the token with the cluster.
    pub checked_from_ms: u64,
    /// When it accepted the write.
    pub accepted_ms: u64,
}

/// A read the cluster answered with the log index of the state it read
/// (`certus-read-index`), whatever the lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedRead {
    /// The reader.
    pub client: u32,
    /// When the client sent it.
    pub invoked_ms: u64,
    /// When the answer arrived.
    pub completed_ms: u64,
    /// The log index the answer was read at.
    pub index: u64,
}

/// Everything the clients of one run saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// Every call, in invocation order.
    pub operations: Vec<Operation>,
    /// Every period of believed holding.
    pub holds: Vec<Hold>,
    /// Every write the resource accepted, in acceptance order.
    pub resource_writes: Vec<ResourceWrite>,
    /// Every answered fence check's read index, in completion order.
    #[serde(default)]
    pub reads: Vec<IndexedRead>,
}
