//! ACME (RFC 8555): accounts, orders with their authorizations, and revocations, replicated.
//!
//! What is decided here is what every node must agree on: which key names which account, which
//! orders exist and where each stands, which challenge a client said is ready and what its
//! validation found, and which serial numbers are revoked. What needs IO or cryptography happens
//! at the node before a command is proposed (a JWS verified, a CSR checked, a token drawn, an
//! HTTP-01 fetch), so this module stays pure.
//!
//! An order's issuance is a session (`crate::sessions`): finalizing a ready order creates a
//! session in the issue stage, with the order's names, the CSR and the challenges the order
//! validated, and the session daemons issue it as they issue any session. When the session ends
//! ([`Acme::follow_sessions`], run after every session command and tick), the order takes the
//! certificate (valid) or the failure (invalid), and the session is acknowledged.
//!
//! Invariants (checked by [`Acme::check`]): every order belongs to a stored account; an order's
//! authorizations are sorted by name, distinct and one per identifier; a challenge is valid only
//! once validated; an order with a session has every authorization valid; an order has a
//! certificate only with a session; the indexes are what the records say.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::challenges::{ChallengeToken, KeyAuthorization};
use crate::claims::{self, Place};
use crate::limits::{
    ACME_ACCOUNTS_MAX, ACME_CONTACT_BYTES_MAX, ACME_CONTACTS_MAX, ACME_IDENTIFIERS_MAX,
    ACME_JWK_BYTES_MAX, ACME_ORDER_LIFETIME_MS, ACME_ORDER_RETENTION_MS, ACME_ORDERS_MAX,
    ACME_ORDERS_PER_ACCOUNT_MAX, ACME_ORDERS_PER_WINDOW_MAX, ACME_ORDERS_WINDOW_MS,
    ACME_REVOCATIONS_MAX, ACME_SERIAL_HEX_MAX, SESSION_CSR_BYTES_MAX, TICK_ACME_ORDERS_MAX,
};
use crate::sessions::{
    DnsName, Ended, Ending, Reason, SessionChallenge, SessionError, SessionId, Sessions,
};
use crate::text::TextError;

/// An account's id: the log index of the command that created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AccountId(pub u64);

/// An order's id: the log index of the command that created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OrderId(pub u64);

impl std::fmt::Display for AccountId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::fmt::Display for OrderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An account's public key, as the node checked it: the JWK as canonical JSON and its RFC 7638
/// thumbprint (which names the account's key and enters every key authorization).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountKey {
    /// The public JWK, canonical JSON, 1 to [`ACME_JWK_BYTES_MAX`] bytes of visible ASCII.
    pub jwk: String,
    /// base64url(SHA-256) of the canonical JWK: 43 characters.
    pub thumbprint: String,
}

impl AccountKey {
    fn check(&self) -> Result<(), AcmeError> {
        let jwk_ok = !self.jwk.is_empty()
            && self.jwk.len() <= ACME_JWK_BYTES_MAX
            && self.jwk.bytes().all(|b| b.is_ascii_graphic());
        let thumbprint_ok = self.thumbprint.len() == 43
            && self
                .thumbprint
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if jwk_ok && thumbprint_ok {
            Ok(())
        } else {
            Err(AcmeError::Malformed(
                "an account key is a canonical JWK of at most 2048 bytes and its 43-character \
                 thumbprint"
                    .to_owned(),
            ))
        }
    }
}

/// Whether an account may act.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AccountStatus {
    /// It may.
    Valid,
    /// Its holder deactivated it; it can never act again (RFC 8555 §7.3.6).
    Deactivated,
}

/// An ACME account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Its id.
    pub id: AccountId,
    /// Its current key.
    pub key: AccountKey,
    /// Its contact URLs (`mailto:` and the like), as the client sent them.
    pub contact: Vec<String>,
    /// Whether it may act.
    pub status: AccountStatus,
    /// Machine time it was created.
    pub created_ms: u64,
    /// Start of the window its new orders are counted in.
    pub orders_window_start_ms: u64,
    /// New orders in that window.
    pub orders_in_window: u32,
}

/// Where an authorization's one HTTP-01 challenge stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChallengeStatus {
    /// Waiting for the client to say it is ready.
    Pending,
    /// The client is ready; a validator fetches it.
    Processing,
    /// The key authorization was served.
    Valid,
    /// The validation failed (the authorization, and its order, are invalid).
    Invalid,
}

/// What an authorization's status is (RFC 8555 §7.1.6), derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthorizationStatus {
    /// Not yet validated.
    Pending,
    /// Validated.
    Valid,
    /// Its validation failed.
    Invalid,
    /// Its client deactivated it.
    Deactivated,
    /// Not validated within the order's lifetime.
    Expired,
}

/// One identifier of an order and its HTTP-01 challenge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authorization {
    /// The DNS name.
    pub identifier: DnsName,
    /// The challenge's token (drawn by the node that took the order).
    pub token: ChallengeToken,
    /// The challenge's status.
    pub challenge: ChallengeStatus,
    /// Machine time it was validated.
    pub validated_ms: Option<u64>,
    /// Why the validation failed.
    pub error: Option<Reason>,
    /// The client deactivated it.
    pub deactivated: bool,
}

