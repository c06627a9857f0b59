//! `pipeline worker`: a worker on a `Work` stream that runs a command for each transaction it
//! is given and completes the transaction with what the command answered.
//!
//! The command (run directly, not through a shell) gets the transaction's state on stdin and
//! its identity in the environment ([`environment`]); how it ended decides the completion
//! ([`completion`]). Up to `--credit` commands run at once: the stream's credit, one granted back
//! as each command ends. A broken stream is opened again (on another node when the first is
//! down) while the commands go on; the completions whose answer was lost are sent again on the
//! new stream (a completion with its claim token is safe to repeat), and claims pushed on the
//! broken stream but never received are left to the reaper. Ctrl-C (or SIGTERM) stops taking
//! work and waits for the running commands, whose transactions are completed as usual; claims
//! arriving meanwhile are handed back to their queue. A second Ctrl-C stops at once: the
//! running commands are killed and their transactions left to the reaper.

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::Duration;

use certus_client::{
    Client, ClientError, CompleteTransactionRequest, QueueType, RequeueRequest, Transaction,
    TxStatus, WorkStepResult, WorkStream, work_step_result,
};
use certus_proto::v1::work_step;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::args::WorkerArgs;
use super::render::status_text;
use crate::ctl::Output;
use crate::limits::{
    PIPELINE_WORKER_REOPENS_MAX, PIPELINE_WORKER_STDERR_TAIL_BYTES_MAX,
    PIPELINE_WORKER_STDOUT_BYTES_MAX,
};

/// The pause before the first attempt to open a broken stream again; it doubles with each
/// failed attempt, up to [`REOPEN_PAUSE_LONGEST`].
const REOPEN_PAUSE_FIRST: Duration = Duration::from_millis(100);
const REOPEN_PAUSE_LONGEST: Duration = Duration::from_secs(5);
/// The key a failed command's details are added under, in a state that is a JSON object.
const ERROR_KEY: &str = "worker_error";

/// How a command ended, as far as its completion is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ended {
    /// It could not be started.
    NotStarted(String),
    /// It exited with `code`, or was killed by `signal` (one of the two is set).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        /// What it wrote on stdout, unless it wrote more than a state may hold.
        stdout: Option<Vec<u8>>,
        /// The last bytes it wrote on stderr.
        stderr_tail: String,
    },
}

/// What a transaction is completed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Completion {
    pub(super) status: TxStatus,
    /// The new state; `None` keeps the current one.
    pub(super) state: Option<String>,
}

/// The completion of a transaction whose state was `state` after its command `ended`:
///
/// - exit status 0 and JSON on stdout: success, the output (without surrounding whitespace)
///   its new state;
/// - exit status 0 and nothing on stdout (or only whitespace): success, the state unchanged;
/// - exit status 0 and anything else on stdout (or more than a state may hold): internal-error;
/// - another exit status: failed;
/// - killed by a signal, or not started: internal-error.
///
/// On a failure the state, when it is a JSON object, gets a `worker_error` member with what
/// happened (`exit_code`, `signal`, `stderr` — its tail — or `error`); any other state is kept
/// as it is.
pub(super) fn completion(ended: &Ended, state: &str) -> Completion {
    let (status, error) = match ended {
        Ended::NotStarted(error) => (
            TxStatus::InternalError,
            json!({ "error": format!("cannot run the command: {error}") }),
        ),
        Ended::Exited {
            code: Some(0),
            stdout: Some(stdout),
            stderr_tail,
            ..
        } => {
            let text = String::from_utf8_lossy(stdout);
            let text = text.trim();
            if text.is_empty() {
                return Completion {
                    status: TxStatus::Success,
                    state: None,
                };
            }
            match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                Ok(_) => {
                    return Completion {
                        status: TxStatus::Success,
                        state: Some(text.to_owned()),
                    };
                }
                Err(error) => (
                    TxStatus::InternalError,
                    json!({
                        "exit_code": 0,
                        "error": format!("stdout is not JSON: {error}"),
                        "stderr": stderr_tail,
                    }),
                ),
            }
        }
        Ended::Exited {
            code: Some(0),
            stdout: None,
            stderr_tail,
            ..
        } => (
            TxStatus::InternalError,
            json!({
                "exit_code": 0,
                "error": format!(
                    "stdout is longer than a state may be ({PIPELINE_WORKER_STDOUT_BYTES_MAX} bytes)"
                ),
                "stderr": stderr_tail,
            }),
        ),
        Ended::Exited {
            code: Some(code),
            stderr_tail,
            ..
        } => (
            TxStatus::Failed,
            json!({ "exit_code": code, "stderr": stderr_tail }),
        ),
        Ended::Exited {
            code: None,
            signal,
            stderr_tail,
            ..
        } => (
            TxStatus::InternalError,
            json!({ "signal": signal, "stderr": stderr_tail }),
        ),
    };
    Completion {
        status,
        state: with_error(state, &error),
    }
}

