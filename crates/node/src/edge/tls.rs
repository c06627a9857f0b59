//! Transport security: the cluster CA and this node's certificate, read from files; the rustls
//! server configurations made from them (gRPC and HTTPS; a reload replaces them in a
//! [`LiveServerConfig`]), tonic's client configuration for dialling peers ([`PeerTls`]); and
//! the layer that authorizes every gRPC call ([`crate::edge::security`]).
//!
//! The gRPC server asks for a client certificate but also lets a connection without one
//! through the handshake, so that programs holding a bearer token can call, and health checks
//! need nothing; the authorization layer then refuses any call the caller's identity does not
//! allow. Peers (the Raft transport, forwarding, CT peer reads) always present the node's own
//! certificate, whose `node` role is the only one the Raft service accepts.
//!
//! The simulation runs in plain text: madsim's network has no TLS.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tonic::transport::Endpoint;

/// The `[tls]` table of a node's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSetup {
    /// The cluster CA's certificate (PEM): peers and clients must hold a certificate it signed.
    pub ca_cert_file: std::path::PathBuf,
    /// This node's certificate (PEM; the chain up to, not including, the CA). Its subject
    /// alternative names must cover the addresses peers and clients dial, and it must be valid
    /// for both server and client authentication with the organization `node`.
    pub cert_file: std::path::PathBuf,
    /// This node's private key (PKCS#8 PEM).
    pub key_file: std::path::PathBuf,
    /// Serve the HTTP port over TLS too (default), with the node's certificate or the one
    /// `[http] cert_file` names. Set false to serve it in plain text behind a TLS-terminating
    /// proxy; the routes that need an identity then accept only bearer tokens. ACME validators
    /// fetch challenges over plain HTTP from the ACME listener (`acme_http_addr`) either way.
    #[serde(default = "https_by_default")]
    pub https: bool,
}

fn https_by_default() -> bool {
    true
}

/// The PEM files of a [`TlsSetup`], read and checked.
#[derive(Clone)]
pub struct TlsMaterial {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    https: bool,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TlsMaterial")
            .field("https", &self.https)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path, what: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|error| format!("tls.{what}: cannot read {}: {error}", path.display()))
}

impl TlsMaterial {
    /// Reads the files of `setup`; a missing file, or one that holds no certificate or key, is
    /// an error naming it.
    pub fn load(setup: &TlsSetup) -> Result<TlsMaterial, String> {
        let material = TlsMaterial {
            ca_pem: read(&setup.ca_cert_file, "ca_cert_file")?,
            cert_pem: read(&setup.cert_file, "cert_file")?,
            key_pem: read(&setup.key_file, "key_file")?,
            https: setup.https,
        };
        material.check()?;
        Ok(material)
    }

