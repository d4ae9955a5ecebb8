//! Server-side table output (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`),
//! which `kubectl get` asks for: columns per kind as kubectl shows them, and for custom
//! resources the CRD's `additionalPrinterColumns`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::resources::Resource;

/// Whether the `Accept` header asks for a Table.
pub fn wants_table(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(accepts_table)
}

/// Whether an `Accept` value asks for a Table first.
fn accepts_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

struct Column {
    name: &'static str,
    type_: &'static str,
    priority: i64,
}

const fn col(name: &'static str, type_: &'static str, priority: i64) -> Column {
    Column {
        name,
        type_,
        priority,
    }
}

/// A Table of `objects` of `resource`.
pub fn table(resource: &Resource, objects: &[&Value], rv: &str, now: DateTime<Utc>) -> Value {
    let (columns, custom) = columns(resource);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.type_, "format": if c.name == "Name" { "name" } else { "" }, "description": "", "priority": c.priority}))
        .chain(custom.iter().map(|c| {
            json!({"name": c.name, "type": c.type_, "format": "", "description": "", "priority": c.priority})
        }))
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = cells(resource, o, now);
            cells.truncate(columns.len());
            for c in &custom {
                cells.push(json_path(o, &c.json_path, &c.type_, now));
            }
            json!({"cells": cells, "object": partial_metadata(o)})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn columns(resource: &Resource) -> (Vec<Column>, Vec<super::resources::PrinterColumn>) {
    let name = col("Name", "string", 0);
    let age = col("Age", "string", 0);
    let builtin = match (resource.builtin, resource.kind.as_str()) {
        (true, "Pod") => vec![
            name,
            col("Ready", "string", 0),
            col("Status", "string", 0),
            col("Restarts", "string", 0),
            age,
            col("IP", "string", 1),
            col("Node", "string", 1),
        ],
        (true, "Node") => vec![
            name,
            col("Status", "string", 0),
            col("Roles", "string", 0),
            age,
            col("Version", "string", 0),
            col("Internal-IP", "string", 1),
        ],
        (true, "Namespace") => vec![name, col("Status", "string", 0), age],
        (true, "Event") => vec![
            col("Last Seen", "string", 0),
            col("Type", "string", 0),
            col("Reason", "string", 0),
            col("Object", "string", 0),
            col("Message", "string", 0),
        ],
        (true, "Lease") => vec![name, col("Holder", "string", 0), age],
        (true, "ConfigMap") => vec![name, col("Data", "integer", 0), age],
        (true, "CustomResourceDefinition") => vec![name, col("Created At", "date", 0)],
        _ => vec![name, age],
    };
    // A CRD's own columns replace the default Age (kube-apiserver shows Name, then
    // the additionalPrinterColumns; Age only when there are none).
    if !resource.builtin && !resource.columns.is_empty() {
        return (
            builtin.into_iter().take(1).collect(),
            resource.columns.clone(),
        );
    }
    (builtin, Vec::new())
}

fn text<'a>(o: &'a Value, pointer: &str) -> &'a str {
    o.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn cells(resource: &Resource, o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let name = json!(text(o, "/metadata/name"));
    let created = json!(age(text(o, "/metadata/creationTimestamp"), now));
    let or_none = |s: &str| json!(if s.is_empty() { "<none>" } else { s });
    if !resource.builtin {
        return vec![name, created];
    }
    match resource.kind.as_str() {
        "Pod" => {
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let statuses = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ready = statuses.iter().filter(|s| s["ready"] == true).count();
            let restarts: i64 = statuses
                .iter()
                .filter_map(|s| s["restartCount"].as_i64())
                .sum();
            let status = if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else {
                match text(o, "/status/reason") {
                    "" => text(o, "/status/phase"),
                    reason => reason,
                }
            };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(restarts.to_string()),
                created,
                or_none(text(o, "/status/podIP")),
                or_none(text(o, "/spec/nodeName")),
            ]
        }
        "Node" => {
            let ready = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["status"] == "True");
            let mut status = match ready {
                Some(true) => "Ready".to_owned(),
                Some(false) => "NotReady".to_owned(),
                None => "Unknown".to_owned(),
            };
            if o.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<&str> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            let internal_ip = o
                .pointer("/status/addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
                .and_then(|a| a["address"].as_str())
                .unwrap_or("");
            vec![
                name,
                json!(status),
                or_none(&roles.join(",")),
                created,
                json!(text(o, "/status/nodeInfo/kubeletVersion")),
                or_none(internal_ip),
            ]
        }
        "Namespace" => vec![name, json!(text(o, "/status/phase")), created],
        "Event" => {
            let last = [
                "/lastTimestamp",
                "/eventTime",
                "/deprecatedLastTimestamp",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .map(|p| text(o, p))
            .find(|t| !t.is_empty())
            .unwrap_or("");
            let about = if o.get("involvedObject").is_some() {
                "/involvedObject"
            } else {
                "/regarding"
            };
            let object = format!(
                "{}/{}",
                text(o, &format!("{about}/kind")).to_ascii_lowercase(),
                text(o, &format!("{about}/name"))
            );
            let message = match text(o, "/message") {
                "" => text(o, "/note"),
                m => m,
            };
            vec![
                json!(age(last, now)),
                json!(text(o, "/type")),
                json!(text(o, "/reason")),
                json!(object),
                json!(message),
            ]
        }
        "Lease" => vec![name, or_none(text(o, "/spec/holderIdentity")), created],
        "ConfigMap" => {
            let n = o
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |d| d.len())
                + o.get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |d| d.len());
            vec![name, json!(n), created]
        }
        "CustomResourceDefinition" => {
            vec![name, json!(text(o, "/metadata/creationTimestamp"))]
        }
        _ => vec![name, created],
    }
}

