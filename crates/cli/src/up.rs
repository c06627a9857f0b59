//! `certus up`: the embedded local cluster. Three nodes in one process on 127.0.0.1, data under
//! `./certus-data`; running it again recovers the data; Ctrl-C stops it cleanly.
//!
//! The nodes also run the CT log: its key is made on the first start in
//! `<data_dir>/ct-log-key.pem` and reused after; the roots it accepts come from `--ct-roots`.
//! And they issue certificates for CA sessions with a cluster CA made the same way
//! (`<data_dir>/ca-key.pem`, `ca-cert.pem`), serving HTTP-01 challenges in plain HTTP on an ACME
//! port each (7190 + N when free).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use certus_node::{CtFiles, HttpSetup, Node, NodeConfig, SessionsSetup, TlsSetup};

use crate::ca_files::ensure_ca;
use crate::cluster::{await_leader, node_table, start_local};
use crate::ct_key::ensure_key;
use crate::pki::{CA_CERT_FILE, ensure_local, identity_files};

/// The first gRPC port of `certus up`; node N listens on this + N.
pub(crate) const GRPC_PORT_BASE: u16 = 7100;
/// The first HTTP port of `certus up`; node N listens on this + N.
pub(crate) const HTTP_PORT_BASE: u16 = 7180;
/// The first plain-HTTP ACME port of `certus up`; node N listens on this + N when it is free,
/// else on a port the system picks.
pub(crate) const ACME_HTTP_PORT_BASE: u16 = 7190;
/// The CT log's key, in the data directory.
pub(crate) const CT_KEY_FILE: &str = "ct-log-key.pem";

/// Options of `certus up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Where the nodes keep their data (one folder per node) and the CT log's key.
    #[arg(long, env = "CERTUS_DATA_DIR", default_value = "certus-data")]
    data_dir: PathBuf,
    /// How many nodes (1 to 9).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=9))]
    nodes: u8,
    /// A PEM bundle of the root certificates the CT log accepts chains up to. Without it the log
    /// runs but accepts no chain.
    #[arg(long, env = "CERTUS_CT_ROOTS")]
    ct_roots: Option<PathBuf>,
    /// Serve plain text, without TLS or authorization (local experiments only).
    #[arg(long)]
    plaintext: bool,
    /// Serve the HTTP port (health, status, metrics, `/ct/v1/`) in plain HTTP while gRPC keeps
    /// mutual TLS; status and metrics then take bearer tokens only.
    #[arg(long, conflicts_with_all = ["plaintext", "http_cert"])]
    http_plaintext: bool,
    /// A certificate (PEM, leaf first) for the HTTP port to present instead of the nodes' own,
    /// e.g. a public one for CT monitors; gRPC keeps the cluster's. Needs --http-key.
    #[arg(long, requires = "http_key", conflicts_with = "plaintext")]
    http_cert: Option<PathBuf>,
    /// The private key (PKCS#8 PEM) of --http-cert.
    #[arg(long, requires = "http_cert")]
    http_key: Option<PathBuf>,
    /// Fetch HTTP-01 challenges for NAME from ADDR instead of NAME's port 80 (repeatable): an
    /// ACME client's own HTTP-01 server on a loopback port, say `www.example.test=127.0.0.1:5002`.
    #[arg(long = "http01-resolve", value_name = "NAME=ADDR", value_parser = parse_resolve)]
    http01_resolve: Vec<(String, SocketAddr)>,
}

fn parse_resolve(text: &str) -> Result<(String, SocketAddr), String> {
    let (name, addr) = text.split_once('=').ok_or_else(|| {
        format!("{text}: expected NAME=ADDR, e.g. www.example.test=127.0.0.1:5002")
    })?;
    certus_ca::csr::valid_dns_name(name).map_err(|why| format!("{name}: {why}"))?;
    let addr = addr
        .parse()
        .map_err(|error| format!("{addr}: not an IP address and port: {error}"))?;
    Ok((name.to_owned(), addr))
}

