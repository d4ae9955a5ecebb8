//! Test cases for plugins: one call each, with its input and the answer (or error)
//! expected, in a YAML or JSON file. `kstage plugin test` runs them; `kstage plugin call`
//! checks the one it is given.
//!
//! ```yaml
//! capability: selector            # selector | renderer | classifier | metadata
//! input: {object: ..., candidates: [...]}   # as `kstage plugin call` reads it
//! expect: {stage: pod-ready, delayMs: null} # the answer, compared as JSON; or
//! expectError: not a candidate    # a text the call's error must contain
//! budget: {p99: 200µs, calls: 1000}         # optional: checked with `--bench`
//! ```
//!
//! A case with neither `expect` nor `expectError` passes when the call succeeds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::{Capability, Plugin, invoke};

// Paths are jq's: `.a.b`, `.a[0]`, `.["a.b"]`, the whole value `.`.

/// What a case expects.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// This answer (`expect`; `null` is an answer: a selector choosing nothing).
    Answer(Value),
    /// An error containing this text (`expectError`).
    Error(String),
    /// Only that the call succeeds.
    Success,
}

/// A latency budget: the 99th percentile of `calls` calls at most `p99`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most the 99th percentile may be.
    pub p99: Duration,
    /// Calls timed (after a warm-up of a tenth as many, at most 100).
    pub calls: u32,
}

/// Calls a budget times when it does not say.
pub const BUDGET_CALLS: u32 = 1000;

/// One test case.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Its file's name without the extension.
    pub name: String,
    /// The capability called.
    pub capability: Capability,
    /// The call's input.
    pub input: Value,
    /// What it expects.
    pub expect: Expect,
    /// Its latency budget, if any.
    pub budget: Option<Budget>,
}

const KEYS: [&str; 5] = ["capability", "input", "expect", "expectError", "budget"];

impl Case {
    /// Whether `document` is a case (an object with an `input`), rather than a bare input.
    pub fn is_case(document: &Value) -> bool {
        document.get("input").is_some() && document.get("capability").is_some()
    }

    /// The case `document` (a case file's content), named `name`.
    ///
    /// # Errors
    /// What is wrong with it: an unknown key, a missing or unknown capability, both
    /// `expect` and `expectError`, a budget that does not parse.
    pub fn from_value(name: &str, document: Value) -> Result<Case, String> {
        let Value::Object(mut map) = document else {
            return Err("a case is a mapping: {capability, input, expect | expectError}".into());
        };
        if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "unknown key {unknown:?} (a case has {})",
                KEYS.join(", ")
            ));
        }
        let capability: Capability = match map.remove("capability") {
            Some(Value::String(c)) => c.parse()?,
            _ => return Err("capability: missing (selector, renderer or classifier)".into()),
        };
        let expect = match (map.remove("expect"), map.remove("expectError")) {
            (Some(_), Some(_)) => return Err("give expect or expectError, not both".into()),
            (Some(answer), None) => Expect::Answer(answer),
            (None, Some(Value::String(text))) => Expect::Error(text),
            (None, Some(_)) => return Err("expectError: a text the error contains".into()),
            (None, None) => Expect::Success,
        };
        let budget = map.remove("budget").map(budget).transpose()?;
        Ok(Case {
            name: name.to_owned(),
            capability,
            input: map.remove("input").unwrap_or(Value::Null),
            expect,
            budget,
        })
    }

    /// The case in file `path` (YAML or JSON).
    ///
    /// # Errors
    /// The file cannot be read or parsed, or is not a case (see [`Case::from_value`]).
    pub fn load(path: &Path) -> Result<Case, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let document = crate::yaml::to_json(&text).map_err(|e| e.to_string())?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Case::from_value(&name, document)
    }
}

fn budget(value: Value) -> Result<Budget, String> {
    let Value::Object(map) = value else {
        return Err("budget: {p99: 200µs, calls: 1000}".into());
    };
    let mut p99 = None;
    let mut calls = BUDGET_CALLS;
    for (key, value) in map {
        match (key.as_str(), value) {
            ("p99", Value::String(text)) => {
                let ns = crate::go::parse_go_duration(text.trim())
                    .filter(|ns| *ns > 0)
                    .ok_or_else(|| {
                        format!("budget.p99: {text:?} is not a duration (200µs, 1ms)")
                    })?;
                p99 = Some(Duration::from_nanos(ns as u64));
            }
            ("calls", Value::Number(n)) => {
                calls = n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("budget.calls: {n} is not a positive count"))?;
            }
            (key, value) => return Err(format!("budget.{key}: unexpected {value}")),
        }
    }
    let p99 = p99.ok_or("budget.p99: missing")?;
    Ok(Budget { p99, calls })
}

