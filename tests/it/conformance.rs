//! The embedded API server against a real kube-apiserver's recorded answers: every request
//! of `../shared/kube-apiserver/transcripts/` (v1.36.2; `$KSTAGE_TRANSCRIPTS`), in order,
//! is sent to one embedded server and its answer compared with the recorded one by shape:
//! the status code, the content type, `kind`/`apiVersion`, a Status's `status`, `reason`,
//! `code`, `message` and `details`, object and list names, and which fields are present or
//! absent (values the server picks, such as uids, versions and times, are not compared).
//!
//! Values a server chooses (resourceVersion, uid, continue token) that a later request
//! carries are mapped from the real server's to the embedded one's as the replay learns
//! them. The setup the recording did without a transcript (nodes `rec-node-1` and `-2`,
//! created like `rec-node-0`) is done the same way here.
//!
//! Where kstage deliberately answers otherwise, [`DIFFERENCES`] says so by name, with the
//! reason; each listed difference must still occur (a fixed one is removed from the list),
//! and the README's comparison table lists the same.

use std::collections::BTreeMap;
use std::path::PathBuf;

use http_body_util::BodyExt;
use serde_json::Value;

use kstage::apiserver::{ApiServer, Config};

/// Where kstage deliberately answers otherwise: (transcript, pattern of the difference,
/// why). `*` in the pattern stands for any text; transcript `*` for every transcript.
const DIFFERENCES: &[(&str, &str, &str)] = &[
    (
        "*",
        "*.metadata.managedFields: missing*",
        "apply is last-applier-wins: no managed fields are kept",
    ),
    (
        "*",
        "*.spec.*: missing*",
        "no defaulting of built-in kinds: kube-apiserver fills pod spec defaults, the not-ready tolerations and taint",
    ),
    (
        "*",
        "*.spec: missing (real: {\"taints\"*",
        "no defaulting of built-in kinds: a new node's not-ready taint",
    ),
    (
        "*",
        "*.status.qosClass: missing*",
        "no defaulting of built-in kinds: a pod's QoS class",
    ),
    (
        "*",
        "*.status: missing (real: {\"daemonEndpoints\"*",
        "no defaulting of built-in kinds: a node's empty status skeleton",
    ),
    (
        "*",
        "*.status.conditions[*].last*Time: missing (real: null)",
        "objects are stored as sent: fields Go's typed encoding writes as null are left out",
    ),
    (
        "18-event-create",
        "body.*Time*: missing (real: null)",
        "objects are stored as sent: an Event's null times are left out",
    ),
    (
        "18-event-create",
        "body.reporting*: missing (real: \"\")",
        "objects are stored as sent: an Event's empty reporting fields are left out",
    ),
    (
        "03-discovery-api-v1",
        "body.resources*",
        "serves 12 of kube-apiserver's 39 core resources, without storageVersionHash",
    ),
    (
        "07-list-nodes-table",
        "body.*: 6 elements, real: 10",
        "kubectl get nodes: the -o wide columns (IPs, OS image, kernel, runtime) are left out",
    ),
];

/// Whether `text` matches `pattern`, where `*` stands for any text.
fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether a difference `line` (`TRANSCRIPT: DIFFERENCE`) is the listed one.
fn listed(line: &str, (transcript, pattern, _): &(&str, &str, &str)) -> bool {
    let Some((name, difference)) = line.split_once(": ") else {
        return false;
    };
    (*transcript == "*" || *transcript == name) && matches(pattern, difference)
}

fn transcripts() -> Vec<(String, Value)> {
    let dir = PathBuf::from(env!("KSTAGE_TRANSCRIPTS"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the recorded answers of a real server; set KSTAGE_TRANSCRIPTS)",
                dir.display()
            )
        })
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text = std::fs::read_to_string(&path).expect("transcript readable");
            let exchange: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name, exchange)
        })
        .collect()
}

/// The real server's choices mapped to the embedded server's, learnt from answers.
#[derive(Default)]
struct Mapping(BTreeMap<String, String>);

impl Mapping {
    /// Learn from a pair of answers to the same request.
    fn learn(&mut self, real: &Value, ours: &Value) {
        match (real, ours) {
            (Value::Object(r), Value::Object(o)) => {
                for (key, rv) in r {
                    let Some(ov) = o.get(key) else { continue };
                    match (key.as_str(), rv, ov) {
                        (
                            "resourceVersion" | "uid" | "continue",
                            Value::String(r),
                            Value::String(o),
                        ) => {
                            self.0.insert(r.clone(), o.clone());
                        }
                        _ => self.learn(rv, ov),
                    }
                }
            }
            (Value::Array(r), Value::Array(o)) => {
                for (rv, ov) in r.iter().zip(o) {
                    self.learn(rv, ov);
                }
            }
            _ => {}
        }
    }

