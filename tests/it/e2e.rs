//! The engine against the embedded API server, end to end over HTTP through kube-rs:
//! KWOK's node and `pod/general` Stage sets make nodes Ready and pods Running, and a
//! graceful deletion removes the pods.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use kstage::apiserver::state::State;
use kstage::apiserver::{ApiServer, Config};
use kstage::clock::{Clock, SystemClock};
use kstage::cluster::ObjectKey;
use kstage::cluster::client::KubeCluster;
use kstage::engine::{Engine, EngineConfig};
use kstage::stage::StageSet;
use kstage::template::{Renderer, StageEnv};

/// A kube-rs configuration for the embedded server.
pub async fn kube_config(server: &ApiServer) -> kube::Config {
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig()).expect("kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("client config")
}

pub(crate) fn stage_set(clock: Arc<dyn Clock>, sets: &[&str]) -> StageSet {
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock, Utc::now(), "e2e")));
    let paths: Vec<_> = sets.iter().map(|s| crate::kwok_dir().join(s)).collect();
    let loaded = kstage::stage::load::load(&paths, &renderer).expect("corpus");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    StageSet::new(loaded.stages)
}

/// An engine playing KWOK's Stage `sets` against `server` through kube-rs, started.
async fn start_engine(
    server: &ApiServer,
    sets: &[&str],
    workers: usize,
    managed: kstage::cluster::managed::ManagedNodes,
) -> (Arc<Engine<KubeCluster>>, Vec<tokio::task::JoinHandle<()>>) {
    let cluster = KubeCluster::new(kube_config(server).await)
        .expect("cluster")
        .with_managed_nodes(managed);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let stages = stage_set(clock.clone(), sets);
    let config = EngineConfig {
        workers,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(Arc::new(cluster), stages, config);
    let tasks = engine.start();
    (engine, tasks)
}

/// Wait, on every change of a kind, until `done` holds for its objects.
pub(crate) async fn wait_for(
    state: &State,
    api_version: &str,
    kind: &str,
    what: &str,
    done: impl Fn(&[Arc<Value>]) -> bool,
    each: impl Fn(&Value) -> bool,
) {
    let resource = state.resource_of(api_version, kind).expect("served kind");
    let channel = state.channel(api_version, kind);
    let mut changes = channel.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        changes.borrow_and_update();
        let objects = state
            .list(&resource, None, None, 0, None, |_| true)
            .expect("list")
            .items;
        if done(&objects) && objects.iter().all(|o| each(o)) {
            return;
        }
        let changed = tokio::time::timeout_at(deadline, changes.changed()).await;
        assert!(
            changed.is_ok(),
            "timed out waiting for {what}; {} objects, {} not there yet, the first: {}",
            objects.len(),
            objects.iter().filter(|o| !each(o)).count(),
            objects
                .iter()
                .find(|o| !each(o))
                .map(|o| o.to_string())
                .unwrap_or_default()
        );
    }
}

/// Create `nodes` nodes and `pods` pods bound to them round robin, with `annotations`.
fn create_nodes_and_pods(state: &State, nodes: usize, pods: usize, annotations: &Value) {
    for i in 0..nodes {
        state
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}")}}))
            .expect("node");
    }
    for i in 0..pods {
        state
            .create(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("pod-{i}"), "namespace": "default", "annotations": annotations},
                "spec": {"nodeName": format!("node-{}", i % nodes), "containers": [{"name": "c", "image": "busybox"}]},
            }))
            .expect("pod");
    }
}

/// Wait until the nodes are Ready and the pods Running (and Ready).
async fn ready_and_running(state: &State, nodes: usize, pods: usize) {
    wait_for(
        state,
        "v1",
        "Node",
        "nodes Ready",
        |all| all.len() == nodes,
        |n| condition_true(n, "Ready"),
    )
    .await;
    wait_for(
        state,
        "v1",
        "Pod",
        "pods Running",
        |all| all.len() == pods,
        |p| p.pointer("/status/phase") == Some(&json!("Running")) && condition_true(p, "Ready"),
    )
    .await;
}

