//! `certus pki`: the cluster's transport PKI. A CA, certificates for nodes and clients (their
//! roles in the subject's organizations, as the nodes read them), and bearer tokens. `certus up`
//! makes the same files for the local cluster under `<data_dir>/pki`.
//!
//! Files are never overwritten: a CA key or a node key replaced by accident would lock the
//! cluster out of itself.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use certus_ca::issuer::CaIdentity;

use crate::ca_files::write_new;
use certus_node::edge::security::{Role, TokenEntry, token_hash};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SanType,
};

/// The CA's certificate in a PKI folder.
pub(crate) const CA_CERT_FILE: &str = "ca.pem";
/// The CA's private key in a PKI folder.
pub(crate) const CA_KEY_FILE: &str = "ca-key.pem";
/// The common name of a CA `certus pki init` makes.
const CA_COMMON_NAME: &str = "Certus cluster CA";
/// How long a node or client certificate is valid by default.
const CERTIFICATE_DAYS_DEFAULT: u32 = 825;

/// Options of `certus pki`.
#[derive(Debug, clap::Args)]
pub(crate) struct PkiArgs {
    #[command(subcommand)]
    command: PkiCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PkiCommand {
    /// Make a cluster CA in DIR (`ca.pem`, `ca-key.pem`); an existing one is kept.
    Init {
        /// The PKI folder.
        #[arg(long, default_value = "pki")]
        dir: PathBuf,
    },
    /// Issue a certificate signed by the CA in DIR: `NAME.pem` and `NAME-key.pem`.
    Issue {
        /// The PKI folder (with `ca.pem` and `ca-key.pem`).
        #[arg(long, default_value = "pki")]
        dir: PathBuf,
        /// The identity: the certificate's common name, and its files' name.
        #[arg(long)]
        name: String,
        /// Its role: node, admin, client, worker or reader (one per certificate; `admin`
        /// includes what `client` and `worker` may do).
        #[arg(long)]
        role: String,
        /// For a node: an IP address peers and clients dial it at (repeatable).
        #[arg(long)]
        ip: Vec<IpAddr>,
        /// For a node: a DNS name peers and clients dial it at (repeatable).
        #[arg(long)]
        dns: Vec<String>,
        /// Days of validity.
        #[arg(long, default_value_t = CERTIFICATE_DAYS_DEFAULT)]
        days: u32,
    },
    /// Make a bearer token: prints the token once, and the `[[tokens]]` entry for node configs.
    Token {
        /// Who holds it.
        #[arg(long)]
        name: String,
        /// Its roles, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        role: Vec<String>,
    },
}

/// Runs `certus pki`.
pub(crate) fn run(args: PkiArgs) -> Result<(), String> {
    match args.command {
        PkiCommand::Init { dir } => {
            let (cert, created) = ensure_ca(&dir)?;
            println!(
                "{} {}",
                if created { "made" } else { "kept" },
                cert.display()
            );
            Ok(())
        }
        PkiCommand::Issue {
            dir,
            name,
            role,
            ip,
            dns,
            days,
        } => {
            let roles = parse_roles(std::slice::from_ref(&role))?;
            let request = Subject {
                name,
                roles,
                ips: ip,
                dns,
                days,
            };
            let (cert, key) = issue(&dir, &request)?;
            println!("made {} and {}", cert.display(), key.display());
            Ok(())
        }
        PkiCommand::Token { name, role } => {
            let roles = parse_roles(&role)?;
            let token = new_token()?;
            let entry = TokenEntry {
                name,
                roles,
                sha256: token_hash(&token),
            };
            println!("token (shown once; give it to its holder): {token}\n");
            println!("add to each node's config file:\n");
            let table = toml::to_string(&TokensTable {
                tokens: vec![entry],
            })
            .map_err(|error| error.to_string())?;
            print!("{table}");
            Ok(())
        }
    }
}

#[derive(serde::Serialize)]
struct TokensTable {
    tokens: Vec<TokenEntry>,
}

fn parse_roles(names: &[String]) -> Result<Vec<Role>, String> {
    names
        .iter()
        .map(|name| {
            Role::named(name.trim()).ok_or_else(|| {
                let known: Vec<_> = Role::ALL.iter().map(|role| role.name()).collect();
                format!("unknown role {name:?}; roles: {}", known.join(", "))
            })
        })
        .collect()
}

/// What every token `certus pki token` makes starts with: a token is recognizable where it
/// leaks (secret scanners match the prefix), and it never starts with `-`, which a command line
/// would take for a flag (`--bearer-token -x…`).
pub(crate) const TOKEN_PREFIX: &str = "certus_";

/// [`TOKEN_PREFIX`], then 256 random bits in base64url without padding.
fn new_token() -> Result<String, String> {
    use base64::Engine as _;
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "no randomness for a token".to_owned())?;
    let random = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Ok(format!("{TOKEN_PREFIX}{random}"))
}

