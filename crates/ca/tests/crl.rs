//! The CA's revocation lists, checked from the outside: every CRL is read back with x509-cert
//! and its signature verified with ring under the CA's key.

use certus_ca::crl::{CrlError, RevokedEntry, is_revocation_reason};
use certus_ca::issuer::{CaIdentity, SerialNumber};
use certus_ca::limits::{CRL_ENTRIES_MAX, CRL_SERIAL_BYTES_MAX};
use der::asn1::ObjectIdentifier;
use der::{Decode, Encode, Reader, SliceReader};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use ring::signature::{self as ring_sig, UnparsedPublicKey, VerificationAlgorithm};
use x509_cert::Certificate;
use x509_cert::Version;
use x509_cert::crl::CertificateList;
use x509_cert::ext::pkix::crl::CrlNumber;
use x509_cert::ext::pkix::{AuthorityKeyIdentifier, CrlReason, SubjectKeyIdentifier};

/// 2026-01-01T00:00:00Z.
const JAN_2026_MS: u64 = 1_767_225_600_000;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// 9999-12-31T23:59:59Z, the last second X.509 can write, in milliseconds.
const LAST_X509_MS: u64 = 253_402_300_799_000;
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

fn ca() -> CaIdentity {
    CaIdentity::generate("Certus Test CA", JAN_2026_MS - DAY_MS).expect("CA")
}

fn serial(seed: u8) -> Vec<u8> {
    SerialNumber::from_random_bytes([seed; 16])
        .der_bytes()
        .to_vec()
}

fn entry(serial: Vec<u8>, revoked_ms: u64, reason: u8) -> RevokedEntry {
    RevokedEntry {
        serial,
        revoked_ms,
        reason,
    }
}

/// The exact TBSCertList bytes: what the signature covers.
fn tbs_der(der: &[u8]) -> &[u8] {
    SliceReader::new(der)
        .expect("reader")
        .sequence(|outer| {
            let tbs = outer.tlv_bytes()?;
            outer.tlv_bytes()?;
            outer.tlv_bytes()?;
            Ok(tbs)
        })
        .expect("CRL")
}

fn unix_ms(time: &x509_cert::time::Time) -> u64 {
    time.to_unix_duration().as_secs() * 1000
}

/// Parses `der` and verifies its signature with the CA certificate's key.
fn parse_and_verify(
    der: &[u8],
    ca: &CaIdentity,
    algorithm: &'static dyn VerificationAlgorithm,
) -> CertificateList {
    let crl = CertificateList::from_der(der).expect("the CRL parses");
    let ca_cert = Certificate::from_der(ca.certificate_der()).expect("CA parses");
    let key = ca_cert
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    UnparsedPublicKey::new(algorithm, key)
        .verify(tbs_der(der), crl.signature.raw_bytes())
        .expect("the signature verifies with the CA key");
    assert_eq!(
        crl.tbs_cert_list.signature, crl.signature_algorithm,
        "RFC 5280 §5.1.2.2: the inner and outer algorithms are the same"
    );
    crl
}

/// The CRL-level checks every CRL of `ca` passes: v2, issuer, times, number, AKI.
fn check_crl_header(
    crl: &CertificateList,
    ca: &CaIdentity,
    crl_number: u64,
    this_update_ms: u64,
    next_update_ms: u64,
) {
    let ca_cert = Certificate::from_der(ca.certificate_der()).expect("CA parses");
    let tbs = &crl.tbs_cert_list;
    assert_eq!(tbs.version, Version::V2);
    assert_eq!(
        tbs.issuer.to_der().expect("encodes"),
        ca_cert.tbs_certificate.subject.to_der().expect("encodes"),
        "the issuer is the CA's subject, byte for byte"
    );
    assert_eq!(unix_ms(&tbs.this_update), this_update_ms / 1000 * 1000);
    let next_update = tbs.next_update.as_ref().expect("nextUpdate is present");
    assert_eq!(unix_ms(next_update), next_update_ms / 1000 * 1000);

    let extensions = tbs.crl_extensions.as_ref().expect("CRL extensions");
    assert_eq!(
        extensions.len(),
        2,
        "exactly authorityKeyIdentifier and cRLNumber"
    );
    let number = extensions
        .iter()
        .find(|e| e.extn_id == ObjectIdentifier::new_unwrap("2.5.29.20"))
        .expect("cRLNumber");
    assert!(!number.critical);
    let number = CrlNumber::from_der(number.extn_value.as_bytes()).expect("cRLNumber decodes");
    let mut be = [0u8; 8];
    let bytes = number.0.as_bytes();
    be[8 - bytes.len()..].copy_from_slice(bytes);
    assert_eq!(u64::from_be_bytes(be), crl_number);

    let aki = extensions
        .iter()
        .find(|e| e.extn_id == ObjectIdentifier::new_unwrap("2.5.29.35"))
        .expect("authorityKeyIdentifier");
    let aki = AuthorityKeyIdentifier::from_der(aki.extn_value.as_bytes()).expect("AKI decodes");
    let (_, ski) = ca_cert
        .tbs_certificate
        .get::<SubjectKeyIdentifier>()
        .expect("SKI decodes")
        .expect("the CA has an SKI");
    assert_eq!(
        aki.key_identifier.expect("keyIdentifier").as_bytes(),
        ski.0.as_bytes(),
        "the AKI is the CA's SKI"
    );
}

