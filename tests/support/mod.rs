//! Real `certus serve` processes on loopback, for the integration tests.

#![allow(dead_code)] // Each test file uses a part.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use certus_client::{Client, ClientConfig};

pub mod netns;
mod ports;

pub use ports::free_addr;

/// One node's identity and files.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The network namespace the node runs in (`support::netns`), or `None` for the test's own.
    pub namespace: Option<String>,
    pub id: u64,
    /// The node's host name: it listens on every interface (`0.0.0.0`) at `grpc`'s and
    /// `http`'s ports and advertises `name:port`, which the founding members list too.
    pub name: Option<String>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub data_dir: PathBuf,
    pub config_file: PathBuf,
    /// Started without `RUST_LOG` (see `Tuning::default_logs`).
    pub default_logs: bool,
}

/// A node process (killed when dropped).
#[derive(Debug)]
pub struct Process {
    pub spec: NodeSpec,
    child: Option<Child>,
}

impl Process {
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The exit status, if the process ended within `within` (it is then reaped).
    pub fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            let child = self.child.as_mut()?;
            if let Some(status) = child.try_wait().expect("wait for node") {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill node");
            child.wait().expect("reap node");
        }
    }
}

/// A process a test started itself, killed if the test fails before it stops it (a panic
/// would otherwise leave it running after the test).
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Both fail harmlessly once the process has exited.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            print_log_tail(&self.spec);
        }
    }
}

/// How much of a node's log a failed test shows.
const LOG_TAIL_LINES: usize = 40;

/// The end of `spec`'s node log on stderr, which the test harness shows with a failed test:
/// the temporary directory holding the log goes with the test.
fn print_log_tail(spec: &NodeSpec) {
    let path = spec.data_dir.with_extension("log");
    let Ok(log) = std::fs::read_to_string(&path) else {
        eprintln!("node {}: no log at {}", spec.id, path.display());
        return;
    };
    let lines: Vec<&str> = log.lines().collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
    eprintln!(
        "---- node {} ({}): last {} of {} log lines ----",
        spec.id,
        spec.grpc,
        tail.len(),
        lines.len()
    );
    for line in tail {
        eprintln!("{line}");
    }
}

/// Options written into every node's config file.
#[derive(Debug, Clone)]
pub struct Tuning {
    pub snapshot_after_entries: u64,
    pub entries_kept_after_snapshot: u64,
    pub tick_interval_ms: u64,
    /// The CT log's key and roots files: every node runs the log when set.
    pub ct: Option<(PathBuf, PathBuf)>,
    /// CA issuance sessions: the CA's key and certificate files, and the names whose HTTP-01
    /// challenges the nodes serve — name N is tested at node `N % nodes`'s HTTP address.
    pub sessions: Option<(PathBuf, PathBuf, Vec<String>)>,
    /// Log as an operator's node does (the binary's default filter) rather than with openraft's
    /// warnings, which the tests keep for debugging.
    pub default_logs: bool,
    /// More names whose HTTP-01 challenges are fetched at the given address (an ACME client's
    /// own HTTP-01 server); used with `sessions`.
    pub http01_at: Vec<(String, SocketAddr)>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            snapshot_after_entries: 100_000,
            entries_kept_after_snapshot: 1_000,
            tick_interval_ms: 1_000,
            ct: None,
            sessions: None,
            default_logs: false,
            http01_at: Vec::new(),
        }
    }
}

/// A cluster of real processes in a temporary directory.
#[derive(Debug)]
pub struct Cluster {
    // Before `dir`, so the nodes are stopped (and a failed test shows their logs) before their
    // directory is removed: fields drop in declaration order.
    pub nodes: Vec<Process>,
    pub tuning: Tuning,
    pub dir: tempfile::TempDir,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_certus")
}

