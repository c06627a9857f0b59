//! The **pipeline** checkers, over what a pipelines run recorded: every enqueue a producer saw
//! acknowledged, the result each producer's long-poll returned, every claim a worker got from a
//! dequeue and every step (complete, requeue, sleep) it sent with the answer, every progress
//! reply, every cancel a producer sent and every switch the switcher set with their answers,
//! when the observer first saw each transaction finished, and each caught-up node's final state
//! of every acknowledged transaction. The webhook checkers are in
//! [`webhook_checkers`](super::webhook_checkers).
//!
//! Times named `*_ms` without `machine` are simulated milliseconds since the run began (the
//! global clock); `machine` times are the replicated state machine's clock (the leaders' skewed
//! wall clocks).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::judge::Verdict;

/// An enqueue a producer saw acknowledged.
#[derive(Clone, Debug, Serialize)]
pub struct Enqueued {
    /// The producer.
    pub producer: u32,
    /// The external id it was sent with.
    pub external_id: String,
    /// The transaction id the cluster answered.
    pub transaction: u64,
    /// The cluster said the external id was taken already.
    pub duplicate: bool,
    /// When the acknowledged call was made.
    pub invoked_ms: u64,
    /// When the producer had the acknowledgement.
    pub acknowledged_ms: u64,
}

/// A transaction as a producer's long-poll (or a node's state) showed it finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TxResult {
    /// Its status as the origin spells it (`success`, `failed`, `timeout`, ...).
    pub status: String,
    /// Its state (JSON, as stored).
    pub state: String,
}

/// What a producer's long-poll answered for a finished transaction.
#[derive(Clone, Debug, Serialize)]
pub struct Polled {
    /// The producer.
    pub producer: u32,
    /// The transaction.
    pub transaction: u64,
    /// Its result.
    pub result: TxResult,
    /// When the producer had it.
    pub seen_ms: u64,
}

/// One claim as its worker saw it: a dequeue's answer, with the deadline moved by progress
/// replies.
#[derive(Clone, Debug, Serialize)]
pub struct ClaimRecord {
    /// The worker (`w{index}-{incarnation}`).
    pub worker: String,
    /// The transaction.
    pub transaction: u64,
    /// The claim's token.
    pub token: u64,
    /// When the worker had the dequeue's answer.
    pub granted_ms: u64,
    /// Machine time the claim started.
    pub started_machine_ms: u64,
    /// The latest deadline the worker was told (machine time).
    pub deadline_machine_ms: u64,
}

/// What a step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum StepKind {
    /// A completion.
    Complete,
    /// A hand-on to another queue.
    Requeue,
    /// To sleep until a time or a switch.
    Sleep,
}

/// One step call a worker made under a claim.
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    /// The worker.
    pub worker: String,
    /// The transaction.
    pub transaction: u64,
    /// The claim token it carried.
    pub token: u64,
    /// Complete, requeue or sleep.
    pub kind: StepKind,
    /// When it was sent.
    pub sent_ms: u64,
    /// Accepted, refused (stale claim, or a cancel was asked for), or `None` when no answer
    /// came.
    pub accepted: Option<bool>,
    /// For a completion: the status it sent.
    pub status: Option<String>,
    /// Whether the worker knew a cancel had been asked for when it sent the step.
    pub cancel_known: bool,
}

/// A progress report a worker saw accepted (workers send one before every step, to learn of
/// cancels).
#[derive(Clone, Debug, Serialize)]
pub struct ProgressRecord {
    /// The worker.
    pub worker: String,
    /// The transaction.
    pub transaction: u64,
    /// The claim token it carried.
    pub token: u64,
    /// When it was sent.
    pub sent_ms: u64,
    /// Whether the reply said a cancel was asked for.
    pub cancel_requested: bool,
}

/// A sleep a worker saw accepted.
#[derive(Clone, Debug, Serialize)]
pub struct SleepRecord {
    /// The worker.
    pub worker: String,
    /// The transaction.
    pub transaction: u64,
    /// The claim token the sleep ended.
    pub token: u64,
    /// When it was sent.
    pub sent_ms: u64,
    /// When the worker had the answer.
    pub acknowledged_ms: u64,
    /// How long it was to sleep (from the answering node's clock).
    pub for_ms: u64,
    /// When the tick wakes it (machine time, from the answer).
    pub until_machine_ms: u64,
    /// The switch whose change wakes it earlier, if any.
    pub switch: Option<String>,
}

