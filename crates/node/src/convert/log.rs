//! `certus.v1.Log`: the CT log over gRPC — its control writes validated into CT commands, the
//! RFC 6962 reads' answers, submissions' outcomes, and the log's status for the wire.

use certus_core::State;
use certus_core::ct::{CtCommand, CtError, LogConfig, MirrorSource};
use certus_core::limits::{
    CT_DEDUPE_WINDOW_ENTRIES_MAX, CT_MIRROR_URL_BYTES_MAX, CT_PUBLIC_KEY_BYTES_MAX,
};
use certus_ct::Hash;
use certus_ct::structures::{SignedCertificateTimestamp, SignedTreeHead};
use certus_proto::v1;
use tonic::{Code, Status};

use crate::ct::node::SubmitError;
use crate::ct::reads::{ReadError, ReadReply};
use crate::errors::{ct_status, status};

use crate::limits::GET_ENTRIES_REPLY_BYTES_MAX;

// ---- submissions --------------------------------------------------------------------------

/// The status for a submission that was not logged.
pub fn submit_status(error: SubmitError) -> Status {
    match error {
        SubmitError::Chain(error) => status(Code::InvalidArgument, "bad-chain", error.to_string()),
        SubmitError::Refused(error) => ct_status(&error),
        SubmitError::Service(error) => error.into(),
        SubmitError::Signing(message) => status(Code::Internal, "internal", message),
    }
}

/// `AddChain`'s reply: the SCT the log signed.
pub fn added(sct: &SignedCertificateTimestamp) -> Result<v1::AddChainReply, Status> {
    let internal = |error: String| status(Code::Internal, "internal", error);
    Ok(v1::AddChainReply {
        sct: sct.encode().map_err(|e| internal(e.to_string()))?,
        timestamp_ms: sct.timestamp_ms,
        log_id: sct.log_id.to_vec(),
        signature: sct
            .signature
            .encode()
            .map_err(|e| internal(e.to_string()))?,
        extensions: sct.extensions.clone(),
    })
}

// ---- the control writes -------------------------------------------------------------------

/// `SetConfig`: the configuration, validated (proposed as [`CtCommand::Configure`]), and the
/// dedupe window if one is given (proposed as [`CtCommand::SetDedupeWindow`]).
pub fn set_config(request: v1::SetLogConfigRequest) -> Result<(LogConfig, Option<u64>), Status> {
    let config = request.config.ok_or_else(|| {
        status(
            Code::InvalidArgument,
            "invalid-argument",
            "config is required",
        )
    })?;
    let dedupe_window_entries = config.dedupe_window_entries;
    let config = config_from_proto(&config);
    config.validate().map_err(|error| ct_status(&error))?;
    if let Some(entries) = dedupe_window_entries
        && entries > CT_DEDUPE_WINDOW_ENTRIES_MAX
    {
        return Err(ct_status(&CtError::InvalidConfig {
            field: "dedupe_window_entries".to_owned(),
            reason: format!("{entries} is outside 0..={CT_DEDUPE_WINDOW_ENTRIES_MAX}"),
        }));
    }
    Ok((config, dedupe_window_entries))
}

/// `SetFrozen`.
pub fn set_frozen(request: v1::SetFrozenRequest) -> CtCommand {
    CtCommand::SetFrozen {
        frozen: request.frozen,
    }
}

/// `StartMirror`: the state machine's bounds checked before anything is parsed, echoed or
/// proposed, then the key (one that cannot verify anything is refused before it is replicated
/// for good) and the URL.
pub fn start_mirror(request: v1::StartMirrorRequest) -> Result<CtCommand, Status> {
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
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(['?', '#']) {
        return Err(status(
            Code::InvalidArgument,
            "invalid-argument",
            format!("source_url must be an http:// or https:// base URL, not {url:?}"),
        ));
    }
    Ok(CtCommand::StartMirror(MirrorSource {
        url,
        public_key_der: request.source_public_key,
    }))
}

// ---- the reads ----------------------------------------------------------------------------

