//! The upstream-CA connector: ordering a certificate from an asynchronous CA and polling the
//! order until the CA issues it (seed 001).
//!
//! - [`UpstreamCa`] is the connector interface: submit an order (a CSR and its names), read an
//!   order's status. Each answer is already triaged (see [`crate::poller`]).
//! - [`HttpUpstream`] (not under the simulation) speaks the small JSON protocol below.
//! - [`issue_via_upstream`] submits (unless resuming an order) and polls with a
//!   [`PollPolicy`], and returns the order id with every outcome so that a later call resumes
//!   the same order instead of ordering twice.
//!
//! # The upstream protocol
//!
//! Certus does not speak each commercial CA's API. It speaks this protocol to an *adapter* that
//! an operator runs next to the node (a sidecar or a service on the same network) and that
//! translates to the real CA (DigiCert, Sectigo, Entrust, GlobalSign, an internal CA …). The
//! adapter holds the CA's credentials and talks TLS to it; Certus reaches the adapter over plain
//! `http://`. `{base}` is the adapter's base URL as configured, path prefix included.
//!
//! **Order a certificate.**
//!
//! ```text
//! POST {base}/orders
//! Content-Type: application/json
//! Idempotency-Key: <the caller's key for this issuance, e.g. the session id>
//!
//! {"csr": "<the CSR, DER, standard base64 with padding>", "names": ["example.com", ...]}
//! ```
//!
//! Answer `200` or `201` with `{"id": "<order id>"}`. The id is 1 to 128 characters from
//! `A-Z a-z 0-9 - . _ ~` (it goes into a URL path as is). An adapter should answer a repeated
//! `Idempotency-Key` with the same order id: Certus retries the POST after a transient failure
//! (no answer, `429`, `5xx`), and without that a retry may order a second certificate.
//!
//! **Read an order.**
//!
//! ```text
//! GET {base}/orders/{id}
//! ```
//!
//! Answer `200` with
//!
//! ```text
//! {"status": "pending" | "processing" | "issued" | "completed" | "rejected" | "denied" | "failed",
//!  "certificate": "<PEM chain, leaf first>",      (required when issued / completed)
//!  "reason": "<why, for an operator>"}            (optional, read when rejected / denied / failed)
//! ```
//!
//! Unknown fields are ignored; status words are lowercase.
//!
//! **Both requests.** `429` and any `5xx` mean "try again later" (the poll continues, with
//! backoff); so do connection errors and timeouts. Any other status that is not `2xx` — `400`,
//! `401`, `403`, `404` (unknown order), a redirect — is a permanent failure, and its body (up to
//! [`UPSTREAM_REASON_CHARS_MAX`] characters) is reported as the reason. A `2xx` whose body does
//! not parse is a permanent failure too: the adapter is broken, and asking again will not mend
//! it. A `Retry-After` header (seconds or an HTTP-date) on any answer is honoured: the next
//! request waits at least that long. Each request must be answered within [`REQUEST_TIMEOUT`],
//! in at most [`UPSTREAM_RESPONSE_BYTES_MAX`](crate::limits::UPSTREAM_RESPONSE_BYTES_MAX) bytes.
//!
//! A certificate is accepted only if every PEM block parses as an X.509 certificate (at most
//! [`UPSTREAM_CHAIN_CERTS_MAX`]) and the leaf certifies the CSR's public key.
//!
//! **API Boundary:** the protocol is an interface operators build against; change it only
//! compatibly.

use std::time::Duration;

use der::{Decode as _, Encode as _};
use serde::{Deserialize, Serialize};

use crate::limits::{
    UPSTREAM_CHAIN_CERTS_MAX, UPSTREAM_CSR_BYTES_MAX, UPSTREAM_IDEMPOTENCY_KEY_CHARS_MAX,
    UPSTREAM_NAME_BYTES_MAX, UPSTREAM_NAMES_MAX, UPSTREAM_ORDER_ID_CHARS_MAX,
    UPSTREAM_REASON_CHARS_MAX,
};
use crate::poller::{Answer, Attempt, JitterSource, PollOutcome, PollPolicy, Step, poll};

