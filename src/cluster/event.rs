//! The core/v1 Event kstage records about an object, shaped as client-go's event recorder
//! (a kubelet's, KWOK's) writes it: `involvedObject` names the object with its `uid` and
//! the `resourceVersion` it was at (so `kubectl describe`, which selects Events by
//! `involvedObject.uid`, shows it, and the Events of a deleted object are not taken for a
//! successor's of the same name), `source` and `reportingComponent`/`reportingInstance`
//! say who wrote it, `firstTimestamp`/`lastTimestamp`/`count` when and how often.
//!
//! `source.component` and `reportingComponent` are `kstage`. `source.host` and
//! `reportingInstance` are the node where a kubelet would put its own name: a pod's
//! `spec.nodeName`, a node's name; other objects have none (an empty
//! `reportingInstance`, as client-go sends). No `fieldPath`: a Stage's event is about the
//! object, not one of its containers (KWOK sets none either).

use serde_json::{Map, Value, json};

use super::{EventRequest, ObjectKey, meta_str};

/// The component kstage's Events name as their source.
pub const COMPONENT: &str = "kstage";

/// The object an Event is about, beyond its key: as the step that sent it saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Involved {
    /// `metadata.uid`; empty when unknown.
    pub uid: String,
    /// `metadata.resourceVersion`; empty when unknown.
    pub resource_version: String,
    /// The node a kubelet reporting on the object runs on, if any.
    pub host: Option<String>,
}

impl Involved {
    /// What `object` (of `key`) tells about itself.
    pub fn of(key: &ObjectKey, object: &Value) -> Self {
        let field = |name: &str| meta_str(object, name).unwrap_or("").to_owned();
        let host = match (key.api_version.as_str(), key.kind.as_str()) {
            ("v1", "Pod") => object
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            ("v1", "Node") => Some(key.name.clone()),
            _ => None,
        };
        Self {
            uid: field("uid"),
            resource_version: field("resourceVersion"),
            host,
        }
    }
}

/// The namespace an Event about `key` is written to: the object's, `default` for a
/// cluster-scoped object (as client-go's recorder does).
pub fn namespace(key: &ObjectKey) -> &str {
    if key.namespace.is_empty() {
        "default"
    } else {
        &key.namespace
    }
}

