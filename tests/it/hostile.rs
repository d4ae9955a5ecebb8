//! Hostile input: what a user writes may cost its own budget and nothing else.

use crate::{kstage, kwok_dir, root, scratch};

/// A Stage for pods whose selector is one hostile expression (`cel` or a jq key).
pub fn hostile_stage(name: &str, expression: &str, cel: bool) -> String {
    let requirement = if cel {
        format!("    - cel:\n        expression: '{expression}'\n")
    } else {
        format!("    - key: '{expression}'\n      operator: Exists\n")
    };
    format!(
        "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: {name}\nspec:\n  resourceRef:\n    apiGroup: v1\n    kind: Pod\n  selector:\n    matchExpressions:\n{requirement}  steps:\n  - patch:\n      type: merge\n      template: '{{\"metadata\":{{\"labels\":{{\"hostile\":\"{name}\"}}}}}}'\n"
    )
}

/// Run `kstage args` with its data (heap, writable mappings) limited to `bytes`, set on
/// the process as soon as it is started (before it has loaded its Stages).
fn within_data(args: &[&str], bytes: u64) -> std::process::Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kstage"))
        .args(args)
        .current_dir(root())
        .env_remove("KSTAGE_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the kstage binary runs");
    let limit = rustix::process::Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    rustix::process::prlimit(
        Some(rustix::process::Pid::from_child(&child)),
        rustix::process::Resource::Data,
        limit,
    )
    .expect("the limit is set");
    child.wait_with_output().expect("kstage ends")
}

/// Programs that overflow the stack, loop, and grow memory without bound, in selectors
/// beside KWOK's `pod/fast`: the run ends, every pod plays `pod/fast` as without them,
/// and each hostile program is reported by Stage with the limit it hit, then disabled.
#[test]
fn hostile_expressions_cost_their_budget_and_nothing_else() {
    let dir = scratch("hostile-expr");
    let cross = "[1,2,3,4,5,6,7,8,9,10]";
    let mut nested = "1".to_owned();
    for var in ["a", "b", "c", "d", "e", "f", "g", "h"] {
        nested = format!("{cross}.map({var}, {nested})");
    }
    let programs = [
        (
            "overflow",
            "def f: 1 + f; f".to_owned(),
            false,
            "ended the evaluating process",
        ),
        (
            "loop",
            "last(range(1e15))".to_owned(),
            false,
            "exceeded its time budget of 200ms",
        ),
        (
            "tail-loop",
            "def f: f; f".to_owned(),
            false,
            "exceeded its time budget of 200ms",
        ),
        (
            "memory",
            "\"x\" * 4000000000 | length".to_owned(),
            false,
            "memory budget of 64 MiB",
        ),
        (
            "collect",
            "[limit(1e12; repeat(1))] | length".to_owned(),
            false,
            "budget",
        ),
        (
            "cel-cross",
            format!("{nested}.size() > 0"),
            true,
            "exceeded its time budget of 200ms",
        ),
    ];
    for (name, expression, cel, _) in &programs {
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &file,
            hostile_stage(&format!("hostile-{name}"), expression, *cel),
        )
        .expect("stage file");
    }
    let fast = kwok_dir().join("stage/pod/fast");
    let pods = root().join("examples/objects/pods.yaml");
    // The whole run within 1 GiB of data (heap and writable mappings: wasmtime's address
    // reservations are not counted): the memory hog asks for 4 GB, so had it been
    // evaluated in kstage's own process, the run would have died.
    let run = |stages: &[&std::path::Path]| {
        let mut args = vec![
            "--expr-timeout",
            "200ms",
            "--expr-memory",
            "64",
            "sim",
            "--stages",
        ];
        let stages: Vec<String> = stages
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        args.extend(stages.iter().map(String::as_str));
        let pods = pods.to_string_lossy().into_owned();
        args.extend(["--objects", &pods, "-o", "summary"]);
        within_data(&args, 1 << 30)
    };
    let calm = run(&[&fast]);
    let hostile = run(&[&dir, &fast]);
    let stderr = String::from_utf8_lossy(&hostile.stderr);
    assert!(
        calm.status.success() && hostile.status.success(),
        "{stderr}"
    );
    // The same transitions, writes and events as without the hostile Stages.
    // (`kstage sim -o summary` prints its summary on stderr, after the log lines.)
    let summary = |out: &std::process::Output| {
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        let line = text
            .lines()
            .find(|l| l.starts_with("kstage sim:"))
            .unwrap_or_default();
        line.split(';').next().unwrap_or_default().to_owned()
    };
    assert_eq!(summary(&hostile), summary(&calm), "{stderr}");
    assert!(summary(&calm).contains("transitions"), "{}", summary(&calm));
    for (name, _, _, limit) in &programs {
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains(&format!("of Stage \"hostile-{name}\"")))
            .collect();
        assert!(
            lines.iter().any(|l| l.contains(limit)),
            "hostile-{name}: no line saying {limit:?}:\n{stderr}"
        );
        assert!(
            lines
                .iter()
                .all(|l| l.contains("(spec.selector.matchExpressions[0].")),
            "hostile-{name}: the field is named:\n{}",
            lines.join("\n")
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("disabled after 3 overruns")),
            "hostile-{name} is not disabled:\n{stderr}"
        );
        // Disabled after three overruns: never evaluated again.
        assert!(lines.len() <= 3, "hostile-{name}:\n{}", lines.join("\n"));
    }
}

