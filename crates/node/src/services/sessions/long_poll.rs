//! The long-poll `Claim`: waits for a claimable session of one stage without polling. It sleeps
//! on the applied-index watch (or until the first released session of the queue becomes
//! visible), looks at this node's applied state, and proposes the claim only when that shows a
//! visible session; a claim that comes back empty (another worker was first) waits again. It
//! ends when the node stops, so a shutdown never waits for a worker.

use crate::ordered_watch as watch;
use certus_core::{ClientRequest, Session, SessionCommand, SessionReply, Stage};
use tokio::time::{Duration, Instant};
use tonic::Status;

use crate::convert::unexpected;
use crate::errors::stopping;
use crate::limits::SESSION_CLAIM_RETRY_PAUSE;
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::Replica;

/// What this node's applied state says of a stage's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// A session is visible now: a claim would take it (unless someone is first).
    Visible,
    /// The first session becomes visible after this long (a released session's delay).
    VisibleIn(Duration),
    /// The queue is empty: only an apply can change that.
    Empty,
}

/// Looks at `stage`'s queue in this node's applied state, at `max(machine clock, now_ms)` as
/// every read does: a session released until a time this node's clock has passed is visible.
pub(crate) fn look(replica: &Replica, stage: Stage) -> Look {
    let now_ms = replica.clock.now_ms();
    replica.reader.read(|applied| {
        let state = &applied.state;
        let now_ms = now_ms.max(state.clock_ms());
        match state.sessions_next_visible_ms(stage) {
            None => Look::Empty,
            Some(visible_ms) if visible_ms <= now_ms => Look::Visible,
            Some(visible_ms) => Look::VisibleIn(Duration::from_millis(visible_ms - now_ms)),
        }
    })
}

/// Proposes `claim` (a [`SessionCommand::Claim`] of `stage`) once a session is visible, and
/// answers what it claimed; empty once `deadline` passes (none: wait until the node stops).
///
/// A numbered request (`client`) has one outcome: its first proposal is answered even when it
/// came back empty, since proposing it again would only replay that answer.
pub(crate) async fn claim(
    replica: &Replica,
    stop: watch::Receiver<bool>,
    client: Option<ClientRequest>,
    stage: Stage,
    claim: &SessionCommand,
    deadline: Option<Instant>,
) -> Result<Vec<Session>, Status> {
    let mut applied = AppliedWatch::new(replica, stop);
    // After an empty claim: no claim proposed before this, whatever the state shows.
    let mut hold_until: Option<Instant> = None;
    loop {
        // Anything applied after this look wakes the wait below.
        applied.mark();
        let now = Instant::now();
        let wake_at = match look(replica, stage) {
            Look::Visible if hold_until.is_none_or(|until| now >= until) => {
                let claimed = match replica.propose(client, claim.clone()).await? {
                    SessionReply::Claimed(sessions) => sessions,
                    other => return Err(unexpected("claim", &other)),
                };
                if !claimed.is_empty() || client.is_some() {
                    return Ok(claimed);
                }
                hold_until = Some(Instant::now() + SESSION_CLAIM_RETRY_PAUSE);
                continue;
            }
            Look::Visible => hold_until,
            Look::VisibleIn(delay) => Some(now + delay),
            Look::Empty => None,
        };
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Ok(Vec::new());
        }
        let until = match (deadline, wake_at) {
            (Some(deadline), Some(wake_at)) => Some(deadline.min(wake_at)),
            (deadline, wake_at) => deadline.or(wake_at),
        };
        match applied.wait(until).await {
            Wake::Applied | Wake::Deadline => {}
            Wake::Stopping => return Err(stopping()),
        }
    }
}
