//! Known-answer tests: SCTs, STHs and leaves produced by other RFC 6962 implementations and
//! real logs, re-typed from their public test data, checked with our encoders and verifier.
//!
//! Sources:
//! - certificate-transparency-go `signatures_test.go`: an ECDSA P-256 key, an SCT over a DER
//!   certificate and an STH, each with its signature (the same vectors as the C++
//!   `log_signer_test`).
//! - certificate-transparency-go `testdata/{certs,keys}.go` (from the C++ repository's
//!   `test/testdata`): the CT test log key (`ct-server-key-public.pem`), a certificate and a
//!   precertificate issued by the test CA, their TLS-encoded SCTs (`test-cert.proof`,
//!   `test-embedded-pre-cert.proof`) and their leaf hashes.
//! - An STH (tree size 170761442) and a TLS-encoded SCT of Google's Argon2018 log, with its
//!   public key, from the test suite of the JavaScript `CTUtils` library (which labels the key
//!   "pilot"; its SHA-256 is Argon2018's published log id).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certus_ct::signer::{LogVerifier, VerifyError};
use certus_ct::structures::json::GetSthResponse;
use certus_ct::structures::{
    DigitallySigned, HashAlgorithm, MerkleTreeLeaf, SignatureAlgorithm, SignedCertificateTimestamp,
    SignedTreeHead, Version, leaf_input,
};
use certus_ct::{Hash, LogEntry, sha256};
use der::{Decode as _, Encode as _};

fn hex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex length");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

fn hash(text: &str) -> Hash {
    hex(text).try_into().unwrap()
}

/// The DER inside a PEM block (test data only; the library has its own parser for keys).
fn pem_body(pem: &str) -> Vec<u8> {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    STANDARD.decode(body).unwrap()
}

/// Leaf hash, RFC 6962 §2.1: SHA-256(0x00 || leaf_input).
fn leaf_hash(leaf_input: &[u8]) -> Hash {
    sha256(&[&[0u8][..], leaf_input].concat())
}

mod go_signatures_test {
    use super::*;

    const EC256_PUBLIC_KEY_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAES0AfBkjr7b8b19p5Gk8plSAN16wW
XZyhYsH6FMCEUK60t7pem/ckoPX8hupuaiJzJS0ZQ0SEoJGlFxkUFwft5g==
-----END PUBLIC KEY-----
";
    const EC256_PUBLIC_KEY_2_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEfahLEimAoz2t01p3uMziiLOl/fHT
DM0YDOhBRuiBARsV4UvxG2LdNgoIGLrtCzWE0J5APC2em4JlvR8EEEFMoA==
-----END PUBLIC KEY-----
";
    const KEY_ID_EC: &str = "b69d879e3f2c4402556dcda2f6b2e02ff6b6df4789c53000e14f4b125ae847aa";

    const DER_CERT: &str = concat!(
        "308202ca30820233a003020102020102300d06092a864886f70d01010505003055310b300",
        "906035504061302474231243022060355040a131b4365727469666963617465205472616e",
        "73706172656e6379204341310e300c0603550408130557616c65733110300e06035504071",
        "3074572772057656e301e170d3132303630313030303030305a170d323230363031303030",
        "3030305a3052310b30090603550406130247423121301f060355040a13184365727469666",
        "963617465205472616e73706172656e6379310e300c0603550408130557616c6573311030",
        "0e060355040713074572772057656e30819f300d06092a864886f70d010101050003818d0",
        "030818902818100b8742267898b99ba6bfd6e6f7ada8e54337f58feb7227c46248437ba5f",
        "89b007cbe1ecb4545b38ed23fddbf6b9742cafb638157f68184776a1b38ab39318ddd7344",
        "89b4d750117cd83a220a7b52f295d1e18571469a581c23c68c57d973761d9787a091fb586",
        "4936b166535e21b427e3c6d690b2e91a87f36b7ec26f59ce53b50203010001a381ac3081a",
        "9301d0603551d0e041604141184e1187c87956dffc31dd0521ff564efbeae8d307d060355",
        "1d23047630748014a3b8d89ba2690dfb48bbbf87c1039ddce56256c6a159a4573055310b3",
        "00906035504061302474231243022060355040a131b436572746966696361746520547261",
        "6e73706172656e6379204341310e300c0603550408130557616c65733110300e060355040",
        "713074572772057656e82010030090603551d1304023000300d06092a864886f70d010105",
        "050003818100292ecf6e46c7a0bcd69051739277710385363341c0a9049637279707ae23c",
        "c5128a4bdea0d480ed0206b39e3a77a2b0c49b0271f4140ab75c1de57aba498e09459b479",
        "cf92a4d5d5dd5cbe3f0a11e25f04078df88fc388b61b867a8de46216c0e17c31fc7d8003e",
        "cc37be22292f84242ab87fb08bd4dfa3c1b9ce4d3ee6667da",
    );
    const SCT_TIMESTAMP_MS: u64 = 1_348_589_665_525;
    const SCT_SIGNATURE: &str = concat!(
        "0403",
        "0048",
        "3046022100d3f7690e7ee80d9988a54a3821056393e9eb0c686ad67fbae3686c888fb1a3c",
        "e022100f9a51c6065bbba7ad7116a31bea1c31dbed6a921e1df02e4b403757fae3254ae",
    );

