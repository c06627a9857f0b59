//! Each checker on a history that must pass, and on one history per way its invariant can break;
//! a failure's detail must name the culprit (transaction, token, node).

use super::*;
use crate::judge::{assert_fails, assert_passes};

const HEAL_MS: u64 = 10_000;
const BOUND_MS: u64 = 5_000;
const END_MS: u64 = 60_000;
const WINDOW_MS: u64 = 10_000;
const SLACK_MS: u64 = 500;
/// How far the machine clock runs ahead of the global one in the claim histories, so that a
/// checker comparing the wrong clocks gets a different answer.
const SKEW_MS: u64 = 50_000;
const TIMEOUT_MS: u64 = 3_000;

fn enqueued(external_id: &str, transaction: u64, invoked_ms: u64) -> Enqueued {
    Enqueued {
        producer: 1,
        external_id: external_id.to_owned(),
        transaction,
        duplicate: false,
        invoked_ms,
        acknowledged_ms: invoked_ms + 100,
    }
}

fn result(status: &str, state: &str) -> TxResult {
    TxResult {
        status: status.to_owned(),
        state: state.to_owned(),
    }
}

fn held(status: &str, state: &str, archived: bool) -> FinalTx {
    FinalTx {
        result: result(status, state),
        terminal: is_terminal(status),
        archived,
    }
}

fn finals(nodes: &[u64], txs: &[(u64, FinalTx)]) -> Finals {
    nodes
        .iter()
        .map(|node| (*node, txs.iter().cloned().collect()))
        .collect()
}

fn polled(transaction: u64, status: &str, state: &str) -> Polled {
    Polled {
        producer: 2,
        transaction,
        result: result(status, state),
        seen_ms: 9_000,
    }
}

/// A claim granted at `granted_ms` (machine time `SKEW_MS` later) for `TIMEOUT_MS`.
fn claim(worker: &str, transaction: u64, token: u64, granted_ms: u64) -> ClaimRecord {
    ClaimRecord {
        worker: worker.to_owned(),
        transaction,
        token,
        granted_ms,
        started_machine_ms: granted_ms + SKEW_MS,
        deadline_machine_ms: granted_ms + SKEW_MS + TIMEOUT_MS,
    }
}

fn step(
    worker: &str,
    transaction: u64,
    token: u64,
    sent_ms: u64,
    accepted: Option<bool>,
) -> StepRecord {
    StepRecord {
        worker: worker.to_owned(),
        transaction,
        token,
        kind: StepKind::Complete,
        sent_ms,
        accepted,
        status: Some("success".to_owned()),
        cancel_known: false,
    }
}

// enqueues_durable

#[test]
fn durable_passes_when_every_node_holds_every_acknowledged_transaction() {
    let enqueued = [enqueued("x-1", 41, 1_000), enqueued("x-2", 42, 2_000)];
    let finals = finals(
        &[1, 2, 3],
        &[
            (41, held("success", "{}", true)),
            (42, held("queued", "{}", false)),
        ],
    );
    let verdict = enqueues_durable(&enqueued, &finals);
    assert_eq!(verdict.checker, "enqueues-durable");
    assert_passes(
        &verdict,
        "2 acknowledged enqueues on each of 3 nodes (1 archived)",
    );
}

#[test]
fn durable_fails_when_a_node_lost_an_acknowledged_transaction() {
    let enqueued = [enqueued("x-1", 41, 1_000), enqueued("x-2", 42, 2_000)];
    let mut finals = finals(
        &[1, 2, 3],
        &[
            (41, held("success", "{}", false)),
            (42, held("success", "{}", false)),
        ],
    );
    finals.get_mut(&3).unwrap().remove(&42);
    assert_fails(
        &enqueues_durable(&enqueued, &finals),
        "n3 lost transaction 42 (x-2 of producer 1, acknowledged at 2100 ms)",
    );
}

#[test]
fn durable_fails_when_no_node_caught_up() {
    assert_fails(
        &enqueues_durable(&[enqueued("x-1", 41, 1_000)], &Finals::new()),
        "no node caught up",
    );
}

// external_ids_once

#[test]
fn external_ids_pass_when_repeats_within_the_window_get_the_first_transaction() {
    let mut repeat = enqueued("x-1", 41, 4_000);
    repeat.duplicate = true;
    // After the window, the id may name a new transaction.
    let after_window = enqueued("x-1", 57, 20_000);
    let list = [enqueued("x-1", 41, 1_000), repeat, after_window];
    assert_passes(
        &external_ids_once(&list, WINDOW_MS, SLACK_MS),
        "3 acknowledged enqueues, 2 of them repeating an external id",
    );
}

