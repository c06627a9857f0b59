//! Members known by host name, on real `certus serve` processes: three nodes listen on
//! `0.0.0.0`, advertise `node-N.certus.test` and found a cluster by those names; then a
//! follower's IP address changes under its name and the cluster keeps serving, every
//! acknowledged write standing, and a member's recorded address is changed with
//! `Admin/SetMemberAddress`.
//!
//! Each node runs in its own network namespace (`support/netns.rs`) with a hosts file of its
//! own, so the names resolve without DNS and without touching the machine's `/etc/hosts`. The
//! test process stays outside and talks to the nodes by IP address, pinned to the endpoints it
//! is given (it cannot resolve the names; the nodes forward to the leader). Where namespaces
//! cannot be made (not root), the nodes run on loopback advertising `localhost` and the part
//! that moves an address is skipped, saying why.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use certus_client::{Client, ClientConfig};
use support::netns::Network;
use support::{Cluster, Tuning, assert_grants_survive, eventually};
use tonic::Code;

const ELECTION: Duration = Duration::from_secs(20);

async fn leader_other_than(cluster: &Cluster, old: u64) -> u64 {
    support::leader_other_than(cluster, old, ELECTION).await
}

async fn acquire_many(client: &Client, prefix: &str, count: usize) -> BTreeMap<String, u64> {
    support::acquire_many(client, prefix, count, 600_000).await
}

/// A client that sends everything through `endpoints` (IP addresses) only.
fn pinned(endpoints: Vec<String>) -> Client {
    let config = ClientConfig {
        pin_to_endpoints: true,
        deadline: Duration::from_secs(20),
        ..ClientConfig::default()
    };
    Client::with_config(endpoints, config).expect("client")
}

/// The recorded gRPC address of every member, by id.
async fn recorded(client: &Client, endpoint: &str) -> BTreeMap<u64, String> {
    let status = client.status_of(endpoint).await.expect("status");
    status
        .members
        .into_iter()
        .map(|member| (member.id, member.grpc_addr))
        .collect()
}

