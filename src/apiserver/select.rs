//! Field selectors of list and watch requests, parsed once per request (label selectors:
//! [`crate::cluster::labels`]).
//!
//! Field selectors take `=`, `==` and `!=` on the fields a real API server supports for
//! the kind (`metadata.name` and `metadata.namespace` for every kind, `spec.nodeName` and
//! `status.phase` for pods, `involvedObject.uid` and the rest for Events ...); any other
//! field is refused, as a real server does.

use serde_json::Value;

use super::request::Query;
use super::resources::Resource;

pub use crate::cluster::labels::{LabelSelector, SelectorError};

/// A parsed field selector for one kind; the empty one matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// (JSON pointer of the field, value, negated).
    requirements: Vec<(String, String, bool)>,
}

impl FieldSelector {
    /// Parse `s` for objects of `kind` (built-in when `builtin`).
    pub fn parse(s: &str, kind: &str, builtin: bool) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, false)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: {part:?}; expected FIELD=VALUE or FIELD!=VALUE"
                )));
            };
            let field = field.trim();
            if !supported_field(field, kind, builtin) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            requirements.push((pointer(field, kind), value.trim().to_owned(), negated));
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value a requirement `field=value` pins, if any (to narrow a list by name or
    /// namespace before looking at objects).
    pub fn pinned(&self, field: &str) -> Option<&str> {
        let pointer = pointer(field, "");
        self.requirements
            .iter()
            .find(|(p, _, negated)| *p == pointer && !negated)
            .map(|(_, v, _)| v.as_str())
    }

    /// Whether `object` satisfies every requirement. A missing field reads as `""`;
    /// booleans and numbers read as their JSON text.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|(pointer, wanted, negated)| {
            let equal = match object.pointer(pointer) {
                None | Some(Value::Null) => {
                    wanted.is_empty() || (wanted == "false" && pointer == "/spec/unschedulable")
                }
                Some(Value::String(s)) => s == wanted,
                Some(other) => serde_json::to_string(other).is_ok_and(|text| text == *wanted),
            };
            equal != *negated
        })
    }
}

fn supported_field(field: &str, kind: &str, builtin: bool) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    if !builtin {
        return false;
    }
    match kind {
        "Pod" => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        "Node" => field == "spec.unschedulable",
        "Namespace" => field == "status.phase",
        "Secret" => field == "type",
        // A core/v1 Event's fields as kube-apiserver selects them (what `kubectl
        // describe` finds an object's Events by), and events.k8s.io/v1's names of them.
        "Event" => {
            field.starts_with("regarding.")
                || matches!(
                    field,
                    "involvedObject.kind"
                        | "involvedObject.namespace"
                        | "involvedObject.name"
                        | "involvedObject.uid"
                        | "involvedObject.apiVersion"
                        | "involvedObject.resourceVersion"
                        | "involvedObject.fieldPath"
                        | "reason"
                        | "type"
                        | "source"
                        | "reportingComponent"
                        | "reportingController"
                )
        }
        _ => false,
    }
}

/// The JSON pointer of the value a selectable `field` of a `kind` object reads: its
/// path, but for an Event's `source`, which is the source's component.
fn pointer(field: &str, kind: &str) -> String {
    if kind == "Event" && field == "source" {
        return "/source/component".to_owned();
    }
    format!("/{}", field.replace('.', "/"))
}

/// The selectors of a list or watch, parsed.
pub struct Filter {
    /// Labels.
    pub labels: LabelSelector,
    /// Fields.
    pub fields: FieldSelector,
}

impl Filter {
    /// Parse the selectors of `query` for objects of `resource` (a refused one is a 400).
    pub fn parse(resource: &Resource, query: &Query) -> Result<Self, SelectorError> {
        let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
        let fields = FieldSelector::parse(
            query.get("fieldSelector").unwrap_or(""),
            &resource.kind,
            resource.builtin,
        )?;
        Ok(Self { labels, fields })
    }

    /// Whether `object` passes both selectors.
    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// The namespace to read: the path's, else one a field selector pins.
    pub fn namespace<'a>(&'a self, path: Option<&'a str>) -> Option<&'a str> {
        path.or_else(|| self.fields.pinned("metadata.namespace"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn field_selectors_are_limited_to_supported_fields() {
        let p = pod(json!({}));
        for (selector, expected) in [
            ("spec.nodeName=n1", true),
            ("spec.nodeName==n2", false),
            ("spec.nodeName!=n2", true),
            ("status.phase=Running,metadata.namespace=ns", true),
            ("metadata.name=q", false),
            ("status.podIP=", true),
        ] {
            let s = FieldSelector::parse(selector, "Pod", true).expect(selector);
            assert_eq!(s.matches(&p), expected, "{selector}");
        }
        let e = FieldSelector::parse("spec.hostname=x", "Pod", true).expect_err("unsupported");
        assert!(
            e.0.contains("field label not supported: spec.hostname"),
            "{e}"
        );
        assert!(FieldSelector::parse("spec.nodeName=x", "Stage", false).is_err());
        let s = FieldSelector::parse("metadata.name=p,spec.nodeName!=x", "Pod", true).expect("ok");
        assert_eq!(s.pinned("metadata.name"), Some("p"));
        assert_eq!(s.pinned("spec.nodeName"), None);
        let node = json!({"metadata": {"name": "n"}});
        let s = FieldSelector::parse("spec.unschedulable=false", "Node", true).expect("ok");
        assert!(s.matches(&node));
    }

    #[test]
    fn events_are_selected_as_kubectl_describe_selects_them() {
        let event = json!({
            "metadata": {"name": "web.1", "namespace": "team"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "team",
                               "name": "web", "uid": "u-1", "resourceVersion": "7"},
            "reason": "Started", "type": "Normal", "source": {"component": "kstage", "host": "n1"},
        });
        // What kubectl describe sends (name, namespace, kind, uid), and the other fields.
        for (selector, expected) in [
            (
                "involvedObject.name=web,involvedObject.namespace=team,involvedObject.kind=Pod,involvedObject.uid=u-1",
                true,
            ),
            (
                "involvedObject.name=web,involvedObject.namespace=team,involvedObject.uid=u-2",
                false,
            ),
            (
                "involvedObject.apiVersion=v1,involvedObject.resourceVersion=7",
                true,
            ),
            ("involvedObject.fieldPath=", true),
            ("source=kstage,reason=Started,type=Normal", true),
            ("source=kubelet", false),
        ] {
            let s = FieldSelector::parse(selector, "Event", true).expect(selector);
            assert_eq!(s.matches(&event), expected, "{selector}");
        }
        for unsupported in ["involvedObject.labels=x", "message=hi", "source.host=n1"] {
            let e = FieldSelector::parse(unsupported, "Event", true).expect_err(unsupported);
            assert!(e.0.contains("field label not supported"), "{e}");
        }
    }
}
