//! Why a JWK or a JWS request is refused, and the problem document each reason is answered
//! with (RFC 8555 §6.2, §6.7).
//!
//! The mapping: an algorithm this server does not accept is `badSignatureAlgorithm` (with the
//! accepted ones listed); a well-formed key of a kind or size it does not accept is
//! `badPublicKey`; a missing nonce is `badNonce`; a `url` other than the request's is
//! `unauthorized` (§6.4); everything else, including a signature that does not verify, is
//! `malformed` (as Boulder answers it; RFC 8555 names no type for a bad signature).

use crate::alg::Alg;
use crate::b64::B64Error;
use crate::limits::{RSA_BITS_MAX, RSA_BITS_MIN, RSA_EXPONENT_MAX, RSA_EXPONENT_MIN};
use crate::problem::{Problem, ProblemType};

/// Why a JSON Web Key is not an account key this server accepts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwkError {
    /// The key is not a JSON object.
    #[error("a JWK is a JSON object, but this is {0}")]
    NotAnObject(&'static str),
    /// A required member is absent.
    #[error("the JWK has no \"{0}\" member, which its key type requires (RFC 7518 §6)")]
    Missing(&'static str),
    /// A member that must be a string is not.
    #[error("the JWK's \"{0}\" member must be a string")]
    NotAString(&'static str),
    /// A member is not base64url.
    #[error("the JWK's \"{member}\" member: {error}")]
    Base64 {
        /// The member.
        member: &'static str,
        /// Why it does not decode.
        error: B64Error,
    },
    /// The key has private members: a JWS names the public key only.
    #[error(
        "the JWK has the private member \"{0}\": send the public key only (RFC 8555 §6.2), and \
         treat this private key as disclosed"
    )]
    PrivateKey(&'static str),
    /// The key type is not one this server accepts.
    #[error(
        "key type {0:?} is not accepted: use \"EC\" (P-256, P-384), \"RSA\" or \"OKP\" (Ed25519)"
    )]
    UnsupportedKeyType(String),
    /// The curve is not one this server accepts for the key type.
    #[error("curve {crv:?} is not accepted for key type {kty:?}: use {accepted}")]
    UnsupportedCurve {
        /// The key type.
        kty: &'static str,
        /// The curve the key names.
        crv: String,
        /// The curves accepted for that key type.
        accepted: &'static str,
    },
    /// A coordinate or public key does not have the curve's exact length.
    #[error(
        "the JWK's \"{member}\" is {found} bytes, but on {crv} it is exactly {expected} \
         (RFC 7518 §6.2.1.2, RFC 8037 §2)"
    )]
    Length {
        /// The member.
        member: &'static str,
        /// The curve.
        crv: &'static str,
        /// Its length on that curve.
        expected: usize,
        /// The length sent.
        found: usize,
    },
    /// An RSA integer is not in its minimal encoding.
    #[error(
        "the JWK's \"{0}\" starts with a zero byte, but RSA integers are encoded in the fewest \
         bytes (RFC 7518 §6.3.1.1)"
    )]
    LeadingZero(&'static str),
    /// The RSA modulus is out of the accepted range, or even.
    #[error(
        "the RSA modulus is {0}, but an account key's must be odd and of {RSA_BITS_MIN} to \
         {RSA_BITS_MAX} bits"
    )]
    RsaModulus(String),
    /// The RSA public exponent is out of the accepted range, or even.
    #[error(
        "the RSA public exponent must be odd and between {RSA_EXPONENT_MIN} and \
         {RSA_EXPONENT_MAX}, but is {0}"
    )]
    RsaExponent(String),
    /// A certificate's SubjectPublicKeyInfo does not hold a key of the accepted kinds.
    #[error("the certificate's public key: {0}")]
    Spki(String),
}

impl JwkError {
    /// The problem document this error is answered with: `badPublicKey` for a key this server
    /// does not accept, `malformed` for a key that is not a valid public JWK at all.
    pub fn problem(&self) -> Problem {
        let kind = match self {
            JwkError::UnsupportedKeyType(_)
            | JwkError::UnsupportedCurve { .. }
            | JwkError::RsaModulus(_)
            | JwkError::RsaExponent(_)
            | JwkError::Spki(_) => ProblemType::BadPublicKey,
            JwkError::NotAnObject(_)
            | JwkError::Missing(_)
            | JwkError::NotAString(_)
            | JwkError::Base64 { .. }
            | JwkError::PrivateKey(_)
            | JwkError::Length { .. }
            | JwkError::LeadingZero(_) => ProblemType::Malformed,
        };
        Problem::new(kind, self.to_string())
    }
}

