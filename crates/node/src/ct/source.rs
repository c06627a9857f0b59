//! Another RFC 6962 log, read over HTTP or HTTPS: what a mirror follows.
//!
//! Only the three reads a mirror needs (get-sth, get-entries, get-sth-consistency), each bounded
//! in time and in the size of the answer. HTTPS trusts the Mozilla root set compiled in (the
//! machine's own store may be absent in a container); nothing here trusts the answers — the
//! mirror checks every STH signature and every entry against a signed root.

use std::time::Duration;

use certus_core::ct::MirrorEntry;
use certus_ct::Hash;
use certus_ct::structures::SignedTreeHead;
use certus_ct::structures::json::{GetEntriesResponse, GetSthConsistencyResponse, GetSthResponse};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper::{StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::limits::CT_SOURCE_RESPONSE_BYTES_MAX;

/// How long one request to the source may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// An RFC 6962 log's read API.
#[derive(Debug, Clone)]
pub struct SourceLog {
    /// The base URL without a trailing slash; requests go to `<base>/ct/v1/<method>`.
    base: String,
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl SourceLog {
    /// A client for the log at `url` (`http://` or `https://`).
    pub fn new(url: &str) -> Result<SourceLog, String> {
        let base = url.trim_end_matches('/').to_owned();
        let uri: Uri = base
            .parse()
            .map_err(|error| format!("source URL {url:?} does not parse: {error}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(format!(
                "source URL {url:?} must be http:// or https:// with a host"
            ));
        }
        if uri.query().is_some() {
            return Err(format!("source URL {url:?} must not carry a query"));
        }
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|error| format!("TLS setup: {error}"))?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(SourceLog { base, client })
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// get-sth. The signature is not checked here.
    pub async fn get_sth(&self) -> Result<SignedTreeHead, String> {
        let body: GetSthResponse = self.get("get-sth").await?;
        SignedTreeHead::try_from(&body).map_err(|error| format!("get-sth: {error}"))
    }

    /// get-entries `start..=end`; a log may answer with fewer (never none).
    pub async fn get_entries(&self, start: u64, end: u64) -> Result<Vec<MirrorEntry>, String> {
        let body: GetEntriesResponse = self
            .get(&format!("get-entries?start={start}&end={end}"))
            .await?;
        let wanted = end.saturating_sub(start).saturating_add(1);
        if body.entries.is_empty() || body.entries.len() as u64 > wanted {
            return Err(format!(
                "get-entries {start}..={end} answered {} entries",
                body.entries.len()
            ));
        }
        Ok(body
            .entries
            .into_iter()
            .map(|entry| MirrorEntry {
                leaf_input: entry.leaf_input,
                extra_data: entry.extra_data,
            })
            .collect())
    }

    /// get-sth-consistency between `first` and `second`.
    pub async fn get_consistency(&self, first: u64, second: u64) -> Result<Vec<Hash>, String> {
        let body: GetSthConsistencyResponse = self
            .get(&format!(
                "get-sth-consistency?first={first}&second={second}"
            ))
            .await?;
        Ok(body.consistency)
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let url = format!("{}/ct/v1/{path}", self.base);
        let uri: Uri = url
            .parse()
            .map_err(|error| format!("{url}: does not parse: {error}"))?;
        let exchange = async {
            let response = self
                .client
                .get(uri)
                .await
                .map_err(|error| format!("{url}: {error}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), CT_SOURCE_RESPONSE_BYTES_MAX)
                .collect()
                .await
                .map_err(|error| format!("{url}: reading the answer: {error}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{url}: no answer within {REQUEST_TIMEOUT:?}"))??;
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            return Err(format!("{url}: HTTP {status}: {text}"));
        }
        serde_json::from_slice(&body).map_err(|error| format!("{url}: bad JSON: {error}"))
    }
}
