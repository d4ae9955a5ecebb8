//! JSON micro-benchmarks: what the engine does to every object it reads from a remote
//! API server (parse a write's answer or a watch event, serialise it to pack the cache,
//! clone it), on a real kube-apiserver's answer to a pod status patch (2 KB;
//! `$KSTAGE_TRANSCRIPTS/12-patch-status-strategic.json`).
//!
//! kstage's objects are sorted maps (serde_json without `preserve_order`, see
//! Cargo.toml). To compare with insertion-ordered maps, run it again with
//! `--features preserve-order`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;

/// The answer's body, as the server sent it (compact JSON).
fn answer() -> Vec<u8> {
    let path =
        std::path::Path::new(env!("KSTAGE_TRANSCRIPTS")).join("12-patch-status-strategic.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (set KSTAGE_TRANSCRIPTS)", path.display()));
    let transcript: Value = serde_json::from_str(&text).expect("a transcript is JSON");
    let body = &transcript["response"]["body"];
    assert_eq!(body["kind"], "Pod", "the answer is a pod");
    serde_json::to_vec(body).expect("serialises")
}

fn json(c: &mut Criterion) {
    let bytes = answer();
    let pod: Value = serde_json::from_slice(&bytes).expect("parses");
    let order = if cfg!(feature = "preserve-order") {
        "insertion-ordered"
    } else {
        "sorted"
    };
    let mut group = c.benchmark_group(format!("pod answer, {} bytes, {order} maps", bytes.len()));
    group.bench_function("parse", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&bytes)).expect("parses"))
    });
    group.bench_function("serialise", |b| {
        b.iter(|| serde_json::to_vec(black_box(&pod)).expect("serialises"))
    });
    group.bench_function("clone", |b| b.iter(|| black_box(&pod).clone()));
    group.finish();
}

criterion_group!(benches, json);
criterion_main!(benches);
