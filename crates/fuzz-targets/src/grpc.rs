//! `grpc_requests`: the write requests of the client gRPC services, prost-decoded from the wire,
//! validated into a core `Command` as the services do, and applied to a state that already holds
//! a lease, a challenge token, a claimed session and a pipeline with a claimed transaction (so
//! that ids and claim tokens in the seeds hit something), with the checks of
//! [`crate::commands::apply_checked`].
//!
//! The services build their commands inside their async methods; this module repeats those
//! steps with the same pieces (`certus_node::services::convert`, the core's validating
//! constructors, the configurations' `validate`, `CheckedCsr`, the chain checks) so the fuzzer
//! reaches every validation a request goes through before it is proposed. Keep it in step with
//! `crates/node/src/services/`: `leases.rs`, `sessions.rs`, `pipelines.rs` and `log.rs`.

use std::sync::OnceLock;

use certus_ca::csr::CheckedCsr;
use certus_core::ct::{CtCommand, LogConfig, MirrorSource};
use certus_core::limits::{PIPELINE_DEQUEUE_BATCH_MAX, PIPELINE_SLEEP_MS_MAX};
use certus_core::pipelines::{
    ExternalId, JsonDocument, NewTransaction, NodeGroup, NoticeId, Owner, PipelineName, QueueType,
    Route, SwitchName, TransactionId, TxMetadata, TxStatus, WebhookUrl,
};
use certus_core::{
    ChallengeCommand, Command, DnsName, HolderId, LeaseCommand, LeaseName, NewChallenge,
    PipelineCommand, PipelineConfig, PipelineReply, Reason, RequestKey, Response, SessionCommand,
    SessionConfig, SessionId, Stage, Stamp, State, StepOutcome, TestResult, Ttl, WorkerId,
};
use certus_node::services::convert;
use certus_proto::v1;
use prost::Message;

use crate::commands::apply_checked;

/// The request messages, in selector order (the first input byte picks one).
pub const KINDS: &[&str] = &[
    "Leases/Acquire",
    "Leases/Renew",
    "Leases/Release",
    "Leases/CheckFence",
    "Leases/PutChallenge",
    "Leases/DeleteChallenge",
    "Leases/PurgeChallenges",
    "Sessions/Create",
    "Sessions/Claim",
    "Sessions/Extend",
    "Sessions/Complete",
    "Sessions/Release",
    "Sessions/Fail",
    "Sessions/Kill",
    "Sessions/Acknowledge",
    "Sessions/SetConfig",
    "Pipelines/DefinePipeline",
    "Pipelines/DeletePipeline",
    "Pipelines/Enqueue",
    "Pipelines/Dequeue",
    "Pipelines/Complete",
    "Pipelines/Requeue",
    "Pipelines/Progress",
    "Pipelines/Sleep",
    "Pipelines/SetSwitch",
    "Pipelines/Cancel",
    "Pipelines/AcknowledgeNotices",
    "Pipelines/SetConfig",
    "Log/AddChain",
    "Log/SetConfig",
    "Log/SetFrozen",
    "Log/StartMirror",
];

/// What the prepared state holds, for seeds that name it.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The lease's name (held by [`Facts::holder`]).
    pub lease: String,
    /// Its holder.
    pub holder: String,
    /// The stored challenge token.
    pub challenge: String,
    /// The session claimed at `MakeChallenge` by [`Facts::worker`].
    pub session: u64,
    /// Its claim token.
    pub session_token: u64,
    /// A session still queued.
    pub queued_session: u64,
    /// The worker holding both claims.
    pub worker: String,
    /// The defined pipeline.
    pub pipeline: String,
    /// Its node group.
    pub node_group: String,
    /// The transaction claimed by [`Facts::worker`].
    pub transaction: u64,
    /// Its claim token.
    pub transaction_token: u64,
    /// A transaction still queued.
    pub queued_transaction: u64,
}

/// The machine clock of the prepared state.
pub const BASE_CLOCK_MS: u64 = 1_700_000_000_000;

/// The prepared state, what it holds and the log that made it.
#[derive(Clone, Debug)]
pub struct Base {
    /// The state every request is applied to.
    pub state: State,
    /// What it holds.
    pub facts: Facts,
    /// The commands that made it, with their stamps.
    pub log: Vec<(Command, Stamp)>,
}

/// The state every request is applied to, and what it holds.
pub fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(build_base)
}

