//! Client sessions: every write of a registered client is applied at most once, and a request the
//! client has moved past is never applied (the Raft dissertation, §6.3).
//!
//! A client registers once ([`ClientCommand::Register`]) and numbers its writes `1, 2, 3, …`. Each
//! write travels wrapped in [`crate::Command::Once`] with a [`ClientRequest`]: the client's id,
//! the request's sequence number, and `first_outstanding`, the lowest sequence number the client
//! still waits for (every request below it was answered, or abandoned: the client gave up on it
//! and will never use its answer). The machine then:
//! - answers a request it already applied from the session's record, without applying it again
//!   (a retry after a lost reply, or a duplicate delivered late);
//! - refuses, without applying, a request below `first_outstanding` ([`ClientError::Superseded`]):
//!   the client moved past it, so a request stuck in flight can never land after the client's
//!   later requests and undo or shorten what they achieved;
//! - applies anything else once and keeps its response until the client acknowledges it (by
//!   sending a later request whose `first_outstanding` is past it).
//!
//! Sessions expire through the log: one unused for [`CLIENT_SESSION_IDLE_MS`] of machine time is
//! gone (requests on it are refused with [`ClientError::UnknownClient`]) and its memory is
//! reclaimed by `Tick`. Memory is bounded: at most [`CLIENT_SESSIONS_MAX`] sessions (registering
//! past it evicts the one idle longest, if idle long enough that no call can still be retrying on
//! it), each holding at most [`CLIENT_OUTSTANDING_MAX`] responses (a request that far ahead of
//! `first_outstanding` is refused), of at most [`CLIENT_ANSWER_BYTES_MAX`] each and
//! [`CLIENT_ANSWER_BYTES_TOTAL_MAX`] in all: past those, the answer is replaced by
//! [`ClientError::AnswerNotKept`], and a copy of the request gets that (it is still not applied
//! again).
//!
//! Invariants (checked by [`Clients::check`]):
//! - every session's answered sequence numbers lie in
//!   `first_outstanding..first_outstanding + CLIENT_OUTSTANDING_MAX`;
//! - `last_active_ms` is no later than the machine clock, and `registered_at_ms <= last_active_ms`;
//! - the idle index holds exactly one `(last_active_ms, id)` per session;
//! - at most [`CLIENT_SESSIONS_MAX`] sessions exist; no session has id 0;
//! - the kept answers' encoded sizes add up to the tracked total, at most
//!   [`CLIENT_ANSWER_BYTES_TOTAL_MAX`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use crate::client_requests::{
    ClientCommand, ClientError, ClientId, ClientReply, ClientRequest,
};
use crate::command::{Command, Response};
use crate::limits::{
    CLIENT_ANSWER_BYTES_MAX, CLIENT_ANSWER_BYTES_TOTAL_MAX, CLIENT_OUTSTANDING_MAX,
    CLIENT_SESSION_EVICTABLE_IDLE_MS, CLIENT_SESSION_IDLE_MS, CLIENT_SESSIONS_MAX,
    TICK_EXPIRED_CLIENTS_MAX,
};

/// One client's session as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSession {
    /// Its id.
    pub client: ClientId,
    /// Machine time of the registration.
    pub registered_at_ms: u64,
    /// Machine time of the latest request.
    pub last_active_ms: u64,
    /// Every request below this was acknowledged by the client; their answers are forgotten.
    pub first_outstanding: u64,
    /// Answers to applied requests the client has not acknowledged, by sequence number.
    pub answered: BTreeMap<u64, Response>,
}

impl ClientSession {
    fn is_live(&self, now_ms: u64) -> bool {
        now_ms < self.last_active_ms.saturating_add(CLIENT_SESSION_IDLE_MS)
    }

    /// Drops answers the client acknowledged, and returns them.
    fn acknowledge_below(&mut self, first_outstanding: u64) -> BTreeMap<u64, Response> {
        if first_outstanding <= self.first_outstanding {
            return BTreeMap::new();
        }
        self.first_outstanding = first_outstanding;
        let kept = self.answered.split_off(&first_outstanding);
        std::mem::replace(&mut self.answered, kept)
    }
}

/// How a wrapped request is to be handled.
pub(crate) enum Admission {
    /// Apply it, then [`Clients::settle`] it with its response.
    Fresh,
    /// Applied before: answer this, apply nothing.
    Answered(Box<Response>),
    /// Refused: apply nothing.
    Refused(ClientError),
}

/// The session table, an index by last activity for expiry and eviction, and the encoded size
/// of every kept answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clients {
    by_id: BTreeMap<ClientId, ClientSession>,
    by_activity: BTreeSet<(u64, ClientId)>,
    answer_bytes: usize,
}

