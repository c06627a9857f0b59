//! How every call is made, whatever its service: the [`Rpc`] a request type names, the
//! [`Budget`] of a call, one attempt at one node, and the retry loop across the cluster — with
//! the client session's number on every attempt of a write.

use std::time::Duration;

use tokio::time::Instant;
use tonic::{Response, Status};

use certus_proto::READ_INDEX_METADATA;

use crate::auth::NodeChannel;
use crate::error::{
    Disposition, NOTHING_PROPOSED, describe, disposition, may_have_taken_effect, reason_of,
};
use crate::limits::LONG_POLL_WAIT_MAX;
use crate::{Client, ClientError, ReadAt, parse_endpoint};

/// One gRPC method, named by its request type: a request of this type is sent with
/// [`Rpc::send`] and answered with a [`Rpc::Reply`] (a stream for streaming methods).
pub(super) trait Rpc: Clone + Send + 'static {
    /// What the method answers.
    type Reply;
    /// `Service/Method`, for logs.
    const NAME: &'static str;
    /// Sends `request` over `channel`.
    fn send(
        channel: NodeChannel,
        request: tonic::Request<Self>,
    ) -> impl Future<Output = Result<Response<Self::Reply>, Status>> + Send;
}

/// The methods of one service: its stub constructor, then one line per method in the form
/// `"Service/Method": method(Request) -> Reply;`, as in the `.proto` file.
macro_rules! rpcs {
    ($stub:path => $($name:literal: $method:ident($request:ty) -> $reply:ty;)+) => {$(
        impl $crate::client::call::Rpc for $request {
            type Reply = $reply;
            const NAME: &'static str = $name;
            fn send(
                channel: $crate::auth::NodeChannel,
                request: ::tonic::Request<Self>,
            ) -> impl Future<Output = Result<::tonic::Response<$reply>, ::tonic::Status>> + Send
            {
                async move { $stub(channel).$method(request).await }
            }
        }
    )+};
}
pub(super) use rpcs;

/// How long a call may take.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    attempt_timeout: Duration,
    deadline: Duration,
    /// The most attempts (at least one is made).
    max_attempts: u32,
    /// Retry only after answers that say nothing was proposed (`no-leader`): for writes that
    /// are not safe to repeat, where any other failure may have been applied.
    unproposed_only: bool,
}

impl Budget {
    /// The same budget for a call that must not be repeated: one attempt.
    pub(super) fn once(self) -> Budget {
        Budget {
            max_attempts: 1,
            ..self
        }
    }

    /// The same budget for a call that waits at the node for up to `wait`: each attempt, and
    /// the call, may take that much longer.
    pub(super) fn waiting(self, wait: Duration) -> Budget {
        Budget {
            attempt_timeout: self.attempt_timeout.saturating_add(wait),
            deadline: self.deadline.saturating_add(wait),
            ..self
        }
    }

    /// The same budget for a write that must not be applied twice: retried only when the node
    /// answered that nothing was proposed.
    pub(super) fn unproposed_only(self) -> Budget {
        Budget {
            unproposed_only: true,
            ..self
        }
    }
}

/// Why one attempt failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The endpoint cannot even be turned into a channel.
    Invalid(ClientError),
    /// The RPC failed with a status.
    Status(Disposition, Status),
    /// No answer within the attempt's timeout.
    TimedOut(Duration),
}

impl Client {
    /// The budget of most calls: the configured timeouts and attempts.
    pub(super) fn budget(&self) -> Budget {
        let config = self.config();
        Budget {
            attempt_timeout: config.attempt_timeout,
            deadline: config.deadline,
            max_attempts: config.max_attempts,
            unproposed_only: false,
        }
    }

    /// The budget of a membership change, whose attempts time out after
    /// [`crate::ClientConfig::admin_timeout`].
    pub(super) fn admin_budget(&self) -> Budget {
        let config = self.config();
        Budget {
            attempt_timeout: config.admin_timeout,
            deadline: config.deadline.max(config.admin_timeout),
            ..self.budget()
        }
    }

    /// A call to the cluster with the usual budget, unnumbered: a read, or a write that is safe
    /// to repeat by itself.
    pub(super) async fn call<R: Rpc>(&self, request: R) -> Result<R::Reply, ClientError> {
        self.call_with(self.budget(), request).await
    }

    /// [`Client::call`] with another budget.
    pub(super) async fn call_with<R: Rpc>(
        &self,
        budget: Budget,
        request: R,
    ) -> Result<R::Reply, ClientError> {
        self.retried(budget, || tonic::Request::new(request.clone()))
            .await
            .map(Response::into_inner)
    }

