//! The public API of `patch`: types, defaults, `root`, apply and no-op detection across
//! patch types, and property tests.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "finalizers": ["a"]},
        "spec": {"nodeName": "n", "containers": [{"name": "app", "image": "app:1"}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False"}
            ]
        }
    })
}

#[test]
fn patch_type_names_and_content_types() {
    for (patch_type, name, content_type) in [
        (PatchType::Json, "json", "application/json-patch+json"),
        (PatchType::Merge, "merge", "application/merge-patch+json"),
        (
            PatchType::Strategic,
            "strategic",
            "application/strategic-merge-patch+json",
        ),
        (PatchType::Apply, "apply", "application/apply-patch+yaml"),
    ] {
        assert_eq!(patch_type.content_type(), content_type);
        assert_eq!(patch_type.stage_name(), name);
        assert_eq!(patch_type.to_string(), name);
        assert_eq!(PatchType::from_stage_name(name), Some(patch_type));
        assert_eq!(PatchType::from_content_type(content_type), Some(patch_type));
    }
    assert_eq!(
        PatchType::from_content_type("Application/Merge-Patch+JSON; charset=utf-8"),
        Some(PatchType::Merge)
    );
    assert_eq!(PatchType::from_content_type("application/json"), None);
    assert_eq!(PatchType::from_content_type(""), None);
    assert_eq!(PatchType::from_stage_name("Strategic"), None);
    assert_eq!(PatchType::from_stage_name(""), None);
}

#[test]
fn builtin_kinds_default_to_strategic() {
    for (api_group, kind) in [
        ("v1", "Pod"),
        ("v1", "Node"),
        ("", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "Job"),
        ("coordination.k8s.io/v1", "Lease"),
        ("storage.k8s.io/v1", "VolumeAttachment"),
        ("events.k8s.io/v1", "Event"),
        ("resource.k8s.io/v1beta1", "ResourceClaim"),
    ] {
        assert!(is_builtin(api_group, kind), "{api_group} {kind}");
        assert_eq!(default_patch_type(api_group, kind), PatchType::Strategic);
    }
    for (api_group, kind) in [
        ("kwok.x-k8s.io/v1alpha1", "Stage"),
        ("gateway.networking.k8s.io/v1", "Gateway"),
        ("snapshot.storage.k8s.io/v1", "VolumeSnapshot"),
        ("metrics.k8s.io/v1beta1", "PodMetrics"),
        ("example.com/v1", "Widget"),
    ] {
        assert!(!is_builtin(api_group, kind), "{api_group} {kind}");
        assert_eq!(default_patch_type(api_group, kind), PatchType::Merge);
    }
}

#[test]
fn wrap_root_for_merge_like_patches() {
    let rendered = json!({"phase": "Running"});
    for patch_type in [PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
        assert_eq!(
            wrap_root(Some("status"), patch_type, rendered.clone()).unwrap(),
            json!({"status": {"phase": "Running"}})
        );
    }
    assert_eq!(
        wrap_root(None, PatchType::Merge, rendered.clone()).unwrap(),
        rendered
    );
    assert_eq!(
        wrap_root(Some(""), PatchType::Json, rendered.clone()).unwrap(),
        rendered
    );
}

#[test]
fn wrap_root_for_json_patches() {
    let rendered = json!([{"op": "replace", "path": "/phase", "value": "Running"}]);
    let wrapped = wrap_root(Some("status"), PatchType::Json, rendered).unwrap();
    assert_eq!(
        wrapped,
        json!([{"op": "replace", "path": "/status/phase", "value": "Running"}])
    );
    let patched = apply(&pod(), PatchType::Json, &wrapped, "Pod").unwrap();
    assert_eq!(patched["status"]["phase"], "Running");
}

#[test]
fn wrapped_status_patch_applies_under_root() {
    let rendered = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    let patch = wrap_root(Some("status"), PatchType::Strategic, rendered).unwrap();
    let patched = apply(&pod(), PatchType::Strategic, &patch, "Pod").unwrap();
    assert_eq!(
        patched["status"]["conditions"],
        json!([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}])
    );
}

