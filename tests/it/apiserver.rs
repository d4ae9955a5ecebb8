//! The embedded API server through kube-rs, over HTTP: CRUD, list and watch with
//! resume and 410, every patch type, status subresource rules, finalizers and graceful
//! pod deletion, selectors, paging, TLS with a token, and fault injection.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config as KubeConfig};
use serde_json::{Value, json};

use kstage::apiserver::{ApiServer, Config};

/// A server and a kube-rs client for it.
pub struct Harness {
    /// The server.
    pub server: ApiServer,
    /// A client configured from the server's kubeconfig.
    pub client: Client,
}

/// Start a server with `config` and connect a client through its kubeconfig. The
/// client does not retry 429, 503 and 504 itself (kube-rs' default), so tests see what
/// the server answers.
pub async fn harness(config: Config) -> Harness {
    let server = ApiServer::start(config).await.expect("server starts");
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig parses");
    let mut config = KubeConfig::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    config.default_retry = false;
    let client = Client::try_from(config).expect("client");
    Harness { server, client }
}

fn pod(name: &str, node: Option<&str>, labels: Value) -> Pod {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(p).expect("pod")
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_with_optimistic_concurrency_and_generate_name() {
    let h = harness(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let created = pods
        .create(
            &PostParams::default(),
            &pod("a", None, json!({"app": "web"})),
        )
        .await
        .expect("created");
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending"),
        "defaulted"
    );
    let again = pods
        .create(&PostParams::default(), &pod("a", None, json!({})))
        .await;
    let e = again.expect_err("duplicate");
    assert_eq!(status_code(&e), Some(409), "{e}");
    assert!(e.to_string().contains("already exists"), "{e}");

    // Update with the current resourceVersion works; with an old one it conflicts.
    let mut current = pods.get("a").await.expect("get");
    let stale = current.clone();
    current.metadata.labels = Some(BTreeMap::from([("app".into(), "db".into())]));
    let updated = pods
        .replace("a", &PostParams::default(), &current)
        .await
        .expect("replace");
    assert_ne!(
        updated.metadata.resource_version,
        stale.metadata.resource_version
    );
    let e = pods
        .replace("a", &PostParams::default(), &stale)
        .await
        .expect_err("stale");
    assert_eq!(status_code(&e), Some(409), "{e}");

    let mut generated = pod("", None, json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("web-".into());
    let g = pods
        .create(&PostParams::default(), &generated)
        .await
        .expect("generated");
    assert!(
        g.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("web-") && n.len() == 9)
    );

    let e = pods.get("missing").await.expect_err("missing");
    assert_eq!(status_code(&e), Some(404));
    assert!(e.to_string().contains("pods \"missing\" not found"), "{e}");

    let elsewhere: Api<Pod> = Api::namespaced(h.client.clone(), "nowhere");
    let e = elsewhere
        .create(&PostParams::default(), &pod("x", None, json!({})))
        .await
        .expect_err("no such namespace");
    assert_eq!(status_code(&e), Some(404), "{e}");

    pods.delete("a", &DeleteParams::default())
        .await
        .expect("deleted");
    assert_eq!(
        status_code(&pods.get("a").await.expect_err("gone")),
        Some(404)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_field_selectors_and_paging() {
    let h = harness(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    for i in 0..7 {
        let node = if i % 2 == 0 { "n0" } else { "n1" };
        let tier = if i < 3 { "front" } else { "back" };
        pods.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), Some(node), json!({"tier": tier})),
        )
        .await
        .expect("created");
    }
    let on_n0 = pods
        .list(&ListParams::default().fields("spec.nodeName=n0"))
        .await
        .expect("list");
    assert_eq!(names(&on_n0.items), ["p0", "p2", "p4", "p6"]);
    let front_n1 = pods
        .list(
            &ListParams::default()
                .labels("tier in (front)")
                .fields("spec.nodeName!=n0"),
        )
        .await
        .expect("list");
    assert_eq!(names(&front_n1.items), ["p1"]);
    let not_back = pods
        .list(&ListParams::default().labels("tier!=back"))
        .await
        .expect("list");
    assert_eq!(not_back.items.len(), 3);
    let e = pods
        .list(&ListParams::default().fields("spec.hostname=x"))
        .await
        .expect_err("unsupported field");
    assert_eq!(status_code(&e), Some(400), "{e}");

    // Pages of 3 with continue tokens give every pod once, in order.
    let mut seen = Vec::new();
    let mut params = ListParams::default().limit(3);
    loop {
        let page = pods.list(&params).await.expect("page");
        assert!(page.items.len() <= 3);
        seen.extend(names(&page.items));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4", "p5", "p6"]);
    let all: Api<Pod> = Api::all(h.client.clone());
    assert_eq!(
        all.list(&ListParams::default())
            .await
            .expect("all")
            .items
            .len(),
        7
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_patch_type_and_the_status_rules() {
    let h = harness(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("a", None, json!({"app": "web"})),
    )
    .await
    .expect("created");
    let pp = PatchParams::default();
    let merged = pods
        .patch(
            "a",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"merged": "yes"}}})),
        )
        .await
        .expect("merge");
    assert_eq!(
        merged
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("merged"))
            .map(String::as_str),
        Some("yes")
    );
    // Strategic: containers merge by name (a merge patch would replace the list).
    let strategic = pods
        .patch(
            "a",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "sidecar", "image": "envoy"}]}}),
            ),
        )
        .await
        .expect("strategic");
    let containers: Vec<_> = strategic
        .spec
        .as_ref()
        .expect("spec")
        .containers
        .iter()
        .map(|c| c.name.clone())
        .collect();
    // New items come first, as Kubernetes orders a merged list.
    assert_eq!(containers, ["sidecar", "c"]);
    let ops: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]),
    )
    .expect("ops");
    let jsoned = pods
        .patch("a", &pp, &Patch::<Value>::Json(ops))
        .await
        .expect("json");
    assert_eq!(
        jsoned
            .metadata
            .annotations
            .and_then(|a| a.get("k").cloned())
            .as_deref(),
        Some("v")
    );
    // A precondition in a merge patch is checked.
    let e = pods
        .patch(
            "a",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}})),
        )
        .await
        .expect_err("stale precondition");
    assert_eq!(status_code(&e), Some(409), "{e}");

    // Server-side apply creates, then updates, with a field manager.
    let applier = PatchParams::apply("kstage-test");
    let applied = pods
        .patch("b", &applier, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "one"}]}})))
        .await
        .expect("apply creates");
    assert_eq!(
        applied.spec.expect("spec").containers[0].image.as_deref(),
        Some("one")
    );
    let applied = pods
        .patch("b", &applier, &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "two"}]}})))
        .await
        .expect("apply updates");
    assert_eq!(
        applied.spec.expect("spec").containers[0].image.as_deref(),
        Some("two")
    );
    assert_eq!(applied.metadata.generation, Some(2));

    // A status write ignores spec; a main write ignores status.
    let status = pods
        .patch_status(
            "a",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "sneaky"}})),
        )
        .await
        .expect("status");
    assert_eq!(
        status.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert_eq!(
        status.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        None
    );
    let main = pods
        .patch(
            "a",
            &pp,
            &Patch::Merge(
                json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"after": "status"}}}),
            ),
        )
        .await
        .expect("main");
    assert_eq!(
        main.status.and_then(|s| s.phase).as_deref(),
        Some("Running")
    );

    // Strategic merge patches are refused for custom resources (415), as a real server does.
    let crds: Api<DynamicObject> = Api::all_with(h.client.clone(), &crd_resource());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(stage_crd()).expect("crd"),
    )
    .await
    .expect("crd created");
    let stages: Api<DynamicObject> = Api::all_with(h.client.clone(), &stage_resource());
    stages
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "s"}, "spec": {"weight": 1}})).expect("stage"))
        .await
        .expect("stage created");
    let e = stages
        .patch("s", &pp, &Patch::Strategic(json!({"spec": {"weight": 2}})))
        .await
        .expect_err("strategic on a custom resource");
    assert_eq!(status_code(&e), Some(415), "{e}");
    let s = stages
        .patch("s", &pp, &Patch::Merge(json!({"spec": {"weight": 2}})))
        .await
        .expect("merge");
    assert_eq!(s.data["spec"]["weight"], 2);
}

