//! Online backup and restore: `certus ctl snapshot export FILE` writes a consistent snapshot of a
//! running cluster into a checksummed file; `certus restore FILE` seeds a data directory of a
//! new cluster from it.
//!
//! What a backup covers: the replicated state at one applied log index, encoded by one node
//! after a read barrier (`Admin/ExportSnapshot`), so every write acknowledged before the export
//! began is in it, and writes after it may or may not be. It names the log id it covers (term
//! and index) and the membership at that index: there is no cluster id, that log id and
//! membership are what identify the cluster and the point in its history. It does not hold the
//! Raft log (the new cluster starts its log after the snapshot's index) nor a node's local CT
//! database: a cluster whose CT log holds entries is refused at export.
//!
//! The file: the magic `CERTUSBK`, the format version (u32, big-endian), the header's length
//! (u32, big-endian), the header (JSON: [`BackupHeader`]), the snapshot's bytes, and the
//! SHA-256 of everything before it. `certus restore` checks all of it before it writes anything.
//!
//! A new cluster of several nodes is restored by restoring every node's data directory from the
//! same file, each with its own id and the same member list; started with `certus serve`, the
//! nodes elect a leader among themselves and go on from the snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use certus_client::Client;
use certus_core::State;
use certus_node::raft::types::{CertusNode, TypeConfig};
use certus_proto::v1;
use certus_proto::v1::export_snapshot_chunk::Part;
use certus_store::SledDisk;
use openraft::{CommittedLeaderId, LogId, Membership};
use ring::digest::{Context, SHA256, SHA256_OUTPUT_LEN};
use serde::{Deserialize, Serialize};

use crate::limits::BACKUP_HEADER_BYTES_MAX;

/// The first bytes of a backup file.
const MAGIC: &[u8; 8] = b"CERTUSBK";
/// The version of the file's layout and header.
const FORMAT_VERSION: u32 = 1;
/// Magic, version and header length.
const PREFIX_BYTES: usize = 16;

/// One member of the cluster a backup was taken from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BackupMember {
    pub(crate) id: u64,
    pub(crate) grpc_addr: String,
    pub(crate) http_addr: String,
    pub(crate) voter: bool,
}

/// What a backup covers, written as JSON at the front of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackupHeader {
    /// The node that encoded the snapshot.
    pub(crate) node_id: u64,
    /// The term of the last log entry the snapshot covers.
    pub(crate) last_log_term: u64,
    /// The index of the last log entry the snapshot covers.
    pub(crate) last_log_index: u64,
    /// The membership at that index (the old cluster's).
    pub(crate) members: Vec<BackupMember>,
    /// The node's clock when it encoded the snapshot (Unix milliseconds).
    pub(crate) exported_at_ms: u64,
    /// The snapshot's length in bytes.
    pub(crate) data_bytes: u64,
    /// The snapshot's SHA-256, in hex.
    pub(crate) data_sha256: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn sha256(data: &[u8]) -> String {
    hex(ring::digest::digest(&SHA256, data).as_ref())
}

/// The file's bytes before the snapshot: magic, version, header length and header.
fn prefix(header: &BackupHeader) -> Vec<u8> {
    let json = serde_json::to_vec(header).expect("a header always encodes");
    let mut bytes = Vec::with_capacity(PREFIX_BYTES + json.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_be_bytes());
    bytes.extend_from_slice(
        &u32::try_from(json.len())
            .expect("a small header")
            .to_be_bytes(),
    );
    bytes.extend_from_slice(&json);
    bytes
}

/// A whole backup file of `header` and `data` (for tests; the export writes as chunks arrive).
#[cfg(test)]
fn encode(header: &BackupHeader, data: &[u8]) -> Vec<u8> {
    let mut bytes = prefix(header);
    bytes.extend_from_slice(data);
    let digest = ring::digest::digest(&SHA256, &bytes);
    bytes.extend_from_slice(digest.as_ref());
    bytes
}

