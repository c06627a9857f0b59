//! A three-node cluster over mutual TLS: it forms and replicates with node certificates; a call
//! without an identity, with a certificate from another CA, or with roles that do not allow the
//! method is refused; bearer tokens work for programs without certificates; and the HTTP port
//! serves HTTPS with the RFC 6962, ACME and health routes public and the rest behind an identity.

use std::sync::Arc;
use std::time::Duration;

use certus_node::TlsSetup;
use certus_node::edge::security::{Role, TokenEntry, token_hash};
use certus_node::limits::CLIENT_MESSAGE_BYTES_MAX;
use certus_proto::health::HealthCheckRequest;
use certus_proto::health::health_client::HealthClient;
use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::raft_client::RaftClient;
use certus_proto::v1::sessions_client::SessionsClient;
use certus_proto::v1::{
    AcquireRequest, ChangeMembershipRequest, ClaimRequest, PutChallengeRequest, StatusReply,
    StatusRequest,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::Code;
use tonic::codegen::http;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::support::{self, TransportCa, start_plain_cluster};

const CLIENT_TOKEN: &str = "c2VjcmV0LWNsaWVudC10b2tlbi1mb3ItdGVzdHM";
const READER_TOKEN: &str = "c2VjcmV0LXJlYWRlci10b2tlbi1mb3ItdGVzdHM";

async fn channel(
    addr: std::net::SocketAddr,
    ca: &TransportCa,
    identity: Option<&(String, String)>,
) -> Result<Channel, tonic::transport::Error> {
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
}

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    request
}

/// Calls `/certus.v1.Admin/Teleport`, a method no node has.
async fn call_unknown_method(channel: Channel) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<StatusRequest, StatusReply>::default();
    grpc.unary(
        tonic::Request::new(StatusRequest {}),
        http::uri::PathAndQuery::from_static("/certus.v1.Admin/Teleport"),
        codec,
    )
    .await
    .expect_err("no node has this method")
}

fn acquire(name: &str) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        holder: "tls-test".into(),
        ttl_ms: 10_000,
    }
}

fn reason(status: &tonic::Status) -> &str {
    status
        .metadata()
        .get("certus-error")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
}

