//! The RFC 6962 decoders: the TLS structures (`ct_tls`), the §4 JSON bodies (`ct_json`) and
//! submitted chains (`ct_chain`).
//!
//! TLS decoding is strict (exact lengths, no trailing bytes), so whatever decodes must encode back
//! to exactly the input. A JSON body that parses must serialize to one that parses to the same
//! value. A chain that passes the checks is taken through the rest of a submission as
//! `certus_node::ct` does it (entry key, leaf input, `extra_data`, a signed SCT that
//! verifies) and applied to a `State` as the `Add` command the node proposes.

use std::sync::OnceLock;

use certus_core::ct::{CtCommand, Submission};
use certus_core::{Command, Stamp, State};
use certus_ct::LogEntry;
use certus_ct::chain::{AcceptedRoots, ChainLimits, CheckedChain, check_chain, check_pre_chain};
use certus_ct::signer::{Ed25519Signer, LogVerifier, Signer};
use certus_ct::structures::json::{
    AddChainRequest, AddChainResponse, GetEntriesResponse, GetEntryAndProofResponse,
    GetProofByHashResponse, GetRootsResponse, GetSthConsistencyResponse, GetSthResponse,
};
use certus_ct::structures::{
    DigitallySigned, ExtraData, LogEntryType, MerkleTreeLeaf, PrecertChainEntry,
    SignedCertificateTimestamp, SignedTreeHead, decode_sct_list, encode_sct_list, leaf_input,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::commands::apply_checked;

/// The DER roots the chain target accepts: a P-256 root and an Ed25519 root of a test PKI made
/// by the seed generator (`tests/seeds.rs`), whose chains are the `ct_chain` seeds.
const ROOTS: &[&[u8]] = &[
    include_bytes!("../fixtures/root-p256.der"),
    include_bytes!("../fixtures/root-ed25519.der"),
];

/// The seed of the simulation-style signer that signs fuzzed submissions.
const SIGNER_SEED: [u8; 32] = [7; 32];

/// The SCT timestamp of fuzzed submissions (and the clock of the state they are applied to).
const SUBMITTED_AT_MS: u64 = 1_700_000_000_000;

/// The accepted roots of the chain target.
pub fn roots() -> &'static AcceptedRoots {
    static ROOTS_ONCE: OnceLock<AcceptedRoots> = OnceLock::new();
    ROOTS_ONCE.get_or_init(|| {
        AcceptedRoots::from_der(ROOTS.iter().map(|der| der.to_vec()))
            .expect("the fixture roots parse")
    })
}

fn signer() -> &'static (Ed25519Signer, LogVerifier) {
    static SIGNER: OnceLock<(Ed25519Signer, LogVerifier)> = OnceLock::new();
    SIGNER.get_or_init(|| {
        let signer = Ed25519Signer::from_seed(SIGNER_SEED);
        let verifier = LogVerifier::for_signer(&signer).expect("the signer's key parses");
        (signer, verifier)
    })
}

// ---- ct_tls --------------------------------------------------------------------------------

/// The TLS structures, in selector order (the first input byte picks one).
pub const TLS_KINDS: &[&str] = &[
    "MerkleTreeLeaf",
    "extra_data (x509_entry)",
    "extra_data (precert_entry)",
    "SignedCertificateTimestamp",
    "SignedCertificateTimestampList",
    "digitally-signed",
];

