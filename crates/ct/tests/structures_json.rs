//! The RFC 6962 §4 JSON bodies: field names, base64, hand-written bodies, and the conversions
//! to and from the typed structures.

use certus_ct::LogEntry;
use certus_ct::signer::{Ed25519Signer, LogVerifier, Signer as _};
use certus_ct::structures::json::{
    AddChainRequest, AddChainResponse, FromJsonError, GetEntriesResponse, GetEntryAndProofResponse,
    GetProofByHashResponse, GetRootsResponse, GetSthConsistencyResponse, GetSthResponse, LeafEntry,
};
use certus_ct::structures::tls::{DecodeError, EncodeError};
use certus_ct::structures::{
    DigitallySigned, ExtraData, HashAlgorithm, MerkleTreeLeaf, PrecertChainEntry,
    SignatureAlgorithm, SignedCertificateTimestamp, SignedTreeHead, Version,
};

/// base64 of 32 bytes of 0x00 and of 0xff.
const ZEROS_B64: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
const ONES_B64: &str = "//////////////////////////////////////////8=";

#[test]
fn add_chain_request_is_a_list_of_padded_standard_base64() {
    let request = AddChainRequest {
        // 0xfb 0xff encodes to "+/8=": both non-URL-safe characters and padding.
        chain: vec![vec![0xfb, 0xff], b"ab".to_vec()],
    };
    assert_eq!(
        serde_json::to_string(&request).unwrap(),
        r#"{"chain":["+/8=","YWI="]}"#
    );
    let parsed: AddChainRequest =
        serde_json::from_str(r#"{ "chain": [ "+/8=", "YWI=" ] }"#).unwrap();
    assert_eq!(parsed, request);
}

#[test]
fn base64_that_is_not_standard_and_padded_is_refused_with_a_reason() {
    for body in [
        r#"{"chain":["-_8="]}"#, // URL-safe alphabet
        r#"{"chain":["YWI"]}"#,  // missing padding
        r#"{"chain":["Y W I="]}"#,
    ] {
        let error = serde_json::from_str::<AddChainRequest>(body).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("not valid base64") && message.contains("element 0"),
            "{body}: {message}"
        );
    }
}

#[test]
fn add_chain_response_has_the_rfc_field_names() {
    let response = AddChainResponse {
        sct_version: 0,
        id: [0; 32],
        timestamp: 1_234_567,
        extensions: Vec::new(),
        signature: vec![4, 3, 0, 1, 0x30],
    };
    assert_eq!(
        serde_json::to_string(&response).unwrap(),
        format!(
            r#"{{"sct_version":0,"id":"{ZEROS_B64}","timestamp":1234567,"extensions":"","signature":"BAMAATA="}}"#
        )
    );
}

#[test]
fn a_hand_written_add_chain_response_becomes_an_sct() {
    let body = format!(
        r#"{{
            "sct_version": 0,
            "id": "{ONES_B64}",
            "timestamp": 1373015623951,
            "extensions": "",
            "signature": "BAMABDAC/wA="
        }}"#
    );
    let response: AddChainResponse = serde_json::from_str(&body).unwrap();
    let sct = SignedCertificateTimestamp::try_from(&response).unwrap();
    assert_eq!(
        sct,
        SignedCertificateTimestamp {
            version: Version::V1,
            log_id: [0xff; 32],
            timestamp_ms: 1_373_015_623_951,
            extensions: Vec::new(),
            signature: DigitallySigned {
                hash_algorithm: HashAlgorithm::Sha256,
                signature_algorithm: SignatureAlgorithm::Ecdsa,
                signature: vec![0x30, 0x02, 0xff, 0x00],
            },
        }
    );
    assert_eq!(AddChainResponse::try_from(&sct).unwrap(), response);
}

