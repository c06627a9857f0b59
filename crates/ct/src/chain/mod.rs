//! Checks on submitted chains (add-chain, add-pre-chain).
//!
//! RFC 6962 §4.1–4.2: a submission is a list of DER certificates, leaf first, each following
//! certificate certifying the one before, ending at (or just below) a root the log accepts. The
//! log does not judge whether the leaf is valid *now* (expired and not-yet-valid certificates are
//! accepted, and no validity date is looked at); it checks that the chain is genuine (names and
//! signatures) and that it leads to an accepted root, so that every entry is attributable to a CA
//! the log operator chose to accept.
//!
//! What is checked, in this order (the first failure is reported):
//! 1. the [`ChainLimits`]: not empty, not too many certificates, none too large;
//! 2. every certificate parses as DER X.509;
//! 3. the CT poison extension: forbidden on an add-chain leaf, required (critical, ASN.1 NULL) on
//!    an add-pre-chain leaf, forbidden on every certificate after the leaf (RFC 6962 erratum 3686);
//! 4. each certificate's outer signature algorithm equals the one inside its TBSCertificate;
//! 5. for each consecutive pair: the issuer name of one equals the subject name of the next, the
//!    next is a CA (basicConstraints cA=true; accepted roots and an add-pre-chain Precertificate
//!    Signing Certificate are exempt, as RFC 6962 §3.1 lets the log relax the rules for it), and
//!    the signature verifies with the next one's key;
//! 6. the last certificate is an accepted root (same SHA-256 fingerprint), or an accepted root
//!    with its issuer's name verifies its signature, and that root is appended;
//! 7. for add-pre-chain, the log entry is built as RFC 6962 §3.2 says (see
//!    [`precert_tbs_certificate`]).
//!
//! Not checked: validity dates, key usage, path length constraints, name constraints, policies,
//! revocation. A log is not a relying party; these would reject chains that CAs legitimately
//! log (RFC 6962 §3.1 even expects the log to relax path rules for precertificate signing).

mod precert;
mod roots;
mod signature;

use der::{Decode, Encode, Reader, SliceReader};
use x509_cert::Certificate;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage};
use x509_cert::spki::ObjectIdentifier;

use crate::entry::{LogEntry, sha256};

pub use precert::precert_tbs_certificate;
pub use roots::{AcceptedRoots, RootError};

/// The CT poison extension that makes a precertificate unusable as a certificate (RFC 6962 §3.1).
const CT_POISON: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.3");
/// The extended key usage that marks a Precertificate Signing Certificate (RFC 6962 §3.1).
const CT_PRECERT_SIGNING: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.4");
/// The DER encoding of ASN.1 NULL: the only value the poison extension may carry.
const ASN1_NULL: [u8; 2] = [0x05, 0x00];

/// How much a single submission may hold, so that one request cannot make the log parse and
/// verify without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainLimits {
    /// Most certificates a submitted chain may hold (the root the log appends is not counted).
    pub max_certificates: usize,
    /// Largest DER size of any one submitted certificate, in bytes.
    pub max_certificate_bytes: usize,
}

impl Default for ChainLimits {
    /// 10 certificates of at most 64 KiB each: real Web PKI chains have 2–4 certificates of
    /// 1–3 KiB.
    fn default() -> Self {
        Self {
            max_certificates: 10,
            max_certificate_bytes: 64 * 1024,
        }
    }
}

/// A submission that passed every check: what the log appends, and what it keeps beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedChain {
    /// The entry to log: `X509` with the leaf DER for add-chain; `Precert` with the rewritten
    /// TBSCertificate and the real issuer's key hash for add-pre-chain.
    pub entry: LogEntry,
    /// What the log stores as the entry's `extra_data` (RFC 6962 §4.6), as DER certificates:
    /// - add-chain (`certificate_chain`): the certificates after the leaf, in order, up to and
    ///   including the root (the accepted root is appended when the submitter left it out);
    /// - add-pre-chain (`PrecertChainEntry`): the submitted precertificate itself first
    ///   (`pre_certificate`), then the certificates after it, up to and including the root
    ///   (`precertificate_chain`, which includes any Precertificate Signing Certificate).
    pub chain: Vec<Vec<u8>>,
}

