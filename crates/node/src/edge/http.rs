//! The HTTP endpoints of a node: `/health/live`, `/health/ready`, `/status`,
//! `/.well-known/acme-challenge/{token}` and `/metrics` (with the CT log's `/ct/v1/` routes on a
//! node that runs it), and the ACME listener's one route ([`acme_router`]). Errors are JSON
//! bodies with a 4xx or 5xx status: unknown paths (404), wrong methods (405), parameters that do
//! not parse (400) and refusals alike.
//!
//! Real sockets only: the simulation reaches nodes over gRPC.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::acme::AcmeServer;
use crate::ct::node::CtNode;
use crate::edge::security::{Authorizer, Refusal};
use crate::metrics::{LocalTree, Metrics, NodeSample, OTHER_PATH};
use crate::raft::replica::Replica;
use crate::services::health::{liveness, readiness};

/// Every HTTP route of one node, each request counted: the routes of [`router`], `/metrics`,
/// the CT log's `/ct/v1/` routes when `ct` is given, and the ACME resources under `/acme/`
/// when `acme` is.
///
/// With an `authorizer` (a node with TLS), routes that are not public need an identity
/// ([`crate::edge::security::http_permission`]); refusals are counted like any answer.
pub fn node_router(
    replica: Arc<Replica>,
    metrics: Arc<Metrics>,
    ct: Option<Arc<CtNode>>,
    acme: Option<Arc<AcmeServer>>,
    authorizer: Option<Arc<Authorizer>>,
) -> Router {
    let mut routes = router(Arc::clone(&replica)).merge(metrics_router(
        Arc::clone(&replica),
        Arc::clone(&metrics),
        ct.clone(),
    ));
    if let Some(acme) = acme {
        routes = crate::acme::http::router(Arc::clone(&replica), acme).merge(routes);
    }
    if let Some(ct) = ct {
        routes = crate::ct::http::router(replica, ct).merge(routes);
    }
    // After every merge: it applies to the routes the router has when it is called.
    routes = routes.method_not_allowed_fallback(method_not_allowed);
    if let Some(authorizer) = authorizer {
        routes = routes.layer(axum::middleware::from_fn_with_state(authorizer, authorize));
    }
    count_requests(routes, metrics)
}

/// The plain-HTTP ACME listener's routes: `/.well-known/acme-challenge/{token}` only (every
/// other path a JSON 404), public, each request counted with the HTTP port's.
pub fn acme_router(replica: Arc<Replica>, metrics: Arc<Metrics>) -> Router {
    let routes = Router::new()
        .route("/.well-known/acme-challenge/{token}", get(acme_challenge))
        .fallback(not_found)
        .with_state(replica)
        .method_not_allowed_fallback(method_not_allowed);
    count_requests(routes, metrics)
}

/// The verified client certificate (leaf, DER) of the TLS connection a request came on, put in
/// each request's extensions by the HTTPS listener.
#[derive(Debug, Clone)]
pub struct PeerCertificate(pub Arc<Vec<u8>>);

async fn authorize(
    State(authorizer): State<Arc<Authorizer>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    let permission = crate::edge::security::http_permission(&path);
    let certificate = request.extensions().get::<PeerCertificate>().cloned();
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match authorizer.check(
        &path,
        permission,
        certificate.as_ref().map(|der| der.0.as_slice()),
        authorization,
    ) {
        Ok(_) => next.run(request).await,
        Err(refusal) => {
            let code = match refusal {
                Refusal::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
            };
            let mut response = json_error(code, refusal.reason(), refusal.message());
            if code == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"certus\""),
                );
            }
            response
        }
    }
}

/// `/metrics`: the counters of `metrics` and the node's levels read at scrape time, in the
/// Prometheus text format.
pub fn metrics_router(
    replica: Arc<Replica>,
    metrics: Arc<Metrics>,
    ct: Option<Arc<CtNode>>,
) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state((replica, metrics, ct))
}

/// Counts every request `router` answers in `certus_http_requests_total{path, status}`, `path`
/// being the route template that matched (`OTHER_PATH` when none did). Apply it to the final
/// router, after every merge, so that no route escapes it.
pub fn count_requests(router: Router, metrics: Arc<Metrics>) -> Router {
    router.layer(axum::middleware::from_fn_with_state(metrics, count))
}

async fn count(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    // The template, never the URI: a token or a query must not become a label value.
    let path = request
        .extensions()
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_owned());
    let response = next.run(request).await;
    metrics.count_http_request(
        path.as_deref().unwrap_or(OTHER_PATH),
        response.status().as_u16(),
    );
    response
}

type ScrapeState = (Arc<Replica>, Arc<Metrics>, Option<Arc<CtNode>>);

async fn scrape(State((replica, metrics, ct)): State<ScrapeState>) -> Response {
    let sample = NodeSample::of(&replica, ct.as_deref().map(|ct| ct as &dyn LocalTree));
    match metrics.render(&sample) {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(prometheus::TEXT_FORMAT),
            )],
            text,
        )
            .into_response(),
        Err(error) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot render the metrics: {error}"),
        ),
    }
}

/// The routes of one node without `/metrics`, the CT log and request counting (see
/// [`node_router`] for all of them).
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

async fn live(State(replica): State<Arc<Replica>>) -> Response {
    let liveness = liveness(&replica);
    let code = if liveness.live {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(liveness)).into_response()
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
    let status = crate::services::admin::status_of(&replica);
    // From this node's applied state: what it holds, not a linearizable count.
    let (acme_accounts, acme_orders) = replica.reader.read(|applied| {
        let acme = applied.state.acme();
        (acme.account_count(), acme.order_count())
    });
    axum::Json(json!({
        "acme": { "accounts": acme_accounts, "orders": acme_orders },
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
    token: Result<Path<String>, PathRejection>,
) -> Response {
    let token = match token {
        Ok(Path(token)) => token,
        Err(rejection) => {
            return json_error(
                StatusCode::BAD_REQUEST,
                "invalid-token",
                rejection.body_text(),
            );
        }
    };
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

/// A known path asked with a method it does not answer. Axum adds the `Allow` header.
async fn method_not_allowed(request: Request) -> Response {
    json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        format!(
            "{} does not answer {}",
            request.uri().path(),
            request.method()
        ),
    )
}
