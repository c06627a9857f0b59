//! The node's bounds, named. Every queue, batch, message and wait has one.

use std::time::Duration;

/// Largest Raft transport message (append batches, snapshot chunks), in bytes.
pub const RAFT_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest client request or reply on the Leases and Admin services, in bytes.
pub const CLIENT_MESSAGE_BYTES_MAX: usize = 256 * 1024;
/// Largest chunk of an exported snapshot (`Admin/ExportSnapshot`), in bytes: a message of the
/// Admin service, so within [`CLIENT_MESSAGE_BYTES_MAX`] with room for the framing.
pub const SNAPSHOT_EXPORT_CHUNK_BYTES_MAX: usize = 192 * 1024;
const _: () = assert!(SNAPSHOT_EXPORT_CHUNK_BYTES_MAX + 1024 <= CLIENT_MESSAGE_BYTES_MAX);
/// Most CT entries an export reads from the local database for one chunk.
pub const SNAPSHOT_EXPORT_CT_ENTRIES_MAX: usize = 1024;
/// How long a follower waits for the leader to answer a forwarded request.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request waits for a leader to be elected before it is refused.
pub const LEADER_WAIT: Duration = Duration::from_secs(3);
/// How many times a request follows a leader change before it is refused.
pub const LEADER_HOPS_MAX: usize = 3;
/// How long a read waits for this node to apply up to the read index.
pub const READ_APPLY_WAIT: Duration = Duration::from_secs(5);
/// Commands waiting to be proposed; past this, writers wait (back-pressure).
pub const PROPOSER_QUEUE_MAX: usize = 16 * 1024;
/// Commands in one Raft entry.
pub const PROPOSAL_COMMANDS_MAX: usize = 1024;
/// Proposals appended but not yet applied, per leader: pipelining depth. One on purpose: the
/// proposal waiting for the slot absorbs every write that arrives meanwhile, and a Raft round
/// (three fsyncs, two AppendEntries, a thread hand-off per flush) costs far more CPU than the
/// commands in it, so fewer, larger entries serve more writes on the same cores. Measured on two
/// cores: 1 gives 10.7k writes/s at 64 clients and 3.4k pipeline cycles/s at 50 (25 writes per
/// entry); 2 gave 8.8k and 2.7k (16 writes per entry); 8 gave ~7.7k writes/s.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 1;
/// How long the writes of a proposal whose leader stepped down wait for openraft's answer (the
/// entry may still commit under the next leader) before they are told the outcome is unknown.
pub const STEPPED_DOWN_ANSWER_WAIT: Duration = Duration::from_secs(10);
/// Readers waiting for the next read barrier; past this, readers wait.
pub const READ_QUEUE_MAX: usize = 64 * 1024;
/// Entries a follower may lag behind the leader's commit index and still report ready.
pub const READY_APPLY_LAG_MAX: u64 = 1000;
/// How long a membership change may take (adding a learner waits for it to catch up).
pub const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a follower waits for the leader to answer a forwarded membership change: the
/// leader's own bound on the change, and [`FORWARD_TIMEOUT`] more for the way there and back, so
/// a change the leader still works on (an added learner catching up) is not cut short by the
/// forward and answered outcome-unknown while it goes on to succeed.
pub const FORWARDED_MEMBERSHIP_TIMEOUT: Duration =
    Duration::from_secs(MEMBERSHIP_CHANGE_TIMEOUT.as_secs() + FORWARD_TIMEOUT.as_secs());