impl Authorization {
    /// Its status at machine time `now_ms`, for an order expiring at `expires_ms`.
    pub fn status(&self, expires_ms: u64, now_ms: u64) -> AuthorizationStatus {
        match (self.deactivated, self.challenge) {
            (true, _) => AuthorizationStatus::Deactivated,
            (false, ChallengeStatus::Valid) => AuthorizationStatus::Valid,
            (false, ChallengeStatus::Invalid) => AuthorizationStatus::Invalid,
            (false, _) if now_ms >= expires_ms => AuthorizationStatus::Expired,
            (false, _) => AuthorizationStatus::Pending,
        }
    }
}

/// What an order's status is (RFC 8555 §7.1.6), derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OrderStatus {
    /// Some authorization is not yet valid.
    Pending,
    /// Every authorization is valid; waiting for the CSR.
    Ready,
    /// Finalized; its session issues the certificate.
    Processing,
    /// Issued.
    Valid,
    /// An authorization failed, it expired, or issuance failed.
    Invalid,
}

/// An order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// Its id.
    pub id: OrderId,
    /// The account that placed it.
    pub account: AccountId,
    /// Machine time it was created.
    pub created_ms: u64,
    /// Machine time after which it can no longer become ready or be finalized.
    pub expires_ms: u64,
    /// One per identifier, sorted by name.
    pub authorizations: Vec<Authorization>,
    /// The CSR it was finalized with (DER).
    #[serde(with = "serde_bytes")]
    pub csr: Option<Vec<u8>>,
    /// The session issuing it, once finalized.
    pub session: Option<SessionId>,
    /// The certificate chain (PEM), once issued.
    #[serde(with = "serde_bytes")]
    pub certificate: Option<Vec<u8>>,
    /// Why issuance failed.
    pub error: Option<Reason>,
}

impl Order {
    /// Its status at machine time `now_ms`.
    pub fn status(&self, now_ms: u64) -> OrderStatus {
        if self.certificate.is_some() {
            return OrderStatus::Valid;
        }
        if self.error.is_some() {
            return OrderStatus::Invalid;
        }
        if self.session.is_some() {
            return OrderStatus::Processing;
        }
        let statuses: Vec<AuthorizationStatus> = self
            .authorizations
            .iter()
            .map(|authz| authz.status(self.expires_ms, now_ms))
            .collect();
        if statuses.iter().any(|status| {
            matches!(
                status,
                AuthorizationStatus::Invalid
                    | AuthorizationStatus::Deactivated
                    | AuthorizationStatus::Expired
            )
        }) || now_ms >= self.expires_ms
        {
            return OrderStatus::Invalid;
        }
        if statuses.iter().all(|s| *s == AuthorizationStatus::Valid) {
            OrderStatus::Ready
        } else {
            OrderStatus::Pending
        }
    }

    /// The names it certifies, sorted.
    pub fn names(&self) -> Vec<DnsName> {
        self.authorizations
            .iter()
            .map(|authz| authz.identifier.clone())
            .collect()
    }
}

/// A revoked certificate, by serial number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// The serial number, lowercase hex without leading zero octets' padding removed: as the
    /// certificate's DER integer bytes.
    pub serial: String,
    /// The RFC 5280 §5.3.1 reason code (0–10, not 7).
    pub reason: u8,
    /// Machine time it was revoked.
    pub revoked_ms: u64,
}

/// What an authorization's change may depend on of its order.
#[derive(Clone, Copy, Debug)]
struct OrderFacts {
    expires_ms: u64,
    finalized: bool,
}

/// The ACME commands.
///
/// The log holds them encoded by variant position: a new variant goes at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcmeCommand {
    /// Register an account for `key`, or find the one it already names (RFC 8555 §7.3).
    NewAccount {
        /// The account's key, checked by the node (the request was signed with it).
        key: AccountKey,
        /// Contact URLs.
        contact: Vec<String>,
        /// Only find an existing account (`onlyReturnExisting`).
        only_existing: bool,
    },
    /// Change an account's contacts, or deactivate it.
    UpdateAccount {
        /// The account (the request was signed with its key).
        account: AccountId,
        /// New contact URLs, when given.
        contact: Option<Vec<String>>,
        /// Deactivate it.
        deactivate: bool,
    },
    /// Replace an account's key (RFC 8555 §7.3.5; the node checked both signatures).
    ChangeKey {
        /// The account.
        account: AccountId,
        /// Its key when the request was checked: refused if it changed since.
        old_thumbprint: String,
        /// The new key.
        new_key: AccountKey,
    },
    /// Place an order for names, each with a fresh HTTP-01 token.
    NewOrder {
        /// The account.
        account: AccountId,
        /// The names, sorted and distinct.
        identifiers: Vec<DnsName>,
        /// One fresh, unguessable token per name, in the same order (drawn by the node).
        tokens: Vec<ChallengeToken>,
    },
    /// The client serves the key authorization: validate the challenge (RFC 8555 §7.5.1).
    RespondChallenge {
        /// The account.
        account: AccountId,
        /// The order.
        order: OrderId,
        /// The authorization's position in the order.
        authorization: u32,
    },
    /// What a validator's HTTP-01 fetch found.
    RecordValidation {
        /// The order.
        order: OrderId,
        /// The authorization's position in the order.
        authorization: u32,
        /// The token fetched (refused if the order's token differs).
        token: ChallengeToken,
        /// Why it failed; none when the key authorization was served.
        error: Option<Reason>,
    },
    /// The client gives up an authorization (RFC 8555 §7.5.2).
    DeactivateAuthorization {
        /// The account.
        account: AccountId,
        /// The order.
        order: OrderId,
        /// The authorization's position in the order.
        authorization: u32,
    },
    /// Finalize a ready order with a CSR the node checked against its names: a session in the
    /// issue stage issues it.
    Finalize {
        /// The account.
        account: AccountId,
        /// The order.
        order: OrderId,
        /// The CSR (DER).
        #[serde(with = "serde_bytes")]
        csr: Vec<u8>,
    },
    /// Revoke a certificate by serial number (the node checked the requester's right to).
    Revoke {
        /// The serial, lowercase hex.
        serial: String,
        /// The RFC 5280 reason code.
        reason: u8,
    },
}

