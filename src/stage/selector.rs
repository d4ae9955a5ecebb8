//! Stage selectors: which objects a Stage applies to.
//!
//! A [`Selector`] is `spec.selector` compiled once: `matchLabels` and `matchAnnotations`
//! (every pair present with an equal value, as Kubernetes' `labels.SelectorFromSet`), jq
//! requirements (`key`/`operator`/`values`, legacy inline or under `jq`) and CEL conditions.
//! All parts are ANDed; an empty selector matches every object. The semantics are KWOK's
//! (`pkg/utils/expression/selector.go`, `pkg/utils/lifecycle/lifecycle.go`).

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;
use tracing::debug;

use super::FieldError;
use super::expr::{Cel, CelObject, Jq};
use super::v1alpha1::{SelectorExpression, StageSelector};

/// How a jq requirement relates the outputs of its key to its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// Some output equals some value.
    In,
    /// No output equals any value (also true when there is no output, or on an error).
    NotIn,
    /// Some output is not null (`""` and `false` exist).
    Exists,
    /// Every output is null, or there is none (or the key failed).
    DoesNotExist,
}

impl Operator {
    /// Parses KWOK's operator names (case-sensitive, as KWOK).
    pub fn parse(name: &str) -> Option<Operator> {
        match name {
            "In" => Some(Operator::In),
            "NotIn" => Some(Operator::NotIn),
            "Exists" => Some(Operator::Exists),
            "DoesNotExist" => Some(Operator::DoesNotExist),
            _ => None,
        }
    }

    /// The operator's name as written in a Stage.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A jq requirement: the outputs of `key` compared with `values` by `operator`.
#[derive(Debug)]
pub struct Requirement {
    key: Jq,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Compiles a requirement; `path` is the object holding `key`, `operator` and `values`
    /// (e.g. `spec.selector.matchExpressions[0]` or `...[0].jq`). Reports every problem:
    /// bad jq, unknown operator, values with `Exists`/`DoesNotExist`, none with
    /// `In`/`NotIn`.
    pub fn compile(
        key: &str,
        operator: &str,
        values: Option<&[String]>,
        path: &str,
    ) -> Result<Requirement, Vec<FieldError>> {
        let mut errors = Vec::new();
        let at = format!("{path}.key");
        let key = super::expr::at_field(&at, || Jq::compile(key))
            .map_err(|e| errors.push(FieldError::new(at, e)))
            .ok();
        let name = operator;
        let operator = Operator::parse(name);
        let values = values.unwrap_or_default();
        let problem = match operator {
            None => Some((
                "operator",
                format!("unknown operator {name:?}: use In, NotIn, Exists or DoesNotExist"),
            )),
            Some(op @ (Operator::In | Operator::NotIn)) if values.is_empty() => {
                Some(("values", format!("{op} needs at least one value")))
            }
            Some(op @ (Operator::Exists | Operator::DoesNotExist)) if !values.is_empty() => {
                Some(("values", format!("{op} takes no values")))
            }
            Some(_) => None,
        };
        if let Some((field, cause)) = problem {
            errors.push(FieldError::new(format!("{path}.{field}"), cause));
        }
        match (key, operator) {
            (Some(key), Some(operator)) if errors.is_empty() => Ok(Requirement {
                key,
                operator,
                values: values.to_vec(),
            }),
            _ => Err(errors),
        }
    }

    /// Whether `obj` meets the requirement. A jq runtime error counts as no output, as in
    /// KWOK (whose query drops every output when one fails).
    pub fn matches(&self, obj: &Value) -> bool {
        let outputs = match self.key.outputs(obj) {
            Ok(outputs) => outputs,
            Err(error) => {
                debug!(key = self.key.source(), %error, "jq key failed; no output");
                Vec::new()
            }
        };
        match self.operator {
            Operator::In => self.has_value(&outputs),
            Operator::NotIn => !self.has_value(&outputs),
            Operator::Exists => exists(&outputs),
            Operator::DoesNotExist => !exists(&outputs),
        }
    }