/// One `SetSwitch` call.
#[derive(Clone, Debug, Serialize)]
pub struct SwitchRecord {
    /// The switch.
    pub name: String,
    /// The value set.
    pub value: u64,
    /// When the call was made.
    pub invoked_ms: u64,
    /// When the answer came, if it did.
    pub acknowledged_ms: Option<u64>,
    /// Whether the answer said the value changed.
    pub changed: Option<bool>,
    /// The transactions the answer said were woken.
    pub woken: Vec<u64>,
}

/// What a `Cancel` answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CancelSeen {
    /// It was queued or sleeping and is now aborted.
    Aborted,
    /// It is running; its worker is asked to complete it as aborted.
    Requested,
    /// It is running and had been asked already.
    AlreadyRequested,
    /// It had finished already, with this status.
    Finished(String),
}

/// One `Cancel` call (a producer's, or the switcher's on a sleeper).
#[derive(Clone, Debug, Serialize)]
pub struct CancelRecord {
    /// Who sent it.
    pub by: String,
    /// The transaction.
    pub transaction: u64,
    /// When the call was made.
    pub invoked_ms: u64,
    /// When the answer came, if it did.
    pub acknowledged_ms: Option<u64>,
    /// The answer, if one came.
    pub outcome: Option<CancelSeen>,
}

/// A transaction as one node's final state holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FinalTx {
    /// Its status and state.
    pub result: TxResult,
    /// Whether its status is terminal.
    pub terminal: bool,
    /// Whether it was moved to the archive.
    pub archived: bool,
}

/// Final states: node → transaction → what the node holds.
pub type Finals = BTreeMap<u64, BTreeMap<u64, FinalTx>>;

/// **No acknowledged enqueue is lost**: every transaction id a producer got is in the final
/// state of every node that caught up (live or archived).
pub fn enqueues_durable(enqueued: &[Enqueued], finals: &Finals) -> Verdict {
    const NAME: &str = "enqueues-durable";
    if finals.is_empty() {
        return Verdict::fail(NAME, "no node caught up to be read".to_owned());
    }
    let mut problems = Vec::new();
    for (node, held) in finals {
        for enqueue in enqueued {
            if !held.contains_key(&enqueue.transaction) {
                problems.push(format!(
                    "n{node} lost transaction {} ({} of producer {}, acknowledged at {} ms)",
                    enqueue.transaction,
                    enqueue.external_id,
                    enqueue.producer,
                    enqueue.acknowledged_ms
                ));
            }
        }
    }
    let archived = finals
        .values()
        .next()
        .map_or(0, |held| held.values().filter(|tx| tx.archived).count());
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} acknowledged enqueues on each of {} nodes ({archived} archived)",
            enqueued.len(),
            finals.len()
        ),
    )
}

/// **An external id is accepted once within its window**: an acknowledged enqueue that created
/// a transaction opens its external id's window, and any later acknowledged enqueue of that id
/// certainly applied within it (answered before the creating enqueue's invocation plus the
/// window, less `slack_ms` for the machine clocks) got the same transaction id. An enqueue
/// answered as a duplicate opens no window: the window runs from the creation, which may lie
/// long before (its own answer lost), and a duplicate does not extend it.
pub fn external_ids_once(enqueued: &[Enqueued], window_ms: u64, slack_ms: u64) -> Verdict {
    const NAME: &str = "external-ids-once";
    let mut by_id: BTreeMap<&str, Vec<&Enqueued>> = BTreeMap::new();
    for enqueue in enqueued {
        by_id
            .entry(enqueue.external_id.as_str())
            .or_default()
            .push(enqueue);
    }
    let mut problems = Vec::new();
    let mut repeats = 0;
    for (external_id, mut list) in by_id {
        list.sort_by_key(|enqueue| enqueue.invoked_ms);
        repeats += list.len() - 1;
        for (index, earlier) in list.iter().enumerate() {
            if earlier.duplicate {
                continue;
            }
            for later in &list[index + 1..] {
                let within = later.acknowledged_ms + slack_ms < earlier.invoked_ms + window_ms;
                if within && later.transaction != earlier.transaction {
                    problems.push(format!(
                        "{external_id}: enqueued at {} ms as transaction {} and again at {} ms \
                         (within the {window_ms} ms window) as transaction {}",
                        earlier.invoked_ms,
                        earlier.transaction,
                        later.invoked_ms,
                        later.transaction
                    ));
                }
            }
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} acknowledged enqueues, {repeats} of them repeating an external id",
            enqueued.len()
        ),
    )
}

