//! A client that sends its numbered requests again on purpose: the same lease request, with the
//! same client session metadata, to another node, later — after its answer, after the client's
//! next requests, across faults. What real networks and retries do by accident, done on purpose.
//!
//! It speaks the raw gRPC stubs (as a client in another language would) on a lease of its own
//! (`duplicates`), so the contention workload's checkers never see it. Its checker,
//! **copies-answered-alike**, judges what the copies were answered; the run's `applied-once`
//! checker judges that no copy was ever applied.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_node::ordered_watch as watch;
use certus_proto::v1::clients_client::ClientsClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{
    AcquireRequest, GetLeaseRequest, Lease, RegisterClientRequest, ReleaseRequest, RenewRequest,
};
use madsim::runtime::Handle;
use serde::Serialize;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

use super::workload::client_ip;
use crate::cluster::endpoint;
use crate::judge::Verdict;
use crate::schedule::SeedRng;

/// The lease the duplicating client works on.
const LEASE: &str = "duplicates";
/// The machine index of the duplicating client (the contention clients use the low ones).
const MACHINE_INDEX: u32 = 150;
/// How long one call may take before the client counts it unanswered.
const CALL_TIMEOUT: Duration = Duration::from_millis(1_500);

/// One lease request as sent, every time.
#[derive(Clone, Debug, Serialize)]
enum LeaseCall {
    Acquire { ttl_ms: u64 },
    Renew { ttl_ms: u64 },
    Release,
}

/// A numbered request: what it asks, and the metadata it carries on every copy.
#[derive(Clone, Debug, Serialize)]
struct Numbered {
    sequence: u64,
    first_outstanding: u64,
    call: LeaseCall,
}

/// What one copy was answered: the reply, a refusal (code and `certus-error` reason), or no
/// answer within the timeout or from the transport.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
enum Answer {
    Reply(String),
    Refused { code: i32, reason: String },
    Unanswered,
}

/// One copy sent: which request, to which node, when, and what came back.
#[derive(Clone, Debug, Serialize)]
struct Copy {
    sequence: u64,
    node: u64,
    sent_ms: u64,
    /// Whether this was the first sending (the client's own call) or a duplicate.
    duplicate: bool,
    answer: Answer,
}

/// Everything the duplicating client did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DuplicateRecord {
    client: Option<u64>,
    requests: Vec<Numbered>,
    copies: Vec<Copy>,
    /// Reads right after a copy of the latest request that found the lease changed by it.
    changed_by_copies: Vec<String>,
}

/// The duplicating client, running.
#[derive(Debug)]
pub struct Duplicator {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    record: Arc<Mutex<DuplicateRecord>>,
}

impl Duplicator {
    /// Starts the client on its own machine.
    pub fn start(nodes: u64, seed: u64, started: tokio::time::Instant) -> Duplicator {
        let handle = Handle::current();
        let machine = handle
            .create_node()
            .name("duplicator")
            .ip(client_ip(MACHINE_INDEX))
            .build();
        let (stop, stopped) = watch::channel(false);
        let record = Arc::new(Mutex::new(DuplicateRecord::default()));
        let run = Run {
            nodes,
            rng: SeedRng::new(seed, 7_000),
            record: Arc::clone(&record),
            started,
            stopped,
        };
        let task = machine.spawn(run.run());
        Duplicator { stop, task, record }
    }

    /// Stops the client and judges what its copies were answered.
    pub async fn finish(self) -> (Verdict, DuplicateRecord) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let record = self.record.lock().expect("duplicate record").clone();
        (copies_answered_alike(&record), record)
    }
}

struct Run {
    nodes: u64,
    rng: SeedRng,
    record: Arc<Mutex<DuplicateRecord>>,
    started: tokio::time::Instant,
    stopped: watch::Receiver<bool>,
}

impl Run {
    fn now_ms(&self) -> u64 {
        crate::cluster::elapsed_ms(self.started)
    }

    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    fn any_node(&mut self) -> u64 {
        self.rng.between(1, self.nodes)
    }

    async fn channel(node: u64) -> Option<Channel> {
        Endpoint::from_shared(format!("http://{}", endpoint(node)))
            .expect("a valid endpoint")
            .connect_timeout(Duration::from_millis(500))
            .timeout(CALL_TIMEOUT)
            .connect()
            .await
            .ok()
    }

