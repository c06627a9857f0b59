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
        match replica.write(commands).await {
            Err(error) => debug!(id = replica.id, %error, "tick not applied"),
            // A tick handles bounded batches (sessions, transactions); when more is due, tick again now.
            Ok(mut responses) => {
                while let Some(Response::Tick(reply)) = responses.first()
                    && reply.more()
                    && replica.leader() == Some(Leader::Me)
                {
                    match replica.write(vec![Command::Tick]).await {
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
