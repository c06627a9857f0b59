//! `certus ctl pipeline`: transaction pipelines — define them, enqueue and follow transactions as
//! a producer, take and finish them as a worker, set switches, watch completions, and look at
//! the queues, the stuck list, the notices and the configuration as an operator.
//!
//! JSON documents (state, event, progress report) are shown as the strings the cluster stores,
//! byte for byte (in `--json` output too: `jq '.transaction.state | fromjson'`), so nothing is
//! reformatted or loses precision on the way.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use certus_client::{
    CancelOutcome, CancelReply, Client, ClientError, EnqueueRequest, GetStateReply,
    GetStateRequest, NodeGroupCounts, Notice, NotificationKind, PendingWebhook, Pipeline,
    PipelineConfig, PipelineNotification, PipelinesStatus, QueueType, RequeueRequest, SleepRequest,
    Transaction, TxMetadata, TxStatus, WaitOutcome, enqueue_request, notice, requeue_request,
    sleep_request,
};
use certus_proto::v1::{ArchiveCursor, ArchivedTransaction};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::Table;
use serde_json::{Value, json};

use super::{Output, failed, human_ms, now_ms, table};

/// How long one `GetState` call of `pipeline get --wait` holds (the node caps a wait at 60 s).
const WAIT_CHUNK: Duration = Duration::from_secs(30);

/// How often in a row `pipeline watch` opens its stream again after it broke (a node stopped,
/// a connection dropped) before it gives up; each reopening resumes after the last number seen.
const WATCH_REOPENS_MAX: u32 = 5;

/// How often in a row `pipeline export` opens its stream again after it broke; each reopening
/// resumes after the last transaction written.
const EXPORT_REOPENS_MAX: u32 = 5;

/// The most transactions one `pipeline export` writes (and the node's bound on `limit`: the
/// most that can be stored).
const EXPORT_LIMIT_MAX: u32 = 1_000_000;

/// How many lines `pipeline export` writes between flushes; the cursor it reports on a write
/// error is the last one flushed.
const EXPORT_FLUSH_LINES: u64 = 256;

/// Transaction pipelines.
#[derive(Debug, Subcommand)]
pub(super) enum PipelineCommand {
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
    Get {
        /// The transaction id.
        #[arg(
            required_unless_present = "external_id",
            conflicts_with = "external_id"
        )]
        id: Option<u64>,
        /// Look it up by the producer's external id instead (within its window).
        #[arg(long, value_name = "ID")]
        external_id: Option<String>,
        /// Wait up to this many seconds for it to finish or report progress.
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        wait: u64,
        /// Wait for notifications numbered after this one (a previous answer's
        /// notification_seq); default: after the latest when the call arrives.
        #[arg(long, value_name = "SEQ")]
        after_seq: Option<u64>,
        /// Record the answer as the producer's long-poll reply (may cancel its webhook).
        #[arg(long)]
        mark_replied: bool,
    },
    /// Cancel a transaction: queued or sleeping, it is aborted at once; running, its worker is
    /// asked to complete it as aborted.
    Cancel {
        /// The transaction id.
        id: u64,
    },
    /// Take up to --max queued transactions of a node group (admin, then out, then in) as a
    /// worker; they share one claim token.
    Dequeue {
        /// The node group.
        #[arg(long, value_name = "GROUP")]
        node_group: String,
        /// Who takes them.
        #[arg(long, value_name = "NAME")]
        worker: String,
        /// The most to take, 1 to 100.
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=100))]
        max: u32,
    },
    /// Finish a running transaction with a terminal status.
    Complete {
        /// The transaction id.
        id: u64,
        /// The claim token the dequeue gave.
        #[arg(long, value_name = "TOKEN")]
        token: u64,
        /// How it ended.
        #[arg(long, value_enum)]
        status: Terminal,
        /// Its final state: JSON, or @FILE (@- reads stdin); default: keep the current one.
        #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
        state: Option<Document>,
    },
    /// Report a running transaction's progress (a sign of life that moves its deadline).
    Progress {
        /// The transaction id.
        id: u64,
        /// The claim token the dequeue gave.
        #[arg(long, value_name = "TOKEN")]
        token: u64,
        /// The report: JSON, or @FILE (@- reads stdin).
        #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
        report: Document,
    },
    /// Hand a running transaction on to a queue, of its node group or of another.
    Requeue {
        /// The transaction id.
        id: u64,
        /// The claim token the dequeue gave.
        #[arg(long, value_name = "TOKEN")]
        token: u64,
        #[command(flatten)]
        route: NewRoute,
        /// The queue it goes to.
        #[arg(long, value_enum)]
        queue: Queue,
        /// Its new state: JSON, or @FILE (@- reads stdin); default: keep it.
        #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
        state: Option<Document>,
        /// Its next event: JSON, or @FILE (@- reads stdin).
        #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
        event: Option<Document>,
    },
    /// Put a running transaction to sleep until a time (at most a day ahead) or until a switch
    /// changes, whichever comes first; it then goes back to --queue.
    Sleep {
        /// The transaction id.
        id: u64,
        /// The claim token the dequeue gave.
        #[arg(long, value_name = "TOKEN")]
        token: u64,
        #[command(flatten)]
        wake: Wake,
        /// A switch whose change wakes it earlier.
        #[arg(long, value_name = "NAME")]
        switch: Option<String>,
        /// The queue it goes to when woken.
        #[arg(long, value_enum)]
        queue: Queue,
        /// Its new state: JSON, or @FILE (@- reads stdin); default: keep it.
        #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
        state: Option<Document>,
    },
    /// Named switches sleepers wait on.
    Switch {
        #[command(subcommand)]
        command: SwitchCommand,
    },
    /// Print the completions (and with --progress the progress reports) of a node group, or of
    /// every group, one line each as they happen (JSON lines with --json), until Ctrl-C.
    Watch {
        /// Only this node group.
        #[arg(long, value_name = "GROUP")]
        node_group: Option<String>,
        /// Resume after this notification number (0: from the oldest kept); default: only
        /// what happens from now on.
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
        /// Progress reports too, not only completions.
        #[arg(long)]
        progress: bool,
        /// Stop after this many notifications.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
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
    Export {
        /// Resume after this cursor (ARCHIVED_AT_MS:ID, as an earlier export printed; TIME_MS:0
        /// starts at a time); default: from the oldest archived transaction kept.
        #[arg(long, value_name = "CURSOR", value_parser = parse_cursor)]
        after: Option<ArchiveCursor>,
        /// Write at most this many (default and most: 1 000 000).
        #[arg(long, value_name = "N", default_value_t = EXPORT_LIMIT_MAX,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(EXPORT_LIMIT_MAX)))]
        limit: u32,
        /// Where the lines go: a file (created, or replaced) or - for stdout.
        #[arg(long, value_name = "FILE|-", default_value = "-")]
        output: PathBuf,
    },
    /// The pipelines' cluster-wide configuration, or change it.
    Config {
        #[command(subcommand)]
        command: Option<ConfigCommand>,
    },
}

/// Arguments of `pipeline enqueue`.
#[derive(Debug, Args)]
pub(super) struct EnqueueArgs {
    #[command(flatten)]
    route: Route,
    /// The queue of the node group.
    #[arg(long, value_enum, default_value_t = Queue::In)]
    queue: Queue,
    /// Its initial state: JSON, or @FILE (@- reads stdin).
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    state: Document,
    /// What the first worker is to do: JSON, or @FILE (@- reads stdin).
    #[arg(long, value_name = "JSON|@FILE", value_parser = parse_document)]
    event: Option<Document>,
    /// The producer's id for it: enqueuing it again within the window answers the first
    /// transaction (and the call is retried safely after a lost answer).
    #[arg(long, value_name = "ID")]
    external_id: Option<String>,
    /// Who it belongs to.
    #[arg(long, value_name = "OWNER", default_value = "certus-ctl")]
    owner: String,
    /// Where webhook events go (http:// or https://).
    #[arg(long, value_name = "URL")]
    webhook: Option<String>,
    /// Send progress reports by webhook too.
    #[arg(long)]
    progress_reports: bool,
    /// A `get --mark-replied` that answers the finished transaction cancels its webhook.
    #[arg(long)]
    cancel_webhook_on_longpoll: bool,
}

/// Where an enqueue goes: a pipeline or a node group.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[group(required = true, multiple = false)]
pub(super) struct Route {
    /// To the node group of this pipeline.
    #[arg(long, value_name = "NAME")]
    pipeline: Option<String>,
    /// To this node group directly.
    #[arg(long, value_name = "GROUP")]
    node_group: Option<String>,
}

/// Where a requeue goes: a pipeline, a node group, or (neither) the same node group.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
#[group(required = false, multiple = false)]
pub(super) struct NewRoute {
    /// To the node group of this pipeline.
    #[arg(long, value_name = "NAME")]
    pipeline: Option<String>,
    /// To this node group; default: the same node group.
    #[arg(long, value_name = "GROUP")]
    node_group: Option<String>,
}

/// When a sleeper wakes: a time or a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Args)]
#[group(required = true, multiple = false)]
pub(super) struct Wake {
    /// At this time (cluster clock, ms since the Unix epoch).
    #[arg(long, value_name = "MS")]
    until_ms: Option<u64>,
    /// This long from now.
    #[arg(long, value_name = "MS")]
    for_ms: Option<u64>,
}

