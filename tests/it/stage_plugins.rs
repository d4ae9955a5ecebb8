//! StagePlugin resources played by `--plugin-crds` daemons against the embedded API
//! server: a component from a ConfigMap is fetched, checked, swapped in and reported;
//! a version that fails validation or does not match its digest leaves the previous one
//! serving, with the reason in the status and a Warning Event; deleting the resource
//! unbinds it; two daemons swap on one edit and do not fight over the status.

use std::sync::Arc;
use std::sync::atomic::Ordering;
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
use kstage::retry::Decision;
use kstage::template::{Renderer, StageEnv};

use crate::e2e::{kube_config, wait_for};
use crate::fixtures::{Classify, Fixture};
use crate::rollout;

pub(crate) const GROUP: &str = "kstage.dev/v1alpha1";

pub(crate) fn install_crd(state: &State) {
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
pub(crate) struct Replica {
    pub(crate) daemon: Daemon,
    pub(crate) set: Arc<PluginSet>,
    /// Under which it writes its rollout figures.
    name: String,
}

/// A replica writing its rollout figures under `replica-N` (N counts replicas in this
/// process), every 50 ms.
pub(crate) async fn replica(server: &ApiServer) -> Replica {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let name = format!(
        "replica-{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
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
                replica: name.clone(),
                status_interval: Duration::from_millis(50),
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
    Replica { daemon, set, name }
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
pub(crate) fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

pub(crate) fn says(o: &Value, kind: &str, status: &str, reason: &str) -> bool {
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
pub(crate) fn serving(set: &PluginSet) -> Option<String> {
    set.plugin("chaos").map(|p| p.info().version.clone())
}

/// How many Events of `event_type` and `reason` are recorded for `chaos`.
fn events(state: &State, event_type: &str, reason: &str) -> usize {
    let events = state.resource_of("v1", "Event").expect("events");
    state
        .list(&events, None, None, 0, None, |_| true)
        .expect("list")
        .items
        .iter()
        .filter(|e| {
            e["type"] == event_type
                && e["reason"] == reason
                && e["involvedObject"]["name"] == "chaos"
        })
        .count()
}

fn warnings(state: &State, reason: &str) -> usize {
    events(state, "Warning", reason)
}

/// Wait until an Event of `event_type` and `reason` is recorded for `chaos`.
async fn told(state: &State, event_type: &str, reason: &str) {
    wait_for(
        state,
        "v1",
        "Event",
        &format!("a {event_type} {reason} Event"),
        |_| events(state, event_type, reason) >= 1,
        |_| true,
    )
    .await;
}

/// Wait until a Warning Event of `reason` is recorded for `chaos`.
async fn warned(state: &State, reason: &str) {
    told(state, "Warning", reason).await;
}

/// Wait until `done` holds for `r`'s plugin set (checked as it handles StagePlugin
/// events).
async fn until_set(r: &Replica, what: &str, done: impl Fn(&PluginSet) -> bool) {
    let set = &r.set;
    tokio::time::timeout(
        Duration::from_secs(30),
        r.daemon.plugin_events().wait_for(|_| done(set)),
    )
    .await
    .unwrap_or_else(|_| panic!("{}: {what}", r.name))
    .expect("running");
}

/// The StagePlugin `chaos` as stored.
fn chaos(state: &State) -> Value {
    (*state
        .get(&key(GROUP, "StagePlugin", "", "chaos"))
        .expect("object"))
    .clone()
}

fn with_rollout(mut plugin: Value, rollout: Value) -> Value {
    plugin["spec"]["rollout"] = rollout;
    plugin
}

fn phase(o: &Value) -> Option<&str> {
    o.pointer("/status/rollout/phase").and_then(Value::as_str)
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
        until_set(r, "unloaded", |set| serving(set).is_none()).await;
        assert_eq!(r.set.bound_to(Capability::Classifier), None);
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

/// A version under a canary that fails more calls than allowed is rolled back in every
/// replica, by the verdict of the one that made the calls, with the figures it counted
/// in the status and one Warning Event naming the limit; a good version is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_is_rolled_back_in_every_replica_and_a_good_one_promoted() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    install_crd(state);
    let (a, b) = (replica(&server).await, replica(&server).await);
    let both = [&a, &b];
    settle(&both, 0).await;
    let (v1, v2, v3) = (
        component("1.0.0", "0.1.0"),
        // Passes validation, traps on every 503 it is asked about.
        rollout::component(Classify::TrapOn503, "2.0.0"),
        rollout::component(Classify::Policy, "3.0.0"),
    );
    state
        .create(config_map(&[
            ("v1.wasm", &v1),
            ("v2.wasm", &v2),
            ("v3.wasm", &v3),
        ]))
        .expect("ConfigMap");
    state
        .create(stage_plugin("v1.wasm", &sha(&v1)))
        .expect("StagePlugin");
    for r in both {
        until_set(r, "version 1", |s| serving(s).as_deref() == Some("1.0.0")).await;
    }

    // Version 2 takes half the calls; more than 10% of 10 failing rolls it back.
    let limits =
        json!({"canary": 50, "analysis": {"minCalls": 10, "maxErrorRate": 0.1, "duration": "1h"}});
    update(
        state,
        with_rollout(stage_plugin("v2.wasm", &sha(&v2)), limits),
    );
    for r in both {
        until_set(r, "analysing version 2", |s| s.rollouts().len() == 1).await;
    }
    until(state, "analysing", |o| {
        phase(o) == Some("Analysing")
            && says(o, "Ready", "Unknown", "Analysing")
            && says(o, "Rollout", "Unknown", "Analysing")
    })
    .await;
    assert_eq!(
        chaos(state)["status"]["version"],
        "1.0.0",
        "the serving version"
    );
    let stable = a.set.plugin("chaos").expect("version 1");
    let [report] = a.set.rollouts().try_into().expect("one rollout");
    let canary = report.canary.clone();
    // Validation asked each version once already.
    let asked = |p: &kstage::plugin::Plugin, before: u64| rollout::calls(p) - before;
    let (stable_before, canary_before) = (rollout::calls(&stable), rollout::calls(&canary));
    // Only replica a is asked; every answer is the serving version's (a trapped
    // call fails its decision, which backs off as version 1 does on a 503).
    while asked(&canary, canary_before) < 10 {
        assert_eq!(rollout::classify(&a.set, 503), Decision::Backoff);
    }
    let stable_calls = asked(&stable, stable_before);
    // The verdict was reached at the 10th call: from then on version 1 answers all.
    for _ in 0..20 {
        rollout::classify(&a.set, 503);
    }
    assert_eq!(
        asked(&canary, canary_before),
        10,
        "no call after the verdict"
    );
    until(state, "rolled back", |o| phase(o) == Some("RolledBack")).await;
    warned(state, "RolledBack").await;
    let o = chaos(state);
    assert!(says(&o, "Ready", "False", "RolledBack"), "{o}");
    assert!(says(&o, "Rollout", "False", "RolledBack"), "{o}");
    let message = o["status"]["rollout"]["message"].as_str().expect("text");
    assert!(
        message.contains("(10 of 10 calls) is above maxErrorRate 10%"),
        "{message}"
    );
    assert_eq!(o["status"]["rollout"]["decidedBy"], a.name.as_str());
    assert_eq!(o["status"]["rollout"]["digest"], sha(&v2));
    assert_eq!(o["status"]["version"], "1.0.0");
    assert_eq!(o["status"]["digest"], sha(&v1));
    // The figures are the calls replica a made.
    let figures = &o["status"]["analysis"][a.name.as_str()];
    assert_eq!(figures["digest"], sha(&v2), "{o}");
    assert_eq!(figures["canary"]["calls"], 10, "{o}");
    assert_eq!(figures["canary"]["errors"], 10, "{o}");
    assert_eq!(figures["stable"]["calls"], stable_calls, "{o}");
    assert_eq!(figures["stable"]["errors"], 0, "{o}");
    assert!(
        figures["canary"]["p99Micros"]
            .as_f64()
            .is_some_and(|p| p > 0.0),
        "{o}"
    );
    // Replica b, asked nothing, counted nothing, and applied a's verdict.
    let b_figures = &o["status"]["analysis"][b.name.as_str()];
    assert!(
        b_figures.is_null() || b_figures["canary"]["calls"] == 0,
        "{o}"
    );
    for r in both {
        until_set(r, "version 2 rolled back", |s| {
            s.rollouts().is_empty() && serving(s).as_deref() == Some("1.0.0")
        })
        .await;
    }

    // Version 3 answers as version 1 does: promoted once 10 calls held every limit,
    // by replica b this time.
    let limits =
        json!({"canary": 50, "analysis": {"minCalls": 10, "maxErrorRate": 0.1, "duration": "1ms"}});
    update(
        state,
        with_rollout(stage_plugin("v3.wasm", &sha(&v3)), limits),
    );
    for r in both {
        until_set(r, "analysing version 3", |s| s.rollouts().len() == 1).await;
    }
    let [report] = b.set.rollouts().try_into().expect("one rollout");
    let canary = report.canary.clone();
    let canary_before = rollout::calls(&canary);
    while asked(&canary, canary_before) < 10 {
        assert_eq!(rollout::classify(&b.set, 503), Decision::Backoff);
    }
    until(state, "promoted", |o| {
        phase(o) == Some("Promoted")
            && says(o, "Ready", "True", "Serving")
            && o["status"]["version"] == "3.0.0"
    })
    .await;
    told(state, "Normal", "Promoted").await;
    let o = chaos(state);
    assert!(says(&o, "Rollout", "True", "Promoted"), "{o}");
    assert_eq!(o["status"]["rollout"]["decidedBy"], b.name.as_str());
    assert_eq!(o["status"]["digest"], sha(&v3));
    for r in both {
        until_set(r, "version 3 serving", |s| {
            s.rollouts().is_empty() && serving(s).as_deref() == Some("3.0.0")
        })
        .await;
    }
    // Each replica counted both verdicts it applied; each was told once.
    for r in both {
        let m = r.set.metrics();
        assert_eq!(
            [&m.canaries, &m.rolled_back, &m.promoted].map(|n| n.load(Ordering::Relaxed)),
            [2, 1, 1],
            "{}",
            r.name
        );
    }
    assert_eq!(warnings(state, "RolledBack"), 1);
    assert_eq!(events(state, "Normal", "Promoted"), 1);
    a.daemon.shutdown();
    b.daemon.shutdown();
}

/// In shadow mode the new version is asked beside the serving one and never answers:
/// a version that disagrees on every call is rolled back on `maxDisagreement`, and the
/// status counts both versions' calls and the comparisons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadowed_version_never_answers_and_is_rolled_back_on_disagreement() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    install_crd(state);
    let r = replica(&server).await;
    let (v1, v2) = (
        component("1.0.0", "0.1.0"),
        // Always answers refresh, where version 1 backs off or retries after.
        rollout::component(Classify::Refresh, "2.0.0"),
    );
    state
        .create(config_map(&[("v1.wasm", &v1), ("v2.wasm", &v2)]))
        .expect("ConfigMap");
    state
        .create(stage_plugin("v1.wasm", &sha(&v1)))
        .expect("StagePlugin");
    until_set(&r, "version 1", |s| serving(s).as_deref() == Some("1.0.0")).await;
    let limits = json!({"canary": 100, "mode": "shadow",
                        "analysis": {"minCalls": 20, "maxDisagreement": 0.5, "duration": "1h"}});
    update(
        state,
        with_rollout(stage_plugin("v2.wasm", &sha(&v2)), limits),
    );
    until_set(&r, "analysing version 2", |s| s.rollouts().len() == 1).await;
    let [report] = r.set.rollouts().try_into().expect("one rollout");
    let canary = report.canary.clone();
    // Validation asked it once already.
    let canary_before = rollout::calls(&canary);
    let mut asked = 0;
    while rollout::calls(&canary) - canary_before < 20 {
        let (status, expected) = if asked % 2 == 0 {
            (429, Decision::RetryAfter(Duration::from_millis(1234)))
        } else {
            (500, Decision::Backoff)
        };
        assert_eq!(rollout::classify(&r.set, status), expected, "call {asked}");
        asked += 1;
    }
    assert_eq!(asked, 20, "every call shadowed");
    until(state, "rolled back", |o| phase(o) == Some("RolledBack")).await;
    let o = chaos(state);
    assert!(says(&o, "Ready", "False", "RolledBack"), "{o}");
    let message = o["status"]["rollout"]["message"].as_str().expect("text");
    assert!(
        message.starts_with(
            "disagreement 100% (20 of 20 answers compared) is above maxDisagreement 50%"
        ),
        "{message}"
    );
    assert_eq!(o["status"]["rollout"]["mode"], "shadow");
    let figures = &o["status"]["analysis"][r.name.as_str()];
    assert_eq!(figures["stable"]["calls"], 20, "{o}");
    assert_eq!(figures["canary"]["calls"], 20, "{o}");
    assert_eq!(figures["canary"]["compared"], 20, "{o}");
    assert_eq!(figures["canary"]["disagreements"], 20, "{o}");
    warned(state, "RolledBack").await;
    until_set(&r, "rolled back", |s| s.rollouts().is_empty()).await;
    assert_eq!(serving(&r.set).as_deref(), Some("1.0.0"));
    r.daemon.shutdown();
}
