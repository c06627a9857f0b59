//! Object identifiers of the key and signature algorithms the chain and CSR checks meet, and
//! their names for error messages.

use x509_cert::spki::ObjectIdentifier;

/// rsaEncryption (RFC 3279).
pub const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
/// sha256WithRSAEncryption (RFC 4055).
pub const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
/// sha384WithRSAEncryption (RFC 4055).
pub const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
/// sha512WithRSAEncryption (RFC 4055).
pub const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
/// id-ecPublicKey (RFC 5480).
pub const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
/// ecdsa-with-SHA256 (RFC 5758).
pub const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
/// ecdsa-with-SHA384 (RFC 5758).
pub const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
/// The P-256 curve, secp256r1 (RFC 5480).
pub const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
/// The P-384 curve, secp384r1 (RFC 5480).
pub const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
/// Ed25519, as key and signature algorithm (RFC 8410).
pub const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

/// Names for algorithms and curves seen in the wild, so an error says what it saw.
const KNOWN_NAMES: &[(&str, &str)] = &[
    ("1.2.840.113549.1.1.1", "rsaEncryption"),
    ("1.2.840.113549.1.1.2", "md2WithRSAEncryption"),
    ("1.2.840.113549.1.1.4", "md5WithRSAEncryption"),
    ("1.2.840.113549.1.1.5", "sha1WithRSAEncryption"),
    ("1.2.840.113549.1.1.10", "RSASSA-PSS"),
    ("1.2.840.113549.1.1.11", "sha256WithRSAEncryption"),
    ("1.2.840.113549.1.1.12", "sha384WithRSAEncryption"),
    ("1.2.840.113549.1.1.13", "sha512WithRSAEncryption"),
    ("1.2.840.113549.1.1.14", "sha224WithRSAEncryption"),
    ("1.2.840.10045.2.1", "id-ecPublicKey"),
    ("1.2.840.10045.4.1", "ecdsa-with-SHA1"),
    ("1.2.840.10045.4.3.1", "ecdsa-with-SHA224"),
    ("1.2.840.10045.4.3.2", "ecdsa-with-SHA256"),
    ("1.2.840.10045.4.3.3", "ecdsa-with-SHA384"),
    ("1.2.840.10045.4.3.4", "ecdsa-with-SHA512"),
    ("1.2.840.10045.3.1.7", "P-256"),
    ("1.3.132.0.34", "P-384"),
    ("1.3.132.0.35", "P-521"),
    ("1.3.132.0.10", "secp256k1"),
    ("1.2.840.10040.4.1", "DSA"),
    ("1.2.840.10040.4.3", "dsa-with-sha1"),
    ("2.16.840.1.101.3.4.3.2", "dsa-with-sha256"),
    ("1.3.101.110", "X25519"),
    ("1.3.101.111", "X448"),
    ("1.3.101.112", "Ed25519"),
    ("1.3.101.113", "Ed448"),
];

/// "name (OID)" when the OID is one of the known ones, else the dotted OID.
pub fn describe(oid: &ObjectIdentifier) -> String {
    let dotted = oid.to_string();
    match KNOWN_NAMES.iter().find(|(known, _)| *known == dotted) {
        Some((_, name)) => format!("{name} ({dotted})"),
        None => dotted,
    }
}
