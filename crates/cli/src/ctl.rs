//! `certus ctl`: status, membership, snapshots, reloads, leases and challenge tokens of a running cluster
//! (the CT log, CA sessions and transaction pipelines in their own modules), as tables or
//! (`--json`) one JSON document on stdout.

use std::time::Duration;

use certus_client::{
    AcquireReply, Challenge, CheckFenceReply, Client, ClientError, Lease, Member, MembershipReply,
    StatusReply,
};
use certus_proto::v1::acquire_reply::How;
use clap::{Args, Subcommand};
use comfy_table::Table;
use serde_json::{Value, json};

use show::{human_ms, now_ms, or_dash, table, table_of};

/// `println!` that ignores a closed stdout (`certus ctl status | head` must not panic).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod log;
mod pipeline;
mod session;
mod settings;
mod show;

/// How long one long-poll call of `session wait` or `pipeline get --wait` holds (the node cuts
/// a wait at 60 s).
const WAIT_CHUNK: Duration = Duration::from_secs(30);

/// Talk to a running cluster (by default the one `certus up` starts).
#[derive(Debug, Args)]
pub(crate) struct CtlArgs {
    /// The gRPC endpoints (host:port) of the cluster's nodes, comma-separated.
    #[arg(
        long,
        env = "CERTUS_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
    )]
    endpoints: Vec<String>,
    #[command(flatten)]
    connect: crate::connect::ConnectArgs,
    /// Print one JSON document on stdout instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Debug, Subcommand)]