/// The reason code an entry carries, `None` when the extension is absent.
fn entry_reason(revoked: &x509_cert::crl::RevokedCert) -> Option<u32> {
    let extensions = revoked.crl_entry_extensions.as_ref()?;
    let [extension] = extensions.as_slice() else {
        panic!("an entry carries at most the reasonCode: {extensions:?}");
    };
    assert_eq!(extension.extn_id, ObjectIdentifier::new_unwrap("2.5.29.21"));
    assert!(!extension.critical);
    let reason = CrlReason::from_der(extension.extn_value.as_bytes()).expect("reason decodes");
    Some(reason as u32)
}

#[test]
fn a_crl_lists_serials_dates_and_reasons_under_the_ca_signature() {
    let ca = ca();
    // A serial whose first byte has the high bit set carries a leading 00, kept as given.
    let high_bit = vec![0x00, 0x8a, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07];
    let entries = vec![
        entry(serial(1), JAN_2026_MS + 1_500, 1),
        entry(high_bit.clone(), JAN_2026_MS + 2 * DAY_MS, 0),
        entry(serial(3), JAN_2026_MS + 3 * DAY_MS + 999, 4),
    ];
    let this_update_ms = JAN_2026_MS + 4 * DAY_MS + 123;
    let next_update_ms = this_update_ms + 7 * DAY_MS;
    let der = ca
        .crl(&entries, 42, this_update_ms, next_update_ms)
        .expect("CRL");

    let crl = parse_and_verify(&der, &ca, &ring_sig::ECDSA_P256_SHA256_ASN1);
    assert_eq!(crl.signature_algorithm.oid, ECDSA_WITH_SHA256);
    check_crl_header(&crl, &ca, 42, this_update_ms, next_update_ms);

    let listed = crl
        .tbs_cert_list
        .revoked_certificates
        .as_ref()
        .expect("entries");
    assert_eq!(listed.len(), 3);
    let serials: Vec<&[u8]> = listed.iter().map(|r| r.serial_number.as_bytes()).collect();
    assert_eq!(serials, [&serial(1)[..], &high_bit[..], &serial(3)[..]]);
    let dates: Vec<u64> = listed.iter().map(|r| unix_ms(&r.revocation_date)).collect();
    assert_eq!(
        dates,
        [
            JAN_2026_MS + 1_000,
            JAN_2026_MS + 2 * DAY_MS,
            JAN_2026_MS + 3 * DAY_MS
        ],
        "whole seconds, truncated"
    );
    let reasons: Vec<Option<u32>> = listed.iter().map(entry_reason).collect();
    assert_eq!(
        reasons,
        [Some(1), None, Some(4)],
        "reason 0 (unspecified) is written as no reasonCode (RFC 5280 §5.3.1)"
    );
}