/// Sources the parsers cannot take safely are Stage errors: lint reports them with their
/// field, and nothing aborts.
#[test]
fn expressions_too_deep_or_long_are_lint_errors() {
    let dir = scratch("hostile-lint");
    let deep = format!("{}.a{}", "(".repeat(3000), ")".repeat(3000));
    let long = format!(".a{}", " ".repeat(20_000));
    let deep_cel = format!("{}1{}", "[".repeat(3000), "]".repeat(3000));
    std::fs::write(dir.join("deep.yaml"), hostile_stage("deep", &deep, false)).expect("file");
    std::fs::write(dir.join("long.yaml"), hostile_stage("long", &long, false)).expect("file");
    std::fs::write(
        dir.join("deep-cel.yaml"),
        hostile_stage("deep-cel", &deep_cel, true),
    )
    .expect("file");
    let out = kstage(&["stage", "lint", "--stages", &dir.to_string_lossy()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("spec.selector.matchExpressions[0].key") && text.contains("nest 3000 deep"),
        "{text}"
    );
    assert!(text.contains("bytes long; at most 16384"), "{text}");
    assert!(
        text.contains("spec.selector.matchExpressions[0].cel.expression"),
        "{text}"
    );
}

/// A Stage with no delay whose output matches it again: each node would play it at one
/// virtual instant for ever. The loop guard slows each node down (said once per node),
/// virtual time moves on, the run ends at `--until`, and the pods beside it play
/// `pod/fast` as without it.
#[test]
fn a_stage_matching_its_own_output_is_slowed_down() {
    let dir = scratch("hostile-loop");
    let looping = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: self-matching\nspec:\n  resourceRef:\n    apiGroup: v1\n    kind: Node\n  selector:\n    matchExpressions:\n    - key: .metadata.name\n      operator: Exists\n  steps:\n  - patch:\n      type: merge\n      template: '{\"metadata\":{\"annotations\":{\"seen\":\"{{ .metadata.resourceVersion }}\"}}}'\n";
    std::fs::write(dir.join("loop.yaml"), looping).expect("stage file");
    let fast = kwok_dir().join("stage/pod/fast");
    let (nodes, pods) = (
        root().join("examples/objects/nodes.yaml"),
        root().join("examples/objects/pods.yaml"),
    );
    let args = |with_loop: bool| {
        let mut stages = vec![fast.to_string_lossy().into_owned()];
        if with_loop {
            stages.push(dir.to_string_lossy().into_owned());
        }
        let mut args = vec![
            "sim".to_owned(),
            "--until".into(),
            "10m".into(),
            "--stages".into(),
        ];
        args.extend(stages);
        args.extend([
            "--objects".into(),
            nodes.to_string_lossy().into_owned(),
            pods.to_string_lossy().into_owned(),
        ]);
        args.extend(["-o".into(), "summary".into()]);
        args
    };
    let run = |with_loop: bool| {
        let args = args(with_loop);
        kstage(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let transitions = |out: &std::process::Output| -> u64 {
        let text = String::from_utf8_lossy(&out.stderr);
        let line = text
            .lines()
            .find(|l| l.starts_with("kstage sim:"))
            .unwrap_or_default();
        line.split(", ")
            .find_map(|part| part.strip_suffix(" transitions")?.parse().ok())
            .unwrap_or_else(|| panic!("no transitions in {text}"))
    };
    let calm = run(false);
    let looped = run(true);
    let stderr = String::from_utf8_lossy(&looped.stderr);
    assert!(calm.status.success() && looped.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("Stage self-matching played more than 20 times within 1s"))
        .collect();
    assert_eq!(warnings.len(), 2, "once per node:\n{stderr}");
    assert!(
        stderr.contains("kstage sim: 2 objects played Stages in a loop"),
        "the run says so at its end:\n{stderr}"
    );
    // 20 plays a second, then 1 s, 2 s, ... 60 s apart: about 30 per node in 10 minutes
    // (unguarded, the sim stops at its 10,000,000-transition bound instead).
    let extra = transitions(&looped) - transitions(&calm);
    assert!(
        (2 * 21..=2 * 40).contains(&extra),
        "{extra} extra transitions:\n{stderr}"
    );
}

/// Two Stages with no delay for nodes, `ping` setting what `pong` matches and `pong`
/// resetting it.
const PING_PONG: &str = "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: ping}\nspec:\n  resourceRef: {apiGroup: v1, kind: Node}\n  selector:\n    matchExpressions:\n    - {key: .metadata.annotations.state, operator: NotIn, values: [ping]}\n  next:\n    patches:\n    - type: merge\n      template: '{\"metadata\":{\"annotations\":{\"state\":\"ping\"}}}'\n---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {name: pong}\nspec:\n  resourceRef: {apiGroup: v1, kind: Node}\n  selector:\n    matchExpressions:\n    - {key: .metadata.annotations.state, operator: In, values: [ping]}\n  next:\n    patches:\n    - type: merge\n      template: '{\"metadata\":{\"annotations\":{\"state\":\"pong\"}}}'\n";

/// `kstage sim` of two Stages that undo each other: with the loop guard (the default)
/// each node is slowed down, the warning names both Stages, and the run goes on to
/// `--until`; with the guard off, the run still ends.
#[test]
fn a_sim_of_stages_that_undo_each_other_ends() {
    let dir = scratch("hostile-ping-pong");
    let stages = dir.join("ping-pong.yaml");
    std::fs::write(&stages, PING_PONG).expect("stage file");
    let nodes = root().join("examples/objects/nodes.yaml");
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "--until",
            "10m",
            "--stages",
            stages.to_str().expect("path"),
            "--objects",
            nodes.to_str().expect("path"),
            "-o",
            "summary",
        ];
        args.extend(extra);
        kstage(&args)
    };
    let guarded = sim(&[]);
    let stderr = String::from_utf8_lossy(&guarded.stderr);
    assert!(guarded.status.success(), "{stderr}");
    let warnings = stderr
        .lines()
        .filter(|l| l.contains("Stages ping -> pong played back to back more than 20 times"))
        .count();
    assert_eq!(warnings, 2, "once per node:\n{stderr}");
    assert!(
        stderr.contains("kstage sim: 2 objects played Stages in a loop"),
        "{stderr}"
    );

    // With the guard off the run still ends: stopped at the instant it cannot leave
    // (naming the Stages) or, as the in-memory cluster answers today, when the loop
    // settles; never spinning until memory runs out.
    let unguarded = sim(&["--loop-guard", "off"]);
    let stderr = String::from_utf8_lossy(&unguarded.stderr);
    if !unguarded.status.success() {
        for needle in ["Stages were played at that one instant", "ping x", "pong x"] {
            assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
        }
    }
}
