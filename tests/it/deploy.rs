//! The in-cluster packaging (`deploy/`, `Dockerfile`): the Deployment's arguments are a
//! valid `kstage run` (tests/it/replicas.rs checks its ClusterRole), every kustomization
//! (the base and each overlay) renders with `kubectl kustomize`, parses into the
//! Kubernetes types it claims and applies with `kubectl apply` to the embedded API
//! server, and the alerts and the dashboard name only metrics kstage serves.

use std::collections::BTreeSet;
use std::path::Path;

use clap::Parser as _;
use serde_json::{Value, json};

use kstage::apiserver::{ApiServer, Config};

pub(crate) fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(crate::root().join(path)).expect("read");
    kstage::yaml::documents(&text).expect("YAML")
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The container's arguments as a parsed `kstage run` command line.
fn kstage_args(deployment: &Value) -> Vec<String> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
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
    argv
}

#[test]
fn the_deployment_runs_a_valid_kstage_command_as_its_service_account() {
    let deployment = of_kind(&documents("deploy/base/deployment.yaml"), "Deployment").clone();
    let argv = kstage_args(&deployment);
    let pod = &deployment["spec"]["template"]["spec"];
    // The Stages it plays are mounted from the ConfigMap of examples/stages.
    let at = argv.iter().position(|a| a == "--stages").expect("--stages");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == argv[at + 1].as_str())
        .expect("the --stages folder is mounted");
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("its volume");
    assert_eq!(volume["configMap"]["name"], "kstage-stages");
    // Every Stage file of examples/stages is in that ConfigMap.
    let generator = &documents("examples/stages/kustomization.yaml")[0]["configMapGenerator"][0];
    assert_eq!(generator["name"], "kstage-stages");
    let listed: BTreeSet<String> = generator["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            f.as_str()
                .expect("text")
                .split_once('=')
                .expect("key=path")
                .1
                .to_owned()
        })
        .collect();
    let mut on_disk = BTreeSet::new();
    for kind in ["node", "pod"] {
        for entry in
            std::fs::read_dir(crate::root().join("examples/stages").join(kind)).expect("dir")
        {
            let name = entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned();
            on_disk.insert(format!("{kind}/{name}"));
        }
    }
    assert_eq!(
        listed, on_disk,
        "examples/stages/kustomization.yaml lists every Stage file"
    );

    let rbac = documents("deploy/base/rbac.yaml");
    let account = of_kind(&rbac, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    let binding = of_kind(&rbac, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], account["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        account["metadata"]["namespace"]
    );
    assert_eq!(
        binding["roleRef"]["name"],
        of_kind(&rbac, "ClusterRole")["metadata"]["name"]
    );
    let security = &pod["containers"][0]["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    // The image runs as the same non-root user, and still carries the Stages.
    let dockerfile = std::fs::read_to_string(crate::root().join("Dockerfile")).expect("read");
    assert!(dockerfile.contains("USER 65532:65532"), "{dockerfile}");
    assert!(
        dockerfile.contains("/usr/share/kstage/stages"),
        "{dockerfile}"
    );
}

/// Deserialize `doc` into the Kubernetes type `T` and back: a field `T` does not have
/// (a typo, a field at the wrong level) is lost on the way and fails the comparison.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) {
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}\n{doc:#}", doc["kind"]));
    let back = serde_json::to_value(typed).expect("serialize");
    assert_eq!(&back, doc, "{} changed on a round trip", doc["kind"]);
}

/// Check that `doc` is the Kubernetes type its `kind` claims.
fn is_its_type(doc: &Value) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
    use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    match doc["kind"].as_str().unwrap_or("") {
        "Namespace" => round_trip::<Namespace>(doc),
        "ServiceAccount" => round_trip::<ServiceAccount>(doc),
        "ClusterRole" => round_trip::<ClusterRole>(doc),
        "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(doc),
        "Role" => round_trip::<Role>(doc),
        "RoleBinding" => round_trip::<RoleBinding>(doc),
        "ConfigMap" => round_trip::<ConfigMap>(doc),
        "Service" => round_trip::<Service>(doc),
        "Deployment" => round_trip::<Deployment>(doc),
        "PodDisruptionBudget" => round_trip::<PodDisruptionBudget>(doc),
        "FlowSchema" => round_trip::<FlowSchema>(doc),
        "PriorityLevelConfiguration" => round_trip::<PriorityLevelConfiguration>(doc),
        "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(doc),
        // The Prometheus Operator's kinds have no Rust types here: checked by shape.
        "ServiceMonitor" => {
            assert!(doc["spec"]["endpoints"][0]["port"].is_string(), "{doc:#}");
            assert!(
                doc["spec"]["selector"]["matchLabels"].is_object(),
                "{doc:#}"
            );
        }
        "PrometheusRule" => {
            let rules = doc["spec"]["groups"][0]["rules"].as_array().expect("rules");
            assert!(
                rules
                    .iter()
                    .all(|r| r["alert"].is_string() && r["expr"].is_string())
            );
        }
        other => panic!("an unexpected kind in deploy/: {other}"),
    }
}

