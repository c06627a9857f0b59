//! CSR checks before a session is created: what is accepted (each key type, names from the SAN
//! and the CN, normalized), what is refused and with which error, and the session-name match.
//! The RSA, P-521, RSA-PSS and SHA-1 requests were made once with OpenSSL 3.0 (ring cannot make
//! RSA keys; the rest rcgen cannot sign) and are kept below as PEM.

use std::net::{IpAddr, Ipv4Addr};

use certus_ca::csr::{CheckedCsr, CsrError, KeyKind};
use certus_ca::limits::{CSR_DER_BYTES_MAX, CSR_NAMES_MAX, CSR_PEM_BYTES_MAX};
use rcgen::string::Ia5String;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType, SignatureAlgorithm};

/// A CSR signed by a fresh key of `algorithm`, with these SANs and (if given) this CN.
fn csr_der(
    algorithm: &'static SignatureAlgorithm,
    sans: Vec<SanType>,
    cn: Option<&str>,
) -> Vec<u8> {
    let key = KeyPair::generate_for(algorithm).expect("key");
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    params.distinguished_name = DistinguishedName::new();
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    params.serialize_request(&key).expect("CSR").der().to_vec()
}

fn dns(names: &[&str]) -> Vec<SanType> {
    names
        .iter()
        .map(|n| SanType::DnsName(Ia5String::try_from(*n).expect("IA5")))
        .collect()
}

fn p256(names: &[&str]) -> Vec<u8> {
    csr_der(&rcgen::PKCS_ECDSA_P256_SHA256, dns(names), None)
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn refused(der: &[u8]) -> CsrError {
    CheckedCsr::from_der(der).expect_err("the CSR is refused")
}

#[test]
fn rcgen_keys_of_each_supported_type_are_accepted() {
    for (algorithm, kind) in [
        (&rcgen::PKCS_ECDSA_P256_SHA256, KeyKind::EcdsaP256),
        (&rcgen::PKCS_ECDSA_P384_SHA384, KeyKind::EcdsaP384),
        (&rcgen::PKCS_ED25519, KeyKind::Ed25519),
    ] {
        let der = csr_der(algorithm, dns(&["b.example.com", "a.example.com"]), None);
        let csr = CheckedCsr::from_der(&der).expect("accepted");
        assert_eq!(csr.key_kind(), kind);
        assert_eq!(csr.names(), strings(&["a.example.com", "b.example.com"]));
        assert_eq!(csr.der(), der);
        assert_eq!(csr.common_name(), None);
    }
}

#[test]
fn openssl_rsa_requests_with_sha256_384_512_are_accepted() {
    let csr = CheckedCsr::from_pem(RSA2048_SHA256).expect("RSA-2048 SHA-256");
    assert_eq!(csr.key_kind(), KeyKind::Rsa { bits: 2048 });
    // CN=RSA.Example.com joins the SANs, lowercased, once.
    assert_eq!(
        csr.names(),
        strings(&["rsa.example.com", "www.rsa.example.com"])
    );
    assert_eq!(csr.common_name(), Some("rsa.example.com"));

    let csr = CheckedCsr::from_pem(RSA3072_SHA384).expect("RSA-3072 SHA-384");
    assert_eq!(csr.key_kind(), KeyKind::Rsa { bits: 3072 });
    // The subject has no CN (O=Example Org): the SAN alone.
    assert_eq!(csr.names(), strings(&["rsa3072.example.com"]));

    let csr = CheckedCsr::from_pem(RSA2048_SHA512).expect("RSA-2048 SHA-512");
    // No extensionRequest at all: the CN alone.
    assert_eq!(csr.names(), strings(&["sha512.example.com"]));
}

#[test]
fn pem_and_der_give_the_same_checked_csr() {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["a.example.com".to_string()]).expect("params");
    params.distinguished_name = DistinguishedName::new();
    let request = params.serialize_request(&key).expect("CSR");
    let from_pem = CheckedCsr::from_pem(&request.pem().expect("PEM")).expect("PEM accepted");
    let from_der = CheckedCsr::from_der(request.der()).expect("DER accepted");
    assert_eq!(from_pem, from_der);
    // Surrounding whitespace and CRLF line ends are fine.
    let crlf = format!(
        "\n  {}  \n",
        request.pem().expect("PEM").replace('\n', "\r\n")
    );
    assert_eq!(
        CheckedCsr::from_pem(&crlf).expect("CRLF accepted"),
        from_der
    );
}

