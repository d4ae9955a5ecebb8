//! The in-cluster manifests (`deploy/kstage.yaml`, `Dockerfile`): the Deployment's
//! arguments are a valid `kstage run`, the ClusterRole grants every request kstage makes
//! with its own Stages, and kubectl applies the whole set.

use clap::Parser as _;
use serde_json::Value;

use kstage::apiserver::{ApiServer, Config};

fn manifests() -> Vec<Value> {
    let text = std::fs::read_to_string(crate::root().join("deploy/kstage.yaml")).expect("read");
    kstage::yaml::documents(&text).expect("YAML")
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/kstage.yaml"))
}

#[test]
fn the_deployment_runs_a_valid_kstage_command_as_its_service_account() {
    let docs = manifests();
    let deployment = of_kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mut argv = vec!["kstage".to_owned()];
    argv.extend(
        container["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("text").to_owned()),
    );
    let parsed = kstage::cli::Args::try_parse_from(&argv);
    assert!(parsed.is_ok(), "{argv:?}: {}", parsed.expect_err("invalid"));
    assert!(
        matches!(
            parsed.expect("parsed").command,
            kstage::cli::Command::Run(_)
        ),
        "the Deployment runs `kstage run`"
    );
    // The Stages it names are the ones the image copies from the repository.
    let dockerfile = std::fs::read_to_string(crate::root().join("Dockerfile")).expect("read");
    assert!(dockerfile.contains("COPY --from=build /src/examples/stages /usr/share/kstage/stages"));
    assert!(argv.iter().any(|a| a == "/usr/share/kstage/stages"));
    assert!(crate::root().join("examples/stages/pod").is_dir());
    let account = of_kind(&docs, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    let binding = of_kind(&docs, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        account["metadata"]["namespace"]
    );
    assert_eq!(
        binding["roleRef"]["name"],
        of_kind(&docs, "ClusterRole")["metadata"]["name"]
    );
}

/// Whether a rule of `role` allows `verb` on `resource` of `group`.
fn allows(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |list: &Value, item: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == item || v == "*"))
    };
    role["rules"].as_array().expect("rules").iter().any(|rule| {
        has(&rule["apiGroups"], group)
            && has(&rule["resources"], resource)
            && has(&rule["verbs"], verb)
    })
}

#[test]
fn the_cluster_role_grants_what_kstage_run_does() {
    let docs = manifests();
    let role = of_kind(&docs, "ClusterRole");
    // Watches (list + watch), Stage steps, events, Stage resources and leases.
    let needed = [
        ("", "nodes", &["get", "list", "watch", "patch"][..]),
        ("", "pods", &["get", "list", "watch", "patch", "delete"]),
        ("", "nodes/status", &["patch"]),
        ("", "pods/status", &["patch"]),
        ("", "events", &["create"]),
        ("events.k8s.io", "events", &["create"]),
        ("kwok.x-k8s.io", "stages", &["list", "watch"]),
        ("kwok.x-k8s.io", "stages/status", &["patch"]),
        (
            "coordination.k8s.io",
            "leases",
            &["get", "create", "update"],
        ),
    ];
    for (group, resource, verbs) in needed {
        for verb in verbs {
            assert!(
                allows(role, group, resource, verb),
                "the ClusterRole does not allow {verb} on {group}/{resource}"
            );
        }
    }
    assert!(!allows(role, "", "secrets", "get"), "no more than needed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn kubectl_applies_the_manifests() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let dir = crate::scratch("deploy");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let path = |p: &str| crate::root().join(p).display().to_string();
    let (crds, manifests) = (path("deploy/crds"), path("deploy/kstage.yaml"));
    let applied = tokio::task::spawn_blocking(move || {
        crate::kubectl::kubectl(&kubeconfig, &["apply", "-f", &crds, "-f", &manifests]);
        crate::kubectl::kubectl(
            &kubeconfig,
            &[
                "get",
                "deployment",
                "kstage",
                "-n",
                "kstage",
                "-o",
                "jsonpath={.spec.template.spec.serviceAccountName}",
            ],
        )
    })
    .await
    .expect("kubectl");
    assert_eq!(applied, "kstage");
}
