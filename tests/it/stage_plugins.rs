//! StagePlugin resources played by `--plugin-crds` daemons against the embedded API
//! server: a component from a ConfigMap is fetched, checked, swapped in and reported;
//! a version that fails validation or does not match its digest leaves the previous one
//! serving, with the reason in the status and a Warning Event; deleting the resource
//! unbinds it; two daemons swap on one edit and do not fight over the status.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use chrono::Utc;
use serde_json::{Value, json};

use kstage::apiserver::state::State;
use kstage::apiserver::{ApiServer, Config};
use kstage::clock::{Clock, SystemClock};
use kstage::cluster::ObjectKey;
use kstage::cluster::client::KubeCluster;
use kstage::daemon::plugins::PluginResources;
use kstage::daemon::{Daemon, Resources};
use kstage::engine::EngineConfig;
use kstage::plugin::config::PluginConfig;
use kstage::plugin::{Capability, PluginSet, Runtime};
use kstage::template::{Renderer, StageEnv};

use crate::e2e::{kube_config, wait_for};
use crate::fixtures::{Classify, Fixture};

const GROUP: &str = "kstage.dev/v1alpha1";

fn install_crd(state: &State) {
    let text =
        std::fs::read_to_string(crate::root().join("deploy/crds/stageplugins.kstage.dev.yaml"))
            .expect("CRD");
    state
        .create(kstage::yaml::to_json(&text).expect("YAML"))
        .expect("CRD");
}

/// A classifier component reporting `version`; `interface` "0.1.0" is this kstage's.
fn component(version: &'static str, interface: &'static str) -> Vec<u8> {
    Fixture {
        interface_version: interface,
        version,
        ..Fixture::classifier(Classify::Policy)
    }
    .build()
}

fn sha(bytes: &[u8]) -> String {
    kstage::plugin::runtime::digest(bytes)
}

/// The ConfigMap `plugins` with a key per component: a StagePlugin moves from one
/// version to another in one write (key and sha256 together).
fn config_map(keys: &[(&str, &[u8])]) -> Value {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|(k, bytes)| {
            (
                (*k).to_owned(),
                json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
            )
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "plugins", "namespace": "default"},
        "binaryData": data,
    })
}

fn stage_plugin(key: &str, sha256: &str) -> Value {
    json!({
        "apiVersion": GROUP, "kind": "StagePlugin",
        "metadata": {"name": "chaos"},
        "spec": {
            "source": {"configMap": {"namespace": "default", "name": "plugins", "key": key}},
            "sha256": sha256,
            "bind": ["classifier"],
            "timeout": "50ms",
        },
    })
}