/// The Event to create for `event` about `key`, recorded at `now` (RFC 3339). A named
/// event keeps its name; an unnamed one is generated from the object's name.
pub fn body(key: &ObjectKey, event: &EventRequest, now: &str) -> Value {
    let namespace = namespace(key);
    let metadata = match &event.name {
        Some(name) => json!({"name": name, "namespace": namespace}),
        None => json!({"generateName": format!("{}.", key.name), "namespace": namespace}),
    };
    let about = &event.involved;
    let mut involved = Map::new();
    involved.insert("apiVersion".into(), json!(key.api_version));
    involved.insert("kind".into(), json!(key.kind));
    if !key.namespace.is_empty() {
        involved.insert("namespace".into(), json!(key.namespace));
    }
    involved.insert("name".into(), json!(key.name));
    for (field, value) in [
        ("uid", &about.uid),
        ("resourceVersion", &about.resource_version),
    ] {
        if !value.is_empty() {
            involved.insert(field.into(), json!(value));
        }
    }
    let mut source = json!({"component": COMPONENT});
    if let Some(host) = &about.host {
        source["host"] = json!(host);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": involved,
        "type": event.event_type,
        "reason": event.reason,
        "message": event.message,
        "source": source,
        "reportingComponent": COMPONENT,
        "reportingInstance": about.host.as_deref().unwrap_or(""),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": null,
        "count": 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn request(involved: Involved, name: Option<&str>) -> EventRequest {
        EventRequest {
            event_type: "Normal".into(),
            reason: "Started".into(),
            message: "hi".into(),
            name: name.map(str::to_owned),
            involved,
        }
    }

    #[test]
    fn a_pods_event_names_its_uid_version_and_node() {
        let k = key("Pod", "team", "web-0");
        let pod = json!({"metadata": {"name": "web-0", "uid": "u-1", "resourceVersion": "42"},
                         "spec": {"nodeName": "node-3"}});
        let involved = Involved::of(&k, &pod);
        assert_eq!(
            involved,
            Involved {
                uid: "u-1".into(),
                resource_version: "42".into(),
                host: Some("node-3".into()),
            }
        );
        let body = body(
            &k,
            &request(involved, Some("web-0.1")),
            "2026-01-01T00:00:00Z",
        );
        assert_eq!(
            body["involvedObject"],
            json!({"apiVersion": "v1", "kind": "Pod", "namespace": "team", "name": "web-0",
                   "uid": "u-1", "resourceVersion": "42"})
        );
        assert_eq!(
            body["source"],
            json!({"component": "kstage", "host": "node-3"})
        );
        assert_eq!(body["reportingInstance"], "node-3");
        assert_eq!(
            body["metadata"],
            json!({"name": "web-0.1", "namespace": "team"})
        );
        assert_eq!(body["count"], 1);
        assert_eq!(body["firstTimestamp"], body["lastTimestamp"]);
    }

    /// The paths of the fields of `v` (objects walked into), with the JSON type of each.
    fn shape(v: &Value, path: &str, out: &mut std::collections::BTreeMap<String, &'static str>) {
        if let Value::Object(map) = v {
            for (k, child) in map {
                let p = format!("{path}.{k}");
                let kind = match child {
                    Value::Null => "null",
                    Value::Bool(_) => "bool",
                    Value::Number(_) => "number",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                };
                out.insert(p.clone(), kind);
                shape(child, &p, out);
            }
        }
    }

    #[test]
    fn the_event_sent_has_the_shape_of_the_one_kube_apiserver_answered() {
        let path = std::path::Path::new(env!("KSTAGE_TRANSCRIPTS")).join("18-event-create.json");
        let text = std::fs::read_to_string(&path).expect("transcript 18");
        let exchange: Value = serde_json::from_str(&text).expect("JSON");
        let mut real = std::collections::BTreeMap::new();
        shape(&exchange["response"]["body"], "", &mut real);
        // What the server adds to the metadata is the server's, not the sender's.
        real.retain(|p, _| !p.starts_with(".metadata.") || p == ".metadata.name");
        let k = key("Pod", "default", "rec-pod");
        let pod = json!({"metadata": {"uid": "u", "resourceVersion": "213"},
                         "spec": {"nodeName": "rec-node-0"}});
        let sent = body(
            &k,
            &request(Involved::of(&k, &pod), Some("rec-pod.1")),
            "2026-12-03T10:18:17Z",
        );
        let mut ours = std::collections::BTreeMap::new();
        shape(&sent, "", &mut ours);
        ours.retain(|p, _| !p.starts_with(".metadata.") || p == ".metadata.name");
        // Every recorded field is sent, of the same type where the server kept a value
        // (its null times are times here, as a kubelet sends them).
        for (field, kind) in &real {
            let sent_kind = ours.get(field).unwrap_or(&"missing");
            assert!(
                sent_kind == kind || (*kind == "null" && field.ends_with("Timestamp")),
                "{field}: sent {sent_kind}, recorded {kind}"
            );
        }
        // And beyond them only what a kubelet's Events carry too.
        let extra: Vec<&String> = ours.keys().filter(|f| !real.contains_key(*f)).collect();
        assert_eq!(
            extra,
            [".count", ".involvedObject.resourceVersion", ".source.host"]
        );
    }

    #[test]
    fn cluster_scoped_and_unbound_objects_have_no_namespace_or_no_host() {
        let node = key("Node", "", "node-1");
        let involved = Involved::of(&node, &json!({"metadata": {"uid": "n"}}));
        assert_eq!(involved.host.as_deref(), Some("node-1"));
        let body = body(&node, &request(involved, None), "t");
        assert_eq!(body["metadata"]["namespace"], "default");
        assert_eq!(body["metadata"]["generateName"], "node-1.");
        assert!(body["involvedObject"].get("namespace").is_none());
        // A pod not bound yet has no kubelet: no host, an empty reporting instance.
        let pending = key("Pod", "team", "p");
        let involved = Involved::of(&pending, &json!({"metadata": {}, "spec": {}}));
        assert_eq!(involved, Involved::default());
        let body = super::body(&pending, &request(involved, None), "t");
        assert_eq!(body["source"], json!({"component": "kstage"}));
        assert_eq!(body["reportingInstance"], "");
        assert!(body["involvedObject"].get("uid").is_none());
    }
}
