//! The built-in issuer, checked from the outside: every certificate is read back with x509-cert
//! and its signature verified with ring under the CA's key, for CSRs of every key type.

use std::time::Duration;

use certus_ca::csr::CheckedCsr;
use certus_ca::issuer::{
    CA_VALIDITY, CaError, CaIdentity, IssueError, IssuedCertificate, LEAF_VALIDITY_DEFAULT,
    SerialNumber,
};
use certus_ca::limits::LEAF_VALIDITY_MAX;
use der::{Decode, Encode, Reader, SliceReader};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SignatureAlgorithm,
};
use ring::signature::{self as ring_sig, UnparsedPublicKey, VerificationAlgorithm};
use x509_cert::Certificate;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints as X509BasicConstraints, ExtendedKeyUsage, KeyUsage,
    KeyUsages, SubjectAltName, SubjectKeyIdentifier,
};

/// 2026-01-01T00:00:00Z.
const JAN_2026_MS: u64 = 1_767_225_600_000;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const SERVER_AUTH: &str = "1.3.6.1.5.5.7.3.1";

fn ca() -> CaIdentity {
    CaIdentity::generate("Certus Test CA", JAN_2026_MS - DAY_MS).expect("CA")
}

fn rcgen_csr(algorithm: &'static SignatureAlgorithm, names: &[&str]) -> CheckedCsr {
    let key = KeyPair::generate_for(algorithm).expect("key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name = DistinguishedName::new();
    let request = params.serialize_request(&key).expect("CSR");
    CheckedCsr::from_der(request.der()).expect("CSR accepted")
}

fn serial(seed: u8) -> SerialNumber {
    SerialNumber::from_random_bytes([seed; 16])
}

/// The exact TBSCertificate bytes: what the signature covers.
fn tbs_der(der: &[u8]) -> &[u8] {
    SliceReader::new(der)
        .expect("reader")
        .sequence(|outer| {
            let tbs = outer.tlv_bytes()?;
            outer.tlv_bytes()?;
            outer.tlv_bytes()?;
            Ok(tbs)
        })
        .expect("certificate")
}

/// A whole-second duration in milliseconds.
fn ms(duration: Duration) -> u64 {
    duration.as_secs() * 1000
}

fn unix_ms(time: &x509_cert::time::Time) -> u64 {
    time.to_unix_duration().as_secs() * 1000
}

/// Verifies `certificate`'s signature with `issuer`'s key.
fn verify_signed_by(
    der: &[u8],
    issuer: &Certificate,
    algorithm: &'static dyn VerificationAlgorithm,
) {
    let certificate = Certificate::from_der(der).expect("parses");
    let key = issuer
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    UnparsedPublicKey::new(algorithm, key)
        .verify(tbs_der(der), certificate.signature.raw_bytes())
        .expect("the signature verifies with the CA key");
}

/// Everything the issuer promises about a leaf, checked independently of it.
fn check_leaf(
    issued: &IssuedCertificate,
    ca: &CaIdentity,
    csr: &CheckedCsr,
    serial: SerialNumber,
    not_before_ms: u64,
    validity: Duration,
    algorithm: &'static dyn VerificationAlgorithm,
) {
    let ca_cert = Certificate::from_der(ca.certificate_der()).expect("CA parses");
    let leaf = Certificate::from_der(&issued.leaf_der).expect("leaf parses");
    let tbs = &leaf.tbs_certificate;

    verify_signed_by(&issued.leaf_der, &ca_cert, algorithm);
    assert_eq!(tbs.issuer, ca_cert.tbs_certificate.subject);
    assert_eq!(
        tbs.subject_public_key_info.to_der().expect("SPKI"),
        csr.public_key_info_der(),
        "the leaf certifies the CSR's own key"
    );

    let (_, san) = tbs.get::<SubjectAltName>().expect("SAN").expect("has SAN");
    let names: Vec<String> = san
        .0
        .iter()
        .map(|name| match name {
            GeneralName::DnsName(dns) => dns.to_string(),
            other => panic!("unexpected name {other:?}"),
        })
        .collect();
    assert_eq!(names, csr.names());

    let not_before_s_ms = not_before_ms / 1000 * 1000;
    let validity_ms = ms(validity);
    assert_eq!(unix_ms(&tbs.validity.not_before), not_before_s_ms);
    assert_eq!(
        unix_ms(&tbs.validity.not_after),
        not_before_s_ms + validity_ms - 1000
    );
    assert_eq!(issued.not_before_ms, not_before_s_ms);
    assert_eq!(issued.not_after_ms, not_before_s_ms + validity_ms - 1000);

    assert_eq!(issued.serial, serial);
    assert_eq!(tbs.serial_number.as_bytes(), serial.der_bytes());
    assert_eq!(serial.to_bytes()[0] & 0x80, 0, "positive");

    let (critical, constraints) = tbs
        .get::<X509BasicConstraints>()
        .expect("basicConstraints")
        .expect("has basicConstraints");
    assert!(critical && !constraints.ca, "not a CA");
    let (_, usage) = tbs.get::<KeyUsage>().expect("KU").expect("has KU");
    assert!(usage.0.contains(KeyUsages::DigitalSignature));
    assert!(!usage.0.contains(KeyUsages::KeyCertSign));
    let rsa = matches!(csr.key_kind(), certus_ca::csr::KeyKind::Rsa { .. });
    assert_eq!(usage.0.contains(KeyUsages::KeyEncipherment), rsa);
    let (_, eku) = tbs
        .get::<ExtendedKeyUsage>()
        .expect("EKU")
        .expect("has EKU");
    let eku: Vec<String> = eku.0.iter().map(|oid| oid.to_string()).collect();
    assert_eq!(eku, [SERVER_AUTH]);
    let (_, aki) = tbs
        .get::<AuthorityKeyIdentifier>()
        .expect("AKI")
        .expect("has AKI");
    let (_, ca_ski) = ca_cert
        .tbs_certificate
        .get::<SubjectKeyIdentifier>()
        .expect("CA SKI")
        .expect("CA has SKI");
    assert_eq!(aki.key_identifier, Some(ca_ski.0), "AKI = the CA's SKI");
    assert!(tbs.get::<SubjectKeyIdentifier>().expect("SKI").is_some());

    // The chain: the leaf, then the CA certificate.
    let blocks: Vec<&str> = issued
        .chain_pem
        .split_inclusive("-----END CERTIFICATE-----\n")
        .collect();
    assert_eq!(blocks.len(), 2, "{}", issued.chain_pem);
    let (_, leaf_pem) = der::pem::decode_vec(blocks[0].as_bytes()).expect("leaf PEM");
    assert_eq!(leaf_pem, issued.leaf_der);
    assert_eq!(blocks[1], ca.certificate_pem());
}

#[test]
fn certificates_for_each_key_type_verify_under_the_ca_and_certify_the_csr_key() {
    let ca = ca();
    let not_before = JAN_2026_MS + 123; // milliseconds are dropped
    for (seed, algorithm) in [
        (1, &rcgen::PKCS_ECDSA_P256_SHA256),
        (2, &rcgen::PKCS_ECDSA_P384_SHA384),
        (3, &rcgen::PKCS_ED25519),
    ] {
        let csr = rcgen_csr(algorithm, &["www.example.com", "example.com"]);
        let serial = serial(seed);
        let issued = ca
            .issue(&csr, serial, not_before, LEAF_VALIDITY_DEFAULT)
            .expect("issued");
        check_leaf(
            &issued,
            &ca,
            &csr,
            serial,
            not_before,
            LEAF_VALIDITY_DEFAULT,
            &ring_sig::ECDSA_P256_SHA256_ASN1,
        );
    }
}

#[test]
fn rsa_csrs_get_key_encipherment_and_their_own_key() {
    let ca = ca();
    for pem in [RSA2048_SHA256, RSA3072_SHA384] {
        let csr = CheckedCsr::from_pem(pem).expect("RSA CSR");
        let serial = serial(0xff);
        let validity = Duration::from_secs(7 * 24 * 60 * 60);
        let issued = ca
            .issue(&csr, serial, JAN_2026_MS, validity)
            .expect("issued");
        check_leaf(
            &issued,
            &ca,
            &csr,
            serial,
            JAN_2026_MS,
            validity,
            &ring_sig::ECDSA_P256_SHA256_ASN1,
        );
    }
}

#[test]
fn the_generated_ca_is_a_self_signed_ca_for_ten_years_and_round_trips_through_pem() {
    let ca = ca();
    let cert = Certificate::from_der(ca.certificate_der()).expect("CA parses");
    let tbs = &cert.tbs_certificate;
    assert_eq!(tbs.subject.to_string(), "CN=Certus Test CA");
    assert_eq!(tbs.issuer, tbs.subject);
    verify_signed_by(
        ca.certificate_der(),
        &cert,
        &ring_sig::ECDSA_P256_SHA256_ASN1,
    );
    let (critical, constraints) = tbs
        .get::<X509BasicConstraints>()
        .expect("BC")
        .expect("has BC");
    assert!(critical && constraints.ca);
    assert_eq!(constraints.path_len_constraint, Some(0));
    let (_, usage) = tbs.get::<KeyUsage>().expect("KU").expect("has KU");
    assert!(usage.0.contains(KeyUsages::KeyCertSign));
    assert_eq!(unix_ms(&tbs.validity.not_before), JAN_2026_MS - DAY_MS);
    assert_eq!(
        unix_ms(&tbs.validity.not_after),
        JAN_2026_MS - DAY_MS + ms(CA_VALIDITY)
    );
    assert_eq!(ca.not_after_ms(), unix_ms(&tbs.validity.not_after));

    let loaded = CaIdentity::from_pem(&ca.key_pem(), ca.certificate_pem()).expect("loads");
    assert_eq!(loaded.certificate_der(), ca.certificate_der());
    let csr = rcgen_csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["a.example.com"]);
    let issued = loaded
        .issue(&csr, serial(7), JAN_2026_MS, LEAF_VALIDITY_DEFAULT)
        .expect("issued by the loaded CA");
    check_leaf(
        &issued,
        &ca,
        &csr,
        serial(7),
        JAN_2026_MS,
        LEAF_VALIDITY_DEFAULT,
        &ring_sig::ECDSA_P256_SHA256_ASN1,
    );
    // Shared by the issuing tasks.
    fn send_sync<T: Send + Sync>(_: &T) {}
    send_sync(&loaded);
    // Debug never shows the key.
    let debug = format!("{loaded:?}");
    assert!(
        debug.contains("Certus Test CA") && !debug.contains("PRIVATE"),
        "{debug}"
    );
}