fn key(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// Replace an object in the store with `object` (its spec or data), as `kubectl apply`
/// would.
fn update(state: &State, object: Value) {
    let k = ObjectKey::of(&object).expect("key");
    let mut current = (*state.get(&k).expect("exists")).clone();
    for field in ["spec", "binaryData"] {
        if let Some(v) = object.get(field) {
            current[field] = v.clone();
        }
    }
    state.update(&k, current, None).expect("updated");
}

/// A daemon and its plugin set.
struct Replica {
    daemon: Daemon,
    set: Arc<PluginSet>,
}

async fn replica(server: &ApiServer) -> Replica {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let runtime = Runtime::new().expect("wasmtime");
    let set = PluginSet::load(runtime, PluginConfig::default(), clock.clone(), None).expect("set");
    let cache = crate::scratch(&format!("stage-plugins-{}", Arc::as_ptr(&set) as usize));
    let cluster = Arc::new(KubeCluster::new(kube_config(server).await).expect("cluster"));
    let renderer = Renderer::new(Arc::new(StageEnv::new(
        clock.clone(),
        Utc::now(),
        "plugins",
    )));
    let daemon = Daemon::start(
        cluster,
        Vec::new(),
        Resources {
            stages: None,
            plugins: Some(PluginResources {
                set: set.clone(),
                cache,
            }),
        },
        renderer,
        EngineConfig {
            workers: 2,
            clock,
            ..EngineConfig::default()
        },
        set.deciders(),
    );
    Replica { daemon, set }
}

fn writes(replicas: &[&Replica]) -> u64 {
    replicas
        .iter()
        .map(|r| r.daemon.engine().metrics().plugin_statuses()["written"])
        .sum()
}

/// Wait until every replica has handled every StagePlugin event so far: the initial
/// list, the test's own `edits`, and the status writes (which may add more meanwhile).
async fn settle(replicas: &[&Replica], edits: u64) {
    loop {
        let written = writes(replicas);
        let events = 1 + edits + written;
        for r in replicas {
            tokio::time::timeout(
                Duration::from_secs(30),
                r.daemon.plugin_events().wait_for(|n| *n >= events),
            )
            .await
            .unwrap_or_else(|_| panic!("a replica did not handle {events} StagePlugin events"))
            .expect("running");
        }
        if writes(replicas) == written {
            return;
        }
    }
}

/// The condition `kind` of a StagePlugin object.
fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn says(o: &Value, kind: &str, status: &str, reason: &str) -> bool {
    condition(o, kind).is_some_and(|c| c["status"] == status && c["reason"] == reason)
        && o.pointer("/status/observedGeneration") == o.pointer("/metadata/generation")
}

/// Wait until the StagePlugin `chaos` satisfies `done`.
async fn until(state: &State, what: &str, done: impl Fn(&Value) -> bool) {
    wait_for(
        state,
        GROUP,
        "StagePlugin",
        what,
        |all| all.len() == 1,
        |o| done(o),
    )
    .await;
}

/// The version of plugin `chaos` serving in `set`, and whether it decides
/// classifications for every Stage.
fn serving(set: &PluginSet) -> Option<String> {
    set.plugin("chaos").map(|p| p.info().version.clone())
}

fn warnings(state: &State, reason: &str) -> usize {
    let events = state.resource_of("v1", "Event").expect("events");
    state
        .list(&events, None, None, 0, None, |_| true)
        .expect("list")
        .items
        .iter()
        .filter(|e| {
            e["type"] == "Warning"
                && e["reason"] == reason
                && e["involvedObject"]["name"] == "chaos"
        })
        .count()
}

/// Wait until a Warning Event of `reason` is recorded for `chaos`.
async fn warned(state: &State, reason: &str) {
    wait_for(
        state,
        "v1",
        "Event",
        &format!("a {reason} Warning"),
        |_| warnings(state, reason) >= 1,
        |_| true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_plugin_from_a_config_map_is_swapped_kept_and_unbound() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    install_crd(state);
    let (a, b) = (replica(&server).await, replica(&server).await);
    let both = [&a, &b];
    // Both have listed the (no) StagePlugins before there is one.
    settle(&both, 0).await;

    // Version 1 from a ConfigMap: fetched, validated, serving in both daemons, its
    // status written once (the other replica finds it said, or loses the precondition).
    let (v1, bad, v2) = (
        component("1.0.0", "0.1.0"),
        // Built for another interface version: fails validation.
        component("6.6.6", "9.9.9"),
        component("2.0.0", "0.1.0"),
    );
    let keys: [(&str, &[u8]); 3] = [("v1.wasm", &v1), ("bad.wasm", &bad), ("v2.wasm", &v2)];
    state.create(config_map(&keys)).expect("ConfigMap");
    state
        .create(stage_plugin("v1.wasm", &sha(&v1)))
        .expect("StagePlugin");
    settle(&both, 1).await;
    let o = state
        .get(&key(GROUP, "StagePlugin", "", "chaos"))
        .expect("object");
    assert!(
        says(&o, "Ready", "True", "Serving")
            && says(&o, "Fetched", "True", "Fetched")
            && says(&o, "Validated", "True", "Validated"),
        "{o}"
    );
    assert_eq!(o["status"]["digest"], sha(&v1));
    assert_eq!(o["status"]["version"], "1.0.0");
    assert_eq!(o["status"]["interfaceVersion"], "0.1.0");
    assert_eq!(writes(&both), 1, "one status write for one change");
    for r in both {
        assert_eq!(serving(&r.set).as_deref(), Some("1.0.0"));
        assert_eq!(
            r.set.bound_to(Capability::Classifier).as_deref(),
            Some("chaos")
        );
    }

    // The ConfigMap edited in place to other bytes (the StagePlugin unchanged): its
    // watch brings the change; the digest no longer matches and version 1 keeps serving.
    let v0 = component("0.9.0", "0.1.0");
    update(
        state,
        config_map(&[("v1.wasm", &v0), ("bad.wasm", &bad), ("v2.wasm", &v2)]),
    );
    until(state, "DigestMismatch", |o| {
        says(o, "Fetched", "False", "DigestMismatch")
    })
    .await;
    let o = state
        .get(&key(GROUP, "StagePlugin", "", "chaos"))
        .expect("object");
    assert_eq!(
        condition(&o, "Validated").expect("Validated")["status"],
        "Unknown"
    );
    assert_eq!(o["status"]["version"], "1.0.0");
    warned(state, "DigestMismatch").await;

    // A version that fails validation (another interface version): the old one serves.
    update(state, stage_plugin("bad.wasm", &sha(&bad)));
    until(state, "ValidationFailed", |o| {
        says(o, "Validated", "False", "ValidationFailed")
    })
    .await;
    let o = state
        .get(&key(GROUP, "StagePlugin", "", "chaos"))
        .expect("object");
    assert!(says(&o, "Ready", "False", "ValidationFailed"), "{o}");
    assert!(says(&o, "Fetched", "True", "Fetched"), "{o}");
    let message = condition(&o, "Ready").expect("Ready")["message"]
        .as_str()
        .expect("text");
    assert!(
        message.contains("interface") && message.contains("keeps serving"),
        "{message}"
    );
    assert_eq!(o["status"]["version"], "1.0.0", "the serving version");
    for r in both {
        assert_eq!(serving(&r.set).as_deref(), Some("1.0.0"));
    }
    warned(state, "ValidationFailed").await;

    // A good version 2: swapped.
    update(state, stage_plugin("v2.wasm", &sha(&v2)));
    until(state, "version 2", |o| {
        says(o, "Ready", "True", "Serving") && o["status"]["version"] == "2.0.0"
    })
    .await;

    // Deleted: unbound in both daemons; the built-in classification resumes.
    state
        .delete(&key(GROUP, "StagePlugin", "", "chaos"), None)
        .expect("deleted");
    for r in both {
        let set = &r.set;
        tokio::time::timeout(
            Duration::from_secs(30),
            r.daemon
                .plugin_events()
                .wait_for(|_| serving(set).is_none()),
        )
        .await
        .expect("unloaded")
        .expect("running");
        assert_eq!(set.bound_to(Capability::Classifier), None);
    }
    // Each failure was told once, by the replica whose status write took.
    assert_eq!(warnings(state, "ValidationFailed"), 1);
    assert_eq!(warnings(state, "DigestMismatch"), 1);
    a.daemon.shutdown();
    b.daemon.shutdown();
}

/// A `url` source served by a local HTTP server: fetched and serving; a second
/// StagePlugin naming the same URL with a wrong `sha256` is not fetched into service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_plugin_from_a_url_is_checked_against_its_digest() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    install_crd(state);
    let r = replica(&server).await;
    let v1 = component("1.0.0", "0.1.0");
    let (address, _served) = crate::plugin::file_server(v1.clone());
    let from_url = |name: &str, sha256: &str| {
        json!({
            "apiVersion": GROUP, "kind": "StagePlugin",
            "metadata": {"name": name},
            "spec": {"source": {"url": format!("{address}/p.wasm")}, "sha256": sha256},
        })
    };
    state
        .create(from_url("chaos", &sha(&v1)))
        .expect("StagePlugin");
    let wrong = "0".repeat(64);
    state
        .create(from_url("wrong", &wrong))
        .expect("StagePlugin");
    wait_for(
        state,
        GROUP,
        "StagePlugin",
        "both reported",
        |all| all.len() == 2,
        |o| condition(o, "Ready").is_some() && o.pointer("/status/observedGeneration").is_some(),
    )
    .await;
    let get = |name: &str| {
        state
            .get(&key(GROUP, "StagePlugin", "", name))
            .expect("object")
    };
    let chaos = get("chaos");
    assert!(says(&chaos, "Ready", "True", "Serving"), "{chaos}");
    assert_eq!(chaos["status"]["digest"], sha(&v1));
    let wrong = get("wrong");
    assert!(
        says(&wrong, "Fetched", "False", "DigestMismatch"),
        "{wrong}"
    );
    assert!(says(&wrong, "Ready", "False", "DigestMismatch"), "{wrong}");
    assert!(
        wrong["status"].get("digest").is_none_or(Value::is_null),
        "nothing serves: {wrong}"
    );
    assert_eq!(serving(&r.set).as_deref(), Some("1.0.0"));
    assert!(r.set.plugin("wrong").is_none(), "nothing swapped in");
    r.daemon.shutdown();
}