/// `state` with `error` added as its `worker_error` member, when it is a JSON object and the
/// result is not too long for a state; `None` (keep the state) otherwise. The state's own text
/// is kept byte for byte (no number is reformatted): the member is added before its closing
/// brace, after any `worker_error` it had, which it overrides.
fn with_error(state: &str, error: &serde_json::Value) -> Option<String> {
    let object = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(state).ok()?;
    let body = state.trim_end().strip_suffix('}')?.trim_end();
    let separator = if object.is_empty() { "" } else { "," };
    let merged = format!("{body}{separator}\"{ERROR_KEY}\":{error}}}");
    (merged.len() <= PIPELINE_WORKER_STDOUT_BYTES_MAX).then_some(merged)
}

/// The environment a transaction's command runs with, beside the worker's own.
pub(super) fn environment(tx: &Transaction, worker: &str) -> Vec<(&'static str, String)> {
    let mut variables = vec![
        ("CERTUS_TRANSACTION_ID", tx.id.to_string()),
        ("CERTUS_CLAIM_TOKEN", tx.claim_token.to_string()),
        ("CERTUS_NODE_GROUP", tx.node_group.clone()),
        ("CERTUS_WORKER", worker.to_owned()),
        ("CERTUS_ATTEMPT", tx.attempts.to_string()),
    ];
    if !tx.pipeline.is_empty() {
        variables.push(("CERTUS_PIPELINE", tx.pipeline.clone()));
    }
    if !tx.event.is_empty() {
        variables.push(("CERTUS_EVENT", tx.event.clone()));
    }
    variables
}

/// Runs `command` for `tx`: its state on stdin, [`environment`] set; answers how it ended.
async fn run_command(command: &[String], tx: &Transaction, worker: &str, groups: &Groups) -> Ended {
    let (program, arguments) = command
        .split_first()
        .expect("the parser requires a command");
    // In a process group of its own, so that Ctrl-C in the terminal reaches the worker alone
    // (which lets the command finish) and a stop can end the command with its children.
    let spawned = tokio::process::Command::new(program)
        .args(arguments)
        .envs(environment(tx, worker))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Ended::NotStarted(format!("{program}: {error}")),
    };
    let _group = child.id().map(|pid| ProcessGroup::new(pid, groups));
    let (mut stdin, stdout, stderr) = (
        child.stdin.take().expect("piped"),
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let state = tx.state.clone();
    let feed = async move {
        // A command that does not read its stdin may close it first: not an error.
        let _ = stdin.write_all(state.as_bytes()).await;
        drop(stdin);
    };
    let read_stdout = async {
        let mut stdout = stdout.take(PIPELINE_WORKER_STDOUT_BYTES_MAX as u64 + 1);
        let mut bytes = Vec::new();
        let read = stdout.read_to_end(&mut bytes).await;
        let fits = read.is_ok() && bytes.len() <= PIPELINE_WORKER_STDOUT_BYTES_MAX;
        if !fits {
            // Its output will not be used, and nothing reads the rest: stop it.
            let _ = child.start_kill();
        }
        fits.then_some(bytes)
    };
    // All three at once: a command blocked writing one pipe must not wait for another.
    let ((), stdout, stderr_tail) = tokio::join!(feed, read_stdout, tail(stderr));
    let status = child.wait().await;
    match status {
        Ok(status) => Ended::Exited {
            code: status.code(),
            signal: std::os::unix::process::ExitStatusExt::signal(&status),
            stdout,
            stderr_tail,
        },
        Err(error) => Ended::NotStarted(format!("{program}: waiting for it: {error}")),
    }
}