/// What the local nodes' HTTP port speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HttpPort {
    /// As the cluster: HTTPS with each node's certificate, or plain text with `--plaintext`.
    AsCluster,
    /// Plain HTTP, gRPC over TLS.
    Plain,
    /// HTTPS with this certificate and key.
    Certificate(PathBuf, PathBuf),
}

impl UpArgs {
    fn http_port(&self) -> HttpPort {
        match (&self.http_cert, &self.http_key) {
            (Some(cert), Some(key)) => HttpPort::Certificate(cert.clone(), key.clone()),
            _ if self.http_plaintext => HttpPort::Plain,
            _ => HttpPort::AsCluster,
        }
    }
}

/// The ACME port of each of `nodes` nodes: `ACME_HTTP_PORT_BASE + N` when it can be bound now,
/// else one the system picks (free a moment ago).
fn acme_addrs(nodes: u8) -> Result<Vec<SocketAddr>, String> {
    (1..=nodes)
        .map(|id| {
            let preferred = local(ACME_HTTP_PORT_BASE + u16::from(id));
            std::net::TcpListener::bind(preferred)
                .or_else(|_| std::net::TcpListener::bind(local(0)))
                .and_then(|listener| listener.local_addr())
                .map_err(|error| {
                    format!("cannot find a free port for node {id}'s ACME listener: {error}")
                })
        })
        .collect()
}

/// Where `certus up` keeps the cluster's transport PKI, in the data directory.
pub(crate) const PKI_DIR: &str = "pki";

fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// The configuration of each local node: its ports, its folder, the CT log's files and the CA.
fn local_configs(
    data_dir: &Path,
    nodes: u8,
    ct: &CtFiles,
    sessions: &SessionsSetup,
    tls: bool,
    http_port: &HttpPort,
    acme: &[SocketAddr],
) -> Vec<NodeConfig> {
    (1..=u64::from(nodes))
        .map(|id| {
            let offset = u16::try_from(id).expect("at most 9 nodes");
            let mut config = NodeConfig::new(
                id,
                local(GRPC_PORT_BASE + offset),
                local(HTTP_PORT_BASE + offset),
                data_dir.join(format!("node-{id}")),
            );
            config.ct = ct.clone();
            config.sessions = sessions.clone();
            config.acme_http_addr = acme.get(usize::from(offset) - 1).copied();
            if let HttpPort::Certificate(cert_file, key_file) = http_port {
                config.http = HttpSetup {
                    cert_file: Some(cert_file.clone()),
                    key_file: Some(key_file.clone()),
                    ..HttpSetup::default()
                };
            }
            if tls {
                let pki = data_dir.join(PKI_DIR);
                let (cert_file, key_file) = identity_files(&pki, &format!("node-{id}"));
                config.tls = Some(TlsSetup {
                    ca_cert_file: pki.join(CA_CERT_FILE),
                    cert_file,
                    key_file,
                    https: *http_port != HttpPort::Plain,
                });
            }
            config
        })
        .collect()
}

