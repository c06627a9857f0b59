//! ACME (RFC 8555) with the clients people run: certbot and lego obtain, renew and revoke
//! certificates from a three-node cluster of real `certus serve` processes, and an order
//! completes while its cluster loses its leader.
//!
//! The clients answer HTTP-01 themselves (certbot's standalone server, lego's `--http`) on a
//! loopback port, which the nodes' `[sessions] http01_resolve` names for every test name. The
//! clients come from Debian's `certbot` and `lego` packages (`.ci/run` installs them); a machine
//! without them skips these tests and says why.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{Cluster, Tuning, free_addr, http_get};
use x509_cert::der::Decode as _;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

const ELECTION: Duration = Duration::from_secs(15);
/// How long one client run may take.
const CLIENT_DEADLINE: Duration = Duration::from_secs(180);

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Runs `command` to its end (killed at the deadline); its exit success and output.
fn run(mut command: Command) -> (bool, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the ACME client");
    let deadline = Instant::now() + CLIENT_DEADLINE;
    loop {
        if child.try_wait().expect("wait for the client").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("the client's output");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A cluster whose sessions issue with a CA of the test's, every name in `names` validated at
/// `http01`.
struct AcmeCluster {
    cluster: Cluster,
    files: tempfile::TempDir,
    http01: SocketAddr,
}

impl AcmeCluster {
    fn start(names: &[&str]) -> AcmeCluster {
        let files = tempfile::tempdir().expect("temporary directory");
        let now_ms = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_millis(),
        )
        .expect("fits");
        let ca =
            certus_ca::issuer::CaIdentity::generate("Certus ACME Test CA", now_ms).expect("a CA");
        let ca_key_file = files.path().join("ca-key.pem");
        let ca_cert_file = files.path().join("ca-cert.pem");
        std::fs::write(&ca_key_file, ca.key_pem()).expect("CA key file");
        std::fs::write(&ca_cert_file, ca.certificate_pem()).expect("CA certificate file");
        let http01 = free_addr();
        let tuning = Tuning {
            tick_interval_ms: 500,
            sessions: Some((ca_key_file, ca_cert_file, Vec::new())),
            http01_at: names
                .iter()
                .map(|name| ((*name).to_owned(), http01))
                .collect(),
            ..Tuning::default()
        };
        let cluster = Cluster::start(3, tuning);
        AcmeCluster {
            cluster,
            files,
            http01,
        }
    }

    fn directory(&self, index: usize) -> String {
        format!(
            "http://{}/acme/directory",
            self.cluster.nodes[index].spec.http
        )
    }

    fn dir(&self, name: &str) -> PathBuf {
        let dir = self.files.path().join(name);
        std::fs::create_dir_all(&dir).expect("client folder");
        dir
    }

    /// The CRL's revoked serial numbers (lowercase hex of their DER integers).
    fn revoked_serials(&self) -> Vec<String> {
        let http = self.cluster.nodes[0].spec.http;
        let der = http_get_bytes(http, "/acme/crl");
        let crl = x509_cert::crl::CertificateList::from_der(&der).expect("the CRL parses");
        crl.tbs_cert_list
            .revoked_certificates
            .unwrap_or_default()
            .iter()
            .map(|revoked| hex(revoked.serial_number.as_bytes()))
            .collect()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn http_get_bytes(addr: SocketAddr, path: &str) -> Vec<u8> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .expect("a header end");
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    response[split + 4..].to_vec()
}

/// The DNS names and serial (hex) of the first certificate of a PEM file.
fn leaf(path: &Path) -> (Vec<String>, String) {
    let chain = std::fs::read(path).expect("the certificate file");
    let der = certus_ca::certificate::first_pem_certificate(&chain).expect("a PEM certificate");
    let cert = x509_cert::Certificate::from_der(&der).expect("a certificate");
    let san = cert
        .tbs_certificate
        .get::<SubjectAltName>()
        .expect("the SAN extension parses")
        .map(|(_, san)| san.0)
        .unwrap_or_default();
    let mut names: Vec<String> = san
        .iter()
        .filter_map(|name| match name {
            GeneralName::DnsName(dns) => Some(dns.to_string()),
            _ => None,
        })
        .collect();
    names.sort();
    (names, hex(cert.tbs_certificate.serial_number.as_bytes()))
}

fn certbot(acme: &AcmeCluster, node: usize, dir: &Path, args: &[&str]) -> (bool, String) {
    let mut command = Command::new("certbot");
    command
        .args(args)
        .arg("--server")
        .arg(acme.directory(node))
        .arg("--config-dir")
        .arg(dir.join("config"))
        .arg("--work-dir")
        .arg(dir.join("work"))
        .arg("--logs-dir")
        .arg(dir.join("logs"))
        .args(["--non-interactive", "--no-random-sleep-on-renew"]);
    run(command)
}

fn certbot_obtain(acme: &AcmeCluster, node: usize, dir: &Path, names: &[&str]) -> (bool, String) {
    let port = acme.http01.port().to_string();
    let mut args = vec![
        "certonly",
        "--standalone",
        "--http-01-address",
        "127.0.0.1",
        "--http-01-port",
        &port,
        "--agree-tos",
        "--register-unsafely-without-email",
        "--cert-name",
        "test",
    ];
    for name in names {
        args.push("-d");
        args.push(name);
    }
    certbot(acme, node, dir, &args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certbot_obtains_renews_and_revokes_a_certificate_for_two_names() {
    if !installed("certbot") {
        println!("skipped: certbot is not installed (Debian package certbot; .ci/run installs it)");
        return;
    }
    let names = ["www.certbot.test", "api.certbot.test"];
    let acme = AcmeCluster::start(&names);
    support::leader_other_than(&acme.cluster, 0, ELECTION).await;
    let dir = acme.dir("certbot");
    // Talk to a node that is probably a follower: every node answers ACME.
    let (ok, output) = tokio::task::block_in_place(|| certbot_obtain(&acme, 2, &dir, &names));
    assert!(ok, "certbot certonly failed:\n{output}");
    let cert = dir.join("config/live/test/cert.pem");
    let (issued_names, first_serial) = leaf(&cert);
    let mut expected: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    expected.sort();
    assert_eq!(issued_names, expected);

    // certbot keeps its account per directory URL: the same node's.
    let (ok, output) = tokio::task::block_in_place(|| {
        certbot(
            &acme,
            2,
            &dir,
            &[
                "renew",
                "--force-renewal",
                "--standalone",
                "--http-01-address",
                "127.0.0.1",
                "--http-01-port",
                &acme.http01.port().to_string(),
            ],
        )
    });
    assert!(ok, "certbot renew failed:\n{output}");
    let (renewed_names, renewed_serial) = leaf(&cert);
    assert_eq!(renewed_names, expected);
    assert_ne!(
        renewed_serial, first_serial,
        "a renewal is a new certificate"
    );

    let (ok, output) = tokio::task::block_in_place(|| {
        certbot(
            &acme,
            2,
            &dir,
            &[
                "revoke",
                "--cert-path",
                cert.to_str().expect("UTF-8 path"),
                "--reason",
                "keycompromise",
                "--no-delete-after-revoke",
            ],
        )
    });
    assert!(ok, "certbot revoke failed:\n{output}");
    let revoked = acme.revoked_serials();
    assert!(
        revoked.contains(&renewed_serial),
        "the CRL lists {renewed_serial}: {revoked:?}"
    );
    assert!(!revoked.contains(&first_serial), "only the revoked one");
}

fn lego(
    acme: &AcmeCluster,
    node: usize,
    dir: &Path,
    names: &[&str],
    action: &[&str],
) -> (bool, String) {
    let mut command = Command::new("lego");
    command
        .arg("--server")
        .arg(acme.directory(node))
        .args(["--accept-tos", "--email", "ops@lego.test", "--http"])
        .arg("--http.port")
        .arg(acme.http01.to_string())
        .arg("--path")
        .arg(dir);
    for name in names {
        command.arg("--domains").arg(name);
    }
    command.args(action);
    run(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lego_obtains_renews_and_revokes_a_certificate_for_two_names() {
    if !installed("lego") {
        println!("skipped: lego is not installed (Debian package lego; .ci/run installs it)");
        return;
    }
    let names = ["www.lego.test", "api.lego.test"];
    let acme = AcmeCluster::start(&names);
    support::leader_other_than(&acme.cluster, 0, ELECTION).await;
    let dir = acme.dir("lego");
    let (ok, output) = tokio::task::block_in_place(|| lego(&acme, 1, &dir, &names, &["run"]));
    assert!(ok, "lego run failed:\n{output}");
    let cert = dir.join("certificates/www.lego.test.crt");
    let (issued_names, first_serial) = leaf(&cert);
    let mut expected: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
    expected.sort();
    assert_eq!(issued_names, expected);

    // More days than any certificate lasts: lego renews now.
    let (ok, output) = tokio::task::block_in_place(|| {
        lego(
            &acme,
            1,
            &dir,
            &names,
            &["renew", "--days", "100000", "--no-random-sleep"],
        )
    });
    assert!(ok, "lego renew failed:\n{output}");
    let (renewed_names, renewed_serial) = leaf(&cert);
    assert_eq!(renewed_names, expected);
    assert_ne!(
        renewed_serial, first_serial,
        "a renewal is a new certificate"
    );

    let (ok, output) =
        // lego revokes the certificate of each --domains given: the one named after the first.
        tokio::task::block_in_place(|| lego(&acme, 1, &dir, &names[..1], &["revoke", "--reason", "4"]));
    assert!(ok, "lego revoke failed:\n{output}");
    let revoked = acme.revoked_serials();
    assert!(
        revoked.contains(&renewed_serial),
        "the CRL lists {renewed_serial}: {revoked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_completes_while_the_leader_is_killed() {
    if !installed("certbot") {
        println!("skipped: certbot is not installed (Debian package certbot; .ci/run installs it)");
        return;
    }
    let names = ["failover.certbot.test"];
    let mut acme = AcmeCluster::start(&names);
    let leader = support::leader_other_than(&acme.cluster, 0, ELECTION).await;
    let leader_index = acme.cluster.index_of(leader);
    let client_node = (leader_index + 1) % 3;
    let dir = acme.dir("failover");
    let port = acme.http01.port().to_string();
    let directory = acme.directory(client_node);
    let mut command = Command::new("certbot");
    command
        .args([
            "certonly",
            "--standalone",
            "--http-01-address",
            "127.0.0.1",
            "--http-01-port",
            &port,
            "--agree-tos",
            "--register-unsafely-without-email",
            "--cert-name",
            "test",
            "-d",
            names[0],
            "--non-interactive",
            "--server",
            &directory,
        ])
        .arg("--config-dir")
        .arg(dir.join("config"))
        .arg("--work-dir")
        .arg(dir.join("work"))
        .arg("--logs-dir")
        .arg(dir.join("logs"));
    let client = std::thread::spawn(move || run(command));
    // Kill the leader once the order exists: the account and order were written through it.
    let node_http = acme.cluster.nodes[client_node].spec.http;
    support::eventually(
        Duration::from_secs(60),
        "an ACME order in the cluster",
        || async move {
            let (_, status) = http_get(node_http, "/status");
            let status: serde_json::Value = serde_json::from_str(&status).ok()?;
            (status["acme"]["orders"].as_u64() >= Some(1)).then_some(())
        },
    )
    .await;
    acme.cluster.nodes[leader_index].kill();
    let (ok, output) = tokio::task::spawn_blocking(move || client.join().expect("client thread"))
        .await
        .expect("join");
    let log = std::fs::read_to_string(dir.join("logs/letsencrypt.log")).unwrap_or_default();
    let tail: String = log
        .lines()
        .rev()
        .take(80)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        ok,
        "certbot failed across the leader's death:\n{output}\n{tail}"
    );
    let (issued_names, _) = leaf(&dir.join("config/live/test/cert.pem"));
    assert_eq!(issued_names, [names[0]]);
}
