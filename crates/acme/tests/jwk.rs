//! Account keys: the RFC thumbprints, canonical form, and what is refused with which problem.

mod common;

use certus_acme::limits::{RSA_BITS_MAX, RSA_BITS_MIN};
use certus_acme::{Jwk, JwkError, KeyType, ProblemType, b64};
use common::TestKey;
use serde_json::{Value, json};

/// RFC 7638 §3.1's example key, with the optional members it shows.
fn rfc7638_key() -> Value {
    json!({
        "kty": "RSA",
        "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
        "e": "AQAB",
        "alg": "RS256",
        "kid": "2011-04-29"
    })
}

#[test]
fn rfc7638_rsa_thumbprint() {
    let key = Jwk::from_json(&rfc7638_key()).unwrap();
    assert_eq!(
        key.thumbprint(),
        "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
    );
    let n = rfc7638_key()["n"].as_str().unwrap().to_owned();
    assert_eq!(
        key.canonical_json(),
        format!(r#"{{"e":"AQAB","kty":"RSA","n":"{n}"}}"#)
    );
    assert_eq!(key.key_type(), KeyType::Rsa { bits: 2048 });
}

#[test]
fn rfc8037_ed25519_thumbprint() {
    let key = Jwk::from_json(&json!({
        "kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    }))
    .unwrap();
    assert_eq!(
        key.thumbprint(),
        "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
    );
    assert_eq!(
        key.canonical_json(),
        r#"{"crv":"Ed25519","kty":"OKP","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#
    );
}

#[test]
fn ec_canonical_json_orders_the_members() {
    let key = Jwk::from_json(&json!({
        "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
        "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
        "kty": "EC",
        "crv": "P-256",
        "kid": "e9bc097a-ce51-4036-9562-d2ade882db0d"
    }))
    .unwrap();
    assert_eq!(
        key.canonical_json(),
        r#"{"crv":"P-256","kty":"EC","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#
    );
    assert_eq!(key.key_type(), KeyType::EcP256);
}

#[test]
fn key_authorization_is_token_dot_thumbprint() {
    let key = Jwk::from_json(&rfc7638_key()).unwrap();
    assert_eq!(
        key.key_authorization("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA"),
        "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
    );
}

#[test]
fn to_json_is_the_canonical_public_key_and_reads_back_equal() {
    for key in [
        TestKey::p256(),
        TestKey::p384(),
        TestKey::rsa(),
        TestKey::ed25519(1),
    ] {
        let jwk = key.jwk();
        let json = jwk.to_json();
        // Only the required members: the test keys' "use"/"kid" are gone.
        let expected: Value = serde_json::from_str(&jwk.canonical_json()).unwrap();
        assert_eq!(json, expected);
        assert!(json.get("use").is_none() && json.get("kid").is_none());
        let back = Jwk::from_json(&json).unwrap();
        assert_eq!(back, jwk);
        assert_eq!(back.thumbprint(), jwk.thumbprint());
    }
}

#[test]
fn same_key_ignores_optional_members_and_tells_keys_apart() {
    let mut decorated = rfc7638_key();
    decorated["use"] = json!("sig");
    decorated["kid"] = json!("another");
    let plain = json!({"kty": "RSA", "n": rfc7638_key()["n"], "e": "AQAB"});
    let a = Jwk::from_json(&decorated).unwrap();
    let b = Jwk::from_json(&plain).unwrap();
    assert!(a.same_key(&b));
    assert_eq!(a, b);
    let other = TestKey::ed25519(1).jwk();
    assert!(!a.same_key(&other));
    assert_ne!(TestKey::ed25519(1).jwk(), TestKey::ed25519(2).jwk());
    assert_ne!(TestKey::p256().jwk(), TestKey::p256().jwk());
}

#[test]
fn key_types_and_algorithms() {
    assert_eq!(TestKey::p256().jwk().alg().name(), "ES256");
    assert_eq!(TestKey::p384().jwk().alg().name(), "ES384");
    assert_eq!(TestKey::p384().jwk().key_type(), KeyType::EcP384);
    assert_eq!(TestKey::rsa().jwk().alg().name(), "RS256");
    assert_eq!(TestKey::ed25519(3).jwk().alg().name(), "EdDSA");
    assert_eq!(TestKey::ed25519(3).jwk().key_type(), KeyType::Ed25519);
}

/// An RSA modulus of `bits` bits (top bit set, odd): not a real key, enough for the checks.
fn modulus(bits: usize) -> String {
    let mut n = vec![0x5a_u8; bits.div_ceil(8)];
    let top_bits = bits - (n.len() - 1) * 8;
    n[0] = 0xff >> (8 - top_bits);
    *n.last_mut().unwrap() |= 1;
    b64::encode(&n)
}

fn refused(jwk: Value) -> (JwkError, ProblemType) {
    let error = Jwk::from_json(&jwk).unwrap_err();
    let kind = error.problem().kind;
    (error, kind)
}

#[test]
fn rsa_modulus_sizes() {
    for bits in [RSA_BITS_MIN, 3072, 4096, RSA_BITS_MAX] {
        let key = Jwk::from_json(&json!({"kty": "RSA", "n": modulus(bits), "e": "AQAB"})).unwrap();
        assert_eq!(key.key_type(), KeyType::Rsa { bits });
    }
    for bits in [1024, RSA_BITS_MIN - 1, RSA_BITS_MAX + 1] {
        let (error, kind) = refused(json!({"kty": "RSA", "n": modulus(bits), "e": "AQAB"}));
        assert_eq!(error, JwkError::RsaModulus(format!("{bits} bits")));
        assert_eq!(kind, ProblemType::BadPublicKey);
    }
}

#[test]
fn rsa_encodings_and_exponents_refused() {
    let n = modulus(2048);
    let mut padded = b64::decode(&n).unwrap();
    padded.insert(0, 0);
    let (error, kind) = refused(json!({"kty": "RSA", "n": b64::encode(&padded), "e": "AQAB"}));
    assert_eq!(error, JwkError::LeadingZero("n"));
    assert_eq!(kind, ProblemType::Malformed);
    let (error, _) = refused(json!({"kty": "RSA", "n": n, "e": "AAEAAQ"}));
    assert_eq!(error, JwkError::LeadingZero("e"));

    let mut even = b64::decode(&n).unwrap();
    *even.last_mut().unwrap() &= 0xfe;
    let (error, kind) = refused(json!({"kty": "RSA", "n": b64::encode(&even), "e": "AQAB"}));
    assert_eq!(error, JwkError::RsaModulus("even".to_owned()));
    assert_eq!(kind, ProblemType::BadPublicKey);

    for (e, shown) in [
        (vec![1], "1"),
        (vec![4], "4"),
        (vec![1, 0, 0, 0, 0], "4294967296"),
        (vec![2, 0, 0, 0, 1], "8589934593"),
    ] {
        let (error, kind) = refused(json!({"kty": "RSA", "n": n, "e": b64::encode(&e)}));
        assert_eq!(error, JwkError::RsaExponent(shown.to_owned()));
        assert_eq!(kind, ProblemType::BadPublicKey);
    }
    let (error, _) = refused(json!({"kty": "RSA", "n": n, "e": b64::encode(&[1; 6])}));
    assert_eq!(error, JwkError::RsaExponent("6 bytes long".to_owned()));
    // 3 and 2^33 - 1 are the ends of ring's range.
    assert!(Jwk::from_json(&json!({"kty": "RSA", "n": n, "e": "Aw"})).is_ok());
    let e_max = b64::encode(&[1, 0xff, 0xff, 0xff, 0xff]);
    assert!(Jwk::from_json(&json!({"kty": "RSA", "n": n, "e": e_max})).is_ok());
}

#[test]
fn private_keys_refused() {
    let mut ec = TestKey::p256().jwk_json();
    ec["d"] = json!("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI");
    let (error, kind) = refused(ec);
    assert_eq!(error, JwkError::PrivateKey("d"));
    assert_eq!(kind, ProblemType::Malformed);

    let mut rsa = TestKey::rsa().jwk_json();
    rsa["p"] = json!("AQAB");
    assert_eq!(refused(rsa).0, JwkError::PrivateKey("p"));
    let oct = json!({"kty": "oct", "k": "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T"});
    assert_eq!(refused(oct).0, JwkError::PrivateKey("k"));
}

#[test]
fn unsupported_types_and_curves_are_bad_public_keys() {
    let (error, kind) = refused(json!({"kty": "oct"}));
    assert_eq!(error, JwkError::UnsupportedKeyType("oct".to_owned()));
    assert_eq!(kind, ProblemType::BadPublicKey);
    let (error, kind) = refused(json!({"kty": "EC", "crv": "P-521", "x": "AA", "y": "AA"}));
    assert!(
        matches!(error, JwkError::UnsupportedCurve { kty: "EC", ref crv, .. } if crv == "P-521")
    );
    assert_eq!(kind, ProblemType::BadPublicKey);
    let (error, kind) = refused(json!({"kty": "OKP", "crv": "X25519", "x": "AA"}));
    assert!(matches!(
        error,
        JwkError::UnsupportedCurve { kty: "OKP", .. }
    ));
    assert_eq!(kind, ProblemType::BadPublicKey);
}

#[test]
fn malformed_members_refused() {
    let good = TestKey::p256().jwk_json();
    let x = b64::decode(good["x"].as_str().unwrap()).unwrap();

    let mut short = good.clone();
    short["x"] = json!(b64::encode(&x[1..]));
    let (error, kind) = refused(short);
    assert_eq!(
        error,
        JwkError::Length {
            member: "x",
            crv: "P-256",
            expected: 32,
            found: 31
        }
    );
    assert_eq!(kind, ProblemType::Malformed);

    // A P-256 point claimed to be P-384: the lengths give it away.
    let mut wrong_curve = good.clone();
    wrong_curve["crv"] = json!("P-384");
    assert!(matches!(
        refused(wrong_curve).0,
        JwkError::Length {
            expected: 48,
            found: 32,
            ..
        }
    ));

    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("y");
    assert_eq!(refused(missing).0, JwkError::Missing("y"));

    let mut number = good.clone();
    number["x"] = json!(42);
    assert_eq!(refused(number).0, JwkError::NotAString("x"));

    let mut padded = good.clone();
    padded["x"] = json!(format!("{}=", good["x"].as_str().unwrap()));
    assert!(matches!(
        refused(padded).0,
        JwkError::Base64 { member: "x", .. }
    ));

    assert_eq!(refused(json!({"crv": "P-256"})).0, JwkError::Missing("kty"));
    assert_eq!(refused(json!("a key")).0, JwkError::NotAnObject("a string"));
    assert_eq!(refused(json!(null)).0, JwkError::NotAnObject("null"));

    let ed = json!({"kty": "OKP", "crv": "Ed25519", "x": b64::encode(&[1; 31])});
    assert!(matches!(
        refused(ed).0,
        JwkError::Length {
            crv: "Ed25519",
            expected: 32,
            ..
        }
    ));
}
