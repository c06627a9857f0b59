//! The CT log's signing key: `certus ct-keygen`, and the key `certus up` keeps in its data
//! directory.
//!
//! A log key is an ECDSA P-256 private key in a PKCS#8 PEM file ("BEGIN PRIVATE KEY"), the same
//! on every node of the cluster. Its log id — what CT clients and log lists know the log by — is
//! the SHA-256 of its public key (DER SubjectPublicKeyInfo), in base64.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certus_ct::signer::{EcdsaP256Signer, Signer as _};

/// Options of `certus ct-keygen`.
#[derive(Debug, clap::Args)]
pub(crate) struct KeygenArgs {
    /// Write the key to this file, readable by its owner only (an existing file is never
    /// overwritten). Without it the PEM goes to stdout and the log id to stderr.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// What identifies a log key in public.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogKey {
    /// SHA-256 of the public key, base64.
    pub(crate) log_id: String,
    /// The public key, DER SubjectPublicKeyInfo in base64 (the `key` of a CT log list).
    pub(crate) public_key: String,
}

impl LogKey {
    /// The public identity of a PKCS#8 PEM key; says what is wrong with one that is not a
    /// P-256 key.
    pub(crate) fn of_pem(pem: &str) -> Result<LogKey, String> {
        let signer = EcdsaP256Signer::from_pkcs8_pem(pem).map_err(|error| {
            format!(
                "not an unencrypted PKCS#8 ECDSA P-256 private key (BEGIN PRIVATE KEY): {error}"
            )
        })?;
        Ok(LogKey {
            log_id: STANDARD.encode(signer.log_id()),
            public_key: STANDARD.encode(signer.public_key_der()),
        })
    }

    /// The public identity of the key in `path`.
    pub(crate) fn of_file(path: &Path) -> Result<LogKey, String> {
        let pem = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        LogKey::of_pem(&pem).map_err(|error| format!("{}: {error}", path.display()))
    }
}

/// Runs `certus ct-keygen`.
pub(crate) fn run(args: &KeygenArgs) -> Result<(), String> {
    match &args.out {
        Some(path) => {
            let key = write_new_key(path)?;
            println!("wrote {} (mode 0600)", path.display());
            println!("log id: {}", key.log_id);
            println!("public key: {}", key.public_key);
        }
        None => {
            let pem = generate_pem()?;
            let key = LogKey::of_pem(&pem)?;
            print!("{pem}");
            eprintln!("log id: {}", key.log_id);
            eprintln!("public key: {}", key.public_key);
        }
    }
    Ok(())
}

fn generate_pem() -> Result<String, String> {
    EcdsaP256Signer::generate_pkcs8_pem().map_err(|error| format!("cannot generate a key: {error}"))
}

/// Generates a key into `path`, which must not exist (a log key that is overwritten is a log
/// that is lost). On unix the file is created with mode 0600.
pub(crate) fn write_new_key(path: &Path) -> Result<LogKey, String> {
    let pem = generate_pem()?;
    let key = LogKey::of_pem(&pem)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "{} already exists; a log key is never overwritten (choose another --out, or \
                 remove the file if it is not a key in use)",
                path.display()
            )
        } else {
            format!("cannot create {}: {error}", path.display())
        }
    })?;
    if let Err(error) = file
        .write_all(pem.as_bytes())
        .and_then(|()| file.sync_all())
    {
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(format!("cannot write {}: {error}", path.display()));
    }
    Ok(key)
}

/// The key in `path`, generated there first if there is none. `true` when it was generated now.
pub(crate) fn ensure_key(path: &Path) -> Result<(LogKey, bool), String> {
    if path.exists() {
        return Ok((LogKey::of_file(path)?, false));
    }
    Ok((write_new_key(path)?, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_private_loads_and_is_never_overwritten() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log-key.pem");
        let key = write_new_key(&path).expect("a new key");
        let pem = std::fs::read_to_string(&path).expect("the key file");
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        assert_eq!(LogKey::of_file(&path).expect("it loads"), key);
        let id = STANDARD.decode(&key.log_id).expect("base64 log id");
        assert_eq!(id.len(), 32);
        let spki = STANDARD.decode(&key.public_key).expect("base64 key");
        assert_eq!(
            id,
            certus_ct::sha256(&spki).to_vec(),
            "log id = SHA-256(SPKI)"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }

        let error = write_new_key(&path).expect_err("the file exists");
        assert!(error.contains("already exists"), "{error}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("still there"),
            pem,
            "untouched"
        );
    }

    #[test]
    fn ensure_creates_a_key_once_then_reuses_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ct-log-key.pem");
        let (first, created) = ensure_key(&path).expect("created");
        assert!(created);
        let (again, created) = ensure_key(&path).expect("reused");
        assert!(!created);
        assert_eq!(again, first);
    }

    #[test]
    fn a_file_that_is_not_a_p256_key_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("ct-log-key.pem");
        std::fs::write(
            &path,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let error = ensure_key(&path).expect_err("not a key");
        assert!(error.contains("ct-log-key.pem"), "{error}");
        assert!(error.contains("PKCS#8"), "{error}");
        let error = LogKey::of_file(&dir.path().join("missing.pem")).expect_err("missing");
        assert!(
            error.contains("cannot read") && error.contains("missing.pem"),
            "{error}"
        );
    }
}
