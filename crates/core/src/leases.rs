//! Leases with fencing tokens (seed 003, made safe).
//!
//! A lease is a named, time-bounded grant to one holder. Acquire inserts a missing lease, takes
//! over one whose time has run out, and renews one the caller already holds; release is allowed
//! only to the holder. Every grant carries a [`FencingToken`] that is larger than every token
//! granted before it, so a protected resource that remembers the largest token it has seen (or
//! asks [`crate::State::check_fence`]) refuses a holder whose lease has since moved on.
//!
//! Time is the machine clock ([`crate::State::clock_ms`]), never the client's. A lease is live
//! while `clock < expires_at_ms`; expiry needs no tick (every decision compares against the
//! clock), `Tick` only reclaims the memory.
//!
//! Invariants (checked by [`Leases::check`] and, locally, on every change):
//! - every lease satisfies `granted_at_ms <= renewed_at_ms < expires_at_ms
//!   == renewed_at_ms + ttl_ms`;
//! - the expiry index holds exactly one `(expires_at_ms, name)` per lease;
//! - tokens are unique and no larger than the state's last issued token;
//! - at most [`LEASES_MAX`] leases exist.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::limits::{
    HOLDER_ID_BYTES_MAX, LEASE_NAME_BYTES_MAX, LEASE_TTL_MS_MAX, LEASE_TTL_MS_MIN, LEASES_MAX,
    LIST_PAGE_MAX, TICK_EXPIRED_LEASES_MAX,
};
use crate::text::{TextError, TextKind, is_name_byte, is_visible_byte, validated_text};

validated_text! {
    /// The name of a lease: 1 to 256 bytes of letters, digits and `. _ - : / @`.
    LeaseName, kind = TextKind::LeaseName, max_bytes = LEASE_NAME_BYTES_MAX,
    allowed = is_name_byte, allowed_words = "ASCII letters, digits and . _ - : / @"
}

validated_text! {
    /// Who holds a lease (an instance id): 1 to 256 bytes of visible ASCII.
    HolderId, kind = TextKind::HolderId, max_bytes = HOLDER_ID_BYTES_MAX,
    allowed = is_visible_byte, allowed_words = "visible ASCII (no spaces or control characters)"
}

/// A lease duration, within [`LEASE_TTL_MS_MIN`]`..=`[`LEASE_TTL_MS_MAX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Ttl(u64);

impl Ttl {
    /// Validates a TTL in milliseconds.
    pub fn from_ms(ttl_ms: u64) -> Result<Ttl, LeaseError> {
        if (LEASE_TTL_MS_MIN..=LEASE_TTL_MS_MAX).contains(&ttl_ms) {
            Ok(Ttl(ttl_ms))
        } else {
            Err(LeaseError::InvalidTtl {
                ttl_ms,
                min_ms: LEASE_TTL_MS_MIN,
                max_ms: LEASE_TTL_MS_MAX,
            })
        }
    }

    /// The duration in milliseconds.
    pub fn as_ms(self) -> u64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Ttl, D::Error> {
        Ttl::from_ms(u64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// Proof of a grant: larger than every token granted before it, across all leases.
///
/// It is the Raft log index of the entry that made the grant; when one entry carries several
/// grants (group commit), each later one takes the next number above the previous token.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A lease as stored and as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Its name.
    pub name: LeaseName,
    /// Who holds it.
    pub holder: HolderId,
    /// The token of this grant; unchanged by renewals.
    pub token: FencingToken,
    /// Machine time of the grant.
    pub granted_at_ms: u64,
    /// Machine time of the latest grant or renewal.
    pub renewed_at_ms: u64,
    /// The TTL of the latest grant or renewal.
    pub ttl_ms: u64,
    /// Machine time from which the lease is no longer held.
    pub expires_at_ms: u64,
}

impl Lease {
    /// Whether the lease is still held at machine time `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.expires_at_ms
    }

    fn check(&self) -> Result<(), String> {
        let ok = self.granted_at_ms <= self.renewed_at_ms
            && Ttl::from_ms(self.ttl_ms).is_ok()
            && self.renewed_at_ms.saturating_add(self.ttl_ms) == self.expires_at_ms
            && self.token.0 > 0;
        if ok {
            Ok(())
        } else {
            Err(format!("malformed lease {self:?}"))
        }
    }
}

/// The lease commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseCommand {
    /// Insert if missing, take over if expired, renew if `holder` already holds it.
    Acquire {
        /// The lease.
        name: LeaseName,
        /// Who asks.
        holder: HolderId,
        /// For how long, from the machine time of this command.
        ttl: Ttl,
    },
    /// Keep alive: extend a live lease held by `holder` to `ttl` from now. The token is unchanged.
    Renew {
        /// The lease.
        name: LeaseName,
        /// Who asks; must be the holder.
        holder: HolderId,
        /// The new duration, from the machine time of this command.
        ttl: Ttl,
    },
    /// Give up a live lease; only its holder may.
    Release {
        /// The lease.
        name: LeaseName,
        /// Who asks; must be the holder.
        holder: HolderId,
    },
}

