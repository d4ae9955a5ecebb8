//! The example plugins (`plugins/examples/*`) and the WASI probe, built by
//! `plugins/build`, loaded by the host and run against their own test cases.
//!
//! The components are read from the plugin folder ([`crate::plugin_path`]). A test whose
//! component was not built shows as `ignored` with the command that builds it (see
//! `build.rs`); in CI (`KSTAGE_REQUIRE_PLUGINS=1`) it runs, and fails when the component
//! is missing.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use kstage::clock::SystemClock;
use kstage::plugin::{Capability, Grants, HostEnv, Plugin, Runtime, Settings};
use kstage::rng::Rng;

fn runtime() -> Arc<Runtime> {
    static RUNTIME: std::sync::OnceLock<Arc<Runtime>> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| Runtime::new().expect("the plugin runtime starts"))
        .clone()
}

/// The example `name` built for `language`, loaded and validated.
pub(crate) fn component(language: &str, name: &str, settings: Settings) -> Arc<Plugin> {
    let path = crate::plugin_path(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build it with `plugins/build --install {language}`",
            path.display()
        )
    });
    let env = HostEnv::new(
        name,
        Arc::new(SystemClock),
        Arc::new(Mutex::new(Rng::seeded(1))),
    );
    let plugin = Plugin::load(&runtime(), name, &path, &bytes, settings, env)
        .unwrap_or_else(|e| panic!("{e}"));
    plugin
        .validate()
        .unwrap_or_else(|e| panic!("{name}: validation: {e}"));
    assert_eq!(plugin.info().name, name);
    assert_eq!(plugin.info().interface_version, "0.1.0");
    plugin
}

/// Generous deadlines: a loaded CI machine runs these beside other tests.
pub(crate) fn settings() -> Settings {
    Settings {
        timeout: std::time::Duration::from_secs(2),
        ..Settings::default()
    }
}

/// The example's capabilities are as documented, and every case in its `cases/` passes
/// through `kstage plugin test`, as an author runs them.
fn example(language: &str, name: &str, capabilities: &[Capability]) {
    let plugin = component(language, name, settings());
    assert_eq!(plugin.capabilities(), capabilities, "{name}");
    let dir = crate::root()
        .join("plugins/examples")
        .join(language)
        .join("cases");
    let report = plugin_test(&crate::plugin_path(name), &dir);
    assert!(report.ends_with(" passed, 0 failed\n"), "{report}");
    let passed: usize = report
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("result: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no result line: {report}"));
    assert!(passed >= 4, "{}: too few cases\n{report}", dir.display());
    eprintln!("{language} example {name}: {passed} cases passed");
}

/// `kstage plugin test COMPONENT CASES` (a fresh compile cache, generous deadline): its
/// report, which must say every case passed.
fn plugin_test(component: &Path, cases: &Path) -> String {
    let cache = crate::scratch(&format!(
        "cases-{}",
        component
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kstage"))
        .args(["plugin", "test", "--timeout", "2s"])
        .arg(component)
        .arg(cases)
        .env("KSTAGE_CACHE", &cache)
        .env_remove("KSTAGE_LOG")
        .output()
        .expect("kstage runs");
    let _ = std::fs::remove_dir_all(&cache);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kstage plugin test {} {} failed:\n{report}\n{}",
        component.display(),
        cases.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "chaos-router"),
    ignore = "chaos-router.wasm not built: run plugins/build --install rust"
)]
fn rust_chaos_router() {
    example(
        "rust",
        "chaos-router",
        &[Capability::Selector, Capability::Renderer],
    );
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "retry-budget"),
    ignore = "retry-budget.wasm not built: run plugins/build --install c"
)]
fn c_retry_budget() {
    example("c", "retry-budget", &[Capability::Classifier]);
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "exp-backoff"),
    ignore = "exp-backoff.wasm not built: run plugins/build --install zig"
)]
fn zig_exp_backoff() {
    example("zig", "exp-backoff", &[Capability::Classifier]);
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "json-fill"),
    ignore = "json-fill.wasm not built: run plugins/build --install js"
)]
fn js_json_fill() {
    example("js", "json-fill", &[Capability::Renderer]);
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "label-router"),
    ignore = "label-router.wasm not built: run plugins/build --install python"
)]
fn python_label_router() {
    example("python", "label-router", &[Capability::Selector]);
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "hash-router"),
    ignore = "hash-router.wasm not built: run plugins/build --install go"
)]
fn go_hash_router() {
    example("go", "hash-router", &[Capability::Selector]);
}

/// The probe's answer to a `message` command: `retry-after(N)` means the access worked.
fn probe(plugin: &Plugin, command: &str) -> Value {
    let input = serde_json::json!({"kind": "other", "message": command});
    kstage::plugin::invoke::call(plugin, Capability::Classifier, input)
        .unwrap_or_else(|e| panic!("{command}: {e}"))
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "wasi-probe"),
    ignore = "wasi-probe.wasm not built: run plugins/build --install python"
)]
fn wasi_is_denied_unless_granted() {
    let denied = serde_json::json!({"decision": "drop", "warn": false});
    let plugin = component("python", "wasi-probe", settings());
    let dir = std::env::temp_dir().join(format!("kstage-it-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let secret = dir.join("secret.txt");
    std::fs::write(&secret, "s3cr3t").expect("write");
    let file = format!("file:{}", secret.display());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let tcp = format!(
        "tcp:127.0.0.1:{}",
        listener.local_addr().expect("addr").port()
    );
    // Nothing granted: no file, no socket, no environment; output is discarded.
    assert_eq!(probe(&plugin, &file), denied);
    assert_eq!(probe(&plugin, &tcp), denied);
    assert_eq!(probe(&plugin, "env:PATH"), denied);
    assert_eq!(
        probe(&plugin, "print:hello"),
        serde_json::json!({"decision": "backoff"})
    );
    // Granted: the folder (read-only) and one variable.
    let granted = component(
        "python",
        "wasi-probe",
        Settings {
            grants: Grants {
                read_dirs: vec![dir.clone()],
                env: vec!["PATH".to_owned()],
                ..Grants::default()
            },
            ..settings()
        },
    );
    assert_eq!(
        probe(&granted, &file),
        serde_json::json!({"decision": "retry-after", "afterMs": 1})
    );
    assert_eq!(
        probe(&granted, "env:PATH"),
        serde_json::json!({"decision": "retry-after", "afterMs": 3})
    );
    assert_eq!(probe(&granted, &tcp), denied, "the network stays denied");
    let networked = component(
        "python",
        "wasi-probe",
        Settings {
            grants: Grants {
                network: true,
                ..Grants::default()
            },
            ..settings()
        },
    );
    assert_eq!(
        probe(&networked, &tcp),
        serde_json::json!({"decision": "retry-after", "afterMs": 2})
    );
    assert_eq!(probe(&networked, &file), denied, "files stay denied");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg_attr(
    not(kstage_plugin = "wasi-probe"),
    ignore = "wasi-probe.wasm not built: run plugins/build --install python"
)]
fn wasi_probe_cases() {
    let dir = crate::root().join("tests/plugins/wasi-probe/cases");
    let report = plugin_test(&crate::plugin_path("wasi-probe"), &dir);
    assert!(report.ends_with(" passed, 0 failed\n"), "{report}");
}
