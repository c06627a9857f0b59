//! Verifying that one certificate signed another, with ring.

use ring::signature::{self as ring_sig, UnparsedPublicKey, VerificationAlgorithm};
use x509_cert::Certificate;
use x509_cert::spki::{ObjectIdentifier, SubjectPublicKeyInfoOwned};

use super::{ChainError, Parsed};
use crate::oids::{
    EC_PUBLIC_KEY, ECDSA_WITH_SHA256, ECDSA_WITH_SHA384, ED25519, P256, P384, RSA_ENCRYPTION,
    SHA256_WITH_RSA, SHA384_WITH_RSA, SHA512_WITH_RSA, describe,
};

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