/// The status for a read that was not answered.
pub fn read_status(error: ReadError) -> Status {
    match error {
        ReadError::BadRequest(message) => {
            status(Code::InvalidArgument, "invalid-argument", message)
        }
        ReadError::NotFound(message) => status(Code::NotFound, "not-found", message),
        ReadError::Unavailable(message) => status(Code::Unavailable, "behind", message),
        ReadError::Internal(message) => status(Code::Internal, "internal", message),
    }
}

/// A leaf hash from a request: 32 bytes.
pub fn leaf_hash(bytes: &[u8]) -> Result<Hash, Status> {
    Hash::try_from(bytes).map_err(|_| {
        status(
            Code::InvalidArgument,
            "invalid-argument",
            format!("leaf_hash must be 32 bytes, got {}", bytes.len()),
        )
    })
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

/// `GetSth`'s reply.
pub fn sth(reply: ReadReply) -> Result<v1::SignedTreeHead, Status> {
    match reply {
        ReadReply::Sth(sth) => sth_to_proto(&sth),
        other => Err(mismatch(&other)),
    }
}

/// `GetConsistency`'s reply.
pub fn consistency(reply: ReadReply) -> Result<v1::GetConsistencyReply, Status> {
    match reply {
        ReadReply::Consistency(proof) => Ok(v1::GetConsistencyReply {
            consistency: hash_list(proof),
        }),
        other => Err(mismatch(&other)),
    }
}

/// `GetProofByHash`'s reply.
pub fn proof(reply: ReadReply) -> Result<v1::GetProofByHashReply, Status> {
    match reply {
        ReadReply::Proof {
            leaf_index,
            audit_path,
        } => Ok(v1::GetProofByHashReply {
            leaf_index,
            audit_path: hash_list(audit_path),
        }),
        other => Err(mismatch(&other)),
    }
}

/// `GetEntries`' reply: as many of the entries read as fit one reply (at least one).
pub fn entries(reply: ReadReply) -> Result<v1::GetEntriesReply, Status> {
    let entries = match reply {
        ReadReply::Entries(entries) => entries,
        other => return Err(mismatch(&other)),
    };
    debug_assert!(entries.len() as u64 <= crate::ct::reads::GET_ENTRIES_MAX);
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
    Ok(v1::GetEntriesReply { entries })
}

/// `GetEntryAndProof`'s reply.
pub fn entry_and_proof(reply: ReadReply) -> Result<v1::GetEntryAndProofReply, Status> {
    match reply {
        ReadReply::EntryAndProof {
            entry: (leaf_input, extra_data),
            audit_path,
        } => Ok(v1::GetEntryAndProofReply {
            entry: Some(v1::LogEntry {
                leaf_input,
                extra_data,
            }),
            audit_path: hash_list(audit_path),
        }),
        other => Err(mismatch(&other)),
    }
}

/// `FetchEntries`' reply: as many of the stored entries as fit one reply.
pub fn fetched(stored: Vec<certus_store::LocalEntry>) -> v1::FetchEntriesReply {
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
    v1::FetchEntriesReply { entries }
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

// ---- the log's status ---------------------------------------------------------------------

/// `Status` as the replicated state has it; the node adds what is its own (its local tree, its
/// key, a mirror's progress).
pub fn log_status(state: &State) -> v1::LogStatus {
    let serving = state.ct_serving();
    v1::LogStatus {
        config: Some(log_config_to_proto(state)),
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
        dedupe_forgotten_below: state.ct_dedupe().forgotten_below,
        ..v1::LogStatus::default()
    }
}

/// A signed tree head for the wire.
pub fn sth_to_proto(sth: &SignedTreeHead) -> Result<v1::SignedTreeHead, Status> {
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

config_both_ways!(
    LogConfig,
    v1::LogConfig,
    config_to_proto,
    config_from_proto,
    [
        min_serving_nodes,
        min_serving_permille,
        unsequenced_watermark,
        guard_window_ms,
        signing_interval_ms,
        sequencing_interval_ms,
        report_ttl_ms,
    ],
    wire_only: [dedupe_window_entries]
);

/// The log's configuration as the state has it, with its dedupe window.
pub fn log_config_to_proto(state: &State) -> v1::LogConfig {
    v1::LogConfig {
        dedupe_window_entries: Some(state.ct_dedupe().entries),
        ..config_to_proto(state.ct_config())
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
}
