//! `certus bench sessions`: CA issuance sessions driven end to end on a 3-node cluster on
//! loopback in this process, every node running the session daemons with the built-in issuer.
//!
//! For each C in `--clients`, C clients (each a `certus-client` of its own) loop for
//! `--seconds`: create a session for a fresh DNS name with a CSR made before the bench
//! ([`applicants`]), long-poll it to `DONE` (`Sessions/Wait`), check the certificate it carries
//! chains to the cluster CA and certifies the CSR's key for that name ([`verify`]), and
//! acknowledge it. Reported: sessions acknowledged per second within the window (after the
//! warm-up), create→`DONE` latency of the sessions created in the window, how much of it went to
//! making the challenges and how much to testing and issuing, how many sessions needed a second
//! HTTP-01 test, and every failure — a failed, killed, stuck or badly issued session fails the
//! bench.
//!
//! HTTP-01 on loopback: every name points (`[sessions] http01_resolve`, whose addresses carry
//! their own port instead of RFC 8555's port 80) at the applicants' web server ([`responder`]),
//! or with `--challenges-at nodes` at the nodes' HTTP ports, where the cluster serves the tokens
//! its makechallenge daemon stored.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use certus_client::Client;
use certus_node::{NodeConfig, SessionsSetup};
use certus_proto::v1::SessionConfig;
use comfy_table::Table;
use serde_json::{Value, json};

use super::{WARM_UP, free_addr, percentile};
use crate::cluster::{await_leader, start_local};

mod applicants;
mod drive;
mod responder;
mod verify;

use applicants::Applicants;
use drive::{Completed, Driven, Failure, FailureKind, SESSION_PATIENCE};
use responder::Responder;
use verify::CertificateCheck;

/// Options of `certus bench sessions`.
#[derive(Debug, clap::Args)]
pub(crate) struct SessionsArgs {
    /// Concurrent clients, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    clients: Vec<usize>,
    /// How long each run measures, in seconds (after a one-second warm-up).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// CSRs (and names) are made before measuring, enough for this many sessions per second of
    /// every run; a run that uses them all fails and says so.
    #[arg(long, default_value_t = 1_000)]
    session_rate_max: u64,
    /// Who answers the HTTP-01 challenges: the applicants' own web server, or the nodes.
    #[arg(long, value_enum, default_value_t = ChallengesAt::Clients)]
    challenges_at: ChallengesAt,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Where the names point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ChallengesAt {
    /// A web server of the clients answers every token with its key authorization, as the
    /// applicant's server would in production.
    Clients,
    /// Name i points at node i mod 3, which serves the token from the replicated state.
    Nodes,
}

impl SessionsArgs {
    fn check(&self) -> Result<(), String> {
        super::check_client_counts(&self.clients)?;
        if self.seconds == 0 || self.session_rate_max == 0 {
            return Err("--seconds and --session-rate-max must be at least 1".into());
        }
        Ok(())
    }