    async fn register(&mut self) -> Option<u64> {
        while !self.stopping() {
            let node = self.any_node();
            if let Some(channel) = Run::channel(node).await
                && let Ok(reply) = ClientsClient::new(channel)
                    .register(RegisterClientRequest {})
                    .await
            {
                return Some(reply.into_inner().client_id);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    async fn run(mut self) {
        let Some(client) = self.register().await else {
            return;
        };
        self.record.lock().expect("duplicate record").client = Some(client);
        let mut sequence = 0;
        while !self.stopping() {
            sequence += 1;
            let ttl_ms = self.rng.between(500, 3_000);
            let call = match self.rng.between(0, 9) {
                0..=4 => LeaseCall::Acquire { ttl_ms },
                5..=7 => LeaseCall::Renew { ttl_ms },
                _ => LeaseCall::Release,
            };
            // One call at a time: each request acknowledges every earlier one.
            let request = Numbered {
                sequence,
                first_outstanding: sequence,
                call,
            };
            self.record
                .lock()
                .expect("duplicate record")
                .requests
                .push(request.clone());
            let granted = self.send(client, &request, false).await;
            // Copies of this request or an earlier one, now or after a pause.
            for _ in 0..self.rng.between(0, 2) {
                if self.rng.chance(300) {
                    let pause = self.rng.between(0, 1_500);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                let back = self.rng.between(0, 3.min(sequence - 1));
                let earlier = self.record.lock().expect("duplicate record").requests
                    [usize::try_from(sequence - 1 - back).expect("small")]
                .clone();
                self.send(client, &earlier, true).await;
                // Nothing but this client touches the lease: whatever copy was answered, the
                // lease is still the grant the request itself was answered with (or gone).
                if let Some(granted) = &granted {
                    self.check_unchanged(sequence, granted).await;
                }
            }
            let pause = self.rng.between(20, 300);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// Reads the lease (linearizably, from any node) and notes it if it is no longer `granted`.
    async fn check_unchanged(&mut self, sequence: u64, granted: &Lease) {
        let node = self.any_node();
        let Some(channel) = Run::channel(node).await else {
            return;
        };
        let read = LeasesClient::new(channel)
            .get(GetLeaseRequest {
                name: LEASE.to_owned(),
            })
            .await;
        // Gone (expired, reclaimed) or unreadable now: nothing to compare.
        if let Ok(lease) = read
            && lease.get_ref() != granted
        {
            let seen = lease.into_inner();
            self.record
                .lock()
                .expect("duplicate record")
                .changed_by_copies
                .push(format!(
                    "after copies of request {sequence}, which was answered with {granted:?}, \
                     node {node} read {seen:?}"
                ));
        }
    }

    /// Sends one copy; returns the lease its answer granted or renewed, if it was answered so.
    async fn send(&mut self, client: u64, request: &Numbered, duplicate: bool) -> Option<Lease> {
        let node = self.any_node();
        let sent_ms = self.now_ms();
        let (answer, granted) = match Run::channel(node).await {
            Some(channel) => call(channel, client, request).await,
            None => (Answer::Unanswered, None),
        };
        self.record
            .lock()
            .expect("duplicate record")
            .copies
            .push(Copy {
                sequence: request.sequence,
                node,
                sent_ms,
                duplicate,
                answer,
            });
        granted
    }
}

/// `message` carrying `request`'s numbering.
fn numbered<M>(client: u64, request: &Numbered, message: M) -> tonic::Request<M> {
    let mut wrapped = tonic::Request::new(message);
    certus_proto::number_request(
        &mut wrapped,
        client,
        request.sequence,
        request.first_outstanding,
    );
    wrapped
}

async fn call(channel: Channel, client: u64, request: &Numbered) -> (Answer, Option<Lease>) {
    let mut leases = LeasesClient::new(channel);
    let name = LEASE.to_owned();
    let holder = "duplicator".to_owned();
    let reply = match &request.call {
        LeaseCall::Acquire { ttl_ms } => leases
            .acquire(numbered(
                client,
                request,
                AcquireRequest {
                    name,
                    holder,
                    ttl_ms: *ttl_ms,
                },
            ))
            .await
            .map(|reply| {
                let reply = reply.into_inner();
                (format!("{reply:?}"), reply.lease)
            }),
        LeaseCall::Renew { ttl_ms } => leases
            .renew(numbered(
                client,
                request,
                RenewRequest {
                    name,
                    holder,
                    ttl_ms: *ttl_ms,
                },
            ))
            .await
            .map(|reply| {
                let reply = reply.into_inner();
                (format!("{reply:?}"), reply.lease)
            }),
        LeaseCall::Release => leases
            .release(numbered(client, request, ReleaseRequest { name, holder }))
            .await
            .map(|reply| (format!("{:?}", reply.into_inner()), None)),
    };
    match reply {
        Ok((reply, granted)) => (Answer::Reply(reply), granted),
        Err(status) => {
            let reason = status
                .metadata()
                .get(certus_client::ERROR_REASON_KEY)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            // Without a node's reason, or with one that leaves the outcome open, the copy was
            // not answered.
            let open = matches!(
                reason.as_str(),
                "" | "no-leader" | "outcome-unknown" | "unavailable" | "timeout"
            );
            let answer = if open {
                Answer::Unanswered
            } else {
                Answer::Refused {
                    code: status.code() as i32,
                    reason,
                }
            };
            (answer, None)
        }
    }
}

/// **Copies answered alike** (exactly-once, the Raft dissertation §6.3): every copy of one
/// numbered request that the cluster answered with the request's outcome got the same answer;
/// once a copy was refused as `superseded`, no later copy was answered with an outcome (the
/// request can no longer take effect); every duplicate of an answered request got that answer
/// or `superseded`; and no copy changed the lease (a read right after copies of the latest
/// request finds the grant that request was answered with, or no lease).
fn copies_answered_alike(record: &DuplicateRecord) -> Verdict {
    let mut by_request: BTreeMap<u64, Vec<&Copy>> = BTreeMap::new();
    for copy in &record.copies {
        by_request.entry(copy.sequence).or_default().push(copy);
    }
    let mut problems = Vec::new();
    let mut duplicates = 0;
    let mut superseded = 0;
    for (sequence, copies) in &by_request {
        let mut outcome: Option<&Answer> = None;
        let mut superseded_at: Option<u64> = None;
        for copy in copies {
            duplicates += usize::from(copy.duplicate);
            match &copy.answer {
                Answer::Unanswered => {}
                Answer::Refused { reason, .. } if reason == "superseded" => {
                    superseded += 1;
                    superseded_at.get_or_insert(copy.sent_ms);
                }
                answer => {
                    if let Some(at_ms) = superseded_at {
                        problems.push(format!(
                            "request {sequence}: a copy sent at {} ms was answered {answer:?} \
                             after one sent at {at_ms} ms was refused as superseded",
                            copy.sent_ms
                        ));
                    }
                    match outcome {
                        None => outcome = Some(answer),
                        Some(first) if first != answer => problems.push(format!(
                            "request {sequence}: copies answered {first:?} and, sent at {} ms \
                             to node {}, {answer:?}",
                            copy.sent_ms, copy.node
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
    }
    problems.extend(record.changed_by_copies.iter().cloned());
    if problems.is_empty() {
        Verdict::pass(
            "copies-answered-alike",
            format!(
                "{} numbered requests, {duplicates} sent again ({superseded} copies refused as \
                 superseded), every request answered one way",
                record.requests.len()
            ),
        )
    } else {
        problems.truncate(5);
        Verdict::fail("copies-answered-alike", problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(sequence: u64, sent_ms: u64, answer: Answer) -> Copy {
        Copy {
            sequence,
            node: 1,
            sent_ms,
            duplicate: sent_ms > 0,
            answer,
        }
    }

    fn refused(reason: &str) -> Answer {
        Answer::Refused {
            code: 9,
            reason: reason.to_owned(),
        }
    }

    fn record(copies: Vec<Copy>) -> DuplicateRecord {
        DuplicateRecord {
            client: Some(1),
            requests: Vec::new(),
            copies,
            changed_by_copies: Vec::new(),
        }
    }

    #[test]
    fn copies_answered_alike_or_superseded_pass() {
        let fine = record(vec![
            copy(1, 0, Answer::Reply("created".into())),
            copy(1, 10, Answer::Unanswered),
            copy(1, 20, Answer::Reply("created".into())),
            copy(1, 30, refused("superseded")),
            copy(2, 0, refused("not-holder")),
            copy(2, 5, refused("not-holder")),
        ]);
        assert!(copies_answered_alike(&fine).passed);
    }

    #[test]
    fn a_copy_applied_again_or_after_superseded_fails() {
        let again = record(vec![
            copy(1, 0, Answer::Reply("created".into())),
            copy(1, 10, Answer::Reply("renewed".into())),
        ]);
        assert!(!copies_answered_alike(&again).passed);
        let late = record(vec![
            copy(1, 0, Answer::Unanswered),
            copy(1, 10, refused("superseded")),
            copy(1, 20, Answer::Reply("created".into())),
        ]);
        let verdict = copies_answered_alike(&late);
        assert!(!verdict.passed);
        assert!(verdict.detail.contains("superseded"), "{}", verdict.detail);
    }
}
