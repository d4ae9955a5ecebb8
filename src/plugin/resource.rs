//! A plugin as a cluster resource: the `StagePlugin` (`kstage.dev/v1alpha1`,
//! cluster-scoped, CRD in `deploy/crds`), read into the same
//! [`PluginSpec`](super::config::PluginSpec) a `--config` file's entry gives.
//!
//! ```yaml
//! apiVersion: kstage.dev/v1alpha1
//! kind: StagePlugin
//! metadata: {name: chaos}          # the plugin's name in bindings and annotations
//! spec:
//!   source:                        # exactly one of:
//!     configMap: {namespace: kstage, name: kstage-plugins, key: chaos.wasm}  # binaryData
//!     # url: https://example.com/chaos.wasm
//!     # oci:                       # an OCI registry (see `super::oci`)
//!     #   reference: registry.example/team/chaos:1.2   # or ...@sha256:<manifest>
//!     #   pullSecret: {namespace: kstage, name: regcred}  # kubernetes.io/dockerconfigjson
//!     #   pollInterval: 60s        # a tag is resolved again this often (0: never)
//!     #   plainHttp: false         # http instead of https
//!   sha256: 3f1a...                # the component's digest; optional for `oci`
//!   bind: [classifier]             # decides this for every Stage (annotations still win)
//!   timeout: 100ms                 # then the file config's fields, same defaults:
//!   memory: 64Mi                   # timeout, memory, failurePolicy, wasi, warmInstances
//!   failurePolicy: {classifier: fallback}
//!   rollout: {canary: 20, analysis: {duration: 5m}}  # see `super::rollout`
//! ```
//!
//! Parsing checks the document only; fetching the component (a ConfigMap read through the
//! API, or a download) and checking its digest is the caller's, since where the bytes
//! come from is the cluster's business, not the spec's.

use serde::Deserialize;
use serde_json::Value;

use super::Capability;
use super::config::{Policies, parse_sha256, settings};
use super::host::Grants;
use super::loaded::Settings;
use super::oci::OciSource;
use super::rollout::Rollout;
use crate::stage::ResourceRef;

/// The StagePlugin resource.
pub fn stage_plugin_resource() -> ResourceRef {
    ResourceRef {
        api_group: "kstage.dev/v1alpha1".into(),
        kind: "StagePlugin".into(),
    }
}

/// Where a StagePlugin's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A key of a ConfigMap's `binaryData`.
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The key holding the component.
        key: String,
    },
    /// An `http` or `https` URL.
    Url(String),
    /// An OCI registry.
    Oci {
        /// The reference and how it is pulled.
        source: OciSource,
        /// A `kubernetes.io/dockerconfigjson` Secret (namespace, name) holding the
        /// registry's credentials.
        pull_secret: Option<(String, String)>,
    },
}

/// One StagePlugin, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePlugin {
    /// The resource's name: the plugin's name.
    pub name: String,
    /// `metadata.generation`, for `status.observedGeneration`.
    pub generation: i64,
    /// Where the component is.
    pub source: Source,
    /// The digest the component must have (lower-case hex); `None` only for an `oci`
    /// source, whose digest the registry tells.
    pub sha256: Option<String>,
    /// The capabilities it decides for every Stage.
    pub bind: Vec<Capability>,
    /// Limits and grants.
    pub settings: Settings,
    /// Failure policy per capability.
    pub policies: Policies,
    /// How a new version takes over.
    pub rollout: Rollout,
}

