//! Readiness, and the standard gRPC health service (`grpc.health.v1.Health`).
//!
//! Live means: Raft runs and so does every long-running task of the node ([`liveness`]). Ready
//! means: live, a member of the cluster, a leader is known, on the leader a quorum has
//! acknowledged it within twice the longest election timeout, and this node has applied to
//! within [`READY_APPLY_LAG_MAX`] entries of the commit index the leader last reported.
//!
//! The health service answers for every service the node serves, for "" (the node: ready) and
//! for [`LIVENESS_SERVICE_NAME`] (alive), so that a gRPC probe can tell the two apart as
//! Kubernetes' gRPC probes do, by service name.

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

/// The services every node serves, by the names the health checker answers for; "" is the whole
/// node.
const NODE_SERVICE_NAMES: &[&str] = &[
    "",
    "grpc.health.v1.Health",
    "certus.v1.Raft",
    "certus.v1.Leases",
    "certus.v1.Clients",
    "certus.v1.Admin",
    "certus.v1.Sessions",
    "certus.v1.Pipelines",
];

/// The CT log's service, served by a node that runs the log.
const LOG_SERVICE_NAME: &str = "certus.v1.Log";

/// gRPC server reflection, served on real sockets.
#[cfg(not(madsim))]
const REFLECTION_SERVICE_NAMES: &[&str] = &[
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// The health service's name for the node's liveness (not a gRPC service): `SERVING` while
/// [`liveness`] holds.
pub const LIVENESS_SERVICE_NAME: &str = "liveness";

/// The names of every service a node serves: those of every node, the CT log's when it runs
/// one, and reflection on real sockets.
pub fn served_service_names(serves_log: bool) -> Vec<&'static str> {
    let mut names = NODE_SERVICE_NAMES.to_vec();
    if serves_log {
        names.push(LOG_SERVICE_NAME);
    }
    #[cfg(not(madsim))]
    names.extend_from_slice(REFLECTION_SERVICE_NAMES);
    names
}

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

/// Whether this node still works, and why not: what a supervisor restarts a node on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Liveness {
    /// Alive: Raft runs and every task the node needs does.
    pub live: bool,
    /// Why not, when not alive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Judges liveness now: Raft's core has not stopped, and no long-running task of the node
/// ([`crate::tasks::Tasks`]) has ended while the node runs.
pub fn liveness(replica: &Replica) -> Liveness {
    let reason = if let Err(error) = &replica.raft.metrics().borrow().running_state {
        Some(format!("Raft has stopped: {error}"))
    } else {
        let ended = replica.tasks.ended();
        (!ended.is_empty()).then(|| format!("node tasks ended: {}", ended.join(", ")))
    };
    Liveness {
        live: reason.is_none(),
        reason,
    }
}

