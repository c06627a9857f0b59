//! Every bound of the ACME protocol pieces, named: what a JWS, a key and a node's nonce store
//! may hold. Bounds a standard or ring fixes cite where they come from.

// A JWS request body (`jws`).

/// Largest JWS request body accepted, in bytes. The largest legitimate request is a finalize
/// carrying a CSR: `certus-ca` accepts at most 16 KiB of DER, which base64url makes 21.9 KiB,
/// and the payload's own base64url 29.2 KiB, plus a protected header with at most an
/// RSA-8192 JWK (1.4 KiB). 64 KiB leaves room and still stops a body from costing more than a
/// few decodes of that size.
pub const JWS_BYTES_MAX: usize = 64 * 1024;

// An account key (`jwk`).

/// Smallest RSA modulus of an account key, in bits (ring's `RSA_PKCS1_2048_8192_SHA256`).
pub const RSA_BITS_MIN: usize = 2048;
/// Largest RSA modulus of an account key, in bits (ring's `RSA_PKCS1_2048_8192_SHA256`).
pub const RSA_BITS_MAX: usize = 8192;
/// Smallest RSA public exponent ring verifies with.
pub const RSA_EXPONENT_MIN: u64 = 3;
/// Largest RSA public exponent ring verifies with: 2^33 - 1 (ring's `PublicExponent::MAX`,
/// which bounds the cost of a verification).
pub const RSA_EXPONENT_MAX: u64 = (1 << 33) - 1;

// A node's nonces (`nonce`).

/// Default number of nonces a node keeps outstanding (issued, not yet used); past it the
/// oldest is forgotten and its use answered `badNonce` (the client retries with the fresh nonce
/// that answer carries). Each costs about 100 bytes (16 bytes twice, a sequence number twice,
/// B-tree overhead), so 100,000 is about 10 MB, and a client would have to wait through
/// 100,000 other requests to this node before using its nonce to see one evicted.
pub const NONCES_OUTSTANDING_MAX: usize = 100_000;

// A timestamp written as RFC 3339 (`wire`).

/// Latest time `wire::rfc3339` writes, in milliseconds since the Unix epoch:
/// 9999-12-31T23:59:59.999Z. RFC 3339 (§5.6 `date-fullyear`) has four-digit years.
pub const RFC3339_MS_MAX: u64 = 253_402_300_799_999;
