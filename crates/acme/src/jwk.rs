//! An account's public key, as a JSON Web Key (RFC 7517) carries it: parsed, checked, written
//! back in canonical form, thumbprinted (RFC 7638) and used to verify JWS signatures.
//!
//! Accepted: EC P-256 and P-384 (`kty` "EC", RFC 7518 §6.2), RSA with a modulus of 2048 to 8192
//! bits (`kty` "RSA", §6.3) and Ed25519 (`kty` "OKP", RFC 8037 §2). Refused: private keys (any
//! private member present), every other key type and curve, EC coordinates and Ed25519 keys not
//! of the curve's exact length, and RSA integers not in their minimal encoding (they would give
//! a thumbprint other than the client's). Optional members (`kid`, `use`, `alg`, ...) are
//! ignored and not kept.
//!
//! **Invariant:** a [`Jwk`] holds only the key's defining values, each in its one valid
//! encoding, so two `Jwk`s are equal exactly when their canonical JSON (and thumbprint) is.
//!
//! Not checked here: that an EC point lies on its curve. ring checks it on every verification,
//! so a key off its curve verifies nothing and cannot open an account.

use std::fmt;

use ring::signature::{self as ring_sig, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value, json};

use crate::alg::Alg;
use crate::b64;
use crate::error::{JwkError, JwsError};
use crate::limits::{RSA_BITS_MAX, RSA_BITS_MIN, RSA_EXPONENT_MAX, RSA_EXPONENT_MIN};

/// Members that make a JWK private: EC and OKP `d` (RFC 7518 §6.2.2, RFC 8037 §2), RSA's private
/// members (RFC 7518 §6.3.2) and a symmetric key's `k` (§6.4.1).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// A public account key: EC P-256, EC P-384, RSA or Ed25519 (see the module documentation).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Jwk {
    key: Key,
}

/// The key's defining values, decoded. Private: see the module's invariant.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Key {
    P256 {
        x: [u8; 32],
        y: [u8; 32],
    },
    P384 {
        x: [u8; 48],
        y: [u8; 48],
    },
    /// Big-endian, without leading zero bytes.
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    Ed25519 {
        x: [u8; 32],
    },
}

/// The kind of an account key, for messages, logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyType {
    /// ECDSA on P-256.
    EcP256,
    /// ECDSA on P-384.
    EcP384,
    /// RSA, with its modulus's size.
    Rsa {
        /// The modulus's size in bits.
        bits: usize,
    },
    /// Ed25519.
    Ed25519,
}

impl KeyType {
    /// The key type in words, for messages.
    pub const fn describe(self) -> &'static str {
        match self {
            KeyType::EcP256 => "an EC P-256 key",
            KeyType::EcP384 => "an EC P-384 key",
            KeyType::Rsa { .. } => "an RSA key",
            KeyType::Ed25519 => "an Ed25519 key",
        }
    }
}

/// `id-ecPublicKey` (RFC 5480).
const OID_EC_PUBLIC_KEY: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// `secp256r1`, P-256 (RFC 5480).
const OID_P256: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
/// `secp384r1`, P-384 (RFC 5480).
const OID_P384: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.3.132.0.34");
/// `rsaEncryption` (RFC 8017).
const OID_RSA: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
/// `id-Ed25519` (RFC 8410).
const OID_ED25519: der::asn1::ObjectIdentifier =
    der::asn1::ObjectIdentifier::new_unwrap("1.3.101.112");

