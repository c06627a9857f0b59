//! The HTTP endpoints of a node: `/health/live`, `/health/ready`, `/status`,
//! `/.well-known/acme-challenge/{token}` and `/metrics` (with the CT log's `/ct/v1/` routes on a
//! node that runs it). Errors are JSON bodies with a 4xx or 5xx status.
//!
//! Real sockets only: the simulation reaches nodes over gRPC.

use std::sync::Arc;

use axum::Router;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::ct_log::CtNode;
use crate::health::readiness;
use crate::metrics::{Metrics, NodeSample, OTHER_PATH};
use crate::replica::Replica;
use crate::security::{Authorizer, Refusal};

/// Every HTTP route of one node, each request counted: the routes of [`router`], `/metrics`,
/// and the CT log's `/ct/v1/` routes when `ct` is given.
///
/// With an `authorizer` (a node with TLS), routes that are not public need an identity
/// ([`crate::security::http_permission`]); refusals are counted like any answer.
pub fn node_router(
    replica: Arc<Replica>,
    metrics: Arc<Metrics>,
    ct: Option<Arc<CtNode>>,
    authorizer: Option<Arc<Authorizer>>,
) -> Router {
    let mut routes = router(Arc::clone(&replica)).merge(metrics_router(
        Arc::clone(&replica),
        Arc::clone(&metrics),
        ct.clone(),
    ));
    if let Some(ct) = ct {
        routes = crate::ct_http::router(replica, ct).merge(routes);
    }
    if let Some(authorizer) = authorizer {
        routes = routes.layer(axum::middleware::from_fn_with_state(authorizer, authorize));
    }
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
    let permission = crate::security::http_permission(&path);
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
    let sample = NodeSample::of(&replica, ct.as_deref());
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use certus_core::Command;
    use certus_core::ct::CtCommand;
    use certus_ct::chain::{AcceptedRoots, ChainLimits};
    use certus_ct::signer::EcdsaP256Signer;
    use certus_store::{CtDatabase, SimDisk};

    use super::*;
    use crate::ct_log::CtSetup;
    use crate::metrics::tests::{parse, value_of};
    use crate::{Leader, Node, NodeConfig};

    fn free_addr() -> std::net::SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("an ephemeral port")
    }

    fn ct_node() -> Arc<CtNode> {
        let pem = EcdsaP256Signer::generate_pkcs8_pem().expect("a key");
        let setup = CtSetup {
            signer: Arc::new(EcdsaP256Signer::from_pkcs8_pem(&pem).expect("the key loads")),
            roots: AcceptedRoots::new(),
            limits: ChainLimits::default(),
        };
        let db = CtDatabase::open(
            Arc::new(SimDisk::new()),
            Arc::new(certus_store::SimFiles::new()),
        )
        .expect("an empty CT database");
        Arc::new(CtNode::new(setup, db, Arc::new(Metrics::new())).expect("a CT node"))
    }

    /// (status, body) of a request to `addr`.
    fn request(
        agent: &ureq::Agent,
        method: &str,
        addr: std::net::SocketAddr,
        path: &str,
    ) -> (u16, String) {
        let url = format!("http://{addr}{path}");
        let response = match method {
            "GET" => agent.get(&url).call(),
            "POST" => agent
                .post(&url)
                .send_json(json!({ "chain": ["Z2FyYmFnZQ=="] })),
            other => panic!("method {other}"),
        };
        let mut response = response.expect("an answer");
        let status = response.status().as_u16();
        (
            status,
            response.body_mut().read_to_string().expect("a body"),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metrics_count_requests_by_route_template_and_read_the_node_at_scrape_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = NodeConfig::new(1, free_addr(), free_addr(), dir.path().join("node-1"));
        let node = Node::start(config.clone()).await.expect("node starts");
        node.initialize(BTreeMap::from([(1, config.member())]))
            .await
            .expect("initialize");
        let deadline = Instant::now() + Duration::from_secs(10);
        while node.replica().leader() != Some(Leader::Me) {
            assert!(Instant::now() < deadline, "no leader within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let replica = Arc::clone(node.replica());
        let metrics = Arc::new(Metrics::new());
        let app = node_router(
            Arc::clone(&replica),
            Arc::clone(&metrics),
            Some(ct_node()),
            None,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        let frozen = replica
            .write(vec![Command::Ct(CtCommand::SetFrozen { frozen: true })])
            .await
            .expect("freeze");
        assert_eq!(frozen.len(), 1);

        let (first, second) = tokio::task::spawn_blocking(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build()
                .into();
            for (method, path, expected) in [
                ("GET", "/health/live", 200),
                ("GET", "/.well-known/acme-challenge/tok-one", 404),
                ("GET", "/.well-known/acme-challenge/tok-two", 404),
                ("GET", "/ct/v1/get-sth", 503),
                ("POST", "/ct/v1/add-chain", 400),
                ("GET", "/no/such/path?secret=1", 404),
            ] {
                let (status, body) = request(&agent, method, addr, path);
                assert_eq!(status, expected, "{method} {path}: {body}");
            }
            let first = request(&agent, "GET", addr, "/metrics");
            let second = request(&agent, "GET", addr, "/metrics");
            (first, second)
        })
        .await
        .expect("client thread");

        assert_eq!(first.0, 200, "{}", first.1);
        let lines = parse(&first.1);
        let count = |lines: &[crate::metrics::tests::Line], path, status| {
            value_of(
                lines,
                "certus_http_requests_total",
                &[("path", path), ("status", status)],
            )
        };
        assert_eq!(count(&lines, "/health/live", "200"), Some(1.0));
        assert_eq!(
            count(&lines, "/.well-known/acme-challenge/{token}", "404"),
            Some(2.0)
        );
        assert_eq!(count(&lines, "/ct/v1/get-sth", "503"), Some(1.0));
        assert_eq!(count(&lines, "/ct/v1/add-chain", "400"), Some(1.0));
        assert_eq!(count(&lines, "other", "404"), Some(1.0));
        // The scrape counts once it is answered, so only the second shows the first.
        assert_eq!(count(&lines, "/metrics", "200"), None);
        for line in &lines {
            for value in line.labels.values() {
                assert!(
                    !value.contains("tok-") && !value.contains("secret") && !value.contains("/no/"),
                    "a raw URI became a label: {line:?}"
                );
            }
        }
        // Levels, read from the node when scraped.
        assert_eq!(value_of(&lines, "certus_is_leader", &[]), Some(1.0));
        let applied = value_of(&lines, "certus_raft_applied_index", &[]).expect("applied");
        assert!(
            applied >= 2.0,
            "membership and the freeze are applied: {applied}"
        );
        assert!(value_of(&lines, "certus_raft_term", &[]).is_some_and(|term| term >= 1.0));
        assert!(value_of(&lines, "certus_raft_commit_index", &[]).is_some_and(|c| c >= applied));
        assert_eq!(value_of(&lines, "certus_ct_frozen", &[]), Some(1.0));
        assert_eq!(value_of(&lines, "certus_ct_next_sequence", &[]), Some(0.0));
        assert_eq!(
            value_of(&lines, "certus_ct_unsequenced_entries", &[]),
            Some(0.0)
        );
        assert_eq!(value_of(&lines, "certus_ct_held_entries", &[]), Some(0.0));
        assert_eq!(
            value_of(&lines, "certus_ct_local_tree_size", &[]),
            Some(0.0)
        );
        assert_eq!(
            value_of(&lines, "certus_ct_local_contiguous_size", &[]),
            Some(0.0)
        );
        assert_eq!(
            value_of(&lines, "certus_ct_serving_tree_size", &[]),
            Some(0.0)
        );
        assert_eq!(
            value_of(&lines, "certus_ct_serving_sth_age_seconds", &[]),
            None,
            "nothing published yet"
        );

        assert_eq!(second.0, 200, "{}", second.1);
        assert_eq!(count(&parse(&second.1), "/metrics", "200"), Some(1.0));

        server.abort();
        node.shutdown().await;
    }
}
