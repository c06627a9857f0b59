//! Per-client bounds on the gRPC server: requests in flight, open calls (streams), and a request
//! rate.
//!
//! A client is a peer IP address (every connection from one address shares its counts), read
//! from the `TcpConnectInfo` tonic puts in each request's extensions ([`tcp_peer`]); a server
//! whose connections carry another connect-info type (tonic's TLS wraps it in `TlsConnectInfo`)
//! names how to read the address with [`ClientLimitsLayer::keyed_by`]. A request without an
//! address counts under one shared "unknown" client. For each client the layer keeps:
//!
//! - **requests in flight**: from a call's arrival until the service has answered it (its
//!   response headers); a long-poll counts while it waits;
//! - **open calls**: from arrival until the response body ends (its trailers, or the body is
//!   dropped because the client went away), so a server stream counts for its whole life — this
//!   is what bounds the streams a client holds open;
//! - **a token bucket**: each call takes a token; tokens come back at a steady rate up to the
//!   bucket's size.
//!
//! A call that would pass any of them is answered at once with `RESOURCE_EXHAUSTED` and a
//! `certus-error` reason (`too-many-requests-in-flight`, `too-many-streams`, `rate-limited`,
//! `too-many-clients`), without calling the service: nothing is read, proposed or changed.
//! Calls of the peers' Raft transport (`/certus.v1.Raft/…`) are not counted: a follower forwards
//! every write of its own clients to the leader from its one address.
//!
//! Time is the tokio runtime's clock ([`tokio::time::Instant`]), so a test with a paused clock
//! controls it. The counts ([`Limiter`]) are plain code; only the tower layer needs real sockets
//! and is compiled out under the simulation, which has no `TcpConnectInfo`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tonic::{Code, Status};

use crate::errors::status;
use crate::limits::{
    CLIENT_REQUEST_BURST, CLIENT_REQUESTS_IN_FLIGHT_MAX, CLIENT_REQUESTS_PER_SECOND,
    CLIENT_STREAMS_MAX, CLIENTS_TRACKED_MAX,
};

/// Request paths no client limit applies to: the peers' Raft transport. A follower forwards every
/// write of its own clients to the leader from its one address, so counting it as one client
/// would throttle the whole cluster's writes.
pub const UNLIMITED_PATH_PREFIXES: &[&str] = &["/certus.v1.Raft/"];

/// How often, at most, the table of clients is swept for idle ones when it is full.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The bounds one client is held to. [`ClientLimits::default`] is the node's named limits; a
/// node's `[client_limits]` table changes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientLimits {
    /// Hold clients to these limits at all. Off for benchmarks, where every client shares one
    /// loopback address.
    pub enabled: bool,
    /// Requests one client may have in flight (arrived, not answered).
    pub requests_in_flight_max: usize,
    /// Calls one client may have open (arrived, response body not ended).
    pub streams_max: usize,
    /// Tokens (requests) a client gets back per second.
    pub requests_per_second: u32,
    /// The most tokens a client's bucket holds: the largest burst after idling.
    pub burst: u32,
    /// Clients whose counts are kept at once.
    pub clients_max: usize,
}

impl Default for ClientLimits {
    fn default() -> ClientLimits {
        ClientLimits {
            enabled: true,
            requests_in_flight_max: CLIENT_REQUESTS_IN_FLIGHT_MAX,
            streams_max: CLIENT_STREAMS_MAX,
            requests_per_second: CLIENT_REQUESTS_PER_SECOND,
            burst: CLIENT_REQUEST_BURST,
            clients_max: CLIENTS_TRACKED_MAX,
        }
    }
}

/// Who a request counts against: its peer's IP address, `None` when the transport gave none.
pub type ClientKey = Option<IpAddr>;

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The client has as many requests in flight as it may.
    InFlight {
        /// The limit.
        max: usize,
    },
    /// The client has as many calls open as it may.
    Streams {
        /// The limit.
        max: usize,
    },
    /// The client's token bucket is empty.
    Rate {
        /// The sustained rate, requests per second.
        per_second: u32,
        /// When the next token is back.
        retry_after: Duration,
    },
    /// As many clients as are tracked are busy.
    Clients {
        /// The limit.
        max: usize,
    },
}

