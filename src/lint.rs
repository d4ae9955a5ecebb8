//! What `kstage stage lint` warns about in Stages that compile: constructs that can run
//! without bound. Warnings never stop a Stage from loading (kstage bounds these at run
//! time: expressions within `--expr-timeout`/`--expr-memory`, loops with the engine's
//! loop guard); they say where a Stage will hit those bounds. Each check warns only where
//! it can tell from the Stage alone.
//!
//! - jq programs with recursive definitions or generators without a bound written in the
//!   program (`repeat`, `while`, `until`, `recurse(f)`, `range` over computed bounds);
//! - a Stage with no delay whose steps write something new on every play (the object's
//!   `resourceVersion`, `generation`) and nothing its selector reads: the object matches
//!   it again at once, for ever;
//! - Stages with no delay that play each other in a ring ([`cycles`]): seen by playing
//!   them on sample objects.

mod cycles;

use std::path::PathBuf;

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::Term;
use serde::Deserialize as _;
use serde_json::{Value, json};

use crate::action::{self, Action, Typing};
use crate::patch::PatchType;
use crate::stage::load::{Loaded, Problem, ReadError};
use crate::stage::v1alpha1::{self, ExpressionFrom};
use crate::stage::{FieldError, Stage};
use crate::template::Renderer;

/// `range` bounds written in the program above this are as good as unbounded.
const LARGE_RANGE: f64 = 100_000.0;

/// What loading found, and the warnings about the Stages that loaded.
#[derive(Debug, Default)]
pub struct Linted {
    /// The Stages and the problems of those that did not load.
    pub loaded: Loaded,
    /// Warnings, each with its Stage's file, document, name and field.
    pub warnings: Vec<Problem>,
}

/// Load the Stages of `paths` and lint those that compile.
pub fn lint_files(paths: &[PathBuf], renderer: &Renderer) -> Result<Linted, ReadError> {
    let documents = crate::stage::load::read_documents(paths)?;
    let loaded = crate::stage::load::load_documents(&documents, renderer);
    let mut warnings = Vec::new();
    let mut undelayed = Vec::new();
    for (origin, doc) in &documents {
        let Ok(doc) = doc else { continue };
        let Some(stage) = loaded.stages.iter().find(|s| s.origin == *origin) else {
            continue;
        };
        let Ok(wire) = v1alpha1::Stage::deserialize(doc) else {
            continue;
        };
        warnings.extend(
            stage_warnings(&wire, stage)
                .into_iter()
                .map(|error| Problem {
                    origin: origin.clone(),
                    stage: Some(stage.name.clone()),
                    error,
                }),
        );
        // Only selectors that read plain paths are played on samples: an expression
        // that needs the evaluation sandbox would cost its budget here too.
        if no_delay(wire.spec.delay.as_ref()) && stage.selector.read_paths().is_some() {
            undelayed.push(stage);
        }
    }
    warnings.extend(cycle_warnings(&undelayed));
    Ok(Linted { loaded, warnings })
}

/// A warning on the first Stage of every cycle among `undelayed` (Stages with no delay).
fn cycle_warnings(undelayed: &[&Stage]) -> Vec<Problem> {
    cycles::cycles(undelayed)
        .into_iter()
        .filter_map(|cycle| {
            let first = undelayed.iter().find(|s| s.name == cycle[0])?;
            let others: Vec<String> = cycle[1..]
                .iter()
                .filter_map(|name| undelayed.iter().find(|s| s.name == *name))
                .map(|s| format!("{} ({})", s.name, s.origin))
                .collect();
            Some(Problem {
                origin: first.origin.clone(),
                stage: Some(first.name.clone()),
                error: FieldError::new(
                    "spec",
                    format!(
                        "no delay, and neither has {}: on a sample {} they play each other in a loop ({} -> {}), back to back for ever (kstage slows such an object down, see --loop-guard; give one of them a delay, or a selector the other's write falsifies)",
                        others.join(", "),
                        first.resource.kind,
                        cycle.join(" -> "),
                        first.name,
                    ),
                ),
            })
        })
        .collect()
}

/// The warnings about one compiled Stage (`wire` is its document).
pub fn stage_warnings(wire: &v1alpha1::Stage, stage: &Stage) -> Vec<FieldError> {
    let mut warnings = Vec::new();
    for (path, source) in jq_programs(wire) {
        for reason in unbounded_jq(&source) {
            warnings.push(FieldError::new(
                path.clone(),
                format!(
                    "{reason}: it can run without bound (each evaluation is cut off at --expr-timeout or --expr-memory, and the object is then not matched)"
                ),
            ));
        }
    }
    if let Some(message) = self_matching(wire, stage) {
        warnings.push(FieldError::new("spec", message));
    }
    warnings
}

