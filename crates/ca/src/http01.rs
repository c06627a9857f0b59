//! The HTTP-01 tester (RFC 8555 §8.3): is the key authorization served for a name?
//!
//! [`Http01Tester::test`] resolves the name, connects to port 80 (or where the
//! [`Resolver`] points), sends `GET /.well-known/acme-challenge/TOKEN` with `Host: NAME` over
//! plain HTTP/1.1, and is [`TestOutcome::Satisfied`] only if the answer is `200 OK` with a body
//! that, once whitespace at its end is removed (RFC 8555: the server SHOULD ignore it), equals
//! the key authorization byte for byte. Everything else is [`TestOutcome::NotSatisfied`] with a
//! reason that names the URL and what happened: the lookup failed, the connection was refused,
//! the time ran out (and in which step), the status was not 200, the body was too large or
//! different.
//!
//! **Redirects are not followed.** RFC 8555 §8.3 lets a server follow redirects (to HTTP or
//! HTTPS on ports 80 and 443); this tester does not support that: a 3xx answer is not
//! satisfied, and the reason says where it pointed.
//!
//! Bounds: one overall time limit for the whole test ([`Http01Config::timeout`], default
//! [`HTTP01_TIMEOUT_DEFAULT`]), at most
//! [`HTTP01_ADDRESSES_MAX`](crate::limits::HTTP01_ADDRESSES_MAX) addresses tried, and at most
//! [`Http01Config::body_bytes_max`] bytes of body read.
//!
//! The tester uses real sockets, so it exists only outside the simulation (`cfg(not(madsim))`);
//! the simulation supplies its own tester and can judge answers with the same rules through
//! [`judge`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::csr::valid_dns_name;
use crate::limits::{HTTP01_REASON_BYTES_MAX, HTTP01_TOKEN_BYTES_MAX};

/// How long one test may take, from the lookup to the last byte of the body.
pub const HTTP01_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// How much body is read by default: key authorizations are about 87 bytes.
pub const HTTP01_BODY_BYTES_MAX_DEFAULT: usize = 8 * 1024;
/// The port HTTP-01 uses (RFC 8555 §8.3).
pub const HTTP01_PORT: u16 = 80;
/// How much of a wrong body (or a refused name or token) a reason quotes.
const EXCERPT_BYTES: usize = 48;

/// Where a name's HTTP server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolver {
    /// The system's resolver (`tokio::net::lookup_host`), port [`HTTP01_PORT`].
    System,
    /// Only these names, each at its address (tests point names at loopback). A name not in
    /// the map is not satisfied. Keys are lowercase DNS names: the tester lowercases the name
    /// it tests before looking it up.
    Static(BTreeMap<String, SocketAddr>),
}

/// The tester's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Http01Config {
    /// Where names are.
    pub resolver: Resolver,
    /// The limit on one whole test. More than zero.
    pub timeout: Duration,
    /// The most body read; a larger body is not satisfied. 1 to
    /// [`HTTP01_BODY_BYTES_LIMIT`](crate::limits::HTTP01_BODY_BYTES_LIMIT).
    pub body_bytes_max: usize,
}

impl Default for Http01Config {
    /// The system resolver, [`HTTP01_TIMEOUT_DEFAULT`] and [`HTTP01_BODY_BYTES_MAX_DEFAULT`].
    fn default() -> Self {
        Self {
            resolver: Resolver::System,
            timeout: HTTP01_TIMEOUT_DEFAULT,
            body_bytes_max: HTTP01_BODY_BYTES_MAX_DEFAULT,
        }
    }
}

/// What a test found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TestOutcome {
    /// The key authorization is served.
    Satisfied,
    /// It is not; the reason says what happened, starting with the URL.
    NotSatisfied {
        /// What happened, on one line.
        reason: String,
    },
}

impl TestOutcome {
    /// Whether the challenge is satisfied.
    pub fn is_satisfied(&self) -> bool {
        matches!(self, Self::Satisfied)
    }
}

/// The URL a test fetches: `http://NAME/.well-known/acme-challenge/TOKEN`.
pub fn challenge_url(name: &str, token: &str) -> String {
    format!("http://{name}/.well-known/acme-challenge/{token}")
}

/// Judges an HTTP answer by the rules of RFC 8555 §8.3 as this tester applies them: status 200,
/// and the body without trailing whitespace equal to `key_authorization`. `location` is the
/// `Location` header of a redirect, if any, quoted in the reason. Pure, so the simulation's
/// tester judges the same way.
pub fn judge(
    url: &str,
    status: u16,
    location: Option<&str>,
    body: &[u8],
    key_authorization: &str,
) -> TestOutcome {
    let not = |reason: String| not_satisfied(format!("{url}: {reason}"));
    if (300..400).contains(&status) {
        let target = location.map_or_else(|| "nowhere".to_owned(), |l| format!("{l:?}"));
        return not(format!(
            "HTTP {status} redirects to {target}; this tester does not follow redirects, so \
             serve the key authorization at this URL directly"
        ));
    }
    if status != 200 {
        return not(format!(
            "{}; expected 200 with the key authorization as the body",
            status_text(status)
        ));
    }
    let trimmed = body.trim_ascii_end();
    if trimmed == key_authorization.as_bytes() {
        return TestOutcome::Satisfied;
    }
    not(format!(
        "the body is not the key authorization: got {} ({} bytes), expected {} ({} bytes)",
        excerpt(trimmed),
        trimmed.len(),
        excerpt(key_authorization.as_bytes()),
        key_authorization.len()
    ))
}

