//! `raft_rpc`: the payloads of `certus.v1.Raft` (a version byte, then postcard), decoded with
//! the node's own `codec::decode` as the types its transport receives: the three Raft requests
//! and the forwarded request on the server side, their replies on the client side.
//!
//! What decodes must re-encode to bytes that decode to the same encoding. What the node then does
//! with the decoded message runs too where it is pure: the commands of append-entries' normal
//! entries and of a forwarded write are applied to a `State` (checked as in
//! [`crate::commands`]), and a snapshot sent whole in one install-snapshot chunk is loaded.

use certus_core::{Stamp, State};
use certus_node::raft::codec;
use certus_node::raft::forward::{ForwardReply, ForwardRequest};
use certus_node::{NodeId, TypeConfig};
use openraft::EntryPayload;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::commands::{COMMANDS_PER_INPUT_MAX, LEADER_CLOCK_MS_MAX, apply_checked, stamped};

/// The message kinds, in selector order (the first input byte picks one).
pub const KINDS: &[&str] = &[
    "AppendEntriesRequest",
    "VoteRequest",
    "InstallSnapshotRequest",
    "ForwardRequest",
    "AppendEntriesResponse",
    "VoteResponse",
    "InstallSnapshotResponse",
    "ForwardReply",
];

/// The target body: the first byte picks the message kind ([`KINDS`]), the rest is the payload.
pub fn raft_rpc(data: &[u8]) {
    let count = u8::try_from(KINDS.len()).expect("a few kinds");
    let (kind, payload) = crate::select(data, count);
    match kind {
        0 => {
            if let Some(request) = round_trip::<AppendEntriesRequest<TypeConfig>>(payload) {
                apply_entries(request);
            }
        }
        1 => {
            round_trip::<VoteRequest<NodeId>>(payload);
        }
        2 => {
            if let Some(request) = round_trip::<InstallSnapshotRequest<TypeConfig>>(payload) {
                install_whole(&request);
            }
        }
        3 => {
            if let Some(ForwardRequest::Write(commands)) = round_trip::<ForwardRequest>(payload) {
                let mut state = State::new();
                for (index, command) in (1..).zip(commands.into_iter().take(COMMANDS_PER_INPUT_MAX))
                {
                    apply_checked(&mut state, command, Stamp::new(index, 1_000));
                }
            }
        }
        4 => {
            round_trip::<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>(payload);
        }
        5 => {
            round_trip::<Result<VoteResponse<NodeId>, RaftError<NodeId>>>(payload);
        }
        6 => {
            round_trip::<
                Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
            >(payload);
        }
        _ => {
            round_trip::<ForwardReply>(payload);
        }
    }
}

/// Decodes `payload` as the transport does; what decodes must re-encode stably.
fn round_trip<T: Serialize + DeserializeOwned>(payload: &[u8]) -> Option<T> {
    let message: T = codec::decode(payload).ok()?;
    let encoded = codec::encode(&message);
    let again: T = codec::decode(&encoded).expect("a re-encoded message decodes");
    assert!(
        codec::encode(&again) == encoded,
        "a message re-encodes differently"
    );
    Some(message)
}

/// Applies the proposals of the request's normal entries, in order, as a follower's state
/// machine would once they commit.
fn apply_entries(request: AppendEntriesRequest<TypeConfig>) {
    let mut state = State::new();
    let mut count = 0;
    for entry in request.entries {
        let EntryPayload::Normal(mut proposal) = entry.payload else {
            continue;
        };
        let index = entry.log_id.index;
        if index < state.applied_index() {
            continue;
        }
        proposal.proposed_at_ms = proposal.proposed_at_ms.min(LEADER_CLOCK_MS_MAX);
        for (command, stamp) in stamped(proposal, index) {
            if count == COMMANDS_PER_INPUT_MAX {
                return;
            }
            count += 1;
            apply_checked(&mut state, command, stamp);
        }
    }
}

/// A snapshot sent in one chunk is what the state machine is asked to install: load it.
fn install_whole(request: &InstallSnapshotRequest<TypeConfig>) {
    if request.offset == 0 && request.done {
        crate::snapshot::snapshot(&request.data);
    }
}