/// Judges readiness now.
pub fn readiness(replica: &Replica) -> Readiness {
    let commit_index = replica.commit_index();
    let liveness = liveness(replica);
    let metrics = replica.raft.metrics();
    let metrics = metrics.borrow();
    let applied_index = metrics.last_applied.map_or(0, |log_id| log_id.index);
    let leader_id = metrics.current_leader.unwrap_or(0);
    let reason = if let Some(reason) = liveness.reason {
        Some(reason)
    } else if metrics
        .membership_config
        .membership()
        .get_node(&replica.id)
        .is_none()
    {
        Some("this node is not a member of the cluster (removed, or not added yet)".to_owned())
    } else if metrics.current_leader.is_none() {
        Some("no leader is known".to_owned())
    } else if let Some(silence) = quorum_silence(&metrics, replica.cut_off_after_ms()) {
        Some(silence)
    } else if let Some(silence) = leader_silence(
        &metrics,
        replica.millis_since_leader_contact(),
        replica.cut_off_after_ms(),
    ) {
        Some(silence)
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

/// On a leader no quorum has acknowledged for longer than `limit_ms` (or at all yet), why it
/// cannot serve. openraft leaves a leader cut off from the majority leading (it does not step
/// down for want of a quorum): its reads are refused and its writes wait for a commit that
/// cannot come, while the majority has elected another leader.
fn quorum_silence(
    metrics: &openraft::RaftMetrics<crate::raft::types::NodeId, crate::raft::types::CertusNode>,
    limit_ms: u64,
) -> Option<String> {
    if metrics.state != openraft::ServerState::Leader {
        return None;
    }
    match metrics.millis_since_quorum_ack {
        None => Some("this node leads, but no quorum has acknowledged it yet".to_owned()),
        Some(silent_ms) if silent_ms > limit_ms => Some(format!(
            "this node leads, but no quorum has acknowledged it for {silent_ms} ms (cut off from \
             the majority)"
        )),
        Some(_) => None,
    }
}

/// On a node that does not lead, no append from the leader it knows for longer than `limit_ms`
/// (or since it started), why it cannot serve: it is cut off from that leader, so its reads and
/// forwarded writes cannot be served. A follower so cut off soon campaigns and forgets the
/// leader; a learner never campaigns, and would name the old leader for ever.
fn leader_silence(
    metrics: &openraft::RaftMetrics<crate::raft::types::NodeId, crate::raft::types::CertusNode>,
    millis_since_leader_contact: Option<u64>,
    limit_ms: u64,
) -> Option<String> {
    let leader = metrics.current_leader?;
    if leader == metrics.id {
        return None;
    }
    match millis_since_leader_contact {
        None => Some(format!(
            "no append from leader {leader} has reached this node since it started"
        )),
        Some(silent_ms) if silent_ms > limit_ms => Some(format!(
            "no append from leader {leader} for {silent_ms} ms (cut off from it)"
        )),
        Some(_) => None,
    }
}

/// `grpc.health.v1.Health` for one node.
#[derive(Debug, Clone)]
pub struct HealthService {
    replica: Arc<Replica>,
    services: Arc<[&'static str]>,
}

impl HealthService {
    /// The health service of `replica`, which serves `services` ([`served_service_names`]).
    pub fn new(replica: Arc<Replica>, services: Vec<&'static str>) -> HealthService {
        HealthService {
            replica,
            services: services.into(),
        }
    }
}

fn serving_status(replica: &Replica, services: &[&str], service: &str) -> ServingStatus {
    if service == LIVENESS_SERVICE_NAME {
        if liveness(replica).live {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        }
    } else if !services.contains(&service) {
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
        match serving_status(&self.replica, &self.services, &service) {
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
        let services = Arc::clone(&self.services);
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            // Sends the first status at once, then each change; ends when the client goes away.
            let mut last = None;
            loop {
                let now = serving_status(&replica, &services, &service);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_no_quorum_acknowledged_lately_is_not_ready_and_a_follower_is_not_judged_so() {
        let mut metrics = openraft::RaftMetrics::new_initial(1);
        metrics.millis_since_quorum_ack = None;
        assert_eq!(quorum_silence(&metrics, 2000), None, "a follower");
        metrics.state = openraft::ServerState::Leader;
        assert!(
            quorum_silence(&metrics, 2000).is_some_and(|why| why.contains("yet")),
            "a leader never acknowledged"
        );
        metrics.millis_since_quorum_ack = Some(150);
        assert_eq!(quorum_silence(&metrics, 2000), None, "a leader in touch");
        metrics.millis_since_quorum_ack = Some(2000);
        assert_eq!(quorum_silence(&metrics, 2000), None, "at the limit");
        metrics.millis_since_quorum_ack = Some(2001);
        assert!(
            quorum_silence(&metrics, 2000).is_some_and(|why| why.contains("2001 ms")),
            "a leader cut off"
        );
    }

    #[test]
    fn a_node_that_has_not_heard_from_its_leader_lately_is_not_ready() {
        let mut metrics = openraft::RaftMetrics::new_initial(1);
        assert_eq!(
            leader_silence(&metrics, None, 2000),
            None,
            "no leader known"
        );
        metrics.current_leader = Some(1);
        assert_eq!(
            leader_silence(&metrics, None, 2000),
            None,
            "the leader itself"
        );
        metrics.current_leader = Some(2);
        assert!(
            leader_silence(&metrics, None, 2000)
                .is_some_and(|why| why.contains("since it started")),
            "never heard from the leader"
        );
        assert_eq!(leader_silence(&metrics, Some(100), 2000), None, "in touch");
        assert_eq!(
            leader_silence(&metrics, Some(2000), 2000),
            None,
            "at the limit"
        );
        assert!(
            leader_silence(&metrics, Some(2001), 2000)
                .is_some_and(|why| why.contains("leader 2 for 2001 ms")),
            "cut off from the leader"
        );
    }

    #[test]
    fn a_node_with_the_ct_log_names_its_service_and_one_without_does_not() {
        let with_log = served_service_names(true);
        assert!(with_log.contains(&"certus.v1.Log"), "{with_log:?}");
        let without_log = served_service_names(false);
        assert!(!without_log.contains(&"certus.v1.Log"), "{without_log:?}");
        // The log adds its one name to every node's, and takes none away.
        for name in NODE_SERVICE_NAMES {
            assert!(
                with_log.contains(name),
                "{name:?} missing from {with_log:?}"
            );
        }
        assert_eq!(with_log.len(), without_log.len() + 1);
    }
}