#[test]
fn each_patch_type_applies() {
    let json_patch = json!([{"op": "replace", "path": "/status/phase", "value": "Running"}]);
    assert_eq!(
        apply(&pod(), PatchType::Json, &json_patch, "Pod").unwrap()["status"]["phase"],
        "Running"
    );

    // Merge replaces lists, strategic merges them by key.
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    assert_eq!(
        apply(&pod(), PatchType::Merge, &patch, "Pod").unwrap()["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}])
    );
    assert_eq!(
        apply(&pod(), PatchType::Strategic, &patch, "Pod").unwrap()["status"]["conditions"],
        json!([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}])
    );

    // Apply: strategic rules for a known kind, merge rules for an unknown one; metadata
    // lists merge for both.
    let applied = json!({
        "metadata": {"finalizers": ["b"]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    });
    let got = apply(&pod(), PatchType::Apply, &applied, "Pod").unwrap();
    assert_eq!(
        got["status"]["conditions"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(got["metadata"]["finalizers"], json!(["b", "a"]));
    assert_eq!(got["spec"], pod()["spec"]);
    let got = apply(&pod(), PatchType::Apply, &applied, "Widget").unwrap();
    assert_eq!(
        got["status"]["conditions"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(got["metadata"]["finalizers"], json!(["b", "a"]));
}

#[test]
fn apply_leaves_the_target_alone() {
    let target = pod();
    let patch = json!({"status": {"phase": "Running"}});
    for patch_type in [PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
        let _ = apply(&target, patch_type, &patch, "Pod").unwrap();
        assert_eq!(target, pod());
    }
}

#[test]
fn object_patches_must_be_objects() {
    for patch_type in [PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
        let err = apply(&pod(), patch_type, &json!([1]), "Pod").unwrap_err();
        assert_eq!(
            err,
            PatchError::NotAnObject {
                patch_type,
                found: "an array"
            }
        );
        assert_eq!(
            err.to_string(),
            format!("a {patch_type} patch must be a JSON object, got an array")
        );
        assert!(changes(&pod(), patch_type, &json!("x"), "Pod").is_err());
        assert_eq!(
            apply(&json!(3), patch_type, &json!({}), "Pod").unwrap_err(),
            PatchError::TargetNotAnObject { found: "a number" }
        );
        assert!(changes(&json!(3), patch_type, &json!({}), "Pod").is_err());
        assert_eq!(
            apply(&Value::Null, patch_type, &json!({"a": 1}), "Pod").unwrap(),
            json!({"a": 1})
        );
    }
}

#[test]
fn no_op_patches_change_nothing() {
    let same = json!({"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}});
    assert!(!changes(&pod(), PatchType::Strategic, &same, "Pod").unwrap());
    assert!(!changes(&pod(), PatchType::Apply, &same, "Pod").unwrap());
    // Merge replaces the list, which loses PodScheduled: a change.
    assert!(changes(&pod(), PatchType::Merge, &same, "Pod").unwrap());
    let same_merge =
        json!({"metadata": {"name": "p", "gone": null}, "status": {"phase": "Pending"}});
    assert!(!changes(&pod(), PatchType::Merge, &same_merge, "Pod").unwrap());
    assert!(!changes(&pod(), PatchType::Strategic, &same_merge, "Pod").unwrap());
    let same_finalizer = json!({"metadata": {"finalizers": ["a"]}});
    assert!(!changes(&pod(), PatchType::Strategic, &same_finalizer, "Pod").unwrap());

    let different = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    for patch_type in [PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
        assert!(changes(&pod(), patch_type, &different, "Pod").unwrap());
        assert!(
            changes(
                &pod(),
                patch_type,
                &json!({"metadata": {"name": null}}),
                "Pod"
            )
            .unwrap()
        );
        assert!(!changes(&pod(), patch_type, &json!({}), "Pod").unwrap());
    }
    // Reordering a merged list is a change: the API server would store the new order.
    let reordered = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}
    ]}});
    assert!(changes(&pod(), PatchType::Strategic, &reordered, "Pod").unwrap());
}

#[test]
fn json_patch_no_op_detection() {
    let test_only = json!([{"op": "test", "path": "/status/phase", "value": "Pending"}]);
    assert!(!changes(&pod(), PatchType::Json, &test_only, "Pod").unwrap());
    let same_value = json!([
        {"op": "test", "path": "/status/phase", "value": "Pending"},
        {"op": "replace", "path": "/status/phase", "value": "Pending"}
    ]);
    assert!(!changes(&pod(), PatchType::Json, &same_value, "Pod").unwrap());
    let guarded = json!([
        {"op": "test", "path": "/status/phase", "value": "Pending"},
        {"op": "replace", "path": "/status/phase", "value": "Running"}
    ]);
    assert!(changes(&pod(), PatchType::Json, &guarded, "Pod").unwrap());
    let failing = json!([
        {"op": "test", "path": "/status/phase", "value": "Running"},
        {"op": "replace", "path": "/status/phase", "value": "Succeeded"}
    ]);
    assert!(matches!(
        changes(&pod(), PatchType::Json, &failing, "Pod"),
        Err(PatchError::JsonPatchOpFailed {
            index: 0,
            op: "test",
            ..
        })
    ));
    assert!(!changes(&pod(), PatchType::Json, &json!([]), "Pod").unwrap());
}

#[test]
fn finalizer_ops_are_json_patches_that_apply() {
    let change = super::FinalizerChange {
        add: &["b"],
        remove: &["a"],
        empty: false,
    };
    let ops = finalizer_ops(&["a".to_owned()], &change);
    let patched = apply(&pod(), PatchType::Json, &Value::Array(ops), "Pod").unwrap();
    assert_eq!(patched["metadata"]["finalizers"], json!(["b"]));
}

/// Keys of generated objects: few, so patches and targets overlap.
const KEYS: &str = "[a-d]";

/// Keys that also hit the strategic merge directives and the Pod merge-key table.
const SMP_KEYS: &str = "[a-b]|type|ip|status|conditions|podIPs|metadata|finalizers|\\$patch|\\$retainKeys|\\$setElementOrder/(conditions|finalizers)|\\$deleteFromPrimitiveList/finalizers";

/// Small JSON values with keys from `keys`.
fn json_value_with(keys: &'static str) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (0..4i64).prop_map(Value::from),
        "[a-c]|Ready|replace|delete|merge".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(keys, inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    json_value_with(KEYS)
}

fn json_object_with(keys: &'static str) -> impl Strategy<Value = Value> {
    prop::collection::btree_map(keys, json_value_with(keys), 0..5)
        .prop_map(|map| Value::Object(map.into_iter().collect()))
}

fn json_object() -> impl Strategy<Value = Value> {
    json_object_with(KEYS)
}

/// A pod status with conditions of a few types, for keyed-list properties.
fn pod_with_conditions() -> impl Strategy<Value = Value> {
    let condition = (
        "[A-D]",
        prop::option::of("True|False"),
        prop::option::of("[xy]"),
    )
        .prop_map(|(type_, status, reason)| {
            let mut condition = json!({"type": type_});
            if let Some(status) = status {
                condition["status"] = json!(status);
            }
            if let Some(reason) = reason {
                condition["reason"] = json!(reason);
            }
            condition
        });
    (
        prop::collection::vec(condition, 0..5),
        prop::option::of("Pending|Running"),
    )
        .prop_map(|(conditions, phase)| {
            let mut unique: Vec<Value> = Vec::new();
            for condition in conditions {
                if !unique.iter().any(|c| c["type"] == condition["type"]) {
                    unique.push(condition);
                }
            }
            let mut status = json!({"conditions": unique});
            if let Some(phase) = phase {
                status["phase"] = json!(phase);
            }
            json!({"status": status})
        })
}

proptest! {
    #[test]
    fn merge_patch_is_idempotent(target in json_object(), patch in json_object()) {
        let once = apply(&target, PatchType::Merge, &patch, "Widget").unwrap();
        let twice = apply(&once, PatchType::Merge, &patch, "Widget").unwrap();
        prop_assert_eq!(&twice, &once);
        prop_assert!(!changes(&once, PatchType::Merge, &patch, "Widget").unwrap());
    }

    #[test]
    fn merge_changes_iff_apply_differs(target in json_object(), patch in json_object()) {
        let applied = apply(&target, PatchType::Merge, &patch, "Widget").unwrap();
        prop_assert_eq!(
            changes(&target, PatchType::Merge, &patch, "Widget").unwrap(),
            applied != target
        );
    }

    #[test]
    fn strategic_changes_iff_apply_differs(target in pod_with_conditions(), patch in pod_with_conditions()) {
        let applied = apply(&target, PatchType::Strategic, &patch, "Pod").unwrap();
        prop_assert_eq!(
            changes(&target, PatchType::Strategic, &patch, "Pod").unwrap(),
            applied != target
        );
    }

    #[test]
    fn strategic_patch_of_conditions_is_idempotent(target in pod_with_conditions(), patch in pod_with_conditions()) {
        let once = apply(&target, PatchType::Strategic, &patch, "Pod").unwrap();
        let twice = apply(&once, PatchType::Strategic, &patch, "Pod").unwrap();
        prop_assert_eq!(&twice, &once);
        // Every patched condition is in the result with the patch's fields.
        for condition in patch["status"]["conditions"].as_array().into_iter().flatten() {
            let found = once["status"]["conditions"]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["type"] == condition["type"]));
            prop_assert!(found.is_some());
            for (key, value) in condition.as_object().into_iter().flatten() {
                prop_assert_eq!(&found.and_then(|c| c.get(key)), &Some(value));
            }
        }
    }

    #[test]
    fn strategic_directives_never_panic(
        target in json_object_with(SMP_KEYS),
        patch in json_object_with(SMP_KEYS),
        kind in "Pod|Node|Widget",
    ) {
        let target = json!({"metadata": target.clone(), "status": target});
        let patch = json!({"metadata": patch.clone(), "status": patch});
        match apply(&target, PatchType::Strategic, &patch, &kind) {
            Ok(applied) => prop_assert_eq!(
                changes(&target, PatchType::Strategic, &patch, &kind).unwrap(),
                applied != target
            ),
            Err(error) => {
                let strategic = matches!(error, PatchError::Strategic { .. });
                prop_assert!(strategic, "{}", error);
            }
        }
    }

    #[test]
    fn owned_and_borrowed_patches_agree(
        target in json_object_with(SMP_KEYS),
        patch in json_object_with(SMP_KEYS),
        kind in "Pod|Node|Widget",
    ) {
        // Moving the patch's values into the object gives what copying them gives.
        let target = json!({"metadata": target.clone(), "status": target});
        let patch = json!({"metadata": patch.clone(), "status": patch});
        for patch_type in [PatchType::Json, PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
            let borrowed = apply(&target, patch_type, &patch, &kind).map_err(|e| e.to_string());
            let owned = apply_owned_patch(target.clone(), patch_type, patch.clone(), &kind)
                .map_err(|e| e.to_string());
            prop_assert_eq!(owned, borrowed);
        }
    }

    #[test]
    fn patches_never_panic(target in json_object(), patch in json_value(), kind in "Pod|Node|Widget") {
        // Arbitrary documents may be rejected, but never panic; and `changes` agrees with
        // `apply` whenever `apply` succeeds.
        for patch_type in [PatchType::Json, PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
            match apply(&target, patch_type, &patch, &kind) {
                Ok(applied) => prop_assert_eq!(
                    changes(&target, patch_type, &patch, &kind).unwrap(),
                    applied != target
                ),
                Err(_) => prop_assert!(changes(&target, patch_type, &patch, &kind).is_err()),
            }
        }
    }
}

#[test]
fn owned_patches_drop_nulls_and_directives_like_borrowed_ones() {
    let target = json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}});
    let patch = json!({"status": {
        "phase": "Running",
        "podIP": null,
        "conditions": [{"type": "Ready", "status": "True", "reason": null}],
        "containerStatuses": [{"$patch": "replace"}, {"name": "c", "state": {"x": null}}],
        "extra": {"$patch": "delete"},
        "nested": {"$retainKeys": ["a"], "a": {"b": null, "c": 1}}
    }});
    let borrowed = apply(&target, PatchType::Strategic, &patch, "Pod").unwrap();
    let owned = apply_owned_patch(target, PatchType::Strategic, patch, "Pod").unwrap();
    assert_eq!(owned, borrowed);
    assert_eq!(
        owned["status"],
        json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c", "state": {}}],
            "nested": {"a": {"c": 1}}
        })
    );
}
