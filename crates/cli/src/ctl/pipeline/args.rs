//! The arguments of `certus ctl pipeline`: its subcommands, their flags, and the JSON documents
//! they take (text, or a file to read when the command runs).

use std::path::PathBuf;

use certus_client::{PipelineConfig, QueueType, TxStatus};
use certus_proto::v1::ArchiveCursor;
use clap::{Args, Subcommand, ValueEnum};

use super::export::parse_cursor;
use crate::ctl::settings::{Changes, ConfigCommand};
use crate::limits::{PIPELINE_EXPORT_LIMIT_MAX, PIPELINE_WORKER_CREDIT_MAX};

/// Transaction pipelines.
#[derive(Debug, Subcommand)]
pub(in crate::ctl) enum PipelineCommand {
    /// Define a pipeline (a name for a node group), or move it to another node group.
    Define {
        /// The pipeline's name.
        name: String,
        /// The node group whose workers run it.
        #[arg(long, value_name = "GROUP")]
        node_group: String,
    },
    /// Delete a pipeline (refused while transactions routed by it are in play).
    Delete {
        /// The pipeline's name.
        name: String,
    },
    /// Pipelines in name order (every page, unless --limit is given).
    List {
        /// Start after this name.
        #[arg(long, value_name = "NAME")]
        after: Option<String>,
        /// Show at most this many.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
    /// Create a transaction and queue it; prints its id (with --json, also whether it is a
    /// duplicate of an earlier enqueue with the same external id).
    Enqueue(EnqueueArgs),
    /// One transaction; with --wait, a long-poll that answers once it finishes or its worker
    /// reports progress (or the time runs out).
    Get(GetArgs),
    /// Cancel a transaction: queued or sleeping, it is aborted at once; running, its worker is
    /// asked to complete it as aborted.
    Cancel {
        /// The transaction id.
        id: u64,
    },
    /// Take up to --max queued transactions of a node group (admin, then out, then in) as a
    /// worker; they share one claim token.
    Dequeue(DequeueArgs),
    /// Run a command for each transaction of a node group, as a worker on a Work stream: the
    /// state on stdin, CERTUS_TRANSACTION_ID, CERTUS_CLAIM_TOKEN, CERTUS_NODE_GROUP,
    /// CERTUS_PIPELINE, CERTUS_EVENT, CERTUS_ATTEMPT and CERTUS_WORKER in the environment. Exit
    /// status 0 completes it as success, with stdout (JSON) as its new state (none: keep it);
    /// another exit status as failed, a signal or stdout that is not JSON as internal-error,
    /// with the stderr's tail in the state's worker_error. Until Ctrl-C.
    Worker(WorkerArgs),
    /// Finish a running transaction with a terminal status.
    Complete(CompleteArgs),
    /// Report a running transaction's progress (a sign of life that moves its deadline).
    Progress(ProgressArgs),
    /// Hand a running transaction on to a queue, of its node group or of another.
    Requeue(RequeueArgs),
    /// Put a running transaction to sleep until a time (at most a day ahead) or until a switch
    /// changes, whichever comes first; it then goes back to --queue.
    Sleep(SleepArgs),
    /// Named switches sleepers wait on.
    Switch {
        #[command(subcommand)]
        command: SwitchCommand,
    },
    /// Print the completions (and with --progress the progress reports) of a node group, or of
    /// every group, one line each as they happen (JSON lines with --json), until Ctrl-C.
    Watch(WatchArgs),
    /// The transactions in play (queued, running, sleeping) of a node group, or of every busy
    /// group, in id order.
    InPlay {
        /// Only this node group.
        #[arg(long, value_name = "GROUP")]
        node_group: Option<String>,
        /// Show at most this many.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
    /// Transactions running for a while, longest first (the reaper takes them back at their
    /// deadline).
    Stuck {
        /// Running for at least this long.
        #[arg(long, value_name = "MS", default_value_t = 60_000)]
        min_running_ms: u64,
        /// Show at most this many (default: the node's page, 1000).
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
    /// Queue depths per node group, counts per status, webhooks pending, the configuration.
    Status {
        /// Only this node group (shown even when idle).
        #[arg(long, value_name = "GROUP")]
        node_group: Option<String>,
    },
    /// Administrator notices (webhooks given up, URLs paused, deliveries dropped), or drop
    /// the ones read.
    Notices {
        /// Drop the notices up to and including this id instead of listing them.
        #[arg(long, value_name = "ID")]
        ack: Option<u64>,
    },
    /// Write the archive (finished transactions kept for the retention period) as JSON lines,
    /// one archived transaction each in archive order, for external systems; print on stderr
    /// the cursor to resume from (each line carries its own, too).
    Export(ExportArgs),
    /// The pipelines' cluster-wide configuration, or change it.
    Config {
        #[command(subcommand)]
        command: Option<ConfigCommand<ConfigChanges>>,
    },
}

/// Arguments of `pipeline enqueue`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct EnqueueArgs {
    #[command(flatten)]
    pub(super) route: Route,
    /// The queue of the node group.
    #[arg(long, value_enum, default_value_t = Queue::In)]
    pub(super) queue: Queue,
    /// Its initial state: JSON, or @FILE (@- reads stdin).
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) state: Document,
    /// What the first worker is to do: JSON, or @FILE (@- reads stdin).
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) event: Option<Document>,
    /// The producer's id for it: enqueuing it again within the window answers the first
    /// transaction (and the call is retried safely after a lost answer).
    #[arg(long, value_name = "ID")]
    pub(super) external_id: Option<String>,
    /// Who it belongs to.
    #[arg(long, value_name = "OWNER", default_value = "certus-ctl")]
    pub(super) owner: String,
    /// Where webhook events go (http:// or https://).
    #[arg(long, value_name = "URL")]
    pub(super) webhook: Option<String>,
    /// Send progress reports by webhook too.
    #[arg(long)]
    pub(super) progress_reports: bool,
    /// A `get --mark-replied` that answers the finished transaction cancels its webhook.
    #[arg(long)]
    pub(super) cancel_webhook_on_longpoll: bool,
}

