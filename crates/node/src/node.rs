//! Starting and stopping a node: storage, Raft, the gRPC and HTTP servers, the leader's tick.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::ordered_watch as watch;
use certus_store::{
    AppendObserver, CtDatabase, Disk, DiskError, Files, LogStore, OsFiles, SledDisk,
    StateMachineStore,
};
use openraft::error::{InitializeError, RaftError};
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::config::NodeConfig;
use crate::ct::node::CtNode;
use crate::ct::setup::{CtSetup, load_ct_setup};
use crate::limits::{
    CLIENT_MESSAGE_BYTES_MAX, PIPELINE_REPLY_BYTES_MAX, PIPELINE_REQUEST_BYTES_MAX,
    RAFT_MESSAGE_BYTES_MAX,
};
use crate::raft::network::{Network, Peers};
use crate::raft::replica::{BootLog, Replica};
use crate::raft::service::RaftService;
use crate::raft::types::{CertusNode, NodeId, Raft};
use crate::roles::session_daemons::{SessionDaemons, SessionParts};
use crate::services::admin::AdminService;
use crate::services::health::HealthService;
use crate::services::leases::LeasesService;
use crate::services::log::LogService;
use crate::stop::stopped;

/// Why a node did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The data directory could not be opened.
    #[error("cannot open data in {path}: {reason}")]
    Storage {
        /// Where.
        path: String,
        /// Why.
        reason: String,
    },
    /// A listening address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// Where.
        addr: String,
        /// Why.
        reason: String,
    },
    /// Raft failed to start or initialize.
    #[error("raft: {0}")]
    Raft(String),
}

/// A running node. Dropping it without [`Node::shutdown`] leaves its tasks running.
pub struct Node {
    replica: Arc<Replica>,
    ct: Option<Arc<CtNode>>,
    /// What this node's ACME resources share: its nonces, which are not replicated.
    acme: Arc<crate::acme::AcmeServer>,
    stop: watch::Sender<bool>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    /// How many handles to the disk are left (openraft's tasks release theirs as they end).
    disk_handles: Box<dyn Fn() -> usize + Send + Sync>,
    /// The certificates, tokens and client limits in force, and how to reload them.
    reloader: Arc<crate::edge::reload::Reloader>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// The file directories a node keeps beside its sled database.
#[derive(Clone, Debug)]
pub struct NodeFiles {
    /// The Raft log's segments.
    pub raft_log: Arc<dyn Files>,
    /// The CT log's full tiles, bundles of entries and leaf-index runs.
    pub ct_log: Arc<dyn Files>,
}

/// How long a stopping node waits for its storage to be released.
const DISK_RELEASE_WAIT: Duration = Duration::from_secs(10);
/// How long a stopping node waits for its servers and tasks to finish what they are doing
/// before it drops them. Most end at once; a write waits for its commit, which never comes on
/// a leader that lost its quorum (openraft does not step down for that), and a node must still
/// stop then.
const TASKS_STOP_WAIT: Duration = Duration::from_secs(10);

/// What a node is started on besides its configuration: its storage, its clock, and what its
/// CT log and session daemons work with. Production opens them from the configuration
/// ([`NodeParts::open`]); the simulation builds its own (a `SimDisk` and `SimFiles` that
/// outlive crashes, a skewed clock, its own CT key, its challenge tester and upstream CA, an
/// observer of applied requests).
pub struct NodeParts<D> {
    /// The store of the vote, the committed pointer, the snapshot and the CT database's edge.
    pub disk: Arc<D>,
    /// The file directories beside it.
    pub files: NodeFiles,
    /// The node's wall clock.
    pub clock: Clock,
    /// The CT log's key and roots (`None`: this node runs no CT log).
    pub ct: Option<CtSetup>,
    /// What the session daemons work with (used only when `config.sessions.daemons` is on).
    pub sessions: SessionParts,
    /// Told of every client request the state machine applies for the first time.
    pub applied: Option<certus_store::ApplyObserver>,
}

impl<D> std::fmt::Debug for NodeParts<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeParts")
            .field("files", &self.files)
            .field("clock", &self.clock)
            .field("ct", &self.ct)
            .finish_non_exhaustive()
    }
}

