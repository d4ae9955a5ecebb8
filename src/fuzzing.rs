//! The fuzz targets' bodies: each takes arbitrary bytes, feeds them to one of kstage's
//! input boundaries and checks what must hold whatever the input (no panic, bounded
//! work, errors reported as errors). `fuzz/` runs them under libFuzzer (`cargo fuzz`);
//! `tests/fuzz_corpus.rs` replays the corpus kept in `fuzz/corpus/` through the same
//! functions, so every input that once found a bug stays a test.
//!
//! | target | boundary |
//! |---|---|
//! | [`yaml`] | YAML documents to JSON (`kstage::yaml`) |
//! | [`stage`] | Stage documents parsed and compiled, then matched against sample objects |
//! | [`selector`] | one jq key or CEL condition evaluated on an object, under the budgets |
//! | [`template`] | a Go template compiled and rendered on an object |
//! | [`patch`] | JSON, merge and strategic merge patches applied to an object |
//! | [`apiserver`] | a sequence of HTTP requests answered by the embedded API server |
//!
//! Inputs are text; a target that needs two parts takes them split at the first line
//! holding only `---`. jq and CEL programs the native evaluator does not run go to the
//! evaluation sandbox when one is installed ([`install_sandbox`]), as in `kstage`.

use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use crate::clock::{Clock, SystemClock};
use crate::stage::Origin;
use crate::template::{Renderer, StageEnv};

/// The most input a target looks at: bigger inputs only slow the fuzzer down.
pub const MAX_INPUT: usize = 64 * 1024;

/// Evaluate unbounded jq and CEL programs in `kstage __eval` children of `exe` (the
/// kstage binary), under the daemon's default limits.
pub fn install_sandbox(exe: std::path::PathBuf) {
    crate::stage::sandbox::install(exe, crate::stage::sandbox::Limits::default());
}

fn text(data: &[u8]) -> Option<&str> {
    if data.len() > MAX_INPUT {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// `text` split at its first `---` line: (before, after).
fn two_parts(text: &str) -> (&str, &str) {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return (&text[..offset], &text[offset + line.len()..]);
        }
        offset += line.len();
    }
    (text, "")
}

/// An object read from `text` (YAML or JSON), else a sample pod.
fn object_or_sample(text: &str) -> Value {
    match crate::yaml::to_json(text) {
        Ok(v) if v.is_object() => v,
        _ => sample_pod(),
    }
}

fn sample_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "uid": "u-1",
                     "labels": {"app": "web"}, "annotations": {"a": "b"},
                     "finalizers": ["kwok.x-k8s.io/fake"], "resourceVersion": "7"},
        "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]}]},
        "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]},
    })
}

fn sample_node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-0", "uid": "u-2", "labels": {"type": "kwok"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}], "allocatable": {"cpu": "4"}},
    })
}

fn renderer() -> &'static Renderer {
    static RENDERER: OnceLock<Renderer> = OnceLock::new();
    RENDERER.get_or_init(|| {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Renderer::new(Arc::new(StageEnv::new(clock, chrono::Utc::now(), "fuzz")))
    })
}

/// YAML documents to JSON: parsing either succeeds or reports an error, and what one
/// document parses to also parses alone.
pub fn yaml(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(docs) = crate::yaml::documents(text) {
        for doc in &docs {
            // What kstage prints back reads again as the same value.
            let printed = crate::yaml::to_string(doc);
            let again = crate::yaml::to_json(&printed);
            assert!(again.is_ok(), "printed YAML does not parse: {printed:?}");
        }
    }
    let _ = crate::yaml::to_json(text);
}

/// Stage documents parsed and compiled; each Stage that compiles is matched against a
/// pod and a node, its selector evaluated as the engine does.
pub fn stage(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(docs) = crate::yaml::documents(text) else {
        return;
    };
    let documents: Vec<crate::stage::load::Document> = docs
        .into_iter()
        .enumerate()
        .map(|(document, value)| {
            (
                Origin {
                    file: None,
                    document,
                },
                Ok(value),
            )
        })
        .collect();
    let loaded = crate::stage::load::load_documents(&documents, renderer());
    for problem in &loaded.problems {
        // Every problem says what it is about.
        assert!(!problem.to_string().is_empty());
    }
    let set = crate::stage::StageSet::new(loaded.stages);
    for object in [sample_pod(), sample_node()] {
        let _ = set.matching(&object);
    }
}

/// One selector requirement: the first part is a jq key (`In`/`Exists`) or, when it
/// starts with `cel:`, a CEL condition; the second, the object (a sample pod if none).
pub fn selector(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (program, object) = two_parts(text);
    let program = program.trim_end_matches('\n');
    let selector = match program.strip_prefix("cel:") {
        Some(cel) => json!({"matchConditions": [{"expression": cel}]}),
        None => json!({"matchExpressions": [
            {"key": program, "operator": "In", "values": ["Pending", "true", "1"]},
            {"key": program, "operator": "Exists"},
        ]}),
    };
    let stage = json!({
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
        "metadata": {"name": "fuzz"},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"}, "selector": selector,
                 "next": {"statusTemplate": "phase: Running"}},
    });
    let documents = vec![(
        Origin {
            file: None,
            document: 0,
        },
        Ok(stage),
    )];
    let loaded = crate::stage::load::load_documents(&documents, renderer());
    let set = crate::stage::StageSet::new(loaded.stages);
    let _ = set.matching(&object_or_sample(object));
}

/// A Go template (first part) compiled and rendered on an object (second part).
pub fn template(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (source, object) = two_parts(text);
    let renderer = renderer();
    let Ok(template) = renderer.parse("fuzz", source) else {
        return;
    };
    let object = object_or_sample(object);
    if let Ok(rendered) = template.render(&object) {
        assert!(
            rendered.len() <= 64 << 20,
            "a render beyond its output budget"
        );
    }
    let _ = template.render_json(&object);
}

