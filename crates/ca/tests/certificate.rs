//! Certificates read back for revocation: a leaf the issuer made gives back its serial, names,
//! key and notAfter; the leaf of a PEM chain is found; garbage is refused with its error.

use std::net::{IpAddr, Ipv4Addr};

use certus_ca::certificate::{CertificateError, LeafInfo, first_pem_certificate, leaf_info};
use certus_ca::csr::CheckedCsr;
use certus_ca::issuer::{CaIdentity, LEAF_VALIDITY_DEFAULT, SerialNumber};
use certus_ca::limits::{CERTIFICATE_DER_BYTES_MAX, CERTIFICATE_PEM_CHAIN_BYTES_MAX};
use der::Encode;
use rcgen::string::Ia5String;
use rcgen::{
    CertificateParams, DistinguishedName, KeyPair, PublicKeyData, SanType, SignatureAlgorithm,
};

/// 2026-01-01T00:00:00Z.
const JAN_2026_MS: u64 = 1_767_225_600_000;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

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

fn pem(label: &str, der: &[u8]) -> String {
    der::pem::encode_string(label, der::pem::LineEnding::LF, der).expect("PEM")
}

#[test]
fn an_issued_leaf_gives_back_its_serial_names_key_and_not_after() {
    let ca = ca();
    for (seed, algorithm) in [
        (1, &rcgen::PKCS_ECDSA_P256_SHA256),
        (2, &rcgen::PKCS_ECDSA_P384_SHA384),
        (3, &rcgen::PKCS_ED25519),
    ] {
        let csr = rcgen_csr(algorithm, &["www.example.com", "example.com"]);
        let serial = SerialNumber::from_random_bytes([seed; 16]);
        let issued = ca
            .issue(&csr, serial, JAN_2026_MS + 123, LEAF_VALIDITY_DEFAULT)
            .expect("issued");
        let info = leaf_info(&issued.leaf_der).expect("leaf parses");
        assert_eq!(
            info,
            LeafInfo {
                serial: serial.der_bytes().to_vec(),
                serial_hex: serial.to_string(),
                spki_der: csr.public_key_info_der().to_vec(),
                dns_names: csr.names().to_vec(),
                not_after_ms: issued.not_after_ms,
            }
        );
        assert_eq!(info.dns_names, ["example.com", "www.example.com"]);
    }
}

#[test]
fn a_serial_with_its_high_bit_set_keeps_its_leading_zero() {
    let ca = ca();
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x8a, 0x01, 0xff]));
    params.subject_alt_names = vec![
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        SanType::DnsName(Ia5String::try_from("node1.internal").expect("ASCII")),
    ];
    let certificate = ca.sign(params, &key).expect("signed");
    let info = leaf_info(certificate.der()).expect("parses");
    assert_eq!(info.serial, [0x00, 0x8a, 0x01, 0xff]);
    assert_eq!(info.serial_hex, "008a01ff");
    assert_eq!(info.spki_der, key.subject_public_key_info());
    assert_eq!(
        info.dns_names,
        ["node1.internal"],
        "the IP address is left out"
    );
}

#[test]
fn a_certificate_without_subject_alt_name_has_no_dns_names() {
    let ca = ca();
    let info = leaf_info(ca.certificate_der()).expect("the CA certificate parses");
    assert!(info.dns_names.is_empty());
    assert_eq!(info.not_after_ms, ca.not_after_ms());
}

