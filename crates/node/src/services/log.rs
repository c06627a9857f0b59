//! `certus.v1.Log`: the CT log over gRPC, for programs (and the simulation, which has no HTTP).

use std::sync::Arc;

use certus_core::ct::{CtCommand, CtError, LogConfig};
use certus_core::limits::{CT_MIRROR_URL_BYTES_MAX, CT_PUBLIC_KEY_BYTES_MAX};
use certus_core::{Command, Response as CommandResponse};
use certus_ct::Hash;
use certus_ct::structures::SignedTreeHead;
use certus_proto::v1;
use certus_proto::v1::log_server::Log;
use tonic::{Code, Request, Response, Status};

use crate::ct::node::{CtNode, SubmitError};
use crate::ct::peers::PROXIED_KEY;
use crate::ct::reads::{GET_ENTRIES_MAX, Read, ReadError, ReadReply};
use crate::errors::status;
use crate::raft::replica::Replica;

/// The most entry bytes one GetEntries reply carries, under the client message limit.
const GET_ENTRIES_REPLY_BYTES_MAX: usize = crate::limits::CLIENT_MESSAGE_BYTES_MAX - 16 * 1024;

/// `certus.v1.Log` for one node.
#[derive(Debug, Clone)]
pub struct LogService {
    replica: Arc<Replica>,
    ct: Arc<CtNode>,
}

impl LogService {
    /// The log service of `replica`.
    pub fn new(replica: Arc<Replica>, ct: Arc<CtNode>) -> LogService {
        LogService { replica, ct }
    }

    async fn control(&self, command: CtCommand) -> Result<(), Status> {
        let mut responses = self.replica.write(vec![Command::Ct(command)]).await?;
        match responses.pop() {
            // A follower forwarded the write; the answer is built from this node's state, so
            // wait until it has applied the write too.
            Some(CommandResponse::Ct(Ok(_))) => Ok(self.replica.read_barrier().await?),
            Some(CommandResponse::Ct(Err(error))) => Err(ct_status(&error)),
            other => Err(status(
                Code::Internal,
                "internal",
                format!("unexpected answer: {other:?}"),
            )),
        }
    }

    /// Answers a read here, or forwards it when this node is behind, unless the request was
    /// itself forwarded.
    async fn read<T>(&self, request: &Request<T>, read: Read) -> Result<ReadReply, Status> {
        let may_proxy = !request.metadata().contains_key(PROXIED_KEY);
        self.ct
            .read(&self.replica, read, may_proxy)
            .await
            .map_err(read_status)
    }

    fn log_status(&self) -> Result<v1::LogStatus, Status> {
        let mut reply = self.replica.reader.read(|applied| {
            let state = &applied.state;
            let serving = state.ct_serving();
            v1::LogStatus {
                config: Some(config_to_proto(state.ct_config())),
                frozen: state.ct_frozen(),
                serving: serving.map(|s| core_sth_to_proto(&s.sth)),
                serving_published_at_ms: serving.map_or(0, |s| s.published_at_ms),
                next_sequence: state.ct_next_sequence(),
                unsequenced: state.ct_unsequenced_count() as u64,
                held: state.ct_held_count() as u64,
                reports: state
                    .ct_reports()
                    .iter()
                    .map(|(node, report)| v1::NodeReport {
                        node: *node,
                        sth: Some(core_sth_to_proto(&report.sth)),
                        contiguous_size: report.contiguous_size,
                        reported_at_ms: report.reported_at_ms,
                    })
                    .collect(),
                mirror: state.ct_mirror().map(|mirror| v1::MirrorStatus {
                    source_url: mirror.source.url.clone(),
                    source_public_key: mirror.source.public_key_der.clone(),
                    latest: mirror.latest.as_ref().map(core_sth_to_proto),
                    target_sizes: mirror.targets.keys().copied().collect(),
                    ..v1::MirrorStatus::default()
                }),
                ..v1::LogStatus::default()
            }
        });
        #[cfg(not(madsim))]
        if let Some(mirror) = reply.mirror.as_mut() {
            let progress = self.ct.mirror_progress();
            mirror.source_sth = progress.source_sth.as_ref().map(sth_to_proto).transpose()?;
            mirror.last_error = progress.last_error.unwrap_or_default();
        }
        reply.local_tree_size = self.ct.db().tree_size();
        reply.local_contiguous_size = self.ct.db().contiguous_size();
        reply.public_key = self.ct.public_key_der().to_vec();
        reply.log_id = certus_ct::sha256(self.ct.public_key_der()).to_vec();
        Ok(reply)
    }
}

