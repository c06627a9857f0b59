//! Known-answer test of the precertificate entry against public data: the precertificate, CA
//! and final (embedded-SCT) certificates from the certificate-transparency project's test data
//! (test/testdata: ca-cert.pem, test-embedded-pre-cert.pem, test-embedded-cert.pem), and the
//! SCT its test log issued for that precertificate (test-embedded-pre-cert.proof), signed with
//! the key in ct-server-key-public.pem.
//!
//! Two independent answers must hold for the entry built here:
//! - its TBSCertificate equals the final certificate's TBSCertificate minus the SCT list
//!   extension, byte for byte;
//! - the log's signature in the SCT verifies over the entry (issuer key hash and TBSCertificate),
//!   so both are exactly what another RFC 6962 implementation computed.

use base64::Engine;
use certus_ct::chain::{
    AcceptedRoots, ChainError, ChainLimits, check_chain, check_pre_chain, precert_tbs_certificate,
};
use certus_ct::sha256;
use der::{Decode, Encode};
use x509_cert::Certificate;
use x509_cert::spki::SubjectPublicKeyInfoOwned;

const CA_CERT: &str = "
MIIC0DCCAjmgAwIBAgIBADANBgkqhkiG9w0BAQUFADBVMQswCQYDVQQGEwJHQjEk
MCIGA1UEChMbQ2VydGlmaWNhdGUgVHJhbnNwYXJlbmN5IENBMQ4wDAYDVQQIEwVX
YWxlczEQMA4GA1UEBxMHRXJ3IFdlbjAeFw0xMjA2MDEwMDAwMDBaFw0yMjA2MDEw
MDAwMDBaMFUxCzAJBgNVBAYTAkdCMSQwIgYDVQQKExtDZXJ0aWZpY2F0ZSBUcmFu
c3BhcmVuY3kgQ0ExDjAMBgNVBAgTBVdhbGVzMRAwDgYDVQQHEwdFcncgV2VuMIGf
MA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDVimhTYhCicRmTbneDIRgcKkATxtB7
jHbrkVfT0PtLO1FuzsvRyY2RxS90P6tjXVUJnNE6uvMa5UFEJFGnTHgW8iQ8+EjP
KDHM5nugSlojgZ88ujfmJNnDvbKZuDnd/iYx0ss6hPx7srXFL8/BT/9Ab1zURmnL
svfP34b7arnRsQIDAQABo4GvMIGsMB0GA1UdDgQWBBRfnYgNyHPmVNT4DdjmsMEk
tEfDVTB9BgNVHSMEdjB0gBRfnYgNyHPmVNT4DdjmsMEktEfDVaFZpFcwVTELMAkG
A1UEBhMCR0IxJDAiBgNVBAoTG0NlcnRpZmljYXRlIFRyYW5zcGFyZW5jeSBDQTEO
MAwGA1UECBMFV2FsZXMxEDAOBgNVBAcTB0VydyBXZW6CAQAwDAYDVR0TBAUwAwEB
/zANBgkqhkiG9w0BAQUFAAOBgQAGCMxKbWTyIF4UbASydvkrDvqUpdryOvw4BmBt
OZDQoeojPUApV2lGOwRmYef6HReZFSCa6i4Kd1F2QRIn18ADB8dHDmFYT9czQiRy
f1HWkLxHqd81TbD26yWVXeGJPE3VICskovPkQNJ0tU4b03YmnKliibduyqQQkOFP
OwqULg==";

const PRECERT: &str = "
MIIC3zCCAkigAwIBAgIBBzANBgkqhkiG9w0BAQUFADBVMQswCQYDVQQGEwJHQjEk
MCIGA1UEChMbQ2VydGlmaWNhdGUgVHJhbnNwYXJlbmN5IENBMQ4wDAYDVQQIEwVX
YWxlczEQMA4GA1UEBxMHRXJ3IFdlbjAeFw0xMjA2MDEwMDAwMDBaFw0yMjA2MDEw
MDAwMDBaMFIxCzAJBgNVBAYTAkdCMSEwHwYDVQQKExhDZXJ0aWZpY2F0ZSBUcmFu
c3BhcmVuY3kxDjAMBgNVBAgTBVdhbGVzMRAwDgYDVQQHEwdFcncgV2VuMIGfMA0G
CSqGSIb3DQEBAQUAA4GNADCBiQKBgQC+75jnwmh3rjhfdTJaDB0ym+3xj6r015a/
BH634c4VyVui+A7kWL19uG+KSyUhkaeb1wDDjpwDibRc1NyaEgqyHgy0HNDnKAWk
EM2cW9tdSSdyba8XEPYBhzd+olsaHjnu0LiBGdwVTcaPfajjDK8VijPmyVCfSgWw
FAn/Xdh+tQIDAQABo4HBMIG+MB0GA1UdDgQWBBQgMVQa8lwF/9hli2hDeU9ekDb3
tDB9BgNVHSMEdjB0gBRfnYgNyHPmVNT4DdjmsMEktEfDVaFZpFcwVTELMAkGA1UE
BhMCR0IxJDAiBgNVBAoTG0NlcnRpZmljYXRlIFRyYW5zcGFyZW5jeSBDQTEOMAwG
A1UECBMFV2FsZXMxEDAOBgNVBAcTB0VydyBXZW6CAQAwCQYDVR0TBAIwADATBgor
BgEEAdZ5AgQDAQH/BAIFADANBgkqhkiG9w0BAQUFAAOBgQACocOeAVr1Tf8CPDNg
h1//NDdVLx8JAb3CVDFfM3K3I/sV+87MTfRxoM5NjFRlXYSHl/soHj36u0YtLGhL
BW/qe2O0cP8WbjLURgY1s9K8bagkmyYw5x/DTwjyPdTuIo+PdPY9eGMR3QpYEUBf
kGzKLC0+6/yBmWTr2M98CIY/vg==";

