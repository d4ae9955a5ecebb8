//! JSON merge patch (RFC 7396, `application/merge-patch+json`): applied with the
//! `json-patch` crate, plus a no-op check that does not build the result.

use serde_json::{Map, Value};

/// Apply the merge patch `patch` (an object) to `target`; a target that is not an object
/// is replaced by one, as RFC 7396 says.
pub(crate) fn apply(target: Value, patch: &Map<String, Value>) -> Value {
    let mut doc = match target {
        Value::Object(_) => target,
        _ => Value::Object(Map::new()),
    };
    // Key by key, so the patch is not cloned into a `Value` for `json_patch::merge`.
    merge_into(&mut doc, patch);
    doc
}

/// Merge each key of `patch` into `doc`, an object.
fn merge_into(doc: &mut Value, patch: &Map<String, Value>) {
    let Value::Object(map) = doc else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            json_patch::merge(map.entry(key.as_str()).or_insert(Value::Null), value);
        }
    }
}

/// Whether applying the merge patch `patch` to `target` would change it; exactly
/// `apply(target, patch) != target`, without building the result.
pub(crate) fn changes(target: &Value, patch: &Map<String, Value>) -> bool {
    let Value::Object(target) = target else {
        return true;
    };
    patch
        .iter()
        .any(|(key, value)| match (target.get(key), value) {
            (None, Value::Null) => false,
            (None, _) | (Some(_), Value::Null) => true,
            (Some(current), Value::Object(patch)) => changes(current, patch),
            (Some(current), value) => current != value,
        })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected error"
)]
mod tests {
    use serde_json::json;

    use super::*;

    fn merged(target: Value, patch: Value) -> Value {
        apply(target, patch.as_object().unwrap())
    }

    #[test]
    fn rfc7396_semantics() {
        let target = json!({
            "metadata": {"labels": {"a": "1", "b": "2"}},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready"}, {"type": "Initialized"}]}
        });
        let patch = json!({
            "metadata": {"labels": {"a": null, "c": "3"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": {"x": null}}
        });
        assert_eq!(
            merged(target, patch),
            json!({
                "metadata": {"labels": {"b": "2", "c": "3"}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "podIP": {}}
            })
        );
    }

    #[test]
    fn non_object_target_becomes_an_object() {
        assert_eq!(merged(json!(null), json!({"a": 1})), json!({"a": 1}));
        assert_eq!(merged(json!([1]), json!({})), json!({}));
    }

    #[test]
    fn changes_detects_no_ops() {
        let target = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
        for (patch, expected) in [
            (json!({}), false),
            (json!({"a": {"b": 1}}), false),
            (json!({"a": {"c": [1, 2]}, "d": "x"}), false),
            (json!({"z": null}), false),
            (json!({"a": {"z": null}}), false),
            (json!({"a": {"b": 2}}), true),
            (json!({"a": {"c": [2, 1]}}), true),
            (json!({"d": null}), true),
            (json!({"z": {}}), true),
            (json!({"d": {}}), true),
            (json!({"a": {"b": {"x": null}}}), true),
        ] {
            let patch = patch.as_object().unwrap();
            assert_eq!(changes(&target, patch), expected, "{patch:?}");
            assert_eq!(
                apply(target.clone(), patch) != target,
                expected,
                "{patch:?}"
            );
        }
    }
}
