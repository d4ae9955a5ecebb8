//! Plugins inside the engine: who decides (bindings and their precedence), failure
//! policies, and hot swaps during a 10,000-pod simulation.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use kstage::clock::{Clock, TokioClock};
use kstage::plugin::config::{FailurePolicy, PluginConfig, PluginSpec, Policies};
use kstage::plugin::{Capability, PluginSet, Runtime, Settings};
use kstage::sim::{Config, Report, What};
use kstage::stage::StageSet;
use kstage::template::{Renderer, StageEnv};

use crate::fixtures::{Fixture, Render};

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc)
}

fn folder(tag: &str) -> PathBuf {
    crate::scratch(&format!("plugin-{tag}"))
}

/// Two Stages per pod with JSON templates; `annotations` go on the first.
fn stages(first_annotations: &str) -> String {
    format!(
        r#"
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-run
  annotations: {{{first_annotations}}}
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .status.phase, operator: In, values: [Pending]}}
  delay: {{durationMilliseconds: 0, jitterDurationMilliseconds: 10000}}
  next:
    event: {{type: Normal, reason: Run, message: run}}
    statusTemplate: '{{"phase": "Run{{{{ if true }}}}ning{{{{ end }}}}"}}'
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-finish
spec:
  resourceRef: {{apiGroup: v1, kind: Pod}}
  selector:
    matchExpressions:
    - {{key: .status.phase, operator: In, values: [Running, "Run{{{{ if true }}}}ning{{{{ end }}}}"]}}
  delay: {{durationMilliseconds: 1000, jitterDurationMilliseconds: 10000}}
  next:
    event: {{type: Normal, reason: Finish, message: finish}}
    statusTemplate: '{{"phase": "Succeeded"}}'
"#
    )
}

fn pods(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": format!("pod-{i}"), "namespace": "default"},
                "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app"}]},
            })
        })
        .collect()
}

struct Run {
    report: Report,
    set: Arc<PluginSet>,
}

/// Simulate `n` pods through [`stages`] with the renderer plugin `fixture` bound
/// globally (`bound`) or not; `during` runs beside the simulation.
fn simulate<F, Fut>(
    annotations: &str,
    fixture: &Fixture,
    bound: bool,
    policies: Policies,
    n: usize,
    during: F,
) -> Run
where
    F: FnOnce(Arc<PluginSet>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let dir = folder(&format!("{}-{n}-{bound}", annotations.len()));
    let path = dir.join("echo.wasm");
    std::fs::write(&path, fixture.build()).expect("write plugin");
    let config = PluginConfig {
        plugins: vec![PluginSpec {
            name: "echo".to_owned(),
            path,
            sha256: None,
            settings: Settings::default(),
            policies,
            rollout: Default::default(),
            oci: None,
        }],
        bindings: if bound {
            BTreeMap::from([(Capability::Renderer, "echo".to_owned())])
        } else {
            BTreeMap::new()
        },
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start()));
        let renderer = Renderer::new(Arc::new(StageEnv::new(clock.clone(), start(), "test")));
        let loaded =
            kstage::stage::load::load_str(&stages(annotations), &renderer).expect("stages");
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let set = PluginSet::load(
            Runtime::new().expect("runtime"),
            config,
            clock.clone(),
            Some(7),
        )
        .expect("the plugin loads");
        let swapper = tokio::spawn(during(set.clone()));
        let config = Config {
            start: start(),
            deciders: set.deciders(),
            ..Config::default()
        };
        let report = kstage::sim::run(StageSet::new(loaded.stages), clock, pods(n), config)
            .await
            .expect("the simulation runs");
        swapper.abort();
        Run { report, set }
    })
}

fn phases(report: &Report) -> HashMap<String, usize> {
    let mut phases = HashMap::new();
    for object in &report.objects {
        let phase = object["status"]["phase"]
            .as_str()
            .unwrap_or("none")
            .to_owned();
        *phases.entry(phase).or_default() += 1;
    }
    phases
}

async fn nothing(_: Arc<PluginSet>) {}