impl Cluster {
    /// Starts `count` nodes founding one cluster; waits until a leader serves.
    pub fn start(count: u64, tuning: Tuning) -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let specs: Vec<NodeSpec> = (1..=count).map(|id| spec(dir.path(), id)).collect();
        Cluster::found(dir, specs, tuning)
    }

    /// Starts nodes with the given ids founding one cluster, in a new temporary directory;
    /// `prepare` runs on their specs once their config files are written and before any node
    /// starts (to restore their data directories from a backup).
    pub fn start_prepared(
        ids: &[u64],
        tuning: Tuning,
        prepare: impl FnOnce(&[NodeSpec]),
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let specs: Vec<NodeSpec> = ids.iter().map(|id| spec(dir.path(), *id)).collect();
        Cluster::found_prepared(dir, specs, tuning, prepare)
    }

    /// Starts one node on each host of `network` (node N on host N), founding one cluster.
    pub fn start_on(network: &netns::Network, count: u8, tuning: Tuning) -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let specs: Vec<NodeSpec> = (1..=count)
            .map(|host| {
                let mut spec = spec(dir.path(), u64::from(host));
                spec.grpc = SocketAddr::new(network.addr(host), 7101);
                spec.http = SocketAddr::new(network.addr(host), 7181);
                spec.namespace = Some(network.namespace(host));
                spec
            })
            .collect();
        Cluster::found(dir, specs, tuning)
    }

    /// Starts one node on each host of `network`, node N named `node-N.certus.test` (every
    /// host's hosts file says where the names are), founding one cluster by name.
    pub fn start_named(network: &netns::Network, count: u8, tuning: Tuning) -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let specs: Vec<NodeSpec> = (1..=count)
            .map(|host| {
                let mut spec = spec(dir.path(), u64::from(host));
                spec.grpc = SocketAddr::new(network.addr(host), 7101);
                spec.http = SocketAddr::new(network.addr(host), 7181);
                spec.namespace = Some(network.namespace(host));
                spec.name = Some(format!("node-{host}.certus.test"));
                spec
            })
            .collect();
        let names: Vec<(String, std::net::IpAddr)> = specs
            .iter()
            .map(|spec| (spec.name.clone().expect("named"), spec.grpc.ip()))
            .collect();
        network.set_hosts(&names);
        Cluster::found(dir, specs, tuning)
    }

    /// Starts `count` nodes on loopback, each listening on every interface and advertising
    /// `localhost:port`, founding one cluster by that name.
    pub fn start_as_localhost(count: u64, tuning: Tuning) -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let specs: Vec<NodeSpec> = (1..=count)
            .map(|id| {
                let mut spec = spec(dir.path(), id);
                spec.name = Some("localhost".to_owned());
                spec
            })
            .collect();
        Cluster::found(dir, specs, tuning)
    }

    fn found(dir: tempfile::TempDir, specs: Vec<NodeSpec>, tuning: Tuning) -> Cluster {
        Cluster::found_prepared(dir, specs, tuning, |_| {})
    }

    fn found_prepared(
        dir: tempfile::TempDir,
        specs: Vec<NodeSpec>,
        tuning: Tuning,
        prepare: impl FnOnce(&[NodeSpec]),
    ) -> Cluster {
        let members: String = specs
            .iter()
            .map(|spec| {
                let (grpc, http) = advertised(spec);
                format!(
                    "[[initial_members]]\nid = {}\ngrpc_addr = \"{grpc}\"\nhttp_addr = \"{http}\"\n",
                    spec.id
                )
            })
            .collect();
        let mut members = members;
        if let Some((key_file, cert_file, names)) = &tuning.sessions {
            // A table after [[initial_members]]: every key below belongs to it.
            members.push_str(&format!(
                "[sessions]\nca_key_file = \"{}\"\nca_cert_file = \"{}\"\n[sessions.http01_resolve]\n",
                key_file.display(),
                cert_file.display()
            ));
            for (n, name) in names.iter().enumerate() {
                members.push_str(&format!(
                    "\"{name}\" = \"{}\"\n",
                    specs[n % specs.len()].http
                ));
            }
            for (name, addr) in &tuning.http01_at {
                members.push_str(&format!("\"{name}\" = \"{addr}\"\n"));
            }
        }
        for spec in &specs {
            write_config(spec, &tuning, &members);
        }
        prepare(&specs);
        let mut cluster = Cluster {
            dir,
            nodes: Vec::new(),
            tuning,
        };
        for mut spec in specs {
            spec.default_logs = cluster.tuning.default_logs;
            let process = launch(&spec, &[]);
            cluster.nodes.push(process);
        }
        cluster
    }

    /// Adds a node that joins through the current members.
    pub fn join(&mut self, id: u64) -> usize {
        let spec = spec(self.dir.path(), id);
        self.join_with(spec, &[])
    }

    /// Adds a node under `id` with a data directory of its own (`node-{id}-{incarnation}`), as a
    /// node that lost its data would come back, joining with `extra` flags.
    pub fn join_anew(&mut self, id: u64, incarnation: &str, extra: &[&str]) -> usize {
        let mut spec = spec(self.dir.path(), id);
        spec.data_dir = self.dir.path().join(format!("node-{id}-{incarnation}"));
        spec.config_file = self
            .dir
            .path()
            .join(format!("node-{id}-{incarnation}.toml"));
        self.join_with(spec, extra)
    }

    fn join_with(&mut self, spec: NodeSpec, extra: &[&str]) -> usize {
        write_config(&spec, &self.tuning, "");
        let join: Vec<String> = self
            .nodes
            .iter()
            .filter(|node| node.is_running())
            .map(|node| node.spec.grpc.to_string())
            .collect();
        let join = join.join(",");
        let mut args = vec!["--join", join.as_str()];
        args.extend_from_slice(extra);
        let process = launch(&spec, &args);
        self.nodes.push(process);
        self.nodes.len() - 1
    }

    /// Restarts a killed node on its data.
    pub fn restart(&mut self, index: usize) {
        assert!(!self.nodes[index].is_running(), "restart a stopped node");
        let spec = self.nodes[index].spec.clone();
        self.nodes[index] = launch(&spec, &[]);
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .map(|node| node.spec.grpc.to_string())
            .collect()
    }

    /// A client over every running node.
    pub fn client(&self) -> Client {
        Client::with_config(self.endpoints(), ClientConfig::default()).expect("client")
    }

    pub fn index_of(&self, id: u64) -> usize {
        self.nodes
            .iter()
            .position(|node| node.spec.id == id)
            .expect("known node id")
    }
}

