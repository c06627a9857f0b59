//! `certus up`: the embedded local cluster. Three nodes in one process on 127.0.0.1, data under
//! `./certus-data`; running it again recovers the data; Ctrl-C stops it cleanly.
//!
//! The nodes also run the CT log: its key is made on the first start in
//! `<data_dir>/ct-log-key.pem` and reused after; the roots it accepts come from `--ct-roots`.
//! And they issue certificates for CA sessions with a cluster CA made the same way
//! (`<data_dir>/ca-key.pem`, `ca-cert.pem`).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use certus_node::{CtFiles, Node, NodeConfig, SessionsSetup, TlsSetup};

use crate::ca_files::ensure_ca;
use crate::cluster::{await_leader, node_table, start_local};
use crate::ct_key::ensure_key;
use crate::pki::{CA_CERT_FILE, ensure_local, identity_files};

/// The first gRPC port of `certus up`; node N listens on this + N.
pub(crate) const GRPC_PORT_BASE: u16 = 7100;
/// The first HTTP port of `certus up`; node N listens on this + N.
pub(crate) const HTTP_PORT_BASE: u16 = 7180;
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
            if tls {
                let pki = data_dir.join(PKI_DIR);
                let (cert_file, key_file) = identity_files(&pki, &format!("node-{id}"));
                config.tls = Some(TlsSetup {
                    ca_cert_file: pki.join(CA_CERT_FILE),
                    cert_file,
                    key_file,
                    https: true,
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
        ..SessionsSetup::default()
    };
    let pki_created = if args.plaintext {
        None
    } else {
        Some(ensure_local(&args.data_dir.join(PKI_DIR), args.nodes)?)
    };
    let configs = local_configs(&args.data_dir, args.nodes, &ct, &sessions, !args.plaintext);
    let nodes = start_local(&configs).await?;
    let leader = await_leader(&nodes, Duration::from_secs(10)).await;

    let rows: Vec<(&Node, String)> = nodes
        .iter()
        .zip(&configs)
        .map(|(node, config)| (node, config.data_dir.display().to_string()))
        .collect();
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
    let scheme = if args.plaintext { "http" } else { "https" };
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
        "CA for sessions: {} ({}); HTTP-01 challenges are fetched from each name's port 80",
        ca_cert_file.display(),
        if ca_created { "new" } else { "reused" }
    );
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
        let configs = local_configs(Path::new("data"), 3, &ct, &sessions, true);
        assert_eq!(configs.len(), 3);
        for (config, id) in configs.iter().zip(1..) {
            assert_eq!(config.id, id);
            assert_eq!(config.ct, ct);
            assert_eq!(config.sessions, sessions);
            let tls = config.tls.as_ref().expect("TLS by default");
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
    }
}
