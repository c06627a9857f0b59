//! The CT log's background writes: one command proposed at a time, bounded in time, so a round
//! (the CT node's, or a mirror master's) never waits on a leader that has gone away.

use std::time::Duration;

use certus_core::ct::CtCommand;
use certus_core::{Command, Response};

use crate::errors::ServiceError;
use crate::raft::replica::Replica;

/// The longest a round waits for one write: a write forwarded to a leader that has just been
/// cut off would otherwise hold the round (and this node's reports) until the forward gives up.
const ROUND_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Proposes one CT command for a background round, giving up after [`ROUND_WRITE_TIMEOUT`]
/// (the next round tries again from the state it then reads).
pub(crate) async fn propose(replica: &Replica, command: CtCommand) -> Result<(), String> {
    let written = tokio::time::timeout(
        ROUND_WRITE_TIMEOUT,
        replica.write(vec![Command::Ct(command)]),
    )
    .await
    .map_err(|_| format!("no answer within {ROUND_WRITE_TIMEOUT:?}"))?;
    expect_ok(written)
}

fn expect_ok(written: Result<Vec<Response>, ServiceError>) -> Result<(), String> {
    match written.map_err(|e| e.to_string())?.into_iter().next() {
        Some(Response::Ct(Ok(_))) => Ok(()),
        Some(Response::Ct(Err(error))) => Err(error.to_string()),
        other => Err(format!("unexpected answer: {other:?}")),
    }
}
