//! `certus bench acme`: ACME orders completed per second end to end, driven by the real `lego`
//! client, against Certus (three nodes on loopback in this process, session daemons issuing with
//! the cluster CA) and, in the same run, against Pebble (Let's Encrypt's test server, Debian's
//! `pebble` package) driven by the same client the same way.
//!
//! For each C in `--clients`, C client loops run for the warm-up and `--seconds`: each starts one
//! `lego run` process per order (a new account, an order for one fresh name, HTTP-01, finalize,
//! download), waits for it to exit, checks the certificate it wrote, and starts the next. An
//! order is complete when lego exits 0 and wrote a certificate for exactly its name; its latency
//! is the process's start to its exit. Orders/s counts the complete orders that ended within the
//! measured window; the orders still running when it closes are waited for (their failures
//! count) but not counted.
//!
//! HTTP-01 on loopback, one answering server for both systems: lego writes each key
//! authorization into a webroot (`--http.webroot`) and this process serves that folder on one
//! port ([`Webroot`]), which both validators fetch from — Certus through `[sessions]
//! http01_resolve` (every name the run can use maps to it), Pebble through its `httpPort` and
//! `pebble-challtestsrv` as its DNS server, answering 127.0.0.1 for every name. Pebble runs with
//! `PEBBLE_VA_NOSLEEP=1` and `PEBBLE_WFE_NONCEREJECT=0` (it otherwise sleeps up to 15 s per
//! validation and refuses 5% of nonces on purpose) and never with `PEBBLE_VA_ALWAYS_VALID`: the
//! webroot counts its fetches, and a run whose orders outnumber them fails.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use certus_node::{NodeConfig, SessionsSetup};
use comfy_table::Table;
use serde_json::{Value, json};
use x509_cert::Certificate;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use super::{free_addr, micros, percentile};
use crate::cluster::{await_leader, start_local};
use crate::limits::{
    BENCH_ACME_FAILURES_PER_RUN_MAX, BENCH_ACME_HTTP01_NAMES_MAX,
    BENCH_ACME_ORDERS_PER_CLIENT_SECOND_MAX,
};

/// Options of `certus bench acme`.
#[derive(Debug, clap::Args)]
pub(crate) struct AcmeArgs {
    /// Concurrent client loops (one lego process each at a time), one run each per server.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    clients: Vec<usize>,
    /// How long each run measures, in seconds (after a 5 s warm-up).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

impl AcmeArgs {
    fn check(&self) -> Result<(), String> {
        super::check_client_counts(&self.clients)?;
        if self.seconds == 0 {
            return Err("--seconds must be at least 1".into());
        }
        let names = self.names_per_client() * self.clients.iter().sum::<usize>();
        if names > BENCH_ACME_HTTP01_NAMES_MAX {
            return Err(format!(
                "--clients {:?} for {} s would need {names} names in the nodes' HTTP-01 map; at \
                 most {BENCH_ACME_HTTP01_NAMES_MAX}: fewer clients or seconds",
                self.clients, self.seconds
            ));
        }
        Ok(())
    }

    /// The names one client loop may use in one run: one per order at the fastest rate an order
    /// could go, for the whole run.
    fn names_per_client(&self) -> usize {
        let seconds = WARM_UP.as_secs() + self.seconds;
        usize::try_from(seconds * BENCH_ACME_ORDERS_PER_CLIENT_SECOND_MAX).unwrap_or(usize::MAX)
    }
}

/// Orders that end during this first part of a run are not counted. Longer than the other
/// benchmarks' second: an order takes seconds, and the window should open on clients spread
/// over the steps of their orders rather than all in their first.
const WARM_UP: Duration = Duration::from_secs(5);

/// A lego process still running after this is killed, and its order failed.
const ORDER_DEADLINE: Duration = Duration::from_secs(60);

/// How long Pebble and its DNS server may take to listen.
const PEBBLE_START_TIMEOUT: Duration = Duration::from_secs(10);

/// The contact every order's account gives.
const EMAIL: &str = "e@x.test";

/// Where Debian installs the binaries, looked at when `PATH` does not have them.
const SYSTEM_BIN: &str = "/usr/bin";

/// Lines of a server's log quoted when it dies or does not start.
const LOG_TAIL_LINES: usize = 20;

/// The name client `client` orders in its `n`th order of run `run`: fresh for every order of
/// the bench, and known before the nodes start (their HTTP-01 map is static).
fn order_name(run: usize, client: usize, n: usize) -> String {
    format!("o{n}.c{client}.r{run}.bench.test")
}

/// A server measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Certus,
    Pebble,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Certus => "Certus",
            System::Pebble => "Pebble",
        }
    }
}

