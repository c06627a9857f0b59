//! `certus ctl log`: the clustered CT log — its status, serving STH, configuration, freezing,
//! submitting a chain, and the accepted roots.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certus_client::{
    Client, ClientError, LogConfig, LogStatus, MirrorStatus, NodeReport, SignedTreeHead,
};
use certus_ct::Hash;
use certus_ct::signer::LogVerifier;
use certus_ct::structures::SignedCertificateTimestamp;
use certus_ct::structures::json::{AddChainResponse, GetRootsResponse, GetSthResponse};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use x509_cert::der::Decode as _;

use super::Output;
use super::settings::{self, Changes, ConfigCommand, Setting, Settings, config_json};
use super::show::{human_ms, now_ms, table, table_of, yes_no};

/// The CT log.
#[derive(Debug, Subcommand)]
pub(super) enum LogCommand {
    /// The log as the cluster sees it: serving STH, sequencing backlog, frozen, every node's
    /// report, and the local tree of the node that answers.
    Status {
        /// Ask this node (host:port) for its view and local tree; default: any endpoint.
        #[arg(long)]
        endpoint: Option<String>,
    },
    /// The serving signed tree head (RFC 6962 get-sth; `--json` prints get-sth's JSON).
    Sth,
    /// The log's cluster-wide configuration, or change it.
    Config {
        #[command(subcommand)]
        command: Option<ConfigCommand<ConfigChanges>>,
    },
    /// Stop accepting new entries; STHs and reads are still served.
    Freeze,
    /// Accept new entries again.
    Unfreeze,
    /// Submit a PEM chain (leaf or precertificate first, then its issuers) and print the SCT as
    /// RFC 6962 add-chain JSON.
    AddChain {
        /// A PEM file of CERTIFICATE blocks, leaf first.
        file: PathBuf,
        /// The first certificate is a precertificate (add-pre-chain).
        #[arg(long)]
        precert: bool,
    },
    /// The root certificates the log accepts chains up to.
    Roots,
    /// Make this empty log a mirror of another RFC 6962 log, for good: the cluster follows the
    /// source, checks every entry against the source's signed tree heads, and serves them. Run
    /// again with a new URL (same key) if the source moves.
    Mirror {
        /// The source's base URL (http:// or https://); its API is under <URL>/ct/v1/.
        #[arg(long)]
        source: String,
        /// The source log's public key: a PEM "PUBLIC KEY" file or DER SubjectPublicKeyInfo.
        #[arg(long)]
        public_key: PathBuf,
    },
}

/// The fields `log config set` may change; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args)]
pub(super) struct ConfigChanges {
    /// Publish an STH only when at least this many nodes hold its tree.
    #[arg(long)]
    min_serving_nodes: Option<u32>,
    /// … and at least this share of the members, in thousandths (750 = 75 %).
    #[arg(long)]
    min_serving_permille: Option<u32>,
    /// Refuse submissions while this many entries await sequencing (back-pressure).
    #[arg(long)]
    watermark: Option<u64>,
    /// Sequence an entry only once its SCT timestamp is this far behind the cluster's clock.
    #[arg(long)]
    guard_window_ms: Option<u64>,
    /// How often each node integrates new entries and signs a node STH.
    #[arg(long)]
    signing_interval_ms: Option<u64>,
    /// How often the master sequences.
    #[arg(long)]
    sequencing_interval_ms: Option<u64>,
    /// A node report older than this does not count towards publishing.
    #[arg(long)]
    report_ttl_ms: Option<u64>,
    /// Cleaned-up entries the replicated state remembers for deduplication (older duplicates
    /// are found in each node's local index; a node whose tree lags further refuses
    /// submissions until it catches up). About 120 bytes of memory per entry on every node.
    #[arg(long)]
    dedupe_window: Option<u64>,
}

impl Changes for ConfigChanges {
    type Config = LogConfig;