/// One of a node group's queues, in dequeue priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Queue {
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
pub(super) enum Terminal {
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
pub(super) enum Document {
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
    fn read(&self, flag: &str) -> Result<String, String> {
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

fn read_optional(document: Option<&Document>, flag: &str) -> Result<String, String> {
    document.map_or_else(|| Ok(String::new()), |document| document.read(flag))
}

#[derive(Debug, Subcommand)]
pub(super) enum SwitchCommand {
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

#[derive(Debug, Subcommand)]
pub(super) enum ConfigCommand {
    /// Change the given fields (at least one); the others keep their current values.
    Set(ConfigChanges),
}

/// The fields `pipeline config set` may change; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args)]
pub(super) struct ConfigChanges {
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

impl ConfigChanges {
    /// `config` with the given fields changed; `None` when no field is given.
    fn apply(&self, config: &PipelineConfig) -> Option<PipelineConfig> {
        if *self == ConfigChanges::default() {
            return None;
        }
        Some(PipelineConfig {
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
        })
    }
}

/// Runs `certus ctl pipeline …`.
pub(super) async fn run(
    client: &Client,
    out: &Output,
    command: PipelineCommand,
) -> Result<(), String> {
    match command {
        PipelineCommand::Define { name, node_group } => {
            let reply = client
                .define_pipeline(name.as_str(), node_group.as_str())
                .await
                .map_err(|error| failed(&format!("pipeline define {name:?}"), &error))?;
            let pipeline = reply.pipeline.unwrap_or_default();
            let document = json!({
                "pipeline": pipeline_json(&pipeline),
                "previous_node_group": text_or_null(&reply.previous_node_group),
            });
            out.emit(&document, || {
                if reply.previous_node_group.is_empty() {
                    say!("Defined pipeline {name:?} for node group {node_group:?}.");
                } else if reply.previous_node_group == node_group {
                    say!("Pipeline {name:?} was already defined for node group {node_group:?}.");
                } else {
                    say!(
                        "Moved pipeline {name:?} from node group {:?} to {node_group:?} \
                         (queued transactions stay where they are).",
                        reply.previous_node_group
                    );
                }
            });
        }
        PipelineCommand::Delete { name } => {
            let reply = client
                .delete_pipeline(name.as_str())
                .await
                .map_err(|error| failed(&format!("pipeline delete {name:?}"), &error))?;
            out.emit(&json!({ "name": name, "existed": reply.existed }), || {
                if reply.existed {
                    say!("Deleted pipeline {name:?}.");
                } else {
                    say!("Pipeline {name:?} was not defined; nothing to delete.");
                }
            });
        }
        PipelineCommand::List { after, limit } => {
            let pipelines = list_pipelines(client, after, limit).await?;
            let document =
                json!({ "pipelines": pipelines.iter().map(pipeline_json).collect::<Vec<_>>() });
            out.emit(&document, || {
                if pipelines.is_empty() {
                    say!("No pipelines.");
                } else {
                    say!("{}", pipelines_table(&pipelines, now_ms()));
                }
            });
        }
        PipelineCommand::Enqueue(args) => {
            let request = enqueue_request(&args)?;
            let reply = client
                .enqueue(request)
                .await
                .map_err(|error| failed("pipeline enqueue", &error))?;
            let document = json!({
                "transaction_id": reply.transaction_id,
                "duplicate": reply.duplicate,
            });
            // The id alone on stdout, so `id=$(certus ctl pipeline enqueue …)` works.
            out.emit(&document, || say!("{}", reply.transaction_id));
            if reply.duplicate && !out.json {
                eprintln!(
                    "duplicate: external id {:?} was enqueued within its window as transaction \
                     {}; nothing was created",
                    args.external_id.as_deref().unwrap_or_default(),
                    reply.transaction_id
                );
            }
        }
        PipelineCommand::Get {
            id,
            external_id,
            wait,
            after_seq,
            mark_replied,
        } => {
            let request = GetStateRequest {
                transaction_id: id.unwrap_or(0),
                external_id: external_id.unwrap_or_default(),
                wait_ms: 0,
                after_seq,
                mark_replied,
            };
            let reply = get(client, request, Duration::from_secs(wait)).await?;
            print_state(out, &reply);
        }
        PipelineCommand::Cancel { id } => {
            let reply = client
                .cancel_transaction(id)
                .await
                .map_err(|error| failed(&format!("pipeline cancel {id}"), &error))?;
            out.emit(&cancel_json(&reply), || say!("{}", cancel_line(&reply)));
        }
        PipelineCommand::Dequeue {
            node_group,
            worker,
            max,
        } => {
            let reply = client
                .dequeue(node_group.as_str(), worker.as_str(), max)
                .await
                .map_err(|error| failed(&format!("pipeline dequeue {node_group:?}"), &error))?;
            let transactions = reply.transactions;
            let token = transactions.first().map(|tx| tx.claim_token);
            let document = json!({
                "node_group": node_group,
                "worker": worker,
                "claim_token": token,
                "transactions": transactions.iter().map(transaction_json).collect::<Vec<_>>(),
            });
            out.emit(&document, || match token {
                None => say!("Nothing waits in node group {node_group:?}."),
                Some(token) => {
                    say!(
                        "{worker} took {} transaction(s) under claim token {token}; finish each \
                         with `certus ctl pipeline complete ID --token {token} --status …`.",
                        transactions.len()
                    );
                    say!("{}", transactions_table(&transactions, now_ms()));
                }
            });
        }
        PipelineCommand::Complete {
            id,
            token,
            status,
            state,
        } => {
            let state = state.map(|state| state.read("--state")).transpose()?;
            let reply = client
                .complete_transaction(id, token, status.into(), state)
                .await
                .map_err(|error| failed(&format!("pipeline complete {id}"), &error))?;
            let status = status_text(reply.status);
            out.emit(
                &json!({ "transaction_id": reply.transaction_id, "status": status }),
                || say!("Transaction {} finished: {status}.", reply.transaction_id),
            );
        }
        PipelineCommand::Progress { id, token, report } => {
            let report = report.read("--report")?;
            let reply = client
                .report_progress(id, token, report)
                .await
                .map_err(|error| failed(&format!("pipeline progress {id}"), &error))?;
            let document = json!({
                "transaction_id": reply.transaction_id,
                "claim_deadline_ms": reply.claim_deadline_ms,
                "cancel_requested": reply.cancel_requested,
            });
            out.emit(&document, || {
                say!(
                    "Progress of transaction {} recorded; its deadline is {}.",
                    reply.transaction_id,
                    relative(reply.claim_deadline_ms, now_ms())
                );
                if reply.cancel_requested {
                    say!(
                        "A cancel is pending: complete it with \
                         `certus ctl pipeline complete {id} --token {token} --status aborted`."
                    );
                }
            });
        }
        PipelineCommand::Requeue {
            id,
            token,
            route,
            queue,
            state,
            event,
        } => {
            let request = RequeueRequest {
                transaction_id: id,
                claim_token: token,
                route: match (route.pipeline, route.node_group) {
                    (Some(pipeline), _) => Some(requeue_request::Route::Pipeline(pipeline)),
                    (None, Some(group)) => Some(requeue_request::Route::NodeGroup(group)),
                    (None, None) => None,
                },
                queue: QueueType::from(queue).into(),
                state: read_optional(state.as_ref(), "--state")?,
                event: read_optional(event.as_ref(), "--event")?,
            };
            let reply = client
                .requeue_transaction(request)
                .await
                .map_err(|error| failed(&format!("pipeline requeue {id}"), &error))?;
            let queue = queue_name(reply.queue);
            let document = json!({
                "transaction_id": reply.transaction_id,
                "node_group": reply.node_group,
                "queue": queue,
            });
            out.emit(&document, || {
                say!(
                    "Transaction {} waits in queue {} of node group {:?}.",
                    reply.transaction_id,
                    queue.unwrap_or("?"),
                    reply.node_group
                );
            });
        }
        PipelineCommand::Sleep {
            id,
            token,
            wake,
            switch,
            queue,
            state,
        } => {
            let request = SleepRequest {
                transaction_id: id,
                claim_token: token,
                wake: match (wake.until_ms, wake.for_ms) {
                    (Some(until_ms), _) => Some(sleep_request::Wake::UntilMs(until_ms)),
                    (None, Some(for_ms)) => Some(sleep_request::Wake::ForMs(for_ms)),
                    (None, None) => None,
                },
                switch: switch.clone().unwrap_or_default(),
                queue: QueueType::from(queue).into(),
                state: read_optional(state.as_ref(), "--state")?,
            };
            let reply = client
                .sleep_transaction(request)
                .await
                .map_err(|error| failed(&format!("pipeline sleep {id}"), &error))?;
            let document = json!({
                "transaction_id": reply.transaction_id,
                "until_ms": reply.until_ms,
            });
            out.emit(&document, || {
                let mut line = format!(
                    "Transaction {} sleeps until {}",
                    reply.transaction_id,
                    relative(reply.until_ms, now_ms())
                );
                if let Some(switch) = &switch {
                    line.push_str(&format!(" or until switch {switch:?} changes"));
                }
                say!("{line}.");
            });
        }
        PipelineCommand::Switch {
            command: SwitchCommand::Set { name, value },
        } => {
            let reply = client
                .set_switch(name.as_str(), value)
                .await
                .map_err(|error| failed(&format!("pipeline switch set {name:?}"), &error))?;
            let document = json!({
                "name": name,
                "value": value,
                "changed": reply.changed,
                "woken": reply.woken,
            });
            out.emit(&document, || {
                if reply.changed {
                    say!(
                        "Switch {name:?} is now {value}; {} transaction(s) woken{}.",
                        reply.woken.len(),
                        id_list(&reply.woken)
                    );
                } else {
                    say!("Switch {name:?} was {value} already; nothing woken.");
                }
            });
        }
        PipelineCommand::Switch {
            command: SwitchCommand::Get { name },
        } => {
            let value = client
                .get_switch(name.as_str())
                .await
                .map_err(|error| failed(&format!("pipeline switch get {name:?}"), &error))?;
            out.emit(&json!({ "name": name, "value": value }), || say!("{value}"));
        }
        PipelineCommand::Watch {
            node_group,
            after,
            progress,
            count,
        } => {
            let watch = Watch {
                node_group,
                after,
                progress,
                count,
            };
            tokio::select! {
                result = watch.run(client, out) => result?,
                // Ctrl-C is how a watch normally ends: not an error.
                signal = tokio::signal::ctrl_c() => signal
                    .map_err(|error| format!("pipeline watch: cannot wait for Ctrl-C: {error}"))?,
            }
        }
        PipelineCommand::InPlay { node_group, limit } => {
            let groups = match node_group {
                Some(group) => vec![group],
                None => client
                    .pipelines_status(None)
                    .await
                    .map_err(|error| failed("pipeline in-play", &error))?
                    .node_groups
                    .into_iter()
                    .map(|counts| counts.node_group)
                    .collect(),
            };
            let transactions = in_play(client, &groups, limit).await?;
            let document = json!({
                "transactions": transactions.iter().map(transaction_json).collect::<Vec<_>>(),
            });
            out.emit(&document, || {
                if transactions.is_empty() {
                    say!("No transactions in play.");
                } else {
                    say!("{}", transactions_table(&transactions, now_ms()));
                }
            });
        }
        PipelineCommand::Stuck {
            min_running_ms,
            limit,
        } => {
            let reply = client
                .list_stuck(min_running_ms, limit.unwrap_or(0))
                .await
                .map_err(|error| failed("pipeline stuck", &error))?;
            let transactions = reply.transactions;
            let more = reply.next_after != 0;
            let document = json!({
                "min_running_ms": min_running_ms,
                "transactions": transactions.iter().map(transaction_json).collect::<Vec<_>>(),
                "more": more,
            });
            out.emit(&document, || {
                if transactions.is_empty() {
                    say!(
                        "No transaction has been running for {} or more.",
                        human_ms(min_running_ms)
                    );
                } else {
                    say!("{}", transactions_table(&transactions, now_ms()));
                    if more {
                        say!("(More were left out: raise --limit.)");
                    }
                }
            });
        }
        PipelineCommand::Status { node_group } => {
            let status = client
                .pipelines_status(node_group.as_deref())
                .await
                .map_err(|error| failed("pipeline status", &error))?;
            out.emit(&status_json(&status), || print_status(&status));
        }
        PipelineCommand::Notices { ack: Some(up_to) } => {
            let reply = client
                .acknowledge_notices(up_to)
                .await
                .map_err(|error| failed(&format!("pipeline notices --ack {up_to}"), &error))?;
            out.emit(&json!({ "up_to": up_to, "removed": reply.removed }), || {
                say!("Dropped {} notice(s) up to {up_to}.", reply.removed);
            });
        }
        PipelineCommand::Notices { ack: None } => {
            let (notices, dropped) = list_notices(client).await?;
            let document = json!({
                "notices": notices.iter().map(notice_json).collect::<Vec<_>>(),
                "dropped": dropped,
            });
            out.emit(&document, || {
                if notices.is_empty() {
                    say!("No notices.");
                } else {
                    say!("{}", notices_table(&notices, now_ms()));
                    if let Some(last) = notices.last() {
                        say!(
                            "Drop them once read: `certus ctl pipeline notices --ack {}`.",
                            last.id
                        );
                    }
                }
                if dropped > 0 {
                    say!("{dropped} notice(s) were dropped unread because the queue was full.");
                }
            });
        }
        PipelineCommand::Export {
            after,
            limit,
            output,
        } => {
            let export = Export {
                after,
                limit,
                output,
            };
            export.run(client).await?;
        }
        PipelineCommand::Config { command: None } => {
            let config = client
                .pipeline_config()
                .await
                .map_err(|error| failed("pipeline config", &error))?;
            out.emit(&config_json(&config), || {
                say!("{}", config_table(&config, None));
            });
        }
        PipelineCommand::Config {
            command: Some(ConfigCommand::Set(changes)),
        } => {
            let current = client
                .pipeline_config()
                .await
                .map_err(|error| failed("pipeline config", &error))?;
            let wanted = changes.apply(&current).ok_or_else(|| {
                format!(
                    "pipeline config set: nothing to change; give at least one of {}",
                    CONFIG_FLAGS.join(", ")
                )
            })?;
            let now = client
                .set_pipeline_config(wanted)
                .await
                .map_err(|error| failed("pipeline config set", &error))?;
            out.emit(&config_json(&now), || {
                say!("The pipelines' configuration is now:");
                say!("{}", config_table(&now, Some(&current)));
            });
        }
    }
    Ok(())
}

/// The request of `pipeline enqueue` (documents read and checked).
fn enqueue_request(args: &EnqueueArgs) -> Result<EnqueueRequest, String> {
    let route = match (&args.route.pipeline, &args.route.node_group) {
        (Some(pipeline), _) => enqueue_request::Route::Pipeline(pipeline.clone()),
        (None, Some(group)) => enqueue_request::Route::NodeGroup(group.clone()),
        // The parser requires one of them.
        (None, None) => return Err("pipeline enqueue: give --pipeline or --node-group".to_owned()),
    };
    let metadata = TxMetadata {
        webhook_url: args.webhook.clone().unwrap_or_default(),
        progress_reports: args.progress_reports,
        cancel_webhook_on_longpoll: args.cancel_webhook_on_longpoll,
    };
    Ok(EnqueueRequest {
        owner: args.owner.clone(),
        external_id: args.external_id.clone().unwrap_or_default(),
        route: Some(route),
        queue: QueueType::from(args.queue).into(),
        state: args.state.read("--state")?,
        event: read_optional(args.event.as_ref(), "--event")?,
        metadata: (metadata != TxMetadata::default()).then_some(metadata),
    })
}

/// `GetState`, long-polling for up to `wait` in chunks: until the transaction finishes, its
/// worker reports progress, notifications were missed, or the time is up.
async fn get(
    client: &Client,
    mut request: GetStateRequest,
    wait: Duration,
) -> Result<GetStateReply, String> {
    let what = if request.external_id.is_empty() {
        format!("pipeline get {}", request.transaction_id)
    } else {
        format!("pipeline get --external-id {:?}", request.external_id)
    };
    let started = Instant::now();
    loop {
        let left = wait.saturating_sub(started.elapsed());
        request.wait_ms = u64::try_from(left.min(WAIT_CHUNK).as_millis()).unwrap_or(u64::MAX);
        let reply = client
            .get_state(request.clone())
            .await
            .map_err(|error| failed(&what, &error))?;
        let news = reply.outcome != i32::from(WaitOutcome::WaitEnded);
        if news || started.elapsed() >= wait {
            return Ok(reply);
        }
        // The next chunk waits for what comes after this answer, so nothing between is missed.
        request.after_seq = Some(reply.notification_seq);
    }
}

/// Every pipeline after `after`, or one page of `limit`.
async fn list_pipelines(
    client: &Client,
    after: Option<String>,
    limit: Option<u32>,
) -> Result<Vec<Pipeline>, String> {
    let mut cursor = after;
    let mut pipelines = Vec::new();
    loop {
        let page = client
            .list_pipelines(cursor.as_deref(), limit.unwrap_or(0))
            .await
            .map_err(|error| failed("pipeline list", &error))?;
        pipelines.extend(page.pipelines);
        if limit.is_some() || page.next_after.is_empty() {
            return Ok(pipelines);
        }
        cursor = Some(page.next_after);
    }
}

/// The transactions in play of `groups`, each group in id order, every page; at most `limit` in
/// all when given.
async fn in_play(
    client: &Client,
    groups: &[String],
    limit: Option<u32>,
) -> Result<Vec<Transaction>, String> {
    let mut transactions = Vec::new();
    for group in groups {
        let mut after = 0;
        loop {
            let left = match limit {
                Some(limit) => {
                    let left = u64::from(limit).saturating_sub(transactions.len() as u64);
                    if left == 0 {
                        return Ok(transactions);
                    }
                    u32::try_from(left).unwrap_or(u32::MAX)
                }
                None => 0,
            };
            let page = client
                .list_in_play(group.as_str(), after, left)
                .await
                .map_err(|error| failed(&format!("pipeline in-play {group:?}"), &error))?;
            transactions.extend(page.transactions);
            if page.next_after == 0 {
                break;
            }
            after = page.next_after;
        }
    }
    Ok(transactions)
}

/// Every notice, oldest first, and how many were dropped unread.
async fn list_notices(client: &Client) -> Result<(Vec<Notice>, u64), String> {
    let mut notices = Vec::new();
    let mut after = 0;
    loop {
        let page = client
            .list_notices(after, 0)
            .await
            .map_err(|error| failed("pipeline notices", &error))?;
        notices.extend(page.notices);
        if page.next_after == 0 {
            return Ok((notices, page.dropped));
        }
        after = page.next_after;
    }
}

// ---- watch -------------------------------------------------------------------------------

/// `pipeline watch`: a completion stream, opened again after it breaks.
struct Watch {
    node_group: Option<String>,
    after: Option<u64>,
    progress: bool,
    count: Option<u64>,
}

impl Watch {
    async fn run(self, client: &Client, out: &Output) -> Result<(), String> {
        let what = "pipeline watch";
        let mut resume = self.after;
        let mut printed: u64 = 0;
        let mut reopens: u32 = 0;
        loop {
            if self.count.is_some_and(|count| printed >= count) {
                return Ok(());
            }
            let mut stream = client
                .watch_completions(self.node_group.as_deref(), resume, self.progress)
                .await
                .map_err(|error| failed(what, &error))?;
            let ended = loop {
                match stream.message().await {
                    Ok(Some(notification)) => {
                        reopens = 0;
                        resume = Some(notification.seq);
                        if out.json {
                            say!("{}", notification_json(&notification));
                        } else {
                            say!("{}", notification_line(&notification));
                        }
                        if notification.kind != i32::from(NotificationKind::Missed) {
                            printed += 1;
                        }
                        if self.count.is_some_and(|count| printed >= count) {
                            return Ok(());
                        }
                    }
                    Ok(None) => break "the node ended the stream".to_owned(),
                    Err(status) => break ClientError::from_status(&status).to_string(),
                }
            };
            reopens += 1;
            if reopens > WATCH_REOPENS_MAX {
                return Err(format!(
                    "{what}: {ended} ({WATCH_REOPENS_MAX} reopens failed)"
                ));
            }
            match resume {
                Some(seq) => eprintln!("{what}: {ended}; resuming after notification {seq}"),
                None => eprintln!("{what}: {ended}; resuming"),
            }
        }
    }
}

fn notification_kind(kind: i32) -> String {
    match NotificationKind::try_from(kind) {
        Ok(NotificationKind::Progress) => "progress".to_owned(),
        Ok(NotificationKind::Completed) => "completed".to_owned(),
        Ok(NotificationKind::Missed) => "missed".to_owned(),
        Ok(NotificationKind::Unspecified) | Err(_) => format!("kind-{kind}"),
    }
}

/// One notification as one compact JSON line.
fn notification_json(notification: &PipelineNotification) -> Value {
    let completed = notification.kind == i32::from(NotificationKind::Completed);
    json!({
        "seq": notification.seq,
        "kind": notification_kind(notification.kind),
        "transaction_id": notification.transaction_id,
        "node_group": text_or_null(&notification.node_group),
        "at_ms": notification.at_ms,
        "status": completed.then(|| status_text(notification.status)),
    })
}

/// One notification as one line for people.
fn notification_line(notification: &PipelineNotification) -> String {
    let seq = notification.seq;
    let id = notification.transaction_id;
    let group = &notification.node_group;
    match NotificationKind::try_from(notification.kind) {
        Ok(NotificationKind::Completed) => format!(
            "[{seq}] transaction {id} ({group}) finished: {}",
            status_text(notification.status)
        ),
        Ok(NotificationKind::Progress) => {
            format!("[{seq}] transaction {id} ({group}) reported progress")
        }
        Ok(NotificationKind::Missed) => format!(
            "[{seq}] missed: notifications up to here were dropped before they could be sent; \
             re-read the transactions you watch"
        ),
        Ok(NotificationKind::Unspecified) | Err(_) => format!(
            "[{seq}] transaction {id} ({group}): {}",
            notification_kind(notification.kind)
        ),
    }
}

// ---- export ------------------------------------------------------------------------------

/// `pipeline export`: the archive as JSON lines, its stream opened again after it breaks.
struct Export {
    after: Option<ArchiveCursor>,
    limit: u32,
    /// `-` for stdout.
    output: PathBuf,
}

impl Export {
    async fn run(self, client: &Client) -> Result<(), String> {
        let what = "pipeline export";
        let to_stdout = self.output.as_os_str() == "-";
        let sink: Box<dyn Write + Send> = if to_stdout {
            Box::new(std::io::stdout())
        } else {
            let file = std::fs::File::create(&self.output).map_err(|error| {
                format!("{what}: cannot create {}: {error}", self.output.display())
            })?;
            Box::new(file)
        };
        let mut out = std::io::BufWriter::new(sink);
        let destination = if to_stdout {
            "stdout".to_owned()
        } else {
            self.output.display().to_string()
        };
        // The cursor after the last line handed to `out`, and after the last one flushed.
        let mut cursor = self.after;
        let mut flushed = self.after;
        let mut written: u64 = 0;
        let mut reopens: u32 = 0;
        let write_failed = |error: std::io::Error, flushed: Option<ArchiveCursor>| {
            format!(
                "{what}: cannot write to {destination}: {error}; {}",
                resume_hint(flushed)
            )
        };
        loop {
            let left = u64::from(self.limit) - written;
            if left == 0 {
                break;
            }
            let opened = client
                .export_archive(cursor, u32::try_from(left).unwrap_or(u32::MAX))
                .await;
            let mut stream = match opened {
                Ok(stream) => stream,
                Err(error) if written == 0 => return Err(failed(what, &error)),
                Err(error) => {
                    out.flush().map_err(|error| write_failed(error, flushed))?;
                    return Err(format!("{}; {}", failed(what, &error), resume_hint(cursor)));
                }
            };
            let broken = loop {
                match stream.message().await {
                    Ok(Some(item)) => {
                        reopens = 0;
                        let line = archive_line(&item)?;
                        writeln!(out, "{line}").map_err(|error| write_failed(error, flushed))?;
                        cursor = item.cursor;
                        written += 1;
                        if written.is_multiple_of(EXPORT_FLUSH_LINES) {
                            out.flush().map_err(|error| write_failed(error, flushed))?;
                            flushed = cursor;
                        }
                    }
                    Ok(None) => break None,
                    Err(status) => break Some(ClientError::from_status(&status).to_string()),
                }
            };
            let Some(broken) = broken else {
                break;
            };
            reopens += 1;
            if reopens > EXPORT_REOPENS_MAX {
                out.flush().map_err(|error| write_failed(error, flushed))?;
                return Err(format!(
                    "{what}: {broken} ({EXPORT_REOPENS_MAX} reopens failed); {}",
                    resume_hint(cursor)
                ));
            }
            eprintln!("{what}: {broken}; resuming {}", after_text(cursor));
        }
        out.flush().map_err(|error| write_failed(error, flushed))?;
        eprintln!(
            "{what}: wrote {written} archived transaction(s) to {destination}; {}",
            resume_hint(cursor)
        );
        Ok(())
    }
}

/// Parses `ARCHIVED_AT_MS:ID` (what the export prints and each line's `cursor` holds).
fn parse_cursor(text: &str) -> Result<ArchiveCursor, String> {
    let expected = "expected ARCHIVED_AT_MS:ID, two decimal numbers (the cursor an export \
                    printed, or TIME_MS:0 to start at a time)";
    let (at, id) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: {expected}"))?;
    let number = |part: &str| {
        // `u64::from_str` takes a leading `+`; a cursor is digits only.
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{text:?}: {expected}"));
        }
        part.parse::<u64>()
            .map_err(|error| format!("{text:?}: {error}; {expected}"))
    };
    Ok(ArchiveCursor {
        archived_at_ms: number(at)?,
        transaction_id: number(id)?,
    })
}

fn cursor_text(cursor: &ArchiveCursor) -> String {
    format!("{}:{}", cursor.archived_at_ms, cursor.transaction_id)
}

fn after_text(cursor: Option<ArchiveCursor>) -> String {
    match cursor {
        Some(cursor) => format!("after {}", cursor_text(&cursor)),
        None => "from the oldest".to_owned(),
    }
}

/// How to go on from `cursor`.
fn resume_hint(cursor: Option<ArchiveCursor>) -> String {
    match cursor {
        Some(cursor) => format!("resume with --after {}", cursor_text(&cursor)),
        None => "nothing was written; run it again without --after".to_owned(),
    }
}

/// A stored JSON document on one line: its text with the whitespace between tokens removed.
/// Strings, numbers and the order of keys stay as stored, so nothing is reformatted or loses
/// precision (a JSON string holds no raw line break, so the result is one line).
fn compact_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// One line of `pipeline export` (docs/pipelines.md, "Archive export"): a JSON object with
/// its fields in a fixed order, JSON documents embedded as JSON (compacted), absent values
/// null.
fn archive_line(item: &ArchivedTransaction) -> Result<String, String> {
    let (Some(tx), Some(cursor)) = (&item.transaction, &item.cursor) else {
        return Err(format!(
            "pipeline export: the node sent an item without a transaction or cursor: {item:?}"
        ));
    };
    let metadata = tx.metadata.clone().unwrap_or_default();
    let document = |text: &str| {
        if text.is_empty() {
            "null".to_owned()
        } else {
            compact_json(text)
        }
    };
    let fields: [(&str, String); 19] = [
        ("cursor", json!(cursor_text(cursor)).to_string()),
        ("id", tx.id.to_string()),
        ("pipeline", text_or_null(&tx.pipeline).to_string()),
        ("node_group", json!(tx.node_group).to_string()),
        ("owner", json!(tx.owner).to_string()),
        ("external_id", text_or_null(&tx.external_id).to_string()),
        ("status", json!(status_text(tx.status)).to_string()),
        ("state", document(&tx.state)),
        ("event", document(&tx.event)),
        ("progress", document(&tx.progress)),
        (
            "metadata",
            format!(
                r#"{{"webhook_url":{},"progress_reports":{},"cancel_webhook_on_longpoll":{}}}"#,
                text_or_null(&metadata.webhook_url),
                metadata.progress_reports,
                metadata.cancel_webhook_on_longpoll,
            ),
        ),
        ("cancel_requested", tx.cancel_requested.to_string()),
        ("attempts", tx.attempts.to_string()),
        ("created_at_ms", tx.created_at_ms.to_string()),
        (
            "last_started_at_ms",
            ms_or_null(tx.last_started_at_ms).to_string(),
        ),
        (
            "completed_at_ms",
            ms_or_null(tx.completed_at_ms).to_string(),
        ),
        ("notified_at_ms", ms_or_null(tx.notified_at_ms).to_string()),
        ("archived_at_ms", tx.archived_at_ms.to_string()),
        ("version", tx.version.to_string()),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("\"{name}\":{value}"))
        .collect();
    Ok(format!("{{{}}}", body.join(",")))
}

// ---- output ------------------------------------------------------------------------------

/// A status as the origin system spells it (`queued`, `internal-error`, …).
fn status_text(status: i32) -> String {
    match TxStatus::try_from(status) {
        Ok(TxStatus::Queued) => "queued",
        Ok(TxStatus::Running) => "running",
        Ok(TxStatus::Success) => "success",
        Ok(TxStatus::Failed) => "failed",
        Ok(TxStatus::Aborted) => "aborted",
        Ok(TxStatus::Sleeping) => "sleeping",
        Ok(TxStatus::Timeout) => "timeout",
        Ok(TxStatus::InternalError) => "internal-error",
        Ok(TxStatus::Unspecified) | Err(_) => return format!("status-{status}"),
    }
    .to_owned()
}

/// A queue's name, `None` for none.
fn queue_name(queue: i32) -> Option<&'static str> {
    match QueueType::try_from(queue) {
        Ok(QueueType::Admin) => Some("admin"),
        Ok(QueueType::Out) => Some("out"),
        Ok(QueueType::In) => Some("in"),
        Ok(QueueType::Unspecified) | Err(_) => None,
    }
}

fn wait_outcome(outcome: i32) -> String {
    match WaitOutcome::try_from(outcome) {
        Ok(WaitOutcome::Finished) => "finished".to_owned(),
        Ok(WaitOutcome::Progress) => "progress".to_owned(),
        Ok(WaitOutcome::Missed) => "missed".to_owned(),
        Ok(WaitOutcome::WaitEnded) => "wait-ended".to_owned(),
        Ok(WaitOutcome::Unspecified) | Err(_) => format!("outcome-{outcome}"),
    }
}

/// `""` as JSON null.
fn text_or_null(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_owned())
    }
}

/// `0` (never) as JSON null.
fn ms_or_null(ms: u64) -> Value {
    if ms == 0 { Value::Null } else { json!(ms) }
}

fn or_none(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}

/// A time relative to `now` (this machine's clock): `12.5 s ago`, `in 3.0 s`.
fn relative(ms: u64, now: Option<u64>) -> String {
    match now {
        None => format!("at {ms} ms"),
        Some(now) if now >= ms => format!("{} ago", human_ms(now - ms)),
        Some(now) => format!("in {}", human_ms(ms - now)),
    }
}

/// ` (ids 3, 4)`, or nothing for none.
fn id_list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return String::new();
    }
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    format!(" (ids {})", ids.join(", "))
}

