//! A node's configuration. Not part of the replicated state: each node has its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::MemberAddr;
use crate::limits::{
    HTTP_BODY_READ_TIMEOUT_MS_DEFAULT, HTTP_CONNECTIONS_PER_CLIENT_LIMIT,
    HTTP_CONNECTIONS_PER_CLIENT_MAX_DEFAULT, HTTP_HEADER_READ_TIMEOUT_MS_DEFAULT,
    HTTP_TIMEOUT_MS_MAX, HTTP_TIMEOUT_MS_MIN, LOG_SEGMENT_BYTES_MIN, STORE_CACHE_MIB_MIN,
};
use crate::raft::types::NodeId;

/// Everything one node needs to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id: unique in the cluster, never reused, at least 1.
    pub id: NodeId,
    /// Where the gRPC server listens (Raft transport and client services).
    pub grpc_addr: SocketAddr,
    /// Where the HTTP server listens (health, ACME challenges, status, metrics, the CT log).
    pub http_addr: SocketAddr,
    /// Where the plain-HTTP ACME listener listens: it serves
    /// `/.well-known/acme-challenge/{token}` only, in plain HTTP whatever the HTTP port speaks,
    /// because HTTP-01 validators (RFC 8555 §8.3) fetch `http://NAME:80/...`. `None`: no such
    /// listener (the library's default; `certus serve` defaults to port 80).
    #[serde(default)]
    pub acme_http_addr: Option<SocketAddr>,
    /// The HTTP listeners: the HTTP port's certificate, timeouts, connections per client.
    #[serde(default)]
    pub http: HttpSetup,
    /// How peers and clients reach the gRPC server (`host:port`, a host name allowed): what the
    /// membership records for this node. `None`: `grpc_addr` itself, which then must name an
    /// address (not `0.0.0.0` or `[::]`).
    #[serde(default)]
    pub advertise_grpc: Option<MemberAddr>,
    /// How others reach the HTTP server; `None`: `http_addr`, as for `advertise_grpc`.
    #[serde(default)]
    pub advertise_http: Option<MemberAddr>,
    /// Where the Raft log (`raft-log`), the vote and snapshots (`raft`) are kept.
    pub data_dir: PathBuf,
    /// Raft timing and log compaction.
    #[serde(default)]
    pub raft: RaftTuning,
    /// How often the leader proposes a tick (lease expiry, token purge), in milliseconds.
    #[serde(default = "default_tick_interval_ms")]
    pub tick_interval_ms: u64,
    /// How long a challenge token is kept before the tick purges it, in milliseconds.
    #[serde(default = "default_challenge_retention_ms")]
    pub challenge_retention_ms: u64,
    /// The Certificate Transparency log, if this node takes part in one.
    #[serde(default)]
    pub ct: CtFiles,
    /// The node's store (sled) in `data_dir/raft`.
    #[serde(default)]
    pub store: StoreSetup,
    /// CA issuance sessions: the cluster CA and the HTTP-01 tester.
    #[serde(default)]
    pub sessions: SessionsSetup,
    /// Transaction pipelines: this node's part in their background roles.
    #[serde(default)]
    pub pipelines: PipelinesSetup,
    /// TLS with the cluster CA and the authorization of every call (`crate::edge::tls`); `None`
    /// serves plain text and lets every call through (the simulation, tests, and local
    /// experiments that choose it).
    #[serde(default)]
    pub tls: Option<crate::edge::tls::TlsSetup>,
    /// Bearer tokens for programs that cannot present a client certificate (`[[tokens]]`).
    /// Used only with `tls`.
    #[serde(default)]
    pub tokens: Vec<crate::edge::security::TokenEntry>,
    /// What one client (a peer IP address) may have in flight, open and per second on the gRPC
    /// server (`crate::edge::client_limits`).
    #[serde(default)]
    pub client_limits: crate::edge::client_limits::ClientLimits,
}

