//! The plugin host against WAT fixtures: loading and validation, each capability's
//! marshalling, limits (deadline, memory, traps) and what happens after them.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kstage::clock::SystemClock;
use kstage::plugin::runtime::TICK;
use kstage::plugin::types::{Candidate, Decision, Failure, FailureKind};
use kstage::plugin::{Capability, Cause, HostEnv, Plugin, Runtime, Settings};
use kstage::rng::Rng;
use serde_json::json;

use crate::fixtures::{Classify, Fixture, Render, Select};

fn runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| Runtime::new().expect("the plugin runtime starts"))
        .clone()
}

pub fn env(name: &str) -> HostEnv {
    HostEnv::new(
        name,
        Arc::new(SystemClock),
        Arc::new(Mutex::new(Rng::seeded(1))),
    )
}

fn load_with(fixture: &Fixture, settings: Settings) -> Result<Arc<Plugin>, String> {
    Plugin::load(
        &runtime(),
        "fixture",
        Path::new("fixture.wasm"),
        &fixture.build(),
        settings,
        env("fixture"),
    )
    .map_err(|e| e.to_string())
}

fn load(fixture: &Fixture) -> Arc<Plugin> {
    load_with(fixture, Settings::default()).expect("the fixture loads")
}

fn failure(status: Option<u16>, attempt: u32) -> Failure {
    Failure {
        kind: FailureKind::Http,
        status,
        reason: None,
        message: "boom".to_owned(),
        retry_after_ms: None,
        stage: "pod-ready".to_owned(),
        step: 1,
        attempt,
        object: "{}".to_owned(),
    }
}

#[test]
fn metadata_and_capabilities_are_read_at_load() {
    let plugin = load(&Fixture::classifier(Classify::Policy));
    assert_eq!(plugin.info().name, "fixture");
    assert_eq!(plugin.info().version, "1.0.0");
    assert_eq!(plugin.info().interface_version, "0.1.0");
    assert_eq!(plugin.capabilities(), &[Capability::Classifier]);
    // The fixture calls no host function, so it imports nothing, WASI least of all.
    assert!(!plugin.imports().iter().any(|i| i.starts_with("wasi:")));
    assert_eq!(plugin.digest().len(), 64);
    plugin.validate().expect("a well-behaved plugin validates");
}

#[test]
fn classify_sees_the_failure_fields() {
    let plugin = load(&Fixture::classifier(Classify::Policy));
    assert_eq!(
        plugin.classify(&failure(Some(429), 0)).expect("classifies"),
        Decision::RetryAfter(1234)
    );
    assert_eq!(
        plugin.classify(&failure(Some(500), 0)).expect("classifies"),
        Decision::Backoff
    );
    assert_eq!(
        plugin.classify(&failure(Some(500), 2)).expect("classifies"),
        Decision::Drop(true)
    );
    // Many calls on warm instances: the guest heap is reset after each call.
    for attempt in 0..2000 {
        plugin
            .classify(&failure(None, attempt % 2))
            .expect("classifies");
    }
    assert_eq!(
        plugin
            .stats(Capability::Classifier)
            .calls
            .load(std::sync::atomic::Ordering::Relaxed),
        2003
    );
}

#[test]
fn select_gets_candidates_and_may_override_the_delay() {
    let plugin = load(&Fixture {
        select: Some(Select::Last),
        ..Fixture::default()
    });
    let candidates: Vec<Candidate> = ["a", "bb", "ccc"]
        .iter()
        .map(|name| Candidate {
            name: (*name).to_owned(),
            weight: 1,
            delay_ms: None,
        })
        .collect();
    let chosen = plugin
        .select(&"{}".to_owned(), &candidates)
        .expect("selects")
        .expect("chooses one");
    assert_eq!(chosen.stage, "ccc");
    assert_eq!(chosen.delay_ms, Some(7000));
}

#[test]
fn a_selection_outside_the_candidates_is_malformed() {
    let plugin = load(&Fixture {
        select: Some(Select::Stranger),
        ..Fixture::default()
    });
    let candidates = [Candidate {
        name: "a".to_owned(),
        weight: 0,
        delay_ms: None,
    }];
    let error = plugin
        .select(&"{}".to_owned(), &candidates)
        .expect_err("a stranger is refused");
    assert!(matches!(error.cause, Cause::Malformed(_)), "{error}");
    assert!(error.to_string().contains("\"nope\""), "{error}");
    // Validation's smoke call catches it before the plugin is used.
    assert!(plugin.validate().is_err());
}

#[test]
fn render_passes_strings_both_ways() {
    let plugin = load(&Fixture {
        render: Some(Render::Echo),
        ..Fixture::default()
    });
    let template = r#"{"status":{"phase":"Running"}}"#;
    let out = plugin
        .render("pod-ready", template, &"{}".to_owned())
        .expect("renders");
    assert_eq!(out, json!({"status": {"phase": "Running"}}));
    // An answer that is not JSON is malformed, as the engine would find it.
    let error = plugin
        .render("pod-ready", "status: {phase: Running}", &"{}".to_owned())
        .expect_err("not JSON");
    assert!(matches!(error.cause, Cause::Malformed(_)), "{error}");
    assert!(
        error.to_string().contains("rendered text is not JSON"),
        "{error}"
    );
}