fn pipeline_json(pipeline: &Pipeline) -> Value {
    json!({
        "name": pipeline.name,
        "node_group": pipeline.node_group,
        "defined_at_ms": pipeline.defined_at_ms,
    })
}

fn pipelines_table(pipelines: &[Pipeline], now: Option<u64>) -> Table {
    let mut rows = table(&["pipeline", "node group", "defined"]);
    for pipeline in pipelines {
        rows.add_row(vec![
            pipeline.name.clone(),
            pipeline.node_group.clone(),
            relative(pipeline.defined_at_ms, now),
        ]);
    }
    rows
}

/// A transaction as JSON: every field, absent values null, JSON documents as the strings
/// stored.
fn transaction_json(tx: &Transaction) -> Value {
    let metadata = tx.metadata.clone().unwrap_or_default();
    let running = tx.status == i32::from(TxStatus::Running);
    let sleeping = tx.status == i32::from(TxStatus::Sleeping);
    json!({
        "id": tx.id,
        "status": status_text(tx.status),
        "owner": tx.owner,
        "external_id": text_or_null(&tx.external_id),
        "pipeline": text_or_null(&tx.pipeline),
        "node_group": tx.node_group,
        "state": text_or_null(&tx.state),
        "event": text_or_null(&tx.event),
        "progress": text_or_null(&tx.progress),
        "metadata": {
            "webhook_url": text_or_null(&metadata.webhook_url),
            "progress_reports": metadata.progress_reports,
            "cancel_webhook_on_longpoll": metadata.cancel_webhook_on_longpoll,
        },
        "cancel_requested": tx.cancel_requested,
        "created_at_ms": tx.created_at_ms,
        "queue": queue_name(tx.queue),
        "queued_at_ms": ms_or_null(tx.queued_at_ms),
        "claim": if running {
            json!({
                "worker": tx.worker,
                "token": tx.claim_token,
                "started_at_ms": tx.claim_started_at_ms,
                "deadline_ms": tx.claim_deadline_ms,
            })
        } else {
            Value::Null
        },
        "sleep": if sleeping {
            json!({
                "until_ms": tx.sleep_until_ms,
                "switch": text_or_null(&tx.sleep_switch),
                "wake_queue": queue_name(tx.wake_queue),
            })
        } else {
            Value::Null
        },
        "attempts": tx.attempts,
        "last_started_at_ms": ms_or_null(tx.last_started_at_ms),
        "completed_at_ms": ms_or_null(tx.completed_at_ms),
        "notified_at_ms": ms_or_null(tx.notified_at_ms),
        "archived_at_ms": ms_or_null(tx.archived_at_ms),
        "version": tx.version,
    })
}

