//! Certificate revocation lists: the CA signs the list of the certificates it revoked (ACME
//! revocation, RFC 8555 §7.6), as an X.509 v2 CRL (RFC 5280 §5).
//!
//! [`CaIdentity::crl`] writes, for the caller's [`RevokedEntry`]s, a CRL that says:
//! - version 2, issuer = the CA certificate's subject (byte for byte, as the leaves' issuer);
//! - thisUpdate and nextUpdate: the caller's times (never a clock read here: the simulation owns
//!   time), truncated to whole seconds; nextUpdate is later than thisUpdate (RFC 5280 §5.1.2.5
//!   makes it mandatory);
//! - one entry per revoked certificate: its serial, its revocation date, and its reasonCode
//!   extension unless the reason is 0 "unspecified" (RFC 5280 §5.3.1: "the reason code CRL entry
//!   extension SHOULD be absent instead of using the unspecified (0) reasonCode value");
//! - the extensions RFC 5280 §5.2 requires: authorityKeyIdentifier (the CA certificate's
//!   subjectKeyIdentifier, as in the leaves) and cRLNumber (the caller's sequence number).
//!
//! Entries are checked before anything is signed: at most [`CRL_ENTRIES_MAX`], each serial the
//! minimal DER encoding of a positive integer of at most [`CRL_SERIAL_BYTES_MAX`] bytes (so the
//! list names exactly the bytes the certificate carries), no serial twice, each reason an RFC
//! 5280 code. Revocation dates are written as given, even when later than thisUpdate. After
//! signing, the CRL is read back and asserted, as the issuer does with its certificates.

use std::collections::HashSet;
use std::time::Duration;

use der::{Decode, Encode};
use rcgen::{
    CertificateParams, CertificateRevocationListParams, KeyIdMethod, RevocationReason,
    RevokedCertParams,
};
use x509_cert::Certificate;
use x509_cert::Version;
use x509_cert::crl::CertificateList;
use x509_cert::ext::pkix::{KeyUsage, KeyUsages, SubjectKeyIdentifier};

use crate::certificate::hex;
use crate::csr::{signed_part, verify_with_spki};
use crate::issuer::CaIdentity;
use crate::limits::{CRL_ENTRIES_MAX, CRL_SERIAL_BYTES_MAX};

/// The last second X.509 can express: 9999-12-31T23:59:59Z (RFC 5280 §4.1.2.5.2).
const LAST_X509_SECOND: u64 = 253_402_300_799;

/// One revoked certificate, as the CRL lists it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RevokedEntry {
    /// The serial: the DER INTEGER's content bytes, big-endian, as in the certificate.
    pub serial: Vec<u8>,
    /// When the CA processed the revocation, in milliseconds since the Unix epoch.
    pub revoked_ms: u64,
    /// The RFC 5280 §5.3.1 reason code: 0 to 10 except 7 (see [`is_revocation_reason`]).
    pub reason: u8,
}

/// Why a CRL was not made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrlError {
    /// More entries than [`CRL_ENTRIES_MAX`].
    #[error(
        "the CRL would list {count} revoked certificates; at most {CRL_ENTRIES_MAX} fit in one CRL"
    )]
    TooManyEntries {
        /// How many were given.
        count: usize,
    },
    /// A serial that is not the content of a positive DER INTEGER of at most
    /// [`CRL_SERIAL_BYTES_MAX`] bytes.
    #[error(
        "entry {index} has serial {serial_hex:?}, which {problem}; expected the content bytes of \
         a positive DER INTEGER, minimally encoded, 1 to {CRL_SERIAL_BYTES_MAX} bytes"
    )]
    InvalidSerial {
        /// The entry's position in the list given.
        index: usize,
        /// The serial, lowercase hex.
        serial_hex: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The same serial listed twice.
    #[error("serial {serial_hex} is listed more than once; a CRL lists each certificate once")]
    DuplicateSerial {
        /// The serial, lowercase hex.
        serial_hex: String,
    },
    /// A reason code RFC 5280 does not define.
    #[error(
        "serial {serial_hex} has revocation reason {reason}; RFC 5280 §5.3.1 defines 0 to 10 \
         except 7"
    )]
    InvalidReason {
        /// The serial, lowercase hex.
        serial_hex: String,
        /// The code given.
        reason: u8,
    },
    /// A time after 9999-12-31T23:59:59Z, the last one X.509 can write.
    #[error(
        "the {what} of {ms} ms after the Unix epoch is after 9999-12-31T23:59:59Z, the last time \
         X.509 can express"
    )]
    TimeOutOfRange {
        /// "thisUpdate", "nextUpdate" or "revocationDate".
        what: &'static str,
        /// The time given.
        ms: u64,
    },
    /// nextUpdate is not at least a second after thisUpdate.
    #[error(
        "the nextUpdate ({next_update_ms} ms) must be at least one whole second after the \
         thisUpdate ({this_update_ms} ms)"
    )]
    NextUpdateNotLater {
        /// The thisUpdate given.
        this_update_ms: u64,
        /// The nextUpdate given.
        next_update_ms: u64,
    },
    /// The CA certificate's keyUsage does not allow signing CRLs.
    #[error(
        "the CA certificate's keyUsage lacks cRLSign, so relying parties would reject its CRLs \
         (RFC 5280 §4.2.1.3); use a CA certificate with cRLSign"
    )]
    CaCannotSignCrls,
    /// rcgen refused to make the CRL.
    #[error("the CRL could not be signed: {reason}")]
    Signing {
        /// What rcgen said.
        reason: String,
    },
}

