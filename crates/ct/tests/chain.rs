//! The add-chain / add-pre-chain checks on chains generated with rcgen: what is accepted, what
//! the log stores, and that every refusal names the certificate at fault.

use certus_ct::chain::{
    AcceptedRoots, ChainError, ChainLimits, CheckedChain, RootError, check_chain, check_pre_chain,
    precert_tbs_certificate,
};
use certus_ct::{LogEntry, sha256};
use der::{Decode, Encode};
use proptest::prelude::*;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    PKCS_ECDSA_P384_SHA384, PKCS_ED25519, PKCS_RSA_SHA256, SerialNumber, SignatureAlgorithm,
    date_time_ymd,
};
use x509_cert::{Certificate, TbsCertificate};

const POISON: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 3];
const CT_EKU: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 4];
const SCT_LIST: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 2];
const POISON_DOTTED: &str = "1.3.6.1.4.1.11129.2.4.3";
const SCT_LIST_DOTTED: &str = "1.3.6.1.4.1.11129.2.4.2";
const AKI_DOTTED: &str = "2.5.29.35";
/// Two extensions of no meaning placed around the poison, to see that order survives.
const MARKER_A: &[u64] = &[1, 3, 6, 1, 4, 1, 55555, 1];
const MARKER_B: &[u64] = &[1, 3, 6, 1, 4, 1, 55555, 2];

/// A 2048-bit RSA key made for these tests only (ring cannot generate RSA keys).
const RSA_TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC30XteVv780VQK
ceOpv/J/lRy4h7HcoLmgmcuiKb0A3fpk4WsWKEuuYyHIkSmlzk0OaXHvE+gkpwqB
zy44+5/10BRiwFFatz6dh5vscc9zGbEbJlCiC+d72QLtgWyPLROXpAJI7U1r+Xtp
QNOP8wFs/yxQHWOBaNtk+ub3ksD3rZrHqhnq73qmRPav4eagc9TxknMrbHwP09/f
rEs1YzYGnNObl7rO1/ALe8BWYbtkrQXIEL7jeQj2Xa8GcjDD6Embtk6VZA0hsPNI
CNpEfgNcvNF5xKWq1UogIjMgaAMmKeUqkedyrHFtBQqz1kXqKnFX1PwanMpR1Mim
HvqF/vXfAgMBAAECggEAAZYcXdx4nYTx3fUHBtI8TQaSdZBSO2ieajjoHAjBLguZ
eHg6GfRaEn1vhrQYMSWJ3p0yze3mR2SEYo9oZjatWPTfcZ7puqUC11930xDKBDgk
lo22gZ1T3iTj5hQDdFSwNo1nTI27AC8kgaaf5A+kUhlakvUnbS/7tF62gO94P39O
WuGUCUMjlI37f24CPxxb4CsLCCVSmD38K0O0mh811Svx9UrtS4KBl0Bnr1jzZtvn
HoGK042VI+qPHi9+DSuqJ7ewyYviTHNAvOTAIqdRNYESbg8pxIzHLa9gzresKRB/
wZe+GIxK40fRW1rglbR3ABWjCDBN/O6WyPrDE0CFqQKBgQDcKzvLBnYlV/g1fko/
t5dghVSC4tovLWcUUc531r3W6mcSLMh4NHgCq6uJ+lHBh8uyXh7g+0ThMbYBpY4v
nxUpUO1PApr+iWEeOiXkBJK6S3XVbTHf76c3h8q3H4CZu0gC+Gej090clASPA3Wo
iTUZPeDaKnoIeA5u58C7GO1feQKBgQDVu8uGPxrJFwfe0ZJI5RbuhCT0KzI8NgA5
5uz3ePutvCtJVrU8W02Xcbbk5X7rsPYS+g2SxPs+MbV3giZUfzXlytg9yMFZqV1j
NvpM05lMms87z0hvaOz6AWg8HqRle8iY5BvMM6u6BGbg6o6amu756aVdSkgpqXQE
zfEZdgPyFwKBgQCAHOwrJHRlIH4+6mDcGMGOGadmjgh1wU6k5UFmPF+1Ciq1ybdR
Mv7OVwR3QmCGY7Vk8h23vp6DB4EoDiThkwkmRIACJLr5+Ai6JQ3dU8fpfXVwnpyR
+QrtZifQTRVw3yh1CgSMsQCN25eXfGTfkA+Ew5vudx8RhIKpiFN+y298yQKBgQCb
OSP6f2IIoP1KSZGf9yDMYJQl8CkvqVhItPlsUSUXbA1T2fENwJF9Z0yYuEOREJfl
+ExbR0vgQ2GzRYZo32pZVRPu6xng8CuunoLxwMsY42WV3liQ8PcKKnN1Fhv2yAtL
Xn8BspUJJ6E/v5mJlvPv9EvwkL4P480qoBZ1k0wSSQKBgCVL59d09uDcYVJ5ahQ/
YA5ZzshzZBgNfPLeNbTz2Q5GGkRI2sMvrm30uIy/trUV2/SR5jRskhuwtwBSbWtM
UcBWJbet7eiRO4lbindUuTSccKknCXqxSC4wgmZne0uLHmlfwd99huM0OilJanSG
CBIZ9Vi3l3gl3fK+BhTqG6Pu
-----END PRIVATE KEY-----
";

