//! Online backup and restore on real processes: a snapshot exported with `certus ctl snapshot
//! export` while clients keep writing, restored with `certus restore` into a new cluster (new
//! ids, ports and data directories), which starts, holds every write acknowledged before the
//! export began, and takes new writes after it; and a CT log whose entries were cleaned up from
//! the replicated state, restored whole from the exporting node's local database.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use certus_client::Client;
use certus_proto::v1::enqueue_request::Route;
use certus_proto::v1::{EnqueueRequest, GetStateRequest, QueueType};
use serde_json::Value;
use support::{Cluster, TestRoot, Tuning, binary, eventually};

const SERVE_WAIT: Duration = Duration::from_secs(30);
const PIPELINE: &str = "backup-pipeline";
const NODE_GROUP: &str = "backup-group";
/// Long enough that no lease of the test expires before it ends.
const LEASE_TTL_MS: u64 = 600_000;

/// What the clients were told was done.
#[derive(Debug, Clone, Default)]
struct Acknowledged {
    /// Lease name → fencing token.
    leases: BTreeMap<String, u64>,
    /// Challenge token → key authorization.
    tokens: BTreeMap<String, String>,
    /// External id → transaction id.
    transactions: BTreeMap<String, u64>,
}

impl Acknowledged {
    fn count(&self) -> usize {
        self.leases.len() + self.tokens.len() + self.transactions.len()
    }
}

type Shared = Arc<Mutex<Acknowledged>>;

fn record(acknowledged: &Shared, change: impl FnOnce(&mut Acknowledged)) {
    change(&mut acknowledged.lock().expect("not poisoned"));
}

/// A client writing leases, challenge tokens or transactions (by `kind`) until `stop`; every
/// write it is told succeeded is recorded. Failures are not (their outcome may be unknown).
async fn writer(client: Client, kind: usize, stop: Arc<AtomicBool>, acknowledged: Shared) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        match kind {
            0 => {
                let name = format!("lease-{n}");
                if let Ok(reply) = client.acquire(&name, "holder-a", LEASE_TTL_MS).await {
                    let token = reply
                        .lease
                        .expect("an acquire returns the lease")
                        .fencing_token;
                    record(&acknowledged, |a| {
                        a.leases.insert(name, token);
                    });
                }
            }
            1 => {
                let token = format!("token-{n}");
                let key_authorization = format!("{token}.thumbprint");
                if client
                    .put_challenge(&token, &key_authorization)
                    .await
                    .is_ok()
                {
                    record(&acknowledged, |a| {
                        a.tokens.insert(token, key_authorization);
                    });
                }
            }
            _ => {
                let external_id = format!("tx-{n}");
                let request = EnqueueRequest {
                    owner: "backup".into(),
                    external_id: external_id.clone(),
                    route: Some(Route::Pipeline(PIPELINE.into())),
                    queue: QueueType::In.into(),
                    state: format!("{{\"n\":{n}}}"),
                    ..EnqueueRequest::default()
                };
                if let Ok(reply) = client.enqueue(request).await {
                    record(&acknowledged, |a| {
                        a.transactions.insert(external_id, reply.transaction_id);
                    });
                }
            }
        }
    }
}

/// Runs the `certus` binary with `args`; (success, stdout, stderr).
async fn certus(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let output = Command::new(binary())
            .args(&args)
            .output()
            .expect("run certus");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    })
    .await
    .expect("the command's thread")
}