/// The process groups of the commands running, by their leader's pid.
type Groups = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<u32>>>;

/// A running command's process group, listed in [`Groups`] while it runs.
struct ProcessGroup {
    pid: u32,
    groups: Groups,
}

impl ProcessGroup {
    fn new(pid: u32, groups: &Groups) -> ProcessGroup {
        groups.lock().expect("not poisoned").insert(pid);
        ProcessGroup {
            pid,
            groups: std::sync::Arc::clone(groups),
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.groups.lock().expect("not poisoned").remove(&self.pid);
    }
}

/// Ends every command still running, and their children: `kill -KILL -- -PGID` for each group
/// (the standard `kill` utility; this crate has no unsafe code to call kill(2) itself).
fn kill_groups(groups: &Groups) {
    let groups: Vec<u32> = groups
        .lock()
        .expect("not poisoned")
        .iter()
        .copied()
        .collect();
    for pid in groups {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
    }
}

/// The last [`PIPELINE_WORKER_STDERR_TAIL_BYTES_MAX`] bytes `reader` gives before its end, as
/// text.
async fn tail(mut reader: impl AsyncRead + Unpin) -> String {
    let mut kept: Vec<u8> = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(read) = reader.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        kept.extend_from_slice(&buffer[..read]);
        if kept.len() > PIPELINE_WORKER_STDERR_TAIL_BYTES_MAX {
            kept.drain(..kept.len() - PIPELINE_WORKER_STDERR_TAIL_BYTES_MAX);
        }
    }
    String::from_utf8_lossy(&kept).trim_end().to_owned()
}

/// A step sent on the stream and not yet answered; sent again on a new stream if this one
/// breaks first (both are safe to repeat with their claim token).
#[derive(Debug, Clone)]
enum Step {
    Complete(CompleteTransactionRequest),
    /// A claim that arrived after Ctrl-C, handed back.
    Requeue(RequeueRequest),
}

impl Step {
    fn kind(&self) -> work_step::Kind {
        match self {
            Step::Complete(request) => work_step::Kind::Complete(request.clone()),
            Step::Requeue(request) => work_step::Kind::Requeue(request.clone()),
        }
    }

    fn transaction_id(&self) -> u64 {
        match self {
            Step::Complete(request) => request.transaction_id,
            Step::Requeue(request) => request.transaction_id,
        }
    }
}

/// What a command's task hands back: its transaction's completion, how it ended, how long it
/// ran.
type Finished = (CompleteTransactionRequest, Ended, Duration);

/// What happened on the stream.
enum Event {
    Claim(Box<Transaction>),
    Answered(WorkStepResult),
}

/// The next claim, or the oldest step's result when one is due (a claim already received
/// comes first); `Ok(None)` when the node ended the stream. Both calls keep what they read for
/// the other, so dropping this future loses nothing.
async fn next_event(
    stream: &mut WorkStream,
    oldest: Option<u64>,
) -> Result<Option<Event>, ClientError> {
    let Some(step_id) = oldest else {
        return Ok(stream
            .next_claim()
            .await?
            .map(|tx| Event::Claim(Box::new(tx))));
    };
    if let Ok(claim) = tokio::time::timeout(Duration::ZERO, stream.next_claim()).await {
        return Ok(claim?.map(|tx| Event::Claim(Box::new(tx))));
    }
    Ok(Some(Event::Answered(stream.step_result(step_id).await?)))
}