fn condition_true(object: &Value, kind: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// 100 nodes and 1,000 pods through KWOK's node and `pod/general` Stage sets, with the
/// engine talking to `server` through kube-rs: nodes Ready, pods Running with an IP
/// each, then a user's graceful deletion and the pods gone.
async fn nodes_and_pods_through_the_engine(server: &ApiServer) {
    lifecycle_through_the_engine(server, 100, 1_000).await;
}

/// [`nodes_and_pods_through_the_engine`] with `nodes` and `pods`; at the end the engine
/// still plays a pod created then.
pub(crate) async fn lifecycle_through_the_engine(server: &ApiServer, nodes: usize, pods: usize) {
    let (engine, tasks) = start_engine(
        server,
        &["stage/node/fast", "stage/pod/general"],
        16,
        Default::default(),
    )
    .await;
    let started = std::time::Instant::now();
    let state = &server.server().state;
    // No delays: the test is about the path, not KWOK's pacing.
    let fast = json!({
        "pod-create.stage.kwok.x-k8s.io/delay": "0s", "pod-create.stage.kwok.x-k8s.io/jitter-delay": "0s",
        "pod-ready.stage.kwok.x-k8s.io/delay": "0s", "pod-ready.stage.kwok.x-k8s.io/jitter-delay": "0s",
        "pod-delete.stage.kwok.x-k8s.io/delay": "0s",
    });
    create_nodes_and_pods(state, nodes, pods, &fast);
    ready_and_running(state, nodes, pods).await;
    eprintln!(
        "{nodes} nodes Ready and {pods} pods Running in {:?}",
        started.elapsed()
    );
    let resource = state.resource_of("v1", "Pod").expect("pods");
    let listed = state
        .list(&resource, None, None, 0, None, |_| true)
        .expect("list")
        .items;
    let ips: std::collections::HashSet<&str> = listed
        .iter()
        .filter_map(|p| p.pointer("/status/podIP").and_then(Value::as_str))
        .collect();
    assert_eq!(ips.len(), pods, "one IP per pod");
    // A user deletes the pods gracefully (1 s: bound pods are only marked); pod-delete
    // removes them before their grace period ends.
    for p in &listed {
        let key = ObjectKey::of(p).expect("key");
        state.delete(&key, Some(1)).expect("marked");
    }
    let deleting = std::time::Instant::now();
    wait_for(state, "v1", "Pod", "pods gone", <[_]>::is_empty, |_| true).await;
    eprintln!("{pods} pods deleted in {:?}", deleting.elapsed());
    // Still serving: a pod created now is played.
    state
        .create(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "late", "namespace": "default", "annotations": fast},
            "spec": {"nodeName": "node-0", "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .expect("pod");
    wait_for(
        state,
        "v1",
        "Pod",
        "the late pod Running",
        |all| all.len() == 1,
        |p| p.pointer("/status/phase") == Some(&json!("Running")),
    )
    .await;
    engine.shutdown();
    for t in tasks {
        t.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_become_ready_and_pods_run_then_go() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    nodes_and_pods_through_the_engine(&server).await;
}

/// The same run with about 10% of every verb failing (resets, 500, 503, 429 with
/// Retry-After, timeouts) and watches closed early: it completes, and no Stage event is
/// emitted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ten_percent_faults_nothing_is_lost_and_no_event_repeats() {
    let config = Config {
        faults: "*:reset=0.02,*:500=0.02,*:503=0.02,*:429@1s=0.02,*:timeout=0.02,watch:close=0.5"
            .parse()
            .expect("spec"),
        fault_timeout: Duration::from_millis(100),
        watch_close_max: Duration::from_secs(1),
        ..Config::default()
    };
    let server = ApiServer::start(config).await.expect("server");
    nodes_and_pods_through_the_engine(&server).await;
    let faults = &server.server().faults;
    let injected = faults.injected_total();
    let requests: u64 = faults.requests().values().sum();
    eprintln!("{injected} faults injected in {requests} requests");
    assert!(
        injected as f64 > 0.05 * requests as f64,
        "{injected} faults in {requests} requests"
    );
    assert_no_event_twice(&server.server().state);
}

/// Every Stage event (object, reason) recorded once, although requests failed and were
/// retried.
pub(crate) fn assert_no_event_twice(state: &State) {
    let counts = event_counts(state);
    assert!(!counts.is_empty(), "the Stages emit events");
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "events emitted more than once: {repeated:?}"
    );
}

/// The core Events the embedded server stores, counted by (involved object's name,
/// reason).
pub(crate) fn event_counts(state: &State) -> std::collections::BTreeMap<(String, String), usize> {
    let events = state.resource_of("v1", "Event").expect("events");
    let mut counts = std::collections::BTreeMap::new();
    for e in state
        .list(&events, None, None, 0, None, |_| true)
        .expect("list")
        .items
    {
        let text = |pointer: &str| {
            e.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        *counts
            .entry((text("/involvedObject/name"), text("/reason")))
            .or_default() += 1;
    }
    counts
}

/// The objects with an Event of `reason`, and how many each has.
pub(crate) fn events_by_object(
    state: &State,
    reason: &str,
) -> std::collections::BTreeMap<String, usize> {
    event_counts(state)
        .into_iter()
        .filter(|((_, r), _)| r == reason)
        .map(|((name, _), n)| (name, n))
        .collect()
}

/// Define kstage's Stage resource (`deploy/crds`) in the embedded server.
pub(crate) fn install_stage_crd(state: &State) {
    let crd = std::fs::read_to_string(crate::root().join("deploy/crds/stages.kwok.x-k8s.io.yaml"))
        .expect("CRD");
    state
        .create(kstage::yaml::to_json(&crd).expect("yaml"))
        .expect("CRD");
}

fn routing_stage(message: &str) -> Value {
    json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
        "metadata": {"name": "route"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchLabels": {"lane": "x"}},
            "next": {"statusTemplate": format!("message: {message}")},
        },
    })
}

