//! `certus.v1.Clients`: the client session writes are numbered in — registered on the first
//! write, registered again when the cluster no longer knows it, closed on request.

use std::sync::Arc;

use certus_proto::v1::clients_client::ClientsClient;
use certus_proto::v1::{
    CloseClientReply, CloseClientRequest, RegisterClientReply, RegisterClientRequest,
};

use super::call::rpcs;
use crate::numbering::Numbering;
use crate::{Client, ClientError};

rpcs! { ClientsClient::new =>
    "Clients/Register": register(RegisterClientRequest) -> RegisterClientReply;
    "Clients/Close": close(CloseClientRequest) -> CloseClientReply;
}

impl Client {
    /// The id of this client's session (registered on first write), if it has one. Writes from
    /// clones of this client share it.
    pub async fn client_session_id(&self) -> Option<u64> {
        self.inner.session.lock().await.as_ref().map(|n| n.id())
    }

    /// Closes this client's session, if it has one: the cluster forgets the answers it kept for
    /// it. The next write registers a new session. Call it when a long-lived program stops
    /// writing; sessions left open expire on their own.
    pub async fn close_client_session(&self) -> Result<(), ClientError> {
        let Some(numbering) = self.inner.session.lock().await.take() else {
            return Ok(());
        };
        self.call(CloseClientRequest {
            client_id: numbering.id(),
        })
        .await?;
        Ok(())
    }

    /// This client's session, registered on first use.
    pub(super) async fn numbering(&self) -> Result<Arc<Numbering>, ClientError> {
        let mut session = self.inner.session.lock().await;
        if let Some(numbering) = session.as_ref() {
            return Ok(Arc::clone(numbering));
        }
        let reply = self.call(RegisterClientRequest {}).await?;
        tracing::debug!(client = reply.client_id, "client session registered");
        let numbering = Numbering::new(reply.client_id, reply.outstanding_max);
        *session = Some(Arc::clone(&numbering));
        Ok(numbering)
    }

    /// Drops `numbering` if it is still the current session, so the next write registers anew.
    pub(super) async fn forget_numbering(&self, numbering: &Arc<Numbering>) {
        let mut session = self.inner.session.lock().await;
        if session
            .as_ref()
            .is_some_and(|current| Arc::ptr_eq(current, numbering))
        {
            *session = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use certus_proto::v1::EnqueueRequest;

    use crate::client::call::testing::{assert_attempts, unreachable};

    #[tokio::test]
    async fn numbered_writes_register_first_and_are_retried_like_reads() {
        let client = unreachable(3, true);
        let enqueue = client
            .enqueue(EnqueueRequest {
                owner: "o".to_owned(),
                state: "{}".to_owned(),
                ..EnqueueRequest::default()
            })
            .await;
        // The registration is what failed, retried like any call; nothing was numbered.
        assert_attempts(enqueue, 3, "registration");
        assert_eq!(client.client_session_id().await, None);
    }
}
