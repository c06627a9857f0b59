//! Regenerates the seed corpora under `fuzz/corpus/` and the chain target's accepted roots in
//! `fixtures/`:
//!
//! ```text
//! cargo test -p certus-fuzz-targets --test seeds -- --ignored
//! ```
//!
//! Each seed is a valid input of its target (or a near miss), so the fuzzer starts from the
//! paths that accept and mutates from there. The test PKI is made with fresh keys each time:
//! regenerate the roots and the chain seeds together (this does), then rebuild so the targets
//! embed the new roots. Corpus files that the fuzzer added later (minimized with `cargo fuzz
//! cmin`) are kept unless their name starts with `seed-`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use certus_core::ct::{CtCommand, EntryKey, LogConfig, SignedTreeHead as CoreSth, Submission};
use certus_core::pipelines::{JsonDocument, NoticeId, PipelineName, TransactionId};
use certus_core::{
    ChallengeCommand, Command, DnsName, HolderId, LeaseCommand, LeaseName, NewChallenge,
    PipelineCommand, PipelineConfig, SessionCommand, SessionConfig, SessionId, Stamp, State,
    StepOutcome, Ttl, apply,
};
use certus_ct::signer::{Ed25519Signer, Signer};
use certus_ct::structures::json::{
    AddChainRequest, AddChainResponse, GetEntriesResponse, GetEntryAndProofResponse,
    GetProofByHashResponse, GetRootsResponse, GetSthConsistencyResponse, GetSthResponse, LeafEntry,
};
use certus_ct::structures::{
    ExtraData, LogEntryType, MerkleTreeLeaf, PrecertChainEntry, encode_sct_list, leaf_input,
};
use certus_ct::{LogEntry, sha256};
use certus_fuzz_targets::grpc::{Facts, base};
use certus_node::convert;
use certus_node::raft::codec;
use certus_node::raft::forward::{
    ForwardRefusal, ForwardReply, ForwardRequest, MemberView, MembershipView,
};
use certus_node::{CertusNode, NodeId, TypeConfig};
use certus_proto::v1;
use certus_store::Proposal;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
};
use prost::Message;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    PKCS_ED25519, SignatureAlgorithm,
};

const POISON: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 3];
const CT_EKU: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 4];

fn root_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
#[ignore = "rewrites the committed seed corpora and fixture roots; run on purpose"]
fn regenerate_seed_corpora() {
    let pki = TestPki::new();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    fs::write(fixtures.join("root-p256.der"), &pki.root.der).unwrap();
    fs::write(fixtures.join("root-ed25519.der"), &pki.ed_root.der).unwrap();

    let mut corpora: BTreeMap<&str, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    corpora.insert("raft_rpc", raft_rpc_seeds());
    corpora.insert("log_entries", log_entries_seeds());
    corpora.insert("snapshot", snapshot_seeds());
    corpora.insert("ct_tls", ct_tls_seeds(&pki));
    corpora.insert("ct_json", ct_json_seeds(&pki));
    corpora.insert("ct_chain", ct_chain_seeds(&pki));
    corpora.insert("grpc_requests", grpc_seeds(&pki));
    for (target, seeds) in corpora {
        let dir = root_dir().join("fuzz/corpus").join(target);
        fs::create_dir_all(&dir).unwrap();
        for old in fs::read_dir(&dir).unwrap() {
            let path = old.unwrap().path();
            let is_seed = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("seed-"));
            if is_seed {
                fs::remove_file(path).unwrap();
            }
        }
        for (name, bytes) in seeds {
            fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
        }
    }
}

fn with_kind(kind: u8, bytes: Vec<u8>) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend(bytes);
    out
}

// ---- the Raft transport ----------------------------------------------------------------------

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn node(n: u64) -> CertusNode {
    CertusNode {
        grpc_addr: format!("10.0.0.{n}:7101"),
        http_addr: format!("10.0.0.{n}:7181"),
    }
}

fn membership() -> Membership<NodeId, CertusNode> {
    let voters: BTreeSet<NodeId> = [1, 2, 3].into();
    let nodes: BTreeMap<NodeId, CertusNode> = [1, 2, 3].map(|n| (n, node(n))).into();
    Membership::new(vec![voters], nodes)
}

/// The prepared state's log as Raft entries: one entry per command, a blank entry first and a
/// membership entry after the first command.
fn base_entries() -> Vec<Entry<TypeConfig>> {
    let mut entries = vec![Entry {
        log_id: log_id(1, 0),
        payload: EntryPayload::Blank,
    }];
    for (command, stamp) in &base().log {
        entries.push(Entry {
            log_id: log_id(1, stamp.index),
            payload: EntryPayload::Normal(Proposal {
                proposed_at_ms: stamp.now_ms,
                commands: vec![command.clone()],
            }),
        });
        if stamp.index == 1 {
            entries.push(Entry {
                log_id: log_id(1, 1),
                payload: EntryPayload::Membership(membership()),
            });
        }
    }
    entries
}

