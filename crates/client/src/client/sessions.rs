//! `certus.v1.Sessions`: CA issuance sessions — the clients' calls, the operators' and the
//! workers', who claim a step from a stage's queue and finish it.

use std::time::Duration;

use tokio::time::Instant;

use certus_proto::v1::sessions_client::SessionsClient;
use certus_proto::v1::{
    AcknowledgeSessionRequest, ClaimReply, ClaimRequest, CompleteRequest,
    CompleteSessionBatchReply, CompleteSessionBatchRequest, CreateSessionRequest, ExtendReply,
    ExtendRequest, FailRequest, GetSessionRequest, KillSessionRequest, ListSessionsReply,
    ListSessionsRequest, ReleaseClaimRequest, Session, SessionConfig, SessionsStatus,
    SessionsStatusRequest, SetSessionConfigRequest, Stage, WaitSessionRequest, complete_request,
};

use super::call::rpcs;
use crate::limits::{LONG_POLL_WAIT_MAX, SESSION_CLAIM_WAIT_MAX};
use crate::{Client, ClientError};

rpcs! { SessionsClient::new =>
    "Sessions/Create": create(CreateSessionRequest) -> Session;
    "Sessions/Get": get(GetSessionRequest) -> Session;
    "Sessions/Wait": wait(WaitSessionRequest) -> Session;
    "Sessions/Acknowledge": acknowledge(AcknowledgeSessionRequest) -> Session;
    "Sessions/Kill": kill(KillSessionRequest) -> Session;
    "Sessions/List": list(ListSessionsRequest) -> ListSessionsReply;
    "Sessions/Claim": claim(ClaimRequest) -> ClaimReply;
    "Sessions/Extend": extend(ExtendRequest) -> ExtendReply;
    "Sessions/Complete": complete(CompleteRequest) -> Session;
    "Sessions/CompleteBatch": complete_batch(CompleteSessionBatchRequest) -> CompleteSessionBatchReply;
    "Sessions/Release": release(ReleaseClaimRequest) -> Session;
    "Sessions/Fail": fail(FailRequest) -> Session;
    "Sessions/Status": status(SessionsStatusRequest) -> SessionsStatus;
    "Sessions/SetConfig": set_config(SetSessionConfigRequest) -> SessionConfig;
}

impl Client {
    /// Creates an issuance session for `csr` (DER, or PEM "CERTIFICATE REQUEST") and its DNS
    /// `names` (empty: the CSR's names). The session starts in `MAKE_CHALLENGE`.
    ///
    /// Refusals include `invalid-argument` (the CSR does not parse or verify, or its names
    /// differ from `names`), `too-many-sessions` (`RESOURCE_EXHAUSTED`) and
    /// `request-key-reused` (`ALREADY_EXISTS`: the key names a session made from another CSR or
    /// other names).
    ///
    /// # Retries
    ///
    /// Numbered in the client session (the default), the call is retried like every other: a
    /// retry answers the session the first attempt created. So is a call with a `request_key`
    /// (1 to 128 visible ASCII characters), by the key: a retry with the same key, CSR and names
    /// answers the same session, even from another client.
    ///
    /// Unnumbered and without a key it is **not** safe to repeat — a retry after an ambiguous failure could
    /// create a second session — so it makes **a single attempt**, even after answers that are
    /// otherwise retried: a create may have been applied although the node answered
    /// `outcome-unknown`, or even `no-leader` (the node reads the new session back after the
    /// write, and that read can fail with `no-leader`). A failed attempt is returned as
    /// [`ClientError::Unavailable`] with `attempts: 1`; the session may or may not exist (look
    /// with [`Client::list_sessions`]). Pass a request key to get retries.
    pub async fn create_session(
        &self,
        csr: Vec<u8>,
        names: Vec<String>,
        request_key: Option<String>,
    ) -> Result<Session, ClientError> {
        let budget = if request_key.is_some() {
            self.budget()
        } else {
            self.budget().once()
        };
        let request = CreateSessionRequest {
            csr,
            names,
            request_key: request_key.unwrap_or_default(),
        };
        self.write_with(budget, request).await
    }

    /// The session `id`; refused with `unknown-session` (`NOT_FOUND`) if there is none (it was
    /// never created, or deleted after its archive retention).
    pub async fn get_session(&self, id: u64) -> Result<Session, ClientError> {
        self.call(GetSessionRequest { id }).await
    }

