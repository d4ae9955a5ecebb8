//! Template rendering cost: KWOK's `pod/general` `pod-ready` statusTemplate rendered for a
//! pod and read back as JSON (what the engine does for each patch step), plus its two halves.
//!
//! The template and the pod come from the KWOK corpus (`../shared/kwok`, or
//! `KSTAGE_KWOK_DIR`). Run with `cargo bench --bench render`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use criterion::{Criterion, criterion_group, criterion_main};
use kstage::clock::ManualClock;
use kstage::template::{Renderer, StageEnv};
use kstage::yaml;

/// `$KSTAGE_KWOK_DIR`, else `../shared/kwok` (resolved by `build.rs`).
fn kwok_dir() -> PathBuf {
    PathBuf::from(env!("KSTAGE_KWOK_DIR"))
}

fn load(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {} (set KSTAGE_KWOK_DIR): {e}", path.display()));
    yaml::to_json(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn render(c: &mut Criterion) {
    let set = kwok_dir().join("stage/pod/general");
    let stage = load(&set.join("pod-ready.yaml"));
    let src = stage["spec"]["next"]["statusTemplate"]
        .as_str()
        .expect("pod-ready has a statusTemplate")
        .to_owned();
    let pod = load(&set.join("testdata/pod-ready.input.yaml"));

    let start = Utc
        .with_ymd_and_hms(2006, 1, 2, 15, 4, 5)
        .single()
        .expect("valid time");
    let env = StageEnv::new(Arc::new(ManualClock::new(start)), start, "v0.7.0");
    let renderer = Renderer::new(Arc::new(env));
    let template = renderer
        .parse("pod-ready/spec.next.statusTemplate", &src)
        .expect("template parses");
    let text = template.render(&pod).expect("template renders");

    c.bench_function("pod-ready render+to_json", |b| {
        b.iter(|| template.render_json(black_box(&pod)).expect("renders"));
    });
    c.bench_function("pod-ready render", |b| {
        b.iter(|| template.render(black_box(&pod)).expect("renders"));
    });
    c.bench_function("pod-ready to_json", |b| {
        b.iter(|| yaml::to_json(black_box(&text)).expect("valid yaml"));
    });
    c.bench_function("pod-ready parse", |b| {
        b.iter(|| {
            renderer
                .parse("pod-ready", black_box(&src))
                .expect("parses")
        });
    });
}

criterion_group!(benches, render);
criterion_main!(benches);
