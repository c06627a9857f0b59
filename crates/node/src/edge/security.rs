//! Who may call what: the identity behind a request (a client certificate from the cluster CA,
//! or a bearer token), its roles, and the permission every gRPC method and HTTP route needs.
//!
//! An identity's roles come from its certificate's subject the way Kubernetes reads groups: the
//! common name (CN) names it, and each organization (O) that is a role name grants that role.
//! Tokens are configured by their SHA-256, so a leaked node configuration does not leak them.
//! The table of methods is closed: a method it does not name is refused to everyone but nodes,
//! and a test checks it names every method the node serves.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::{
    AUTHORIZATION_BYTES_MAX, BEARER_TOKEN_BYTES_MIN, CERTIFICATE_IDENTITIES_CACHED_MAX,
};

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    /// Anyone, without an identity: health checks.
    Public,
    /// Read state: statuses, lists, gets, CT reads, reflection.
    Read,
    /// Hold leases: acquire, renew, release.
    Lease,
    /// Open and close a client session (for exactly-once writes): every role that writes.
    ClientSession,
    /// Submit work and data: enqueue, create sessions, publish challenge tokens, add chains.
    Write,
    /// Do work: claim and finish sessions, dequeue and complete transactions.
    Work,
    /// Change the cluster: membership, snapshots, configuration, pipeline definitions.
    Admin,
    /// Between nodes only: the Raft transport and peer reads.
    Peer,
}

/// A role an identity holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A cluster node: everything, the Raft transport included.
    Node,
    /// An operator: everything but the Raft transport.
    Admin,
    /// A program that submits work and holds leases (producers, CA front ends, CT submitters).
    Client,
    /// A program that does work: claims and completes sessions and transactions, holds leases.
    Worker,
    /// Monitoring: reads only.
    Reader,
}

impl Role {
    /// Every role, in the order the docs list them.
    pub const ALL: [Role; 5] = [
        Role::Node,
        Role::Admin,
        Role::Client,
        Role::Worker,
        Role::Reader,
    ];

