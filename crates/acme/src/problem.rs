//! Problem documents (RFC 7807) with the ACME error types of RFC 8555 §6.7: the body of every
//! error response, and the `error` member of orders and challenges.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::identifier::Identifier;

/// The media type of an error response's body (RFC 7807 §6.1).
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// What every ACME error type's URN starts with (RFC 8555 §6.7).
pub const ACME_ERROR_URN_PREFIX: &str = "urn:ietf:params:acme:error:";

/// An ACME error type: every row of RFC 8555 §6.7's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemType {
    /// The request named an account that does not exist (`onlyReturnExisting`).
    AccountDoesNotExist,
    /// The certificate to revoke is already revoked.
    AlreadyRevoked,
    /// The CSR is unacceptable (its key, its names, its signature).
    BadCsr,
    /// The nonce is unknown, used, or missing: the client retries with the response's nonce.
    BadNonce,
    /// The JWS was signed with a key the server does not accept.
    BadPublicKey,
    /// The revocation reason is not allowed.
    BadRevocationReason,
    /// The JWS algorithm is not accepted (the problem lists those that are).
    BadSignatureAlgorithm,
    /// A CAA record forbids issuance.
    Caa,
    /// Several errors; see the subproblems.
    Compound,
    /// The server could not connect to the validation target.
    Connection,
    /// A DNS query during validation failed.
    Dns,
    /// The server requires external account binding.
    ExternalAccountRequired,
    /// The response to a challenge was not the expected one.
    IncorrectResponse,
    /// A contact URL is invalid.
    InvalidContact,
    /// The request is malformed.
    Malformed,
    /// The order is not ready to be finalized.
    OrderNotReady,
    /// A rate limit was exceeded.
    RateLimited,
    /// The server will not issue for the identifier.
    RejectedIdentifier,
    /// The server failed internally.
    ServerInternal,
    /// A TLS error during validation.
    Tls,
    /// The client lacks authorization for the action.
    Unauthorized,
    /// A contact URL's scheme is not supported.
    UnsupportedContact,
    /// The identifier's type is not supported.
    UnsupportedIdentifier,
    /// The client must act outside ACME (e.g. agree to new terms; see the `instance` link).
    UserActionRequired,
}

impl ProblemType {
    /// Every ACME error type, in RFC 8555 §6.7's (alphabetical) order.
    pub const ALL: [ProblemType; 24] = [
        ProblemType::AccountDoesNotExist,
        ProblemType::AlreadyRevoked,
        ProblemType::BadCsr,
        ProblemType::BadNonce,
        ProblemType::BadPublicKey,
        ProblemType::BadRevocationReason,
        ProblemType::BadSignatureAlgorithm,
        ProblemType::Caa,
        ProblemType::Compound,
        ProblemType::Connection,
        ProblemType::Dns,
        ProblemType::ExternalAccountRequired,
        ProblemType::IncorrectResponse,
        ProblemType::InvalidContact,
        ProblemType::Malformed,
        ProblemType::OrderNotReady,
        ProblemType::RateLimited,
        ProblemType::RejectedIdentifier,
        ProblemType::ServerInternal,
        ProblemType::Tls,
        ProblemType::Unauthorized,
        ProblemType::UnsupportedContact,
        ProblemType::UnsupportedIdentifier,
        ProblemType::UserActionRequired,
    ];

    /// The type's name as RFC 8555 §6.7 spells it (`badCSR`, `caa`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ProblemType::AccountDoesNotExist => "accountDoesNotExist",
            ProblemType::AlreadyRevoked => "alreadyRevoked",
            ProblemType::BadCsr => "badCSR",
            ProblemType::BadNonce => "badNonce",
            ProblemType::BadPublicKey => "badPublicKey",
            ProblemType::BadRevocationReason => "badRevocationReason",
            ProblemType::BadSignatureAlgorithm => "badSignatureAlgorithm",
            ProblemType::Caa => "caa",
            ProblemType::Compound => "compound",
            ProblemType::Connection => "connection",
            ProblemType::Dns => "dns",
            ProblemType::ExternalAccountRequired => "externalAccountRequired",
            ProblemType::IncorrectResponse => "incorrectResponse",
            ProblemType::InvalidContact => "invalidContact",
            ProblemType::Malformed => "malformed",
            ProblemType::OrderNotReady => "orderNotReady",
            ProblemType::RateLimited => "rateLimited",
            ProblemType::RejectedIdentifier => "rejectedIdentifier",
            ProblemType::ServerInternal => "serverInternal",
            ProblemType::Tls => "tls",
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::UnsupportedContact => "unsupportedContact",
            ProblemType::UnsupportedIdentifier => "unsupportedIdentifier",
            ProblemType::UserActionRequired => "userActionRequired",
        }
    }

    /// The type's URN, the `type` member of a problem document:
    /// `urn:ietf:params:acme:error:<name>`.
    pub fn urn(self) -> String {
        format!("{ACME_ERROR_URN_PREFIX}{}", self.name())
    }

    /// The type a URN names, if it is one of RFC 8555 §6.7's.
    pub fn from_urn(urn: &str) -> Option<ProblemType> {
        let name = urn.strip_prefix(ACME_ERROR_URN_PREFIX)?;
        ProblemType::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    /// The HTTP status an error of this type is answered with unless the caller says otherwise
    /// ([`Problem::with_status`]). RFC 8555 fixes only a few (badNonce and badSignatureAlgorithm
    /// 400, §6.5 and §6.2; orderNotReady 403, §7.4); the rest are ours, after Boulder where it
    /// uses the type: client mistakes 400, refusals 403, rate limits 429, our failures 500.
    pub const fn default_status(self) -> u16 {
        match self {
            ProblemType::AccountDoesNotExist
            | ProblemType::AlreadyRevoked
            | ProblemType::BadCsr
            | ProblemType::BadNonce
            | ProblemType::BadPublicKey
            | ProblemType::BadRevocationReason
            | ProblemType::BadSignatureAlgorithm
            | ProblemType::Compound
            | ProblemType::Connection
            | ProblemType::Dns
            | ProblemType::InvalidContact
            | ProblemType::Malformed
            | ProblemType::RejectedIdentifier
            | ProblemType::Tls
            | ProblemType::UnsupportedContact
            | ProblemType::UnsupportedIdentifier => 400,
            ProblemType::Caa
            | ProblemType::ExternalAccountRequired
            | ProblemType::IncorrectResponse
            | ProblemType::OrderNotReady
            | ProblemType::Unauthorized
            | ProblemType::UserActionRequired => 403,
            ProblemType::RateLimited => 429,
            ProblemType::ServerInternal => 500,
        }
    }
}

