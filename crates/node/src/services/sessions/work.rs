//! The `Work` stream: one session worker's claims pushed as sessions become claimable, never
//! more than the credit the worker granted, and its steps answered on the same stream.
//!
//! One task per stream owns everything: the credit, at most one claim in progress (a long-poll
//! claim, `long_poll.rs`, that waits without polling and takes up to the credit outstanding),
//! the steps being applied (concurrently, so one Raft entry can carry many), and the events
//! buffered for the worker. A claim in progress is never dropped while the stream lives: its
//! sessions are pushed once it answers. When the stream breaks, what was claimed but not pushed
//! expires at its deadline, as any claim of a vanished worker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::ordered_watch as watch;
use certus_core::{Session, SessionCommand, SessionId};
use certus_proto::v1;
use futures_util::stream::FuturesUnordered;
use futures_util::{Stream, StreamExt as _};
use tokio::sync::mpsc;
use tokio::time::Duration;
use tonic::{Status, Streaming};

use super::long_poll;
use crate::convert::invalid;
use crate::convert::sessions::{self as convert, WorkMessage, WorkStart};
use crate::errors::stopping;
use crate::limits::{
    SESSION_WORK_CLAIM_ERROR_PAUSE, SESSION_WORK_EVENTS_BUFFERED_MAX,
    SESSION_WORK_STEPS_IN_FLIGHT_MAX,
};
use crate::raft::replica::Replica;
use crate::stop::stopped;

/// The stream `Work` answers with.
pub(super) type EventStream =
    Pin<Box<dyn Stream<Item = Result<v1::SessionWorkEvent, Status>> + Send>>;

type Event = Result<v1::SessionWorkEvent, Status>;
/// A claim in progress: the sessions it took.
type Claiming = Pin<Box<dyn Future<Output = Result<Vec<Session>, Status>> + Send>>;
/// A step being applied: its answer.
type Answering = Pin<Box<dyn Future<Output = v1::SessionWorkEvent> + Send>>;

/// Reads the worker stream's `start` (a bad one is the call's refusal), then serves the stream
/// from a task of its own; the events come out of the stream returned.
pub(super) async fn open(
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    mut inbound: Streaming<v1::SessionWorkRequest>,
) -> Result<EventStream, Status> {
    let first = tokio::select! {
        // Polled in order, not at random: the simulation replays a seed exactly.
        biased;
        first = inbound.message() => first?,
        () = stopped(stop.clone()) => return Err(stopping()),
    };
    let first = first.ok_or_else(|| {
        invalid(
            "start",
            "the stream ended before its first message, `start`",
        )
    })?;
    let start = convert::work_start(first)?;
    let (events, receiver) = mpsc::channel(SESSION_WORK_EVENTS_BUFFERED_MAX);
    tokio::spawn(serve(replica, stop, inbound, start, events));
    Ok(Box::pin(futures_util::stream::unfold(
        receiver,
        |mut receiver| async move { receiver.recv().await.map(|event| (event, receiver)) },
    )))
}

/// One stream's life after its start: credit, steps, claims and answers until the worker
/// closes it (once every step is answered), it breaks, or the node stops.
async fn serve(
    replica: Arc<Replica>,
    stop: watch::Receiver<bool>,
    mut inbound: Streaming<v1::SessionWorkRequest>,
    start: WorkStart,
    events: mpsc::Sender<Event>,
) {
    let mut credit = start.credit;
    let mut claiming: Option<Claiming> = None;
    let mut claim_pause: Option<Duration> = None;
    let mut steps: FuturesUnordered<Answering> = FuturesUnordered::new();
    let mut reading = true;
    loop {
        if claiming.is_none() && credit > 0 {
            claiming = Some(claim(&replica, &stop, &start, credit, claim_pause.take()));
        }
        let event = tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            claimed = async { claiming.as_mut().expect("checked by the guard").await },
                if claiming.is_some() =>
            {
                claiming = None;
                match claimed {
                    Ok(sessions) => {
                        let pushed = u32::try_from(sessions.len()).expect("at most a claim batch");
                        assert!(pushed <= credit, "a claim takes at most the credit outstanding");
                        credit -= pushed;
                        for session in &sessions {
                            let event = Ok(convert::claimed_event(session));
                            if !deliver(&events, &stop, event).await {
                                return;
                            }
                        }
                        continue;
                    }
                    Err(_) if *stop.borrow() => Err(stopping()),
                    Err(status) => {
                        // No leader, say: the stream lives on and claims again after a pause.
                        tracing::debug!(id = replica.id, %status, "a worker stream's claim failed");
                        claim_pause = Some(SESSION_WORK_CLAIM_ERROR_PAUSE);
                        continue;
                    }
                }
            }
            Some(answer) = steps.next(), if !steps.is_empty() => Ok(answer),
            message = inbound.message(),
                if reading && steps.len() < SESSION_WORK_STEPS_IN_FLIGHT_MAX =>
            {
                match message.map(|message| message.map(convert::work_message)) {
                    Ok(Some(Ok(WorkMessage::Credit(more)))) => match convert::grant(credit, more) {
                        Ok(total) => {
                            credit = total;
                            continue;
                        }
                        Err(status) => Err(status),
                    },
                    Ok(Some(Ok(WorkMessage::Step { step_id, session, command }))) => {
                        steps.push(answer(Arc::clone(&replica), step_id, session, command));
                        continue;
                    }
                    Ok(Some(Err(status))) => Err(status),
                    // The worker is done sending: answer what it sent, then end.
                    Ok(None) => {
                        reading = false;
                        if steps.is_empty() {
                            return;
                        }
                        continue;
                    }
                    // Broken: its claims expire at their deadlines.
                    Err(_) => return,
                }
            }
            () = stopped(stop.clone()) => Err(stopping()),
            () = events.closed() => return,
        };
        let ends = event.is_err();
        if !deliver(&events, &stop, event).await || ends {
            return;
        }
        if !reading && steps.is_empty() {
            return;
        }
    }
}

/// Hands `event` to the worker's buffer, waiting while it is full; false when the worker is
/// gone or the node stops meanwhile (a worker that stopped reading does not hold a shutdown up).
async fn deliver(events: &mpsc::Sender<Event>, stop: &watch::Receiver<bool>, event: Event) -> bool {
    tokio::select! {
        // An event the buffer has room for goes out even when stopping: `node-stopping` itself.
        biased;
        sent = events.send(event) => sent.is_ok(),
        () = stopped(stop.clone()) => false,
    }
}

/// A claim for the stream of up to `credit` sessions (a claim batch at most), after `pause`.
fn claim(
    replica: &Arc<Replica>,
    stop: &watch::Receiver<bool>,
    start: &WorkStart,
    credit: u32,
    pause: Option<Duration>,
) -> Claiming {
    let replica = Arc::clone(replica);
    let stop = stop.clone();
    let stage = start.stage;
    let command = start.claim(credit);
    Box::pin(async move {
        if let Some(pause) = pause {
            tokio::time::sleep(pause).await;
        }
        long_poll::claim(&replica, stop, None, stage, &command, None).await
    })
}

/// Applies one step (unless it was refused already) and answers it.
fn answer(
    replica: Arc<Replica>,
    step_id: u64,
    session: SessionId,
    command: Result<SessionCommand, Status>,
) -> Answering {
    Box::pin(async move {
        let result = match command {
            Err(status) => convert::refused_step(session, &status),
            Ok(command) => match replica.propose_typed(None, command).await {
                Ok(reply) => convert::step_result(session, reply),
                Err(status) => convert::refused_step(session, &status),
            },
        };
        convert::answer_event(step_id, result)
    })
}
