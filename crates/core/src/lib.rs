//! The replicated state machine of Certus.
//!
//! Raft orders commands; this crate says what they mean. [`apply`] takes the [`State`], one
//! [`Command`] and the [`Stamp`] the log gave it (index and the leader's clock) and returns a
//! [`Response`]. It is the only way the state changes.
//!
//! The crate is pure and deterministic: no IO, no clock, no randomness, no threads, no async, and
//! only ordered maps. Time arrives on the stamp; the machine's own clock is the largest stamp seen,
//! so it never runs backwards. The same log therefore gives the same state, and the same snapshot
//! bytes, on every replica.
//!
//! One module per concern, each with its invariants written at its top and checked in code:
//! - [`leases`]: named leases with TTLs and fencing tokens;
//! - [`challenges`]: HTTP-01 challenge tokens served by every node;
//! - [`clients`]: client sessions, so that each numbered write is applied at most once and never
//!   after its client moved past it;
//! - [`ct`]: the clustered Certificate Transparency log's entries, sequence, node reports and
//!   serving STH;
//! - [`claims`]: claimed work, what sessions and pipelines share: where an item is (queued,
//!   claimed, asleep or ended, one value), claim tokens and deadlines, the held check that
//!   replays a retried step, attempts, and the tick's bounded sweeps;
//! - [`sessions`]: CA issuance sessions, their stage queues, claims by workers and retention;
//! - [`pipelines`]: transaction pipelines: per-node-group queues, claims with a reaper, sleep and
//!   switches, webhooks with backoff and URL pauses, administrator notices, completion
//!   notifications, statistics and the archive;
//! - [`acme`]: ACME (RFC 8555) accounts, orders and authorizations, and revocations; an order is
//!   issued by a session.

#![deny(missing_docs, unreachable_pub)]

pub mod acme;
pub mod challenges;
pub mod claims;
mod client_requests;
pub mod clients;
mod command;
pub mod ct;
pub mod leases;
pub mod limits;
pub mod pipelines;
pub mod sessions;
mod snapshot;
mod state;
mod text;
mod time;

pub use challenges::{
    Challenge, ChallengeCommand, ChallengeError, ChallengeReply, ChallengeToken, KeyAuthorization,
};
pub use clients::{
    ClientCommand, ClientError, ClientId, ClientReply, ClientRequest, ClientSession,
};
pub use command::{Command, Response, TickReply};
pub use leases::{
    Acquisition, FencingToken, HolderId, Lease, LeaseCommand, LeaseError, LeaseName, LeaseReply,
    Ttl,
};
pub use pipelines::{
    PipelineCommand, PipelineConfig, PipelineError, PipelineReads, PipelineReply,
    PipelineTickReport,
};
pub use sessions::{
    Claim, CompleteItem, Completion, DnsName, Ended, Ending, KillReason, NewChallenge, QueueStats,
    QueuedStage, Reason, RequestKey, Session, SessionChallenge, SessionCommand, SessionConfig,
    SessionError, SessionId, SessionPlace, SessionReply, SessionTickReport, Stage, StageClaim,
    StepOutcome, TestResult, WorkerId,
};
pub use snapshot::SnapshotError;
pub use state::{AcmeReads, InvariantViolation, State, apply};
pub use text::{TextError, TextKind};
pub use time::Stamp;