/// Validation checks each capability's answer the way the engine uses it: a renderer
/// whose smoke answer is not JSON is refused (and so never swapped in).
#[test]
fn a_renderer_answering_anything_but_json_fails_validation() {
    let plugin = load(&Fixture {
        render: Some(Render::Garbage),
        ..Fixture::default()
    });
    let problem = plugin.validate().expect_err("refused");
    assert!(problem.contains("rendered text is not JSON"), "{problem}");
}

/// A plugin logging in a loop writes at most its budget; the rest is dropped and
/// counted, and each message is cut to a bounded length.
#[test]
fn a_plugin_flooding_the_log_is_held_to_its_budget() {
    let plugin = load(&Fixture::classifier(Classify::Chatty));
    plugin.classify(&failure(Some(500), 0)).expect("classifies");
    let dropped = plugin.log_lines_dropped();
    let calls = crate::fixtures::CHATTY_LINES as u64;
    let budget = kstage::plugin::host::LOG_BURST as u64;
    // The burst gets through (plus what the rate refills while the call runs).
    assert!(
        (calls - budget - 50..=calls - budget).contains(&dropped),
        "{dropped} of {calls} dropped"
    );
}

#[test]
fn an_endless_call_is_interrupted_at_its_deadline() {
    let timeout = Duration::from_millis(50);
    let plugin = load_with(
        &Fixture::classifier(Classify::Loop),
        Settings {
            timeout,
            ..Settings::default()
        },
    )
    .expect("loads");
    let start = Instant::now();
    let error = plugin.classify(&failure(None, 0)).expect_err("interrupted");
    let took = start.elapsed();
    assert_eq!(error.cause, Cause::Timeout(timeout));
    assert!(took >= timeout, "interrupted early: {took:?}");
    // Deadline plus one tick, with generous room for a loaded machine's scheduler.
    assert!(
        took < timeout + TICK + Duration::from_secs(2),
        "took {took:?}"
    );
    assert!(
        error
            .to_string()
            .contains("plugin fixture: classifier.classify: timed out")
    );
}

#[test]
fn memory_past_the_limit_traps_as_out_of_memory() {
    let plugin = load_with(
        &Fixture::classifier(Classify::Hog),
        Settings {
            memory: 4 << 20,
            ..Settings::default()
        },
    )
    .expect("loads");
    let error = plugin.classify(&failure(None, 0)).expect_err("refused");
    assert_eq!(error.cause, Cause::OutOfMemory { limit: 4 << 20 });
    // It grew 1 MiB at a time from 128 KiB: the last growth that fit left it above 3 MiB.
    let grown = plugin.memory_high_water();
    assert!(grown > 3 << 20 && grown <= 4 << 20, "{grown}");
}

/// The memory high-water mark is the instance's linear memory: the fixture's two pages,
/// which its calls never grow.
#[test]
fn the_memory_high_water_mark_is_the_instances_linear_memory() {
    let plugin = load(&Fixture::classifier(Classify::Policy));
    for _ in 0..3 {
        plugin.classify(&failure(None, 0)).expect("answers");
        assert_eq!(plugin.memory_high_water(), 2 * 65_536);
    }
}

#[test]
fn a_trap_discards_the_instance_and_the_plugin_keeps_serving() {
    let plugin = load(&Fixture::classifier(Classify::Trap));
    for _ in 0..3 {
        let error = plugin.classify(&failure(None, 0)).expect_err("traps");
        assert!(matches!(error.cause, Cause::Trap(_)), "{error}");
    }
    assert!(
        plugin.validate().is_err(),
        "a trapping plugin fails validation"
    );
    // Every call after a trap gets a fresh instance: metadata still answers.
    assert_eq!(plugin.ping().expect("answers").name, "fixture");
}

/// A trap names its reason and the wasm frames it happened in, one line each (not only
/// wasmtime's header line).
#[test]
fn a_trap_names_its_reason_and_its_wasm_frames() {
    let plugin = load(&Fixture::classifier(Classify::Trap));
    let error = plugin.classify(&failure(None, 0)).expect_err("traps");
    let text = error.to_string();
    assert!(
        text.contains("trapped: wasm trap: wasm `unreachable` instruction executed"),
        "{text}"
    );
    let frames: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim() != "wasm backtrace:")
        .skip(1)
        .collect();
    assert!(!frames.is_empty(), "{text}");
    // The fixture has no name section: its frames are named by index and offset.
    assert!(
        frames[0].trim_start().starts_with("0: <wasm function") && frames[0].contains("offset 0x"),
        "one line per frame, innermost first: {text}"
    );
}