/// The spec as written. Its tuning fields repeat the file config's `RawPlugin` on
/// purpose: both refuse unknown fields, which serde cannot combine with a flattened
/// shared struct; the values go through the same `config::settings`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSpec {
    source: RawSource,
    #[serde(default)]
    sha256: Option<Value>,
    #[serde(default)]
    bind: Vec<Capability>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    memory: Option<Value>,
    #[serde(default)]
    failure_policy: Policies,
    #[serde(default)]
    wasi: Grants,
    #[serde(default)]
    warm_instances: Option<usize>,
    #[serde(default)]
    rollout: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSource {
    #[serde(default)]
    config_map: Option<RawConfigMap>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    oci: Option<RawOci>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawOci {
    reference: String,
    #[serde(default)]
    pull_secret: Option<RawSecretRef>,
    #[serde(default)]
    plain_http: bool,
    #[serde(default)]
    poll_interval: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretRef {
    namespace: String,
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfigMap {
    namespace: String,
    name: String,
    key: String,
}

impl ResourcePlugin {
    /// Read a StagePlugin object. The error names the field at fault (`spec.sha256:
    /// ...`), as `kstage stage lint` does for Stages.
    pub fn parse(object: &Value) -> Result<Self, String> {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if name.is_empty() || name == "builtin" {
            return Err("metadata.name: a plugin needs a name other than \"builtin\"".into());
        }
        let generation = object
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        let raw: RawSpec = serde_path_to_error::deserialize(spec).map_err(|e| {
            match e.path().to_string().as_str() {
                "." => format!("spec: {}", e.inner()),
                path => format!("spec.{path}: {}", e.inner()),
            }
        })?;
        let at = |field: &str| format!("spec.{field}");
        let sha256 = raw
            .sha256
            .as_ref()
            .map(|v| parse_sha256(v, &at("sha256")))
            .transpose()?;
        let source = source(raw.source, sha256.as_ref())?;
        if sha256.is_none() && !matches!(source, Source::Oci { .. }) {
            return Err("spec.sha256: required for a `configMap` or `url` source".into());
        }
        let mut bind = Vec::new();
        for capability in raw.bind {
            if capability == Capability::Metadata {
                return Err(
                    "spec.bind: `metadata` is not a decision (selector, renderer, classifier)"
                        .into(),
                );
            }
            if bind.contains(&capability) {
                return Err(format!("spec.bind: {capability} is listed twice"));
            }
            bind.push(capability);
        }
        let settings = settings(
            raw.wasi,
            raw.timeout.as_deref(),
            raw.memory.as_ref(),
            raw.warm_instances,
            &at,
        )?;
        let rollout = raw
            .rollout
            .as_ref()
            .map(|r| super::rollout::parse(r, &at("rollout")))
            .transpose()?
            .unwrap_or_default();
        Ok(Self {
            name,
            generation,
            source,
            sha256,
            bind,
            settings,
            policies: raw.failure_policy,
            rollout,
        })
    }
}

/// The `spec.source` as written, checked (`sha256`: the pin, for an `oci` source).
fn source(raw: RawSource, sha256: Option<&String>) -> Result<Source, String> {
    match (raw.config_map, raw.url, raw.oci) {
        (Some(c), None, None) => {
            for (field, value) in [
                ("namespace", &c.namespace),
                ("name", &c.name),
                ("key", &c.key),
            ] {
                if value.is_empty() {
                    return Err(format!("spec.source.configMap.{field}: empty"));
                }
            }
            Ok(Source::ConfigMap {
                namespace: c.namespace,
                name: c.name,
                key: c.key,
            })
        }
        (None, Some(url), None) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(Source::Url(url))
        }
        (None, Some(url), None) => Err(format!(
            "spec.source.url: {url:?} is not an http or https URL"
        )),
        (None, None, Some(oci)) => {
            let source = OciSource::parse(
                &oci.reference,
                sha256.cloned(),
                oci.plain_http,
                oci.poll_interval.as_deref(),
            )
            .map_err(|e| format!("spec.source.oci: {e}"))?;
            let pull_secret = match oci.pull_secret {
                Some(s) if s.namespace.is_empty() || s.name.is_empty() => {
                    return Err("spec.source.oci.pullSecret: give its namespace and name".into());
                }
                Some(s) => Some((s.namespace, s.name)),
                None => None,
            };
            Ok(Source::Oci {
                source,
                pull_secret,
            })
        }
        _ => Err("spec.source: give exactly one of `configMap`, `url` and `oci`".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SHA: &str = "3f1a000000000000000000000000000000000000000000000000000000000000";

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "kstage.dev/v1alpha1", "kind": "StagePlugin",
               "metadata": {"name": "chaos", "generation": 3}, "spec": spec})
    }

    #[test]
    fn a_config_map_source_with_the_file_configs_fields() {
        let p = ResourcePlugin::parse(&object(json!({
            "source": {"configMap": {"namespace": "kstage", "name": "plugins", "key": "chaos.wasm"}},
            "sha256": SHA.to_uppercase(),
            "bind": ["classifier", "selector"],
            "timeout": "50ms",
            "memory": "64Mi",
            "failurePolicy": {"classifier": "fallback"},
            "wasi": {"stdout": true},
        })))
        .expect("valid");
        assert_eq!(p.name, "chaos");
        assert_eq!(p.generation, 3);
        assert_eq!(p.sha256.as_deref(), Some(SHA), "lower case");
        assert_eq!(p.bind, [Capability::Classifier, Capability::Selector]);
        assert_eq!(p.settings.timeout, std::time::Duration::from_millis(50));
        assert_eq!(p.settings.memory, 64 << 20);
        assert_eq!(
            p.policies.classifier,
            super::super::config::FailurePolicy::Fallback
        );
        assert!(matches!(p.source, Source::ConfigMap { ref key, .. } if key == "chaos.wasm"));
    }

    #[test]
    fn an_oci_source_needs_no_sha256_and_polls_a_tag_only() {
        let p = ResourcePlugin::parse(&object(json!({
            "source": {"oci": {
                "reference": "oci://127.0.0.1:5000/team/chaos:1.2",
                "pullSecret": {"namespace": "kstage", "name": "regcred"},
                "plainHttp": true,
                "pollInterval": "2s",
            }},
        })))
        .expect("valid");
        assert_eq!(p.sha256, None);
        let Source::Oci {
            source,
            pull_secret,
        } = &p.source
        else {
            panic!("an oci source: {p:?}")
        };
        assert_eq!(source.reference, "127.0.0.1:5000/team/chaos:1.2");
        assert!(source.plain_http);
        assert_eq!(source.poll, Some(std::time::Duration::from_secs(2)));
        assert_eq!(
            pull_secret.as_ref(),
            Some(&("kstage".to_owned(), "regcred".to_owned()))
        );
        let digest = format!("registry.example/team/chaos@sha256:{SHA}");
        let p = ResourcePlugin::parse(&object(json!({
            "source": {"oci": {"reference": digest}}, "sha256": SHA,
        })))
        .expect("valid");
        let Source::Oci { source, .. } = &p.source else {
            panic!("an oci source: {p:?}")
        };
        assert_eq!(source.poll, None, "a digest never moves");
        assert_eq!(source.pin.as_deref(), Some(SHA));
    }

    /// The CRD in deploy/crds names the fields the parser reads, no more, no fewer.
    #[test]
    fn the_crd_schema_has_the_fields_read_here() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/crds/stageplugins.kstage.dev.yaml"
        );
        let text = std::fs::read_to_string(path).expect("CRD");
        let crd = crate::yaml::to_json(&text).expect("YAML");
        let typed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_json::from_value(crd.clone()).expect("a CustomResourceDefinition");
        assert_eq!(typed.spec.names.kind, "StagePlugin");
        let resource = stage_plugin_resource();
        assert_eq!(
            format!("{}/{}", typed.spec.group, typed.spec.versions[0].name),
            resource.api_group
        );
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let fields: Vec<&str> = spec["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(String::as_str)
            .collect();
        let mut read = vec![
            "bind",
            "failurePolicy",
            "memory",
            "rollout",
            "sha256",
            "source",
            "timeout",
            "warmInstances",
            "wasi",
        ];
        read.sort_unstable();
        let mut fields = fields;
        fields.sort_unstable();
        assert_eq!(fields, read);
        let keys = |v: &Value| {
            let mut keys: Vec<String> = v["properties"]
                .as_object()
                .expect("properties")
                .keys()
                .cloned()
                .collect();
            keys.sort_unstable();
            keys
        };
        let rollout = &spec["properties"]["rollout"];
        assert_eq!(keys(rollout), ["analysis", "canary", "mode"]);
        let source = &spec["properties"]["source"];
        assert_eq!(keys(source), ["configMap", "oci", "url"]);
        assert_eq!(
            keys(&source["properties"]["oci"]),
            ["plainHttp", "pollInterval", "pullSecret", "reference"]
        );
        assert_eq!(
            keys(&rollout["properties"]["analysis"]),
            [
                "duration",
                "maxDisagreement",
                "maxErrorRate",
                "maxLatencyRatio",
                "minCalls"
            ]
        );
        // Every field the schema lets through parses.
        let example = object(json!({
            "source": {"url": "https://example.com/p.wasm"}, "sha256": SHA, "bind": ["renderer"],
            "timeout": "1s", "memory": 1048576, "failurePolicy": {"renderer": "fail"},
            "wasi": {}, "warmInstances": 1,
            "rollout": {"canary": "10%", "mode": "shadow", "analysis": {
                "duration": "1m", "minCalls": 5, "maxErrorRate": 0.1,
                "maxLatencyRatio": 2.5, "maxDisagreement": 0.2}},
        }));
        assert!(ResourcePlugin::parse(&example).is_ok());
        let example = object(json!({
            "source": {"oci": {"reference": "registry.example/p:1", "plainHttp": true,
                "pollInterval": "30s", "pullSecret": {"namespace": "kstage", "name": "regcred"}}},
        }));
        assert!(ResourcePlugin::parse(&example).is_ok());
    }

    #[test]
    fn mistakes_name_their_field() {
        let cm = json!({"configMap": {"namespace": "n", "name": "m", "key": "k"}});
        for (spec, expected) in [
            (
                json!({"source": cm, "sha256": "12"}),
                "spec.sha256: not a sha256",
            ),
            (
                json!({"source": cm}),
                "spec.sha256: required for a `configMap`",
            ),
            (
                json!({"source": {"oci": {"reference": "registry.example/p:1", "pollInterval": "soon"}}}),
                "spec.source.oci: ",
            ),
            (
                json!({"source": {"oci": {"reference": "registry.example/p:1", "pullSecret": {"namespace": "", "name": "x"}}}}),
                "spec.source.oci.pullSecret",
            ),
            (
                json!({"source": {"oci": {"reference": "registry.example/p:1"}, "url": "https://x/p.wasm"}}),
                "spec.source: give exactly one",
            ),
            (
                json!({"source": {}, "sha256": SHA}),
                "spec.source: give exactly one",
            ),
            (
                json!({"source": {"url": "https://x/p.wasm", "configMap": {"namespace": "n", "name": "m", "key": "k"}}, "sha256": SHA}),
                "spec.source: give exactly one",
            ),
            (
                json!({"source": {"url": "file:///p.wasm"}, "sha256": SHA}),
                "spec.source.url:",
            ),
            (
                json!({"source": cm, "sha256": SHA, "bind": ["metadata"]}),
                "spec.bind: `metadata`",
            ),
            (
                json!({"source": cm, "sha256": SHA, "bind": ["selector", "selector"]}),
                "listed twice",
            ),
            (
                json!({"source": cm, "sha256": SHA, "bind": ["picker"]}),
                "spec.bind[0]: unknown variant",
            ),
            (
                json!({"source": cm, "sha256": SHA, "timeout": "soon"}),
                "spec.timeout:",
            ),
            (
                json!({"source": cm, "sha256": SHA, "memory": "lots"}),
                "spec.memory:",
            ),
            (
                json!({"source": cm, "sha256": SHA, "timout": "1s"}),
                "unknown field `timout`",
            ),
            (
                json!({"source": {"configMap": {"namespace": "n", "name": "", "key": "k"}}, "sha256": SHA}),
                "spec.source.configMap.name: empty",
            ),
        ] {
            let err = ResourcePlugin::parse(&object(spec.clone())).expect_err(&spec.to_string());
            assert!(err.contains(expected), "{spec}: {err}");
        }
        let unnamed = json!({"metadata": {}, "spec": {"source": cm, "sha256": SHA}});
        assert!(
            ResourcePlugin::parse(&unnamed)
                .expect_err("no name")
                .starts_with("metadata.name")
        );
    }
}
