//! Exactly-once client sessions on real `certus serve` processes, spoken as raw gRPC through the
//! generated stubs — as a client in another language would — rather than through
//! `certus_client::Client`: `certus.v1.Clients/Register`, and the three numbered-request metadata
//! entries (`proto/certus/v1/clients.proto`) on `certus.v1.Leases/Acquire`.

mod support;

use std::time::Duration;

use certus_proto::v1::acquire_reply::How;
use certus_proto::v1::admin_client::AdminClient;
use certus_proto::v1::clients_client::ClientsClient;
use certus_proto::v1::leases_client::LeasesClient;
use certus_proto::v1::{
    AcquireReply, AcquireRequest, GetLeaseRequest, Lease, RegisterClientReply,
    RegisterClientRequest, StatusReply, StatusRequest,
};
use support::{Cluster, Tuning, eventually};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

const ELECTION: Duration = Duration::from_secs(15);

// The wire names, spelled out as a client in another language would (the test checks below that
// they are the ones `certus_proto` documents).
const CLIENT_ID: &str = "certus-client-id";
const CLIENT_SEQUENCE: &str = "certus-client-sequence";
const CLIENT_FIRST_OUTSTANDING: &str = "certus-client-first-outstanding";
const ERROR_REASON: &str = "certus-error";

/// Prints every node's log if the test fails while it is alive (the logs go with the cluster's
/// temporary directory).
struct LogsOnFailure<'a>(&'a Cluster);

impl Drop for LogsOnFailure<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for node in &self.0.nodes {
            let file = node.spec.data_dir.with_extension("log");
            let log = std::fs::read_to_string(&file)
                .unwrap_or_else(|error| format!("(cannot read {}: {error})", file.display()));
            eprintln!(
                "===== node {} ({}) =====\n{log}",
                node.spec.id,
                file.display()
            );
        }
    }
}

/// One channel per node, and who leads.
struct Nodes {
    leader_id: u64,
    leader: Channel,
    /// The two followers, with their ids.
    followers: Vec<(u64, Channel)>,
}

async fn channel(endpoint: &str) -> Channel {
    Channel::from_shared(format!("http://{endpoint}"))
        .expect("a valid endpoint URI")
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connect to {endpoint}: {error}"))
}

async fn status(channel: &Channel) -> Result<StatusReply, Status> {
    AdminClient::new(channel.clone())
        .status(StatusRequest {})
        .await
        .map(tonic::Response::into_inner)
}

impl Nodes {
    /// Waits (Admin/Status on every node) until all three agree on a leader that says it leads.
    async fn find(cluster: &Cluster) -> Nodes {
        let endpoints = cluster.endpoints();
        assert_eq!(endpoints.len(), 3, "three nodes run");
        let leader_id = eventually(
            ELECTION,
            "a leader that every node knows and that reports itself leader",
            || async {
                let mut leaders = Vec::new();
                for endpoint in &endpoints {
                    let channel = Channel::from_shared(format!("http://{endpoint}"))
                        .ok()?
                        .connect()
                        .await
                        .ok()?;
                    let reply = status(&channel).await.ok()?;
                    leaders.push((reply.id, reply.leader_id, reply.role));
                }
                let leader = leaders[0].1;
                let agreed = leader != 0 && leaders.iter().all(|(_, seen, _)| *seen == leader);
                let leads = leaders
                    .iter()
                    .any(|(id, _, role)| *id == leader && role == "leader");
                (agreed && leads).then_some(leader)
            },
        )
        .await;
        let mut leader = None;
        let mut followers = Vec::new();
        for node in &cluster.nodes {
            let channel = channel(&node.spec.grpc.to_string()).await;
            if node.spec.id == leader_id {
                leader = Some(channel);
            } else {
                followers.push((node.spec.id, channel));
            }
        }
        Nodes {
            leader_id,
            leader: leader.expect("the leader is one of the nodes"),
            followers,
        }
    }