    /// Applicants for every run at up to `--session-rate-max` sessions per second (warm-up
    /// included), plus one in flight per client when its run ends.
    fn applicants_needed(&self) -> Result<usize, String> {
        let per_run = (self.seconds + WARM_UP.as_secs()) * self.session_rate_max;
        let in_flight: u64 = self.clients.iter().map(|&clients| clients as u64).sum();
        let total = per_run * self.clients.len() as u64 + in_flight;
        usize::try_from(total).map_err(|_| format!("{total} applicants do not fit in memory"))
    }
}

pub(super) async fn run(args: SessionsArgs) -> Result<(), String> {
    args.check()?;
    let count = args.applicants_needed()?;
    let began = Instant::now();
    let applicants = Arc::new(Applicants::generate(count)?);
    eprintln!(
        "bench sessions: made {count} CSRs (ECDSA P-256, one name each) in {:.1} s",
        began.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
    let (ca_key_file, ca_cert_file, _) = crate::ca_files::ensure_ca(dir.path())?;
    let ca_pem = std::fs::read_to_string(&ca_cert_file).map_err(|error| error.to_string())?;
    let check = Arc::new(CertificateCheck::new(&ca_pem)?);

    let mut configs = Vec::new();
    for id in 1..=3 {
        configs.push(NodeConfig::new(
            id,
            free_addr()?,
            free_addr()?,
            dir.path().join(format!("node-{id}")),
        ));
    }
    // Kept alive until the nodes are shut down.
    let responder = match args.challenges_at {
        ChallengesAt::Clients => Some(
            Responder::start(
                applicants
                    .all()
                    .iter()
                    .map(|applicant| (applicant.name.clone(), applicant.thumbprint.clone()))
                    .collect::<HashMap<_, _>>(),
            )
            .await?,
        ),
        ChallengesAt::Nodes => None,
    };
    let node_http: Vec<SocketAddr> = configs.iter().map(|config| config.http_addr).collect();
    let http01_resolve: BTreeMap<String, SocketAddr> = applicants
        .all()
        .iter()
        .enumerate()
        .map(|(n, applicant)| {
            let at = responder
                .as_ref()
                .map_or(node_http[n % node_http.len()], Responder::addr);
            (applicant.name.clone(), at)
        })
        .collect();
    for config in &mut configs {
        config.sessions = SessionsSetup {
            daemons: true,
            ca_key_file: Some(ca_key_file.clone()),
            ca_cert_file: Some(ca_cert_file.clone()),
            http01_resolve: http01_resolve.clone(),
            ..SessionsSetup::default()
        };
    }
    let endpoints: Vec<String> = configs
        .iter()
        .map(|config| config.grpc_addr.to_string())
        .collect();
    let configs = super::unlimited(configs);
    let nodes = start_local(&configs).await?;
    let result = measure_all(&args, &nodes, &endpoints, &applicants, &check).await;
    for node in nodes {
        node.shutdown().await;
    }
    drop(responder);
    let report = result?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        report.print();
    }
    report.verdict()
}

async fn measure_all(
    args: &SessionsArgs,
    nodes: &[certus_node::Node],
    endpoints: &[String],
    applicants: &Arc<Applicants>,
    check: &Arc<CertificateCheck>,
) -> Result<Report, String> {
    let leader = await_leader(nodes, Duration::from_secs(10))
        .await
        .ok_or("no leader elected within 10 s")?;
    let config = make_room(endpoints, applicants.all().len()).await?;
    eprintln!(
        "bench sessions: 3 nodes on loopback (sled, fsync per batch), leader node {leader}; \
         test_retry_ms {}, max_tests {}",
        config.test_retry_ms, config.max_tests
    );
    let mut runs = Vec::new();
    for &clients in &args.clients {
        let run = measure(endpoints, applicants, check, clients, args.seconds).await?;
        eprintln!(
            "bench sessions: x{clients}: {:.1} sessions/s, create→done p50 {} ms, {} failed",
            run.per_second(),
            ms(percentile(&run.create_to_done_us, 0.50)),
            run.failure_count()
        );
        let ran_out = run.ran_out;
        runs.push(run);
        if ran_out {
            eprintln!(
                "bench sessions: x{clients} used every pre-made CSR before its {} s were over; \
                 run again with a --session-rate-max above {}",
                args.seconds, args.session_rate_max
            );
            break;
        }
    }
    Ok(Report {
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        leader,
        challenges_at: args.challenges_at,
        config,
        runs,
    })
}

/// The sessions' configuration in force, with `sessions_max` raised if the table (archived
/// sessions included, kept 7 days) could otherwise refuse this bench's sessions.
async fn make_room(endpoints: &[String], sessions: usize) -> Result<SessionConfig, String> {
    let admin = Client::new(endpoints).map_err(|error| error.to_string())?;
    let config = admin
        .sessions_status()
        .await
        .map_err(|error| format!("Sessions/Status: {error}"))?
        .config
        .ok_or("Sessions/Status carries no configuration")?;
    let needed = sessions as u64;
    if config.sessions_max >= needed {
        return Ok(config);
    }
    admin
        .set_session_config(SessionConfig {
            sessions_max: needed,
            ..config
        })
        .await
        .map_err(|error| format!("raising sessions_max to {needed}: {error}"))
}

async fn measure(
    endpoints: &[String],
    applicants: &Arc<Applicants>,
    check: &Arc<CertificateCheck>,
    clients: usize,
    seconds: u64,
) -> Result<Run, String> {
    let duration = Duration::from_secs(seconds);
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        // A client each: its own connections, as separate applicants would have.
        let client = Client::new(endpoints).map_err(|error| error.to_string())?;
        tasks.push(tokio::spawn(drive::client_loop(
            client,
            Arc::clone(applicants),
            Arc::clone(check),
            end,
        )));
    }
    let mut sessions = Vec::new();
    let mut ran_out = false;
    for task in tasks {
        let report = task.await.map_err(|error| error.to_string())?;
        sessions.extend(report.sessions);
        ran_out |= report.ran_out;
    }
    Ok(Run::new(clients, duration, start, end, sessions, ran_out))
}

