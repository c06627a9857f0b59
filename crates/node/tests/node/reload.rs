//! Reloading a running node's certificates, tokens and client limits: a three-node cluster over
//! mutual TLS; one node's certificate files are replaced and reloaded, and new handshakes on both
//! its ports see the new certificate while a connection opened before keeps working; a bad file
//! (garbage PEM, a key that is not the certificate's) is refused, naming the file, and the
//! certificate in force stays; a token added is accepted and one removed refused; client limits
//! changed take effect; a CA added to the CA file lets its clients in; and `Admin/Reload` does
//! the same for an admin, and no one else.

use std::sync::Arc;
use std::time::Duration;

use certus_node::TlsSetup;
use certus_node::edge::security::{Role, TokenEntry, token_hash};
use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{AcquireRequest, ReloadRequest, StatusRequest};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::support::{self, TransportCa, start_plain_cluster};

const OLD_TOKEN: &str = "b2xkLXRva2VuLW9mLXRoZS1yZWxvYWQtdGVzdA";
const NEW_TOKEN: &str = "bmV3LXRva2VuLW9mLXRoZS1yZWxvYWQtdGVzdA";

async fn channel(
    addr: std::net::SocketAddr,
    ca: &TransportCa,
    identity: Option<&(String, String)>,
) -> Channel {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.pem));
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connects")
}

/// `Admin/Status` on a new connection with `identity`, trusting `ca` for the server: whether
/// the handshake and the call both went through.
async fn status_over_new_connection(
    addr: std::net::SocketAddr,
    ca: &TransportCa,
    identity: &(String, String),
) -> Result<(), String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .identity(Identity::from_pem(&identity.0, &identity.1));
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|error| error.to_string())?;
    AdminClient::new(channel)
        .status(StatusRequest {})
        .await
        .map(|_| ())
        .map_err(|status| status.to_string())
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    request
}

