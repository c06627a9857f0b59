//! `pipeline watch`: a node group's completions as they happen, one line each, from a stream
//! opened again after it breaks.

use certus_client::{Client, ClientError, NotificationKind};

use super::args::WatchArgs;
use super::render::{notification_json, notification_line};
use crate::ctl::{Output, failed};
use crate::limits::PIPELINE_WATCH_REOPENS_MAX;

/// `pipeline watch`: until its count is reached, the stream breaks too often, or Ctrl-C (how a
/// watch normally ends: not an error).
pub(super) async fn run(client: &Client, out: &Output, args: WatchArgs) -> Result<(), String> {
    tokio::select! {
        result = watch(client, out, args) => result,
        signal = tokio::signal::ctrl_c() => signal
            .map_err(|error| format!("pipeline watch: cannot wait for Ctrl-C: {error}")),
    }
}

async fn watch(client: &Client, out: &Output, args: WatchArgs) -> Result<(), String> {
    let what = "pipeline watch";
    let mut resume = args.after;
    let mut printed: u64 = 0;
    let mut reopens: u32 = 0;
    loop {
        if args.count.is_some_and(|count| printed >= count) {
            return Ok(());
        }
        let mut stream = client
            .watch_completions(args.node_group.as_deref(), resume, args.progress)
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
                    if args.count.is_some_and(|count| printed >= count) {
                        return Ok(());
                    }
                }
                Ok(None) => break "the node ended the stream".to_owned(),
                Err(status) => break ClientError::from_status(&status).to_string(),
            }
        };
        reopens += 1;
        if reopens > PIPELINE_WATCH_REOPENS_MAX {
            return Err(format!(
                "{what}: {ended} ({PIPELINE_WATCH_REOPENS_MAX} reopens failed)"
            ));
        }
        match resume {
            Some(seq) => eprintln!("{what}: {ended}; resuming after notification {seq}"),
            None => eprintln!("{what}: {ended}; resuming"),
        }
    }
}
