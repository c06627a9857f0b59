//! Group commit on the leader: concurrent writes share one Raft entry and one flush.
//!
//! Writers queue their commands; one task drains the queue into a [`Proposal`] (up to
//! [`PROPOSAL_COMMANDS_MAX`] commands), hands it to openraft and moves on while it replicates, with
//! at most [`PROPOSALS_IN_FLIGHT_MAX`] proposals in flight. Under load, a proposal carries every
//! command that arrived while the previous ones were being written; an idle cluster proposes a
//! lone command at once.

use std::sync::Arc;
use std::time::Duration;

use certus_core::{Command, Response};
use certus_store::Proposal;
use openraft::ServerState;
use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::{debug, warn};

use crate::clock::Clock;
use crate::errors::ServiceError;
use crate::limits::{
    PROPOSAL_COMMANDS_MAX, PROPOSALS_IN_FLIGHT_MAX, PROPOSER_QUEUE_MAX, STEPPED_DOWN_ANSWER_WAIT,
};
use crate::raft::types::{NodeId, Raft};
use crate::tasks::Tasks;

/// What a write comes back with. `NotLeader` means nothing was proposed: retry elsewhere.
#[derive(Debug)]
pub enum WriteOutcome {
    /// The commands were applied; their responses in order.
    Applied(Vec<Response>),
    /// This node is not the leader; nothing was proposed.
    NotLeader,
    /// It failed, as the error says.
    Failed(ServiceError),
}

struct PendingWrite {
    commands: Vec<Command>,
    reply: oneshot::Sender<WriteOutcome>,
}

/// The queue in front of the leader's Raft log.
#[derive(Debug, Clone)]
pub struct Proposer {
    queue: mpsc::Sender<PendingWrite>,
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("commands", &self.commands.len())
            .finish()
    }
}

impl Proposer {
    /// Starts the proposer task of node `id`.
    pub fn start(id: NodeId, raft: Raft, clock: Clock, tasks: &Arc<Tasks>) -> Proposer {
        let (queue, receiver) = mpsc::channel(PROPOSER_QUEUE_MAX);
        tasks.spawn("proposer", run(id, raft, clock, receiver));
        Proposer { queue }
    }

    /// Proposes `commands` (in one entry, in order, possibly with others' commands) and waits
    /// until they are applied.
    pub async fn write(&self, commands: Vec<Command>) -> WriteOutcome {
        assert!(
            !commands.is_empty(),
            "a write proposes at least one command"
        );
        assert!(
            commands.len() <= PROPOSAL_COMMANDS_MAX,
            "a write fits in one proposal"
        );
        let (reply, answer) = oneshot::channel();
        if self
            .queue
            .send(PendingWrite { commands, reply })
            .await
            .is_err()
        {
            return WriteOutcome::Failed(ServiceError::Unavailable("node is stopping".into()));
        }
        answer.await.unwrap_or_else(|_| {
            WriteOutcome::Failed(ServiceError::OutcomeUnknown(
                "the proposer stopped before answering".into(),
            ))
        })
    }
}

async fn run(id: NodeId, raft: Raft, clock: Clock, mut queue: mpsc::Receiver<PendingWrite>) {
    let in_flight = Arc::new(Semaphore::new(PROPOSALS_IN_FLIGHT_MAX));
    // A write that did not fit in the previous batch opens the next one.
    let mut carried: Option<PendingWrite> = None;
    loop {
        let first = match carried.take() {
            Some(write) => write,
            None => match queue.recv().await {
                Some(write) => write,
                None => break,
            },
        };
        // Waiting for a slot is where batches grow: writers keep queueing meanwhile.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let mut commands_total = first.commands.len();
        let mut batch = vec![first];
        while commands_total < PROPOSAL_COMMANDS_MAX {
            match queue.try_recv() {
                Ok(next) if commands_total + next.commands.len() <= PROPOSAL_COMMANDS_MAX => {
                    commands_total += next.commands.len();
                    batch.push(next);
                }
                Ok(next) => {
                    carried = Some(next);
                    break;
                }
                Err(_) => break,
            }
        }
        propose(id, &raft, &clock, batch, permit).await;
    }
    debug!(id, "proposer stopped");
}

