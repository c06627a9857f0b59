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
        let commands = vec![
            Command::Tick,
            Command::Challenge(ChallengeCommand::DeleteOlderThan {
                age_ms: config.challenge_retention_ms,
            }),
        ];
        match tick(&replica, commands, interval).await {
            Err(error) => debug!(id = replica.id, %error, "tick not applied"),
            // A tick handles bounded batches (sessions, transactions); when more is due, tick again now.
            Ok(mut responses) => {
                while let Some(Response::Tick(reply)) = responses.first()
                    && reply.more()
                    && replica.leader() == Some(Leader::Me)
                {
                    match tick(&replica, vec![Command::Tick], interval).await {
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

/// Proposes a tick and waits for its answer, but no longer than [`TICK_ANSWER_WAIT_INTERVALS`]
/// tick intervals. A leader cut off with a tick in flight learns only when the partition heals
/// that it lost its term, and the tick's answer (unknown) comes later still: waiting for it kept
/// a node that led again meanwhile from ticking, and its lapsed claims were never taken back.
/// A tick unanswered is left to land or not; the next one does its work either way.
async fn tick(
    replica: &Replica,
    commands: Vec<Command>,
    interval: std::time::Duration,
) -> Result<Vec<Response>, String> {
    match tokio::time::timeout(
        interval * TICK_ANSWER_WAIT_INTERVALS,
        replica.write(commands),
    )
    .await
    {
        Ok(answered) => answered.map_err(|error| error.to_string()),
        Err(_elapsed) => Err(format!(
            "no answer within {TICK_ANSWER_WAIT_INTERVALS} tick intervals"
        )),
    }
}

/// How many tick intervals a tick's answer is waited for.
const TICK_ANSWER_WAIT_INTERVALS: u32 = 3;