impl NodeParts<SledDisk> {
    /// A node's parts as its configuration names them: sled in `config.data_dir/raft`, the Raft
    /// log's segments in `config.data_dir/raft-log` and the CT log's tiles and bundles in
    /// `config.data_dir/ct-log`; the CT log set up from `config.ct`'s files, and the session
    /// daemons (if on) working with what `config.sessions` names; the given clock.
    pub fn open(config: &NodeConfig, clock: Clock) -> Result<NodeParts<SledDisk>, StartError> {
        let path = config.data_dir.join("raft");
        let disk = SledDisk::open_with_cache(&path, Some(config.store.cache_mib << 20))
            .map_err(|error| storage_error(&path, &error))?;
        let log_path = config.data_dir.join("raft-log");
        let raft_log =
            OsFiles::open(&log_path).map_err(|error| storage_error(&log_path, &error))?;
        let ct_path = config.data_dir.join("ct-log");
        let ct_log = OsFiles::open(&ct_path).map_err(|error| storage_error(&ct_path, &error))?;
        let files = NodeFiles {
            raft_log: Arc::new(raft_log),
            ct_log: Arc::new(ct_log),
        };
        let ct = load_ct_setup(&config.ct).map_err(StartError::Config)?;
        let sessions = if config.sessions.daemons {
            SessionParts::from_setup(&config.sessions).map_err(StartError::Config)?
        } else {
            SessionParts::default()
        };
        Ok(NodeParts {
            disk: Arc::new(disk),
            files,
            clock,
            ct,
            sessions,
            applied: None,
        })
    }
}

impl Node {
    /// Starts a node on what its configuration names ([`NodeParts::open`]), with the system
    /// clock.
    pub async fn start(config: NodeConfig) -> Result<Node, StartError> {
        let parts = NodeParts::open(&config, Clock::system())?;
        Node::start_with(config, parts).await
    }

