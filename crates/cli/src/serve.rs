//! `certus serve`: one node, configured by a TOML file, then environment, then flags (later wins).
//!
//! A node either founds a cluster (`initial_members`, the same list on every founding node; the
//! lowest id initializes) or joins one (`join`: addresses of current members; it is added as a
//! learner, catches up, then becomes a voter unless `learner = true`). A node restarted on its
//! data rejoins as whatever it was.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use certus_client::Client;
use certus_node::{CertusNode, CtFiles, MemberAddr, Node, NodeConfig, RaftTuning};
use serde::Deserialize;
use tracing::info;

use crate::cluster::node_table;
use crate::ct_key::LogKey;

/// Options of `certus serve`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// A TOML config file (see docs/operations.md). Flags and environment override it.
    #[arg(long, env = "CERTUS_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id (at least 1, unique, never reused).
    #[arg(long, env = "CERTUS_ID")]
    id: Option<u64>,
    /// gRPC listen address (Raft transport and client services).
    #[arg(long, env = "CERTUS_GRPC_ADDR")]
    grpc_addr: Option<SocketAddr>,
    /// HTTP listen address (health, ACME challenges).
    #[arg(long, env = "CERTUS_HTTP_ADDR")]
    http_addr: Option<SocketAddr>,
    /// Where the plain-HTTP listener for ACME HTTP-01 challenges listens (`ip:port`), or `off`.
    /// Default: port 80 on the host of the HTTP address.
    #[arg(long, env = "CERTUS_ACME_HTTP_ADDR")]
    acme_http_addr: Option<AcmeHttpAddr>,
    /// How peers and clients reach the gRPC server (`host:port`, a host name allowed); what the
    /// membership records. Default: the listen address (required when it is 0.0.0.0 or [::]).
    #[arg(long, env = "CERTUS_ADVERTISE_GRPC")]
    advertise_grpc: Option<MemberAddr>,
    /// How others reach the HTTP server (`host:port`); default: the listen address.
    #[arg(long, env = "CERTUS_ADVERTISE_HTTP")]
    advertise_http: Option<MemberAddr>,
    /// Data directory.
    #[arg(long, env = "CERTUS_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Join the cluster these members belong to (comma-separated gRPC addresses).
    #[arg(long, env = "CERTUS_JOIN", value_delimiter = ',')]
    join: Vec<String>,
    /// When joining, stay a learner (non-voting).
    #[arg(long, env = "CERTUS_LEARNER")]
    learner: bool,
    /// When joining under the id of a voter (a node that lost its data for good and is not
    /// coming back), remove that voter first and take its place. Without it such a join is
    /// refused: an id is never reused by accident.
    #[arg(long, env = "CERTUS_REPLACE")]
    replace: bool,
    /// The CT log's signing key (PKCS#8 PEM, the same on every node; `certus ct-keygen` makes
    /// one). Without it this node takes no part in the CT log.
    #[arg(long, env = "CERTUS_CT_KEY_FILE")]
    ct_key_file: Option<PathBuf>,
    /// A PEM bundle of the root certificates the CT log accepts chains up to.
    #[arg(long, env = "CERTUS_CT_ROOTS_FILE")]
    ct_roots_file: Option<PathBuf>,
    /// Serve plain text, without TLS or authorization (the config file's `plaintext = true`).
    #[arg(long, env = "CERTUS_PLAINTEXT")]
    plaintext: bool,
}

