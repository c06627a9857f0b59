//! ACME in a simulated run: the workload, the observer of the replicated orders, and the ACME
//! verdicts at the end. The nodes validate with the sessions' HTTP-01 probe and issue through
//! the sessions' upstream CA (`SessionSetup::parts`), so the scenario's `tune` turns the session
//! daemons on (`sessions::run::tune`): the leader's validator runs only beside them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use certus_core::acme::{Order, OrderId, OrderStatus};
use certus_node::ordered_watch as watch;
use serde::Serialize;

use super::checkers::{self, FinalAcme, Finalize, Sighting};
use super::workload::{AcmeHistory, AcmeWorkload, RunningAcme, Shared, client_key};
use crate::cluster::{SimCluster, elapsed_ms};
use crate::judge::Verdict;
use crate::sessions::checkers::UpstreamOrder;
use crate::sessions::run::SessionSetup;
use crate::settle::settle;

/// How soon after the faults heal (or after its finalize was acknowledged, if later) a
/// finalized order must be valid: its session is issued by the daemons (claims of 3 s, an
/// upstream CA polled for up to 4 s) once a leader has settled (about 6.5 s after a healing
/// that took the old one away).
pub const VALID_BOUND_MS: u64 = 20_000;
/// Clients stop placing orders this long after the faults heal, so the last ones can be
/// issued within the bound before the run ends.
const CREATE_AFTER_HEAL_MS: u64 = 3_000;
/// How often the observer looks at the most advanced node's orders.
const OBSERVE_EVERY: Duration = Duration::from_millis(50);

/// The ACME part of a running simulation.
#[derive(Debug)]
pub struct AcmeRun {
    setup: SessionSetup,
    shared: Shared,
    workload: RunningAcme,
    create_until_ms: Arc<AtomicU64>,
    stop_observer: watch::Sender<bool>,
    observer: tokio::task::JoinHandle<()>,
    thumbprints: Arc<Vec<String>>,
    started: tokio::time::Instant,
}

/// What the ACME part of a run reports.
#[derive(Debug, Serialize)]
pub struct AcmeReport {
    /// What the clients did and saw.
    pub history: AcmeHistory,
    /// Every status each order was seen in: (when, by whom, order, status).
    pub statuses: Vec<(u64, String, u64, OrderStatus)>,
    /// What the upstream CA was asked for.
    pub orders: Vec<UpstreamOrder>,
}

/// Starts the clients and the observer. `setup` is the sessions' setup the nodes were given.
pub fn start(
    cluster: &Arc<SimCluster>,
    workload: &AcmeWorkload,
    setup: SessionSetup,
    seed: u64,
    started: tokio::time::Instant,
) -> AcmeRun {
    let shared = Shared::default();
    let create_until_ms = Arc::new(AtomicU64::new(u64::MAX));
    let thumbprints: Arc<Vec<String>> = Arc::new(
        (0..workload.clients)
            .map(|index| client_key(seed, index).thumbprint)
            .collect(),
    );
    let running = super::workload::start(
        Arc::clone(cluster),
        workload,
        seed,
        shared.clone(),
        Arc::clone(&create_until_ms),
        started,
    );
    let (stop_observer, stopped) = watch::channel(false);
    let observer = tokio::spawn(observe(
        Arc::clone(cluster),
        shared.clone(),
        Arc::clone(&thumbprints),
        stopped,
        started,
    ));
    AcmeRun {
        setup,
        shared,
        workload: running,
        create_until_ms,
        stop_observer,
        observer,
        thumbprints,
        started,
    }
}

/// The ACME tables of `state` that the clients' keys reach: their accounts, those accounts'
/// orders (with their status at the state's clock), every revocation, and the totals.
fn acme_tables(state: &certus_core::State, thumbprints: &[String]) -> FinalAcme {
    let acme = state.acme();
    let mut accounts = BTreeMap::new();
    let mut orders = BTreeMap::new();
    for thumbprint in thumbprints {
        let Some(account) = acme.account_by_thumbprint(thumbprint) else {
            continue;
        };
        accounts.insert(account.id.0, account.clone());
        for order in acme.orders_of(account.id, OrderId(0), usize::MAX) {
            orders.insert(order.id.0, (order.clone(), order.status(acme.clock_ms())));
        }
    }
    FinalAcme {
        accounts,
        orders,
        revocations: acme.revocations().cloned().collect(),
        account_count: acme.account_count(),
        order_count: acme.order_count(),
    }
}