fn raft_rpc_seeds() -> Vec<(String, Vec<u8>)> {
    let vote = Vote::new_committed(1, 1);
    let mut seeds = Vec::new();
    let mut add = |name: &str, kind: u8, payload: Vec<u8>| {
        seeds.push((name.to_owned(), with_kind(kind, payload)));
    };
    let heartbeat = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: Some(log_id(1, 4)),
        entries: Vec::new(),
        leader_commit: Some(log_id(1, 4)),
    };
    add("append-heartbeat", 0, codec::encode(&heartbeat));
    let append = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: None,
        entries: base_entries(),
        leader_commit: Some(log_id(1, 2)),
    };
    add("append-entries", 0, codec::encode(&append));
    add(
        "vote",
        1,
        codec::encode(&VoteRequest::new(Vote::new(2, 3), Some(log_id(1, 9)))),
    );
    let meta = SnapshotMeta::<NodeId, CertusNode> {
        last_log_id: Some(log_id(1, base().state.applied_index())),
        last_membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
        snapshot_id: "1-9-1".to_owned(),
    };
    let install = |offset: u64, data: Vec<u8>, done: bool| InstallSnapshotRequest::<TypeConfig> {
        vote,
        meta: meta.clone(),
        offset,
        data,
        done,
    };
    add(
        "install-whole",
        2,
        codec::encode(&install(0, base().state.to_snapshot(), true)),
    );
    add(
        "install-chunk",
        2,
        codec::encode(&install(64, b"part of a snapshot".to_vec(), false)),
    );
    let commands: Vec<Command> = base()
        .log
        .iter()
        .map(|(command, _)| command.clone())
        .collect();
    add(
        "forward-write",
        3,
        codec::encode(&ForwardRequest::Write(commands)),
    );
    add(
        "forward-read-index",
        3,
        codec::encode(&ForwardRequest::ReadIndex),
    );
    add(
        "forward-add-learner",
        3,
        codec::encode(&ForwardRequest::AddLearner {
            id: 4,
            node: node(4),
        }),
    );
    add(
        "forward-change-membership",
        3,
        codec::encode(&ForwardRequest::ChangeMembership {
            voters: [1, 2, 4].into(),
            retain: true,
        }),
    );
    type AppendReply = Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>;
    let replies: [(&str, AppendReply); 4] = [
        ("append-success", Ok(AppendEntriesResponse::Success)),
        (
            "append-partial",
            Ok(AppendEntriesResponse::PartialSuccess(Some(log_id(1, 3)))),
        ),
        ("append-conflict", Ok(AppendEntriesResponse::Conflict)),
        (
            "append-higher-vote",
            Ok(AppendEntriesResponse::HigherVote(Vote::new(3, 2))),
        ),
    ];
    for (name, reply) in replies {
        add(name, 4, codec::encode(&reply));
    }
    let vote_reply: Result<VoteResponse<NodeId>, RaftError<NodeId>> = Ok(VoteResponse {
        vote: Vote::new(2, 3),
        vote_granted: true,
        last_log_id: Some(log_id(1, 9)),
    });
    add("vote-reply", 5, codec::encode(&vote_reply));
    let install_reply: Result<
        InstallSnapshotResponse<NodeId>,
        RaftError<NodeId, InstallSnapshotError>,
    > = Ok(InstallSnapshotResponse { vote });
    add("install-reply", 6, codec::encode(&install_reply));
    let mut replica = State::new();
    let responses = base()
        .log
        .iter()
        .map(|(command, stamp)| apply(&mut replica, command.clone(), *stamp))
        .collect();
    add(
        "forward-written",
        7,
        codec::encode(&ForwardReply::Written(responses)),
    );
    add(
        "forward-read-index-reply",
        7,
        codec::encode(&ForwardReply::ReadIndex(9)),
    );
    add(
        "forward-membership",
        7,
        codec::encode(&ForwardReply::Membership(MembershipView {
            log_index: 1,
            members: vec![MemberView {
                id: 1,
                node: node(1),
                voter: true,
            }],
        })),
    );
    add(
        "forward-refused",
        7,
        codec::encode(&ForwardReply::Refused(ForwardRefusal::OutcomeUnknown(
            "leader changed".to_owned(),
        ))),
    );
    seeds
}

// ---- log entries and snapshots -------------------------------------------------------------