fn reason(status: &tonic::Status) -> &str {
    status
        .metadata()
        .get("certus-error")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// A new TLS handshake with `addr` over rustls (not the node's code), offering `alpn` and a
/// client certificate: the server's leaf certificate (DER) and the protocol it chose.
async fn served_leaf(
    addr: std::net::SocketAddr,
    ca: &TransportCa,
    client: &(String, String),
    alpn: &[u8],
) -> (Vec<u8>, Option<Vec<u8>>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).expect("ca"))
        .expect("root");
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(client.0.as_bytes()).expect("cert")],
            PrivateKeyDer::from_pem_slice(client.1.as_bytes()).expect("key"),
        )
        .expect("client auth");
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::IpAddress(addr.ip().into());
    let stream = connector.connect(name, socket).await.expect("handshake");
    let session = stream.get_ref().1;
    let leaf = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("the server presents a certificate")
        .as_ref()
        .to_vec();
    (leaf, session.alpn_protocol().map(<[u8]>::to_vec))
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a certificate")
        .as_ref()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_tokens_and_limits_are_reloaded_without_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TransportCa::new("Reload test CA");
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    std::fs::write(pki.join("ca.pem"), &ca.pem).expect("ca file");
    let mut first_certs = Vec::new();
    for id in 1..=3 {
        let (cert, key) = ca.issue(&format!("node-{id}"), &["node"]);
        std::fs::write(pki.join(format!("node-{id}.pem")), &cert).expect("cert file");
        std::fs::write(pki.join(format!("node-{id}-key.pem")), key).expect("key file");
        first_certs.push(cert);
    }
    let token = |name: &str, token: &str| TokenEntry {
        name: name.into(),
        roles: vec![Role::Client],
        sha256: token_hash(token),
    };
    let (configs, nodes) = start_plain_cluster(dir.path(), Duration::from_secs(15), |config| {
        config.tls = Some(TlsSetup {
            ca_cert_file: pki.join("ca.pem"),
            cert_file: pki.join(format!("node-{}.pem", config.id)),
            key_file: pki.join(format!("node-{}-key.pem", config.id)),
            https: true,
        });
        config.tokens = vec![token("old", OLD_TOKEN)];
    })
    .await;
    let node = &nodes[2];
    let config = &configs[2];
    let admin = ca.issue("ops", &["admin"]);
    let worker = ca.issue("worker-1", &["worker"]);

    // At start: the node's certificate, HTTP/2 on the gRPC port, HTTP/1.1 on the HTTP port.
    let (leaf, alpn) = served_leaf(config.grpc_addr, &ca, &admin, b"h2").await;
    assert_eq!(leaf, der_of(&first_certs[2]));
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let (leaf, alpn) = served_leaf(config.http_addr, &ca, &admin, b"http/1.1").await;
    assert_eq!(leaf, der_of(&first_certs[2]));
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    // A connection opened before the reload, with a client certificate the gRPC port reads.
    let before = channel(config.grpc_addr, &ca, Some(&admin)).await;
    AdminClient::new(before.clone())
        .status(StatusRequest {})
        .await
        .expect("an admin reads the status");

    // The certificate is renewed (another name, another key) and reloaded.
    let (renewed_cert, renewed_key) = ca.issue("node-3-renewed", &["node"]);
    std::fs::write(pki.join("node-3.pem"), &renewed_cert).expect("cert file");
    std::fs::write(pki.join("node-3-key.pem"), &renewed_key).expect("key file");
    let outcome = node.reload().expect("the renewed certificate loads");
    assert_eq!(outcome.changed, vec!["tls.cert_file", "tls.key_file"]);
    assert!(outcome.ignored.is_empty(), "{outcome:?}");
    let (leaf, _) = served_leaf(config.grpc_addr, &ca, &admin, b"h2").await;
    assert_eq!(
        leaf,
        der_of(&renewed_cert),
        "gRPC presents the new certificate"
    );
    let (leaf, _) = served_leaf(config.http_addr, &ca, &admin, b"http/1.1").await;
    assert_eq!(
        leaf,
        der_of(&renewed_cert),
        "HTTPS presents the new certificate"
    );
    AdminClient::new(before.clone())
        .status(StatusRequest {})
        .await
        .expect("the connection opened before still works");
    // New connections still authenticate by client certificate, and the cluster still
    // forwards this node's writes to the leader.
    LeasesClient::new(channel(config.grpc_addr, &ca, Some(&admin)).await)
        .acquire(AcquireRequest {
            name: "reload/after".into(),
            holder: "reload-test".into(),
            ttl_ms: 10_000,
        })
        .await
        .expect("a write through the reloaded node");

    // Garbage in the certificate file: refused, naming it; the renewed certificate stays.
    std::fs::write(
        pki.join("node-3.pem"),
        "-----BEGIN CERTIFICATE-----\ngarbage\n",
    )
    .expect("cert file");
    let error = node.reload().expect_err("garbage is refused");
    assert!(error.contains("tls.cert_file"), "{error}");
    let (leaf, _) = served_leaf(config.grpc_addr, &ca, &admin, b"h2").await;
    assert_eq!(leaf, der_of(&renewed_cert));
    // A certificate with another certificate's key: refused, naming both files.
    let (other_cert, _) = ca.issue("node-3-other", &["node"]);
    std::fs::write(pki.join("node-3.pem"), &other_cert).expect("cert file");
    let error = node
        .reload()
        .expect_err("a key that is not the certificate's");
    assert!(
        error.contains("tls.cert_file") && error.contains("tls.key_file"),
        "{error}"
    );
    let (leaf, _) = served_leaf(config.http_addr, &ca, &admin, b"http/1.1").await;
    assert_eq!(leaf, der_of(&renewed_cert));

    // Over gRPC: an admin may reload, and a bad file is FAILED_PRECONDITION with the reason.
    let refused = AdminClient::new(channel(config.grpc_addr, &ca, Some(&worker)).await)
        .reload(ReloadRequest {})
        .await
        .expect_err("a worker may not reload");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let refused = AdminClient::new(before.clone())
        .reload(ReloadRequest {})
        .await
        .expect_err("the files are still bad");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(reason(&refused), "reload-failed");
    assert!(refused.message().contains("tls.cert_file"), "{refused:?}");
    std::fs::write(pki.join("node-3.pem"), &renewed_cert).expect("cert file");
    let reply = AdminClient::new(before.clone())
        .reload(ReloadRequest {})
        .await
        .expect("the files are good again")
        .into_inner();
    assert!(reply.changed.is_empty(), "{reply:?}");

    // Tokens: one added is accepted, one removed refused.
    let status_with = |token: &'static str| {
        let channel = before.clone();
        async move {
            AdminClient::new(channel)
                .status(with_token(StatusRequest {}, token))
                .await
        }
    };
    let anonymous = channel(config.grpc_addr, &ca, None).await;
    let acquire_with = |token: &'static str, name: &str| {
        let channel = anonymous.clone();
        let request = with_token(
            AcquireRequest {
                name: name.into(),
                holder: "reload-test".into(),
                ttl_ms: 10_000,
            },
            token,
        );
        async move { LeasesClient::new(channel).acquire(request).await }
    };
    acquire_with(OLD_TOKEN, "reload/old-token")
        .await
        .expect("the old token works");
    let refused = acquire_with(NEW_TOKEN, "reload/new-token")
        .await
        .expect_err("the new token is not known yet");
    assert_eq!(refused.code(), Code::Unauthenticated);
    let mut changed = config.clone();
    changed.tokens = vec![token("new", NEW_TOKEN)];
    let outcome = node.reload_config(&changed).expect("reloads");
    assert_eq!(outcome.changed, vec!["tokens"]);
    acquire_with(NEW_TOKEN, "reload/new-token")
        .await
        .expect("the new token works");
    let refused = acquire_with(OLD_TOKEN, "reload/old-token-2")
        .await
        .expect_err("the old token is gone");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert_eq!(reason(&refused), "unauthenticated");
    // A certificate wins over a token: the admin's status calls are unaffected.
    status_with(OLD_TOKEN).await.expect("certificate first");

    // Client limits: none in flight allowed refuses every client call (peers are exempt).
    changed.client_limits.requests_in_flight_max = 0;
    let outcome = node.reload_config(&changed).expect("reloads");
    assert_eq!(outcome.changed, vec!["client_limits"]);
    let refused = AdminClient::new(before.clone())
        .status(StatusRequest {})
        .await
        .expect_err("no call in flight allowed");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    changed.client_limits = config.client_limits;
    // A setting read only at start is reported, and not applied.
    changed.tick_interval_ms += 1;
    let outcome = node.reload_config(&changed).expect("reloads");
    assert_eq!(outcome.changed, vec!["client_limits"]);
    assert_eq!(outcome.ignored, vec!["tick_interval_ms"]);
    AdminClient::new(before.clone())
        .status(StatusRequest {})
        .await
        .expect("the limits are back");

    // A second CA added to the CA file: its clients get in after the reload, not before.
    let next_ca = TransportCa::new("Reload test CA 2");
    let newcomer = next_ca.issue("ops-2", &["admin"]);
    status_over_new_connection(config.grpc_addr, &ca, &newcomer)
        .await
        .expect_err("a client of an unknown CA");
    std::fs::write(pki.join("ca.pem"), format!("{}{}", ca.pem, next_ca.pem)).expect("CA file");
    let outcome = node.reload().expect("reloads");
    assert_eq!(outcome.changed, vec!["tls.ca_cert_file"]);
    status_over_new_connection(config.grpc_addr, &ca, &newcomer)
        .await
        .expect("a client of the added CA");
    status_over_new_connection(config.grpc_addr, &ca, &admin)
        .await
        .expect("and of the first one");

    support::shutdown(nodes).await;
}
