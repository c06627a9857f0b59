//! The node's long-running tasks, and which of them ended while the node was meant to run.
//!
//! A node whose proposer, ticks or CT round has died still answers HTTP and gRPC, and would look
//! healthy to a probe that only asks whether the process is up. Every long-running task is
//! spawned through [`Tasks::spawn`]; one that ends (returns or panics) before the node stops is
//! recorded, and liveness fails (`services::health::liveness`) so that a supervisor restarts the
//! node.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The node's long-running tasks, by name.
#[derive(Debug, Default)]
pub struct Tasks {
    stopping: AtomicBool,
    /// Names of tasks that ended while the node ran, in the order they ended (each name at most
    /// once: names are the node's fixed set, so this stays bounded).
    ended: Mutex<Vec<&'static str>>,
}

impl Tasks {
    /// No task yet.
    pub fn new() -> Arc<Tasks> {
        Arc::new(Tasks::default())
    }

    /// Spawns `future` as the task `name`, whose end before [`Tasks::stopping`] is recorded.
    pub fn spawn<F>(self: &Arc<Self>, name: &'static str, future: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let watch = Running {
            name,
            tasks: Arc::clone(self),
        };
        tokio::spawn(async move {
            // Dropped when the future returns and when it unwinds from a panic.
            let _watch = watch;
            future.await;
        })
    }

    /// The node is stopping: tasks that end from now on are expected to.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// The tasks that ended while the node ran.
    pub fn ended(&self) -> Vec<&'static str> {
        self.ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Held by a running task; records the task's end unless the node is stopping.
struct Running {
    name: &'static str,
    tasks: Arc<Tasks>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.tasks.stopping.load(Ordering::SeqCst) {
            return;
        }
        tracing::error!(
            task = self.name,
            "a node task ended while the node runs; liveness now fails so that it is restarted"
        );
        let mut ended = self
            .tasks
            .ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !ended.contains(&self.name) {
            ended.push(self.name);
        }
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_returns_or_panics_while_running_is_recorded_once() {
        let tasks = Tasks::new();
        tasks.spawn("returns", async {}).await.unwrap();
        tasks.spawn("returns", async {}).await.unwrap();
        let panicked = tasks
            .spawn("panics", async { panic!("a task's bug") })
            .await;
        assert!(panicked.is_err());
        assert_eq!(tasks.ended(), vec!["returns", "panics"]);
    }

    #[tokio::test]
    async fn tasks_that_end_once_the_node_stops_are_not_recorded() {
        let tasks = Tasks::new();
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let running = tasks.spawn("waits", async move {
            let _ = wait.await;
        });
        tasks.stopping();
        release.send(()).unwrap();
        running.await.unwrap();
        assert!(tasks.ended().is_empty());
    }
}