/// `kubectl kustomize DIR`, as documents.
fn kustomize(dir: &str) -> Vec<Value> {
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", &crate::root().join(dir).display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    kstage::yaml::documents(&String::from_utf8_lossy(&out.stdout)).expect("YAML")
}

/// Minimal definitions of the Prometheus Operator's two kinds the monitoring overlay uses
/// (the real ones carry their schema; the embedded server keeps the objects either way).
fn monitoring_crds() -> Vec<Value> {
    [("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")]
        .map(|(plural, kind)| {
            json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
                "spec": {
                    "group": "monitoring.coreos.com", "scope": "Namespaced",
                    "names": {"plural": plural, "kind": kind, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
                },
            })
        })
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn every_kustomization_renders_parses_and_applies() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    for crd in monitoring_crds() {
        server.server().state.create(crd).expect("monitoring CRD");
    }
    let dir = crate::scratch("deploy");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let rendered = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        for (name, overlay) in [
            ("base", "deploy/base"),
            ("ha", "deploy/overlays/ha"),
            ("plugins", "deploy/overlays/plugins"),
            ("monitoring", "deploy/overlays/monitoring"),
        ] {
            let docs = kustomize(overlay);
            for doc in &docs {
                is_its_type(doc);
            }
            // One JSON document per object (kubectl validates a `List` against
            // /openapi/v2, which the embedded server does not serve).
            let file = kubeconfig.with_file_name(format!("{name}.json"));
            let text: Vec<String> = docs.iter().map(Value::to_string).collect();
            std::fs::write(&file, text.join("\n")).expect("write");
            let applied =
                crate::kubectl::kubectl(&kubeconfig, &["apply", "-f", &file.display().to_string()]);
            assert!(applied.contains("deployment.apps/kstage"), "{applied}");
            all.push((name, docs));
        }
        all
    })
    .await
    .expect("kubectl");
    let deployment = |name: &str| {
        let docs = &rendered
            .iter()
            .find(|(n, _)| *n == name)
            .expect("rendered")
            .1;
        of_kind(docs, "Deployment").clone()
    };
    let base = kstage_args(&deployment("base"));
    let ha = deployment("ha");
    assert_eq!(ha["spec"]["replicas"], 3);
    let ha_args = kstage_args(&ha);
    assert!(ha_args.contains(&"--node-leases".to_owned()), "{ha_args:?}");
    assert!(!base.contains(&"--node-leases".to_owned()));
    let plugins = deployment("plugins");
    let args = kstage_args(&plugins);
    let config = &args[args.iter().position(|a| a == "--config").expect("--config") + 1];
    let mount = Path::new(config)
        .parent()
        .expect("folder")
        .to_str()
        .expect("text");
    let mounts = &plugins["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
    assert!(
        mounts
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["mountPath"] == mount),
        "{mounts}"
    );
    assert!(args.contains(&"--plugin-crds".to_owned()), "{args:?}");
    let docs = &rendered
        .iter()
        .find(|(n, _)| *n == "plugins")
        .expect("rendered")
        .1;
    let role = of_kind(docs, "Role");
    assert_eq!(
        role["rules"][0]["resourceNames"],
        json!(["kstage-plugin-components"])
    );
    assert!(
        docs.iter().any(|d| d["kind"] == "CustomResourceDefinition"
            && d["metadata"]["name"] == "stageplugins.kstage.dev"),
        "the StagePlugin CRD"
    );
    // The plugin config the overlay ships is one kstage reads.
    let shipped = crate::root().join("deploy/overlays/plugins/plugins.yaml");
    kstage::plugin::config::PluginConfig::read(&shipped).expect("a valid plugin config");
    let monitoring = &rendered
        .iter()
        .find(|(n, _)| *n == "monitoring")
        .expect("rendered")
        .1;
    let dashboard = monitoring
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard ConfigMap");
    let json: Value =
        serde_json::from_str(dashboard["data"]["kstage.json"].as_str().expect("text"))
            .expect("dashboard JSON");
    assert_eq!(json["uid"], "kstage");
    // Every object is in the server, in its namespace.
    let state = &server.server().state;
    for (_, docs) in &rendered {
        for doc in docs {
            let key = kstage::cluster::ObjectKey {
                api_version: doc["apiVersion"].as_str().expect("apiVersion").to_owned(),
                kind: doc["kind"].as_str().expect("kind").to_owned(),
                // kustomize's namespace lands on FlowSchemas too; kubectl drops it for
                // cluster-scoped kinds, as the server does.
                namespace: if kstage::cluster::is_cluster_scoped(
                    doc["apiVersion"].as_str().unwrap_or(""),
                    doc["kind"].as_str().unwrap_or(""),
                ) {
                    String::new()
                } else {
                    doc["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned()
                },
                name: doc["metadata"]["name"].as_str().expect("name").to_owned(),
            };
            state
                .get(&key)
                .unwrap_or_else(|e| panic!("{key} not stored: {e}"));
        }
    }
}