/// Where a transaction is, in a few words.
fn place(tx: &Transaction, now: Option<u64>) -> String {
    let status = status_text(tx.status);
    match TxStatus::try_from(tx.status) {
        Ok(TxStatus::Queued) => format!(
            "queued (queue {}, {})",
            queue_name(tx.queue).unwrap_or("?"),
            match now {
                Some(now) => format!("waiting {}", human_ms(now.saturating_sub(tx.queued_at_ms))),
                None => format!("since {} ms", tx.queued_at_ms),
            }
        ),
        Ok(TxStatus::Running) => {
            let mut line = format!(
                "running: {} (token {}, deadline {})",
                tx.worker,
                tx.claim_token,
                relative(tx.claim_deadline_ms, now)
            );
            if tx.cancel_requested {
                line.push_str(", cancel requested");
            }
            line
        }
        Ok(TxStatus::Sleeping) => {
            let mut line = format!("sleeping until {}", relative(tx.sleep_until_ms, now));
            if !tx.sleep_switch.is_empty() {
                line.push_str(&format!(" or switch {:?} changes", tx.sleep_switch));
            }
            line.push_str(&format!(
                ", then queue {}",
                queue_name(tx.wake_queue).unwrap_or("?")
            ));
            line
        }
        _ if tx.completed_at_ms != 0 => {
            let mut line = format!("{status} (finished {})", relative(tx.completed_at_ms, now));
            if tx.archived_at_ms != 0 {
                line.push_str(", archived");
            }
            line
        }
        _ => status,
    }
}

