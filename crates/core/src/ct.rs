//! The replicated part of the clustered Certificate Transparency log (seed 004, with etcd's
//! `/entries`, `/sequence_mapping`, `/nodes`, `/serving_sth`, `/cluster_config` and
//! `/log_control` replaced by this module).
//!
//! What lives here is what every node must agree on: submitted entries until they are covered by
//! the serving STH, the sequence numbers the master assigned, each node's report of the tree it
//! holds, the serving STH, and the log's configuration and control. Entry bytes are opaque: the
//! node builds the MerkleTreeLeaf, the SCT and the dedupe key (with `certus-ct`) before proposing,
//! so this crate needs no cryptography.
//!
//! Invariants (checked by [`CtLog::check`]):
//! - every submitted entry has at most one sequence number, and every number at most one entry:
//!   the sequence mapping is exactly the set of numbered entries, and it is contiguous from the
//!   first number not yet cleaned up to `next_sequence`;
//! - the unsequenced index holds exactly the entries without a number;
//! - cleaned-up keys are disjoint from held entries, and their numbers are below the held ones;
//!   only those numbered at or above the dedupe window's `forgotten_below` are remembered, and
//!   `forgotten_below` never passes the first held number;
//! - the serving STH never covers more than was sequenced, and cleaning up never goes past it;
//! - node reports never claim more than was sequenced.
//!
//! A log is either an origin (it takes submissions and sequences them) or, from
//! [`CtCommand::StartMirror`] on an empty log, a mirror of another RFC 6962 log: the master
//! appends the source's entries in its order ([`CtCommand::MirrorAppend`], a check-and-set on the
//! next number like sequencing) after checking them against a source STH, nodes report source
//! STHs their own trees reproduce, and only such an STH is ever served.
//!
//! **Deduplication.** A submission of an entry the log already has is answered with the first
//! SCT, never logged twice. Held entries and the last cleaned-up ones (the [`DedupeWindow`]) are
//! caught here; older ones are in every serving node's local database, which indexes entries by
//! their key. A node checks its index before proposing and sends [`CtCommand::AddChecked`] with
//! the tree size that index covered; if the state has since forgotten entries the node did not
//! check, the submission is refused ([`CtError::Unchecked`]) and the node checks again. So the
//! state's memory stays bounded while every duplicate is still caught.
//!
//! Safety rules enforced on apply: sequencing is a check-and-set on the next number, so a master
//! that lost its mandate cannot assign twice; a new serving STH is never smaller, is strictly
//! newer, matches the root of the one it replaces at equal size, and was held by enough nodes at
//! the moment it is published.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::limits::{
    CT_ADD_BATCH_MAX, CT_CLEANUP_BATCH_MAX, CT_DEDUPE_WINDOW_ENTRIES_DEFAULT,
    CT_DEDUPE_WINDOW_ENTRIES_MAX, CT_EXTRA_DATA_BYTES_MAX, CT_LEAF_INPUT_BYTES_MAX,
    CT_MIRROR_BATCH_MAX, CT_MIRROR_TARGETS_MAX, CT_MIRROR_URL_BYTES_MAX, CT_NODES_MAX,
    CT_PUBLIC_KEY_BYTES_MAX, CT_SCT_BYTES_MAX, CT_SEQUENCE_BATCH_MAX, CT_SIGNATURE_BYTES_MAX,
    CT_UNSEQUENCED_MAX,
};

/// The identity of a logged entry for deduplication: SHA-256 over what the entry certifies
/// (entry type and signed entry, without the timestamp), computed by the submitting node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntryKey(pub [u8; 32]);

impl std::fmt::Display for EntryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…")
    }
}

/// One accepted submission, as a node proposes it after checking the chain and signing the SCT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// The dedupe identity.
    pub key: EntryKey,
    /// The SCT's timestamp, which is also the one inside `leaf_input`.
    pub sct_timestamp_ms: u64,
    /// The RFC 6962 MerkleTreeLeaf encoding: what the leaf hash is taken over.
    #[serde(with = "serde_bytes")]
    pub leaf_input: Vec<u8>,
    /// The get-entries `extra_data`: the chain (or PrecertChainEntry) as logged.
    #[serde(with = "serde_bytes")]
    pub extra_data: Vec<u8>,
    /// The TLS encoding of the SCT returned to the submitter, returned again to duplicates.
    #[serde(with = "serde_bytes")]
    pub sct: Vec<u8>,
}

/// A submission held in the replicated state until the serving STH covers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldEntry {
    /// What was submitted.
    pub submission: Submission,
    /// The sequence number the master assigned, once it has.
    pub sequence: Option<u64>,
}

/// A tree head signed by one node (RFC 6962 §3.5 fields; the signature is the TLS
/// `digitally-signed` encoding). Every node signs with the log's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedTreeHead {
    /// Number of leaves.
    pub tree_size: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The Merkle tree hash of the first `tree_size` leaves.
    pub root_hash: [u8; 32],
    /// The `digitally-signed` encoding of the signature.
    #[serde(with = "serde_bytes")]
    pub signature: Vec<u8>,
}

/// What a node last reported (the seed's `/nodes/<node>` entry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node's latest STH over its local tree.
    pub sth: SignedTreeHead,
    /// How many leading entries the node holds in its local database.
    pub contiguous_size: u64,
    /// Machine time of the report; reports older than the configured TTL do not count as
    /// holders when an STH is published.
    pub reported_at_ms: u64,
}

/// The log's cluster-wide configuration (the seed's `cluster_config`), changed at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogConfig {
    /// An STH is published only when at least this many nodes hold its tree.
    pub min_serving_nodes: u32,
    /// … and at least this share of the members, in thousandths (750 = 75 %).
    pub min_serving_permille: u32,
    /// Past this many unsequenced entries, submissions are refused (back-pressure).
    pub unsequenced_watermark: u64,
    /// Entries are sequenced only once their SCT timestamp is this far behind the machine clock,
    /// so that entries stamped by slightly slow clocks still sort into place.
    pub guard_window_ms: u64,
    /// How often each node integrates new entries and signs a node STH.
    pub signing_interval_ms: u64,
    /// How often the master sequences.
    pub sequencing_interval_ms: u64,
    /// A node report older than this does not count towards publishing.
    pub report_ttl_ms: u64,
}

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            min_serving_nodes: 2,
            min_serving_permille: 500,
            unsequenced_watermark: 100_000,
            guard_window_ms: 100,
            signing_interval_ms: 200,
            sequencing_interval_ms: 100,
            report_ttl_ms: 30_000,
        }
    }
}