#[test]
fn the_bound_renderer_renders_unless_the_stage_says_builtin() {
    let echo = Fixture {
        render: Some(Render::Echo),
        ..Fixture::default()
    };
    // Bound globally: the plugin echoes the Go template text verbatim.
    let run = simulate("", &echo, true, Policies::default(), 3, nothing);
    assert_eq!(
        phases(&run.report).get("Succeeded"),
        Some(&3),
        "{:?}",
        phases(&run.report)
    );
    let plugin = run.set.plugin("echo").expect("loaded");
    // 3 pods × 2 Stages, plus the smoke call of validation.
    assert_eq!(
        plugin
            .stats(Capability::Renderer)
            .calls
            .load(Ordering::Relaxed),
        7
    );
    // The first Stage opts out: Go renders it (its output is `Running`, not the text).
    let run = simulate(
        r#""kstage.dev/renderer": builtin"#,
        &echo,
        true,
        Policies::default(),
        3,
        nothing,
    );
    assert_eq!(phases(&run.report).get("Succeeded"), Some(&3));
    let plugin = run.set.plugin("echo").expect("loaded");
    assert_eq!(
        plugin
            .stats(Capability::Renderer)
            .calls
            .load(Ordering::Relaxed),
        4
    );
    // Not bound globally, but named by the first Stage's annotation.
    let run = simulate(
        r#""kstage.dev/renderer": echo"#,
        &echo,
        false,
        Policies::default(),
        3,
        nothing,
    );
    let plugin = run.set.plugin("echo").expect("loaded");
    assert_eq!(
        plugin
            .stats(Capability::Renderer)
            .calls
            .load(Ordering::Relaxed),
        4
    );
    assert_eq!(phases(&run.report).get("Succeeded"), Some(&3));
}

#[test]
fn a_stage_naming_an_unknown_plugin_fails_its_step_loudly() {
    let echo = Fixture {
        render: Some(Render::Echo),
        ..Fixture::default()
    };
    let run = simulate(
        r#""kstage.dev/renderer": ghost"#,
        &echo,
        false,
        Policies::default(),
        2,
        nothing,
    );
    // The step is retried (backoff) until the run ends: no pod moves on.
    assert_eq!(
        phases(&run.report).get("Pending"),
        Some(&2),
        "{:?}",
        phases(&run.report)
    );
    assert!(run.set.metrics().failures.load(Ordering::Relaxed) > 0);
    let errors: Vec<String> = run
        .report
        .timeline
        .iter()
        .filter_map(|e| match &e.what {
            What::Stage {
                error: Some(error), ..
            } => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e
                .contains("plugin ghost: renderer.render: no plugin of this name is configured")),
        "{errors:?}"
    );
}

#[test]
fn failure_policy_fail_retries_and_fallback_renders_builtin() {
    let flaky = Fixture {
        render: Some(Render::TrapOnLong),
        ..Fixture::default()
    };
    let fallback = Policies {
        renderer: FailurePolicy::Fallback,
        ..Policies::default()
    };
    let run = simulate("", &flaky, true, fallback, 4, nothing);
    assert_eq!(phases(&run.report).get("Succeeded"), Some(&4));
    assert_eq!(run.set.metrics().fallbacks.load(Ordering::Relaxed), 8);
    assert_eq!(run.report.stats.retries, 0);

    let run = simulate("", &flaky, true, Policies::default(), 4, nothing);
    assert_eq!(
        phases(&run.report).get("Pending"),
        Some(&4),
        "{:?}",
        phases(&run.report)
    );
    assert!(run.report.stats.retries > 0, "the failed steps are retried");
    assert!(run.set.metrics().failures.load(Ordering::Relaxed) > 0);
}