/// The Stage CRD's printer columns show kstage's `Compiled` condition in `kubectl get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(kstage_kubectl), ignore = "kubectl is not on PATH")]
async fn kubectl_get_stages_shows_whether_they_compile() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let state = &server.server().state;
    crate::e2e::install_stage_crd(state);
    state
        .create(
            json!({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
            "metadata": {"name": "broken"},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"}}}),
        )
        .expect("stage");
    let key = kstage::cluster::ObjectKey {
        api_version: "kwok.x-k8s.io/v1alpha1".into(),
        kind: "Stage".into(),
        namespace: String::new(),
        name: "broken".into(),
    };
    state
        .patch(
            &key,
            kstage::patch::PatchType::Merge,
            Some("status"),
            json!({"status": {"observedGeneration": 1, "conditions": [
                {"type": "Other", "status": "True", "reason": "X", "message": "x"},
                {"type": "Compiled", "status": "False", "reason": "Invalid", "message": "spec.selector: bad jq"},
            ]}}),
        )
        .expect("status");
    let dir = crate::scratch("deploy-stages");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let (table, wide) = tokio::task::spawn_blocking(move || {
        (
            crate::kubectl::kubectl(&kubeconfig, &["get", "stages"]),
            crate::kubectl::kubectl(&kubeconfig, &["get", "stages", "-o", "wide"]),
        )
    })
    .await
    .expect("kubectl");
    let header: Vec<&str> = table
        .lines()
        .next()
        .expect("header")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "KIND", "COMPILED", "REASON", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .expect("row")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..4], ["broken", "Pod", "False", "Invalid"], "{table}");
    assert!(wide.contains("spec.selector: bad jq"), "{wide}");
}

/// Every PromQL expression of the monitoring overlay (alerts and dashboard panels), with
/// where it is.
fn monitoring_expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for rule in documents("deploy/overlays/monitoring/prometheusrule.yaml")[0]["spec"]["groups"][0]
        ["rules"]
        .as_array()
        .expect("rules")
    {
        out.push((
            format!("alert {}", rule["alert"]),
            rule["expr"].as_str().expect("expr").to_owned(),
        ));
    }
    let text =
        std::fs::read_to_string(crate::root().join("deploy/overlays/monitoring/dashboard.json"))
            .expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            out.push((
                format!("panel {}", panel["title"]),
                target["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    out
}

/// The metric names an expression selects.
fn selected(expr: &promql_parser::parser::Expr, names: &mut BTreeSet<String>) {
    use promql_parser::parser::Expr;
    match expr {
        Expr::VectorSelector(v) => names.extend(v.name.clone()),
        Expr::MatrixSelector(m) => names.extend(m.vs.name.clone()),
        Expr::Aggregate(a) => {
            selected(&a.expr, names);
            if let Some(p) = &a.param {
                selected(p, names);
            }
        }
        Expr::Unary(u) => selected(&u.expr, names),
        Expr::Binary(b) => {
            selected(&b.lhs, names);
            selected(&b.rhs, names);
        }
        Expr::Paren(p) => selected(&p.expr, names),
        Expr::Subquery(s) => selected(&s.expr, names),
        Expr::Call(c) => {
            for arg in &c.args.args {
                selected(arg, names);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Check that the alerts and the dashboard parse as PromQL and select only series that
/// `scrape` (a `/metrics` answer in the Prometheus text format) has.
pub fn assert_monitoring_uses_only(scrape: &str) {
    let served: BTreeSet<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let expressions = monitoring_expressions();
    assert!(expressions.len() > 20, "{expressions:?}");
    for (place, expr) in expressions {
        let parsed = promql_parser::parser::parse(&expr)
            .unwrap_or_else(|e| panic!("{place}: not PromQL ({e}): {expr}"));
        let mut names = BTreeSet::new();
        selected(&parsed, &mut names);
        assert!(!names.is_empty(), "{place}: selects nothing: {expr}");
        for name in names {
            assert!(
                served.contains(name.as_str()),
                "{place}: {name} is not served by /metrics:\n{scrape}"
            );
        }
    }
}
