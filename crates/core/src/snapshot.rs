//! The snapshot format: the whole state as deterministic bytes.
//!
//! Layout: the 8-byte magic `CERTUS\0\x07` (the last byte is the format version), then the state
//! in postcard encoding. Older versions are prefixes of the body and still load: version 6 (before
//! the CT log's dedupe window) lacks the trailing `ct_dedupe` field and loads with the default
//! window and nothing forgotten (it remembers every cleaned-up entry); version 5 (before
//! client sessions) lacks the trailing `clients` field and loads with no client sessions; version 4 (before
//! pipelines) lacks the trailing `pipelines` field and loads with no pipelines and the default
//! pipeline configuration; version 3 (before sessions) also lacks `sessions` and loads with no
//! sessions and the default session configuration; version 2 (before mirrors) also lacks
//! `ct_mirror`. Maps are written in key order and the derived indexes are not written at
//! all (they are rebuilt on load), so the same state always gives the same bytes. Loading checks
//! the magic, refuses trailing bytes, validates every string as its type, rebuilds the indexes
//! and runs [`State::check_invariants`]: a snapshot that loads is a state `apply` could have made.

use serde::{Deserialize, Serialize};

use crate::acme::{Acme, AcmeRecords, AcmeRecordsRef};
use crate::challenges::{Challenge, Challenges};
use crate::clients::{ClientSession, Clients};
use crate::ct::{CtLog, CtRecords, DedupeWindow, MirrorState};
use crate::leases::{FencingToken, Lease, Leases};
use crate::pipelines::{PipelineRecords, PipelineRecordsRef, Pipelines};
use crate::sessions::{SessionRecords, SessionRecordsRef, Sessions};
use crate::state::State;

const MAGIC: [u8; 8] = *b"CERTUS\x00\x08";
/// The format before ACME: the same body without `acme`.
const MAGIC_V7: [u8; 8] = *b"CERTUS\x00\x07";
/// The format before the CT log's dedupe window: the same body without `ct_dedupe`.
const MAGIC_V6: [u8; 8] = *b"CERTUS\x00\x06";
/// The format before client sessions: the same body without `clients`.
const MAGIC_V5: [u8; 8] = *b"CERTUS\x00\x05";
/// The format before pipelines: the same body without `pipelines`.
const MAGIC_V4: [u8; 8] = *b"CERTUS\x00\x04";
/// The format before sessions: the same body without `sessions`.
const MAGIC_V3: [u8; 8] = *b"CERTUS\x00\x03";
/// The format before mirrors: the version 3 body without `ct_mirror`.
const MAGIC_V2: [u8; 8] = *b"CERTUS\x00\x02";

/// Why snapshot bytes could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The bytes do not start with the snapshot magic and a known version.
    #[error("not a Certus snapshot of format version 2 to 8 (bad magic or version)")]
    BadMagic,
    /// The body could not be decoded.
    #[error("snapshot body does not decode: {0}")]
    Decode(String),
    /// Bytes follow the body.
    #[error("{0} unexpected bytes after the snapshot body")]
    TrailingBytes(usize),
    /// The body decoded but describes a state `apply` could not have made.
    #[error("snapshot describes an impossible state: {0}")]
    Inconsistent(String),
}

/// Field order is the format: append only, and bump the version byte of [`MAGIC`] on change.
#[derive(Serialize)]
struct BodyRef<'a> {
    applied_index: u64,
    clock_ms: u64,
    last_token: FencingToken,
    leases: Vec<&'a Lease>,
    challenges: Vec<&'a Challenge>,
    ct: CtRecords,
    ct_mirror: Option<&'a MirrorState>,
    sessions: SessionRecordsRef<'a>,
    pipelines: PipelineRecordsRef<'a>,
    clients: Vec<&'a ClientSession>,
    ct_dedupe: DedupeWindow,
    acme: AcmeRecordsRef<'a>,
}