/// A backup read back and checked: the file's checksum, its header, the snapshot's length and
/// SHA-256, and the snapshot itself (it loads as a valid state no later than the log index the
/// header names).
#[derive(Debug)]
pub(crate) struct Backup {
    pub(crate) header: BackupHeader,
    pub(crate) data: Vec<u8>,
}

/// Checks the bytes of a backup file.
pub(crate) fn decode(bytes: &[u8]) -> Result<Backup, String> {
    if bytes.len() < PREFIX_BYTES + SHA256_OUTPUT_LEN || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a Certus backup (it does not start with CERTUSBK)".into());
    }
    let (body, checksum) = bytes.split_at(bytes.len() - SHA256_OUTPUT_LEN);
    if ring::digest::digest(&SHA256, body).as_ref() != checksum {
        return Err(
            "the file's SHA-256 does not match its contents: the backup is damaged or truncated; \
             use another copy"
                .into(),
        );
    }
    let version = u32::from_be_bytes(body[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "backup format {version}; this certus reads format {FORMAT_VERSION}"
        ));
    }
    let header_bytes = u32::from_be_bytes(body[12..16].try_into().expect("4 bytes")) as usize;
    if header_bytes > BACKUP_HEADER_BYTES_MAX || PREFIX_BYTES + header_bytes > body.len() {
        return Err(format!(
            "the header's length ({header_bytes} bytes) does not fit the file"
        ));
    }
    let header: BackupHeader =
        serde_json::from_slice(&body[PREFIX_BYTES..PREFIX_BYTES + header_bytes])
            .map_err(|error| format!("the header does not decode: {error}"))?;
    let data = &body[PREFIX_BYTES + header_bytes..];
    if data.len() as u64 != header.data_bytes {
        return Err(format!(
            "the header names a snapshot of {} bytes; the file holds {}",
            header.data_bytes,
            data.len()
        ));
    }
    if sha256(data) != header.data_sha256 {
        return Err("the snapshot's SHA-256 does not match the header's".into());
    }
    let state = State::from_snapshot(data)
        .map_err(|error| format!("the snapshot does not load: {error}"))?;
    if state.applied_index() > header.last_log_index {
        return Err(format!(
            "the snapshot's state is at log index {}, past the {} its header names",
            state.applied_index(),
            header.last_log_index
        ));
    }
    Ok(Backup {
        header,
        data: data.to_vec(),
    })
}

// ---- export ------------------------------------------------------------------------------

/// Takes a snapshot export from the cluster (from `endpoint`, or any node) into `file`, which
/// must not exist. The file is written under a temporary name, synced, and renamed into place
/// only once the node's SHA-256 checks out. Returns the header written.
pub(crate) async fn export(
    client: &Client,
    endpoint: Option<&str>,
    file: &Path,
) -> Result<BackupHeader, String> {
    if file.exists() {
        return Err(format!(
            "{} exists; a backup never overwrites a file: choose another name",
            file.display()
        ));
    }
    let mut stream = client
        .export_snapshot(endpoint)
        .await
        .map_err(|error| format!("snapshot export: {error}"))?;
    let received = |error: tonic::Status| format!("snapshot export broke off: {}", error.message());
    let header = match stream.message().await.map_err(received)? {
        Some(v1::ExportSnapshotChunk {
            part: Some(Part::Header(header)),
        }) => header,
        _ => return Err("the node did not start the export with its header".into()),
    };
    let header = BackupHeader {
        node_id: header.node_id,
        last_log_term: header.last_log_term,
        last_log_index: header.last_log_index,
        members: header
            .members
            .into_iter()
            .map(|member| BackupMember {
                id: member.id,
                grpc_addr: member.grpc_addr,
                http_addr: member.http_addr,
                voter: member.voter,
            })
            .collect(),
        exported_at_ms: header.exported_at_ms,
        data_bytes: header.data_bytes,
        data_sha256: hex(&header.data_sha256),
    };
    let partial = partial_name(file);
    let written = write_file(&partial, &header, &mut stream).await;
    let renamed = written.and_then(|()| {
        std::fs::rename(&partial, file)
            .map_err(|error| format!("cannot rename {} into place: {error}", partial.display()))
    });
    if let Err(error) = renamed {
        let _ = std::fs::remove_file(&partial);
        return Err(error);
    }
    sync_parent(file)?;
    Ok(header)
}