/// Stage resources are played live: a Stage created, then changed mid-run, re-routes
/// the objects it matches without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_resource_changed_mid_run_reroutes_its_objects() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    install_stage_crd(state);
    let cluster = Arc::new(KubeCluster::new(kube_config(&server).await).expect("cluster"));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), Utc::now(), "e2e")));
    let daemon = kstage::daemon::Daemon::start(
        cluster,
        Vec::new(),
        kstage::daemon::Resources {
            stages: Some(kstage::daemon::StageResources::without_plugins()),
            plugins: None,
        },
        renderer,
        EngineConfig {
            workers: 4,
            clock,
            ..EngineConfig::default()
        },
        kstage::decide::Deciders::default(),
    );
    state.create(routing_stage("v1")).expect("stage");
    for i in 0..20 {
        state
            .create(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "default", "labels": {"lane": if i % 2 == 0 { "x" } else { "y" }}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}))
            .expect("pod");
    }
    let message = |p: &Value| {
        p.pointer("/status/message")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let lane_x = |p: &Value| p.pointer("/metadata/labels/lane") == Some(&json!("x"));
    wait_for(
        state,
        "v1",
        "Pod",
        "lane x routed by v1",
        |all| all.len() == 20,
        |p| {
            if lane_x(p) {
                message(p).as_deref() == Some("v1")
            } else {
                message(p).is_none()
            }
        },
    )
    .await;
    // Change the Stage resource: the objects it matches are played again.
    let key = ObjectKey {
        api_version: "kwok.x-k8s.io/v1alpha1".into(),
        kind: "Stage".into(),
        namespace: String::new(),
        name: "route".into(),
    };
    state
        .patch(
            &key,
            kstage::patch::PatchType::Merge,
            None,
            json!({"spec": {"next": {"statusTemplate": "message: v2"}}}),
        )
        .expect("stage changed");
    wait_for(
        state,
        "v1",
        "Pod",
        "lane x routed by v2",
        |all| all.len() == 20,
        |p| {
            if lane_x(p) {
                message(p).as_deref() == Some("v2")
            } else {
                message(p).is_none()
            }
        },
    )
    .await;
    daemon.shutdown();
}

/// `kstage up ARGS --kubeconfig SCRATCH/kubeconfig` as a child process.
struct Up {
    process: crate::process::Spawned,
    dir: std::path::PathBuf,
}

impl Up {
    fn start(tag: &str, args: &[&str]) -> Self {
        let dir = crate::scratch(tag);
        let kubeconfig = dir.join("kubeconfig").display().to_string();
        let mut all = vec!["up"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--kubeconfig", &kubeconfig]);
        Self {
            process: crate::process::Spawned::start(&all),
            dir,
        }
    }
}

impl std::ops::Deref for Up {
    type Target = crate::process::Spawned;
    fn deref(&self) -> &Self::Target {
        &self.process
    }
}

impl std::ops::DerefMut for Up {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.process
    }
}

/// Run `kstage up ARGS` until a line satisfies `done`; returns the lines read.
fn up_until(tag: &str, args: &[&str], done: impl Fn(&str) -> bool) -> Vec<String> {
    let mut up = Up::start(tag, args);
    let reached = up.wait_for(done);
    assert!(reached, "kstage up said:\n{}", up.said());
    // Its first line of its own (log lines may come before it).
    let first = up.seen.iter().find(|l| !l.starts_with('{'));
    assert!(
        first.is_some_and(|l| l.starts_with("kstage up: API server at http://127.0.0.1:")),
        "{first:?}"
    );
    assert!(up.dir.join("kubeconfig").exists());
    std::mem::take(&mut up.seen)
}

/// `kstage up` as a process: the example nodes become Ready and the pods run.
#[test]
fn kstage_up_plays_the_examples() {
    up_until("up", &["--load", "examples/objects"], |line| {
        line.contains("nodes: 2 (2 Ready)") && line.contains("Running")
    });
}

/// `kstage up --plugin-crds`: the StagePlugin CRD is installed and a StagePlugin loaded
/// with its ConfigMap is fetched, checked and serving, as its status says to a client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kstage_up_with_plugin_crds_serves_a_stage_plugin() {
    use base64::Engine as _;
    use kube::api::{ApiResource, DynamicObject};
    let component = crate::rollout::component(crate::fixtures::Classify::Policy, "1.2.3");
    let sha256 = kstage::plugin::runtime::digest(&component);
    let dir = crate::scratch("up-plugins-load");
    let file = dir.join("plugin.yaml");
    let objects = [
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "components", "namespace": "default"},
               "binaryData": {"retry.wasm": base64::engine::general_purpose::STANDARD.encode(&component)}}),
        json!({"apiVersion": "kstage.dev/v1alpha1", "kind": "StagePlugin",
               "metadata": {"name": "retry"},
               "spec": {"source": {"configMap": {"namespace": "default", "name": "components", "key": "retry.wasm"}},
                        "sha256": sha256, "bind": ["classifier"]}}),
    ];
    let text: Vec<String> = objects.iter().map(|o| o.to_string()).collect();
    std::fs::write(&file, text.join("\n---\n")).expect("write");
    let file = file.display().to_string();
    let mut up = Up::start("up-plugins", &["--plugin-crds", "--load", &file]);
    assert!(
        up.wait_for(|l| l.starts_with("kstage up: API server at")),
        "kstage up said:\n{}",
        up.said()
    );
    let client = crate::remote::client(&up.dir.join("kubeconfig")).await;
    let resource = ApiResource {
        group: "kstage.dev".into(),
        version: "v1alpha1".into(),
        api_version: "kstage.dev/v1alpha1".into(),
        kind: "StagePlugin".into(),
        plural: "stageplugins".into(),
    };
    let api: kube::Api<DynamicObject> = kube::Api::all_with(client, &resource);
    crate::remote::until(api, 1, "StagePlugin retry Ready", |o: &DynamicObject| {
        let status = &o.data["status"];
        let ready = status["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        ready && status["version"] == "1.2.3" && status["digest"] == sha256.as_str()
    })
    .await;
}

