//! Key rollover (RFC 8555 §7.3.5): the inner JWS checks, each refusal on its own.

mod common;

use certus_acme::{JwsError, KeyRollover, ParsedJws, ProblemType, verify_key_change};
use common::{KID, NONCE, TestKey, jws_body, jws_value, kid_header};
use serde_json::{Value, json};

const KEY_CHANGE_URL: &str = "https://acme.example/acme/key-change";

/// What the client sends: the outer JWS, signed by `old` with the account's kid, around the
/// inner one `inner` built.
struct Request {
    old: TestKey,
    new: TestKey,
    inner_header: Value,
    inner_payload: Value,
}

impl Request {
    fn new() -> Request {
        let old = TestKey::p256();
        let new = TestKey::ed25519(9);
        let inner_header = json!({"alg": new.alg(), "jwk": new.jwk_json(), "url": KEY_CHANGE_URL});
        let inner_payload = json!({"account": KID, "oldKey": old.jwk_json()});
        Request {
            old,
            new,
            inner_header,
            inner_payload,
        }
    }

    fn inner(&self, signer: &TestKey) -> Value {
        jws_value(
            signer,
            &self.inner_header,
            self.inner_payload.to_string().as_bytes(),
        )
    }

    fn outer(&self, inner: &Value) -> ParsedJws {
        let header = kid_header(&self.old, KID, NONCE, KEY_CHANGE_URL);
        ParsedJws::parse(&jws_body(&self.old, &header, inner.to_string().as_bytes())).unwrap()
    }

    fn check(&self) -> Result<KeyRollover, JwsError> {
        let outer = self.outer(&self.inner(&self.new));
        verify_key_change(&outer, &self.old.jwk())
    }
}

/// The key change must be refused as `malformed`, with `detail` in the message.
fn refused_malformed(result: Result<KeyRollover, JwsError>, detail: &str) {
    let error = result.unwrap_err();
    let problem = error.problem();
    assert_eq!(problem.kind, ProblemType::Malformed, "{error}");
    assert!(
        problem.detail.contains(detail),
        "{:?} lacks {detail:?}",
        problem.detail
    );
}

#[test]
fn a_valid_key_change_names_the_account_and_the_new_key() {
    let request = Request::new();
    let rollover = request.check().unwrap();
    assert_eq!(rollover.account, KID);
    assert_eq!(rollover.new_key, request.new.jwk());
}

#[test]
fn the_outer_jws_must_name_the_account_and_verify_with_its_key() {
    let request = Request::new();
    let outer = request.outer(&request.inner(&request.new));
    let error = verify_key_change(&outer, &TestKey::p256().jwk()).unwrap_err();
    assert_eq!(error, JwsError::SignatureMismatch);

    let header = common::jwk_header(&request.old, NONCE, KEY_CHANGE_URL);
    let inner = request.inner(&request.new).to_string();
    let with_jwk = ParsedJws::parse(&jws_body(&request.old, &header, inner.as_bytes())).unwrap();
    assert_eq!(
        verify_key_change(&with_jwk, &request.old.jwk()),
        Err(JwsError::ExpectedKid)
    );
}

#[test]
fn the_inner_jws_must_not_have_a_nonce() {
    let mut request = Request::new();
    request.inner_header["nonce"] = json!(NONCE);
    let error = request.check().unwrap_err();
    assert_eq!(error, JwsError::UnexpectedNonce);
    assert_eq!(error.problem().kind, ProblemType::Malformed);
}

#[test]
fn the_inner_jws_must_carry_the_new_key_as_jwk() {
    let mut request = Request::new();
    let header = request.inner_header.as_object_mut().unwrap();
    header.remove("jwk");
    header.insert("kid".into(), json!(KID));
    refused_malformed(request.check(), "must carry the new key as \"jwk\"");
}

#[test]
fn the_inner_url_must_be_the_outer_one() {
    let mut request = Request::new();
    request.inner_header["url"] = json!("https://acme.example/acme/new-account");
    refused_malformed(request.check(), "is not the outer one");
    request.inner_header.as_object_mut().unwrap().remove("url");
    refused_malformed(request.check(), "the inner JWS: the JWS has no \"url\"");
}

#[test]
fn the_inner_jws_must_be_signed_by_the_new_key() {
    let request = Request::new();
    let forged = request.inner(&TestKey::ed25519(10));
    let outer = request.outer(&forged);
    refused_malformed(
        verify_key_change(&outer, &request.old.jwk()),
        "inner JWS signature does not verify",
    );
}

#[test]
fn the_inner_payload_must_name_the_account_and_its_current_key() {
    let mut request = Request::new();
    request.inner_payload["account"] = json!("https://acme.example/acme/acct/2");
    refused_malformed(request.check(), "is not the outer kid");

    let mut request = Request::new();
    request.inner_payload["oldKey"] = TestKey::p256().jwk_json();
    refused_malformed(request.check(), "oldKey is not the account's current key");

    let mut request = Request::new();
    request.inner_payload["oldKey"]["d"] = json!("AAAA");
    refused_malformed(
        request.check(),
        "oldKey: the JWK has the private member \"d\"",
    );

    let mut request = Request::new();
    request
        .inner_payload
        .as_object_mut()
        .unwrap()
        .remove("oldKey");
    refused_malformed(
        request.check(),
        "must be {\"account\": URL, \"oldKey\": JWK}",
    );
}

#[test]
fn the_new_key_must_differ_from_the_current_one() {
    let mut request = Request::new();
    request.new = TestKey::ed25519(9);
    request.old = TestKey::ed25519(9);
    request.inner_payload["oldKey"] = request.old.jwk_json();
    refused_malformed(request.check(), "the new key is the account's current key");
}

#[test]
fn an_inner_jws_that_is_not_a_jws_is_malformed() {
    let request = Request::new();
    let outer = request.outer(&json!("not a JWS"));
    refused_malformed(
        verify_key_change(&outer, &request.old.jwk()),
        "the inner JWS",
    );

    let header = kid_header(&request.old, KID, NONCE, KEY_CHANGE_URL);
    let body = jws_body(&request.old, &header, b"{not json");
    let outer = ParsedJws::parse(&body).unwrap();
    refused_malformed(
        verify_key_change(&outer, &request.old.jwk()),
        "must be the inner JWS",
    );
}

#[test]
fn inner_algorithm_refusals_keep_their_problem_type() {
    let mut request = Request::new();
    request.inner_header["alg"] = json!("none");
    let error = request.check().unwrap_err();
    assert_eq!(error, JwsError::AlgNone);
    assert_eq!(error.problem().kind, ProblemType::BadSignatureAlgorithm);

    let mut request = Request::new();
    request.inner_header["jwk"] = json!({"kty": "RSA", "n": "AQAB", "e": "AQAB"});
    assert_eq!(
        request.check().unwrap_err().problem().kind,
        ProblemType::BadPublicKey
    );
}