impl LogConfig {
    /// Checks every field against its bounds, naming the first one out of range.
    pub fn validate(&self) -> Result<(), CtError> {
        let out_of_range = |field: &'static str, min: u64, max: u64, got: u64| {
            if (min..=max).contains(&got) {
                Ok(())
            } else {
                Err(CtError::InvalidConfig {
                    field: field.to_owned(),
                    reason: format!("{got} is outside {min}..={max}"),
                })
            }
        };
        out_of_range(
            "min_serving_nodes",
            1,
            CT_NODES_MAX as u64,
            self.min_serving_nodes.into(),
        )?;
        out_of_range(
            "min_serving_permille",
            0,
            1000,
            self.min_serving_permille.into(),
        )?;
        out_of_range(
            "unsequenced_watermark",
            1,
            CT_UNSEQUENCED_MAX as u64,
            self.unsequenced_watermark,
        )?;
        out_of_range("guard_window_ms", 0, 3_600_000, self.guard_window_ms)?;
        out_of_range(
            "signing_interval_ms",
            10,
            3_600_000,
            self.signing_interval_ms,
        )?;
        out_of_range(
            "sequencing_interval_ms",
            10,
            3_600_000,
            self.sequencing_interval_ms,
        )?;
        out_of_range("report_ttl_ms", 100, 86_400_000, self.report_ttl_ms)?;
        Ok(())
    }
}

/// The RFC 6962 log a mirror follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorSource {
    /// The source's base URL; its API is under `<url>/ct/v1/`.
    pub url: String,
    /// The source's public key (DER SubjectPublicKeyInfo): every STH served must verify under it.
    #[serde(with = "serde_bytes")]
    pub public_key_der: Vec<u8>,
}

/// One entry of the source log, exactly as its get-entries returned it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorEntry {
    /// The MerkleTreeLeaf encoding.
    #[serde(with = "serde_bytes")]
    pub leaf_input: Vec<u8>,
    /// The chain data.
    #[serde(with = "serde_bytes")]
    pub extra_data: Vec<u8>,
}

/// A mirror's replicated state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorState {
    /// What is mirrored.
    pub source: MirrorSource,
    /// Source STHs over entries the cluster has in full (the master checked each against the
    /// tree it extends), newer than the serving STH, by tree size: what nodes may report.
    pub targets: BTreeMap<u64, SignedTreeHead>,
    /// The newest source STH recorded: the next must be newer and not smaller.
    pub latest: Option<SignedTreeHead>,
}

/// The CT commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CtCommand {
    /// Add submissions (many requests share one command). Each gets its own outcome.
    Add {
        /// The submissions, in arrival order.
        submissions: Vec<Submission>,
    },
    /// Assign `first`, `first + 1`, … to `keys`, in order; refused unless `first` is the next
    /// number (check-and-set).
    Sequence {
        /// The number the master believes is next.
        first: u64,
        /// Unsequenced entries, ordered by (SCT timestamp, key).
        keys: Vec<EntryKey>,
    },
    /// A node's latest STH and how much it holds.
    Report {
        /// The reporting node.
        node: u64,
        /// Its STH.
        sth: SignedTreeHead,
        /// Its contiguous local size.
        contiguous_size: u64,
    },
    /// Make `sth` (one node's reported STH) the serving STH.
    Publish {
        /// The STH, exactly as a member reported it.
        sth: SignedTreeHead,
        /// The cluster members the master counted.
        members: Vec<u64>,
    },
    /// Drop up to `max_entries` entries covered by the serving STH from the replicated state;
    /// their keys stay known for deduplication.
    CleanUp {
        /// The most entries to drop in this command.
        max_entries: u32,
    },
    /// Replace the configuration.
    Configure(LogConfig),
    /// Freeze (no new entries; STHs are still served) or unfreeze the log.
    SetFrozen {
        /// Whether the log is frozen.
        frozen: bool,
    },
    /// Forget a node's report (it left the cluster).
    ForgetNode {
        /// The node.
        node: u64,
    },
    /// Make this (empty) log a mirror of `source`, for good; on a mirror of the same key, change
    /// the source's URL (the source moved).
    StartMirror(MirrorSource),
    /// Append source entries as numbers `first, first + 1, …` (check-and-set on the next
    /// number); with `sth`, record that source STH, whose tree the appended entries complete.
    MirrorAppend {
        /// The number the master believes is next.
        first: u64,
        /// The source's entries `first..first + len`.
        entries: Vec<MirrorEntry>,
        /// A source STH of size `first + len`, checked by the master against its tree.
        sth: Option<SignedTreeHead>,
    },
    /// Add submissions that the proposing node checked against its local entry-key index,
    /// which covered entries `0..checked_below`: a submission the state does not know is refused
    /// ([`CtError::Unchecked`]) if the state has forgotten entries at or above `checked_below`.
    /// ([`CtCommand::Add`], from before local indexes, is applied without that check.)
    AddChecked {
        /// The submissions, in arrival order.
        submissions: Vec<Submission>,
        /// The tree size the node's entry-key index covered when it checked them.
        checked_below: u64,
    },
    /// Set how many cleaned-up entries the state remembers for deduplication.
    SetDedupeWindow {
        /// Entries below the first held number that stay remembered.
        entries: u64,
    },
}

/// What happened to one submission of an [`CtCommand::Add`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddOutcome {
    /// Stored; the submitter returns its SCT.
    Added,
    /// The entry is already held: return the original SCT.
    Duplicate {
        /// The SCT given to the first submission.
        #[serde(with = "serde_bytes")]
        sct: Vec<u8>,
        /// Its sequence number, if assigned.
        sequence: Option<u64>,
    },
    /// The entry was logged and cleaned up from the replicated state: its SCT is in every
    /// serving node's local database under `sequence`.
    DuplicateCleanedUp {
        /// Its sequence number.
        sequence: u64,
        /// Its SCT timestamp.
        sct_timestamp_ms: u64,
    },
    /// Not stored.
    Refused(CtError),
}