/// The HTTP listeners (`[http]` in `certus serve`'s file). Whether the HTTP port speaks TLS at
/// all is `[tls] https`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSetup {
    /// The certificate the HTTP port presents over HTTPS instead of the node's cluster
    /// certificate (PEM, leaf first): a publicly trusted one, so that CT monitors and browsers
    /// verify it. Needs `key_file`, and `[tls]` with `https = true`. gRPC keeps the cluster
    /// certificate.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PKCS#8 PEM).
    pub key_file: Option<PathBuf>,
    /// How long a listener waits for a request's headers, from the connection's start or the
    /// end of the previous answer (so also how long a kept-alive connection may idle), in
    /// milliseconds.
    pub header_read_timeout_ms: u64,
    /// How long a listener waits for a request's whole body after its headers, in milliseconds.
    pub body_read_timeout_ms: u64,
    /// Connections one client IP address may have open on each HTTP listener.
    pub connections_per_client_max: usize,
}

impl Default for HttpSetup {
    fn default() -> HttpSetup {
        HttpSetup {
            cert_file: None,
            key_file: None,
            header_read_timeout_ms: HTTP_HEADER_READ_TIMEOUT_MS_DEFAULT,
            body_read_timeout_ms: HTTP_BODY_READ_TIMEOUT_MS_DEFAULT,
            connections_per_client_max: HTTP_CONNECTIONS_PER_CLIENT_MAX_DEFAULT,
        }
    }
}

impl HttpSetup {
    /// Checks the ranges and that the certificate and key go together; says what is wrong.
    fn validate(&self, https: bool) -> Result<(), String> {
        for (name, value) in [
            ("header_read_timeout_ms", self.header_read_timeout_ms),
            ("body_read_timeout_ms", self.body_read_timeout_ms),
        ] {
            if !(HTTP_TIMEOUT_MS_MIN..=HTTP_TIMEOUT_MS_MAX).contains(&value) {
                return Err(format!(
                    "http.{name} is {value}; it must be within \
                     {HTTP_TIMEOUT_MS_MIN}..={HTTP_TIMEOUT_MS_MAX}"
                ));
            }
        }
        if !(1..=HTTP_CONNECTIONS_PER_CLIENT_LIMIT).contains(&self.connections_per_client_max) {
            return Err(format!(
                "http.connections_per_client_max is {}; it must be within \
                 1..={HTTP_CONNECTIONS_PER_CLIENT_LIMIT}",
                self.connections_per_client_max
            ));
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err("http.cert_file and http.key_file go together: set both or neither".into());
        }
        if self.cert_file.is_some() && !https {
            return Err(
                "http.cert_file is set but the HTTP port does not speak TLS: it needs \
                        [tls] with https = true"
                    .into(),
            );
        }
        Ok(())
    }

    /// How long a listener waits for a request's headers.
    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    /// How long a listener waits for a request's body.
    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }
}

/// What a node does for transaction pipelines (`[pipelines]` in `certus serve`'s file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelinesSetup {
    /// Compete for the webhook role (one node at a time sends webhooks; see
    /// `roles::pipeline_webhooks`). A node that never should send webhooks (no route out) sets
    /// false.
    pub webhooks: bool,
}

impl Default for PipelinesSetup {
    fn default() -> PipelinesSetup {
        PipelinesSetup { webhooks: true }
    }
}

/// What a node needs to work CA issuance sessions (`[sessions]` in `certus serve`'s file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsSetup {
    /// Run the session daemons (makechallenge, testchallenge, and issue when a CA is set).
    pub daemons: bool,
    /// The cluster CA's private key, PKCS#8 PEM; with `ca_cert_file`, the node issues.
    pub ca_key_file: Option<PathBuf>,
    /// The cluster CA's certificate, PEM.
    pub ca_cert_file: Option<PathBuf>,
    /// Where the HTTP-01 tester connects for a name, instead of DNS and port 80 (for tests and
    /// private networks): name → address.
    pub http01_resolve: std::collections::BTreeMap<String, SocketAddr>,
    /// How long one HTTP-01 test may take, in milliseconds.
    pub http01_timeout_ms: u64,
    /// An asynchronous upstream CA (`certus_ca::upstream`'s order protocol, `http://` base URL):
    /// when set, the issue daemon orders certificates there instead of signing them itself.
    pub upstream_url: Option<String>,
    /// How the issue daemon polls the upstream CA (seed 001's schedule by default).
    pub upstream_poll: certus_ca::poller::PollPolicyConfig,
    /// How long an order still pending at the poll deadline waits before the next claim, when
    /// the CA named no delay (`Retry-After`), in milliseconds.
    pub upstream_pending_delay_ms: u64,
    /// How long a daemon's claim lasts unless extended, in milliseconds: how soon a session a
    /// dead node was working is taken up again. Claims are extended every third of it while a
    /// step runs, so it must well exceed one Raft write.
    pub claim_visibility_ms: u64,
}