#[cfg(not(madsim))]
pub use http::HttpUpstream;

/// How long one request to the adapter may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to the adapter may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An upstream order id: 1 to [`UPSTREAM_ORDER_ID_CHARS_MAX`] characters from
/// `A-Z a-z 0-9 - . _ ~`
/// (URL-safe, so it goes into a path unescaped). Serialized as a string, checked when read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OrderId(String);

impl TryFrom<String> for OrderId {
    type Error = String;

    fn try_from(id: String) -> Result<OrderId, String> {
        OrderId::new(&id)
    }
}

impl From<OrderId> for String {
    fn from(id: OrderId) -> String {
        id.0
    }
}

impl OrderId {
    /// Checks `id`.
    pub fn new(id: &str) -> Result<OrderId, String> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~');
        if id.is_empty() || id.len() > UPSTREAM_ORDER_ID_CHARS_MAX || !id.chars().all(allowed) {
            return Err(format!(
                "order id {:?} must be 1 to {UPSTREAM_ORDER_ID_CHARS_MAX} characters from A-Z a-z 0-9 - . _ ~",
                excerpt(id)
            ));
        }
        Ok(OrderId(id.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for OrderId {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// What is ordered: a CSR that parses, its names, and the caller's idempotency key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderRequest {
    csr_der: Vec<u8>,
    names: Vec<String>,
    idempotency_key: String,
    /// The CSR's SubjectPublicKeyInfo, DER: the issued leaf must carry the same.
    public_key_der: Vec<u8>,
}

impl OrderRequest {
    /// Checks the bounds: the CSR is at most [`UPSTREAM_CSR_BYTES_MAX`] bytes and parses as a
    /// PKCS#10 request (its signature and names are [`crate::csr`]'s to check); 1 to
    /// [`UPSTREAM_NAMES_MAX`] names of 1 to [`UPSTREAM_NAME_BYTES_MAX`] visible ASCII characters;
    /// an idempotency key of 1 to [`UPSTREAM_IDEMPOTENCY_KEY_CHARS_MAX`] visible ASCII characters
    /// (it travels in a header).
    pub fn new(
        csr_der: Vec<u8>,
        names: Vec<String>,
        idempotency_key: &str,
    ) -> Result<OrderRequest, String> {
        if csr_der.is_empty() || csr_der.len() > UPSTREAM_CSR_BYTES_MAX {
            return Err(format!(
                "the CSR is {} bytes, expected 1 to {UPSTREAM_CSR_BYTES_MAX}",
                csr_der.len()
            ));
        }
        let csr = x509_cert::request::CertReq::from_der(&csr_der)
            .map_err(|error| format!("the CSR does not parse as PKCS#10: {error}"))?;
        let public_key_der = csr
            .info
            .public_key
            .to_der()
            .map_err(|error| format!("the CSR's public key does not encode: {error}"))?;
        if names.is_empty() || names.len() > UPSTREAM_NAMES_MAX {
            return Err(format!(
                "{} names, expected 1 to {UPSTREAM_NAMES_MAX}",
                names.len()
            ));
        }
        if let Some(bad) = names
            .iter()
            .find(|name| !visible_ascii(name, UPSTREAM_NAME_BYTES_MAX))
        {
            return Err(format!(
                "name {:?} must be 1 to {UPSTREAM_NAME_BYTES_MAX} visible ASCII characters",
                excerpt(bad)
            ));
        }
        if !visible_ascii(idempotency_key, UPSTREAM_IDEMPOTENCY_KEY_CHARS_MAX) {
            return Err(format!(
                "idempotency key {:?} must be 1 to {UPSTREAM_IDEMPOTENCY_KEY_CHARS_MAX} visible ASCII \
                 characters",
                excerpt(idempotency_key)
            ));
        }
        Ok(OrderRequest {
            csr_der,
            names,
            idempotency_key: idempotency_key.to_owned(),
            public_key_der,
        })
    }

    /// The CSR, DER.
    pub fn csr_der(&self) -> &[u8] {
        &self.csr_der
    }

    /// The names ordered.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The idempotency key.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }
}

fn visible_ascii(text: &str, len_max: usize) -> bool {
    !text.is_empty() && text.len() <= len_max && text.bytes().all(|byte| byte.is_ascii_graphic())
}

/// An issued certificate chain, leaf first: every block parsed as X.509.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedChain {
    pem: String,
    der: Vec<Vec<u8>>,
    leaf_public_key_der: Vec<u8>,
}

impl IssuedChain {
    /// Parses a PEM chain of 1 to [`UPSTREAM_CHAIN_CERTS_MAX`] certificates, leaf first.
    pub fn from_pem(pem: &str) -> Result<IssuedChain, String> {
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            // Also keeps empty input away from `load_pem_chain`, which does not expect it.
            return Err("the certificate holds no PEM CERTIFICATE block".to_owned());
        }
        let chain = x509_cert::Certificate::load_pem_chain(pem.as_bytes())
            .map_err(|error| format!("the certificate chain does not parse: {error}"))?;
        if chain.is_empty() || chain.len() > UPSTREAM_CHAIN_CERTS_MAX {
            return Err(format!(
                "the chain holds {} certificates, expected 1 to {UPSTREAM_CHAIN_CERTS_MAX}",
                chain.len()
            ));
        }
        let der = chain
            .iter()
            .map(|certificate| certificate.to_der())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("a certificate does not re-encode: {error}"))?;
        let leaf_public_key_der = chain[0]
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .map_err(|error| format!("the leaf's public key does not re-encode: {error}"))?;
        Ok(IssuedChain {
            pem: pem.to_owned(),
            der,
            leaf_public_key_der,
        })
    }

