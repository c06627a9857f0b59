//! `certus`: run a local cluster (`up`), one node (`serve`), talk to a cluster (`ctl`), or make
//! a CT log key (`ct-keygen`), back up and restore (`ctl snapshot export`, `restore`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

mod backup;
mod bench;
mod ca_files;
mod cluster;
mod connect;
mod ct_key;
mod ctl;
mod limits;
mod pki;
mod probe;
mod rebuild;
mod serve;
mod systemd;
mod up;

/// Certus: replicated coordination state for certificate infrastructure.
#[derive(Debug, Parser)]
#[command(name = "certus", version, about)]
struct Cli {
    /// How log lines are written to stderr: `text` for people, `json` (one object per line,
    /// with the span fields) for log collectors.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "CERTUS_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`, `span`, `spans`.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a local cluster: 3 nodes in this process on 127.0.0.1, data under ./certus-data.
    Up(up::UpArgs),
    /// Run one node from a config file, environment and flags.
    Serve(serve::ServeArgs),
    /// Talk to a running cluster (by default the one `certus up` starts).
    Ctl(ctl::CtlArgs),
    /// Measure this machine: an embedded 3-node cluster under concurrent clients.
    Bench(bench::BenchArgs),
    /// Generate a CT log signing key (ECDSA P-256, PKCS#8 PEM) and print its log id.
    CtKeygen(ct_key::KeygenArgs),
    /// The cluster's transport PKI: a CA, node and client certificates, bearer tokens.
    Pki(pki::PkiArgs),
    /// Replace a stopped node's damaged data with a copy caught up from its peers.
    Rebuild(rebuild::RebuildArgs),
    /// Ask one node whether it is ready (or alive, with --live): exit 0 if so, 1 if not.
    Probe(probe::ProbeArgs),
    /// Seed a new node's data directory from a backup (`certus ctl snapshot export`).
    Restore(backup::RestoreArgs),
}

// mimalloc: a node allocates and frees many small buffers per request on every core (HTTP/2
// frames, protobuf messages, Raft entries); glibc's malloc spent about 9% of the CPU of the
// pipelines benchmark in allocation and its arena locks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("certus: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) => up::run(args).await,
            Command::Serve(args) => serve::run(args).await,
            Command::Ctl(args) => ctl::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::CtKeygen(args) => ct_key::run(&args),
            Command::Pki(args) => pki::run(args),
            Command::Rebuild(args) => rebuild::run(args).await,
            Command::Probe(args) => probe::run(args).await,
            Command::Restore(args) => backup::run(&args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("certus: {message}");
            ExitCode::FAILURE
        }
    }
}

/// What is logged without `RUST_LOG`: this project at info; openraft only at error, since its
/// warnings are routine (an ignored vote reply, a peer being retried) and the node logs what an
/// operator needs of them itself (leader changes, peers lost and back).
const DEFAULT_LOG_FILTER: &str = "info,openraft=error,sled=warn,h2=warn,hyper=warn";

/// Logs go to stderr, filtered by `RUST_LOG` (default [`DEFAULT_LOG_FILTER`], without openraft's
/// per-attempt replication errors: see [`is_routine`]).
fn init_tracing(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (filter, default) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, false),
        Err(_) => (EnvFilter::new(DEFAULT_LOG_FILTER), true),
    };
    let routine =
        tracing_subscriber::filter::filter_fn(move |metadata| !(default && is_routine(metadata)));
    let colours = log_colours(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR"),
    );
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.finish().with(routine).init(),
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .finish()
            .with(routine)
            .init(),
    }
}

