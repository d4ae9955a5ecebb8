//! Strategic merge patch: merge keys, directives, ordering and errors.

use serde_json::{Value, json};

use super::apply;
use crate::patch::{PatchError, StrategicError};

/// `patch` applied to `target`, an object of `kind`.
fn smp(kind: &str, target: Value, patch: Value) -> Value {
    try_smp(kind, target, patch).unwrap()
}

fn try_smp(kind: &str, target: Value, patch: Value) -> Result<Value, PatchError> {
    let target = match target {
        Value::Object(map) => map,
        _ => panic!("target must be an object"),
    };
    let patch = patch.as_object().cloned().unwrap_or_default();
    apply(target, &patch, kind).map(Value::Object)
}

/// The error of a failing patch, as (path, cause).
fn smp_error(kind: &str, target: Value, patch: Value) -> (String, StrategicError) {
    match try_smp(kind, target, patch) {
        Err(PatchError::Strategic { path, cause }) => (path, cause),
        other => panic!("expected a strategic error, got {other:?}"),
    }
}

fn pod_status(conditions: Value) -> Value {
    json!({"kind": "Pod", "status": {"phase": "Pending", "conditions": conditions}})
}

fn condition(type_: &str, status: &str) -> Value {
    json!({"type": type_, "status": status})
}

#[test]
fn maps_merge_and_null_deletes() {
    let target = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "name": "p"}});
    let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}, "annotations": {"x": "y"}}});
    assert_eq!(
        smp("Pod", target, patch),
        json!({"metadata": {"labels": {"b": "2", "c": "3"}, "annotations": {"x": "y"}, "name": "p"}})
    );
}

#[test]
fn pod_condition_by_type_keeps_the_others() {
    let target = pod_status(json!([
        condition("PodScheduled", "True"),
        condition("Initialized", "True"),
        condition("Ready", "False"),
    ]));
    let patch =
        json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Up"}]}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([
            condition("PodScheduled", "True"),
            condition("Initialized", "True"),
            {"type": "Ready", "status": "True", "reason": "Up"},
        ])
    );
}

#[test]
fn new_items_come_before_the_items_no_patched_item_follows() {
    // Kubernetes' order: an item the patch adds goes before the object's items that come
    // after no patched item; patched items keep their place among the object's items.
    let target = pod_status(json!([
        condition("PodScheduled", "True"),
        condition("Ready", "False")
    ]));
    let added = smp(
        "Pod",
        target.clone(),
        json!({"status": {"conditions": [condition("ContainersReady", "True")]}}),
    );
    assert_eq!(
        added["status"]["conditions"],
        json!([
            condition("ContainersReady", "True"),
            condition("PodScheduled", "True"),
            condition("Ready", "False"),
        ])
    );
    let updated_and_added = smp(
        "Pod",
        target,
        json!({"status": {"conditions": [condition("Ready", "True"), condition("ContainersReady", "True")]}}),
    );
    assert_eq!(
        updated_and_added["status"]["conditions"],
        json!([
            condition("PodScheduled", "True"),
            condition("Ready", "True"),
            condition("ContainersReady", "True"),
        ])
    );
}

