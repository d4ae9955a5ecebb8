//! Two `kstage run` processes as `deploy/overlays/ha` runs them (`--stage-crds
//! --node-leases`, nodes chosen by annotation), against a `kstage apiserver` process
//! that keeps an audit log:
//!
//! - one replica gets SIGTERM while objects are being played: it exits 0, the other
//!   takes its nodes over and finishes every object, no Stage event is emitted twice,
//!   and no pod IP is given to two pods;
//! - every request either replica made is one `deploy/base/rbac.yaml` allows, and every
//!   verb that ClusterRole grants was used: it grants what kstage needs and nothing more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use futures_util::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::process::Spawned;
use crate::remote::{apiserver, client, event_counts, node_ready, pod_running, until, watch_until};

const NODES: usize = 6;
/// Pods created before the SIGTERM, and as many again while it lands.
const PODS: usize = 60;

/// A `kstage run` replica of the `ha` overlay.
fn replica(kubeconfig: &Path, identity: &str) -> Spawned {
    let path = kubeconfig.display().to_string();
    let pod_stages = crate::root()
        .join("examples/stages/pod")
        .display()
        .to_string();
    let mut run = Spawned::start(&[
        "run",
        "--kubeconfig",
        &path,
        "--stage-crds",
        "--stages",
        &pod_stages,
        "--manage-nodes-with-annotation-selector",
        "kwok.x-k8s.io/node=fake",
        "--node-leases",
        "--lease-duration",
        "4s",
        "--identity",
        identity,
        "--serve",
        "127.0.0.1:0",
        "--log-format",
        "text",
    ]);
    assert!(
        run.wait_for(|l| l.starts_with("kstage run: playing")),
        "{identity} said:\n{}",
        run.said()
    );
    run
}

fn node(i: usize) -> Node {
    serde_json::from_value(json!({"metadata": {
        "name": format!("fake-{i}"),
        "annotations": {"kwok.x-k8s.io/node": "fake"},
    }}))
    .expect("node")
}

/// Every third pod has a finalizer, which its removal Stage takes off (a patch of the pod).
fn pod(i: usize) -> Pod {
    let finalizers = if i.is_multiple_of(3) {
        json!(["kstage.dev/test"])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{i}"), "finalizers": finalizers},
        "spec": {"nodeName": format!("fake-{}", i % NODES),
                 "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod")
}

async fn create_pods(pods: &Api<Pod>, range: std::ops::Range<usize>) {
    futures_util::stream::iter(range)
        .map(|i| {
            let pods = pods.clone();
            async move {
                pods.create(&PostParams::default(), &pod(i))
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .expect("pods created");
}

/// The holders of the node Leases (the replicas' own Leases left out).
fn holders(leases: &BTreeMap<String, Lease>) -> BTreeMap<String, String> {
    leases
        .iter()
        .filter(|(name, _)| name.starts_with("fake-"))
        .filter_map(|(name, l)| Some((name.clone(), l.spec.as_ref()?.holder_identity.clone()?)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_by_sigterm_hands_over_and_the_cluster_role_covers_every_request() {
    let dir = crate::scratch("replicas");
    let audit = dir.join("audit.log");
    let audit_arg = audit.display().to_string();
    let crd = crate::root()
        .join("deploy/crds/stages.kwok.x-k8s.io.yaml")
        .display()
        .to_string();
    // The node Stages are Stage resources (their status is written), the pod Stages files.
    let node_stages = crate::root()
        .join("examples/stages/node")
        .display()
        .to_string();
    // Conflicts on patches, so that the engine reads objects again (get) as it does after
    // one; no Stage event may be emitted twice for all that.
    let (_server, kubeconfig) = apiserver(
        &dir,
        &[
            "--audit-log",
            &audit_arg,
            "--faults",
            "patch/nodes:409=0.5,patch/pods:409=0.1",
            "--load",
            &crd,
            &node_stages,
        ],
    );
    let client = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for i in 0..NODES {
        nodes
            .create(&PostParams::default(), &node(i))
            .await
            .expect("node");
    }
    // A node without the annotation: neither replica touches it.
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "real-0"}})).expect("node"),
        )
        .await
        .expect("node");

    let mut a = replica(&kubeconfig, "replica-a");
    let mut b = replica(&kubeconfig, "replica-b");
    create_pods(&pods, 0..PODS).await;
    until(nodes.clone(), NODES, "nodes Ready", node_ready).await;
    until(pods.clone(), PODS, "pods Running", pod_running).await;
    // Both replicas hold nodes before one is stopped.
    watch_until(leases.clone(), "both replicas holding nodes", |l| {
        let by: BTreeSet<String> = holders(l).into_values().collect();
        by.contains("replica-a") && by.contains("replica-b")
    })
    .await;

    // SIGTERM replica-a while a second batch of pods is being created and played.
    let more = tokio::spawn({
        let pods = pods.clone();
        async move { create_pods(&pods, PODS..2 * PODS).await }
    });
    let pid = rustix::process::Pid::from_raw(a.child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    more.await.expect("created");
    // It exits within its --shutdown-grace (20 s).
    let status = tokio::task::block_in_place(|| a.child.wait()).expect("replica-a exits");
    assert_eq!(status.code(), Some(0), "replica-a:\n{}", a.said());

    // replica-b plays every object, including those of replica-a's nodes.
    until(pods.clone(), 2 * PODS, "pods Running", pod_running).await;
    watch_until(leases.clone(), "replica-b holding every node", |l| {
        let h = holders(l);
        h.len() == NODES && h.values().all(|h| h == "replica-b")
    })
    .await;
    // Both replicas had the same --cidr: still no address was given to two pods.
    let listed = pods.list(&ListParams::default()).await.expect("pods").items;
    let ips: BTreeSet<String> = listed
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    assert_eq!(ips.len(), 2 * PODS, "distinct pod IPs: {ips:?}");
    // Deleting every pod (a 2 s grace period): replica-b plays their removal.
    pods.delete_collection(
        &DeleteParams::default().grace_period(2),
        &ListParams::default(),
    )
    .await
    .expect("deleted");
    watch_until(pods.clone(), "every pod gone", BTreeMap::is_empty).await;
    let untouched = nodes.get("real-0").await.expect("real-0");
    assert!(!node_ready(&untouched), "an unmanaged node was played");
    assert!(
        b.child.try_wait().expect("status").is_none(),
        "replica-b runs"
    );

    // No Stage event twice: each pod has one Scheduled, one Started, one Killing.
    let counts = event_counts(&client, "default").await;
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "events emitted twice: {twice:?}");
    for reason in ["Scheduled", "Started", "Killing"] {
        let n = counts.keys().filter(|(_, r)| r == reason).count();
        assert_eq!(n, 2 * PODS, "{reason} events");
    }
    drop(b);

    // Every request allowed by the base's ClusterRole, every verb it grants used.
    let docs = crate::deploy::documents("deploy/base/rbac.yaml");
    crate::rbac::check(
        &crate::rbac::requests(&audit),
        &crate::rbac::grants(&docs, true),
    );
}