#[test]
fn external_ids_fail_when_a_repeat_within_the_window_made_a_new_transaction() {
    let list = [enqueued("x-1", 41, 1_000), enqueued("x-1", 44, 4_000)];
    assert_fails(
        &external_ids_once(&list, WINDOW_MS, SLACK_MS),
        "x-1: enqueued at 1000 ms as transaction 41 and again at 4000 ms",
    );
}

#[test]
fn external_ids_measure_the_window_from_the_creation_not_from_a_duplicate_answer() {
    // Pipelines seed 353: the creating enqueue's answer was lost (not in the history), a repeat
    // was answered as the duplicate it was, and a repeat after the creation's window (but within
    // the window measured from the duplicate) rightly made a new transaction.
    let mut duplicate = enqueued("x-1", 41, 6_000);
    duplicate.duplicate = true;
    let after_window = enqueued("x-1", 57, 10_000);
    let list = [duplicate, after_window];
    assert!(external_ids_once(&list, WINDOW_MS, SLACK_MS).passed);
}

#[test]
fn external_ids_do_not_judge_a_repeat_at_the_edge_of_the_window() {
    // Answered within the slack of the window's end: the window may have ended when it applied.
    let list = [enqueued("x-1", 41, 1_000), enqueued("x-1", 44, 10_500)];
    assert!(external_ids_once(&list, WINDOW_MS, SLACK_MS).passed);
}

// transactions_terminal

#[test]
fn terminal_passes_when_every_transaction_finished_within_its_bound() {
    let list = [
        enqueued("x-1", 41, 1_000),
        enqueued("x-2", 42, 12_000),
        enqueued("x-3", 43, 58_000),
    ];
    let terminal_at = BTreeMap::from([
        (41, (14_000, result("success", "{}"))),
        (42, (16_500, result("timeout", "{}"))),
    ]);
    assert_passes(
        &transactions_terminal(&list, &terminal_at, HEAL_MS, BOUND_MS, END_MS),
        "3 transactions: 1 success, 1 timeout; 1 acknowledged too late to judge",
    );
}

#[test]
fn terminal_fails_when_a_transaction_never_finished() {
    let list = [enqueued("x-1", 41, 1_000)];
    assert_fails(
        &transactions_terminal(&list, &BTreeMap::new(), HEAL_MS, BOUND_MS, END_MS),
        "transaction 41 (x-1, acknowledged at 1100 ms) had not finished by 15000 ms",
    );
}

#[test]
fn terminal_fails_when_a_transaction_finished_after_its_bound() {
    let list = [enqueued("x-1", 41, 12_000)];
    let terminal_at = BTreeMap::from([(41, (18_000, result("success", "{}")))]);
    assert_fails(
        &transactions_terminal(&list, &terminal_at, HEAL_MS, BOUND_MS, END_MS),
        "transaction 41 (x-1) finished at 18000 ms, after its bound 17100 ms",
    );
}

// steps_from_current_claim

#[test]
fn steps_pass_when_a_reaped_claim_is_taken_again_and_its_late_completion_refused() {
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 200, 4_500)];
    let steps = [
        step("w0-0", 41, 100, 6_000, Some(false)),
        step("w1-0", 41, 200, 5_000, None),
        step("w1-0", 41, 200, 5_500, Some(true)),
    ];
    let verdict = steps_from_current_claim(&claims, &steps);
    assert_eq!(verdict.checker, "steps-current-claim");
    assert_passes(&verdict, "2 claims, 3 steps sent (1 refused as stale)");
}

#[test]
fn steps_pass_when_a_requeued_transaction_is_claimed_before_the_old_deadline() {
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 200, 1_500)];
    let mut requeue = step("w0-0", 41, 100, 1_200, Some(true));
    requeue.kind = StepKind::Requeue;
    assert!(steps_from_current_claim(&claims, &[requeue]).passed);
}

#[test]
fn steps_fail_when_a_live_claim_is_handed_out_again() {
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 200, 2_000)];
    assert_fails(
        &steps_from_current_claim(&claims, &[]),
        "transaction 41: w1-0 was granted token 200 at 2000 ms (machine 52000 ms) while w0-0 \
         held token 100 until machine 54000 ms",
    );
}

#[test]
fn steps_fail_when_a_superseded_completion_is_accepted() {
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 200, 4_500)];
    let steps = [step("w0-0", 41, 100, 6_000, Some(true))];
    assert_fails(
        &steps_from_current_claim(&claims, &steps),
        "transaction 41: w0-0's Complete with token 100 first sent at 6000 ms was accepted, \
         though w1-0 had been granted token 200 at 4500 ms",
    );
}

