//! Webhooks in a pipelines run: the node's own webhook processor
//! ([`certus_node::roles::pipeline_webhooks`]) on every node's machine, sending through [`SimSender`]
//! over madsim's network to receivers on their own machines (10.0.7.R), which this module fails
//! and heals.
//!
//! A request is one message and its answer one message ([`madsim::net::Endpoint`], as HTTP-01
//! in the sessions scenario): the event id, attempt and transaction headers, then the JSON body.
//! A receiver answers `200`, or `500` while it is failing; while it is silent it reads and
//! answers nothing, and while it is cut off its machine is clogged, so the request never
//! arrives. Every request a receiver read is recorded ([`WebhookReceived`]).
//!
//! Until the faults heal, each receiver alternates healthy spans (1–4 s) with failing ones
//! (0.5–3 s, one of the three ways); on a third of the seeds the last receiver fails (answers
//! `500`) for the whole run, so its events exhaust their attempts and its URL is paused — the
//! paths that end in an administrator notice.
//!
//! The processor is started by the harness, not by the node (the node starts it only with its
//! HTTP sender, outside the simulation): a supervisor runs `run_with` on the machine of every
//! node that runs, so it dies with the node and is started again when the node is.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_node::Replica;
use certus_node::ordered_watch as watch;
use certus_node::roles::pipeline_webhooks::{
    self, Delivery, ProcessorTimings, WebhookProcessor, WebhookSender,
};
use certus_node::roles::session_daemons::BoxFuture;
use madsim::net::{Endpoint as NetEndpoint, NetSim};
use madsim::runtime::Handle;
use serde::Serialize;

use super::webhook_checkers::WebhookReceived;
use crate::cluster::{SimCluster, elapsed_ms};
use crate::schedule::SeedRng;

/// The port receivers listen on.
pub const RECEIVER_PORT: u16 = 8080;
/// The message tag of a webhook request.
const WEBHOOK_REQUEST: u64 = 0x5745_4248;
/// The message tag of a receiver's answer.
const WEBHOOK_ANSWER: u64 = 0x5745_4249;
/// How often the supervisor looks for nodes (re)started without a processor.
const SUPERVISE_EVERY: Duration = Duration::from_millis(100);

/// The simulated address of receiver `index`.
pub fn receiver_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated receivers");
    IpAddr::V4(Ipv4Addr::new(10, 0, 7, last))
}

/// The webhook URL of receiver `index`.
pub fn receiver_url(index: u32) -> String {
    format!(
        "http://{}:{RECEIVER_PORT}/hooks/{index}",
        receiver_ip(index)
    )
}

/// The processor's timings in the simulation: a short role lease and request timeout, so a
/// crashed holder's role moves within the run; the skew bound covers the scenario's clocks.
pub fn processor_timings(max_skew_ms: u64) -> ProcessorTimings {
    ProcessorTimings {
        lease_ttl_ms: 3_000,
        request_timeout_ms: 500,
        skew_ms: max_skew_ms + 100,
        deliveries_max: 16,
    }
}

/// How a receiver treats requests now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ReceiverMode {
    /// Answers 200.
    Healthy,
    /// Answers 500.
    Failing,
    /// Reads requests and answers nothing.
    Silent,
    /// Its machine is cut off: nothing arrives.
    CutOff,
}

/// [`WebhookSender`] over madsim's network: one message to the receiver the URL names, one
/// answer back. The processor bounds the wait.
#[derive(Debug, Default)]
pub struct SimSender;

impl SimSender {
    async fn post(delivery: &Delivery) -> Result<(), String> {
        let address = receiver_address(delivery.url.as_str())
            .ok_or_else(|| format!("{}: not a simulated receiver", delivery.url))?;
        // Bound on the calling task's machine: the sending node's address.
        let socket = NetEndpoint::bind("0.0.0.0:0")
            .await
            .map_err(|error| format!("bind: {error}"))?;
        let request = format!(
            "{}\n{}\n{}\n{}",
            delivery.event, delivery.attempt, delivery.transaction, delivery.body
        );
        socket
            .send_to(address, WEBHOOK_REQUEST, request.as_bytes())
            .await
            .map_err(|error| format!("{address}: {error}"))?;
        let mut buffer = vec![0u8; 256];
        let (length, _) = socket
            .recv_from(WEBHOOK_ANSWER, &mut buffer)
            .await
            .map_err(|error| format!("{address}: {error}"))?;
        let answer = String::from_utf8_lossy(&buffer[..length]).into_owned();
        if answer.starts_with("200") {
            Ok(())
        } else {
            Err(format!("HTTP {answer}"))
        }
    }
}

impl WebhookSender for SimSender {
    fn send<'a>(&'a self, delivery: &'a Delivery) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(Self::post(delivery))
    }
}

