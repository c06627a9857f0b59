//! The leader's tick: expiry and clean-up that the state machine does only when told, driven by
//! the leader's clock through the log.

use std::sync::Arc;

use crate::ordered_watch as watch;
use certus_core::{ChallengeCommand, Command, Response};
use tracing::debug;

use crate::config::NodeConfig;
use crate::raft::replica::{Leader, Replica};
use crate::stop::stopped;

/// The leader's clock drives expiry: it proposes a tick, and purges old challenge tokens, every
/// tick interval. Followers do nothing here.
pub async fn run(replica: Arc<Replica>, config: NodeConfig, stop: watch::Receiver<bool>) {
    let interval = config.tick_interval();
    loop {
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            () = stopped(stop.clone()) => break,
            () = tokio::time::sleep(interval) => {}
        }
        if replica.leader() != Some(Leader::Me) {
            continue;
        }
        let term = replica.metrics().borrow().current_term;
        let commands = vec![
            Command::Tick,
            Command::Challenge(ChallengeCommand::DeleteOlderThan {
                age_ms: config.challenge_retention_ms,
            }),
        ];
        match tick(&replica, term, commands).await {
            Err(error) => debug!(id = replica.id, %error, "tick not applied"),
            // A tick handles bounded batches (sessions, transactions); when more is due, tick again now.
            Ok(mut responses) => {
                while let Some(Response::Tick(reply)) = responses.first()
                    && reply.more()
                    && replica.leader() == Some(Leader::Me)
                {
                    match tick(&replica, term, vec![Command::Tick]).await {
                        Ok(next) => responses = next,
                        Err(error) => {
                            debug!(id = replica.id, %error, "tick not applied");
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Proposes a tick and waits for its answer while the term it was proposed in lasts. A leader
/// cut off with a tick in flight learns it lost its term only when the partition heals, and
/// the answer (unknown) comes seconds after that; a node elected again meanwhile must tick in
/// its new term at once, or claims that lapsed are not taken back. Once the term has moved on
/// the old tick is left to land or not: the next one does its work either way.
async fn tick(
    replica: &Replica,
    term: u64,
    commands: Vec<Command>,
) -> Result<Vec<Response>, String> {
    tokio::select! {
        // Polled in order, not at random: the simulation replays a seed exactly.
        biased;
        answered = replica.write(commands) => answered.map_err(|error| error.to_string()),
        () = term_moved_on(replica, term) => Err(format!("term {term} ended with the tick in flight")),
    }
}

/// Returns once this node knows of a term after `term` (never, while it does not).
async fn term_moved_on(replica: &Replica, term: u64) {
    let mut metrics = replica.metrics();
    loop {
        if metrics.borrow_and_update().current_term != term {
            return;
        }
        if metrics.changed().await.is_err() {
            // Raft stopped: the write's own outcome decides.
            std::future::pending::<()>().await;
        }
    }
}
