//! `kstage plugin check | call | test` end to end on WAT fixtures: the compile cache
//! across processes, test cases with expectations met and missed (text and JUnit), a
//! case's expectation checked by `call`, and a trap's report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::fixtures::{Classify, Fixture, Render};

/// `kstage ARGS` with its compile cache in `cache`.
fn kstage(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kstage"))
        .args(args)
        .env("KSTAGE_CACHE", cache)
        .env_remove("KSTAGE_NO_COMPILE_CACHE")
        .env_remove("KSTAGE_LOG")
        .output()
        .expect("kstage runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// A scratch folder with the fixture written as `plugin.wasm`, and `cases/` holding
/// `cases` (name, YAML).
fn setup(tag: &str, fixture: &Fixture, cases: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let dir = crate::scratch(tag);
    let wasm = dir.join("plugin.wasm");
    std::fs::write(&wasm, fixture.build()).expect("write");
    std::fs::create_dir_all(dir.join("cases")).expect("cases");
    for (name, yaml) in cases {
        std::fs::write(dir.join("cases").join(name), yaml).expect("write");
    }
    (dir, wasm)
}

const GOOD: &str = "capability: classifier\ninput: {kind: http, status: 429, message: m}\nexpect: {decision: retry-after, afterMs: 1234}\n";
const WRONG: &str = "capability: classifier\ninput: {kind: http, status: 500, message: m}\nexpect: {decision: drop, warn: true}\n";
const TYPO: &str = "capability: classifier\ninput: {kind: http}\nexpected: {decision: backoff}\n";

#[test]
fn a_compiled_component_is_read_from_the_cache_by_the_next_process() {
    let (dir, wasm) = setup("cache", &Fixture::classifier(Classify::Policy), &[]);
    let cache = dir.join("cache");
    let wasm = wasm.to_string_lossy().into_owned();
    let first = kstage(&cache, &["plugin", "check", &wasm]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(
        text(&first.stdout).contains("compiled, and cached in"),
        "{}",
        text(&first.stdout)
    );
    let second = kstage(&cache, &["plugin", "check", &wasm]);
    assert!(
        text(&second.stdout).contains("read from the cache in"),
        "{}",
        text(&second.stdout)
    );
    let off = kstage(&cache, &["plugin", "check", "--no-compile-cache", &wasm]);
    assert!(
        text(&off.stdout).contains("compiled (no compile cache)"),
        "{}",
        text(&off.stdout)
    );
}

#[test]
fn plugin_test_reports_each_case_with_what_differs_and_fails_on_any() {
    let (dir, wasm) = setup(
        "cases",
        &Fixture::classifier(Classify::Policy),
        &[
            ("good.yaml", GOOD),
            ("wrong.yaml", WRONG),
            ("typo.yaml", TYPO),
        ],
    );
    let cache = dir.join("cache");
    let wasm = wasm.to_string_lossy().into_owned();
    // No cases given: the `cases/` beside the component.
    let out = kstage(&cache, &["plugin", "test", &wasm]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.contains("ok    good "), "{report}");
    assert!(report.contains("FAIL  wrong"), "{report}");
    assert!(
        report.contains(".decision: expected \"drop\", got \"backoff\""),
        "{report}"
    );
    assert!(
        report.contains(".warn: missing (expected true)"),
        "{report}"
    );
    assert!(
        report.contains("not a case: unknown key \"expected\""),
        "{report}"
    );
    assert!(report.ends_with("result: 1 passed, 2 failed\n"), "{report}");
    // Only the good case: exit 0.
    let good = dir.join("cases/good.yaml").to_string_lossy().into_owned();
    let out = kstage(&cache, &["plugin", "test", &wasm, &good]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    // JUnit for CI.
    let out = kstage(&cache, &["plugin", "test", &wasm, "--output", "junit"]);
    let xml = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        xml.contains("tests=\"3\" failures=\"1\" errors=\"1\""),
        "{xml}"
    );
    assert!(
        xml.contains("<testcase name=\"good\" classname=\"plugin.wasm.classifier\""),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<failure message=\".decision: expected &quot;drop&quot;, got &quot;backoff&quot;\""
        ),
        "{xml}"
    );
}

#[test]
fn plugin_call_checks_a_cases_expectation() {
    let (dir, wasm) = setup(
        "call",
        &Fixture::classifier(Classify::Policy),
        &[("good.yaml", GOOD), ("wrong.yaml", WRONG)],
    );
    let cache = dir.join("cache");
    let wasm = wasm.to_string_lossy().into_owned();
    let case = |name: &str| dir.join("cases").join(name).to_string_lossy().into_owned();
    let good = kstage(
        &cache,
        &[
            "plugin",
            "call",
            &wasm,
            "classifier",
            "--input",
            &case("good.yaml"),
        ],
    );
    assert!(good.status.success(), "{}", text(&good.stderr));
    assert!(text(&good.stdout).contains("\"afterMs\": 1234"));
    // The capability may come from the case; a wrong expectation exits 1, saying why.
    let wrong = kstage(
        &cache,
        &["plugin", "call", &wasm, "--input", &case("wrong.yaml")],
    );
    assert_eq!(wrong.status.code(), Some(1), "{}", text(&wrong.stdout));
    assert!(text(&wrong.stdout).contains("\"decision\": \"backoff\""));
    assert!(
        text(&wrong.stderr).contains(".decision: expected \"drop\", got \"backoff\""),
        "{}",
        text(&wrong.stderr)
    );
}

#[test]
fn a_trap_in_plugin_call_shows_its_reason_and_frames() {
    let (dir, wasm) = setup(
        "trap",
        &Fixture {
            render: Some(Render::TrapOnLong),
            ..Fixture::default()
        },
        &[(
            "long.yaml",
            "capability: renderer\ninput: {stage: s, template: '{\"a\": 1}', object: {}}\nexpectError: unreachable\n",
        )],
    );
    let cache = dir.join("cache");
    let wasm = wasm.to_string_lossy().into_owned();
    let input = dir.join("cases/long.yaml").to_string_lossy().into_owned();
    let out = kstage(
        &cache,
        &["plugin", "call", &wasm, "renderer", "--input", &input],
    );
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("wasm `unreachable` instruction executed"),
        "{said}"
    );
    assert!(said.contains("wasm backtrace:"), "{said}");
    assert!(said.contains("     0: <wasm function"), "{said}");
}

#[test]
fn check_prints_the_stage_plugin_that_deploys_the_component() {
    let (dir, wasm) = setup("manifest", &Fixture::classifier(Classify::Policy), &[]);
    let cache = dir.join("cache");
    let bytes = std::fs::read(&wasm).expect("read");
    let sha256 = kstage::plugin::runtime::digest(&bytes);
    let wasm = wasm.to_string_lossy().into_owned();
    // Only the manifest: it reads back as the StagePlugin kstage itself accepts.
    let out = kstage(&cache, &["plugin", "check", &wasm, "--manifest"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let manifest = kstage::yaml::to_json(&text(&out.stdout)).expect("the manifest is YAML");
    let parsed = kstage::plugin::resource::ResourcePlugin::parse(&manifest)
        .expect("kstage accepts the StagePlugin it prints");
    assert_eq!(parsed.name, "fixture");
    assert_eq!(parsed.sha256.as_deref(), Some(sha256.as_str()));
    assert_eq!(parsed.bind, [kstage::plugin::Capability::Classifier]);
    assert_eq!(
        parsed.source,
        kstage::plugin::resource::Source::ConfigMap {
            namespace: "kstage".into(),
            name: "kstage-plugin-components".into(),
            key: "plugin.wasm".into(),
        }
    );
    // A URL source; the text report shows the manifest after the checks.
    let url = "https://plugins.example.com/fixture.wasm";
    let out = kstage(&cache, &["plugin", "check", &wasm, "--url", url]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("kind: StagePlugin\n"), "{report}");
    assert!(report.contains(&format!("url: {url}\n")), "{report}");
    assert!(report.contains(&format!("sha256: {sha256}\n")), "{report}");
    // A registry source reads back too.
    let reference = "oci://registry.example/plugins/fixture:1.0";
    let out = kstage(
        &cache,
        &["plugin", "check", &wasm, "--manifest", "--oci", reference],
    );
    let manifest = kstage::yaml::to_json(&text(&out.stdout)).expect("the manifest is YAML");
    let parsed = kstage::plugin::resource::ResourcePlugin::parse(&manifest)
        .expect("kstage accepts the StagePlugin it prints");
    assert!(
        matches!(parsed.source, kstage::plugin::resource::Source::Oci { .. }),
        "{manifest}"
    );
    // A source that is not a URL is refused before anything loads.
    let out = kstage(&cache, &["plugin", "check", &wasm, "--url", "ftp://x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not an http or https URL"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn sim_says_how_long_its_plugins_took_to_start_and_where_their_code_came_from() {
    let (dir, wasm) = setup("sim-startup", &Fixture::classifier(Classify::Policy), &[]);
    let cache = dir.join("cache");
    let config = dir.join("config.yaml");
    let plugin = format!(
        "plugins:\n- name: fixture\n  path: {}\nbindings:\n  classifier: fixture\n",
        wasm.display()
    );
    std::fs::write(&config, plugin).expect("write");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let stages = root
        .join("examples/stages/pod")
        .to_string_lossy()
        .into_owned();
    let objects = root
        .join("examples/objects/pods.yaml")
        .to_string_lossy()
        .into_owned();
    let config = config.to_string_lossy().into_owned();
    let args = [
        "sim", "-s", &stages, "-f", &objects, "-o", "summary", "--config", &config,
    ];
    let first = kstage(&cache, &args);
    let log = text(&first.stderr);
    assert!(first.status.success(), "{log}");
    assert!(log.contains("kstage sim: 1 plugin ready in "), "{log}");
    assert!(log.contains(", compiled, and cached in "), "{log}");
    let second = kstage(&cache, &args);
    let log = text(&second.stderr);
    assert!(log.contains(", read from the cache in "), "{log}");
}

/// The configs the plugin docs run `kstage sim --config` with name the example
/// components `plugins/build` writes.
#[test]
fn the_example_plugin_configs_name_the_example_components() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for name in ["chaos-router", "label-router", "hash-router"] {
        let file = match name {
            "chaos-router" => "config.yaml".to_owned(),
            other => format!("{other}.yaml"),
        };
        let config =
            kstage::plugin::config::PluginConfig::read(&root.join("examples/plugins").join(file))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let plugin = &config.plugins[0];
        assert_eq!(plugin.name, name);
        assert!(
            plugin.path.ends_with(format!("target/plugins/{name}.wasm")),
            "{}",
            plugin.path.display()
        );
    }
}
