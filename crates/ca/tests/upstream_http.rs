//! The HTTP connector against a real HTTP server on loopback that plays a scripted upstream:
//! each test scripts the answers to `POST /orders` and `GET /orders/{id}`, runs
//! `issue_via_upstream` with a short policy, and checks the outcome and the requests the server
//! saw — how many, in what order, and how far apart.

#![cfg(not(madsim))]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certus_ca::poller::{PollPolicy, PollPolicyConfig};
use certus_ca::upstream::{HttpUpstream, Issuance, OrderId, OrderRequest, issue_via_upstream};
use rcgen::{CertificateParams, KeyPair};

/// A `Retry-After` the script sends.
#[derive(Clone, Debug)]
enum RetryAfterHeader {
    Seconds(u64),
    /// An HTTP-date this far after the moment of the answer.
    DateIn(Duration),
}

/// One scripted answer.
#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    retry_after: Option<RetryAfterHeader>,
    body: String,
}

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        retry_after: None,
        body: body.to_owned(),
    }
}

fn pending() -> Reply {
    reply(200, r#"{"status": "pending"}"#)
}

fn created(id: &str) -> Reply {
    reply(201, &serde_json::json!({ "id": id }).to_string())
}

fn issued(pem: &str) -> Reply {
    reply(
        200,
        &serde_json::json!({"status": "issued", "certificate": pem}).to_string(),
    )
}

/// A request the server saw.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    at: Instant,
    idempotency_key: Option<String>,
    content_type: Option<String>,
    body: Vec<u8>,
}

#[derive(Default)]
struct Script {
    /// Answers to POST, in order; the last one repeats.
    posts: VecDeque<Reply>,
    /// Answers to GET, in order; the last one repeats.
    gets: VecDeque<Reply>,
    seen: Vec<Seen>,
}

fn next(replies: &mut VecDeque<Reply>) -> Reply {
    if replies.len() > 1 {
        replies.pop_front().expect("not empty")
    } else {
        replies
            .front()
            .cloned()
            .unwrap_or_else(|| reply(500, "unscripted"))
    }
}

/// The scripted upstream, serving under the path prefix `/ca`.
struct Upstream {
    address: SocketAddr,
    script: Arc<Mutex<Script>>,
}

