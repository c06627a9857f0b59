//! Online backup and restore: `certus ctl snapshot export FILE` writes a consistent copy of a
//! running cluster into a checksummed file; `certus restore FILE` seeds a data directory of a
//! new cluster from it.
//!
//! What a backup covers: the replicated state at one applied log index, encoded by one node
//! after a read barrier (`Admin/ExportSnapshot`), so every write acknowledged before the export
//! began is in it, and writes after it may or may not be; and the CT log's entries that state
//! numbered, read from that node's local CT database (entries cleaned up from the replicated
//! state live only there). It names the log id it covers (term and index) and the membership
//! at that index: there is no cluster id, that log id and membership are what identify the
//! cluster and the point in its history. The Raft log is not in it: the new cluster's log
//! starts after the snapshot's index.
//!
//! The file: the magic `CERTUSBK`, the format version (u32, big-endian), the header's length
//! (u32, big-endian), the header (JSON: [`BackupHeader`]), the snapshot's bytes, the CT entries
//! (each: leaf input, extra data and SCT, each a u32 big-endian length then its bytes, then
//! the SCT's timestamp as a u64 big-endian), and the SHA-256 of everything before it.
//! `certus restore` checks the checksum and the snapshot before it writes anything, and the
//! restored CT tree against the serving STH the state names.
//!
//! A new cluster of several nodes is restored by restoring every node's data directory from the
//! same file, each with its own id and the same member list; started with `certus serve`, the
//! nodes elect a leader among themselves and go on from the snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use certus_client::Client;
use certus_core::State;
use certus_node::MemberAddr;
use certus_node::raft::types::{CertusNode, TypeConfig};
use certus_proto::v1;
use certus_proto::v1::export_snapshot_chunk::Part;
use certus_store::{CtDatabase, Disk, LocalEntry, OsFiles, SledDisk};
use openraft::{CommittedLeaderId, LogId, Membership};
use ring::digest::{Context, SHA256, SHA256_OUTPUT_LEN};
use serde::{Deserialize, Serialize};

use crate::limits::{BACKUP_CT_BATCH_ENTRIES, BACKUP_HEADER_BYTES_MAX};

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
    /// How many CT entries follow the snapshot (numbers 0 to `ct_entries` - 1).
    pub(crate) ct_entries: u64,
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