    const STH_TIMESTAMP_MS: u64 = 1_348_589_667_204;
    const STH_TREE_SIZE: u64 = 42;
    const STH_ROOT_HASH: &str = "18041bd4665083001fba8c5411d2d748e8abbfdcdfd9218cb02b68a78e7d4c23";
    const STH_SIGNATURE: &str = concat!(
        "0403",
        "0048",
        "3046022100befd8060563763a5e49ba53e6443c13f7624fd6403178113736e16012aca983",
        "e022100f572568dbfe9a86490eb915c4ee16ad5ecd708fed35ed4e5cd1b2c3f087b4130",
    );

    fn verifier() -> LogVerifier {
        LogVerifier::from_public_key_pem(EC256_PUBLIC_KEY_PEM).unwrap()
    }

    fn entry() -> LogEntry {
        LogEntry::X509 {
            certificate: hex(DER_CERT),
        }
    }

    fn sct() -> SignedCertificateTimestamp {
        SignedCertificateTimestamp {
            version: Version::V1,
            log_id: hash(KEY_ID_EC),
            timestamp_ms: SCT_TIMESTAMP_MS,
            extensions: Vec::new(),
            signature: DigitallySigned::decode(&hex(SCT_SIGNATURE)).unwrap(),
        }
    }

    fn sth() -> SignedTreeHead {
        SignedTreeHead {
            tree_size: STH_TREE_SIZE,
            timestamp_ms: STH_TIMESTAMP_MS,
            sha256_root_hash: hash(STH_ROOT_HASH),
            tree_head_signature: DigitallySigned::decode(&hex(STH_SIGNATURE)).unwrap(),
        }
    }

    #[test]
    fn the_log_id_is_the_sha256_of_the_key() {
        assert_eq!(verifier().log_id(), hash(KEY_ID_EC));
        assert_eq!(verifier().log_id(), sha256(&pem_body(EC256_PUBLIC_KEY_PEM)));
    }

    #[test]
    fn the_signatures_decode_as_sha256_ecdsa_and_re_encode_identically() {
        for encoded in [SCT_SIGNATURE, STH_SIGNATURE] {
            let signed = DigitallySigned::decode(&hex(encoded)).unwrap();
            assert_eq!(signed.hash_algorithm, HashAlgorithm::Sha256);
            assert_eq!(signed.signature_algorithm, SignatureAlgorithm::Ecdsa);
            assert_eq!(signed.signature.len(), 0x48);
            assert_eq!(signed.encode().unwrap(), hex(encoded));
        }
    }

    #[test]
    fn the_sct_verifies() {
        verifier().verify_sct(&sct(), &entry()).unwrap();
    }

    #[test]
    fn the_sth_verifies() {
        verifier().verify_sth(&sth()).unwrap();
    }