/// How an acquire was satisfied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Acquisition {
    /// The lease did not exist.
    Created,
    /// The lease existed but had expired; it was granted afresh, with a new token.
    TookOverExpired {
        /// Whose grant had expired (may be the caller).
        previous_holder: HolderId,
    },
    /// The caller already held it; its expiry moved, its token did not.
    Renewed,
}

/// What a successful lease command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseReply {
    /// The caller holds the lease.
    Acquired {
        /// The lease after the command.
        lease: Lease,
        /// Which path the acquire took.
        how: Acquisition,
    },
    /// The lease was extended.
    Renewed {
        /// The lease after the command.
        lease: Lease,
    },
    /// The lease was released.
    Released {
        /// The lease as it was before release.
        lease: Lease,
    },
}

/// Why a lease command or check was refused. A refused command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum LeaseError {
    /// Someone else holds the lease.
    #[error("held by {holder} until {expires_at_ms}")]
    NotHolder {
        /// The current holder.
        holder: HolderId,
        /// When its grant ends unless renewed.
        expires_at_ms: u64,
    },
    /// The caller's grant ran out; it must acquire again (and gets a new token).
    #[error("the lease expired at {expired_at_ms}; acquire it again")]
    Expired {
        /// When it expired.
        expired_at_ms: u64,
    },
    /// No such lease: never granted, released, or expired and reclaimed.
    #[error("no such lease")]
    Unknown,
    /// A fencing check failed: the token is not the live grant's.
    #[error(
        "fencing token {presented} rejected; {}",
        match current {
            Some(current) => format!("the live grant's token is {current}"),
            None => "the lease is not held".to_owned(),
        }
    )]
    FenceRejected {
        /// The token presented.
        presented: FencingToken,
        /// The live grant's token, if the lease is held.
        current: Option<FencingToken>,
    },
    /// A TTL outside the allowed range.
    #[error("TTL {ttl_ms} ms is outside the allowed range {min_ms}..={max_ms} ms")]
    InvalidTtl {
        /// What was asked.
        ttl_ms: u64,
        /// The shortest allowed.
        min_ms: u64,
        /// The longest allowed.
        max_ms: u64,
    },
    /// A malformed name or holder.
    #[error(transparent)]
    InvalidText(#[from] TextError),
    /// The cluster holds as many leases as it allows.
    #[error("at most {max} leases may exist; release or let some expire")]
    TooManyLeases {
        /// The limit.
        max: usize,
    },
}

/// The lease table: leases by name, and an index by expiry for reclaiming.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leases {
    by_name: BTreeMap<LeaseName, Lease>,
    by_expiry: BTreeSet<(u64, LeaseName)>,
}

impl Leases {
    pub(crate) fn apply(
        &mut self,
        command: LeaseCommand,
        now_ms: u64,
        issue_token: impl FnOnce() -> FencingToken,
    ) -> Result<LeaseReply, LeaseError> {
        match command {
            LeaseCommand::Acquire { name, holder, ttl } => {
                self.acquire(name, holder, ttl, now_ms, issue_token)
            }
            LeaseCommand::Renew { name, holder, ttl } => self.renew(&name, &holder, ttl, now_ms),
            LeaseCommand::Release { name, holder } => self.release(&name, &holder, now_ms),
        }
    }