/// What a certificate says.
#[derive(Debug, Clone)]
pub(crate) struct Subject {
    pub(crate) name: String,
    pub(crate) roles: Vec<Role>,
    pub(crate) ips: Vec<IpAddr>,
    pub(crate) dns: Vec<String>,
    pub(crate) days: u32,
}

impl Subject {
    /// A certificate for node `id` of a local cluster (127.0.0.1 and localhost).
    pub(crate) fn local_node(id: u64) -> Subject {
        Subject {
            name: format!("node-{id}"),
            roles: vec![Role::Node],
            ips: vec![IpAddr::from([127, 0, 0, 1])],
            dns: vec!["localhost".to_owned()],
            days: CERTIFICATE_DAYS_DEFAULT,
        }
    }

    /// A client certificate.
    pub(crate) fn client(name: &str, roles: Vec<Role>) -> Subject {
        Subject {
            name: name.to_owned(),
            roles,
            ips: Vec::new(),
            dns: Vec::new(),
            days: CERTIFICATE_DAYS_DEFAULT,
        }
    }
}

fn now_s() -> u64 {
    certus_node::Clock::system().now_ms() / 1000
}

/// The CA in `dir`: `(certificate file, whether it was made now)`.
pub(crate) fn ensure_ca(dir: &Path) -> Result<(PathBuf, bool), String> {
    let cert_file = dir.join(CA_CERT_FILE);
    let key_file = dir.join(CA_KEY_FILE);
    match (cert_file.exists(), key_file.exists()) {
        (true, true) => {
            load_ca(dir)?;
            Ok((cert_file, false))
        }
        (false, false) => {
            std::fs::create_dir_all(dir)
                .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
            let ca = CaIdentity::generate(CA_COMMON_NAME, now_s() * 1000)
                .map_err(|error| format!("cannot make a CA: {error}"))?;
            write_new(&key_file, &ca.key_pem(), 0o600)?;
            write_new(&cert_file, ca.certificate_pem(), 0o644)?;
            Ok((cert_file, true))
        }
        _ => Err(format!(
            "{} and {} must both exist or both be absent (a CA key is never replaced)",
            cert_file.display(),
            key_file.display()
        )),
    }
}

fn load_ca(dir: &Path) -> Result<CaIdentity, String> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    CaIdentity::from_pem(&read(CA_KEY_FILE)?, &read(CA_CERT_FILE)?)
        .map_err(|error| format!("the CA in {}: {error}", dir.display()))
}

/// The files of identity `name` in `dir`: `(certificate, key)`.
pub(crate) fn identity_files(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    )
}

