//! The peer of `certus bench pipelines --peer`: Redis, started from the installed
//! `redis-server` on loopback in two setups, under the same cycle as Certus, one transaction at
//! a time per client, each client over its own connection:
//!
//! - [`Setup::Single`]: one process, every write appended to its AOF and fsynced before the
//!   answer (`appendonly yes`, `appendfsync always`).
//! - [`Setup::Replicated`]: a primary and two replicas (`replicaof`), each with that AOF, and
//!   `WAIT 2` after every step: the step counts once both replicas acknowledged it.
//!
//! A cycle is LPUSH of a small JSON state onto the client's queue → LMOVE of it onto the
//! client's processing list (it must be the value just pushed) → LREM of it from there (exactly
//! one removed).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::super::peer::{self, Installed, Processes};
use super::super::{WARM_UP, free_addr};
use super::{ClientOutcome, Failure, Round, Run};

/// How Redis's rows are labelled in the mode column: one command per step whatever the mode
/// Certus ran in.
pub(super) const MODE: &str = "a command per step";

/// How Redis is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Setup {
    /// One process, AOF fsynced on every write.
    Single,
    /// A primary and [`REPLICAS`] replicas, each with that AOF; `WAIT` after every step.
    Replicated,
}

impl Setup {
    /// What its rows are called.
    pub(super) fn system(self) -> &'static str {
        match self {
            Setup::Single => "Redis",
            Setup::Replicated => "Redis + 2 replicas",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Setup::Single => "1 process on loopback, appendonly yes, appendfsync always",
            Setup::Replicated => {
                "a primary and 2 replicas on loopback, each appendonly yes, appendfsync always; \
                 WAIT 2 after every step"
            }
        }
    }
}

/// Replicas of [`Setup::Replicated`], and so the count `WAIT` waits for.
const REPLICAS: usize = 2;
/// The longest `WAIT` waits for the replicas: a step they have not acknowledged by then
/// fails. (WAIT answers as soon as they have, so the bound costs nothing.)
const WAIT_TIMEOUT_MS: u64 = 5_000;
/// From start to answering (and, replicated, to both replicas in sync).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds of one connection attempt and of one command's answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Running Redis processes of one setup; they die with it.
#[derive(Debug)]
pub(super) struct RedisSetup {
    setup: Setup,
    _processes: Processes,
    primary: SocketAddr,
}

impl RedisSetup {
    pub(super) async fn start(redis: &Installed, setup: Setup) -> Result<RedisSetup, String> {
        let mut processes = Processes::new(peer::REDIS)?;
        let primary = free_addr()?;
        let replicas = match setup {
            Setup::Single => 0,
            Setup::Replicated => REPLICAS,
        };
        let mut servers = vec![("primary".to_owned(), primary)];
        for index in 1..=replicas {
            servers.push((format!("replica-{index}"), free_addr()?));
        }
        for (name, addr) in &servers {
            let data_dir = processes.data_dir(name)?;
            let mut args = server_args(*addr, &data_dir.display().to_string());
            if *addr != primary {
                args.extend([
                    "--replicaof".to_owned(),
                    primary.ip().to_string(),
                    primary.port().to_string(),
                ]);
            }
            processes.spawn(name, &redis.path, &args)?;
        }
        for (name, addr) in &servers {
            processes
                .await_ready("answering", START_TIMEOUT, || async move {
                    let mut connection = connect(*addr).await?;
                    redis::cmd("PING")
                        .query_async::<String>(&mut connection)
                        .await
                        .map(drop)
                        .map_err(|error| format!("{name}: PING: {error}"))
                })
                .await?;
        }
        if replicas > 0 {
            processes
                .await_ready("in sync with both replicas", START_TIMEOUT, || {
                    replicas_online(primary, replicas)
                })
                .await?;
        }
        Ok(RedisSetup {
            setup,
            _processes: processes,
            primary,
        })
    }

    pub(super) fn describe(&self) -> &'static str {
        self.setup.describe()
    }
}