/// What a successful CT command returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CtReply {
    /// One outcome per submission, in order.
    Added(Vec<AddOutcome>),
    /// Numbers `first .. first + count` were assigned.
    Sequenced {
        /// The first number.
        first: u64,
        /// How many.
        count: u64,
    },
    /// The report is stored.
    Reported,
    /// The STH now serves.
    Published {
        /// The tree size of the STH it replaced (0 if none).
        previous_tree_size: u64,
    },
    /// Entries were dropped.
    CleanedUp {
        /// How many.
        removed: u64,
        /// Covered entries still held (another clean-up is due).
        remaining: u64,
    },
    /// The configuration or control changed.
    Configured,
    /// The node's report is gone.
    Forgotten {
        /// Whether there was one.
        existed: bool,
    },
    /// Source entries `first .. first + count` were appended (and the STH recorded, if any).
    Mirrored {
        /// The first number.
        first: u64,
        /// How many.
        count: u64,
    },
}

/// Why a CT command (or one submission) was refused. A refused command changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CtError {
    /// Too many unsequenced entries: back-pressure (HTTP 503, gRPC RESOURCE_EXHAUSTED).
    #[error("{unsequenced} entries await sequencing (watermark {watermark}); retry later")]
    Backlog {
        /// Entries waiting.
        unsequenced: u64,
        /// The configured watermark.
        watermark: u64,
    },
    /// The log is frozen by its operator.
    #[error("the log is frozen: it serves reads but accepts no new entries")]
    Frozen,
    /// A field is larger than the state machine accepts.
    #[error("{field} is {bytes} bytes; at most {max} are accepted")]
    TooLarge {
        /// Which field.
        field: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A command carried too many items.
    #[error("{what}: {count} items in one command; at most {max}")]
    BatchTooLarge {
        /// Which command.
        what: String,
        /// Items sent.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A submission's fields disagree with each other.
    #[error("malformed submission: {0}")]
    MalformedSubmission(String),
    /// The sequencer's idea of the next number is stale (another master sequenced meanwhile).
    #[error("sequencing from {got}, but the next number is {expected}")]
    StaleSequence {
        /// The next number.
        expected: u64,
        /// What the command said.
        got: u64,
    },
    /// A sequence batch names an entry that cannot be sequenced now.
    #[error("cannot sequence entry {key}: {reason}")]
    NotSequenceable {
        /// The entry.
        key: EntryKey,
        /// Why.
        reason: String,
    },
    /// A node report contradicts the state.
    #[error("report from node {node} refused: {reason}")]
    BadReport {
        /// The node.
        node: u64,
        /// Why.
        reason: String,
    },
    /// A publish contradicts the rules for the serving STH.
    #[error("cannot publish the STH of size {tree_size}: {reason}")]
    NotPublishable {
        /// Its size.
        tree_size: u64,
        /// Why.
        reason: String,
    },
    /// The log mirrors another log: submissions go to the source.
    #[error("this log mirrors {source_url}; submit to the source log")]
    IsMirror {
        /// The source's URL.
        source_url: String,
    },
    /// A mirror command was refused.
    #[error("mirror: {0}")]
    Mirror(String),
    /// A configuration field is out of range.
    #[error("log config {field}: {reason}")]
    InvalidConfig {
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
    /// The submitting node checked its local entry-key index up to `checked_below`, but the
    /// state no longer remembers entries below `forgotten_below`: it must check again (or catch
    /// up first, if its tree is that far behind).
    #[error(
        "the entry was checked against entries 0..{checked_below} of the local index, but the log forgets cleaned-up entries below {forgotten_below}; check again"
    )]
    Unchecked {
        /// What the node's index covered.
        checked_below: u64,
        /// What the state no longer remembers.
        forgotten_below: u64,
    },
}

/// The serving STH and when it was published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServingSth {
    /// The STH.
    pub sth: SignedTreeHead,
    /// Machine time of publication.
    pub published_at_ms: u64,
}

/// A cleaned-up entry's dedupe record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanedEntry {
    /// Its sequence number.
    pub sequence: u64,
    /// Its SCT timestamp.
    pub sct_timestamp_ms: u64,
}

/// How many cleaned-up entries the state remembers for deduplication, and below which number
/// it remembers none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupeWindow {
    /// Cleaned-up entries numbered this far below the first held number are forgotten.
    pub entries: u64,
    /// Cleaned-up entries numbered below this are forgotten (never decreases).
    pub forgotten_below: u64,
}

impl Default for DedupeWindow {
    fn default() -> DedupeWindow {
        DedupeWindow {
            entries: CT_DEDUPE_WINDOW_ENTRIES_DEFAULT,
            forgotten_below: 0,
        }
    }
}

/// The log's replicated state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CtLog {
    pub(crate) config: LogConfig,
    pub(crate) frozen: bool,
    pub(crate) held: BTreeMap<EntryKey, HeldEntry>,
    /// Derived: `(sct_timestamp_ms, key)` of every held entry without a number.
    unsequenced: BTreeSet<(u64, EntryKey)>,
    /// Derived: number → key of every held entry with a number.
    sequence_mapping: BTreeMap<u64, EntryKey>,
    pub(crate) cleaned: BTreeMap<EntryKey, CleanedEntry>,
    /// Derived: number → key of every remembered cleaned-up entry (what the window forgets
    /// first).
    cleaned_by_sequence: BTreeMap<u64, EntryKey>,
    pub(crate) dedupe: DedupeWindow,
    pub(crate) next_sequence: u64,
    pub(crate) reports: BTreeMap<u64, NodeReport>,
    pub(crate) serving: Option<ServingSth>,
    pub(crate) mirror: Option<MirrorState>,
}

/// The parts of [`CtLog`] a snapshot stores; the indexes are rebuilt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CtRecords {
    pub(crate) config: LogConfig,
    pub(crate) frozen: bool,
    pub(crate) held: Vec<HeldEntry>,
    pub(crate) cleaned: Vec<(EntryKey, CleanedEntry)>,
    pub(crate) next_sequence: u64,
    pub(crate) reports: Vec<(u64, NodeReport)>,
    pub(crate) serving: Option<ServingSth>,
}

/// The byte offset of the timestamp inside a MerkleTreeLeaf (after version and leaf type).
const LEAF_TIMESTAMP_OFFSET: usize = 2;

