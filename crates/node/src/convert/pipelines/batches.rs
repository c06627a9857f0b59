//! `EnqueueBatch` and `CompleteBatch`, and how one item's refusal travels ([`item_error`]).
//!
//! Every item is checked as its unary call checks it; a malformed item refuses the whole batch
//! (naming `items[i].field`), so a batch either reaches the log whole or not at all. What the
//! state then decides is answered item by item: an item the state machine refuses is an
//! [`v1::ItemError`] with the code and reason its unary call would have had.

use certus_core::limits::{PIPELINE_COMPLETE_BATCH_MAX, PIPELINE_ENQUEUE_BATCH_MAX};
use certus_core::{PipelineCommand, PipelineError, PipelineReply};
use certus_proto::v1;
use tonic::Status;

use super::{completed, completion, enqueued, new_transaction};
use crate::convert::{in_range, unexpected};
use crate::errors::{ERROR_REASON_KEY, pipeline_status};

/// `EnqueueBatch`: 1 to [`PIPELINE_ENQUEUE_BATCH_MAX`] enqueues, each checked as `Enqueue`.
pub fn enqueue_batch(request: v1::EnqueueBatchRequest) -> Result<PipelineCommand, Status> {
    in_range::<PipelineCommand>(
        "items",
        request.items.len() as u64,
        1,
        PIPELINE_ENQUEUE_BATCH_MAX as u64,
    )?;
    let items = each(request.items, new_transaction)?;
    Ok(PipelineCommand::EnqueueBatch(items))
}

/// `EnqueueBatch`'s reply: one result per item.
pub fn enqueued_batch(reply: PipelineReply) -> Result<v1::EnqueueBatchReply, Status> {
    let items = answers("enqueue batch", reply)?
        .into_iter()
        .map(|answer| {
            use v1::enqueue_item_result::Result as Item;
            let result = match item(answer, enqueued) {
                Ok(reply) => Item::Enqueued(reply),
                Err(error) => Item::Error(error),
            };
            v1::EnqueueItemResult {
                result: Some(result),
            }
        })
        .collect();
    Ok(v1::EnqueueBatchReply { items })
}

/// `CompleteBatch`: 1 to [`PIPELINE_COMPLETE_BATCH_MAX`] completions, each checked as
/// `Complete`.
pub fn complete_batch(request: v1::CompleteBatchRequest) -> Result<PipelineCommand, Status> {
    in_range::<PipelineCommand>(
        "items",
        request.items.len() as u64,
        1,
        PIPELINE_COMPLETE_BATCH_MAX as u64,
    )?;
    let items = each(request.items, completion)?;
    Ok(PipelineCommand::CompleteBatch(items))
}

/// `CompleteBatch`'s reply: one result per item; a token that already ended its claim with
/// another step is a `stale-claim` item, as `Complete` answers it.
pub fn completed_batch(reply: PipelineReply) -> Result<v1::CompleteBatchReply, Status> {
    let items = answers("complete batch", reply)?
        .into_iter()
        .map(|answer| {
            use v1::complete_item_result::Result as Item;
            let result = match item(answer, completed) {
                Ok(reply) => Item::Completed(reply),
                Err(error) => Item::Error(error),
            };
            v1::CompleteItemResult {
                result: Some(result),
            }
        })
        .collect();
    Ok(v1::CompleteBatchReply { items })
}

/// A refusal as one item's (or one step's) error: the code, reason and message the unary call
/// would have been refused with.
pub fn item_error(status: &Status) -> v1::ItemError {
    v1::ItemError {
        code: status.code() as i32,
        reason: status
            .metadata()
            .get(ERROR_REASON_KEY)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        message: status.message().to_owned(),
    }
}

/// Converts every item with `convert`; the first malformed one refuses the batch, its field
/// named with the item's place (`items[3].state: …`).
fn each<T, R>(items: Vec<T>, convert: impl Fn(T) -> Result<R, Status>) -> Result<Vec<R>, Status> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| convert(item).map_err(|status| in_item(i, &status)))
        .collect()
}

/// `status`, about item `i` of a batch.
fn in_item(i: usize, status: &Status) -> Status {
    let mut named = Status::new(status.code(), format!("items[{i}].{}", status.message()));
    *named.metadata_mut() = status.metadata().clone();
    named
}

fn answers(
    what: &str,
    reply: PipelineReply,
) -> Result<Vec<Result<PipelineReply, PipelineError>>, Status> {
    match reply {
        PipelineReply::Batch(answers) => Ok(answers),
        other => Err(unexpected(what, &other)),
    }
}

/// One item's answer through its unary call's reply conversion, a refusal as an item error.
fn item<R>(
    answer: Result<PipelineReply, PipelineError>,
    convert: impl FnOnce(PipelineReply) -> Result<R, Status>,
) -> Result<R, v1::ItemError> {
    answer
        .map_err(|error| pipeline_status(&error))
        .and_then(convert)
        .map_err(|status| item_error(&status))
}
