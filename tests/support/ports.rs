//! Loopback ports for the nodes tests start: one implementation for the process tests
//! (`tests/`), `certus-cli`'s own and `certus-node`'s in-process tests (included by path).

use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;

/// A loopback address whose port is free now, for a node to listen on a moment later.
///
/// A port bound at `127.0.0.1:0` comes from the kernel's ephemeral range, where it also picks
/// the local port of every outgoing connection (a node's to its peers, certbot's, a client's).
/// Released for a node to bind, such a port was once taken in between, and the node stopped:
/// "Address already in use". So ports come from outside that range, each handed out once in
/// this process, from a start that depends on the process id so that test processes running
/// at once rarely meet; a port something listens on is skipped.
pub fn free_addr() -> SocketAddr {
    static NEXT: Mutex<Option<u16>> = Mutex::new(None);
    let (low, high) = ports_outside_ephemeral_range();
    let span = high - low;
    let mut next = NEXT.lock().expect("the next port");
    let start = next.unwrap_or_else(|| {
        let offset = std::process::id() % u32::from(span);
        low + u16::try_from(offset).expect("below the span")
    });
    let mut port = start;
    for _ in 0..span {
        let candidate = port;
        port = if port + 1 >= high { low } else { port + 1 };
        if TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            *next = Some(port);
            return SocketAddr::from(([127, 0, 0, 1], candidate));
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// Ports the kernel does not hand out on its own: below `ip_local_port_range` (from 10000, above
/// the usual services' ports) or, when that range starts low, above it.
fn ports_outside_ephemeral_range() -> (u16, u16) {
    let (first, last) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(str::parse::<u16>);
            Some((bounds.next()?.ok()?, bounds.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999));
    if first >= 12_000 {
        (10_000, first)
    } else if last < 64_000 {
        (last + 1, u16::MAX)
    } else {
        // Every port is ephemeral: fall back to the bind check alone.
        (10_000, 32_768)
    }
}

#[test]
fn ports_are_handed_out_once_and_never_from_the_ephemeral_range() {
    let (low, high) = ports_outside_ephemeral_range();
    let ports: Vec<u16> = (0..64).map(|_| free_addr().port()).collect();
    let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        ports.len(),
        "a port handed out twice: {ports:?}"
    );
    assert!(
        ports.iter().all(|port| (low..high).contains(port)),
        "{ports:?} not all in {low}..{high}"
    );
}
