//! The JSON-patch operations of a Stage's `finalizers` step, as KWOK computes them
//! (`pkg/utils/lifecycle/finalizers.go`, `finalizersModify`).
//!
//! - `empty`, or a `remove` that removes every finalizer: one
//!   `remove /metadata/finalizers` (only if the object has finalizers);
//! - other removals: `remove /metadata/finalizers/<i>`, highest index first, so each
//!   index is still valid when its operation runs;
//! - additions to an object without finalizers (or just emptied): one
//!   `add /metadata/finalizers` with the whole list; otherwise one
//!   `add /metadata/finalizers/-` per finalizer not already there.
//!
//! Two fixes over KWOK, which change nothing for steps that name each finalizer once:
//! a finalizer listed twice in `add` is added once (KWOK adds it twice), and a finalizer
//! both removed and added by a partial removal is added back at the end (KWOK checks the
//! additions against the finalizers from before the removal, so it stays removed).

use serde_json::{Value, json};

/// A change of an object's finalizers, as a Stage's `finalizers` step says it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FinalizerChange<'a> {
    /// Finalizers to add.
    pub add: &'a [&'a str],
    /// Finalizers to remove.
    pub remove: &'a [&'a str],
    /// Remove every finalizer (before adding).
    pub empty: bool,
}

/// The pointer of the finalizer list.
const FINALIZERS: &str = "/metadata/finalizers";

/// The JSON-patch operations that apply `change` to an object whose finalizers are
/// `current`; empty when there is nothing to send.
pub fn finalizer_ops(current: &[String], change: &FinalizerChange<'_>) -> Vec<Value> {
    let mut additions: Vec<&str> = Vec::with_capacity(change.add.len());
    for item in change.add {
        if !additions.contains(item) {
            additions.push(item);
        }
    }
    let removals: &[&str] = change.remove;

    let mut ops = Vec::new();
    let mut kept: Vec<&str> = current.iter().map(String::as_str).collect();
    let mut empty = change.empty;
    if !empty && !removals.is_empty() {
        let removed: Vec<usize> = (0..current.len())
            .rev()
            .filter(|&index| removals.contains(&current[index].as_str()))
            .collect();
        if removed.len() == current.len() {
            empty = true;
        } else {
            ops.extend(
                removed
                    .iter()
                    .map(|index| json!({"op": "remove", "path": format!("{FINALIZERS}/{index}")})),
            );
            kept.retain(|finalizer| !removals.contains(finalizer));
        }
    }
    if empty {
        if !current.is_empty() {
            ops.push(json!({"op": "remove", "path": FINALIZERS}));
        }
        kept.clear();
    }
    if additions.is_empty() {
        return ops;
    }
    if kept.is_empty() {
        ops.push(json!({"op": "add", "path": FINALIZERS, "value": additions}));
    } else {
        ops.extend(
            additions
                .iter()
                .filter(|finalizer| !kept.contains(finalizer))
                .map(|finalizer| json!({"op": "add", "path": format!("{FINALIZERS}/-"), "value": finalizer})),
        );
    }
    ops
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected error"
)]
mod tests {
    use super::*;
    use crate::patch::{PatchType, apply};

    fn change<'a>(add: &'a [&'a str], remove: &'a [&'a str], empty: bool) -> FinalizerChange<'a> {
        FinalizerChange { add, remove, empty }
    }

    fn current(values: &[&str]) -> Vec<String> {
        values.iter().map(|value| (*value).to_owned()).collect()
    }

    /// The finalizers after sending `ops` to an object that has `current`.
    fn after(current: &[String], ops: Vec<Value>) -> Vec<String> {
        let mut object = json!({"metadata": {"name": "x"}});
        if !current.is_empty() {
            object["metadata"]["finalizers"] = json!(current);
        }
        let patched = apply(&object, PatchType::Json, &Value::Array(ops), "Pod").unwrap();
        serde_json::from_value(patched["metadata"]["finalizers"].clone()).unwrap_or_default()
    }

    #[test]
    fn add_to_an_object_without_finalizers_adds_the_list() {
        let ops = finalizer_ops(&[], &change(&["kwok.x-k8s.io/fake", "b"], &[], false));
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/metadata/finalizers", "value": ["kwok.x-k8s.io/fake", "b"]})
            ]
        );
        assert_eq!(after(&[], ops), current(&["kwok.x-k8s.io/fake", "b"]));
    }