fn restore_args(file: &Path, config: &Path) -> Vec<String> {
    vec![
        "restore".into(),
        file.display().to_string(),
        "--config".into(),
        config.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_export_under_load_restores_into_a_new_cluster_holding_every_write_acknowledged_before_it()
 {
    let backups = tempfile::tempdir().expect("a directory for the backup");
    let file = backups.path().join("cluster.certus-backup");
    let old = Cluster::start(
        3,
        Tuning {
            // Snapshots and log compaction happen while the load runs, as in production.
            snapshot_after_entries: 300,
            entries_kept_after_snapshot: 100,
            ..Tuning::default()
        },
    );
    let client = old.client();
    eventually(SERVE_WAIT, "the old cluster serves", || async {
        client.define_pipeline(PIPELINE, NODE_GROUP).await.ok()
    })
    .await;

    let acknowledged: Shared = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..6)
        .map(|kind| {
            tokio::spawn(writer(
                old.client(),
                kind % 3,
                Arc::clone(&stop),
                Arc::clone(&acknowledged),
            ))
        })
        .collect();
    eventually(SERVE_WAIT, "writes of every kind acknowledged", || async {
        let seen = acknowledged.lock().expect("not poisoned").clone();
        (seen.leases.len() >= 30 && seen.tokens.len() >= 30 && seen.transactions.len() >= 30)
            .then_some(())
    })
    .await;

    // Everything acknowledged before the export begins must be in it.
    let before = acknowledged.lock().expect("not poisoned").clone();
    let (ok, stdout, stderr) = certus(vec![
        "ctl".into(),
        "--plaintext".into(),
        "--json".into(),
        "--endpoints".into(),
        old.endpoints().join(","),
        "snapshot".into(),
        "export".into(),
        file.display().to_string(),
    ])
    .await;
    assert!(ok, "the export succeeds: {stderr}");
    let exported: Value = serde_json::from_str(&stdout).expect("the export's JSON");
    let last_log_index = exported["last_log_index"].as_u64().expect("last_log_index");
    let old_ids: Vec<u64> = exported["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|member| member["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(
        old_ids,
        vec![1, 2, 3],
        "the header names the old membership"
    );
    assert!(
        exported["data_bytes"].as_u64().expect("data_bytes") > 0,
        "{exported}"
    );

    // The writes go on after the export; then the old cluster goes away.
    let at_export = acknowledged.lock().expect("not poisoned").count();
    eventually(
        SERVE_WAIT,
        "writes acknowledged after the export",
        || async {
            (acknowledged.lock().expect("not poisoned").count() > at_export + 30).then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("writer");
    }
    let all = acknowledged.lock().expect("not poisoned").clone();
    drop(old);

    // A second export never overwrites the backup.
    let (ok, _, stderr) = certus(vec![
        "ctl".into(),
        "--plaintext".into(),
        "--endpoints".into(),
        "127.0.0.1:1".into(),
        "snapshot".into(),
        "export".into(),
        file.display().to_string(),
    ])
    .await;
    assert!(!ok && stderr.contains("never overwrites"), "{stderr}");

    // A damaged copy is refused before anything is written.
    let damaged = backups.path().join("damaged.certus-backup");
    let mut bytes = std::fs::read(&file).expect("read the backup");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&damaged, bytes).expect("write the damaged copy");
    let refused_dir = backups.path().join("refused");
    let (ok, _, stderr) = certus(vec![
        "restore".into(),
        damaged.display().to_string(),
        "--id".into(),
        "21".into(),
        "--data-dir".into(),
        refused_dir.display().to_string(),
        "--member".into(),
        "21=127.0.0.1:7121,127.0.0.1:7181".into(),
    ])
    .await;
    assert!(!ok, "a damaged backup is refused");
    assert!(stderr.contains("SHA-256 does not match"), "{stderr}");
    assert!(!refused_dir.exists(), "nothing was written");

    // The new cluster: other ids, ports and data directories, every node restored from the file.
    let mut restored = Vec::new();
    let new = Cluster::start_prepared(&[11, 12, 13], Tuning::default(), |specs| {
        for spec in specs {
            let output = Command::new(binary())
                .args(restore_args(&file, &spec.config_file))
                .output()
                .expect("run certus restore");
            assert!(
                output.status.success(),
                "restore node {}: {}",
                spec.id,
                String::from_utf8_lossy(&output.stderr)
            );
            restored.push(spec.clone());
        }
    });
    assert_eq!(restored.len(), 3);
    // Restoring into a data directory that holds anything is refused.
    let (ok, _, stderr) = certus(restore_args(&file, &restored[0].config_file)).await;
    assert!(!ok && stderr.contains("is not empty"), "{stderr}");

    let client = new.client();
    let status = eventually(
        SERVE_WAIT,
        "the restored cluster elects a leader",
        || async {
            let status = client.status().await.ok()?;
            (status.leader_id != 0).then_some(status)
        },
    )
    .await;
    let new_ids: Vec<u64> = status.members.iter().map(|member| member.id).collect();
    assert_eq!(
        new_ids,
        vec![11, 12, 13],
        "the new cluster's own membership"
    );
    assert!(status.members.iter().all(|member| member.voter));
    assert!(
        status.applied_index >= last_log_index,
        "the new cluster goes on after the snapshot's index {last_log_index}: {status:?}"
    );

    // Every write acknowledged before the export is there.
    for (name, token) in &before.leases {
        let lease = client
            .get_lease(name)
            .await
            .unwrap_or_else(|error| panic!("lease {name} acknowledged before the export: {error}"));
        assert_eq!(
            (lease.holder.as_str(), lease.fencing_token),
            ("holder-a", *token)
        );
    }
    for (token, key_authorization) in &before.tokens {
        let challenge = client.get_challenge(token).await.unwrap_or_else(|error| {
            panic!("token {token} acknowledged before the export: {error}")
        });
        assert_eq!(&challenge.key_authorization, key_authorization);
    }
    for (external_id, id) in &before.transactions {
        let reply = client
            .get_state(GetStateRequest {
                transaction_id: *id,
                ..GetStateRequest::default()
            })
            .await
            .unwrap_or_else(|error| {
                panic!("transaction {external_id} acknowledged before the export: {error}")
            });
        let transaction = reply.transaction.expect("a transaction");
        assert_eq!(&transaction.external_id, external_id);
    }
    // A lease's fencing token is at least the log index of its grant: one granted at or below
    // the snapshot's index is in it, whenever its client heard back.
    for (name, token) in all
        .leases
        .iter()
        .filter(|(_, token)| **token <= last_log_index)
    {
        let lease = client
            .get_lease(name)
            .await
            .unwrap_or_else(|error| panic!("lease {name} granted at index {token}: {error}"));
        assert_eq!(lease.fencing_token, *token);
    }

    // The new cluster takes writes, after the old cluster's history.
    let reply = client
        .acquire("after-restore", "holder-b", LEASE_TTL_MS)
        .await
        .expect("a write on the restored cluster");
    let token = reply.lease.expect("the lease").fencing_token;
    let largest_restored = before.leases.values().max().copied().unwrap_or(0);
    assert!(
        token > last_log_index && token > largest_restored,
        "token {token} after index {last_log_index} and token {largest_restored}"
    );

    // The same file makes a single-node cluster too, its member given on the command line.
    let single = Cluster::start_prepared(&[31], Tuning::default(), |specs| {
        let spec = &specs[0];
        let output = Command::new(binary())
            .args([
                "restore".to_owned(),
                file.display().to_string(),
                "--id".into(),
                "31".into(),
                "--data-dir".into(),
                spec.data_dir.display().to_string(),
                "--member".into(),
                format!("31={},{}", spec.grpc, spec.http),
            ])
            .output()
            .expect("run certus restore");
        assert!(
            output.status.success(),
            "restore node 31: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
    let client = single.client();
    let (name, token) = before.leases.iter().next().expect("a lease");
    let lease = eventually(SERVE_WAIT, "the single restored node serves", || async {
        client.get_lease(name).await.ok()
    })
    .await;
    assert_eq!(lease.fencing_token, *token);
    let status = client.status().await.expect("status");
    assert_eq!(
        status
            .members
            .iter()
            .map(|member| member.id)
            .collect::<Vec<_>>(),
        vec![31]
    );
    let granted = client
        .acquire("single-after-restore", "holder-c", LEASE_TTL_MS)
        .await
        .expect("the single node takes writes")
        .lease
        .expect("the lease")
        .fencing_token;

    // Killed and started again, it recovers from its own store: the seeded snapshot, the log
    // written after it, its vote.
    let mut single = single;
    single.nodes[0].kill();
    single.restart(0);
    let client = single.client();
    let lease = eventually(SERVE_WAIT, "the restarted node serves", || async {
        client.get_lease("single-after-restore").await.ok()
    })
    .await;
    assert_eq!(lease.fencing_token, granted);
    assert_eq!(
        client
            .get_lease(name)
            .await
            .expect("restored lease")
            .fencing_token,
        *token
    );
}

/// Submits leaves until `stop`; records the leaves that got an SCT.
async fn submitter(
    client: Client,
    root: Arc<TestRoot>,
    stop: Arc<AtomicBool>,
    logged: Arc<Mutex<Vec<Vec<u8>>>>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let leaf = root.leaf(&format!("load-{n}.backup.test"));
        n += 1;
        if client
            .add_chain(vec![leaf.clone(), root.der.clone()], false)
            .await
            .is_ok()
        {
            logged.lock().expect("not poisoned").push(leaf);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The leaf inputs of entries 0 to `size` (exclusive), page by page.
async fn entries(client: &Client, size: u64) -> Vec<Vec<u8>> {
    let mut entries = Vec::new();
    while (entries.len() as u64) < size {
        let start = entries.len() as u64;
        let page = client
            .get_entries(start, size - 1)
            .await
            .expect("get-entries")
            .entries;
        assert!(
            !page.is_empty(),
            "get-entries from {start} answered nothing"
        );
        entries.extend(page.into_iter().map(|entry| entry.leaf_input));
    }
    entries
}

/// Each leaf is in exactly one of the entries.
fn assert_each_logged_once(what: &str, entries: &[Vec<u8>], leaves: &[Vec<u8>]) {
    let contains =
        |input: &[u8], leaf: &[u8]| input.windows(leaf.len()).any(|window| window == leaf);
    for (number, leaf) in leaves.iter().enumerate() {
        let places = entries.iter().filter(|input| contains(input, leaf)).count();
        assert_eq!(
            places,
            1,
            "{what}: leaf {number} is in {places} of the {} entries",
            entries.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ct_log_is_restored_with_the_entries_cleaned_up_from_the_replicated_state() {
    let files = tempfile::tempdir().expect("files");
    let root = Arc::new(TestRoot::new("Certus Backup Test Root"));
    let key_file = files.path().join("log-key.pem");
    let roots_file = files.path().join("roots.pem");
    std::fs::write(
        &key_file,
        certus_ct::signer::EcdsaP256Signer::generate_pkcs8_pem().expect("log key"),
    )
    .expect("key file");
    std::fs::write(&roots_file, &root.pem).expect("roots file");
    let tuning = || Tuning {
        ct: Some((key_file.clone(), roots_file.clone())),
        ..Tuning::default()
    };
    let file = files.path().join("ct.certus-backup");

    let old = Cluster::start(3, tuning());
    let client = old.client();
    let mut first = Vec::new();
    for n in 0..20 {
        let leaf = root.leaf(&format!("first-{n}.backup.test"));
        eventually(SERVE_WAIT, "a submission gets its SCT", || async {
            client
                .add_chain(vec![leaf.clone(), root.der.clone()], false)
                .await
                .ok()
        })
        .await;
        first.push(leaf);
    }
    // Every one of them published and cleaned up from the replicated state: from now on only
    // the nodes' local databases hold them.
    eventually(SERVE_WAIT, "the first entries cleaned up", || async {
        let status = client.log_status().await.ok()?;
        (status.next_sequence == 20 && status.held == 0).then_some(())
    })
    .await;

    let logged: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(submitter(
        old.client(),
        Arc::clone(&root),
        Arc::clone(&stop),
        Arc::clone(&logged),
    ));
    eventually(SERVE_WAIT, "submissions under load", || async {
        (logged.lock().expect("not poisoned").len() >= 10).then_some(())
    })
    .await;
    let before: Vec<Vec<u8>> = logged.lock().expect("not poisoned").clone();
    let (ok, stdout, stderr) = certus(vec![
        "ctl".into(),
        "--plaintext".into(),
        "--json".into(),
        "--endpoints".into(),
        old.endpoints().join(","),
        "snapshot".into(),
        "export".into(),
        file.display().to_string(),
    ])
    .await;
    assert!(ok, "the export succeeds: {stderr}");
    let exported: Value = serde_json::from_str(&stdout).expect("the export's JSON");
    let ct_entries = exported["ct_entries"].as_u64().expect("ct_entries");
    assert!(
        ct_entries >= 20,
        "the cleaned-up entries are in the file: {exported}"
    );
    stop.store(true, Ordering::Relaxed);
    load.await.expect("submitter");
    drop(old);

    let new = Cluster::start_prepared(&[21, 22, 23], tuning(), |specs| {
        for spec in specs {
            let output = Command::new(binary())
                .args(restore_args(&file, &spec.config_file))
                .output()
                .expect("run certus restore");
            assert!(
                output.status.success(),
                "restore node {}: {}",
                spec.id,
                String::from_utf8_lossy(&output.stderr)
            );
        }
    });
    let client = new.client();
    // Every submission acknowledged before the export reaches a serving STH of the new cluster,
    // each under one number.
    let needed = (first.len() + before.len()) as u64;
    let size = eventually(
        SERVE_WAIT,
        "a serving STH over the restored entries",
        || async {
            let sth = client.get_sth().await.ok()?;
            (sth.tree_size >= needed).then_some(sth.tree_size)
        },
    )
    .await;
    let restored = entries(&client, size).await;
    assert_each_logged_once("the first twenty", &restored, &first);
    assert_each_logged_once("logged before the export", &restored, &before);
    // The first twenty, submitted one at a time, kept their numbers.
    assert_each_logged_once("the first twenty, in place", &restored[..20], &first);

    // The restored log takes new submissions, numbered after everything it holds.
    let leaf = root.leaf("after-restore.backup.test");
    eventually(SERVE_WAIT, "a submission to the restored log", || async {
        client
            .add_chain(vec![leaf.clone(), root.der.clone()], false)
            .await
            .ok()
    })
    .await;
    // Entries acknowledged during the export but numbered only after it are numbered by the
    // new cluster, before or after this one: wait for a tree that holds it.
    let all = eventually(SERVE_WAIT, "the new entry in a serving STH", || async {
        let sth = client.get_sth().await.ok()?;
        let all = entries(&client, sth.tree_size).await;
        all.iter()
            .any(|input| {
                input
                    .windows(leaf.len())
                    .any(|window| window == leaf.as_slice())
            })
            .then_some(all)
    })
    .await;
    assert_each_logged_once("after the restore", &all, std::slice::from_ref(&leaf));
    assert_eq!(
        &all[..restored.len()],
        &restored[..],
        "the restored entries stay as they were"
    );
}
