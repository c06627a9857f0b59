//! `certus.v1.Admin`: membership requests checked before anything reaches Raft, the membership
//! and roles for the wire, and an exported snapshot's messages.

use std::collections::BTreeSet;

use certus_core::State;
use certus_proto::v1;
use certus_store::LocalEntry;
use openraft::{ServerState, StoredMembership};
use tonic::{Code, Status};

use crate::address::MemberAddr;
use crate::errors::status;
use crate::raft::forward::MembershipView;
use crate::raft::types::{CertusNode, LogId, NodeId};

/// The name a role is shown by.
pub fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// The members of `view` for the wire.
pub fn members(view: &MembershipView) -> Vec<v1::Member> {
    view.members
        .iter()
        .map(|member| v1::Member {
            id: member.id,
            grpc_addr: member.node.grpc_addr.clone(),
            http_addr: member.node.http_addr.clone(),
            voter: member.voter,
        })
        .collect()
}

/// A membership change's reply: the membership after it.
pub fn membership(view: &MembershipView) -> v1::MembershipReply {
    v1::MembershipReply {
        log_index: view.log_index,
        members: members(view),
    }
}

/// `AddLearner`: the new member's id (from 1) and addresses (`host:port`, bounded).
pub fn add_learner(request: v1::AddLearnerRequest) -> Result<(NodeId, CertusNode), Status> {
    let id = member_id(request.id)?;
    Ok((
        id,
        CertusNode {
            grpc_addr: member_addr("grpc_addr", &request.grpc_addr)?,
            http_addr: member_addr("http_addr", &request.http_addr)?,
        },
    ))
}

/// `SetMemberAddress`: the member's id and its new addresses (`None`: unchanged); at least one.
pub fn set_member_address(
    request: v1::SetMemberAddressRequest,
) -> Result<(NodeId, Option<String>, Option<String>), Status> {
    let id = member_id(request.id)?;
    let changed = |field, addr: &str| {
        (!addr.is_empty())
            .then(|| member_addr(field, addr))
            .transpose()
    };
    let grpc_addr = changed("grpc_addr", &request.grpc_addr)?;
    let http_addr = changed("http_addr", &request.http_addr)?;
    if grpc_addr.is_none() && http_addr.is_none() {
        return Err(status(
            Code::InvalidArgument,
            "invalid-argument",
            "nothing to change: give grpc_addr, http_addr or both",
        ));
    }
    Ok((id, grpc_addr, http_addr))
}

fn member_id(id: u64) -> Result<NodeId, Status> {
    if id == 0 {
        return Err(status(
            Code::InvalidArgument,
            "invalid-argument",
            "id: node ids start at 1",
        ));
    }
    Ok(id)
}

/// A member address (`host:port`, an IP address or an RFC 1123 host name), in its one spelling.
fn member_addr(field: &str, addr: &str) -> Result<String, Status> {
    MemberAddr::parse(addr)
        .map(|addr| addr.to_string())
        .map_err(|why| {
            status(
                Code::InvalidArgument,
                "invalid-argument",
                format!("{field}: {why}"),
            )
        })
}

/// `ChangeMembership`'s voters: at least one, each already a member of `known`.
pub fn voters(
    request: &v1::ChangeMembershipRequest,
    known: &MembershipView,
) -> Result<BTreeSet<NodeId>, Status> {
    let voters: BTreeSet<NodeId> = request.voters.iter().copied().collect();
    if voters.is_empty() {
        return Err(status(
            Code::InvalidArgument,
            "invalid-argument",
            "voters: a cluster needs at least one voter",
        ));
    }
    if let Some(unknown) = voters
        .iter()
        .find(|id| !known.members.iter().any(|member| member.id == **id))
    {
        return Err(status(
            Code::FailedPrecondition,
            "not-a-member",
            format!("node {unknown} is not a member; add it as a learner first"),
        ));
    }
    Ok(voters)
}

/// The members of an applied membership for the wire (an exported snapshot's header).
pub fn stored_members(stored: &StoredMembership<NodeId, CertusNode>) -> Vec<v1::Member> {
    let membership = stored.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    membership
        .nodes()
        .map(|(id, node)| v1::Member {
            id: *id,
            grpc_addr: node.grpc_addr.clone(),
            http_addr: node.http_addr.clone(),
            voter: voters.contains(id),
        })
        .collect()
}

