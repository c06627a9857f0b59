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
        let timeout = self.config().attempt_timeout;
        let request = HealthCheckRequest {
            service: String::new(),
        };
        let reply = self.call_one(endpoint, timeout, request).await?;
        Ok(ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown))
    }
}
