//! The built-in issuer: the cluster's CA signs a checked CSR.
//!
//! [`CaIdentity`] is the CA: a private key and its self-signed CA certificate, generated here
//! ([`CaIdentity::generate`]) or loaded from PEM ([`CaIdentity::from_pem`]: a PKCS#8 key and a
//! certificate). [`CaIdentity::issue`] certifies a [`CheckedCsr`]'s own public key — never a new
//! key — for the CSR's names, in a leaf certificate that says:
//! - serial: 16 bytes from the caller's random source, positive ([`SerialNumber`]);
//! - validity: from `not_before_ms` (the caller's clock, never `SystemTime`: the simulation owns
//!   time) for `validity`, counted as RFC 5280 §4.1.2.5 does (notAfter is inclusive, so a 90-day
//!   certificate ends one second before `not_before + 90 days`), whole seconds; at most
//!   [`LEAF_VALIDITY_MAX`] and never past the CA certificate's own notAfter;
//! - subject: CN = the CSR's common name when it is one of the names, else the first name, when
//!   it fits the 64-byte X.520 bound (else an empty subject, with a critical subjectAltName);
//! - subjectAltName: the CSR's names (dNSName);
//! - basicConstraints cA=false (critical), keyUsage digitalSignature (+ keyEncipherment for RSA
//!   keys) (critical), extendedKeyUsage serverAuth, subjectKeyIdentifier, and
//!   authorityKeyIdentifier = the CA certificate's subjectKeyIdentifier.
//!
//! After signing, the issuer reads its own certificate back and asserts that it certifies the
//! CSR's key, names the CA as its issuer byte for byte, carries the serial asked for, and that
//! its signature verifies with the CA's key: a wrong certificate crashes loudly instead of
//! reaching a client.
//!
//! Randomness: generating a CA key and signing with ECDSA draw from the system's random source
//! (ring), so the same inputs give a different signature each time; an Ed25519 CA key (loaded
//! with [`CaIdentity::from_pem`]) signs deterministically, which is what a simulation that hashes
//! certificates wants.

use std::fmt;
use std::time::Duration;

use der::asn1::ObjectIdentifier;
use der::{Decode, Encode, Tag, Tagged};
use rcgen::string::{BmpString, Ia5String, PrintableString, TeletexString};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, PublicKeyData,
    SanType, SignatureAlgorithm,
};
use x509_cert::Certificate;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints as X509BasicConstraints, KeyUsage, KeyUsages};
use x509_cert::ext::pkix::{SubjectAltName, SubjectKeyIdentifier};
use x509_cert::name::Name;

use crate::csr::{CheckedCsr, KeyKind, signed_part, verify_with_spki};
use crate::limits::{CA_COMMON_NAME_BYTES_MAX, CA_PEM_BYTES_MAX, LEAF_VALIDITY_MAX};

/// The leaf validity when the caller has no reason to choose another: 90 days, as the Web PKI
/// does.
pub const LEAF_VALIDITY_DEFAULT: Duration = Duration::from_secs(90 * 24 * 60 * 60);
/// The validity of a CA certificate made by [`CaIdentity::generate`]: ten years (3,650 days).
pub const CA_VALIDITY: Duration = Duration::from_secs(3650 * 24 * 60 * 60);

/// The last second X.509 can express: 9999-12-31T23:59:59Z (RFC 5280 §4.1.2.5.2).
const LAST_X509_SECOND: u64 = 253_402_300_799;

/// A certificate serial number: 16 bytes, positive (RFC 5280 §4.1.2.2: a positive integer of at
/// most 20 octets; CA/Browser Forum: at least 64 bits from a CSPRNG).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SerialNumber([u8; 16]);

impl SerialNumber {
    /// A serial from 16 random bytes (the caller's random source, so the simulation controls
    /// it): the high bit is cleared so the integer is positive, and an all-zero result (zero is
    /// not positive) becomes 1.
    pub fn from_random_bytes(mut bytes: [u8; 16]) -> Self {
        bytes[0] &= 0x7f;
        if bytes == [0; 16] {
            bytes[15] = 1;
        }
        Self(bytes)
    }

    /// A serial from a ring random source.
    pub fn random(rng: &dyn ring::rand::SecureRandom) -> Result<Self, ring::error::Unspecified> {
        let mut bytes = [0; 16];
        rng.fill(&mut bytes)?;
        Ok(Self::from_random_bytes(bytes))
    }

