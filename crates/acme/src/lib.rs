//! The pure pieces of ACME (RFC 8555): what a server needs to read, check and answer requests,
//! with no IO, no clock, no randomness of its own and no state beyond a node's nonces. Times and
//! random bytes are arguments, so the simulation controls them.
//!
//! - [`b64`]: base64url without padding, strict, the encoding of every JOSE member.
//! - [`alg`]: the JWS algorithms accepted (ES256, ES384, RS256, EdDSA).
//! - [`jwk`]: account keys as JSON Web Keys: parsed, thumbprinted (RFC 7638), verifying.
//! - [`jws`]: request bodies (flattened JWS) and their protected header; key-change checks.
//! - [`error`]: why a key or a request is refused, and the problem document each answers.
//! - [`problem`]: problem documents with RFC 8555 §6.7's error types and their HTTP statuses.
//! - [`nonce`]: a node's outstanding anti-replay nonces, bounded, each accepted once.
//! - [`identifier`]: the identifier an order or authorization is about.
//! - [`wire`]: the ACME resources as JSON (directory, account, order, authorization, ...) and
//!   RFC 3339 timestamps.
//! - [`limits`]: every bound of the above, named.

#![deny(missing_docs, unreachable_pub)]

pub mod alg;
pub mod b64;
pub mod error;
pub mod identifier;
pub mod jwk;
pub mod jws;
pub mod limits;
pub mod nonce;
pub mod problem;
pub mod wire;

pub use alg::Alg;
pub use error::{JwkError, JwsError};
pub use identifier::Identifier;
pub use jwk::{Jwk, KeyType};
pub use jws::{KeyRef, KeyRollover, ParsedJws, ProtectedHeader, verify_key_change};
pub use nonce::{NoncePrefix, NonceStore};
pub use problem::{PROBLEM_CONTENT_TYPE, Problem, ProblemType, Subproblem};