/// One transaction for people: a field/value table.
fn transaction_table(tx: &Transaction, now: Option<u64>) -> Table {
    let mut rows = table(&["transaction", &tx.id.to_string()]);
    let mut row = |field: &str, value: String| {
        rows.add_row(vec![field.to_owned(), value]);
    };
    row("status", place(tx, now));
    row("node group", tx.node_group.clone());
    if !tx.pipeline.is_empty() {
        row("pipeline", tx.pipeline.clone());
    }
    row("owner", tx.owner.clone());
    if !tx.external_id.is_empty() {
        row("external id", tx.external_id.clone());
    }
    row("created", relative(tx.created_at_ms, now));
    row("attempts", tx.attempts.to_string());
    row("state", or_none(&tx.state).to_owned());
    if !tx.event.is_empty() {
        row("event", tx.event.clone());
    }
    if !tx.progress.is_empty() {
        row("progress", tx.progress.clone());
    }
    if let Some(metadata) = tx.metadata.as_ref().filter(|m| !m.webhook_url.is_empty()) {
        let mut options = Vec::new();
        if metadata.progress_reports {
            options.push("progress reports");
        }
        if metadata.cancel_webhook_on_longpoll {
            options.push("cancelled by a long-poll");
        }
        let options = if options.is_empty() {
            String::new()
        } else {
            format!(" ({})", options.join(", "))
        };
        row("webhook", format!("{}{options}", metadata.webhook_url));
    }
    if tx.notified_at_ms != 0 {
        row("long-poll replied", relative(tx.notified_at_ms, now));
    }
    row("version", tx.version.to_string());
    rows
}

/// Transactions, one row each.
fn transactions_table(transactions: &[Transaction], now: Option<u64>) -> Table {
    let mut rows = table(&[
        "id",
        "node group",
        "pipeline",
        "status",
        "attempts",
        "owner",
        "created",
    ]);
    for tx in transactions {
        rows.add_row(vec![
            tx.id.to_string(),
            tx.node_group.clone(),
            or_none(&tx.pipeline).to_owned(),
            place(tx, now),
            tx.attempts.to_string(),
            tx.owner.clone(),
            relative(tx.created_at_ms, now),
        ]);
    }
    rows
}

fn webhook_json(webhook: &PendingWebhook) -> Value {
    let completed = webhook.kind == i32::from(NotificationKind::Completed);
    json!({
        "event_id": webhook.event_id,
        "url": webhook.url,
        "kind": notification_kind(webhook.kind),
        "status": completed.then(|| status_text(webhook.status)),
        "attempts": webhook.attempts,
        "next_attempt_at_ms": webhook.next_attempt_at_ms,
        "last_error": text_or_null(&webhook.last_error),
    })
}

fn state_json(reply: &GetStateReply) -> Value {
    json!({
        "transaction": reply.transaction.as_ref().map(transaction_json),
        "outcome": wait_outcome(reply.outcome),
        "notification_seq": reply.notification_seq,
        "webhook_cancelled": reply.webhook_cancelled,
        "webhook": reply.webhook.as_ref().map(webhook_json),
    })
}

fn print_state(out: &Output, reply: &GetStateReply) {
    out.emit(&state_json(reply), || {
        let now = now_ms();
        match WaitOutcome::try_from(reply.outcome) {
            Ok(WaitOutcome::Progress) => say!("Its worker reported progress."),
            Ok(WaitOutcome::Missed) => say!(
                "Notifications were dropped before this wait could see them; progress may have \
                 been missed."
            ),
            _ => {}
        }
        if let Some(tx) = &reply.transaction {
            say!("{}", transaction_table(tx, now));
        }
        if let Some(webhook) = &reply.webhook {
            let mut line = format!(
                "Webhook event {} to {} pending: {} attempt(s), next {}",
                webhook.event_id,
                webhook.url,
                webhook.attempts,
                relative(webhook.next_attempt_at_ms, now)
            );
            if !webhook.last_error.is_empty() {
                line.push_str(&format!(", last error: {}", webhook.last_error));
            }
            say!("{line}.");
        }
        if reply.webhook_cancelled {
            say!("Its pending webhook was cancelled (the long-poll replied).");
        }
        // Only a transaction in play has news to wait for.
        if reply
            .transaction
            .as_ref()
            .is_some_and(|tx| tx.completed_at_ms == 0)
        {
            say!(
                "Wait for what comes next with --wait SECONDS --after-seq {}.",
                reply.notification_seq
            );
        }
    });
}

fn cancel_outcome(reply: &CancelReply) -> String {
    match CancelOutcome::try_from(reply.outcome) {
        Ok(CancelOutcome::Aborted) => "aborted".to_owned(),
        Ok(CancelOutcome::Requested) => "requested".to_owned(),
        Ok(CancelOutcome::AlreadyRequested) => "already-requested".to_owned(),
        Ok(CancelOutcome::Finished) => "finished".to_owned(),
        Ok(CancelOutcome::Unspecified) | Err(_) => format!("outcome-{}", reply.outcome),
    }
}

fn cancel_json(reply: &CancelReply) -> Value {
    let finished = reply.outcome == i32::from(CancelOutcome::Finished);
    json!({
        "transaction_id": reply.transaction_id,
        "outcome": cancel_outcome(reply),
        "status": finished.then(|| status_text(reply.status)),
    })
}

fn cancel_line(reply: &CancelReply) -> String {
    let id = reply.transaction_id;
    match CancelOutcome::try_from(reply.outcome) {
        Ok(CancelOutcome::Aborted) => format!("Transaction {id} is aborted."),
        Ok(CancelOutcome::Requested) => {
            format!("Transaction {id} is running: its worker is asked to abort it.")
        }
        Ok(CancelOutcome::AlreadyRequested) => {
            format!("Transaction {id} is running and its worker was asked to abort it already.")
        }
        Ok(CancelOutcome::Finished) => format!(
            "Transaction {id} had finished already ({}); nothing changed.",
            status_text(reply.status)
        ),
        Ok(CancelOutcome::Unspecified) | Err(_) => {
            format!("Transaction {id}: {}.", cancel_outcome(reply))
        }
    }
}

fn group_json(counts: &NodeGroupCounts) -> Value {
    json!({
        "node_group": counts.node_group,
        "queued_admin": counts.queued_admin,
        "queued_out": counts.queued_out,
        "queued_in": counts.queued_in,
        "running": counts.running,
        "sleeping": counts.sleeping,
    })
}

fn status_json(status: &PipelinesStatus) -> Value {
    let statuses: serde_json::Map<String, Value> = status
        .statuses
        .iter()
        .map(|count| (status_text(count.status), json!(count.count)))
        .collect();
    json!({
        "node_groups": status.node_groups.iter().map(group_json).collect::<Vec<_>>(),
        "more_node_groups": status.more_node_groups,
        "statuses": statuses,
        "transactions": status.transactions,
        "webhooks_pending": status.webhooks_pending,
        "notices_dropped": status.notices_dropped,
        "last_notification_seq": status.last_notification_seq,
        "config": status.config.as_ref().map(config_json),
    })
}

fn groups_table(groups: &[NodeGroupCounts]) -> Table {
    let mut rows = table(&["node group", "admin", "out", "in", "running", "sleeping"]);
    for group in groups {
        rows.add_row(vec![
            group.node_group.clone(),
            group.queued_admin.to_string(),
            group.queued_out.to_string(),
            group.queued_in.to_string(),
            group.running.to_string(),
            group.sleeping.to_string(),
        ]);
    }
    rows
}

fn counts_table(status: &PipelinesStatus) -> Table {
    let mut rows = table(&["transactions", "count"]);
    for count in &status.statuses {
        rows.add_row(vec![status_text(count.status), count.count.to_string()]);
    }
    rows.add_row(vec![
        "stored".to_owned(),
        match &status.config {
            Some(config) => format!(
                "{} (at most {})",
                status.transactions, config.transactions_max
            ),
            None => status.transactions.to_string(),
        },
    ]);
    rows.add_row(vec![
        "webhooks pending".to_owned(),
        status.webhooks_pending.to_string(),
    ]);
    rows.add_row(vec![
        "notices dropped".to_owned(),
        status.notices_dropped.to_string(),
    ]);
    rows.add_row(vec![
        "last notification".to_owned(),
        status.last_notification_seq.to_string(),
    ]);
    rows
}