    /// The role's name, as written in certificates and configuration.
    pub fn name(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Admin => "admin",
            Role::Client => "client",
            Role::Worker => "worker",
            Role::Reader => "reader",
        }
    }

    /// The role named `name`, if any.
    pub fn named(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.name() == name)
    }

    /// Whether this role may do what `permission` covers.
    pub fn grants(self, permission: Permission) -> bool {
        use Permission as P;
        match self {
            Role::Node => true,
            Role::Admin => permission != P::Peer,
            Role::Client => matches!(
                permission,
                P::Public | P::Read | P::Lease | P::ClientSession | P::Write
            ),
            Role::Worker => matches!(
                permission,
                P::Public | P::Read | P::Lease | P::ClientSession | P::Work
            ),
            Role::Reader => matches!(permission, P::Public | P::Read),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The certificate's common name, or the token's name.
    pub name: String,
    /// What it may do.
    pub roles: BTreeSet<Role>,
}

impl Identity {
    /// Whether any of the identity's roles grants `permission`.
    pub fn may(&self, permission: Permission) -> bool {
        permission == Permission::Public || self.roles.iter().any(|role| role.grants(permission))
    }

    /// The roles, comma-separated, for messages.
    pub fn roles_text(&self) -> String {
        if self.roles.is_empty() {
            return "no role".to_owned();
        }
        self.roles
            .iter()
            .map(|role| role.name())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The permission the gRPC method at `path` (`/package.Service/Method`) needs, or `None` for a
/// path the node does not serve.
pub fn method_permission(path: &str) -> Option<Permission> {
    use Permission as P;
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let permission = match (service, method) {
        ("grpc.health.v1.Health", "Check" | "Watch") => P::Public,
        (
            "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection",
            "ServerReflectionInfo",
        ) => P::Read,
        ("certus.v1.Raft", "AppendEntries" | "Vote" | "InstallSnapshot" | "Forward") => P::Peer,
        ("certus.v1.Admin", "Status") => P::Read,
        ("certus.v1.Clients", "Register" | "Close") => P::ClientSession,
        ("certus.v1.Admin", "AddLearner" | "ChangeMembership" | "TriggerSnapshot") => P::Admin,
        ("certus.v1.Admin", "ExportSnapshot") => P::Admin,
        ("certus.v1.Admin", "SetMemberAddress") => P::Admin,
        ("certus.v1.Admin", "Reload") => P::Admin,
        ("certus.v1.Leases", "Acquire" | "Renew" | "Release") => P::Lease,
        ("certus.v1.Leases", "Get" | "List" | "CheckFence" | "GetChallenge" | "ListChallenges") => {
            P::Read
        }
        ("certus.v1.Leases", "PutChallenge" | "DeleteChallenge") => P::Write,
        ("certus.v1.Leases", "PurgeChallenges") => P::Admin,
        ("certus.v1.Sessions", "Get" | "Wait" | "List" | "Status") => P::Read,
        ("certus.v1.Sessions", "Create" | "Acknowledge" | "Kill") => P::Write,
        (
            "certus.v1.Sessions",
            "Claim" | "Extend" | "Complete" | "CompleteBatch" | "Release" | "Fail" | "Work",
        ) => P::Work,
        ("certus.v1.Sessions", "SetConfig") => P::Admin,
        (
            "certus.v1.Pipelines",
            "ListPipelines" | "WatchCompletions" | "GetSwitch" | "ListInPlay" | "ListStuck"
            | "Status" | "ListNotices" | "ExportArchive" | "GetConfig",
        ) => P::Read,
        // GetState marks a transaction as replied to and may cancel its webhook: the producer's.
        (
            "certus.v1.Pipelines",
            "Enqueue" | "EnqueueBatch" | "GetState" | "Cancel" | "SetSwitch",
        ) => P::Write,
        (
            "certus.v1.Pipelines",
            "Dequeue" | "Complete" | "CompleteBatch" | "Work" | "Requeue" | "Progress" | "Sleep",
        ) => P::Work,
        (
            "certus.v1.Pipelines",
            "DefinePipeline" | "DeletePipeline" | "AcknowledgeNotices" | "SetConfig",
        ) => P::Admin,
        (
            "certus.v1.Log",
            "GetSth" | "GetConsistency" | "GetProofByHash" | "GetEntries" | "GetRoots"
            | "GetEntryAndProof" | "Status",
        ) => P::Read,
        ("certus.v1.Log", "AddChain") => P::Write,
        ("certus.v1.Log", "SetConfig" | "SetFrozen" | "StartMirror") => P::Admin,
        ("certus.v1.Log", "FetchEntries") => P::Peer,
        _ => return None,
    };
    Some(permission)
}

/// The permission an HTTP `path` needs: the RFC 6962 endpoints, ACME challenges and health
/// probes are public; the node's status and metrics need a reader.
pub fn http_permission(path: &str) -> Permission {
    // ACME requests carry their own authentication (JWS signed by an account key).
    let public = path.starts_with("/ct/v1/")
        || path.starts_with("/acme/")
        || path.starts_with("/.well-known/acme-challenge/")
        || path.starts_with("/health/");
    if public {
        Permission::Public
    } else {
        Permission::Read
    }
}

/// A bearer token in a node's configuration (`[[tokens]]`): the token itself is never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Who holds it (logs and errors name it).
    pub name: String,
    /// What it may do.
    pub roles: Vec<Role>,
    /// The token's SHA-256, lowercase hex (`certus pki token` prints it with a new token).
    pub sha256: String,
}

/// The configured tokens, by hash.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    by_hash: BTreeMap<[u8; 32], Identity>,
}

impl Tokens {
    /// The table of `entries`; a malformed hash or a hash given twice is an error.
    pub fn new(entries: &[TokenEntry]) -> Result<Tokens, String> {
        let mut by_hash = BTreeMap::new();
        for entry in entries {
            let hash = decode_hash(&entry.sha256).ok_or_else(|| {
                format!(
                    "tokens: {:?}: sha256 must be 64 lowercase hex digits",
                    entry.name
                )
            })?;
            let identity = Identity {
                name: entry.name.clone(),
                roles: entry.roles.iter().copied().collect(),
            };
            if by_hash.insert(hash, identity).is_some() {
                return Err(format!(
                    "tokens: {:?}: the same token is configured twice",
                    entry.name
                ));
            }
        }
        Ok(Tokens { by_hash })
    }

    /// The identity of the bearer of `token`.
    pub fn identify(&self, token: &str) -> Option<&Identity> {
        if token.len() < BEARER_TOKEN_BYTES_MIN {
            return None;
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let hash: [u8; 32] = digest.as_ref().try_into().ok()?;
        self.by_hash.get(&hash)
    }
}

/// The SHA-256 of `token`, lowercase hex: what a `[[tokens]]` entry records.
pub fn token_hash(token: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn decode_hash(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut hash = [0u8; 32];
    for (index, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * index..2 * index + 2], 16).ok()?;
    }
    Some(hash)
}

/// The bearer token in an `authorization` header value (`Bearer <token>`, scheme in any case).
pub fn bearer_token(header: &str) -> Option<&str> {
    if header.len() > AUTHORIZATION_BYTES_MAX {
        return None;
    }
    let (scheme, token) = header.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// The identity a client certificate (DER, already verified against the cluster CA) names: its
/// subject's first common name and the roles among its organizations (others are ignored).
pub fn certificate_identity(der: &[u8]) -> Result<Identity, String> {
    use x509_cert::der::oid::ObjectIdentifier;
    use x509_cert::der::{Decode as _, Tag, Tagged as _};
    let certificate = x509_cert::Certificate::from_der(der)
        .map_err(|error| format!("an unreadable client certificate: {error}"))?;
    const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
    const ORGANIZATION: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
    let mut name = None;
    let mut roles = BTreeSet::new();
    let attributes = certificate
        .tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter());
    for attribute in attributes {
        let text = match attribute.value.tag() {
            Tag::Utf8String | Tag::PrintableString | Tag::Ia5String => {
                std::str::from_utf8(attribute.value.value()).ok()
            }
            _ => None,
        };
        let Some(text) = text else { continue };
        if attribute.oid == COMMON_NAME && name.is_none() {
            name = Some(text.to_owned());
        } else if attribute.oid == ORGANIZATION
            && let Some(role) = Role::named(text)
        {
            roles.insert(role);
        }
    }
    let name = name.ok_or("a client certificate without a common name")?;
    Ok(Identity { name, roles })
}

/// Why a request was not let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No certificate and no known token.
    Unauthenticated(String),
    /// Known, but not allowed.
    Forbidden(String),
}

