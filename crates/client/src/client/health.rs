//! `grpc.health.v1.Health`: the standard health protocol, asked of one node.

use certus_proto::health::health_check_response::ServingStatus;
use certus_proto::health::health_client::HealthClient;
use certus_proto::health::{HealthCheckRequest, HealthCheckResponse};

use super::call::rpcs;
use crate::{Client, ClientError};

rpcs! { HealthClient::new =>
    "Health/Check": check(HealthCheckRequest) -> HealthCheckResponse;
}

impl Client {
    /// The serving status of the node at `endpoint` (the whole node: service `""`), by the
    /// standard gRPC health protocol. One attempt; a value this client does not know is
    /// reported as [`ServingStatus::Unknown`].
    pub async fn health_check(&self, endpoint: &str) -> Result<ServingStatus, ClientError> {
        self.health_check_of(endpoint, "").await
    }

    /// The serving status of `service` on the node at `endpoint`: a gRPC service's name, `""`
    /// for the node (ready to serve), or `liveness` (the node's Raft and tasks run). One
    /// attempt; a name the node does not serve is refused with `NOT_FOUND`.
    pub async fn health_check_of(
        &self,
        endpoint: &str,
        service: &str,
    ) -> Result<ServingStatus, ClientError> {
        let timeout = self.config().attempt_timeout;
        let request = HealthCheckRequest {
            service: service.to_owned(),
        };
        let reply = self.call_one(endpoint, timeout, request).await?;
        Ok(ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown))
    }
}
