//! The applicants' web server: what answers at `http://NAME/.well-known/acme-challenge/TOKEN`
//! when the names point at the clients, as they would in production.
//!
//! It is stateless (as `acme.sh --stateless` and nginx's stateless mode are): a key
//! authorization is `TOKEN.THUMBPRINT`, and the thumbprint depends only on the name's key, so
//! the server answers any token for a name it knows without being told the tokens. The clients
//! therefore never look at their challenges, and the cluster's tester runs as soon as the
//! makechallenge step completes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The server, listening on loopback until dropped.
#[derive(Debug)]
pub(super) struct Responder {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Responder {
    /// Serves the key authorizations of `thumbprints` (name → thumbprint) on a free loopback
    /// port.
    pub(super) async fn start(thumbprints: HashMap<String, String>) -> Result<Responder, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| format!("the HTTP-01 responder cannot listen: {error}"))?;
        let addr = listener.local_addr().map_err(|error| error.to_string())?;
        let app = Router::new()
            .route(
                "/.well-known/acme-challenge/{token}",
                get(key_authorization),
            )
            .with_state(Arc::new(thumbprints));
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("bench sessions: the HTTP-01 responder stopped: {error}");
            }
        });
        Ok(Responder { addr, task })
    }

    /// Where it listens: every name points here.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn key_authorization(
    State(thumbprints): State<Arc<HashMap<String, String>>>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or_default();
    // A Host header may carry a port; the name is what comes before it.
    let name = host.split(':').next().unwrap_or_default();
    match thumbprints.get(name) {
        Some(thumbprint) => format!("{token}.{thumbprint}").into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("{host:?} is not a name of this bench"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use certus_ca::http01::{Http01Config, Http01Tester, Resolver};

    use super::*;

    #[tokio::test]
    async fn the_clusters_tester_is_satisfied_by_the_responder_for_known_names_only() {
        let responder = Responder::start(HashMap::from([(
            "a.bench.example".to_owned(),
            "THUMB".to_owned(),
        )]))
        .await
        .expect("a responder");
        let tester = Http01Tester::new(Http01Config {
            resolver: Resolver::Static(BTreeMap::from([
                ("a.bench.example".to_owned(), responder.addr()),
                ("b.bench.example".to_owned(), responder.addr()),
            ])),
            timeout: Duration::from_secs(5),
            ..Http01Config::default()
        });
        let outcome = tester.test("a.bench.example", "tok-1", "tok-1.THUMB").await;
        assert!(outcome.is_satisfied(), "{outcome:?}");
        let wrong_key = tester.test("a.bench.example", "tok-1", "tok-1.OTHER").await;
        assert!(!wrong_key.is_satisfied(), "{wrong_key:?}");
        let unknown = tester.test("b.bench.example", "tok-1", "tok-1.THUMB").await;
        assert!(
            matches!(&unknown, certus_ca::http01::TestOutcome::NotSatisfied { reason }
                if reason.contains("404")),
            "{unknown:?}"
        );
    }
}