impl Upstream {
    async fn start(posts: Vec<Reply>, gets: Vec<Reply>) -> Upstream {
        let script = Arc::new(Mutex::new(Script {
            posts: posts.into(),
            gets: gets.into(),
            seen: Vec::new(),
        }));
        let shared = Arc::clone(&script);
        let router = Router::new().fallback(move |request: axum::extract::Request| {
            let script = Arc::clone(&shared);
            async move { answer(&script, request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        Upstream { address, script }
    }

    fn url(&self) -> String {
        format!("http://{}/ca/", self.address)
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().expect("lock").seen.clone()
    }

    fn count(&self, method: &str) -> usize {
        self.seen()
            .iter()
            .filter(|seen| seen.method == method)
            .count()
    }

    /// The times between consecutive GETs.
    fn get_gaps(&self) -> Vec<Duration> {
        let gets: Vec<Instant> = self
            .seen()
            .iter()
            .filter(|seen| seen.method == "GET")
            .map(|seen| seen.at)
            .collect();
        gets.windows(2).map(|pair| pair[1] - pair[0]).collect()
    }
}

async fn answer(script: &Mutex<Script>, request: axum::extract::Request) -> Response<Body> {
    let at = Instant::now();
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let (parts, body) = request.into_parts();
    let text = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let idempotency_key = text(header::HeaderName::from_static("idempotency-key"));
    let content_type = text(header::CONTENT_TYPE);
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .expect("body")
        .to_vec();
    let reply = {
        let mut script = script.lock().expect("lock");
        let reply = match (method.as_str(), path.as_str()) {
            ("POST", "/ca/orders") => next(&mut script.posts),
            ("GET", path) if path.starts_with("/ca/orders/") => next(&mut script.gets),
            _ => reply(404, "no such route"),
        };
        script.seen.push(Seen {
            method,
            path,
            at,
            idempotency_key,
            content_type,
            body,
        });
        reply
    };
    let mut response =
        Response::builder().status(StatusCode::from_u16(reply.status).expect("status"));
    match reply.retry_after {
        Some(RetryAfterHeader::Seconds(seconds)) => {
            response = response.header(header::RETRY_AFTER, seconds.to_string());
        }
        Some(RetryAfterHeader::DateIn(delay)) => {
            let date = httpdate::fmt_http_date(SystemTime::now() + delay);
            response = response.header(header::RETRY_AFTER, date);
        }
        None => {}
    }
    response.body(Body::from(reply.body)).expect("response")
}

/// A CSR for `example.com` and certificates for its key and for another.
struct Pki {
    csr_der: Vec<u8>,
    certificate_pem: String,
    other_key_certificate_pem: String,
}

impl Pki {
    fn new() -> Pki {
        let names = vec!["example.com".to_owned()];
        let params = CertificateParams::new(names).expect("params");
        let key = KeyPair::generate().expect("key");
        let other = KeyPair::generate().expect("key");
        Pki {
            csr_der: params.serialize_request(&key).expect("CSR").der().to_vec(),
            certificate_pem: params.self_signed(&key).expect("certificate").pem(),
            other_key_certificate_pem: params.self_signed(&other).expect("certificate").pem(),
        }
    }

    fn request(&self) -> OrderRequest {
        OrderRequest::new(
            self.csr_der.clone(),
            vec!["example.com".to_owned()],
            "session-7",
        )
        .expect("valid request")
    }
}

/// 50 ms, 100 ms, 200 ms, 200 ms …, ±20 %, for at most `max_wait_ms`.
fn policy(max_wait_ms: u64) -> PollPolicy {
    PollPolicy::new(PollPolicyConfig {
        first_wait_ms: 50,
        factor: 2,
        cap_ms: 200,
        jitter_percent: 20,
        max_wait_ms,
    })
    .expect("valid policy")
}

fn now_unix_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

async fn issue(
    url: &str,
    policy: &PollPolicy,
    request: &OrderRequest,
    resume: Option<OrderId>,
) -> Issuance {
    let upstream = HttpUpstream::new(url).expect("URL");
    // The draw 0.5: every wait is its nominal length.
    issue_via_upstream(&upstream, policy, request, resume, &mut || 0.5, now_unix_ms).await
}

fn order(id: &str) -> Option<OrderId> {
    Some(OrderId::new(id).expect("valid id"))
}

#[tokio::test]
async fn unavailable_then_rate_limited_then_pending_then_issued() {
    let pki = Pki::new();
    let mut rate_limited = reply(429, "slow down");
    rate_limited.retry_after = Some(RetryAfterHeader::Seconds(1));
    let upstream = Upstream::start(
        vec![created("ord-1")],
        vec![
            reply(503, "maintenance"),
            rate_limited,
            pending(),
            issued(&pki.certificate_pem),
        ],
    )
    .await;
    let request = pki.request();
    // On a task of its own: the connector's future is Send.
    let url = upstream.url();
    let outcome = tokio::spawn(async move { issue(&url, &policy(5_000), &request, None).await })
        .await
        .expect("task");

    let Issuance::Issued {
        order_id,
        chain,
        attempts,
    } = outcome
    else {
        panic!("not issued: {outcome:?}");
    };
    assert_eq!(order_id.as_str(), "ord-1");
    assert_eq!(chain.pem(), pki.certificate_pem);
    assert_eq!(attempts, 4);

    let seen = upstream.seen();
    let requests: Vec<(&str, &str)> = seen
        .iter()
        .map(|seen| (seen.method.as_str(), seen.path.as_str()))
        .collect();
    assert_eq!(
        requests,
        [
            ("POST", "/ca/orders"),
            ("GET", "/ca/orders/ord-1"),
            ("GET", "/ca/orders/ord-1"),
            ("GET", "/ca/orders/ord-1"),
            ("GET", "/ca/orders/ord-1"),
        ]
    );
    // The order as the protocol describes it.
    let post = &seen[0];
    assert_eq!(post.content_type.as_deref(), Some("application/json"));
    assert_eq!(post.idempotency_key.as_deref(), Some("session-7"));
    let body: serde_json::Value = serde_json::from_slice(&post.body).expect("JSON");
    let csr = STANDARD
        .decode(body["csr"].as_str().expect("csr"))
        .expect("base64");
    assert_eq!(csr, pki.csr_der);
    assert_eq!(body["names"], serde_json::json!(["example.com"]));
    // The status is read at once after the order is taken.
    assert!(seen[1].at - seen[0].at < Duration::from_millis(500));

    let gaps = upstream.get_gaps();
    // After the 503: the schedule's 50 ms.
    assert!(gaps[0] >= Duration::from_millis(50), "{gaps:?}");
    // After the 429 with Retry-After: 1: at least a second (1.1 s with the draw), not 100 ms.
    assert!(gaps[1] >= Duration::from_millis(1_100), "{gaps:?}");
    assert!(gaps[1] < Duration::from_millis(1_600), "{gaps:?}");
    // After the pending answer: the schedule's 200 ms again.
    assert!(gaps[2] >= Duration::from_millis(200), "{gaps:?}");
    assert!(gaps[2] < Duration::from_millis(700), "{gaps:?}");
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let pki = Pki::new();
    let mut busy = reply(503, "");
    busy.retry_after = Some(RetryAfterHeader::DateIn(Duration::from_secs(2)));
    let upstream = Upstream::start(
        vec![created("ord-2")],
        vec![busy, issued(&pki.certificate_pem)],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    assert!(
        matches!(outcome, Issuance::Issued { attempts: 2, .. }),
        "{outcome:?}"
    );
    // The date has a resolution of a second: two seconds from now is more than one.
    let gaps = upstream.get_gaps();
    assert!(gaps[0] > Duration::from_secs(1), "{gaps:?}");
    assert!(gaps[0] < Duration::from_millis(3_000), "{gaps:?}");
}

#[tokio::test]
async fn a_rejected_order_fails_with_the_cas_reason() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![created("ord-3")],
        vec![
            pending(),
            reply(
                200,
                r#"{"status": "rejected", "reason": "domain validation failed"}"#,
            ),
        ],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    let Issuance::Failed {
        order_id,
        reason,
        attempts,
    } = outcome
    else {
        panic!("not failed: {outcome:?}");
    };
    assert_eq!(order_id, order("ord-3"));
    assert!(reason.contains("domain validation failed"), "{reason}");
    assert_eq!(attempts, 2);
    assert_eq!(upstream.count("GET"), 2);
}

#[tokio::test]
async fn a_permanent_client_error_stops_polling_at_once() {
    let pki = Pki::new();
    for http_status in [400, 403, 404] {
        let upstream = Upstream::start(
            vec![created("ord-4")],
            vec![reply(http_status, "no such order"), pending()],
        )
        .await;
        let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
        let Issuance::Failed {
            order_id, reason, ..
        } = outcome
        else {
            panic!("{http_status}: not failed: {outcome:?}");
        };
        assert_eq!(order_id, order("ord-4"));
        assert_eq!(reason, format!("HTTP {http_status}: no such order"));
        assert_eq!(upstream.count("GET"), 1, "{http_status}");
    }
}

#[tokio::test]
async fn a_refused_order_fails_without_an_order_id() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![reply(400, "names not allowed"), created("never")],
        vec![pending()],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    let Issuance::Failed {
        order_id, reason, ..
    } = outcome
    else {
        panic!("not failed: {outcome:?}");
    };
    assert_eq!(order_id, None);
    assert!(reason.contains("HTTP 400: names not allowed"), "{reason}");
    assert_eq!(upstream.count("POST"), 1);
    assert_eq!(upstream.count("GET"), 0);
}

#[tokio::test]
async fn a_success_with_a_broken_body_is_a_permanent_failure() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![created("ord-5")],
        vec![reply(200, "<html>proxy error</html>"), pending()],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    let Issuance::Failed { reason, .. } = outcome else {
        panic!("not failed: {outcome:?}");
    };
    assert!(reason.contains("does not parse"), "{reason}");
    assert_eq!(upstream.count("GET"), 1);
}

#[tokio::test]
async fn an_oversized_answer_is_a_permanent_failure() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![created("ord-6")],
        vec![reply(200, &"x".repeat(2 << 20)), pending()],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    let Issuance::Failed { reason, .. } = outcome else {
        panic!("not failed: {outcome:?}");
    };
    assert!(reason.contains("over 1048576 bytes"), "{reason}");
    assert_eq!(upstream.count("GET"), 1);
}

#[tokio::test]
async fn a_certificate_for_another_key_is_refused() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![created("ord-7")],
        vec![issued(&pki.other_key_certificate_pem)],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    let Issuance::Failed { reason, .. } = outcome else {
        panic!("not failed: {outcome:?}");
    };
    assert!(reason.contains("another public key"), "{reason}");
}