/// **Every transaction ends**: once the faults heal, every acknowledged transaction reaches a
/// terminal status within `bound_ms` (of the healing, or of its acknowledgement if later) —
/// a crashed worker's transactions are reaped and retried. `terminal_at` is when the observer
/// first saw each one finished.
pub fn transactions_terminal(
    enqueued: &[Enqueued],
    terminal_at: &BTreeMap<u64, (u64, TxResult)>,
    heal_ms: u64,
    bound_ms: u64,
    end_ms: u64,
) -> Verdict {
    const NAME: &str = "transactions-terminal";
    let mut first: BTreeMap<u64, &Enqueued> = BTreeMap::new();
    for enqueue in enqueued {
        let entry = first.entry(enqueue.transaction).or_insert(enqueue);
        if enqueue.acknowledged_ms < entry.acknowledged_ms {
            *entry = enqueue;
        }
    }
    let mut problems = Vec::new();
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    let mut late_ones = 0;
    for (id, enqueue) in &first {
        let due_ms = heal_ms.max(enqueue.acknowledged_ms) + bound_ms;
        match terminal_at.get(id) {
            Some((at_ms, result)) if *at_ms <= due_ms => {
                *by_status.entry(result.status.as_str()).or_default() += 1;
            }
            Some((at_ms, _)) => problems.push(format!(
                "transaction {id} ({}) finished at {at_ms} ms, after its bound {due_ms} ms",
                enqueue.external_id
            )),
            None if due_ms > end_ms => late_ones += 1,
            None => problems.push(format!(
                "transaction {id} ({}, acknowledged at {} ms) had not finished by {due_ms} ms",
                enqueue.external_id, enqueue.acknowledged_ms
            )),
        }
    }
    let statuses: Vec<String> = by_status
        .iter()
        .map(|(status, count)| format!("{count} {status}"))
        .collect();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} transactions: {}; {late_ones} acknowledged too late to judge; bound {bound_ms} \
             ms after healing",
            first.len(),
            if statuses.is_empty() {
                "none finished".to_owned()
            } else {
                statuses.join(", ")
            }
        ),
    )
}

