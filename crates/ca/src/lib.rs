//! Issuance for CA sessions (seeds 000 and 001): what the session daemons do between claiming a
//! step and completing it.
//!
//! - [`csr`]: a certificate signing request checked before a session is created: it parses, its
//!   self-signature verifies, and its names are the session's.
//! - [`issuer`]: the built-in issuer, which signs a checked CSR with the cluster's CA key.
//! - [`crl`]: the CA's certificate revocation list (RFC 5280 §5), signed with the same key.
//! - [`certificate`]: certificates read back for revocation: serial, key, names, notAfter, and
//!   the leaf of a PEM chain.
//! - [`http01`]: the HTTP-01 tester: fetch `http://NAME/.well-known/acme-challenge/TOKEN` and
//!   compare the body with the key authorization.
//! - [`poller`]: bounded polling of an asynchronous upstream CA (seed 001): the backoff schedule
//!   with jitter, the deadline, status triage and `Retry-After`.
//! - [`upstream`]: the upstream-CA connector interface and an HTTP connector.
//! - [`limits`]: every bound of the above, named.

#![deny(missing_docs, unreachable_pub)]

pub mod certificate;
pub mod crl;
pub mod csr;
pub mod http01;
pub mod issuer;
pub mod limits;
pub mod poller;
pub mod upstream;
