//! Pod addresses with several replicas as `deploy/overlays/ha` runs them (the same
//! arguments, `--node-leases`): engines sharing one embedded API server, each holding
//! some nodes' Leases, its pods drawing from its nodes' ranges (node IPAM). Nodes with and
//! without `spec.podCIDRs`; one replica stops half way (a crash, or gracefully), another
//! takes its nodes over. No address is given to two pods, and every pod's address lies
//! in its node's range.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use kstage::apiserver::state::State;
use kstage::apiserver::{ApiServer, Config};
use kstage::clock::{Clock, SystemClock};
use kstage::cluster::client::KubeCluster;
use kstage::engine::{Engine, EngineConfig};
use kstage::lease::{HeldNodes, LeaseConfig, Leases};
use kstage::node_ipam::NodeIpam;
use kstage::stage::StageSet;
use kstage::template::{Renderer, StageEnv};

use crate::e2e::{kube_config, wait_for};

/// Nodes: the even ones without `spec.podCIDRs`, the odd ones with ranges inside the pod
/// range (which node IPAM must not give to another node).
const NODES: usize = 8;
/// Pods created before the stop, and as many again after it.
const PODS: usize = 48;

/// One replica: the engine, its tasks, the nodes it plays, and its lease loop.
struct Replica {
    engine: Arc<Engine<KubeCluster>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    held: HeldNodes,
    stop: tokio::sync::oneshot::Sender<()>,
    lease_loop: tokio::task::JoinHandle<()>,
}

/// A replica as `kstage run --node-leases` wires it: its own address pools, given to the
/// engine (which tells them what it sees) and to the lease loop (node IPAM).
async fn replica(server: &ApiServer, identity: &str, duration: Duration) -> Replica {
    let config = kube_config(server).await;
    let base = KubeCluster::new(config.clone()).expect("cluster");
    let (nodes_tx, nodes_rx) = tokio::sync::watch::channel(Default::default());
    let tracker = base.track_managed_nodes(nodes_tx);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let env =
        Arc::new(StageEnv::new(clock.clone(), Utc::now(), "ipam").with_node_ranges_only(true));
    let client = kube::Client::try_from(config).expect("client");
    let leases = Leases::new(
        client.clone(),
        LeaseConfig {
            identity: identity.into(),
            duration,
        },
        clock.clone(),
    )
    .with_gate(Arc::new(NodeIpam::new(client, env.clone())));
    let held = leases.held();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let lease_loop = tokio::spawn(leases.run_until(nodes_rx, async move {
        let _ = stopped.await;
    }));
    let renderer = Renderer::new(env.clone());
    let paths: Vec<_> = ["stage/node/fast", "stage/pod/fast"]
        .iter()
        .map(|s| crate::kwok_dir().join(s))
        .collect();
    let loaded = kstage::stage::load::load(&paths, &renderer).expect("corpus");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let engine = Engine::new(
        Arc::new(base.with_held_nodes(held.clone())),
        StageSet::new(loaded.stages),
        EngineConfig {
            workers: 4,
            clock,
            observer: Some(env),
            ..EngineConfig::default()
        },
    );
    let mut tasks = engine.start();
    tasks.push(tracker);
    Replica {
        engine,
        tasks,
        held,
        stop,
        lease_loop,
    }
}

/// The preset range of odd node `i` (inside the default pod range).
fn preset(i: usize) -> Vec<String> {
    vec![
        format!("10.244.{}.0/24", 200 + i),
        format!("fd00:10:244:0:{:x}::/80", 200 + i),
    ]
}

fn create_nodes(state: &State) {
    for i in 0..NODES {
        let mut node = json!({"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": format!("node-{i}")}});
        if i % 2 == 1 {
            node["spec"] = json!({"podCIDR": preset(i)[0], "podCIDRs": preset(i)});
        }
        state.create(node).expect("node");
    }
}

fn create_pods(state: &State, range: std::ops::Range<usize>) {
    for i in range {
        state
            .create(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("pod-{i}"), "namespace": "default"},
                "spec": {"nodeName": format!("node-{}", i % NODES),
                         "containers": [{"name": "c", "image": "busybox"}]},
            }))
            .expect("pod");
    }
}

fn running(pod: &Value) -> bool {
    pod.pointer("/status/phase") == Some(&json!("Running"))
        && pod.pointer("/status/podIP").is_some()
}

