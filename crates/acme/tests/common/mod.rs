//! Test keys and request bodies: what an ACME client sends, signed with ring.
//!
//! Randomness: the ECDSA keys and signatures draw from `SystemRandom` (ring signs ECDSA only
//! with a random nonce), which is fine in tests; the assertions never depend on the draw.
//! Ed25519 and RSA keys are fixed.

#![allow(dead_code)]

use certus_acme::Jwk;
use certus_acme::b64;
use ring::rand::SystemRandom;
use ring::rsa::{KeyPairComponents, PublicKeyComponents};
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair,
    KeyPair as _, RSA_PKCS1_SHA256, RsaKeyPair,
};
use serde_json::{Value, json};

/// RFC 7515 Appendix A.2's RSA key (2048 bits).
pub const RFC7515_RSA_N: &str = "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ";
pub const RFC7515_RSA_E: &str = "AQAB";
const RFC7515_RSA_D: &str = "Eq5xpGnNCivDflJsRQBXHx1hdR1k6Ulwe2JZD50LpXyWPEAeP88vLNO97IjlA7_GQ5sLKMgvfTeXZx9SE-7YwVol2NXOoAJe46sui395IW_GO-pWJ1O0BkTGoVEn2bKVRUCgu-GjBVaYLU6f3l9kJfFNS3E0QbVdxzubSu3Mkqzjkn439X0M_V51gfpRLI9JYanrC4D4qAdGcopV_0ZHHzQlBjudU2QvXt4ehNYTCBr6XCLQUShb1juUO1ZdiYoFaFQT5Tw8bGUl_x_jTj3ccPDVZFD9pIuhLhBOneufuBiB4cS98l2SR_RQyGWSeWjnczT0QU91p1DhOVRuOopznQ";
const RFC7515_RSA_P: &str = "4BzEEOtIpmVdVEZNCqS7baC4crd0pqnRH_5IB3jw3bcxGn6QLvnEtfdUdiYrqBdss1l58BQ3KhooKeQTa9AB0Hw_Py5PJdTJNPY8cQn7ouZ2KKDcmnPGBY5t7yLc1QlQ5xHdwW1VhvKn-nXqhJTBgIPgtldC-KDV5z-y2XDwGUc";
const RFC7515_RSA_Q: &str = "uQPEfgmVtjL0Uyyx88GZFF1fOunH3-7cepKmtH4pxhtCoHqpWmT8YAmZxaewHgHAjLYsp1ZSe7zFYHj7C6ul7TjeLQeZD_YwD66t62wDmpe_HlB-TnBA-njbglfIsRLtXlnDzQkv5dTltRJ11BKBBypeeF6689rjcJIDEz9RWdc";
const RFC7515_RSA_DP: &str = "BwKfV3Akq5_MFZDFZCnW-wzl-CCo83WoZvnLQwCTeDv8uzluRSnm71I3QCLdhrqE2e9YkxvuxdBfpT_PI7Yz-FOKnu1R6HsJeDCjn12Sk3vmAktV2zb34MCdy7cpdTh_YVr7tss2u6vneTwrA86rZtu5Mbr1C1XsmvkxHQAdYo0";
const RFC7515_RSA_DQ: &str = "h_96-mK1R_7glhsum81dZxjTnYynPbZpHziZjeeHcXYsXaaMwkOlODsWa7I9xXDoRwbKgB719rrmI2oKr6N3Do9U0ajaHF-NKJnwgjMd2w9cjz3_-kyNlxAr2v4IKhGNpmM5iIgOS1VZnOZ68m6_pbLBSp3nssTdlqvd0tIiTHU";
const RFC7515_RSA_QI: &str = "IYd7DHOhrWvxkwPQsRM2tOgrjbcrfvtQJipd-DlcxyVuuM9sQLdgjVk2oy26F0EmpScGLq2MowX7fhd_QJQ3ydy5cY7YIBi87w93IKLEdfnbJtoOPLUW0ITrJReOgo1cq9SbsxYawBgfp_gh6A5603k2-ZQwVK0JKSHuLFkuQ3U";

