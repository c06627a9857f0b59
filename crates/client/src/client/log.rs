//! `certus.v1.Log`: RFC 6962's operations on the CT log, and the operator's controls. Its
//! writes are not numbered: `add_chain` is deduplicated by the leaf, and the controls set values.

use certus_proto::v1::log_client::LogClient;
use certus_proto::v1::{
    AddChainReply, AddChainRequest, GetConsistencyReply, GetConsistencyRequest, GetEntriesReply,
    GetEntriesRequest, GetProofByHashReply, GetProofByHashRequest, GetRootsReply, GetRootsRequest,
    GetSthRequest, LogConfig, LogStatus, LogStatusRequest, SetFrozenRequest, SetLogConfigRequest,
    SignedTreeHead, StartMirrorRequest,
};

use super::call::rpcs;
use crate::{Client, ClientError};

rpcs! { LogClient::new =>
    "Log/AddChain": add_chain(AddChainRequest) -> AddChainReply;
    "Log/GetSth": get_sth(GetSthRequest) -> SignedTreeHead;
    "Log/GetConsistency": get_consistency(GetConsistencyRequest) -> GetConsistencyReply;
    "Log/GetProofByHash": get_proof_by_hash(GetProofByHashRequest) -> GetProofByHashReply;
    "Log/GetEntries": get_entries(GetEntriesRequest) -> GetEntriesReply;
    "Log/GetRoots": get_roots(GetRootsRequest) -> GetRootsReply;
    "Log/Status": status(LogStatusRequest) -> LogStatus;
    "Log/SetConfig": set_config(SetLogConfigRequest) -> LogConfig;
    "Log/SetFrozen": set_frozen(SetFrozenRequest) -> LogStatus;
    "Log/StartMirror": start_mirror(StartMirrorRequest) -> LogStatus;
}

impl Client {
    /// Submits a certificate chain to the CT log, leaf first, DER each (RFC 6962 add-chain), or
    /// with `precertificate` a precertificate chain (add-pre-chain). Answers with the SCT once
    /// the entry is committed; a chain the log already has gets its original SCT, so a retry
    /// after an ambiguous failure is safe.
    ///
    /// Refusals include `bad-chain` (the chain fails a check, for example it does not lead to
    /// an accepted root), `frozen`, `backlog` (`RESOURCE_EXHAUSTED`: try later) and `too-large`.
    pub async fn add_chain(
        &self,
        chain: Vec<Vec<u8>>,
        precertificate: bool,
    ) -> Result<AddChainReply, ClientError> {
        self.call(AddChainRequest {
            chain,
            precertificate,
        })
        .await
    }

    /// The serving signed tree head (get-sth).
    ///
    /// Log reads are answered from the local tree of the node asked; a node that has not yet
    /// integrated the serving tree answers `UNAVAILABLE` with the reason `behind`, and the call
    /// moves on to another node. Before the first STH is published every node answers `behind`.
    pub async fn get_sth(&self) -> Result<SignedTreeHead, ClientError> {
        self.call(GetSthRequest {}).await
    }

    /// A consistency proof between the trees of sizes `first` and `second`, both at most the
    /// serving tree size (get-sth-consistency).
    pub async fn get_consistency(
        &self,
        first: u64,
        second: u64,
    ) -> Result<GetConsistencyReply, ClientError> {
        self.call(GetConsistencyRequest { first, second }).await
    }

    /// The index and audit path of the leaf whose Merkle leaf hash is `leaf_hash` (32 bytes),
    /// in the tree of size `tree_size` (get-proof-by-hash). `NOT_FOUND` if the tree does not
    /// hold it.
    pub async fn get_proof_by_hash(
        &self,
        leaf_hash: impl Into<Vec<u8>>,
        tree_size: u64,
    ) -> Result<GetProofByHashReply, ClientError> {
        self.call(GetProofByHashRequest {
            leaf_hash: leaf_hash.into(),
            tree_size,
        })
        .await
    }

    /// Entries `start..=end`, at most 1000 and never past the serving tree (get-entries; a
    /// shorter answer than asked is normal).
    pub async fn get_entries(&self, start: u64, end: u64) -> Result<GetEntriesReply, ClientError> {
        self.call(GetEntriesRequest { start, end }).await
    }

    /// The root certificates the log accepts chains up to, DER each (get-roots).
    pub async fn get_roots(&self) -> Result<GetRootsReply, ClientError> {
        self.call(GetRootsRequest {}).await
    }

    /// The log as the replicated state sees it (configuration, frozen, serving STH, sequencing
    /// backlog, every node's last report), with the local tree of the node that answered.
    pub async fn log_status(&self) -> Result<LogStatus, ClientError> {
        self.call(LogStatusRequest {}).await
    }

    /// [`Client::log_status`] of the node at `endpoint`, for its local tree. One attempt, never
    /// sent to another node.
    pub async fn log_status_of(&self, endpoint: &str) -> Result<LogStatus, ClientError> {
        let timeout = self.config().attempt_timeout;
        self.call_one(endpoint, timeout, LogStatusRequest {}).await
    }

    /// Replaces the log's cluster-wide configuration (every field; read it with
    /// [`Client::log_status`] first to change only some). Answers with the configuration in
    /// force; refused with `invalid-config` naming the first field out of range. Safe to
    /// repeat.
    pub async fn set_log_config(&self, config: LogConfig) -> Result<LogConfig, ClientError> {
        self.call(SetLogConfigRequest {
            config: Some(config),
        })
        .await
    }

    /// Freezes the log (`true`: no new entries are accepted, STHs are still served) or
    /// unfreezes it. Answers with the log's status afterwards. Safe to repeat.
    pub async fn set_frozen(&self, frozen: bool) -> Result<LogStatus, ClientError> {
        self.call(SetFrozenRequest { frozen }).await
    }

    /// Makes the (empty) log a mirror of the RFC 6962 log at `source_url` whose key is
    /// `source_public_key` (DER SubjectPublicKeyInfo), for good; on a mirror of the same key,
    /// changes the source's URL. Answers with the log's status afterwards. Safe to repeat.
    pub async fn start_mirror(
        &self,
        source_url: &str,
        source_public_key: &[u8],
    ) -> Result<LogStatus, ClientError> {
        self.call(StartMirrorRequest {
            source_url: source_url.to_owned(),
            source_public_key: source_public_key.to_vec(),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use crate::ClientError;
    use crate::client::call::testing::{assert_attempts, unreachable};

    #[tokio::test]
    async fn log_calls_follow_the_cluster_and_single_node_rules() {
        let client = unreachable(2, true);
        // Retried like every cluster call.
        assert_attempts(client.get_sth().await, 2, "get_sth");
        assert_attempts(
            client.add_chain(vec![vec![0x30]], false).await,
            2,
            "add_chain",
        );
        // One attempt at one node.
        assert_attempts(
            client.log_status_of("127.0.0.1:1").await,
            1,
            "log_status_of",
        );
        let error = client
            .log_status_of("not an endpoint")
            .await
            .expect_err("invalid");
        assert!(
            matches!(error, ClientError::InvalidEndpoint(_)),
            "{error:?}"
        );
    }
}
