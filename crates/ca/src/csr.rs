//! A certificate signing request checked before a session is created.
//!
//! [`CheckedCsr::from_der`] (or [`CheckedCsr::from_pem`]) accepts a PKCS#10 request (RFC 2986)
//! only if, in this order (the first failure is reported):
//! 1. it is at most [`CSR_DER_BYTES_MAX`] bytes of DER (PEM text: [`CSR_PEM_BYTES_MAX`]);
//! 2. it parses as a `CertificationRequest`;
//! 3. its public key is one this CA certifies: RSA of 2048 to 8192 bits, ECDSA on P-256 or
//!    P-384, or Ed25519 (the key algorithm's parameters as RFC 3279 / RFC 5480 / RFC 8410 fix
//!    them);
//! 4. its signature algorithm is one of RSA PKCS#1 v1.5 with SHA-256/384/512, ECDSA with
//!    SHA-256/384, or Ed25519, and fits the key;
//! 5. its self-signature verifies with its own key (so whoever sent it holds the private key);
//! 6. its names are DNS names this CA can validate with HTTP-01 (see below).
//!
//! **Names.** The requested names are the `dNSName` entries of the subjectAltName extension in
//! the `extensionRequest` attribute (PKCS#9), plus the subject common name when it is a DNS name
//! (a CN such as "My Server" is not a name and is ignored). Every name is lowercased (DNS names
//! are case-insensitive, RFC 4343) and must then pass [`valid_dns_name`]; wildcards are refused
//! (HTTP-01 cannot validate them, RFC 8555 §7.1.3), as are IP addresses (in the SAN or as the
//! CN) and every other name type (e-mail, URI, directory name, …). At least one name and at most
//! [`CSR_NAMES_MAX`] distinct names.
//!
//! **Ignored.** Every other requested extension (key usage, basic constraints, …) and attribute
//! (challengePassword, …): the issuer decides what the certificate says, from the names and
//! the key alone.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) use certus_ct::oids::describe;
use certus_ct::oids::{
    EC_PUBLIC_KEY, ECDSA_WITH_SHA256, ECDSA_WITH_SHA384, ED25519, P256, P384, RSA_ENCRYPTION,
    SHA256_WITH_RSA, SHA384_WITH_RSA, SHA512_WITH_RSA,
};
use der::asn1::{Ia5String, ObjectIdentifier, UintRef};
use der::oid::AssociatedOid as _;
use der::{Decode, Encode, Reader, SliceReader, Tag, Tagged};
use ring::signature::{self as ring_sig, UnparsedPublicKey, VerificationAlgorithm};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::name::Name;
use x509_cert::request::{CertReq, ExtensionReq};
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};

use crate::limits::{
    CSR_DER_BYTES_MAX, CSR_NAMES_MAX, CSR_PEM_BYTES_MAX, DNS_LABEL_BYTES_MAX, DNS_NAME_BYTES_MAX,
    RSA_BITS_MAX, RSA_BITS_MIN,
};

const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
const SUBJECT_ALT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");

/// What the CA accepts, for error messages.
const ACCEPTED_KEYS: &str = "RSA of 2048 to 8192 bits, ECDSA on P-256 or P-384, and Ed25519";
const ACCEPTED_SIGNATURES: &str = "RSA PKCS#1 v1.5 with SHA-256/384/512, ECDSA with \
                                   SHA-256/384, and Ed25519";

/// The type of a CSR's public key: what the certificate will certify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA (`rsaEncryption`) with a modulus of this many bits.
    Rsa {
        /// The modulus size, 2048 to 8192.
        bits: usize,
    },
    /// ECDSA on P-256.
    EcdsaP256,
    /// ECDSA on P-384.
    EcdsaP384,
    /// Ed25519.
    Ed25519,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rsa { bits } => write!(f, "RSA-{bits}"),
            Self::EcdsaP256 => f.write_str("ECDSA P-256"),
            Self::EcdsaP384 => f.write_str("ECDSA P-384"),
            Self::Ed25519 => f.write_str("Ed25519"),
        }
    }
}