/// One CT entry as the file holds it.
fn encode_ct_entry(out: &mut Vec<u8>, entry: &v1::CtLocalEntry) {
    for field in [&entry.leaf_input, &entry.extra_data, &entry.sct] {
        let len = u32::try_from(field.len()).expect("an entry field is far below 4 GiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(field);
    }
    out.extend_from_slice(&entry.sct_timestamp_ms.to_be_bytes());
}

/// A whole backup file (for tests; the export writes as chunks arrive).
#[cfg(test)]
fn encode(header: &BackupHeader, data: &[u8], ct: &[v1::CtLocalEntry]) -> Vec<u8> {
    let mut bytes = prefix(header);
    bytes.extend_from_slice(data);
    for entry in ct {
        encode_ct_entry(&mut bytes, entry);
    }
    let digest = ring::digest::digest(&SHA256, &bytes);
    bytes.extend_from_slice(digest.as_ref());
    bytes
}

/// A backup opened and checked: the file's checksum, its header, the snapshot's length and
/// SHA-256, and the snapshot itself (it loads as a valid state no later than the log index the
/// header names). The CT entries are read afterwards, a batch at a time.
pub(crate) struct Backup {
    pub(crate) header: BackupHeader,
    pub(crate) state: State,
    pub(crate) data: Vec<u8>,
    ct: CtEntries,
}

/// The CT entries of an open backup, not read yet.
struct CtEntries {
    reader: BufReader<File>,
    /// Entries not read yet.
    left: u64,
    /// Bytes before the checksum not read yet.
    bytes_left: u64,
}

impl CtEntries {
    fn take(&mut self, len: u64) -> Result<Vec<u8>, String> {
        if len > self.bytes_left {
            return Err("a CT entry runs past the end of the file".into());
        }
        self.bytes_left -= len;
        let mut bytes = vec![0; usize::try_from(len).expect("bounded by the file")];
        self.reader
            .read_exact(&mut bytes)
            .map_err(|error| format!("reading the CT entries: {error}"))?;
        Ok(bytes)
    }

    fn number(&mut self, width: u64) -> Result<u64, String> {
        let bytes = self.take(width)?;
        Ok(bytes
            .iter()
            .fold(0u64, |value, byte| (value << 8) | u64::from(*byte)))
    }

    /// The next entries, at most `max`; empty once all are read (then the checksum must follow).
    fn next_batch(&mut self, max: usize) -> Result<Vec<LocalEntry>, String> {
        let mut entries = Vec::new();
        while self.left > 0 && entries.len() < max {
            let mut fields = Vec::with_capacity(3);
            for _ in 0..3 {
                let len = self.number(4)?;
                fields.push(self.take(len)?);
            }
            let sct_timestamp_ms = self.number(8)?;
            let sct = fields.pop().expect("three fields");
            let extra_data = fields.pop().expect("three fields");
            let leaf_input = fields.pop().expect("three fields");
            entries.push(LocalEntry {
                leaf_input,
                extra_data,
                sct,
                sct_timestamp_ms,
            });
            self.left -= 1;
        }
        if self.left == 0 && self.bytes_left != 0 {
            return Err(format!(
                "{} bytes follow the last CT entry",
                self.bytes_left
            ));
        }
        Ok(entries)
    }
}

fn read_err(path: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |error| format!("cannot read {}: {error}", path.display())
}

/// Opens the backup at `path` and checks it: its SHA-256 over the whole file first, then the
/// header and the snapshot.
pub(crate) fn open(path: &Path) -> Result<Backup, String> {
    let len = std::fs::metadata(path).map_err(read_err(path))?.len();
    let mut reader = BufReader::new(File::open(path).map_err(read_err(path))?);
    let mut magic = [0u8; 8];
    if len < (PREFIX_BYTES + SHA256_OUTPUT_LEN) as u64
        || reader.read_exact(&mut magic).is_err()
        || &magic != MAGIC
    {
        return Err("not a Certus backup (it does not start with CERTUSBK)".into());
    }
    let body_len = len - SHA256_OUTPUT_LEN as u64;
    let mut whole = Context::new(&SHA256);
    whole.update(&magic);
    let mut body = (&mut reader).take(body_len - magic.len() as u64);
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let read = body.read(&mut buffer).map_err(read_err(path))?;
        if read == 0 {
            break;
        }
        whole.update(&buffer[..read]);
    }
    let mut checksum = [0u8; SHA256_OUTPUT_LEN];
    reader.read_exact(&mut checksum).map_err(read_err(path))?;
    if whole.finish().as_ref() != checksum {
        return Err(
            "the file's SHA-256 does not match its contents: the backup is damaged or truncated; \
             use another copy"
                .into(),
        );
    }

    let mut reader = BufReader::new(File::open(path).map_err(read_err(path))?);
    let mut prefix = [0u8; PREFIX_BYTES];
    reader.read_exact(&mut prefix).map_err(read_err(path))?;
    let version = u32::from_be_bytes(prefix[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "backup format {version}; this certus reads format {FORMAT_VERSION}"
        ));
    }
    let header_bytes = u64::from(u32::from_be_bytes(
        prefix[12..16].try_into().expect("4 bytes"),
    ));
    let mut bytes_left = body_len - PREFIX_BYTES as u64;
    if header_bytes > BACKUP_HEADER_BYTES_MAX as u64 || header_bytes > bytes_left {
        return Err(format!(
            "the header's length ({header_bytes} bytes) does not fit the file"
        ));
    }
    let mut header = vec![0u8; usize::try_from(header_bytes).expect("bounded")];
    reader.read_exact(&mut header).map_err(read_err(path))?;
    bytes_left -= header_bytes;
    let header: BackupHeader = serde_json::from_slice(&header)
        .map_err(|error| format!("the header does not decode: {error}"))?;
    if header.data_bytes > bytes_left {
        return Err(format!(
            "the header names a snapshot of {} bytes; the file holds {bytes_left} after it",
            header.data_bytes
        ));
    }
    let mut data = vec![0u8; usize::try_from(header.data_bytes).expect("bounded by the file")];
    reader.read_exact(&mut data).map_err(read_err(path))?;
    bytes_left -= header.data_bytes;
    if sha256(&data) != header.data_sha256 {
        return Err("the snapshot's SHA-256 does not match the header's".into());
    }
    let state = State::from_snapshot(&data)
        .map_err(|error| format!("the snapshot does not load: {error}"))?;
    if state.applied_index() > header.last_log_index {
        return Err(format!(
            "the snapshot's state is at log index {}, past the {} its header names",
            state.applied_index(),
            header.last_log_index
        ));
    }
    if header.ct_entries < state.ct_first_held_sequence()
        || header.ct_entries > state.ct_next_sequence()
    {
        return Err(format!(
            "the file holds CT entries 0 to {} (exclusive); the state needs those below {} and \
             numbered none from {}",
            header.ct_entries,
            state.ct_first_held_sequence(),
            state.ct_next_sequence()
        ));
    }
    let ct = CtEntries {
        reader,
        left: header.ct_entries,
        bytes_left,
    };
    Ok(Backup {
        header,
        state,
        data,
        ct,
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
    let Some(v1::ExportSnapshotChunk {
        part: Some(Part::Header(header)),
    }) = stream.message().await.map_err(received)?
    else {
        return Err("the node did not start the export with its header".into());
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
        ct_entries: header.ct_entries,
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

/// Writes the file: prefix, the snapshot's chunks and then the CT entries as they arrive
/// (checked against the header's length, SHA-256 and count), the checksum; synced.
async fn write_file(
    path: &Path,
    header: &BackupHeader,
    stream: &mut tonic::Streaming<v1::ExportSnapshotChunk>,
) -> Result<(), String> {
    let io = |error: std::io::Error| format!("cannot write {}: {error}", path.display());
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    let mut out = BufWriter::new(file);
    let mut whole = Context::new(&SHA256);
    let mut data = Context::new(&SHA256);
    let mut data_bytes = 0u64;
    let mut ct_entries = 0u64;
    let mut encoded = Vec::new();
    let prefix = prefix(header);
    whole.update(&prefix);
    out.write_all(&prefix).map_err(io)?;
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|error| format!("snapshot export broke off: {}", error.message()))?
    {
        match chunk.part {
            Some(Part::Data(bytes)) if ct_entries == 0 => {
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
            Some(Part::CtEntries(chunk)) if data_bytes == header.data_bytes => {
                if chunk.first != ct_entries
                    || ct_entries + chunk.entries.len() as u64 > header.ct_entries
                {
                    return Err(format!(
                        "the node sent CT entries from {} ({} of them) where {} of {} were due",
                        chunk.first,
                        chunk.entries.len(),
                        ct_entries,
                        header.ct_entries
                    ));
                }
                encoded.clear();
                for entry in &chunk.entries {
                    encode_ct_entry(&mut encoded, entry);
                }
                ct_entries += chunk.entries.len() as u64;
                whole.update(&encoded);
                out.write_all(&encoded).map_err(io)?;
            }
            _ => return Err("the node sent the export's parts out of order".into()),
        }
    }
    if data_bytes != header.data_bytes || ct_entries != header.ct_entries {
        return Err(format!(
            "the export ended after {data_bytes} of {} bytes and {ct_entries} of {} CT entries",
            header.data_bytes, header.ct_entries
        ));
    }
    if hex(data.finish().as_ref()) != header.data_sha256 {
        return Err("the snapshot received does not match the node's SHA-256".into());
    }
    out.write_all(whole.finish().as_ref()).map_err(io)?;
    let file = out.into_inner().map_err(|error| io(error.into_error()))?;
    file.sync_all().map_err(io)
}

fn sync_parent(file: &Path) -> Result<(), String> {
    let parent = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)
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
    /// A member of the new cluster, `ID=GRPC_ADDR,HTTP_ADDR` (`host:port` each, as other nodes
    /// reach it; repeat for each member; without --config). Every member is a voter.
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
    let addr = |addr: &str| {
        MemberAddr::parse(addr)
            .map(|addr| addr.to_string())
            .map_err(|why| format!("--member {text:?}: {why}"))
    };
    Ok((
        id,
        CertusNode {
            grpc_addr: addr(grpc)?,
            http_addr: addr(http)?,
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

/// Writes the restored node's store into `target.data_dir` (checked empty first); on a
/// failure, removes what it wrote.
pub(crate) fn restore(backup: Backup, target: &Target) -> Result<(), String> {
    check_empty(&target.data_dir)?;
    let existed = target.data_dir.exists();
    std::fs::create_dir_all(&target.data_dir)
        .map_err(|error| format!("cannot create {}: {error}", target.data_dir.display()))?;
    let written = write_store(backup, target);
    if written.is_err() {
        let removed = if existed {
            ["raft", "raft-log", "ct-log"]
                .iter()
                .map(|name| target.data_dir.join(name))
                .filter(|path| path.exists())
                .try_for_each(std::fs::remove_dir_all)
        } else {
            std::fs::remove_dir_all(&target.data_dir)
        };
        if let Err(error) = removed {
            eprintln!(
                "certus: could not remove what the failed restore wrote in {}: {error}",
                target.data_dir.display()
            );
        }
    }
    written
}

fn write_store(mut backup: Backup, target: &Target) -> Result<(), String> {
    let path = target.data_dir.join("raft");
    let disk =
        Arc::new(SledDisk::open(&path).map_err(|error| format!("{}: {error}", path.display()))?);
    let voters: BTreeSet<u64> = target.members.keys().copied().collect();
    let membership = Membership::new(vec![voters], target.members.clone());
    let last_log_id = LogId::new(
        CommittedLeaderId::new(backup.header.last_log_term, 0),
        backup.header.last_log_index,
    );
    // The CT database first: the store is seeded last, so a node never starts on a store
    // whose CT entries are missing.
    restore_ct(&mut backup, &target.data_dir, &disk)?;
    certus_store::seed_from_snapshot::<TypeConfig, _>(
        &*disk,
        target.id,
        membership,
        last_log_id,
        std::mem::take(&mut backup.data),
    )
    .map_err(|error| format!("{}: {error}", path.display()))
}

/// Stores the backup's CT entries in the node's local CT database and integrates them; the
/// tree must match the serving STH the state names, where it reaches that far.
fn restore_ct(backup: &mut Backup, data_dir: &Path, disk: &Arc<SledDisk>) -> Result<(), String> {
    let size = backup.header.ct_entries;
    let ct_dir = data_dir.join("ct-log");
    let db = if size > 0 {
        let files =
            OsFiles::open(&ct_dir).map_err(|error| format!("{}: {error}", ct_dir.display()))?;
        Some(
            CtDatabase::open(Arc::clone(disk) as Arc<dyn Disk>, Arc::new(files))
                .map_err(|error| format!("{}: {error}", ct_dir.display()))?,
        )
    } else {
        None
    };
    let mut next = 0u64;
    loop {
        let batch = backup.ct.next_batch(BACKUP_CT_BATCH_ENTRIES)?;
        if batch.is_empty() {
            break;
        }
        let db = db
            .as_ref()
            .expect("entries come only when the header counts them");
        db.store_entries(next, &batch)
            .map_err(|error| format!("storing CT entries from {next}: {error}"))?;
        next += batch.len() as u64;
        while db.tree_size() < next {
            db.integrate(BACKUP_CT_BATCH_ENTRIES)
                .map_err(|error| format!("integrating CT entries: {error}"))?;
        }
    }
    let Some(db) = db else {
        return Ok(());
    };
    if let Some(serving) = backup.state.ct_serving()
        && serving.sth.tree_size <= size
    {
        let root = db
            .root_at(serving.sth.tree_size)
            .map_err(|error| format!("the restored CT tree: {error}"))?;
        if root != serving.sth.root_hash {
            return Err(format!(
                "the CT entries do not make the tree of the serving STH (size {}): the backup's \
                 CT entries are not this log's",
                serving.sth.tree_size
            ));
        }
    }
    Ok(())
}

/// Runs `certus restore`.
pub(crate) fn run(args: &RestoreArgs) -> Result<(), String> {
    let target = target(args)?;
    check_empty(&target.data_dir)?;
    let backup = open(&args.file).map_err(|error| format!("{}: {error}", args.file.display()))?;
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
    if header.ct_entries > 0 {
        println!("with the CT log's entries 0 to {}", header.ct_entries - 1);
    }
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

    fn header_of(data: &[u8], ct_entries: u64) -> BackupHeader {
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
            ct_entries,
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

    /// A backup of an empty state written into `dir`.
    fn written(dir: &Path, bytes: &[u8]) -> PathBuf {
        let path = dir.join("backup");
        std::fs::write(&path, bytes).expect("write the backup");
        path
    }

    fn empty_backup() -> Vec<u8> {
        let data = State::new().to_snapshot();
        encode(&header_of(&data, 0), &data, &[])
    }

    #[test]
    fn a_backup_reads_back_as_written() {
        let dir = tempfile::tempdir().expect("dir");
        let data = State::new().to_snapshot();
        let backup = open(&written(dir.path(), &empty_backup())).expect("opens");
        assert_eq!(backup.header, header_of(&data, 0));
        assert_eq!(backup.data, data);
    }

    #[test]
    fn a_damaged_or_truncated_backup_is_refused_with_its_checksum() {
        let dir = tempfile::tempdir().expect("dir");
        let bytes = empty_backup();
        let data_len = State::new().to_snapshot().len();
        for position in [0, 9, 20, bytes.len() - data_len - 33, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0x40;
            let error = open(&written(dir.path(), &damaged))
                .err()
                .expect("a flipped bit is found");
            assert!(
                error.contains("SHA-256 does not match") || error.contains("not a Certus backup"),
                "byte {position}: {error}"
            );
        }
        let error = open(&written(dir.path(), &bytes[..bytes.len() - 5]))
            .err()
            .expect("truncated");
        assert!(error.contains("SHA-256 does not match"), "{error}");
        let error = open(&written(dir.path(), b"hello"))
            .err()
            .expect("not a backup");
        assert!(error.contains("not a Certus backup"), "{error}");
    }

    #[test]
    fn a_consistent_file_whose_snapshot_is_not_a_state_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let data = vec![0xff; 12];
        let error = open(&written(
            dir.path(),
            &encode(&header_of(&data, 0), &data, &[]),
        ))
        .err()
        .expect("not a state");
        assert!(error.contains("does not load"), "{error}");
    }

    #[test]
    fn ct_entries_the_state_never_numbered_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let data = State::new().to_snapshot();
        let entry = v1::CtLocalEntry {
            leaf_input: vec![1; 40],
            extra_data: vec![2; 20],
            sct: vec![3; 10],
            sct_timestamp_ms: 5,
        };
        let bytes = encode(&header_of(&data, 1), &data, &[entry]);
        let error = open(&written(dir.path(), &bytes))
            .err()
            .expect("one entry too many");
        assert!(error.contains("numbered none from 0"), "{error}");
    }

    #[test]
    fn ct_entries_read_back_as_written() {
        let dir = tempfile::tempdir().expect("dir");
        let entries: Vec<v1::CtLocalEntry> = (0..3u8)
            .map(|n| v1::CtLocalEntry {
                leaf_input: vec![n; 40 + usize::from(n)],
                extra_data: vec![n; 7],
                sct: Vec::new(),
                sct_timestamp_ms: u64::from(n) << 40,
            })
            .collect();
        let mut bytes = Vec::new();
        for entry in &entries {
            encode_ct_entry(&mut bytes, entry);
        }
        let path = written(dir.path(), &bytes);
        let mut section = CtEntries {
            reader: BufReader::new(File::open(&path).expect("open")),
            left: 3,
            bytes_left: bytes.len() as u64,
        };
        let first = section.next_batch(2).expect("two");
        let rest = section.next_batch(2).expect("one");
        assert!(section.next_batch(2).expect("none").is_empty());
        let read: Vec<LocalEntry> = first.into_iter().chain(rest).collect();
        assert_eq!(read.len(), 3);
        for (read, entry) in read.iter().zip(&entries) {
            assert_eq!(read.leaf_input, entry.leaf_input);
            assert_eq!(read.extra_data, entry.extra_data);
            assert_eq!(read.sct, entry.sct);
            assert_eq!(read.sct_timestamp_ms, entry.sct_timestamp_ms);
        }
        // A length that runs past the end is refused, not allocated.
        let mut section = CtEntries {
            reader: BufReader::new(File::open(&path).expect("open")),
            left: 4,
            bytes_left: bytes.len() as u64,
        };
        let error = section
            .next_batch(10)
            .expect_err("a fourth entry is not there");
        assert!(error.contains("runs past the end"), "{error}");
    }

    #[test]
    fn a_restore_refuses_a_data_directory_that_is_not_empty_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let target = target_in(dir.path());
        std::fs::create_dir_all(&target.data_dir).expect("mkdir");
        std::fs::write(target.data_dir.join("something"), b"old").expect("write");
        let backup = open(&written(dir.path(), &empty_backup())).expect("opens");
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
        let path = written(dir.path(), &empty_backup());
        restore(open(&path).expect("opens"), &target).expect("an empty directory is restored into");
        assert!(target.data_dir.join("raft").exists());
        let error = restore(open(&path).expect("opens"), &target).expect_err("a second restore");
        assert!(error.contains("is not empty"), "{error}");
    }

    #[test]
    fn a_node_outside_the_new_members_is_refused() {
        let args = RestoreArgs {
            file: PathBuf::from("backup"),
            config: None,
            id: Some(4),
            data_dir: Some(PathBuf::from("data")),
            member: vec!["1=127.0.0.1:7101,127.0.0.1:7181".into()],
        };
        let error = target(&args).expect_err("4 is not a member");
        assert!(
            error.contains("not one of the new cluster's members"),
            "{error}"
        );
    }

    #[test]
    fn members_are_given_as_id_and_two_addresses() {
        let (id, node) = parse_member("3=127.0.0.1:7103,127.0.0.1:7183").expect("parses");
        assert_eq!(id, 3);
        assert_eq!(node.grpc_addr, "127.0.0.1:7103");
        assert_eq!(node.http_addr, "127.0.0.1:7183");
        let (_, named) = parse_member("4=Node-4.certus.test:7101,node-4.certus.test:7181")
            .expect("host names are member addresses");
        assert_eq!(named.grpc_addr, "node-4.certus.test:7101");
        for bad in [
            "3",
            "x=1.2.3.4:5,1.2.3.4:6",
            "3=1.2.3.4:5",
            "3=1.2.3.4:0,1.2.3.4:6",
            "3=no_port,1.2.3.4:6",
        ] {
            assert!(parse_member(bad).is_err(), "{bad}");
        }
    }
}