fn print_status(status: &PipelinesStatus) {
    if status.node_groups.is_empty() {
        say!("No node group has transactions in play.");
    } else {
        say!("{}", groups_table(&status.node_groups));
        if status.more_node_groups {
            say!("(More node groups are busy than were listed.)");
        }
    }
    say!("{}", counts_table(status));
    if let Some(config) = &status.config {
        say!("{}", config_table(config, None));
    }
}

fn notice_json(notice: &Notice) -> Value {
    let mut document = json!({ "id": notice.id, "at_ms": notice.at_ms });
    let kind = match &notice.kind {
        Some(notice::Kind::RetriesExhausted(given_up)) => json!({
            "kind": "retries-exhausted",
            "event_id": given_up.event_id,
            "transaction_id": given_up.transaction_id,
            "url": given_up.url,
            "attempts": given_up.attempts,
            "last_error": text_or_null(&given_up.last_error),
        }),
        Some(notice::Kind::UrlPaused(paused)) => json!({
            "kind": "url-paused",
            "url": paused.url,
            "failures": paused.failures,
            "until_ms": paused.until_ms,
        }),
        Some(notice::Kind::WebhookDropped(dropped)) => json!({
            "kind": "webhook-dropped",
            "transaction_id": dropped.transaction_id,
            "url": dropped.url,
        }),
        None => json!({ "kind": Value::Null }),
    };
    if let (Value::Object(document), Value::Object(kind)) = (&mut document, kind) {
        document.extend(kind);
    }
    document
}

/// What a notice says, in a sentence.
fn notice_text(notice: &Notice, now: Option<u64>) -> String {
    match &notice.kind {
        Some(notice::Kind::RetriesExhausted(given_up)) => format!(
            "webhook event {} of transaction {} to {} given up after {} attempt(s): {}",
            given_up.event_id,
            given_up.transaction_id,
            given_up.url,
            given_up.attempts,
            or_none(&given_up.last_error)
        ),
        Some(notice::Kind::UrlPaused(paused)) => format!(
            "{} paused until {} after {} failure(s)",
            paused.url,
            relative(paused.until_ms, now),
            paused.failures
        ),
        Some(notice::Kind::WebhookDropped(dropped)) => format!(
            "webhook of transaction {} to {} dropped: too many pending",
            dropped.transaction_id, dropped.url
        ),
        None => "(a kind of notice this version does not know)".to_owned(),
    }
}

fn notices_table(notices: &[Notice], now: Option<u64>) -> Table {
    let mut rows = table(&["id", "when", "notice"]);
    for notice in notices {
        rows.add_row(vec![
            notice.id.to_string(),
            relative(notice.at_ms, now),
            notice_text(notice, now),
        ]);
    }
    rows
}

/// The flags of [`ConfigChanges`], in the order of [`config_rows`].
const CONFIG_FLAGS: [&str; 12] = [
    "--external-id-window-ms",
    "--running-timeout-ms",
    "--max-attempts",
    "--archive-delay-ms",
    "--archive-retention-ms",
    "--transactions-max",
    "--webhook-backoff-base-ms",
    "--webhook-backoff-cap-ms",
    "--webhook-attempts-max",
    "--url-failure-limit",
    "--url-failure-window-ms",
    "--url-pause-ms",
];

/// The configuration's fields: (JSON name, value, unit), in the order of [`CONFIG_FLAGS`].
fn config_rows(config: &PipelineConfig) -> [(&'static str, u64, &'static str); 12] {
    [
        ("external_id_window_ms", config.external_id_window_ms, "ms"),
        ("running_timeout_ms", config.running_timeout_ms, "ms"),
        ("max_attempts", u64::from(config.max_attempts), "attempts"),
        ("archive_delay_ms", config.archive_delay_ms, "ms"),
        ("archive_retention_ms", config.archive_retention_ms, "ms"),
        ("transactions_max", config.transactions_max, "transactions"),
        (
            "webhook_backoff_base_ms",
            config.webhook_backoff_base_ms,
            "ms",
        ),
        (
            "webhook_backoff_cap_ms",
            config.webhook_backoff_cap_ms,
            "ms",
        ),
        (
            "webhook_attempts_max",
            u64::from(config.webhook_attempts_max),
            "attempts",
        ),
        (
            "url_failure_limit",
            u64::from(config.url_failure_limit),
            "failures",
        ),
        ("url_failure_window_ms", config.url_failure_window_ms, "ms"),
        ("url_pause_ms", config.url_pause_ms, "ms"),
    ]
}

fn config_json(config: &PipelineConfig) -> Value {
    Value::Object(
        config_rows(config)
            .into_iter()
            .map(|(name, value, _)| (name.to_owned(), json!(value)))
            .collect(),
    )
}

/// The configuration, one row per field with the flag that sets it; with `before`, a column
/// marking what changed.
fn config_table(config: &PipelineConfig, before: Option<&PipelineConfig>) -> Table {
    let mut header = vec!["setting", "value", "unit"];
    if before.is_some() {
        header.push("was");
    }
    let mut rows = table(&header);
    let old = before.map(config_rows);
    for (index, (_, value, unit)) in config_rows(config).into_iter().enumerate() {
        let shown = if unit == "ms" && value >= 1_000 {
            format!("{value} ({})", human_ms(value))
        } else {
            value.to_string()
        };
        let mut row = vec![CONFIG_FLAGS[index].to_owned(), shown, unit.to_owned()];
        if let Some(old) = &old {
            let was = old[index].1;
            row.push(if was == value {
                String::new()
            } else {
                was.to_string()
            });
        }
        rows.add_row(row);
    }
    rows
}