#[test]
fn names_are_lowercased_sorted_and_distinct_and_a_free_text_cn_is_ignored() {
    let der = csr_der(
        &rcgen::PKCS_ECDSA_P256_SHA256,
        dns(&["WWW.Example.COM", "example.com", "www.example.com"]),
        Some("My Web Server"),
    );
    let csr = CheckedCsr::from_der(&der).expect("accepted");
    assert_eq!(csr.names(), strings(&["example.com", "www.example.com"]));
    assert_eq!(csr.common_name(), None);

    let der = csr_der(
        &rcgen::PKCS_ED25519,
        dns(&["a.example.com"]),
        Some("B.Example.com"),
    );
    let csr = CheckedCsr::from_der(&der).expect("accepted");
    assert_eq!(csr.names(), strings(&["a.example.com", "b.example.com"]));
    assert_eq!(csr.common_name(), Some("b.example.com"));
}

#[test]
fn names_other_than_dns_names_are_refused_by_kind() {
    let ip = SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)));
    let email = SanType::Rfc822Name(Ia5String::try_from("a@example.com").expect("IA5"));
    let uri = SanType::URI(Ia5String::try_from("https://example.com/").expect("IA5"));
    for (san, kind, value) in [
        (ip, "the IP address", "192.0.2.7"),
        (email, "the e-mail address", "a@example.com"),
        (uri, "the URI", "https://example.com/"),
    ] {
        let mut sans = dns(&["a.example.com"]);
        sans.push(san);
        let error = refused(&csr_der(&rcgen::PKCS_ECDSA_P256_SHA256, sans, None));
        assert_eq!(
            error,
            CsrError::UnsupportedName {
                kind,
                value: value.into()
            }
        );
        assert!(error.to_string().contains("DNS names only"), "{error}");
    }
    let error = refused(&csr_der(
        &rcgen::PKCS_ECDSA_P256_SHA256,
        dns(&["a.example.com"]),
        Some("10.1.2.3"),
    ));
    assert!(
        matches!(&error, CsrError::UnsupportedName { value, .. } if value == "10.1.2.3"),
        "{error}"
    );
}

#[test]
fn wildcards_are_refused_in_the_san_and_the_cn() {
    let error = refused(&p256(&["a.example.com", "*.Example.com"]));
    assert_eq!(
        error,
        CsrError::Wildcard {
            name: "*.example.com".into()
        }
    );
    assert!(
        error.to_string().contains("HTTP-01 cannot validate"),
        "{error}"
    );
    let error = refused(&csr_der(
        &rcgen::PKCS_ED25519,
        dns(&["a.example.com"]),
        Some("*.example.com"),
    ));
    assert!(matches!(error, CsrError::Wildcard { .. }), "{error}");
}

#[test]
fn malformed_dns_names_are_refused_with_the_rule_they_break() {
    for (name, rule) in [
        ("under_score.example.com", "contains '_'"),
        ("example.com.", "trailing dot"),
        ("localhost", "single label"),
        ("a..example.com", "empty label"),
        ("-a.example.com", "hyphen"),
        ("a.b.192", "numeric"),
    ] {
        let error = refused(&p256(&[name]));
        let CsrError::InvalidName { name: got, reason } = &error else {
            panic!("{name}: expected InvalidName, got {error}");
        };
        assert_eq!(got, name);
        assert!(reason.contains(rule), "{name}: {reason}");
    }
    let long_label = format!("{}.example.com", "a".repeat(64));
    assert!(matches!(
        refused(&p256(&[&long_label])),
        CsrError::InvalidName { .. }
    ));
}

