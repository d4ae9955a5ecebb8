//! Stage resources report in their status whether they compile, written by two daemons
//! (as two replicas) against the embedded API server, without fighting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use kstage::apiserver::{ApiServer, Config};
use kstage::clock::{Clock, SystemClock};
use kstage::cluster::ObjectKey;
use kstage::cluster::client::KubeCluster;
use kstage::daemon::{Daemon, StageResources};
use kstage::engine::EngineConfig;
use kstage::template::{Renderer, StageEnv};

use crate::e2e::{kube_config, wait_for};

const STAGE: &str = "kwok.x-k8s.io/v1alpha1";

fn stage(name: &str, key: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": STAGE, "kind": "Stage",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [{"key": key, "operator": "DoesNotExist"}]},
            "next": {"statusTemplate": "phase: Running"},
        },
    })
}

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        api_version: STAGE.into(),
        kind: "Stage".into(),
        namespace: String::new(),
        name: name.into(),
    }
}

fn renderer() -> Renderer {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    Renderer::new(Arc::new(StageEnv::new(clock, Utc::now(), "status")))
}

async fn daemon(server: &ApiServer) -> Daemon {
    let cluster = Arc::new(KubeCluster::new(kube_config(server).await).expect("cluster"));
    let resources = StageResources {
        known_plugin: Arc::new(|name| name == "present"),
    };
    Daemon::start(
        cluster,
        Vec::new(),
        kstage::daemon::Resources {
            stages: Some(resources),
            plugins: None,
        },
        renderer(),
        EngineConfig {
            workers: 2,
            clock: Arc::new(SystemClock),
            ..EngineConfig::default()
        },
        kstage::decide::Deciders::default(),
    )
}

/// The `Compiled` condition of a Stage object.
fn compiled(o: &Value) -> Option<&Value> {
    o.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Compiled")
}

/// Whether the status speaks of the Stage's current generation.
fn observed(o: &Value) -> bool {
    compiled(o).is_some()
        && o.pointer("/status/observedGeneration") == o.pointer("/metadata/generation")
}

fn total(daemons: &[Daemon], result: &str) -> u64 {
    daemons
        .iter()
        .map(|d| d.engine().metrics().stage_statuses()[result])
        .sum()
}

/// Each daemon's count of Stage resources left out.
fn invalid(daemons: &[Daemon]) -> Vec<u64> {
    daemons
        .iter()
        .map(|d| kstage::engine::Metrics::get(&d.engine().metrics().invalid_stages))
        .collect()
}

/// Wait until both daemons have handled every Stage event so far: the initial list, the
/// test's own `writes`, and the status writes (which may add more while we wait).
async fn settle(daemons: &[Daemon], writes: u64) {
    loop {
        let statuses = total(daemons, "written");
        let events = 1 + writes + statuses;
        for d in daemons {
            tokio::time::timeout(
                Duration::from_secs(30),
                d.stage_events().wait_for(|n| *n >= events),
            )
            .await
            .unwrap_or_else(|_| panic!("a daemon did not handle {events} Stage events"))
            .expect("daemon running");
        }
        if total(daemons, "written") == statuses {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_resources_say_whether_they_compile_and_replicas_agree() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    crate::e2e::install_stage_crd(state);
    let daemons = [daemon(&server).await, daemon(&server).await];
    settle(&daemons, 0).await;

    // A broken jq expression, and a Stage binding a plugin nobody provides.
    let broken = stage("broken", ".metadata.labels[", json!({}));
    let expected = kstage::stage::load::load_str(&broken.to_string(), &renderer()).expect("yaml");
    let problems: Vec<_> = expected.problems.iter().map(|p| p.error.clone()).collect();
    assert!(!problems.is_empty(), "the Stage is broken");
    let lint_message = kstage::daemon::status::Compiled::invalid(&problems).message;
    state.create(broken).expect("stage");
    state
        .create(stage(
            "orphan",
            ".metadata.deletionTimestamp",
            json!({"kstage.dev/selector": "absent", "kstage.dev/renderer": "present"}),
        ))
        .expect("stage");
    wait_for(
        state,
        STAGE,
        "Stage",
        "both statuses",
        |all| all.len() == 2,
        observed,
    )
    .await;
    let get = |name: &str| state.get(&key(name)).expect("stage");
    let b = get("broken");
    let c = compiled(&b).expect("condition");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("Invalid"))
    );
    assert_eq!(c["message"], lint_message.as_str());
    assert!(lint_message.contains("spec.selector"), "{lint_message}");
    let o = get("orphan");
    let c = compiled(&o).expect("condition");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("UnknownPlugin"))
    );
    assert_eq!(
        c["message"],
        "metadata.annotations.kstage.dev/selector: no configured plugin is named \"absent\""
    );
    settle(&daemons, 2).await;
    assert_eq!(invalid(&daemons), [1, 1]);

    // Fixed: the condition flips, for the new generation.
    state
        .patch(
            &key("broken"),
            kstage::patch::PatchType::Merge,
            None,
            json!({"spec": {"selector": {"matchExpressions": [{"key": ".metadata.labels.x", "operator": "DoesNotExist"}]}}}),
        )
        .expect("fixed");
    wait_for(
        state,
        STAGE,
        "Stage",
        "the fix observed",
        |all| all.len() == 2,
        |o| {
            observed(o)
                && (o["metadata"]["name"] != "broken"
                    || compiled(o).is_some_and(|c| c["status"] == "True"))
        },
    )
    .await;
    let b = get("broken");
    assert_eq!(b["status"]["observedGeneration"], 2);
    assert_eq!(compiled(&b).expect("condition")["reason"], "Compiled");
    settle(&daemons, 3).await;
    // One write per change between both replicas: the second found it written.
    assert_eq!(
        total(&daemons, "written"),
        3,
        "{:?}",
        daemons
            .iter()
            .map(|d| d.engine().metrics().stage_statuses())
            .collect::<Vec<BTreeMap<_, _>>>()
    );
    assert_eq!(invalid(&daemons), [0, 0]);

    // A change that leaves the status true (a label) writes nothing.
    let unchanged = total(&daemons, "unchanged");
    let before = get("broken")["metadata"]["resourceVersion"].clone();
    let labelled = state
        .patch(
            &key("broken"),
            kstage::patch::PatchType::Merge,
            None,
            json!({"metadata": {"labels": {"team": "a"}}}),
        )
        .expect("labelled");
    assert_ne!(labelled.object["metadata"]["resourceVersion"], before);
    settle(&daemons, 4).await;
    assert_eq!(total(&daemons, "written"), 3);
    assert_eq!(
        total(&daemons, "unchanged"),
        unchanged + 2,
        "each replica looked"
    );
    assert_eq!(
        get("broken")["metadata"]["resourceVersion"],
        labelled.object["metadata"]["resourceVersion"]
    );
    for d in daemons {
        d.shutdown();
    }
}
