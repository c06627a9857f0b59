//! Following another RFC 6962 log: the master's part of a mirror.
//!
//! Each master round reads the source's STH, checks its signature under the source's key (from
//! the replicated state), fetches the entries the cluster lacks in pages and — before proposing
//! any of them — checks them against that STH: the master extends the frontier of its own tree
//! (which holds every appended entry) with the fetched leaf hashes and either compares the root
//! with the STH's or verifies the source's consistency proof from the new size to the STH's.
//! Only then does it propose `MirrorAppend` (a check-and-set on the next number), with the STH
//! on the batch that completes its tree. So nothing the source cannot prove enters the log, and
//! a source that rewrites history stalls the mirror instead of corrupting it.
//!
//! From there the entries travel as sequenced entries do on an origin log: every node copies and
//! integrates them, reports the newest recorded source STH its own tree reproduces, and the master
//! publishes one enough nodes hold (see `ct::node`).

use std::sync::Mutex;

use certus_core::ct::{CtCommand, MirrorSource};
use certus_ct::frontier::Frontier;
use certus_ct::merkle::{leaf_hash, verify_consistency};
use certus_ct::signer::LogVerifier;
use certus_ct::structures::SignedTreeHead;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::ct::source::SourceLog;
use crate::limits::{CT_MIRROR_RETRY_DELAY_MAX, CT_MIRROR_RETRY_DELAY_MIN};
use crate::raft::replica::Replica;

/// Entries asked for per get-entries request (sources may answer fewer).
const PAGE_ENTRIES: u64 = 256;
/// Pages fetched per master round.
const PAGES_PER_ROUND: usize = 16;

/// What the master knows of the source, for status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MirrorProgress {
    /// The newest source STH whose signature verified.
    pub source_sth: Option<SignedTreeHead>,
    /// Why the last round did not get further, if it failed.
    pub last_error: Option<String>,
}

/// The master's connection to the source, rebuilt when the replicated source changes.
#[derive(Debug, Default)]
pub struct MirrorFollower {
    connection: Mutex<Option<(MirrorSource, SourceLog, LogVerifier)>>,
    progress: Mutex<MirrorProgress>,
    backoff: Mutex<Backoff>,
}

/// Consecutive failed rounds and when the next may run.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
}

impl Backoff {
    fn failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let delay = CT_MIRROR_RETRY_DELAY_MIN
            .saturating_mul(1 << self.failures.saturating_sub(1).min(16))
            .min(CT_MIRROR_RETRY_DELAY_MAX);
        self.retry_at = Some(Instant::now() + delay);
    }
}

/// One round's end when nothing failed.
enum Done {
    /// Nothing newer at the source (or this node must integrate first).
    Idle,
    /// Entries were appended up to this size.
    Appended(u64),
}

impl MirrorFollower {
    /// The progress as of the last round this node led.
    pub fn progress(&self) -> MirrorProgress {
        self.progress.lock().expect("progress lock").clone()
    }

    /// One round: read the source, append what it proves. `tree_size` and `frontier_at` come
    /// from this node's tree.
    pub(crate) async fn follow(
        &self,
        replica: &Replica,
        source: &MirrorSource,
        frontier_at: impl Fn(u64) -> Option<Frontier>,
        errors: &prometheus::IntCounter,
    ) -> Result<(), String> {
        let waiting = {
            let backoff = self.backoff.lock().expect("backoff lock");
            backoff.retry_at.is_some_and(|at| Instant::now() < at)
        };
        if waiting {
            return Ok(());
        }
        let outcome = self.follow_once(replica, source, frontier_at).await;
        let mut progress = self.progress.lock().expect("progress lock");
        let mut backoff = self.backoff.lock().expect("backoff lock");
        match &outcome {
            Ok(done) => {
                if let Done::Appended(size) = done {
                    debug!(id = replica.id, size, "mirror appended source entries");
                }
                progress.last_error = None;
                *backoff = Backoff::default();
            }
            Err(error) => {
                errors.inc();
                progress.last_error = Some(error.clone());
                backoff.failed();
            }
        }
        outcome.map(|_| ())
    }

