//! What a worker does: take transactions of a node group, then finish each (`complete`), report
//! its progress, hand it on to a queue (`requeue`) or put it to sleep.

use certus_client::{
    Client, QueueType, RequeueRequest, SleepRequest, requeue_request, sleep_request,
};
use serde_json::json;

use super::args::{
    Claim, CompleteArgs, DequeueArgs, ProgressArgs, RequeueArgs, SleepArgs, read_optional,
};
use super::render::{queue_name, status_text, transaction_json, transactions_table};
use crate::ctl::show::{now_ms, relative};
use crate::ctl::{Output, failed};

/// `pipeline dequeue`.
pub(super) async fn dequeue(
    client: &Client,
    out: &Output,
    args: DequeueArgs,
) -> Result<(), String> {
    let DequeueArgs {
        node_group,
        worker,
        max,
    } = args;
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
    Ok(())
}

/// `pipeline complete`.
pub(super) async fn complete(
    client: &Client,
    out: &Output,
    args: CompleteArgs,
) -> Result<(), String> {
    let CompleteArgs {
        claim: Claim { id, token },
        status,
        state,
    } = args;
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
    Ok(())
}

/// `pipeline progress`.
pub(super) async fn progress(
    client: &Client,
    out: &Output,
    args: ProgressArgs,
) -> Result<(), String> {
    let ProgressArgs {
        claim: Claim { id, token },
        report,
    } = args;
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
    Ok(())
}

/// `pipeline requeue`.
pub(super) async fn requeue(
    client: &Client,
    out: &Output,
    args: RequeueArgs,
) -> Result<(), String> {
    let Claim { id, token } = args.claim;
    let request = RequeueRequest {
        transaction_id: id,
        claim_token: token,
        route: match (args.route.pipeline, args.route.node_group) {
            (Some(pipeline), _) => Some(requeue_request::Route::Pipeline(pipeline)),
            (None, Some(group)) => Some(requeue_request::Route::NodeGroup(group)),
            (None, None) => None,
        },
        queue: QueueType::from(args.queue).into(),
        state: read_optional(args.state.as_ref(), "--state")?,
        event: read_optional(args.event.as_ref(), "--event")?,
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
    Ok(())
}

/// `pipeline sleep`.
pub(super) async fn sleep(client: &Client, out: &Output, args: SleepArgs) -> Result<(), String> {
    let Claim { id, token } = args.claim;
    let request = SleepRequest {
        transaction_id: id,
        claim_token: token,
        wake: match (args.wake.until_ms, args.wake.for_ms) {
            (Some(until_ms), _) => Some(sleep_request::Wake::UntilMs(until_ms)),
            (None, Some(for_ms)) => Some(sleep_request::Wake::ForMs(for_ms)),
            (None, None) => None,
        },
        switch: args.switch.clone().unwrap_or_default(),
        queue: QueueType::from(args.queue).into(),
        state: read_optional(args.state.as_ref(), "--state")?,
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
        if let Some(switch) = &args.switch {
            line.push_str(&format!(" or until switch {switch:?} changes"));
        }
        say!("{line}.");
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use certus_client::TxStatus;

    use crate::ctl::pipeline::args::{NewRoute, PipelineCommand, Wake};
    use crate::ctl::pipeline::testing::{parse, parse_error};

    use super::*;

    #[test]
    fn worker_flags_are_checked_by_the_parser() {
        let PipelineCommand::Complete(CompleteArgs { status, state, .. }) = parse(&[
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

        let PipelineCommand::Dequeue(DequeueArgs { max, .. }) =
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
        let PipelineCommand::Sleep(SleepArgs { wake, queue, .. }) = parse(&[
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

        let PipelineCommand::Requeue(RequeueArgs { route, .. }) =
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
}
