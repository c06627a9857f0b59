//! A simulated cluster: nodes on 10.0.0.N, each with a disk that survives its crashes.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_core::{Command, Response};
use certus_node::{CertusNode, Clock, Leader, Node, NodeConfig, ServiceError};
use certus_store::SimDisk;
use madsim::runtime::{Handle, NodeHandle};

/// The gRPC port of every simulated node.
pub const GRPC_PORT: u16 = 7101;
/// The HTTP port of every simulated node (configured, not served: HTTP is real-socket only).
pub const HTTP_PORT: u16 = 7181;

/// The simulated address of node `id`.
pub fn node_ip(id: u64) -> IpAddr {
    let last = u8::try_from(id).expect("at most 254 simulated nodes");
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

fn config(id: u64) -> NodeConfig {
    NodeConfig::new(
        id,
        SocketAddr::new(node_ip(id), GRPC_PORT),
        SocketAddr::new(node_ip(id), HTTP_PORT),
        PathBuf::from(format!("/sim/node-{id}")),
    )
}

/// The running node of each simulated machine, as its init task published it.
type Running = Arc<Mutex<BTreeMap<u64, Arc<certus_node::Replica>>>>;

/// A cluster of simulated machines.
pub struct SimCluster {
    handle: Handle,
    machines: BTreeMap<u64, NodeHandle>,
    disks: BTreeMap<u64, SimDisk>,
    running: Running,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("nodes", &self.machines.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    /// Starts `count` nodes (ids 1..=count) founding one cluster. Node 1 initializes it.
    pub fn start(count: u64) -> SimCluster {
        let handle = Handle::current();
        let running: Running = Arc::default();
        let members: BTreeMap<u64, CertusNode> =
            (1..=count).map(|id| (id, config(id).member())).collect();
        let mut machines = BTreeMap::new();
        let mut disks = BTreeMap::new();
        for id in 1..=count {
            let disk = SimDisk::new();
            disks.insert(id, disk.clone());
            let running = Arc::clone(&running);
            let members = members.clone();
            let machine = handle
                .create_node()
                .name(format!("node-{id}"))
                .ip(node_ip(id))
                .init(move || {
                    let disk = disk.clone();
                    let running = Arc::clone(&running);
                    let members = members.clone();
                    async move {
                        let node = Node::start_on(config(id), Arc::new(disk), Clock::system())
                            .await
                            .expect("a simulated node starts");
                        if id == 1 {
                            node.initialize(members).await.expect("initialize");
                        }
                        running
                            .lock()
                            .expect("running table")
                            .insert(id, Arc::clone(node.replica()));
                        // A node's init task must not return, or madsim stops the node's tasks.
                        std::future::pending::<()>().await;
                        drop(node);
                    }
                })
                .build();
            machines.insert(id, machine);
        }
        SimCluster {
            handle,
            machines,
            disks,
            running,
        }
    }

    /// The node `id` as it runs now, if it does.
    pub fn replica(&self, id: u64) -> Option<Arc<certus_node::Replica>> {
        self.running
            .lock()
            .expect("running table")
            .get(&id)
            .cloned()
    }

    /// Crashes node `id`: its tasks stop and its disk loses what was not flushed.
    pub fn crash(&self, id: u64) {
        self.running.lock().expect("running table").remove(&id);
        self.handle.kill(self.machines[&id].id());
        self.disks[&id].crash();
    }

    /// Restarts a crashed node on its disk.
    pub fn restart(&self, id: u64) {
        self.handle.restart(self.machines[&id].id());
    }

    /// Waits until a running node leads, and returns its id.
    pub async fn leader(&self, timeout: Duration) -> Option<u64> {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            let running: Vec<(u64, Arc<certus_node::Replica>)> = self
                .running
                .lock()
                .expect("running table")
                .iter()
                .map(|(id, replica)| (*id, Arc::clone(replica)))
                .collect();
            if let Some((id, _)) = running
                .iter()
                .find(|(_, replica)| replica.leader() == Some(Leader::Me))
            {
                return Some(*id);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Proposes `commands` through node `via` (forwarded to the leader if need be).
    pub async fn write(
        &self,
        via: u64,
        commands: Vec<Command>,
    ) -> Result<Vec<Response>, ServiceError> {
        let replica = self
            .replica(via)
            .ok_or_else(|| ServiceError::Unavailable(format!("node {via} is down")))?;
        // The write runs on the node's machine, as a client request would.
        let machine = self
            .handle
            .get_node(self.machines[&via].id())
            .expect("machine");
        machine
            .spawn(async move { replica.write(commands).await })
            .await
            .expect("the write task ran")
    }
}