    fn connection(&self, source: &MirrorSource) -> Result<(SourceLog, LogVerifier), String> {
        let mut connection = self.connection.lock().expect("connection lock");
        if let Some((known, log, verifier)) = connection.as_ref()
            && known == source
        {
            return Ok((log.clone(), verifier.clone()));
        }
        let verifier = LogVerifier::from_public_key_der(&source.public_key_der)
            .map_err(|error| format!("the source's public key: {error}"))?;
        let log = SourceLog::new(&source.url)?;
        info!(url = %source.url, "mirror follows a new source");
        *connection = Some((source.clone(), log.clone(), verifier.clone()));
        Ok((log, verifier))
    }

    async fn follow_once(
        &self,
        replica: &Replica,
        source: &MirrorSource,
        frontier_at: impl Fn(u64) -> Option<Frontier>,
    ) -> Result<Done, String> {
        let (log, verifier) = self.connection(source)?;
        let sth = log.get_sth().await?;
        verifier
            .verify_sth(&sth)
            .map_err(|error| format!("the source's STH does not verify: {error}"))?;
        self.progress.lock().expect("progress lock").source_sth = Some(sth.clone());
        let (next, latest) = replica.reader.read(|applied| {
            let state = &applied.state;
            (
                state.ct_next_sequence(),
                state.ct_mirror().and_then(|mirror| mirror.latest.clone()),
            )
        });
        if sth.tree_size < next {
            return Err(format!(
                "the source's STH has {} entries but {next} were mirrored: the source lost entries",
                sth.tree_size
            ));
        }
        if let Some(latest) = &latest {
            if sth.timestamp_ms <= latest.timestamp_ms {
                return Ok(Done::Idle);
            }
            if sth.tree_size < latest.tree_size {
                return Err(format!(
                    "the source's newer STH has {} entries, fewer than its earlier {}",
                    sth.tree_size, latest.tree_size
                ));
            }
        }
        // The frontier of this node's own tree at the next number: every entry appended so far,
        // as this node integrated it. A master still catching up waits a round.
        let Some(mut frontier) = frontier_at(next) else {
            return Ok(Done::Idle);
        };
        let signed = crate::ct::convert::to_core_sth(&sth)?;
        let mut first = next;
        for _ in 0..PAGES_PER_ROUND {
            if first == sth.tree_size {
                break;
            }
            let end = (first + PAGE_ENTRIES).min(sth.tree_size) - 1;
            let mut entries = log.get_entries(first, end).await?;
            entries.truncate(usize::try_from(end - first + 1).unwrap_or(usize::MAX));
            let mut extended = frontier.clone();
            for entry in &entries {
                extended.push(leaf_hash(&entry.leaf_input));
            }
            let size = extended.size();
            let root = extended.root();
            let completes = size == sth.tree_size;
            if completes {
                if root != sth.sha256_root_hash {
                    return Err(format!(
                        "the source's entries {first}..{size} do not give its STH's root"
                    ));
                }
            } else {
                let proof = log.get_consistency(size, sth.tree_size).await?;
                verify_consistency(size, sth.tree_size, &root, &sth.sha256_root_hash, &proof)
                    .map_err(|error| {
                        format!(
                            "the source's entries {first}..{size} are not a prefix of its STH of size {}: {error}",
                            sth.tree_size
                        )
                    })?;
            }
            let command = CtCommand::MirrorAppend {
                first,
                entries,
                sth: completes.then(|| signed.clone()),
            };
            crate::ct::propose::propose(replica, command).await?;
            frontier = extended;
            first = size;
        }
        if first == next && first == sth.tree_size {
            // No new entries, a newer STH over the same tree.
            if frontier.root() != sth.sha256_root_hash {
                return Err(format!(
                    "the source's STH at size {first} has a root this mirror's tree does not have"
                ));
            }
            let command = CtCommand::MirrorAppend {
                first,
                entries: Vec::new(),
                sth: Some(signed),
            };
            crate::ct::propose::propose(replica, command).await?;
        }
        Ok(if first == next {
            Done::Idle
        } else {
            Done::Appended(first)
        })
    }
}
