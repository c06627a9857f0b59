//! The JWS signature algorithms an ACME account key may sign with (RFC 7518 §3.1, RFC 8037
//! §3.1): the four that ring verifies and ACME clients use.
//!
//! Absent on purpose: `none` and the HMAC algorithms (RFC 8555 §6.2 forbids them for requests;
//! HMAC is only for external account binding, which this crate does not check), and RSA-PSS,
//! RS384/RS512 and ES512, which no common client sends.

use std::fmt;

/// A signature algorithm ACME requests may use. Each goes with exactly one kind of key: see
/// `Jwk::verify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Alg {
    /// ECDSA on P-256 with SHA-256; the signature is r‖s, 64 bytes (RFC 7518 §3.4).
    Es256,
    /// ECDSA on P-384 with SHA-384; the signature is r‖s, 96 bytes.
    Es384,
    /// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 §3.3).
    Rs256,
    /// Ed25519 (RFC 8037 §3.1; the JOSE name covers Ed448 too, which is not accepted).
    EdDsa,
}

impl Alg {
    /// Every accepted algorithm, in the order the `algorithms` member of a
    /// `badSignatureAlgorithm` problem lists them (RFC 8555 §6.2).
    pub const ALL: [Alg; 4] = [Alg::Es256, Alg::Es384, Alg::Rs256, Alg::EdDsa];

    /// The algorithm's JOSE name, as the `alg` header parameter carries it.
    pub const fn name(self) -> &'static str {
        match self {
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
            Alg::Rs256 => "RS256",
            Alg::EdDsa => "EdDSA",
        }
    }

    /// The accepted algorithm named `name` (case-sensitive, as JOSE names are), if it is one.
    pub fn from_name(name: &str) -> Option<Alg> {
        Alg::ALL.into_iter().find(|alg| alg.name() == name)
    }
}

impl fmt::Display for Alg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_case_sensitive() {
        for alg in Alg::ALL {
            assert_eq!(Alg::from_name(alg.name()), Some(alg));
        }
        assert_eq!(Alg::from_name("es256"), None);
        assert_eq!(Alg::from_name("EDDSA"), None);
        assert_eq!(Alg::from_name("none"), None);
        assert_eq!(Alg::from_name("HS256"), None);
        assert_eq!(Alg::from_name("PS256"), None);
    }
}
