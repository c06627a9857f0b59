//! `grpc_requests`: the write requests of the client gRPC services, prost-decoded from the wire,
//! validated into a core `Command` as the services do, and applied to a state that already holds
//! a lease, a challenge token, a claimed session and a pipeline with a claimed transaction (so
//! that ids and claim tokens in the seeds hit something), with the checks of
//! [`crate::commands::apply_checked`].
//!
//! Each request goes through the very functions the services call (`certus_node::convert`): the
//! request validated into its command (or refused, as the service would before proposing), the
//! command applied, and the state machine's answer converted back into the reply. A reply
//! conversion or a refusal that comes out `INTERNAL` is a bug: it means the state machine
//! answered a step with another step's reply. `Log/AddChain` takes the submission path of the
//! chain target instead (checks, entry, SCT, the `Add` command).

use std::sync::OnceLock;

use certus_core::ct::CtCommand;
use certus_core::pipelines::{
    ExternalId, JsonDocument, NewTransaction, NodeGroup, Owner, PipelineName, QueueType, Route,
    TransactionId, TxMetadata, WebhookUrl,
};
use certus_core::{
    ChallengeCommand, Command, DnsName, HolderId, LeaseCommand, LeaseName, PipelineCommand,
    PipelineReply, Response, SessionCommand, SessionId, Stage, Stamp, State, Ttl, WorkerId,
};
use certus_node::convert::{self, Family, Query, leases, log, pipelines, sessions};
use certus_proto::v1;
use prost::Message;
use tonic::{Code, Status};

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
    "Pipelines/EnqueueBatch",
    "Pipelines/CompleteBatch",
    "Sessions/CompleteBatch",
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
            token: leases::challenge_token(text("token-1")).expect("valid"),
            key_authorization: leases::key_authorization(text("token-1.thumbprint"))
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
    let call = Call { bytes, stamp };
    match kind {
        0 => call.write(leases::acquire, leases::acquired),
        1 => call.write(leases::renew, leases::renewed),
        2 => call.write(leases::release, leases::released),
        // A read: answered from the state, no command.
        3 => call.read(leases::check_fence),
        4 => call.write(leases::put_challenge, leases::challenge_stored),
        5 => call.write(leases::delete_challenge, leases::challenge_deleted),
        6 => call.write(leases::purge_challenges, leases::challenges_purged),
        7 => call.then_read(sessions::create, |id, _| {
            sessions::created(id).map(sessions::session)
        }),
        8 => call.write(sessions::claim, sessions::claimed),
        9 => call.write(sessions::extend, sessions::extended),
        10 => call.write(sessions::complete, any),
        11 => call.write(sessions::release, any),
        12 => call.write(sessions::fail, any),
        13 => call.write(sessions::kill, sessions::killed),
        14 => call.write(sessions::acknowledge, sessions::acknowledged),
        15 => call.then_read(sessions::set_config, |_, _| Ok(sessions::config)),
        16 => call.then_read(pipelines::define_pipeline, |reply, command| {
            pipelines::defined(command, reply)
        }),
        17 => call.write(pipelines::delete_pipeline, pipelines::pipeline_deleted),
        18 => call.write(pipelines::enqueue, pipelines::enqueued),
        19 => call.write(pipelines::dequeue, pipelines::dequeued),
        20 => call.write(pipelines::complete, pipelines::completed),
        21 => call.write(pipelines::requeue, pipelines::requeued),
        22 => call.write(pipelines::progress, pipelines::progress_recorded),
        23 => call.write(
            |request| pipelines::sleep(request, stamp.now_ms),
            pipelines::sleeping,
        ),
        24 => call.write(pipelines::set_switch, pipelines::switch_set),
        25 => call.write(pipelines::cancel, pipelines::cancelled),
        26 => call.write(
            pipelines::acknowledge_notices,
            pipelines::notices_acknowledged,
        ),
        27 => call.then_read(pipelines::set_config, |reply, _| {
            pipelines::configured(reply).map(|()| pipelines::config)
        }),
        28 => {
            // The submission path is the chain target's: checks, entry, SCT, the Add command.
            if let Some(request) = decode::<v1::AddChainRequest>(bytes) {
                crate::ct::submit(&request.chain, request.precertificate);
            }
        }
        29 => call.write(
            // The dedupe window, when given, is a second command; the first is what is checked.
            |request| log::set_config(request).map(|(config, _)| CtCommand::Configure(config)),
            any,
        ),
        30 => call.write(|request| Ok(log::set_frozen(request)), any),
        31 => call.write(log::start_mirror, any),
        32 => call.write(
            pipelines::batches::enqueue_batch,
            pipelines::batches::enqueued_batch,
        ),
        33 => call.write(
            pipelines::batches::complete_batch,
            pipelines::batches::completed_batch,
        ),
        _ => call.then_read(sessions::complete_batch, |reply, command| {
            sessions::completed_batch(command, reply)?;
            Ok(|_: &State, _: u64| Ok(()))
        }),
    }
}

/// One request of the target: its protobuf bytes, and the stamp its command is applied with.
struct Call<'a> {
    bytes: &'a [u8],
    stamp: Stamp,
}

impl Call<'_> {
    /// A write call, as its handler makes it: the request decoded and converted by `command`
    /// (refused: nothing is applied), the command applied to a copy of the prepared state, and
    /// the answer converted back by `reply`.
    fn write<M, F, R>(
        &self,
        command: impl FnOnce(M) -> Result<F, Status>,
        reply: impl FnOnce(F::Reply) -> Result<R, Status>,
    ) where
        M: Message + Default + PartialEq,
        F: Family + Clone,
    {
        self.then_read(command, |answer, _| {
            reply(answer)?;
            Ok(|_: &State, _: u64| Ok(()))
        });
    }

    /// A write call that answers with a read of the state after it: `then` turns the command
    /// and its reply into the query.
    fn then_read<M, F, Q, T>(
        &self,
        command: impl FnOnce(M) -> Result<F, Status>,
        then: impl FnOnce(F::Reply, &F) -> Result<Q, Status>,
    ) where
        M: Message + Default + PartialEq,
        F: Family + Clone,
        Q: Query<T>,
    {
        let Some(request) = decode::<M>(self.bytes) else {
            return;
        };
        let Ok(command) = command(request) else {
            return;
        };
        let mut state = base().state.clone();
        let response = apply_checked(&mut state, command.clone().into_command(), self.stamp);
        let answered = convert::reply::<F>(response)
            .and_then(|reply| then(reply, &command))
            .and_then(|query| query(&state, self.stamp.now_ms));
        not_internal(answered);
    }

    /// A read call: the request decoded and converted by `query`, and the query run on the
    /// prepared state.
    fn read<M, Q, T>(&self, query: impl FnOnce(M) -> Result<Q, Status>)
    where
        M: Message + Default + PartialEq,
        Q: Query<T>,
    {
        let Some(request) = decode::<M>(self.bytes) else {
            return;
        };
        let answered = query(request).and_then(|query| query(&base().state, self.stamp.now_ms));
        not_internal(answered);
    }
}

/// A reply that says only that the command was applied.
fn any<T>(_reply: T) -> Result<(), Status> {
    Ok(())
}

/// A call's outcome: a reply, or a refusal the client can act on, never `INTERNAL`.
fn not_internal<T>(answered: Result<T, Status>) {
    if let Err(status) = answered {
        assert_ne!(status.code(), Code::Internal, "{status:?}");
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