impl CtLog {
    pub(crate) fn apply(&mut self, command: CtCommand, now_ms: u64) -> Result<CtReply, CtError> {
        match command {
            CtCommand::Add { submissions } => self.add(submissions, None),
            CtCommand::AddChecked {
                submissions,
                checked_below,
            } => self.add(submissions, Some(checked_below)),
            CtCommand::SetDedupeWindow { entries } => {
                if entries > CT_DEDUPE_WINDOW_ENTRIES_MAX {
                    return Err(CtError::InvalidConfig {
                        field: "dedupe_window_entries".to_owned(),
                        reason: format!("{entries} is outside 0..={CT_DEDUPE_WINDOW_ENTRIES_MAX}"),
                    });
                }
                self.dedupe.entries = entries;
                self.forget_outside_window();
                Ok(CtReply::Configured)
            }
            CtCommand::Sequence { first, keys } => self.sequence(first, keys, now_ms),
            CtCommand::Report {
                node,
                sth,
                contiguous_size,
            } => self.report(node, sth, contiguous_size, now_ms),
            CtCommand::Publish { sth, members } => self.publish(sth, &members, now_ms),
            CtCommand::CleanUp { max_entries } => Ok(self.clean_up(max_entries)),
            CtCommand::Configure(config) => {
                config.validate()?;
                self.config = config;
                Ok(CtReply::Configured)
            }
            CtCommand::SetFrozen { frozen } => {
                self.frozen = frozen;
                Ok(CtReply::Configured)
            }
            CtCommand::ForgetNode { node } => Ok(CtReply::Forgotten {
                existed: self.reports.remove(&node).is_some(),
            }),
            CtCommand::StartMirror(source) => self.start_mirror(source),
            CtCommand::MirrorAppend {
                first,
                entries,
                sth,
            } => self.mirror_append(first, entries, sth),
        }
    }

    fn start_mirror(&mut self, source: MirrorSource) -> Result<CtReply, CtError> {
        let refuse = |reason: String| Err(CtError::Mirror(reason));
        if source.url.is_empty() || source.url.len() > CT_MIRROR_URL_BYTES_MAX {
            return refuse(format!(
                "the source URL must be 1 to {CT_MIRROR_URL_BYTES_MAX} bytes"
            ));
        }
        if source.public_key_der.is_empty() || source.public_key_der.len() > CT_PUBLIC_KEY_BYTES_MAX
        {
            return refuse(format!(
                "the source public key must be 1 to {CT_PUBLIC_KEY_BYTES_MAX} bytes"
            ));
        }
        if let Some(mirror) = &mut self.mirror {
            if mirror.source.public_key_der != source.public_key_der {
                return refuse(
                    "this log already mirrors a log with another key; a mirror cannot change logs"
                        .to_owned(),
                );
            }
            mirror.source.url = source.url;
            return Ok(CtReply::Configured);
        }
        if self.next_sequence > 0 || !self.held.is_empty() || self.serving.is_some() {
            return refuse(
                "only an empty log can become a mirror; this one has entries of its own".to_owned(),
            );
        }
        self.mirror = Some(MirrorState {
            source,
            targets: BTreeMap::new(),
            latest: None,
        });
        Ok(CtReply::Configured)
    }

    fn mirror_append(
        &mut self,
        first: u64,
        entries: Vec<MirrorEntry>,
        sth: Option<SignedTreeHead>,
    ) -> Result<CtReply, CtError> {
        let refuse = |reason: String| Err(CtError::Mirror(reason));
        let Some(mirror) = &self.mirror else {
            return refuse("this log is not a mirror".to_owned());
        };
        // A frozen mirror stops following: it serves what it has.
        if self.frozen {
            return Err(CtError::Frozen);
        }
        if first != self.next_sequence {
            return Err(CtError::StaleSequence {
                expected: self.next_sequence,
                got: first,
            });
        }
        if entries.len() > CT_MIRROR_BATCH_MAX {
            return Err(CtError::BatchTooLarge {
                what: "mirror append".to_owned(),
                count: entries.len(),
                max: CT_MIRROR_BATCH_MAX,
            });
        }
        let held = self.held.len() as u64;
        if !entries.is_empty() && held >= self.config.unsequenced_watermark {
            return Err(CtError::Backlog {
                unsequenced: held,
                watermark: self.config.unsequenced_watermark,
            });
        }
        for entry in &entries {
            check_entry_sizes(&entry.leaf_input, &entry.extra_data, &[])?;
            leaf_timestamp(&entry.leaf_input).ok_or_else(|| {
                CtError::MalformedSubmission("a leaf too short to hold a timestamp".to_owned())
            })?;
        }
        let count = entries.len() as u64;
        let size = first + count;
        if let Some(sth) = &sth {
            check_signature_size(sth)?;
            if sth.tree_size != size {
                return refuse(format!(
                    "the STH has size {} but the entries end at {size}",
                    sth.tree_size
                ));
            }
            if let Some(latest) = &mirror.latest
                && (sth.timestamp_ms <= latest.timestamp_ms || sth.tree_size < latest.tree_size)
            {
                return refuse(format!(
                    "the STH (size {}, time {}) is not newer than the last recorded (size {}, time {})",
                    sth.tree_size, sth.timestamp_ms, latest.tree_size, latest.timestamp_ms
                ));
            }
        }
        for (offset, entry) in entries.into_iter().enumerate() {
            let sequence = first + offset as u64;
            let key = mirror_key(sequence);
            let sct_timestamp_ms = leaf_timestamp(&entry.leaf_input).expect("checked above");
            self.held.insert(
                key,
                HeldEntry {
                    submission: Submission {
                        key,
                        sct_timestamp_ms,
                        leaf_input: entry.leaf_input,
                        extra_data: entry.extra_data,
                        sct: Vec::new(),
                    },
                    sequence: Some(sequence),
                },
            );
            self.sequence_mapping.insert(sequence, key);
        }
        self.next_sequence = size;
        if let Some(sth) = sth {
            let mirror = self.mirror.as_mut().expect("checked above");
            mirror.latest = Some(sth.clone());
            mirror.targets.insert(sth.tree_size, sth);
            while mirror.targets.len() > CT_MIRROR_TARGETS_MAX {
                mirror.targets.pop_first();
            }
        }
        Ok(CtReply::Mirrored { first, count })
    }