#[test]
fn every_defined_reason_is_written_and_read_back() {
    let ca = ca();
    let codes: Vec<u8> = (0..=10).filter(|code| *code != 7).collect();
    let entries: Vec<RevokedEntry> = codes
        .iter()
        .map(|code| entry(serial(code + 1), JAN_2026_MS, *code))
        .collect();
    let der = ca
        .crl(&entries, 1, JAN_2026_MS, JAN_2026_MS + DAY_MS)
        .expect("CRL");
    let crl = parse_and_verify(&der, &ca, &ring_sig::ECDSA_P256_SHA256_ASN1);
    let reasons: Vec<Option<u32>> = crl
        .tbs_cert_list
        .revoked_certificates
        .as_ref()
        .expect("entries")
        .iter()
        .map(entry_reason)
        .collect();
    let expected: Vec<Option<u32>> = codes
        .iter()
        .map(|code| (*code != 0).then_some(u32::from(*code)))
        .collect();
    assert_eq!(reasons, expected);
}

#[test]
fn an_empty_crl_is_valid_and_has_no_revoked_certificates_field() {
    let ca = ca();
    let der = ca
        .crl(&[], 0, JAN_2026_MS, JAN_2026_MS + DAY_MS)
        .expect("CRL");
    let crl = parse_and_verify(&der, &ca, &ring_sig::ECDSA_P256_SHA256_ASN1);
    check_crl_header(&crl, &ca, 0, JAN_2026_MS, JAN_2026_MS + DAY_MS);
    assert_eq!(
        crl.tbs_cert_list.revoked_certificates, None,
        "RFC 5280 §5.1.2.6: absent, not an empty list"
    );
}

#[test]
fn the_largest_crl_number_and_times_up_to_9999_are_written() {
    let ca = ca();
    let entries = [entry(serial(1), LAST_X509_MS + 999, 2)];
    let der = ca
        .crl(&entries, u64::MAX, LAST_X509_MS - 1000, LAST_X509_MS + 999)
        .expect("CRL");
    let crl = parse_and_verify(&der, &ca, &ring_sig::ECDSA_P256_SHA256_ASN1);
    check_crl_header(&crl, &ca, u64::MAX, LAST_X509_MS - 1000, LAST_X509_MS);
}

#[test]
fn undefined_reasons_are_refused() {
    let ca = ca();
    for reason in [7, 11, 255] {
        let error = ca
            .crl(
                &[entry(serial(1), JAN_2026_MS, reason)],
                1,
                JAN_2026_MS,
                JAN_2026_MS + DAY_MS,
            )
            .expect_err("undefined reason");
        assert_eq!(
            error,
            CrlError::InvalidReason {
                serial_hex: "01".repeat(16),
                reason
            }
        );
        assert!(error.to_string().contains("except 7"), "{error}");
    }
    let defined: Vec<u8> = (0..=u8::MAX).filter(|c| is_revocation_reason(*c)).collect();
    assert_eq!(defined, [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]);
}