/// A client's account key, able to sign.
pub enum TestKey {
    P256(EcdsaKeyPair),
    P384(EcdsaKeyPair),
    Rsa(RsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

impl TestKey {
    /// A fresh P-256 key.
    pub fn p256() -> TestKey {
        TestKey::P256(ecdsa(&ECDSA_P256_SHA256_FIXED_SIGNING))
    }

    /// A fresh P-384 key.
    pub fn p384() -> TestKey {
        TestKey::P384(ecdsa(&ECDSA_P384_SHA384_FIXED_SIGNING))
    }

    /// RFC 7515 Appendix A.2's RSA key.
    pub fn rsa() -> TestKey {
        let decode = |text: &str| b64::decode(text).unwrap();
        let components = KeyPairComponents {
            public_key: PublicKeyComponents {
                n: decode(RFC7515_RSA_N),
                e: decode(RFC7515_RSA_E),
            },
            d: decode(RFC7515_RSA_D),
            p: decode(RFC7515_RSA_P),
            q: decode(RFC7515_RSA_Q),
            dP: decode(RFC7515_RSA_DP),
            dQ: decode(RFC7515_RSA_DQ),
            qInv: decode(RFC7515_RSA_QI),
        };
        TestKey::Rsa(RsaKeyPair::from_components(&components).unwrap())
    }

    /// An Ed25519 key from a fixed seed.
    pub fn ed25519(seed: u8) -> TestKey {
        TestKey::Ed25519(Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).unwrap())
    }

    /// The JOSE algorithm name this key signs with.
    pub fn alg(&self) -> &'static str {
        match self {
            TestKey::P256(_) => "ES256",
            TestKey::P384(_) => "ES384",
            TestKey::Rsa(_) => "RS256",
            TestKey::Ed25519(_) => "EdDSA",
        }
    }

    /// The public JWK a client would send, with an optional member servers ignore.
    pub fn jwk_json(&self) -> Value {
        match self {
            TestKey::P256(pair) | TestKey::P384(pair) => {
                let point = pair.public_key().as_ref();
                assert_eq!(point[0], 0x04);
                let (x, y) = point[1..].split_at((point.len() - 1) / 2);
                let crv = if x.len() == 32 { "P-256" } else { "P-384" };
                json!({"kty": "EC", "crv": crv, "x": b64::encode(x), "y": b64::encode(y), "use": "sig"})
            }
            TestKey::Rsa(_) => {
                json!({"kty": "RSA", "n": RFC7515_RSA_N, "e": RFC7515_RSA_E, "kid": "2011-04-29"})
            }
            TestKey::Ed25519(pair) => json!({
                "kty": "OKP", "crv": "Ed25519", "x": b64::encode(pair.public_key().as_ref())
            }),
        }
    }

    /// The public key, parsed.
    pub fn jwk(&self) -> Jwk {
        Jwk::from_json(&self.jwk_json()).unwrap()
    }

    /// A JWS signature over `input` (ECDSA r‖s, RSA PKCS#1 v1.5, Ed25519).
    pub fn sign(&self, input: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        match self {
            TestKey::P256(pair) | TestKey::P384(pair) => {
                pair.sign(&rng, input).unwrap().as_ref().to_vec()
            }
            TestKey::Rsa(pair) => {
                let mut signature = vec![0; pair.public().modulus_len()];
                pair.sign(&RSA_PKCS1_SHA256, &rng, input, &mut signature)
                    .unwrap();
                signature
            }
            TestKey::Ed25519(pair) => pair.sign(input).as_ref().to_vec(),
        }
    }
}

fn ecdsa(alg: &'static ring::signature::EcdsaSigningAlgorithm) -> EcdsaKeyPair {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap()
}

/// A flattened JWS of `header` and `payload`, signed by `key`, as a JSON value.
pub fn jws_value(key: &TestKey, header: &Value, payload: &[u8]) -> Value {
    let protected = b64::encode(header.to_string().as_bytes());
    let payload = b64::encode(payload);
    let signature = key.sign(format!("{protected}.{payload}").as_bytes());
    json!({"protected": protected, "payload": payload, "signature": b64::encode(&signature)})
}

/// The same, as a request body.
pub fn jws_body(key: &TestKey, header: &Value, payload: &[u8]) -> Vec<u8> {
    jws_value(key, header, payload).to_string().into_bytes()
}

/// A newAccount-style header: the key itself.
pub fn jwk_header(key: &TestKey, nonce: &str, url: &str) -> Value {
    json!({"alg": key.alg(), "jwk": key.jwk_json(), "nonce": nonce, "url": url})
}

/// An account request's header: the account URL.
pub fn kid_header(key: &TestKey, kid: &str, nonce: &str, url: &str) -> Value {
    json!({"alg": key.alg(), "kid": kid, "nonce": nonce, "url": url})
}

/// A nonce-shaped value (base64url) for headers.
pub const NONCE: &str = "AAABAAAAAAAAAAAAAAAAAAAAAA";
/// An account URL.
pub const KID: &str = "https://acme.example/acme/acct/1";
/// A request URL.
pub const URL: &str = "https://acme.example/acme/new-order";