impl Jwk {
    /// The key of a certificate's SubjectPublicKeyInfo (DER), as a JWK: what a revocation signed
    /// with the certificate's own key is checked against (RFC 8555 §7.6). The same kinds and
    /// sizes as [`Jwk::from_json`] are accepted.
    pub fn from_spki_der(spki_der: &[u8]) -> Result<Jwk, JwkError> {
        use der::{Decode as _, Reader as _};
        let bad = |what: String| JwkError::Spki(what);
        let spki = spki::SubjectPublicKeyInfoRef::from_der(spki_der)
            .map_err(|error| bad(format!("not a SubjectPublicKeyInfo: {error}")))?;
        let key = spki
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| bad("the key's bit string has unused bits".to_owned()))?;
        let value = match spki.algorithm.oid {
            OID_EC_PUBLIC_KEY => {
                let curve = spki
                    .algorithm
                    .parameters_oid()
                    .map_err(|error| bad(format!("an EC key without a named curve: {error}")))?;
                let (crv, size) = match curve {
                    OID_P256 => ("P-256", 32),
                    OID_P384 => ("P-384", 48),
                    other => return Err(bad(format!("EC curve {other} is not accepted"))),
                };
                if key.len() != 1 + 2 * size || key[0] != 0x04 {
                    return Err(bad(format!(
                        "an uncompressed {crv} point is {} bytes starting with 04",
                        1 + 2 * size
                    )));
                }
                json!({
                    "kty": "EC",
                    "crv": crv,
                    "x": b64::encode(&key[1..=size]),
                    "y": b64::encode(&key[1 + size..]),
                })
            }
            OID_RSA => {
                let mut reader = der::SliceReader::new(key)
                    .map_err(|error| bad(format!("an RSA key that does not decode: {error}")))?;
                let (n, e) = reader
                    .sequence(|sequence| {
                        let n = der::asn1::UintRef::decode(sequence)?;
                        let e = der::asn1::UintRef::decode(sequence)?;
                        Ok((n.as_bytes().to_vec(), e.as_bytes().to_vec()))
                    })
                    .map_err(|error: der::Error| {
                        bad(format!("an RSA key that does not decode: {error}"))
                    })?;
                json!({ "kty": "RSA", "n": b64::encode(&n), "e": b64::encode(&e) })
            }
            OID_ED25519 => json!({ "kty": "OKP", "crv": "Ed25519", "x": b64::encode(key) }),
            other => return Err(bad(format!("key algorithm {other} is not accepted"))),
        };
        Jwk::from_json(&value)
    }

    /// Parses a public JWK (the `jwk` header parameter, an `oldKey`, a stored key).
    pub fn from_json(value: &Value) -> Result<Jwk, JwkError> {
        let object = value
            .as_object()
            .ok_or(JwkError::NotAnObject(json_kind(value)))?;
        if let Some(private) = PRIVATE_MEMBERS
            .into_iter()
            .find(|member| object.contains_key(*member))
        {
            return Err(JwkError::PrivateKey(private));
        }
        let key = match string_member(object, "kty")? {
            "EC" => match string_member(object, "crv")? {
                "P-256" => Key::P256 {
                    x: fixed_member(object, "x", "P-256")?,
                    y: fixed_member(object, "y", "P-256")?,
                },
                "P-384" => Key::P384 {
                    x: fixed_member(object, "x", "P-384")?,
                    y: fixed_member(object, "y", "P-384")?,
                },
                crv => {
                    return Err(JwkError::UnsupportedCurve {
                        kty: "EC",
                        crv: crv.to_owned(),
                        accepted: "\"P-256\" or \"P-384\"",
                    });
                }
            },
            "OKP" => match string_member(object, "crv")? {
                "Ed25519" => Key::Ed25519 {
                    x: fixed_member(object, "x", "Ed25519")?,
                },
                crv => {
                    return Err(JwkError::UnsupportedCurve {
                        kty: "OKP",
                        crv: crv.to_owned(),
                        accepted: "\"Ed25519\"",
                    });
                }
            },
            "RSA" => rsa_key(object)?,
            kty => return Err(JwkError::UnsupportedKeyType(kty.to_owned())),
        };
        Ok(Jwk { key })
    }

    /// The kind of key.
    pub fn key_type(&self) -> KeyType {
        match &self.key {
            Key::P256 { .. } => KeyType::EcP256,
            Key::P384 { .. } => KeyType::EcP384,
            Key::Rsa { n, .. } => KeyType::Rsa {
                bits: modulus_bits(n),
            },
            Key::Ed25519 { .. } => KeyType::Ed25519,
        }
    }

    /// The one algorithm this key signs with: a JWS naming another is refused.
    pub fn alg(&self) -> Alg {
        match self.key {
            Key::P256 { .. } => Alg::Es256,
            Key::P384 { .. } => Alg::Es384,
            Key::Rsa { .. } => Alg::Rs256,
            Key::Ed25519 { .. } => Alg::EdDsa,
        }
    }

    /// The key's canonical JSON (RFC 7638 §3.2): its required members only, in lexicographic
    /// order, without whitespace. The input of [`Jwk::thumbprint`].
    pub fn canonical_json(&self) -> String {
        // The values are base64url and fixed names: nothing to escape.
        match &self.key {
            Key::P256 { x, y } => ec_json("P-256", x, y),
            Key::P384 { x, y } => ec_json("P-384", x, y),
            Key::Rsa { n, e } => format!(
                r#"{{"e":"{}","kty":"RSA","n":"{}"}}"#,
                b64::encode(e),
                b64::encode(n)
            ),
            Key::Ed25519 { x } => {
                format!(
                    r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
                    b64::encode(x)
                )
            }
        }
    }

    /// The canonical public JWK as a JSON value, for storing the key and echoing it (an
    /// account's `key`). [`Jwk::from_json`] reads it back to an equal key.
    pub fn to_json(&self) -> Value {
        match &self.key {
            Key::P256 { x, y } => {
                json!({"crv": "P-256", "kty": "EC", "x": b64::encode(x), "y": b64::encode(y)})
            }
            Key::P384 { x, y } => {
                json!({"crv": "P-384", "kty": "EC", "x": b64::encode(x), "y": b64::encode(y)})
            }
            Key::Rsa { n, e } => json!({"e": b64::encode(e), "kty": "RSA", "n": b64::encode(n)}),
            Key::Ed25519 { x } => json!({"crv": "Ed25519", "kty": "OKP", "x": b64::encode(x)}),
        }
    }

    /// The RFC 7638 thumbprint: base64url of the SHA-256 of [`Jwk::canonical_json`]. It names
    /// the key in key authorizations.
    pub fn thumbprint(&self) -> String {
        let digest = ring::digest::digest(&ring::digest::SHA256, self.canonical_json().as_bytes());
        b64::encode(digest.as_ref())
    }

    /// The key authorization for a challenge token (RFC 8555 §8.1): `token "." thumbprint`,
    /// what an HTTP-01 response body must be.
    pub fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.thumbprint())
    }

    /// Whether `other` is the same key (equality of the canonical form; same as `==`).
    pub fn same_key(&self, other: &Jwk) -> bool {
        self == other
    }

    /// Verifies `signature` over `signing_input` with this key and `alg`, which must be the
    /// key's own algorithm ([`Jwk::alg`]): a key is never used with an algorithm of another
    /// kind. ES256/ES384 signatures are r‖s (RFC 7518 §3.4), not DER.
    pub fn verify(&self, alg: Alg, signing_input: &[u8], signature: &[u8]) -> Result<(), JwsError> {
        if alg != self.alg() {
            return Err(JwsError::AlgKeyMismatch {
                alg,
                key: self.key_type().describe(),
                expected: self.alg(),
            });
        }
        let verified = match &self.key {
            Key::P256 { x, y } => {
                UnparsedPublicKey::new(&ring_sig::ECDSA_P256_SHA256_FIXED, uncompressed_point(x, y))
                    .verify(signing_input, signature)
            }
            Key::P384 { x, y } => {
                UnparsedPublicKey::new(&ring_sig::ECDSA_P384_SHA384_FIXED, uncompressed_point(x, y))
                    .verify(signing_input, signature)
            }
            Key::Rsa { n, e } => RsaPublicKeyComponents { n, e }.verify(
                &ring_sig::RSA_PKCS1_2048_8192_SHA256,
                signing_input,
                signature,
            ),
            Key::Ed25519 { x } => {
                UnparsedPublicKey::new(&ring_sig::ED25519, x).verify(signing_input, signature)
            }
        };
        verified.map_err(|_| JwsError::SignatureMismatch)
    }
}