/// The status for a refused CT command.
pub fn ct_status(error: &CtError) -> Status {
    let (code, reason) = match error {
        CtError::Backlog { .. } => (Code::ResourceExhausted, "backlog"),
        CtError::Frozen => (Code::FailedPrecondition, "frozen"),
        CtError::TooLarge { .. } | CtError::BatchTooLarge { .. } => {
            (Code::InvalidArgument, "too-large")
        }
        CtError::MalformedSubmission(_) => (Code::InvalidArgument, "invalid-argument"),
        CtError::InvalidConfig { .. } => (Code::InvalidArgument, "invalid-config"),
        CtError::IsMirror { .. } => (Code::FailedPrecondition, "mirror"),
        CtError::Mirror(_) => (Code::FailedPrecondition, "mirror-refused"),
        CtError::StaleSequence { .. }
        | CtError::NotSequenceable { .. }
        | CtError::BadReport { .. }
        | CtError::NotPublishable { .. } => (Code::FailedPrecondition, "refused"),
    };
    status(code, reason, error.to_string())
}

fn read_status(error: ReadError) -> Status {
    match error {
        ReadError::BadRequest(message) => {
            status(Code::InvalidArgument, "invalid-argument", message)
        }
        ReadError::NotFound(message) => status(Code::NotFound, "not-found", message),
        ReadError::Unavailable(message) => status(Code::Unavailable, "behind", message),
        ReadError::Internal(message) => status(Code::Internal, "internal", message),
    }
}

fn sth_to_proto(sth: &SignedTreeHead) -> Result<v1::SignedTreeHead, Status> {
    Ok(v1::SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        sha256_root_hash: sth.sha256_root_hash.to_vec(),
        tree_head_signature: sth
            .tree_head_signature
            .encode()
            .map_err(|error| status(Code::Internal, "internal", error.to_string()))?,
    })
}

fn core_sth_to_proto(sth: &certus_core::ct::SignedTreeHead) -> v1::SignedTreeHead {
    v1::SignedTreeHead {
        tree_size: sth.tree_size,
        timestamp_ms: sth.timestamp_ms,
        sha256_root_hash: sth.root_hash.to_vec(),
        tree_head_signature: sth.signature.clone(),
    }
}

fn config_to_proto(config: &LogConfig) -> v1::LogConfig {
    v1::LogConfig {
        min_serving_nodes: config.min_serving_nodes,
        min_serving_permille: config.min_serving_permille,
        unsequenced_watermark: config.unsequenced_watermark,
        guard_window_ms: config.guard_window_ms,
        signing_interval_ms: config.signing_interval_ms,
        sequencing_interval_ms: config.sequencing_interval_ms,
        report_ttl_ms: config.report_ttl_ms,
    }
}

fn config_from_proto(config: &v1::LogConfig) -> LogConfig {
    LogConfig {
        min_serving_nodes: config.min_serving_nodes,
        min_serving_permille: config.min_serving_permille,
        unsequenced_watermark: config.unsequenced_watermark,
        guard_window_ms: config.guard_window_ms,
        signing_interval_ms: config.signing_interval_ms,
        sequencing_interval_ms: config.sequencing_interval_ms,
        report_ttl_ms: config.report_ttl_ms,
    }
}

/// The leading `items` whose encoded sizes (as `bytes_of` estimates them) fit one reply: fewer
/// entries than asked is allowed (RFC 6962 §4.6), a reply over the message limit is not.
fn within_reply<T>(items: Vec<T>, bytes_of: impl Fn(&T) -> usize) -> Vec<T> {
    let mut bytes = 0usize;
    items
        .into_iter()
        .take_while(|item| {
            bytes += bytes_of(item);
            bytes <= GET_ENTRIES_REPLY_BYTES_MAX
        })
        .collect()
}

fn mismatch(reply: &ReadReply) -> Status {
    status(
        Code::Internal,
        "internal",
        format!("a read answered another kind of reply: {reply:?}"),
    )
}

fn hash_list(hashes: Vec<Hash>) -> Vec<Vec<u8>> {
    hashes.into_iter().map(|hash| hash.to_vec()).collect()
}

