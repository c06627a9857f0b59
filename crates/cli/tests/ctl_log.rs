//! `certus ctl log` and `certus ct-keygen` against a real cluster: three `certus serve`
//! processes on loopback, each configured with a `[ct]` table, driven by the `certus` binary as
//! an operator would. The SCT and STH the commands print are verified under the log's key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use certus_ct::LogEntry;
use certus_ct::signer::{EcdsaP256Signer, LogVerifier};
use certus_ct::structures::json::{AddChainResponse, GetRootsResponse, GetSthResponse};
use certus_ct::structures::{SignedCertificateTimestamp, SignedTreeHead};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::Value;

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_certus")
}

#[path = "../../../tests/support/ports.rs"]
mod ports;
use ports::free_addr;

/// A CA that issues leaves.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
    der: Vec<u8>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            der: cert.der().to_vec(),
            params,
            key,
        }
    }

    /// A leaf for `name`: (DER, PEM).
    fn leaf(&self, name: &str) -> (Vec<u8>, String) {
        let params = CertificateParams::new(vec![name.to_owned()]).expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).expect("leaf");
        (cert.der().to_vec(), cert.pem())
    }
}

/// Three `certus serve` processes (killed when dropped).
struct Cluster {
    dir: tempfile::TempDir,
    children: Vec<Child>,
    endpoints: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Cluster {
    fn start(dir: tempfile::TempDir, key_file: &Path, roots_file: &Path) -> Cluster {
        let nodes: Vec<(u64, SocketAddr, SocketAddr)> =
            (1..=3).map(|id| (id, free_addr(), free_addr())).collect();
        let members: String = nodes
            .iter()
            .map(|(id, grpc, http)| {
                format!(
                    "[[initial_members]]\nid = {id}\ngrpc_addr = \"{grpc}\"\nhttp_addr = \"{http}\"\n"
                )
            })
            .collect();
        let mut children = Vec::new();
        for (id, grpc, http) in &nodes {
            let data_dir = dir.path().join(format!("node-{id}"));
            // The [ct] table comes last: TOML puts every key after it into it.
            let config = format!(
                "plaintext = true\nid = {id}\ngrpc_addr = \"{grpc}\"\nhttp_addr = \"{http}\"\ndata_dir = \"{}\"\n{members}\n[ct]\nkey_file = \"{}\"\nroots_file = \"{}\"\n",
                data_dir.display(),
                key_file.display(),
                roots_file.display(),
            );
            let config_file = dir.path().join(format!("node-{id}.toml"));
            std::fs::write(&config_file, config).expect("write node config");
            let log = std::fs::File::create(dir.path().join(format!("node-{id}.log")))
                .expect("node log file");
            let child = Command::new(binary())
                .arg("serve")
                .arg("--config")
                .arg(&config_file)
                // Several nodes share this host: none takes port 80 for ACME challenges.
                .env("CERTUS_ACME_HTTP_ADDR", "off")
                .env("RUST_LOG", "info,openraft=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn certus serve");
            children.push(child);
        }
        let endpoints = nodes
            .iter()
            .map(|(_, grpc, _)| grpc.to_string())
            .collect::<Vec<_>>()
            .join(",");
        Cluster {
            dir,
            children,
            endpoints,
        }
    }

    /// `certus ctl --endpoints … <args>`.
    fn ctl(&self, args: &[&str]) -> Run {
        run(Command::new(binary())
            .arg("ctl")
            .arg("--endpoints")
            .arg(&self.endpoints)
            .args(args))
    }

    /// `ctl <args> --json`, which must succeed, parsed.
    fn ctl_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let run = self.ctl(&args);
        assert!(run.ok, "ctl {args:?} failed: {}", run.stderr);
        serde_json::from_str(&run.stdout).unwrap_or_else(|error| {
            panic!("ctl {args:?} printed no JSON ({error}): {}", run.stdout)
        })
    }

