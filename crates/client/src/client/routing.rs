//! Where calls go: one lazily connected channel per endpoint, the node preferred until an
//! attempt there fails (the leader, once found), and leader discovery through `Admin/Status`.

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use certus_proto::v1::{StatusReply, StatusRequest};
use tokio::time::Instant;

use crate::auth::{NodeChannel, node_channel};
use crate::{Client, ClientError, parse_endpoint};

/// What a client knows of where to send requests; shared by its clones.
#[derive(Debug, Default)]
pub(super) struct Routing {
    /// One lazily connected channel per endpoint used so far.
    channels: BTreeMap<String, NodeChannel>,
    /// Where requests go until an attempt there fails: the leader when known.
    preferred: Option<String>,
    /// Where the next leader discovery starts, so that successive discoveries spread out.
    cursor: usize,
}

impl Client {
    /// Where the client sends its next request without asking first (the leader, once it has
    /// been found), if it knows.
    pub fn preferred_endpoint(&self) -> Option<String> {
        self.routing().preferred.clone()
    }

    fn routing(&self) -> MutexGuard<'_, Routing> {
        // The routing is a cache; a panic elsewhere cannot leave it inconsistent.
        self.inner
            .routing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached channel to `endpoint`, created (without connecting) if there is none.
    pub(super) fn channel(&self, endpoint: &str) -> Result<NodeChannel, ClientError> {
        let mut routing = self.routing();
        if let Some(channel) = routing.channels.get(endpoint) {
            return Ok(channel.clone());
        }
        let config = self.config();
        let channel = crate::auth::endpoint(endpoint, config.tls.as_ref())?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .connect_lazy();
        let channel = node_channel(channel, config.token.as_ref().map(|token| token.0.as_str()))?;
        routing
            .channels
            .insert(endpoint.to_owned(), channel.clone());
        Ok(channel)
    }

    /// Drops the channel to `endpoint` after a transport failure: the next use reconnects.
    pub(super) fn forget_channel(&self, endpoint: &str) {
        self.routing().channels.remove(endpoint);
    }

    /// Stops preferring `endpoint` after a failed attempt there.
    pub(super) fn unprefer(&self, endpoint: &str) {
        let mut routing = self.routing();
        if routing.preferred.as_deref() == Some(endpoint) {
            routing.preferred = None;
        }
    }

    /// Prefers `endpoint` from now on, and returns it.
    fn prefer(&self, endpoint: &str) -> String {
        self.routing().preferred = Some(endpoint.to_owned());
        endpoint.to_owned()
    }

    /// After a success at `endpoint`: keep using it if nothing better is known.
    pub(super) fn settle(&self, endpoint: &str) {
        let mut routing = self.routing();
        if routing.preferred.is_none() {
            routing.preferred = Some(endpoint.to_owned());
        }
    }

    /// Where the next attempt goes: the preferred node, or whatever discovery finds.
    pub(super) async fn target(&self, avoid: Option<&str>, deadline: Instant) -> String {
        if let Some(preferred) = self.routing().preferred.clone() {
            return preferred;
        }
        self.discover(avoid, deadline).await
    }

    /// The endpoints in the order discovery asks them: from the cursor round, `avoid` last.
    fn discovery_order(&self, avoid: Option<&str>) -> Vec<String> {
        let endpoints = &self.inner.endpoints;
        let start = {
            let mut routing = self.routing();
            let start = routing.cursor % endpoints.len();
            routing.cursor = start + 1;
            start
        };
        let mut order: Vec<String> = endpoints[start..]
            .iter()
            .chain(&endpoints[..start])
            .cloned()
            .collect();
        if let Some(position) = order
            .iter()
            .position(|endpoint| Some(endpoint.as_str()) == avoid)
        {
            let avoided = order.remove(position);
            order.push(avoided);
        }
        order
    }

    /// Asks the nodes, one after another, who leads; returns where to send the next attempt
    /// (and prefers it from now on when it is the leader).
    async fn discover(&self, avoid: Option<&str>, deadline: Instant) -> String {
        let order = self.discovery_order(avoid);
        let mut fallback: Option<String> = None;
        for endpoint in &order {
            let Some(status) = self.probe(endpoint, deadline).await else {
                continue;
            };
            if status.leader_id == 0 || status.leader_grpc_addr.is_empty() {
                fallback.get_or_insert_with(|| endpoint.clone());
                continue;
            }
            if status.id == status.leader_id {
                return self.prefer(endpoint);
            }
            let leader = match parse_endpoint(&status.leader_grpc_addr) {
                Ok(leader) if Some(leader.as_str()) != avoid => leader,
                // A leader that just failed (news of its failure may not have reached this
                // node yet), or an address this client cannot use: ask the next node.
                _ => {
                    fallback.get_or_insert_with(|| endpoint.clone());
                    continue;
                }
            };
            if self.inner.endpoints.contains(&leader) {
                return self.prefer(&leader);
            }
            if !self.config().pin_to_endpoints && self.probe(&leader, deadline).await.is_some() {
                return self.prefer(&leader);
            }
            // The leader is elsewhere; this node answered and forwards writes to it.
            return endpoint.clone();
        }
        tracing::debug!(?avoid, "no node named a usable leader");
        match fallback {
            Some(endpoint) => endpoint,
            None => order[0].clone(),
        }
    }

    /// `Admin/Status` at `endpoint` for discovery; `None` if it does not answer in time.
    async fn probe(&self, endpoint: &str, deadline: Instant) -> Option<StatusReply> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let timeout = self.config().discovery_timeout.min(remaining);
        if timeout.is_zero() {
            return None;
        }
        self.attempt(endpoint, timeout, tonic::Request::new(StatusRequest {}))
            .await
            .ok()
            .map(tonic::Response::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use crate::Client;

    #[test]
    fn discovery_rotates_and_asks_the_avoided_endpoint_last() {
        let client = Client::new(["a:1", "b:2", "c:3"]).expect("client");
        assert_eq!(client.discovery_order(None), ["a:1", "b:2", "c:3"]);
        assert_eq!(client.discovery_order(None), ["b:2", "c:3", "a:1"]);
        assert_eq!(client.discovery_order(Some("a:1")), ["c:3", "b:2", "a:1"]);
        assert_eq!(
            client.discovery_order(Some("elsewhere:4")),
            ["a:1", "b:2", "c:3"]
        );
    }

    #[test]
    fn preference_follows_successes_and_failures() {
        let client = Client::new(["a:1", "b:2"]).expect("client");
        client.settle("b:2");
        assert_eq!(client.preferred_endpoint().as_deref(), Some("b:2"));
        client.settle("a:1");
        assert_eq!(client.preferred_endpoint().as_deref(), Some("b:2"), "kept");
        client.unprefer("a:1");
        assert_eq!(
            client.preferred_endpoint().as_deref(),
            Some("b:2"),
            "not the preferred"
        );
        client.unprefer("b:2");
        assert_eq!(client.preferred_endpoint(), None);
    }
}