/// A [`TestOutcome::NotSatisfied`] whose reason is one line of at most
/// [`HTTP01_REASON_BYTES_MAX`]
/// bytes, as the state machine stores reasons.
fn not_satisfied(reason: String) -> TestOutcome {
    let mut reason: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if reason.len() > HTTP01_REASON_BYTES_MAX {
        let mut end = HTTP01_REASON_BYTES_MAX - '…'.len_utf8();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    TestOutcome::NotSatisfied { reason }
}

/// The first bytes of a body, quoted and escaped so they print on one line.
fn excerpt(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(EXCERPT_BYTES)];
    let mut text = format!("{:?}", String::from_utf8_lossy(shown));
    if shown.len() < bytes.len() {
        text.push('…');
    }
    text
}

fn status_text(status: u16) -> String {
    let text = match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => return format!("HTTP {status}"),
    };
    format!("HTTP {status} {text}")
}

/// Why a name or token cannot be tested at all, or `None` if both are fine. A token is the
/// base64url alphabet only (RFC 8555 §8.3), so it cannot change the path.
#[cfg_attr(madsim, allow(dead_code))] // used by the real tester only
fn refuse_input(name: &str, token: &str) -> Option<String> {
    if let Err(reason) = valid_dns_name(name) {
        return Some(format!(
            "{} is not a DNS name this tester can test: {reason}",
            excerpt(name.as_bytes())
        ));
    }
    if token.is_empty() || token.len() > HTTP01_TOKEN_BYTES_MAX {
        return Some(format!(
            "the token is {} bytes; expected 1 to {HTTP01_TOKEN_BYTES_MAX}",
            token.len()
        ));
    }
    if !token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Some(format!(
            "the token {} has characters outside the base64url alphabet (RFC 8555 §8.3)",
            excerpt(token.as_bytes())
        ));
    }
    None
}

#[cfg(not(madsim))]
pub use real::Http01Tester;

#[cfg(not(madsim))]
mod real {
    use std::net::SocketAddr;

    use http_body_util::{BodyExt as _, Empty, Limited};
    use hyper::body::Bytes;
    use hyper::client::conn::http1;
    use hyper::header::{CONNECTION, HOST, LOCATION, USER_AGENT};
    use hyper::{Method, Request};
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpStream;
    use tokio::time::{Instant, timeout_at};

    use super::{
        HTTP01_PORT, Http01Config, Resolver, TestOutcome, challenge_url, judge, not_satisfied,
        refuse_input,
    };
    use crate::limits::{HTTP01_ADDRESSES_MAX, HTTP01_BODY_BYTES_LIMIT};

    /// Tests HTTP-01 challenges over real sockets (see the module documentation).
    #[derive(Clone, Debug)]
    pub struct Http01Tester {
        config: Http01Config,
    }

