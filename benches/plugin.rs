//! Plugin calls through the wasmtime host, marshalling included (the pod serialised to
//! JSON per call, as the engine does), beside kstage's built-in answer to the same
//! question:
//! - `classify` of a 503 on the example pod: a WAT fixture (always), and the C
//!   `retry-budget` and Zig `exp-backoff` examples when built (`plugins/build c zig`);
//! - `select` and `render` for the example pod: the Rust `chaos-router` example when built.
//!
//! Plugins are read from `$KSTAGE_PLUGIN_OUT` (default `target/plugins`, resolved by
//! `build.rs`, where `plugins/build` writes them); a missing one is reported and left out.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use criterion::{Criterion, criterion_group, criterion_main};
use kstage::clock::SystemClock;
use kstage::plugin::{HostEnv, Plugin, Runtime, Settings, convert, types};
use kstage::retry::{BuiltinClassifier, Classifier};
use kstage::rng::Rng;
use serde_json::Value;

#[path = "../tests/it/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;

fn plugins_dir() -> PathBuf {
    PathBuf::from(env!("KSTAGE_PLUGIN_OUT"))
}

fn load(runtime: &Arc<Runtime>, name: &str, bytes: &[u8]) -> Arc<Plugin> {
    let env = HostEnv::new(
        name,
        Arc::new(SystemClock),
        Arc::new(Mutex::new(Rng::seeded(1))),
    );
    Plugin::load(
        runtime,
        name,
        Path::new(name),
        bytes,
        Settings::default(),
        env,
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// An example plugin by file name, if it was built.
fn example(runtime: &Arc<Runtime>, file: &str) -> Option<Arc<Plugin>> {
    let path = plugins_dir().join(file);
    match std::fs::read(&path) {
        Ok(bytes) => Some(load(runtime, file, &bytes)),
        Err(_) => {
            eprintln!("{} not built: left out", path.display());
            None
        }
    }
}

fn pod() -> Value {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/objects/pods.yaml"),
    )
    .expect("the example pods");
    kstage::yaml::documents(&text)
        .expect("YAML")
        .into_iter()
        .next()
        .expect("a pod")
}

fn classify(c: &mut Criterion) {
    let runtime = Runtime::new().expect("wasmtime starts");
    let pod = pod();
    let failure = kstage::bench::sample_failure(&pod);
    let mut group = c.benchmark_group("classify");
    group.bench_function("built-in", |b| {
        b.iter(|| BuiltinClassifier.classify(black_box(&failure)))
    });
    // What marshalling cost through `Value`'s `Display`, for comparison.
    group.bench_function("marshal via Display", |b| {
        b.iter(|| black_box(&pod).to_string())
    });
    group.bench_function("marshal only", |b| {
        b.iter(|| convert::failure(black_box(&failure)))
    });
    let fixture = fixtures::Fixture::classifier(fixtures::Classify::Policy).build();
    let mut plugins = vec![("wat fixture", load(&runtime, "fixture", &fixture))];
    plugins.extend(example(&runtime, "retry-budget.wasm").map(|p| ("c retry-budget", p)));
    plugins.extend(example(&runtime, "exp-backoff.wasm").map(|p| ("zig exp-backoff", p)));
    for (name, plugin) in plugins {
        group.bench_function(name, |b| {
            b.iter(|| plugin.classify(&convert::failure(black_box(&failure))))
        });
    }
    group.finish();
}

fn select_and_render(c: &mut Criterion) {
    let runtime = Runtime::new().expect("wasmtime starts");
    let Some(plugin) = example(&runtime, "chaos-router.wasm") else {
        return;
    };
    let pod = pod();
    let candidates = vec![
        types::Candidate {
            name: "pod-running".into(),
            weight: 1,
            delay_ms: None,
        },
        types::Candidate {
            name: "pod-chaos".into(),
            weight: 1,
            delay_ms: None,
        },
    ];
    let template = r#"{"status": {"phase": "Running"}}"#;
    let mut group = c.benchmark_group("chaos-router");
    group.bench_function("select", |b| {
        b.iter(|| plugin.select(&convert::object_json(black_box(&pod)), &candidates))
    });
    group.bench_function("render", |b| {
        b.iter(|| {
            plugin.render(
                "pod-running",
                template,
                &convert::object_json(black_box(&pod)),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, classify, select_and_render);
criterion_main!(benches);