    /// Starts a node on `parts`.
    pub async fn start_with<D>(config: NodeConfig, parts: NodeParts<D>) -> Result<Node, StartError>
    where
        D: Disk + Send + Sync + 'static,
    {
        let NodeParts {
            disk,
            files,
            clock,
            ct,
            sessions,
            applied,
        } = parts;
        config.validate().map_err(StartError::Config)?;
        // A CA that cannot cover a leaf issued now would fail every issuance; say so at start.
        if config.sessions.daemons
            && sessions.upstream.is_none()
            && let Some(ca) = &sessions.ca
        {
            ca.check_can_issue(clock.now_ms(), certus_ca::issuer::LEAF_VALIDITY_DEFAULT)
                .map_err(|error| StartError::Config(format!("sessions CA: {error}")))?;
        }
        // Every file the node reloads is read here, so a bad one stops the start with its name.
        let reloader =
            Arc::new(crate::edge::reload::Reloader::new(&config).map_err(StartError::Config)?);
        let peer_tls = reloader.peer_tls().clone();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let ct = match ct {
            Some(setup) => {
                let store = certus_store::CtStoreConfig {
                    tile_cache_tiles: config.ct.tile_cache_tiles,
                };
                let db = CtDatabase::open_with(
                    Arc::clone(&disk) as Arc<dyn Disk>,
                    Arc::clone(&files.ct_log),
                    store,
                )
                .map_err(|error| StartError::Storage {
                    path: config.data_dir.display().to_string(),
                    reason: error.to_string(),
                })?;
                Some(Arc::new(
                    CtNode::new(setup, db, Arc::clone(&metrics))
                        .map_err(StartError::Config)?
                        .with_peer_tls(peer_tls.clone()),
                ))
            }
            None => None,
        };
        let openraft_config = Arc::new(config.openraft().map_err(StartError::Config)?);
        let log_store = LogStore::open(
            Arc::clone(&disk),
            Arc::clone(&files.raft_log),
            config.raft.log_segment_bytes,
        )
        .map_err(|error| storage_error(&config.data_dir, &error))?;
        #[cfg(madsim)]
        let log_store = log_store.with_sync_runner(crate::raft::runtime::simulated_log_sync());
        let mut log_store = log_store.with_observer(AppendObserver::new({
            let metrics = Arc::clone(&metrics);
            move |timing| metrics.observe_log_append(timing)
        }));
        let boot = boot_log(&mut log_store)
            .await
            .map_err(|reason| StartError::Storage {
                path: config.data_dir.display().to_string(),
                reason,
            })?;
        let mut state_machine =
            StateMachineStore::open(Arc::clone(&disk)).map_err(|error| StartError::Storage {
                path: config.data_dir.display().to_string(),
                reason: error.to_string(),
            })?;
        if let Some(observer) = applied {
            state_machine = state_machine.with_observer(observer);
        }
        #[cfg(madsim)]
        {
            state_machine = state_machine.with_pacer(crate::raft::runtime::simulated_apply_pacer());
        }
        let reader = state_machine.reader();
        let peers = Peers::new(peer_tls);
        let raft = Raft::new(
            config.id,
            openraft_config,
            Network::new(config.id, peers.clone()),
            log_store,
            state_machine,
        )
        .await
        .map_err(|fatal| StartError::Raft(fatal.to_string()))?;
        let replica = Replica::new(config.id, config.member(), raft, reader, clock, peers, boot);
        let (stop, stopped) = watch::channel(false);
        // One authorizer for both ports: the tokens are shared (a reload replaces them) and a
        // certificate's identity, once parsed, serves gRPC and HTTP alike. Without TLS every
        // call is let through.
        #[cfg(not(madsim))]
        let authorizer = reloader.authorizer().cloned();
        #[cfg(not(madsim))]
        let grpc = serve_grpc(
            &config,
            &reloader,
            Arc::clone(&replica),
            ct.clone(),
            Arc::clone(&metrics),
            stopped.clone(),
        );
        #[cfg(madsim)]
        let grpc = serve_grpc(
            &config,
            &reloader,
            Arc::clone(&replica),
            ct.clone(),
            stopped.clone(),
        );
        let mut servers = vec![grpc.await?];
        // ACME validates with the session daemons' HTTP-01 tester and issues through sessions.
        let acme_tester = if config.sessions.daemons {
            sessions.tester.clone()
        } else {
            None
        };
        // Built in the simulation too, which has no HTTP: its ACME clients draw and use this
        // node's nonces through `Node::acme`.
        #[cfg(not(madsim))]
        let https = reloader.https().is_some();
        #[cfg(madsim)]
        let https = false;
        let acme = Arc::new(crate::acme::AcmeServer::new(
            config.id,
            https,
            sessions.ca.clone(),
        ));
        #[cfg(not(madsim))]
        servers.extend(
            crate::edge::http_server::serve_http(
                &config,
                reloader.https(),
                crate::edge::http::node_router(
                    Arc::clone(&replica),
                    Arc::clone(&metrics),
                    ct.clone(),
                    Some(Arc::clone(&acme)),
                    authorizer.map(Arc::new),
                ),
                Arc::clone(&replica),
                Arc::clone(&metrics),
                stopped.clone(),
            )
            .await
            .map_err(|error| match error {
                crate::edge::http_server::ListenError::Bind { addr, reason } => {
                    StartError::Bind { addr, reason }
                }
            })?,
        );
        if let Some(ct) = &ct {
            servers.push(replica.tasks.spawn(
                "ct round",
                crate::ct::node::run(Arc::clone(&replica), Arc::clone(ct), stopped.clone()),
            ));
        }
        if let Some(tester) = acme_tester {
            servers.push(replica.tasks.spawn(
                "ACME validator",
                crate::acme::validator::run(Arc::clone(&replica), tester, stopped.clone()),
            ));
        }
        if config.sessions.daemons {
            let daemons = SessionDaemons::new(config.id, sessions, &config.sessions);
            servers.push(replica.tasks.spawn(
                "session daemons",
                crate::roles::session_daemons::run(Arc::clone(&replica), daemons, stopped.clone()),
            ));
        }
        // Pipelines' webhooks: every node competes for the role; one at a time sends. The
        // simulation has no HTTP: its harness runs `pipeline_webhooks::run_with` on each node's
        // machine with a sender over simulated links (sim/src/pipelines/webhooks.rs).
        #[cfg(not(madsim))]
        if config.pipelines.webhooks {
            let webhooks = crate::roles::pipeline_webhooks::WebhookProcessor::http(config.id)
                .map_err(StartError::Config)?
                .with_metrics(Arc::clone(&metrics));
            servers.push(replica.tasks.spawn(
                "pipeline webhooks",
                crate::roles::pipeline_webhooks::run_with(
                    Arc::clone(&replica),
                    webhooks,
                    stopped.clone(),
                ),
            ));
        }
        servers.push(replica.tasks.spawn(
            "leader change counter",
            count_leader_changes(replica.metrics(), Arc::clone(&metrics), stopped.clone()),
        ));
        servers.push(replica.tasks.spawn(
            "split vote breaker",
            break_split_votes(
                replica.raft.clone(),
                config.raft.election_timeout_min_ms,
                config.raft.election_timeout_max_ms,
                stopped.clone(),
            ),
        ));
        servers.push(replica.tasks.spawn(
            "ticks",
            crate::roles::ticks::run(Arc::clone(&replica), config.clone(), stopped),
        ));
        info!(
            id = config.id,
            grpc = %config.grpc_addr,
            http = %config.http_addr,
            acme_http = ?config.acme_http_addr,
            "node started"
        );
        let disk = Arc::downgrade(&disk);
        Ok(Node {
            replica,
            ct,
            acme,
            stop,
            servers,
            disk_handles: Box::new(move || disk.strong_count()),
            reloader,
        })
    }