/// Version 2's body, which is also how later versions begin (postcard writes a struct as its
/// fields in order, so nesting it adds no bytes).
#[derive(Deserialize)]
struct BodyV2 {
    applied_index: u64,
    clock_ms: u64,
    last_token: FencingToken,
    leases: Vec<Lease>,
    challenges: Vec<Challenge>,
    ct: CtRecords,
}

/// Version 3's body: version 2's and the mirror.
#[derive(Deserialize)]
struct BodyV3 {
    v2: BodyV2,
    ct_mirror: Option<MirrorState>,
}

/// Version 4's body: version 3's and the sessions.
#[derive(Deserialize)]
struct BodyV4 {
    v3: BodyV3,
    sessions: SessionRecords,
}

/// Version 5's body: version 4's and the pipelines.
#[derive(Deserialize)]
struct BodyV5 {
    v4: BodyV4,
    pipelines: PipelineRecords,
}

/// Version 6's body: version 5's and the client sessions.
#[derive(Deserialize)]
struct BodyV6 {
    v5: BodyV5,
    clients: Vec<ClientSession>,
}

/// Version 7's body: version 6's and the CT log's dedupe window.
#[derive(Deserialize)]
struct BodyV7 {
    v6: BodyV6,
    ct_dedupe: DedupeWindow,
}

/// Version 8's body: version 7's and the ACME tables.
#[derive(Deserialize)]
struct Body {
    v7: BodyV7,
    acme: AcmeRecords,
}