fn list(state: &State, kind: &str) -> Vec<Arc<Value>> {
    let resource = state.resource_of("v1", kind).expect("served kind");
    state
        .list(&resource, None, None, 0, None, |_| true)
        .expect("list")
        .items
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The addresses of the Running pods, by pod name.
fn addresses(state: &State) -> BTreeMap<String, Vec<String>> {
    list(state, "Pod")
        .iter()
        .filter(|p| running(p))
        .map(|p| {
            let ips = p.pointer("/status/podIPs").and_then(Value::as_array);
            let ips = ips
                .into_iter()
                .flatten()
                .map(|ip| text(ip, "/ip").to_owned())
                .collect();
            (text(p, "/metadata/name").to_owned(), ips)
        })
        .collect()
}

/// Whether `ip` lies in `cidr` (both IPv4, or both IPv6).
fn contains(cidr: &str, ip: &str) -> bool {
    let (base, prefix) = cidr.split_once('/').expect("a CIDR");
    let prefix: u32 = prefix.parse().expect("prefix");
    let bits = |a: &str| -> Option<(u128, u32)> {
        match a.parse::<std::net::IpAddr>().ok()? {
            std::net::IpAddr::V4(v4) => Some((u128::from(u32::from(v4)), 32)),
            std::net::IpAddr::V6(v6) => Some((u128::from(v6), 128)),
        }
    };
    match (bits(base), bits(ip)) {
        (Some((base, width)), Some((ip, w))) if width == w => {
            let shift = width - prefix;
            base.checked_shr(shift) == ip.checked_shr(shift)
        }
        _ => false,
    }
}

/// Every node has ranges, the odd ones their preset ones, no two overlap; every pod's
/// addresses are its own and lie in its node's ranges.
fn assert_unique(state: &State) {
    let pods = list(state, "Pod");
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    for pod in &pods {
        let name = text(pod, "/metadata/name");
        let ips = pod.pointer("/status/podIPs").and_then(Value::as_array);
        for ip in ips.into_iter().flatten().map(|ip| text(ip, "/ip")) {
            if let Some(first) = owners.insert(ip.to_owned(), name.to_owned()) {
                panic!("{ip} given to {first} and {name}");
            }
        }
    }
    let nodes: BTreeMap<String, Vec<String>> = list(state, "Node")
        .iter()
        .map(|n| {
            let cidrs = n.pointer("/spec/podCIDRs").and_then(Value::as_array);
            let cidrs = cidrs.into_iter().flatten().filter_map(Value::as_str);
            (
                text(n, "/metadata/name").to_owned(),
                cidrs.map(str::to_owned).collect(),
            )
        })
        .collect();
    for (i, (name, cidrs)) in nodes.iter().enumerate() {
        assert_eq!(cidrs.len(), 2, "{name} has dual-stack ranges: {cidrs:?}");
        if name.ends_with(|c: char| c.to_digit(10).is_some_and(|d| d % 2 == 1)) {
            let i: usize = name.trim_start_matches("node-").parse().expect("index");
            assert_eq!(cidrs, &preset(i), "{name} keeps its ranges");
        }
        for (other, theirs) in nodes.iter().skip(i + 1) {
            for (mine, theirs) in cidrs.iter().zip(theirs) {
                let base = |c: &str| c.split('/').next().unwrap_or("").to_owned();
                assert!(
                    !contains(mine, &base(theirs)) && !contains(theirs, &base(mine)),
                    "{name} {mine} and {other} {theirs} overlap"
                );
            }
        }
    }
    for pod in &pods {
        let name = text(pod, "/metadata/name");
        let node = &nodes[text(pod, "/spec/nodeName")];
        let ips = pod.pointer("/status/podIPs").and_then(Value::as_array);
        let ips: Vec<&str> = ips
            .into_iter()
            .flatten()
            .map(|ip| text(ip, "/ip"))
            .collect();
        assert_eq!(ips.len(), 2, "{name}: {ips:?}");
        for (ip, cidr) in ips.iter().zip(node) {
            assert!(contains(cidr, ip), "{name}: {ip} is not in {cidr}");
        }
    }
    eprintln!(
        "{} pods, {} addresses, all distinct; node ranges: {nodes:?}",
        pods.len(),
        owners.len()
    );
}

/// Wait until `replica` holds at least one node.
async fn holds_some(replica: &Replica, duration: Duration) {
    let mut held = replica.held.clone();
    tokio::time::timeout(duration * 5, async {
        while held.borrow_and_update().is_empty() {
            if held.changed().await.is_err() {
                return;
            }
        }
    })
    .await
    .expect("the replica holds nodes");
}

/// `count` replicas; half the pods Running; one replica that holds nodes stops (a crash:
/// its Leases expire; or gracefully: drained, Leases released); the rest of the pods;
/// then every address is checked.
async fn unique_addresses_across(count: usize, graceful: bool) {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let duration = Duration::from_secs(2);
    let mut replicas = Vec::new();
    for i in 0..count {
        replicas.push(replica(&server, &format!("replica-{i}"), duration).await);
    }
    let state = &server.server().state;
    create_nodes(state);
    create_pods(state, 0..PODS);
    let half = |all: &[Arc<Value>]| all.iter().filter(|p| running(p)).count() >= PODS / 2;
    wait_for(state, "v1", "Pod", "half the pods Running", half, |_| true).await;
    let stopped = replicas.remove(0);
    holds_some(&stopped, duration).await;
    let before = addresses(state);
    if graceful {
        tokio::time::timeout(Duration::from_secs(20), stopped.engine.drain())
            .await
            .expect("drained");
        stopped.stop.send(()).expect("the lease loop runs");
        stopped.lease_loop.await.expect("the lease loop ends");
    } else {
        stopped.lease_loop.abort();
    }
    stopped.engine.shutdown();
    for task in stopped.tasks {
        task.abort();
    }
    create_pods(state, PODS..2 * PODS);
    wait_for(
        state,
        "v1",
        "Pod",
        "every pod Running",
        |all| all.len() == 2 * PODS,
        running,
    )
    .await;
    assert_unique(state);
    // The pods Running before the stop kept their addresses.
    let after = addresses(state);
    for (pod, ips) in &before {
        assert_eq!(after.get(pod), Some(ips), "{pod} kept its addresses");
    }
    let survivors: BTreeSet<String> = replicas
        .iter()
        .flat_map(|r| r.held.borrow().clone())
        .collect();
    assert_eq!(survivors.len(), NODES, "the others hold every node");
    for replica in replicas {
        replica.engine.shutdown();
        drop(replica.stop);
        for task in replica.tasks {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_give_distinct_pod_addresses_across_a_crash() {
    unique_addresses_across(2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_give_distinct_pod_addresses_across_a_graceful_handover() {
    unique_addresses_across(3, true).await;
}

/// Node IPAM of one replica over `server`, its pools only from node ranges.
async fn node_ipam(server: &ApiServer, v4: &str) -> (NodeIpam, Arc<StageEnv>) {
    let client = kube::Client::try_from(kube_config(server).await).expect("client");
    let env = StageEnv::new(Arc::new(SystemClock), Utc::now(), "ipam")
        .with_pod_cidrs(v4, "fd00:10:244::/64")
        .expect("ranges")
        .with_node_ranges_only(true);
    let env = Arc::new(env);
    (NodeIpam::new(client, env.clone()), env)
}

fn key(kind: &str, name: &str) -> kstage::cluster::ObjectKey {
    let namespace = if kind == "Pod" { "default" } else { "" };
    kstage::cluster::ObjectKey {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn pod_cidrs_of(state: &State, node: &str) -> Vec<String> {
    let node = state.get(&key("Node", node)).expect("node");
    let cidrs = node.pointer("/spec/podCIDRs").and_then(Value::as_array);
    let cidrs = cidrs.into_iter().flatten().filter_map(Value::as_str);
    cidrs.map(str::to_owned).collect()
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

fn address(env: &StageEnv, uid: &str, node: &str) -> Result<String, String> {
    let pod = kstage::ipam::PodId {
        uid,
        namespace: "default",
        name: uid,
    };
    env.ipam().pod_address(Some(&pod), node)
}

/// The replica that takes a node over learns the addresses its pods have before it
/// plays the node: it hands out none of them again, and the pods keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_taking_a_node_over_learns_its_pods_addresses() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
                      "spec": {"podCIDRs": ["10.244.9.0/24", "fd00:10:244:0:9::/80"]}});
    state.create(node).expect("node");
    for (name, ip) in [
        ("a", "10.244.9.1"),
        ("b", "10.244.9.2"),
        ("c", "10.244.9.4"),
    ] {
        state
            .create(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]}}))
            .expect("pod");
        let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}});
        state
            .patch(
                &key("Pod", name),
                kstage::patch::PatchType::Merge,
                Some("status"),
                status,
            )
            .expect("status");
    }
    let (ipam, env) = node_ipam(&server, "10.244.0.0/16").await;
    assert!(address(&env, "new", "n").is_err(), "no range before");
    let ready = ipam.prepare_nodes(&["n".to_owned()], &[]).await;
    assert_eq!(ready, BTreeSet::from(["n".to_owned()]));
    // The pods' UIDs are the store's; new pods get the addresses nobody has.
    let given: Vec<String> = ["new-0", "new-1"]
        .iter()
        .map(|uid| address(&env, uid, "n").expect("address"))
        .collect();
    assert_eq!(given, ["10.244.9.3", "10.244.9.5"]);
    assert_eq!(env.ipam().leased_pods(), 5);
}