/// Failures of one kind: how many, and the first one's detail.
#[derive(Debug)]
struct FailureCount {
    count: usize,
    example: String,
}

/// One run.
#[derive(Debug)]
struct Run {
    clients: usize,
    elapsed: Duration,
    /// Every session the clients created, warm-up and drain included.
    driven: usize,
    /// Sessions acknowledged within the measured window.
    completed_in_window: usize,
    /// Create→`DONE` of the completed sessions created within the window, sorted.
    create_to_done_us: Vec<u64>,
    /// Time in the stages of the same sessions, each list sorted.
    make_challenge_ms: Vec<u64>,
    test_and_issue_ms: Vec<u64>,
    /// Sessions (all of them) whose challenge needed more than one HTTP-01 test.
    retested: usize,
    failures: BTreeMap<FailureKind, FailureCount>,
    ran_out: bool,
}

impl Run {
    fn new(
        clients: usize,
        elapsed: Duration,
        start: Instant,
        end: Instant,
        sessions: Vec<Driven>,
        ran_out: bool,
    ) -> Run {
        let mut run = Run {
            clients,
            elapsed,
            driven: sessions.len(),
            completed_in_window: 0,
            create_to_done_us: Vec::new(),
            make_challenge_ms: Vec::new(),
            test_and_issue_ms: Vec::new(),
            retested: 0,
            failures: BTreeMap::new(),
            ran_out,
        };
        for Driven { created_at, result } in sessions {
            match result {
                Ok(completed) => run.count_completed(&completed, created_at, start, end),
                Err(Failure { kind, detail }) => {
                    run.failures
                        .entry(kind)
                        .or_insert(FailureCount {
                            count: 0,
                            example: detail,
                        })
                        .count += 1;
                }
            }
        }
        for sorted in [
            &mut run.create_to_done_us,
            &mut run.make_challenge_ms,
            &mut run.test_and_issue_ms,
        ] {
            sorted.sort_unstable();
        }
        run
    }

    fn count_completed(
        &mut self,
        completed: &Completed,
        created_at: Instant,
        start: Instant,
        end: Instant,
    ) {
        if completed.tests > 1 {
            self.retested += 1;
        }
        if (start..end).contains(&completed.acknowledged_at) {
            self.completed_in_window += 1;
        }
        if !(start..end).contains(&created_at) {
            return;
        }
        self.create_to_done_us.push(completed.create_to_done_us);
        self.make_challenge_ms
            .push(completed.stages_ms.make_challenge);
        self.test_and_issue_ms
            .push(completed.stages_ms.test_and_issue);
    }

    fn per_second(&self) -> f64 {
        self.completed_in_window as f64 / self.elapsed.as_secs_f64()
    }

    fn failure_count(&self) -> usize {
        self.failures.values().map(|failure| failure.count).sum()
    }
}

/// Everything `bench sessions` measured.
#[derive(Debug)]
struct Report {
    cpus: usize,
    leader: u64,
    challenges_at: ChallengesAt,
    config: SessionConfig,
    runs: Vec<Run>,
}

impl Report {
    /// The bench fails when any session failed, or a run ran out of CSRs.
    fn verdict(&self) -> Result<(), String> {
        let failed: usize = self.runs.iter().map(Run::failure_count).sum();
        if failed > 0 {
            return Err(format!(
                "{failed} sessions did not end acknowledged with a good certificate (see the \
                 failures above)"
            ));
        }
        if self.runs.iter().any(|run| run.ran_out) {
            return Err("a run used every pre-made CSR; raise --session-rate-max".into());
        }
        Ok(())
    }