// ---------------------------------------------------------------------------------------------
// Building test PKIs

fn dn(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Certus Test");
    name.push(DnType::CommonName, common_name);
    name
}

fn key(alg: &'static SignatureAlgorithm) -> KeyPair {
    if alg == &PKCS_RSA_SHA256 {
        KeyPair::from_pkcs8_pem_and_sign_algo(RSA_TEST_KEY, alg).expect("RSA test key")
    } else {
        KeyPair::generate_for(alg).expect("key generation")
    }
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.use_authority_key_identifier_extension = true;
    params
}

/// A certificate with its key and the parameters it was made from, able to issue others.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

impl Ca {
    fn root(common_name: &str, alg: &'static SignatureAlgorithm) -> Self {
        let params = ca_params(common_name);
        let key = key(alg);
        let der = params.self_signed(&key).expect("self-sign").der().to_vec();
        Self { params, key, der }
    }

    /// A certificate this one issues from `params`, for `key`.
    fn issue(&self, params: &CertificateParams, key: &KeyPair) -> Vec<u8> {
        let issuer = Issuer::from_params(&self.params, &self.key);
        params.signed_by(key, &issuer).expect("sign").der().to_vec()
    }

    /// A subordinate issuer made from `params` with a fresh `alg` key.
    fn subordinate(&self, params: CertificateParams, alg: &'static SignatureAlgorithm) -> Ca {
        let key = key(alg);
        let der = self.issue(&params, &key);
        Ca { params, key, der }
    }

    fn intermediate(&self, common_name: &str, alg: &'static SignatureAlgorithm) -> Ca {
        self.subordinate(ca_params(common_name), alg)
    }

    /// A Precertificate Signing Certificate (RFC 6962 §3.1) this CA certifies.
    fn precert_signer(&self, alg: &'static SignatureAlgorithm, with_aki: bool) -> Ca {
        let mut params = ca_params("Precertificate Signing");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(CT_EKU.to_vec())];
        params.use_authority_key_identifier_extension = with_aki;
        self.subordinate(params, alg)
    }
}

