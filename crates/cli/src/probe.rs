//! `certus probe`: asks one node, by the standard gRPC health protocol, whether it is ready to
//! serve (or, with `--live`, whether it is alive) and exits 0 or 1 — a container's HEALTHCHECK or
//! a script's wait, with no HTTP client or shell tool in the image.
//!
//! It reads the node's own config file for the address and the `[tls]` table, so in a container
//! it needs no arguments beyond what `certus serve` was given (`CERTUS_CONFIG`,
//! `CERTUS_GRPC_ADDR`, `CERTUS_ADVERTISE_GRPC`). It dials the advertised address when there is
//! one (the name the node's certificate carries; a node listening on `0.0.0.0` has no other),
//! else the listening one.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use certus_client::{Client, ClientConfig, ServingStatus};

use crate::serve::node_file;

/// Options of `certus probe`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    /// The node's config file, as for `certus serve`: its gRPC address and `[tls]` table.
    #[arg(long, env = "CERTUS_CONFIG")]
    config: Option<PathBuf>,
    /// The node's gRPC address (overrides the config file's `grpc_addr`).
    #[arg(long, env = "CERTUS_GRPC_ADDR")]
    grpc_addr: Option<SocketAddr>,
    /// The node's advertised gRPC address (overrides the config file's `advertise_grpc`); dialled
    /// in preference to the listening one.
    #[arg(long, env = "CERTUS_ADVERTISE_GRPC")]
    advertise_grpc: Option<certus_node::MemberAddr>,
    /// Ask whether the node is alive (Raft and every node task run: restart it if not) rather
    /// than ready to serve (a member, a leader known, caught up).
    #[arg(long)]
    live: bool,
    /// How long to wait for the node's answer, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    timeout_ms: u64,
}

/// Runs `certus probe`: `Ok` when the node answers `SERVING`.
pub(crate) async fn run(args: ProbeArgs) -> Result<(), String> {
    let file = match &args.config {
        Some(path) => Some(node_file(path)?),
        None => None,
    };
    let advertised = args
        .advertise_grpc
        .or(file.as_ref().and_then(|file| file.advertise_grpc.clone()));
    let listening = args
        .grpc_addr
        .or(file.as_ref().and_then(|file| file.grpc_addr));
    let endpoint = match (advertised, listening) {
        (Some(advertised), _) => advertised.to_string(),
        (None, Some(listening)) => listening.to_string(),
        (None, None) => {
            return Err("no gRPC address: give --grpc-addr or a --config with grpc_addr".into());
        }
    };
    let tls = file.as_ref().and_then(|file| file.tls.as_ref());
    let attempt_timeout = Duration::from_millis(args.timeout_ms);
    let config = ClientConfig {
        attempt_timeout,
        ..crate::connect::node_client_config(tls)?
    };
    let client =
        Client::with_config([endpoint.clone()], config).map_err(|error| error.to_string())?;
    let (service, what) = if args.live {
        (certus_node::services::health::LIVENESS_SERVICE_NAME, "live")
    } else {
        ("", "ready")
    };
    match client.health_check_of(&endpoint, service).await {
        Ok(ServingStatus::Serving) => {
            println!("{endpoint}: {what}");
            Ok(())
        }
        Ok(status) => Err(format!("{endpoint}: not {what} ({})", status.as_str_name())),
        Err(error) => Err(format!("{endpoint}: no answer: {error}")),
    }
}