/// Why a submitted chain was refused. Every variant is the submitter's fault, so the HTTP layer
/// answers all of them with 400 Bad Request (see [`ChainError::http_status`]) and the message as
/// the body; certificate indexes count from 0, the leaf, in the order submitted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// No certificate was submitted.
    #[error("the chain is empty; submit the leaf certificate first, then its issuers in order")]
    EmptyChain,
    /// More certificates than [`ChainLimits::max_certificates`].
    #[error("the chain has {count} certificates; this log accepts at most {max}")]
    TooManyCertificates {
        /// How many were submitted.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A certificate larger than [`ChainLimits::max_certificate_bytes`].
    #[error(
        "certificate {index} is {size} bytes; this log accepts at most {max} bytes per certificate"
    )]
    CertificateTooLarge {
        /// Which certificate.
        index: usize,
        /// Its size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A certificate that is not DER X.509.
    #[error("certificate {index} does not parse as X.509: {reason}")]
    Unparsable {
        /// Which certificate.
        index: usize,
        /// What the parser said.
        reason: String,
    },
    /// An extension the checks rely on that does not decode (or appears twice).
    #[error("certificate {index} has a malformed {extension} extension: {reason}")]
    MalformedExtension {
        /// Which certificate.
        index: usize,
        /// Which extension.
        extension: &'static str,
        /// What the parser said.
        reason: String,
    },
    /// The outer `signatureAlgorithm` differs from the TBSCertificate's `signature` field
    /// (RFC 5280 §4.1.1.2 requires them to be equal).
    #[error(
        "certificate {index} names a different signature algorithm outside its TBSCertificate \
         ({outer}) than inside ({inner})"
    )]
    SignatureAlgorithmMismatch {
        /// Which certificate.
        index: usize,
        /// The certificate's `signatureAlgorithm` OID.
        outer: String,
        /// The TBSCertificate's `signature` OID.
        inner: String,
    },
    /// A certificate's issuer name is not the next certificate's subject name: usually a chain
    /// in the wrong order or with a missing intermediate.
    #[error(
        "certificate {index} is not issued by certificate {next}: its issuer is \"{issuer}\" but \
         certificate {next}'s subject is \"{next_subject}\"; order the chain leaf first, each \
         certificate followed by its issuer"
    )]
    IssuerMismatch {
        /// The certificate whose issuer does not match.
        index: usize,
        /// The certificate that should have issued it (`index + 1`).
        next: usize,
        /// The issuer name `index` carries.
        issuer: String,
        /// The subject name `next` carries.
        next_subject: String,
    },
    /// A certificate's signature does not verify with the next certificate's key.
    #[error("certificate {index} is not signed by certificate {issuer_index}: {reason}")]
    BadSignature {
        /// The certificate whose signature failed.
        index: usize,
        /// The certificate whose key was used.
        issuer_index: usize,
        /// Why it failed.
        reason: String,
    },
    /// A signature algorithm (or issuer key type) the log cannot verify.
    #[error(
        "certificate {index} is signed with {algorithm}, which this log does not accept (it \
         accepts RSA PKCS#1 v1.5 with SHA-256/384/512 and 2048–8192-bit keys, ECDSA on P-256 or \
         P-384 with SHA-256/384, and Ed25519)"
    )]
    UnsupportedSignatureAlgorithm {
        /// The certificate whose signature could not be checked.
        index: usize,
        /// The algorithm, by name where known, always with its OID.
        algorithm: String,
    },
    /// An issuer in the chain that may not issue certificates.
    #[error(
        "certificate {index} is not a CA certificate (basicConstraints cA is not true), so it \
         cannot have issued certificate {issued}"
    )]
    NotACa {
        /// The certificate that should be a CA.
        index: usize,
        /// The certificate it supposedly issued (`index - 1`).
        issued: usize,
    },
    /// The last certificate is not an accepted root and no accepted root issued it.
    #[error(
        "chain does not lead to an accepted root (last issuer: {last_issuer}); include the \
         intermediates up to a root this log accepts (see get-roots)"
    )]
    NoAcceptedRoot {
        /// The issuer name of the last submitted certificate.
        last_issuer: String,
    },
    /// The last certificate names an accepted root as issuer, but no accepted root of that
    /// name verifies its signature.
    #[error(
        "certificate {index} names accepted root \"{root}\" as its issuer but is not signed by it: {reason}"
    )]
    NotSignedByRoot {
        /// The last submitted certificate.
        index: usize,
        /// The accepted root's subject name.
        root: String,
        /// Why the signature failed.
        reason: String,
    },
    /// add-chain was given a precertificate.
    #[error("add-chain got a precertificate (poison extension present); use add-pre-chain")]
    PrecertificateOnAddChain,
    /// add-pre-chain was given a certificate without the poison extension.
    #[error(
        "add-pre-chain got a certificate without the CT poison extension \
         (1.3.6.1.4.1.11129.2.4.3); use add-chain"
    )]
    NotAPrecertificate,
    /// The precertificate's poison extension is not as RFC 6962 §3.1 defines it.
    #[error(
        "certificate 0 has a malformed CT poison extension: {reason} (RFC 6962 §3.1: exactly one, \
         critical, with value ASN.1 NULL)"
    )]
    MalformedPoison {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A certificate after the leaf carries the poison extension (RFC 6962 erratum 3686).
    #[error(
        "certificate {index} carries the CT poison extension; only the first certificate of a \
         chain may be a precertificate"
    )]
    PoisonedIssuer {
        /// Which certificate.
        index: usize,
    },
    /// A TBSCertificate the log must rewrite does not re-encode to its original bytes, so the
    /// logged entry could not match the certificate the CA will issue.
    #[error(
        "certificate {index}'s TBSCertificate is not canonical DER (it changes when re-encoded), \
         so the log cannot reproduce it byte for byte"
    )]
    NonCanonicalTbs {
        /// Which certificate.
        index: usize,
    },
    /// [`precert_tbs_certificate`] was given a signing certificate without the CT EKU.
    #[error(
        "certificate 1 is not a Precertificate Signing Certificate: its extended key usage lacks \
         1.3.6.1.4.1.11129.2.4.4"
    )]
    NotAPrecertificateSigningCertificate,
    /// The precertificate has an Authority Key Identifier, so RFC 6962 §3.1 requires the
    /// Precertificate Signing Certificate to have one to take its place; it has none.
    #[error(
        "the precertificate has an Authority Key Identifier but the Precertificate Signing \
         Certificate (certificate 1) has none, so it cannot be changed to match the final issuer \
         (RFC 6962 §3.1)"
    )]
    SigningCertificateWithoutAki,
    /// The certificate just before the one that should issue the final certificate is the last
    /// of the chain and an accepted root (say, a Precertificate Signing Certificate configured as
    /// a root), so nothing says who will issue the final certificate.
    #[error(
        "certificate {index} is the last certificate of the chain and an accepted root, so the CA \
         that will issue the final certificate is unknown"
    )]
    FinalIssuerUnknown {
        /// The last certificate.
        index: usize,
    },
    /// Re-encoding a rewritten TBSCertificate failed (a value too large for DER).
    #[error("the rewritten TBSCertificate could not be encoded: {reason}")]
    Encoding {
        /// What the encoder said.
        reason: String,
    },
}