    /// The 16 bytes, big-endian, high bit clear.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }

    /// The integer's content bytes as a certificate's DER carries them: minimal two's
    /// complement, so leading zero bytes are dropped except one before a byte with its high
    /// bit set.
    pub fn der_bytes(&self) -> &[u8] {
        let zeros = self.0.iter().take_while(|b| **b == 0).count();
        // Never all zero (see from_random_bytes), so self.0[zeros] exists.
        let start = if zeros > 0 && self.0[zeros] & 0x80 != 0 {
            zeros - 1
        } else {
            zeros
        };
        &self.0[start..]
    }
}

impl fmt::Display for SerialNumber {
    /// Lowercase hex, 32 digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for SerialNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SerialNumber({self})")
    }
}

/// A certificate the issuer made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The leaf, then the CA certificate, as PEM.
    pub chain_pem: String,
    /// The leaf, DER.
    pub leaf_der: Vec<u8>,
    /// Its serial number.
    pub serial: SerialNumber,
    /// Its notBefore, in milliseconds since the Unix epoch (whole seconds).
    pub not_before_ms: u64,
    /// Its notAfter (inclusive), in milliseconds since the Unix epoch (whole seconds).
    pub not_after_ms: u64,
}

/// Why a CA could not be generated or loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// The CA common name is empty, too long or not printable.
    #[error(
        "the CA common name {name:?} is not usable: it must be 1 to {CA_COMMON_NAME_BYTES_MAX} \
         bytes of printable text"
    )]
    InvalidCommonName {
        /// The name given.
        name: String,
    },
    /// A PEM input larger than [`CA_PEM_BYTES_MAX`].
    #[error("the CA {what} PEM is {size} bytes; at most {CA_PEM_BYTES_MAX} are accepted")]
    TooLarge {
        /// "key" or "certificate".
        what: &'static str,
        /// Its size.
        size: usize,
    },
    /// The key is not a PKCS#8 key rcgen can sign with.
    #[error(
        "the CA key does not load: {reason} (expected a PEM \"PRIVATE KEY\" in PKCS#8 holding an \
         ECDSA P-256/P-384, Ed25519 or RSA key)"
    )]
    KeyUnusable {
        /// What went wrong.
        reason: String,
    },
    /// The certificate is not PEM X.509.
    #[error(
        "the CA certificate does not load: {reason} (expected a PEM \"CERTIFICATE\" in X.509 DER)"
    )]
    CertificateUnparsable {
        /// What went wrong.
        reason: String,
    },
    /// The certificate certifies another key than the one given.
    #[error("the CA certificate certifies a different public key than the CA key's")]
    KeyMismatch,
    /// The certificate is not a CA certificate.
    #[error("the CA certificate cannot issue certificates: {reason}")]
    NotACa {
        /// Why (basicConstraints, keyUsage).
        reason: String,
    },
    /// The certificate's subject cannot be reproduced byte for byte as a leaf's issuer.
    #[error(
        "the CA certificate's subject cannot be written as an issuer name exactly: {reason}; use \
         a subject of single-valued attributes, each type at most once"
    )]
    UnsupportedSubject {
        /// Why.
        reason: String,
    },
    /// The CA's validity would end past what X.509 can express.
    #[error(
        "a CA certificate from {not_before_ms} ms for {CA_VALIDITY:?} would end after \
         9999-12-31T23:59:59Z"
    )]
    TimeOutOfRange {
        /// The requested notBefore.
        not_before_ms: u64,
    },
    /// rcgen refused to make the certificate or key.
    #[error("the CA could not be made: {reason}")]
    Generation {
        /// What rcgen said.
        reason: String,
    },
    /// The CA certificate ends before a leaf issued now would, so nothing can be issued.
    #[error(
        "the CA certificate is valid until {not_after}, but a certificate issued now ({now}) for \
         {validity_days} days would outlive it: renew the CA (make a new key and certificate)"
    )]
    ExpiresTooSoon {
        /// The CA's notAfter, as an HTTP date.
        not_after: String,
        /// The time of the check, as an HTTP date.
        now: String,
        /// The leaf validity checked, in whole days.
        validity_days: u64,
    },
}