/// The config file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeFile {
    id: Option<u64>,
    grpc_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    acme_http_addr: Option<AcmeHttpAddr>,
    advertise_grpc: Option<MemberAddr>,
    advertise_http: Option<MemberAddr>,
    data_dir: Option<PathBuf>,
    #[serde(default)]
    initial_members: Vec<InitialMember>,
    #[serde(default)]
    join: Vec<String>,
    #[serde(default)]
    learner: bool,
    #[serde(default)]
    raft: Option<RaftTuning>,
    tick_interval_ms: Option<u64>,
    challenge_retention_ms: Option<u64>,
    /// The `[ct]` table: `key_file`, `roots_file`.
    #[serde(default)]
    ct: CtFiles,
    /// The `[store]` table: `cache_mib`.
    #[serde(default)]
    store: certus_node::StoreSetup,
    /// The `[sessions]` table: `daemons`, `ca_key_file`, `ca_cert_file`, `http01_resolve`,
    /// `http01_timeout_ms`.
    #[serde(default)]
    sessions: certus_node::SessionsSetup,
    /// The `[pipelines]` table: `webhooks`.
    #[serde(default)]
    pipelines: certus_node::PipelinesSetup,
    /// The `[tls]` table: `ca_cert_file`, `cert_file`, `key_file`, `https`.
    tls: Option<certus_node::TlsSetup>,
    /// The `[http]` table: `cert_file`, `key_file`, `header_read_timeout_ms`,
    /// `body_read_timeout_ms`, `connections_per_client_max`.
    #[serde(default)]
    http: certus_node::HttpSetup,
    /// `[[tokens]]`: `name`, `roles`, `sha256`.
    #[serde(default)]
    tokens: Vec<certus_node::edge::security::TokenEntry>,
    /// Serve plain text: no TLS, no authorization. Must be said, never assumed.
    #[serde(default)]
    plaintext: bool,
    /// The `[client_limits]` table: `enabled`, `requests_in_flight_max`, `streams_max`,
    /// `requests_per_second`, `burst`, `clients_max`.
    #[serde(default)]
    client_limits: certus_node::edge::client_limits::ClientLimits,
}

/// Where the ACME listener listens, as `certus serve` is told: an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcmeHttpAddr {
    /// No ACME listener.
    Off,
    /// This address.
    At(SocketAddr),
}

impl std::str::FromStr for AcmeHttpAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<AcmeHttpAddr, String> {
        if text == "off" {
            return Ok(AcmeHttpAddr::Off);
        }
        text.parse().map(AcmeHttpAddr::At).map_err(|_| {
            format!("acme_http_addr is {text:?}; expected an ip:port address or \"off\"")
        })
    }
}

impl<'de> Deserialize<'de> for AcmeHttpAddr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The ACME listener's address: as given, or port 80 (where HTTP-01 validators connect) on the
/// host of the HTTP address.
fn acme_http_addr(given: Option<AcmeHttpAddr>, http_addr: SocketAddr) -> Option<SocketAddr> {
    match given {
        Some(AcmeHttpAddr::Off) => None,
        Some(AcmeHttpAddr::At(addr)) => Some(addr),
        None => Some(SocketAddr::new(
            http_addr.ip(),
            certus_ca::http01::HTTP01_PORT,
        )),
    }
}

/// A start that failed on the ACME listener's port says how to give it one.
fn start_error(error: &certus_node::StartError, config: &NodeConfig) -> String {
    match (error, config.acme_http_addr) {
        (certus_node::StartError::Bind { addr, .. }, Some(acme)) if *addr == acme.to_string() => {
            format!(
                "{error} (acme_http_addr: the plain-HTTP listener ACME HTTP-01 validators fetch \
                 challenges from; port 80 by default). Give the process the right to bind it \
                 (CAP_NET_BIND_SERVICE, as deploy/systemd/certus.service does), set \
                 acme_http_addr to a port that port 80 is forwarded to, or set it to \"off\" if \
                 this node serves no HTTP-01 challenges"
            )
        }
        _ => error.to_string(),
    }
}