/// Commands after the prepared log that take every module further: the claimed session gets its
/// challenges, the claimed transaction reports progress and completes, the lease is renewed and
/// released, the CT log takes, numbers and publishes an entry, and time runs on.
fn follow_ups(facts: &Facts) -> Vec<Command> {
    let name = |text: &str| DnsName::new(text.to_owned()).unwrap();
    let key = EntryKey(sha256(b"entry"));
    let sth = CoreSth {
        tree_size: 1,
        timestamp_ms: 1_700_000_005_000,
        root_hash: sha256(b"root"),
        signature: vec![4, 3, 0, 2, 0x30, 0x00],
    };
    vec![
        Command::Lease(LeaseCommand::Renew {
            name: LeaseName::new(facts.lease.clone()).unwrap(),
            holder: HolderId::new(facts.holder.clone()).unwrap(),
            ttl: Ttl::from_ms(10_000).unwrap(),
        }),
        Command::Session(SessionCommand::Complete {
            session: SessionId(facts.session),
            token: facts.session_token,
            outcome: StepOutcome::Challenges(vec![NewChallenge {
                name: name("one.example.com"),
                token: certus_core::ChallengeToken::new("token-2".to_owned()).unwrap(),
                key_authorization: certus_core::KeyAuthorization::new(
                    "token-2.thumbprint".to_owned(),
                )
                .unwrap(),
            }]),
        }),
        Command::Pipeline(PipelineCommand::Progress {
            transaction: TransactionId(facts.transaction),
            token: facts.transaction_token,
            report: JsonDocument::new("{\"done\":50}".to_owned()).unwrap(),
        }),
        Command::Pipeline(PipelineCommand::Complete {
            transaction: TransactionId(facts.transaction),
            token: facts.transaction_token,
            status: certus_core::pipelines::TxStatus::Success,
            state: Some(JsonDocument::new("{\"step\":2}".to_owned()).unwrap()),
        }),
        Command::Pipeline(PipelineCommand::Cancel {
            transaction: TransactionId(facts.queued_transaction),
        }),
        Command::Pipeline(PipelineCommand::TakeWebhooks { max: 4 }),
        Command::Pipeline(PipelineCommand::AcknowledgeNotices { up_to: NoticeId(1) }),
        Command::Ct(CtCommand::Add {
            submissions: vec![Submission {
                key,
                sct_timestamp_ms: 1_700_000_000_000,
                leaf_input: vec![0; 12],
                extra_data: vec![0, 0, 0],
                sct: vec![0; 8],
            }],
        }),
        Command::Ct(CtCommand::Sequence {
            first: 0,
            keys: vec![key],
        }),
        Command::Ct(CtCommand::Report {
            node: 1,
            sth: sth.clone(),
            contiguous_size: 1,
        }),
        Command::Ct(CtCommand::Publish {
            sth,
            members: vec![1],
        }),
        Command::Ct(CtCommand::CleanUp { max_entries: 10 }),
        Command::Lease(LeaseCommand::Release {
            name: LeaseName::new(facts.lease.clone()).unwrap(),
            holder: HolderId::new(facts.holder.clone()).unwrap(),
        }),
        Command::Pipeline(PipelineCommand::Delete {
            name: PipelineName::new("unused".to_owned()).unwrap(),
        }),
        Command::Challenge(ChallengeCommand::DeleteOlderThan { age_ms: 1 }),
        Command::Tick,
    ]
}

fn encode_entries(entries: &[Entry<TypeConfig>]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|entry| postcard::to_allocvec(entry).unwrap())
        .collect()
}

/// The whole log: the prepared state's, then the follow-ups, the last one far in the future.
fn full_log() -> Vec<(Command, Stamp)> {
    let mut log = base().log.clone();
    let start = log.len() as u64;
    for (offset, command) in (1..).zip(follow_ups(&base().facts)) {
        let now_ms = if command == Command::Tick {
            1_900_000_000_000
        } else {
            1_700_000_000_000 + offset * 1_000
        };
        log.push((command, Stamp::new(start + offset, now_ms)));
    }
    log
}

fn entry(command: Command, stamp: Stamp) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, stamp.index),
        payload: EntryPayload::Normal(Proposal {
            proposed_at_ms: stamp.now_ms,
            commands: vec![command],
        }),
    }
}