/// Why a certificate was not issued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IssueError {
    /// The requested validity is shorter than a second or longer than [`LEAF_VALIDITY_MAX`].
    #[error(
        "a validity of {validity:?} is outside 1 s ..= {LEAF_VALIDITY_MAX:?} (398 days, the \
         CA/Browser Forum limit)"
    )]
    ValidityOutOfRange {
        /// What was asked.
        validity: Duration,
    },
    /// The leaf would outlive the CA certificate.
    #[error(
        "the certificate would be valid until {not_after_ms} ms but the CA certificate expires \
         at {ca_not_after_ms} ms; issue a shorter certificate or renew the CA"
    )]
    BeyondCaValidity {
        /// The leaf's notAfter.
        not_after_ms: u64,
        /// The CA's notAfter.
        ca_not_after_ms: u64,
    },
    /// rcgen refused to make the certificate.
    #[error("the certificate could not be signed: {reason}")]
    Signing {
        /// What rcgen said.
        reason: String,
    },
}

/// The cluster's CA: its key and its self-signed CA certificate.
pub struct CaIdentity {
    /// The name, key identifier and key rcgen signs with.
    issuer: Issuer<'static, KeyPair>,
    certificate_der: Vec<u8>,
    certificate_pem: String,
    /// The certificate's subject, DER: every leaf's issuer must be exactly this.
    subject_der: Vec<u8>,
    /// The subject as text, for people.
    subject_text: String,
    /// The certificate's SubjectPublicKeyInfo, DER: every leaf's signature verifies with it.
    spki_der: Vec<u8>,
    not_after_ms: u64,
}

impl fmt::Debug for CaIdentity {
    /// The subject and expiry; never the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaIdentity")
            .field("subject", &self.subject_text)
            .field("not_after_ms", &self.not_after_ms)
            .finish_non_exhaustive()
    }
}

impl CaIdentity {
    /// A new CA: an ECDSA P-256 key and a self-signed certificate with subject
    /// `CN=common_name`, basicConstraints cA=true pathLen=0 (it issues leaves only), keyUsage
    /// keyCertSign, cRLSign and digitalSignature, valid from `not_before_ms` for
    /// [`CA_VALIDITY`]. Save it with [`key_pem`](Self::key_pem) and
    /// [`certificate_pem`](Self::certificate_pem).
    pub fn generate(common_name: &str, not_before_ms: u64) -> Result<Self, CaError> {
        if common_name.is_empty()
            || common_name.len() > CA_COMMON_NAME_BYTES_MAX
            || common_name.chars().any(char::is_control)
        {
            return Err(CaError::InvalidCommonName {
                name: common_name.to_owned(),
            });
        }
        let not_before_s = not_before_ms / 1000;
        if not_before_s + CA_VALIDITY.as_secs() > LAST_X509_SECOND {
            return Err(CaError::TimeOutOfRange { not_before_ms });
        }
        let generation = |e: rcgen::Error| CaError::Generation {
            reason: e.to_string(),
        };
        let key = KeyPair::generate().map_err(generation)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(
            &mut params,
            not_before_s,
            not_before_s + CA_VALIDITY.as_secs(),
        );
        let certificate = params.self_signed(&key).map_err(generation)?;
        // Through the loading path, so a generated CA passes the same checks as a loaded one.
        Self::from_pem(&key.serialize_pem(), &certificate.pem())
    }