impl ChainError {
    /// The HTTP status for this error: always 400, because every check concerns what was
    /// submitted, never the log's own state (RFC 6962 §4: "Error codes … 4xx").
    pub fn http_status(&self) -> u16 {
        400
    }
}

/// Checks an add-chain submission (RFC 6962 §4.1): a leaf certificate, not a precertificate,
/// followed by its issuers.
pub fn check_chain(
    chain: &[Vec<u8>],
    roots: &AcceptedRoots,
    limits: &ChainLimits,
) -> Result<CheckedChain, ChainError> {
    check(Submission::Certificate, chain, roots, limits)
}

/// Checks an add-pre-chain submission (RFC 6962 §4.2): a precertificate followed by its issuers,
/// possibly starting with a Precertificate Signing Certificate.
pub fn check_pre_chain(
    chain: &[Vec<u8>],
    roots: &AcceptedRoots,
    limits: &ChainLimits,
) -> Result<CheckedChain, ChainError> {
    check(Submission::Precertificate, chain, roots, limits)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Submission {
    Certificate,
    Precertificate,
}

/// A certificate parsed once, with the exact bytes its signature covers.
struct Parsed<'a> {
    der: &'a [u8],
    /// The TBSCertificate exactly as submitted: what the signature covers, and what a rewrite
    /// must reproduce.
    tbs_der: &'a [u8],
    cert: Certificate,
}

impl<'a> Parsed<'a> {
    fn new(der: &'a [u8]) -> Result<Self, der::Error> {
        let cert = Certificate::from_der(der)?;
        let tbs_der = SliceReader::new(der)?.sequence(|outer| {
            let tbs = outer.tlv_bytes()?;
            outer.tlv_bytes()?; // signatureAlgorithm
            outer.tlv_bytes()?; // signatureValue
            Ok(tbs)
        })?;
        Ok(Self { der, tbs_der, cert })
    }

