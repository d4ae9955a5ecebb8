//! Patch micro-benchmarks: the status patch of a pod-ready Stage under each patch type,
//! no-op detection, and finalizer operations.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kstage::patch::{FinalizerChange, PatchType, apply, changes, finalizer_ops};
use serde_json::{Value, json};

/// A scheduled, not yet running Pod with two containers.
fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0", "namespace": "default", "uid": "7d1c",
            "labels": {"app": "web"}, "finalizers": ["kwok.x-k8s.io/fake"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "a1"}]
        },
        "spec": {
            "nodeName": "kwok-node-0",
            "containers": [
                {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}],
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "sidecar", "image": "sidecar:1"}
            ],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        }
    })
}

/// What KWOK's pod-ready Stage renders under `root: status`.
fn ready_status() -> Value {
    let now = "2026-01-01T00:00:01Z";
    let condition =
        |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now});
    json!({"status": {
        "phase": "Running",
        "podIP": "10.0.0.7",
        "podIPs": [{"ip": "10.0.0.7"}],
        "hostIP": "192.168.0.2",
        "hostIPs": [{"ip": "192.168.0.2"}],
        "startTime": now,
        "conditions": [
            condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")
        ],
        "containerStatuses": [
            {"name": "app", "image": "app:1", "ready": true, "restartCount": 0, "started": true,
             "state": {"running": {"startedAt": now}}},
            {"name": "sidecar", "image": "sidecar:1", "ready": true, "restartCount": 0, "started": true,
             "state": {"running": {"startedAt": now}}}
        ]
    }})
}

fn patch_types(c: &mut Criterion) {
    let pod = pod();
    let patch = ready_status();
    let mut group = c.benchmark_group("apply_ready_status");
    for patch_type in [PatchType::Merge, PatchType::Strategic, PatchType::Apply] {
        group.bench_function(patch_type.stage_name(), |b| {
            b.iter(|| apply(black_box(&pod), patch_type, black_box(&patch), "Pod"));
        });
    }
    let json_patch = json!([
        {"op": "test", "path": "/status/phase", "value": "Pending"},
        {"op": "replace", "path": "/status/phase", "value": "Running"},
        {"op": "add", "path": "/status/podIP", "value": "10.0.0.7"},
        {"op": "add", "path": "/status/conditions/-", "value": {"type": "Ready", "status": "True"}}
    ]);
    group.bench_function("json", |b| {
        b.iter(|| {
            apply(
                black_box(&pod),
                PatchType::Json,
                black_box(&json_patch),
                "Pod",
            )
        });
    });
    group.finish();
}

fn no_op_detection(c: &mut Criterion) {
    let patch = ready_status();
    let ready = apply(&pod(), PatchType::Strategic, &patch, "Pod").unwrap_or_default();
    let mut group = c.benchmark_group("changes_when_already_ready");
    for patch_type in [PatchType::Merge, PatchType::Strategic] {
        group.bench_function(patch_type.stage_name(), |b| {
            b.iter(|| changes(black_box(&ready), patch_type, black_box(&patch), "Pod"));
        });
    }
    group.finish();
}

fn finalizers(c: &mut Criterion) {
    let current: Vec<String> = (0..8).map(|i| format!("example.com/f{i}")).collect();
    let change = FinalizerChange {
        add: &["kwok.x-k8s.io/fake", "example.com/f3"],
        remove: &["example.com/f1", "example.com/f6"],
        empty: false,
    };
    c.bench_function("finalizer_ops", |b| {
        b.iter(|| finalizer_ops(black_box(&current), black_box(&change)));
    });
}

criterion_group!(benches, patch_types, no_op_detection, finalizers);
criterion_main!(benches);
