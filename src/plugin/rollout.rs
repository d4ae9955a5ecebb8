//! Canary rollout of a plugin's new version: a share of the calls goes to it (or, in
//! shadow mode, is repeated on it with the serving version's answer used) while an
//! analysis compares both versions; then the new version is promoted or rolled back.
//!
//! ```yaml
//! rollout:                 # on a --config entry or a StagePlugin's spec, same fields
//!   canary: 20             # % of calls (0, the default: a new version is swapped in at once)
//!   mode: split            # split: the new version answers its share; shadow: it is
//!                          #   called on the same inputs, the serving version answers
//!   analysis:
//!     duration: 5m         # how long the analysis runs at least (default 5m)
//!     minCalls: 100        # the new version's calls needed before any verdict (default 100)
//!     maxErrorRate: 0.01   # failed calls / calls of the new version (default 0.01)
//!     maxLatencyRatio: 2   # p99 new / p99 serving, checked at the end (default: no limit)
//!     maxDisagreement: 0.1 # selector and classifier answers that differ from the
//!                          #   serving version's on the same input (default: no limit)
//! ```
//!
//! The verdict: as soon as the new version has made `minCalls` calls, an error rate or a
//! disagreement above its limit rolls it back; once `duration` has passed (and
//! `minCalls` were made), the latency ratio is checked and the version is promoted if it
//! holds. Until then both versions serve.
//!
//! Which calls go to the new version is drawn from a random source seeded like the
//! plugins' own (`kstage sim --seed`), so a simulation's rollout is reproducible; the
//! latencies are real time, so a verdict on `maxLatencyRatio` is not.
//!
//! A rollout's verdict is either applied by the plugin set at once (plugins of the
//! `--config` file, `kstage sim`) or, for StagePlugin resources, *proposed* and applied
//! once it is recorded in the resource's status, so that every replica follows the first
//! verdict written (`daemon::plugins`). A proposed roll-back sends every call to the
//! serving version at once; a proposed promotion keeps the split until it is applied.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use super::loaded::Plugin;
use crate::go::parse_go_duration;
use crate::rng::Rng;

/// How a new version takes the calls while it is analysed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The new version answers its share of the calls.
    #[default]
    Split,
    /// The new version is called on its share of the inputs too; only the serving
    /// version's answer is used.
    Shadow,
}

impl Mode {
    /// `split` or `shadow`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Split => "split",
            Mode::Shadow => "shadow",
        }
    }
}

/// The limits a new version must hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analysis {
    /// How long the analysis runs at least.
    pub duration: Duration,
    /// Calls of the new version needed before any verdict.
    pub min_calls: u64,
    /// Most failed calls per call of the new version.
    pub max_error_rate: f64,
    /// Most p99 latency of the new version per p99 of the serving one.
    pub max_latency_ratio: Option<f64>,
    /// Most selector/classifier answers that differ from the serving version's, per
    /// answer compared.
    pub max_disagreement: Option<f64>,
}

impl Default for Analysis {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(300),
            min_calls: 100,
            max_error_rate: 0.01,
            max_latency_ratio: None,
            max_disagreement: None,
        }
    }
}

/// A plugin's rollout policy.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rollout {
    /// The share of calls, in percent, the new version takes (0: swapped in at once).
    pub canary: u8,
    /// Split or shadow.
    pub mode: Mode,
    /// The limits.
    pub analysis: Analysis,
}

// `f64` limits come from a document and are checked finite and in range when parsed.
impl Eq for Rollout {}

