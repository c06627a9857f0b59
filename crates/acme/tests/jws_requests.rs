//! ACME request bodies: round trips signed by each key type, and every refusal with its
//! problem type.

mod common;

use certus_acme::limits::JWS_BYTES_MAX;
use certus_acme::wire::NewOrder;
use certus_acme::{Alg, JwkError, JwsError, KeyRef, ParsedJws, ProblemType, b64};
use common::{KID, NONCE, TestKey, URL, jwk_header, jws_body, jws_value, kid_header};
use serde_json::{Value, json};

const ORDER: &[u8] = br#"{"identifiers":[{"type":"dns","value":"example.org"}],"unknown":1}"#;

fn all_keys() -> [TestKey; 4] {
    [
        TestKey::p256(),
        TestKey::p384(),
        TestKey::rsa(),
        TestKey::ed25519(7),
    ]
}

#[test]
fn requests_with_jwk_round_trip_for_every_key_type() {
    for key in all_keys() {
        let body = jws_body(&key, &jwk_header(&key, NONCE, URL), ORDER);
        let parsed = ParsedJws::parse(&body).unwrap();
        let header = parsed.protected();
        assert_eq!(header.alg.name(), key.alg());
        assert_eq!(header.key, KeyRef::Jwk(key.jwk()));
        assert_eq!(header.nonce, NONCE);
        assert_eq!(header.url, URL);
        assert_eq!(parsed.payload(), ORDER);
        assert!(!parsed.is_post_as_get());
        assert_eq!(parsed.jwk().unwrap(), &key.jwk());
        assert_eq!(parsed.kid(), Err(JwsError::ExpectedKid));
        assert_eq!(parsed.verify(&key.jwk()), Ok(()));

        // The signing input is the members as sent.
        let value: Value = serde_json::from_slice(&body).unwrap();
        let sent = format!(
            "{}.{}",
            value["protected"].as_str().unwrap(),
            value["payload"].as_str().unwrap()
        );
        assert_eq!(parsed.signing_input(), sent.as_bytes());
        assert_eq!(
            parsed.signature(),
            b64::decode(value["signature"].as_str().unwrap()).unwrap()
        );

        let order: NewOrder = parsed.payload_json().unwrap();
        assert_eq!(order.identifiers[0].value, "example.org");
    }
}

#[test]
fn requests_with_kid_verify_with_the_account_key_only() {
    for key in all_keys() {
        let body = jws_body(&key, &kid_header(&key, KID, NONCE, URL), b"");
        let parsed = ParsedJws::parse(&body).unwrap();
        assert_eq!(parsed.protected().key, KeyRef::Kid(KID.to_owned()));
        assert_eq!(parsed.kid(), Ok(KID));
        assert_eq!(parsed.jwk(), Err(JwsError::ExpectedJwk));
        assert!(parsed.is_post_as_get());
        assert_eq!(parsed.verify(&key.jwk()), Ok(()));
        assert!(matches!(
            parsed.payload_json::<NewOrder>(),
            Err(JwsError::Payload(_))
        ));
    }
    // Another key of the same type: the signature does not verify, answered `malformed`.
    let signer = TestKey::ed25519(1);
    let body = jws_body(&signer, &kid_header(&signer, KID, NONCE, URL), ORDER);
    let parsed = ParsedJws::parse(&body).unwrap();
    let error = parsed.verify(&TestKey::ed25519(2).jwk()).unwrap_err();
    assert_eq!(error, JwsError::SignatureMismatch);
    let problem = error.problem();
    assert_eq!(problem.kind, ProblemType::Malformed);
    assert_eq!(problem.detail, "JWS signature does not verify");
    assert_eq!(problem.status, 400);
}

#[test]
fn a_payload_swapped_after_signing_does_not_verify() {
    let key = TestKey::p256();
    let mut value = jws_value(&key, &jwk_header(&key, NONCE, URL), ORDER);
    value["payload"] = json!(b64::encode(
        br#"{"identifiers":[{"type":"dns","value":"evil.org"}]}"#
    ));
    let parsed = ParsedJws::parse(value.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.verify(&key.jwk()), Err(JwsError::SignatureMismatch));
}

#[test]
fn an_algorithm_other_than_the_keys_is_refused_when_verifying() {
    // ES384 named in the header, signed with a P-256 key.
    let key = TestKey::p256();
    let mut header = jwk_header(&key, NONCE, URL);
    header["alg"] = json!("ES384");
    let parsed = ParsedJws::parse(&jws_body(&key, &header, ORDER)).unwrap();
    let error = parsed.verify(&key.jwk()).unwrap_err();
    assert!(matches!(
        error,
        JwsError::AlgKeyMismatch {
            alg: Alg::Es384,
            expected: Alg::Es256,
            ..
        }
    ));
    assert_eq!(error.problem().kind, ProblemType::BadSignatureAlgorithm);
}

