//! The node's HTTP listeners on real sockets: the HTTP port (plain HTTP, or HTTPS with the node's
//! cluster certificate or with the certificate `[http] cert_file` names), and the plain-HTTP
//! ACME listener (`acme_http_addr`), which serves `/.well-known/acme-challenge/{token}` only.
//!
//! Every connection is HTTP/1.1 (hyper's server) under the same bounds, from `[http]`
//! ([`HttpSetup`]):
//! - the headers of each request must arrive within `header_read_timeout_ms`, counted from the
//!   connection's start or the end of the previous answer (hyper's header timer), so a connection
//!   that idles or stalls mid-headers is closed when it runs out;
//! - the body must arrive within `body_read_timeout_ms` after the headers ([`DeadlineBody`]): a
//!   route reading it answers 408 with a JSON body, and the connection is closed;
//! - one client IP address has at most `connections_per_client_max` connections open on each
//!   listener ([`ConnectionCounts`]); a connection past it is closed at once;
//! - an HTTPS client has [`HTTPS_HANDSHAKE_TIMEOUT`] to finish the TLS handshake.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::{debug, warn};

use crate::config::{HttpSetup, NodeConfig};
use crate::edge::http::PeerCertificate;
use crate::edge::tls::LiveServerConfig;
use crate::errors::BodyTimeout;
use crate::limits::HTTPS_HANDSHAKE_TIMEOUT;
use crate::metrics::Metrics;
use crate::ordered_watch as watch;
use crate::raft::replica::Replica;
use crate::raft::types::NodeId;
use crate::stop::stopped;

/// Why the HTTP listeners did not start (the node reports it as its own start error).
#[derive(Debug)]
pub enum ListenError {
    /// A listening address could not be bound.
    Bind {
        /// Where.
        addr: String,
        /// Why.
        reason: String,
    },
}

/// Starts the HTTP port's listener and, when `config.acme_http_addr` is set, the ACME listener;
/// returns their accept loops. A port that cannot be bound is a [`ListenError`]; the HTTP port's
/// TLS (`https`) was read with the node's other files (`crate::edge::reload`); the HTTP port
/// serves `router` (`crate::edge::http::node_router`).
pub(crate) async fn serve_http(
    config: &NodeConfig,
    https: Option<LiveServerConfig>,
    router: Router,
    replica: Arc<Replica>,
    metrics: Arc<Metrics>,
    stop: watch::Receiver<bool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, ListenError> {
    let listener = bind(config.http_addr).await?;
    // Bind every port before serving any, so a node that cannot listen starts nothing.
    let acme_listener = match config.acme_http_addr {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let tasks = Arc::clone(&replica.tasks);
    let mut servers = vec![tasks.spawn(
        "HTTP listener",
        accept_loop(
            Listener {
                id: config.id,
                name: "HTTP",
                tls: https,
                setup: config.http.clone(),
            },
            listener,
            router,
            stop.clone(),
        ),
    )];
    if let Some(listener) = acme_listener {
        servers.push(tasks.spawn(
            "ACME HTTP listener",
            accept_loop(
                Listener {
                    id: config.id,
                    name: "ACME HTTP",
                    tls: None,
                    setup: config.http.clone(),
                },
                listener,
                crate::edge::http::acme_router(replica, metrics),
                stop,
            ),
        ));
    }
    Ok(servers)
}

async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ListenError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| ListenError::Bind {
            addr: addr.to_string(),
            reason: error.to_string(),
        })
}

/// One listener's settings.
struct Listener {
    id: NodeId,
    /// What the logs call it.
    name: &'static str,
    /// Its TLS, if it speaks HTTPS (replaced by a reload; each handshake takes the current one).
    tls: Option<LiveServerConfig>,
    setup: HttpSetup,
}

async fn accept_loop(
    listener: Listener,
    socket: tokio::net::TcpListener,
    router: Router,
    stop: watch::Receiver<bool>,
) {
    let listener = Arc::new(listener);
    let counts = ConnectionCounts::new(listener.setup.connections_per_client_max);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = stopped(stop.clone()) => return,
            accepted = socket.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    warn!(id = listener.id, %error, "{} accept failed", listener.name);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(open) = counts.open(peer.ip()) else {
            debug!(
                id = listener.id,
                %peer,
                "{}: closing a connection past the client's limit",
                listener.name
            );
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            Arc::clone(&listener),
            stream,
            peer,
            router.clone(),
            stop.clone(),
            open,
        ));
    }
}