/// Whether text logs are coloured: only on a terminal, and not when `NO_COLOR` is set to
/// anything (no-color.org). tracing-subscriber colours whatever stderr is, so journald, a log
/// file or a container's log collector got escape codes in every line.
fn log_colours(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// openraft logs every failed RPC to an unreachable or slow peer as an ERROR — every heartbeat
/// while a peer is down, and every vote request at a start before the others listen. The node
/// says once that a peer was lost and once that it is back. Those events are, in 0.9:
/// replication's `RPCError` (an `err` field), and the core's vote and read-confirmation failures
/// (an `error` and the peer as `target`). A storage error in replication (its field is `error`)
/// and the core's other errors (no peer named) stay.
fn is_routine(metadata: &tracing::Metadata<'_>) -> bool {
    if *metadata.level() != tracing::Level::ERROR {
        return false;
    }
    let fields = metadata.fields();
    match metadata.target() {
        "openraft::replication" => fields.field("err").is_some(),
        "openraft::core::raft_core" => {
            fields.field("error").is_some() && fields.field("target").is_some()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(log_colours(true, None));
        assert!(log_colours(true, Some("".into())));
        assert!(!log_colours(true, Some("1".into())));
        assert!(!log_colours(false, None));
        assert!(!log_colours(false, Some("".into())));
    }

    #[test]
    fn a_bearer_token_starting_with_a_hyphen_is_a_value_not_a_flag() {
        let cli = Cli::try_parse_from(["certus", "ctl", "--bearer-token", "-p4Xk", "status"])
            .expect("parses");
        let rendered = format!("{cli:?}");
        assert!(rendered.contains("\"-p4Xk\""), "{rendered}");
    }

    #[test]
    fn only_openraft_errors_about_unreachable_peers_are_routine() {
        struct Probe;
        impl tracing::Subscriber for Probe {
            fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
                tracing::span::Id::from_u64(1)
            }
            fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
            fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
            fn event(&self, event: &tracing::Event<'_>) {
                let metadata = event.metadata();
                let seen = (metadata.target().to_owned(), is_routine(metadata));
                // Events are recorded through a shared reference: keep them in a thread-local.
                SEEN.with(|list| list.borrow_mut().push(seen));
            }
            fn enter(&self, _: &tracing::span::Id) {}
            fn exit(&self, _: &tracing::span::Id) {}
        }
        thread_local! {
            static SEEN: std::cell::RefCell<Vec<(String, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        tracing::subscriber::with_default(Probe, || {
            tracing::error!(target: "openraft::replication", err = "unreachable", "RPCError");
            tracing::error!(target: "openraft::replication", error = "disk", "error replication");
            tracing::warn!(target: "openraft::replication", err = "unreachable", "RPCError");
            tracing::error!(target: "openraft::core", err = "x", "other");
            tracing::error!(target: "openraft::core::raft_core", error = "unreachable", target = "2", "while requesting vote");
            tracing::warn!(target: "openraft::core::raft_core", error = "unreachable", target = "2", "while requesting vote");
            tracing::error!(target: "openraft::core::raft_core", error = "disk", "quit RaftCore::main on error");
            tracing::error!(target: "openraft::core::raft_core", target = "2", "fail to join task");
        });
        let seen = SEEN.with(|list| list.borrow().clone());
        let routine: Vec<bool> = seen.iter().map(|(_, routine)| *routine).collect();
        assert_eq!(
            routine,
            [true, false, false, false, true, false, false, false],
            "{seen:?}"
        );
    }

    #[test]
    fn the_log_format_is_text_unless_json_is_asked_for_before_or_after_the_command() {
        let default = Cli::try_parse_from(["certus", "ctl", "status"]).expect("parses");
        assert_eq!(default.log_format, LogFormat::Text);
        let before = Cli::try_parse_from(["certus", "--log-format", "json", "ctl", "status"])
            .expect("parses");
        assert_eq!(before.log_format, LogFormat::Json);
        let after = Cli::try_parse_from(["certus", "up", "--log-format", "json"]).expect("parses");
        assert_eq!(after.log_format, LogFormat::Json);
        assert!(
            Cli::try_parse_from(["certus", "--log-format", "xml", "up"]).is_err(),
            "only text or json"
        );
    }

    #[test]
    fn backups_are_exported_by_ctl_and_restored_from_a_config_or_from_flags_not_both() {
        for args in [
            &["certus", "ctl", "snapshot", "export", "backup.certus"][..],
            &[
                "certus",
                "ctl",
                "snapshot",
                "export",
                "b",
                "--endpoint",
                "127.0.0.1:7101",
            ],
            &["certus", "ctl", "snapshot", "--endpoint", "127.0.0.1:7101"],
            &["certus", "restore", "b", "--config", "node.toml"],
            &[
                "certus",
                "restore",
                "b",
                "--id",
                "4",
                "--data-dir",
                "d",
                "--member",
                "4=x",
            ],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
        for args in [
            &[
                "certus",
                "restore",
                "b",
                "--config",
                "node.toml",
                "--id",
                "4",
            ][..],
            &["certus", "restore", "b", "--id", "4"],
            &["certus", "ctl", "snapshot", "export"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
    }
}