/// **Steps only from the current claim**: (a) no claim on a transaction was granted while an
/// earlier claim on it was still live — before that claim's deadline (machine time, as its
/// worker was last told), unless a step under it had been sent; (b) no step was accepted after
/// a newer claim on its transaction had been granted (a retried step counts from its first
/// attempt); (c) no transaction had completions with
/// two different tokens accepted.
pub fn steps_from_current_claim(claims: &[ClaimRecord], steps: &[StepRecord]) -> Verdict {
    const NAME: &str = "steps-current-claim";
    let mut problems = Vec::new();
    let mut by_tx: BTreeMap<u64, Vec<&ClaimRecord>> = BTreeMap::new();
    for claim in claims {
        by_tx.entry(claim.transaction).or_default().push(claim);
    }
    let mut tokens: BTreeMap<(u64, u64), &ClaimRecord> = BTreeMap::new();
    for claim in claims {
        if let Some(other) = tokens.insert((claim.transaction, claim.token), claim)
            && other.worker != claim.worker
        {
            problems.push(format!(
                "transaction {}: token {} granted to both {} and {}",
                claim.transaction, claim.token, other.worker, claim.worker
            ));
        }
    }
    for (tx, mut list) in by_tx {
        list.sort_by_key(|claim| (claim.token, claim.granted_ms));
        for (index, earlier) in list.iter().enumerate() {
            for later in &list[index + 1..] {
                if later.token == earlier.token {
                    continue;
                }
                let stepped = steps.iter().any(|step| {
                    step.transaction == tx
                        && step.token == earlier.token
                        && step.sent_ms <= later.granted_ms
                });
                if !stepped && later.started_machine_ms < earlier.deadline_machine_ms {
                    problems.push(format!(
                        "transaction {tx}: {} was granted token {} at {} ms (machine {} ms) \
                         while {} held token {} until machine {} ms",
                        later.worker,
                        later.token,
                        later.granted_ms,
                        later.started_machine_ms,
                        earlier.worker,
                        earlier.token,
                        earlier.deadline_machine_ms
                    ));
                }
            }
        }
    }
    // A step is retried under its token until it is answered, and the node answers a retry of
    // a step it already applied as accepted: the attempt that was applied may be any of them,
    // so the step counts as sent at its first attempt.
    let mut first_sent: BTreeMap<(u64, u64, StepKind), u64> = BTreeMap::new();
    for step in steps {
        let sent = first_sent
            .entry((step.transaction, step.token, step.kind))
            .or_insert(step.sent_ms);
        *sent = (*sent).min(step.sent_ms);
    }
    for step in steps.iter().filter(|step| step.accepted == Some(true)) {
        let sent_ms = first_sent[&(step.transaction, step.token, step.kind)];
        if let Some(newer) = claims.iter().find(|claim| {
            claim.transaction == step.transaction
                && claim.token > step.token
                && claim.granted_ms < sent_ms
        }) {
            problems.push(format!(
                "transaction {}: {}'s {:?} with token {} first sent at {} ms was accepted, \
                 though {} had been granted token {} at {} ms",
                step.transaction,
                step.worker,
                step.kind,
                step.token,
                sent_ms,
                newer.worker,
                newer.token,
                newer.granted_ms
            ));
        }
    }
    let mut completed: BTreeMap<u64, u64> = BTreeMap::new();
    for step in steps
        .iter()
        .filter(|step| step.kind == StepKind::Complete && step.accepted == Some(true))
    {
        if let Some(token) = completed.insert(step.transaction, step.token)
            && token != step.token
        {
            problems.push(format!(
                "transaction {}: completions under tokens {token} and {} were both accepted",
                step.transaction, step.token
            ));
        }
    }
    let refused = steps
        .iter()
        .filter(|step| step.accepted == Some(false))
        .count();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} claims, {} steps sent ({refused} refused as stale)",
            claims.len(),
            steps.len()
        ),
    )
}

/// **The archive is faithful**: every transaction a node's final state holds archived is
/// terminal, with the status and state the observer saw when it first finished and the
/// producer's long-poll returned.
pub fn archive_faithful(
    polled: &[Polled],
    terminal_at: &BTreeMap<u64, (u64, TxResult)>,
    finals: &Finals,
) -> Verdict {
    const NAME: &str = "archive-faithful";
    let mut problems = Vec::new();
    let mut archived = 0;
    for (node, held) in finals {
        for (id, tx) in held.iter().filter(|(_, tx)| tx.archived) {
            archived += 1;
            if !tx.terminal {
                problems.push(format!(
                    "n{node} archived transaction {id} with status {}",
                    tx.result.status
                ));
            }
            if let Some((at_ms, first)) = terminal_at.get(id)
                && *first != tx.result
            {
                problems.push(format!(
                    "n{node} archived transaction {id} as {} {}, but it finished (seen at \
                     {at_ms} ms) as {} {}",
                    tx.result.status, tx.result.state, first.status, first.state
                ));
            }
            for poll in polled.iter().filter(|poll| poll.transaction == *id) {
                if poll.result != tx.result {
                    problems.push(format!(
                        "n{node} archived transaction {id} as {} {}, but producer {}'s \
                         long-poll returned {} {}",
                        tx.result.status,
                        tx.result.state,
                        poll.producer,
                        poll.result.status,
                        poll.result.state
                    ));
                }
            }
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{archived} archived transactions over {} nodes match their final state",
            finals.len()
        ),
    )
}

/// **A long-poll answers the final result**: what a producer's long-poll returned as finished
/// is the status and state of the transaction in every caught-up node's final state.
pub fn long_poll_final(polled: &[Polled], finals: &Finals) -> Verdict {
    const NAME: &str = "long-poll-final";
    let mut problems = Vec::new();
    for poll in polled {
        if !is_terminal(&poll.result.status) {
            problems.push(format!(
                "producer {}'s long-poll returned transaction {} as finished with status {}",
                poll.producer, poll.transaction, poll.result.status
            ));
        }
        for (node, held) in finals {
            match held.get(&poll.transaction) {
                Some(tx) if tx.result == poll.result => {}
                Some(tx) => problems.push(format!(
                    "transaction {}: producer {}'s long-poll returned {} {} at {} ms, n{node} \
                     holds {} {}",
                    poll.transaction,
                    poll.producer,
                    poll.result.status,
                    poll.result.state,
                    poll.seen_ms,
                    tx.result.status,
                    tx.result.state
                )),
                None => problems.push(format!(
                    "transaction {}: producer {} saw it finish at {} ms, n{node} does not hold it",
                    poll.transaction, poll.producer, poll.seen_ms
                )),
            }
        }
    }
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} long-poll results equal the final state on {} nodes",
            polled.len(),
            finals.len()
        ),
    )
}

