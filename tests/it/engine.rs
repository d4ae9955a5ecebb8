//! The engine against the in-memory cluster, on paused tokio time: lifecycles complete
//! under injected faults, failed steps retry on KWOK's backoff schedule at the same step,
//! and 404, 409 and 422 are handled as the README's table says.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kstage::clock::{Clock, TokioClock};
use kstage::cluster::faults::{Fault, FaultSpec, Faults, Verb};
use kstage::cluster::memory::{MemoryCluster, event_counts};
use kstage::cluster::{ObjectKey, PatchRequest};
use kstage::engine::{Engine, EngineConfig};
use kstage::patch::PatchType;
use kstage::stage::StageSet;
use kstage::template::{Renderer, StageEnv};
use serde_json::{Value, json};

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc)
}

struct World {
    cluster: Arc<MemoryCluster>,
    engine: Arc<Engine<MemoryCluster>>,
}

/// KWOK's `pod/general` Stages playing on an in-memory cluster.
fn world(faults: FaultSpec, workers: usize) -> World {
    world_of(faults, workers, |renderer| {
        let set = crate::kwok_dir().join("stage/pod/general");
        kstage::stage::load::load(&[set], renderer).expect("corpus readable")
    })
}

/// The Stages `load` gives (all of them valid) playing on an in-memory cluster.
fn world_of(
    faults: FaultSpec,
    workers: usize,
    load: impl FnOnce(&Renderer) -> kstage::stage::load::Loaded,
) -> World {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start()));
    let cluster = Arc::new(MemoryCluster::new(clock.clone(), Faults::new(faults, 11)));
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), start(), "test")));
    let loaded = load(&renderer);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let config = EngineConfig {
        workers,
        seed: 5,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(cluster.clone(), StageSet::new(loaded.stages), config);
    engine.start();
    World { cluster, engine }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1"}]},
    })
}

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: "default".into(),
        name: name.into(),
    }
}

fn running(cluster: &MemoryCluster, name: &str) -> bool {
    cluster
        .object(&key(name))
        .is_some_and(|p| p["status"]["phase"] == "Running")
}