pub(super) async fn run(args: AcmeArgs) -> Result<(), String> {
    args.check()?;
    let Some(lego) = installed("lego") else {
        return Err(format!(
            "lego is not installed (no `lego` on PATH nor in {SYSTEM_BIN}), and it is the client \
             of every order: install it with `sudo apt-get install lego` and run again"
        ));
    };
    let pebble = match (installed("pebble"), installed("pebble-challtestsrv")) {
        (Some(pebble), Some(dns)) => Some((pebble, dns)),
        _ => {
            eprintln!(
                "bench acme: Pebble is not installed (no `pebble` and `pebble-challtestsrv` on \
                 PATH nor in {SYSTEM_BIN}). Install it with `sudo apt-get install pebble` and run \
                 again to compare with Pebble; measuring Certus alone."
            );
            None
        }
    };
    let dir = tempfile::Builder::new()
        .prefix("certus-bench-acme-")
        .tempdir()
        .map_err(|error| format!("cannot create a temp dir: {error}"))?;
    let webroot = Webroot::start(dir.path().join("webroot")).await?;
    let client = Arc::new(Lego {
        binary: lego,
        webroot: webroot.dir.clone(),
        scratch: dir.path().join("orders"),
    });
    std::fs::create_dir(&client.scratch)
        .map_err(|error| format!("cannot create {}: {error}", client.scratch.display()))?;

    let work = async {
        let certus = measure_certus(&args, &client, &webroot, dir.path()).await?;
        let pebble = match &pebble {
            Some((pebble, dns)) => {
                Some(measure_pebble(&args, &client, &webroot, dir.path(), pebble, dns).await?)
            }
            None => None,
        };
        Ok::<_, String>((certus, pebble))
    };
    let interrupted = async {
        // Without a signal handler Ctrl-C ends the process as usual: nothing to wait for.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let (certus, pebble) = tokio::select! {
        result = work => result?,
        () = interrupted => {
            return Err("interrupted (Ctrl-C); the servers and lego processes are stopped".into());
        }
    };
    let report = Report {
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        lego_version: package_version("lego"),
        seconds: args.seconds,
        certus,
        pebble,
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        report.print();
    }
    report.verdict()
}

/// Certus's runs: three nodes in this process with the session daemons and the cluster CA, plain
/// HTTP, every name of every run validated at the webroot; client loop c talks to node c mod 3.
async fn measure_certus(
    args: &AcmeArgs,
    lego: &Arc<Lego>,
    webroot: &Webroot,
    dir: &Path,
) -> Result<SystemRuns, String> {
    let certus_dir = dir.join("certus");
    std::fs::create_dir(&certus_dir)
        .map_err(|error| format!("cannot create {}: {error}", certus_dir.display()))?;
    let (ca_key_file, ca_cert_file, _) = crate::ca_files::ensure_ca(&certus_dir)?;
    let names_per_client = args.names_per_client();
    let mut http01_resolve = BTreeMap::new();
    for (run, &clients) in args.clients.iter().enumerate() {
        for client in 0..clients {
            for n in 0..names_per_client {
                http01_resolve.insert(order_name(run, client, n), webroot.addr);
            }
        }
    }
    let mut configs = Vec::new();
    for id in 1..=3 {
        let mut config = NodeConfig::new(
            id,
            free_addr()?,
            free_addr()?,
            certus_dir.join(format!("node-{id}")),
        );
        config.sessions = SessionsSetup {
            daemons: true,
            ca_key_file: Some(ca_key_file.clone()),
            ca_cert_file: Some(ca_cert_file.clone()),
            http01_resolve: http01_resolve.clone(),
            ..SessionsSetup::default()
        };
        configs.push(config);
    }
    drop(http01_resolve);
    let directories: Vec<String> = configs
        .iter()
        .map(|config| format!("http://{}/acme/directory", config.http_addr))
        .collect();
    let configs = super::unlimited(configs);
    let nodes = start_local(&configs).await?;
    let result = async {
        let leader = await_leader(&nodes, Duration::from_secs(10))
            .await
            .ok_or("no leader elected within 10 s")?;
        let target = Arc::new(Target {
            system: System::Certus,
            directories,
            ca_file: None,
        });
        let runs = measure_runs(args, lego, webroot, &target).await?;
        Ok(SystemRuns {
            system: System::Certus,
            setup: format!(
                "3 nodes on loopback in this process (sled, fsync per batch), leader node \
                 {leader}, plain HTTP; the session daemons issue with the cluster CA; client loop \
                 c orders from node c mod 3"
            ),
            runs,
        })
    }
    .await;
    for node in nodes {
        node.shutdown().await;
    }
    result
}