#[test]
fn a_plugin_for_another_interface_version_is_rejected() {
    let error = load_with(
        &Fixture {
            interface_version: "0.2.0",
            ..Fixture::classifier(Classify::Policy)
        },
        Settings::default(),
    )
    .expect_err("rejected");
    assert!(error.contains("interface \"0.2.0\""), "{error}");
}

#[test]
fn a_core_module_or_garbage_is_rejected_with_the_reason() {
    let core = wat::parse_str("(module)").expect("parses");
    let error = Plugin::load(
        &runtime(),
        "core",
        Path::new("core.wasm"),
        &core,
        Settings::default(),
        env("core"),
    )
    .expect_err("a core module is not a plugin");
    assert!(
        error.to_string().contains("wasm-tools component new"),
        "{error}"
    );
    let error = Plugin::load(
        &runtime(),
        "junk",
        Path::new("junk.wasm"),
        b"not wasm at all",
        Settings::default(),
        env("junk"),
    )
    .expect_err("junk is not a plugin");
    assert!(
        error
            .to_string()
            .contains("plugin junk (junk.wasm): not a valid component"),
        "{error}"
    );
}

#[test]
fn the_same_bytes_compile_once() {
    let bytes = Fixture {
        select: Some(Select::Stranger),
        render: Some(Render::Echo),
        ..Fixture::default()
    }
    .build();
    let digest = kstage::plugin::runtime::digest(&bytes);
    assert!(!runtime().is_cached(&digest));
    let (first, _) = runtime().compile(&bytes).expect("compiles");
    assert_eq!(first, digest);
    assert!(runtime().is_cached(&digest));
    let (second, _) = runtime().compile(&bytes).expect("cached");
    assert_eq!(first, second);
}

/// A plain HTTP server on a thread: `/p.wasm` gives `body`, `/old` redirects to it,
/// anything else is 404. Returns its address and a count of requests served.
pub(crate) fn file_server(body: Vec<u8>) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead as _, BufReader, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("address"));
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            // The rest of the head.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                    break;
                }
            }
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = request.split_whitespace().nth(1).unwrap_or("");
            let head = |status: &str, extra: &str, len: usize| {
                format!(
                    "HTTP/1.1 {status}\r\n{extra}Content-Length: {len}\r\nConnection: close\r\n\r\n"
                )
            };
            let _ = match path {
                "/p.wasm" => stream
                    .write_all(head("200 OK", "", body.len()).as_bytes())
                    .and_then(|()| stream.write_all(&body)),
                "/old" => {
                    stream.write_all(head("302 Found", "Location: /p.wasm\r\n", 0).as_bytes())
                }
                _ => stream.write_all(head("404 Not Found", "", 0).as_bytes()),
            };
        }
    });
    (address, served)
}

/// A plugin given by `url` is fetched (through a redirect), checked against its sha256,
/// cached by digest and read from the cache afterwards; a wrong digest or a 404 is a
/// clear config error.
#[test]
fn a_url_plugin_is_fetched_checked_and_cached() {
    use kstage::plugin::config::PluginConfig;
    let bytes = Fixture::classifier(Classify::Policy).build();
    let digest = kstage::plugin::runtime::digest(&bytes);
    let (server, served) = file_server(bytes.clone());
    let served = || served.load(std::sync::atomic::Ordering::SeqCst);
    let cache = crate::scratch("plugin-cache");
    // The config of one classifier plugin at `server/PATH` with digest `sha`.
    let parse = |path: &str, sha: &str| {
        let text = format!(
            "plugins: [{{name: remote, url: '{server}/{path}', sha256: '{sha}'}}]\nbindings: {{classifier: remote}}"
        );
        PluginConfig::parse_with_cache(&text, Path::new("."), &cache)
    };
    let parsed = parse("old", &digest).expect("fetched");
    let path = &parsed.plugins[0].path;
    assert_eq!(path, &cache.join(format!("{digest}.wasm")));
    assert_eq!(std::fs::read(path).expect("cached"), bytes);
    assert_eq!(served(), 2, "a redirect and the file");
    // The fetched plugin loads and classifies.
    let plugin = Plugin::load(
        &runtime(),
        "remote",
        path,
        &std::fs::read(path).expect("read"),
        Settings::default(),
        env("remote"),
    )
    .expect("loads");
    assert!(plugin.capabilities().contains(&Capability::Classifier));
    // Read again: from the cache, no request.
    parse("p.wasm", &digest).expect("cached");
    assert_eq!(served(), 2, "served from the cache");
    let wrong = "0".repeat(64);
    let error = parse("p.wasm", &wrong).expect_err("digest mismatch");
    assert!(
        error.contains("plugins[0].url")
            && error.contains("sha256 mismatch")
            && error.contains(&digest),
        "{error}"
    );
    assert!(
        !cache.join(format!("{wrong}.wasm")).exists(),
        "a mismatch is not cached"
    );
    let error = parse("gone.wasm", &wrong).expect_err("404");
    assert!(error.contains("404"), "{error}");
}
