//! The HTTP endpoints of a node: `/health/live`, `/health/ready`, `/status` and
//! `/.well-known/acme-challenge/{token}`. Errors are JSON bodies with a 4xx or 5xx status.
//!
//! Real sockets only: the simulation reaches nodes over gRPC.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::health::readiness;
use crate::replica::Replica;

/// The routes of one node.
pub fn router(replica: Arc<Replica>) -> Router {
    Router::new()
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/status", get(status))
        .route("/.well-known/acme-challenge/{token}", get(acme_challenge))
        .fallback(not_found)
        .with_state(replica)
}

fn json_error(code: StatusCode, error: &str, message: impl Into<String>) -> Response {
    (
        code,
        axum::Json(json!({ "error": error, "message": message.into() })),
    )
        .into_response()
}

async fn live() -> Response {
    axum::Json(json!({ "live": true })).into_response()
}

async fn ready(State(replica): State<Arc<Replica>>) -> Response {
    let readiness = readiness(&replica);
    let code = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(readiness)).into_response()
}

async fn status(State(replica): State<Arc<Replica>>) -> Response {
    let status = crate::admin_service::status_of(&replica);
    axum::Json(json!({
        "id": status.id,
        "role": status.role,
        "term": status.term,
        "leader_id": status.leader_id,
        "commit_index": status.commit_index,
        "applied_index": status.applied_index,
        "last_log_index": status.last_log_index,
        "snapshot_index": status.snapshot_index,
        "grpc_addr": status.grpc_addr,
        "http_addr": status.http_addr,
        "members": status.members.iter().map(|member| json!({
            "id": member.id,
            "grpc_addr": member.grpc_addr,
            "http_addr": member.http_addr,
            "voter": member.voter,
        })).collect::<Vec<_>>(),
    }))
    .into_response()
}

/// Serves the key authorization of an HTTP-01 token, as RFC 8555 §8.3 asks: `text/plain`-ish
/// bytes, exactly the stored value.
///
/// The read is linearizable when a leader is reachable, so a token acknowledged by any node is
/// served by every node. When no leader is reachable the node still answers from its own
/// applied state: a validator is better served by a token that is there than by an error.
async fn acme_challenge(
    State(replica): State<Arc<Replica>>,
    Path(token): Path<String>,
) -> Response {
    let token = match certus_core::ChallengeToken::new(token) {
        Ok(token) => token,
        Err(error) => {
            return json_error(StatusCode::BAD_REQUEST, "invalid-token", error.to_string());
        }
    };
    if let Err(error) = replica.read_barrier().await {
        tracing::debug!(%error, "serving an ACME challenge from local state");
    }
    let found = replica.reader.read(|applied| {
        applied
            .state
            .challenge(&token)
            .map(|challenge| challenge.key_authorization.as_str().to_owned())
    });
    match found {
        Some(key_authorization) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            key_authorization,
        )
            .into_response(),
        None => json_error(
            StatusCode::NOT_FOUND,
            "unknown-token",
            format!("no challenge token {:?}", token.as_str()),
        ),
    }
}

async fn not_found() -> Response {
    json_error(StatusCode::NOT_FOUND, "not-found", "no such endpoint")
}