    /// Retries `ctl <args> --json` until `accept` takes its document, for up to 30 s.
    fn ctl_json_until(&self, args: &[&str], what: &str, accept: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut json_args = args.to_vec();
        json_args.push("--json");
        loop {
            let run = self.ctl(&json_args);
            if run.ok {
                let document: Value = serde_json::from_str(&run.stdout).expect("JSON");
                if accept(&document) {
                    return document;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last: {} {} (node logs in {})",
                run.stdout,
                run.stderr,
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A finished `certus` command.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(command: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .env_remove("CERTUS_ENDPOINTS")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run certus");
    Run {
        ok: status.success(),
        stdout: String::from_utf8(stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(stderr).expect("UTF-8 stderr"),
    }
}

/// Asserts the command failed and its error says `expected`.
fn assert_fails(run: &Run, expected: &str) {
    assert!(
        !run.ok,
        "expected a failure mentioning {expected:?}, got success: {}",
        run.stdout
    );
    assert!(
        run.stderr.contains(expected),
        "expected {expected:?} in: {}",
        run.stderr
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a file");
    path
}

/// `certus ct-keygen --out FILE`: the key, and the log id it printed.
fn keygen(path: &Path) -> String {
    let run = run(Command::new(binary())
        .arg("ct-keygen")
        .arg("--out")
        .arg(path));
    assert!(run.ok, "ct-keygen failed: {}", run.stderr);
    run.stdout
        .lines()
        .find_map(|line| line.strip_prefix("log id: "))
        .unwrap_or_else(|| panic!("no log id in: {}", run.stdout))
        .to_owned()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn an_operator_runs_the_ct_log_with_ctl() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = Ca::new("Certus CLI Test Root");
    let stranger = Ca::new("Somebody Else");
    let key_file = dir.path().join("ct-log-key.pem");

    // ct-keygen: a new key, its log id, and never an overwrite.
    let log_id = keygen(&key_file);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file)
            .expect("key file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let again = run(Command::new(binary())
        .arg("ct-keygen")
        .arg("--out")
        .arg(&key_file));
    assert_fails(&again, "already exists");
    let signer = EcdsaP256Signer::from_pkcs8_pem(&std::fs::read_to_string(&key_file).expect("key"))
        .expect("the key loads");
    let verifier = LogVerifier::for_signer(&signer).expect("verifier");
    assert_eq!(log_id, b64(&verifier.log_id()));

    let roots_file = write(dir.path(), "roots.pem", &root.pem);
    let (leaf_der, leaf_pem) = root.leaf("one.example");
    let chain_file = write(dir.path(), "one.pem", &format!("{leaf_pem}{}", root.pem));
    let (_, stranger_pem) = stranger.leaf("stranger.example");
    let stranger_file = write(dir.path(), "stranger.pem", &stranger_pem);
    let not_pem = write(dir.path(), "notes.txt", "this is not a certificate\n");
    let (second_der, second_pem) = root.leaf("two.example");
    let second_file = write(dir.path(), "two.pem", &second_pem);

    let cluster = Cluster::start(dir, &key_file, &roots_file);

    // status: every node reports, the log is open and empty.
    let status = cluster.ctl_json_until(&["log", "status"], "three node reports", |status| {
        status["reports"].as_array().is_some_and(|r| r.len() == 3)
    });
    assert_eq!(status["log_id"], log_id.as_str());
    assert_eq!(status["frozen"], false);
    assert_eq!(status["next_sequence"], 0);
    assert_eq!(status["config"]["min_serving_nodes"], 2);
    let human = cluster.ctl(&["log", "status"]);
    assert!(human.ok, "{}", human.stderr);
    assert!(human.stdout.contains(&log_id), "{}", human.stdout);
    assert!(human.stdout.contains("frozen"), "{}", human.stdout);
    assert!(human.stdout.contains("holds serving"), "{}", human.stdout);

    // roots: the configured root, as RFC 6962 JSON and by subject.
    let roots: GetRootsResponse =
        serde_json::from_value(cluster.ctl_json(&["log", "roots"])).expect("get-roots JSON");
    assert_eq!(roots.certificates, vec![root.der.clone()]);
    let human = cluster.ctl(&["log", "roots"]);
    assert!(
        human.ok && human.stdout.contains("Certus CLI Test Root"),
        "{} {}",
        human.stdout,
        human.stderr
    );

    // add-chain: the SCT printed as RFC 6962 JSON verifies for the leaf under the log's key.
    let added = cluster.ctl(&["log", "add-chain", chain_file.to_str().expect("UTF-8 path")]);
    assert!(added.ok, "add-chain failed: {}", added.stderr);
    let response: AddChainResponse = serde_json::from_str(&added.stdout).expect("add-chain JSON");
    assert_eq!(response.sct_version, 0);
    assert_eq!(b64(&response.id), log_id);
    let sct = SignedCertificateTimestamp::try_from(&response).expect("an SCT");
    verifier
        .verify_sct(
            &sct,
            &LogEntry::X509 {
                certificate: leaf_der.clone(),
            },
        )
        .expect("the SCT verifies");

    // sth: the entry reaches a serving STH that verifies.
    let sth = cluster.ctl_json_until(&["log", "sth"], "an STH of size 1", |sth| {
        sth["tree_size"] == 1
    });
    let sth: GetSthResponse = serde_json::from_value(sth).expect("get-sth JSON");
    verifier
        .verify_sth(&SignedTreeHead::try_from(&sth).expect("an STH"))
        .expect("the STH verifies");

    // Bad input: each error says what was wrong.
    assert_fails(
        &cluster.ctl(&["log", "add-chain", "/nonexistent/chain.pem"]),
        "cannot read /nonexistent/chain.pem",
    );
    assert_fails(
        &cluster.ctl(&["log", "add-chain", not_pem.to_str().expect("UTF-8")]),
        "no -----BEGIN CERTIFICATE----- block",
    );
    assert_fails(
        &cluster.ctl(&["log", "add-chain", stranger_file.to_str().expect("UTF-8")]),
        "accepted root",
    );
    assert_fails(
        &cluster.ctl(&[
            "log",
            "add-chain",
            "--precert",
            second_file.to_str().expect("UTF-8"),
        ]),
        "bad-chain",
    );

    // config set changes only the given fields; bad values are refused by name.
    let set = cluster.ctl_json(&[
        "log",
        "config",
        "set",
        "--watermark",
        "500",
        "--guard-window-ms",
        "50",
    ]);
    assert_eq!(set["unsequenced_watermark"], 500);
    let config = cluster.ctl_json(&["log", "config"]);
    assert_eq!(config["unsequenced_watermark"], 500);
    assert_eq!(config["guard_window_ms"], 50);
    assert_eq!(config["min_serving_nodes"], 2, "unchanged");
    assert_eq!(config["min_serving_permille"], 500, "unchanged");
    assert_eq!(config["report_ttl_ms"], 30_000, "unchanged");
    let human = cluster.ctl(&["log", "config"]);
    assert!(
        human.ok && human.stdout.contains("--watermark") && human.stdout.contains("500"),
        "{}",
        human.stdout
    );
    assert_fails(
        &cluster.ctl(&["log", "config", "set", "--min-serving-permille", "2000"]),
        "min_serving_permille",
    );
    assert_fails(&cluster.ctl(&["log", "config", "set"]), "nothing to change");
    assert_eq!(
        cluster.ctl_json(&["log", "config"])["min_serving_permille"],
        500,
        "a refused change changes nothing"
    );

    // freeze: submissions are refused, reads still served; unfreeze: accepted again.
    let frozen = cluster.ctl(&["log", "freeze"]);
    assert!(
        frozen.ok && frozen.stdout.contains("frozen"),
        "{} {}",
        frozen.stdout,
        frozen.stderr
    );
    assert_eq!(cluster.ctl_json(&["log", "status"])["frozen"], true);
    let second = second_file.to_str().expect("UTF-8");
    assert_fails(&cluster.ctl(&["log", "add-chain", second]), "frozen");
    assert_eq!(cluster.ctl_json(&["log", "sth"])["tree_size"], 1);
    let unfrozen = cluster.ctl(&["log", "unfreeze"]);
    assert!(unfrozen.ok, "{}", unfrozen.stderr);
    assert_eq!(cluster.ctl_json(&["log", "status"])["frozen"], false);
    let added = cluster.ctl(&["log", "add-chain", second]);
    assert!(added.ok, "add-chain after unfreeze: {}", added.stderr);
    let response: AddChainResponse = serde_json::from_str(&added.stdout).expect("JSON");
    verifier
        .verify_sct(
            &SignedCertificateTimestamp::try_from(&response).expect("an SCT"),
            &LogEntry::X509 {
                certificate: second_der,
            },
        )
        .expect("the second SCT verifies");
    cluster.ctl_json_until(&["log", "status"], "two entries sequenced", |status| {
        status["next_sequence"] == 2
    });
}

#[test]
fn a_cluster_that_does_not_answer_is_an_error() {
    let endpoint = free_addr().to_string();
    let run = run(Command::new(binary()).args([
        "ctl",
        "--endpoints",
        &endpoint,
        "log",
        "status",
        "--endpoint",
        &endpoint,
    ]));
    assert_fails(&run, "log status");
    assert!(run.stderr.contains("unavailable"), "{}", run.stderr);
}
