//! Problem documents: their JSON shape and the statuses of the ACME error types.

use certus_acme::problem::ACME_ERROR_URN_PREFIX;
use certus_acme::{Identifier, PROBLEM_CONTENT_TYPE, Problem, ProblemType, Subproblem};
use serde_json::json;

#[test]
fn a_problem_serializes_to_type_detail_status() {
    let problem = Problem::new(ProblemType::BadNonce, "the nonce was used before");
    assert_eq!(
        problem.to_json(),
        json!({
            "type": "urn:ietf:params:acme:error:badNonce",
            "detail": "the nonce was used before",
            "status": 400
        })
    );
    assert_eq!(PROBLEM_CONTENT_TYPE, "application/problem+json");
}

#[test]
fn subproblems_carry_their_identifier() {
    let problem = Problem::new(ProblemType::Compound, "two names refused").with_subproblems(vec![
        Subproblem {
            kind: ProblemType::RejectedIdentifier,
            detail: "not ours".into(),
            identifier: Some(Identifier::dns("a.example")),
        },
        Subproblem {
            kind: ProblemType::Caa,
            detail: "CAA forbids".into(),
            identifier: None,
        },
    ]);
    let value = problem.to_json();
    assert_eq!(
        value,
        json!({
            "type": "urn:ietf:params:acme:error:compound",
            "detail": "two names refused",
            "status": 400,
            "subproblems": [
                {
                    "type": "urn:ietf:params:acme:error:rejectedIdentifier",
                    "detail": "not ours",
                    "identifier": {"type": "dns", "value": "a.example"}
                },
                {"type": "urn:ietf:params:acme:error:caa", "detail": "CAA forbids"}
            ]
        })
    );
    assert_eq!(serde_json::from_value::<Problem>(value).unwrap(), problem);
}

#[test]
fn default_statuses() {
    let status = |kind: ProblemType| Problem::new(kind, "").status;
    assert_eq!(status(ProblemType::BadNonce), 400);
    assert_eq!(status(ProblemType::Malformed), 400);
    assert_eq!(status(ProblemType::AccountDoesNotExist), 400);
    assert_eq!(status(ProblemType::AlreadyRevoked), 400);
    assert_eq!(status(ProblemType::BadSignatureAlgorithm), 400);
    assert_eq!(status(ProblemType::Unauthorized), 403);
    assert_eq!(status(ProblemType::OrderNotReady), 403);
    assert_eq!(status(ProblemType::RateLimited), 429);
    assert_eq!(status(ProblemType::ServerInternal), 500);
    for kind in ProblemType::ALL {
        assert!((400..=599).contains(&kind.default_status()), "{kind}");
    }
}

#[test]
fn explicit_statuses() {
    let missing = Problem::not_found("no such order");
    assert_eq!(missing.kind, ProblemType::Malformed);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.to_json()["status"], 404);
    let conflict = Problem::with_status(ProblemType::Malformed, "key in use", 409);
    assert_eq!(conflict.status, 409);
}

#[test]
fn the_error_types_are_rfc_8555s_table() {
    let names: Vec<&str> = ProblemType::ALL.iter().map(|kind| kind.name()).collect();
    assert_eq!(
        names,
        [
            "accountDoesNotExist",
            "alreadyRevoked",
            "badCSR",
            "badNonce",
            "badPublicKey",
            "badRevocationReason",
            "badSignatureAlgorithm",
            "caa",
            "compound",
            "connection",
            "dns",
            "externalAccountRequired",
            "incorrectResponse",
            "invalidContact",
            "malformed",
            "orderNotReady",
            "rateLimited",
            "rejectedIdentifier",
            "serverInternal",
            "tls",
            "unauthorized",
            "unsupportedContact",
            "unsupportedIdentifier",
            "userActionRequired",
        ]
    );
    assert_eq!(ACME_ERROR_URN_PREFIX, "urn:ietf:params:acme:error:");
    assert_eq!(
        ProblemType::BadCsr.urn(),
        "urn:ietf:params:acme:error:badCSR"
    );
    let unknown = serde_json::from_value::<Problem>(json!({
        "type": "about:blank", "detail": "", "status": 400
    }));
    assert!(unknown.is_err());
}
