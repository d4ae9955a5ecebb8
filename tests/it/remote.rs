//! kstage against an API server in another process, as against a real cluster:
//! `kstage apiserver --tls --token` serves over TLS with a bearer token, nodes and pods are
//! created *before* `kstage run` starts (more than one list page of each, so the engine
//! must play objects it only ever saw as list items, which carry no `apiVersion`/`kind`),
//! and then `kstage bench` runs in each of its modes against the same server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::WatchStreamExt as _;
use serde_json::json;

use crate::process::Spawned;

/// kube-rs lists in pages of 500: these need three pages of nodes and of pods.
const NODES: usize = 1_010;
const PODS: usize = 1_020;

/// `kstage apiserver --tls --token ... extra` in its own process, and its kubeconfig.
pub(crate) fn apiserver(dir: &Path, extra: &[&str]) -> (Spawned, PathBuf) {
    apiserver_on(dir, 0, extra)
}

/// [`apiserver`] on `port` (0: a free one).
pub(crate) fn apiserver_on(dir: &Path, port: u16, extra: &[&str]) -> (Spawned, PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    let path = kubeconfig.display().to_string();
    let port = port.to_string();
    let args = [
        "apiserver",
        "--port",
        &port,
        "--tls",
        "--token",
        "remote-test-token",
        "--kubeconfig",
        &path,
    ];
    let mut server = Spawned::start(&[&args[..], extra].concat());
    assert!(
        server.wait_for(|l| l.starts_with("kstage apiserver: serving https://127.0.0.1:")),
        "kstage apiserver said:\n{}",
        server.said()
    );
    let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    assert!(text.contains("remote-test-token"), "{text}");
    assert!(text.contains("certificate-authority-data"), "{text}");
    (server, kubeconfig)
}

pub(crate) async fn client(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config");
    kube::Client::try_from(config).expect("client")
}

/// Create `n` objects from `make(i)` with 16 requests in flight.
async fn create_all<K>(api: &Api<K>, n: usize, make: impl Fn(usize) -> K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let objects: Vec<K> = (0..n).map(make).collect();
    futures_util::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .expect("created");
}

/// Watch `api` until `done` holds for `want` objects (a watcher, no polling), or fail
/// after two minutes saying how far it got.
pub(crate) async fn until<K>(api: Api<K>, want: usize, what: &str, done: impl Fn(&K) -> bool)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watch_until(api, what, |all| {
        all.values().filter(|o| done(o)).count() >= want
    })
    .await;
}

/// Watch `api` until `done` holds for all its objects by name (a watcher, no polling),
/// or fail after two minutes with what was seen. Watch errors are retried with backoff.
pub(crate) async fn watch_until<K>(
    api: Api<K>,
    what: &str,
    done: impl Fn(&BTreeMap<String, K>) -> bool,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use kube::runtime::watcher;
    let mut seen: BTreeMap<String, K> = BTreeMap::new();
    let mut fresh: BTreeMap<String, K> = BTreeMap::new();
    let mut listed = false;
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let watching = async {
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Init => fresh.clear(),
                watcher::Event::InitApply(o) => {
                    fresh.insert(o.meta().name.clone().unwrap_or_default(), o);
                }
                watcher::Event::InitDone => {
                    seen = std::mem::take(&mut fresh);
                    listed = true;
                }
                watcher::Event::Apply(o) => {
                    seen.insert(o.meta().name.clone().unwrap_or_default(), o);
                }
                watcher::Event::Delete(o) => {
                    seen.remove(&o.meta().name.clone().unwrap_or_default());
                }
            }
            if listed && done(&seen) {
                return;
            }
        }
    };
    let reached = tokio::time::timeout(Duration::from_secs(120), watching).await;
    assert!(
        reached.is_ok(),
        "timed out waiting for {what}: {:?}",
        seen.keys()
    );
}

/// The core Events in `namespace`, counted by (involved object's name, reason), each
/// Event counting its `count`.
pub(crate) async fn event_counts(
    client: &kube::Client,
    namespace: &str,
) -> std::collections::BTreeMap<(String, String), i32> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), namespace);
    let mut counts = std::collections::BTreeMap::new();
    for e in events
        .list(&kube::api::ListParams::default())
        .await
        .expect("events")
        .items
    {
        let name = e.involved_object.name.unwrap_or_default();
        *counts
            .entry((name, e.reason.unwrap_or_default()))
            .or_default() += e.count.unwrap_or(1);
    }
    counts
}