fn spec(dir: &Path, id: u64) -> NodeSpec {
    NodeSpec {
        namespace: None,
        id,
        name: None,
        grpc: free_addr(),
        http: free_addr(),
        data_dir: dir.join(format!("node-{id}")),
        config_file: dir.join(format!("node-{id}.toml")),
        default_logs: false,
    }
}

/// The addresses the membership records for `spec`: `name:port` for a named node, else the
/// listening addresses.
fn advertised(spec: &NodeSpec) -> (String, String) {
    match &spec.name {
        Some(name) => (
            format!("{name}:{}", spec.grpc.port()),
            format!("{name}:{}", spec.http.port()),
        ),
        None => (spec.grpc.to_string(), spec.http.to_string()),
    }
}

fn write_config(spec: &NodeSpec, tuning: &Tuning, members: &str) {
    let (grpc_listen, http_listen, advertise) = match &spec.name {
        Some(_) => {
            let (grpc, http) = advertised(spec);
            (
                SocketAddr::from(([0, 0, 0, 0], spec.grpc.port())),
                SocketAddr::from(([0, 0, 0, 0], spec.http.port())),
                format!("advertise_grpc = \"{grpc}\"\nadvertise_http = \"{http}\"\n"),
            )
        }
        None => (spec.grpc, spec.http, String::new()),
    };
    let mut text = format!(
        "plaintext = true\nid = {}\ngrpc_addr = \"{}\"\nhttp_addr = \"{}\"\n{advertise}data_dir = \"{}\"\ntick_interval_ms = {}\n{members}\n[raft]\nsnapshot_after_entries = {}\nentries_kept_after_snapshot = {}\n",
        spec.id,
        grpc_listen,
        http_listen,
        spec.data_dir.display(),
        tuning.tick_interval_ms,
        tuning.snapshot_after_entries,
        tuning.entries_kept_after_snapshot,
    );
    if let Some((key_file, roots_file)) = &tuning.ct {
        text.push_str(&format!(
            "[ct]\nkey_file = \"{}\"\nroots_file = \"{}\"\n",
            key_file.display(),
            roots_file.display()
        ));
    }
    std::fs::write(&spec.config_file, text).expect("write node config");
}