fn build_base() -> Base {
    let mut state = State::new();
    let mut log = Vec::new();
    let mut run = |state: &mut State, command: Command| {
        let stamp = Stamp::new(log.len() as u64 + 1, BASE_CLOCK_MS);
        log.push((command.clone(), stamp));
        let response = apply_checked(state, command, stamp);
        (stamp.index, response)
    };
    let text = |value: &str| value.to_owned();
    let facts_lease = text("fuzz-lease");
    let holder = text("alice");
    let worker = text("worker-1");
    run(
        &mut state,
        Command::Lease(LeaseCommand::Acquire {
            name: LeaseName::new(facts_lease.clone()).expect("valid"),
            holder: HolderId::new(holder.clone()).expect("valid"),
            ttl: Ttl::from_ms(60_000).expect("valid"),
        }),
    );
    run(
        &mut state,
        Command::Challenge(ChallengeCommand::Put {
            token: convert::challenge_token(text("token-1")).expect("valid"),
            key_authorization: convert::key_authorization(text("token-1.thumbprint"))
                .expect("valid"),
        }),
    );
    let create = |name: &str| {
        Command::Session(SessionCommand::Create {
            request_key: None,
            csr: b"a CSR the service checked".to_vec(),
            names: vec![DnsName::new(name.to_owned()).expect("valid")],
        })
    };
    let (session, _) = run(&mut state, create("one.example.com"));
    let (queued_session, _) = run(&mut state, create("two.example.com"));
    let (session_token, _) = run(
        &mut state,
        Command::Session(SessionCommand::Claim {
            stage: Stage::MakeChallenge,
            worker: WorkerId::new(worker.clone()).expect("valid"),
            visibility_ms: 60_000,
            max: 1,
        }),
    );
    let pipeline = text("orders");
    let node_group = text("group-1");
    run(
        &mut state,
        Command::Pipeline(PipelineCommand::Define {
            name: PipelineName::new(pipeline.clone()).expect("valid"),
            node_group: NodeGroup::new(node_group.clone()).expect("valid"),
        }),
    );
    let enqueue = |external_id: &str| {
        Command::Pipeline(PipelineCommand::Enqueue(NewTransaction {
            owner: Owner::new("owner-1".to_owned()).expect("valid"),
            external_id: Some(ExternalId::new(external_id.to_owned()).expect("valid")),
            route: Route::Pipeline(PipelineName::new("orders".to_owned()).expect("valid")),
            queue: QueueType::In,
            state: JsonDocument::new("{\"step\":1}".to_owned()).expect("valid"),
            event: None,
            metadata: TxMetadata {
                webhook_url: Some(
                    WebhookUrl::new("https://hooks.example.com/done".to_owned()).expect("valid"),
                ),
                progress_reports: true,
                cancel_webhook_on_longpoll: false,
            },
        }))
    };
    let (transaction, _) = run(&mut state, enqueue("ext-1"));
    let (queued_transaction, _) = run(&mut state, enqueue("ext-2"));
    let (transaction_token, dequeued) = run(
        &mut state,
        Command::Pipeline(PipelineCommand::Dequeue {
            node_group: NodeGroup::new(node_group.clone()).expect("valid"),
            worker: WorkerId::new(worker.clone()).expect("valid"),
            max: 1,
        }),
    );
    let claimed = matches!(
        &dequeued,
        Response::Pipeline(Ok(PipelineReply::Dequeued(txs)))
            if txs.len() == 1 && txs[0].id == TransactionId(transaction)
    );
    assert!(claimed, "the prepared transaction is claimed: {dequeued:?}");
    let session_claimed = state
        .session(SessionId(session))
        .and_then(|session| session.claim())
        .is_some_and(|claim| claim.token == session_token);
    assert!(session_claimed, "the prepared session is claimed");
    let facts = Facts {
        lease: facts_lease,
        holder,
        challenge: text("token-1"),
        session,
        session_token,
        queued_session,
        worker,
        pipeline,
        node_group,
        transaction,
        transaction_token,
        queued_transaction,
    };
    Base { state, facts, log }
}

/// The target body: the first byte picks the request ([`KINDS`]), the rest is its protobuf
/// encoding.
pub fn grpc_requests(data: &[u8]) {
    let count = u8::try_from(KINDS.len()).expect("a few kinds");
    let (kind, bytes) = crate::select(data, count);
    let base = &base().state;
    let stamp = Stamp::new(base.applied_index() + 1, base.clock_ms() + 1_000);
    let Some(command) = command(kind, bytes, base, stamp.now_ms) else {
        return;
    };
    let mut state = base.clone();
    apply_checked(&mut state, command, stamp);
}