/// The value of a simple JSONPath (`.a.b`, `.a[0].b`) in `o`, as a cell.
fn json_path(o: &Value, path: &str, type_: &str, now: DateTime<Utc>) -> Value {
    match select(o, path) {
        None => Value::Null,
        Some(Value::String(s)) if type_ == "date" => json!(age(s, now)),
        Some(v) => v.clone(),
    }
}

/// The value at a printer column's JSONPath, in the subset CRDs use: fields (`.a.b`),
/// indices (`[0]`) and equality filters (`[?(@.type=="Ready")]`, first match).
fn select<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = o;
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let close = if r.starts_with("?(") {
                r.find(")]").map(|i| i + 1)?
            } else {
                r.find(']')?
            };
            let inside = &r[..close];
            rest = &r[close + 1..];
            at = match inside
                .strip_prefix("?(@.")
                .and_then(|f| f.strip_suffix(')'))
            {
                Some(filter) => {
                    let (field, want) = filter.split_once("==")?;
                    let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                    at.as_array()?
                        .iter()
                        .find(|item| item.get(field.trim()).and_then(Value::as_str) == Some(want))?
                }
                None => at.get(inside.parse::<usize>().ok()?)?,
            };
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            rest = &r[end..];
            if !field.is_empty() {
                at = at.get(field)?;
            }
        }
    }
    Some(at)
}

/// Kubernetes' short human duration since an RFC 3339 time (`5s`, `3m`, `2h`, `4d`).
pub fn age(since: &str, now: DateTime<Utc>) -> String {
    let Ok(t) = DateTime::parse_from_rfc3339(since) else {
        return "<unknown>".into();
    };
    let secs = (now - t.with_timezone(&Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 8 * 86400 => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
        s if s < 2 * 365 * 86400 => format!("{}d", s / 86400),
        s => format!("{}y", s / (365 * 86400)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::Registry;

    #[test]
    fn printer_column_paths_select_fields_indices_and_filters() {
        let o = json!({"spec": {"a": [{"b": 1}, {"b": 2}]}, "status": {"conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "Compiled", "status": "True", "reason": "Compiled"},
        ]}});
        assert_eq!(select(&o, ".spec.a[1].b"), Some(&json!(2)));
        assert_eq!(
            select(&o, r#".status.conditions[?(@.type=="Compiled")].status"#),
            Some(&json!("True"))
        );
        assert_eq!(
            select(&o, ".status.conditions[?(@.type=='Ready')].status"),
            Some(&json!("False"))
        );
        assert_eq!(
            select(&o, r#".status.conditions[?(@.type=="Gone")].status"#),
            None
        );
        assert_eq!(select(&o, ".spec.a[9]"), None);
        assert_eq!(select(&o, ".spec.missing"), None);
    }

    #[test]
    fn pods_and_nodes_have_kubectl_columns() {
        let now = DateTime::parse_from_rfc3339("2025-01-01T00:02:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let registry = Registry::new();
        let pods = registry.get("", "v1", "pods").expect("pods");
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}});
        let t = table(&pods, &[&pod], "7", now);
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["p", "1/2", "Running", "3", "2m0s", "<none>", "n1"])
        );
        assert_eq!(t["columnDefinitions"][0]["name"], "Name");
        assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "p");
        let nodes = registry.get("", "v1", "nodes").expect("nodes");
        let node = json!({"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/agent": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "fake"}}});
        let t = table(&nodes, &[&node], "7", now);
        assert_eq!(t["rows"][0]["cells"][1], "Ready");
        assert_eq!(t["rows"][0]["cells"][2], "agent");
        assert!(accepts_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!accepts_table("application/json"));
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = DateTime::parse_from_rfc3339("2025-01-10T00:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(age("2025-01-09T23:59:30Z", now), "30s");
        assert_eq!(age("2025-01-09T23:00:00Z", now), "60m");
        assert_eq!(age("2025-01-09T00:00:00Z", now), "24h");
        assert_eq!(age("2025-01-01T00:00:00Z", now), "9d");
        assert_eq!(age("garbage", now), "<unknown>");
    }
}
