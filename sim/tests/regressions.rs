//! Seeds that once failed, replayed whole: each test names the bug its seed found. A seed draws
//! the same faults on later code, but what they meet moves with it, so a seed here is a check
//! that keeps passing, not a proof that its bug cannot come back (the sweeps are that).

#![cfg(madsim)]

use certus_sim::run::run_seed;
use certus_sim::scenarios::scenarios;

fn replay(name: &str, seed: u64) {
    let scenario = scenarios()
        .into_iter()
        .find(|scenario| scenario.name == name)
        .expect("the scenario exists");
    let outcome = run_seed(&scenario, seed);
    let failed: Vec<String> = outcome
        .verdicts
        .iter()
        .filter(|verdict| !verdict.passed)
        .map(|verdict| format!("{}: {}", verdict.checker, verdict.detail))
        .collect();
    assert!(
        outcome.passed(),
        "{name} seed {seed} failed (replay: cargo xtask sim --seed {seed} --scenario {name}):\n{}",
        failed.join("\n")
    );
}

/// Node 3 led, was cut off with a tick in flight, and learnt it had lost its term only when the
/// partition healed; the tick's answer came 10 s later still. Meanwhile node 3 led again, and its
/// ticks task, still waiting, took back no lapsed claim for seconds (`expired-claims-returned`).
#[test]
fn sessions_100617_a_node_that_leads_again_ticks_again() {
    replay("sessions", 100_617);
}