/// The command request `kind` with protobuf `bytes` validates to, or `None` where the service
/// would refuse it before proposing (or it is a read, answered here without a command).
fn command(kind: u8, bytes: &[u8], base: &State, now_ms: u64) -> Option<Command> {
    match kind {
        0..=6 => leases(kind, bytes, base, now_ms),
        7..=15 => sessions(kind, bytes),
        16..=27 => pipelines(kind, bytes, now_ms),
        _ => log(kind, bytes),
    }
}

fn decode<M: Message + Default + PartialEq>(bytes: &[u8]) -> Option<M> {
    let message = M::decode(bytes).ok()?;
    // What decodes re-encodes to bytes that decode to the same message.
    let again = M::decode(message.encode_to_vec().as_slice()).expect("a re-encoded message");
    assert!(
        again == message,
        "a protobuf message re-encodes differently"
    );
    Some(message)
}

/// An optional text field: empty means absent.
fn optional<T, E>(value: String, parse: impl FnOnce(String) -> Result<T, E>) -> Option<Option<T>> {
    if value.is_empty() {
        return Some(None);
    }
    parse(value).ok().map(Some)
}

fn leases(kind: u8, bytes: &[u8], base: &State, now_ms: u64) -> Option<Command> {
    let command = match kind {
        0 => {
            let request: v1::AcquireRequest = decode(bytes)?;
            Command::Lease(LeaseCommand::Acquire {
                name: convert::lease_name(request.name).ok()?,
                holder: convert::holder(request.holder).ok()?,
                ttl: convert::ttl(request.ttl_ms).ok()?,
            })
        }
        1 => {
            let request: v1::RenewRequest = decode(bytes)?;
            Command::Lease(LeaseCommand::Renew {
                name: convert::lease_name(request.name).ok()?,
                holder: convert::holder(request.holder).ok()?,
                ttl: convert::ttl(request.ttl_ms).ok()?,
            })
        }
        2 => {
            let request: v1::ReleaseRequest = decode(bytes)?;
            Command::Lease(LeaseCommand::Release {
                name: convert::lease_name(request.name).ok()?,
                holder: convert::holder(request.holder).ok()?,
            })
        }
        3 => {
            // A read: answered from the state, no command.
            let request: v1::CheckFenceRequest = decode(bytes)?;
            let name = convert::lease_name(request.name).ok()?;
            let _ = base.check_fence(
                &name,
                certus_core::FencingToken(request.fencing_token),
                now_ms,
            );
            return None;
        }
        4 => {
            let request: v1::PutChallengeRequest = decode(bytes)?;
            Command::Challenge(ChallengeCommand::Put {
                token: convert::challenge_token(request.token).ok()?,
                key_authorization: convert::key_authorization(request.key_authorization).ok()?,
            })
        }
        5 => {
            let request: v1::DeleteChallengeRequest = decode(bytes)?;
            Command::Challenge(ChallengeCommand::Delete {
                token: convert::challenge_token(request.token).ok()?,
            })
        }
        _ => {
            let request: v1::PurgeChallengesRequest = decode(bytes)?;
            Command::Challenge(ChallengeCommand::DeleteOlderThan {
                age_ms: request.older_than_ms,
            })
        }
    };
    Some(command)
}

fn stage_from_proto(stage: i32) -> Option<Stage> {
    match v1::Stage::try_from(stage).ok()? {
        v1::Stage::MakeChallenge => Some(Stage::MakeChallenge),
        v1::Stage::TestChallenge => Some(Stage::TestChallenge),
        v1::Stage::Issue => Some(Stage::Issue),
        v1::Stage::Done => Some(Stage::Done),
        v1::Stage::Failed => Some(Stage::Failed),
        v1::Stage::Unspecified => None,
    }
}