fn launch(spec: &NodeSpec, extra: &[&str]) -> Process {
    let log = std::fs::File::create(spec.data_dir.with_extension("log")).expect("node log file");
    let mut command = match &spec.namespace {
        Some(namespace) => {
            let mut command = Command::new("ip");
            // `ip netns exec` execs the binary: the child is the node itself, so a kill is a
            // SIGKILL of the node.
            command.args(["netns", "exec", namespace.as_str(), binary()]);
            command
        }
        None => Command::new(binary()),
    };
    if spec.default_logs {
        command.env_remove("RUST_LOG");
    } else {
        command.env("RUST_LOG", "info,openraft=warn");
    }
    let child = command
        .arg("serve")
        .arg("--config")
        .arg(&spec.config_file)
        .args(extra)
        // Several nodes share this host: none takes port 80 for ACME challenges.
        .env("CERTUS_ACME_HTTP_ADDR", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn certus serve");
    Process {
        spec: spec.clone(),
        child: Some(child),
    }
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain HTTP/1.1 GET: (status code, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect HTTP");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// The id of the leader once every running node of `cluster` agrees on one that is not `old`
/// (0: any), waiting at most `within`.
pub async fn leader_other_than(cluster: &Cluster, old: u64, within: Duration) -> u64 {
    eventually(within, "a leader that every running node knows", || async {
        let mut leaders = Vec::new();
        for endpoint in cluster.endpoints() {
            let client = cluster.client();
            let status = client.status_of(&endpoint).await.ok()?;
            leaders.push(status.leader_id);
        }
        let first = *leaders.first()?;
        (first != 0 && first != old && leaders.iter().all(|leader| *leader == first))
            .then_some(first)
    })
    .await
}

/// Acquires `count` leases `{prefix}-{n}` for `holder-a` with `ttl_ms`; their fencing tokens.
pub async fn acquire_many(
    client: &Client,
    prefix: &str,
    count: usize,
    ttl_ms: u64,
) -> std::collections::BTreeMap<String, u64> {
    let mut granted = std::collections::BTreeMap::new();
    for n in 0..count {
        let name = format!("{prefix}-{n}");
        let reply = client
            .acquire(&name, "holder-a", ttl_ms)
            .await
            .unwrap_or_else(|error| panic!("acquire {name}: {error}"));
        let lease = reply.lease.expect("an acquire returns the lease");
        granted.insert(name, lease.fencing_token);
    }
    granted
}

/// Every grant in `granted` (from [`acquire_many`]) read through `client`, unchanged.
pub async fn assert_grants_survive(
    client: &Client,
    granted: &std::collections::BTreeMap<String, u64>,
) {
    for (name, token) in granted {
        let lease = client
            .get_lease(name)
            .await
            .unwrap_or_else(|error| panic!("lease {name} lost: {error}"));
        assert_eq!(lease.holder, "holder-a", "holder of {name}");
        assert_eq!(lease.fencing_token, *token, "token of {name}");
    }
}

/// A root the CT log accepts, and leaves under it.
pub struct TestRoot {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    /// The root certificate (DER).
    pub der: Vec<u8>,
    /// The root certificate (PEM), for the log's roots file.
    pub pem: String,
}

impl TestRoot {
    /// A root named `name`.
    pub fn new(name: &str) -> TestRoot {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let key = KeyPair::generate().expect("root key");
        let root = params.self_signed(&key).expect("root");
        TestRoot {
            der: root.der().to_vec(),
            pem: root.pem(),
            params,
            key,
        }
    }

    /// A leaf certificate (DER) for `name`, signed by this root.
    pub fn leaf(&self, name: &str) -> Vec<u8> {
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        params
            .signed_by(&key, &issuer)
            .expect("leaf")
            .der()
            .to_vec()
    }
}