#[cfg(test)]
mod tests {
    use certus_client::StatusCount;
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: PipelineCommand,
    }

    fn parse(args: &[&str]) -> PipelineCommand {
        Cli::try_parse_from(std::iter::once("pipeline").chain(args.iter().copied()))
            .unwrap_or_else(|error| panic!("{args:?}: {error}"))
            .command
    }

    fn parse_error(args: &[&str]) -> String {
        Cli::try_parse_from(std::iter::once("pipeline").chain(args.iter().copied()))
            .expect_err("refused")
            .to_string()
    }

    /// Through `certus ctl`, as a user types it.
    fn parse_ctl(args: &[&str]) -> super::super::CtlArgs {
        #[derive(Debug, Parser)]
        struct Ctl {
            #[command(flatten)]
            ctl: super::super::CtlArgs,
        }
        Ctl::try_parse_from(std::iter::once("ctl").chain(args.iter().copied()))
            .unwrap_or_else(|error| panic!("{args:?}: {error}"))
            .ctl
    }

    const DEFAULTS: PipelineConfig = PipelineConfig {
        external_id_window_ms: 86_400_000,
        running_timeout_ms: 300_000,
        max_attempts: 3,
        archive_delay_ms: 60_000,
        archive_retention_ms: 604_800_000,
        transactions_max: 100_000,
        webhook_backoff_base_ms: 1_000,
        webhook_backoff_cap_ms: 300_000,
        webhook_attempts_max: 10,
        url_failure_limit: 5,
        url_failure_window_ms: 60_000,
        url_pause_ms: 600_000,
    };

    fn transaction(status: TxStatus) -> Transaction {
        Transaction {
            id: 17,
            owner: "shop".to_owned(),
            node_group: "payments".to_owned(),
            status: status.into(),
            status_text: status_text(status.into()),
            state: r#"{"amount":12345678901234567890}"#.to_owned(),
            created_at_ms: 1_000,
            version: 3,
            ..Transaction::default()
        }
    }

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
            super::super::CtlCommand::Pipeline {
                command: PipelineCommand::Cancel { id: 5 }
            }
        ));
    }

    #[test]
    fn an_enqueue_goes_to_exactly_one_pipeline_or_node_group() {
        let error = parse_error(&["enqueue", "--state", "{}"]);
        assert!(
            error.contains("--pipeline") && error.contains("--node-group"),
            "{error}"
        );
        let error = parse_error(&[
            "enqueue",
            "--pipeline",
            "p",
            "--node-group",
            "g",
            "--state",
            "{}",
        ]);
        assert!(error.contains("cannot be used with"), "{error}");
        let error = parse_error(&["enqueue", "--pipeline", "p"]);
        assert!(error.contains("--state"), "{error}");

        let PipelineCommand::Enqueue(args) =
            parse(&["enqueue", "--pipeline", "p", "--state", "{}"])
        else {
            panic!("enqueue");
        };
        assert_eq!(args.queue, Queue::In, "the default queue");
        assert_eq!(args.owner, "certus-ctl", "the default owner");
        let request = enqueue_request(&args).expect("request");
        assert_eq!(
            request.route,
            Some(enqueue_request::Route::Pipeline("p".to_owned()))
        );
        assert_eq!(request.queue, i32::from(QueueType::In));
        assert_eq!(request.state, "{}");
        assert_eq!(request.event, "");
        assert_eq!(request.external_id, "");
        assert_eq!(request.metadata, None, "no metadata without options");

        let PipelineCommand::Enqueue(args) = parse(&[
            "enqueue",
            "--node-group",
            "g",
            "--queue",
            "out",
            "--state",
            "[1]",
            "--event",
            r#"{"go":true}"#,
            "--external-id",
            "x-1",
            "--owner",
            "shop",
            "--webhook",
            "http://h/x",
            "--cancel-webhook-on-longpoll",
        ]) else {
            panic!("enqueue");
        };
        let request = enqueue_request(&args).expect("request");
        assert_eq!(
            request.route,
            Some(enqueue_request::Route::NodeGroup("g".to_owned()))
        );
        assert_eq!(request.queue, i32::from(QueueType::Out));
        assert_eq!(request.event, r#"{"go":true}"#);
        assert_eq!(request.external_id, "x-1");
        assert_eq!(request.owner, "shop");
        assert_eq!(
            request.metadata,
            Some(TxMetadata {
                webhook_url: "http://h/x".to_owned(),
                progress_reports: false,
                cancel_webhook_on_longpoll: true,
            })
        );
    }

    #[test]
    fn worker_flags_are_checked_by_the_parser() {
        let PipelineCommand::Complete { status, state, .. } = parse(&[
            "complete",
            "1",
            "--token",
            "2",
            "--status",
            "internal-error",
        ]) else {
            panic!("complete");
        };
        assert_eq!(TxStatus::from(status), TxStatus::InternalError);
        assert_eq!(state, None);
        let error = parse_error(&["complete", "1", "--token", "2", "--status", "running"]);
        assert!(error.contains("--status"), "{error}");
        let error = parse_error(&["complete", "1", "--status", "success"]);
        assert!(error.contains("--token"), "{error}");

        let PipelineCommand::Dequeue { max, .. } =
            parse(&["dequeue", "--node-group", "g", "--worker", "w"])
        else {
            panic!("dequeue");
        };
        assert_eq!(max, 1, "one at a time by default");
        for max in ["0", "101"] {
            let error = parse_error(&[
                "dequeue",
                "--node-group",
                "g",
                "--worker",
                "w",
                "--max",
                max,
            ]);
            assert!(error.contains("--max"), "{max}: {error}");
        }

        let error = parse_error(&["sleep", "1", "--token", "2", "--queue", "in"]);
        assert!(
            error.contains("--until-ms") || error.contains("--for-ms"),
            "{error}"
        );
        let error = parse_error(&[
            "sleep",
            "1",
            "--token",
            "2",
            "--queue",
            "in",
            "--for-ms",
            "1",
            "--until-ms",
            "2",
        ]);
        assert!(error.contains("cannot be used with"), "{error}");
        let PipelineCommand::Sleep { wake, queue, .. } = parse(&[
            "sleep", "1", "--token", "2", "--queue", "admin", "--for-ms", "50",
        ]) else {
            panic!("sleep");
        };
        assert_eq!(
            wake,
            Wake {
                until_ms: None,
                for_ms: Some(50)
            }
        );
        assert_eq!(QueueType::from(queue), QueueType::Admin);

        let PipelineCommand::Requeue { route, .. } =
            parse(&["requeue", "1", "--token", "2", "--queue", "in"])
        else {
            panic!("requeue");
        };
        assert_eq!(
            route,
            NewRoute {
                pipeline: None,
                node_group: None
            },
            "the same node group"
        );
        let error = parse_error(&["requeue", "1", "--token", "2"]);
        assert!(error.contains("--queue"), "{error}");
        let error = parse_error(&["requeue", "1", "--token", "2", "--queue", "middle"]);
        assert!(error.contains("--queue"), "{error}");
    }

    #[test]
    fn get_takes_an_id_or_an_external_id() {
        let PipelineCommand::Get {
            id,
            external_id,
            wait,
            after_seq,
            mark_replied,
        } = parse(&["get", "7"])
        else {
            panic!("get");
        };
        assert_eq!(
            (id, external_id, wait, after_seq, mark_replied),
            (Some(7), None, 0, None, false)
        );
        let PipelineCommand::Get {
            id, external_id, ..
        } = parse(&["get", "--external-id", "order-1"])
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

    #[test]
    fn config_set_changes_only_the_given_fields() {
        assert_eq!(ConfigChanges::default().apply(&DEFAULTS), None);
        let changes = ConfigChanges {
            max_attempts: Some(5),
            archive_delay_ms: Some(0),
            ..ConfigChanges::default()
        };
        assert_eq!(
            changes.apply(&DEFAULTS),
            Some(PipelineConfig {
                max_attempts: 5,
                archive_delay_ms: 0,
                ..DEFAULTS
            })
        );
        let PipelineCommand::Config {
            command: Some(ConfigCommand::Set(parsed)),
        } = parse(&["config", "set", "--url-pause-ms", "1000"])
        else {
            panic!("config set");
        };
        assert_eq!(
            parsed,
            ConfigChanges {
                url_pause_ms: Some(1000),
                ..ConfigChanges::default()
            }
        );
        let error = parse_error(&["config", "set", "--max-attempts=-1"]);
        assert!(error.contains("--max-attempts"), "{error}");
        // Every flag the table names is one the parser takes, and sets its own field.
        for (index, flag) in CONFIG_FLAGS.into_iter().enumerate() {
            let PipelineCommand::Config {
                command: Some(ConfigCommand::Set(parsed)),
            } = parse(&["config", "set", flag, "7"])
            else {
                panic!("{flag}");
            };
            let changed = parsed.apply(&DEFAULTS).expect("a change");
            assert_eq!(config_rows(&changed)[index].1, 7, "{flag}");
            let untouched = config_rows(&changed)
                .into_iter()
                .zip(config_rows(&DEFAULTS))
                .enumerate()
                .all(|(other, (now, was))| other == index || now == was);
            assert!(untouched, "{flag} changed another field");
        }
    }

    #[test]
    fn the_config_table_and_json_name_every_field() {
        let document = config_json(&DEFAULTS);
        assert_eq!(document.as_object().expect("an object").len(), 12);
        assert_eq!(document["running_timeout_ms"], 300_000);
        assert_eq!(document["url_failure_limit"], 5);
        let now = PipelineConfig {
            max_attempts: 4,
            ..DEFAULTS
        };
        let text = config_table(&now, Some(&DEFAULTS)).to_string();
        let attempts = text
            .lines()
            .find(|line| line.contains("--max-attempts"))
            .expect("a max-attempts row");
        assert!(
            attempts.contains('4') && attempts.contains('3'),
            "{attempts}"
        );
        let timeout = text
            .lines()
            .find(|line| line.contains("--running-timeout-ms"))
            .expect("a timeout row");
        assert!(timeout.contains("300000 (5 min 0 s)"), "{timeout}");
        assert_eq!(timeout.matches("300000").count(), 1, "unchanged: {timeout}");
    }

    #[test]
    fn transaction_json_has_stable_fields_and_nulls_for_absent_values() {
        let queued = Transaction {
            queue: QueueType::Out.into(),
            queued_at_ms: 2_000,
            ..transaction(TxStatus::Queued)
        };
        let document = transaction_json(&queued);
        assert_eq!(document["id"], 17);
        assert_eq!(document["status"], "queued");
        assert_eq!(document["queue"], "out");
        assert_eq!(document["queued_at_ms"], 2_000);
        assert_eq!(
            document["state"], r#"{"amount":12345678901234567890}"#,
            "the document as stored, not reparsed"
        );
        for absent in [
            "external_id",
            "pipeline",
            "event",
            "progress",
            "claim",
            "sleep",
            "completed_at_ms",
            "archived_at_ms",
            "notified_at_ms",
            "last_started_at_ms",
        ] {
            assert_eq!(document[absent], Value::Null, "{absent}");
        }
        assert_eq!(document["metadata"]["webhook_url"], Value::Null);
        assert_eq!(document["metadata"]["progress_reports"], false);

        let running = Transaction {
            worker: "w-1".to_owned(),
            claim_token: 20,
            claim_started_at_ms: 3_000,
            claim_deadline_ms: 9_000,
            attempts: 1,
            ..transaction(TxStatus::Running)
        };
        let document = transaction_json(&running);
        assert_eq!(
            document["claim"],
            json!({ "worker": "w-1", "token": 20, "started_at_ms": 3_000, "deadline_ms": 9_000 })
        );
        assert_eq!(document["queue"], Value::Null);

        let sleeping = Transaction {
            sleep_until_ms: 8_000,
            sleep_switch: "bank-open".to_owned(),
            wake_queue: QueueType::Admin.into(),
            ..transaction(TxStatus::Sleeping)
        };
        assert_eq!(
            transaction_json(&sleeping)["sleep"],
            json!({ "until_ms": 8_000, "switch": "bank-open", "wake_queue": "admin" })
        );
    }

    #[test]
    fn places_say_where_a_transaction_is() {
        let now = Some(10_000);
        let queued = Transaction {
            queue: QueueType::In.into(),
            queued_at_ms: 7_500,
            ..transaction(TxStatus::Queued)
        };
        assert_eq!(place(&queued, now), "queued (queue in, waiting 2.5 s)");
        let running = Transaction {
            worker: "w-1".to_owned(),
            claim_token: 20,
            claim_deadline_ms: 15_000,
            cancel_requested: true,
            ..transaction(TxStatus::Running)
        };
        assert_eq!(
            place(&running, now),
            "running: w-1 (token 20, deadline in 5.0 s), cancel requested"
        );
        let sleeping = Transaction {
            sleep_until_ms: 12_000,
            sleep_switch: "bank-open".to_owned(),
            wake_queue: QueueType::Out.into(),
            ..transaction(TxStatus::Sleeping)
        };
        assert_eq!(
            place(&sleeping, now),
            "sleeping until in 2.0 s or switch \"bank-open\" changes, then queue out"
        );
        let done = Transaction {
            completed_at_ms: 9_000,
            archived_at_ms: 9_500,
            ..transaction(TxStatus::InternalError)
        };
        assert_eq!(
            place(&done, now),
            "internal-error (finished 1.0 s ago), archived"
        );

        let text = transaction_table(&running, now).to_string();
        assert!(text.contains("12345678901234567890"), "{text}");
        assert!(
            !text.contains("webhook"),
            "no webhook row without one: {text}"
        );
        let hooked = Transaction {
            metadata: Some(TxMetadata {
                webhook_url: "https://h/x".to_owned(),
                progress_reports: true,
                cancel_webhook_on_longpoll: false,
            }),
            ..running.clone()
        };
        let text = transaction_table(&hooked, now).to_string();
        assert!(text.contains("https://h/x (progress reports)"), "{text}");
        let list = transactions_table(&[queued, running], now).to_string();
        assert!(
            list.contains("queued (queue in") && list.contains("running: w-1"),
            "{list}"
        );
    }

    #[test]
    fn statuses_and_outcomes_have_stable_names() {
        let names: Vec<String> = (1..=8).map(status_text).collect();
        assert_eq!(
            names,
            [
                "queued",
                "running",
                "success",
                "failed",
                "aborted",
                "sleeping",
                "timeout",
                "internal-error"
            ]
        );
        assert_eq!(status_text(0), "status-0");
        assert_eq!(status_text(99), "status-99");
        for terminal in [
            Terminal::Success,
            Terminal::Failed,
            Terminal::Aborted,
            Terminal::Timeout,
            Terminal::InternalError,
        ] {
            let spelled = terminal.to_possible_value().expect("a value");
            assert_eq!(
                status_text(TxStatus::from(terminal).into()),
                spelled.get_name(),
                "the flag is spelled as the status"
            );
        }
        assert_eq!(queue_name(QueueType::Unspecified.into()), None);
        assert_eq!(wait_outcome(WaitOutcome::WaitEnded.into()), "wait-ended");
        assert_eq!(wait_outcome(7), "outcome-7");
    }

    #[test]
    fn notifications_print_one_line_each() {
        let completed = PipelineNotification {
            seq: 12,
            kind: NotificationKind::Completed.into(),
            transaction_id: 17,
            node_group: "payments".to_owned(),
            at_ms: 5_000,
            status: TxStatus::Failed.into(),
        };
        let document = notification_json(&completed);
        assert_eq!(
            document,
            json!({
                "seq": 12,
                "kind": "completed",
                "transaction_id": 17,
                "node_group": "payments",
                "at_ms": 5_000,
                "status": "failed",
            })
        );
        assert!(!document.to_string().contains('\n'), "one JSON line");
        assert_eq!(
            notification_line(&completed),
            "[12] transaction 17 (payments) finished: failed"
        );
        let progress = PipelineNotification {
            kind: NotificationKind::Progress.into(),
            status: 0,
            ..completed.clone()
        };
        assert_eq!(notification_json(&progress)["status"], Value::Null);
        assert_eq!(
            notification_line(&progress),
            "[12] transaction 17 (payments) reported progress"
        );
        let missed = PipelineNotification {
            seq: 9,
            kind: NotificationKind::Missed.into(),
            transaction_id: 0,
            node_group: String::new(),
            ..completed
        };
        assert_eq!(notification_json(&missed)["node_group"], Value::Null);
        assert!(notification_line(&missed).starts_with("[9] missed:"));
    }

    #[test]
    fn cancels_say_what_happened() {
        let finished = CancelReply {
            transaction_id: 17,
            outcome: CancelOutcome::Finished.into(),
            status: TxStatus::Success.into(),
        };
        assert_eq!(
            cancel_json(&finished),
            json!({ "transaction_id": 17, "outcome": "finished", "status": "success" })
        );
        assert_eq!(
            cancel_line(&finished),
            "Transaction 17 had finished already (success); nothing changed."
        );
        let requested = CancelReply {
            outcome: CancelOutcome::Requested.into(),
            status: 0,
            ..finished
        };
        assert_eq!(
            cancel_json(&requested),
            json!({ "transaction_id": 17, "outcome": "requested", "status": null })
        );
        assert!(cancel_line(&requested).contains("asked to abort"));
        let aborted = CancelReply {
            outcome: CancelOutcome::Aborted.into(),
            ..requested
        };
        assert_eq!(cancel_line(&aborted), "Transaction 17 is aborted.");
    }

    #[test]
    fn get_answers_show_the_outcome_and_the_pending_webhook() {
        let reply = GetStateReply {
            transaction: Some(transaction(TxStatus::Success)),
            outcome: WaitOutcome::Finished.into(),
            notification_seq: 30,
            webhook_cancelled: false,
            webhook: Some(PendingWebhook {
                event_id: 25,
                url: "https://h/x".to_owned(),
                kind: NotificationKind::Completed.into(),
                status: TxStatus::Success.into(),
                attempts: 2,
                next_attempt_at_ms: 40_000,
                last_error: "HTTP 503".to_owned(),
            }),
        };
        let document = state_json(&reply);
        assert_eq!(document["outcome"], "finished");
        assert_eq!(document["notification_seq"], 30);
        assert_eq!(document["transaction"]["status"], "success");
        assert_eq!(
            document["webhook"],
            json!({
                "event_id": 25,
                "url": "https://h/x",
                "kind": "completed",
                "status": "success",
                "attempts": 2,
                "next_attempt_at_ms": 40_000,
                "last_error": "HTTP 503",
            })
        );
        let bare = GetStateReply {
            webhook: None,
            ..reply
        };
        assert_eq!(state_json(&bare)["webhook"], Value::Null);
    }

    #[test]
    fn status_shows_groups_counts_and_config() {
        let status = PipelinesStatus {
            config: Some(DEFAULTS),
            node_groups: vec![NodeGroupCounts {
                node_group: "payments".to_owned(),
                queued_admin: 1,
                queued_out: 2,
                queued_in: 3,
                running: 4,
                sleeping: 5,
            }],
            more_node_groups: false,
            statuses: vec![
                StatusCount {
                    status: TxStatus::Queued.into(),
                    count: 6,
                },
                StatusCount {
                    status: TxStatus::InternalError.into(),
                    count: 1,
                },
            ],
            transactions: 7,
            webhooks_pending: 2,
            notices_dropped: 0,
            last_notification_seq: 41,
        };
        let document = status_json(&status);
        assert_eq!(
            document["node_groups"][0],
            json!({
                "node_group": "payments",
                "queued_admin": 1,
                "queued_out": 2,
                "queued_in": 3,
                "running": 4,
                "sleeping": 5,
            })
        );
        assert_eq!(
            document["statuses"],
            json!({ "queued": 6, "internal-error": 1 })
        );
        assert_eq!(document["transactions"], 7);
        assert_eq!(document["last_notification_seq"], 41);
        assert_eq!(document["config"]["max_attempts"], 3);
        let groups = groups_table(&status.node_groups).to_string();
        let row = groups
            .lines()
            .find(|line| line.contains("payments"))
            .expect("a row");
        assert!(row.contains('1') && row.contains('5'), "{row}");
        let counts = counts_table(&status).to_string();
        assert!(counts.contains("7 (at most 100000)"), "{counts}");
        assert!(counts.contains("internal-error"), "{counts}");
    }

    #[test]
    fn notices_name_their_kind() {
        let given_up = Notice {
            id: 3,
            at_ms: 1_000,
            kind: Some(notice::Kind::RetriesExhausted(notice::RetriesExhausted {
                event_id: 25,
                transaction_id: 17,
                url: "https://h/x".to_owned(),
                attempts: 10,
                last_error: String::new(),
            })),
        };
        assert_eq!(
            notice_json(&given_up),
            json!({
                "id": 3,
                "at_ms": 1_000,
                "kind": "retries-exhausted",
                "event_id": 25,
                "transaction_id": 17,
                "url": "https://h/x",
                "attempts": 10,
                "last_error": null,
            })
        );
        assert_eq!(
            notice_text(&given_up, Some(2_000)),
            "webhook event 25 of transaction 17 to https://h/x given up after 10 attempt(s): -"
        );
        let paused = Notice {
            id: 4,
            at_ms: 1_000,
            kind: Some(notice::Kind::UrlPaused(notice::UrlPaused {
                url: "https://h/x".to_owned(),
                failures: 5,
                until_ms: 61_000,
            })),
        };
        assert_eq!(notice_json(&paused)["kind"], "url-paused");
        assert_eq!(
            notice_text(&paused, Some(1_000)),
            "https://h/x paused until in 1 min 0 s after 5 failure(s)"
        );
        let dropped = Notice {
            id: 5,
            at_ms: 1_000,
            kind: Some(notice::Kind::WebhookDropped(notice::WebhookDropped {
                transaction_id: 18,
                url: "https://h/y".to_owned(),
            })),
        };
        assert_eq!(notice_json(&dropped)["transaction_id"], 18);
        let table = notices_table(&[given_up, paused, dropped], Some(2_000)).to_string();
        assert!(table.contains("dropped: too many pending"), "{table}");
        assert!(table.contains("1.0 s ago"), "{table}");
    }

    #[test]
    fn export_takes_a_cursor_a_bounded_limit_and_an_output() {
        let PipelineCommand::Export {
            after,
            limit,
            output,
        } = parse(&["export"])
        else {
            panic!("export");
        };
        assert_eq!((after, limit), (None, 1_000_000));
        assert_eq!(output, PathBuf::from("-"));
        let PipelineCommand::Export { after, .. } = parse(&["export", "--after", "5:0"]) else {
            panic!("export");
        };
        assert_eq!(
            after,
            Some(ArchiveCursor {
                archived_at_ms: 5,
                transaction_id: 0
            })
        );
        for bad in [
            "",
            "5",
            ":5",
            "5:",
            "a:1",
            "1:+2",
            "-1:2",
            "1:2:3",
            " 1:2",
            "1:99999999999999999999",
        ] {
            let error = parse_cursor(bad).expect_err(bad);
            assert!(error.contains("ARCHIVED_AT_MS:ID"), "{bad:?}: {error}");
        }
        assert!(parse_error(&["export", "--after", "x"]).contains("ARCHIVED_AT_MS:ID"));
        assert!(parse_error(&["export", "--limit", "0"]).contains("--limit"));
        assert!(parse_error(&["export", "--limit", "1000001"]).contains("--limit"));
        let cursor = ArchiveCursor {
            archived_at_ms: 1_700_000_000_000,
            transaction_id: 42,
        };
        assert_eq!(parse_cursor(&cursor_text(&cursor)), Ok(cursor));
        assert_eq!(
            resume_hint(Some(cursor)),
            "resume with --after 1700000000000:42"
        );
    }

    #[test]
    fn compacting_a_document_removes_only_whitespace_between_tokens() {
        let stored = concat!(
            "{\n  \"a b\" : [1, 2.50, 12345678901234567890],\r\n",
            "\t\"q\\\"\\\\\": \" x \\n \",\"z\":{} }",
        );
        let compact = compact_json(stored);
        assert_eq!(
            compact,
            r#"{"a b":[1,2.50,12345678901234567890],"q\"\\":" x \n ","z":{}}"#
        );
        assert!(!compact.contains('\n'));
        let reparsed: Value = serde_json::from_str(&compact).expect("still JSON");
        let original: Value = serde_json::from_str(stored).expect("JSON");
        assert_eq!(reparsed, original);
        assert_eq!(compact_json("  \"\\u00e9\"  "), r#""\u00e9""#);
        assert_eq!(compact_json("true"), "true");
    }

    #[test]
    fn an_export_line_has_every_field_in_a_fixed_order_with_documents_embedded() {
        let tx = Transaction {
            pipeline: "checkout".to_owned(),
            external_id: "order-1".to_owned(),
            state: "{ \"amount\": 12345678901234567890 }".to_owned(),
            progress: r#"{"step":"charged"}"#.to_owned(),
            metadata: Some(TxMetadata {
                webhook_url: "https://example.com/hook".to_owned(),
                progress_reports: true,
                cancel_webhook_on_longpoll: false,
            }),
            attempts: 1,
            last_started_at_ms: 1_500,
            completed_at_ms: 2_000,
            archived_at_ms: 62_000,
            ..transaction(TxStatus::Success)
        };
        let item = ArchivedTransaction {
            transaction: Some(tx),
            cursor: Some(ArchiveCursor {
                archived_at_ms: 62_000,
                transaction_id: 17,
            }),
        };
        let line = archive_line(&item).expect("a line");
        assert_eq!(
            line,
            concat!(
                r#"{"cursor":"62000:17","id":17,"pipeline":"checkout","node_group":"payments","#,
                r#""owner":"shop","external_id":"order-1","status":"success","#,
                r#""state":{"amount":12345678901234567890},"event":null,"#,
                r#""progress":{"step":"charged"},"#,
                r#""metadata":{"webhook_url":"https://example.com/hook","progress_reports":true,"#,
                r#""cancel_webhook_on_longpoll":false},"#,
                r#""cancel_requested":false,"attempts":1,"created_at_ms":1000,"#,
                r#""last_started_at_ms":1500,"completed_at_ms":2000,"notified_at_ms":null,"#,
                r#""archived_at_ms":62000,"version":3}"#,
            )
        );
        let parsed: Value = serde_json::from_str(&line).expect("one JSON object");
        assert_eq!(
            parsed["state"]["amount"].to_string(),
            "12345678901234567890"
        );
        assert_eq!(parsed["metadata"]["progress_reports"], true);
        let bare = ArchivedTransaction {
            transaction: None,
            cursor: None,
        };
        assert!(archive_line(&bare).is_err());
    }
}
