//! The command line: help, lint and explain.

use crate::{kstage, ok};

#[test]
fn help_lists_every_command() {
    let help = ok(&["--help"]);
    for command in ["stage", "sim"] {
        assert!(help.contains(command), "{help}");
    }
    let stage = ok(&["stage", "--help"]);
    for command in ["explain", "lint"] {
        assert!(stage.contains(command), "{stage}");
    }
}

#[test]
fn lint_accepts_the_examples_and_the_kwok_corpus() {
    let out = ok(&["stage", "lint", "--stages", "examples/stages"]);
    assert!(out.contains("0 problems, 0 warnings"), "{out}");
    // Each KWOK set on its own (sets reuse Stage names, as alternatives to each other).
    let corpus = crate::kwok_dir().join("stage");
    for set in [
        "node/fast",
        "node/heartbeat",
        "node/chaos",
        "pod/general",
        "pod/fast",
        "pod/chaos",
        "volume/fast",
    ] {
        let out = ok(&[
            "stage",
            "lint",
            "--stages",
            &corpus.join(set).to_string_lossy(),
        ]);
        assert!(
            out.contains("Stages valid, 0 problems, 0 warnings")
                || out.contains("Stage valid, 0 problems, 0 warnings"),
            "{set}: {out}"
        );
    }
}