/// Let virtual time pass (tokio auto-advances while every task waits).
async fn wait_until(mut done: impl FnMut() -> bool, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

#[tokio::test(start_paused = true)]
async fn a_thousand_pods_complete_under_twenty_percent_faults() {
    let w = world(FaultSpec::transient(0.2), 8);
    let names: Vec<String> = (0..1000).map(|i| format!("pod-{i}")).collect();
    for name in &names {
        w.cluster.insert(pod(name)).expect("created");
    }
    let all_running = wait_until(
        || names.iter().all(|n| running(&w.cluster, n)),
        Duration::from_secs(3600),
    )
    .await;
    let stuck: Vec<&String> = names
        .iter()
        .filter(|n| !running(&w.cluster, n))
        .take(5)
        .collect();
    assert!(
        all_running,
        "pods not Running: {stuck:?}; metrics: {:?} {:?}",
        w.engine.metrics().retries(),
        w.engine.metrics().dropped()
    );
    assert!(
        w.cluster.faults().injected_total() > 100,
        "faults were injected"
    );
    assert!(w.engine.metrics().retries().values().sum::<u64>() > 100);
    assert!(
        w.engine.metrics().dropped().is_empty(),
        "{:?}",
        w.engine.metrics().dropped()
    );

    // Each pod-create transition emitted its event exactly once, despite the retries.
    let counts = event_counts(&w.cluster.events());
    for name in &names {
        assert_eq!(
            counts.get(&(key(name), "Created".to_owned())),
            Some(&1),
            "{name}"
        );
    }

    // Delete them all: pod-delete removes every one, and nothing writes to a pod after it
    // is gone.
    for name in &names {
        w.cluster.user_delete(&key(name)).expect("deleted");
    }
    let all_gone = wait_until(|| w.cluster.is_empty(), Duration::from_secs(3600)).await;
    assert!(all_gone, "{} pods left", w.cluster.len());
    let mut removed = std::collections::HashMap::new();
    for request in w.cluster.requests() {
        if let Some(at) = removed.get(&request.object) {
            assert!(
                request.failed.is_some() || request.verb == Verb::Event,
                "{:?} wrote to {} after its removal at {at:?}",
                request.verb,
                request.object
            );
        }
        if request.verb == Verb::Delete && request.failed.is_none() {
            removed.insert(request.object.clone(), request.at);
        }
    }
    w.engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_failed_step_retries_at_the_same_step_on_the_backoff_schedule() {
    let w = world(FaultSpec::none(), 2);
    let unavailable = Fault::Status {
        code: 503,
        retry_after: None,
    };
    w.cluster.faults().script(Verb::Patch, [unavailable; 3]);
    w.cluster.insert(pod("p")).expect("created");
    assert!(
        wait_until(
            || w.cluster
                .object(&key("p"))
                .is_some_and(|p| p["status"]["podIP"].is_string()),
            Duration::from_secs(120)
        )
        .await
    );
    let patches: Vec<Duration> = w
        .cluster
        .requests()
        .into_iter()
        .filter(|r| r.verb == Verb::Patch)
        .map(|r| r.at)
        .collect();
    assert!(patches.len() >= 4, "{patches:?}");
    for (i, pair) in patches.windows(2).take(3).enumerate() {
        let gap = (pair[1] - pair[0]).as_secs_f64();
        let base = f64::from(1u32 << i);
        assert!(
            gap >= base && gap <= base * 1.2 + 0.01,
            "retry {i}: {gap}s after the failure, expected {base}s..{}s",
            base * 1.2
        );
    }
    // The event step ran before the failing patch and was not replayed.
    let counts = event_counts(&w.cluster.events());
    assert_eq!(counts.get(&(key("p"), "Created".to_owned())), Some(&1));
    assert_eq!(w.engine.metrics().retries().get("backoff"), Some(&3));
    w.engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn not_found_drops_without_a_warning() {
    let w = world(FaultSpec::none(), 2);
    w.cluster.faults().script(
        Verb::Patch,
        [Fault::Status {
            code: 404,
            retry_after: None,
        }],
    );
    w.cluster.insert(pod("p")).expect("created");
    assert!(
        wait_until(
            || w.engine.metrics().dropped().contains_key("not-found"),
            Duration::from_secs(60)
        )
        .await
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let p = w.cluster.object(&key("p")).expect("pod");
    assert!(
        p["status"].get("podIP").is_none(),
        "the dropped Stage did not write"
    );
    assert!(
        !w.cluster
            .events()
            .iter()
            .any(|e| e.event.event_type == "Warning")
    );
    w.engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn conflict_refreshes_the_object_and_retries() {
    let w = world(FaultSpec::none(), 2);
    w.cluster.faults().script(
        Verb::Patch,
        [Fault::Status {
            code: 409,
            retry_after: None,
        }],
    );
    w.cluster.insert(pod("p")).expect("created");
    assert!(wait_until(|| running(&w.cluster, "p"), Duration::from_secs(120)).await);
    assert_eq!(w.engine.metrics().retries().get("refresh"), Some(&1));
    assert!(
        w.cluster.requests().iter().any(|r| r.verb == Verb::Get),
        "the object was read again"
    );
    w.engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn invalid_drops_with_a_warning_event() {
    let w = world(FaultSpec::none(), 2);
    w.cluster.faults().script(
        Verb::Patch,
        [Fault::Status {
            code: 422,
            retry_after: None,
        }],
    );
    w.cluster.insert(pod("p")).expect("created");
    assert!(
        wait_until(
            || w.cluster
                .events()
                .iter()
                .any(|e| e.event.event_type == "Warning"),
            Duration::from_secs(60)
        )
        .await
    );
    let warning = w
        .cluster
        .events()
        .into_iter()
        .find(|e| e.event.event_type == "Warning")
        .expect("warning");
    assert_eq!(warning.event.reason, "StageFailed");
    assert!(
        warning.event.message.contains("pod-create"),
        "{}",
        warning.event.message
    );
    assert_eq!(w.engine.metrics().dropped().values().sum::<u64>(), 1);
    w.engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn an_object_updated_while_its_job_waits_runs_only_the_new_job() {
    let w = world(FaultSpec::none(), 2);
    w.cluster.insert(pod("p")).expect("created");
    // pod-create waits 1-5 s; change the pod before that.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let label = json!({"metadata": {"labels": {"version": "2"}}});
    let request = PatchRequest {
        patch_type: PatchType::Merge,
        subresource: None,
        data: label,
        as_user: None,
    };
    w.cluster.user_patch(&key("p"), request).expect("patched");
    assert!(wait_until(|| running(&w.cluster, "p"), Duration::from_secs(120)).await);
    assert_eq!(w.engine.metrics().transitions().get("pod-create"), Some(&1));
    let counts = event_counts(&w.cluster.events());
    assert_eq!(counts.get(&(key("p"), "Created".to_owned())), Some(&1));
    let p = w.cluster.object(&key("p")).expect("pod");
    assert_eq!(p["metadata"]["labels"]["version"], "2");
    w.engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_stage_set_change_re_matches_objects_already_seen() {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start()));
    let cluster = Arc::new(MemoryCluster::new(
        clock.clone(),
        Faults::new(FaultSpec::none(), 1),
    ));
    let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), start(), "test")));
    let hold = "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: hold}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchLabels: {never: matches}
  steps:
  - delete: true
";
    let held = kstage::stage::load::load_str(hold, &renderer).expect("valid");
    let config = EngineConfig {
        workers: 2,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(cluster.clone(), StageSet::new(held.stages), config);
    engine.start();
    cluster.insert(pod("p")).expect("created");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        cluster
            .object(&key("p"))
            .is_some_and(|p| p["status"].get("podIP").is_none()),
        "nothing matched yet"
    );

    let general =
        kstage::stage::load::load(&[crate::kwok_dir().join("stage/pod/general")], &renderer)
            .expect("corpus");
    engine.set_stages(StageSet::new(general.stages));
    assert!(
        wait_until(|| running(&cluster, "p"), Duration::from_secs(120)).await,
        "the new Stages were applied to the pod"
    );
    engine.shutdown();
}

#[tokio::test(start_paused = true)]
async fn a_relist_forgets_objects_that_are_gone_and_cancels_their_jobs() {
    use kstage::cluster::WatchEvent;
    let w = world(FaultSpec::none(), 1);
    // The engine sees two pods through a (simulated) watch restart, then a relist that
    // only has one of them: the other's queued job must be cancelled.
    let a = Arc::new(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "default", "resourceVersion": "900"}, "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}}),
    );
    let b = Arc::new(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "namespace": "default", "resourceVersion": "901"}, "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}}),
    );
    w.engine
        .observe(WatchEvent::Restarted(vec![a.clone(), b.clone()]));
    assert!(w.engine.queue().contains(&key("a")) && w.engine.queue().contains(&key("b")));
    w.engine.observe(WatchEvent::Restarted(vec![a.clone()]));
    assert!(w.engine.queue().contains(&key("a")));
    assert!(
        !w.engine.queue().contains(&key("b")),
        "the job of a pod missing from the relist is cancelled"
    );
    // An empty relist of the pods' watch forgets them all.
    let pods = kstage::stage::ResourceRef {
        api_group: "v1".into(),
        kind: "Pod".into(),
    };
    w.engine
        .observe_from(Some(&pods), WatchEvent::Restarted(Vec::new()));
    assert!(
        !w.engine.queue().contains(&key("a")),
        "an empty relist cancels the jobs of the objects gone"
    );
    // The same version again is skipped: the job stays as it was.
    w.engine.observe(WatchEvent::Applied(a.clone()));
    let before = w.engine.queue().stats().replaced;
    w.engine.observe(WatchEvent::Applied(a));
    assert_eq!(
        w.engine.queue().stats().replaced,
        before,
        "an already seen resourceVersion is ignored"
    );
    w.engine.shutdown();
}