/// The worker's state across streams.
struct Worker<'a> {
    args: &'a WorkerArgs,
    out: &'a Output,
    running: JoinSet<Finished>,
    /// The process groups of the commands running.
    groups: Groups,
    /// Steps sent on the current stream, oldest first, then (after it broke) those to send on
    /// the next.
    in_flight: VecDeque<(u64, Step)>,
    unsent: VecDeque<Step>,
    /// Ctrl-C was pressed once: no new work, finish what runs.
    stopping: bool,
}

/// Why a stream was left.
enum Left {
    /// Everything is finished (after Ctrl-C) or killed (after a second one).
    Done,
    Broken(String),
}

/// `pipeline worker`.
pub(super) async fn run(client: &Client, out: &Output, args: WorkerArgs) -> Result<(), String> {
    let what = "pipeline worker";
    let signals = |kind: SignalKind| {
        signal(kind).map_err(|error| format!("{what}: cannot wait for signals: {error}"))
    };
    let mut interrupt = signals(SignalKind::interrupt())?;
    let mut terminate = signals(SignalKind::terminate())?;
    eprintln!(
        "{what}: {} takes transactions of node group {:?}, up to {} at once, for {:?} \
         (Ctrl-C to stop)",
        args.worker, args.node_group, args.credit, args.command
    );
    let mut worker = Worker {
        args: &args,
        out,
        running: JoinSet::new(),
        groups: Groups::default(),
        in_flight: VecDeque::new(),
        unsent: VecDeque::new(),
        stopping: false,
    };
    let mut failures = 0u32;
    loop {
        let running = u32::try_from(worker.running.len()).expect("at most the credit");
        let credit = if worker.stopping {
            0
        } else {
            args.credit.saturating_sub(running)
        };
        let opened = client
            .work(args.node_group.as_str(), args.worker.as_str(), credit)
            .await;
        let ended = match opened {
            Ok(stream) => {
                worker
                    .serve(stream, &mut interrupt, &mut terminate, &mut failures)
                    .await
            }
            Err(error) => Left::Broken(format!("opening the stream: {error}")),
        };
        let Left::Broken(error) = ended else {
            return Ok(());
        };
        failures += 1;
        if failures > PIPELINE_WORKER_REOPENS_MAX {
            kill_groups(&worker.groups);
            return Err(format!(
                "{what}: {error} ({PIPELINE_WORKER_REOPENS_MAX} reopens failed; {} commands \
                 stopped, their transactions left to the reaper)",
                worker.running.len()
            ));
        }
        let pause = REOPEN_PAUSE_FIRST
            .saturating_mul(1 << (failures - 1).min(16))
            .min(REOPEN_PAUSE_LONGEST);
        eprintln!("{what}: {error}; opening a new stream in {pause:?}");
        // The answers of the steps in flight were lost with the stream: send them again.
        let lost = std::mem::take(&mut worker.in_flight);
        worker.unsent.extend(lost.into_iter().map(|(_, step)| step));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = interrupt.recv() => if worker.interrupted() { return Ok(()) },
            _ = terminate.recv() => if worker.interrupted() { return Ok(()) },
        }
    }
}