    /// The chain as the CA sent it, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The certificates, DER, leaf first (never empty).
    pub fn der(&self) -> &[Vec<u8>] {
        &self.der
    }

    /// The leaf certificate, DER.
    pub fn leaf_der(&self) -> &[u8] {
        &self.der[0]
    }
}

/// The triaged answer to an order submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// The CA took the order.
    Accepted(OrderId),
    /// The CA refused it, or answered nonsense: permanent.
    Refused(String),
    /// Try again later.
    Transient(String),
}

/// A connector to an asynchronous upstream CA. Each method answers with one request's triaged
/// result; the retrying is [`issue_via_upstream`]'s.
pub trait UpstreamCa {
    /// Orders a certificate for `request`.
    fn submit(&self, request: &OrderRequest) -> impl Future<Output = Answer<Submitted>> + Send;

    /// Reads the status of order `id`.
    fn status(&self, id: &OrderId) -> impl Future<Output = Answer<Step<IssuedChain>>> + Send;
}

/// How [`issue_via_upstream`] ended. Every variant names the order, when there is one: store it
/// and pass it back to resume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Issuance {
    /// The CA issued `chain` for the CSR's key.
    Issued {
        /// The order.
        order_id: OrderId,
        /// The chain, leaf first.
        chain: IssuedChain,
        /// Attempts made (an attempt that submits the order also reads its status).
        attempts: u32,
    },
    /// A permanent failure: the CA refused the order or the request, or answered nonsense.
    Failed {
        /// The order, if the CA took one.
        order_id: Option<OrderId>,
        /// Why.
        reason: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The deadline came first: call again later with `order_id` (`None`: the order was never
    /// accepted, so the next call submits it again, under the same idempotency key).
    StillPending {
        /// The order, if the CA took one.
        order_id: Option<OrderId>,
        /// Attempts made.
        attempts: u32,
        /// The most recent transient error, if any.
        last_error: Option<String>,
        /// The delay the CA asked for in its last answer, if any: do not call again before.
        retry_after: Option<Duration>,
    },
}

/// Orders a certificate from `connector` and polls the order under `policy`; with `resume`, polls
/// that order instead of ordering again.
///
/// Each attempt submits the order if no order id is known yet — a transient failure of the
/// submission is retried on the same schedule — and then, in the same attempt, reads the
/// order's status. An issued chain whose leaf does not certify the CSR's key is a permanent
/// failure. `jitter` and `now_unix_ms` are [`poll`]'s.
pub async fn issue_via_upstream<C: UpstreamCa + Sync>(
    connector: &C,
    policy: &PollPolicy,
    request: &OrderRequest,
    resume: Option<OrderId>,
    jitter: &mut impl JitterSource,
    now_unix_ms: impl Fn() -> u64,
) -> Issuance {
    let mut order = Order {
        connector,
        request,
        id: resume,
    };
    let outcome = poll(policy, jitter, now_unix_ms, &mut order).await;
    let order_id = order.id;
    match outcome {
        PollOutcome::Ready { value, attempts } => Issuance::Issued {
            order_id: order_id.expect("a chain was read from an order"),
            chain: value,
            attempts,
        },
        PollOutcome::Failed { reason, attempts } => Issuance::Failed {
            order_id,
            reason,
            attempts,
        },
        PollOutcome::StillPending {
            attempts,
            last_error,
            retry_after,
        } => Issuance::StillPending {
            order_id,
            attempts,
            last_error,
            retry_after,
        },
    }
}

/// One attempt of [`issue_via_upstream`]: submit the order if it has no id yet, then read its
/// status.
struct Order<'a, C> {
    connector: &'a C,
    request: &'a OrderRequest,
    /// The order's id, once the CA took it.
    id: Option<OrderId>,
}