fn sessions(kind: u8, bytes: &[u8]) -> Option<Command> {
    let command = match kind {
        7 => {
            let request: v1::CreateSessionRequest = decode(bytes)?;
            let csr = match std::str::from_utf8(&request.csr) {
                Ok(text) if text.contains("-----BEGIN") => CheckedCsr::from_pem(text),
                _ => CheckedCsr::from_der(&request.csr),
            }
            .ok()?;
            let names = if request.names.is_empty() {
                csr.names().to_vec()
            } else {
                let mut names: Vec<String> = request
                    .names
                    .iter()
                    .map(|name| name.to_ascii_lowercase())
                    .collect();
                names.sort();
                let before = names.len();
                names.dedup();
                if names.len() != before {
                    return None;
                }
                csr.matches(&names).ok()?;
                names
            };
            let names = names
                .into_iter()
                .map(DnsName::new)
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            SessionCommand::Create {
                request_key: optional(request.request_key, RequestKey::new)?,
                csr: csr.der().to_vec(),
                names,
            }
        }
        8 => {
            let request: v1::ClaimRequest = decode(bytes)?;
            SessionCommand::Claim {
                stage: stage_from_proto(request.stage)?,
                worker: WorkerId::new(request.worker).ok()?,
                visibility_ms: request.visibility_ms,
                max: request.max,
            }
        }
        9 => {
            let request: v1::ExtendRequest = decode(bytes)?;
            SessionCommand::Extend {
                session: SessionId(request.id),
                token: request.claim_token,
                visibility_ms: request.visibility_ms,
            }
        }
        10 => {
            let request: v1::CompleteRequest = decode(bytes)?;
            SessionCommand::Complete {
                session: SessionId(request.id),
                token: request.claim_token,
                outcome: outcome_from_proto(request.outcome?)?,
            }
        }
        11 => {
            let request: v1::ReleaseClaimRequest = decode(bytes)?;
            SessionCommand::Release {
                session: SessionId(request.id),
                token: request.claim_token,
                delay_ms: request.delay_ms,
                note: optional(request.note, Reason::new)?,
            }
        }
        12 => {
            let request: v1::FailRequest = decode(bytes)?;
            SessionCommand::Fail {
                session: SessionId(request.id),
                token: request.claim_token,
                reason: Reason::new(request.reason).ok()?,
            }
        }
        13 => {
            let request: v1::KillSessionRequest = decode(bytes)?;
            SessionCommand::Kill {
                session: SessionId(request.id),
                reason: Reason::new(request.reason).ok()?,
            }
        }
        14 => {
            let request: v1::AcknowledgeSessionRequest = decode(bytes)?;
            SessionCommand::Acknowledge {
                session: SessionId(request.id),
            }
        }
        _ => {
            let request: v1::SetSessionConfigRequest = decode(bytes)?;
            let config = request.config?;
            let config = SessionConfig {
                stage_timeout_ms: config.stage_timeout_ms,
                max_tests: config.max_tests,
                test_retry_ms: config.test_retry_ms,
                done_retention_ms: config.done_retention_ms,
                archive_retention_ms: config.archive_retention_ms,
                sessions_max: config.sessions_max,
            };
            config.validate().ok()?;
            SessionCommand::Configure(config)
        }
    };
    Some(Command::Session(command))
}

fn outcome_from_proto(outcome: v1::complete_request::Outcome) -> Option<StepOutcome> {
    use v1::complete_request::Outcome;
    let outcome = match outcome {
        Outcome::Challenges(challenges) => StepOutcome::Challenges(
            challenges
                .challenges
                .into_iter()
                .map(|challenge| {
                    Some(NewChallenge {
                        name: DnsName::new(challenge.name).ok()?,
                        token: convert::challenge_token(challenge.token).ok()?,
                        key_authorization: convert::key_authorization(challenge.key_authorization)
                            .ok()?,
                    })
                })
                .collect::<Option<_>>()?,
        ),
        Outcome::Tested(tested) => StepOutcome::Tested(
            tested
                .results
                .into_iter()
                .map(|result| {
                    Some(TestResult {
                        name: DnsName::new(result.name).ok()?,
                        satisfied: result.satisfied,
                        error: optional(result.error, Reason::new)?,
                    })
                })
                .collect::<Option<_>>()?,
        ),
        Outcome::Issued(issued) => StepOutcome::Issued {
            cert: issued.certificate.into_bytes(),
        },
    };
    Some(outcome)
}

fn queue_from_proto(queue: i32) -> Option<QueueType> {
    match v1::QueueType::try_from(queue).ok()? {
        v1::QueueType::Admin => Some(QueueType::Admin),
        v1::QueueType::Out => Some(QueueType::Out),
        v1::QueueType::In => Some(QueueType::In),
        v1::QueueType::Unspecified => None,
    }
}