/// Two replicas giving ranges to their nodes at the same time give each node its own;
/// when every range is taken, the claims of deleted nodes are collected and reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_assigning_at_once_never_give_one_range_twice() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    // A /20: 16 node ranges for 12 nodes.
    for name in names("node-", 0..12) {
        state
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
            .expect("node");
    }
    let (a, _) = node_ipam(&server, "10.0.0.0/20").await;
    let (b, _) = node_ipam(&server, "10.0.0.0/20").await;
    let (first, second) = (names("node-", 0..6), names("node-", 6..12));
    let (ready_a, ready_b) =
        tokio::join!(a.prepare_nodes(&first, &[]), b.prepare_nodes(&second, &[]));
    assert_eq!(ready_a.len() + ready_b.len(), 12);
    let mut ranges = BTreeMap::new();
    for name in names("node-", 0..12) {
        let cidrs = pod_cidrs_of(state, &name);
        assert_eq!(cidrs.len(), 2, "{name}: {cidrs:?}");
        if let Some(other) = ranges.insert(cidrs[0].clone(), name.clone()) {
            panic!("{} given to {other} and {name}", cidrs[0]);
        }
    }
    // The 12 lowest ranges, whatever the order.
    let expected: BTreeSet<String> = (0..12).map(|i| format!("10.0.{i}.0/24")).collect();
    assert_eq!(ranges.keys().cloned().collect::<BTreeSet<_>>(), expected);
    // Fill the last 4, then one more node: none is free.
    let rest = names("more-", 0..5);
    for name in &rest {
        state
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
            .expect("node");
    }
    a.prepare_nodes(&rest, &[]).await;
    let without: Vec<&String> = rest
        .iter()
        .filter(|n| pod_cidrs_of(state, n).is_empty())
        .collect();
    assert_eq!(without.len(), 1, "one node left without a range");
    // A node goes (its claim stays: this server has no garbage collector); the next
    // round collects the claim and gives its range to the waiting node.
    let freed = pod_cidrs_of(state, "node-3");
    state.delete(&key("Node", "node-3"), None).expect("deleted");
    let waiting = without[0].clone();
    b.prepare_nodes(&[], std::slice::from_ref(&waiting)).await;
    assert_eq!(pod_cidrs_of(state, &waiting), freed);
}

/// A round out of time for assigning ranges still lets the node be played; a later
/// round gives it its range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_left_without_a_range_is_played_and_given_one_later() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    state
        .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}))
        .expect("node");
    let (ipam, env) = node_ipam(&server, "10.244.0.0/16").await;
    let out_of_time = ipam.with_budget(Duration::ZERO);
    let ready = out_of_time.prepare_nodes(&["n".to_owned()], &[]).await;
    assert_eq!(ready, BTreeSet::from(["n".to_owned()]), "played anyway");
    assert!(pod_cidrs_of(state, "n").is_empty());
    assert!(address(&env, "p", "n").is_err(), "its pods wait");
    let next_round = out_of_time.with_budget(Duration::from_secs(10));
    assert!(
        next_round
            .prepare_nodes(&[], &["n".to_owned()])
            .await
            .is_empty()
    );
    assert_eq!(
        pod_cidrs_of(state, "n"),
        ["10.244.0.0/24", "fd00:10:244::/80"]
    );
    assert_eq!(address(&env, "p", "n").as_deref(), Ok("10.244.0.1"));
}
