//! The identifier an order, an authorization or a subproblem is about (RFC 8555 §7.1.3,
//! §7.1.4, §6.7.1).

use serde::{Deserialize, Serialize};

/// The identifier type of DNS names (RFC 8555 §9.7.7).
pub const IDENTIFIER_TYPE_DNS: &str = "dns";
/// The identifier type of IP addresses (RFC 8738 §3).
pub const IDENTIFIER_TYPE_IP: &str = "ip";

/// An identifier: `{"type": "dns", "value": "example.org"}`.
///
/// The type is kept as the client sent it, not as an enum, so that a request naming a type this
/// server does not support still parses and can be answered `unsupportedIdentifier` (RFC 8555
/// §7.4) rather than `malformed`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Identifier {
    /// The identifier type, e.g. [`IDENTIFIER_TYPE_DNS`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The identifier itself, e.g. a DNS name.
    pub value: String,
}

impl Identifier {
    /// A DNS identifier for `name`.
    pub fn dns(name: impl Into<String>) -> Identifier {
        Identifier {
            kind: IDENTIFIER_TYPE_DNS.to_owned(),
            value: name.into(),
        }
    }
}