/// The case files in `dir`: its `*.yaml`, `*.yml` and `*.json` files, by name.
///
/// # Errors
/// The folder cannot be read.
pub fn files_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// How a case went.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The plugin's answer, or its error's text.
    pub answer: Result<Value, String>,
    /// How long the call took.
    pub took: Duration,
    /// Why it failed, one line each; empty when it passed.
    pub problems: Vec<String>,
    /// The latency measured against the budget (`--bench`).
    pub bench: Option<Bench>,
}

/// A budget's measurement.
#[derive(Debug, Clone, Copy)]
pub struct Bench {
    /// The 99th percentile measured.
    pub p99: Duration,
    /// Calls timed.
    pub calls: u32,
}

impl Outcome {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Run `case` against `plugin`; with `bench`, also time it against its budget.
pub fn run(plugin: &Plugin, case: &Case, bench: bool) -> Outcome {
    let start = Instant::now();
    let answer = invoke::call(plugin, case.capability, case.input.clone());
    let took = start.elapsed();
    let mut problems = check(&case.expect, &answer);
    let mut measured = None;
    if bench
        && problems.is_empty()
        && let Some(budget) = case.budget
    {
        let timed = time(plugin, case, budget.calls);
        if timed.p99 > budget.p99 {
            problems.push(format!(
                "p99 {:?} over the budget of {:?} ({} calls)",
                timed.p99, budget.p99, timed.calls
            ));
        }
        measured = Some(timed);
    }
    Outcome {
        answer,
        took,
        problems,
        bench: measured,
    }
}

/// Why `answer` does not meet `expect`, one line each.
pub fn check(expect: &Expect, answer: &Result<Value, String>) -> Vec<String> {
    match (expect, answer) {
        (Expect::Answer(expected), Ok(actual)) => diff(expected, actual),
        (Expect::Answer(_) | Expect::Success, Err(error)) => vec![format!("error: {error}")],
        (Expect::Error(needle), Ok(actual)) => vec![format!(
            "expected an error containing {needle:?}, got the answer {}",
            compact(actual)
        )],
        (Expect::Error(needle), Err(error)) if !error.contains(needle.as_str()) => {
            vec![format!("the error does not contain {needle:?}: {error}")]
        }
        _ => Vec::new(),
    }
}

fn time(plugin: &Plugin, case: &Case, calls: u32) -> Bench {
    for _ in 0..(calls / 10).clamp(1, 100) {
        let _ = invoke::call(plugin, case.capability, case.input.clone());
    }
    let mut times: Vec<Duration> = (0..calls)
        .map(|_| {
            let input = case.input.clone();
            let start = Instant::now();
            let _ = invoke::call(plugin, case.capability, input);
            start.elapsed()
        })
        .collect();
    times.sort();
    let index = (times.len() * 99).div_ceil(100).saturating_sub(1);
    Bench {
        p99: times.get(index).copied().unwrap_or_default(),
        calls,
    }
}

/// The most differences [`diff`] lists.
pub const MAX_DIFFERENCES: usize = 20;

/// Where `actual` differs from `expected`, one line per difference, by jq-style path
/// (`.status.phase: expected "Running", got "Pending"`).
pub fn diff(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(".", expected, actual, &mut out);
    if out.len() > MAX_DIFFERENCES {
        let more = out.len() - MAX_DIFFERENCES;
        out.truncate(MAX_DIFFERENCES);
        out.push(format!("... {more} more differences"));
    }
    out
}

fn walk(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => walk_map(path, e, a, out),
        (Value::Array(e), Value::Array(a)) => {
            for (i, (e, a)) in e.iter().zip(a).enumerate() {
                walk(&format!("{path}[{i}]"), e, a, out);
            }
            if e.len() != a.len() {
                out.push(format!(
                    "{path}: expected {} items, got {}",
                    e.len(),
                    a.len()
                ));
            }
        }
        (e, a) if e == a => {}
        (e, a) => out.push(format!(
            "{path}: expected {}, got {}",
            compact(e),
            compact(a)
        )),
    }
}