impl Refusal {
    /// The stable reason in `certus-error`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::InFlight { .. } => "too-many-requests-in-flight",
            Refusal::Streams { .. } => "too-many-streams",
            Refusal::Rate { .. } => "rate-limited",
            Refusal::Clients { .. } => "too-many-clients",
        }
    }

    /// The status a client of `key` is answered with: RESOURCE_EXHAUSTED, the reason, and a
    /// message saying which limit and when to come back.
    pub fn status(&self, key: ClientKey) -> Status {
        let client = key.map_or_else(|| "this client".to_owned(), |ip| format!("client {ip}"));
        let message = match self {
            Refusal::InFlight { max } => format!(
                "{client} has {max} requests in flight, the most one client may; retry once one \
                 is answered"
            ),
            Refusal::Streams { max } => format!(
                "{client} has {max} calls open (streams included), the most one client may; \
                 close a stream or retry once a call ends"
            ),
            Refusal::Rate {
                per_second,
                retry_after,
            } => format!(
                "{client} sent requests faster than {per_second} per second; retry in {} ms",
                retry_after.as_millis().max(1)
            ),
            Refusal::Clients { max } => format!(
                "the node is serving {max} clients, the most it keeps count of; retry shortly"
            ),
        };
        status(Code::ResourceExhausted, self.reason(), message)
    }
}

/// A token, in the bucket's unit: a millionth of a token, so a refill is exact to a
/// millionth whatever the rate.
const TOKEN: u64 = 1_000_000;

/// One client's counts.
#[derive(Debug, Clone, Copy)]
struct Counts {
    in_flight: usize,
    open: usize,
    /// Tokens in the bucket, in millionths.
    tokens: u64,
    /// When `tokens` was last brought up to date.
    refilled: Instant,
}

impl Counts {
    fn new(now: Instant, limits: &ClientLimits) -> Counts {
        Counts {
            in_flight: 0,
            open: 0,
            tokens: full(limits),
            refilled: now,
        }
    }

    fn refill(&mut self, now: Instant, limits: &ClientLimits) {
        let elapsed = now.saturating_duration_since(self.refilled).as_nanos();
        // Millionths of a token per nanosecond is the rate per second / 1000.
        let gained = elapsed.saturating_mul(u128::from(limits.requests_per_second)) / 1000;
        let tokens = u128::from(self.tokens).saturating_add(gained);
        self.tokens = u64::try_from(tokens).unwrap_or(u64::MAX).min(full(limits));
        self.refilled = self.refilled.max(now);
    }

    /// How long until the bucket holds a whole token again.
    fn next_token_in(&self, limits: &ClientLimits) -> Duration {
        let missing = TOKEN.saturating_sub(self.tokens);
        let per_second = u64::from(limits.requests_per_second.max(1));
        Duration::from_nanos((missing.saturating_mul(1000)).div_ceil(per_second))
    }

    /// Nothing open, and a full bucket: forgetting it changes nothing.
    fn forgettable(&mut self, now: Instant, limits: &ClientLimits) -> bool {
        if self.in_flight > 0 || self.open > 0 {
            return false;
        }
        self.refill(now, limits);
        self.tokens >= full(limits)
    }
}

/// A full bucket, in millionths of a token.
fn full(limits: &ClientLimits) -> u64 {
    u64::from(limits.burst).saturating_mul(TOKEN)
}

/// What is counted for one admitted call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The call is in flight (until answered).
    InFlight,
    /// The call is open (until its response body ends).
    Open,
}

/// The counts of every client, behind one lock.
#[derive(Debug)]
pub struct Limiter {
    state: Mutex<Table>,
}

#[derive(Debug)]
struct Table {
    /// The bounds in force: a reload replaces them ([`Limiter::set_limits`]).
    limits: ClientLimits,
    clients: BTreeMap<ClientKey, Counts>,
    last_sweep: Option<Instant>,
}