/// An engine (started, 4 workers) playing KWOK's Stage `sets` over an in-memory cluster,
/// with a [`StageEnv`] observing the objects (its address pools follow nodes and pods).
fn engine_with_ip_pools(
    sets: &[&str],
) -> (
    Arc<MemoryCluster>,
    Arc<StageEnv>,
    Arc<Engine<MemoryCluster>>,
) {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start()));
    let cluster = Arc::new(MemoryCluster::new(
        clock.clone(),
        Faults::new(FaultSpec::none(), 1),
    ));
    let env = Arc::new(StageEnv::new(clock.clone(), start(), "test"));
    let renderer = Renderer::new(env.clone());
    let paths: Vec<_> = sets.iter().map(|s| crate::kwok_dir().join(s)).collect();
    let loaded = kstage::stage::load::load(&paths, &renderer).expect("corpus readable");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let config = EngineConfig {
        workers: 4,
        clock,
        observer: Some(env.clone()),
        ..EngineConfig::default()
    };
    let engine = Engine::new(cluster.clone(), StageSet::new(loaded.stages), config);
    engine.start();
    (cluster, env, engine)
}

/// 10,000 pods get an IP each, and their deletion returns every address: the pool ends
/// as it started (the next pod gets the first address again).
#[tokio::test(start_paused = true)]
async fn pod_ips_are_released_when_pods_go() {
    let (cluster, env, _engine) = engine_with_ip_pools(&["stage/pod/fast"]);
    let n = 10_000;
    let names: Vec<String> = (0..n).map(|i| format!("pod-{i}")).collect();
    for name in &names {
        cluster.insert(pod(name)).expect("created");
    }
    let has_ip = |name: &str| {
        cluster
            .object(&key(name))
            .is_some_and(|p| p.pointer("/status/podIP").is_some())
    };
    assert!(
        wait_until(
            || names.iter().all(|n| has_ip(n)),
            Duration::from_secs(3600)
        )
        .await
    );
    let first_ip = cluster.object(&key("pod-0")).expect("pod")["status"]["podIP"].clone();
    assert_eq!(env.leased_pods(), n);
    for name in &names {
        cluster.user_delete(&key(name)).expect("deleted");
    }
    assert!(wait_until(|| cluster.is_empty(), Duration::from_secs(3600)).await);
    assert_eq!(env.leased_pods(), 0, "every address came back");
    let next = kstage::template::TemplateEnv::pod_ip_with(
        &*env,
        &kstage::template::PodIpRequest {
            node_name: "node-0",
            host_network: false,
            uid: "fresh",
            name: "fresh",
            namespace: "default",
        },
    )
    .expect("an address");
    assert_eq!(
        json!(next),
        first_ip,
        "the pool starts over at its first address"
    );
}

