//! Certificates read back: what revocation needs to know of a certificate a client presents
//! (RFC 8555 §7.6 sends it as DER) or of the chain an order finished with (PEM).
//!
//! [`leaf_info`] parses an X.509 certificate (x509-cert, strict DER, as the CSR check does) and
//! returns its serial, its public key, its DNS names and its notAfter; it checks nothing else
//! (not the signature, not the issuer): the caller compares these with what the cluster issued.
//! [`first_pem_certificate`] takes the leaf out of a PEM chain, leaf first, as the built-in
//! issuer and the upstream CAs hand it out.

use std::fmt::Write as _;

use der::{Decode, Encode};
use x509_cert::Certificate;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use crate::limits::{CERTIFICATE_DER_BYTES_MAX, CERTIFICATE_PEM_CHAIN_BYTES_MAX};

const PEM_BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
const PEM_END: &[u8] = b"-----END CERTIFICATE-----";

/// What revocation needs of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafInfo {
    /// The serial: the DER INTEGER's content bytes as the certificate stores them.
    pub serial: Vec<u8>,
    /// The serial as lowercase hex of exactly those bytes (a leading `00` kept when encoded).
    pub serial_hex: String,
    /// The certified key: the SubjectPublicKeyInfo, DER.
    pub spki_der: Vec<u8>,
    /// The subjectAltName's dNSName entries, in the certificate's order (other name types are
    /// left out; empty when there is no subjectAltName).
    pub dns_names: Vec<String>,
    /// The notAfter (inclusive), in milliseconds since the Unix epoch (whole seconds).
    pub not_after_ms: u64,
}

/// Why a certificate could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// An input larger than its bound.
    #[error("the {what} is {size} bytes; at most {max} are accepted")]
    TooLarge {
        /// "certificate" or "PEM chain".
        what: &'static str,
        /// Its size.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// The bytes are not a DER X.509 certificate.
    #[error("the certificate does not parse: {reason} (expected an X.509 certificate in DER)")]
    Unparsable {
        /// What went wrong.
        reason: String,
    },
    /// A certificate extension this reader needs does not decode.
    #[error("the certificate's {extension} does not decode: {reason}")]
    BadExtension {
        /// The extension's name.
        extension: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The chain has no complete `CERTIFICATE` PEM block.
    #[error(
        "the PEM chain holds no complete certificate: expected a \"-----BEGIN CERTIFICATE-----\" \
         line and, after it, an \"-----END CERTIFICATE-----\" line"
    )]
    NoPemCertificate,
    /// The first `CERTIFICATE` block is not valid PEM.
    #[error("the first PEM certificate does not decode: {reason} (expected RFC 7468 base64)")]
    BadPem {
        /// What went wrong.
        reason: String,
    },
}

/// Reads a DER certificate's serial, key, DNS names and notAfter (see [`LeafInfo`]).
pub fn leaf_info(der: &[u8]) -> Result<LeafInfo, CertificateError> {
    if der.len() > CERTIFICATE_DER_BYTES_MAX {
        return Err(CertificateError::TooLarge {
            what: "certificate",
            size: der.len(),
            max: CERTIFICATE_DER_BYTES_MAX,
        });
    }
    let unparsable = |e: der::Error| CertificateError::Unparsable {
        reason: e.to_string(),
    };
    let certificate = Certificate::from_der(der).map_err(unparsable)?;
    let tbs = &certificate.tbs_certificate;
    let serial = tbs.serial_number.as_bytes().to_vec();
    let spki_der = tbs.subject_public_key_info.to_der().map_err(unparsable)?;
    let san = tbs
        .get::<SubjectAltName>()
        .map_err(|e| CertificateError::BadExtension {
            extension: "subjectAltName",
            reason: e.to_string(),
        })?;
    let dns_names = san
        .map(|(_, san)| {
            san.0
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DnsName(dns) => Some(dns.as_str().to_owned()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let not_after_ms = tbs
        .validity
        .not_after
        .to_unix_duration()
        .as_secs()
        .saturating_mul(1000);
    Ok(LeafInfo {
        serial_hex: hex(&serial),
        serial,
        spki_der,
        dns_names,
        not_after_ms,
    })
}

/// The DER of the first `CERTIFICATE` block of a PEM chain (the leaf, as chains are ordered),
/// checked to be an X.509 certificate. Text before it and blocks after it are not read.
pub fn first_pem_certificate(pem_chain: &[u8]) -> Result<Vec<u8>, CertificateError> {
    if pem_chain.len() > CERTIFICATE_PEM_CHAIN_BYTES_MAX {
        return Err(CertificateError::TooLarge {
            what: "PEM chain",
            size: pem_chain.len(),
            max: CERTIFICATE_PEM_CHAIN_BYTES_MAX,
        });
    }
    let begin = find(pem_chain, PEM_BEGIN).ok_or(CertificateError::NoPemCertificate)?;
    let rest = &pem_chain[begin..];
    let end = find(rest, PEM_END).ok_or(CertificateError::NoPemCertificate)? + PEM_END.len();
    let (label, der) =
        der::pem::decode_vec(&rest[..end]).map_err(|e| CertificateError::BadPem {
            reason: e.to_string(),
        })?;
    if label != "CERTIFICATE" {
        return Err(CertificateError::BadPem {
            reason: format!("its label is {label:?}"),
        });
    }
    if der.len() > CERTIFICATE_DER_BYTES_MAX {
        return Err(CertificateError::TooLarge {
            what: "certificate",
            size: der.len(),
            max: CERTIFICATE_DER_BYTES_MAX,
        });
    }
    Certificate::from_der(&der).map_err(|e| CertificateError::Unparsable {
        reason: e.to_string(),
    })?;
    Ok(der)
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut text, b| {
        let _ = write!(text, "{b:02x}");
        text
    })
}