#[test]
fn patch_order_wins_for_the_items_it_names() {
    // Kubernetes test "preserve the order from the patch in a merging list 2".
    let target = json!({"status": {"conditions": [
        {"type": "1"}, {"type": "2", "status": "b"}, {"type": "3"}
    ]}});
    let patch = json!({"status": {"conditions": [
        {"type": "3", "status": "c"}, {"type": "1", "status": "a"}
    ]}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([{"type": "2", "status": "b"}, {"type": "3", "status": "c"}, {"type": "1", "status": "a"}])
    );
}

#[test]
fn pod_ips_and_host_ips_merge_by_ip() {
    let target = json!({"status": {
        "podIPs": [{"ip": "10.0.0.1"}],
        "hostIPs": [{"ip": "192.168.0.1"}]
    }});
    let patch = json!({"status": {
        "podIPs": [{"ip": "fd00::1"}],
        "hostIPs": [{"ip": "192.168.0.1"}]
    }});
    let got = smp("Pod", target, patch);
    assert_eq!(
        got["status"]["podIPs"],
        json!([{"ip": "fd00::1"}, {"ip": "10.0.0.1"}])
    );
    assert_eq!(got["status"]["hostIPs"], json!([{"ip": "192.168.0.1"}]));
}

#[test]
fn container_statuses_are_replaced() {
    // PodStatus declares them `+listType=atomic` without patchStrategy.
    for field in [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ] {
        let target = json!({"status": {field: [
            {"name": "a", "ready": true, "restartCount": 0},
            {"name": "b", "ready": true, "restartCount": 0}
        ]}});
        let patch = json!({"status": {field: [{"name": "a", "ready": false}]}});
        assert_eq!(
            smp("Pod", target, patch)["status"][field],
            json!([{"name": "a", "ready": false}]),
            "{field}"
        );
    }
}

#[test]
fn node_conditions_and_addresses_merge_by_type() {
    let target = json!({"status": {
        "conditions": [condition("Ready", "False"), condition("MemoryPressure", "False")],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}],
        "images": [{"names": ["a"]}]
    }});
    let patch = json!({"status": {
        "conditions": [condition("Ready", "True")],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
        "images": [{"names": ["b"]}]
    }});
    let got = smp("Node", target, patch);
    assert_eq!(
        got["status"]["conditions"],
        json!([
            condition("Ready", "True"),
            condition("MemoryPressure", "False")
        ])
    );
    assert_eq!(
        got["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.9"}, {"type": "Hostname", "address": "n1"}])
    );
    assert_eq!(got["status"]["images"], json!([{"names": ["b"]}]));
}

#[test]
fn node_spec_taints_replace_and_pod_cidrs_merge() {
    let target = json!({"spec": {
        "taints": [{"key": "a", "effect": "NoSchedule"}],
        "podCIDRs": ["10.0.0.0/24"]
    }});
    let patch = json!({"spec": {
        "taints": [{"key": "b", "effect": "NoExecute"}],
        "podCIDRs": ["fd00::/64", "10.0.0.0/24"]
    }});
    let got = smp("Node", target, patch);
    assert_eq!(
        got["spec"]["taints"],
        json!([{"key": "b", "effect": "NoExecute"}])
    );
    assert_eq!(got["spec"]["podCIDRs"], json!(["fd00::/64", "10.0.0.0/24"]));
}

#[test]
fn owner_references_merge_by_uid() {
    let target = json!({"metadata": {"ownerReferences": [
        {"uid": "1", "kind": "ReplicaSet", "name": "rs"},
        {"uid": "2", "kind": "Node", "name": "n"}
    ]}});
    let patch = json!({"metadata": {"ownerReferences": [{"uid": "2", "controller": true}]}});
    assert_eq!(
        smp("Pod", target, patch)["metadata"]["ownerReferences"],
        json!([
            {"uid": "1", "kind": "ReplicaSet", "name": "rs"},
            {"uid": "2", "kind": "Node", "name": "n", "controller": true}
        ])
    );
}

#[test]
fn finalizers_are_a_set() {
    // Kubernetes test "unique scalars when merging lists".
    let target = json!({"metadata": {"finalizers": ["a", "b"]}});
    let patch = json!({"metadata": {"finalizers": ["b", "c"]}});
    assert_eq!(
        smp("Pod", target, patch)["metadata"]["finalizers"],
        json!(["a", "b", "c"])
    );
}