impl fmt::Display for ProblemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ProblemType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.urn())
    }
}

impl<'de> Deserialize<'de> for ProblemType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let urn = String::deserialize(deserializer)?;
        ProblemType::from_urn(&urn).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{urn:?} is not an ACME error type ({ACME_ERROR_URN_PREFIX}<name>, RFC 8555 §6.7)"
            ))
        })
    }
}

/// A problem document: the JSON body of an error response (RFC 7807, RFC 8555 §6.7).
///
/// Serializes to `{"type": "urn:ietf:params:acme:error:…", "detail": "…", "status": 400}`, plus
/// `subproblems` (RFC 8555 §6.7.1) and `algorithms` (§6.2) when they are not empty.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// The error type.
    #[serde(rename = "type")]
    pub kind: ProblemType,
    /// What was wrong, for a person: what was received and what was expected.
    pub detail: String,
    /// The HTTP status of the response that carries the document: an error status, 400..=599.
    pub status: u16,
    /// The errors this one is made of, one per identifier (RFC 8555 §6.7.1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subproblems: Vec<Subproblem>,
    /// For `badSignatureAlgorithm`: the accepted `alg` values, which RFC 8555 §6.2 requires the
    /// document to list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub algorithms: Vec<String>,
}

impl Problem {
    /// A problem of type `kind` with its default status.
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Problem {
        Problem::with_status(kind, detail, kind.default_status())
    }

    /// A problem with an explicit HTTP status, for the cases where the type's default does not
    /// fit (e.g. `malformed` with 404 for a resource that does not exist).
    ///
    /// # Panics
    ///
    /// If `status` is not an HTTP error status (400..=599): a problem is an error.
    pub fn with_status(kind: ProblemType, detail: impl Into<String>, status: u16) -> Problem {
        assert!(
            (400..=599).contains(&status),
            "a problem document's status is an HTTP error status, not {status}"
        );
        Problem {
            kind,
            detail: detail.into(),
            status,
            subproblems: Vec::new(),
            algorithms: Vec::new(),
        }
    }

    /// `malformed` with status 404: the URL names no resource (RFC 8555 has no `notFound`
    /// type; Boulder answers so).
    pub fn not_found(detail: impl Into<String>) -> Problem {
        Problem::with_status(ProblemType::Malformed, detail, 404)
    }

    /// The same problem carrying `subproblems`.
    pub fn with_subproblems(mut self, subproblems: Vec<Subproblem>) -> Problem {
        self.subproblems = subproblems;
        self
    }

    /// The JSON body, to send with content type [`PROBLEM_CONTENT_TYPE`].
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a problem document always serializes")
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.kind, self.status, self.detail)
    }
}

/// One error of a compound problem, about one identifier (RFC 8555 §6.7.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subproblem {
    /// The error type.
    #[serde(rename = "type")]
    pub kind: ProblemType,
    /// What was wrong with this identifier.
    pub detail: String,
    /// The identifier the error is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identifier: Option<Identifier>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_a_distinct_name_that_round_trips_through_its_urn() {
        let mut names: Vec<&str> = ProblemType::ALL.iter().map(|kind| kind.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ProblemType::ALL.len());
        for kind in ProblemType::ALL {
            assert!(kind.urn().starts_with("urn:ietf:params:acme:error:"));
            assert_eq!(ProblemType::from_urn(&kind.urn()), Some(kind));
        }
        assert_eq!(
            ProblemType::from_urn("urn:ietf:params:acme:error:notFound"),
            None
        );
        assert_eq!(ProblemType::from_urn("badNonce"), None);
    }

    #[test]
    fn a_status_outside_the_error_range_is_refused() {
        let refused =
            std::panic::catch_unwind(|| Problem::with_status(ProblemType::Malformed, "x", 200));
        assert!(refused.is_err());
        assert_eq!(
            Problem::with_status(ProblemType::Malformed, "x", 599).status,
            599
        );
    }
}