/// Waits until the node at `endpoint` has applied everything the cluster committed so far.
async fn caught_up(cluster: &Cluster, endpoint: &str, what: &str) {
    let client = pinned(cluster.endpoints());
    let mut target = 0;
    for other in cluster.endpoints() {
        if let Ok(status) = client.status_of(&other).await {
            target = target.max(status.commit_index);
        }
    }
    assert!(target > 0, "some node knows a commit index");
    eventually(ELECTION, what, || async {
        let applied = client.status_of(endpoint).await.ok()?.applied_index;
        (applied >= target).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_advertise_names_and_a_moved_member_is_found_again_under_its_name() {
    let network = match Network::create(3) {
        Ok(network) => network,
        Err(why) => {
            println!("names: no network namespaces here ({why}); loopback under localhost only");
            return on_loopback().await;
        }
    };
    let mut cluster = Cluster::start_named(&network, 3, Tuning::default());
    let leader = leader_other_than(&cluster, 0).await;
    let client = pinned(cluster.endpoints());
    let first = cluster.endpoints()[0].clone();
    let expected: BTreeMap<u64, String> = (1..=3)
        .map(|id| (id, format!("node-{id}.certus.test:7101")))
        .collect();
    assert_eq!(
        recorded(&client, &first).await,
        expected,
        "the membership records the advertised names, not the listening 0.0.0.0"
    );
    let mut granted = acquire_many(&client, "named", 10).await;

    // A follower's IP address changes under its name, while it runs: its old address is gone
    // (the leader's connection to it dies with it), every hosts file names the new one.
    let moved_id = (1..=3).find(|id| *id != leader).expect("a follower");
    let moved = cluster.index_of(moved_id);
    let host = u8::try_from(moved_id).expect("a host number");
    let new_ip = network.readdress(host, 100 + host);
    let names: Vec<(String, std::net::IpAddr)> = (1..=3u8)
        .map(|host_n| {
            let ip = if host_n == host {
                new_ip
            } else {
                network.addr(host_n)
            };
            (format!("node-{host_n}.certus.test"), ip)
        })
        .collect();
    network.set_hosts(&names);
    cluster.nodes[moved].spec.grpc.set_ip(new_ip);
    cluster.nodes[moved].spec.http.set_ip(new_ip);
    let moved_endpoint = cluster.nodes[moved].spec.grpc.to_string();
    println!("node {moved_id} moved to {new_ip}; node {leader} leads");

    let client = pinned(cluster.endpoints());
    granted.extend(acquire_many(&client, "after-move", 10).await);
    caught_up(
        &cluster,
        &moved_endpoint,
        "the moved node replicating again at its new address",
    )
    .await;
    assert_grants_survive(&pinned(vec![moved_endpoint.clone()]), &granted).await;

    // It restarts on its data at the new address and rejoins under its name.
    cluster.nodes[moved].kill();
    cluster.restart(moved);
    caught_up(&cluster, &moved_endpoint, "the restarted node caught up").await;

    // The leader dies: the moved node must vote and be reached by name for a new leader to
    // serve.
    let leader_index = cluster.index_of(leader);
    cluster.nodes[leader_index].kill();
    let second = leader_other_than(&cluster, leader).await;
    println!("node {second} leads after node {leader} was killed");
    let client = pinned(cluster.endpoints());
    granted.extend(acquire_many(&client, "after-leader", 5).await);
    assert_grants_survive(&pinned(vec![moved_endpoint.clone()]), &granted).await;
    assert_eq!(
        recorded(&client, &moved_endpoint).await,
        expected,
        "the names stay recorded; only the address behind one changed"
    );
    cluster.restart(leader_index);

    // A recorded address is changed by name: an alias of the moved node's name, checked by
    // asking the node there who it is first.
    let mut aliased = names.clone();
    aliased.push((format!("node-{host}b.certus.test"), new_ip));
    let third = (1..=3u8)
        .find(|n| u64::from(*n) != leader && *n != host)
        .expect("a third node");
    aliased.push(("elsewhere.certus.test".to_owned(), network.addr(third)));
    network.set_hosts(&aliased);
    let alias = format!("node-{host}b.certus.test:7101");
    let reply = client
        .set_member_address(moved_id, Some(alias.clone()), None)
        .await
        .expect("set the moved node's address to its alias");
    let member = reply
        .members
        .iter()
        .find(|member| member.id == moved_id)
        .expect("still a member");
    assert_eq!(member.grpc_addr, alias);
    assert_eq!(member.http_addr, format!("node-{host}.certus.test:7181"));
    granted.extend(acquire_many(&client, "after-alias", 5).await);
    caught_up(
        &cluster,
        &moved_endpoint,
        "the node replicating under its alias",
    )
    .await;
    assert_grants_survive(&pinned(vec![moved_endpoint.clone()]), &granted).await;

    // Another node's name, a name with no node, and a malformed name change nothing.
    let other = client
        .set_member_address(
            moved_id,
            Some("elsewhere.certus.test:7101".to_owned()),
            None,
        )
        .await
        .expect_err("another node answers there");
    assert_eq!(other.code(), Code::FailedPrecondition, "{other}");
    assert_eq!(other.reason(), "member-id-mismatch", "{other}");
    let nobody = client
        .set_member_address(moved_id, Some("nobody.certus.test:7101".to_owned()), None)
        .await
        .expect_err("no node answers there");
    assert_eq!(nobody.reason(), "member-unreachable", "{nobody}");
    let malformed = client
        .set_member_address(moved_id, Some("node_3.certus.test:7101".to_owned()), None)
        .await
        .expect_err("not a host name");
    assert_eq!(malformed.code(), Code::InvalidArgument, "{malformed}");
    let members = recorded(&client, &moved_endpoint).await;
    assert_eq!(
        members.get(&moved_id),
        Some(&alias),
        "refusals change nothing"
    );
}

/// Without namespaces: the nodes listen on `0.0.0.0` and advertise `localhost`, found a
/// cluster by that name and serve writes.
async fn on_loopback() {
    let cluster = Cluster::start_as_localhost(3, Tuning::default());
    let _leader = leader_other_than(&cluster, 0).await;
    let client = pinned(cluster.endpoints());
    let first = cluster.endpoints()[0].clone();
    let members = recorded(&client, &first).await;
    for node in &cluster.nodes {
        assert_eq!(
            members.get(&node.spec.id),
            Some(&format!("localhost:{}", node.spec.grpc.port()))
        );
    }
    let granted = acquire_many(&client, "named", 10).await;
    for endpoint in cluster.endpoints() {
        caught_up(&cluster, &endpoint, "every node applying by name").await;
        assert_grants_survive(&pinned(vec![endpoint]), &granted).await;
    }
}
