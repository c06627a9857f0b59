//! `certus rebuild`: replaces a stopped node's data (damaged, or simply not trusted) with an empty
//! store holding only its vote, once the rest of the cluster provably holds everything the node
//! could have acknowledged. Started again, the node catches up from the leader like a lagging
//! follower: by log, or by the leader's snapshot when the log was compacted; its CT entries come
//! back from its peers.
//!
//! Why the wait: a voter's acknowledgement counts towards committing an entry. Before its copy is
//! thrown away, the leader's last log index `L` (read once this node is stopped, so nothing newer
//! can carry this node's acknowledgement) must be applied on a majority of the voters *without*
//! this node; then every committed entry survives without it, and its vote — kept, so it never
//! votes twice in a term — cannot help elect a leader that lacks one.

use std::path::PathBuf;
use std::time::Duration;

use certus_client::Client;

use crate::serve::node_file;

/// Options of `certus rebuild`.
#[derive(Debug, clap::Args)]
pub(crate) struct RebuildArgs {
    /// The node's config file, as for `certus serve` (environment and flags are not read).
    #[arg(long, env = "CERTUS_CONFIG")]
    config: PathBuf,
    /// Members to ask (host:port, comma-separated); by default the config's `initial_members`
    /// (other than this node) and `join`.
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// How long to wait for the other members to hold everything the leader has.
    #[arg(long, default_value_t = 60)]
    wait_seconds: u64,
}

/// Runs `certus rebuild`.
pub(crate) async fn run(args: RebuildArgs) -> Result<(), String> {
    let node = node_file(&args.config)?;
    let peers = if args.peers.is_empty() {
        node.peers.clone()
    } else {
        args.peers.clone()
    };
    if peers.is_empty() {
        return Err(
            "no peers to ask: the config names none (initial_members, join); give --peers".into(),
        );
    }
    let store = node.data_dir.join("raft");
    if !store.exists() {
        return Err(format!(
            "{} does not exist: nothing to rebuild",
            store.display()
        ));
    }
    let client = Client::with_config(
        peers.iter().cloned(),
        crate::connect::node_client_config(node.tls.as_ref())?,
    )
    .map_err(|error| error.to_string())?;
    let leader = client
        .status()
        .await
        .map_err(|error| format!("asking the cluster for its leader: {error}"))?;
    if leader.leader_id == node.id {
        return Err(format!(
            "the cluster names node {} as its leader: stop it before rebuilding it",
            node.id
        ));
    }
    let voters: Vec<_> = leader.members.iter().filter(|m| m.voter).collect();
    if !leader.members.iter().any(|member| member.id == node.id) {
        return Err(format!(
            "node {} is not a member of the cluster at {}; nothing to rebuild into",
            node.id,
            peers.join(", ")
        ));
    }
    let target = leader.last_log_index;
    let others: Vec<_> = voters.iter().filter(|m| m.id != node.id).collect();
    let majority = voters.len() / 2 + 1;
    println!(
        "leader: node {} (last log index {target}); waiting for {majority} of the other voters \
         to have applied it",
        leader.leader_id
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.wait_seconds);
    loop {
        let mut holding = Vec::new();
        for member in &others {
            if let Ok(status) = client.status_of(&member.grpc_addr).await
                && status.applied_index >= target
            {
                holding.push(member.id);
            }
        }
        if holding.len() >= majority {
            println!("nodes {holding:?} hold everything up to {target}");
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "only nodes {holding:?} of the other voters hold the log up to {target}; {majority} \
                 must, or an entry this node acknowledged could be lost. Bring the other members \
                 back, then try again"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stamp = certus_node::Clock::system().now_ms() / 1000;
    let aside = node.data_dir.join(format!("raft.replaced-{stamp}"));
    let log_dir = node.data_dir.join("raft-log");
    let log_aside = node.data_dir.join(format!("raft-log.replaced-{stamp}"));
    let rebuilt = certus_store::rebuild_keeping_vote(&store, &aside, &log_dir, &log_aside)
        .map_err(|error| format!("{error} (is the node still running? stop it first)"))?;
    println!(
        "rebuilt {}: {}; the old data is in {} (delete it once the node is back)",
        store.display(),
        if rebuilt.kept_vote {
            "kept its vote"
        } else {
            "it had never voted"
        },
        rebuilt.moved_to.display()
    );
    if let Some(log_moved_to) = &rebuilt.log_moved_to {
        println!(
            "the old Raft log segments are in {} (delete them too)",
            log_moved_to.display()
        );
    }
    println!(
        "start the node as before (certus serve --config {}); it catches up from the leader",
        args.config.display()
    );
    Ok(())
}
