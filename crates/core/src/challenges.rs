//! HTTP-01 challenge tokens (seed 003), stored once and served by every node.
//!
//! An ACME client that runs as several replicas stores each token's key authorization here so
//! that whichever replica the CA's validation request reaches can answer
//! `/.well-known/acme-challenge/{token}`. `Put` is an upsert; old tokens are removed by age.
//!
//! Invariants (checked by [`Challenges::check`]): the age index holds exactly one
//! `(stored_at_ms, token)` per challenge; no challenge is stored after the machine clock; at
//! most [`CHALLENGES_MAX`] exist.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::limits::{
    CHALLENGE_TOKEN_BYTES_MAX, CHALLENGES_MAX, KEY_AUTHORIZATION_BYTES_MAX, LIST_PAGE_MAX,
};
use crate::text::{TextError, TextKind, is_base64url_byte, is_visible_byte, validated_text};

validated_text! {
    /// An ACME HTTP-01 token: 1 to 256 bytes of the base64url alphabet (RFC 8555 §8.3).
    ChallengeToken, kind = TextKind::ChallengeToken, max_bytes = CHALLENGE_TOKEN_BYTES_MAX,
    allowed = is_base64url_byte, allowed_words = "the base64url alphabet A-Z a-z 0-9 _ -"
}

validated_text! {
    /// The body served for a token (the key authorization): 1 to 1024 bytes of visible ASCII.
    KeyAuthorization, kind = TextKind::KeyAuthorization, max_bytes = KEY_AUTHORIZATION_BYTES_MAX,
    allowed = is_visible_byte, allowed_words = "visible ASCII (no spaces or control characters)"
}

/// A stored challenge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// The token from the URL.
    pub token: ChallengeToken,
    /// What is served for it.
    pub key_authorization: KeyAuthorization,
    /// Machine time of the latest put.
    pub stored_at_ms: u64,
}

/// The challenge-token commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChallengeCommand {
    /// Store or replace the key authorization for a token.
    Put {
        /// The token.
        token: ChallengeToken,
        /// Its key authorization.
        key_authorization: KeyAuthorization,
    },
    /// Remove a token; removing a missing token is not an error.
    Delete {
        /// The token.
        token: ChallengeToken,
    },
    /// Remove every token stored more than `age_ms` before the machine clock.
    DeleteOlderThan {
        /// The age, in milliseconds.
        age_ms: u64,
    },
}

/// What a successful challenge command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChallengeReply {
    /// The token is stored.
    Stored {
        /// Whether a previous value was replaced.
        replaced: bool,
    },
    /// The token is gone.
    Deleted {
        /// Whether it existed.
        existed: bool,
    },
    /// Old tokens are gone.
    Purged {
        /// How many were removed.
        removed: u64,
    },
}

/// Why a challenge command was refused. A refused command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ChallengeError {
    /// A malformed token or key authorization.
    #[error(transparent)]
    InvalidText(#[from] TextError),
    /// The cluster stores as many tokens as it allows.
    #[error("at most {max} challenge tokens may be stored; delete old ones")]
    TooManyChallenges {
        /// The limit.
        max: usize,
    },
}

/// The challenge table: challenges by token, and an index by age for purging.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Challenges {
    by_token: BTreeMap<ChallengeToken, Challenge>,
    by_age: BTreeSet<(u64, ChallengeToken)>,
}

impl Challenges {
    pub(crate) fn apply(
        &mut self,
        command: ChallengeCommand,
        now_ms: u64,
    ) -> Result<ChallengeReply, ChallengeError> {
        match command {
            ChallengeCommand::Put {
                token,
                key_authorization,
            } => {
                let replaced = self.remove(&token).is_some();
                if !replaced && self.by_token.len() >= CHALLENGES_MAX {
                    return Err(ChallengeError::TooManyChallenges {
                        max: CHALLENGES_MAX,
                    });
                }
                self.insert(Challenge {
                    token,
                    key_authorization,
                    stored_at_ms: now_ms,
                });
                Ok(ChallengeReply::Stored { replaced })
            }
            ChallengeCommand::Delete { token } => Ok(ChallengeReply::Deleted {
                existed: self.remove(&token).is_some(),
            }),
            ChallengeCommand::DeleteOlderThan { age_ms } => {
                let cutoff_ms = now_ms.saturating_sub(age_ms);
                let mut removed = 0;
                while let Some((stored_at_ms, token)) = self.by_age.first().cloned() {
                    if stored_at_ms >= cutoff_ms {
                        break;
                    }
                    self.remove(&token)
                        .expect("the index names an existing challenge");
                    removed += 1;
                }
                Ok(ChallengeReply::Purged { removed })
            }
        }
    }

    fn insert(&mut self, challenge: Challenge) {
        let fresh_in_index = self
            .by_age
            .insert((challenge.stored_at_ms, challenge.token.clone()));
        let previous = self.by_token.insert(challenge.token.clone(), challenge);
        assert!(
            fresh_in_index && previous.is_none(),
            "insert is called on a missing token"
        );
    }

    fn remove(&mut self, token: &ChallengeToken) -> Option<Challenge> {
        let challenge = self.by_token.remove(token)?;
        let was_indexed = self
            .by_age
            .remove(&(challenge.stored_at_ms, challenge.token.clone()));
        assert!(was_indexed, "every challenge is in the age index");
        Some(challenge)
    }

    pub(crate) fn get(&self, token: &ChallengeToken) -> Option<&Challenge> {
        self.by_token.get(token)
    }

    pub(crate) fn list(
        &self,
        start_after: Option<&ChallengeToken>,
        limit: usize,
    ) -> Vec<&Challenge> {
        let from = match start_after {
            Some(token) => std::ops::Bound::Excluded(token),
            None => std::ops::Bound::Unbounded,
        };
        self.by_token
            .range::<ChallengeToken, _>((from, std::ops::Bound::Unbounded))
            .map(|(_, challenge)| challenge)
            .take(limit.min(LIST_PAGE_MAX))
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.by_token.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Challenge> {
        self.by_token.values()
    }

    /// Rebuilds the table from snapshot records (in any order); refuses duplicates.
    pub(crate) fn from_records(records: Vec<Challenge>) -> Result<Challenges, String> {
        let mut challenges = Challenges::default();
        for challenge in records {
            if challenges.by_token.contains_key(&challenge.token) {
                return Err(format!("challenge {} appears twice", challenge.token));
            }
            challenges.insert(challenge);
        }
        Ok(challenges)
    }

    /// Every invariant of the table, against the machine clock.
    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        if self.by_token.len() > CHALLENGES_MAX {
            return Err(format!(
                "{} challenges exceed the limit {CHALLENGES_MAX}",
                self.len()
            ));
        }
        if self.by_age.len() != self.by_token.len() {
            return Err("the age index and the table differ in size".to_owned());
        }
        for (token, challenge) in &self.by_token {
            if *token != challenge.token {
                return Err(format!(
                    "challenge {} is filed under {token}",
                    challenge.token
                ));
            }
            if challenge.stored_at_ms > clock_ms {
                return Err(format!(
                    "challenge {token} was stored after the clock ({clock_ms})"
                ));
            }
            if !self
                .by_age
                .contains(&(challenge.stored_at_ms, token.clone()))
            {
                return Err(format!("challenge {token} is missing from the age index"));
            }
        }
        Ok(())
    }
}