impl Rollout {
    /// Whether a new version is analysed before it serves every call.
    pub fn analyses(&self) -> bool {
        self.canary > 0
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRollout {
    #[serde(default)]
    canary: Option<Value>,
    #[serde(default)]
    mode: Mode,
    #[serde(default)]
    analysis: Option<RawAnalysis>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAnalysis {
    #[serde(default)]
    duration: Option<String>,
    #[serde(default)]
    min_calls: Option<u64>,
    #[serde(default)]
    max_error_rate: Option<f64>,
    #[serde(default)]
    max_latency_ratio: Option<f64>,
    #[serde(default)]
    max_disagreement: Option<f64>,
}

/// Read a `rollout` field; `at` is the field's path for errors (`spec.rollout`).
pub fn parse(value: &Value, at: &str) -> Result<Rollout, String> {
    let raw: RawRollout = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
        match e.path().to_string().as_str() {
            "." => format!("{at}: {}", e.inner()),
            path => format!("{at}.{path}: {}", e.inner()),
        }
    })?;
    let canary = match &raw.canary {
        None => 0,
        Some(value) => percent(value)
            .ok_or_else(|| format!("{at}.canary: {value} is not a percentage from 0 to 100"))?,
    };
    let mut analysis = Analysis::default();
    if let Some(a) = raw.analysis {
        if let Some(text) = a.duration {
            let nanos = parse_go_duration(&text).filter(|n| *n > 0).ok_or_else(|| {
                format!("{at}.analysis.duration: {text:?} is not a positive duration")
            })?;
            analysis.duration = Duration::from_nanos(nanos as u64);
        }
        if let Some(n) = a.min_calls {
            analysis.min_calls = n.max(1);
        }
        let fraction = |field: &str, v: f64| {
            if v.is_finite() && (0.0..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(format!(
                    "{at}.analysis.{field}: {v} is not a fraction from 0 to 1"
                ))
            }
        };
        if let Some(v) = a.max_error_rate {
            analysis.max_error_rate = fraction("maxErrorRate", v)?;
        }
        if let Some(v) = a.max_disagreement {
            analysis.max_disagreement = Some(fraction("maxDisagreement", v)?);
        }
        if let Some(v) = a.max_latency_ratio {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "{at}.analysis.maxLatencyRatio: {v} is not a positive ratio"
                ));
            }
            analysis.max_latency_ratio = Some(v);
        }
    }
    Ok(Rollout {
        canary,
        mode: raw.mode,
        analysis,
    })
}

/// `20` or `"20%"`.
fn percent(value: &Value) -> Option<u8> {
    let n = match value {
        Value::Number(n) => n.as_u64()?,
        Value::String(s) => s.strip_suffix('%')?.trim().parse().ok()?,
        _ => return None,
    };
    u8::try_from(n).ok().filter(|n| *n <= 100)
}

/// Call latencies in buckets 9% wide (8 per doubling) from 1 ns to about 18 minutes.
struct Latency {
    buckets: Box<[AtomicU64]>,
}

const SUB: u32 = 8;
const BUCKETS: usize = (41 * SUB) as usize;

impl Default for Latency {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Latency {
    fn index(nanos: u64) -> usize {
        let nanos = nanos.max(1);
        let octave = 63 - nanos.leading_zeros();
        let sub = if octave >= 3 {
            (nanos >> (octave - 3)) & u64::from(SUB - 1)
        } else {
            (nanos << (3 - octave)) & u64::from(SUB - 1)
        };
        ((octave * SUB) as usize + sub as usize).min(BUCKETS - 1)
    }

    /// The largest whole number of nanoseconds bucket `index` holds.
    fn bound(index: usize) -> Duration {
        let octave = index as u32 / SUB;
        let sub = u128::from(index as u32 % SUB);
        let end = ((u128::from(SUB) + sub + 1) << octave).div_ceil(u128::from(SUB));
        Duration::from_nanos(u64::try_from(end - 1).unwrap_or(u64::MAX))
    }

    fn observe(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[Self::index(nanos)].fetch_add(1, Ordering::Relaxed);
    }

    /// The 99th percentile (a bucket's upper bound), if anything was observed.
    fn p99(&self) -> Option<Duration> {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        // The smallest bucket below which at least 99% of the calls fall.
        let rank = (total * 99).div_ceil(100).max(1);
        let mut seen = 0;
        for (index, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Self::bound(index));
            }
        }
        None
    }
}

