//! `certus ctl pipeline`: transaction pipelines — define them, enqueue and follow transactions as
//! a producer, take and finish them as a worker, set switches, watch completions, and look at
//! the queues, the stuck list, the notices and the configuration as an operator.
//!
//! JSON documents (state, event, progress report) are shown as the strings the cluster stores,
//! byte for byte (in `--json` output too: `jq '.transaction.state | fromjson'`), so nothing is
//! reformatted or loses precision on the way.
//!
//! The subcommands and their flags are in `args`; what each does is with its users' other
//! subcommands (`producer`, `worker`, `operator`), the streams apart (`watch`, `export`, and
//! `stream_worker`, which runs a command per transaction); how answers are shown is in `render`.

use certus_client::Client;

use super::Output;

mod args;
mod export;
mod operator;
mod producer;
mod render;
mod stream_worker;
mod watch;
mod worker;

#[cfg(test)]
pub(super) use args::ConfigChanges;
pub(super) use args::PipelineCommand;

/// Runs `certus ctl pipeline …`.
pub(super) async fn run(
    client: &Client,
    out: &Output,
    command: PipelineCommand,
) -> Result<(), String> {
    match command {
        PipelineCommand::Define { name, node_group } => {
            operator::define(client, out, &name, &node_group).await
        }
        PipelineCommand::Delete { name } => operator::delete(client, out, &name).await,
        PipelineCommand::List { after, limit } => operator::list(client, out, after, limit).await,
        PipelineCommand::Enqueue(args) => producer::enqueue(client, out, &args).await,
        PipelineCommand::Get(args) => producer::get(client, out, args).await,
        PipelineCommand::Cancel { id } => producer::cancel(client, out, id).await,
        PipelineCommand::Dequeue(args) => worker::dequeue(client, out, args).await,
        PipelineCommand::Worker(args) => stream_worker::run(client, out, args).await,
        PipelineCommand::Complete(args) => worker::complete(client, out, args).await,
        PipelineCommand::Progress(args) => worker::progress(client, out, args).await,
        PipelineCommand::Requeue(args) => worker::requeue(client, out, args).await,
        PipelineCommand::Sleep(args) => worker::sleep(client, out, args).await,
        PipelineCommand::Switch { command } => operator::switch(client, out, command).await,
        PipelineCommand::Watch(args) => watch::run(client, out, args).await,
        PipelineCommand::InPlay { node_group, limit } => {
            operator::in_play(client, out, node_group, limit).await
        }
        PipelineCommand::Stuck {
            min_running_ms,
            limit,
        } => operator::stuck(client, out, min_running_ms, limit).await,
        PipelineCommand::Status { node_group } => {
            operator::status(client, out, node_group.as_deref()).await
        }
        PipelineCommand::Notices { ack } => operator::notices(client, out, ack).await,
        PipelineCommand::Export(args) => export::run(client, args).await,
        PipelineCommand::Config { command } => operator::config(client, out, command).await,
    }
}

/// What the tests of every part of `ctl pipeline` build on.
#[cfg(test)]
mod testing {
    use certus_client::{PipelineConfig, Transaction, TxStatus};

    use super::PipelineCommand;
    use super::render::status_text;

    /// `pipeline ARGS…`, parsed.
    pub(super) fn parse(args: &[&str]) -> PipelineCommand {
        crate::ctl::testing::parse("pipeline", args)
    }

    /// Why the parser refuses `pipeline ARGS…`.
    pub(super) fn parse_error(args: &[&str]) -> String {
        crate::ctl::testing::parse_error::<PipelineCommand>("pipeline", args)
    }

    /// `certus ctl ARGS…`, parsed.
    pub(super) use crate::ctl::testing::parse_ctl;

    /// The configuration a cluster starts with.
    pub(super) const DEFAULTS: PipelineConfig = PipelineConfig {
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

    /// Transaction 17 of node group `payments` with `status`, its state a large number.
    pub(super) fn transaction(status: TxStatus) -> Transaction {
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
}