fn status_from_proto(status: i32) -> Option<TxStatus> {
    match v1::TxStatus::try_from(status).ok()? {
        v1::TxStatus::Queued => Some(TxStatus::Queued),
        v1::TxStatus::Running => Some(TxStatus::Running),
        v1::TxStatus::Success => Some(TxStatus::Success),
        v1::TxStatus::Failed => Some(TxStatus::Failed),
        v1::TxStatus::Aborted => Some(TxStatus::Aborted),
        v1::TxStatus::Sleeping => Some(TxStatus::Sleeping),
        v1::TxStatus::Timeout => Some(TxStatus::Timeout),
        v1::TxStatus::InternalError => Some(TxStatus::InternalError),
        v1::TxStatus::Unspecified => None,
    }
}

/// The service refuses 0 as "missing" for ids and claim tokens.
fn nonzero(value: u64) -> Option<u64> {
    (value != 0).then_some(value)
}

fn route(pipeline: Option<String>, node_group: Option<String>) -> Option<Option<Route>> {
    match (pipeline, node_group) {
        (Some(name), _) => Some(Some(Route::Pipeline(PipelineName::new(name).ok()?))),
        (None, Some(group)) => Some(Some(Route::NodeGroup(NodeGroup::new(group).ok()?))),
        (None, None) => Some(None),
    }
}

fn pipelines(kind: u8, bytes: &[u8], now_ms: u64) -> Option<Command> {
    let command = match kind {
        16 => {
            let request: v1::DefinePipelineRequest = decode(bytes)?;
            PipelineCommand::Define {
                name: PipelineName::new(request.name).ok()?,
                node_group: NodeGroup::new(request.node_group).ok()?,
            }
        }
        17 => {
            let request: v1::DeletePipelineRequest = decode(bytes)?;
            PipelineCommand::Delete {
                name: PipelineName::new(request.name).ok()?,
            }
        }
        18 => {
            let request: v1::EnqueueRequest = decode(bytes)?;
            use v1::enqueue_request::Route as Wire;
            let route = match request.route? {
                Wire::Pipeline(name) => route(Some(name), None),
                Wire::NodeGroup(group) => route(None, Some(group)),
            }??;
            let metadata = match request.metadata {
                None => TxMetadata::default(),
                Some(metadata) => TxMetadata {
                    webhook_url: optional(metadata.webhook_url, WebhookUrl::new)?,
                    progress_reports: metadata.progress_reports,
                    cancel_webhook_on_longpoll: metadata.cancel_webhook_on_longpoll,
                },
            };
            PipelineCommand::Enqueue(NewTransaction {
                owner: Owner::new(request.owner).ok()?,
                external_id: optional(request.external_id, ExternalId::new)?,
                route,
                queue: queue_from_proto(request.queue)?,
                state: JsonDocument::new(request.state).ok()?,
                event: optional(request.event, JsonDocument::new)?,
                metadata,
            })
        }
        19 => {
            let request: v1::DequeueRequest = decode(bytes)?;
            let node_group = NodeGroup::new(request.node_group).ok()?;
            let worker = WorkerId::new(request.worker).ok()?;
            if !(1..=PIPELINE_DEQUEUE_BATCH_MAX).contains(&request.max) {
                return None;
            }
            PipelineCommand::Dequeue {
                node_group,
                worker,
                max: request.max,
            }
        }
        20 => {
            let request: v1::CompleteTransactionRequest = decode(bytes)?;
            let status = status_from_proto(request.status)?;
            if !status.is_terminal() {
                return None;
            }
            PipelineCommand::Complete {
                transaction: TransactionId(nonzero(request.transaction_id)?),
                token: nonzero(request.claim_token)?,
                status,
                state: optional(request.state, JsonDocument::new)?,
            }
        }
        21 => {
            let request: v1::RequeueRequest = decode(bytes)?;
            use v1::requeue_request::Route as Wire;
            let route = match request.route {
                Some(Wire::Pipeline(name)) => route(Some(name), None)?,
                Some(Wire::NodeGroup(group)) => route(None, Some(group))?,
                None => None,
            };
            PipelineCommand::Requeue {
                transaction: TransactionId(nonzero(request.transaction_id)?),
                token: nonzero(request.claim_token)?,
                route,
                queue: queue_from_proto(request.queue)?,
                state: optional(request.state, JsonDocument::new)?,
                event: optional(request.event, JsonDocument::new)?,
            }
        }
        22 => {
            let request: v1::ProgressRequest = decode(bytes)?;
            PipelineCommand::Progress {
                transaction: TransactionId(nonzero(request.transaction_id)?),
                token: nonzero(request.claim_token)?,
                report: JsonDocument::new(request.report).ok()?,
            }
        }
        23 => {
            let request: v1::SleepRequest = decode(bytes)?;
            use v1::sleep_request::Wake;
            let until_ms = match request.wake? {
                Wake::UntilMs(until_ms) => until_ms,
                Wake::ForMs(for_ms) => {
                    if for_ms > PIPELINE_SLEEP_MS_MAX {
                        return None;
                    }
                    now_ms.saturating_add(for_ms)
                }
            };
            PipelineCommand::Sleep {
                transaction: TransactionId(nonzero(request.transaction_id)?),
                token: nonzero(request.claim_token)?,
                until_ms,
                switch: optional(request.switch, SwitchName::new)?,
                queue: queue_from_proto(request.queue)?,
                state: optional(request.state, JsonDocument::new)?,
            }
        }
        24 => {
            let request: v1::SetSwitchRequest = decode(bytes)?;
            PipelineCommand::SetSwitch {
                name: SwitchName::new(request.name).ok()?,
                value: request.value,
            }
        }
        25 => {
            let request: v1::CancelRequest = decode(bytes)?;
            PipelineCommand::Cancel {
                transaction: TransactionId(nonzero(request.transaction_id)?),
            }
        }
        26 => {
            let request: v1::AcknowledgeNoticesRequest = decode(bytes)?;
            PipelineCommand::AcknowledgeNotices {
                up_to: NoticeId(nonzero(request.up_to)?),
            }
        }
        _ => {
            let request: v1::SetPipelineConfigRequest = decode(bytes)?;
            let config = request.config?;
            let config = PipelineConfig {
                external_id_window_ms: config.external_id_window_ms,
                running_timeout_ms: config.running_timeout_ms,
                max_attempts: config.max_attempts,
                archive_delay_ms: config.archive_delay_ms,
                archive_retention_ms: config.archive_retention_ms,
                transactions_max: config.transactions_max,
                webhook_backoff_base_ms: config.webhook_backoff_base_ms,
                webhook_backoff_cap_ms: config.webhook_backoff_cap_ms,
                webhook_attempts_max: config.webhook_attempts_max,
                url_failure_limit: config.url_failure_limit,
                url_failure_window_ms: config.url_failure_window_ms,
                url_pause_ms: config.url_pause_ms,
            };
            config.validate().ok()?;
            PipelineCommand::Configure(config)
        }
    };
    Some(Command::Pipeline(command))
}

