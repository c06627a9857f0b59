//! `certus ctl session`: CA issuance sessions — create one from a CSR, follow it, fetch its
//! certificate, acknowledge or kill it; list the queues and change the configuration.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certus_ca::csr::CheckedCsr;
use certus_client::{
    Client, Session, SessionChallenge, SessionConfig, SessionsStatus, Stage, StageQueue,
};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::Table;
use serde_json::{Value, json};

use super::settings::{self, Changes, ConfigCommand, Setting, Settings, config_json, config_table};
use super::show::{
    human_ms, ms_or_null, now_ms, or_none, relative, table, table_of, text_or_null, yes_no,
};
use super::{Output, WAIT_CHUNK, failed, pages_by_id};

/// CA issuance sessions.
#[derive(Debug, Subcommand)]
pub(super) enum SessionCommand {
    /// Create a session from a CSR and print it.
    Create {
        /// The CSR: a PEM ("CERTIFICATE REQUEST") or DER file.
        #[arg(long, value_name = "FILE")]
        csr: PathBuf,
        /// A DNS name to certify (repeat for several); default: the CSR's names. The names
        /// given must be exactly the CSR's.
        #[arg(long = "name", value_name = "NAME")]
        names: Vec<String>,
        /// An idempotency key (1 to 128 visible ASCII characters). With it the create is
        /// retried after an ambiguous failure and running the command again answers the same
        /// session; without it the create is tried once.
        #[arg(long, value_name = "KEY")]
        request_key: Option<String>,
    },
    /// One session: stage, challenges, claim, certificate.
    Get {
        /// The session id.
        id: u64,
    },
    /// Follow a session until it is done (or failed or killed), printing a line per change.
    ///
    /// With `--for any`, until its first change. Exit status 1 if it failed, was killed or the
    /// time ran out (the session as last seen is printed all the same).
    Wait {
        /// The session id.
        id: u64,
        /// `done`: until DONE, FAILED or killed; `any`: until the first change.
        #[arg(long = "for", value_name = "WHAT", value_enum, default_value_t = WaitFor::Done)]
        until: WaitFor,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
    },
    /// Print the certificate chain (PEM, leaf first) of a DONE session, whatever --json says.
    Cert {
        /// The session id.
        id: u64,
    },
    /// Acknowledge a DONE session's certificate: the session is archived.
    Ack {
        /// The session id.
        id: u64,
    },
    /// Stop a session for good: it keeps its stage and never advances.
    Kill {
        /// The session id.
        id: u64,
        /// Why (recorded in the session).
        #[arg(long, value_name = "TEXT")]
        reason: String,
    },
    /// Sessions in id order, in one stage or in every stage (every page, unless --limit is
    /// given).
    List {
        /// Only this stage: make-challenge, test-challenge, issue, done or failed.
        #[arg(long, value_parser = parse_stage)]
        stage: Option<Stage>,
        /// Start after this session id.
        #[arg(long, value_name = "ID")]
        after: Option<u64>,
        /// Show at most this many sessions.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
    /// The queues' depths, the done and archived counts, and the configuration.
    Status,
    /// The sessions' cluster-wide configuration, or change it.
    Config {
        #[command(subcommand)]
        command: Option<ConfigCommand<ConfigChanges>>,
    },
}

/// What `session wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum WaitFor {
    /// DONE, FAILED or killed.
    Done,
    /// Any change but a claim (stage, challenge test, acknowledgement, …).
    Any,
}

/// The fields `session config set` may change; `None` keeps the current value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args)]
pub(super) struct ConfigChanges {
    /// A live session that sits in one queued stage this long is killed.
    #[arg(long)]
    stage_timeout_ms: Option<u64>,
    /// A challenge tested unsuccessfully this often kills its session.
    #[arg(long)]
    max_tests: Option<u32>,
    /// An unsatisfied challenge is tested again after this delay.
    #[arg(long)]
    test_retry_ms: Option<u64>,
    /// An unacknowledged done session is archived after this long.
    #[arg(long)]
    done_retention_ms: Option<u64>,
    /// An archived session is deleted after this long.
    #[arg(long)]
    archive_retention_ms: Option<u64>,
    /// Most sessions stored; a create beyond it is refused.
    #[arg(long)]
    sessions_max: Option<u64>,
}

impl Changes for ConfigChanges {
    type Config = SessionConfig;

    fn changed(&self, config: &SessionConfig) -> SessionConfig {
        SessionConfig {
            stage_timeout_ms: self.stage_timeout_ms.unwrap_or(config.stage_timeout_ms),
            max_tests: self.max_tests.unwrap_or(config.max_tests),
            test_retry_ms: self.test_retry_ms.unwrap_or(config.test_retry_ms),
            done_retention_ms: self.done_retention_ms.unwrap_or(config.done_retention_ms),
            archive_retention_ms: self
                .archive_retention_ms
                .unwrap_or(config.archive_retention_ms),
            sessions_max: self.sessions_max.unwrap_or(config.sessions_max),
        }
    }
}

impl Settings for SessionConfig {
    const COMMAND: &'static str = "session";
    const WHOSE: &'static str = "The sessions'";
    const DURATIONS_SHOWN: bool = true;

