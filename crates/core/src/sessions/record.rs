//! The persisted shape of a session: the flat record snapshots, client answers and the transport
//! carry. The format was defined with a stage next to optional fields (a claim, a certificate, a
//! failure, a kill reason, a done and an archive time), so it can spell combinations no session
//! can be in. A [`Session`] is written as that record, field for field, and a record is read
//! into a session only when its fields name exactly one place.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Claim, Completion, DnsName, Ended, Ending, KillReason, Place, QueuedStage, Reason, RequestKey,
    Session, SessionChallenge, SessionId, Stage, StageClaim,
};

/// A session as the format spells it. Field order is the format.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct SessionRecord {
    pub(crate) id: SessionId,
    pub(crate) created_ms: u64,
    pub(crate) request_key: Option<RequestKey>,
    #[serde(with = "serde_bytes")]
    pub(crate) csr: Vec<u8>,
    pub(crate) names: Vec<DnsName>,
    pub(crate) stage: Stage,
    pub(crate) stage_entered_ms: u64,
    pub(crate) live: bool,
    pub(crate) kill_reason: Option<KillReason>,
    pub(crate) challenges: Vec<SessionChallenge>,
    #[serde(with = "serde_bytes")]
    pub(crate) cert: Option<Vec<u8>>,
    pub(crate) failure: Option<Reason>,
    pub(crate) claim: Option<Claim>,
    pub(crate) visible_at_ms: u64,
    pub(crate) done_at_ms: Option<u64>,
    pub(crate) acknowledged: bool,
    pub(crate) archived_at_ms: Option<u64>,
    pub(crate) last_completion: Option<Completion>,
    pub(crate) note: Option<Reason>,
}

/// [`SessionRecord`] written from a session's references, without copying it.
#[derive(Serialize)]
struct SessionRecordRef<'a> {
    id: SessionId,
    created_ms: u64,
    request_key: &'a Option<RequestKey>,
    #[serde(with = "serde_bytes")]
    csr: &'a Vec<u8>,
    names: &'a Vec<DnsName>,
    stage: Stage,
    stage_entered_ms: u64,
    live: bool,
    kill_reason: Option<&'a KillReason>,
    challenges: &'a Vec<SessionChallenge>,
    cert: Option<&'a [u8]>,
    failure: Option<&'a Reason>,
    claim: Option<&'a Claim>,
    visible_at_ms: u64,
    done_at_ms: Option<u64>,
    acknowledged: bool,
    archived_at_ms: Option<u64>,
    last_completion: &'a Option<Completion>,
    note: &'a Option<Reason>,
}

impl Serialize for Session {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        SessionRecordRef {
            id: self.id,
            created_ms: self.created_ms,
            request_key: &self.request_key,
            csr: &self.csr,
            names: &self.names,
            stage: self.stage(),
            stage_entered_ms: self.stage_entered_ms,
            live: self.live(),
            kill_reason: self.kill_reason(),
            challenges: &self.challenges,
            cert: self.cert(),
            failure: self.failure(),
            claim: self.claim(),
            visible_at_ms: self.visible_at_ms,
            done_at_ms: self.done_at_ms(),
            acknowledged: self.acknowledged(),
            archived_at_ms: self.archived_at_ms(),
            last_completion: &self.last_completion,
            note: &self.note,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Session {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Session, D::Error> {
        let record = SessionRecord::deserialize(deserializer)?;
        Session::try_from(record).map_err(D::Error::custom)
    }
}

impl TryFrom<SessionRecord> for Session {
    type Error = String;

    /// The session a record spells, or why its fields name no place or more than one.
    fn try_from(record: SessionRecord) -> Result<Session, String> {
        let SessionRecord {
            id,
            created_ms,
            request_key,
            csr,
            names,
            stage,
            stage_entered_ms,
            live,
            kill_reason,
            challenges,
            cert,
            failure,
            claim,
            visible_at_ms,
            done_at_ms,
            acknowledged,
            archived_at_ms,
            last_completion,
            note,
        } = record;
        let fail = |what: &str| Err(format!("session {id} in stage {stage} {what}"));
        // Each stage-bound field belongs to its stage.
        let done = stage == Stage::Done;
        if cert.is_some() != done
            || done_at_ms.is_some() != done
            || failure.is_some() != (stage == Stage::Failed)
            || (acknowledged && !done)
        {
            return fail(
                "has a certificate, done time, failure or acknowledgement that does not fit",
            );
        }
        if done && done_at_ms != Some(stage_entered_ms) {
            return fail("became done at another time than it entered stage done");
        }
        if live != kill_reason.is_none() {
            return fail("is not live exactly when it has a kill reason");
        }
        let place = match (QueuedStage::of(stage), archived_at_ms, kill_reason, claim) {
            (Some(queued), None, None, None) => Place::Queued(queued),
            (Some(queued), None, None, Some(claim)) => Place::Claimed(StageClaim {
                stage: queued,
                claim,
            }),
            (_, _, _, Some(_)) => return fail("holds a claim outside its stage's queue"),
            (Some(_), None, Some(_), None) => return fail("is killed but not archived"),
            (Some(_), Some(_), None, None) => {
                return fail("is live in a queued stage but archived");
            }
            (Some(queued), Some(archived_at_ms), Some(reason), None) => {
                Place::Ended(Ended::Archived {
                    archived_at_ms,
                    end: Ending::Killed {
                        stage: queued,
                        reason,
                    },
                })
            }
            // Done or failed, and not archived: only a live, unacknowledged done session.
            (None, None, kill_reason, None) => match cert {
                Some(cert) if kill_reason.is_none() && !acknowledged => {
                    Place::Ended(Ended::Done { cert })
                }
                _ => return fail("is neither queued, done nor archived"),
            },
            (None, Some(archived_at_ms), kill_reason, None) => {
                let end = match (cert, failure) {
                    (Some(cert), None) => Ending::Done {
                        cert,
                        acknowledged,
                        kill_reason,
                    },
                    (None, Some(failure)) => Ending::Failed {
                        failure,
                        kill_reason,
                    },
                    _ => unreachable!("checked above: done has a certificate, failed a failure"),
                };
                Place::Ended(Ended::Archived {
                    archived_at_ms,
                    end,
                })
            }
        };
        Ok(Session {
            id,
            created_ms,
            request_key,
            csr,
            names,
            place,
            stage_entered_ms,
            challenges,
            visible_at_ms,
            last_completion,
            note,
        })
    }
}