    /// Loads a CA from a PKCS#8 PEM private key and its PEM certificate. The certificate must
    /// certify that key, be a CA certificate (basicConstraints cA=true; keyUsage, when present,
    /// with keyCertSign), and have a subject this issuer can reproduce exactly as a leaf's
    /// issuer. It need not be self-signed, but [`IssuedCertificate::chain_pem`] holds only the
    /// leaf and this certificate.
    pub fn from_pem(key_pem: &str, certificate_pem: &str) -> Result<Self, CaError> {
        for (what, text) in [("key", key_pem), ("certificate", certificate_pem)] {
            if text.len() > CA_PEM_BYTES_MAX {
                return Err(CaError::TooLarge {
                    what,
                    size: text.len(),
                });
            }
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| CaError::KeyUnusable {
            reason: e.to_string(),
        })?;
        let unparsable = |reason: String| CaError::CertificateUnparsable { reason };
        let (label, certificate_der) = der::pem::decode_vec(certificate_pem.trim().as_bytes())
            .map_err(|e| unparsable(e.to_string()))?;
        if label != "CERTIFICATE" {
            return Err(unparsable(format!("its PEM label is {label:?}")));
        }
        let certificate =
            Certificate::from_der(&certificate_der).map_err(|e| unparsable(e.to_string()))?;
        let tbs = &certificate.tbs_certificate;

        let spki_der = tbs
            .subject_public_key_info
            .to_der()
            .map_err(|e| unparsable(e.to_string()))?;
        if spki_der != key.subject_public_key_info() {
            return Err(CaError::KeyMismatch);
        }
        check_is_ca(&certificate)?;
        let subject_key_id = tbs
            .get::<SubjectKeyIdentifier>()
            .map_err(|e| unparsable(format!("its subjectKeyIdentifier: {e}")))?
            .map(|(_, ski)| ski.0.as_bytes().to_vec());

        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen_name(&tbs.subject)?;
        // The leaves' authorityKeyIdentifier is the CA's subjectKeyIdentifier when it has one
        // (RFC 5280 §4.2.1.1), else derived from its key as a generated CA's would be.
        if let Some(id) = subject_key_id {
            params.key_identifier_method = KeyIdMethod::PreSpecified(id);
        }
        let issuer = Issuer::new(params, key);
        let subject_der = tbs
            .subject
            .to_der()
            .map_err(|e| unparsable(e.to_string()))?;
        let not_after_ms = tbs
            .validity
            .not_after
            .to_unix_duration()
            .as_secs()
            .saturating_mul(1000);
        let identity = Self {
            issuer,
            certificate_der: certificate_der.clone(),
            certificate_pem: pem_certificate(&certificate_der),
            subject_der,
            subject_text: tbs.subject.to_string(),
            spki_der,
            not_after_ms,
        };
        identity.check_subject_reproduced()?;
        Ok(identity)
    }

    /// The CA's private key as PKCS#8 PEM. Secret: store it where only the issuer reads it.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// Signs `params` for `public_key` as they are: the caller chooses names, usages and
    /// validity (transport certificates; leaves for sessions go through [`Self::issue`]).
    pub fn sign(
        &self,
        params: CertificateParams,
        public_key: &impl PublicKeyData,
    ) -> Result<rcgen::Certificate, CaError> {
        params
            .signed_by(public_key, &self.issuer)
            .map_err(|e| CaError::Generation {
                reason: e.to_string(),
            })
    }

    /// The CA certificate as PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The CA certificate as DER.
    pub fn certificate_der(&self) -> &[u8] {
        &self.certificate_der
    }

    /// The CA certificate's notAfter, in milliseconds since the Unix epoch.
    pub fn not_after_ms(&self) -> u64 {
        self.not_after_ms
    }