/// Why a CSR was refused. Every variant is the requester's to fix; the message says what was
/// wrong and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsrError {
    /// The CSR (DER or PEM) is larger than this CA reads.
    #[error("the CSR is {size} bytes of {format}; at most {max} are accepted")]
    TooLarge {
        /// "DER" or "PEM".
        format: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The PEM text does not decode, or is not a certificate request.
    #[error(
        "the CSR is not PEM-encoded \"CERTIFICATE REQUEST\" text: {reason} (expected \
         -----BEGIN CERTIFICATE REQUEST----- … -----END CERTIFICATE REQUEST-----)"
    )]
    NotPem {
        /// What is wrong with it.
        reason: String,
    },
    /// The bytes are not a DER PKCS#10 CertificationRequest.
    #[error("the CSR does not parse as a PKCS#10 certification request (RFC 2986): {reason}")]
    Unparsable {
        /// What the parser said.
        reason: String,
    },
    /// The public key is not a type (or size, or curve) this CA certifies.
    #[error("the CSR's public key is {key}; this CA certifies {ACCEPTED_KEYS}")]
    UnsupportedKey {
        /// The key, by name where known, with its OID.
        key: String,
    },
    /// The signature algorithm is not one this CA verifies.
    #[error("the CSR is signed with {algorithm}; this CA accepts {ACCEPTED_SIGNATURES}")]
    UnsupportedSignatureAlgorithm {
        /// The algorithm, by name where known, always with its OID.
        algorithm: String,
    },
    /// The self-signature does not verify (or cannot have been made with the CSR's key).
    #[error(
        "the CSR's signature does not verify with its own public key: {reason}; sign the CSR \
         with the private key of the public key it carries"
    )]
    BadSignature {
        /// Why.
        reason: String,
    },
    /// The extensionRequest attribute or the subjectAltName extension does not decode.
    #[error("the CSR's {what} is malformed: {reason}")]
    Malformed {
        /// Which part.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A name that is not a DNS name: an IP address, e-mail address, URI, directory name, ….
    #[error(
        "the CSR asks for {kind} {value}; this CA certifies DNS names only (HTTP-01 validates \
         nothing else)"
    )]
    UnsupportedName {
        /// What kind of name ("an IP address", "an e-mail address", …).
        kind: &'static str,
        /// The name as the CSR spells it.
        value: String,
    },
    /// A wildcard name.
    #[error(
        "the CSR asks for the wildcard name {name}; HTTP-01 cannot validate wildcards (RFC 8555 \
         §7.1.3), so list each name instead"
    )]
    Wildcard {
        /// The name.
        name: String,
    },
    /// A dNSName that is not a valid DNS name.
    #[error("the CSR asks for {name:?}, which is not a valid DNS name: {reason}")]
    InvalidName {
        /// The name (lowercased).
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// No DNS name at all.
    #[error(
        "the CSR names no DNS name; put the names in its subjectAltName extension (dNSName \
         entries) or the subject common name"
    )]
    NoNames,
    /// More names than [`CSR_NAMES_MAX`].
    #[error("the CSR asks for {count} distinct names; at most {max} are accepted")]
    TooManyNames {
        /// How many distinct names.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The CSR's names are not the session's ([`CheckedCsr::matches`]).
    #[error(
        "the CSR's names differ from the session's: {}",
        describe_mismatch(extra, missing)
    )]
    NamesMismatch {
        /// Names the CSR asks for that the session does not have, sorted.
        extra: Vec<String>,
        /// Names the session has that the CSR does not ask for, sorted.
        missing: Vec<String>,
    },
}

fn describe_mismatch(extra: &[String], missing: &[String]) -> String {
    let mut parts = Vec::new();
    if !extra.is_empty() {
        parts.push(format!(
            "the CSR also asks for {} (not in the session)",
            extra.join(", ")
        ));
    }
    if !missing.is_empty() {
        parts.push(format!(
            "the CSR lacks {} (in the session)",
            missing.join(", ")
        ));
    }
    parts.join("; ")
}

