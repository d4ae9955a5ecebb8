//! Kubernetes label selectors (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`,
//! `!a`): what the embedded API server filters lists and watches by, and what
//! `--manage-nodes-with-*-selector` select nodes by.

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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}})
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
}
