//! The client: channels, leader discovery, the retry loop, and one method per RPC.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::auth::{NodeChannel, node_channel};
use certus_proto::health::HealthCheckRequest;
use certus_proto::health::health_check_response::ServingStatus;
use certus_proto::health::health_client::HealthClient;
use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::clients_client::ClientsClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::log_client::LogClient;
use certus_proto::v1::pipelines_client::PipelinesClient;
use certus_proto::v1::sessions_client::SessionsClient;
use certus_proto::v1::{
    AcknowledgeNoticesReply, AcknowledgeNoticesRequest, ArchiveCursor, ArchivedTransaction,
    CancelReply, CancelRequest, CompleteTransactionReply, CompleteTransactionRequest,
    DefinePipelineReply, DefinePipelineRequest, DeletePipelineReply, DeletePipelineRequest,
    DequeueReply, DequeueRequest, EnqueueReply, EnqueueRequest, ExportArchiveRequest,
    GetPipelineConfigRequest, GetStateReply, GetStateRequest, GetSwitchRequest, ListInPlayRequest,
    ListNoticesReply, ListNoticesRequest, ListPipelinesReply, ListPipelinesRequest,
    ListStuckRequest, ListTransactionsReply, PipelineConfig, PipelineNotification, PipelinesStatus,
    PipelinesStatusRequest, ProgressReply, ProgressRequest, RequeueReply, RequeueRequest,
    SetPipelineConfigRequest, SetSwitchReply, SetSwitchRequest, SleepReply, SleepRequest, TxStatus,
    WatchCompletionsRequest,
};
use certus_proto::v1::{
    AcknowledgeSessionRequest, AcquireReply, AcquireRequest, AddChainReply, AddChainRequest,
    AddLearnerRequest, Challenge, ChangeMembershipRequest, CheckFenceReply, CheckFenceRequest,
    ClaimReply, ClaimRequest, CloseClientRequest, CompleteRequest, CreateSessionRequest,
    DeleteChallengeReply, DeleteChallengeRequest, ExtendReply, ExtendRequest, FailRequest,
    GetChallengeRequest, GetConsistencyReply, GetConsistencyRequest, GetEntriesReply,
    GetEntriesRequest, GetLeaseRequest, GetProofByHashReply, GetProofByHashRequest, GetRootsReply,
    GetRootsRequest, GetSessionRequest, GetSthRequest, KillSessionRequest, Lease,
    ListChallengesReply, ListChallengesRequest, ListLeasesReply, ListLeasesRequest,
    ListSessionsReply, ListSessionsRequest, LogConfig, LogStatus, LogStatusRequest,
    MembershipReply, PurgeChallengesReply, PurgeChallengesRequest, PutChallengeReply,
    PutChallengeRequest, RegisterClientRequest, ReleaseClaimRequest, ReleaseReply, ReleaseRequest,
    RenewReply, RenewRequest, Session, SessionConfig, SessionsStatus, SessionsStatusRequest,
    SetFrozenRequest, SetLogConfigRequest, SetSessionConfigRequest, SignedTreeHead, Stage,
    StartMirrorRequest, StatusReply, StatusRequest, TriggerSnapshotReply, TriggerSnapshotRequest,
    WaitSessionRequest, complete_request,
};
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::{Response, Status};

use crate::error::{Disposition, describe, disposition, reason_of};
use crate::numbering::{Number, Numbering};
use crate::{ClientConfig, ClientError, parse_endpoint};

/// The reason a node gives when a write was refused before anything was proposed.
const NOTHING_PROPOSED: &str = "no-leader";

/// The largest `certus.v1.Pipelines` reply accepted, in bytes: the node's own bound
/// (`PIPELINE_REPLY_BYTES_MAX`), which a full dequeue batch can approach. A dequeue cannot be
/// undone, so its answer must never be refused here for its size.
pub const PIPELINE_REPLY_BYTES_MAX: usize = 32 * 1024 * 1024;

/// A Pipelines stub on `channel` that accepts the largest replies the node sends.
fn pipelines(channel: NodeChannel) -> PipelinesClient<NodeChannel> {
    PipelinesClient::new(channel).max_decoding_message_size(PIPELINE_REPLY_BYTES_MAX)
}

/// A client of one Certus cluster.
///
/// Cheap to clone: clones share their connections and what they know of the leader. See the
/// [crate documentation](crate) for where requests go and when they are retried.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The configured endpoints, normalised, without duplicates; never empty.
    endpoints: Vec<String>,
    config: ClientConfig,
    state: Mutex<State>,
    /// The client session its writes are numbered in, once registered
    /// ([`ClientConfig::exactly_once`]). Registration happens once, whoever asks first.
    session: Arc<tokio::sync::Mutex<Option<Arc<Numbering>>>>,
}

#[derive(Debug, Default)]
struct State {
    /// One lazily connected channel per endpoint used so far.
    channels: BTreeMap<String, NodeChannel>,
    /// Where requests go until an attempt there fails: the leader when known.
    preferred: Option<String>,
    /// Where the next leader discovery starts, so that successive discoveries spread out.
    cursor: usize,
}

/// How long a call may take.
#[derive(Debug, Clone, Copy)]
struct Budget {
    attempt_timeout: Duration,
    deadline: Duration,
    /// The most attempts (at least one is made).
    max_attempts: u32,
    /// Retry only after answers that say nothing was proposed (`no-leader`): for writes that
    /// are not safe to repeat, where any other failure may have been applied.
    unproposed_only: bool,
}

impl Budget {
    /// The same budget for a call that must not be repeated: one attempt.
    fn once(self) -> Budget {
        Budget {
            max_attempts: 1,
            ..self
        }
    }

    /// The same budget for a write that must not be applied twice: retried only when the node
    /// answered that nothing was proposed.
    fn unproposed_only(self) -> Budget {
        Budget {
            unproposed_only: true,
            ..self
        }
    }
}

/// Why one attempt failed.
#[derive(Debug)]
enum Failure {
    /// The endpoint cannot even be turned into a channel.
    Invalid(ClientError),
    /// The RPC failed with a status.
    Status(Disposition, Status),
    /// No answer within the attempt's timeout.
    TimedOut(Duration),
}