/// A CSR that passed every check (see the module documentation). Fields are private: the only
/// way to get one is through the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedCsr {
    der: Vec<u8>,
    /// The SubjectPublicKeyInfo, DER.
    spki_der: Vec<u8>,
    /// The subjectPublicKey BIT STRING's bytes (what the SPKI wraps).
    public_key: Vec<u8>,
    key_kind: KeyKind,
    /// Sorted, distinct, lowercase, each a valid DNS name; 1 to [`CSR_NAMES_MAX`] of them.
    names: Vec<String>,
    /// The subject CN, lowercased, when it is a DNS name (and so one of the names); of several,
    /// the last.
    common_name: Option<String>,
}

impl CheckedCsr {
    /// Checks a DER-encoded PKCS#10 request.
    pub fn from_der(der: &[u8]) -> Result<Self, CsrError> {
        if der.len() > CSR_DER_BYTES_MAX {
            return Err(CsrError::TooLarge {
                format: "DER",
                size: der.len(),
                max: CSR_DER_BYTES_MAX,
            });
        }
        let unparsable = |e: der::Error| CsrError::Unparsable {
            reason: e.to_string(),
        };
        let request = CertReq::from_der(der).map_err(unparsable)?;
        let info_der = signed_part(der).map_err(unparsable)?;

        let spki = &request.info.public_key;
        let key_kind = key_kind(spki)?;
        let public_key = spki
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| CsrError::Unparsable {
                reason: "the subjectPublicKey BIT STRING is not a whole number of bytes".into(),
            })?
            .to_vec();
        let algorithm = signature_algorithm(&request.algorithm.oid, key_kind)?;
        let signature = request
            .signature
            .as_bytes()
            .ok_or_else(|| CsrError::BadSignature {
                reason: "the signature BIT STRING is not a whole number of bytes".into(),
            })?;
        UnparsedPublicKey::new(algorithm, &public_key)
            .verify(info_der, signature)
            .map_err(|_| CsrError::BadSignature {
                reason: format!("{} by a {key_kind} key", describe(&request.algorithm.oid)),
            })?;

        let (names, common_name) = requested_names(&request)?;
        let spki_der = spki.to_der().map_err(unparsable)?;
        let checked = Self {
            der: der.to_vec(),
            spki_der,
            public_key,
            key_kind,
            names,
            common_name,
        };
        checked.assert_invariants();
        Ok(checked)
    }

    /// Checks a PEM-encoded request (label `CERTIFICATE REQUEST`, or the older
    /// `NEW CERTIFICATE REQUEST`); whitespace around the PEM block is ignored.
    pub fn from_pem(text: &str) -> Result<Self, CsrError> {
        if text.len() > CSR_PEM_BYTES_MAX {
            return Err(CsrError::TooLarge {
                format: "PEM",
                size: text.len(),
                max: CSR_PEM_BYTES_MAX,
            });
        }
        let (label, der) =
            der::pem::decode_vec(text.trim().as_bytes()).map_err(|e| CsrError::NotPem {
                reason: e.to_string(),
            })?;
        if label != "CERTIFICATE REQUEST" && label != "NEW CERTIFICATE REQUEST" {
            return Err(CsrError::NotPem {
                reason: format!("its label is {label:?}"),
            });
        }
        Self::from_der(&der)
    }

    /// The requested DNS names: lowercase, sorted, distinct, at least one.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The subject common name, lowercased, when it is a DNS name (it is then one of
    /// [`names`](Self::names)); of several, the last.
    pub fn common_name(&self) -> Option<&str> {
        self.common_name.as_deref()
    }

    /// The CSR as received, DER.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The public key to certify, as a DER SubjectPublicKeyInfo.
    pub fn public_key_info_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The subjectPublicKey bytes inside [`public_key_info_der`](Self::public_key_info_der)
    /// (for RSA a DER RSAPublicKey, for ECDSA an uncompressed point, for Ed25519 32 bytes).
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }

    /// The public key's type.
    pub fn key_kind(&self) -> KeyKind {
        self.key_kind
    }

    /// Checks that `session_names` (the names a session was created with) are exactly this
    /// CSR's names, as sets: order, duplicates and letter case do not matter. A mismatch lists
    /// the names on each side that the other lacks.
    pub fn matches(&self, session_names: &[String]) -> Result<(), CsrError> {
        let session: BTreeSet<String> = session_names
            .iter()
            .map(|name| name.to_ascii_lowercase())
            .collect();
        let csr: BTreeSet<String> = self.names.iter().cloned().collect();
        if session == csr {
            return Ok(());
        }
        Err(CsrError::NamesMismatch {
            extra: csr.difference(&session).cloned().collect(),
            missing: session.difference(&csr).cloned().collect(),
        })
    }

    fn assert_invariants(&self) {
        assert!(!self.names.is_empty() && self.names.len() <= CSR_NAMES_MAX);
        assert!(
            self.names.windows(2).all(|w| w[0] < w[1]),
            "sorted, distinct"
        );
        for name in &self.names {
            assert_eq!(valid_dns_name(name), Ok(()), "{name}");
        }
        if let Some(cn) = &self.common_name {
            assert!(self.names.binary_search(cn).is_ok(), "the CN is a name");
        }
    }
}