fn partial_name(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Writes the file: prefix, the data chunks as they arrive (checked against the header's
/// length and SHA-256), the checksum; synced.
async fn write_file(
    path: &Path,
    header: &BackupHeader,
    stream: &mut tonic::Streaming<v1::ExportSnapshotChunk>,
) -> Result<(), String> {
    let io = |error: std::io::Error| format!("cannot write {}: {error}", path.display());
    let mut out = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    let mut whole = Context::new(&SHA256);
    let mut data = Context::new(&SHA256);
    let mut data_bytes = 0u64;
    let prefix = prefix(header);
    whole.update(&prefix);
    out.write_all(&prefix).map_err(io)?;
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|error| format!("snapshot export broke off: {}", error.message()))?
    {
        let Some(Part::Data(bytes)) = chunk.part else {
            return Err("the node sent a second header".into());
        };
        data_bytes += bytes.len() as u64;
        if data_bytes > header.data_bytes {
            return Err(format!(
                "the node sent more than the {} bytes its header named",
                header.data_bytes
            ));
        }
        whole.update(&bytes);
        data.update(&bytes);
        out.write_all(&bytes).map_err(io)?;
    }
    if data_bytes != header.data_bytes {
        return Err(format!(
            "the export ended after {data_bytes} of {} bytes",
            header.data_bytes
        ));
    }
    if hex(data.finish().as_ref()) != header.data_sha256 {
        return Err("the snapshot received does not match the node's SHA-256".into());
    }
    out.write_all(whole.finish().as_ref()).map_err(io)?;
    out.sync_all().map_err(io)
}

fn sync_parent(file: &Path) -> Result<(), String> {
    let parent = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|error| format!("cannot sync {}: {error}", parent.display()))
}

// ---- restore -----------------------------------------------------------------------------

/// Options of `certus restore`.
#[derive(Debug, clap::Args)]
pub(crate) struct RestoreArgs {
    /// The backup file (`certus ctl snapshot export`).
    file: PathBuf,
    /// The new node's config file, as `certus serve --config` reads it: its `id`, `data_dir`
    /// and `initial_members` (the new cluster's members) are used.
    #[arg(long, conflicts_with_all = ["id", "data_dir", "member"])]
    config: Option<PathBuf>,
    /// The new node's id (without --config).
    #[arg(long, requires_all = ["data_dir", "member"])]
    id: Option<u64>,
    /// The new node's data directory, which must not exist or be empty (without --config).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A member of the new cluster, `ID=GRPC_ADDR,HTTP_ADDR` (repeat for each; without
    /// --config). Every member is a voter.
    #[arg(long)]
    member: Vec<String>,
}

/// Who the restored node is and the cluster it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) id: u64,
    pub(crate) data_dir: PathBuf,
    pub(crate) members: BTreeMap<u64, CertusNode>,
}

/// Parses `ID=GRPC_ADDR,HTTP_ADDR`.
fn parse_member(text: &str) -> Result<(u64, CertusNode), String> {
    let bad = || format!("--member {text:?}: expected ID=GRPC_ADDR,HTTP_ADDR");
    let (id, addrs) = text.split_once('=').ok_or_else(bad)?;
    let (grpc, http) = addrs.split_once(',').ok_or_else(bad)?;
    let id: u64 = id.trim().parse().map_err(|_| bad())?;
    for addr in [grpc, http] {
        addr.parse::<SocketAddr>()
            .map_err(|_| format!("--member {text:?}: {addr:?} is not an ip:port address"))?;
    }
    Ok((
        id,
        CertusNode {
            grpc_addr: grpc.to_owned(),
            http_addr: http.to_owned(),
        },
    ))
}