    /// A read with the usual budget, and the log index of the state that answered it (from
    /// its [`READ_INDEX_METADATA`] entry; `None` from a node that does not send one).
    pub(super) async fn read_at<R: Rpc>(
        &self,
        request: R,
    ) -> Result<ReadAt<R::Reply>, ClientError> {
        let response = self
            .retried(self.budget(), || tonic::Request::new(request.clone()))
            .await?;
        let index = response
            .metadata()
            .get(READ_INDEX_METADATA)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.parse().ok());
        Ok(ReadAt {
            value: response.into_inner(),
            index,
        })
    }

    /// A write with the usual budget; see [`Client::write_with`].
    pub(super) async fn write<R: Rpc>(&self, request: R) -> Result<R::Reply, ClientError> {
        self.write_with(self.budget(), request).await
    }

    /// A write: a numbered request of this client's session
    /// ([`crate::ClientConfig::exactly_once`]), so that it is applied at most once however often
    /// it is retried, and never after this client moved on from it; retried like any call.
    /// Without the session, `unnumbered` is the budget (writes that must not be applied twice
    /// are then retried less).
    pub(super) async fn write_with<R: Rpc>(
        &self,
        unnumbered: Budget,
        request: R,
    ) -> Result<R::Reply, ClientError> {
        if !self.config().exactly_once {
            return self.call_with(unnumbered, request).await;
        }
        let budget = Budget {
            unproposed_only: false,
            max_attempts: self.config().max_attempts,
            ..unnumbered
        };
        let mut registered_again = false;
        loop {
            let numbering = self.numbering().await?;
            let ticket = numbering.ticket().await;
            let result = self
                .retried(budget, || ticket.number().wrap(request.clone()))
                .await
                .map(Response::into_inner);
            // Answered or abandoned: either way the client moves past this number.
            drop(ticket);
            match result {
                // The session expired or was evicted (the request was not applied): open a new
                // one, once. A session outlives a call by far (minutes against seconds), so no
                // earlier attempt of this call can have been applied under the old one.
                Err(error) if error.reason() == "unknown-client" && !registered_again => {
                    registered_again = true;
                    self.forget_numbering(&numbering).await;
                }
                result => return result,
            }
        }
    }

    /// A read that waits at the node for up to `wait` (at most an hour): each attempt may take
    /// `wait` longer than usual, and the call too, and a retry only waits for what is left.
    /// `request` makes the request that waits so many milliseconds.
    pub(super) async fn long_poll<R: Rpc>(
        &self,
        wait: Duration,
        mut request: impl FnMut(u64) -> R,
    ) -> Result<R::Reply, ClientError> {
        let wait = wait.min(LONG_POLL_WAIT_MAX);
        let usual = self.budget();
        let budget = Budget {
            attempt_timeout: usual.attempt_timeout.saturating_add(wait),
            deadline: usual.deadline.saturating_add(wait),
            ..usual
        };
        let until = Instant::now() + wait;
        self.retried(budget, || {
            let left = until.saturating_duration_since(Instant::now());
            tonic::Request::new(request(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)))
        })
        .await
        .map(Response::into_inner)
    }

    /// One attempt at one node, whatever happens.
    pub(super) async fn call_one<R: Rpc>(
        &self,
        endpoint: &str,
        timeout: Duration,
        request: R,
    ) -> Result<R::Reply, ClientError> {
        let endpoint = parse_endpoint(endpoint)?;
        match self
            .attempt(&endpoint, timeout, tonic::Request::new(request))
            .await
        {
            Ok(reply) => Ok(reply.into_inner()),
            Err(Failure::Invalid(error)) => Err(error),
            Err(Failure::Status(Disposition::Transport, status)) => Err(ClientError::Unavailable {
                attempts: 1,
                last_error: describe(&endpoint, &status),
                last_reason: reason_of(&status).to_owned(),
                may_have_taken_effect: may_have_taken_effect(&status),
            }),
            Err(Failure::Status(_, status)) => Err(ClientError::from_status(&status)),
            Err(Failure::TimedOut(timeout)) => Err(ClientError::Unavailable {
                attempts: 1,
                last_error: format!("{endpoint}: no answer within {timeout:?}"),
                last_reason: String::new(),
                may_have_taken_effect: true,
            }),
        }
    }

    /// One RPC to one endpoint, within `timeout`; the answer with its metadata.
    pub(super) async fn attempt<R: Rpc>(
        &self,
        endpoint: &str,
        timeout: Duration,
        request: tonic::Request<R>,
    ) -> Result<Response<R::Reply>, Failure> {
        let channel = self.channel(endpoint).map_err(Failure::Invalid)?;
        match tokio::time::timeout(timeout, R::send(channel, request)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(status)) => {
                let disposition = disposition(&status);
                if disposition == Disposition::Transport {
                    self.forget_channel(endpoint);
                }
                Err(Failure::Status(disposition, status))
            }
            Err(_elapsed) => {
                self.forget_channel(endpoint);
                Err(Failure::TimedOut(timeout))
            }
        }
    }

    /// A call to the cluster: to the preferred node, then to others, with backoff, until it
    /// is served, refused, or the deadline or the attempts run out. `request` makes each
    /// attempt's request.
    async fn retried<R: Rpc>(
        &self,
        budget: Budget,
        mut request: impl FnMut() -> tonic::Request<R>,
    ) -> Result<Response<R::Reply>, ClientError> {
        let rpc = R::NAME;
        let deadline = Instant::now() + budget.deadline;
        let max_attempts = budget.max_attempts.max(1);
        let mut attempts: u32 = 0;
        let mut last_error = String::from("the deadline passed before any attempt");
        let mut last_reason = String::new();
        // Whether some attempt may have taken effect (each failed one is sorted below).
        let mut any_effect = false;
        let mut avoid: Option<String> = None;
        loop {
            if Instant::now() >= deadline {
                break;
            }
            let target = self.target(avoid.as_deref(), deadline).await;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            attempts += 1;
            let timeout = budget.attempt_timeout.min(remaining);
            match self.attempt(&target, timeout, request()).await {
                Ok(reply) => {
                    self.settle(&target);
                    return Ok(reply);
                }
                Err(Failure::Invalid(error)) => return Err(error),
                Err(Failure::Status(Disposition::Refuse, status)) => {
                    return Err(ClientError::from_status(&status));
                }
                Err(Failure::Status(_, status)) => {
                    last_error = describe(&target, &status);
                    last_reason = reason_of(&status).to_owned();
                    any_effect |= may_have_taken_effect(&status);
                }
                Err(Failure::TimedOut(timeout)) => {
                    last_error = format!("{target}: no answer within {timeout:?}");
                    last_reason.clear();
                    any_effect = true;
                }
            }
            tracing::debug!(rpc, attempts, error = %last_error, "attempt failed");
            if budget.unproposed_only && last_reason != NOTHING_PROPOSED {
                // The write may have been applied: repeating it could apply it twice.
                self.unprefer(&target);
                break;
            }
            self.unprefer(&target);
            avoid = Some(target);
            if attempts >= max_attempts {
                break;
            }
            let wait = self.config().backoff(attempts - 1);
            if wait >= deadline.saturating_duration_since(Instant::now()) {
                break;
            }
            tokio::time::sleep(wait).await;
        }
        Err(ClientError::Unavailable {
            attempts,
            last_error,
            last_reason,
            may_have_taken_effect: any_effect,
        })
    }
}

