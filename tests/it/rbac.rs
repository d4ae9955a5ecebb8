//! RBAC against recorded requests: the requests kstage made (from `kstage apiserver
//! --audit-log`, picked by kstage's `User-Agent`) are checked against the roles deploy/
//! ships, as kube-apiserver's RBAC authorizer would decide them (API group, resource and
//! subresource, verb, namespace for Roles, `resourceNames` also for a list or watch
//! narrowed to one name by `fieldSelector=metadata.name=...`), and the roles are checked
//! for verbs no request used.
//!
//! Also: the `plugins` overlay's extra roles cover what `kstage run --plugin-crds` does.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};

/// One request of kstage's, as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// A rule and where it applies (`None`: a ClusterRole's, everywhere).
#[derive(Debug, Clone)]
pub struct Grant {
    pub namespace: Option<String>,
    pub rule: Value,
    /// Every verb of it must be used by some request.
    pub must_be_used: bool,
}

/// The rules of the ClusterRoles and Roles among `docs`.
pub fn grants(docs: &[Value], must_be_used: bool) -> Vec<Grant> {
    docs.iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .flat_map(|d| {
            let namespace = (d["kind"] == "Role").then(|| {
                d["metadata"]["namespace"]
                    .as_str()
                    .expect("namespace")
                    .to_owned()
            });
            d["rules"]
                .as_array()
                .expect("rules")
                .iter()
                .map(move |rule| Grant {
                    namespace: namespace.clone(),
                    rule: rule.clone(),
                    must_be_used,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn list(rule: &Value, key: &str) -> Vec<String> {
    rule[key]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|v| v.as_str().expect("text").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

impl Grant {
    fn allows(&self, r: &Request) -> bool {
        let has =
            |key: &str, item: &str| list(&self.rule, key).iter().any(|v| v == item || v == "*");
        let names = list(&self.rule, "resourceNames");
        has("apiGroups", &r.group)
            && has("resources", &r.resource)
            && has("verbs", &r.verb)
            && (names.is_empty() || r.name.as_ref().is_some_and(|n| names.contains(n)))
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| r.namespace.as_ref() == Some(ns))
    }

    /// Each (group, resource, verb) it grants.
    fn triples(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for g in list(&self.rule, "apiGroups") {
            for r in list(&self.rule, "resources") {
                for v in list(&self.rule, "verbs") {
                    out.push((g.clone(), r.clone(), v.clone()));
                }
            }
        }
        out
    }
}

/// kstage's requests in an audit log; discovery (allowed to every authenticated user by
/// `system:discovery`) checked to be only that and left out.
pub fn requests(audit: &Path) -> Vec<Request> {
    let text = std::fs::read_to_string(audit).expect("audit log");
    let mut out = Vec::new();
    for line in text.lines() {
        let event: Value = serde_json::from_str(line).expect("one JSON event per line");
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1");
        if !event["userAgent"]
            .as_str()
            .unwrap_or("")
            .starts_with("kstage/")
        {
            continue;
        }
        let verb = event["verb"].as_str().expect("verb").to_owned();
        let uri = event["requestURI"].as_str().expect("uri");
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let Some(object) = event.get("objectRef") else {
            assert!(
                verb == "get"
                    && ["/api", "/apis", "/version", "/openapi"]
                        .iter()
                        .any(|p| path == *p || path.starts_with(&format!("{p}/"))),
                "a non-resource request outside discovery: {verb} {uri}"
            );
            continue;
        };
        let mut resource = object["resource"].as_str().expect("resource").to_owned();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        // A list or watch of one name, as the authorizer reads it.
        let selected = query.split('&').find_map(|kv| {
            let value = kv.strip_prefix("fieldSelector=")?;
            let decoded = kstage::apiserver::request::percent_decode(value);
            decoded.strip_prefix("metadata.name=").map(str::to_owned)
        });
        out.push(Request {
            group: object["apiGroup"].as_str().unwrap_or("").to_owned(),
            resource,
            verb,
            namespace: object["namespace"].as_str().map(str::to_owned),
            name: object["name"].as_str().map(str::to_owned).or(selected),
        });
    }
    out
}

/// Every request is allowed by some grant, and every verb of a `must_be_used` grant was
/// used.
pub fn check(requests: &[Request], grants: &[Grant]) {
    assert!(!requests.is_empty(), "kstage's requests were recorded");
    let denied: BTreeSet<String> = requests
        .iter()
        .filter(|r| !grants.iter().any(|g| g.allows(r)))
        .map(|r| {
            format!(
                "{} {}/{} {:?} {:?}",
                r.verb, r.group, r.resource, r.namespace, r.name
            )
        })
        .collect();
    assert!(
        denied.is_empty(),
        "not allowed by the shipped roles: {denied:?}"
    );
    let used: BTreeSet<(String, String, String)> = requests
        .iter()
        .map(|r| (r.group.clone(), r.resource.clone(), r.verb.clone()))
        .collect();
    let unused: Vec<String> = grants
        .iter()
        .filter(|g| g.must_be_used)
        .flat_map(Grant::triples)
        .filter(|t| !used.contains(t))
        .map(|(g, r, v)| format!("{v} {g}/{r}"))
        .collect();
    assert!(
        unused.is_empty(),
        "granted but never used: {unused:?} (used: {used:?})"
    );
}

#[test]
fn the_evaluator_decides_as_rbac_does() {
    let role = json!({"kind": "Role", "metadata": {"namespace": "kstage"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["c"], "verbs": ["get", "watch"]},
    ]});
    let g = grants(&[role], true);
    let request = |ns: &str, name: Option<&str>, verb: &str| Request {
        group: String::new(),
        resource: "configmaps".into(),
        verb: verb.into(),
        namespace: Some(ns.into()),
        name: name.map(str::to_owned),
    };
    assert!(g[0].allows(&request("kstage", Some("c"), "get")));
    assert!(
        !g[0].allows(&request("other", Some("c"), "get")),
        "a Role is one namespace's"
    );
    assert!(
        !g[0].allows(&request("kstage", Some("d"), "get")),
        "another name"
    );
    assert!(
        !g[0].allows(&request("kstage", None, "watch")),
        "a watch of every name"
    );
    assert!(
        !g[0].allows(&request("kstage", Some("c"), "list")),
        "another verb"
    );
}

/// `kstage run --stage-crds --plugin-crds` (as the `plugins` overlay runs it) against a
/// `kstage apiserver` process with an audit log: a StagePlugin whose component is in the
/// overlay's ConfigMap is fetched and serves, one from a registry reads the overlay's
/// pull secret (its registry, on a closed loopback port, is unreachable); every request
/// is allowed by the base's and the overlay's roles, and every verb the overlay adds is
/// used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugins_overlay_grants_what_plugin_crds_asks_for() {
    use base64::Engine as _;
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

    let dir = crate::scratch("rbac-plugins");
    let audit = dir.join("audit.log");
    let component = crate::fixtures::Fixture::classifier(crate::fixtures::Classify::Policy).build();
    let sha256 = kstage::plugin::runtime::digest(&component);
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kstage"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "kstage-plugin-components", "namespace": "kstage"},
               "binaryData": {"chaos.wasm": base64::engine::general_purpose::STANDARD.encode(&component)}}),
        json!({"apiVersion": "kstage.dev/v1alpha1", "kind": "StagePlugin", "metadata": {"name": "chaos"},
               "spec": {"source": {"configMap": {"namespace": "kstage", "name": "kstage-plugin-components", "key": "chaos.wasm"}},
                        "sha256": sha256, "bind": ["classifier"]}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
               "metadata": {"name": "kstage-plugin-pull", "namespace": "kstage"},
               "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(
                   json!({"auths": {"127.0.0.1:9": {"username": "u", "password": "p"}}}).to_string())}}),
        json!({"apiVersion": "kstage.dev/v1alpha1", "kind": "StagePlugin", "metadata": {"name": "remote"},
               "spec": {"source": {"oci": {"reference": "127.0.0.1:9/kstage/remote:1", "plainHttp": true,
                        "pollInterval": "0s", "pullSecret": {"namespace": "kstage", "name": "kstage-plugin-pull"}}}}}),
    ];
    let text: Vec<String> = objects.iter().map(Value::to_string).collect();
    let objects_file = dir.join("objects.yaml");
    std::fs::write(&objects_file, text.join("\n---\n")).expect("objects");
    let crd = |name: &str| {
        crate::root()
            .join("deploy/crds")
            .join(name)
            .display()
            .to_string()
    };
    let (audit_arg, objects_arg) = (
        audit.display().to_string(),
        objects_file.display().to_string(),
    );
    let (stages_crd, plugins_crd) = (
        crd("stages.kwok.x-k8s.io.yaml"),
        crd("stageplugins.kstage.dev.yaml"),
    );
    let (_server, kubeconfig) = crate::remote::apiserver(
        &dir,
        &[
            "--audit-log",
            &audit_arg,
            "--load",
            &stages_crd,
            &plugins_crd,
            &objects_arg,
        ],
    );
    // The overlay's config (no file plugins) and flags.
    let config = crate::root()
        .join("deploy/overlays/plugins/plugins.yaml")
        .display()
        .to_string();
    let (kubeconfig_arg, pods) = (
        kubeconfig.display().to_string(),
        crate::root()
            .join("examples/stages/pod")
            .display()
            .to_string(),
    );
    let cache = dir.join("cache").display().to_string();
    let mut run = crate::process::Spawned::start_with(
        &[
            "run",
            "--kubeconfig",
            &kubeconfig_arg,
            "--stage-crds",
            "--stages",
            &pods,
            "--config",
            &config,
            "--plugin-crds",
            "--serve",
            "127.0.0.1:0",
            "--log-format",
            "text",
        ],
        &[("KSTAGE_PLUGIN_CACHE", &cache)],
    );
    assert!(
        run.wait_for(|l| l.starts_with("kstage run: playing")),
        "{}",
        run.said()
    );
    let client = crate::remote::client(&kubeconfig).await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kstage.dev",
        "v1alpha1",
        "StagePlugin",
    ));
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let says = |o: &DynamicObject, kind: &str, status: &str, reason: Option<&str>| {
        o.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == kind
                        && c["status"] == status
                        && reason.is_none_or(|r| c["reason"] == r)
                })
            })
    };
    crate::remote::watch_until(api, "one serving, one unreachable", |all| {
        all.get("chaos")
            .is_some_and(|o| says(o, "Ready", "True", None))
            && all
                .get("remote")
                .is_some_and(|o| says(o, "Fetched", "False", Some("RegistryUnreachable")))
    })
    .await;
    drop(run);

    let mut granted =
        crate::rbac::grants(&crate::deploy::documents("deploy/base/rbac.yaml"), false);
    granted.extend(crate::rbac::grants(
        &crate::deploy::documents("deploy/overlays/plugins/rbac.yaml"),
        true,
    ));
    check(&requests(&audit), &granted);
}