#[tokio::test]
async fn the_deadline_returns_still_pending_with_the_order_after_one_last_attempt() {
    let pki = Pki::new();
    let upstream = Upstream::start(vec![created("ord-8")], vec![pending()]).await;
    let policy = policy(1_000);
    let started = Instant::now();
    let outcome = issue(&upstream.url(), &policy, &pki.request(), None).await;
    let took = started.elapsed();
    let Issuance::StillPending {
        order_id,
        attempts,
        last_error,
        retry_after,
    } = outcome
    else {
        panic!("not pending: {outcome:?}");
    };
    assert_eq!(order_id, order("ord-8"));
    assert_eq!(last_error, None);
    assert_eq!(retry_after, None);
    // 0, 50, 150, 350, 550, 750, 950 ms and the clamped one at 1 s, give or take the requests'
    // own time.
    let gets = upstream.count("GET");
    assert_eq!(usize::try_from(attempts).expect("small"), gets);
    assert!((6..=8).contains(&gets), "{gets} GETs");
    assert!(attempts <= policy.attempts_max());
    let last = upstream.seen().last().expect("requests").at;
    assert!(
        last - started >= Duration::from_millis(1_000),
        "{:?}",
        last - started
    );
    assert!(
        last - started < Duration::from_millis(1_400),
        "{:?}",
        last - started
    );
    assert!(took < Duration::from_millis(1_500), "{took:?}");
}

