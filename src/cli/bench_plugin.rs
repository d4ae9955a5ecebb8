//! `kstage plugin bench`: µs per call of each capability a plugin exports (the median
//! and the 99th percentile of calls timed one by one), measured in the same run as
//! kstage's built-in implementation of that capability, on the example pod and the
//! example pod Stages. Plugin figures include marshalling (the object is serialised to
//! JSON text per call, as the engine does).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::SystemClock;
use crate::decide::{Builtin, StepRenderer};
use crate::plugin::{Capability, Plugin, convert, types};
use crate::retry::{BuiltinClassifier, Classifier};
use crate::rng::Rng;
use crate::stage::{Stage, StageSet, Step};
use crate::template::{Renderer, StageEnv};

const STAGES: &str = concat!(
    include_str!("../../examples/stages/pod/pod-scheduled.yaml"),
    "\n---\n",
    include_str!("../../examples/stages/pod/pod-running.yaml"),
    "\n---\n",
    include_str!("../../examples/stages/pod/pod-succeeded.yaml"),
    "\n---\n",
    include_str!("../../examples/stages/pod/pod-removed.yaml"),
);

const POD: &str = include_str!("../../examples/objects/pods.yaml");

fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

/// Time each capability `plugin` exports beside the built-in one, `calls` calls each.
pub(super) fn run(plugin: &Plugin, calls: u32) -> anyhow::Result<ExitCode> {
    let clock = Arc::new(SystemClock);
    let env = StageEnv::new(clock, chrono::Utc::now(), env!("CARGO_PKG_VERSION"));
    let renderer = Renderer::new(Arc::new(env));
    let loaded = crate::stage::load::load_str(STAGES, &renderer)?;
    let stages = StageSet::new(loaded.stages);
    let pod = crate::yaml::documents(POD)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the example pod is missing"))?;
    let mut rng = Rng::seeded(1);
    let mut out = format!(
        "plugin {} ({} {}), {calls} calls per capability, each timed: median (p50) and p99\n",
        plugin.path().display(),
        plugin.info().name,
        plugin.info().version
    );
    out.push_str(&format!(
        "{:<12} {:>12} {:>12} {:>13} {:>13} {:>8}\n",
        "capability", "plugin p50", "plugin p99", "built-in p50", "built-in p99", "ratio"
    ));
    let mut line = |capability: Capability, wasm: Timing, native: Timing| {
        // A built-in answer in a few nanoseconds makes a ratio meaningless.
        let ratio = if native.p50 >= Duration::from_nanos(10) {
            format!("{:.1}x", wasm.p50.as_secs_f64() / native.p50.as_secs_f64())
        } else {
            "-".to_owned()
        };
        out.push_str(&format!(
            "{:<12} {:>12} {:>12} {:>13} {:>13} {:>8}\n",
            capability.as_str(),
            micros(wasm.p50),
            micros(wasm.p99),
            micros(native.p50),
            micros(native.p99),
            ratio
        ));
    };
    if plugin.has(Capability::Selector) {
        let matched = stages.matching(&pod);
        let candidates: Vec<types::Candidate> = matched
            .iter()
            .map(|s| types::Candidate {
                name: s.name.clone(),
                weight: s.weight.get(&pod).unwrap_or(0),
                delay_ms: None,
            })
            .collect();
        anyhow::ensure!(
            !candidates.is_empty(),
            "no example Stage matches the example pod"
        );
        let wasm = time_per_call(calls, || {
            let _ = plugin.select(&convert::object_json(&pod), &candidates);
        });
        let native = time_per_call(calls, || {
            let _ = stages.select(&pod, &mut rng);
        });
        line(Capability::Selector, wasm, native);
    }
    if plugin.has(Capability::Renderer) {
        let (stage, template) = first_template(&stages, &pod)
            .ok_or_else(|| anyhow::anyhow!("no example Stage with a template"))?;
        let wasm = time_per_call(calls, || {
            let _ = plugin.render(&stage.name, template.source(), &convert::object_json(&pod));
        });
        let native = time_per_call(calls, || {
            let _ = Builtin.render(stage, template, &pod);
        });
        line(Capability::Renderer, wasm, native);
    }
    if plugin.has(Capability::Classifier) {
        let failure = crate::bench::sample_failure(&pod);
        let wasm = time_per_call(calls, || {
            let _ = plugin.classify(&convert::failure(&failure));
        });
        let native = time_per_call(calls, || {
            let _ = BuiltinClassifier.classify(&failure);
        });
        line(Capability::Classifier, wasm, native);
    }
    super::print(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn first_template<'a>(
    stages: &'a StageSet,
    pod: &serde_json::Value,
) -> Option<(&'a Stage, &'a crate::template::Template)> {
    stages
        .matching(pod)
        .into_iter()
        .chain(stages.stages())
        .find_map(|stage| {
            stage.steps.iter().find_map(|step| match step {
                Step::Patch(p) => Some((&**stage, &p.template)),
                Step::Apply(a) => Some((&**stage, &a.template)),
                _ => None,
            })
        })
}

/// The median and the 99th percentile of calls timed one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Timing {
    p50: Duration,
    p99: Duration,
}

/// The `q`-quantile (0..=1, nearest rank) of `samples`, which must be sorted.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Time `f` `calls` times (at least once), each call on its own, after 100 warm-up calls.
fn time_per_call(calls: u32, mut f: impl FnMut()) -> Timing {
    for _ in 0..100 {
        f();
    }
    let mut samples: Vec<Duration> = (0..calls.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort_unstable();
    Timing {
        p50: quantile(&samples, 0.5),
        p99: quantile(&samples, 0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=200).map(Duration::from_micros).collect();
        assert_eq!(quantile(&samples, 0.5), Duration::from_micros(100));
        assert_eq!(quantile(&samples, 0.99), Duration::from_micros(198));
        assert_eq!(quantile(&samples[..1], 0.99), Duration::from_micros(1));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn every_call_is_timed() {
        let mut count = 0;
        let timing = time_per_call(1_000, || count += 1);
        assert_eq!(count, 1_100, "100 warm-up calls, then 1,000 timed");
        assert!(timing.p50 <= timing.p99);
    }
}