    /// Long-polls session `id`: answers as soon as it differs from `known` in anything but its
    /// claim (stage, liveness, challenges, acknowledgement, archiving, …), or once `wait` has
    /// passed (the node cuts one wait to 60 s, this client to an hour), with the session as it
    /// is then. Without `known` it answers at once, like [`Client::get_session`]. Compare the
    /// answer with `known` to tell a change from the end of the wait.
    ///
    /// Each attempt may take `wait` plus
    /// [`ClientConfig::attempt_timeout`](crate::ClientConfig::attempt_timeout), and the call
    /// `wait` plus [`ClientConfig::deadline`](crate::ClientConfig::deadline); a retry only waits
    /// for what is left of `wait`. A read: safe to repeat.
    pub async fn wait_session(
        &self,
        id: u64,
        known: Option<Session>,
        wait: Duration,
    ) -> Result<Session, ClientError> {
        self.long_poll(wait, |wait_ms| WaitSessionRequest {
            id,
            known: known.clone(),
            wait_ms,
        })
        .await
    }

    /// The client has the certificate of the `DONE` session `id`: it leaves the done set and is
    /// archived (still readable until the archive retention ends). Refused with `not-done`
    /// before `DONE`. Acknowledging again is harmless: safe to repeat.
    pub async fn acknowledge_session(&self, id: u64) -> Result<Session, ClientError> {
        self.write(AcknowledgeSessionRequest { id }).await
    }

    /// Kills session `id` for good with `reason`: it keeps its stage and never advances. Killing
    /// a session that is no longer live succeeds and changes nothing (the first reason stays):
    /// safe to repeat.
    pub async fn kill_session(
        &self,
        id: u64,
        reason: impl Into<String>,
    ) -> Result<Session, ClientError> {
        self.write(KillSessionRequest {
            id,
            reason: reason.into(),
        })
        .await
    }

    /// Sessions in `stage` (not [`Stage::Unspecified`]), in id order: at most `limit` (0 for the
    /// node's page size) with ids above `after` (0 for the first page). The reply's `next_after`
    /// is the `after` of the next page, 0 when there is none.
    pub async fn list_sessions(
        &self,
        stage: Stage,
        after: u64,
        limit: u32,
    ) -> Result<ListSessionsReply, ClientError> {
        self.call(ListSessionsRequest {
            stage: stage.into(),
            after,
            limit,
        })
        .await
    }

    /// The sessions' configuration and the depth of every queue.
    pub async fn sessions_status(&self) -> Result<SessionsStatus, ClientError> {
        self.call(SessionsStatusRequest {}).await
    }

    /// Replaces the sessions' configuration (every field; read it with
    /// [`Client::sessions_status`] first to change only some). Answers with the configuration
    /// in force; refused with `invalid-config` naming the first field out of range. Safe to
    /// repeat.
    pub async fn set_session_config(
        &self,
        config: SessionConfig,
    ) -> Result<SessionConfig, ClientError> {
        self.write(SetSessionConfigRequest {
            config: Some(config),
        })
        .await
    }

    /// Worker call: claims up to `max` sessions visible in the queued `stage`
    /// (`MAKE_CHALLENGE`, `TEST_CHALLENGE` or `ISSUE`) for `worker`, each until
    /// `visibility_ms` from now; an empty reply when none is waiting. Each claimed session
    /// carries its `claim_token`, which the calls below need.
    ///
    /// Retried like every call: a claim whose answer was lost leaves its sessions claimed by
    /// `worker` until the visibility passes, then they return to their queue. Such a retry
    /// delays sessions; it never loses one or hands one to two workers.
    pub async fn claim_sessions(
        &self,
        stage: Stage,
        worker: impl Into<String>,
        visibility_ms: u64,
        max: u32,
    ) -> Result<ClaimReply, ClientError> {
        self.write(ClaimRequest {
            stage: stage.into(),
            worker: worker.into(),
            visibility_ms,
            max,
            wait_ms: 0,
        })
        .await
    }