fn crd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    )
}

fn stage_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Stage"),
        "stages",
    )
}

/// KWOK's Stage CRD, from the shared corpus.
fn stage_crd() -> Value {
    let text = std::fs::read_to_string(crate::kwok_dir().join("crd/kwok.x-k8s.io_stages.yaml"))
        .expect("the KWOK Stage CRD (../shared/kwok/crd)");
    kstage::yaml::to_json(&text).expect("CRD YAML")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_are_discovered_through_their_crd() {
    let h = harness(Config::default()).await;
    let crds: Api<DynamicObject> = Api::all_with(h.client.clone(), &crd_resource());
    let crd = crds
        .create(
            &PostParams::default(),
            &serde_json::from_value(stage_crd()).expect("crd"),
        )
        .await
        .expect("crd created");
    let conditions = crd.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    // kube-rs discovery finds the new kind by its group.
    let discovery = kube::Discovery::new(h.client.clone())
        .run()
        .await
        .expect("discovery");
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Stage"))
        .expect("Stage discovered");
    assert_eq!(resource.plural, "stages");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
            .is_some()
    );
    let stages: Api<DynamicObject> = Api::all_with(h.client.clone(), &resource);
    stages
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "s"}, "spec": {}})).expect("stage"))
        .await
        .expect("stage created");
    // Deleting the CRD removes its objects and stops serving the kind.
    crds.delete("stages.kwok.x-k8s.io", &DeleteParams::default())
        .await
        .expect("crd deleted");
    let e = stages
        .list(&ListParams::default())
        .await
        .expect_err("no longer served");
    assert_eq!(status_code(&e), Some(404), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_and_graceful_pod_deletion() {
    let h = harness(Config::default()).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("bound", Some("node-0"), json!({})),
    )
    .await
    .expect("created");
    let marked = pods
        .delete("bound", &DeleteParams::default())
        .await
        .expect("delete");
    let marked = marked.left().expect("a bound pod is only marked");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    assert!(
        pods.get("bound").await.is_ok(),
        "still there while it terminates"
    );
    pods.delete(
        "bound",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("delete now");
    assert_eq!(
        status_code(&pods.get("bound").await.expect_err("gone")),
        Some(404)
    );

    let nodes: Api<Node> = Api::all(h.client.clone());
    let node: Node = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "finalizers": ["kstage.dev/test"]}})).expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node");
    let held = nodes
        .delete("n", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("held");
    assert!(held.metadata.deletion_timestamp.is_some());
    let ops: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
            .expect("ops");
    nodes
        .patch("n", &PatchParams::default(), &Patch::<Value>::Json(ops))
        .await
        .expect("finalizer removed");
    assert_eq!(
        status_code(&nodes.get("n").await.expect_err("gone")),
        Some(404)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_from_a_resource_version_and_expires_old_ones() {
    let h = harness(Config {
        history_limit: 4,
        ..Config::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let list = pods.list(&ListParams::default()).await.expect("list");
    let start = list.metadata.resource_version.expect("rv");
    for i in 0..3 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), None, json!({"i": i.to_string()})),
        )
        .await
        .expect("created");
    }
    // From the list's version: the three creations, in order.
    let stream = pods
        .watch(&WatchParams::default().timeout(5), &start)
        .await
        .expect("watch");
    let events: Vec<WatchEvent<Pod>> = stream.take(3).try_collect().await.expect("events");
    let added: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(p) => p.metadata.name.clone().unwrap_or_default(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(added, ["p0", "p1", "p2"]);
    // Two more changes push the first events out of the 4 kept: 410.
    pods.patch(
        "p0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .expect("patch");
    pods.delete("p1", &DeleteParams::default())
        .await
        .expect("delete");
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &start)
        .await
        .expect("watch")
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(status))) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
    // A filtered watch sees an object leave its selection as DELETED.
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = pods
        .watch(&WatchParams::default().labels("i=2").timeout(5), &rv)
        .await
        .expect("watch")
        .boxed();
    pods.patch(
        "p2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"i": "changed"}}})),
    )
    .await
    .expect("patch");
    match stream.next().await {
        Some(Ok(WatchEvent::Deleted(p))) => assert_eq!(p.metadata.name.as_deref(), Some("p2")),
        other => panic!("expected DELETED, got {other:?}"),
    }
}