/// **Cancels are honoured**: a cancel answered `aborted` (the transaction was queued or
/// sleeping) leaves it aborted; one answered `finished` leaves the status it named; after a
/// cancel answered `requested` (it was running), every progress reply sent later says a cancel
/// was asked for, no requeue or sleep sent later is accepted, and the transaction ends aborted
/// — or with the status of a completion its worker sent without knowing of the cancel (accepted,
/// or unanswered: a completion whose answer was lost may have been applied).
pub fn cancels_honoured(
    cancels: &[CancelRecord],
    steps: &[StepRecord],
    progress: &[ProgressRecord],
    terminal_at: &BTreeMap<u64, (u64, TxResult)>,
) -> Verdict {
    const NAME: &str = "cancels-honoured";
    let mut problems = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for cancel in cancels {
        let tx = cancel.transaction;
        let (Some(acked_ms), Some(outcome)) = (cancel.acknowledged_ms, &cancel.outcome) else {
            *counts.entry("unanswered").or_default() += 1;
            continue;
        };
        let final_status = terminal_at
            .get(&tx)
            .map(|(_, result)| result.status.as_str());
        match outcome {
            CancelSeen::Aborted => {
                *counts.entry("aborted at once").or_default() += 1;
                if let Some(status) = final_status.filter(|status| *status != "aborted") {
                    problems.push(format!(
                        "transaction {tx}: cancelled at {acked_ms} ms as aborted, but it \
                         finished {status}"
                    ));
                }
            }
            CancelSeen::Finished(was) => {
                *counts.entry("finished already").or_default() += 1;
                if let Some(status) = final_status.filter(|status| status != was) {
                    problems.push(format!(
                        "transaction {tx}: a cancel at {acked_ms} ms found it finished {was}, \
                         but it finished {status}"
                    ));
                }
            }
            CancelSeen::Requested | CancelSeen::AlreadyRequested => {
                *counts.entry("requested while running").or_default() += 1;
                for report in progress.iter().filter(|report| {
                    report.transaction == tx
                        && report.sent_ms > acked_ms
                        && !report.cancel_requested
                }) {
                    problems.push(format!(
                        "transaction {tx}: cancel requested at {acked_ms} ms, but {}'s progress \
                         report (token {}) sent at {} ms was answered without it",
                        report.worker, report.token, report.sent_ms
                    ));
                }
                for step in steps.iter().filter(|step| {
                    step.transaction == tx
                        && step.kind != StepKind::Complete
                        && step.sent_ms > acked_ms
                        && step.accepted == Some(true)
                }) {
                    problems.push(format!(
                        "transaction {tx}: cancel requested at {acked_ms} ms, but {}'s {:?} \
                         (token {}) sent at {} ms was accepted",
                        step.worker, step.kind, step.token, step.sent_ms
                    ));
                }
                if let Some(status) = final_status.filter(|status| *status != "aborted") {
                    // A completion left unanswered (its worker crashed or was cut off) may
                    // have been applied as much as an accepted one.
                    let unknowing = steps.iter().any(|step| {
                        step.transaction == tx
                            && step.kind == StepKind::Complete
                            && step.accepted != Some(false)
                            && !step.cancel_known
                            && step.status.as_deref() == Some(status)
                    });
                    if !unknowing {
                        problems.push(format!(
                            "transaction {tx}: cancel requested at {acked_ms} ms while it ran, \
                             but it finished {status}, not by a completion from a worker that \
                             had not heard of the cancel"
                        ));
                    }
                }
            }
        }
    }
    let counted: Vec<String> = counts
        .iter()
        .map(|(what, count)| format!("{count} {what}"))
        .collect();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} cancels: {}",
            cancels.len(),
            if counted.is_empty() {
                "none".to_owned()
            } else {
                counted.join(", ")
            }
        ),
    )
}