#[test]
fn add_chain_response_conversion_errors_name_the_problem() {
    let good = AddChainResponse {
        sct_version: 0,
        id: [1; 32],
        timestamp: 1,
        extensions: Vec::new(),
        signature: vec![4, 3, 0, 0],
    };
    let v2 = AddChainResponse {
        sct_version: 1,
        ..good.clone()
    };
    assert_eq!(
        SignedCertificateTimestamp::try_from(&v2),
        Err(FromJsonError::UnknownSctVersion(1))
    );
    let truncated = AddChainResponse {
        signature: vec![4, 3, 0, 5, 1],
        ..good.clone()
    };
    let error = SignedCertificateTimestamp::try_from(&truncated).unwrap_err();
    assert!(matches!(
        error,
        FromJsonError::Tls {
            field: "signature",
            source: DecodeError::Truncated { .. }
        }
    ));
    assert!(error.to_string().contains("signature"), "{error}");
    let trailing = AddChainResponse {
        signature: vec![4, 3, 0, 0, 9],
        ..good
    };
    assert!(matches!(
        SignedCertificateTimestamp::try_from(&trailing),
        Err(FromJsonError::Tls {
            field: "signature",
            source: DecodeError::TrailingBytes { .. }
        })
    ));
}

#[test]
fn a_log_id_that_is_not_32_bytes_is_refused() {
    let body =
        r#"{"sct_version":0,"id":"AAAA","timestamp":1,"extensions":"","signature":"BAMAAA=="}"#;
    let message = serde_json::from_str::<AddChainResponse>(body)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("32-byte") && message.contains("got 3 bytes"),
        "{message}"
    );
}

#[test]
fn get_sth_has_the_rfc_field_names_and_round_trips_through_the_typed_sth() {
    let sth = SignedTreeHead {
        tree_size: 7,
        timestamp_ms: 1_400_000_000_000,
        sha256_root_hash: [0xff; 32],
        tree_head_signature: DigitallySigned {
            hash_algorithm: HashAlgorithm::Sha256,
            signature_algorithm: SignatureAlgorithm::Ecdsa,
            signature: vec![0x30],
        },
    };
    let response = GetSthResponse::try_from(&sth).unwrap();
    assert_eq!(
        serde_json::to_string(&response).unwrap(),
        format!(
            r#"{{"tree_size":7,"timestamp":1400000000000,"sha256_root_hash":"{ONES_B64}","tree_head_signature":"BAMAATA="}}"#
        )
    );
    let parsed: GetSthResponse =
        serde_json::from_str(&serde_json::to_string(&response).unwrap()).unwrap();
    assert_eq!(SignedTreeHead::try_from(&parsed).unwrap(), sth);
}

#[test]
fn get_sth_with_a_short_root_hash_or_a_bad_signature_is_refused() {
    let short_root = r#"{"tree_size":1,"timestamp":1,"sha256_root_hash":"AAAA","tree_head_signature":"BAMAAA=="}"#;
    assert!(serde_json::from_str::<GetSthResponse>(short_root).is_err());

    let bad_signature = format!(
        r#"{{"tree_size":1,"timestamp":1,"sha256_root_hash":"{ZEROS_B64}","tree_head_signature":"BA=="}}"#
    );
    let response: GetSthResponse = serde_json::from_str(&bad_signature).unwrap();
    assert!(matches!(
        SignedTreeHead::try_from(&response),
        Err(FromJsonError::Tls {
            field: "tree_head_signature",
            source: DecodeError::Truncated { .. }
        })
    ));
    let missing_field = r#"{"tree_size":1,"timestamp":1,"tree_head_signature":"BAMAAA=="}"#;
    let message = serde_json::from_str::<GetSthResponse>(missing_field)
        .unwrap_err()
        .to_string();
    assert!(message.contains("sha256_root_hash"), "{message}");
}