impl Refusal {
    /// The machine-readable reason: `unauthenticated` or `forbidden`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated(_) => "unauthenticated",
            Refusal::Forbidden(_) => "forbidden",
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Unauthenticated(message) | Refusal::Forbidden(message) => message,
        }
    }
}

/// Decides requests: who is calling, and whether they may.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    /// Shared by every clone, so that a reload ([`Authorizer::replace_tokens`]) reaches both
    /// ports.
    tokens: std::sync::Arc<std::sync::RwLock<std::sync::Arc<Tokens>>>,
    /// Identities of verified certificates seen, by their DER bytes.
    certificates: std::sync::Arc<std::sync::Mutex<BTreeMap<Vec<u8>, Identity>>>,
}

impl Authorizer {
    /// An authorizer that knows `tokens`.
    pub fn new(tokens: Tokens) -> Authorizer {
        Authorizer {
            tokens: std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(tokens))),
            certificates: std::sync::Arc::default(),
        }
    }

    /// Knows `tokens` from now on, instead of the ones it knew: every clone of this authorizer
    /// does.
    pub fn replace_tokens(&self, tokens: Tokens) {
        *self
            .tokens
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = std::sync::Arc::new(tokens);
    }

    fn tokens(&self) -> std::sync::Arc<Tokens> {
        std::sync::Arc::clone(
            &self
                .tokens
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The identity `der` names, remembered after the first time.
    fn certificate_identity(&self, der: &[u8]) -> Result<Identity, String> {
        let mut known = self
            .certificates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(identity) = known.get(der) {
            return Ok(identity.clone());
        }
        let identity = certificate_identity(der)?;
        if known.len() >= CERTIFICATE_IDENTITIES_CACHED_MAX {
            known.clear();
        }
        known.insert(der.to_vec(), identity.clone());
        Ok(identity)
    }

    /// Lets a request for `what` needing `permission` through, or says why not. `certificate` is
    /// the peer's verified leaf certificate (DER), `authorization` the header's value; a
    /// certificate wins over a token.
    pub fn check(
        &self,
        what: &str,
        permission: Permission,
        certificate: Option<&[u8]>,
        authorization: Option<&str>,
    ) -> Result<Option<Identity>, Refusal> {
        if permission == Permission::Public {
            return Ok(None);
        }
        let identity = self.authenticate(what, certificate, authorization)?;
        if identity.may(permission) {
            Ok(Some(identity))
        } else {
            Err(Refusal::Forbidden(format!(
                "{} ({}) may not call {what}",
                identity.name,
                identity.roles_text()
            )))
        }
    }

    /// Who is calling, whatever they call: a request for a method this node does not have is
    /// still authenticated first, so that only an identity learns which methods exist.
    pub fn authenticate(
        &self,
        what: &str,
        certificate: Option<&[u8]>,
        authorization: Option<&str>,
    ) -> Result<Identity, Refusal> {
        let identity = match (certificate, authorization) {
            (Some(der), _) => self
                .certificate_identity(der)
                .map_err(Refusal::Unauthenticated)?,
            (None, Some(header)) => {
                let token = bearer_token(header).ok_or_else(|| {
                    Refusal::Unauthenticated(
                        "the authorization header is not `Bearer <token>`".to_owned(),
                    )
                })?;
                self.tokens().identify(token).cloned().ok_or_else(|| {
                    Refusal::Unauthenticated("the bearer token is not known here".to_owned())
                })?
            }
            (None, None) => {
                return Err(Refusal::Unauthenticated(format!(
                    "{what} needs a client certificate from the cluster CA or a bearer token"
                )));
            }
        };
        Ok(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(madsim))]
    #[test]
    fn every_served_method_has_a_permission() {
        let known = crate::edge::grpc_metrics::KnownMethods::from_descriptors(
            certus_proto::FILE_DESCRIPTOR_SET,
        )
        .expect("descriptors");
        let paths = known.paths();
        assert!(paths.len() > 50, "descriptors list the methods: {paths:?}");
        for path in paths {
            assert!(
                method_permission(path).is_some(),
                "{path} has no permission: add it to method_permission"
            );
        }
        assert_eq!(method_permission("/certus.v1.Leases/Nope"), None);
        assert_eq!(method_permission("nonsense"), None);
    }

    #[test]
    fn roles_grant_what_the_docs_say() {
        use Permission as P;
        let may = |role: Role, permission| role.grants(permission);
        assert!(may(Role::Node, P::Peer));
        assert!(!may(Role::Admin, P::Peer));
        assert!(may(Role::Admin, P::Admin) && may(Role::Admin, P::Work));
        assert!(may(Role::Worker, P::Work) && may(Role::Worker, P::Lease));
        assert!(!may(Role::Worker, P::Admin) && !may(Role::Worker, P::Write));
        assert!(may(Role::Worker, P::ClientSession) && may(Role::Client, P::ClientSession));
        assert!(!may(Role::Reader, P::ClientSession));
        assert!(may(Role::Client, P::Write) && !may(Role::Client, P::Work));
        assert!(may(Role::Reader, P::Read) && !may(Role::Reader, P::Lease));
        // The issue's example: a worker claims and completes but does not change membership.
        let worker = Identity {
            name: "w".into(),
            roles: [Role::Worker].into(),
        };
        for path in [
            "/certus.v1.Sessions/Claim",
            "/certus.v1.Sessions/Complete",
            "/certus.v1.Sessions/CompleteBatch",
            "/certus.v1.Sessions/Work",
            "/certus.v1.Pipelines/Dequeue",
            "/certus.v1.Pipelines/Complete",
            "/certus.v1.Pipelines/CompleteBatch",
            "/certus.v1.Pipelines/Work",
        ] {
            assert!(worker.may(method_permission(path).expect(path)), "{path}");
        }
        for path in [
            "/certus.v1.Admin/ChangeMembership",
            "/certus.v1.Raft/AppendEntries",
            "/certus.v1.Pipelines/Enqueue",
            "/certus.v1.Pipelines/EnqueueBatch",
        ] {
            assert!(!worker.may(method_permission(path).expect(path)), "{path}");
        }
    }

    #[test]
    fn http_routes_are_public_only_where_rfc_6962_and_acme_need_it() {
        assert_eq!(http_permission("/ct/v1/get-sth"), Permission::Public);
        assert_eq!(
            http_permission("/.well-known/acme-challenge/abc"),
            Permission::Public
        );
        assert_eq!(http_permission("/health/ready"), Permission::Public);
        assert_eq!(http_permission("/metrics"), Permission::Read);
        assert_eq!(http_permission("/status"), Permission::Read);
        assert_eq!(http_permission("/ct/v1"), Permission::Read);
    }

    /// A certificate with `organizations` as separate O attributes (rcgen keeps one value per
    /// attribute type, so the second O is written under its OID as a custom type).
    fn certificate(common_name: &str, organizations: &[&str]) -> Vec<u8> {
        assert!(
            organizations.len() <= 2,
            "rcgen writes at most two O attributes here"
        );
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let types = [
            rcgen::DnType::OrganizationName,
            rcgen::DnType::CustomDnType(vec![2, 5, 4, 10]),
        ];
        for (kind, organization) in types.into_iter().zip(organizations) {
            params.distinguished_name.push(kind, *organization);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn a_certificate_names_its_identity_and_roles() {
        let der = certificate("worker-7", &["worker", "reader"]);
        let identity = certificate_identity(&der).expect("identity");
        assert_eq!(identity.name, "worker-7");
        assert_eq!(identity.roles, [Role::Worker, Role::Reader].into());
        let der = certificate("odd", &["not-a-role", "client"]);
        let identity = certificate_identity(&der).expect("identity");
        assert_eq!(
            identity.roles,
            [Role::Client].into(),
            "unknown O values are ignored"
        );
        let der = certificate("nobody", &[]);
        assert!(
            certificate_identity(&der)
                .expect("identity")
                .roles
                .is_empty()
        );
        assert!(certificate_identity(b"not der").is_err());
    }

    #[test]
    fn tokens_are_checked_by_hash() {
        let token = "k9pYc3V0aGVudGljYXRlZC10b2tlbg";
        let tokens = Tokens::new(&[TokenEntry {
            name: "ci".into(),
            roles: vec![Role::Client],
            sha256: token_hash(token),
        }])
        .expect("tokens");
        let authorizer = Authorizer::new(tokens);
        let header = format!("Bearer {token}");
        let identity = authorizer
            .check("x", Permission::Write, None, Some(&header))
            .expect("allowed")
            .expect("an identity");
        assert_eq!(identity.name, "ci");
        let refused = authorizer
            .check("x", Permission::Admin, None, Some(&header))
            .expect_err("a client is not an admin");
        assert_eq!(refused.reason(), "forbidden");
        for header in [
            "Bearer wrong-token-of-enough-length",
            "Basic abc",
            "Bearer ",
        ] {
            let refused = authorizer
                .check("x", Permission::Read, None, Some(header))
                .expect_err(header);
            assert_eq!(refused.reason(), "unauthenticated", "{header}");
        }
        let refused = authorizer
            .check("x", Permission::Read, None, None)
            .expect_err("nobody");
        assert_eq!(refused.reason(), "unauthenticated");
        assert_eq!(
            authorizer.check("x", Permission::Public, None, None),
            Ok(None)
        );
        assert!(
            Tokens::new(&[TokenEntry {
                name: "bad".into(),
                roles: vec![],
                sha256: "ABC".into()
            }])
            .is_err()
        );
    }

    #[test]
    fn a_certificate_wins_over_a_token() {
        let der = certificate("ops", &["admin"]);
        let identity = Authorizer::default()
            .check("x", Permission::Admin, Some(&der), Some("Bearer nonsense"))
            .expect("allowed")
            .expect("identity");
        assert_eq!(identity.name, "ops");
    }

    #[test]
    fn remembered_certificates_decide_as_fresh_ones() {
        let authorizer = Authorizer::default();
        let worker = certificate("w", &["worker"]);
        let reader = certificate("r", &["reader"]);
        for _ in 0..3 {
            assert!(
                authorizer
                    .check("x", Permission::Work, Some(&worker), None)
                    .is_ok()
            );
            let refused = authorizer
                .check("x", Permission::Work, Some(&reader), None)
                .expect_err("a reader does not work");
            assert_eq!(refused.reason(), "forbidden");
        }
        assert!(
            authorizer
                .check("x", Permission::Read, Some(b"garbage"), None)
                .is_err(),
            "an unreadable certificate is never remembered as anyone"
        );
    }
}