impl Default for SessionsSetup {
    fn default() -> SessionsSetup {
        SessionsSetup {
            daemons: true,
            ca_key_file: None,
            ca_cert_file: None,
            http01_resolve: std::collections::BTreeMap::new(),
            http01_timeout_ms: 10_000,
            upstream_url: None,
            upstream_poll: certus_ca::poller::PollPolicyConfig::default(),
            upstream_pending_delay_ms: 60_000,
            claim_visibility_ms: 30_000,
        }
    }
}

/// Where a node finds what the CT log needs. Without a key the node takes no part in the log
/// (its `/ct/v1/` endpoints are absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CtFiles {
    /// The log's ECDSA P-256 private key, PKCS#8 PEM ("BEGIN PRIVATE KEY"); the same on every
    /// node of the cluster.
    pub key_file: Option<PathBuf>,
    /// A PEM bundle of the root certificates the log accepts chains up to.
    pub roots_file: Option<PathBuf>,
    /// Full Merkle tree tiles kept in memory (16 KiB each); the rest are read from disk.
    pub tile_cache_tiles: usize,
}

impl Default for CtFiles {
    fn default() -> Self {
        CtFiles {
            key_file: None,
            roots_file: None,
            tile_cache_tiles: certus_store::CT_TILE_CACHE_TILES_DEFAULT,
        }
    }
}

/// The node's store: sled, holding the vote, the state machine and its snapshots, and the CT
/// log's metadata and edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSetup {
    /// The most sled keeps of its pages in memory, in MiB (sled's own default: 1024). A bound,
    /// not a reservation: it fills only as the store is read.
    pub cache_mib: u64,
}

impl Default for StoreSetup {
    fn default() -> Self {
        StoreSetup {
            cache_mib: certus_store::SLED_CACHE_MIB_DEFAULT,
        }
    }
}

/// Raft timing and log compaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTuning {
    /// Leader heartbeat interval, in milliseconds.
    pub heartbeat_interval_ms: u64,
    /// Shortest election timeout, in milliseconds.
    pub election_timeout_min_ms: u64,
    /// Longest election timeout, in milliseconds.
    pub election_timeout_max_ms: u64,
    /// Build a snapshot after this many entries since the last one.
    pub snapshot_after_entries: u64,
    /// Entries kept in the log behind a snapshot, so a slightly lagging follower catches up
    /// from the log rather than by snapshot.
    pub entries_kept_after_snapshot: u64,
    /// The size of a Raft log segment file (`data_dir/raft-log`); purging removes whole
    /// segments, so this is also how much purged log a node may keep on disk.
    pub log_segment_bytes: u64,
}

impl Default for RaftTuning {
    fn default() -> RaftTuning {
        RaftTuning {
            heartbeat_interval_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1000,
            snapshot_after_entries: 20_000,
            entries_kept_after_snapshot: 1_000,
            log_segment_bytes: certus_store::SEGMENT_BYTES,
        }
    }
}

fn default_tick_interval_ms() -> u64 {
    1_000
}

fn default_challenge_retention_ms() -> u64 {
    7 * 24 * 60 * 60 * 1000
}

impl NodeConfig {
    /// A configuration with defaults for everything but identity, addresses and data.
    pub fn new(
        id: NodeId,
        grpc_addr: SocketAddr,
        http_addr: SocketAddr,
        data_dir: PathBuf,
    ) -> Self {
        NodeConfig {
            id,
            grpc_addr,
            http_addr,
            acme_http_addr: None,
            http: HttpSetup::default(),
            advertise_grpc: None,
            advertise_http: None,
            data_dir,
            raft: RaftTuning::default(),
            tick_interval_ms: default_tick_interval_ms(),
            challenge_retention_ms: default_challenge_retention_ms(),
            ct: CtFiles::default(),
            store: StoreSetup::default(),
            sessions: SessionsSetup::default(),
            pipelines: PipelinesSetup::default(),
            tls: None,
            tokens: Vec::new(),
            client_limits: crate::edge::client_limits::ClientLimits::default(),
        }
    }

