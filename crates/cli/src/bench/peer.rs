//! Peers for `--peer`: another system's server, measured under the same workload right after
//! Certus. The benchmark runs the peer's installed binary itself, on loopback, each process with
//! a temp dir of its own, and kills every process when the run ends (on error too: a guard).
//!
//! A peer that is not installed is not an error: the benchmark says how to install it and
//! measures Certus alone.

use std::fs::File;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A system to compare with, and how to install it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Peer {
    /// What it is called in the output.
    pub(super) name: &'static str,
    /// The server binary.
    binary: &'static str,
    /// The Debian package that installs it.
    package: &'static str,
}

pub(super) const ETCD: Peer = Peer {
    name: "etcd",
    binary: "etcd",
    package: "etcd-server",
};

pub(super) const REDIS: Peer = Peer {
    name: "Redis",
    binary: "redis-server",
    package: "redis-server",
};

/// A peer's binary found on this machine.
#[derive(Debug, Clone)]
pub(super) struct Installed {
    pub(super) path: PathBuf,
    /// The version `<binary> --version` gives (`3.4.23`), or its first line if none is seen.
    pub(super) version: String,
}

/// Where Debian installs the peers' binaries, looked at when `PATH` does not have them.
const SYSTEM_BIN: &str = "/usr/bin";

/// The peer's binary, from `PATH` or `/usr/bin`; without one, says on stderr how to install it
/// and answers `None`, and the benchmark measures Certus alone.
pub(super) fn find(peer: Peer) -> Option<Installed> {
    let path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from(SYSTEM_BIN)])
        .map(|dir| dir.join(peer.binary))
        .find(|path| is_executable(path));
    let Some(path) = path else {
        eprintln!(
            "bench: --peer: {name} is not installed (no `{binary}` on PATH nor in {SYSTEM_BIN}). \
             Install it with `sudo apt-get install {package}` and run again to compare with \
             {name}; measuring Certus alone.",
            name = peer.name,
            binary = peer.binary,
            package = peer.package,
        );
        return None;
    };
    let version = Command::new(&path)
        .arg("--version")
        .output()
        .ok()
        .and_then(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .next()
                .map(version_in)
        })
        .unwrap_or_else(|| "version unknown".to_owned());
    Some(Installed { path, version })
}

/// The version number in the first line of `--version`'s output: `etcd Version: 3.4.23` or
/// `Redis server v=7.0.15 sha=…` give `3.4.23` and `7.0.15`; a line without one is kept whole.
fn version_in(line: &str) -> String {
    line.split_whitespace()
        .map(|word| word.trim_start_matches("v="))
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()) && word.contains('.'))
        .unwrap_or(line)
        .to_owned()
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// A peer's server processes and their temp dir: every process is killed, and the dir removed,
/// when this is dropped.
#[derive(Debug)]
pub(super) struct Processes {
    peer: Peer,
    dir: tempfile::TempDir,
    /// Each process with its name (for its data dir and log file).
    children: Vec<(String, Child)>,
}

/// Lines of a process's log quoted in an error about it.
const LOG_TAIL_LINES: usize = 20;