/// How often a membership change made while the previous one is still committing tries again.
pub const MEMBERSHIP_IN_PROGRESS_RETRY: Duration = Duration::from_millis(50);
/// Largest request to the Pipelines service, in bytes: an enqueue or requeue carries up to two
/// 64 KiB JSON documents, a webhook URL and names.
pub const PIPELINE_REQUEST_BYTES_MAX: usize = 512 * 1024;
/// Largest reply of the Pipelines service, in bytes. A dequeue cannot be undone once applied, so
/// its reply must always fit: a full batch of 100 transactions, each with a state, an event and
/// a progress report of 64 KiB, is about 19.3 MiB. Clients raise their decoding limit to match.
pub const PIPELINE_REPLY_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Where a list of transactions is cut (after at least one), in encoded bytes; the rest is on
/// the next page.
pub const PIPELINE_LIST_REPLY_BYTES_MAX: usize = 4 * 1024 * 1024;
/// The longest a sessions `Wait` holds a request.
pub const SESSION_WAIT_MAX: Duration = Duration::from_secs(60);
/// The longest a long-poll sessions `Claim` may ask to wait (`wait_ms`); a longer wait is
/// refused (INVALID_ARGUMENT) rather than cut, so a worker learns its timeouts are wrong.
pub const SESSION_CLAIM_WAIT_MS_MAX: u64 = 60_000;
/// How long a waiting claim that came back empty — although this node's state showed a visible
/// session — holds off before it proposes again: another worker was first and this node has not
/// applied that yet, or the leader's clock is behind this node's. Without it a lagging follower
/// or a skewed clock would turn the wait into a loop of empty Raft writes.
pub const SESSION_CLAIM_RETRY_PAUSE: Duration = Duration::from_millis(10);
/// Most credit a session worker stream may have outstanding (sessions it may be pushed before it
/// grants more): ten full claims. A grant past it ends the stream with INVALID_ARGUMENT.
pub const SESSION_WORK_CREDIT_MAX: u32 = 1000;
/// Steps of one worker stream being applied at once; past it the node reads no further
/// messages until one is answered (HTTP/2 flow control holds the worker back).
pub const SESSION_WORK_STEPS_IN_FLIGHT_MAX: usize = 256;
/// Events (pushed sessions, step answers) a worker stream buffers for a worker that reads slowly;
/// past it the stream waits for the worker.
pub const SESSION_WORK_EVENTS_BUFFERED_MAX: usize = 64;
/// How long a worker stream waits after a claim failed (no leader, say) before it claims again.
pub const SESSION_WORK_CLAIM_ERROR_PAUSE: Duration = Duration::from_millis(200);
/// The longest a `GetState` long-poll holds a request.
pub const PIPELINE_WAIT_MAX: Duration = Duration::from_secs(60);
/// Notifications a completion stream reads from the state at a time: what it buffers at most
/// while the client takes them (gRPC flow control holds the rest back in the state).
pub const PIPELINE_STREAM_PAGE_MAX: usize = 256;
/// The longest a `Dequeue` long-poll holds a request, in milliseconds (longer is refused, so a
/// client learns the bound instead of returning early without knowing why).
pub const PIPELINE_DEQUEUE_WAIT_MS_MAX: u64 = 60_000;
/// A completion stream asked for positions sends one at most this often while it skips
/// notifications of other node groups (a busy cluster would otherwise send one per entry).
pub const PIPELINE_STREAM_POSITION_INTERVAL_MIN: Duration = Duration::from_millis(100);
/// A completion stream asked for positions sends one after this long without sending anything,
/// so an idle client knows the stream is alive and where it stands.
pub const PIPELINE_STREAM_HEARTBEAT: Duration = Duration::from_secs(5);
/// The most credit a `Work` stream's worker may hold unused: transactions the node may push
/// before the worker grants more.
pub const PIPELINE_WORK_CREDIT_MAX: u32 = 1024;
/// Steps one `Work` stream has proposed and not yet answered; past it the node reads no more
/// of the worker's messages until one is answered (HTTP/2 flow control holds the worker back).
pub const PIPELINE_WORK_STEPS_IN_FLIGHT_MAX: usize = 64;
/// Events (claims, step results) a `Work` stream holds for a worker that does not read them;
/// past it the stream claims nothing more and answers nothing more until the worker reads.
pub const PIPELINE_WORK_EVENTS_QUEUED_MAX: usize = 64;
/// Node groups a pipelines status lists at most.
pub const PIPELINE_STATUS_GROUPS_MAX: usize = 1000;
/// Webhook deliveries taken per round, all sent at once.
pub const WEBHOOK_DELIVERIES_CONCURRENT_MAX: u32 = 16;
/// The most of a webhook receiver's answer read: enough for an error message; the status
/// decides.
pub const WEBHOOK_RESPONSE_BYTES_MAX: usize = 64 * 1024;
/// The most of a webhook failure's reason kept (the state machine allows more; a notice should
/// stay readable).
pub const WEBHOOK_REASON_BYTES_MAX: usize = 256;

