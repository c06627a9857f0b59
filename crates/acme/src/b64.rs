//! base64url without padding (RFC 7515 §2, RFC 4648 §5), the encoding of every JOSE member and
//! of the binary fields of ACME resources (CSRs, certificates, nonces).
//!
//! Decoding is strict: no `=` padding, no `+` or `/` (the standard alphabet), no whitespace, and
//! no non-zero bits left over in the last character. Strictness makes the decoding one-to-one,
//! so two different strings never stand for the same bytes (a thumbprint, a nonce or a signing
//! input means exactly one thing).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a string is not base64url without padding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum B64Error {
    /// The string ends in `=` padding, which JOSE and ACME leave out.
    #[error("base64url must be unpadded (RFC 7515 §2), but the text has '=' padding")]
    Padding,
    /// The string uses the standard alphabet's `+` or `/` instead of `-` and `_`.
    #[error(
        "base64url uses '-' and '_' (RFC 4648 §5), but the text has '{found}' at byte {at} \
         (the standard alphabet)"
    )]
    StandardAlphabet {
        /// The offending character.
        found: char,
        /// Its byte offset in the text.
        at: usize,
    },
    /// Anything else: a character outside the alphabet, an impossible length, or leftover bits.
    #[error("not base64url: {0}")]
    Invalid(String),
}

/// Encodes `bytes` as base64url without padding.
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url without padding, refusing padding, the standard alphabet and any
/// non-canonical text (see the module documentation).
pub fn decode(text: &str) -> Result<Vec<u8>, B64Error> {
    if text.ends_with('=') {
        return Err(B64Error::Padding);
    }
    if let Some((at, found)) = text.char_indices().find(|&(_, c)| c == '+' || c == '/') {
        return Err(B64Error::StandardAlphabet { found, at });
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|error| B64Error::Invalid(error.to_string()))?;
    debug_assert_eq!(encode(&bytes), text, "strict decoding is one-to-one");
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_length_mod_three() {
        for bytes in [&b""[..], b"f", b"fo", b"foo", b"\xfb\xff\xfe"] {
            let text = encode(bytes);
            assert!(!text.contains('='), "{text}");
            assert_eq!(decode(&text).unwrap(), bytes);
        }
        assert_eq!(encode(b"\xfb\xff\xfe"), "-__-");
    }

    #[test]
    fn refuses_padding_the_standard_alphabet_and_leftover_bits() {
        assert_eq!(decode("Zm8="), Err(B64Error::Padding));
        assert_eq!(
            decode("+//+"),
            Err(B64Error::StandardAlphabet { found: '+', at: 0 })
        );
        // "Zm8" is "fo"; "Zm9" differs only in the 2 leftover bits, which must be zero.
        assert_eq!(decode("Zm8").unwrap(), b"fo");
        assert!(matches!(decode("Zm9"), Err(B64Error::Invalid(_))));
        // One character alone cannot encode a byte.
        assert!(matches!(decode("Z"), Err(B64Error::Invalid(_))));
        assert!(matches!(decode("Zm 8"), Err(B64Error::Invalid(_))));
        assert!(matches!(decode("Zm8\n"), Err(B64Error::Invalid(_))));
    }
}
