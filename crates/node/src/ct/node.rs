//! The node side of the clustered CT log (seed 004 on Certus's Raft).
//!
//! Every node: accepts submissions (checks the chain, signs the SCT, commits the entry through
//! Raft and only then answers), copies sequenced entries from the replicated state into its
//! local database, integrates them into its Merkle tree (leaf hashes recomputed from the stored
//! entries), signs a node STH and reports `(STH, contiguous size)` through Raft. The master — the
//! Raft leader — also sequences entries out of the guard window, publishes the serving STH and
//! cleans up entries every member holds. Every decision the master takes is re-checked by the
//! state machine (`certus_core::ct`), so a deposed master can propose but never corrupt.
//!
//! Clean-up removes entries the serving STH covers (enough nodes held them when it was
//! published); a node that lacks some of them — it was down, or behind — fetches them from a peer
//! that reports holding them (`ct::peers`). Reads a node cannot serve because its tree is behind
//! the serving STH are forwarded to a node that can.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::ordered_watch as watch;
use certus_core::ct::{AddOutcome, CtCommand, CtError, CtReply, EntryKey, Submission};
use certus_core::{Command, Response};
use certus_ct::chain::{AcceptedRoots, ChainError, check_chain, check_pre_chain};
use certus_ct::signer::LogVerifier;
use certus_ct::structures::{
    ExtraData, PrecertChainEntry, SignedCertificateTimestamp, SignedTreeHead, leaf_input,
};
use certus_ct::{Hash, LogEntry};
use certus_store::{CtDatabase, CtDbError, LocalEntry};
use tracing::{debug, error, warn};

use crate::ct::convert::{entry_key, from_core_sth, to_core_sth};
use crate::ct::peers::{FETCH_BATCH, LogPeers};
use crate::ct::propose::propose;
use crate::ct::reads::{Read, ReadError, ReadReply};
use crate::ct::setup::CtSetup;
use crate::errors::ServiceError;
use crate::limits::{CT_DEDUPE_RECHECKS_MAX, CT_FETCH_ROUNDS_MAX, GET_ENTRIES_MAX};
use crate::metrics::{LocalTree, Metrics};
use crate::raft::replica::{Leader, Replica};

/// Entries copied from the replicated state into the local database per round.
const COPY_BATCH: usize = 4096;
/// Entries integrated into the tree per round.
const INTEGRATE_BATCH: usize = 16_384;
/// A node re-signs an unchanged tree at least this often, so the serving STH stays fresh.
const STH_REFRESH_MS: u64 = 10_000;

/// Why a submission was not logged.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The chain failed a check (HTTP 400).
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The log refused it: back-pressure or frozen (HTTP 503), a mirror (403), an entry past the
    /// state machine's size bounds (400).
    #[error("{0}")]
    Refused(CtError),
    /// The cluster could not commit it (HTTP 503; nothing is promised).
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// Signing failed (HTTP 500).
    #[error("signing failed: {0}")]
    Signing(String),
}

/// What a submission's dedupe check found.
enum Known {
    /// The log has the entry: its SCT.
    Sct(SignedCertificateTimestamp),
    /// New as far as this node can tell, having checked its local index below this size.
    New {
        /// The tree size the local entry-key index covered.
        checked_below: u64,
    },
}

/// A local database failure while answering a submission: nothing is promised (HTTP 503).
fn local_database_error(error: &CtDbError) -> SubmitError {
    SubmitError::Service(ServiceError::Unavailable(format!(
        "the local CT database failed: {error}"
    )))
}

/// One node's part in the CT log.
#[derive(Debug)]
pub struct CtNode {
    setup: CtSetup,
    verifier: LogVerifier,
    db: CtDatabase,
    metrics: Arc<Metrics>,
    peers: LogPeers,
    /// Set when this node's tree disagrees with the serving STH: it stops reporting and serving.
    corrupt: AtomicBool,
    /// When the log is a mirror and this node leads: the source it reads.
    #[cfg(not(madsim))]
    mirror: crate::ct::mirror::MirrorFollower,
}

