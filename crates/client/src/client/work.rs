//! A worker's `Work` stream: [`Client::work`] opens it, [`WorkStream`] drives it — credit in,
//! claims out, steps answered on the same stream.

use std::collections::{BTreeMap, VecDeque};

use certus_proto::v1::{
    CompleteTransactionReply, CompleteTransactionRequest, ProgressReply, ProgressRequest,
    RequeueReply, RequeueRequest, SleepReply, SleepRequest, Transaction, TxStatus, WorkEvent,
    WorkRequest, WorkStart, WorkStep, WorkStepResult, work_event, work_request, work_step,
    work_step_result,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::Code;
use tonic::codec::Streaming;

use super::pipelines::pipelines;
use crate::error::{Disposition, describe, disposition};
use crate::limits::WORK_REQUESTS_QUEUED_MAX;
use crate::{Client, ClientError};

impl Client {
    /// Worker call: opens a `Work` stream for `worker` in `node_group` with `credit` (0 to
    /// 1024) transactions it can take now. The node pushes a claimed transaction as soon as
    /// one is queued ([`WorkStream::next_claim`]), never more than the credit granted and not
    /// yet used (each claim uses one; grant more with [`WorkStream::grant`]), and answers the
    /// steps sent on the stream ([`WorkStream::complete`], …).
    ///
    /// The stream goes to one node (the preferred one; any node serves it), opened with one
    /// attempt. It is not retried: when it ends with an error, open a new one — on any node;
    /// the claims it held run until their steps arrive by another way (their tokens stay
    /// good) or the reaper takes them back.
    pub async fn work(
        &self,
        node_group: impl Into<String>,
        worker: impl Into<String>,
        credit: u32,
    ) -> Result<WorkStream, ClientError> {
        let (requests, outbound) = mpsc::channel(WORK_REQUESTS_QUEUED_MAX);
        let start = WorkRequest {
            kind: Some(work_request::Kind::Start(WorkStart {
                node_group: node_group.into(),
                worker: worker.into(),
                credit,
            })),
        };
        requests
            .send(start)
            .await
            .expect("the receiver is held below");
        let outbound = futures_util::stream::unfold(outbound, |mut outbound| async move {
            outbound.recv().await.map(|request| (request, outbound))
        });
        let timeout = self.config().attempt_timeout;
        let endpoint = self.target(None, Instant::now() + timeout).await;
        let channel = self.channel(&endpoint)?;
        let opened = tokio::time::timeout(timeout, pipelines(channel).work(outbound)).await;
        let status = match opened {
            Ok(Ok(response)) => {
                self.settle(&endpoint);
                return Ok(WorkStream {
                    requests,
                    events: response.into_inner(),
                    claims: VecDeque::new(),
                    results: BTreeMap::new(),
                    next_step_id: 1,
                });
            }
            Ok(Err(status)) => status,
            Err(_elapsed) => {
                self.forget_channel(&endpoint);
                self.unprefer(&endpoint);
                return Err(ClientError::Unavailable {
                    attempts: 1,
                    last_error: format!("{endpoint}: no answer within {timeout:?}"),
                    last_reason: String::new(),
                    may_have_taken_effect: true,
                });
            }
        };
        match disposition(&status) {
            Disposition::Refuse => Err(ClientError::from_status(&status)),
            _ => {
                self.forget_channel(&endpoint);
                self.unprefer(&endpoint);
                Err(ClientError::Unavailable {
                    attempts: 1,
                    last_error: describe(&endpoint, &status),
                    last_reason: crate::error::reason_of(&status).to_owned(),
                    may_have_taken_effect: crate::error::may_have_taken_effect(&status),
                })
            }
        }
    }
}

/// A worker's open `Work` stream (see [`Client::work`]).
///
/// Claims and step results arrive on one stream; this handle sorts them: [`next_claim`]
/// keeps step results aside for their callers, a step's call keeps claims aside for
/// [`next_claim`]. Steps can be pipelined with [`send_step`] and [`step_result`].
///
/// [`next_claim`]: WorkStream::next_claim
/// [`send_step`]: WorkStream::send_step
/// [`step_result`]: WorkStream::step_result
#[derive(Debug)]
pub struct WorkStream {
    requests: mpsc::Sender<WorkRequest>,
    events: Streaming<WorkEvent>,
    /// Claims received while waiting for a step's result.
    claims: VecDeque<Transaction>,
    /// Step results received while waiting for something else, by step id.
    results: BTreeMap<u64, WorkStepResult>,
    next_step_id: u64,
}

impl WorkStream {
    /// Grants `credit` more transactions (1 or more; the credit unused may not pass 1024, or
    /// the node ends the stream with `out-of-range`).
    pub async fn grant(&mut self, credit: u32) -> Result<(), ClientError> {
        self.send(work_request::Kind::Credit(credit)).await
    }

    /// The next transaction claimed for this worker, running under its claim token; `None`
    /// when the stream has ended.
    pub async fn next_claim(&mut self) -> Result<Option<Transaction>, ClientError> {
        loop {
            if let Some(claim) = self.claims.pop_front() {
                return Ok(Some(claim));
            }
            match self.next_event().await? {
                None => return Ok(None),
                Some(work_event::Kind::Claim(tx)) => return Ok(Some(tx)),
                Some(work_event::Kind::Step(result)) => {
                    self.results.insert(result.step_id, result);
                }
            }
        }
    }

    /// Sends a step without waiting for its result; answers its step id, for
    /// [`WorkStream::step_result`].
    pub async fn send_step(&mut self, step: work_step::Kind) -> Result<u64, ClientError> {
        let step_id = self.next_step_id;
        self.next_step_id += 1;
        self.send(work_request::Kind::Step(WorkStep {
            step_id,
            kind: Some(step),
        }))
        .await?;
        Ok(step_id)
    }

    /// The result of the step sent as `step_id`, waiting for it (claims that arrive meanwhile
    /// are kept for [`WorkStream::next_claim`]).
    pub async fn step_result(&mut self, step_id: u64) -> Result<WorkStepResult, ClientError> {
        loop {
            if let Some(result) = self.results.remove(&step_id) {
                return Ok(result);
            }
            match self.next_event().await? {
                None => return Err(ended()),
                Some(work_event::Kind::Claim(tx)) => self.claims.push_back(tx),
                Some(work_event::Kind::Step(result)) => {
                    self.results.insert(result.step_id, result);
                }
            }
        }
    }

    /// Completes transaction `id` claimed with `token` (see
    /// [`Client::complete_transaction`](crate::Client::complete_transaction)).
    pub async fn complete(
        &mut self,
        id: u64,
        token: u64,
        status: TxStatus,
        state: Option<String>,
    ) -> Result<CompleteTransactionReply, ClientError> {
        let step = work_step::Kind::Complete(CompleteTransactionRequest {
            transaction_id: id,
            claim_token: token,
            status: status.into(),
            state: state.unwrap_or_default(),
        });
        match self.step(step).await? {
            work_step_result::Result::Complete(reply) => Ok(reply),
            other => Err(mismatched("complete", &other)),
        }
    }

    /// Reports progress of transaction `id` claimed with `token` (see
    /// [`Client::report_progress`](crate::Client::report_progress)).
    pub async fn progress(
        &mut self,
        id: u64,
        token: u64,
        report: impl Into<String>,
    ) -> Result<ProgressReply, ClientError> {
        let step = work_step::Kind::Progress(ProgressRequest {
            transaction_id: id,
            claim_token: token,
            report: report.into(),
        });
        match self.step(step).await? {
            work_step_result::Result::Progress(reply) => Ok(reply),
            other => Err(mismatched("progress", &other)),
        }
    }

    /// Puts a claimed transaction to sleep (see `SleepRequest`).
    pub async fn sleep(&mut self, request: SleepRequest) -> Result<SleepReply, ClientError> {
        match self.step(work_step::Kind::Sleep(request)).await? {
            work_step_result::Result::Sleep(reply) => Ok(reply),
            other => Err(mismatched("sleep", &other)),
        }
    }

    /// Hands a claimed transaction on to a queue (see `RequeueRequest`).
    pub async fn requeue(&mut self, request: RequeueRequest) -> Result<RequeueReply, ClientError> {
        match self.step(work_step::Kind::Requeue(request)).await? {
            work_step_result::Result::Requeue(reply) => Ok(reply),
            other => Err(mismatched("requeue", &other)),
        }
    }

    /// Sends `step` and waits for its result; a refused step is [`ClientError::Refused`] with
    /// the code and reason its unary call would have had.
    async fn step(
        &mut self,
        step: work_step::Kind,
    ) -> Result<work_step_result::Result, ClientError> {
        let step_id = self.send_step(step).await?;
        match self.step_result(step_id).await?.result {
            Some(work_step_result::Result::Error(error)) => Err(ClientError::Refused {
                code: Code::from_i32(error.code),
                reason: error.reason,
                message: error.message,
            }),
            Some(result) => Ok(result),
            None => Err(mismatched("a step", &"nothing")),
        }
    }

    async fn send(&mut self, kind: work_request::Kind) -> Result<(), ClientError> {
        self.requests
            .send(WorkRequest { kind: Some(kind) })
            .await
            .map_err(|_| ended())
    }

    /// The next event, `None` at the stream's end; an error that ended the stream is returned
    /// as the node gave it.
    async fn next_event(&mut self) -> Result<Option<work_event::Kind>, ClientError> {
        loop {
            match self.events.message().await {
                Ok(None) => return Ok(None),
                Ok(Some(WorkEvent { kind: Some(kind) })) => return Ok(Some(kind)),
                // An event of a kind this client does not know: skip it.
                Ok(Some(WorkEvent { kind: None })) => {}
                Err(status) => return Err(ClientError::from_status(&status)),
            }
        }
    }
}

fn ended() -> ClientError {
    ClientError::Unavailable {
        attempts: 1,
        last_error: "the Work stream has ended; open a new one".to_owned(),
        last_reason: String::new(),
        may_have_taken_effect: true,
    }
}

fn mismatched(asked: &str, got: &impl std::fmt::Debug) -> ClientError {
    ClientError::Refused {
        code: Code::Internal,
        reason: "internal".to_owned(),
        message: format!("{asked} on the Work stream was answered with {got:?}"),
    }
}
