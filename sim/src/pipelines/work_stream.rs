//! The pipeline workers that take their work on the `Work` stream: one stream per node group
//! (a *lane*), each granting 1 to `stream_credit_max` credit — as many transactions as the
//! worker works at once in that group. The node pushes claims within the credit; each claim is
//! worked at once, on a task of its own ([`work_transaction`]), its steps sent on the lane's
//! stream and answered by step id, and its end grants one credit back.
//!
//! A lane's stream that breaks (its node crashed, or stopped, or a dequeue it proposed failed),
//! that stays silent while it has credit (its node cut off), or that leaves a step unanswered
//! for the attempt's timeout is given up, and the lane opens a new one on another node. The
//! steps in flight on it count as unanswered (they are sent again on the new stream, under the
//! same token); claims the node took for it and never delivered are left to the reaper; the
//! new stream starts with the credit of the transactions the lane is not working. A worker that
//! crashes on a transaction gives up both lanes: its other transactions are dropped at their
//! next step, and a new incarnation (a new worker name) opens new streams after a pause.
//!
//! The worker checks the node's side of the credit: on each stream, the claims pushed never
//! outnumber the credit granted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_node::ordered_watch as watch;
use certus_proto::v1;
use tokio::sync::{mpsc, oneshot};

use super::workers::{Answer, Flow, Via, record_claim, work_transaction};
use super::workload::{Context, FIRST_GROUP, SECOND_GROUP};
use crate::cluster::another_node;
use crate::schedule::SeedRng;

/// A stream worker: its lanes (credit per node group), incarnation after incarnation, until the
/// run stops; then it waits for the transactions it is still working.
pub(super) async fn work(index: u32, context: Context, mut rng: SeedRng, credit: [u32; 2]) {
    let claimed: Claimed = Arc::default();
    let mut incarnation = 0u64;
    while !context.stopping() {
        let worker = format!("w{index}-{incarnation}");
        let (crash, mut crashed) = watch::channel(false);
        let crash = Arc::new(crash);
        let mut lanes = Vec::new();
        for (group, credit) in [FIRST_GROUP, SECOND_GROUP].into_iter().zip(credit) {
            let lane = Arc::new(Lane::new(group, credit, worker.clone(), Arc::clone(&crash)));
            let lane_rng = SeedRng::new(context.seed, rng.next_u64());
            lanes.push(madsim::task::spawn(keep_lane(
                lane,
                context.clone(),
                lane_rng,
                Arc::clone(&claimed),
            )));
        }
        let mut stopped = context.stopped.clone();
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            _ = crashed.wait_for(|crashed| *crashed) => {}
            _ = stopped.wait_for(|stopped| *stopped) => {}
        }
        for lane in lanes {
            let _ = lane.await;
        }
        if *crash.borrow() {
            incarnation += 1;
            tokio::time::sleep(Duration::from_millis(rng.between(500, 2_000))).await;
        }
    }
    let working = std::mem::take(&mut *claimed.lock().expect("claimed transactions"));
    for task in working {
        let _ = task.await;
    }
}

/// The tasks working claimed transactions, to be awaited when the run stops.
type Claimed = Arc<Mutex<Vec<madsim::task::JoinHandle<()>>>>;

/// One node group's stream of one worker incarnation: the stream in use (if any), the credit
/// it works with, the transactions it is working.
#[derive(Debug)]
pub(super) struct Lane {
    group: &'static str,
    credit: u32,
    worker: String,
    /// Set when the incarnation crashes: both lanes stop.
    crash: Arc<watch::Sender<bool>>,
    inner: Mutex<LaneState>,
}

#[derive(Debug, Default)]
struct LaneState {
    /// The stream in use: the one opened last, unless it was given up since.
    link: Option<Link>,
    /// Streams opened so far (each has its number).
    opened: u64,
    /// Transactions claimed on any of the lane's streams and still being worked.
    working: u32,
    next_step_id: u64,
}

/// One `Work` stream, as the worker sees it.
#[derive(Debug)]
struct Link {
    number: u64,
    /// Its node has answered the opening: steps may go out.
    open: bool,
    requests: mpsc::UnboundedSender<v1::WorkRequest>,
    /// Steps sent and not yet answered: dropping this (with the link) answers them as lost.
    pending: BTreeMap<u64, oneshot::Sender<Option<v1::work_step_result::Result>>>,
    /// Credit granted on this stream, and claims it pushed.
    granted: u64,
    pushed: u64,
    /// Dropped with the link: tells the stream's reader to stop.
    _given_up: oneshot::Sender<()>,
}

