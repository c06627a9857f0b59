//! Nodes on their own network hosts, for partitions: one Linux network namespace per node, each
//! joined to a bridge in the test's namespace by a veth pair. Taking a node's link down cuts it
//! off from its peers and from the clients (which stay in the test's namespace, on the bridge);
//! bringing it up heals it. Needs `ip` (iproute2) and the right to make namespaces (root); where
//! the machine does not allow it, [`Network::create`] says why and the tests run without
//! partitions.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

/// The namespaces, links and bridge of one test run; removed when dropped.
#[derive(Debug)]
pub struct Network {
    /// Distinguishes this run's names and subnet from a concurrent run's.
    tag: u32,
    hosts: u8,
    bridge: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| format!("ip {}: {error}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Network {
    /// `hosts` namespaces on a fresh bridge, or why they cannot be made here.
    pub fn create(hosts: u8) -> Result<Network, String> {
        // Names must fit 15 bytes; the subnet 10.77.<tag % 250>.0/24 keeps runs apart.
        let tag = std::process::id() % 100_000;
        let network = Network {
            tag,
            hosts,
            bridge: format!("cbr{tag}"),
        };
        // Dropping `network` on an error removes whatever was made.
        ip(&["link", "add", &network.bridge, "type", "bridge"])?;
        let bridge_addr = format!("{}/24", network.gateway());
        ip(&["addr", "add", &bridge_addr, "dev", &network.bridge])?;
        ip(&["link", "set", &network.bridge, "up"])?;
        for host in 1..=hosts {
            let namespace = network.namespace(host);
            let outside = network.outside(host);
            ip(&["netns", "add", &namespace])?;
            ip(&[
                "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns",
                &namespace,
            ])?;
            ip(&["link", "set", &outside, "master", &network.bridge])?;
            ip(&["link", "set", &outside, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", namespace.as_str(), "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            inside(&["link", "set", "lo", "up"])?;
            let addr = format!("{}/24", network.addr(host));
            inside(&["addr", "add", &addr, "dev", "eth0"])?;
            inside(&["link", "set", "eth0", "up"])?;
        }
        Ok(network)
    }

    fn octet(&self) -> u8 {
        u8::try_from(self.tag % 250).expect("below 250")
    }

    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.octet(), 254)
    }

    /// The address of host `host` (1-based).
    pub fn addr(&self, host: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 77, self.octet(), host))
    }

    /// The namespace host `host` runs in (`ip netns exec <it> …`).
    pub fn namespace(&self, host: u8) -> String {
        format!("cns{}-{host}", self.tag)
    }

    fn outside(&self, host: u8) -> String {
        format!("cvt{}-{host}", self.tag)
    }

    /// Cuts host `host` off from everyone (its link on the bridge goes down).
    pub fn isolate(&self, host: u8) {
        ip(&["link", "set", &self.outside(host), "down"]).expect("isolate a host");
    }

    /// Reconnects host `host`.
    pub fn heal(&self, host: u8) {
        ip(&["link", "set", &self.outside(host), "up"]).expect("heal a host");
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for host in 1..=self.hosts {
            let _ = ip(&["link", "del", &self.outside(host)]);
            let _ = ip(&["netns", "del", &self.namespace(host)]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