    fn changed(&self, config: &LogConfig) -> LogConfig {
        LogConfig {
            min_serving_nodes: self.min_serving_nodes.unwrap_or(config.min_serving_nodes),
            min_serving_permille: self
                .min_serving_permille
                .unwrap_or(config.min_serving_permille),
            unsequenced_watermark: self.watermark.unwrap_or(config.unsequenced_watermark),
            guard_window_ms: self.guard_window_ms.unwrap_or(config.guard_window_ms),
            signing_interval_ms: self
                .signing_interval_ms
                .unwrap_or(config.signing_interval_ms),
            sequencing_interval_ms: self
                .sequencing_interval_ms
                .unwrap_or(config.sequencing_interval_ms),
            report_ttl_ms: self.report_ttl_ms.unwrap_or(config.report_ttl_ms),
            dedupe_window_entries: self.dedupe_window.or(config.dedupe_window_entries),
        }
    }
}

impl Settings for LogConfig {
    const COMMAND: &'static str = "log";
    const WHOSE: &'static str = "The log's";
    const DURATIONS_SHOWN: bool = false;

    fn settings(&self) -> Vec<Setting> {
        vec![
            Setting::new("min_serving_nodes", self.min_serving_nodes, ""),
            Setting::new(
                "min_serving_permille",
                self.min_serving_permille,
                "‰ of members",
            ),
            Setting::new(
                "unsequenced_watermark",
                self.unsequenced_watermark,
                "entries",
            )
            .flag("--watermark"),
            Setting::new("guard_window_ms", self.guard_window_ms, "ms"),
            Setting::new("signing_interval_ms", self.signing_interval_ms, "ms"),
            Setting::new("sequencing_interval_ms", self.sequencing_interval_ms, "ms"),
            Setting::new("report_ttl_ms", self.report_ttl_ms, "ms"),
        ]
        .into_iter()
        .chain(self.dedupe_window_entries.map(|entries| {
            Setting::new("dedupe_window_entries", entries, "entries").flag("--dedupe-window")
        }))
        .collect()
    }
}

/// Runs `certus ctl log …`.
pub(super) async fn run(client: &Client, out: &Output, command: LogCommand) -> Result<(), String> {
    match command {
        LogCommand::Status { endpoint } => {
            let status = match &endpoint {
                Some(endpoint) => client.log_status_of(endpoint).await,
                None => client.log_status().await,
            }
            .map_err(|error| failed("log status", &error))?;
            print_status(out, &status);
        }
        LogCommand::Sth => {
            let sth = client
                .get_sth()
                .await
                .map_err(|error| failed("log sth", &error))?;
            print_sth(out, &sth)?;
        }
        LogCommand::Config { command } => {
            let current = current_config(client).await?;
            settings::run(out, command, current, |wanted| async move {
                client
                    .set_log_config(wanted)
                    .await
                    .map_err(|error| failed("log config set", &error))
            })
            .await?;
        }
        LogCommand::Freeze | LogCommand::Unfreeze => {
            let frozen = matches!(command, LogCommand::Freeze);
            let what = if frozen { "log freeze" } else { "log unfreeze" };
            let status = client
                .set_frozen(frozen)
                .await
                .map_err(|error| failed(what, &error))?;
            out.emit(&json!({ "frozen": status.frozen }), || {
                if status.frozen {
                    say!("The log is frozen: new submissions are refused; STHs and reads are still served.");
                } else {
                    say!("The log accepts new submissions.");
                }
            });
            if status.frozen != frozen {
                return Err(format!(
                    "{what}: the node answered frozen = {}",
                    status.frozen
                ));
            }
        }
        LogCommand::AddChain { file, precert } => {
            let chain = read_chain(&file)?;
            let what = format!("log add-chain {}", file.display());
            let reply = client
                .add_chain(chain, precert)
                .await
                .map_err(|error| failed(&what, &error))?;
            let sct = SignedCertificateTimestamp::decode(&reply.sct)
                .map_err(|error| format!("{what}: the node's SCT does not decode: {error}"))?;
            if sct.log_id.as_slice() != reply.log_id.as_slice()
                || sct.timestamp_ms != reply.timestamp_ms
            {
                return Err(format!(
                    "{what}: the node's reply disagrees with its own SCT encoding"
                ));
            }
            let response = AddChainResponse::try_from(&sct)
                .map_err(|error| format!("{what}: the node's SCT cannot be shown: {error}"))?;
            // RFC 6962 JSON, whatever --json says: it is what CT tooling reads.
            let document = serde_json::to_value(&response).map_err(|error| error.to_string())?;
            say!("{document:#}");
        }
        LogCommand::Mirror { source, public_key } => {
            let key = read_public_key(&public_key)?;
            let status = client
                .start_mirror(&source, &key)
                .await
                .map_err(|error| failed("log mirror", &error))?;
            let mirror = status.mirror.as_ref().ok_or_else(|| {
                "log mirror: the node's status after the change shows no mirror".to_owned()
            })?;
            out.emit(&mirror_json(mirror), || {
                say!(
                    "The log now mirrors {}; its master follows the source and serves its STHs \
                     once enough nodes reproduce them (`certus ctl log status` shows progress).",
                    mirror.source_url
                );
            });
        }
        LogCommand::Roots => {
            let roots = client
                .get_roots()
                .await
                .map_err(|error| failed("log roots", &error))?
                .certificates;
            print_roots(out, &roots);
        }
    }
    Ok(())
}