/// Issues a certificate for `subject` with the CA in `dir`; refuses to overwrite its files.
pub(crate) fn issue(dir: &Path, subject: &Subject) -> Result<(PathBuf, PathBuf), String> {
    let valid_name = !subject.name.is_empty()
        && subject.name.len() <= 64
        && subject
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !valid_name {
        return Err(format!(
            "name {:?}: 1 to 64 ASCII letters, digits, '-', '_' or '.'",
            subject.name
        ));
    }
    // One role per certificate: rcgen writes one O attribute per name (a CA of the operator's
    // own may write several, and the nodes read them all).
    if subject.roles.len() != 1 {
        return Err("a certificate made here carries exactly one role".into());
    }
    if subject.days == 0 {
        return Err("days must be at least 1".into());
    }
    let is_node = subject.roles.contains(&Role::Node);
    if is_node && subject.ips.is_empty() && subject.dns.is_empty() {
        return Err(
            "a node certificate needs the addresses it is dialled at: --ip and/or --dns".into(),
        );
    }
    let ca = load_ca(dir)?;
    let (cert_file, key_file) = identity_files(dir, &subject.name);
    if cert_file.exists() || key_file.exists() {
        return Err(format!(
            "{} or {} exists already; remove both to issue again",
            cert_file.display(),
            key_file.display()
        ));
    }
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, subject.name.as_str());
    for role in &subject.roles {
        params
            .distinguished_name
            .push(DnType::OrganizationName, role.name());
    }
    for ip in &subject.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    for name in &subject.dns {
        let name = name
            .clone()
            .try_into()
            .map_err(|_| format!("{name:?} is not a DNS name"))?;
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = if is_node {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    // A minute back, for clocks a little behind the issuer's.
    let not_before = now_s().saturating_sub(60);
    let not_after = (not_before + u64::from(subject.days) * 86_400).min(ca.not_after_ms() / 1000);
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(not_before);
    params.not_after = epoch + Duration::from_secs(not_after);
    let key = KeyPair::generate().map_err(|error| format!("cannot make a key: {error}"))?;
    let certificate = ca
        .sign(params, &key)
        .map_err(|error| format!("cannot sign: {error}"))?;
    write_new(&key_file, &key.serialize_pem(), 0o600)?;
    write_new(&cert_file, &certificate.pem(), 0o644)?;
    Ok((cert_file, key_file))
}

/// The files `certus up` runs with: a CA, one certificate per node, and `admin` for
/// `certus ctl`; made when missing, reused after.
pub(crate) fn ensure_local(dir: &Path, nodes: u8) -> Result<bool, String> {
    let (_, created) = ensure_ca(dir)?;
    let mut subjects: Vec<Subject> = (1..=u64::from(nodes)).map(Subject::local_node).collect();
    subjects.push(Subject::client("admin", vec![Role::Admin]));
    for subject in subjects {
        let (cert, key) = identity_files(dir, &subject.name);
        if !(cert.exists() && key.exists()) {
            issue(dir, &subject)?;
        }
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_the_prefix_and_256_random_bits() {
        use base64::Engine as _;
        let token = new_token().expect("token");
        let random = token.strip_prefix(TOKEN_PREFIX).expect("the prefix");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(random)
            .expect("base64url");
        assert_eq!(bytes.len(), 32);
        assert_ne!(new_token().expect("token"), token, "random");
    }

    #[test]
    fn issued_certificates_name_their_roles_and_chain_to_the_ca() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(ensure_local(dir.path(), 2).expect("local pki"));
        assert!(!ensure_local(dir.path(), 2).expect("reused"), "made once");
        let (cert, key) = identity_files(dir.path(), "admin");
        let read = |path: &Path| std::fs::read_to_string(path).expect("file");
        let material = certus_node::TlsMaterial::from_pem(
            &read(&dir.path().join(CA_CERT_FILE)),
            &read(&cert),
            &read(&key),
        )
        .expect("loads");
        drop(material);
        let der = rustls_pemfile_der(&read(&cert));
        let identity = certus_node::edge::security::certificate_identity(&der).expect("identity");
        assert_eq!(identity.name, "admin");
        assert_eq!(identity.roles, [Role::Admin].into());
        let der = rustls_pemfile_der(&read(&identity_files(dir.path(), "node-2").0));
        let identity = certus_node::edge::security::certificate_identity(&der).expect("identity");
        assert_eq!(identity.roles, [Role::Node].into());
        // Never overwritten.
        let error =
            issue(dir.path(), &Subject::client("admin", vec![Role::Reader])).expect_err("exists");
        assert!(error.contains("exists already"), "{error}");
    }

    #[test]
    fn bad_requests_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        ensure_ca(dir.path()).expect("ca");
        let mut node = Subject::local_node(1);
        node.ips.clear();
        node.dns.clear();
        assert!(
            issue(dir.path(), &node).is_err(),
            "a node without addresses"
        );
        assert!(issue(dir.path(), &Subject::client("a/b", vec![Role::Client])).is_err());
        assert!(issue(dir.path(), &Subject::client("x", vec![])).is_err());
        assert!(parse_roles(&["worker".into(), "root".into()]).is_err());
        assert_eq!(
            parse_roles(&["worker".into(), "reader".into()]).expect("roles"),
            vec![Role::Worker, Role::Reader]
        );
    }

    fn rustls_pemfile_der(pem: &str) -> Vec<u8> {
        use base64::Engine as _;
        let body: String = pem
            .lines()
            .filter(|line| !line.starts_with("-----"))
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("base64")
    }
}