    fn settings(&self) -> Vec<Setting> {
        vec![
            Setting::new("stage_timeout_ms", self.stage_timeout_ms, "ms"),
            Setting::new("max_tests", self.max_tests, "tests"),
            Setting::new("test_retry_ms", self.test_retry_ms, "ms"),
            Setting::new("done_retention_ms", self.done_retention_ms, "ms"),
            Setting::new("archive_retention_ms", self.archive_retention_ms, "ms"),
            Setting::new("sessions_max", self.sessions_max, "sessions"),
        ]
    }
}

/// Runs `certus ctl session …`.
pub(super) async fn run(
    client: &Client,
    out: &Output,
    command: SessionCommand,
) -> Result<(), String> {
    match command {
        SessionCommand::Create {
            csr,
            names,
            request_key,
        } => {
            let der = read_csr(&csr)?;
            let what = format!("session create {}", csr.display());
            let session = client
                .create_session(der, names, request_key.clone())
                .await
                .map_err(|error| failed(&what, &error))?;
            let headline = match &request_key {
                Some(key) => format!("Session {} (request key {key:?}).", session.id),
                None => format!("Created session {}.", session.id),
            };
            print_session(out, &headline, &session);
            if !out.json {
                say!("Follow it with `certus ctl session wait {}`.", session.id);
            }
        }
        SessionCommand::Get { id } => {
            let session = client
                .get_session(id)
                .await
                .map_err(|error| failed(&format!("session {id}"), &error))?;
            print_session(out, &format!("Session {id}:"), &session);
        }
        SessionCommand::Wait { id, until, timeout } => {
            wait(client, out, id, until, Duration::from_secs(timeout)).await?;
        }
        SessionCommand::Cert { id } => {
            let session = client
                .get_session(id)
                .await
                .map_err(|error| failed(&format!("session {id} certificate"), &error))?;
            let pem = certificate(&session)?;
            // Raw PEM whatever --json says: it is what TLS tooling reads.
            use std::io::Write as _;
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(pem.as_bytes());
            if !pem.ends_with('\n') {
                let _ = stdout.write_all(b"\n");
            }
        }
        SessionCommand::Ack { id } => {
            let session = client
                .acknowledge_session(id)
                .await
                .map_err(|error| failed(&format!("session {id} ack"), &error))?;
            print_session(
                out,
                &format!("Session {id} acknowledged; it is archived."),
                &session,
            );
        }
        SessionCommand::Kill { id, reason } => {
            let session = client
                .kill_session(id, reason)
                .await
                .map_err(|error| failed(&format!("session {id} kill"), &error))?;
            print_session(out, &format!("Session {id} is killed."), &session);
        }
        SessionCommand::List {
            stage,
            after,
            limit,
        } => {
            let stages = match stage {
                Some(stage) => vec![stage],
                None => STAGES.to_vec(),
            };
            let sessions = list(client, &stages, after.unwrap_or(0), limit).await?;
            let document =
                json!({ "sessions": sessions.iter().map(session_json).collect::<Vec<_>>() });
            out.emit(&document, || {
                if sessions.is_empty() {
                    say!("No sessions.");
                } else {
                    say!("{}", sessions_table(&sessions, now_ms()));
                }
            });
        }
        SessionCommand::Status => {
            let status = client
                .sessions_status()
                .await
                .map_err(|error| failed("session status", &error))?;
            print_status(out, &status);
        }
        SessionCommand::Config { command } => {
            let current = current_config(client).await?;
            settings::run(out, command, current, |wanted| async move {
                client
                    .set_session_config(wanted)
                    .await
                    .map_err(|error| failed("session config set", &error))
            })
            .await?;
        }
    }
    Ok(())
}

async fn current_config(client: &Client) -> Result<SessionConfig, String> {
    client
        .sessions_status()
        .await
        .map_err(|error| failed("session config", &error))?
        .config
        .ok_or_else(|| "session config: the node's status has no configuration".to_owned())
}

/// Every stage, in the order sessions move through them.
const STAGES: [Stage; 5] = [
    Stage::MakeChallenge,
    Stage::TestChallenge,
    Stage::Issue,
    Stage::Done,
    Stage::Failed,
];

/// The sessions of `stages` (each in id order, after `after`), every page; at most `limit` in
/// all when given.
async fn list(
    client: &Client,
    stages: &[Stage],
    after: u64,
    limit: Option<u32>,
) -> Result<Vec<Session>, String> {
    pages_by_id(stages, after, limit, |&stage, after, limit| async move {
        let page = client
            .list_sessions(stage, after, limit)
            .await
            .map_err(|error| failed(&format!("session list {}", stage.as_str_name()), &error))?;
        Ok((page.sessions, page.next_after))
    })
    .await
}

// ---- wait --------------------------------------------------------------------------------