enum CtlCommand {
    /// Every endpoint's view: role, term, leader, log and snapshot indexes.
    Status,
    /// The members of the cluster (as the leader sees them), or change them.
    Members {
        #[command(subcommand)]
        command: Option<MembersCommand>,
    },
    /// Build a snapshot now (and compact the log) on one node, or on every endpoint; or
    /// export one (`snapshot export FILE`).
    Snapshot {
        /// The node (host:port); default: every endpoint.
        #[arg(long)]
        endpoint: Option<String>,
        #[command(subcommand)]
        command: Option<SnapshotCommand>,
    },
    /// Make one node, or every endpoint, re-read its certificates, tokens and client limits (as
    /// SIGHUP does): says what changed, or why nothing did.
    Reload {
        /// The node (host:port); default: every endpoint.
        #[arg(long)]
        endpoint: Option<String>,
    },
    /// Leases with fencing tokens.
    Leases {
        #[command(subcommand)]
        command: LeasesCommand,
    },
    /// HTTP-01 challenge tokens.
    Tokens {
        #[command(subcommand)]
        command: TokensCommand,
    },
    /// The Certificate Transparency log.
    Log {
        #[command(subcommand)]
        command: log::LogCommand,
    },
    /// CA issuance sessions.
    Session {
        #[command(subcommand)]
        command: session::SessionCommand,
    },
    /// Transaction pipelines: producers, workers, switches, completions, operators.
    Pipeline {
        #[command(subcommand)]
        command: pipeline::PipelineCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SnapshotCommand {
    /// Write a consistent snapshot of the cluster into FILE (a backup for `certus restore`):
    /// the replicated state at one log index, holding every write acknowledged before the
    /// export began, with the CT log's entries from the node's database; checksummed.
    Export {
        /// The file to write (must not exist).
        file: std::path::PathBuf,
        /// The node that encodes it (host:port); default: any endpoint.
        #[arg(long)]
        endpoint: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum MembersCommand {
    /// Add a node as a learner; returns once it has caught up.
    AddLearner {
        /// The new node's id.
        #[arg(long)]
        id: u64,
        /// Its gRPC address (host:port, the host an IP address or a host name).
        #[arg(long)]
        grpc_addr: certus_node::MemberAddr,
        /// Its HTTP address (host:port).
        #[arg(long)]
        http_addr: certus_node::MemberAddr,
    },
    /// Set the voters (comma-separated ids); each must already be a member.
    SetVoters {
        /// The voter ids, for example 1,2,3.
        #[arg(value_delimiter = ',', required = true, num_args = 1..)]
        voters: Vec<u64>,
        /// Keep the members left out as learners (by default they leave the cluster).
        #[arg(long)]
        retain: bool,
    },
    /// Change the addresses the membership records for a member (host:port; the node must
    /// answer at its new gRPC address).
    SetAddress {
        /// The member's id.
        #[arg(long)]
        id: u64,
        /// Its new gRPC address (host:port); unchanged if not given.
        #[arg(long, required_unless_present = "http_addr")]
        grpc_addr: Option<certus_node::MemberAddr>,
        /// Its new HTTP address (host:port); unchanged if not given.
        #[arg(long)]
        http_addr: Option<certus_node::MemberAddr>,
    },
}

#[derive(Debug, Subcommand)]
enum LeasesCommand {
    /// Live leases in name order (every page, unless --limit is given).
    List {
        /// Start after this name.
        #[arg(long)]
        start_after: Option<String>,
        /// Show one page of at most this many.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One live lease.
    Get {
        /// The lease name.
        name: String,
    },
    /// Grant the lease if free or expired; renew it if the holder already holds it.
    Acquire {
        /// The lease name.
        name: String,
        /// Who asks.
        #[arg(long)]
        holder: String,
        /// For how long, in milliseconds.
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Extend a live lease held by the holder; the fencing token is unchanged.
    Renew {
        /// The lease name.
        name: String,
        /// Who holds it.
        #[arg(long)]
        holder: String,
        /// The new time to live from now, in milliseconds.
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Give up a live lease held by the holder.
    Release {
        /// The lease name.
        name: String,
        /// Who holds it.
        #[arg(long)]
        holder: String,
    },
    /// Whether a fencing token is the live grant's (exit status 1 when it is not).
    Check {
        /// The lease name.
        name: String,
        /// The fencing token to check.
        #[arg(long)]
        token: u64,
    },
}

#[derive(Debug, Subcommand)]
enum TokensCommand {
    /// Stored tokens in token order (every page, unless --limit is given).
    List {
        /// Start after this token.
        #[arg(long)]
        start_after: Option<String>,
        /// Show one page of at most this many.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// The key authorization stored for a token.
    Get {
        /// The token.
        token: String,
    },
    /// Store (or replace) the key authorization served for a token.
    Put {
        /// The token.
        token: String,
        /// The key authorization (token.thumbprint).
        key_authorization: String,
    },
    /// Remove a token (removing a missing token is not an error).
    Delete {
        /// The token.
        token: String,
    },
    /// Remove every token stored longer ago than an age.
    Purge {
        /// The age, in milliseconds.
        #[arg(long)]
        older_than_ms: u64,
    },
}

/// Runs `certus ctl`.
pub(crate) async fn run(args: CtlArgs) -> Result<(), String> {
    let client = Client::with_config(&args.endpoints, args.connect.client_config()?)
        .map_err(|error| error.to_string())?;
    let result = command(&client, args).await;
    // A one-shot command's client session (opened by its first write) is closed at once rather
    // than left to expire, so scripts running many commands do not fill the session table. Best
    // effort: an open session costs little and expires on its own.
    let _ = client.close_client_session().await;
    result
}

async fn command(client: &Client, args: CtlArgs) -> Result<(), String> {
    let out = Output { json: args.json };
    match args.command {
        CtlCommand::Status => status(client, &out).await,
        CtlCommand::Members { command: None } => members(client, &out).await,
        CtlCommand::Members {
            command:
                Some(MembersCommand::AddLearner {
                    id,
                    grpc_addr,
                    http_addr,
                }),
        } => {
            let reply = client
                .add_learner(id, grpc_addr.to_string(), http_addr.to_string())
                .await
                .map_err(|error| failed(&format!("add learner {id}"), &error))?;
            out.membership(&format!("node {id} is a learner"), &reply);
            Ok(())
        }
        CtlCommand::Members {
            command:
                Some(MembersCommand::SetAddress {
                    id,
                    grpc_addr,
                    http_addr,
                }),
        } => {
            let grpc_addr = grpc_addr.map(|addr| addr.to_string());
            let http_addr = http_addr.map(|addr| addr.to_string());
            let reply = client
                .set_member_address(id, grpc_addr, http_addr)
                .await
                .map_err(|error| failed(&format!("set the address of node {id}"), &error))?;
            out.membership(&format!("node {id}'s addresses are recorded"), &reply);
            Ok(())
        }
        CtlCommand::Members {
            command: Some(MembersCommand::SetVoters { voters, retain }),
        } => {
            let listed = join_ids(&voters);
            let reply = client
                .change_membership(voters, retain)
                .await
                .map_err(|error| failed(&format!("set voters {listed}"), &error))?;
            out.membership(&format!("voters are now {listed}"), &reply);
            Ok(())
        }
        CtlCommand::Snapshot {
            command: Some(SnapshotCommand::Export { file, endpoint }),
            endpoint: outer,
        } => export(client, &out, &file, endpoint.or(outer).as_deref()).await,
        CtlCommand::Snapshot {
            endpoint,
            command: None,
        } => {
            let endpoints = match endpoint {
                Some(endpoint) => vec![endpoint],
                None => client.endpoints().to_vec(),
            };
            snapshot(client, &out, &endpoints).await
        }
        CtlCommand::Reload { endpoint } => {
            let endpoints = match endpoint {
                Some(endpoint) => vec![endpoint],
                None => client.endpoints().to_vec(),
            };
            reload(client, &out, &endpoints).await
        }
        CtlCommand::Leases { command } => leases(client, &out, command).await,
        CtlCommand::Tokens { command } => tokens(client, &out, command).await,
        CtlCommand::Log { command } => log::run(client, &out, command).await,
        CtlCommand::Session { command } => session::run(client, &out, command).await,
        CtlCommand::Pipeline { command } => pipeline::run(client, &out, command).await,
    }
}

/// How results are printed.
#[derive(Debug, Clone, Copy)]
struct Output {
    json: bool,
}

impl Output {
    /// Prints the JSON document, or the human form.
    fn emit(&self, document: &Value, human: impl FnOnce()) {
        if self.json {
            say!("{document:#}");
        } else {
            human();
        }
    }

    fn membership(&self, what: &str, reply: &MembershipReply) {
        let document = json!({
            "log_index": reply.log_index,
            "members": reply.members.iter().map(member_json).collect::<Vec<_>>(),
        });
        self.emit(&document, || {
            say!("{what} (committed at log index {}).", reply.log_index);
            say!("{}", members_table(&reply.members));
        });
    }

    fn lease(&self, headline: &str, lease: &Lease, extra: Value) {
        let mut document = json!({ "lease": lease_json(lease) });
        if let (Value::Object(document), Value::Object(extra)) = (&mut document, extra) {
            document.extend(extra);
        }
        self.emit(&document, || {
            say!("{headline}");
            say!("{}", leases_table(std::slice::from_ref(lease)));
        });
    }
}

/// The message of a failed call, with what was being done and the refusal's reason.
fn failed(what: &str, error: &ClientError) -> String {
    format!("{what}: {error}")
}

/// `Ok` when the call went through on every endpoint; else each failure, with its endpoint.
fn every_endpoint_ok<T>(
    what: &str,
    results: &[(String, Result<T, ClientError>)],
) -> Result<(), String> {
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(endpoint, result)| {
            result
                .as_ref()
                .err()
                .map(|error| failed(&format!("{what} on {endpoint}"), error))
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

fn join_ids(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

// ---- status and members ----------------------------------------------------------------

async fn status(client: &Client, out: &Output) -> Result<(), String> {
    // Ask every endpoint at once: an unreachable one costs one timeout, not one each.
    let asks: Vec<_> = client
        .endpoints()
        .iter()
        .map(|endpoint| {
            let client = client.clone();
            let endpoint = endpoint.clone();
            tokio::spawn(async move {
                let answer = client.status_of(&endpoint).await;
                (endpoint, answer)
            })
        })
        .collect();
    let mut answers: Vec<(String, Result<StatusReply, ClientError>)> = Vec::new();
    for ask in asks {
        answers.push(
            ask.await
                .map_err(|error| format!("status task failed: {error}"))?,
        );
    }
    let document = Value::Array(
        answers
            .iter()
            .map(|(endpoint, answer)| match answer {
                Ok(status) => json!({
                    "endpoint": endpoint,
                    "reachable": true,
                    "id": status.id,
                    "role": status.role,
                    "term": status.term,
                    "leader_id": status.leader_id,
                    "leader_grpc_addr": status.leader_grpc_addr,
                    "commit_index": status.commit_index,
                    "applied_index": status.applied_index,
                    "last_log_index": status.last_log_index,
                    "snapshot_index": status.snapshot_index,
                    "grpc_addr": status.grpc_addr,
                    "http_addr": status.http_addr,
                }),
                Err(error) => json!({
                    "endpoint": endpoint,
                    "reachable": false,
                    "error": error.to_string(),
                }),
            })
            .collect(),
    );
    out.emit(&document, || {
        let mut rows = table(&[
            "id", "role", "term", "leader", "commit", "applied", "last log", "snapshot", "gRPC",
            "HTTP",
        ]);
        for (endpoint, answer) in &answers {
            match answer {
                Ok(status) => rows.add_row(vec![
                    status.id.to_string(),
                    status.role.clone(),
                    status.term.to_string(),
                    or_dash(status.leader_id),
                    status.commit_index.to_string(),
                    status.applied_index.to_string(),
                    status.last_log_index.to_string(),
                    status.snapshot_index.to_string(),
                    status.grpc_addr.clone(),
                    status.http_addr.clone(),
                ]),
                Err(_) => rows.add_row(vec![
                    "-".to_owned(),
                    "unreachable".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    endpoint.clone(),
                    "-".to_owned(),
                ]),
            };
        }
        say!("{rows}");
        for (endpoint, answer) in &answers {
            match answer {
                // An unreachable node's error already names it.
                Err(error @ ClientError::Unavailable { .. }) => eprintln!("{error}"),
                Err(error) => eprintln!("{endpoint}: {error}"),
                Ok(_) => {}
            }
        }
    });
    if answers.iter().all(|(_, answer)| answer.is_err()) {
        return Err(format!(
            "no endpoint answered ({})",
            client.endpoints().join(", ")
        ));
    }
    Ok(())
}

async fn members(client: &Client, out: &Output) -> Result<(), String> {
    let status = client
        .status()
        .await
        .map_err(|error| failed("cluster status", &error))?;
    let document = json!({
        "leader_id": status.leader_id,
        "members": status.members.iter().map(member_json).collect::<Vec<_>>(),
    });
    out.emit(&document, || {
        say!("{}", members_table(&status.members));
    });
    Ok(())
}

fn member_json(member: &Member) -> Value {
    json!({
        "id": member.id,
        "voter": member.voter,
        "grpc_addr": member.grpc_addr,
        "http_addr": member.http_addr,
    })
}

fn members_table(members: &[Member]) -> Table {
    table_of(&["id", "kind", "gRPC", "HTTP"], members, |member| {
        vec![
            member.id.to_string(),
            if member.voter { "voter" } else { "learner" }.to_owned(),
            member.grpc_addr.clone(),
            member.http_addr.clone(),
        ]
    })
}

// ---- snapshots -------------------------------------------------------------------------

async fn export(
    client: &Client,
    out: &Output,
    file: &std::path::Path,
    endpoint: Option<&str>,
) -> Result<(), String> {
    let header = crate::backup::export(client, endpoint, file).await?;
    let document = json!({
        "file": file.display().to_string(),
        "node_id": header.node_id,
        "last_log_term": header.last_log_term,
        "last_log_index": header.last_log_index,
        "exported_at_ms": header.exported_at_ms,
        "data_bytes": header.data_bytes,
        "data_sha256": header.data_sha256,
        "ct_entries": header.ct_entries,
        "members": header.members.iter().map(|member| json!({
            "id": member.id,
            "grpc_addr": member.grpc_addr,
            "http_addr": member.http_addr,
            "voter": member.voter,
        })).collect::<Vec<_>>(),
    });
    out.emit(&document, || {
        say!(
            "exported the state at log index {} (term {}) from node {} into {}: {} bytes, \
             SHA-256 {}",
            header.last_log_index,
            header.last_log_term,
            header.node_id,
            file.display(),
            header.data_bytes,
            header.data_sha256
        );
        if header.ct_entries > 0 {
            say!(
                "with the CT log's entries 0 to {} from the node's database",
                header.ct_entries - 1
            );
        }
        let ids: Vec<u64> = header.members.iter().map(|member| member.id).collect();
        say!("members at that index: {}", join_ids(&ids));
    });
    Ok(())
}

async fn snapshot(client: &Client, out: &Output, endpoints: &[String]) -> Result<(), String> {
    let mut results = Vec::new();
    for endpoint in endpoints {
        let result = client.trigger_snapshot(endpoint).await;
        results.push((endpoint.clone(), result));
    }
    let document = Value::Array(
        results
            .iter()
            .map(|(endpoint, result)| match result {
                Ok(reply) => {
                    json!({ "endpoint": endpoint, "snapshot_index": reply.snapshot_index })
                }
                Err(error) => json!({
                    "endpoint": endpoint,
                    "error": error.to_string(),
                    "reason": error.reason(),
                }),
            })
            .collect(),
    );
    out.emit(&document, || {
        let mut rows = table(&["endpoint", "snapshot index"]);
        for (endpoint, result) in &results {
            let cell = match result {
                Ok(reply) => reply.snapshot_index.to_string(),
                Err(error) => format!("failed: {error}"),
            };
            rows.add_row(vec![endpoint.clone(), cell]);
        }
        say!("{rows}");
    });
    every_endpoint_ok("snapshot", &results)
}

// ---- reload ----------------------------------------------------------------------------

async fn reload(client: &Client, out: &Output, endpoints: &[String]) -> Result<(), String> {
    let mut results = Vec::new();
    for endpoint in endpoints {
        let result = client.reload(endpoint).await;
        results.push((endpoint.clone(), result));
    }
    let document = Value::Array(
        results
            .iter()
            .map(|(endpoint, result)| match result {
                Ok(reply) => json!({
                    "endpoint": endpoint,
                    "changed": reply.changed,
                    "ignored": reply.ignored,
                }),
                Err(error) => json!({
                    "endpoint": endpoint,
                    "error": error.to_string(),
                    "reason": error.reason(),
                }),
            })
            .collect(),
    );
    out.emit(&document, || {
        let mut rows = table(&["endpoint", "changed", "ignored until restart"]);
        for (endpoint, result) in &results {
            let (changed, ignored) = match result {
                Ok(reply) if reply.changed.is_empty() => {
                    ("nothing".to_owned(), reply.ignored.join(", "))
                }
                Ok(reply) => (reply.changed.join(", "), reply.ignored.join(", ")),
                Err(error) => (format!("failed: {error}"), String::new()),
            };
            rows.add_row(vec![endpoint.clone(), changed, ignored]);
        }
        say!("{rows}");
    });
    every_endpoint_ok("reload", &results)
}

// ---- leases ----------------------------------------------------------------------------

async fn leases(client: &Client, out: &Output, command: LeasesCommand) -> Result<(), String> {
    match command {
        LeasesCommand::List { start_after, limit } => {
            let leases = list_leases(client, start_after, limit).await?;
            let document = json!({ "leases": leases.iter().map(lease_json).collect::<Vec<_>>() });
            out.emit(&document, || {
                if leases.is_empty() {
                    say!("No live leases.");
                } else {
                    say!("{}", leases_table(&leases));
                }
            });
        }
        LeasesCommand::Get { name } => {
            let lease = client
                .get_lease(name.as_str())
                .await
                .map_err(|error| failed(&format!("lease {name:?}"), &error))?;
            out.lease(&format!("Lease {name:?}:"), &lease, json!({}));
        }
        LeasesCommand::Acquire {
            name,
            holder,
            ttl_ms,
        } => {
            let reply = client
                .acquire(name.as_str(), holder.as_str(), ttl_ms)
                .await
                .map_err(|error| failed(&format!("acquire {name:?}"), &error))?;
            let lease = reply
                .lease
                .clone()
                .ok_or_else(|| format!("acquire {name:?}: the node's reply has no lease"))?;
            out.lease(
                &acquired_headline(&name, &reply),
                &lease,
                json!({ "how": how_name(reply.how), "previous_holder": reply.previous_holder }),
            );
        }
        LeasesCommand::Renew {
            name,
            holder,
            ttl_ms,
        } => {
            let reply = client
                .renew(name.as_str(), holder.as_str(), ttl_ms)
                .await
                .map_err(|error| failed(&format!("renew {name:?}"), &error))?;
            let lease = reply
                .lease
                .ok_or_else(|| format!("renew {name:?}: the node's reply has no lease"))?;
            out.lease(&format!("Renewed {name:?}."), &lease, json!({}));
        }
        LeasesCommand::Release { name, holder } => {
            let reply = client
                .release(name.as_str(), holder.as_str())
                .await
                .map_err(|error| failed(&format!("release {name:?}"), &error))?;
            let lease = reply
                .lease
                .ok_or_else(|| format!("release {name:?}: the node's reply has no lease"))?;
            out.lease(
                &format!("Released {name:?}; it was:"),
                &lease,
                json!({ "released": true }),
            );
        }
        LeasesCommand::Check { name, token } => {
            let reply = client
                .check_fence(name.as_str(), token)
                .await
                .map_err(|error| failed(&format!("check {name:?}"), &error))?;
            print_fence(out, &name, token, &reply);
            if !reply.valid {
                return Err(format!(
                    "token {token} is not the live grant's of {name:?}: {}",
                    reply.reason
                ));
            }
        }
    }
    Ok(())
}

/// Every page from `start_after`, or one page when `limit` is given. `fetch` asks for the page
/// after a cursor; `cursor_of` names the item the next page starts after.
async fn collect_pages<T, Fut>(
    start_after: Option<String>,
    limit: Option<u32>,
    mut fetch: impl FnMut(Option<String>, u32) -> Fut,
    cursor_of: impl Fn(&T) -> String,
) -> Result<Vec<T>, String>
where
    Fut: Future<Output = Result<Vec<T>, String>>,
{
    let mut cursor = start_after;
    let mut items = Vec::new();
    loop {
        let page = fetch(cursor.take(), limit.unwrap_or(0)).await?;
        let Some(last) = page.last() else { break };
        cursor = Some(cursor_of(last));
        items.extend(page);
        if limit.is_some() {
            break;
        }
    }
    Ok(items)
}

/// Every page of each of `keys` in turn, each from `after`; at most `limit` items in all when
/// given. `fetch(key, after, limit)` asks for the page after `after` of at most `limit` items (0:
/// the node's page size) and answers its items and the `after` of the next page (0: none).
async fn pages_by_id<'a, K, T, Fut>(
    keys: &'a [K],
    after: u64,
    limit: Option<u32>,
    mut fetch: impl FnMut(&'a K, u64, u32) -> Fut,
) -> Result<Vec<T>, String>
where
    Fut: Future<Output = Result<(Vec<T>, u64), String>>,
{
    let mut items = Vec::new();
    for key in keys {
        let mut cursor = after;
        loop {
            let left = match limit {
                Some(limit) => {
                    let left = u64::from(limit).saturating_sub(items.len() as u64);
                    if left == 0 {
                        return Ok(items);
                    }
                    u32::try_from(left).unwrap_or(u32::MAX)
                }
                None => 0,
            };
            let (page, next_after) = fetch(key, cursor, left).await?;
            items.extend(page);
            if next_after == 0 {
                break;
            }
            cursor = next_after;
        }
    }
    Ok(items)
}

async fn list_leases(
    client: &Client,
    start_after: Option<String>,
    limit: Option<u32>,
) -> Result<Vec<Lease>, String> {
    let fetch = |cursor: Option<String>, limit| async move {
        client
            .list_leases(cursor.as_deref(), limit)
            .await
            .map(|reply| reply.leases)
            .map_err(|error| failed("list leases", &error))
    };
    collect_pages(start_after, limit, fetch, |lease: &Lease| {
        lease.name.clone()
    })
    .await
}

fn how_name(how: i32) -> &'static str {
    match How::try_from(how) {
        Ok(How::Created) => "created",
        Ok(How::TookOverExpired) => "took-over-expired",
        Ok(How::Renewed) => "renewed",
        Ok(How::Unspecified) | Err(_) => "unspecified",
    }
}

fn acquired_headline(name: &str, reply: &AcquireReply) -> String {
    match How::try_from(reply.how) {
        Ok(How::Created) => format!("Acquired {name:?} (new lease)."),
        Ok(How::TookOverExpired) => format!(
            "Acquired {name:?}, taking it over from {:?} whose grant had expired.",
            reply.previous_holder
        ),
        Ok(How::Renewed) => format!("Already held {name:?}; renewed (same fencing token)."),
        Ok(How::Unspecified) | Err(_) => format!("Acquired {name:?}."),
    }
}

fn print_fence(out: &Output, name: &str, token: u64, reply: &CheckFenceReply) {
    let document = json!({
        "name": name,
        "fencing_token": token,
        "valid": reply.valid,
        "reason": reply.reason,
        "current_token": reply.current_token,
    });
    out.emit(&document, || {
        let mut rows = table(&["lease", "token", "valid", "current token", "reason"]);
        rows.add_row(vec![
            name.to_owned(),
            token.to_string(),
            if reply.valid { "yes" } else { "no" }.to_owned(),
            or_dash(reply.current_token),
            reply.reason.clone(),
        ]);
        say!("{rows}");
    });
}

fn lease_json(lease: &Lease) -> Value {
    json!({
        "name": lease.name,
        "holder": lease.holder,
        "fencing_token": lease.fencing_token,
        "granted_at_ms": lease.granted_at_ms,
        "renewed_at_ms": lease.renewed_at_ms,
        "ttl_ms": lease.ttl_ms,
        "expires_at_ms": lease.expires_at_ms,
    })
}

fn leases_table(leases: &[Lease]) -> Table {
    let now = now_ms();
    table_of(
        &[
            "name",
            "holder",
            "token",
            "TTL",
            "expires in",
            "expires at (ms)",
        ],
        leases,
        |lease| {
            vec![
                lease.name.clone(),
                lease.holder.clone(),
                lease.fencing_token.to_string(),
                human_ms(lease.ttl_ms),
                now.map_or_else(
                    || "?".to_owned(),
                    |now| match lease.expires_at_ms.checked_sub(now) {
                        Some(left) => human_ms(left),
                        None => "expired".to_owned(),
                    },
                ),
                lease.expires_at_ms.to_string(),
            ]
        },
    )
}

// ---- challenge tokens ------------------------------------------------------------------

async fn tokens(client: &Client, out: &Output, command: TokensCommand) -> Result<(), String> {
    match command {
        TokensCommand::List { start_after, limit } => {
            let challenges = list_challenges(client, start_after, limit).await?;
            let document = json!({
                "tokens": challenges.iter().map(challenge_json).collect::<Vec<_>>(),
            });
            out.emit(&document, || {
                if challenges.is_empty() {
                    say!("No stored tokens.");
                } else {
                    say!("{}", challenges_table(&challenges));
                }
            });
        }
        TokensCommand::Get { token } => {
            let challenge = client
                .get_challenge(token.as_str())
                .await
                .map_err(|error| failed(&format!("token {token:?}"), &error))?;
            out.emit(&challenge_json(&challenge), || {
                say!("{}", challenges_table(std::slice::from_ref(&challenge)));
            });
        }
        TokensCommand::Put {
            token,
            key_authorization,
        } => {
            let reply = client
                .put_challenge(token.as_str(), key_authorization)
                .await
                .map_err(|error| failed(&format!("put token {token:?}"), &error))?;
            out.emit(
                &json!({ "token": token, "replaced": reply.replaced }),
                || {
                    if reply.replaced {
                        say!("Replaced the key authorization of {token:?}.");
                    } else {
                        say!("Stored {token:?}.");
                    }
                },
            );
        }
        TokensCommand::Delete { token } => {
            let reply = client
                .delete_challenge(token.as_str())
                .await
                .map_err(|error| failed(&format!("delete token {token:?}"), &error))?;
            out.emit(&json!({ "token": token, "existed": reply.existed }), || {
                if reply.existed {
                    say!("Deleted {token:?}.");
                } else {
                    say!("{token:?} was not stored; nothing to delete.");
                }
            });
        }
        TokensCommand::Purge { older_than_ms } => {
            let reply = client
                .purge_challenges(older_than_ms)
                .await
                .map_err(|error| failed("purge tokens", &error))?;
            out.emit(
                &json!({ "older_than_ms": older_than_ms, "removed": reply.removed }),
                || {
                    say!(
                        "Removed {} token(s) stored more than {} ago.",
                        reply.removed,
                        human_ms(older_than_ms)
                    );
                },
            );
        }
    }
    Ok(())
}

async fn list_challenges(
    client: &Client,
    start_after: Option<String>,
    limit: Option<u32>,
) -> Result<Vec<Challenge>, String> {
    let fetch = |cursor: Option<String>, limit| async move {
        client
            .list_challenges(cursor.as_deref(), limit)
            .await
            .map(|reply| reply.challenges)
            .map_err(|error| failed("list tokens", &error))
    };
    collect_pages(start_after, limit, fetch, |challenge: &Challenge| {
        challenge.token.clone()
    })
    .await
}

fn challenge_json(challenge: &Challenge) -> Value {
    json!({
        "token": challenge.token,
        "key_authorization": challenge.key_authorization,
        "stored_at_ms": challenge.stored_at_ms,
    })
}

fn challenges_table(challenges: &[Challenge]) -> Table {
    let now = now_ms();
    table_of(
        &["token", "key authorization", "age", "stored at (ms)"],
        challenges,
        |challenge| {
            vec![
                challenge.token.clone(),
                challenge.key_authorization.clone(),
                now.map_or_else(
                    || "?".to_owned(),
                    |now| human_ms(now.saturating_sub(challenge.stored_at_ms)),
                ),
                challenge.stored_at_ms.to_string(),
            ]
        },
    )
}

/// Command lines parsed as `certus ctl` parses them, for the tests of every `ctl` command.
#[cfg(test)]
mod testing {
    use std::fmt::Debug;

    use clap::{FromArgMatches, Parser, Subcommand};

    use super::CtlArgs;

    /// `certus ctl ARGS…`.
    fn try_parse_ctl(args: &[&str]) -> Result<CtlArgs, clap::Error> {
        #[derive(Debug, Parser)]
        struct Ctl {
            #[command(flatten)]
            ctl: CtlArgs,
        }
        Ctl::try_parse_from(std::iter::once("ctl").chain(args.iter().copied())).map(|cli| cli.ctl)
    }

    /// `NAME ARGS…`, a command `NAME` whose subcommands are `C`.
    fn try_parse<C: Subcommand + FromArgMatches>(
        name: &str,
        args: &[&str],
    ) -> Result<C, clap::Error> {
        #[derive(Debug, Parser)]
        struct Command<C: Subcommand + FromArgMatches> {
            #[command(subcommand)]
            command: C,
        }
        Command::<C>::try_parse_from(std::iter::once(name).chain(args.iter().copied()))
            .map(|cli| cli.command)
    }

    /// `certus ctl ARGS…`, parsed.
    pub(super) fn parse_ctl(args: &[&str]) -> CtlArgs {
        try_parse_ctl(args).unwrap_or_else(|error| panic!("{args:?}: {error}"))
    }

    /// Why the parser refuses `certus ctl ARGS…`.
    pub(super) fn parse_ctl_error(args: &[&str]) -> String {
        try_parse_ctl(args).expect_err("refused").to_string()
    }

    /// `NAME ARGS…`, parsed as the subcommands `C` of `NAME`.
    pub(super) fn parse<C: Subcommand + FromArgMatches>(name: &str, args: &[&str]) -> C {
        try_parse(name, args).unwrap_or_else(|error| panic!("{args:?}: {error}"))
    }

    /// Why the parser refuses `NAME ARGS…` as the subcommands `C` of `NAME`.
    pub(super) fn parse_error<C: Subcommand + FromArgMatches + Debug>(
        name: &str,
        args: &[&str],
    ) -> String {
        try_parse::<C>(name, args).expect_err("refused").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{parse_ctl as parse, parse_ctl_error as parse_error};
    use super::*;

    #[test]
    fn the_default_endpoints_are_the_up_cluster() {
        let args = parse(&["status"]);
        assert_eq!(
            args.endpoints,
            ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
        );
        assert!(!args.json);
    }

    #[test]
    fn endpoints_are_comma_separated_and_json_is_global() {
        let args = parse(&["--endpoints", "a:1,b:2", "leases", "get", "x", "--json"]);
        assert_eq!(args.endpoints, ["a:1", "b:2"]);
        assert!(args.json);
        assert!(matches!(
            args.command,
            CtlCommand::Leases { command: LeasesCommand::Get { ref name } } if name == "x"
        ));
    }

    #[test]
    fn set_voters_takes_a_comma_separated_list() {
        let args = parse(&["members", "set-voters", "1,2,3", "--retain"]);
        assert!(matches!(
            args.command,
            CtlCommand::Members {
                command: Some(MembersCommand::SetVoters { ref voters, retain: true })
            } if voters == &[1, 2, 3]
        ));
        let args = parse(&["members"]);
        assert!(matches!(
            args.command,
            CtlCommand::Members { command: None }
        ));
    }

    #[test]
    fn set_address_takes_either_address_and_needs_one() {
        let args = parse(&[
            "members",
            "set-address",
            "--id",
            "2",
            "--grpc-addr",
            "node-2.certus.test:7101",
        ]);
        let CtlCommand::Members {
            command:
                Some(MembersCommand::SetAddress {
                    id,
                    grpc_addr,
                    http_addr,
                }),
        } = args.command
        else {
            panic!("not set-address: {:?}", args.command);
        };
        assert_eq!(id, 2);
        assert_eq!(
            grpc_addr.map(|addr| addr.to_string()).as_deref(),
            Some("node-2.certus.test:7101")
        );
        assert!(http_addr.is_none());
        let error = parse_error(&["members", "set-address", "--id", "2"]);
        assert!(error.contains("--grpc-addr"), "{error}");
        let error = parse_error(&[
            "members",
            "set-address",
            "--id",
            "2",
            "--grpc-addr",
            "no-port",
        ]);
        assert!(error.contains("--grpc-addr"), "{error}");
    }

    #[test]
    fn every_subcommand_parses() {
        for args in [
            &["status"][..],
            &[
                "members",
                "add-learner",
                "--id",
                "4",
                "--grpc-addr",
                "a:1",
                "--http-addr",
                "a:2",
            ],
            &[
                "members",
                "set-address",
                "--id",
                "2",
                "--grpc-addr",
                "node-2.certus.test:7101",
                "--http-addr",
                "node-2.certus.test:7181",
            ],
            &[
                "members",
                "set-address",
                "--id",
                "2",
                "--http-addr",
                "10.0.0.2:7181",
            ],
            &["snapshot"],
            &["snapshot", "--endpoint", "127.0.0.1:7101"],
            &["reload"],
            &["reload", "--endpoint", "127.0.0.1:7101"],
            &["leases", "list"],
            &["leases", "list", "--start-after", "a", "--limit", "10"],
            &[
                "leases", "acquire", "x", "--holder", "h", "--ttl-ms", "5000",
            ],
            &["leases", "renew", "x", "--holder", "h", "--ttl-ms", "5000"],
            &["leases", "release", "x", "--holder", "h"],
            &["leases", "check", "x", "--token", "7"],
            &["tokens", "list"],
            &["tokens", "get", "t"],
            &["tokens", "put", "t", "t.thumb"],
            &["tokens", "delete", "t"],
            &["tokens", "purge", "--older-than-ms", "60000"],
            &["log", "status"],
            &["log", "status", "--endpoint", "127.0.0.1:7102"],
            &["log", "sth"],
            &["log", "config"],
            &["log", "config", "set", "--watermark", "500"],
            &[
                "log",
                "config",
                "set",
                "--min-serving-nodes",
                "3",
                "--min-serving-permille",
                "750",
                "--watermark",
                "10",
                "--guard-window-ms",
                "0",
                "--signing-interval-ms",
                "50",
                "--sequencing-interval-ms",
                "60",
                "--report-ttl-ms",
                "5000",
            ],
            &["log", "freeze"],
            &["log", "unfreeze"],
            &["log", "add-chain", "chain.pem"],
            &["log", "add-chain", "chain.pem", "--precert"],
            &["log", "roots"],
        ] {
            parse(args);
        }
    }

    #[test]
    fn log_flags_are_checked_by_the_parser() {
        let error = parse_error(&["log", "config", "set", "--watermark", "many"]);
        assert!(error.contains("--watermark"), "{error}");
        let error = parse_error(&["log", "config", "set", "--min-serving-nodes=-1"]);
        assert!(error.contains("--min-serving-nodes"), "{error}");
        let error = parse_error(&["log", "add-chain"]);
        assert!(error.contains("<FILE>"), "{error}");
        let error = parse_error(&["log", "config", "set", "--bogus", "1"]);
        assert!(error.contains("--bogus"), "{error}");
    }
}