    /// Reloads this node's certificates, tokens and client limits from its reload source
    /// ([`Node::set_reload_source`]; by default the files its configuration named at start, from
    /// the same paths). Nothing changes when any of it fails to load; the error says which file
    /// and why.
    pub fn reload(&self) -> Result<crate::edge::reload::ReloadOutcome, String> {
        self.reloader.reload()
    }

    /// Reloads the reloadable settings of `config` (see [`crate::edge::reload`]); the rest of it
    /// is reported as ignored until a restart.
    pub fn reload_config(
        &self,
        config: &NodeConfig,
    ) -> Result<crate::edge::reload::ReloadOutcome, String> {
        self.reloader.reload_config(config)
    }

    /// Where [`Node::reload`] (and the `Admin/Reload` call) read the configuration from now on.
    pub fn set_reload_source(&self, source: Arc<dyn crate::edge::reload::ReloadSource>) {
        self.reloader.set_source(source);
    }

    /// What every service of this node shares.
    pub fn replica(&self) -> &Arc<Replica> {
        &self.replica
    }

    /// This node's part in the CT log, if it runs one.
    pub fn ct(&self) -> Option<&Arc<CtNode>> {
        self.ct.as_ref()
    }

    /// What this node's ACME resources share: the nonces it issued and not yet accepted (each
    /// node has its own, and a restarted node starts with none).
    pub fn acme(&self) -> &Arc<crate::acme::AcmeServer> {
        &self.acme
    }

    /// Makes this node the first member of a new cluster of `members`. A node that is already
    /// part of a cluster (it has a vote or a log) is left as it is.
    pub async fn initialize(
        &self,
        members: BTreeMap<NodeId, CertusNode>,
    ) -> Result<(), StartError> {
        // openraft refuses to initialize a node with a vote, a log or a snapshot, and logs that
        // refusal as an ERROR: on every restart of a founding node, so ask it only when new.
        // The store as read at start first: openraft's metrics may not show the restored vote
        // and log yet when a loaded machine gets here.
        let founded = self.replica.founded_at_start() || {
            let metrics = self.replica.metrics();
            let metrics = metrics.borrow();
            metrics.vote != openraft::Vote::default()
                || metrics.last_log_index.is_some()
                || metrics.snapshot.is_some()
        };
        if founded {
            debug!(id = self.replica.id, "already initialized");
            return Ok(());
        }
        match self.replica.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                debug!(id = self.replica.id, "already initialized");
                Ok(())
            }
            Err(error) => Err(StartError::Raft(error.to_string())),
        }
    }

    /// Stops the servers and Raft; waits for them.
    pub async fn shutdown(self) {
        self.replica.tasks.stopping();
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + TASKS_STOP_WAIT;
        let mut dropped = 0;
        for mut server in self.servers {
            // `timeout`, not `timeout_at`: the simulation's runtime has only the former.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if tokio::time::timeout(left, &mut server).await.is_err() {
                server.abort();
                dropped += 1;
            }
        }
        if dropped > 0 {
            warn!(
                id = self.replica.id,
                dropped, "tasks still busy {TASKS_STOP_WAIT:?} after the stop were dropped"
            );
        }
        // The CT database holds the disk too.
        drop(self.ct);
        if let Err(error) = self.replica.raft.shutdown().await {
            warn!(%error, "raft did not stop cleanly");
        }
        // openraft's replication and storage tasks end shortly after its core; wait until they
        // have let go of the disk, so the data can be reopened (sled holds a file lock) as soon
        // as this returns.
        let deadline = tokio::time::Instant::now() + DISK_RELEASE_WAIT;
        while (self.disk_handles)() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if (self.disk_handles)() > 0 {
            warn!(
                id = self.replica.id,
                "storage still held after {DISK_RELEASE_WAIT:?}"
            );
        }
        info!(id = self.replica.id, "node stopped");
    }
}

