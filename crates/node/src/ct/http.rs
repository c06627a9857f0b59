//! RFC 6962 §4 over HTTP, under `/ct/v1/`: what existing CT clients and monitors speak.
//!
//! Reads are answered from this node's local tree at the serving STH (never past it); bad
//! parameters get a 400 with a JSON body naming what was wrong, and so does a query string that
//! does not parse; a body past [`ADD_CHAIN_BODY_BYTES_MAX`] gets a 413 with a JSON body, and one
//! that does not arrive within the listener's body deadline a 408 with a JSON body. One
//! get-entries answers at most [`GET_ENTRIES_MAX`](crate::limits::GET_ENTRIES_MAX) entries and
//! [`CT_HTTP_GET_ENTRIES_BYTES_MAX`] bytes of them (after at least one). A node that has not integrated
//! the serving tree answers 503 with a `Retry-After`, so a client (or a load balancer) moves on
//! to a node that can serve.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use certus_core::ct::CtError;
use certus_ct::Hash;
use certus_ct::structures::json::{
    AddChainRequest, AddChainResponse, GetEntriesResponse, GetEntryAndProofResponse,
    GetProofByHashResponse, GetRootsResponse, GetSthConsistencyResponse, GetSthResponse, LeafEntry,
};
use certus_ct::structures::{ExtraData, LogEntryType, MerkleTreeLeaf};
use serde::Deserialize;
use serde_json::json;

use crate::ct::node::{CtNode, SubmitError};
use crate::ct::reads::{Read, ReadError, ReadReply, ServedEntry};
use crate::limits::{ADD_CHAIN_BODY_BYTES_MAX, CT_HTTP_GET_ENTRIES_BYTES_MAX};
use crate::raft::replica::Replica;

type CtState = (Arc<Replica>, Arc<CtNode>);

/// The `/ct/v1/` routes.
pub fn router(replica: Arc<Replica>, ct: Arc<CtNode>) -> Router {
    Router::new()
        .route("/ct/v1/add-chain", post(add_chain))
        .route("/ct/v1/add-pre-chain", post(add_pre_chain))
        .route("/ct/v1/get-sth", get(get_sth))
        .route("/ct/v1/get-sth-consistency", get(get_sth_consistency))
        .route("/ct/v1/get-proof-by-hash", get(get_proof_by_hash))
        .route("/ct/v1/get-entries", get(get_entries))
        .route("/ct/v1/get-roots", get(get_roots))
        .route("/ct/v1/get-entry-and-proof", get(get_entry_and_proof))
        .layer(axum::extract::DefaultBodyLimit::max(
            ADD_CHAIN_BODY_BYTES_MAX,
        ))
        .with_state((replica, ct))
}

fn error_body(code: StatusCode, error: &str, message: impl Into<String>) -> Response {
    (
        code,
        axum::Json(json!({ "error": error, "message": message.into() })),
    )
        .into_response()
}

fn bad_request(message: impl Into<String>) -> Response {
    error_body(StatusCode::BAD_REQUEST, "bad-request", message)
}

/// A body that could not be read, as a JSON error: 413 past [`ADD_CHAIN_BODY_BYTES_MAX`], 408
/// when it did not arrive within the listener's body deadline (`[http] body_read_timeout_ms`).
fn body_rejected(rejection: &BytesRejection) -> Response {
    if crate::errors::is_body_timeout(rejection) {
        return error_body(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request body did not arrive in time (http.body_read_timeout_ms)",
        );
    }
    let code = rejection.status();
    if code == StatusCode::PAYLOAD_TOO_LARGE {
        error_body(
            code,
            "too-large",
            format!("the body is larger than {ADD_CHAIN_BODY_BYTES_MAX} bytes, the most accepted"),
        )
    } else {
        error_body(code, "bad-request", rejection.body_text())
    }
}

/// A query string that does not parse (a parameter given twice, bad percent-encoding), as a JSON
/// 400 like every other bad parameter.
fn query_rejected(rejection: &QueryRejection) -> Response {
    bad_request(rejection.body_text())
}