/// The CT files of the config file, each overridden by its flag (or environment variable).
fn ct_files(file: CtFiles, key_file: Option<PathBuf>, roots_file: Option<PathBuf>) -> CtFiles {
    CtFiles {
        key_file: key_file.or(file.key_file),
        roots_file: roots_file.or(file.roots_file),
        tile_cache_tiles: file.tile_cache_tiles,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InitialMember {
    id: u64,
    grpc_addr: MemberAddr,
    http_addr: MemberAddr,
}

fn required<T>(value: Option<T>, name: &str) -> Result<T, String> {
    value.ok_or_else(|| {
        format!(
            "{name} is required (config file, CERTUS_{} or --{})",
            name.to_uppercase(),
            name.replace('_', "-")
        )
    })
}

/// What `certus rebuild` and `certus restore` read from a node's config file: who the node is, where its data is,
/// how it talks to its peers, and the peers it knows of.
pub(crate) struct NodeFile {
    pub(crate) id: u64,
    pub(crate) grpc_addr: Option<SocketAddr>,
    pub(crate) advertise_grpc: Option<MemberAddr>,
    pub(crate) data_dir: PathBuf,
    pub(crate) tls: Option<certus_node::TlsSetup>,
    pub(crate) peers: Vec<String>,
    /// `initial_members`: id, gRPC and HTTP address of each (`certus restore`).
    pub(crate) members: Vec<(u64, String, String)>,
}

/// The config file at `path`.
fn read_file(path: &std::path::Path) -> Result<ServeFile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    toml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))
}

/// Reads `path` as `certus serve` does (without environment or flags).
pub(crate) fn node_file(path: &std::path::Path) -> Result<NodeFile, String> {
    let file = read_file(path)?;
    let id = required(file.id, "id")?;
    let mut peers: Vec<String> = file
        .initial_members
        .iter()
        .filter(|member| member.id != id)
        .map(|member| member.grpc_addr.to_string())
        .collect();
    peers.extend(file.join);
    let members = file
        .initial_members
        .iter()
        .map(|member| {
            (
                member.id,
                member.grpc_addr.to_string(),
                member.http_addr.to_string(),
            )
        })
        .collect();
    Ok(NodeFile {
        id,
        grpc_addr: file.grpc_addr,
        advertise_grpc: file.advertise_grpc,
        data_dir: required(file.data_dir, "data_dir")?,
        tls: file.tls,
        peers,
        members,
    })
}

/// The node's configuration from `file`, then environment and flags (`args`): at start, and
/// again on every reload.
fn node_config(args: &ServeArgs, file: &ServeFile) -> Result<NodeConfig, String> {
    let mut config = NodeConfig::new(
        required(args.id.or(file.id), "id")?,
        required(args.grpc_addr.or(file.grpc_addr), "grpc_addr")?,
        required(args.http_addr.or(file.http_addr), "http_addr")?,
        required(args.data_dir.clone().or(file.data_dir.clone()), "data_dir")?,
    );
    config.acme_http_addr = acme_http_addr(
        args.acme_http_addr.or(file.acme_http_addr),
        config.http_addr,
    );
    config.http = file.http.clone();
    config.advertise_grpc = args.advertise_grpc.clone().or(file.advertise_grpc.clone());
    config.advertise_http = args.advertise_http.clone().or(file.advertise_http.clone());
    if let Some(raft) = &file.raft {
        config.raft = raft.clone();
    }
    if let Some(tick) = file.tick_interval_ms {
        config.tick_interval_ms = tick;
    }
    if let Some(retention) = file.challenge_retention_ms {
        config.challenge_retention_ms = retention;
    }
    config.ct = ct_files(
        file.ct.clone(),
        args.ct_key_file.clone(),
        args.ct_roots_file.clone(),
    );
    config.store = file.store.clone();
    config.sessions = file.sessions.clone();
    config.pipelines = file.pipelines.clone();
    let plaintext = args.plaintext || file.plaintext;
    config.tls = match (&file.tls, plaintext) {
        (Some(_), true) => {
            return Err("both [tls] and plaintext are set; choose one".into());
        }
        (None, false) => {
            return Err(
                "no [tls] table: give the node its certificates (see docs/security.md), \
                 or set plaintext = true (or --plaintext) to run without TLS and authorization"
                    .into(),
            );
        }
        (tls, _) => tls.clone(),
    };
    config.tokens = file.tokens.clone();
    config.client_limits = file.client_limits;
    Ok(config)
}

