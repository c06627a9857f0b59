//! Members known by host name over mutual TLS: three nodes listen on 127.0.0.1, advertise
//! `localhost:port`, and hold certificates that name `localhost` and no IP address. They can
//! only form a cluster if peers check a certificate against the name they dial; a would-be
//! member whose certificate does not name the address it is added under is refused, and so is
//! a recorded address changed (`Admin/SetMemberAddress`) to one that does not reach the member.

use std::time::Duration;

use certus_node::{MemberAddr, Node, NodeConfig, TlsSetup};
use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{AcquireRequest, AddLearnerRequest, SetMemberAddressRequest, StatusRequest};
use rcgen::SanType;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::support::{self, TransportCa, free_addr, start_plain_cluster};

/// Writes node `id`'s identity (signed by `ca`, valid for `sans`) into `dir` and returns its
/// TLS setup.
fn node_files(ca: &TransportCa, dir: &std::path::Path, id: u64, sans: Vec<SanType>) -> TlsSetup {
    let (cert, key) = ca.issue_with(&format!("node-{id}"), &["node"], true, sans);
    let cert_file = dir.join(format!("node-{id}.pem"));
    let key_file = dir.join(format!("node-{id}-key.pem"));
    std::fs::write(&cert_file, cert).expect("cert file");
    std::fs::write(&key_file, key).expect("key file");
    TlsSetup {
        ca_cert_file: dir.join("ca.pem"),
        cert_file,
        key_file,
        https: true,
    }
}

fn localhost() -> Vec<SanType> {
    vec![SanType::DnsName(
        "localhost".try_into().expect("a DNS name"),
    )]
}

/// `name:port` of `addr`.
fn named(name: &str, addr: std::net::SocketAddr) -> MemberAddr {
    MemberAddr::parse(&format!("{name}:{}", addr.port())).expect("a member address")
}

async fn channel(url: &str, ca: &TransportCa, identity: &(String, String)) -> Channel {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .identity(Identity::from_pem(&identity.0, &identity.1));
    Endpoint::from_shared(url.to_owned())
        .expect("endpoint")
        .tls_config(tls)
        .expect("tls")
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("a TLS connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_check_certificates_against_the_names_they_dial() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = TransportCa::new("Test cluster CA");
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    std::fs::write(pki.join("ca.pem"), &ca.pem).expect("ca file");
    let (configs, nodes) = start_plain_cluster(dir.path(), Duration::from_secs(15), |config| {
        config.tls = Some(node_files(&ca, &pki, config.id, localhost()));
        config.advertise_grpc = Some(named("localhost", config.grpc_addr));
        config.advertise_http = Some(named("localhost", config.http_addr));
    })
    .await;
    // Formed (every node knows the leader): heartbeats went by name over TLS. A write through
    // each node is forwarded to the leader by name too.
    let admin = ca.issue_with("ops", &["admin"], true, Vec::new());
    for config in &configs {
        let url = format!("https://{}", named("localhost", config.grpc_addr));
        let channel = channel(&url, &ca, &admin).await;
        let status = AdminClient::new(channel.clone())
            .status(StatusRequest {})
            .await
            .expect("status")
            .into_inner();
        let recorded: Vec<&str> = status
            .members
            .iter()
            .map(|m| m.grpc_addr.as_str())
            .collect();
        let expected: Vec<String> = configs
            .iter()
            .map(|c| named("localhost", c.grpc_addr).to_string())
            .collect();
        assert_eq!(recorded, expected, "the membership records the names");
        LeasesClient::new(channel)
            .acquire(AcquireRequest {
                name: format!("by-name/{}", config.id),
                holder: "holder".into(),
                ttl_ms: 60_000,
            })
            .await
            .expect("a write through any node");
    }

    // A node whose certificate names only its IP address, added under a name: the probe's TLS
    // handshake fails on the name, so it is refused before anything is proposed.
    let ip_only = vec![SanType::IpAddress([127, 0, 0, 1].into())];
    let mut fourth = NodeConfig::new(4, free_addr(), free_addr(), dir.path().join("node-4"));
    fourth.tls = Some(node_files(&ca, &pki, 4, ip_only));
    let fourth_node = Node::start(fourth.clone()).await.expect("node 4 starts");
    let url = format!("https://{}", named("localhost", configs[0].grpc_addr));
    let refused = AdminClient::new(channel(&url, &ca, &admin).await)
        .add_learner(AddLearnerRequest {
            id: 4,
            grpc_addr: named("localhost", fourth.grpc_addr).to_string(),
            http_addr: named("localhost", fourth.http_addr).to_string(),
        })
        .await
        .expect_err("its certificate does not name localhost");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("no Certus node answers at localhost:"),
        "{refused:?}"
    );
    let status = AdminClient::new(channel(&url, &ca, &admin).await)
        .status(StatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert_eq!(status.members.len(), 3, "nothing was added");

    // SetMemberAddress: the new gRPC address must reach the member itself, by a name its
    // certificate holds; a changed HTTP address alone is recorded after the same check.
    let mut admin_client = AdminClient::new(channel(&url, &ca, &admin).await);
    let set = |grpc_addr: String, http_addr: String| SetMemberAddressRequest {
        id: 1,
        grpc_addr,
        http_addr,
    };
    let by_ip = admin_client
        .set_member_address(set(configs[0].grpc_addr.to_string(), String::new()))
        .await
        .expect_err("node 1's certificate does not name its IP address");
    assert_eq!(by_ip.code(), Code::FailedPrecondition, "{by_ip:?}");
    let other = admin_client
        .set_member_address(set(
            named("localhost", configs[1].grpc_addr).to_string(),
            String::new(),
        ))
        .await
        .expect_err("node 2 answers there");
    assert!(
        other.message().contains("is node 2, not node 1"),
        "{other:?}"
    );
    let bad = admin_client
        .set_member_address(set("local_host:1".into(), String::new()))
        .await
        .expect_err("not a host name");
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    let nothing = admin_client
        .set_member_address(set(String::new(), String::new()))
        .await
        .expect_err("nothing to change");
    assert_eq!(nothing.code(), Code::InvalidArgument, "{nothing:?}");
    let unknown = admin_client
        .set_member_address(SetMemberAddressRequest {
            id: 9,
            grpc_addr: named("localhost", configs[0].grpc_addr).to_string(),
            http_addr: String::new(),
        })
        .await
        .expect_err("no node 9");
    assert_eq!(unknown.code(), Code::FailedPrecondition, "{unknown:?}");
    let http = "web-1.certus.test:8443".to_owned();
    let reply = admin_client
        .set_member_address(set(String::new(), http.clone()))
        .await
        .expect("a new HTTP address for node 1")
        .into_inner();
    let member = reply.members.iter().find(|m| m.id == 1).expect("node 1");
    assert_eq!(member.http_addr, http);
    assert_eq!(
        member.grpc_addr,
        named("localhost", configs[0].grpc_addr).to_string(),
        "the gRPC address is kept"
    );
    let status = admin_client
        .status(StatusRequest {})
        .await
        .expect("status")
        .into_inner();
    assert_eq!(status.members.len(), 3, "no member added or removed");
    assert!(
        status.members.iter().all(|m| m.voter),
        "every voter still votes"
    );

    fourth_node.shutdown().await;
    support::shutdown(nodes).await;
}