impl<C: UpstreamCa + Sync> Attempt for Order<'_, C> {
    type Output = IssuedChain;

    async fn attempt(&mut self) -> Answer<Step<IssuedChain>> {
        let id = match &self.id {
            Some(id) => id.clone(),
            None => {
                let answer = self.connector.submit(self.request).await;
                let retry_after = answer.retry_after;
                match answer.step {
                    Submitted::Accepted(id) => {
                        tracing::debug!(order = %id, "upstream CA took the order");
                        self.id = Some(id.clone());
                        id
                    }
                    Submitted::Refused(reason) => {
                        let reason = format!("the upstream CA refused the order: {reason}");
                        return Answer {
                            step: Step::Failed(reason),
                            retry_after,
                        };
                    }
                    Submitted::Transient(error) => {
                        let error = format!("submitting the order: {error}");
                        return Answer {
                            step: Step::Transient(error),
                            retry_after,
                        };
                    }
                }
            }
        };
        let answer = self.connector.status(&id).await;
        let step = match answer.step {
            Step::Ready(chain) if chain.leaf_public_key_der != self.request.public_key_der => {
                Step::Failed(format!(
                    "order {id}: the upstream CA issued a certificate for another public key \
                     than the CSR's"
                ))
            }
            step => step,
        };
        Answer {
            step,
            retry_after: answer.retry_after,
        }
    }
}

/// How the protocol reads an HTTP status, before the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Success,
    Transient,
    Permanent,
}

fn class_of(http_status: u16) -> Class {
    match http_status {
        200..=299 => Class::Success,
        429 | 500..=599 => Class::Transient,
        _ => Class::Permanent,
    }
}

/// `text` cut to [`UPSTREAM_REASON_CHARS_MAX`] characters.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(UPSTREAM_REASON_CHARS_MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// "HTTP 503: <the body's start>", for an answer that is not a success.
fn describe(http_status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        format!("HTTP {http_status}")
    } else {
        format!("HTTP {http_status}: {}", excerpt(text))
    }
}

#[derive(Deserialize)]
struct CreatedBody {
    id: String,
}