    fn acquire(
        &mut self,
        name: LeaseName,
        holder: HolderId,
        ttl: Ttl,
        now_ms: u64,
        issue_token: impl FnOnce() -> FencingToken,
    ) -> Result<LeaseReply, LeaseError> {
        if self.by_name.len() >= LEASES_MAX && !self.by_name.contains_key(&name) {
            // A full table makes room by reclaiming the lease that expired first, if one has:
            // expiry alone frees a slot, without waiting for a tick.
            if let Some((expires_at_ms, oldest)) = self.by_expiry.first().cloned()
                && expires_at_ms <= now_ms
            {
                self.remove(&oldest);
            }
        }
        let how = match self.by_name.get(&name) {
            Some(lease) if lease.is_live(now_ms) && lease.holder == holder => {
                let lease = self.extend(&name, ttl, now_ms);
                return Ok(LeaseReply::Acquired {
                    lease,
                    how: Acquisition::Renewed,
                });
            }
            Some(lease) if lease.is_live(now_ms) => {
                return Err(LeaseError::NotHolder {
                    holder: lease.holder.clone(),
                    expires_at_ms: lease.expires_at_ms,
                });
            }
            Some(lease) => Acquisition::TookOverExpired {
                previous_holder: lease.holder.clone(),
            },
            None if self.by_name.len() >= LEASES_MAX => {
                return Err(LeaseError::TooManyLeases { max: LEASES_MAX });
            }
            None => Acquisition::Created,
        };
        let previous_token = self.remove(&name).map(|lease| lease.token);
        let lease = Lease {
            name,
            holder,
            token: issue_token(),
            granted_at_ms: now_ms,
            renewed_at_ms: now_ms,
            ttl_ms: ttl.as_ms(),
            expires_at_ms: expiry(now_ms, ttl),
        };
        assert!(previous_token.is_none_or(|previous| previous < lease.token));
        self.insert(lease.clone());
        Ok(LeaseReply::Acquired { lease, how })
    }

    fn renew(
        &mut self,
        name: &LeaseName,
        holder: &HolderId,
        ttl: Ttl,
        now_ms: u64,
    ) -> Result<LeaseReply, LeaseError> {
        self.held_by(name, holder, now_ms)?;
        let lease = self.extend(name, ttl, now_ms);
        Ok(LeaseReply::Renewed { lease })
    }

    fn release(
        &mut self,
        name: &LeaseName,
        holder: &HolderId,
        now_ms: u64,
    ) -> Result<LeaseReply, LeaseError> {
        self.held_by(name, holder, now_ms)?;
        let lease = self.remove(name).expect("held_by found the lease");
        Ok(LeaseReply::Released { lease })
    }

    /// Succeeds when `holder` holds `name` live at `now_ms`.
    fn held_by(&self, name: &LeaseName, holder: &HolderId, now_ms: u64) -> Result<(), LeaseError> {
        let lease = self.by_name.get(name).ok_or(LeaseError::Unknown)?;
        if lease.holder != *holder {
            // An expired lease has no holder to report: the caller may acquire it.
            return Err(if lease.is_live(now_ms) {
                LeaseError::NotHolder {
                    holder: lease.holder.clone(),
                    expires_at_ms: lease.expires_at_ms,
                }
            } else {
                LeaseError::Unknown
            });
        }
        if !lease.is_live(now_ms) {
            return Err(LeaseError::Expired {
                expired_at_ms: lease.expires_at_ms,
            });
        }
        Ok(())
    }

    /// Moves a live lease's expiry to `ttl` from `now_ms`, keeping its token.
    fn extend(&mut self, name: &LeaseName, ttl: Ttl, now_ms: u64) -> Lease {
        let mut lease = self
            .remove(name)
            .expect("extend is called on an existing lease");
        assert!(lease.is_live(now_ms), "only a live lease is extended");
        lease.renewed_at_ms = now_ms;
        lease.ttl_ms = ttl.as_ms();
        lease.expires_at_ms = expiry(now_ms, ttl);
        self.insert(lease.clone());
        lease
    }

    fn insert(&mut self, lease: Lease) {
        debug_assert!(lease.check().is_ok(), "{lease:?}");
        let fresh_in_index = self
            .by_expiry
            .insert((lease.expires_at_ms, lease.name.clone()));
        let previous = self.by_name.insert(lease.name.clone(), lease);
        assert!(
            fresh_in_index && previous.is_none(),
            "insert is called on a missing lease"
        );
    }