/// Checks `name` against the rules the state machine applies to a session's names: lowercase
/// ASCII letters, digits and hyphens in labels of 1 to [`DNS_LABEL_BYTES_MAX`] bytes separated
/// by dots, at least two labels, at most [`DNS_NAME_BYTES_MAX`] bytes, no trailing dot, no label
/// starting or ending with a hyphen, no wildcard and no all-numeric last label (an IP address is
/// not a DNS name). The error says which rule is broken.
pub fn valid_dns_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.contains('*') {
        return Err("it is a wildcard; HTTP-01 cannot validate wildcard names".to_owned());
    }
    if name.len() > DNS_NAME_BYTES_MAX {
        return Err(format!(
            "it is {} bytes; at most {DNS_NAME_BYTES_MAX} are allowed",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.')))
    {
        return Err(format!(
            "it contains {bad:?}; only lowercase ASCII letters, digits, - and . are allowed"
        ));
    }
    if name.ends_with('.') {
        return Err("it ends with a dot; write it without the root's trailing dot".to_owned());
    }
    let mut labels = 0;
    let mut last = "";
    for label in name.split('.') {
        if label.is_empty() {
            return Err("it has an empty label (a leading dot or two dots in a row)".to_owned());
        }
        if label.len() > DNS_LABEL_BYTES_MAX {
            return Err(format!(
                "label {label:?} is {} bytes; at most {DNS_LABEL_BYTES_MAX} are allowed",
                label.len()
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} starts or ends with a hyphen"));
        }
        labels += 1;
        last = label;
    }
    if labels < 2 {
        return Err(
            "it has a single label; name a fully qualified domain such as example.com".to_owned(),
        );
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(
            "its last label is numeric; an IP address is not a DNS name and cannot be validated \
             here"
                .to_owned(),
        );
    }
    Ok(())
}

/// The exact bytes of the first element of a signed SEQUENCE (a CertificationRequestInfo or a
/// TBSCertificate): what the signature covers.
pub(crate) fn signed_part(der: &[u8]) -> Result<&[u8], der::Error> {
    SliceReader::new(der)?.sequence(|outer| {
        let info = outer.tlv_bytes()?;
        outer.tlv_bytes()?; // signatureAlgorithm
        outer.tlv_bytes()?; // signature
        Ok(info)
    })
}

/// The key's type, refusing keys this CA does not certify, and algorithm parameters other than
/// the ones the key's RFC fixes (so the issuer re-encodes the SubjectPublicKeyInfo exactly).
fn key_kind(spki: &SubjectPublicKeyInfoOwned) -> Result<KeyKind, CsrError> {
    let algorithm = &spki.algorithm;
    let oid = algorithm.oid;
    if oid == RSA_ENCRYPTION {
        // RFC 3279 §2.3.1: the parameters MUST be NULL.
        if !params_are(algorithm, Some(Tag::Null)) {
            return Err(CsrError::Malformed {
                what: "RSA public key",
                reason: "its algorithm parameters are not NULL (RFC 3279 §2.3.1)".into(),
            });
        }
        let bits = rsa_modulus_bits(spki)?;
        if !(RSA_BITS_MIN..=RSA_BITS_MAX).contains(&bits) {
            return Err(CsrError::UnsupportedKey {
                key: format!("RSA of {bits} bits"),
            });
        }
        Ok(KeyKind::Rsa { bits })
    } else if oid == EC_PUBLIC_KEY {
        // RFC 5480 §2.1.1: namedCurve only.
        let curve = algorithm
            .parameters
            .as_ref()
            .and_then(|params| params.decode_as::<ObjectIdentifier>().ok())
            .ok_or_else(|| CsrError::Malformed {
                what: "EC public key",
                reason: "it does not name its curve (RFC 5480 §2.1.1 namedCurve)".into(),
            })?;
        if curve == P256 {
            Ok(KeyKind::EcdsaP256)
        } else if curve == P384 {
            Ok(KeyKind::EcdsaP384)
        } else {
            Err(CsrError::UnsupportedKey {
                key: format!("an EC key on curve {}", describe(&curve)),
            })
        }
    } else if oid == ED25519 {
        // RFC 8410 §3: the parameters MUST be absent.
        if !params_are(algorithm, None) {
            return Err(CsrError::Malformed {
                what: "Ed25519 public key",
                reason: "its algorithm parameters are present (RFC 8410 §3: absent)".into(),
            });
        }
        Ok(KeyKind::Ed25519)
    } else {
        Err(CsrError::UnsupportedKey {
            key: describe(&oid),
        })
    }
}

fn params_are(algorithm: &AlgorithmIdentifierOwned, tag: Option<Tag>) -> bool {
    algorithm.parameters.as_ref().map(Tagged::tag) == tag
}

/// The size of an RSA key's modulus in bits (RFC 3279 §2.3.1 RSAPublicKey).
fn rsa_modulus_bits(spki: &SubjectPublicKeyInfoOwned) -> Result<usize, CsrError> {
    let malformed = |reason: String| CsrError::Malformed {
        what: "RSA public key",
        reason,
    };
    let key = spki
        .subject_public_key
        .as_bytes()
        .ok_or_else(|| malformed("not a whole number of bytes".into()))?;
    let modulus = SliceReader::new(key)
        .and_then(|mut reader| {
            let modulus = reader.sequence(|seq| {
                let n = UintRef::decode(seq)?;
                UintRef::decode(seq)?; // publicExponent
                Ok(n)
            })?;
            reader.finish(modulus)
        })
        .map_err(|e| malformed(format!("not an RSAPublicKey: {e}")))?;
    let bytes = modulus.as_bytes();
    Ok(match bytes.first() {
        None => 0,
        Some(first) => bytes.len() * 8 - first.leading_zeros() as usize,
    })
}

/// The ring algorithm for a signature algorithm and the key that made the signature.
fn signature_algorithm(
    signature: &ObjectIdentifier,
    key: KeyKind,
) -> Result<&'static dyn VerificationAlgorithm, CsrError> {
    let mismatch = || CsrError::BadSignature {
        reason: format!(
            "it is signed with {} but its key is {key}",
            describe(signature)
        ),
    };
    let rsa = matches!(key, KeyKind::Rsa { .. });
    if *signature == SHA256_WITH_RSA || *signature == SHA384_WITH_RSA {
        if !rsa {
            return Err(mismatch());
        }
        Ok(if *signature == SHA256_WITH_RSA {
            &ring_sig::RSA_PKCS1_2048_8192_SHA256
        } else {
            &ring_sig::RSA_PKCS1_2048_8192_SHA384
        })
    } else if *signature == SHA512_WITH_RSA {
        if !rsa {
            return Err(mismatch());
        }
        Ok(&ring_sig::RSA_PKCS1_2048_8192_SHA512)
    } else if *signature == ECDSA_WITH_SHA256 {
        match key {
            KeyKind::EcdsaP256 => Ok(&ring_sig::ECDSA_P256_SHA256_ASN1),
            KeyKind::EcdsaP384 => Ok(&ring_sig::ECDSA_P384_SHA256_ASN1),
            _ => Err(mismatch()),
        }
    } else if *signature == ECDSA_WITH_SHA384 {
        match key {
            KeyKind::EcdsaP256 => Ok(&ring_sig::ECDSA_P256_SHA384_ASN1),
            KeyKind::EcdsaP384 => Ok(&ring_sig::ECDSA_P384_SHA384_ASN1),
            _ => Err(mismatch()),
        }
    } else if *signature == ED25519 {
        match key {
            KeyKind::Ed25519 => Ok(&ring_sig::ED25519),
            _ => Err(mismatch()),
        }
    } else {
        Err(CsrError::UnsupportedSignatureAlgorithm {
            algorithm: describe(signature),
        })
    }
}

/// Verifies `signature` over `message` with a SubjectPublicKeyInfo's key: for the issuer's
/// self-check of what it signed. Returns why it does not verify.
pub(crate) fn verify_with_spki(
    spki_der: &[u8],
    signature_oid: &ObjectIdentifier,
    message: &[u8],
    signature: &[u8],
) -> Result<(), String> {
    let spki = SubjectPublicKeyInfoOwned::from_der(spki_der).map_err(|e| e.to_string())?;
    let kind = key_kind(&spki).map_err(|e| e.to_string())?;
    let algorithm = signature_algorithm(signature_oid, kind).map_err(|e| e.to_string())?;
    let key = spki
        .subject_public_key
        .as_bytes()
        .ok_or("the key is not a whole number of bytes")?;
    UnparsedPublicKey::new(algorithm, key)
        .verify(message, signature)
        .map_err(|_| format!("{} does not verify", describe(signature_oid)))
}

/// The requested names (sorted, distinct) and the CN when it is one of them.
fn requested_names(request: &CertReq) -> Result<(Vec<String>, Option<String>), CsrError> {
    let mut names = BTreeSet::new();
    for name in san_dns_names(request)? {
        names.insert(checked_name(name.as_str())?);
    }
    let common_names = common_names(&request.info.subject)?;
    names.extend(common_names.iter().cloned());
    // With several (rare), the last: a name's last RDN is its most specific one.
    let common_name = common_names.last().cloned();
    if names.is_empty() {
        return Err(CsrError::NoNames);
    }
    if names.len() > CSR_NAMES_MAX {
        return Err(CsrError::TooManyNames {
            count: names.len(),
            max: CSR_NAMES_MAX,
        });
    }
    Ok((names.into_iter().collect(), common_name))
}

/// The dNSName entries of the requested subjectAltName; any other name type is refused.
fn san_dns_names(request: &CertReq) -> Result<Vec<Ia5String>, CsrError> {
    let malformed = |what: &'static str, e: der::Error| CsrError::Malformed {
        what,
        reason: e.to_string(),
    };
    let mut requests = request
        .info
        .attributes
        .iter()
        .filter(|attribute| attribute.oid == ExtensionReq::OID);
    let Some(attribute) = requests.next() else {
        return Ok(Vec::new());
    };
    if requests.next().is_some() {
        return Err(CsrError::Malformed {
            what: "extensionRequest attribute",
            reason: "it appears more than once".into(),
        });
    }
    let mut values = attribute.values.iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(CsrError::Malformed {
            what: "extensionRequest attribute",
            reason: "it does not hold exactly one value (PKCS#9)".into(),
        });
    };
    let extensions: ExtensionReq = value
        .decode_as()
        .map_err(|e| malformed("extensionRequest attribute", e))?;
    let mut sans = extensions
        .0
        .iter()
        .filter(|extension| extension.extn_id == SUBJECT_ALT_NAME);
    let Some(san) = sans.next() else {
        return Ok(Vec::new());
    };
    if sans.next().is_some() {
        return Err(CsrError::Malformed {
            what: "subjectAltName extension",
            reason: "it appears more than once".into(),
        });
    }
    let san = SubjectAltName::from_der(san.extn_value.as_bytes())
        .map_err(|e| malformed("subjectAltName extension", e))?;
    san.0
        .into_iter()
        .map(|name| match name {
            GeneralName::DnsName(dns) => Ok(dns),
            GeneralName::IpAddress(octets) => Err(CsrError::UnsupportedName {
                kind: "the IP address",
                value: ip_text(octets.as_bytes()),
            }),
            GeneralName::Rfc822Name(email) => Err(CsrError::UnsupportedName {
                kind: "the e-mail address",
                value: email.to_string(),
            }),
            GeneralName::UniformResourceIdentifier(uri) => Err(CsrError::UnsupportedName {
                kind: "the URI",
                value: uri.to_string(),
            }),
            GeneralName::DirectoryName(dn) => Err(CsrError::UnsupportedName {
                kind: "the directory name",
                value: dn.to_string(),
            }),
            GeneralName::OtherName(other) => Err(CsrError::UnsupportedName {
                kind: "an otherName of type",
                value: other.type_id.to_string(),
            }),
            GeneralName::RegisteredId(oid) => Err(CsrError::UnsupportedName {
                kind: "the registeredID",
                value: oid.to_string(),
            }),
            GeneralName::EdiPartyName(_) => Err(CsrError::UnsupportedName {
                kind: "an",
                value: "ediPartyName".into(),
            }),
        })
        .collect()
}

