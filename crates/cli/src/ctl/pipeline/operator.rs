//! What an operator does: define pipelines, set switches, and look at the transactions in play,
//! the stuck ones, the queues, the notices and the configuration.

use certus_client::{Client, Notice, Pipeline, Transaction};
use serde_json::json;

use super::args::{ConfigChanges, SwitchCommand};
use super::render::{
    id_list, notice_json, notices_table, pipeline_json, pipelines_table, print_status, status_json,
    transaction_json, transactions_table,
};
use crate::ctl::settings::{self, ConfigCommand};
use crate::ctl::show::{human_ms, now_ms, text_or_null};
use crate::ctl::{Output, failed, pages_by_id};

/// `pipeline define`.
pub(super) async fn define(
    client: &Client,
    out: &Output,
    name: &str,
    node_group: &str,
) -> Result<(), String> {
    let reply = client
        .define_pipeline(name, node_group)
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
    Ok(())
}

/// `pipeline delete`.
pub(super) async fn delete(client: &Client, out: &Output, name: &str) -> Result<(), String> {
    let reply = client
        .delete_pipeline(name)
        .await
        .map_err(|error| failed(&format!("pipeline delete {name:?}"), &error))?;
    out.emit(&json!({ "name": name, "existed": reply.existed }), || {
        if reply.existed {
            say!("Deleted pipeline {name:?}.");
        } else {
            say!("Pipeline {name:?} was not defined; nothing to delete.");
        }
    });
    Ok(())
}

/// `pipeline list`.
pub(super) async fn list(
    client: &Client,
    out: &Output,
    after: Option<String>,
    limit: Option<u32>,
) -> Result<(), String> {
    let pipelines = list_pipelines(client, after, limit).await?;
    let document = json!({ "pipelines": pipelines.iter().map(pipeline_json).collect::<Vec<_>>() });
    out.emit(&document, || {
        if pipelines.is_empty() {
            say!("No pipelines.");
        } else {
            say!("{}", pipelines_table(&pipelines, now_ms()));
        }
    });
    Ok(())
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

/// `pipeline switch set` and `pipeline switch get`.
pub(super) async fn switch(
    client: &Client,
    out: &Output,
    command: SwitchCommand,
) -> Result<(), String> {
    match command {
        SwitchCommand::Set { name, value } => {
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
        SwitchCommand::Get { name } => {
            let value = client
                .get_switch(name.as_str())
                .await
                .map_err(|error| failed(&format!("pipeline switch get {name:?}"), &error))?;
            out.emit(&json!({ "name": name, "value": value }), || say!("{value}"));
        }
    }
    Ok(())
}

/// `pipeline in-play`.
pub(super) async fn in_play(
    client: &Client,
    out: &Output,
    node_group: Option<String>,
    limit: Option<u32>,
) -> Result<(), String> {
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
    let transactions = transactions_in_play(client, &groups, limit).await?;
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
    Ok(())
}

/// The transactions in play of `groups`, each group in id order, every page; at most `limit` in
/// all when given.
async fn transactions_in_play(
    client: &Client,
    groups: &[String],
    limit: Option<u32>,
) -> Result<Vec<Transaction>, String> {
    pages_by_id(groups, 0, limit, |group, after, limit| async move {
        let page = client
            .list_in_play(group.as_str(), after, limit)
            .await
            .map_err(|error| failed(&format!("pipeline in-play {group:?}"), &error))?;
        Ok((page.transactions, page.next_after))
    })
    .await
}

/// `pipeline stuck`.
pub(super) async fn stuck(
    client: &Client,
    out: &Output,
    min_running_ms: u64,
    limit: Option<u32>,
) -> Result<(), String> {
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
    Ok(())
}

/// `pipeline status`.
pub(super) async fn status(
    client: &Client,
    out: &Output,
    node_group: Option<&str>,
) -> Result<(), String> {
    let status = client
        .pipelines_status(node_group)
        .await
        .map_err(|error| failed("pipeline status", &error))?;
    out.emit(&status_json(&status), || print_status(&status));
    Ok(())
}

/// `pipeline notices`, or with `ack` `pipeline notices --ack`.
pub(super) async fn notices(client: &Client, out: &Output, ack: Option<u64>) -> Result<(), String> {
    if let Some(up_to) = ack {
        let reply = client
            .acknowledge_notices(up_to)
            .await
            .map_err(|error| failed(&format!("pipeline notices --ack {up_to}"), &error))?;
        out.emit(&json!({ "up_to": up_to, "removed": reply.removed }), || {
            say!("Dropped {} notice(s) up to {up_to}.", reply.removed);
        });
        return Ok(());
    }
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
    Ok(())
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

/// `pipeline config` and `pipeline config set`.
pub(super) async fn config(
    client: &Client,
    out: &Output,
    command: Option<ConfigCommand<ConfigChanges>>,
) -> Result<(), String> {
    let current = client
        .pipeline_config()
        .await
        .map_err(|error| failed("pipeline config", &error))?;
    settings::run(out, command, current, |wanted| async move {
        client
            .set_pipeline_config(wanted)
            .await
            .map_err(|error| failed("pipeline config set", &error))
    })
    .await
}