/// The message of a failed log call; a node without the log says so plainly.
fn failed(what: &str, error: &ClientError) -> String {
    if error.code() == tonic::Code::Unimplemented {
        format!(
            "{what}: the node does not run a CT log (its config has no ct.key_file; `certus up` \
             runs one): {error}"
        )
    } else {
        super::failed(what, error)
    }
}

async fn current_config(client: &Client) -> Result<LogConfig, String> {
    client
        .log_status()
        .await
        .map_err(|error| failed("log config", &error))?
        .config
        .ok_or_else(|| "log config: the node's status has no configuration".to_owned())
}

// ---- the mirror's source key -------------------------------------------------------------

/// A public key file, PEM ("PUBLIC KEY") or DER, as DER SubjectPublicKeyInfo; refused unless it
/// is a key a log can sign with.
fn read_public_key(path: &Path) -> Result<Vec<u8>, String> {
    let bytes =
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let verifier = match std::str::from_utf8(&bytes) {
        Ok(text) if text.contains("-----BEGIN") => LogVerifier::from_public_key_pem(text),
        _ => LogVerifier::from_public_key_der(&bytes),
    }
    .map_err(|error| format!("{}: not a log public key: {error}", path.display()))?;
    Ok(verifier.public_key_der().to_vec())
}

// ---- the chain file --------------------------------------------------------------------

/// The DER certificates of a PEM file, in order.
fn read_chain(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    pem_certificates(&text).map_err(|error| format!("{}: {error}", path.display()))
}

const PEM_BEGIN: &str = "-----BEGIN ";
const PEM_END: &str = "-----END ";
const PEM_DASHES: &str = "-----";