    /// `checked_below`: what the submitting node's local entry-key index covered, if it checked.
    fn add(
        &mut self,
        submissions: Vec<Submission>,
        checked_below: Option<u64>,
    ) -> Result<CtReply, CtError> {
        if let Some(mirror) = &self.mirror {
            return Err(CtError::IsMirror {
                source_url: mirror.source.url.clone(),
            });
        }
        if submissions.len() > CT_ADD_BATCH_MAX {
            return Err(CtError::BatchTooLarge {
                what: "add".to_owned(),
                count: submissions.len(),
                max: CT_ADD_BATCH_MAX,
            });
        }
        let outcomes = submissions
            .into_iter()
            .map(|submission| self.add_one(submission, checked_below))
            .collect();
        Ok(CtReply::Added(outcomes))
    }

    fn add_one(&mut self, submission: Submission, checked_below: Option<u64>) -> AddOutcome {
        if let Some(held) = self.held.get(&submission.key) {
            return AddOutcome::Duplicate {
                sct: held.submission.sct.clone(),
                sequence: held.sequence,
            };
        }
        if let Some(cleaned) = self.cleaned.get(&submission.key) {
            return AddOutcome::DuplicateCleanedUp {
                sequence: cleaned.sequence,
                sct_timestamp_ms: cleaned.sct_timestamp_ms,
            };
        }
        // Neither held nor remembered: new, unless it is among the forgotten entries, which only
        // the submitting node's index can rule out.
        if let Some(checked_below) = checked_below
            && checked_below < self.dedupe.forgotten_below
        {
            return AddOutcome::Refused(CtError::Unchecked {
                checked_below,
                forgotten_below: self.dedupe.forgotten_below,
            });
        }
        if let Err(error) = check_submission(&submission) {
            return AddOutcome::Refused(error);
        }
        if self.frozen {
            return AddOutcome::Refused(CtError::Frozen);
        }
        let unsequenced = self.unsequenced.len() as u64;
        if unsequenced >= self.config.unsequenced_watermark {
            return AddOutcome::Refused(CtError::Backlog {
                unsequenced,
                watermark: self.config.unsequenced_watermark,
            });
        }
        self.unsequenced
            .insert((submission.sct_timestamp_ms, submission.key));
        self.held.insert(
            submission.key,
            HeldEntry {
                submission,
                sequence: None,
            },
        );
        AddOutcome::Added
    }

    fn sequence(
        &mut self,
        first: u64,
        keys: Vec<EntryKey>,
        now_ms: u64,
    ) -> Result<CtReply, CtError> {
        if let Some(mirror) = &self.mirror {
            return Err(CtError::IsMirror {
                source_url: mirror.source.url.clone(),
            });
        }
        if first != self.next_sequence {
            return Err(CtError::StaleSequence {
                expected: self.next_sequence,
                got: first,
            });
        }
        if keys.len() > CT_SEQUENCE_BATCH_MAX {
            return Err(CtError::BatchTooLarge {
                what: "sequence".to_owned(),
                count: keys.len(),
                max: CT_SEQUENCE_BATCH_MAX,
            });
        }
        // Check the whole batch before changing anything: all or nothing.
        let mut previous: Option<(u64, EntryKey)> = None;
        for key in &keys {
            let not_sequenceable = |reason: String| CtError::NotSequenceable { key: *key, reason };
            let held = self
                .held
                .get(key)
                .ok_or_else(|| not_sequenceable("no such entry is held".to_owned()))?;
            if let Some(sequence) = held.sequence {
                return Err(not_sequenceable(format!(
                    "it already has number {sequence}"
                )));
            }
            let timestamp_ms = held.submission.sct_timestamp_ms;
            if timestamp_ms.saturating_add(self.config.guard_window_ms) > now_ms {
                return Err(not_sequenceable(format!(
                    "its timestamp {timestamp_ms} is inside the guard window at {now_ms}"
                )));
            }
            let position = (timestamp_ms, *key);
            if previous.is_some_and(|previous| previous >= position) {
                return Err(not_sequenceable(
                    "the batch is not ordered by (timestamp, key) without repeats".to_owned(),
                ));
            }
            previous = Some(position);
        }
        let count = keys.len() as u64;
        for key in keys {
            let held = self.held.get_mut(&key).expect("checked above");
            held.sequence = Some(self.next_sequence);
            let removed = self
                .unsequenced
                .remove(&(held.submission.sct_timestamp_ms, key));
            assert!(removed, "an unsequenced entry is in the unsequenced index");
            self.sequence_mapping.insert(self.next_sequence, key);
            self.next_sequence += 1;
        }
        Ok(CtReply::Sequenced { first, count })
    }

    fn report(
        &mut self,
        node: u64,
        sth: SignedTreeHead,
        contiguous_size: u64,
        now_ms: u64,
    ) -> Result<CtReply, CtError> {
        let bad = |reason: String| CtError::BadReport { node, reason };
        check_signature_size(&sth)?;
        if sth.tree_size > contiguous_size {
            return Err(bad(format!(
                "its STH covers {} entries but it holds only {contiguous_size}",
                sth.tree_size
            )));
        }
        if contiguous_size > self.next_sequence {
            return Err(bad(format!(
                "it holds {contiguous_size} entries but only {} were sequenced",
                self.next_sequence
            )));
        }
        // Cross-check roots: the serving STH was held by enough nodes; a node whose tree differs
        // at that size is corrupt and must not count as a holder.
        if let Some(serving) = &self.serving
            && serving.sth.tree_size == sth.tree_size
            && serving.sth.root_hash != sth.root_hash
        {
            return Err(bad(format!(
                "its root at size {} differs from the serving STH's",
                sth.tree_size
            )));
        }
        if !self.reports.contains_key(&node) && self.reports.len() >= CT_NODES_MAX {
            return Err(bad(format!("at most {CT_NODES_MAX} nodes may report")));
        }
        self.reports.insert(
            node,
            NodeReport {
                sth,
                contiguous_size,
                reported_at_ms: now_ms,
            },
        );
        Ok(CtReply::Reported)
    }