impl CtNode {
    /// Wraps the local database; refuses a key whose verifier cannot be built.
    pub fn new(setup: CtSetup, db: CtDatabase, metrics: Arc<Metrics>) -> Result<CtNode, String> {
        let verifier = LogVerifier::for_signer(setup.signer.as_ref())
            .map_err(|error| format!("the CT log key: {error}"))?;
        Ok(CtNode {
            setup,
            verifier,
            db,
            metrics,
            peers: LogPeers::default(),
            corrupt: AtomicBool::new(false),
            #[cfg(not(madsim))]
            mirror: crate::ct::mirror::MirrorFollower::default(),
        })
    }

    /// Dial peers (forwarded reads, entry fetches) as `tls` says.
    pub fn with_peer_tls(mut self, tls: crate::edge::tls::PeerTls) -> CtNode {
        self.peers = LogPeers::new(tls);
        self
    }

    /// What this node knows of the mirror's source, as of the last round it led.
    #[cfg(not(madsim))]
    pub fn mirror_progress(&self) -> crate::ct::mirror::MirrorProgress {
        self.mirror.progress()
    }

    /// The accepted roots (get-roots).
    pub fn roots(&self) -> &AcceptedRoots {
        &self.setup.roots
    }

    /// The log's public key, DER SubjectPublicKeyInfo.
    pub fn public_key_der(&self) -> &[u8] {
        self.setup.signer.public_key_der()
    }

    /// The local database (entries and tree).
    pub fn db(&self) -> &CtDatabase {
        &self.db
    }

    /// Whether this node found its tree disagreeing with the serving STH.
    pub fn is_corrupt(&self) -> bool {
        self.corrupt.load(Ordering::Relaxed)
    }

    /// add-chain (`precert = false`) or add-pre-chain: checks, signs, commits, then answers.
    pub async fn submit(
        &self,
        replica: &Replica,
        chain: &[Vec<u8>],
        precert: bool,
    ) -> Result<SignedCertificateTimestamp, SubmitError> {
        let mirrored = replica.reader.read(|applied| {
            applied
                .state
                .ct_mirror()
                .map(|mirror| mirror.source.url.clone())
        });
        if let Some(source_url) = mirrored {
            return Err(SubmitError::Refused(CtError::IsMirror { source_url }));
        }
        let checked = if precert {
            check_pre_chain(chain, &self.setup.roots, &self.setup.limits)?
        } else {
            check_chain(chain, &self.setup.roots, &self.setup.limits)?
        };
        let key = entry_key(&checked.entry);
        let mut checked_below = match self.known_sct(replica, &key, &checked.entry)? {
            Known::Sct(sct) => return Ok(sct),
            Known::New { checked_below } => checked_below,
        };
        let timestamp_ms = replica.clock.now_ms();
        let sct = self
            .setup
            .signer
            .sign_sct(timestamp_ms, &checked.entry, &[])
            .map_err(|error| SubmitError::Signing(error.to_string()))?;
        let extra_data = match &checked.entry {
            LogEntry::X509 { .. } => ExtraData::X509 {
                certificate_chain: checked.chain.clone(),
            },
            LogEntry::Precert { .. } => {
                let (pre_certificate, rest) = checked
                    .chain
                    .split_first()
                    .expect("a checked precertificate chain starts with the precertificate");
                ExtraData::Precert(PrecertChainEntry {
                    pre_certificate: pre_certificate.clone(),
                    precertificate_chain: rest.to_vec(),
                })
            }
        };
        let encoding = |what: &str, error: String| SubmitError::Signing(format!("{what}: {error}"));
        let submission = Submission {
            key,
            sct_timestamp_ms: timestamp_ms,
            leaf_input: leaf_input(timestamp_ms, &checked.entry, &[])
                .map_err(|e| encoding("leaf", e.to_string()))?,
            extra_data: extra_data
                .encode()
                .map_err(|e| encoding("extra_data", e.to_string()))?,
            sct: sct.encode().map_err(|e| encoding("sct", e.to_string()))?,
        };
        let mut rechecks = 0;
        let outcome = loop {
            let command = Command::Ct(CtCommand::AddChecked {
                submissions: vec![submission.clone()],
                checked_below,
            });
            let responses = replica.write(vec![command]).await?;
            let outcome = match responses.into_iter().next() {
                Some(Response::Ct(Ok(CtReply::Added(mut outcomes)))) if outcomes.len() == 1 => {
                    outcomes.remove(0)
                }
                Some(Response::Ct(Err(error))) => return Err(SubmitError::Refused(error)),
                other => {
                    return Err(SubmitError::Service(ServiceError::Unavailable(format!(
                        "unexpected answer to an add: {other:?}"
                    ))));
                }
            };
            // The state forgot entries this node had not indexed when it looked: look again
            // (its tree has usually grown past them since).
            if matches!(outcome, AddOutcome::Refused(CtError::Unchecked { .. }))
                && rechecks < CT_DEDUPE_RECHECKS_MAX
            {
                rechecks += 1;
                checked_below = match self.known_sct(replica, &key, &checked.entry)? {
                    Known::Sct(sct) => return Ok(sct),
                    Known::New { checked_below } => checked_below,
                };
                continue;
            }
            break outcome;
        };
        match outcome {
            AddOutcome::Added => Ok(sct),
            AddOutcome::Duplicate { sct, .. } => decode_sct(&sct),
            AddOutcome::DuplicateCleanedUp {
                sequence,
                sct_timestamp_ms,
            } => self.cleaned_up_sct(sequence, sct_timestamp_ms, &checked.entry),
            AddOutcome::Refused(error) => Err(SubmitError::Refused(error)),
        }
    }

