//! The persisted shape of a transaction: the flat record snapshots, client answers and the
//! transport carry. The format was defined with a status next to optional fields (a queue
//! entry, a claim, a sleep, a completion and an archive time, a pending cancel), so it can spell
//! combinations no transaction can be in. A [`Transaction`] is written as that record, field for
//! field, and a record is read into a transaction only when its fields name exactly one place.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    ExternalId, FinalStatus, Finished, JsonDocument, NodeGroup, Owner, PipelineName, Place,
    QueueEntry, Running, Slumber, StepRecord, Transaction, TransactionId, TxClaim, TxMetadata,
    TxStatus,
};

/// A transaction as the format spells it. Field order is the format.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct TransactionRecord {
    pub(crate) id: TransactionId,
    pub(crate) owner: Owner,
    pub(crate) external_id: Option<ExternalId>,
    pub(crate) pipeline: Option<PipelineName>,
    pub(crate) node_group: NodeGroup,
    pub(crate) status: TxStatus,
    pub(crate) state: JsonDocument,
    pub(crate) event: Option<JsonDocument>,
    pub(crate) metadata: TxMetadata,
    pub(crate) progress: Option<JsonDocument>,
    pub(crate) cancel_requested: bool,
    pub(crate) created_at_ms: u64,
    pub(crate) queued: Option<QueueEntry>,
    pub(crate) claim: Option<TxClaim>,
    pub(crate) sleep: Option<Slumber>,
    pub(crate) attempts: u32,
    pub(crate) last_started_at_ms: Option<u64>,
    pub(crate) completed_at_ms: Option<u64>,
    pub(crate) notified_at_ms: Option<u64>,
    pub(crate) archived_at_ms: Option<u64>,
    pub(crate) last_step: Option<StepRecord>,
    pub(crate) version: u64,
}

/// [`TransactionRecord`] written from a transaction's references, without copying it.
#[derive(Serialize)]
struct TransactionRecordRef<'a> {
    id: TransactionId,
    owner: &'a Owner,
    external_id: &'a Option<ExternalId>,
    pipeline: &'a Option<PipelineName>,
    node_group: &'a NodeGroup,
    status: TxStatus,
    state: &'a JsonDocument,
    event: &'a Option<JsonDocument>,
    metadata: &'a TxMetadata,
    progress: &'a Option<JsonDocument>,
    cancel_requested: bool,
    created_at_ms: u64,
    queued: Option<QueueEntry>,
    claim: Option<&'a TxClaim>,
    sleep: Option<&'a Slumber>,
    attempts: u32,
    last_started_at_ms: Option<u64>,
    completed_at_ms: Option<u64>,
    notified_at_ms: Option<u64>,
    archived_at_ms: Option<u64>,
    last_step: &'a Option<StepRecord>,
    version: u64,
}

impl Serialize for Transaction {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TransactionRecordRef {
            id: self.id,
            owner: &self.owner,
            external_id: &self.external_id,
            pipeline: &self.pipeline,
            node_group: &self.node_group,
            status: self.status(),
            state: &self.state,
            event: &self.event,
            metadata: &self.metadata,
            progress: &self.progress,
            cancel_requested: self.cancel_requested(),
            created_at_ms: self.created_at_ms,
            queued: self.queued(),
            claim: self.claim(),
            sleep: self.sleep(),
            attempts: self.attempts,
            last_started_at_ms: self.last_started_at_ms,
            completed_at_ms: self.completed_at_ms(),
            notified_at_ms: self.notified_at_ms,
            archived_at_ms: self.archived_at_ms(),
            last_step: &self.last_step,
            version: self.version,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Transaction {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Transaction, D::Error> {
        let record = TransactionRecord::deserialize(deserializer)?;
        Transaction::try_from(record).map_err(D::Error::custom)
    }
}

impl TryFrom<TransactionRecord> for Transaction {
    type Error = String;

    /// The transaction a record spells, or why its fields name no place or more than one.
    fn try_from(record: TransactionRecord) -> Result<Transaction, String> {
        let TransactionRecord {
            id,
            owner,
            external_id,
            pipeline,
            node_group,
            status,
            state,
            event,
            metadata,
            progress,
            cancel_requested,
            created_at_ms,
            queued,
            claim,
            sleep,
            attempts,
            last_started_at_ms,
            completed_at_ms,
            notified_at_ms,
            archived_at_ms,
            last_step,
            version,
        } = record;
        if cancel_requested && status != TxStatus::Running {
            return Err(format!(
                "transaction {id} is {status} with a pending cancel"
            ));
        }
        if archived_at_ms.is_some() && !status.is_terminal() {
            return Err(format!("transaction {id} is {status} yet archived"));
        }
        let place = match (status, queued, claim, sleep, completed_at_ms) {
            (TxStatus::Queued, Some(entry), None, None, None) => Place::Queued(entry),
            (TxStatus::Running, None, Some(claim), None, None) => Place::Claimed(Running {
                claim,
                cancel_requested,
            }),
            (TxStatus::Sleeping, None, None, Some(slumber), None) => Place::Asleep(slumber),
            (status, None, None, None, Some(completed_at_ms)) if status.is_terminal() => {
                Place::Ended(Finished {
                    status: FinalStatus::of(status).expect("a terminal status"),
                    completed_at_ms,
                    archived_at_ms,
                })
            }
            _ => {
                return Err(format!(
                    "transaction {id} is {status} but its queue entry, claim, sleep and \
                     completion time do not say so"
                ));
            }
        };
        Ok(Transaction {
            id,
            owner,
            external_id,
            pipeline,
            node_group,
            place,
            state,
            event,
            metadata,
            progress,
            created_at_ms,
            attempts,
            last_started_at_ms,
            notified_at_ms,
            last_step,
            version,
        })
    }
}
