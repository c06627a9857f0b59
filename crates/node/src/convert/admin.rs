//! `certus.v1.Admin`: membership requests checked before anything reaches Raft, and the
//! membership and roles for the wire.

use std::collections::BTreeSet;

use certus_proto::v1;
use openraft::ServerState;
use tonic::{Code, Status};

use crate::address::MemberAddr;
use crate::errors::status;
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
