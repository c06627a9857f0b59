//! The ACME resources as JSON (RFC 8555 §7.1, §7.3 to §7.6), with the RFC's member names: what
//! clients send (requests) and what the server answers (objects), and the RFC 3339 timestamps
//! they carry.
//!
//! Requests ignore members they do not know (RFC 8555 §7.1 lets clients and servers add
//! fields). Absent optional members are left out when writing, never written as `null`.

use serde::{Deserialize, Serialize};

use crate::b64::{self, B64Error};
use crate::limits::RFC3339_MS_MAX;
use crate::problem::Problem;

pub use crate::identifier::Identifier;

/// The directory (RFC 8555 §7.1.1): the URLs of the server's operations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Directory {
    /// Where to get a fresh nonce.
    pub new_nonce: String,
    /// Where to create or find an account.
    pub new_account: String,
    /// Where to create an order.
    pub new_order: String,
    /// Where to revoke a certificate.
    pub revoke_cert: String,
    /// Where to change an account's key.
    pub key_change: String,
    /// Facts about the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<DirectoryMeta>,
}

/// The directory's `meta` object (RFC 8555 §7.1.1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryMeta {
    /// The current terms of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms_of_service: Option<String>,
    /// A web page about the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub website: Option<String>,
    /// The CAA issuer domains that name this server (RFC 8659).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caa_identities: Option<Vec<String>>,
    /// Whether newAccount requires external account binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_account_required: Option<bool>,
}

/// A newAccount request's payload (RFC 8555 §7.3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewAccount {
    /// Contact URLs (`mailto:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<Vec<String>>,
    /// Whether the client agrees to the terms of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms_of_service_agreed: Option<bool>,
    /// Only look the account up, never create it (RFC 8555 §7.3.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_return_existing: Option<bool>,
    /// An external account binding JWS (RFC 8555 §7.3.4), kept as sent; not checked here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_account_binding: Option<serde_json::Value>,
}

/// An account update's payload (RFC 8555 §7.3.2, §7.3.6).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountUpdate {
    /// The new contact URLs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<Vec<String>>,
    /// `deactivated` to deactivate the account; no other value may be set by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AccountStatus>,
}

/// An account's status (RFC 8555 §7.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccountStatus {
    /// In use.
    Valid,
    /// Deactivated by its holder.
    Deactivated,
    /// Revoked by the server.
    Revoked,
}

/// An account object (RFC 8555 §7.1.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountObject {
    /// The account's status.
    pub status: AccountStatus,
    /// Its contact URLs.
    #[serde(default)]
    pub contact: Vec<String>,
    /// The URL of its orders list.
    pub orders: String,
    /// Whether its holder agreed to the terms of service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terms_of_service_agreed: Option<bool>,
}

/// A newOrder request's payload (RFC 8555 §7.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewOrder {
    /// The identifiers the certificate is for.
    pub identifiers: Vec<Identifier>,
    /// The requested start of validity, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// The requested end of validity, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
}

/// An order's status (RFC 8555 §7.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    /// Some authorization is not valid yet.
    Pending,
    /// Every authorization is valid: the order can be finalized.
    Ready,
    /// Finalized; the certificate is being issued.
    Processing,
    /// The certificate is issued.
    Valid,
    /// An authorization failed, the order expired, or issuance failed.
    Invalid,
}

/// An order object (RFC 8555 §7.1.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderObject {
    /// The order's status.
    pub status: OrderStatus,
    /// When it expires, RFC 3339 (required while pending or valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// The identifiers it is for.
    pub identifiers: Vec<Identifier>,
    /// The requested start of validity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// The requested end of validity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// Why it is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
    /// The URLs of its authorizations.
    pub authorizations: Vec<String>,
    /// Where to finalize it.
    pub finalize: String,
    /// Where to download the certificate, once valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
}

/// An authorization's status (RFC 8555 §7.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthorizationStatus {
    /// No challenge has succeeded yet.
    Pending,
    /// A challenge succeeded.
    Valid,
    /// A challenge failed, or the authorization was refused.
    Invalid,
    /// Deactivated by the client.
    Deactivated,
    /// Past its expiry.
    Expired,
    /// Revoked by the server.
    Revoked,
}