impl fmt::Debug for Jwk {
    /// The key type and thumbprint: enough to tell keys apart, short enough for a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwk")
            .field("type", &self.key_type())
            .field("thumbprint", &self.thumbprint())
            .finish()
    }
}

fn ec_json(crv: &str, x: &[u8], y: &[u8]) -> String {
    format!(
        r#"{{"crv":"{crv}","kty":"EC","x":"{}","y":"{}"}}"#,
        b64::encode(x),
        b64::encode(y)
    )
}

/// SEC 1 §2.3.3's uncompressed point, the form ring reads: 0x04 ‖ x ‖ y.
fn uncompressed_point(x: &[u8], y: &[u8]) -> Vec<u8> {
    let mut point = Vec::with_capacity(1 + x.len() + y.len());
    point.push(0x04);
    point.extend_from_slice(x);
    point.extend_from_slice(y);
    point
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string_member<'a>(
    object: &'a Map<String, Value>,
    member: &'static str,
) -> Result<&'a str, JwkError> {
    object
        .get(member)
        .ok_or(JwkError::Missing(member))?
        .as_str()
        .ok_or(JwkError::NotAString(member))
}

fn bytes_member(object: &Map<String, Value>, member: &'static str) -> Result<Vec<u8>, JwkError> {
    b64::decode(string_member(object, member)?).map_err(|error| JwkError::Base64 { member, error })
}

