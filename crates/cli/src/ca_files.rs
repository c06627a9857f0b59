//! The cluster CA's files for `certus up`: made on the first start, reused after, never
//! overwritten.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use certus_ca::issuer::CaIdentity;

/// The CA's private key (PKCS#8 PEM) in the data directory.
pub(crate) const CA_KEY_FILE: &str = "ca-key.pem";
/// The CA's certificate (PEM) in the data directory.
pub(crate) const CA_CERT_FILE: &str = "ca-cert.pem";
/// The common name of a CA made by `certus up`.
const CA_COMMON_NAME: &str = "Certus Local CA";

/// The CA under `dir`: `(key file, certificate file, whether it was made now)`. A CA whose files
/// do not load is an error, never replaced.
pub(crate) fn ensure_ca(dir: &Path) -> Result<(PathBuf, PathBuf, bool), String> {
    let key_file = dir.join(CA_KEY_FILE);
    let cert_file = dir.join(CA_CERT_FILE);
    match (key_file.exists(), cert_file.exists()) {
        (true, true) => {
            let read = |path: &Path| {
                std::fs::read_to_string(path)
                    .map_err(|error| format!("cannot read {}: {error}", path.display()))
            };
            CaIdentity::from_pem(&read(&key_file)?, &read(&cert_file)?)
                .map_err(|error| format!("the CA in {}: {error}", dir.display()))?;
            Ok((key_file, cert_file, false))
        }
        (false, false) => {
            // The CA's validity starts now, by the same clock the nodes read.
            let now_ms = certus_node::Clock::system().now_ms();
            let ca = CaIdentity::generate(CA_COMMON_NAME, now_ms)
                .map_err(|error| format!("cannot make a CA: {error}"))?;
            write_new(&key_file, &ca.key_pem(), 0o600)?;
            write_new(&cert_file, ca.certificate_pem(), 0o644)?;
            Ok((key_file, cert_file, true))
        }
        _ => Err(format!(
            "{} and {} must both exist or both be absent; restore the missing one (a CA key is \
             never replaced)",
            key_file.display(),
            cert_file.display()
        )),
    }
}

/// Writes `contents` to a new file `path` with `mode` (never over an existing file), synced.
pub(crate) fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options
        .open(path)
        .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_is_made_once_and_reused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (key, cert, made) = ensure_ca(dir.path()).expect("a new CA");
        assert!(made);
        let first = std::fs::read_to_string(&cert).expect("the certificate");
        let (_, _, made) = ensure_ca(dir.path()).expect("the same CA");
        assert!(!made);
        assert_eq!(std::fs::read_to_string(&cert).expect("cert"), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&key).expect("key").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the CA key is private");
        }
    }

    #[test]
    fn half_a_ca_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (key, _, _) = ensure_ca(dir.path()).expect("a new CA");
        std::fs::remove_file(dir.path().join(CA_CERT_FILE)).expect("remove cert");
        let error = ensure_ca(dir.path()).expect_err("half a CA");
        assert!(error.contains("both"), "{error}");
        assert!(key.exists(), "the key is left alone");
    }
}