/// kube-rs' watcher over watches the server closes early, with creations and updates
/// in between: every object ends up seen in its final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_closed_early_is_resumed_without_missed_events() {
    let config = Config {
        faults: "watch:close=1".parse().expect("spec"),
        watch_close_max: Duration::from_millis(100),
        ..Config::default()
    };
    let h = harness(config).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let (store, writer) = kube::runtime::reflector::store::<Pod>();
    let watch = watcher(pods.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|_| async {});
    let watch = tokio::spawn(watch);
    let n = 60;
    for i in 0..n {
        pods.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), None, json!({})),
        )
        .await
        .expect("created");
        if i % 3 == 0 {
            pods.patch(
                &format!("p{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"round": "2"}}})),
            )
            .await
            .expect("patched");
        }
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = store.state();
        let labelled = state
            .iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.get("round").is_some())
            })
            .count();
        if state.len() == n && labelled == n.div_ceil(3) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "saw {} pods, {labelled} labelled",
            state.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watch.abort();
    let closes: u64 = h
        .server
        .server()
        .faults
        .injected_by_resource()
        .iter()
        .filter(|(k, _)| k.verb == kstage::cluster::faults::Verb::Watch)
        .map(|(_, n)| n)
        .sum();
    assert!(closes >= 2, "the watch was closed {closes} times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_fault_rates_hold_and_are_counted() {
    let config = Config {
        faults: "patch/pods:500=0.3,get/pods:429@2s=0.2"
            .parse()
            .expect("spec"),
        fault_seed: 7,
        ..Config::default()
    };
    let h = harness(config).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("a", None, json!({})))
        .await
        .expect("created");
    let n = 400;
    let (mut patch_failures, mut get_failures) = (0u32, 0u32);
    for i in 0..n {
        let p = Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}}));
        match pods.patch("a", &PatchParams::default(), &p).await {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(status_code(&e), Some(500), "{e}");
                patch_failures += 1;
            }
        }
        match pods.get("a").await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
                get_failures += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Binomial bounds: 4 standard deviations.
    for (got, p) in [(patch_failures, 0.3), (get_failures, 0.2)] {
        let mean = f64::from(n) * p;
        let sd = (f64::from(n) * p * (1.0 - p)).sqrt();
        assert!(
            (f64::from(got) - mean).abs() < 4.0 * sd,
            "{got} failures, expected about {mean}"
        );
    }
    // Nodes are not targeted.
    let nodes: Api<Node> = Api::all(h.client.clone());
    for _ in 0..50 {
        nodes
            .list(&ListParams::default())
            .await
            .expect("nodes never fail");
    }
    // The admin endpoint counts them, and replaces the rules at runtime.
    let counts = admin(&h, "GET", None).await;
    let count = |verb: &str| -> u64 {
        counts["injected"]
            .as_array()
            .expect("injected")
            .iter()
            .filter(|c| c["verb"] == verb && c["resource"] == "pods")
            .filter_map(|c| c["count"].as_u64())
            .sum()
    };
    assert_eq!(count("patch"), u64::from(patch_failures));
    assert_eq!(count("get"), u64::from(get_failures));
    let replaced = admin(&h, "PUT", Some("get/pods:503=1")).await;
    assert_eq!(replaced["spec"], "get/pods:503=1");
    let e = pods.get("a").await.expect_err("now always 503");
    assert_eq!(status_code(&e), Some(503));
}

