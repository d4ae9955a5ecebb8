//! The audit log: one `audit.k8s.io/v1` `Event` per request, as JSON lines, at level
//! `Metadata` (who, what, on which object, with which answer; no bodies), in the shape
//! kube-apiserver's `--audit-log-path` writes, so the same tools read both.
//!
//! It is what tells which requests a client makes: the tests compare it with the
//! ClusterRole kstage ships, and an operator can record what `kstage run` asks of a
//! server before granting it.
//!
//! Each request gives one event at stage `ResponseComplete`, except watches, which give
//! one at `ResponseStarted` (their answer lasts as long as the watch). A request the
//! fault injector ends without an answer gives none.

use std::fs::File;
use std::io::{self, LineWriter, Write as _};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::request::{Target, Verb};

/// Where the events go.
#[derive(Debug)]
pub struct AuditLog {
    out: Mutex<LineWriter<File>>,
    next_id: AtomicU64,
}

/// What one request was, for its event.
#[derive(Debug, Clone)]
pub struct Request {
    /// When it arrived.
    pub received: DateTime<Utc>,
    /// Its path and query, as sent.
    pub uri: String,
    /// Its `User-Agent`.
    pub user_agent: Option<String>,
    /// Who sent it: `system:anonymous` without a token.
    pub user: &'static str,
    /// The object it is about, for resource requests.
    pub object: Option<(Verb, Target)>,
    /// The HTTP method, for the verb of non-resource requests.
    pub method: http::Method,
}

/// The user a request with the configured bearer token authenticates as.
pub const TOKEN_USER: &str = "kstage:token";
/// The user of a request without credentials.
pub const ANONYMOUS: &str = "system:anonymous";

impl AuditLog {
    /// Append to `path` (created if missing).
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            out: Mutex::new(LineWriter::new(file)),
            next_id: AtomicU64::new(1),
        })
    }

    /// Write the event of `request`, answered with `code`.
    pub fn record(&self, request: &Request, code: u16, now: DateTime<Utc>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let event = event(request, code, now, id);
        let mut line = event.to_string();
        line.push('\n');
        // A full disk must not fail the request it records; it loses the line.
        if let Ok(mut out) = self.out.lock() {
            let _ = out.write_all(line.as_bytes());
        }
    }
}

/// The verb kube-apiserver's authorizer and audit log name a request by: server-side
/// apply is a `patch`.
pub fn audit_verb(verb: Verb) -> &'static str {
    match verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Create => "create",
        Verb::Update => "update",
        Verb::Patch | Verb::Apply => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
    }
}

fn event(request: &Request, code: u16, now: DateTime<Utc>, id: u64) -> Value {
    let time = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
    let (verb, stage) = match &request.object {
        Some((Verb::Watch, _)) => ("watch", "ResponseStarted"),
        Some((verb, _)) => (audit_verb(*verb), "ResponseComplete"),
        None => (non_resource_verb(&request.method), "ResponseComplete"),
    };
    let mut event = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": format!("{:08x}-0000-4000-8000-{:012x}", id >> 48, id & 0xffff_ffff_ffff),
        "stage": stage,
        "requestURI": request.uri,
        "verb": verb,
        "user": {"username": request.user},
        "sourceIPs": ["127.0.0.1"],
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": time(request.received),
        "stageTimestamp": time(now),
    });
    if let Some(agent) = &request.user_agent {
        event["userAgent"] = json!(agent);
    }
    if let Some((_, target)) = &request.object {
        let mut object = json!({
            "resource": target.plural,
            "apiGroup": target.group,
            "apiVersion": target.version,
        });
        for (key, value) in [
            ("namespace", &target.namespace),
            ("name", &target.name),
            ("subresource", &target.subresource),
        ] {
            if let Some(v) = value {
                object[key] = json!(v);
            }
        }
        event["objectRef"] = object;
    }
    event
}

/// A non-resource request's verb: the HTTP method, lower case (`get` for GET).
fn non_resource_verb(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET | http::Method::HEAD => "get",
        http::Method::POST => "post",
        http::Method::PUT => "put",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(subresource: Option<&str>) -> Target {
        Target {
            group: String::new(),
            version: "v1".into(),
            plural: "pods".into(),
            namespace: Some("default".into()),
            name: Some("p".into()),
            subresource: subresource.map(str::to_owned),
        }
    }

    #[test]
    fn events_have_kube_apiservers_shape() {
        let at = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .expect("time")
            .with_timezone(&Utc);
        let request = Request {
            received: at,
            uri: "/api/v1/namespaces/default/pods/p/status".into(),
            user_agent: Some("kstage".into()),
            user: TOKEN_USER,
            object: Some((Verb::Apply, target(Some("status")))),
            method: http::Method::PATCH,
        };
        let e = event(&request, 200, at, 7);
        assert_eq!(e["verb"], "patch", "apply is authorized as patch");
        assert_eq!(e["stage"], "ResponseComplete");
        assert_eq!(e["objectRef"]["subresource"], "status");
        assert_eq!(e["objectRef"]["apiGroup"], "");
        assert_eq!(e["objectRef"]["namespace"], "default");
        assert_eq!(e["responseStatus"]["code"], 200);
        assert_eq!(e["requestReceivedTimestamp"], "2026-01-02T03:04:05.000000Z");
        assert_eq!(e["auditID"], "00000000-0000-4000-8000-000000000007");
        let watch = Request {
            object: Some((Verb::Watch, target(None))),
            ..request.clone()
        };
        let e = event(&watch, 200, at, 8);
        assert_eq!(
            (e["verb"].as_str(), e["stage"].as_str()),
            (Some("watch"), Some("ResponseStarted"))
        );
        assert!(e["objectRef"].get("subresource").is_none());
        let discovery = Request {
            object: None,
            method: http::Method::GET,
            uri: "/apis".into(),
            ..request
        };
        let e = event(&discovery, 200, at, 9);
        assert_eq!(e["verb"], "get");
        assert!(e.get("objectRef").is_none());
    }

    #[test]
    fn lines_are_appended() {
        let path = std::env::temp_dir().join(format!("kstage-audit-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let log = AuditLog::open(&path).expect("open");
        let request = Request {
            received: Utc::now(),
            uri: "/version".into(),
            user_agent: None,
            user: ANONYMOUS,
            object: None,
            method: http::Method::GET,
        };
        log.record(&request, 200, Utc::now());
        log.record(&request, 404, Utc::now());
        let text = std::fs::read_to_string(&path).expect("read");
        let codes: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).expect("json")["responseStatus"]["code"]
                    .as_u64()
                    .expect("code")
            })
            .collect();
        let _ = std::fs::remove_file(&path);
        assert_eq!(codes, [200, 404]);
    }
}
