//! Canary rollouts in the plugin set: a new version takes its share of the calls while
//! it is analysed, then is promoted or rolled back; shadow mode never changes an
//! answer; a seeded set draws the same calls.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use kstage::clock::{Clock, ManualClock};
use kstage::plugin::config::{PluginConfig, PluginSpec, Policies};
use kstage::plugin::rollout::{self, Outcome, Phase};
use kstage::plugin::{Capability, PluginSet, Runtime, Settings};
use kstage::retry::{Classifier, Decision, Failure, FailureKind};

use crate::fixtures::{Classify, Fixture};

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("time")
        .with_timezone(&Utc)
}

/// A classifier component behaving as `behaviour`, reporting `version`.
pub fn component(behaviour: Classify, version: &'static str) -> Vec<u8> {
    Fixture {
        version,
        ..Fixture::classifier(behaviour)
    }
    .build()
}

/// A set with plugin `retry` (version 1: [`Classify::Policy`]) bound to classify, under
/// `policy`, on a manual clock.
fn set(tag: &str, policy: Value, seed: u64) -> (Arc<PluginSet>, Arc<ManualClock>, PathBuf) {
    let dir = crate::scratch(&format!("rollout-{tag}"));
    let path = dir.join("retry.wasm");
    std::fs::write(&path, component(Classify::Policy, "1.0.0")).expect("write");
    let config = PluginConfig {
        plugins: vec![PluginSpec {
            name: "retry".to_owned(),
            path: path.clone(),
            sha256: None,
            settings: Settings::default(),
            policies: Policies::default(),
            rollout: rollout::parse(&policy, "rollout").expect("a rollout policy"),
            oci: None,
        }],
        bindings: [(Capability::Classifier, "retry".to_owned())].into(),
    };
    let clock = Arc::new(ManualClock::new(start()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let set = PluginSet::load(
        Runtime::new().expect("runtime"),
        config,
        dyn_clock,
        Some(seed),
    )
    .expect("set");
    (set, clock, path)
}

/// `set`'s classification of an HTTP failure with `status`.
pub fn classify(set: &PluginSet, status: u16) -> Decision {
    let object = json!({});
    set.classify(&Failure {
        kind: FailureKind::Http,
        status: Some(status),
        reason: None,
        message: "boom",
        retry_after: None,
        stage: "pod-ready",
        step: 0,
        attempt: 0,
        object: &object,
        binding: None,
    })
}

/// How many classifications `plugin` was asked for.
pub fn calls(plugin: &kstage::plugin::Plugin) -> u64 {
    plugin
        .stats(Capability::Classifier)
        .calls
        .load(Ordering::Relaxed)
}

fn version(set: &PluginSet) -> String {
    set.plugin("retry").expect("serving").info().version.clone()
}

#[test]
fn a_version_failing_more_calls_than_allowed_is_rolled_back_and_not_tried_again() {
    let policy =
        json!({"canary": 50, "analysis": {"minCalls": 20, "maxErrorRate": 0.1, "duration": "1h"}});
    let (set, _clock, path) = set("errors", policy, 7);
    let bad = component(Classify::TrapOn503, "2.0.0");
    let report = set.replace("retry", &bad);
    assert_eq!(report.canaries, ["retry"], "{report:?}");
    assert!(
        report.swapped.is_empty(),
        "analysed, not swapped: {report:?}"
    );
    assert_eq!(version(&set), "1.0.0", "the serving version serves on");

    let mut backoffs = 0;
    for _ in 0..200 {
        // A trapping canary fails its decision (policy `fail`): backoff, as version 1
        // answers a 503. The answers cannot tell; the figures can.
        if classify(&set, 503) == Decision::Backoff {
            backoffs += 1;
        }
    }
    assert_eq!(backoffs, 200);
    let [report] = set.rollouts().try_into().expect("one rollout");
    let Phase::Settled(verdict) = &report.phase else {
        panic!("decided: {report:?}")
    };
    assert_eq!(verdict.outcome, Outcome::RolledBack);
    assert!(
        verdict.message.contains("above maxErrorRate 10%"),
        "{}",
        verdict.message
    );
    // Decided at the 20th call of the new version, every one of which failed; then
    // nothing more was counted.
    assert_eq!(report.canary_figures.calls, 20, "{report:?}");
    assert_eq!(report.canary_figures.errors, 20, "{report:?}");
    assert!(report.stable_figures.calls >= 1, "{report:?}");
    let serving = set.plugin("retry").expect("v1");
    let (before, after_verdict) = (calls(&serving), calls(&report.canary));
    classify(&set, 503);
    assert_eq!(
        calls(&report.canary),
        after_verdict,
        "after the roll-back the new version gets no call"
    );
    assert_eq!(calls(&serving), before + 1);

    let settled = set.settle_rollouts();
    assert_eq!(settled.settled.len(), 1, "{settled:?}");
    assert!(set.rollouts().is_empty());
    assert_eq!(version(&set), "1.0.0");
    assert_eq!(set.metrics().rolled_back.load(Ordering::Relaxed), 1);
    // The same content again (the file rewritten, a reload) is not analysed again...
    std::fs::write(&path, &bad).expect("write");
    let again = set.reload();
    assert!(
        again.canaries.is_empty() && again.swapped.is_empty(),
        "{again:?}"
    );
    // ... another one is.
    let fixed = set.replace("retry", &component(Classify::Policy, "2.0.1"));
    assert_eq!(fixed.canaries, ["retry"], "{fixed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_good_version_is_promoted_once_its_time_is_up() {
    let policy =
        json!({"canary": 30, "analysis": {"minCalls": 10, "duration": "2m", "maxDisagreement": 0}});
    let (set, clock, _) = set("good", policy, 3);
    set.replace("retry", &component(Classify::Policy, "2.0.0"));
    for status in (0..100).map(|i| if i % 2 == 0 { 429 } else { 500 }) {
        classify(&set, status);
    }
    let [report] = set.rollouts().try_into().expect("one rollout");
    assert_eq!(report.phase, Phase::Analysing, "the time is not up");
    assert!(report.canary_figures.calls >= 10, "{report:?}");
    assert_eq!(report.canary_figures.errors, 0);
    assert_eq!(
        report.canary_figures.compared, report.canary_figures.calls,
        "every answer of the new version compared"
    );
    assert_eq!(report.canary_figures.disagreements, 0);
    assert_eq!(set.settle_rollouts().settled, []);

    clock.advance(chrono::TimeDelta::seconds(120));
    // No further call is needed: the periodic settling (what `kstage run --config`
    // runs) decides.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let task = kstage::plugin::watch::settle_rollouts(
        set.clone(),
        kstage::plugin::watch::ROLLOUT_CHECK,
        move |report| {
            let _ = tx.send(report.clone());
        },
    );
    let settled = tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("settled within a minute of (paused) time")
        .expect("a report");
    task.abort();
    let [(name, verdict)] = settled.settled.try_into().expect("one verdict");
    assert_eq!(name, "retry");
    assert_eq!(verdict.outcome, Outcome::Promoted, "{}", verdict.message);
    assert_eq!(version(&set), "2.0.0");
    assert!(set.rollouts().is_empty());
    assert_eq!(
        classify(&set, 429),
        Decision::RetryAfter(Duration::from_millis(1234))
    );
}

#[test]
fn shadow_mode_never_changes_an_answer_and_counts_every_disagreement() {
    let policy = json!({"canary": 100, "mode": "shadow",
                        "analysis": {"minCalls": 50, "maxDisagreement": 0.5, "duration": "1h"}});
    let (set, _, _) = set("shadow", policy, 1);
    set.replace("retry", &component(Classify::Refresh, "2.0.0"));
    for i in 0..60 {
        let status = if i % 3 == 0 { 429 } else { 500 };
        let expected = if status == 429 {
            Decision::RetryAfter(Duration::from_millis(1234))
        } else {
            Decision::Backoff
        };
        // Version 2 always says refresh; the serving version's answer is what counts.
        assert_eq!(classify(&set, status), expected, "call {i}");
    }
    let [report] = set.rollouts().try_into().expect("one rollout");
    let Phase::Settled(verdict) = &report.phase else {
        panic!("decided: {report:?}")
    };
    assert_eq!(verdict.outcome, Outcome::RolledBack);
    assert!(
        verdict.message.starts_with("disagreement 100% (50 of 50"),
        "{}",
        verdict.message
    );
    assert_eq!(report.stable_figures.calls, 50, "both asked every call");
    assert_eq!(report.canary_figures.calls, 50);
}

#[test]
fn a_seeded_set_sends_the_same_calls_to_the_new_version() {
    let picks = |seed| {
        let policy = json!({"canary": 25, "analysis": {"minCalls": 1000000}});
        let (set, _, _) = set(&format!("seed-{seed}"), policy, seed);
        set.replace("retry", &component(Classify::Refresh, "2.0.0"));
        (0..200)
            .map(|_| classify(&set, 500) == Decision::Refresh)
            .collect::<Vec<bool>>()
    };
    let first = picks(11);
    assert_eq!(first, picks(11), "same seed, same calls");
    assert_ne!(first, picks(12), "another seed, other calls");
    let taken = first.iter().filter(|p| **p).count();
    assert!(
        (25..=75).contains(&taken),
        "about a quarter of 200: {taken}"
    );
}

#[test]
fn a_canary_of_zero_swaps_at_once() {
    let (set, _, _) = set("zero", json!({"canary": 0}), 1);
    let report = set.replace("retry", &component(Classify::Refresh, "2.0.0"));
    assert_eq!(report.swapped, ["retry"]);
    assert!(set.rollouts().is_empty());
    assert_eq!(version(&set), "2.0.0");
}