/// The `ct_tls` body: the first byte picks the structure ([`TLS_KINDS`]), the rest is decoded.
pub fn ct_tls(data: &[u8]) {
    let count = u8::try_from(TLS_KINDS.len()).expect("a few kinds");
    let (kind, bytes) = crate::select(data, count);
    match kind {
        0 => {
            if let Ok(leaf) = MerkleTreeLeaf::decode(bytes) {
                assert_eq!(leaf.encode().expect("a decoded leaf encodes"), bytes);
            }
        }
        1 | 2 => {
            let entry_type = if kind == 1 {
                LogEntryType::X509Entry
            } else {
                LogEntryType::PrecertEntry
            };
            if let Ok(extra) = ExtraData::decode(entry_type, bytes) {
                assert_eq!(extra.entry_type(), entry_type);
                assert_eq!(extra.encode().expect("decoded extra_data encodes"), bytes);
            }
        }
        3 => {
            if let Ok(sct) = SignedCertificateTimestamp::decode(bytes) {
                assert_eq!(sct.encode().expect("a decoded SCT encodes"), bytes);
                verify_sct_any(&sct);
            }
        }
        4 => {
            if let Ok(scts) = decode_sct_list(bytes) {
                assert_eq!(
                    encode_sct_list(&scts).expect("a decoded SCT list encodes"),
                    bytes
                );
                scts.iter().for_each(verify_sct_any);
            }
        }
        _ => {
            if let Ok(signed) = DigitallySigned::decode(bytes) {
                assert_eq!(signed.encode().expect("a decoded signature encodes"), bytes);
                let (_, verifier) = signer();
                // A forged signature is refused, never a panic.
                let _ = verifier.verify(b"fuzz", &signed);
            }
        }
    }
}

/// Verifies an SCT from elsewhere (a client auditing, a mirror checking its source) over a
/// fixed entry: a refusal is expected, a panic is a bug.
fn verify_sct_any(sct: &SignedCertificateTimestamp) {
    let (_, verifier) = signer();
    let entry = LogEntry::X509 {
        certificate: vec![0x30, 0x00],
    };
    let _ = verifier.verify_sct(sct, &entry);
}

// ---- ct_json -------------------------------------------------------------------------------

/// The §4 JSON bodies, in selector order (the first input byte picks one).
pub const JSON_KINDS: &[&str] = &[
    "add-chain request",
    "add-pre-chain request",
    "add-chain response",
    "get-sth response",
    "get-sth-consistency response",
    "get-proof-by-hash response",
    "get-entries response",
    "get-roots response",
    "get-entry-and-proof response",
];

/// The `ct_json` body: the first byte picks the body ([`JSON_KINDS`]), the rest is the JSON.
/// Requests go on to the chain checks, as the node's `add-chain` and `add-pre-chain` endpoints
/// do; responses (what a mirror and a client read) go on to their TLS fields' decoders.
pub fn ct_json(data: &[u8]) {
    let count = u8::try_from(JSON_KINDS.len()).expect("a few kinds");
    let (kind, json) = crate::select(data, count);
    match kind {
        0 | 1 => {
            if let Some(request) = json_round_trip::<AddChainRequest>(json) {
                submit(&request.chain, kind == 1);
            }
        }
        2 => {
            if let Some(response) = json_round_trip::<AddChainResponse>(json)
                && let Ok(sct) = SignedCertificateTimestamp::try_from(&response)
            {
                let back = AddChainResponse::try_from(&sct).expect("a decoded SCT encodes");
                assert_eq!(back, response);
                verify_sct_any(&sct);
            }
        }
        3 => {
            if let Some(response) = json_round_trip::<GetSthResponse>(json)
                && let Ok(sth) = SignedTreeHead::try_from(&response)
            {
                let back = GetSthResponse::try_from(&sth).expect("a decoded STH encodes");
                assert_eq!(back, response);
                let (_, verifier) = signer();
                let _ = verifier.verify_sth(&sth);
            }
        }
        4 => {
            json_round_trip::<GetSthConsistencyResponse>(json);
        }
        5 => {
            json_round_trip::<GetProofByHashResponse>(json);
        }
        6 => {
            if let Some(response) = json_round_trip::<GetEntriesResponse>(json) {
                for entry in &response.entries {
                    if let Ok((leaf, extra)) = entry.decode() {
                        assert_eq!(
                            leaf.encode().expect("a decoded leaf encodes"),
                            entry.leaf_input
                        );
                        assert_eq!(
                            extra.encode().expect("decoded extra_data encodes"),
                            entry.extra_data
                        );
                    }
                }
            }
        }
        7 => {
            if let Some(response) = json_round_trip::<GetRootsResponse>(json) {
                let _ = AcceptedRoots::from_der(response.certificates);
            }
        }
        _ => {
            if let Some(response) = json_round_trip::<GetEntryAndProofResponse>(json) {
                let _ = response.decode_entry();
            }
        }
    }
}