fn log_entries_seeds() -> Vec<(String, Vec<u8>)> {
    let mut seeds = vec![("base".to_owned(), encode_entries(&base_entries()))];
    let full: Vec<_> = full_log()
        .into_iter()
        .map(|(command, stamp)| entry(command, stamp))
        .collect();
    seeds.push(("full".to_owned(), encode_entries(&full)));
    // The same log in one group-committed proposal.
    let grouped = Entry::<TypeConfig> {
        log_id: log_id(2, 1),
        payload: EntryPayload::Normal(Proposal {
            proposed_at_ms: 1_700_000_000_000,
            commands: full_log().into_iter().map(|(command, _)| command).collect(),
        }),
    };
    seeds.push(("grouped".to_owned(), encode_entries(&[grouped])));
    // Each module's part of the follow-ups alone, after the prepared log.
    for (name, family) in [
        ("leases", 0u8),
        ("sessions", 1),
        ("pipelines", 2),
        ("ct", 3),
    ] {
        let mut entries = base_entries();
        for (command, stamp) in full_log().into_iter().skip(base().log.len()) {
            let matches = matches!(
                (&command, family),
                (Command::Lease(_) | Command::Challenge(_), 0)
                    | (Command::Session(_), 1)
                    | (Command::Pipeline(_), 2)
                    | (Command::Ct(_), 3)
                    | (Command::Tick, _)
            );
            if matches {
                entries.push(entry(command, stamp));
            }
        }
        seeds.push((name.to_owned(), encode_entries(&entries)));
    }
    // Configurations, each in its own entry.
    let configs = [
        Command::Session(SessionCommand::Configure(SessionConfig::default())),
        Command::Pipeline(PipelineCommand::Configure(PipelineConfig::default())),
        Command::Ct(CtCommand::Configure(LogConfig::default())),
        Command::Ct(CtCommand::SetFrozen { frozen: true }),
    ];
    let entries: Vec<_> = (1..)
        .zip(configs)
        .map(|(index, command)| entry(command, Stamp::new(index, 1_700_000_000_000)))
        .collect();
    seeds.push(("configure".to_owned(), encode_entries(&entries)));
    seeds
}

fn snapshot_seeds() -> Vec<(String, Vec<u8>)> {
    let mut full = State::new();
    for (command, stamp) in full_log() {
        apply(&mut full, command, stamp);
    }
    let empty = State::new().to_snapshot();
    let mut seeds = vec![
        ("empty".to_owned(), empty.clone()),
        ("base".to_owned(), base().state.to_snapshot()),
        ("full".to_owned(), full.to_snapshot()),
    ];
    // The older format versions' magic, for the fuzzer to find their bodies.
    for version in 2..=4u8 {
        let mut older = empty.clone();
        older[7] = version;
        seeds.push((format!("empty-as-v{version}"), older));
    }
    seeds
}

// ---- a test PKI ------------------------------------------------------------------------------

fn dn(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Certus Fuzz");
    name.push(DnType::CommonName, common_name);
    name
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.use_authority_key_identifier_extension = true;
    params
}

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

impl Ca {
    fn root(common_name: &str, alg: &'static SignatureAlgorithm) -> Ca {
        let params = ca_params(common_name);
        let key = KeyPair::generate_for(alg).unwrap();
        let der = params.self_signed(&key).unwrap().der().to_vec();
        Ca { params, key, der }
    }

    fn issue(&self, params: &CertificateParams, key: &KeyPair) -> Vec<u8> {
        let issuer = Issuer::from_params(&self.params, &self.key);
        params.signed_by(key, &issuer).unwrap().der().to_vec()
    }

    fn subordinate(&self, params: CertificateParams) -> Ca {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let der = self.issue(&params, &key);
        Ca { params, key, der }
    }
}

