//! `kstage plugin new` end to end, as an author runs it: a project in each of the six
//! languages, built with its own `build.sh`, its cases passing `kstage plugin test`, and
//! the plugin deciding in `kstage sim` with the project's Stage set. The capabilities
//! rotate so that each is played twice.
//!
//! A test runs only where `plugins/build` could build that language's example (the same
//! toolchain builds the project): elsewhere it shows as `ignored` (see `build.rs`); in CI
//! (`KSTAGE_REQUIRE_PLUGINS=1`) it runs, and fails when the toolchain is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// `kstage ARGS` in `dir`, with a fresh compile cache.
fn kstage_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kstage"))
        .args(args)
        .current_dir(dir)
        .env("KSTAGE_CACHE", dir.join(".kstage-cache"))
        .env("KSTAGE_LOG", "error")
        .output()
        .expect("the kstage binary runs")
}

fn stdout_of(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where a scaffolded Rust plugin's cargo output goes: the Rust example's target folder
/// (`plugins/build` built it before the tests), whose standard library and crates it
/// shares, built the same way: only the SDK and the plugin crate are compiled (seconds,
/// instead of minutes for the standard library).
fn rust_target_dir() -> PathBuf {
    PathBuf::from(env!("KSTAGE_PLUGIN_OUT")).join("build/rust")
}

/// Scaffold, build, test and simulate a `capability` plugin in `language`; the report
/// of `kstage sim -o json`.
fn scaffold(language: &str, capability: &str) -> Value {
    let started = std::time::Instant::now();
    let dir = crate::scratch(&format!("new-{language}"));
    let name = format!("{language}-{capability}");
    let project = dir.join(&name);
    let project_arg = project.to_string_lossy();
    let new = ["plugin", "new", language, &name, "--capability", capability];
    stdout_of(
        "kstage plugin new",
        &kstage_in(&dir, &[&new[..], &["--dir", &project_arg]].concat()),
    );

    let mut build = Command::new(project.join("build.sh"));
    build.current_dir(&project).env_remove("CARGO_TARGET_DIR");
    if language == "rust" {
        // The Rust example's package cache: the crates are there already.
        let tools = std::env::var_os("KSTAGE_TOOLS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                    .join(".cache/kstage-tools")
            });
        build
            .env("CARGO_HOME", tools.join("cargo-home"))
            .env("KSTAGE_PLUGIN_TARGET_DIR", rust_target_dir());
    }
    let built = build.output().expect("build.sh runs");
    stdout_of(&format!("{name}/build.sh"), &built);
    let component = format!("{name}.wasm");
    assert!(
        project.join(&component).is_file(),
        "{component} not written"
    );

    let report = stdout_of(
        "kstage plugin test",
        &kstage_in(&project, &["plugin", "test", "--timeout", "5s", &component]),
    );
    assert!(report.ends_with("result: 2 passed, 0 failed\n"), "{report}");

    let mut sim = vec![
        "sim",
        "--config",
        "sim/config.yaml",
        "--stages",
        "sim/stages.yaml",
        "--objects",
        "sim/pod.yaml",
        "--copies",
        "4",
        "-o",
        "json",
    ];
    if capability == "classifier" {
        sim.extend(["--faults", "patch:503=0.3"]);
    }
    let out = stdout_of("kstage sim", &kstage_in(&project, &sim));
    eprintln!(
        "{language} {capability}: new, build, test and sim took {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("sim report: {e}\n{out}"))
}

fn timeline(report: &Value) -> &[Value] {
    report["timeline"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn stages_played(report: &Value) -> Vec<(&str, &str)> {
    timeline(report)
        .iter()
        .filter(|e| e["event"] == "stage" && e.get("error").is_none())
        .map(|e| {
            (
                e["at"].as_str().unwrap_or(""),
                e["stage"].as_str().unwrap_or(""),
            )
        })
        .collect()
}

fn phases(report: &Value) -> Vec<&str> {
    let objects = report["objects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    objects
        .iter()
        .map(|o| o["status"]["phase"].as_str().unwrap_or("none"))
        .collect()
}

/// `+HH:MM:SS.mmm` in milliseconds.
fn millis(at: &str) -> u64 {
    let parts: Vec<f64> = at
        .trim_start_matches('+')
        .split(':')
        .map(|p| p.parse().unwrap_or_else(|_| panic!("not a time: {at}")))
        .collect();
    ((parts[0] * 3600.0 + parts[1] * 60.0 + parts[2]) * 1000.0).round() as u64
}

/// The heaviest Stage for every pod, its 30 s delay cut to 1 s (kstage alone draws
/// among the weights and waits 30 s).
fn assert_selects(report: &Value) {
    assert_eq!(
        stages_played(report),
        vec![("+00:00:01.000", "pod-running"); 4],
        "{report}"
    );
    assert_eq!(phases(report), vec!["Running"; 4]);
}

/// The plugin's JSON templates, `${now}` (virtual time: the run starts at 2025-01-01)
/// and `${stage}` filled in (Go templates would leave both as written). `${now}` is the
/// virtual instant the Stage played, to the millisecond, though a component that
/// imports WASI is called on a thread of its own.
fn assert_renders(report: &Value) {
    assert_eq!(phases(report), vec!["Succeeded"; 4], "{report}");
    let start = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z").expect("time");
    let mut played: Vec<_> = stages_played(report)
        .into_iter()
        .filter(|(_, stage)| *stage == "pod-succeeded")
        .map(|(at, _)| start + chrono::TimeDelta::milliseconds(millis(at) as i64))
        .collect();
    let mut stamped = Vec::new();
    for object in report["objects"].as_array().into_iter().flatten() {
        let status = &object["status"];
        let started = status["startTime"].as_str().unwrap_or("");
        assert!(started.starts_with("2025-01-01T00:00:0"), "{status}");
        let message = status["message"].as_str().unwrap_or("");
        let at = message
            .strip_prefix("played by pod-succeeded at ")
            .unwrap_or_else(|| panic!("{status}"));
        stamped.push(chrono::DateTime::parse_from_rfc3339(at).expect("an RFC 3339 time"));
    }
    played.sort();
    stamped.sort();
    assert_eq!(stamped, played, "{report}");
}

/// Every injected 503 is retried after exactly 1 s (kstage's table backs off instead).
fn assert_classifies(report: &Value) {
    let entries = timeline(report);
    let failures: Vec<(usize, &Value)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("error").is_some())
        .collect();
    assert!(!failures.is_empty(), "no injected fault: {report}");
    for (index, failure) in failures {
        let error = failure["error"].as_str().unwrap_or("");
        assert!(error.contains("failed (retry-after)"), "{error}");
        let next = entries[index + 1..]
            .iter()
            .find(|e| e["object"] == failure["object"] && e["event"] == "stage")
            .unwrap_or_else(|| panic!("no retry after {failure}"));
        let (at, again) = (
            failure["at"].as_str().unwrap_or(""),
            next["at"].as_str().unwrap_or(""),
        );
        assert_eq!(millis(again), millis(at) + 1000, "{failure} then {next}");
    }
    assert_eq!(report["stats"]["errors"], 0, "{}", report["stats"]);
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "chaos-router"),
    ignore = "the Rust plugin toolchain is missing: run plugins/build --install rust"
)]
fn a_new_rust_selector_builds_tests_and_plays() {
    assert_selects(&scaffold("rust", "selector"));
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "retry-budget"),
    ignore = "the C plugin toolchain is missing: run plugins/build --install c"
)]
fn a_new_c_classifier_builds_tests_and_plays() {
    assert_classifies(&scaffold("c", "classifier"));
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "exp-backoff"),
    ignore = "the Zig plugin toolchain is missing: run plugins/build --install zig"
)]
fn a_new_zig_renderer_builds_tests_and_plays() {
    assert_renders(&scaffold("zig", "renderer"));
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "json-fill"),
    ignore = "the JavaScript plugin toolchain is missing: run plugins/build --install js"
)]
fn a_new_js_classifier_builds_tests_and_plays() {
    assert_classifies(&scaffold("js", "classifier"));
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "label-router"),
    ignore = "the Python plugin toolchain is missing: run plugins/build --install python"
)]
fn a_new_python_renderer_builds_tests_and_plays() {
    assert_renders(&scaffold("python", "renderer"));
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "hash-router"),
    ignore = "the Go plugin toolchain is missing: run plugins/build --install go"
)]
fn a_new_go_selector_builds_tests_and_plays() {
    assert_selects(&scaffold("go", "selector"));
}