#[tonic::async_trait]
impl Log for LogService {
    async fn add_chain(
        &self,
        request: Request<v1::AddChainRequest>,
    ) -> Result<Response<v1::AddChainReply>, Status> {
        let request = request.into_inner();
        let sct = self
            .ct
            .submit(&self.replica, &request.chain, request.precertificate)
            .await
            .map_err(|error| match error {
                SubmitError::Chain(error) => {
                    status(Code::InvalidArgument, "bad-chain", error.to_string())
                }
                SubmitError::Refused(error) => ct_status(&error),
                SubmitError::Service(error) => error.into(),
                SubmitError::Signing(message) => status(Code::Internal, "internal", message),
            })?;
        let internal = |error: String| status(Code::Internal, "internal", error);
        Ok(Response::new(v1::AddChainReply {
            sct: sct.encode().map_err(|e| internal(e.to_string()))?,
            timestamp_ms: sct.timestamp_ms,
            log_id: sct.log_id.to_vec(),
            signature: sct
                .signature
                .encode()
                .map_err(|e| internal(e.to_string()))?,
            extensions: sct.extensions.clone(),
        }))
    }

    async fn get_sth(
        &self,
        request: Request<v1::GetSthRequest>,
    ) -> Result<Response<v1::SignedTreeHead>, Status> {
        match self.read(&request, Read::Sth).await? {
            ReadReply::Sth(sth) => Ok(Response::new(sth_to_proto(&sth)?)),
            other => Err(mismatch(&other)),
        }
    }

    async fn get_consistency(
        &self,
        request: Request<v1::GetConsistencyRequest>,
    ) -> Result<Response<v1::GetConsistencyReply>, Status> {
        let read = Read::Consistency {
            first: request.get_ref().first,
            second: request.get_ref().second,
        };
        match self.read(&request, read).await? {
            ReadReply::Consistency(proof) => Ok(Response::new(v1::GetConsistencyReply {
                consistency: hash_list(proof),
            })),
            other => Err(mismatch(&other)),
        }
    }

    async fn get_proof_by_hash(
        &self,
        request: Request<v1::GetProofByHashRequest>,
    ) -> Result<Response<v1::GetProofByHashReply>, Status> {
        let leaf_hash = Hash::try_from(request.get_ref().leaf_hash.as_slice()).map_err(|_| {
            status(
                Code::InvalidArgument,
                "invalid-argument",
                format!(
                    "leaf_hash must be 32 bytes, got {}",
                    request.get_ref().leaf_hash.len()
                ),
            )
        })?;
        let read = Read::ProofByHash {
            leaf_hash,
            tree_size: request.get_ref().tree_size,
        };
        match self.read(&request, read).await? {
            ReadReply::Proof {
                leaf_index,
                audit_path,
            } => Ok(Response::new(v1::GetProofByHashReply {
                leaf_index,
                audit_path: hash_list(audit_path),
            })),
            other => Err(mismatch(&other)),
        }
    }

    async fn get_entries(
        &self,
        request: Request<v1::GetEntriesRequest>,
    ) -> Result<Response<v1::GetEntriesReply>, Status> {
        let read = Read::Entries {
            start: request.get_ref().start,
            end: request.get_ref().end,
        };
        let entries = match self.read(&request, read).await? {
            ReadReply::Entries(entries) => entries,
            other => return Err(mismatch(&other)),
        };
        debug_assert!(entries.len() as u64 <= GET_ENTRIES_MAX);
        let entries: Vec<v1::LogEntry> = within_reply(entries, |(leaf_input, extra_data)| {
            leaf_input.len() + extra_data.len() + 16
        })
        .into_iter()
        .map(|(leaf_input, extra_data)| v1::LogEntry {
            leaf_input,
            extra_data,
        })
        .collect();
        if entries.is_empty() {
            return Err(status(
                Code::Internal,
                "internal",
                "one entry is larger than a reply may be",
            ));
        }
        Ok(Response::new(v1::GetEntriesReply { entries }))
    }

    async fn get_entry_and_proof(
        &self,
        request: Request<v1::GetEntryAndProofRequest>,
    ) -> Result<Response<v1::GetEntryAndProofReply>, Status> {
        let read = Read::EntryAndProof {
            leaf_index: request.get_ref().leaf_index,
            tree_size: request.get_ref().tree_size,
        };
        match self.read(&request, read).await? {
            ReadReply::EntryAndProof {
                entry: (leaf_input, extra_data),
                audit_path,
            } => Ok(Response::new(v1::GetEntryAndProofReply {
                entry: Some(v1::LogEntry {
                    leaf_input,
                    extra_data,
                }),
                audit_path: hash_list(audit_path),
            })),
            other => Err(mismatch(&other)),
        }
    }