/// `kstage up` logging JSON: every log line is one JSON object with a timestamp, a level
/// and a message, and what a job logs carries its Stage, object, attempt and step.
#[test]
fn kstage_up_logs_json_lines_with_the_job_fields() {
    let lines = up_until(
        "up-json",
        &[
            "--load",
            "examples/objects",
            "--log",
            "kstage=debug,kube_client=debug",
            "--log-format",
            "json",
        ],
        |line| line.contains("nodes: 2 (2 Ready)") && line.contains("Running"),
    );
    let logged: Vec<Value> = lines
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!logged.is_empty(), "{lines:?}");
    for line in &logged {
        assert!(line["timestamp"].is_string(), "{line}");
        assert!(line["level"].is_string(), "{line}");
        assert!(line["message"].is_string(), "{line}");
    }
    // Text lines are kstage up's own progress, never a log line.
    assert!(
        lines
            .iter()
            .filter(|l| !l.starts_with('{'))
            .all(|l| l.starts_with("kstage up:") || l.starts_with("  ")),
        "{lines:?}"
    );
    let in_span = |name: &str| {
        logged
            .iter()
            .filter(|l| {
                l["spans"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["name"] == name))
            })
            .collect::<Vec<_>>()
    };
    let jobs = in_span("job");
    assert!(!jobs.is_empty(), "no line from a job");
    for line in &jobs {
        let job = line["spans"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "job"))
            .expect("the job span");
        assert!(job["stage"].is_string(), "{line}");
        assert!(job["object"].is_string(), "{line}");
        assert!(job["attempt"].is_number(), "{line}");
    }
    let steps = in_span("step");
    assert!(!steps.is_empty(), "no line from a step");
    for line in &steps {
        let spans = line["spans"].as_array().expect("spans");
        let step = spans
            .iter()
            .find(|s| s["name"] == "step")
            .expect("step span");
        assert!(step["step"].is_number(), "{line}");
        // A step is inside its job.
        assert!(spans.iter().any(|s| s["name"] == "job"), "{line}");
    }
}

/// Hostile Stages under `kstage up` (a stack overflow, an endless loop and a memory hog
/// in selectors): the example objects play as without them, and the embedded API server
/// answers kube-rs throughout.
#[test]
fn kstage_up_serves_on_beside_hostile_stages() {
    let hostile = crate::scratch("up-hostile-stages");
    for (name, expression) in [
        ("overflow", "def f: 1 + f; f"),
        ("loop", "last(range(1e15))"),
        ("memory", "\"x\" * 4000000000 | length"),
    ] {
        std::fs::write(
            hostile.join(format!("{name}.yaml")),
            crate::hostile::hostile_stage(&format!("hostile-{name}"), expression, false),
        )
        .expect("stage file");
    }
    let hostile = hostile.display().to_string();
    let mut up = Up::start(
        "up-hostile",
        &[
            "--stages",
            "examples/stages",
            &hostile,
            "--load",
            "examples/objects",
            "--expr-timeout",
            "200ms",
            "--expr-memory",
            "64",
            "--log-format",
            "text",
        ],
    );
    let played =
        up.wait_for(|line| line.contains("nodes: 2 (2 Ready)") && line.contains("Running"));
    assert!(played, "kstage up said:\n{}", up.said());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let kubeconfig = up.dir.join("kubeconfig");
    let pods = runtime.block_on(async {
        let k = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(k, &Default::default())
            .await
            .expect("config");
        let client = kube::Client::try_from(config).expect("client");
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client);
        pods.list(&Default::default())
            .await
            .expect("the server answers")
    });
    assert_eq!(pods.items.len(), 2);
    // Each hostile program was cut off at its budget, by name.
    let said = up.said();
    for name in ["overflow", "loop", "memory"] {
        assert!(
            said.contains(&format!("of Stage \"hostile-{name}\"")),
            "hostile-{name} not reported:\n{said}"
        );
    }
}

/// `kstage up --config`: the Rust example plugin selects and renders the pod Stages.
#[test]
#[cfg_attr(
    not(kstage_plugin = "chaos-router"),
    ignore = "chaos-router.wasm not built: run plugins/build --install rust"
)]
fn kstage_up_plays_stages_through_a_plugin() {
    // The example config with the component from the plugin folder.
    let example = std::fs::read_to_string(crate::root().join("examples/plugins/config.yaml"))
        .expect("example config");
    let plugin = crate::plugin_path("chaos-router");
    let config = crate::scratch("up-plugin-config").join("config.yaml");
    std::fs::write(
        &config,
        example.replace(
            "../../target/plugins/chaos-router.wasm",
            &plugin.display().to_string(),
        ),
    )
    .expect("config written");
    let config = config.display().to_string();
    up_until(
        "up-plugin",
        &[
            "--config",
            &config,
            "--stages",
            "examples/plugins/stages.yaml",
            "--load",
            "examples/objects/pods.yaml",
        ],
        |line| line.contains("pods: 2 (2 Running)"),
    );
}