/// Stages that compile but can run without bound are warned about, with their place,
/// and still load (exit 0); the warning names what it saw.
#[test]
fn lint_warns_about_unbounded_expressions_and_self_matching_stages() {
    let dir = crate::scratch("lint-warnings");
    let file = dir.join("stages.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: looping
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: .metadata.name
      operator: Exists
  steps:
  - patch:
      type: merge
      template: '{"metadata":{"annotations":{"seen":"{{ .metadata.resourceVersion }}"}}}'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: settles
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: .metadata.annotations.done
      operator: DoesNotExist
  steps:
  - patch:
      type: merge
      template: '{"metadata":{"annotations":{"done":"{{ .metadata.resourceVersion }}"}}}'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: constant
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchLabels: {type: kwok}
  steps:
  - patch:
      type: merge
      template: '{"metadata":{"annotations":{"ready":"yes"}}}'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: generator
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '[repeat(.)] | length'
      operator: Exists
  weightFrom:
    expressionFrom: 'def f: f + 1; f'
  delay:
    durationMilliseconds: 1000
"#,
    )
    .expect("write");
    let out = kstage(&["stage", "lint", "--stages", &file.to_string_lossy()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "warnings do not fail:\n{text}");
    for needle in [
        "warning: ",
        "stages.yaml#0 stage \"looping\": spec: no delay, and its steps write metadata.annotations.seen",
        "stages.yaml#3 stage \"generator\": spec.selector.matchExpressions[0].key: repeat generates without end",
        "stages.yaml#3 stage \"generator\": spec.weightFrom.expressionFrom: f calls itself",
        "4 Stages valid, 0 problems, 3 warnings",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // A write the selector reads, or the same write each time, settles: no warning.
    assert!(
        !text.contains("\"settles\"") && !text.contains("\"constant\""),
        "{text}"
    );
}

#[test]
fn lint_reports_every_problem_with_its_place() {
    let dir = std::env::temp_dir().join(format!("kstage-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("stages.yaml");
    std::fs::write(
        &file,
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: good
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchLabels: {app: web}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: bad
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - key: '.status.phase | '
      operator: In
      values: [Running]
    - key: '.metadata.name'
      operator: Exists
      values: [x]
    - cel:
        expression: 'self.metadata.name =='
  steps:
  - patch:
      template: '{{ .metadata.name '
  - patch:
      type: sideways
      template: 'a: b'
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-a-stage
",
    )
    .expect("write");
    let out = kstage(&["stage", "lint", "--stages", &file.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1), "lint exits 1 on problems");
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "stages.yaml#1 stage \"bad\": spec.selector.matchExpressions[0].key",
        "spec.selector.matchExpressions[1].values",
        "spec.selector.matchExpressions[2].cel.expression",
        "spec.steps[0].patch.template",
        "spec.steps[1].patch.type",
        "1 Stage valid, 5 problems, 0 warnings",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn explain_shows_actions_and_noops() {
    let dir = std::env::temp_dir().join(format!("kstage-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pod = dir.join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default, deletionTimestamp: '2030-01-01T00:00:00Z'}
spec: {nodeName: n, containers: [{name: c, image: i}]}
",
    )
    .expect("write");
    let out = ok(&[
        "stage",
        "explain",
        "--stages",
        "examples/stages",
        "--now",
        "2030-01-01T00:00:00Z",
        &pod.to_string_lossy(),
    ]);
    assert!(out.contains("Stage pod-removed"), "{out}");
    assert!(out.contains("event Normal Killing"), "{out}");
    assert!(out.contains("delete"), "{out}");
    // The pod has no finalizers, so emptying them sends nothing: no patch is listed.
    assert!(!out.contains("json-patch"), "{out}");
    // The deletion time is now, so the jitter bound (0) is below the base delay: no wait.
    assert!(out.contains("delay 0s"), "{out}");
}

#[test]
fn explain_of_an_unknown_object_file_fails_cleanly() {
    let out = kstage(&[
        "stage",
        "explain",
        "--stages",
        "examples/stages",
        "missing.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.yaml"));
}

/// A missing kubeconfig is named once, with its OS error once.
#[test]
fn a_missing_kubeconfig_is_reported_once() {
    let missing = "/nonexistent/kstage-it.kubeconfig";
    let out = kstage(&[
        "run",
        "--kubeconfig",
        missing,
        "--stages",
        "examples/stages",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.matches(missing).count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("'\""), "quoted twice: {stderr}");
}

/// An apply step that writes a cluster-scoped kind (KWOK's volume Stages write a
/// PersistentVolume for a claim) gives it no namespace, though its template inherits the
/// claim's.
#[test]
fn an_applied_cluster_scoped_object_gets_no_namespace() {
    let dir = crate::scratch("explain-pv");
    let claim = dir.join("pvc.yaml");
    std::fs::write(
        &claim,
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: team-a, uid: 0f1e2d3c-0000-0000-0000-000000000001}
spec:
  storageClassName: kwok-volume
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
status: {phase: Pending}
",
    )
    .expect("write");
    let volume = crate::kwok_dir().join("stage/volume/fast");
    let out = ok(&[
        "stage",
        "explain",
        "--stages",
        &volume.to_string_lossy(),
        "-o",
        "json",
        &claim.to_string_lossy(),
    ]);
    let explained: serde_json::Value = serde_json::from_str(&out).expect("json");
    let applied: Vec<&serde_json::Value> = explained
        .pointer("/stages/0/next")
        .and_then(|a| a.as_array())
        .expect("actions")
        .iter()
        .filter_map(|a| a.get("data"))
        .filter(|o| o["kind"] == "PersistentVolume")
        .collect();
    assert_eq!(applied.len(), 1, "{out}");
    assert_eq!(applied[0]["metadata"].get("namespace"), None, "{out}");
    assert_eq!(
        applied[0]["spec"]["claimRef"]["namespace"], "team-a",
        "the claim it binds keeps its namespace"
    );
}

/// `kstage bench --soak`: rounds of the lifecycle, a sample line per interval (RSS, open
/// fds, queue depth, transitions/s), then the growth verdict. (Whether this short run
/// grows is not asserted: the exit code says it, 1 for growth.)
#[test]
fn bench_soak_samples_the_engine_while_it_churns() {
    let [nodes, pods] = ["stage/node/fast", "stage/pod/fast"]
        .map(|s| crate::kwok_dir().join(s).display().to_string());
    let out = crate::kstage(&[
        "bench",
        "--embedded",
        "--stages",
        &nodes,
        &pods,
        "--nodes",
        "3",
        "--pods",
        "20",
        "--soak",
        "3s",
        "--sample",
        "250ms",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("soak: t="))
        .collect();
    assert!(samples.len() >= 8, "{stdout}");
    for s in &samples {
        for field in ["rss=", "fds=", "queued=", "transitions/s="] {
            assert!(s.contains(field), "{s}");
        }
    }
    let verdict = stdout
        .lines()
        .find(|l| l.contains("rounds in"))
        .expect("a verdict");
    let rounds: usize = verdict
        .trim_start_matches("soak: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("rounds");
    assert!(rounds >= 1, "{verdict}");
    assert!(
        verdict.contains("RSS") && verdict.contains("open fds"),
        "{verdict}"
    );
    let grew = verdict.contains("RSS +") && {
        let pct = |label: &str| -> f64 {
            let at = verdict.find(label).expect("label") + label.len();
            verdict[at..]
                .trim_start()
                .trim_start_matches('+')
                .split('%')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0.0)
        };
        pct("RSS") > 10.0 || pct("open fds") > 10.0
    };
    assert_eq!(
        out.status.code(),
        Some(if grew { 1 } else { 0 }),
        "{verdict}"
    );
}

/// Stages with no delay that play each other in a ring are warned about, naming every
/// Stage of the ring, once; a chain that ends is not.
#[test]
fn lint_warns_about_stages_that_play_each_other_in_a_loop() {
    let dir = crate::scratch("lint-cycles");
    let file = dir.join("stages.yaml");
    let flip = |name: &str, operator: &str, from: &str, to: &str| {
        format!(
            "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\nspec:\n  resourceRef: {{apiGroup: v1, kind: Pod}}\n  selector:\n    matchExpressions:\n    - {{key: .metadata.annotations.state, operator: {operator}, values: [{from}]}}\n  next:\n    patches:\n    - type: merge\n      template: '{{\"metadata\":{{\"annotations\":{{\"state\":\"{to}\"}}}}}}'\n---\n"
        )
    };
    let text = [
        flip("ping", "In", "pong", "ping"),
        flip("pong", "In", "ping", "pong"),
        // A lifecycle that ends, for nodes: no warning.
        flip("start", "NotIn", "running,done", "running").replace("kind: Pod", "kind: Node"),
        flip("finish", "In", "running", "done").replace("kind: Pod", "kind: Node"),
    ]
    .concat();
    std::fs::write(&file, text).expect("write");
    let out = kstage(&["stage", "lint", "--stages", &file.to_string_lossy()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "warnings do not fail:\n{text}");
    for needle in [
        "stages.yaml#0 stage \"ping\": spec: no delay, and neither has pong (",
        "on a sample Pod they play each other in a loop (ping -> pong -> ping)",
        "4 Stages valid, 0 problems, 1 warning",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

/// sprig's functions load (an unknown one is still named by lint), `env` reads only what
/// `--template-env` names, and golden output prints placeholders for random values.
#[test]
fn sprig_functions_lint_and_explain() {
    let dir = crate::scratch("sprig-cli");
    let stages = dir.join("stages.yaml");
    std::fs::write(
        &stages,
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: sprig}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchLabels: {app: web}
  steps:
  - patch:
      template: |
        metadata:
          annotations:
            shout: {{ .metadata.name | upper | quote }}
            path: {{ env \"PATH\" | default \"closed\" | quote }}
            id: {{ uuidv4 | quote }}
",
    )
    .expect("write");
    let pod = dir.join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: default, labels: {app: web}}
spec: {containers: [{name: c, image: i}]}
",
    )
    .expect("write");
    let stages_arg = stages.to_string_lossy().into_owned();
    let pod_arg = pod.to_string_lossy().into_owned();
    let out = ok(&["stage", "lint", "--stages", &stages_arg]);
    assert!(out.contains("1 Stage valid, 0 problems"), "{out}");

    let closed = ok(&["stage", "explain", "--stages", &stages_arg, &pod_arg]);
    assert!(
        closed.contains("WEB-1") && closed.contains("closed"),
        "{closed}"
    );
    let path = std::env::var("PATH").unwrap_or_default();
    let open = ok(&[
        "stage",
        "explain",
        "--template-env",
        "PATH",
        "--stages",
        &stages_arg,
        &pod_arg,
    ]);
    assert!(open.contains(&path) && !open.contains("closed"), "{open}");
    let golden = ok(&[
        "stage",
        "explain",
        "--kwok-golden",
        "--stages",
        &stages_arg,
        &pod_arg,
    ]);
    assert!(golden.contains("<uuidv4>"), "{golden}");

    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&stages)
            .expect("read")
            .replace("upper", "nosuchfunc"),
    )
    .expect("write");
    let out = kstage(&["stage", "lint", "--stages", &bad.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("function \"nosuchfunc\" not defined"),
        "{text}"
    );
}