impl Lane {
    fn new(
        group: &'static str,
        credit: u32,
        worker: String,
        crash: Arc<watch::Sender<bool>>,
    ) -> Lane {
        Lane {
            group,
            credit,
            worker,
            crash,
            inner: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LaneState> {
        self.inner.lock().expect("a lane's state")
    }

    /// The incarnation crashed.
    pub(super) fn crashed(&self) -> bool {
        *self.crash.borrow()
    }

    /// Sets up a new stream (replacing the one in use): its number, its first requests (the
    /// start, with the credit of the transactions the lane is not working), and the signal of
    /// its being given up.
    fn begin(
        &self,
    ) -> (
        u64,
        mpsc::UnboundedReceiver<v1::WorkRequest>,
        oneshot::Receiver<()>,
    ) {
        let mut state = self.state();
        state.opened += 1;
        let number = state.opened;
        let credit = self.credit.saturating_sub(state.working);
        let (requests, outbound) = mpsc::unbounded_channel();
        let (given_up, signal) = oneshot::channel();
        requests
            .send(v1::WorkRequest {
                kind: Some(v1::work_request::Kind::Start(v1::WorkStart {
                    node_group: self.group.to_owned(),
                    worker: self.worker.clone(),
                    credit,
                })),
            })
            .expect("the receiver is returned below");
        state.link = Some(Link {
            number,
            open: false,
            requests,
            pending: BTreeMap::new(),
            granted: u64::from(credit),
            pushed: 0,
            _given_up: given_up,
        });
        (number, outbound, signal)
    }

    /// Stream `number` answered its opening.
    fn opened(&self, number: u64) {
        if let Some(link) = self
            .state()
            .link
            .as_mut()
            .filter(|link| link.number == number)
        {
            link.open = true;
        }
    }

    /// Gives stream `number` up, if it is still the one in use: its steps in flight are
    /// answered as lost and its reader stops.
    fn give_up(&self, number: u64) {
        let mut state = self.state();
        if state
            .link
            .as_ref()
            .is_some_and(|link| link.number == number)
        {
            state.link = None;
        }
    }

    /// Stream `number` pushed a claim: counted against its credit (a claim past it is the
    /// violation returned); whether to work it (not when the stream was given up meanwhile).
    fn claimed(&self, number: u64) -> (bool, Option<String>) {
        let mut state = self.state();
        let Some(link) = state.link.as_mut().filter(|link| link.number == number) else {
            return (false, None);
        };
        link.pushed += 1;
        let violation = (link.pushed > link.granted).then(|| {
            format!(
                "{}'s {} stream {number} was pushed {} claims with {} credit granted",
                self.worker, self.group, link.pushed, link.granted
            )
        });
        state.working += 1;
        (true, violation)
    }

    /// A transaction claimed on this lane is done with: one credit back, on the stream in use
    /// (a stream opened later started with it).
    fn released(&self) {
        let mut state = self.state();
        state.working -= 1;
        if let Some(link) = state.link.as_mut()
            && link
                .requests
                .send(v1::WorkRequest {
                    kind: Some(v1::work_request::Kind::Credit(1)),
                })
                .is_ok()
        {
            link.granted += 1;
        }
    }

    /// Stream `number` answered a step; the violation when it was not one in flight.
    fn answered(&self, number: u64, result: v1::WorkStepResult) -> Option<String> {
        let mut state = self.state();
        let link = state.link.as_mut().filter(|link| link.number == number)?;
        match link.pending.remove(&result.step_id) {
            Some(waiting) => {
                let _ = waiting.send(result.result);
                None
            }
            None => Some(format!(
                "{}'s {} stream {number} answered step {}, which is not in flight",
                self.worker, self.group, result.step_id
            )),
        }
    }

    /// Puts `step` on the stream in use, if it is open: the stream's number and where its
    /// answer comes.
    fn put(
        &self,
        step: v1::work_step::Kind,
    ) -> Option<(u64, oneshot::Receiver<Option<v1::work_step_result::Result>>)> {
        let mut state = self.state();
        let step_id = state.next_step_id + 1;
        let link = state.link.as_mut().filter(|link| link.open)?;
        let (answer, waiting) = oneshot::channel();
        link.requests
            .send(v1::WorkRequest {
                kind: Some(v1::work_request::Kind::Step(v1::WorkStep {
                    step_id,
                    kind: Some(step),
                })),
            })
            .ok()?;
        link.pending.insert(step_id, answer);
        let number = link.number;
        state.next_step_id = step_id;
        Some((number, waiting))
    }

    /// Sends `step` on the lane's stream (waiting up to the attempt's timeout for one to be
    /// open); when it went out, and its answer. A step unanswered within the attempt's timeout
    /// gives its stream up.
    pub(super) async fn send(&self, context: &Context, step: v1::work_step::Kind) -> (u64, Answer) {
        let timeout = context.workload.attempt_timeout;
        let give_up_ms = context.now_ms() + u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        loop {
            if self.crashed() || context.stopping() {
                return (context.now_ms(), Answer::Unsent);
            }
            if let Some((number, waiting)) = self.put(step.clone()) {
                let sent_ms = context.now_ms();
                context.shared.with(|history| history.stream_steps += 1);
                let answer = match tokio::time::timeout(timeout, waiting).await {
                    Ok(Ok(result)) => Answer::of_result(result),
                    Ok(Err(_given_up)) => Answer::Lost,
                    Err(_elapsed) => {
                        tracing::info!(worker = %self.worker, group = self.group, number, "a step on the work stream went unanswered: stream given up");
                        self.give_up(number);
                        Answer::Lost
                    }
                };
                return (sent_ms, answer);
            }
            if context.now_ms() >= give_up_ms {
                return (context.now_ms(), Answer::Unsent);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The stream in use has credit the node has not used.
    fn has_credit(&self, number: u64) -> bool {
        self.state()
            .link
            .as_ref()
            .is_some_and(|link| link.number == number && link.granted > link.pushed)
    }
}

/// Keeps a lane's stream open, moving to another node when one is given up, until the run
/// stops or the incarnation crashes; works every claim pushed on it.
async fn keep_lane(lane: Arc<Lane>, context: Context, mut rng: SeedRng, claimed: Claimed) {
    let timeout = context.workload.attempt_timeout;
    let (idle_min, idle_max) = context.workload.stream_idle_ms;
    let idle = Duration::from_millis(rng.between(idle_min, idle_max));
    let mut node = rng.between(1, context.nodes);
    let mut crashed = lane.crash.subscribe();
    let mut stopped = context.stopped.clone();
    while !context.stopping() && !lane.crashed() {
        let (number, outbound, mut given_up) = lane.begin();
        context.shared.with(|history| history.streams_opened += 1);
        let outbound = futures_util::stream::unfold(outbound, |mut outbound| async move {
            outbound.recv().await.map(|request| (request, outbound))
        });
        let events = match context.connect(node, timeout).await {
            Some(mut client) => match client.work(outbound).await {
                Ok(response) => Some(response.into_inner()),
                Err(status) => {
                    if status.code() == tonic::Code::InvalidArgument {
                        context.violation(format!(
                            "node {node} refused {}'s valid Work stream: {}",
                            lane.worker,
                            status.message()
                        ));
                    }
                    None
                }
            },
            None => None,
        };
        if let Some(mut events) = events {
            lane.opened(number);
            tracing::info!(worker = %lane.worker, group = lane.group, node, number, "work stream open");
            loop {
                let event = tokio::select! {
                    biased;
                    _ = &mut given_up => break,
                    _ = crashed.wait_for(|crashed| *crashed) => break,
                    _ = stopped.wait_for(|stopped| *stopped) => break,
                    event = tokio::time::timeout(idle, events.message()) => event,
                };
                match event {
                    // Silence while the node owes claims: cut off, or its dequeues hang.
                    Err(_idle) if lane.has_credit(number) => {
                        tracing::info!(worker = %lane.worker, group = lane.group, node, number, "work stream silent with credit: given up");
                        break;
                    }
                    Err(_idle) => {}
                    Ok(Ok(Some(v1::WorkEvent { kind: Some(kind) }))) => {
                        on_event(&lane, &context, &mut rng, &claimed, node, number, kind);
                    }
                    Ok(Ok(Some(v1::WorkEvent { kind: None }))) => context.violation(format!(
                        "node {node} sent {} an empty work event",
                        lane.worker
                    )),
                    Ok(Ok(None)) => break,
                    Ok(Err(status)) => {
                        if status.code() == tonic::Code::InvalidArgument {
                            context.violation(format!(
                                "node {node} ended {}'s Work stream as invalid: {}",
                                lane.worker,
                                status.message()
                            ));
                        }
                        tracing::info!(worker = %lane.worker, group = lane.group, node, number, %status, "work stream ended");
                        break;
                    }
                }
            }
        }
        lane.give_up(number);
        if context.stopping() || lane.crashed() {
            break;
        }
        node = another_node(&mut rng, node, context.nodes);
        tokio::time::sleep(Duration::from_millis(rng.between(100, 300))).await;
    }
    lane.state().link = None;
}

/// What a lane does with an event of its stream `number` (on `node`).
fn on_event(
    lane: &Arc<Lane>,
    context: &Context,
    rng: &mut SeedRng,
    claimed: &Claimed,
    node: u64,
    number: u64,
    event: v1::work_event::Kind,
) {
    match event {
        v1::work_event::Kind::Claim(tx) => {
            let (work, violation) = lane.claimed(number);
            if let Some(violation) = violation {
                context.violation(violation);
            }
            if !work {
                return;
            }
            record_claim(context, &lane.worker, node, &tx);
            context.shared.with(|history| history.stream_claims += 1);
            let tx_rng = SeedRng::new(context.seed, rng.next_u64());
            let task =
                madsim::task::spawn(work_claim(Arc::clone(lane), context.clone(), tx_rng, tx));
            claimed.lock().expect("claimed transactions").push(task);
        }
        v1::work_event::Kind::Step(result) => {
            if let Some(violation) = lane.answered(number, result) {
                context.violation(violation);
            }
        }
    }
}

/// Works one transaction pushed on a lane's stream, then gives the lane its credit back (or,
/// crashing on it, crashes the worker).
async fn work_claim(lane: Arc<Lane>, context: Context, mut rng: SeedRng, tx: v1::Transaction) {
    let worker = lane.worker.clone();
    let mut via = Via::Stream(Arc::clone(&lane));
    let flow = work_transaction(&context, &mut rng, &worker, &tx, &mut via, None).await;
    if flow == Flow::Crashed {
        let _ = lane.crash.send(true);
    }
    lane.released();
}