    #[test]
    fn a_corrupted_certificate_byte_breaks_the_sct() {
        let verifier = verifier();
        let sct = sct();
        let certificate = hex(DER_CERT);
        // Every 37th byte, to keep the test quick while covering the whole certificate.
        for index in (0..certificate.len()).step_by(37) {
            let mut corrupted = certificate.clone();
            corrupted[index] ^= 0x01;
            let entry = LogEntry::X509 {
                certificate: corrupted,
            };
            assert_eq!(
                verifier.verify_sct(&sct, &entry),
                Err(VerifyError::BadSignature),
                "byte {index}"
            );
        }
    }

    #[test]
    fn a_changed_timestamp_breaks_the_sct() {
        let sct = SignedCertificateTimestamp {
            timestamp_ms: SCT_TIMESTAMP_MS + 1,
            ..sct()
        };
        assert_eq!(
            verifier().verify_sct(&sct, &entry()),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn every_root_hash_byte_and_field_of_the_sth_is_covered() {
        let verifier = verifier();
        for index in 0..32 {
            let mut sth = sth();
            sth.sha256_root_hash[index] ^= 0x80;
            assert_eq!(
                verifier.verify_sth(&sth),
                Err(VerifyError::BadSignature),
                "root byte {index}"
            );
        }
        let bigger = SignedTreeHead {
            tree_size: STH_TREE_SIZE + 1,
            ..sth()
        };
        assert_eq!(verifier.verify_sth(&bigger), Err(VerifyError::BadSignature));
        let later = SignedTreeHead {
            timestamp_ms: STH_TIMESTAMP_MS + 1,
            ..sth()
        };
        assert_eq!(verifier.verify_sth(&later), Err(VerifyError::BadSignature));
    }

    #[test]
    fn another_key_rejects_both() {
        let other = LogVerifier::from_public_key_pem(EC256_PUBLIC_KEY_2_PEM).unwrap();
        assert_eq!(other.verify_sth(&sth()), Err(VerifyError::BadSignature));
        // The SCT names the first key's log: refused on the id.
        assert!(matches!(
            other.verify_sct(&sct(), &entry()),
            Err(VerifyError::LogIdMismatch { .. })
        ));
    }

    #[test]
    fn unsupported_algorithms_are_refused_by_name() {
        // Go's sigTestCertSCTSignatureUnsupportedSignatureAlgorithm ("0402": sha256/dsa) and
        // ...UnsupportedHashAlgorithm ("0303": sha224/ecdsa).
        for (encoded, hash_algorithm, signature_algorithm) in [
            ("04020000", HashAlgorithm::Sha256, SignatureAlgorithm::Dsa),
            ("03030000", HashAlgorithm::Sha224, SignatureAlgorithm::Ecdsa),
        ] {
            let sct = SignedCertificateTimestamp {
                signature: DigitallySigned::decode(&hex(encoded)).unwrap(),
                ..sct()
            };
            assert_eq!(
                verifier().verify_sct(&sct, &entry()),
                Err(VerifyError::AlgorithmMismatch {
                    expected_hash: HashAlgorithm::Sha256,
                    expected_signature: SignatureAlgorithm::Ecdsa,
                    found_hash: hash_algorithm,
                    found_signature: signature_algorithm,
                })
            );
        }
    }
}

mod go_testdata_log {
    use super::*;

    /// `test/testdata/ct-server-key-public.pem`.
    const LOG_PUBLIC_KEY_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEmXg8sUUzwBYaWrRb+V0IopzQ6o3U
yEJ04r5ZrRXGdpYM8K+hB0pXrGRLI0eeWz+3skXrS0IO83AhA3GpRL6s6w==
-----END PUBLIC KEY-----
";

    /// The test CA (`ca-cert.pem`).
    const CA_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
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
OwqULg==
-----END CERTIFICATE-----
";

    /// `test-cert.pem`, a leaf issued by the test CA.
    const TEST_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIICyjCCAjOgAwIBAgIBBjANBgkqhkiG9w0BAQUFADBVMQswCQYDVQQGEwJHQjEk
MCIGA1UEChMbQ2VydGlmaWNhdGUgVHJhbnNwYXJlbmN5IENBMQ4wDAYDVQQIEwVX
YWxlczEQMA4GA1UEBxMHRXJ3IFdlbjAeFw0xMjA2MDEwMDAwMDBaFw0yMjA2MDEw
MDAwMDBaMFIxCzAJBgNVBAYTAkdCMSEwHwYDVQQKExhDZXJ0aWZpY2F0ZSBUcmFu
c3BhcmVuY3kxDjAMBgNVBAgTBVdhbGVzMRAwDgYDVQQHEwdFcncgV2VuMIGfMA0G
CSqGSIb3DQEBAQUAA4GNADCBiQKBgQCx+jeTYRH4eS2iCBw/5BklAIUx3H8sZXvZ
4d5HBBYLTJ8Z1UraRHBATBxRNBuPH3U43d0o2aykg2n8VkbdzHYX+BaKrltB1DMx
/KLa38gE1XIIlJBh+e75AspHzojGROAA8G7uzKvcndL2iiLMsJ3Hbg28c1J3ZbGj
eoxnYlPcwQIDAQABo4GsMIGpMB0GA1UdDgQWBBRqDZgqO2LES20u9Om7egGqnLeY
4jB9BgNVHSMEdjB0gBRfnYgNyHPmVNT4DdjmsMEktEfDVaFZpFcwVTELMAkGA1UE
BhMCR0IxJDAiBgNVBAoTG0NlcnRpZmljYXRlIFRyYW5zcGFyZW5jeSBDQTEOMAwG
A1UECBMFV2FsZXMxEDAOBgNVBAcTB0VydyBXZW6CAQAwCQYDVR0TBAIwADANBgkq
hkiG9w0BAQUFAAOBgQAXHNhKrEFKmgMPIqrI9oiwgbJwm4SLTlURQGzXB/7QKFl6
n678Lu4peNYzqqwU7TI1GX2ofg9xuIdfGsnniygXSd3t0Afj7PUGRfjL9mclbNah
ZHteEyA7uFgt59Zpb2VtHGC5X0Vrf88zhXGQjxxpcn0kxPzNJJKVeVgU0drA5g==
-----END CERTIFICATE-----
";

    /// `test-embedded-pre-cert.pem`'s precertificate: poison extension, issued by the test CA.
    const TEST_PRECERT_PEM: &str = "-----BEGIN CERTIFICATE-----
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
kGzKLC0+6/yBmWTr2M98CIY/vg==
-----END CERTIFICATE-----
";

    /// `test-cert.proof`: the TLS-encoded SCT for `test-cert.pem`.
    const TEST_CERT_PROOF: &str = concat!(
        "00df1c2ec11500945247a96168325ddc5c7959e8f7c6d388fc002e0bbd3f74d7",
        "640000013ddb27ded900000403004730450220606e10ae5c2d5a1b0aed49dc49",
        "37f48de71a4e9784e9c208dfbfe9ef536cf7f2022100beb29c72d7d06d61d06b",
        "db38a069469aa86fe12e18bb7cc45689a2c0187ef5a5",
    );
    /// The TLS-encoded SCT for the precertificate.
    const TEST_PRECERT_PROOF: &str = concat!(
        "00df1c2ec11500945247a96168325ddc5c7959e8f7c6d388fc002e0bbd3f74d7",
        "640000013ddb27df9300000403004730450220482f6751af35dba65436be1fd6",
        "640f3dbf9a41429495924530288fa3e5e23e06022100e4edc0db3ac572b1e2f5",
        "e8ab6a680653987dcf41027dfeffa105519d89edbf08",
    );
    const TEST_CERT_LEAF_HASH_B64: &str = "BKZLZGMbAnDW0gQWjNJNCyS2IgweWn76YW3tFlu3AuY=";
    const TEST_PRECERT_LEAF_HASH_B64: &str = "mbk+d5FDW3oNZJCbOi828rqC3hf+qhigTWVGcXEZq1U=";

    /// RFC 6962 §3.1 precertificate poison extension.
    const POISON_OID: &str = "1.3.6.1.4.1.11129.2.4.3";

    fn verifier() -> LogVerifier {
        LogVerifier::from_public_key_pem(LOG_PUBLIC_KEY_PEM).unwrap()
    }

    /// The precert `LogEntry` built the RFC 6962 way: the TBSCertificate without the poison
    /// extension, and the hash of the issuing CA's SubjectPublicKeyInfo.
    fn precert_entry() -> LogEntry {
        let precert = x509_cert::Certificate::from_der(&pem_body(TEST_PRECERT_PEM)).unwrap();
        let ca = x509_cert::Certificate::from_der(&pem_body(CA_CERT_PEM)).unwrap();
        let poison = der::asn1::ObjectIdentifier::new_unwrap(POISON_OID);
        let mut tbs = precert.tbs_certificate.clone();
        let extensions = tbs.extensions.as_mut().unwrap();
        let before = extensions.len();
        extensions.retain(|extension| extension.extn_id != poison);
        assert_eq!(extensions.len(), before - 1, "the poison was present once");
        LogEntry::Precert {
            issuer_key_hash: sha256(&ca.tbs_certificate.subject_public_key_info.to_der().unwrap()),
            tbs_certificate: tbs.to_der().unwrap(),
        }
    }

    #[test]
    fn the_proofs_decode_as_v1_scts_from_the_test_log_and_re_encode_identically() {
        for proof in [TEST_CERT_PROOF, TEST_PRECERT_PROOF] {
            let bytes = hex(proof);
            let sct = SignedCertificateTimestamp::decode(&bytes).unwrap();
            assert_eq!(sct.version, Version::V1);
            assert_eq!(sct.log_id, verifier().log_id());
            assert!(sct.extensions.is_empty());
            assert_eq!(sct.signature.hash_algorithm, HashAlgorithm::Sha256);
            assert_eq!(sct.signature.signature_algorithm, SignatureAlgorithm::Ecdsa);
            assert_eq!(sct.encode().unwrap(), bytes);
        }
        let sct = SignedCertificateTimestamp::decode(&hex(TEST_CERT_PROOF)).unwrap();
        assert_eq!(sct.timestamp_ms, 0x013d_db27_ded9);
    }

    #[test]
    fn the_certificate_sct_verifies_and_its_leaf_hash_matches() {
        let sct = SignedCertificateTimestamp::decode(&hex(TEST_CERT_PROOF)).unwrap();
        let entry = LogEntry::X509 {
            certificate: pem_body(TEST_CERT_PEM),
        };
        verifier().verify_sct(&sct, &entry).unwrap();

        let input = leaf_input(sct.timestamp_ms, &entry, &sct.extensions).unwrap();
        assert_eq!(STANDARD.encode(leaf_hash(&input)), TEST_CERT_LEAF_HASH_B64);
        let leaf = MerkleTreeLeaf::decode(&input).unwrap();
        assert_eq!(leaf.timestamped_entry.entry, entry);
        assert_eq!(leaf.timestamped_entry.timestamp_ms, sct.timestamp_ms);
    }

    #[test]
    fn the_precertificate_sct_verifies_and_its_leaf_hash_matches() {
        let sct = SignedCertificateTimestamp::decode(&hex(TEST_PRECERT_PROOF)).unwrap();
        let entry = precert_entry();
        verifier().verify_sct(&sct, &entry).unwrap();

        let input = leaf_input(sct.timestamp_ms, &entry, &sct.extensions).unwrap();
        assert_eq!(
            STANDARD.encode(leaf_hash(&input)),
            TEST_PRECERT_LEAF_HASH_B64
        );
        assert_eq!(
            MerkleTreeLeaf::decode(&input).unwrap().encode().unwrap(),
            input
        );
    }

    #[test]
    fn the_precertificate_sct_does_not_verify_as_an_x509_entry() {
        let sct = SignedCertificateTimestamp::decode(&hex(TEST_PRECERT_PROOF)).unwrap();
        let whole_precert = LogEntry::X509 {
            certificate: pem_body(TEST_PRECERT_PEM),
        };
        assert_eq!(
            verifier().verify_sct(&sct, &whole_precert),
            Err(VerifyError::BadSignature)
        );
    }
}

mod google_argon2018 {
    use super::*;

    /// Google "Argon2018" log key (`ct.googleapis.com/logs/argon2018`).
    const ARGON2018_PUBLIC_KEY_B64: &str = concat!(
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE0gBVBa3VR7QZu82V+ynXWD14JM3ORp3",
        "7MtRxTmACJV5ZPtfUA7htQ2hofuigZQs+bnFZkje+qejxoyvk2Q1VaA==",
    );

    /// A get-sth body for the STH Argon2018 served at tree size 170761442, written out by hand.
    const GET_STH_JSON: &str = r#"{
        "tree_size": 170761442,
        "timestamp": 1526202484196,
        "sha256_root_hash": "7IXxX5gNLhKS4vANtkO0gPAqx9YRra17IJfzMJM2AiQ=",
        "tree_head_signature": "BAMARjBEAiBktm+l47z01OLaAAwUtDGNr+xzjJJRG5aNBcx3fBxxBQIgTlC/Ck3cSLuK23N+/7BQxv4xfQbF1RH7pG/6S3N6Z4U="
    }"#;

    fn verifier() -> LogVerifier {
        LogVerifier::from_public_key_der(&STANDARD.decode(ARGON2018_PUBLIC_KEY_B64).unwrap())
            .unwrap()
    }

    #[test]
    fn the_log_id_is_the_published_one() {
        // Argon2018's log id as published in Google's log list.
        assert_eq!(
            STANDARD.encode(verifier().log_id()),
            "pFASaQVaFVReYhGrN7wQP2KuVXakXksXFEU+GyIQaiU="
        );
    }

    #[test]
    fn a_real_sct_decodes_field_by_field_and_re_encodes_identically() {
        let bytes = STANDARD
            .decode(concat!(
                "AKRQEmkFWhVUXmIRqze8ED9irlV2pF5LFxRFPhsiEGolAAABYXV31yUAAAQDAEcwRQIgIFztN",
                "JNfxaRdUWEwPRWwD5S2GfvijTgvPbVC2wBHOLkCIQCYr3u/5yXhKCOkj4Jm79DK3YouXxzpOg",
                "S45xjWB6SJOg==",
            ))
            .unwrap();
        let signature = STANDARD
            .decode(concat!(
                "BAMARzBFAiAgXO00k1/FpF1RYTA9FbAPlLYZ++KNOC89tULbAEc4uQIhAJive7/nJeEoI6SPg",
                "mbv0Mrdii5fHOk6BLjnGNYHpIk6",
            ))
            .unwrap();
        let sct = SignedCertificateTimestamp::decode(&bytes).unwrap();
        assert_eq!(sct.version, Version::V1);
        assert_eq!(sct.log_id, verifier().log_id());
        assert_eq!(sct.timestamp_ms, 1_518_094_243_621);
        assert!(sct.extensions.is_empty());
        assert_eq!(sct.signature, DigitallySigned::decode(&signature).unwrap());
        assert_eq!(sct.encode().unwrap(), bytes);
    }

    #[test]
    fn a_real_get_sth_body_parses_and_verifies() {
        let response: GetSthResponse = serde_json::from_str(GET_STH_JSON).unwrap();
        let sth = SignedTreeHead::try_from(&response).unwrap();
        assert_eq!(sth.tree_size, 170_761_442);
        assert_eq!(sth.timestamp_ms, 1_526_202_484_196);
        verifier().verify_sth(&sth).unwrap();

        let shrunk = SignedTreeHead {
            tree_size: sth.tree_size - 1,
            ..sth.clone()
        };
        assert_eq!(
            verifier().verify_sth(&shrunk),
            Err(VerifyError::BadSignature)
        );

        // And back: the same JSON fields, the same base64.
        let back = GetSthResponse::try_from(&sth).unwrap();
        assert_eq!(back, response);
        let value: serde_json::Value = serde_json::to_value(&back).unwrap();
        let original: serde_json::Value = serde_json::from_str(GET_STH_JSON).unwrap();
        assert_eq!(value, original);
    }
}