#[test]
fn steps_pass_when_a_retry_of_an_applied_requeue_is_answered_after_the_next_claim() {
    // The first attempt was applied but its answer lost; the transaction moved on and was
    // claimed again; the retry under the old token is answered as the step already done.
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 200, 1_800)];
    let mut first = step("w0-0", 41, 100, 1_200, None);
    first.kind = StepKind::Requeue;
    let mut retry = step("w0-0", 41, 100, 2_400, Some(true));
    retry.kind = StepKind::Requeue;
    assert_passes(
        &steps_from_current_claim(&claims, &[first, retry]),
        "2 claims, 2 steps sent (0 refused as stale)",
    );
}

#[test]
fn steps_fail_when_a_step_first_sent_after_the_next_claim_is_accepted() {
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 200, 1_800)];
    // An earlier attempt of another kind does not count for this one.
    let mut progress_like = step("w0-0", 41, 100, 1_200, None);
    progress_like.kind = StepKind::Sleep;
    let mut requeue = step("w0-0", 41, 100, 2_000, None);
    requeue.kind = StepKind::Requeue;
    let mut retry = step("w0-0", 41, 100, 2_400, Some(true));
    retry.kind = StepKind::Requeue;
    assert_fails(
        &steps_from_current_claim(&claims, &[progress_like, requeue, retry]),
        "transaction 41: w0-0's Requeue with token 100 first sent at 2000 ms was accepted, \
         though w1-0 had been granted token 200 at 1800 ms",
    );
}

#[test]
fn steps_fail_when_two_tokens_complete_one_transaction() {
    // The claims were never seen (lost answers), but two completions were accepted.
    let steps = [
        step("w0-0", 41, 100, 6_000, Some(true)),
        step("w1-0", 41, 200, 7_000, Some(true)),
    ];
    assert_fails(
        &steps_from_current_claim(&[], &steps),
        "transaction 41: completions under tokens 100 and 200 were both accepted",
    );
}

#[test]
fn steps_fail_when_one_token_is_granted_to_two_workers() {
    let claims = [claim("w0-0", 41, 100, 1_000), claim("w1-0", 41, 100, 1_000)];
    assert_fails(
        &steps_from_current_claim(&claims, &[]),
        "transaction 41: token 100 granted to both w0-0 and w1-0",
    );
}

// archive_faithful