/// The lifecycle benchmark with the engine playing KWOK's fast Stages, started once every
/// object is created: every pod runs, the deletion completes, and the cluster is left as
/// it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifecycle_benchmark_measures_and_cleans_up() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let config = kube_config(&server).await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let engine = Engine::new(
        Arc::new(KubeCluster::new(config.clone()).expect("cluster")),
        stage_set(clock.clone(), &["stage/node/fast", "stage/pod/fast"]),
        EngineConfig {
            workers: 8,
            clock,
            ..EngineConfig::default()
        },
    );
    let tasks = std::sync::Mutex::new(Vec::new());
    let spec = kstage::bench::Lifecycle {
        nodes: 10,
        pods: 50,
        concurrency: 8,
        timeout: Duration::from_secs(60),
        namespace: "default".into(),
        pod_nodes: 0,
    };
    let report = kstage::bench::lifecycle(
        kube::Client::try_from(config).expect("client"),
        &spec,
        || *tasks.lock().expect("tasks") = engine.start(),
        |_| {},
    )
    .await
    .expect("benchmark");
    assert!(report.nodes_ready <= report.pods_running + Duration::from_secs(60));
    assert!(
        report.engine_started <= report.nodes_ready,
        "nothing played before the engine started: {report:?}"
    );
    assert!(
        report.p50 <= report.p99 && report.p99 <= report.pods_running,
        "{report:?}"
    );
    let state = &server.server().state;
    for kind in ["Pod", "Node"] {
        let resource = state.resource_of("v1", kind).expect("kind");
        let left = state
            .list(&resource, None, None, 0, None, |_| true)
            .expect("list")
            .items;
        assert!(left.is_empty(), "{kind}s left: {}", left.len());
    }
    assert!(kstage::engine::Metrics::get(&engine.metrics().writes) >= 10 + 50 + 50);
    engine.shutdown();
    for t in tasks.into_inner().expect("tasks") {
        t.abort();
    }
}

/// With a label selection, only the selected nodes and the pods bound to them are
/// played; a node that gets the label later has its pods played then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_managed_nodes_and_their_pods_are_played() {
    use kstage::cluster::managed::ManagedNodes;
    let server = ApiServer::start(Config::default()).await.expect("server");
    let (engine, tasks) = start_engine(
        &server,
        &["stage/node/fast", "stage/pod/fast"],
        4,
        ManagedNodes::labels("type=kwok").expect("selector"),
    )
    .await;
    let state = &server.server().state;
    for (name, labels) in [("fake", json!({"type": "kwok"})), ("real", json!({}))] {
        state
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}))
            .expect("node");
    }
    for i in 0..10 {
        let node = if i % 2 == 0 { "fake" } else { "real" };
        state
            .create(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}}))
            .expect("pod");
    }
    let on = |p: &Value, node: &str| p.pointer("/spec/nodeName") == Some(&json!(node));
    let running = |p: &Value| p.pointer("/status/phase") == Some(&json!("Running"));
    wait_for(
        state,
        "v1",
        "Pod",
        "the pods of the managed node Running",
        |all| all.len() == 10,
        |p| !on(p, "fake") || running(p),
    )
    .await;
    let resource = state.resource_of("v1", "Pod").expect("pods");
    let pods = state
        .list(&resource, None, None, 0, None, |_| true)
        .expect("list")
        .items;
    assert!(
        pods.iter().filter(|p| on(p, "real")).all(|p| !running(p)),
        "pods of unmanaged nodes are left alone"
    );
    let nodes = state.resource_of("v1", "Node").expect("nodes");
    let real = state
        .list(&nodes, None, None, 0, None, |_| true)
        .expect("list")
        .items;
    let real = real
        .iter()
        .find(|n| n["metadata"]["name"] == "real")
        .expect("real node");
    assert!(
        real.pointer("/status/conditions").is_none(),
        "an unmanaged node is left alone"
    );
    // Label the other node: it and its pods are played now.
    let key = ObjectKey {
        api_version: "v1".into(),
        kind: "Node".into(),
        namespace: String::new(),
        name: "real".into(),
    };
    state
        .patch(
            &key,
            kstage::patch::PatchType::Merge,
            None,
            json!({"metadata": {"labels": {"type": "kwok"}}}),
        )
        .expect("labelled");
    wait_for(
        state,
        "v1",
        "Pod",
        "every pod Running",
        |all| all.len() == 10,
        running,
    )
    .await;
    engine.shutdown();
    for t in tasks {
        t.abort();
    }
}