impl Client {
    /// A client of the cluster these endpoints (`host:port`, see [`parse_endpoint`]) belong
    /// to, with the default [`ClientConfig`]. No connection is made until the first call.
    pub fn new<I, S>(endpoints: I) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::with_config(endpoints, ClientConfig::default())
    }

    /// A client with a chosen configuration. Fails if no endpoint is given or one is not of
    /// the form `host:port`; duplicates are dropped.
    pub fn with_config<I, S>(endpoints: I, config: ClientConfig) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut parsed: Vec<String> = Vec::new();
        for endpoint in endpoints {
            let endpoint = parse_endpoint(endpoint.as_ref())?;
            if !parsed.contains(&endpoint) {
                parsed.push(endpoint);
            }
        }
        if parsed.is_empty() {
            return Err(ClientError::InvalidEndpoint(
                "list: none given; a client needs at least one host:port".to_owned(),
            ));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints: parsed,
                config,
                state: Mutex::new(State::default()),
                session: Arc::default(),
            }),
        })
    }

    /// A client of the same cluster through other endpoints or with another configuration that
    /// numbers its writes in `other`'s client session, as one client: a program that talks to
    /// each node through its own client (pinned to it) still has one sequence of requests, so a
    /// request abandoned on one node is never applied after a later one made through another.
    pub fn sharing_session_with<I, S>(
        endpoints: I,
        config: ClientConfig,
        other: &Client,
    ) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let client = Client::with_config(endpoints, config)?;
        let inner = Arc::try_unwrap(client.inner).expect("a new client is not shared yet");
        Ok(Client {
            inner: Arc::new(Inner {
                session: Arc::clone(&other.inner.session),
                ..inner
            }),
        })
    }

    /// The configured endpoints, normalised, in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// Where the client sends its next request without asking first (the leader, once it has
    /// been found), if it knows.
    pub fn preferred_endpoint(&self) -> Option<String> {
        self.state().preferred.clone()
    }

    // ---- certus.v1.Clients -------------------------------------------------------------

    /// The id of this client's session (registered on first write), if it has one. Writes from
    /// clones of this client share it.
    pub async fn client_session_id(&self) -> Option<u64> {
        self.inner.session.lock().await.as_ref().map(|n| n.id())
    }

    /// Closes this client's session, if it has one: the cluster forgets the answers it kept for
    /// it. The next write registers a new session. Call it when a long-lived program stops
    /// writing; sessions left open expire on their own.
    pub async fn close_client_session(&self) -> Result<(), ClientError> {
        let Some(numbering) = self.inner.session.lock().await.take() else {
            return Ok(());
        };
        let request = CloseClientRequest {
            client_id: numbering.id(),
        };
        self.call("Clients/Close", self.budget(), move |channel| async move {
            ClientsClient::new(channel).close(request).await
        })
        .await?;
        Ok(())
    }

    // ---- certus.v1.Leases --------------------------------------------------------------

    /// Grants the lease `name` to `holder` for `ttl_ms` milliseconds if it is free or expired;
    /// renews it (same fencing token) if `holder` already holds it.
    ///
    /// Refusals include `not-holder` (someone else holds it), `invalid-ttl`,
    /// `invalid-argument` and `too-many-leases`.
    pub async fn acquire(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
        ttl_ms: u64,
    ) -> Result<AcquireReply, ClientError> {
        let request = AcquireRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms,
        };
        self.write(
            "Leases/Acquire",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    LeasesClient::new(channel)
                        .acquire(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    /// Extends the live lease `name` held by `holder` to `ttl_ms` from now; the fencing token
    /// is unchanged. Refusals include `not-holder`, `expired` and `unknown-lease`.
    pub async fn renew(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
        ttl_ms: u64,
    ) -> Result<RenewReply, ClientError> {
        let request = RenewRequest {
            name: name.into(),
            holder: holder.into(),
            ttl_ms,
        };
        self.write(
            "Leases/Renew",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { LeasesClient::new(channel).renew(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Gives up the live lease `name` held by `holder`; the reply holds the lease as it was.
    ///
    /// Numbered in the client session (the default), a retry after an ambiguous failure gets
    /// the first attempt's answer. Without it, a retried release may answer `unknown-lease` or
    /// `not-holder` although the first attempt released the lease (see the
    /// [crate documentation](crate#exactly-once-writes)).
    pub async fn release(
        &self,
        name: impl Into<String>,
        holder: impl Into<String>,
    ) -> Result<ReleaseReply, ClientError> {
        let request = ReleaseRequest {
            name: name.into(),
            holder: holder.into(),
        };
        self.write(
            "Leases/Release",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    LeasesClient::new(channel)
                        .release(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    /// The live lease `name`; refused with `NOT_FOUND` if there is none.
    pub async fn get_lease(&self, name: impl Into<String>) -> Result<Lease, ClientError> {
        let request = GetLeaseRequest { name: name.into() };
        self.call("Leases/Get", self.budget(), move |channel| {
            let request = request.clone();
            async move { LeasesClient::new(channel).get(request).await }
        })
        .await
    }

    /// Live leases in name order: at most `limit` (0 for the node's page size) after
    /// `start_after` (`None` for the first page).
    pub async fn list_leases(
        &self,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<ListLeasesReply, ClientError> {
        let request = ListLeasesRequest {
            start_after: start_after.unwrap_or_default().to_owned(),
            limit,
        };
        self.call("Leases/List", self.budget(), move |channel| {
            let request = request.clone();
            async move { LeasesClient::new(channel).list(request).await }
        })
        .await
    }

    /// Whether `fencing_token` is the live grant's of the lease `name`.
    pub async fn check_fence(
        &self,
        name: impl Into<String>,
        fencing_token: u64,
    ) -> Result<CheckFenceReply, ClientError> {
        let request = CheckFenceRequest {
            name: name.into(),
            fencing_token,
        };
        self.call("Leases/CheckFence", self.budget(), move |channel| {
            let request = request.clone();
            async move { LeasesClient::new(channel).check_fence(request).await }
        })
        .await
    }

    /// Stores (or replaces) the key authorization served for the HTTP-01 `token`.
    pub async fn put_challenge(
        &self,
        token: impl Into<String>,
        key_authorization: impl Into<String>,
    ) -> Result<PutChallengeReply, ClientError> {
        let request = PutChallengeRequest {
            token: token.into(),
            key_authorization: key_authorization.into(),
        };
        self.write(
            "Leases/PutChallenge",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    LeasesClient::new(channel)
                        .put_challenge(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    /// The challenge stored for `token`; refused with `NOT_FOUND` if there is none.
    pub async fn get_challenge(&self, token: impl Into<String>) -> Result<Challenge, ClientError> {
        let request = GetChallengeRequest {
            token: token.into(),
        };
        self.call("Leases/GetChallenge", self.budget(), move |channel| {
            let request = request.clone();
            async move { LeasesClient::new(channel).get_challenge(request).await }
        })
        .await
    }

    /// Removes `token`; removing a missing token is not an error (`existed` is false).
    pub async fn delete_challenge(
        &self,
        token: impl Into<String>,
    ) -> Result<DeleteChallengeReply, ClientError> {
        let request = DeleteChallengeRequest {
            token: token.into(),
        };
        self.write(
            "Leases/DeleteChallenge",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    LeasesClient::new(channel)
                        .delete_challenge(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    /// Stored challenges in token order: at most `limit` (0 for the node's page size) after
    /// `start_after` (`None` for the first page).
    pub async fn list_challenges(
        &self,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<ListChallengesReply, ClientError> {
        let request = ListChallengesRequest {
            start_after: start_after.unwrap_or_default().to_owned(),
            limit,
        };
        self.call("Leases/ListChallenges", self.budget(), move |channel| {
            let request = request.clone();
            async move { LeasesClient::new(channel).list_challenges(request).await }
        })
        .await
    }

    /// Removes every challenge stored more than `older_than_ms` milliseconds ago.
    pub async fn purge_challenges(
        &self,
        older_than_ms: u64,
    ) -> Result<PurgeChallengesReply, ClientError> {
        let request = PurgeChallengesRequest { older_than_ms };
        self.write(
            "Leases/PurgeChallenges",
            self.budget(),
            move |channel, number: Number| async move {
                LeasesClient::new(channel)
                    .purge_challenges(number.wrap(request))
                    .await
            },
        )
        .await
    }

    // ---- certus.v1.Admin ---------------------------------------------------------------

    /// The cluster's status as one node sees it: the leader's view when the leader answers,
    /// otherwise any node's (with retries like every cluster call).
    pub async fn status(&self) -> Result<StatusReply, ClientError> {
        self.call("Admin/Status", self.budget(), |channel| async move {
            AdminClient::new(channel).status(StatusRequest {}).await
        })
        .await
    }

    /// The status of the node at `endpoint`, which need not be one of the client's endpoints.
    /// One attempt, never sent to another node: an unreachable node is reported as
    /// [`ClientError::Unavailable`].
    pub async fn status_of(&self, endpoint: &str) -> Result<StatusReply, ClientError> {
        let timeout = self.config().attempt_timeout;
        self.call_one(endpoint, timeout, |channel| async move {
            AdminClient::new(channel).status(StatusRequest {}).await
        })
        .await
    }

    /// Adds node `id` as a learner with the given addresses (`ip:port`); the node answers once
    /// the learner has caught up. Attempts time out after [`ClientConfig::admin_timeout`].
    pub async fn add_learner(
        &self,
        id: u64,
        grpc_addr: impl Into<String>,
        http_addr: impl Into<String>,
    ) -> Result<MembershipReply, ClientError> {
        let request = AddLearnerRequest {
            id,
            grpc_addr: grpc_addr.into(),
            http_addr: http_addr.into(),
        };
        self.call("Admin/AddLearner", self.admin_budget(), move |channel| {
            let request = request.clone();
            async move { AdminClient::new(channel).add_learner(request).await }
        })
        .await
    }

    /// Makes `voters` the voters. Each must already be a member (refused with `not-a-member`
    /// otherwise); members left out become learners if `retain`, and leave otherwise.
    /// Attempts time out after [`ClientConfig::admin_timeout`].
    pub async fn change_membership(
        &self,
        voters: impl IntoIterator<Item = u64>,
        retain: bool,
    ) -> Result<MembershipReply, ClientError> {
        let request = ChangeMembershipRequest {
            voters: voters.into_iter().collect(),
            retain,
        };
        self.call(
            "Admin/ChangeMembership",
            self.admin_budget(),
            move |channel| {
                let request = request.clone();
                async move { AdminClient::new(channel).change_membership(request).await }
            },
        )
        .await
    }

    /// Makes the node at `endpoint` build a snapshot now (and compact its log). One attempt,
    /// timing out after [`ClientConfig::admin_timeout`].
    pub async fn trigger_snapshot(
        &self,
        endpoint: &str,
    ) -> Result<TriggerSnapshotReply, ClientError> {
        let timeout = self.config().admin_timeout;
        self.call_one(endpoint, timeout, |channel| async move {
            AdminClient::new(channel)
                .trigger_snapshot(TriggerSnapshotRequest {})
                .await
        })
        .await
    }

    // ---- certus.v1.Log ----------------------------------------------------------------

    /// Submits a certificate chain to the CT log, leaf first, DER each (RFC 6962 add-chain), or
    /// with `precertificate` a precertificate chain (add-pre-chain). Answers with the SCT once
    /// the entry is committed; a chain the log already has gets its original SCT, so a retry
    /// after an ambiguous failure is safe.
    ///
    /// Refusals include `bad-chain` (the chain fails a check, for example it does not lead to
    /// an accepted root), `frozen`, `backlog` (`RESOURCE_EXHAUSTED`: try later) and `too-large`.
    pub async fn add_chain(
        &self,
        chain: Vec<Vec<u8>>,
        precertificate: bool,
    ) -> Result<AddChainReply, ClientError> {
        let request = AddChainRequest {
            chain,
            precertificate,
        };
        self.call("Log/AddChain", self.budget(), move |channel| {
            let request = request.clone();
            async move { LogClient::new(channel).add_chain(request).await }
        })
        .await
    }

    /// The serving signed tree head (get-sth).
    ///
    /// Log reads are answered from the local tree of the node asked; a node that has not yet
    /// integrated the serving tree answers `UNAVAILABLE` with the reason `behind`, and the call
    /// moves on to another node. Before the first STH is published every node answers `behind`.
    pub async fn get_sth(&self) -> Result<SignedTreeHead, ClientError> {
        self.call("Log/GetSth", self.budget(), |channel| async move {
            LogClient::new(channel).get_sth(GetSthRequest {}).await
        })
        .await
    }

    /// A consistency proof between the trees of sizes `first` and `second`, both at most the
    /// serving tree size (get-sth-consistency).
    pub async fn get_consistency(
        &self,
        first: u64,
        second: u64,
    ) -> Result<GetConsistencyReply, ClientError> {
        let request = GetConsistencyRequest { first, second };
        self.call(
            "Log/GetConsistency",
            self.budget(),
            move |channel| async move { LogClient::new(channel).get_consistency(request).await },
        )
        .await
    }

    /// The index and audit path of the leaf whose Merkle leaf hash is `leaf_hash` (32 bytes),
    /// in the tree of size `tree_size` (get-proof-by-hash). `NOT_FOUND` if the tree does not
    /// hold it.
    pub async fn get_proof_by_hash(
        &self,
        leaf_hash: impl Into<Vec<u8>>,
        tree_size: u64,
    ) -> Result<GetProofByHashReply, ClientError> {
        let request = GetProofByHashRequest {
            leaf_hash: leaf_hash.into(),
            tree_size,
        };
        self.call("Log/GetProofByHash", self.budget(), move |channel| {
            let request = request.clone();
            async move { LogClient::new(channel).get_proof_by_hash(request).await }
        })
        .await
    }

    /// Entries `start..=end`, at most 1000 and never past the serving tree (get-entries; a
    /// shorter answer than asked is normal).
    pub async fn get_entries(&self, start: u64, end: u64) -> Result<GetEntriesReply, ClientError> {
        let request = GetEntriesRequest { start, end };
        self.call("Log/GetEntries", self.budget(), move |channel| async move {
            LogClient::new(channel).get_entries(request).await
        })
        .await
    }

    /// The root certificates the log accepts chains up to, DER each (get-roots).
    pub async fn get_roots(&self) -> Result<GetRootsReply, ClientError> {
        self.call("Log/GetRoots", self.budget(), |channel| async move {
            LogClient::new(channel).get_roots(GetRootsRequest {}).await
        })
        .await
    }

    /// The log as the replicated state sees it (configuration, frozen, serving STH, sequencing
    /// backlog, every node's last report), with the local tree of the node that answered.
    pub async fn log_status(&self) -> Result<LogStatus, ClientError> {
        self.call("Log/Status", self.budget(), |channel| async move {
            LogClient::new(channel).status(LogStatusRequest {}).await
        })
        .await
    }

    /// [`Client::log_status`] of the node at `endpoint`, for its local tree. One attempt, never
    /// sent to another node.
    pub async fn log_status_of(&self, endpoint: &str) -> Result<LogStatus, ClientError> {
        let timeout = self.config().attempt_timeout;
        self.call_one(endpoint, timeout, |channel| async move {
            LogClient::new(channel).status(LogStatusRequest {}).await
        })
        .await
    }

    /// Replaces the log's cluster-wide configuration (every field; read it with
    /// [`Client::log_status`] first to change only some). Answers with the configuration in
    /// force; refused with `invalid-config` naming the first field out of range. Safe to
    /// repeat.
    pub async fn set_log_config(&self, config: LogConfig) -> Result<LogConfig, ClientError> {
        let request = SetLogConfigRequest {
            config: Some(config),
        };
        self.call("Log/SetConfig", self.budget(), move |channel| async move {
            LogClient::new(channel).set_config(request).await
        })
        .await
    }

    /// Freezes the log (`true`: no new entries are accepted, STHs are still served) or
    /// unfreezes it. Answers with the log's status afterwards. Safe to repeat.
    pub async fn set_frozen(&self, frozen: bool) -> Result<LogStatus, ClientError> {
        let request = SetFrozenRequest { frozen };
        self.call("Log/SetFrozen", self.budget(), move |channel| async move {
            LogClient::new(channel).set_frozen(request).await
        })
        .await
    }

    /// Makes the (empty) log a mirror of the RFC 6962 log at `source_url` whose key is
    /// `source_public_key` (DER SubjectPublicKeyInfo), for good; on a mirror of the same key,
    /// changes the source's URL. Answers with the log's status afterwards. Safe to repeat.
    pub async fn start_mirror(
        &self,
        source_url: &str,
        source_public_key: &[u8],
    ) -> Result<LogStatus, ClientError> {
        let request = StartMirrorRequest {
            source_url: source_url.to_owned(),
            source_public_key: source_public_key.to_vec(),
        };
        self.call("Log/StartMirror", self.budget(), move |channel| {
            let request = request.clone();
            async move { LogClient::new(channel).start_mirror(request).await }
        })
        .await
    }

    // ---- certus.v1.Sessions -----------------------------------------------------------

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
        self.write("Sessions/Create", budget, move |channel, number: Number| {
            let request = request.clone();
            async move {
                SessionsClient::new(channel)
                    .create(number.wrap(request))
                    .await
            }
        })
        .await
    }

    /// The session `id`; refused with `unknown-session` (`NOT_FOUND`) if there is none (it was
    /// never created, or deleted after its archive retention).
    pub async fn get_session(&self, id: u64) -> Result<Session, ClientError> {
        let request = GetSessionRequest { id };
        self.call("Sessions/Get", self.budget(), move |channel| async move {
            SessionsClient::new(channel).get(request).await
        })
        .await
    }

    /// Long-polls session `id`: answers as soon as it differs from `known` in anything but its
    /// claim (stage, liveness, challenges, acknowledgement, archiving, …), or once `wait` has
    /// passed (the node cuts one wait to 60 s, this client to an hour), with the session as it
    /// is then. Without `known` it answers at once, like [`Client::get_session`]. Compare the
    /// answer with `known` to tell a change from the end of the wait.
    ///
    /// Each attempt may take `wait` plus [`ClientConfig::attempt_timeout`], and the call `wait`
    /// plus [`ClientConfig::deadline`]; a retry only waits for what is left of `wait`. A read:
    /// safe to repeat.
    pub async fn wait_session(
        &self,
        id: u64,
        known: Option<Session>,
        wait: Duration,
    ) -> Result<Session, ClientError> {
        // The node cuts a wait to 60 s; an hour keeps the arithmetic below from overflowing.
        let wait = wait.min(Duration::from_secs(3_600));
        let config = self.config();
        let budget = Budget {
            attempt_timeout: config.attempt_timeout.saturating_add(wait),
            deadline: config.deadline.saturating_add(wait),
            max_attempts: config.max_attempts,
            unproposed_only: false,
        };
        let until = Instant::now() + wait;
        self.call("Sessions/Wait", budget, move |channel| {
            let left = until.saturating_duration_since(Instant::now());
            let request = WaitSessionRequest {
                id,
                known: known.clone(),
                wait_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
            };
            async move { SessionsClient::new(channel).wait(request).await }
        })
        .await
    }

    /// The client has the certificate of the `DONE` session `id`: it leaves the done set and is
    /// archived (still readable until the archive retention ends). Refused with `not-done`
    /// before `DONE`. Acknowledging again is harmless: safe to repeat.
    pub async fn acknowledge_session(&self, id: u64) -> Result<Session, ClientError> {
        let request = AcknowledgeSessionRequest { id };
        self.write(
            "Sessions/Acknowledge",
            self.budget(),
            move |channel, number: Number| async move {
                SessionsClient::new(channel)
                    .acknowledge(number.wrap(request))
                    .await
            },
        )
        .await
    }

    /// Kills session `id` for good with `reason`: it keeps its stage and never advances. Killing
    /// a session that is no longer live succeeds and changes nothing (the first reason stays):
    /// safe to repeat.
    pub async fn kill_session(
        &self,
        id: u64,
        reason: impl Into<String>,
    ) -> Result<Session, ClientError> {
        let request = KillSessionRequest {
            id,
            reason: reason.into(),
        };
        self.write(
            "Sessions/Kill",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    SessionsClient::new(channel)
                        .kill(number.wrap(request))
                        .await
                }
            },
        )
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
        let request = ListSessionsRequest {
            stage: stage.into(),
            after,
            limit,
        };
        self.call("Sessions/List", self.budget(), move |channel| async move {
            SessionsClient::new(channel).list(request).await
        })
        .await
    }

    /// The sessions' configuration and the depth of every queue.
    pub async fn sessions_status(&self) -> Result<SessionsStatus, ClientError> {
        self.call("Sessions/Status", self.budget(), |channel| async move {
            SessionsClient::new(channel)
                .status(SessionsStatusRequest {})
                .await
        })
        .await
    }

    /// Replaces the sessions' configuration (every field; read it with
    /// [`Client::sessions_status`] first to change only some). Answers with the configuration
    /// in force; refused with `invalid-config` naming the first field out of range. Safe to
    /// repeat.
    pub async fn set_session_config(
        &self,
        config: SessionConfig,
    ) -> Result<SessionConfig, ClientError> {
        let request = SetSessionConfigRequest {
            config: Some(config),
        };
        self.write(
            "Sessions/SetConfig",
            self.budget(),
            move |channel, number: Number| async move {
                SessionsClient::new(channel)
                    .set_config(number.wrap(request))
                    .await
            },
        )
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
        let request = ClaimRequest {
            stage: stage.into(),
            worker: worker.into(),
            visibility_ms,
            max,
        };
        self.write(
            "Sessions/Claim",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    SessionsClient::new(channel)
                        .claim(number.wrap(request))
                        .await
                }
            },
        )
        .await
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
        let request = ExtendRequest {
            id,
            claim_token: token,
            visibility_ms,
        };
        self.write(
            "Sessions/Extend",
            self.budget(),
            move |channel, number: Number| async move {
                SessionsClient::new(channel)
                    .extend(number.wrap(request))
                    .await
            },
        )
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
        let request = CompleteRequest {
            id,
            claim_token: token,
            outcome: Some(outcome),
        };
        self.write(
            "Sessions/Complete",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    SessionsClient::new(channel)
                        .complete(number.wrap(request))
                        .await
                }
            },
        )
        .await
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
        let request = ReleaseClaimRequest {
            id,
            claim_token: token,
            delay_ms,
            note: note.into(),
        };
        self.write(
            "Sessions/Release",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    SessionsClient::new(channel)
                        .release(number.wrap(request))
                        .await
                }
            },
        )
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
        let request = FailRequest {
            id,
            claim_token: token,
            reason: reason.into(),
        };
        self.write(
            "Sessions/Fail",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    SessionsClient::new(channel)
                        .fail(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    // ---- certus.v1.Pipelines ---------------------------------------------------------

    /// Defines the pipeline `name` as a name for `node_group`, or moves it there (queued
    /// transactions stay where they are). Safe to repeat. Refusals: `invalid-argument`,
    /// `too-many` (`RESOURCE_EXHAUSTED`: 1024 pipelines).
    pub async fn define_pipeline(
        &self,
        name: impl Into<String>,
        node_group: impl Into<String>,
    ) -> Result<DefinePipelineReply, ClientError> {
        let request = DefinePipelineRequest {
            name: name.into(),
            node_group: node_group.into(),
        };
        self.write(
            "Pipelines/DefinePipeline",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    pipelines(channel)
                        .define_pipeline(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    /// Deletes the pipeline `name`; refused with `pipeline-in-use` while transactions routed
    /// by it are in play. Safe to repeat (`existed` is false the second time).
    pub async fn delete_pipeline(
        &self,
        name: impl Into<String>,
    ) -> Result<DeletePipelineReply, ClientError> {
        let request = DeletePipelineRequest { name: name.into() };
        self.write(
            "Pipelines/DeletePipeline",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move {
                    pipelines(channel)
                        .delete_pipeline(number.wrap(request))
                        .await
                }
            },
        )
        .await
    }

    /// Pipelines in name order: at most `limit` (0 for the node's page size) after `after`
    /// (`None` for the first page).
    pub async fn list_pipelines(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<ListPipelinesReply, ClientError> {
        let request = ListPipelinesRequest {
            after: after.unwrap_or_default().to_owned(),
            limit,
        };
        self.call("Pipelines/ListPipelines", self.budget(), move |channel| {
            let request = request.clone();
            async move { pipelines(channel).list_pipelines(request).await }
        })
        .await
    }

    /// Producer call: creates a transaction and queues it.
    ///
    /// # Retries
    ///
    /// Numbered in the client session (the default), the call is retried like every other: a
    /// retry answers the transaction the first attempt created. With an `external_id` it is also
    /// safe to repeat within the external-id window (a day by default), from any client: a
    /// repeat answers the first transaction with `duplicate: true`. Unnumbered and without an
    /// external id, a retry after an
    /// ambiguous failure could create a second transaction, so it is retried only when the node
    /// answered `no-leader` (nothing was proposed); any other failure is returned as
    /// [`ClientError::Unavailable`] and the transaction may or may not exist.
    ///
    /// Refusals include `invalid-argument` (naming the field), `unknown-pipeline`
    /// (`NOT_FOUND`) and `too-many` (`RESOURCE_EXHAUSTED`: the transaction table is full).
    pub async fn enqueue(&self, request: EnqueueRequest) -> Result<EnqueueReply, ClientError> {
        let budget = if request.external_id.is_empty() {
            self.budget().unproposed_only()
        } else {
            self.budget()
        };
        self.write(
            "Pipelines/Enqueue",
            budget,
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).enqueue(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Producer call: the transaction the request names, after waiting up to its `wait_ms`
    /// (the node cuts it to 60 s) for the transaction to finish or report progress; see
    /// `GetStateRequest` for `after_seq` and `mark_replied`. Refused with `unknown-transaction`
    /// (`NOT_FOUND`) for an id never enqueued, or deleted after its archive retention.
    ///
    /// Each attempt may take `wait_ms` plus [`ClientConfig::attempt_timeout`], and a retry
    /// waits only for what is left. Safe to repeat (marking a reply again only sets its time
    /// again); pass `after_seq` so a retry cannot miss progress reported in between.
    pub async fn get_state(&self, request: GetStateRequest) -> Result<GetStateReply, ClientError> {
        // The node cuts a wait to 60 s; an hour keeps the arithmetic below from overflowing.
        let wait = Duration::from_millis(request.wait_ms).min(Duration::from_secs(3_600));
        let config = self.config();
        let budget = Budget {
            attempt_timeout: config.attempt_timeout.saturating_add(wait),
            deadline: config.deadline.saturating_add(wait),
            max_attempts: config.max_attempts,
            unproposed_only: false,
        };
        let until = Instant::now() + wait;
        self.call("Pipelines/GetState", budget, move |channel| {
            let left = until.saturating_duration_since(Instant::now());
            let request = GetStateRequest {
                wait_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
                ..request.clone()
            };
            async move { pipelines(channel).get_state(request).await }
        })
        .await
    }

    /// Producer or operator call: cancels transaction `id` (queued or sleeping: aborted at
    /// once; running: its worker is asked to complete it as aborted). Safe to repeat: a retry
    /// answers `ALREADY_REQUESTED`, or `FINISHED` with status `ABORTED`.
    pub async fn cancel_transaction(&self, id: u64) -> Result<CancelReply, ClientError> {
        let request = CancelRequest { transaction_id: id };
        self.write(
            "Pipelines/Cancel",
            self.budget(),
            move |channel, number: Number| async move {
                pipelines(channel).cancel(number.wrap(request)).await
            },
        )
        .await
    }

    /// The completions of `node_group` (`None`: of every group), and progress reports too if
    /// `include_progress`, as a stream of notifications in order: after `after_seq` (`None`:
    /// only those after the latest one when the stream starts; `Some(0)`: from the oldest
    /// kept). A `MISSED` item says notifications were dropped before they could be sent.
    ///
    /// Opening the stream is retried like any read; the stream itself is not: when it ends
    /// with an error (the node stops, the connection breaks), open it again with the `seq` of
    /// the last item received.
    pub async fn watch_completions(
        &self,
        node_group: Option<&str>,
        after_seq: Option<u64>,
        include_progress: bool,
    ) -> Result<Streaming<PipelineNotification>, ClientError> {
        let request = WatchCompletionsRequest {
            node_group: node_group.unwrap_or_default().to_owned(),
            after_seq,
            include_progress,
        };
        self.call(
            "Pipelines/WatchCompletions",
            self.budget(),
            move |channel| {
                let request = request.clone();
                async move { pipelines(channel).watch_completions(request).await }
            },
        )
        .await
    }

    /// Worker call: takes up to `max` (1 to 100) queued transactions of `node_group` for
    /// `worker` — admin queue first, then out, then in — each running under one claim token
    /// until its deadline (`running_timeout_ms` from now). An empty reply when none waits.
    ///
    /// Not safe to repeat: a dequeue whose answer was lost leaves its transactions running
    /// until the reaper takes them back at their deadline (counting an attempt). It is retried
    /// only when the node answered `no-leader` (nothing was proposed).
    pub async fn dequeue(
        &self,
        node_group: impl Into<String>,
        worker: impl Into<String>,
        max: u32,
    ) -> Result<DequeueReply, ClientError> {
        let request = DequeueRequest {
            node_group: node_group.into(),
            worker: worker.into(),
            max,
        };
        self.write(
            "Pipelines/Dequeue",
            self.budget().unproposed_only(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).dequeue(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Worker call: finishes transaction `id`, claimed with `token`, with a terminal `status`
    /// and, if given, its final `state` (JSON). Safe to repeat with the same token: a retry
    /// after a lost answer gets the same answer and changes nothing. Refused with
    /// `stale-claim` (`FAILED_PRECONDITION`) when the claim ended — drop the work — and
    /// `not-terminal` for a status that is not final.
    pub async fn complete_transaction(
        &self,
        id: u64,
        token: u64,
        status: TxStatus,
        state: Option<String>,
    ) -> Result<CompleteTransactionReply, ClientError> {
        let request = CompleteTransactionRequest {
            transaction_id: id,
            claim_token: token,
            status: status.into(),
            state: state.unwrap_or_default(),
        };
        self.write(
            "Pipelines/Complete",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).complete(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Worker call: hands a running transaction on to a queue (see `RequeueRequest`). Safe to
    /// repeat with the same token, like [`Client::complete_transaction`]; refused with
    /// `cancel-requested` once a cancel is pending (complete it as aborted instead).
    pub async fn requeue_transaction(
        &self,
        request: RequeueRequest,
    ) -> Result<RequeueReply, ClientError> {
        self.write(
            "Pipelines/Requeue",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).requeue(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Worker call: records a progress `report` (JSON) for transaction `id` claimed with
    /// `token`, which moves its deadline; the reply says whether a cancel is pending.
    ///
    /// A repeat would announce the report twice (to streams, long-polls and webhooks), so it
    /// is retried only when the node answered `no-leader`. Refused with `stale-claim` when the
    /// claim ended.
    pub async fn report_progress(
        &self,
        id: u64,
        token: u64,
        report: impl Into<String>,
    ) -> Result<ProgressReply, ClientError> {
        let request = ProgressRequest {
            transaction_id: id,
            claim_token: token,
            report: report.into(),
        };
        self.write(
            "Pipelines/Progress",
            self.budget().unproposed_only(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).progress(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Worker call: puts a running transaction to sleep until a time or until a switch
    /// changes (see `SleepRequest`). Safe to repeat with the same token, like
    /// [`Client::complete_transaction`] (with `for_ms`, the first accepted wake time stays).
    pub async fn sleep_transaction(
        &self,
        request: SleepRequest,
    ) -> Result<SleepReply, ClientError> {
        self.write(
            "Pipelines/Sleep",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).sleep(number.wrap(request)).await }
            },
        )
        .await
    }

    /// Sets the switch `name` to `value`; a change wakes every transaction sleeping on it.
    /// Safe to repeat (the same value changes nothing).
    pub async fn set_switch(
        &self,
        name: impl Into<String>,
        value: u64,
    ) -> Result<SetSwitchReply, ClientError> {
        let request = SetSwitchRequest {
            name: name.into(),
            value,
        };
        self.write(
            "Pipelines/SetSwitch",
            self.budget(),
            move |channel, number: Number| {
                let request = request.clone();
                async move { pipelines(channel).set_switch(number.wrap(request)).await }
            },
        )
        .await
    }

    /// The value of switch `name` (0 until set).
    pub async fn get_switch(&self, name: impl Into<String>) -> Result<u64, ClientError> {
        let request = GetSwitchRequest { name: name.into() };
        let reply = self
            .call("Pipelines/GetSwitch", self.budget(), move |channel| {
                let request = request.clone();
                async move { pipelines(channel).get_switch(request).await }
            })
            .await?;
        Ok(reply.value)
    }

    /// The transactions in play (queued, running, sleeping) in `node_group`, in id order: at
    /// most `limit` (0 for the node's page size) with ids above `after` (0 for the first page).
    pub async fn list_in_play(
        &self,
        node_group: impl Into<String>,
        after: u64,
        limit: u32,
    ) -> Result<ListTransactionsReply, ClientError> {
        let request = ListInPlayRequest {
            node_group: node_group.into(),
            after,
            limit,
        };
        self.call("Pipelines/ListInPlay", self.budget(), move |channel| {
            let request = request.clone();
            async move { pipelines(channel).list_in_play(request).await }
        })
        .await
    }

    /// Transactions running for at least `min_running_ms`, longest running first, at most
    /// `limit` (0 for the node's page size).
    pub async fn list_stuck(
        &self,
        min_running_ms: u64,
        limit: u32,
    ) -> Result<ListTransactionsReply, ClientError> {
        let request = ListStuckRequest {
            min_running_ms,
            limit,
        };
        self.call(
            "Pipelines/ListStuck",
            self.budget(),
            move |channel| async move { pipelines(channel).list_stuck(request).await },
        )
        .await
    }

    /// Queue depths of `node_group` (`None`: of every group with transactions in play),
    /// counts per status, pending webhooks and the configuration.
    pub async fn pipelines_status(
        &self,
        node_group: Option<&str>,
    ) -> Result<PipelinesStatus, ClientError> {
        let request = PipelinesStatusRequest {
            node_group: node_group.unwrap_or_default().to_owned(),
        };
        self.call("Pipelines/Status", self.budget(), move |channel| {
            let request = request.clone();
            async move { pipelines(channel).status(request).await }
        })
        .await
    }

    /// Administrator notices with ids above `after` (0: from the oldest), at most `limit`
    /// (0 for the node's page size).
    pub async fn list_notices(
        &self,
        after: u64,
        limit: u32,
    ) -> Result<ListNoticesReply, ClientError> {
        let request = ListNoticesRequest { after, limit };
        self.call(
            "Pipelines/ListNotices",
            self.budget(),
            move |channel| async move { pipelines(channel).list_notices(request).await },
        )
        .await
    }

    /// Drops the notices up to and including `up_to`. Safe to repeat.
    pub async fn acknowledge_notices(
        &self,
        up_to: u64,
    ) -> Result<AcknowledgeNoticesReply, ClientError> {
        let request = AcknowledgeNoticesRequest { up_to };
        self.write(
            "Pipelines/AcknowledgeNotices",
            self.budget(),
            move |channel, number: Number| async move {
                pipelines(channel)
                    .acknowledge_notices(number.wrap(request))
                    .await
            },
        )
        .await
    }

    /// The archive, for external systems: archived transactions in archive order
    /// (`archived_at_ms`, then id) after `after` (`None`: from the oldest kept), at most
    /// `limit` (1 to 1 000 000), as a stream that ends after `limit` items or at the end of
    /// the archive. Resume with the `cursor` of the last item received: paging from cursor to
    /// cursor never skips or repeats a transaction, unless retention deleted it first.
    ///
    /// Opening the stream is retried like any read; the stream itself is not: when it ends
    /// with an error, open it again after the cursor of the last item received.
    pub async fn export_archive(
        &self,
        after: Option<ArchiveCursor>,
        limit: u32,
    ) -> Result<Streaming<ArchivedTransaction>, ClientError> {
        let request = ExportArchiveRequest { after, limit };
        self.call(
            "Pipelines/ExportArchive",
            self.budget(),
            move |channel| async move { pipelines(channel).export_archive(request).await },
        )
        .await
    }

    /// The pipelines' configuration in force.
    pub async fn pipeline_config(&self) -> Result<PipelineConfig, ClientError> {
        self.call("Pipelines/GetConfig", self.budget(), |channel| async move {
            pipelines(channel)
                .get_config(GetPipelineConfigRequest {})
                .await
        })
        .await
    }

    /// Replaces the pipelines' configuration (every field; read it with
    /// [`Client::pipeline_config`] first to change only some). Answers with the configuration
    /// in force; refused with `invalid-config` naming the first field out of range. Safe to
    /// repeat.
    pub async fn set_pipeline_config(
        &self,
        config: PipelineConfig,
    ) -> Result<PipelineConfig, ClientError> {
        let request = SetPipelineConfigRequest {
            config: Some(config),
        };
        self.write(
            "Pipelines/SetConfig",
            self.budget(),
            move |channel, number: Number| async move {
                pipelines(channel).set_config(number.wrap(request)).await
            },
        )
        .await
    }

    // ---- grpc.health.v1.Health ---------------------------------------------------------

    /// The serving status of the node at `endpoint` (the whole node: service `""`), by the
    /// standard gRPC health protocol. One attempt; a value this client does not know is
    /// reported as [`ServingStatus::Unknown`].
    pub async fn health_check(&self, endpoint: &str) -> Result<ServingStatus, ClientError> {
        let timeout = self.config().attempt_timeout;
        let reply = self
            .call_one(endpoint, timeout, |channel| async move {
                HealthClient::new(channel)
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
            })
            .await?;
        Ok(ServingStatus::try_from(reply.status).unwrap_or(ServingStatus::Unknown))
    }

    // ---- machinery ---------------------------------------------------------------------

    fn budget(&self) -> Budget {
        Budget {
            attempt_timeout: self.config().attempt_timeout,
            deadline: self.config().deadline,
            max_attempts: self.config().max_attempts,
            unproposed_only: false,
        }
    }

    fn admin_budget(&self) -> Budget {
        let config = self.config();
        Budget {
            attempt_timeout: config.admin_timeout,
            deadline: config.deadline.max(config.admin_timeout),
            max_attempts: config.max_attempts,
            unproposed_only: false,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is a cache; a panic elsewhere cannot leave it inconsistent.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached channel to `endpoint`, created (without connecting) if there is none.
    fn channel(&self, endpoint: &str) -> Result<NodeChannel, ClientError> {
        let mut state = self.state();
        if let Some(channel) = state.channels.get(endpoint) {
            return Ok(channel.clone());
        }
        let config = self.config();
        let channel = crate::auth::endpoint(endpoint, config.tls.as_ref())?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        let channel = node_channel(channel, config.token.as_ref().map(|token| token.0.as_str()))?;
        state.channels.insert(endpoint.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Drops the channel to `endpoint` after a transport failure: the next use reconnects.
    fn forget_channel(&self, endpoint: &str) {
        self.state().channels.remove(endpoint);
    }

    /// Stops preferring `endpoint` after a failed attempt there.
    fn unprefer(&self, endpoint: &str) {
        let mut state = self.state();
        if state.preferred.as_deref() == Some(endpoint) {
            state.preferred = None;
        }
    }

    /// Prefers `endpoint` from now on, and returns it.
    fn prefer(&self, endpoint: &str) -> String {
        self.state().preferred = Some(endpoint.to_owned());
        endpoint.to_owned()
    }

    /// After a success at `endpoint`: keep using it if nothing better is known.
    fn settle(&self, endpoint: &str) {
        let mut state = self.state();
        if state.preferred.is_none() {
            state.preferred = Some(endpoint.to_owned());
        }
    }

    /// One RPC to one endpoint, within `timeout`.
    async fn attempt<T, F, Fut>(
        &self,
        endpoint: &str,
        timeout: Duration,
        send: &mut F,
    ) -> Result<T, Failure>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let channel = self.channel(endpoint).map_err(Failure::Invalid)?;
        match tokio::time::timeout(timeout, send(channel)).await {
            Ok(Ok(reply)) => Ok(reply.into_inner()),
            Ok(Err(status)) => {
                let disposition = disposition(&status);
                if disposition == Disposition::Transport {
                    self.forget_channel(endpoint);
                }
                Err(Failure::Status(disposition, status))
            }
            Err(_elapsed) => {
                self.forget_channel(endpoint);
                Err(Failure::TimedOut(timeout))
            }
        }
    }

    /// One attempt at one node, whatever happens.
    async fn call_one<T, F, Fut>(
        &self,
        endpoint: &str,
        timeout: Duration,
        mut send: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let endpoint = parse_endpoint(endpoint)?;
        match self.attempt(&endpoint, timeout, &mut send).await {
            Ok(reply) => Ok(reply),
            Err(Failure::Invalid(error)) => Err(error),
            Err(Failure::Status(Disposition::Transport, status)) => Err(ClientError::Unavailable {
                attempts: 1,
                last_error: describe(&endpoint, &status),
                last_reason: reason_of(&status).to_owned(),
            }),
            Err(Failure::Status(_, status)) => Err(ClientError::from_status(&status)),
            Err(Failure::TimedOut(timeout)) => Err(ClientError::Unavailable {
                attempts: 1,
                last_error: format!("{endpoint}: no answer within {timeout:?}"),
                last_reason: String::new(),
            }),
        }
    }

    /// A call to the cluster: to the preferred node, then to others, with backoff, until it
    /// is served, refused, or the deadline or the attempts run out.
    async fn call<T, F, Fut>(
        &self,
        rpc: &'static str,
        budget: Budget,
        mut send: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let deadline = Instant::now() + budget.deadline;
        let max_attempts = budget.max_attempts.max(1);
        let mut attempts: u32 = 0;
        let mut last_error = String::from("the deadline passed before any attempt");
        let mut last_reason = String::new();
        let mut avoid: Option<String> = None;
        loop {
            if Instant::now() >= deadline {
                break;
            }
            let target = self.target(avoid.as_deref(), deadline).await;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            attempts += 1;
            let timeout = budget.attempt_timeout.min(remaining);
            match self.attempt(&target, timeout, &mut send).await {
                Ok(reply) => {
                    self.settle(&target);
                    return Ok(reply);
                }
                Err(Failure::Invalid(error)) => return Err(error),
                Err(Failure::Status(Disposition::Refuse, status)) => {
                    return Err(ClientError::from_status(&status));
                }
                Err(Failure::Status(_, status)) => {
                    last_error = describe(&target, &status);
                    last_reason = reason_of(&status).to_owned();
                }
                Err(Failure::TimedOut(timeout)) => {
                    last_error = format!("{target}: no answer within {timeout:?}");
                    last_reason.clear();
                }
            }
            tracing::debug!(rpc, attempts, error = %last_error, "attempt failed");
            if budget.unproposed_only && last_reason != NOTHING_PROPOSED {
                // The write may have been applied: repeating it could apply it twice.
                self.unprefer(&target);
                break;
            }
            self.unprefer(&target);
            avoid = Some(target);
            if attempts >= max_attempts {
                break;
            }
            let wait = self.config().backoff(attempts - 1);
            if wait >= deadline.saturating_duration_since(Instant::now()) {
                break;
            }
            tokio::time::sleep(wait).await;
        }
        Err(ClientError::Unavailable {
            attempts,
            last_error,
            last_reason,
        })
    }

    /// A write: a numbered request of this client's session ([`ClientConfig::exactly_once`]),
    /// so that it is applied at most once however often it is retried, and never after this
    /// client moved on from it; retried like any call. Without the session, `unnumbered` is
    /// the budget (writes that must not be applied twice are then retried less).
    async fn write<T, F, Fut>(
        &self,
        rpc: &'static str,
        unnumbered: Budget,
        mut send: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(NodeChannel, Number) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        if !self.config().exactly_once {
            return self
                .call(rpc, unnumbered, |channel| send(channel, Number::none()))
                .await;
        }
        let budget = Budget {
            unproposed_only: false,
            max_attempts: self.config().max_attempts,
            ..unnumbered
        };
        let mut registered_again = false;
        loop {
            let numbering = self.numbering().await?;
            let ticket = numbering.ticket().await;
            let result = self
                .call(rpc, budget, |channel| send(channel, ticket.number()))
                .await;
            // Answered or abandoned: either way the client moves past this number.
            drop(ticket);
            match result {
                // The session expired or was evicted (the request was not applied): open a new
                // one, once. A session outlives a call by far (minutes against seconds), so no
                // earlier attempt of this call can have been applied under the old one.
                Err(error) if error.reason() == "unknown-client" && !registered_again => {
                    registered_again = true;
                    self.forget_numbering(&numbering).await;
                }
                result => return result,
            }
        }
    }

    /// This client's session, registered on first use.
    async fn numbering(&self) -> Result<Arc<Numbering>, ClientError> {
        let mut session = self.inner.session.lock().await;
        if let Some(numbering) = session.as_ref() {
            return Ok(Arc::clone(numbering));
        }
        let reply = self
            .call("Clients/Register", self.budget(), |channel| async move {
                ClientsClient::new(channel)
                    .register(RegisterClientRequest {})
                    .await
            })
            .await?;
        tracing::debug!(client = reply.client_id, "client session registered");
        let numbering = Numbering::new(reply.client_id, reply.outstanding_max);
        *session = Some(Arc::clone(&numbering));
        Ok(numbering)
    }

    /// Drops `numbering` if it is still the current session, so the next write registers anew.
    async fn forget_numbering(&self, numbering: &Arc<Numbering>) {
        let mut session = self.inner.session.lock().await;
        if session
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, numbering))
        {
            *session = None;
        }
    }

    /// Where the next attempt goes: the preferred node, or whatever discovery finds.
    async fn target(&self, avoid: Option<&str>, deadline: Instant) -> String {
        if let Some(preferred) = self.state().preferred.clone() {
            return preferred;
        }
        self.discover(avoid, deadline).await
    }

    /// The endpoints in the order discovery asks them: from the cursor round, `avoid` last.
    fn discovery_order(&self, avoid: Option<&str>) -> Vec<String> {
        let endpoints = &self.inner.endpoints;
        let start = {
            let mut state = self.state();
            let start = state.cursor % endpoints.len();
            state.cursor = start + 1;
            start
        };
        let mut order: Vec<String> = endpoints[start..]
            .iter()
            .chain(&endpoints[..start])
            .cloned()
            .collect();
        if let Some(position) = order
            .iter()
            .position(|endpoint| Some(endpoint.as_str()) == avoid)
        {
            let avoided = order.remove(position);
            order.push(avoided);
        }
        order
    }

    /// Asks the nodes, one after another, who leads; returns where to send the next attempt
    /// (and prefers it from now on when it is the leader).
    async fn discover(&self, avoid: Option<&str>, deadline: Instant) -> String {
        let order = self.discovery_order(avoid);
        let mut fallback: Option<String> = None;
        for endpoint in &order {
            let Some(status) = self.probe(endpoint, deadline).await else {
                continue;
            };
            if status.leader_id == 0 || status.leader_grpc_addr.is_empty() {
                fallback.get_or_insert_with(|| endpoint.clone());
                continue;
            }
            if status.id == status.leader_id {
                return self.prefer(endpoint);
            }
            let leader = match parse_endpoint(&status.leader_grpc_addr) {
                Ok(leader) if Some(leader.as_str()) != avoid => leader,
                // A leader that just failed (news of its failure may not have reached this
                // node yet), or an address this client cannot use: ask the next node.
                _ => {
                    fallback.get_or_insert_with(|| endpoint.clone());
                    continue;
                }
            };
            if self.inner.endpoints.contains(&leader) {
                return self.prefer(&leader);
            }
            if !self.config().pin_to_endpoints && self.probe(&leader, deadline).await.is_some() {
                return self.prefer(&leader);
            }
            // The leader is elsewhere; this node answered and forwards writes to it.
            return endpoint.clone();
        }
        tracing::debug!(?avoid, "no node named a usable leader");
        match fallback {
            Some(endpoint) => endpoint,
            None => order[0].clone(),
        }
    }

    /// `Admin/Status` at `endpoint` for discovery; `None` if it does not answer in time.
    async fn probe(&self, endpoint: &str, deadline: Instant) -> Option<StatusReply> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = self.config().discovery_timeout.min(remaining);
        if timeout.is_zero() {
            return None;
        }
        let mut send =
            |channel| async move { AdminClient::new(channel).status(StatusRequest {}).await };
        self.attempt(endpoint, timeout, &mut send).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_needs_valid_endpoints() {
        let error = Client::new(Vec::<String>::new()).expect_err("no endpoints");
        assert!(
            matches!(error, ClientError::InvalidEndpoint(_)),
            "{error:?}"
        );
        let error = Client::new(["127.0.0.1:7101", "nope"]).expect_err("a bad endpoint");
        assert!(
            matches!(error, ClientError::InvalidEndpoint(ref message) if message.contains("nope"))
        );
    }

    #[test]
    fn endpoints_are_normalised_and_deduplicated_in_order() {
        let client = Client::new([
            "127.0.0.1:7102",
            "http://127.0.0.1:7101",
            " 127.0.0.1:7102 ",
            "127.0.0.1:7103",
        ])
        .expect("client");
        assert_eq!(
            client.endpoints(),
            ["127.0.0.1:7102", "127.0.0.1:7101", "127.0.0.1:7103"]
        );
        assert_eq!(client.preferred_endpoint(), None);
    }

    #[test]
    fn discovery_rotates_and_asks_the_avoided_endpoint_last() {
        let client = Client::new(["a:1", "b:2", "c:3"]).expect("client");
        assert_eq!(client.discovery_order(None), ["a:1", "b:2", "c:3"]);
        assert_eq!(client.discovery_order(None), ["b:2", "c:3", "a:1"]);
        assert_eq!(client.discovery_order(Some("a:1")), ["c:3", "b:2", "a:1"]);
        assert_eq!(
            client.discovery_order(Some("elsewhere:4")),
            ["a:1", "b:2", "c:3"]
        );
    }

    #[test]
    fn preference_follows_successes_and_failures() {
        let client = Client::new(["a:1", "b:2"]).expect("client");
        client.settle("b:2");
        assert_eq!(client.preferred_endpoint().as_deref(), Some("b:2"));
        client.settle("a:1");
        assert_eq!(client.preferred_endpoint().as_deref(), Some("b:2"), "kept");
        client.unprefer("a:1");
        assert_eq!(
            client.preferred_endpoint().as_deref(),
            Some("b:2"),
            "not the preferred"
        );
        client.unprefer("b:2");
        assert_eq!(client.preferred_endpoint(), None);
    }

    #[tokio::test]
    async fn an_unreachable_node_is_reported_after_one_attempt() {
        // Port 1 on loopback: nothing listens there, the connection is refused at once.
        let client = Client::new(["127.0.0.1:1"]).expect("client");
        let error = client
            .status_of("127.0.0.1:1")
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 1, .. }),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_cluster_call_gives_up_at_its_deadline() {
        let config = ClientConfig {
            deadline: Duration::from_millis(400),
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1", "127.0.0.1:2"], config).expect("client");
        let started = std::time::Instant::now();
        let error = client.get_lease("x").await.expect_err("nothing listens");
        let ClientError::Unavailable {
            attempts,
            last_error,
            ..
        } = error
        else {
            panic!("expected unavailable, got {error:?}");
        };
        assert!(
            attempts >= 2,
            "retried: {attempts} attempts, last {last_error}"
        );
        assert!(last_error.contains("127.0.0.1:"), "{last_error}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn log_calls_follow_the_cluster_and_single_node_rules() {
        let config = ClientConfig {
            max_attempts: 2,
            backoff_initial: Duration::from_millis(1),
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1"], config).expect("client");
        let error = client.get_sth().await.expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 2, .. }),
            "retried like every cluster call: {error:?}"
        );
        let error = client
            .add_chain(vec![vec![0x30]], false)
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 2, .. }),
            "{error:?}"
        );
        let error = client
            .log_status_of("127.0.0.1:1")
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 1, .. }),
            "one attempt at one node: {error:?}"
        );
        let error = client
            .log_status_of("not an endpoint")
            .await
            .expect_err("invalid");
        assert!(
            matches!(error, ClientError::InvalidEndpoint(_)),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn numbered_writes_register_first_and_are_retried_like_reads() {
        let config = ClientConfig {
            max_attempts: 3,
            backoff_initial: Duration::from_millis(1),
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1"], config).expect("client");
        let error = client
            .enqueue(EnqueueRequest {
                owner: "o".to_owned(),
                state: "{}".to_owned(),
                ..EnqueueRequest::default()
            })
            .await
            .expect_err("nothing listens");
        // The registration is what failed, retried like any call; nothing was numbered.
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 3, .. }),
            "{error:?}"
        );
        assert_eq!(client.client_session_id().await, None);
    }

    #[tokio::test]
    async fn a_create_without_a_request_key_is_tried_once() {
        let config = ClientConfig {
            max_attempts: 3,
            backoff_initial: Duration::from_millis(1),
            // Unnumbered: the budgets of writes that must not be applied twice.
            exactly_once: false,
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1"], config).expect("client");
        let error = client
            .create_session(vec![0x30], Vec::new(), None)
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 1, .. }),
            "not repeated: {error:?}"
        );
        let error = client
            .create_session(vec![0x30], Vec::new(), Some("key-1".to_owned()))
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 3, .. }),
            "a keyed create is retried: {error:?}"
        );
        let error = client
            .complete_session(
                7,
                9,
                complete_request::Outcome::Issued(complete_request::Issued {
                    certificate: String::new(),
                }),
            )
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 3, .. }),
            "a complete is retried: {error:?}"
        );
    }

    #[tokio::test]
    async fn pipeline_writes_not_safe_to_repeat_are_not_retried_after_a_failure() {
        let config = ClientConfig {
            max_attempts: 3,
            backoff_initial: Duration::from_millis(1),
            // Unnumbered: the budgets of writes that must not be applied twice.
            exactly_once: false,
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1"], config).expect("client");
        let request = EnqueueRequest {
            owner: "o".to_owned(),
            state: "{}".to_owned(),
            ..EnqueueRequest::default()
        };
        let error = client
            .enqueue(request.clone())
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 1, .. }),
            "an enqueue without an external id is not repeated: {error:?}"
        );
        let error = client
            .enqueue(EnqueueRequest {
                external_id: "order-1".to_owned(),
                ..request
            })
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 3, .. }),
            "an enqueue with an external id is retried: {error:?}"
        );
        let error = client
            .dequeue("g", "w", 1)
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 1, .. }),
            "{error:?}"
        );
        let error = client
            .report_progress(1, 2, "{}")
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 1, .. }),
            "{error:?}"
        );
        let error = client
            .complete_transaction(1, 2, TxStatus::Success, None)
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 3, .. }),
            "a complete is retried: {error:?}"
        );
    }

    #[tokio::test]
    async fn a_wait_is_retried_within_its_own_deadline() {
        let config = ClientConfig {
            max_attempts: 2,
            backoff_initial: Duration::from_millis(1),
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1"], config).expect("client");
        let error = client
            .wait_session(1, None, Duration::from_millis(200))
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 2, .. }),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn attempts_are_bounded() {
        let config = ClientConfig {
            max_attempts: 3,
            backoff_initial: Duration::from_millis(1),
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1"], config).expect("client");
        let error = client.status().await.expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: 3, .. }),
            "{error:?}"
        );
    }
}