/// A patch applied to an object: the input is a JSON or YAML document
/// `{type, kind, target, patch}` (type `json`, `merge`, `strategic`), or a patch alone
/// (applied to a sample pod as each type).
pub fn patch(data: &[u8]) {
    use crate::patch::PatchType;
    let Some(text) = text(data) else { return };
    let Ok(doc) = crate::yaml::to_json(text) else {
        return;
    };
    let types = [PatchType::Json, PatchType::Merge, PatchType::Strategic];
    let (target, kind, patch, types) = match doc.get("patch") {
        Some(patch) => {
            let target = doc.get("target").cloned().unwrap_or_else(sample_pod);
            let kind = doc["kind"].as_str().unwrap_or("Pod").to_owned();
            let chosen: Vec<PatchType> = match doc["type"].as_str() {
                Some("json") => vec![PatchType::Json],
                Some("merge") => vec![PatchType::Merge],
                Some("strategic") => vec![PatchType::Strategic],
                _ => types.to_vec(),
            };
            (target, kind, patch.clone(), chosen)
        }
        None => (sample_pod(), "Pod".to_owned(), doc, types.to_vec()),
    };
    for patch_type in types {
        if let Ok(patched) = crate::patch::apply(&target, patch_type, &patch, &kind) {
            // Whether a patch changes anything agrees with what applying it did.
            if let Ok(changes) = crate::patch::changes(&target, patch_type, &patch, &kind) {
                assert_eq!(
                    changes,
                    patched != target,
                    "{patch_type:?} {patch} on {target}: changes() disagrees with apply()"
                );
            }
        }
    }
}

/// Requests to the embedded API server, against a fresh store: each request is a line
/// `METHOD TARGET [CONTENT-TYPE]` followed by a line with its body (`-` for none); at most
/// 16. Every answer is a well-formed HTTP response; an error is a JSON `Status` whose
/// `code` is the response's.
pub fn apiserver(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let requests = parse_requests(text);
    if requests.is_empty() {
        return;
    }
    runtime().block_on(async {
        let server = Arc::new(crate::apiserver::Server {
            state: crate::apiserver::state::State::new(Arc::new(SystemClock), 1000),
            faults: crate::cluster::faults::Faults::new(
                crate::cluster::faults::FaultSpec::none(),
                0,
            ),
            config: crate::apiserver::Config::default(),
            clock: Arc::new(SystemClock),
            address: "127.0.0.1:6443".into(),
            audit: None,
            expired_watches: std::sync::atomic::AtomicU64::new(0),
        });
        for (method, target, content_type, body) in requests {
            let watch = target.contains("watch");
            let mut builder = hyper::Request::builder()
                .method(method.as_str())
                .uri(target.as_str());
            if let Some(ct) = &content_type {
                builder = builder.header("content-type", ct.as_str());
            }
            let Ok(request) = builder.body(http_body_util::Full::new(bytes::Bytes::from(body)))
            else {
                continue; // not an HTTP request hyper would hand over
            };
            let Ok(response) = crate::apiserver::handler::handle(server.clone(), request).await
            else {
                continue; // an injected abort (no faults are configured)
            };
            let status = response.status().as_u16();
            if watch && status < 400 {
                continue; // a stream: its head is the answer
            }
            use http_body_util::BodyExt as _;
            let Ok(Ok(collected)) = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                response.into_body().collect(),
            )
            .await
            else {
                panic!("{method} {target}: the body of a {status} answer did not end");
            };
            let body = collected.to_bytes();
            if status >= 400 {
                let status_body: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
                    panic!("{method} {target}: a {status} answer that is not JSON ({e}): {body:?}")
                });
                assert_eq!(
                    status_body["kind"], "Status",
                    "{method} {target}: {status_body}"
                );
                assert_eq!(
                    status_body["code"], status,
                    "{method} {target}: {status_body}"
                );
            }
        }
    });
}

type RawRequest = (String, String, Option<String>, Vec<u8>);

fn parse_requests(text: &str) -> Vec<RawRequest> {
    let mut lines = text.lines();
    let mut requests = Vec::new();
    while let Some(head) = lines.next() {
        if requests.len() == 16 {
            break;
        }
        let mut words = head.split_whitespace();
        let (Some(method), Some(target)) = (words.next(), words.next()) else {
            continue;
        };
        let content_type = words.next().map(str::to_owned);
        let body = match lines.next() {
            None | Some("-") => Vec::new(),
            Some(line) => line.as_bytes().to_vec(),
        };
        requests.push((method.to_owned(), target.to_owned(), content_type, body));
    }
    requests
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A fuzz target: one input, any bytes; it panics on a bug.
pub type Target = fn(&[u8]);

/// The targets by name, for the corpus replay.
pub const TARGETS: [(&str, Target); 6] = [
    ("yaml", yaml),
    ("stage", stage),
    ("selector", selector),
    ("template", template),
    ("patch", patch),
    ("apiserver", apiserver),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_split_at_their_first_separator_line() {
        assert_eq!(two_parts("a\n---\nb\n---\nc"), ("a\n", "b\n---\nc"));
        assert_eq!(two_parts("no separator"), ("no separator", ""));
    }

    #[test]
    fn requests_read_as_head_and_body_lines() {
        let r =
            parse_requests("GET /api/v1/pods\n-\nPOST /api/v1/namespaces application/json\n{}\n");
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].2.as_deref(), Some("application/json"));
        assert_eq!(r[1].3, b"{}");
    }
}