    /// Material from PEM text (tests, `certus up`).
    pub fn from_pem(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<TlsMaterial, String> {
        let material = TlsMaterial {
            ca_pem: ca_pem.to_owned(),
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            https: true,
        };
        material.check()?;
        Ok(material)
    }

    fn check(&self) -> Result<(), String> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certificates = |pem: &str, what: &str| {
            let found = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| format!("tls.{what}: {error}"))?;
            if found.is_empty() {
                return Err(format!("tls.{what}: no certificate in it"));
            }
            Ok(found)
        };
        certificates(&self.ca_pem, "ca_cert_file")?;
        certificates(&self.cert_pem, "cert_file")?;
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|error| format!("tls.key_file: {error}"))?;
        Ok(())
    }

    /// Whether the HTTP port is served over TLS.
    pub fn https(&self) -> bool {
        self.https
    }

    /// What peers present and trust.
    pub fn peer_tls(&self) -> PeerTls {
        #[cfg(not(madsim))]
        {
            use tonic::transport::{Certificate, ClientTlsConfig, Identity};
            PeerTls(std::sync::Arc::new(std::sync::RwLock::new(Some(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(&self.ca_pem))
                    .identity(Identity::from_pem(&self.cert_pem, &self.key_pem)),
            ))))
        }
        #[cfg(madsim)]
        PeerTls::default()
    }

    /// The gRPC server's rustls configuration: this node's certificate, client certificates
    /// from the CA asked for but not required (tokens and health checks come without), HTTP/2.
    #[cfg(not(madsim))]
    pub fn grpc_server(&self) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
        self.server_config(
            &self.cert_pem,
            &self.key_pem,
            ("tls.cert_file", "tls.key_file"),
            b"h2",
        )
    }

    /// The HTTPS server's rustls configuration: as the gRPC server's, for HTTP/1.1.
    #[cfg(not(madsim))]
    pub fn https_server(&self) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
        self.server_config(
            &self.cert_pem,
            &self.key_pem,
            ("tls.cert_file", "tls.key_file"),
            b"http/1.1",
        )
    }

    /// The HTTPS server's rustls configuration presenting another certificate than the node's
    /// (`[http] cert_file`, a public one): client certificates from the cluster CA are still
    /// asked for, not required. `cert_what` and `key_what` name the files in errors.
    #[cfg(not(madsim))]
    pub fn https_server_presenting(
        &self,
        cert_pem: &str,
        key_pem: &str,
        cert_what: &str,
        key_what: &str,
    ) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
        self.server_config(cert_pem, key_pem, (cert_what, key_what), b"http/1.1")
    }

    /// A server configuration presenting `cert_pem` (its key `key_pem`, which must match it),
    /// asking for client certificates from the CA, speaking `alpn`.
    #[cfg(not(madsim))]
    fn server_config(
        &self,
        cert_pem: &str,
        key_pem: &str,
        (cert_what, key_what): (&str, &str),
        alpn: &[u8],
    ) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            let certificate = certificate.map_err(|error| format!("tls.ca_cert_file: {error}"))?;
            roots
                .add(certificate)
                .map_err(|error| format!("tls.ca_cert_file: {error}"))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::clone(&provider),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|error| format!("tls.ca_cert_file: {error}"))?;
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("{cert_what}: {error}"))?;
        if chain.is_empty() {
            return Err(format!("{cert_what}: no certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|error| format!("{key_what}: {error}"))?;
        // rustls checks that the key is the certificate's.
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|error| format!("{cert_what} and {key_what}: {error}"))?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(std::sync::Arc::new(config))
    }

    /// The PEM texts, to tell which file a reload changed: CA, certificate, key.
    pub(crate) fn pems(&self) -> [&str; 3] {
        [&self.ca_pem, &self.cert_pem, &self.key_pem]
    }
}

/// A server's TLS configuration that a reload replaces: each new handshake takes the current
/// one, connections already open keep the one they started with.
#[cfg(not(madsim))]
#[derive(Debug, Clone)]
pub struct LiveServerConfig(
    std::sync::Arc<std::sync::RwLock<std::sync::Arc<rustls::ServerConfig>>>,
);

#[cfg(not(madsim))]
impl LiveServerConfig {
    /// Starts with `config`.
    pub fn new(config: std::sync::Arc<rustls::ServerConfig>) -> LiveServerConfig {
        LiveServerConfig(std::sync::Arc::new(std::sync::RwLock::new(config)))
    }

    /// The configuration for the next handshake.
    pub fn current(&self) -> std::sync::Arc<rustls::ServerConfig> {
        std::sync::Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// An acceptor for one connection, with the current configuration.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current())
    }

    /// Makes `config` the one new handshakes use.
    pub fn replace(&self, config: std::sync::Arc<rustls::ServerConfig>) {
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
    }
}

/// How this node dials its peers: in plain text, or over TLS with its own certificate. Clones
/// share it: a reload ([`PeerTls::replace`]) changes what every holder dials new connections with.
#[derive(Clone, Default)]
pub struct PeerTls(
    #[cfg(not(madsim))]
    std::sync::Arc<std::sync::RwLock<Option<tonic::transport::ClientTlsConfig>>>,
);

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PeerTls").field(&self.enabled()).finish()
    }
}

impl PeerTls {
    #[cfg(not(madsim))]
    fn current(&self) -> Option<tonic::transport::ClientTlsConfig> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether peers are dialled over TLS.
    pub fn enabled(&self) -> bool {
        #[cfg(not(madsim))]
        return self.current().is_some();
        #[cfg(madsim)]
        false
    }

