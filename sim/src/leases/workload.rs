//! Workloads: simulated clients on their own machines, speaking gRPC to the nodes through
//! [`certus_client`], recording what they see into a [`History`].
//!
//! The lease-contention workload: each client repeatedly tries to take one of a few leases;
//! while it holds one it writes to a protected resource (which accepts a write only if the
//! cluster confirms the writer's fencing token), renews, and finally releases or abandons it.
//! Later workloads (sessions, pipelines, CT) plug in beside it: a workload is started on its
//! machines, stopped, and hands over its history.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_client::{AcquireReply, Client, ClientConfig, ClientError, Lease, ReadAt};
use certus_node::ordered_watch as watch;
use madsim::runtime::Handle;
use tracing::info;

use super::history::{
    Call, History, Hold, How, IndexedRead, LeaseSeen, Operation, Outcome, ResourceWrite,
};
use crate::cluster::{elapsed_ms, endpoint};
use crate::schedule::SeedRng;

/// The simulated address of client machine `index`.
pub fn client_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated clients");
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, last))
}

/// The shape of the lease-contention workload.
#[derive(Clone, Debug)]
pub struct LeaseWorkload {
    /// How many clients.
    pub clients: u32,
    /// How many leases they contend for.
    pub leases: u32,
    /// The shortest TTL a client asks for.
    pub ttl_min_ms: u64,
    /// The longest.
    pub ttl_max_ms: u64,
    /// How long a client waits for one answer before it counts the call as unknown.
    pub attempt_timeout: Duration,
}

impl Default for LeaseWorkload {
    fn default() -> Self {
        LeaseWorkload {
            clients: 5,
            leases: 2,
            ttl_min_ms: 400,
            ttl_max_ms: 2_500,
            attempt_timeout: Duration::from_millis(1_500),
        }
    }
}

/// A shared recorder of what clients saw.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    history: Arc<Mutex<History>>,
}

impl Recorder {
    /// A copy of everything recorded so far.
    pub fn history(&self) -> History {
        self.history.lock().expect("history").clone()
    }

    fn operation(&self, mut operation: Operation) {
        let mut history = self.history.lock().expect("history");
        operation.id = u64::try_from(history.operations.len()).unwrap_or(u64::MAX);
        history.operations.push(operation);
    }

    fn hold(&self, hold: Hold) {
        self.history.lock().expect("history").holds.push(hold);
    }

    fn resource_write(&self, write: ResourceWrite) {
        self.history
            .lock()
            .expect("history")
            .resource_writes
            .push(write);
    }

    fn read(&self, read: IndexedRead) {
        self.history.lock().expect("history").reads.push(read);
    }
}

/// A running workload.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<bool>,
    tasks: Vec<madsim::task::JoinHandle<()>>,
    recorder: Recorder,
}

impl Running {
    /// Stops the clients (each finishes its call in flight) and returns the history.
    pub async fn stop(self) -> History {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.recorder.history()
    }

    /// The recorder, for probes that add to the same history.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }
}

/// The reason strings with which a node refuses a call without having changed anything.
fn is_definite_refusal(reason: &str) -> bool {
    matches!(
        reason,
        "not-holder"
            | "expired"
            | "unknown-lease"
            | "fence-rejected"
            | "invalid-ttl"
            | "invalid-argument"
            | "too-many-leases"
    )
}

fn seen(lease: Option<&Lease>) -> Option<LeaseSeen> {
    lease.map(|lease| LeaseSeen {
        holder: lease.holder.clone(),
        token: lease.fencing_token,
        granted_at_ms: lease.granted_at_ms,
        renewed_at_ms: lease.renewed_at_ms,
        expires_at_ms: lease.expires_at_ms,
    })
}

fn failure(error: &ClientError) -> Outcome {
    if is_definite_refusal(error.reason()) {
        Outcome::Refused {
            reason: error.reason().to_owned(),
        }
    } else if let ClientError::Unavailable {
        may_have_taken_effect: false,
        ..
    } = error
    {
        Outcome::NotSent {
            error: error.to_string(),
        }
    } else {
        Outcome::Unknown {
            error: error.to_string(),
        }
    }
}

