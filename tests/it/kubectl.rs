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
