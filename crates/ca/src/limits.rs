//! Every bound of issuance, named: what a CSR, a CA, an HTTP-01 test, a poll policy, an
//! upstream CA's order, a CRL and a certificate read back may hold. Some are the limits of a
//! standard (RFC 1035's name lengths, X.520's common name, the CA/Browser Forum's validity), each
//! cited where it is defined.

use std::time::Duration;

// A CSR (`csr`).

/// Largest CSR accepted, in DER bytes. Real CSRs are under 4 KiB even with RSA-4096 and a
/// hundred names; the state machine stores at most as much (`SESSION_CSR_BYTES_MAX`).
pub const CSR_DER_BYTES_MAX: usize = 16 * 1024;
/// Largest PEM text accepted: [`CSR_DER_BYTES_MAX`] in base64 (4/3 of it) with line breaks and
/// the two boundary lines, rounded up.
pub const CSR_PEM_BYTES_MAX: usize = 24 * 1024;
/// Most distinct names one CSR may ask for (the state machine's `SESSION_NAMES_MAX`, the common
/// limit of public CAs).
pub const CSR_NAMES_MAX: usize = 100;
/// Longest DNS name, in bytes (RFC 1035 §2.3.4, without the trailing dot).
pub const DNS_NAME_BYTES_MAX: usize = 253;
/// Longest DNS label, in bytes (RFC 1035 §2.3.4).
pub const DNS_LABEL_BYTES_MAX: usize = 63;
/// Smallest RSA modulus a CSR's key may have, in bits.
pub const RSA_BITS_MIN: usize = 2048;
/// Largest RSA modulus a CSR's key may have, in bits.
pub const RSA_BITS_MAX: usize = 8192;

// The built-in issuer (`issuer`).

/// The longest leaf validity: 398 days, the CA/Browser Forum's limit for server certificates.
pub const LEAF_VALIDITY_MAX: Duration = Duration::from_secs(398 * 24 * 60 * 60);
/// Longest CA common name, in bytes (X.520 ub-common-name, RFC 5280 Appendix A).
pub const CA_COMMON_NAME_BYTES_MAX: usize = 64;
/// Largest CA certificate or key PEM accepted.
pub const CA_PEM_BYTES_MAX: usize = 64 * 1024;

// Revocation lists (`crl`).

/// Most entries in one CRL. At about 40 bytes an entry a full list is some 40 MB, as much as a
/// CRL client should be asked to fetch; a CA revoking more needs partitioned CRLs.
pub const CRL_ENTRIES_MAX: usize = 1_000_000;
/// Longest serial number in a CRL entry, in the DER INTEGER's content bytes (RFC 5280 §4.1.2.2:
/// "Conforming CAs MUST NOT use serialNumber values longer than 20 octets").
pub const CRL_SERIAL_BYTES_MAX: usize = 20;

// Certificates read back (`certificate`).

/// Largest certificate accepted, in DER bytes. A leaf with a hundred names and an RSA-8192 key
/// is under 8 KiB.
pub const CERTIFICATE_DER_BYTES_MAX: usize = 64 * 1024;
/// Largest PEM chain accepted: as much as an upstream CA's answer may hold
/// ([`UPSTREAM_RESPONSE_BYTES_MAX`]).
pub const CERTIFICATE_PEM_CHAIN_BYTES_MAX: usize = UPSTREAM_RESPONSE_BYTES_MAX;

// The HTTP-01 tester (`http01`).

/// The most body a configuration may allow.
pub const HTTP01_BODY_BYTES_LIMIT: usize = 1024 * 1024;
/// Most addresses of one name tried, in the order the resolver gave them.
pub const HTTP01_ADDRESSES_MAX: usize = 4;
/// Longest token accepted, in bytes (the state machine's `CHALLENGE_TOKEN_BYTES_MAX`).
pub const HTTP01_TOKEN_BYTES_MAX: usize = 256;
/// Longest reason, in bytes (the state machine's `REASON_BYTES_MAX`).
pub const HTTP01_REASON_BYTES_MAX: usize = 1024;

// A poll policy (`poller`).

/// The largest growth factor between two waits.
pub const POLL_FACTOR_MAX: u32 = 10;
/// The largest jitter, in percent of a wait: at 50 % the shortest wait is half the nominal one.
pub const POLL_JITTER_PERCENT_MAX: u32 = 50;
/// The longest first wait and cap: one day.
pub const POLL_WAIT_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// The longest deadline (`max_wait_ms`): a week (an order waiting on human approval may take a
/// day or more).
pub const POLL_MAX_WAIT_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
/// The most attempts a policy may allow in one call to [`poll`](crate::poller::poll); a policy
/// whose shortest possible waits would allow more is refused.
pub const POLL_ATTEMPTS_MAX: u32 = 10_000;

// An upstream CA's order protocol (`upstream`).

/// The largest answer read from the adapter: a PEM chain is a few KiB.
pub const UPSTREAM_RESPONSE_BYTES_MAX: usize = 1024 * 1024;
/// The largest CSR sent.
pub const UPSTREAM_CSR_BYTES_MAX: usize = 64 * 1024;
/// The most names in one order (public CAs allow about 100).
pub const UPSTREAM_NAMES_MAX: usize = 100;
/// The longest name (a DNS name is at most 253 characters).
pub const UPSTREAM_NAME_BYTES_MAX: usize = 253;
/// The longest order id.
pub const UPSTREAM_ORDER_ID_CHARS_MAX: usize = 128;
/// The longest idempotency key.
pub const UPSTREAM_IDEMPOTENCY_KEY_CHARS_MAX: usize = 128;
/// The most certificates in an issued chain.
pub const UPSTREAM_CHAIN_CERTS_MAX: usize = 10;
/// The longest reason kept from an adapter's answer (it ends up in logs and session state).
pub const UPSTREAM_REASON_CHARS_MAX: usize = 512;