#[test]
fn archive_passes_when_archived_transactions_equal_what_was_seen() {
    let finals = finals(&[1, 2], &[(41, held("success", r#"{"r":1}"#, true))]);
    let terminal_at = BTreeMap::from([(41, (5_000, result("success", r#"{"r":1}"#)))]);
    let polls = [polled(41, "success", r#"{"r":1}"#)];
    assert_passes(
        &archive_faithful(&polls, &terminal_at, &finals),
        "2 archived transactions over 2 nodes",
    );
}

#[test]
fn archive_fails_when_the_archive_changed_the_result() {
    let finals = finals(&[1], &[(41, held("success", r#"{"r":2}"#, true))]);
    let terminal_at = BTreeMap::from([(41, (5_000, result("success", r#"{"r":1}"#)))]);
    assert_fails(
        &archive_faithful(&[], &terminal_at, &finals),
        r#"n1 archived transaction 41 as success {"r":2}, but it finished (seen at 5000 ms) as success {"r":1}"#,
    );
    let polls = [polled(41, "failed", r#"{"r":2}"#)];
    assert_fails(
        &archive_faithful(&polls, &BTreeMap::new(), &finals),
        "but producer 2's long-poll returned failed",
    );
}

#[test]
fn archive_fails_when_a_running_transaction_is_archived() {
    let finals = finals(&[1], &[(41, held("running", "{}", true))]);
    assert_fails(
        &archive_faithful(&[], &BTreeMap::new(), &finals),
        "n1 archived transaction 41 with status running",
    );
}

// long_poll_final

#[test]
fn long_poll_passes_when_every_node_holds_the_result_seen() {
    let finals = finals(&[1, 2, 3], &[(41, held("failed", r#"{"r":1}"#, false))]);
    assert_passes(
        &long_poll_final(&[polled(41, "failed", r#"{"r":1}"#)], &finals),
        "1 long-poll results equal the final state on 3 nodes",
    );
}

#[test]
fn long_poll_fails_when_a_node_holds_another_result() {
    let mut finals = finals(&[1, 2], &[(41, held("failed", r#"{"r":1}"#, false))]);
    finals
        .get_mut(&2)
        .unwrap()
        .insert(41, held("success", r#"{"r":9}"#, false));
    assert_fails(
        &long_poll_final(&[polled(41, "failed", r#"{"r":1}"#)], &finals),
        r#"transaction 41: producer 2's long-poll returned failed {"r":1} at 9000 ms, n2 holds success {"r":9}"#,
    );
}

#[test]
fn long_poll_fails_when_a_result_is_not_terminal_or_not_held() {
    let finals = finals(&[1], &[]);
    let verdict = long_poll_final(&[polled(41, "running", "{}")], &finals);
    assert_fails(
        &verdict,
        "returned transaction 41 as finished with status running",
    );
    assert_fails(&verdict, "n1 does not hold it");
}

// cancels_honoured

fn cancel(transaction: u64, acknowledged_ms: u64, outcome: Option<CancelSeen>) -> CancelRecord {
    CancelRecord {
        by: "producer-1".to_owned(),
        transaction,
        invoked_ms: acknowledged_ms - 100,
        acknowledged_ms: outcome.as_ref().map(|_| acknowledged_ms),
        outcome,
    }
}

fn ended(txs: &[(u64, &str)]) -> BTreeMap<u64, (u64, TxResult)> {
    txs.iter()
        .map(|(id, status)| (*id, (20_000, result(status, "{}"))))
        .collect()
}

fn progress(transaction: u64, sent_ms: u64, cancel_requested: bool) -> ProgressRecord {
    ProgressRecord {
        worker: "w0-0".to_owned(),
        transaction,
        token: 7,
        sent_ms,
        cancel_requested,
    }
}

fn completed(transaction: u64, sent_ms: u64, status: &str, cancel_known: bool) -> StepRecord {
    StepRecord {
        status: Some(status.to_owned()),
        cancel_known,
        ..step("w0-0", transaction, 7, sent_ms, Some(true))
    }
}

#[test]
fn cancels_pass_when_each_ends_as_its_answer_says() {
    let cancels = [
        cancel(1, 1_000, Some(CancelSeen::Aborted)),
        cancel(2, 1_000, Some(CancelSeen::Requested)),
        cancel(3, 1_000, Some(CancelSeen::Requested)),
        cancel(4, 1_000, Some(CancelSeen::Finished("success".to_owned()))),
        cancel(5, 1_000, None),
    ];
    // 2: its worker heard of the cancel and completed it aborted; 3: its worker completed it
    // before hearing of it.
    let steps = [
        completed(2, 1_300, "aborted", true),
        completed(3, 1_100, "success", false),
    ];
    let reports = [progress(2, 1_200, true), progress(3, 900, false)];
    let terminal = ended(&[
        (1, "aborted"),
        (2, "aborted"),
        (3, "success"),
        (4, "success"),
        (5, "success"),
    ]);
    assert_passes(
        &cancels_honoured(&cancels, &steps, &reports, &terminal),
        "5 cancels: 1 aborted at once, 1 finished already, 2 requested while running, 1 unanswered",
    );
}

#[test]
fn cancels_fail_when_an_aborted_or_finished_one_ends_otherwise() {
    let cancels = [
        cancel(1, 1_000, Some(CancelSeen::Aborted)),
        cancel(4, 1_000, Some(CancelSeen::Finished("failed".to_owned()))),
    ];
    let verdict = cancels_honoured(
        &cancels,
        &[],
        &[],
        &ended(&[(1, "success"), (4, "success")]),
    );
    assert_fails(
        &verdict,
        "transaction 1: cancelled at 1000 ms as aborted, but it finished success",
    );
    assert_fails(
        &verdict,
        "transaction 4: a cancel at 1000 ms found it finished failed",
    );
}

#[test]
fn cancels_fail_when_a_requested_cancel_is_not_seen_or_ignored() {
    let cancels = [cancel(2, 1_000, Some(CancelSeen::Requested))];
    // The progress reply after the cancel does not say so, a sleep after it is accepted, and it
    // ends success with no unknowing completion.
    let sleep = StepRecord {
        kind: StepKind::Sleep,
        ..step("w0-0", 2, 7, 1_500, Some(true))
    };
    let steps = [sleep, completed(2, 1_600, "success", true)];
    let verdict = cancels_honoured(
        &cancels,
        &steps,
        &[progress(2, 1_200, false)],
        &ended(&[(2, "success")]),
    );
    assert_fails(
        &verdict,
        "w0-0's progress report (token 7) sent at 1200 ms was answered without it",
    );
    assert_fails(
        &verdict,
        "w0-0's Sleep (token 7) sent at 1500 ms was accepted",
    );
    assert_fails(
        &verdict,
        "transaction 2: cancel requested at 1000 ms while it ran, but it finished success",
    );
}

#[test]
fn a_cancelled_transaction_may_end_by_an_unanswered_completion_sent_unknowing() {
    let cancels = [
        cancel(2, 1_000, Some(CancelSeen::Requested)),
        cancel(3, 1_000, Some(CancelSeen::Requested)),
    ];
    // 2: the worker's completion went unanswered (it may have landed), so success is explained;
    // 3: the only unknowing completion was refused, so success is not.
    let steps = [
        StepRecord {
            accepted: None,
            ..completed(2, 1_100, "success", false)
        },
        StepRecord {
            accepted: Some(false),
            ..completed(3, 1_100, "success", false)
        },
    ];
    let verdict = cancels_honoured(
        &cancels,
        &steps,
        &[],
        &ended(&[(2, "success"), (3, "success")]),
    );
    assert_fails(
        &verdict,
        "transaction 3: cancel requested at 1000 ms while it ran, but it finished success",
    );
    assert!(
        !verdict.detail.contains("transaction 2"),
        "an unanswered completion explains transaction 2: {}",
        verdict.detail
    );
}

// sleepers_woken

fn sleep(transaction: u64, token: u64, acknowledged_ms: u64, switch: Option<&str>) -> SleepRecord {
    SleepRecord {
        worker: "w0-0".to_owned(),
        transaction,
        token,
        sent_ms: acknowledged_ms - 100,
        acknowledged_ms,
        for_ms: if switch.is_some() { 10_000 } else { 1_000 },
        until_machine_ms: acknowledged_ms + SKEW_MS + 1_000,
        switch: switch.map(str::to_owned),
    }
}

fn set(name: &str, invoked_ms: u64, answered: bool, woken: &[u64]) -> SwitchRecord {
    SwitchRecord {
        name: name.to_owned(),
        value: invoked_ms,
        invoked_ms,
        acknowledged_ms: answered.then_some(invoked_ms + 100),
        changed: answered.then_some(true),
        woken: woken.to_vec(),
    }
}

#[test]
fn sleepers_pass_when_woken_by_their_switch_or_time_and_dequeued_again() {
    let sleeps = [
        sleep(1, 5, 1_000, Some("s")),
        sleep(2, 6, 1_000, None),
        sleep(3, 7, 1_000, Some("s")),
    ];
    // The first change after the sleeps wakes 1; 3 was woken by an unanswered change before it.
    let switches = [
        set("s", 1_500, false, &[]),
        set("s", 2_000, true, &[1]),
        set("t", 2_100, true, &[]),
    ];
    let claims = [
        claim("w1-0", 1, 9, 2_200),
        claim("w1-0", 2, 10, 2_000),
        claim("w1-0", 3, 11, 2_300),
    ];
    assert_passes(
        &sleepers_woken(&sleeps, &switches, &[], &claims, &BTreeMap::new(), 200),
        "3 sleeps (2 on a switch), 1 woken by a switch change, 3 dequeued again (1 after sleeping until a time)",
    );
}

#[test]
fn sleepers_fail_when_a_switch_change_leaves_one_asleep() {
    let sleeps = [sleep(1, 5, 1_000, Some("s"))];
    let switches = [set("s", 2_000, true, &[])];
    assert_fails(
        &sleepers_woken(&sleeps, &switches, &[], &[], &BTreeMap::new(), 200),
        "transaction 1 slept on switch s (acknowledged at 1000 ms, for 10000 ms); setting it to 2000 (acknowledged at 2100 ms) woke [], not it",
    );
    // A cancel that aborted it first excuses it.
    let cancels = [cancel(1, 1_500, Some(CancelSeen::Aborted))];
    assert_passes(
        &sleepers_woken(
            &sleeps,
            &switches,
            &cancels,
            &[],
            &ended(&[(1, "aborted")]),
            200,
        ),
        "1 sleeps",
    );
}

#[test]
fn sleepers_fail_when_woken_early_or_finished_without_a_dequeue() {
    let sleeps = [sleep(2, 6, 1_000, None), sleep(4, 8, 1_000, None)];
    // 2 is claimed 500 ms into its 1 s sleep (machine time); 4 finishes without a claim.
    let claims = [claim("w1-0", 2, 10, 1_500)];
    let verdict = sleepers_woken(&sleeps, &[], &[], &claims, &ended(&[(4, "success")]), 200);
    assert_fails(
        &verdict,
        "transaction 2 slept until machine 52000 ms, but w1-0 claimed it at machine 51500 ms",
    );
    assert_fails(
        &verdict,
        "transaction 4 slept (acknowledged at 1000 ms) and finished success without being dequeued again",
    );
}
