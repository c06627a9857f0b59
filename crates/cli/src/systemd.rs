//! systemd's readiness protocol (`sd_notify`, for `Type=notify` units): `certus serve` says
//! `READY=1` once the node is first ready to serve, `STATUS=` while it waits, and `STOPPING=1`
//! when it stops. Without `NOTIFY_SOCKET` in the environment (not under systemd) nothing is
//! sent.
//!
//! The protocol is one datagram per message on the Unix socket `NOTIFY_SOCKET` names (a leading
//! `@` is Linux's abstract namespace); a few lines of std, not a dependency.

use std::time::Duration;

use certus_node::Node;

/// How often the wait for readiness looks again.
const READY_POLL: Duration = Duration::from_millis(200);

/// Sends `state` (newline-separated `KEY=value` assignments) to systemd; `Ok(false)` when not
/// running under a notifying service manager.
pub(crate) fn notify(state: &str) -> std::io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    send(&path, state)?;
    Ok(true)
}

#[cfg(target_os = "linux")]
fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(path)?,
    };
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn send(_path: &std::ffi::OsStr, _state: &str) -> std::io::Result<()> {
    Err(std::io::Error::other("sd_notify is only spoken on Linux"))
}

/// Waits until `node` is first ready, saying why not in `STATUS=` as it changes, then sends
/// `READY=1`. Returns at once when not under systemd.
pub(crate) async fn notify_when_ready(node: &Node) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let mut said = None;
    loop {
        let readiness = certus_node::services::health::readiness(node.replica());
        if readiness.ready {
            report(notify("READY=1\nSTATUS=ready"));
            return;
        }
        let reason = readiness.reason.unwrap_or_default();
        if said.as_ref() != Some(&reason) {
            report(notify(&format!("STATUS=not ready: {reason}")));
            said = Some(reason);
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

fn report(sent: std::io::Result<bool>) {
    if let Err(error) = sent {
        tracing::warn!(%error, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// Tells systemd the node is stopping.
pub(crate) fn notify_stopping() {
    report(notify("STOPPING=1"));
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_state_reaches_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify");
        let listener = std::os::unix::net::UnixDatagram::bind(&path).expect("bind");
        send(path.as_os_str(), "READY=1").expect("sent");
        let mut buffer = [0u8; 64];
        let read = listener.recv(&mut buffer).expect("received");
        assert_eq!(&buffer[..read], b"READY=1");

        use std::os::linux::net::SocketAddrExt as _;
        let name = format!("certus-test-{}", std::process::id());
        let abstract_addr =
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        let listener =
            std::os::unix::net::UnixDatagram::bind_addr(&abstract_addr).expect("bind abstract");
        send(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").expect("sent");
        let read = listener.recv(&mut buffer).expect("received");
        assert_eq!(&buffer[..read], b"STOPPING=1");
    }
}