/// Pebble's runs: `pebble` with a TLS certificate of this bench's, its validator fetching HTTP-01
/// at the webroot's port, and `pebble-challtestsrv` answering its DNS queries with 127.0.0.1.
async fn measure_pebble(
    args: &AcmeArgs,
    lego: &Arc<Lego>,
    webroot: &Webroot,
    dir: &Path,
    pebble: &Path,
    dns: &Path,
) -> Result<SystemRuns, String> {
    let pebble_dir = dir.join("pebble");
    std::fs::create_dir(&pebble_dir)
        .map_err(|error| format!("cannot create {}: {error}", pebble_dir.display()))?;
    let tls = PebbleTls::generate()?;
    let write = |name: &str, contents: &str| {
        let path = pebble_dir.join(name);
        std::fs::write(&path, contents)
            .map(|()| path.clone())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    };
    let ca_file = write("ca.pem", &tls.ca_pem)?;
    let cert_file = write("cert.pem", &tls.cert_pem)?;
    let key_file = write("key.pem", &tls.key_pem)?;
    let listen = free_addr()?;
    let management = free_addr()?;
    let dns_addr = free_addr()?;
    let dns_management = free_addr()?;
    let config = pebble_config(
        listen,
        management,
        &cert_file,
        &key_file,
        webroot.addr.port(),
        free_addr()?.port(),
    );
    let config_file = write("pebble-config.json", &config.to_string())?;

    let mut servers = Servers::new(pebble_dir.clone());
    servers.spawn(
        "pebble-challtestsrv",
        dns,
        &[
            "-defaultIPv4",
            "127.0.0.1",
            // No AAAA answers: the webroot listens on 127.0.0.1 only.
            "-defaultIPv6",
            "",
            "-dns01",
            &dns_addr.to_string(),
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
            "-management",
            &dns_management.to_string(),
        ],
        &[],
    )?;
    servers.spawn(
        "pebble",
        pebble,
        &[
            "-config",
            &config_file.to_string_lossy(),
            // Go's flag package reads a boolean only as `-flag=value`: `-strict false` would turn
            // strict mode on and end the options at `false`.
            "-strict=false",
            "-dnsserver",
            &dns_addr.to_string(),
        ],
        &[("PEBBLE_VA_NOSLEEP", "1"), ("PEBBLE_WFE_NONCEREJECT", "0")],
    )?;
    servers
        .await_listening(&[dns_management, listen], PEBBLE_START_TIMEOUT)
        .await?;
    let target = Arc::new(Target {
        system: System::Pebble,
        directories: vec![format!("https://{listen}/dir")],
        ca_file: Some(ca_file),
    });
    let runs = measure_runs(args, lego, webroot, &target).await;
    // A server that died during the runs explains their failures better than they do.
    servers.check_running()?;
    Ok(SystemRuns {
        system: System::Pebble,
        setup: format!(
            "pebble {} on loopback (one process), its TLS certificate from this bench, \
             PEBBLE_VA_NOSLEEP=1, PEBBLE_WFE_NONCEREJECT=0, -strict=false, DNS from \
             pebble-challtestsrv",
            package_version("pebble")
        ),
        runs: runs?,
    })
}

/// Pebble's configuration file: HTTPS on `listen`, HTTP-01 validated on `http01_port` (where
/// the webroot listens), TLS-ALPN-01 on a port nobody answers (lego does not use it).
fn pebble_config(
    listen: SocketAddr,
    management: SocketAddr,
    cert_file: &Path,
    key_file: &Path,
    http01_port: u16,
    tls_alpn_port: u16,
) -> Value {
    json!({
        "pebble": {
            "listenAddress": listen.to_string(),
            "managementListenAddress": management.to_string(),
            "certificate": cert_file,
            "privateKey": key_file,
            "httpPort": http01_port,
            "tlsPort": tls_alpn_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }
    })
}

/// Pebble's HTTPS certificate (Debian's package ships none): a CA of this bench's, which lego
/// trusts through `LEGO_CA_CERTIFICATES`, and a leaf for 127.0.0.1 and `localhost`.
struct PebbleTls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl PebbleTls {
    fn generate() -> Result<PebbleTls, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
            SanType,
        };
        let failed = |what: &str, error: rcgen::Error| format!("Pebble's TLS {what}: {error}");
        let mut ca_params = CertificateParams::default();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Certus Bench Pebble TLS CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
        let ca = ca_params
            .self_signed(&ca_key)
            .map_err(|e| failed("CA", e))?;
        let mut leaf_params = CertificateParams::new(vec!["localhost".to_owned()])
            .map_err(|e| failed("leaf name", e))?;
        leaf_params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let leaf_key = KeyPair::generate().map_err(|e| failed("leaf key", e))?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let leaf = leaf_params
            .signed_by(&leaf_key, &issuer)
            .map_err(|e| failed("leaf", e))?;
        Ok(PebbleTls {
            ca_pem: ca.pem(),
            cert_pem: leaf.pem(),
            key_pem: leaf_key.serialize_pem(),
        })
    }
}

/// Pebble and its DNS server: each process's output goes to `<name>.log` in `dir`; every
/// process is killed when this is dropped (on an error too).
struct Servers {
    dir: PathBuf,
    children: Vec<(&'static str, Child)>,
}

impl Servers {
    fn new(dir: PathBuf) -> Servers {
        Servers {
            dir,
            children: Vec::new(),
        }
    }

    /// Starts `binary args` as `name` with `env` added and no other `PEBBLE_*` variable of
    /// this process's environment (`PEBBLE_VA_ALWAYS_VALID` would skip validation).
    fn spawn(
        &mut self,
        name: &'static str,
        binary: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<(), String> {
        assert!(
            self.children.iter().all(|(known, _)| *known != name),
            "server names are unique: {name}"
        );
        let log_path = self.log_path(name);
        let log = std::fs::File::create(&log_path)
            .map_err(|error| format!("cannot create {}: {error}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|error| format!("cannot share {}: {error}", log_path.display()))?;
        let mut command = Command::new(binary);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PEBBLE_") {
                command.env_remove(key);
            }
        }
        let child = command
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|error| format!("cannot start {} ({name}): {error}", binary.display()))?;
        self.children.push((name, child));
        Ok(())
    }