/// Whether `code` is a reason code RFC 5280 §5.3.1 defines (0 to 10 except 7): what an ACME
/// revocation request's `reason` must be (RFC 8555 §7.6).
pub fn is_revocation_reason(code: u8) -> bool {
    rcgen_reason(code).is_some()
}

impl CaIdentity {
    /// A DER X.509 v2 CRL signed by this CA, listing `entries` (see the module documentation),
    /// numbered `crl_number`, issued at `this_update_ms` and next due at `next_update_ms` (both
    /// in milliseconds since the Unix epoch, truncated to whole seconds).
    pub fn crl(
        &self,
        entries: &[RevokedEntry],
        crl_number: u64,
        this_update_ms: u64,
        next_update_ms: u64,
    ) -> Result<Vec<u8>, CrlError> {
        if entries.len() > CRL_ENTRIES_MAX {
            return Err(CrlError::TooManyEntries {
                count: entries.len(),
            });
        }
        let this_update_s = x509_seconds("thisUpdate", this_update_ms)?;
        let next_update_s = x509_seconds("nextUpdate", next_update_ms)?;
        if next_update_s <= this_update_s {
            return Err(CrlError::NextUpdateNotLater {
                this_update_ms,
                next_update_ms,
            });
        }
        let ca = Certificate::from_der(self.certificate_der())
            .expect("the CA certificate parsed when it was loaded");
        check_can_sign_crls(&ca)?;

        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        let mut serials = HashSet::with_capacity(entries.len());
        let mut revoked_certs = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            if let Some(problem) = serial_problem(&entry.serial) {
                return Err(CrlError::InvalidSerial {
                    index,
                    serial_hex: hex(&entry.serial),
                    problem,
                });
            }
            if !serials.insert(entry.serial.as_slice()) {
                return Err(CrlError::DuplicateSerial {
                    serial_hex: hex(&entry.serial),
                });
            }
            let Some(reason) = rcgen_reason(entry.reason) else {
                return Err(CrlError::InvalidReason {
                    serial_hex: hex(&entry.serial),
                    reason: entry.reason,
                });
            };
            let revoked_s = x509_seconds("revocationDate", entry.revoked_ms)?;
            revoked_certs.push(RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(&entry.serial),
                revocation_time: epoch + Duration::from_secs(revoked_s),
                reason_code: Some(reason).filter(|r| *r != RevocationReason::Unspecified),
                invalidity_date: None,
            });
        }

        let params = CertificateRevocationListParams {
            this_update: epoch + Duration::from_secs(this_update_s),
            next_update: epoch + Duration::from_secs(next_update_s),
            crl_number: rcgen::SerialNumber::from(crl_number),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: key_identifier_method(&ca),
        };
        let crl = params
            .signed_by(self.rcgen_issuer())
            .map_err(|e| CrlError::Signing {
                reason: e.to_string(),
            })?;
        let der = crl.der().to_vec();
        assert_crl(&der, &ca, entries, this_update_s, next_update_s);
        Ok(der)
    }
}