    #[test]
    fn add_to_existing_finalizers_appends_the_missing_ones() {
        let now = current(&["a"]);
        let ops = finalizer_ops(&now, &change(&["a", "b", "c"], &[], false));
        assert_eq!(
            ops,
            vec![
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": "b"}),
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": "c"}),
            ]
        );
        assert_eq!(after(&now, ops), current(&["a", "b", "c"]));
    }

    #[test]
    fn adding_what_is_there_sends_nothing() {
        assert!(finalizer_ops(&current(&["a", "b"]), &change(&["b"], &[], false)).is_empty());
        assert!(finalizer_ops(&current(&["a"]), &FinalizerChange::default()).is_empty());
    }

    #[test]
    fn remove_some_removes_by_index_from_the_end() {
        let now = current(&["a", "b", "c", "b"]);
        let ops = finalizer_ops(&now, &change(&[], &["b", "z"], false));
        assert_eq!(
            ops,
            vec![
                json!({"op": "remove", "path": "/metadata/finalizers/3"}),
                json!({"op": "remove", "path": "/metadata/finalizers/1"}),
            ]
        );
        assert_eq!(after(&now, ops), current(&["a", "c"]));
    }

    #[test]
    fn remove_all_removes_the_list() {
        let now = current(&["a", "b"]);
        let ops = finalizer_ops(&now, &change(&[], &["b", "a"], false));
        assert_eq!(
            ops,
            vec![json!({"op": "remove", "path": "/metadata/finalizers"})]
        );
        assert!(after(&now, ops).is_empty());
    }

    #[test]
    fn remove_from_nothing_sends_nothing() {
        assert!(finalizer_ops(&[], &change(&[], &["a"], false)).is_empty());
        assert!(finalizer_ops(&current(&["a"]), &change(&[], &["b"], false)).is_empty());
    }

    #[test]
    fn empty_removes_the_list_then_adds() {
        let now = current(&["a", "b"]);
        assert_eq!(
            finalizer_ops(&now, &change(&[], &[], true)),
            vec![json!({"op": "remove", "path": "/metadata/finalizers"})]
        );
        let ops = finalizer_ops(&now, &change(&["c"], &["a"], true));
        assert_eq!(
            ops,
            vec![
                json!({"op": "remove", "path": "/metadata/finalizers"}),
                json!({"op": "add", "path": "/metadata/finalizers", "value": ["c"]}),
            ]
        );
        assert_eq!(after(&now, ops), current(&["c"]));
        assert!(finalizer_ops(&[], &change(&[], &[], true)).is_empty());
    }

    #[test]
    fn removing_everything_and_adding_re_creates_the_list() {
        let now = current(&["a"]);
        let ops = finalizer_ops(&now, &change(&["a", "b"], &["a"], false));
        assert_eq!(
            ops,
            vec![
                json!({"op": "remove", "path": "/metadata/finalizers"}),
                json!({"op": "add", "path": "/metadata/finalizers", "value": ["a", "b"]}),
            ]
        );
        assert_eq!(after(&now, ops), current(&["a", "b"]));
    }

    #[test]
    fn partial_remove_then_add() {
        let now = current(&["a", "b", "c"]);
        let ops = finalizer_ops(&now, &change(&["d", "b"], &["b"], false));
        assert_eq!(
            ops,
            vec![
                json!({"op": "remove", "path": "/metadata/finalizers/1"}),
                // KWOK would skip "b" (it was there before the removal) and lose it.
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": "d"}),
                json!({"op": "add", "path": "/metadata/finalizers/-", "value": "b"}),
            ]
        );
        assert_eq!(after(&now, ops), current(&["a", "c", "d", "b"]));
    }

    #[test]
    fn duplicate_additions_are_added_once() {
        assert_eq!(
            finalizer_ops(&[], &change(&["a", "a"], &[], false)),
            vec![json!({"op": "add", "path": "/metadata/finalizers", "value": ["a"]})]
        );
        assert_eq!(
            finalizer_ops(&current(&["x"]), &change(&["a", "a"], &[], false)),
            vec![json!({"op": "add", "path": "/metadata/finalizers/-", "value": "a"})]
        );
    }
}
