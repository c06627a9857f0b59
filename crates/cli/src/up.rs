//! `certus up`: the embedded local cluster. Three nodes in one process on 127.0.0.1, data under
//! `./certus-data`; running it again recovers the data; Ctrl-C stops it cleanly.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use certus_node::{Node, NodeConfig};

use crate::cluster::{await_leader, node_table, start_local};

/// The first gRPC port of `certus up`; node N listens on this + N.
pub(crate) const GRPC_PORT_BASE: u16 = 7100;
/// The first HTTP port of `certus up`; node N listens on this + N.
pub(crate) const HTTP_PORT_BASE: u16 = 7180;

/// Options of `certus up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Where the nodes keep their data (one folder per node).
    #[arg(long, env = "CERTUS_DATA_DIR", default_value = "certus-data")]
    data_dir: PathBuf,
    /// How many nodes (1 to 9).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=9))]
    nodes: u8,
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

pub(crate) async fn run(args: UpArgs) -> Result<(), String> {
    let configs: Vec<NodeConfig> = (1..=u64::from(args.nodes))
        .map(|id| {
            let offset = u16::try_from(id).expect("at most 9 nodes");
            NodeConfig::new(
                id,
                local(GRPC_PORT_BASE + offset),
                local(HTTP_PORT_BASE + offset),
                args.data_dir.join(format!("node-{id}")),
            )
        })
        .collect();
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
    println!("try:    cargo run -p certus-cli -- ctl status");
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