/// Reads back a CRL just signed and asserts what must hold of every one.
fn assert_crl(
    der: &[u8],
    ca: &Certificate,
    entries: &[RevokedEntry],
    this_update_s: u64,
    next_update_s: u64,
) {
    let crl = CertificateList::from_der(der).expect("the CRL parses");
    let tbs = &crl.tbs_cert_list;
    assert_eq!(tbs.version, Version::V2, "a CRL with extensions is v2");
    assert_eq!(
        tbs.issuer.to_der().expect("encodes"),
        ca.tbs_certificate.subject.to_der().expect("encodes"),
        "the CRL's issuer is the CA's subject, byte for byte"
    );
    assert_eq!(tbs.this_update.to_unix_duration().as_secs(), this_update_s);
    let next_update = tbs.next_update.expect("the CRL has a nextUpdate");
    assert_eq!(next_update.to_unix_duration().as_secs(), next_update_s);
    let listed = tbs.revoked_certificates.as_deref().unwrap_or_default();
    assert_eq!(listed.len(), entries.len(), "the CRL lists every entry");
    for (listed, entry) in listed.iter().zip(entries) {
        assert_eq!(listed.serial_number.as_bytes(), entry.serial.as_slice());
    }
    let spki_der = ca
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .expect("encodes");
    let signed = signed_part(der).expect("the CRL parses");
    let signature = crl.signature.as_bytes().expect("whole bytes");
    if let Err(reason) =
        verify_with_spki(&spki_der, &crl.signature_algorithm.oid, signed, signature)
    {
        panic!("the CRL's signature does not verify with the CA key: {reason}");
    }
}

/// Refuses a CA certificate whose keyUsage (when present) lacks cRLSign.
fn check_can_sign_crls(ca: &Certificate) -> Result<(), CrlError> {
    let usage = ca
        .tbs_certificate
        .get::<KeyUsage>()
        .expect("the CA certificate's keyUsage decoded when it was loaded");
    match usage {
        Some((_, usage)) if !usage.0.contains(KeyUsages::CRLSign) => {
            Err(CrlError::CaCannotSignCrls)
        }
        _ => Ok(()),
    }
}

/// The authorityKeyIdentifier's source, as for the leaves: the CA certificate's
/// subjectKeyIdentifier, else rcgen's default derivation from its key.
fn key_identifier_method(ca: &Certificate) -> KeyIdMethod {
    let subject_key_id = ca
        .tbs_certificate
        .get::<SubjectKeyIdentifier>()
        .expect("the CA certificate's subjectKeyIdentifier decoded when it was loaded");
    match subject_key_id {
        Some((_, id)) => KeyIdMethod::PreSpecified(id.0.as_bytes().to_vec()),
        None => CertificateParams::default().key_identifier_method,
    }
}

/// Why `serial` is not the content of a positive, minimally encoded DER INTEGER of at most
/// [`CRL_SERIAL_BYTES_MAX`] bytes, if it is not. rcgen re-encodes a serial minimally, so only
/// such a serial is listed exactly as given.
fn serial_problem(serial: &[u8]) -> Option<&'static str> {
    match serial {
        [] => Some("is empty"),
        _ if serial.len() > CRL_SERIAL_BYTES_MAX => Some("is too long"),
        [first, ..] if first & 0x80 != 0 => Some("is negative (its first bit is set)"),
        [0] => Some("is zero, which is not positive"),
        [0, second, ..] if second & 0x80 == 0 => Some("has a superfluous leading zero byte"),
        _ => None,
    }
}

/// A time in whole seconds since the epoch, if X.509 can write it.
fn x509_seconds(what: &'static str, ms: u64) -> Result<u64, CrlError> {
    let seconds = ms / 1000;
    if seconds > LAST_X509_SECOND {
        return Err(CrlError::TimeOutOfRange { what, ms });
    }
    Ok(seconds)
}

/// The reason for an RFC 5280 §5.3.1 code, or `None` for a code it does not define.
fn rcgen_reason(code: u8) -> Option<RevocationReason> {
    Some(match code {
        0 => RevocationReason::Unspecified,
        1 => RevocationReason::KeyCompromise,
        2 => RevocationReason::CaCompromise,
        3 => RevocationReason::AffiliationChanged,
        4 => RevocationReason::Superseded,
        5 => RevocationReason::CessationOfOperation,
        6 => RevocationReason::CertificateHold,
        8 => RevocationReason::RemoveFromCrl,
        9 => RevocationReason::PrivilegeWithdrawn,
        10 => RevocationReason::AaCompromise,
        _ => return None,
    })
}