#[test]
fn the_first_pem_certificate_of_a_chain_is_the_leaf() {
    let ca = ca();
    let csr = rcgen_csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["example.com"]);
    let serial = SerialNumber::from_random_bytes([9; 16]);
    let issued = ca
        .issue(&csr, serial, JAN_2026_MS, LEAF_VALIDITY_DEFAULT)
        .expect("issued");
    assert_eq!(
        first_pem_certificate(issued.chain_pem.as_bytes()).expect("leaf"),
        issued.leaf_der
    );
    // CRLF line endings and explanatory text before the block (RFC 7468 §2) are fine.
    let decorated = format!(
        "subject=CN=example.com\r\n{}",
        issued.chain_pem.replace('\n', "\r\n")
    );
    assert_eq!(
        first_pem_certificate(decorated.as_bytes()).expect("leaf"),
        issued.leaf_der
    );
    // A chain of one.
    assert_eq!(
        first_pem_certificate(ca.certificate_pem().as_bytes()).expect("CA"),
        ca.certificate_der()
    );
    // The two functions together: the leaf of a chain, read.
    let info = leaf_info(&first_pem_certificate(issued.chain_pem.as_bytes()).expect("leaf"))
        .expect("parses");
    assert_eq!(info.serial_hex, serial.to_string());
}

#[test]
fn garbage_der_is_refused() {
    let ca = ca();
    let unparsable = |der: &[u8]| {
        assert!(
            matches!(leaf_info(der), Err(CertificateError::Unparsable { .. })),
            "{der:02x?}"
        );
    };
    unparsable(b"");
    unparsable(b"garbage");
    let der = ca.certificate_der();
    unparsable(&der[..der.len() - 1]);
    unparsable(&[der, &[0][..]].concat());
    // A CSR is not a certificate.
    let csr = rcgen_csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["example.com"]);
    unparsable(csr.der());

    let huge = vec![0x30; CERTIFICATE_DER_BYTES_MAX + 1];
    assert_eq!(
        leaf_info(&huge),
        Err(CertificateError::TooLarge {
            what: "certificate",
            size: CERTIFICATE_DER_BYTES_MAX + 1,
            max: CERTIFICATE_DER_BYTES_MAX,
        })
    );
    let error = leaf_info(b"garbage").expect_err("garbage");
    assert!(
        error.to_string().contains("expected an X.509 certificate"),
        "{error}"
    );
}

#[test]
fn garbage_pem_is_refused() {
    let ca = ca();
    let csr = rcgen_csr(&rcgen::PKCS_ECDSA_P256_SHA256, &["example.com"]);
    for missing in [
        String::new(),
        "no PEM here".to_owned(),
        pem("CERTIFICATE REQUEST", csr.der()),
        // A beginning without its end.
        ca.certificate_pem()
            .replace("-----END CERTIFICATE-----", ""),
    ] {
        assert_eq!(
            first_pem_certificate(missing.as_bytes()),
            Err(CertificateError::NoPemCertificate),
            "{missing}"
        );
    }
    let bad_base64 = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        first_pem_certificate(bad_base64.as_bytes()),
        Err(CertificateError::BadPem { .. })
    ));
    // A CERTIFICATE block that holds a CSR.
    assert!(matches!(
        first_pem_certificate(pem("CERTIFICATE", csr.der()).as_bytes()),
        Err(CertificateError::Unparsable { .. })
    ));
    // The first block is read even when a good one follows.
    let chain = format!("{}{}", pem("CERTIFICATE", b"not DER"), ca.certificate_pem());
    assert!(matches!(
        first_pem_certificate(chain.as_bytes()),
        Err(CertificateError::Unparsable { .. })
    ));
    let huge = vec![b' '; CERTIFICATE_PEM_CHAIN_BYTES_MAX + 1];
    assert!(matches!(
        first_pem_certificate(&huge),
        Err(CertificateError::TooLarge {
            what: "PEM chain",
            ..
        })
    ));
}

/// The SPKI is the certificate's, re-encoded exactly (strict DER parses only canonical input).
#[test]
fn the_spki_is_the_certificates_bytes() {
    let ca = ca();
    let info = leaf_info(ca.certificate_der()).expect("parses");
    let certificate =
        <x509_cert::Certificate as der::Decode>::from_der(ca.certificate_der()).expect("parses");
    assert_eq!(
        info.spki_der,
        certificate
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .expect("encodes")
    );
    let offset = ca
        .certificate_der()
        .windows(info.spki_der.len())
        .position(|w| w == info.spki_der.as_slice());
    assert!(
        offset.is_some(),
        "the SPKI bytes occur in the certificate as they are"
    );
}
