//! JSON patch (RFC 6902, `application/json-patch+json`): applying it with the `json-patch`
//! crate, and KWOK's `root` wrapping of its operations.

use json_patch::PatchOperation;
use serde::Deserialize;
use serde_json::Value;

use super::error::PatchError;

/// Parse a JSON patch document into its operations.
pub(crate) fn parse(patch: &Value) -> Result<Vec<PatchOperation>, PatchError> {
    let Some(ops) = patch.as_array() else {
        return Err(PatchError::InvalidJsonPatch {
            reason: format!("expected an array of operations, got {}", json_type(patch)),
        });
    };
    ops.iter()
        .enumerate()
        .map(|(index, op)| {
            PatchOperation::deserialize(op).map_err(|e| PatchError::InvalidJsonPatchOp {
                index,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// Apply the JSON patch `patch` to `target`. Operations apply in order; the first failing
/// one fails the whole patch.
pub(crate) fn apply(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = parse(patch)?;
    let mut doc = target.clone();
    // `patch_unsafe`: on error the half-patched copy is dropped, so the crate's undo
    // machinery (which panics if an undo fails) is not needed.
    json_patch::patch_unsafe(&mut doc, &ops).map_err(|e| op_failed(&ops, &e))?;
    Ok(doc)
}

/// A [`PatchError`] naming the failed operation.
fn op_failed(ops: &[PatchOperation], error: &json_patch::PatchError) -> PatchError {
    let (op, from) = match ops.get(error.operation) {
        Some(PatchOperation::Add(_)) => ("add", None),
        Some(PatchOperation::Remove(_)) => ("remove", None),
        Some(PatchOperation::Replace(_)) => ("replace", None),
        Some(PatchOperation::Move(op)) => ("move", Some(op.from.as_str())),
        Some(PatchOperation::Copy(op)) => ("copy", Some(op.from.as_str())),
        Some(PatchOperation::Test(_)) | None => ("test", None),
    };
    let reason = match (&error.kind, from) {
        (json_patch::PatchErrorKind::InvalidFromPointer, Some(from)) => {
            format!("\"from\" path {from} does not exist")
        }
        (json_patch::PatchErrorKind::InvalidPointer, _) => {
            "path does not exist (or is not a valid index)".to_owned()
        }
        (kind, _) => kind.to_string(),
    };
    PatchError::JsonPatchOpFailed {
        index: error.operation,
        op,
        path: error.path.as_str().to_owned(),
        reason,
    }
}

/// KWOK's `root` for a JSON patch: prefix every operation's `path` (and `from`, which KWOK
/// forgets) with `/<root>`.
pub(crate) fn wrap_root(root: &str, rendered: Value) -> Result<Value, PatchError> {
    let error = |reason: String| PatchError::Root {
        root: root.to_owned(),
        reason,
    };
    let Value::Array(mut ops) = rendered else {
        return Err(error(format!(
            "a JSON patch must be an array of operations, got {}",
            json_type(&rendered)
        )));
    };
    let prefix = format!("/{}", escape_token(root));
    for (index, op) in ops.iter_mut().enumerate() {
        let Some(op) = op.as_object_mut() else {
            return Err(error(format!("operation {index} is not an object")));
        };
        for field in ["path", "from"] {
            let Some(pointer) = op.get_mut(field) else {
                if field == "path" {
                    return Err(error(format!("operation {index} has no \"path\"")));
                }
                continue;
            };
            let Some(text) = pointer.as_str() else {
                return Err(error(format!(
                    "the \"{field}\" of operation {index} is not a string"
                )));
            };
            if !text.is_empty() && !text.starts_with('/') {
                return Err(error(format!(
                    "the \"{field}\" of operation {index} ({text:?}) is not a JSON pointer"
                )));
            }
            *pointer = Value::String(format!("{prefix}{text}"));
        }
    }
    Ok(Value::Array(ops))
}

/// Escape one reference token of a JSON pointer (RFC 6901: `~` → `~0`, `/` → `~1`).
fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The JSON type of a value, for messages.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected error"
)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
        })
    }

    #[test]
    fn applies_all_operations_in_order() {
        let patch = json!([
            {"op": "test", "path": "/status/phase", "value": "Pending"},
            {"op": "replace", "path": "/status/phase", "value": "Running"},
            {"op": "add", "path": "/status/conditions/-", "value": {"type": "Initialized"}},
            {"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/name"},
            {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/b"},
            {"op": "remove", "path": "/status/conditions/0"},
        ]);
        let got = apply(&pod(), &patch).unwrap();
        assert_eq!(
            got,
            json!({
                "metadata": {"name": "p", "labels": {"b": "1", "name": "p"}},
                "status": {"phase": "Running", "conditions": [{"type": "Initialized"}]}
            })
        );
    }

    #[test]
    fn failed_test_names_the_operation() {
        let patch = json!([
            {"op": "replace", "path": "/status/phase", "value": "Running"},
            {"op": "test", "path": "/status/phase", "value": "Pending"},
        ]);
        let err = apply(&pod(), &patch).unwrap_err();
        assert_eq!(
            err,
            PatchError::JsonPatchOpFailed {
                index: 1,
                op: "test",
                path: "/status/phase".into(),
                reason: "value did not match".into(),
            }
        );
    }

    #[test]
    fn bad_paths_are_errors_not_panics() {
        for (patch, index) in [
            (json!([{"op": "remove", "path": "/status/nope"}]), 0),
            (json!([{"op": "remove", "path": "/status/conditions/7"}]), 0),
            (json!([{"op": "remove", "path": "/status/conditions/-"}]), 0),
            (json!([{"op": "add", "path": "/a/b/c", "value": 1}]), 0),
            (
                json!([{"op": "replace", "path": "/metadata/name/x", "value": 1}]),
                0,
            ),
            (json!([{"op": "test", "path": "/x", "value": 1}]), 0),
            (
                json!([
                    {"op": "add", "path": "/x", "value": 1},
                    {"op": "move", "from": "/nope", "path": "/y"}
                ]),
                1,
            ),
            (
                json!([{"op": "move", "from": "/status", "path": "/status/x"}]),
                0,
            ),
            (json!([{"op": "remove", "path": ""}]), 0),
        ] {
            match apply(&pod(), &patch) {
                Err(PatchError::JsonPatchOpFailed { index: got, .. }) => {
                    assert_eq!(got, index, "{patch}");
                }
                other => panic!("{patch}: {other:?}"),
            }
        }
        let err = apply(
            &pod(),
            &json!([{"op": "move", "from": "/nope", "path": "/y"}]),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "JSON patch operation 0 (move /y) failed: \"from\" path /nope does not exist"
        );
    }

    #[test]
    fn malformed_documents_are_errors() {
        assert!(matches!(
            apply(&pod(), &json!({"op": "add"})),
            Err(PatchError::InvalidJsonPatch { .. })
        ));
        for (patch, index) in [
            (json!([{"op": "frobnicate", "path": "/a"}]), 0),
            (
                json!([{"op": "remove", "path": "/a"}, {"op": "add", "path": "/a"}]),
                1,
            ),
            (json!([{"op": "add", "path": "a", "value": 1}]), 0),
            (json!([{"path": "/a"}]), 0),
            (json!(["remove /a"]), 0),
        ] {
            match apply(&pod(), &patch) {
                Err(PatchError::InvalidJsonPatchOp { index: got, .. }) => assert_eq!(got, index),
                other => panic!("{patch}: {other:?}"),
            }
        }
    }

    #[test]
    fn empty_patch_changes_nothing() {
        assert_eq!(apply(&pod(), &json!([])).unwrap(), pod());
    }

    #[test]
    fn wrap_root_prefixes_path_and_from() {
        let rendered = json!([
            {"op": "replace", "path": "/phase", "value": "Running"},
            {"op": "copy", "from": "/podIP", "path": "/podIPs/0/ip"},
            {"op": "add", "path": "", "value": {}},
        ]);
        assert_eq!(
            wrap_root("status", rendered).unwrap(),
            json!([
                {"op": "replace", "path": "/status/phase", "value": "Running"},
                {"op": "copy", "from": "/status/podIP", "path": "/status/podIPs/0/ip"},
                {"op": "add", "path": "/status", "value": {}},
            ])
        );
        assert_eq!(
            wrap_root("a/b~c", json!([{"op": "remove", "path": "/x"}])).unwrap(),
            json!([{"op": "remove", "path": "/a~1b~0c/x"}])
        );
    }

    #[test]
    fn wrap_root_rejects_what_is_not_a_json_patch() {
        for rendered in [
            json!({"phase": "Running"}),
            json!([1]),
            json!([{"op": "remove"}]),
            json!([{"op": "remove", "path": 3}]),
            json!([{"op": "remove", "path": "phase"}]),
            json!([{"op": "move", "from": "x", "path": "/y"}]),
        ] {
            assert!(
                matches!(
                    wrap_root("status", rendered.clone()),
                    Err(PatchError::Root { .. })
                ),
                "{rendered}"
            );
        }
    }
}