/// The CERTIFICATE blocks of a PEM text, decoded, in order. Text between blocks is ignored (as
/// in CA bundles with comments); a block of another kind, an unterminated block or bad base64
/// is an error naming the block, and so is a text without any certificate.
pub(super) fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut certificates = Vec::new();
    let mut rest = text;
    let mut block = 0usize;
    while let Some(start) = rest.find(PEM_BEGIN) {
        block += 1;
        let after = &rest[start + PEM_BEGIN.len()..];
        let label_end = after
            .find(PEM_DASHES)
            .ok_or_else(|| format!("PEM block {block}: its BEGIN line does not end in -----"))?;
        let label = &after[..label_end];
        if label != "CERTIFICATE" {
            return Err(format!(
                "PEM block {block} is a {label:?}; expected only CERTIFICATE blocks, leaf first"
            ));
        }
        let body_and_rest = &after[label_end + PEM_DASHES.len()..];
        let end_marker = format!("{PEM_END}{label}{PEM_DASHES}");
        let body_end = body_and_rest
            .find(&end_marker)
            .ok_or_else(|| format!("PEM block {block} has no {end_marker} line"))?;
        let body: String = body_and_rest[..body_end]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let der = STANDARD
            .decode(body)
            .map_err(|error| format!("PEM block {block} is not valid base64: {error}"))?;
        if der.is_empty() {
            return Err(format!("PEM block {block} is empty"));
        }
        certificates.push(der);
        rest = &body_and_rest[body_end + end_marker.len()..];
    }
    if certificates.is_empty() {
        return Err(
            "no -----BEGIN CERTIFICATE----- block; expected a PEM chain, leaf first".to_owned(),
        );
    }
    Ok(certificates)
}

// ---- output ----------------------------------------------------------------------------

fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// How long ago `ms` was by this machine's clock.
fn age(ms: u64) -> String {
    now_ms().map_or_else(
        || "?".to_owned(),
        |now| match now.checked_sub(ms) {
            Some(ago) => format!("{} ago", human_ms(ago)),
            None => "in the future".to_owned(),
        },
    )
}

fn sth_json(sth: &SignedTreeHead) -> Value {
    json!({
        "tree_size": sth.tree_size,
        "timestamp": sth.timestamp_ms,
        "sha256_root_hash": b64(&sth.sha256_root_hash),
        "tree_head_signature": b64(&sth.tree_head_signature),
    })
}

fn print_sth(out: &Output, sth: &SignedTreeHead) -> Result<(), String> {
    let root = Hash::try_from(sth.sha256_root_hash.as_slice()).map_err(|_| {
        format!(
            "log sth: the node's root hash has {} bytes, not 32",
            sth.sha256_root_hash.len()
        )
    })?;
    // get-sth's JSON, field for field.
    let response = GetSthResponse {
        tree_size: sth.tree_size,
        timestamp: sth.timestamp_ms,
        sha256_root_hash: root,
        tree_head_signature: sth.tree_head_signature.clone(),
    };
    let document = serde_json::to_value(&response).map_err(|error| error.to_string())?;
    out.emit(&document, || {
        let mut rows = table(&["field", "value"]);
        rows.add_row(vec!["tree size".to_owned(), sth.tree_size.to_string()]);
        rows.add_row(vec![
            "timestamp (ms)".to_owned(),
            format!("{} ({})", sth.timestamp_ms, age(sth.timestamp_ms)),
        ]);
        rows.add_row(vec!["root hash".to_owned(), b64(&sth.sha256_root_hash)]);
        rows.add_row(vec!["signature".to_owned(), b64(&sth.tree_head_signature)]);
        say!("{rows}");
    });
    Ok(())
}

fn report_json(report: &NodeReport) -> Value {
    json!({
        "node": report.node,
        "sth": report.sth.as_ref().map(sth_json),
        "contiguous_size": report.contiguous_size,
        "reported_at_ms": report.reported_at_ms,
    })
}

fn mirror_json(mirror: &MirrorStatus) -> Value {
    json!({
        "source_url": mirror.source_url,
        "source_public_key": b64(&mirror.source_public_key),
        "source_log_id": b64(&certus_ct::sha256(&mirror.source_public_key)),
        "latest": mirror.latest.as_ref().map(sth_json),
        "target_sizes": mirror.target_sizes,
        "source_sth": mirror.source_sth.as_ref().map(sth_json),
        "last_error": (!mirror.last_error.is_empty()).then_some(&mirror.last_error),
    })
}