    fn string(&self, s: &str) -> String {
        self.0.get(s).cloned().unwrap_or_else(|| s.to_owned())
    }

    fn value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.string(s)),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.value(v)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, v)| (k.clone(), self.value(v))).collect())
            }
            other => other.clone(),
        }
    }

    /// The path with each query value mapped (a continue token, a resourceVersion).
    fn path(&self, path: &str) -> String {
        let Some((base, query)) = path.split_once('?') else {
            return path.to_owned();
        };
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) => format!("{k}={}", self.string(v)),
                None => pair.to_owned(),
            })
            .collect();
        format!("{base}?{}", query.join("&"))
    }
}

/// Send one recorded request; the status, content type and body (JSON, or for a watch
/// the list of its event lines).
async fn send(client: &kube::Client, request: &Value, mapping: &Mapping) -> (u16, String, Value) {
    let text = |k: &str| request[k].as_str().map(str::to_owned);
    let method = text("method").expect("method");
    let path = mapping.path(&text("path").expect("path"));
    let mut builder = http::Request::builder().method(method.as_str()).uri(path);
    if let Some(accept) = text("accept") {
        builder = builder.header(http::header::ACCEPT, accept);
    }
    if let Some(content_type) = text("contentType") {
        builder = builder.header(http::header::CONTENT_TYPE, content_type);
    }
    let body = match &request["body"] {
        Value::Null => Vec::new(),
        // A YAML apply body is recorded as the text sent.
        Value::String(s) => s.clone().into_bytes(),
        other => serde_json::to_vec(&mapping.value(other)).expect("body"),
    };
    let response = client
        .send(builder.body(body.into()).expect("request"))
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body read")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let is_watch = path_has(&text_or(request, "path"), "watch=true") && status == 200;
    let body = if is_watch {
        Value::Array(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).unwrap_or(Value::String(l.to_owned())))
                .collect(),
        )
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text.into_owned()))
    };
    (status, content_type, body)
}

fn text_or(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or("").to_owned()
}

fn path_has(path: &str, needle: &str) -> bool {
    path.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p == needle))
}

/// Keys whose values are compared exactly (after mapping); others by JSON type.
const EXACT: &[&str] = &[
    "kind",
    "apiVersion",
    "status",
    "reason",
    "code",
    "message",
    "name",
    "namespace",
    "field",
    "group",
    "type",
    "finalizers",
    "phase",
];

/// The differences of `ours` from `real` at `path`, one line each.
fn compare(path: &str, key: &str, real: &Value, ours: &Value, out: &mut Vec<String>) {
    match (real, ours) {
        (Value::Object(r), Value::Object(o)) => {
            for (k, rv) in r {
                let p = format!("{path}.{k}");
                match o.get(k) {
                    Some(ov) => compare(&p, k, rv, ov, out),
                    None => out.push(format!("{p}: missing (real: {})", brief(rv))),
                }
            }
            for k in o.keys().filter(|k| !r.contains_key(*k)) {
                out.push(format!("{path}.{k}: present, a real server has none"));
            }
        }
        (Value::Array(r), Value::Array(o)) => {
            if r.len() != o.len() {
                out.push(format!("{path}: {} elements, real: {}", o.len(), r.len()));
            }
            for (i, (rv, ov)) in r.iter().zip(o).enumerate() {
                compare(&format!("{path}[{i}]"), key, rv, ov, out);
            }
        }
        // A scalar of an exact key must be equal; any other value of the same type.
        (r, o)
            if (EXACT.contains(&key) && !r.is_object() && !r.is_array() && r != o)
                || std::mem::discriminant(r) != std::mem::discriminant(o) =>
        {
            out.push(format!("{path}: {} (real: {})", brief(o), brief(r)));
        }
        _ => {}
    }
}

fn brief(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(120) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s,
    }
}