/// **Sleepers wake and are dequeued again**: (a) a change of a switch (acknowledged, invoked
/// after a sleep on it was acknowledged) wakes that sleeper — its answer lists it, unless
/// another change of the switch (listing it, or unanswered) may have woken it first, its time
/// may have come (within `skew_ms`), or a cancel may have aborted it; (b) every sleeper is
/// claimed again later, or ends aborted (cancelled while asleep), or has not finished by the end
/// (which `transactions-terminal` judges); (c) a sleeper without a switch is not claimed again
/// before its time (machine clocks, within `skew_ms`).
pub fn sleepers_woken(
    sleeps: &[SleepRecord],
    switches: &[SwitchRecord],
    cancels: &[CancelRecord],
    claims: &[ClaimRecord],
    terminal_at: &BTreeMap<u64, (u64, TxResult)>,
    skew_ms: u64,
) -> Verdict {
    const NAME: &str = "sleepers-woken";
    let mut problems = Vec::new();
    let (mut by_switch, mut claimed_again, mut by_time) = (0, 0, 0);
    for sleep in sleeps {
        let tx = sleep.transaction;
        if let Some(switch) = &sleep.switch {
            let on_switch = || switches.iter().filter(move |set| set.name == *switch);
            let change = on_switch()
                .filter(|set| set.changed == Some(true) && set.invoked_ms > sleep.acknowledged_ms)
                .min_by_key(|set| set.invoked_ms);
            if let Some(change) = change {
                let change_ms = change.acknowledged_ms.unwrap_or(change.invoked_ms);
                let woken_here = change.woken.contains(&tx);
                let woken_before = on_switch().any(|set| {
                    !std::ptr::eq(set, change)
                        && set.invoked_ms < change_ms
                        && (set.woken.contains(&tx) || set.acknowledged_ms.is_none())
                });
                let time_came = change_ms + skew_ms >= sleep.sent_ms + sleep.for_ms;
                let cancelled = cancels.iter().any(|cancel| {
                    cancel.transaction == tx
                        && cancel.invoked_ms < change_ms
                        && matches!(cancel.outcome, None | Some(CancelSeen::Aborted))
                });
                if woken_here {
                    by_switch += 1;
                } else if !(woken_before || time_came || cancelled) {
                    problems.push(format!(
                        "transaction {tx} slept on switch {switch} (acknowledged at {} ms, for \
                         {} ms); setting it to {} (acknowledged at {change_ms} ms) woke {:?}, \
                         not it",
                        sleep.acknowledged_ms, sleep.for_ms, change.value, change.woken
                    ));
                }
            }
        }
        let next = claims
            .iter()
            .filter(|claim| claim.transaction == tx && claim.token > sleep.token)
            .min_by_key(|claim| claim.token);
        match (next, terminal_at.get(&tx)) {
            (Some(claim), _) => {
                claimed_again += 1;
                if sleep.switch.is_none() {
                    by_time += 1;
                    if claim.started_machine_ms + skew_ms < sleep.until_machine_ms {
                        problems.push(format!(
                            "transaction {tx} slept until machine {} ms, but {} claimed it at \
                             machine {} ms",
                            sleep.until_machine_ms, claim.worker, claim.started_machine_ms
                        ));
                    }
                }
            }
            (None, Some((_, result))) if result.status != "aborted" => problems.push(format!(
                "transaction {tx} slept (acknowledged at {} ms) and finished {} without being \
                 dequeued again",
                sleep.acknowledged_ms, result.status
            )),
            (None, _) => {}
        }
    }
    let changes = switches
        .iter()
        .filter(|set| set.changed == Some(true))
        .count();
    Verdict::of_problems(
        NAME,
        problems,
        format!(
            "{} sleeps ({} on a switch), {by_switch} woken by a switch change, {claimed_again} \
             dequeued again ({by_time} after sleeping until a time); {} switch sets, {changes} \
             changes",
            sleeps.len(),
            sleeps.iter().filter(|sleep| sleep.switch.is_some()).count(),
            switches.len()
        ),
    )
}

/// Whether `status` (as the origin spells it) is terminal.
pub fn is_terminal(status: &str) -> bool {
    matches!(
        status,
        "success" | "failed" | "aborted" | "timeout" | "internal-error"
    )
}

#[cfg(test)]
mod tests;