    /// The jq key.
    pub fn key(&self) -> &Jq {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values compared with (`In`/`NotIn`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, outputs: &[Cow<'_, Value>]) -> bool {
        outputs
            .iter()
            .filter_map(|output| comparable_text(output))
            .any(|text| self.values.iter().any(|v| *v == *text))
    }
}

fn exists(outputs: &[Cow<'_, Value>]) -> bool {
    outputs.iter().any(|v| !v.is_null())
}

/// The text an output is compared by: strings as they are, booleans `true`/`false`,
/// integers (and floats with an integral value) in decimal. Other outputs equal no value.
///
/// KWOK compares gojq's strings, booleans and `int`s the same way; its objects reach gojq
/// through a JSON round trip that makes every number a float, which KWOK never matches.
/// kstage matches integral numbers instead.
fn comparable_text(v: &Value) -> Option<Cow<'_, str>> {
    match v {
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Bool(true) => Some(Cow::Borrowed("true")),
        Value::Bool(false) => Some(Cow::Borrowed("false")),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(Cow::Owned(i.to_string()))
            } else if let Some(u) = n.as_u64() {
                Some(Cow::Owned(u.to_string()))
            } else {
                let f = n.as_f64()?;
                (f.is_finite() && f.fract() == 0.0).then(|| Cow::Owned(format!("{f:.0}")))
            }
        }
        _ => None,
    }
}

/// `spec.selector`, compiled.
#[derive(Debug, Default)]
pub struct Selector {
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    requirements: Vec<Requirement>,
    conditions: Vec<Cel>,
    /// Set for a Stage without `spec.selector`, which KWOK treats as inert.
    never: bool,
}

impl Selector {
    /// The selector of a Stage that has none: it matches nothing.
    pub fn never() -> Selector {
        Selector {
            never: true,
            ..Selector::default()
        }
    }

    /// Whether this selector can never match (the Stage had no selector).
    pub fn is_never(&self) -> bool {
        self.never
    }

    /// Compiles `spec`; `path` is where it sits (`spec.selector`). Returns every problem
    /// found, each with its field path (e.g. `spec.selector.matchExpressions[1].operator`):
    /// bad jq, bad CEL, unknown operator, values with `Exists`/`DoesNotExist`, no values with
    /// `In`/`NotIn`, an item with none of `key`, `jq` and `cel`, or with more than one.
    pub fn compile(spec: &StageSelector, path: &str) -> Result<Selector, Vec<FieldError>> {
        let pairs = |m: &Option<std::collections::BTreeMap<String, String>>| {
            m.iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let mut selector = Selector {
            labels: pairs(&spec.match_labels),
            annotations: pairs(&spec.match_annotations),
            ..Selector::default()
        };
        let mut errors = Vec::new();
        for (i, item) in spec.match_expressions.iter().flatten().enumerate() {
            let at = format!("{path}.matchExpressions[{i}]");
            match compile_item(item, &at) {
                Ok(Item::Requirement(r)) => selector.requirements.push(r),
                Ok(Item::Condition(c)) => selector.conditions.push(c),
                Err(mut e) => errors.append(&mut e),
            }
        }
        if errors.is_empty() {
            Ok(selector)
        } else {
            Err(errors)
        }
    }

    /// Whether `obj` matches every part. A CEL condition that fails to evaluate (a missing
    /// field, a non-bool result) does not match; the reason is logged at debug level.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.never {
            return false;
        }
        let metadata = obj.get("metadata");
        if !set_matches(&self.labels, metadata.and_then(|m| m.get("labels")))
            || !set_matches(
                &self.annotations,
                metadata.and_then(|m| m.get("annotations")),
            )
            || !self.requirements.iter().all(|r| r.matches(obj))
        {
            return false;
        }
        if self.conditions.is_empty() {
            return true;
        }
        let object = CelObject::new(obj);
        self.conditions.iter().all(|c| condition_holds(c, &object))
    }

    /// The jq requirements.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The CEL conditions.
    pub fn conditions(&self) -> &[Cel] {
        &self.conditions
    }

    /// The parts of an object the selector reads, as key paths (`metadata.labels.app`,
    /// `status.phase`); `None` when that cannot be told (a CEL condition, a jq key that is
    /// more than a path).
    pub fn read_paths(&self) -> Option<Vec<Vec<String>>> {
        if !self.conditions.is_empty() {
            return None;
        }
        let mut paths = Vec::new();
        for (map, pairs) in [("labels", &self.labels), ("annotations", &self.annotations)] {
            for (key, _) in pairs {
                paths.push(vec!["metadata".to_owned(), map.to_owned(), key.clone()]);
            }
        }
        for requirement in &self.requirements {
            paths.push(requirement.key.read_keys()?);
        }
        Some(paths)
    }
}