impl State {
    /// Encodes the state; equal states give equal bytes.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let body = BodyRef {
            applied_index: self.applied_index,
            clock_ms: self.clock_ms,
            last_token: self.last_token,
            leases: self.leases.iter().collect(),
            challenges: self.challenges.iter().collect(),
            ct: self.ct.records(),
            ct_mirror: self.ct.mirror(),
            sessions: self.sessions.records(),
            pipelines: self.pipelines.records(),
            clients: self.clients.iter().collect(),
            ct_dedupe: self.ct.dedupe(),
            acme: self.acme.records(),
        };
        let bytes = MAGIC.to_vec();
        // Encoding into a Vec cannot fail: every field is plainly serializable.
        postcard::to_extend(&body, bytes).expect("the state always encodes")
    }

    /// Decodes and validates a snapshot made by [`State::to_snapshot`].
    pub fn from_snapshot(bytes: &[u8]) -> Result<State, SnapshotError> {
        let decode = |e: postcard::Error| SnapshotError::Decode(e.to_string());
        let (v6, ct_dedupe, acme, rest) = if let Some(body) = bytes.strip_prefix(&MAGIC) {
            let (body, rest) = postcard::take_from_bytes::<Body>(body).map_err(decode)?;
            (body.v7.v6, body.v7.ct_dedupe, body.acme, rest)
        } else if let Some(body) = bytes.strip_prefix(&MAGIC_V7) {
            let (body, rest) = postcard::take_from_bytes::<BodyV7>(body).map_err(decode)?;
            (body.v6, body.ct_dedupe, AcmeRecords::default(), rest)
        } else {
            let (v6, rest) = Self::older_body(bytes)?;
            (v6, DedupeWindow::default(), AcmeRecords::default(), rest)
        };
        if !rest.is_empty() {
            return Err(SnapshotError::TrailingBytes(rest.len()));
        }
        let BodyV6 {
            v5:
                BodyV5 {
                    v4:
                        BodyV4 {
                            v3:
                                BodyV3 {
                                    v2: body,
                                    ct_mirror,
                                },
                            sessions,
                        },
                    pipelines,
                },
            clients,
        } = v6;
        let state = State {
            applied_index: body.applied_index,
            clock_ms: body.clock_ms,
            last_token: body.last_token,
            leases: Leases::from_records(body.leases).map_err(SnapshotError::Inconsistent)?,
            challenges: Challenges::from_records(body.challenges)
                .map_err(SnapshotError::Inconsistent)?,
            ct: CtLog::from_records(body.ct, ct_mirror, ct_dedupe)
                .map_err(SnapshotError::Inconsistent)?,
            sessions: Sessions::from_records(sessions).map_err(SnapshotError::Inconsistent)?,
            pipelines: Pipelines::from_records(pipelines).map_err(SnapshotError::Inconsistent)?,
            clients: Clients::from_records(clients).map_err(SnapshotError::Inconsistent)?,
            acme: Acme::from_records(acme).map_err(SnapshotError::Inconsistent)?,
        };
        state
            .check_invariants()
            .map_err(|e| SnapshotError::Inconsistent(e.0))?;
        Ok(state)
    }

    /// A body of format 2 to 6, completed to version 6's (each older version with what it
    /// lacks: empty, default-configured modules), and the bytes after it.
    fn older_body(bytes: &[u8]) -> Result<(BodyV6, &[u8]), SnapshotError> {
        let decode = |e: postcard::Error| SnapshotError::Decode(e.to_string());
        let v4_of = |v3| BodyV4 {
            v3,
            sessions: SessionRecords::default(),
        };
        let v5_of = |v4| BodyV5 {
            v4,
            pipelines: PipelineRecords::default(),
        };
        let v6_of = |v5| BodyV6 {
            v5,
            clients: Vec::new(),
        };
        Ok(if let Some(body) = bytes.strip_prefix(&MAGIC_V6) {
            postcard::take_from_bytes::<BodyV6>(body).map_err(decode)?
        } else if let Some(body) = bytes.strip_prefix(&MAGIC_V5) {
            let (v5, rest) = postcard::take_from_bytes::<BodyV5>(body).map_err(decode)?;
            (v6_of(v5), rest)
        } else if let Some(body) = bytes.strip_prefix(&MAGIC_V4) {
            let (v4, rest) = postcard::take_from_bytes::<BodyV4>(body).map_err(decode)?;
            (v6_of(v5_of(v4)), rest)
        } else if let Some(body) = bytes.strip_prefix(&MAGIC_V3) {
            let (v3, rest) = postcard::take_from_bytes::<BodyV3>(body).map_err(decode)?;
            (v6_of(v5_of(v4_of(v3))), rest)
        } else if let Some(body) = bytes.strip_prefix(&MAGIC_V2) {
            let (v2, rest) = postcard::take_from_bytes::<BodyV2>(body).map_err(decode)?;
            let v3 = BodyV3 {
                v2,
                ct_mirror: None,
            };
            (v6_of(v5_of(v4_of(v3))), rest)
        } else {
            return Err(SnapshotError::BadMagic);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, HolderId, LeaseCommand, LeaseName, Stamp, Ttl, apply};

    fn state_with_a_lease() -> State {
        let mut state = State::new();
        let command = LeaseCommand::Acquire {
            name: LeaseName::new("l").unwrap(),
            holder: HolderId::new("h").unwrap(),
            ttl: Ttl::from_ms(1_000).unwrap(),
        };
        apply(&mut state, Command::Lease(command), Stamp::new(3, 10_000));
        state
    }

    fn encode(body: &BodyRef<'_>) -> Vec<u8> {
        postcard::to_extend(body, MAGIC.to_vec()).unwrap()
    }

    #[test]
    fn an_empty_state_has_a_fixed_encoding() {
        // Magic, then five zero varints: index, clock, last token, no leases, no challenges;
        // then the CT log: the default config as varints (2, 500, 100000, 100, 200, 100, 30000),
        // not frozen, no entries, nothing cleaned up, next number 0, no reports, no serving STH;
        // not a mirror; then the sessions: the default config as varints (3600000, 10, 2000,
        // 86400000, 604800000, 100000), last id 0, last claim token 0, no sessions; then the
        // pipelines: the default config as varints (86400000, 300000, 3, 60000, 604800000,
        // 100000, 1000, 300000, 10, 5, 60000, 600000), last id, token and queue position 0, no
        // definitions, transactions, external ids or switches; no webhooks (last event and
        // notice 0, none dropped, none pending, no URLs, no notices); no notifications (last 0,
        // none kept); no statistics rows at any of the three resolutions; no client sessions;
        // the default dedupe window (100000) with nothing forgotten; no ACME accounts, orders
        // or revocations (last id 0).
        let expected: &[u8] = b"CERTUS\x00\x08\x00\x00\x00\x00\x00\
            \x02\xf4\x03\xa0\x8d\x06\x64\xc8\x01\x64\xb0\xea\x01\
            \x00\x00\x00\x00\x00\x00\x00\
            \x80\xdd\xdb\x01\x0a\xd0\x0f\x80\xb8\x99\x29\x80\x88\xb2\xa0\x02\xa0\x8d\x06\
            \x00\x00\x00\
            \x80\xb8\x99\x29\xe0\xa7\x12\x03\xe0\xd4\x03\x80\x88\xb2\xa0\x02\xa0\x8d\x06\
            \xe8\x07\xe0\xa7\x12\x0a\x05\xe0\xd4\x03\xc0\xcf\x24\
            \x00\x00\x00\x00\x00\x00\x00\
            \x00\x00\x00\x00\x00\x00\
            \x00\x00\
            \x00\x00\x00\
            \x00\
            \xa0\x8d\x06\x00\
            \x00\x00\x00\x00";
        assert_eq!(State::new().to_snapshot(), expected);
    }

    /// The encoding of a state without sessions ends with the empty sessions' records.
    fn empty_sessions_suffix() -> Vec<u8> {
        postcard::to_stdvec(&Sessions::default().records()).unwrap()
    }

    /// The encoding of a state without pipelines ends with the empty pipelines' records.
    fn empty_pipelines_suffix() -> Vec<u8> {
        postcard::to_stdvec(&Pipelines::default().records()).unwrap()
    }

    /// The encoding of a state without client sessions ends with this.
    const NO_CLIENTS_SUFFIX: &[u8] = &[0];

    /// The encoding of a state with the default dedupe window ends with this.
    const DEFAULT_DEDUPE_SUFFIX: &[u8] = &[0xa0, 0x8d, 0x06, 0x00];

    /// The encoding of a state without ACME ends with this.
    const NO_ACME_SUFFIX: &[u8] = &[0, 0, 0, 0];

    /// The state's encoding as version 7 (no ACME), under the current magic.
    fn without_acme(state: &State) -> Vec<u8> {
        let bytes = state.to_snapshot();
        assert!(bytes.ends_with(NO_ACME_SUFFIX));
        bytes[..bytes.len() - NO_ACME_SUFFIX.len()].to_vec()
    }

    #[test]
    fn a_version_7_snapshot_loads_with_no_acme_state() {
        let state = state_with_a_lease();
        let bytes = without_acme(&state);
        let mut v7 = MAGIC_V7.to_vec();
        v7.extend_from_slice(&bytes[MAGIC.len()..]);
        let loaded = State::from_snapshot(&v7).unwrap();
        assert_eq!(loaded, state);
        assert_eq!(loaded.acme().account_count(), 0);
        // A version 8 body under the version 7 magic has the ACME tables too many.
        let mut mislabelled = MAGIC_V7.to_vec();
        mislabelled.extend_from_slice(&state.to_snapshot()[MAGIC.len()..]);
        assert_eq!(
            State::from_snapshot(&mislabelled),
            Err(SnapshotError::TrailingBytes(NO_ACME_SUFFIX.len()))
        );
    }

    /// The state's encoding as version 6 (no dedupe window), under the current magic.
    fn without_dedupe(state: &State) -> Vec<u8> {
        let bytes = without_acme(state);
        assert!(bytes.ends_with(DEFAULT_DEDUPE_SUFFIX));
        bytes[..bytes.len() - DEFAULT_DEDUPE_SUFFIX.len()].to_vec()
    }

    #[test]
    fn a_version_6_snapshot_loads_with_the_default_dedupe_window() {
        let state = state_with_a_lease();
        let bytes = without_dedupe(&state);
        let mut v6 = MAGIC_V6.to_vec();
        v6.extend_from_slice(&bytes[MAGIC.len()..]);
        let loaded = State::from_snapshot(&v6).unwrap();
        assert_eq!(loaded, state);
        assert_eq!(loaded.ct_dedupe(), DedupeWindow::default());
        // A version 7 body under the version 6 magic has the window too many.
        let mut mislabelled = MAGIC_V6.to_vec();
        mislabelled.extend_from_slice(&without_acme(&state)[MAGIC.len()..]);
        assert_eq!(
            State::from_snapshot(&mislabelled),
            Err(SnapshotError::TrailingBytes(DEFAULT_DEDUPE_SUFFIX.len()))
        );
    }

    /// The state's encoding as version 5 (no client sessions), under the current magic.
    fn without_clients(state: &State) -> Vec<u8> {
        let bytes = without_dedupe(state);
        assert!(bytes.ends_with(NO_CLIENTS_SUFFIX));
        bytes[..bytes.len() - NO_CLIENTS_SUFFIX.len()].to_vec()
    }

    #[test]
    fn a_version_5_snapshot_loads_with_no_client_sessions() {
        let state = state_with_a_lease();
        let bytes = without_clients(&state);
        let mut v5 = MAGIC_V5.to_vec();
        v5.extend_from_slice(&bytes[MAGIC.len()..]);
        assert_eq!(State::from_snapshot(&v5), Ok(state.clone()));
        // A version 6 body under the version 5 magic has the client sessions too many.
        let mut mislabelled = MAGIC_V5.to_vec();
        mislabelled.extend_from_slice(&without_dedupe(&state)[MAGIC.len()..]);
        assert_eq!(
            State::from_snapshot(&mislabelled),
            Err(SnapshotError::TrailingBytes(NO_CLIENTS_SUFFIX.len()))
        );
    }

    #[test]
    fn a_version_4_snapshot_loads_with_no_pipelines() {
        let state = state_with_a_lease();
        let bytes = without_clients(&state);
        // Version 4 is version 5 without the trailing pipelines.
        let suffix = empty_pipelines_suffix();
        assert!(bytes.ends_with(&suffix));
        let mut v4 = MAGIC_V4.to_vec();
        v4.extend_from_slice(&bytes[MAGIC.len()..bytes.len() - suffix.len()]);
        assert_eq!(State::from_snapshot(&v4), Ok(state));
        // A version 5 body under the version 4 magic has the pipelines too many.
        let mut mislabelled = MAGIC_V4.to_vec();
        mislabelled.extend_from_slice(&bytes[MAGIC.len()..]);
        assert_eq!(
            State::from_snapshot(&mislabelled),
            Err(SnapshotError::TrailingBytes(suffix.len()))
        );
    }

    #[test]
    fn a_version_3_snapshot_loads_with_no_sessions() {
        let state = state_with_a_lease();
        let bytes = without_clients(&state);
        let bytes = &bytes[..bytes.len() - empty_pipelines_suffix().len()];
        // Version 3 is version 4 without the trailing sessions.
        let suffix = empty_sessions_suffix();
        assert!(bytes.ends_with(&suffix));
        let mut v3 = MAGIC_V3.to_vec();
        v3.extend_from_slice(&bytes[MAGIC.len()..bytes.len() - suffix.len()]);
        assert_eq!(State::from_snapshot(&v3), Ok(state));
        // A version 4 body under the version 3 magic has the sessions too many.
        let mut mislabelled = MAGIC_V3.to_vec();
        mislabelled.extend_from_slice(&bytes[MAGIC.len()..]);
        assert_eq!(
            State::from_snapshot(&mislabelled),
            Err(SnapshotError::TrailingBytes(suffix.len()))
        );
    }

    #[test]
    fn a_version_2_snapshot_loads_as_a_log_that_is_no_mirror_with_no_sessions() {
        let state = state_with_a_lease();
        let bytes = without_clients(&state);
        // Version 2 is version 5 without the trailing "no mirror", sessions and pipelines.
        let cut = empty_pipelines_suffix().len() + empty_sessions_suffix().len() + 1;
        assert_eq!(bytes[bytes.len() - cut], 0);
        let mut v2 = MAGIC_V2.to_vec();
        v2.extend_from_slice(&bytes[MAGIC.len()..bytes.len() - cut]);
        assert_eq!(State::from_snapshot(&v2), Ok(state));
        // A version 3 body under the version 2 magic has a byte too many.
        let mut mislabelled = MAGIC_V2.to_vec();
        mislabelled.extend_from_slice(&bytes[MAGIC.len()..bytes.len() - cut + 1]);
        assert_eq!(
            State::from_snapshot(&mislabelled),
            Err(SnapshotError::TrailingBytes(1))
        );
    }

    #[test]
    fn bad_magic_and_trailing_bytes_are_refused() {
        let bytes = state_with_a_lease().to_snapshot();
        assert_eq!(
            State::from_snapshot(&bytes[1..]),
            Err(SnapshotError::BadMagic)
        );
        let mut newer = bytes.clone();
        newer[7] = 9;
        assert_eq!(State::from_snapshot(&newer), Err(SnapshotError::BadMagic));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            State::from_snapshot(&longer),
            Err(SnapshotError::TrailingBytes(1))
        );
        assert!(matches!(
            State::from_snapshot(&bytes[..bytes.len() - 1]),
            Err(SnapshotError::Decode(_))
        ));
    }

    #[test]
    fn an_impossible_state_is_refused() {
        let state = state_with_a_lease();
        let lease = state.leases.iter().next().unwrap().clone();
        let empty = Sessions::default();
        let no_pipelines = Pipelines::default();
        let no_acme = Acme::default();
        let body = |last_token, clock_ms, leases| BodyRef {
            applied_index: 3,
            clock_ms,
            last_token: FencingToken(last_token),
            leases,
            challenges: Vec::new(),
            ct: CtLog::default().records(),
            ct_mirror: None,
            sessions: empty.records(),
            pipelines: no_pipelines.records(),
            clients: Vec::new(),
            ct_dedupe: DedupeWindow::default(),
            acme: no_acme.records(),
        };
        // A token above the last issued one.
        let bytes = encode(&body(2, 10_000, vec![&lease]));
        assert!(matches!(
            State::from_snapshot(&bytes),
            Err(SnapshotError::Inconsistent(_))
        ));
        // A lease renewed after the machine clock.
        let bytes = encode(&body(3, 9_999, vec![&lease]));
        assert!(matches!(
            State::from_snapshot(&bytes),
            Err(SnapshotError::Inconsistent(_))
        ));
        // The same lease twice.
        let bytes = encode(&body(3, 10_000, vec![&lease, &lease]));
        assert!(matches!(
            State::from_snapshot(&bytes),
            Err(SnapshotError::Inconsistent(_))
        ));
        // A lease whose expiry does not follow from its renewal and TTL.
        let mut stretched = lease.clone();
        stretched.expires_at_ms += 1;
        let bytes = encode(&body(3, 10_000, vec![&stretched]));
        assert!(matches!(
            State::from_snapshot(&bytes),
            Err(SnapshotError::Inconsistent(_))
        ));
        // And the honest encoding loads.
        assert_eq!(
            State::from_snapshot(&encode(&body(3, 10_000, vec![&lease]))),
            Ok(state)
        );
    }
}
