//! The `Work` stream's messages: the worker's first message, its credit grants and steps (each
//! checked as the unary call of the same name checks it), and the events the node sends.
//!
//! A message out of place (no `start` first, a second `start`, a message naming nothing) or a
//! grant past the credit bound ends the stream with its status; a malformed step only fails
//! that step, answered with its `step_id`, so a worker's other steps go on.

use certus_core::pipelines::{NodeGroup, Transaction};
use certus_core::{PipelineCommand, PipelineReply, WorkerId};
use certus_proto::v1;
use tonic::Status;

use super::batches::item_error;
use super::wire::transaction_to_proto;
use super::{complete, completed, progress, progress_recorded, requeue, requeued, sleep, sleeping};
use crate::convert::{in_range, invalid, out_of_range, required};
use crate::limits::PIPELINE_WORK_CREDIT_MAX;

/// A worker's first message: who it is, whose transactions it takes, and its first credit.
#[derive(Debug)]
pub struct WorkStart {
    /// The node group it takes transactions of.
    pub node_group: NodeGroup,
    /// Who it is.
    pub worker: WorkerId,
    /// How many transactions it can take now, at most [`PIPELINE_WORK_CREDIT_MAX`].
    pub credit: u32,
}

/// The worker's first message, which must be `start`.
pub fn work_start(request: v1::WorkRequest) -> Result<WorkStart, Status> {
    let Some(v1::work_request::Kind::Start(start)) = request.kind else {
        return Err(invalid(
            "start",
            "missing: the first message of a Work stream names the node group and the worker",
        ));
    };
    in_range::<PipelineCommand>(
        "start.credit",
        start.credit.into(),
        0,
        PIPELINE_WORK_CREDIT_MAX.into(),
    )?;
    Ok(WorkStart {
        node_group: required(start.node_group, "start.node_group", NodeGroup::new)?,
        worker: required(start.worker, "start.worker", WorkerId::new)?,
        credit: start.credit,
    })
}

/// The refusal of a `Work` stream that ended before its first message.
pub fn invalid_stream_end() -> Status {
    invalid(
        "start",
        "missing: the stream ended before its first message",
    )
}

/// What a worker's later message asks for.
#[derive(Debug)]
pub enum WorkMessage {
    /// More credit.
    Credit(u32),
    /// A step to propose, or its refusal when it is malformed.
    Step(Step),
}

/// One of the worker's steps.
#[derive(Debug)]
pub struct Step {
    /// The worker's id for it.
    pub step_id: u64,
    /// Which step it is.
    pub kind: StepKind,
    /// Its command, or why it is malformed (answered at once, never proposed).
    pub command: Result<PipelineCommand, Status>,
}

/// Which unary call a step stands for: how its answer is converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `Complete`.
    Complete,
    /// `Progress`.
    Progress,
    /// `Sleep`.
    Sleep,
    /// `Requeue`.
    Requeue,
}

/// A worker's message after `start`, with `now_ms` the node's clock (a `for_ms` sleep ends that
/// long after it). An error ends the stream.
pub fn work_message(request: v1::WorkRequest, now_ms: u64) -> Result<WorkMessage, Status> {
    use v1::work_step::Kind;
    match request.kind {
        None => Err(invalid(
            "kind",
            "missing: send credit or a step (start comes once, first)",
        )),
        Some(v1::work_request::Kind::Start(_)) => Err(invalid(
            "start",
            "sent again: a Work stream starts once; open a new stream for another node group",
        )),
        Some(v1::work_request::Kind::Credit(credit)) => Ok(WorkMessage::Credit(credit)),
        Some(v1::work_request::Kind::Step(step)) => {
            let (kind, command) = match step.kind {
                Some(Kind::Complete(request)) => (StepKind::Complete, complete(request)),
                Some(Kind::Progress(request)) => (StepKind::Progress, progress(request)),
                Some(Kind::Sleep(request)) => (StepKind::Sleep, sleep(request, now_ms)),
                Some(Kind::Requeue(request)) => (StepKind::Requeue, requeue(request)),
                None => (
                    StepKind::Complete,
                    Err(invalid(
                        "step.kind",
                        "missing: complete, progress, sleep or requeue",
                    )),
                ),
            };
            Ok(WorkMessage::Step(Step {
                step_id: step.step_id,
                kind,
                command,
            }))
        }
    }
}

/// The credit after granting `grant` more to `credit`: a grant is 1 or more, and the credit
/// unused may not pass [`PIPELINE_WORK_CREDIT_MAX`].
pub fn grant(credit: u32, grant: u32) -> Result<u32, Status> {
    let room = PIPELINE_WORK_CREDIT_MAX - credit;
    if grant == 0 || grant > room {
        return Err(out_of_range::<PipelineCommand>(
            "credit",
            grant.into(),
            1,
            room.into(),
        ));
    }
    Ok(credit + grant)
}

/// A claimed transaction pushed to the worker.
pub fn claim_event(tx: &Transaction) -> v1::WorkEvent {
    v1::WorkEvent {
        kind: Some(v1::work_event::Kind::Claim(transaction_to_proto(tx))),
    }
}

/// A step's result: what its unary call would have answered, a refusal as an item error.
pub fn step_event(
    step_id: u64,
    kind: StepKind,
    answer: Result<PipelineReply, Status>,
) -> v1::WorkEvent {
    use v1::work_step_result::Result as Answer;
    let result = answer.and_then(|reply| match kind {
        StepKind::Complete => completed(reply).map(Answer::Complete),
        StepKind::Progress => progress_recorded(reply).map(Answer::Progress),
        StepKind::Sleep => sleeping(reply).map(Answer::Sleep),
        StepKind::Requeue => requeued(reply).map(Answer::Requeue),
    });
    let result = result.unwrap_or_else(|status| Answer::Error(item_error(&status)));
    v1::WorkEvent {
        kind: Some(v1::work_event::Kind::Step(v1::WorkStepResult {
            step_id,
            result: Some(result),
        })),
    }
}