/// One version's figures during an analysis.
#[derive(Default)]
struct Figures {
    calls: AtomicU64,
    errors: AtomicU64,
    compared: AtomicU64,
    disagreements: AtomicU64,
    latency: Latency,
}

impl Figures {
    /// The counters (`p99` left out: it costs a scan of the buckets).
    fn counts(&self) -> Tally {
        Tally {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            compared: self.compared.load(Ordering::Relaxed),
            disagreements: self.disagreements.load(Ordering::Relaxed),
            p99: None,
        }
    }

    fn tally(&self) -> Tally {
        Tally {
            p99: self.latency.p99(),
            ..self.counts()
        }
    }
}

/// One version's figures, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    /// Calls made to it during the analysis.
    pub calls: u64,
    /// Of which failed (trap, timeout, memory, malformed or `err` answer).
    pub errors: u64,
    /// Answers of the new version compared with the serving version's (selector,
    /// classifier).
    pub compared: u64,
    /// Of which differed.
    pub disagreements: u64,
    /// The 99th percentile of the calls' run time (instantiation excluded).
    pub p99: Option<Duration>,
}

/// How an analysis ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The new version serves every call.
    Promoted,
    /// The serving version stays; the new one is dropped (and not tried again until
    /// its content changes).
    RolledBack,
    /// Another version replaced it before a verdict.
    Superseded,
}

impl Outcome {
    /// `Promoted`, `RolledBack`, `Superseded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Promoted => "Promoted",
            Outcome::RolledBack => "RolledBack",
            Outcome::Superseded => "Superseded",
        }
    }

    /// The reading of [`Outcome::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Promoted, Self::RolledBack, Self::Superseded]
            .into_iter()
            .find(|o| o.as_str() == text)
    }
}

/// A verdict and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What happens to the new version.
    pub outcome: Outcome,
    /// Which limit was crossed, or that all held.
    pub message: String,
}

/// Where an analysis stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Both versions serve.
    Analysing,
    /// A verdict waits to be recorded (StagePlugins) before it is applied.
    Proposed(Verdict),
    /// The verdict is applied.
    Settled(Verdict),
}

/// Which version answers a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The serving version alone.
    Stable,
    /// The new version answers (the serving one is asked too, to compare).
    Canary,
    /// The serving version answers, the new one is asked the same.
    Shadow,
}

const ROUTE_SPLIT: u8 = 0;
const ROUTE_STABLE: u8 = 1;
const ROUTE_CANARY: u8 = 2;

/// A new version under analysis beside the serving one.
pub struct Canary {
    /// The new version.
    pub plugin: Arc<Plugin>,
    /// The policy it is analysed under.
    pub rollout: Rollout,
    /// When the analysis began.
    pub started: DateTime<Utc>,
    /// Whether a verdict is proposed (StagePlugins) rather than applied at once.
    pub coordinated: bool,
    draw: Mutex<Rng>,
    stable: Figures,
    canary: Figures,
    phase: Mutex<Phase>,
    /// Whether figures are recorded (the phase is `Analysing`): read on every call.
    recording: AtomicBool,
    route: AtomicU8,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary")
            .field("plugin", &self.plugin)
            .field("rollout", &self.rollout)
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

impl Canary {
    /// Start analysing `plugin` at `now`; `draw` picks the calls it takes.
    pub fn new(
        plugin: Arc<Plugin>,
        rollout: Rollout,
        now: DateTime<Utc>,
        draw: Rng,
        coordinated: bool,
    ) -> Self {
        Self {
            plugin,
            rollout,
            started: now,
            coordinated,
            draw: Mutex::new(draw),
            stable: Figures::default(),
            canary: Figures::default(),
            phase: Mutex::new(Phase::Analysing),
            recording: AtomicBool::new(true),
            route: AtomicU8::new(ROUTE_SPLIT),
        }
    }

