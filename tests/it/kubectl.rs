//! kubectl against the embedded API server: apply a folder, get as YAML and as a table,
//! patch the status subresource, wait for a condition, delete.
//!
//! Without kubectl on PATH the test shows as `ignored` (see `build.rs`); in CI
//! (`KSTAGE_REQUIRE_KUBECTL=1`, set by `.ci/run`, or `CI` set) it runs, and fails without it.

use std::path::Path;
use std::process::Command;

use kstage::apiserver::{ApiServer, Config};

/// Run kubectl with `kubeconfig`; returns stdout, or panics with stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: team
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team
data:
  mode: fast
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: node-lease
  namespace: team
spec:
  holderIdentity: kstage
  leaseDurationSeconds: 40
---
apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: web.started
  namespace: team
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: kstage.dev/test
reportingInstance: test
action: Started
reason: Started
regarding:
  kind: Pod
  name: web
  namespace: team
note: started
type: Normal
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: team
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx:1.27
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn kubectl_applies_gets_patches_waits_and_deletes() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let dir = crate::scratch("kubectl");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).expect("objects dir");
    std::fs::write(objects.join("team.yaml"), OBJECTS).expect("objects");
    std::fs::copy(
        crate::kwok_dir().join("crd/kwok.x-k8s.io_stages.yaml"),
        objects.join("crd.yaml"),
    )
    .expect("CRD");
    let kc = kubeconfig.clone();
    let objects_dir = objects.to_string_lossy().into_owned();
    // kubectl blocks: run it off the runtime that serves it.
    tokio::task::spawn_blocking(move || {
        let applied = kubectl(&kc, &["apply", "-f", &objects_dir]);
        for line in [
            "namespace/team created",
            "configmap/settings created",
            "pod/web created",
            "customresourcedefinition.apiextensions.k8s.io/stages.kwok.x-k8s.io created",
        ] {
            assert!(applied.contains(line), "{applied}");
        }
        // Applying again changes nothing.
        let again = kubectl(&kc, &["apply", "-f", &objects_dir]);
        assert!(again.contains("pod/web unchanged"), "{again}");

        let yaml = kubectl(&kc, &["get", "pod", "web", "-n", "team", "-o", "yaml"]);
        for needle in [
            "phase: Pending",
            "image: nginx:1.27",
            "uid:",
            "resourceVersion:",
        ] {
            assert!(yaml.contains(needle), "{yaml}");
        }
        let table = kubectl(&kc, &["get", "pods", "-n", "team"]);
        assert!(table.starts_with("NAME"), "{table}");
        assert!(
            table.contains("web") && table.contains("0/1") && table.contains("Pending"),
            "{table}"
        );
        let leases = kubectl(&kc, &["get", "leases", "-n", "team"]);
        assert!(
            leases.contains("node-lease") && leases.contains("kstage"),
            "{leases}"
        );
        let events = kubectl(&kc, &["get", "events.events.k8s.io", "-n", "team"]);
        assert!(
            events.contains("Started") && events.contains("pod/web"),
            "{events}"
        );
        let selected = kubectl(&kc, &["get", "pods", "-A", "-l", "app=web", "-o", "name"]);
        assert_eq!(selected.trim(), "pod/web");

        kubectl(
            &kc,
            &[
                "patch",
                "pod",
                "web",
                "-n",
                "team",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
            ],
        );
        let waited = kubectl(
            &kc,
            &[
                "wait",
                "--for=condition=Ready",
                "pod/web",
                "-n",
                "team",
                "--timeout=20s",
            ],
        );
        assert!(waited.contains("condition met"), "{waited}");
        let phase = kubectl(
            &kc,
            &[
                "get",
                "pod",
                "web",
                "-n",
                "team",
                "-o",
                "jsonpath={.status.phase}",
            ],
        );
        assert_eq!(phase, "Running");

        let described = kubectl(&kc, &["describe", "pod", "web", "-n", "team"]);
        assert!(
            described.contains("Status:") && described.contains("Running"),
            "{described}"
        );

        kubectl(
            &kc,
            &[
                "wait",
                "--for",
                "condition=established",
                "crd/stages.kwok.x-k8s.io",
                "--timeout=20s",
            ],
        );
        let deleted = kubectl(&kc, &["delete", "pod", "web", "-n", "team"]);
        assert!(deleted.contains("pod \"web\" deleted"), "{deleted}");
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["get", "pod", "web", "-n", "team"])
            .output()
            .expect("kubectl runs");
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
    })
    .await
    .expect("kubectl steps");
}