    fn parse_at(der: &'a [u8], index: usize) -> Result<Self, ChainError> {
        Self::new(der).map_err(|e| ChainError::Unparsable {
            index,
            reason: e.to_string(),
        })
    }

    fn issuer(&self) -> &x509_cert::name::Name {
        &self.cert.tbs_certificate.issuer
    }

    fn subject(&self) -> &x509_cert::name::Name {
        &self.cert.tbs_certificate.subject
    }

    fn is_ca(&self, index: usize) -> Result<bool, ChainError> {
        let constraints = self
            .cert
            .tbs_certificate
            .get::<BasicConstraints>()
            .map_err(|e| malformed(index, "basicConstraints", &e))?;
        Ok(constraints.is_some_and(|(_, bc)| bc.ca))
    }

    fn is_precert_signing_certificate(&self, index: usize) -> Result<bool, ChainError> {
        let usage = self
            .cert
            .tbs_certificate
            .get::<ExtendedKeyUsage>()
            .map_err(|e| malformed(index, "extendedKeyUsage", &e))?;
        Ok(usage.is_some_and(|(_, eku)| eku.0.contains(&CT_PRECERT_SIGNING)))
    }

    /// Checks that re-encoding the parsed TBSCertificate gives back the submitted bytes, so a
    /// rewrite of it changes only what it means to change.
    fn check_canonical(&self, index: usize) -> Result<(), ChainError> {
        let reencoded = self.cert.tbs_certificate.to_der().map_err(encoding)?;
        if reencoded == self.tbs_der {
            Ok(())
        } else {
            Err(ChainError::NonCanonicalTbs { index })
        }
    }
}

fn malformed(index: usize, extension: &'static str, error: &der::Error) -> ChainError {
    ChainError::MalformedExtension {
        index,
        extension,
        reason: error.to_string(),
    }
}

fn encoding(error: der::Error) -> ChainError {
    ChainError::Encoding {
        reason: error.to_string(),
    }
}