async fn wait(
    client: &Client,
    out: &Output,
    id: u64,
    until: WaitFor,
    timeout: Duration,
) -> Result<(), String> {
    let what = format!("session {id} wait");
    let started = Instant::now();
    // A timeout too large for the clock is as good as none.
    let deadline = started
        .checked_add(timeout)
        .unwrap_or_else(|| started + Duration::from_secs(u64::from(u32::MAX)));
    let first = client
        .get_session(id)
        .await
        .map_err(|error| failed(&what, &error))?;
    progress(
        out,
        started,
        &format!("session {id}: {}", state_line(&first)),
    );
    let mut session = first.clone();
    loop {
        let reached = match until {
            WaitFor::Done => finished(&session),
            WaitFor::Any => !same_progress(&first, &session),
        };
        if reached {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            print_session(out, &format!("Session {id}:"), &session);
            let waited = match until {
                WaitFor::Done => "done",
                WaitFor::Any => "changed",
            };
            return Err(format!(
                "{what}: not {waited} after {} (stage {})",
                human_ms(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
                stage_name(session.stage)
            ));
        }
        let next = client
            .wait_session(id, Some(session.clone()), left.min(WAIT_CHUNK))
            .await
            .map_err(|error| failed(&what, &error))?;
        for change in changes(&session, &next) {
            progress(out, started, &format!("session {id}: {change}"));
        }
        session = next;
    }
    print_session(out, &format!("Session {id}:"), &session);
    if until == WaitFor::Done && !(session.live && session.stage == i32::from(Stage::Done)) {
        return Err(format!("{what}: {}", state_line(&session)));
    }
    Ok(())
}

/// A progress line of `session wait`: on stdout, or on stderr with --json (stdout holds one
/// JSON document).
fn progress(out: &Output, started: Instant, line: &str) {
    let elapsed = started.elapsed().as_secs_f64();
    if out.json {
        eprintln!("[{elapsed:7.1} s] {line}");
    } else {
        say!("[{elapsed:7.1} s] {line}");
    }
}

/// DONE, FAILED or killed: it will not advance any more.
fn finished(session: &Session) -> bool {
    !session.live
        || session.stage == i32::from(Stage::Done)
        || session.stage == i32::from(Stage::Failed)
}

/// Whether two snapshots agree in everything a `Wait` watches (all but the claim).
fn same_progress(a: &Session, b: &Session) -> bool {
    let unclaimed = |session: &Session| Session {
        claimant: String::new(),
        claim_token: 0,
        claim_deadline_ms: 0,
        ..session.clone()
    };
    unclaimed(a) == unclaimed(b)
}

/// The session's state in a few words.
fn state_line(session: &Session) -> String {
    let stage = stage_name(session.stage);
    if !session.live {
        return format!("killed in {stage}: {}", session.kill_reason);
    }
    match Stage::try_from(session.stage) {
        Ok(Stage::Failed) => format!("FAILED: {}", session.failure),
        Ok(Stage::Done) if session.acknowledged => "DONE, certificate acknowledged".to_owned(),
        Ok(Stage::Done) => "DONE, certificate ready".to_owned(),
        _ => {
            let mut line = stage;
            if !session.challenges.is_empty() {
                line.push_str(&format!(
                    " ({} of {} challenges satisfied)",
                    satisfied(session),
                    session.challenges.len()
                ));
            }
            if !session.claimant.is_empty() {
                line.push_str(&format!(", claimed by {}", session.claimant));
            }
            line
        }
    }
}

fn satisfied(session: &Session) -> usize {
    session
        .challenges
        .iter()
        .filter(|challenge| challenge.satisfied)
        .count()
}

/// What changed between two snapshots of a session, one line each (claims aside).
fn changes(before: &Session, after: &Session) -> Vec<String> {
    let mut lines = Vec::new();
    if before.stage != after.stage {
        let mut line = format!(
            "{} -> {}",
            stage_name(before.stage),
            stage_name(after.stage)
        );
        if after.stage == i32::from(Stage::Failed) {
            line.push_str(&format!(": {}", after.failure));
        }
        lines.push(line);
    }
    if before.challenges.is_empty() && !after.challenges.is_empty() {
        let names: Vec<&str> = after
            .challenges
            .iter()
            .map(|challenge| challenge.name.as_str())
            .collect();
        lines.push(format!("challenges made for {}", names.join(", ")));
    }
    for challenge in &after.challenges {
        let old = before
            .challenges
            .iter()
            .find(|old| old.name == challenge.name);
        let was_satisfied = old.is_some_and(|old| old.satisfied);
        let was_failed = old.is_some_and(|old| old.failed);
        let was_tested = old.map_or(0, |old| old.times_tested);
        let name = &challenge.name;
        if challenge.satisfied && !was_satisfied {
            lines.push(format!("challenge {name} satisfied"));
        } else if challenge.failed && !was_failed {
            lines.push(format!(
                "challenge {name} failed after {} test(s): {}",
                challenge.times_tested,
                or_none(&challenge.last_error)
            ));
        } else if challenge.times_tested > was_tested {
            lines.push(format!(
                "challenge {name} not satisfied yet (tested {} time(s)): {}",
                challenge.times_tested,
                or_none(&challenge.last_error)
            ));
        }
    }
    if before.live && !after.live {
        lines.push(format!("killed: {}", after.kill_reason));
    }
    if !before.acknowledged && after.acknowledged {
        lines.push("certificate acknowledged".to_owned());
    }
    if before.archived_at_ms == 0 && after.archived_at_ms != 0 {
        lines.push("archived".to_owned());
    }
    if lines.is_empty() && !same_progress(before, after) {
        lines.push(format!("updated: {}", state_line(after)));
    }
    lines
}

// ---- the certificate and the CSR -----------------------------------------------------------

/// The certificate chain of a DONE session, or why there is none.
fn certificate(session: &Session) -> Result<&str, String> {
    let id = session.id;
    if session.stage != i32::from(Stage::Done) {
        return Err(format!(
            "session {id} has no certificate: it is {}",
            state_line(session)
        ));
    }
    if session.certificate.is_empty() {
        return Err(format!(
            "session {id} is DONE but the node's answer carries no certificate"
        ));
    }
    Ok(&session.certificate)
}

/// A CSR file, PEM or DER, as DER.
fn read_csr(path: &Path) -> Result<Vec<u8>, String> {
    let bytes =
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    csr_der(&bytes).map_err(|error| format!("{}: {error}", path.display()))
}

/// The DER of a CSR given as PEM or DER, checked here as the node will check it (it parses, its
/// signature verifies, its names are DNS names), so a bad file is named before anything is sent.
fn csr_der(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let checked = match std::str::from_utf8(bytes) {
        Ok(text) if text.contains("-----BEGIN") => CheckedCsr::from_pem(text),
        _ => CheckedCsr::from_der(bytes),
    };
    checked
        .map(|csr| csr.der().to_vec())
        .map_err(|error| error.to_string())
}

// ---- output ------------------------------------------------------------------------------

/// A stage's protocol name (`MAKE_CHALLENGE`, …), or the number a newer node sent.
fn stage_name(stage: i32) -> String {
    match Stage::try_from(stage) {
        Ok(stage) => stage.as_str_name().to_owned(),
        Err(_) => format!("STAGE_{stage}"),
    }
}

/// `--stage`: a stage by name, in any case, with `-` or `_` or nothing between the words
/// (`test-challenge`, `TEST_CHALLENGE`, `testchallenge`).
fn parse_stage(text: &str) -> Result<Stage, String> {
    let squashed: String = text
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .collect::<String>()
        .to_ascii_lowercase();
    STAGES
        .into_iter()
        .find(|stage| stage.as_str_name().replace('_', "").to_ascii_lowercase() == squashed)
        .ok_or_else(|| {
            format!(
                "{text:?} is not a stage; use make-challenge, test-challenge, issue, done or failed"
            )
        })
}

fn challenge_json(challenge: &SessionChallenge) -> Value {
    json!({
        "name": challenge.name,
        "token": challenge.token,
        "key_authorization": challenge.key_authorization,
        "challtime_ms": challenge.challtime_ms,
        "satisfied": challenge.satisfied,
        "failed": challenge.failed,
        "times_tested": challenge.times_tested,
        "last_error": text_or_null(&challenge.last_error),
    })
}

/// A session as JSON; absent values are null, the CSR is base64 DER.
fn session_json(session: &Session) -> Value {
    json!({
        "id": session.id,
        "stage": stage_name(session.stage),
        "live": session.live,
        "kill_reason": text_or_null(&session.kill_reason),
        "failure": text_or_null(&session.failure),
        "note": text_or_null(&session.note),
        "names": session.names,
        "created_ms": session.created_ms,
        "stage_entered_ms": session.stage_entered_ms,
        "request_key": text_or_null(&session.request_key),
        "challenges": session.challenges.iter().map(challenge_json).collect::<Vec<_>>(),
        "claim": if session.claimant.is_empty() && session.claim_token == 0 {
            Value::Null
        } else {
            json!({
                "claimant": session.claimant,
                "token": session.claim_token,
                "deadline_ms": session.claim_deadline_ms,
            })
        },
        "acknowledged": session.acknowledged,
        "archived_at_ms": ms_or_null(session.archived_at_ms),
        "certificate": text_or_null(&session.certificate),
        "csr": STANDARD.encode(&session.csr),
    })
}

/// One session for people: a field/value table.
fn session_table(session: &Session, now: Option<u64>) -> Table {
    let mut rows = table(&["session", &session.id.to_string()]);
    rows.add_row(vec![
        "stage".to_owned(),
        format!(
            "{} (entered {})",
            stage_name(session.stage),
            relative(session.stage_entered_ms, now)
        ),
    ]);
    rows.add_row(vec![
        "live".to_owned(),
        if session.live {
            "yes".to_owned()
        } else {
            format!("no, killed: {}", session.kill_reason)
        },
    ]);
    if !session.failure.is_empty() {
        rows.add_row(vec!["failure".to_owned(), session.failure.clone()]);
    }
    // Why the last worker gave the session back (a transient error, an upstream order id).
    if !session.note.is_empty() {
        rows.add_row(vec!["note".to_owned(), session.note.clone()]);
    }
    rows.add_row(vec!["names".to_owned(), session.names.join(", ")]);
    rows.add_row(vec![
        "created".to_owned(),
        relative(session.created_ms, now),
    ]);
    if !session.request_key.is_empty() {
        rows.add_row(vec!["request key".to_owned(), session.request_key.clone()]);
    }
    rows.add_row(vec![
        "claim".to_owned(),
        if session.claimant.is_empty() {
            "-".to_owned()
        } else {
            format!(
                "{} (token {}, expires {})",
                session.claimant,
                session.claim_token,
                relative(session.claim_deadline_ms, now)
            )
        },
    ]);
    rows.add_row(vec![
        "acknowledged".to_owned(),
        yes_no(session.acknowledged).to_owned(),
    ]);
    rows.add_row(vec![
        "archived".to_owned(),
        if session.archived_at_ms == 0 {
            "no".to_owned()
        } else {
            relative(session.archived_at_ms, now)
        },
    ]);
    if !session.certificate.is_empty() {
        rows.add_row(vec![
            "certificate".to_owned(),
            format!(
                "{} PEM certificate(s): `certus ctl session cert {}`",
                session
                    .certificate
                    .matches("-----BEGIN CERTIFICATE-----")
                    .count(),
                session.id
            ),
        ]);
    }
    rows
}

/// The challenges of a session, one row each.
fn challenges_table(challenges: &[SessionChallenge], now: Option<u64>) -> Table {
    table_of(
        &["name", "token", "satisfied", "tested", "made", "last error"],
        challenges,
        |challenge| {
            vec![
                challenge.name.clone(),
                challenge.token.clone(),
                if challenge.failed {
                    "failed".to_owned()
                } else {
                    yes_no(challenge.satisfied).to_owned()
                },
                challenge.times_tested.to_string(),
                relative(challenge.challtime_ms, now),
                or_none(&challenge.last_error).to_owned(),
            ]
        },
    )
}

fn print_session(out: &Output, headline: &str, session: &Session) {
    out.emit(&session_json(session), || {
        let now = now_ms();
        say!("{headline}");
        say!("{}", session_table(session, now));
        if !session.challenges.is_empty() {
            say!("{}", challenges_table(&session.challenges, now));
        }
    });
}

/// Sessions, one row each.
fn sessions_table(sessions: &[Session], now: Option<u64>) -> Table {
    let header = [
        "id",
        "stage",
        "state",
        "names",
        "challenges",
        "claimant",
        "created",
        "archived",
    ];
    table_of(&header, sessions, |session| {
        let state = if !session.live {
            format!("killed: {}", session.kill_reason)
        } else if !session.failure.is_empty() {
            format!("failed: {}", session.failure)
        } else if session.acknowledged {
            "acknowledged".to_owned()
        } else {
            "live".to_owned()
        };
        vec![
            session.id.to_string(),
            stage_name(session.stage),
            state,
            session.names.join(", "),
            if session.challenges.is_empty() {
                "-".to_owned()
            } else {
                format!(
                    "{}/{} satisfied",
                    satisfied(session),
                    session.challenges.len()
                )
            },
            or_none(&session.claimant).to_owned(),
            relative(session.created_ms, now),
            if session.archived_at_ms == 0 {
                "-".to_owned()
            } else {
                relative(session.archived_at_ms, now)
            },
        ]
    })
}

fn queue_json(queue: &StageQueue) -> Value {
    json!({
        "stage": stage_name(queue.stage),
        "waiting": queue.waiting,
        "claimed": queue.claimed,
        "oldest_visible_age_ms": queue.oldest_visible_age_ms,
    })
}

fn status_json(status: &SessionsStatus) -> Value {
    json!({
        "queues": status.queues.iter().map(queue_json).collect::<Vec<_>>(),
        "done": status.done,
        "archived": status.archived,
        "total": status.total,
        "config": status.config.as_ref().map(config_json),
    })
}

fn queues_table(queues: &[StageQueue]) -> Table {
    table_of(
        &["stage", "waiting", "claimed", "oldest visible"],
        queues,
        |queue| {
            vec![
                stage_name(queue.stage),
                queue.waiting.to_string(),
                queue.claimed.to_string(),
                if queue.oldest_visible_age_ms == 0 {
                    "-".to_owned()
                } else {
                    human_ms(queue.oldest_visible_age_ms)
                },
            ]
        },
    )
}

fn counts_table(status: &SessionsStatus) -> Table {
    let mut rows = table(&["sessions", "count"]);
    rows.add_row(vec![
        "done, not acknowledged".to_owned(),
        status.done.to_string(),
    ]);
    rows.add_row(vec!["archived".to_owned(), status.archived.to_string()]);
    rows.add_row(vec![
        "total".to_owned(),
        match &status.config {
            Some(config) => format!("{} (at most {})", status.total, config.sessions_max),
            None => status.total.to_string(),
        },
    ]);
    rows
}

fn print_status(out: &Output, status: &SessionsStatus) {
    out.emit(&status_json(status), || {
        say!("{}", queues_table(&status.queues));
        say!("{}", counts_table(status));
        if let Some(config) = &status.config {
            say!("{}", config_table(config, None));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctl::testing::parse_ctl;

    fn parse(args: &[&str]) -> SessionCommand {
        crate::ctl::testing::parse("session", args)
    }

    fn parse_error(args: &[&str]) -> String {
        crate::ctl::testing::parse_error::<SessionCommand>("session", args)
    }

    const DEFAULTS: SessionConfig = SessionConfig {
        stage_timeout_ms: 3_600_000,
        max_tests: 10,
        test_retry_ms: 2_000,
        done_retention_ms: 86_400_000,
        archive_retention_ms: 604_800_000,
        sessions_max: 100_000,
    };

    fn challenge(name: &str) -> SessionChallenge {
        SessionChallenge {
            name: name.to_owned(),
            token: format!("tok-{name}"),
            key_authorization: format!("tok-{name}.thumb"),
            challtime_ms: 1_000,
            ..SessionChallenge::default()
        }
    }

    fn session() -> Session {
        Session {
            id: 42,
            created_ms: 1_000,
            live: true,
            csr: vec![0x30, 0x01, 0x02],
            names: vec!["a.example".to_owned(), "b.example".to_owned()],
            stage: Stage::MakeChallenge.into(),
            stage_entered_ms: 1_000,
            ..Session::default()
        }
    }

    #[test]
    fn every_session_subcommand_parses() {
        for args in [
            &["create", "--csr", "req.pem"][..],
            &[
                "create",
                "--csr",
                "req.der",
                "--name",
                "a.example",
                "--name",
                "b.example",
                "--request-key",
                "k-1",
            ],
            &["get", "7"],
            &["wait", "7"],
            &["wait", "7", "--for", "any", "--timeout", "10"],
            &["cert", "7"],
            &["ack", "7"],
            &["kill", "7", "--reason", "operator says no"],
            &["list"],
            &["list", "--stage", "done", "--limit", "5", "--after", "3"],
            &["status"],
            &["config"],
            &["config", "set", "--max-tests", "3"],
            &[
                "config",
                "set",
                "--stage-timeout-ms",
                "60000",
                "--max-tests",
                "3",
                "--test-retry-ms",
                "500",
                "--done-retention-ms",
                "5000",
                "--archive-retention-ms",
                "0",
                "--sessions-max",
                "10",
            ],
        ] {
            parse(args);
        }
    }

    #[test]
    fn create_takes_repeated_names_and_an_optional_key() {
        let SessionCommand::Create {
            csr,
            names,
            request_key,
        } = parse(&[
            "create",
            "--csr",
            "r.pem",
            "--name",
            "a.example",
            "--name",
            "b.example",
        ])
        else {
            panic!("create");
        };
        assert_eq!(csr, PathBuf::from("r.pem"));
        assert_eq!(names, ["a.example", "b.example"]);
        assert_eq!(request_key, None);
        let SessionCommand::Create { request_key, .. } =
            parse(&["create", "--csr", "r.pem", "--request-key", "k"])
        else {
            panic!("create");
        };
        assert_eq!(request_key.as_deref(), Some("k"));
        let error = parse_error(&["create"]);
        assert!(error.contains("--csr"), "{error}");
    }

    #[test]
    fn wait_defaults_to_done_within_five_minutes() {
        let SessionCommand::Wait { id, until, timeout } = parse(&["wait", "9"]) else {
            panic!("wait");
        };
        assert_eq!((id, until, timeout), (9, WaitFor::Done, 300));
        let SessionCommand::Wait { until, timeout, .. } =
            parse(&["wait", "9", "--for", "any", "--timeout", "5"])
        else {
            panic!("wait");
        };
        assert_eq!((until, timeout), (WaitFor::Any, 5));
        let error = parse_error(&["wait", "9", "--for", "ever"]);
        assert!(error.contains("--for"), "{error}");
        let error = parse_error(&["wait", "nine"]);
        assert!(error.contains("<ID>"), "{error}");
    }

    #[test]
    fn kill_needs_a_reason() {
        let error = parse_error(&["kill", "3"]);
        assert!(error.contains("--reason"), "{error}");
        let SessionCommand::Kill { id, reason } = parse(&["kill", "3", "--reason", "why"]) else {
            panic!("kill");
        };
        assert_eq!((id, reason.as_str()), (3, "why"));
    }

    #[test]
    fn stages_parse_in_every_spelling() {
        for (text, stage) in [
            ("make-challenge", Stage::MakeChallenge),
            ("MAKE_CHALLENGE", Stage::MakeChallenge),
            ("makechallenge", Stage::MakeChallenge),
            ("Test-Challenge", Stage::TestChallenge),
            ("issue", Stage::Issue),
            ("DONE", Stage::Done),
            ("failed", Stage::Failed),
        ] {
            assert_eq!(parse_stage(text), Ok(stage), "{text}");
        }
        for text in ["", "unspecified", "stage_unspecified", "finished"] {
            let error = parse_stage(text).expect_err(text);
            assert!(error.contains("make-challenge"), "{error}");
        }
        let SessionCommand::List { stage, .. } = parse(&["list", "--stage", "test_challenge"])
        else {
            panic!("list");
        };
        assert_eq!(stage, Some(Stage::TestChallenge));
        let error = parse_error(&["list", "--stage", "nowhere"]);
        assert!(error.contains("not a stage"), "{error}");
    }

    #[test]
    fn session_is_a_ctl_subcommand() {
        let args = parse_ctl(&["session", "get", "5", "--json"]);
        assert!(args.json);
        assert!(matches!(
            args.command,
            super::super::CtlCommand::Session {
                command: SessionCommand::Get { id: 5 }
            }
        ));
    }

    #[test]
    fn session_json_has_stable_fields_and_nulls_for_absent_values() {
        let mut live = session();
        live.challenges = vec![challenge("a.example")];
        let document = session_json(&live);
        assert_eq!(document["id"], 42);
        assert_eq!(document["stage"], "MAKE_CHALLENGE");
        assert_eq!(document["live"], true);
        assert_eq!(document["kill_reason"], Value::Null);
        assert_eq!(document["failure"], Value::Null);
        assert_eq!(document["note"], Value::Null);
        assert_eq!(document["names"], json!(["a.example", "b.example"]));
        assert_eq!(document["claim"], Value::Null);
        assert_eq!(document["archived_at_ms"], Value::Null);
        assert_eq!(document["certificate"], Value::Null);
        assert_eq!(document["request_key"], Value::Null);
        assert_eq!(document["csr"], "MAEC");
        assert_eq!(document["challenges"][0]["token"], "tok-a.example");
        assert_eq!(document["challenges"][0]["last_error"], Value::Null);
        assert_eq!(document["challenges"][0]["times_tested"], 0);

        let claimed = Session {
            claimant: "worker-1".to_owned(),
            claim_token: 77,
            claim_deadline_ms: 9_000,
            archived_at_ms: 5,
            ..live
        };
        let document = session_json(&claimed);
        assert_eq!(
            document["claim"],
            json!({ "claimant": "worker-1", "token": 77, "deadline_ms": 9_000 })
        );
        assert_eq!(document["archived_at_ms"], 5);
    }

    #[test]
    fn the_session_tables_show_state_claim_and_challenges() {
        let mut tested = challenge("a.example");
        tested.times_tested = 2;
        tested.last_error = "connection refused".to_owned();
        let mut done = challenge("b.example");
        done.satisfied = true;
        let claimed = Session {
            stage: Stage::TestChallenge.into(),
            challenges: vec![tested, done],
            claimant: "worker-1".to_owned(),
            claim_token: 77,
            claim_deadline_ms: 11_000,
            ..session()
        };
        let text = session_table(&claimed, Some(6_000)).to_string();
        assert!(
            text.contains("TEST_CHALLENGE (entered 5.0 s ago)"),
            "{text}"
        );
        assert!(
            text.contains("worker-1 (token 77, expires in 5.0 s)"),
            "{text}"
        );
        assert!(text.contains("a.example, b.example"), "{text}");
        assert!(!text.contains("note"), "no note row without a note: {text}");
        let released = Session {
            note: "upstream order o-17".to_owned(),
            ..claimed.clone()
        };
        let with_note = session_table(&released, Some(6_000)).to_string();
        assert!(
            with_note
                .lines()
                .any(|line| line.contains("note") && line.contains("upstream order o-17")),
            "{with_note}"
        );
        assert_eq!(session_json(&released)["note"], "upstream order o-17");
        let text = challenges_table(&claimed.challenges, Some(6_000)).to_string();
        let a = text
            .lines()
            .find(|line| line.contains("tok-a.example"))
            .expect("a row");
        assert!(
            a.contains("no") && a.contains('2') && a.contains("connection refused"),
            "{a}"
        );
        let b = text
            .lines()
            .find(|line| line.contains("tok-b.example"))
            .expect("b row");
        assert!(b.contains("yes"), "{b}");
        let list = sessions_table(std::slice::from_ref(&claimed), Some(6_000)).to_string();
        assert!(list.contains("1/2 satisfied"), "{list}");

        let killed = Session {
            live: false,
            kill_reason: "killed by an operator: no".to_owned(),
            ..session()
        };
        let text = session_table(&killed, None).to_string();
        assert!(
            text.contains("no, killed: killed by an operator: no"),
            "{text}"
        );
    }

    #[test]
    fn state_lines_say_where_a_session_is() {
        let mut making = session();
        assert_eq!(state_line(&making), "MAKE_CHALLENGE");
        making.claimant = "w".to_owned();
        assert_eq!(state_line(&making), "MAKE_CHALLENGE, claimed by w");
        let testing = Session {
            stage: Stage::TestChallenge.into(),
            challenges: vec![challenge("a.example"), challenge("b.example")],
            ..session()
        };
        assert_eq!(
            state_line(&testing),
            "TEST_CHALLENGE (0 of 2 challenges satisfied)"
        );
        let failed = Session {
            stage: Stage::Failed.into(),
            failure: "CA said no".to_owned(),
            ..session()
        };
        assert_eq!(state_line(&failed), "FAILED: CA said no");
        assert!(finished(&failed));
        let killed = Session {
            live: false,
            kill_reason: "it sat in stage issue too long".to_owned(),
            stage: Stage::Issue.into(),
            ..session()
        };
        assert_eq!(
            state_line(&killed),
            "killed in ISSUE: it sat in stage issue too long"
        );
        assert!(finished(&killed));
        let done = Session {
            stage: Stage::Done.into(),
            ..session()
        };
        assert_eq!(state_line(&done), "DONE, certificate ready");
        assert!(finished(&done));
        assert!(!finished(&testing));
        assert_eq!(stage_name(99), "STAGE_99");
    }

    #[test]
    fn changes_are_described_one_line_each_and_claims_are_not_changes() {
        let before = session();
        let claimed = Session {
            claimant: "w".to_owned(),
            claim_token: 3,
            claim_deadline_ms: 10,
            ..session()
        };
        assert!(same_progress(&before, &claimed));
        assert!(changes(&before, &claimed).is_empty());

        let made = Session {
            stage: Stage::TestChallenge.into(),
            challenges: vec![challenge("a.example"), challenge("b.example")],
            ..session()
        };
        assert_eq!(
            changes(&before, &made),
            [
                "MAKE_CHALLENGE -> TEST_CHALLENGE",
                "challenges made for a.example, b.example"
            ]
        );

        let mut retest = made.clone();
        retest.challenges[0].satisfied = true;
        retest.challenges[1].times_tested = 1;
        retest.challenges[1].last_error = "404".to_owned();
        assert_eq!(
            changes(&made, &retest),
            [
                "challenge a.example satisfied",
                "challenge b.example not satisfied yet (tested 1 time(s)): 404"
            ]
        );

        let mut killed = retest.clone();
        killed.challenges[1].failed = true;
        killed.challenges[1].times_tested = 2;
        killed.live = false;
        killed.kill_reason = "the challenge for b.example failed 2 tests".to_owned();
        killed.archived_at_ms = 50;
        assert_eq!(
            changes(&retest, &killed),
            [
                "challenge b.example failed after 2 test(s): 404",
                "killed: the challenge for b.example failed 2 tests",
                "archived"
            ]
        );

        let failed = Session {
            stage: Stage::Failed.into(),
            failure: "bad CSR key".to_owned(),
            archived_at_ms: 60,
            ..session()
        };
        assert_eq!(
            changes(&before, &failed),
            ["MAKE_CHALLENGE -> FAILED: bad CSR key", "archived"]
        );

        let done = Session {
            stage: Stage::Done.into(),
            certificate: "PEM".to_owned(),
            ..session()
        };
        let acked = Session {
            acknowledged: true,
            archived_at_ms: 70,
            ..done.clone()
        };
        assert_eq!(
            changes(&done, &acked),
            ["certificate acknowledged", "archived"]
        );
        let other = Session {
            stage_entered_ms: 2_000,
            ..session()
        };
        assert_eq!(changes(&before, &other), ["updated: MAKE_CHALLENGE"]);
    }

    #[test]
    fn only_a_done_session_has_a_certificate() {
        let pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let done = Session {
            stage: Stage::Done.into(),
            certificate: pem.to_owned(),
            ..session()
        };
        assert_eq!(certificate(&done), Ok(pem));
        let error = certificate(&session()).expect_err("not done");
        assert_eq!(error, "session 42 has no certificate: it is MAKE_CHALLENGE");
        let empty = Session {
            certificate: String::new(),
            ..done
        };
        assert!(certificate(&empty).is_err());
        let table = session_table(
            &Session {
                stage: Stage::Done.into(),
                certificate: format!("{pem}{pem}"),
                ..session()
            },
            None,
        )
        .to_string();
        assert!(
            table.contains("2 PEM certificate(s): `certus ctl session cert 42`"),
            "{table}"
        );
    }

    #[test]
    fn a_csr_is_read_from_pem_or_der_and_checked() {
        let key = rcgen::KeyPair::generate().expect("key");
        let params =
            rcgen::CertificateParams::new(vec!["a.example.com".to_owned()]).expect("params");
        let csr = params.serialize_request(&key).expect("csr");
        let der = csr.der().to_vec();
        assert_eq!(csr_der(&der), Ok(der.clone()));
        let pem = format!("# comment\n{}", csr.pem().expect("pem"));
        assert_eq!(csr_der(pem.as_bytes()), Ok(der.clone()));
        let mut corrupt = der.clone();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        for bytes in [&b""[..], b"hello", &corrupt] {
            assert!(csr_der(bytes).is_err(), "{bytes:?} was accepted");
        }
    }

    #[test]
    fn status_shows_queues_counts_and_config() {
        let status = SessionsStatus {
            config: Some(DEFAULTS),
            queues: vec![
                StageQueue {
                    stage: Stage::MakeChallenge.into(),
                    waiting: 3,
                    claimed: 1,
                    oldest_visible_age_ms: 2_500,
                },
                StageQueue {
                    stage: Stage::Issue.into(),
                    waiting: 0,
                    claimed: 0,
                    oldest_visible_age_ms: 0,
                },
            ],
            done: 4,
            archived: 5,
            total: 13,
        };
        let document = status_json(&status);
        assert_eq!(
            document["queues"][0],
            json!({
                "stage": "MAKE_CHALLENGE",
                "waiting": 3,
                "claimed": 1,
                "oldest_visible_age_ms": 2_500,
            })
        );
        assert_eq!(document["done"], 4);
        assert_eq!(document["archived"], 5);
        assert_eq!(document["total"], 13);
        assert_eq!(document["config"]["max_tests"], 10);
        let queues = queues_table(&status.queues).to_string();
        let making = queues
            .lines()
            .find(|line| line.contains("MAKE_CHALLENGE"))
            .expect("a row");
        assert!(making.contains("2.5 s"), "{making}");
        let counts = counts_table(&status).to_string();
        assert!(counts.contains("13 (at most 100000)"), "{counts}");
    }
}