    async fn fetch_entries(
        &self,
        request: Request<v1::FetchEntriesRequest>,
    ) -> Result<Response<v1::FetchEntriesReply>, Status> {
        let request = request.into_inner();
        let limit =
            usize::try_from(request.limit.min(crate::ct::peers::FETCH_BATCH)).unwrap_or(usize::MAX);
        let stored = self
            .ct
            .stored_entries(request.start, limit)
            .map_err(read_status)?;
        let entries = within_reply(stored, |entry| {
            entry.leaf_input.len() + entry.extra_data.len() + entry.sct.len() + 24
        })
        .into_iter()
        .map(|entry| v1::StoredEntry {
            leaf_input: entry.leaf_input,
            extra_data: entry.extra_data,
            sct: entry.sct,
            sct_timestamp_ms: entry.sct_timestamp_ms,
        })
        .collect();
        Ok(Response::new(v1::FetchEntriesReply { entries }))
    }

    async fn get_roots(
        &self,
        _request: Request<v1::GetRootsRequest>,
    ) -> Result<Response<v1::GetRootsReply>, Status> {
        Ok(Response::new(v1::GetRootsReply {
            certificates: self.ct.roots().certificates().to_vec(),
        }))
    }

    async fn status(
        &self,
        _request: Request<v1::LogStatusRequest>,
    ) -> Result<Response<v1::LogStatus>, Status> {
        Ok(Response::new(self.log_status()?))
    }

    async fn set_config(
        &self,
        request: Request<v1::SetLogConfigRequest>,
    ) -> Result<Response<v1::LogConfig>, Status> {
        let config = request.into_inner().config.ok_or_else(|| {
            status(
                Code::InvalidArgument,
                "invalid-argument",
                "config is required",
            )
        })?;
        let config = config_from_proto(&config);
        config.validate().map_err(|error| ct_status(&error))?;
        self.control(CtCommand::Configure(config)).await?;
        Ok(Response::new(config_to_proto(&config)))
    }

    async fn set_frozen(
        &self,
        request: Request<v1::SetFrozenRequest>,
    ) -> Result<Response<v1::LogStatus>, Status> {
        let frozen = request.into_inner().frozen;
        self.control(CtCommand::SetFrozen { frozen }).await?;
        Ok(Response::new(self.log_status()?))
    }

    async fn start_mirror(
        &self,
        request: Request<v1::StartMirrorRequest>,
    ) -> Result<Response<v1::LogStatus>, Status> {
        let request = request.into_inner();
        // The state machine's bounds, checked before anything is parsed, echoed or proposed.
        for (field, len, max) in [
            (
                "source_url",
                request.source_url.len(),
                CT_MIRROR_URL_BYTES_MAX,
            ),
            (
                "source_public_key",
                request.source_public_key.len(),
                CT_PUBLIC_KEY_BYTES_MAX,
            ),
        ] {
            if len > max {
                return Err(status(
                    Code::InvalidArgument,
                    "invalid-argument",
                    format!("{field}: {len} bytes; at most {max} are accepted"),
                ));
            }
        }
        // Refuse a key that cannot verify anything before it is replicated for good.
        certus_ct::signer::LogVerifier::from_public_key_der(&request.source_public_key).map_err(
            |error| {
                status(
                    Code::InvalidArgument,
                    "invalid-argument",
                    format!("source_public_key: {error}"),
                )
            },
        )?;
        let url = request.source_url.trim_end_matches('/').to_owned();
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(['?', '#'])
        {
            return Err(status(
                Code::InvalidArgument,
                "invalid-argument",
                format!("source_url must be an http:// or https:// base URL, not {url:?}"),
            ));
        }
        let source = certus_core::ct::MirrorSource {
            url,
            public_key_der: request.source_public_key,
        };
        self.control(CtCommand::StartMirror(source)).await?;
        Ok(Response::new(self.log_status()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_through_protobuf() {
        let config = LogConfig {
            min_serving_nodes: 3,
            min_serving_permille: 750,
            unsequenced_watermark: 5,
            guard_window_ms: 7,
            signing_interval_ms: 11,
            sequencing_interval_ms: 13,
            report_ttl_ms: 17,
        };
        assert_eq!(config_from_proto(&config_to_proto(&config)), config);
    }

    #[test]
    fn back_pressure_is_resource_exhausted() {
        let error = CtError::Backlog {
            unsequenced: 10,
            watermark: 10,
        };
        assert_eq!(ct_status(&error).code(), Code::ResourceExhausted);
        assert_eq!(ct_status(&CtError::Frozen).code(), Code::FailedPrecondition);
    }
}