pub(crate) async fn run(args: UpArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|error| format!("cannot create {}: {error}", args.data_dir.display()))?;
    let key_file = args.data_dir.join(CT_KEY_FILE);
    let (log_key, created) = ensure_key(&key_file)?;
    let ct = CtFiles {
        key_file: Some(key_file.clone()),
        roots_file: args.ct_roots.clone(),
        ..CtFiles::default()
    };
    // Read the files once here, so a bad roots file is reported before any node starts.
    let roots = certus_node::ct::setup::load_ct_setup(&ct)?.map_or(0, |setup| setup.roots.len());
    let (ca_key_file, ca_cert_file, ca_created) = ensure_ca(&args.data_dir)?;
    let sessions = SessionsSetup {
        ca_key_file: Some(ca_key_file),
        ca_cert_file: Some(ca_cert_file.clone()),
        http01_resolve: args.http01_resolve.iter().cloned().collect(),
        ..SessionsSetup::default()
    };
    let pki_created = if args.plaintext {
        None
    } else {
        Some(ensure_local(&args.data_dir.join(PKI_DIR), args.nodes)?)
    };
    let http_port = args.http_port();
    let configs = local_configs(
        &args.data_dir,
        args.nodes,
        &ct,
        &sessions,
        !args.plaintext,
        &http_port,
        &acme_addrs(args.nodes)?,
    );
    let nodes = start_local(&configs).await?;
    let leader = await_leader(&nodes, Duration::from_secs(10)).await;

    let rows: Vec<(&Node, &NodeConfig)> = nodes.iter().zip(&configs).collect();
    println!("{}", node_table(&rows));
    match leader {
        Some(leader) => println!("leader: node {leader}"),
        None => println!("leader: none yet (elections continue; see `certus ctl status`)"),
    }
    println!(
        "CT log: id {} (key {}, {})",
        log_key.log_id,
        key_file.display(),
        if created { "new" } else { "reused" }
    );
    let scheme = if args.plaintext || http_port == HttpPort::Plain {
        "http"
    } else {
        "https"
    };
    for config in &configs {
        println!(
            "  node {}: {scheme}://{}/ct/v1/",
            config.id, config.http_addr
        );
    }
    match &args.ct_roots {
        Some(path) => println!(
            "  accepting chains up to {roots} root(s) from {}",
            path.display()
        ),
        None => println!(
            "  no accepted roots: get-roots is empty and add-chain answers 400; \
             restart with --ct-roots FILE (a PEM bundle) to accept chains"
        ),
    }
    println!(
        "CA for sessions: {} ({}); HTTP-01 challenges are fetched from each name's port 80, \
         and every node serves them in plain HTTP on its ACME HTTP port (above)",
        ca_cert_file.display(),
        if ca_created { "new" } else { "reused" }
    );
    println!(
        "ACME (RFC 8555): {scheme}://{}/acme/directory (every node answers; docs/acme.md)",
        configs[0].http_addr
    );
    if scheme == "https" && http_port == HttpPort::AsCluster {
        println!(
            "  clients trust {}: REQUESTS_CA_BUNDLE for certbot, LEGO_CA_CERTIFICATES for lego",
            args.data_dir.join(PKI_DIR).join(CA_CERT_FILE).display()
        );
    }
    match &http_port {
        HttpPort::AsCluster => {}
        HttpPort::Plain => println!(
            "HTTP port: plain HTTP (--http-plaintext); /status and /metrics take bearer tokens only"
        ),
        HttpPort::Certificate(cert, _) => println!(
            "HTTP port: HTTPS with {} (--http-cert); gRPC keeps the cluster's certificates",
            cert.display()
        ),
    }
    let pki = args.data_dir.join(PKI_DIR);
    match pki_created {
        Some(created) => println!(
            "TLS: every node and client needs a certificate from {} ({}); `certus ctl` uses \
             {} as admin when run from here",
            pki.join(CA_CERT_FILE).display(),
            if created { "new" } else { "reused" },
            identity_files(&pki, "admin").0.display()
        ),
        None => println!("TLS: off (--plaintext); `certus ctl` needs --plaintext too"),
    }
    println!("try:    cargo run -p certus-cli -- ctl status");
    println!("        cargo run -p certus-cli -- ctl log status");
    println!("stop:   Ctrl-C");

    tokio::signal::ctrl_c()
        .await
        .map_err(|error| format!("cannot wait for Ctrl-C: {error}"))?;
    println!("stopping…");
    for node in nodes {
        node.shutdown().await;
    }
    println!("stopped; data kept in {}", args.data_dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_local_node_runs_the_ct_log_and_the_ca_with_the_same_files() {
        let ct = CtFiles {
            key_file: Some(PathBuf::from("data/ct-log-key.pem")),
            roots_file: Some(PathBuf::from("roots.pem")),
            ..CtFiles::default()
        };
        let sessions = SessionsSetup {
            ca_key_file: Some(PathBuf::from("data/ca-key.pem")),
            ca_cert_file: Some(PathBuf::from("data/ca-cert.pem")),
            ..SessionsSetup::default()
        };
        let acme: Vec<SocketAddr> = (1..=3).map(|n| local(7290 + n)).collect();
        let configs = local_configs(
            Path::new("data"),
            3,
            &ct,
            &sessions,
            true,
            &HttpPort::AsCluster,
            &acme,
        );
        assert_eq!(configs.len(), 3);
        for (config, id) in configs.iter().zip(1..) {
            assert_eq!(config.id, id);
            assert_eq!(config.ct, ct);
            assert_eq!(config.sessions, sessions);
            assert_eq!(
                config.acme_http_addr,
                Some(acme[usize::try_from(id - 1).expect("small")])
            );
            assert_eq!(config.http, HttpSetup::default());
            let tls = config.tls.as_ref().expect("TLS by default");
            assert!(tls.https);
            assert_eq!(tls.ca_cert_file, Path::new("data/pki/ca.pem"));
            assert_eq!(
                tls.cert_file,
                Path::new("data/pki").join(format!("node-{id}.pem"))
            );
            assert_eq!(
                config.data_dir,
                Path::new("data").join(format!("node-{id}"))
            );
            assert_eq!(
                config.grpc_addr.port(),
                7100 + u16::try_from(id).expect("small")
            );
            assert_eq!(
                config.http_addr.port(),
                7180 + u16::try_from(id).expect("small")
            );
            config.validate().expect("a valid node config");
        }
    }

    #[test]
    fn the_http_port_can_be_plain_or_present_another_certificate() {
        let ct = CtFiles::default();
        let sessions = SessionsSetup::default();
        let acme = [local(7291)];
        let plain = local_configs(
            Path::new("data"),
            1,
            &ct,
            &sessions,
            true,
            &HttpPort::Plain,
            &acme,
        );
        let tls = plain[0].tls.as_ref().expect("gRPC keeps TLS");
        assert!(!tls.https);
        plain[0].validate().expect("valid");
        let public = local_configs(
            Path::new("data"),
            1,
            &ct,
            &sessions,
            true,
            &HttpPort::Certificate("public.pem".into(), "public-key.pem".into()),
            &acme,
        );
        assert!(public[0].tls.as_ref().expect("TLS").https);
        assert_eq!(
            public[0].http.cert_file.as_deref(),
            Some(Path::new("public.pem"))
        );
        public[0].validate().expect("valid");
    }

    #[test]
    fn the_acme_ports_are_distinct_and_bindable() {
        let addrs = acme_addrs(3).expect("free ports");
        assert_eq!(addrs.len(), 3);
        let distinct: std::collections::BTreeSet<_> = addrs.iter().collect();
        assert_eq!(distinct.len(), 3, "{addrs:?}");
        assert!(addrs.iter().all(|addr| addr.ip().is_loopback()));
    }

    #[test]
    fn up_takes_ct_roots_from_a_flag() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct Cli {
            #[command(flatten)]
            up: UpArgs,
        }
        let cli = Cli::try_parse_from(["up", "--ct-roots", "roots.pem", "--data-dir", "d"])
            .expect("parses");
        assert_eq!(cli.up.ct_roots, Some(PathBuf::from("roots.pem")));
        assert_eq!(cli.up.data_dir, PathBuf::from("d"));
        assert_eq!(cli.up.http_port(), HttpPort::AsCluster);
        let cli = Cli::try_parse_from(["up", "--http-plaintext"]).expect("parses");
        assert_eq!(cli.up.http_port(), HttpPort::Plain);
        let cli = Cli::try_parse_from(["up", "--http-cert", "c.pem", "--http-key", "k.pem"])
            .expect("parses");
        assert_eq!(
            cli.up.http_port(),
            HttpPort::Certificate("c.pem".into(), "k.pem".into())
        );
        Cli::try_parse_from(["up", "--http-cert", "c.pem"]).expect_err("needs the key");
        Cli::try_parse_from(["up", "--plaintext", "--http-plaintext"])
            .expect_err("one or the other");
    }
}