    fn publish(
        &mut self,
        sth: SignedTreeHead,
        members: &[u64],
        now_ms: u64,
    ) -> Result<CtReply, CtError> {
        let refuse = |reason: String| CtError::NotPublishable {
            tree_size: sth.tree_size,
            reason,
        };
        let distinct: BTreeSet<u64> = members.iter().copied().collect();
        if distinct.is_empty() || distinct.len() != members.len() || members.len() > CT_NODES_MAX {
            return Err(refuse(format!(
                "the member list must be 1 to {CT_NODES_MAX} distinct nodes"
            )));
        }
        if sth.tree_size > self.next_sequence {
            return Err(refuse(format!(
                "only {} entries were sequenced",
                self.next_sequence
            )));
        }
        if let Some(current) = &self.serving {
            check_successor(&current.sth, &sth).map_err(refuse)?;
        }
        // A mirror serves only source STHs the master checked against its tree.
        if let Some(mirror) = &self.mirror
            && mirror.targets.get(&sth.tree_size) != Some(&sth)
        {
            return Err(refuse("it is not a recorded source STH".to_owned()));
        }
        let reported_by_member = distinct.iter().any(|node| {
            self.reports
                .get(node)
                .is_some_and(|report| report.sth == sth)
        });
        if !reported_by_member {
            return Err(refuse("no member reported exactly this STH".to_owned()));
        }
        // Two trees of the same size over the same sequence must agree; when they do not, one
        // node's tree is corrupt and nothing of that size is published until it is found.
        if let Some(node) = distinct.iter().find(|node| {
            self.reports.get(node).is_some_and(|report| {
                report.sth.tree_size == sth.tree_size && report.sth.root_hash != sth.root_hash
            })
        }) {
            return Err(refuse(format!(
                "node {node} reports a different root at this size"
            )));
        }
        let holders = holders(
            &self.reports,
            &distinct,
            sth.tree_size,
            &self.config,
            now_ms,
        );
        let needed = holders_needed(&self.config, distinct.len());
        if holders < needed {
            return Err(refuse(format!(
                "{holders} of {} members hold it; {needed} are needed",
                distinct.len()
            )));
        }
        let previous_tree_size = self.serving.as_ref().map_or(0, |s| s.sth.tree_size);
        if let Some(mirror) = &mut self.mirror {
            // What the new STH succeeds can never be published any more.
            mirror
                .targets
                .retain(|_, target| target.timestamp_ms > sth.timestamp_ms);
        }
        self.serving = Some(ServingSth {
            sth,
            published_at_ms: now_ms,
        });
        Ok(CtReply::Published { previous_tree_size })
    }

    fn clean_up(&mut self, max_entries: u32) -> CtReply {
        let covered = self.serving.as_ref().map_or(0, |s| s.sth.tree_size);
        let max_entries = (max_entries as usize).min(CT_CLEANUP_BATCH_MAX);
        let mut removed = 0u64;
        while removed < max_entries as u64 {
            let Some((&sequence, &key)) = self.sequence_mapping.first_key_value() else {
                break;
            };
            if sequence >= covered {
                break;
            }
            self.sequence_mapping.remove(&sequence);
            let held = self.held.remove(&key).expect("every mapped key is held");
            if self.mirror.is_some() {
                // A mirror takes no submissions, so it needs no dedupe records.
                removed += 1;
                continue;
            }
            self.cleaned.insert(
                key,
                CleanedEntry {
                    sequence,
                    sct_timestamp_ms: held.submission.sct_timestamp_ms,
                },
            );
            self.cleaned_by_sequence.insert(sequence, key);
            removed += 1;
        }
        self.forget_outside_window();
        let remaining = self
            .sequence_mapping
            .range(..covered)
            .count()
            .try_into()
            .unwrap_or(u64::MAX);
        CtReply::CleanedUp { removed, remaining }
    }

    /// Forgets the remembered cleaned-up entries that fell out of the dedupe window, at most
    /// [`CT_CLEANUP_BATCH_MAX`] per command (a shrunk window is caught up by later clean-ups).
    fn forget_outside_window(&mut self) {
        let below = self
            .first_held_sequence()
            .saturating_sub(self.dedupe.entries);
        let mut forgotten = 0;
        while forgotten < CT_CLEANUP_BATCH_MAX {
            let Some((&sequence, &key)) = self.cleaned_by_sequence.first_key_value() else {
                break;
            };
            if sequence >= below {
                break;
            }
            self.cleaned_by_sequence.remove(&sequence);
            self.cleaned.remove(&key);
            self.dedupe.forgotten_below = self.dedupe.forgotten_below.max(sequence + 1);
            forgotten += 1;
        }
        let rest_remembered = self
            .cleaned_by_sequence
            .first_key_value()
            .is_none_or(|(&sequence, _)| sequence >= below);
        if rest_remembered {
            self.dedupe.forgotten_below = self.dedupe.forgotten_below.max(below);
        }
    }

    // Reads.

    pub(crate) fn unsequenced_count(&self) -> usize {
        self.unsequenced.len()
    }

    /// Unsequenced entries in sequencing order whose timestamps are out of the guard window.
    pub(crate) fn ready_to_sequence(&self, now_ms: u64, limit: usize) -> Vec<EntryKey> {
        let cutoff_ms = now_ms.saturating_sub(self.config.guard_window_ms);
        self.unsequenced
            .iter()
            .take_while(|(timestamp_ms, _)| *timestamp_ms <= cutoff_ms)
            .take(limit.min(CT_SEQUENCE_BATCH_MAX))
            .map(|(_, key)| *key)
            .collect()
    }

    /// Held entries with numbers `from..`, in order, at most `limit`.
    pub(crate) fn sequenced_from(&self, from: u64, limit: usize) -> Vec<(u64, &HeldEntry)> {
        self.sequence_mapping
            .range(from..)
            .take(limit)
            .map(|(sequence, key)| (*sequence, &self.held[key]))
            .collect()
    }

    /// The first number still held (numbers below it were cleaned up).
    pub(crate) fn first_held_sequence(&self) -> u64 {
        self.sequence_mapping
            .first_key_value()
            .map_or(self.next_sequence, |(sequence, _)| *sequence)
    }

    pub(crate) fn mirror(&self) -> Option<&MirrorState> {
        self.mirror.as_ref()
    }

    pub(crate) fn dedupe(&self) -> DedupeWindow {
        self.dedupe
    }