    /// An error naming the first server that has exited, with the end of its log.
    fn check_running(&mut self) -> Result<(), String> {
        for (name, child) in &mut self.children {
            let status = child
                .try_wait()
                .map_err(|error| format!("cannot check on {name}: {error}"))?;
            if let Some(status) = status {
                return Err(format!(
                    "{name} exited ({status}); the end of its log:\n{}",
                    log_tail(&self.dir.join(format!("{name}.log")))
                ));
            }
        }
        Ok(())
    }

    /// Waits until every one of `addrs` accepts a TCP connection, checking every 100 ms that
    /// the servers still run.
    async fn await_listening(
        &mut self,
        addrs: &[SocketAddr],
        timeout: Duration,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        for addr in addrs {
            loop {
                self.check_running()?;
                let Err(last) = tokio::net::TcpStream::connect(addr).await else {
                    break;
                };
                if Instant::now() >= deadline {
                    let logs: Vec<String> = self
                        .children
                        .iter()
                        .map(|(name, _)| format!("{name}:\n{}", log_tail(&self.log_path(name))))
                        .collect();
                    return Err(format!(
                        "Pebble not listening on {addr} within {} s (last: {last}); the end of \
                         the logs:\n{}",
                        timeout.as_secs(),
                        logs.join("\n")
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (name, child) in &mut self.children {
            // Already exited is fine; anything else is worth a line, as the process may be left.
            if let Err(error) = child.kill()
                && error.kind() != std::io::ErrorKind::InvalidInput
            {
                eprintln!(
                    "bench acme: cannot kill {name} (pid {}): {error}",
                    child.id()
                );
            }
            let _ = child.wait();
        }
    }
}

fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(log) => {
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

/// The binary `name` from `PATH` or `/usr/bin`.
fn installed(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from(SYSTEM_BIN)])
        .map(|dir| dir.join(name))
        .find(|path| {
            use std::os::unix::fs::PermissionsExt as _;
            path.metadata().is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
}

/// The installed version of Debian package `package` (neither `pebble` nor Debian's `lego`
/// says its own: `lego --version` answers `dev`).
fn package_version(package: &str) -> String {
    Command::new("dpkg-query")
        .args(["--show", "--showformat=${Version}", package])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success() && !output.stdout.is_empty())
        .map_or_else(
            || "(version unknown)".to_owned(),
            |output| String::from_utf8_lossy(&output.stdout).into_owned(),
        )
}

/// The HTTP-01 server of every order of the bench: serves the files lego writes under
/// `dir/.well-known/acme-challenge/` on one loopback port, whatever the `Host`, and counts what
/// it served.
struct Webroot {
    dir: PathBuf,
    addr: SocketAddr,
    /// Key authorizations served (200 answers).
    served: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Webroot {
    async fn start(dir: PathBuf) -> Result<Webroot, String> {
        let challenges = dir.join(".well-known/acme-challenge");
        std::fs::create_dir_all(&challenges)
            .map_err(|error| format!("cannot create {}: {error}", challenges.display()))?;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|error| format!("the HTTP-01 webroot cannot listen: {error}"))?;
        let addr = listener.local_addr().map_err(|error| error.to_string())?;
        let served = Arc::new(AtomicU64::new(0));
        let app = Router::new()
            .route("/.well-known/acme-challenge/{token}", get(serve_token))
            .with_state((Arc::new(challenges), Arc::clone(&served)));
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("bench acme: the HTTP-01 webroot stopped: {error}");
            }
        });
        Ok(Webroot {
            dir,
            addr,
            served,
            task,
        })
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for Webroot {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `token` can be a file name lego wrote: an ACME token is base64url (RFC 8555 §8.1),
/// so no `/` or `..` leaves the folder.
fn is_token(token: &str) -> bool {
    (1..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

async fn serve_token(
    State((challenges, served)): State<(Arc<PathBuf>, Arc<AtomicU64>)>,
    UrlPath(token): UrlPath<String>,
) -> Response {
    if !is_token(&token) {
        return (StatusCode::BAD_REQUEST, "not an ACME token").into_response();
    }
    let path = challenges.join(&token);
    let read = tokio::task::spawn_blocking(move || std::fs::read(path)).await;
    match read.unwrap_or_else(|error| Err(std::io::Error::other(error))) {
        Ok(key_authorization) => {
            served.fetch_add(1, Ordering::Relaxed);
            key_authorization.into_response()
        }
        Err(error) => (StatusCode::NOT_FOUND, format!("token {token}: {error}")).into_response(),
    }
}

/// The client: a lego process per order.
struct Lego {
    binary: PathBuf,
    /// Where lego writes key authorizations (the webroot's folder).
    webroot: PathBuf,
    /// Each order's `--path` is a folder in here, removed when the order ends.
    scratch: PathBuf,
}

/// Where the orders go.
struct Target {
    system: System,
    /// ACME directory URLs; client loop c uses the (c mod len)th.
    directories: Vec<String>,
    /// The CA certificate lego must trust for the server's HTTPS, if it speaks HTTPS.
    ca_file: Option<PathBuf>,
}

impl Lego {
    /// One order for `name` at `directory`: lego's start to its exit, and whether it ended with
    /// a certificate for `name` (else the last line lego wrote, or what else went wrong).
    async fn order(&self, target: &Target, directory: &str, name: &str) -> Order {
        let path = self.scratch.join(name);
        let started = Instant::now();
        let result = self.run(target, directory, name, &path).await;
        let ended = Instant::now();
        // The folder only held this order's account and certificate; a leftover wastes disk
        // but changes no figure.
        let _ = std::fs::remove_dir_all(&path);
        Order {
            started,
            ended,
            result,
        }
    }

    async fn run(
        &self,
        target: &Target,
        directory: &str,
        name: &str,
        path: &Path,
    ) -> Result<(), String> {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .arg("--server")
            .arg(directory)
            .args(["--accept-tos", "--email", EMAIL, "--http", "--http.webroot"])
            .arg(&self.webroot)
            .arg("--domains")
            .arg(name)
            .arg("--path")
            .arg(path)
            .arg("run")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &target.ca_file {
            Some(ca_file) => command.env("LEGO_CA_CERTIFICATES", ca_file),
            None => command.env_remove("LEGO_CA_CERTIFICATES"),
        };
        let child = command
            .spawn()
            .map_err(|error| format!("cannot start lego: {error}"))?;
        let output = tokio::time::timeout(ORDER_DEADLINE, child.wait_with_output())
            .await
            .map_err(|_| format!("lego killed after {} s", ORDER_DEADLINE.as_secs()))?
            .map_err(|error| format!("waiting for lego: {error}"))?;
        if !output.status.success() {
            return Err(format!(
                "lego {}: {}",
                output.status,
                last_line(&String::from_utf8_lossy(&output.stderr))
            ));
        }
        let certificate = path.join("certificates").join(format!("{name}.crt"));
        let pem = std::fs::read(&certificate).map_err(|error| {
            format!(
                "lego exited 0 without a certificate at {}: {error}",
                certificate.display()
            )
        })?;
        check_certificate(&pem, name)
    }
}

/// The last line of `text` that is not blank, trimmed.
fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("(nothing on stderr)")
}

/// Whether `pem` (lego's bundle: the leaf first) holds a certificate for exactly `name`.
fn check_certificate(pem: &[u8], name: &str) -> Result<(), String> {
    let chain = Certificate::load_pem_chain(pem)
        .map_err(|error| format!("the certificate lego wrote does not parse: {error}"))?;
    let leaf = chain
        .first()
        .ok_or("the certificate file lego wrote holds no certificate")?;
    let names: Vec<String> = match leaf.tbs_certificate.get::<SubjectAltName>() {
        Ok(Some((_, alt_names))) => alt_names
            .0
            .iter()
            .map(|alt| match alt {
                GeneralName::DnsName(dns) => dns.to_string(),
                other => format!("{other:?}"),
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(error) => return Err(format!("the leaf's subjectAltName: {error}")),
    };
    if names == [name] {
        Ok(())
    } else {
        Err(format!("the leaf names {names:?}, not [{name:?}]"))
    }
}

/// One lego process.
#[derive(Debug)]
struct Order {
    started: Instant,
    ended: Instant,
    result: Result<(), String>,
}

/// What one client loop did.
struct LoopReport {
    orders: Vec<Order>,
    ran_out: bool,
}

/// Orders for the client's names one after the other until `end`, or until the run has failed
/// more than it may.
async fn client_loop(
    lego: Arc<Lego>,
    target: Arc<Target>,
    run: usize,
    client: usize,
    names: usize,
    end: Instant,
    failures: Arc<AtomicUsize>,
) -> LoopReport {
    let directory = &target.directories[client % target.directories.len()];
    let mut orders = Vec::new();
    for n in 0..names {
        if Instant::now() >= end
            || failures.load(Ordering::Relaxed) > BENCH_ACME_FAILURES_PER_RUN_MAX
        {
            return LoopReport {
                orders,
                ran_out: false,
            };
        }
        let order = lego
            .order(&target, directory, &order_name(run, client, n))
            .await;
        if order.result.is_err() {
            failures.fetch_add(1, Ordering::Relaxed);
        }
        orders.push(order);
    }
    LoopReport {
        orders,
        ran_out: Instant::now() < end,
    }
}

/// Every run of `--clients` against `target`.
async fn measure_runs(
    args: &AcmeArgs,
    lego: &Arc<Lego>,
    webroot: &Webroot,
    target: &Arc<Target>,
) -> Result<Vec<Run>, String> {
    let mut runs = Vec::new();
    for (index, &clients) in args.clients.iter().enumerate() {
        let fetched_before = webroot.served();
        let window = Duration::from_secs(args.seconds);
        let start = Instant::now() + WARM_UP;
        let end = start + window;
        let failures = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..clients)
            .map(|client| {
                tokio::spawn(client_loop(
                    Arc::clone(lego),
                    Arc::clone(target),
                    index,
                    client,
                    args.names_per_client(),
                    end,
                    Arc::clone(&failures),
                ))
            })
            .collect();
        let mut orders = Vec::new();
        let mut ran_out = false;
        for task in tasks {
            let report = task.await.map_err(|error| error.to_string())?;
            orders.extend(report.orders);
            ran_out |= report.ran_out;
        }
        let run = Run::new(clients, window, start, end, &orders, ran_out)
            .with_fetches(webroot.served() - fetched_before);
        eprintln!(
            "bench acme: {} x{clients}: {:.2} orders/s, p50 {} ms, {} failed",
            target.system.name(),
            run.per_second(),
            ms(percentile(&run.latencies_us, 0.50)),
            run.failures
        );
        let stop = run.failures > BENCH_ACME_FAILURES_PER_RUN_MAX || run.ran_out;
        runs.push(run);
        if stop {
            break;
        }
    }
    Ok(runs)
}

/// One run: one server, one concurrency.
#[derive(Debug)]
struct Run {
    clients: usize,
    window: Duration,
    /// lego processes started, warm-up and drain included.
    orders: usize,
    /// Orders complete (exit 0, certificate checked) that ended within the window.
    completed_in_window: usize,
    /// Start→exit of those orders, sorted.
    latencies_us: Vec<u64>,
    /// Orders that failed, whenever they ended, and the last one's reason.
    failures: usize,
    last_failure: Option<String>,
    /// Key authorizations the webroot served while the run went on.
    fetches: u64,
    ran_out: bool,
}

impl Run {
    fn new(
        clients: usize,
        window: Duration,
        start: Instant,
        end: Instant,
        orders: &[Order],
        ran_out: bool,
    ) -> Run {
        let mut run = Run {
            clients,
            window,
            orders: orders.len(),
            completed_in_window: 0,
            latencies_us: Vec::new(),
            failures: 0,
            last_failure: None,
            fetches: 0,
            ran_out,
        };
        let mut last_failed_at = None;
        for order in orders {
            assert!(
                order.ended >= order.started,
                "an order ends after it starts"
            );
            match &order.result {
                Ok(()) if (start..end).contains(&order.ended) => {
                    run.completed_in_window += 1;
                    run.latencies_us.push(micros(order.ended - order.started));
                }
                Ok(()) => {}
                Err(reason) => {
                    run.failures += 1;
                    if last_failed_at.is_none_or(|at| order.ended >= at) {
                        last_failed_at = Some(order.ended);
                        run.last_failure = Some(reason.clone());
                    }
                }
            }
        }
        run.latencies_us.sort_unstable();
        run
    }

    fn with_fetches(mut self, fetches: u64) -> Run {
        self.fetches = fetches;
        self
    }

    fn per_second(&self) -> f64 {
        self.completed_in_window as f64 / self.window.as_secs_f64()
    }

    /// Complete orders of the whole run, warm-up and drain included.
    fn completed(&self) -> usize {
        self.orders - self.failures
    }
}

/// One server's runs.
#[derive(Debug)]
struct SystemRuns {
    system: System,
    setup: String,
    runs: Vec<Run>,
}

/// Everything `bench acme` measured.
#[derive(Debug)]
struct Report {
    cpus: usize,
    lego_version: String,
    seconds: u64,
    certus: SystemRuns,
    /// `None` when Pebble is not installed.
    pebble: Option<SystemRuns>,
}

impl Report {
    fn systems(&self) -> impl Iterator<Item = &SystemRuns> {
        std::iter::once(&self.certus).chain(self.pebble.as_ref())
    }

    /// The bench fails when a run failed more than [`BENCH_ACME_FAILURES_PER_RUN_MAX`] orders, used every
    /// name, or completed more orders than the webroot served key authorizations (a server that
    /// issued without validating).
    fn verdict(&self) -> Result<(), String> {
        for system in self.systems() {
            for run in &system.runs {
                let at = format!("{} x{}", system.system.name(), run.clients);
                if run.failures > BENCH_ACME_FAILURES_PER_RUN_MAX {
                    return Err(format!(
                        "{at}: {} orders failed (at most {BENCH_ACME_FAILURES_PER_RUN_MAX} may), the last: {}",
                        run.failures,
                        run.last_failure.as_deref().unwrap_or("-")
                    ));
                }
                if run.ran_out {
                    return Err(format!(
                        "{at}: a client loop used all its names, made for \
                         {BENCH_ACME_ORDERS_PER_CLIENT_SECOND_MAX} orders/s"
                    ));
                }
                if (run.completed() as u64) > run.fetches {
                    return Err(format!(
                        "{at}: {} orders complete but only {} HTTP-01 fetches: the server issued \
                         without validating",
                        run.completed(),
                        run.fetches
                    ));
                }
            }
        }
        Ok(())
    }

    /// Certus's orders/s over Pebble's at each concurrency both measured.
    fn ratios(&self) -> Vec<(usize, f64, f64)> {
        let Some(pebble) = &self.pebble else {
            return Vec::new();
        };
        self.certus
            .runs
            .iter()
            .filter_map(|certus| {
                let peer = pebble
                    .runs
                    .iter()
                    .find(|run| run.clients == certus.clients)?;
                Some((certus.clients, certus.per_second(), peer.per_second()))
            })
            .collect()
    }

    fn to_json(&self) -> Value {
        let systems: Vec<Value> = self
            .systems()
            .map(|system| {
                let runs: Vec<Value> = system
                    .runs
                    .iter()
                    .map(|run| {
                        json!({
                            "clients": run.clients,
                            "orders_per_second": run.per_second(),
                            "completed_in_window": run.completed_in_window,
                            "orders_started": run.orders,
                            "latency_p50_ms": us_to_ms(percentile(&run.latencies_us, 0.50)),
                            "latency_p99_ms": us_to_ms(percentile(&run.latencies_us, 0.99)),
                            "failures": run.failures,
                            "last_failure": run.last_failure,
                            "http01_fetches": run.fetches,
                            "ran_out_of_names": run.ran_out,
                        })
                    })
                    .collect();
                json!({ "system": system.system.name(), "setup": system.setup, "runs": runs })
            })
            .collect();
        let ratios: Vec<Value> = self
            .ratios()
            .into_iter()
            .map(|(clients, certus, pebble)| {
                json!({ "clients": clients, "certus_over_pebble": ratio(certus, pebble) })
            })
            .collect();
        json!({
            "bench": "acme",
            "cpus": self.cpus,
            "client": format!("lego {}", self.lego_version),
            "seconds": self.seconds,
            "warm_up_s": WARM_UP.as_secs(),
            "systems": systems,
            "ratios": ratios,
        })
    }

    fn print(&self) {
        println!(
            "ACME orders end to end, one `lego run` process per order (lego {}: a new account, \
             one fresh name, HTTP-01 from one webroot server, finalize, download), {} CPUs \
             shared by the servers and the lego processes",
            self.lego_version, self.cpus
        );
        for system in self.systems() {
            println!("{}: {}", system.system.name(), system.setup);
            let mut table = Table::new();
            table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
            table.set_header([
                "clients",
                "orders/s",
                "latency p50 ms",
                "p99 ms",
                "orders in window",
                "failures",
                "HTTP-01 fetches",
            ]);
            for run in &system.runs {
                table.add_row([
                    run.clients.to_string(),
                    format!("{:.2}", run.per_second()),
                    ms(percentile(&run.latencies_us, 0.50)),
                    ms(percentile(&run.latencies_us, 0.99)),
                    run.completed_in_window.to_string(),
                    run.failures.to_string(),
                    run.fetches.to_string(),
                ]);
            }
            println!("{table}");
            for run in &system.runs {
                if let Some(reason) = &run.last_failure {
                    println!(
                        "{} x{}: {} failed, the last: {reason}",
                        system.system.name(),
                        run.clients,
                        run.failures
                    );
                }
            }
        }
        let ratios = self.ratios();
        if !ratios.is_empty() {
            let mut table = Table::new();
            table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
            table.set_header([
                "clients",
                "Certus orders/s",
                "Pebble orders/s",
                "Certus/Pebble",
            ]);
            for (clients, certus, pebble) in ratios {
                table.add_row([
                    clients.to_string(),
                    format!("{certus:.2}"),
                    format!("{pebble:.2}"),
                    ratio(certus, pebble).map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
                ]);
            }
            println!("{table}");
        }
        println!(
            "orders/s: orders complete (lego exit 0, certificate for the name checked) that ended \
             within the {} s window after a {} s warm-up; latency: lego's start to exit, of the \
             same orders. lego polls a challenge after the server's Retry-After (Certus: 1 s) or \
             5 s without one (this Pebble sends none), so most of an order is lego waiting",
            self.seconds,
            WARM_UP.as_secs()
        );
    }
}

fn ratio(certus: f64, pebble: f64) -> Option<f64> {
    (pebble > 0.0).then(|| certus / pebble)
}

/// Microseconds as milliseconds, whole.
fn ms(us: Option<u64>) -> String {
    us.map_or_else(|| "-".to_owned(), |us| format!("{:.0}", us as f64 / 1000.0))
}

fn us_to_ms(us: Option<u64>) -> Value {
    us.map_or(Value::Null, |us| json!(us as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(clients: Vec<usize>, seconds: u64) -> AcmeArgs {
        AcmeArgs {
            clients,
            seconds,
            json: false,
        }
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            acme: AcmeArgs,
        }
        let defaults = Cli::try_parse_from(["acme"]).expect("parses").acme;
        assert_eq!(defaults.clients, [1, 16]);
        assert_eq!(defaults.seconds, 20);
        assert!(!defaults.json);
        let chosen = Cli::try_parse_from(["acme", "--clients", "2,4", "--seconds", "15"])
            .expect("parses")
            .acme;
        assert_eq!(chosen.clients, [2, 4]);
        assert_eq!(chosen.seconds, 15);
    }

    #[test]
    fn names_are_fresh_per_order_and_bounded() {
        let ok = args(vec![1, 16], 15);
        ok.check().expect("valid");
        assert_eq!(ok.names_per_client(), 20 * 10);
        assert_ne!(order_name(0, 1, 2), order_name(1, 1, 2));
        assert_ne!(order_name(0, 1, 2), order_name(0, 2, 1));
        assert_eq!(order_name(1, 15, 0), "o0.c15.r1.bench.test");
        assert!(args(vec![], 15).check().is_err());
        assert!(args(vec![1, 0], 15).check().is_err());
        assert!(args(vec![1], 0).check().is_err());
        let too_many = args(vec![10_000], 100).check().expect_err("too many names");
        assert!(too_many.contains("HTTP-01 map"), "{too_many}");
    }

    #[test]
    fn only_tokens_are_served() {
        assert!(is_token("LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"));
        assert!(is_token("a-b_c"));
        assert!(!is_token(""));
        assert!(!is_token(".."));
        assert!(!is_token("../etc"));
        assert!(!is_token("a/b"));
        assert!(!is_token(&"a".repeat(257)));
    }

    #[test]
    fn the_last_line_is_the_last_one_with_text() {
        assert_eq!(
            last_line("2024 [INFO] x\n2024 Could not obtain:\n\t[a.test] acme: error: 403 \n\n"),
            "[a.test] acme: error: 403"
        );
        assert_eq!(last_line(" \n"), "(nothing on stderr)");
    }

    #[test]
    fn a_certificate_counts_only_for_exactly_its_name() {
        let key = rcgen::KeyPair::generate().expect("a key");
        let pem = rcgen::CertificateParams::new(vec!["o1.c0.r0.bench.test".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate")
            .pem();
        check_certificate(pem.as_bytes(), "o1.c0.r0.bench.test").expect("its name");
        let other =
            check_certificate(pem.as_bytes(), "o2.c0.r0.bench.test").expect_err("another name");
        assert!(other.contains("o1.c0.r0.bench.test"), "{other}");
        assert!(check_certificate(b"not a certificate", "a.test").is_err());
    }

    #[test]
    fn pebble_validates_at_the_webroots_port() {
        let listen: SocketAddr = "127.0.0.1:14000".parse().expect("an address");
        let management: SocketAddr = "127.0.0.1:15000".parse().expect("an address");
        let config = pebble_config(
            listen,
            management,
            Path::new("/t/cert.pem"),
            Path::new("/t/key.pem"),
            5002,
            5001,
        );
        assert_eq!(config["pebble"]["httpPort"], 5002);
        assert_eq!(config["pebble"]["listenAddress"], "127.0.0.1:14000");
        assert_eq!(config["pebble"]["certificate"], "/t/cert.pem");
        assert_eq!(config["pebble"]["externalAccountBindingRequired"], false);
    }

    #[test]
    fn a_run_counts_complete_orders_that_ended_in_the_window() {
        let start = Instant::now() + Duration::from_secs(5);
        let end = start + Duration::from_secs(10);
        let order = |started: Instant, ms: u64, result: Result<(), String>| Order {
            started,
            ended: started + Duration::from_millis(ms),
            result,
        };
        let orders = [
            // Ended in the warm-up: not counted.
            order(Instant::now(), 1_000, Ok(())),
            // Started in the warm-up, ended in the window: counted.
            order(start - Duration::from_millis(500), 1_500, Ok(())),
            order(start + Duration::from_secs(2), 3_000, Ok(())),
            // Ended after the window: not counted.
            order(end - Duration::from_millis(100), 2_000, Ok(())),
            order(start, 50, Err("lego exit status: 1: first".into())),
            order(start + Duration::from_secs(1), 50, Err("second".into())),
        ];
        let run = Run::new(16, end - start, start, end, &orders, false).with_fetches(4);
        assert_eq!(run.orders, 6);
        assert_eq!(run.completed_in_window, 2);
        assert_eq!(run.latencies_us, [1_500_000, 3_000_000]);
        assert_eq!(run.failures, 2);
        assert_eq!(run.completed(), 4);
        assert_eq!(run.last_failure.as_deref(), Some("second"));
        assert!((run.per_second() - 0.2).abs() < 1e-9);
    }

    #[test]
    fn the_verdict_fails_on_failures_running_out_and_orders_without_fetches() {
        let start = Instant::now();
        let end = start + Duration::from_secs(10);
        let ok = |at: u64| Order {
            started: start,
            ended: start + Duration::from_secs(at),
            result: Ok(()),
        };
        let report = |run: Run| Report {
            cpus: 2,
            lego_version: "4.9.1-1".into(),
            seconds: 10,
            certus: SystemRuns {
                system: System::Certus,
                setup: String::new(),
                runs: vec![run],
            },
            pebble: None,
        };
        let good = Run::new(1, end - start, start, end, &[ok(1), ok(2)], false).with_fetches(2);
        report(good).verdict().expect("two orders, two fetches");
        let unvalidated =
            Run::new(1, end - start, start, end, &[ok(1), ok(2)], false).with_fetches(1);
        let error = report(unvalidated).verdict().expect_err("too few fetches");
        assert!(error.contains("without validating"), "{error}");
        let failed: Vec<Order> = (0..=BENCH_ACME_FAILURES_PER_RUN_MAX)
            .map(|_| Order {
                started: start,
                ended: start,
                result: Err("boom".into()),
            })
            .collect();
        let error = report(Run::new(1, end - start, start, end, &failed, false))
            .verdict()
            .expect_err("too many failures");
        assert!(error.contains("boom"), "{error}");
        let ran_out = Run::new(1, end - start, start, end, &[ok(1)], true).with_fetches(1);
        assert!(report(ran_out).verdict().is_err());
        let both = Report {
            pebble: Some(SystemRuns {
                system: System::Pebble,
                setup: String::new(),
                runs: vec![Run::new(1, end - start, start, end, &[ok(1)], false)],
            }),
            ..report(Run::new(1, end - start, start, end, &[ok(1), ok(2)], false))
        };
        assert_eq!(both.ratios(), [(1, 0.2, 0.1)]);
        assert_eq!(both.to_json()["ratios"][0]["certus_over_pebble"], 2.0);
    }
}