fn leaf_params(dns_name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(vec![dns_name.to_string()]).expect("SAN");
    params.distinguished_name = dn(dns_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(SerialNumber::from_slice(&[0x42, 0x17, 0x01]));
    params.not_before = date_time_ymd(2025, 1, 1);
    params.not_after = date_time_ymd(2025, 4, 1);
    params
}

fn extension(oid: &[u64], critical: bool, content: Vec<u8>) -> CustomExtension {
    let mut ext = CustomExtension::from_oid_content(oid, content);
    ext.set_criticality(critical);
    ext
}

/// The leaf's parameters with `middle` between two marker extensions (the poison for a
/// precertificate, the SCT list for the final certificate).
fn with_middle_extension(
    mut params: CertificateParams,
    middle: CustomExtension,
) -> CertificateParams {
    params.custom_extensions = vec![
        extension(MARKER_A, false, vec![0x0c, 0x01, b'a']),
        middle,
        extension(MARKER_B, false, vec![0x0c, 0x01, b'b']),
    ];
    params
}

fn poison(critical: bool, value: &[u8]) -> CustomExtension {
    extension(POISON, critical, value.to_vec())
}

fn precert_params(dns_name: &str) -> CertificateParams {
    with_middle_extension(leaf_params(dns_name), poison(true, &[0x05, 0x00]))
}

/// The final certificate's parameters: the precertificate's with an SCT list in the poison's
/// place (the content does not matter here, only that it is removed again).
fn final_params(dns_name: &str) -> CertificateParams {
    let sct_list = vec![0x04, 0x04, 0x00, 0x02, 0x00, 0x00];
    with_middle_extension(leaf_params(dns_name), extension(SCT_LIST, false, sct_list))
}

/// Root → intermediate, with the root accepted.
struct Pki {
    root: Ca,
    intermediate: Ca,
    roots: AcceptedRoots,
}

fn pki(alg: &'static SignatureAlgorithm) -> Pki {
    let root = Ca::root("Test Root", alg);
    let intermediate = root.intermediate("Test Intermediate", alg);
    let roots = AcceptedRoots::from_der([root.der.clone()]).expect("root parses");
    Pki {
        root,
        intermediate,
        roots,
    }
}

impl Pki {
    fn leaf(&self) -> Vec<u8> {
        self.intermediate
            .issue(&leaf_params("leaf.example"), &key(&PKCS_ECDSA_P256_SHA256))
    }

    fn precert(&self) -> Vec<u8> {
        self.intermediate.issue(
            &precert_params("pre.example"),
            &key(&PKCS_ECDSA_P256_SHA256),
        )
    }
}

fn limits() -> ChainLimits {
    ChainLimits::default()
}

fn tbs_of(der: &[u8]) -> TbsCertificate {
    Certificate::from_der(der)
        .expect("certificate")
        .tbs_certificate
}

fn spki_der(cert_der: &[u8]) -> Vec<u8> {
    tbs_of(cert_der)
        .subject_public_key_info
        .to_der()
        .expect("encode SPKI")
}

fn extension_oids(tbs: &TbsCertificate) -> Vec<String> {
    tbs.extensions
        .iter()
        .flatten()
        .map(|ext| ext.extn_id.to_string())
        .collect()
}

fn without_extension(mut tbs: TbsCertificate, dotted: &str) -> TbsCertificate {
    let mut extensions = tbs.extensions.take().unwrap_or_default();
    let before = extensions.len();
    extensions.retain(|ext| ext.extn_id.to_string() != dotted);
    assert_eq!(
        before - extensions.len(),
        1,
        "exactly one {dotted} extension to remove"
    );
    tbs.extensions = (!extensions.is_empty()).then_some(extensions);
    tbs
}

fn precert_entry(checked: &CheckedChain) -> (&[u8; 32], &[u8]) {
    match &checked.entry {
        LogEntry::Precert {
            issuer_key_hash,
            tbs_certificate,
        } => (issuer_key_hash, tbs_certificate),
        other => panic!("expected a precert entry, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// add-chain: accepted chains and what is stored

#[test]
fn valid_chain_without_root_is_accepted_and_the_root_appended() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let leaf = pki.leaf();
    let checked = check_chain(
        &[leaf.clone(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .expect("valid chain");
    assert_eq!(checked.entry, LogEntry::X509 { certificate: leaf });
    assert_eq!(
        checked.chain,
        vec![pki.intermediate.der.clone(), pki.root.der.clone()]
    );
}

#[test]
fn valid_chain_ending_in_the_root_is_accepted_as_is() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let leaf = pki.leaf();
    let submitted = vec![
        leaf.clone(),
        pki.intermediate.der.clone(),
        pki.root.der.clone(),
    ];
    let checked = check_chain(&submitted, &pki.roots, &limits()).expect("valid chain");
    assert_eq!(checked.entry, LogEntry::X509 { certificate: leaf });
    assert_eq!(
        checked.chain,
        submitted[1..].to_vec(),
        "root not appended twice"
    );
}

#[test]
fn leaf_issued_directly_by_an_accepted_root_is_accepted() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let leaf = pki.root.issue(
        &leaf_params("direct.example"),
        &key(&PKCS_ECDSA_P256_SHA256),
    );
    let checked = check_chain(&[leaf], &pki.roots, &limits()).expect("valid chain");
    assert_eq!(checked.chain, vec![pki.root.der.clone()]);
}

#[test]
fn p384_ed25519_and_rsa_chains_are_accepted() {
    for alg in [&PKCS_ECDSA_P384_SHA384, &PKCS_ED25519, &PKCS_RSA_SHA256] {
        let pki = pki(alg);
        let leaf = pki
            .intermediate
            .issue(&leaf_params("alg.example"), &key(alg));
        let checked = check_chain(&[leaf, pki.intermediate.der.clone()], &pki.roots, &limits());
        assert!(checked.is_ok(), "{alg:?}: {checked:?}");
    }
}

#[test]
fn mixed_algorithm_chain_is_accepted() {
    // RSA root → P-384 intermediate → Ed25519-signed leaf with a P-256 key.
    let root = Ca::root("RSA Root", &PKCS_RSA_SHA256);
    let intermediate = root.intermediate("P-384 Intermediate", &PKCS_ECDSA_P384_SHA384);
    let ed_intermediate = intermediate.intermediate("Ed25519 Intermediate", &PKCS_ED25519);
    let leaf = ed_intermediate.issue(&leaf_params("mixed.example"), &key(&PKCS_ECDSA_P256_SHA256));
    let roots = AcceptedRoots::from_der([root.der.clone()]).unwrap();
    let checked = check_chain(
        &[leaf, ed_intermediate.der.clone(), intermediate.der.clone()],
        &roots,
        &limits(),
    )
    .expect("mixed chain");
    assert_eq!(checked.chain.len(), 3);
    assert_eq!(checked.chain[2], root.der);
}

#[test]
fn root_is_found_among_roots_sharing_its_name() {
    // Two roots with the same name and different keys (a re-keyed root): the one whose key
    // verifies is appended.
    let old = Ca::root("Test Root", &PKCS_ECDSA_P256_SHA256);
    let new = Ca::root("Test Root", &PKCS_ECDSA_P256_SHA256);
    let intermediate = new.intermediate("Test Intermediate", &PKCS_ECDSA_P256_SHA256);
    let roots = AcceptedRoots::from_der([old.der.clone(), new.der.clone()]).unwrap();
    let checked = check_chain(
        &[
            intermediate.issue(&leaf_params("x.example"), &key(&PKCS_ECDSA_P256_SHA256)),
            intermediate.der.clone(),
        ],
        &roots,
        &limits(),
    )
    .expect("valid chain");
    assert_eq!(checked.chain.last(), Some(&new.der));
}

// ---------------------------------------------------------------------------------------------
// add-chain: refusals

#[test]
fn chain_to_a_root_not_accepted_is_rejected_naming_the_last_issuer() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let other =
        AcceptedRoots::from_der([Ca::root("Other Root", &PKCS_ECDSA_P256_SHA256).der]).unwrap();
    let err = check_chain(
        &[pki.leaf(), pki.intermediate.der.clone()],
        &other,
        &limits(),
    )
    .unwrap_err();
    assert!(matches!(err, ChainError::NoAcceptedRoot { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with("chain does not lead to an accepted root (last issuer: "),
        "{message}"
    );
    assert!(message.contains("CN=Test Root"), "{message}");

    // Submitting the unaccepted root itself does not help.
    let err = check_chain(
        &[
            pki.leaf(),
            pki.intermediate.der.clone(),
            pki.root.der.clone(),
        ],
        &other,
        &limits(),
    )
    .unwrap_err();
    assert!(matches!(err, ChainError::NoAcceptedRoot { .. }), "{err:?}");
}

#[test]
fn chain_signed_by_an_impostor_of_an_accepted_root_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let impostor = Ca::root("Test Root", &PKCS_ECDSA_P256_SHA256);
    let intermediate = impostor.intermediate("Test Intermediate", &PKCS_ECDSA_P256_SHA256);
    let leaf = intermediate.issue(&leaf_params("evil.example"), &key(&PKCS_ECDSA_P256_SHA256));
    let err = check_chain(&[leaf, intermediate.der.clone()], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(err, ChainError::NotSignedByRoot { index: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("CN=Test Root"), "{err}");
}

#[test]
fn chain_in_the_wrong_order_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let err = check_chain(
        &[pki.intermediate.der.clone(), pki.leaf()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::IssuerMismatch {
                index: 0,
                next: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("leaf first"), "{err}");
}

#[test]
fn chain_missing_an_intermediate_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let err = check_chain(&[pki.leaf(), pki.root.der.clone()], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::IssuerMismatch {
                index: 0,
                next: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn tampered_leaf_signature_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut leaf = pki.leaf();
    // The signature BIT STRING ends the certificate; its last byte is inside the ECDSA `s`.
    *leaf.last_mut().unwrap() ^= 0x01;
    let err =
        check_chain(&[leaf, pki.intermediate.der.clone()], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::BadSignature {
                index: 0,
                issuer_index: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("certificate 0 is not signed by certificate 1"),
        "{err}"
    );
}

#[test]
fn tampered_leaf_content_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut leaf = pki.leaf();
    let at = leaf
        .windows(b"leaf.example".len())
        .position(|w| w == b"leaf.example")
        .unwrap();
    leaf[at] = b'l' ^ 0x20; // "Leaf.example": still parses, no longer what was signed
    let err =
        check_chain(&[leaf, pki.intermediate.der.clone()], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::BadSignature {
                index: 0,
                issuer_index: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn tampered_intermediate_signature_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut intermediate = pki.intermediate.der.clone();
    *intermediate.last_mut().unwrap() ^= 0x01;
    let err = check_chain(
        &[pki.leaf(), intermediate, pki.root.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ChainError::BadSignature {
                index: 1,
                issuer_index: 2,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn non_ca_intermediate_is_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    for is_ca in [IsCa::NoCa, IsCa::ExplicitNoCa] {
        let mut params = ca_params("Not A CA");
        params.is_ca = is_ca;
        let not_ca = pki
            .intermediate
            .subordinate(params, &PKCS_ECDSA_P256_SHA256);
        let leaf = not_ca.issue(&leaf_params("x.example"), &key(&PKCS_ECDSA_P256_SHA256));
        let err = check_chain(
            &[leaf, not_ca.der.clone(), pki.intermediate.der.clone()],
            &pki.roots,
            &limits(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            ChainError::NotACa {
                index: 1,
                issued: 0
            },
            "{is_ca:?}"
        );
    }
}

#[test]
fn precert_signing_certificate_is_not_exempt_from_the_ca_check_in_add_chain() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut params = ca_params("Precertificate Signing");
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(CT_EKU.to_vec())];
    let signer = pki
        .intermediate
        .subordinate(params, &PKCS_ECDSA_P256_SHA256);
    let leaf = signer.issue(&leaf_params("x.example"), &key(&PKCS_ECDSA_P256_SHA256));
    let err = check_chain(
        &[leaf, signer.der.clone(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert_eq!(
        err,
        ChainError::NotACa {
            index: 1,
            issued: 0
        }
    );
}

#[test]
fn empty_too_long_and_too_large_chains_are_rejected() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    assert_eq!(
        check_chain(&[], &pki.roots, &limits()).unwrap_err(),
        ChainError::EmptyChain
    );
    assert_eq!(
        check_pre_chain(&[], &pki.roots, &limits()).unwrap_err(),
        ChainError::EmptyChain
    );

    let chain = vec![
        pki.leaf(),
        pki.intermediate.der.clone(),
        pki.root.der.clone(),
    ];
    let two = ChainLimits {
        max_certificates: 2,
        ..limits()
    };
    assert_eq!(
        check_chain(&chain, &pki.roots, &two).unwrap_err(),
        ChainError::TooManyCertificates { count: 3, max: 2 }
    );
    assert!(
        check_chain(&chain[..2], &pki.roots, &two).is_ok(),
        "the limit itself is allowed"
    );

    let small = ChainLimits {
        max_certificate_bytes: pki.intermediate.der.len() - 1,
        ..limits()
    };
    let err = check_chain(&chain, &pki.roots, &small).unwrap_err();
    let ChainError::CertificateTooLarge { index, size, max } = err else {
        panic!("{err:?}");
    };
    // The leaf (with its SAN and EKU) or the intermediate, whichever is first over the limit.
    assert!(
        size > max && index < 2,
        "index {index} size {size} max {max}"
    );
    assert_eq!(size, chain[index].len());

    let default = ChainLimits::default();
    assert_eq!(default.max_certificates, 10);
    assert_eq!(default.max_certificate_bytes, 64 * 1024);
    let huge = vec![0x30; 64 * 1024 + 1];
    assert!(matches!(
        check_chain(&[huge], &pki.roots, &default).unwrap_err(),
        ChainError::CertificateTooLarge {
            index: 0,
            size: 65537,
            max: 65536
        }
    ));
}

#[test]
fn garbage_is_rejected_with_its_index() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let err = check_chain(
        &[pki.leaf(), b"not a certificate".to_vec()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ChainError::Unparsable { index: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("certificate 1 does not parse as X.509: "),
        "{err}"
    );

    // A certificate followed by trailing bytes is not DER either.
    let mut trailing = pki.leaf();
    trailing.push(0);
    let err = check_chain(&[trailing], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(err, ChainError::Unparsable { index: 0, .. }),
        "{err:?}"
    );

    // Truncated.
    let leaf = pki.leaf();
    let err = check_chain(&[leaf[..leaf.len() - 10].to_vec()], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(err, ChainError::Unparsable { index: 0, .. }),
        "{err:?}"
    );
}

#[test]
fn outer_and_inner_signature_algorithms_must_agree() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut leaf = pki.leaf();
    // ecdsa-with-SHA256 is 1.2.840.10045.4.3.2; its last occurrence is the outer
    // signatureAlgorithm. Make it ecdsa-with-SHA384 (…4.3.3).
    let oid = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    let at = leaf.windows(oid.len()).rposition(|w| w == oid).unwrap();
    leaf[at + oid.len() - 1] = 0x03;
    let err =
        check_chain(&[leaf, pki.intermediate.der.clone()], &pki.roots, &limits()).unwrap_err();
    assert!(
        matches!(err, ChainError::SignatureAlgorithmMismatch { index: 0, .. }),
        "{err:?}"
    );
}

#[test]
fn add_chain_refuses_a_precertificate() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let err = check_chain(
        &[pki.precert(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert_eq!(err, ChainError::PrecertificateOnAddChain);
    assert_eq!(
        err.to_string(),
        "add-chain got a precertificate (poison extension present); use add-pre-chain"
    );
    // Even a malformed poison marks it as a precertificate.
    let leaf = pki.intermediate.issue(
        &with_middle_extension(leaf_params("x.example"), poison(false, &[0x05, 0x00])),
        &key(&PKCS_ECDSA_P256_SHA256),
    );
    assert_eq!(
        check_chain(&[leaf, pki.intermediate.der.clone()], &pki.roots, &limits()).unwrap_err(),
        ChainError::PrecertificateOnAddChain
    );
}

#[test]
fn every_error_is_a_bad_request() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let errors = [
        check_chain(&[], &pki.roots, &limits()).unwrap_err(),
        check_chain(&[vec![1, 2, 3]], &pki.roots, &limits()).unwrap_err(),
        check_pre_chain(&[pki.leaf()], &pki.roots, &limits()).unwrap_err(),
    ];
    for err in errors {
        assert_eq!(err.http_status(), 400, "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// add-pre-chain

#[test]
fn precertificate_signed_by_the_final_issuer_is_logged_without_its_poison() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let leaf_key = key(&PKCS_ECDSA_P256_SHA256);
    let precert = pki
        .intermediate
        .issue(&precert_params("pre.example"), &leaf_key);
    let checked = check_pre_chain(
        &[precert.clone(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .expect("valid pre-chain");

    assert_eq!(
        checked.chain,
        vec![
            precert.clone(),
            pki.intermediate.der.clone(),
            pki.root.der.clone()
        ],
        "extra_data: the precertificate, then its chain up to the appended root"
    );
    let (issuer_key_hash, tbs) = precert_entry(&checked);
    assert_eq!(*issuer_key_hash, sha256(&spki_der(&pki.intermediate.der)));

    // It parses as a TBSCertificate, and is the precertificate's minus exactly the poison.
    let logged = TbsCertificate::from_der(tbs).expect("logged TBS parses");
    let original = tbs_of(&precert);
    assert_eq!(logged, without_extension(original.clone(), POISON_DOTTED));
    let mut expected_order = extension_oids(&original);
    expected_order.retain(|oid| oid != POISON_DOTTED);
    assert_eq!(extension_oids(&logged), expected_order);
    assert!(expected_order.len() >= 6, "{expected_order:?}");
    assert_eq!(logged.issuer, original.issuer);

    // Byte for byte what the final certificate minus its SCT list will be.
    let final_cert = pki
        .intermediate
        .issue(&final_params("pre.example"), &leaf_key);
    let final_tbs = without_extension(tbs_of(&final_cert), SCT_LIST_DOTTED);
    assert_eq!(tbs, final_tbs.to_der().unwrap().as_slice());

    // The public helper gives the same bytes.
    assert_eq!(precert_tbs_certificate(&precert, None).unwrap(), tbs);
}

#[test]
fn precertificate_with_a_root_at_the_end_is_accepted_and_the_root_not_repeated() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let precert = pki.precert();
    let submitted = vec![precert, pki.intermediate.der.clone(), pki.root.der.clone()];
    let checked = check_pre_chain(&submitted, &pki.roots, &limits()).expect("valid");
    assert_eq!(checked.chain, submitted);
}

#[test]
fn precertificate_from_a_precert_signing_certificate_is_rewritten_to_the_final_issuer() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let signer = pki
        .intermediate
        .precert_signer(&PKCS_ECDSA_P256_SHA256, true);
    let leaf_key = key(&PKCS_ECDSA_P256_SHA256);
    let precert = signer.issue(&precert_params("pre.example"), &leaf_key);
    let checked = check_pre_chain(
        &[
            precert.clone(),
            signer.der.clone(),
            pki.intermediate.der.clone(),
        ],
        &pki.roots,
        &limits(),
    )
    .expect("valid pre-chain");
    assert_eq!(
        checked.chain,
        vec![
            precert.clone(),
            signer.der.clone(),
            pki.intermediate.der.clone(),
            pki.root.der.clone()
        ]
    );

    let (issuer_key_hash, tbs) = precert_entry(&checked);
    // The key of chain[2], the CA that will issue the final certificate.
    assert_eq!(*issuer_key_hash, sha256(&spki_der(&pki.intermediate.der)));
    assert_ne!(*issuer_key_hash, sha256(&spki_der(&signer.der)));

    let logged = TbsCertificate::from_der(tbs).unwrap();
    let original = tbs_of(&precert);
    let signer_tbs = tbs_of(&signer.der);
    let intermediate_tbs = tbs_of(&pki.intermediate.der);
    // Issuer: the signing certificate's issuer, i.e. the intermediate.
    assert_ne!(original.issuer, intermediate_tbs.subject);
    assert_eq!(logged.issuer, signer_tbs.issuer);
    assert_eq!(logged.issuer, intermediate_tbs.subject);
    // AKI: the signing certificate's AKI (which identifies the intermediate's key), in place.
    let aki = |tbs: &TbsCertificate| {
        tbs.extensions
            .iter()
            .flatten()
            .find(|ext| ext.extn_id.to_string() == AKI_DOTTED)
            .cloned()
            .expect("AKI present")
    };
    assert_ne!(aki(&original).extn_value, aki(&signer_tbs).extn_value);
    assert_eq!(aki(&logged).extn_value, aki(&signer_tbs).extn_value);
    assert_eq!(aki(&logged).critical, aki(&original).critical);
    // Everything else: the precertificate's, minus the poison, in order.
    let mut expected = without_extension(original, POISON_DOTTED);
    expected.issuer = signer_tbs.issuer.clone();
    for ext in expected.extensions.iter_mut().flatten() {
        if ext.extn_id.to_string() == AKI_DOTTED {
            ext.extn_value = aki(&signer_tbs).extn_value;
        }
    }
    assert_eq!(logged, expected);

    // Byte for byte the TBSCertificate of the final certificate the intermediate issues,
    // minus its SCT list.
    let final_cert = pki
        .intermediate
        .issue(&final_params("pre.example"), &leaf_key);
    let final_tbs = without_extension(tbs_of(&final_cert), SCT_LIST_DOTTED);
    assert_eq!(tbs, final_tbs.to_der().unwrap().as_slice());

    assert_eq!(
        precert_tbs_certificate(&precert, Some(&signer.der)).unwrap(),
        tbs
    );
}

#[test]
fn precert_signing_certificate_directly_under_the_root_gets_the_root_appended() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let signer = pki.root.precert_signer(&PKCS_ECDSA_P256_SHA256, true);
    let precert = signer.issue(
        &precert_params("pre.example"),
        &key(&PKCS_ECDSA_P256_SHA256),
    );
    let checked =
        check_pre_chain(&[precert, signer.der.clone()], &pki.roots, &limits()).expect("valid");
    let (issuer_key_hash, tbs) = precert_entry(&checked);
    assert_eq!(*issuer_key_hash, sha256(&spki_der(&pki.root.der)));
    assert_eq!(
        TbsCertificate::from_der(tbs).unwrap().issuer,
        tbs_of(&pki.root.der).subject
    );
    assert_eq!(checked.chain.last(), Some(&pki.root.der));
}

#[test]
fn precert_signing_certificate_need_not_be_a_ca() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut params = ca_params("Precertificate Signing");
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(CT_EKU.to_vec())];
    let signer = pki
        .intermediate
        .subordinate(params, &PKCS_ECDSA_P256_SHA256);
    let precert = signer.issue(
        &precert_params("pre.example"),
        &key(&PKCS_ECDSA_P256_SHA256),
    );
    let checked = check_pre_chain(
        &[precert, signer.der.clone(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    );
    assert!(checked.is_ok(), "{checked:?}");
}

#[test]
fn precert_signing_certificate_without_aki_cannot_rewrite_an_aki() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let signer = pki
        .intermediate
        .precert_signer(&PKCS_ECDSA_P256_SHA256, false);
    let precert = signer.issue(
        &precert_params("pre.example"),
        &key(&PKCS_ECDSA_P256_SHA256),
    );
    let chain = [
        precert.clone(),
        signer.der.clone(),
        pki.intermediate.der.clone(),
    ];
    assert_eq!(
        check_pre_chain(&chain, &pki.roots, &limits()).unwrap_err(),
        ChainError::SigningCertificateWithoutAki
    );

    // Without an AKI in the precertificate there is nothing to change, and none is added.
    let mut params = precert_params("pre.example");
    params.use_authority_key_identifier_extension = false;
    let precert = signer.issue(&params, &key(&PKCS_ECDSA_P256_SHA256));
    let checked = check_pre_chain(
        &[precert, signer.der.clone(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .expect("nothing to rewrite");
    let (_, tbs) = precert_entry(&checked);
    let logged = TbsCertificate::from_der(tbs).unwrap();
    assert!(!extension_oids(&logged).contains(&AKI_DOTTED.to_string()));
    assert_eq!(logged.issuer, tbs_of(&pki.intermediate.der).subject);
}

#[test]
fn add_pre_chain_refuses_a_plain_certificate() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let err = check_pre_chain(
        &[pki.leaf(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert_eq!(err, ChainError::NotAPrecertificate);
    assert!(err.to_string().contains("use add-chain"), "{err}");
    assert_eq!(
        precert_tbs_certificate(&pki.leaf(), None).unwrap_err(),
        ChainError::NotAPrecertificate
    );
}

#[test]
fn add_pre_chain_refuses_a_malformed_poison() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let cases: [(CustomExtension, &str); 3] = [
        (poison(false, &[0x05, 0x00]), "not marked critical"),
        (poison(true, &[0x04, 0x00]), "not ASN.1 NULL"),
        (poison(true, &[0x05, 0x01, 0x00]), "not ASN.1 NULL"),
    ];
    for (ext, why) in cases {
        let precert = pki.intermediate.issue(
            &with_middle_extension(leaf_params("pre.example"), ext),
            &key(&PKCS_ECDSA_P256_SHA256),
        );
        let err = check_pre_chain(
            &[precert, pki.intermediate.der.clone()],
            &pki.roots,
            &limits(),
        )
        .unwrap_err();
        assert!(matches!(err, ChainError::MalformedPoison { .. }), "{err:?}");
        assert!(err.to_string().contains(why), "{err}");
    }

    // Twice.
    let mut params = precert_params("pre.example");
    params.custom_extensions.push(poison(true, &[0x05, 0x00]));
    let precert = pki
        .intermediate
        .issue(&params, &key(&PKCS_ECDSA_P256_SHA256));
    let err = check_pre_chain(
        &[precert, pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("more than once"), "{err}");
}

#[test]
fn only_the_first_certificate_may_be_a_precertificate() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut params = ca_params("Poisoned Intermediate");
    params.custom_extensions = vec![poison(true, &[0x05, 0x00])];
    let poisoned = pki
        .intermediate
        .subordinate(params, &PKCS_ECDSA_P256_SHA256);
    let precert = poisoned.issue(
        &precert_params("pre.example"),
        &key(&PKCS_ECDSA_P256_SHA256),
    );
    let err = check_pre_chain(
        &[precert, poisoned.der.clone(), pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert_eq!(err, ChainError::PoisonedIssuer { index: 1 });
}

#[test]
fn precertificate_chain_signature_and_root_checks_apply() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut precert = pki.precert();
    *precert.last_mut().unwrap() ^= 0x01;
    let err = check_pre_chain(
        &[precert, pki.intermediate.der.clone()],
        &pki.roots,
        &limits(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ChainError::BadSignature { index: 0, .. }),
        "{err:?}"
    );

    let err = check_pre_chain(
        &[pki.precert(), pki.intermediate.der.clone()],
        &AcceptedRoots::new(),
        &limits(),
    )
    .unwrap_err();
    assert!(matches!(err, ChainError::NoAcceptedRoot { .. }), "{err:?}");
}

#[test]
fn precert_tbs_helper_checks_the_signing_certificate_eku() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let precert = pki.precert();
    assert_eq!(
        precert_tbs_certificate(&precert, Some(&pki.intermediate.der)).unwrap_err(),
        ChainError::NotAPrecertificateSigningCertificate
    );
    assert!(matches!(
        precert_tbs_certificate(b"junk", None).unwrap_err(),
        ChainError::Unparsable { index: 0, .. }
    ));
}

#[test]
fn precertificate_whose_only_extension_is_the_poison_logs_no_extensions() {
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut params = CertificateParams::default();
    params.distinguished_name = dn("bare.example");
    params.custom_extensions = vec![poison(true, &[0x05, 0x00])];
    let precert = pki
        .intermediate
        .issue(&params, &key(&PKCS_ECDSA_P256_SHA256));
    assert_eq!(
        extension_oids(&tbs_of(&precert)),
        vec![POISON_DOTTED.to_string()]
    );
    let tbs = precert_tbs_certificate(&precert, None).unwrap();
    assert_eq!(TbsCertificate::from_der(&tbs).unwrap().extensions, None);
}

// ---------------------------------------------------------------------------------------------
// Accepted roots

#[test]
fn accepted_roots_are_deduplicated_in_insertion_order() {
    let a = Ca::root("Root A", &PKCS_ECDSA_P256_SHA256);
    let b = Ca::root("Root B", &PKCS_ED25519);
    let c = Ca::root("Root C", &PKCS_ECDSA_P384_SHA384);
    let mut roots = AcceptedRoots::from_der([b.der.clone(), a.der.clone(), b.der.clone()]).unwrap();
    assert_eq!(roots.certificates(), &[b.der.clone(), a.der.clone()]);
    assert_eq!(roots.len(), 2);
    assert!(roots.contains(&a.der) && roots.contains(&b.der) && !roots.contains(&c.der));
    assert!(roots.add(c.der.clone()).unwrap());
    assert!(!roots.add(a.der.clone()).unwrap());
    assert_eq!(
        roots.certificates(),
        &[b.der.clone(), a.der.clone(), c.der.clone()]
    );
    assert!(AcceptedRoots::new().is_empty());
}

#[test]
fn accepted_roots_come_from_a_pem_bundle() {
    let a = Ca::root("Root A", &PKCS_ECDSA_P256_SHA256);
    let b = Ca::root("Root B", &PKCS_RSA_SHA256);
    let pem = |der: &[u8]| {
        let encoded = {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(der)
        };
        let lines: Vec<&str> = encoded
            .as_bytes()
            .chunks(64)
            .map(|chunk| std::str::from_utf8(chunk).unwrap())
            .collect();
        format!(
            "-----BEGIN CERTIFICATE-----\r\n{}\r\n-----END CERTIFICATE-----\r\n",
            lines.join("\r\n")
        )
    };
    let bundle = format!(
        "# Issuer: CN=Root A\n{}\n# Issuer: CN=Root B\n{}{}",
        pem(&a.der),
        pem(&b.der),
        pem(&a.der)
    );
    let roots = AcceptedRoots::from_pem(&bundle).expect("bundle parses");
    assert_eq!(roots.certificates(), &[a.der.clone(), b.der.clone()]);
    assert!(format!("{roots:?}").contains("CN=Root B"));

    assert_eq!(
        AcceptedRoots::from_pem("# nothing here\n").unwrap_err(),
        RootError::EmptyBundle
    );
    let key_block = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    let err = AcceptedRoots::from_pem(&format!("{}{key_block}", pem(&a.der))).unwrap_err();
    assert!(matches!(err, RootError::Pem { block: 1, .. }), "{err:?}");
    let err =
        AcceptedRoots::from_pem("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----")
            .unwrap_err();
    assert!(matches!(err, RootError::Pem { block: 0, .. }), "{err:?}");
    let err = AcceptedRoots::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap_err();
    assert!(matches!(err, RootError::Pem { block: 0, .. }), "{err:?}");
}

#[test]
fn a_root_that_does_not_parse_is_an_error() {
    let a = Ca::root("Root A", &PKCS_ECDSA_P256_SHA256);
    let err =
        AcceptedRoots::from_der([a.der.clone(), vec![0x30, 0x03, 0x02, 0x01, 0x00]]).unwrap_err();
    assert!(
        matches!(err, RootError::Unparsable { index: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("accepted root 1 does not parse as X.509"),
        "{err}"
    );
    // Valid base64, not a certificate.
    let err =
        AcceptedRoots::from_pem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----")
            .unwrap_err();
    assert!(
        matches!(err, RootError::Unparsable { index: 0, .. }),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Robustness

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes never pass, and never panic, wherever they are in the chain.
    #[test]
    fn arbitrary_bytes_are_rejected(bytes in proptest::collection::vec(any::<u8>(), 0..600), at_leaf in any::<bool>()) {
        let pki = pki(&PKCS_ECDSA_P256_SHA256);
        let chain = if at_leaf {
            vec![bytes]
        } else {
            vec![pki.leaf(), bytes]
        };
        prop_assert!(check_chain(&chain, &pki.roots, &limits()).is_err());
        prop_assert!(check_pre_chain(&chain, &pki.roots, &limits()).is_err());
    }

    /// Flipping any one bit of a valid leaf makes the chain fail (or, for a bit in a part the
    /// parser ignores, still names the same leaf: there is none in DER).
    #[test]
    fn any_bit_flip_in_the_leaf_is_caught(position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let pki = pki(&PKCS_ECDSA_P256_SHA256);
        let mut leaf = pki.leaf();
        let at = position.index(leaf.len());
        leaf[at] ^= 1 << bit;
        prop_assert!(check_chain(&[leaf, pki.intermediate.der.clone()], &pki.roots, &limits()).is_err());
    }
}

#[test]
fn non_canonical_precertificate_is_refused_rather_than_logged_altered() {
    // An extension whose `critical` is encoded explicitly as FALSE: BER, not DER (DER omits a
    // DEFAULT value). The parser accepts it but re-encodes it without, so the logged TBS would
    // not be the one the CA signed: refused instead.
    let pki = pki(&PKCS_ECDSA_P256_SHA256);
    let mut params = precert_params("pre.example");
    params.custom_extensions[0].set_criticality(true);
    let mut precert = pki
        .intermediate
        .issue(&params, &key(&PKCS_ECDSA_P256_SHA256));
    let critical_marker = [0x01, 0x01, 0xff, 0x04, 0x03, 0x0c, 0x01, b'a'];
    let at = precert
        .windows(critical_marker.len())
        .position(|w| w == critical_marker)
        .expect("marker extension");
    precert[at + 2] = 0x00;
    assert_eq!(
        precert_tbs_certificate(&precert, None).unwrap_err(),
        ChainError::NonCanonicalTbs { index: 0 }
    );
}
