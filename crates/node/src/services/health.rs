//! Readiness, and the standard gRPC health service (`grpc.health.v1.Health`).
//!
//! Ready means: a leader is known, and this node has applied to within
//! [`READY_APPLY_LAG_MAX`] entries of the commit index the leader last reported.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use certus_proto::health::health_check_response::ServingStatus;
use certus_proto::health::health_server::Health;
use certus_proto::health::{HealthCheckRequest, HealthCheckResponse};
use futures_util::Stream;
use serde::Serialize;
use tonic::{Request, Response, Status};

use crate::errors::status;
use crate::limits::{HEALTH_SERVICE_NAME_BYTES_MAX, READY_APPLY_LAG_MAX};
use crate::raft::replica::Replica;

/// The services the health checker knows by name; "" is the whole node.
pub const SERVICE_NAMES: &[&str] = &[
    "",
    "certus.v1.Leases",
    "certus.v1.Clients",
    "certus.v1.Admin",
    "certus.v1.Raft",
];

/// Whether this node can serve, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Ready to serve.
    pub ready: bool,
    /// The leader's id, 0 if unknown.
    pub leader_id: u64,
    /// The index this node has applied.
    pub applied_index: u64,
    /// The commit index the leader last reported (or, on the leader, its own).
    pub commit_index: u64,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Judges readiness now.
pub fn readiness(replica: &Replica) -> Readiness {
    let commit_index = replica.commit_index();
    let metrics = replica.raft.metrics();
    let metrics = metrics.borrow();
    let applied_index = metrics.last_applied.map_or(0, |log_id| log_id.index);
    let leader_id = metrics.current_leader.unwrap_or(0);
    let reason = if metrics.running_state.is_err() {
        Some("Raft has stopped".to_owned())
    } else if metrics.current_leader.is_none() {
        Some("no leader is known".to_owned())
    } else if commit_index.saturating_sub(applied_index) > READY_APPLY_LAG_MAX {
        Some(format!(
            "applied index {applied_index} lags commit index {commit_index} by more than {READY_APPLY_LAG_MAX}"
        ))
    } else {
        None
    };
    Readiness {
        ready: reason.is_none(),
        leader_id,
        applied_index,
        commit_index,
        reason,
    }
}

/// `grpc.health.v1.Health` for one node.
#[derive(Debug, Clone)]
pub struct HealthService {
    replica: Arc<Replica>,
}

impl HealthService {
    /// The health service of `replica`.
    pub fn new(replica: Arc<Replica>) -> HealthService {
        HealthService { replica }
    }
}

fn serving_status(replica: &Replica, service: &str) -> ServingStatus {
    if !SERVICE_NAMES.contains(&service) {
        ServingStatus::ServiceUnknown
    } else if readiness(replica).ready {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

/// The service name of a request, refused (INVALID_ARGUMENT) when longer than any name could be,
/// rather than echoed back as unknown.
fn service_name(request: Request<HealthCheckRequest>) -> Result<String, Status> {
    let service = request.into_inner().service;
    if service.len() > HEALTH_SERVICE_NAME_BYTES_MAX {
        return Err(status(
            tonic::Code::InvalidArgument,
            "invalid-argument",
            format!(
                "service: {} bytes; a service name is at most {HEALTH_SERVICE_NAME_BYTES_MAX}",
                service.len()
            ),
        ));
    }
    Ok(service)
}

/// How often a `Watch` stream re-checks readiness.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let service = service_name(request)?;
        match serving_status(&self.replica, &service) {
            ServingStatus::ServiceUnknown => {
                Err(Status::not_found(format!("unknown service {service:?}")))
            }
            known => Ok(Response::new(HealthCheckResponse {
                status: known.into(),
            })),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = service_name(request)?;
        let replica = Arc::clone(&self.replica);
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            // Sends the first status at once, then each change; ends when the client goes away.
            let mut last = None;
            loop {
                let now = serving_status(&replica, &service);
                if last != Some(now) {
                    let response = HealthCheckResponse { status: now.into() };
                    if sender.send(Ok(response)).await.is_err() {
                        break;
                    }
                    last = Some(now);
                }
                tokio::time::sleep(WATCH_INTERVAL).await;
                if sender.is_closed() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream(receiver))))
    }
}

/// A receiver as a stream (tokio-stream's wrapper, without the dependency).
struct ReceiverStream<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> Stream for ReceiverStream<T> {
    type Item = T;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