fn acquired(reply: &AcquireReply) -> Outcome {
    let Some(lease) = seen(reply.lease.as_ref()) else {
        return Outcome::Unknown {
            error: "an acquire reply without a lease".to_owned(),
        };
    };
    // The generated enum: 1 created, 2 took over an expired grant, 3 renewed.
    let how = match reply.how {
        1 => How::Created,
        2 => How::TookOverExpired {
            previous_holder: reply.previous_holder.clone(),
        },
        _ => How::Renewed,
    };
    Outcome::Acquired { lease, how }
}

/// Starts the lease-contention workload on its own machines.
pub fn start_leases(
    workload: &LeaseWorkload,
    nodes: u64,
    seed: u64,
    started: tokio::time::Instant,
) -> Running {
    let handle = Handle::current();
    let recorder = Recorder::default();
    let (stop, stopped) = watch::channel(false);
    let mut tasks = Vec::new();
    for index in 0..workload.clients {
        let machine = handle
            .create_node()
            .name(format!("client-{index}"))
            .ip(client_ip(index))
            .build();
        let client = LeaseClient {
            index,
            workload: workload.clone(),
            clients: {
                let config = ClientConfig {
                    attempt_timeout: workload.attempt_timeout,
                    deadline: workload.attempt_timeout,
                    max_attempts: 1,
                    jitter_seed: seed ^ u64::from(index),
                    connect_timeout: Duration::from_millis(500),
                    discovery_timeout: Duration::from_millis(500),
                    pin_to_endpoints: true,
                    ..ClientConfig::default()
                };
                // One client session for all of them: one program, one sequence of requests.
                let first =
                    Client::with_config([endpoint(1)], config.clone()).expect("a valid endpoint");
                let mut clients = vec![first.clone()];
                for id in 2..=nodes {
                    clients.push(
                        Client::sharing_session_with([endpoint(id)], config.clone(), &first)
                            .expect("a valid endpoint"),
                    );
                }
                clients
            },
            rng: SeedRng::new(seed, 100 + u64::from(index)),
            recorder: recorder.clone(),
            started,
            stopped: stopped.clone(),
        };
        tasks.push(machine.spawn(client.run()));
    }
    Running {
        stop,
        tasks,
        recorder,
    }
}

/// One simulated lease client.
struct LeaseClient {
    index: u32,
    workload: LeaseWorkload,
    /// One client per node, each pinned to it, making one attempt per call.
    clients: Vec<Client>,
    rng: SeedRng,
    recorder: Recorder,
    started: tokio::time::Instant,
    stopped: watch::Receiver<bool>,
}

/// What a client believes about a lease it holds.
struct Holding {
    lease: String,
    token: u64,
    from_ms: u64,
    until_ms: u64,
}

impl LeaseClient {
    fn now_ms(&self) -> u64 {
        elapsed_ms(self.started)
    }

    fn holder(&self) -> String {
        format!("client-{}", self.index)
    }

    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    fn any_node(&mut self) -> Client {
        let last = u64::try_from(self.clients.len()).unwrap_or(1) - 1;
        let pick = usize::try_from(self.rng.between(0, last)).unwrap_or(0);
        self.clients[pick].clone()
    }

