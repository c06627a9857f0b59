//! Validated strings: names, identities and tokens that reach the state machine.
//!
//! Each is a newtype whose only constructor checks it, and whose deserializer runs the same check,
//! so a value of the type is valid wherever it appears, including in a decoded log entry or
//! snapshot.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which kind of text failed validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TextKind {
    /// A [`crate::LeaseName`].
    LeaseName,
    /// A [`crate::HolderId`].
    HolderId,
    /// A [`crate::ChallengeToken`].
    ChallengeToken,
    /// A [`crate::KeyAuthorization`].
    KeyAuthorization,
    /// A [`crate::DnsName`].
    DnsName,
    /// A [`crate::WorkerId`].
    WorkerId,
    /// A [`crate::RequestKey`].
    RequestKey,
    /// A [`crate::Reason`].
    Reason,
    /// A [`crate::pipelines::PipelineName`].
    PipelineName,
    /// A [`crate::pipelines::NodeGroup`].
    NodeGroup,
    /// A [`crate::pipelines::SwitchName`].
    SwitchName,
    /// A [`crate::pipelines::Owner`].
    Owner,
    /// A [`crate::pipelines::ExternalId`].
    ExternalId,
    /// A [`crate::pipelines::WebhookUrl`].
    WebhookUrl,
    /// A [`crate::pipelines::JsonDocument`].
    Json,
}

impl fmt::Display for TextKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TextKind::LeaseName => "lease name",
            TextKind::HolderId => "holder id",
            TextKind::ChallengeToken => "challenge token",
            TextKind::KeyAuthorization => "key authorization",
            TextKind::DnsName => "DNS name",
            TextKind::WorkerId => "worker id",
            TextKind::RequestKey => "request key",
            TextKind::Reason => "reason",
            TextKind::PipelineName => "pipeline name",
            TextKind::NodeGroup => "node group",
            TextKind::SwitchName => "switch name",
            TextKind::Owner => "owner",
            TextKind::ExternalId => "external id",
            TextKind::WebhookUrl => "webhook URL",
            TextKind::Json => "JSON document",
        })
    }
}

/// Why a string was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum TextError {
    /// The string was empty.
    #[error("{kind} is empty")]
    Empty {
        /// What was being validated.
        kind: TextKind,
    },
    /// The string was longer than allowed.
    #[error("{kind} is {len_bytes} bytes long; at most {max_bytes} are allowed")]
    TooLong {
        /// What was being validated.
        kind: TextKind,
        /// Its length.
        len_bytes: usize,
        /// The limit.
        max_bytes: usize,
    },
    /// The string held a character outside its alphabet.
    #[error("{kind} has {found:?} at byte {at}; allowed are {allowed}")]
    BadCharacter {
        /// What was being validated.
        kind: TextKind,
        /// Byte offset of the first bad character.
        at: usize,
        /// The bad character.
        found: char,
        /// The alphabet, in words.
        allowed: String,
    },
    /// The characters were allowed but their arrangement was not (a DNS name's labels).
    #[error("{kind} is malformed: {reason}")]
    Malformed {
        /// What was being validated.
        kind: TextKind,
        /// What was wrong and what is expected.
        reason: String,
    },
}

/// Checks `value` against a length bound and a per-byte alphabet (all alphabets are ASCII).
pub(crate) fn check(
    kind: TextKind,
    value: &str,
    max_bytes: usize,
    allowed: fn(u8) -> bool,
    allowed_words: &str,
) -> Result<(), TextError> {
    if value.is_empty() {
        return Err(TextError::Empty { kind });
    }
    if value.len() > max_bytes {
        return Err(TextError::TooLong {
            kind,
            len_bytes: value.len(),
            max_bytes,
        });
    }
    if let Some((at, found)) = value
        .char_indices()
        .find(|&(_, c)| !c.is_ascii() || !allowed(c as u8))
    {
        return Err(TextError::BadCharacter {
            kind,
            at,
            found,
            allowed: allowed_words.to_owned(),
        });
    }
    Ok(())
}

/// Checks `value` against a length bound and refuses control characters (any UTF-8 otherwise):
/// free text for people, safe to print on one line.
pub(crate) fn check_printable(
    kind: TextKind,
    value: &str,
    max_bytes: usize,
) -> Result<(), TextError> {
    if value.is_empty() {
        return Err(TextError::Empty { kind });
    }
    if value.len() > max_bytes {
        return Err(TextError::TooLong {
            kind,
            len_bytes: value.len(),
            max_bytes,
        });
    }
    if let Some((at, found)) = value.char_indices().find(|&(_, c)| c.is_control()) {
        return Err(TextError::BadCharacter {
            kind,
            at,
            found,
            allowed: "printable UTF-8 (no control characters such as newlines or tabs)".to_owned(),
        });
    }
    Ok(())
}

/// Defines a validated string newtype: `new` checks, `Deserialize` checks, `as_str` reads.
///
/// The alphabet form checks a length bound and a per-byte alphabet; the `validate` form takes any
/// `fn(&str) -> Result<(), TextError>` for text with more structure.
macro_rules! validated_text {
    (
        $(#[$meta:meta])*
        $name:ident, kind = $kind:expr, max_bytes = $max:expr,
        allowed = $allowed:expr, allowed_words = $words:literal
    ) => {
        $crate::text::validated_text! {
            $(#[$meta])*
            $name, validate = |value: &str| $crate::text::check($kind, value, $max, $allowed, $words)
        }
    };
    (
        $(#[$meta:meta])*
        $name:ident, validate = $validate:expr
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validates `value`; the error says what was wrong and what is allowed.
            pub fn new(value: impl Into<String>) -> Result<$name, $crate::text::TextError> {
                let value = value.into();
                let validate: fn(&str) -> Result<(), $crate::text::TextError> = $validate;
                validate(&value)?;
                Ok($name(value))
            }

            /// The validated string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                let value = String::deserialize(deserializer)?;
                $name::new(value).map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use validated_text;

/// Lease names: letters, digits and `. _ - : / @`, so they are safe in URLs, metrics and logs.
pub(crate) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'/' | b'@')
}

/// Visible ASCII: no spaces, no control characters.
pub(crate) fn is_visible_byte(b: u8) -> bool {
    b.is_ascii_graphic()
}

/// The base64url alphabet of RFC 4648 §5, without padding (RFC 8555 §8.3 tokens).
pub(crate) fn is_base64url_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-')
}

/// Worker identities: letters, digits and `. _ : -` (host names, pod names, `host:pid`).
pub(crate) fn is_worker_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}
