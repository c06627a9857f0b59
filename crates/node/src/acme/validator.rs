//! The ACME validator: while this node leads, it fetches every HTTP-01 challenge a client said
//! is ready (`certus_core::acme`'s validating set) with the session daemons' tester, and records
//! what it found through Raft.
//!
//! One node validates at a time (the leader), so a challenge is fetched by one validator; a
//! leader change in the middle at worst fetches it twice, and only the first result recorded
//! counts (the state machine refuses a second). A challenge that is not served at the first
//! fetch is fetched again a few times, a second apart, before it is recorded as failed: clients
//! start their HTTP-01 server a moment before they say they are ready, or after.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use certus_core::acme::{AcmeCommand, OrderId};
use certus_core::{ChallengeToken, Command};
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tracing::{debug, info};

use crate::limits::{ACME_VALIDATION_ATTEMPTS_MAX, ACME_VALIDATIONS_IN_FLIGHT_MAX};
use crate::ordered_watch as watch;
use crate::raft::applied::{AppliedWatch, Wake};
use crate::raft::replica::{Leader, Replica};
use crate::roles::session_daemons::{BoxFuture, ChallengeTester, reason_text};

/// The pause between two fetches of a challenge that was not served.
const ATTEMPT_PAUSE: Duration = Duration::from_secs(1);
/// How often a node that does not lead looks again whether it leads now.
const FOLLOWER_LOOK: Duration = Duration::from_millis(500);

/// One challenge to fetch.
#[derive(Debug, Clone)]
struct Validation {
    order: OrderId,
    authorization: u32,
    name: String,
    token: ChallengeToken,
    key_authorization: String,
}

/// Validates until `stop`.
pub(crate) async fn run(
    replica: Arc<Replica>,
    tester: Arc<dyn ChallengeTester>,
    stop: watch::Receiver<bool>,
) {
    let mut applied = AppliedWatch::new(&replica, stop.clone());
    let mut running: FuturesUnordered<BoxFuture<'static, (Validation, Option<String>)>> =
        FuturesUnordered::new();
    let mut in_flight: BTreeSet<(OrderId, u32)> = BTreeSet::new();
    loop {
        if *stop.borrow() {
            break;
        }
        applied.mark();
        let leads = matches!(replica.leader(), Some(Leader::Me));
        if leads {
            for validation in waiting(&replica, &in_flight) {
                in_flight.insert((validation.order, validation.authorization));
                running.push(Box::pin(fetch(Arc::clone(&tester), validation)));
            }
        }
        let look_again = tokio::time::Instant::now() + FOLLOWER_LOOK;
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            Some((validation, error)) = running.next(), if !running.is_empty() => {
                in_flight.remove(&(validation.order, validation.authorization));
                record(&replica, validation, error).await;
            }
            wake = applied.wait(Some(look_again)) => {
                if wake == Wake::Stopping {
                    break;
                }
            }
        }
    }
    debug!(id = replica.id, "ACME validator stopped");
}

/// The challenges waiting to be fetched that are not being fetched, from this node's applied
/// state, up to what may run at once.
fn waiting(replica: &Replica, in_flight: &BTreeSet<(OrderId, u32)>) -> Vec<Validation> {
    let room = ACME_VALIDATIONS_IN_FLIGHT_MAX.saturating_sub(in_flight.len());
    if room == 0 {
        return Vec::new();
    }
    replica.reader.read(|applied| {
        let acme = applied.state.acme();
        acme.validating(ACME_VALIDATIONS_IN_FLIGHT_MAX)
            .into_iter()
            .filter(|key| !in_flight.contains(key))
            .take(room)
            .filter_map(|(order_id, position)| {
                let order = acme.order(order_id)?;
                let account = acme.account(order.account)?;
                let authz = order.authorizations.get(position as usize)?;
                Some(Validation {
                    order: order_id,
                    authorization: position,
                    name: authz.identifier.as_str().to_owned(),
                    token: authz.token.clone(),
                    // RFC 8555 §8.1: the token and the account key's thumbprint, at the time of
                    // the fetch (a key rollover since the order changes it).
                    key_authorization: format!("{}.{}", authz.token, account.key.thumbprint),
                })
            })
            .collect()
    })
}

/// Fetches one challenge, a few times if need be; the error of the last fetch if none served
/// the key authorization.
async fn fetch(
    tester: Arc<dyn ChallengeTester>,
    validation: Validation,
) -> (Validation, Option<String>) {
    let mut last_error = String::new();
    for attempt in 0..ACME_VALIDATION_ATTEMPTS_MAX {
        if attempt > 0 {
            tokio::time::sleep(ATTEMPT_PAUSE).await;
        }
        let outcome = tester
            .test(
                &validation.name,
                validation.token.as_str(),
                &validation.key_authorization,
            )
            .await;
        match outcome {
            certus_ca::http01::TestOutcome::Satisfied => return (validation, None),
            certus_ca::http01::TestOutcome::NotSatisfied { reason } => last_error = reason,
        }
    }
    (validation, Some(last_error))
}

async fn record(replica: &Replica, validation: Validation, error: Option<String>) {
    let reason = error.as_deref().map(reason_text);
    let valid = reason.is_none();
    let command = Command::Acme(AcmeCommand::RecordValidation {
        order: validation.order,
        authorization: validation.authorization,
        token: validation.token,
        error: reason,
    });
    match replica.write(vec![command]).await {
        Ok(_) => info!(
            order = %validation.order,
            name = %validation.name,
            valid,
            "ACME challenge validated"
        ),
        // The next look finds it still waiting and fetches it again.
        Err(error) => debug!(%error, order = %validation.order, "recording a validation failed"),
    }
}