/// `redis-server`'s command line for one durable server on loopback, with no config file: every
/// write is appended to the AOF and fsynced before the answer, and no RDB snapshots are taken.
pub(super) fn server_args(addr: SocketAddr, data_dir: &str) -> Vec<String> {
    [
        ("--port", addr.port().to_string()),
        ("--bind", addr.ip().to_string()),
        ("--dir", data_dir.to_owned()),
        ("--appendonly", "yes".to_owned()),
        ("--appendfsync", "always".to_owned()),
        ("--save", String::new()),
        ("--daemonize", "no".to_owned()),
        ("--loglevel", "warning".to_owned()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect()
}

/// `Ok` once the primary has `replicas` replicas online; an error says what it reports.
async fn replicas_online(primary: SocketAddr, replicas: usize) -> Result<(), String> {
    let mut connection = connect(primary).await?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut connection)
        .await
        .map_err(|error| format!("INFO replication: {error}"))?;
    let online = info
        .lines()
        .filter(|line| line.starts_with("slave") && line.contains("state=online"))
        .count();
    if online == replicas {
        Ok(())
    } else {
        Err(format!("{online} of {replicas} replicas online"))
    }
}

async fn connect(addr: SocketAddr) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(format!("redis://{addr}/"))
        .map_err(|error| format!("redis://{addr}/: {error}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|error| format!("connecting to Redis at {addr}: {error}"))
}

/// One run of `clients` clients, each over its own connection to the primary; answers it with
/// the cycles that completed, warm-up included.
pub(super) async fn measure(
    redis: &RedisSetup,
    round: usize,
    clients: usize,
    duration: Duration,
) -> Result<(Run, u64), String> {
    let setup = redis.setup;
    let start = Instant::now() + WARM_UP;
    let end = start + duration;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let mut connection = connect(redis.primary).await?;
        let queue = format!("bench:{round}:{client}:in");
        let processing = format!("bench:{round}:{client}:processing");
        tasks.push(tokio::spawn(async move {
            let mut outcome = ClientOutcome::default();
            let who = format!("{}: {queue}", setup.system());
            let mut n = 0u64;
            loop {
                let began = Instant::now();
                if began >= end {
                    break;
                }
                n += 1;
                let counted = began >= start;
                let round = match cycle(&mut connection, setup, &queue, &processing, n).await {
                    Ok(steps) => Round {
                        steps: Some(steps),
                        cycles: 1,
                        completed: 1,
                        failures: Vec::new(),
                    },
                    Err(error) => {
                        // `LMOVE: moved …`: the command, then what went wrong.
                        let (step, what) = error.split_once(": ").unwrap_or(("redis", &error));
                        let kind: String = what.chars().take(60).collect();
                        Round::failed(Failure::other(step, &kind, what.to_owned()))
                    }
                };
                outcome.absorb(&who, round, counted, began.elapsed());
            }
            outcome
        }));
    }
    super::gather(
        setup.system(),
        MODE.to_owned(),
        clients,
        duration,
        None,
        tasks,
    )
    .await
}

/// LPUSH → LMOVE → LREM of one transaction's state, each followed by `WAIT` when replicated;
/// answers each step's latency (its `WAIT` included).
async fn cycle(
    connection: &mut MultiplexedConnection,
    setup: Setup,
    queue: &str,
    processing: &str,
    n: u64,
) -> Result<[Duration; 3], String> {
    let state = format!(r#"{{"n":{n},"step":"new"}}"#);

    let began = Instant::now();
    let length: u64 = redis::cmd("LPUSH")
        .arg(queue)
        .arg(&state)
        .query_async(connection)
        .await
        .map_err(|error| format!("LPUSH: {error}"))?;
    if length != 1 {
        return Err(format!(
            "LPUSH: the queue holds {length}, not just this one"
        ));
    }
    replicated(connection, setup, "LPUSH").await?;
    let enqueue = began.elapsed();

    let began = Instant::now();
    let moved: Option<String> = redis::cmd("LMOVE")
        .arg(queue)
        .arg(processing)
        .arg("RIGHT")
        .arg("LEFT")
        .query_async(connection)
        .await
        .map_err(|error| format!("LMOVE: {error}"))?;
    if moved.as_deref() != Some(state.as_str()) {
        return Err(format!("LMOVE: moved {moved:?}, not {state} just pushed"));
    }
    replicated(connection, setup, "LMOVE").await?;
    let dequeue = began.elapsed();

    let began = Instant::now();
    let removed: u64 = redis::cmd("LREM")
        .arg(processing)
        .arg(1)
        .arg(&state)
        .query_async(connection)
        .await
        .map_err(|error| format!("LREM: {error}"))?;
    if removed != 1 {
        return Err(format!("LREM: removed {removed}, not the one moved"));
    }
    replicated(connection, setup, "LREM").await?;
    let complete = began.elapsed();
    Ok([enqueue, dequeue, complete])
}

/// In [`Setup::Replicated`], `WAIT` until both replicas acknowledge the write just made.
async fn replicated(
    connection: &mut MultiplexedConnection,
    setup: Setup,
    step: &str,
) -> Result<(), String> {
    if setup == Setup::Single {
        return Ok(());
    }
    let acknowledged: usize = redis::cmd("WAIT")
        .arg(REPLICAS)
        .arg(WAIT_TIMEOUT_MS)
        .query_async(connection)
        .await
        .map_err(|error| format!("WAIT after {step}: {error}"))?;
    if acknowledged < REPLICAS {
        return Err(format!(
            "WAIT after {step}: {acknowledged} of {REPLICAS} replicas acknowledged within \
             {WAIT_TIMEOUT_MS} ms"
        ));
    }
    Ok(())
}