#[test]
fn proof_bodies_have_the_rfc_field_names() {
    let consistency = GetSthConsistencyResponse {
        consistency: vec![[0; 32], [0xff; 32]],
    };
    assert_eq!(
        serde_json::to_string(&consistency).unwrap(),
        format!(r#"{{"consistency":["{ZEROS_B64}","{ONES_B64}"]}}"#)
    );
    let by_hash = GetProofByHashResponse {
        leaf_index: 3,
        audit_path: vec![[0xff; 32]],
    };
    assert_eq!(
        serde_json::to_string(&by_hash).unwrap(),
        format!(r#"{{"leaf_index":3,"audit_path":["{ONES_B64}"]}}"#)
    );
    let empty: GetSthConsistencyResponse = serde_json::from_str(r#"{"consistency":[]}"#).unwrap();
    assert!(empty.consistency.is_empty());

    let parsed: GetProofByHashResponse = serde_json::from_str(&format!(
        r#"{{ "leaf_index": 12, "audit_path": ["{ZEROS_B64}", "{ONES_B64}"] }}"#
    ))
    .unwrap();
    assert_eq!(parsed.leaf_index, 12);
    assert_eq!(parsed.audit_path, vec![[0; 32], [0xff; 32]]);

    let short = r#"{"leaf_index":0,"audit_path":["AAAA"]}"#;
    let message = serde_json::from_str::<GetProofByHashResponse>(short)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("element 0") && message.contains("32-byte"),
        "{message}"
    );
}

#[test]
fn get_roots_has_the_rfc_field_name() {
    let roots = GetRootsResponse {
        certificates: vec![b"root".to_vec()],
    };
    assert_eq!(
        serde_json::to_string(&roots).unwrap(),
        r#"{"certificates":["cm9vdA=="]}"#
    );
    let parsed: GetRootsResponse =
        serde_json::from_str(r#"{"certificates":["cm9vdA=="]}"#).unwrap();
    assert_eq!(parsed, roots);
}

fn x509_leaf() -> (MerkleTreeLeaf, ExtraData) {
    (
        MerkleTreeLeaf::new(
            1,
            LogEntry::X509 {
                certificate: b"leaf".to_vec(),
            },
            Vec::new(),
        ),
        ExtraData::X509 {
            certificate_chain: vec![b"root".to_vec()],
        },
    )
}

fn precert_leaf() -> (MerkleTreeLeaf, ExtraData) {
    (
        MerkleTreeLeaf::new(
            2,
            LogEntry::Precert {
                issuer_key_hash: [9; 32],
                tbs_certificate: b"tbs".to_vec(),
            },
            Vec::new(),
        ),
        ExtraData::Precert(PrecertChainEntry {
            pre_certificate: b"precert".to_vec(),
            precertificate_chain: vec![b"root".to_vec()],
        }),
    )
}

#[test]
fn get_entries_has_the_rfc_field_names_and_its_entries_decode() {
    let (leaf, extra) = x509_leaf();
    let entry = LeafEntry::new(&leaf, &extra).unwrap();
    let response = GetEntriesResponse {
        entries: vec![entry.clone()],
    };
    // leaf_input: 00 00 | ts 0..01 | 00 00 | 00 00 04 "leaf" | 00 00;
    // extra_data: 00 00 07 | 00 00 04 "root".
    assert_eq!(
        serde_json::to_string(&response).unwrap(),
        r#"{"entries":[{"leaf_input":"AAAAAAAAAAAAAQAAAAAEbGVhZgAA","extra_data":"AAAHAAAEcm9vdA=="}]}"#
    );
    let parsed: GetEntriesResponse = serde_json::from_str(
        r#"{"entries":[{"leaf_input":"AAAAAAAAAAAAAQAAAAAEbGVhZgAA","extra_data":"AAAHAAAEcm9vdA=="}]}"#,
    )
    .unwrap();
    assert_eq!(parsed, response);
    assert_eq!(parsed.entries[0].decode().unwrap(), (leaf, extra));

    let (leaf, extra) = precert_leaf();
    let entry = LeafEntry::new(&leaf, &extra).unwrap();
    assert_eq!(entry.decode().unwrap(), (leaf, extra));
}

#[test]
fn an_entry_whose_extra_data_does_not_fit_its_leaf_is_refused() {
    let (x509, _) = x509_leaf();
    let (_, precert_extra) = precert_leaf();
    let mismatched = LeafEntry::new(&x509, &precert_extra).unwrap();
    assert!(matches!(
        mismatched.decode(),
        Err(FromJsonError::Tls {
            field: "extra_data",
            ..
        })
    ));
    let broken_leaf = LeafEntry {
        leaf_input: vec![0, 0, 1],
        extra_data: Vec::new(),
    };
    assert!(matches!(
        broken_leaf.decode(),
        Err(FromJsonError::Tls {
            field: "leaf_input",
            source: DecodeError::Truncated { .. }
        })
    ));
}

#[test]
fn get_entry_and_proof_has_the_rfc_field_names() {
    let (leaf, extra) = precert_leaf();
    let response = GetEntryAndProofResponse {
        leaf_input: leaf.encode().unwrap(),
        extra_data: extra.encode().unwrap(),
        audit_path: vec![[0; 32]],
    };
    let json = serde_json::to_string(&response).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 3);
    for key in ["leaf_input", "extra_data", "audit_path"] {
        assert!(keys.contains(&key), "{json}");
    }
    assert_eq!(value["audit_path"][0], ZEROS_B64);
    let parsed: GetEntryAndProofResponse = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed.decode_entry().unwrap(), (leaf, extra));
}

#[test]
fn unknown_fields_are_ignored_for_forward_compatibility() {
    let body = format!(
        r#"{{"tree_size":1,"timestamp":2,"sha256_root_hash":"{ZEROS_B64}","tree_head_signature":"BAMAAA==","x-extra":true}}"#
    );
    let parsed: GetSthResponse = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed.tree_size, 1);
}