    /// Worker call: [`Client::claim_sessions`] as a long-poll. Answers as soon as up to `max`
    /// sessions were claimed, or empty once `wait` has passed; the node waits without polling
    /// and proposes the claim only when a session is visible. A wait longer than the node takes
    /// in one call (60 s) is made of several calls, and so is a call the node answered empty
    /// before the wait was over (another worker claimed the session first). An hour at most.
    ///
    /// Each call may take its wait plus
    /// [`ClientConfig::attempt_timeout`](crate::ClientConfig::attempt_timeout); retried like
    /// [`Client::claim_sessions`].
    pub async fn claim_sessions_waiting(
        &self,
        stage: Stage,
        worker: impl Into<String>,
        visibility_ms: u64,
        max: u32,
        wait: Duration,
    ) -> Result<ClaimReply, ClientError> {
        let worker = worker.into();
        let until = Instant::now() + wait.min(LONG_POLL_WAIT_MAX);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let wait = left.min(SESSION_CLAIM_WAIT_MAX);
            let request = ClaimRequest {
                stage: stage.into(),
                worker: worker.clone(),
                visibility_ms,
                max,
                wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            };
            let reply = self
                .write_with(self.budget().waiting(wait), request)
                .await?;
            if !reply.sessions.is_empty() || wait.is_zero() || Instant::now() >= until {
                return Ok(reply);
            }
        }
    }

    /// Worker call: moves the claim `token` on session `id` to expire `visibility_ms` from now.
    /// Refused with `stale-claim` when `token` is not the session's current claim (the claim
    /// expired and was taken back: drop the work) and `not-live` once it is killed. Safe to
    /// repeat (the deadline is set from the time of the last attempt).
    pub async fn extend_claim(
        &self,
        id: u64,
        token: u64,
        visibility_ms: u64,
    ) -> Result<ExtendReply, ClientError> {
        self.write(ExtendRequest {
            id,
            claim_token: token,
            visibility_ms,
        })
        .await
    }

    /// Worker call: finishes the step claimed with `token` on session `id` with its `outcome`
    /// (the one matching the claimed stage), and the session moves on; answers with the
    /// session as it is now.
    ///
    /// Safe to repeat with the same token: a retry after a lost answer is accepted and changes
    /// nothing. Refused with `stale-claim` when another claim holds (or held) the session since,
    /// `not-live` once killed, `invalid-argument` for an outcome that does not fit.
    pub async fn complete_session(
        &self,
        id: u64,
        token: u64,
        outcome: complete_request::Outcome,
    ) -> Result<Session, ClientError> {
        self.write(CompleteRequest {
            id,
            claim_token: token,
            outcome: Some(outcome),
        })
        .await
    }

    /// Worker call: several completes in one write (one Raft entry), each item a
    /// [`CompleteRequest`] as for [`Client::complete_session`]. Answered item by item, in
    /// order: an item is atomic, the batch is not — a stale token or a wrong outcome fails its
    /// own item (its `error` names the reason a lone complete would get) and the others are
    /// applied. Refused whole (`invalid-argument`, nothing applied) for 0 or more than 100
    /// items, or an item malformed in itself. Safe to repeat: applied items replay their
    /// answers.
    pub async fn complete_session_batch(
        &self,
        items: Vec<CompleteRequest>,
    ) -> Result<CompleteSessionBatchReply, ClientError> {
        self.write(CompleteSessionBatchRequest { items }).await
    }

    /// Worker call: gives the session `id` claimed with `token` back unfinished (a transient
    /// error); it is visible in its queue again after `delay_ms`. `note` (may be empty) says why,
    /// for people. Safe to repeat with the same token, like [`Client::complete_session`].
    pub async fn release_session(
        &self,
        id: u64,
        token: u64,
        delay_ms: u64,
        note: impl Into<String>,
    ) -> Result<Session, ClientError> {
        self.write(ReleaseClaimRequest {
            id,
            claim_token: token,
            delay_ms,
            note: note.into(),
        })
        .await
    }

    /// Worker call: ends the session `id` claimed with `token` as `FAILED` with `reason` (a
    /// permanent error). Safe to repeat with the same token, like [`Client::complete_session`].
    pub async fn fail_session(
        &self,
        id: u64,
        token: u64,
        reason: impl Into<String>,
    ) -> Result<Session, ClientError> {
        self.write(FailRequest {
            id,
            claim_token: token,
            reason: reason.into(),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::complete_request::{Issued, Outcome};
    use crate::client::call::testing::{assert_attempts, unreachable};

    #[tokio::test]
    async fn a_create_without_a_request_key_is_tried_once() {
        // Unnumbered: the budgets of writes that must not be applied twice.
        let client = unreachable(3, false);
        let create = client.create_session(vec![0x30], Vec::new(), None).await;
        assert_attempts(create, 1, "a create without a key is not repeated");
        let key = Some("key-1".to_owned());
        let create = client.create_session(vec![0x30], Vec::new(), key).await;
        assert_attempts(create, 3, "a keyed create is retried");
        let issued = Outcome::Issued(Issued {
            certificate: String::new(),
        });
        let complete = client.complete_session(7, 9, issued).await;
        assert_attempts(complete, 3, "a complete is retried");
    }

    #[tokio::test]
    async fn a_waiting_claim_is_a_numbered_write_retried_like_any() {
        let client = unreachable(2, true);
        let claimed = client
            .claim_sessions_waiting(
                super::Stage::MakeChallenge,
                "w",
                30_000,
                1,
                Duration::from_millis(200),
            )
            .await;
        assert_attempts(claimed, 2, "claim_sessions_waiting");
    }

    #[tokio::test]
    async fn a_wait_is_retried_within_its_own_deadline() {
        let client = unreachable(2, true);
        let wait = client
            .wait_session(1, None, Duration::from_millis(200))
            .await;
        assert_attempts(wait, 2, "wait_session");
    }
}