fn print_status(out: &Output, status: &LogStatus) {
    let document = json!({
        "log_id": b64(&status.log_id),
        "public_key": b64(&status.public_key),
        "frozen": status.frozen,
        "serving": status.serving.as_ref().map(sth_json),
        "serving_published_at_ms": status.serving_published_at_ms,
        "next_sequence": status.next_sequence,
        "unsequenced": status.unsequenced,
        "held": status.held,
        "dedupe_forgotten_below": status.dedupe_forgotten_below,
        "local_tree_size": status.local_tree_size,
        "local_contiguous_size": status.local_contiguous_size,
        "config": status.config.as_ref().map(config_json),
        "reports": status.reports.iter().map(report_json).collect::<Vec<_>>(),
        "mirror": status.mirror.as_ref().map(mirror_json),
    });
    out.emit(&document, || {
        let mut rows = table(&["log", "value"]);
        rows.add_row(vec!["log id".to_owned(), b64(&status.log_id)]);
        rows.add_row(vec!["frozen".to_owned(), yes_no(status.frozen).to_owned()]);
        rows.add_row(vec![
            "serving STH".to_owned(),
            match &status.serving {
                Some(sth) => format!(
                    "size {}, signed {}, published {}",
                    sth.tree_size,
                    age(sth.timestamp_ms),
                    age(status.serving_published_at_ms)
                ),
                None => "none yet".to_owned(),
            },
        ]);
        rows.add_row(vec![
            "next sequence".to_owned(),
            status.next_sequence.to_string(),
        ]);
        rows.add_row(vec![
            "unsequenced (backlog)".to_owned(),
            match &status.config {
                Some(config) => format!(
                    "{} (watermark {})",
                    status.unsequenced, config.unsequenced_watermark
                ),
                None => status.unsequenced.to_string(),
            },
        ]);
        rows.add_row(vec!["held entries".to_owned(), status.held.to_string()]);
        rows.add_row(vec![
            "dedupe".to_owned(),
            format!(
                "the state forgot entries below {}; older duplicates are found in local indexes",
                status.dedupe_forgotten_below
            ),
        ]);
        if let Some(mirror) = &status.mirror {
            rows.add_row(vec!["mirror of".to_owned(), mirror.source_url.clone()]);
            rows.add_row(vec![
                "source STH recorded".to_owned(),
                match &mirror.latest {
                    Some(sth) => {
                        format!("size {}, signed {}", sth.tree_size, age(sth.timestamp_ms))
                    }
                    None => "none yet".to_owned(),
                },
            ]);
            if let Some(sth) = &mirror.source_sth {
                rows.add_row(vec![
                    "source STH seen by this node".to_owned(),
                    format!("size {}, signed {}", sth.tree_size, age(sth.timestamp_ms)),
                ]);
            }
            if !mirror.last_error.is_empty() {
                rows.add_row(vec!["mirror stalled".to_owned(), mirror.last_error.clone()]);
            }
        }
        rows.add_row(vec![
            "answering node's tree".to_owned(),
            format!(
                "size {}, {} stored contiguously",
                status.local_tree_size, status.local_contiguous_size
            ),
        ]);
        say!("{rows}");
        if status.reports.is_empty() {
            say!("No node has reported yet.");
            return;
        }
        let serving = status.serving.as_ref().map_or(0, |sth| sth.tree_size);
        let header = [
            "node",
            "tree size",
            "contiguous",
            "holds serving",
            "STH signed",
            "reported",
        ];
        let reports = table_of(&header, &status.reports, |report| {
            let size = report.sth.as_ref().map(|sth| sth.tree_size);
            vec![
                report.node.to_string(),
                size.map_or_else(|| "-".to_owned(), |size| size.to_string()),
                report.contiguous_size.to_string(),
                yes_no(size.is_some_and(|size| size >= serving)).to_owned(),
                report
                    .sth
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |sth| age(sth.timestamp_ms)),
                age(report.reported_at_ms),
            ]
        });
        say!("{reports}");
    });
}