/// Arguments of `pipeline get`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct GetArgs {
    /// The transaction id.
    #[arg(
        required_unless_present = "external_id",
        conflicts_with = "external_id"
    )]
    pub(super) id: Option<u64>,
    /// Look it up by the producer's external id instead (within its window).
    #[arg(long, value_name = "ID")]
    pub(super) external_id: Option<String>,
    /// Wait up to this many seconds for it to finish or report progress.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub(super) wait: u64,
    /// Wait for notifications numbered after this one (a previous answer's
    /// notification_seq); default: after the latest when the call arrives.
    #[arg(long, value_name = "SEQ")]
    pub(super) after_seq: Option<u64>,
    /// Record the answer as the producer's long-poll reply (may cancel its webhook).
    #[arg(long)]
    pub(super) mark_replied: bool,
}

/// Arguments of `pipeline dequeue`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct DequeueArgs {
    /// The node group.
    #[arg(long, value_name = "GROUP")]
    pub(super) node_group: String,
    /// Who takes them.
    #[arg(long, value_name = "NAME")]
    pub(super) worker: String,
    /// The most to take, 1 to 100.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(super) max: u32,
}

/// Arguments of `pipeline worker`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct WorkerArgs {
    /// The node group whose transactions it takes.
    #[arg(long, value_name = "GROUP")]
    pub(super) node_group: String,
    /// Who takes them.
    #[arg(long, value_name = "NAME")]
    pub(super) worker: String,
    /// How many commands run at once (the stream's credit), 1 to 1024.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(PIPELINE_WORKER_CREDIT_MAX)))]
    pub(super) credit: u32,
    /// The command and its arguments, after `--`; run as given, not by a shell (for shell
    /// syntax: -- sh -c 'SCRIPT').
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(super) command: Vec<String>,
}

/// A running transaction, as its worker names it: its id and the claim token the dequeue gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Args)]
pub(in crate::ctl) struct Claim {
    /// The transaction id.
    pub(super) id: u64,
    /// The claim token the dequeue gave.
    #[arg(long, value_name = "TOKEN")]
    pub(super) token: u64,
}

/// Arguments of `pipeline complete`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct CompleteArgs {
    #[command(flatten)]
    pub(super) claim: Claim,
    /// How it ended.
    #[arg(long, value_enum)]
    pub(super) status: Terminal,
    /// Its final state: JSON, or @FILE (@- reads stdin); default: keep the current one.
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) state: Option<Document>,
}

/// Arguments of `pipeline progress`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct ProgressArgs {
    #[command(flatten)]
    pub(super) claim: Claim,
    /// The report: JSON, or @FILE (@- reads stdin).
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) report: Document,
}