/// The media type of a Content-Type header, without parameters.
fn media_type(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

#[test]
fn the_difference_patterns_match_as_documented() {
    assert!(matches("a*c", "abbbc"));
    assert!(matches("*.x: missing*", "body.a.x: missing (real: 1)"));
    assert!(!matches("*.x: missing*", "body.a.x: present"));
    assert!(!matches("a*c", "abcd"));
    assert!(matches(
        "body.*: 6 elements, real: 10",
        "body.rows[0].cells: 6 elements, real: 10"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_server_answers_every_recorded_request_as_kube_apiserver() {
    let h = crate::apiserver::harness(Config::default()).await;
    let _server: &ApiServer = &h.server;
    let mut mapping = Mapping::default();
    let mut found: Vec<String> = Vec::new();
    let exchanges = transcripts();
    assert!(exchanges.len() >= 28, "{} transcripts", exchanges.len());
    for (name, exchange) in &exchanges {
        let request = &exchange["request"];
        let real = &exchange["response"];
        let (status, content_type, body) = send(&h.client, request, &mapping).await;
        let mut diffs = Vec::new();
        let real_status = real["status"].as_u64().unwrap_or(0);
        if u64::from(status) != real_status {
            diffs.push(format!("status: {status} (real: {real_status})"));
        }
        let real_type = real["contentType"].as_str().unwrap_or("");
        if media_type(&content_type) != media_type(real_type) {
            diffs.push(format!("content type: {content_type} (real: {real_type})"));
        }
        compare("body", "", &real["body"], &body, &mut diffs);
        mapping.learn(&real["body"], &body);
        found.extend(diffs.into_iter().map(|d| format!("{name}: {d}")));
        // The recording's setup without a transcript: two more nodes like rec-node-0.
        if name.starts_with("04-") {
            for n in ["rec-node-1", "rec-node-2"] {
                let mut create = request.clone();
                create["body"]["metadata"]["name"] = Value::String(n.into());
                let (status, _, _) = send(&h.client, &create, &mapping).await;
                assert_eq!(status, 201, "creating {n}");
            }
        }
    }
    let unexpected: Vec<&String> = found
        .iter()
        .filter(|d| !DIFFERENCES.iter().any(|k| listed(d, k)))
        .collect();
    let stale: Vec<String> = DIFFERENCES
        .iter()
        .filter(|k| !found.iter().any(|d| listed(d, k)))
        .map(|(t, p, why)| format!("{t}: {p} ({why})"))
        .collect();
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "the embedded server answers otherwise than kube-apiserver:\n{}\n\nlisted as deliberate but no longer different:\n{}",
        unexpected
            .iter()
            .map(|d| format!("  {d}"))
            .collect::<Vec<_>>()
            .join("\n"),
        stale.join("\n")
    );
}

/// The keys of `v`, walked into objects and the first element of arrays.
fn keys(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let p = format!("{path}.{k}");
                out.push(p.clone());
                keys(child, &p, out);
            }
        }
        Value::Array(items) => {
            if let Some(first) = items.first() {
                keys(first, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// Metadata kube-apiserver refuses (a label value, an annotation key, a finalizer) is
/// refused with the 422 it answered an invalid name with (`11-create-bad-name-422`): the
/// same Status fields, a cause per problem, and the message built from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_metadata_is_answered_as_kube_apiserver_answers_an_invalid_field() {
    let h = crate::apiserver::harness(Config::default()).await;
    let recorded = transcripts()
        .into_iter()
        .find(|(name, _)| name.starts_with("11-"))
        .map(|(_, exchange)| exchange)
        .expect("transcript 11");
    let mut real_keys = Vec::new();
    keys(&recorded["response"]["body"], "", &mut real_keys);
    for (metadata, field, value) in [
        (
            serde_json::json!({"labels": {"ttl": "-99999h"}}),
            "metadata.labels",
            "-99999h",
        ),
        (
            serde_json::json!({"annotations": {"a b": "x"}}),
            "metadata.annotations",
            "a b",
        ),
        (
            serde_json::json!({"finalizers": ["a/b/c"]}),
            "metadata.finalizers",
            "a/b/c",
        ),
    ] {
        let mut request = recorded["request"].clone();
        request["body"]["metadata"]["name"] = Value::String("web".into());
        for (k, v) in metadata.as_object().expect("metadata") {
            request["body"]["metadata"][k] = v.clone();
        }
        let (status, _, body) = send(&h.client, &request, &Mapping::default()).await;
        assert_eq!(status, 422, "{body}");
        let mut ours = Vec::new();
        keys(&body, "", &mut ours);
        assert_eq!(ours, real_keys, "{body}");
        assert_eq!(body["reason"], "Invalid");
        assert_eq!(body["details"]["kind"], "Pod");
        assert_eq!(body["details"]["name"], "web");
        let cause = &body["details"]["causes"][0];
        assert_eq!(cause["field"], field, "{body}");
        assert_eq!(cause["reason"], "FieldValueInvalid", "{body}");
        let message = cause["message"].as_str().expect("message");
        assert!(
            message.starts_with(&format!("Invalid value: {value:?}: ")),
            "{message}"
        );
        assert_eq!(
            body["message"],
            format!("Pod \"web\" is invalid: {field}: {message}")
        );
    }
}