/// Kubernetes' `SelectorFromSet(set).Matches(labels)`: each key present with an equal value.
fn set_matches(required: &[(String, String)], actual: Option<&Value>) -> bool {
    required.iter().all(|(k, v)| {
        actual
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .is_some_and(|actual| actual == v)
    })
}

fn condition_holds(condition: &Cel, object: &CelObject) -> bool {
    match condition.eval_object(object) {
        Ok(cel::Value::Bool(b)) => b,
        Ok(other) => {
            debug!(expression = condition.source(), result = ?other.type_of(), "cel condition is not a bool; no match");
            false
        }
        Err(error) => {
            debug!(expression = condition.source(), %error, "cel condition failed; no match");
            false
        }
    }
}

enum Item {
    Requirement(Requirement),
    Condition(Cel),
}

fn compile_item(item: &SelectorExpression, path: &str) -> Result<Item, Vec<FieldError>> {
    let legacy = item.key.is_some() || item.operator.is_some() || item.values.is_some();
    let forms =
        usize::from(legacy) + usize::from(item.jq.is_some()) + usize::from(item.cel.is_some());
    if forms != 1 {
        let cause = if forms == 0 {
            "needs a jq requirement (key, operator, values, or jq) or a cel expression"
        } else {
            "set only one of key/operator/values, jq and cel"
        };
        return Err(vec![FieldError::new(path, cause)]);
    }
    if let Some(jq) = &item.jq {
        return Requirement::compile(
            &jq.key,
            &jq.operator,
            jq.values.as_deref(),
            &format!("{path}.jq"),
        )
        .map(Item::Requirement);
    }
    if let Some(cel) = &item.cel {
        let at = format!("{path}.cel.expression");
        return super::expr::at_field(&at, || Cel::compile(&cel.expression))
            .map(Item::Condition)
            .map_err(|e| vec![FieldError::new(at, e)]);
    }
    let mut missing = Vec::new();
    if item.key.is_none() {
        missing.push(FieldError::new(format!("{path}.key"), "required"));
    }
    if item.operator.is_none() {
        missing.push(FieldError::new(format!("{path}.operator"), "required"));
    }
    match (&item.key, &item.operator) {
        (Some(key), Some(operator)) => {
            Requirement::compile(key, operator, item.values.as_deref(), path).map(Item::Requirement)
        }
        _ => Err(missing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::v1alpha1::{ExpressionCel, SelectorJq, Stage};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn req(key: &str, op: &str, values: &[&str]) -> SelectorExpression {
        SelectorExpression {
            key: Some(key.to_owned()),
            operator: Some(op.to_owned()),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
            ..SelectorExpression::default()
        }
    }

    fn cel_item(src: &str) -> SelectorExpression {
        SelectorExpression {
            cel: Some(ExpressionCel {
                expression: src.to_owned(),
            }),
            ..SelectorExpression::default()
        }
    }

    fn selector(items: Vec<SelectorExpression>) -> Selector {
        let spec = StageSelector {
            match_expressions: Some(items),
            ..StageSelector::default()
        };
        match Selector::compile(&spec, "spec.selector") {
            Ok(s) => s,
            Err(e) => panic!("{e:?}"),
        }
    }

    fn one(key: &str, op: &str, values: &[&str], obj: &Value) -> bool {
        selector(vec![req(key, op, values)]).matches(obj)
    }

    fn errors(items: Vec<SelectorExpression>) -> Vec<String> {
        let spec = StageSelector {
            match_expressions: Some(items),
            ..StageSelector::default()
        };
        Selector::compile(&spec, "spec.selector")
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn selector_is_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Selector>();
    }

    /// KWOK's `TestRequirement_Matches` cases.
    #[test]
    fn kwok_requirement_cases() {
        let pod = json!({"status": {
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ContainerCreating"}}},
                {"state": {"waiting": {"reason": "Failed"}}}],
            "conditions": [{"reason": "PodScheduled", "status": "True"}]}});
        let key = ".status.containerStatuses.[].state.waiting.reason";
        assert!(one(key, "In", &["ContainerCreating", "Failed"], &pod));
        assert!(one(
            ".status.podIP",
            "NotIn",
            &["ContainerCreating", "Failed"],
            &json!({})
        ));
        let scheduled = ".status.conditions.[] | select( .reason == \"PodScheduled\" ) | .status";
        assert!(one(scheduled, "Exists", &[], &pod));
        assert!(!one(scheduled, "DoesNotExist", &[], &pod));
    }

    #[test]
    fn operators_on_outputs() {
        let obj = json!({"s": "x", "t": true, "f": false, "e": "", "n": null, "i": 3, "fl": 3.0,
                         "half": 2.5, "big": 18446744073709551615u64, "l": ["a", "b"], "o": {"k": "v"}});
        // In: any output equals any value, by text
        assert!(one(".s", "In", &["y", "x"], &obj));
        assert!(!one(".s", "In", &["y"], &obj));
        assert!(one(".t", "In", &["true"], &obj));
        assert!(one(".f", "In", &["false"], &obj));
        assert!(!one(".t", "In", &["True"], &obj));
        assert!(one(".i", "In", &["3"], &obj));
        assert!(
            one(".fl", "In", &["3"], &obj),
            "integral float compares as integer"
        );
        assert!(
            !one(".half", "In", &["2.5"], &obj),
            "other floats never match"
        );
        assert!(one(".big", "In", &["18446744073709551615"], &obj));
        assert!(one(".l[]", "In", &["b"], &obj));
        assert!(!one(".l", "In", &["a"], &obj), "arrays never match");
        assert!(!one(".o", "In", &["{\"k\":\"v\"}"], &obj));
        assert!(!one(".n", "In", &["null"], &obj), "null never matches");
        assert!(!one(".missing", "In", &[""], &obj));
        // NotIn is the negation of In, including no output and errors
        assert!(one(".s", "NotIn", &["y"], &obj));
        assert!(!one(".l[]", "NotIn", &["a"], &obj));
        assert!(one(".missing", "NotIn", &["x"], &obj));
        assert!(
            one(".l[] | select(. == \"zzz\")", "NotIn", &["x"], &obj),
            "no output"
        );
        assert!(one(".s.x", "NotIn", &["x"], &obj), "runtime error");
        // Exists: some output not null; "" and false exist
        assert!(one(".e", "Exists", &[], &obj));
        assert!(one(".f", "Exists", &[], &obj));
        assert!(!one(".n", "Exists", &[], &obj));
        assert!(!one(".missing", "Exists", &[], &obj));
        assert!(!one(".s.x", "Exists", &[], &obj), "runtime error");
        assert!(one("null, 1", "Exists", &[], &obj));
        // DoesNotExist is the negation
        assert!(one(".missing", "DoesNotExist", &[], &obj));
        assert!(one(".s.x", "DoesNotExist", &[], &obj));
        assert!(!one(".e", "DoesNotExist", &[], &obj));
        assert!(one(
            ".l[] | select(. == \"zzz\")",
            "DoesNotExist",
            &[],
            &obj
        ));
    }

    #[test]
    fn runtime_error_drops_outputs_already_given() {
        let obj = json!({"a": [{"b": "x"}, 5]});
        assert!(!one(".a[].b", "In", &["x"], &obj));
        assert!(one(".a[].b", "NotIn", &["x"], &obj));
        assert!(!one(".a[].b", "Exists", &[], &obj));
        let jaq = json!({"a": ["x", 1]});
        assert!(!one(".a[] | ascii_downcase", "In", &["x"], &jaq));
    }

    #[test]
    fn labels_and_annotations_must_all_match() {
        let spec = StageSelector {
            match_labels: Some(BTreeMap::from([
                ("app".to_owned(), "web".to_owned()),
                ("empty".to_owned(), String::new()),
            ])),
            match_annotations: Some(BTreeMap::from([("a".to_owned(), "1".to_owned())])),
            match_expressions: None,
        };
        let s = match Selector::compile(&spec, "spec.selector") {
            Ok(s) => s,
            Err(e) => panic!("{e:?}"),
        };
        let obj = |labels: Value, annotations: Value| json!({"metadata": {"labels": labels, "annotations": annotations}});
        assert!(s.matches(&obj(
            json!({"app": "web", "empty": "", "x": "y"}),
            json!({"a": "1"})
        )));
        assert!(
            !s.matches(&obj(json!({"app": "web"}), json!({"a": "1"}))),
            "empty value must be present"
        );
        assert!(!s.matches(&obj(json!({"app": "db", "empty": ""}), json!({"a": "1"}))));
        assert!(!s.matches(&obj(json!({"app": "web", "empty": ""}), json!({}))));
        assert!(!s.matches(&json!({})));
        let everything = Selector::compile(&StageSelector::default(), "spec.selector");
        assert!(everything.is_ok_and(|s| s.matches(&json!({}))));
    }

    #[test]
    fn cel_conditions() {
        let s = selector(vec![
            cel_item("self.spec.storageClassName == 'kwok-volume'"),
            cel_item("!has(self.metadata.deletionTimestamp)"),
            cel_item("!(self.status.phase in ['Bound', 'Released', 'Failed'])"),
        ]);
        let pv = |phase: &str| json!({"metadata": {}, "spec": {"storageClassName": "kwok-volume"}, "status": {"phase": phase}});
        assert!(s.matches(&pv("Pending")));
        assert!(!s.matches(&pv("Bound")));
        assert!(
            !s.matches(&json!({"metadata": {}, "spec": {"storageClassName": "kwok-volume"}})),
            "missing status: error, no match"
        );
        let mut deleting = pv("Pending");
        deleting["metadata"]["deletionTimestamp"] = json!("2006-01-02T15:04:05Z");
        assert!(!s.matches(&deleting));
        assert!(!selector(vec![cel_item("'not a bool'")]).matches(&json!({})));
        assert!(!selector(vec![cel_item("1 / 0 == 1")]).matches(&json!({})));
    }

    #[test]
    fn explicit_jq_form() {
        let item = SelectorExpression {
            jq: Some(SelectorJq {
                key: ".status.phase".to_owned(),
                operator: "In".to_owned(),
                values: Some(vec!["Running".to_owned()]),
            }),
            ..SelectorExpression::default()
        };
        let s = selector(vec![item]);
        assert!(s.matches(&json!({"status": {"phase": "Running"}})));
        assert!(!s.matches(&json!({"status": {"phase": "Pending"}})));
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let bad_jq_form = SelectorExpression {
            jq: Some(SelectorJq {
                key: ".a[".to_owned(),
                operator: "Within".to_owned(),
                values: None,
            }),
            ..SelectorExpression::default()
        };
        let both = SelectorExpression {
            cel: Some(ExpressionCel {
                expression: "true".to_owned(),
            }),
            ..req(".a", "Exists", &[])
        };
        let no_key = SelectorExpression {
            operator: Some("Exists".to_owned()),
            ..SelectorExpression::default()
        };
        assert_eq!(
            errors(vec![
                req(".ok", "In", &["x"]),
                req(".a[", "Exists", &[]),
                req(".a", "Bogus", &[]),
                req(".a", "Exists", &["x"]),
                req(".a", "In", &[]),
                cel_item("1 +"),
                SelectorExpression::default(),
                bad_jq_form,
                both,
                no_key,
                req(".a", "in", &["x"]),
            ]),
            [
                "spec.selector.matchExpressions[1].key",
                "spec.selector.matchExpressions[2].operator",
                "spec.selector.matchExpressions[3].values",
                "spec.selector.matchExpressions[4].values",
                "spec.selector.matchExpressions[5].cel.expression",
                "spec.selector.matchExpressions[6]",
                "spec.selector.matchExpressions[7].jq.key",
                "spec.selector.matchExpressions[7].jq.operator",
                "spec.selector.matchExpressions[8]",
                "spec.selector.matchExpressions[9].key",
                "spec.selector.matchExpressions[10].operator",
            ]
        );
        let empty_values = SelectorExpression {
            values: Some(Vec::new()),
            ..req(".a", "Exists", &[])
        };
        assert!(errors(vec![empty_values]).is_empty());
    }

    /// The corpus, as `build.rs` resolved it (`$KSTAGE_KWOK_DIR`).
    fn corpus_dir() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("KSTAGE_KWOK_DIR"))
    }

    /// The Stages of a corpus set: (name, compiled selector, the Stage). Files of another
    /// kind (the StorageClass) are skipped; a Stage that fails to parse or compile fails.
    fn stages(set: &str) -> Vec<(String, Selector, Stage)> {
        let dir = corpus_dir().join("stage").join(set);
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        paths.sort();
        let mut out = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if !text.lines().any(|l| l == "kind: Stage") {
                continue;
            }
            let stage = serde_saphyr::from_str::<Stage>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let Some(spec) = &stage.spec.selector else {
                continue;
            };
            match Selector::compile(spec, "spec.selector") {
                Ok(s) => out.push((stage.metadata.name.clone(), s, stage)),
                Err(e) => panic!("{}: {e:?}", path.display()),
            }
        }
        out
    }

    fn matching(set: &str, obj: &Value) -> Vec<String> {
        stages(set)
            .into_iter()
            .filter(|(_, s, stage)| {
                obj["kind"] == stage.spec.resource_ref.kind.as_str() && s.matches(obj)
            })
            .map(|(name, _, _)| name)
            .collect()
    }

    fn yaml(path: &std::path::Path) -> Value {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_saphyr::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    const SETS: [&str; 8] = [
        "node/fast",
        "node/heartbeat",
        "node/heartbeat-with-lease",
        "node/chaos",
        "pod/fast",
        "pod/general",
        "pod/chaos",
        "volume/fast",
    ];

    /// Every Stage of the corpus compiles and its jq keys run natively.
    #[test]
    fn corpus_stages_compile_natively() {
        let mut count = 0;
        for set in SETS {
            for (name, s, _) in stages(set) {
                count += 1;
                for r in s.requirements() {
                    assert!(r.key().is_native(), "{set}/{name}: {}", r.key().source());
                }
            }
        }
        assert_eq!(count, 19);
    }

    /// For every golden input, the Stages that match, their weights and their delay ranges
    /// (now = 2006-01-02T15:04:05Z) are those of the golden output.
    #[test]
    fn corpus_golden_outputs() {
        use crate::stage::value::{Delay, IntFrom};
        let now = crate::go::parse_go_time("2006-01-02T15:04:05Z").unwrap_or_default();
        let mut cases = 0;
        for set in SETS {
            let dir = corpus_dir().join("stage").join(set).join("testdata");
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for input in entries.flatten().map(|e| e.path()) {
                let Some(case) = input.to_str().and_then(|p| p.strip_suffix(".input.yaml")) else {
                    continue;
                };
                cases += 1;
                let obj = yaml(&input);
                let golden = yaml(std::path::Path::new(&format!("{case}.output.yaml")));
                let want: Vec<Value> = golden["stages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|s| json!({"stage": s["stage"], "weight": s["weight"], "delay": s["delay"]}))
                    .collect();
                let mut got = Vec::new();
                for (name, selector, stage) in stages(set) {
                    if obj["kind"] != stage.spec.resource_ref.kind.as_str()
                        || !selector.matches(&obj)
                    {
                        continue;
                    }
                    let weight = IntFrom::compile(
                        stage.spec.weight,
                        stage.spec.weight_from.as_ref(),
                        "spec.weightFrom",
                    )
                    .map(|w| w.get(&obj));
                    let delay = Delay::compile(stage.spec.delay.as_ref(), "spec.delay")
                        .ok()
                        .flatten()
                        .and_then(|d| d.range(&obj, now))
                        .map(|r| {
                            let mut ns = vec![r.min.num_nanoseconds()];
                            ns.extend(r.max.map(|m| m.num_nanoseconds()));
                            json!(ns)
                        });
                    got.push(
                        json!({"stage": name, "weight": weight.ok().flatten(), "delay": delay}),
                    );
                }
                assert_eq!(got, want, "{case}");
            }
        }
        assert_eq!(cases, 10);
    }

    #[test]
    fn volume_stages_select_by_phase() {
        let pvc = json!({"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "uid": "u"},
                         "spec": {"storageClassName": "kwok-volume", "accessModes": ["ReadWriteOnce"]},
                         "status": {"phase": "Pending"}});
        assert_eq!(matching("volume/fast", &pvc), ["pvc-provision"]);
        let pv = json!({"kind": "PersistentVolume", "metadata": {"name": "pv"},
                        "spec": {"storageClassName": "kwok-volume", "persistentVolumeReclaimPolicy": "Delete",
                                 "claimRef": {"name": "c"}},
                        "status": {"phase": "Released"}});
        assert_eq!(matching("volume/fast", &pv), ["pv-delete"]);
    }
}