/// Arguments of `pipeline requeue`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct RequeueArgs {
    #[command(flatten)]
    pub(super) claim: Claim,
    #[command(flatten)]
    pub(super) route: NewRoute,
    /// The queue it goes to.
    #[arg(long, value_enum)]
    pub(super) queue: Queue,
    /// Its new state: JSON, or @FILE (@- reads stdin); default: keep it.
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) state: Option<Document>,
    /// Its next event: JSON, or @FILE (@- reads stdin).
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) event: Option<Document>,
}

/// Arguments of `pipeline sleep`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct SleepArgs {
    #[command(flatten)]
    pub(super) claim: Claim,
    #[command(flatten)]
    pub(super) wake: Wake,
    /// A switch whose change wakes it earlier.
    #[arg(long, value_name = "NAME")]
    pub(super) switch: Option<String>,
    /// The queue it goes to when woken.
    #[arg(long, value_enum)]
    pub(super) queue: Queue,
    /// Its new state: JSON, or @FILE (@- reads stdin); default: keep it.
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    pub(super) state: Option<Document>,
}

/// Arguments of `pipeline watch`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct WatchArgs {
    /// Only this node group.
    #[arg(long, value_name = "GROUP")]
    pub(super) node_group: Option<String>,
    /// Resume after this notification number (0: from the oldest kept); default: only
    /// what happens from now on.
    #[arg(long, value_name = "SEQ")]
    pub(super) after: Option<u64>,
    /// Progress reports too, not only completions.
    #[arg(long)]
    pub(super) progress: bool,
    /// Stop after this many notifications.
    #[arg(long, value_name = "N")]
    pub(super) count: Option<u64>,
}

/// Arguments of `pipeline export`.
#[derive(Debug, Args)]
pub(in crate::ctl) struct ExportArgs {
    /// Resume after this cursor (ARCHIVED_AT_MS:ID, as an earlier export printed; TIME_MS:0
    /// starts at a time); default: from the oldest archived transaction kept.
    #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
    pub(super) after: Option<ArchiveCursor>,
    /// Write at most this many (default and most: 1 000 000).
    #[arg(long, value_name = "N", default_value_t = PIPELINE_EXPORT_LIMIT_MAX,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(PIPELINE_EXPORT_LIMIT_MAX)))]
    pub(super) limit: u32,
    /// Where the lines go: a file (created, or replaced) or - for stdout.
    #[arg(long, value_name = "FILE|-", default_value = "-")]
    pub(super) output: PathBuf,
}

/// Where an enqueue goes: a pipeline or a node group.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[group(required = true, multiple = false)]
pub(in crate::ctl) struct Route {
    /// To the node group of this pipeline.
    #[arg(long, value_name = "NAME")]
    pub(super) pipeline: Option<String>,
    /// To this node group directly.
    #[arg(long, value_name = "GROUP")]
    pub(super) node_group: Option<String>,
}

/// Where a requeue goes: a pipeline, a node group, or (neither) the same node group.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[group(required = false, multiple = false)]
pub(in crate::ctl) struct NewRoute {
    /// To the node group of this pipeline.
    #[arg(long, value_name = "NAME")]
    pub(super) pipeline: Option<String>,
    /// To this node group; default: the same node group.
    #[arg(long, value_name = "GROUP")]
    pub(super) node_group: Option<String>,
}

/// When a sleeper wakes: a time or a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Args)]
#[group(required = true, multiple = false)]
pub(in crate::ctl) struct Wake {
    /// At this time (cluster clock, ms since the Unix epoch).
    #[arg(long, value_name = "MS")]
    pub(super) until_ms: Option<u64>,
    /// This long from now.
    #[arg(long, value_name = "MS")]
    pub(super) for_ms: Option<u64>,
}

/// One of a node group's queues, in dequeue priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(in crate::ctl) enum Queue {
    /// Administrative events: served first.
    Admin,
    /// Events that end a pipeline: served second.
    Out,
    /// Events that start a pipeline: served last.
    In,
}

impl From<Queue> for QueueType {
    fn from(queue: Queue) -> QueueType {
        match queue {
            Queue::Admin => QueueType::Admin,
            Queue::Out => QueueType::Out,
            Queue::In => QueueType::In,
        }
    }
}

/// A terminal status for `pipeline complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(in crate::ctl) enum Terminal {
    Success,
    Failed,
    Aborted,
    Timeout,
    InternalError,
}

impl From<Terminal> for TxStatus {
    fn from(status: Terminal) -> TxStatus {
        match status {
            Terminal::Success => TxStatus::Success,
            Terminal::Failed => TxStatus::Failed,
            Terminal::Aborted => TxStatus::Aborted,
            Terminal::Timeout => TxStatus::Timeout,
            Terminal::InternalError => TxStatus::InternalError,
        }
    }
}