/// An authorization object (RFC 8555 §7.1.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationObject {
    /// The identifier it authorizes (for a wildcard, without the `*.`).
    pub identifier: Identifier,
    /// Its status.
    pub status: AuthorizationStatus,
    /// When it expires, RFC 3339 (required once valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// The ways to prove control of the identifier.
    pub challenges: Vec<ChallengeObject>,
    /// Whether the order asked for `*.` the identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wildcard: Option<bool>,
}

/// A challenge's type (RFC 8555 §8.3, §8.4; RFC 8737).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChallengeType {
    /// `http-01`: the key authorization at `/.well-known/acme-challenge/<token>`.
    #[serde(rename = "http-01")]
    Http01,
    /// `dns-01`: its digest in a `_acme-challenge` TXT record.
    #[serde(rename = "dns-01")]
    Dns01,
    /// `tls-alpn-01`: its digest in a certificate served over the `acme-tls/1` protocol.
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

/// A challenge's status (RFC 8555 §7.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChallengeStatus {
    /// Not attempted yet.
    Pending,
    /// The client asked for validation; it is under way.
    Processing,
    /// Validation succeeded.
    Valid,
    /// Validation failed.
    Invalid,
}

/// A challenge object (RFC 8555 §7.1.5, §8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChallengeObject {
    /// The challenge type.
    #[serde(rename = "type")]
    pub kind: ChallengeType,
    /// Where to ask for validation.
    pub url: String,
    /// Its status.
    pub status: ChallengeStatus,
    /// The token (at least 128 bits of entropy, base64url; RFC 8555 §8.3).
    pub token: String,
    /// When it was validated, RFC 3339 (once valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validated: Option<String>,
    /// Why validation failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// A finalize request's payload (RFC 8555 §7.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finalize {
    /// The CSR, DER in base64url.
    pub csr: String,
}

impl Finalize {
    /// The CSR's DER bytes.
    pub fn csr_der(&self) -> Result<Vec<u8>, B64Error> {
        b64::decode(&self.csr)
    }
}

/// A revokeCert request's payload (RFC 8555 §7.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokeCert {
    /// The certificate, DER in base64url.
    pub certificate: String,
    /// The CRL reason code (RFC 5280 §5.3.1). Kept as any integer so that an unknown one can be
    /// answered `badRevocationReason` rather than `malformed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<i64>,
}

impl RevokeCert {
    /// The certificate's DER bytes.
    pub fn certificate_der(&self) -> Result<Vec<u8>, B64Error> {
        b64::decode(&self.certificate)
    }
}

/// A key-change inner payload (RFC 8555 §7.3.5); `jws::verify_key_change` checks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyChange {
    /// The account URL.
    pub account: String,
    /// The account's current key, as a JWK.
    pub old_key: serde_json::Value,
}

/// Milliseconds per day.
const DAY_MS: u64 = 86_400_000;

/// `ms_since_epoch` as an RFC 3339 timestamp in UTC with second precision, e.g.
/// `2000-02-29T00:00:00Z` (milliseconds are dropped, not rounded: a time is never written later
/// than it is).
///
/// # Panics
///
/// Past [`RFC3339_MS_MAX`] (the end of year 9999): RFC 3339 years have four digits.
pub fn rfc3339(ms_since_epoch: u64) -> String {
    assert!(
        ms_since_epoch <= RFC3339_MS_MAX,
        "{ms_since_epoch} ms is past 9999-12-31T23:59:59Z, the last time RFC 3339 can write"
    );
    let days = ms_since_epoch / DAY_MS;
    let seconds_of_day = (ms_since_epoch % DAY_MS) / 1000;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds_of_day / 3600,
        seconds_of_day / 60 % 60,
        seconds_of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: Howard Hinnant's `civil_from_days`
/// (<https://howardhinnant.github.io/date_algorithms.html>), for days on or after the epoch.
/// Years are counted from March, so that the leap day ends a year; an era is 400 years,
/// 146,097 days.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Shift the epoch to 0000-03-01, 719,468 days before 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097; // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365; // [0, 399]
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100); // [0, 365]
    let month_from_march = (5 * day_of_year + 2) / 153; // [0, 11]
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1; // [1, 31]
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    }; // [1, 12]
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_from_days_at_era_and_leap_boundaries() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(365), (1971, 1, 1));
        // 2000 is a leap year (divisible by 400); 2100 is not (by 100).
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(47_540), (2100, 2, 28));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    }
}
