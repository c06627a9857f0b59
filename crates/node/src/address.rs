//! Where a member is reached, as the membership records it: `host:port`, the host an IP address
//! or a host name (RFC 1123). A name is resolved when a peer dials it, and again whenever a
//! dial fails (`raft::network`), so a member whose IP address changes under a stable name (a
//! Kubernetes StatefulSet's pod) is found again without a membership change.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::limits::{HOST_LABEL_BYTES_MAX, HOST_NAME_BYTES_MAX, MEMBER_ADDR_BYTES_MAX};

/// A checked `host:port`: an IPv4 address, a bracketed IPv6 address or an RFC 1123 host name,
/// then a port from 1 to 65535, at most [`MEMBER_ADDR_BYTES_MAX`] bytes in all. Built only by
/// [`MemberAddr::parse`] (serde runs the same check).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberAddr(String);

impl MemberAddr {
    /// Checks `text`; says what is wrong without echoing an overlong input.
    pub fn parse(text: &str) -> Result<MemberAddr, String> {
        if text.len() > MEMBER_ADDR_BYTES_MAX {
            return Err(format!(
                "{} bytes; a host:port address is at most {MEMBER_ADDR_BYTES_MAX}",
                text.len()
            ));
        }
        if let Ok(socket) = text.parse::<SocketAddr>() {
            if socket.port() == 0 {
                return Err(format!("{text:?}: the port must be from 1 to 65535"));
            }
            if let SocketAddr::V6(v6) = socket
                && v6.scope_id() != 0
            {
                return Err(format!(
                    "{text:?}: an IPv6 scope id is not a member address"
                ));
            }
            return Ok(MemberAddr(socket.to_string()));
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(format!("{text:?} has no port; expected host:port"));
        };
        match port.parse::<u16>() {
            Ok(1..) if !port.starts_with(['+', '0']) => {}
            _ => return Err(format!("{text:?}: the port must be from 1 to 65535")),
        }
        if host.parse::<IpAddr>().is_ok() || host.starts_with('[') {
            return Err(format!(
                "{text:?} is not an address: an IPv6 address goes in brackets ([::1]:7000)"
            ));
        }
        check_host_name(host).map_err(|why| format!("{text:?}: {why}"))?;
        Ok(MemberAddr(text.to_ascii_lowercase()))
    }

    /// The IP address and port, when the host is an IP address rather than a name.
    pub fn socket_addr(&self) -> Option<SocketAddr> {
        self.0.parse().ok()
    }

    /// The address as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `host` is an RFC 1123 host name: dot-separated labels of letters, digits and inner
/// hyphens, each 1 to 63 bytes, 253 in all; the last label is not all digits (that would be a
/// malformed IPv4 address).
fn check_host_name(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host; expected host:port".into());
    }
    if host.len() > HOST_NAME_BYTES_MAX {
        return Err(format!(
            "the host name is {} bytes; at most {HOST_NAME_BYTES_MAX}",
            host.len()
        ));
    }
    for label in host.split('.') {
        if label.is_empty() || label.len() > HOST_LABEL_BYTES_MAX {
            return Err(format!(
                "a host name's labels are 1 to {HOST_LABEL_BYTES_MAX} bytes between dots"
            ));
        }
        if !label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        {
            return Err(
                "a host name holds only letters, digits, hyphens and dots (RFC 1123)".into(),
            );
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a host name's labels neither start nor end with a hyphen".into());
        }
    }
    let last = host.rsplit('.').next().unwrap_or(host);
    if last.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err("neither an IP address nor a host name".into());
    }
    Ok(())
}

impl fmt::Display for MemberAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<SocketAddr> for MemberAddr {
    fn from(socket: SocketAddr) -> MemberAddr {
        MemberAddr(socket.to_string())
    }
}

impl std::str::FromStr for MemberAddr {
    type Err = String;
    fn from_str(text: &str) -> Result<MemberAddr, String> {
        MemberAddr::parse(text)
    }
}

impl Serialize for MemberAddr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for MemberAddr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<MemberAddr, D::Error> {
        let text = String::deserialize(deserializer)?;
        MemberAddr::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_and_host_names_are_member_addresses() {
        for (text, shown) in [
            ("10.0.0.1:7000", "10.0.0.1:7000"),
            ("[::1]:7000", "[::1]:7000"),
            ("[fd00::0001]:7000", "[fd00::1]:7000"),
            ("localhost:7000", "localhost:7000"),
            ("certus-0.certus.ns.svc:7000", "certus-0.certus.ns.svc:7000"),
            ("Node-1.Certus.Test:65535", "node-1.certus.test:65535"),
            ("a1:1", "a1:1"),
            ("1a.example:1", "1a.example:1"),
        ] {
            let addr = MemberAddr::parse(text).unwrap_or_else(|why| panic!("{text}: {why}"));
            assert_eq!(addr.as_str(), shown);
            assert_eq!(addr.to_string().parse::<MemberAddr>(), Ok(addr));
        }
        assert_eq!(
            MemberAddr::parse("10.0.0.1:7000")
                .expect("ip")
                .socket_addr(),
            Some("10.0.0.1:7000".parse().expect("socket"))
        );
        assert_eq!(
            MemberAddr::parse("node.test:7000")
                .expect("name")
                .socket_addr(),
            None
        );
        let longest_label = format!("{}.test:1", "a".repeat(HOST_LABEL_BYTES_MAX));
        assert!(MemberAddr::parse(&longest_label).is_ok());
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        let long_label = format!("{}.test:1", "a".repeat(HOST_LABEL_BYTES_MAX + 1));
        let long_name = format!("{}test:1", "abcdefghi.".repeat(25));
        let overlong = format!("{}:1", "a".repeat(MEMBER_ADDR_BYTES_MAX));
        for (text, why) in [
            ("", "no port"),
            ("node.test", "no port"),
            ("node.test:", "port"),
            ("node.test:0", "port"),
            ("node.test:65536", "port"),
            ("node.test:+80", "port"),
            ("node.test:080", "port"),
            ("10.0.0.1:0", "port"),
            (":7000", "no host"),
            ("::1:7000", "brackets"),
            ("[::1:7000", "brackets"),
            ("[fe80::1%2]:7000", ""),
            ("node_1.test:7000", "letters, digits"),
            ("node 1:7000", "letters, digits"),
            ("http://node.test:7000", "letters, digits"),
            ("-node.test:7000", "hyphen"),
            ("node-.test:7000", "hyphen"),
            ("node..test:7000", "labels"),
            ("node.test.:7000", "labels"),
            ("10.0.0.256:7000", "neither"),
            ("10.0.1:7000", "neither"),
            (long_label.as_str(), "labels"),
            (long_name.as_str(), "host name is"),
            (overlong.as_str(), "bytes; a host:port"),
        ] {
            let error = MemberAddr::parse(text).expect_err(text);
            assert!(error.contains(why), "{text:?}: {error}");
        }
        assert!(
            !MemberAddr::parse(&overlong)
                .expect_err("long")
                .contains("aaaa")
        );
    }

    #[test]
    fn serde_runs_the_same_check() {
        let addr: MemberAddr = serde_json::from_str("\"node.test:7000\"").expect("valid");
        assert_eq!(addr.as_str(), "node.test:7000");
        assert_eq!(
            serde_json::to_string(&addr).expect("encodes"),
            "\"node.test:7000\""
        );
        let error = serde_json::from_str::<MemberAddr>("\"node_1:7000\"").expect_err("invalid");
        assert!(error.to_string().contains("RFC 1123"), "{error}");
    }
}