/// A JSON document argument: the text itself, or a file to read it from (`@FILE`; `@-` is
/// stdin). Read when the command runs, checked to be JSON before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::ctl) enum Document {
    Inline(String),
    File(PathBuf),
    Stdin,
}

/// `--state` and friends: `@FILE`, `@-`, or JSON text (checked here, so a typo is named by the
/// parser).
fn parse_document(text: &str) -> Result<Document, String> {
    match text.strip_prefix('@') {
        Some("") => Err("give a file after @ (or @- for stdin)".to_owned()),
        Some("-") => Ok(Document::Stdin),
        Some(path) => Ok(Document::File(PathBuf::from(path))),
        None => {
            check_json(text)?;
            Ok(Document::Inline(text.to_owned()))
        }
    }
}

fn check_json(text: &str) -> Result<(), String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|error| format!("not JSON: {error}"))
}

impl Document {
    /// The JSON text; `flag` names the argument in errors.
    pub(super) fn read(&self, flag: &str) -> Result<String, String> {
        let (text, from) = match self {
            Document::Inline(text) => return Ok(text.clone()),
            Document::File(path) => (
                std::fs::read_to_string(path)
                    .map_err(|error| format!("{flag}: cannot read {}: {error}", path.display()))?,
                path.display().to_string(),
            ),
            Document::Stdin => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                    .map_err(|error| format!("{flag}: cannot read stdin: {error}"))?;
                (text, "stdin".to_owned())
            }
        };
        // A file usually ends with a newline; the document is what is before it.
        let text = text.trim_end_matches(['\n', '\r']).to_owned();
        check_json(&text).map_err(|error| format!("{flag} ({from}): {error}"))?;
        Ok(text)
    }
}

pub(super) fn read_optional(document: Option<&Document>, flag: &str) -> Result<String, String> {
    document.map_or_else(|| Ok(String::new()), |document| document.read(flag))
}

#[derive(Debug, Subcommand)]
pub(in crate::ctl) enum SwitchCommand {
    /// Set a switch; a change wakes every transaction sleeping on it.
    Set {
        /// The switch's name.
        name: String,
        /// Its new value.
        value: u64,
    },
    /// A switch's value (0 until set).
    Get {
        /// The switch's name.
        name: String,
    },
}

/// The fields `pipeline config set` may change; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args)]
pub(in crate::ctl) struct ConfigChanges {
    /// How long an external id stays taken.
    #[arg(long)]
    external_id_window_ms: Option<u64>,
    /// A running transaction without a sign of life this long is reaped.
    #[arg(long)]
    running_timeout_ms: Option<u64>,
    /// Hand-outs of one event before the reaper gives up with timeout.
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Finished to archived.
    #[arg(long)]
    archive_delay_ms: Option<u64>,
    /// Archived to deleted.
    #[arg(long)]
    archive_retention_ms: Option<u64>,
    /// Stored transactions; enqueues beyond are refused.
    #[arg(long)]
    transactions_max: Option<u64>,
    /// Webhook backoff after the first failed attempt.
    #[arg(long)]
    webhook_backoff_base_ms: Option<u64>,
    /// The longest webhook backoff.
    #[arg(long)]
    webhook_backoff_cap_ms: Option<u64>,
    /// Attempts before a webhook delivery is given up.
    #[arg(long)]
    webhook_attempts_max: Option<u32>,
    /// Failures of one URL within the window that pause it.
    #[arg(long)]
    url_failure_limit: Option<u32>,
    /// The window of --url-failure-limit.
    #[arg(long)]
    url_failure_window_ms: Option<u64>,
    /// How long a URL stays paused.
    #[arg(long)]
    url_pause_ms: Option<u64>,
}

impl Changes for ConfigChanges {
    type Config = PipelineConfig;

