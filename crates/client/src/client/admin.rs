//! `certus.v1.Admin`: the cluster's status, membership changes and snapshots.

use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::{
    AddLearnerRequest, ChangeMembershipRequest, ExportSnapshotChunk, ExportSnapshotRequest,
    MembershipReply, ReloadReply, ReloadRequest, SetMemberAddressRequest, StatusReply,
    StatusRequest, TriggerSnapshotReply, TriggerSnapshotRequest,
};
use tonic::codec::Streaming;

use super::call::rpcs;
use crate::{Client, ClientError};

rpcs! { AdminClient::new =>
    "Admin/Status": status(StatusRequest) -> StatusReply;
    "Admin/AddLearner": add_learner(AddLearnerRequest) -> MembershipReply;
    "Admin/ChangeMembership": change_membership(ChangeMembershipRequest) -> MembershipReply;
    "Admin/TriggerSnapshot": trigger_snapshot(TriggerSnapshotRequest) -> TriggerSnapshotReply;
    "Admin/ExportSnapshot":
        export_snapshot(ExportSnapshotRequest) -> Streaming<ExportSnapshotChunk>;
    "Admin/SetMemberAddress": set_member_address(SetMemberAddressRequest) -> MembershipReply;
    "Admin/Reload": reload(ReloadRequest) -> ReloadReply;
}

impl Client {
    /// The cluster's status as one node sees it: the leader's view when the leader answers,
    /// otherwise any node's (with retries like every cluster call).
    pub async fn status(&self) -> Result<StatusReply, ClientError> {
        self.call(StatusRequest {}).await
    }

    /// The status of the node at `endpoint`, which need not be one of the client's endpoints.
    /// One attempt, never sent to another node: an unreachable node is reported as
    /// [`ClientError::Unavailable`].
    pub async fn status_of(&self, endpoint: &str) -> Result<StatusReply, ClientError> {
        let timeout = self.config().attempt_timeout;
        self.call_one(endpoint, timeout, StatusRequest {}).await
    }

    /// Adds node `id` as a learner with the given addresses (`host:port`, the host an IP address
    /// or a host name); the node answers once
    /// the learner has caught up. Attempts time out after
    /// [`ClientConfig::admin_timeout`](crate::ClientConfig::admin_timeout).
    pub async fn add_learner(
        &self,
        id: u64,
        grpc_addr: impl Into<String>,
        http_addr: impl Into<String>,
    ) -> Result<MembershipReply, ClientError> {
        let request = AddLearnerRequest {
            id,
            grpc_addr: grpc_addr.into(),
            http_addr: http_addr.into(),
        };
        self.call_with(self.admin_budget(), request).await
    }

    /// Records new addresses (`host:port`) for member `id`; `None` keeps the current one. The
    /// node must answer at its (new) gRPC address (refused with `member-unreachable` or
    /// `member-id-mismatch` otherwise). Attempts time out after
    /// [`ClientConfig::admin_timeout`](crate::ClientConfig::admin_timeout).
    pub async fn set_member_address(
        &self,
        id: u64,
        grpc_addr: Option<String>,
        http_addr: Option<String>,
    ) -> Result<MembershipReply, ClientError> {
        let request = SetMemberAddressRequest {
            id,
            grpc_addr: grpc_addr.unwrap_or_default(),
            http_addr: http_addr.unwrap_or_default(),
        };
        self.call_with(self.admin_budget(), request).await
    }

    /// Makes `voters` the voters. Each must already be a member (refused with `not-a-member`
    /// otherwise); members left out become learners if `retain`, and leave otherwise.
    /// Attempts time out after [`ClientConfig::admin_timeout`](crate::ClientConfig::admin_timeout).
    pub async fn change_membership(
        &self,
        voters: impl IntoIterator<Item = u64>,
        retain: bool,
    ) -> Result<MembershipReply, ClientError> {
        let request = ChangeMembershipRequest {
            voters: voters.into_iter().collect(),
            retain,
        };
        self.call_with(self.admin_budget(), request).await
    }

    /// Makes the node at `endpoint` build a snapshot now (and compact its log). One attempt,
    /// timing out after [`ClientConfig::admin_timeout`](crate::ClientConfig::admin_timeout).
    pub async fn trigger_snapshot(
        &self,
        endpoint: &str,
    ) -> Result<TriggerSnapshotReply, ClientError> {
        let timeout = self.config().admin_timeout;
        self.call_one(endpoint, timeout, TriggerSnapshotRequest {})
            .await
    }

    /// A consistent copy of the replicated state (after a read barrier, at one applied index),
    /// from the node at `endpoint`, or from any node (retried like a read) when `None`: a
    /// stream of one header, then the snapshot's bytes in chunks. Opening it times out after
    /// [`ClientConfig::admin_timeout`](crate::ClientConfig::admin_timeout); the stream itself
    /// is not retried. Refused with `ct-entries-missing` by a node whose CT database lacks
    /// entries the state no longer holds (ask another node).
    pub async fn export_snapshot(
        &self,
        endpoint: Option<&str>,
    ) -> Result<Streaming<ExportSnapshotChunk>, ClientError> {
        match endpoint {
            Some(endpoint) => {
                let timeout = self.config().admin_timeout;
                self.call_one(endpoint, timeout, ExportSnapshotRequest {})
                    .await
            }
            None => {
                self.call_with(self.admin_budget(), ExportSnapshotRequest {})
                    .await
            }
        }
    }

    /// Makes the node at `endpoint` re-read its certificates, tokens and client limits (as
    /// SIGHUP does): the reply names what changed, and what changed but is read only at start.
    /// A file that does not load is `FAILED_PRECONDITION` (`reload-failed`) and changes nothing.
    /// One attempt, never sent to another node.
    pub async fn reload(&self, endpoint: &str) -> Result<ReloadReply, ClientError> {
        let timeout = self.config().attempt_timeout;
        self.call_one(endpoint, timeout, ReloadRequest {}).await
    }
}