    fn challenges_at_text(&self) -> &'static str {
        match self.challenges_at {
            ChallengesAt::Clients => "the applicants' web server (stateless responder)",
            ChallengesAt::Nodes => "the nodes (tokens from the replicated state)",
        }
    }

    fn to_json(&self) -> Value {
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|run| {
                let failures: BTreeMap<&str, Value> = run
                    .failures
                    .iter()
                    .map(|(kind, failure)| {
                        (
                            kind.name(),
                            json!({ "count": failure.count, "example": failure.example }),
                        )
                    })
                    .collect();
                json!({
                    "clients": run.clients,
                    "sessions": run.driven,
                    "completed_in_window": run.completed_in_window,
                    "sessions_per_second": run.per_second(),
                    "create_to_done_p50_ms": us_to_ms(percentile(&run.create_to_done_us, 0.50)),
                    "create_to_done_p99_ms": us_to_ms(percentile(&run.create_to_done_us, 0.99)),
                    "create_to_done_max_ms": us_to_ms(percentile(&run.create_to_done_us, 1.0)),
                    "make_challenge_p50_ms": percentile(&run.make_challenge_ms, 0.50),
                    "make_challenge_p99_ms": percentile(&run.make_challenge_ms, 0.99),
                    "test_and_issue_p50_ms": percentile(&run.test_and_issue_ms, 0.50),
                    "test_and_issue_p99_ms": percentile(&run.test_and_issue_ms, 0.99),
                    "retested": run.retested,
                    "failures": failures,
                    "ran_out_of_csrs": run.ran_out,
                })
            })
            .collect();
        json!({
            "bench": "sessions",
            "cpus": self.cpus,
            "nodes": 3,
            "leader": self.leader,
            "challenges_at": match self.challenges_at {
                ChallengesAt::Clients => "clients",
                ChallengesAt::Nodes => "nodes",
            },
            "test_retry_ms": self.config.test_retry_ms,
            "max_tests": self.config.max_tests,
            "session_patience_s": SESSION_PATIENCE.as_secs(),
            "runs": runs,
        })
    }

    fn print(&self) {
        println!(
            "CA issuance sessions, 3 nodes on loopback in this process (sled, fsync per batch), \
             leader node {}, {} CPUs; every node runs the daemons and issues with the cluster CA",
            self.leader, self.cpus
        );
        println!(
            "one fresh name per session; HTTP-01 answered by {}; test_retry_ms {}, max_tests {}; \
             every certificate checked against the CA before it is acknowledged",
            self.challenges_at_text(),
            self.config.test_retry_ms,
            self.config.max_tests
        );
        let mut table = Table::new();
        table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        table.set_header([
            "clients",
            "sessions/s",
            "create→done p50 ms",
            "p99 ms",
            "max ms",
            "make p50/p99 ms",
            "test+issue p50/p99 ms",
            "retested",
            "failures",
        ]);
        for run in &self.runs {
            table.add_row([
                run.clients.to_string(),
                format!("{:.1}", run.per_second()),
                ms(percentile(&run.create_to_done_us, 0.50)),
                ms(percentile(&run.create_to_done_us, 0.99)),
                ms(percentile(&run.create_to_done_us, 1.0)),
                p50_p99(&run.make_challenge_ms),
                p50_p99(&run.test_and_issue_ms),
                run.retested.to_string(),
                run.failure_count().to_string(),
            ]);
        }
        println!("{table}");
        println!(
            "sessions/s: acknowledged within the {} s window after a {} s warm-up; latencies: \
             the sessions created in the window; stage times by the cluster's clock (make: from \
             the create to the challenges made; test+issue: from then to DONE)",
            self.runs.first().map_or(0, |run| run.elapsed.as_secs()),
            WARM_UP.as_secs()
        );
        for run in &self.runs {
            for (kind, failure) in &run.failures {
                println!(
                    "x{}: {} {}, e.g. {}",
                    run.clients,
                    failure.count,
                    kind.name(),
                    failure.example
                );
            }
        }
    }
}