pub(crate) fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub(crate) fn pod_running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn stages() -> [String; 2] {
    ["stage/node/fast", "stage/pod/fast"].map(|s| crate::kwok_dir().join(s).display().to_string())
}

/// Run `kstage bench ARGS` to the end; its stdout, or a failure with what it said.
fn bench(args: &[&str]) -> String {
    let out = crate::kstage(&[&["bench"], args].concat());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kstage bench {args:?} failed ({:?}):\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kstage_run_plays_objects_that_existed_before_it_started() {
    let dir = crate::scratch("remote");
    let (_server, kubeconfig) = apiserver(&dir, &[]);
    let client = client(&kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_all(&nodes, NODES, |i| {
        serde_json::from_value(json!({"metadata": {"name": format!("old-node-{i}")}}))
            .expect("node")
    })
    .await;
    create_all(&pods, PODS, |i| {
        serde_json::from_value(json!({
            "metadata": {"name": format!("old-pod-{i}")},
            "spec": {"nodeName": format!("old-node-{}", i % NODES),
                     "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .expect("pod")
    })
    .await;

    let path = kubeconfig.display().to_string();
    let [node_stages, pod_stages] = stages();
    let mut run = Spawned::start(&[
        "run",
        "--serve",
        "127.0.0.1:0",
        "--kubeconfig",
        &path,
        "--cidr",
        "10.0.0.0/16",
        "--stages",
        &node_stages,
        &pod_stages,
    ]);
    assert!(
        run.wait_for(|l| l.starts_with("kstage run: playing")),
        "kstage run said:\n{}",
        run.said()
    );
    until(nodes, NODES, "nodes Ready", node_ready).await;
    until(pods, PODS, "pods Running", pod_running).await;
    assert!(
        run.child.try_wait().expect("status").is_none(),
        "kstage run is still running"
    );
    drop(run);

    // The lifecycle benchmark in each mode against the same server.
    let common = [
        "--kubeconfig",
        &path,
        "--nodes",
        "10",
        "--pods",
        "60",
        "--concurrency",
        "8",
        "--timeout",
        "120s",
    ];
    let raw = bench(&[
        "--kubeconfig",
        &path,
        "--raw-patch",
        "--duration",
        "1s",
        "--objects",
        "20",
        "--concurrency",
        "4",
    ]);
    assert!(
        raw.contains("raw PATCH:") && raw.contains(" 0 errors"),
        "{raw}"
    );
    let stages = [
        "--cidr",
        "10.1.0.0/16",
        "--stages",
        &node_stages,
        &pod_stages,
    ];
    for mode in [&["--scrape", "50ms"][..], &["--backlog"][..]] {
        let out = bench(&[&common[..], &stages[..], mode].concat());
        assert!(
            out.contains("lifecycle: 10 nodes Ready in") && out.contains("60 pods Running in"),
            "{mode:?}: {out}"
        );
        assert!(
            out.contains("writes/s"),
            "{mode:?}: the engine's writes: {out}"
        );
        if mode.contains(&"--scrape") {
            // The engine's /metrics was served and fetched, every time with a 200.
            let line = out
                .lines()
                .find_map(|l| l.trim().strip_prefix("metrics: "))
                .unwrap_or_else(|| panic!("no scrape figures: {out}"));
            let scrapes = line.split(' ').next().and_then(|n| n.parse::<u32>().ok());
            assert!(scrapes.is_some_and(|n| n >= 1), "{line}");
            assert!(!line.contains("failed"), "{line}");
        }
    }
    // --external: the engine is a `kstage run` process of its own.
    let mut engine = Spawned::start(&[
        "run",
        "--serve",
        "127.0.0.1:0",
        "--kubeconfig",
        &path,
        "--cidr",
        "10.2.0.0/16",
        "--stages",
        &node_stages,
        &pod_stages,
    ]);
    assert!(engine.wait_for(|l| l.starts_with("kstage run: playing")));
    let pid = engine.child.id().to_string();
    let out = bench(&[&common[..], &["--external", "--engine-pid", &pid]].concat());
    assert!(
        out.contains("lifecycle: 10 nodes Ready in") && out.contains(&format!("(process {pid})")),
        "{out}"
    );
}
