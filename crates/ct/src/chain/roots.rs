//! The roots a log accepts chains to, as the operator configured them.

use std::collections::HashMap;
use std::fmt;

use base64::Engine;
use der::Decode;
use x509_cert::Certificate;
use x509_cert::name::Name;

use crate::entry::{Hash, sha256};

/// Why a root could not be accepted. A configuration error, raised when the log starts, not per
/// submission.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RootError {
    /// A root that is not DER X.509. `index` counts certificates in the order given (for a PEM
    /// bundle, CERTIFICATE blocks).
    #[error("accepted root {index} does not parse as X.509: {reason}")]
    Unparsable {
        /// Which root.
        index: usize,
        /// What the parser said.
        reason: String,
    },
    /// A PEM bundle that is not a sequence of CERTIFICATE blocks.
    #[error("PEM bundle, block {block}: {reason}")]
    Pem {
        /// Which `-----BEGIN` block, from 0.
        block: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A PEM bundle without a single certificate: almost surely the wrong file.
    #[error("PEM bundle holds no CERTIFICATE block")]
    EmptyBundle,
}

/// One accepted root: its DER, as configured and as served by get-roots, and its parsed form.
#[derive(Clone, Copy)]
pub(super) struct Root<'a> {
    der: &'a [u8],
    cert: &'a Certificate,
}

impl<'a> Root<'a> {
    pub(super) fn der(&self) -> &'a [u8] {
        self.der
    }

    pub(super) fn certificate(&self) -> &'a Certificate {
        self.cert
    }
}

/// The roots a log accepts chains to: deduplicated by SHA-256 fingerprint, in the order first
/// added (which is the order get-roots serves them in).
#[derive(Clone, Default)]
pub struct AcceptedRoots {
    /// The DER roots, served as they are by get-roots.
    certificates: Vec<Vec<u8>>,
    /// `certificates`, parsed, at the same positions.
    parsed: Vec<Certificate>,
    by_fingerprint: HashMap<Hash, usize>,
}

impl fmt::Debug for AcceptedRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subjects: Vec<String> = self
            .parsed
            .iter()
            .map(|cert| cert.tbs_certificate.subject.to_string())
            .collect();
        f.debug_struct("AcceptedRoots")
            .field("subjects", &subjects)
            .finish()
    }
}

impl AcceptedRoots {
    /// No roots: accepts no chain.
    pub fn new() -> Self {
        Self::default()
    }

    /// The roots from DER certificates; duplicates (same fingerprint) are kept once.
    pub fn from_der<I>(certificates: I) -> Result<Self, RootError>
    where
        I: IntoIterator<Item = Vec<u8>>,
    {
        let mut roots = Self::new();
        for (index, der) in certificates.into_iter().enumerate() {
            roots.add_at(der, index)?;
        }
        Ok(roots)
    }

    /// The roots from a PEM bundle (text outside `-----BEGIN/END CERTIFICATE-----` blocks, such
    /// as the comments in common CA bundles, is ignored); duplicates are kept once.
    pub fn from_pem(bundle: &str) -> Result<Self, RootError> {
        let ders = pem_certificates(bundle)?;
        if ders.is_empty() {
            return Err(RootError::EmptyBundle);
        }
        Self::from_der(ders)
    }

    /// Adds one DER root; `Ok(false)` when it was already there.
    pub fn add(&mut self, der: Vec<u8>) -> Result<bool, RootError> {
        let index = self.certificates.len();
        self.add_at(der, index)
    }

    fn add_at(&mut self, der: Vec<u8>, index: usize) -> Result<bool, RootError> {
        let cert = Certificate::from_der(&der).map_err(|e| RootError::Unparsable {
            index,
            reason: e.to_string(),
        })?;
        let fingerprint = sha256(&der);
        if self.by_fingerprint.contains_key(&fingerprint) {
            return Ok(false);
        }
        self.by_fingerprint
            .insert(fingerprint, self.certificates.len());
        self.certificates.push(der);
        self.parsed.push(cert);
        Ok(true)
    }

    /// The DER roots in the order added: the get-roots response.
    pub fn certificates(&self) -> &[Vec<u8>] {
        &self.certificates
    }

    /// How many distinct roots there are.
    pub fn len(&self) -> usize {
        self.certificates.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
    }

    /// Whether `der` is one of the roots (by SHA-256 fingerprint).
    pub fn contains(&self, der: &[u8]) -> bool {
        self.by_fingerprint.contains_key(&sha256(der))
    }

    /// The roots whose subject is `name`: the candidates for having issued a certificate whose
    /// issuer is `name`.
    pub(super) fn with_subject<'a>(&'a self, name: &Name) -> impl Iterator<Item = Root<'a>> {
        self.certificates
            .iter()
            .zip(&self.parsed)
            .filter(move |(_, cert)| cert.tbs_certificate.subject == *name)
            .map(|(der, cert)| Root { der, cert })
    }
}

const BEGIN: &str = "-----BEGIN ";
const END: &str = "-----END ";
const DASHES: &str = "-----";

/// The DER bodies of the CERTIFICATE blocks of a PEM text (RFC 7468), in order.
fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, RootError> {
    let mut ders = Vec::new();
    let mut rest = text;
    let mut block = 0;
    while let Some(start) = rest.find(BEGIN) {
        let after_begin = &rest[start + BEGIN.len()..];
        let pem_error = |reason: String| RootError::Pem { block, reason };
        let Some(label_end) = after_begin.find(DASHES) else {
            return Err(pem_error("unterminated BEGIN line".into()));
        };
        let label = &after_begin[..label_end];
        let body_and_rest = &after_begin[label_end + DASHES.len()..];
        let end_line = format!("{END}{label}{DASHES}");
        let Some(body_end) = body_and_rest.find(&end_line) else {
            return Err(pem_error(format!("no \"{end_line}\" line")));
        };
        if label != "CERTIFICATE" {
            return Err(pem_error(format!(
                "labelled \"{label}\", expected \"CERTIFICATE\""
            )));
        }
        let body: String = body_and_rest[..body_end]
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .map_err(|e| pem_error(format!("invalid base64: {e}")))?;
        ders.push(der);
        rest = &body_and_rest[body_end + end_line.len()..];
        block += 1;
    }
    Ok(ders)
}
