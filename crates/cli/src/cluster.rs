//! Helpers shared by `up` and `serve`: waiting for a leader, printing a node table.

use std::time::Duration;

use certus_node::Node;
use comfy_table::Table;

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

/// A table of nodes: id, role, gRPC and HTTP endpoints, data directory.
pub(crate) fn node_table(nodes: &[(&Node, String)]) -> Table {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(["node", "role", "gRPC", "HTTP", "data"]);
    for (node, data_dir) in nodes {
        let replica = node.replica();
        let role = certus_node::admin_service::role_name(replica.raft.metrics().borrow().state);
        table.add_row([
            replica.id.to_string(),
            role.to_owned(),
            replica.node.grpc_addr.clone(),
            format!("http://{}", replica.node.http_addr),
            data_dir.clone(),
        ]);
    }
    table
}