/// What a successful ACME command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcmeReply {
    /// The account, after the command.
    Account {
        /// The account.
        account: Account,
        /// It existed before (nothing was created).
        existing: bool,
    },
    /// The order, after the command.
    Order(Order),
    /// The serial was revoked.
    Revoked,
}

/// Why an ACME command was refused. Each maps to an RFC 8555 §6.7 error type at the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AcmeError {
    /// Text failed its check.
    #[error(transparent)]
    InvalidText(#[from] TextError),
    /// A request's content does not fit (malformed).
    #[error("{0}")]
    Malformed(String),
    /// No account for the key (`onlyReturnExisting`) or the id (accountDoesNotExist).
    #[error("no such account")]
    NoAccount,
    /// The account was deactivated (unauthorized).
    #[error("account {0} is deactivated")]
    Deactivated(AccountId),
    /// The order does not exist, or belongs to another account (not found).
    #[error("no order {0} for this account")]
    NoOrder(OrderId),
    /// The authorization does not exist (not found).
    #[error("order {order} has no authorization {authorization}")]
    NoAuthorization {
        /// The order.
        order: OrderId,
        /// The position asked for.
        authorization: u32,
    },
    /// The order is not ready to finalize (orderNotReady).
    #[error("order {order} is {status:?}, not ready")]
    NotReady {
        /// The order.
        order: OrderId,
        /// Its status.
        status: OrderStatus,
    },
    /// The challenge cannot take that step (malformed).
    #[error("the challenge is {status:?}")]
    ChallengeState {
        /// The challenge's status.
        status: ChallengeStatus,
    },
    /// Another account has that key (RFC 8555 §7.3.5: conflict).
    #[error("the key belongs to account {0}")]
    KeyInUse(AccountId),
    /// A bound was reached (rateLimited).
    #[error("{what}: at most {max}")]
    RateLimited {
        /// What was counted.
        what: String,
        /// The bound.
        max: u64,
        /// Machine time at which a retry may succeed, when known.
        retry_at_ms: Option<u64>,
    },
    /// The serial is already revoked (alreadyRevoked).
    #[error("certificate {0} is already revoked")]
    AlreadyRevoked(String),
    /// Creating the issuing session was refused.
    #[error("issuance could not start: {0}")]
    Session(#[from] SessionError),
}

/// The ACME tables and their indexes. The indexes are derived from the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Acme {
    last_id: u64,
    accounts: BTreeMap<AccountId, Account>,
    orders: BTreeMap<OrderId, Order>,
    revocations: BTreeMap<String, Revocation>,
    /// Derived: account key thumbprint → account.
    by_thumbprint: BTreeMap<String, AccountId>,
    /// Derived: each account's orders.
    by_account: BTreeSet<(AccountId, OrderId)>,
    /// Derived: orders whose session has not ended yet.
    issuing: BTreeMap<SessionId, OrderId>,
    /// Derived: challenges a validator should fetch.
    validating: BTreeSet<(OrderId, u32)>,
    /// Derived: `(created_ms, id)` of every order, for retention.
    by_created: BTreeSet<(u64, OrderId)>,
}

/// What a snapshot stores of [`Acme`] (indexes are rebuilt).
#[derive(Serialize)]
pub(crate) struct AcmeRecordsRef<'a> {
    last_id: u64,
    accounts: Vec<&'a Account>,
    orders: Vec<&'a Order>,
    revocations: Vec<&'a Revocation>,
}

/// [`AcmeRecordsRef`] as read back.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct AcmeRecords {
    last_id: u64,
    accounts: Vec<Account>,
    orders: Vec<Order>,
    revocations: Vec<Revocation>,
}