#[test]
fn containers_env_ports_mounts_and_volumes_merge_by_key() {
    let target = json!({"spec": {
        "containers": [
            {"name": "app", "image": "app:1",
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80, "name": "http"}],
             "volumeMounts": [{"mountPath": "/data", "name": "data"}],
             "args": ["--a", "--b"]},
            {"name": "sidecar", "image": "sidecar:1"}
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "a", "operator": "Exists"}]
    }});
    let patch = json!({"spec": {
        "containers": [{"name": "app", "image": "app:2",
            "env": [{"name": "B", "value": "3"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "volumeMounts": [{"mountPath": "/data", "readOnly": true}],
            "args": ["--c"]}],
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "tolerations": [{"key": "b", "operator": "Exists"}]
    }});
    let got = smp("Pod", target, patch);
    assert_eq!(
        got["spec"]["containers"],
        json!([
            {"name": "app", "image": "app:2",
             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}],
             "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
             "volumeMounts": [{"mountPath": "/data", "name": "data", "readOnly": true}],
             "args": ["--c"]},
            {"name": "sidecar", "image": "sidecar:1"}
        ])
    );
    assert_eq!(
        got["spec"]["volumes"],
        json!([{"name": "cache", "emptyDir": {}}, {"name": "data", "emptyDir": {}}])
    );
    assert_eq!(
        got["spec"]["tolerations"],
        json!([{"key": "b", "operator": "Exists"}])
    );
}

#[test]
fn init_and_ephemeral_containers_merge_by_name() {
    for field in ["initContainers", "ephemeralContainers"] {
        let target =
            json!({"spec": {field: [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let patch = json!({"spec": {field: [{"name": "b", "image": "2"}]}});
        assert_eq!(
            smp("Pod", target, patch)["spec"][field],
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]),
            "{field}"
        );
    }
}

#[test]
fn pod_templates_of_workloads_have_the_pod_rules() {
    let target = json!({
        "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}}},
        "status": {"conditions": [condition("Available", "False"), condition("Progressing", "True")]}
    });
    let patch = json!({
        "spec": {"template": {"spec": {"containers": [{"name": "b", "image": "2"}]}}},
        "status": {"conditions": [condition("Available", "True")]}
    });
    let got = smp("Deployment", target, patch);
    assert_eq!(
        got["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])
    );
    assert_eq!(
        got["status"]["conditions"],
        json!([
            condition("Available", "True"),
            condition("Progressing", "True")
        ])
    );

    let target = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]
    }}}}}});
    let patch = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "a", "image": "2"}]
    }}}}}});
    assert_eq!(
        smp("CronJob", target, patch)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"],
        json!([{"name": "a", "image": "2"}, {"name": "b", "image": "1"}])
    );
}

#[test]
fn service_ports_merge_by_port() {
    let target =
        json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
    let patch = json!({"spec": {"ports": [{"port": 443, "targetPort": 8443}]}});
    assert_eq!(
        smp("Service", target, patch)["spec"]["ports"],
        json!([{"port": 80, "name": "http"}, {"port": 443, "name": "https", "targetPort": 8443}])
    );
}

#[test]
fn unknown_kinds_replace_lists_but_know_metadata() {
    let target = json!({
        "metadata": {"finalizers": ["a"]},
        "status": {"conditions": [condition("Ready", "False"), condition("Synced", "True")]}
    });
    let patch = json!({
        "metadata": {"finalizers": ["b"]},
        "status": {"conditions": [condition("Ready", "True")]}
    });
    let got = smp("Widget", target, patch);
    assert_eq!(
        got["status"]["conditions"],
        json!([condition("Ready", "True")])
    );
    assert_eq!(got["metadata"]["finalizers"], json!(["b", "a"]));
}

#[test]
fn unknown_fields_of_known_kinds_are_replaced() {
    let target = json!({"spec": {"things": [{"name": "a"}], "nodeSelector": {"a": "1"}}});
    let patch = json!({"spec": {"things": [{"name": "b"}], "nodeSelector": {"b": "2"}}});
    let got = smp("Pod", target, patch);
    assert_eq!(got["spec"]["things"], json!([{"name": "b"}]));
    assert_eq!(got["spec"]["nodeSelector"], json!({"a": "1", "b": "2"}));
}

#[test]
fn patch_replace_in_a_map() {
    let target = json!({"status": {"phase": "Pending", "podIP": "10.0.0.1", "conditions": []}});
    let patch = json!({"status": {"$patch": "replace", "phase": "Running", "gone": null}});
    assert_eq!(
        smp("Pod", target.clone(), patch),
        json!({"status": {"phase": "Running"}})
    );
    // Kubernetes test "add key and delete all keys from map", at the top level.
    assert_eq!(
        smp("Pod", target, json!({"$patch": "replace", "kind": "Pod"})),
        json!({"kind": "Pod"})
    );
}