/// The encoded size of an answer, as the snapshot stores it.
fn encoded_size(response: &Response) -> usize {
    postcard::serialize_with_flavor(response, postcard::ser_flavors::Size::default())
        .expect("a response always encodes")
}

fn answers_size(answers: &BTreeMap<u64, Response>) -> usize {
    answers.values().map(encoded_size).sum()
}

impl Clients {
    pub(crate) fn apply(
        &mut self,
        command: ClientCommand,
        now_ms: u64,
    ) -> Result<ClientReply, ClientError> {
        match command {
            ClientCommand::Register { client } => {
                if client.0 == 0 {
                    return Err(ClientError::InvalidRequest(
                        "client id 0 is reserved".into(),
                    ));
                }
                if self.by_id.contains_key(&client) {
                    return Err(ClientError::ClientIdTaken { client });
                }
                if self.by_id.len() >= CLIENT_SESSIONS_MAX {
                    // Full: the session idle longest makes room, if no call can still be
                    // retrying on it. Its client finds out on its next request (unknown-client).
                    let (last_active_ms, oldest) =
                        *self.by_activity.first().expect("a full table has entries");
                    if now_ms < last_active_ms.saturating_add(CLIENT_SESSION_EVICTABLE_IDLE_MS) {
                        return Err(ClientError::TooManyClients {
                            max: CLIENT_SESSIONS_MAX,
                        });
                    }
                    self.remove(oldest);
                }
                self.insert(ClientSession {
                    client,
                    registered_at_ms: now_ms,
                    last_active_ms: now_ms,
                    first_outstanding: 1,
                    answered: BTreeMap::new(),
                });
                Ok(ClientReply::Registered {
                    client,
                    idle_ms: CLIENT_SESSION_IDLE_MS,
                    outstanding_max: CLIENT_OUTSTANDING_MAX,
                })
            }
            ClientCommand::Close { client } => Ok(ClientReply::Closed {
                existed: self.remove(client).is_some(),
            }),
        }
    }

    /// Decides what to do with a wrapped request. Changes nothing: the caller applies a fresh
    /// request and then calls [`Clients::settle`].
    pub(crate) fn admit(
        &self,
        request: &ClientRequest,
        command: &Command,
        now_ms: u64,
    ) -> Admission {
        if let Err(error) = request.validate() {
            return Admission::Refused(error);
        }
        if matches!(
            command,
            Command::Once { .. } | Command::Client(_) | Command::Tick
        ) {
            return Admission::Refused(ClientError::InvalidRequest(
                "only a lease, challenge, CT, session or pipeline command can be wrapped".into(),
            ));
        }
        let client = request.client;
        let Some(session) = self.get(client, now_ms) else {
            return Admission::Refused(ClientError::UnknownClient { client });
        };
        // The session's first outstanding number once it takes this request's acknowledgement.
        let first_outstanding = session.first_outstanding.max(request.first_outstanding);
        if request.sequence < first_outstanding {
            return Admission::Refused(ClientError::Superseded {
                sequence: request.sequence,
                first_outstanding,
            });
        }
        if request.sequence - first_outstanding >= CLIENT_OUTSTANDING_MAX {
            return Admission::Refused(ClientError::TooManyOutstanding {
                sequence: request.sequence,
                first_outstanding,
                max: CLIENT_OUTSTANDING_MAX,
            });
        }
        match session.answered.get(&request.sequence) {
            Some(response) => Admission::Answered(Box::new(response.clone())),
            None => Admission::Fresh,
        }
    }

    /// Notes an admitted request: the client's acknowledgement, its activity, and — for a fresh
    /// request — the answer, refusals included, so that a copy gets the same one (a request has
    /// one outcome: a copy arriving after the client was told "refused" must not succeed).
    pub(crate) fn settle(&mut self, request: &ClientRequest, now_ms: u64, fresh: Option<Response>) {
        let client = request.client;
        let session = self
            .by_id
            .get_mut(&client)
            .expect("an admitted request has a session");
        let was_indexed = self.by_activity.remove(&(session.last_active_ms, client));
        assert!(was_indexed, "every session is in the activity index");
        session.last_active_ms = now_ms;
        let fresh_index = self.by_activity.insert((now_ms, client));
        assert!(fresh_index, "one activity entry per session");
        // Each answer is sized twice in its life: when kept and when dropped.
        let acknowledged = session.acknowledge_below(request.first_outstanding);
        self.answer_bytes -= answers_size(&acknowledged);
        assert!(
            request.sequence >= session.first_outstanding,
            "an admitted request is not superseded"
        );
        if let Some(response) = fresh {
            let size = encoded_size(&response);
            let keep = size <= CLIENT_ANSWER_BYTES_MAX
                && self.answer_bytes + size <= CLIENT_ANSWER_BYTES_TOTAL_MAX;
            let kept = if keep {
                response
            } else {
                Response::Client(Err(ClientError::AnswerNotKept {
                    sequence: request.sequence,
                }))
            };
            self.answer_bytes += encoded_size(&kept);
            let earlier = session.answered.insert(request.sequence, kept);
            assert!(earlier.is_none(), "a request is applied at most once");
        }
    }