fn unavailable(message: impl Into<String>) -> Response {
    let mut response = error_body(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn internal(message: impl Into<String>) -> Response {
    error_body(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

fn json_body<T: serde::Serialize>(value: &T) -> Response {
    axum::Json(value).into_response()
}

async fn add_chain(
    state: State<CtState>,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => submit(state, &body, false).await,
        Err(rejection) => body_rejected(&rejection),
    }
}

async fn add_pre_chain(
    state: State<CtState>,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => submit(state, &body, true).await,
        Err(rejection) => body_rejected(&rejection),
    }
}

async fn submit(State((replica, ct)): State<CtState>, body: &[u8], precert: bool) -> Response {
    let request: AddChainRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => {
            return bad_request(format!(
                "the body must be {{\"chain\": [base64 DER certificates]}}: {error}"
            ));
        }
    };
    match ct.submit(&replica, &request.chain, precert).await {
        Ok(sct) => match AddChainResponse::try_from(&sct) {
            Ok(response) => json_body(&response),
            Err(error) => internal(error.to_string()),
        },
        Err(error) => submit_error(error),
    }
}

/// A submission that was not logged: 400 for what the submitter must change (the chain, an
/// entry past the state machine's size bounds), 403 for a mirror, 503 with `Retry-After` for
/// what passes (back-pressure, a frozen log, no leader).
fn submit_error(error: SubmitError) -> Response {
    match error {
        SubmitError::Chain(error) => bad_request(error.to_string()),
        SubmitError::Refused(
            error @ (CtError::TooLarge { .. }
            | CtError::BatchTooLarge { .. }
            | CtError::MalformedSubmission(_)),
        ) => bad_request(error.to_string()),
        // A mirror takes no submissions, now or later: not a reason to retry.
        SubmitError::Refused(error @ CtError::IsMirror { .. }) => {
            error_body(StatusCode::FORBIDDEN, "mirror", error.to_string())
        }
        SubmitError::Refused(error) => unavailable(error.to_string()),
        SubmitError::Service(error) => unavailable(error.to_string()),
        SubmitError::Signing(error) => internal(error),
    }
}

fn mismatch(reply: &ReadReply) -> Response {
    internal(format!("a read answered another kind of reply: {reply:?}"))
}

fn read_error(error: ReadError) -> Response {
    match error {
        ReadError::BadRequest(message) => bad_request(message),
        ReadError::NotFound(message) => error_body(StatusCode::NOT_FOUND, "not-found", message),
        ReadError::Unavailable(message) => unavailable(message),
        ReadError::Internal(message) => internal(message),
    }
}

async fn get_sth(State((replica, ct)): State<CtState>) -> Response {
    match ct.read(&replica, Read::Sth, true).await {
        Ok(ReadReply::Sth(sth)) => match GetSthResponse::try_from(&sth) {
            Ok(response) => json_body(&response),
            Err(error) => internal(error.to_string()),
        },
        Ok(other) => mismatch(&other),
        Err(error) => read_error(error),
    }
}

#[derive(Deserialize)]
struct ConsistencyQuery {
    first: Option<String>,
    second: Option<String>,
}

/// A required non-negative integer query parameter.
fn number(name: &str, value: Option<&String>) -> Result<u64, Response> {
    let value = value.ok_or_else(|| bad_request(format!("missing parameter {name}")))?;
    value.parse().map_err(|_| {
        bad_request(format!(
            "{name} must be a non-negative integer, not {value:?}"
        ))
    })
}

async fn get_sth_consistency(
    State((replica, ct)): State<CtState>,
    query: Result<Query<ConsistencyQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return query_rejected(&rejection),
    };
    let (first, second) = match (
        number("first", query.first.as_ref()),
        number("second", query.second.as_ref()),
    ) {
        (Ok(first), Ok(second)) => (first, second),
        (Err(response), _) | (_, Err(response)) => return response,
    };
    match ct
        .read(&replica, Read::Consistency { first, second }, true)
        .await
    {
        Ok(ReadReply::Consistency(consistency)) => {
            json_body(&GetSthConsistencyResponse { consistency })
        }
        Ok(other) => mismatch(&other),
        Err(error) => read_error(error),
    }
}