    /// Fails the test if `follower` no longer follows the leader found at the start: a request
    /// sent to it was then forwarded, as the test means it to be.
    async fn assert_still_follows(&self, follower: usize, what: &str) {
        let (id, channel) = &self.followers[follower];
        let reply = status(channel).await.expect("Admin/Status of a follower");
        assert!(
            reply.role == "follower" && reply.leader_id == self.leader_id,
            "{what}: node {id} was meant to be a follower of node {} (so that the request is \
             forwarded), but it reports role {:?} with leader {}",
            self.leader_id,
            reply.role,
            reply.leader_id
        );
    }
}

/// An Acquire call that can be sent any number of times, byte for byte the same.
#[derive(Debug, Clone)]
struct Acquire {
    body: AcquireRequest,
    metadata: Vec<(&'static str, String)>,
}

impl Acquire {
    /// Without metadata: the unnumbered path.
    fn new(name: &str, holder: &str, ttl_ms: u64) -> Acquire {
        Acquire {
            body: AcquireRequest {
                name: name.to_owned(),
                holder: holder.to_owned(),
                ttl_ms,
            },
            metadata: Vec::new(),
        }
    }

    /// As request `sequence` of `client`, which still waits for `first_outstanding` and up.
    fn numbered(self, client: u64, sequence: u64, first_outstanding: u64) -> Acquire {
        self.with_metadata(&[
            (CLIENT_ID, client),
            (CLIENT_SEQUENCE, sequence),
            (CLIENT_FIRST_OUTSTANDING, first_outstanding),
        ])
    }