    /// The name, key identifier and key rcgen signs with: for the CRL signer (`crl`).
    pub(crate) fn rcgen_issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }

    /// Whether a leaf valid for `validity` from `now_ms` ends within this CA's validity, as
    /// [`issue`](Self::issue) requires: a node checks this at start, so an expired CA is a
    /// clear error there rather than every issuance failing later.
    pub fn check_can_issue(&self, now_ms: u64, validity: Duration) -> Result<(), CaError> {
        let leaf_not_after_ms = (now_ms / 1000)
            .saturating_add(validity.as_secs())
            .saturating_sub(1)
            .saturating_mul(1000);
        if leaf_not_after_ms <= self.not_after_ms {
            return Ok(());
        }
        // HTTP dates end with year 9999 (as X.509 times do); beyond, the plain number.
        let date = |ms: u64| {
            if ms / 1000 <= LAST_X509_SECOND {
                httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_millis(ms))
            } else {
                format!("{ms} ms after the Unix epoch")
            }
        };
        Err(CaError::ExpiresTooSoon {
            not_after: date(self.not_after_ms),
            now: date(now_ms),
            validity_days: validity.as_secs() / 86_400,
        })
    }

    /// Issues a certificate for `csr`'s key and names (see the module documentation), valid
    /// from `not_before_ms` (truncated to whole seconds) for `validity` (whole seconds; usually
    /// [`LEAF_VALIDITY_DEFAULT`]).
    pub fn issue(
        &self,
        csr: &CheckedCsr,
        serial: SerialNumber,
        not_before_ms: u64,
        validity: Duration,
    ) -> Result<IssuedCertificate, IssueError> {
        let validity_s = validity.as_secs();
        if validity_s == 0 || validity > LEAF_VALIDITY_MAX {
            return Err(IssueError::ValidityOutOfRange { validity });
        }
        let not_before_s = not_before_ms / 1000;
        let not_after_s = not_before_s + validity_s - 1;
        // The CA's notAfter is at most 9999-12-31, so every time below is one X.509 can write.
        if not_after_s.saturating_mul(1000) > self.not_after_ms {
            return Err(IssueError::BeyondCaValidity {
                not_after_ms: not_after_s.saturating_mul(1000),
                ca_not_after_ms: self.not_after_ms,
            });
        }

        let key = CsrPublicKey::new(csr);
        let mut params = CertificateParams::default();
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial.to_bytes()));
        set_validity(&mut params, not_before_s, not_after_s);
        params.distinguished_name = DistinguishedName::new();
        if let Some(cn) = leaf_common_name(csr) {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.subject_alt_names = csr
            .names()
            .iter()
            .map(|name| {
                let ia5 = Ia5String::try_from(name.as_str()).expect("a checked name is ASCII");
                SanType::DnsName(ia5)
            })
            .collect();
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if matches!(csr.key_kind(), KeyKind::Rsa { .. }) {
            // RSA key transport (TLS 1.2 RSA key exchange) needs it; other keys cannot do it.
            params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;

        let leaf = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| IssueError::Signing {
                reason: e.to_string(),
            })?;
        let leaf_der = leaf.der().to_vec();
        self.assert_issued(&leaf_der, csr, serial);
        Ok(IssuedCertificate {
            chain_pem: format!("{}{}", pem_certificate(&leaf_der), self.certificate_pem),
            leaf_der,
            serial,
            not_before_ms: not_before_s * 1000,
            not_after_ms: not_after_s * 1000,
        })
    }

    /// Reads back a certificate just signed and asserts what must hold of every one.
    fn assert_issued(&self, leaf_der: &[u8], csr: &CheckedCsr, serial: SerialNumber) {
        let leaf = Certificate::from_der(leaf_der).expect("the issuer's certificate parses");
        let tbs = &leaf.tbs_certificate;
        assert_eq!(
            tbs.subject_public_key_info.to_der().expect("encodes"),
            csr.public_key_info_der(),
            "the certificate certifies the CSR's own key"
        );
        assert_eq!(
            tbs.issuer.to_der().expect("encodes"),
            self.subject_der,
            "the certificate's issuer is the CA's subject, byte for byte"
        );
        assert_eq!(tbs.serial_number.as_bytes(), serial.der_bytes());
        let (_, san) = tbs
            .get::<SubjectAltName>()
            .expect("the subjectAltName decodes")
            .expect("the certificate has a subjectAltName");
        let names: Vec<&str> = san
            .0
            .iter()
            .map(|name| match name {
                GeneralName::DnsName(dns) => dns.as_str(),
                other => panic!("the issuer wrote a non-DNS name {other:?}"),
            })
            .collect();
        assert_eq!(names, csr.names(), "the certificate names the CSR's names");
        let signed = signed_part(leaf_der).expect("the issuer's certificate parses");
        let signature = leaf.signature.as_bytes().expect("whole bytes");
        if let Err(reason) = verify_with_spki(
            &self.spki_der,
            &leaf.signature_algorithm.oid,
            signed,
            signature,
        ) {
            panic!("the issuer's signature does not verify with the CA key: {reason}");
        }
    }

    /// Checks that rcgen writes this CA's subject exactly as its certificate has it, by signing
    /// a throwaway certificate and reading its issuer back.
    fn check_subject_reproduced(&self) -> Result<(), CaError> {
        let probe = CertificateParams::default()
            .signed_by(self.issuer.key(), &self.issuer)
            .map_err(|e| CaError::Generation {
                reason: e.to_string(),
            })?;
        let probe = Certificate::from_der(probe.der()).expect("rcgen's certificate parses");
        let written = probe.tbs_certificate.issuer.to_der().expect("encodes");
        if written == self.subject_der {
            Ok(())
        } else {
            Err(CaError::UnsupportedSubject {
                reason: format!(
                    "it would be written as \"{}\" instead of \"{}\"",
                    probe.tbs_certificate.issuer, self.subject_text
                ),
            })
        }
    }
}

/// A CSR's public key as rcgen writes it into a certificate: the key bytes and the algorithm
/// whose SubjectPublicKeyInfo parameters fit the key (the signature algorithm part is unused).
struct CsrPublicKey<'a> {
    key: &'a [u8],
    algorithm: &'static SignatureAlgorithm,
}