    pub(crate) fn records(&self) -> CtRecords {
        CtRecords {
            config: self.config,
            frozen: self.frozen,
            held: self.held.values().cloned().collect(),
            cleaned: self.cleaned.iter().map(|(k, c)| (*k, *c)).collect(),
            next_sequence: self.next_sequence,
            reports: self.reports.iter().map(|(n, r)| (*n, r.clone())).collect(),
            serving: self.serving.clone(),
        }
    }

    /// Rebuilds the log (and its indexes) from snapshot records; refuses duplicates.
    pub(crate) fn from_records(
        records: CtRecords,
        mirror: Option<MirrorState>,
        dedupe: DedupeWindow,
    ) -> Result<CtLog, String> {
        let mut log = CtLog {
            dedupe,
            config: records.config,
            frozen: records.frozen,
            next_sequence: records.next_sequence,
            serving: records.serving,
            mirror,
            ..CtLog::default()
        };
        for held in records.held {
            let key = held.submission.key;
            match held.sequence {
                Some(sequence) => {
                    if log.sequence_mapping.insert(sequence, key).is_some() {
                        return Err(format!("sequence number {sequence} appears twice"));
                    }
                }
                None => {
                    log.unsequenced
                        .insert((held.submission.sct_timestamp_ms, key));
                }
            }
            if log.held.insert(key, held).is_some() {
                return Err(format!("entry {key} appears twice"));
            }
        }
        for (key, cleaned) in records.cleaned {
            if log.cleaned.insert(key, cleaned).is_some() {
                return Err(format!("cleaned-up entry {key} appears twice"));
            }
            if log
                .cleaned_by_sequence
                .insert(cleaned.sequence, key)
                .is_some()
            {
                return Err(format!(
                    "two cleaned-up entries have number {}",
                    cleaned.sequence
                ));
            }
        }
        for (node, report) in records.reports {
            if log.reports.insert(node, report).is_some() {
                return Err(format!("node {node} reports twice"));
            }
        }
        Ok(log)
    }

    /// Every invariant of the log, against the machine clock.
    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        self.config.validate().map_err(|e| e.to_string())?;
        let numbered = self.held.values().filter(|h| h.sequence.is_some()).count();
        if numbered != self.sequence_mapping.len()
            || self.held.len() - numbered != self.unsequenced.len()
        {
            return Err("the sequence and unsequenced indexes do not match the entries".into());
        }
        for (sequence, key) in &self.sequence_mapping {
            if self.held.get(key).and_then(|h| h.sequence) != Some(*sequence) {
                return Err(format!("number {sequence} maps to {key}, which lacks it"));
            }
        }
        for (timestamp_ms, key) in &self.unsequenced {
            match self.held.get(key) {
                Some(held)
                    if held.sequence.is_none()
                        && held.submission.sct_timestamp_ms == *timestamp_ms => {}
                _ => return Err(format!("unsequenced index names {key} wrongly")),
            }
        }
        let first_held = self.first_held_sequence();
        let mapped = self.sequence_mapping.len() as u64;
        if first_held + mapped != self.next_sequence {
            return Err(format!(
                "numbers {first_held}..{} are not all held ({mapped} are)",
                self.next_sequence
            ));
        }
        if self.cleaned_by_sequence.len() != self.cleaned.len() {
            return Err("the cleaned-up number index does not match the cleaned-up entries".into());
        }
        if self.dedupe.entries > CT_DEDUPE_WINDOW_ENTRIES_MAX {
            return Err(format!(
                "the dedupe window of {} entries exceeds its limit",
                self.dedupe.entries
            ));
        }
        if self.dedupe.forgotten_below > first_held {
            return Err(format!(
                "entries below {} are forgotten, past the first held number {first_held}",
                self.dedupe.forgotten_below
            ));
        }
        for (key, cleaned) in &self.cleaned {
            if self.held.contains_key(key) {
                return Err(format!("entry {key} is both held and cleaned up"));
            }
            if self.cleaned_by_sequence.get(&cleaned.sequence) != Some(key) {
                return Err(format!(
                    "cleaned-up entry {key}'s number {} is not indexed to it",
                    cleaned.sequence
                ));
            }
            if cleaned.sequence < self.dedupe.forgotten_below {
                return Err(format!(
                    "cleaned-up entry {key} has number {}, below the forgotten {}",
                    cleaned.sequence, self.dedupe.forgotten_below
                ));
            }
            if cleaned.sequence >= first_held {
                return Err(format!(
                    "cleaned-up entry {key} has number {} at or above the first held {first_held}",
                    cleaned.sequence
                ));
            }
        }
        let covered = self.serving.as_ref().map_or(0, |s| s.sth.tree_size);
        if covered > self.next_sequence {
            return Err(format!(
                "the serving STH covers {covered} entries; only {} were sequenced",
                self.next_sequence
            ));
        }
        if first_held > covered {
            return Err(format!(
                "entries up to {first_held} were cleaned up but only {covered} are served"
            ));
        }
        if let Some(serving) = &self.serving
            && serving.published_at_ms > clock_ms
        {
            return Err("the serving STH was published after the clock".into());
        }
        for (node, report) in &self.reports {
            if report.contiguous_size > self.next_sequence
                || report.sth.tree_size > report.contiguous_size
            {
                return Err(format!(
                    "node {node}'s report claims more than was sequenced"
                ));
            }
        }
        if self.unsequenced.len() > CT_UNSEQUENCED_MAX || self.reports.len() > CT_NODES_MAX {
            return Err("a CT table exceeds its limit".into());
        }
        if let Some(mirror) = &self.mirror {
            self.check_mirror(mirror)?;
        }
        Ok(())
    }

    fn check_mirror(&self, mirror: &MirrorState) -> Result<(), String> {
        if !self.unsequenced.is_empty() || !self.cleaned.is_empty() {
            return Err("a mirror holds submissions of its own".into());
        }
        if mirror.targets.len() > CT_MIRROR_TARGETS_MAX {
            return Err("a mirror keeps too many source STHs".into());
        }
        for (size, target) in &mirror.targets {
            if *size != target.tree_size || *size > self.next_sequence {
                return Err(format!(
                    "source STH of size {} is filed under {size} or beyond what was appended",
                    target.tree_size
                ));
            }
            if mirror.latest.as_ref().is_none_or(|latest| {
                target.timestamp_ms > latest.timestamp_ms || target.tree_size > latest.tree_size
            }) {
                return Err(format!(
                    "source STH of size {size} is newer than the latest recorded"
                ));
            }
        }
        if let Some(serving) = &self.serving
            && mirror
                .latest
                .as_ref()
                .is_none_or(|latest| latest.timestamp_ms < serving.sth.timestamp_ms)
        {
            return Err("the mirror serves an STH newer than any recorded source STH".into());
        }
        Ok(())
    }
}