/// Pods take their addresses from their node's `podCIDRs` (single-stack when the node
/// has one family), from the global range on a node without; a full node range is a
/// render error until an address comes back; nothing stays leased once all is deleted.
#[tokio::test(start_paused = true)]
async fn pod_ips_come_from_their_nodes_pod_cidrs() {
    let (cluster, env, engine) = engine_with_ip_pools(&["stage/node/fast", "stage/pod/fast"]);
    let node = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": spec});
    cluster
        .insert(node(
            "node-a",
            json!({"podCIDR": "10.10.1.0/29", "podCIDRs": ["10.10.1.0/29", "fd00:a::/120"]}),
        ))
        .expect("created");
    cluster
        .insert(node("node-b", json!({"podCIDR": "10.10.2.0/24"})))
        .expect("created");
    cluster.insert(node("node-c", json!({}))).expect("created");
    let on = |name: &str, node: &str| {
        let mut p = pod(name);
        p["spec"]["nodeName"] = json!(node);
        p
    };
    // node-a's /29 holds six pods; the seventh waits for an address.
    let mut pods = Vec::new();
    for i in 0..7 {
        pods.push((format!("a-{i}"), "node-a"));
    }
    for i in 0..3 {
        pods.push((format!("b-{i}"), "node-b"));
        pods.push((format!("c-{i}"), "node-c"));
    }
    // Nodes first, so their ranges are known when the pods are rendered.
    assert!(wait_until(|| env.node_ranges() == 2, Duration::from_secs(60)).await);
    for (name, node) in &pods {
        cluster.insert(on(name, node)).expect("created");
    }
    let ips = |name: &str| -> Option<Vec<String>> {
        let p = cluster.object(&key(name))?;
        let list = p.pointer("/status/podIPs")?.as_array()?;
        Some(
            list.iter()
                .filter_map(|ip| ip["ip"].as_str().map(str::to_owned))
                .collect(),
        )
    };
    let placed = |names: &[&str]| names.iter().all(|n| running(&cluster, n));
    let first_six: Vec<String> = (0..6).map(|i| format!("a-{i}")).collect();
    let others: Vec<String> = (0..3)
        .flat_map(|i| [format!("b-{i}"), format!("c-{i}")])
        .collect();
    let all: Vec<&str> = first_six
        .iter()
        .chain(&others)
        .map(String::as_str)
        .collect();
    assert!(wait_until(|| placed(&all), Duration::from_secs(600)).await);
    assert!(
        !running(&cluster, "a-6"),
        "the seventh pod of a /29 has no address"
    );
    let mut seen = std::collections::HashSet::new();
    for name in &all {
        let ips = ips(name).expect("podIPs");
        assert!(seen.insert(ips[0].clone()), "{name}: {ips:?} given twice");
        match &name[..1] {
            "a" => {
                assert!(ips[0].starts_with("10.10.1."), "{name}: {ips:?}");
                assert!(ips[1].starts_with("fd00:a::"), "{name}: {ips:?}");
            }
            "b" => assert_eq!(ips.len(), 1, "{name}: a single-stack node: {ips:?}"),
            _ => assert!(ips[0].starts_with("10.244."), "{name}: {ips:?}"),
        }
        if name.starts_with('b') {
            assert!(ips[0].starts_with("10.10.2."), "{name}: {ips:?}");
        }
    }
    // An address comes back: the waiting pod gets it on a retry.
    let freed = ips("a-0").expect("podIPs")[0].clone();
    cluster.user_delete(&key("a-0")).expect("deleted");
    assert!(wait_until(|| running(&cluster, "a-6"), Duration::from_secs(3600)).await);
    assert_eq!(ips("a-6").expect("podIPs")[0], freed);
    for (name, _) in &pods {
        let _ = cluster.user_delete(&key(name));
    }
    for n in ["node-a", "node-b", "node-c"] {
        let node_key = ObjectKey {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: String::new(),
            name: n.into(),
        };
        cluster.user_delete(&node_key).expect("deleted");
    }
    assert!(wait_until(|| cluster.is_empty(), Duration::from_secs(3600)).await);
    assert_eq!(env.leased_pods(), 0, "every address came back");
    assert_eq!(env.node_ranges(), 0, "the node ranges are forgotten");
    engine.shutdown();
}