/// The subject's common names that are DNS names, lowercased, in order. A CN that is an IP
/// address or a wildcard is refused; one that is neither and not a DNS name either (free text)
/// is ignored.
fn common_names(subject: &Name) -> Result<Vec<String>, CsrError> {
    let mut names = Vec::new();
    let attributes = subject.0.iter().flat_map(|rdn| rdn.0.iter());
    for attribute in attributes.filter(|a| a.oid == COMMON_NAME) {
        let Some(text) = directory_string(&attribute.value) else {
            continue;
        };
        if text.parse::<IpAddr>().is_ok() {
            return Err(CsrError::UnsupportedName {
                kind: "the IP address (as the subject common name)",
                value: text,
            });
        }
        let lower = text.to_ascii_lowercase();
        if lower.contains('*') {
            return Err(CsrError::Wildcard { name: lower });
        }
        if valid_dns_name(&lower).is_ok() {
            names.push(lower);
        }
    }
    Ok(names)
}

/// The text of a DirectoryString-like value (UTF8String, PrintableString, IA5String,
/// BMPString), or `None` for other encodings.
fn directory_string(value: &der::asn1::Any) -> Option<String> {
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {
            std::str::from_utf8(value.value()).ok().map(str::to_owned)
        }
        Tag::BmpString => {
            let units: Vec<u16> = value
                .value()
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// A dNSName lowercased and checked.
fn checked_name(name: &str) -> Result<String, CsrError> {
    let lower = name.to_ascii_lowercase();
    if lower.contains('*') {
        return Err(CsrError::Wildcard { name: lower });
    }
    valid_dns_name(&lower).map_err(|reason| CsrError::InvalidName {
        name: lower.clone(),
        reason,
    })?;
    Ok(lower)
}

fn ip_text(octets: &[u8]) -> String {
    if let Ok(v4) = <[u8; 4]>::try_from(octets) {
        Ipv4Addr::from(v4).to_string()
    } else if let Ok(v6) = <[u8; 16]>::try_from(octets) {
        Ipv6Addr::from(v6).to_string()
    } else {
        format!("of {} bytes", octets.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_follow_the_state_machine_rules() {
        for good in [
            "example.com",
            "a.b",
            "xn--bcher-kva.example",
            "1.example.com",
            "a-b.example",
        ] {
            assert_eq!(valid_dns_name(good), Ok(()), "{good}");
        }
        let label_64 = "a".repeat(64);
        let long = format!("{}.com", vec!["a".repeat(62); 4].join("."));
        assert!(long.len() > DNS_NAME_BYTES_MAX);
        for (bad, why) in [
            ("", "empty"),
            ("com", "single label"),
            ("example.com.", "trailing dot"),
            (".example.com", "empty label"),
            ("a..example", "empty label"),
            ("*.example.com", "wildcard"),
            ("Example.com", "uppercase"),
            ("ex_ample.com", "underscore"),
            ("-a.example", "leading hyphen"),
            ("a-.example", "trailing hyphen"),
            ("10.0.0.1", "numeric last label"),
            (&format!("{label_64}.com"), "label too long"),
            (&long, "too long"),
        ] {
            assert!(valid_dns_name(bad).is_err(), "{bad:?} ({why}) was accepted");
        }
    }
}