/// What a certificate's CT poison extension looks like.
enum Poison {
    Absent,
    WellFormed,
    Malformed(&'static str),
}

fn poison(cert: &Certificate) -> Poison {
    let mut found = cert
        .tbs_certificate
        .extensions
        .iter()
        .flatten()
        .filter(|ext| ext.extn_id == CT_POISON);
    let Some(first) = found.next() else {
        return Poison::Absent;
    };
    if found.next().is_some() {
        Poison::Malformed("it appears more than once")
    } else if !first.critical {
        Poison::Malformed("it is not marked critical")
    } else if first.extn_value.as_bytes() != ASN1_NULL {
        Poison::Malformed("its value is not ASN.1 NULL (05 00)")
    } else {
        Poison::WellFormed
    }
}

fn check(
    kind: Submission,
    submitted: &[Vec<u8>],
    roots: &AcceptedRoots,
    limits: &ChainLimits,
) -> Result<CheckedChain, ChainError> {
    check_limits(submitted, limits)?;
    let parsed = submitted
        .iter()
        .enumerate()
        .map(|(index, der)| Parsed::parse_at(der, index))
        .collect::<Result<Vec<_>, _>>()?;
    let Some((leaf, issuers)) = parsed.split_first() else {
        return Err(ChainError::EmptyChain);
    };

    match (kind, poison(&leaf.cert)) {
        (Submission::Certificate, Poison::Absent) => {}
        (Submission::Certificate, _) => return Err(ChainError::PrecertificateOnAddChain),
        (Submission::Precertificate, Poison::WellFormed) => {}
        (Submission::Precertificate, Poison::Absent) => return Err(ChainError::NotAPrecertificate),
        (Submission::Precertificate, Poison::Malformed(reason)) => {
            return Err(ChainError::MalformedPoison { reason });
        }
    }
    for (offset, cert) in issuers.iter().enumerate() {
        if !matches!(poison(&cert.cert), Poison::Absent) {
            return Err(ChainError::PoisonedIssuer { index: offset + 1 });
        }
    }
    for (index, cert) in parsed.iter().enumerate() {
        let outer = &cert.cert.signature_algorithm;
        let inner = &cert.cert.tbs_certificate.signature;
        if outer != inner {
            return Err(ChainError::SignatureAlgorithmMismatch {
                index,
                outer: outer.oid.to_string(),
                inner: inner.oid.to_string(),
            });
        }
    }

    let has_signing_certificate = kind == Submission::Precertificate
        && match issuers.first() {
            Some(first) => first.is_precert_signing_certificate(1)?,
            None => false,
        };

    for (index, pair) in parsed.windows(2).enumerate() {
        let (child, issuer) = (&pair[0], &pair[1]);
        let issuer_index = index + 1;
        if child.issuer() != issuer.subject() {
            return Err(ChainError::IssuerMismatch {
                index,
                next: issuer_index,
                issuer: child.issuer().to_string(),
                next_subject: issuer.subject().to_string(),
            });
        }
        let exempt = roots.contains(issuer.der) || (issuer_index == 1 && has_signing_certificate);
        if !exempt && !issuer.is_ca(issuer_index)? {
            return Err(ChainError::NotACa {
                index: issuer_index,
                issued: index,
            });
        }
        signature::verify(child, &issuer.cert)
            .map_err(|failure| failure.into_error(index, issuer_index))?;
    }

    let last_index = parsed.len() - 1;
    let last = &parsed[last_index];
    let appended_root = if roots.contains(last.der) {
        None
    } else {
        Some(find_issuing_root(last, last_index, roots)?)
    };

    // The full chain, leaf first, ending at the accepted root.
    let mut full: Vec<&[u8]> = submitted.iter().map(Vec::as_slice).collect();
    if let Some(root) = appended_root {
        full.push(root.der());
    }

    let entry = match kind {
        Submission::Certificate => LogEntry::X509 {
            certificate: leaf.der.to_vec(),
        },
        Submission::Precertificate => {
            let signing = if has_signing_certificate {
                issuers.first()
            } else {
                None
            };
            // The CA that will issue the final certificate: the precertificate's issuer, or the
            // signing certificate's issuer when there is one.
            let real_issuer_index = if signing.is_some() { 2 } else { 1 };
            let real_issuer_spki = match (parsed.get(real_issuer_index), appended_root) {
                (Some(cert), _) => &cert.cert.tbs_certificate.subject_public_key_info,
                (None, Some(root)) => &root.certificate().tbs_certificate.subject_public_key_info,
                (None, None) => {
                    return Err(ChainError::FinalIssuerUnknown {
                        index: real_issuer_index - 1,
                    });
                }
            }
            .to_der()
            .map_err(encoding)?;
            LogEntry::Precert {
                issuer_key_hash: sha256(&real_issuer_spki),
                tbs_certificate: precert::build_tbs(leaf, signing)?,
            }
        }
    };

    let chain = match kind {
        Submission::Certificate => &full[1..],
        Submission::Precertificate => &full[..],
    }
    .iter()
    .map(|der| der.to_vec())
    .collect();
    Ok(CheckedChain { entry, chain })
}

fn check_limits(chain: &[Vec<u8>], limits: &ChainLimits) -> Result<(), ChainError> {
    if chain.is_empty() {
        return Err(ChainError::EmptyChain);
    }
    if chain.len() > limits.max_certificates {
        return Err(ChainError::TooManyCertificates {
            count: chain.len(),
            max: limits.max_certificates,
        });
    }
    if let Some((index, cert)) = chain
        .iter()
        .enumerate()
        .find(|(_, cert)| cert.len() > limits.max_certificate_bytes)
    {
        return Err(ChainError::CertificateTooLarge {
            index,
            size: cert.len(),
            max: limits.max_certificate_bytes,
        });
    }
    Ok(())
}

/// Finds the accepted root that issued `last`: same name, and its key verifies the signature.
/// Several roots may share a name (re-keyed roots), so each is tried.
fn find_issuing_root<'r>(
    last: &Parsed<'_>,
    last_index: usize,
    roots: &'r AcceptedRoots,
) -> Result<roots::Root<'r>, ChainError> {
    let mut failure = None;
    for root in roots.with_subject(last.issuer()) {
        match signature::verify(last, root.certificate()) {
            Ok(()) => return Ok(root),
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        None => Err(ChainError::NoAcceptedRoot {
            last_issuer: last.issuer().to_string(),
        }),
        Some(signature::Failure::Unsupported(algorithm)) => {
            Err(ChainError::UnsupportedSignatureAlgorithm {
                index: last_index,
                algorithm,
            })
        }
        Some(signature::Failure::Invalid(reason)) => Err(ChainError::NotSignedByRoot {
            index: last_index,
            root: last.issuer().to_string(),
            reason,
        }),
    }
}
