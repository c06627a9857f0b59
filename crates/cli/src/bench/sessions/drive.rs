//! One client's loop, and one session's life as a client sees it: create it, long-poll it to
//! `DONE`, check the certificate it carries, acknowledge it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use certus_client::Client;
use certus_proto::v1::{Session, Stage};

use super::applicants::{Applicant, Applicants};
use super::verify::CertificateCheck;
use crate::bench::micros;
use crate::limits::BENCH_SESSION_WAIT_MAX;

/// How long a session may take from its create to its acknowledgement before the client gives
/// up on it: far beyond a healthy session (well under a second), and beyond a few HTTP-01
/// retries (2 s each by default).
pub(super) const SESSION_PATIENCE: Duration = Duration::from_secs(60);

/// Why a session did not end acknowledged with a good certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum FailureKind {
    /// `Sessions/Create` was refused or unanswered.
    Create,
    /// A `Sessions/Wait` was refused or unanswered.
    Wait,
    /// The session ended `FAILED`.
    Failed,
    /// The session was killed.
    Killed,
    /// Not `DONE` within [`SESSION_PATIENCE`].
    NotDone,
    /// The certificate does not check.
    Certificate,
    /// `Sessions/Acknowledge` was refused, unanswered, or did not archive the session.
    Acknowledge,
}

impl FailureKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            FailureKind::Create => "create",
            FailureKind::Wait => "wait",
            FailureKind::Failed => "failed",
            FailureKind::Killed => "killed",
            FailureKind::NotDone => "not done",
            FailureKind::Certificate => "bad certificate",
            FailureKind::Acknowledge => "acknowledge",
        }
    }
}

/// A session that did not make it, and what happened.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) kind: FailureKind,
    pub(super) detail: String,
}

/// A session acknowledged with a certificate that checked.
#[derive(Debug)]
pub(super) struct Completed {
    /// From sending the create to seeing `DONE`, in microseconds.
    pub(super) create_to_done_us: u64,
    pub(super) acknowledged_at: Instant,
    /// How long it spent in the stages, by the cluster's clock.
    pub(super) stages_ms: StagesMs,
    /// The most HTTP-01 tests any of its challenges needed.
    pub(super) tests: u32,
}

/// Milliseconds a session spent in the stages, from what the done session records: its
/// creation, when its challenges were made (the end of `MAKE_CHALLENGE`), and when it entered
/// `DONE`. Testing and issuing are one figure: the session records no time between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StagesMs {
    pub(super) make_challenge: u64,
    pub(super) test_and_issue: u64,
}

impl StagesMs {
    /// The stage times of a `DONE` session; `None` if it has no challenge or its times are out
    /// of order (a cluster clock that stepped back).
    fn of(done: &Session) -> Option<StagesMs> {
        let made_ms = done
            .challenges
            .iter()
            .map(|challenge| challenge.challtime_ms)
            .max()?;
        Some(StagesMs {
            make_challenge: made_ms.checked_sub(done.created_ms)?,
            test_and_issue: done.stage_entered_ms.checked_sub(made_ms)?,
        })
    }
}

/// One session the client drove.
#[derive(Debug)]
pub(super) struct Driven {
    /// When the client sent the create.
    pub(super) created_at: Instant,
    pub(super) result: Result<Completed, Failure>,
}

/// What one client did in a run.
#[derive(Debug, Default)]
pub(super) struct ClientReport {
    pub(super) sessions: Vec<Driven>,
    /// Whether it stopped because every applicant was taken.
    pub(super) ran_out: bool,
}

/// Drives one session after another, each with a fresh applicant, until `end`; the session in
/// flight at `end` is finished (bounded by [`SESSION_PATIENCE`]) so that every session created
/// is accounted for.
pub(super) async fn client_loop(
    client: Client,
    applicants: Arc<Applicants>,
    check: Arc<CertificateCheck>,
    end: Instant,
) -> ClientReport {
    let mut report = ClientReport::default();
    while Instant::now() < end {
        let Some(applicant) = applicants.take() else {
            report.ran_out = true;
            break;
        };
        let created_at = Instant::now();
        let result = drive(&client, applicant, &check, created_at).await;
        report.sessions.push(Driven { created_at, result });
    }
    report
}