/// Without toolchains: the project is written, a second run refuses its folder, a bad
/// name is refused, and a build script names what is missing.
#[test]
fn new_refuses_bad_names_and_folders_with_files() {
    let dir = crate::scratch("new-cli");
    let project = dir.join("p");
    let project_arg = project.to_string_lossy().into_owned();
    let args = [
        "plugin",
        "new",
        "python",
        "my-router",
        "--capability",
        "selector",
        "--dir",
    ];
    let out = kstage_in(&dir, &[&args[..], &[project_arg.as_str()]].concat());
    let said = stdout_of("kstage plugin new", &out);
    assert!(said.contains("kstage plugin test my-router.wasm"), "{said}");
    for file in [
        "app.py",
        "build.sh",
        "cases/heaviest.yaml",
        "sdk/python/kstage_plugin.py",
    ] {
        assert!(project.join(file).is_file(), "{file} missing");
    }
    let again = kstage_in(&dir, &[&args[..], &[project_arg.as_str()]].concat());
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));

    let bad = kstage_in(
        &dir,
        &[
            "plugin",
            "new",
            "go",
            "My_Router",
            "--capability",
            "renderer",
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("invalid plugin name \"My_Router\""), "{err}");
    assert!(!dir.join("My_Router").exists());

    // A PATH with none of the tools: the script says what to install, and fails.
    let build = Command::new("/bin/bash")
        .arg(project.join("build.sh"))
        .env("PATH", "/usr/bin:/bin")
        .env("KSTAGE_TOOLS", dir.join("no-tools"))
        .output()
        .expect("build.sh runs");
    assert!(!build.status.success());
    let err = String::from_utf8_lossy(&build.stderr);
    assert!(
        err.contains("componentize-py not found: pip install componentize-py=="),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
