//! `certus.v1.Admin`: membership requests checked before anything reaches Raft, and the
//! membership and roles for the wire.

use std::collections::BTreeSet;

use certus_proto::v1;
use openraft::ServerState;
use tonic::{Code, Status};

use crate::errors::status;
use crate::limits::MEMBER_ADDR_BYTES_MAX;
use crate::raft::forward::MembershipView;
use crate::raft::types::{CertusNode, NodeId};

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

/// `AddLearner`: the new member's id (from 1) and addresses (`ip:port`, bounded).
pub fn add_learner(request: v1::AddLearnerRequest) -> Result<(NodeId, CertusNode), Status> {
    if request.id == 0 {
        return Err(status(
            Code::InvalidArgument,
            "invalid-argument",
            "id: node ids start at 1",
        ));
    }
    for (field, addr) in [
        ("grpc_addr", &request.grpc_addr),
        ("http_addr", &request.http_addr),
    ] {
        if addr.len() > MEMBER_ADDR_BYTES_MAX {
            return Err(status(
                Code::InvalidArgument,
                "invalid-argument",
                format!(
                    "{field}: {} bytes; an ip:port address is at most {MEMBER_ADDR_BYTES_MAX}",
                    addr.len()
                ),
            ));
        }
        if addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(status(
                Code::InvalidArgument,
                "invalid-argument",
                format!("{field}: {addr:?} is not an ip:port address"),
            ));
        }
    }
    Ok((
        request.id,
        CertusNode {
            grpc_addr: request.grpc_addr,
            http_addr: request.http_addr,
        },
    ))
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