#[test]
fn patch_replace_in_a_list() {
    // Kubernetes test "delete all items from merging list" and its non-empty variant.
    let target = pod_status(json!([condition("A", "True"), condition("B", "True")]));
    let emptied = smp(
        "Pod",
        target.clone(),
        json!({"status": {"conditions": [{"$patch": "replace"}]}}),
    );
    assert_eq!(emptied["status"]["conditions"], json!([]));
    let replaced = smp(
        "Pod",
        target,
        json!({"status": {"conditions": [condition("C", "False"), {"$patch": "replace"}]}}),
    );
    assert_eq!(
        replaced["status"]["conditions"],
        json!([condition("C", "False")])
    );
}

#[test]
fn patch_delete_in_a_list_removes_every_match() {
    // Kubernetes tests "de-duplicate entries" / "delete all duplicate entries".
    let target = json!({"status": {"conditions": [
        {"type": "1"}, {"type": "1"}, {"type": "2", "status": "a"}, {"type": "3"}, {"type": "3"}
    ]}});
    let patch = json!({"status": {"conditions": [
        {"type": "1", "$patch": "delete"}, {"type": "3", "$patch": "delete"}, {"type": "4", "$patch": "delete"}
    ]}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([{"type": "2", "status": "a"}])
    );
}

#[test]
fn patch_delete_in_a_map_removes_it() {
    let target = json!({"spec": {"securityContext": {"runAsUser": 1}, "nodeName": "n"}});
    let patch = json!({"spec": {"securityContext": {"$patch": "delete"}, "hostname": {"$patch": "delete"}}});
    assert_eq!(
        smp("Pod", target.clone(), patch),
        json!({"spec": {"nodeName": "n"}})
    );
    assert_eq!(smp("Pod", target, json!({"$patch": "delete"})), json!({}));
}

#[test]
fn patch_merge_in_a_map_merges_but_not_in_a_list() {
    let target = json!({"spec": {"nodeName": "n"}});
    assert_eq!(
        smp(
            "Pod",
            target,
            json!({"spec": {"$patch": "merge", "hostname": "h"}})
        ),
        json!({"spec": {"nodeName": "n", "hostname": "h"}})
    );
    let (path, cause) = smp_error(
        "Pod",
        pod_status(json!([condition("A", "True")])),
        json!({"status": {"conditions": [{"type": "A", "$patch": "merge"}]}}),
    );
    assert_eq!(path, "status.conditions[0]");
    assert_eq!(cause, StrategicError::MergeDirectiveInList);
}

#[test]
fn unknown_directives_are_errors() {
    let (path, cause) = smp_error(
        "Pod",
        json!({"spec": {}}),
        json!({"spec": {"$patch": "frobnicate"}}),
    );
    assert_eq!(path, "spec");
    assert_eq!(
        cause,
        StrategicError::UnknownDirective("\"frobnicate\"".into())
    );
    let (path, _) = smp_error(
        "Pod",
        pod_status(json!([condition("A", "True")])),
        json!({"status": {"conditions": [condition("B", "True"), {"type": "A", "$patch": 1}]}}),
    );
    assert_eq!(path, "status.conditions[1]");
}

#[test]
fn set_element_order_orders_a_keyed_list() {
    let target = pod_status(json!([
        condition("A", "True"),
        condition("B", "True"),
        condition("C", "True")
    ]));
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "C"}, {"type": "A"}, {"type": "B"}],
        "conditions": [condition("A", "False")]
    }});
    assert_eq!(
        smp("Pod", target.clone(), patch)["status"]["conditions"],
        json!([
            condition("C", "True"),
            condition("A", "False"),
            condition("B", "True")
        ])
    );
    // Order alone, naming an item the object does not have (as in the Kubernetes test
    // "$setElementOrder contains item that is not present in the list to be merged"). C,
    // not named, goes before a named item only if it was before it in the object: last.
    let patch = json!({"status": {"$setElementOrder/conditions": [{"type": "B"}, {"type": "Z"}, {"type": "A"}]}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([
            condition("B", "True"),
            condition("A", "True"),
            condition("C", "True")
        ])
    );
}