/// One replica: an engine whose cluster delivers only the nodes it holds the Lease of.
async fn replica(
    server: &ApiServer,
    identity: &str,
    duration: Duration,
) -> (
    Arc<Engine<KubeCluster>>,
    Vec<tokio::task::JoinHandle<()>>,
    kstage::lease::HeldNodes,
    (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
) {
    let config = kube_config(server).await;
    let base = KubeCluster::new(config.clone()).expect("cluster");
    let (nodes_tx, nodes_rx) = tokio::sync::watch::channel(Default::default());
    let tracker = base.track_managed_nodes(nodes_tx);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let leases = kstage::lease::Leases::new(
        kube::Client::try_from(config).expect("client"),
        kstage::lease::LeaseConfig {
            identity: identity.into(),
            duration,
        },
        clock.clone(),
    );
    let held = leases.held();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let lease_loop = tokio::spawn(leases.run_until(nodes_rx, async move {
        let _ = stopped.await;
    }));
    let cluster = Arc::new(base.with_held_nodes(held.clone()));
    let stages = stage_set(clock.clone(), &["stage/node/fast", "stage/pod/fast"]);
    let engine = Engine::new(
        cluster,
        stages,
        EngineConfig {
            workers: 4,
            clock,
            ..EngineConfig::default()
        },
    );
    let mut tasks = engine.start();
    tasks.push(tracker);
    (engine, tasks, held, (stop, lease_loop))
}

/// Two replicas share the nodes through Leases: a node is held by one of them at a time,
/// all nodes and pods are played, and when one stops the other takes its nodes over
/// within a lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_nodes_through_leases() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let duration = Duration::from_secs(2);
    // (The stop senders are kept: dropping one stops its lease loop.)
    let (engine_a, mut tasks_a, held_a, (_stop_a, loop_a)) =
        replica(&server, "replica-a", duration).await;
    let (engine_b, mut tasks_b, held_b, (_stop_b, loop_b)) =
        replica(&server, "replica-b", duration).await;
    // Stopped here without releasing their Leases (as a crash).
    tasks_a.push(loop_a);
    tasks_b.push(loop_b);
    let state = &server.server().state;
    let nodes = 10;
    create_nodes_and_pods(state, nodes, 40, &json!({}));
    ready_and_running(state, nodes, 40).await;
    // The replicas even out: each ends up with half of the nodes.
    let (mut watch_a, mut watch_b) = (held_a.clone(), held_b.clone());
    let balanced = tokio::time::timeout(duration * 5, async {
        loop {
            let (a, b) = (
                watch_a.borrow_and_update().len(),
                watch_b.borrow_and_update().len(),
            );
            if a == nodes / 2 && b == nodes / 2 {
                return;
            }
            tokio::select! {
                _ = watch_a.changed() => {}
                _ = watch_b.changed() => {}
            }
        }
    })
    .await;
    assert!(
        balanced.is_ok(),
        "not balanced: {:?} {:?}",
        held_a.borrow(),
        held_b.borrow()
    );
    let (a, b) = (held_a.borrow().clone(), held_b.borrow().clone());
    eprintln!("replica-a holds {}, replica-b holds {}", a.len(), b.len());
    assert!(a.is_disjoint(&b), "a node held twice: {a:?} {b:?}");
    assert_eq!(a.len() + b.len(), nodes, "every node held: {a:?} {b:?}");
    // Every Lease names one of them.
    let leases = state
        .resource_of("coordination.k8s.io/v1", "Lease")
        .expect("leases");
    let holders: std::collections::BTreeSet<String> = state
        .list(&leases, Some("kube-node-lease"), None, 0, None, |_| true)
        .expect("list")
        .items
        .iter()
        .filter_map(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    assert!(
        holders.iter().all(|h| h == "replica-a" || h == "replica-b"),
        "{holders:?}"
    );
    // Stop the replica holding more; the other holds every node within a lease duration
    // (plus a renewal period).
    let (stopped, survivor, survivor_held) = if a.len() >= b.len() {
        ((engine_a, tasks_a), engine_b, held_b)
    } else {
        ((engine_b, tasks_b), engine_a, held_a)
    };
    stopped.0.shutdown();
    for t in stopped.1 {
        t.abort();
    }
    let stopped_at = std::time::Instant::now();
    let mut held = survivor_held;
    let all = tokio::time::timeout(duration * 3, async {
        loop {
            if held.borrow_and_update().len() == nodes {
                return;
            }
            if held.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(all.is_ok(), "the survivor holds {:?}", held.borrow());
    let took = stopped_at.elapsed();
    assert!(took <= duration + duration / 2, "took over in {took:?}");
    survivor.shutdown();
}

/// A replica that stops gracefully drains its engine and releases its node Leases: the
/// other holds every node at its next round, well before the Leases would expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopping_gracefully_hands_its_nodes_over_at_once() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    // Rounds every 2 s; a Lease expires after 8 s.
    let duration = Duration::from_secs(8);
    let (engine_a, tasks_a, held_a, (stop_a, loop_a)) =
        replica(&server, "replica-a", duration).await;
    let (engine_b, tasks_b, held_b, (_stop_b, loop_b)) =
        replica(&server, "replica-b", duration).await;
    let state = &server.server().state;
    let nodes = 6;
    create_nodes_and_pods(state, nodes, 12, &json!({}));
    ready_and_running(state, nodes, 12).await;
    // Wait until replica-a holds some nodes.
    let mut watch_a = held_a.clone();
    tokio::time::timeout(duration * 3, async {
        while watch_a.borrow_and_update().is_empty() {
            if watch_a.changed().await.is_err() {
                return;
            }
        }
    })
    .await
    .expect("replica-a holds nodes");
    assert!(!held_a.borrow().is_empty());
    // Stop replica-a as `kstage run` does on SIGTERM: drain, then release.
    tokio::time::timeout(Duration::from_secs(20), engine_a.drain())
        .await
        .expect("drained");
    stop_a.send(()).expect("the lease loop runs");
    loop_a.await.expect("the lease loop ends");
    for t in tasks_a {
        t.abort();
    }
    assert!(
        held_a.borrow().is_empty(),
        "released: {:?}",
        held_a.borrow()
    );
    let released_at = std::time::Instant::now();
    let mut held = held_b.clone();
    tokio::time::timeout(duration, async {
        while held.borrow_and_update().len() < nodes {
            if held.changed().await.is_err() {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("replica-b holds {:?}", held_b.borrow()));
    let took = released_at.elapsed();
    // At its next round (every duration / 4), not after an expiry (duration).
    assert!(took < duration / 2, "took over in {took:?}");
    // replica-a's own Lease is gone: it no longer counts as a live replica.
    let leases = state
        .resource_of("coordination.k8s.io/v1", "Lease")
        .expect("leases");
    let names: Vec<String> = state
        .list(&leases, Some("kube-node-lease"), None, 0, None, |_| true)
        .expect("list")
        .items
        .iter()
        .filter_map(|l| {
            l.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    assert!(
        !names.contains(&"kstage-replica-replica-a".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"kstage-replica-replica-b".to_owned()),
        "{names:?}"
    );
    engine_b.shutdown();
    loop_b.abort();
    for t in tasks_b {
        t.abort();
    }
}

/// `kstage up` stops on SIGTERM: it finishes what it plays and exits 0.
#[test]
fn kstage_up_stops_gracefully_on_sigterm() {
    let mut up = Up::start(
        "up-sigterm",
        &["--load", "examples/objects", "--log-format", "text"],
    );
    assert!(
        up.wait_for(|l| l.contains("nodes: 2 (2 Ready)") && l.contains("Running")),
        "{}",
        up.said()
    );
    let pid = rustix::process::Pid::from_raw(up.child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = up.child.wait().expect("exits");
    assert_eq!(status.code(), Some(0), "{}", up.said());
}

/// `--object-selector`: only the ConfigMaps with the label are played (the server filters
/// the watch); one labelled later is played then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_selector_narrows_other_kinds() {
    use kstage::cluster::managed::ObjectSelectors;
    let server = ApiServer::start(Config::default()).await.expect("server");
    let mut selectors = ObjectSelectors::default();
    selectors.add("ConfigMap=play=yes").expect("selector");
    let cluster = KubeCluster::new(kube_config(&server).await)
        .expect("cluster")
        .with_object_selectors(selectors);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), Utc::now(), "e2e")));
    let stage = r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: configmap-played}
spec:
  resourceRef: {apiGroup: v1, kind: ConfigMap}
  selector:
    matchExpressions:
    - {key: .data.played, operator: DoesNotExist}
  next:
    patches:
    - type: merge
      template: '{"data": {"played": "yes"}}'
"#;
    let loaded = kstage::stage::load::load_str(stage, &renderer).expect("stage");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let config = EngineConfig {
        workers: 2,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(Arc::new(cluster), StageSet::new(loaded.stages), config);
    let tasks = engine.start();
    let state = &server.server().state;
    for i in 0..6 {
        let labels = if i % 2 == 0 {
            json!({"play": "yes"})
        } else {
            json!({})
        };
        state
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}"), "namespace": "default", "labels": labels},
                "data": {"n": i.to_string()}}))
            .expect("configmap");
    }
    let played = |c: &Value| c.pointer("/data/played") == Some(&json!("yes"));
    let labelled = |c: &Value| c.pointer("/metadata/labels/play") == Some(&json!("yes"));
    wait_for(
        state,
        "v1",
        "ConfigMap",
        "the labelled ConfigMaps played",
        |all| all.iter().filter(|c| played(c)).count() == 3,
        |c| !labelled(c) || played(c),
    )
    .await;
    let resource = state.resource_of("v1", "ConfigMap").expect("configmaps");
    let all = state
        .list(&resource, Some("default"), None, 0, None, |_| true)
        .expect("list")
        .items;
    assert!(
        all.iter().filter(|c| !labelled(c)).all(|c| !played(c)),
        "ConfigMaps without the label are left alone"
    );
    let key = ObjectKey {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: "default".into(),
        name: "cm-1".into(),
    };
    state
        .patch(
            &key,
            kstage::patch::PatchType::Merge,
            None,
            json!({"metadata": {"labels": {"play": "yes"}}}),
        )
        .expect("labelled");
    wait_for(
        state,
        "v1",
        "ConfigMap",
        "the newly labelled ConfigMap played",
        |all| all.iter().filter(|c| played(c)).count() == 4,
        |c| !labelled(c) || played(c),
    )
    .await;
    engine.shutdown();
    for t in tasks {
        t.abort();
    }
}