async fn drive(
    client: &Client,
    applicant: &Applicant,
    check: &CertificateCheck,
    created_at: Instant,
) -> Result<Completed, Failure> {
    let fail = |kind: FailureKind, detail: String| Failure { kind, detail };
    let created = client
        .create_session(
            applicant.csr_der.clone(),
            vec![applicant.name.clone()],
            Some(applicant.request_key.clone()),
        )
        .await
        .map_err(|error| fail(FailureKind::Create, error.to_string()))?;
    let id = created.id;
    let done = wait_until_settled(client, created, created_at + SESSION_PATIENCE)
        .await
        .map_err(|failure| Failure {
            detail: format!("session {id}: {}", failure.detail),
            ..failure
        })?;
    let create_to_done_us = micros(created_at.elapsed());
    if !done.live {
        return Err(fail(
            FailureKind::Killed,
            format!("session {id} was killed: {}", done.kill_reason),
        ));
    }
    if done.stage == i32::from(Stage::Failed) {
        return Err(fail(
            FailureKind::Failed,
            format!("session {id} failed: {}", done.failure),
        ));
    }
    check
        .check(&done.certificate, applicant)
        .map_err(|error| fail(FailureKind::Certificate, format!("session {id}: {error}")))?;
    let stages_ms = StagesMs::of(&done).ok_or_else(|| {
        fail(
            FailureKind::Failed,
            format!("session {id} is DONE without challenges made after its creation: {done:?}"),
        )
    })?;
    let acknowledged = client
        .acknowledge_session(id)
        .await
        .map_err(|error| fail(FailureKind::Acknowledge, format!("session {id}: {error}")))?;
    if !acknowledged.acknowledged || acknowledged.archived_at_ms == 0 {
        return Err(fail(
            FailureKind::Acknowledge,
            format!("session {id} was not archived by its acknowledgement: {acknowledged:?}"),
        ));
    }
    Ok(Completed {
        create_to_done_us,
        acknowledged_at: Instant::now(),
        stages_ms,
        tests: done
            .challenges
            .iter()
            .map(|challenge| challenge.times_tested)
            .max()
            .unwrap_or(0),
    })
}

/// Long-polls the session until it is done, failed or killed (or `deadline` passes).
async fn wait_until_settled(
    client: &Client,
    created: Session,
    deadline: Instant,
) -> Result<Session, Failure> {
    let mut known = created;
    while known.live
        && known.stage != i32::from(Stage::Done)
        && known.stage != i32::from(Stage::Failed)
    {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure {
                kind: FailureKind::NotDone,
                detail: format!(
                    "still {:?} after {} s (note: {:?})",
                    Stage::try_from(known.stage).unwrap_or(Stage::Unspecified),
                    SESSION_PATIENCE.as_secs(),
                    known.note
                ),
            });
        }
        known = client
            .wait_session(
                known.id,
                Some(known.clone()),
                left.min(BENCH_SESSION_WAIT_MAX),
            )
            .await
            .map_err(|error| Failure {
                kind: FailureKind::Wait,
                detail: error.to_string(),
            })?;
    }
    Ok(known)
}

#[cfg(test)]
mod tests {
    use certus_proto::v1::SessionChallenge;

    use super::*;

    fn done(created_ms: u64, challenges_made_ms: &[u64], done_ms: u64) -> Session {
        Session {
            stage: Stage::Done.into(),
            created_ms,
            stage_entered_ms: done_ms,
            challenges: challenges_made_ms
                .iter()
                .map(|&challtime_ms| SessionChallenge {
                    challtime_ms,
                    ..SessionChallenge::default()
                })
                .collect(),
            ..Session::default()
        }
    }

    #[test]
    fn stage_times_split_at_the_last_challenge_made() {
        assert_eq!(
            StagesMs::of(&done(100, &[130], 190)),
            Some(StagesMs {
                make_challenge: 30,
                test_and_issue: 60
            })
        );
        assert_eq!(
            StagesMs::of(&done(100, &[120, 140], 190)),
            Some(StagesMs {
                make_challenge: 40,
                test_and_issue: 50
            })
        );
        assert_eq!(StagesMs::of(&done(100, &[], 190)), None, "no challenge");
        assert_eq!(
            StagesMs::of(&done(100, &[90], 190)),
            None,
            "made before created"
        );
        assert_eq!(
            StagesMs::of(&done(100, &[200], 190)),
            None,
            "made after done"
        );
    }
}