pub(crate) async fn run(args: ServeArgs) -> Result<(), String> {
    let file: ServeFile = match &args.config {
        Some(path) => read_file(path)?,
        None => ServeFile::default(),
    };
    let config = node_config(&args, &file)?;
    // Listen for SIGHUP before anything slow: its default action would end the process.
    let mut hangups = Hangups::new()?;
    let join = if args.join.is_empty() {
        file.join.clone()
    } else {
        args.join.clone()
    };
    let learner = args.learner || file.learner;
    if !join.is_empty() && !file.initial_members.is_empty() {
        return Err("set either initial_members (found a cluster) or join, not both".into());
    }
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|error| format!("cannot create {}: {error}", config.data_dir.display()))?;

    let node = Node::start(config.clone())
        .await
        .map_err(|error| start_error(&error, &config))?;
    let founded = if !file.initial_members.is_empty() {
        found(&node, &config, &file.initial_members).await
    } else if !join.is_empty() {
        join_cluster(&node, &config, &join, learner, args.replace).await
    } else {
        Ok(())
    };
    if let Err(error) = founded {
        node.shutdown().await;
        return Err(error);
    }
    // SIGHUP and `certus ctl reload` re-read the config file (with the same environment and
    // flags); without one, the TLS files are re-read from the same paths.
    if let Some(path) = args.config.clone() {
        let args = args.clone();
        node.set_reload_source(std::sync::Arc::new(move || {
            node_config(&args, &read_file(&path)?)
        }));
    }
    println!("{}", node_table(&[(&node, &config)]));
    if let Some(key_file) = &config.ct.key_file {
        // The node loaded this key to start; this only shows who it is.
        match LogKey::of_file(key_file) {
            Ok(key) => println!(
                "CT log: {}://{}/ct/v1/ (log id {})",
                if config.tls.as_ref().is_some_and(|tls| tls.https) {
                    "https"
                } else {
                    "http"
                },
                config.member().http_addr,
                key.log_id
            ),
            Err(error) => tracing::warn!(%error, "cannot show the CT log id"),
        }
    }

    // Under systemd (Type=notify) the unit becomes active once the node is first ready.
    let stop = wait_for_stop();
    tokio::pin!(stop);
    {
        let ready = crate::systemd::notify_when_ready(&node);
        tokio::pin!(ready);
        let mut told_ready = false;
        loop {
            tokio::select! {
                biased;
                result = &mut stop => {
                    result?;
                    break;
                }
                () = hangups.next() => {
                    info!(id = config.id, "SIGHUP: reloading certificates, tokens and client limits");
                    // The node logs what changed, or why nothing did.
                    let _ = node.reload();
                }
                () = &mut ready, if !told_ready => told_ready = true,
            }
        }
    }
    info!(id = config.id, "stopping");
    crate::systemd::notify_stopping();
    node.shutdown().await;
    Ok(())
}

async fn found(node: &Node, config: &NodeConfig, members: &[InitialMember]) -> Result<(), String> {
    if !members.iter().any(|member| member.id == config.id) {
        return Err(format!(
            "initial_members does not include this node (id {})",
            config.id
        ));
    }
    let lowest = members
        .iter()
        .map(|member| member.id)
        .min()
        .unwrap_or(config.id);
    if lowest != config.id {
        return Ok(());
    }
    let members: BTreeMap<u64, CertusNode> = members
        .iter()
        .map(|member| {
            (
                member.id,
                CertusNode {
                    grpc_addr: member.grpc_addr.to_string(),
                    http_addr: member.http_addr.to_string(),
                },
            )
        })
        .collect();
    node.initialize(members)
        .await
        .map_err(|error| error.to_string())
}

