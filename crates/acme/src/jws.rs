//! ACME request bodies: a JWS in the flattened JSON serialization (RFC 7515 §7.2.2) with the
//! protected header RFC 8555 §6.2 requires, and the key-change inner JWS (§7.3.5).
//!
//! [`ParsedJws::parse`] checks the layout and the header; it does not check the signature (the
//! key may be an account's, looked up by `kid`), the nonce (the node's [`NonceStore`] does) or
//! the URL (the caller knows it: [`ParsedJws::check_url`]). A request is acceptable only once
//! all four are checked.
//!
//! **Layout.** The body is a JSON object with exactly the members `protected`, `payload` (empty
//! for POST-as-GET) and `signature`, each base64url. Refused: the general serialization
//! (`signatures`), an unprotected `header`, any other member, a missing one.
//!
//! **Header.** `alg` is one of [`Alg::ALL`] (`none` and MACs are refused by name); exactly one
//! of `jwk` (a public key this server accepts) and `kid` (an account URL); `url`; `nonce`
//! (base64url); no `crit`. Other parameters are ignored. A member repeated in the JSON counts
//! once, with its last value (serde_json's reading, which RFC 7515 §5.2 allows).
//!
//! [`NonceStore`]: crate::nonce::NonceStore

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::alg::Alg;
use crate::b64;
use crate::error::JwsError;
use crate::jwk::Jwk;
use crate::limits::JWS_BYTES_MAX;
use crate::problem::ProblemType;
use crate::wire::KeyChange;

/// How a request names the key that signed it (RFC 8555 §6.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyRef {
    /// The key itself: newAccount, and revokeCert signed with the certificate's key.
    Jwk(Jwk),
    /// The account URL: every other request.
    Kid(String),
}

/// The protected header of an ACME request, checked (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedHeader {
    /// The signature algorithm.
    pub alg: Alg,
    /// The signing key, or the account that holds it.
    pub key: KeyRef,
    /// The anti-replay nonce (RFC 8555 §6.5), base64url; the node's nonce store says whether
    /// it is fresh.
    pub nonce: String,
    /// The URL the client sent the request to (RFC 8555 §6.4).
    pub url: String,
}

/// An ACME request body, parsed and checked except for its signature, nonce and URL.
///
/// The fields are private so that [`ParsedJws::verify`] always checks the signature over the
/// bytes the payload was decoded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedJws {
    protected: ProtectedHeader,
    payload: Vec<u8>,
    signing_input: Vec<u8>,
    signature: Vec<u8>,
}

impl ParsedJws {
    /// Parses a request body (see the module documentation for what is checked).
    pub fn parse(body: &[u8]) -> Result<ParsedJws, JwsError> {
        if body.len() > JWS_BYTES_MAX {
            return Err(JwsError::TooLarge {
                bytes: body.len(),
                max: JWS_BYTES_MAX,
            });
        }
        let value: Value =
            serde_json::from_slice(body).map_err(|error| JwsError::NotJson(error.to_string()))?;
        let decoded = Decoded::from_value(&value)?;
        let nonce = decoded.nonce.ok_or(JwsError::MissingNonce)?;
        Ok(ParsedJws {
            protected: ProtectedHeader {
                alg: decoded.alg,
                key: decoded.key,
                nonce,
                url: decoded.url,
            },
            payload: decoded.payload,
            signing_input: decoded.signing_input,
            signature: decoded.signature,
        })
    }

    /// The protected header.
    pub fn protected(&self) -> &ProtectedHeader {
        &self.protected
    }

    /// The payload, decoded; empty for POST-as-GET.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// What was signed: the protected header and payload as sent, base64url, joined by `.`.
    pub fn signing_input(&self) -> &[u8] {
        &self.signing_input
    }

    /// The signature, decoded.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// Whether this is a POST-as-GET (RFC 8555 §6.3): an empty payload.
    pub fn is_post_as_get(&self) -> bool {
        self.payload.is_empty()
    }

    /// Verifies the signature with `key`: the header's `jwk`, or the key of the account its
    /// `kid` names.
    pub fn verify(&self, key: &Jwk) -> Result<(), JwsError> {
        key.verify(self.protected.alg, &self.signing_input, &self.signature)
    }

