//! `kstage sim` end to end: lifecycles complete, runs are reproducible, and bad input
//! fails with a clear message instead of a panic.

use serde_json::Value;

use crate::{kstage, kwok_dir, ok};

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path.to_string_lossy().into_owned()
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    crate::scratch(tag)
}

/// Run a `kstage` command that must fail with exit code 1; its stderr must name every
/// `needle`.
fn fails_naming(args: &[&str], needles: &[&str]) {
    let out = kstage(args);
    assert_eq!(out.status.code(), Some(1), "kstage {args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in needles {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: default
spec:
  nodeName: node-0
  containers:
  - name: app
    image: app:1
";

fn stage_names(report: &Value) -> Vec<String> {
    report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter_map(|e| e["stage"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn pod_general_reaches_running_then_deletion_removes_it() {
    let dir = tempdir("general");
    let pod = write(&dir, "pod.yaml", POD);
    let general = kwok_dir().join("stage/pod/general");
    let general = general.to_string_lossy();

    // Without deletion: the pod ends Running and Ready.
    let out = ok(&[
        "sim",
        "--stages",
        &general,
        "--objects",
        &pod,
        "--until",
        "10m",
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(stage_names(&report), ["pod-create", "pod-ready"]);
    let objects = report["objects"].as_array().expect("objects");
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["status"]["phase"], "Running");
    let ready = objects[0]["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("a Ready condition");
    assert_eq!(ready["status"], "True");
    assert!(objects[0]["status"]["podIP"].is_string());

    // With a user deletion after 5 minutes: pod-delete removes it.
    let out = ok(&[
        "sim",
        "--stages",
        &general,
        "--objects",
        &pod,
        "--until",
        "10m",
        "--delete-after",
        "5m",
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(
        stage_names(&report),
        ["pod-create", "pod-ready", "pod-delete"]
    );
    let deletes: Vec<&Value> = report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|e| e["event"] == "user-delete")
        .collect();
    assert_eq!(deletes.len(), 1, "one graceful user delete");
    assert_eq!(
        deletes[0]["removed"], false,
        "a bound pod is only marked at first"
    );
    assert_eq!(
        report["objects"].as_array().map(Vec::len),
        Some(0),
        "the pod is gone"
    );
    assert_eq!(report["stats"]["errors"], 0);
}

/// A Stage whose finalizer step releases a terminating object (the server removes it
/// on that write) is in the timeline and the counts: its later delete step finds
/// nothing left to do, as after a delete, instead of failing with a 404.
#[test]
fn a_stage_that_releases_its_object_with_a_finalizer_step_is_counted() {
    let dir = tempdir("release");
    let stage = write(
        &dir,
        "release.yaml",
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: release
spec:
  resourceRef: {apiGroup: v1, kind: ConfigMap}
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
  steps:
  - finalizers: {empty: true}
  - event: {type: Normal, reason: Released, message: finalizers removed}
  - delete: true
",
    );
    let held = write(
        &dir,
        "held.yaml",
        "apiVersion: v1
kind: ConfigMap
metadata:
  name: held
  namespace: default
  finalizers: [example.com/hold]
",
    );
    let out = ok(&[
        "sim",
        "--stages",
        &stage,
        "--objects",
        &held,
        "--delete-after",
        "1s",
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(stage_names(&report), ["release"], "{out}");
    let entry = report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .find(|e| e["stage"] == "release")
        .expect("the release Stage");
    assert!(entry.get("error").is_none_or(Value::is_null), "{entry}");
    let stats = &report["stats"];
    assert_eq!(stats["transitions"], 1, "{stats}");
    assert_eq!(stats["errors"], 0, "{stats}");
    assert_eq!(
        stats["events"], 1,
        "the event after the release is sent: {stats}"
    );
    assert_eq!(
        report["objects"].as_array().map(Vec::len),
        Some(0),
        "released"
    );
}

/// A write the API server would refuse for its metadata (a label value that is no label
/// value) is refused by the simulated one too, and reported like any failed write: an
/// error in the timeline and the counts, exit code 1, the object left as it was.
#[test]
fn a_write_of_invalid_metadata_is_refused_and_reported() {
    let dir = tempdir("invalid-metadata");
    let stage = write(
        &dir,
        "ttl.yaml",
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: ttl
spec:
  resourceRef: {apiGroup: v1, kind: ConfigMap}
  selector:
    matchExpressions:
    - {key: .metadata.labels.ttl, operator: DoesNotExist}
  next:
    patches:
    - type: merge
      template: '{\"metadata\": {\"labels\": {\"ttl\": \"-99999h\"}}}'
",
    );
    let cm = write(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\n",
    );
    // A run with failed writes exits 1, its report written all the same.
    let run = kstage(&[
        "sim",
        "--stages",
        &stage,
        "--objects",
        &cm,
        "--until",
        "10m",
        "-o",
        "json",
    ]);
    assert_eq!(run.status.code(), Some(1));
    let out = String::from_utf8_lossy(&run.stdout);
    let report: Value = serde_json::from_str(&out).expect("json report");
    let errors: Vec<&str> = report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter_map(|e| e["error"].as_str())
        .collect();
    assert!(!errors.is_empty(), "{out}");
    for error in &errors {
        assert!(
            error.contains(
                "metadata.labels: Invalid value: \"-99999h\": a valid label must be an empty string"
            ),
            "{error}"
        );
    }
    assert!(
        report["stats"]["errors"].as_u64().is_some_and(|n| n >= 1),
        "{}",
        report["stats"]
    );
    let settings = &report["objects"][0];
    assert!(settings["metadata"].get("labels").is_none(), "{settings}");
}

#[test]
fn same_seed_same_output_byte_for_byte() {
    let args = |seed: &'static str| {
        vec![
            "sim",
            "--stages",
            "examples/stages",
            "--objects",
            "examples/objects",
            "--until",
            "3m",
            "--seed",
            seed,
            "--delete-after",
            "2m",
        ]
    };
    let a = ok(&args("7"));
    let b = ok(&args("7"));
    assert_eq!(a, b, "the same seed must give the same bytes");
    let c = ok(&args("8"));
    assert_ne!(a, c, "another seed draws other delays");
    assert!(a.contains("stage node-ready"), "{a}");
    assert!(a.contains("stage pod-running"), "{a}");
    assert!(a.contains("stage pod-succeeded"), "{a}");
    assert!(a.contains("stage pod-removed"), "{a}");
}

#[test]
fn unknown_file_is_a_clear_error() {
    fails_naming(
        &[
            "sim",
            "--stages",
            "examples/stages",
            "--objects",
            "no/such/file.yaml",
        ],
        &["no/such/file.yaml"],
    );
}

#[test]
fn invalid_yaml_names_the_file() {
    let dir = tempdir("badyaml");
    let bad = write(
        &dir,
        "bad.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n",
    );
    fails_naming(
        &["sim", "--stages", "examples/stages", "--objects", &bad],
        &["bad.yaml"],
    );
}

#[test]
fn invalid_stage_names_the_field() {
    let dir = tempdir("badstage");
    let stage = write(
        &dir,
        "stage.yaml",
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: broken
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: Sometimes
      values: [Running]
",
    );
    let pod = write(&dir, "pod.yaml", POD);
    fails_naming(
        &["sim", "--stages", &stage, "--objects", &pod],
        &["broken", "spec.selector.matchExpressions[0].operator"],
    );
}

#[test]
fn object_without_a_name_is_rejected() {
    let dir = tempdir("noname");
    let obj = write(
        &dir,
        "obj.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
    );
    fails_naming(
        &["sim", "--stages", "examples/stages", "--objects", &obj],
        &["obj.yaml#0"],
    );
}

#[test]
fn faults_are_retried_and_the_run_stays_reproducible() {
    let dir = tempdir("faults");
    let pod = write(&dir, "pod.yaml", POD);
    let general = kwok_dir().join("stage/pod/general");
    let general = general.to_string_lossy();
    let args = [
        "sim",
        "--stages",
        &general,
        "--objects",
        &pod,
        "--copies",
        "50",
        "--until",
        "1h",
        "--delete-after",
        "10m",
        "--faults",
        "*:503=0.3,patch:409=0.1",
        "-o",
        "json",
    ];
    let out = ok(&args);
    let report: Value = serde_json::from_str(&out).expect("json report");
    assert!(
        report["stats"]["faults"].as_u64().is_some_and(|n| n > 10),
        "{}",
        report["stats"]
    );
    assert!(
        report["stats"]["retries"].as_u64().is_some_and(|n| n > 10),
        "{}",
        report["stats"]
    );
    assert_eq!(report["stats"]["errors"], 0);
    assert_eq!(
        report["objects"].as_array().map(Vec::len),
        Some(0),
        "every pod went through to deletion"
    );
    let failed_attempts = report["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|e| e["error"].is_string())
        .count();
    assert!(failed_attempts > 0, "failed attempts are in the timeline");
    assert_eq!(out, ok(&args), "same seed, same faults, same bytes");
}

#[test]
fn a_bad_fault_spec_is_a_usage_error() {
    let out = kstage(&[
        "sim",
        "--stages",
        "examples/stages",
        "--objects",
        "examples/objects",
        "--faults",
        "patch:teapot=0.1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown fault"), "{err}");
}

/// What `kstage sim` prints, byte for byte, for the README's quick-start command and for a
/// run under injected faults (retries, refreshes, failed deletes) with a fixed seed: a
/// change that is not meant to change behaviour (a reshaping of the engine) keeps both.
/// After a change that is, the files are written again with the commands in their names'
/// test and the difference reviewed.
#[test]
fn sim_output_is_unchanged_for_the_quick_start_and_a_faulted_run() {
    let general = kwok_dir().join("stage/pod/general");
    let fast = kwok_dir().join("stage/node/fast");
    let (general, fast) = (general.to_string_lossy(), fast.to_string_lossy());
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "tests/golden/sim-quickstart.txt",
            vec![
                "sim",
                "--stages",
                "examples/stages",
                "--objects",
                "examples/objects",
                "--until",
                "3m",
                "--delete-after",
                "2m",
            ],
        ),
        (
            "tests/golden/sim-faults.txt",
            vec![
                "sim",
                "--stages",
                &general,
                &fast,
                "--objects",
                "examples/objects",
                "--copies",
                "4",
                "--until",
                "3m",
                "--delete-after",
                "2m",
                "--faults",
                "*:503=0.2,*:reset=0.1,patch:409=0.1,delete:404=0.05",
                "--seed",
                "3",
            ],
        ),
    ];
    for (golden, args) in runs {
        let expected = std::fs::read_to_string(crate::root().join(golden)).expect("golden output");
        assert_eq!(ok(&args), expected, "kstage {}", args.join(" "));
    }
}

/// `--swap` takes a new version of a plugin at a virtual time; under its `rollout` it
/// is analysed on the run's calls (failed steps under injected faults ask the
/// classifier) and rolled back or promoted, the same way on every run of one seed.
#[test]
fn a_swapped_plugin_version_is_analysed_and_decided_the_same_way_every_run() {
    use crate::fixtures::Classify;
    use crate::rollout::component;
    let dir = tempdir("sim-swap");
    let pod = write(&dir, "pod.yaml", POD);
    for (file, behaviour, version) in [
        ("v1.wasm", Classify::Policy, "1.0.0"),
        // Passes validation, traps on the 503s the faults inject.
        ("bad.wasm", Classify::TrapOn503, "2.0.0"),
        ("good.wasm", Classify::Policy, "3.0.0"),
    ] {
        std::fs::write(dir.join(file), component(behaviour, version)).expect("write");
    }
    let config = write(
        &dir,
        "config.yaml",
        "plugins:
- name: retry
  path: v1.wasm
  rollout: {canary: 50, analysis: {minCalls: 5, maxErrorRate: 0.2, duration: 1m}}
bindings:
  classifier: retry
",
    );
    let general = kwok_dir().join("stage/pod/general");
    let general = general.to_string_lossy();
    let run = |swap: &str| {
        let swap = format!("1m:retry={}", dir.join(swap).display());
        let args = [
            "sim",
            "--stages",
            &general,
            "--objects",
            &pod,
            "--copies",
            "20",
            "--until",
            "1h",
            "--delete-after",
            "10m",
            "--faults",
            "*:503=0.3",
            "--config",
            &config,
            "--swap",
            &swap,
            "-o",
            "json",
        ];
        // Both classifiers drop a job at its third attempt: a run may end with errors
        // (exit code 1) and still report.
        let stdout = || String::from_utf8(kstage(&args).stdout).expect("UTF-8");
        let out = stdout();
        assert_eq!(out, stdout(), "same seed, same calls, same verdict");
        let report: Value = serde_json::from_str(&out).expect("json report");
        assert!(
            report["stats"]["retries"].as_u64() > Some(10),
            "{}",
            report["stats"]
        );
        report["plugins"].as_array().expect("plugin events").clone()
    };
    let events = |plugins: &[Value]| -> Vec<(String, String)> {
        plugins
            .iter()
            .map(|e| {
                (
                    e["at"].as_str().expect("at").to_owned(),
                    e["event"].as_str().expect("event").to_owned(),
                )
            })
            .collect()
    };

    let bad = run("bad.wasm");
    let seen = events(&bad);
    assert_eq!(
        seen[0],
        ("+00:01:00.000".to_owned(), "analysing".to_owned()),
        "{bad:?}"
    );
    assert_eq!(seen.len(), 2, "{bad:?}");
    assert_eq!(seen[1].1, "rolled-back", "{bad:?}");
    assert!(
        seen[1].0.as_str() >= "+00:10:00.000",
        "decided by the deletions' calls: {bad:?}"
    );
    let why = bad[1]["detail"].as_str().expect("detail");
    assert!(
        why.contains("(5 of 5 calls) is above maxErrorRate 20%"),
        "{why}"
    );

    let good = run("good.wasm");
    let seen = events(&good);
    assert_eq!(seen.len(), 2, "{good:?}");
    assert_eq!(seen[1].1, "promoted", "{good:?}");
    let why = good[1]["detail"].as_str().expect("detail");
    assert!(why.starts_with("every limit held over"), "{why}");

    fails_naming(
        &[
            "sim",
            "--stages",
            &general,
            "--objects",
            &pod,
            "--config",
            &config,
            "--swap",
            "1m:nope=x.wasm",
        ],
        &["--swap: no plugin \"nope\" in --config"],
    );
}

/// sprig's random functions draw from `--seed`: the same seed writes the same UUID and
/// string into the object, another seed other ones.
#[test]
fn sprig_randomness_follows_the_seed() {
    let dir = tempdir("sprig-seed");
    let pod = write(&dir, "pod.yaml", POD);
    let stage = write(
        &dir,
        "stage.yaml",
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: tag}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.annotations.id', operator: DoesNotExist}
  steps:
  - patch:
      template: |
        metadata:
          annotations:
            id: {{ uuidv4 | quote }}
            token: {{ randAlphaNum 16 | quote }}
            at: {{ now | date \"2006-01-02T15:04:05Z07:00\" | quote }}
",
    );
    let annotations = |seed: &str| {
        let out = ok(&[
            "sim",
            "--stages",
            &stage,
            "--objects",
            &pod,
            "--until",
            "1m",
            "--seed",
            seed,
            "-o",
            "json",
        ]);
        let report: Value = serde_json::from_str(&out).expect("json report");
        report["objects"][0]["metadata"]["annotations"].clone()
    };
    let a = annotations("1");
    assert_eq!(a, annotations("1"), "same seed, same values");
    assert_ne!(
        a["id"],
        annotations("2")["id"],
        "another seed, another UUID"
    );
    assert_eq!(a["token"].as_str().map(str::len), Some(16), "{a}");
    assert_eq!(a["at"], "2025-01-01T00:00:00Z", "the virtual clock");
}