    async fn pause(&mut self, low_ms: u64, high_ms: u64) {
        let ms = self.rng.between(low_ms, high_ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn run(mut self) {
        while !self.stopping() {
            let lease = format!(
                "lease-{}",
                self.rng
                    .between(0, u64::from(self.workload.leases.max(1)) - 1)
            );
            let ttl_ms = self
                .rng
                .between(self.workload.ttl_min_ms, self.workload.ttl_max_ms);
            let (invoked_ms, outcome) = self.acquire(&lease, ttl_ms).await;
            if let Outcome::Acquired { lease: seen, .. } = &outcome
                && seen.holder == self.holder()
            {
                let holding = Holding {
                    lease: lease.clone(),
                    token: seen.token,
                    from_ms: self.now_ms(),
                    until_ms: invoked_ms + ttl_ms,
                };
                self.hold(holding).await;
            } else {
                self.pause(20, 400).await;
            }
        }
    }

    async fn acquire(&mut self, lease: &str, ttl_ms: u64) -> (u64, Outcome) {
        let client = self.any_node();
        let invoked_ms = self.now_ms();
        let outcome = match client.acquire(lease, self.holder(), ttl_ms).await {
            Ok(reply) => acquired(&reply),
            Err(error) => failure(&error),
        };
        self.record(
            lease,
            Call::Acquire {
                holder: self.holder(),
                ttl_ms,
            },
            invoked_ms,
            outcome.clone(),
        );
        (invoked_ms, outcome)
    }

    fn record(&self, lease: &str, call: Call, invoked_ms: u64, outcome: Outcome) {
        self.recorder.operation(Operation {
            id: 0,
            client: self.index,
            lease: lease.to_owned(),
            call,
            invoked_ms,
            completed_ms: self.now_ms(),
            outcome,
        });
    }

    /// Uses a held lease until it ends, is released, or is abandoned.
    async fn hold(&mut self, mut holding: Holding) {
        // Keep clear of the end: a client stops using a lease a little before its TTL runs out.
        const MARGIN_MS: u64 = 50;
        loop {
            if self.stopping() || self.now_ms() + MARGIN_MS >= holding.until_ms {
                break;
            }
            match self.rng.between(0, 99) {
                0..=54 => self.write(&holding).await,
                55..=79 => {
                    let ttl_ms = self
                        .rng
                        .between(self.workload.ttl_min_ms, self.workload.ttl_max_ms);
                    let client = self.any_node();
                    let invoked_ms = self.now_ms();
                    let outcome = match client.renew(&holding.lease, self.holder(), ttl_ms).await {
                        Ok(reply) => match seen(reply.lease.as_ref()) {
                            Some(lease) => Outcome::Renewed { lease },
                            None => Outcome::Unknown {
                                error: "a renew reply without a lease".to_owned(),
                            },
                        },
                        Err(error) => failure(&error),
                    };
                    self.record(
                        &holding.lease,
                        Call::Renew {
                            holder: self.holder(),
                            ttl_ms,
                        },
                        invoked_ms,
                        outcome.clone(),
                    );
                    match outcome {
                        // A renewal sets the expiry to its own time plus its TTL, which may be
                        // sooner than before.
                        Outcome::Renewed { lease } if lease.token == holding.token => {
                            holding.until_ms = invoked_ms + ttl_ms;
                        }
                        // It may have taken effect, so the lease may now end that soon.
                        Outcome::Unknown { .. } => {
                            holding.until_ms = holding.until_ms.min(invoked_ms + ttl_ms);
                        }
                        // Certainly not applied: the grant stands as it was.
                        Outcome::NotSent { .. } => {}
                        _ => {
                            // Refused: the lease is gone; stop using it at once.
                            holding.until_ms = holding.until_ms.min(self.now_ms());
                            break;
                        }
                    }
                }
                80..=91 => {
                    let client = self.any_node();
                    let invoked_ms = self.now_ms();
                    // Stop using the lease before asking to give it up.
                    holding.until_ms = holding.until_ms.min(invoked_ms);
                    let outcome = match client.release(&holding.lease, self.holder()).await {
                        Ok(reply) => match seen(reply.lease.as_ref()) {
                            Some(lease) => Outcome::Released { lease },
                            None => Outcome::Unknown {
                                error: "a release reply without a lease".to_owned(),
                            },
                        },
                        Err(error) => failure(&error),
                    };
                    self.record(
                        &holding.lease,
                        Call::Release {
                            holder: self.holder(),
                        },
                        invoked_ms,
                        outcome,
                    );
                    break;
                }
                _ => {
                    // Abandon: stop renewing and let the lease run out, like a client that
                    // paused or died.
                    info!(client = self.index, lease = %holding.lease, "abandons its lease");
                    holding.until_ms = holding.until_ms.min(self.now_ms());
                    break;
                }
            }
            self.pause(10, 200).await;
        }
        self.recorder.hold(Hold {
            client: self.index,
            lease: holding.lease.clone(),
            token: holding.token,
            from_ms: holding.from_ms,
            until_ms: holding.until_ms.max(holding.from_ms),
        });
        // Sometimes the client is a zombie: it stalls (a long pause, a lost clock) and then
        // writes with its old token as if it still held the lease. Only the fencing check stands
        // between it and the resource.
        if !self.stopping() && self.rng.chance(300) {
            self.pause(0, 2_000).await;
            for _ in 0..self.rng.between(1, 3) {
                self.write(&holding).await;
                self.pause(10, 200).await;
            }
        }
    }

    /// Writes to the protected resource: it asks the cluster whether the token is the live
    /// grant's, and accepts the write only if so.
    async fn write(&mut self, holding: &Holding) {
        let client = self.any_node();
        let invoked_ms = self.now_ms();
        let outcome = match client.check_fence_at(&holding.lease, holding.token).await {
            Ok(ReadAt {
                value: reply,
                index,
            }) => {
                if let Some(index) = index {
                    self.recorder.read(IndexedRead {
                        client: self.index,
                        invoked_ms,
                        completed_ms: self.now_ms(),
                        index,
                    });
                }
                Outcome::Fence {
                    valid: reply.valid,
                    current_token: reply.current_token,
                }
            }
            Err(error) => failure(&error),
        };
        self.record(
            &holding.lease,
            Call::CheckFence {
                token: holding.token,
            },
            invoked_ms,
            outcome.clone(),
        );
        if let Outcome::Fence { valid: true, .. } = outcome {
            self.recorder.resource_write(ResourceWrite {
                client: self.index,
                lease: holding.lease.clone(),
                token: holding.token,
                checked_from_ms: invoked_ms,
                accepted_ms: self.now_ms(),
            });
        }
    }
}

/// Acquires `lease` through any node until it is granted, retrying every `every`; returns the
/// simulated ms at which the grant was acknowledged, or `None` if `until_ms` passed first. The
/// liveness probe: after the faults heal the cluster must grant within a bound.
pub async fn acquire_until_granted(
    nodes: u64,
    lease: &str,
    started: tokio::time::Instant,
    until_ms: u64,
    recorder: &Recorder,
) -> Option<u64> {
    let handle = Handle::current();
    let machine = handle
        .create_node()
        .name("probe")
        .ip(client_ip(200))
        .build();
    let lease = lease.to_owned();
    let recorder = recorder.clone();
    machine
        .spawn(async move {
            let config = ClientConfig {
                attempt_timeout: Duration::from_millis(1_000),
                deadline: Duration::from_millis(1_000),
                max_attempts: 1,
                jitter_seed: 1,
                connect_timeout: Duration::from_millis(300),
                discovery_timeout: Duration::from_millis(300),
                ..ClientConfig::default()
            };
            let client =
                Client::with_config((1..=nodes).map(endpoint), config).expect("valid endpoints");
            while elapsed_ms(started) < until_ms {
                let invoked_ms = elapsed_ms(started);
                let result = client.acquire(&lease, "probe", 60_000).await;
                let outcome = match &result {
                    Ok(reply) => acquired(reply),
                    Err(error) => failure(error),
                };
                recorder.operation(Operation {
                    id: 0,
                    client: u32::MAX,
                    lease: lease.clone(),
                    call: Call::Acquire {
                        holder: "probe".to_owned(),
                        ttl_ms: 60_000,
                    },
                    invoked_ms,
                    completed_ms: elapsed_ms(started),
                    outcome,
                });
                if result.is_ok() {
                    return Some(elapsed_ms(started));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None
        })
        .await
        .ok()
        .flatten()
}