#[test]
fn hot_swaps_during_a_run_lose_nothing_and_never_serve_a_broken_version() {
    let version = |v: &'static str| {
        Fixture {
            render: Some(Render::Echo),
            version: v,
            ..Fixture::default()
        }
        .build()
    };
    let a = version("1.0.0");
    let b = version("2.0.0");
    let trapping = Fixture {
        render: Some(Render::Trap),
        version: "6.6.6",
        ..Fixture::default()
    }
    .build();
    let pods = 10_000;
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = served.clone();
    let run = simulate(
        "",
        &Fixture {
            render: Some(Render::Echo),
            version: "0.0.1",
            ..Fixture::default()
        },
        true,
        Policies::default(),
        pods,
        move |set: Arc<PluginSet>| async move {
            seen.lock()
                .expect("lock")
                .push(set.plugin("echo").expect("serving"));
            let mut valid = 0;
            for i in 0..125u32 {
                // 125 attempts over 12.5 virtual seconds, while pods are being played.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let report = match i % 5 {
                    4 if i % 2 == 0 => set.replace("echo", &trapping),
                    4 => set.replace("echo", b"\0asm garbage"),
                    _ => {
                        valid += 1;
                        set.replace("echo", if valid % 2 == 1 { &a } else { &b })
                    }
                };
                if i % 5 == 4 {
                    assert_eq!(report.rejected.len(), 1, "attempt {i}: {report:?}");
                } else {
                    assert_eq!(report.swapped, ["echo"], "attempt {i}: {report:?}");
                }
                seen.lock()
                    .expect("lock")
                    .push(set.plugin("echo").expect("serving"));
            }
        },
    );
    let metrics = run.set.metrics();
    assert_eq!(metrics.swaps.load(Ordering::Relaxed), 100);
    assert_eq!(metrics.rejections.load(Ordering::Relaxed), 25);
    // Nothing lost, nothing played twice: every pod played both Stages exactly once.
    assert_eq!(
        phases(&run.report).get("Succeeded"),
        Some(&pods),
        "{:?}",
        phases(&run.report)
    );
    assert_eq!(run.report.stats.transitions, 2 * pods as u64);
    assert_eq!(run.report.stats.events, 2 * pods as u64);
    assert_eq!(run.report.stats.retries, 0);
    let mut per_object: HashMap<String, usize> = HashMap::new();
    for entry in &run.report.timeline {
        if matches!(entry.what, What::Stage { .. }) {
            *per_object.entry(entry.object.to_string()).or_default() += 1;
        }
    }
    assert_eq!(per_object.len(), pods);
    assert!(per_object.values().all(|n| *n == 2));
    // Every render was served by a valid version (each version also took its smoke call).
    let served = served.lock().expect("lock");
    assert_eq!(served.len(), 126, "the first version, then one per attempt");
    let mut unique: Vec<&Arc<kstage::plugin::Plugin>> = Vec::new();
    for plugin in served.iter() {
        if !unique.iter().any(|p| Arc::ptr_eq(p, plugin)) {
            unique.push(plugin);
        }
    }
    assert_eq!(unique.len(), 101, "every swap installed a new instance");
    let calls: u64 = unique
        .iter()
        .map(|p| p.stats(Capability::Renderer).calls.load(Ordering::Relaxed) - 1)
        .sum();
    let failures: u64 = unique
        .iter()
        .map(|p| {
            p.stats(Capability::Renderer)
                .failures
                .load(Ordering::Relaxed)
        })
        .sum();
    assert_eq!(calls, 2 * pods as u64);
    assert_eq!(failures, 0);
    assert!(unique.iter().all(|p| p.info().version != "6.6.6"));
    let busy = unique
        .iter()
        .filter(|p| p.stats(Capability::Renderer).calls.load(Ordering::Relaxed) > 1)
        .count();
    assert!(
        busy > 50,
        "the swaps happened while pods were played ({busy} versions served)"
    );
}

/// A ConfigMap volume: `echo.wasm -> ..data/echo.wasm`, `..data -> ..<version>/`; an
/// update writes a new version folder and swaps the `..data` symlink by rename.
fn configmap_update(dir: &std::path::Path, version: &str, bytes: &[u8]) {
    let versioned = dir.join(format!("..{version}"));
    std::fs::create_dir_all(&versioned).expect("version folder");
    std::fs::write(versioned.join("echo.wasm"), bytes).expect("write");
    let staged = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(format!("..{version}"), &staged).expect("symlink");
    std::fs::rename(&staged, dir.join("..data")).expect("swap ..data");
}

#[test]
fn the_watcher_swaps_on_a_configmap_update_and_rejects_a_broken_one() {
    let dir = folder("watch");
    let first = Fixture {
        render: Some(Render::Echo),
        version: "1.0.0",
        ..Fixture::default()
    }
    .build();
    let second = Fixture {
        render: Some(Render::Echo),
        version: "2.0.0",
        ..Fixture::default()
    }
    .build();
    configmap_update(&dir, "v1", &first);
    std::os::unix::fs::symlink("..data/echo.wasm", dir.join("echo.wasm")).expect("link");
    let config = PluginConfig {
        plugins: vec![PluginSpec {
            name: "echo".to_owned(),
            path: dir.join("echo.wasm"),
            sha256: None,
            settings: Settings::default(),
            policies: Policies::default(),
            rollout: Default::default(),
            oci: None,
        }],
        bindings: BTreeMap::new(),
    };
    let clock: Arc<dyn Clock> = Arc::new(kstage::clock::SystemClock);
    let set =
        PluginSet::load(Runtime::new().expect("runtime"), config, clock, None).expect("loads");
    assert_eq!(set.plugin("echo").expect("serving").info().version, "1.0.0");
    let (reloads, reports) = std::sync::mpsc::channel();
    let _watcher = kstage::plugin::watch::watch(set.clone(), move |report| {
        let _ = reloads.send(report.clone());
    })
    .expect("watching");
    let wait = || {
        reports
            .recv_timeout(Duration::from_secs(60))
            .expect("a reload report")
    };

    configmap_update(&dir, "v2", &second);
    let report = wait();
    assert_eq!(report.swapped, ["echo"], "{report:?}");
    assert_eq!(set.plugin("echo").expect("serving").info().version, "2.0.0");

    configmap_update(&dir, "v3", b"not a component");
    let report = wait();
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    assert!(
        report.rejected[0].1.contains("not a valid component"),
        "{report:?}"
    );
    assert_eq!(set.plugin("echo").expect("serving").info().version, "2.0.0");
    assert_eq!(set.metrics().rejections.load(Ordering::Relaxed), 1);
    let _ = std::fs::remove_dir_all(&dir);
}
