//! What a producer does: enqueue a transaction, follow it (`get`, long-polling with `--wait`),
//! cancel it.

use std::time::{Duration, Instant};

use certus_client::{
    Client, EnqueueRequest, GetStateReply, GetStateRequest, QueueType, TxMetadata, WaitOutcome,
    enqueue_request,
};
use serde_json::json;

use super::args::{EnqueueArgs, GetArgs, read_optional};
use super::render::{cancel_json, cancel_line, print_state};
use crate::ctl::{Output, WAIT_CHUNK, failed};

/// `pipeline enqueue`.
pub(super) async fn enqueue(
    client: &Client,
    out: &Output,
    args: &EnqueueArgs,
) -> Result<(), String> {
    let request = enqueue_request(args)?;
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

/// `pipeline get`.
pub(super) async fn get(client: &Client, out: &Output, args: GetArgs) -> Result<(), String> {
    let request = GetStateRequest {
        transaction_id: args.id.unwrap_or(0),
        external_id: args.external_id.unwrap_or_default(),
        wait_ms: 0,
        after_seq: args.after_seq,
        mark_replied: args.mark_replied,
    };
    let reply = long_poll(client, request, Duration::from_secs(args.wait)).await?;
    print_state(out, &reply);
    Ok(())
}

/// `GetState`, long-polling for up to `wait` in chunks: until the transaction finishes, its
/// worker reports progress, notifications were missed, or the time is up.
async fn long_poll(
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

/// `pipeline cancel`.
pub(super) async fn cancel(client: &Client, out: &Output, id: u64) -> Result<(), String> {
    let reply = client
        .cancel_transaction(id)
        .await
        .map_err(|error| failed(&format!("pipeline cancel {id}"), &error))?;
    out.emit(&cancel_json(&reply), || say!("{}", cancel_line(&reply)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::pipeline::args::{PipelineCommand, Queue};
    use crate::ctl::pipeline::testing::{parse, parse_error};

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
}