#[derive(Deserialize)]
struct StatusBody {
    status: String,
    #[serde(default)]
    certificate: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// Triage of an answer to `POST {base}/orders` (see the module documentation). Pure.
pub fn read_order_created(http_status: u16, body: &[u8]) -> Submitted {
    match class_of(http_status) {
        Class::Transient => Submitted::Transient(describe(http_status, body)),
        Class::Permanent => Submitted::Refused(describe(http_status, body)),
        Class::Success => match serde_json::from_slice::<CreatedBody>(body) {
            Err(error) => Submitted::Refused(format!(
                "HTTP {http_status} with a body that does not parse as {{\"id\": ...}}: {error}"
            )),
            Ok(created) => match OrderId::new(&created.id) {
                Ok(id) => Submitted::Accepted(id),
                Err(error) => Submitted::Refused(error),
            },
        },
    }
}

/// Triage of an answer to `GET {base}/orders/{id}` (see the module documentation). Pure.
pub fn read_order_status(http_status: u16, body: &[u8]) -> Step<IssuedChain> {
    match class_of(http_status) {
        Class::Transient => Step::Transient(describe(http_status, body)),
        Class::Permanent => Step::Failed(describe(http_status, body)),
        Class::Success => match serde_json::from_slice::<StatusBody>(body) {
            Err(error) => Step::Failed(format!(
                "HTTP {http_status} with an order status that does not parse: {error}"
            )),
            Ok(order) => read_status_body(order),
        },
    }
}

fn read_status_body(order: StatusBody) -> Step<IssuedChain> {
    match order.status.as_str() {
        "pending" | "processing" => Step::Pending,
        "issued" | "completed" => match order.certificate {
            None => Step::Failed(format!(
                "the order is {:?} but the answer has no certificate",
                order.status
            )),
            Some(pem) => match IssuedChain::from_pem(&pem) {
                Ok(chain) => Step::Ready(chain),
                Err(error) => Step::Failed(format!("the order is {:?} but {error}", order.status)),
            },
        },
        "rejected" | "denied" | "failed" => Step::Failed(format!(
            "the upstream CA answered {:?}: {}",
            order.status,
            order
                .reason
                .as_deref()
                .map_or_else(|| "no reason given".to_owned(), excerpt)
        )),
        other => Step::Failed(format!(
            "unknown order status {:?}, expected pending, processing, issued, completed, \
             rejected, denied or failed",
            excerpt(other)
        )),
    }
}

/// The HTTP connector (real sockets: not under the simulation, which supplies its own).
#[cfg(not(madsim))]
mod http {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
    use hyper::body::Bytes;
    use hyper::header::{CONTENT_TYPE, RETRY_AFTER};
    use hyper::{Method, Request, Uri};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    use super::{
        CONNECT_TIMEOUT, Class, IssuedChain, OrderId, OrderRequest, REQUEST_TIMEOUT, Submitted,
        UpstreamCa, class_of, read_order_created, read_order_status,
    };
    use crate::limits::UPSTREAM_RESPONSE_BYTES_MAX;
    use crate::poller::{Answer, RetryAfter, Step};

    /// An adapter speaking the upstream protocol over `http://` (see the module documentation).
    #[derive(Debug, Clone)]
    pub struct HttpUpstream {
        /// The base URL without a trailing slash.
        base: String,
        client: Client<HttpConnector, Full<Bytes>>,
    }

    /// One exchange with the adapter: the status, the `Retry-After`, and the body or why it
    /// could not be kept.
    struct Exchange {
        status: u16,
        retry_after: Option<RetryAfter>,
        body: Result<Bytes, String>,
    }

    impl HttpUpstream {
        /// A connector for the adapter at `base_url` (`http://host[:port][/prefix]`). Does not
        /// connect.
        pub fn new(base_url: &str) -> Result<HttpUpstream, String> {
            let base = base_url.trim_end_matches('/').to_owned();
            let uri: Uri = base
                .parse()
                .map_err(|error| format!("upstream URL {base_url:?} does not parse: {error}"))?;
            if uri.scheme_str() != Some("http") || uri.host().is_none() {
                return Err(format!(
                    "upstream URL {base_url:?} must be http:// with a host (the adapter runs \
                     next to the node; it speaks TLS to the CA)"
                ));
            }
            if uri.query().is_some() {
                return Err(format!("upstream URL {base_url:?} must not carry a query"));
            }
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
            let client = Client::builder(TokioExecutor::new()).build(connector);
            Ok(HttpUpstream { base, client })
        }