/// Every jq program of a Stage, with its field path.
fn jq_programs(wire: &v1alpha1::Stage) -> Vec<(String, String)> {
    let spec = &wire.spec;
    let mut out = Vec::new();
    let expressions = spec
        .selector
        .iter()
        .flat_map(|s| s.match_expressions.iter().flatten());
    for (i, item) in expressions.enumerate() {
        let at = format!("spec.selector.matchExpressions[{i}]");
        if let Some(key) = &item.key {
            out.push((format!("{at}.key"), key.clone()));
        }
        if let Some(jq) = &item.jq {
            out.push((format!("{at}.jq.key"), jq.key.clone()));
        }
    }
    let mut from = |path: &str, e: Option<&ExpressionFrom>| {
        let Some(e) = e else { return };
        if let Some(src) = e.expression_from.as_deref().filter(|s| !s.is_empty()) {
            out.push((format!("{path}.expressionFrom"), src.to_owned()));
        }
        if let Some(jq) = &e.jq {
            out.push((format!("{path}.jq.expression"), jq.expression.clone()));
        }
    };
    from("spec.weightFrom", spec.weight_from.as_ref());
    if let Some(delay) = &spec.delay {
        from("spec.delay.durationFrom", delay.duration_from.as_ref());
        from(
            "spec.delay.jitterDurationFrom",
            delay.jitter_duration_from.as_ref(),
        );
    }
    out
}

/// Why a jq program can run without bound, as far as its text shows: recursive
/// definitions and generators without a bound written in the program. Empty when none
/// is seen (or the program does not parse: that is an error reported elsewhere).
pub fn unbounded_jq(src: &str) -> Vec<String> {
    let Some(term) = jaq_core::load::parse(src, |p| p.term()) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    walk(&term, &mut Vec::new(), &mut found);
    found.dedup();
    found
}