    fn with_metadata(mut self, entries: &[(&'static str, u64)]) -> Acquire {
        self.metadata
            .extend(entries.iter().map(|(key, value)| (*key, value.to_string())));
        self
    }

    fn request(&self) -> Request<AcquireRequest> {
        let mut request = Request::new(self.body.clone());
        for (key, value) in &self.metadata {
            request
                .metadata_mut()
                .insert(*key, value.parse().expect("an ASCII metadata value"));
        }
        request
    }

    async fn send(&self, channel: &Channel) -> Result<AcquireReply, Status> {
        LeasesClient::new(channel.clone())
            .acquire(self.request())
            .await
            .map(tonic::Response::into_inner)
    }
}

async fn get_lease(channel: &Channel, name: &str) -> Result<Lease, Status> {
    LeasesClient::new(channel.clone())
        .get(GetLeaseRequest {
            name: name.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn register(channel: &Channel) -> RegisterClientReply {
    ClientsClient::new(channel.clone())
        .register(RegisterClientRequest {})
        .await
        .unwrap_or_else(|status| panic!("Clients/Register: {status:?}"))
        .into_inner()
}

fn reason(status: &Status) -> Option<&str> {
    status.metadata().get(ERROR_REASON)?.to_str().ok()
}

/// Asserts that `result` is a refusal with `code` and the `certus-error` reason `expected`.
fn assert_refused<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: Code,
    expected: &str,
    what: &str,
) {
    let status = match result {
        Ok(reply) => panic!("{what}: expected {code:?} ({expected}), but it succeeded: {reply:?}"),
        Err(status) => status,
    };
    assert_eq!(
        (status.code(), reason(&status)),
        (code, Some(expected)),
        "{what}: wrong code or {ERROR_REASON} reason; the status was {status:?}"
    );
}

fn lease_of(reply: &AcquireReply, what: &str) -> Lease {
    reply
        .lease
        .clone()
        .unwrap_or_else(|| panic!("{what}: an acquire reply carries the lease: {reply:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbered_writes_apply_once_and_never_after_the_client_moved_past_them() {
    assert_eq!(
        [CLIENT_ID, CLIENT_SEQUENCE, CLIENT_FIRST_OUTSTANDING],
        [
            certus_proto::CLIENT_ID_METADATA,
            certus_proto::CLIENT_SEQUENCE_METADATA,
            certus_proto::CLIENT_FIRST_OUTSTANDING_METADATA,
        ],
        "the metadata names of proto/certus/v1/clients.proto"
    );
    // No periodic Tick entries: the log grows only by what the test proposes.
    let tuning = Tuning {
        tick_interval_ms: 3_600_000,
        ..Tuning::default()
    };
    let cluster = Cluster::start(3, tuning);
    let _logs = LogsOnFailure(&cluster);
    let nodes = Nodes::find(&cluster).await;
    let leader = &nodes.leader;
    let (follower_a, follower_b) = (&nodes.followers[0].1, &nodes.followers[1].1);

    // 1. Register (on a follower: forwarded to the leader).
    let session = register(follower_a).await;
    println!("registered {session:?}; node {} leads", nodes.leader_id);
    assert_ne!(
        session.client_id, 0,
        "Register returns a usable id, never 0"
    );
    assert_ne!(session.idle_ms, 0, "Register says how long a session lives");
    assert_ne!(
        session.outstanding_max, 0,
        "Register says how far ahead a request may be numbered"
    );
    let other = register(leader).await;
    assert_ne!(
        other.client_id, session.client_id,
        "two registrations open two sessions"
    );
    let client = session.client_id;

    // 2. A delayed duplicate changes nothing: request 1 goes through a follower (forwarded),
    // then identical copies arrive at the leader and at the other follower.
    let first_request = Acquire::new("lease-L", "holder-H", 5_000).numbered(client, 1, 1);
    let first = first_request
        .send(follower_a)
        .await
        .unwrap_or_else(|status| panic!("request 1 (acquire L via a follower): {status:?}"));
    nodes.assert_still_follows(0, "request 1").await;
    assert_eq!(
        first.how(),
        How::Created,
        "request 1 creates lease L: {first:?}"
    );
    let granted = lease_of(&first, "request 1");
    assert_eq!(
        (
            granted.name.as_str(),
            granted.holder.as_str(),
            granted.ttl_ms
        ),
        ("lease-L", "holder-H", 5_000),
        "request 1 grants what it asked for: {granted:?}"
    );
    assert_ne!(granted.fencing_token, 0, "a grant has a fencing token");
    for (node, channel) in [("the leader", leader), ("the other follower", follower_b)] {
        let copy = first_request.send(channel).await.unwrap_or_else(|status| {
            panic!("a copy of request 1 sent to {node} must get request 1's answer: {status:?}")
        });
        assert_eq!(
            copy.how(),
            How::Created,
            "a copy of request 1 sent to {node} is answered CREATED (request 1's answer), not \
             applied again (RENEWED): {copy:?}"
        );
        assert_eq!(
            copy, first,
            "a copy of request 1 sent to {node} gets request 1's answer unchanged (same token, \
             same expiry)"
        );
    }
    let stored = get_lease(follower_b, "lease-L")
        .await
        .unwrap_or_else(|status| panic!("Leases/Get L after the copies: {status:?}"));
    assert_eq!(
        stored, granted,
        "lease L is as request 1 granted it: the copies renewed nothing"
    );

    // 3. The scenario: request 2 (a short grant) is lost in the network; the client
    // gives up on it and sends request 3 (a long grant), acknowledging everything below 3. Then
    // request 2 arrives: it must not shorten the lease request 3 granted.
    let lost = Acquire::new("lease-L2", "holder-H", 600).numbered(client, 2, 2);
    let later = Acquire::new("lease-L2", "holder-H", 20_000).numbered(client, 3, 3);
    let third = later
        .send(follower_a)
        .await
        .unwrap_or_else(|status| panic!("request 3 (acquire L2 for 20 s): {status:?}"));
    assert_eq!(
        third.how(),
        How::Created,
        "request 3 creates lease L2: {third:?}"
    );
    let long_grant = lease_of(&third, "request 3");
    assert_eq!(
        long_grant.ttl_ms, 20_000,
        "request 3's grant: {long_grant:?}"
    );
    assert!(
        long_grant.fencing_token > granted.fencing_token,
        "a later grant has a larger fencing token: {long_grant:?} after {granted:?}"
    );
    assert_refused(
        lost.send(follower_b).await,
        Code::FailedPrecondition,
        "superseded",
        "request 2 arriving after request 3 (first outstanding 3)",
    );
    let stored = get_lease(leader, "lease-L2")
        .await
        .unwrap_or_else(|status| panic!("Leases/Get L2 after the late request 2: {status:?}"));
    assert_eq!(
        stored.expires_at_ms, long_grant.expires_at_ms,
        "lease L2 keeps the expiry of request 3's 20 s grant; the late request 2 (600 ms) must \
         not shorten it (stored {stored:?}, request 3 granted {long_grant:?})"
    );
    assert_eq!(
        stored, long_grant,
        "lease L2 is exactly as request 3 granted it"
    );
    // The same holds for the old copy of request 1: the client moved past it too.
    assert_refused(
        first_request.send(leader).await,
        Code::FailedPrecondition,
        "superseded",
        "a copy of request 1 arriving after request 3 (first outstanding 3)",
    );
    let stored = get_lease(leader, "lease-L")
        .await
        .unwrap_or_else(|status| panic!("Leases/Get L after the late copy: {status:?}"));
    assert_eq!(
        stored, granted,
        "lease L is unchanged by the superseded copy"
    );

    // 4. Bad metadata changes nothing.
    let before = status(leader).await.expect("Admin/Status of the leader");
    let partial =
        Acquire::new("lease-partial", "holder-H", 5_000).with_metadata(&[(CLIENT_ID, client)]);
    assert_refused(
        partial.send(follower_a).await,
        Code::InvalidArgument,
        "invalid-argument",
        "an acquire carrying only certus-client-id",
    );
    let after = status(leader).await.expect("Admin/Status of the leader");
    assert_eq!(
        after.last_log_index, before.last_log_index,
        "malformed metadata is refused before anything is proposed"
    );
    assert_refused(
        get_lease(leader, "lease-partial").await,
        Code::NotFound,
        "unknown-lease",
        "the lease named by the acquire with partial metadata",
    );
    let unknown_client = 12_345;
    assert!(
        ![session.client_id, other.client_id].contains(&unknown_client),
        "client {unknown_client} must not be registered for this check"
    );
    let stranger = Acquire::new("lease-stranger", "holder-H", 5_000).numbered(unknown_client, 1, 1);
    assert_refused(
        stranger.send(follower_b).await,
        Code::NotFound,
        "unknown-client",
        "an acquire numbered by an unregistered client",
    );
    assert_refused(
        get_lease(leader, "lease-stranger").await,
        Code::NotFound,
        "unknown-lease",
        "the lease named by the unregistered client's acquire",
    );

    // 5. Without metadata an acquire is applied as it arrives, once per delivery.
    let plain = Acquire::new("lease-plain", "holder-H", 5_000);
    let created = plain
        .send(follower_a)
        .await
        .unwrap_or_else(|status| panic!("an unnumbered acquire: {status:?}"));
    assert_eq!(
        created.how(),
        How::Created,
        "an unnumbered acquire creates its lease: {created:?}"
    );
    let plain_grant = lease_of(&created, "unnumbered acquire");
    assert!(
        plain_grant.fencing_token > long_grant.fencing_token,
        "a later grant has a larger fencing token: {plain_grant:?} after {long_grant:?}"
    );
    let again = plain
        .send(leader)
        .await
        .unwrap_or_else(|status| panic!("the unnumbered acquire again: {status:?}"));
    assert_eq!(
        again.how(),
        How::Renewed,
        "a second delivery of an unnumbered acquire is applied again (RENEWED): {again:?}"
    );
    assert_eq!(
        lease_of(&again, "unnumbered acquire again").fencing_token,
        plain_grant.fencing_token,
        "a renewal keeps the fencing token"
    );
}