/// Looks at the orders every [`OBSERVE_EVERY`] on the node that has applied the most (a leader
/// cut off from the others still believes it leads, but its state stands still), and records
/// every version of an order that differs from the last one it recorded.
async fn observe(
    cluster: Arc<SimCluster>,
    shared: Shared,
    thumbprints: Arc<Vec<String>>,
    stopped: watch::Receiver<bool>,
    started: tokio::time::Instant,
) {
    let mut last: BTreeMap<u64, (Order, OrderStatus)> = BTreeMap::new();
    while !*stopped.borrow() {
        let freshest = cluster.replicas().into_iter().max_by_key(|(_, replica)| {
            replica
                .raft
                .metrics()
                .borrow()
                .last_applied
                .map_or(0, |log_id| log_id.index)
        });
        if let Some((id, replica)) = freshest {
            let tables = replica
                .reader
                .read(|applied| acme_tables(&applied.state, &thumbprints));
            let now_ms = elapsed_ms(started);
            let mut seen = Vec::new();
            for (order_id, version) in tables.orders {
                if last.get(&order_id) != Some(&version) {
                    seen.push(Sighting {
                        at_ms: now_ms,
                        seen_by: format!("observer n{id}"),
                        order: version.0.clone(),
                        status: version.1,
                    });
                    last.insert(order_id, version);
                }
            }
            if !seen.is_empty() {
                shared.with(|history| history.sightings.extend(seen));
            }
        }
        tokio::time::sleep(OBSERVE_EVERY).await;
    }
}

impl AcmeRun {
    /// The faults healed at `heal_ms`: clients stop placing orders a little later, so the last
    /// ones can be issued within the bound.
    pub fn healed(&self, heal_ms: u64) {
        self.create_until_ms
            .store(heal_ms + CREATE_AFTER_HEAL_MS, Ordering::SeqCst);
    }

    /// Waits (up to the bound) until every acknowledged finalize has been seen valid, stops the
    /// clients and the observer, reads every node's tables and judges the run.
    pub async fn finish(self, cluster: &SimCluster, heal_ms: u64) -> (Vec<Verdict>, AcmeReport) {
        self.create_until_ms.store(0, Ordering::SeqCst);
        let due_ms = heal_ms + CREATE_AFTER_HEAL_MS + VALID_BOUND_MS;
        loop {
            let all_valid = self.shared.with(|history| {
                history
                    .finalizes
                    .iter()
                    .filter(|finalize| finalize.outcome.acknowledged())
                    .all(|finalize| {
                        history.sightings.iter().any(|seen| {
                            seen.order.id.0 == finalize.order && seen.status == OrderStatus::Valid
                        })
                    })
            });
            if all_valid || elapsed_ms(self.started) >= due_ms {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.workload.stop().await;
        tokio::time::sleep(OBSERVE_EVERY * 3).await;
        let _ = self.stop_observer.send(true);
        let _ = self.observer.await;
        let end_ms = elapsed_ms(self.started);
        let thumbprints = Arc::clone(&self.thumbprints);
        let finals = settle(cluster, move |state| acme_tables(state, &thumbprints))
            .await
            .finals;
        let history = self.shared.with(|history| history.clone());
        let orders = self.setup.upstream_orders();
        let verdicts = vec![
            checkers::one_certificate(
                &history.finalizes,
                &history.sightings,
                &finals,
                &orders,
                heal_ms,
                VALID_BOUND_MS,
                end_ms,
            ),
            checkers::valid_needs_authorizations(
                &history.sightings,
                &finals,
                &history.accounts,
                &history.served,
                end_ms,
            ),
            checkers::replicas_agree(&finals),
            checkers::nonces_once(&history.issued_nonces, &history.used_nonces),
            clients_saw_no_violation(&history),
        ];
        let statuses = history
            .sightings
            .iter()
            .map(|seen| {
                (
                    seen.at_ms,
                    seen.seen_by.clone(),
                    seen.order.id.0,
                    seen.status,
                )
            })
            .collect();
        (
            verdicts,
            AcmeReport {
                history,
                statuses,
                orders,
            },
        )
    }
}

fn clients_saw_no_violation(history: &AcmeHistory) -> Verdict {
    let detail = format!(
        "{} accounts, {} orders placed ({} finalized, {} revoked), {} writes ({} unknown), {} \
         reads, {} HTTP-01 fetches answered",
        history.accounts.len(),
        history.placed.len(),
        history
            .finalizes
            .iter()
            .filter(|finalize| finalize.kind != Finalize::Again && finalize.outcome.acknowledged())
            .count(),
        history.revoked.len(),
        history.writes,
        history.writes_unknown,
        history.reads,
        history.served.len()
    );
    Verdict::of_violations("acme-clients", &history.violations, detail)
}
