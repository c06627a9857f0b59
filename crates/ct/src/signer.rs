//! Signers and verifiers.
//!
//! A log signs two things: SCTs (its promise to include an entry) and STHs (its commitment to
//! a tree). [`Signer`] produces both; [`LogVerifier`] is what a CT client, an auditor or a
//! mirror holds — only the log's public key — to check them.
//!
//! Production logs sign with ECDSA P-256 / SHA-256 ([`EcdsaP256Signer`]), which every CT client
//! accepts. ECDSA draws a fresh random nonce per signature, which a deterministic simulation
//! cannot replay, so the simulation signs with Ed25519 ([`Ed25519Signer`]), whose signatures
//! are a pure function of key and message.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _};
use thiserror::Error;

use crate::structures::tls::EncodeError;
use crate::structures::{
    DigitallySigned, HashAlgorithm, SignatureAlgorithm, SignedCertificateTimestamp, SignedTreeHead,
    Version, sct_signature_input, sth_signature_input,
};
use crate::{Hash, LogEntry, sha256};

/// DER SubjectPublicKeyInfo up to the key bytes for an ECDSA P-256 key: SEQUENCE {
/// SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING (0 unused bits) }. The uncompressed
/// point (0x04 || X || Y, 65 bytes) follows.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, // SEQUENCE, 89 bytes
    0x30, 0x13, // SEQUENCE, 19 bytes
    0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, // 1.2.840.10045.2.1 id-ecPublicKey
    0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, // 1.2.840.10045.3.1.7 P-256
    0x03, 0x42, 0x00, // BIT STRING, 66 bytes, 0 unused bits
];
const P256_POINT_LEN: usize = 65;

/// DER SubjectPublicKeyInfo up to the key bytes for an Ed25519 key (RFC 8410 §4): SEQUENCE {
/// SEQUENCE { id-Ed25519 }, BIT STRING }. The 32-byte public key follows.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, // SEQUENCE, 42 bytes
    0x30, 0x05, // SEQUENCE, 5 bytes
    0x06, 0x03, 0x2b, 0x65, 0x70, // 1.3.101.112 id-Ed25519
    0x03, 0x21, 0x00, // BIT STRING, 33 bytes, 0 unused bits
];
const ED25519_PUBLIC_KEY_LEN: usize = 32;

/// PEM label of an unencrypted PKCS#8 private key (RFC 7468 §10).
const PKCS8_PEM_LABEL: &str = "PRIVATE KEY";
/// PEM label of a SubjectPublicKeyInfo (RFC 7468 §13).
const SPKI_PEM_LABEL: &str = "PUBLIC KEY";

/// Why a signature could not be made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SignError {
    /// The cryptographic library refused (for ECDSA: the system random source failed).
    #[error("signing failed in the cryptographic library")]
    Crypto,
    /// The structure to sign has no TLS encoding (a field over its RFC length bound).
    #[error("cannot encode the structure to sign: {0}")]
    Encode(#[from] EncodeError),
}

/// Why a key could not be loaded or made.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum KeyError {
    /// The PEM text has no block with the expected label.
    #[error("no PEM block labelled {expected:?} found{hint}", hint = pem_hint(found.as_deref()))]
    PemLabel {
        /// The label that was expected.
        expected: &'static str,
        /// The label of the first block found instead, if any.
        found: Option<String>,
    },
    /// The PEM block has no END line or its body is not base64.
    #[error("malformed PEM: {0}")]
    PemMalformed(String),
    /// ring rejected the key (wrong algorithm or curve, inconsistent public key, bad DER).
    #[error("key rejected: {0}")]
    Rejected(String),
    /// The public key is neither ECDSA P-256 with an uncompressed point nor Ed25519.
    #[error(
        "unsupported public key: expected a DER SubjectPublicKeyInfo for ECDSA P-256 \
         (id-ecPublicKey, prime256v1, uncompressed point) or Ed25519"
    )]
    UnsupportedPublicKey,
    /// The system random source failed while generating a key.
    #[error("key generation failed")]
    Generate,
}

fn pem_hint(found: Option<&str>) -> String {
    match found {
        Some("EC PRIVATE KEY") => " (found a SEC1 \"EC PRIVATE KEY\"; convert it with \
                                   `openssl pkcs8 -topk8 -nocrypt`)"
            .to_string(),
        Some("ENCRYPTED PRIVATE KEY") => {
            " (found an encrypted key; decrypt it with `openssl pkcs8 -nocrypt`)".to_string()
        }
        Some(other) => format!(" (found {other:?})"),
        None => String::new(),
    }
}

