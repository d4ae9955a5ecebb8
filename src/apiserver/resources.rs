//! The resources the embedded API server serves: the built-in table, the ones that
//! CustomResourceDefinitions add while it runs, and the discovery documents (`/api`,
//! `/apis`, `/api/v1`, `/apis/GROUP/VERSION`) that describe them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::cluster::store::CustomKind;

/// A column of a custom resource's table (`additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Header.
    pub name: String,
    /// OpenAPI type (`string`, `integer`, `date` ...).
    pub type_: String,
    /// A simple JSONPath (`.spec.foo`) into the object.
    pub json_path: String,
    /// Shown with `-o wide` only when above 0.
    pub priority: i64,
}

/// One served resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The API group, `""` for the core group.
    pub group: String,
    /// The version, e.g. `v1`.
    pub version: String,
    /// The plural name in URLs, e.g. `pods`.
    pub plural: String,
    /// The singular name.
    pub singular: String,
    /// The kind.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Served with a status subresource.
    pub status: bool,
    /// Built into Kubernetes (strategic merge patches are accepted).
    pub builtin: bool,
    /// Extra table columns of a custom resource.
    pub columns: Vec<PrinterColumn>,
    /// The CustomResourceDefinition that defines it, for custom resources.
    pub crd: Option<String>,
    /// A review (`SelfSubjectAccessReview` ...): created only, answered by
    /// [`super::review`], never stored.
    pub review: bool,
}

impl Resource {
    /// `apiVersion` of its objects: `v1` or `GROUP/VERSION`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind as the in-memory store must know it, for custom resources.
    pub fn custom_kind(&self) -> CustomKind {
        CustomKind {
            namespaced: self.namespaced,
            status: self.status,
        }
    }

    /// Whether it serves the `scale` subresource (`autoscaling/v1` `Scale`).
    pub fn scales(&self) -> bool {
        self.builtin && self.group == "apps" && self.kind == "Deployment"
    }

    fn discovery(&self) -> Vec<Value> {
        if self.review {
            return vec![json!({
                "name": self.plural,
                "singularName": self.singular,
                "namespaced": false,
                "kind": self.kind,
                "verbs": ["create"],
            })];
        }
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            "shortNames": self.short_names,
            "categories": self.categories,
        })];
        if self.status {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.scales() {
            out.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        out
    }
}

/// A built-in resource: group, version, plural, kind, namespaced, short names, status.
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
);

const BUILTINS: &[Builtin] = &[
    ("", "v1", "namespaces", "Namespace", false, &["ns"], true),
    ("", "v1", "nodes", "Node", false, &["no"], true),
    ("", "v1", "pods", "Pod", true, &["po"], true),
    ("", "v1", "events", "Event", true, &["ev"], false),
    ("", "v1", "configmaps", "ConfigMap", true, &["cm"], false),
    ("", "v1", "secrets", "Secret", true, &[], false),
    ("", "v1", "services", "Service", true, &["svc"], true),
    (
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        false,
    ),
    (
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
    ),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        false,
    ),
    // Stored only (no controller acts on them), so `kubectl apply -k deploy/...` works.
    (
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
    ),
    ("batch", "v1", "jobs", "Job", true, &[], true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        false,
    ),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "flowschemas",
        "FlowSchema",
        false,
        &[],
        true,
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "prioritylevelconfigurations",
        "PriorityLevelConfiguration",
        false,
        &[],
        true,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
    ),
];

/// The reviews served (group, kind; version `v1`), see [`super::review`].
const REVIEWS: &[(&str, &str)] = &[
    ("authorization.k8s.io", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "SelfSubjectRulesReview"),
    ("authentication.k8s.io", "SelfSubjectReview"),
];

/// Every served resource, by group, version and plural.
#[derive(Debug, Clone)]
pub struct Registry {
    by_path: BTreeMap<(String, String, String), Arc<Resource>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// The built-in resources.
    pub fn new() -> Self {
        let mut registry = Self {
            by_path: BTreeMap::new(),
        };
        for &(group, version, plural, kind, namespaced, short, status) in BUILTINS {
            registry.insert(Resource {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: kind.to_ascii_lowercase(),
                kind: kind.into(),
                namespaced,
                short_names: short.iter().map(|s| (*s).to_owned()).collect(),
                categories: if matches!(kind, "Pod" | "Service" | "Deployment" | "Job") {
                    vec!["all".into()]
                } else {
                    vec![]
                },
                status,
                builtin: true,
                columns: vec![],
                crd: None,
                review: false,
            });
        }
        for &(group, kind) in REVIEWS {
            registry.insert(Resource {
                group: group.into(),
                version: "v1".into(),
                plural: format!("{}s", kind.to_ascii_lowercase()),
                singular: kind.to_ascii_lowercase(),
                kind: kind.into(),
                namespaced: false,
                short_names: vec![],
                categories: vec![],
                status: false,
                builtin: true,
                columns: vec![],
                crd: None,
                review: true,
            });
        }
        registry
    }