/// SIGHUP makes `kstage up --config` read its config again: a changed plugin setting
/// swaps the plugin in; a config naming a missing file is rejected and the running
/// plugins stay, and the daemon keeps running.
#[test]
#[cfg_attr(
    not(kstage_plugin = "chaos-router"),
    ignore = "chaos-router.wasm not built: run plugins/build --install rust"
)]
fn sighup_reloads_the_plugin_config() {
    let plugin = crate::plugin_path("chaos-router");
    let config = crate::scratch("sighup-config").join("config.yaml");
    let write = |timeout: &str, path: &std::path::Path| {
        std::fs::write(
            &config,
            format!(
                "plugins:\n- name: chaos-router\n  path: {}\n  timeout: {timeout}\nbindings:\n  selector: chaos-router\n  renderer: chaos-router\n",
                path.display()
            ),
        )
        .expect("config written");
    };
    write("100ms", &plugin);
    let config_arg = config.display().to_string();
    let mut up = Up::start(
        "sighup",
        &[
            "--log",
            "info",
            "--stages",
            "examples/plugins/stages.yaml",
            "--config",
            &config_arg,
        ],
    );
    let hangup = |pid: u32| {
        let pid =
            rustix::process::Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a live pid");
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).expect("SIGHUP sent");
    };
    let mut steps = Vec::new();
    steps.push(up.wait_for(|l| l.contains("plugins: hot swap on")));
    write("200ms", &plugin);
    hangup(up.child.id());
    steps.push(up.wait_for(|l| l.contains("plugin swapped")));
    write("200ms", &config.with_file_name("missing.wasm"));
    hangup(up.child.id());
    steps.push(up.wait_for(|l| l.contains("plugins unchanged")));
    let running = up.child.try_wait().expect("status").is_none();
    assert_eq!(steps, [true, true, true], "kstage up said:\n{}", up.said());
    assert!(running, "the daemon survives a rejected config");
    let swapped = up
        .seen
        .iter()
        .find(|l| l.contains("plugin swapped"))
        .expect("swap line");
    assert!(swapped.contains("chaos-router"), "{swapped}");
    let rejected = up
        .seen
        .iter()
        .find(|l| l.contains("plugins unchanged"))
        .expect("rejection");
    assert!(rejected.contains("missing.wasm"), "{rejected}");
}

