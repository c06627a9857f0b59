//! How `certus ctl` (and `serve` when it joins) reaches a cluster: over TLS with the cluster CA
//! and a client certificate or bearer token, or in plain text.

use std::path::{Path, PathBuf};

use certus_client::{BearerToken, ClientConfig, ClientTls};

use crate::pki::{CA_CERT_FILE, identity_files};

/// Where `certus up` keeps its PKI, relative to where it runs.
pub(crate) const UP_PKI_DIR: &str = "certus-data/pki";

/// Connection options of `certus ctl`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ConnectArgs {
    /// The cluster CA's certificate (PEM). Without it, `ca.pem` of --pki-dir is used if present.
    #[arg(long, env = "CERTUS_CA_CERT", global = true)]
    ca_cert: Option<PathBuf>,
    /// This client's certificate (PEM), with --client-key.
    #[arg(
        long,
        env = "CERTUS_CLIENT_CERT",
        global = true,
        requires = "client_key"
    )]
    client_cert: Option<PathBuf>,
    /// This client's private key (PEM), with --client-cert.
    #[arg(
        long,
        env = "CERTUS_CLIENT_KEY",
        global = true,
        requires = "client_cert"
    )]
    client_key: Option<PathBuf>,
    /// A bearer token instead of a client certificate.
    // base64url tokens (those made before `certus pki token` prefixed them) may start with `-`.
    #[arg(
        long,
        env = "CERTUS_BEARER_TOKEN",
        global = true,
        hide_env_values = true,
        allow_hyphen_values = true
    )]
    bearer_token: Option<String>,
    /// A PKI folder (`certus pki`, or `certus up`'s): its `ca.pem`, and `admin.pem` with
    /// `admin-key.pem` when no certificate or token is given.
    #[arg(long, env = "CERTUS_PKI_DIR", global = true, default_value = UP_PKI_DIR)]
    pki_dir: PathBuf,
    /// Talk plain text (to nodes run without TLS).
    #[arg(long, env = "CERTUS_PLAINTEXT", global = true)]
    plaintext: bool,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))
}

impl ConnectArgs {
    /// The client configuration these options give: TLS when a CA is named or found in the
    /// PKI folder, else plain text.
    pub(crate) fn client_config(&self) -> Result<ClientConfig, String> {
        let mut config = ClientConfig {
            token: self.bearer_token.clone().map(BearerToken),
            ..ClientConfig::default()
        };
        if self.plaintext {
            return Ok(config);
        }
        let found_ca = self.pki_dir.join(CA_CERT_FILE);
        let ca_file = match &self.ca_cert {
            Some(path) => path.clone(),
            None if found_ca.exists() => found_ca,
            None => return Ok(config),
        };
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            _ if self.bearer_token.is_some() => None,
            _ => {
                let (cert, key) = identity_files(&self.pki_dir, "admin");
                if cert.exists() && key.exists() {
                    Some((read(&cert)?, read(&key)?))
                } else {
                    None
                }
            }
        };
        config.tls = Some(ClientTls {
            ca_pem: read(&ca_file)?,
            identity,
            server_name: None,
        });
        Ok(config)
    }
}

/// How a node's own commands (joining, rebuilding) reach its peers: with its node certificate
/// when it has `[tls]`, else in plain text.
pub(crate) fn node_client_config(
    tls: Option<&certus_node::TlsSetup>,
) -> Result<ClientConfig, String> {
    let Some(tls) = tls else {
        return Ok(ClientConfig::default());
    };
    Ok(ClientConfig {
        tls: Some(ClientTls {
            ca_pem: read(&tls.ca_cert_file)?,
            identity: Some((read(&tls.cert_file)?, read(&tls.key_file)?)),
            server_name: None,
        }),
        ..ClientConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pki_folder_gives_tls_with_its_admin_identity() {
        let dir = tempfile::tempdir().expect("temp dir");
        crate::pki::ensure_local(dir.path(), 1).expect("pki");
        let args = ConnectArgs {
            pki_dir: dir.path().to_owned(),
            ..ConnectArgs::default()
        };
        let tls = args.client_config().expect("config").tls.expect("tls");
        assert!(tls.identity.is_some(), "the admin certificate");
        let with_token = ConnectArgs {
            bearer_token: Some("t".repeat(40)),
            ..args.clone()
        };
        let config = with_token.client_config().expect("config");
        assert!(
            config.tls.expect("tls").identity.is_none(),
            "a token instead"
        );
        assert!(config.token.is_some());
        let plain = ConnectArgs {
            plaintext: true,
            ..args
        };
        assert!(plain.client_config().expect("config").tls.is_none());
        let nothing = ConnectArgs {
            pki_dir: dir.path().join("absent"),
            ..ConnectArgs::default()
        };
        assert!(nothing.client_config().expect("config").tls.is_none());
    }
}