    fn remove(&mut self, name: &LeaseName) -> Option<Lease> {
        let lease = self.by_name.remove(name)?;
        let was_indexed = self
            .by_expiry
            .remove(&(lease.expires_at_ms, lease.name.clone()));
        assert!(was_indexed, "every lease is in the expiry index");
        Some(lease)
    }

    /// Reclaims up to [`TICK_EXPIRED_LEASES_MAX`] expired leases, oldest expiry first.
    pub(crate) fn reclaim_expired(&mut self, now_ms: u64) -> Vec<Lease> {
        let mut expired = Vec::new();
        while expired.len() < TICK_EXPIRED_LEASES_MAX {
            let Some((expires_at_ms, name)) = self.by_expiry.first().cloned() else {
                break;
            };
            if expires_at_ms > now_ms {
                break;
            }
            let lease = self
                .remove(&name)
                .expect("the index names an existing lease");
            assert!(!lease.is_live(now_ms));
            expired.push(lease);
        }
        expired
    }

    pub(crate) fn get(&self, name: &LeaseName, now_ms: u64) -> Option<&Lease> {
        self.by_name.get(name).filter(|lease| lease.is_live(now_ms))
    }

    pub(crate) fn list(
        &self,
        start_after: Option<&LeaseName>,
        limit: usize,
        now_ms: u64,
    ) -> Vec<&Lease> {
        let from = match start_after {
            Some(name) => std::ops::Bound::Excluded(name),
            None => std::ops::Bound::Unbounded,
        };
        self.by_name
            .range::<LeaseName, _>((from, std::ops::Bound::Unbounded))
            .map(|(_, lease)| lease)
            .filter(|lease| lease.is_live(now_ms))
            .take(limit.min(LIST_PAGE_MAX))
            .collect()
    }

    pub(crate) fn check_fence(
        &self,
        name: &LeaseName,
        presented: FencingToken,
        now_ms: u64,
    ) -> Result<(), LeaseError> {
        let current = self.get(name, now_ms).map(|lease| lease.token);
        if current == Some(presented) {
            Ok(())
        } else {
            Err(LeaseError::FenceRejected { presented, current })
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.by_name.values()
    }

    /// Rebuilds the table from snapshot records (in any order); refuses duplicates.
    pub(crate) fn from_records(records: Vec<Lease>) -> Result<Leases, String> {
        let mut leases = Leases::default();
        for lease in records {
            lease.check()?;
            if leases.by_name.contains_key(&lease.name) {
                return Err(format!("lease {} appears twice", lease.name));
            }
            leases.insert(lease);
        }
        Ok(leases)
    }

    /// Every invariant of the table, against the machine clock and the last issued token.
    pub(crate) fn check(&self, clock_ms: u64, last_token: FencingToken) -> Result<(), String> {
        if self.by_name.len() > LEASES_MAX {
            return Err(format!(
                "{} leases exceed the limit {LEASES_MAX}",
                self.by_name.len()
            ));
        }
        if self.by_expiry.len() != self.by_name.len() {
            return Err("the expiry index and the table differ in size".to_owned());
        }
        let mut tokens = BTreeSet::new();
        for (name, lease) in &self.by_name {
            lease.check()?;
            if *name != lease.name {
                return Err(format!("lease {} is filed under {name}", lease.name));
            }
            if lease.renewed_at_ms > clock_ms {
                return Err(format!(
                    "lease {name} was renewed after the clock ({clock_ms})"
                ));
            }
            if lease.token > last_token {
                return Err(format!(
                    "lease {name} has token {} > last {last_token}",
                    lease.token
                ));
            }
            if !tokens.insert(lease.token) {
                return Err(format!("token {} is held twice", lease.token));
            }
            if !self
                .by_expiry
                .contains(&(lease.expires_at_ms, name.clone()))
            {
                return Err(format!("lease {name} is missing from the expiry index"));
            }
        }
        Ok(())
    }
}

fn expiry(now_ms: u64, ttl: Ttl) -> u64 {
    now_ms.saturating_add(ttl.as_ms())
}
