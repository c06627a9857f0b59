//! Signature checks against the RFCs' published JWS examples: RFC 7515 Appendix A.2 (RS256) and
//! A.3 (ES256), RFC 8037 Appendix A.4 (EdDSA); a changed byte anywhere breaks them.

mod common;

use certus_acme::{Alg, Jwk, JwsError, ProblemType, b64};
use common::TestKey;
use serde_json::json;

/// RFC 7515's example payload, as the examples encode it.
const PAYLOAD_B64: &str = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";

const ES256_SIGNATURE: &str =
    "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q";

const RS256_SIGNATURE: &str = "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw";

fn es256_key() -> Jwk {
    Jwk::from_json(&json!({
        "kty": "EC",
        "crv": "P-256",
        "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
        "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
    }))
    .unwrap()
}

fn signing_input(protected_b64: &str) -> Vec<u8> {
    format!("{protected_b64}.{PAYLOAD_B64}").into_bytes()
}

/// Every single-byte change of `input` and of `signature` (one bit flipped in each byte) fails.
fn every_changed_byte_fails(key: &Jwk, alg: Alg, input: &[u8], signature: &[u8]) {
    for at in 0..input.len() {
        let mut changed = input.to_vec();
        changed[at] ^= 0x01;
        assert_eq!(
            key.verify(alg, &changed, signature),
            Err(JwsError::SignatureMismatch),
            "input byte {at}"
        );
    }
    for at in 0..signature.len() {
        let mut changed = signature.to_vec();
        changed[at] ^= 0x80;
        assert_eq!(
            key.verify(alg, input, &changed),
            Err(JwsError::SignatureMismatch),
            "signature byte {at}"
        );
    }
}

#[test]
fn rfc7515_a3_es256_verifies_and_fails_when_changed() {
    // {"alg":"ES256"}
    let input = signing_input("eyJhbGciOiJFUzI1NiJ9");
    let signature = b64::decode(ES256_SIGNATURE).unwrap();
    assert_eq!(signature.len(), 64, "r‖s");
    let key = es256_key();
    assert_eq!(key.verify(Alg::Es256, &input, &signature), Ok(()));
    every_changed_byte_fails(&key, Alg::Es256, &input, &signature);
    // Truncated, or extended: not a P-256 r‖s.
    assert!(key.verify(Alg::Es256, &input, &signature[..63]).is_err());
    assert!(
        key.verify(Alg::Es256, &input, &[&signature[..], &[0]].concat())
            .is_err()
    );
}

#[test]
fn rfc7515_a2_rs256_verifies_and_fails_when_changed() {
    // {"alg":"RS256"}
    let input = signing_input("eyJhbGciOiJSUzI1NiJ9");
    let signature = b64::decode(RS256_SIGNATURE).unwrap();
    let key = Jwk::from_json(&json!({
        "kty": "RSA", "n": common::RFC7515_RSA_N, "e": common::RFC7515_RSA_E
    }))
    .unwrap();
    assert_eq!(key.verify(Alg::Rs256, &input, &signature), Ok(()));
    every_changed_byte_fails(&key, Alg::Rs256, &input, &signature);
}

#[test]
fn rfc7515_a2_signature_is_what_ring_signs_with_its_key() {
    // PKCS#1 v1.5 is deterministic: the test helper's RSA signer reproduces the RFC's bytes.
    let input = signing_input("eyJhbGciOiJSUzI1NiJ9");
    assert_eq!(b64::encode(&TestKey::rsa().sign(&input)), RS256_SIGNATURE);
}

#[test]
fn rfc8037_a4_eddsa_verifies_and_fails_when_changed() {
    let key = Jwk::from_json(&json!({
        "kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    }))
    .unwrap();
    // {"alg":"EdDSA"} . "Example of Ed25519 signing"
    let input = b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
    let signature = b64::decode(
        "hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg",
    )
    .unwrap();
    assert_eq!(key.verify(Alg::EdDsa, input, &signature), Ok(()));
    every_changed_byte_fails(&key, Alg::EdDsa, input, &signature);
}

#[test]
fn a_key_is_used_with_its_own_algorithm_only() {
    let input = signing_input("eyJhbGciOiJFUzI1NiJ9");
    let signature = b64::decode(ES256_SIGNATURE).unwrap();
    let key = es256_key();
    for alg in [Alg::Es384, Alg::Rs256, Alg::EdDsa] {
        let error = key.verify(alg, &input, &signature).unwrap_err();
        assert_eq!(
            error,
            JwsError::AlgKeyMismatch {
                alg,
                key: "an EC P-256 key",
                expected: Alg::Es256
            }
        );
        let problem = error.problem();
        assert_eq!(problem.kind, ProblemType::BadSignatureAlgorithm);
        assert_eq!(problem.algorithms, ["ES256", "ES384", "RS256", "EdDSA"]);
    }
    let rsa = TestKey::rsa().jwk();
    assert!(matches!(
        rsa.verify(Alg::Es256, b"x", &[0; 64]),
        Err(JwsError::AlgKeyMismatch {
            expected: Alg::Rs256,
            ..
        })
    ));
    let ed = TestKey::ed25519(1).jwk();
    assert!(matches!(
        ed.verify(Alg::Rs256, b"x", &[0; 256]),
        Err(JwsError::AlgKeyMismatch {
            expected: Alg::EdDsa,
            ..
        })
    ));
    let p384 = TestKey::p384().jwk();
    assert!(matches!(
        p384.verify(Alg::Es256, b"x", &[0; 64]),
        Err(JwsError::AlgKeyMismatch {
            expected: Alg::Es384,
            ..
        })
    ));
}
