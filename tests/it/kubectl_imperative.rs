//! kubectl's everyday imperative commands against the embedded API server, as people type
//! them: `create` (kubectl sends these kinds as protobuf), `label`, `annotate`, `scale`,
//! `set image`, `delete --wait`, `auth can-i`, `auth whoami` and a `get -w` that ends.
//! Each is checked by reading back what it changed, not only by its exit code.
//!
//! Without kubectl on PATH the tests show as `ignored` (see `build.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kstage::apiserver::{ApiServer, Config};

use crate::kubectl::kubectl;

/// kubectl with `kubeconfig`: (success, stdout, stderr).
fn run(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl get OBJECT -o jsonpath=PATH`.
fn field(kubeconfig: &Path, object: &[&str], path: &str) -> String {
    let jsonpath = format!("jsonpath={path}");
    let mut args = vec!["get"];
    args.extend_from_slice(object);
    args.extend_from_slice(&["-o", &jsonpath]);
    kubectl(kubeconfig, &args)
}

/// One command, the object it changes, a JSONPath into that object and what it must read.
struct Step {
    command: &'static [&'static str],
    object: &'static [&'static str],
    path: &'static str,
    expected: &'static str,
}

const STEPS: &[Step] = &[
    Step {
        command: &["create", "namespace", "demo"],
        object: &["namespace", "demo"],
        path: "{.metadata.name}",
        expected: "demo",
    },
    Step {
        command: &[
            "create",
            "configmap",
            "settings",
            "-n",
            "demo",
            "--from-literal=mode=fast",
            "--from-literal=level=3",
        ],
        object: &["configmap", "settings", "-n", "demo"],
        path: "{.data.mode} {.data.level}",
        expected: "fast 3",
    },
    Step {
        command: &[
            "create",
            "secret",
            "generic",
            "db",
            "-n",
            "demo",
            "--from-literal=password=s3cret",
        ],
        object: &["secret", "db", "-n", "demo"],
        // base64 of `s3cret`: Secret data is bytes, sent raw in protobuf.
        path: "{.type} {.data.password}",
        expected: "Opaque czNjcmV0",
    },
    Step {
        command: &["create", "serviceaccount", "robot", "-n", "demo"],
        object: &["serviceaccount", "robot", "-n", "demo"],
        path: "{.metadata.namespace}/{.metadata.name}",
        expected: "demo/robot",
    },
    Step {
        command: &[
            "create",
            "deployment",
            "web",
            "-n",
            "demo",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=80",
        ],
        object: &["deployment", "web", "-n", "demo"],
        path: "{.spec.replicas} {.spec.selector.matchLabels.app} {.spec.template.spec.containers[0].name}={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort}",
        expected: "2 web nginx=nginx:1.27 80",
    },
    Step {
        command: &[
            "create",
            "service",
            "clusterip",
            "web",
            "-n",
            "demo",
            "--tcp=80:8080",
        ],
        object: &["service", "web", "-n", "demo"],
        path: "{.spec.type} {.spec.ports[0].port} {.spec.ports[0].targetPort} {.spec.selector.app}",
        expected: "ClusterIP 80 8080 web",
    },
    Step {
        command: &[
            "create",
            "job",
            "once",
            "-n",
            "demo",
            "--image=busybox:1.36",
            "--",
            "echo",
            "hi",
        ],
        object: &["job", "once", "-n", "demo"],
        path: "{.spec.template.spec.restartPolicy} {.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].command}",
        expected: "Never busybox:1.36 [\"echo\",\"hi\"]",
    },
    Step {
        command: &["label", "deployment", "web", "-n", "demo", "tier=front"],
        object: &["deployment", "web", "-n", "demo"],
        path: "{.metadata.labels.tier} {.metadata.labels.app}",
        expected: "front web",
    },
    Step {
        command: &[
            "annotate",
            "configmap",
            "settings",
            "-n",
            "demo",
            "owner=team-a",
        ],
        object: &["configmap", "settings", "-n", "demo"],
        path: "{.metadata.annotations.owner} {.data.mode}",
        expected: "team-a fast",
    },
    Step {
        command: &["scale", "deployment", "web", "-n", "demo", "--replicas=5"],
        object: &["deployment", "web", "-n", "demo"],
        // Only the wanted count changes: no controller runs here.
        path: "{.spec.replicas} {.status.replicas}",
        expected: "5 ",
    },
    Step {
        command: &[
            "set",
            "image",
            "deployment/web",
            "-n",
            "demo",
            "nginx=nginx:1.28",
        ],
        object: &["deployment", "web", "-n", "demo"],
        path: "{.spec.template.spec.containers[0].image} {.spec.replicas}",
        expected: "nginx:1.28 5",
    },
];

/// A server, and a kubeconfig for it in a scratch folder of its own (`tag`).
async fn served(tag: &str) -> (ApiServer, PathBuf) {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let dir = crate::scratch(tag);
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    (server, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn imperative_commands_change_what_they_say() {
    let (_server, kubeconfig) = served("kubectl-imperative").await;
    // kubectl blocks: run it off the runtime that serves it.
    tokio::task::spawn_blocking(move || {
        for step in STEPS {
            let (ok, out, err) = run(&kubeconfig, step.command);
            assert!(ok, "kubectl {:?} failed:\n{out}\n{err}", step.command);
            assert_eq!(
                field(&kubeconfig, step.object, step.path),
                step.expected,
                "after kubectl {:?}",
                step.command
            );
        }
        // The scale subresource reads back what `scale` wrote.
        let scale: serde_json::Value = serde_json::from_str(&kubectl(
            &kubeconfig,
            &[
                "get",
                "--raw",
                "/apis/apps/v1/namespaces/demo/deployments/web/scale",
            ],
        ))
        .expect("a Scale");
        assert_eq!(
            (
                &scale["kind"],
                &scale["spec"]["replicas"],
                &scale["status"]["selector"]
            ),
            (&"Scale".into(), &5.into(), &"app=web".into())
        );

        let (ok, out, err) = run(
            &kubeconfig,
            &["delete", "deployment", "web", "-n", "demo", "--wait=true"],
        );
        assert!(ok, "{out}\n{err}");
        assert!(out.contains("deployment.apps \"web\" deleted"), "{out}");
        let (found, _, err) = run(&kubeconfig, &["get", "deployment", "web", "-n", "demo"]);
        assert!(!found && err.contains("NotFound"), "{err}");
    })
    .await
    .expect("kubectl steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn auth_can_i_and_whoami_answer() {
    let (_server, kubeconfig) = served("kubectl-auth").await;
    tokio::task::spawn_blocking(move || {
        let (ok, out, err) = run(&kubeconfig, &["auth", "can-i", "create", "pods"]);
        assert!(ok, "{out}\n{err}");
        assert_eq!(out.trim(), "yes");
        let (ok, out, err) = run(
            &kubeconfig,
            &["auth", "can-i", "delete", "nodes", "--subresource=status"],
        );
        assert!(ok && out.trim() == "yes", "{out}\n{err}");
        let (ok, out, err) = run(&kubeconfig, &["auth", "can-i", "--list"]);
        assert!(ok, "{out}\n{err}");
        assert!(out.contains("*.*") && out.contains("[*]"), "{out}");
        let who = kubectl(
            &kubeconfig,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert_eq!(who, "system:anonymous");
    })
    .await
    .expect("kubectl auth");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn whoami_names_the_token_user() {
    let server = ApiServer::start(Config {
        tls: true,
        token: Some("s3cret-token".into()),
        ..Config::default()
    })
    .await
    .expect("server");
    let dir = crate::scratch("kubectl-whoami");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    tokio::task::spawn_blocking(move || {
        let who = kubectl(
            &kubeconfig,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
            ],
        );
        assert_eq!(who, "kstage:token [\"system:authenticated\"]");
        let (ok, out, err) = run(&kubeconfig, &["auth", "can-i", "create", "deployments"]);
        assert!(ok && out.trim() == "yes", "{out}\n{err}");
    })
    .await
    .expect("kubectl whoami");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn a_watch_ends_at_the_request_timeout() {
    let (_server, kubeconfig) = served("kubectl-watch").await;
    tokio::task::spawn_blocking(move || {
        kubectl(
            &kubeconfig,
            &["create", "configmap", "watched", "--from-literal=a=b"],
        );
        let started = Instant::now();
        let (ok, out, err) = run(
            &kubeconfig,
            &[
                "get",
                "configmaps",
                "-w",
                "--request-timeout=2s",
                "-o",
                "name",
            ],
        );
        let took = started.elapsed();
        assert!(ok, "{out}\n{err}");
        assert_eq!(out.trim(), "configmap/watched", "{err}");
        // kubectl ends its own watch at the request timeout (kube-apiserver does not read
        // `timeout` on a watch, and neither does kstage) and exits 0.
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(20),
            "{took:?}"
        );
    })
    .await
    .expect("kubectl watch");
}