/// Longest service name a `grpc.health.v1.Health` request may carry, in bytes. The known names
/// are far shorter (`certus.v1.Leases`); a longer one is refused (INVALID_ARGUMENT) rather than
/// echoed back in an unknown-service message.
pub const HEALTH_SERVICE_NAME_BYTES_MAX: usize = 256;
/// Longest member address (`host:port`: `Admin/AddLearner`, `Admin/SetMemberAddress`, the
/// advertised addresses), in bytes; a longer one is refused without being echoed.
pub const MEMBER_ADDR_BYTES_MAX: usize = 256;
/// Longest host name in a member address, in bytes (RFC 1123's limit for a name in DNS).
pub const HOST_NAME_BYTES_MAX: usize = 253;
/// Longest label (between dots) of a host name, in bytes (RFC 1035).
pub const HOST_LABEL_BYTES_MAX: usize = 63;
/// Most entry bytes (leaf inputs and extra data, before base64) one HTTP get-entries answers;
/// the entries after the first that would pass it are left for the next request, as RFC 6962
/// §4.6 allows. Keeps one reply in the low megabytes whatever the entries' sizes (an entry may
/// be up to ~830 KiB; 1000 of them would be most of a gigabyte of JSON).
pub const CT_HTTP_GET_ENTRIES_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Most entries one get-entries answers; a client asks again for the rest (RFC 6962 §4.6
/// allows fewer than asked).
pub const GET_ENTRIES_MAX: u64 = 1000;
/// Largest add-chain body accepted, in bytes (ten 64 KiB certificates in base64, with room).
pub const ADD_CHAIN_BODY_BYTES_MAX: usize = 1024 * 1024;
/// Fetches from peers per CT round, each of at most
/// [`FETCH_BATCH`](crate::ct::peers::FETCH_BATCH) entries.
pub const CT_FETCH_ROUNDS_MAX: usize = 16;
/// How many times a submission is checked again against the local entry-key index when the
/// state forgot entries the node had not indexed yet (each check sees a grown tree).
pub const CT_DEDUPE_RECHECKS_MAX: usize = 3;
/// After a failed mirror round the master waits this long before reading the source again,
/// doubling with each further failure up to [`CT_MIRROR_RETRY_DELAY_MAX`]: a source that is down
/// or misbehaving is not hammered every round.
pub const CT_MIRROR_RETRY_DELAY_MIN: Duration = Duration::from_secs(1);
/// The longest wait between two mirror rounds after failures; see [`CT_MIRROR_RETRY_DELAY_MIN`].
pub const CT_MIRROR_RETRY_DELAY_MAX: Duration = Duration::from_secs(60);
/// Largest answer read from a mirror's source: a get-entries page of 1,024 entries of up to
/// ~830 KiB each would not fit, but real pages are a few MiB; past this the page is refused.
pub const CT_SOURCE_RESPONSE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Requests one client (one peer IP address) may have in flight on the gRPC server: arrived and
/// not yet answered (a long-poll counts while it waits). Past it: RESOURCE_EXHAUSTED,
/// `too-many-requests-in-flight`. Room for a pool of workers behind one address (the bench runs
/// 64 concurrent clients), while one client cannot take every proposer or read-barrier slot.
pub const CLIENT_REQUESTS_IN_FLIGHT_MAX: usize = 512;
/// Calls one client may have open on the gRPC server: from arrival until its response body ends,
/// so a server stream (`WatchCompletions`, `ExportArchive`, `Health/Watch`) counts for its whole
/// life. At least [`CLIENT_REQUESTS_IN_FLIGHT_MAX`]; the difference is what long-lived streams may
/// hold. Past it: RESOURCE_EXHAUSTED, `too-many-streams`.
pub const CLIENT_STREAMS_MAX: usize = 1024;
/// Requests per second one client may make on the gRPC server, sustained (a token bucket's refill
/// rate). A fifth of what a three-node cluster commits (~10k writes/s), so no single client can
/// starve the others. Past it: RESOURCE_EXHAUSTED, `rate-limited`.
pub const CLIENT_REQUESTS_PER_SECOND: u32 = 2000;
/// Requests one client may make at once after being idle (the token bucket's size): two seconds
/// at [`CLIENT_REQUESTS_PER_SECOND`], so a client that starts up or reconnects is not refused.
pub const CLIENT_REQUEST_BURST: u32 = 4000;
/// Clients (peer addresses) whose counts are kept at once. An idle client whose bucket is full
/// is forgotten (it would behave the same as a new one); past this many busy ones, a new client
/// is refused (RESOURCE_EXHAUSTED, `too-many-clients`). Bounds the layer's memory (~100 bytes a
/// client) against a flood of source addresses.
pub const CLIENTS_TRACKED_MAX: usize = 65_536;
/// HTTP/2 streams (calls) one gRPC connection may have open at once; a client past it waits for
/// one to end (HTTP/2 flow control), it is not refused. Bounds what one connection costs the
/// server, below [`CLIENT_STREAMS_MAX`] per address.
pub const GRPC_STREAMS_PER_CONNECTION_MAX: u32 = 1024;

/// How long a client has to finish the TLS handshake on an HTTPS listener.
pub const HTTPS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client has to finish the TLS handshake on the gRPC port.
pub const GRPC_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// gRPC connections through their TLS handshake and not yet taken by the server: past it, the
/// handshakes wait (the server takes them as fast as it can).
pub const GRPC_TLS_READY_QUEUE_MAX: usize = 64;
/// How long an HTTP listener waits for a request's headers by default (`[http]
/// header_read_timeout_ms`). The clock runs from the connection's start, and on a kept-alive
/// connection from the end of the previous answer, so it is also the idle keep-alive limit: a
/// client that sends half a request line, or nothing, is disconnected when it runs out.
pub const HTTP_HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// How long an HTTP listener waits for a request's whole body by default (`[http]
/// body_read_timeout_ms`), from the end of its headers. A route reading the body answers 408;
/// the connection is closed.
pub const HTTP_BODY_READ_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// The shortest HTTP timeout a node accepts (`[http]`'s `*_timeout_ms`).
pub const HTTP_TIMEOUT_MS_MIN: u64 = 100;
/// The longest HTTP timeout a node accepts (`[http]`'s `*_timeout_ms`).
pub const HTTP_TIMEOUT_MS_MAX: u64 = 600_000;
/// Connections one client (one peer IP address) may have open on each HTTP listener by default
/// (`[http] connections_per_client_max`); past it a new connection is closed at once. Room for a
/// TLS-terminating proxy's pool or a monitor's parallel fetches; raise it behind a proxy that
/// carries every client.
pub const HTTP_CONNECTIONS_PER_CLIENT_MAX_DEFAULT: usize = 256;
/// The most `[http] connections_per_client_max` may be set to.
pub const HTTP_CONNECTIONS_PER_CLIENT_LIMIT: usize = 65_536;

/// The shortest bearer token accepted, in bytes: 128 bits of base64url at least.
pub const BEARER_TOKEN_BYTES_MIN: usize = 22;
/// The longest `authorization` header value looked at, in bytes.
pub const AUTHORIZATION_BYTES_MAX: usize = 1024;
/// Client certificates whose identity is remembered, so that a connection's calls parse its
/// certificate once rather than on every call; past it the memory starts over.
pub const CERTIFICATE_IDENTITIES_CACHED_MAX: usize = 4096;

/// Most ids one `Clients/Register` draws when the ones it drew were taken (with 64-bit random
/// ids, more than one is already all but impossible).
pub const CLIENT_REGISTER_DRAWS_MAX: u32 = 3;

/// The smallest page cache a node's store accepts (`store.cache_mib`): below it sled thrashes on
/// its own metadata.
pub const STORE_CACHE_MIB_MIN: u64 = 8;
/// The smallest Raft log segment a node accepts (`raft.log_segment_bytes`): smaller ones only
/// multiply files and syncs.
pub const LOG_SEGMENT_BYTES_MIN: u64 = 4096;

/// The most entry bytes one GetEntries reply carries, under the client message limit.
pub const GET_ENTRIES_REPLY_BYTES_MAX: usize = CLIENT_MESSAGE_BYTES_MAX - 16 * 1024;

/// Most ACME challenges the validator fetches at once.
pub const ACME_VALIDATIONS_IN_FLIGHT_MAX: usize = 16;
/// Fetches of an ACME challenge before it is recorded as not served (a second apart).
pub const ACME_VALIDATION_ATTEMPTS_MAX: u32 = 3;
/// Most orders one page of an account's order list names (RFC 8555 §7.1.2.1).
pub const ACME_ORDERS_PAGE_MAX: usize = 100;
/// How long an ACME request waits for the cluster to elect a leader before it is answered 503
/// (ACME clients do not retry a server error, so the node rides out an election for them).
pub const ACME_CLUSTER_WAIT: Duration = Duration::from_secs(20);