/// One connection, from the TLS handshake (if any) to its close; `_open` counts it for its peer
/// until then.
async fn connection(
    listener: Arc<Listener>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    stop: watch::Receiver<bool>,
    _open: OpenConnection,
) {
    let Some(live) = &listener.tls else {
        serve_connection(&listener, stream, peer, router, None, stop).await;
        return;
    };
    let acceptor = live.acceptor();
    let stream = match tokio::time::timeout(HTTPS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
    {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            debug!(id = listener.id, %peer, %error, "HTTPS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|der| PeerCertificate(Arc::new(der.as_ref().to_vec())));
    serve_connection(&listener, stream, peer, router, certificate, stop).await;
}

/// Serves HTTP/1.1 on `io` until the client leaves, a bound runs out or the node stops. Each
/// request carries the connection's verified client certificate (if any) for the authorization
/// layer, and a body with the body deadline.
async fn serve_connection<I>(
    listener: &Listener,
    io: I,
    peer: SocketAddr,
    router: Router,
    certificate: Option<PeerCertificate>,
    stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let body_timeout = listener.setup.body_read_timeout();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut request =
            request.map(|body| axum::body::Body::new(DeadlineBody::new(body, body_timeout)));
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        tower_service::Service::call(&mut router.clone(), request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(listener.setup.header_read_timeout())
        .keep_alive(true);
    let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        // Polled in order, as every select of the node: the connection first, then the stop.
        biased;
        result = connection.as_mut() => {
            if let Err(error) = result {
                debug!(id = listener.id, %peer, %error, "{} connection ended", listener.name);
            }
        }
        () = stopped(stop) => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// How many connections each client IP address has open on one listener, bounded.
#[derive(Debug, Clone)]
struct ConnectionCounts {
    max: usize,
    open: Arc<Mutex<BTreeMap<IpAddr, usize>>>,
}

impl ConnectionCounts {
    fn new(max: usize) -> ConnectionCounts {
        assert!(
            max >= 1,
            "a listener admits at least one connection per client"
        );
        ConnectionCounts {
            max,
            open: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// Counts a new connection from `ip`, or `None` when `ip` already has the most allowed.
    fn open(&self, ip: IpAddr) -> Option<OpenConnection> {
        let mut open = self.open.lock().expect("connection counts");
        let count = open.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(OpenConnection {
            counts: self.clone(),
            ip,
        })
    }
}

/// One counted connection; dropping it uncounts it (and forgets a client with none left, so the
/// table holds only clients with connections open).
#[derive(Debug)]
struct OpenConnection {
    counts: ConnectionCounts,
    ip: IpAddr,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock().expect("connection counts");
        let count = open
            .get_mut(&self.ip)
            .expect("an open connection is counted");
        assert!(*count >= 1);
        *count -= 1;
        if *count == 0 {
            open.remove(&self.ip);
        }
    }
}

/// A request body that fails with [`BodyTimeout`] once its deadline passes before its end. The
/// deadline is fixed when the headers arrive; the timer is made only if the body makes a reader
/// wait.
struct DeadlineBody {
    inner: Incoming,
    timeout: Duration,
    deadline: tokio::time::Instant,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            timeout,
            deadline: tokio::time::Instant::now() + timeout,
            sleep: None,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(axum::BoxError::from)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_opens_at_most_the_limit_and_a_closed_connection_frees_its_place() {
        let counts = ConnectionCounts::new(2);
        let ip: IpAddr = [192, 0, 2, 1].into();
        let other: IpAddr = [192, 0, 2, 2].into();
        let first = counts.open(ip).expect("first");
        let second = counts.open(ip).expect("second");
        assert!(counts.open(ip).is_none(), "the third is past the limit");
        let elsewhere = counts
            .open(other)
            .expect("another client has its own count");
        drop(first);
        let third = counts.open(ip).expect("a place was freed");
        drop((second, third, elsewhere));
        assert!(
            counts.open.lock().expect("counts").is_empty(),
            "clients without connections are forgotten"
        );
    }
}