/// Microseconds as milliseconds with one decimal.
fn ms(us: Option<u64>) -> String {
    us.map_or_else(|| "-".to_owned(), |us| format!("{:.1}", us as f64 / 1000.0))
}

/// The median and 99th percentile of sorted milliseconds, as `p50 / p99`.
fn p50_p99(sorted_ms: &[u64]) -> String {
    match (percentile(sorted_ms, 0.50), percentile(sorted_ms, 0.99)) {
        (Some(p50), Some(p99)) => format!("{p50} / {p99}"),
        _ => "-".to_owned(),
    }
}

fn us_to_ms(us: Option<u64>) -> Value {
    us.map_or(Value::Null, |us| json!(us as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(clients: Vec<usize>) -> SessionsArgs {
        SessionsArgs {
            clients,
            seconds: 10,
            session_rate_max: 1_000,
            challenges_at: ChallengesAt::Clients,
            json: false,
        }
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            sessions: SessionsArgs,
        }
        let defaults = Cli::try_parse_from(["sessions"]).expect("parses").sessions;
        assert_eq!(defaults.clients, [1, 16, 64]);
        assert_eq!(defaults.seconds, 10);
        assert_eq!(defaults.session_rate_max, 1_000);
        assert_eq!(defaults.challenges_at, ChallengesAt::Clients);
        assert!(!defaults.json);
        let nodes = Cli::try_parse_from(["sessions", "--challenges-at", "nodes", "--json"])
            .expect("parses")
            .sessions;
        assert_eq!(nodes.challenges_at, ChallengesAt::Nodes);
        assert!(nodes.json);
    }

    #[test]
    fn applicants_cover_every_run_at_the_highest_rate_and_the_last_sessions_in_flight() {
        let three_runs = args(vec![1, 16, 64]);
        three_runs.check().expect("valid");
        assert_eq!(three_runs.applicants_needed(), Ok(3 * 11 * 1_000 + 81));
        assert!(args(vec![]).check().is_err());
        assert!(args(vec![4, 0]).check().is_err());
    }

    #[test]
    fn a_run_counts_completions_in_the_window_and_latencies_of_sessions_created_in_it() {
        let start = Instant::now();
        let end = start + Duration::from_secs(10);
        let completed = |created_at: Instant, done_after_ms: u64, tests: u32| Driven {
            created_at,
            result: Ok(Completed {
                create_to_done_us: done_after_ms * 1000,
                acknowledged_at: created_at + Duration::from_millis(done_after_ms + 5),
                stages_ms: drive::StagesMs {
                    make_challenge: 20,
                    test_and_issue: done_after_ms - 20,
                },
                tests,
            }),
        };
        let before = start
            .checked_sub(Duration::from_millis(500))
            .expect("a start");
        let sessions = vec![
            // Created in the warm-up, acknowledged in the window: counted, not timed.
            completed(before, 900, 1),
            completed(start + Duration::from_secs(1), 200, 2),
            // Created in the window, acknowledged after it: timed, not counted.
            completed(end - Duration::from_millis(10), 300, 1),
            Driven {
                created_at: start,
                result: Err(Failure {
                    kind: FailureKind::Killed,
                    detail: "session 9 was killed: max tests".into(),
                }),
            },
        ];
        let run = Run::new(4, end - start, start, end, sessions, false);
        assert_eq!(run.driven, 4);
        assert_eq!(run.completed_in_window, 2);
        assert_eq!(run.create_to_done_us, [200_000, 300_000]);
        assert_eq!(run.make_challenge_ms, [20, 20]);
        assert_eq!(run.test_and_issue_ms, [180, 280]);
        assert_eq!(run.retested, 1);
        assert_eq!(run.failure_count(), 1);
        assert!((run.per_second() - 0.2).abs() < 1e-9);
        let report = Report {
            cpus: 2,
            leader: 1,
            challenges_at: ChallengesAt::Clients,
            config: SessionConfig::default(),
            runs: vec![run],
        };
        let verdict = report
            .verdict()
            .expect_err("a killed session fails the bench");
        assert!(verdict.contains("1 sessions"), "{verdict}");
        assert_eq!(
            report.to_json()["runs"][0]["failures"]["killed"]["count"],
            1
        );
    }
}