/// A Stage that greets a pod annotated `greet: "yes"` once: an Event, then a mark.
const GREET: &str = r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-greeted}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchAnnotations: {greet: "yes"}
    matchExpressions:
    - {key: .metadata.annotations.greeted, operator: DoesNotExist}
  next:
    event: {type: Normal, reason: Greeted, message: hello from kstage}
    patches:
    - type: merge
      template: '{"metadata": {"annotations": {"greeted": "yes"}}}'
"#;

/// The pod `web` in `default`, bound to `node-1`, with `annotations`.
fn web(annotations: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
    })
}

/// The lines of `kubectl describe`'s `Events:` section.
fn events_section(described: &str) -> Vec<String> {
    described
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn kubectl_describe_shows_a_stages_events_and_not_a_predecessors() {
    use std::sync::Arc;

    use kstage::clock::{Clock, SystemClock};
    use kstage::cluster::ObjectKey;
    use kstage::cluster::client::KubeCluster;
    use kstage::engine::{Engine, EngineConfig};
    use kstage::stage::StageSet;
    use kstage::template::{Renderer, StageEnv};

    let server = ApiServer::start(Config::default()).await.expect("server");
    let dir = crate::scratch("kubectl-describe");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let cluster = KubeCluster::new(crate::e2e::kube_config(&server).await).expect("cluster");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let renderer = Renderer::new(Arc::new(StageEnv::new(
        clock.clone(),
        chrono::Utc::now(),
        "describe",
    )));
    let loaded = kstage::stage::load::load_str(GREET, &renderer).expect("stage");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let config = EngineConfig {
        workers: 1,
        clock,
        ..EngineConfig::default()
    };
    let engine = Engine::new(Arc::new(cluster), StageSet::new(loaded.stages), config);
    let tasks = engine.start();
    let state = &server.server().state;
    state
        .create(
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}),
        )
        .expect("node");
    let first = state
        .create(web(serde_json::json!({"greet": "yes"})))
        .expect("pod");
    let first_uid = first["metadata"]["uid"].as_str().expect("uid").to_owned();
    crate::e2e::wait_for(
        state,
        "v1",
        "Event",
        "the Greeted event",
        |all| all.iter().any(|e| e["reason"] == "Greeted"),
        |_| true,
    )
    .await;

    let kc = kubeconfig.clone();
    let described = tokio::task::spawn_blocking(move || {
        kubectl(&kc, &["describe", "pod", "web", "-n", "default"])
    })
    .await
    .expect("kubectl describe");
    let section = events_section(&described);
    let greeted = section
        .iter()
        .find(|l| l.contains("Greeted"))
        .unwrap_or_else(|| panic!("no Greeted event under Events:\n{described}"));
    for column in ["Normal", "kstage", "hello from kstage"] {
        assert!(greeted.contains(column), "{greeted}\n{described}");
    }

    // The pod goes away and a successor of the same name comes, which no Stage greets.
    let key = ObjectKey {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: "default".into(),
        name: "web".into(),
    };
    state.delete(&key, Some(0)).expect("deleted");
    let second = state.create(web(serde_json::json!({}))).expect("successor");
    assert_ne!(second["metadata"]["uid"].as_str(), Some(first_uid.as_str()));
    let kc = kubeconfig.clone();
    let (described, listed) = tokio::task::spawn_blocking(move || {
        let described = kubectl(&kc, &["describe", "pod", "web", "-n", "default"]);
        let listed = kubectl(
            &kc,
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                "involvedObject.name=web,reason=Greeted",
                "-o",
                "jsonpath={.items[*].involvedObject.uid}",
            ],
        );
        (described, listed)
    })
    .await
    .expect("kubectl describe");
    // The predecessor's Event is still there, under its own uid ...
    assert_eq!(listed.trim(), first_uid);
    // ... and the successor's description does not show it.
    let section = events_section(&described);
    assert!(
        section.first().is_some_and(|l| l.contains("<none>")),
        "{described}"
    );
    assert!(!described.contains("Greeted"), "{described}");
    engine.shutdown();
    for t in tasks {
        t.abort();
    }
}