#[test]
fn set_element_order_orders_a_primitive_list() {
    let target = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
    let patch = json!({"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"]}});
    assert_eq!(
        smp("Pod", target.clone(), patch)["metadata"]["finalizers"],
        json!(["c", "a", "b"])
    );
    // What `kubectl apply` sends to go from [a, b, c] to [b, d]: additions, deletions and
    // the order.
    let patch = json!({"metadata": {
        "$setElementOrder/finalizers": ["b", "d"],
        "finalizers": ["d"],
        "$deleteFromPrimitiveList/finalizers": ["a", "c"]
    }});
    assert_eq!(
        smp("Pod", target, patch)["metadata"]["finalizers"],
        json!(["b", "d"])
    );
}

#[test]
fn set_element_order_must_agree_with_the_patch_list() {
    let target = pod_status(json!([condition("A", "True"), condition("B", "True")]));
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "A"}, {"type": "B"}],
        "conditions": [condition("B", "False"), condition("A", "False")]
    }});
    let (path, cause) = smp_error("Pod", target.clone(), patch);
    assert_eq!(path, "status.conditions");
    assert_eq!(
        cause,
        StrategicError::SetElementOrderMismatch("conditions".into())
    );

    let (_, cause) = smp_error(
        "Pod",
        target.clone(),
        json!({"status": {"$setElementOrder/conditions": {"type": "A"}}}),
    );
    assert_eq!(
        cause,
        StrategicError::NotAList("$setElementOrder/conditions".into())
    );
    let (_, cause) = smp_error(
        "Pod",
        target,
        json!({"status": {"$setElementOrder/conditions": [{"status": "A"}]}}),
    );
    assert_eq!(cause, StrategicError::MissingMergeKey { key: "type" });
}

#[test]
fn retain_keys_clears_unlisted_fields() {
    let target = json!({"spec": {"volumes": [
        {"name": "v", "emptyDir": {}, "labels": {"a": "1"}}
    ]}});
    let patch = json!({"spec": {"volumes": [
        {"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}
    ]}});
    assert_eq!(
        smp("Pod", target.clone(), patch)["spec"]["volumes"],
        json!([{"name": "v", "hostPath": {"path": "/x"}}])
    );
    let patch = json!({"spec": {"volumes": [
        {"name": "v", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}
    ]}});
    let (path, cause) = smp_error("Pod", target.clone(), patch);
    assert_eq!(path, "spec.volumes[name=v]");
    assert_eq!(cause, StrategicError::NotInRetainKeys("hostPath".into()));
    let (_, cause) = smp_error("Pod", target, json!({"spec": {"$retainKeys": "name"}}));
    assert_eq!(cause, StrategicError::NotAList("$retainKeys".into()));
}

#[test]
fn delete_from_primitive_list() {
    let target = json!({"metadata": {"finalizers": ["a", "b", "a", "c"]}});
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "z"]}});
    assert_eq!(
        smp("Pod", target.clone(), patch)["metadata"]["finalizers"],
        json!(["b", "c"])
    );
    // Against a missing list: nothing (Kubernetes would store ["a"]).
    let patch = json!({"metadata": {"$deleteFromPrimitiveList/missing": ["a"]}});
    assert_eq!(smp("Pod", target.clone(), patch), target);
    let (_, cause) = smp_error(
        "Pod",
        target,
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
    );
    assert_eq!(
        cause,
        StrategicError::NotAList("$deleteFromPrimitiveList/finalizers".into())
    );
}