impl Processes {
    pub(super) fn new(peer: Peer) -> Result<Processes, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("certus-bench-{}-", peer.binary))
            .tempdir()
            .map_err(|error| format!("cannot create a temp dir for {}: {error}", peer.name))?;
        Ok(Processes {
            peer,
            dir,
            children: Vec::new(),
        })
    }

    /// A directory for process `name`'s data, created empty inside the temp dir.
    pub(super) fn data_dir(&self, name: &str) -> Result<PathBuf, String> {
        let path = self.dir.path().join(name);
        std::fs::create_dir(&path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        Ok(path)
    }

    /// Starts `binary args` as process `name`, its output to `<name>.log` in the temp dir.
    pub(super) fn spawn(
        &mut self,
        name: &str,
        binary: &Path,
        args: &[String],
    ) -> Result<(), String> {
        assert!(
            self.children.iter().all(|(known, _)| known != name),
            "process names are unique: {name}"
        );
        let log_path = self.log_path(name);
        let log = File::create(&log_path)
            .map_err(|error| format!("cannot create {}: {error}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|error| format!("cannot share {}: {error}", log_path.display()))?;
        let child = Command::new(binary)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|error| format!("cannot start {} ({name}): {error}", binary.display()))?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// An error naming the first process that has exited, with the end of its log.
    pub(super) fn check_running(&mut self) -> Result<(), String> {
        let mut exited = None;
        for (name, child) in &mut self.children {
            let status = child
                .try_wait()
                .map_err(|error| format!("cannot check on {name}: {error}"))?;
            if let Some(status) = status {
                exited = Some((name.clone(), status));
                break;
            }
        }
        match exited {
            None => Ok(()),
            Some((name, status)) => Err(format!(
                "{} process {name} exited ({status}); the end of its log:\n{}",
                self.peer.name,
                self.log_tail(&name)
            )),
        }
    }

    /// Waits, checking every 100 ms that the processes still run, until `ready` answers `Ok`
    /// or `timeout` passes; the error then says what `ready` last answered.
    pub(super) async fn await_ready<T, F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut ready: F,
    ) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_running()?;
            let last = match ready().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} not {what} within {} s (last: {last}); the end of the logs:\n{}",
                    self.peer.name,
                    timeout.as_secs(),
                    self.children
                        .iter()
                        .map(|(name, _)| format!("{name}:\n{}", self.log_tail(name)))
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    fn log_tail(&self, name: &str) -> String {
        let path = self.log_path(name);
        match std::fs::read_to_string(&path) {
            Ok(log) => {
                let lines: Vec<&str> = log.lines().collect();
                lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
            }
            Err(error) => format!("(cannot read {}: {error})", path.display()),
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (name, child) in &mut self.children {
            // Already exited is fine; anything else is worth a line, as the process may be left.
            if let Err(error) = child.kill()
                && error.kind() != std::io::ErrorKind::InvalidInput
            {
                eprintln!(
                    "bench: cannot kill {} process {name} (pid {}): {error}",
                    self.peer.name,
                    child.id()
                );
            }
            let _ = child.wait();
        }
    }
}

/// Runs `work`, a peer's part of a benchmark, ending it early on Ctrl-C: the processes it owns
/// are then dropped, and so killed, rather than left running after the benchmark.
pub(super) async fn interruptible<T>(
    peer: Peer,
    work: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let interrupted = async {
        // Without a signal handler Ctrl-C ends the process as usual: nothing to wait for.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = work => result,
        () = interrupted => Err(format!(
            "interrupted (Ctrl-C) while measuring {}; its processes are stopped",
            peer.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_the_peers_own_words() {
        assert_eq!(version_in("etcd Version: 3.4.23"), "3.4.23");
        assert_eq!(
            version_in("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"),
            "7.0.15"
        );
        assert_eq!(version_in("something else"), "something else");
    }

    #[test]
    fn a_peer_that_is_not_installed_is_not_found() {
        let missing = Peer {
            name: "nothing",
            binary: "certus-bench-no-such-server",
            package: "nothing-server",
        };
        assert!(find(missing).is_none());
    }

    #[test]
    fn processes_are_killed_when_their_guard_is_dropped() {
        let mut processes = Processes::new(Peer {
            name: "sleep",
            binary: "sleep",
            package: "coreutils",
        })
        .expect("a temp dir");
        let dir = processes.dir.path().to_owned();
        processes
            .spawn("long", Path::new("sleep"), &["600".to_owned()])
            .expect("sleep starts");
        processes.check_running().expect("sleep runs");
        let pid = processes.children[0].1.id();
        drop(processes);
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is gone"
        );
        assert!(!dir.exists(), "{} is removed", dir.display());
    }

    #[test]
    fn a_process_that_exits_is_reported_with_its_log() {
        let mut processes = Processes::new(Peer {
            name: "sh",
            binary: "sh",
            package: "dash",
        })
        .expect("a temp dir");
        processes
            .spawn(
                "failing",
                Path::new("sh"),
                &["-c".to_owned(), "echo bad flag; exit 3".to_owned()],
            )
            .expect("sh starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        let error = loop {
            match processes.check_running() {
                Err(error) => break error,
                Ok(()) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(()) => panic!("sh -c 'exit 3' still runs after 10 s"),
            }
        };
        assert!(error.contains("process failing exited"), "{error}");
        assert!(error.contains("bad flag"), "{error}");
    }
}