    /// Removes up to [`TICK_EXPIRED_CLIENTS_MAX`] sessions idle past their time, oldest first.
    /// Returns how many, and whether more are due.
    pub(crate) fn expire(&mut self, now_ms: u64) -> (usize, bool) {
        let mut expired = 0;
        while let Some(&(last_active_ms, client)) = self.by_activity.first() {
            if now_ms < last_active_ms.saturating_add(CLIENT_SESSION_IDLE_MS) {
                return (expired, false);
            }
            if expired == TICK_EXPIRED_CLIENTS_MAX {
                return (expired, true);
            }
            self.remove(client);
            expired += 1;
        }
        (expired, false)
    }

    /// The live session `client` at machine time `now_ms`.
    pub(crate) fn get(&self, client: ClientId, now_ms: u64) -> Option<&ClientSession> {
        self.by_id.get(&client).filter(|s| s.is_live(now_ms))
    }

    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &ClientSession> {
        self.by_id.values()
    }

    fn insert(&mut self, session: ClientSession) {
        self.answer_bytes += answers_size(&session.answered);
        let fresh = self
            .by_activity
            .insert((session.last_active_ms, session.client));
        assert!(fresh, "one activity entry per session");
        let earlier = self.by_id.insert(session.client, session);
        assert!(earlier.is_none(), "one session per id");
    }

    fn remove(&mut self, client: ClientId) -> Option<ClientSession> {
        let session = self.by_id.remove(&client)?;
        let was_indexed = self.by_activity.remove(&(session.last_active_ms, client));
        assert!(was_indexed, "every session is in the activity index");
        self.answer_bytes -= answers_size(&session.answered);
        Some(session)
    }

    /// Rebuilds the table from snapshot records, refusing any that break an invariant.
    pub(crate) fn from_records(records: Vec<ClientSession>) -> Result<Clients, String> {
        let mut clients = Clients::default();
        for session in records {
            if clients.by_id.contains_key(&session.client) {
                return Err(format!("client session {} appears twice", session.client));
            }
            clients.insert(session);
        }
        Ok(clients)
    }

    pub(crate) fn check(&self, clock_ms: u64) -> Result<(), String> {
        if self.by_id.len() > CLIENT_SESSIONS_MAX {
            return Err(format!(
                "{} client sessions exceed the limit {CLIENT_SESSIONS_MAX}",
                self.by_id.len()
            ));
        }
        if self.by_activity.len() != self.by_id.len() {
            return Err("the client activity index and the table differ in size".to_owned());
        }
        let answer_bytes: usize = self.by_id.values().map(|s| answers_size(&s.answered)).sum();
        if answer_bytes != self.answer_bytes || answer_bytes > CLIENT_ANSWER_BYTES_TOTAL_MAX {
            return Err(format!(
                "client answers take {answer_bytes} bytes, tracked as {} (at most \
                 {CLIENT_ANSWER_BYTES_TOTAL_MAX})",
                self.answer_bytes
            ));
        }
        for (id, session) in &self.by_id {
            let ok = *id == session.client
                && id.0 != 0
                && session.first_outstanding >= 1
                && session.registered_at_ms <= session.last_active_ms
                && session.last_active_ms <= clock_ms
                && self.by_activity.contains(&(session.last_active_ms, *id))
                && session.answered.keys().all(|sequence| {
                    *sequence >= session.first_outstanding
                        && sequence - session.first_outstanding < CLIENT_OUTSTANDING_MAX
                })
                && session
                    .answered
                    .iter()
                    .all(|(sequence, response)| match response {
                        Response::Tick(_) => false,
                        Response::Client(Err(ClientError::AnswerNotKept { sequence: noted })) => {
                            noted == sequence
                        }
                        Response::Client(_) => false,
                        _ => true,
                    });
            if !ok {
                return Err(format!("malformed client session {session:?}"));
            }
        }
        Ok(())
    }
}