fn check_submission(submission: &Submission) -> Result<(), CtError> {
    check_entry_sizes(
        &submission.leaf_input,
        &submission.extra_data,
        &submission.sct,
    )?;
    let leaf_timestamp = leaf_timestamp(&submission.leaf_input);
    if leaf_timestamp != Some(submission.sct_timestamp_ms) {
        return Err(CtError::MalformedSubmission(format!(
            "the leaf's timestamp {leaf_timestamp:?} is not the SCT's {}",
            submission.sct_timestamp_ms
        )));
    }
    Ok(())
}

fn check_entry_sizes(leaf_input: &[u8], extra_data: &[u8], sct: &[u8]) -> Result<(), CtError> {
    for (field, bytes, max) in [
        ("leaf_input", leaf_input.len(), CT_LEAF_INPUT_BYTES_MAX),
        ("extra_data", extra_data.len(), CT_EXTRA_DATA_BYTES_MAX),
        ("sct", sct.len(), CT_SCT_BYTES_MAX),
    ] {
        if bytes > max {
            return Err(CtError::TooLarge {
                field: field.to_owned(),
                bytes,
                max,
            });
        }
    }
    Ok(())
}

/// The timestamp inside a MerkleTreeLeaf, if it is long enough to hold one.
fn leaf_timestamp(leaf_input: &[u8]) -> Option<u64> {
    leaf_input
        .get(LEAF_TIMESTAMP_OFFSET..LEAF_TIMESTAMP_OFFSET + 8)
        .map(|bytes| u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
}

/// A mirrored entry's identity in the state: its number (a mirror needs no dedupe by content,
/// and a source may log the same leaf twice).
fn mirror_key(sequence: u64) -> EntryKey {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(b"mirror\0\0");
    key[24..].copy_from_slice(&sequence.to_be_bytes());
    EntryKey(key)
}

fn check_signature_size(sth: &SignedTreeHead) -> Result<(), CtError> {
    if sth.signature.len() > CT_SIGNATURE_BYTES_MAX {
        return Err(CtError::TooLarge {
            field: "sth signature".to_owned(),
            bytes: sth.signature.len(),
            max: CT_SIGNATURE_BYTES_MAX,
        });
    }
    Ok(())
}

/// Whether `next` may replace `current` as the serving STH: never smaller, strictly newer, and
/// the same tree at the same size.
pub fn check_successor(current: &SignedTreeHead, next: &SignedTreeHead) -> Result<(), String> {
    if next.tree_size < current.tree_size {
        return Err(format!(
            "it is smaller than the serving STH ({})",
            current.tree_size
        ));
    }
    if next.timestamp_ms <= current.timestamp_ms {
        return Err(format!(
            "its timestamp {} is not after the serving STH's {}",
            next.timestamp_ms, current.timestamp_ms
        ));
    }
    if next.tree_size == current.tree_size && next.root_hash != current.root_hash {
        return Err("its root differs from the serving STH's at the same size".to_owned());
    }
    Ok(())
}

/// How many of `members` can serve a tree of `tree_size`: their report is fresh and their tree
/// at least that large.
fn holders(
    reports: &BTreeMap<u64, NodeReport>,
    members: &BTreeSet<u64>,
    tree_size: u64,
    config: &LogConfig,
    now_ms: u64,
) -> usize {
    members
        .iter()
        .filter_map(|node| reports.get(node))
        .filter(|report| report.reported_at_ms.saturating_add(config.report_ttl_ms) >= now_ms)
        .filter(|report| report.sth.tree_size >= tree_size)
        .count()
}

/// The number of holders a publish needs among `member_count` members: the larger of the
/// absolute minimum and the configured share, rounded up.
pub fn holders_needed(config: &LogConfig, member_count: usize) -> usize {
    let share = (member_count * config.min_serving_permille as usize).div_ceil(1000);
    share.max(config.min_serving_nodes as usize)
}

/// The STH the master should publish now, if any: among the members' fresh reports, the largest
/// tree size held by enough of them (the seed's table), and at that size the newest STH, provided
/// it may replace `current`.
pub fn select_serving<'a>(
    reports: &'a BTreeMap<u64, NodeReport>,
    members: &BTreeSet<u64>,
    config: &LogConfig,
    current: Option<&SignedTreeHead>,
    now_ms: u64,
) -> Option<&'a SignedTreeHead> {
    let needed = holders_needed(config, members.len());
    let fresh: Vec<&NodeReport> = members
        .iter()
        .filter_map(|node| reports.get(node))
        .filter(|report| report.reported_at_ms.saturating_add(config.report_ttl_ms) >= now_ms)
        .collect();
    let mut sizes: Vec<u64> = fresh.iter().map(|r| r.sth.tree_size).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    // The k-th largest size is held by at least k nodes; the largest size held by `needed`
    // nodes is therefore the `needed`-th largest.
    let size = *sizes.get(needed.checked_sub(1)?)?;
    let candidate = fresh
        .iter()
        .map(|report| &report.sth)
        .filter(|sth| sth.tree_size == size)
        .max_by_key(|sth| sth.timestamp_ms)?;
    match current {
        Some(current) if check_successor(current, candidate).is_err() => None,
        _ => Some(candidate),
    }
}

/// The timestamp of a node's next STH: its clock, but strictly after the STH it follows and not
/// before the newest SCT its tree includes (an STH may not predate what it contains).
pub fn next_sth_timestamp(now_ms: u64, previous_ms: Option<u64>, newest_sct_ms: u64) -> u64 {
    let after_previous = previous_ms.map_or(0, |previous| previous.saturating_add(1));
    now_ms.max(after_previous).max(newest_sct_ms)
}

#[cfg(test)]
mod tests;