/// A storage failure at start; a damaged store is never served from, so its message says how
/// to replace it.
fn storage_error(path: &std::path::Path, error: &DiskError) -> StartError {
    StartError::Storage {
        path: path.display().to_string(),
        reason: if error.0.starts_with(certus_store::CORRUPT) || error.0.contains("older") {
            format!(
                "{error}; this node will not serve from it: stop it and run `certus rebuild \
                 --config <its config>` to replace its data from the peers"
            )
        } else {
            error.to_string()
        },
    }
}

/// The vote's term and the last log index on disk, read before Raft starts (see [`BootLog`]),
/// once a purge a snapshot install deferred is finished.
async fn boot_log<D: Disk>(
    log_store: &mut LogStore<crate::raft::types::TypeConfig, D>,
) -> Result<BootLog, String> {
    use openraft::storage::RaftLogStorage as _;
    log_store
        .purge_behind_saved_snapshot()
        .map_err(|error| error.to_string())?;
    let last_index = log_store
        .get_log_state()
        .await
        .map_err(|error| error.to_string())?
        .last_log_id
        .map_or(0, |log_id| log_id.index);
    let term = log_store
        .read_vote()
        .await
        .map_err(|error| error.to_string())?
        .map_or(0, |vote| vote.leader_id().term);
    Ok(BootLog { term, last_index })
}