/// Why a JWS request (or its key-change inner JWS) is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    /// The body is larger than `limits::JWS_BYTES_MAX`.
    #[error("the request body is {bytes} bytes; at most {max} are accepted")]
    TooLarge {
        /// The body's size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The body is not a JSON object.
    #[error(
        "the request body must be a JWS in the flattened JSON serialization (RFC 8555 §6.2): {0}"
    )]
    NotJson(String),
    /// The body is a JWS in the general JSON serialization (several signatures).
    #[error(
        "the JWS has a \"signatures\" array (the general serialization), but ACME requests use \
         the flattened serialization with exactly one signature (RFC 8555 §6.2)"
    )]
    GeneralSerialization,
    /// The body has an unprotected header.
    #[error("the JWS has an unprotected \"header\", which ACME forbids (RFC 8555 §6.2)")]
    UnprotectedHeader,
    /// The body has a member other than `protected`, `payload` and `signature`.
    #[error(
        "the JWS has a member {0:?}; a flattened ACME JWS has exactly \"protected\", \"payload\" \
         and \"signature\""
    )]
    UnknownMember(String),
    /// A required member of the body or of the protected header is missing.
    #[error("the JWS has no \"{0}\"")]
    Missing(&'static str),
    /// A member of the body or of the protected header that must be a string is not.
    #[error("the JWS's \"{0}\" must be a string")]
    NotAString(&'static str),
    /// A member that must be base64url is not.
    #[error("the JWS's \"{member}\": {error}")]
    Base64 {
        /// The member.
        member: &'static str,
        /// Why it does not decode.
        error: B64Error,
    },
    /// The protected header does not decode to a JSON object.
    #[error("the JWS protected header must be a JSON object: {0}")]
    HeaderNotJson(String),
    /// `alg` is `none`.
    #[error("the JWS is unsigned (alg \"none\"), which ACME forbids (RFC 8555 §6.2)")]
    AlgNone,
    /// `alg` is an HMAC algorithm.
    #[error("alg {0:?} is a MAC, which ACME forbids for requests (RFC 8555 §6.2)")]
    AlgMac(String),
    /// `alg` is one this server does not accept.
    #[error("alg {0:?} is not accepted")]
    UnsupportedAlg(String),
    /// `alg` does not go with the key's type.
    #[error("alg {alg} does not go with {key}; that key signs with {expected}")]
    AlgKeyMismatch {
        /// The header's algorithm.
        alg: Alg,
        /// The key, described.
        key: &'static str,
        /// The algorithm that key signs with.
        expected: Alg,
    },
    /// The header has a `crit` parameter.
    #[error(
        "the JWS protected header has \"crit\", but this server understands no JWS extension \
         (RFC 7515 §4.1.11)"
    )]
    Critical,
    /// The header has both `jwk` and `kid`.
    #[error("the JWS protected header has both \"jwk\" and \"kid\"; it must have exactly one")]
    BothJwkAndKid,
    /// The header has neither `jwk` nor `kid`.
    #[error("the JWS protected header has neither \"jwk\" nor \"kid\"; it must have exactly one")]
    NeitherJwkNorKid,
    /// The request names its key by `kid` where this resource needs the key itself.
    #[error("this request must carry its key as \"jwk\", not \"kid\" (RFC 8555 §6.2)")]
    ExpectedJwk,
    /// The request carries its key as `jwk` where this resource needs an account's `kid`.
    #[error("this request must name its account with \"kid\", not carry a \"jwk\" (RFC 8555 §6.2)")]
    ExpectedKid,
    /// `kid` is empty.
    #[error("the JWS's \"kid\" is empty; it is the account URL")]
    EmptyKid,
    /// The header's `jwk` is not an acceptable key.
    #[error("{0}")]
    Jwk(#[from] JwkError),
    /// The header has no nonce.
    #[error("the JWS has no anti-replay \"nonce\" (RFC 8555 §6.5)")]
    MissingNonce,
    /// A key-change inner JWS has a nonce.
    #[error("the key-change inner JWS must not have a \"nonce\" (RFC 8555 §7.3.5)")]
    UnexpectedNonce,
    /// The header's `url` is not the URL the request was sent to.
    #[error(
        "the JWS \"url\" is {header:?}, but the request was sent to {request:?} (RFC 8555 §6.4)"
    )]
    UrlMismatch {
        /// The URL in the protected header.
        header: String,
        /// The URL the request was sent to.
        request: String,
    },
    /// The signature does not verify with the key.
    #[error("JWS signature does not verify")]
    SignatureMismatch,
    /// The payload is not the JSON object the resource expects.
    #[error("the JWS payload is not a valid request for this resource: {0}")]
    Payload(String),
    /// A key-change request (RFC 8555 §7.3.5) fails one of its checks.
    #[error("key change (RFC 8555 §7.3.5): {0}")]
    KeyChange(String),
}

impl JwsError {
    /// The problem document this error is answered with (see the module documentation).
    pub fn problem(&self) -> Problem {
        match self {
            JwsError::AlgNone
            | JwsError::AlgMac(_)
            | JwsError::UnsupportedAlg(_)
            | JwsError::AlgKeyMismatch { .. } => {
                let accepted: Vec<String> =
                    Alg::ALL.iter().map(|alg| alg.name().to_owned()).collect();
                let mut problem = Problem::new(
                    ProblemType::BadSignatureAlgorithm,
                    format!("{self}; accepted: {}", accepted.join(", ")),
                );
                problem.algorithms = accepted;
                problem
            }
            JwsError::Jwk(error) => error.problem(),
            JwsError::MissingNonce => Problem::new(ProblemType::BadNonce, self.to_string()),
            JwsError::UrlMismatch { .. } => {
                Problem::new(ProblemType::Unauthorized, self.to_string())
            }
            // 413 Content Too Large (RFC 9110 §15.5.14).
            JwsError::TooLarge { .. } => {
                Problem::with_status(ProblemType::Malformed, self.to_string(), 413)
            }
            JwsError::NotJson(_)
            | JwsError::GeneralSerialization
            | JwsError::UnprotectedHeader
            | JwsError::UnknownMember(_)
            | JwsError::Missing(_)
            | JwsError::NotAString(_)
            | JwsError::Base64 { .. }
            | JwsError::HeaderNotJson(_)
            | JwsError::Critical
            | JwsError::BothJwkAndKid
            | JwsError::NeitherJwkNorKid
            | JwsError::ExpectedJwk
            | JwsError::ExpectedKid
            | JwsError::EmptyKid
            | JwsError::UnexpectedNonce
            | JwsError::SignatureMismatch
            | JwsError::Payload(_)
            | JwsError::KeyChange(_) => Problem::new(ProblemType::Malformed, self.to_string()),
        }
    }
}