    /// The SCT of an entry the log already has — held or remembered by this node's view of the
    /// state, or in this node's local entry-key index — or, for a new one, how far that index
    /// covered when it was looked at.
    fn known_sct(
        &self,
        replica: &Replica,
        key: &EntryKey,
        entry: &LogEntry,
    ) -> Result<Known, SubmitError> {
        let (known, forgotten_below) = replica.reader.read(|applied| {
            let state = &applied.state;
            let known = match state.ct_entry(key) {
                Some(held) => Some(Ok(held.submission.sct.clone())),
                None => state.ct_cleaned_entry(key).map(Err),
            };
            (known, state.ct_dedupe().forgotten_below)
        });
        match known {
            Some(Ok(sct)) => return decode_sct(&sct).map(Known::Sct),
            Some(Err(cleaned)) => {
                return self
                    .cleaned_up_sct(cleaned.sequence, cleaned.sct_timestamp_ms, entry)
                    .map(Known::Sct);
            }
            None => {}
        }
        // Taken before the lookup: the index covers at least this much when it is read.
        let checked_below = self.db.tree_size();
        if checked_below < forgotten_below {
            return Err(SubmitError::Refused(CtError::Unchecked {
                checked_below,
                forgotten_below,
            }));
        }
        let found = self
            .db
            .index_of_entry_key(&key.0)
            .map_err(|error| local_database_error(&error))?;
        let Some(sequence) = found else {
            return Ok(Known::New { checked_below });
        };
        let stored = self
            .db
            .entry(sequence)
            .map_err(|error| local_database_error(&error))?
            .ok_or_else(|| {
                SubmitError::Service(ServiceError::Unavailable(format!(
                    "entry {sequence} is indexed but not stored"
                )))
            })?;
        decode_sct(&stored.sct).map(Known::Sct)
    }

    /// The SCT of an entry cleaned up from the state: the stored one, or — if this node lacks
    /// the entry — a fresh signature over the same timestamp and entry, which is an equally
    /// valid SCT for the same leaf.
    fn cleaned_up_sct(
        &self,
        sequence: u64,
        sct_timestamp_ms: u64,
        entry: &LogEntry,
    ) -> Result<SignedCertificateTimestamp, SubmitError> {
        if let Ok(Some(stored)) = self.db.entry(sequence) {
            return decode_sct(&stored.sct);
        }
        self.setup
            .signer
            .sign_sct(sct_timestamp_ms, entry, &[])
            .map_err(|error| SubmitError::Signing(error.to_string()))
    }

    /// One round of the node's background work; the leader also sequences, publishes and
    /// cleans up.
    async fn round(&self, replica: &Replica) {
        if let Err(error) = self.copy_and_integrate(replica).await {
            error!(id = replica.id, %error, "local CT database failed");
            return;
        }
        self.check_against_serving(replica);
        if !self.is_corrupt()
            && let Err(error) = self.sign_and_report(replica).await
        {
            debug!(id = replica.id, %error, "node STH not reported");
        }
        if replica.leader() == Some(Leader::Me)
            && let Err(error) = self.lead(replica).await
        {
            debug!(id = replica.id, %error, "CT master round incomplete");
        }
    }

