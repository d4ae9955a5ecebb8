//! Stage selection cost: a typical pending pod matched against every selector of KWOK's
//! `pod/general` Stage set (6 Stages, 17 jq requirements), plus the weight and delay of the
//! Stage that matches, and one jq requirement forced through jaq for comparison, in this
//! process and in the sandbox (the budgeted path every program jaq runs takes in kstage).
//!
//! The corpus is read from `$KSTAGE_KWOK_DIR`, else `../shared/kwok` next to the crate
//! (resolved by `build.rs`).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use kstage::go::parse_go_time;
use kstage::rng::Rng;
use kstage::stage::selector::{Requirement, Selector};
use kstage::stage::v1alpha1::Stage;
use kstage::stage::value::{Delay, IntFrom};
use serde_json::{Value, json};

fn corpus() -> PathBuf {
    PathBuf::from(env!("KSTAGE_KWOK_DIR"))
}

struct Compiled {
    selector: Selector,
    weight: IntFrom,
    delay: Option<Delay>,
}

fn pod_general() -> Vec<Compiled> {
    let dir = corpus().join("stage/pod/general");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let stage: Stage =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let spec = stage.spec.selector.unwrap_or_default();
            Compiled {
                selector: Selector::compile(&spec, "spec.selector")
                    .unwrap_or_else(|e| panic!("{}: {e:?}", path.display())),
                weight: IntFrom::compile(
                    stage.spec.weight,
                    stage.spec.weight_from.as_ref(),
                    "spec.weightFrom",
                )
                .unwrap_or_else(|e| panic!("{e}")),
                delay: Delay::compile(stage.spec.delay.as_ref(), "spec.delay")
                    .unwrap_or_else(|e| panic!("{e:?}")),
            }
        })
        .collect()
}

/// A pod as a Deployment creates it and the scheduler binds it: Pending, scheduled, no IP.
fn pending_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d4b9c8f6d-x2k9p",
            "namespace": "default",
            "uid": "0b7d5c1e-6a0c-4a53-9f1e-2d1c3b4a5e6f",
            "resourceVersion": "12345",
            "creationTimestamp": "2006-01-02T15:04:05Z",
            "generateName": "web-7d4b9c8f6d-",
            "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6d"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6d",
                "uid": "5e1b2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e", "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [{
                "name": "web", "image": "nginx:1.27",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}
            }],
            "nodeName": "kwok-node-0",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "status": {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [{
                "type": "PodScheduled", "status": "True",
                "lastProbeTime": null, "lastTransitionTime": "2006-01-02T15:04:05Z"
            }]
        }
    })
}

fn bench_select(c: &mut Criterion) {
    let stages = pod_general();
    assert_eq!(stages.len(), 6);
    let pod = pending_pod();
    let matched: Vec<usize> = (0..stages.len())
        .filter(|i| stages[*i].selector.matches(&pod))
        .collect();
    assert_eq!(matched.len(), 1, "exactly pod-create matches a pending pod");
    let now = parse_go_time("2006-01-02T15:04:05Z").unwrap_or_default();

    let mut group = c.benchmark_group("select");
    group.bench_function("pod-general/6-selectors", |b| {
        b.iter(|| {
            let pod = black_box(&pod);
            stages.iter().filter(|s| s.selector.matches(pod)).count()
        })
    });
    group.bench_function("pod-general/6-selectors+weight+delay", |b| {
        let mut rng = Rng::seeded(1);
        b.iter(|| {
            let pod = black_box(&pod);
            let mut chosen = None;
            for s in stages.iter().filter(|s| s.selector.matches(pod)) {
                let weight = s.weight.get(pod);
                let delay = s.delay.as_ref().and_then(|d| d.sample(pod, now, &mut rng));
                chosen = Some((weight, delay));
            }
            chosen
        })
    });
    let via_jaq = Requirement::compile(
        ".status.conditions | map(select(.type == \"PodScheduled\")) | .[].status",
        "In",
        Some(&["True".to_owned()]),
        "bench",
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(!via_jaq.key().is_native() && via_jaq.matches(&pod));
    group.bench_function("one-requirement-via-jaq", |b| {
        b.iter(|| via_jaq.matches(black_box(&pod)))
    });
    // The same requirement under the budget: evaluated in the sandbox's child process
    // (what `kstage` does for every program the native evaluator does not run). From
    // here on every such program of this process goes there.
    kstage::stage::sandbox::install(
        PathBuf::from(env!("CARGO_BIN_EXE_kstage")),
        kstage::stage::sandbox::Limits::default(),
    );
    assert!(via_jaq.matches(&pod), "the sandbox answers as jaq does");
    group.bench_function("one-requirement-via-jaq-in-the-sandbox", |b| {
        b.iter(|| via_jaq.matches(black_box(&pod)))
    });
    group.finish();
}

criterion_group!(benches, bench_select);
criterion_main!(benches);