    /// The spawned connection driver, stopped when the test ends however it ends.
    struct AbortOnDrop(tokio::task::JoinHandle<()>);

    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }

    impl Http01Tester {
        /// A tester with `config`.
        ///
        /// # Panics
        /// If `config.timeout` is zero or `config.body_bytes_max` is outside
        /// 1..=[`HTTP01_BODY_BYTES_LIMIT`]: a configuration error, found at startup.
        pub fn new(config: Http01Config) -> Self {
            assert!(!config.timeout.is_zero(), "the HTTP-01 timeout must be > 0");
            assert!(
                (1..=HTTP01_BODY_BYTES_LIMIT).contains(&config.body_bytes_max),
                "the HTTP-01 body limit must be 1 to {HTTP01_BODY_BYTES_LIMIT} bytes, not {}",
                config.body_bytes_max
            );
            Self { config }
        }

        /// The configuration.
        pub fn config(&self) -> &Http01Config {
            &self.config
        }

        /// Fetches `http://NAME/.well-known/acme-challenge/TOKEN` and compares the body with
        /// `key_authorization`. Never fails: every problem is a [`TestOutcome::NotSatisfied`]
        /// with its reason. Takes at most the configured timeout.
        pub async fn test(&self, name: &str, token: &str, key_authorization: &str) -> TestOutcome {
            let name = name.to_ascii_lowercase();
            if let Some(reason) = refuse_input(&name, token) {
                // Not the URL: a refused name or token may be long or hold anything.
                return not_satisfied(format!("not tested: {reason}"));
            }
            let url = challenge_url(&name, token);
            let deadline = Instant::now() + self.config.timeout;
            match self.fetch(&name, token, &url, deadline).await {
                Ok((status, location, body)) => {
                    judge(&url, status, location.as_deref(), &body, key_authorization)
                }
                Err(reason) => not_satisfied(format!("{url}: {reason}")),
            }
        }

        /// The status, `Location` header and body, or why there are none.
        async fn fetch(
            &self,
            name: &str,
            token: &str,
            url: &str,
            deadline: Instant,
        ) -> Result<(u16, Option<String>, Bytes), String> {
            let late = |step: &str| {
                format!(
                    "no answer within {:?} (timed out while {step})",
                    self.config.timeout
                )
            };
            let addresses = timeout_at(deadline, self.resolve(name))
                .await
                .map_err(|_| late("looking up the name"))??;
            let stream = timeout_at(deadline, connect(name, &addresses))
                .await
                .map_err(|_| late("connecting"))??;
            let peer = stream
                .peer_addr()
                .map_or_else(|_| "the server".to_owned(), |a| a.to_string());

            let (mut sender, connection) =
                timeout_at(deadline, http1::handshake(TokioIo::new(stream)))
                    .await
                    .map_err(|_| late("starting HTTP"))?
                    .map_err(|e| format!("HTTP with {peer} failed: {e}"))?;
            let _driver = AbortOnDrop(tokio::spawn(async move {
                // Errors surface through the request and body below.
                let _ = connection.await;
            }));

            let request = Request::builder()
                .method(Method::GET)
                .uri(format!("/.well-known/acme-challenge/{token}"))
                .header(HOST, name)
                .header(USER_AGENT, "certus-http01")
                .header(CONNECTION, "close")
                .body(Empty::<Bytes>::new())
                .map_err(|e| format!("the request for {url} cannot be built: {e}"))?;
            let response = timeout_at(deadline, sender.send_request(request))
                .await
                .map_err(|_| late("waiting for the response"))?
                .map_err(|e| format!("{peer} did not answer the request: {e}"))?;
            let status = response.status().as_u16();
            let location = response
                .headers()
                .get(LOCATION)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
            let limit = self.config.body_bytes_max;
            let body = timeout_at(
                deadline,
                Limited::new(response.into_body(), limit).collect(),
            )
            .await
            .map_err(|_| late("reading the body"))?
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    format!("the body is larger than {limit} bytes")
                } else {
                    format!("reading the body from {peer} failed: {e}")
                }
            })?
            .to_bytes();
            Ok((status, location, body))
        }

        async fn resolve(&self, name: &str) -> Result<Vec<SocketAddr>, String> {
            match &self.config.resolver {
                Resolver::Static(map) => map
                    .get(name)
                    .map(|address| vec![*address])
                    .ok_or_else(|| format!("no address is configured for {name}")),
                Resolver::System => {
                    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name, HTTP01_PORT))
                        .await
                        .map_err(|e| format!("looking up {name} failed: {e}"))?
                        .take(HTTP01_ADDRESSES_MAX)
                        .collect();
                    if addresses.is_empty() {
                        Err(format!("{name} has no address"))
                    } else {
                        Ok(addresses)
                    }
                }
            }
        }
    }

    /// A connection to the first address that accepts one, else every address's error.
    async fn connect(name: &str, addresses: &[SocketAddr]) -> Result<TcpStream, String> {
        let mut failures = Vec::new();
        for address in addresses {
            match TcpStream::connect(address).await {
                Ok(stream) => return Ok(stream),
                Err(e) => failures.push(format!("{address}: {e}")),
            }
        }
        Err(format!(
            "could not connect to {name} ({})",
            failures.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://a.example/.well-known/acme-challenge/t";

    #[test]
    fn judge_requires_200_and_the_exact_body_up_to_trailing_whitespace() {
        assert!(judge(URL, 200, None, b"ka.b", "ka.b").is_satisfied());
        assert!(judge(URL, 200, None, b"ka.b\r\n \t", "ka.b").is_satisfied());
        assert!(!judge(URL, 200, None, b" ka.b", "ka.b").is_satisfied());
        assert!(!judge(URL, 200, None, b"ka.bc", "ka.b").is_satisfied());
        assert!(!judge(URL, 201, None, b"ka.b", "ka.b").is_satisfied());
        let TestOutcome::NotSatisfied { reason } =
            judge(URL, 302, Some("https://x.example/"), b"", "ka.b")
        else {
            panic!("a redirect is not satisfied");
        };
        assert!(reason.contains("does not follow redirects"), "{reason}");
        assert!(reason.contains("https://x.example/"), "{reason}");
    }

    #[test]
    fn reasons_are_one_bounded_line() {
        let TestOutcome::NotSatisfied { reason } =
            not_satisfied(format!("a\nb{}", "é".repeat(600)))
        else {
            panic!("not satisfied");
        };
        assert!(reason.len() <= HTTP01_REASON_BYTES_MAX && reason.ends_with('…'));
        assert!(reason.starts_with("a b"));
    }

    #[test]
    fn tokens_and_names_that_could_change_the_request_are_refused() {
        assert_eq!(refuse_input("a.example", "abc_DEF-123"), None);
        assert!(refuse_input("a.example", "../x").is_some());
        assert!(refuse_input("a.example", "a b").is_some());
        assert!(refuse_input("a.example", "").is_some());
        assert!(refuse_input("a.example/x", "t").is_some());
        assert!(refuse_input("a.example:8080", "t").is_some());
    }
}
