//! The Go example (`hash-router`) called 100,000 times in a row on the same warm
//! instance, with large, varied objects (many labels and annotations, long strings with
//! escapes and non-ASCII text) and candidate lists, every answer checked against the
//! plugin's rules computed here independently. Go's allocator and garbage collector run
//! thousands of cycles inside one instance meanwhile: a corrupted heap shows as a wrong
//! answer, a trap or an error, and a leak as memory past the default limit.
//!
//! It once trapped after tens to hundreds of calls (`cannot leave component instance`):
//! a collection ended inside `cabi_realloc` while kstage wrote a call's arguments, and
//! read the wall clock through WASI, which the component model forbids at that moment.
//! The Go SDK's glue now runs the collector only inside the plugin's code (see
//! plugins/sdk/go/README.md, *Memory*).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kstage::plugin::Settings;
use kstage::plugin::types::{Candidate, Selection};
use serde_json::{Map, Value, json};

const CALLS: usize = 100_000;

/// splitmix64: a small, seeded generator for the inputs.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, pool: &'a [String]) -> &'a str {
        &pool[self.below(pool.len() as u64) as usize]
    }
}

/// Strings of 0 to 1,500 characters, among them quotes, backslashes, control
/// characters, accents, CJK and emoji (JSON escapes and multi-byte UTF-8).
fn text_pool(generator: &mut Gen) -> Vec<String> {
    const PIECES: [&str; 12] = [
        "a", "Z", "0", "-", ".", "/", "\"", "\\", "\n", "é", "漢", "🦀",
    ];
    (0..512)
        .map(|_| {
            let len = generator.below(1_500);
            (0..len)
                .map(|_| PIECES[generator.below(PIECES.len() as u64) as usize])
                .collect()
        })
        .collect()
}

/// Keys as Kubernetes writes them: letters, digits, `-`, `.`, `/`.
fn key_pool(generator: &mut Gen) -> Vec<String> {
    (0..256)
        .map(|i| {
            let len = 1 + generator.below(60);
            let body: String = (0..len)
                .map(|_| {
                    b"abcdefghijklmnopqrstuvwxyz0123456789-./"[generator.below(39) as usize] as char
                })
                .collect();
            format!("k{i}{body}")
        })
        .collect()
}

fn fnv1a(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The weighted pick of the plugin's README, written out again.
fn weighted(candidates: &[Candidate], point: u64) -> &Candidate {
    let total: u64 = candidates
        .iter()
        .filter(|c| c.weight > 0)
        .map(|c| c.weight as u64)
        .sum();
    if total == 0 {
        return &candidates[(point % candidates.len() as u64) as usize];
    }
    let mut point = point % total;
    for c in candidates.iter().filter(|c| c.weight > 0) {
        if point < c.weight as u64 {
            return c;
        }
        point -= c.weight as u64;
    }
    unreachable!("point < total")
}

/// How the object's key is chosen.
enum Key {
    NamespaceName,
    Labels,
    Annotation(String),
    Missing,
}

/// One call: the object, the candidates, and the answer the rules give.
struct Call {
    object: String,
    candidates: Vec<Candidate>,
    expect: Result<Option<Selection>, &'static str>,
}

fn make_call(generator: &mut Gen, texts: &[String], keys: &[String]) -> Call {
    let mut labels = BTreeMap::new();
    for _ in 0..generator.below(64) {
        labels.insert(
            generator.pick(keys).to_owned(),
            generator.pick(texts).to_owned(),
        );
    }
    let mut annotations = BTreeMap::new();
    for _ in 0..generator.below(32) {
        annotations.insert(
            generator.pick(keys).to_owned(),
            generator.pick(texts).to_owned(),
        );
    }
    let key = match generator.below(20) {
        0..=4 => Key::NamespaceName,
        5..=12 => Key::Labels,
        13..=17 if !annotations.is_empty() => {
            let nth = generator.below(annotations.len() as u64) as usize;
            Key::Annotation(annotations.keys().nth(nth).cloned().unwrap_or_default())
        }
        _ => Key::Missing,
    };
    match &key {
        Key::NamespaceName => {}
        Key::Labels => {
            annotations.insert("kstage.dev/hash-by".into(), "labels".into());
        }
        Key::Annotation(name) => {
            let path = format!("metadata.annotations[{}]", json!(name));
            annotations.insert("kstage.dev/hash-by".into(), path);
        }
        Key::Missing => {
            annotations.insert("kstage.dev/hash-by".into(), ".status.podIP".into());
        }
    }
    let jitter = match generator.below(50) {
        0 => Some(Err("x")),
        1..=15 => Some(Ok(generator.below(10_000))),
        _ => None,
    };
    match jitter {
        Some(Ok(span)) => annotations.insert("kstage.dev/jitter-ms".into(), span.to_string()),
        Some(Err(bad)) => annotations.insert("kstage.dev/jitter-ms".into(), bad.into()),
        None => None,
    };
    let name = format!("pod-{}", generator.pick(texts));
    let namespace = generator.pick(keys).to_owned();
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("labels".into(), json!(labels));
    metadata.insert("annotations".into(), json!(annotations));
    let object = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": Value::Object(metadata),
        "spec": {"nodeName": generator.pick(keys), "containers": [{"name": "c", "image": generator.pick(texts)}]},
        "status": {"phase": "Pending"},
    });
    let all_zero = generator.below(10) == 0;
    let candidates: Vec<Candidate> = (0..1 + generator.below(40))
        .map(|i| Candidate {
            name: format!("stage-{i}-{}", generator.pick(keys)),
            weight: if all_zero {
                0
            } else {
                generator.below(101) as i64 - 10
            },
            delay_ms: (generator.below(3) > 0).then(|| generator.below(100_000) as i64),
        })
        .collect();

    let hashed = match &key {
        Key::NamespaceName => Ok(format!("{namespace}/{name}")),
        Key::Labels => Ok(labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")),
        Key::Annotation(name) => Ok(annotations[name].clone()),
        Key::Missing => Err(".status.podIP is not in the object"),
    };
    let expect = hashed.and_then(|text| {
        let hash = fnv1a(&text);
        let chosen = weighted(&candidates, hash);
        let delay_ms = match jitter {
            None => None,
            Some(Err(_)) => return Err("kstage.dev/jitter-ms"),
            Some(Ok(span)) => {
                Some(chosen.delay_ms.unwrap_or(0) + ((hash >> 32) % (span + 1)) as i64)
            }
        };
        Ok(Some(Selection {
            stage: chosen.name.clone(),
            delay_ms,
        }))
    });
    Call {
        object: object.to_string(),
        candidates,
        expect,
    }
}

