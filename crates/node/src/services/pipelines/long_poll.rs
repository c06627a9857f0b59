//! The long-polls, which wait without polling: they sleep on the applied-index watch, look at
//! the local applied state when something was applied, and end when the node stops, so a
//! shutdown never waits for a client.
//!
//! - `GetState` waits for news of one transaction — a notification of it, its end, or a gap in
//!   the record — and answers from a linearizable read.
//! - `Dequeue` with a wait looks for queued work of its node group in the local state (a count,
//!   cheap) and proposes the dequeue only when some is there; when another worker took it
//!   first, it waits on.

use crate::ordered_watch as watch;
use certus_core::limits::LIST_PAGE_MAX;
use certus_core::pipelines::{NodeGroup, TransactionId};
use certus_core::{ClientRequest, PipelineError, PipelineReads};
use certus_proto::v1;
use tokio::time::Instant;
use tonic::Status;

use crate::convert::pipelines::wire::{transaction_to_proto, webhook_to_proto};
use crate::convert::pipelines::{Dequeue, GetState, dequeued, resume_point};
use crate::errors::{pipeline_status, stopping};
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;

/// Answers a `Dequeue` with a wait: what it took once work was queued in its node group, or
/// nothing at the end of the wait.
///
/// A numbered request (`client`) is proposed at most once — its number would answer a second
/// proposal with the first one's answer — so when another worker took the work first it
/// answers empty before the end of its wait; an unnumbered one waits on.
pub(super) async fn dequeue(
    replica: &Replica,
    stop: watch::Receiver<bool>,
    client: Option<ClientRequest>,
    request: Dequeue,
) -> Result<v1::DequeueReply, Status> {
    let deadline = Instant::now() + request.wait;
    let mut applied = AppliedWatch::new(replica, stop);
    loop {
        // Anything applied after this look wakes the wait below.
        applied.mark();
        if queued_work(replica, &request.node_group) {
            let reply = dequeued(replica.propose(client, request.command.clone()).await?)?;
            if !reply.transactions.is_empty() || client.is_some() {
                return Ok(reply);
            }
        }
        if Instant::now() >= deadline {
            return Ok(v1::DequeueReply::default());
        }
        match applied.wait(Some(deadline)).await {
            Wake::Applied | Wake::Deadline => {}
            Wake::Stopping => return Err(stopping()),
        }
    }
}

/// Whether this node's applied state has transactions queued in `node_group`: a look at a
/// count, so a waiting worker costs nothing until work may be there. The state may be a little
/// behind the leader's; the entry that queues work wakes the waiter when it is applied here.
pub(super) fn queued_work(replica: &Replica, node_group: &NodeGroup) -> bool {
    replica.reader.read(|applied| {
        let counts = applied.state.pipelines().group_counts(node_group);
        counts.queued.iter().any(|&queued| queued > 0)
    })
}

/// Answers `request` once there is news of its transaction or its wait is over: the
/// transaction's id and the reply (before any `MarkReplied`).
pub(super) async fn get_state(
    replica: &Replica,
    stop: watch::Receiver<bool>,
    request: &GetState,
) -> Result<(TransactionId, v1::GetStateReply), Status> {
    let deadline = Instant::now() + request.wait;
    let mut applied = AppliedWatch::new(replica, stop);
    applied.mark();
    // The first read is linearizable: it finds the transaction, fixes where news starts, and
    // is the answer when there is news already or no wait.
    let target = &request.target;
    let (id, after, mut answer) = replica
        .query(|state, now_ms| {
            let reads = state.pipelines();
            let id = target
                .resolve(reads, now_ms)
                .ok_or_else(|| target.not_found())?;
            let after = resume_point(request.after_seq, reads.last_notification_seq())?;
            Ok((id, after, read_answer(reads, id, after)?))
        })
        .await?;
    // Everything up to the answer's last notification was looked at.
    let mut cursor = answer.last_seq;
    while answer.outcome == v1::WaitOutcome::WaitEnded && Instant::now() < deadline {
        match applied.wait(Some(deadline)).await {
            Wake::Stopping => return Err(stopping()),
            Wake::Deadline => {}
            Wake::Applied => {
                applied.mark();
                let news = replica
                    .reader
                    .read(|applied| look(applied.state.pipelines(), id, &mut cursor));
                if news == Look::Nothing {
                    continue;
                }
            }
        }
        // News in this node's state, or the end of the wait: the answer is a linearizable
        // read, from the original resume point.
        answer = replica
            .query(|state, _| read_answer(state.pipelines(), id, after))
            .await?;
    }
    let reply = v1::GetStateReply {
        transaction: Some(answer.transaction),
        outcome: answer.outcome.into(),
        notification_seq: answer.last_seq,
        webhook_cancelled: false,
        webhook: answer.webhook,
    };
    Ok((id, reply))
}

/// What a long-poll found in one look at the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Look {
    /// The transaction is no longer stored.
    Gone,
    /// Something to answer with.
    News(v1::WaitOutcome),
    /// Nothing yet.
    Nothing,
}

/// Looks for news of transaction `id` in the notifications after `cursor`, and moves `cursor`
/// past what it read (so the next look reads only what is new).
pub(super) fn look(reads: PipelineReads<'_>, id: TransactionId, cursor: &mut u64) -> Look {
    let Some(tx) = reads.transaction(id) else {
        return Look::Gone;
    };
    if tx.status().is_terminal() {
        return Look::News(v1::WaitOutcome::Finished);
    }
    loop {
        let page = reads.notifications_after(*cursor, None, LIST_PAGE_MAX);
        if page.missed {
            return Look::News(v1::WaitOutcome::Missed);
        }
        if page.notifications.iter().any(|n| n.transaction == id) {
            return Look::News(v1::WaitOutcome::Progress);
        }
        match page.notifications.last() {
            Some(last) if page.notifications.len() == LIST_PAGE_MAX => *cursor = last.seq,
            _ => {
                *cursor = (*cursor).max(page.last_seq);
                return Look::Nothing;
            }
        }
    }
}

/// A long-poll's answer, read from one state.
struct Answer {
    transaction: v1::Transaction,
    outcome: v1::WaitOutcome,
    last_seq: u64,
    webhook: Option<v1::PendingWebhook>,
}

fn read_answer(reads: PipelineReads<'_>, id: TransactionId, after: u64) -> Result<Answer, Status> {
    let Some(tx) = reads.transaction(id) else {
        return Err(pipeline_status(&PipelineError::UnknownTransaction {
            transaction: id,
        }));
    };
    let mut cursor = after;
    let outcome = match look(reads, id, &mut cursor) {
        Look::News(outcome) => outcome,
        Look::Gone | Look::Nothing => v1::WaitOutcome::WaitEnded,
    };
    Ok(Answer {
        transaction: transaction_to_proto(tx),
        outcome,
        last_seq: reads.last_notification_seq(),
        webhook: reads.webhook_for(id).map(webhook_to_proto),
    })
}