    fn changed(&self, config: &PipelineConfig) -> PipelineConfig {
        PipelineConfig {
            external_id_window_ms: self
                .external_id_window_ms
                .unwrap_or(config.external_id_window_ms),
            running_timeout_ms: self.running_timeout_ms.unwrap_or(config.running_timeout_ms),
            max_attempts: self.max_attempts.unwrap_or(config.max_attempts),
            archive_delay_ms: self.archive_delay_ms.unwrap_or(config.archive_delay_ms),
            archive_retention_ms: self
                .archive_retention_ms
                .unwrap_or(config.archive_retention_ms),
            transactions_max: self.transactions_max.unwrap_or(config.transactions_max),
            webhook_backoff_base_ms: self
                .webhook_backoff_base_ms
                .unwrap_or(config.webhook_backoff_base_ms),
            webhook_backoff_cap_ms: self
                .webhook_backoff_cap_ms
                .unwrap_or(config.webhook_backoff_cap_ms),
            webhook_attempts_max: self
                .webhook_attempts_max
                .unwrap_or(config.webhook_attempts_max),
            url_failure_limit: self.url_failure_limit.unwrap_or(config.url_failure_limit),
            url_failure_window_ms: self
                .url_failure_window_ms
                .unwrap_or(config.url_failure_window_ms),
            url_pause_ms: self.url_pause_ms.unwrap_or(config.url_pause_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::ctl::pipeline::testing::{parse, parse_ctl, parse_error};

    #[test]
    fn every_pipeline_subcommand_parses() {
        for args in [
            &["define", "checkout", "--node-group", "payments"][..],
            &["delete", "checkout"],
            &["list"],
            &["list", "--after", "a", "--limit", "10"],
            &["enqueue", "--pipeline", "checkout", "--state", "{}"],
            &[
                "enqueue",
                "--node-group",
                "payments",
                "--queue",
                "admin",
                "--state",
                "@state.json",
                "--event",
                r#"{"step":1}"#,
                "--external-id",
                "order-1",
                "--owner",
                "shop",
                "--webhook",
                "https://example.com/hook",
                "--progress-reports",
                "--cancel-webhook-on-longpoll",
            ],
            &["get", "17"],
            &[
                "get",
                "17",
                "--wait",
                "30",
                "--after-seq",
                "4",
                "--mark-replied",
            ],
            &["get", "--external-id", "order-1"],
            &["export"],
            &[
                "export",
                "--after",
                "1700000000000:42",
                "--limit",
                "1000000",
                "--output",
                "archive.jsonl",
            ],
            &["cancel", "17"],
            &["dequeue", "--node-group", "payments", "--worker", "w-1"],
            &[
                "dequeue",
                "--node-group",
                "payments",
                "--worker",
                "w-1",
                "--max",
                "100",
            ],
            &[
                "worker",
                "--node-group",
                "payments",
                "--worker",
                "w-1",
                "--credit",
                "8",
                "--",
                "jq",
                ".paid = true",
            ],
            &["complete", "17", "--token", "20", "--status", "success"],
            &[
                "complete",
                "17",
                "--token",
                "20",
                "--status",
                "internal-error",
                "--state",
                "@-",
            ],
            &[
                "progress",
                "17",
                "--token",
                "20",
                "--report",
                r#"{"done":1}"#,
            ],
            &["requeue", "17", "--token", "20", "--queue", "out"],
            &[
                "requeue",
                "17",
                "--token",
                "20",
                "--pipeline",
                "refunds",
                "--queue",
                "in",
                "--state",
                "{}",
                "--event",
                "[]",
            ],
            &[
                "requeue",
                "17",
                "--token",
                "20",
                "--node-group",
                "g",
                "--queue",
                "admin",
            ],
            &[
                "sleep", "17", "--token", "20", "--for-ms", "5000", "--queue", "in",
            ],
            &[
                "sleep",
                "17",
                "--token",
                "20",
                "--until-ms",
                "99",
                "--switch",
                "bank-open",
                "--queue",
                "out",
                "--state",
                "{}",
            ],
            &["switch", "set", "bank-open", "1"],
            &["switch", "get", "bank-open"],
            &["watch"],
            &[
                "watch",
                "--node-group",
                "payments",
                "--after",
                "0",
                "--progress",
                "--count",
                "3",
            ],
            &["in-play"],
            &["in-play", "--node-group", "payments", "--limit", "5"],
            &["stuck"],
            &["stuck", "--min-running-ms", "0", "--limit", "3"],
            &["status"],
            &["status", "--node-group", "payments"],
            &["notices"],
            &["notices", "--ack", "12"],
            &["config"],
            &[
                "config",
                "set",
                "--max-attempts",
                "5",
                "--url-pause-ms",
                "1000",
            ],
        ] {
            parse(args);
        }
    }

    #[test]
    fn pipeline_is_a_ctl_subcommand() {
        let args = parse_ctl(&["pipeline", "cancel", "5", "--json"]);
        assert!(args.json);
        assert!(matches!(
            args.command,
            crate::ctl::CtlCommand::Pipeline {
                command: PipelineCommand::Cancel { id: 5 }
            }
        ));
    }

    #[test]
    fn get_takes_an_id_or_an_external_id() {
        let PipelineCommand::Get(GetArgs {
            id,
            external_id,
            wait,
            after_seq,
            mark_replied,
        }) = parse(&["get", "7"])
        else {
            panic!("get");
        };
        assert_eq!(
            (id, external_id, wait, after_seq, mark_replied),
            (Some(7), None, 0, None, false)
        );
        let PipelineCommand::Get(GetArgs {
            id, external_id, ..
        }) = parse(&["get", "--external-id", "order-1"])
        else {
            panic!("get");
        };
        assert_eq!((id, external_id.as_deref()), (None, Some("order-1")));
        let error = parse_error(&["get"]);
        assert!(error.contains("<ID>"), "{error}");
        let error = parse_error(&["get", "7", "--external-id", "x"]);
        assert!(error.contains("cannot be used with"), "{error}");
        let error = parse_error(&["get", "7", "--wait", "soon"]);
        assert!(error.contains("--wait"), "{error}");
    }

    #[test]
    fn worker_takes_a_credit_and_the_command_after_two_dashes() {
        let PipelineCommand::Worker(WorkerArgs {
            node_group,
            worker,
            credit,
            command,
        }) = parse(&[
            "worker",
            "--node-group",
            "g",
            "--worker",
            "w",
            "--",
            "sh",
            "-c",
            "jq '.n += 1' --credit 5",
        ])
        else {
            panic!("worker");
        };
        assert_eq!((node_group.as_str(), worker.as_str()), ("g", "w"));
        assert_eq!(credit, 1, "one at a time by default");
        assert_eq!(
            command,
            ["sh", "-c", "jq '.n += 1' --credit 5"],
            "everything after -- is the command's, flags included"
        );
        let PipelineCommand::Worker(WorkerArgs { credit, .. }) = parse(&[
            "worker",
            "--node-group",
            "g",
            "--worker",
            "w",
            "--credit",
            "1024",
            "--",
            "true",
        ]) else {
            panic!("worker");
        };
        assert_eq!(credit, PIPELINE_WORKER_CREDIT_MAX);
        for credit in ["0", "1025"] {
            let error = parse_error(&[
                "worker",
                "--node-group",
                "g",
                "--worker",
                "w",
                "--credit",
                credit,
                "--",
                "true",
            ]);
            assert!(error.contains("--credit"), "{credit}: {error}");
        }
        let error = parse_error(&["worker", "--node-group", "g", "--worker", "w"]);
        assert!(error.contains("COMMAND"), "a command is required: {error}");
        let error = parse_error(&["worker", "--worker", "w", "--", "true"]);
        assert!(error.contains("--node-group"), "{error}");
    }

    #[test]
    fn documents_are_json_text_or_a_file() {
        assert_eq!(
            parse_document(r#"{"a":1}"#),
            Ok(Document::Inline(r#"{"a":1}"#.to_owned()))
        );
        assert_eq!(parse_document("@-"), Ok(Document::Stdin));
        assert_eq!(
            parse_document("@dir/state.json"),
            Ok(Document::File(PathBuf::from("dir/state.json")))
        );
        let error = parse_document("@").expect_err("no file");
        assert!(error.contains("@-"), "{error}");
        let error = parse_document("{amount: 1}").expect_err("not JSON");
        assert!(error.starts_with("not JSON"), "{error}");
        let error = parse_error(&["enqueue", "--pipeline", "p", "--state", "{"]);
        assert!(
            error.contains("--state") && error.contains("not JSON"),
            "{error}"
        );

        let dir = tempfile::tempdir().expect("a temporary directory");
        let good = dir.path().join("good.json");
        std::fs::write(&good, "{\"amount\": 12345678901234567890}\n").expect("write");
        assert_eq!(
            Document::File(good).read("--state"),
            Ok("{\"amount\": 12345678901234567890}".to_owned()),
            "read as is, the final newline dropped"
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "amount=1\n").expect("write");
        let error = Document::File(bad.clone())
            .read("--event")
            .expect_err("bad");
        assert!(
            error.starts_with("--event (")
                && error.contains("bad.json")
                && error.contains("not JSON"),
            "{error}"
        );
        let missing = dir.path().join("missing.json");
        let error = Document::File(missing)
            .read("--state")
            .expect_err("missing");
        assert!(
            error.contains("cannot read") && error.contains("missing.json"),
            "{error}"
        );
        assert_eq!(read_optional(None, "--event"), Ok(String::new()));
    }
}