#[test]
fn a_csr_without_names_or_with_too_many_is_refused() {
    assert_eq!(
        refused(&csr_der(
            &rcgen::PKCS_ED25519,
            Vec::new(),
            Some("Not A Name")
        )),
        CsrError::NoNames
    );
    let many: Vec<String> = (0..=CSR_NAMES_MAX)
        .map(|i| format!("n{i}.example.com"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(
        refused(&p256(&many)),
        CsrError::TooManyNames {
            count: CSR_NAMES_MAX + 1,
            max: CSR_NAMES_MAX
        }
    );
    // Exactly the limit is fine.
    CheckedCsr::from_der(&p256(&many[..CSR_NAMES_MAX])).expect("100 names");
}

#[test]
fn a_corrupted_signature_or_signed_content_is_refused() {
    for algorithm in [
        &rcgen::PKCS_ECDSA_P256_SHA256,
        &rcgen::PKCS_ECDSA_P384_SHA384,
        &rcgen::PKCS_ED25519,
    ] {
        let mut der = csr_der(algorithm, dns(&["a.example.com"]), None);
        let last = der.len() - 1;
        der[last] ^= 0x01;
        let error = refused(&der);
        assert!(matches!(error, CsrError::BadSignature { .. }), "{error}");
        assert!(error.to_string().contains("does not verify"), "{error}");
    }
    // A name changed after signing: "a.example.com" becomes "b.example.com".
    let mut der = p256(&["a.example.com"]);
    let at = der
        .windows(13)
        .position(|w| w == b"a.example.com")
        .expect("the name is in the DER");
    der[at] = b'b';
    assert!(matches!(refused(&der), CsrError::BadSignature { .. }));

    let mut der = pem_der(RSA2048_SHA256);
    let last = der.len() - 1;
    der[last] ^= 0x80;
    assert!(matches!(refused(&der), CsrError::BadSignature { .. }));
}

#[test]
fn unsupported_keys_and_signature_algorithms_are_refused_by_name() {
    let error = CheckedCsr::from_pem(RSA1024_SHA256).expect_err("RSA-1024");
    assert_eq!(
        error,
        CsrError::UnsupportedKey {
            key: "RSA of 1024 bits".into()
        }
    );
    assert!(
        error.to_string().contains("RSA of 2048 to 8192 bits"),
        "{error}"
    );

    let error = CheckedCsr::from_pem(P521_SHA512).expect_err("P-521");
    assert_eq!(
        error,
        CsrError::UnsupportedKey {
            key: "an EC key on curve P-521 (1.3.132.0.35)".into()
        }
    );

    let error = CheckedCsr::from_pem(RSA_PSS).expect_err("RSA-PSS");
    assert_eq!(
        error,
        CsrError::UnsupportedSignatureAlgorithm {
            algorithm: "RSASSA-PSS (1.2.840.113549.1.1.10)".into()
        }
    );
    let error = CheckedCsr::from_pem(RSA2048_SHA1).expect_err("SHA-1");
    assert_eq!(
        error,
        CsrError::UnsupportedSignatureAlgorithm {
            algorithm: "sha1WithRSAEncryption (1.2.840.113549.1.1.5)".into()
        }
    );
    assert!(error.to_string().contains("SHA-256/384/512"), "{error}");
}

#[test]
fn oversized_and_unparsable_input_is_refused_before_parsing() {
    let big = vec![0x30; CSR_DER_BYTES_MAX + 1];
    assert_eq!(
        refused(&big),
        CsrError::TooLarge {
            format: "DER",
            size: CSR_DER_BYTES_MAX + 1,
            max: CSR_DER_BYTES_MAX
        }
    );
    let big_pem = "A".repeat(CSR_PEM_BYTES_MAX + 1);
    assert!(matches!(
        CheckedCsr::from_pem(&big_pem),
        Err(CsrError::TooLarge { format: "PEM", .. })
    ));
    assert!(matches!(
        refused(b"\x30\x03\x02\x01\x00"),
        CsrError::Unparsable { .. }
    ));
    assert!(matches!(refused(b""), CsrError::Unparsable { .. }));
    // Trailing bytes after the request.
    let mut der = p256(&["a.example.com"]);
    der.push(0);
    assert!(matches!(refused(&der), CsrError::Unparsable { .. }));

    assert!(matches!(
        CheckedCsr::from_pem("not pem at all"),
        Err(CsrError::NotPem { .. })
    ));
    let certificate = rcgen::generate_simple_self_signed(vec!["a.example.com".into()])
        .expect("certificate")
        .cert
        .pem();
    let error = CheckedCsr::from_pem(&certificate).expect_err("a certificate is not a CSR");
    assert_eq!(
        error,
        CsrError::NotPem {
            reason: "its label is \"CERTIFICATE\"".into()
        }
    );
}

#[test]
fn matches_compares_names_as_sets_and_lists_the_differences() {
    let csr = CheckedCsr::from_der(&p256(&["a.example.com", "b.example.com"])).expect("CSR");
    csr.matches(&strings(&["b.example.com", "a.example.com"]))
        .expect("order does not matter");
    csr.matches(&strings(&[
        "A.example.com",
        "b.example.com",
        "a.example.com",
    ]))
    .expect("case and duplicates do not matter");

    let error = csr
        .matches(&strings(&[
            "a.example.com",
            "c.example.com",
            "d.example.com",
        ]))
        .expect_err("mismatch");
    assert_eq!(
        error,
        CsrError::NamesMismatch {
            extra: strings(&["b.example.com"]),
            missing: strings(&["c.example.com", "d.example.com"]),
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("the CSR also asks for b.example.com")
            && message.contains("the CSR lacks c.example.com, d.example.com"),
        "{message}"
    );
    let error = csr
        .matches(&strings(&["a.example.com"]))
        .expect_err("a subset is a mismatch");
    assert_eq!(
        error.to_string(),
        "the CSR's names differ from the session's: the CSR also asks for b.example.com (not in \
         the session)"
    );
}

fn pem_der(pem: &str) -> Vec<u8> {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, body).expect("base64")
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

const RSA2048_SHA512: &str = "\
-----BEGIN CERTIFICATE REQUEST-----\n\
MIICYjCCAUoCAQAwHTEbMBkGA1UEAwwSc2hhNTEyLmV4YW1wbGUuY29tMIIBIjAN\n\
BgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAugwo1+Y0vjDSSAjWqvAq59CQ1Sqs\n\
lb4qypIhRoibWIUDwxqZJmCD2LeegQWtzpUO+jwpqAlj43R7XM7S2Z8RAxlxG8P+\n\
/h4W9PGSvHgitLcY3rRvia3UJg/t4bFIrwJ44D6QGyuhiZQOGKRx6ZCLwy3+UuDr\n\
he8UzsJLHK8/GcoBI1P85gatp8f+RFkEVYw8KVhHoVislmjTR8D/TDbwy93mKbJo\n\
4AtCn3PSgVDHxM8L+GuQBcABmVX4rYzmOuNI7AFW8vXWdymlTUZKqL1ov5Z4qYow\n\
/rLBHie6++BEO5sYtT8q7GxnWpDJrBBRSZRgHs53Xu2mqSjh6QtmvuqbCwIDAQAB\n\
oAAwDQYJKoZIhvcNAQENBQADggEBAJMaHy72EA0lFi++yHU58wS5Ig3fdn3XoXwi\n\
kB+HAgocQeQxkuTPWG66IHUCALmctiXuDD0CLrUk4A8Fu4/SzQNYbqpgWvijB7rQ\n\
NXLzE8Inu/Bpo2QF8YoKGY7QLAIX1okTZb+jkoA+PolFtXWm4mulvKwO8V6jt363\n\
hamVBSlOLpsvf450UB9TaJAlS3T3ujQUS8t3rgTkcAS6rkiL6+/faj+CxcqMSxdf\n\
W6MGoDSW2CnmH+yivjXGjzaHgEO4gRctRluZY1HWyLRQ6nxT6O0iZiLNc7+xt0GK\n\
jzUJnJVrgDb67xCP/z8zloairH3I5/jtZJvEcZj9z7BGIqB+858=\n\
-----END CERTIFICATE REQUEST-----\n\
";

const RSA1024_SHA256: &str = "\
-----BEGIN CERTIFICATE REQUEST-----\n\
MIIBWzCBxQIBADAcMRowGAYDVQQDDBFzbWFsbC5leGFtcGxlLmNvbTCBnzANBgkq\n\
hkiG9w0BAQEFAAOBjQAwgYkCgYEAy/TosEqsYciLq2K+LVEuGl7rwFUfwcJbBL9V\n\
EQJ+y5GhZsgNb7/7yJwPATolINvKz9gUSKUxc8GPXfMmuTri9ufPWhHoQtMuY75d\n\
F1hRyoKLvhqXKrwRZYnQY9pTL2Yh2L9wTC0BFMr2CeGUaCe15Hth+6is5jhoALFY\n\
bfVtGikCAwEAAaAAMA0GCSqGSIb3DQEBCwUAA4GBAMcjnhbjbvxLCeKj/TDyzZJy\n\
wmR9IpW0QUzXbsPlPvebmH9K4DYm70P1MFH5MKcfI/Wwiy883CWg+nSm/wV1Zbc5\n\
xaM4c2IMNlBXT9IjTZU8BcpESrt017CjAojS4mYiunpkGge6UzAY8wfDNdbzYopN\n\
2HJQqUPRDEQ5sEsa0rCE\n\
-----END CERTIFICATE REQUEST-----\n\
";

const P521_SHA512: &str = "\
-----BEGIN CERTIFICATE REQUEST-----\n\
MIIBXTCBwAIBADAbMRkwFwYDVQQDDBBwNTIxLmV4YW1wbGUuY29tMIGbMBAGByqG\n\
SM49AgEGBSuBBAAjA4GGAAQBmSNEdGFYOYjtCI0nYSoeS/TcxWkOITbtbVVbQChR\n\
GjaKfAmSmwJKajeRk5CZlF9iIAbqRx/STDRVJsDFIyS35CwA22a5q53vty5+YOgv\n\
yNtMkaU1uhNKcTLWv8AA/sk6LtLmbiZT5AxbzGqHWXFxpKPiaNvnIjvkQ1TjgAbq\n\
jsDW+1GgADAKBggqhkjOPQQDBAOBiwAwgYcCQgDdWTbVkUdAw0hMOa1gXQNguBW6\n\
NzaJBDdOsr1U/K00pBOF7v+SCiGxmJtJ3bulBQbdENFck7lxKQW79Lsx13BCCwJB\n\
eBBsABxBIifINRrlb572kN/M/H62K7hMFtv9dmlVsClb5XbGsl8QPUJXUDTMn6YT\n\
BEOjP3BndalXIFPvJbgwmf8=\n\
-----END CERTIFICATE REQUEST-----\n\
";

const RSA_PSS: &str = "\
-----BEGIN CERTIFICATE REQUEST-----\n\
MIIClDCCAUcCAQAwGjEYMBYGA1UEAwwPcHNzLmV4YW1wbGUuY29tMIIBIjANBgkq\n\
hkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAs7oiTga0NcEo1uj3555NjwcgKFZ9LBpS\n\
4kROXp2J/hT/wsNrSZEWMD7pS1VWkDJYWfvbiftVddDNk/FBDFbQLpT/HkX5OKfa\n\
hWbpEQWPTqTQDuCqvo9EuHtXwOBL7b0dxs2W3/LFLRWhsq3oC/ndR8D+BOSQp2QL\n\
A8iWPPHx7ruivnoaNl8ZiBsMsGLcpkgDEl3Dy+2WEzyGqSe345587lb542mOc1+q\n\
x8kyx66LfpAJBHL3wWGVj4y5vvMqH2Io+pPKCn6EPqpPh750MO2SJ/AfHzhJc6oA\n\
cvtZ4T6y2oHc3EoWUwC/eA0sRIVXZTePTmJNlMKPcEdBxXqyD/IpdQIDAQABoAAw\n\
QgYJKoZIhvcNAQEKMDWgDzANBglghkgBZQMEAgEFAKEcMBoGCSqGSIb3DQEBCDAN\n\
BglghkgBZQMEAgEFAKIEAgIA3gOCAQEAJGKiu6S6AxywqpHEYVVSs3+n7i73Jw+M\n\
sb+lP6L7RvXILHbWWoGENRFlC6t0KAHhg+H2NLYZbXiXVuzkIOaeT6ZdT7QvbGK4\n\
BnJdAO1lfHJuMOVg0LguKYwGzvfkR9c7u2FJORzkOrifru0zSlKTJ/y8hUzQ8qlt\n\
c8PZjgJOiu0ioShhzJNBBXkVKeAEq9mHkqIQwKxEQhdqGpYPfTYAfBVEyv6l+Thl\n\
XfE+QAdtRNmD3mZl8Y7JzKy8UMZD3IsFyRjiQnX8aJc6qOkj09yx0NIteamGLqfU\n\
xuiJNaXUfwn2g1uYwqbn77myuO/dBOwMkjJDFBwSi52i+rDzPBP1rg==\n\
-----END CERTIFICATE REQUEST-----\n\
";

const RSA2048_SHA1: &str = "\
-----BEGIN CERTIFICATE REQUEST-----\n\
MIICYDCCAUgCAQAwGzEZMBcGA1UEAwwQc2hhMS5leGFtcGxlLmNvbTCCASIwDQYJ\n\
KoZIhvcNAQEBBQADggEPADCCAQoCggEBAJ3ngBaAnsyURPgAmZsMx/Z8IaDFEjnj\n\
MTYJS5dliObD3lGyIdtSSWuYMln5+HM8pYpFCeh8uRkkgF8aiEHJDHqBKu/lFdhf\n\
pL08Wz/hmrwv12dObAiJD3XNxmGLM24ELgEkx6D4JHNEcam/s5xamlsweYTXItql\n\
evKGMNfQw2SMfJZhQUexI+TGwdFShc1Y4tKzA1PWKkJYZIo43ugJYJor1fgbFLN5\n\
UbTG2FhCKOJAaegp0fV1s9bjKbzT0InFN5wFX2vpTfLcKEtcqyApdWxvZEYnBjSm\n\
phQl+W9+q4KilX5C4tn5R6yowiGnxb+XHt/2ndS2+xWf3yqm+c9x3LcCAwEAAaAA\n\
MA0GCSqGSIb3DQEBBQUAA4IBAQBjkKd+9K0osEFl6Jp3yNmAnTaLTPSR742He4Wr\n\
52VOtuxBPM/pXpPuL96wqbF7MOS/QXNxOk0et05jTkU4p583VxXvhhwJwvXbjkLE\n\
9V4B3R1yz5ZAog0+M/b5EJxJzUid3f0UVmEibXiwOdwN+n+rIx5xKoRzEMx6euxX\n\
S85Re1vzikCd6hjw2pagfDxSVOQxatktt+8xikRQOjT+vNPpZFBxVAg6bpCS3jqe\n\
J9yIRmcANXdPGl81+kzFvxTzJHqgJDjKkW/gzlbhR4d9l2Z9BaHq8NniZIRLyj6a\n\
8S9t25y88hXfGiUK6OW3ANUm89zdoKlAJWoQjvuovPIfuNb/\n\
-----END CERTIFICATE REQUEST-----\n\
";
