//! Verifying that one certificate signed another, with ring.

use ring::signature::{self as ring_sig, UnparsedPublicKey, VerificationAlgorithm};
use x509_cert::Certificate;
use x509_cert::spki::{ObjectIdentifier, SubjectPublicKeyInfoOwned};

use super::{ChainError, Parsed};

const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

/// Names for algorithms CAs have used that this log refuses, so the error says what was seen.
const KNOWN_NAMES: &[(&str, &str)] = &[
    ("1.2.840.113549.1.1.2", "md2WithRSAEncryption"),
    ("1.2.840.113549.1.1.4", "md5WithRSAEncryption"),
    ("1.2.840.113549.1.1.5", "sha1WithRSAEncryption"),
    ("1.2.840.113549.1.1.10", "RSASSA-PSS"),
    ("1.2.840.113549.1.1.11", "sha256WithRSAEncryption"),
    ("1.2.840.113549.1.1.12", "sha384WithRSAEncryption"),
    ("1.2.840.113549.1.1.13", "sha512WithRSAEncryption"),
    ("1.2.840.113549.1.1.14", "sha224WithRSAEncryption"),
    ("1.2.840.10045.4.1", "ecdsa-with-SHA1"),
    ("1.2.840.10045.4.3.1", "ecdsa-with-SHA224"),
    ("1.2.840.10045.4.3.2", "ecdsa-with-SHA256"),
    ("1.2.840.10045.4.3.3", "ecdsa-with-SHA384"),
    ("1.2.840.10045.4.3.4", "ecdsa-with-SHA512"),
    ("1.2.840.10040.4.3", "dsa-with-sha1"),
    ("2.16.840.1.101.3.4.3.2", "dsa-with-sha256"),
    ("1.3.101.112", "Ed25519"),
    ("1.3.101.113", "Ed448"),
    ("1.2.840.113549.1.1.1", "rsaEncryption"),
    ("1.2.840.10045.2.1", "id-ecPublicKey"),
    ("1.2.840.10045.3.1.7", "P-256"),
    ("1.3.132.0.34", "P-384"),
    ("1.3.132.0.35", "P-521"),
];

/// Why a signature was not accepted.
pub(super) enum Failure {
    /// The algorithm (or key type) is one ring, and so the log, cannot verify.
    Unsupported(String),
    /// The signature is wrong, or the key cannot be the one that made it.
    Invalid(String),
}

impl Failure {
    pub(super) fn into_error(self, index: usize, issuer_index: usize) -> ChainError {
        match self {
            Self::Unsupported(algorithm) => {
                ChainError::UnsupportedSignatureAlgorithm { index, algorithm }
            }
            Self::Invalid(reason) => ChainError::BadSignature {
                index,
                issuer_index,
                reason,
            },
        }
    }
}

/// Verifies `child`'s signature over its TBSCertificate, as submitted, with `issuer`'s key.
pub(super) fn verify(child: &Parsed<'_>, issuer: &Certificate) -> Result<(), Failure> {
    let spki = &issuer.tbs_certificate.subject_public_key_info;
    let algorithm = choose(&child.cert.signature_algorithm.oid, spki)?;
    let key = spki.subject_public_key.as_bytes().ok_or_else(|| {
        Failure::Invalid("the issuer's public key is not a whole number of bytes".into())
    })?;
    let signature =
        child.cert.signature.as_bytes().ok_or_else(|| {
            Failure::Invalid("the signature is not a whole number of bytes".into())
        })?;
    UnparsedPublicKey::new(algorithm, key)
        .verify(child.tbs_der, signature)
        .map_err(|_| {
            let hint = if spki.algorithm.oid == RSA_ENCRYPTION {
                " (or the issuer's RSA key is outside 2048–8192 bits)"
            } else {
                ""
            };
            Failure::Invalid(format!(
                "the signature does not verify with its public key{hint}"
            ))
        })
}

/// The ring algorithm for a signature algorithm OID and the issuer's key type.
fn choose(
    signature: &ObjectIdentifier,
    spki: &SubjectPublicKeyInfoOwned,
) -> Result<&'static dyn VerificationAlgorithm, Failure> {
    let key = &spki.algorithm.oid;
    let need_key = |wanted: ObjectIdentifier| {
        if *key == wanted {
            Ok(())
        } else {
            Err(Failure::Invalid(format!(
                "it is signed with {} but the issuer's key is {}",
                describe(signature),
                describe(key)
            )))
        }
    };
    if *signature == SHA256_WITH_RSA {
        need_key(RSA_ENCRYPTION)?;
        Ok(&ring_sig::RSA_PKCS1_2048_8192_SHA256)
    } else if *signature == SHA384_WITH_RSA {
        need_key(RSA_ENCRYPTION)?;
        Ok(&ring_sig::RSA_PKCS1_2048_8192_SHA384)
    } else if *signature == SHA512_WITH_RSA {
        need_key(RSA_ENCRYPTION)?;
        Ok(&ring_sig::RSA_PKCS1_2048_8192_SHA512)
    } else if *signature == ECDSA_WITH_SHA256 || *signature == ECDSA_WITH_SHA384 {
        need_key(EC_PUBLIC_KEY)?;
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|params| params.decode_as::<ObjectIdentifier>().ok())
            .ok_or_else(|| {
                Failure::Invalid("the issuer's EC key does not name its curve".into())
            })?;
        let sha256 = *signature == ECDSA_WITH_SHA256;
        match (curve == P256, curve == P384, sha256) {
            (true, _, true) => Ok(&ring_sig::ECDSA_P256_SHA256_ASN1),
            (true, _, false) => Ok(&ring_sig::ECDSA_P256_SHA384_ASN1),
            (_, true, true) => Ok(&ring_sig::ECDSA_P384_SHA256_ASN1),
            (_, true, false) => Ok(&ring_sig::ECDSA_P384_SHA384_ASN1),
            _ => Err(Failure::Unsupported(format!(
                "{} on curve {}",
                describe(signature),
                describe(&curve)
            ))),
        }
    } else if *signature == ED25519 {
        need_key(ED25519)?;
        Ok(&ring_sig::ED25519)
    } else {
        Err(Failure::Unsupported(describe(signature)))
    }
}

/// "name (OID)" when the OID is known, else the dotted OID.
fn describe(oid: &ObjectIdentifier) -> String {
    let dotted = oid.to_string();
    match KNOWN_NAMES.iter().find(|(known, _)| *known == dotted) {
        Some((_, name)) => format!("{name} ({dotted})"),
        None => dotted,
    }
}