async fn join_cluster(
    node: &Node,
    config: &NodeConfig,
    join: &[String],
    learner: bool,
    replace: bool,
) -> Result<(), String> {
    let id = config.id;
    let already = node
        .replica()
        .membership()
        .members
        .iter()
        .any(|member| member.id == id);
    if already {
        info!(id, "already a member; not joining again");
        return Ok(());
    }
    // Joining asks a member to add this node: the node's own certificate is its identity.
    let client_config = crate::connect::node_client_config(config.tls.as_ref())?;
    let client = Client::with_config(join.iter().cloned(), client_config)
        .map_err(|error| error.to_string())?;
    replace_voter(&client, id, replace).await?;
    info!(id, "joining as a learner");
    let member = config.member();
    client
        .add_learner(id, member.grpc_addr, member.http_addr)
        .await
        .map_err(|error| format!("adding this node as a learner: {error}"))?;
    if learner {
        return Ok(());
    }
    // Promote: the voters are the current voters and this node.
    for _attempt in 0..10 {
        let status = client.status().await.map_err(|error| error.to_string())?;
        let mut voters: Vec<u64> = status
            .members
            .iter()
            .filter(|member| member.voter)
            .map(|member| member.id)
            .collect();
        if voters.contains(&id) {
            return Ok(());
        }
        voters.push(id);
        match client.change_membership(voters, false).await {
            Ok(_) => {
                info!(id, "joined as a voter");
                return Ok(());
            }
            Err(error) => {
                info!(id, %error, "promotion not taken yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    Err("could not become a voter after 10 attempts".into())
}

/// A join under the id of a current voter is refused unless `replace`: this node holds no data
/// of the cluster, so it would be a second node under one id, voting afresh in terms the old one
/// may have voted in. With `replace` the old voter is removed first (the operator says it is gone
/// for good); once its removal is committed, no quorum can count its old votes, and this node
/// joins as a new learner would.
async fn replace_voter(client: &Client, id: u64, replace: bool) -> Result<(), String> {
    let status = client
        .status()
        .await
        .map_err(|error| format!("reading the cluster's members: {error}"))?;
    let Some(existing) = status
        .members
        .iter()
        .find(|member| member.id == id && member.voter)
    else {
        return Ok(());
    };
    if !replace {
        return Err(format!(
            "node id {id} is already a voter of this cluster (at {}), and this node's data              directory holds no part of it. A node that lost its data joins under a new id (ids              are never reused); to take the old node's place once it is gone for good, start              with --replace; to bring the old node back, start it on its own data directory",
            existing.grpc_addr
        ));
    }
    let voters: Vec<u64> = status
        .members
        .iter()
        .filter(|member| member.voter && member.id != id)
        .map(|member| member.id)
        .collect();
    info!(id, old = %existing.grpc_addr, "removing the voter this node replaces");
    client
        .change_membership(voters, false)
        .await
        .map_err(|error| format!("removing the voter with id {id} to replace it: {error}"))?;
    Ok(())
}

/// SIGHUP, each time it arrives (never, where there is no such signal).
struct Hangups {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Hangups {
    fn new() -> Result<Hangups, String> {
        Ok(Hangups {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .map_err(|error| format!("cannot wait for SIGHUP: {error}"))?,
        })
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        if self.signal.recv().await.is_some() {
            return;
        }
        std::future::pending::<()>().await;
    }
}

/// Ctrl-C or SIGTERM (what service managers send).
async fn wait_for_stop() -> Result<(), String> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|error| format!("cannot wait for SIGTERM: {error}"))?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.map_err(|error| format!("cannot wait for Ctrl-C: {error}")),
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c()
            .await
            .map_err(|error| format!("cannot wait for Ctrl-C: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_config_file_is_accepted() {
        let doc = include_str!("../../../docs/operations.md");
        let section = doc
            .split("## One node: `certus serve`")
            .nth(1)
            .expect("the serve section");
        let example = section
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("a TOML example");
        let file: ServeFile = toml::from_str(example).expect("the example parses");
        let tls = file.tls.expect("the example shows [tls]");
        assert!(tls.https);
        assert_eq!(file.tokens.len(), 1);
        assert!(file.client_limits.enabled);
        assert!(!file.plaintext);
    }

    #[test]
    fn the_systemd_example_is_accepted_and_speaks_tls() {
        let example = include_str!("../../../deploy/systemd/node.toml");
        let file: ServeFile = toml::from_str(example).expect("deploy/systemd/node.toml parses");
        assert!(!file.plaintext, "the example never runs in plain text");
        let tls = file.tls.expect("the example has a [tls] table");
        assert!(tls.https);
        assert_eq!(tls.ca_cert_file, PathBuf::from("/etc/certus/pki/ca.pem"));
        assert_eq!(tls.cert_file, PathBuf::from("/etc/certus/pki/node-1.pem"));
        assert_eq!(
            tls.key_file,
            PathBuf::from("/etc/certus/pki/node-1-key.pem")
        );
        assert_eq!(file.id, Some(1));
        assert_eq!(file.initial_members.len(), 3);
        assert!(file.pipelines.webhooks);
        assert!(file.tokens.is_empty(), "the token entry is commented out");
        assert!(file.client_limits.enabled);
    }

    #[test]
    fn the_config_file_takes_a_ct_table() {
        let file: ServeFile = toml::from_str(
            "id = 1\n[ct]\nkey_file = \"/etc/certus/ct-log-key.pem\"\nroots_file = \"/etc/certus/roots.pem\"\n",
        )
        .expect("parses");
        assert_eq!(
            file.ct,
            CtFiles {
                key_file: Some(PathBuf::from("/etc/certus/ct-log-key.pem")),
                roots_file: Some(PathBuf::from("/etc/certus/roots.pem")),
                ..CtFiles::default()
            }
        );
        let file: ServeFile = toml::from_str("id = 1\n").expect("parses");
        assert_eq!(file.ct, CtFiles::default(), "no [ct]: no CT log");

        let error = toml::from_str::<ServeFile>("[ct]\nkey = \"x.pem\"\n").expect_err("unknown");
        assert!(error.to_string().contains("key"), "{error}");
    }

    #[test]
    fn the_acme_listener_is_on_port_80_of_the_http_host_unless_told() {
        let http: SocketAddr = "10.0.0.1:7181".parse().expect("addr");
        assert_eq!(
            acme_http_addr(None, http),
            Some("10.0.0.1:80".parse().expect("addr"))
        );
        let file: ServeFile =
            toml::from_str("acme_http_addr = \"10.0.0.1:8080\"\n").expect("parses");
        assert_eq!(
            acme_http_addr(file.acme_http_addr, http),
            Some("10.0.0.1:8080".parse().expect("addr"))
        );
        let file: ServeFile = toml::from_str("acme_http_addr = \"off\"\n").expect("parses");
        assert_eq!(acme_http_addr(file.acme_http_addr, http), None);
        let error = toml::from_str::<ServeFile>("acme_http_addr = \"port 80\"\n")
            .expect_err("neither an address nor off");
        assert!(error.to_string().contains("\"off\""), "{error}");
    }

    #[test]
    fn an_acme_port_that_cannot_be_bound_says_what_to_do() {
        let mut config = NodeConfig::new(
            1,
            "127.0.0.1:7101".parse().expect("addr"),
            "127.0.0.1:7181".parse().expect("addr"),
            PathBuf::from("d"),
        );
        config.acme_http_addr = Some("127.0.0.1:80".parse().expect("addr"));
        let refused = certus_node::StartError::Bind {
            addr: "127.0.0.1:80".into(),
            reason: "Permission denied (os error 13)".into(),
        };
        let message = start_error(&refused, &config);
        assert!(message.starts_with(&refused.to_string()), "{message}");
        for hint in ["CAP_NET_BIND_SERVICE", "forwarded", "\"off\""] {
            assert!(message.contains(hint), "{hint}: {message}");
        }
        let other = certus_node::StartError::Bind {
            addr: "127.0.0.1:7181".into(),
            reason: "Address already in use".into(),
        };
        assert_eq!(start_error(&other, &config), other.to_string());
    }

    #[test]
    fn the_config_file_takes_an_http_table() {
        let file: ServeFile = toml::from_str(
            "[http]\ncert_file = \"public.pem\"\nkey_file = \"public-key.pem\"\n\
             header_read_timeout_ms = 5000\nbody_read_timeout_ms = 20000\n\
             connections_per_client_max = 32\n",
        )
        .expect("parses");
        assert_eq!(file.http.cert_file, Some(PathBuf::from("public.pem")));
        assert_eq!(file.http.header_read_timeout_ms, 5000);
        assert_eq!(file.http.body_read_timeout_ms, 20000);
        assert_eq!(file.http.connections_per_client_max, 32);
        let file: ServeFile = toml::from_str("id = 1\n").expect("parses");
        assert_eq!(file.http, certus_node::HttpSetup::default());
        toml::from_str::<ServeFile>("[http]\ntimeout_ms = 1\n").expect_err("unknown key");
    }

    #[test]
    fn the_config_file_takes_advertised_addresses_and_named_members() {
        let file: ServeFile = toml::from_str(
            "id = 1\ngrpc_addr = \"0.0.0.0:7101\"\nhttp_addr = \"0.0.0.0:7181\"\n\
             advertise_grpc = \"certus-0.certus.ns.svc:7101\"\n\
             advertise_http = \"certus-0.certus.ns.svc:7181\"\n\
             [[initial_members]]\nid = 1\ngrpc_addr = \"certus-0.certus.ns.svc:7101\"\n\
             http_addr = \"certus-0.certus.ns.svc:7181\"\n\
             [[initial_members]]\nid = 2\ngrpc_addr = \"10.0.0.2:7101\"\n\
             http_addr = \"10.0.0.2:7181\"\n",
        )
        .expect("parses");
        assert_eq!(
            file.advertise_grpc.map(|addr| addr.to_string()).as_deref(),
            Some("certus-0.certus.ns.svc:7101")
        );
        assert_eq!(file.initial_members.len(), 2);
        assert_eq!(
            file.initial_members[0].grpc_addr.as_str(),
            "certus-0.certus.ns.svc:7101"
        );
        assert_eq!(file.initial_members[1].http_addr.as_str(), "10.0.0.2:7181");
        let error = toml::from_str::<ServeFile>("advertise_grpc = \"certus_0:7101\"\n")
            .expect_err("not a host name");
        assert!(error.to_string().contains("RFC 1123"), "{error}");
        let error = toml::from_str::<ServeFile>(
            "[[initial_members]]\nid = 1\ngrpc_addr = \"node-1\"\nhttp_addr = \"node-1:1\"\n",
        )
        .expect_err("no port");
        assert!(error.to_string().contains("no port"), "{error}");
    }

    #[test]
    fn the_config_file_takes_a_pipelines_table() {
        let file: ServeFile =
            toml::from_str("id = 1\n[pipelines]\nwebhooks = false\n").expect("parses");
        assert!(!file.pipelines.webhooks);
        let file: ServeFile = toml::from_str("id = 1\n").expect("parses");
        assert!(file.pipelines.webhooks, "every node competes by default");
        let error =
            toml::from_str::<ServeFile>("[pipelines]\nwebhook = false\n").expect_err("unknown");
        assert!(error.to_string().contains("webhook"), "{error}");
    }

    #[test]
    fn ct_flags_override_the_file() {
        let file = CtFiles {
            key_file: Some(PathBuf::from("file-key.pem")),
            roots_file: Some(PathBuf::from("file-roots.pem")),
            ..CtFiles::default()
        };
        assert_eq!(ct_files(file.clone(), None, None), file);
        assert_eq!(
            ct_files(file, Some(PathBuf::from("flag-key.pem")), None),
            CtFiles {
                key_file: Some(PathBuf::from("flag-key.pem")),
                roots_file: Some(PathBuf::from("file-roots.pem")),
                ..CtFiles::default()
            }
        );
    }
}