/// The most linear memory the instance may reach: `hash-router` settles at about 20 MiB
/// (a Go heap of about 67 KB live between calls, and the high-water mark of the
/// garbage of the largest calls); a leak of a few hundred bytes a call passes this long
/// before the default limit of 128 MiB.
const MEMORY_CEILING: u64 = 48 << 20;

#[test]
#[cfg_attr(
    not(kstage_plugin = "hash-router"),
    ignore = "hash-router.wasm not built: run plugins/build --install go"
)]
fn go_plugin_answers_100k_allocation_heavy_calls() {
    let settings = crate::examples::settings();
    assert_eq!(
        settings.memory,
        Settings::default().memory,
        "the default limit"
    );
    let plugin = crate::examples::component("go", "hash-router", settings);
    let mut generator = Gen(0x6b73_7461_6765);
    let texts = text_pool(&mut generator);
    let keys = key_pool(&mut generator);
    let (mut bytes, mut errors) = (0usize, 0usize);
    let (start, mut in_plugin) = (Instant::now(), Duration::ZERO);
    for i in 0..CALLS {
        let call = make_call(&mut generator, &texts, &keys);
        bytes += call.object.len();
        let called = Instant::now();
        let answer = plugin.select(&call.object, &call.candidates);
        in_plugin += called.elapsed();
        match (&call.expect, answer) {
            (Ok(want), Ok(got)) => assert_eq!(&got, want, "call {i}: {}", call.object),
            (Err(needle), Err(error)) => {
                errors += 1;
                assert!(
                    error.to_string().contains(needle),
                    "call {i}: error {error} lacks {needle:?}"
                );
            }
            (want, got) => panic!("call {i}: got {got:?}, want {want:?}: {}", call.object),
        }
    }
    // The inputs were what this test is about: large, and errors among the answers.
    assert!(bytes / CALLS > 10_000, "{} bytes per object", bytes / CALLS);
    assert!(errors > CALLS / 20 && errors < CALLS / 5, "{errors} errors");
    let memory = plugin.memory_high_water();
    assert!(
        memory > 0 && memory < MEMORY_CEILING,
        "{memory} bytes of linear memory"
    );
    eprintln!(
        "hash-router: {CALLS} calls, {} KB per object on average, {errors} errors, all as \
         expected; {:.1} MiB of linear memory; {:.0} s, {:.0} s of it in the plugin",
        bytes / CALLS / 1000,
        memory as f64 / f64::from(1 << 20),
        start.elapsed().as_secs_f64(),
        in_plugin.as_secs_f64(),
    );
}