    /// Dials new connections with `other`'s certificate and CA from now on (a reload); a
    /// connection already open keeps its own.
    pub fn replace(&self, other: &PeerTls) {
        #[cfg(not(madsim))]
        {
            let other = other.current();
            *self
                .0
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = other;
        }
        #[cfg(madsim)]
        let _ = other;
    }

    /// An endpoint for the peer at `addr` (`host:port`).
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        #[cfg(not(madsim))]
        let tls = self.current();
        #[cfg(not(madsim))]
        let scheme = if tls.is_some() { "https" } else { "http" };
        #[cfg(madsim)]
        let scheme = "http";
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|error| error.to_string())?;
        #[cfg(not(madsim))]
        if let Some(tls) = tls {
            return endpoint.tls_config(tls).map_err(|error| error.to_string());
        }
        Ok(endpoint)
    }
}

#[cfg(not(madsim))]
pub use layer::{AuthLayer, AuthService};

#[cfg(not(madsim))]
mod layer {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    use tracing::debug;

    use crate::edge::security::{Authorizer, Refusal, method_permission};

    /// Authorizes every gRPC call before it reaches a service: `UNAUTHENTICATED` without a
    /// known identity, `PERMISSION_DENIED` when the identity's roles do not allow the method
    /// (the reason in the status's `certus-error` metadata, as every refusal of the node), and
    /// an unknown method let through to tonic's `UNIMPLEMENTED` once the caller is known.
    /// Without an authorizer (plain text) it lets every call through.
    #[derive(Debug, Clone)]
    pub struct AuthLayer {
        authorizer: Option<Arc<Authorizer>>,
    }

    impl AuthLayer {
        /// A layer that decides with `authorizer`, or lets everything through without one.
        pub fn new(authorizer: Option<Authorizer>) -> AuthLayer {
            AuthLayer {
                authorizer: authorizer.map(Arc::new),
            }
        }
    }

    impl<S> tower_layer::Layer<S> for AuthLayer {
        type Service = AuthService<S>;
        fn layer(&self, inner: S) -> AuthService<S> {
            AuthService {
                inner,
                authorizer: self.authorizer.clone(),
            }
        }
    }

    /// The service [`AuthLayer`] makes.
    #[derive(Debug, Clone)]
    pub struct AuthService<S> {
        inner: S,
        authorizer: Option<Arc<Authorizer>>,
    }

    type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

    impl<S, B, R> tower_service::Service<http::Request<B>> for AuthService<S>
    where
        S: tower_service::Service<http::Request<B>, Response = http::Response<R>>,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        R: Default + Send + 'static,
    {
        type Response = http::Response<R>;
        type Error = S::Error;
        type Future = BoxFuture<Self::Response, Self::Error>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: http::Request<B>) -> Self::Future {
            let Some(authorizer) = &self.authorizer else {
                return Box::pin(self.inner.call(request));
            };
            let path = request.uri().path();
            let certificates = request
                .extensions()
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(TlsConnectInfo::peer_certs);
            let leaf = certificates
                .as_ref()
                .and_then(|chain| chain.first())
                .map(|der| der.as_ref());
            let authorization = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok());
            let decision = match method_permission(path) {
                // Not a method of this node: once the caller is known, tonic answers
                // UNIMPLEMENTED, which is how gRPC clients detect a feature the server lacks.
                None => authorizer.authenticate(path, leaf, authorization).map(Some),
                Some(permission) => authorizer.check(path, permission, leaf, authorization),
            };
            match decision {
                Ok(identity) => {
                    let mut request = request;
                    if let Some(identity) = identity {
                        request.extensions_mut().insert(identity);
                    }
                    Box::pin(self.inner.call(request))
                }
                Err(refusal) => {
                    debug!(
                        path,
                        reason = refusal.reason(),
                        "refused: {}",
                        refusal.message()
                    );
                    let code = match refusal {
                        Refusal::Unauthenticated(_) => tonic::Code::Unauthenticated,
                        Refusal::Forbidden(_) => tonic::Code::PermissionDenied,
                    };
                    let status =
                        crate::errors::status(code, refusal.reason(), refusal.message().to_owned());
                    Box::pin(std::future::ready(Ok(status.into_http())))
                }
            }
        }
    }
}