/// Visit `term`; `defining` holds the definitions whose bodies enclose it.
fn walk<'a>(term: &Term<&'a str>, defining: &mut Vec<&'a str>, found: &mut Vec<String>) {
    let mut note = |reason: String| {
        if !found.contains(&reason) {
            found.push(reason);
        }
    };
    match term {
        Term::Def(defs, body) => {
            for def in defs {
                defining.push(def.name);
                walk(&def.body, defining, found);
                defining.pop();
            }
            walk(body, defining, found);
        }
        Term::Call(name, args) => {
            if defining.contains(name) {
                note(format!("{name} calls itself (a recursive definition)"));
            }
            match (*name, args.len()) {
                ("repeat", _) => note("repeat generates without end".to_owned()),
                ("while" | "until", 2) => note(format!("{name} runs until its condition changes")),
                ("recurse", 1 | 2) => note(format!(
                    "recurse with a function ({name}(f)) goes as deep as f leads"
                )),
                ("range", 1..=3) if !args.iter().all(small_number) => note(format!(
                    "range over bounds that are not small numbers written in the program (at most {LARGE_RANGE})"
                )),
                _ => {}
            }
            for arg in args {
                walk(arg, defining, found);
            }
        }
        Term::Neg(inner) | Term::Label(_, inner) => walk(inner, defining, found),
        Term::Arr(Some(inner)) => walk(inner, defining, found),
        Term::BinOp(l, _, r) => {
            walk(l, defining, found);
            walk(r, defining, found);
        }
        Term::Str(_, parts) => {
            for part in parts {
                if let StrPart::Term(t) = part {
                    walk(t, defining, found);
                }
            }
        }
        Term::Obj(entries) => {
            for (k, v) in entries {
                walk(k, defining, found);
                if let Some(v) = v {
                    walk(v, defining, found);
                }
            }
        }
        Term::Fold(_, input, _, args) => {
            walk(input, defining, found);
            for arg in args {
                walk(arg, defining, found);
            }
        }
        Term::TryCatch(body, catch) => {
            walk(body, defining, found);
            if let Some(c) = catch {
                walk(c, defining, found);
            }
        }
        Term::IfThenElse(branches, otherwise) => {
            for (cond, then) in branches {
                walk(cond, defining, found);
                walk(then, defining, found);
            }
            if let Some(o) = otherwise {
                walk(o, defining, found);
            }
        }
        Term::Path(base, path) => {
            walk(base, defining, found);
            for (part, _) in &path.0 {
                match part {
                    jaq_core::path::Part::Index(i) => walk(i, defining, found),
                    jaq_core::path::Part::Range(from, to) => {
                        for t in [from, to].into_iter().flatten() {
                            walk(t, defining, found);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

/// A number written in the program, no larger than [`LARGE_RANGE`].
fn small_number(term: &Term<&str>) -> bool {
    match term {
        Term::Num(n) => n.parse::<f64>().is_ok_and(|n| n.abs() <= LARGE_RANGE),
        Term::Neg(inner) => small_number(inner),
        _ => false,
    }
}

/// Why `stage` would play in a loop, when it can be told: no delay, a selector that reads
/// only plain paths, steps that write none of them (so the object still matches after
/// its own write) and write something new each play (so the write is never a no-op).
fn self_matching(wire: &v1alpha1::Stage, stage: &Stage) -> Option<String> {
    if !no_delay(wire.spec.delay.as_ref()) || stage.selector.is_never() {
        return None;
    }
    let reads = stage.selector.read_paths()?;
    let first = writes(stage, &sample(stage, 1))?;
    let second = writes(stage, &sample(stage, 2))?;
    if first.paths.is_empty() || first.bodies == second.bodies {
        return None;
    }
    let overlaps = |w: &[String]| {
        reads
            .iter()
            .any(|r| r.starts_with(w) || w.starts_with(r.as_slice()))
    };
    if first.paths.iter().any(|w| overlaps(w)) {
        return None;
    }
    let shown: Vec<String> = first.paths.iter().map(|p| p.join(".")).collect();
    Some(format!(
        "no delay, and its steps write {} (new on every play: it follows the object's resourceVersion or generation) but nothing its selector reads: the object would match it again at once and play it in a loop (kstage slows such an object down, see --loop-guard; give the Stage a delay or a selector its own write falsifies)",
        shown.join(", ")
    ))
}

/// Whether a Stage's delay is none or zero, written as such.
fn no_delay(delay: Option<&v1alpha1::StageDelay>) -> bool {
    delay.is_none_or(|d| {
        d.duration_milliseconds.unwrap_or(0) == 0
            && d.duration_from.is_none()
            && d.jitter_duration_milliseconds.unwrap_or(0) == 0
            && d.jitter_duration_from.is_none()
    })
}

/// An object of the Stage's kind at version `n` (only the version-dependent fields
/// differ between two samples).
fn sample(stage: &Stage, n: u64) -> Value {
    json!({
        "apiVersion": stage.resource.api_group,
        "kind": stage.resource.kind,
        "metadata": {
            "name": "lint", "namespace": "default",
            "uid": "00000000-0000-0000-0000-000000000000",
            "resourceVersion": n.to_string(), "generation": n,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {}, "annotations": {},
        },
        "spec": {},
        "status": {},
    })
}

/// What a Stage's steps write to the object itself.
struct Writes {
    /// Key paths written (leaves of merge-style bodies, JSON patch paths).
    paths: Vec<Vec<String>>,
    /// The bodies, to compare two plays.
    bodies: Vec<Value>,
}

/// The writes of `stage` for `object`; `None` when that cannot be told (a step does not
/// render here) or the Stage deletes the object (no loop then).
fn writes(stage: &Stage, object: &Value) -> Option<Writes> {
    let actions =
        action::stage_actions(stage, object, Typing::Typed, &crate::decide::Builtin).ok()?;
    let mut out = Writes {
        paths: Vec::new(),
        bodies: Vec::new(),
    };
    for (_, action) in actions {
        match action {
            Action::Delete => return None,
            Action::Event { .. } => {}
            Action::Patch {
                patch_type, data, ..
            } => {
                if patch_type == PatchType::Json {
                    for op in data.as_array().into_iter().flatten() {
                        let pointer = op.get("path").and_then(Value::as_str).unwrap_or("");
                        out.paths.push(
                            pointer
                                .split('/')
                                .skip(1)
                                .map(|p| p.replace("~1", "/").replace("~0", "~"))
                                .collect(),
                        );
                    }
                } else {
                    leaves(&data, &mut Vec::new(), &mut out.paths);
                }
                out.bodies.push(data);
            }
            Action::Apply {
                object: mut applied,
                ..
            } => {
                let same = crate::cluster::ObjectKey::of(&applied)
                    == crate::cluster::ObjectKey::of(object);
                if !same {
                    continue;
                }
                if let Some(map) = applied.as_object_mut() {
                    map.remove("apiVersion");
                    map.remove("kind");
                    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("name");
                        meta.remove("namespace");
                    }
                }
                leaves(&applied, &mut Vec::new(), &mut out.paths);
                out.bodies.push(applied);
            }
        }
    }
    Some(out)
}

/// The key paths of the leaves of `value` (non-empty objects are descended into).
fn leaves(value: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                at.push(k.clone());
                leaves(v, at, out);
                at.pop();
            }
        }
        _ if !at.is_empty() => out.push(at.clone()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursive_definitions_and_unbounded_generators_are_seen() {
        let cases = [
            ("def f: f; f", "f calls itself"),
            (
                "def f(x): if x > 0 then f(x - 1) else 0 end; f(3)",
                "f calls itself",
            ),
            ("[repeat(.)] | length", "repeat generates without end"),
            ("[.[] | while(. > 0; . + 1)]", "while runs until"),
            ("last(until(. > 100; . * 2))", "until runs until"),
            ("[recurse(.a)]", "recurse with a function"),
            ("[range(.spec.n)]", "range over bounds"),
            ("[range(0; 1e9)]", "range over bounds"),
        ];
        for (src, needle) in cases {
            let found = unbounded_jq(src);
            assert!(found.iter().any(|r| r.contains(needle)), "{src}: {found:?}");
        }
    }

    #[test]
    fn ordinary_programs_are_not_warned_about() {
        for src in [
            ".status.phase",
            ".metadata.deletionTimestamp",
            "[range(3)] | length",
            "[range(0; 10; 2)]",
            ".spec.containers | map(.name) | join(\",\")",
            "def inc: . + 1; .spec.replicas | inc",
            "[.. | numbers] | add",
            ".metadata.labels // {} | keys",
        ] {
            assert_eq!(unbounded_jq(src), Vec::<String>::new(), "{src}");
        }
    }
}