fn leaf_params(dns_name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(vec![dns_name.to_owned()]).unwrap();
    params.distinguished_name = dn(dns_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params
}

fn precert_params(dns_name: &str) -> CertificateParams {
    let mut params = leaf_params(dns_name);
    let mut poison = CustomExtension::from_oid_content(POISON, vec![0x05, 0x00]);
    poison.set_criticality(true);
    params.custom_extensions = vec![poison];
    params
}

struct TestPki {
    root: Ca,
    intermediate: Ca,
    leaf: Vec<u8>,
    precert: Vec<u8>,
    signing: Ca,
    precert_by_signing: Vec<u8>,
    ed_root: Ca,
    ed_leaf: Vec<u8>,
    csr_der: Vec<u8>,
    csr_pem: String,
}

impl TestPki {
    fn new() -> TestPki {
        let root = Ca::root("Fuzz Root P-256", &PKCS_ECDSA_P256_SHA256);
        let intermediate = root.subordinate(ca_params("Fuzz Intermediate"));
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let leaf = intermediate.issue(&leaf_params("leaf.example.com"), &leaf_key);
        let precert = intermediate.issue(&precert_params("pre.example.com"), &leaf_key);
        let mut signing_params = ca_params("Fuzz Precertificate Signing");
        signing_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        signing_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(CT_EKU.to_vec())];
        let signing = intermediate.subordinate(signing_params);
        let precert_by_signing = signing.issue(&precert_params("psc.example.com"), &leaf_key);
        let ed_root = Ca::root("Fuzz Root Ed25519", &PKCS_ED25519);
        let ed_leaf_key = KeyPair::generate_for(&PKCS_ED25519).unwrap();
        let ed_leaf = ed_root.issue(&leaf_params("ed.example.com"), &ed_leaf_key);
        let csr = CertificateParams::new(vec![
            "csr.example.com".to_owned(),
            "www.csr.example.com".to_owned(),
        ])
        .unwrap()
        .serialize_request(&leaf_key)
        .unwrap();
        TestPki {
            csr_der: csr.der().to_vec(),
            csr_pem: csr.pem().unwrap(),
            root,
            intermediate,
            leaf,
            precert,
            signing,
            precert_by_signing,
            ed_root,
            ed_leaf,
        }
    }

    /// The chains the log accepts, with whether each is for add-pre-chain.
    fn valid_chains(&self) -> Vec<(&'static str, bool, Vec<Vec<u8>>)> {
        let root = self.root.der.clone();
        let intermediate = self.intermediate.der.clone();
        vec![
            (
                "x509-full",
                false,
                vec![self.leaf.clone(), intermediate.clone(), root.clone()],
            ),
            (
                "x509-no-root",
                false,
                vec![self.leaf.clone(), intermediate.clone()],
            ),
            (
                "x509-ed25519",
                false,
                vec![self.ed_leaf.clone(), self.ed_root.der.clone()],
            ),
            (
                "precert",
                true,
                vec![self.precert.clone(), intermediate.clone(), root.clone()],
            ),
            (
                "precert-signing-cert",
                true,
                vec![
                    self.precert_by_signing.clone(),
                    self.signing.der.clone(),
                    intermediate,
                    root,
                ],
            ),
        ]
    }
}

fn tls_chain(chain: &[Vec<u8>]) -> Vec<u8> {
    ExtraData::X509 {
        certificate_chain: chain.to_vec(),
    }
    .encode()
    .unwrap()
}

fn ct_chain_seeds(pki: &TestPki) -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = pki
        .valid_chains()
        .into_iter()
        .map(|(name, precert, chain)| {
            (
                format!("valid-{name}"),
                with_kind(u8::from(precert), tls_chain(&chain)),
            )
        })
        .collect();
    seeds.push((
        "refused-precert-on-add-chain".to_owned(),
        with_kind(
            0,
            tls_chain(&[pki.precert.clone(), pki.intermediate.der.clone()]),
        ),
    ));
    seeds.push((
        "refused-wrong-order".to_owned(),
        with_kind(
            0,
            tls_chain(&[pki.intermediate.der.clone(), pki.leaf.clone()]),
        ),
    ));
    seeds.push((
        "single-certificate".to_owned(),
        with_kind(0, pki.leaf.clone()),
    ));
    seeds
}

// ---- RFC 6962 structures and JSON ------------------------------------------------------------

/// Entries as the log would serve them: leaf input, extra data and an SCT, for the first
/// x509 chain and the first precert chain.
fn served(pki: &TestPki) -> Vec<(MerkleTreeLeaf, ExtraData, Vec<u8>)> {
    let signer = Ed25519Signer::from_seed([7; 32]);
    let roots =
        certus_ct::chain::AcceptedRoots::from_der([pki.root.der.clone(), pki.ed_root.der.clone()])
            .unwrap();
    let limits = certus_ct::chain::ChainLimits::default();
    let mut out = Vec::new();
    for (_, precert, chain) in pki.valid_chains() {
        let checked = if precert {
            certus_ct::chain::check_pre_chain(&chain, &roots, &limits)
        } else {
            certus_ct::chain::check_chain(&chain, &roots, &limits)
        }
        .expect("a valid test chain");
        let extra = match &checked.entry {
            LogEntry::X509 { .. } => ExtraData::X509 {
                certificate_chain: checked.chain.clone(),
            },
            LogEntry::Precert { .. } => ExtraData::Precert(PrecertChainEntry {
                pre_certificate: checked.chain[0].clone(),
                precertificate_chain: checked.chain[1..].to_vec(),
            }),
        };
        let timestamp = 1_700_000_000_000;
        let sct = signer.sign_sct(timestamp, &checked.entry, &[]).unwrap();
        let leaf =
            MerkleTreeLeaf::decode(&leaf_input(timestamp, &checked.entry, &[]).unwrap()).unwrap();
        out.push((leaf, extra, sct.encode().unwrap()));
    }
    out
}