    /// The header's `jwk`, for the requests that must carry the key itself (newAccount).
    pub fn jwk(&self) -> Result<&Jwk, JwsError> {
        match &self.protected.key {
            KeyRef::Jwk(jwk) => Ok(jwk),
            KeyRef::Kid(_) => Err(JwsError::ExpectedJwk),
        }
    }

    /// The header's `kid`, for the requests that must name an account.
    pub fn kid(&self) -> Result<&str, JwsError> {
        match &self.protected.key {
            KeyRef::Kid(kid) => Ok(kid),
            KeyRef::Jwk(_) => Err(JwsError::ExpectedKid),
        }
    }

    /// Checks that the header's `url` is `request_url`, the URL the request was sent to
    /// (RFC 8555 §6.4), compared exactly.
    pub fn check_url(&self, request_url: &str) -> Result<(), JwsError> {
        if self.protected.url == request_url {
            Ok(())
        } else {
            Err(JwsError::UrlMismatch {
                header: self.protected.url.clone(),
                request: request_url.to_owned(),
            })
        }
    }

    /// The payload read as the JSON request `T` (unknown members ignored, RFC 8555 §7.1).
    pub fn payload_json<T: DeserializeOwned>(&self) -> Result<T, JwsError> {
        if self.payload.is_empty() {
            return Err(JwsError::Payload(
                "the payload is empty (POST-as-GET), but this request needs a JSON object"
                    .to_owned(),
            ));
        }
        serde_json::from_slice(&self.payload).map_err(|error| JwsError::Payload(error.to_string()))
    }
}

/// A key change that passed every check [`verify_key_change`] makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRollover {
    /// The account URL whose key changes.
    pub account: String,
    /// The account's new key.
    pub new_key: Jwk,
}

/// Checks a key-change request (RFC 8555 §7.3.5), given its outer JWS (already parsed, its nonce
/// and URL checked) and the current key of the account its `kid` names:
///
/// 1. the outer JWS names the account with `kid` and verifies with `account_key`;
/// 2. its payload is a JWS (the inner one) that carries the new key as `jwk`, has no `nonce`,
///    has the outer `url`, and verifies with the new key;
/// 3. the inner payload is `{"account": <the outer kid>, "oldKey": <account_key>}`;
/// 4. the new key is not the current one.
///
/// Left to the caller: that no other account has the new key (RFC 8555 §7.3.5 answers 409 with
/// that account's URL).
pub fn verify_key_change(outer: &ParsedJws, account_key: &Jwk) -> Result<KeyRollover, JwsError> {
    let account = outer.kid()?;
    outer.verify(account_key)?;
    let inner_value: Value = serde_json::from_slice(&outer.payload).map_err(|error| {
        JwsError::KeyChange(format!(
            "the payload must be the inner JWS, a JSON object: {error}"
        ))
    })?;
    // Errors in the inner JWS keep their problem type, but `malformed` ones say "inner".
    let inner = Decoded::from_value(&inner_value).map_err(|error| {
        if error.problem().kind == ProblemType::Malformed {
            JwsError::KeyChange(format!("the inner JWS: {error}"))
        } else {
            error
        }
    })?;
    if inner.nonce.is_some() {
        return Err(JwsError::UnexpectedNonce);
    }
    let KeyRef::Jwk(new_key) = inner.key else {
        return Err(JwsError::KeyChange(
            "the inner JWS must carry the new key as \"jwk\", not \"kid\"".to_owned(),
        ));
    };
    if inner.url != outer.protected.url {
        return Err(JwsError::KeyChange(format!(
            "the inner JWS url {:?} is not the outer one, {:?}",
            inner.url, outer.protected.url
        )));
    }
    new_key
        .verify(inner.alg, &inner.signing_input, &inner.signature)
        .map_err(|error| match error {
            JwsError::SignatureMismatch => JwsError::KeyChange(
                "the inner JWS signature does not verify with its jwk (the new key)".to_owned(),
            ),
            error => error,
        })?;
    let change: KeyChange = serde_json::from_slice(&inner.payload).map_err(|error| {
        JwsError::KeyChange(format!(
            "the inner payload must be {{\"account\": URL, \"oldKey\": JWK}}: {error}"
        ))
    })?;
    if change.account != account {
        return Err(JwsError::KeyChange(format!(
            "the inner payload's account {:?} is not the outer kid {account:?}",
            change.account
        )));
    }
    let old_key = Jwk::from_json(&change.old_key)
        .map_err(|error| JwsError::KeyChange(format!("the inner payload's oldKey: {error}")))?;
    if old_key != *account_key {
        return Err(JwsError::KeyChange(
            "the inner payload's oldKey is not the account's current key".to_owned(),
        ));
    }
    if new_key == *account_key {
        return Err(JwsError::KeyChange(
            "the new key is the account's current key".to_owned(),
        ));
    }
    Ok(KeyRollover {
        account: account.to_owned(),
        new_key,
    })
}

