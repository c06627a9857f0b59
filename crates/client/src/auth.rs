//! How the client proves who it is: TLS with the cluster CA (and a client certificate), or a
//! bearer token sent with every call.

#[cfg(not(madsim))]
use std::task::{Context, Poll};

use tonic::transport::{Channel, Endpoint};

use crate::ClientError;

/// TLS to the cluster: the CA that signed the nodes' certificates, and this client's own
/// certificate and key (PEM) when it authenticates with one.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The cluster CA's certificate, PEM.
    pub ca_pem: String,
    /// This client's certificate and private key, PEM; `None` to authenticate with a token.
    pub identity: Option<(String, String)>,
    /// The name to check the nodes' certificates against, instead of the host dialled.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls")
            .field("identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// A bearer token, for clients that cannot present a certificate. Its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(pub String);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// An endpoint to `endpoint` (`host:port`), over TLS when `tls` is given.
pub(crate) fn endpoint(endpoint: &str, tls: Option<&ClientTls>) -> Result<Endpoint, ClientError> {
    let invalid = |error: &dyn std::fmt::Display| {
        ClientError::InvalidEndpoint(format!("{endpoint:?}: {error}"))
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let built = Endpoint::from_shared(format!("{scheme}://{endpoint}")).map_err(|e| invalid(&e))?;
    #[cfg(not(madsim))]
    if let Some(tls) = tls {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        if let Some(name) = &tls.server_name {
            config = config.domain_name(name.clone());
        }
        return built.tls_config(config).map_err(|e| invalid(&e));
    }
    Ok(built)
}

/// A channel to one node that adds the client's bearer token to every call.
#[cfg(not(madsim))]
#[derive(Debug, Clone)]
pub(crate) struct NodeChannel {
    channel: Channel,
    authorization: Option<http::HeaderValue>,
}

/// Under the simulation calls go in plain text, without tokens.
#[cfg(madsim)]
pub(crate) type NodeChannel = Channel;

/// `channel`, sending `token` (if any) as `authorization: Bearer <token>`.
#[cfg(not(madsim))]
pub(crate) fn node_channel(
    channel: Channel,
    token: Option<&str>,
) -> Result<NodeChannel, ClientError> {
    let authorization = token
        .map(|token| {
            let mut value =
                http::HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| {
                    ClientError::InvalidConfig(
                        "the bearer token must be visible ASCII without spaces".to_owned(),
                    )
                })?;
            value.set_sensitive(true);
            Ok::<_, ClientError>(value)
        })
        .transpose()?;
    Ok(NodeChannel {
        channel,
        authorization,
    })
}

/// `channel` as it is: the simulation has no tokens.
#[cfg(madsim)]
pub(crate) fn node_channel(
    channel: Channel,
    _token: Option<&str>,
) -> Result<NodeChannel, ClientError> {
    Ok(channel)
}

#[cfg(not(madsim))]
impl tower_service::Service<http::Request<tonic::body::Body>> for NodeChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = <Channel as tower_service::Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::poll_ready(&mut self.channel, cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        if let Some(value) = &self.authorization {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value.clone());
        }
        tower_service::Service::call(&mut self.channel, request)
    }
}