fn log(kind: u8, bytes: &[u8]) -> Option<Command> {
    let command = match kind {
        28 => {
            // The submission path is the chain target's: checks, entry, SCT, the Add command.
            let request: v1::AddChainRequest = decode(bytes)?;
            crate::ct::submit(&request.chain, request.precertificate);
            return None;
        }
        29 => {
            let request: v1::SetLogConfigRequest = decode(bytes)?;
            let config = request.config?;
            let config = LogConfig {
                min_serving_nodes: config.min_serving_nodes,
                min_serving_permille: config.min_serving_permille,
                unsequenced_watermark: config.unsequenced_watermark,
                guard_window_ms: config.guard_window_ms,
                signing_interval_ms: config.signing_interval_ms,
                sequencing_interval_ms: config.sequencing_interval_ms,
                report_ttl_ms: config.report_ttl_ms,
            };
            config.validate().ok()?;
            CtCommand::Configure(config)
        }
        30 => {
            let request: v1::SetFrozenRequest = decode(bytes)?;
            CtCommand::SetFrozen {
                frozen: request.frozen,
            }
        }
        _ => {
            let request: v1::StartMirrorRequest = decode(bytes)?;
            certus_ct::signer::LogVerifier::from_public_key_der(&request.source_public_key).ok()?;
            let url = request.source_url.trim_end_matches('/').to_owned();
            if !(url.starts_with("http://") || url.starts_with("https://"))
                || url.contains(['?', '#'])
            {
                return None;
            }
            CtCommand::StartMirror(MirrorSource {
                url,
                public_key_der: request.source_public_key,
            })
        }
    };
    Some(Command::Ct(command))
}