/// A CA made outside the issuer: an Ed25519 key, a subject of several attributes, a
/// PrintableString value. Ed25519 signatures are deterministic, so issuing twice gives the same
/// certificate.
#[test]
fn an_ed25519_ca_from_pem_issues_deterministic_certificates() {
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

    let csr = rcgen_csr(&rcgen::PKCS_ECDSA_P384_SHA384, &["a.example.com"]);
    let first = ca
        .issue(&csr, serial(9), JAN_2026_MS, LEAF_VALIDITY_DEFAULT)
        .expect("issued");
    check_leaf(
        &first,
        &ca,
        &csr,
        serial(9),
        JAN_2026_MS,
        LEAF_VALIDITY_DEFAULT,
        &ring_sig::ED25519,
    );
    let second = ca
        .issue(&csr, serial(9), JAN_2026_MS, LEAF_VALIDITY_DEFAULT)
        .expect("issued again");
    assert_eq!(first, second);
}

#[test]
fn validity_is_bounded_by_the_limit_and_by_the_ca() {
    let ca = ca();
    let csr = rcgen_csr(&rcgen::PKCS_ED25519, &["a.example.com"]);
    for validity in [
        Duration::ZERO,
        Duration::from_millis(999),
        LEAF_VALIDITY_MAX + Duration::from_secs(1),
    ] {
        assert_eq!(
            ca.issue(&csr, serial(1), JAN_2026_MS, validity),
            Err(IssueError::ValidityOutOfRange { validity })
        );
    }
    ca.issue(&csr, serial(1), JAN_2026_MS, LEAF_VALIDITY_MAX)
        .expect("the longest validity");
    ca.issue(&csr, serial(1), JAN_2026_MS, Duration::from_secs(1))
        .expect("one second");

    // Ending exactly when the CA does is fine; a second later is not.
    let validity = Duration::from_secs(90 * 24 * 60 * 60);
    let last_start = ca.not_after_ms() - ms(validity) + 1000;
    ca.issue(&csr, serial(1), last_start, validity)
        .expect("ends with the CA");
    let error = ca
        .issue(&csr, serial(1), last_start + 1000, validity)
        .expect_err("outlives the CA");
    assert_eq!(
        error,
        IssueError::BeyondCaValidity {
            not_after_ms: ca.not_after_ms() + 1000,
            ca_not_after_ms: ca.not_after_ms()
        }
    );
    assert!(error.to_string().contains("renew the CA"), "{error}");
    assert!(matches!(
        ca.issue(&csr, serial(1), u64::MAX, validity),
        Err(IssueError::BeyondCaValidity { .. })
    ));
}