#[test]
fn serials_that_would_not_be_listed_exactly_are_refused() {
    let ca = ca();
    let cases: [(Vec<u8>, &str); 5] = [
        (vec![], "is empty"),
        (vec![0x80, 1], "is negative"),
        (vec![0], "is zero"),
        (vec![0, 0x7f], "superfluous leading zero"),
        (vec![1; CRL_SERIAL_BYTES_MAX + 1], "is too long"),
    ];
    for (bad, problem) in cases {
        let entries = [entry(serial(1), JAN_2026_MS, 1), entry(bad, JAN_2026_MS, 1)];
        let error = ca
            .crl(&entries, 1, JAN_2026_MS, JAN_2026_MS + DAY_MS)
            .expect_err("bad serial");
        assert!(
            matches!(error, CrlError::InvalidSerial { index: 1, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains(problem), "{error}");
    }
    // The longest serial allowed is written as given.
    let longest = vec![0x7f; CRL_SERIAL_BYTES_MAX];
    let der = ca
        .crl(
            &[entry(longest.clone(), JAN_2026_MS, 1)],
            1,
            JAN_2026_MS,
            JAN_2026_MS + DAY_MS,
        )
        .expect("CRL");
    let crl = parse_and_verify(&der, &ca, &ring_sig::ECDSA_P256_SHA256_ASN1);
    let listed = crl.tbs_cert_list.revoked_certificates.expect("entries");
    assert_eq!(listed[0].serial_number.as_bytes(), longest.as_slice());
}

#[test]
fn a_serial_listed_twice_is_refused() {
    let ca = ca();
    let entries = [
        entry(serial(1), JAN_2026_MS, 1),
        entry(serial(2), JAN_2026_MS, 1),
        entry(serial(1), JAN_2026_MS + 1000, 4),
    ];
    let error = ca
        .crl(&entries, 1, JAN_2026_MS, JAN_2026_MS + DAY_MS)
        .expect_err("duplicate");
    assert_eq!(
        error,
        CrlError::DuplicateSerial {
            serial_hex: "01".repeat(16)
        }
    );
}

#[test]
fn times_are_checked() {
    let ca = ca();
    // nextUpdate must be a later whole second than thisUpdate.
    for (this_update_ms, next_update_ms) in [
        (JAN_2026_MS, JAN_2026_MS),
        (JAN_2026_MS, JAN_2026_MS + 999),
        (JAN_2026_MS + DAY_MS, JAN_2026_MS),
    ] {
        assert_eq!(
            ca.crl(&[], 1, this_update_ms, next_update_ms),
            Err(CrlError::NextUpdateNotLater {
                this_update_ms,
                next_update_ms
            })
        );
    }
    assert!(
        ca.crl(&[], 1, JAN_2026_MS + 999, JAN_2026_MS + 1000)
            .is_ok()
    );

    let beyond = LAST_X509_MS + 1000;
    assert_eq!(
        ca.crl(&[], 1, JAN_2026_MS, beyond),
        Err(CrlError::TimeOutOfRange {
            what: "nextUpdate",
            ms: beyond
        })
    );
    assert_eq!(
        ca.crl(&[], 1, beyond, u64::MAX),
        Err(CrlError::TimeOutOfRange {
            what: "thisUpdate",
            ms: beyond
        })
    );
    assert_eq!(
        ca.crl(
            &[entry(serial(1), beyond, 1)],
            1,
            JAN_2026_MS,
            JAN_2026_MS + DAY_MS
        ),
        Err(CrlError::TimeOutOfRange {
            what: "revocationDate",
            ms: beyond
        })
    );
}

#[test]
fn more_entries_than_the_bound_are_refused_before_anything_else() {
    let ca = ca();
    // Entries that would each be refused: the count is checked first.
    let entries = vec![entry(Vec::new(), u64::MAX, 7); CRL_ENTRIES_MAX + 1];
    assert_eq!(
        ca.crl(&entries, 1, JAN_2026_MS, JAN_2026_MS + DAY_MS),
        Err(CrlError::TooManyEntries {
            count: CRL_ENTRIES_MAX + 1
        })
    );
}

/// A loaded Ed25519 CA with a subject of several attributes: its CRL names it byte for byte,
/// and, Ed25519 being deterministic, the same inputs give the same CRL.
#[test]
fn an_ed25519_ca_signs_deterministic_crls() {
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CountryName,
        rcgen::DnValue::PrintableString("NL".try_into().expect("printable")),
    );
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Certus");
    params
        .distinguished_name
        .push(DnType::CommonName, "Certus Ed25519 CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("CA certificate");
    let ca = CaIdentity::from_pem(&key.serialize_pem(), &cert.pem()).expect("loads");

    let entries = [entry(serial(5), JAN_2026_MS, 1)];
    let first = ca
        .crl(&entries, 7, JAN_2026_MS, JAN_2026_MS + DAY_MS)
        .expect("CRL");
    let crl = parse_and_verify(&first, &ca, &ring_sig::ED25519);
    assert_eq!(crl.signature_algorithm.oid, ED25519);
    check_crl_header(&crl, &ca, 7, JAN_2026_MS, JAN_2026_MS + DAY_MS);
    let second = ca
        .crl(&entries, 7, JAN_2026_MS, JAN_2026_MS + DAY_MS)
        .expect("CRL again");
    assert_eq!(first, second);
}

#[test]
fn a_ca_whose_key_usage_lacks_crl_sign_cannot_sign_crls() {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "Certificates only");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    let cert = params.self_signed(&key).expect("CA certificate");
    let ca = CaIdentity::from_pem(&key.serialize_pem(), &cert.pem()).expect("loads");
    assert_eq!(
        ca.crl(&[], 1, JAN_2026_MS, JAN_2026_MS + DAY_MS),
        Err(CrlError::CaCannotSignCrls)
    );
}