    /// Checks what types cannot; says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("id: node ids start at 1".into());
        }
        if self.grpc_addr == self.http_addr {
            return Err(format!(
                "grpc_addr and http_addr are both {}; they need their own ports",
                self.grpc_addr
            ));
        }
        if let Some(acme) = self.acme_http_addr
            && (acme == self.grpc_addr || acme == self.http_addr)
        {
            return Err(format!(
                "acme_http_addr is {acme}, also the gRPC or HTTP address; it needs its own port"
            ));
        }
        self.http
            .validate(self.tls.as_ref().is_some_and(|tls| tls.https))?;
        for (listen, advertise, name) in [
            (self.grpc_addr, &self.advertise_grpc, "grpc"),
            (self.http_addr, &self.advertise_http, "http"),
        ] {
            if advertise.is_none() && listen.ip().is_unspecified() {
                return Err(format!(
                    "{name}_addr {listen} listens on every interface, which is no address to \
                     reach this node at: set advertise_{name} (host:port) to how others reach it"
                ));
            }
        }
        let raft = &self.raft;
        if raft.heartbeat_interval_ms == 0
            || raft.heartbeat_interval_ms >= raft.election_timeout_min_ms
        {
            return Err(format!(
                "raft.heartbeat_interval_ms ({}) must be above 0 and below raft.election_timeout_min_ms ({})",
                raft.heartbeat_interval_ms, raft.election_timeout_min_ms
            ));
        }
        if raft.election_timeout_min_ms >= raft.election_timeout_max_ms {
            return Err(format!(
                "raft.election_timeout_min_ms ({}) must be below raft.election_timeout_max_ms ({})",
                raft.election_timeout_min_ms, raft.election_timeout_max_ms
            ));
        }
        if raft.snapshot_after_entries == 0 {
            return Err("raft.snapshot_after_entries must be at least 1".into());
        }
        if raft.log_segment_bytes < LOG_SEGMENT_BYTES_MIN {
            return Err(format!(
                "raft.log_segment_bytes is {}; it must be at least {LOG_SEGMENT_BYTES_MIN}",
                raft.log_segment_bytes
            ));
        }
        if self.store.cache_mib < STORE_CACHE_MIB_MIN {
            return Err(format!(
                "store.cache_mib is {}; it must be at least {STORE_CACHE_MIB_MIN}",
                self.store.cache_mib
            ));
        }
        if self.ct.roots_file.is_some() && self.ct.key_file.is_none() {
            return Err(
                "ct.roots_file is set but ct.key_file is not; the log needs its key".into(),
            );
        }
        if self.sessions.ca_key_file.is_some() != self.sessions.ca_cert_file.is_some() {
            return Err(
                "sessions.ca_key_file and sessions.ca_cert_file go together: set both or neither"
                    .into(),
            );
        }
        if !(100..=60_000).contains(&self.sessions.http01_timeout_ms) {
            return Err(format!(
                "sessions.http01_timeout_ms is {}; it must be within 100..=60000",
                self.sessions.http01_timeout_ms
            ));
        }
        certus_ca::poller::PollPolicy::new(self.sessions.upstream_poll)
            .map_err(|error| format!("sessions.upstream_poll: {error}"))?;
        if !(1_000..=3_600_000).contains(&self.sessions.claim_visibility_ms) {
            return Err(format!(
                "sessions.claim_visibility_ms is {}; it must be within 1000..=3600000",
                self.sessions.claim_visibility_ms
            ));
        }
        if self.sessions.upstream_pending_delay_ms > certus_core::limits::SESSION_DELAY_MS_MAX {
            return Err(format!(
                "sessions.upstream_pending_delay_ms is {}; it must be at most {}",
                self.sessions.upstream_pending_delay_ms,
                certus_core::limits::SESSION_DELAY_MS_MAX
            ));
        }
        if !self.tokens.is_empty() && self.tls.is_none() {
            return Err("tokens are set but tls is not: tokens are only checked over TLS".into());
        }
        crate::edge::security::Tokens::new(&self.tokens)?;
        if self.tick_interval_ms == 0 {
            return Err("tick_interval_ms must be at least 1".into());
        }
        Ok(())
    }

    /// How the rest of the cluster reaches this node (its membership entry): the advertised
    /// addresses, or the listening ones.
    pub fn member(&self) -> crate::raft::types::CertusNode {
        let advertised = |advertise: &Option<MemberAddr>, listen: SocketAddr| {
            advertise
                .clone()
                .unwrap_or_else(|| MemberAddr::from(listen))
                .to_string()
        };
        crate::raft::types::CertusNode {
            grpc_addr: advertised(&self.advertise_grpc, self.grpc_addr),
            http_addr: advertised(&self.advertise_http, self.http_addr),
        }
    }

    /// The tick interval.
    pub fn tick_interval(&self) -> Duration {
        Duration::from_millis(self.tick_interval_ms)
    }

    /// openraft's configuration for this node.
    pub fn openraft(&self) -> Result<openraft::Config, String> {
        let config = openraft::Config {
            cluster_name: "certus".into(),
            heartbeat_interval: self.raft.heartbeat_interval_ms,
            election_timeout_min: self.raft.election_timeout_min_ms,
            election_timeout_max: self.raft.election_timeout_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(
                self.raft.snapshot_after_entries,
            ),
            max_in_snapshot_log_to_keep: self.raft.entries_kept_after_snapshot,
            // Batches of appended entries per RPC; each entry may carry many commands.
            max_payload_entries: 512,
            ..openraft::Config::default()
        };
        config.validate().map_err(|error| error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(grpc: &str, http: &str) -> NodeConfig {
        NodeConfig::new(
            1,
            grpc.parse().expect("grpc"),
            http.parse().expect("http"),
            PathBuf::from("/tmp/certus-test"),
        )
    }

    #[test]
    fn a_node_advertises_its_listening_addresses_by_default() {
        let config = config("10.0.0.1:7000", "10.0.0.1:8000");
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.advertise_grpc, None);
        let member = config.member();
        assert_eq!(member.grpc_addr, "10.0.0.1:7000");
        assert_eq!(member.http_addr, "10.0.0.1:8000");
    }

    #[test]
    fn an_advertised_address_is_what_the_membership_records() {
        let mut config = config("0.0.0.0:7000", "[::]:8000");
        config.advertise_grpc = Some(MemberAddr::parse("certus-0.certus.ns.svc:7000").expect("ok"));
        config.advertise_http = Some(MemberAddr::parse("certus-0.certus.ns.svc:8000").expect("ok"));
        assert_eq!(config.validate(), Ok(()));
        let member = config.member();
        assert_eq!(member.grpc_addr, "certus-0.certus.ns.svc:7000");
        assert_eq!(member.http_addr, "certus-0.certus.ns.svc:8000");
    }

    #[test]
    fn an_unspecified_listening_address_needs_an_advertised_one() {
        let mut config = config("0.0.0.0:7000", "10.0.0.1:8000");
        let error = config
            .validate()
            .expect_err("0.0.0.0 is no address to reach");
        assert!(error.contains("advertise_grpc"), "{error}");
        config.advertise_grpc = Some(MemberAddr::parse("node-1.test:7000").expect("ok"));
        assert_eq!(config.validate(), Ok(()));
        config.http_addr = "[::]:8000".parse().expect("http");
        let error = config.validate().expect_err("[::] is no address to reach");
        assert!(error.contains("advertise_http"), "{error}");
    }

    #[test]
    fn the_advertised_addresses_are_checked_when_read() {
        let mut config = config("0.0.0.0:7000", "0.0.0.0:8000");
        config.advertise_grpc = Some(MemberAddr::parse("node-1.test:7000").expect("ok"));
        config.advertise_http = Some(MemberAddr::parse("node-1.test:8000").expect("ok"));
        let text = serde_json::to_string(&config).expect("encodes");
        let read: NodeConfig = serde_json::from_str(&text).expect("decodes");
        assert_eq!(read, config);
        let bad = text.replace("node-1.test:7000", "node_1:7000");
        let error = serde_json::from_str::<NodeConfig>(&bad).expect_err("bad name");
        assert!(error.to_string().contains("RFC 1123"), "{error}");
    }
}