#[derive(Deserialize)]
struct ProofByHashQuery {
    hash: Option<String>,
    tree_size: Option<String>,
}

fn leaf_hash_param(value: Option<&String>) -> Result<Hash, Response> {
    use base64::Engine as _;
    let value = value.ok_or_else(|| bad_request("missing parameter hash"))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|error| bad_request(format!("hash is not base64: {error}")))?;
    Hash::try_from(bytes.as_slice()).map_err(|_| {
        bad_request(format!(
            "hash must be a 32-byte SHA-256 leaf hash, got {} bytes",
            bytes.len()
        ))
    })
}

async fn get_proof_by_hash(
    State((replica, ct)): State<CtState>,
    query: Result<Query<ProofByHashQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return query_rejected(&rejection),
    };
    let (hash, tree_size) = match (
        leaf_hash_param(query.hash.as_ref()),
        number("tree_size", query.tree_size.as_ref()),
    ) {
        (Ok(hash), Ok(tree_size)) => (hash, tree_size),
        (Err(response), _) | (_, Err(response)) => return response,
    };
    let read = Read::ProofByHash {
        leaf_hash: hash,
        tree_size,
    };
    match ct.read(&replica, read, true).await {
        Ok(ReadReply::Proof {
            leaf_index,
            audit_path,
        }) => json_body(&GetProofByHashResponse {
            leaf_index,
            audit_path,
        }),
        Ok(other) => mismatch(&other),
        Err(error) => read_error(error),
    }
}

#[derive(Deserialize)]
struct EntriesQuery {
    start: Option<String>,
    end: Option<String>,
}

fn leaf_entry((leaf_input, extra_data): &ServedEntry) -> Result<LeafEntry, String> {
    let leaf = MerkleTreeLeaf::decode(leaf_input).map_err(|e| e.to_string())?;
    let entry_type = LogEntryType::of(&leaf.timestamped_entry.entry);
    let extra = ExtraData::decode(entry_type, extra_data).map_err(|e| e.to_string())?;
    LeafEntry::new(&leaf, &extra).map_err(|e| e.to_string())
}

async fn get_entries(
    State((replica, ct)): State<CtState>,
    query: Result<Query<EntriesQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return query_rejected(&rejection),
    };
    let (start, end) = match (
        number("start", query.start.as_ref()),
        number("end", query.end.as_ref()),
    ) {
        (Ok(start), Ok(end)) => (start, end),
        (Err(response), _) | (_, Err(response)) => return response,
    };
    let stored = match ct.read(&replica, Read::Entries { start, end }, true).await {
        Ok(ReadReply::Entries(stored)) => stored,
        Ok(other) => return mismatch(&other),
        Err(error) => return read_error(error),
    };
    match entries_response(stored, CT_HTTP_GET_ENTRIES_BYTES_MAX) {
        Ok(response) => json_body(&response),
        Err(error) => internal(error),
    }
}

/// get-entries' answer: the leading `stored` entries whose bytes (leaf input and extra data,
/// before base64) stay within `bytes_max`, and always the first. Fewer entries than asked is
/// what RFC 6962 §4.6 allows; the client asks again from where this answer stops.
fn entries_response(
    stored: Vec<ServedEntry>,
    bytes_max: usize,
) -> Result<GetEntriesResponse, String> {
    let mut bytes = 0usize;
    let entries = stored
        .iter()
        .enumerate()
        .take_while(|(index, (leaf_input, extra_data))| {
            bytes = bytes.saturating_add(leaf_input.len() + extra_data.len());
            *index == 0 || bytes <= bytes_max
        })
        .map(|(_, entry)| leaf_entry(entry))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GetEntriesResponse { entries })
}