/// kstage's own node and pod Stage folders (`examples/stages`), as [`start_engine`]
/// takes them.
fn examples() -> [String; 2] {
    let examples = crate::root().join("examples/stages");
    [examples.join("node"), examples.join("pod")].map(|p| p.display().to_string())
}

/// Pods with a finalizer are deleted while a third of the pod patches fail with 409: the
/// removal Stage (event, finalizers off, delete) is retried at the failed step, after a
/// fresh read, and never played again from its first step: one `Killing` event each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_during_a_removal_do_not_replay_its_event() {
    let config = Config {
        faults: "patch/pods:409=0.3".parse().expect("spec"),
        ..Config::default()
    };
    let server = ApiServer::start(config).await.expect("server");
    let sets = examples();
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let (engine, tasks) = start_engine(&server, &sets, 4, Default::default()).await;
    let state = &server.server().state;
    let (nodes, pods) = (2, 40);
    for i in 0..nodes {
        state
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}")}}))
            .expect("node");
    }
    let pod = |i: usize| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{i}"), "namespace": "default",
                         "finalizers": ["kstage.dev/test"]},
            "spec": {"nodeName": format!("node-{}", i % nodes), "containers": [{"name": "c", "image": "busybox"}]},
        })
    };
    for i in 0..pods {
        state.create(pod(i)).expect("pod");
    }
    ready_and_running(state, nodes, pods).await;
    for i in 0..pods {
        let key = ObjectKey::of(&pod(i)).expect("key");
        state.delete(&key, Some(2)).expect("marked");
    }
    wait_for(state, "v1", "Pod", "pods removed", <[_]>::is_empty, |_| {
        true
    })
    .await;
    let killing = events_by_object(state, "Killing");
    let twice: Vec<_> = killing.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "Killing emitted twice: {twice:?}");
    assert_eq!(killing.len(), pods, "a Killing event per pod");
    engine.shutdown();
    for t in tasks {
        t.abort();
    }
}

/// A Stage played again from its first step (the engine that began it stopped before
/// its end, another takes over) sends its events under the same names: the server's
/// AlreadyExists is taken as sent, so each pod carries one `Scheduled` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_played_again_by_another_engine_does_not_repeat_its_events() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    let faults = &server.server().faults;
    // Every pod patch fails: the first engine sends pod-scheduled's event, then retries
    // its patch.
    faults.set_spec("patch/pods:500=1".parse().expect("spec"));
    let pods = 20;
    create_nodes_and_pods(state, 2, pods, &json!({}));
    let sets = examples();
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let scheduled = |state: &State| events_by_object(state, "Scheduled");
    let (first, tasks) = start_engine(&server, &sets, 4, Default::default()).await;
    wait_for(
        state,
        "v1",
        "Event",
        "a Scheduled event per pod",
        |_| scheduled(state).len() == pods,
        |_| true,
    )
    .await;
    first.shutdown();
    for t in tasks {
        t.abort();
    }
    // The patches go through now; a second engine plays every pod from the start.
    faults.set_spec(kstage::cluster::faults::FaultSpec::none());
    let (second, tasks) = start_engine(&server, &sets, 4, Default::default()).await;
    wait_for(
        state,
        "v1",
        "Pod",
        "pods Running",
        |all| all.len() == pods,
        |p| p.pointer("/status/phase") == Some(&json!("Running")),
    )
    .await;
    let twice: Vec<_> = scheduled(state)
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(twice.is_empty(), "Scheduled sent twice: {twice:?}");
    assert_eq!(scheduled(state).len(), pods);
    second.shutdown();
    for t in tasks {
        t.abort();
    }
}