#[test]
fn check_can_issue_agrees_with_issue_at_the_ca_end() {
    let ca = ca();
    let csr = rcgen_csr(&rcgen::PKCS_ED25519, &["a.example.com"]);
    let validity = LEAF_VALIDITY_DEFAULT;
    let last_start = ca.not_after_ms() - ms(validity) + 1000;
    for (start, fits) in [
        (JAN_2026_MS, true),
        (last_start, true),
        (last_start + 999, true),
        (last_start + 1000, false),
        (ca.not_after_ms() + DAY_MS, false),
        (u64::MAX, false),
    ] {
        let checked = ca.check_can_issue(start, validity);
        let issued = ca.issue(&csr, serial(1), start, validity);
        assert_eq!(checked.is_ok(), fits, "start {start}: {checked:?}");
        assert_eq!(issued.is_ok(), fits, "issue agrees at start {start}");
    }
    let error = ca
        .check_can_issue(ca.not_after_ms() + DAY_MS, validity)
        .expect_err("an expired CA");
    let text = error.to_string();
    assert!(text.contains("renew the CA"), "{text}");
    assert!(text.contains("90 days"), "{text}");
    assert!(text.contains("GMT"), "the dates are readable: {text}");
}

#[test]
fn serial_numbers_are_positive_and_nonzero() {
    let serial = SerialNumber::from_random_bytes([0xff; 16]);
    assert_eq!(serial.to_bytes()[0], 0x7f);
    assert_eq!(serial.to_string(), format!("7f{}", "ff".repeat(15)));
    let serial = SerialNumber::from_random_bytes([0x80; 16]);
    assert_eq!(serial.to_bytes()[0], 0);
    assert_eq!(
        serial.der_bytes(),
        serial.to_bytes(),
        "the zero byte is the sign byte"
    );
    let serial =
        SerialNumber::from_random_bytes([0, 0, 0x7f, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    assert_eq!(
        serial.der_bytes()[0],
        0x7f,
        "leading zero bytes are dropped"
    );
    let zero = SerialNumber::from_random_bytes([0; 16]);
    assert_eq!(zero.der_bytes(), &[1]);
    let rng = ring::rand::SystemRandom::new();
    let a = SerialNumber::random(&rng).expect("random");
    let b = SerialNumber::random(&rng).expect("random");
    assert_ne!(a, b);

    // A serial whose first nonzero byte has its high bit set: the certificate carries a sign
    // byte, and the same integer.
    let ca = ca();
    let csr = rcgen_csr(&rcgen::PKCS_ED25519, &["a.example.com"]);
    for bytes in [
        [0x00, 0x80, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
        [0x00, 0x00, 0x7f, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14],
        [0xff; 16],
    ] {
        let serial = SerialNumber::from_random_bytes(bytes);
        let issued = ca
            .issue(&csr, serial, JAN_2026_MS, LEAF_VALIDITY_DEFAULT)
            .expect("issued");
        let leaf = Certificate::from_der(&issued.leaf_der).expect("parses");
        assert_eq!(
            leaf.tbs_certificate.serial_number.as_bytes(),
            serial.der_bytes()
        );
    }
}

#[test]
fn ca_loading_refuses_wrong_keys_non_cas_and_garbage() {
    let ca = ca();
    let other = CaIdentity::generate("Other CA", JAN_2026_MS).expect("other CA");
    assert_eq!(
        CaIdentity::from_pem(&other.key_pem(), ca.certificate_pem()).expect_err("wrong key"),
        CaError::KeyMismatch
    );

    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["a.example.com".into()])
        .expect("params")
        .self_signed(&key)
        .expect("leaf");
    let error = CaIdentity::from_pem(&key.serialize_pem(), &leaf.pem()).expect_err("not a CA");
    assert!(matches!(error, CaError::NotACa { .. }), "{error}");
    assert!(error.to_string().contains("cA is not true"), "{error}");

    assert!(matches!(
        CaIdentity::from_pem("junk", ca.certificate_pem()),
        Err(CaError::KeyUnusable { .. })
    ));
    assert!(matches!(
        CaIdentity::from_pem(&ca.key_pem(), "junk"),
        Err(CaError::CertificateUnparsable { .. })
    ));
    assert!(matches!(
        CaIdentity::from_pem(&ca.key_pem(), &ca.key_pem()),
        Err(CaError::CertificateUnparsable { .. })
    ));

    for name in ["", &"x".repeat(65), "bad\nname"] {
        assert!(matches!(
            CaIdentity::generate(name, JAN_2026_MS),
            Err(CaError::InvalidCommonName { .. })
        ));
    }
    assert!(matches!(
        CaIdentity::generate("CA", 253_402_300_799_000),
        Err(CaError::TimeOutOfRange { .. })
    ));
}

#[test]
fn a_csr_that_is_not_checked_cannot_reach_the_issuer() {
    // The issuer takes only a CheckedCsr; the checks refuse a corrupted signature and a name
    // set that is not the session's (both covered in detail in issuance_csr.rs).
    let key = KeyPair::generate().expect("key");
    let mut der = CertificateParams::new(vec!["a.example.com".into()])
        .expect("params")
        .serialize_request(&key)
        .expect("CSR")
        .der()
        .to_vec();
    let last = der.len() - 1;
    der[last] ^= 1;
    assert!(CheckedCsr::from_der(&der).is_err());

    let csr = rcgen_csr(&rcgen::PKCS_ED25519, &["a.example.com"]);
    assert!(csr.matches(&["b.example.com".to_string()]).is_err());
}

/// An RSA-2048 / SHA-256 CSR made with OpenSSL (ring cannot generate RSA keys).
const RSA2048_SHA256: &str = include_str!("fixtures/rsa2048-sha256.csr.pem");
const RSA3072_SHA384: &str = "\
-----BEGIN CERTIFICATE REQUEST-----\n\
MIIDjDCCAfQCAQAwFjEUMBIGA1UECgwLRXhhbXBsZSBPcmcwggGiMA0GCSqGSIb3\n\
DQEBAQUAA4IBjwAwggGKAoIBgQCoPBm9Zep6zfOjeqXbCsl8/KQemS6RApUeL3Um\n\
co3l/NrEdW0f+I1BxLm7uDRr64X5H6kvUUP2fNUBJvSo7pIH+xMwmt1D3sihaYiQ\n\
yg4M6OITkg4Udww3DTglGaT29fRurHTxg2/J3JQsnATvKQXXu/ZfDPojrXssbiTt\n\
irpmi+3813JyXbfGf1hMjs96X+JV4tjeiJoEPrAi2PMsMhjxv0DWpdXRv9bKQ2bg\n\
EBWnSvN2mwNaDgsm7dybD6A8Te4YtBT8DTjf6nAAuQX9nnuGI438mUZVP/wWqWLh\n\
4WfIZzhy/8iz3POl4DmiXKfHW17GiOBZd0AJSSbZ3vesQlv48cyhVbw80KAIOF4e\n\
yu65d7lcldIZCWaXi6otxignwuOmU/44MyuaKFyxVJDZ9KbxhXd7s3Temo8+KYRG\n\
OkfuqrptTKbvPsWw3V6xo3sLvvsOeamz3+NwC50JSq66M0nPBF2hXQbRayGQA/ng\n\
DaCudzMHWIvEMWzSjajBEp6joNECAwEAAaAxMC8GCSqGSIb3DQEJDjEiMCAwHgYD\n\
VR0RBBcwFYITcnNhMzA3Mi5leGFtcGxlLmNvbTANBgkqhkiG9w0BAQwFAAOCAYEA\n\
m87KmhT6av6QvOJ0zTEDlv66IcQ3i7nDJCoBf0uFLQjEoYkVpwcmOMWtE2B/4nzg\n\
l+OfrNkn6CUZBmWNKC67PX2JR/MhgQ6TyjCQLmwYTuNKiwXjgvwDe7/6JEk+Ii97\n\
s7DgfxMrClFyWCo/IGnpGBm5MS/4Kmm3zqSZuUFdktaUUg6XUQ6y+RZSh+MFeHnh\n\
tI6lQNn25mZCok5P1f2DTW+hZgWqMC1doeYZJiO0BnZy0Gu6KazSUVzWvtni/OkG\n\
R0vvA/lQSt9fAAs2aAl0KqNaWp8DULhUHKL7ieUSR4FbRlWguBIWVjl3oLHEruJf\n\
FT67S3QdNuPTlvJvrMA5xtQf0nEFsC2k+O19nbXhw+Bb1Pzns9GDhe295CGHDB6Y\n\
zxs8LacRsypI+mciT0ofdP95tY2cyKUw1w7x8sgconDO5h98ZcT4vzIOtGJ4ZzfE\n\
aTSu4qvNwcncLSVrFbPpnT0SYKU5lBsBXrxMyHgy76xca5ZF7LXavhmYJaa/1F1Z\n\
-----END CERTIFICATE REQUEST-----\n\
";
