//! Nodes on their own network hosts, for partitions: one Linux network namespace per node, each
//! joined to a bridge in the test's namespace by a veth pair. Taking a node's link down cuts it
//! off from its peers and from the clients (which stay in the test's namespace, on the bridge);
//! bringing it up heals it. Needs `ip` (iproute2) and the right to make namespaces (root); where
//! the machine does not allow it, [`Network::create`] says why and the tests run without
//! partitions.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
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

    /// The hosts file a process of host `host` sees as `/etc/hosts`: `ip netns exec` mounts
    /// `/etc/netns/<namespace>/hosts` over it, so names resolve per namespace and the
    /// machine's own `/etc/hosts` is never touched.
    fn hosts_file(&self, host: u8) -> PathBuf {
        PathBuf::from("/etc/netns")
            .join(self.namespace(host))
            .join("hosts")
    }

    /// Makes every host resolve each name to its address (and `localhost`). The files are
    /// rewritten in place: a running process keeps the file it was given mounted, and its
    /// next lookup reads the new entries.
    pub fn set_hosts(&self, names: &[(String, IpAddr)]) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (name, addr) in names {
            text.push_str(&format!("{addr} {name}\n"));
        }
        for host in 1..=self.hosts {
            let file = self.hosts_file(host);
            std::fs::create_dir_all(file.parent().expect("a directory"))
                .expect("create the namespace's /etc/netns directory");
            std::fs::write(&file, &text).expect("write the namespace's hosts file");
        }
    }

    /// Moves host `host` to the address ending in `octet` on the same subnet: the old address
    /// is gone (connections to and from it die), the new one is up. Returns the new address.
    pub fn readdress(&self, host: u8, octet: u8) -> IpAddr {
        assert!(octet != 254 && octet > self.hosts, "an address no host has");
        let namespace = self.namespace(host);
        let new = IpAddr::V4(Ipv4Addr::new(10, 77, self.octet(), octet));
        ip(&[
            "netns", "exec", &namespace, "ip", "addr", "flush", "dev", "eth0",
        ])
        .expect("drop the old address");
        let cidr = format!("{new}/24");
        ip(&[
            "netns", "exec", &namespace, "ip", "addr", "add", &cidr, "dev", "eth0",
        ])
        .expect("add the new address");
        new
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for host in 1..=self.hosts {
            let _ = ip(&["link", "del", &self.outside(host)]);
            let _ = ip(&["netns", "del", &self.namespace(host)]);
            let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(self.namespace(host)));
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