/// What an outer or inner JWS has, before the nonce rule (required outside, absent inside).
struct Decoded {
    alg: Alg,
    key: KeyRef,
    nonce: Option<String>,
    url: String,
    payload: Vec<u8>,
    signing_input: Vec<u8>,
    signature: Vec<u8>,
}

impl Decoded {
    fn from_value(value: &Value) -> Result<Decoded, JwsError> {
        let object = value
            .as_object()
            .ok_or_else(|| JwsError::NotJson("not a JSON object".to_owned()))?;
        if object.contains_key("signatures") {
            return Err(JwsError::GeneralSerialization);
        }
        if object.contains_key("header") {
            return Err(JwsError::UnprotectedHeader);
        }
        if let Some(unknown) = object
            .keys()
            .find(|key| !matches!(key.as_str(), "protected" | "payload" | "signature"))
        {
            return Err(JwsError::UnknownMember(unknown.clone()));
        }
        let protected_b64 = string_member(object, "protected")?;
        let payload_b64 = string_member(object, "payload")?;
        let signature_b64 = string_member(object, "signature")?;
        let header_bytes = base64_member("protected", protected_b64)?;
        let payload = base64_member("payload", payload_b64)?;
        let signature = base64_member("signature", signature_b64)?;

        let header: Map<String, Value> = serde_json::from_slice(&header_bytes)
            .map_err(|error| JwsError::HeaderNotJson(error.to_string()))?;
        let alg = parse_alg(string_member(&header, "alg")?)?;
        if header.contains_key("crit") {
            return Err(JwsError::Critical);
        }
        let key = match (header.get("jwk"), header.get("kid")) {
            (Some(_), Some(_)) => return Err(JwsError::BothJwkAndKid),
            (None, None) => return Err(JwsError::NeitherJwkNorKid),
            (Some(jwk), None) => KeyRef::Jwk(Jwk::from_json(jwk)?),
            (None, Some(_)) => match string_member(&header, "kid")? {
                "" => return Err(JwsError::EmptyKid),
                kid => KeyRef::Kid(kid.to_owned()),
            },
        };
        let url = string_member(&header, "url")?.to_owned();
        let nonce = match header.get("nonce") {
            None => None,
            Some(_) => {
                let nonce = string_member(&header, "nonce")?;
                // RFC 8555 §6.5.2: a nonce that is not base64url is malformed.
                base64_member("nonce", nonce)?;
                Some(nonce.to_owned())
            }
        };
        let signing_input = [protected_b64.as_bytes(), b".", payload_b64.as_bytes()].concat();
        Ok(Decoded {
            alg,
            key,
            nonce,
            url,
            payload,
            signing_input,
            signature,
        })
    }
}

/// The accepted algorithm `name` names, or why it is refused: `none` and the MACs by name
/// (RFC 8555 §6.2), anything else as unsupported.
fn parse_alg(name: &str) -> Result<Alg, JwsError> {
    match Alg::from_name(name) {
        Some(alg) => Ok(alg),
        None if name == "none" => Err(JwsError::AlgNone),
        None if name.starts_with("HS") => Err(JwsError::AlgMac(name.to_owned())),
        None => Err(JwsError::UnsupportedAlg(name.to_owned())),
    }
}

fn string_member<'a>(
    object: &'a Map<String, Value>,
    member: &'static str,
) -> Result<&'a str, JwsError> {
    object
        .get(member)
        .ok_or(JwsError::Missing(member))?
        .as_str()
        .ok_or(JwsError::NotAString(member))
}

fn base64_member(member: &'static str, text: &str) -> Result<Vec<u8>, JwsError> {
    b64::decode(text).map_err(|error| JwsError::Base64 { member, error })
}