/// Why a signature did not verify.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VerifyError {
    /// The signature names algorithms other than the ones this log's key uses.
    #[error(
        "signature algorithm mismatch: the signature says {found_hash:?}/{found_signature:?} \
         but this log's key signs with {expected_hash:?}/{expected_signature:?}"
    )]
    AlgorithmMismatch {
        /// Hash algorithm the key uses.
        expected_hash: HashAlgorithm,
        /// Signature algorithm the key uses.
        expected_signature: SignatureAlgorithm,
        /// Hash algorithm named in the signature.
        found_hash: HashAlgorithm,
        /// Signature algorithm named in the signature.
        found_signature: SignatureAlgorithm,
    },
    /// The SCT names a different log.
    #[error("the SCT is from log {found} but this verifier holds the key of log {expected}")]
    LogIdMismatch {
        /// This verifier's log id, base64.
        expected: String,
        /// The SCT's log id, base64.
        found: String,
    },
    /// The signature is not a valid signature of these bytes under this key.
    #[error("the signature does not verify under this log's public key")]
    BadSignature,
    /// The signed structure has no TLS encoding.
    #[error("cannot encode the signed structure: {0}")]
    Encode(#[from] EncodeError),
}

/// Something that signs as a CT log: one key, one log id.
pub trait Signer: Send + Sync + fmt::Debug {
    /// Signs `message`, returning the `digitally-signed` struct with its algorithms named.
    fn sign(&self, message: &[u8]) -> Result<DigitallySigned, SignError>;

    /// The public key, DER SubjectPublicKeyInfo: what get-roots clients and log lists carry.
    fn public_key_der(&self) -> &[u8];

    /// The log id: SHA-256 of [`Signer::public_key_der`] (RFC 6962 §3.2).
    fn log_id(&self) -> Hash {
        sha256(self.public_key_der())
    }

    /// A v1 SCT for `entry` at `timestamp_ms`.
    fn sign_sct(
        &self,
        timestamp_ms: u64,
        entry: &LogEntry,
        extensions: &[u8],
    ) -> Result<SignedCertificateTimestamp, SignError> {
        let input = sct_signature_input(timestamp_ms, entry, extensions)?;
        Ok(SignedCertificateTimestamp {
            version: Version::V1,
            log_id: self.log_id(),
            timestamp_ms,
            extensions: extensions.to_vec(),
            signature: self.sign(&input)?,
        })
    }

    /// An STH over the first `tree_size` entries with root `sha256_root_hash`.
    fn sign_sth(
        &self,
        tree_size: u64,
        timestamp_ms: u64,
        sha256_root_hash: &Hash,
    ) -> Result<SignedTreeHead, SignError> {
        let input = sth_signature_input(tree_size, timestamp_ms, sha256_root_hash);
        Ok(SignedTreeHead {
            tree_size,
            timestamp_ms,
            sha256_root_hash: *sha256_root_hash,
            tree_head_signature: self.sign(&input)?,
        })
    }
}

/// The production signer: ECDSA on P-256 with SHA-256, the signature DER-encoded as RFC 6962
/// requires.
pub struct EcdsaP256Signer {
    key_pair: EcdsaKeyPair,
    rng: SystemRandom,
    public_key_der: Vec<u8>,
    log_id: Hash,
}

impl EcdsaP256Signer {
    /// Loads an unencrypted PKCS#8 DER private key for P-256.
    pub fn from_pkcs8_der(pkcs8: &[u8]) -> Result<Self, KeyError> {
        let rng = SystemRandom::new();
        let key_pair =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, &rng)
                .map_err(|rejected| KeyError::Rejected(rejected.to_string()))?;
        let public_key_der = [&P256_SPKI_PREFIX[..], key_pair.public_key().as_ref()].concat();
        let log_id = sha256(&public_key_der);
        Ok(Self {
            key_pair,
            rng,
            public_key_der,
            log_id,
        })
    }

    /// Loads a PEM `-----BEGIN PRIVATE KEY-----` block, as `openssl genpkey -algorithm EC
    /// -pkeyopt ec_paramgen_curve:P-256` writes it.
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        Self::from_pkcs8_der(&pem_decode(pem, PKCS8_PEM_LABEL)?)
    }

    /// A fresh P-256 private key, PKCS#8 DER, for an operator starting without one.
    pub fn generate_pkcs8() -> Result<Vec<u8>, KeyError> {
        let document = EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &SystemRandom::new(),
        )
        .map_err(|_| KeyError::Generate)?;
        Ok(document.as_ref().to_vec())
    }

    /// A fresh P-256 private key as a PEM `PRIVATE KEY` block that openssl can read.
    pub fn generate_pkcs8_pem() -> Result<String, KeyError> {
        Ok(pem_encode(PKCS8_PEM_LABEL, &Self::generate_pkcs8()?))
    }
}