#[test]
fn the_url_must_be_the_requests() {
    let key = TestKey::ed25519(1);
    let parsed = ParsedJws::parse(&jws_body(&key, &jwk_header(&key, NONCE, URL), ORDER)).unwrap();
    assert_eq!(parsed.check_url(URL), Ok(()));
    let error = parsed
        .check_url("https://acme.example/acme/new-account")
        .unwrap_err();
    assert_eq!(error.problem().kind, ProblemType::Unauthorized);
    assert_eq!(error.problem().status, 403);
}

/// Parses `body`, which must be refused; returns the error and its problem type.
fn refused(body: &[u8]) -> (JwsError, ProblemType) {
    let error = ParsedJws::parse(body).unwrap_err();
    let kind = error.problem().kind;
    (error, kind)
}

/// A body signed by an Ed25519 key with `edit` applied to the usual jwk header.
fn with_header(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Vec<u8> {
    let key = TestKey::ed25519(1);
    let mut header = jwk_header(&key, NONCE, URL);
    edit(header.as_object_mut().unwrap());
    jws_body(&key, &header, ORDER)
}

#[test]
fn forbidden_algorithms_are_bad_signature_algorithms() {
    for (alg, expected) in [
        ("none", JwsError::AlgNone),
        ("HS256", JwsError::AlgMac("HS256".to_owned())),
        ("HS512", JwsError::AlgMac("HS512".to_owned())),
        ("PS256", JwsError::UnsupportedAlg("PS256".to_owned())),
        ("ES512", JwsError::UnsupportedAlg("ES512".to_owned())),
        ("es256", JwsError::UnsupportedAlg("es256".to_owned())),
    ] {
        let (error, kind) = refused(&with_header(|h| {
            h.insert("alg".into(), json!(alg));
        }));
        assert_eq!(error, expected, "{alg}");
        assert_eq!(kind, ProblemType::BadSignatureAlgorithm);
        assert_eq!(
            error.problem().algorithms,
            ["ES256", "ES384", "RS256", "EdDSA"]
        );
    }
    let (error, kind) = refused(&with_header(|h| {
        h.remove("alg");
    }));
    assert_eq!(error, JwsError::Missing("alg"));
    assert_eq!(kind, ProblemType::Malformed);
}

#[test]
fn exactly_one_of_jwk_and_kid() {
    let (error, kind) = refused(&with_header(|h| {
        h.insert("kid".into(), json!(KID));
    }));
    assert_eq!(error, JwsError::BothJwkAndKid);
    assert_eq!(kind, ProblemType::Malformed);
    let (error, kind) = refused(&with_header(|h| {
        h.remove("jwk");
    }));
    assert_eq!(error, JwsError::NeitherJwkNorKid);
    assert_eq!(kind, ProblemType::Malformed);
    let (error, _) = refused(&with_header(|h| {
        h.remove("jwk");
        h.insert("kid".into(), json!(""));
    }));
    assert_eq!(error, JwsError::EmptyKid);
    let (error, _) = refused(&with_header(|h| {
        h.remove("jwk");
        h.insert("kid".into(), json!(1));
    }));
    assert_eq!(error, JwsError::NotAString("kid"));
}

#[test]
fn the_jwk_must_be_an_acceptable_public_key() {
    let (error, kind) = refused(&with_header(|h| {
        h["jwk"]["d"] = json!(b64::encode(&[1; 32]));
    }));
    assert_eq!(error, JwsError::Jwk(JwkError::PrivateKey("d")));
    assert_eq!(kind, ProblemType::Malformed);
    let (error, kind) = refused(&with_header(|h| {
        h["jwk"]["crv"] = json!("Ed448");
    }));
    assert!(matches!(
        error,
        JwsError::Jwk(JwkError::UnsupportedCurve { .. })
    ));
    assert_eq!(kind, ProblemType::BadPublicKey);
}

#[test]
fn nonce_and_url_and_crit() {
    let (error, kind) = refused(&with_header(|h| {
        h.remove("nonce");
    }));
    assert_eq!(error, JwsError::MissingNonce);
    assert_eq!(kind, ProblemType::BadNonce);
    let (error, kind) = refused(&with_header(|h| {
        h.insert("nonce".into(), json!("not+base64url"));
    }));
    assert!(matches!(
        error,
        JwsError::Base64 {
            member: "nonce",
            ..
        }
    ));
    assert_eq!(kind, ProblemType::Malformed);
    let (error, kind) = refused(&with_header(|h| {
        h.remove("url");
    }));
    assert_eq!(error, JwsError::Missing("url"));
    assert_eq!(kind, ProblemType::Malformed);
    let (error, _) = refused(&with_header(|h| {
        h.insert("url".into(), json!(["https://acme.example/"]));
    }));
    assert_eq!(error, JwsError::NotAString("url"));
    let (error, kind) = refused(&with_header(|h| {
        h.insert("crit".into(), json!(["b64"]));
        h.insert("b64".into(), json!(false));
    }));
    assert_eq!(error, JwsError::Critical);
    assert_eq!(kind, ProblemType::Malformed);
    // Parameters ACME does not define are ignored.
    assert!(
        ParsedJws::parse(&with_header(|h| {
            h.insert("typ".into(), json!("JOSE+JSON"));
        }))
        .is_ok()
    );
}

/// A valid body as a JSON object, for layout changes.
fn valid_value() -> Value {
    let key = TestKey::ed25519(1);
    jws_value(&key, &jwk_header(&key, NONCE, URL), ORDER)
}

#[test]
fn layouts_other_than_the_flattened_serialization_are_malformed() {
    let valid = valid_value();

    let general = json!({
        "payload": valid["payload"],
        "signatures": [{"protected": valid["protected"], "signature": valid["signature"]}]
    });
    let (error, kind) = refused(general.to_string().as_bytes());
    assert_eq!(error, JwsError::GeneralSerialization);
    assert_eq!(kind, ProblemType::Malformed);

    let mut unprotected = valid.clone();
    unprotected["header"] = json!({"kid": KID});
    assert_eq!(
        refused(unprotected.to_string().as_bytes()).0,
        JwsError::UnprotectedHeader
    );

    let mut extra = valid.clone();
    extra["extra"] = json!(1);
    assert_eq!(
        refused(extra.to_string().as_bytes()).0,
        JwsError::UnknownMember("extra".to_owned())
    );

    for member in ["protected", "payload", "signature"] {
        let mut missing = valid.clone();
        missing.as_object_mut().unwrap().remove(member);
        let (error, kind) = refused(missing.to_string().as_bytes());
        assert_eq!(error, JwsError::Missing(member));
        assert_eq!(kind, ProblemType::Malformed);
        let mut number = valid.clone();
        number[member] = json!(7);
        assert_eq!(
            refused(number.to_string().as_bytes()).0,
            JwsError::NotAString(member)
        );
    }

    let compact = format!(
        "{}.{}.{}",
        valid["protected"].as_str().unwrap(),
        valid["payload"].as_str().unwrap(),
        valid["signature"].as_str().unwrap()
    );
    let (error, kind) = refused(compact.as_bytes());
    assert!(matches!(error, JwsError::NotJson(_)));
    assert_eq!(kind, ProblemType::Malformed);
    assert!(matches!(refused(b"[1, 2]").0, JwsError::NotJson(_)));
    assert!(matches!(refused(b"").0, JwsError::NotJson(_)));
}

#[test]
fn bad_base64_is_malformed() {
    let valid = valid_value();
    for (member, text) in [
        (
            "protected",
            format!("{}=", valid["protected"].as_str().unwrap()),
        ),
        ("payload", "e30=".to_owned()),
        (
            "signature",
            valid["signature"]
                .as_str()
                .unwrap()
                .replace(['-', '_'], "+"),
        ),
        ("payload", "e3 0".to_owned()),
    ] {
        let mut changed = valid.clone();
        changed[member] = json!(text);
        let (error, kind) = refused(changed.to_string().as_bytes());
        assert!(
            matches!(error, JwsError::Base64 { member: m, .. } if m == member),
            "{member}: {error:?}"
        );
        assert_eq!(kind, ProblemType::Malformed);
    }
}

#[test]
fn a_protected_header_that_is_not_a_json_object_is_malformed() {
    let mut value = valid_value();
    value["protected"] = json!(b64::encode(b"[\"alg\"]"));
    let (error, kind) = refused(value.to_string().as_bytes());
    assert!(matches!(error, JwsError::HeaderNotJson(_)));
    assert_eq!(kind, ProblemType::Malformed);
    value["protected"] = json!(b64::encode(b"\xff\xfe"));
    assert!(matches!(
        refused(value.to_string().as_bytes()).0,
        JwsError::HeaderNotJson(_)
    ));
}

#[test]
fn a_body_over_the_limit_is_refused_before_parsing() {
    let mut body = valid_value().to_string().into_bytes();
    let size = body.len();
    body.resize(JWS_BYTES_MAX, b' ');
    assert!(
        ParsedJws::parse(&body).is_ok(),
        "trailing whitespace up to the limit is JSON"
    );
    body.push(b' ');
    let (error, kind) = refused(&body);
    assert_eq!(
        error,
        JwsError::TooLarge {
            bytes: JWS_BYTES_MAX + 1,
            max: JWS_BYTES_MAX
        }
    );
    assert_eq!(kind, ProblemType::Malformed);
    assert_eq!(error.problem().status, 413);
    assert!(size < JWS_BYTES_MAX);
}
