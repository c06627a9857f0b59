//! Helpers shared by `up` and `serve`: waiting for a leader, printing a node table.

use std::time::Duration;

use certus_node::{Node, NodeConfig};
use comfy_table::Table;

/// Starts a node per config in this process (creating data directories) and has the first one
/// found the cluster of all of them; on a restart the cluster exists and that is a no-op.
pub(crate) async fn start_local(configs: &[NodeConfig]) -> Result<Vec<Node>, String> {
    let members = configs
        .iter()
        .map(|config| (config.id, config.member()))
        .collect();
    let mut nodes: Vec<Node> = Vec::new();
    for config in configs {
        let started = match std::fs::create_dir_all(&config.data_dir) {
            Ok(()) => Node::start(config.clone())
                .await
                .map_err(|error| error.to_string()),
            Err(error) => Err(format!(
                "cannot create {}: {error}",
                config.data_dir.display()
            )),
        };
        match started {
            Ok(node) => nodes.push(node),
            Err(error) => {
                for node in nodes {
                    node.shutdown().await;
                }
                return Err(format!("node {}: {error}", config.id));
            }
        }
    }
    if let Some(first) = nodes.first() {
        first
            .initialize(members)
            .await
            .map_err(|error| error.to_string())?;
    }
    Ok(nodes)
}

/// Waits until some node in `nodes` knows a leader, up to `timeout`.
pub(crate) async fn await_leader(nodes: &[Node], timeout: Duration) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        for node in nodes {
            if let Some(leader) = node.replica().raft.metrics().borrow().current_leader {
                return Some(leader);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A table of nodes: id, role, gRPC and HTTP endpoints, the ACME listener, data directory.
pub(crate) fn node_table(nodes: &[(&Node, &NodeConfig)]) -> Table {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(["node", "role", "gRPC", "HTTP", "ACME HTTP", "data"]);
    for (node, config) in nodes {
        let replica = node.replica();
        let role = certus_node::convert::admin::role_name(replica.raft.metrics().borrow().state);
        table.add_row([
            replica.id.to_string(),
            role.to_owned(),
            replica.node.grpc_addr.clone(),
            replica.node.http_addr.clone(),
            config
                .acme_http_addr
                .map_or_else(|| "off".to_owned(), |addr| addr.to_string()),
            config.data_dir.display().to_string(),
        ]);
    }
    table
}