impl Signer for EcdsaP256Signer {
    fn sign(&self, message: &[u8]) -> Result<DigitallySigned, SignError> {
        let signature = self
            .key_pair
            .sign(&self.rng, message)
            .map_err(|_| SignError::Crypto)?;
        Ok(DigitallySigned {
            hash_algorithm: HashAlgorithm::Sha256,
            signature_algorithm: SignatureAlgorithm::Ecdsa,
            signature: signature.as_ref().to_vec(),
        })
    }

    fn public_key_der(&self) -> &[u8] {
        &self.public_key_der
    }

    fn log_id(&self) -> Hash {
        self.log_id
    }
}

impl fmt::Debug for EcdsaP256Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the private key.
        f.debug_struct("EcdsaP256Signer")
            .field("log_id", &STANDARD.encode(self.log_id))
            .finish_non_exhaustive()
    }
}

/// The simulation signer: Ed25519 (RFC 8032), deterministic, so a replayed seed produces
/// byte-identical SCTs and STHs. Its `digitally-signed` names `Intrinsic`/`ed25519` (8/7, RFC
/// 8422): Ed25519 hashes internally. Not for production: RFC 6962 clients expect ECDSA or RSA.
pub struct Ed25519Signer {
    key_pair: Ed25519KeyPair,
    public_key_der: Vec<u8>,
    log_id: Hash,
}

impl Ed25519Signer {
    /// The key pair whose private key is `seed` (RFC 8032 §5.1.5).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let key_pair = Ed25519KeyPair::from_seed_unchecked(&seed)
            .expect("ring accepts every 32-byte Ed25519 seed");
        let public_key_der = [&ED25519_SPKI_PREFIX[..], key_pair.public_key().as_ref()].concat();
        let log_id = sha256(&public_key_der);
        Self {
            key_pair,
            public_key_der,
            log_id,
        }
    }
}

impl Signer for Ed25519Signer {
    fn sign(&self, message: &[u8]) -> Result<DigitallySigned, SignError> {
        Ok(DigitallySigned {
            hash_algorithm: HashAlgorithm::Intrinsic,
            signature_algorithm: SignatureAlgorithm::Ed25519,
            signature: self.key_pair.sign(message).as_ref().to_vec(),
        })
    }

    fn public_key_der(&self) -> &[u8] {
        &self.public_key_der
    }

    fn log_id(&self) -> Hash {
        self.log_id
    }
}

impl fmt::Debug for Ed25519Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519Signer")
            .field("log_id", &STANDARD.encode(self.log_id))
            .finish_non_exhaustive()
    }
}

/// Which kind of key a [`LogVerifier`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    EcdsaP256,
    Ed25519,
}

impl KeyKind {
    fn algorithms(self) -> (HashAlgorithm, SignatureAlgorithm) {
        match self {
            KeyKind::EcdsaP256 => (HashAlgorithm::Sha256, SignatureAlgorithm::Ecdsa),
            KeyKind::Ed25519 => (HashAlgorithm::Intrinsic, SignatureAlgorithm::Ed25519),
        }
    }

    fn verification_algorithm(self) -> &'static dyn signature::VerificationAlgorithm {
        match self {
            KeyKind::EcdsaP256 => &signature::ECDSA_P256_SHA256_ASN1,
            KeyKind::Ed25519 => &signature::ED25519,
        }
    }
}

/// A log's public key, for checking its SCTs and STHs.
#[derive(Clone, PartialEq, Eq)]
pub struct LogVerifier {
    kind: KeyKind,
    public_key_der: Vec<u8>,
    /// Offset of the raw key bytes (the EC point, or the Ed25519 key) in `public_key_der`.
    key_offset: usize,
    log_id: Hash,
}