/// One HTTPS GET over rustls (not the node's code): `(status code, body)`.
async fn https_get(
    addr: std::net::SocketAddr,
    ca: &TransportCa,
    identity: Option<&(String, String)>,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).expect("ca"))
        .expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::IpAddress(addr.ip().into());
    let mut stream = connector.connect(name, socket).await.expect("handshake");
    let authorization = token
        .map(|token| format!("authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n{authorization}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut response = Vec::new();
    // A peer that closes without close_notify is fine here: the response is complete.
    let _ = stream.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_right_identities_get_in() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TransportCa::new("Test cluster CA");
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    std::fs::write(pki.join("ca.pem"), &ca.pem).expect("ca file");
    for id in 1..=3 {
        let (cert, key) = ca.issue(&format!("node-{id}"), &["node"]);
        std::fs::write(pki.join(format!("node-{id}.pem")), cert).expect("cert file");
        std::fs::write(pki.join(format!("node-{id}-key.pem")), key).expect("key file");
    }
    let (configs, nodes) = start_plain_cluster(dir.path(), Duration::from_secs(15), |config| {
        config.tls = Some(TlsSetup {
            ca_cert_file: pki.join("ca.pem"),
            cert_file: pki.join(format!("node-{}.pem", config.id)),
            key_file: pki.join(format!("node-{}-key.pem", config.id)),
            https: true,
        });
        config.tokens = vec![
            TokenEntry {
                name: "producer".into(),
                roles: vec![Role::Client],
                sha256: token_hash(CLIENT_TOKEN),
            },
            TokenEntry {
                name: "prometheus".into(),
                roles: vec![Role::Reader],
                sha256: token_hash(READER_TOKEN),
            },
        ];
    })
    .await;
    // The cluster formed over TLS (start_plain_cluster waited for every node to know the
    // leader); a write through a follower is forwarded to the leader over TLS too.
    let admin = ca.issue("ops", &["admin"]);
    let worker = ca.issue("worker-1", &["worker"]);
    let addr = configs[2].grpc_addr;
    let mut leases = LeasesClient::new(channel(addr, &ca, Some(&admin)).await.expect("admin"));
    leases
        .acquire(acquire("tls/admin"))
        .await
        .expect("an admin acquires");

    // No identity at all: the handshake succeeds (tokens need it), every call but health is
    // refused.
    let anonymous = channel(addr, &ca, None)
        .await
        .expect("TLS without a certificate");
    let refused = LeasesClient::new(anonymous.clone())
        .acquire(acquire("tls/anonymous"))
        .await
        .expect_err("no identity");
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    assert_eq!(reason(&refused), "unauthenticated");
    let refused = AdminClient::new(anonymous.clone())
        .status(StatusRequest {})
        .await
        .expect_err("reads need an identity too");
    assert_eq!(refused.code(), Code::Unauthenticated);
    HealthClient::new(anonymous.clone())
        .check(HealthCheckRequest::default())
        .await
        .expect("health is public");

    // A worker claims but does not change membership, and never speaks Raft.
    let worker_channel = channel(addr, &ca, Some(&worker)).await.expect("worker");
    SessionsClient::new(worker_channel.clone())
        .claim(ClaimRequest {
            stage: certus_proto::v1::Stage::Issue as i32,
            worker: "worker-1".into(),
            visibility_ms: 10_000,
            max: 1,
            wait_ms: 0,
        })
        .await
        .expect("a worker claims");
    let refused = AdminClient::new(worker_channel.clone())
        .change_membership(ChangeMembershipRequest {
            voters: vec![1, 2],
            ..ChangeMembershipRequest::default()
        })
        .await
        .expect_err("a worker is not an admin");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(reason(&refused), "forbidden");
    assert!(refused.message().contains("worker-1"), "{refused:?}");
    let refused = RaftClient::new(channel(addr, &ca, Some(&admin)).await.expect("admin"))
        .vote(certus_proto::v1::RaftMessage::default())
        .await
        .expect_err("only nodes speak Raft");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // Membership is unchanged: all three are still voters.
    let status = AdminClient::new(channel(addr, &ca, Some(&admin)).await.expect("admin"))
        .status(StatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert_eq!(
        status.members.iter().filter(|member| member.voter).count(),
        3
    );

    // A certificate from another CA does not get through the handshake, even with the node role.
    let rogue_ca = TransportCa::new("Rogue CA");
    let rogue = rogue_ca.issue("node-9", &["node"]);
    let outcome = match channel(addr, &ca, Some(&rogue)).await {
        Err(error) => Err(error.to_string()),
        Ok(channel) => LeasesClient::new(channel)
            .acquire(acquire("tls/rogue"))
            .await
            .map(|_| ())
            .map_err(|status| status.to_string()),
    };
    assert!(outcome.is_err(), "a foreign certificate is refused");
    // Nor does a client that does not trust the cluster CA connect.
    assert!(
        channel(addr, &rogue_ca, Some(&admin)).await.is_err()
            || LeasesClient::new(channel(addr, &rogue_ca, Some(&admin)).await.expect("lazy"))
                .acquire(acquire("tls/untrusting"))
                .await
                .is_err(),
        "the node's certificate does not verify against another CA"
    );

    // Tokens: a client token acquires, a reader token reads but does not write, a wrong one is
    // unauthenticated.
    let mut leases = LeasesClient::new(anonymous.clone());
    leases
        .acquire(with_token(acquire("tls/token"), CLIENT_TOKEN))
        .await
        .expect("a client token acquires");
    let refused = leases
        .acquire(with_token(acquire("tls/reader"), READER_TOKEN))
        .await
        .expect_err("a reader does not write");
    assert_eq!(refused.code(), Code::PermissionDenied);
    let refused = leases
        .acquire(with_token(
            acquire("tls/wrong"),
            "d3JvbmctdG9rZW4tZm9yLXRoZS10ZXN0cw",
        ))
        .await
        .expect_err("unknown token");
    assert_eq!(refused.code(), Code::Unauthenticated);
    // Nothing the refused calls asked for exists.
    let listed = LeasesClient::new(channel(addr, &ca, Some(&admin)).await.expect("admin"))
        .list(certus_proto::v1::ListLeasesRequest::default())
        .await
        .expect("list")
        .into_inner();
    let mut names: Vec<_> = listed
        .leases
        .iter()
        .map(|lease| lease.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["tls/admin", "tls/token"]);

    // gRPC conventions. A method this node does not have is UNIMPLEMENTED once the caller is
    // known (how clients detect a feature), and still UNAUTHENTICATED for an unknown caller.
    let unknown = call_unknown_method(worker_channel.clone()).await;
    assert_eq!(unknown.code(), Code::Unimplemented, "{unknown:?}");
    let unknown = call_unknown_method(anonymous.clone()).await;
    assert_eq!(unknown.code(), Code::Unauthenticated, "{unknown:?}");
    // A message over its service's bound is RESOURCE_EXHAUSTED with a reason, and changes
    // nothing; one just under it reaches the service, which judges what it says.
    let mut leases = LeasesClient::new(channel(addr, &ca, Some(&admin)).await.expect("admin"));
    let oversized = leases
        .put_challenge(PutChallengeRequest {
            token: "tls-oversized".into(),
            key_authorization: "k".repeat(CLIENT_MESSAGE_BYTES_MAX + 1),
        })
        .await
        .expect_err("over the bound");
    assert_eq!(oversized.code(), Code::ResourceExhausted, "{oversized:?}");
    assert_eq!(reason(&oversized), "message-too-large");
    assert!(
        oversized
            .message()
            .contains(&CLIENT_MESSAGE_BYTES_MAX.to_string()),
        "the bound is named: {oversized:?}"
    );
    let within = leases
        .put_challenge(PutChallengeRequest {
            token: "tls-oversized".into(),
            key_authorization: "k".repeat(CLIENT_MESSAGE_BYTES_MAX - 64),
        })
        .await
        .expect_err("a key authorization is at most 1 KiB");
    assert_eq!(within.code(), Code::InvalidArgument, "{within:?}");
    let absent = leases
        .get_challenge(certus_proto::v1::GetChallengeRequest {
            token: "tls-oversized".into(),
        })
        .await
        .expect_err("neither call stored the token");
    assert_eq!(absent.code(), Code::NotFound, "{absent:?}");
    // The connection survives a refused message.
    leases
        .acquire(acquire("tls/after-oversized"))
        .await
        .expect("the same channel serves on");

    // HTTPS: health and ACME challenges are public; status and metrics need an identity.
    let http = configs[0].http_addr;
    let (code, _) = https_get(http, &ca, None, "/health/live", None).await;
    assert_eq!(code, 200);
    let (code, _) = https_get(http, &ca, None, "/.well-known/acme-challenge/absent", None).await;
    assert_eq!(code, 404, "public: reaches the route");
    let (code, body) = https_get(http, &ca, None, "/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("\"unauthenticated\""), "a JSON error: {body}");
    let (code, body) = https_get(http, &ca, None, "/metrics", Some(READER_TOKEN)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("certus_grpc_requests_total"), "the metrics");
    let (code, _) = https_get(http, &ca, Some(&worker), "/status", None).await;
    assert_eq!(code, 200, "a worker reads status with its certificate");

    support::shutdown(nodes).await;
}