#[tokio::test]
async fn resuming_an_order_polls_it_without_ordering_again() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![created("ord-9"), created("ord-duplicate")],
        vec![pending()],
    )
    .await;
    let request = pki.request();
    let first = issue(&upstream.url(), &policy(300), &request, None).await;
    let Issuance::StillPending {
        order_id: Some(order_id),
        ..
    } = first
    else {
        panic!("not pending: {first:?}");
    };
    assert_eq!(order_id.as_str(), "ord-9");

    upstream.script.lock().expect("lock").gets = vec![issued(&pki.certificate_pem)].into();
    let second = issue(&upstream.url(), &policy(300), &request, Some(order_id)).await;
    let Issuance::Issued {
        order_id, attempts, ..
    } = second
    else {
        panic!("not issued: {second:?}");
    };
    assert_eq!(order_id.as_str(), "ord-9");
    assert_eq!(attempts, 1);
    assert_eq!(upstream.count("POST"), 1, "one order only");
    assert!(
        upstream
            .seen()
            .iter()
            .filter(|seen| seen.method == "GET")
            .all(|seen| seen.path == "/ca/orders/ord-9")
    );
}

#[tokio::test]
async fn a_transient_submission_is_retried_under_the_same_idempotency_key() {
    let pki = Pki::new();
    let upstream = Upstream::start(
        vec![reply(503, "later"), reply(429, ""), created("ord-10")],
        vec![issued(&pki.certificate_pem)],
    )
    .await;
    let outcome = issue(&upstream.url(), &policy(5_000), &pki.request(), None).await;
    assert!(
        matches!(&outcome, Issuance::Issued { order_id, attempts: 3, .. } if order_id.as_str() == "ord-10"),
        "{outcome:?}"
    );
    let keys: Vec<Option<String>> = upstream
        .seen()
        .iter()
        .filter(|seen| seen.method == "POST")
        .map(|seen| seen.idempotency_key.clone())
        .collect();
    assert_eq!(keys, vec![Some("session-7".to_owned()); 3]);
    assert_eq!(upstream.count("GET"), 1);
}

#[tokio::test]
async fn an_unreachable_adapter_is_transient_until_the_deadline() {
    let pki = Pki::new();
    // A port nobody listens on: bound, then released.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    let policy = policy(400);
    let started = Instant::now();
    let outcome = issue(&format!("http://{address}"), &policy, &pki.request(), None).await;
    let Issuance::StillPending {
        order_id,
        attempts,
        last_error,
        ..
    } = outcome
    else {
        panic!("not pending: {outcome:?}");
    };
    assert_eq!(order_id, None, "never accepted: the next call orders again");
    assert!(
        attempts >= 3 && attempts <= policy.attempts_max(),
        "{attempts}"
    );
    let error = last_error.expect("an error");
    assert!(error.starts_with("submitting the order: "), "{error}");
    assert!(started.elapsed() < Duration::from_millis(1_000));
}

#[tokio::test]
async fn a_bad_base_url_is_refused_up_front() {
    for url in [
        "https://ca.example",
        "ftp://ca.example",
        "not a url",
        "http://ca.example/?a=b",
    ] {
        assert!(HttpUpstream::new(url).is_err(), "{url}");
    }
    assert_eq!(
        HttpUpstream::new("http://127.0.0.1:8080/ca/")
            .expect("valid")
            .url(),
        "http://127.0.0.1:8080/ca"
    );
}