impl LogVerifier {
    /// Accepts a DER SubjectPublicKeyInfo for ECDSA P-256 (uncompressed point) or Ed25519.
    pub fn from_public_key_der(der: &[u8]) -> Result<Self, KeyError> {
        let kind = if der.len() == P256_SPKI_PREFIX.len() + P256_POINT_LEN
            && der.starts_with(&P256_SPKI_PREFIX)
            && der[P256_SPKI_PREFIX.len()] == 0x04
        {
            KeyKind::EcdsaP256
        } else if der.len() == ED25519_SPKI_PREFIX.len() + ED25519_PUBLIC_KEY_LEN
            && der.starts_with(&ED25519_SPKI_PREFIX)
        {
            KeyKind::Ed25519
        } else {
            return Err(KeyError::UnsupportedPublicKey);
        };
        let key_offset = match kind {
            KeyKind::EcdsaP256 => P256_SPKI_PREFIX.len(),
            KeyKind::Ed25519 => ED25519_SPKI_PREFIX.len(),
        };
        Ok(Self {
            kind,
            public_key_der: der.to_vec(),
            key_offset,
            log_id: sha256(der),
        })
    }

    /// Accepts a PEM `-----BEGIN PUBLIC KEY-----` block, as log lists and `openssl pkey
    /// -pubout` give it.
    pub fn from_public_key_pem(pem: &str) -> Result<Self, KeyError> {
        Self::from_public_key_der(&pem_decode(pem, SPKI_PEM_LABEL)?)
    }

    /// The verifier for `signer`'s key.
    pub fn for_signer(signer: &dyn Signer) -> Result<Self, KeyError> {
        Self::from_public_key_der(signer.public_key_der())
    }

    /// The log id: SHA-256 of the public key DER.
    pub fn log_id(&self) -> Hash {
        self.log_id
    }

    /// The public key, DER SubjectPublicKeyInfo.
    pub fn public_key_der(&self) -> &[u8] {
        &self.public_key_der
    }

    /// The algorithms this key signs with, as `digitally-signed` names them.
    pub fn algorithms(&self) -> (HashAlgorithm, SignatureAlgorithm) {
        self.kind.algorithms()
    }

    /// Checks `signed` over `message`: the named algorithms must be this key's, then the
    /// signature must verify.
    pub fn verify(&self, message: &[u8], signed: &DigitallySigned) -> Result<(), VerifyError> {
        let (expected_hash, expected_signature) = self.kind.algorithms();
        if signed.hash_algorithm != expected_hash
            || signed.signature_algorithm != expected_signature
        {
            return Err(VerifyError::AlgorithmMismatch {
                expected_hash,
                expected_signature,
                found_hash: signed.hash_algorithm,
                found_signature: signed.signature_algorithm,
            });
        }
        let key = signature::UnparsedPublicKey::new(
            self.kind.verification_algorithm(),
            &self.public_key_der[self.key_offset..],
        );
        key.verify(message, &signed.signature)
            .map_err(|_| VerifyError::BadSignature)
    }

    /// Checks that `sct` is this log's signature over `entry`.
    pub fn verify_sct(
        &self,
        sct: &SignedCertificateTimestamp,
        entry: &LogEntry,
    ) -> Result<(), VerifyError> {
        if sct.log_id != self.log_id {
            return Err(VerifyError::LogIdMismatch {
                expected: STANDARD.encode(self.log_id),
                found: STANDARD.encode(sct.log_id),
            });
        }
        self.verify(&sct.signature_input(entry)?, &sct.signature)
    }

    /// Checks that `sth` is this log's signature over its tree size, timestamp and root.
    pub fn verify_sth(&self, sth: &SignedTreeHead) -> Result<(), VerifyError> {
        self.verify(&sth.signature_input(), &sth.tree_head_signature)
    }
}

impl fmt::Debug for LogVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogVerifier")
            .field("kind", &self.kind)
            .field("log_id", &STANDARD.encode(self.log_id))
            .finish_non_exhaustive()
    }
}

/// The DER inside the first PEM block labelled `label` (RFC 7468). Other blocks before it (an
/// `EC PARAMETERS` block, say) are skipped.
fn pem_decode(pem: &str, label: &'static str) -> Result<Vec<u8>, KeyError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut lines = pem.lines().map(str::trim);
    let mut first_other_label = None;
    loop {
        let Some(line) = lines.next() else {
            return Err(KeyError::PemLabel {
                expected: label,
                found: first_other_label,
            });
        };
        if line == begin {
            break;
        }
        if first_other_label.is_none() {
            first_other_label = line
                .strip_prefix("-----BEGIN ")
                .and_then(|rest| rest.strip_suffix("-----"))
                .map(str::to_string);
        }
    }
    let mut body = String::new();
    for line in lines {
        if line == end {
            return STANDARD
                .decode(body.as_bytes())
                .map_err(|error| KeyError::PemMalformed(format!("{label} body: {error}")));
        }
        body.push_str(line);
    }
    Err(KeyError::PemMalformed(format!("no {end:?} line")))
}