impl Acme {
    pub(crate) fn apply(
        &mut self,
        command: AcmeCommand,
        sessions: &mut Sessions,
        now_ms: u64,
        log_index: u64,
    ) -> Result<AcmeReply, AcmeError> {
        match command {
            AcmeCommand::NewAccount {
                key,
                contact,
                only_existing,
            } => self.new_account(key, contact, only_existing, now_ms, log_index),
            AcmeCommand::UpdateAccount {
                account,
                contact,
                deactivate,
            } => self.update_account(account, contact, deactivate),
            AcmeCommand::ChangeKey {
                account,
                old_thumbprint,
                new_key,
            } => self.change_key(account, &old_thumbprint, new_key),
            AcmeCommand::NewOrder {
                account,
                identifiers,
                tokens,
            } => self.new_order(account, identifiers, tokens, now_ms, log_index),
            AcmeCommand::RespondChallenge {
                account,
                order,
                authorization,
            } => self.respond(account, order, authorization, now_ms),
            AcmeCommand::RecordValidation {
                order,
                authorization,
                token,
                error,
            } => self.record_validation(order, authorization, &token, error, now_ms),
            AcmeCommand::DeactivateAuthorization {
                account,
                order,
                authorization,
            } => self.deactivate_authorization(account, order, authorization, now_ms),
            AcmeCommand::Finalize {
                account,
                order,
                csr,
            } => self.finalize(account, order, csr, sessions, now_ms, log_index),
            AcmeCommand::Revoke { serial, reason } => self.revoke(serial, reason, now_ms),
        }
    }

    fn new_account(
        &mut self,
        key: AccountKey,
        contact: Vec<String>,
        only_existing: bool,
        now_ms: u64,
        log_index: u64,
    ) -> Result<AcmeReply, AcmeError> {
        key.check()?;
        check_contact(&contact)?;
        if let Some(id) = self.by_thumbprint.get(&key.thumbprint) {
            return Ok(AcmeReply::Account {
                account: self.accounts[id].clone(),
                existing: true,
            });
        }
        if only_existing {
            return Err(AcmeError::NoAccount);
        }
        if self.accounts.len() >= ACME_ACCOUNTS_MAX {
            return Err(AcmeError::RateLimited {
                what: "accounts".to_owned(),
                max: ACME_ACCOUNTS_MAX as u64,
                retry_at_ms: None,
            });
        }
        self.last_id = claims::issue(self.last_id, log_index);
        let account = Account {
            id: AccountId(self.last_id),
            key,
            contact,
            status: AccountStatus::Valid,
            created_ms: now_ms,
            orders_window_start_ms: now_ms,
            orders_in_window: 0,
        };
        self.by_thumbprint
            .insert(account.key.thumbprint.clone(), account.id);
        self.accounts.insert(account.id, account.clone());
        Ok(AcmeReply::Account {
            account,
            existing: false,
        })
    }

    fn active_account(&mut self, id: AccountId) -> Result<&mut Account, AcmeError> {
        let account = self.accounts.get_mut(&id).ok_or(AcmeError::NoAccount)?;
        if account.status == AccountStatus::Deactivated {
            return Err(AcmeError::Deactivated(id));
        }
        Ok(account)
    }

    fn update_account(
        &mut self,
        id: AccountId,
        contact: Option<Vec<String>>,
        deactivate: bool,
    ) -> Result<AcmeReply, AcmeError> {
        if let Some(contact) = &contact {
            check_contact(contact)?;
        }
        let account = self.active_account(id)?;
        if let Some(contact) = contact {
            account.contact = contact;
        }
        if deactivate {
            account.status = AccountStatus::Deactivated;
        }
        Ok(AcmeReply::Account {
            account: account.clone(),
            existing: true,
        })
    }

    fn change_key(
        &mut self,
        id: AccountId,
        old_thumbprint: &str,
        new_key: AccountKey,
    ) -> Result<AcmeReply, AcmeError> {
        new_key.check()?;
        if let Some(&holder) = self.by_thumbprint.get(&new_key.thumbprint) {
            return Err(AcmeError::KeyInUse(holder));
        }
        let account = self.active_account(id)?;
        if account.key.thumbprint != old_thumbprint {
            return Err(AcmeError::Malformed(
                "the account's key changed since the request was signed; sign with its current \
                 key"
                .to_owned(),
            ));
        }
        let old = std::mem::replace(&mut account.key, new_key);
        let account = account.clone();
        self.by_thumbprint.remove(&old.thumbprint);
        self.by_thumbprint
            .insert(account.key.thumbprint.clone(), account.id);
        Ok(AcmeReply::Account {
            account,
            existing: true,
        })
    }