        /// The base URL.
        pub fn url(&self) -> &str {
            &self.base
        }

        /// Sends `request`; `Err` is a transport failure (connection, timeout, a body cut off).
        async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<Exchange, String> {
            let target = request.uri().to_string();
            let exchange = async {
                let response = self
                    .client
                    .request(request)
                    .await
                    .map_err(|error| format!("{target}: {error}"))?;
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|value| value.to_str().ok())
                    .and_then(RetryAfter::parse);
                let body = match Limited::new(response.into_body(), UPSTREAM_RESPONSE_BYTES_MAX)
                    .collect()
                    .await
                {
                    Ok(collected) => Ok(collected.to_bytes()),
                    Err(error) if error.is::<LengthLimitError>() => Err(format!(
                        "HTTP {status} with an answer over {UPSTREAM_RESPONSE_BYTES_MAX} bytes"
                    )),
                    Err(error) => return Err(format!("{target}: reading the answer: {error}")),
                };
                Ok(Exchange {
                    status,
                    retry_after,
                    body,
                })
            };
            tokio::time::timeout(REQUEST_TIMEOUT, exchange)
                .await
                .map_err(|_| format!("{target}: no answer within {REQUEST_TIMEOUT:?}"))?
        }
    }

    /// An answer over the size bound: its status says whether to try again.
    fn oversized<S>(
        exchange: &Exchange,
        error: String,
        permanent: impl FnOnce(String) -> S,
        transient: impl FnOnce(String) -> S,
    ) -> S {
        match class_of(exchange.status) {
            Class::Transient => transient(error),
            Class::Success | Class::Permanent => permanent(error),
        }
    }

    impl UpstreamCa for HttpUpstream {
        async fn submit(&self, request: &OrderRequest) -> Answer<Submitted> {
            let body = serde_json::json!({
                "csr": STANDARD.encode(request.csr_der()),
                "names": request.names(),
            });
            let http_request = Request::builder()
                .method(Method::POST)
                .uri(format!("{}/orders", self.base))
                .header(CONTENT_TYPE, "application/json")
                .header("idempotency-key", request.idempotency_key())
                .body(Full::new(Bytes::from(body.to_string())));
            let http_request = match http_request {
                Ok(http_request) => http_request,
                Err(error) => {
                    return Answer::new(Submitted::Refused(format!(
                        "the order request does not build: {error}"
                    )));
                }
            };
            match self.exchange(http_request).await {
                Err(error) => Answer::new(Submitted::Transient(error)),
                Ok(exchange) => {
                    let step = match &exchange.body {
                        Ok(body) => read_order_created(exchange.status, body),
                        Err(error) => oversized(
                            &exchange,
                            error.clone(),
                            Submitted::Refused,
                            Submitted::Transient,
                        ),
                    };
                    Answer {
                        step,
                        retry_after: exchange.retry_after,
                    }
                }
            }
        }

        async fn status(&self, id: &OrderId) -> Answer<Step<IssuedChain>> {
            let http_request = Request::builder()
                .method(Method::GET)
                .uri(format!("{}/orders/{id}", self.base))
                .body(Full::new(Bytes::new()));
            let http_request = match http_request {
                Ok(http_request) => http_request,
                Err(error) => {
                    return Answer::new(Step::Failed(format!(
                        "the status request does not build: {error}"
                    )));
                }
            };
            match self.exchange(http_request).await {
                Err(error) => Answer::new(Step::Transient(error)),
                Ok(exchange) => {
                    let step = match &exchange.body {
                        Ok(body) => read_order_status(exchange.status, body),
                        Err(error) => {
                            oversized(&exchange, error.clone(), Step::Failed, Step::Transient)
                        }
                    };
                    Answer {
                        step,
                        retry_after: exchange.retry_after,
                    }
                }
            }
        }
    }
}