    fn insert(&mut self, resource: Resource) {
        let key = (
            resource.group.clone(),
            resource.version.clone(),
            resource.plural.clone(),
        );
        self.by_path.insert(key, Arc::new(resource));
    }

    /// The resource at `/apis/GROUP/VERSION/PLURAL` (group `""`: `/api/v1/PLURAL`).
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.by_path
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// The resource of objects of `api_version` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<Resource>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.by_path
            .range((group.to_owned(), version.to_owned(), String::new())..)
            .take_while(|((g, v, _), _)| g == group && v == version)
            .find(|(_, r)| r.kind == kind)
            .map(|(_, r)| r.clone())
    }

    /// Whether a group/version is served.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.resources(group, version).next().is_some()
    }

    fn resources<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Resource>> + 'a {
        self.by_path
            .range((group.to_owned(), version.to_owned(), String::new())..)
            .take_while(move |((g, v, _), _)| g == group && v == version)
            .map(|(_, r)| r)
    }

    /// The resources a CustomResourceDefinition defines (one per served version), or
    /// why it is invalid.
    pub fn from_crd(crd: &Value) -> Result<Vec<Resource>, String> {
        let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("");
        let strings = |p: &str| -> Vec<String> {
            crd.pointer(p)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let group = text("/spec/group");
        let plural = text("/spec/names/plural");
        let kind = text("/spec/names/kind");
        let name = text("/metadata/name");
        for (field, value) in [
            ("spec.group", group),
            ("spec.names.plural", plural),
            ("spec.names.kind", kind),
        ] {
            if value.is_empty() {
                return Err(format!("{field}: Required value"));
            }
        }
        if name != format!("{plural}.{group}") {
            return Err(format!(
                "metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
            ));
        }
        let namespaced = match text("/spec/scope") {
            "Namespaced" => true,
            "Cluster" => false,
            other => {
                return Err(format!(
                    "spec.scope: Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
                ));
            }
        };
        let singular = match text("/spec/names/singular") {
            "" => kind.to_ascii_lowercase(),
            s => s.to_owned(),
        };
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .filter(|v| !v.is_empty())
            .ok_or("spec.versions: Required value")?;
        let mut out = Vec::new();
        for v in versions {
            let version = v.get("name").and_then(Value::as_str).unwrap_or("");
            if version.is_empty() {
                return Err("spec.versions[].name: Required value".into());
            }
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .map(|c| PrinterColumn {
                            name: c["name"].as_str().unwrap_or("").to_owned(),
                            type_: c["type"].as_str().unwrap_or("string").to_owned(),
                            json_path: c["jsonPath"].as_str().unwrap_or("").to_owned(),
                            priority: c["priority"].as_i64().unwrap_or(0),
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.push(Resource {
                group: group.to_owned(),
                version: version.to_owned(),
                plural: plural.to_owned(),
                singular: singular.clone(),
                kind: kind.to_owned(),
                namespaced,
                short_names: strings("/spec/names/shortNames"),
                categories: strings("/spec/names/categories"),
                status: v.pointer("/subresources/status").is_some(),
                builtin: false,
                columns,
                crd: Some(name.to_owned()),
                review: false,
            });
        }
        Ok(out)
    }

    /// Serve what a CustomResourceDefinition defines, replacing what it defined before.
    /// Returns the resources it no longer defines.
    pub fn define(&mut self, crd_name: &str, resources: Vec<Resource>) -> Vec<Arc<Resource>> {
        let gone = self.undefine(crd_name);
        for r in resources {
            self.insert(r);
        }
        gone.into_iter()
            .filter(|g| self.get(&g.group, &g.version, &g.plural).is_none())
            .collect()
    }

    /// Stop serving what a CustomResourceDefinition defined; returns it.
    pub fn undefine(&mut self, crd_name: &str) -> Vec<Arc<Resource>> {
        let keys: Vec<_> = self
            .by_path
            .iter()
            .filter(|(_, r)| r.crd.as_deref() == Some(crd_name))
            .map(|(k, _)| k.clone())
            .collect();
        keys.iter().filter_map(|k| self.by_path.remove(k)).collect()
    }

    /// `/api`.
    pub fn core_versions(&self, server_address: &str) -> Value {
        json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
        })
    }

    /// `/apis`.
    pub fn groups(&self) -> Value {
        let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (g, v, _) in self.by_path.keys() {
            if g.is_empty() {
                continue;
            }
            let versions = groups.entry(g).or_default();
            if !versions.contains(&v.as_str()) {
                versions.push(v);
            }
        }
        let groups: Vec<Value> = groups
            .into_iter()
            .map(|(g, versions)| group_document(g, &versions))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `/apis/GROUP`.
    pub fn group(&self, group: &str) -> Option<Value> {
        let mut versions: Vec<&str> = Vec::new();
        for (g, v, _) in self.by_path.keys() {
            if g == group && !versions.contains(&v.as_str()) {
                versions.push(v);
            }
        }
        if versions.is_empty() {
            return None;
        }
        let mut doc = group_document(group, &versions);
        doc["kind"] = json!("APIGroup");
        doc["apiVersion"] = json!("v1");
        Some(doc)
    }

    /// `/api/v1` or `/apis/GROUP/VERSION`.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if !self.serves(group, version) {
            return None;
        }
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        let resources: Vec<Value> = self
            .resources(group, version)
            .flat_map(|r| r.discovery())
            .collect();
        let mut list = json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        });
        // kube-apiserver's `/api/v1` has no apiVersion; the `/apis/G/V` documents do.
        if group_version == "v1"
            && let Some(list) = list.as_object_mut()
        {
            list.remove("apiVersion");
        }
        Some(list)
    }
}