    fn new_order(
        &mut self,
        account_id: AccountId,
        identifiers: Vec<DnsName>,
        tokens: Vec<ChallengeToken>,
        now_ms: u64,
        log_index: u64,
    ) -> Result<AcmeReply, AcmeError> {
        if identifiers.is_empty() || identifiers.len() > ACME_IDENTIFIERS_MAX {
            return Err(AcmeError::Malformed(format!(
                "an order names 1 to {ACME_IDENTIFIERS_MAX} identifiers, not {}",
                identifiers.len()
            )));
        }
        if identifiers.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(AcmeError::Malformed(
                "the identifiers must be sorted and distinct".to_owned(),
            ));
        }
        if tokens.len() != identifiers.len()
            || tokens.iter().collect::<BTreeSet<_>>().len() != tokens.len()
        {
            return Err(AcmeError::Malformed(
                "one distinct token per identifier".to_owned(),
            ));
        }
        let stored = self
            .by_account
            .range((account_id, OrderId(0))..=(account_id, OrderId(u64::MAX)))
            .count();
        if self.orders.len() >= ACME_ORDERS_MAX {
            return Err(AcmeError::RateLimited {
                what: "orders stored in the cluster".to_owned(),
                max: ACME_ORDERS_MAX as u64,
                retry_at_ms: None,
            });
        }
        if stored >= ACME_ORDERS_PER_ACCOUNT_MAX {
            return Err(AcmeError::RateLimited {
                what: "orders stored per account".to_owned(),
                max: ACME_ORDERS_PER_ACCOUNT_MAX as u64,
                retry_at_ms: None,
            });
        }
        let account = self.active_account(account_id)?;
        if now_ms
            >= account
                .orders_window_start_ms
                .saturating_add(ACME_ORDERS_WINDOW_MS)
        {
            account.orders_window_start_ms = now_ms;
            account.orders_in_window = 0;
        }
        if account.orders_in_window >= ACME_ORDERS_PER_WINDOW_MAX {
            return Err(AcmeError::RateLimited {
                what: "new orders per account in three hours".to_owned(),
                max: ACME_ORDERS_PER_WINDOW_MAX.into(),
                retry_at_ms: Some(
                    account
                        .orders_window_start_ms
                        .saturating_add(ACME_ORDERS_WINDOW_MS),
                ),
            });
        }
        account.orders_in_window += 1;
        self.last_id = claims::issue(self.last_id, log_index);
        let order = Order {
            id: OrderId(self.last_id),
            account: account_id,
            created_ms: now_ms,
            expires_ms: now_ms.saturating_add(ACME_ORDER_LIFETIME_MS),
            authorizations: identifiers
                .into_iter()
                .zip(tokens)
                .map(|(identifier, token)| Authorization {
                    identifier,
                    token,
                    challenge: ChallengeStatus::Pending,
                    validated_ms: None,
                    error: None,
                    deactivated: false,
                })
                .collect(),
            csr: None,
            session: None,
            certificate: None,
            error: None,
        };
        self.put(order.clone());
        Ok(AcmeReply::Order(order))
    }

    /// Changes authorization `position` of order `id` (which must be `account`'s, when one is
    /// named), keeping the indexes. `change` sees the order's expiry and whether it is finalized;
    /// it changes the authorization only when it answers `Ok`, so a refusal changes nothing.
    fn change_authorization(
        &mut self,
        account: Option<AccountId>,
        id: OrderId,
        position: u32,
        change: impl FnOnce(OrderFacts, &mut Authorization) -> Result<(), AcmeError>,
    ) -> Result<AcmeReply, AcmeError> {
        match self.orders.get(&id) {
            Some(order) if account.is_none_or(|account| order.account == account) => {}
            _ => return Err(AcmeError::NoOrder(id)),
        }
        let mut order = self.take(id);
        let facts = OrderFacts {
            expires_ms: order.expires_ms,
            finalized: order.session.is_some(),
        };
        let result = authorization_mut(&mut order, position).and_then(|authz| change(facts, authz));
        self.put(order.clone());
        result.map(|()| AcmeReply::Order(order))
    }

    fn respond(
        &mut self,
        account: AccountId,
        id: OrderId,
        position: u32,
        now_ms: u64,
    ) -> Result<AcmeReply, AcmeError> {
        self.active_account(account)?;
        self.change_authorization(Some(account), id, position, |order, authz| {
            if authz.deactivated || now_ms >= order.expires_ms {
                return Err(AcmeError::Malformed(
                    "the authorization is deactivated or expired".to_owned(),
                ));
            }
            match authz.challenge {
                ChallengeStatus::Pending => {
                    authz.challenge = ChallengeStatus::Processing;
                    Ok(())
                }
                // Saying "ready" again is harmless (RFC 8555 §7.5.1 clients may retry).
                ChallengeStatus::Processing | ChallengeStatus::Valid => Ok(()),
                status => Err(AcmeError::ChallengeState { status }),
            }
        })
    }

    fn record_validation(
        &mut self,
        id: OrderId,
        position: u32,
        token: &ChallengeToken,
        error: Option<Reason>,
        now_ms: u64,
    ) -> Result<AcmeReply, AcmeError> {
        self.change_authorization(None, id, position, |_, authz| {
            if authz.token != *token {
                return Err(AcmeError::Malformed(
                    "the token validated is not the challenge's".to_owned(),
                ));
            }
            if authz.challenge != ChallengeStatus::Processing {
                return Err(AcmeError::ChallengeState {
                    status: authz.challenge,
                });
            }
            match error {
                None => {
                    authz.challenge = ChallengeStatus::Valid;
                    authz.validated_ms = Some(now_ms);
                }
                Some(reason) => {
                    authz.challenge = ChallengeStatus::Invalid;
                    authz.error = Some(reason);
                }
            }
            Ok(())
        })
    }

    fn deactivate_authorization(
        &mut self,
        account: AccountId,
        id: OrderId,
        position: u32,
        now_ms: u64,
    ) -> Result<AcmeReply, AcmeError> {
        self.active_account(account)?;
        self.change_authorization(Some(account), id, position, |order, authz| {
            if order.finalized {
                // Its issuance started on the strength of it: the order keeps what it was
                // issued on.
                return Err(AcmeError::Malformed(
                    "the order is finalized; its authorizations can no longer be deactivated"
                        .to_owned(),
                ));
            }
            match authz.status(order.expires_ms, now_ms) {
                AuthorizationStatus::Pending | AuthorizationStatus::Valid => {
                    authz.deactivated = true;
                    Ok(())
                }
                status => Err(AcmeError::Malformed(format!(
                    "an authorization that is {status:?} cannot be deactivated"
                ))),
            }
        })
    }

    fn finalize(
        &mut self,
        account: AccountId,
        id: OrderId,
        csr: Vec<u8>,
        sessions: &mut Sessions,
        now_ms: u64,
        log_index: u64,
    ) -> Result<AcmeReply, AcmeError> {
        if csr.is_empty() || csr.len() > SESSION_CSR_BYTES_MAX {
            return Err(AcmeError::Malformed(format!(
                "the CSR is {} bytes; 1 to {SESSION_CSR_BYTES_MAX} are allowed",
                csr.len()
            )));
        }
        let thumbprint = self.active_account(account)?.key.thumbprint.clone();
        let status = match self.orders.get(&id) {
            Some(order) if order.account == account => order.status(now_ms),
            _ => return Err(AcmeError::NoOrder(id)),
        };
        if status != OrderStatus::Ready {
            return Err(AcmeError::NotReady { order: id, status });
        }
        let order = &self.orders[&id];
        let challenges = order
            .authorizations
            .iter()
            .map(|authz| {
                Ok(SessionChallenge {
                    name: authz.identifier.clone(),
                    key_authorization: KeyAuthorization::new(format!(
                        "{}.{thumbprint}",
                        authz.token
                    ))?,
                    token: authz.token.clone(),
                    challtime_ms: now_ms,
                    satisfied: true,
                    failed: false,
                    times_tested: 1,
                    last_error: None,
                })
            })
            .collect::<Result<Vec<_>, TextError>>()?;
        let session =
            sessions.create_issuing(csr.clone(), order.names(), challenges, now_ms, log_index)?;
        let mut order = self.take(id);
        order.csr = Some(csr);
        order.session = Some(session);
        self.put(order.clone());
        Ok(AcmeReply::Order(order))
    }

    fn revoke(&mut self, serial: String, reason: u8, now_ms: u64) -> Result<AcmeReply, AcmeError> {
        check_serial(&serial)?;
        if reason > 10 || reason == 7 {
            return Err(AcmeError::Malformed(format!(
                "revocation reason {reason} is not an RFC 5280 reason code (0-10, not 7)"
            )));
        }
        if self.revocations.contains_key(&serial) {
            return Err(AcmeError::AlreadyRevoked(serial));
        }
        if self.revocations.len() >= ACME_REVOCATIONS_MAX {
            return Err(AcmeError::RateLimited {
                what: "revocations recorded".to_owned(),
                max: ACME_REVOCATIONS_MAX as u64,
                retry_at_ms: None,
            });
        }
        self.revocations.insert(
            serial.clone(),
            Revocation {
                serial,
                reason,
                revoked_ms: now_ms,
            },
        );
        Ok(AcmeReply::Revoked)
    }

    /// Brings every order whose session ended up to date: a done session gives its certificate
    /// (and is acknowledged: the order keeps it from now on), a failed or killed one its reason.
    /// Run after every command that can end a session.
    pub(crate) fn follow_sessions(&mut self, sessions: &mut Sessions, now_ms: u64) {
        // Runs after every session command: only the sessions that ended are collected, so the
        // common case (none ended) allocates nothing.
        let ended: Vec<(SessionId, OrderId)> = self
            .issuing
            .iter()
            .filter(|(session, _)| {
                sessions
                    .get(**session)
                    .is_none_or(|session| matches!(session.place, Place::Ended(_)))
            })
            .map(|(session, order)| (*session, *order))
            .collect();
        for (session_id, order_id) in ended {
            let outcome = match sessions.get(session_id).map(|session| &session.place) {
                Some(Place::Ended(Ended::Done { cert })) => Ok(cert.clone()),
                Some(Place::Ended(Ended::Archived { end, .. })) => match end {
                    Ending::Done { cert, .. } => Ok(cert.clone()),
                    Ending::Failed { failure, .. } => Err(format!("issuance failed: {failure}")),
                    Ending::Killed { reason, .. } => Err(format!("issuance stopped: {reason}")),
                },
                Some(_) => unreachable!("only ended sessions are collected"),
                None => Err("the issuing session is gone".to_owned()),
            };
            let mut order = self.take(order_id);
            match outcome {
                Ok(cert) => {
                    order.certificate = Some(cert);
                    // The order holds the certificate now; the session need not wait for a
                    // client that will never acknowledge it.
                    let _ = sessions.acknowledge_for_acme(session_id, now_ms);
                }
                Err(reason) => {
                    let reason = Reason::new(truncate_reason(&reason))
                        .unwrap_or_else(|_| Reason::new("issuance failed").expect("valid text"));
                    order.error = Some(reason);
                }
            }
            self.put(order);
        }
    }

    /// Deletes orders past their retention (not those still issuing), a bounded number per
    /// tick.
    pub(crate) fn tick(&mut self, now_ms: u64) {
        let due: Vec<OrderId> = self
            .by_created
            .range(..(now_ms.saturating_sub(ACME_ORDER_RETENTION_MS), OrderId(0)))
            .map(|&(_, id)| id)
            .filter(|id| {
                let order = &self.orders[id];
                order.session.is_none() || order.certificate.is_some() || order.error.is_some()
            })
            .take(TICK_ACME_ORDERS_MAX)
            .collect();
        for id in due {
            self.take(id);
        }
    }

    fn take(&mut self, id: OrderId) -> Order {
        let order = self
            .orders
            .remove(&id)
            .expect("take is called on a stored order");
        self.by_account.remove(&(order.account, id));
        self.by_created.remove(&(order.created_ms, id));
        if let Some(session) = order.session {
            self.issuing.remove(&session);
        }
        for position in 0..order.authorizations.len() {
            self.validating.remove(&(id, position_of(position)));
        }
        order
    }

    fn put(&mut self, order: Order) {
        let id = order.id;
        self.index(&order);
        let previous = self.orders.insert(id, order);
        assert!(previous.is_none(), "put is called on a missing order");
    }

    fn index(&mut self, order: &Order) {
        let id = order.id;
        self.by_account.insert((order.account, id));
        self.by_created.insert((order.created_ms, id));
        if let Some(session) = order.session
            && order.certificate.is_none()
            && order.error.is_none()
        {
            self.issuing.insert(session, id);
        }
        for (position, authz) in order.authorizations.iter().enumerate() {
            if authz.challenge == ChallengeStatus::Processing && !authz.deactivated {
                self.validating.insert((id, position_of(position)));
            }
        }
    }

    pub(crate) fn account(&self, id: AccountId) -> Option<&Account> {
        self.accounts.get(&id)
    }

    pub(crate) fn account_by_thumbprint(&self, thumbprint: &str) -> Option<&Account> {
        self.by_thumbprint
            .get(thumbprint)
            .map(|id| &self.accounts[id])
    }

    pub(crate) fn order(&self, id: OrderId) -> Option<&Order> {
        self.orders.get(&id)
    }

    pub(crate) fn orders_of(&self, account: AccountId) -> impl Iterator<Item = &Order> {
        self.by_account
            .range((account, OrderId(0))..=(account, OrderId(u64::MAX)))
            .map(|(_, id)| &self.orders[id])
    }

    pub(crate) fn orders_after(&self, after: OrderId, limit: usize) -> Vec<&Order> {
        self.orders
            .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            .map(|(_, order)| order)
            .take(limit)
            .collect()
    }

    pub(crate) fn validating(&self) -> impl Iterator<Item = (OrderId, u32)> + '_ {
        self.validating.iter().copied()
    }

    pub(crate) fn revocation(&self, serial: &str) -> Option<&Revocation> {
        self.revocations.get(serial)
    }

    pub(crate) fn revocations(&self) -> impl Iterator<Item = &Revocation> {
        self.revocations.values()
    }

    pub(crate) fn order_count(&self) -> usize {
        self.orders.len()
    }

    pub(crate) fn account_count(&self) -> usize {
        self.accounts.len()
    }

    pub(crate) fn records(&self) -> AcmeRecordsRef<'_> {
        AcmeRecordsRef {
            last_id: self.last_id,
            accounts: self.accounts.values().collect(),
            orders: self.orders.values().collect(),
            revocations: self.revocations.values().collect(),
        }
    }

    pub(crate) fn from_records(records: AcmeRecords) -> Result<Acme, String> {
        let mut acme = Acme {
            last_id: records.last_id,
            ..Acme::default()
        };
        for account in records.accounts {
            let id = account.id;
            if acme
                .by_thumbprint
                .insert(account.key.thumbprint.clone(), id)
                .is_some()
                || acme.accounts.insert(id, account).is_some()
            {
                return Err(format!("ACME account {id} or its key is stored twice"));
            }
        }
        for order in records.orders {
            let id = order.id;
            if acme.orders.contains_key(&id) {
                return Err(format!("ACME order {id} is stored twice"));
            }
            acme.put(order);
        }
        for revocation in records.revocations {
            let serial = revocation.serial.clone();
            if acme
                .revocations
                .insert(serial.clone(), revocation)
                .is_some()
            {
                return Err(format!("serial {serial} is revoked twice"));
            }
        }
        Ok(acme)
    }

    /// Checks every invariant; see the module's documentation.
    pub(crate) fn check(&self, sessions: &Sessions, clock_ms: u64) -> Result<(), String> {
        if self.accounts.len() > ACME_ACCOUNTS_MAX
            || self.orders.len() > ACME_ORDERS_MAX
            || self.revocations.len() > ACME_REVOCATIONS_MAX
        {
            return Err("the ACME tables exceed their bounds".to_owned());
        }
        let mut rebuilt = Acme::default();
        for (id, account) in &self.accounts {
            if *id != account.id || id.0 == 0 || id.0 > self.last_id {
                return Err(format!("ACME account {} is filed under {id}", account.id));
            }
            account
                .key
                .check()
                .map_err(|e| format!("account {id}: {e}"))?;
            check_contact(&account.contact).map_err(|e| format!("account {id}: {e}"))?;
            if account.created_ms > clock_ms
                || account.orders_in_window > ACME_ORDERS_PER_WINDOW_MAX
            {
                return Err(format!("account {id}: its times or counts are impossible"));
            }
            rebuilt
                .by_thumbprint
                .insert(account.key.thumbprint.clone(), *id);
        }
        for (id, order) in &self.orders {
            let fail = |what: &str| Err(format!("ACME order {id}: {what}"));
            if *id != order.id || id.0 == 0 || id.0 > self.last_id {
                return fail("it is filed under another id");
            }
            if !self.accounts.contains_key(&order.account) {
                return fail("its account is not stored");
            }
            let names = order.names();
            if names.is_empty()
                || names.len() > ACME_IDENTIFIERS_MAX
                || names.windows(2).any(|pair| pair[0] >= pair[1])
            {
                return fail("its identifiers are not 1 to 100, sorted and distinct");
            }
            if order.created_ms > clock_ms || order.expires_ms < order.created_ms {
                return fail("its times are impossible");
            }
            for authz in &order.authorizations {
                if (authz.challenge == ChallengeStatus::Valid) != authz.validated_ms.is_some()
                    || (authz.challenge == ChallengeStatus::Invalid) != authz.error.is_some()
                {
                    return fail("a challenge's status disagrees with its result");
                }
            }
            let all_valid = order
                .authorizations
                .iter()
                .all(|authz| authz.challenge == ChallengeStatus::Valid && !authz.deactivated);
            if order.session.is_some() != order.csr.is_some()
                || (order.session.is_some() && !all_valid)
                || (order.certificate.is_some() && order.session.is_none())
                || (order.certificate.is_some() && order.error.is_some())
            {
                return fail("it was finalized, issued or failed out of order");
            }
            if let Some(session) = order.session
                && order.certificate.is_none()
                && order.error.is_none()
                && sessions.get(session).is_none()
            {
                return fail("it waits for a session that is not stored");
            }
            rebuilt.index(order);
        }
        for (serial, revocation) in &self.revocations {
            if *serial != revocation.serial || check_serial(serial).is_err() {
                return Err(format!("revocation {serial} is malformed"));
            }
        }
        if rebuilt.by_thumbprint != self.by_thumbprint
            || rebuilt.by_account != self.by_account
            || rebuilt.issuing != self.issuing
            || rebuilt.validating != self.validating
            || rebuilt.by_created != self.by_created
        {
            return Err("the ACME indexes differ from what the records say".to_owned());
        }
        Ok(())
    }
}