fn ct_tls_seeds(pki: &TestPki) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let signer = Ed25519Signer::from_seed([7; 32]);
    let mut scts = Vec::new();
    for (n, (leaf, extra, sct)) in served(pki).into_iter().enumerate().take(4) {
        seeds.push((format!("leaf-{n}"), with_kind(0, leaf.encode().unwrap())));
        let kind = match extra.entry_type() {
            LogEntryType::X509Entry => 1,
            LogEntryType::PrecertEntry => 2,
        };
        seeds.push((
            format!("extra-data-{n}"),
            with_kind(kind, extra.encode().unwrap()),
        ));
        seeds.push((format!("sct-{n}"), with_kind(3, sct.clone())));
        scts.push(certus_ct::structures::SignedCertificateTimestamp::decode(&sct).unwrap());
    }
    seeds.push((
        "sct-list".to_owned(),
        with_kind(4, encode_sct_list(&scts).unwrap()),
    ));
    let sth = signer
        .sign_sth(3, 1_700_000_000_000, &sha256(b"root"))
        .unwrap();
    seeds.push((
        "digitally-signed".to_owned(),
        with_kind(5, sth.tree_head_signature.encode().unwrap()),
    ));
    seeds
}

fn json(kind: u8, value: &impl serde::Serialize) -> Vec<u8> {
    with_kind(kind, serde_json::to_vec(value).unwrap())
}

fn ct_json_seeds(pki: &TestPki) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (name, precert, chain) in pki.valid_chains() {
        seeds.push((
            format!("add-chain-{name}"),
            json(u8::from(precert), &AddChainRequest { chain }),
        ));
    }
    let signer = Ed25519Signer::from_seed([7; 32]);
    let served = served(pki);
    let sct = certus_ct::structures::SignedCertificateTimestamp::decode(&served[0].2).unwrap();
    seeds.push((
        "add-chain-response".to_owned(),
        json(2, &AddChainResponse::try_from(&sct).unwrap()),
    ));
    let sth = signer
        .sign_sth(3, 1_700_000_000_000, &sha256(b"root"))
        .unwrap();
    seeds.push((
        "get-sth".to_owned(),
        json(3, &GetSthResponse::try_from(&sth).unwrap()),
    ));
    seeds.push((
        "get-sth-consistency".to_owned(),
        json(
            4,
            &GetSthConsistencyResponse {
                consistency: vec![sha256(b"a"), sha256(b"b")],
            },
        ),
    ));
    seeds.push((
        "get-proof-by-hash".to_owned(),
        json(
            5,
            &GetProofByHashResponse {
                leaf_index: 2,
                audit_path: vec![sha256(b"c")],
            },
        ),
    ));
    let entries = served
        .iter()
        .map(|(leaf, extra, _)| LeafEntry::new(leaf, extra).unwrap())
        .collect::<Vec<_>>();
    seeds.push((
        "get-entries".to_owned(),
        json(
            6,
            &GetEntriesResponse {
                entries: entries.clone(),
            },
        ),
    ));
    seeds.push((
        "get-roots".to_owned(),
        json(
            7,
            &GetRootsResponse {
                certificates: vec![pki.root.der.clone(), pki.ed_root.der.clone()],
            },
        ),
    ));
    seeds.push((
        "get-entry-and-proof".to_owned(),
        json(
            8,
            &GetEntryAndProofResponse {
                leaf_input: entries[3].leaf_input.clone(),
                extra_data: entries[3].extra_data.clone(),
                audit_path: vec![sha256(b"d"), sha256(b"e")],
            },
        ),
    ));
    seeds
}

// ---- gRPC requests ---------------------------------------------------------------------------