fn walk_map(
    path: &str,
    expected: &Map<String, Value>,
    actual: &Map<String, Value>,
    out: &mut Vec<String>,
) {
    let key_path = |key: &str| {
        let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match (path, plain) {
            (".", true) => format!(".{key}"),
            (_, true) => format!("{path}.{key}"),
            (_, false) => format!("{path}[{}]", Value::String(key.to_owned())),
        }
    };
    for (key, e) in expected {
        match actual.get(key) {
            Some(a) => walk(&key_path(key), e, a, out),
            None => out.push(format!(
                "{}: missing (expected {})",
                key_path(key),
                compact(e)
            )),
        }
    }
    for (key, a) in actual {
        if !expected.contains_key(key) {
            out.push(format!("{}: unexpected {}", key_path(key), compact(a)));
        }
    }
}

/// `value` as compact JSON, cut to 200 characters.
fn compact(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_case_file_reads_with_its_expectation_and_budget() {
        let case = Case::from_value(
            "c",
            json!({"capability": "selector", "input": {"object": {}, "candidates": []},
                   "expect": null, "budget": {"p99": "200µs", "calls": 50}}),
        )
        .expect("a case");
        assert_eq!(case.capability, Capability::Selector);
        assert_eq!(case.expect, Expect::Answer(Value::Null));
        assert_eq!(
            case.budget,
            Some(Budget {
                p99: Duration::from_micros(200),
                calls: 50
            })
        );
        let error = Case::from_value(
            "c",
            json!({"capability": "renderer", "input": {}, "expectError": "boom"}),
        )
        .expect("a case");
        assert_eq!(error.expect, Expect::Error("boom".into()));
        let bare = Case::from_value("c", json!({"capability": "classifier", "input": {}}))
            .expect("a case");
        assert_eq!(bare.expect, Expect::Success);
        assert_eq!(bare.budget, None);
    }

    #[test]
    fn a_case_with_a_mistake_says_which() {
        let bad = |doc: Value| Case::from_value("c", doc).expect_err("refused");
        assert!(
            bad(json!({"capability": "selector", "input": {}, "expected": 1}))
                .contains("unknown key \"expected\"")
        );
        assert!(bad(json!({"input": {}})).contains("capability: missing"));
        assert!(bad(json!({"capability": "sorter", "input": {}})).contains("unknown capability"));
        assert!(
            bad(json!({"capability": "selector", "input": {}, "expect": 1, "expectError": "x"}))
                .contains("not both")
        );
        assert!(
            bad(json!({"capability": "selector", "input": {}, "budget": {"p99": "fast"}}))
                .contains("budget.p99")
        );
        assert!(
            bad(json!({"capability": "selector", "input": {}, "budget": {"calls": 5}}))
                .contains("budget.p99: missing")
        );
    }

    #[test]
    fn a_diff_names_each_path_that_differs() {
        let expected = json!({"status": {"phase": "Running", "podIP": "10.0.0.7", "ports": [1, 2]},
                              "metadata": {"labels": {"app.kubernetes.io/name": "web"}}});
        let actual = json!({"status": {"phase": "Pending", "ports": [1, 3, 4], "extra": true},
                            "metadata": {"labels": {"app.kubernetes.io/name": "web"}}});
        assert_eq!(
            diff(&expected, &actual),
            vec![
                ".status.phase: expected \"Running\", got \"Pending\"",
                ".status.podIP: missing (expected \"10.0.0.7\")",
                ".status.ports[1]: expected 2, got 3",
                ".status.ports: expected 2 items, got 3",
                ".status.extra: unexpected true",
            ]
        );
        assert!(diff(&expected, &expected).is_empty());
        assert_eq!(
            diff(&json!({"a.b": 1}), &json!({"a.b": 2})),
            vec![".[\"a.b\"]: expected 1, got 2"]
        );
        assert_eq!(
            diff(&Value::Null, &json!({"stage": "x"})),
            vec![".: expected null, got {\"stage\":\"x\"}"]
        );
    }

    #[test]
    fn an_expectation_is_checked_against_the_answer_or_the_error() {
        let answer = Ok(json!({"decision": "backoff"}));
        let error: Result<Value, String> =
            Err("plugin p: renderer.render: returned an error: bad path".into());
        assert!(check(&Expect::Answer(json!({"decision": "backoff"})), &answer).is_empty());
        assert!(check(&Expect::Success, &answer).is_empty());
        assert!(check(&Expect::Error("bad path".into()), &error).is_empty());
        assert_eq!(
            check(&Expect::Success, &error),
            vec!["error: plugin p: renderer.render: returned an error: bad path".to_owned()]
        );
        assert!(
            check(&Expect::Error("bad path".into()), &answer)[0]
                .contains("expected an error containing")
        );
        assert!(
            check(&Expect::Error("other".into()), &error)[0].contains("does not contain \"other\"")
        );
    }
}