/// A member of exactly `N` bytes: an EC coordinate or an Ed25519 key.
fn fixed_member<const N: usize>(
    object: &Map<String, Value>,
    member: &'static str,
    crv: &'static str,
) -> Result<[u8; N], JwkError> {
    let bytes = bytes_member(object, member)?;
    <[u8; N]>::try_from(bytes.as_slice()).map_err(|_| JwkError::Length {
        member,
        crv,
        expected: N,
        found: bytes.len(),
    })
}

fn rsa_key(object: &Map<String, Value>) -> Result<Key, JwkError> {
    let n = bytes_member(object, "n")?;
    let e = bytes_member(object, "e")?;
    if n.first() == Some(&0) {
        return Err(JwkError::LeadingZero("n"));
    }
    if e.first() == Some(&0) {
        return Err(JwkError::LeadingZero("e"));
    }
    let bits = modulus_bits(&n);
    if !(RSA_BITS_MIN..=RSA_BITS_MAX).contains(&bits) {
        return Err(JwkError::RsaModulus(format!("{bits} bits")));
    }
    if n.last().is_some_and(|last| last & 1 == 0) {
        return Err(JwkError::RsaModulus("even".to_owned()));
    }
    // At most 5 bytes can hold RSA_EXPONENT_MAX; more is out of range whatever the value.
    let exponent = if e.len() <= 5 {
        e.iter()
            .fold(0u64, |value, byte| (value << 8) | u64::from(*byte))
    } else {
        return Err(JwkError::RsaExponent(format!("{} bytes long", e.len())));
    };
    if !(RSA_EXPONENT_MIN..=RSA_EXPONENT_MAX).contains(&exponent) || exponent & 1 == 0 {
        return Err(JwkError::RsaExponent(exponent.to_string()));
    }
    Ok(Key::Rsa { n, e })
}

/// The size in bits of a big-endian integer without leading zero bytes.
fn modulus_bits(n: &[u8]) -> usize {
    match n.first() {
        None => 0,
        Some(first) => n.len() * 8 - first.leading_zeros() as usize,
    }
}