/// A Stage whose output matches it again at once: the loop guard slows the object down
/// and says so once with a Warning Event naming the Stage, while the object keeps playing
/// (slower) and nothing else is held up.
#[tokio::test(start_paused = true)]
async fn a_looping_object_gets_one_warning_event_when_slowed_down() {
    let looping = r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: self-matching}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.name, operator: Exists}
  steps:
  - patch:
      type: merge
      template: '{"metadata":{"annotations":{"seen":"{{ .metadata.resourceVersion }}"}}}'
"#;
    let World { cluster, engine } = world_of(FaultSpec::none(), 16, |renderer| {
        kstage::stage::load::load_str(looping, renderer).expect("loads")
    });
    cluster.insert(pod("p")).expect("created");
    let warnings = || {
        cluster
            .events()
            .into_iter()
            .filter(|e| e.event.event_type == "Warning")
            .collect::<Vec<_>>()
    };
    assert!(wait_until(|| !warnings().is_empty(), Duration::from_secs(10)).await);
    // Ten virtual minutes on: still one warning, and the object played on, slowly.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let warnings = warnings();
    assert_eq!(warnings.len(), 1, "said once");
    assert_eq!(warnings[0].event.reason, "StageLoop");
    assert!(
        warnings[0]
            .event
            .message
            .contains("Stage self-matching played more than 20 times within 1s"),
        "{}",
        warnings[0].event.message
    );
    let plays = engine.metrics().transitions_total();
    assert!((21..=60).contains(&plays), "{plays} plays in ten minutes");
    engine.shutdown();
}

/// A Stage named `name` with no delay, matching pods whose `state` annotation is `from`
/// (`!x`: is not `x`, which a pod without the annotation is not), setting it to `to`.
fn flip(name: &str, from: &str, to: &str) -> String {
    let (operator, value) = match from.strip_prefix('!') {
        Some(not) => ("NotIn", not),
        None => ("In", from),
    };
    format!(
        "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\nspec:\n  resourceRef: {{apiGroup: v1, kind: Pod}}\n  selector:\n    matchExpressions:\n    - {{key: '.metadata.annotations.state', operator: {operator}, values: ['{value}']}}\n  next:\n    patches:\n    - type: merge\n      template: '{{\"metadata\":{{\"annotations\":{{\"state\":\"{to}\"}}}}}}'\n---\n"
    )
}