impl Registry {
    /// `/openapi/v3`: one entry per served group/version.
    pub fn openapi_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for (g, v, _) in self.by_path.keys() {
            let path = if g.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{g}/{v}")
            };
            let url = format!("/openapi/v3/{path}");
            paths.insert(path, json!({"serverRelativeURL": url}));
        }
        json!({"paths": paths})
    }

    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/VERSION`: the operations of each
    /// resource, without schemas. Enough for kubectl to see that the server validates
    /// fields itself (`fieldValidation`), so it sends objects without a client-side
    /// schema check.
    pub fn openapi_group_version(&self, group: &str, version: &str) -> Option<Value> {
        if !self.serves(group, version) {
            return None;
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let param = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string"}});
        let mut paths = serde_json::Map::new();
        for r in self.resources(group, version) {
            let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
            let op = |id: &str| {
                json!({
                    "operationId": format!("{id}{}", r.kind),
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": [param("fieldValidation"), param("fieldManager"), param("dryRun")],
                    "responses": {"200": {"description": "OK"}},
                })
            };
            let collection = if r.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
            } else {
                format!("{prefix}/{}", r.plural)
            };
            if r.review {
                paths.insert(collection, json!({"post": op("create")}));
                continue;
            }
            paths.insert(
                collection.clone(),
                json!({"post": op("create"), "get": op("list")}),
            );
            paths.insert(
                format!("{collection}/{{name}}"),
                json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
            );
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "kstage", "version": crate::apiserver::KUBERNETES_VERSION},
            "paths": paths,
            "components": {"schemas": {}},
        }))
    }
}

fn group_document(group: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "stages.kwok.x-k8s.io"},
            "spec": {
                "group": "kwok.x-k8s.io",
                "scope": "Cluster",
                "names": {"plural": "stages", "singular": "stage", "kind": "Stage", "listKind": "StageList"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}}}],
            },
        })
    }

    #[test]
    fn built_ins_are_found_by_path_and_kind() {
        let r = Registry::new();
        let pods = r.get("", "v1", "pods").expect("pods");
        assert_eq!(pods.kind, "Pod");
        assert!(pods.namespaced && pods.status && pods.builtin);
        let lease = r.by_kind("coordination.k8s.io/v1", "Lease").expect("lease");
        assert_eq!(lease.plural, "leases");
        assert!(r.by_kind("v1", "Lease").is_none());
        let core = r.resource_list("", "v1").expect("core");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"pods/status") && names.contains(&"nodes"));
        assert!(!names.contains(&"configmaps/status"));
        assert!(r.resource_list("networking.k8s.io", "v1").is_none());
        let apps = r.resource_list("apps", "v1").expect("apps");
        assert!(
            apps["resources"]
                .as_array()
                .expect("list")
                .iter()
                .any(|r| r["name"] == "deployments/scale" && r["kind"] == "Scale")
        );
    }

    #[test]
    fn a_crd_adds_and_removes_its_resources() {
        let mut r = Registry::new();
        let defined = Registry::from_crd(&stage_crd()).expect("valid");
        assert_eq!(defined.len(), 1);
        assert!(!defined[0].namespaced && defined[0].status && !defined[0].builtin);
        r.define("stages.kwok.x-k8s.io", defined);
        assert!(r.get("kwok.x-k8s.io", "v1alpha1", "stages").is_some());
        let groups = r.groups();
        assert!(
            groups["groups"]
                .as_array()
                .expect("groups")
                .iter()
                .any(|g| g["name"] == "kwok.x-k8s.io")
        );
        assert_eq!(
            r.group("kwok.x-k8s.io").expect("group")["preferredVersion"]["version"],
            "v1alpha1"
        );
        let gone = r.undefine("stages.kwok.x-k8s.io");
        assert_eq!(gone.len(), 1);
        assert!(r.get("kwok.x-k8s.io", "v1alpha1", "stages").is_none());
    }

    #[test]
    fn an_invalid_crd_is_refused_with_the_field() {
        let mut bad = stage_crd();
        bad["metadata"]["name"] = json!("stages");
        assert!(
            Registry::from_crd(&bad)
                .expect_err("name")
                .contains("metadata.name")
        );
        let mut bad = stage_crd();
        bad["spec"]["scope"] = json!("Galaxy");
        assert!(
            Registry::from_crd(&bad)
                .expect_err("scope")
                .contains("spec.scope")
        );
        let mut bad = stage_crd();
        bad["spec"]["versions"] = json!([]);
        assert!(
            Registry::from_crd(&bad)
                .expect_err("versions")
                .contains("spec.versions")
        );
    }
}