impl Limiter {
    /// A limiter holding every client to `limits`.
    pub fn new(limits: ClientLimits) -> Limiter {
        Limiter {
            state: Mutex::new(Table {
                limits,
                clients: BTreeMap::new(),
                last_sweep: None,
            }),
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> ClientLimits {
        self.table().limits
    }

    /// Holds clients to `limits` from now on. What clients have open stays counted; a bucket
    /// fuller than the new burst is cut down to it at its next call.
    pub fn set_limits(&self, limits: ClientLimits) {
        self.table().limits = limits;
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a call of `key` at `now`: takes a token and counts it in flight and open (release
    /// each with [`Limiter::release`]); or refuses it, counting nothing.
    pub fn admit(&self, key: ClientKey, now: Instant) -> Result<(), Refusal> {
        let mut table = self.table();
        let limits = table.limits;
        if !table.clients.contains_key(&key) && table.clients.len() >= limits.clients_max {
            let due = table
                .last_sweep
                .is_none_or(|last| now.saturating_duration_since(last) >= SWEEP_INTERVAL);
            if due {
                table.last_sweep = Some(now);
                table
                    .clients
                    .retain(|_, counts| !counts.forgettable(now, &limits));
            }
            if table.clients.len() >= limits.clients_max {
                return Err(Refusal::Clients {
                    max: limits.clients_max,
                });
            }
        }
        let counts = table
            .clients
            .entry(key)
            .or_insert_with(|| Counts::new(now, &limits));
        counts.refill(now, &limits);
        let refusal = if counts.in_flight >= limits.requests_in_flight_max {
            Some(Refusal::InFlight {
                max: limits.requests_in_flight_max,
            })
        } else if counts.open >= limits.streams_max {
            Some(Refusal::Streams {
                max: limits.streams_max,
            })
        } else if counts.tokens < TOKEN {
            Some(Refusal::Rate {
                per_second: limits.requests_per_second,
                retry_after: counts.next_token_in(&limits),
            })
        } else {
            None
        };
        if let Some(refusal) = refusal {
            // A client seen for the first time and refused (a limit of 0) leaves nothing behind.
            if counts.forgettable(now, &limits) {
                table.clients.remove(&key);
            }
            return Err(refusal);
        }
        counts.tokens -= TOKEN;
        counts.in_flight += 1;
        counts.open += 1;
        Ok(())
    }

    /// Ends what `slot` counts for one admitted call of `key`. The client is forgotten once
    /// nothing of it is open and its bucket is full again.
    pub fn release(&self, key: ClientKey, slot: Slot, now: Instant) {
        let mut table = self.table();
        let limits = table.limits;
        let Some(counts) = table.clients.get_mut(&key) else {
            return;
        };
        match slot {
            Slot::InFlight => counts.in_flight = counts.in_flight.saturating_sub(1),
            Slot::Open => counts.open = counts.open.saturating_sub(1),
        }
        if counts.forgettable(now, &limits) {
            table.clients.remove(&key);
        }
    }

    /// `(in flight, open)` for `key`, if it is counted.
    pub fn counts(&self, key: ClientKey) -> Option<(usize, usize)> {
        self.table()
            .clients
            .get(&key)
            .map(|counts| (counts.in_flight, counts.open))
    }

    /// How many clients are counted.
    pub fn clients(&self) -> usize {
        self.table().clients.len()
    }
}

#[cfg(not(madsim))]
pub use layer::{
    ClientLimitsLayer, ClientLimitsService, KeyFn, LimitedBody, tcp_peer, tls_or_tcp_peer,
};

/// The tower layer: real sockets only (the simulation's transport has no `TcpConnectInfo`).
#[cfg(not(madsim))]
mod layer {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use http_body::{Body, Frame, SizeHint};
    use tokio::time::Instant;
    use tonic::transport::server::TcpConnectInfo;

    use super::{ClientKey, ClientLimits, Limiter, Slot, UNLIMITED_PATH_PREFIXES};

    /// How a request's client is found in its extensions.
    pub type KeyFn = fn(&http::Extensions) -> ClientKey;

    /// The peer's IP address from tonic's `TcpConnectInfo` (a plain TCP listener).
    pub fn tcp_peer(extensions: &http::Extensions) -> ClientKey {
        extensions
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .map(|addr| addr.ip())
    }

    /// The peer's IP address over TLS (tonic's `TlsConnectInfo`) or plain TCP.
    pub fn tls_or_tcp_peer(extensions: &http::Extensions) -> ClientKey {
        use tonic::transport::server::TlsConnectInfo;
        extensions
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .map(TlsConnectInfo::get_ref)
            .and_then(TcpConnectInfo::remote_addr)
            .map(|addr| addr.ip())
            .or_else(|| tcp_peer(extensions))
    }

    /// Holds every client of the gRPC services it wraps to [`ClientLimits`]. Put it inside the
    /// request-metrics layer, so that refusals are counted (as `RESOURCE_EXHAUSTED`).
    #[derive(Debug, Clone)]
    pub struct ClientLimitsLayer {
        limiter: Arc<Limiter>,
        key: KeyFn,
    }

    impl ClientLimitsLayer {
        /// A layer holding each client to `limits` (the node's named limits:
        /// `ClientLimits::default()`), clients keyed by [`tcp_peer`].
        pub fn new(limits: ClientLimits) -> ClientLimitsLayer {
            ClientLimitsLayer {
                limiter: Arc::new(Limiter::new(limits)),
                key: tcp_peer,
            }
        }

        /// A layer holding each client to the limits of `limiter` (shared: a reload changes
        /// them), clients keyed by [`tcp_peer`].
        pub fn sharing(limiter: Arc<Limiter>) -> ClientLimitsLayer {
            ClientLimitsLayer {
                limiter,
                key: tcp_peer,
            }
        }

        /// The same layer, finding each request's client with `key` instead.
        pub fn keyed_by(self, key: KeyFn) -> ClientLimitsLayer {
            ClientLimitsLayer { key, ..self }
        }

        /// The counts, shared by every service this layer made.
        pub fn limiter(&self) -> &Arc<Limiter> {
            &self.limiter
        }
    }

    impl<S> tower_layer::Layer<S> for ClientLimitsLayer {
        type Service = ClientLimitsService<S>;

        fn layer(&self, inner: S) -> ClientLimitsService<S> {
            ClientLimitsService {
                inner,
                limiter: Arc::clone(&self.limiter),
                key: self.key,
            }
        }
    }

    /// The service [`ClientLimitsLayer`] makes.
    #[derive(Debug, Clone)]
    pub struct ClientLimitsService<S> {
        inner: S,
        limiter: Arc<Limiter>,
        key: KeyFn,
    }

    type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

    /// One admitted call's count, given back when dropped.
    #[derive(Debug)]
    struct Held {
        limiter: Arc<Limiter>,
        key: ClientKey,
        slot: Slot,
    }

    impl Drop for Held {
        fn drop(&mut self) {
            self.limiter.release(self.key, self.slot, Instant::now());
        }
    }

    impl<S, RequestBody, ResponseBody> tower_service::Service<http::Request<RequestBody>>
        for ClientLimitsService<S>
    where
        S: tower_service::Service<
                http::Request<RequestBody>,
                Response = http::Response<ResponseBody>,
            >,
        S::Future: Send + 'static,
        S::Error: 'static,
        ResponseBody: Send + 'static,
    {
        type Response = http::Response<LimitedBody<ResponseBody>>;
        type Error = S::Error;
        type Future = BoxFuture<Self::Response, S::Error>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: http::Request<RequestBody>) -> Self::Future {
            let path = request.uri().path();
            // Peers (an identity with the node role, set by the authorization layer outside
            // this one) are the cluster's own traffic: forwarded reads and entry fetches.
            let from_a_peer = request
                .extensions()
                .get::<crate::edge::security::Identity>()
                .is_some_and(|identity| {
                    identity.roles.contains(&crate::edge::security::Role::Node)
                });
            if !self.limiter.limits().enabled
                || from_a_peer
                || UNLIMITED_PATH_PREFIXES
                    .iter()
                    .any(|prefix| path.starts_with(prefix))
            {
                let response = self.inner.call(request);
                return Box::pin(async move {
                    Ok(response.await?.map(|body| LimitedBody {
                        inner: Some(body),
                        open: None,
                    }))
                });
            }
            let key = (self.key)(request.extensions());
            if let Err(refusal) = self.limiter.admit(key, Instant::now()) {
                let refused = refusal.status(key).into_http::<LimitedBody<ResponseBody>>();
                return Box::pin(async move { Ok(refused) });
            }
            let held = |slot| Held {
                limiter: Arc::clone(&self.limiter),
                key,
                slot,
            };
            let (in_flight, open) = (held(Slot::InFlight), held(Slot::Open));
            let response = self.inner.call(request);
            Box::pin(async move {
                let response = response.await;
                drop(in_flight);
                Ok(response?.map(|body| LimitedBody {
                    inner: Some(body),
                    open: Some(open),
                }))
            })
        }
    }

    /// A response body that keeps its call counted as open until it ends (its last frame, an
    /// error, or being dropped). The default is an empty body: a refusal's (trailers-only)
    /// answer.
    #[derive(Debug)]
    pub struct LimitedBody<B> {
        inner: Option<B>,
        open: Option<Held>,
    }

    impl<B> Default for LimitedBody<B> {
        fn default() -> LimitedBody<B> {
            LimitedBody {
                inner: None,
                open: None,
            }
        }
    }

    impl<B: Body + Unpin> Body for LimitedBody<B> {
        type Data = B::Data;
        type Error = B::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
            let Some(inner) = self.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let polled = Pin::new(inner).poll_frame(cx);
            let ended = match &polled {
                Poll::Ready(None | Some(Err(_))) => true,
                Poll::Ready(Some(Ok(frame))) => frame.is_trailers(),
                Poll::Pending => false,
            };
            if ended {
                self.open = None;
            }
            polled
        }

        fn is_end_stream(&self) -> bool {
            self.inner.as_ref().is_none_or(Body::is_end_stream)
        }

        fn size_hint(&self) -> SizeHint {
            self.inner
                .as_ref()
                .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(in_flight: usize, streams: usize, per_second: u32, burst: u32) -> ClientLimits {
        ClientLimits {
            enabled: true,
            requests_in_flight_max: in_flight,
            streams_max: streams,
            requests_per_second: per_second,
            burst,
            clients_max: 16,
        }
    }

    fn ip(last: u8) -> ClientKey {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn the_defaults_are_the_named_limits_and_streams_are_at_least_requests_in_flight() {
        let defaults = ClientLimits::default();
        assert_eq!(
            defaults.requests_in_flight_max,
            CLIENT_REQUESTS_IN_FLIGHT_MAX
        );
        assert_eq!(defaults.streams_max, CLIENT_STREAMS_MAX);
        assert_eq!(defaults.requests_per_second, CLIENT_REQUESTS_PER_SECOND);
        assert_eq!(defaults.burst, CLIENT_REQUEST_BURST);
        assert_eq!(defaults.clients_max, CLIENTS_TRACKED_MAX);
        const {
            assert!(CLIENT_STREAMS_MAX >= CLIENT_REQUESTS_IN_FLIGHT_MAX);
            assert!(CLIENT_REQUEST_BURST >= CLIENT_REQUESTS_PER_SECOND);
        }
    }

    #[test]
    fn the_bucket_refills_at_its_rate_up_to_its_size() {
        let limiter = Limiter::new(limits(100, 100, 10, 3));
        let t0 = Instant::now();
        let take = |at: Instant| {
            let admitted = limiter.admit(ip(1), at);
            if admitted.is_ok() {
                limiter.release(ip(1), Slot::InFlight, at);
                limiter.release(ip(1), Slot::Open, at);
            }
            admitted
        };
        for _ in 0..3 {
            take(t0).expect("within the burst");
        }
        match take(t0) {
            Err(Refusal::Rate {
                per_second: 10,
                retry_after,
            }) => assert_eq!(retry_after, Duration::from_millis(100)),
            other => panic!("the fourth at once is refused by rate, not {other:?}"),
        }
        // Another client has its own bucket.
        limiter.admit(ip(2), t0).expect("another client");
        // A tenth of a second brings one token back, and only one.
        let later = t0 + Duration::from_millis(100);
        take(later).expect("one token came back");
        assert!(matches!(take(later), Err(Refusal::Rate { .. })));
        // An idle minute fills the bucket to its size, not beyond.
        let much_later = later + Duration::from_secs(60);
        for _ in 0..3 {
            take(much_later).expect("a full bucket");
        }
        assert!(matches!(take(much_later), Err(Refusal::Rate { .. })));
    }

    #[test]
    fn in_flight_and_open_calls_are_bounded_and_freed_by_their_own_ends() {
        let limiter = Limiter::new(limits(2, 3, 1000, 1000));
        let now = Instant::now();
        limiter.admit(ip(1), now).expect("first");
        limiter.admit(ip(1), now).expect("second");
        assert_eq!(
            limiter.admit(ip(1), now),
            Err(Refusal::InFlight { max: 2 }),
            "two in flight"
        );
        assert_eq!(
            limiter.counts(ip(1)),
            Some((2, 2)),
            "a refusal counts nothing"
        );
        // The first is answered: its stream stays open.
        limiter.release(ip(1), Slot::InFlight, now);
        limiter
            .admit(ip(1), now)
            .expect("a slot in flight was freed");
        assert_eq!(limiter.counts(ip(1)), Some((2, 3)));
        limiter.release(ip(1), Slot::InFlight, now);
        assert_eq!(
            limiter.admit(ip(1), now),
            Err(Refusal::Streams { max: 3 }),
            "one in flight, but three open"
        );
        limiter.release(ip(1), Slot::Open, now);
        limiter.admit(ip(1), now).expect("a stream ended");
    }

    #[test]
    fn an_idle_client_with_a_full_bucket_is_forgotten_and_the_table_is_bounded() {
        let limiter = Limiter::new(ClientLimits {
            clients_max: 2,
            ..limits(10, 10, 10, 10)
        });
        let t0 = Instant::now();
        limiter.admit(ip(1), t0).expect("client 1");
        limiter.admit(ip(2), t0).expect("client 2");
        assert_eq!(
            limiter.admit(ip(3), t0),
            Err(Refusal::Clients { max: 2 }),
            "two busy clients fill the table"
        );
        assert_eq!(limiter.clients(), 2);
        // Client 1 finishes; its bucket is one token short until a tenth of a second passes.
        limiter.release(ip(1), Slot::InFlight, t0);
        limiter.release(ip(1), Slot::Open, t0);
        assert_eq!(limiter.counts(ip(1)), Some((0, 0)), "kept while refilling");
        let later = t0 + SWEEP_INTERVAL;
        limiter.admit(ip(3), later).expect("client 1 was swept");
        assert_eq!(limiter.counts(ip(1)), None);
        // A client forgotten on its last release.
        limiter.release(ip(3), Slot::InFlight, later);
        limiter.release(ip(3), Slot::Open, later + Duration::from_secs(1));
        assert_eq!(limiter.counts(ip(3)), None);
    }

    #[test]
    fn refusals_are_resource_exhausted_with_a_reason_and_a_message() {
        let cases = [
            (Refusal::InFlight { max: 5 }, "too-many-requests-in-flight"),
            (Refusal::Streams { max: 5 }, "too-many-streams"),
            (
                Refusal::Rate {
                    per_second: 5,
                    retry_after: Duration::from_millis(200),
                },
                "rate-limited",
            ),
            (Refusal::Clients { max: 5 }, "too-many-clients"),
        ];
        for (refusal, reason) in cases {
            let status = refusal.status(ip(9));
            assert_eq!(status.code(), Code::ResourceExhausted);
            assert_eq!(
                status
                    .metadata()
                    .get(crate::errors::ERROR_REASON_KEY)
                    .and_then(|value| value.to_str().ok()),
                Some(reason)
            );
            assert!(status.message().contains('5'), "{}", status.message());
        }
    }

    #[cfg(not(madsim))]
    mod service {
        use std::net::SocketAddr;
        use std::pin::Pin;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Context, Poll};

        use http_body::{Body, Frame};
        use tokio::sync::{Semaphore, oneshot};
        use tonic::transport::server::TcpConnectInfo;
        use tower_layer::Layer as _;
        use tower_service::Service as _;

        use super::*;

        /// A response body that stays open until its sender fires or is dropped.
        struct Gate(oneshot::Receiver<()>);

        impl Body for Gate {
            type Data = &'static [u8];
            type Error = std::convert::Infallible;

            fn poll_frame(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<&'static [u8]>, Self::Error>>> {
                Pin::new(&mut self.0).poll(cx).map(|_| None)
            }
        }

        /// A service whose calls each wait for a permit (if `permits` is given), then answer with
        /// a body that stays open until the test lets it end.
        #[derive(Clone)]
        struct Fake {
            calls: Arc<AtomicUsize>,
            permits: Option<Arc<Semaphore>>,
            bodies: Arc<Mutex<Vec<oneshot::Sender<()>>>>,
        }

        impl Fake {
            fn new(permits: Option<Arc<Semaphore>>) -> Fake {
                Fake {
                    calls: Arc::new(AtomicUsize::new(0)),
                    permits,
                    bodies: Arc::new(Mutex::new(Vec::new())),
                }
            }

            fn calls(&self) -> usize {
                self.calls.load(Ordering::SeqCst)
            }

            /// Ends the oldest open body the service handed out.
            fn end_a_body(&self) {
                let sender = self.bodies.lock().expect("bodies").remove(0);
                let _ = sender.send(());
            }
        }

        impl tower_service::Service<http::Request<()>> for Fake {
            type Response = http::Response<Gate>;
            type Error = std::convert::Infallible;
            type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

            fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, _request: http::Request<()>) -> Self::Future {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let permits = self.permits.clone();
                let (sender, receiver) = oneshot::channel();
                self.bodies.lock().expect("bodies").push(sender);
                Box::pin(async move {
                    if let Some(permits) = permits {
                        permits.acquire().await.expect("permits").forget();
                    }
                    Ok(http::Response::new(Gate(receiver)))
                })
            }
        }

        fn request(path: &str, from: [u8; 4]) -> http::Request<()> {
            let mut request = http::Request::builder()
                .uri(path)
                .body(())
                .expect("request");
            request.extensions_mut().insert(TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(SocketAddr::from((from, 40_000))),
            });
            request
        }

        const CLIENT: [u8; 4] = [10, 0, 0, 1];
        const OTHER: [u8; 4] = [10, 0, 0, 2];
        const ACQUIRE: &str = "/certus.v1.Leases/Acquire";

        /// The `certus-error` reason of a refusal, `None` for an answer from the service.
        fn reason<B>(response: &http::Response<B>) -> Option<String> {
            let headers = response.headers();
            let reason = headers
                .get(crate::errors::ERROR_REASON_KEY)?
                .to_str()
                .ok()?;
            assert_eq!(
                headers.get("grpc-status").and_then(|v| v.to_str().ok()),
                Some("8"),
                "a refusal is RESOURCE_EXHAUSTED"
            );
            assert!(headers.contains_key("grpc-message"));
            Some(reason.to_owned())
        }

        #[tokio::test]
        async fn a_client_at_its_in_flight_limit_is_refused_without_calling_the_service() {
            let permits = Arc::new(Semaphore::new(0));
            let fake = Fake::new(Some(Arc::clone(&permits)));
            let layer = ClientLimitsLayer::new(limits(2, 10, 1000, 1000));
            let mut service = layer.layer(fake.clone());
            let first = tokio::spawn(service.call(request(ACQUIRE, CLIENT)));
            let _second = tokio::spawn(service.call(request(ACQUIRE, CLIENT)));
            let refused = service
                .call(request(ACQUIRE, CLIENT))
                .await
                .expect("an answer");
            assert_eq!(
                reason(&refused).as_deref(),
                Some("too-many-requests-in-flight")
            );
            assert_eq!(
                fake.calls(),
                2,
                "the refused call never reached the service"
            );
            // Another client has its own counts; the Raft transport is not counted.
            let other = service.call(request(ACQUIRE, OTHER));
            let raft = service.call(request("/certus.v1.Raft/Forward", CLIENT));
            assert_eq!(fake.calls(), 4);
            // An answered call frees its slot in flight.
            permits.add_permits(1);
            let answered = first.await.expect("task").expect("answer");
            assert_eq!(reason(&answered), None);
            let _third = service.call(request(ACQUIRE, CLIENT));
            assert_eq!(fake.calls(), 5, "admitted once a call was answered");
            drop((other, raft));
        }

        #[tokio::test]
        async fn an_open_response_body_holds_its_stream_until_it_ends() {
            let fake = Fake::new(None);
            // Tokens come back slowly: the client stays counted after its calls end.
            let layer = ClientLimitsLayer::new(limits(10, 2, 1, 1000));
            let limiter = Arc::clone(layer.limiter());
            let mut service = layer.layer(fake.clone());
            let first = service.call(request(ACQUIRE, CLIENT)).await.expect("first");
            let second = service
                .call(request(ACQUIRE, CLIENT))
                .await
                .expect("second");
            assert_eq!(limiter.counts(Some(CLIENT.into())), Some((0, 2)));
            let refused = service
                .call(request(ACQUIRE, CLIENT))
                .await
                .expect("answer");
            assert_eq!(reason(&refused).as_deref(), Some("too-many-streams"));
            assert_eq!(fake.calls(), 2);
            // The first body ends (read to its end): its stream is freed.
            fake.end_a_body();
            let mut body = first.into_body();
            let end = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            assert!(end.is_none(), "the body ended");
            assert_eq!(limiter.counts(Some(CLIENT.into())), Some((0, 1)));
            let third = service.call(request(ACQUIRE, CLIENT)).await.expect("third");
            assert_eq!(reason(&third), None);
            // A body dropped before its end (the client went away) frees its stream too.
            drop(second);
            let fourth = service
                .call(request(ACQUIRE, CLIENT))
                .await
                .expect("fourth");
            assert_eq!(reason(&fourth), None);
            drop((body, third, fourth));
            assert_eq!(limiter.counts(Some(CLIENT.into())), Some((0, 0)));
        }

        #[tokio::test]
        async fn clients_are_found_by_the_key_the_layer_was_given() {
            /// Every request is one client, whatever its address.
            fn everyone(_: &http::Extensions) -> ClientKey {
                Some(IpAddr::from([192, 0, 2, 1]))
            }
            let fake = Fake::new(Some(Arc::new(Semaphore::new(0))));
            let layer = ClientLimitsLayer::new(limits(1, 10, 1000, 1000)).keyed_by(everyone);
            let mut service = layer.layer(fake.clone());
            let _pending = service.call(request(ACQUIRE, CLIENT));
            let refused = service.call(request(ACQUIRE, OTHER)).await.expect("answer");
            assert_eq!(
                reason(&refused).as_deref(),
                Some("too-many-requests-in-flight"),
                "another address is the same client"
            );
            let mut extensions = http::Extensions::new();
            assert_eq!(tcp_peer(&extensions), None);
            extensions.insert(TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(SocketAddr::from((CLIENT, 1))),
            });
            assert_eq!(tcp_peer(&extensions), Some(IpAddr::from(CLIENT)));
        }

        #[tokio::test]
        async fn a_client_past_its_rate_is_refused_without_calling_the_service() {
            let fake = Fake::new(None);
            let layer = ClientLimitsLayer::new(limits(10, 10, 1, 1));
            let mut service = layer.layer(fake.clone());
            let first = service.call(request(ACQUIRE, CLIENT)).await.expect("first");
            assert_eq!(reason(&first), None);
            let refused = service
                .call(request(ACQUIRE, CLIENT))
                .await
                .expect("answer");
            assert_eq!(reason(&refused).as_deref(), Some("rate-limited"));
            assert_eq!(fake.calls(), 1);
        }
    }
}
