//! Endpoint strings: `host:port`.

use crate::ClientError;

/// Checks an endpoint and returns it in the form the client keys its connections by.
///
/// An endpoint is `host:port`: an IPv4 address, a `[bracketed]` IPv6 address or a host name,
/// then a port from 1 to 65535. Surrounding whitespace and an `http://` prefix (with or without
/// a trailing `/`) are removed; any other scheme, a path, or a missing port is refused with
/// [`ClientError::InvalidEndpoint`].
///
/// ```
/// use certus_client::parse_endpoint;
///
/// assert_eq!(parse_endpoint(" http://127.0.0.1:7101/ ").unwrap(), "127.0.0.1:7101");
/// assert_eq!(parse_endpoint("[::1]:7101").unwrap(), "[::1]:7101");
/// assert!(parse_endpoint("127.0.0.1").is_err());
/// assert!(parse_endpoint("https://node:7101").is_err());
/// ```
pub fn parse_endpoint(endpoint: &str) -> Result<String, ClientError> {
    let invalid = |why: &str| ClientError::InvalidEndpoint(format!("{endpoint:?}: {why}"));
    let trimmed = endpoint.trim();
    let bare = trimmed.strip_prefix("http://").unwrap_or(trimmed);
    let bare = bare.strip_suffix('/').unwrap_or(bare);
    if bare.is_empty() {
        return Err(invalid("empty; expected host:port"));
    }
    if bare.contains("://") {
        return Err(invalid(
            "only plain http:// endpoints are supported; expected host:port",
        ));
    }
    if bare.contains(['/', '?', '#', '@']) || bare.chars().any(char::is_whitespace) {
        return Err(invalid(
            "expected host:port, without a path, user or spaces",
        ));
    }
    let Some((host, port)) = bare.rsplit_once(':') else {
        return Err(invalid("no port; expected host:port"));
    };
    match port.parse::<u16>() {
        Ok(0) | Err(_) => return Err(invalid("the port must be a number from 1 to 65535")),
        Ok(_) => {}
    }
    if host.is_empty() {
        return Err(invalid("no host; expected host:port"));
    }
    if let Some(inner) = host.strip_prefix('[') {
        let Some(address) = inner.strip_suffix(']') else {
            return Err(invalid("unclosed [ in an IPv6 address"));
        };
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(invalid("not an IPv6 address between [ ]"));
        }
    } else if host.contains([':', '[', ']']) {
        return Err(invalid("an IPv6 address must be written [address]:port"));
    }
    Ok(bare.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms_are_accepted_and_normalised() {
        for (given, expected) in [
            ("127.0.0.1:7101", "127.0.0.1:7101"),
            ("  127.0.0.1:7101\n", "127.0.0.1:7101"),
            ("http://127.0.0.1:7101", "127.0.0.1:7101"),
            ("http://127.0.0.1:7101/", "127.0.0.1:7101"),
            ("localhost:1", "localhost:1"),
            (
                "node-3.certus.internal:65535",
                "node-3.certus.internal:65535",
            ),
            ("[::1]:7101", "[::1]:7101"),
            ("http://[fe80::1]:80", "[fe80::1]:80"),
        ] {
            assert_eq!(parse_endpoint(given).expect(given), expected, "{given:?}");
        }
    }

    #[test]
    fn malformed_endpoints_are_refused() {
        for given in [
            "",
            "   ",
            "http://",
            "127.0.0.1",
            "127.0.0.1:",
            ":7101",
            "127.0.0.1:0",
            "127.0.0.1:65536",
            "127.0.0.1:port",
            "https://127.0.0.1:7101",
            "grpc://127.0.0.1:7101",
            "127.0.0.1:7101/path",
            "user@host:7101",
            "ho st:7101",
            "::1:7101",
            "[::1:7101",
            "[not-ipv6]:7101",
        ] {
            let error = parse_endpoint(given).expect_err(given);
            assert!(
                matches!(error, ClientError::InvalidEndpoint(_)),
                "{given:?} gave {error:?}"
            );
        }
    }
}