/// A PEM block of `der` labelled `label`, 64 base64 characters a line.
fn pem_encode(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for chunk in body.as_bytes().chunks(64) {
        // Base64 output is ASCII, so every chunk is valid UTF-8.
        pem.push_str(&String::from_utf8_lossy(chunk));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made for these tests with `openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256` (OpenSSL 3.0); not used anywhere else.
    const OPENSSL_P256_PKCS8_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgArec8239nDwC8VxE
HfzFkxsu13C6UQzz+zL54BkTYOuhRANCAAStGqfEBJeULs7PKmantMauJAy3fc9e
Q76zND9RZyWEk+hnchGhXEsrNBNl/G3rYrgvV8jBjWmDgW2DPz2tar3b
-----END PRIVATE KEY-----
";
    /// `openssl pkey -in key.pem -pubout` for the key above.
    const OPENSSL_P256_SPKI_PEM: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErRqnxASXlC7Ozypmp7TGriQMt33P
XkO+szQ/UWclhJPoZ3IRoVxLKzQTZfxt62K4L1fIwY1pg4Ftgz89rWq92w==
-----END PUBLIC KEY-----
";

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    fn x509_entry() -> LogEntry {
        LogEntry::X509 {
            certificate: b"a certificate".to_vec(),
        }
    }

    fn precert_entry() -> LogEntry {
        LogEntry::Precert {
            issuer_key_hash: [7; 32],
            tbs_certificate: b"a tbs certificate".to_vec(),
        }
    }

    fn signers() -> Vec<Box<dyn Signer>> {
        vec![
            Box::new(EcdsaP256Signer::from_pkcs8_pem(OPENSSL_P256_PKCS8_PEM).unwrap()),
            Box::new(Ed25519Signer::from_seed([42; 32])),
        ]
    }

    #[test]
    fn ecdsa_spki_matches_what_openssl_writes() {
        let signer = EcdsaP256Signer::from_pkcs8_pem(OPENSSL_P256_PKCS8_PEM).unwrap();
        let openssl_spki = pem_decode(OPENSSL_P256_SPKI_PEM, "PUBLIC KEY").unwrap();
        assert_eq!(signer.public_key_der(), openssl_spki.as_slice());
        assert!(openssl_spki.starts_with(&P256_SPKI_PREFIX));
        assert_eq!(signer.log_id(), sha256(&openssl_spki));
    }

    #[test]
    fn ed25519_spki_matches_what_openssl_writes() {
        // `openssl genpkey -algorithm ED25519`: the PKCS#8 seed and `pkey -pubout` DER.
        let seed: [u8; 32] =
            hex("4ff19d33248e3dce1d8296173940ad2aa6cf03ccff83ec091bb2ece0e5c3cb77")
                .try_into()
                .unwrap();
        let openssl_spki = hex(
            "302a300506032b6570032100cffaa3ccb0c9ddc0688dab7742738deb9b3c5d8bfa91630ec3030ce647dea7e0",
        );
        let signer = Ed25519Signer::from_seed(seed);
        assert_eq!(signer.public_key_der(), openssl_spki.as_slice());
        assert_eq!(signer.log_id(), sha256(&openssl_spki));
    }

    #[test]
    fn ed25519_matches_rfc_8032_test_vector_1() {
        // RFC 8032 §7.1, TEST 1: the empty message.
        let seed: [u8; 32] =
            hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .try_into()
                .unwrap();
        let signer = Ed25519Signer::from_seed(seed);
        assert_eq!(
            &signer.public_key_der()[ED25519_SPKI_PREFIX.len()..],
            hex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a").as_slice()
        );
        let signed = signer.sign(b"").unwrap();
        assert_eq!(
            signed.signature,
            hex(concat!(
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555",
                "fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
            ))
        );
        assert_eq!(signed.hash_algorithm, HashAlgorithm::Intrinsic);
        assert_eq!(signed.signature_algorithm, SignatureAlgorithm::Ed25519);
    }

    #[test]
    fn ed25519_from_the_same_seed_signs_identically() {
        let a = Ed25519Signer::from_seed([9; 32]);
        let b = Ed25519Signer::from_seed([9; 32]);
        let root = [3u8; 32];
        assert_eq!(a.sign_sth(10, 1000, &root), b.sign_sth(10, 1000, &root));
        assert_eq!(
            a.sign_sct(1000, &x509_entry(), &[]).unwrap(),
            b.sign_sct(1000, &x509_entry(), &[]).unwrap()
        );
        assert_eq!(a.log_id(), b.log_id());
        let other = Ed25519Signer::from_seed([10; 32]);
        assert_ne!(a.log_id(), other.log_id());
        assert_ne!(
            a.sign_sth(10, 1000, &root).unwrap().tree_head_signature,
            other.sign_sth(10, 1000, &root).unwrap().tree_head_signature
        );
    }

    #[test]
    fn ecdsa_signatures_are_der_and_name_sha256_ecdsa() {
        let signer = EcdsaP256Signer::from_pkcs8_pem(OPENSSL_P256_PKCS8_PEM).unwrap();
        let signed = signer.sign(b"message").unwrap();
        assert_eq!(signed.hash_algorithm, HashAlgorithm::Sha256);
        assert_eq!(signed.signature_algorithm, SignatureAlgorithm::Ecdsa);
        assert_eq!(signed.signature[0], 0x30, "a DER SEQUENCE");
        assert_eq!(usize::from(signed.signature[1]), signed.signature.len() - 2);
        assert!((70..=72).contains(&signed.signature.len()));
    }

    #[test]
    fn log_id_is_the_sha256_of_the_spki() {
        for signer in signers() {
            assert_eq!(signer.log_id(), sha256(signer.public_key_der()));
            let verifier = LogVerifier::for_signer(signer.as_ref()).unwrap();
            assert_eq!(verifier.log_id(), signer.log_id());
            let sct = signer.sign_sct(1, &x509_entry(), &[]).unwrap();
            assert_eq!(sct.log_id, signer.log_id());
        }
    }

    #[test]
    fn scts_verify_and_any_change_breaks_them() {
        for signer in signers() {
            let verifier = LogVerifier::for_signer(signer.as_ref()).unwrap();
            for entry in [x509_entry(), precert_entry()] {
                let sct = signer.sign_sct(1_700_000_000_000, &entry, &[]).unwrap();
                verifier.verify_sct(&sct, &entry).unwrap();

                // Round trip through the TLS encoding keeps it valid.
                let decoded = SignedCertificateTimestamp::decode(&sct.encode().unwrap()).unwrap();
                verifier.verify_sct(&decoded, &entry).unwrap();

                let later = SignedCertificateTimestamp {
                    timestamp_ms: sct.timestamp_ms + 1,
                    ..sct.clone()
                };
                assert_eq!(
                    verifier.verify_sct(&later, &entry),
                    Err(VerifyError::BadSignature)
                );
                let with_extensions = SignedCertificateTimestamp {
                    extensions: vec![0],
                    ..sct.clone()
                };
                assert_eq!(
                    verifier.verify_sct(&with_extensions, &entry),
                    Err(VerifyError::BadSignature)
                );
                let other_entry = match &entry {
                    LogEntry::X509 { .. } => LogEntry::X509 {
                        certificate: b"another certificate".to_vec(),
                    },
                    LogEntry::Precert {
                        tbs_certificate, ..
                    } => LogEntry::Precert {
                        issuer_key_hash: [8; 32],
                        tbs_certificate: tbs_certificate.clone(),
                    },
                };
                assert_eq!(
                    verifier.verify_sct(&sct, &other_entry),
                    Err(VerifyError::BadSignature)
                );
                let mut flipped = sct.clone();
                let last = flipped.signature.signature.len() - 1;
                flipped.signature.signature[last] ^= 1;
                assert_eq!(
                    verifier.verify_sct(&flipped, &entry),
                    Err(VerifyError::BadSignature)
                );
            }
        }
    }

    #[test]
    fn an_x509_sct_does_not_verify_for_a_precert_with_the_same_bytes() {
        let signer = Ed25519Signer::from_seed([1; 32]);
        let verifier = LogVerifier::for_signer(&signer).unwrap();
        let sct = signer.sign_sct(5, &x509_entry(), &[]).unwrap();
        let precert = LogEntry::Precert {
            issuer_key_hash: [0; 32],
            tbs_certificate: b"a certificate".to_vec(),
        };
        assert_eq!(
            verifier.verify_sct(&sct, &precert),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn sths_verify_and_any_change_breaks_them() {
        for signer in signers() {
            let verifier = LogVerifier::for_signer(signer.as_ref()).unwrap();
            let sth = signer.sign_sth(1000, 1_700_000_000_000, &[5; 32]).unwrap();
            verifier.verify_sth(&sth).unwrap();

            let tampered = [
                SignedTreeHead {
                    tree_size: 1001,
                    ..sth.clone()
                },
                SignedTreeHead {
                    timestamp_ms: sth.timestamp_ms - 1,
                    ..sth.clone()
                },
                SignedTreeHead {
                    sha256_root_hash: [6; 32],
                    ..sth.clone()
                },
            ];
            for bad in &tampered {
                assert_eq!(verifier.verify_sth(bad), Err(VerifyError::BadSignature));
            }
        }
    }

    #[test]
    fn an_sct_signature_is_not_an_sth_signature() {
        // The signature_type byte keeps the two apart even if the bytes lined up.
        let signer = Ed25519Signer::from_seed([2; 32]);
        let verifier = LogVerifier::for_signer(&signer).unwrap();
        let sth = signer.sign_sth(1, 2, &[0; 32]).unwrap();
        let message = sth.signature_input();
        let mut as_sct_input = message.clone();
        as_sct_input[1] = 0;
        assert_eq!(
            verifier.verify(&as_sct_input, &sth.tree_head_signature),
            Err(VerifyError::BadSignature)
        );
        verifier.verify(&message, &sth.tree_head_signature).unwrap();
    }

    #[test]
    fn a_signature_from_another_key_fails() {
        let ecdsa_a = EcdsaP256Signer::from_pkcs8_pem(OPENSSL_P256_PKCS8_PEM).unwrap();
        let ecdsa_b =
            EcdsaP256Signer::from_pkcs8_der(&EcdsaP256Signer::generate_pkcs8().unwrap()).unwrap();
        let verifier_b = LogVerifier::for_signer(&ecdsa_b).unwrap();
        let sth = ecdsa_a.sign_sth(3, 4, &[1; 32]).unwrap();
        assert_eq!(verifier_b.verify_sth(&sth), Err(VerifyError::BadSignature));

        // An SCT from another log is caught by its log id before the signature is tried.
        let sct = ecdsa_a.sign_sct(4, &x509_entry(), &[]).unwrap();
        assert!(matches!(
            verifier_b.verify_sct(&sct, &x509_entry()),
            Err(VerifyError::LogIdMismatch { .. })
        ));
        // Same log id forged onto another key's signature: the signature check still fails.
        let forged = SignedCertificateTimestamp {
            log_id: ecdsa_b.log_id(),
            ..sct
        };
        assert_eq!(
            verifier_b.verify_sct(&forged, &x509_entry()),
            Err(VerifyError::BadSignature)
        );
    }

    #[test]
    fn an_algorithm_the_key_does_not_use_is_named_in_the_error() {
        let ed = Ed25519Signer::from_seed([3; 32]);
        let ecdsa = EcdsaP256Signer::from_pkcs8_pem(OPENSSL_P256_PKCS8_PEM).unwrap();
        let ecdsa_verifier = LogVerifier::for_signer(&ecdsa).unwrap();
        let sth = ed.sign_sth(1, 1, &[0; 32]).unwrap();
        let error = ecdsa_verifier.verify_sth(&sth).unwrap_err();
        assert_eq!(
            error,
            VerifyError::AlgorithmMismatch {
                expected_hash: HashAlgorithm::Sha256,
                expected_signature: SignatureAlgorithm::Ecdsa,
                found_hash: HashAlgorithm::Intrinsic,
                found_signature: SignatureAlgorithm::Ed25519,
            }
        );
        assert!(error.to_string().contains("Ed25519"), "{error}");

        // Right signature bytes, wrong hash algorithm named: still refused.
        let mut sth = ecdsa.sign_sth(1, 1, &[0; 32]).unwrap();
        ecdsa_verifier.verify_sth(&sth).unwrap();
        sth.tree_head_signature.hash_algorithm = HashAlgorithm::Sha384;
        assert!(matches!(
            ecdsa_verifier.verify_sth(&sth),
            Err(VerifyError::AlgorithmMismatch { .. })
        ));
    }

    #[test]
    fn generated_keys_load_from_der_and_pem() {
        let pem = EcdsaP256Signer::generate_pkcs8_pem().unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(pem.lines().all(|line| line.len() <= 64));
        let signer = EcdsaP256Signer::from_pkcs8_pem(&pem).unwrap();
        let verifier = LogVerifier::for_signer(&signer).unwrap();
        verifier
            .verify_sth(&signer.sign_sth(0, 0, &sha256(b"")).unwrap())
            .unwrap();
        assert_ne!(
            EcdsaP256Signer::generate_pkcs8().unwrap(),
            EcdsaP256Signer::generate_pkcs8().unwrap()
        );
    }

    #[test]
    fn key_loading_errors_say_what_was_wrong() {
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n";
        let error = EcdsaP256Signer::from_pkcs8_pem(sec1).unwrap_err();
        assert_eq!(
            error,
            KeyError::PemLabel {
                expected: "PRIVATE KEY",
                found: Some("EC PRIVATE KEY".to_string())
            }
        );
        assert!(
            error.to_string().contains("openssl pkcs8 -topk8"),
            "{error}"
        );

        let unterminated = "-----BEGIN PRIVATE KEY-----\nMIGHAgEA\n";
        assert!(matches!(
            EcdsaP256Signer::from_pkcs8_pem(unterminated),
            Err(KeyError::PemMalformed(_))
        ));
        let not_base64 = "-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            EcdsaP256Signer::from_pkcs8_pem(not_base64),
            Err(KeyError::PemMalformed(_))
        ));
        assert!(matches!(
            EcdsaP256Signer::from_pkcs8_der(b"not a key"),
            Err(KeyError::Rejected(_))
        ));
        // An Ed25519 PKCS#8 key is not a P-256 key.
        let ed25519_pkcs8 = hex(
            "302e020100300506032b6570042204204ff19d33248e3dce1d8296173940ad2aa6cf03ccff83ec091bb2ece0e5c3cb77",
        );
        assert!(matches!(
            EcdsaP256Signer::from_pkcs8_der(&ed25519_pkcs8),
            Err(KeyError::Rejected(_))
        ));
    }

    #[test]
    fn verifier_accepts_pem_and_rejects_other_keys() {
        let verifier = LogVerifier::from_public_key_pem(OPENSSL_P256_SPKI_PEM).unwrap();
        assert_eq!(
            verifier.algorithms(),
            (HashAlgorithm::Sha256, SignatureAlgorithm::Ecdsa)
        );
        let mut der = pem_decode(OPENSSL_P256_SPKI_PEM, "PUBLIC KEY").unwrap();
        assert_eq!(verifier.public_key_der(), der.as_slice());
        // A compressed point (0x02 prefix) is not accepted.
        der[P256_SPKI_PREFIX.len()] = 0x02;
        assert_eq!(
            LogVerifier::from_public_key_der(&der),
            Err(KeyError::UnsupportedPublicKey)
        );
        // Truncated or extended DER.
        let der = pem_decode(OPENSSL_P256_SPKI_PEM, "PUBLIC KEY").unwrap();
        assert!(LogVerifier::from_public_key_der(&der[..der.len() - 1]).is_err());
        assert!(LogVerifier::from_public_key_der(&[der.as_slice(), &[0]].concat()).is_err());
        // An RSA key (the Go test RSA SPKI header).
        let rsa_header = hex("30820122300d06092a864886f70d01010105000382010f00");
        assert_eq!(
            LogVerifier::from_public_key_der(&rsa_header),
            Err(KeyError::UnsupportedPublicKey)
        );
    }

    #[test]
    fn pem_round_trips() {
        let der: Vec<u8> = (0..=200).collect();
        let pem = pem_encode("PUBLIC KEY", &der);
        assert_eq!(pem_decode(&pem, "PUBLIC KEY").unwrap(), der);
        let crlf = pem.replace('\n', "\r\n");
        assert_eq!(pem_decode(&crlf, "PUBLIC KEY").unwrap(), der);
    }

    #[test]
    fn signing_an_unencodable_entry_fails_cleanly() {
        let signer = Ed25519Signer::from_seed([0; 32]);
        let empty = LogEntry::X509 {
            certificate: Vec::new(),
        };
        assert!(matches!(
            signer.sign_sct(1, &empty, &[]),
            Err(SignError::Encode(EncodeError::LengthOutOfBounds { .. }))
        ));
    }
}