    async fn copy_and_integrate(&self, replica: &Replica) -> Result<(), String> {
        self.fetch_cleaned_up(replica).await?;
        let from = self.db.contiguous_size();
        let (first_held, entries) = replica.reader.read(|applied| {
            let state = &applied.state;
            let entries: Vec<LocalEntry> = state
                .ct_sequenced_from(from, COPY_BATCH)
                .into_iter()
                .map(|(_, held)| LocalEntry {
                    leaf_input: held.submission.leaf_input.clone(),
                    extra_data: held.submission.extra_data.clone(),
                    sct: held.submission.sct.clone(),
                    sct_timestamp_ms: held.submission.sct_timestamp_ms,
                })
                .collect();
            (state.ct_first_held_sequence(), entries)
        });
        if first_held > from {
            // Cleaned up since this round fetched; the next round fetches them.
            debug!(
                id = replica.id,
                from, first_held, "entries cleaned up meanwhile"
            );
            return self
                .db
                .integrate(INTEGRATE_BATCH)
                .map(|_| ())
                .map_err(|e| e.to_string());
        }
        if !entries.is_empty() {
            self.db
                .store_entries(from, &entries)
                .map_err(|e| e.to_string())?;
        }
        self.db
            .integrate(INTEGRATE_BATCH)
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Fetches from peers the entries this node lacks that the replicated state no longer
    /// holds (cleaned up while this node was down or behind), a bounded number per round.
    async fn fetch_cleaned_up(&self, replica: &Replica) -> Result<(), String> {
        let first_held = replica
            .reader
            .read(|applied| applied.state.ct_first_held_sequence());
        for _ in 0..CT_FETCH_ROUNDS_MAX {
            let from = self.db.contiguous_size();
            if from >= first_held {
                return Ok(());
            }
            let wanted = u32::try_from(first_held - from)
                .unwrap_or(u32::MAX)
                .min(FETCH_BATCH);
            let entries = self.peers.fetch(replica, from, wanted).await?;
            let count = entries
                .len()
                .min(usize::try_from(wanted).unwrap_or(usize::MAX));
            self.db
                .store_entries(from, &entries[..count])
                .map_err(|e| e.to_string())?;
            debug!(
                id = replica.id,
                from, count, "fetched cleaned-up entries from a peer"
            );
        }
        Ok(())
    }

    /// A node whose tree disagrees with the serving STH at its size holds a corrupt tree: it
    /// must neither report nor serve.
    fn check_against_serving(&self, replica: &Replica) {
        let serving = replica
            .reader
            .read(|applied| applied.state.ct_serving().cloned());
        let Some(serving) = serving else { return };
        let size = serving.sth.tree_size;
        let root = (self.db.tree_size() >= size)
            .then(|| self.db.root_at(size))
            .transpose();
        let root = match root {
            Ok(root) => root,
            Err(error) => {
                warn!(id = replica.id, %error, "reading the local root failed");
                return;
            }
        };
        if let Some(root) = root
            && root != serving.sth.root_hash
            && !self.corrupt.swap(true, Ordering::Relaxed)
        {
            error!(
                id = replica.id,
                tree_size = size,
                "this node's Merkle tree disagrees with the serving STH; it stops reporting"
            );
        }
    }

    async fn sign_and_report(&self, replica: &Replica) -> Result<(), String> {
        let (serving, config, mirror) = replica.reader.read(|applied| {
            let state = &applied.state;
            (
                state.ct_serving().map(|s| s.sth.clone()),
                *state.ct_config(),
                state.ct_mirror().cloned(),
            )
        });
        let now_ms = replica.clock.now_ms();
        let sth = match mirror {
            Some(mirror) => match self.reproduced_source_sth(&mirror, serving)? {
                Some(sth) => sth,
                None => return Ok(()),
            },
            None => self.own_sth(serving.map(|s| s.timestamp_ms), now_ms)?,
        };
        // Report when the replicated report differs from what this node holds now.
        let contiguous_size = self.db.contiguous_size();
        let reported = replica.reader.read(|applied| {
            applied
                .state
                .ct_reports()
                .get(&replica.id)
                .is_some_and(|report| {
                    report.sth == sth
                        && report.contiguous_size == contiguous_size
                        && report.reported_at_ms + config.report_ttl_ms / 2 > now_ms
                })
        });
        if reported {
            return Ok(());
        }
        let command = CtCommand::Report {
            node: replica.id,
            sth,
            contiguous_size,
        };
        propose(replica, command).await
    }

    /// An origin log's node STH: the local tree signed with the log's key (re-signed when the
    /// tree grew or the last one is getting old).
    fn own_sth(
        &self,
        serving_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<certus_core::ct::SignedTreeHead, String> {
        let (tree_size, root) = self.db.size_and_root().map_err(|e| e.to_string())?;
        let last = self.db.last_sth();
        let fresh = last.as_ref().is_some_and(|last| {
            last.tree_size == tree_size && now_ms.saturating_sub(last.timestamp_ms) < STH_REFRESH_MS
        });
        if fresh {
            return Ok(last.expect("fresh implies a last STH"));
        }
        let previous_ms = last.as_ref().map(|s| s.timestamp_ms).max(serving_ms);
        let timestamp_ms =
            certus_core::ct::next_sth_timestamp(now_ms, previous_ms, self.db.newest_sct_ms());
        let signed = self
            .setup
            .signer
            .sign_sth(tree_size, timestamp_ms, &root)
            .map_err(|e| e.to_string())?;
        let sth = to_core_sth(&signed)?;
        self.db.save_sth(&sth).map_err(|e| e.to_string())?;
        Ok(sth)
    }

    /// A mirror node's report: the newest recorded source STH (or the serving one) whose tree
    /// this node holds, once it has checked that its own root at that size is the source's.
    fn reproduced_source_sth(
        &self,
        mirror: &certus_core::ct::MirrorState,
        serving: Option<certus_core::ct::SignedTreeHead>,
    ) -> Result<Option<certus_core::ct::SignedTreeHead>, String> {
        let tree_size = self.db.tree_size();
        let newest = mirror
            .targets
            .range(..=tree_size)
            .next_back()
            .map(|(_, sth)| sth.clone())
            .into_iter()
            .chain(serving.filter(|sth| sth.tree_size <= tree_size))
            .max_by_key(|sth| sth.timestamp_ms);
        let Some(sth) = newest else { return Ok(None) };
        let root = self
            .db
            .root_at(sth.tree_size)
            .map_err(|error| error.to_string())?;
        if root != sth.root_hash {
            if !self.corrupt.swap(true, Ordering::Relaxed) {
                error!(
                    tree_size = sth.tree_size,
                    "this node's Merkle tree does not reproduce the source STH; it stops reporting"
                );
            }
            return Err(format!(
                "the local root at {} is not the source's",
                sth.tree_size
            ));
        }
        Ok(Some(sth))
    }

    /// The master's work: sequence, publish, clean up. Each step runs even if an earlier one
    /// failed (each is checked by the state machine on its own).
    async fn lead(&self, replica: &Replica) -> Result<(), String> {
        let now_ms = replica.clock.now_ms();
        let members: BTreeSet<u64> = replica.membership().members.iter().map(|m| m.id).collect();
        let mut errors = Vec::new();
        let (next, ready, mirror) = replica.reader.read(|applied| {
            let state = &applied.state;
            (
                state.ct_next_sequence(),
                state.ct_ready_to_sequence(now_ms, certus_core::limits::CT_SEQUENCE_BATCH_MAX),
                state.ct_mirror().map(|mirror| mirror.source.clone()),
            )
        });
        let frozen = replica.reader.read(|applied| applied.state.ct_frozen());
        if let Some(source) = &mirror {
            if !frozen && let Err(error) = self.follow_source(replica, source).await {
                errors.push(format!("mirror: {error}"));
            }
        } else if !ready.is_empty() {
            let command = CtCommand::Sequence {
                first: next,
                keys: ready,
            };
            if let Err(error) = propose(replica, command).await {
                errors.push(format!("sequence: {error}"));
            }
        }
        let candidate = replica
            .reader
            .read(|applied| applied.state.ct_select_serving(&members, now_ms).cloned());
        if let Some(sth) = candidate {
            let published = match self.check_candidate(&sth, mirror.as_ref()) {
                Ok(()) => {
                    let size = sth.tree_size;
                    let command = CtCommand::Publish {
                        sth,
                        members: members.iter().copied().collect(),
                    };
                    let previous = replica
                        .reader
                        .read(|applied| applied.state.ct_serving().map_or(0, |s| s.sth.tree_size));
                    let published = propose(replica, command).await;
                    if published.is_ok() {
                        self.observe_merge_delays(replica, previous, size, now_ms);
                    }
                    published
                }
                Err(error) => Err(error),
            };
            if let Err(error) = published {
                errors.push(format!("publish: {error}"));
            }
        }
        // Seed 004's rule: what the serving STH covers was held by enough nodes; a member that
        // lacks some of it fetches it from them.
        let removable = replica.reader.read(|applied| {
            let state = &applied.state;
            let served = state.ct_serving().map_or(0, |s| s.sth.tree_size);
            served.saturating_sub(state.ct_first_held_sequence())
        });
        if removable > 0 {
            let max_entries = u32::try_from(removable).unwrap_or(u32::MAX);
            if let Err(error) = propose(replica, CtCommand::CleanUp { max_entries }).await {
                errors.push(format!("clean-up: {error}"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Merge delay of each entry a publication newly covers: from its SCT to the publication.
    fn observe_merge_delays(&self, replica: &Replica, from: u64, to: u64, published_ms: u64) {
        let count = usize::try_from(to.saturating_sub(from)).unwrap_or(usize::MAX);
        replica.reader.read(|applied| {
            for (_, held) in applied.state.ct_sequenced_from(from, count) {
                let delay_ms = published_ms.saturating_sub(held.submission.sct_timestamp_ms);
                self.metrics.observe_merge_delay_ms(delay_ms);
            }
        });
    }

    /// Reads the mirror's source and appends what it proves (see `ct::mirror`).
    #[cfg(not(madsim))]
    async fn follow_source(
        &self,
        replica: &Replica,
        source: &certus_core::ct::MirrorSource,
    ) -> Result<(), String> {
        let frontier_at = |size: u64| self.db.frontier(size).ok();
        self.mirror
            .follow(replica, source, frontier_at, self.metrics.mirror_errors())
            .await
    }

    /// The simulation reaches nodes over gRPC only; a mirror's source is an HTTP log.
    #[cfg(madsim)]
    async fn follow_source(
        &self,
        _replica: &Replica,
        source: &certus_core::ct::MirrorSource,
    ) -> Result<(), String> {
        Err(format!(
            "cannot read {} in the simulation: mirrors read their source over HTTP",
            source.url
        ))
    }

    /// The master's own cross-check before publishing: the signature verifies under the log's
    /// key (a mirror's: the source's), and where its own tree is large enough, the root is the
    /// one it computes.
    fn check_candidate(
        &self,
        sth: &certus_core::ct::SignedTreeHead,
        mirror: Option<&certus_core::ct::MirrorSource>,
    ) -> Result<(), String> {
        let signed = from_core_sth(sth)?;
        let source_verifier = mirror
            .map(|source| LogVerifier::from_public_key_der(&source.public_key_der))
            .transpose()
            .map_err(|error| format!("the source's public key: {error}"))?;
        source_verifier
            .as_ref()
            .unwrap_or(&self.verifier)
            .verify_sth(&signed)
            .map_err(|error| format!("candidate STH does not verify: {error}"))?;
        let own_root =
            (self.db.tree_size() >= sth.tree_size).then(|| self.db.root_at(sth.tree_size));
        if let Some(Ok(root)) = own_root
            && root != sth.root_hash
        {
            return Err(format!(
                "candidate STH at size {} has a root this node does not compute",
                sth.tree_size
            ));
        }
        Ok(())
    }

    /// The serving STH as RFC 6962 structures, if this node can serve it (its tree is large
    /// enough and not corrupt).
    pub fn servable_sth(&self, replica: &Replica) -> Result<SignedTreeHead, ServeError> {
        let serving = replica
            .reader
            .read(|applied| applied.state.ct_serving().cloned())
            .ok_or(ServeError::NoSth)?;
        if self.is_corrupt() || self.db.tree_size() < serving.sth.tree_size {
            return Err(ServeError::Behind {
                tree_size: self.db.tree_size(),
                serving: serving.sth.tree_size,
            });
        }
        from_core_sth(&serving.sth).map_err(ServeError::Internal)
    }

    fn serving_or_read_error(&self, replica: &Replica) -> Result<SignedTreeHead, ReadError> {
        self.servable_sth(replica).map_err(|error| match error {
            ServeError::NoSth | ServeError::Behind { .. } => {
                ReadError::Unavailable(error.to_string())
            }
            ServeError::Internal(message) => ReadError::Internal(message),
        })
    }

    /// get-sth-consistency: a proof between `first` and `second`, both within the serving tree.
    pub fn consistency(
        &self,
        replica: &Replica,
        first: u64,
        second: u64,
    ) -> Result<Vec<Hash>, ReadError> {
        let sth = self.serving_or_read_error(replica)?;
        if first > second || second > sth.tree_size {
            return Err(ReadError::BadRequest(format!(
                "need first <= second <= {} (the serving tree size); got first={first}, second={second}",
                sth.tree_size
            )));
        }
        // RFC 6962 defines no proof from the empty tree: every tree is consistent with it.
        if first == 0 {
            return Ok(Vec::new());
        }
        self.db
            .consistency_proof(first, second)
            .map_err(|error| ReadError::Internal(error.to_string()))
    }

    /// get-proof-by-hash: the index of the leaf and its audit path in the tree of `tree_size`.
    pub fn proof_by_hash(
        &self,
        replica: &Replica,
        leaf_hash: &Hash,
        tree_size: u64,
    ) -> Result<(u64, Vec<Hash>), ReadError> {
        let sth = self.serving_or_read_error(replica)?;
        if tree_size == 0 || tree_size > sth.tree_size {
            return Err(ReadError::BadRequest(format!(
                "tree_size must be 1..={} (the serving tree size), not {tree_size}",
                sth.tree_size
            )));
        }
        let index = match self.db.index_of_leaf(leaf_hash) {
            Ok(Some(index)) if index < tree_size => index,
            Ok(_) => {
                return Err(ReadError::NotFound(format!(
                    "no leaf with this hash in the tree of size {tree_size}"
                )));
            }
            Err(error) => return Err(ReadError::Internal(error.to_string())),
        };
        let path = self
            .db
            .inclusion_proof(index, tree_size)
            .map_err(|error| ReadError::Internal(error.to_string()))?;
        Ok((index, path))
    }

    /// get-entries: stored entries `start..=end`, cut at the serving tree and at
    /// [`GET_ENTRIES_MAX`].
    pub fn entries(
        &self,
        replica: &Replica,
        start: u64,
        end: u64,
    ) -> Result<Vec<LocalEntry>, ReadError> {
        let sth = self.serving_or_read_error(replica)?;
        if start > end || start >= sth.tree_size {
            return Err(ReadError::BadRequest(format!(
                "need start <= end and start < {} (the serving tree size); got start={start}, end={end}",
                sth.tree_size
            )));
        }
        let last = end.min(sth.tree_size - 1).min(start + GET_ENTRIES_MAX - 1);
        let count = usize::try_from(last - start + 1).expect("at most GET_ENTRIES_MAX");
        match self.db.entries(start, count) {
            Ok(stored) if stored.len() == count => Ok(stored),
            Ok(stored) => Err(ReadError::Internal(format!(
                "entries {start}..={last} are served but only {} are stored",
                stored.len()
            ))),
            Err(error) => Err(ReadError::Internal(error.to_string())),
        }
    }

    /// get-entry-and-proof: entry `index` and its audit path in the tree of `tree_size`.
    pub fn entry_and_proof(
        &self,
        replica: &Replica,
        index: u64,
        tree_size: u64,
    ) -> Result<(LocalEntry, Vec<Hash>), ReadError> {
        let sth = self.serving_or_read_error(replica)?;
        if index >= tree_size || tree_size > sth.tree_size {
            return Err(ReadError::BadRequest(format!(
                "need leaf_index < tree_size <= {} (the serving tree size); got leaf_index={index}, tree_size={tree_size}",
                sth.tree_size
            )));
        }
        let entry = match self.db.entry(index) {
            Ok(Some(entry)) => entry,
            Ok(None) => {
                return Err(ReadError::Internal(format!(
                    "entry {index} is served but not stored"
                )));
            }
            Err(error) => return Err(ReadError::Internal(error.to_string())),
        };
        let path = self
            .db
            .inclusion_proof(index, tree_size)
            .map_err(|error| ReadError::Internal(error.to_string()))?;
        Ok((entry, path))
    }

    /// The serving STH, as a read.
    pub fn sth(&self, replica: &Replica) -> Result<SignedTreeHead, ReadError> {
        self.serving_or_read_error(replica)
    }

    /// Answers `read` from this node's tree; if it is behind the serving STH and `may_proxy`
    /// (the request was not itself forwarded), from a node that holds the serving tree.
    pub async fn read(
        &self,
        replica: &Replica,
        read: Read,
        may_proxy: bool,
    ) -> Result<ReadReply, ReadError> {
        match self.read_local(replica, &read) {
            Err(ReadError::Unavailable(reason)) if may_proxy => {
                let serving = replica
                    .reader
                    .read(|applied| applied.state.ct_serving().map(|s| s.sth.tree_size));
                match serving {
                    Some(size) => self.peers.read(replica, &read, size).await,
                    None => Err(ReadError::Unavailable(reason)),
                }
            }
            answered => answered,
        }
    }

    fn read_local(&self, replica: &Replica, read: &Read) -> Result<ReadReply, ReadError> {
        let served = |entry: LocalEntry| (entry.leaf_input, entry.extra_data);
        Ok(match *read {
            Read::Sth => ReadReply::Sth(self.sth(replica)?),
            Read::Consistency { first, second } => {
                ReadReply::Consistency(self.consistency(replica, first, second)?)
            }
            Read::ProofByHash {
                leaf_hash,
                tree_size,
            } => {
                let (leaf_index, audit_path) =
                    self.proof_by_hash(replica, &leaf_hash, tree_size)?;
                ReadReply::Proof {
                    leaf_index,
                    audit_path,
                }
            }
            Read::Entries { start, end } => ReadReply::Entries(
                self.entries(replica, start, end)?
                    .into_iter()
                    .map(served)
                    .collect(),
            ),
            Read::EntryAndProof {
                leaf_index,
                tree_size,
            } => {
                let (entry, audit_path) = self.entry_and_proof(replica, leaf_index, tree_size)?;
                ReadReply::EntryAndProof {
                    entry: served(entry),
                    audit_path,
                }
            }
        })
    }

    /// Stored entries from `start` (not limited to the serving STH), for a peer catching up.
    pub fn stored_entries(&self, start: u64, limit: usize) -> Result<Vec<LocalEntry>, ReadError> {
        self.db
            .entries(start, limit)
            .map_err(|error| ReadError::Internal(error.to_string()))
    }
}

/// The local tree's gauges: read from the database at scrape time.
impl LocalTree for CtNode {
    fn tree_size(&self) -> u64 {
        self.db.tree_size()
    }

    fn contiguous_size(&self) -> u64 {
        self.db.contiguous_size()
    }
}

/// Why a read cannot be served by this node.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No STH has been published yet.
    #[error("the log has not published a tree head yet")]
    NoSth,
    /// This node has not integrated the serving tree yet.
    #[error("this node holds {tree_size} entries; the serving tree has {serving}")]
    Behind {
        /// Local tree size.
        tree_size: u64,
        /// Serving tree size.
        serving: u64,
    },
    /// Stored data could not be converted.
    #[error("{0}")]
    Internal(String),
}

fn decode_sct(bytes: &[u8]) -> Result<SignedCertificateTimestamp, SubmitError> {
    SignedCertificateTimestamp::decode(bytes)
        .map_err(|error| SubmitError::Signing(format!("a stored SCT does not decode: {error}")))
}

/// The node's CT loop: one round per the log's shortest interval, until `stop`.
pub async fn run(replica: Arc<Replica>, ct: Arc<CtNode>, mut stop: watch::Receiver<bool>) {
    loop {
        let interval_ms = replica.reader.read(|applied| {
            let config = applied.state.ct_config();
            config
                .signing_interval_ms
                .min(config.sequencing_interval_ms)
        });
        tokio::select! {
            // Polled in order, not at random: the simulation replays a seed exactly.
            biased;
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
            () = tokio::time::sleep(Duration::from_millis(interval_ms)) => {
                ct.round(&replica).await;
            }
        }
    }
    debug!(id = replica.id, "CT roles stopped");
}