fn target(args: &RestoreArgs) -> Result<Target, String> {
    let target = match &args.config {
        Some(path) => {
            let node = crate::serve::node_file(path)?;
            Target {
                id: node.id,
                data_dir: node.data_dir,
                members: node
                    .members
                    .into_iter()
                    .map(|(id, grpc_addr, http_addr)| {
                        (
                            id,
                            CertusNode {
                                grpc_addr,
                                http_addr,
                            },
                        )
                    })
                    .collect(),
            }
        }
        None => {
            let (Some(id), Some(data_dir)) = (args.id, args.data_dir.clone()) else {
                return Err("give --config, or --id, --data-dir and --member".into());
            };
            let mut members = BTreeMap::new();
            for text in &args.member {
                let (member, node) = parse_member(text)?;
                if members.insert(member, node).is_some() {
                    return Err(format!("member {member} is given twice"));
                }
            }
            Target {
                id,
                data_dir,
                members,
            }
        }
    };
    if target.members.is_empty() {
        return Err(
            "the new cluster has no members: give them (--member, or initial_members in the \
             config file)"
                .into(),
        );
    }
    if target.members.contains_key(&0) {
        return Err("node ids start at 1".into());
    }
    if !target.members.contains_key(&target.id) {
        return Err(format!(
            "node {} is not one of the new cluster's members ({})",
            target.id,
            target
                .members
                .keys()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(target)
}

/// Refuses a data directory that holds anything: a restore never mixes with existing data.
pub(crate) fn check_empty(data_dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(data_dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(format!(
                    "{} is not empty: restore only into a new data directory",
                    data_dir.display()
                ));
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(format!("cannot read {}: {error}", data_dir.display())),
    }
}

/// Writes the restored node's store into `target.data_dir` (checked empty first).
pub(crate) fn restore(backup: Backup, target: &Target) -> Result<(), String> {
    check_empty(&target.data_dir)?;
    std::fs::create_dir_all(&target.data_dir)
        .map_err(|error| format!("cannot create {}: {error}", target.data_dir.display()))?;
    let path = target.data_dir.join("raft");
    let disk = SledDisk::open(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    let voters: BTreeSet<u64> = target.members.keys().copied().collect();
    let membership = Membership::new(vec![voters], target.members.clone());
    let last_log_id = LogId::new(
        CommittedLeaderId::new(backup.header.last_log_term, 0),
        backup.header.last_log_index,
    );
    certus_store::seed_from_snapshot::<TypeConfig, _>(
        &disk,
        target.id,
        membership,
        last_log_id,
        backup.data,
    )
    .map_err(|error| format!("{}: {error}", path.display()))
}

/// Runs `certus restore`.
pub(crate) fn run(args: &RestoreArgs) -> Result<(), String> {
    let target = target(args)?;
    check_empty(&target.data_dir)?;
    let bytes = std::fs::read(&args.file)
        .map_err(|error| format!("cannot read {}: {error}", args.file.display()))?;
    let backup = decode(&bytes).map_err(|error| format!("{}: {error}", args.file.display()))?;
    let header = backup.header.clone();
    restore(backup, &target)?;
    println!(
        "restored node {} into {}: the state at log index {} (term {}), exported by node {} at \
         {} ms",
        target.id,
        target.data_dir.display(),
        header.last_log_index,
        header.last_log_term,
        header.node_id,
        header.exported_at_ms
    );
    println!(
        "new members: {}",
        target
            .members
            .iter()
            .map(|(id, node)| format!("{id} ({})", node.grpc_addr))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "restore every member's data directory from the same file, then start each with \
         certus serve"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(data: &[u8]) -> BackupHeader {
        BackupHeader {
            node_id: 2,
            last_log_term: 4,
            last_log_index: 30,
            members: vec![BackupMember {
                id: 2,
                grpc_addr: "127.0.0.1:7102".into(),
                http_addr: "127.0.0.1:7182".into(),
                voter: true,
            }],
            exported_at_ms: 1_700_000_000_000,
            data_bytes: data.len() as u64,
            data_sha256: sha256(data),
        }
    }

    fn target_in(dir: &Path) -> Target {
        let node = |port: u16| CertusNode {
            grpc_addr: format!("127.0.0.1:{port}"),
            http_addr: format!("127.0.0.1:{}", port + 80),
        };
        Target {
            id: 11,
            data_dir: dir.join("node-11"),
            members: [(11, node(9111)), (12, node(9112))].into(),
        }
    }

    #[test]
    fn a_backup_reads_back_as_written() {
        let data = State::new().to_snapshot();
        let backup = decode(&encode(&header_of(&data), &data)).expect("decodes");
        assert_eq!(backup.header, header_of(&data));
        assert_eq!(backup.data, data);
    }

    #[test]
    fn a_damaged_or_truncated_backup_is_refused_with_its_checksum() {
        let data = State::new().to_snapshot();
        let bytes = encode(&header_of(&data), &data);
        for position in [0, 9, 20, bytes.len() - data.len() - 33, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x40;
            let error = decode(&damaged).expect_err("a flipped bit is found");
            assert!(
                error.contains("SHA-256 does not match") || error.contains("not a Certus backup"),
                "byte {position}: {error}"
            );
        }
        let error = decode(&bytes[..bytes.len() - 5]).expect_err("truncated");
        assert!(error.contains("SHA-256 does not match"), "{error}");
        let error = decode(b"hello").expect_err("not a backup");
        assert!(error.contains("not a Certus backup"), "{error}");
    }

    #[test]
    fn a_consistent_file_whose_snapshot_is_not_a_state_is_refused() {
        let data = vec![0xff; 12];
        let error = decode(&encode(&header_of(&data), &data)).expect_err("not a state");
        assert!(error.contains("does not load"), "{error}");
    }

    #[test]
    fn a_restore_refuses_a_data_directory_that_is_not_empty_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let target = target_in(dir.path());
        std::fs::create_dir_all(&target.data_dir).expect("mkdir");
        std::fs::write(target.data_dir.join("something"), b"old").expect("write");
        let data = State::new().to_snapshot();
        let backup = decode(&encode(&header_of(&data), &data)).expect("decodes");
        let error = restore(backup, &target).expect_err("not empty");
        assert!(error.contains("is not empty"), "{error}");
        let names: Vec<_> = std::fs::read_dir(&target.data_dir)
            .expect("read")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("something")]);
    }

    #[test]
    fn a_restore_writes_a_store_once_and_refuses_to_write_over_it() {
        let dir = tempfile::tempdir().expect("dir");
        let target = target_in(dir.path());
        let data = State::new().to_snapshot();
        let backup = || decode(&encode(&header_of(&data), &data)).expect("decodes");
        restore(backup(), &target).expect("an empty directory is restored into");
        assert!(target.data_dir.join("raft").exists());
        let error = restore(backup(), &target).expect_err("a second restore");
        assert!(error.contains("is not empty"), "{error}");
    }

    #[test]
    fn members_are_given_as_id_and_two_addresses() {
        let (id, node) = parse_member("3=127.0.0.1:7103,127.0.0.1:7183").expect("parses");
        assert_eq!(id, 3);
        assert_eq!(node.grpc_addr, "127.0.0.1:7103");
        assert_eq!(node.http_addr, "127.0.0.1:7183");
        for bad in [
            "3",
            "x=1.2.3.4:5,1.2.3.4:6",
            "3=localhost:1,1.2.3.4:6",
            "3=1.2.3.4:5",
        ] {
            assert!(parse_member(bad).is_err(), "{bad}");
        }
    }
}
