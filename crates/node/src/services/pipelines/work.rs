//! The `Work` stream: one worker's claims pushed as work is queued, its steps answered on the
//! same stream.
//!
//! After the worker's `start`, one task per stream runs a loop over four things at once: the
//! worker's messages (credit grants, steps), the steps proposed and not yet answered (at most
//! [`PIPELINE_WORK_STEPS_IN_FLIGHT_MAX`]), the one dequeue in flight, and — only while the
//! worker has credit and no dequeue is in flight — the applied-index watch. Before proposing a
//! dequeue it looks at this node's applied state for queued work in the node group (a count),
//! so an idle stream proposes nothing and wakes only when an entry is applied. A dequeue takes
//! at most the credit left (and at most a `Dequeue`'s maximum); each claim pushed uses one.
//!
//! The events go through a bounded queue ([`PIPELINE_WORK_EVENTS_QUEUED_MAX`]): a worker that
//! stops reading stops the loop, so it is neither claimed for nor answered. A stream that
//! breaks simply ends: its claims are left to the reaper, as a lost `Dequeue` answer's are.

use std::pin::Pin;
use std::sync::Arc;

use crate::ordered_watch as watch;
use certus_core::limits::PIPELINE_DEQUEUE_BATCH_MAX;
use certus_core::{PipelineCommand, PipelineReply};
use certus_proto::v1;
use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tonic::Status;
use tonic::codec::Streaming;

use super::long_poll::queued_work;
use crate::convert::pipelines::dequeue_command;
use crate::convert::pipelines::work::{
    Step, WorkMessage, WorkStart, claim_event, grant, invalid_stream_end, step_event, work_message,
    work_start,
};
use crate::errors::stopping;
use crate::limits::{PIPELINE_WORK_EVENTS_QUEUED_MAX, PIPELINE_WORK_STEPS_IN_FLIGHT_MAX};
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;

/// The stream `Work` answers with.
pub(super) type WorkStream = Pin<Box<dyn Stream<Item = Result<v1::WorkEvent, Status>> + Send>>;

/// A proposal in flight, answered later.
type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Starts the worker stream whose messages are `inbound`: its first message is read here, so a
/// stream that does not start with `start` is refused as a call.
pub(super) async fn work(
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    mut inbound: Streaming<v1::WorkRequest>,
) -> Result<WorkStream, Status> {
    let first = inbound.message().await?.ok_or_else(invalid_stream_end)?;
    let start = work_start(first)?;
    let (events, queued) = mpsc::channel(PIPELINE_WORK_EVENTS_QUEUED_MAX);
    tokio::spawn(run(replica, stop, start, inbound, events));
    Ok(Box::pin(futures_util::stream::unfold(
        queued,
        |mut queued| async move { queued.recv().await.map(|event| (event, queued)) },
    )))
}

/// The stream's loop, until the worker goes, the node stops or an error ends it.
async fn run(
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    start: WorkStart,
    mut inbound: Streaming<v1::WorkRequest>,
    events: mpsc::Sender<Result<v1::WorkEvent, Status>>,
) {
    let WorkStart {
        node_group,
        worker,
        mut credit,
    } = start;
    let mut applied = AppliedWatch::new(&replica, stop.clone());
    let mut stop = stop;
    let mut steps: FuturesUnordered<Pending<v1::WorkEvent>> = FuturesUnordered::new();
    let mut claiming: Option<Pending<Result<PipelineReply, Status>>> = None;
    // The worker may still send (it has not closed its side).
    let mut open = true;
    // The last dequeue came back empty (another worker was first): look again only after the
    // next apply, or a node behind the leader would propose again and again.
    let mut raced = false;
    loop {
        if !open && steps.is_empty() && claiming.is_none() {
            return;
        }
        if open && credit > 0 && claiming.is_none() && !raced {
            // Anything applied after this look wakes the wait below.
            applied.mark();
            if queued_work(&replica, &node_group) {
                let command = dequeue_command(
                    node_group.clone(),
                    worker.clone(),
                    credit.min(PIPELINE_DEQUEUE_BATCH_MAX),
                );
                let replica = Arc::clone(&replica);
                claiming = Some(Box::pin(async move {
                    replica.propose::<PipelineCommand>(None, command).await
                }));
            }
        }
        let waiting = open && credit > 0 && claiming.is_none();
        let event = tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            Some(answered) = steps.next(), if !steps.is_empty() => Some(Ok(answered)),
            answer = async { claiming.as_mut().expect("in flight").await }, if claiming.is_some() => {
                claiming = None;
                match answer {
                    Ok(PipelineReply::Dequeued(claimed)) => {
                        raced = claimed.is_empty();
                        let used = u32::try_from(claimed.len()).expect("a dequeue is bounded");
                        assert!(used <= credit, "a dequeue takes at most the credit left");
                        credit -= used;
                        for tx in &claimed {
                            if events.send(Ok(claim_event(tx))).await.is_err() {
                                return;
                            }
                        }
                        None
                    }
                    Ok(other) => Some(Err(crate::convert::unexpected("dequeue", &other))),
                    Err(status) => Some(Err(status)),
                }
            }
            message = inbound.message(), if open && steps.len() < PIPELINE_WORK_STEPS_IN_FLIGHT_MAX => {
                match message {
                    Ok(Some(message)) => {
                        match work_message(message, replica.clock.now_ms()) {
                            Ok(WorkMessage::Credit(more)) => match grant(credit, more) {
                                Ok(total) => {
                                    credit = total;
                                    None
                                }
                                Err(status) => Some(Err(status)),
                            },
                            Ok(WorkMessage::Step(step)) => {
                                steps.push(propose_step(&replica, step));
                                None
                            }
                            Err(status) => Some(Err(status)),
                        }
                    }
                    // The worker closed its side: answer the steps in flight, then end.
                    Ok(None) => {
                        open = false;
                        None
                    }
                    // The stream broke: nobody is left to answer.
                    Err(_) => return,
                }
            }
            wake = applied.wait(None), if waiting => match wake {
                Wake::Applied | Wake::Deadline => {
                    raced = false;
                    None
                }
                Wake::Stopping => Some(Err(stopping())),
            },
            _ = stop.changed(), if !waiting => Some(Err(stopping())),
        };
        if let Some(event) = event {
            // An error ends the stream; claims in flight are left to the reaper.
            let ends = event.is_err();
            if events.send(event).await.is_err() || ends {
                return;
            }
        }
        if *stop.borrow() {
            let _ = events.send(Err(stopping())).await;
            return;
        }
    }
}

/// Proposes `step` (unnumbered: a complete, sleep or requeue repeated with its token answers
/// the same, and nothing on this stream repeats a step), answered with its `step_id`.
fn propose_step(replica: &Arc<Replica>, step: Step) -> Pending<v1::WorkEvent> {
    let replica = Arc::clone(replica);
    Box::pin(async move {
        let Step {
            step_id,
            kind,
            command,
        } = step;
        let answer = match command {
            Ok(command) => replica.propose::<PipelineCommand>(None, command).await,
            Err(status) => Err(status),
        };
        step_event(step_id, kind, answer)
    })
}