const EMBEDDED_CERT: &str = "
MIIDWTCCAsKgAwIBAgIBBzANBgkqhkiG9w0BAQUFADBVMQswCQYDVQQGEwJHQjEk
MCIGA1UEChMbQ2VydGlmaWNhdGUgVHJhbnNwYXJlbmN5IENBMQ4wDAYDVQQIEwVX
YWxlczEQMA4GA1UEBxMHRXJ3IFdlbjAeFw0xMjA2MDEwMDAwMDBaFw0yMjA2MDEw
MDAwMDBaMFIxCzAJBgNVBAYTAkdCMSEwHwYDVQQKExhDZXJ0aWZpY2F0ZSBUcmFu
c3BhcmVuY3kxDjAMBgNVBAgTBVdhbGVzMRAwDgYDVQQHEwdFcncgV2VuMIGfMA0G
CSqGSIb3DQEBAQUAA4GNADCBiQKBgQC+75jnwmh3rjhfdTJaDB0ym+3xj6r015a/
BH634c4VyVui+A7kWL19uG+KSyUhkaeb1wDDjpwDibRc1NyaEgqyHgy0HNDnKAWk
EM2cW9tdSSdyba8XEPYBhzd+olsaHjnu0LiBGdwVTcaPfajjDK8VijPmyVCfSgWw
FAn/Xdh+tQIDAQABo4IBOjCCATYwHQYDVR0OBBYEFCAxVBryXAX/2GWLaEN5T16Q
Nve0MH0GA1UdIwR2MHSAFF+diA3Ic+ZU1PgN2OawwSS0R8NVoVmkVzBVMQswCQYD
VQQGEwJHQjEkMCIGA1UEChMbQ2VydGlmaWNhdGUgVHJhbnNwYXJlbmN5IENBMQ4w
DAYDVQQIEwVXYWxlczEQMA4GA1UEBxMHRXJ3IFdlboIBADAJBgNVHRMEAjAAMIGK
BgorBgEEAdZ5AgQCBHwEegB4AHYA3xwuwRUAlFJHqWFoMl3cXHlZ6PfG04j8AC4L
vT9012QAAAE92yffkwAABAMARzBFAiBIL2dRrzXbplQ2vh/WZA89v5pBQpSVkkUw
KI+j5eI+BgIhAOTtwNs6xXKx4vXoq2poBlOYfc9BAn3+/6EFUZ2J7b8IMA0GCSqG
SIb3DQEBBQUAA4GBAIoMS+8JnUeSea+goo5on5HhxEIb4tJpoupspOghXd7dyhUE
oR58h8S3foDw6XkDUmjyfKIOFmgErlVvMWmB+Wo5Srer/T4lWsAERRP+dlcMZ5Wr
5HAxM9MD+J86+mu8/FFzGd/ZW5NCQSEfY0A1w9B4MHpoxgdaLiDInza4kQyg";

/// test-embedded-pre-cert.proof: a TLS-encoded v1 SCT.
const PRECERT_SCT: &str = "00df1c2ec11500945247a96168325ddc5c7959e8f7c6d388fc002e0bbd3f74d7\
                           640000013ddb27df9300000403004730450220482f6751af35dba65436be1fd6\
                           640f3dbf9a41429495924530288fa3e5e23e06022100e4edc0db3ac572b1e2f5\
                           e8ab6a680653987dcf41027dfeffa105519d89edbf08";

/// ct-server-key-public.pem, DER SubjectPublicKeyInfo (ECDSA P-256).
const LOG_KEY_SPKI: &str = "3059301306072a8648ce3d020106082a8648ce3d03010703420004\
                            99783cb14533c0161a5ab45bf95d08a29cd0ea8dd4c84274e2be59ad15c67696\
                            0cf0afa1074a57ac644b23479e5b3fb7b245eb4b420ef370210371a944beaceb";