/// The socket address in `http://a.b.c.d:port/...`.
fn receiver_address(url: &str) -> Option<SocketAddr> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    authority.parse().ok()
}

/// Parses a request: headers, then the body.
fn parse_request(receiver: u32, text: &str, at_ms: u64) -> Option<WebhookReceived> {
    let mut parts = text.splitn(4, '\n');
    let event = parts.next()?.parse().ok()?;
    let attempt = parts.next()?.parse().ok()?;
    let transaction = parts.next()?.parse().ok()?;
    let body: serde_json::Value = serde_json::from_str(parts.next()?).ok()?;
    Some(WebhookReceived {
        receiver,
        event,
        attempt,
        transaction,
        body_event: body["event"].as_u64(),
        body_transaction: body["transaction"].as_u64(),
        kind: body["kind"].as_str().unwrap_or("").to_owned(),
        status: body["status"].as_str().map(str::to_owned),
        at_ms,
        accepted: false,
    })
}

/// Everything the receivers and the fault plan share.
#[derive(Clone, Debug)]
struct Receivers {
    modes: Arc<Mutex<Vec<ReceiverMode>>>,
    received: Arc<Mutex<Vec<WebhookReceived>>>,
    machines: Vec<madsim::task::NodeId>,
    started: tokio::time::Instant,
}

/// The webhook side of a run: receivers, their fault plan and the processors' supervisor.
#[derive(Debug)]
pub struct RunningWebhooks {
    receivers: Receivers,
    /// Set when the faults heal: the plan stops failing receivers.
    healed: Arc<AtomicBool>,
    /// The receiver failing through the whole run, if this seed has one.
    failing_for_good: Option<u32>,
    stop: watch::Sender<bool>,
    tasks: Vec<madsim::task::JoinHandle<()>>,
}

/// Starts `count` receivers, their fault plan, and the supervisor that runs a webhook processor
/// on every running node of `cluster`.
pub fn start(
    cluster: &Arc<SimCluster>,
    count: u32,
    seed: u64,
    max_skew_ms: u64,
    started: tokio::time::Instant,
) -> RunningWebhooks {
    let handle = Handle::current();
    let (stop, stopped) = watch::channel(false);
    let mut rng = SeedRng::new(seed, 1_000);
    let failing_for_good = (count > 1 && rng.chance(333)).then(|| count - 1);
    let mut machines = Vec::new();
    let mut nodes = Vec::new();
    for index in 0..count {
        let machine = handle
            .create_node()
            .name(format!("webhook-receiver-{index}"))
            .ip(receiver_ip(index))
            .build();
        machines.push(machine.id());
        nodes.push(machine);
    }
    let initial = (0..count)
        .map(|index| {
            if Some(index) == failing_for_good {
                ReceiverMode::Failing
            } else {
                ReceiverMode::Healthy
            }
        })
        .collect();
    let receivers = Receivers {
        modes: Arc::new(Mutex::new(initial)),
        received: Arc::default(),
        machines,
        started,
    };
    if let Some(index) = failing_for_good {
        tracing::info!(receiver = index, "webhook receiver fails for the whole run");
    }
    let healed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (index, machine) in (0..count).zip(&nodes) {
        tasks.push(machine.spawn(serve(index, receivers.clone(), stopped.clone())));
    }
    for index in 0..count {
        if Some(index) == failing_for_good {
            continue;
        }
        tasks.push(madsim::task::spawn(fail_and_heal(
            index,
            receivers.clone(),
            Arc::clone(&healed),
            SeedRng::new(seed, 1_001 + u64::from(index)),
        )));
    }
    tasks.push(madsim::task::spawn(supervise(
        Arc::clone(cluster),
        processor_timings(max_skew_ms),
        stopped,
    )));
    RunningWebhooks {
        receivers,
        healed,
        failing_for_good,
        stop,
        tasks,
    }
}

impl RunningWebhooks {
    /// The faults healed: every receiver but the one failing for good works from now on.
    pub fn healed(&self) {
        self.healed.store(true, Ordering::SeqCst);
    }

    /// The receiver failing through the whole run, if any.
    pub fn failing_for_good(&self) -> Option<u32> {
        self.failing_for_good
    }

    /// Stops the processors and receivers; what the receivers read.
    pub async fn stop(self) -> Vec<WebhookReceived> {
        let _ = self.stop.send(true);
        self.healed.store(true, Ordering::SeqCst);
        for task in self.tasks {
            let _ = task.await;
        }
        let net = NetSim::current();
        for machine in &self.receivers.machines {
            net.unclog_node(*machine);
        }
        std::mem::take(&mut *self.receivers.received.lock().expect("received"))
    }
}