/// Every gRPC service of the node, added to `builder` (a `tonic::transport::Server`, with or
/// without layers): a macro, because each layer stack is a different builder type.
macro_rules! with_node_services {
    ($builder:expr, $replica:expr, $ct:expr, $stop:expr, $reloader:expr) => {{
        use certus_proto::health::health_server::HealthServer;
        use certus_proto::v1::admin_server::AdminServer;
        use certus_proto::v1::clients_server::ClientsServer;
        use certus_proto::v1::leases_server::LeasesServer;
        use certus_proto::v1::log_server::LogServer;
        use certus_proto::v1::pipelines_server::PipelinesServer;
        use certus_proto::v1::raft_server::RaftServer;
        use certus_proto::v1::sessions_server::SessionsServer;

        use crate::services::clients::ClientsService;
        use crate::services::pipelines::PipelinesService;
        use crate::services::sessions::SessionsService;
        let replica: &Arc<Replica> = $replica;
        let ct: Option<&Arc<CtNode>> = $ct;
        let stop: &watch::Receiver<bool> = $stop;
        let reloader: &Arc<crate::edge::reload::Reloader> = $reloader;
        $builder
            .add_service(
                RaftServer::new(RaftService::new(Arc::clone(replica)))
                    .max_decoding_message_size(RAFT_MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(RAFT_MESSAGE_BYTES_MAX),
            )
            .add_service(
                LeasesServer::new(LeasesService::new(Arc::clone(replica)))
                    .max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(CLIENT_MESSAGE_BYTES_MAX),
            )
            .add_service(
                ClientsServer::new(ClientsService::new(Arc::clone(replica)))
                    .max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(CLIENT_MESSAGE_BYTES_MAX),
            )
            .add_service(
                AdminServer::new(
                    AdminService::new(Arc::clone(replica), ct.cloned())
                        .with_reloader(Arc::clone(reloader)),
                )
                .max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
                .max_encoding_message_size(CLIENT_MESSAGE_BYTES_MAX),
            )
            .add_service(
                HealthServer::new(HealthService::new(
                    Arc::clone(replica),
                    crate::services::health::served_service_names(ct.is_some()),
                ))
                .max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
                .max_encoding_message_size(CLIENT_MESSAGE_BYTES_MAX),
            )
            .add_service(
                SessionsServer::new(SessionsService::new(Arc::clone(replica), stop.clone()))
                    .max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(CLIENT_MESSAGE_BYTES_MAX),
            )
            .add_service(
                PipelinesServer::new(PipelinesService::new(Arc::clone(replica), stop.clone()))
                    .max_decoding_message_size(PIPELINE_REQUEST_BYTES_MAX)
                    .max_encoding_message_size(PIPELINE_REPLY_BYTES_MAX),
            )
            .add_optional_service(ct.map(|ct| {
                LogServer::new(LogService::new(Arc::clone(replica), Arc::clone(ct)))
                    .max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
                    .max_encoding_message_size(CLIENT_MESSAGE_BYTES_MAX)
            }))
    }};
}

/// The gRPC server on real sockets: every call counted by method and status
/// (`crate::edge::grpc_metrics`), and server reflection (v1 and v1alpha) so that generic tools can
/// list and call the API.
#[cfg(not(madsim))]
async fn serve_grpc(
    config: &NodeConfig,
    reloader: &Arc<crate::edge::reload::Reloader>,
    replica: Arc<Replica>,
    ct: Option<Arc<CtNode>>,
    metrics: Arc<crate::metrics::Metrics>,
    stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    use crate::edge::grpc_metrics::{GrpcMetricsLayer, KnownMethods};
    let listener = tokio::net::TcpListener::bind(config.grpc_addr)
        .await
        .map_err(|error| StartError::Bind {
            addr: config.grpc_addr.to_string(),
            reason: error.to_string(),
        })?;
    let descriptors = certus_proto::FILE_DESCRIPTOR_SET;
    let methods = KnownMethods::from_descriptors(descriptors)
        .map_err(|error| StartError::Config(format!("the compiled gRPC descriptors: {error}")))?;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(descriptors)
        .build_v1()
        .map_err(|error| StartError::Config(format!("gRPC reflection: {error}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(descriptors)
        .build_v1alpha()
        .map_err(|error| StartError::Config(format!("gRPC reflection: {error}")))?;
    let builder = tonic::transport::Server::builder()
        .max_concurrent_streams(crate::limits::GRPC_STREAMS_PER_CONNECTION_MAX);
    // Refusals are counted too: the metrics layer is outermost. The client limits come after
    // authorization, which names peers (exempt from them).
    let mut builder = builder
        .layer(GrpcMetricsLayer::new(metrics, methods))
        .layer(crate::edge::tls::AuthLayer::new(
            reloader.authorizer().cloned(),
        ))
        .layer(
            crate::edge::client_limits::ClientLimitsLayer::sharing(Arc::clone(reloader.limiter()))
                .keyed_by(crate::edge::client_limits::tls_or_tcp_peer),
        )
        .layer(crate::edge::message_size::MessageSizeLayer);
    let router = with_node_services!(builder, &replica, ct.as_ref(), &stop, reloader)
        // Requests are small; replies (file descriptors) keep tonic's default bound.
        .add_service(reflection.max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX))
        .add_service(reflection_v1alpha.max_decoding_message_size(CLIENT_MESSAGE_BYTES_MAX));
    let id = config.id;
    // With TLS, the handshakes are ours (`crate::edge::grpc_tls`), so that a reload changes the
    // certificate new connections see; tonic serves the TLS streams.
    match reloader.grpc_tls() {
        Some(tls) => {
            let incoming = crate::edge::grpc_tls::incoming(listener, tls, stop.clone());
            Ok(replica.tasks.spawn("gRPC server", async move {
                if let Err(error) = router
                    .serve_with_incoming_shutdown(incoming, stopped(stop))
                    .await
                {
                    warn!(id, %error, "gRPC server failed");
                }
            }))
        }
        None => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            Ok(replica.tasks.spawn("gRPC server", async move {
                if let Err(error) = router
                    .serve_with_incoming_shutdown(incoming, stopped(stop))
                    .await
                {
                    warn!(id, %error, "gRPC server failed");
                }
            }))
        }
    }
}

#[cfg(madsim)]
async fn serve_grpc(
    config: &NodeConfig,
    reloader: &Arc<crate::edge::reload::Reloader>,
    replica: Arc<Replica>,
    ct: Option<Arc<CtNode>>,
    stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, StartError> {
    let router = with_node_services!(
        tonic::transport::Server::builder(),
        &replica,
        ct.as_ref(),
        &stop,
        reloader
    );
    let addr = config.grpc_addr;
    let id = config.id;
    Ok(replica.tasks.spawn("gRPC server", async move {
        if let Err(error) = router.serve_with_shutdown(addr, stopped(stop)).await {
            warn!(id, %error, "gRPC server failed");
        }
    }))
}

/// Counts each time this node sees a different node become leader, the first one included (as
/// etcd's `leader_changes_seen`): a leader lost and regained by the same node is not a change,
/// and no leader is not one either.
async fn count_leader_changes(
    mut raft_metrics: watch::Receiver<openraft::RaftMetrics<NodeId, CertusNode>>,
    metrics: Arc<crate::metrics::Metrics>,
    stop: watch::Receiver<bool>,
) {
    let mut last_leader = None;
    // The leader this node last said it knew, so that each change is logged once: what an
    // operator needs of openraft's election chatter, which is logged at error only.
    let mut logged = None;
    loop {
        let (leader, term) = {
            let now = raft_metrics.borrow_and_update();
            (now.current_leader, now.current_term)
        };
        if leader.is_some() && leader != last_leader {
            metrics.count_leader_change();
            last_leader = leader;
        }
        if leader != logged {
            logged = leader;
            match leader {
                Some(leader) => info!(leader, term, "node {leader} leads"),
                None => info!(term, "no leader known; an election follows"),
            }
        }
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            () = stopped(stop.clone()) => break,
            changed = raft_metrics.changed() => if changed.is_err() { break },
        }
    }
}

/// Campaigns without a leader emerging, in a row, before this node shifts its own rhythm.
const SPLIT_ROUNDS_BEFORE_SHIFT: u32 = 2;

/// openraft 0.9 draws a node's election timeout once, when the node starts, where Raft's liveness
/// argument wants a fresh draw for every election. Voters that drew nearly the same timeout and
/// started together (a whole cluster restarting) would split every vote in lockstep, each voting
/// for itself in the same term (one leader per term). So when this node has seen the term rise
/// twice with no leader known, it waits a random part of the timeout range and campaigns again
/// itself: its rhythm moves off the others', and the next request arrives before theirs fire.
async fn break_split_votes(
    raft: Raft,
    election_timeout_min_ms: u64,
    election_timeout_max_ms: u64,
    stop: watch::Receiver<bool>,
) {
    let period = Duration::from_millis(election_timeout_max_ms);
    let spread_ms = election_timeout_max_ms.saturating_sub(election_timeout_min_ms) + 1;
    let campaigning = |raft: &Raft| {
        let metrics = raft.metrics().borrow().clone();
        let without_leader = metrics.current_leader.is_none()
            && matches!(
                metrics.state,
                openraft::ServerState::Candidate | openraft::ServerState::Follower
            );
        (without_leader, metrics.current_term)
    };
    let mut last_term = 0;
    let mut failed_rounds = 0;
    loop {
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            () = stopped(stop.clone()) => break,
            () = tokio::time::sleep(period) => {}
        }
        let (without_leader, term) = campaigning(&raft);
        if !without_leader {
            failed_rounds = 0;
        } else if term > last_term {
            failed_rounds += 1;
        }
        last_term = term;
        if failed_rounds < SPLIT_ROUNDS_BEFORE_SHIFT {
            continue;
        }
        failed_rounds = 0;
        let pause = Duration::from_millis(crate::random::random_below(spread_ms));
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            () = stopped(stop.clone()) => break,
            () = tokio::time::sleep(pause) => {}
        }
        if campaigning(&raft).0 {
            debug!(
                term,
                "elections keep splitting: campaigning off the others' rhythm"
            );
            // A leader ignores the trigger; a stopping node's error ends nothing here.
            let _ = raft.trigger().elect().await;
        }
    }
}