const SCT_LIST_OID: &str = "1.3.6.1.4.1.11129.2.4.2";

fn der_from_base64(text: &str) -> Vec<u8> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .expect("base64")
}

fn from_hex(text: &str) -> Vec<u8> {
    let compact: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    compact
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// The final certificate's TBSCertificate without its SCT list: what RFC 6962 §3.2 says the
/// precertificate entry's TBSCertificate must equal.
fn final_tbs_without_sct_list() -> Vec<u8> {
    let mut tbs = Certificate::from_der(&der_from_base64(EMBEDDED_CERT))
        .unwrap()
        .tbs_certificate;
    let extensions = tbs.extensions.as_mut().unwrap();
    let before = extensions.len();
    extensions.retain(|ext| ext.extn_id.to_string() != SCT_LIST_OID);
    assert_eq!(extensions.len(), before - 1);
    tbs.to_der().unwrap()
}

#[test]
fn precert_tbs_equals_the_final_certificate_minus_its_sct_list() {
    let precert = der_from_base64(PRECERT);
    let logged = precert_tbs_certificate(&precert, None).expect("precertificate TBS");
    assert_eq!(logged, final_tbs_without_sct_list());
}

#[test]
fn the_test_logs_sct_verifies_over_the_precert_entry() {
    let ca = der_from_base64(CA_CERT);
    let precert = der_from_base64(PRECERT);
    let tbs = precert_tbs_certificate(&precert, None).unwrap();
    let issuer_spki = Certificate::from_der(&ca)
        .unwrap()
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .unwrap();
    let issuer_key_hash = sha256(&issuer_spki);

    // The SCT: version, log id, timestamp, extensions, then the digitally-signed signature.
    let sct = from_hex(PRECERT_SCT);
    let log_spki_der = from_hex(LOG_KEY_SPKI);
    assert_eq!(sct[0], 0, "v1");
    assert_eq!(
        &sct[1..33],
        sha256(&log_spki_der).as_slice(),
        "log id = SHA-256 of the log key"
    );
    let timestamp = &sct[33..41];
    assert_eq!(&sct[41..43], &[0, 0], "no SCT extensions");
    assert_eq!(&sct[43..45], &[4, 3], "SHA-256 with ECDSA");
    let signature_len = usize::from(u16::from_be_bytes([sct[45], sct[46]]));
    let signature = &sct[47..];
    assert_eq!(signature.len(), signature_len);

    // RFC 6962 §3.2: the signed input for a precert_entry.
    let mut signed = vec![0u8, 0u8]; // sct_version v1, signature_type certificate_timestamp
    signed.extend_from_slice(timestamp);
    signed.extend_from_slice(&[0, 1]); // entry_type precert_entry
    signed.extend_from_slice(&issuer_key_hash);
    let tbs_len = u32::try_from(tbs.len()).unwrap().to_be_bytes();
    signed.extend_from_slice(&tbs_len[1..]); // opaque<1..2^24-1>
    signed.extend_from_slice(&tbs);
    signed.extend_from_slice(&[0, 0]); // no extensions

    let log_key = SubjectPublicKeyInfoOwned::from_der(&log_spki_der).unwrap();
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_ASN1,
        log_key.subject_public_key.raw_bytes(),
    )
    .verify(&signed, signature)
    .expect("the test log's SCT signs exactly this entry");

    // And a one-byte change to the entry breaks it (the check above is not vacuous).
    let mut altered = signed.clone();
    let last_tbs_byte = altered.len() - 3;
    altered[last_tbs_byte] ^= 1;
    assert!(
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            log_key.subject_public_key.raw_bytes(),
        )
        .verify(&altered, signature)
        .is_err()
    );
}

#[test]
fn the_sha1_test_chain_is_refused_as_unsupported_naming_the_algorithm() {
    // The 2012 test data is signed with SHA-1 (and 1024-bit RSA), which this log does not
    // accept: the refusal says so instead of calling the signature wrong.
    let ca = der_from_base64(CA_CERT);
    let precert = der_from_base64(PRECERT);
    let roots = AcceptedRoots::from_der([ca.clone()]).unwrap();
    let err = check_pre_chain(&[precert, ca.clone()], &roots, &ChainLimits::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::UnsupportedSignatureAlgorithm { index: 0, .. }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("sha1WithRSAEncryption (1.2.840.113549.1.1.5)"),
        "{err}"
    );
    // Without the CA in the chain, the root lookup reports the same.
    let err = check_chain(
        &[der_from_base64(EMBEDDED_CERT)],
        &roots,
        &ChainLimits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::UnsupportedSignatureAlgorithm { index: 0, .. }
        ),
        "{err:?}"
    );
}