/// How many CT entries an export of `state` carries, from number 0, given the `local` entries
/// this node's CT database holds from 0 on: what it holds of what `state` numbered. Refused
/// when that misses entries cleaned up from `state` (they live only in the local databases):
/// this node runs no CT log, or lags.
pub fn ct_export_size(state: &State, local: u64) -> Result<u64, Status> {
    let size = local.min(state.ct_next_sequence());
    let cleaned_below = state.ct_first_held_sequence();
    if size < cleaned_below {
        return Err(status(
            Code::Unavailable,
            "ct-entries-missing",
            format!(
                "this node's CT database holds entries 0 to {local} (exclusive), but the CT \
                 log's entries below {cleaned_below} live only in the nodes' local databases: \
                 export from a node that runs the CT log and has caught up"
            ),
        ));
    }
    Ok(size)
}

/// CT entries numbered from `first` for an export: as many of `entries` as fit in
/// `chunk_bytes` (at least one), and how many that is.
pub fn ct_entries_chunk(
    first: u64,
    entries: Vec<LocalEntry>,
    chunk_bytes: usize,
) -> (v1::ExportSnapshotChunk, u64) {
    let mut taken = Vec::new();
    let mut bytes = 0;
    for entry in entries {
        let size = entry.leaf_input.len() + entry.extra_data.len() + entry.sct.len() + 16;
        if !taken.is_empty() && bytes + size > chunk_bytes {
            break;
        }
        bytes += size;
        taken.push(v1::CtLocalEntry {
            leaf_input: entry.leaf_input,
            extra_data: entry.extra_data,
            sct: entry.sct,
            sct_timestamp_ms: entry.sct_timestamp_ms,
        });
    }
    let count = taken.len() as u64;
    let chunk = v1::ExportSnapshotChunk {
        part: Some(v1::export_snapshot_chunk::Part::CtEntries(v1::CtEntries {
            first,
            entries: taken,
        })),
    };
    (chunk, count)
}