fn json_round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    json: &[u8],
) -> Option<T> {
    let value: T = serde_json::from_slice(json).ok()?;
    let text = serde_json::to_vec(&value).expect("a parsed body serializes");
    let again: T = serde_json::from_slice(&text).expect("a serialized body parses");
    assert_eq!(again, value);
    Some(value)
}

// ---- ct_chain ------------------------------------------------------------------------------

/// The `ct_chain` body: the first byte's low bit says add-pre-chain (1) or add-chain (0); the rest
/// is the chain as a TLS `certificate_chain` (`ASN.1Cert<1..2^24-1>` in a `<0..2^24-1>` vector,
/// as in `extra_data`), or, when it is not one, a single certificate.
pub fn ct_chain(data: &[u8]) {
    let (precert, rest) = crate::select(data, 2);
    let chain = match ExtraData::decode(LogEntryType::X509Entry, rest) {
        Ok(ExtraData::X509 { certificate_chain }) => certificate_chain,
        _ => vec![rest.to_vec()],
    };
    submit(&chain, precert == 1);
}

/// A submission as `CtNode::submit` handles it, minus the network and the Raft round: the chain
/// checks, then for an accepted chain the entry, its key, leaf input and `extra_data`, a signed
/// SCT that verifies, and the `Add` command applied to a fresh state.
pub fn submit(chain: &[Vec<u8>], precert: bool) {
    let limits = ChainLimits::default();
    let checked = if precert {
        check_pre_chain(chain, roots(), &limits)
    } else {
        check_chain(chain, roots(), &limits)
    };
    let Ok(CheckedChain { entry, chain }) = checked else {
        return;
    };
    match (&entry, precert) {
        (LogEntry::X509 { .. }, false) | (LogEntry::Precert { .. }, true) => {}
        _ => panic!("an accepted chain gave the other kind of entry"),
    }
    let extra_data = match &entry {
        LogEntry::X509 { .. } => ExtraData::X509 {
            certificate_chain: chain,
        },
        LogEntry::Precert { .. } => {
            let (pre_certificate, rest) = chain
                .split_first()
                .expect("a checked precertificate chain starts with the precertificate");
            ExtraData::Precert(PrecertChainEntry {
                pre_certificate: pre_certificate.clone(),
                precertificate_chain: rest.to_vec(),
            })
        }
    };
    let (signer, verifier) = signer();
    let sct = signer
        .sign_sct(SUBMITTED_AT_MS, &entry, &[])
        .expect("an accepted entry can be signed");
    verifier
        .verify_sct(&sct, &entry)
        .expect("the log's own SCT verifies");
    let leaf = leaf_input(SUBMITTED_AT_MS, &entry, &[]).expect("an accepted entry encodes");
    let decoded = MerkleTreeLeaf::decode(&leaf).expect("the leaf input decodes");
    assert_eq!(decoded.timestamped_entry.entry, entry);
    let extra = extra_data.encode().expect("an accepted chain encodes");
    let submission = Submission {
        key: certus_node::ct::convert::entry_key(&entry),
        sct_timestamp_ms: SUBMITTED_AT_MS,
        leaf_input: leaf,
        extra_data: extra,
        sct: sct.encode().expect("an SCT encodes"),
    };
    let mut state = State::new();
    apply_checked(
        &mut state,
        Command::Ct(CtCommand::Add {
            submissions: vec![submission],
        }),
        Stamp::new(1, SUBMITTED_AT_MS),
    );
}