fn grpc_seeds(pki: &TestPki) -> Vec<(String, Vec<u8>)> {
    let facts = &base().facts;
    let mut seeds = Vec::new();
    let mut add = |name: &str, kind: u8, message: &dyn Fn() -> Vec<u8>| {
        seeds.push((name.to_owned(), with_kind(kind, message())));
    };
    add("acquire", 0, &|| {
        v1::AcquireRequest {
            name: "new-lease".into(),
            holder: "bob".into(),
            ttl_ms: 5_000,
        }
        .encode_to_vec()
    });
    add("renew", 1, &|| {
        v1::RenewRequest {
            name: facts.lease.clone(),
            holder: facts.holder.clone(),
            ttl_ms: 20_000,
        }
        .encode_to_vec()
    });
    add("release", 2, &|| {
        v1::ReleaseRequest {
            name: facts.lease.clone(),
            holder: facts.holder.clone(),
        }
        .encode_to_vec()
    });
    add("check-fence", 3, &|| {
        v1::CheckFenceRequest {
            name: facts.lease.clone(),
            fencing_token: 1,
        }
        .encode_to_vec()
    });
    add("put-challenge", 4, &|| {
        v1::PutChallengeRequest {
            token: "token-9".into(),
            key_authorization: "token-9.thumbprint".into(),
        }
        .encode_to_vec()
    });
    add("delete-challenge", 5, &|| {
        v1::DeleteChallengeRequest {
            token: facts.challenge.clone(),
        }
        .encode_to_vec()
    });
    add("purge-challenges", 6, &|| {
        v1::PurgeChallengesRequest { older_than_ms: 1 }.encode_to_vec()
    });
    add("create-session-der", 7, &|| {
        v1::CreateSessionRequest {
            csr: pki.csr_der.clone(),
            names: Vec::new(),
            request_key: "request-1".into(),
        }
        .encode_to_vec()
    });
    add("create-session-pem-names", 7, &|| {
        v1::CreateSessionRequest {
            csr: pki.csr_pem.clone().into_bytes(),
            names: vec!["www.csr.example.com".into(), "CSR.example.com".into()],
            request_key: String::new(),
        }
        .encode_to_vec()
    });
    add("claim", 8, &|| {
        v1::ClaimRequest {
            stage: v1::Stage::MakeChallenge.into(),
            worker: facts.worker.clone(),
            visibility_ms: 30_000,
            max: 4,
            wait_ms: 0,
        }
        .encode_to_vec()
    });
    add("extend", 9, &|| {
        v1::ExtendRequest {
            id: facts.session,
            claim_token: facts.session_token,
            visibility_ms: 30_000,
        }
        .encode_to_vec()
    });
    add("complete-challenges", 10, &|| {
        use v1::complete_request::{Challenges, Outcome};
        v1::CompleteRequest {
            id: facts.session,
            claim_token: facts.session_token,
            outcome: Some(Outcome::Challenges(Challenges {
                challenges: vec![v1::NewChallenge {
                    name: "one.example.com".into(),
                    token: "token-3".into(),
                    key_authorization: "token-3.thumbprint".into(),
                }],
            })),
        }
        .encode_to_vec()
    });
    add("complete-tested", 10, &|| {
        use v1::complete_request::{Outcome, Tested};
        v1::CompleteRequest {
            id: facts.session,
            claim_token: facts.session_token,
            outcome: Some(Outcome::Tested(Tested {
                results: vec![v1::TestResult {
                    name: "one.example.com".into(),
                    satisfied: false,
                    error: "connection refused".into(),
                }],
            })),
        }
        .encode_to_vec()
    });
    add("complete-issued", 10, &|| {
        use v1::complete_request::{Issued, Outcome};
        v1::CompleteRequest {
            id: facts.session,
            claim_token: facts.session_token,
            outcome: Some(Outcome::Issued(Issued {
                certificate: "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n".into(),
            })),
        }
        .encode_to_vec()
    });
    add("release-claim", 11, &|| {
        v1::ReleaseClaimRequest {
            id: facts.session,
            claim_token: facts.session_token,
            delay_ms: 1_000,
            note: "retry later".into(),
        }
        .encode_to_vec()
    });
    add("fail", 12, &|| {
        v1::FailRequest {
            id: facts.session,
            claim_token: facts.session_token,
            reason: "CA refused".into(),
        }
        .encode_to_vec()
    });
    add("kill", 13, &|| {
        v1::KillSessionRequest {
            id: facts.queued_session,
            reason: "client gave up".into(),
        }
        .encode_to_vec()
    });
    add("acknowledge", 14, &|| {
        v1::AcknowledgeSessionRequest { id: facts.session }.encode_to_vec()
    });
    add("session-config", 15, &|| {
        v1::SetSessionConfigRequest {
            config: Some(convert::sessions::config_to_proto(&SessionConfig::default())),
        }
        .encode_to_vec()
    });
    add("define-pipeline", 16, &|| {
        v1::DefinePipelineRequest {
            name: "refunds".into(),
            node_group: facts.node_group.clone(),
        }
        .encode_to_vec()
    });
    add("delete-pipeline", 17, &|| {
        v1::DeletePipelineRequest {
            name: facts.pipeline.clone(),
        }
        .encode_to_vec()
    });
    add("enqueue", 18, &|| {
        v1::EnqueueRequest {
            owner: "owner-2".into(),
            external_id: "ext-3".into(),
            route: Some(v1::enqueue_request::Route::Pipeline(facts.pipeline.clone())),
            queue: v1::QueueType::Out.into(),
            state: "{\"items\":[1,2,3]}".into(),
            event: "{\"kind\":\"created\"}".into(),
            metadata: Some(v1::TxMetadata {
                webhook_url: "https://hooks.example.com/tx".into(),
                progress_reports: true,
                cancel_webhook_on_longpoll: true,
            }),
        }
        .encode_to_vec()
    });
    add("enqueue-node-group", 18, &|| {
        v1::EnqueueRequest {
            owner: "owner-2".into(),
            external_id: String::new(),
            route: Some(v1::enqueue_request::Route::NodeGroup(
                facts.node_group.clone(),
            )),
            queue: v1::QueueType::Admin.into(),
            state: "null".into(),
            event: String::new(),
            metadata: None,
        }
        .encode_to_vec()
    });
    add("dequeue", 19, &|| {
        v1::DequeueRequest {
            node_group: facts.node_group.clone(),
            worker: "worker-2".into(),
            max: 2,
            wait_ms: 0,
        }
        .encode_to_vec()
    });
    add("complete-transaction", 20, &|| {
        v1::CompleteTransactionRequest {
            transaction_id: facts.transaction,
            claim_token: facts.transaction_token,
            status: v1::TxStatus::Success.into(),
            state: "{\"ok\":true}".into(),
        }
        .encode_to_vec()
    });
    add("requeue", 21, &|| {
        v1::RequeueRequest {
            transaction_id: facts.transaction,
            claim_token: facts.transaction_token,
            route: Some(v1::requeue_request::Route::NodeGroup("group-2".into())),
            queue: v1::QueueType::In.into(),
            state: "{\"step\":2}".into(),
            event: String::new(),
        }
        .encode_to_vec()
    });
    add("progress", 22, &|| {
        v1::ProgressRequest {
            transaction_id: facts.transaction,
            claim_token: facts.transaction_token,
            report: "{\"percent\":10}".into(),
        }
        .encode_to_vec()
    });
    add("sleep", 23, &|| {
        v1::SleepRequest {
            transaction_id: facts.transaction,
            claim_token: facts.transaction_token,
            wake: Some(v1::sleep_request::Wake::ForMs(60_000)),
            switch: "maintenance".into(),
            queue: v1::QueueType::Out.into(),
            state: String::new(),
        }
        .encode_to_vec()
    });
    add("set-switch", 24, &|| {
        v1::SetSwitchRequest {
            name: "maintenance".into(),
            value: 1,
        }
        .encode_to_vec()
    });
    add("cancel", 25, &|| {
        v1::CancelRequest {
            transaction_id: facts.queued_transaction,
        }
        .encode_to_vec()
    });
    add("acknowledge-notices", 26, &|| {
        v1::AcknowledgeNoticesRequest { up_to: 3 }.encode_to_vec()
    });
    add("pipeline-config", 27, &|| {
        v1::SetPipelineConfigRequest {
            config: Some(convert::pipelines::wire::config_to_proto(
                &PipelineConfig::default(),
            )),
        }
        .encode_to_vec()
    });
    for (name, precert, chain) in pki.valid_chains().into_iter().take(4) {
        add(&format!("add-chain-{name}"), 28, &|| {
            v1::AddChainRequest {
                chain: chain.clone(),
                precertificate: precert,
            }
            .encode_to_vec()
        });
    }
    add("log-config", 29, &|| {
        v1::SetLogConfigRequest {
            config: Some(convert::log::config_to_proto(&LogConfig::default())),
        }
        .encode_to_vec()
    });
    add("set-frozen", 30, &|| {
        v1::SetFrozenRequest { frozen: true }.encode_to_vec()
    });
    add("start-mirror", 31, &|| {
        let signer = Ed25519Signer::from_seed([9; 32]);
        v1::StartMirrorRequest {
            source_url: "https://ct.example.com/log/".into(),
            source_public_key: signer.public_key_der().to_vec(),
        }
        .encode_to_vec()
    });
    add("enqueue-batch", 32, &|| {
        let item = |external_id: &str| v1::EnqueueRequest {
            owner: "owner-1".into(),
            external_id: external_id.into(),
            route: Some(v1::enqueue_request::Route::Pipeline(facts.pipeline.clone())),
            queue: v1::QueueType::In.into(),
            state: "{\"n\":1}".into(),
            event: String::new(),
            metadata: None,
        };
        v1::EnqueueBatchRequest {
            items: vec![item("batch-1"), item(""), item("batch-1")],
        }
        .encode_to_vec()
    });
    add("complete-batch", 33, &|| {
        let item = |token: u64| v1::CompleteTransactionRequest {
            transaction_id: facts.transaction,
            claim_token: token,
            status: v1::TxStatus::Success.into(),
            state: String::new(),
        };
        v1::CompleteBatchRequest {
            items: vec![
                item(facts.transaction_token),
                item(facts.transaction_token + 1),
            ],
        }
        .encode_to_vec()
    });
    seeds
}