/// A certificate's subject, or why it cannot be shown.
fn subject(der: &[u8]) -> String {
    match x509_cert::Certificate::from_der(der) {
        Ok(certificate) => certificate.tbs_certificate.subject.to_string(),
        Err(error) => format!("(does not parse: {error})"),
    }
}

fn print_roots(out: &Output, roots: &[Vec<u8>]) {
    let document = serde_json::to_value(GetRootsResponse {
        certificates: roots.to_vec(),
    })
    .unwrap_or(Value::Null);
    out.emit(&document, || {
        if roots.is_empty() {
            say!(
                "No accepted roots: the log accepts no chain (start the nodes with ct.roots_file, \
                 or `certus up --ct-roots FILE`)."
            );
            return;
        }
        let rows = table_of(
            &["#", "subject", "SHA-256 fingerprint"],
            roots.iter().enumerate(),
            |(index, der)| {
                vec![
                    index.to_string(),
                    subject(der),
                    certus_ct::sha256(der)
                        .iter()
                        .map(|byte| format!("{byte:02x}"))
                        .collect::<String>(),
                ]
            },
        );
        say!("{rows}");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem(label: &str, der: &[u8]) -> String {
        let body = STANDARD.encode(der);
        let lines: Vec<&str> = body
            .as_bytes()
            .chunks(64)
            .map(|chunk| std::str::from_utf8(chunk).expect("base64 is ASCII"))
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    #[test]
    fn a_pem_chain_keeps_its_order_and_ignores_text_between_blocks() {
        let leaf = vec![1_u8; 100];
        let issuer = vec![2_u8; 70];
        let text = format!(
            "# leaf\n{}\nsubject=issuer\r\n{}",
            pem("CERTIFICATE", &leaf),
            pem("CERTIFICATE", &issuer).replace('\n', "\r\n")
        );
        assert_eq!(pem_certificates(&text), Ok(vec![leaf, issuer]));
    }

    #[test]
    fn bad_pem_is_refused_with_the_block_named() {
        let cert = pem("CERTIFICATE", &[3_u8; 40]);
        for (text, expected) in [
            (String::new(), "no -----BEGIN CERTIFICATE-----"),
            (
                "just some text".to_owned(),
                "no -----BEGIN CERTIFICATE-----",
            ),
            (
                format!("{cert}{}", pem("PRIVATE KEY", &[4_u8; 30])),
                "PEM block 2 is a \"PRIVATE KEY\"",
            ),
            (
                "-----BEGIN CERTIFICATE-----\nAAAA\n".to_owned(),
                "PEM block 1 has no -----END CERTIFICATE-----",
            ),
            (
                "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_owned(),
                "PEM block 1 is not valid base64",
            ),
            (
                "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n".to_owned(),
                "PEM block 1 is empty",
            ),
        ] {
            let error = pem_certificates(&text).expect_err(&text);
            assert!(error.contains(expected), "{text:?} gave {error:?}");
        }
    }

    #[test]
    fn a_missing_chain_file_is_named() {
        let error = read_chain(Path::new("/nonexistent/chain.pem")).expect_err("missing");
        assert!(
            error.contains("cannot read /nonexistent/chain.pem"),
            "{error}"
        );
    }

    #[test]
    fn a_node_without_the_log_is_reported_plainly() {
        let error = ClientError::Refused {
            code: tonic::Code::Unimplemented,
            reason: String::new(),
            message: "Operation is not implemented or not supported".to_owned(),
        };
        let message = failed("log status", &error);
        assert!(
            message.starts_with("log status: the node does not run a CT log"),
            "{message}"
        );
        assert!(message.contains("ct.key_file"), "{message}");
        let other = ClientError::Refused {
            code: tonic::Code::InvalidArgument,
            reason: "invalid-config".to_owned(),
            message: "log config guard_window_ms: 9 is outside 0..=1".to_owned(),
        };
        assert_eq!(
            failed("log config set", &other),
            "log config set: refused (invalid-config): log config guard_window_ms: 9 is outside 0..=1"
        );
    }
}
