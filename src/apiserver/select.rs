//! Label and field selectors of list and watch requests, parsed once per request.
//!
//! Label selectors take Kubernetes' full syntax (`a=b`, `a==b`, `a!=b`, `a in (x,y)`,
//! `a notin (x)`, `a`, `!a`). Field selectors take `=`, `==` and `!=` on the fields a
//! real API server supports for the kind (`metadata.name` and `metadata.namespace` for
//! every kind, `spec.nodeName` and `status.phase` for pods ...); any other field is
//! refused, as a real server does.

use serde_json::Value;

/// Why a selector is refused (400 Bad Request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// A parsed label selector; the empty one matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

impl LabelSelector {
    /// Parse `s`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `object`'s labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.matches_map(object.pointer("/metadata/labels"))
    }

    /// Whether a map of strings (labels, annotations) satisfies every requirement.
    pub fn matches_map(&self, map: Option<&Value>) -> bool {
        let labels = map.and_then(Value::as_object);
        self.requirements.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key)).and_then(Value::as_str);
            match op {
                LabelOp::Equals(v) => value == Some(v.as_str()),
                LabelOp::NotEquals(v) => value != Some(v.as_str()),
                LabelOp::In(set) => value.is_some_and(|x| set.iter().any(|s| s == x)),
                LabelOp::NotIn(set) => value.is_none_or(|x| !set.iter().any(|s| s == x)),
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
            }
        })
    }
}

/// Split on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_requirement(part: &str) -> Result<(String, LabelOp), SelectorError> {
    let bad = |why: &str| SelectorError(format!("unable to parse requirement {part:?}: {why}"));
    if let Some(key) = part.strip_prefix('!') {
        return Ok((check_key(key.trim(), part)?, LabelOp::DoesNotExist));
    }
    for (token, negated) in [(" notin ", true), (" in ", false)] {
        if let Some((key, set)) = part.split_once(token) {
            let set = set.trim();
            let inner = set
                .strip_prefix('(')
                .and_then(|s| s.strip_suffix(')'))
                .ok_or_else(|| bad("expected a parenthesised set of values"))?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let key = check_key(key.trim(), part)?;
            let op = if negated {
                LabelOp::NotIn(values)
            } else {
                LabelOp::In(values)
            };
            return Ok((key, op));
        }
    }
    for (token, make) in [
        ("!=", LabelOp::NotEquals as fn(String) -> LabelOp),
        ("==", LabelOp::Equals),
        ("=", LabelOp::Equals),
    ] {
        if let Some((key, value)) = part.split_once(token) {
            return Ok((check_key(key.trim(), part)?, make(value.trim().to_owned())));
        }
    }
    Ok((check_key(part, part)?, LabelOp::Exists))
}

fn check_key(key: &str, part: &str) -> Result<String, SelectorError> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(key.to_owned())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement {part:?}: invalid label key {key:?}"
        )))
    }
}

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
            let pointer = format!("/{}", field.replace('.', "/"));
            requirements.push((pointer, value.trim().to_owned(), negated));
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
        let pointer = format!("/{}", field.replace('.', "/"));
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
        "Event" => {
            field.starts_with("involvedObject.")
                || field.starts_with("regarding.")
                || matches!(
                    field,
                    "reason" | "type" | "source" | "reportingComponent" | "reportingController"
                )
        }
        _ => false,
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
    fn label_selectors_follow_kubernetes_syntax() {
        let p = pod(json!({"app": "web", "tier": "front"}));
        for (selector, expected) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("missing notin (x)", true),
            ("missing in (x)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier in (front),!missing", true),
            ("app=web,tier=back", false),
        ] {
            let s = LabelSelector::parse(selector).expect(selector);
            assert_eq!(s.matches(&p), expected, "{selector}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
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
}