impl Worker<'_> {
    /// Takes claims, runs their commands and completes them on `stream` until it breaks, or
    /// the worker is done.
    async fn serve(
        &mut self,
        mut stream: WorkStream,
        interrupt: &mut Signal,
        terminate: &mut Signal,
        failures: &mut u32,
    ) -> Left {
        while let Some(step) = self.unsent.pop_front() {
            if let Err(error) = self.send(&mut stream, step).await {
                return Left::Broken(error);
            }
        }
        loop {
            if self.stopping && self.running.is_empty() && self.in_flight.is_empty() {
                return Left::Done;
            }
            let oldest = self.in_flight.front().map(|(step_id, _)| *step_id);
            tokio::select! {
                _ = interrupt.recv() => if self.interrupted() { return Left::Done },
                _ = terminate.recv() => if self.interrupted() { return Left::Done },
                Some(finished) = self.running.join_next(), if !self.running.is_empty() => {
                    let (request, ended, took) = match finished {
                        Ok(finished) => finished,
                        Err(error) => return Left::Broken(format!("a command's task: {error}")),
                    };
                    self.report(&request, &ended, took);
                    if let Err(error) = self.send(&mut stream, Step::Complete(request)).await {
                        return Left::Broken(error);
                    }
                    if !self.stopping
                        && let Err(error) = stream.grant(1).await
                    {
                        return Left::Broken(error.to_string());
                    }
                }
                event = next_event(&mut stream, oldest) => match event {
                    Ok(Some(Event::Claim(tx))) => {
                        *failures = 0;
                        if let Err(error) = self.claimed(&mut stream, *tx).await {
                            return Left::Broken(error);
                        }
                    }
                    Ok(Some(Event::Answered(result))) => {
                        *failures = 0;
                        self.answered(result);
                    }
                    Ok(None) => return Left::Broken("the node ended the stream".to_owned()),
                    Err(error) => return Left::Broken(error.to_string()),
                },
            }
        }
    }

    /// Ctrl-C (or SIGTERM): the first stops taking work, the second stops now. Answers whether
    /// to stop now.
    fn interrupted(&mut self) -> bool {
        if self.stopping || self.running.is_empty() && self.in_flight.is_empty() {
            if !self.running.is_empty() {
                eprintln!(
                    "pipeline worker: stopping now: {} commands killed, their transactions left \
                     to the reaper",
                    self.running.len()
                );
            }
            kill_groups(&self.groups);
            self.running.abort_all();
            return true;
        }
        self.stopping = true;
        eprintln!(
            "pipeline worker: finishing {} running commands, then stopping (Ctrl-C again to stop \
             now)",
            self.running.len()
        );
        false
    }

    /// Starts `tx`'s command, or after Ctrl-C hands it back to its queue.
    async fn claimed(&mut self, stream: &mut WorkStream, tx: Transaction) -> Result<(), String> {
        if self.stopping {
            let queue = match QueueType::try_from(tx.queue) {
                Ok(queue) if queue != QueueType::Unspecified => queue,
                _ => QueueType::In,
            };
            let request = RequeueRequest {
                transaction_id: tx.id,
                claim_token: tx.claim_token,
                route: None,
                queue: queue.into(),
                state: String::new(),
                event: tx.event.clone(),
            };
            return self.send(stream, Step::Requeue(request)).await;
        }
        let command = self.args.command.clone();
        let worker = self.args.worker.clone();
        let groups = std::sync::Arc::clone(&self.groups);
        self.running.spawn(async move {
            let began = Instant::now();
            let ended = run_command(&command, &tx, &worker, &groups).await;
            let Completion { status, state } = completion(&ended, &tx.state);
            let request = CompleteTransactionRequest {
                transaction_id: tx.id,
                claim_token: tx.claim_token,
                status: status.into(),
                state: state.unwrap_or_default(),
            };
            (request, ended, began.elapsed())
        });
        Ok(())
    }

    async fn send(&mut self, stream: &mut WorkStream, step: Step) -> Result<(), String> {
        match stream.send_step(step.kind()).await {
            Ok(step_id) => {
                self.in_flight.push_back((step_id, step));
                Ok(())
            }
            Err(error) => {
                self.unsent.push_back(step);
                Err(error.to_string())
            }
        }
    }

    /// The result of the oldest step in flight.
    fn answered(&mut self, result: WorkStepResult) {
        let (step_id, step) = self.in_flight.pop_front().expect("a step in flight");
        assert_eq!(step_id, result.step_id, "results are taken oldest first");
        let id = step.transaction_id();
        match (result.result, &step) {
            (Some(work_step_result::Result::Error(error)), _) => eprintln!(
                "pipeline worker: transaction {id}: refused ({}): {}",
                error.reason, error.message
            ),
            (Some(work_step_result::Result::Requeue(_)), Step::Requeue(_)) => {
                eprintln!("pipeline worker: transaction {id} handed back to its queue");
            }
            (Some(work_step_result::Result::Complete(_)), Step::Complete(_)) => {}
            (other, _) => eprintln!("pipeline worker: transaction {id}: answered {other:?}"),
        }
    }

    /// One line per finished command: on stdout (a JSON line with --json), and the stderr
    /// tail of a failed one on stderr.
    fn report(&self, request: &CompleteTransactionRequest, ended: &Ended, took: Duration) {
        let status = status_text(request.status);
        let (code, signal, detail) = match ended {
            Ended::NotStarted(error) => (None, None, Some(error.clone())),
            Ended::Exited {
                code,
                signal,
                stderr_tail,
                ..
            } => (
                *code,
                *signal,
                (request.status != i32::from(TxStatus::Success) && !stderr_tail.is_empty())
                    .then(|| stderr_tail.clone()),
            ),
        };
        let ms = took.as_millis();
        if self.out.json {
            let line = json!({
                "transaction_id": request.transaction_id,
                "status": status,
                "exit_code": code,
                "signal": signal,
                "ms": ms,
            });
            say!("{line}");
        } else {
            let how = match (code, signal) {
                (Some(code), _) => format!("exit status {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => "not started".to_owned(),
            };
            say!(
                "transaction {}: {status} ({how}, {ms} ms)",
                request.transaction_id
            );
        }
        if let Some(detail) = detail {
            eprintln!(
                "pipeline worker: transaction {}: {detail}",
                request.transaction_id
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> Ended {
        Ended::Exited {
            code: Some(code),
            signal: None,
            stdout: Some(stdout.as_bytes().to_vec()),
            stderr_tail: stderr.to_owned(),
        }
    }

    #[test]
    fn a_command_that_succeeds_sets_the_state_it_printed() {
        let state = r#"{"amount":12345678901234567890}"#;
        assert_eq!(
            completion(&exited(0, "{\"paid\": true}\n", "note"), state),
            Completion {
                status: TxStatus::Success,
                state: Some("{\"paid\": true}".to_owned()),
            },
            "stdout as written, without the final newline"
        );
        assert_eq!(
            completion(&exited(0, " \n", ""), state),
            Completion {
                status: TxStatus::Success,
                state: None,
            },
            "no output keeps the state"
        );
        assert_eq!(
            completion(&exited(0, "[1,2]", ""), state).state.as_deref(),
            Some("[1,2]")
        );
    }

    #[test]
    fn a_command_that_fails_leaves_its_stderr_in_the_state() {
        let state = r#"{"amount":12345678901234567890}"#;
        let failed = completion(&exited(3, "{}", "card declined"), state);
        assert_eq!(failed.status, TxStatus::Failed);
        assert_eq!(
            failed.state.as_deref(),
            Some(
                r#"{"amount":12345678901234567890,"worker_error":{"exit_code":3,"stderr":"card declined"}}"#
            ),
            "the state's own text is kept, big number and all"
        );

        let not_json = completion(&exited(0, "paid", ""), "{}");
        assert_eq!(not_json.status, TxStatus::InternalError);
        let state: serde_json::Value =
            serde_json::from_str(not_json.state.as_deref().expect("a state")).expect("JSON");
        let error = state["worker_error"]["error"].as_str().expect("an error");
        assert!(error.starts_with("stdout is not JSON"), "{error}");

        let killed = Ended::Exited {
            code: None,
            signal: Some(9),
            stdout: Some(Vec::new()),
            stderr_tail: String::new(),
        };
        let killed = completion(&killed, r#"{"a":1}"#);
        assert_eq!(killed.status, TxStatus::InternalError);
        assert_eq!(
            killed.state.as_deref(),
            Some(r#"{"a":1,"worker_error":{"signal":9,"stderr":""}}"#)
        );

        let too_long = Ended::Exited {
            code: Some(0),
            signal: None,
            stdout: None,
            stderr_tail: String::new(),
        };
        assert_eq!(completion(&too_long, "{}").status, TxStatus::InternalError);
        let not_started = completion(&Ended::NotStarted("no such file".to_owned()), "{}");
        assert_eq!(not_started.status, TxStatus::InternalError);
        assert!(
            not_started
                .state
                .as_deref()
                .is_some_and(|state| state.contains("cannot run the command: no such file")),
            "{not_started:?}"
        );
    }

    #[test]
    fn only_an_object_state_gets_the_error() {
        let error = json!({ "exit_code": 1 });
        assert_eq!(
            with_error("{ }", &error).as_deref(),
            Some(r#"{"worker_error":{"exit_code":1}}"#)
        );
        assert_eq!(
            with_error(r#"{"worker_error":"old"} "#, &error).as_deref(),
            Some(r#"{"worker_error":"old","worker_error":{"exit_code":1}}"#),
            "the last member wins"
        );
        assert_eq!(with_error("[1]", &error), None, "an array is kept");
        assert_eq!(with_error("", &error), None, "no state is kept");
        let long = format!(
            r#"{{"x":"{}"}}"#,
            "a".repeat(PIPELINE_WORKER_STDOUT_BYTES_MAX)
        );
        assert_eq!(with_error(&long, &error), None, "too long for a state");
    }

    #[test]
    fn the_command_learns_the_transaction_from_its_environment() {
        let tx = Transaction {
            id: 17,
            claim_token: 40,
            node_group: "payments".to_owned(),
            pipeline: "checkout".to_owned(),
            event: r#"{"do":"charge"}"#.to_owned(),
            attempts: 2,
            ..Transaction::default()
        };
        let variables = environment(&tx, "w-1");
        let value = |name: &str| {
            variables
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.as_str())
        };
        assert_eq!(value("CERTUS_TRANSACTION_ID"), Some("17"));
        assert_eq!(value("CERTUS_CLAIM_TOKEN"), Some("40"));
        assert_eq!(value("CERTUS_PIPELINE"), Some("checkout"));
        assert_eq!(value("CERTUS_EVENT"), Some(r#"{"do":"charge"}"#));
        assert_eq!(value("CERTUS_ATTEMPT"), Some("2"));
        let bare = environment(&Transaction::default(), "w-1");
        assert!(
            bare.iter()
                .all(|(key, _)| *key != "CERTUS_PIPELINE" && *key != "CERTUS_EVENT"),
            "{bare:?}"
        );
    }

    /// A worker with two commands at once against a one-node cluster in this process: each
    /// transaction is completed with its command's output, a failed one with its stderr.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_worker_completes_each_transaction_with_its_commands_output() {
        use certus_client::{EnqueueRequest, GetStateRequest, enqueue_request};

        let dir = tempfile::tempdir().expect("a temporary directory");
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
        };
        let config = certus_node::NodeConfig::new(1, free(), free(), dir.path().join("node-1"));
        let endpoint = config.grpc_addr.to_string();
        let nodes = crate::cluster::start_local(&[config])
            .await
            .expect("a node");
        crate::cluster::await_leader(&nodes, Duration::from_secs(10))
            .await
            .expect("a leader");
        let client = Client::new([endpoint]).expect("a client");

        let script = r#"state=$(cat)
            if [ "$state" = '{"n":2}' ]; then echo "declined $CERTUS_EVENT" >&2; exit 3; fi
            printf '{"id":%s,"was":%s}' "$CERTUS_TRANSACTION_ID" "$state""#;
        let args = WorkerArgs {
            node_group: "g".to_owned(),
            worker: "w-1".to_owned(),
            credit: 2,
            command: ["sh", "-c", script].map(str::to_owned).to_vec(),
        };
        let worker_client = client.clone();
        let worker =
            tokio::spawn(async move { run(&worker_client, &Output { json: true }, args).await });

        let mut ids = Vec::new();
        for n in 1..=3 {
            let reply = client
                .enqueue(EnqueueRequest {
                    owner: "test".to_owned(),
                    route: Some(enqueue_request::Route::NodeGroup("g".to_owned())),
                    queue: QueueType::In.into(),
                    state: format!(r#"{{"n":{n}}}"#),
                    event: r#"{"do":"charge"}"#.to_owned(),
                    ..EnqueueRequest::default()
                })
                .await
                .expect("enqueued");
            ids.push(reply.transaction_id);
        }
        let mut finished = Vec::new();
        for &id in &ids {
            let deadline = Instant::now() + Duration::from_secs(20);
            let tx = loop {
                let reply = client
                    .get_state(GetStateRequest {
                        transaction_id: id,
                        wait_ms: 1_000,
                        ..GetStateRequest::default()
                    })
                    .await
                    .expect("its state");
                let tx = reply.transaction.expect("a transaction");
                if tx.completed_at_ms > 0 || Instant::now() > deadline {
                    break tx;
                }
            };
            finished.push((TxStatus::try_from(tx.status), tx.state));
        }
        worker.abort();
        assert_eq!(
            finished[0],
            (
                Ok(TxStatus::Success),
                format!(r#"{{"id":{},"was":{{"n":1}}}}"#, ids[0])
            )
        );
        assert_eq!(
            finished[1],
            (
                Ok(TxStatus::Failed),
                r#"{"n":2,"worker_error":{"exit_code":3,"stderr":"declined {\"do\":\"charge\"}"}}"#
                    .to_owned()
            )
        );
        assert_eq!(finished[2].0, Ok(TxStatus::Success));
        for node in nodes {
            node.shutdown().await;
        }
    }

    #[tokio::test]
    async fn a_command_gets_the_state_on_stdin_and_its_output_is_read() {
        let tx = Transaction {
            id: 5,
            state: r#"{"n":1}"#.to_owned(),
            ..Transaction::default()
        };
        let command = |script: &str| ["sh", "-c", script].map(str::to_owned);
        let groups = Groups::default();
        let ended = run_command(
            &command(r#"cat; echo "$CERTUS_TRANSACTION_ID" >&2; exit 4"#),
            &tx,
            "w",
            &groups,
        )
        .await;
        assert_eq!(
            ended,
            Ended::Exited {
                code: Some(4),
                signal: None,
                stdout: Some(br#"{"n":1}"#.to_vec()),
                stderr_tail: "5".to_owned(),
            }
        );
        let ended = run_command(&command("head -c 70000 /dev/zero"), &tx, "w", &groups).await;
        assert!(
            matches!(ended, Ended::Exited { stdout: None, .. }),
            "more than a state may hold: {ended:?}"
        );
        let ended = run_command(&["/nonexistent/command".to_owned()], &tx, "w", &groups).await;
        assert!(matches!(ended, Ended::NotStarted(_)), "{ended:?}");
        assert!(
            groups.lock().expect("not poisoned").is_empty(),
            "a command that ended leaves its group"
        );

        // A stop ends a command and the processes it started: the background sleep holds
        // stdout open, so the command would not be seen to end while it lives.
        let running = tokio::spawn({
            let (tx, groups) = (tx.clone(), Groups::clone(&groups));
            async move { run_command(&command("sleep 300 & wait"), &tx, "w", &groups).await }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while groups.lock().expect("not poisoned").is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        kill_groups(&groups);
        let ended = tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("the command ends once killed")
            .expect("no panic");
        assert!(
            matches!(
                ended,
                Ended::Exited {
                    signal: Some(9),
                    ..
                }
            ),
            "{ended:?}"
        );
    }
}