async fn get_roots(State((_, ct)): State<CtState>) -> Response {
    json_body(&GetRootsResponse {
        certificates: ct.roots().certificates().to_vec(),
    })
}

#[derive(Deserialize)]
struct EntryAndProofQuery {
    leaf_index: Option<String>,
    tree_size: Option<String>,
}

async fn get_entry_and_proof(
    State((replica, ct)): State<CtState>,
    query: Result<Query<EntryAndProofQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return query_rejected(&rejection),
    };
    let (index, tree_size) = match (
        number("leaf_index", query.leaf_index.as_ref()),
        number("tree_size", query.tree_size.as_ref()),
    ) {
        (Ok(index), Ok(tree_size)) => (index, tree_size),
        (Err(response), _) | (_, Err(response)) => return response,
    };
    let read = Read::EntryAndProof {
        leaf_index: index,
        tree_size,
    };
    let (stored, audit_path) = match ct.read(&replica, read, true).await {
        Ok(ReadReply::EntryAndProof { entry, audit_path }) => (entry, audit_path),
        Ok(other) => return mismatch(&other),
        Err(error) => return read_error(error),
    };
    match leaf_entry(&stored) {
        Ok(entry) => json_body(&GetEntryAndProofResponse {
            leaf_input: entry.leaf_input,
            extra_data: entry.extra_data,
            audit_path,
        }),
        Err(error) => internal(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_hashes_are_checked_with_reasons() {
        assert_eq!(number("start", Some(&"12".to_owned())).unwrap(), 12);
        for bad in ["-1", "x", "1.5", ""] {
            let response = number("start", Some(&bad.to_owned())).unwrap_err();
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        }
        assert_eq!(
            number("start", None).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let short = leaf_hash_param(Some(&"AAAA".to_owned())).unwrap_err();
        assert_eq!(short.status(), StatusCode::BAD_REQUEST);
        let not_base64 = leaf_hash_param(Some(&"!!".to_owned())).unwrap_err();
        assert_eq!(not_base64.status(), StatusCode::BAD_REQUEST);
        let hash = leaf_hash_param(Some(&format!("{}=", "A".repeat(43))));
        assert_eq!(hash.unwrap(), [0u8; 32]);
    }

    #[test]
    fn a_submission_past_a_size_bound_is_a_400_and_back_pressure_a_503() {
        let too_large = CtError::TooLarge {
            field: "extra_data".to_owned(),
            bytes: 800_000,
            max: 720_896,
        };
        let response = submit_error(SubmitError::Refused(too_large));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let backlog = CtError::Backlog {
            unsequenced: 10,
            watermark: 10,
        };
        let response = submit_error(SubmitError::Refused(backlog));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key(header::RETRY_AFTER));
    }

    fn served(certificate_bytes: usize) -> ServedEntry {
        use certus_ct::LogEntry;
        use certus_ct::structures::leaf_input;
        let entry = LogEntry::X509 {
            certificate: vec![0x30; certificate_bytes],
        };
        let extra = ExtraData::X509 {
            certificate_chain: vec![vec![0x30; 100]],
        };
        (
            leaf_input(1, &entry, &[]).expect("leaf"),
            extra.encode().expect("extra data"),
        )
    }

    #[test]
    fn get_entries_is_cut_by_bytes_after_the_first_entry() {
        let stored: Vec<ServedEntry> = (0..10).map(|_| served(1000)).collect();
        let one = stored[0].0.len() + stored[0].1.len();
        // Room for three and a half entries: three are answered.
        let response = entries_response(stored.clone(), one * 7 / 2).expect("response");
        assert_eq!(response.entries.len(), 3);
        // The first entry is answered even when it alone is over.
        let response = entries_response(stored.clone(), 1).expect("response");
        assert_eq!(response.entries.len(), 1);
        let response = entries_response(stored, one * 10).expect("response");
        assert_eq!(response.entries.len(), 10, "all fit");
    }
}