#[test]
fn items_without_merge_key_are_errors() {
    let target = pod_status(json!([condition("A", "True")]));
    let (path, cause) = smp_error(
        "Pod",
        target.clone(),
        json!({"status": {"conditions": [{"status": "False"}]}}),
    );
    assert_eq!(path, "status.conditions");
    assert_eq!(cause, StrategicError::MissingMergeKey { key: "type" });
    let (path, cause) = smp_error(
        "Pod",
        target,
        json!({"status": {"conditions": [{"$patch": "delete"}]}}),
    );
    assert_eq!(path, "status.conditions[0]");
    assert_eq!(cause, StrategicError::MissingMergeKey { key: "type" });
    let (path, _) = smp_error(
        "Pod",
        pod_status(json!([{"status": "True"}])),
        json!({"status": {"conditions": [condition("A", "True")]}}),
    );
    assert_eq!(path, "status.conditions[0]");
}

#[test]
fn mixed_lists_and_lists_of_lists_are_errors() {
    let (path, cause) = smp_error(
        "Pod",
        json!({"metadata": {"finalizers": ["a"]}}),
        json!({"metadata": {"finalizers": [{"name": "b"}]}}),
    );
    assert_eq!(path, "metadata.finalizers");
    assert_eq!(cause, StrategicError::MixedListTypes);
    let (_, cause) = smp_error(
        "Pod",
        json!({"metadata": {"finalizers": [["a"]]}}),
        json!({"metadata": {"finalizers": [["b"]]}}),
    );
    assert_eq!(cause, StrategicError::ListOfLists);
    let (_, cause) = smp_error(
        "Pod",
        json!({"metadata": {"finalizers": [{"a": 1}]}}),
        json!({"metadata": {"finalizers": [{"a": 2}]}}),
    );
    assert_eq!(cause, StrategicError::NoMergeKey);
}

#[test]
fn errors_render_the_path_of_keyed_items() {
    let target = json!({"spec": {"containers": [{"name": "app", "env": [{"name": "A"}]}]}});
    let patch = json!({"spec": {"containers": [{"name": "app", "env": [{"value": "x"}]}]}});
    let error = try_smp("Pod", target, patch).unwrap_err();
    assert_eq!(
        error.to_string(),
        "strategic merge patch failed at spec.containers[name=app].env: list item has no merge key \"name\""
    );
}

#[test]
fn type_changes_replace() {
    let target = json!({"status": {"conditions": [condition("A", "True")], "phase": {"x": 1}}});
    let patch = json!({"status": {"conditions": {"a": 1}, "phase": "Running"}});
    assert_eq!(
        smp("Pod", target, patch),
        json!({"status": {"conditions": {"a": 1}, "phase": "Running"}})
    );
}

#[test]
fn new_values_are_stored_without_nulls_or_directives() {
    let target = json!({"metadata": {"name": "p"}});
    let patch = json!({
        "status": {"phase": "Running", "reason": null, "conditions": [
            condition("Ready", "True"), {"$patch": "replace"}, {"type": "X", "$patch": "delete"}
        ]},
        "spec": {"$patch": "delete"},
        "metadata": {"labels": {"a": "1", "b": null}}
    });
    assert_eq!(
        smp("Pod", target, patch),
        json!({
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "status": {"phase": "Running", "conditions": [condition("Ready", "True")]}
        })
    );
}

#[test]
fn merging_into_an_empty_list_adds_everything() {
    let target = pod_status(json!([]));
    let patch = json!({"status": {"conditions": [condition("A", "True"), condition("B", "True")]}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([condition("A", "True"), condition("B", "True")])
    );
    let target = pod_status(json!([condition("A", "True")]));
    let patch = json!({"status": {"conditions": []}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([condition("A", "True")])
    );
}

#[test]
fn duplicate_patch_items_merge_in_turn() {
    let target = pod_status(json!([condition("A", "True")]));
    let patch = json!({"status": {"conditions": [
        {"type": "B", "status": "1"}, {"type": "B", "reason": "r"}
    ]}});
    assert_eq!(
        smp("Pod", target, patch)["status"]["conditions"],
        json!([{"type": "B", "status": "1", "reason": "r"}, condition("A", "True")])
    );
}