/// Stages that undo each other, in a ring of `stages`, played on one pod for ten virtual
/// minutes: the Warning Events and the plays.
async fn ring(stages: String) -> (Vec<String>, u64, u64) {
    let World { cluster, engine } = world_of(FaultSpec::none(), 4, |renderer| {
        kstage::stage::load::load_str(&stages, renderer).expect("loads")
    });
    cluster.insert(pod("p")).expect("created");
    let warnings = || {
        cluster
            .events()
            .into_iter()
            .filter(|e| e.event.reason == "StageLoop")
            .map(|e| e.event.message)
            .collect::<Vec<_>>()
    };
    assert!(wait_until(|| !warnings().is_empty(), Duration::from_secs(10)).await);
    tokio::time::sleep(Duration::from_secs(600)).await;
    let plays = engine.metrics().transitions_total();
    let slowed = kstage::engine::Metrics::get(&engine.metrics().slowed);
    engine.shutdown();
    (warnings(), plays, slowed)
}

/// `ping` sets what `pong` matches and `pong` resets it, with no delay: the loop guard
/// follows the chain across both Stages, slows the pod down and names them, once.
#[tokio::test(start_paused = true)]
async fn two_stages_that_undo_each_other_are_slowed_down_and_named() {
    let (warnings, plays, slowed) =
        ring(flip("ping", "!ping", "ping") + &flip("pong", "ping", "pong")).await;
    assert_eq!(warnings.len(), 1, "said once: {warnings:?}");
    assert!(
        warnings[0]
            .contains("Stages ping -> pong played back to back more than 20 times within 1s"),
        "{}",
        warnings[0]
    );
    assert_eq!(slowed, 1);
    // 21 plays at once, then one per 1 s, 2 s, ... 60 s: about 30 in ten minutes
    // (unguarded: as many as the cluster answers).
    assert!((21..=60).contains(&plays), "{plays} plays in ten minutes");
}

/// Three Stages in a ring are one chain as well.
#[tokio::test(start_paused = true)]
async fn three_stages_in_a_ring_are_slowed_down_and_named() {
    let stages = flip("a", "!b", "b") + &flip("b", "b", "c") + &flip("c", "c", "a");
    let (warnings, plays, slowed) = ring(stages).await;
    assert_eq!(warnings.len(), 1, "said once: {warnings:?}");
    assert!(
        warnings[0].contains("Stages a -> b -> c played back to back"),
        "{}",
        warnings[0]
    );
    assert_eq!(slowed, 1);
    assert!((21..=60).contains(&plays), "{plays} plays in ten minutes");
}

/// A Stage that matches its own output but waits a delay of its own each time (a
/// heartbeat, ten a second) is never slowed down.
#[tokio::test(start_paused = true)]
async fn a_stage_that_comes_back_on_its_own_delay_is_never_slowed_down() {
    let heartbeat = r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: heartbeat}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.name, operator: Exists}
  delay: {durationMilliseconds: 100}
  steps:
  - patch:
      type: merge
      template: '{"metadata":{"annotations":{"beat":"{{ .metadata.resourceVersion }}"}}}'
"#;
    let World { cluster, engine } = world_of(FaultSpec::none(), 4, |renderer| {
        kstage::stage::load::load_str(heartbeat, renderer).expect("loads")
    });
    cluster.insert(pod("p")).expect("created");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let plays = engine.metrics().transitions_total();
    assert_eq!(kstage::engine::Metrics::get(&engine.metrics().slowed), 0);
    assert!(
        cluster
            .events()
            .iter()
            .all(|e| e.event.reason != "StageLoop"),
        "no warning"
    );
    // Ten a second for a minute.
    assert!((590..=601).contains(&plays), "{plays} plays in a minute");
    engine.shutdown();
}

/// The Events the engine records on the in-memory cluster name the object as the step
/// saw it: its uid, a resourceVersion it had, and its node (the kubelet's host).
#[tokio::test(start_paused = true)]
async fn recorded_events_name_the_objects_uid_version_and_node() {
    let w = world(FaultSpec::none(), 2);
    let created = w.cluster.insert(pod("web")).expect("created");
    let uid = created["metadata"]["uid"].as_str().expect("uid").to_owned();
    assert!(
        wait_until(|| running(&w.cluster, "web"), Duration::from_secs(3600)).await,
        "web Running"
    );
    let events: Vec<_> = w
        .cluster
        .events()
        .into_iter()
        .filter(|e| e.object == key("web"))
        .collect();
    assert!(!events.is_empty(), "the Stages sent events");
    for e in &events {
        let involved = &e.event.involved;
        assert_eq!(involved.uid, uid, "{e:?}");
        assert!(involved.resource_version.parse::<u64>().is_ok(), "{e:?}");
        assert_eq!(involved.host.as_deref(), Some("node-0"), "{e:?}");
    }
}