async fn propose(
    id: NodeId,
    raft: &Raft,
    clock: &Clock,
    batch: Vec<PendingWrite>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let counts: Vec<usize> = batch.iter().map(|write| write.commands.len()).collect();
    let (commands, replies): (Vec<Vec<Command>>, Vec<oneshot::Sender<WriteOutcome>>) = batch
        .into_iter()
        .map(|write| (write.commands, write.reply))
        .unzip();
    let proposal = Proposal {
        proposed_at_ms: clock.now_ms(),
        commands: commands.into_iter().flatten().collect(),
    };
    let term = raft.metrics().borrow().current_term;
    let submitted = raft.client_write_ff(proposal).await;
    let responder = match submitted {
        Ok(responder) => responder,
        Err(fatal) => {
            for reply in replies {
                let _ = reply.send(WriteOutcome::Failed(ServiceError::Unavailable(
                    fatal.to_string(),
                )));
            }
            return;
        }
    };
    let raft = raft.clone();
    tokio::spawn(async move {
        let mut responder = responder;
        // The slot is released when openraft answers, or as soon as this node no longer leads
        // in the term it proposed in: openraft answers only once the entry is applied or
        // truncated, and an entry left behind by a snapshot that overtook it may never be,
        // which would keep every later write of a node that leads again waiting for the slot.
        let answered = loop {
            tokio::select! {
                // Polled in order, not at random: the simulation replays a seed exactly.
                biased;
                outcome = &mut responder => break Some(outcome),
                () = tokio::time::sleep(LEADERSHIP_CHECK_EVERY) => {
                    if !leads_in(&raft, id, term) {
                        break None;
                    }
                }
            }
        };
        drop(permit);
        let outcome = match answered {
            Some(outcome) => outcome,
            None => match tokio::time::timeout(STEPPED_DOWN_ANSWER_WAIT, responder).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    for reply in replies {
                        let _ = reply.send(WriteOutcome::Failed(ServiceError::OutcomeUnknown(
                            "leadership changed with the write in flight, and it was not \
                             answered since"
                                .into(),
                        )));
                    }
                    return;
                }
            },
        };
        match outcome {
            Ok(Ok(written)) => {
                let mut responses = written.data.into_iter();
                assert_eq!(
                    responses.len(),
                    counts.iter().sum::<usize>(),
                    "one response per command"
                );
                for (reply, count) in replies.into_iter().zip(counts) {
                    let mine: Vec<Response> = responses.by_ref().take(count).collect();
                    let _ = reply.send(WriteOutcome::Applied(mine));
                }
            }
            Ok(Err(ClientWriteError::ForwardToLeader(_))) => {
                for reply in replies {
                    let _ = reply.send(WriteOutcome::NotLeader);
                }
            }
            Ok(Err(ClientWriteError::ChangeMembershipError(error))) => {
                warn!(id, %error, "a command proposal failed as a membership change");
                for reply in replies {
                    let _ = reply.send(WriteOutcome::Failed(ServiceError::OutcomeUnknown(
                        error.to_string(),
                    )));
                }
            }
            Err(dropped) => {
                // The leader stepped down or stopped with the entry in flight: it may yet commit.
                for reply in replies {
                    let _ = reply.send(WriteOutcome::Failed(ServiceError::OutcomeUnknown(
                        format!("leadership changed with the write in flight ({dropped})"),
                    )));
                }
            }
        }
    });
}

/// How often a proposal in flight checks that its node still leads. Polled rather than watched:
/// a watch on openraft's metrics wakes its waiters in an order tokio draws at random, which the
/// simulation would not replay.
const LEADERSHIP_CHECK_EVERY: Duration = Duration::from_millis(100);

/// Whether node `id` still leads in `term`.
fn leads_in(raft: &Raft, id: NodeId, term: u64) -> bool {
    let metrics = raft.metrics();
    let now = metrics.borrow();
    now.current_term == term && now.current_leader == Some(id) && now.state == ServerState::Leader
}

/// Maps a `RaftError` around a client write.
pub fn write_error(
    error: RaftError<NodeId, ClientWriteError<NodeId, crate::raft::types::CertusNode>>,
) -> WriteOutcome {
    match error {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => WriteOutcome::NotLeader,
        RaftError::APIError(ClientWriteError::ChangeMembershipError(error)) => {
            WriteOutcome::Failed(ServiceError::FailedPrecondition(error.to_string()))
        }
        RaftError::Fatal(fatal) => {
            WriteOutcome::Failed(ServiceError::Unavailable(fatal.to_string()))
        }
    }
}