#[test]
fn a_signed_sct_and_sth_survive_the_json_round_trip_and_still_verify() {
    let signer = Ed25519Signer::from_seed([5; 32]);
    let verifier = LogVerifier::for_signer(&signer).unwrap();
    let entry = LogEntry::X509 {
        certificate: b"some certificate".to_vec(),
    };

    let sct = signer.sign_sct(1_500_000_000_000, &entry, &[]).unwrap();
    let json = serde_json::to_string(&AddChainResponse::try_from(&sct).unwrap()).unwrap();
    let back: AddChainResponse = serde_json::from_str(&json).unwrap();
    let sct_back = SignedCertificateTimestamp::try_from(&back).unwrap();
    assert_eq!(sct_back, sct);
    verifier.verify_sct(&sct_back, &entry).unwrap();

    let sth = signer.sign_sth(10, 1_500_000_000_001, &[4; 32]).unwrap();
    let json = serde_json::to_string(&GetSthResponse::try_from(&sth).unwrap()).unwrap();
    let back: GetSthResponse = serde_json::from_str(&json).unwrap();
    let sth_back = SignedTreeHead::try_from(&back).unwrap();
    assert_eq!(sth_back, sth);
    verifier.verify_sth(&sth_back).unwrap();
}

#[test]
fn an_sct_whose_extensions_are_too_long_is_not_served() {
    let sct = SignedCertificateTimestamp {
        version: Version::V1,
        log_id: [0; 32],
        timestamp_ms: 0,
        extensions: vec![0; 0x1_0000],
        signature: DigitallySigned {
            hash_algorithm: HashAlgorithm::Sha256,
            signature_algorithm: SignatureAlgorithm::Ecdsa,
            signature: Vec::new(),
        },
    };
    assert!(matches!(
        AddChainResponse::try_from(&sct),
        Err(EncodeError::LengthOutOfBounds {
            field: "extensions",
            ..
        })
    ));
}