/// Receiver `index`: reads requests and answers as its mode says, until `stopped`.
async fn serve(index: u32, receivers: Receivers, mut stopped: watch::Receiver<bool>) {
    let socket = NetEndpoint::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        RECEIVER_PORT,
    ))
    .await
    .expect("a receiver listens on its own machine");
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let received = tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            received = socket.recv_from(WEBHOOK_REQUEST, &mut buffer) => received,
            _ = stopped.changed() => return,
        };
        let Ok((length, from)) = received else {
            continue;
        };
        let at_ms = elapsed_ms(receivers.started);
        let text = String::from_utf8_lossy(&buffer[..length]).into_owned();
        let Some(mut request) = parse_request(index, &text, at_ms) else {
            tracing::error!(receiver = index, %text, "webhook receiver read a malformed request");
            continue;
        };
        let mode = receivers.modes.lock().expect("modes")[index as usize];
        request.accepted = mode == ReceiverMode::Healthy;
        tracing::debug!(
            receiver = index,
            event = request.event,
            attempt = request.attempt,
            transaction = request.transaction,
            ?mode,
            "webhook received"
        );
        receivers.received.lock().expect("received").push(request);
        let answer: &[u8] = match mode {
            ReceiverMode::Healthy => b"200",
            ReceiverMode::Failing => b"500 receiver failing",
            ReceiverMode::Silent | ReceiverMode::CutOff => continue,
        };
        let _ = socket.send_to(from, WEBHOOK_ANSWER, answer).await;
    }
}

/// Receiver `index`'s fault plan: healthy spans and failing spans until the faults heal.
async fn fail_and_heal(
    index: u32,
    receivers: Receivers,
    healed: Arc<AtomicBool>,
    mut rng: SeedRng,
) {
    let set = |mode: ReceiverMode| {
        receivers.modes.lock().expect("modes")[index as usize] = mode;
        let net = NetSim::current();
        let machine = receivers.machines[index as usize];
        if mode == ReceiverMode::CutOff {
            net.clog_node(machine);
        } else {
            net.unclog_node(machine);
        }
        tracing::info!(receiver = index, ?mode, "webhook receiver changes");
    };
    // Sleeps `ms`, or less if the faults heal first; whether they did.
    let wait = |ms: u64| {
        let healed = Arc::clone(&healed);
        async move {
            let until = tokio::time::Instant::now() + Duration::from_millis(ms);
            while tokio::time::Instant::now() < until && !healed.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            healed.load(Ordering::SeqCst)
        }
    };
    loop {
        if wait(rng.between(1_000, 4_000)).await {
            return;
        }
        set(match rng.between(0, 2) {
            0 => ReceiverMode::Failing,
            1 => ReceiverMode::Silent,
            _ => ReceiverMode::CutOff,
        });
        let healed_now = wait(rng.between(500, 3_000)).await;
        set(ReceiverMode::Healthy);
        if healed_now {
            return;
        }
    }
}

/// Runs a webhook processor on every running node's machine: started again whenever the node
/// is (a crash kills it with the node's other tasks), stopped when `stopped`.
async fn supervise(
    cluster: Arc<SimCluster>,
    timings: ProcessorTimings,
    mut stopped: watch::Receiver<bool>,
) {
    let handle = Handle::current();
    let sender: Arc<dyn WebhookSender> = Arc::new(SimSender);
    let mut running: BTreeMap<u64, (Arc<Replica>, madsim::task::JoinHandle<()>)> = BTreeMap::new();
    let (stop, stop_processors) = watch::channel(false);
    while !*stopped.borrow() {
        for (id, replica) in cluster.replicas() {
            if running
                .get(&id)
                .is_some_and(|(current, _)| Arc::ptr_eq(current, &replica))
            {
                continue;
            }
            let Some(machine) = handle.get_node(cluster.machine(id)) else {
                continue;
            };
            let processor = WebhookProcessor::new(id, Arc::clone(&sender))
                .with_timings(timings)
                .expect("the simulation's processor timings fit together");
            let task = machine.spawn(pipeline_webhooks::run_with(
                Arc::clone(&replica),
                processor,
                stop_processors.clone(),
            ));
            running.insert(id, (replica, task));
        }
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            () = tokio::time::sleep(SUPERVISE_EVERY) => {}
            _ = stopped.changed() => {}
        }
    }
    let _ = stop.send(true);
    for (id, (replica, task)) in running {
        // A processor on a node that crashed is gone already (and its task never ends).
        let alive = cluster
            .replica(id)
            .is_some_and(|current| Arc::ptr_eq(&current, &replica));
        if alive
            && tokio::time::timeout(Duration::from_secs(3), task)
                .await
                .is_err()
        {
            tracing::debug!(id, "webhook processor did not stop within 3 s");
        }
    }
}