/// A request to the fault admin endpoint.
async fn admin(h: &Harness, method: &str, body: Option<&str>) -> Value {
    let request = http::Request::builder()
        .method(method)
        .uri("/kstage/faults")
        .body(body.unwrap_or("").as_bytes().to_vec())
        .expect("request");
    h.client
        .request::<Value>(request)
        .await
        .expect("admin endpoint")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_and_timeouts_reach_the_client_as_transport_errors() {
    let config = Config {
        faults: "get/pods:reset=1,list/pods:timeout=1"
            .parse()
            .expect("spec"),
        fault_timeout: Duration::from_millis(50),
        ..Config::default()
    };
    let h = harness(config).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let e = pods.get("a").await.expect_err("reset");
    assert_eq!(status_code(&e), None, "a reset is not an HTTP status: {e}");
    let e = pods
        .list(&ListParams::default())
        .await
        .expect_err("timeout");
    assert_eq!(status_code(&e), Some(504), "{e}");
    // The server keeps serving other requests.
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes.list(&ListParams::default()).await.expect("nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_a_bearer_token() {
    let config = Config {
        tls: true,
        token: Some("s3cret".into()),
        ..Config::default()
    };
    let h = harness(config).await;
    assert!(h.server.url().starts_with("https://"));
    let nodes: Api<Node> = Api::all(h.client.clone());
    nodes
        .list(&ListParams::default())
        .await
        .expect("authorised over TLS");
    // Without the token: 401.
    let text = h
        .server
        .kubeconfig()
        .replace("token: \"s3cret\"", "token: \"wrong\"");
    let kubeconfig = Kubeconfig::from_yaml(&text).expect("kubeconfig");
    let config = KubeConfig::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    let wrong: Api<Node> = Api::all(Client::try_from(config).expect("client"));
    let e = wrong
        .list(&ListParams::default())
        .await
        .expect_err("unauthorised");
    assert_eq!(status_code(&e), Some(401), "{e}");
}

/// 100,000 pods: listed in pages of 500 by kube-rs (each page starts at its key, no
/// rescan), and a watch from the list's version sees exactly the changes made after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_pods_are_paged_and_watched() {
    let h = harness(Config::default()).await;
    let state = &h.server.server().state;
    let n = 100_000;
    for i in 0..n {
        state
            .create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i:06}"), "namespace": "default"}, "spec": {"nodeName": format!("n{}", i % 100)}}))
            .expect("created");
    }
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let started = std::time::Instant::now();
    let mut params = ListParams::default().limit(500);
    let (mut listed, mut pages, mut rv) = (0, 0, String::new());
    loop {
        let page = pods.list(&params).await.expect("page");
        listed += page.items.len();
        pages += 1;
        if rv.is_empty() {
            rv = page.metadata.resource_version.clone().unwrap_or_default();
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    eprintln!(
        "listed {listed} pods in {pages} pages in {:?}",
        started.elapsed()
    );
    assert_eq!((listed, pages), (n, n / 500));
    // A field selector on one node reads 1,000 of them.
    let on_node = pods
        .list(&ListParams::default().fields("spec.nodeName=n7"))
        .await
        .expect("list");
    assert_eq!(on_node.items.len(), n / 100);

    let stream = pods
        .watch(&WatchParams::default().timeout(30), &rv)
        .await
        .expect("watch");
    let changed = 1_000;
    for i in (0..n).step_by(n / changed) {
        state
            .patch(
                &kstage::cluster::ObjectKey {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    namespace: "default".into(),
                    name: format!("p{i:06}"),
                },
                kstage::patch::PatchType::Merge,
                Some("status"),
                json!({"status": {"phase": "Running"}}),
            )
            .expect("patched");
    }
    let events: Vec<WatchEvent<Pod>> = stream.take(changed).try_collect().await.expect("events");
    assert!(events.iter().all(|e| matches!(e, WatchEvent::Modified(p) if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_patch_benchmark_patches_and_cleans_up() {
    let h = harness(Config::default()).await;
    let mut versions = h.server.server().state.resource_version();
    // Bare, then with the lifecycle's watches open (it fails unless both list), then
    // writing a whole status.
    let status = serde_json::json!({"phase": "Running", "podIP": "10.0.0.9"});
    for (watched, status) in [
        (false, None),
        (true, None),
        (false, status.as_object().cloned()),
    ] {
        let whole = status.is_some();
        let spec = kstage::bench::RawPatch {
            concurrency: 4,
            duration: Duration::from_millis(300),
            objects: 5,
            namespace: "default".into(),
            watched,
            status,
        };
        let report = kstage::bench::raw_patch(h.client.clone(), &spec, |_, _| {})
            .await
            .expect("benchmark");
        assert!(report.ok > 0 && report.errors == 0, "{report:?}");
        assert!(report.p50 <= report.p99);
        // Every patch changed a pod: the store's version moved once per patch, plus the
        // creations and deletions around them.
        let rv = h.server.server().state.resource_version();
        assert!(
            rv >= versions + report.ok + 10,
            "{rv} vs {versions} + {report:?}"
        );
        // The patches wrote the status asked for, and their own message.
        let written = h
            .server
            .server()
            .state
            .channel("v1", "Pod")
            .after(versions)
            .expect("history");
        let patched = written
            .iter()
            .filter(|r| r.object["status"]["message"].is_string())
            .collect::<Vec<_>>();
        assert!(!patched.is_empty());
        assert!(
            patched
                .iter()
                .all(|r| (r.object["status"]["phase"] == "Running") == whole),
            "{whole}"
        );
        versions = rv;
        let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
        assert!(
            pods.list(&ListParams::default())
                .await
                .expect("list")
                .items
                .is_empty(),
            "cleaned up"
        );
    }
}

/// `kstage apiserver` as a process: it loads objects, writes a kubeconfig with its
/// token, and serves kube-rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_command_serves_what_it_loaded() {
    use std::io::BufRead as _;
    let dir = crate::scratch("apiserver-cmd");
    let kubeconfig = dir.join("kubeconfig");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kstage"))
        .args(["apiserver", "--tls", "--token", "t0ken", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--load", "examples/objects", "--faults", "delete:500=1"])
        .current_dir(crate::root())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kstage apiserver starts");
    // The first line on stderr says it serves, after the kubeconfig is written; the
    // rest is drained (a closed pipe would fail the server's later writes).
    let stderr = child.stderr.take().expect("stderr");
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let drain = std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = first_tx.send(first);
        lines.map_while(Result::ok).collect::<Vec<_>>().join("\n")
    });
    let first = first_rx.await.expect("first line");
    assert!(first.contains("serving https://127.0.0.1:"), "{first}");
    let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
    assert!(text.contains("token: \"t0ken\"") && text.contains("certificate-authority-data"));
    let config = KubeConfig::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&text).expect("kubeconfig"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let client = Client::try_from(config).expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = nodes.list(&ListParams::default()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let deleted = pods.delete("web", &DeleteParams::default()).await;
    child.kill().expect("stopped");
    let _ = child.wait();
    let rest = drain.join().expect("stderr drained");
    assert_eq!(
        listed
            .unwrap_or_else(|e| panic!("{e}; the server said:\n{rest}"))
            .items
            .len(),
        2,
        "the example nodes were loaded"
    );
    assert_eq!(
        status_code(&deleted.expect_err("faults flag applies")),
        Some(500)
    );
}

/// A watch that asks for bookmarks gets them with the latest resourceVersion, and a
/// watch ends at its `timeoutSeconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_and_watch_timeouts() {
    let h = harness(Config {
        bookmark_every: Duration::from_millis(100),
        ..Config::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let created = pods
        .create(&PostParams::default(), &pod("a", None, json!({})))
        .await
        .expect("created");
    let mut stream = pods
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default()
            }
            .timeout(1),
            &rv,
        )
        .await
        .expect("watch")
        .boxed();
    assert!(matches!(
        stream.next().await,
        Some(Ok(WatchEvent::Added(_)))
    ));
    match stream.next().await {
        Some(Ok(WatchEvent::Bookmark(b))) => {
            assert_eq!(
                Some(b.metadata.resource_version),
                created.metadata.resource_version
            );
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // Bookmarks keep coming until the timeout ends the stream.
    let rest: Vec<_> = stream.collect().await;
    assert!(
        !rest.is_empty()
            && rest
                .iter()
                .all(|e| matches!(e, Ok(WatchEvent::Bookmark(_))))
    );
}

/// `write_latency` holds every write before it is stored (a real server's etcd commit);
/// reads are not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_the_configured_latency() {
    let latency = std::time::Duration::from_millis(300);
    let h = harness(Config {
        write_latency: latency,
        ..Config::default()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let rv_before = h.server.server().state.resource_version();
    let started = std::time::Instant::now();
    let creating = {
        let pods = pods.clone();
        tokio::spawn(async move {
            pods.create(&PostParams::default(), &pod("slow", None, json!({})))
                .await
        })
    };
    // While the create waits, the store has not changed and reads are served.
    let listed = pods.list(&ListParams::default()).await.expect("list");
    assert!(listed.items.is_empty() || started.elapsed() >= latency);
    creating.await.expect("task").expect("created");
    assert!(started.elapsed() >= latency, "{:?}", started.elapsed());
    assert!(h.server.server().state.resource_version() > rv_before);
    let started = std::time::Instant::now();
    pods.patch(
        "slow",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await
    .expect("patched");
    assert!(started.elapsed() >= latency, "{:?}", started.elapsed());
}

/// A raw request through the harness' client: the Status of an error answer.
async fn refused(
    h: &Harness,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &[u8],
) -> kube::Error {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body.to_vec())
        .expect("request");
    h.client
        .request::<Value>(request)
        .await
        .expect_err("refused")
}

/// The code and message of a refusal.
fn refusal(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("expected a Status answer, got {other}"),
    }
}

/// Bodies are decoded as their content type says (server-side apply as YAML, create and
/// update as JSON or YAML, anything else a 415), with kube-apiserver's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_decoded_by_their_content_type_with_kube_apiservers_words() {
    let h = harness(Config::default()).await;
    let apply = "/api/v1/namespaces/default/configmaps/c?fieldManager=m";
    let e = refused(
        &h,
        "PATCH",
        apply,
        "application/apply-patch+yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: [\n",
    )
    .await;
    let (code, message) = refusal(&e);
    assert_eq!(code, 400, "{message}");
    assert!(
        message.starts_with("error decoding YAML: error converting YAML to JSON: "),
        "{message}"
    );

    let create = "/api/v1/namespaces/default/configmaps";
    let good = br#"{"metadata": {"name": "c"}}"#;
    for (content_type, body, code, words) in [
        (
            "text/plain",
            &good[..],
            415,
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        ),
        (
            "application/json",
            br#"{"metadata": {"name": "c"}} {"extra": 1}"#,
            400,
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get version/kind; json parse error: trailing characters",
        ),
        (
            "application/json",
            b"metadata:\n  name: c\n",
            400,
            "json parse error",
        ),
        ("application/json", b"[1]", 400, "the body is not an object"),
        (
            "application/yaml",
            b"metadata: [\n",
            400,
            "the object provided is unrecognized (must be of type ConfigMap): error converting YAML to JSON: ",
        ),
    ] {
        let e = refused(&h, "POST", create, content_type, body).await;
        let (got, message) = refusal(&e);
        assert_eq!(
            got,
            code,
            "{content_type} {:?}: {message}",
            String::from_utf8_lossy(body)
        );
        assert!(message.contains(words), "{content_type}: {message}");
    }
    // The same object as YAML is taken.
    let request = http::Request::builder()
        .method("POST")
        .uri(create)
        .header("content-type", "application/yaml")
        .body(b"metadata:\n  name: from-yaml\n".to_vec())
        .expect("request");
    let created: Value = h.client.request(request).await.expect("YAML create");
    assert_eq!(created["metadata"]["name"], "from-yaml");
}

/// Query parameters that must be numbers are checked as kube-apiserver checks them:
/// a 400 with Go's message, and a malformed `resourceVersion` to list from is its 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_query_parameters_are_checked() {
    let h = harness(Config::default()).await;
    for (method, uri, code, message) in [
        (
            "GET",
            "/api/v1/pods?timeoutSeconds=ten",
            400,
            "strconv.ParseInt: parsing \"ten\": invalid syntax",
        ),
        (
            "GET",
            "/api/v1/pods?watch=true&timeoutSeconds=1x",
            400,
            "strconv.ParseInt: parsing \"1x\": invalid syntax",
        ),
        (
            "GET",
            "/api/v1/pods?limit=99999999999999999999",
            400,
            "strconv.ParseInt: parsing \"99999999999999999999\": value out of range",
        ),
        (
            "GET",
            "/api/v1/pods?resourceVersion=yesterday",
            500,
            "resourceVersion: Invalid value: \"yesterday\": strconv.ParseUint: parsing \"yesterday\": invalid syntax",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=soon",
            400,
            "strconv.ParseInt: parsing \"soon\": invalid syntax",
        ),
    ] {
        let e = refused(&h, method, uri, "application/json", b"").await;
        assert_eq!(refusal(&e), (code, message.to_owned()), "{uri}");
    }
}

/// A body over the 3 MiB limit is answered with kube-apiserver's 413, which the client
/// receives (the server does not cut the upload off into a broken pipe), whether the
/// size is declared up front or found while reading; the server serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_gets_its_413() {
    let h = harness(Config::default()).await;
    let big = "x".repeat(8 * 1024 * 1024);
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(h.client.clone(), "default");
    let cm = serde_json::from_value(json!({"metadata": {"name": "big"}, "data": {"x": big}}))
        .expect("configmap");
    let e = configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("refused");
    assert_eq!(
        refusal(&e),
        (413, "Request entity too large: limit is 3145728".to_owned())
    );
    // A client that sends its whole body before it reads (as Go's does when its write
    // fails first) must be able to: the server reads on and drops the rest, then closes,
    // whether the size was declared or is found while reading.
    let body_mib = 32;
    let declared = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body_mib << 20
    );
    let chunked = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_owned();
    for (head, chunks) in [(declared, false), (chunked, true)] {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut c = connect(&h).await;
        c.write_all(head.as_bytes()).await.expect("head");
        let mib = "y".repeat(1 << 20);
        for _ in 0..body_mib {
            let piece = if chunks {
                format!("{:x}\r\n{mib}\r\n", 1 << 20)
            } else {
                mib.clone()
            };
            c.write_all(piece.as_bytes())
                .await
                .expect("the whole body is taken (no broken pipe)");
        }
        // Done sending: the server's lingering close sees the end at once.
        let _ = c.shutdown().await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("RequestEntityTooLarge"), "{answer}");
    }
    configmaps
        .list(&ListParams::default())
        .await
        .expect("the server answers");
}

/// Closed by the server: a read ends (EOF or reset) instead of waiting for ever. The
/// timeout only bounds a failing test.
async fn closed(mut c: tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A server closing connections that send no headers within `timeout`, at most two
/// open.
async fn limited(timeout: Duration) -> Harness {
    harness(Config {
        header_read_timeout: timeout,
        max_connections: 2,
        ..Config::default()
    })
    .await
}

/// A raw connection to the server.
async fn connect(h: &Harness) -> tokio::net::TcpStream {
    tokio::net::TcpStream::connect(address(h))
        .await
        .expect("connect")
}

/// The server's address for raw connections.
fn address(h: &Harness) -> String {
    let url = h.server.url();
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// Silent and half-sent connections are closed after the header read timeout; the
/// server answers again once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_half_sent_connections_are_closed() {
    use tokio::io::AsyncWriteExt as _;
    let h = limited(Duration::from_millis(300)).await;
    let silent = connect(&h).await;
    let mut half = connect(&h).await;
    half.write_all(b"GET /api HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let (a, b) = tokio::join!(closed(silent), closed(half));
    assert!(a && b, "silent and half-sent connections are closed");
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    pods.list(&ListParams::default())
        .await
        .expect("the server answers");
}

/// Past the connection cap a new connection is closed at once (the header read timeout
/// is far off here, so nothing else closes it), and the server serves again as
/// connections end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed_at_once() {
    let h = limited(Duration::from_secs(600)).await;
    let held = [connect(&h).await, connect(&h).await];
    let extra = connect(&h).await;
    assert!(closed(extra).await, "a connection past the cap is closed");
    drop(held);
    // The permits come back as the server sees the two go.
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let mut answered = false;
    for _ in 0..100 {
        if pods.list(&ListParams::default()).await.is_ok() {
            answered = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(answered, "the server answers once connections end");
}