/// What `ExportSnapshot` sends first: the header (naming the node, the log id and membership
/// the snapshot covers, the time, the snapshot's length and SHA-256, and how many CT entries
/// follow), then `data` in chunks of at most `chunk_bytes`.
pub fn snapshot_export(
    node_id: NodeId,
    exported_at_ms: u64,
    last_log_id: LogId,
    members: Vec<v1::Member>,
    data: &[u8],
    ct_entries: u64,
    chunk_bytes: usize,
) -> Vec<v1::ExportSnapshotChunk> {
    assert!(chunk_bytes > 0, "a chunk holds at least one byte");
    let header = v1::SnapshotHeader {
        node_id,
        last_log_term: last_log_id.leader_id.term,
        last_log_index: last_log_id.index,
        members,
        exported_at_ms,
        data_bytes: data.len() as u64,
        data_sha256: ring::digest::digest(&ring::digest::SHA256, data)
            .as_ref()
            .to_vec(),
        ct_entries,
    };
    let mut chunks = vec![v1::ExportSnapshotChunk {
        part: Some(v1::export_snapshot_chunk::Part::Header(header)),
    }];
    chunks.extend(
        data.chunks(chunk_bytes)
            .map(|chunk| v1::ExportSnapshotChunk {
                part: Some(v1::export_snapshot_chunk::Part::Data(chunk.to_vec())),
            }),
    );
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_of(chunks: &[v1::ExportSnapshotChunk]) -> Vec<u8> {
        chunks
            .iter()
            .skip(1)
            .flat_map(|chunk| match &chunk.part {
                Some(v1::export_snapshot_chunk::Part::Data(data)) => data.clone(),
                other => panic!("a data chunk, not {other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_export_is_a_header_then_bounded_chunks_of_the_bytes_it_names() {
        let data: Vec<u8> = (0..2500u32).map(|n| (n % 251) as u8).collect();
        let log_id = LogId::new(openraft::CommittedLeaderId::new(7, 0), 42);
        let chunks = snapshot_export(3, 1_000, log_id, Vec::new(), &data, 0, 1000);
        assert_eq!(chunks.len(), 4, "a header and three chunks");
        let Some(v1::export_snapshot_chunk::Part::Header(header)) = &chunks[0].part else {
            panic!("the header comes first");
        };
        assert_eq!(
            (header.node_id, header.last_log_term, header.last_log_index),
            (3, 7, 42)
        );
        assert_eq!(header.data_bytes, 2500);
        assert_eq!(
            header.data_sha256,
            ring::digest::digest(&ring::digest::SHA256, &data).as_ref()
        );
        assert!(chunks[1..].iter().all(|chunk| match &chunk.part {
            Some(v1::export_snapshot_chunk::Part::Data(bytes)) => bytes.len() <= 1000,
            _ => false,
        }));
        assert_eq!(data_of(&chunks), data);
    }

    #[test]
    fn a_state_without_ct_entries_exports_none() {
        assert_eq!(ct_export_size(&State::new(), 0).expect("exportable"), 0);
        assert_eq!(
            ct_export_size(&State::new(), 5).expect("exportable"),
            0,
            "never more than the state numbered"
        );
    }

    /// A state whose CT log numbered entries 0..4, published a tree of 3 and cleaned those up.
    fn cleaned_up_state() -> State {
        use certus_core::ct::{CtCommand, EntryKey, SignedTreeHead, Submission};
        use certus_core::{Command, Stamp, apply};
        const T0: u64 = 1_700_000_000_000;
        let mut state = State::new();
        let mut index = 0;
        let mut run = |state: &mut State, command: CtCommand, now_ms: u64| {
            index += 1;
            let response = apply(state, Command::Ct(command), Stamp::new(index, now_ms));
            assert!(!response.is_refusal(), "{response:?}");
        };
        let submissions = (0..4u8)
            .map(|n| Submission {
                key: EntryKey([n; 32]),
                sct_timestamp_ms: T0,
                // A MerkleTreeLeaf's version and type, then the timestamp it carries.
                leaf_input: [&[0, 0][..], &T0.to_be_bytes(), &[0, 0, n]].concat(),
                extra_data: vec![n; 3],
                sct: vec![n],
            })
            .collect();
        run(&mut state, CtCommand::Add { submissions }, T0);
        let keys = state.ct_ready_to_sequence(T0 + 1_000, usize::MAX);
        assert_eq!(keys.len(), 4, "every submission was added");
        run(
            &mut state,
            CtCommand::Sequence { first: 0, keys },
            T0 + 1_000,
        );
        let sth = SignedTreeHead {
            tree_size: 3,
            timestamp_ms: T0 + 2_000,
            root_hash: [3; 32],
            signature: vec![4, 3, 0, 1, 3],
        };
        for node in [1, 2] {
            let report = CtCommand::Report {
                node,
                sth: sth.clone(),
                contiguous_size: 3,
            };
            run(&mut state, report, T0 + 2_000);
        }
        let publish = CtCommand::Publish {
            sth,
            members: vec![1, 2],
        };
        run(&mut state, publish, T0 + 2_000);
        run(
            &mut state,
            CtCommand::CleanUp { max_entries: 100 },
            T0 + 2_000,
        );
        assert_eq!(
            (state.ct_first_held_sequence(), state.ct_next_sequence()),
            (3, 4)
        );
        state
    }

    #[test]
    fn an_export_carries_every_entry_cleaned_up_and_refuses_a_node_without_them() {
        let state = cleaned_up_state();
        assert_eq!(ct_export_size(&state, 4).expect("holds all"), 4);
        assert_eq!(
            ct_export_size(&state, 9).expect("holds more"),
            4,
            "never an entry the state did not number"
        );
        assert_eq!(
            ct_export_size(&state, 3).expect("holds the cleaned-up ones"),
            3,
            "the state holds entry 3"
        );
        let refused = ct_export_size(&state, 2).expect_err("entry 2 lives only in the databases");
        assert_eq!(refused.code(), Code::Unavailable);
        assert!(refused.message().contains("below 3"), "{refused:?}");
        assert!(
            ct_export_size(&state, 0).is_err(),
            "a node without the CT log"
        );
    }

    #[test]
    fn ct_chunks_hold_at_least_one_entry_and_stay_within_their_bytes() {
        let entry = |n: u8| LocalEntry {
            leaf_input: vec![n; 100],
            extra_data: vec![n; 50],
            sct: vec![n; 10],
            sct_timestamp_ms: u64::from(n),
        };
        let (chunk, taken) = ct_entries_chunk(7, (0..10).map(entry).collect(), 400);
        assert_eq!(taken, 2, "two entries of 176 bytes fit in 400");
        let Some(v1::export_snapshot_chunk::Part::CtEntries(entries)) = chunk.part else {
            panic!("a CT chunk");
        };
        assert_eq!(entries.first, 7);
        assert_eq!(entries.entries[1].leaf_input, vec![1; 100]);
        let (_, taken) = ct_entries_chunk(0, vec![entry(1)], 10);
        assert_eq!(taken, 1, "an entry larger than a chunk still goes, alone");
    }
}