/// What the tests of every service's calls build on: a cluster where nothing listens.
#[cfg(test)]
pub(super) mod testing {
    use std::time::Duration;

    use crate::{Client, ClientConfig, ClientError};

    /// A client of one endpoint where nothing listens (port 1 on loopback: every connection is
    /// refused at once) that makes up to `max_attempts` attempts a call, with almost no
    /// backoff; its writes are numbered if `exactly_once`.
    pub(in crate::client) fn unreachable(max_attempts: u32, exactly_once: bool) -> Client {
        let config = ClientConfig {
            max_attempts,
            backoff_initial: Duration::from_millis(1),
            exactly_once,
            ..ClientConfig::default()
        };
        Client::with_config(["127.0.0.1:1"], config).expect("client")
    }

    /// Asserts that a call gave up as unavailable after `attempts` attempts.
    pub(in crate::client) fn assert_attempts<T: std::fmt::Debug>(
        result: Result<T, ClientError>,
        attempts: u32,
        what: &str,
    ) {
        let error = result.expect_err("nothing listens");
        assert!(
            matches!(error, ClientError::Unavailable { attempts: made, .. } if made == attempts),
            "{what}: expected {attempts} attempt(s), got {error:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::testing::{assert_attempts, unreachable};
    use crate::{Client, ClientConfig, ClientError};

    #[tokio::test]
    async fn an_unreachable_node_is_reported_after_one_attempt() {
        let client = unreachable(3, true);
        assert_attempts(client.status_of("127.0.0.1:1").await, 1, "one node");
    }

    #[tokio::test]
    async fn a_cluster_call_gives_up_at_its_deadline() {
        let config = ClientConfig {
            deadline: Duration::from_millis(400),
            ..ClientConfig::default()
        };
        let client = Client::with_config(["127.0.0.1:1", "127.0.0.1:2"], config).expect("client");
        let started = std::time::Instant::now();
        let error = client.get_lease("x").await.expect_err("nothing listens");
        let ClientError::Unavailable {
            attempts,
            last_error,
            ..
        } = error
        else {
            panic!("expected unavailable, got {error:?}");
        };
        assert!(
            attempts >= 2,
            "retried: {attempts} attempts, last {last_error}"
        );
        assert!(last_error.contains("127.0.0.1:"), "{last_error}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_write_whose_connections_never_opened_certainly_took_no_effect() {
        for exactly_once in [true, false] {
            let error = unreachable(2, exactly_once)
                .release("lease", "holder")
                .await
                .expect_err("nothing listens");
            assert!(
                matches!(
                    error,
                    ClientError::Unavailable {
                        may_have_taken_effect: false,
                        ..
                    }
                ),
                "exactly_once {exactly_once}: {error:?}"
            );
        }
    }

    #[tokio::test]
    async fn attempts_are_bounded() {
        assert_attempts(unreachable(3, true).status().await, 3, "status");
    }
}