impl<'a> CsrPublicKey<'a> {
    fn new(csr: &'a CheckedCsr) -> Self {
        let algorithm = match csr.key_kind() {
            KeyKind::Rsa { .. } => &rcgen::PKCS_RSA_SHA256,
            KeyKind::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            KeyKind::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            KeyKind::Ed25519 => &rcgen::PKCS_ED25519,
        };
        let key = Self {
            key: csr.public_key(),
            algorithm,
        };
        // The CSR check admits only the canonical parameters for each key type, so this
        // re-encoding is the CSR's SubjectPublicKeyInfo byte for byte.
        assert_eq!(
            key.subject_public_key_info(),
            csr.public_key_info_der(),
            "the CSR's key re-encodes exactly"
        );
        key
    }
}

impl PublicKeyData for CsrPublicKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.key
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.algorithm
    }
}

/// The leaf's CN: the CSR's CN when it is a name, else the first name, if it fits.
fn leaf_common_name(csr: &CheckedCsr) -> Option<String> {
    csr.common_name()
        .into_iter()
        .chain(csr.names().iter().map(String::as_str))
        .find(|name| name.len() <= CA_COMMON_NAME_BYTES_MAX)
        .map(str::to_owned)
}

/// Sets a certificate's validity, in seconds since the epoch, both at most
/// [`LAST_X509_SECOND`] (callers check).
fn set_validity(params: &mut CertificateParams, not_before_s: u64, not_after_s: u64) {
    assert!(not_before_s <= not_after_s && not_after_s <= LAST_X509_SECOND);
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(not_before_s);
    params.not_after = epoch + Duration::from_secs(not_after_s);
}

fn check_is_ca(certificate: &Certificate) -> Result<(), CaError> {
    let tbs = &certificate.tbs_certificate;
    let not_a_ca = |reason: String| CaError::NotACa { reason };
    let constraints = tbs
        .get::<X509BasicConstraints>()
        .map_err(|e| not_a_ca(format!("its basicConstraints does not decode: {e}")))?;
    if !constraints.is_some_and(|(_, bc)| bc.ca) {
        return Err(not_a_ca("basicConstraints cA is not true".into()));
    }
    let usage = tbs
        .get::<KeyUsage>()
        .map_err(|e| not_a_ca(format!("its keyUsage does not decode: {e}")))?;
    if let Some((_, usage)) = usage
        && !usage.0.contains(KeyUsages::KeyCertSign)
    {
        return Err(not_a_ca("its keyUsage lacks keyCertSign".into()));
    }
    Ok(())
}

/// A certificate subject as rcgen's name, when rcgen can write it back exactly: one attribute
/// per RDN, each type once, in a string type rcgen writes.
fn rcgen_name(name: &Name) -> Result<DistinguishedName, CaError> {
    let unsupported = |reason: String| CaError::UnsupportedSubject { reason };
    let mut dn = DistinguishedName::new();
    for rdn in &name.0 {
        let [attribute] = rdn.0.as_slice() else {
            return Err(unsupported("it has a multi-valued RDN".into()));
        };
        let arcs: Vec<u64> = attribute.oid.arcs().map(u64::from).collect();
        let kind = DnType::from_oid(&arcs);
        if dn.get(&kind).is_some() {
            return Err(unsupported(format!(
                "attribute {} appears more than once",
                attribute.oid
            )));
        }
        dn.push(kind, rcgen_value(&attribute.oid, &attribute.value)?);
    }
    Ok(dn)
}

fn rcgen_value(oid: &ObjectIdentifier, value: &der::asn1::Any) -> Result<DnValue, CaError> {
    let unsupported = || CaError::UnsupportedSubject {
        reason: format!(
            "attribute {oid} is a {} that rcgen cannot write",
            value.tag()
        ),
    };
    let text = || std::str::from_utf8(value.value()).map_err(|_| unsupported());
    Ok(match value.tag() {
        Tag::Utf8String => DnValue::Utf8String(text()?.to_owned()),
        Tag::PrintableString => {
            DnValue::PrintableString(PrintableString::try_from(text()?).map_err(|_| unsupported())?)
        }
        Tag::Ia5String => {
            DnValue::Ia5String(Ia5String::try_from(text()?).map_err(|_| unsupported())?)
        }
        Tag::TeletexString => {
            DnValue::TeletexString(TeletexString::try_from(text()?).map_err(|_| unsupported())?)
        }
        Tag::BmpString => DnValue::BmpString(
            BmpString::from_utf16be(value.value().to_vec()).map_err(|_| unsupported())?,
        ),
        _ => return Err(unsupported()),
    })
}

fn pem_certificate(der: &[u8]) -> String {
    der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, der)
        .expect("a certificate encodes as PEM")
}
