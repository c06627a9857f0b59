//! HTTP-01 in the simulation, which has no HTTP: a fetch is one request (`NAME\nTOKEN`) and one
//! answer (`+` and the body, or `-` for not found) over madsim's network, and the simulation's
//! DNS says which client machine serves a name — `*.cC.sessions.sim` a sessions client,
//! `*.cC.acme.sim` an ACME client. The sessions' `SimTester` (the probe the nodes' daemons and
//! the ACME validator test with) fetches; the clients of both workloads answer.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The port client machines answer HTTP-01 fetches on.
pub const HTTP01_PORT: u16 = 80;
/// The message tag of an HTTP-01 request.
pub const HTTP01_REQUEST: u64 = 1;
/// The message tag of an HTTP-01 answer.
pub const HTTP01_ANSWER: u64 = 2;
/// The domain every sessions name is under: `s{n}x{k}.c{client}.sessions.sim`.
pub const SESSIONS_DOMAIN: &str = "sessions.sim";
/// The domain every ACME name is under: `o{n}x{k}.c{client}.acme.sim`.
pub const ACME_DOMAIN: &str = "acme.sim";

/// The simulated address of sessions client `index`.
pub fn sessions_client_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated session clients");
    IpAddr::V4(Ipv4Addr::new(10, 0, 3, last))
}

/// The simulated address of ACME client `index`.
pub fn acme_client_ip(index: u32) -> IpAddr {
    let last = u8::try_from(index + 1).expect("at most 254 simulated ACME clients");
    IpAddr::V4(Ipv4Addr::new(10, 0, 9, last))
}

/// Where `name` is served: the client its second label names, under its domain.
pub fn resolve(name: &str) -> Option<SocketAddr> {
    let mut labels = name.split('.');
    let _first = labels.next()?;
    let client: u32 = labels.next()?.strip_prefix('c')?.parse().ok()?;
    let domain = labels.collect::<Vec<_>>().join(".");
    let ip = if domain == SESSIONS_DOMAIN {
        sessions_client_ip(client)
    } else if domain == ACME_DOMAIN {
        acme_client_ip(client)
    } else {
        return None;
    };
    Some(SocketAddr::new(ip, HTTP01_PORT))
}