/// An authorization's position as commands name it (an order has at most
/// [`ACME_IDENTIFIERS_MAX`] of them).
fn position_of(index: usize) -> u32 {
    u32::try_from(index).expect("an order has at most 100 authorizations")
}

fn authorization_mut(order: &mut Order, position: u32) -> Result<&mut Authorization, AcmeError> {
    let id = order.id;
    order
        .authorizations
        .get_mut(position as usize)
        .ok_or(AcmeError::NoAuthorization {
            order: id,
            authorization: position,
        })
}

fn check_contact(contact: &[String]) -> Result<(), AcmeError> {
    if contact.len() > ACME_CONTACTS_MAX {
        return Err(AcmeError::Malformed(format!(
            "at most {ACME_CONTACTS_MAX} contacts"
        )));
    }
    for url in contact {
        let ok = !url.is_empty()
            && url.len() <= ACME_CONTACT_BYTES_MAX
            && url.bytes().all(|b| b.is_ascii_graphic());
        if !ok {
            return Err(AcmeError::Malformed(format!(
                "a contact is 1 to {ACME_CONTACT_BYTES_MAX} bytes of visible ASCII"
            )));
        }
    }
    Ok(())
}

fn check_serial(serial: &str) -> Result<(), AcmeError> {
    let ok = !serial.is_empty()
        && serial.len() <= ACME_SERIAL_HEX_MAX
        && serial.len().is_multiple_of(2)
        && serial
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AcmeError::Malformed(format!(
            "a serial number is 1 to {} octets in lowercase hex",
            ACME_SERIAL_HEX_MAX / 2
        )))
    }
}

/// A reason cut to what [`Reason`] holds, on a character boundary.
fn truncate_reason(reason: &str) -> String {
    let max = crate::limits::REASON_BYTES_MAX;
    if reason.len() <= max {
        return reason.to_owned();
    }
    let mut end = max;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
}

#[cfg(test)]
mod tests;
