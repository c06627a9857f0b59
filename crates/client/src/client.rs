//! The client: the [`Client`] type and how it is built. Its methods live with their service, one
//! module each; every one of them goes through the call machinery in `call` (the retry loop,
//! budgets, numbered writes), which sends where `routing` says (channels, the preferred node,
//! leader discovery). A worker's `Work` stream is a handle of its own, `work`.

use std::sync::{Arc, Mutex};

pub use session_worker::{Closing, SessionWorkEventKind, SessionWorker};

use crate::numbering::Numbering;
use crate::{ClientConfig, ClientError, parse_endpoint};

mod admin;
mod call;
mod clients;
mod health;
mod leases;
mod log;
mod pipelines;
mod routing;
mod session_worker;
mod sessions;
mod work;

pub use work::WorkStream;

/// A read's answer, and the Raft log index of the state the node read it from (the answer's
/// `certus-read-index` metadata entry; `None` if the node sent none). Of two reads where one
/// began after the other was answered, the later one's index is never lower, on any node:
/// a program can compare what it read from different nodes, or from different leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadAt<T> {
    /// The answer.
    pub value: T,
    /// The log index of the state it was read from.
    pub index: Option<u64>,
}

/// A client of one Certus cluster.
///
/// Cheap to clone: clones share their connections and what they know of the leader. See the
/// [crate documentation](crate) for where requests go and when they are retried.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The configured endpoints, normalised, without duplicates; never empty.
    endpoints: Vec<String>,
    config: ClientConfig,
    routing: Mutex<routing::Routing>,
    /// The client session its writes are numbered in, once registered
    /// ([`ClientConfig::exactly_once`]). Registration happens once, whoever asks first.
    session: Arc<tokio::sync::Mutex<Option<Arc<Numbering>>>>,
}

impl Client {
    /// A client of the cluster these endpoints (`host:port`, see [`parse_endpoint`]) belong
    /// to, with the default [`ClientConfig`]. No connection is made until the first call.
    pub fn new<I, S>(endpoints: I) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::with_config(endpoints, ClientConfig::default())
    }

    /// A client with a chosen configuration. Fails if no endpoint is given or one is not of
    /// the form `host:port`; duplicates are dropped.
    pub fn with_config<I, S>(endpoints: I, config: ClientConfig) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut parsed: Vec<String> = Vec::new();
        for endpoint in endpoints {
            let endpoint = parse_endpoint(endpoint.as_ref())?;
            if !parsed.contains(&endpoint) {
                parsed.push(endpoint);
            }
        }
        if parsed.is_empty() {
            return Err(ClientError::InvalidEndpoint(
                "list: none given; a client needs at least one host:port".to_owned(),
            ));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints: parsed,
                config,
                routing: Mutex::default(),
                session: Arc::default(),
            }),
        })
    }

    /// A client of the same cluster through other endpoints or with another configuration that
    /// numbers its writes in `other`'s client session, as one client: a program that talks to
    /// each node through its own client (pinned to it) still has one sequence of requests, so a
    /// request abandoned on one node is never applied after a later one made through another.
    pub fn sharing_session_with<I, S>(
        endpoints: I,
        config: ClientConfig,
        other: &Client,
    ) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let client = Client::with_config(endpoints, config)?;
        let inner = Arc::try_unwrap(client.inner).expect("a new client is not shared yet");
        Ok(Client {
            inner: Arc::new(Inner {
                session: Arc::clone(&other.inner.session),
                ..inner
            }),
        })
    }

    /// The configured endpoints, normalised, in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_needs_valid_endpoints() {
        let error = Client::new(Vec::<String>::new()).expect_err("no endpoints");
        assert!(
            matches!(error, ClientError::InvalidEndpoint(_)),
            "{error:?}"
        );
        let error = Client::new(["127.0.0.1:7101", "nope"]).expect_err("a bad endpoint");
        assert!(
            matches!(error, ClientError::InvalidEndpoint(ref message) if message.contains("nope"))
        );
    }

    #[test]
    fn endpoints_are_normalised_and_deduplicated_in_order() {
        let client = Client::new([
            "127.0.0.1:7102",
            "http://127.0.0.1:7101",
            " 127.0.0.1:7102 ",
            "127.0.0.1:7103",
        ])
        .expect("client");
        assert_eq!(
            client.endpoints(),
            ["127.0.0.1:7102", "127.0.0.1:7101", "127.0.0.1:7103"]
        );
        assert_eq!(client.preferred_endpoint(), None);
    }
}
