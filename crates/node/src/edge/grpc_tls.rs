//! The gRPC port's TLS handshakes: each connection accepted is handshaken with the server
//! configuration in force at that moment ([`LiveServerConfig`], which a reload replaces), then
//! handed to tonic, which reads the client's certificate from the TLS stream for the
//! authorization layer (`TlsConnectInfo`). The ALPN is HTTP/2 (`h2`).
//!
//! Handshakes run side by side, each within [`GRPC_HANDSHAKE_TIMEOUT`]: a slow or silent client
//! holds up nobody else.

use std::net::SocketAddr;

use futures_util::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tracing::{debug, warn};

use crate::edge::tls::LiveServerConfig;
use crate::limits::{GRPC_HANDSHAKE_TIMEOUT, GRPC_TLS_READY_QUEUE_MAX};
use crate::ordered_watch as watch;
use crate::stop::stopped;

/// The TLS connections of `listener`, until `stop`.
pub(crate) fn incoming(
    listener: TcpListener,
    tls: LiveServerConfig,
    stop: watch::Receiver<bool>,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> {
    let (ready, handshaken) = tokio::sync::mpsc::channel(GRPC_TLS_READY_QUEUE_MAX);
    tokio::spawn(accept_loop(listener, tls, ready, stop));
    futures_util::stream::unfold(handshaken, |mut handshaken| async move {
        let stream = handshaken.recv().await?;
        Some((Ok(stream), handshaken))
    })
}

async fn accept_loop(
    listener: TcpListener,
    tls: LiveServerConfig,
    ready: tokio::sync::mpsc::Sender<TlsStream<TcpStream>>,
    stop: watch::Receiver<bool>,
) {
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = stopped(stop.clone()) => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    warn!(%error, "gRPC accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(handshake(stream, peer, tls.acceptor(), ready.clone()));
    }
}

async fn handshake(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    ready: tokio::sync::mpsc::Sender<TlsStream<TcpStream>>,
) {
    match tokio::time::timeout(GRPC_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            // The server has stopped when nobody takes it: the connection is closed.
            let _ = ready.send(stream).await;
        }
        Ok(Err(error)) => debug!(%peer, %error, "gRPC TLS handshake failed"),
        Err(_) => debug!(%peer, "gRPC TLS handshake timed out"),
    }
}