    /// Which version answers the next call.
    pub fn pick(&self) -> Pick {
        match self.route.load(Ordering::Acquire) {
            ROUTE_STABLE => Pick::Stable,
            ROUTE_CANARY => Pick::Canary,
            _ => {
                let draw = self
                    .draw
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .below(100);
                match (draw < u64::from(self.rollout.canary), self.rollout.mode) {
                    (false, _) => Pick::Stable,
                    (true, Mode::Split) => Pick::Canary,
                    (true, Mode::Shadow) => Pick::Shadow,
                }
            }
        }
    }

    /// Whether calls are still being analysed (figures recorded).
    pub fn analysing(&self) -> bool {
        self.recording.load(Ordering::Acquire)
    }

    /// Record a call of the serving version (`stable`) or of the new one.
    pub fn record(&self, stable: bool, took: Duration, failed: bool) {
        if !self.analysing() {
            return;
        }
        let figures = if stable { &self.stable } else { &self.canary };
        figures.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            figures.errors.fetch_add(1, Ordering::Relaxed);
        }
        figures.latency.observe(took);
    }

    /// Record that the new version's answer agreed with the serving version's or not.
    pub fn compare(&self, agreed: bool) {
        if !self.analysing() {
            return;
        }
        self.canary.compared.fetch_add(1, Ordering::Relaxed);
        if !agreed {
            self.canary.disagreements.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The figures of the serving and the new version.
    pub fn tallies(&self) -> (Tally, Tally) {
        (self.stable.tally(), self.canary.tally())
    }

    /// Where the analysis stands.
    pub fn phase(&self) -> Phase {
        self.phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Check the limits at `now`: a verdict reached now is proposed (coordinated) or
    /// settled, and returned.
    pub fn evaluate(&self, now: DateTime<Utc>) -> Option<Verdict> {
        if !self.analysing() {
            return None;
        }
        let p99s = || (self.stable.latency.p99(), self.canary.latency.p99());
        let verdict = judge(
            &self.rollout.analysis,
            self.canary.counts(),
            p99s,
            self.started,
            now,
        )?;
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if *phase != Phase::Analysing {
            return None;
        }
        self.recording.store(false, Ordering::Release);
        let route = match (verdict.outcome, self.coordinated) {
            (Outcome::Promoted, true) => ROUTE_SPLIT,
            (Outcome::Promoted, false) => ROUTE_CANARY,
            _ => ROUTE_STABLE,
        };
        self.route.store(route, Ordering::Release);
        *phase = if self.coordinated {
            Phase::Proposed(verdict.clone())
        } else {
            Phase::Settled(verdict.clone())
        };
        Some(verdict)
    }

    /// Apply `verdict` (recorded in the status, by this replica or another).
    pub fn settle(&self, verdict: Verdict) {
        let route = match verdict.outcome {
            Outcome::Promoted => ROUTE_CANARY,
            Outcome::RolledBack | Outcome::Superseded => ROUTE_STABLE,
        };
        self.route.store(route, Ordering::Release);
        self.recording.store(false, Ordering::Release);
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase::Settled(verdict);
    }
}

/// The verdict of `analysis` on the new version's counts and the `(serving, new)` p99
/// latencies (asked only once the time is up) at `now`, if there is one yet.
fn judge(
    analysis: &Analysis,
    canary: Tally,
    p99s: impl FnOnce() -> (Option<Duration>, Option<Duration>),
    started: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Verdict> {
    if canary.calls < analysis.min_calls {
        return None;
    }
    let back = |message: String| {
        Some(Verdict {
            outcome: Outcome::RolledBack,
            message,
        })
    };
    let rate = canary.errors as f64 / canary.calls as f64;
    if rate > analysis.max_error_rate {
        return back(format!(
            "error rate {} ({} of {} calls) is above maxErrorRate {}",
            percent_text(rate),
            canary.errors,
            canary.calls,
            percent_text(analysis.max_error_rate)
        ));
    }
    if let Some(max) = analysis.max_disagreement
        && canary.compared > 0
    {
        let rate = canary.disagreements as f64 / canary.compared as f64;
        if rate > max {
            return back(format!(
                "disagreement {} ({} of {} answers compared) is above maxDisagreement {}",
                percent_text(rate),
                canary.disagreements,
                canary.compared,
                percent_text(max)
            ));
        }
    }
    let elapsed = (now - started).to_std().unwrap_or(Duration::ZERO);
    if elapsed < analysis.duration {
        return None;
    }
    let mut held = format!("{} calls, error rate {}", canary.calls, percent_text(rate));
    if let Some(max) = analysis.max_latency_ratio
        && let (Some(old), Some(new)) = p99s()
    {
        let ratio = new.as_secs_f64() / old.as_secs_f64().max(1e-9);
        if ratio > max {
            return back(format!(
                "p99 latency {new:?} is {ratio:.2} times the serving version's {old:?}, above maxLatencyRatio {max}"
            ));
        }
        held.push_str(&format!(", p99 latency ratio {ratio:.2}"));
    }
    if canary.compared > 0 {
        held.push_str(&format!(
            ", {} of {} answers disagreed",
            canary.disagreements, canary.compared
        ));
    }
    Some(Verdict {
        outcome: Outcome::Promoted,
        message: format!("every limit held over {elapsed:?}: {held}"),
    })
}

fn percent_text(fraction: f64) -> String {
    let text = format!("{:.2}", fraction * 100.0);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}%")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_rollout_reads_with_defaults_and_names_its_mistakes() {
        let r = parse(&json!({"canary": "25%", "mode": "shadow"}), "spec.rollout").expect("ok");
        assert_eq!(r.canary, 25);
        assert_eq!(r.mode, Mode::Shadow);
        assert_eq!(r.analysis, Analysis::default());
        let r = parse(
            &json!({"canary": 10, "analysis": {"duration": "30s", "minCalls": 5, "maxErrorRate": 0.2,
                     "maxLatencyRatio": 1.5, "maxDisagreement": 0}}),
            "x",
        )
        .expect("ok");
        assert_eq!(r.analysis.duration, Duration::from_secs(30));
        assert_eq!(r.analysis.min_calls, 5);
        assert_eq!(r.analysis.max_latency_ratio, Some(1.5));
        assert_eq!(r.analysis.max_disagreement, Some(0.0));
        assert!(!parse(&json!({}), "x").expect("ok").analyses());
        for (value, expected) in [
            (
                json!({"canary": 101}),
                "spec.rollout.canary: 101 is not a percentage",
            ),
            (json!({"canary": "ten"}), "spec.rollout.canary:"),
            (
                json!({"mode": "mirror"}),
                "spec.rollout.mode: unknown variant",
            ),
            (json!({"canray": 5}), "unknown field `canray`"),
            (
                json!({"analysis": {"maxErrorRate": 5}}),
                "spec.rollout.analysis.maxErrorRate: 5 is not a fraction",
            ),
            (
                json!({"analysis": {"duration": "soon"}}),
                "spec.rollout.analysis.duration:",
            ),
            (
                json!({"analysis": {"maxLatencyRatio": 0}}),
                "maxLatencyRatio: 0 is not a positive ratio",
            ),
        ] {
            let err = parse(&value, "spec.rollout").expect_err(&value.to_string());
            assert!(err.contains(expected), "{value}: {err}");
        }
    }

    #[test]
    fn latency_buckets_bound_what_they_hold_within_a_ninth() {
        for nanos in [
            1u64,
            7,
            8,
            9,
            100,
            1_000,
            1_234,
            65_535,
            1 << 30,
            123_456_789,
        ] {
            let i = Latency::index(nanos);
            let bound = Latency::bound(i).as_nanos() as u64;
            assert!(bound >= nanos, "{nanos}: bucket {i} ends at {bound}");
            assert!(
                bound as f64 <= nanos as f64 * 1.126 + 1.0,
                "{nanos}: bucket {i} ends at {bound}"
            );
            if i > 0 {
                assert!(
                    (Latency::bound(i - 1).as_nanos() as u64) < nanos,
                    "{nanos}: bucket {i} is the first to hold it"
                );
            }
        }
        let l = Latency::default();
        assert_eq!(l.p99(), None);
        for _ in 0..99 {
            l.observe(Duration::from_micros(2));
        }
        l.observe(Duration::from_millis(5));
        let p99 = l.p99().expect("observed");
        assert!(p99 < Duration::from_micros(3), "99 of 100 at 2 µs: {p99:?}");
        l.observe(Duration::from_millis(5));
        let p99 = l.p99().expect("observed");
        assert!(p99 >= Duration::from_millis(5), "2 of 101 at 5 ms: {p99:?}");
    }

    fn tally(calls: u64, errors: u64, compared: u64, disagreements: u64, p99_us: u64) -> Tally {
        Tally {
            calls,
            errors,
            compared,
            disagreements,
            p99: Some(Duration::from_micros(p99_us)),
        }
    }

    fn judged(
        analysis: &Analysis,
        (stable, canary): (Tally, Tally),
        started: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Option<Verdict> {
        judge(analysis, canary, || (stable.p99, canary.p99), started, now)
    }

    #[test]
    fn the_verdict_waits_for_calls_and_time_and_names_the_limit_crossed() {
        let analysis = Analysis {
            duration: Duration::from_secs(60),
            min_calls: 10,
            max_error_rate: 0.1,
            max_latency_ratio: Some(2.0),
            max_disagreement: Some(0.2),
        };
        let t0 = DateTime::<Utc>::UNIX_EPOCH;
        let at = |s| t0 + chrono::TimeDelta::seconds(s);
        let stable = tally(100, 0, 0, 0, 10);
        // Too few calls: nothing, even with every call failed or the time up.
        assert_eq!(
            judged(&analysis, (stable, tally(9, 9, 0, 0, 10)), t0, at(90)),
            None
        );
        // Errors roll back before the time is up.
        let v = judged(&analysis, (stable, tally(10, 2, 0, 0, 10)), t0, at(1)).expect("verdict");
        assert_eq!(v.outcome, Outcome::RolledBack);
        assert!(
            v.message
                .contains("error rate 20% (2 of 10 calls) is above maxErrorRate 10%"),
            "{}",
            v.message
        );
        // At the limit is within it.
        assert_eq!(
            judged(&analysis, (stable, tally(10, 1, 0, 0, 10)), t0, at(1)),
            None
        );
        let v = judged(&analysis, (stable, tally(10, 0, 10, 3, 10)), t0, at(1)).expect("verdict");
        assert!(
            v.message.starts_with("disagreement 30% (3 of 10"),
            "{}",
            v.message
        );
        // Latency only once the time is up.
        assert_eq!(
            judged(&analysis, (stable, tally(10, 0, 0, 0, 30)), t0, at(59)),
            None
        );
        let v = judged(&analysis, (stable, tally(10, 0, 0, 0, 30)), t0, at(60)).expect("verdict");
        assert_eq!(v.outcome, Outcome::RolledBack);
        assert!(v.message.contains("maxLatencyRatio 2"), "{}", v.message);
        let v = judged(&analysis, (stable, tally(10, 1, 4, 0, 15)), t0, at(60)).expect("verdict");
        assert_eq!(v.outcome, Outcome::Promoted, "{}", v.message);
        assert!(v.message.contains("error rate 10%"), "{}", v.message);
    }
}
